"""``mrc soak``: many writes over the in-memory link while it misbehaves,
every byte checked.

Two contexts, QPs both ways (4 from a to b, 2 from b to a), keep writes of
random sizes (1 B to 1 MiB, WRITE and WRITE_IMM) in flight into slots of the
other side's region. Every few milliseconds of simulated time each of the 16
paths (4 planes x 4) is given new faults at random: loss, jitter that
reorders, duplication, trimming, an ECN-marking queue, and now and then a
path or a whole plane goes down for a while (a flap). When a write
completes, its slot must hold exactly the bytes it sent (each slot is
zeroed before it is used again, so a write that did not land or a stale
packet that landed later shows); the gaps between slots must stay zero;
every WRITE_IMM must complete one receive with its immediate and length;
each QP's completions must come once each, in order, with SUCCESS.

    mrc soak --seconds 10 --json                  # what CI runs
    mrc soak --packets 1000000000 --json          # a billion packets

Deterministic for a seed, apart from how far a wall-clock limit gets.
"""

from __future__ import annotations

import json
import random
import sys
import time
from dataclasses import dataclass, field

from mrc.core import QPAttr
from mrc.manual import ManualContext
from mrc.simlink import Sim

PLANES, PER_PLANE = 4, 4
SLOT = 1 << 20               # the largest write
GAP = 4096                   # never written: between slots
DEPTH = 8                    # writes in flight per QP
EPOCH_NS = 5_000_000         # the link's faults change this often (simulated)
STEP_NS = 500_000            # simulated time per run of the link between checks


@dataclass
class Flow:
    """One QP's writes: its slots in the destination region, what is in flight."""

    qp: object
    peer_qp: object
    src: bytearray
    src_mr: object
    dst: bytearray
    dst_mr: object
    base: int                       # first byte of this flow's slots in dst
    free: list = field(default_factory=lambda: list(range(DEPTH)))
    inflight: dict = field(default_factory=dict)   # wr_id -> (slot, src_off, length, imm)
    next_id: int = 0
    next_done: int = 0
    imm_expected: dict = field(default_factory=dict)  # imm -> length, for the receive side


def _slot_off(flow: Flow, slot: int) -> int:
    return flow.base + GAP + slot * (SLOT + GAP)


