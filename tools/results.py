"""Render docs/results.md, and the README's table of headline results, from the
runs kept in bench/results/ (each bench's ``--save bench/results``).

    python tools/results.py           # write docs/results.md and the README's table
    python tools/results.py --check   # exit 1 when either differs from what the stored runs give

Every figure on the page comes from a stored JSON file, with the command that
made it, its commit, date and machine. Where a bench has several stored runs,
the page gives the latest run's table and, for its headline figures, the
median and spread over the runs. A hand-edited figure fails ``--check`` (a
test runs it).
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_fabric import fabric  # noqa: E402  (tools/, beside this file)
from results_fmt import fmt, get, routing_text, table  # noqa: E402
from results_fmt import run_median as med
from results_fmt import run_spread as spread
from results_roce import roce  # noqa: E402
from results_security import hostile, security_coll, security_congestion, security_fabric, security_latency  # noqa: E402
from results_torch import ddp  # noqa: E402
from results_verbs import verbs  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from sim_targets import SHORT, judge  # noqa: E402  (the simulator's targets as they are now)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
DOC = ROOT / "docs" / "results.md"
README = ROOT / "README.md"
BEGIN, END = "<!-- results:begin (python tools/results.py) -->", "<!-- results:end -->"
STEM = re.compile(r"^(?P<bench>[a-z_]+)-(?P<date>\d{4}-\d{2}-\d{2})-(?P<commit>[0-9a-f]+)(?P<tag>-[\w.-]+)?$")


# ------------------------------------------------------------------ loading
def load(where: Path = RESULTS) -> dict[str, list[dict]]:
    """bench -> its stored runs, oldest first; each run gets ``_stem`` (its file's name)."""
    out: dict[str, list[dict]] = {}
    for p in sorted(where.glob("*.json")):
        m = STEM.match(p.stem)
        if not m:
            continue
        try:
            run = json.loads(p.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise SystemExit(f"results: {p} is not a stored run ({e}): remove it or save the bench again") from None
        if not isinstance(run, dict):
            raise SystemExit(f"results: {p} is not a stored run (a JSON object): remove it or save the bench again")
        tag = (m["tag"] or "").lstrip("-")
        # -r2, -r3: another run of the same day and commit (bench/store.py), not a variant
        run["_stem"], run["_tag"] = p.stem, "" if re.fullmatch(r"r\d+", tag) else tag
        out.setdefault(run.get("bench", m["bench"]), []).append(run)
    for runs in out.values():
        runs.sort(key=lambda r: (r.get("date", ""), r["_stem"]))
    return out


def where(run: dict) -> str:
    """Commit, date and machine of a run, in one line."""
    m = run.get("machine") or {"cores": run.get("cores"), "kernel": run.get("kernel"), "srv6": run.get("srv6")}
    bits = [f"commit {run.get('commit', '?')}" + (" (tree differed)" if run.get("dirty") else "")
            + (f", ended on {run['ended_on_commit']}" if run.get("ended_on_commit") else ""),
            run.get("date", "?")[:16].replace("T", " ") + " UTC", f"{m.get('cores', '?')} cores",
            f"Linux {m.get('kernel', '?')}"]
    if m.get("srv6"):
        bits.append(f"SRv6: {m['srv6']}")
    return ", ".join(bits)


def command(bench: str, run: dict) -> str:
    return run.get("command") or f"python bench/{bench}.py --json"


def images(run: dict) -> list[str]:
    return sorted(p.name for p in RESULTS.glob(run["_stem"] + "-*.png"))


# ------------------------------------------------------------------ one section per bench
def coll(runs: list[dict]) -> tuple[list[str], list[list]]:
    r = runs[-1]
    lines = [f"Ports at {fmt(r.get('rate_bps', 0) / 1e6)} Mbit/s, {get(r, 'fabric.hosts')} hosts x "
             f"{get(r, 'fabric.planes')} planes; the bound is {r.get('bound_formula', '-')} "
             f"({fmt(get(r, 'fabric.bound_gbps'), 4)} Gb/s). OpenMPI over the kernel's TCP on the same fabric in "
             "the same run, alternated with MRC, each with one warm-up call and the same timed calls: `mpi_tcp` "
             "one plane per peer, `mpi_tcp_striped` every plane's address, `mpi_mptcp` one plane's address with "
             "MPTCP subflows on every plane (every host announces its planes), `gloo` torch.distributed's Gloo "
             "with one interface per plane. " + routing_text(r.get("routing"), r.get("bfd_ms")), ""]
    lines += _mpi_settings(r)
    rows = []
    for tr in ("mrc", "mpi_tcp", "mpi_tcp_striped", "mpi_mptcp", "gloo"):
        for c in ("all_reduce", "all_to_all"):
            x = get(r, f"{tr}.{c}")
            if x:
                used = x.get("planes_used")
                rows.append([tr, c, fmt(x.get("size")), fmt(x.get("busbw_gbps"), 4), fmt(x.get("algbw_gbps"), 4),
                             fmt(x.get("busbw_vs_bound")), fmt(x.get("wrong")), fmt(x.get("qp_errors")),
                             "all" if tr == "mrc" else ("-" if used is None else fmt(len(used)))])
    lines += table(["transport", "collective", "bytes", "busbw Gb/s", "algbw Gb/s", "of the bound", "wrong",
                    "QP errors", "planes used"], rows)
    def ratio(c: str, tr: str) -> str:
        lo, hi = (get(r, f"mrc.{c}.over_{tr}_spread") or [None, None])[:2]
        return fmt(get(r, f"mrc.{c}.over_{tr}")) + (f" ({fmt(lo)}-{fmt(hi)})" if lo != hi else "")

    ratios = [[c, tr, ratio(c, tr)] for c in ("all_reduce", "all_to_all")
              for tr in ("mpi_tcp", "mpi_tcp_striped", "mpi_mptcp") if get(r, f"mrc.{c}.over_{tr}")]
    if ratios:
        lines += ["", "MRC's bus bandwidth over each baseline's, median of the alternated rounds (range):", ""]
        lines += table(["collective", "over", "ratio"], ratios)
    tr = get(r, "train.transports", {})
    if tr:
        lines += ["", f"Training steps (`mrc train`'s emulator: {fmt(get(r, 'train.compute_ms'))} ms of compute, "
                  f"{fmt(get(r, 'train.model_bytes'))} bytes of gradients in {fmt(get(r, 'train.bucket_bytes'))}"
                  "-byte buckets) in "
                  + (f"{get(r, 'train.phase_pairs')} pairs of phases alternated, " if get(r, "train.phase_pairs")
                     else "phases ")
                  + f"without faults and under `{get(r, 'train.faults')}`"
                  + (f"; a phase lasts at least {fmt(get(r, 'train.min_seconds_per_phase'))} s, and MRC's and the "
                     f"striped MPI's are long enough for {get(r, 'train.steps_wanted')} steps per condition "
                     "(a 12 s job without faults measured their step first)"
                     if get(r, "train.steps_wanted") else "")
                  + ". The collectives' time is the step's part after the compute.", ""]
        rows = [[name, fmt(v.get("seconds_per_phase", get(r, "train.seconds_per_phase"))),
                 " / ".join(str(x) for x in v.get("steps", [])) or "-",
                 fmt(v.get("no_fault_step_p50_ms"), 0), fmt(v.get("step_p50_ms"), 0),
                 fmt(v.get("no_fault_step_p99_ms"), 0), fmt(v.get("step_p99_ms"), 0), fmt(v.get("p99_inflation")),
                 fmt(v.get("no_fault_comm_p99_ms"), 0), fmt(v.get("comm_p99_ms"), 0), fmt(v.get("qp_errors"))]
                for name, v in tr.items()]
        lines += table(["transport", "phase s", "steps (no faults / faults)", "step p50 ms", "with faults",
                        "step p99 ms", "with faults", "p99 inflation", "collectives p99 ms", "with faults",
                        "QP errors"], rows)
    sim = {k: v for k, v in get(r, "sim", {}).items() if isinstance(v, dict)}
    if sim:
        lines += ["", "`mrc sim` (virtual time), the same ring and credits; a T1 failed a third of the way in:", ""]
        lines += table(["collective", "NICs", "busbw / wire bound", "T1 failure: time ratio", "bound"],
                       [[v["collective"], fmt(v["nics"]), fmt(v["busbw_vs_bound"]), fmt(v["t1_completion_ratio"]),
                         fmt(v["t1_completion_bound"])] for v in sim.values()])
    tuned = "tuned OpenMPI (docs/results.md: algorithm by a sweep, ob1 striping)" if r.get("mpi_settings") else \
        "OpenMPI with its defaults"
    head = [["collectives: 64 MiB all-reduce / all-to-all, busbw of the ports' bound",
             f"{spread(runs, 'mrc.all_reduce.busbw_vs_bound')} / {spread(runs, 'mrc.all_to_all.busbw_vs_bound')}",
             ">= 0.90 / 0.85"],
            [f"collectives: all-reduce busbw over {tuned}, striped on every plane / one plane",
             f"{ratio('all_reduce', 'mpi_tcp_striped')} / {ratio('all_reduce', 'mpi_tcp')}",
             "stated (about the planes' count over one plane)"],
            [f"collectives: all-to-all busbw over {tuned}, striped on every plane / one plane",
             f"{ratio('all_to_all', 'mpi_tcp_striped')} / {ratio('all_to_all', 'mpi_tcp')}", "stated"],
            ["training step p99 under a T1 reboot every 10 s and a flap every 5 s, over no faults: MRC / "
             + ("tuned " if r.get("mpi_settings") else "") + "OpenMPI striped"
             + (" (kernel traffic routed by BGP)" if r.get("routing") == "bgp" else ""),
             f"{spread(runs, 'train.p99_inflation')} / "
             f"{fmt(get(r, 'train.transports.mpi_tcp_striped.p99_inflation'))}", "<= 1.10 / stated"]]
    return lines, head


def _mpi_settings(r: dict) -> list[str]:
    """What each MPI configuration ran with, and the sweep that chose it."""
    settings = r.get("mpi_settings") or {}
    if not settings:
        return []
    lines = ["Each MPI configuration's settings, chosen by the sweep below (one call of each candidate at the "
             "bench's size; `--skip tune` runs ring and pairwise instead), as `mpirun` options:", ""]
    lines += table(["configuration", "mpirun options"],
                   [[c, "`" + " ".join(v.get("mca", [])) + "`"] for c, v in settings.items()])
    sweep = r.get("mpi_tuning") or {}
    rows = []
    for c, per in sweep.items():
        for coll in ("all_reduce", "all_to_all"):
            for x in (per.get(coll) or {}).get("sweep", []):
                rows.append([c, coll, x["name"] + (" + ob1 striping" if x.get("ob1") else ""),
                             fmt(x["busbw_gbps"], 4), fmt(x["busbw_vs_bound"]),
                             "run with" if x["algorithm"] == per[coll]["algorithm"]
                             and (x.get("ob1") or {}) == (per.get("ob1") or {}) else ""])
    if rows:
        lines += ["", "The sweep:", ""] + table(["configuration", "collective", "candidate", "busbw Gb/s",
                                                 "of the bound", ""], rows)
    return lines + [""]


def engine(runs: list[dict]) -> tuple[list[str], list[list]]:
    r = runs[-1]
    lines = ["Two contexts and the in-memory link in one process: the measured loop is the engine in C (Python only "
             "starts it). Packets per CPU second of the process, which runs both engines and the link.", ""]
    lines += table(["figure", "measured", "target"], [
        ["data packets per second per core", spread(runs, "packets_per_sec_per_core", 0),
         f">= {fmt(r.get('target_packets_per_sec_per_core'))}"],
        ["Gb/s per core", spread(runs, "gbps_per_core", 2), "-"],
        [f"QP state at the default window ({fmt(r.get('payload'))} B payloads)", fmt(r.get("qp_state_bytes")) + " B",
         f"<= {fmt(r.get('target_qp_state_bytes'))} B"],
        ["QPs created in one context", fmt(r.get("qps_created")), "1,000"]]
        + ([["cycles per byte, both ends and the link", spread(runs, "cycles_per_byte", 3), "-"],
            ["  over the floor: one fused copy-and-CRC pass at each end "
             f"({fmt(r.get('min_cycles_per_byte'), 3)} cycles per byte, same run)", spread(runs, "cpu_vs_min", 2),
             "-"]] if r.get("cycles_per_byte") else []))
    head = [["engine: data packets per second per core (4 KiB, in-memory link)",
             spread(runs, "packets_per_sec_per_core", 0), ">= 1,000,000"],
            ["engine: memory per QP at a 1,024-PSN window", fmt(r.get("qp_state_bytes")) + " B", "<= 65,536 B"]]
    if r.get("cpu_vs_min"):
        head.append(["engine: CPU per byte over the floor (both ends, in-memory link)", med(runs, "cpu_vs_min", 2),
                     "-"])
    return lines, head


def latency(runs: list[dict]) -> tuple[list[str], list[list]]:
    r = runs[-1]
    lines = [f"A {fmt(r.get('size'))} B WRITE_IMM at a time, from its post to the receive completion of the "
             "server's echo, both ends a C loop through the public API that polls its CQ for 50 us (progressing "
             "the NIC itself) and then sleeps on the completion channel; alternated with a C UDP ping-pong and "
             f"`ping -6` over the kernel's own route between the same hosts, {r.get('rounds')} rounds of "
             f"{fmt(r.get('iters'))}.", ""]
    rows = [[p, fmt(get(r, f"{p}.p50_us"), 1), fmt(get(r, f"{p}.p99_us"), 1), fmt(get(r, f"{p}.min_us"), 1)]
            for p in ("mrc", "mrc_nospin", "udp", "icmp") if get(r, p)]
    lines += table(["", "p50 us", "p99 us", "min us"], rows)
    sp = get(r, "ratio_udp_spread") or []
    lines += ["", f"MRC's p50 over UDP's: {fmt(r.get('ratio_udp'), 2)} (rounds {'-'.join(fmt(x, 2) for x in sp)}; "
                  "target <= 1.5); `mrc_nospin`: engines that sleep at once when idle."]
    head = [["64 B WRITE_IMM round trip p50, over the kernel's UDP ping-pong", spread(runs, "ratio_udp", 2), "<= 1.5"]]
    return lines, head


def failover(runs: list[dict]) -> tuple[list[str], list[list]]:
    r = runs[-1]
    lines = ["The unchanged engine over the in-memory link with a real cluster's figures (8 planes of 100 Gb/s, "
             "4 paths per plane, 1 us per hop, a base RTT of 8 us, 64 KiB writes kept 64 deep), each scenario "
             "paired with a no-fault run from the same seed, every message compared byte for byte. Losses are "
             "found by SACKs, never by the timer; a dead plane costs its 1/8.", ""]
    rows = []
    for name, x in (r.get("scenarios") or {}).items():
        if name == "all":
            rows.append([x.get("desc", name), f"{x.get('error')} {fmt(x.get('error_after_last_progress_us'), 0)} us "
                         f"after the last completion (budget {fmt(x.get('retry_budget_us'), 0)} us)", "-",
                         fmt(x.get("timeouts")), "-",
                         ("the expected error" if x.get("error") == "RETRY_EXC_ERR" else f"{x.get('qp_errors')}")
                         + f" / {x.get('corrupt_messages')}"])
            continue
        rows.append([x.get("desc", name),
                     f"{fmt(x.get('max_gap_us'), 1)} us (no fault {fmt(x.get('nofault_max_gap_us'), 1)})",
                     fmt(x.get("max_gap_rtts"), 2), fmt(x.get("timeouts")), fmt(x.get("goodput_ratio")),
                     f"{x.get('qp_errors')} / {x.get('corrupt_messages')}"])
    lines += table(["scenario", "longest gap between completions", "base RTTs", "timer expiries",
                    "goodput vs no fault", "QP errors / corrupt"], rows)
    gaps = [x.get("max_gap_rtts") for k, x in (r.get("scenarios") or {}).items() if k != "all"]
    head = [["failover in virtual time (8 x 100 Gb/s): longest gap after a path, plane or flap fault",
             f"{fmt(max(g for g in gaps if g is not None), 2)} base RTTs" if gaps else "-", "<= 4 base RTTs"]]
    return lines, head


def sim(runs: list[dict]) -> tuple[list[str], list[list]]:
    r = runs[-1]
    lines = ["`mrc sim`: every NIC runs the unchanged engine on a simulated multi-plane Clos in virtual time "
             "(docs/sim.md). `wire_bound_ratio` is the most the run's flows could reach (the busiest NIC's data "
             "and its share of control packets back to back at line rate).", ""]
    sc = r.get("scenarios") or {}
    judged = {name: judge(name, x) for name, x in sc.items()}  # each against its target as it is now
    rows = [[name, fmt(x.get("nics")), fmt(x.get("goodput_ratio")), fmt(x.get("wire_bound_ratio")),
             fmt(x.get("p99_us"), 1), fmt(x.get("max_gap_us"), 1), fmt(x.get("qp_errors")), fmt(x.get("wall_s"), 1),
             judged[name][0], "met" if judged[name][1] else "not met"]
            for name, x in sc.items()]
    lines += ["Each scenario is judged against its target as bench/sim_targets.py states it now.", ""]
    lines += table(["scenario", "NICs", "goodput / line rate", "wire bound", "p99 us", "longest gap us",
                    "QP errors", "CPU s", "target", ""], rows)
    head = [["mrc sim: scenarios whose target held",
             f"{sum(1 for _, met in judged.values() if met)} of {len(sc)}", "all"]]
    x = sc.get("scale")
    if x:
        kb = x.get("per_nic_kb") or {}
        lines += ["", f"`scale`: {fmt(x.get('nics'))} NICs on {fmt(x.get('leaves'))} leaves and "
                  f"{fmt(x.get('spines'))} spines a plane (radix {fmt(x.get('leaf_radix'))} and "
                  f"{fmt(x.get('spine_radix'))}, oversubscription "
                  f"{fmt(x.get('oversubscription'))}); {fmt(x.get('wall_s'), 1)} s, peak RSS "
                  f"{fmt(x.get('peak_rss_mb'), 0)} MB, {fmt(x.get('per_nic_mb'), 3)} MB per NIC "
                  f"({fmt(x.get('per_nic_beyond_qps_mb'), 3)} beyond {fmt(x.get('qps_per_nic'))} QPs of "
                  f"{fmt(x.get('per_qp_bytes'))} B; KB per NIC: packets in flight {fmt(kb.get('packets'), 1)}, "
                  f"events {fmt(kb.get('events'), 1)}, fabric tables {fmt(kb.get('tables'), 1)}, contexts and "
                  f"the rest {fmt(kb.get('contexts_and_rest'), 1)}), {fmt(x.get('vs_wire_bound'))} of the wire "
                  f"bound, {fmt(x.get('qp_errors'))} QP errors."]
        head.append(["mrc sim scale: a 16 MiB permutation, NICs / CPU s / peak MB / MB per NIC beyond QP state / "
                     "of the wire bound",
                     f"{fmt(x.get('nics'))} / {fmt(x.get('wall_s'), 1)} / {fmt(x.get('peak_rss_mb'), 0)} / "
                     f"{fmt(x.get('per_nic_beyond_qps_mb'), 3)} / {fmt(x.get('vs_wire_bound'))}",
                     SHORT["scale"]])
    x = sc.get("speed")
    if x and "alltoall_pps_over_permutation" in x:
        small = (x.get("alltoall_pps_over_permutation_by_nics") or {}).get("8")
        head.append(["mrc sim speed at 64 NICs: simulator over engine alone; all-to-all packets/s over "
                     "permutation's (controls: the engine alone, 63 QPs over 1; the same ratio at 8 NICs)",
                     f"{fmt(x.get('sim_over_engine'))}; {fmt(x.get('alltoall_pps_over_permutation'))} "
                     f"({fmt(x.get('engine_63_qps_over_1'))}; {fmt(small)})", SHORT["speed"]])
    x = sc.get("sweep")
    if x:
        head.append(["mrc sim sweep: 2 Dask workers over half the serial time (48 cells), tables the same",
                     f"{fmt(x.get('dask_over_half_serial'))}, {x.get('identical')}", SHORT["sweep"]])
    return lines, head


def congestion(runs: list[dict]) -> tuple[list[str], list[list]]:
    r = runs[-1]
    lines = [f"Switch ports at {fmt(r.get('rate_bps', 0) / 1e6)} Mbit/s that mark ECN above {r.get('ecn_kb')} "
             f"KiB, trim MRC data above {r.get('trim_kb')} KiB and drop above {r.get('buffer_kb')} KiB; NICs paced "
             "at their ports' rate. Each flow writes one message at a time; the kernel's TCP (cubic with ECN, bbr; "
             "one stream per pair on the plane a hash picks, as ECMP would) and MPTCP (a subflow per plane) run "
             "the same workloads on the same fabric in the same run. `ideal` is the message times the senders "
             "over the receiver's capacity, plus the base RTT. " + routing_text(r.get("routing"), r.get("bfd_ms")), ""]
    rows = []
    for wl, x in (r.get("workloads") or {}).items():
        base = [t for t in ("tcp_cubic", "tcp_bbr", "mptcp") if isinstance(x.get(t), dict)]
        rows.append([wl, fmt(x.get("utilization")), fmt(x.get("jain"), 4),
                     f"{fmt(x.get('p50_ms'), 1)} / {fmt(x.get('p99_ms'), 1)} ({fmt(x.get('ideal_p99_ms'), 1)})",
                     f"{fmt(x.get('marks'))} / {fmt(x.get('trims'))} / {fmt(x.get('drops'))}",
                     ", ".join(f"{t} {fmt(get(x, t + '.p99_ms'), 1)}" for t in base) or "-",
                     fmt(x.get("victim_fair_share_ratio")), fmt(x.get("qp_errors"))])
    lines += table(["workload", "MRC utilization", "Jain", "MRC p50 / p99 ms (ideal)", "marks / trims / drops",
                    "p99 ms of the others", "victim / fair share", "QP errors"], rows)
    wls = r.get("workloads") or {}
    head = [[f"congestion: {wl}, MRC p99 over the ideal / over TCP cubic's",
             f"{fmt(x['p99_ms'] / x['ideal_p99_ms'], 2) if x.get('ideal_p99_ms') else '-'} / "
             f"{fmt(x.get('p99_vs_tcp_cubic'), 2)}", "<= 2 / <= 0.5"]
            for wl, x in wls.items() if wl.startswith("incast")]
    return lines, head


def campaign(runs: list[dict]) -> tuple[list[str], list[list]]:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import campaign_report
    finally:
        sys.path.remove(str(ROOT / "bench"))
    lines = ["One transfer h0 -> h3 on the default fabric, 64 KiB writes kept 64 deep, every completed write's "
             "bytes compared; each fault run paired with a no-fault run of the same length before it. Faults come "
             "from a separate process at the lowest priority, as `mrc fabric fail/heal/loss` does them. Controls "
             "in the same runs: (b1), (g1), (i1) are (b), (g), (i) with the faulty paths' EVs denied, so what is "
             "left is the fault's kernel work on the shared CPUs. "
             + (routing_text("bgp", get(runs[-1], "fabric.bfd_ms")) + " The TCP and MPTCP streams' source ports "
                "are chosen so that ECMP hashes them through the faulted spine (p0s3)."
                if get(runs[-1], "fabric.routing") == "bgp" else routing_text(None)), ""]
    text = campaign_report.spread(runs) if len(runs) > 1 else campaign_report.markdown(runs[-1])
    lines += text.split("\n")
    exc = [get(x, "mrc.stall_excess_ms") for run in runs for x in run.get("scenarios", {}).values()
           if get(x, "mrc.stall_excess_ms") is not None]
    errs = sum(get(x, "mrc.qp_errors", 0) for run in runs for x in run.get("scenarios", {}).values())
    bad = sum(get(x, "mrc.corrupt_bytes", 0) for run in runs for x in run.get("scenarios", {}).values())
    head = [["fault campaign (a)-(i): QP errors / corrupt bytes / largest stall excess over the no-fault run"
             + (f" ({len(runs)} runs)" if len(runs) > 1 else " (one run; the controls are beside it)"),
             f"{errs} / {bad} / " + (f"{fmt(max(exc), 2)} ms" if exc else "-"), "0 / 0 / <= 2 ms"]]
    return lines, head


#: a fault of bench/bgp_convergence.py -> the fault campaign's scenario of the same fault
CAMPAIGN_OF = {"link-cut": "a", "flap": "b", "t1-reboot": "c", "plane-cut": "g"}


def bgp_convergence(runs: list[dict], others: dict | None = None) -> tuple[list[str], list[list]]:
    r = runs[-1]
    camp = [x for x in (others or {}).get("fault_campaign", []) if not x["_tag"]]
    camp = camp[-1] if camp else {}
    lines = [f"The kernel's traffic on the BGP fabric (`mrc fabric up --routing bgp`: FRR's eBGP, ECMP, BFD at "
             f"{get(r, 'bfd.interval_ms')} ms x {get(r, 'bfd.detect_mult')}) under each fault the fault scheduler "
             f"makes, {fmt(get(r, 'faults.link-cut.events'))} events each, rotated over planes and spines. A probe "
             f"stream of {get(r, 'probe.flows')} UDP flows (one packet per flow every "
             f"{fmt(get(r, 'probe.interval_ms'))} ms, hashed over every spine) runs h0 -> h3 on the fault's plane; "
             "its loss window is the longest gap any flow saw. `first session down` is FRR's own log, from the "
             "fault to the first BGP session down in the plane. MRC's figure is the fault campaign's longest "
             "completion stall for the same fault"
             + (f" (`{command('fault_campaign', camp)}`, {where(camp)})" if camp else " (no stored campaign run)")
             + ". The control (`without BFD`) is the same run's second half: the same faults on the fabric "
             "built again without BFD.", ""]
    rows = []
    for fault, x in (r.get("faults") or {}).items():
        sc = get(camp, f"scenarios.{CAMPAIGN_OF.get(fault, '-')}.mrc") or {}
        mrc = (f"{fmt(sc.get('max_stall_ms'), 1)} ms (no fault {fmt(sc.get('no_fault_max_stall_ms'), 1)})"
               if sc else "-")
        ctl = get(r, f"no_bfd.{fault}") or {}
        rows.append([fault, f"{fmt(x.get('loss_window_ms_median'), 1)} / {fmt(x.get('loss_window_ms_max'), 1)}",
                     fmt(x.get("flows_hit_median")),
                     f"{fmt(x.get('detect_ms_median'), 1)} / {fmt(x.get('detect_ms_max'), 1)}",
                     f"{fmt(ctl.get('loss_window_ms_median'), 1)} / {fmt(ctl.get('loss_window_ms_max'), 1)}"
                     if ctl else "-", mrc])
    lines += table(["fault", "loss window ms, median / max", f"flows hit (of {get(r, 'probe.flows')})",
                    "first session down ms, median / max", "without BFD: loss window ms", "MRC's longest stall"],
                   rows)
    cpu, ctl_cpu = get(r, "fabric.frr_cpu"), get(r, "no_bfd_fabric.frr_cpu")
    if cpu:
        lines += ["", "What the emulated switches' daemons take of this VM's two cores on the idle fabric (% of one "
                  "core, all 48 switches): " + ", ".join(f"{k} {fmt(v, 1)}" for k, v in cpu.items())
                  + (" with BFD; without: " + ", ".join(f"{k} {fmt(v, 1)}" for k, v in ctl_cpu.items())
                     if ctl_cpu else "") + ". That is why the other benches' BGP fabrics run without BFD."]
    lines += ["", "A link cut next to the sender costs little: the leaf's kernel drops the dead next hop at once. "
              "On the far side only BGP tells the sender's leaf, so the flows hashed onto that spine are lost while "
              "the withdrawal travels and zebra installs it, with or without BFD: every cut here takes the link's "
              "carrier down, which the spine sees at once. BFD is for the failure nobody sees, the silent link "
              "(the control: BGP's 3 s hold time). A plane cut leaves single-plane traffic no path until the plane "
              "is back: what MPTCP's subflows or striping over planes are for, and what MRC's spraying does within "
              "a QP."]
    worst = max((x.get("loss_window_ms_max") or 0 for f, x in (r.get("faults") or {}).items()
                 if f != "plane-cut"), default=None)
    head = [["BGP fabric: kernel traffic's longest loss window after a link cut, T1 reboot, flap or silent link "
             "(BFD 50 ms x 3)", f"{fmt(worst, 1)} ms", "stated"]]
    return lines, head


def ndp(runs: list[dict]) -> tuple[list[str], list[list]]:
    r = runs[-1]
    pub = r.get("published") or {}
    lines = [f"`mrc sim` beside a published result: {pub.get('source', '-')}. {fmt(r.get('hosts'))} hosts, one plane "
             "at 10 Gb/s, 9,000-byte packets, queues trimmed above 8 packets, no ECN, a random permutation "
             f"({fmt(r.get('size', 0) >> 20)} MiB a flow here); the FatTree's 12 pods as leaves, its 36 core switches "
             "as spines (docs/sim.md, \"Beside a published result\"). Per-flow Gb/s (MRC: payload over the "
             "completion time):", ""]
    keys = ["min", "p1", "p10", "p50", "p90", "max", "mean"]
    rows = [["NDP (published)", "23 packets", *[fmt(pub.get("gbps", {}).get(k), 2) for k in keys], "-"]]
    for name, w in (r.get("windows") or {}).items():
        rows.append([f"MRC: {name.replace('_', ' ')}", f"{fmt(w.get('max_cwnd'))} B",
                     *[fmt(w["gbps"].get(k), 2) for k in keys], fmt(w.get("trims"))])
    lines += table(["", "window", *keys, "trims"], rows)
    w = (r.get("windows") or {}).get("ndp_window") or {}
    o = w.get("over_published") or {}
    head = [["NDP's permutation (SIGCOMM 2017, Fig. 14) in mrc sim with NDP's window: median / min flow over "
             "the published", f"{fmt(o.get('p50'))} / {fmt(o.get('min'))}", "within 10 % or explained"]]
    return lines, head


SECTIONS = [
    ("engine_bench", "The engine", engine),
    ("fabric_bench", "One QP on the fabric", fabric),
    ("latency_bench", "Small-message latency", latency),
    ("failover_sim", "Failover in virtual time", failover),
    ("fault_campaign", "Fault campaign", campaign),
    ("bgp_convergence", "Kernel traffic under BGP: reconvergence", bgp_convergence),
    ("congestion_bench", "Congestion on the fabric", congestion),
    ("sim_bench", "The engine at scale (mrc sim)", sim),
    ("ndp_permutation", "Beside a published result: NDP's permutation", ndp),
    ("roce_vs_mrc", "MRC against RoCEv2 in simulation", roce),
    ("coll_bench", "Collectives and training over MRC", coll),
    ("ddp_bench", "PyTorch DDP over MRC", ddp),
    ("fabric_bench_security", "Authenticated MRC on the fabric", security_fabric),
    ("latency_bench_security", "Authenticated MRC: latency", security_latency),
    ("coll_bench_security", "Authenticated MRC: collectives", security_coll),
    ("congestion_bench_security", "Authenticated MRC: incast with trimming", security_congestion),
    ("hostile_peer", "A hostile peer", hostile),
    ("verbs_bench", "Unmodified perftest over MRC", verbs),
]


# ------------------------------------------------------------------ the page
def render(runs_by_bench: dict[str, list[dict]]) -> tuple[str, str]:
    """(docs/results.md, the README's table) from the stored runs."""
    page = ["# Results", "",
            "Generated by `python tools/results.py` from the runs kept in `bench/results/`; do not edit by "
            "hand (`python tools/results.py --check` fails on any difference, and a test runs it). Each bench "
            "keeps a run with `--save bench/results`. Figures are from the 2-core development VMs: compare "
            "ratios within one run, not absolute figures across machines.", ""]
    head_rows = []
    for bench, title, fn in SECTIONS:
        anchor = re.sub(r"[^a-z0-9 -]", "", title.lower()).replace(" ", "-")
        page += [f"## {title}", ""]
        stored = runs_by_bench.get(bench, [])
        main_runs = [r for r in stored if not r["_tag"]]
        if not main_runs:
            page += [f"No stored run yet: `python bench/{bench}.py --json --save bench/results`.", ""]
            continue
        # the figures are the latest commit's: its runs give the medians and spreads
        runs = [r for r in main_runs if r.get("commit") == main_runs[-1].get("commit")]
        lines, head = fn(runs, runs_by_bench) if fn is bgp_convergence else fn(runs)
        page += _run_block(bench, title, runs, lines)
        for h in head:
            head_rows.append([h[0], h[1], h[2], f"`{command(bench, runs[-1])}`",
                              f"[{bench}](docs/results.md#{anchor})"])
        for tag in sorted({r["_tag"] for r in stored if r["_tag"]}):
            var = [r for r in stored if r["_tag"] == tag][-1:]
            page += [f"### {title}: {tag}", ""] + _run_block(bench, f"{title}: {tag}", var, fn(var)[0])
    readme = table(["what", "measured", "target", "command", "where"], head_rows)
    return "\n".join(page).rstrip() + "\n", "\n".join(readme) + "\n"


def _run_block(bench: str, title: str, runs: list[dict], lines: list[str]) -> list[str]:
    last = runs[-1]
    out = [f"`{command(bench, last)}`", "",
           f"{where(last)}; " + (f"{len(runs)} runs, " if len(runs) > 1 else "")
           + "stored as " + ", ".join(f"`bench/results/{r['_stem']}.json`" for r in runs) + ".", ""]
    notes: dict[str, list[str]] = {}  # one note once, with the runs it is about when not all of them
    for r in runs:
        if r.get("note"):
            notes.setdefault(r["note"], []).append(r["_stem"])
    out += [f"Note ({', '.join(stems)}): {n}." if len(runs) > 1 and len(stems) < len(runs) else f"Note: {n}."
            for n, stems in notes.items()] + [""] * bool(notes)
    out += lines + [""]
    imgs = images(last)
    out += [f"![{title}](../bench/results/{img})" for img in imgs] + ([""] if imgs else [])
    return out


def splice(readme: str, tbl: str) -> str:
    if BEGIN not in readme or END not in readme:
        raise SystemExit(f"README.md has no {BEGIN} ... {END} block for the results table")
    a, rest = readme.split(BEGIN, 1)
    _, b = rest.split(END, 1)
    return f"{a}{BEGIN}\n{tbl}{END}{b}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on a difference")
    a = ap.parse_args(argv)
    page, tbl = render(load())
    readme = README.read_text()
    new_readme = splice(readme, tbl)
    if a.check:
        bad = []
        for path, want in ((DOC, page), (README, new_readme)):
            have = path.read_text() if path.exists() else ""
            name = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
            if have != want:
                bad.append(name)
                sys.stdout.writelines(difflib.unified_diff(have.splitlines(True), want.splitlines(True), name,
                                                           "rendered", n=1))
        if bad:
            print(f"results: {', '.join(bad)} differ from the stored runs: "
                  "run `python tools/results.py`", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(page)
    README.write_text(new_readme)
    doc = DOC.relative_to(ROOT) if DOC.is_relative_to(ROOT) else DOC
    print(f"results: wrote {doc} and the README's table", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
