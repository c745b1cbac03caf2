"""The RoCE model beside published results (bench/roce_vs_mrc.py runs both;
docs/sim.md, "Beside published results"):

  ecmp_permutation  one QP a flow, a permutation on the analog of a k = 8
                    FatTree, beside the DCTCP curve of NDP's Figure 14
  dcqcn_recovery    DCQCN's rate after an incast, on the bottleneck line,
                    beside the DCQCN authors' ns-3 code as a published
                    validation ran it

    python bench/roce_anchors.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mrc._dp import ffi, lib  # noqa: E402
from ndp_permutation import quantiles  # noqa: E402 (bench/, beside this file)

from mrc import simfab as msim  # noqa: E402
from mrc import simspec  # noqa: E402
from mrc.simroce import G, Line, roce_cfg  # noqa: E402

#: PFC as bench/roce_vs_mrc.py deploys it: pause at 96 KiB, resume at 72 KiB
PFC = {"pfc_xoff": 96 << 10, "pfc_xon": 72 << 10}
#: ECMP's permutation as a published study ran it: the DCTCP curve of NDP's Figure 14 (Handley et al.,
#: SIGCOMM 2017), per-flow Gb/s at 200 ms, the artifact's sim/EXAMPLES/permutation/dctcp_logfile.rates
#: (github.com/nets-cs-pub-ro/NDP at 359f642): 128 flows, a k = 8 FatTree's hosts (the folder's run.sh
#: names 432 nodes; the stored file holds 128 rates), 10 Gb/s, 9,000-byte packets, one ECMP path a flow
DCTCP_ECMP = {"source": "NDP, SIGCOMM 2017, Figure 14, the DCTCP curve (github.com/nets-cs-pub-ro/NDP "
                        "sim/EXAMPLES/permutation/dctcp_logfile.rates, 359f642)",
              "flows": 128, "gbps": {"min": 0.893, "p1": 0.922, "p10": 2.218, "p50": 4.889, "p90": 9.511, "max": 9.986,
                                     "mean": 5.234}}
#: DCQCN after an incast, as the DCQCN authors' ns-3 code (github.com/bobzhuyb/ns3-rdma) ran it for a
#: published validation: github.com/sc20anonymous/DCQCN-validation at 4c5f9c4, its README (setup, the
#: 16 ms) and dcqcn_overall_throughput.png (the rates, read off the figure's pixels: its axes from the
#: ticks, 2 Gb/s and 2.5 ms apart, each curve's colour per column; the slopes are straight-line fits
#: over 10-19 ms, F1's within 0.1 Gb/s of every point)
DCQCN_RECOVERY = {
    "source": "github.com/sc20anonymous/DCQCN-validation (4c5f9c4): README and dcqcn_overall_throughput.png, "
              "ns-3 with the DCQCN authors' code",
    "setup": "F1 (H1 to R1) and F2 (H2 to R2) share the link S2-S1; at 3 ms H3-H17 send 4 KB messages to R2 for "
             "1 ms; Kmin 5 KB, Kmax 100 KB, Pmax 0.01, byte counter 10 MB, g 1/256, a 50 us timer (the README's "
             "versions call it the timer and the CNP interval)",
    "burst_ns": 3_000_000,
    "underutilized_ms": 16,            # stated: link S2-S1 below its rate before the burst
    "pre_gbps": [16.7, 14.9],          # F1, F2 just before the burst
    "floor_gbps": [9.4, 0.40],         # F1 (cut by PFC's spreading, not at its port), F2 (the incast's port)
    "floor_ms": [4.6, 5.4],
    "slope_gbps_per_ms": [0.737, 0.733],
}


def anchor_ecmp(seeds: int = 5, t_ns: int = 200_000_000) -> dict:
    """roce_1qp on the published setup's analog: 128 hosts, one plane of 10 Gb/s, the k = 8 FatTree's
    8 pods as leaves of 16 hosts and its 16 core switches as spines (the same 16 paths between pods),
    9,000-byte packets, 1.5 us a hop; flows that never end, each one's rate its bytes done by 200 ms
    (the published rates are at 200 ms). The permutation and the hashes vary with the seed: the
    quantiles are the median over the seeds."""
    per_seed = []
    for seed in range(1, seeds + 1):
        f = simspec.Fabric(hosts=128, planes=1, leaves=8, spines=16, rate_bps=10**10, hop_ns=1500, mtu=8872,
                           trim_bytes=0, buffer_bytes=0, seed=seed, transport="roce", roce={"qps": 1, **PFC})
        sim = msim.FabricSim(f)
        flows = simspec.flows_for("permutation", f, 1 << 40, seed=seed)
        sim.add_flows(flows, 1 << 20)
        sim.run(until_ns=t_ns)
        fs = ffi.new("struct mrc_fab_flow_stats *")
        rates = []
        for i in range(len(flows)):
            lib.mrc_fab_flow_stats(sim._f, i, fs, ffi.NULL)
            rates.append(fs.done * 8 / (t_ns / 1e9) / 1e9)
        sim.close()
        per_seed.append(quantiles(rates))
    med = {k: round(sorted(s[k] for s in per_seed)[len(per_seed) // 2], 3) for k in per_seed[0]}
    pub = DCTCP_ECMP["gbps"]
    return {"published": DCTCP_ECMP, "seeds": seeds, "t_ns": t_ns, "gbps": med, "per_seed": per_seed,
            "over_published": {k: round(v / pub[k], 3) for k, v in med.items()}}


def slope(ts: list[float], ys: list[float]) -> float:
    """The least-squares slope of ys over ts."""
    n = len(ts)
    mt, my = sum(ts) / n, sum(ys) / n
    return sum((t - mt) * (y - my) for t, y in zip(ts, ys, strict=True)) / sum((t - mt) ** 2 for t in ts)


def incast_line(timer_us: int, until_ms: int = 40) -> dict:
    """The published setup on the bottleneck line: F1 and F2 write from 0 ms into one 40 Gb/s port;
    at 3 ms 15 more senders write 4 KB messages into it, 5 MB in all (the port's 1 ms); 1,000-byte
    payloads with 58 header bytes, RED as published, PFC at 96 KiB. Per flow: its rate (DCQCN's) just
    before the burst, its floor after, the slope of its climb (from 1 ms past the floor to its first
    cut, or the end); and how long F1 and F2 together stay below what they moved in the 1 ms before
    the burst (their throughput per 1 ms)."""
    burst = DCQCN_RECOVERY["burst_ns"]
    cfg = roce_cfg(40 * G, mtu=1000, wire_extra=58, dcqcn=True, timer_ns=timer_us * 1000)
    with Line(17, 40 * G, cfg, kmin=5000, kmax=100_000, pmax=0.01, sample_ns=100_000, **PFC) as line:
        for s in (0, 1):
            line.flow(s, 1 << 40, msg=64 << 10)
        for s in range(2, 17):
            line.flow(s, (5_000_000 // 15) // 4096 * 4096, msg=4096, depth=16, start_ns=burst)
        line.run(until_ms * 1_000_000)
        smp, st = line.samples(), line.stats()
    k_burst = burst // 100_000
    out: dict = {"timer_us": timer_us, "pfc_pauses": st["pauses"], "dropped": st["dropped"],
                 "burst_end_ms": round(max(st["end_ns"][2:]) / 1e6, 2), "flows": []}
    for f in (0, 1):
        cc = [smp[k][f][0] / G for k in range(len(smp))]
        k0 = min(range(k_burst, len(cc)), key=lambda k: cc[k])
        k1 = k2 = k0 + 10
        while k2 + 1 < len(cc) and cc[k2 + 1] >= cc[k2]:
            k2 += 1
        ts = [k / 10 for k in range(k1, k2 + 1)]
        out["flows"].append({"pre_gbps": round(cc[k_burst - 1], 2), "floor_gbps": round(cc[k0], 2),
                             "floor_ms": k0 / 10, "slope_gbps_per_ms": round(slope(ts, cc[k1:k2 + 1]), 3),
                             "fit_ms": [ts[0], ts[-1]]})
    both = [(smp[k + 10][0][1] + smp[k + 10][1][1] - smp[k][0][1] - smp[k][1][1]) * 8 / 1e6 for k in
            range(0, len(smp) - 10)]  # Gb/s over the 1 ms from sample k
    pre = both[k_burst - 10]
    back = next((k for k in range(k_burst, len(both)) if both[k] >= pre), None)
    out["pre_gbps_both"] = round(pre, 2)
    out["underutilized_ms"] = round((back - k_burst) / 10, 1) if back is not None else None
    return out


def anchor_dcqcn(timers_us: tuple[int, ...] = (50, 55, 60)) -> dict:
    """incast_line at each rate-increase timer the sources name (the DCQCN paper's 55 us, the default;
    the validation's 50 us; the ns-3 code's sample configuration's 60 us), beside DCQCN_RECOVERY.
    Over the published: the climb's slope (F1 and F2's mean). The published link stayed below its rate
    16 ms, with F1 cut only to 9.4 Gb/s (by PFC's pauses spreading from F2's port) where the line,
    one port, cuts both flows to the floor; implied_underutilized_ms is the published time to F1's
    floor plus how long two flows starting at the published floors take, climbing at this model's
    slope, to move the published rate before the burst again."""
    pub = DCQCN_RECOVERY
    runs = {str(t): incast_line(t) for t in timers_us}
    base = runs["55"] if "55" in runs else next(iter(runs.values()))
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    ours = mean([f["slope_gbps_per_ms"] for f in base["flows"]])
    climb = (sum(pub["pre_gbps"]) - sum(pub["floor_gbps"])) / (2 * ours)
    return {"published": pub, "runs": runs, "timer_us": base["timer_us"],
            "slope_over_published": round(ours / mean(pub["slope_gbps_per_ms"]), 3),
            "slope_over_published_by_timer": {t: round(mean([f["slope_gbps_per_ms"] for f in r["flows"]])
                                                       / mean(pub["slope_gbps_per_ms"]), 3) for t, r in runs.items()},
            "implied_underutilized_ms": round(pub["floor_ms"][0] - pub["burst_ns"] / 1e6 + climb, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print JSON only")
    ap.add_argument("--quick", action="store_true", help="the ECMP anchor with one seed and 20 ms (CI)")
    a = ap.parse_args()
    out = {"ecmp_permutation": anchor_ecmp(1, 20_000_000) if a.quick else anchor_ecmp(),
           "dcqcn_recovery": anchor_dcqcn()}
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"ECMP permutation over NDP's DCTCP curve: {out['ecmp_permutation']['over_published']}")
        d = out["dcqcn_recovery"]
        print(f"DCQCN's climb after an incast over the published: {d['slope_over_published_by_timer']} (by timer, us); "
              f"link below its rate {d['runs'][str(d['timer_us'])]['underutilized_ms']} ms here, "
              f"{d['implied_underutilized_ms']} ms implied, {DCQCN_RECOVERY['underutilized_ms']} ms published")
    return 0


if __name__ == "__main__":
    sys.exit(main())
