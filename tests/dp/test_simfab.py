"""The fabric simulator (csrc/sim/simfab.c, mrc.simfab) at small scale: forwarding
against the address plan, link failures, determinism, every scenario of
bench/sim_bench.py with its bound, and a cross-check with the in-memory link."""

import errno
import ipaddress
import json
import os
import pathlib
import statistics
import subprocess
import sys

import pytest

from mrc import simfab as msim
from mrc import simspec
from mrc.errors import ErrnoError, UsageError
from mrc.fabric.topology import KIND_T0, KIND_T1, Topology, container, host_usid, usid

G100 = 100_000_000_000


def packed(addr: str) -> bytes:
    return ipaddress.IPv6Address(addr).packed


def small(**kw) -> msim.Fabric:
    args = {"hosts": 16, "planes": 4, "leaves": 2, "spines": 8, "rate_bps": G100, "hop_ns": 1000}
    args.update(kw)
    return msim.Fabric(**args)


def test_every_path_leads_through_exactly_the_switches_the_address_plan_names():
    t = Topology(planes=2, spines=3, leaves=2, hosts=5)
    with msim.FabricSim(msim.Fabric(hosts=5, planes=2, leaves=2, spines=3)) as s:
        for src in range(5):
            for dst in set(range(5)) - {src}:
                for p in range(2):
                    for sp in range(3):
                        hops, ok = s.trace(src, p, packed(t.path_address(src, dst, p, sp)))
                        assert ok
                        assert hops == [("leaf", p, t.host_leaf(src)), ("spine", p, sp), ("leaf", p, t.host_leaf(dst)),
                                        ("host", p, dst)]
        # not this plane's leaf first, another plane's spine, a spine that does not exist, a host not below that leaf
        bad = [container([usid(KIND_T0, 1, 0), usid(KIND_T1, 1, 0), usid(KIND_T0, 1, 1), host_usid(4, 1)]),
               container([usid(KIND_T0, 0, 0), usid(KIND_T1, 1, 0), usid(KIND_T0, 0, 1), host_usid(4, 0)]),
               container([usid(KIND_T0, 0, 0), usid(KIND_T1, 0, 7), usid(KIND_T0, 0, 1), host_usid(4, 0)]),
               container([usid(KIND_T0, 0, 0), usid(KIND_T1, 0, 0), usid(KIND_T0, 0, 0), host_usid(4, 0)]),
               "fc01::"]
        for a in bad:
            assert not s.trace(0, 0, packed(a))[1], a


def test_hosts_past_256_are_reached_through_the_wider_host_usids():
    fab = msim.Fabric(hosts=1024, planes=1, leaves=32, spines=2)
    with msim.FabricSim(fab, max_qps=2) as s:
        for dst in (0, 255, 256, 700, 1023):
            a = container([usid(KIND_T0, 0, fab.host_leaf(3)), usid(KIND_T1, 0, 1),
                           usid(KIND_T0, 0, fab.host_leaf(dst)), host_usid(dst, 0)])
            hops, ok = s.trace(3, 0, packed(a))
            assert ok and hops[-1] == ("host", 0, dst) and hops[2] == ("leaf", 0, fab.host_leaf(dst))


def test_past_1024_hosts_the_last_usid_numbers_the_port_on_the_leaf():
    fab = msim.Fabric(hosts=2048, planes=1, leaves=64, spines=2)   # 32 hosts per leaf
    assert fab.host_usid(5, 0) == host_usid(5, 0) and fab.host_usid(37, 0) == host_usid(5, 0)

    def path(dst: int, last: int) -> str:
        return container([usid(KIND_T0, 0, fab.host_leaf(3)), usid(KIND_T1, 0, 1),
                          usid(KIND_T0, 0, fab.host_leaf(dst)), last])

    with msim.FabricSim(fab, max_qps=2) as s:
        for dst in (0, 31, 32, 1000, 1055, 2047):
            hops, ok = s.trace(3, 0, packed(path(dst, fab.host_usid(dst, 0))))
            assert ok and hops[-1] == ("host", 0, dst) and hops[2] == ("leaf", 0, fab.host_leaf(dst))
        # a host's own number names no port past 1,024 hosts; nor does a port the leaf does not have
        assert not s.trace(3, 0, packed(path(1000, host_usid(1000, 0))))[1]
        assert not s.trace(3, 0, packed(path(64, host_usid(32, 0))))[1]
    with pytest.raises(UsageError, match="under one leaf"):
        msim.Fabric(hosts=8192, planes=1, leaves=4, spines=16)
    with pytest.raises(UsageError, match="2 to 8192 hosts"):
        msim.Fabric(hosts=8193)


