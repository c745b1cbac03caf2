"""Fault campaign: MRC against kernel TCP and MPTCP under real faults, on
the default fabric (8 planes, 4 spines, 2 leaves, 4 hosts), in one run.

The fabric routes kernel traffic with FRR's BGP (ECMP, BFD: mrc fabric up
--routing bgp; --routing static keeps the SRv6 encap through one spine per
host pair). Scenarios (each transfer is h0 -> h3; the faults sit on the paths
TCP uses too: plane 0, spine 3, where the static kernel route for h0 -> h3
goes, and on the BGP fabric the source port of each TCP and MPTCP stream is
chosen so that ECMP hashes it through p0s3: bgp.sport_through):
  a  one T0-T1 link (p0l0-p0s3) cut mid-transfer, never healed in the run
  b  that link flapping every second (down half a second, up half) for 60 s
  c  a T1 switch (p0s3) rebooting: all its links down for 5 s
  d  a host port down: h0's plane-0 link
  e  1% random loss on one plane (h0's plane-0 link, both directions)
  f  20% random loss on a single path (p0l0-p0s3, both directions)
  g  a whole plane: plane 0's T1 switches all fail mid-transfer (the hosts'
     ports stay up: only losses tell the sender)
  h  a T0 leaf reboot: h0's plane-0 leaf, all its links (h0's port too)
     down for 5 s, then up
  i  a seeded random schedule (--seed) over --flap-seconds: T0-T1 link cuts
     healed 1-8 s later and flaps (3 x 0.2 s down), about 10 a minute, on
     random planes
Controls (MRC only):
  b1 the same link flapping with its path's EVs denied in both runs, so MRC
     never sends over it and the fault's kernel work (in the leaf and spine
     it joins) is the same; g1 and i1 the same for (g) (plane 0 denied) and
     (i) (every path its schedule touches denied); `vs_control` in (b),
     (g), (i) is the scenario's goodput ratio over its control's
  g0 the plane cut with no transfer at all: the busy cores of the machine
     in the second before and after it (what the failure costs the kernel)
  b0 (only with --only b0) h1's plane-0 port flapping like (b); it carries
     none of this transfer

For each, per protocol: goodput_ratio (bytes from the first fault to the
end against a no-fault run of the same length just before it, over the same
window), goodput_ratio_after (from 1 s after the last fault event),
goodput_first_s_ratio (the second after the first fault over the second
before it, in the fault run), max_stall_ms (longest gap between
completions, or between reads at the TCP receiver, after the first fault),
no_fault_max_stall_ms (the same in the no-fault run: this VM's floor),
stall_excess_ms (the difference), gaps / no_fault_gaps (p50, p99 and max of
every gap after the first fault, both runs), for MRC corrupt_bytes and
verified_bytes (each completed WRITE's bytes compared with what it had to
write, in both runs), qp_errors (failed completions or QPs in
ERROR; for TCP, connection errors), retransmitted_bytes (MRC: the QP's
counter; TCP/MPTCP: the sender's TcpRetransSegs times the MSS), and for MRC
the EV state timeline (sampled every 100 ms) and, for (f), how many RTTs the
bad path's EVs took to leave GOOD, counted from when the first packet the
fault dropped was sent (each EV event of a loss carries that time).

    python bench/fault_campaign.py [--json] [--plots DIR] [--only a,c]
        [--seconds 6] [--flap-seconds 60] [--seed 7] [--no-kernel]
        python bench/fault_campaign.py --markdown campaign.json [more.json ...]

Needs root. The switch interfaces carry wire-size packets
(mrc.fabric.apply.wire_sized) and the hosts receive with GRO
(mrc.fabric.apply.host_gro), as in bench/fabric_bench.py. Faults come
from a separate process under SCHED_IDLE (a link fails in the network, not
on the hosts' CPUs); the times it reports are the fault markers. Plots need
matplotlib (pip install matplotlib, or `pip install .[bench]`).
"""
from __future__ import annotations

import argparse
import bisect
import json
import os
import random
import sys

import fabric_args
from campaign_report import BUCKET, bad_path_leave, markdown, monitor_figures, plot, spread, table
from campaign_runs import FAULT_AT, Recorder, run_idle, run_mrc, run_tcp

