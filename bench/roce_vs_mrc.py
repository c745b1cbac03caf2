"""MRC against RoCEv2 on the same simulated fabric, the same seeds and the same
workloads (mrc sim --transport roce; docs/sim.md, "RoCEv2"): the table of
MRC's published comparison with RoCEv2, measured.

    python bench/roce_vs_mrc.py --json                  # 256 NICs (a few minutes here)
    python bench/roce_vs_mrc.py --nics 64 --json        # smaller
    python bench/roce_vs_mrc.py --plot out/ --save bench/results
    python bench/roce_vs_mrc.py --quick --json          # every scenario, small (CI: tests/dp)

The fabric: 8 planes x 2 tiers, 100 Gb/s links, 1 us a hop, 32 NICs a leaf and
as many spines (non-blocking), as the scale scenario of bench/sim_bench.py.
The contenders, each as it is deployed:
  mrc        the engine, spraying every WRITE over every plane and spine; lossy
             switches that trim above 128 KiB and drop above 1 MiB
  roce_1qp   the RoCE model (go-back-N, DCQCN, NCCL's timeout 20 and retry
             count 7), one QP per flow, its path by the leaves' ECMP;
             lossless: PFC at 96 KiB (resume at 72 KiB), no drops
  roce_16qp  the same with 16 QPs per flow, two a plane, each WRITE split over
             them in equal parts (NCCL spreads a connection over QPs so)
Routing takes 500 ms to converge after a link changes (swept in the T1 case).

Scenarios (every figure from this run, deterministic for the seed):
  permutation  every NIC writes 16 MiB to a random other
  alltoall     64 NICs (or fewer), 16 MiB each spread over the others
  allreduce    mrc.coll's ring all-reduce of 16 MiB a rank
  t1           that all-reduce with a T1 switch failing half way through MRC's
               no-fault time and staying down: the T1 that carries the most
               roce_1qp QPs (each contender's count of QPs through it is
               stated; MRC's every QP sprays over it); RoCE at convergence delays 50 ms, 500 ms
               and 5 s; completion over no fault, QP errors, failed collectives
  flap         a leaf-spine link flapping once a "minute" over a long
               permutation, time compressed 1000x: a flap every 60 ms (down
               for 2 ms) on the leaf-spine link the most roce_1qp flows cross,
               RoCE's timer (4.2 ms: timeout 10) and routing's
               convergence (0.5 ms) compressed with it, links at 10 Gb/s so
               that 0.6 s of traffic simulates in seconds; goodput over the
               same run without flaps
  port_down    a permutation with host 0's port on plane 0 down from the start:
               the goodput of host 0's flow over its goodput without the fault
               (port_down_ratio: MRC's)
  victim       a 7:1 incast plus a flow from an incast sender to another host:
               the victim's goodput over its fair share
  scale        (--scale) the permutation at 8,192 NICs for each contender, each
               in a process of its own: CPU seconds, peak RSS
  anchors      the RoCE model beside published results (bench/roce_anchors.py):
               roce_1qp's permutation beside NDP's Figure 14 DCTCP curve (one
               ECMP path a flow on a k = 8 FatTree's analog, the median over 5
               seeds), and DCQCN's climb after an incast beside the DCQCN
               authors' ns-3 code

Per contender and scenario: paths (per flow: MRC the EVs of its QP, RoCE its
QPs' distinct plane and spine pairs crossing leaves), goodput_vs_bound
(goodput, or a collective's bus bandwidth, over the NICs' line rate less the
headers), completion_us (the last flow, or the collective), qp_errors, failed
(flows or collectives that did not finish).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mrc._dp import ffi, lib  # noqa: E402
from roce_anchors import PFC, anchor_dcqcn, anchor_ecmp  # noqa: E402 (bench/, beside this file)

from mrc import simfab as msim  # noqa: E402
from mrc import simspec  # noqa: E402

CONTENDERS = {"mrc": {"transport": "mrc"},
              "roce_1qp": {"transport": "roce", "roce": {"qps": 1, **PFC}, "buffer_bytes": 0},
              "roce_16qp": {"transport": "roce", "roce": {"qps": 16, "split": 1, **PFC}, "buffer_bytes": 0}}
CONVERGENCE_MS = [50, 500, 5000]
SIZE = 16 << 20
#: the flap case's compression: a minute is 60 ms, a second 1 ms
COMPRESS = 1000


def fabric(nics: int, who: str, seed: int = 1, **kw) -> simspec.Fabric:
    """The fabric with one contender's transport and switches; kw over both (roce settings merged)."""
    spec = dict(CONTENDERS[who])
    if "roce" in kw and "roce" in spec:
        spec["roce"] = {**spec["roce"], **kw.pop("roce")}
    kw.pop("roce", None)
    return simspec.Fabric(hosts=nics, planes=8, seed=seed, **{**spec, **kw})


