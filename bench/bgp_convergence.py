"""How fast the BGP fabric's kernel traffic recovers from each fault the
fault scheduler makes, on the default fabric (8 planes x 4 spines x 2
leaves, 4 hosts) built with --routing bgp (FRR: eBGP, ECMP, BFD at 50 ms x 3).

For every event a probe stream (mrc.fabric.probe: 16 UDP flows, one packet
per flow every 2 ms, so the ECMP hash spreads them over every spine) runs from
h0 (leaf 0) to h3 (leaf 1) over the fault's plane. Per event:
  loss_window_ms  the longest gap any flow saw (from the last probe before
                  a loss to the first after it, by send time)
  flows_hit       how many of the 16 flows lost anything
  detect_ms       from the fault to the first BGP session down in the
                  plane's switch logs (FRR's %ADJCHANGE line, ms stamps)
  reconverged_after_heal_s  from the heal to every route through every
                  spine again (the probes run until then, and 0.3 s more)
Faults, rotated over planes and spines, each healed before the next event
(and the fabric back to every route through every spine):
  link-cut   a T0-T1 link down for 1 s; alternately leaf 0's uplink (the
             probes' sending side: the leaf drops the dead next hop itself)
             and leaf 1's (the far side: only BGP tells leaf 0)
  t1-reboot  a spine, every link down, for 2 s
  flap       a T0-T1 link down 0.5 s (the far side), then up
  plane-cut  every spine of the plane down for 1 s: single-plane kernel
             traffic has no other path, so its window is the cut itself
             (what MPTCP or striping over planes is for)
  silent     a spine stops receiving from leaf 0, the probes' side, for 4 s
             (nftables at its ingress, no carrier change): only BFD, or BGP's
             hold time, can see it
Per fault: the median and max of loss_window_ms and detect_ms over the
events. `fabric.frr_cpu`: the CPU the switches' daemons take on the idle
fabric (% of one core, per daemon, all switches together): what emulating
the switches' control plane costs this machine's hosts. Then the control
(`no_bfd`, unless --no-control): the same faults on the same fabric's shape
built again without BFD, where a session ends only when a link loses its
carrier or at BGP's 3 s hold time. It shows what
BFD buys (the silent link) and what it does not (every fault that takes a
carrier down), which is why the other benches' BGP fabrics run without it.

    python bench/bgp_convergence.py --json [--events 5] [--save bench/results]

Needs root and FRR (tools/setup.sh installs it).
"""
from __future__ import annotations

import argparse
import calendar
import json
import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mrc.fabric import apply, bgp, ns  # noqa: E402
from mrc.fabric.probe import ProbeStream  # noqa: E402
from mrc.fabric.topology import Topology  # noqa: E402
from mrc.signals import exit_cleanly_on_sigterm  # noqa: E402

FAULTS = ("link-cut", "t1-reboot", "flap", "plane-cut", "silent")
DOWN_S = {"link-cut": 1.0, "t1-reboot": 2.0, "flap": 0.5, "plane-cut": 1.0, "silent": 4.0}
SILENT = ('table netdev mrcsilent {\n chain cut {\n'
          '  type filter hook ingress device "l0" priority 0; policy drop;\n }\n}\n')
LOG_LINE = re.compile(r"^(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{3}) .*%ADJCHANGE: .* Down")


def log(msg: str) -> None:
    print(f"bgp_convergence: {msg}", file=sys.stderr, flush=True)


