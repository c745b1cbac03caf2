"""Path and plane failures over the in-memory link (protocol.md section 3)."""
import pytest
from mrc._dp import lib

from .harness import PER_PLANE, PLANES, Pair, attr, digest, finish, start_big

FOREVER = 1 << 62
RTT_NS = 2 * 5000  # two 5 us path delays


def evs_on(pair, plane, idx, active_only=True):
    return [e for e in pair.qa.evs() if e["plane"] == plane and e["entropy"] % PER_PLANE == idx
            and (e["active"] or not active_only)]


def test_one_path_dead_from_the_start():
    pair = Pair(seed=11)
    pair.sim.set_path(pair.sim.path(2, 1), down_from_ns=0, down_until_ns=FOREVER)
    src, dst = start_big(pair)
    wc = finish(pair)
    assert wc[0].ok and digest(dst) == digest(src)
    # every EV that was tried on the dead path is retired, none is left in the rotation
    assert pair.qa.stats()["losses"] > 0
    assert not [e for e in evs_on(pair, 2, 1) if e["state"] == "GOOD"]
    assert [e for e in evs_on(pair, 2, 1, active_only=False) if e["state"] == "ASSUMED_BAD"]


def test_path_dying_mid_transfer_is_retired_within_a_few_rtts_and_probed_back():
    pair = Pair(seed=12)
    pair.qa.set_ev_paths([PER_PLANE] * PLANES)  # as a context tells its QPs: a spare never lands on the dead path
    src, dst = start_big(pair)
    pair.sim.run(200_000)
    t_dead = pair.sim.now
    victims = {e["ev"] for e in evs_on(pair, 1, 3)}
    assert victims
    pair.sim.set_path(pair.sim.path(1, 3), down_from_ns=t_dead, down_until_ns=FOREVER)
    # step in small increments until no active EV on the dead path is GOOD
    while True:
        pair.sim.run(pair.sim.now + 2000)
        states = pair.ev_states()
        if all(states[v] != "GOOD" for v in victims):
            break
        assert pair.sim.now - t_dead < 20 * RTT_NS, "dead path's EVs still GOOD after 20 RTTs"
    retired_after = pair.sim.now - t_dead
    assert retired_after <= 10 * RTT_NS, retired_after
    assert all(states[v] == "ASSUMED_BAD" for v in victims)
    # none of the active slots uses the dead path any more (spares replaced them)
    assert not [e for e in evs_on(pair, 1, 3) if e["state"] == "GOOD"]
    # heal: probes bring every victim back to GOOD
    pair.sim.set_path(pair.sim.path(1, 3), down_from_ns=0, down_until_ns=0)
    t_heal = pair.sim.now
    pair.sim.run_until(lambda: all(pair.ev_states()[v] == "GOOD" for v in victims),
                       budget_ns=5_000_000, step_ns=10_000)
    assert pair.sim.now - t_heal < 2_000_000
    # and take their slots back: the healed path carries its share again
    assert {e["ev"] for e in evs_on(pair, 1, 3)} == victims
    events = pair.a.ev_events()
    assert {(e["ev"], e["old"], e["new"]) for e in events if e["ev"] in victims} >= \
        {(v, "GOOD", "ASSUMED_BAD") for v in victims} | {(v, "ASSUMED_BAD", "GOOD") for v in victims}
    wc = finish(pair)
    assert wc[0].ok and digest(dst) == digest(src)


def test_whole_plane_dying_keeps_the_load_equal_on_the_others():
    pair = Pair(seed=13, qp_attr=attr(sq_depth=256))
    size = 64 << 20
    src, dst = start_big(pair, size)
    pair.sim.run(200_000)
    for i in range(PER_PLANE):
        pair.sim.set_path(pair.sim.path(3, i), down_from_ns=pair.sim.now, down_until_ns=FOREVER)
    pair.sim.run(pair.sim.now + 300_000)  # let the loss detector retire the plane
    before = pair.qa.stats()["plane_tx"][:PLANES]
    wc = finish(pair)
    after = pair.qa.stats()["plane_tx"][:PLANES]
    assert wc[0].ok and digest(dst) == digest(src)
    share = [after[p] - before[p] for p in range(PLANES)]
    alive = share[:3]
    assert share[3] < 0.01 * sum(alive), share
    mean = sum(alive) / 3
    assert all(abs(s - mean) <= 0.10 * mean for s in alive), share


