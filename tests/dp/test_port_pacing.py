"""A port's transmit rate (mrc_ep_set_port_rate): one context driven by
hand in virtual time, every packet and timer exact. A paced port sends a
frame, then is busy for that frame's time at its rate; data waits in its
QP meanwhile (on another plane's port if that one is free), control
packets never wait."""
import pytest
from mrc._dp import lib

from mrc import wire
from mrc.core import QPAttr
from mrc.errors import MrcError

from .handdriven import DEST_QPN, PEER, PLANES, HandDriven

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


def run_paced(h, writes, until_ns=10**9):
    """Post (qp, length) writes, then poll at every time the engine names: the data packets' EVs in order."""
    for qp, n in writes:
        src = bytearray(n)
        qp.post_write(h.ctx.reg_mr(src), 0, n, 0x1000, 1, wr_id=n)
    out, t = [], 0
    while t is not None and t < until_ns:
        out += [(d["qpn"] if "qpn" in d else None, d["ev"]) for _, d in data(h, t)]
        t = h.ctx.next_timer(t)
    return out


def test_a_busy_port_does_not_make_its_plane_skip_evs():
    """Ports out of step (short packets free theirs early): the rotation
    goes on to a free port's plane, and each plane still takes its EVs
    strictly in turn (before, it took the slot the rotation landed on, so a
    plane's paths got unequal shares at random: mrc sim all-to-all)."""
    h = paced(ev_count=32)
    evs = run_paced(h, [(h.qp, 3 * 4096 + 700)] * 12, until_ns=60_000_000)  # 48 packets, 12 short ones
    per = 32 // PLANES
    seqs = {p: [wire.ev_entropy(ev) for _, ev in evs if wire.ev_plane(ev) == p] for p in range(PLANES)}
    assert sum(len(s) for s in seqs.values()) == 48
    for p, s in seqs.items():
        assert all((b - a) % per == 1 for a, b in zip(s, s[1:], strict=False)), (p, s)


def test_a_plane_with_fewer_live_evs_carries_less_even_when_its_port_is_free():
    """Half of plane 1's EVs out of the rotation (a dead spine takes them):
    plane 1 gets its share of the rotation and no more, though its port is
    free more often than the others (it carried a full share over half its
    paths: mrc sim, a T1 down, 0.68 of the no-fault goodput)."""
    h = paced(ev_count=32, ev_backup=0)  # no spares to stand in
    for e in h.qp.evs():
        if wire.ev_plane(e["ev"]) == 1 and wire.ev_entropy(e["ev"]) % 2:
            h.qp.set_ev_state(e["ev"], lib.MRC_EV_DENIED)
    evs = run_paced(h, [(h.qp, 1 << 20)], until_ns=10**10)
    count = [sum(1 for _, ev in evs if wire.ev_plane(ev) == p) for p in range(PLANES)]
    others = (sum(count) - count[1]) / (PLANES - 1)
    assert sum(count) == 256
    assert 0.4 <= count[1] / others <= 0.6, count  # half the others' share (it was as much as theirs)


def test_a_slower_port_does_not_hold_the_faster_ones_back():
    h = paced()
    h.ctx.set_port_rate(2, RATE // 4)
    evs = run_paced(h, [(h.qp, 256 << 10)])
    count = [sum(1 for _, ev in evs if wire.ev_plane(ev) == p) for p in range(PLANES)]
    assert count[2] < count[0] / 2 and min(count[0], count[1], count[3]) >= max(count[0], count[1], count[3]) - 2


def test_qps_with_data_take_turns_whatever_idle_qps_sit_beside_them():
    """Two QPs with much to send and six idle ones (as an all-to-all's
    receiving QPs) behind paced ports: the two alternate a few packets at a
    time. The next poll used to start one QP further whoever had sent, so
    while it walked the idle QPs the first busy QP after them was served
    every time (mrc sim, all-to-all at 128 NICs: a QP sent its first packet,
    then nothing for 105 us)."""
    h = paced()
    attr = dict(planes=PLANES, ev_count=8, ack_bytes=1 << 30, timeout=24, cc={"max_cwnd": 1 << 30})
    qps = [h.qp]
    for i in range(7):
        qp = h.ctx.create_qp(QPAttr(**attr))
        qp.connect(DEST_QPN + 1 + i, PEER, rq_psn=0, sq_psn=0)
        qps.append(qp)
    for qp in qps[:2]:
        src = bytearray(1 << 20)
        qp.post_write(h.ctx.reg_mr(src), 0, len(src), 0x1000, 1, wr_id=1)
    t, order = 0, []
    while len(order) < 128:
        order += [wire.parse(p)["dqpn"] for p, _ in data(h, t)]
        t = h.ctx.next_timer(t)
    share = order[:128].count(DEST_QPN) / 128
    assert 0.4 <= share <= 0.6, order


def test_a_nics_packets_on_a_plane_take_its_paths_in_turn_whichever_qp_sends_them():
    """Two QPs sending side by side: each plane's port goes over the plane's
    paths (EV entropies, one path each here) in turn across both QPs, as one
    QP alone does. With a cursor of each QP's own, the port took the two
    QPs' cursors alternately and sprayed at random over the paths (mrc sim,
    all-to-all at 128 NICs: its leaf uplinks queued into 1,552 trims; 55
    with the port's cursor)."""
    h = paced(ev_count=32)
    attr = dict(planes=PLANES, ev_count=32, ack_bytes=1 << 30, timeout=24, cc={"max_cwnd": 1 << 30})
    other = h.ctx.create_qp(QPAttr(**attr))
    other.connect(DEST_QPN + 1, PEER, rq_psn=0, sq_psn=0)
    for qp in (h.qp, other):
        src = bytearray(256 << 10)
        qp.post_write(h.ctx.reg_mr(src), 0, len(src), 0x1000, 1, wr_id=1)
    t, sent = 0, []
    while len(sent) < 128:
        sent += [(wire.parse(p)["dqpn"], d["ev"]) for p, d in data(h, t)]
        t = h.ctx.next_timer(t)
    per = 32 // PLANES
    for p in range(PLANES):
        seq = [(q, wire.ev_entropy(ev)) for q, ev in sent if wire.ev_plane(ev) == p]
        assert len({q for q, _ in seq}) == 2, (p, seq)  # both QPs sent on this plane
        assert all((b[1] - a[1]) % per == 1 for a, b in zip(seq, seq[1:], strict=False)), (p, seq)
