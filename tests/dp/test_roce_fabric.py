"""RoCEv2 on the fabric simulator (csrc/sim/simfab_roce.c, simfab_pfc.c;
mrc sim --transport roce): one ECMP path per QP, a failed link black-holed
until routing converges, a QP on a dead port going to ERROR where MRC rides
it out, PFC making an incast lossless, collectives over RoCE QPs, and
refusals of bad settings."""

import json
import subprocess
import sys

import pytest
from mrc._dp import ffi, lib

from mrc import simfab as msim
from mrc.errors import UsageError
from mrc.simspec import parse_fault

G100 = 100_000_000_000
MS = 1_000_000


def fab(transport="roce", **kw) -> msim.Fabric:
    args = {"hosts": 2, "planes": 1, "leaves": 2, "spines": 4, "rate_bps": G100, "hop_ns": 1000,
            "transport": transport}
    args.update(kw)
    return msim.Fabric(**args)


def run(f: msim.Fabric, workload="incast", size=1 << 20, faults=(), until_ns=10**10, **kw) -> dict:
    """One workload's result (default: one flow, host 1 to host 0)."""
    kw.setdefault("incast", 1)
    sim = msim.simulate(f, workload, size, faults=[parse_fault(x, f) for x in faults], until_ns=until_ns, **kw)
    r = sim.result
    sim.close()
    return r


def test_one_qp_takes_one_path_and_mrc_takes_them_all():
    """Host 1 to host 0 across the spines: with each spine failed from the start in turn (routing
    never catching up in the run), the one its data takes and the one its ACKs take stop the RoCE QP
    (one spine or two); MRC finishes every time."""
    roce = {"qps": 1, "converge_ns": 10**12, "timeout": 8, "retry_cnt": 2}  # 1.05 ms a retry
    errors = []
    for s in range(4):
        r = run(fab(roce=roce), faults=[f"t1:0.{s}@0"])
        errors.append(r["qp_errors"])
        assert r["qp_errors"] == r["unfinished"]
        m = run(fab("mrc"), faults=[f"t1:0.{s}@0"])
        assert m["qp_errors"] == 0 and m["unfinished"] == 0
    assert set(errors) == {0, 1} and 1 <= sum(errors) <= 2


def test_a_failed_spine_black_holes_until_routing_converges():
    roce = {"qps": 1, "timeout": 8, "retry_cnt": 7}
    base = run(fab(roce={**roce, "converge_ns": 10**12}), faults=["t1:0.0@0"])
    used = next(s for s in range(4)
                if run(fab(roce={**roce, "converge_ns": 10**12}), faults=[f"t1:0.{s}@0"])["qp_errors"])
    at = "@20us"
    quick = run(fab(roce={**roce, "converge_ns": 0}), faults=[f"t1:0.{used}{at}"])
    slow = run(fab(roce={**roce, "converge_ns": 3 * MS}), faults=[f"t1:0.{used}{at}"])
    never = run(fab(roce={**roce, "converge_ns": 100 * MS}), faults=[f"t1:0.{used}{at}"])
    clean = run(fab(roce=roce))
    # routed away at once: the packets on the wire and in the queue are lost; the next ones, on another
    # spine, arrive past the gap, and the responder's NAK brings go-back-N at once, without a timeout
    assert quick["qp_errors"] == 0 and quick["timeouts"] == 0 and quick["down_drops"] > 0
    assert quick["max_us"] < 2 * clean["max_us"]
    # converging in 3 ms: every retry before then goes into the dead spine, the one after gets through
    assert slow["qp_errors"] == 0 and slow["timeouts"] == 3 and slow["down_drops"] > quick["down_drops"]
    assert 3 * MS < slow["max_us"] * 1000 < 4.5 * MS
    # later than retry_cnt timeouts: the QP is in ERROR
    assert never["qp_errors"] == 1 and never["unfinished"] == 1
    assert clean["max_us"] < 200 and base["qp_errors"] in (0, 1)


