"""The communicator: collectives over MRC queue pairs, run from a plan
(:mod:`mrc.coll.schedule`).

Each pair of ranks an algorithm needs gets ``channels`` connected QPs
once (every QP sprays over every plane), and each rank registers, per peer
and channel, ``slots`` receive slots of ``slot_bytes``. Flow control is
by credits:

- On entering a collective, a rank that will receive from a peer *grants*
  it every slot of every channel: a WRITE_IMM on channel 0 that carries the
  rank's description of the call (collective, dtype, op, root, counts,
  sequence number) into the peer's mailbox. The sender checks it against its
  own call before it sends a byte; a difference aborts the communicator.
- Each data WRITE_IMM goes into one granted slot and names it in its
  immediate (kind, sequence, message tag, slot). After the receiver has
  copied or reduced the slot into its work buffer it grants that slot again
  (a zero-length WRITE_IMM naming it), while more is to come on that channel.

So no write ever lands in memory the receiver has not granted, and a
receiver never holds more than its slots. Completions are polled per
piece (a slot's worth), never per packet.

Failure semantics: a path or plane that fails is MRC's business and never
surfaces here. A QP that errors, a rank whose process dies (its control
connection closes) or a call that differs across ranks aborts the
communicator: every rank raises :class:`CommAborted` naming the rank and the
cause, and every later call raises it again.
"""

from __future__ import annotations

import collections
import time

import numpy as np

from mrc._dp import lib
from mrc.coll import schedule
from mrc.coll.proto import (
    COLL_CODES,
    DESC_STRUCT,
    DTYPES,
    KIND_CREDIT,
    KIND_DATA,
    KIND_GRANT,
    MAILBOX,
    OPS,
    Desc,
    dtype_name,
    imm_pack,
    imm_unpack,
    reducer,
)
from mrc.coll.run import Run, same_memory
from mrc.errors import MrcError

MAX_SLOTS = 1 << 12
MAX_COUNT = 1 << 40              # elements in one call
DEFAULT_TIMEOUT = 120.0          # seconds a collective may take before it aborts
SETTLE_S = 1.0                   # seconds a failed QP waits for the control plane to say why
DIRECT_KEEP = 4                  # registrations of callers' arrays kept for the next call


class CollError(MrcError):
    """A collective was called wrongly (caught before any byte moves)."""


class CommAborted(MrcError):
    """The communicator was aborted: ``rank`` (the rank at fault, or None)
    and ``cause`` say why. Every later call raises it again."""

    def __init__(self, rank: int | None, cause: str) -> None:
        self.rank, self.cause = rank, cause
        super().__init__(f"communicator aborted: {'rank ' + str(rank) + ': ' if rank is not None else ''}{cause}")


def check_params(rank: int, nranks: int, channels: int, slots: int, slot_bytes: int) -> None:
    """A communicator's shape, checked before anything is built (CollError otherwise)."""
    if not 1 <= nranks <= 4096 or not 0 <= rank < nranks:
        raise CollError(f"rank {rank} of {nranks}: ranks are 0 to nranks - 1, and 1 to 4096 ranks")
    if not 1 <= channels <= 16:
        raise CollError(f"channels={channels}: 1 to 16 QPs per peer")
    if not 1 <= slots <= MAX_SLOTS // 2:
        raise CollError(f"slots={slots}: 1 to {MAX_SLOTS // 2} per channel")
    if slot_bytes < 64 or slot_bytes % 64 or slot_bytes > 64 << 20:
        raise CollError(f"slot_bytes={slot_bytes}: a multiple of 64 from 64 B to 64 MiB")


class Link:
    """One channel to one peer: a connected QP, our slots for what the peer
    sends (``region``), the peer's slots for what we send (``raddr``, ``rkey``)."""

    def __init__(self, peer: int, ch: int, qp, region, raddr: int, rkey: int) -> None:
        self.peer, self.ch, self.qp, self.region = peer, ch, qp, region
        self.raddr, self.rkey = raddr, rkey
        self.credits: collections.deque[int] = collections.deque()
        self.arrived = 0          # data messages received on this channel in the current call


