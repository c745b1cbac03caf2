"""``mrc sim``: the unchanged engine at every NIC of a simulated multi-plane
Clos, in virtual time, run from the command line (the driver: mrc.simfab;
docs/sim.md has the model).

    mrc sim --hosts 64 --planes 8 --workload permutation --size 16M --single-path --json
    mrc sim --hosts 256 --workload alltoall --size 4M --json
    mrc sim --hosts 64 --workload permutation --size 64M --fail t1:0.3@100us --plots out/

Deterministic: the same arguments and seed give the same JSON, byte for
byte, apart from ``wall_s``, ``sim_pps`` and ``peak_rss_mb``.
"""

from __future__ import annotations

from mrc.errors import UsageError
from mrc.simfab import Progress, check_victim_start, simulate
from mrc.simspec import Fabric, Fault, flows_for, parse_fault, parse_time
from mrc.units import parse_rate, parse_size


def roce_args(a) -> dict:
    """The RoCE model's settings ``mrc sim``'s options give (mrc.simspec.roce_params checks them)."""
    roce: dict = {"qps": a.roce_qps, "split": int(a.roce_split), "converge_ns": parse_time(a.converge)}
    if a.pfc:
        xoff, _, xon = a.pfc.partition(":")
        roce["pfc_xoff"] = parse_size(xoff)
        roce["pfc_xon"] = parse_size(xon) if xon else roce["pfc_xoff"] * 3 // 4
        if roce["pfc_xoff"] <= 0:
            raise UsageError(f"--pfc {a.pfc}: XOFF above 0 bytes")
    for kv in a.roce_param:
        name, eq, value = kv.partition("=")
        try:
            roce[name] = float(value) if name == "g" else int(value)
        except ValueError:
            raise UsageError(f"--roce-param {kv!r}: NAME=N, e.g. timeout=14") from None
        if not eq:
            raise UsageError(f"--roce-param {kv!r}: NAME=N, e.g. timeout=14")
    return roce


def parse_args_to_fabric(a) -> Fabric:
    """The fabric ``mrc sim``'s options describe."""
    roce = a.transport == "roce"
    if not roce and (a.pfc or a.roce_param or a.roce_split or a.roce_qps != 1):
        raise UsageError("--pfc, --roce-qps, --roce-split and --roce-param go with --transport roce")
    if roce and a.single_path:
        raise UsageError("--single-path is MRC held to one path; --transport roce runs RoCE itself")
    buffer = "1M" if a.buffer is None and not a.pfc else (a.buffer or "0")
    return Fabric(hosts=a.hosts, planes=a.planes, leaves=a.leaves, spines=a.spines, rate_bps=parse_rate(a.rate),
                  hop_ns=parse_time(a.hop_delay), buffer_bytes=0 if buffer == "none" else parse_size(buffer),
                  ecn_bytes=parse_size(a.ecn), trim_bytes=0 if a.trim in ("0", "off") else parse_size(a.trim),
                  seed=a.seed, paced=not a.no_pacing, mtu=a.mtu, transport=a.transport,
                  roce=roce_args(a) if roce else {})