def test_a_dead_nic_port_errors_its_qps_and_mrc_rides_it_out():
    kw = {"hosts": 8, "planes": 4, "leaves": 2, "spines": 4}
    roce = {"qps": 4, "split": 1, "timeout": 8, "retry_cnt": 3}
    r = run(fab(roce=roce, **kw), "permutation", size=4 << 20, faults=["host:0.1@10us"])
    m = run(fab("mrc", **kw), "permutation", size=4 << 20, faults=["host:0.1@10us"])
    # host 0's QP on plane 1 (the flow from it, and the one to it) never gets an answer again
    assert r["qp_errors"] == 2 and r["unfinished"] == 2
    assert m["qp_errors"] == 0 and m["unfinished"] == 0


def test_pfc_makes_an_incast_lossless():
    kw = {"hosts": 16, "planes": 2, "leaves": 2, "spines": 8}
    lossy = run(fab(roce={"qps": 2, "split": 1}, buffer_bytes=128 << 10, **kw), workload="incast", size=4 << 20,
                incast=8)
    deep = run(fab(roce={"qps": 2, "split": 1}, buffer_bytes=0, **kw), workload="incast", size=4 << 20, incast=8)
    pfc = run(fab(roce={"qps": 2, "split": 1, "pfc_xoff": 64 << 10, "pfc_xon": 48 << 10}, buffer_bytes=0, **kw),
              workload="incast", size=4 << 20, incast=8)
    assert lossy["drops"] > 0 and lossy["rtx_packets"] > 0 and lossy["pauses"] == 0
    assert pfc["drops"] == 0 and pfc["rtx_packets"] == 0 and pfc["pauses"] > 0
    assert pfc["done"] and pfc["qp_errors"] == 0
    # each of the leaf's 16 ingresses (8 spines, 8 hosts) stops at its XOFF, plus what a hop's pause
    # delay lets in (two hops at 100 Gb/s, two frames); without PFC nor a buffer limit the queue grows far
    hwm = pfc["tiers"]["leaf_down"]["hwm_kb"] * 1024
    assert hwm <= 16 * ((64 << 10) + 2 * 12_500 + 2 * 4300) and hwm < deep["tiers"]["leaf_down"]["hwm_kb"] * 1024 / 3
    # the pauses spread back: the spines' and the leaves' uplinks, and the senders' NIC ports, paused
    assert all(pfc["tiers"][t]["paused_us"] > 0 for t in ("nic", "leaf_up", "spine_down"))


def test_collectives_over_roce_finish_and_repeat_exactly():
    kw = {"hosts": 16, "planes": 4, "leaves": 2, "spines": 8}
    for roce in ({"qps": 4, "split": 1}, {"qps": 4}, {"qps": 1}):
        a = run(fab(roce=roce, **kw), workload="all-reduce", size=4 << 20)
        b = run(fab(roce=roce, **kw), workload="all-reduce", size=4 << 20)
        assert a["done"] and a["qp_errors"] == 0 and a["collective"]["time_us"] > 0, roce
        for k in ("wall_s", "sim_pps", "sim_data_pps", "peak_rss_mb"):
            a.pop(k), b.pop(k)
        assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    # a WRITE split over 4 QPs, one a plane, goes as fast as the NIC: well ahead of one QP a WRITE
    split = run(fab(roce={"qps": 4, "split": 1}, **kw), workload="all-reduce", size=4 << 20)
    one = run(fab(roce={"qps": 1}, **kw), workload="all-reduce", size=4 << 20)
    assert split["collective"]["time_us"] < 0.5 * one["collective"]["time_us"]


def test_a_collective_over_a_qp_in_error_does_not_finish():
    kw = {"hosts": 8, "planes": 2, "leaves": 2, "spines": 4}
    r = run(fab(roce={"qps": 2, "split": 1, "timeout": 8, "retry_cnt": 1}, **kw), workload="all-reduce",
            size=4 << 20, faults=["host:3.0@5us"])
    assert not r["done"] and r["qp_errors"] > 0 and r["unfinished"] > 0