def efficiency(f: simspec.Fabric) -> float:
    """Payload over the wire at full packets: the most goodput_ratio can be (the same 32 header bytes
    for both: MRC's BTH, RETH and ICRC, RoCE's BTH, RETH and ICRC)."""
    return f.mtu / (f.mtu + simspec.DATA_HDRS + simspec.WIRE_EXTRA)


def paths(sim: msim.FabricSim, who: str) -> float:
    """Paths per flow: MRC the EVs its QP sprays over; RoCE the distinct plane and spine pairs of its
    QPs that cross leaves (a flow within a leaf has none)."""
    if who == "mrc":
        return float(sim.attr.ev_count)
    p, s = ffi.new("uint32_t *"), ffi.new("int32_t *")
    per_flow = []
    for i in range(len(sim.flows)):
        seen = set()
        for q in range(sim.fab.roce["qps"]):
            lib.mrc_fab_roce_path(sim._f, i, q, p, s)
            if s[0] >= 0:
                seen.add((p[0], s[0]))
        per_flow.append(len(seen))
    return round(sum(per_flow) / len(per_flow), 2) if per_flow else 0.0


def summary(sim: msim.FabricSim, who: str) -> dict:
    """The table's figures of one run."""
    r = sim.result
    coll = r.get("collective")
    out = {"nics": r["nics"], "paths": paths(sim, who), "qp_errors": r["qp_errors"], "failed": r["unfinished"],
           "completion_us": coll["time_us"] if coll else r["max_us"], "p50_us": r["p50_us"], "p99_us": r["p99_us"],
           "goodput_vs_bound": round((coll["busbw_gbps"] * 1e9 / sim.fab.nic_bps() if coll else r["goodput_ratio"])
                                     / efficiency(sim.fab), 4),
           "drops": r["drops"], "pauses": r["pauses"], "timeouts": r["timeouts"], "wall_s": r["wall_s"]}
    if coll:
        out["failed"] = int(not r["done"])
    if "victim_ratio" in r:
        out["victim_ratio"] = r["victim_ratio"]
    return out


def run(f: simspec.Fabric, workload: str, size: int = SIZE, **kw) -> msim.FabricSim:
    sim = msim.simulate(f, workload, size, until_ns=kw.pop("until_ns", 60 * 10**9), **kw)
    return sim


def each(nics: int, workload: str, size: int = SIZE, fcts: dict | None = None, **kw) -> dict:
    """The workload for every contender: their figures (and their completion times into fcts)."""
    out = {}
    for who in CONTENDERS:
        sim = run(fabric(nics, who), workload, size, **kw)
        out[who] = summary(sim, who)
        if fcts is not None:
            fcts[who] = sorted(sim.fcts_us)
        sim.close()
    return out


def busiest(nics: int, workload: str, **kw) -> tuple[int, int, int]:
    """The (plane, leaf, spine) uplink the most roce_1qp flows of the workload cross."""
    sim = msim.FabricSim(fabric(nics, "roce_1qp", **kw))
    flows = simspec.flows_for(workload, sim.fab, SIZE)
    sim.add_flows(flows, simspec.COLL_PIECE, simspec.COLL_CREDITS)
    count = collections.Counter()
    p, s = ffi.new("uint32_t *"), ffi.new("int32_t *")
    for i, (src, _, _) in enumerate(flows):
        lib.mrc_fab_roce_path(sim._f, i, 0, p, s)
        if s[0] >= 0:
            count[(p[0], sim.fab.host_leaf(src), s[0])] += 1
    sim.close()
    return count.most_common(1)[0][0] if count else (0, 0, 0)


def qps_through(nics: int, who: str, plane: int, spine: int) -> int:
    """How many of a contender's all-reduce QPs cross that T1 (MRC: every QP's packets do)."""
    sim = msim.FabricSim(fabric(nics, who))
    flows = simspec.flows_for("all-reduce", sim.fab, SIZE)
    sim.add_flows(flows, simspec.COLL_PIECE, simspec.COLL_CREDITS)
    if who == "mrc":
        sim.close()
        return len(flows)
    p, s, n = ffi.new("uint32_t *"), ffi.new("int32_t *"), 0
    for i in range(len(flows)):
        for q in range(sim.fab.roce["qps"]):
            lib.mrc_fab_roce_path(sim._f, i, q, p, s)
            n += (p[0], s[0]) == (plane, spine)
    sim.close()
    return n


