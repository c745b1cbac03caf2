"""The RoCEv2 model alone (csrc/sim/roce.c, roce_line.c; mrc.simroce): go-back-N
resends exactly the PSNs it must, the retry counter ends in ERROR, DCQCN's rate
follows its equations on a hand-built trace, a PFC pause stops a sender and
resumes it, ECMP spreads evenly and a failed member is excluded only after
routing's delay."""

import collections
import random

import pytest
from mrc._dp import ffi, lib

from mrc.simroce import G, Line, qp_dict, roce_cfg

MTU = 4096


def retransmitted(tr: list) -> list[int]:
    return [psn for _, _, psn, retx in tr if retx]


def test_go_back_n_resends_from_the_lost_psn_through_what_was_sent():
    with Line(1, 100 * G, roce_cfg(100 * G), trace_max=1000) as line:
        line.flow(0, 64 * MTU, msg=64 * MTU, depth=1)
        line.drop(0, psn=10)
        assert line.run(10**9)
        tr = line.trace()
        q, r = line.qp(0)
    first_retx = next(i for i, (_, _, _, retx) in enumerate(tr) if retx)
    # the NAK came back after PSN 11 reached the receiver; everything sent by then goes again, once, in order
    high_at_nak = max(psn for _, _, psn, _ in tr[:first_retx]) + 1
    assert retransmitted(tr) == list(range(10, high_at_nak))
    assert [psn for _, _, psn, _ in tr[first_retx:]] == list(range(10, 64))
    assert q["naks"] == 1 and q["timeouts"] == 0 and q["resent"] == high_at_nak - 10
    assert r["naks"] == 1 and r["out_of_order"] == high_at_nak - 11 and r["taken"] == 64
    assert q["done_bytes"] == 64 * MTU and q["state"] == lib.MRC_ROCE_RTS


def test_a_lost_last_packet_waits_for_the_timer():
    cfg = roce_cfg(100 * G, timeout=10)  # 4.096 us << 10 = 4.19 ms
    with Line(1, 100 * G, cfg, trace_max=100) as line:
        line.flow(0, 8 * MTU, msg=8 * MTU, depth=1)
        line.drop(0, psn=7)
        assert line.run(10**9)
        q, r = line.qp(0)
        st = line.stats()
        tr = line.trace()
    assert retransmitted(tr) == [7]
    assert q["timeouts"] == 1 and q["naks"] == 0 and r["naks"] == 0
    assert st["end_ns"][0] > 4096 << 10  # not before the local ACK timeout


def test_retries_run_out_into_error_and_one_less_loss_recovers():
    for losses, state in ((8, lib.MRC_ROCE_ERROR), (7, lib.MRC_ROCE_RTS)):
        with Line(1, 100 * G, roce_cfg(100 * G, timeout=8, retry_cnt=7), trace_max=1000) as line:
            line.flow(0, 16 * MTU, msg=16 * MTU, depth=1)
            for nth in range(1, losses + 1):
                line.drop(0, psn=5, nth=nth)
            line.run(10**9)
            q, _ = line.qp(0)
        assert q["state"] == state, losses
        assert q["done_bytes"] == (0 if state == lib.MRC_ROCE_ERROR else 16 * MTU)
        # every retry (NAK or timeout) took one of the 7; a NAK while a retry ran started none
        assert q["naks"] + q["timeouts"] >= min(losses, 8) - 1