def _strip(r: dict) -> dict:
    return {k: v for k, v in r.items() if k not in ("wall_s", "sim_pps", "sim_data_pps", "peak_rss_mb")}


def test_the_same_seed_gives_the_same_result_and_another_seed_another():
    fab = small(seed=5)
    runs = [msim.simulate(fab, "permutation", 2 << 20, 256 << 10).result for _ in range(2)]
    assert json.dumps(_strip(runs[0]), sort_keys=True) == json.dumps(_strip(runs[1]), sort_keys=True)
    other = msim.simulate(small(seed=6), "permutation", 2 << 20, 256 << 10).result
    assert _strip(other) != _strip(runs[0])


def test_zero_payloads_left_out_in_flight_change_nothing_the_receivers_see():
    # packets in flight carry a zero payload's headers and ICRC only; the zeros go back in at
    # delivery. The same incast (trims, marks, drops) with payloads that are not zeros, carried
    # whole, gives every figure the same: the receivers got the same bytes (their ICRC held)
    fab = small(trim_bytes=32 << 10, buffer_bytes=256 << 10)
    runs = []
    for fill in (0, 0xA5):
        with msim.FabricSim(fab, max_qps=16, fill=fill) as s:
            s.add_flows([(h, 0, 2 << 20) for h in range(1, 9)], 256 << 10)
            runs.append(_strip(s.run()))
    assert runs[0]["trims"] > 0 and runs[0]["qp_errors"] == 0 and runs[0]["unfinished"] == 0, runs[0]
    # what differs is the simulator's memory for packets: a tenth or less without the zeros
    mem = [r.pop("sim_memory_mb") for r in runs]
    assert mem[0]["packets"] * 10 <= mem[1]["packets"], mem
    assert json.dumps(runs[0], sort_keys=True) == json.dumps(runs[1], sort_keys=True)


@pytest.mark.parametrize("shape", ["incast", "in_step"])
def test_the_calendar_runs_the_events_in_the_heaps_order(shape):
    # packets' events go on a calendar in front of the heap (csrc/sim/evcal.h) where they find a place
    # near a bucket's ends, else on the heap; the earlier of the two runs. The same run with every
    # event on the heap gives every figure the same. The incast trims, marks, drops and loses a
    # link; 1,024 NICs in step put thousands of events of one time in a bucket, and the calendar
    # stands aside for a while
    if shape == "incast":
        fab = small(trim_bytes=32 << 10, buffer_bytes=256 << 10)
        flows, msg = [(h, 0, 2 << 20) for h in range(1, 9)], 256 << 10
    else:
        fab = msim.Fabric(hosts=1024, seed=3)
        flows, msg = [(h, (h + 512) % 1024, 256 << 10) for h in range(1024)], 64 << 10
    runs = []
    for heap_only in (False, True):
        with msim.FabricSim(fab, max_qps=16, heap_only=heap_only) as s:
            s.add_flows(flows, msg)
            if shape == "incast":
                s.add_fault(simspec.parse_fault("link:0.0.0@30us", fab))
            runs.append(_strip(s.run()))
    assert runs[0]["qp_errors"] == 0 and runs[0]["unfinished"] == 0, runs[0]
    if shape == "incast":
        assert runs[0]["trims"] > 0 and runs[0]["down_drops"] > 0, runs[0]
    for r in runs:
        r.pop("sim_memory_mb")
    assert json.dumps(runs[0], sort_keys=True) == json.dumps(runs[1], sort_keys=True)


def test_a_failed_link_loses_exactly_what_crossed_it_and_the_flow_rides_it_out():
    fab = small(hosts=2, planes=1, leaves=1, spines=2)
    with msim.FabricSim(fab, max_qps=4) as s:
        s.add_flows([(0, 1, 8 << 20)], 256 << 10)
        s.add_fault(simspec.parse_fault("link:0.0.1@20us", fab))
        r = s.run()
    up, down = r["tiers"]["leaf_up"], r["tiers"]["spine_down"]
    assert r["down_drops"] > 0 and r["drops"] == 0 and r["no_route"] == 0
    # every packet a leaf sent up reached its spine or was cut with the link; at the spine, the
    # failed link's port refused what was for it
    assert up["cut"] > 0 or up["refused"] > 0
    assert up["packets"] == down["packets"] + up["cut"] + down["refused"] + down["drops"]
    assert r["qp_errors"] == 0 and r["unfinished"] == 0


