"""Collectives over MRC: a communicator of N ranks, one per host, whose
collectives (all-reduce, reduce-scatter, all-gather, broadcast, all-to-all,
all-to-all-v) run over MRC queue pairs with credit flow control.
docs/coll.md describes the communicator, the credits and the failures.

>>> from mrc.coll import init                                      # doctest: +SKIP
>>> comm = init(rank, nranks, root_addr="fd6e::1", job="run-7")    # doctest: +SKIP
>>> total = comm.all_reduce(np.arange(4, dtype=np.float32))        # doctest: +SKIP
"""


def init(*args, **kw):
    """Join a job on real ports (:func:`mrc.coll.net.init`)."""
    from mrc.coll.net import init as _init

    return _init(*args, **kw)