def test_flapping_path_every_few_rtts():
    pair = Pair(seed=14)
    pair.sim.set_path(pair.sim.path(0, 2), down_from_ns=0, down_until_ns=FOREVER, flap_period_ns=6 * RTT_NS)
    src, dst = start_big(pair)
    wc = finish(pair)
    assert wc[0].ok and digest(dst) == digest(src)
    assert pair.qa.stats()["losses"] > 0


def test_all_paths_dead_ends_in_error_with_retry_exceeded_and_flush():
    pair = Pair(seed=15, qp_attr=attr(timeout=4, linear_cnt=3, exp_cnt=3))
    pair.sim.set_all(delay_ns=5000, down_from_ns=0, down_until_ns=FOREVER)
    buf = bytearray(100_000)
    dst = bytearray(100_000)
    ms, md = pair.a.reg_mr(buf), pair.b.reg_mr(dst, remote_write=True)
    for i in range(3):
        pair.qa.post_write(ms, 0, 30_000, md.addr, md.rkey, wr_id=i)
    # budget: RTO 16 us x (3 linear + 2 + 4 + 8 exponential) is well under 1 ms
    wcs = pair.sim.run_until(lambda: pair.a.poll_cq(), budget_ns=50_000_000, step_ns=100_000)
    wcs += pair.a.poll_cq()
    assert [w.wr_id for w in wcs] == [0, 1, 2]
    assert wcs[0].status == lib.MRC_WC_RETRY_EXC_ERR
    assert all(w.status == lib.MRC_WC_WR_FLUSH_ERR for w in wcs[1:])
    assert pair.qa.state == "ERROR"
    assert pair.sim.now < 5_000_000
    # and the application hears of it once, as an asynchronous event
    ev = pair.a.async_events()
    assert [(e.type, e.qpn, e.status_name) for e in ev] == [("QP_FATAL", pair.qa.qpn, "RETRY_EXC_ERR")]
    assert pair.a.async_events() == []
    # nothing hangs: the link goes idle
    pair.sim.run(pair.sim.now + 10_000_000)
    assert pair.qa.stats()["inflight"] == 0


def test_port_down_moves_traffic_to_other_planes_and_tells_the_peer():
    pair = Pair(seed=16)
    src, dst = start_big(pair)
    pair.sim.run(100_000)
    pair.b.set_port(2, False, pair.sim.now)  # the receiver's plane-2 port goes down
    pair.b.set_port(2, False, pair.sim.now)  # (again: no second event)
    assert [(e.type, e.info) for e in pair.b.async_events()] == [("PORT_ERR", 2)]
    for i in range(PER_PLANE):
        pair.sim.set_path(pair.sim.path(2, i), down_from_ns=pair.sim.now, down_until_ns=FOREVER)
    pair.sim.run(pair.sim.now + 100_000)
    before = pair.qa.stats()["plane_tx"][2]
    wc = finish(pair)
    assert wc[0].ok and digest(dst) == digest(src)
    assert pair.qa.stats()["plane_tx"][2] - before <= 2  # at most a straggler or a probe
    peer = pair.a.async_events()  # the sender heard the peer's new port status
    assert ("PEER_PORTS", pair.qa.qpn) in [(e.type, e.qpn) for e in peer]
    assert not [e for e in peer if e.type == "PEER_PORTS"][-1].info & (1 << 2)
    # a QP the application moves to ERROR itself is not an asynchronous event
    pair.qa.modify(lib.MRC_QPS_ERROR)
    assert pair.qa.state == "ERROR" and not [e for e in pair.a.async_events() if e.type == "QP_FATAL"]


def _first_retirement(pair, victims, budget_ns=50_000_000):
    """Step until some victim leaves GOOD; return the states at that moment."""
    t0 = pair.sim.now
    while pair.sim.now - t0 < budget_ns:
        pair.sim.run(pair.sim.now + 2000)
        states = pair.ev_states()
        if any(states[v] != "GOOD" for v in victims):
            return states
    raise AssertionError("no EV of the lossy path left GOOD")


