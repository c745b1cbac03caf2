"""Buffers of k packets, the core's half (mrc_ep_set_gso, ev_pick_burst): a
QP's new full-size data packets go k in a row on one EV, so that the I/O side
can hand the kernel the k as one buffer of one path; the rotation still moves
over every EV, one step per k packets; a message's short last packet may end
a burst, never start one; an EV that leaves GOOD ends its burst at once; and
every packet stays a packet of its own (its PSN, its ICRC, placed alone)."""
import collections

import pytest

from mrc import wire
from mrc.core import QPAttr
from mrc.errors import MrcError
from mrc.manual import ManualContext

MTU = 4096


def pair(k: int, planes: int = 2):
    a, b = ManualContext(planes=planes, seed=3), ManualContext(planes=planes, seed=4)
    a.set_gso(k)
    qa = a.create_qp(QPAttr(planes=planes, mtu=MTU))
    qb = b.create_qp(QPAttr(planes=planes, mtu=MTU))
    qa.connect(qb.qpn, 0, rq_psn=qb.sq_psn)
    qb.connect(qa.qpn, 0, rq_psn=qa.sq_psn)
    return a, b, qa, qb


def runs(evs: list[int]) -> list[int]:
    """The lengths of the runs of equal EVs, in order."""
    out: list[int] = []
    for i, ev in enumerate(evs):
        if i and ev == evs[i - 1]:
            out[-1] += 1
        else:
            out.append(1)
    return out


def send(a, b, qa, nbytes: int, msg: int):
    """Post ``nbytes`` in messages of ``msg`` and run both ends until every byte is acknowledged;
    returns the source, the destination and every data packet sent, in order."""
    src, dst = bytearray(i * 7 & 0xFF for i in range(nbytes)), bytearray(nbytes)
    ms, md = a.reg_mr(src), b.reg_mr(dst, remote_write=True)
    for off in range(0, nbytes, msg):
        qa.post_write(ms, off, min(msg, nbytes - off), md.addr + off, md.rkey, wr_id=off)
    sent, now = [], 1000
    for _ in range(10000):
        out = a.poll_tx(now_ns=now, max_packets=1024)
        sent += [(p, m) for p, m in out if m["is_data"]]
        for p, _ in out:
            b.input(p, now_ns=now)
        now += 200_000  # past the receiver's SACK delay
        for p, _ in b.poll_tx(now_ns=now):
            a.input(p, now_ns=now)
        if qa.stats()["inflight"] == 0 and sum(len(wire.parse(p)["payload"]) for p, _ in sent) >= nbytes:
            break
    return src, dst, sent


@pytest.mark.parametrize("k", [1, 2, 7])
def test_full_packets_go_k_in_a_row_and_every_packet_stays_whole(k):
    a, b, qa, _ = pair(k)
    src, dst, sent = send(a, b, qa, 64 * MTU, 64 * MTU)
    evs = [m["ev"] for _, m in sent]
    assert len(sent) == 64  # no loss: nothing sent twice
    r = runs(evs)
    assert all(n == k for n in r[:-1]) and r[-1] <= k, r
    # each packet its own: its own PSN and a good ICRC, placed alone
    assert len({wire.parse(p)["psn"] for p, _ in sent}) == 64
    assert all(wire.parse(p)["icrc_ok"] for p, _ in sent)
    assert dst == src
    a.close()
    b.close()


def test_the_rotation_still_spreads_over_every_ev_one_step_per_burst():
    """Over many packets each EV of the QP gets the same share with bursts as without."""
    counts = {}
    for k in (1, 7):
        a, b, qa, _ = pair(k)
        _, _, sent = send(a, b, qa, 7 * 256 * MTU, 1 << 20)
        counts[k] = collections.Counter(m["ev"] for _, m in sent)
        a.close()
        b.close()
    assert set(counts[7]) == set(counts[1])  # the same EVs
    per = sorted(counts[7].values())
    assert per[-1] - per[0] <= 7, per  # within one burst of even


