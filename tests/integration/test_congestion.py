"""Root tests: MRC's congestion half on a fabric whose switch ports queue,
mark, trim and drop (mrc.fabric.qos): a 2:1 incast at a low rate, so the
network, not this machine's CPU, is the bottleneck."""

import threading
import time

import pytest

from mrc.fabric import apply, qos
from mrc.fabric.pair import connect_pair, host_context
from mrc.fabric.qos import PortQoS
from mrc.fabric.topology import Topology
from mrc.verbs import QPAttr
from tests.integration.conftest import unique_name

pytestmark = pytest.mark.root

RATE = 100_000_000  # per port: the receiver's two ports carry 200 Mbit/s, far below what the VM forwards


@pytest.fixture
def incast_fabric():
    t = Topology(planes=2, spines=2, leaves=1, hosts=3, name=unique_name("c"))
    apply.up(t)
    try:
        yield t
    finally:
        apply.down(t.name)


def jain(xs):
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


def write_all(pair, total, msg, out, key):
    """Write ``total`` bytes in ``msg``-byte WRITEs, 8 in flight, cycling over the region."""
    qa, cq = pair.qa, pair.cq
    n, slots = total // msg, len(pair.src) // msg
    posted = done = 0
    marks = []
    t0 = time.monotonic()
    while done < n:
        while posted < n and posted - done < 8:
            off = (posted % slots) * msg
            qa.post_write(pair.ms, off, msg, pair.remote.addr + off, pair.remote.rkey, wr_id=posted)
            posted += 1
        for w in cq.wait(1, timeout=30):
            assert w.ok, (key, w, qa.stats())
            done += 1
            marks.append(time.monotonic() - t0)
    out[key] = marks


def test_a_two_to_one_incast_is_marked_and_trimmed_not_dropped_and_shared_fairly(incast_fabric):
    t = incast_fabric
    q = PortQoS(RATE, ecn_kb=16, trim_kb=48, buffer_kb=1024)
    n = apply.set_queues(t.name, None, q)
    assert n == len([s for s in apply.queue_stats(t.name) if not s["host"]]) > 0
    ctxs = [host_context(t, h) for h in range(3)]
    try:
        prof = qos.qp_profile(RATE, t.planes, q=q)  # the window and timer of a 100 Mbit/s fabric
        pairs = [connect_pair(ctxs[h], ctxs[0], 4 << 20, QPAttr(**prof)) for h in (1, 2)]
        total, msg = 12 << 20, 64 << 10
        marks: dict = {}
        threads = [threading.Thread(target=write_all, args=(p, total, msg, marks, i)) for i, p in enumerate(pairs)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
        assert set(marks) == {0, 1}, "a flow did not finish"
        # fairness while both ran: each flow's bytes until the first one finished
        end = min(m[-1] for m in marks.values())
        shares = [sum(1 for x in m if x <= end) * msg for m in marks.values()]
        assert jain(shares) >= 0.9, shares
        assert all(p.verify() for p in pairs)  # the regions end equal to the sources
        # the bottleneck is the receiver's ports: they marked and trimmed, never dropped
        rx_ports = [s for s in apply.queue_stats(t.name) if s["link"].startswith("h0-") and not s["host"]]
        assert len(rx_ports) == 2
        assert sum(s["marked"] for s in rx_ports) > 0, rx_ports
        assert sum(s["trimmed"] for s in rx_ports) > 0, rx_ports
        assert sum(s["dropped"] for s in apply.queue_stats(t.name)) == 0
        st = [p.qa.stats() for p in pairs]
        assert sum(s["ecn_marks"] for s in st) > 0 and sum(s["trims"] for s in st) > 0, st
        # and the bottleneck was used: 2 x 12 MiB over 200 Mbit/s takes 1.0 s at line rate
        secs = max(m[-1] for m in marks.values())
        util = 2 * total * 8 / secs / (2 * RATE)
        assert util >= 0.7, (util, secs)  # seen 0.90; this bound leaves room for a loaded CI machine
        assert sum(s["timeouts"] for s in st) <= 4, st  # losses are found by SACKs and trims, not timers
    finally:
        for c in ctxs:
            c.close()


def run_bench(*args: str) -> dict:
    """bench/congestion_bench.py --json at a small scale (2 planes of 2 spines, 256 KiB messages): its JSON."""
    import json
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, os.path.join(root, "bench", "congestion_bench.py"), "--json",
                        "--planes", "2", "--spines", "2", "--msg", "256K", *args],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def test_the_congestion_bench_runs_mrc_and_tcp_flows_across_host_processes():
    """bench/congestion_bench.py end to end at a small scale: one worker
    process per host, MRC and TCP over the same queued fabric, the JSON the
    README's table is made of."""
    out = run_bench("--hosts", "3", "--leaves", "1", "--seconds", "1.5", "--workloads", "incast",
                    "--transports", "mrc,tcp_cubic")
    w = out["workloads"]["incast"]
    assert out["srv6"] in ("kernel", "tc-bpf"), out  # what carried the kernel's TCP (mrc.fabric.srv6bpf)
    assert out["spin_us"] == 0  # the engines sleep when idle: the two cores forward the fabric
    for run in (w, w["tcp_cubic"]):
        assert run["verified"] and run["qp_errors"] == 0 and run["messages"] > 0, run
        for key in ("utilization", "jain", "drops", "trims", "marks", "p99_ms", "ideal_p99_ms"):
            assert key in run
    assert w["utilization"] > 0.5 and w["drops"] == 0, w
    assert "p99_vs_tcp_cubic" in w and w["cpu_share"]["h0"] > 0
    assert w["ideal_vs_tcp_cubic"] == round(w["ideal_p99_ms"] / w["tcp_cubic"]["p99_ms"], 3)
    for run in (w, w["tcp_cubic"]):  # the VM's own pauses beside the figures, and the p99 without them
        # (a hypervisor stealing time in most 100 ms windows leaves few messages or none unpaused:
        # seen once on 2026-12-04, 1 of 91 and then 0)
        assert 0 <= run["messages_unpaused"] <= run["messages"], run
        assert run["p99_ms_unpaused"] > 0 or not run["messages_unpaused"], run
        assert run["machine_pauses"] or run["machine_steal_max_ms"] or run["messages_unpaused"] == run["messages"], run
    # the control for TCP's fairness: each stream's plane (ECMP), and whether the streams into h0 share one
    planes = w["tcp_cubic"]["planes"]
    assert sorted(planes) == ["0", "1"] and all(0 <= p < 2 for p in planes.values()), planes
    assert w["tcp_cubic"]["receiver_ports_shared"] == (planes["0"] == planes["1"])


