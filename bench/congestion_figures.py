"""What a run of bench/congestion_bench.py comes to: each workload's figures from the flows' results, the
switch ports' counters and the queue samples (utilization, fairness, p99 against the ideal, marks, trims,
drops), the widened NIC of the victim's control, the rounds' medians and spreads, and the plots."""

from __future__ import annotations

import statistics
import sys

from mrc.fabric import qos
from mrc.units import percentile

SECURED = ("mrc_auth", "mrc_encrypt")  # authenticated MRC: asked for by name (--transports mrc,mrc_auth)


def log(*a) -> None:
    print(*a, file=sys.stderr, flush=True)


def wide_nic(t, host: str, samples: list, a) -> dict:
    """The control's NIC as the kernel held it in the run: each port's rate,
    and what the ports sent, on average over the steady window and at most
    over any 250 ms of it (a machine that stalls for part of a run lowers the
    average, never what the ports let through at their best)."""
    steady = [(ts, b) for ts, b in samples if a.seconds / 5 <= ts <= a.seconds]
    rates = [(b1 - b0) * 8 / (t1 - t0) for (t0, b0), (t1, b1) in zip(steady[:-5], steady[5:], strict=True)
             if t1 > t0]
    avg = (steady[-1][1] - steady[0][1]) * 8 / (steady[-1][0] - steady[0][0]) if len(steady) > 1 else 0.0
    return {"host": host, "rates_bps": [c["rate_bps"] for c in qos.stats(t, host)],
            "sent_mbps": round(avg / 1e6, 2), "peak_250ms_mbps": round(max(rates, default=0.0) / 1e6, 2)}


def summarize(t, workload, transport, flows, results, before, after, samples, verified, a, q, pauses=()) -> dict:
    w0 = a.seconds / 5  # the steady window: after the first fifth
    span = a.seconds - w0
    good = {}
    lat, calm = [], []  # calm: the messages no pause of the machine and no CPU's steal overlapped
    for f in flows:
        r = results[f["id"]]
        done = [m for m in r["messages"] if w0 <= m[1] <= a.seconds]
        good[f["id"]] = len(done) * a.msg * 8 / span
        lat += [m[1] - m[0] for m in done]
        calm += [m[1] - m[0] for m in done if not any(p < m[1] and p + d > m[0] for p, d, _, _ in pauses)]
    cap_host = t.planes * q.rate_bps
    base_rtt = qos.unloaded_rtt_s(q.rate_bps)
    if workload == "alltoall":
        senders, capacity = t.hosts - 1, t.hosts * cap_host
        group = list(good)
    elif workload == "incast":
        senders, capacity = t.hosts - 1, cap_host
        group = list(good)
    else:
        senders, capacity = t.hosts - 2, cap_host
        group = [f["id"] for f in flows if f["dst"] == "h0"]
    into = sum(good[i] for i in group)
    xs = [good[i] for i in group]
    jain = sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs)) if any(xs) else 0.0
    key = {"marked", "trimmed", "dropped"}
    delta = {k: sum(b[k] for b in after) - sum(b[k] for b in before) for k in key}
    bottleneck = {"h0"} if workload != "alltoall" else {f"h{h}" for h in range(t.hosts)}
    peak = {}
    for _, snap in samples:
        for port, c in snap.items():
            peak[port] = max(peak.get(port, 0), c["backlog"])
    out = {
        "transport": transport, "flows": len(flows), "senders_per_receiver": senders,
        "goodput_mbps": {str(i): round(g / 1e6, 2) for i, g in good.items()},
        "utilization": round(into / capacity, 4), "jain": round(jain, 4),
        "p50_ms": round(percentile(lat, 0.5) * 1e3, 2), "p90_ms": round(percentile(lat, 0.9) * 1e3, 2),
        "p99_ms": round(percentile(lat, 0.99) * 1e3, 2), "max_ms": round(max(lat, default=0) * 1e3, 2),
        "ideal_p99_ms": round((a.msg * 8 * senders / cap_host + base_rtt) * 1e3, 2),
        "messages": len(lat),
        # the control for the VM's own cost: the machine's pauses in the run (the monitor
        # woke >= 10 ms late), the most steal time a CPU counted in a pause or a window of
        # 100 ms, and the p99 of the messages that none of those overlapped
        "machine_pauses": sum(w > 0 for _, _, w, _ in pauses),
        "machine_pause_max_ms": round(max((w for _, _, w, _ in pauses), default=0) * 1e3, 1),
        "machine_steal_max_ms": max((st for _, _, _, st in pauses), default=0.0),
        "p99_ms_unpaused": round(percentile(calm, 0.99) * 1e3, 2), "messages_unpaused": len(calm),
        "marks": delta["marked"], "trims": delta["trimmed"], "drops": delta["dropped"],
        "rtx_bytes": sum(r.get("stats", {}).get("rtx_bytes", 0) for r in results.values()),
        "sent_bytes": sum(r.get("stats", {}).get("tx_packets", 0) * 8192 for r in results.values()),
        **{name: sum(r.get("stats", {}).get(k, 0) for r in results.values())
           for name, k in (("timeouts", "timeouts"), ("losses", "losses"), ("ecn_echoes", "ecn_marks"),
                           ("trim_nacks", "trims"), ("probes", "probes_tx"))},
        "qp_errors": sum(bool(r.get("qp_error")) or bool(r.get("error")) for r in results.values()),
        "errors": [r["error"] for r in results.values() if r.get("error")][:3],
        "verified": verified,
        "bottleneck_peak_kb": {p: round(v / 1024, 1) for p, v in sorted(peak.items())
                               if p.split(":")[1] in bottleneck and v},
    }
    if transport.startswith("tcp"):  # each stream's plane (ECMP): streams on different planes share no link
        out["planes"] = {str(f["id"]): f["plane"] for f in flows}
        theirs = [f["plane"] for f in flows if f["id"] in group]
        out["receiver_ports_shared"] = len(set(theirs)) < len(theirs)
    if workload == "victim":
        victim = flows[-1]["id"]
        # h1's uplinks (--victim-nic-x times the rate) less its incast flow's share of h0, and at most
        # what its receiver's NIC takes
        fair = min(cap_host * a.victim_nic_x - cap_host / senders, cap_host)
        out["victim_mbps"] = round(good[victim] / 1e6, 2)
        out["victim_fair_share_ratio"] = round(good[victim] / fair, 4)
    out["_series"] = {"flows": {str(f["id"]): {"timeline": results[f["id"]]["timeline"],
                                               "cwnd": results[f["id"]]["cwnd"]} for f in flows},
                      "ports": [(ts, {p: c["backlog"] for p, c in snap.items() if p.split(":")[1] in bottleneck})
                                for ts, snap in samples]}
    return out