from mrc.fabric import apply, bgp
from mrc.fabric.baseline import IPPROTO_MPTCP, mptcp_setup
from mrc.fabric.topology import Topology
from mrc.signals import exit_cleanly_on_sigterm
from mrc.verbs import QPAttr

ALL = ("a", "b", "b0", "b1", "c", "d", "e", "f", "g", "g0", "g1", "h", "i", "i1")
DEFAULT = ("a", "b", "b1", "c", "d", "e", "f", "g", "g1", "g0", "h", "i", "i1")
CONTROLS = {"b": "b1", "g": "g1", "i": "i1"}  # the scenario and its no-MRC-on-the-path control


def scenarios(t: Topology, seconds: float, flap_seconds: float, seed: int = 7) -> dict:
    src, dst = 0, t.hosts - 1
    spine = (src + dst) % t.spines  # the kernel's static path for this pair
    link = f"{t.leaf(0, t.host_leaf(src))}-{t.spine(0, spine)}"
    host_link = f"{t.host(src)}-{t.leaf(0, t.host_leaf(src))}"
    sw = t.spine(0, spine)
    other = f"{t.host(1)}-{t.leaf(0, t.host_leaf(1))}"
    plane_spines = [t.spine(0, s) for s in range(t.spines)]
    leaf = t.leaf(0, t.host_leaf(src))
    rnd_plan, rnd_paths = random_schedule(t, flap_seconds, seed)
    flaps = [(FAULT_AT + k + h, op, link, None) for k in range(int(flap_seconds)) for h, op in ((0, "fail"),
                                                                                                (0.5, "heal"))]
    return {
        "a": {"name": "link cut", "desc": f"T0-T1 link {link} cut mid-transfer",
              "plan": [(FAULT_AT, "fail", link, None)], "seconds": seconds, "target": "stall excess <= 2 ms"},
        "b": {"name": "link flap", "desc": f"{link} flapping every second for {flap_seconds:g} s",
              "plan": flaps, "seconds": FAULT_AT + flap_seconds + 1, "target": "goodput >= 0.95 x control (b1)"},
        # not a fault of this transfer: the same flapping on h1's plane-0 port,
        # which carries none of its packets, shows what the fault machinery
        # itself costs on these shared CPUs (kernel link and route work)
        "b0": {"name": "flap elsewhere", "desc": f"control for (b): {other} flapping, carrying none of this traffic",
               "plan": [(at, op, other, arg) for at, op, _, arg in flaps], "seconds": FAULT_AT + flap_seconds + 1,
               "target": "none (control)"},
        # the same link flapping, with the path's EVs denied: MRC sends nothing
        # over it, the fault's kernel work (link, route and neighbour updates
        # in the leaf and spine) is the same: what the flapping costs the
        # fabric's shared CPUs rather than MRC (both runs deny the path)
        "b1": {"name": "flap, path denied", "desc": f"control for (b): {link} flapping, its path's EVs denied",
               "plan": flaps, "seconds": FAULT_AT + flap_seconds + 1, "target": "none (control)",
               "deny": [(src, dst, 0, spine)], "mrc_only": True},
        "c": {"name": "T1 reboot", "desc": f"T1 switch {sw}: all its links down for 5 s",
              "plan": [(FAULT_AT, "fail", sw, None), (FAULT_AT + 5, "heal", sw, None)],
              "seconds": FAULT_AT + 5 + max(2.0, seconds - FAULT_AT - 2), "target": "no QP error, goodput >= (P-1)/P"},
        "d": {"name": "host port down", "desc": f"host port {host_link} (plane 0) down",
              "plan": [(FAULT_AT, "fail", host_link, None)], "seconds": seconds,
              "target": "no QP error, goodput >= (P-1)/P"},
        "e": {"name": "1% plane loss", "desc": f"1% random loss on plane 0 ({host_link})",
              "plan": [(FAULT_AT, "loss", host_link, 1.0)], "seconds": seconds, "target": "goodput >= 0.90"},
        "f": {"name": "20% path loss", "desc": f"20% random loss on the path through {link}",
              "plan": [(FAULT_AT, "loss", link, 20.0)], "seconds": seconds,
              "target": "bad path's EVs leave GOOD within 10 RTTs, rate holds", "bad_path": (src, dst, 0, spine)},
        "g": {"name": "plane cut", "desc": f"plane 0's T1 switches ({', '.join(plane_spines)}) fail, host ports up",
              "plan": [(FAULT_AT, "fail", plane_spines, None)], "seconds": seconds,
              "target": "first second >= 0.80 of the one before; >= (P-1)/P x 0.95 of no fault"},
        # the same failure, plane 0's EVs denied in both runs: MRC never uses
        # the plane, so what is left is the kernel's work on the shared CPUs
        "g1": {"name": "plane cut, plane denied", "desc": "control for (g): the same plane cut, plane 0's EVs denied",
               "plan": [(FAULT_AT, "fail", plane_spines, None)], "seconds": seconds, "target": "none (control)",
               "deny": [(src, dst, 0, s) for s in range(t.spines)], "mrc_only": True},
        # the same failure with no transfer at all: the CPU it costs the VM
        "g0": {"name": "plane cut, idle", "desc": "control for (g): the same plane cut with no traffic (CPU cost)",
               "plan": [(FAULT_AT, "fail", plane_spines, None)], "seconds": FAULT_AT + 2.0,
               "target": "none (control)", "idle": True},
        "h": {"name": "T0 reboot", "desc": f"T0 leaf {leaf}: all its links (and h0's plane-0 port) down 5 s",
              "plan": [(FAULT_AT, "fail", leaf, None), (FAULT_AT + 5, "heal", leaf, None)],
              "seconds": FAULT_AT + 5 + max(2.0, seconds - FAULT_AT - 2), "target": "no QP error, goodput >= (P-1)/P"},
        "i": {"name": "random flaps", "desc": f"seeded random T0-T1 cuts, heals and flaps, ~10/min for "
                                              f"{flap_seconds:g} s",
              "plan": rnd_plan, "seconds": FAULT_AT + flap_seconds + 1, "target": "goodput >= 0.95 x control (i1)"},
        "i1": {"name": "random flaps, paths denied", "desc": "control for (i): the same schedule, its paths denied",
               "plan": rnd_plan, "seconds": FAULT_AT + flap_seconds + 1, "target": "none (control)",
               "deny": rnd_paths, "mrc_only": True},
    }


