"""A progress engine: one thread that moves collectives on while their callers compute.

A :class:`mrc.coll.comm.Communicator` advances a call only while someone
tests or waits on its handle. A training step cannot wait: PyTorch's DDP
launches each gradient bucket's all-reduce while the backward pass still
runs. :class:`Progress` owns a net's communicators (one on real ports;
every rank of a :class:`mrc.coll.memworld.MemWorld`) and runs their calls
on a thread of its own, in the order they were submitted, one call in
flight per communicator, as every rank makes the same calls in the same
order. Nothing else may touch those communicators while it runs.

The thread sleeps in the net's wait (the completion queue's file
descriptor) while a call is in flight and on a condition while none is;
the data path's C code and numpy's reductions release the GIL, so the
caller's compute and the transfer overlap.

>>> import numpy as np
>>> from mrc.coll.memworld import MemWorld
>>> w = MemWorld(2)
>>> eng = Progress(w, w.comms)
>>> got = {}
>>> start = lambda c: c.all_reduce(np.ones(3, np.float32), async_op=True)
>>> for c in w.comms:
...     eng.submit(c, start, lambda r, k=c.rank: got.update({k: r}))
>>> eng.drain(10)
True
>>> [got[r].tolist() for r in (0, 1)]
[[2.0, 2.0, 2.0], [2.0, 2.0, 2.0]]
>>> eng.close(); w.close()
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable

from mrc.coll.comm import CollError, Communicator

WAIT_S = 0.05     # the longest sleep in the net's wait while a call is in flight (a completion wakes it sooner)


class Progress:
    """A thread that runs ``comms``' calls over ``net`` by itself (see the module's text)."""

    def __init__(self, net, comms: list[Communicator], name: str = "mrc-progress") -> None:
        self.net = net
        self.comms = list(comms)
        self._queues: dict[int, collections.deque] = {id(c): collections.deque() for c in self.comms}
        self._active: dict[int, tuple] = {}
        self._cv = threading.Condition()
        self._closing = False
        self.failures = 0
        self._thread = threading.Thread(target=self._loop, daemon=True, name=name)
        self._thread.start()

    def submit(self, comm: Communicator, start: Callable, done: Callable, failed: Callable | None = None) -> None:
        """Queue a call: ``start(comm)`` runs on the thread and returns a handle
        (``async_op=True``); ``done(result)`` once it finished, ``failed(exc)`` when
        it raised (or the engine closed first)."""
        with self._cv:
            if self._closing:
                raise CollError("the progress engine is closed")
            if id(comm) not in self._queues:
                raise CollError(f"rank {comm.rank}'s communicator is not one this engine moves")
            self._queues[id(comm)].append((start, done, failed))
            self._cv.notify()

    def pending(self) -> int:
        """Calls queued or in flight."""
        with self._cv:
            return len(self._active) + sum(len(q) for q in self._queues.values())

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until nothing is queued or in flight; False after ``timeout`` seconds."""
        with self._cv:
            return self._cv.wait_for(lambda: not self._active and not any(self._queues.values()), timeout)

    # ------------------------------------------------------------------ the thread
    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._closing and not self._active and not any(self._queues.values()):
                    self._cv.wait()
                if self._closing:
                    left = [item for q in self._queues.values() for item in q] + \
                           [item for _, item in self._active.values()]
                    for q in self._queues.values():
                        q.clear()
                    self._active.clear()
                    self._cv.notify_all()
                    break
                starts = [(c, self._queues[id(c)].popleft()) for c in self.comms
                          if id(c) not in self._active and self._queues[id(c)]]
            for c, item in starts:
                try:
                    h = item[0](c)
                except Exception as e:  # noqa: BLE001 (the call's error is its caller's)
                    self._fail(item, e)
                    continue
                with self._cv:
                    self._active[id(c)] = (h, item)
            for key, (h, item) in list(self._active.items()):
                try:
                    finished = h.test()
                except Exception as e:  # noqa: BLE001
                    with self._cv:
                        del self._active[key]
                    self._fail(item, e)
                    continue
                if finished:
                    with self._cv:
                        del self._active[key]
                    self._call(item[1], h._result)
            with self._cv:
                idle = not self._active
                if idle:
                    self._cv.notify_all()    # drain()
            if not idle:
                self.net.wait(self.comms[0], WAIT_S)
        for item in left:
            self._fail(item, CollError("the progress engine closed before this call ran"))

    def _fail(self, item, e: BaseException) -> None:
        self.failures += 1
        if item[2] is not None:
            self._call(item[2], e)

    def _call(self, f: Callable, arg) -> None:
        try:
            f(arg)
        except Exception:  # noqa: BLE001 (a callback's failure must not stop every later call)
            self.failures += 1

    def close(self, timeout: float = 10.0) -> None:
        """Stop the thread; a call still queued or in flight fails with CollError."""
        with self._cv:
            self._closing = True
            self._cv.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