def test_the_victim_control_widens_only_the_victims_sender_nic():
    """--victim-nic-x 2: the victim's sender (h1) has ports at twice the
    fabric's rate in the kernel, and sends more than its NIC could at the
    fabric's rate (it really got the wider ports and pacing: the best 250 ms,
    as a machine that stalls for part of the run lowers the average, seen
    once in CI at 192 Mbit/s of 200); the run leaves the ports at the
    fabric's rate; the receiver h0 still gets no more than its ports carry,
    and the fair share the victim is held to counts the wider NIC."""
    out = run_bench("--hosts", "4", "--leaves", "2", "--seconds", "2", "--workloads", "victim", "--transports", "mrc",
                    "--victim-nic-x", "2")
    w = out["workloads"]["victim"]
    assert out["victim_nic_x"] == 2 and w["verified"] and w["qp_errors"] == 0, w
    nic = out["planes"] * out["rate_bps"] / 1e6  # one NIC at the fabric's rate, Mbit/s
    good = w["goodput_mbps"]  # flows: 0 h1 -> h0, 1 h2 -> h0, 2 h1 -> h3 (the victim)
    wide = out["workloads"]["victim"]["wide_nic"]
    assert wide["host"] == "h1" and wide["rates_bps"] == [2 * out["rate_bps"]] * out["planes"], wide
    assert wide["rates_after_bps"] == [out["rate_bps"]] * out["planes"], wide
    assert wide["peak_250ms_mbps"] > 1.1 * nic, wide  # h1 sent beyond one NIC's rate
    assert 0 < wide["sent_mbps"] <= wide["peak_250ms_mbps"] <= 2.05 * nic, wide
    assert good["0"] + good["1"] <= 1.01 * nic, good  # h0's ports were left as they were
    assert abs(w["victim_fair_share_ratio"] - good["2"] / min(2 * nic - nic / 2, nic)) < 1e-3, w
