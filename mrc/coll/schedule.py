"""A collective as data: for one rank, the ordered transfers it makes.

Pure: no I/O, no verbs, no numpy. The same plan drives the communicator
over MRC (:mod:`mrc.coll.comm`) and the simulator's collective flows
(:func:`sim_messages`), so the algorithm exists once.

A plan works on one flat *work buffer* of ``work`` elements. Each transfer
sends a range of it to a peer, or receives a range from a peer and either
copies it in or reduces it in. ``local`` lists copies within the buffer that
need no network (a rank's own block of an all-gather or all-to-all). The
runner splits every transfer into pieces of at most one credit slot and
pipelines them: a piece of a send goes as soon as the pieces of earlier
receives that wrote its elements are in, so the reduction of one chunk
overlaps the transfer of the next.

>>> p = plan("all_reduce", nranks=3, rank=0, count=7)
>>> [(x.send, x.peer, x.off, x.count, x.reduce) for x in p.xfers][:2]
[(True, 1, 5, 2, False), (False, 2, 3, 2, True)]
"""

from __future__ import annotations

from dataclasses import dataclass, field

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all", "all_to_all_v")


@dataclass(frozen=True)
class Xfer:
    """One transfer: ``count`` elements at ``off`` of the work buffer, sent to
    ``peer`` or received from it (copied in, or reduced in with ``reduce``)."""

    send: bool
    peer: int
    off: int
    count: int
    reduce: bool = False


@dataclass
class Plan:
    """What one rank does in one collective."""

    coll: str
    nranks: int
    rank: int
    work: int                                  # elements of the work buffer
    xfers: list[Xfer] = field(default_factory=list)
    local: list[tuple[int, int, int]] = field(default_factory=list)  # (src off, dst off, count)
    send_to: tuple[int, ...] = ()              # peers this rank may send to (they grant it slots)
    recv_from: tuple[int, ...] = ()            # peers this rank may receive from (it grants them slots)
    in_off: int = 0                            # where the caller's input goes in the work buffer
    out_off: int = 0                           # where the result is read
    out_count: int = 0

    def sent_to(self, peer: int) -> int:
        """Elements this rank sends ``peer`` in all."""
        return sum(x.count for x in self.xfers if x.send and x.peer == peer)

    def received_from(self, peer: int) -> int:
        """Elements this rank receives from ``peer`` in the plan."""
        return sum(x.count for x in self.xfers if not x.send and x.peer == peer)


def blocks(count: int, n: int) -> list[tuple[int, int]]:
    """``count`` elements in ``n`` blocks as numpy.array_split cuts them: (offset, length)."""
    base, extra = divmod(count, n)
    out, off = [], 0
    for i in range(n):
        ln = base + (i < extra)
        out.append((off, ln))
        off += ln
    return out