def target(t: Topology, fault: str, k: int) -> tuple[int, str]:
    """The plane and the element of event ``k`` of ``fault``."""
    p, s = k % t.planes, (k // t.planes + k) % t.spines
    if fault == "link-cut":
        return p, f"{t.leaf(p, k % 2)}-{t.spine(p, s)}"
    if fault == "flap":
        return p, f"{t.leaf(p, 1)}-{t.spine(p, s)}"
    if fault in ("t1-reboot", "silent"):
        return p, t.spine(p, s)
    return p, ",".join(t.spine(p, x) for x in range(t.spines))


def first_down_after(t: Topology, plane: int, since: float) -> float | None:
    """Seconds from ``since`` (wall clock) to the first session down logged by a switch of ``plane``."""
    first = None
    for node in [t.leaf(plane, i) for i in range(t.leaves)] + [t.spine(plane, s) for s in range(t.spines)]:
        try:
            with open(os.path.join(bgp.node_dir(t, node), "frr.log")) as f:
                lines = f.readlines()
        except OSError:
            continue
        for line in lines:
            m = LOG_LINE.match(line)
            if not m:
                continue
            stamp = m.group(1)
            when = calendar.timegm(time.strptime(stamp[:19], "%Y/%m/%d %H:%M:%S")) + float(stamp[19:])
            if when >= since and (first is None or when < first):
                first = when
    return None if first is None else first - since


def one_event(t: Topology, fault: str, k: int, bfd: bool = True) -> dict:
    """Run event ``k`` of ``fault`` under a probe stream; its figures."""
    plane, what = target(t, fault, k)
    elements = what.split(",")
    with ProbeStream(t, 0, t.hosts - 1, plane=plane, flows=16, interval_s=0.002, port=47000 + k % 500) as pr:
        time.sleep(0.5)
        wall = time.time()
        if fault == "silent":
            ns.command(t.ns(what), ["nft", "-f", "-"], input=SILENT, text=True, check=True)
        else:
            for e in elements:
                apply.fail(t.name, e)
        time.sleep(DOWN_S[fault])
        if fault == "silent":
            ns.command(t.ns(what), ["nft", "delete", "table", "netdev", "mrcsilent"], check=True)
        else:
            for e in elements:
                apply.heal(t.name, e)
        healed = time.monotonic()
        while bgp.missing_routes(t) and time.monotonic() - healed < 60:  # every route through every spine
            time.sleep(0.02)
        converged = time.monotonic() - healed
        bgp.wait_converged(t, timeout=60, bfd=bfd)  # and every session Established
        time.sleep(0.3)
    r = pr.result()
    detect = first_down_after(t, plane, wall)
    row = {"fault": fault, "plane": plane, "target": what, "down_s": DOWN_S[fault],
           "loss_window_ms": r["loss_window_ms"], "flows_hit": r["flows_with_loss"], "lost": r["lost"],
           "detect_ms": None if detect is None else round(detect * 1e3, 1),
           "reconverged_after_heal_s": round(converged, 2), "tail_lost": r["tail_lost"]}
    return row


def frr_cpu(t: Topology, seconds: float = 5.0) -> dict:
    """The CPU the fabric's routing daemons take while nothing happens: % of one core, per daemon
    kind (all switches together), from /proc over ``seconds``: what the emulation costs the hosts."""
    mark = os.path.join(bgp.RUN_DIR, t.name).encode()

    def ticks() -> dict[str, int]:
        out: dict[str, int] = {}
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if mark not in f.read():
                        continue
                with open(f"/proc/{pid}/stat") as f:
                    st = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{pid}/comm") as f:
                    comm = f.read().strip()
            except OSError:
                continue
            out[comm] = out.get(comm, 0) + int(st[11]) + int(st[12])  # utime + stime
        return out

    a = ticks()
    time.sleep(seconds)
    b = ticks()
    hz = os.sysconf("SC_CLK_TCK")
    return {k: round((b[k] - a.get(k, 0)) / hz / seconds * 100, 1) for k in sorted(b)}


def summarize(rows: list[dict]) -> dict:
    """Median and max of the loss windows and detection times of one fault's events."""
    win = [r["loss_window_ms"] for r in rows]
    det = [r["detect_ms"] for r in rows if r["detect_ms"] is not None]
    return {"events": len(rows), "loss_window_ms_median": round(statistics.median(win), 1),
            "loss_window_ms_max": max(win), "flows_hit_median": statistics.median(r["flows_hit"] for r in rows),
            "detect_ms_median": round(statistics.median(det), 1) if det else None,
            "detect_ms_max": max(det) if det else None, "rows": rows}


def campaign(faults: list[str], events: int, bfd_ms: int) -> tuple[dict, dict]:
    """Every fault's events on a default fabric with BGP and BFD every ``bfd_ms`` (0: none)."""
    t = Topology(name=f"bc{os.getpid() % 100000}")
    log(f"building {t.name} with BGP, " + (f"BFD every {bfd_ms} ms" if bfd_ms else "no BFD") + " ...")
    secs = apply.up(t, routing="bgp", bfd_ms=bfd_ms)
    out: dict = {}
    try:
        time.sleep(2)
        cpu = frr_cpu(t)
        log(f"the switches' daemons, idle fabric: {cpu} (% of one core)")
        for fault in faults:
            rows = []
            for k in range(events):
                rows.append(one_event(t, fault, k, bfd_ms > 0))
                log(f"{fault} {k + 1}/{events} on {rows[-1]['target']}: window {rows[-1]['loss_window_ms']} ms "
                    f"({rows[-1]['flows_hit']} of 16 flows), first session down {rows[-1]['detect_ms']} ms")
            out[fault] = summarize(rows)
    finally:
        apply.down(t.name)
    return out, {**t.to_dict(), "routing": "bgp", "bfd_ms": bfd_ms, "up_s": round(secs, 1),
                 "frr_cpu": cpu}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=5, help="events per fault (default 5)")
    ap.add_argument("--faults", default=",".join(FAULTS), help=f"which (default {','.join(FAULTS)})")
    ap.add_argument("--bfd-ms", type=int, default=bgp.BFD_INTERVAL_MS, metavar="MS",
                    help=f"BFD's interval (default {bgp.BFD_INTERVAL_MS})")
    ap.add_argument("--no-control", action="store_true", help="leave out the control run without BFD")
    ap.add_argument("--json", action="store_true", help="print one JSON object (progress on stderr)")
    import store  # bench/, beside this file

    store.add_argument(ap)
    a = ap.parse_args()
    faults = [f for f in a.faults.split(",") if f]
    bad = [f for f in faults if f not in FAULTS]
    if bad or not 1 <= a.events <= 50:
        ap.error(f"unknown fault {bad[0]!r}: use {', '.join(FAULTS)}" if bad else "--events is 1 to 50")
    apply.require_root("bench/bgp_convergence.py")
    exit_cleanly_on_sigterm()
    out: dict = {"bfd": {"interval_ms": a.bfd_ms, "detect_mult": bgp.BFD_DETECT_MULT},
                 "bgp_timers_s": [bgp.KEEPALIVE_S, bgp.HOLD_S], "probe": {"flows": 16, "interval_ms": 2.0}}
    out["faults"], out["fabric"] = campaign(faults, a.events, a.bfd_ms)
    if not a.no_control:
        out["no_bfd"], out["no_bfd_fabric"] = campaign(faults, a.events, 0)
    if a.save:
        store.save("bgp_convergence", out, a.save)
    print(json.dumps(out, indent=1) if a.json else json.dumps({f: {k: v for k, v in s.items() if k != "rows"}
                                                               for f, s in out["faults"].items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
