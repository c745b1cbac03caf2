"""The section of docs/results.md for MRC against RoCEv2 in the simulator
(bench/roce_vs_mrc.py): the table of MRC's published comparison, measured."""

from __future__ import annotations

from results_fmt import fmt, table

WHO = ("mrc", "roce_1qp", "roce_16qp")
NAMES = {"mrc": "MRC", "roce_1qp": "RoCEv2, 1 QP", "roce_16qp": "RoCEv2, 16 QPs split"}


def _row(label: str, sc: dict, key: str, nd: int = 3) -> list:
    return [label, *[fmt((sc.get(w) or {}).get(key), nd) for w in WHO]]


def _t1_rows(t1: dict) -> list[list]:
    runs, ms = t1.get("runs") or {}, t1.get("delays_ms") or [50, 500, 5000]
    rows = []
    for d in ms:
        cells = [fmt((runs.get("mrc") or {}).get("vs_no_fault"), 3) if d == ms[0] else "(same)"]
        for w in WHO[1:]:
            r = runs.get(f"{w}@{d}ms") or {}
            cells.append("failed" if r.get("failed") else f"{fmt(r.get('vs_no_fault'), 3)} "
                         f"(+{fmt(r.get('recovery_ms'), 1)} ms)")
        rows.append([f"T1 reboot mid-all-reduce, routing converging in {d} ms: time over no fault", *cells])
    errs = [sum((runs.get(k) or {}).get("qp_errors", 0) for k in runs if k.split("@")[0] == w) for w in WHO]
    failed = [sum((runs.get(k) or {}).get("failed", 0) for k in runs if k.split("@")[0] == w) for w in WHO]
    rows.append(["T1 reboot: QP errors, failed collectives (all delays)",
                 *[f"{e}, {f}" for e, f in zip(errs, failed, strict=True)]])
    rows.append(["T1 reboot: that T1's QPs (MRC: every QP sprays over it)",
                 *[fmt((runs.get(w if w == "mrc" else f"{w}@{ms[0]}ms") or {}).get("qps_through_t1")) for w in WHO]])
    return rows


def _anchor(r: dict) -> list[str]:
    """The RoCE model beside a published ECMP permutation (NDP's DCTCP curve)."""
    an = (r.get("anchors") or {}).get("ecmp_permutation") or {}
    if not an:
        return []
    pub = an.get("published") or {}
    got, over = an.get("gbps") or {}, an.get("over_published") or {}
    keys = ["min", "p10", "p50", "p90", "max", "mean"]
    lines = ["", f"The RoCE model beside a published ECMP permutation: {pub.get('source')}; RoCE with one QP a "
             "flow on the analog of that k = 8 FatTree (its 8 pods as leaves, its 16 core switches as spines), "
             f"per-flow Gb/s at {fmt((an.get('t_ns') or 0) / 1e6)} ms, the median over {an.get('seeds')} seed(s) "
             "(docs/sim.md, \"RoCEv2\"):", ""]
    return lines + table(["", *keys], [["DCTCP, one ECMP path (published)",
                                        *[fmt((pub.get("gbps") or {}).get(k), 3) for k in keys]],
                                       ["RoCE model, one QP", *[fmt(got.get(k), 3) for k in keys]],
                                       ["over the published", *[fmt(over.get(k), 3) for k in keys]]])


def _anchor_dcqcn(r: dict) -> list[str]:
    """DCQCN's climb after an incast beside the DCQCN authors' ns-3 code (bench/roce_anchors.py)."""
    an = (r.get("anchors") or {}).get("dcqcn_recovery") or {}
    if not an:
        return []
    pub, runs = an.get("published") or {}, an.get("runs") or {}
    ts = list(runs)
    pair = lambda xs: ", ".join(fmt(x, 3 if x < 1 else 1) for x in xs)  # noqa: E731
    flows = lambda t, k: pair([f.get(k) for f in runs[t].get("flows") or []])  # noqa: E731
    over = an.get("slope_over_published_by_timer") or {}
    rows = [["climb after the burst, Gb/s per ms (F1, F2)", pair(pub.get("slope_gbps_per_ms") or []),
             *[flows(t, "slope_gbps_per_ms") for t in ts]],
            ["the climb over the published", "", *[fmt(over.get(t), 3) for t in ts]],
            ["floor after the burst, Gb/s (F1, F2)", pair(pub.get("floor_gbps") or []),
             *[flows(t, "floor_gbps") for t in ts]],
            ["F1 + F2 before the burst, Gb/s", fmt(sum(pub.get("pre_gbps") or []), 1),
             *[fmt(runs[t].get("pre_gbps_both"), 1) for t in ts]],
            ["the link below that after the burst, ms", fmt(pub.get("underutilized_ms")),
             *[fmt(runs[t].get("underutilized_ms"), 1) for t in ts]]]
    lines = ["", f"DCQCN after an incast beside the DCQCN authors' ns-3 code as a published validation ran it "
             f"(source: {pub.get('source')}; the rates read off the figure's pixels). Its setup: "
             f"{pub.get('setup')}. Here the same on the bottleneck line, one 40 Gb/s port for F1, F2 and the "
             "burst (5 MB in 4 KB WRITEs from 15 senders), at each rate-increase timer the sources name: the "
             "DCQCN paper's 55 us (the default), the validation's 50 us, the ns-3 sample configuration's 60 us. "
             "The line cuts both flows to the floor where the published F1, at another port, was cut to "
             "9.4 Gb/s by PFC's pauses spreading; from the published floors this model's climb takes the link "
             f"back in {fmt(an.get('implied_underutilized_ms'), 1)} ms (published: "
             f"{fmt(pub.get('underutilized_ms'))} ms):", ""]
    return lines + table(["", "published (ns-3)", *[f"RoCE model, {t} us" for t in ts]], rows)


