"""Collectives over MRC: a communicator of N ranks, one per host, whose
collectives (all-reduce, reduce-scatter, all-gather, broadcast, all-to-all,
all-to-all-v) run over MRC queue pairs with credit flow control.
docs/coll.md describes the communicator, the credits and the failures."""
