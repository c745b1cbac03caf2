"""The state of one collective call on one rank: its plan cut into
slot-sized pieces, the streams per peer, what has arrived and what is done
(:mod:`mrc.coll.comm` moves it on). Where the call's result is its whole
work buffer and the caller gave ``out``, ``out`` is the work buffer.
``comm`` is the :class:`mrc.coll.comm.Communicator` (not imported: it imports this)."""

from __future__ import annotations

import collections
import time

import numpy as np

from mrc.coll import schedule
from mrc.coll.proto import Desc

DIRECT_MIN_BYTES = 1 << 20       # a call's ``out`` is its work buffer from this size (smaller: copied)


def same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays are the same bytes (a copy between them would be a no-op)."""
    return a.ctypes.data == b.ctypes.data and a.nbytes == b.nbytes


class Run:
    """The state of one call on one rank."""

    def __init__(self, comm, p: schedule.Plan, desc: Desc, dtype: np.dtype, ufunc, out) -> None:
        self.p, self.desc, self.dtype, self.ufunc = p, desc, dtype, ufunc
        self.seq = desc.seq
        self.piece = comm.slot_bytes // dtype.itemsize
        # in place: where the result is the whole work buffer, the caller's ``out`` is the work buffer (its
        # own registration, kept for the next call on the same memory): no copy in for an all-reduce in
        # place, none out for any such call. Peers never write it: their data lands in our slots
        self.direct = out is not None and p.out_off == 0 and p.out_count == p.work == out.size and \
            out.flags.writeable and p.work * dtype.itemsize >= DIRECT_MIN_BYTES
        if self.direct:
            self.w, self.wmr = out.reshape(-1), comm._direct_mr(out)
        else:
            self.w = comm._work(p.work, dtype)
            self.wmr = comm._wmr
        self.out = out
        self.deadline = time.monotonic() + comm.timeout
        self.pieces = [schedule.pieces(x, self.piece) for x in p.xfers]
        self.done = [bytearray(len(pc)) for pc in self.pieces]       # 1: sent and completed / received and placed
        # the streams: per peer, (xfer, piece) in schedule order
        self.sendq: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)
        self.recvq: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)
        for i, x in enumerate(p.xfers):
            q = self.sendq if x.send else self.recvq
            q[x.peer] += [(i, k) for k in range(len(self.pieces[i]))]
        self.next_send = dict.fromkeys(self.sendq, 0)
        self.next_use = dict.fromkeys(self.recvq, 0)
        self.arrivals: dict[int, dict] = collections.defaultdict(dict)  # peer -> m -> (slot, bytes, link)
        # grants pass only where data will: a peer this call sends nothing to (or gets nothing from: an
        # element count under the number of ranks leaves blocks empty) is not waited for and not granted.
        # Else a receiver with nothing to wait for could run two calls ahead of its sender and write its
        # grant over the one of the same parity the sender had not read yet (reduce_scatter of 1 element
        # on 4 ranks: "rank 1 is at call 5 while rank 0 is at call 3")
        self.granted = {peer: False for peer in p.send_to if self.sendq.get(peer)}
        self.deps = schedule.dependencies(p)
        self.outstanding = 0
        self.left = sum(len(pc) for pc in self.pieces)
        # grants expected per channel: how many data messages each channel will carry from each peer
        C = comm.channels
        self.per_channel = {peer: [len(range(c, len(q), C)) for c in range(C)] for peer, q in self.recvq.items()}

    # dependencies ---------------------------------------------------------
    def _ready(self, i: int, k: int) -> bool:
        off, cnt = self.pieces[i][k]
        for j in self.deps[i]:
            y = self.p.xfers[j]
            lo, hi = max(off, y.off), min(off + cnt, y.off + y.count)
            if lo >= hi:
                continue
            for kk in range((lo - y.off) // self.piece, (hi - 1 - y.off) // self.piece + 1):
                if not self.done[j][kk]:
                    return False
        return True

    def waiting_for(self) -> set[int]:
        """The peers whose data or grant this call still waits for."""
        return ({peer for peer, q in self.recvq.items() if self.next_use[peer] < len(q)} |
                {peer for peer, g in self.granted.items() if not g})

    def finished(self) -> bool:
        """Whether every piece is sent and placed, every send completed and every grant in."""
        return self.left == 0 and self.outstanding == 0 and all(self.granted.values())

    def finish(self):
        """The call's result: ``out`` filled (or the work buffer itself), else a new array."""
        p, w = self.p, self.w
        if self.direct:
            return self.out
        res = w[p.out_off:p.out_off + p.out_count]
        if self.out is not None:
            self.out[...] = res.reshape(self.out.shape)
            return self.out
        return res.copy()