class Handle:
    """A collective in flight: ``wait()`` returns its result, ``test()`` says
    whether it is done (and moves it on)."""

    def __init__(self, comm: Communicator, run: Run | None, result) -> None:
        self._comm, self._run, self._result = comm, run, result

    def test(self) -> bool:
        """Whether the collective has finished (progresses it once; raises what it failed with)."""
        if self._run is None:
            return True
        if self._comm._step(self._run):
            self._finish()
            return True
        return False

    def wait(self, timeout: float | None = None):
        """Block until done: the result (an array), CommAborted, or TimeoutError after
        ``timeout`` seconds (the call goes on; the communicator's own timeout aborts it)."""
        end = None if timeout is None else time.monotonic() + timeout
        while not self.test():
            if end is not None and time.monotonic() > end:
                raise TimeoutError(f"the collective is not done after {timeout:g} s")
            self._comm.net.wait(self._comm, 0.05)
        return self._result

    def _finish(self) -> None:
        run, self._run = self._run, None
        self._result = run.finish()


class Communicator:
    """N ranks over MRC. ``net`` connects the QPs and carries the control
    plane: :class:`mrc.coll.net.FabricNet` (one process per host, real
    ports) or :class:`mrc.coll.memworld.MemWorld` (every rank in one process,
    the in-memory link). :func:`mrc.coll.init` makes one on real ports.

    Every collective takes a contiguous numpy array of float16, float32,
    float64, int32, int64 or :data:`mrc.coll.proto.BFLOAT16` (its sums need
    ``mrc.torch``) and returns a new array (or fills ``out``); with
    ``async_op=True`` it returns a :class:`Handle`, and a
    :class:`mrc.coll.progress.Progress` moves calls on by itself."""

    def __init__(self, rank: int, nranks: int, net, channels: int = 2, slots: int = 8, slot_bytes: int = 1 << 19,
                 timeout: float = DEFAULT_TIMEOUT) -> None:
        check_params(rank, nranks, channels, slots, slot_bytes)
        self.rank, self.nranks, self.net = rank, nranks, net
        self.channels, self.slots, self.slot_bytes, self.timeout = channels, slots, slot_bytes, timeout
        self.links: dict[tuple[int, int], Link] = {}
        self.by_qpn: dict[int, Link] = {}
        self.seq = 0
        self._abort: CommAborted | None = None
        self._run: Run | None = None
        self._grants: dict[int, collections.deque] = collections.defaultdict(collections.deque)
        self._late: list = []           # completions of a later call that came in early (grants)
        self._wbuf = None
        self._wmr = None
        self._direct: collections.OrderedDict = collections.OrderedDict()
        self._ctl_src = None
        self.stats = {"calls": 0, "bytes_sent": 0, "qp_errors": 0}
        self.bytes_to: collections.Counter = collections.Counter()   # data bytes sent, per peer
        self.net.attach(self)

    # ----------------------------------------------------------------- memory
    def region_bytes(self) -> int:
        """Bytes of one channel's receive region: the slots, then two mailbox entries."""
        return self.slots * self.slot_bytes + 2 * MAILBOX

    def _work(self, n: int, dtype: np.dtype) -> np.ndarray:
        need = max(64, n * dtype.itemsize)
        if self._wbuf is None or len(self._wbuf) < need:
            size = 1 << (need - 1).bit_length()
            if self._wmr is not None:
                self._wmr.close()
            self._wbuf = bytearray(size)
            self._wmr = self.net.reg_mr(self, self._wbuf, remote_write=False)
        return np.frombuffer(self._wbuf, dtype=dtype, count=n)

    def _direct_mr(self, a: np.ndarray):
        """The registration of a caller's array used as a call's work buffer (the last DIRECT_KEEP are
        kept, by address and length, with a reference to their memory, so none is freed and reused while
        registered)."""
        key = (a.ctypes.data, a.nbytes)
        mr = self._direct.pop(key, None)
        if mr is None:
            mr = self.net.reg_mr(self, a.reshape(-1).view(np.uint8), remote_write=False)
            while len(self._direct) >= DIRECT_KEEP:
                _, old = self._direct.popitem(last=False)
                old.close()
        self._direct[key] = mr
        return mr

    def _ctl(self):
        if self._ctl_src is None:
            self._ctl_buf = bytearray(MAILBOX * self.nranks)
            self._ctl_src = self.net.reg_mr(self, self._ctl_buf, remote_write=False)
        return self._ctl_src

    # ---------------------------------------------------------------- checks
    def _check_abort(self, starting: bool = False) -> None:
        if self._abort is None:
            why = self.net.aborted(self, starting)
            if why is not None:
                self._abort = CommAborted(*why)
        if self._abort is not None:
            raise self._abort

    def abort(self, rank: int | None, cause: str) -> CommAborted:
        """Abort the communicator here and tell every rank; returns the error to raise."""
        if self._abort is None:
            self._abort = CommAborted(rank, cause)
            self.net.abort(self, rank, cause)
        return self._abort

    def _array(self, x, what: str = "the input") -> tuple[np.ndarray, np.dtype]:
        if not isinstance(x, np.ndarray):
            raise CollError(f"{what} must be a numpy array, not {type(x).__name__}")
        if x.dtype not in DTYPES:
            raise CollError(f"{what} has dtype {x.dtype}: use one of {', '.join(map(dtype_name, DTYPES))}")
        if not x.flags.c_contiguous:
            raise CollError(f"{what} is not contiguous: pass np.ascontiguousarray(x)")
        if x.size > MAX_COUNT:
            raise CollError(f"{what} has {x.size} elements: at most {MAX_COUNT} in one call")
        return x, x.dtype

    def _out(self, out, n: int, dtype: np.dtype):
        if out is None:
            return None
        self._array(out, "out")
        if out.size != n or out.dtype != dtype:
            raise CollError(f"out has {out.size} {dtype_name(out.dtype)}; this call gives {n} {dtype_name(dtype)}")
        return out

    @staticmethod
    def _op(op: str, dt: np.dtype):
        if op not in OPS:
            raise CollError(f"unknown op {op!r}: use {', '.join(OPS)}")
        f = reducer(dt, op)
        if f is None:
            raise CollError(f"{op} of {dtype_name(dt)} needs its arithmetic registered (import mrc.torch does "
                            f"for bfloat16)")
        return OPS[op][0], f

    # ----------------------------------------------------------- collectives
    def all_reduce(self, x, op: str = "sum", out=None, async_op: bool = False):
        """Every rank gets the element-wise ``op`` of every rank's ``x`` (ring:
        reduce-scatter then all-gather, pipelined by slot-sized chunks)."""
        x, dt = self._array(x)
        return self._start("all_reduce", x, dt, op, 0, x.size, self._out(out, x.size, dt), async_op)

    def reduce_scatter(self, x, op: str = "sum", out=None, async_op: bool = False):
        """Rank r gets block r (as ``numpy.array_split(x, nranks)`` cuts it) of the ``op`` over every rank's ``x``."""
        x, dt = self._array(x)
        n = schedule.blocks(x.size, self.nranks)[self.rank][1]
        return self._start("reduce_scatter", x, dt, op, 0, x.size, self._out(out, n, dt), async_op)

    def all_gather(self, x, out=None, async_op: bool = False):
        """Every rank gets every rank's ``x``, concatenated in rank order."""
        x, dt = self._array(x)
        return self._start("all_gather", x, dt, None, 0, x.size, self._out(out, x.size * self.nranks, dt), async_op)

    def broadcast(self, x, root: int = 0, async_op: bool = False):
        """``root``'s ``x`` lands in every rank's ``x`` (same size and dtype everywhere); returns ``x``."""
        x, dt = self._array(x)
        if not isinstance(root, int) or not 0 <= root < self.nranks:
            raise CollError(f"root {root!r} is not a rank of this communicator (0 to {self.nranks - 1})")
        return self._start("broadcast", x, dt, None, root, x.size, x, async_op)

    def all_to_all(self, x, out=None, async_op: bool = False):
        """``x`` is ``nranks`` equal blocks; block j goes to rank j, and rank i's block r lands at block i."""
        x, dt = self._array(x)
        if x.size % self.nranks:
            raise CollError(f"all_to_all of {x.size} elements over {self.nranks} ranks: the input must be "
                            f"{self.nranks} equal blocks")
        return self._start("all_to_all", x, dt, None, 0, x.size, self._out(out, x.size, dt), async_op)

    def all_to_all_v(self, x, send_counts, recv_counts, out=None, async_op: bool = False):
        """MoE's exchange: ``send_counts[j]`` elements of ``x`` (in rank order) go to
        rank j; ``recv_counts[i]`` elements come from rank i, concatenated in rank order."""
        x, dt = self._array(x)
        sc, rc = self._counts(send_counts, "send_counts"), self._counts(recv_counts, "recv_counts")
        if sum(sc) != x.size:
            raise CollError(f"send_counts add up to {sum(sc)}, but the input has {x.size} elements")
        return self._start("all_to_all_v", x, dt, None, 0, x.size, self._out(out, sum(rc), dt), async_op,
                           counts=(sc, rc))

    def _counts(self, c, what: str) -> list[int]:
        try:
            c = [int(v) for v in c] if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in c) \
                else None
        except TypeError:
            c = None
        if c is None or len(c) != self.nranks or any(v < 0 or v > MAX_COUNT for v in c):
            raise CollError(f"{what} must be {self.nranks} whole numbers from 0 to {MAX_COUNT}")
        return c

    def barrier(self) -> None:
        """Every rank has reached this point (an all-reduce of one int32)."""
        self.all_reduce(np.zeros(1, np.int32))

    # ------------------------------------------------------------------ runs
    def _start(self, coll: str, x: np.ndarray, dt: np.dtype, op: str | None, root: int, count: int, out,
               async_op: bool, counts=None):
        self._check_abort(starting=True)
        if self._run is not None:
            raise CollError("a collective is still in flight on this communicator: wait for its handle first")
        opcode, ufunc = self._op(op, dt) if op is not None else (0, None)
        sc, rc = counts or (None, None)
        p = schedule.plan(coll, self.nranks, self.rank, count, root, sc, rc)
        self.seq += 1
        self.stats["calls"] += 1
        desc = Desc(self.seq, COLL_CODES[coll], DTYPES[dt], opcode, root, count if coll != "all_to_all_v" else 0, 0,
                    self.nranks, self.rank)
        self.net.ensure(self, sorted(set(p.send_to) | set(p.recv_from)))
        run = Run(self, p, desc, dt, ufunc, out)
        for peer in p.recv_from:  # no data of this call can have come yet: it waits for our grant
            for c in range(self.channels):
                self.links[(peer, c)].arrived = 0
        w = run.w
        flat = x.reshape(-1)
        if coll == "broadcast":
            if self.rank == root and not same_memory(w[:count], flat):
                w[:count] = flat
        elif not same_memory(w[p.in_off:p.in_off + flat.size], flat):
            w[p.in_off:p.in_off + flat.size] = flat
        for src, dst, n in p.local:
            w[dst:dst + n] = w[src:src + n]
        self._run = run
        try:
            for peer in p.recv_from:
                if run.recvq.get(peer):  # only where data will come (Run.granted)
                    self._grant(run, peer)
        except BaseException:
            self._run = None
            raise
        h = Handle(self, run, None)
        if async_op:
            return h
        return h.wait()

    def _grant(self, run: Run, peer: int) -> None:
        d = Desc(**{**run.desc.__dict__, "pair": run.p.received_from(peer)})
        src = self._ctl()
        off = peer * MAILBOX
        self._ctl_buf[off:off + DESC_STRUCT.size] = d.pack()
        link = self.links[(peer, 0)]
        mailbox = link.raddr + self.slots * self.slot_bytes + (run.seq & 1) * MAILBOX
        link.qp.post_write(src, off, DESC_STRUCT.size, mailbox, link.rkey, wr_id=(KIND_GRANT << 60) | peer,
                           imm=imm_pack(KIND_GRANT, run.seq, 0, 0))
        run.outstanding += 1

    def _step(self, run: Run) -> bool:
        """Move ``run`` on: completions, placements, sends. True when it is done."""
        try:
            self._check_abort()
            if time.monotonic() > run.deadline:
                waiting = sorted(run.waiting_for())
                raise self.abort(waiting[0] if waiting else None, f"call {run.seq} ({run.p.coll}) took over "
                                 f"{self.timeout:g} s; rank {self.rank} still waits for rank(s) "
                                 f"{', '.join(map(str, waiting)) or 'none'}")
            # the ranks gone before this poll: a rank says bye after its last writes were acknowledged, so their
            # completions are in the CQ by then (a bye taken after the poll could pass data still unpolled)
            gone = set(self.net.gone())
            self._poll(run)
            self._place(run)
            self._send(run)
            if gone:  # a rank that closed its communicator finished its calls: one this call still waits for did not
                waiting = run.waiting_for()
                if waiting & gone:
                    self._check_abort()  # an abort that came before the bye says why
                    left = min(waiting & gone)
                    raise self.abort(left, f"rank {left} closed its communicator while call {run.seq} "
                                           f"({run.p.coll}) waited for it")
            if run.finished():
                self._run = None
                return True
            return False
        except CommAborted:
            self._run = None
            raise

    def _poll(self, run: Run) -> None:
        repost: dict[int, int] = collections.defaultdict(int)
        for wc in self.net.poll(self):
            link = self.by_qpn.get(wc.qpn)
            if not wc.ok:
                self.stats["qp_errors"] += 1
                peer = link.peer if link else None
                # a QP fails when its peer's process is gone, and the control plane says which rank died: a
                # moment for that word, so that every rank names the rank at fault, not its own neighbour
                if self.net.settle(self, SETTLE_S) is not None:
                    self._check_abort()
                if wc.status == lib.MRC_WC_LOC_PROT_ERR:  # a peer's write found no region of ours: ours is gone
                    raise self.abort(self.rank, f"a write from rank {peer} found no region of rank {self.rank} to "
                                                f"land in (LOC_PROT_ERR: closed, or a wrong key)")
                raise self.abort(peer, f"the QP from rank {self.rank} to rank {peer} failed: {wc.status_words}")
            if wc.opcode == lib.MRC_WC_WRITE:   # a send of ours completed
                kind = wc.wr_id >> 60
                if kind == KIND_DATA:
                    i, k = (wc.wr_id >> 24) & 0xFFFFFFFFF, wc.wr_id & 0xFFFFFF
                    run.done[i][k] = 1
                    run.left -= 1
                run.outstanding -= 1
                continue
            if link is None:
                continue
            repost[link.qp.qpn] += 1
            kind, seq4, tag, slot = imm_unpack(wc.imm_data)
            if kind == KIND_GRANT:
                base = self.slots * self.slot_bytes + ((seq4 & 1) * MAILBOX)
                d = Desc.unpack(bytes(link.region.buf[base:base + DESC_STRUCT.size]))
                self._grants[link.peer].append(d)
            elif kind == KIND_CREDIT:
                if seq4 == run.seq & 0xF and slot < self.slots:
                    link.credits.append(slot)
            elif kind == KIND_DATA:
                if seq4 != run.seq & 0xF or slot >= self.slots:
                    raise self.abort(link.peer, f"rank {link.peer} wrote call {seq4} (mod 16) into slot {slot} "
                                                f"during call {run.seq}: the two ranks disagree on the calls")
                m = link.arrived * self.channels + link.ch
                link.arrived += 1
                if (m & 0xFFF) != tag:
                    raise self.abort(link.peer, f"message {m} from rank {link.peer} carries tag {tag}")
                run.arrivals[link.peer][m] = (slot, wc.byte_len, link)
        for qpn, n in repost.items():
            self.by_qpn[qpn].qp.post_recv([0] * n)
        # grants: the first from each peer we send to, checked against our own call
        for peer, ok in run.granted.items():
            if ok or not self._grants[peer]:
                continue
            d = self._grants[peer].popleft()
            self._check_grant(run, peer, d)
            run.granted[peer] = True
            for c in range(self.channels):
                link = self.links[(peer, c)]
                link.credits = collections.deque(range(self.slots))

    def _check_grant(self, run: Run, peer: int, d: Desc | None) -> None:
        mine = run.desc
        if d is None:
            raise self.abort(peer, f"rank {peer} sent a grant that is not a call description")
        if d.seq != mine.seq:
            raise self.abort(peer, f"rank {peer} is at call {d.seq} ({d.text()}) while rank {self.rank} is at "
                                   f"call {mine.seq} ({mine.text()}): every rank must make the same calls")
        if (d.coll, d.dtype, d.op, d.root, d.count, d.nranks) != (mine.coll, mine.dtype, mine.op, mine.root,
                                                                  mine.count, mine.nranks):
            raise self.abort(peer, f"rank {peer} made {d.text()}; rank {self.rank} made {mine.text()}: sizes, "
                                   f"dtypes, ops and roots must match on every rank")
        want = run.p.sent_to(peer)
        if d.pair != want:
            raise self.abort(peer, f"rank {peer} expects {d.pair} elements from rank {self.rank}, which sends it "
                                   f"{want} ({d.text()}): send_counts and recv_counts must agree")

    def _place(self, run: Run) -> None:
        w, isz = run.w, run.dtype.itemsize
        for peer, q in run.recvq.items():
            arr = run.arrivals[peer]
            while run.next_use[peer] < len(q):
                m = run.next_use[peer]
                got = arr.get(m)
                if got is None:
                    break
                i, k = q[m]
                if not run._ready(i, k):
                    break
                slot, nbytes, link = got
                off, cnt = run.pieces[i][k]
                if nbytes != cnt * isz:
                    raise self.abort(peer, f"rank {peer} sent {nbytes} bytes where {cnt * isz} were due")
                src = np.frombuffer(link.region.buf, dtype=run.dtype, count=cnt, offset=slot * self.slot_bytes)
                if run.p.xfers[i].reduce:
                    run.ufunc(w[off:off + cnt], src)
                else:
                    w[off:off + cnt] = src
                del arr[m]
                run.done[i][k] = 1
                run.left -= 1
                run.next_use[peer] = m + 1
                # the slot again, while the sender has more for this channel than it holds slots
                j = m // self.channels
                if j + self.slots < run.per_channel[peer][link.ch]:
                    link.qp.post_write(self._ctl(), 0, 0, link.raddr, link.rkey, wr_id=(KIND_CREDIT << 60),
                                       imm=imm_pack(KIND_CREDIT, run.seq, 0, slot))
                    run.outstanding += 1

    def _send(self, run: Run) -> None:
        isz = run.dtype.itemsize
        for peer, q in run.sendq.items():
            if not run.granted.get(peer):
                continue
            while run.next_send[peer] < len(q):
                m = run.next_send[peer]
                i, k = q[m]
                link = self.links[(peer, m % self.channels)]
                if not link.credits or not run._ready(i, k):
                    break
                slot = link.credits.popleft()
                off, cnt = run.pieces[i][k]
                link.qp.post_write(run.wmr, off * isz, cnt * isz, link.raddr + slot * self.slot_bytes, link.rkey,
                                   wr_id=(KIND_DATA << 60) | (i << 24) | k, imm=imm_pack(KIND_DATA, run.seq, m, slot))
                run.outstanding += 1
                self.stats["bytes_sent"] += cnt * isz
                self.bytes_to[peer] += cnt * isz
                run.next_send[peer] = m + 1

    def qp_counters(self) -> dict:
        """This rank's QPs' counters added up: packets, retransmissions, timer
        expiries, tail loss probes, ECN marks, trims and losses, and how many
        QPs left RTS."""
        keys = ("tx_packets", "rtx_packets", "timeouts", "tlp_probes", "ecn_marks", "trims", "losses")
        out = dict.fromkeys(keys, 0)
        out["qps_not_rts"] = 0
        for link in self.links.values():
            st = link.qp.stats()
            for k in keys:
                out[k] += st[k]
            out["qps_not_rts"] += st["state_name"] != "RTS"
        return out

    # ------------------------------------------------------------- lifetime
    def close(self) -> None:
        """Free the QPs and regions and leave the job (the other ranks are not aborted)."""
        self.net.detach(self)

    def __enter__(self) -> Communicator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