def test_spraying_fills_a_permutation_and_beats_one_path_per_plane():
    fab = small()
    spray = msim.simulate(fab, "permutation", 16 << 20).result
    single = msim.simulate(fab, "permutation", 16 << 20, single_path=True).result
    assert spray["qp_errors"] == single["qp_errors"] == 0
    assert spray["goodput_ratio"] >= 0.90, spray
    assert spray["goodput_ratio"] >= 1.3 * single["goodput_ratio"], (spray, single)
    assert spray["drops"] == 0


def test_alltoall_finishes_with_no_drops():
    # every flow done, nothing dropped; its goodput (0.84 of line rate here) is below the issue's
    # 0.90: bench/sim_bench.py reports it, the closing note says where it goes
    r = msim.simulate(small(), "alltoall", 8 << 20, 256 << 10).result
    assert r["qp_errors"] == 0 and r["unfinished"] == 0 and r["drops"] == 0 and r["timeouts"] == 0


def test_the_wire_bound_is_what_a_lone_flow_reaches_and_no_run_passes_it():
    fab = small()
    with msim.FabricSim(fab, max_qps=4, flow_bytes=8 << 20) as s:
        s.add_flows([(0, 15, 8 << 20)], 1 << 20)
        lone = s.run()
    # alone on the fabric a flow is its headers and one round trip from line rate, and the bound is that
    assert lone["goodput_ratio"] <= lone["wire_bound_ratio"] <= lone["goodput_ratio"] * 1.005
    headers_only = fab.mtu / (fab.mtu + msim.DATA_HDRS + msim.WIRE_EXTRA)
    bound = {}
    for workload, msg in (("alltoall", 64 << 10), ("permutation", 1 << 20)):
        r = msim.simulate(fab, workload, 8 << 20, msg).result
        assert r["goodput_ratio"] < r["wire_bound_ratio"] < headers_only, workload
        bound[workload] = r["wire_bound_ratio"]
    # the all-to-all's NICs also send the SACKs of 15 flows arriving out of order: a bound under the lone flow's
    assert bound["alltoall"] < lone["wire_bound_ratio"] - 0.01


def test_a_nic_of_many_qps_sprays_its_paths_in_turn_and_an_alltoall_queues_below_trimming():
    # 64 NICs, 126 QPs each: every port takes its plane's paths in turn whichever QP sends (one
    # cursor per port); with one per QP a NIC sprayed at random and its leaf's uplinks trimmed
    # (1,330 trims, 0.78 of line rate; now none, 0.83)
    r = msim.simulate(msim.Fabric(hosts=64, seed=1), "alltoall", 16 << 20, 64 << 10).result
    assert r["trims"] == 0 and r["drops"] == 0 and r["qp_errors"] == 0 and r["unfinished"] == 0, r
    assert r["goodput_ratio"] >= 0.8, r


def test_a_nic_of_many_short_qps_keeps_all_its_planes_equally_busy():
    # 96 NICs, 95 QPs each of 8-packet WRITEs: a QP that passed busy ports owes their planes turns,
    # and when several were free at once it paid the lowest plane first; QPs that ended with turns
    # owed left them on the high planes (plane 0's ports busy 0.754 of the run, plane 7's 0.736;
    # 256 NICs, the bench's all-to-all: 0.855 against 0.825). Now the planes take turns at going first.
    r = msim.simulate(msim.Fabric(hosts=96, seed=1), "alltoall", 8 << 20, 32 << 10).result
    pu = r["plane_utilization"]
    assert r["qp_errors"] == 0 and r["unfinished"] == 0, r
    assert (max(pu) - min(pu)) / max(pu) <= 0.01, pu


def test_nics_that_pace_their_ports_carry_an_alltoall_better_than_one_queue_for_all():
    # a NIC sends on a port when it is free (the engine's pacing); the control, --no-pacing, lets
    # the engine fill one 8-frame queue for all the NIC's ports in rotation order, and the ports go
    # busy and idle at random (32 NICs: 0.84-0.86 against 0.75-0.76 over three seeds)
    paced = msim.simulate(msim.Fabric(hosts=32, seed=1), "alltoall", 16 << 20, 64 << 10).result
    one_queue = msim.simulate(msim.Fabric(hosts=32, seed=1, paced=False), "alltoall", 16 << 20, 64 << 10).result
    assert paced["drops"] == one_queue["drops"] == 0 and paced["qp_errors"] == one_queue["qp_errors"] == 0
    assert paced["goodput_ratio"] >= 1.05 * one_queue["goodput_ratio"], (paced, one_queue)