def test_a_nak_does_not_start_a_second_retry_while_one_runs():
    q = ffi.new("struct mrc_roce_qp *")
    assert lib.mrc_roce_qp_init(q, ffi.new("struct mrc_roce_cfg *", roce_cfg(100 * G))) == 0
    assert lib.mrc_roce_post(q, 20 * MTU) == 0
    tx = ffi.new("struct mrc_roce_tx *")
    for t in range(20):
        assert lib.mrc_roce_next_tx(q, t * 1000, tx) == 1
    nak = ffi.new("struct mrc_roce_reply *", {"kind": lib.MRC_ROCE_NAK, "psn": 4})
    lib.mrc_roce_on_reply(q, nak, 30_000)
    assert (q.una, q.nxt, q.retries, q.in_retry) == (4, 4, 6, 1)
    lib.mrc_roce_next_tx(q, 31_000, tx)
    lib.mrc_roce_on_reply(q, ffi.new("struct mrc_roce_reply *", {"kind": lib.MRC_ROCE_NAK, "psn": 6}), 32_000)
    assert (q.una, q.nxt, q.retries) == (6, 6, 6)  # acknowledged up to 6, no new retry
    lib.mrc_roce_on_reply(q, ffi.new("struct mrc_roce_reply *", {"kind": lib.MRC_ROCE_ACK, "psn": 8}), 33_000)
    assert (q.una, q.nxt, q.retries, q.in_retry) == (9, 9, 7, 0)  # progress gives the retries back
    # an ACK for a PSN never sent, or an old one, changes nothing
    lib.mrc_roce_on_reply(q, ffi.new("struct mrc_roce_reply *", {"kind": lib.MRC_ROCE_ACK, "psn": 500}), 34_000)
    lib.mrc_roce_on_reply(q, ffi.new("struct mrc_roce_reply *", {"kind": lib.MRC_ROCE_ACK, "psn": 2}), 34_000)
    assert q.una == 9


def test_the_responder_takes_in_order_naks_once_and_reacks_duplicates():
    r = ffi.new("struct mrc_roce_resp *")
    c = ffi.new("struct mrc_roce_cfg *", roce_cfg(100 * G, ack_every=4))
    out = ffi.new("struct mrc_roce_reply *")
    kinds = []
    for psn in (0, 1, 2, 3, 5, 6, 4, 1):
        taken = lib.mrc_roce_resp_rx(r, c, psn, 0, 0, 0, out)
        kinds.append((taken, out.kind, out.psn if out.kind else None))
    assert kinds == [(1, 0, None), (1, 0, None), (1, 0, None), (1, lib.MRC_ROCE_ACK, 3),
                     (0, lib.MRC_ROCE_NAK, 4), (0, 0, None), (1, 0, None), (0, lib.MRC_ROCE_ACK, 4)]
    assert lib.mrc_roce_resp_rx(r, c, 5, 1, 0, 0, out) == 1 and out.kind == lib.MRC_ROCE_ACK and out.psn == 5


def test_cnps_at_most_one_per_interval():
    r = ffi.new("struct mrc_roce_resp *")
    c = ffi.new("struct mrc_roce_cfg *", roce_cfg(100 * G, cnp_ns=50_000))
    out = ffi.new("struct mrc_roce_reply *")
    cnps = []
    for i in range(30):
        lib.mrc_roce_resp_rx(r, c, i, 0, 1, i * 10_000, out)
        cnps.append(out.cnp)
    assert [i * 10_000 for i, x in enumerate(cnps) if x] == [0, 50_000, 100_000, 150_000, 200_000, 250_000]


# ------------------------------------------------------------------ DCQCN
class Dcqcn:
    """The reaction point's equations (Zhu et al., SIGCOMM 2015, section 3.1), written apart."""

    def __init__(self, line, g=1 / 256, f=5, rai=40e6, rhai=400e6):
        self.line, self.g, self.f, self.rai, self.rhai = line, g, f, rai, rhai
        self.rc = self.rt = line
        self.alpha = 1.0
        self.t = self.bc = 0

    def cnp(self):
        self.rt = self.rc
        self.rc *= 1 - self.alpha / 2
        self.alpha = (1 - self.g) * self.alpha + self.g
        self.t = self.bc = 0

    def alpha_timer(self):
        self.alpha *= 1 - self.g

    def step(self, timer: bool):
        if timer:
            self.t += 1
        else:
            self.bc += 1
        if max(self.t, self.bc) < self.f:
            pass
        elif min(self.t, self.bc) > self.f:
            self.rt += (min(self.t, self.bc) - self.f) * self.rhai
        else:
            self.rt += self.rai
        self.rt = min(self.rt, self.line)
        self.rc = min((self.rt + self.rc) / 2, self.line)


