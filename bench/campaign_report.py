"""The fault campaign's reports (bench/fault_campaign.py): the terminal
table, the README's markdown tables and one plot per scenario; and what
it measures beside the transfer (the pause monitor, the bad path's EVs)."""
from __future__ import annotations

import os
import statistics
import subprocess
import sys

from mrc.fabric.topology import Topology

BUCKET = 0.1          # seconds per goodput sample (fault_campaign.py takes it from here)


def plot(path: str, key: str, sc: dict, res: dict) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(8, 3.2))
    for proto, color in (("mrc", "tab:blue"), ("tcp", "tab:orange"), ("mptcp", "tab:green")):
        if proto in res:
            ys = res[proto]["series_gbps"]
            ax.plot([i * BUCKET for i in range(len(ys))], ys, label=proto.upper(), color=color, lw=1.2)
    marked = set()
    for proto, color in (("mrc", "tab:blue"), ("tcp", "tab:orange"), ("mptcp", "tab:green")):
        # each run's own fault times (the fault process reports them), in the run's colour
        for at, op in res.get(proto, {}).get("fault_markers", []):
            lab = "fault" if op != "heal" else "heal"
            ax.axvline(at, color=color, ls="--" if op != "heal" else ":", lw=0.8,
                       label=None if lab in marked else lab + " (dashed; heal dotted)" if lab == "fault" else None)
            marked.add(lab)
    ax.set_xlabel("seconds")
    ax.set_ylabel("goodput (Gb/s)")
    ax.set_title(f"({key}) {sc['desc']}", fontsize=9)
    ax.set_xlim(0, sc["seconds"])
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def table(out: dict, protos: list[str]) -> str:
    lines = [f"{'scenario':<26}" + "".join(f"{p + ' ' + k:>15}" for p in protos for k in ("ratio", "stall ms"))
             + f"{'excess ms':>11}{'first s':>9}{'errors':>8}{'corrupt':>9}"]
    for key, r in out["scenarios"].items():
        if "idle" in r:
            i = r["idle"]
            lines.append(f"({key}) {r['name']:<22} busy cores {i['cpu_busy_cores_before']} before the fault, "
                         f"{i['cpu_busy_cores_after']} after (of {i['cores']})")
            continue
        cells = "".join(f"{r[p]['goodput_ratio']!s:>15}{r[p]['max_stall_ms']:>15}" if p in r else f"{'-':>15}{'-':>15}"
                        for p in protos)
        m = r["mrc"]
        lines.append(f"({key}) {r['name']:<22}" + cells + f"{m['stall_excess_ms']:>11}{m['goodput_first_s_ratio']!s:>9}"
                     f"{m['qp_errors']:>8}{m['corrupt_bytes']:>9}")
    return "\n".join(lines)


def markdown(out: dict) -> str:
    """The README table: per scenario, MRC's goodput (overall, first second,
    against its control), its longest stall beside the no-fault run's, the
    gap distribution, errors, corrupt bytes and resends; the kernel's
    transports' goodput / stall beside it."""
    protos = [p for p in ("tcp", "mptcp") if any(p in r for r in out["scenarios"].values())]
    cols = ["scenario", "MRC goodput (first s; vs control)", "MRC stall: fault / no fault / excess",
            "MRC gaps p50 / p99 (no fault)", "errors / corrupt B / resent",
            *(f"{p.upper()} goodput / stall" for p in protos), "target"]
    head = "| " + " | ".join(cols) + " |"
    lines = [head, "|" + "---|" * (len(protos) + 6)]
    for key, r in out["scenarios"].items():
        if "idle" in r:
            i = r["idle"]
            lines.append(f"| ({key}) {r['name']} | busy cores {i['cpu_busy_cores_before']} -> "
                         f"{i['cpu_busy_cores_after']} of {i['cores']} in the second after the fault | "
                         + " | ".join("-" for _ in range(4 + len(protos))) + " |")
            continue
        m = r["mrc"]
        g, g0 = m["gaps"], m["no_fault_gaps"]
        vs = f"; {m['vs_control']:.2f} x control" if "vs_control" in m else ""
        cells = [f"{m['goodput_ratio']:.2f} x ({m['goodput_first_s_ratio']:.2f}{vs})",
                 f"{m['max_stall_ms']:g} / {m['no_fault_max_stall_ms']:g} / {m['stall_excess_ms']:g} ms",
                 f"{g['p50_ms']:g} / {g['p99_ms']:g} ({g0['p50_ms']:g} / {g0['p99_ms']:g}) ms",
                 f"{m['qp_errors']} / {m['corrupt_bytes']} / {m['retransmitted_bytes'] / 1e6:.1f} MB"]
        for p in protos:
            x = r.get(p)
            cells.append("-" if x is None else f"{x['goodput_ratio']:.2f} x / {x['max_stall_ms']:g} ms")
        lines.append(f"| ({key}) {r['name']} | " + " | ".join(cells) + f" | {r['target']} |")
    return "\n".join(lines)