def random_schedule(t: Topology, seconds: float, seed: int, per_minute: float = 10.0) -> tuple[list, list]:
    """T0-T1 link faults at about per_minute events a minute, on random
    planes: a cut healed 1-8 s later, or a flap (3 x 0.2 s down, 0.2 s up).
    Returns the plan and the (src, dst, plane, spine) paths of h0 -> hN it touches."""
    rng = random.Random(seed)
    src, dst = 0, t.hosts - 1
    plan, paths, at = [], set(), FAULT_AT
    while True:
        at += rng.expovariate(per_minute / 60.0)
        if at >= FAULT_AT + seconds:
            break
        plane, spine = rng.randrange(t.planes), rng.randrange(t.spines)
        leaf = t.host_leaf(rng.choice((src, dst)))
        link = f"{t.leaf(plane, leaf)}-{t.spine(plane, spine)}"
        paths.add((src, dst, plane, spine))
        if rng.random() < 0.5:
            plan += [(at, "fail", link, None), (min(at + rng.uniform(1, 8), FAULT_AT + seconds), "heal", link, None)]
        else:
            plan += [(at + k * 0.4 + h, op, link, None) for k in range(3) for h, op in ((0, "fail"), (0.2, "heal"))]
    plan.sort(key=lambda x: x[0])
    return plan, sorted(paths)


def rate_between(rec: Recorder, a: float, b: float) -> float:
    """Goodput in Gb/s over [a, b) seconds (whole buckets)."""
    i, j = int(a / BUCKET + 0.5), int(b / BUCKET)
    if j <= i:
        return 0.0
    return sum(rec.buckets[i:j]) * 8 / ((j - i) * BUCKET) / 1e9


def longest_gap_after(rec: Recorder, t: float) -> float:
    return max(rec.gaps_after(t), default=0.0)