def _ring(n: int, r: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return ((r + 1) % n,), ((r - 1) % n,)


def _ring_reduce_scatter(n: int, r: int, blk: list[tuple[int, int]]) -> list[Xfer]:
    """Ring reduce-scatter: at step s rank r sends block r-s-1 to r+1 and
    reduces block r-s-2 from r-1 into its own; after n-1 steps it holds
    block r summed over every rank."""
    nxt, prv = (r + 1) % n, (r - 1) % n
    out = []
    for s in range(n - 1):
        so, sc = blk[(r - s - 1) % n]
        ro, rc = blk[(r - s - 2) % n]
        out += [Xfer(True, nxt, so, sc), Xfer(False, prv, ro, rc, reduce=True)]
    return out


def _ring_all_gather(n: int, r: int, blk: list[tuple[int, int]]) -> list[Xfer]:
    """Ring all-gather: rank r starts with block r; at step t it sends block
    r-t to r+1 and copies in block r-t-1 from r-1."""
    nxt, prv = (r + 1) % n, (r - 1) % n
    out = []
    for t in range(n - 1):
        so, sc = blk[(r - t) % n]
        ro, rc = blk[(r - t - 1) % n]
        out += [Xfer(True, nxt, so, sc), Xfer(False, prv, ro, rc)]
    return out


def plan(coll: str, nranks: int, rank: int, count: int, root: int = 0,
         send_counts: list[int] | None = None, recv_counts: list[int] | None = None) -> Plan:
    """The plan of ``coll`` for ``rank`` of ``nranks``. ``count`` is, per
    collective: all_reduce, reduce_scatter, broadcast: the elements of the
    input; all_gather: each rank's contribution; all_to_all: the input
    (``nranks`` equal blocks, block j to rank j); all_to_all_v: ignored
    (``send_counts[j]`` elements go to rank j, ``recv_counts[i]`` come from
    rank i, in rank order)."""
    n, r = nranks, rank
    if coll not in COLLECTIVES:
        raise ValueError(f"unknown collective {coll!r}")
    if not 0 <= r < n:
        raise ValueError(f"rank {r} of {n}")
    if n == 1:
        if coll == "all_to_all_v":
            sc = (send_counts or [0])[0]
            return Plan(coll, n, r, 2 * sc, local=[(0, sc, sc)] if sc else [], out_off=sc, out_count=sc)
        work = count
        return Plan(coll, n, r, work, out_count=count)
    if coll == "all_reduce":
        blk = blocks(count, n)
        to, frm = _ring(n, r)
        return Plan(coll, n, r, count, _ring_reduce_scatter(n, r, blk) + _ring_all_gather(n, r, blk), [], to, frm,
                    out_count=count)
    if coll == "reduce_scatter":
        blk = blocks(count, n)
        to, frm = _ring(n, r)
        return Plan(coll, n, r, count, _ring_reduce_scatter(n, r, blk), [], to, frm, out_off=blk[r][0],
                    out_count=blk[r][1])
    if coll == "all_gather":
        blk = [(i * count, count) for i in range(n)]
        to, frm = _ring(n, r)
        return Plan(coll, n, r, n * count, _ring_all_gather(n, r, blk), [], to, frm, in_off=r * count,
                    out_count=n * count)
    if coll == "broadcast":
        if not 0 <= root < n:
            raise ValueError(f"root {root} of {n}")
        pos = (r - root) % n       # place in the chain root -> root+1 -> ... -> root-1
        xf = []
        if pos > 0:
            xf.append(Xfer(False, (r - 1) % n, 0, count))
        if pos < n - 1:
            xf.append(Xfer(True, (r + 1) % n, 0, count))
        return Plan(coll, n, r, count, xf, [], ((r + 1) % n,) if pos < n - 1 else (),
                    ((r - 1) % n,) if pos > 0 else (), out_count=count)
    if coll == "all_to_all":
        if count % n:
            raise ValueError(f"all_to_all of {count} elements over {n} ranks: not {n} equal blocks")
        c = count // n
        sends, recvs = [c] * n, [c] * n
    else:
        if send_counts is None or recv_counts is None or len(send_counts) != n or len(recv_counts) != n:
            raise ValueError(f"all_to_all_v needs {n} send counts and {n} receive counts")
        sends, recvs = list(send_counts), list(recv_counts)
    sdisp = [sum(sends[:j]) for j in range(n)]
    total_in = sum(sends)
    rdisp = [total_in + sum(recvs[:j]) for j in range(n)]
    xf = []
    # shifted order (r+1, r+2, ...), as collective libraries schedule an all-to-all: in the same
    # order everyone would write to one receiver at a time
    for k in range(1, n):
        dst, src = (r + k) % n, (r - k) % n
        xf += [Xfer(True, dst, sdisp[dst], sends[dst]), Xfer(False, src, rdisp[src], recvs[src])]
    others = tuple((r + k) % n for k in range(1, n))
    return Plan(coll, n, r, total_in + sum(recvs), xf, [(sdisp[r], rdisp[r], sends[r])] if sends[r] else [],
                others, tuple((r - k) % n for k in range(1, n)), out_off=total_in, out_count=sum(recvs))


def dependencies(p: Plan) -> list[list[int]]:
    """For each transfer, the earlier ones over the same elements that it waits for: a send
    waits for the receives that wrote its elements, a receive for the sends that read them
    and the receives that wrote them before (the runtime checks them piece by piece).

    Transfers j < i overlap when y.off < x.off + x.count and x.off < y.off + y.count. The
    elements are cut at every transfer's ends, and each segment keeps the transfers that
    covered it so far, so the work is the segments each transfer covers (a ring at 1,024
    ranks has some 4,000 transfers per rank: comparing every pair took minutes). A transfer
    of no elements overlaps the transfers that strictly contain its offset: those few are
    compared directly."""
    xs = p.xfers
    cuts = sorted({b for x in xs for b in (x.off, x.off + x.count)})
    at = {b: k for k, b in enumerate(cuts)}
    covered: list[list[int]] = [[] for _ in cuts]
    empty: list[int] = []
    out: list[list[int]] = []
    for i, x in enumerate(xs):
        if x.count <= 0:
            out.append([j for j in range(i) if xs[j].off < x.off < xs[j].off + xs[j].count
                        and not (x.send and xs[j].send)])
            empty.append(i)
            continue
        found = {j for k in range(at[x.off], at[x.off + x.count]) for j in covered[k]
                 if not (x.send and xs[j].send)}
        found.update(j for j in empty if x.off < xs[j].off < x.off + x.count and not (x.send and xs[j].send))
        for k in range(at[x.off], at[x.off + x.count]):
            covered[k].append(i)
        out.append(sorted(found))
    return out


def pieces(x: Xfer, piece: int) -> list[tuple[int, int]]:
    """The pieces (offset, count) a transfer is sent in: at most ``piece`` elements each."""
    return [(x.off + i, min(piece, x.count - i)) for i in range(0, x.count, piece)]


def bus_factor(coll: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor: busbw = algbw x this."""
    if coll == "all_reduce":
        return 2 * (n - 1) / n
    if coll in ("reduce_scatter", "all_gather", "all_to_all", "all_to_all_v"):
        return (n - 1) / n
    return 1.0


def sim_messages(coll: str, nranks: int, count: int, itemsize: int, piece_bytes: int) -> list[dict]:
    """The network messages of ``coll`` over every rank, for the simulator:
    one entry per (sender, receiver) stream, with its messages in order and,
    for each, the message of the sender's incoming stream that must have
    arrived first (a send of a piece waits for the receive that wrote its
    elements). Each entry: ``src``, ``dst``, ``msgs`` = [(bytes, dep)] where
    ``dep`` is None or (stream index, message index)."""
    piece = max(1, piece_bytes // itemsize)
    plans = [plan(coll, nranks, r, count) for r in range(nranks)]
    streams: dict[tuple[int, int], list] = {}
    index: dict[tuple[int, int], int] = {}
    # where each rank's received pieces sit: (xfer, piece) -> (stream key, message index)
    recv_at: list[dict] = []
    for r, p in enumerate(plans):
        seen: dict[int, int] = {}
        at = {}
        for i, x in enumerate(p.xfers):
            if not x.send:
                for k, _ in enumerate(pieces(x, piece)):
                    key = (x.peer, r)
                    at[(i, k)] = (key, seen.get(x.peer, 0))
                    seen[x.peer] = seen.get(x.peer, 0) + 1
        recv_at.append(at)
    for r, p in enumerate(plans):
        deps = dependencies(p)
        for i, x in enumerate(p.xfers):
            if not x.send:
                continue
            key = (r, x.peer)
            if key not in streams:
                index[key] = len(streams)
                streams[key] = []
            for off, cnt in pieces(x, piece):
                dep = None
                for j in reversed(deps[i]):  # the latest receive that wrote these elements (a send's only kind)
                    y = p.xfers[j]
                    if y.off < off + cnt and off < y.off + y.count:
                        kk = (off - y.off) // piece if off >= y.off else 0
                        dep = recv_at[r][(j, min(kk, len(pieces(y, piece)) - 1))]
                        break
                streams[key].append((cnt * itemsize, dep))
    out = []
    for key, msgs in streams.items():
        out.append({"src": key[0], "dst": key[1],
                    "msgs": [(b, None if d is None else (index[d[0]], d[1])) for b, d in msgs]})
    return out


def ideal_time_ns(streams: list[dict], nic_bytes_per_ns: float, latency_ns: float, hosts: int) -> float:
    """A lower bound on the time any network can run ``streams`` (from
    :func:`sim_messages`) in: every NIC sends at ``nic_bytes_per_ns`` and a
    message arrives ``latency_ns`` after its last byte left. The larger of
    the busiest NIC's bytes at that rate, and the longest chain of messages
    that wait for each other (each stream's messages one after the other)."""
    import collections

    arr: list[list[float]] = [[] for _ in streams]
    free = [0.0] * len(streams)
    ptr = [0] * len(streams)
    waiting: dict[int, list[int]] = collections.defaultdict(list)
    work = collections.deque(range(len(streams)))
    while work:
        s = work.popleft()
        msgs = streams[s]["msgs"]
        moved = False
        while ptr[s] < len(msgs):
            nbytes, dep = msgs[ptr[s]]
            ready = 0.0
            if dep is not None:
                g, j = dep
                if len(arr[g]) <= j:
                    waiting[g].append(s)
                    break
                ready = arr[g][j]
            free[s] = max(free[s], ready) + nbytes / nic_bytes_per_ns
            arr[s].append(free[s] + latency_ns)
            ptr[s] += 1
            moved = True
        if moved:
            work.extend(waiting.pop(s, []))
    chain = max((a[-1] for a in arr if a), default=0.0)
    per_host = [0] * hosts
    for st in streams:
        per_host[st["src"]] += sum(b for b, _ in st["msgs"])
    return max(chain, max(per_host) / nic_bytes_per_ns + latency_ns)
