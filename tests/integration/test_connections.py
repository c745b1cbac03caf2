"""Root tests: real MRC connections between fabric hosts (raw sockets, engine
threads, the kernel's uSID forwarding)."""
import hashlib
import os
import time

import pytest
from mrc._dp import lib

from mrc.errors import ErrnoError
from mrc.fabric import apply
from mrc.fabric.pair import connect_pair, host_context
from mrc.verbs import QPAttr, RemoteInfo
from tests.waiting import wait_for

pytestmark = pytest.mark.root


@pytest.fixture
def pair(fabric):
    t = fabric
    ca = host_context(t, 0)
    cb = host_context(t, 1)
    yield t, ca, cb
    ca.close()
    cb.close()
    apply.heal(t.name, None)


def connect(t, ca, cb, size, attr=None):
    p = connect_pair(ca, cb, size, attr)
    return p.qa, p.qb, p.src, p.dst, p.ms, p.remote, p.cq


def acked_packets(qa) -> int:
    """Packets acknowledged so far (PSNs start at the QP's random initial PSN)."""
    return (qa.stats()["una_psn"] - qa.sq_psn) & 0xFFFFFF


def stolen_cpu_s() -> float:
    """The hypervisor's steal time so far, summed over this machine's CPUs,
    in seconds (/proc/stat's "cpu" line, eighth column)."""
    with open("/proc/stat") as f:
        return int(f.readline().split()[8]) / os.sysconf("SC_CLK_TCK")


def stolen_between(samples: list[tuple[float, float]], a: float, b: float) -> float:
    """Steal time between monotonic times a and b from (time, stolen_cpu_s())
    samples in time order: the last reading at or before each end."""
    def at(x):
        return max((s for t, s in samples if t <= x), default=samples[0][1])
    return at(b) - at(a)


