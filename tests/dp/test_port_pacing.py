"""A port's transmit rate (mrc_ep_set_port_rate): one context driven by
hand in virtual time, every packet and timer exact. A paced port sends a
frame, then is busy for that frame's time at its rate; data waits in its
QP meanwhile (on another plane's port if that one is free), control
packets never wait."""
import pytest

from mrc import wire
from mrc.errors import MrcError

from .handdriven import PLANES, HandDriven

RATE = 8_000_000          # bit/s: one byte per microsecond
FRAME_HDRS = 14 + 40 + 8  # Ethernet, IPv6, UDP around each packet


def frame_ns(pkt: bytes) -> int:
    return (len(pkt) + FRAME_HDRS) * 8 * 10**9 // RATE


def paced(**attr):
    h = HandDriven(**{"cc": {"max_cwnd": 1 << 30}, "timeout": 24, **attr})  # the timer stays out of it
    for p in range(PLANES):
        h.ctx.set_port_rate(p, RATE)
    return h


def data(h, at):
    return [(p, d) for p, d in h.ctx.poll_tx(now_ns=at) if d["is_data"]]


def test_a_paced_port_sends_one_frame_and_is_busy_for_its_time():
    h = paced()
    src = bytearray(64 << 10)
    h.qp.post_write(h.ctx.reg_mr(src), 0, len(src), 0x1000, 1, wr_id=1)
    first = data(h, 0)
    assert sorted(wire.ev_plane(d["ev"]) for _, d in first) == list(range(PLANES))  # one per port
    busy = frame_ns(first[0][0])
    assert h.ctx.next_timer(0) == busy  # the engine is told when the first port is free
    assert data(h, busy - 1) == []
    again = data(h, busy)
    assert sorted(wire.ev_plane(d["ev"]) for _, d in again) == list(range(PLANES))


def test_the_bytes_sent_follow_the_rate_whenever_the_engine_looks():
    """Polled late or early, each port sends its rate: late polls catch up
    at most one frame (the port's saved-up time), early ones send nothing."""
    h = paced()
    src = bytearray(256 << 10)
    h.qp.post_write(h.ctx.reg_mr(src), 0, len(src), 0x1000, 1, wr_id=1)
    sent = {p: 0 for p in range(PLANES)}
    t, first = 0, None
    for step in range(400):
        for p, d in data(h, t):
            sent[wire.ev_plane(d["ev"])] += len(p) + FRAME_HDRS
            first = first or frame_ns(p)
        nxt = h.ctx.next_timer(t)
        if nxt is None:
            break
        t = nxt + (step % 3) * 1700  # sometimes on time, sometimes late
    assert sum(sent.values()) >= len(src)  # everything left
    for p, b in sent.items():  # no port beyond its rate: a frame at the start and one saved-up frame
        assert b * 8 * 10**9 / RATE <= t + 2 * first, (p, b, t)
    assert t * RATE / 8e9 >= len(src) / PLANES - 2 * first  # and it took about the time the rate says


def test_an_unpaced_port_sends_at_once_and_a_paced_one_beside_it_waits():
    h = paced()
    h.ctx.set_port_rate(1, 0)
    src = bytearray(64 << 10)
    h.qp.post_write(h.ctx.reg_mr(src), 0, len(src), 0x1000, 1, wr_id=1)
    planes = [wire.ev_plane(d["ev"]) for _, d in data(h, 0)]
    assert planes.count(1) == len(planes) - (PLANES - 1)  # plane 1 takes all the rest
    assert planes.count(1) > 4 and all(planes.count(p) == 1 for p in (0, 2, 3))


def test_acks_never_wait_for_a_busy_port():
    h = paced(ack_bytes=1)
    src = bytearray(64 << 10)
    h.qp.post_write(h.ctx.reg_mr(src), 0, len(src), 0x1000, 1, wr_id=1)
    assert data(h, 0)  # every port is busy now
    for i in range(3):  # data from the peer: each is answered at once
        h.deliver(h.data(i, b"x" * 512, off=512 * i, opcode=wire.OP_WRITE_ONLY, flags=wire.BTH_ACKREQ))
        assert [p for p, _ in h.sacks()], i


def test_rates_that_make_no_sense_are_refused():
    h = HandDriven()
    with pytest.raises(MrcError, match="plane 7"):
        h.ctx.set_port_rate(7, RATE)  # the context has 4 planes
    with pytest.raises(MrcError):
        h.ctx.set_port_rate(0, 5000)  # below 8 kbit/s