def test_dcqcn_follows_its_equations_on_a_hand_built_trace():
    line = 100 * G
    q = ffi.new("struct mrc_roce_qp *")
    assert lib.mrc_roce_qp_init(q, ffi.new("struct mrc_roce_cfg *", roce_cfg(line, dcqcn=True))) == 0
    ref = Dcqcn(line)
    us = 1000

    def same():
        assert q.rc == pytest.approx(ref.rc, rel=1e-12) and q.rt == pytest.approx(ref.rt, rel=1e-12)
        assert q.alpha == pytest.approx(ref.alpha, rel=1e-12)

    # three CNPs 10 us apart: three cuts, alpha up each time (no timer due yet)
    for t in (0, 10, 20):
        lib.mrc_roce_on_cnp(q, t * us)
        ref.cnp()
        same()
    assert q.rc == pytest.approx(line / 8, rel=1e-12)
    # quiet: at 75 us the alpha timer (55 us after the last CNP) and the rate timer step once each
    lib.mrc_roce_timers(q, 75 * us)
    ref.alpha_timer()
    ref.step(timer=True)
    same()
    assert q.stage == lib.MRC_ROCE_FAST_RECOVERY
    # nine more timer steps: fast recovery through the fourth, then additive (t reaches F = 5 with bc 0)
    for k in range(2, 11):
        lib.mrc_roce_timers(q, 20 * us + k * 55 * us)
        ref.alpha_timer()
        ref.step(timer=True)
        same()
    assert q.stage == lib.MRC_ROCE_ADDITIVE and q.t_count == 10