def test_a_t1_failing_mid_run_costs_no_more_than_its_share():
    # its packets are lost, every flow still finishes without an error, and the run's goodput is
    # at least (1 - 1/(P x S)) of the same run without the failure: the EVs the spine took are
    # passed over (each QP's other EVs of the plane share their load), not replaced by spares that
    # would crowd one other spine (bench/sim_bench.py t1)
    fab = small()
    r = msim.simulate(fab, "permutation", 32 << 20, faults=[simspec.parse_fault("t1:1.5@100us", fab)]).result
    calm = msim.simulate(fab, "permutation", 32 << 20).result
    assert r["qp_errors"] == 0 and r["unfinished"] == 0 and r["down_drops"] > 0 and r["timeouts"] == 0
    assert r["goodput_ratio"] >= (1 - 1 / (fab.planes * fab.spines)) * calm["goodput_ratio"], (r, calm)


def test_a_flapping_link_is_ridden_out():
    # down half of every millisecond: packets lost, no QP error, every flow done (the goodput
    # against no flap is bench/sim_bench.py's flap scenario)
    fab = small(rate_bps=10_000_000_000)
    flapping = simspec.parse_fault("link:0.0.0/1ms@0+1s", fab, flap=True)
    r = msim.simulate(fab, "permutation", 4 << 20, faults=[flapping]).result
    assert r["qp_errors"] == 0 and r["unfinished"] == 0 and r["down_drops"] > 0


def test_the_victim_beside_an_incast_gets_its_fair_share():
    # a median over seeds, as bench/sim_bench.py reports it (48 there, on 8 planes): one seed's share
    # moves by several percent (here 0.93-0.98; 0.93-0.97, median 0.94, when seed 1 alone passed)
    runs = [msim.simulate(small(seed=seed), "victim", 64 << 20, 256 << 10).result for seed in range(1, 9)]
    assert all(r["qp_errors"] == 0 and r["drops"] == 0 for r in runs)
    ratios = sorted(r["victim_ratio"] for r in runs)
    assert statistics.median(ratios) >= 0.95, ratios


def test_a_victim_started_into_a_running_incast_misses_only_its_first_round_trips():
    # started together, the victim's sender's NIC also carries its incast QP's first round trips at
    # a full window, most of them trimmed at the receiver; started 100 us (10 base RTTs) in, past
    # them, the victim gets more of its share on every seed (here 0.96-1.00 against 0.94-1.00)
    together = [msim.simulate(small(seed=seed), "victim", 64 << 20, 256 << 10).result for seed in range(1, 9)]
    later = [msim.simulate(small(seed=seed), "victim", 64 << 20, 256 << 10, victim_start_ns=100_000).result
             for seed in range(1, 9)]
    assert all(r["qp_errors"] == 0 and r["unfinished"] == 0 and r["drops"] == 0 for r in together + later)
    ratios = [r["victim_ratio"] for r in later]
    assert min(ratios) >= 0.95, ratios
    assert statistics.median(ratios) > statistics.median(r["victim_ratio"] for r in together), ratios


def test_a_victim_start_past_the_simulators_clock_is_refused_in_a_clear_error():
    # the C API too, under mrc.simfab.simulate's own check (at most 1 s)
    with msim.FabricSim(small(), max_qps=4) as s, pytest.raises(ErrnoError, match="EINVAL"):
        s.add_flows([(1, 2, 1 << 20)], 1 << 16, start_ns=2**63)


def test_victim_at_goes_with_the_victim_workload_and_a_bounded_time():
    for argv, msg in ((["--workload", "incast", "--victim-at", "100us"], "goes with the victim workload"),
                      (["--workload", "victim", "--victim-at", "2s"], "at most 1 s"),
                      (["--workload", "victim", "--victim-at", "soon"], "cannot read time")):
        r = subprocess.run([sys.executable, "-m", "mrc", "sim", "--hosts", "16", *argv], capture_output=True,
                           text=True)
        assert r.returncode == 2 and msg in r.stderr and r.stdout == "", (argv, r.stderr)
    # the Python API refuses the same, before it builds anything (it once ran the other workload and
    # said nothing of the start it left out)
    for workload, start, msg in (("incast", 1000, "goes with the victim workload"), ("victim", -1, "0 or more"),
                                 ("victim", 1.5e3, "whole number"), ("victim", True, "whole number"),
                                 ("victim", 2 * 10**9, "at most 1 s")):
        with pytest.raises(UsageError, match=msg):
            msim.simulate(small(), workload, 1 << 20, victim_start_ns=start)