class Soak:
    def __init__(self, seed: int = 1) -> None:
        self.rng = random.Random(seed)
        self.sim = Sim(planes=PLANES, per_plane=PER_PLANE, seed=seed)
        self.a = ManualContext(planes=PLANES, seed=seed * 2 + 1)
        self.b = ManualContext(planes=PLANES, seed=seed * 2 + 2)
        self.zero = bytes(SLOT)
        self.flows: list[Flow] = []
        self.counts = {"messages": 0, "bytes": 0, "qp_errors": 0, "corrupt_bytes": 0, "order_errors": 0,
                       "imm_errors": 0, "flaps": 0}
        attr = QPAttr(planes=PLANES, ev_count=64, sq_depth=64, rq_depth=64)
        regions = {}
        for ctx, n in ((self.b, 4), (self.a, 2)):  # the destination side of the flows
            size = n * (DEPTH * (SLOT + GAP) + GAP)
            buf = bytearray(size)
            regions[id(ctx)] = (buf, ctx.reg_mr(buf, remote_write=True), n)
        srcs = {}
        for ctx in (self.a, self.b):
            buf = bytearray(self.rng.randbytes(2 * SLOT))
            srcs[id(ctx)] = (buf, ctx.reg_mr(buf))
        for sender, receiver in ((self.a, self.b), (self.b, self.a)):
            dst, dst_mr, n = regions[id(receiver)]
            for i in range(n):
                qs, qr = self.sim.connect(sender, receiver, attr)
                qr.post_recv(list(range(64)))
                src, src_mr = srcs[id(sender)]
                self.flows.append(Flow(qs, qr, src, src_mr, dst, dst_mr, base=i * (DEPTH * (SLOT + GAP) + GAP)))
        self._next_epoch = 0

    # ------------------------------------------------------------ the link
    def _faults(self) -> None:
        """New faults for every path, drawn afresh."""
        r, now = self.rng, self.sim.now
        dead_plane = r.randrange(PLANES) if r.random() < 0.1 else None
        for plane in range(PLANES):
            for i in range(PER_PLANE):
                f = {"delay_ns": r.choice([2_000, 5_000, 10_000]), "jitter_ns": r.choice([0, 0, 2_000, 20_000]),
                     "loss_ppm": r.choice([0, 0, 0, 1_000, 10_000, 50_000]),
                     "dup_ppm": r.choice([0, 0, 1_000, 10_000]), "trim_ppm": r.choice([0, 0, 1_000, 20_000]),
                     "rate_bps": 0, "ecn_queue_bytes": 0, "down_from_ns": 0, "down_until_ns": 0,
                     "flap_period_ns": 0}
                if r.random() < 0.2:  # a queue that marks
                    f.update(rate_bps=r.choice([25, 50, 100]) * 10**9, ecn_queue_bytes=r.choice([20_000, 60_000]))
                if plane == dead_plane or r.random() < 0.05:  # a flap: down for a while, then back
                    f.update(down_from_ns=now + r.randrange(EPOCH_NS),
                             down_until_ns=now + EPOCH_NS + r.randrange(4 * EPOCH_NS))
                    self.counts["flaps"] += 1
                self.sim.set_path(self.sim.path(plane, i), **f)

    # ------------------------------------------------------------ writes
    def _post(self, flow: Flow) -> None:
        while flow.free:
            slot = flow.free.pop()
            r = self.rng
            n = r.choice([1, r.randrange(1, 4097), r.randrange(1, 65537), r.randrange(1, SLOT + 1)])
            src_off = r.randrange(0, len(flow.src) - n + 1)
            off = _slot_off(flow, slot)
            flow.dst[off:off + n] = self.zero[:n]  # what did not land stays zero
            wr = flow.next_id
            flow.next_id += 1
            imm = (wr & 0xFFFFFFFF) if r.random() < 0.25 else None
            if imm is not None:
                flow.imm_expected[imm] = n
            flow.inflight[wr] = (slot, src_off, n, imm)
            flow.qp.post_write(flow.src_mr, src_off, n, flow.dst_mr.addr + off, flow.dst_mr.rkey, wr_id=wr, imm=imm)

    def _check(self) -> None:
        by_qpn = {f.qp.qpn: f for f in self.flows}
        by_peer = {f.peer_qp.qpn: f for f in self.flows}
        for ctx in (self.a, self.b):
            for w in ctx.poll_cq():
                if w.qpn in by_peer and w.opcode == 1:  # a receive: a WRITE_IMM landed
                    f = by_peer[w.qpn]
                    want = f.imm_expected.pop(w.imm_data, None)
                    if not w.ok or want is None or want != w.byte_len:
                        self.counts["imm_errors"] += 1
                    f.peer_qp.post_recv([w.wr_id])
                    continue
                f = by_qpn[w.qpn]
                if not w.ok:
                    self.counts["qp_errors"] += 1
                    raise SoakFailed(f"QP {w.qpn}: write {w.wr_id} failed: {w.status_words}")
                if w.wr_id != f.next_done:
                    self.counts["order_errors"] += 1
                f.next_done = w.wr_id + 1
                slot, src_off, n, _imm = f.inflight.pop(w.wr_id)
                off = _slot_off(f, slot)
                got, want = f.dst[off:off + n], f.src[src_off:src_off + n]
                if got != want:
                    self.counts["corrupt_bytes"] += sum(1 for x, y in zip(got, want, strict=True) if x != y)
                self.counts["messages"] += 1
                self.counts["bytes"] += n
                f.free.append(slot)

    def gaps_corrupt(self) -> int:
        """Bytes written where no write was aimed (between and around slots)."""
        bad = 0
        for f in self.flows:
            for s in range(DEPTH + 1):
                start = f.base + s * (SLOT + GAP)
                gap = f.dst[start:start + GAP]
                if gap != self.zero[:GAP]:
                    bad += sum(1 for x in gap if x)
        return bad

    def packets(self) -> int:
        """Packets sent so far, every path."""
        return sum(self.sim.stats()["per_path_tx"])

    def run(self, seconds: float | None, packets: int | None, progress=None) -> dict:
        """Run until ``seconds`` pass or ``packets`` are sent; returns the result."""
        t0 = time.monotonic()
        last = t0
        while True:
            for f in self.flows:
                self._post(f)
            if self.sim.now >= self._next_epoch:
                self._faults()
                self._next_epoch = self.sim.now + EPOCH_NS
            self.sim.run(self.sim.now + STEP_NS)
            self._check()
            now = time.monotonic()
            sent = self.packets()
            if (seconds is not None and now - t0 >= seconds) or (packets is not None and sent >= packets):
                break
            if progress and now - last >= 2:
                last = now
                progress(now - t0, sent, self.counts)
        return self.result(time.monotonic() - t0)

    def result(self, wall: float) -> dict:
        """The soak's figures and errors."""
        st = self.sim.stats()
        rtx = sum(f.qp.stats()["rtx_packets"] for f in self.flows)
        c = dict(self.counts)
        c["corrupt_bytes"] += self.gaps_corrupt()
        return {"packets": sum(st["per_path_tx"]), "bytes": c["bytes"], "messages": c["messages"],
                "qp_errors": c["qp_errors"], "corrupt_bytes": c["corrupt_bytes"], "retransmits": rtx,
                "order_errors": c["order_errors"], "imm_errors": c["imm_errors"],
                "link": {"dropped": st["dropped"], "duplicated": st["duplicated"], "trimmed": st["trimmed"],
                         "ecn_marked": st["ecn_marked"], "flaps": c["flaps"]},
                "wall_seconds": round(wall, 1), "sim_seconds": round(st["now_ns"] / 1e9, 3),
                "packets_per_second": round(sum(st["per_path_tx"]) / wall) if wall else 0}

    def close(self) -> None:
        """Free the link and both contexts."""
        self.sim.close()
        self.a.close()
        self.b.close()