def main(a) -> int:
    """``mrc sim``: run, print (or JSON), plot; 1 when a QP failed or a flow did not finish."""
    import json
    import sys

    fab = parse_args_to_fabric(a)
    size, msg = parse_size(a.size), parse_size(a.msg)
    if size <= 0 or msg <= 0:
        raise UsageError("--size and --msg must be positive")
    faults = [parse_fault(s, fab) for s in a.fail] + [parse_fault(s, fab, flap=True) for s in a.flap]
    if a.incast < 1:
        raise UsageError("--incast must be at least 1")
    victim_at = parse_time(a.victim_at)
    check_victim_start(a.workload, victim_at, f"--victim-at {a.victim_at}")
    flows_for(a.workload, fab, size, a.incast, fab.seed)  # a workload that cannot be built says so first
    runs = {}
    for single in ([False, True] if a.single_path else [False]):
        name = "roce" if fab.transport == "roce" else "single_path" if single else "spray"
        if not a.json and not a.quiet:
            print(f"{name}: {fab.hosts} NICs x {fab.planes} planes ({fab.leaves} leaves, {fab.spines} spines per "
                  f"plane), {a.workload} ...", file=sys.stderr, flush=True)
        prog = None if a.quiet else Progress(name, sys.stderr)
        s = simulate(fab, a.workload, size, msg, incast=a.incast, faults=faults, single_path=single,
                     victim_start_ns=victim_at, progress=prog)
        if prog:
            prog.close()
        runs[name] = s
        s.close()
    out = {"fabric": {"hosts": fab.hosts, "planes": fab.planes, "leaves": fab.leaves, "spines": fab.spines,
                      "rate_gbps": fab.rate_bps / 1e9, "hop_ns": fab.hop_ns, "mtu": fab.mtu,
                      "base_rtt_ns": fab.base_rtt_ns(),
                      "rto_us": round((1024 << fab.timeout_exp()) / 1000, 1),
                      "buffer_bytes": fab.buffer_bytes, "ecn_bytes": fab.ecn_bytes, "trim_bytes": fab.trim_bytes,
                      "paced": fab.paced, "seed": fab.seed, "transport": fab.transport,
                      **({"roce": fab.roce} if fab.transport == "roce" else {})},
           "workload": a.workload, "size": size, "msg": msg, "faults": [f.what for f in faults],
           **({"victim_at_ns": victim_at} if victim_at else {}),
           **{name: s.result for name, s in runs.items() if name != "single_path"}}
    if "single_path" in runs:
        out["single_path"] = runs["single_path"].result
        sp = runs["single_path"].result["goodput_ratio"]
        out["spray_over_single_path"] = round(runs["spray"].result["goodput_ratio"] / sp, 3) if sp else None
    if a.plots:
        out["plots"] = plots(runs, faults, fab, a.plots)
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        for name, s in runs.items():
            r = s.result
            print(f"{name:>12}: goodput {r['goodput_ratio']:.3f} of line rate (at most {r['wire_bound_ratio']:.3f}: "
                  f"the busiest NIC's bytes, then a round trip), completion p50 {r['p50_us']} us "
                  f"p99 {r['p99_us']} us max {r['max_us']} us, longest gap {r['max_gap_us']} us, "
                  f"drops {r['drops']} trims {r['trims']} marks {r['marks']}, QP errors {r['qp_errors']}, "
                  f"{r['packets']} packets in {r['wall_s']} s ({r['sim_pps']} /s)")
            if r.get("collective"):
                c = r["collective"]
                print(f"{'':>12}  the {c['collective']}: {c['time_us']} us (ideal {c['ideal_us']} us), busbw "
                      f"{c['busbw_gbps']} Gb/s of a bound {c['bound_gbps']} Gb/s ({c['busbw_vs_bound']}), algbw "
                      f"{c['algbw_gbps']} Gb/s")
            if "victim_ratio" in r:
                print(f"{'':>12}  the victim: {r['victim_gbps']} Gb/s of a fair {r['victim_fair_gbps']} "
                      f"({r['victim_ratio']})")
    bad = any(s.result["qp_errors"] or s.result["unfinished"] for s in runs.values())
    return 1 if bad else 0


def plots(runs: dict, faults: list[Fault], fab: Fabric, outdir: str) -> list[str]:
    """The completion-time CDF and goodput/plane load over time; the paths written."""
    import os

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plots needs matplotlib: pip install 'mrc[bench]'") from None
    os.makedirs(outdir, exist_ok=True)
    paths = []

    def save(fig, ax, name: str, xlabel: str, ylabel: str) -> None:
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.legend()
        ax.grid(alpha=0.3)
        paths.append(os.path.join(outdir, name))
        fig.tight_layout()
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, s in runs.items():
        xs = sorted(s.fcts_us)
        ax.plot(xs, [(i + 1) / len(xs) for i in range(len(xs))], label=name)
    save(fig, ax, "sim_fct_cdf.png", "flow completion time (us)", "fraction of flows")
    fig, ax = plt.subplots(figsize=(7, 4))
    bucket = fab.bucket_ns
    for name, s in runs.items():
        ts = [i * bucket / 1e3 for i in range(len(s.series))]
        ax.plot(ts, [row[0] * 8 / (bucket / 1e9) / 1e12 for row in s.series], label=f"{name}: goodput (Tb/s)")
    for f in faults:
        ax.axvline(f.at_ns / 1e3, color="red", ls="--", lw=0.8)
    save(fig, ax, "sim_goodput.png", "virtual time (us)", "Tb/s")
    return paths