def test_a_short_last_packet_ends_a_burst_and_never_starts_one():
    a, b, qa, _ = pair(7)
    # messages of 2.5 packets: full, full, short; the next message's first packet starts a new burst
    _, _, sent = send(a, b, qa, 10 * (5 * MTU // 2), 5 * MTU // 2)
    lens = [len(wire.parse(p)["payload"]) for p, _ in sent]
    evs = [m["ev"] for _, m in sent]
    for i in range(1, len(sent)):
        if lens[i - 1] < MTU:  # after a short packet: another EV
            assert evs[i] != evs[i - 1], (i, lens[i - 1])
    assert max(runs(evs)) <= 7
    a.close()
    b.close()


def test_an_ev_that_leaves_good_ends_its_burst():
    a, b, qa, _ = pair(7)
    src, dst = bytearray(64 * MTU), bytearray(64 * MTU)
    ms, md = a.reg_mr(src), b.reg_mr(dst, remote_write=True)
    qa.post_write(ms, 0, 64 * MTU, md.addr, md.rkey, wr_id=1)
    first = [m for _, m in a.poll_tx(now_ns=1000, max_packets=3) if m["is_data"]]
    ev = first[0]["ev"]
    assert [m["ev"] for m in first] == [ev] * 3
    qa.set_ev_state(ev, 3)  # DENIED, as the controller (or a loss) would
    more = [m for _, m in a.poll_tx(now_ns=2000, max_packets=8) if m["is_data"]]
    assert more and ev not in [m["ev"] for m in more]
    a.close()
    b.close()


def test_k_beyond_eight_is_refused():
    a = ManualContext(planes=2, seed=1)
    with pytest.raises(MrcError):
        a.set_gso(9)
    a.set_gso(0)  # 0 and 1: one packet per EV turn
    a.close()


def test_a_paced_port_sends_its_packets_one_ev_turn_each():
    """Pacing counts a port's packets one by one: no bursts on a rate-limited port."""
    a, b, qa, _ = pair(7)
    for plane in (0, 1):
        a.set_port_rate(plane, 10**9)
    evs = [m["ev"] for _, m in send(a, b, qa, 32 * MTU, 32 * MTU)[2]]
    assert evs and max(runs(evs)) == 1
    a.close()
    b.close()


def test_a_burst_waits_for_a_window_that_holds_all_of_it():
    """With a congestion window of 10 packets, each round of the sender's output is whole bursts of
    k: a burst that does not fit waits for the next ACK instead of leaving as two kernel buffers,
    and every byte still arrives (the packet that fills the window asks for the ACK)."""
    k = 7
    a, b = ManualContext(planes=2, seed=3), ManualContext(planes=2, seed=4)
    a.set_gso(k)
    qa = a.create_qp(QPAttr(planes=2, mtu=MTU, cc={"max_cwnd": 10 * MTU}))
    qb = b.create_qp(QPAttr(planes=2, mtu=MTU))
    qa.connect(qb.qpn, 0, rq_psn=qb.sq_psn)
    qb.connect(qa.qpn, 0, rq_psn=qa.sq_psn)
    nbytes = 70 * MTU
    src, dst = bytearray(i * 11 & 0xFF for i in range(nbytes)), bytearray(nbytes)
    ms, md = a.reg_mr(src), b.reg_mr(dst, remote_write=True)
    qa.post_write(ms, 0, nbytes, md.addr, md.rkey, wr_id=1)
    rounds, now = [], 1000
    for _ in range(1000):
        out = [(p, m) for p, m in a.poll_tx(now_ns=now, max_packets=1024) if m["is_data"]]
        if out:
            rounds.append([m["ev"] for _, m in out])
        for p, _ in out:
            b.input(p, now_ns=now)
        now += 20_000  # within the receiver's SACK delay: only ACK requests and ack_bytes answer
        for p, _ in b.poll_tx(now_ns=now):
            a.input(p, now_ns=now)
        if dst == src:
            break
    assert dst == src
    assert sum(len(r) for r in rounds) == 70 and len(rounds) > 3  # the window made it take rounds
    assert all(n == k for r in rounds for n in runs(r)), rounds  # whole bursts in every round
    a.close()
    b.close()