def plot(path: str, workload: str, runs: dict) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("--plots needs matplotlib (pip install matplotlib)")
        return False
    r = runs["mrc"]["_series"]
    fig, ax = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    for fid, s in r["flows"].items():
        tl = s["timeline"][::5]  # samples every 50 ms: goodput over 250 ms (messages complete whole)
        xs = [b[0] for b in tl[1:]]
        ys = [(b[1] - a_[1]) * 8 / max(1e-9, b[0] - a_[0]) / 1e6 for a_, b in zip(tl, tl[1:], strict=False)]
        ax[0].plot(xs, ys, label=f"flow {fid}", lw=0.8)
        ax[2].plot([c[0] for c in s["cwnd"]], [c[1] / 1024 for c in s["cwnd"]], lw=0.8)
    for port in sorted({p for _, snap in r["ports"] for p in snap}):
        ax[1].plot([ts for ts, snap in r["ports"]], [snap.get(port, 0) / 1024 for _, snap in r["ports"]], lw=0.8,
                   label=port)
    ax[0].set_ylabel("goodput Mbit/s")
    ax[1].set_ylabel("queue estimate KiB")
    ax[2].set_ylabel("NSCC window KiB")
    ax[2].set_xlabel("seconds")
    ax[0].legend(fontsize=6, ncol=4)
    ax[1].legend(fontsize=6, ncol=4)
    m = runs["mrc"]
    ax[0].set_title(f"MRC {workload}: utilization {m['utilization']}, Jain {m['jain']}, marks {m['marks']}, "
                    f"trims {m['trims']}, drops {m['drops']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def rounds_summary(rounds: list[dict], transports: list[str], ideal_ms: float) -> dict:
    """Alternated rounds (each a transport -> p99 in ms, None for a run that failed or was not
    verified): every transport's p99s, and MRC's p99 over each baseline's as the median of the
    rounds' ratios with their spread (a pair of runs here swings by a third: principle 4)."""
    out: dict = {"rounds": len(rounds), "p99_ms_rounds": {tr: [r.get(tr) for r in rounds] for tr in transports}}
    for tr in transports:
        if tr == "mrc":
            continue
        ratios = sorted(round(r["mrc"] / r[tr], 3) for r in rounds if r.get("mrc") and r.get(tr))
        if ratios:
            out[f"p99_vs_{tr}_median"] = round(statistics.median(ratios), 3)
            out[f"p99_vs_{tr}_spread"] = [ratios[0], ratios[-1]]
        theirs = [r[tr] for r in rounds if r.get(tr)]
        if theirs:
            out[f"ideal_vs_{tr}_median"] = round(ideal_ms / statistics.median(theirs), 3)
    for tr in set(transports) & set(SECURED):  # a secured mode's p99 over off's, round by round
        ratios = sorted(round(r[tr] / r["mrc"], 3) for r in rounds if r.get("mrc") and r.get(tr))
        if ratios:
            out[f"{tr[4:]}_over_off_p99_median"] = round(statistics.median(ratios), 3)
            out[f"{tr[4:]}_over_off_p99_spread"] = [ratios[0], ratios[-1]]
    mine = [r["mrc"] for r in rounds if r.get("mrc")]
    if mine:
        out["p99_ms_median"] = round(statistics.median(mine), 2)
        out["p99_over_ideal_median"] = round(statistics.median(mine) / ideal_ms, 3) if ideal_ms else None
    return out