def _med(xs: list) -> str:
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return "-"
    m = statistics.median(xs)
    return f"{m:.2f} ({xs[0]:.2f} to {xs[-1]:.2f})" if len(xs) > 1 else f"{m:.2f}"


def spread(outs: list[dict]) -> str:
    """Several runs of the campaign: per scenario, MRC's median and range of
    goodput, first-second ratio, ratio to its control, stall excess, and the
    worst of errors and corrupt bytes."""
    lines = [f"| scenario (MRC, {len(outs)} runs: median (min to max)) | goodput vs no fault | first second after / "
             "before | vs its control | stall excess over no fault, whole run (ms) | the same, 200 ms after each "
             "fault (ms) | longest stall / no-fault (ms, median) | QP errors / corrupt bytes (all runs) | target |",
             "|---|---|---|---|---|---|---|---|---|"]
    for key, first in outs[0]["scenarios"].items():
        runs = [o["scenarios"][key]["mrc"] for o in outs if "mrc" in o["scenarios"].get(key, {})]
        if not runs:
            continue

        def g(k: str, runs=runs) -> list:
            return [r.get(k) for r in runs]
        stalls = f"{statistics.median(g('max_stall_ms')):.1f} / {statistics.median(g('no_fault_max_stall_ms')):.1f}"
        lines.append(f"| ({key}) {first['name']} | {_med(g('goodput_ratio'))} | {_med(g('goodput_first_s_ratio'))} | "
                     f"{_med(g('vs_control'))} | {_med(g('stall_excess_ms'))} | {_med(g('window_stall_excess_ms'))} | "
                     f"{stalls} | "
                     f"{sum(g('qp_errors'))} / {sum(g('corrupt_bytes'))} | {first['target']} |")
    return "\n".join(lines)


class PauseMonitor:
    """A process of its own (bench/pause_monitor.py) that sleeps 1 ms at a
    time and notes every time it woke more than 10 ms late, and every window
    in which a CPU counted steal time (the hypervisor running something
    else on that virtual CPU: /proc/stat). When the transfer's loop stalls
    and this process stalled too, or a CPU's time was stolen, the machine
    stalled (its two CPUs, or the hypervisor), not MRC: the control that
    isolates the VM's own cost."""

    def __init__(self, late_ns: int = 10_000_000) -> None:
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pause_monitor.py")
        self.proc = subprocess.Popen([sys.executable, script, str(late_ns)], stdout=subprocess.PIPE, text=True)

    def stop(self) -> list[tuple[int, int, int, float]]:
        """Events (CLOCK_MONOTONIC ns of the start, length ns, how long the
        monitor was away in it ns (0: a CPU's steal while it ran), the most
        steal time of one CPU in it ms)."""
        self.proc.kill()
        return parse_pauses(self.proc.communicate()[0])


