"""Every rank of a job in one process, over the in-memory link (csrc/sim/simlink.c):
rootless, deterministic for a seed, and what the tests run the
communicator on. The product runs over real ports (:mod:`mrc.coll.net`).

>>> import numpy as np
>>> w = MemWorld(3)
>>> xs = [np.arange(5, dtype=np.float32) + r for r in range(3)]
>>> [y.tolist() for y in w.run(lambda c: c.all_reduce(xs[c.rank], async_op=True))][0]
[3.0, 6.0, 9.0, 12.0, 15.0]
>>> w.close()
"""

from __future__ import annotations

from mrc.coll.comm import CommAborted, Communicator, Link
from mrc.core import QPAttr
from mrc.manual import ManualContext
from mrc.simlink import Sim


class MemWorld:
    """``nranks`` communicators over one in-memory link of ``planes`` x
    ``per_plane`` paths. :meth:`run` starts a call on every live rank and
    moves virtual time until all are done."""

    def __init__(self, nranks: int, planes: int = 2, per_plane: int = 2, seed: int = 1, **comm_kw) -> None:
        self.sim = Sim(planes=planes, per_plane=per_plane, seed=seed)
        self.planes = planes
        self.ctxs = [ManualContext(planes=planes, seed=seed * 1000 + r + 1) for r in range(nranks)]
        for c in self.ctxs:
            self.sim.attach(c)
        self.dead: set[int] = set()
        self.abort_info: tuple[int | None, str] | None = None
        self.comms = [Communicator(r, nranks, self, **comm_kw) for r in range(nranks)]

    # the net's side of a communicator ------------------------------------
    def attach(self, comm: Communicator) -> None:
        """Join the world (every rank is here already)."""
        pass

    def reg_mr(self, comm: Communicator, buf, remote_write: bool):
        """Register ``buf`` in this rank's context."""
        return self.ctxs[comm.rank].reg_mr(buf, remote_write=remote_write)

    def ensure(self, comm: Communicator, peers: list[int]) -> None:
        """Connect ``comm``'s rank with each of ``peers`` (both ends, every channel), once."""
        a = comm.rank
        for b in peers:
            if (b, 0) in comm.links:
                continue
            other = self.comms[b]
            depth = 2 * comm.slots + 8
            attr = QPAttr(planes=self.planes, ev_count=8 * self.planes, rq_depth=depth, sq_depth=depth)
            for ch in range(comm.channels):
                qa, qb = self.sim.connect(self.ctxs[a], self.ctxs[b], attr)
                ra = self.ctxs[a].reg_mr(bytearray(comm.region_bytes()), remote_write=True)
                rb = self.ctxs[b].reg_mr(bytearray(other.region_bytes()), remote_write=True)
                for c, peer, qp, mine, theirs in ((comm, b, qa, ra, rb), (other, a, qb, rb, ra)):
                    link = Link(peer, ch, qp, mine, theirs.addr, theirs.rkey)
                    c.links[(peer, ch)] = link
                    c.by_qpn[qp.qpn] = link
                    qp.post_recv([0] * (2 * c.slots + 4))

    def poll(self, comm: Communicator):
        """This rank's completions."""
        return self.ctxs[comm.rank].poll_cq()

    def wait(self, comm: Communicator, timeout: float) -> None:
        """Advance the in-memory link one step (the world's only clock)."""
        self.step()

    def aborted(self, comm: Communicator, starting: bool = False):
        """(rank, cause) once the world aborted, else None."""
        return self.abort_info

    def gone(self) -> set[int]:
        """Ranks that left: none in one process."""
        return set()

    def settle(self, comm: Communicator, timeout: float):
        """The abort, if any: a death is known at once in one process."""
        return self.abort_info  # one process: a death is known at once

    def abort(self, comm: Communicator, rank: int | None, cause: str) -> None:
        """Abort every rank with ``cause`` (the first abort wins)."""
        if self.abort_info is None:
            self.abort_info = (rank, cause)

    def detach(self, comm: Communicator) -> None:
        """Leave the world (nothing to release per rank)."""
        pass

    # driving ---------------------------------------------------------------
    def step(self, ns: int = 20_000) -> None:
        """Move virtual time on by up to ``ns`` (less when a completion comes)."""
        now = self.sim.now
        if self.sim.run(now + ns, stop_on_cqe=True) and self.sim.now == now:
            self.sim.run(now + ns)

    def kill(self, rank: int) -> None:
        """Rank ``rank``'s process dies: it is never moved on again, and the
        control plane tells the others (as the bootstrap's closed connection does)."""
        self.dead.add(rank)
        self.abort(self.comms[rank], rank, f"rank {rank} died (its control connection closed)")

    def run(self, call, budget_ns: int = 60 * 10**9, on_step=None) -> list:
        """``call(comm)`` on every live rank (it returns a Handle), then virtual
        time until every handle is done; the results in rank order (a rank
        that raised gives its exception, a dead rank None)."""
        handles: dict[int, object] = {}
        out: list = [None] * len(self.comms)
        for c in self.comms:
            if c.rank in self.dead:
                continue
            try:
                handles[c.rank] = call(c)
            except Exception as e:  # noqa: BLE001 (each rank's own error is its result)
                out[c.rank] = e
        start = self.sim.now
        while handles:
            for r, h in list(handles.items()):
                if r in self.dead:  # a dead rank is never moved on
                    del handles[r]
                    continue
                try:
                    if h.test():
                        out[r] = h._result
                        del handles[r]
                except CommAborted as e:
                    out[r] = e
                    del handles[r]
            if not handles:
                break
            if self.sim.now - start > budget_ns:
                for r in handles:
                    out[r] = TimeoutError(f"rank {r}: not done after {budget_ns / 1e9:g} s of virtual time")
                break
            if on_step:
                on_step(self)
            self.step()
        return out

    def close(self) -> None:
        """Drop every rank's links and the in-memory link."""
        for c in self.comms:
            c.links.clear()
        self.sim.close()
        for c in self.ctxs:
            c.close()
