"""The sender's EV choice (ev_pick) and its retransmit timer, each on its
own: one context driven by hand, its QP connected to a peer that never
answers unless the test hands it a packet. No link, no randomness: every
packet and every timer value is exact."""
import pytest

from mrc import wire
from mrc.core import QPAttr
from mrc.manual import ManualContext

PLANES, EVS, MTU = 4, 8, 4096
BASE = dict(planes=PLANES, ev_count=EVS, ev_backup=2, mtu=MTU, ev_min_active=EVS)


def lone_qp(**kw):
    ctx = ManualContext(planes=PLANES)
    qp = ctx.create_qp(QPAttr(**{**BASE, **kw}))
    qp.connect(dest_qpn=9, peer=0, rq_psn=0, sq_psn=0)
    src = bytearray(64 * MTU)
    mr = ctx.reg_mr(src)
    return ctx, qp, mr


def send(ctx, qp, mr, packets, now=0, wr_id=1):
    """Post one WRITE of ``packets`` packets; return the data packets poll_tx sends at ``now``."""
    qp.post_write(mr, 0, packets * MTU, 0x1000, 0x100, wr_id=wr_id)
    return data_out(ctx, now)


def data_out(ctx, now):
    return [(wire.parse(p), meta) for p, meta in ctx.poll_tx(now_ns=now) if meta["is_data"]]


def evs(out):
    return [(wire.ev_plane(m["ev"]), wire.ev_entropy(m["ev"])) for _, m in out]