def test_a_link_failure_under_load_is_ridden_out_within_50us():
    fab = small()
    r = msim.simulate(fab, "permutation", 16 << 20, 64 << 10,
                      faults=[simspec.parse_fault("link:0.0.0@60us", fab)]).result
    assert r["qp_errors"] == 0 and r["unfinished"] == 0 and r["down_drops"] > 0
    assert r["max_gap_us"] <= 50, r
    assert r["timeouts"] == 0  # every loss found by SACKs or by time (RACK's reorder timer), none by the timer


def test_bad_specs_get_one_clear_line():
    fab = small()
    for spec, flap in (("t1:9.0@1us", False), ("t1:0.99", False), ("link:0.0", False), ("link:0.0.0@1us", True),
                       ("switch:0", False), ("host:99.0", False), ("link:0.0.0/1ms@0", True),
                       ("link:0.0.0/1ns@0+1s", True)):
        with pytest.raises(UsageError):
            simspec.parse_fault(spec, fab, flap)
    with pytest.raises(UsageError):
        msim.Fabric(hosts=1)
    for paced in ("no", 0, None):  # not taken for a truth value: "no" would have paced
        with pytest.raises(UsageError, match="paced"):
            msim.Fabric(hosts=16, paced=paced)
    with pytest.raises(UsageError):
        simspec.parse_time("fast")
    for mtu in (63, 8873, 0, -4096, 4096.0, True, "4096"):
        with pytest.raises(UsageError, match="--mtu"):
            msim.Fabric(hosts=16, mtu=mtu)
    r = subprocess.run([sys.executable, "-m", "mrc", "sim", "--hosts", "16", "--mtu", "9000"], capture_output=True,
                       text=True, timeout=60, cwd=str(pathlib.Path(__file__).resolve().parents[2]))
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "mrc sim: argument --mtu: wants an integer from 64 to 8872, not '9000' (`mrc sim --help` lists the options)"], \
        r.stderr


def test_smaller_packets_run_the_same_transfer_in_more_packets():
    big = msim.simulate(small(), "permutation", 2 << 20).result
    little = msim.simulate(small(mtu=1024), "permutation", 2 << 20).result
    assert little["unfinished"] == big["unfinished"] == 0 and little["qp_errors"] == 0
    assert little["data_packets"] >= 4 * big["data_packets"]
    assert little["wire_bound_ratio"] < big["wire_bound_ratio"]  # more headers per payload byte


def test_a_two_host_run_agrees_with_the_in_memory_link_within_5_percent():
    """The same transfer, the same QP profile: the fabric simulator (2 hosts, 2 planes, a leaf, 2
    spines: 4 hops, store-and-forward at 3 switches) and the in-memory link (per path: the same
    propagation plus 3 serialisations, a queue at the link rate; the host ports at the link rate)."""
    from mrc.manual import ManualContext
    from mrc.simlink import Sim

    fab = msim.Fabric(hosts=2, planes=2, leaves=1, spines=2, rate_bps=G100, hop_ns=1000)
    size, msg = 8 << 20, 1 << 20
    t_fab = msim.simulate(fab, "permutation", size, msg).result["max_us"]
    link = Sim(planes=2, per_plane=2, seed=1)
    ser = (4096 + msim.DATA_HDRS + msim.WIRE_EXTRA) * 8e9 / G100
    link.set_all(delay_ns=int(4 * fab.hop_ns + 3 * ser), rate_bps=G100)
    link.set_port_rate(G100)
    a, b = ManualContext(planes=2, seed=11), ManualContext(planes=2, seed=12)
    qa, _ = link.connect(a, b, fab.qp_attr(False, size))
    src, dst = bytearray(msg), bytearray(msg)
    ms, md = a.reg_mr(src), b.reg_mr(dst, remote_write=True)
    posted = done = 0
    while done < size // msg:
        while posted < size // msg and posted - done < 8:
            qa.post_write(ms, 0, msg, md.addr, md.rkey, wr_id=posted)
            posted += 1
        link.run(link.now + 1_000_000, stop_on_cqe=True)
        done += len(a.poll_cq())
    t_link = link.now / 1e3
    assert abs(t_fab / t_link - 1) <= 0.05, (t_fab, t_link)
    a.close()
    b.close()
    link.close()


