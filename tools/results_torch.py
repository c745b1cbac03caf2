"""The results page's section for bench/ddp_bench.py: PyTorch's DDP over MRC and over Gloo."""

from __future__ import annotations

from results_fmt import fmt, get, table

NAMES = {"mrc": "MRC (backend mrc)", "gloo_planes": "Gloo, one interface per plane", "gloo_one": "Gloo, one plane"}


def ddp(runs: list[dict]) -> tuple[list[str], list[list]]:
    r = runs[-1]
    rate = (get(r, "rate_bps") or 0) / 1e6
    bk = r.get("backends") or {}
    first = next(iter(bk.values()), {})
    lines = [f"`examples/torch/ddp_train.py`, an ordinary DDP script run unchanged but for `--backend`: a 3-layer "
             f"MLP of {fmt((first.get('params') or 0) / 1e6, 2)} M parameters "
             f"({fmt((first.get('grad_bytes') or 0) / 2**20, 1)} MiB of float32 gradients a step), "
             "`bucket_cap_mb=25`, SGD; one process per host, "
             f"{get(r, 'fabric.hosts')} hosts x {get(r, 'fabric.planes')} planes, every switch and NIC port at "
             f"{fmt(rate, 0)} Mbit/s (the network is the bottleneck), kernel traffic routed by BGP with ECMP"
             f"{'' if r.get('routing') == 'bgp' else ' (routing: ' + str(r.get('routing')) + ')'}. Each backend "
             f"trains for {get(r, 'pairs')} pairs of {fmt(get(r, 'phase_seconds'), 0)} s phases, alternated: no "
             f"faults, then `{r.get('faults')}` from a separate process. Gloo runs over the kernel's TCP "
             "(`GLOO_SOCKET_IFNAME`); `planes used` is where h0 sent at least 2% of its bytes.", ""]
    rows = []
    def times(c: dict) -> str:
        return f"{fmt(c.get('step_p50_ms'), 0)} / {fmt(c.get('step_p99_ms'), 0)} / {fmt(c.get('step_max_ms'), 0)}"

    for b, s in bk.items():
        nf, wf, cal = s.get("no_fault") or {}, s.get("with_faults") or {}, s.get("calibration") or {}
        rows.append([NAMES.get(b, b), f"{nf.get('steps')} / {wf.get('steps')}", fmt(nf.get("steps_per_s"), 3),
                     times(nf), times(wf),
                     fmt(get(r, f"p99_inflation.{b}"), 3), fmt(nf.get("comm_share"), 2),
                     f"{fmt(cal.get('compute_s'), 3)} / {fmt(cal.get('comm_s'), 3)} / {fmt(cal.get('overlap_s'), 3)}",
                     f"{len(s.get('planes_used') or [])} of {get(r, 'fabric.planes')}",
                     fmt(s.get("qp_errors")) if b == "mrc" else "-"])
    lines += table(["backend", "steps (no faults / faults)", "steps/s, no faults", "step p50 / p99 / max ms, no faults",
                    "with faults", "p99 faults / none", "collectives' share", "compute / all-reduce / both at once s",
                    "planes used", "QP errors"], rows)
    lo = r.get("losses") or {}
    if lo:
        def compared(b: str, v: dict) -> str:
            st, worst = v.get("steps") or {}, v.get("max_rel_diff") or {}
            return (f"{NAMES.get(b, b)}: {st.get('no_fault')} steps without faults (largest difference "
                    f"{worst.get('no_fault') or 0:.2g}) and {st.get('with_faults')} with them "
                    f"({worst.get('with_faults') or 0:.2g})")

        direct = r.get("losses_mrc_vs_gloo")
        if direct is None:   # a run stored before the reference trajectory: MRC against Gloo only
            lines += ["", "Losses: rank 0's loss at every step both runs took, MRC's against Gloo's (same seed, "
                      f"same data); tolerance {get(r, 'loss_tolerance')} relative: "
                      + "; ".join(f"{NAMES.get(g, g)}: the first {v.get('steps_compared')} steps, largest difference "
                                  f"{max((v.get('max_rel_diff') or {}).values(), default=0.0):.2g}"
                                  for g, v in lo.items())
                      + f". Equal: {'yes' if r.get('losses_equal') else 'no'}."]
            lo = {}
    if lo:
        lines += ["", "Losses: rank 0's loss at every step of each run against a reference trajectory with the "
                  "same seed and data, computed by the bench in one process with no network (every rank's "
                  "gradients, their mean, the SGD step); tolerance "
                  f"{get(r, 'loss_tolerance')} relative, for float32 sums taken in another order. "
                  + "; ".join(compared(b, v) for b, v in lo.items()) + "."
                  + ("".join(f" MRC against {NAMES.get(g, g)} directly, over the {v.get('steps_compared')} steps "
                             f"both took: {max((v.get('max_rel_diff') or {}).values(), default=0.0):.2g}."
                             for g, v in direct.items()))
                  + f" Equal: {'yes' if r.get('losses_equal') else 'no'}."]
    if r.get("overlap_ratio") is not None:
        lines += ["", f"MRC's no-fault step p50 over the longer of compute alone and the all-reduce alone: "
                  f"{fmt(r['overlap_ratio'], 3)} (DDP overlaps the buckets' all-reduces with the backward pass; "
                  f"the calibration's all-reduce launched during a compute loop of its length took "
                  f"{fmt(get(r, 'backends.mrc.calibration.overlap_over_longer'), 3)} x the longer of the two, and "
                  f"during a wait of its length, the CPU left to the network as a GPU's compute leaves it, "
                  f"{fmt(get(r, 'backends.mrc.calibration.overlap_idle_over_longer'), 3)} x: the difference is "
                  "four ranks' compute and the fabric's forwarding sharing this VM's two cores)."]
    head = []
    if "mrc" in bk:
        head.append(["PyTorch DDP over MRC under faults (T1 reboot/10 s + flap/5 s): step p99 over no faults; "
                     "Gloo's beside it", f"{fmt(get(r, 'p99_inflation.mrc'), 3)} (Gloo "
                     f"{fmt(get(r, 'p99_inflation.' + str(r.get('best_gloo'))), 3)})", "<= 1.10"])
    if r.get("steps_per_s_over_gloo") is not None:
        head.append([f"PyTorch DDP steps/s, MRC over the better Gloo ({NAMES.get(r.get('best_gloo'), '-')}), "
                     f"{fmt(rate, 0)} Mbit/s ports", fmt(r["steps_per_s_over_gloo"], 3), ">= 1.5"])
    return lines, head