# ------------------------------------------------------------------ ev_pick
def test_packets_go_round_the_rotation_one_plane_after_the_other():
    ctx, qp, mr = lone_qp()
    out = send(ctx, qp, mr, 16)
    rotation = [(i % PLANES, i // PLANES) for i in range(EVS)]  # slot i starts with EV i
    start = rotation.index(evs(out)[0])  # where this QP's turn begins: a hash of its number
    turn = rotation[start:] + rotation[:start]
    assert evs(out) == turn + turn
    assert [p["psn"] for p, _ in out] == list(range(16))


def test_qps_start_their_rotations_at_different_slots():
    """In step, every QP's first packet would take the same plane and spine (a collision at the
    ports those paths share, every packet of the way)."""
    ctx = ManualContext(planes=PLANES)
    src = bytearray(MTU)
    mr = ctx.reg_mr(src)
    first = set()
    for i in range(8):
        qp = ctx.create_qp(QPAttr(**BASE))
        qp.connect(dest_qpn=9 + i, peer=0, rq_psn=0, sq_psn=0)
        first |= set(evs(send(ctx, qp, mr, 1, wr_id=i)))
    assert len(first) >= 3, first


def test_a_denied_ev_is_never_picked_and_a_spare_of_its_plane_takes_its_slot():
    ctx, qp, mr = lone_qp()
    qp.set_ev_state(wire.ev_make(2, 0), wire.EV_DENIED)
    got = evs(send(ctx, qp, mr, 16))
    assert (2, 0) not in got
    spares = {e for e in got if e[1] >= EVS // PLANES}  # entropies past the rotation's are spares
    assert len(spares) == 1 and spares.pop()[0] == 2
    at = [i for i, e in enumerate(got) if e[1] >= EVS // PLANES]
    assert len(at) == 2 and at[1] - at[0] == EVS  # in the denied EV's slot, once a turn: plane load stays equal
    assert [p for p, _ in got].count(2) == 4


def test_qps_replace_the_same_dead_path_with_spares_on_different_paths():
    """Every QP loses its EVs on the same dead path while the plane has paths
    its rotation does not use: were every QP's first spare the same entropy,
    all of them would move onto one path and load it with every QP's share.
    Each QP's spares start elsewhere, and none is on the dead path."""
    ctx = ManualContext(planes=PLANES)
    per_plane, paths = 8, 32  # the rotation uses paths 0-7 of each plane
    took = []
    for i in range(24):
        qp = ctx.create_qp(QPAttr(**{**BASE, "ev_count": per_plane * PLANES, "ev_backup": 8}))
        qp.connect(dest_qpn=100 + i, peer=0, rq_psn=0, sq_psn=0)
        qp.set_ev_paths([paths] * PLANES)
        qp.set_ev_state(wire.ev_make(1, 3), wire.EV_DENIED)  # path 3 of plane 1 is dead
        new = [e["entropy"] for e in qp.evs() if e["active"] and e["plane"] == 1 and e["entropy"] >= per_plane]
        assert len(new) == 1 and new[0] % paths >= per_plane, new  # a path the rotation did not use
        took.append(new[0] % paths)
    assert len(set(took)) >= 5, sorted(took)  # spread over the plane's unused paths, not all on one


def test_a_retired_ev_whose_plane_has_no_unused_path_is_passed_over():
    """Every path of the plane already carries the QP's EVs: a spare would
    double one path's share, so the slot is passed over and the plane's
    other EVs (on its live paths) carry the traffic."""
    ctx = ManualContext(planes=PLANES)
    mr = ctx.reg_mr(bytearray(64 * MTU))
    qp = ctx.create_qp(QPAttr(**{**BASE, "ev_count": 4 * PLANES, "ev_backup": 4, "ev_min_active": 4}))
    qp.connect(dest_qpn=9, peer=0, rq_psn=0, sq_psn=0)
    qp.set_ev_paths([2] * PLANES)  # 4 EVs per plane over 2 paths: both in use twice
    for entropy in (1, 3):  # path 1 of plane 2 is dead
        qp.set_ev_state(wire.ev_make(2, entropy), wire.EV_DENIED)
    assert not [e for e in qp.evs() if e["active"] and e["entropy"] >= 4]  # no spare took a slot
    qp.post_write(mr, 0, 32 * MTU, 0x1000, 0x100, wr_id=1)
    got = evs(data_out(ctx, 0))
    assert {e for e in got if e[0] == 2} == {(2, 0), (2, 2)}  # plane 2 only on its live path
    assert 4 <= [p for p, _ in got].count(2) <= 5  # its 2 live EVs: 2 of every 14 packets (not 4 of 16)


def test_a_plane_that_is_down_is_passed_over():
    ctx, qp, mr = lone_qp()
    ctx.set_port(1, False)
    got = evs(send(ctx, qp, mr, 12))
    planes = [p for p, _ in got]
    assert set(planes) == {0, 2, 3} and len(planes) == 12
    assert all(b == {0: 2, 2: 3, 3: 0}[a] for a, b in zip(planes, planes[1:], strict=False))  # plane 1 left out


def test_an_ecn_marked_ev_is_skipped_for_skip_ns_then_used_again():
    skip = 50_000
    ctx, qp, mr = lone_qp(skip_ns=skip)
    send(ctx, qp, mr, 8)
    marked = wire.ev_make(3, 0)
    sack = wire.build(opcode=wire.OP_SACK, dqpn=qp.qpn, cack_psn=0, sack_flags=wire.SETH_ECN, ev=marked, scid=9,
                      dcid=qp.qpn & 0xFFFF)
    assert ctx.input(sack, ev=marked, now_ns=1000) == 0
    assert qp.stats()["ecn_marks"] == 1
    during = evs(send(ctx, qp, mr, 7, now=2000, wr_id=2))
    assert during and (3, 0) not in during
    after = evs(send(ctx, qp, mr, 8, now=1000 + skip, wr_id=3))
    assert (3, 0) in after
    assert [e["state"] for e in qp.evs() if e["ev"] == marked] == ["GOOD"]  # SKIP is reported as GOOD


def test_sacks_naming_evs_the_qp_does_not_have_change_nothing():
    """A peer echoes whatever EV it likes: entropies past the spares, past
    16 bits' worth, planes the QP does not use. Only its own EVs (a spare
    included) are looked up; the set and the other EVs' states stay as
    they were."""
    ctx, qp, mr = lone_qp()
    send(ctx, qp, mr, 8)
    before = [(e["ev"], e["state"], e["active"]) for e in qp.evs()]
    spares = [e["ev"] for e in qp.evs() if not e["active"]]
    hostile = [wire.ev_make(0, 0xFFFF), wire.ev_make(1, EVS // PLANES + 2), wire.ev_make(PLANES + 3, 0),
               wire.ev_make(15, 0xFFFF), spares[0]]
    for i, ev in enumerate(hostile):
        sack = wire.build(opcode=wire.OP_SACK, dqpn=qp.qpn, cack_psn=0, sack_flags=wire.SETH_ECN, ev=ev, scid=9,
                          dcid=qp.qpn & 0xFFFF)
        assert ctx.input(sack, ev=ev, now_ns=1000 + i) == 0
    assert qp.stats()["ecn_marks"] == len(hostile)
    after = [(e["ev"], e["state"] if e["ev"] != spares[0] else "GOOD", e["active"]) for e in qp.evs()]
    assert after == before  # only the spare, the QP's own EV, may have gone to SKIP


def test_a_retransmission_goes_on_another_plane():
    ctx, qp, mr = lone_qp(timeout=4)
    (first, meta), = send(ctx, qp, mr, 1)
    rto = 1024 << 4
    (again, meta2), = data_out(ctx, rto)
    assert again["psn"] == first["psn"] and again["flags"] & wire.BTH_RTX
    assert wire.ev_plane(meta2["ev"]) != wire.ev_plane(meta["ev"])
    assert meta2["tclass"] >> 2 == wire.DSCP_RTX


# ------------------------------------------------------------ retransmit timer
@pytest.mark.parametrize("linear,exp", [(2, 3), (0, 2)])
def test_the_retry_timer_backs_off_and_ends_in_retry_exceeded(linear, exp):
    """RTO = 1.024 us x 2^timeout for the first linear_cnt tries, then
    doubling for exp_cnt more; then RETRY_EXC_ERR, the QP in ERROR and the
    application told (protocol.md 3). ev_min_active = ev_count keeps every EV
    GOOD, so no probe timer mixes in."""
    t = 4
    base = 1024 << t
    ctx, qp, mr = lone_qp(timeout=t, linear_cnt=linear, exp_cnt=exp)
    assert len(send(ctx, qp, mr, 1)) == 1
    now, due = 0, []
    for retry in range(linear + exp):
        rto = base if retry < linear else base << (retry - linear + 1)
        assert ctx.next_timer(now) == now + rto, retry
        assert data_out(ctx, now + rto - 1) == []  # not a nanosecond early
        now += rto
        out = data_out(ctx, now)
        assert len(out) == 1 and out[0][0]["flags"] & wire.BTH_RTX, retry
        due.append(now)
    last = now + (base << (exp + 1))  # the last wait: retries = linear + exp, past the linear ones
    assert ctx.next_timer(now) == last
    assert data_out(ctx, last) == []  # the budget is spent: nothing more is sent
    wc = ctx.poll_cq()
    assert [(w.wr_id, w.status_name) for w in wc] == [(1, "RETRY_EXC_ERR")]
    st = qp.stats()
    assert st["state_name"] == "ERROR" and st["timeouts"] == linear + exp + 1 and st["rtx_packets"] == linear + exp
    assert [(e.type, e.status_name) for e in ctx.async_events()] == [("QP_FATAL", "RETRY_EXC_ERR")]
    assert ctx.next_timer(last) is None  # nothing left to wake up for


def test_an_acknowledgement_resets_the_backoff():
    t = 4
    base = 1024 << t
    ctx, qp, mr = lone_qp(timeout=t, linear_cnt=1, exp_cnt=7)
    send(ctx, qp, mr, 2)
    now = 0
    for rto in (base, base << 1, base << 2):  # the head resent three times, backing off
        now += rto
        assert len(data_out(ctx, now)) >= 1
    # the peer acknowledges PSN 0: progress, so the timer starts again from the base
    sack = wire.build(opcode=wire.OP_SACK, dqpn=qp.qpn, cack_psn=0, ev=wire.ev_make(0, 0), scid=9,
                      dcid=qp.qpn & 0xFFFF)
    ctx.input(sack, ev=wire.ev_make(0, 0), now_ns=now + 10)
    assert ctx.next_timer(now + 10) == now + 10 + base


def test_lost_packets_the_window_holds_back_do_not_keep_the_timer_at_now():
    """Found by the requester fuzzer: after a timeout the head is resent and
    fills the congestion window; the other lost packets wait for it. The
    context must then say "call me at the next RTO", not "now": "now" for
    ever is an engine thread spinning at 100% and a hand-driven loop that
    never reaches the timeout that fails the QP."""
    ctx, qp, mr = lone_qp(timeout=6, linear_cnt=2, exp_cnt=3)
    for i, n in enumerate([2, 2, 1, 4]):
        qp.post_write(mr, 0, n * MTU, 0x1000, 0x100, wr_id=i)
    now, spins, done = 0, 0, []
    for _ in range(1000):
        ctx.poll_tx(now_ns=now)
        done += ctx.poll_cq()
        if len(done) == 4:
            break
        t = ctx.next_timer(now)
        assert t is not None
        if t <= now:
            spins += 1
            assert spins < 50, f"next_timer stays at now ({now} ns) with {qp.stats()['inflight']} B in flight"
        now = max(t, now + 1)
    assert [w.wr_id for w in done] == [0, 1, 2, 3]
    assert [w.status_name for w in done] == ["RETRY_EXC_ERR"] + ["WR_FLUSH_ERR"] * 3
    assert qp.state == "ERROR"


# ------------------------------------------------------------ loss by time
def test_a_lost_head_that_later_packets_overtook_by_less_than_the_allowance_is_found_by_time():
    """RACK's reorder timer (RFC 8985 6.2): PSN 0 never arrives, PSNs 1-3 (sent 1 us later) do, and
    nothing more is sent. A sent-time comparison alone never calls PSN 0 lost (1 us < the allowance):
    it went again only on the retransmit timer (2.1 ms here). By time it goes when two RTTs and the
    allowance have passed since it left, counted as a loss (its path failed), not a timeout."""
    from .handdriven import HandDriven

    h = HandDriven(timeout=11, reorder_ns=5000, mtu=MTU)
    h.qp.post_write(h.mr, 0, MTU, 0x1000, 0x100, wr_id=1)
    assert [p["psn"] for p, d in h.out(at=0) if d["is_data"]] == [0]
    h.qp.post_write(h.mr, 0, 3 * MTU, 0x1000, 0x100, wr_id=2)
    assert [p["psn"] for p, d in h.out(at=1000) if d["is_data"]] == [1, 2, 3]
    h.deliver(h.sack(-1, bitmap=0b111))  # PSNs 1-3 by the bitmap (base = cack + 2), not 0; no RTT sample
    assert not [p for p, d in h.out(at=4999) if d["is_data"]]
    again = [p["psn"] for p, d in h.out(at=5000) if d["is_data"]]
    st = h.qp.stats()
    assert again == [0] and st["timeouts"] == 0 and st["losses"] == 1


def test_a_peer_that_acknowledges_all_but_the_head_cannot_keep_it_going_by_time_for_ever():
    """Hostile: the peer acknowledges every packet but PSN 0, however often it
    comes. Losses by time resend the head only while later packets are still
    being acknowledged; then the retransmit timer alone, with its budget:
    the QP fails with RETRY_EXC_ERR, the head went a bounded number of times
    and the context never asks to be called at "now" for ever."""
    from .handdriven import HandDriven

    h = HandDriven(timeout=8, linear_cnt=2, exp_cnt=3, reorder_ns=5000, mtu=MTU)
    h.qp.post_write(h.mr, 0, 16 * MTU, 0x1000, 0x100, wr_id=1)
    now, spins, done, bitmap = 0, 0, [], 0
    for _ in range(2000):
        for p, d in h.out(at=now):
            if d["is_data"] and p["psn"] != 0:
                bitmap |= 1 << (p["psn"] - 1)  # base = cack + 2 = PSN 1
        if bitmap:
            h.now = now
            h.deliver(h.sack(-1, bitmap=bitmap))  # all it got but the head
        done += h.ctx.poll_cq()
        if done:
            break
        t = h.ctx.next_timer(h.now)
        assert t is not None
        spins = spins + 1 if t <= h.now else 0
        assert spins < 50, f"next_timer stays at now ({h.now} ns)"
        now = max(t, h.now + 1)
    st = h.qp.stats()
    assert [w.status_name for w in done] == ["RETRY_EXC_ERR"] and h.qp.state == "ERROR", (done, st)
    assert st["timeouts"] == 2 + 3 + 1  # the budget: linear_cnt + exp_cnt tries, then the error
    assert 1 <= st["head_rtx_max"] <= st["timeouts"] + 1, st  # once per timeout, and once by time (seen: 5)