def test_the_c_api_refuses_what_it_cannot_build_and_changes_nothing():
    from mrc._dp import ffi, lib

    fab = small()
    attr = fab.qp_attr().to_c()
    out = ffi.new("struct mrc_fab **")
    for bad in ({"hosts": 1}, {"hosts": 8193}, {"hosts": 2050}, {"planes": 0}, {"planes": 17}, {"rate_bps": 0},
                {"bucket_ns": 0}, {"leaves": 17}, {"spines": 0}, {"unpaced": 2}, {"unpaced": 0xFFFFFFFF}):
        cfg = {"hosts": 16, "planes": 4, "leaves": 2, "spines": 8, "rate_bps": G100, "hop_ns": 1000,
               "max_qps": 8, "cq_depth": 64, "bucket_ns": 10_000, **bad}
        assert lib.mrc_fab_create(ffi.new("struct mrc_fab_cfg *", cfg), attr, out) < 0, bad
    with msim.FabricSim(fab, max_qps=4) as s:  # the tests' checks: in range, and before the first run
        for bad in ({"check_times": 2}, {"fill": 256}, {"heap_only": 2}):
            assert lib.mrc_fab_set_checks(s._f, ffi.new("struct mrc_fab_checks *", bad)) == -errno.EINVAL, bad
        s.run(1000)
        assert lib.mrc_fab_set_checks(s._f, ffi.new("struct mrc_fab_checks *", {"fill": 1})) == -errno.EBUSY
    with msim.FabricSim(fab, max_qps=4) as s:
        for src, dst, n, msg in ((0, 0, 1 << 20, 1 << 16), (0, 16, 1 << 20, 1 << 16), (99, 1, 1 << 20, 1 << 16),
                                 (0, 1, 0, 1 << 16), (0, 1, 1 << 20, 0), (0, 1, 1 << 30, 128 << 20)):
            fl = ffi.new("struct mrc_fab_flow *", {"src": src, "dst": dst, "bytes": n, "msg": msg, "depth": 4})
            assert lib.mrc_fab_add_flow(s._f, fl) < 0, (src, dst, n, msg)
        for late in (2**64 - 1, 2**63, 10**17):  # a start past the clock's picoseconds (it wrapped to early)
            fl = ffi.new("struct mrc_fab_flow *", {"src": 0, "dst": 1, "bytes": 1 << 20, "msg": 1 << 16, "depth": 4,
                                                   "start_ns": late})
            assert lib.mrc_fab_add_flow(s._f, fl) < 0, late
        assert lib.mrc_fab_link_at(s._f, 10**6, 0, 0) < 0
        assert lib.mrc_fab_flow_stats(s._f, 0, ffi.new("struct mrc_fab_flow_stats *"), ffi.NULL) < 0  # no flow yet
        nodes, n = ffi.new("uint32_t[4]"), ffi.new("uint32_t *")
        assert lib.mrc_fab_trace(s._f, 16, 0, bytes(16), nodes, 4, n) < 0 and lib.mrc_fab_trace(s._f, 0, 4, bytes(16),
                                                                                                  nodes, 4, n) < 0
        s.add_flows([(0, 1, 1 << 20)], 1 << 16)  # still usable after all that
        r = s.run()
        assert r["unfinished"] == 0 and r["qp_errors"] == 0 and r["no_route"] == 0


def test_a_host_with_more_peers_than_a_context_knows_is_refused_in_a_clear_error():
    fab = msim.Fabric(hosts=300, planes=1, leaves=10, spines=2)
    with msim.FabricSim(fab, max_qps=300) as s:
        s.add_flows([(0, d, 4096) for d in range(1, 257)], 4096)  # 256 peers: as many as a context knows
        with pytest.raises(ErrnoError, match="ENOSPC"):
            s.add_flows([(0, 257, 4096)], 4096)


OUT_OF_MEMORY = """
import resource, sys
from mrc import simfab as msim
from mrc import simspec
from mrc.errors import ErrnoError
fab = msim.Fabric(hosts=64, seed=1)
s = msim.FabricSim(fab, max_qps=4, flow_bytes=16 << 20)
s.add_flows([(h, (h + 17) % 64, 16 << 20) for h in range(64)], 1 << 20)
with open("/proc/self/statm") as f:
    vm = int(f.read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 20), resource.RLIM_INFINITY))  # room for ~4,000 packets
try:
    s.run()
except ErrnoError as e:
    print(e.errno, e)
    sys.exit(0)
sys.exit("ran to the end")
"""


@pytest.mark.skipif("libasan" in os.environ.get("LD_PRELOAD", ""),
                    reason="AddressSanitizer's allocator serves from memory it reserved at start: an address "
                           "space limit set later does not make malloc fail")