def test_bad_roce_settings_are_refused():
    for bad in ({"transport": "infiniband"}, {"roce": {"qps": 0}}, {"roce": {"qps": 65}},
                {"roce": {"timeout": 40}}, {"roce": {"retry_cnt": 8}}, {"roce": {"pfc_xoff": 5, "pfc_xon": 10}},
                {"roce": {"window": 3}}, {"roce": {"g": 2}}, {"roce": {"split": 2}}):
        with pytest.raises(UsageError):
            fab(**bad)
    # the C side refuses PFC without RoCE, and a RoCE setting out of range, whoever calls it
    f = fab("mrc")
    sim = msim.FabricSim(f)
    cfg = ffi.new("struct mrc_fab_cfg *", {"hosts": 2, "planes": 1, "leaves": 2, "spines": 4, "rate_bps": G100,
                                           "hop_ns": 1000, "max_qps": 4, "cq_depth": 64, "bucket_ns": 10_000,
                                           "pfc_xoff": 1000})
    out = ffi.new("struct mrc_fab **")
    assert lib.mrc_fab_create(cfg, sim.attr.to_c(), out) == -22
    cfg.transport, cfg.roce_qps, cfg.roce.timeout = lib.MRC_FAB_ROCE, 1, 0
    assert lib.mrc_fab_create(cfg, sim.attr.to_c(), out) == -22
    sim.close()


def test_mrc_sim_cli_runs_roce_and_refuses_roce_options_without_it():
    cmd = [sys.executable, "-m", "mrc", "sim", "--hosts", "16", "--planes", "2", "--size", "1M", "--quiet", "--json"]
    r = subprocess.run(cmd + ["--transport", "roce", "--roce-qps", "2", "--pfc", "64K"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["fabric"]["transport"] == "roce" and out["fabric"]["roce"]["pfc_xon"] == 48 << 10
    assert out["roce"]["done"] and "spray" not in out
    bad = subprocess.run(cmd + ["--pfc", "64K"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--transport roce" in bad.stderr
    for flags, says in ((["--roce-param", "timeout=x"], "NAME=N"), (["--roce-param", "window=3"], "roce field"),
                        (["--pfc", "0"], "XOFF above 0"), (["--pfc", "64K:96K"], "pfc_xon"),
                        (["--roce-param", "timeout=99"], "timeout 1-31")):
        r = subprocess.run(cmd + ["--transport", "roce", *flags], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, (flags, r.stderr)


def test_the_path_query_refuses_what_is_not_there():
    p, s = ffi.new("uint32_t *"), ffi.new("int32_t *")
    with msim.FabricSim(fab(roce={"qps": 2})) as sim:
        sim.add_flows([(0, 1, 1 << 20)], 1 << 20)
        assert lib.mrc_fab_roce_path(sim._f, 0, 1, p, s) == 0 and 0 <= s[0] < 4
        assert lib.mrc_fab_roce_path(sim._f, 0, 2, p, s) == -22  # no QP 2
        assert lib.mrc_fab_roce_path(sim._f, 1, 0, p, s) == -22  # no flow 1
    with msim.FabricSim(fab("mrc")) as sim:
        sim.add_flows([(0, 1, 1 << 20)], 1 << 20)
        assert lib.mrc_fab_roce_path(sim._f, 0, 0, p, s) == -22  # MRC has no RoCE path


def test_the_comparison_bench_runs_small_and_renders(tmp_path):
    """bench/roce_vs_mrc.py --quick: every scenario at 32 NICs, its JSON keys, and the results page's section."""
    root = __import__("pathlib").Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, str(root / "bench" / "roce_vs_mrc.py"), "--quick", "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["nics"] == 32 and out["convergence_delays"] == [50_000_000, 500_000_000, 5_000_000_000]
    for name, sc in out["scenarios"].items():
        for who in ("mrc", "roce_1qp", "roce_16qp"):
            row = sc.get(who) or sc.get("runs", {}).get(who) or sc.get("runs", {}).get(f"{who}@50ms")
            assert {"goodput_vs_bound", "completion_us", "qp_errors"} <= set(row), (name, who)
    assert out["scenarios"]["port_down"]["roce_1qp"]["qp_errors"] == 1  # its one QP was on the dead port
    assert out["port_down_ratio"] > 0.8 and 1.0 <= out["mrc_t1_ratio"] < 1.2
    assert 0.5 < out["anchors"]["ecmp_permutation"]["over_published"]["mean"] < 1.5
    assert 0.9 < out["anchors"]["dcqcn_recovery"]["slope_over_published"] < 1.1
    sys.path.insert(0, str(root / "tools"))
    from results_roce import roce

    lines, head = roce([out])
    assert any("DCQCN-validation" in x for x in lines) and any("RoCE model, 55 us" in x for x in lines)
    assert any("RoCEv2, 16 QPs split" in x for x in lines) and "MRC over RoCEv2 in simulation" in head[0][0]