def gap_stats(rec: Recorder, t: float) -> dict:
    """p50, p99 and max of the gaps between deliveries after t, in ms."""
    raw = rec.gaps_after(t)
    g = sorted(raw)
    if not g:
        return {"p50_ms": None, "p99_ms": None, "max_ms": None, "max_ends_at_s": None}
    k = bisect.bisect_right(rec.times, t)
    end = rec.times[k + raw.index(g[-1])]
    return {"p50_ms": round(g[len(g) // 2] * 1e3, 3), "p99_ms": round(g[min(len(g) - 1, int(len(g) * 0.99))] * 1e3, 3),
            "max_ms": round(g[-1] * 1e3, 3), "max_ends_at_s": round(end, 3)}


WINDOW = 0.2          # seconds after each fault event that window_stall looks at


def window_stall(rec: Recorder, events: list[float]) -> float:
    """The longest gap between deliveries that overlaps [t, t + WINDOW) for
    some fault event t (seconds after t0)."""
    ts, best = rec.times, 0.0
    for t in events:
        k = max(0, bisect.bisect_right(ts, t) - 1)  # the delivery before t: its gap may span t
        while k + 1 < len(ts) and ts[k] < t + WINDOW:
            best = max(best, ts[k + 1] - ts[k])
            k += 1
    return best


def summarize(r: dict, base: Recorder, seconds: float, t0_ns: int) -> dict:
    """A fault run against its paired no-fault run, both over the window from
    the first fault (as the fault process reported it) to the end."""
    rec = r["rec"]
    times = [(f["t_ns"] - t0_ns) / 1e9 for f in r["faults"]]
    first = times[0] if times else FAULT_AT
    last = times[-1] if times else FAULT_AT
    base_gbps = rate_between(base, first, seconds)
    after = [longest_gap_after(rec, first)]
    # a transfer that stopped for good: its stall lasts to the end of the run
    if rec.last is None or rec.last - rec.t0 < seconds - 0.2:
        after.append(seconds - max(first, (rec.last or rec.t0) - rec.t0))
    during = rate_between(rec, first, seconds)
    recovered = rate_between(rec, min(last + 1.0, seconds - 1.0), seconds)
    no_fault_stall = longest_gap_after(base, first)
    # the second after the first fault over the second before it (this run's own rate)
    before_1s, after_1s = rate_between(rec, first - 1.0, first), rate_between(rec, first, first + 1.0)
    # the same, but only gaps that overlap the 200 ms after a fault event, in
    # both runs (the same windows of time): a stall of the VM elsewhere in
    # the run, which either run may or may not meet, no longer counts
    win = window_stall(rec, times), window_stall(base, times)
    return {"goodput_gbps": round(during, 3), "goodput_ratio": round(during / base_gbps, 3) if base_gbps else None,
            "window_stall_ms": round(win[0] * 1e3, 3), "no_fault_window_stall_ms": round(win[1] * 1e3, 3),
            "window_stall_excess_ms": round((win[0] - win[1]) * 1e3, 3),
            "goodput_ratio_after": round(recovered / base_gbps, 3) if base_gbps else None,
            "goodput_first_s_ratio": round(after_1s / before_1s, 3) if before_1s else None,
            "max_stall_ms": round(max(after) * 1e3, 3), "qp_errors": r["qp_errors"],
            "no_fault_gbps": round(base_gbps, 3),
            "no_fault_max_stall_ms": round(no_fault_stall * 1e3, 3),
            "stall_excess_ms": round((max(after) - no_fault_stall) * 1e3, 3),
            "gaps": gap_stats(rec, first), "no_fault_gaps": gap_stats(base, first),
            "fault_times_s": [round(x, 3) for x in times],
            "series_gbps": [round(b * 8 / BUCKET / 1e9, 3) for b in rec.buckets]}


def _args() -> argparse.Namespace:
    """The campaign's options."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print JSON only (progress goes to stderr)")
    ap.add_argument("--plots", metavar="DIR", help="write one PNG per scenario into DIR")
    ap.add_argument("--only", default=",".join(DEFAULT), help="scenarios to run, comma separated (default "
                    f"{','.join(DEFAULT)}; also b0, a control for b: the same flapping on a link this transfer "
                    "does not use)")
    ap.add_argument("--seed", type=int, default=7, help="seed of (i)'s random schedule (default 7)")
    ap.add_argument("--timeout", type=int, metavar="N", help="the MRC QPs' retransmit timer, 1.024 us x 2^N "
                                                             "(default: the engine's, 11 = 2.1 ms)")
    ap.add_argument("--seconds", type=float, default=6.0, help="length of a run (default 6; c and b are longer)")
    ap.add_argument("--flap-seconds", type=float, default=60.0, help="how long (b) flaps (default 60)")
    ap.add_argument("--msg", type=int, default=64 << 10, help="MRC WRITE size in bytes (default 64 KiB)")
    ap.add_argument("--no-kernel", action="store_true", help="MRC only (skip TCP and MPTCP)")
    ap.add_argument("--packets-per-buffer", type=int, choices=range(0, 9), default=1, metavar="K",
                    help="MRC's packets of a path per kernel buffer (0: as many as fit in 64 KiB; default 1)")
    fabric_args.add_routing(ap)
    ap.add_argument("--markdown", metavar="JSON", nargs="+",
                    help="print the markdown table of a saved --json run and exit; with several runs, the table "
                         "of their medians and spreads")
    import store  # bench/, beside this file

    store.add_argument(ap)
    return ap.parse_args()


def _proto_figures(t: Topology, p: str, sc: dict, s: dict, r: dict, b: dict, t0_ns: int, mss: int) -> int:
    """What a transport's run adds to its summary ``s``: MRC's counters, timelines, pauses and checked
    bytes; the kernel's retransmitted segments and errors. Returns the TCP MSS seen so far."""
    if p == "mrc":
        s["retransmitted_bytes"] = r["retransmitted_bytes"]
        s["losses"], s["timeouts"] = r["losses"], r["timeouts"]
        s["ev_timeline"] = r["timeline"]
        # [t, losses, timeouts, probes sent, packets resent, receiver rx-ring drops, sender tx errors,
        #  most timeouts in a row so far, most resends of the window's oldest packet so far]
        s["counter_timeline"] = r["counters"]
        s["ev_events"] = len(r["ev_events"])
        s.update(monitor_figures(r["pauses"], b["pauses"], s["gaps"]))
        s["corrupt_bytes"] = r["corrupt_bytes"] + b["corrupt_bytes"]
        s["verified_bytes"] = r["verified_bytes"] + b["verified_bytes"]
        if "bad_path" in sc:
            s["bad_path"] = bad_path_leave(r, t, sc["bad_path"], t0_ns)
    else:
        mss = r["mss"] or b["mss"] or mss
        s["retrans_segs"] = r["retrans_segs"]
        s["retransmitted_bytes"] = r["retrans_segs"] * mss
        s["errors"] = r["errors"]
    return mss


def _summary_line(s: dict) -> str:
    """One run's figures, for the progress log."""
    return (f"    goodput x{s['goodput_ratio']} (after x{s['goodput_ratio_after']}; no fault "
            f"{s['no_fault_gbps']} Gb/s), longest stall {s['max_stall_ms']} ms (no fault "
            f"{s['no_fault_max_stall_ms']}), errors {s['qp_errors']}, rtx {s['retransmitted_bytes']} B"
            + (f", the pause monitor was away {s['monitor_pause_in_longest_gap_ms']} ms of the longest gap"
               f" (a CPU's steal time then: {s['steal_in_longest_gap_ms']} ms)"
               if "monitor_pause_in_longest_gap_ms" in s else ""))


def _finish(out: dict, keep_series: bool) -> None:
    """Goodput against each scenario's control, and the long series dropped unless JSON is asked for."""
    for key, ctl in CONTROLS.items():
        # goodput against the control in which MRC never used the faulty paths
        r, c = out["scenarios"].get(key, {}).get("mrc"), out["scenarios"].get(ctl, {}).get("mrc")
        if r and c and r["goodput_ratio"] and c["goodput_ratio"]:
            r["vs_control"] = round(r["goodput_ratio"] / c["goodput_ratio"], 3)
    if not keep_series:
        for p in ("mrc", "tcp", "mptcp"):
            for r in out["scenarios"].values():
                r.get(p, {}).pop("series_gbps", None)
                r.get(p, {}).pop("ev_timeline", None)
                r.get(p, {}).pop("counter_timeline", None)


def _print_markdown(paths: list[str]) -> int:
    """The table of a saved run, or of several runs' medians and spreads."""
    outs = []
    for path in paths:
        with open(path) as f:
            outs.append(json.load(f))
    print(markdown(outs[0]) if len(outs) == 1 else spread(outs))
    return 0


def main() -> int:
    a = _args()
    import store  # bench/, beside this file

    if a.markdown:
        return _print_markdown(a.markdown)
    if os.geteuid() != 0:
        print("the fault campaign builds a fabric of namespaces: run it as root", file=sys.stderr)
        return 2
    exit_cleanly_on_sigterm()  # a killed run still removes its fabric
    t = Topology(name=f"fc{os.getpid() % 10000}")
    log = lambda *x: print(*x, file=sys.stderr, flush=True)  # noqa: E731
    want = [k for k in a.only.split(",") if k] if "," in a.only or len(a.only) <= 2 else list(a.only)
    bad = [k for k in want if k not in ALL]
    if bad:
        print(f"unknown scenario(s) {', '.join(bad)}: pick from {', '.join(ALL)}", file=sys.stderr)
        return 2
    protos = ["mrc"] if a.no_kernel else ["mrc", "tcp", "mptcp"]
    if a.plots:
        os.makedirs(a.plots, exist_ok=True)
    apply.up(t, routing=a.routing, bfd_ms=a.bfd_ms)
    try:
        apply.wire_sized(t)
        apply.host_gro(t)  # hosts receive with GRO, as a NIC driver does (bench/fabric_bench.py)
        if "mptcp" in protos:
            mptcp_setup(t, 0)
            mptcp_setup(t, t.hosts - 1)
        scs = scenarios(t, a.seconds, a.flap_seconds, a.seed)

        def run(proto, seconds, plan, port, deny=None):
            if proto == "mrc":
                r = run_mrc(t, seconds, plan, a.msg, deny=deny,
                            attr=QPAttr(timeout=a.timeout) if a.timeout is not None else None,
                            k=apply.packets_per_buffer(t, [t.host(0), t.host(t.hosts - 1)], a.packets_per_buffer))
                return r, r["t0_ns"]
            sport = bgp.sport_through(t, 0, t.hosts - 1, 0, 3, port) if a.routing == "bgp" else 0
            r = run_tcp(t, seconds, plan, IPPROTO_MPTCP if proto == "mptcp" else 0, port, sport)
            return r, int(r["t0"] * 1e9)

        port = 5300
        out: dict = {"fabric": {"planes": t.planes, "spines": t.spines, "leaves": t.leaves, "hosts": t.hosts,
                                "routing": a.routing, "bfd_ms": a.bfd_ms},
                     "msg_bytes": a.msg, "packets_per_buffer": a.packets_per_buffer, "scenarios": {}}
        mss = 0
        for key in want:
            sc = scs[key]
            res: dict = {"name": sc["name"], "desc": sc["desc"], "target": sc["target"]}
            if sc.get("idle"):
                log(f"({key}) {sc['desc']} ...")
                res["idle"] = run_idle(t, sc["seconds"], sc["plan"])
                apply.heal(t.name, None)
                log(f"    busy cores {res['idle']['cpu_busy_cores_before']} before, "
                    f"{res['idle']['cpu_busy_cores_after']} after")
                out["scenarios"][key] = res
                continue
            for p in protos if not sc.get("mrc_only") else ["mrc"]:
                # the no-fault run of the same length, just before: this machine's
                # rate drifts over minutes, so each fault run gets its own baseline
                port += 1
                log(f"({key}) {sc['desc']}: {p}, no fault ...")
                b, _ = run(p, sc["seconds"], [], port, sc.get("deny"))
                port += 1
                log(f"({key}) {sc['desc']}: {p}, with the fault ...")
                r, t0_ns = run(p, sc["seconds"], sc["plan"], port, sc.get("deny"))
                apply.heal(t.name, None)
                s = summarize(r, b["rec"], sc["seconds"], t0_ns)
                mss = _proto_figures(t, p, sc, s, r, b, t0_ns, mss)
                s["fault_markers"] = [(x, f["op"]) for x, f in zip(s["fault_times_s"], r["faults"], strict=True)]
                res[p] = s
                log(_summary_line(s))
            if a.plots and plot(os.path.join(a.plots, f"campaign_{key}.png"), key, sc, res):
                res["plot"] = os.path.join(a.plots, f"campaign_{key}.png")
            out["scenarios"][key] = res
        _finish(out, a.json)
        if a.save:
            store.save("fault_campaign", out, a.save, srv6=apply.srv6(t.name))
        print(json.dumps(out, indent=1) if a.json else table(out, protos))
        return 0
    finally:
        apply.down(t.name)


if __name__ == "__main__":
    sys.exit(main())