def t1(nics: int) -> dict:
    """The T1 reboot mid-all-reduce, against each contender's own no-fault run."""
    plane, _, spine = busiest(nics, "all-reduce")
    calm = each(nics, "all-reduce")
    at_ns = int(calm["mrc"]["completion_us"] * 1000 / 2)
    fault = f"t1:{plane}.{spine}@{at_ns}ns"
    out = {"t1": f"plane {plane} spine {spine}", "at_us": at_ns / 1000, "no_fault": calm, "runs": {}}
    for who in CONTENDERS:
        delays = [None] if who == "mrc" else CONVERGENCE_MS
        for ms in delays:
            kw = {} if ms is None else {"roce": {"converge_ns": ms * 1_000_000}}
            f = fabric(nics, who, **kw)
            sim = run(f, "all-reduce", faults=[simspec.parse_fault(fault, f)])
            r = summary(sim, who)
            sim.close()
            base = calm[who]["completion_us"]
            r |= {"vs_no_fault": round(r["completion_us"] / base, 4) if base and not r["failed"] else None,
                  "recovery_ms": round((r["completion_us"] - base) / 1000, 3) if not r["failed"] else None,
                  "qps_through_t1": qps_through(nics, who, plane, spine)}
            out["runs"][who if ms is None else f"{who}@{ms}ms"] = r
    return out


def flap(nics: int, seconds: float = 0.5) -> dict:
    """A link flap every compressed minute over a long permutation (seconds of traffic at a NIC's
    line rate), against no flap."""
    nics = min(nics, 16)
    kw = {"rate_bps": 10_000_000_000, "leaves": 2, "spines": 8}
    roce = {"timeout": 10, "converge_ns": 500_000_000 // COMPRESS}  # 4.2 ms; 0.5 ms
    period_ms, down_ms = 60, 2
    size = int(seconds * 8 * kw["rate_bps"] / 8)  # 0.5 s: eight compressed minutes
    plane, leaf, spine = busiest(nics, "permutation", roce=roce, **kw)
    link = f"link:{plane}.{leaf}.{spine}"
    out = {"flap": f"{link} down {down_ms} ms every {period_ms} ms", "compression": COMPRESS,
           "rate_gbps": 10, "nics": nics}
    for who in CONTENDERS:
        f = fabric(nics, who, roce=roce, **kw)
        calm = run(f, "permutation", size)
        c = summary(calm, who)
        calm.close()
        # flaps through the whole of the run without them (one QP a flow takes eight times as long)
        faults = [f"{link}@{t}ms+{down_ms}ms" for t in range(period_ms // 2, int(c["completion_us"] / 1000) + 1,
                                                            period_ms)]
        sim = run(f, "permutation", size, faults=[simspec.parse_fault(x, f) for x in faults])
        r = summary(sim, who)
        sim.close()
        r["vs_no_flap"] = round(c["completion_us"] / r["completion_us"], 4) if not r["failed"] else 0.0
        r["flaps"] = len(faults)
        out[who] = r
    return out


def port_down(nics: int) -> dict:
    """Host 0's port on plane 0 down from the start of a permutation: host 0's flow's goodput over
    its goodput without the fault."""
    out = {}
    for who in CONTENDERS:
        f = fabric(nics, who)
        calm = run(f, "permutation")
        base = calm.flow_bps[0]
        calm.close()
        sim = run(f, "permutation", faults=[simspec.parse_fault("host:0.0@0", f)])
        r = summary(sim, who)
        got = sim.flow_bps[0]
        sim.close()
        r["flow_ratio"] = round(got / base, 4) if got and base else 0.0
        out[who] = r
    return out


def scale(nics: int, leaves: int, spines: int) -> dict:
    """A 16 MiB permutation at nics NICs (8,192: 256 leaves, 32 spines, as bench/sim_bench.py's scale
    scenario) for each contender, each in a process of its own (mrc sim --json): CPU seconds, peak RSS,
    goodput over the bound, QP errors."""
    import subprocess

    out = {"nics": nics, "leaves": leaves, "spines": spines}
    for who, spec in CONTENDERS.items():
        cmd = [sys.executable, "-m", "mrc.tools.cli", "sim", "--hosts", str(nics), "--leaves", str(leaves),
               "--spines", str(spines), "--workload", "permutation", "--size", "16M", "--json"]
        if spec["transport"] == "roce":
            r = spec["roce"]
            cmd += ["--transport", "roce", "--roce-qps", str(r["qps"]), "--pfc", f"{r['pfc_xoff']}:{r['pfc_xon']}"]
            cmd += ["--roce-split"] if r.get("split") else []
        res = json.loads(subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True, timeout=7200).stdout)
        r = res["spray" if who == "mrc" else "roce"]
        mtu = res["fabric"]["mtu"]
        eff = mtu / (mtu + simspec.DATA_HDRS + simspec.WIRE_EXTRA)
        out[who] = {"wall_s": r["wall_s"], "peak_rss_mb": r["peak_rss_mb"], "qp_errors": r["qp_errors"],
                    "failed": r["unfinished"], "goodput_vs_bound": round(r["goodput_ratio"] / eff, 4),
                    "completion_us": r["max_us"], "p99_us": r["p99_us"]}
    return out