def test_a_loss_retires_every_ev_that_shares_the_path_when_the_qp_knows_the_aliases():
    """20% loss on one path: told which EVs alias (entropy mod paths per plane),
    the first loss retires all of the path's EVs at once; not told, only the one."""
    got = {}
    for told in (False, True):
        pair = Pair(seed=21)
        if told:
            pair.qa.set_ev_paths([PER_PLANE] * PLANES)
        start_big(pair)
        pair.sim.run(200_000)
        victims = {e["ev"] for e in evs_on(pair, 2, 1, active_only=False)}
        assert len(victims) > 2
        pair.a.ev_events()  # (what happened before the fault)
        t_fault = pair.sim.now
        pair.sim.set_path(pair.sim.path(2, 1), loss_ppm=200_000)
        states = _first_retirement(pair, victims)
        got[told] = sum(states[v] != "GOOD" for v in victims)
        # each retirement says when the lost packet behind it was sent: after
        # the fault began, and the loss retired its EVs within a few RTTs
        bad = [e for e in pair.a.ev_events() if e["ev"] in victims and e["new"] == "ASSUMED_BAD"]
        assert bad and all(t_fault <= e["cause_ns"] < e["t_ns"] for e in bad), bad
        assert all(e["t_ns"] - e["cause_ns"] <= 10 * RTT_NS for e in bad), bad
        if told:  # one loss, one cause for the whole path
            assert len({e["cause_ns"] for e in bad}) == 1 and len(bad) == len(victims)
        # the rest of the transfer is intact either way
        pair.sim.set_path(pair.sim.path(2, 1), loss_ppm=0)
        assert finish(pair)[0].ok
    assert got[True] == len(victims), got
    assert got[False] < len(victims), got


def test_a_retired_path_comes_back_when_its_round_trip_is_longer_than_the_probe_interval():
    """A probe answered after probe_interval still proves the path works: on a
    slow fabric (or a busy host whose engine answers late) a healed path must
    come back, not be probed ever less often because every answer is late."""
    slow = 60_000  # RTT 120 us, the harness's probe interval is 50 us
    pair = Pair(seed=22, qp_attr=attr(timeout=9))
    pair.sim.set_all(delay_ns=slow)
    src, dst = start_big(pair, 64 << 20)
    pair.sim.run(2_000_000)
    victims = {e["ev"] for e in evs_on(pair, 1, 3)}
    pair.sim.set_path(pair.sim.path(1, 3), down_from_ns=pair.sim.now, down_until_ns=FOREVER)
    pair.sim.run_until(lambda: all(pair.ev_states()[v] != "GOOD" for v in victims),
                       budget_ns=20_000_000, step_ns=10_000)
    pair.sim.set_path(pair.sim.path(1, 3), down_from_ns=0, down_until_ns=0)
    t_heal = pair.sim.now
    pair.sim.run_until(lambda: all(pair.ev_states()[v] == "GOOD" for v in victims),
                       budget_ns=100_000_000, step_ns=20_000)
    # k = 3 probes in a row, each answered after one RTT, plus the backoff reached while dead
    assert pair.sim.now - t_heal < 20 * 2 * slow + (50_000 << 10), pair.sim.now - t_heal
    wc = finish(pair)
    assert wc[0].ok and digest(dst) == digest(src)