def roce(runs: list[dict]) -> tuple[list[str], list[list]]:
    r = runs[-1]
    sc = r.get("scenarios") or {}
    t1 = sc.get("t1") or {}
    t1 = {**t1, "delays_ms": r.get("convergence_delays_ms")}
    fl = sc.get("flap") or {}
    lines = [f"MRC and a RoCEv2 model side by side in `mrc sim`, the same fabric, seeds and workloads "
             f"({fmt(r.get('nics'))} NICs, 8 planes x 2 tiers, 100 Gb/s, 1 us a hop, non-blocking; docs/sim.md, "
             "\"RoCEv2\"). RoCE as deployed: lossless (PFC at 96 KiB), DCQCN, go-back-N with NCCL's timeout "
             "(4.3 s) and 7 retries, one ECMP path per QP, routing converging 500 ms after a failure; MRC with "
             "its lossy trimming switches. The all-to-all and the victim run on "
             f"{fmt(min(r.get('nics') or 0, 64))} NICs; the flap case on 16 NICs at 10 Gb/s, time compressed "
             f"{fmt(fl.get('compression'))}x ({fl.get('flap', '-')}, RoCE's timer and routing compressed with "
             "it). goodput_vs_bound: goodput (or a collective's bus bandwidth) over "
             "the NICs' line rate less the headers. The ring all-reduce's neighbours mostly share a leaf, "
             "which routes RoCE between them in two hops, while MRC's paths always cross a T1 (four): its "
             "steps of 16 MiB / NICs are short enough for that latency to set the time.", ""]
    rows = [["paths per flow (RoCE: distinct plane and spine pairs crossing leaves)",
             *[fmt((sc.get("permutation") or {}).get(w, {}).get("paths"), 1) for w in WHO]]]
    for name, label in (("permutation", "permutation, 16 MiB"), ("alltoall", "all-to-all, 16 MiB"),
                        ("allreduce", "ring all-reduce, 16 MiB a rank")):
        s = sc.get(name) or {}
        rows.append(_row(f"{label}: goodput over the bound", s, "goodput_vs_bound"))
        rows.append(_row(f"{label}: completion (us)", s, "completion_us", 1))
    rows += _t1_rows(t1)
    rows.append(_row("a link flap every (compressed) minute: goodput over no flap", fl, "vs_no_flap", 4))
    pd = sc.get("port_down") or {}
    rows.append(_row("one of host 0's 8 ports down: its flow's goodput over no fault", pd, "flow_ratio"))
    rows.append(["one port down: QP errors, failed flows",
                 *[f"{(pd.get(w) or {}).get('qp_errors')}, {(pd.get(w) or {}).get('failed')}" for w in WHO]])
    rows.append(_row("incast 7:1 beside a victim flow: the victim's share of its fair rate", sc.get("victim") or {},
                     "victim_ratio"))
    big = sc.get("scale") or {}
    if big:
        n = fmt(big.get("nics"))
        rows.append(_row(f"permutation at {n} NICs (own process): CPU seconds (target <= 600)", big, "wall_s", 1))
        rows.append(_row(f"permutation at {n} NICs: goodput over the bound", big, "goodput_vs_bound"))
        rows.append(_row(f"permutation at {n} NICs: peak RSS (MB)", big, "peak_rss_mb", 1))
    lines += table(["", *[NAMES[w] for w in WHO]], rows)
    lines += _anchor(r) + _anchor_dcqcn(r)
    perm = sc.get("permutation") or {}
    head = [[f"MRC over RoCEv2 in simulation ({fmt(r.get('nics'))} NICs): permutation goodput, MRC / RoCE 16 QPs; "
             "T1 reboot mid-all-reduce, MRC's time over no fault; one port of 8 down, MRC's flow over no fault",
             f"{fmt(perm.get('mrc', {}).get('goodput_vs_bound'))} / "
             f"{fmt(perm.get('roce_16qp', {}).get('goodput_vs_bound'))}; {fmt(r.get('mrc_t1_ratio'))}; "
             f"{fmt(r.get('port_down_ratio'))}", "stated; <= 1.05; >= 0.875"]]
    return lines, head