def plot_cdf(fcts: dict, outdir: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(outdir, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4))
    for who, xs in fcts.items():
        ax.plot(xs, [(i + 1) / len(xs) for i in range(len(xs))], label=who)
    ax.set_xscale("log")
    ax.set_xlabel("flow completion time (us), permutation of 16 MiB")
    ax.set_ylabel("fraction of flows")
    ax.grid(alpha=0.3)
    ax.legend()
    path = os.path.join(outdir, "roce_vs_mrc_fct.png")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nics", type=int, default=256, help="NICs (default 256; 16 to 8192)")
    ap.add_argument("--json", action="store_true", help="print JSON only (progress goes to stderr)")
    ap.add_argument("--plot", metavar="DIR", help="write the flow completion times' CDF (PNG)")
    ap.add_argument("--scale", action="store_true",
                    help="also the permutation at 8,192 NICs for each contender (--quick: 256), its CPU time")
    ap.add_argument("--quick", action="store_true",
                    help="every scenario, small: 32 NICs, 50 ms of flaps, the anchor with one seed (CI)")
    import store  # bench/, beside this file

    store.add_argument(ap)
    a = ap.parse_args()
    if not 16 <= a.nics <= 8192:
        print(f"--nics {a.nics}: 16 to 8192", file=sys.stderr)
        return 2
    if a.quick:
        a.nics = 32
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    fcts: dict = {}
    out: dict = {"nics": a.nics, "quick": a.quick, "seed": 1, "contenders": CONTENDERS,
                 "convergence_delays_ms": CONVERGENCE_MS,
                 "convergence_delays": [ms * 1_000_000 for ms in CONVERGENCE_MS], "scenarios": {}}
    sc = out["scenarios"]
    log("permutation ...")
    sc["permutation"] = each(a.nics, "permutation", fcts=fcts)
    log("alltoall ...")
    sc["alltoall"] = each(min(a.nics, 64), "alltoall", msg=64 << 10)
    log("allreduce ...")
    sc["allreduce"] = each(a.nics, "all-reduce")
    log("t1 ...")
    sc["t1"] = t1(a.nics)
    log("flap ...")
    sc["flap"] = flap(a.nics, 0.05 if a.quick else 0.5)
    log("port_down ...")
    sc["port_down"] = port_down(a.nics)
    log("victim ...")
    sc["victim"] = each(min(a.nics, 64), "victim", 64 << 20, msg=256 << 10)
    log("anchors: ECMP's permutation beside NDP's DCTCP curve, DCQCN after an incast beside ns-3's ...")
    out["anchors"] = {"ecmp_permutation": anchor_ecmp(1, 20_000_000) if a.quick else anchor_ecmp(),
                      "dcqcn_recovery": anchor_dcqcn()}
    if a.scale:
        log("scale: the permutation at 8,192 NICs, each contender in a process of its own ...")
        sc["scale"] = scale(*((256, 8, 32) if a.quick else (8192, 256, 32)))
    out["mrc_t1_ratio"] = sc["t1"]["runs"]["mrc"]["vs_no_fault"]
    out["port_down_ratio"] = sc["port_down"]["mrc"]["flow_ratio"]
    files = {}
    if a.plot:
        files["fct"] = plot_cdf(fcts, a.plot)
        out["plots"] = list(files.values())
    if a.save:
        store.save("roce_vs_mrc", out, a.save, files=files)
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        for name, r in sc.items():
            log(f"{name}: {json.dumps(r)[:400]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