def test_a_run_that_cannot_get_memory_stops_with_a_clear_error():
    # (a packet or an event that could not be allocated was dropped in silence: a port's FIFO
    # stalled or a packet was lost unmodelled, and the run went on with wrong figures)
    r = subprocess.run([sys.executable, "-c", OUT_OF_MEMORY], capture_output=True, text=True, timeout=120,
                       cwd=str(pathlib.Path(__file__).resolve().parents[2]))
    assert r.returncode == 0, r.stderr[-2000:] + r.stdout
    code, text = r.stdout.split(" ", 1)
    assert int(code) == errno.ENOMEM and "fewer hosts, or more memory" in text


def test_the_retransmit_timer_sits_above_the_longest_queued_round_trip():
    # four ports each way, each up to the trim threshold (the buffer without trimming): a timer
    # under that fires on queues, not losses
    for fab in (msim.Fabric(hosts=64), msim.Fabric(hosts=64, trim_bytes=0), msim.Fabric(hosts=8, rate_bps=10**10)):
        worst = fab.base_rtt_ns() + 8 * (fab.trim_bytes or fab.buffer_bytes) * 8e9 / fab.rate_bps
        n = fab.timeout_exp()
        assert 1024 << n >= worst > 1024 << (n - 1)
        assert fab.qp_attr().timeout == n


def test_the_bench_pairs_its_t1_failure_and_its_permutation_with_their_controls():
    """bench/sim_bench.py --quick: the T1 failure against the same run without it (met), the
    permutation against one flow alone on an idle fabric (the most a flow gets)."""
    root = pathlib.Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, str(root / "bench" / "sim_bench.py"), "--quick", "--json",
                        "--only", "t1,permutation"], capture_output=True, text=True, timeout=300, cwd=root)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)["scenarios"]
    assert s["t1"]["met"] and s["t1"]["vs_no_fault"] >= s["t1"]["bound"], s["t1"]
    p = s["permutation"]
    assert p["goodput_ratio"] < p["lone_flow_ratio"] < 1 and p["vs_lone_flow"] >= 0.9, p


def test_the_bench_scale_and_speed_scenarios_report_what_the_issue_asks():
    """bench/sim_bench.py --quick --only scale,speed: the 8,192-NIC scenario scaled down (256 NICs,
    the same shape per leaf) in a process of its own, and the speed ratios; their keys and figures."""
    root = pathlib.Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, str(root / "bench" / "sim_bench.py"), "--quick", "--json",
                        "--only", "scale,speed"], capture_output=True, text=True, timeout=300, cwd=root)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)["scenarios"]
    sc, sp = s["scale"], s["speed"]
    assert sc["nics"] == 256 and sc["qp_errors"] == 0 and sc["unfinished"] == 0, sc
    assert 0.5 < sc["vs_wire_bound"] <= 1 and sc["wall_s"] > 0 and sc["peak_rss_mb"] > 0, sc
    kb = sc["per_nic_kb"]
    # what a NIC takes, told apart: the parts the simulator counts sum to less than its share of the peak
    assert all(v >= 0 for v in kb.values())
    assert 0 < kb["packets"] + kb["events"] + kb["tables"] < sc["per_nic_mb"] * 1024
    assert sc["leaf_radix"] == 64 and sc["oversubscription"] == 1.0
    assert 0 < sp["sim_over_engine"] < 2 and 0 < sp["alltoall_pps_over_permutation"] < 2, sp
    assert 0 < sp["engine_63_qps_over_1"] < 2, sp  # the all-to-all's control: many QPs, the engine alone
    by = sp["alltoall_pps_over_permutation_by_nics"]  # and by NIC count, the 64 NICs' figure among them
    assert set(by) == {"8", "64"} and 0 < by["8"] < 2 and by["64"] == sp["alltoall_pps_over_permutation"], by
    assert sp["sim_over_engine_spread"][0] <= sp["sim_over_engine"] <= sp["sim_over_engine_spread"][1]


def test_an_incast_on_slow_links_fills_its_receiver():
    """At 100 Mbit/s one packet's serialization (330 us) is past quick adapt's default delay
    threshold (40 us, for a 10 us base): with it, every ACK cut the windows to what the last round
    trip delivered and a 7:1 incast filled 0.45 of its receiver; the threshold now scales with the
    base RTT as the defaults do."""
    fab = msim.Fabric(hosts=8, planes=8, leaves=2, spines=4, rate_bps=100_000_000, hop_ns=1000)
    assert fab.qp_attr().cc["qa_threshold"] == 4 * fab.base_rtt_ns() > 40_000 * 30
    r = msim.simulate(fab, "incast", 8 << 20, 1 << 20).result
    assert r["qp_errors"] == 0 and r["drops"] == 0 and r["unfinished"] == 0, r
    assert r["goodput_ratio"] * 7 >= 0.9, r  # each sender's share of its NIC: 1/7 of the receiver's