def parse_pauses(text: str) -> list[tuple[int, int, int, float]]:
    """The monitor's lines (bench/pause_monitor.py); a line that is not four
    sane numbers (a partial last line when it was killed) is left out."""
    out = []
    for line in text.splitlines():
        f = line.split()
        if len(f) != 4:
            continue
        try:
            p = (int(f[0]), int(f[1]), int(f[2]), float(f[3]))
        except ValueError:
            continue
        if 0 <= p[2] <= p[1] and 0.0 <= p[3] < float("inf"):  # (nan fails both)
            out.append(p)
    return out


def monitor_figures(pauses: list, base_pauses: list, gaps: dict) -> dict:
    """What the pause monitor saw: its longest pause in each run, how long it
    was itself kept from running during the fault run's longest gap, and the
    most steal time a CPU counted in an event overlapping that gap (events:
    (start s, length s, away s, steal ms))."""
    out = {"monitor_max_pause_ms": round(max((w for _, _, w, _ in pauses), default=0.0) * 1e3, 1),
           "no_fault_monitor_max_pause_ms": round(max((w for _, _, w, _ in base_pauses), default=0.0) * 1e3, 1)}
    if gaps.get("max_ends_at_s") is not None:
        end = gaps["max_ends_at_s"]
        start = end - gaps["max_ms"] / 1e3
        hit = [(min(a + w, end) - max(a, start), st) for a, d, w, st in pauses if a < end and a + d > start]
        out["monitor_pause_in_longest_gap_ms"] = round(max((max(o, 0.0) for o, _ in hit), default=0.0) * 1e3, 1)
        out["steal_in_longest_gap_ms"] = max((st for _, st in hit), default=0.0)
    return out


def bad_path_leave(r: dict, t: Topology, path: tuple, t0_ns: int) -> dict:
    """When the EVs on the lossy path first left GOOD after the fault, in RTTs."""
    addr = t.path_address(*path)
    evs = {ev for ev, a in r["ev_address"].items() if a == addr}
    if not r["faults"] or not evs:
        return {}
    # the fault took effect between start_ns and t_ns (the fault process reports
    # both): count from start_ns, an upper bound on how long the EVs took
    tf = r["faults"][0].get("start_ns", r["faults"][0]["t_ns"])
    first: dict[int, int] = {}
    cause = None  # the first retirement by a loss: (when the lost packet was sent, when its EVs left GOOD)
    for e in r["ev_events"]:
        if e["ev"] in evs and e["new"] != "GOOD" and e["t_ns"] >= tf and e["ev"] not in first:
            first[e["ev"]] = e["t_ns"] - tf
            if cause is None and e.get("cause_ns"):
                cause = (e["cause_ns"], e["t_ns"])
    before = [s for at, s in r["srtt"] if at * 1e9 + t0_ns < tf and s]
    rtt = sorted(before)[len(before) // 2] if before else 0
    lat = sorted(first.values())
    out = {"bad_path_evs": len(evs), "left_good": len(first), "srtt_us": round(rtt / 1e3, 1),
           # the path's EV events around the fault: [ms after the fault, EV, old, new]
           "events": [[round((e["t_ns"] - tf) / 1e6, 3), e["ev"], e["old"], e["new"]] for e in r["ev_events"]
                      if e["ev"] in evs][:60]}
    if lat and rtt:
        out.update(first_left_rtts=round(lat[0] / rtt, 1), median_left_rtts=round(lat[len(lat) // 2] / rtt, 1),
                   all_left_rtts=round(lat[-1] / rtt, 1) if len(first) == len(evs) else None,
                   fault_applied_within_ms=round((r["faults"][0]["t_ns"] - tf) / 1e6, 3),
                   first_left_ms=round(lat[0] / 1e6, 3))
    if cause and rtt:
        # sharper than the fault process's clock: from the moment the first
        # packet the fault dropped left the sender to its path's EVs leaving GOOD
        out.update(loss_to_retire_ms=round((cause[1] - cause[0]) / 1e6, 3),
                   loss_to_retire_rtts=round((cause[1] - cause[0]) / rtt, 1),
                   first_drop_after_fault_start_ms=round((cause[0] - tf) / 1e6, 3))
    return out