def test_a_blackout_longer_than_the_rto_resends_but_does_not_retire_every_path():
    """Nothing comes back for a few RTOs (every path down at once: to the
    sender this looks like a stalled host or fabric CPUs). The timer resends
    what was out, but only the oldest packet's path counts as failed each
    time: retiring every path in flight would empty the rotation down to
    ev_min_active, and on a loaded VM such stalls happen at every fault."""
    pair = Pair(seed=23)
    pair.qa.set_ev_paths([PER_PLANE] * PLANES)
    src, dst = start_big(pair)
    pair.sim.run(200_000)
    pair.a.ev_events()
    before = pair.qa.stats()
    t = pair.sim.now
    rto = 1024 << 6  # the harness's timeout = 6
    pair.sim.set_all(delay_ns=5000, down_from_ns=t, down_until_ns=t + 3 * rto + rto // 2)
    pair.sim.run(t + 4 * rto)
    pair.sim.set_all(delay_ns=5000)
    wc = finish(pair)
    assert wc[0].ok and digest(dst) == digest(src)
    st = pair.qa.stats()
    timeouts = st["timeouts"] - before["timeouts"]
    assert timeouts >= 2, timeouts
    retired = {e["ev"] for e in pair.a.ev_events() if e["new"] == "ASSUMED_BAD"}
    aliases = len(pair.qa.evs()) // (PLANES * PER_PLANE)
    # the blackout's own timeouts retire one path each; the rest of the
    # rotation (and the packets resent into it) stays GOOD
    assert len(retired) <= (timeouts + 2) * aliases, (len(retired), timeouts, aliases)


def _warm(seed, **kw):
    """A pair whose sender has its RTT (10 us) and a retransmit timer of 16.8 ms
    (timeout 14, as a NIC configured for a slow fabric would have it)."""
    pair = Pair(seed=seed, qp_attr=attr(timeout=14, **kw))
    _, _, send, _ = pair.transfer([64 << 10])
    assert send[0].ok and pair.qa.stats()["srtt_ns"] == RTT_NS
    return pair, pair.qa.stats()


@pytest.mark.parametrize("size", [1000, 16 << 10, 1 << 20])
def test_a_lost_tail_is_probed_within_a_few_rtts_not_the_retransmit_timer(size):
    """Every path drops what leaves in the first 15 us of a message: its last
    packets have no later packet whose SACK would show them lost. The tail
    loss probe sends the newest one again after two RTTs; its SACK shows the
    rest lost (RACK counts a packet sent again once its copy had time to
    return), and the message completes in microseconds, not the 16.8 ms
    retransmit timer."""
    pair, st0 = _warm(31)
    rto = 1024 << 14
    t = pair.sim.now
    pair.sim.set_all(delay_ns=5000, down_from_ns=t, down_until_ns=t + 15_000)
    src, dst, send, _ = pair.transfer([size])
    took = pair.sim.now - t
    st = pair.qa.stats()
    assert send[0].ok and bytes(src) == bytes(dst)
    assert st["timeouts"] == st0["timeouts"], "the retransmit timer fired"
    assert st["tlp_probes"] - st0["tlp_probes"] == 1
    # everything resent was lost: the probe's packet, and what its SACK showed lost
    lost = st["losses"] - st0["losses"] + 1
    assert st["rtx_packets"] - st0["rtx_packets"] == lost >= min(-(-size // 4096), 2)
    assert took < rto // 20, took


def test_a_tail_that_is_only_late_is_probed_once_and_lands_once():
    """Every path's delay grows tenfold under a one-packet message: the probe
    goes (nothing came back for two RTTs), then both copies arrive. The
    receiver places the data once, the send completes once, no timer
    fires and the QP stays usable."""
    pair, st0 = _warm(32)
    pair.sim.set_all(delay_ns=50_000)
    src, dst, send, _ = pair.transfer([1000])
    st = pair.qa.stats()
    assert [w.ok for w in send] == [True] and bytes(src) == bytes(dst)
    assert st["tlp_probes"] - st0["tlp_probes"] == 1
    assert st["timeouts"] == st0["timeouts"]
    pair.sim.run(pair.sim.now + 1_000_000)
    assert pair.b.poll_cq() == [] and pair.a.poll_cq() == []
    assert pair.qb.stats()["rx_packets"] - 16 - 1 == 1  # the warm-up's 16, the packet and its probe's copy
    _, _, send, _ = pair.transfer([4096] * 4)
    assert all(w.ok for w in send)


def test_no_probe_while_sacks_keep_coming():
    """A long transfer with no loss: SACKs keep arriving, so no tail loss
    probe ever goes."""
    pair, st0 = _warm(33)
    _, _, send, _ = pair.transfer([1 << 20] * 8)
    assert all(w.ok for w in send)
    st = pair.qa.stats()
    assert st["tlp_probes"] == st0["tlp_probes"] == 0
    assert st["rtx_packets"] == 0