class SoakFailed(Exception):
    pass


def main(seconds: float | None, packets: int | None, seed: int, as_json: bool, out=sys.stdout, err=sys.stderr) -> int:
    """``mrc soak``: returns 1 on any error."""
    if seconds is None and packets is None:
        seconds = 10.0
    s = Soak(seed)
    failure = None

    tty = err.isatty()

    def progress(t, sent, c):
        # a terminal gets one line redrawn; a log (a long run in the background) a line every ~30 s
        if not tty and int(t) % 30 > 1:
            return
        line = (f"mrc soak: {t:6.0f} s  {sent:>13,} packets  {c['messages']:>10,} writes checked  "
                f"corrupt {c['corrupt_bytes']}  qp errors {c['qp_errors']}")
        print(f"\r{line}" if tty else line, end="" if tty else "\n", file=err, flush=True)

    try:
        res = s.run(seconds, packets, progress)
    except SoakFailed as e:
        failure = str(e)
        res = s.result(0.0)
    finally:
        s.close()
    res["seed"] = seed
    ok = failure is None and not (res["qp_errors"] or res["corrupt_bytes"] or res["order_errors"]
                                  or res["imm_errors"])
    res["ok"] = ok
    if failure:
        res["failure"] = failure
    if as_json:
        print(json.dumps(res, indent=1), file=out)
    else:
        if tty:
            print(file=err)
        for k in ("packets", "bytes", "messages", "retransmits", "qp_errors", "corrupt_bytes", "order_errors",
                  "imm_errors", "wall_seconds", "sim_seconds", "packets_per_second"):
            print(f"{k:>20}: {res[k]:,}" if isinstance(res[k], int) else f"{k:>20}: {res[k]}", file=out)
        print(f"{'link':>20}: {res['link']}", file=out)
        print(f"{'result':>20}: {'ok' if ok else 'FAILED ' + (failure or '')}", file=out)
    return 0 if ok else 1
