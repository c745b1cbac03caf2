"""Drive two engines over the in-memory link and check what arrived."""
from __future__ import annotations

import hashlib
import random

from mrc._dp import lib

from mrc.core import QPAttr
from mrc.manual import ManualContext
from mrc.simlink import Sim

PLANES, PER_PLANE = 4, 4


def attr(**kw) -> QPAttr:
    base = dict(planes=PLANES, ev_count=32, ev_backup=8, timeout=6, linear_cnt=7, exp_cnt=7,
                reorder_ns=4000, probe_interval_ns=50_000, skip_ns=10_000, ev_min_active=4)
    base.update(kw)
    return QPAttr(**base)


class Pair:
    def __init__(self, seed=1, qp_attr: QPAttr | None = None, **path):
        self.sim = Sim(PLANES, PER_PLANE, seed=seed)
        # the same seed, the same keys, QP numbers and PSNs: a run repeats exactly
        self.a = ManualContext(planes=PLANES, seed=2 * seed + 1)
        self.b = ManualContext(planes=PLANES, seed=2 * seed + 2)
        self.qa, self.qb = self.sim.connect(self.a, self.b, qp_attr or attr())
        self.sim.set_all(delay_ns=5000, **path)
        self.rng = random.Random(seed)

    def transfer(self, sizes, imm=False, budget_ns=20_000_000_000):
        """Write each size to its own spot of a registered region; return completions."""
        total = sum(sizes)
        src = bytearray(self.rng.randbytes(total))
        dst = bytearray(total)
        ms, md = self.a.reg_mr(src), self.b.reg_mr(dst, remote_write=True)
        if imm:
            self.qb.post_recv(list(range(1000, 1000 + len(sizes))))
        send, recv = [], []
        off = 0
        pending = list(enumerate(sizes))
        offs = []
        for _, s in pending:
            offs.append(off)
            off += s
        nposted = 0

        def progress():
            nonlocal nposted
            # keep the send queue fed without overflowing it
            while nposted < len(sizes) and nposted - len(send) < 32:
                i = nposted
                self.qa.post_write(ms, offs[i], sizes[i], md.addr + offs[i], md.rkey, wr_id=i,
                                   imm=(0xABC00000 + i) if imm else None)
                nposted += 1
            send.extend(self.a.poll_cq())
            recv.extend(self.b.poll_cq())
            done = len(send) >= len(sizes) and (not imm or len(recv) >= len(sizes))
            failed = any(not w.ok for w in send)
            return done or failed

        self.sim.run_until(progress, budget_ns=budget_ns, step_ns=200_000)
        return src, dst, send, recv

    def ev_states(self, qp=None):
        return {e["ev"]: e["state"] for e in (qp or self.qa).evs()}


def digest(b) -> str:
    return hashlib.sha256(bytes(b)).hexdigest()


# 1 B to 16 MiB in log steps (x4), plus sizes just past a packet boundary
SIZES = [4 ** k for k in range(13)] + [4097, 9000]
WR_OK = lib.MRC_WC_SUCCESS


def start_big(pair, size=16 << 20):
    src = bytearray(pair.rng.randbytes(size))
    dst = bytearray(size)
    ms, md = pair.a.reg_mr(src), pair.b.reg_mr(dst, remote_write=True)
    pair.qa.post_write(ms, 0, size, md.addr, md.rkey, wr_id=1)
    return src, dst


def finish(pair, budget_ns=5_000_000_000):
    wc = pair.sim.run_until(lambda: pair.a.poll_cq(), budget_ns=budget_ns, step_ns=100_000)
    return wc
