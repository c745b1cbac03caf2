"""The ``mrc`` subcommands: each module has ``add_parser(subparsers)`` and
``run(args)``; the work itself is imported in ``run``, so that ``mrc fabric``
never loads the data path's compiled module."""
