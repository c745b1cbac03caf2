"""The section of docs/results.md for the libibverbs layer: unmodified
perftest over MRC (bench/verbs_bench.py)."""

from __future__ import annotations

from results_fmt import fmt, get, spread, table


def verbs(runs: list[dict]) -> tuple[list[str], list[list]]:
    r = runs[-1]
    f = r.get("fabric") or {}
    lines = [f"Debian's perftest 4.5, unmodified, through `libmrc-verbs.so` (`mrc verbs run`, docs/verbs.md) between "
             f"{r.get('src')} and {r.get('dst')} of the default fabric ({f.get('planes')} planes x {f.get('spines')} "
             f"spines x {f.get('leaves')} leaves), beside `mrc perf` on the same hosts, alternated over "
             f"{r.get('rounds')} rounds. perftest: `ib_write_bw -d mrc0 -x 0 -F -s 1M -D {r.get('seconds')}` "
             "(its defaults: one QP, 128 WRs deep, every WR signaled), `ib_write_lat -d mrc0 -x 0 -F -s 64` "
             "(t_typical, half a round trip, doubled). The control for latency: `mrc perf --latency` again "
             "with a busy loop in each host, as perftest's two processes spin on their memory and CQs beside "
             "the engine threads on this machine's two cores.", ""]
    bw, rtt = r.get("bw_gbps") or {}, r.get("rtt_us") or {}
    rows = [[k, ", ".join(fmt(x, 2) for x in bw.get(k, [])), ", ".join(fmt(x, 1) for x in rtt.get(k, []))]
            for k in ("perftest", "mrc_perf")]
    rows.append(["mrc_perf beside two busy loops", "-", ", ".join(fmt(x, 1) for x in rtt.get("mrc_perf_spinners", []))])
    lines += table(["", "1 MiB Gb/s per round", "64 B round trip us per round"], rows) + [""]
    cut = r.get("cut_rates_gbps") or {}
    lines += table(["figure", "measured", "target"], [
        ["ib_write_bw over mrc perf at 1 MiB", f"{fmt(r.get('perftest_over_mrc_perf'))} "
         f"{spread(r.get('perftest_over_mrc_perf_spread'))}", ">= 0.95"],
        ["ib_write_lat 64 B round trip minus mrc perf's", f"{fmt(r.get('lat_delta_us'), 1)} us", "<= 1 us"],
        ["control: mrc perf beside two busy loops, minus alone", f"{fmt(r.get('lat_control_delta_us'), 1)} us "
         f"{spread(r.get('lat_control_delta_spread_us'), 1, sep=' to ')}", "-"],
        ["ib_write_bw -a: sizes reported, exit status", f"{len(r.get('perftest_sizes') or [])} "
         f"({fmt((r.get('perftest_sizes') or [0])[0])} B to {fmt((r.get('perftest_sizes') or [0])[-1])} B), "
         f"{r.get('perftest_rc')}", "23 (2 B to 8 MiB), 0"],
        ["plane 1 cut during ib_write_bw: Gb/s per second before / after, their medians' ratio; a -D run's exit",
         f"{', '.join(fmt(x, 2) for x in cut.get('before', []))} / {', '.join(fmt(x, 2) for x in cut.get('after', []))}"
         f"; {fmt(r.get('plane_cut_ratio'))}; exit {r.get('plane_cut_rc')}",
         f">= {get(r, 'targets.plane_cut_ratio')}; 0"],
        ["verbs_check (verbs.h only), 1 MiB writes, a link and a plane cut: wrong bytes",
         f"{fmt(r.get('check_wrong_bytes'))} of {fmt(r.get('check_bytes'))}", "0"]])
    head = [["unmodified perftest over MRC: ib_write_bw / mrc perf at 1 MiB; every size 2 B-8 MiB; a plane cut; "
             "wrong bytes", f"{fmt(r.get('perftest_over_mrc_perf'))}; {len(r.get('perftest_sizes') or [])} sizes, "
             f"exit {r.get('perftest_rc')}; {fmt(r.get('plane_cut_ratio'))} of before; "
             f"{fmt(r.get('check_wrong_bytes'))}", ">= 0.95; 23, 0; >= 0.79; 0"]]
    return lines, head