def test_the_bench_gives_each_median_a_repeatable_interval():
    """bench/sim_bench.py's victim figure is a median over seeds with a bootstrap 90 % interval: the
    same values give the same interval, which holds the median and lies within the values."""
    import importlib.util
    root = pathlib.Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("sim_bench", root / "bench" / "sim_bench.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    values = [0.82, 0.91, 0.93, 0.935, 0.94, 0.95, 0.96, 0.97, 0.99, 1.0]
    lo, hi = mod.median_ci(values)
    assert mod.median_ci(values) == [lo, hi] and mod.median_ci(list(reversed(values)), 2000) != []
    assert min(values) <= lo <= statistics.median(values) <= hi <= max(values)
    assert mod.median_ci([0.9] * 5) == [0.9, 0.9]


def test_a_run_in_slices_with_progress_gives_the_same_result_and_reports_as_it_goes():
    """FabricSim.run(progress=): the run goes in slices of virtual time; the events are the same,
    so the result is too, and the reports move forward to the end."""
    fab = small(seed=3)
    flows = msim.flows_for("permutation", fab, 2 << 20, 7, fab.seed)
    results, seen = [], []
    for progress in (None, lambda *a: seen.append(a)):
        with msim.FabricSim(fab, max_qps=4, flow_bytes=2 << 20) as s:
            s.add_flows(flows, 256 << 10)
            s.add_fault(simspec.parse_fault("t1:0.1@20us", fab))  # a scheduled event between slices too
            results.append(_strip(s.run(progress=progress, every_s=0)))
    assert results[0] == results[1] and results[0]["unfinished"] == 0
    assert len(seen) > 3, seen
    total = sum(n for _, _, n in flows)
    assert all(t == total and 0 <= d <= total for _, d, t, _, _ in seen), seen
    for (t0, d0, _, p0, c0), (t1, d1, _, p1, c1) in zip(seen[:-1], seen[1:], strict=True):
        assert t1 > t0 and d1 >= d0 and p1 >= p0 and c1 >= c0
    assert seen[-1][1] > seen[0][1]


def test_progress_is_one_rewritten_line_on_a_terminal_and_a_line_per_interval_in_a_log():
    import io

    class Tty(io.StringIO):
        def isatty(self):
            return True

    log = io.StringIO()
    p = msim.Progress("spray", log, every_s=10)
    for cpu in (1, 5, 11, 12, 22):
        p(50_000, 1 << 20, 4 << 20, 2_000_000, cpu)
    lines = log.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].startswith("       spray: 50.0 us simulated, 25 % of the bytes"), lines
    assert "2.0 M packets in 11 s of CPU (0.18 M/s)" in lines[0], lines
    tty = Tty()
    p = msim.Progress("spray", tty)
    p(1000, 0, 1, 10, 1.0)
    p(2000, 1, 1, 20, 2.0)
    p.close()
    out = tty.getvalue()
    assert out.count("\r") == 3 and "\n" not in out and out.endswith("\r\x1b[K"), repr(out)
    assert "100 % of the bytes" in out


@pytest.mark.parametrize("workload,kw", [
    ("alltoall", {}),  # many QPs per NIC: most of them wait at any time
    ("permutation", {"single_path": True}),
    ("permutation", {"faults": "t1:0.1@20us"}),
    ("permutation", {"faults": "link:0.0.0/20us@10us+100us"}),
    ("victim", {"victim_start_ns": 20_000}),
    ("incast", {"paced": False}),
    ("alltoall", {"paced": False}),
    ("ring-allreduce", {"faults": "t0:1.0@30us"}),
    ("permutation", {"faults": "host:3.1@20us+40us"}),  # a NIC's port down and up: the endpoint's ports change
])
def test_no_qp_waits_past_its_time(workload, kw):
    """The engine keeps each QP's next time (its timers and its next packet) and reads the QPs
    that are due, not all of them, on every call: at every wake of every NIC, no QP's kept time
    is later than its exact one (mrc_ep_check_times), whatever the workload, the faults, the
    pacing; and the run ends as the exact times would have it (every flow done, no QP error)."""
    fab = small(seed=2, hosts=16, paced=kw.pop("paced", True))
    spec = kw.pop("faults", None)
    faults = [simspec.parse_fault(spec, fab, flap="/" in spec)] if spec else []
    size = 8 << 20 if workload == "victim" else 1 << 20
    r = msim.simulate(fab, workload, size, 64 << 10, faults=faults, check_times=True, **kw).result
    assert r["late_times"] == 0 and r["unfinished"] == 0 and r["qp_errors"] == 0, r
