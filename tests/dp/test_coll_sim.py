"""mrc sim's collective workloads (rootless): the communicator's schedule in
virtual time, each piece waiting for the one it depends on, timed against
the schedule's wire bound; a T1 failed mid-collective."""
from __future__ import annotations

import pytest

from mrc import simfab as sim
from mrc import simspec
from mrc.coll import schedule


@pytest.mark.parametrize("workload", ["all-reduce", "all-to-all"])
def test_collectives_finish_near_their_bound(workload):
    s = sim.simulate(sim.Fabric(hosts=16, planes=4), workload, 2 << 20)
    r = s.result
    assert r["done"] and r["qp_errors"] == 0 and r["unfinished"] == 0
    c = r["collective"]
    assert c["collective"] == workload.replace("-", "_") and c["bytes"] == 2 << 20
    assert 0.75 < c["busbw_vs_bound"] <= 1.0, c
    assert c["busbw_gbps"] <= c["bound_gbps"]
    s.close()


def test_the_dependencies_hold_the_ring_back():
    """The same bytes without the schedule's waits (each pair's messages at once) finish sooner:
    the pieces really wait for the piece they depend on."""
    fab = sim.Fabric(hosts=8, planes=2)
    gated = sim.simulate(fab, "all-reduce", 1 << 20)
    t_gated = gated.result["collective"]["time_us"]
    gated.close()
    free = sim.FabricSim(fab, max_qps=8, flow_bytes=1 << 20)
    streams = sim.coll_streams("all-reduce", fab, 1 << 20)
    free.add_flows([(st["src"], st["dst"], sum(b for b, _ in st["msgs"])) for st in streams], 128 << 10, 16)
    res = free.run()
    free.close()
    assert res["done"] and res["sim_time_us"] < t_gated


def _dependencies_by_definition(p):
    return [[j for j, y in enumerate(p.xfers[:i]) if y.off < x.off + x.count and x.off < y.off + y.count
             and not (x.send and y.send)] for i, x in enumerate(p.xfers)]


def test_the_dependency_rule_is_its_definition_for_every_collective():
    """schedule.dependencies (segments) gives what its definition (every earlier pair) gives, for
    every collective, rank count and awkward size, zero-element transfers included."""
    import random

    rng = random.Random(5)
    checked = 0
    for coll in schedule.COLLECTIVES:
        for n in (2, 3, 4, 5, 8):
            for count in (0, 1, n - 1, n, 7 * n + 3, 64):
                for r in range(n):
                    if coll == "all_to_all" and count % n:
                        continue
                    kw = {}
                    if coll == "all_to_all_v":
                        kw = {"send_counts": [rng.randrange(0, 5) for _ in range(n)],
                              "recv_counts": [rng.randrange(0, 5) for _ in range(n)]}
                    p = schedule.plan(coll, n, r, count, root=n - 1, **kw)
                    assert schedule.dependencies(p) == _dependencies_by_definition(p), (coll, n, count, r)
                    checked += 1
    assert checked > 500


def test_the_dependency_rule_scales_to_a_thousand_ranks():
    """A ring's plan at 1,024 ranks has some 4,000 transfers: its dependencies in well under a second
    (comparing every pair took most of a minute per rank)."""
    import time

    p = schedule.plan("all_reduce", 1024, 5, 1 << 22)
    t0 = time.process_time()
    deps = schedule.dependencies(p)
    assert time.process_time() - t0 < 2.0
    assert len(deps) == len(p.xfers) > 4000 and all(j < i for i, d in enumerate(deps) for j in d)


def test_a_t1_failed_mid_collective_costs_about_its_share():
    fab = sim.Fabric(hosts=16, planes=4)
    base = sim.simulate(fab, "all-reduce", 8 << 20)
    t0 = base.result["collective"]["time_us"]
    base.close()
    fail = sim.simulate(fab, "all-reduce", 8 << 20, faults=[simspec.parse_fault(f"t1:1.0@{int(t0 / 3)}us", fab)])
    r = fail.result
    fail.close()
    assert r["qp_errors"] == 0 and r["unfinished"] == 0
    assert 1.0 <= r["collective"]["time_us"] / t0 < 1.25


def test_same_run_same_json():
    a = sim.simulate(sim.Fabric(hosts=8, planes=2, seed=3), "all-reduce", 1 << 20).result
    b = sim.simulate(sim.Fabric(hosts=8, planes=2, seed=3), "all-reduce", 1 << 20).result
    for r in (a, b):
        for k in ("wall_s", "sim_pps", "sim_data_pps", "peak_rss_mb"):
            r.pop(k)
    assert a == b


def test_ideal_time_of_a_chain():
    # two hosts, one message each way, then one more that waits for the other's first: 3 sizes and 2 latencies
    streams = [{"src": 0, "dst": 1, "msgs": [(100, None), (100, (1, 0))]},
               {"src": 1, "dst": 0, "msgs": [(100, None)]}]
    assert schedule.ideal_time_ns(streams, 1.0, 50.0, 2) == 100 + 50 + 100 + 50
    # the busiest NIC: 3 x 100 bytes from host 0, no waits
    flat = [{"src": 0, "dst": d, "msgs": [(100, None)]} for d in (1, 2, 3)]
    assert schedule.ideal_time_ns(flat, 1.0, 50.0, 4) == 300 + 50


def test_bad_collective_sizes_are_refused():
    with pytest.raises(sim.UsageError, match="needs at least"):
        sim.simulate(sim.Fabric(hosts=16, planes=2), "all-to-all", 32)


def test_the_simulator_refuses_bad_collective_messages():
    from mrc._dp import ffi, lib

    s = sim.FabricSim(sim.Fabric(hosts=4, planes=2), max_qps=8)
    s.add_flows([(0, 1, 4096), (1, 2, 4096)], 4096, 16)

    def msgs(flow, lens, dflow, dmsg):
        return lib.mrc_fab_flow_msgs(s._f, flow, len(lens), ffi.new("uint32_t[]", lens), ffi.new("int32_t[]", dflow),
                                     ffi.new("uint32_t[]", dmsg))

    einval = -22
    assert msgs(5, [4096], [-1], [0]) == einval             # no such flow
    assert msgs(0, [0], [-1], [0]) == einval                # an empty WRITE
    assert msgs(0, [65 << 20], [-1], [0]) == einval         # over 64 MiB
    assert msgs(0, [4096], [7], [0]) == einval              # waits for a flow that does not exist
    assert lib.mrc_fab_flow_msgs(s._f, 0, 0, ffi.NULL, ffi.NULL, ffi.NULL) == einval
    s.add_flows([(2, 3, 4096)], 4096, 64)                   # more in flight than receives posted
    assert msgs(2, [4096], [-1], [0]) == einval
    assert msgs(1, [4096], [0], [0]) == 0
    assert msgs(1, [4096], [0], [0]) == einval              # twice
    s.close()