def test_dcqcn_byte_counter_steps_every_byte_b_sent():
    line = 100 * G
    q = ffi.new("struct mrc_roce_qp *")
    # the timer far off: only the bytes sent step the rate up
    lib.mrc_roce_qp_init(q, ffi.new("struct mrc_roce_cfg *", roce_cfg(line, dcqcn=True, timer_ns=10**12)))
    lib.mrc_roce_on_cnp(q, 0)
    ref = Dcqcn(line)
    ref.cnp()
    tx = ffi.new("struct mrc_roce_tx *")
    assert lib.mrc_roce_post(q, 64 << 20) == 0 and lib.mrc_roce_post(q, 64 << 20) == 0
    sent, steps = 0, []
    while q.bc_count < 7:
        now = q.next_tx
        before = q.bc_count
        assert lib.mrc_roce_next_tx(q, now, tx) == 1
        sent += tx.bytes
        if q.bc_count != before:
            ref.step(timer=False)
            steps.append(sent)
            assert q.rc == pytest.approx(ref.rc, rel=1e-12) and q.rt == pytest.approx(ref.rt, rel=1e-12)
    assert steps == [k * 10_000_000 // MTU * MTU + MTU for k in range(1, 8)]
    assert q.stage == lib.MRC_ROCE_ADDITIVE  # bc past F, the timer's count at 0


def test_dcqcn_hyper_increase_and_back_to_line_rate():
    line = 100 * G
    q = ffi.new("struct mrc_roce_qp *")
    lib.mrc_roce_qp_init(q, ffi.new("struct mrc_roce_cfg *", roce_cfg(line, dcqcn=True, byte_b=MTU)))
    ref = Dcqcn(line)
    for _ in range(6):  # six cuts at once: down to about line / 64
        lib.mrc_roce_on_cnp(q, 0)
        ref.cnp()
    tx = ffi.new("struct mrc_roce_tx *")
    lib.mrc_roce_post(q, 64 * MTU)
    stages = []
    for k in range(1, 12):  # a timer step, then a byte-counter step (one packet), in turn: both pass F
        t = k * 55_000
        lib.mrc_roce_timers(q, t)
        ref.step(timer=True)
        assert lib.mrc_roce_next_tx(q, t, tx) == 1
        ref.step(timer=False)
        stages.append(q.stage)
        assert q.rc == pytest.approx(ref.rc, rel=1e-12) and q.rt == pytest.approx(ref.rt, rel=1e-12)
    assert stages[:2] == [lib.MRC_ROCE_FAST_RECOVERY] * 2 and lib.MRC_ROCE_ADDITIVE in stages
    assert stages[-1] == lib.MRC_ROCE_HYPER
    for k in range(12, 400):
        lib.mrc_roce_timers(q, k * 55_000)
    assert q.rc == line and q.stage == lib.MRC_ROCE_LINE


def test_dcqcn_two_flows_share_a_bottleneck():
    """Two senders into one 40 Gb/s port with RED marking: the second starts at 20 ms; within
    10 ms their rates meet at half the port each (DCQCN's paper, its fairness figure)."""
    cfg = roce_cfg(40 * G, mtu=1024, dcqcn=True, wire_extra=86)
    with Line(2, 40 * G, cfg, kmin=5000, kmax=200_000, pmax=0.01, sample_ns=1_000_000,
              buffer_bytes=4 << 20) as line:
        line.flow(0, 300 << 20)
        line.flow(1, 300 << 20, start_ns=20_000_000)
        line.run(60_000_000)
        s = line.samples()
        st = line.stats()
    assert st["dropped"] == 0 and st["marked"] > 0
    assert all(r == 40 * G for r, _ in s[19])  # alone at line rate before the second starts
    share = [(s[k + 1][0][1] - s[k][0][1], s[k + 1][1][1] - s[k][1][1]) for k in range(35, 59)]
    a, b = sum(x for x, _ in share), sum(y for _, y in share)
    assert 0.85 < a / b < 1.18  # fair within 15 % over 24 ms
    assert (a + b) * 8 / 24e-3 > 0.9 * 40 * G * 1024 / (1024 + 86)  # and the port stays busy


def test_dcqcn_climbs_after_an_incast_as_its_authors_ns3_code_does():
    """bench/roce_anchors.py's DCQCN anchor: two flows and a 15-sender burst into one port; after
    the burst both flows climb back at the rate DCQCN's additive increase sets (R_AI per timer),
    within 10 % of the climb the DCQCN authors' ns-3 code published (0.74 Gb/s per ms), and the
    timers the sources name order the climb as R_AI / T does."""
    import pathlib
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
    from roce_anchors import anchor_dcqcn

    an = anchor_dcqcn()
    assert 0.9 < an["slope_over_published"] < 1.1
    by = an["slope_over_published_by_timer"]
    assert by["50"] > by["55"] > by["60"]
    for t, r in an["runs"].items():
        assert r["dropped"] == 0 and r["burst_end_ms"] < 10
        for f in r["flows"]:  # cut to near the floor, then R_AI per timer
            assert f["floor_gbps"] < 2 and f["slope_gbps_per_ms"] == pytest.approx(0.04 / (int(t) / 1000), rel=0.02)
        assert r["underutilized_ms"] > an["implied_underutilized_ms"]  # both flows cut, not one


# ------------------------------------------------------------------ PFC
def test_pfc_thresholds():
    p = ffi.new("struct mrc_roce_pfc *", {"xoff": 100, "xon": 50})
    assert [lib.mrc_roce_pfc_add(p, d) for d in (60, 40, 1, 20, -60, -10, -1, 200)] == [0, 0, 1, 0, 0, 0, -1, 1]
    assert p.pauses == 2


def test_pfc_pause_stops_a_sender_and_resumes_it_and_nothing_is_dropped():
    cfg = roce_cfg(100 * G)
    runs = {}
    for pfc in (False, True):
        kw = {"pfc_xoff": 200_000, "pfc_xon": 100_000} if pfc else {}
        with Line(4, 100 * G, cfg, buffer_bytes=1 << 20, trace_max=200_000, **kw) as line:
            for s in range(4):
                line.flow(s, 16 << 20)
            assert line.run(10**10)
            runs[pfc] = (line.stats(), line.trace(), [line.qp(s)[0] for s in range(4)])
    st, tr, qps = runs[True]
    assert st["dropped"] == 0 and st["pauses"] > 0 and st["resumes"] == st["pauses"]
    assert all(q["resent"] == 0 for q in qps) and min(st["paused_ns"]) > 0
    # a paused sender sends nothing: its longest gap between packets is at least its longest pause
    # stretch, far above the 0.33 us a packet takes at line rate
    gaps = collections.defaultdict(int)
    last = {}
    for t, s, _, _ in tr:
        if s in last:
            gaps[s] = max(gaps[s], t - last[s])
        last[s] = t
    assert min(gaps.values()) > 10_000
    st0, _, qps0 = runs[False]
    assert st0["dropped"] > 0 and sum(q["resent"] for q in qps0) > 0 and st0["pauses"] == 0


# ------------------------------------------------------------------ ECMP and routing
def addr(i: int) -> bytes:
    return bytes([0xfd] + [0] * 13 + [i >> 8, i & 0xFF])


def test_ecmp_spreads_evenly_over_its_group():
    rng = random.Random(7)
    g = ffi.new("struct mrc_roce_group *")
    assert lib.mrc_roce_group_init(g, 16, 0) == 0
    counts = collections.Counter()
    n = 64_000
    for _ in range(n):
        h = lib.mrc_roce_ecmp_hash(0x1234, addr(1), addr(2), rng.randrange(49152, 65536), 4791)
        counts[lib.mrc_roce_group_pick(g, h, 0)] += 1
    assert sorted(counts) == list(range(16))
    assert max(counts.values()) < 1.06 * n / 16 and min(counts.values()) > 0.94 * n / 16
    # another switch's seed places the same flows otherwise
    same = sum(lib.mrc_roce_ecmp_hash(1, addr(1), addr(2), p, 4791) % 16 ==
               lib.mrc_roce_ecmp_hash(2, addr(1), addr(2), p, 4791) % 16 for p in range(50_000, 54_000))
    assert same < 4000 / 16 * 1.3


def test_a_failed_member_is_excluded_only_after_the_delay():
    g = ffi.new("struct mrc_roce_group *")
    delay = 500_000_000
    lib.mrc_roce_group_init(g, 4, delay)
    picks = lambda now: {lib.mrc_roce_group_pick(g, h, now) for h in range(64)}  # noqa: E731
    lib.mrc_roce_group_set(g, 2, 0, 1_000)
    assert picks(1_000) == {0, 1, 2, 3} and picks(1_000 + delay - 1) == {0, 1, 2, 3}  # black-holes meanwhile
    assert picks(1_000 + delay) == {0, 1, 3}
    lib.mrc_roce_group_set(g, 2, 1, 2 * delay)
    assert picks(2 * delay + 1) == {0, 1, 3} and picks(3 * delay) == {0, 1, 2, 3}
    for m in range(4):
        lib.mrc_roce_group_set(g, m, 0, 4 * delay)
    assert picks(5 * delay) == {-1}


def test_bad_configuration_is_refused():
    q = ffi.new("struct mrc_roce_qp *")
    for bad in ({"timeout": 0}, {"timeout": 32}, {"retry_cnt": 8}, {"mtu": 0}, {"line_bps": 0}):
        c = roce_cfg(100 * G)
        c.update(bad)
        assert lib.mrc_roce_qp_init(q, ffi.new("struct mrc_roce_cfg *", c)) == -22, bad
    assert lib.mrc_roce_group_init(ffi.new("struct mrc_roce_group *"), 65, 0) == -22
    with pytest.raises(OSError):
        Line(0, 100 * G, roce_cfg(100 * G))
    with pytest.raises(OSError):
        Line(2, 100 * G, roce_cfg(100 * G), kmin=10, kmax=5)
    with Line(1, 100 * G, roce_cfg(100 * G)) as line:
        with pytest.raises(OSError):
            line.flow(1, 100)
        with pytest.raises(OSError):
            line.flow(0, 100, depth=65)
        q2 = ffi.new("struct mrc_roce_qp *")
        lib.mrc_roce_qp_init(q2, ffi.new("struct mrc_roce_cfg *", roce_cfg(100 * G)))
        for _ in range(64):
            assert lib.mrc_roce_post(q2, 1) == 0
        assert lib.mrc_roce_post(q2, 1) == -28  # ENOSPC
        assert qp_dict(q2)["end"] == 64