def sent_an_eighth(qa, size):
    wait_for(lambda: qa.stats()["tx_bytes"] >= size // 8, 30, what="an eighth of the transfer going out")


@pytest.mark.parametrize("imm", [False, True], ids=["write", "write_imm"])
def test_write_across_the_fabric_1B_to_64MiB_verified(pair, imm):
    t, ca, cb = pair
    sizes = [1, 100, 4096, 4097, 65536, 1 << 20, 16 << 20, 64 << 20]
    qa, qb, src, dst, ms, ib, cqa = connect(t, ca, cb, max(sizes), QPAttr(rq_depth=64))
    if imm:
        qb.post_recv(list(range(100, 100 + len(sizes))))
    cqb = qb.recv_cq
    for i, size in enumerate(sizes):
        qa.post_write(ms, 0, size, ib.addr, ib.rkey, wr_id=i, imm=(0x1000 + i) if imm else None)
        wc = cqa.wait(1, timeout=60)
        assert wc[0].ok and wc[0].wr_id == i, wc
        if imm:
            rwc = cqb.wait(1, timeout=10)
            assert rwc[0].ok and rwc[0].imm_data == 0x1000 + i and rwc[0].byte_len == size
        assert hashlib.sha256(dst[:size]).digest() == hashlib.sha256(src[:size]).digest(), size


def test_packets_spread_over_all_planes(pair):
    t, ca, cb = pair
    qa, qb, src, dst, ms, ib, cq = connect(t, ca, cb, 16 << 20)
    qa.post_write(ms, 0, len(src), ib.addr, ib.rkey, wr_id=1)
    assert cq.wait(1, timeout=60)[0].ok
    sent = qa.stats()["plane_tx"][: t.planes]
    total = sum(sent)
    assert all(abs(s / total - 1 / t.planes) <= 0.1 / t.planes for s in sent), sent
    # and the ports really carried them
    tx = [p["tx_packets"] for p in ca.port_stats()]
    assert all(x >= s for x, s in zip(tx, sent, strict=True)), (tx, sent)
    # a draining engine loses (next to) nothing in the kernel's rx rings
    drops = [p["rx_ring_drops"] for p in cb.port_stats()]
    assert sum(drops) <= total // 100, (drops, total, qa.stats())


def test_rx_ring_drops_are_counted_when_the_engine_does_not_drain_the_ring(fabric):
    """The kernel drops frames when a port's rx ring is full; port_stats()
    must show them (a receiver whose engine thread never runs cannot drain)."""
    t = fabric
    ca = host_context(t, 0, start=False)
    cb = host_context(t, 1, start=False)
    try:
        peer = ca.peer_index(RemoteInfo(qpn=0, ports={p.plane: p.address for p in cb.ports}, topology=t.name,
                                        host="h1"))
        assert ca.peers()[peer]["paths"][1] == [t.path_address(0, 1, 1, s) for s in range(t.spines)]
        assert all(p["rx_ring_drops"] == 0 for p in cb.port_stats())
        sent = ca.engine.blast(peer, 1024, 0.2)
        # each ring holds at most a few hundred frames; far more were sent to every plane
        drops = wait_for(lambda: (d := [p["rx_ring_drops"] for p in cb.port_stats()]) and all(d) and d, 5,
                         what="rx-ring drops on every port")
        assert sent > 20000, (sent, drops)
        assert sum(drops) < sent
    finally:
        ca.close()
        cb.close()


def _why(wc, qa, qb, ca, cb):
    """What a failed transfer leaves behind: enough to tell a stuck head of
    the window from dead paths or a starved engine."""
    states = {}
    for e in qa.evs():
        key = (e["plane"], e["state"])
        states[key] = states.get(key, 0) + 1
    return (f"{wc.status_name}\nrequester {qa.stats()}\nresponder {qb.stats()}\n"
            f"EVs (plane, state): count {sorted(states.items())}\n"
            f"drops a {ca.drops()} b {cb.drops()}\nports a {ca.port_stats()}\nports b {cb.port_stats()}")


def _cut_during(t, ca, cb, targets, size=256 << 20):
    qa, qb, src, dst, ms, ib, cq = connect(t, ca, cb, size)
    qa.post_write(ms, 0, size, ib.addr, ib.rkey, wr_id=1)
    sent_an_eighth(qa, size)
    for target in targets:
        apply.fail(t.name, target)
    assert acked_packets(qa) < size // qa.attr_mtu, "the transfer ended before the cut: make it longer"
    wc = cq.wait(1, timeout=120)
    assert wc[0].ok, _why(wc[0], qa, qb, ca, cb)
    assert hashlib.sha256(dst).digest() == hashlib.sha256(src).digest()
    return qa


def test_cutting_a_link_mid_transfer_completes_without_error(pair):
    t, ca, cb = pair
    qa = _cut_during(t, ca, cb, ["p1l0-p1s1"])
    assert qa.stats()["losses"] + qa.stats()["timeouts"] > 0  # the cut was felt and ridden out


def test_cutting_a_whole_plane_mid_transfer_completes_without_error(pair):
    t, ca, cb = pair
    _cut_during(t, ca, cb, ["p2s0", "p2s1"])


def test_a_whole_plane_cut_costs_about_its_share_in_the_first_second(pair):
    """All of a plane's T1 switches fail mid-transfer (host ports stay up):
    the second after the cut carries at least half what the second before
    did, per CPU-second the machine had. A plane's share is 1/planes, so
    3/4 would be the ideal here; the bound is loose because a loaded CI
    machine's rate swings by a third from one second to the next; the
    collapse it guards against (issue 16: 5.8 to 0.48 Gb/s) was a ratio of
    0.08. The rate here is the CPUs' (the kernel forwards every packet), so
    the hypervisor's steal time in a window (one CI run: 3,394 messages in
    the second before, 1,147 after) is taken out of that window's CPU
    time before the two are compared."""
    from mrc.fabric.faults import FaultScheduler

    t, ca, cb = pair
    qa, qb, src, dst, ms, remote, cq = connect(t, ca, cb, 64 << 20)
    msg, depth, slots = 256 << 10, 32, (64 << 20) // (256 << 10)
    cut = t.planes - 1
    times: list[float] = []
    steal = [(time.monotonic(), stolen_cpu_s())]
    with FaultScheduler(t.name) as faults:
        posted = done = 0
        t0 = time.monotonic()
        cut_at = None
        while time.monotonic() - t0 < 4.0:
            while posted - done < depth:
                off = (posted % slots) * msg
                qa.post_write(ms, off, msg, remote.addr + off, remote.rkey, wr_id=posted)
                posted += 1
            wcs = cq.poll()
            if not wcs:
                cq.get_event(0.002)
            for w in wcs:
                assert w.ok, w.status_name
                times.append(time.monotonic())
                done += 1
            if time.monotonic() - steal[-1][0] >= 0.01:
                steal.append((time.monotonic(), stolen_cpu_s()))
            if cut_at is None and time.monotonic() - t0 >= 2.0:
                # from the fault process, without waiting for it: the loop polls on
                faults.plan([(0.0, "fail", [t.spine(cut, s) for s in range(t.spines)], None)])
                cut_at = time.monotonic()
        while done < posted:
            for w in cq.wait(1, timeout=10):
                assert w.ok
                done += 1
        ev = faults.wait(30)
    assert ev and ev[0]["op"] == "fail"
    cut_at = ev[0]["start_ns"] / 1e9  # when the fault process began it (CLOCK_MONOTONIC)
    before = sum(1 for x in times if cut_at - 1.0 <= x < cut_at)
    after = sum(1 for x in times if cut_at <= x < cut_at + 1.0)
    cpus = os.cpu_count() or 1
    cpu_before, cpu_after = (max(cpus - stolen_between(steal, a, a + 1.0), 0.05 * cpus) for a in (cut_at - 1.0, cut_at))
    assert before > 0 and after / cpu_after >= 0.5 * before / cpu_before, (before, after, cpu_before, cpu_after)
    assert qa.state == "RTS" and qa.stats()["plane_tx"][cut] > 0


def _events(ctx, want, timeout=5.0):
    """Asynchronous events until one of type ``want`` (all of them, in order)."""
    got, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        ev = ctx.get_async_event(timeout=max(0.0, deadline - time.monotonic()))
        if ev is None:
            break
        got.append(ev)
        if ev.type == want:
            break
    return got


def test_a_host_port_losing_carrier_stops_its_plane_at_once_and_admin_down_outlasts_a_heal(pair):
    """The engine follows its ports' carrier (rtnetlink), as a NIC follows its
    PHY: a host link cut mid-transfer is PORT_ERR at once, the plane carries
    nothing more, the peer hears the new port bitmap, and the transfer ends
    intact; carrier back is PORT_ACTIVE. A port the controller disabled stays
    down when its link comes back."""
    t, ca, cb = pair
    plane = 1
    link = f"{t.host(0)}-{t.leaf(plane, t.host_leaf(0))}"
    port = next(i for i, p in enumerate(ca.ports) if p.plane == plane)
    size = 256 << 20
    qa, qb, src, dst, ms, ib, cq = connect(t, ca, cb, size)
    qa.post_write(ms, 0, size, ib.addr, ib.rkey, wr_id=1)
    sent_an_eighth(qa, size)
    apply.fail(t.name, link)
    evs = _events(ca, "PORT_ERR")
    assert [(e.type, e.info) for e in evs][-1:] == [("PORT_ERR", plane)], evs
    at = qa.stats()["plane_tx"][plane]
    st = ca.port_stats()[port]
    assert (st["carrier"], st["admin_up"], st["carrier_downs"]) == (0, 1, 1)
    assert acked_packets(qa) < size // qa.attr_mtu, "the transfer ended before the cut: make it longer"
    wc = cq.wait(1, timeout=120)
    assert wc[0].ok, _why(wc[0], qa, qb, ca, cb)
    assert hashlib.sha256(dst).digest() == hashlib.sha256(src).digest()
    assert qa.stats()["plane_tx"][plane] - at <= 8  # what was already queued, nothing after
    peer = _events(cb, "PEER_PORTS")
    assert peer and peer[-1].type == "PEER_PORTS" and not peer[-1].info & (1 << plane), peer
    # carrier back: PORT_ACTIVE, and the plane carries its share again
    apply.heal(t.name, link)
    assert [e.type for e in _events(ca, "PORT_ACTIVE")][-1:] == ["PORT_ACTIVE"]
    n = 32 << 20
    at = qa.stats()["plane_tx"][plane]
    qa.post_write(ms, 0, n, ib.addr, ib.rkey, wr_id=2)
    assert cq.wait(1, timeout=60)[0].ok
    assert qa.stats()["plane_tx"][plane] - at > n // qa.attr_mtu // t.planes // 2
    # disabled by the controller, the port stays down across a cut and heal
    ca.set_port(plane, False)
    apply.fail(t.name, link)
    apply.heal(t.name, link)
    wait_for(lambda: ca.port_stats()[port]["carrier"] == 1, 5, what="carrier back after the heal")
    st = ca.port_stats()[port]
    assert (st["carrier"], st["admin_up"]) == (1, 0)
    at = qa.stats()["plane_tx"][plane]
    qa.post_write(ms, 0, n, ib.addr, ib.rkey, wr_id=3)
    assert cq.wait(1, timeout=60)[0].ok
    assert qa.stats()["plane_tx"][plane] - at <= 2
    ca.set_port(plane, True)
    at = qa.stats()["plane_tx"][plane]
    qa.post_write(ms, 0, n, ib.addr, ib.rkey, wr_id=4)
    assert cq.wait(1, timeout=60)[0].ok
    assert qa.stats()["plane_tx"][plane] - at > n // qa.attr_mtu // t.planes // 2


def test_a_peer_that_never_answers_ends_in_retry_exceeded(pair):
    t, ca, cb = pair
    attr = QPAttr(timeout=8, linear_cnt=2, exp_cnt=2)  # 262 us x (2 + 2 + 4) ~ 2.1 ms budget
    qa = ca.create_qp(attr=attr)
    src = bytearray(10000)
    ms = ca.reg_mr(src)
    ghost = RemoteInfo(qpn=4242, ports={p: t.port_address(1, p) for p in range(t.planes)},
                       paths={p: [t.path_address(0, 1, p, 0)] for p in range(t.planes)}, addr=0, rkey=1)
    qa.connect(ghost)  # h1 has no such QP: nobody answers
    t0 = time.monotonic()
    qa.post_write(ms, 0, 10000, 0, 1, wr_id=9)
    wc = qa.send_cq.wait(1, timeout=10)
    assert wc[0].status == lib.MRC_WC_RETRY_EXC_ERR and qa.state == "ERROR"
    assert time.monotonic() - t0 < 1.0
    ev = ca.get_async_event(timeout=2)  # the async event channel says so too (an eventfd)
    assert ev is not None and (ev.type, ev.qpn, ev.status_name) == ("QP_FATAL", qa.qpn, "RETRY_EXC_ERR")
    assert ca.get_async_event(timeout=0.05) is None


def test_bad_api_use_raises_clear_errors(pair):
    t, ca, cb = pair
    qp = ca.create_qp()
    mr = ca.reg_mr(bytearray(100))
    with pytest.raises(ErrnoError, match="not allowed here"):
        qp.post_write(mr, 0, 10, 0, 1)  # before RTS
    qa, qb, src, dst, ms, ib, cq = connect(t, ca, cb, 4096)
    with pytest.raises(ErrnoError, match="outside its memory region"):
        qa.post_write(ms, 0, 8192, ib.addr, ib.rkey)  # region too small
    qa.post_write(ms, 0, 100, ib.addr, ib.rkey ^ 0x100, wr_id=3)  # unknown rkey
    wc = cq.wait(1, timeout=10)
    assert wc[0].status_name == "REM_ACCESS_ERR"
    qp.destroy()
    with pytest.raises(ErrnoError, match="no such object"):
        qp.post_write(mr, 0, 10, 0, 1)
    c = host_context(t, 0)
    c.close()
    with pytest.raises(ErrnoError, match="closed"):
        c.reg_mr(bytearray(10))
    with pytest.raises(ErrnoError, match="closed"):
        c.poll_cq()


def test_completion_channel_works_with_select(pair):
    import select

    t, ca, cb = pair
    qa, qb, src, dst, ms, ib, cq = connect(t, ca, cb, 4096)
    other = ca.create_cq()  # a second CQ: its channel stays quiet
    qa.post_write(ms, 0, 4096, ib.addr, ib.rkey, wr_id=1)
    r, _, _ = select.select([cq.fd, other.fd], [], [], 5)
    assert r == [cq.fd]
    wcs = cq.wait(1, timeout=5)
    assert wcs[0].ok and other.poll() == []


def test_query_device_reports_the_limits_the_engine_enforces(pair):
    t, ca, cb = pair
    d = ca.query_device()
    assert d.ports == d.planes == t.planes and d.max_payload == 8192 and d.wire_versions == (1,)
    assert d.caps == {"TRIM_NACK": True, "DYNAMIC_MPR": False, "SVC_TIME": False} and "wire v1" in d.version
    ca.create_qp(attr=QPAttr(mpr=d.max_mpr, timeout=d.max_timeout, linear_cnt=d.max_linear_retry,
                             exp_cnt=d.max_exp_retry)).destroy()  # the limits themselves are accepted
    for bad in (dict(mpr=d.max_mpr * 2), dict(mpr=3), dict(timeout=d.max_timeout + 1),
                dict(linear_cnt=d.max_linear_retry + 1), dict(exp_cnt=d.max_exp_retry + 1)):
        with pytest.raises(ErrnoError):
            ca.create_qp(attr=QPAttr(**bad))


def test_a_thread_that_progresses_the_nic_itself_gets_every_completion_and_gives_the_ports_back(pair):
    """mrc_ctx_progress: the waiting thread runs the NIC instead of waking the
    engine thread (mrc perf --latency). Its passes deliver data and
    completions; a pass that found completions leaves its ACKs to the next
    pass, so a thread that then stops calling (without progress_done) must
    still see them go out: the engine takes the ports back by itself."""
    t, ca, cb = pair
    for c in (ca, cb):
        c.engine.set_spin(0)  # engines that sleep at once: the callers do the work
    # a retry timer of 268 ms (1.024 us x 2^18), not the software profile's 2 ms: the ACK the engine
    # must send by itself goes in microseconds, and only a missing one may fire the timer; with 2 ms
    # one of the VM's pauses did once in CI (a hypervisor here steals up to 70 ms in a 100 ms window)
    qa, qb, src, dst, ms, ib, cq = connect(t, ca, cb, 1 << 20, QPAttr(rq_depth=16, timeout=18))
    cqb = qb.recv_cq
    work = 0
    for i in range(8):
        qb.post_recv([i])
        qa.post_write(ms, i * 4096, 64 << 10, ib.addr + i * 4096, ib.rkey, wr_id=i, imm=i)
        got, deadline = [], time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            work += ca.engine.progress() + cb.engine.progress()
            got += cq.poll() + cqb.poll()
        assert len(got) == 2 and all(w.ok for w in got), (i, got, qa.stats())
    assert work > 0  # the callers, not only the engine threads, moved packets
    assert dst[: 7 * 4096 + (64 << 10)] == src[: 7 * 4096 + (64 << 10)]
    # the receiver's last pass may hold the ACK for this one: it stops without saying
    qb.post_recv([99])
    qa.post_write(ms, 0, 4096, ib.addr, ib.rkey, wr_id=99, imm=99)
    deadline = time.monotonic() + 10
    while not cqb.poll() and time.monotonic() < deadline:
        cb.engine.progress()
    assert cq.wait(1, timeout=5)[0].ok  # its engine sent the ACK: nobody progresses now
    # and after progress_done the engine thread serves at once
    cb.engine.progress_done()
    qa.post_write(ms, 0, 4096, ib.addr, ib.rkey, wr_id=100)
    assert cq.wait(1, timeout=5)[0].ok
    assert qa.stats()["timeouts"] == 0, qa.stats()


def test_progress_needs_an_engine_thread(fabric):
    c = host_context(fabric, 0, start=False)
    try:
        with pytest.raises(ErrnoError, match="progress"):
            c.engine.progress()
        c.engine.progress_done()  # nothing to give back: no error, nothing happens
    finally:
        c.close()
    started = host_context(fabric, 0)
    started.close()
    with pytest.raises(ErrnoError, match="closed"):  # a closed context is refused, not touched
        started.engine.progress()
