"""What poll_tx and next_timer keep of each QP (csrc/core/types.h, dl*): they read
a QP only when it has work, so what they keep must be computed again after
everything that can change it: a post from the application, a packet for the
QP, a port change, an API call. Hand-driven, every step checked against the
exact times (mrc_ep_check_times: 0 kept values later than the exact ones),
the hostile packets included."""

from mrc._dp import lib

from mrc import wire

from .handdriven import PLANES, HandDriven


def late(h: HandDriven) -> int:
    return lib.mrc_ep_check_times(h.ctx._ep(), h.now)


def data_sent(h: HandDriven) -> list[dict]:
    return [p for p, _ in h.out() if p["opcode"] == wire.OP_WRITE_ONLY or p["opcode"] == wire.OP_WRITE_FIRST
            or p["opcode"] == wire.OP_WRITE_MIDDLE or p["opcode"] == wire.OP_WRITE_LAST]


def post(h: HandDriven, n: int = 8192, mr=None) -> None:
    h.qp.post_write(mr or h.ctx.reg_mr(bytearray(n)), 0, n, 0x1000, 1, wr_id=1)


def test_a_post_on_an_idle_qp_and_the_sack_that_ends_it_are_seen_at_once():
    h = HandDriven()
    mr = h.ctx.reg_mr(bytearray(8192))  # (an API call: every QP is looked at again after it)
    assert h.ctx.next_timer(h.now) is None and h.out() == [] and late(h) == 0  # kept: nothing to send
    post(h, mr=mr)  # the application's post alone flags the QP: the engine looks at it again
    assert h.ctx.next_timer(h.now) == h.now and late(h) == 0
    sent = data_sent(h)
    assert len(sent) == 2, sent
    rto = h.ctx.next_timer(h.now)
    assert rto is not None and rto > h.now and late(h) == 0  # what is out has its retransmit timer
    h.deliver(h.sack(1))  # the SACK for both: nothing is out, nothing waits
    assert late(h) == 0 and h.ctx.next_timer(h.now) is None


def test_ports_down_then_up_are_seen_by_a_qp_that_waited():
    h = HandDriven()
    for p in range(PLANES):
        h.ctx.set_port(p, False, h.now)
    post(h)
    assert data_sent(h) == [] and late(h) == 0  # no port: nothing goes, the retry timer runs
    t = h.ctx.next_timer(h.now)
    assert t is not None and t > h.now
    for p in range(PLANES):
        h.ctx.set_port(p, True, h.now)
    assert late(h) == 0 and len(data_sent(h)) == 2  # the ports are back: the data goes at once


def test_an_api_call_that_changes_the_paths_is_seen_by_a_qp_that_waited():
    h = HandDriven()
    evs = [e["ev"] for e in h.qp.evs()]
    for ev in evs:
        h.qp.set_ev_state(ev, lib.MRC_EV_DENIED)
    post(h)
    assert data_sent(h) == [] and h.ctx.next_timer(h.now) is None and late(h) == 0  # no path: it waits
    h.qp.set_ev_state(evs[0], lib.MRC_EV_GOOD)  # the controller allows one again
    assert h.ctx.next_timer(h.now) == h.now and late(h) == 0
    assert len(data_sent(h)) == 2


def test_hostile_packets_change_nothing_that_is_kept():
    h = HandDriven()
    post(h, 4 * 8192)
    data_sent(h)
    before = h.ctx.next_timer(h.now)
    bad = [h.sack(1, scid=0x1234),  # another connection's ids
           h.sack(1)[:-1] + bytes([h.sack(1)[-1] ^ 1]),  # a broken ICRC
           wire.build(opcode=wire.OP_SACK, dqpn=h.qp.qpn ^ 0x100, cack_psn=1),  # no such QP
           b"\x00" * 3]  # not a packet
    for pkt in bad:
        assert h.deliver(pkt) < 0
        assert late(h) == 0
    h.deliver(h.sack(1), peer=5)  # the right ids from another host
    assert late(h) == 0 and h.ctx.next_timer(h.now) == before  # the timer stands: nothing was acknowledged
