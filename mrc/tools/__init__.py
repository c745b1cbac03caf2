"""The tools: the ``mrc`` command (:mod:`mrc.tools.cli`) and its subcommands,
each a module with ``add_parser(subparsers)`` and ``run(args)``. The library
(the core, the API, the communicator, the controller, the fabric, the web
view) never imports this package."""
