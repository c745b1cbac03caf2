"""Failover in virtual time: the unchanged engine over the in-memory link,
with the figures of a real cluster, so the protocol's own speed is measured
without this VM's scheduling in the way.

Model: 8 planes x 4 paths (a plane's 4 spines), 1 us per hop and 4 hops
each way (host, T0, T1, T0, host), each plane's port 100 Gb/s (a path
carries a quarter: the host port, not the spine, is what one QP fills),
4 KiB packets, 64 KiB writes kept 64 deep. Each scenario runs twice with
the same seed: without the fault and with it, starting at the same instant
(FAULT_AT of virtual time); every byte lands in its own place and is
compared at the end.

Scenarios:
  path      one path (plane 2, path 1) dies for good
  plane     a whole plane (its 4 paths) dies for good
  flap      one path flaps: down half of every 1 ms
  loss1     1% random loss on every path of one plane
  loss20    20% random loss on one path
  all       every path dies: the QP must end with RETRY_EXC_ERR

Per scenario: max_gap_us (longest time between two completions from the
fault on), max_gap_rtts (over the base RTT), the no-fault run's max_gap_us
beside it, timeouts (retransmit timer expiries), losses (found by SACKs or
the timer), goodput_ratio (bytes completed from the fault to the end, fault
run over no-fault run), verified; for `all` the time from the fault to
RETRY_EXC_ERR and the retry budget it had.

    python bench/failover_sim.py [--json] [--only path,plane] [--ms 10]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time

from mrc.core import QPAttr
from mrc.manual import ManualContext
from mrc.simlink import Sim

PLANES, PER_PLANE = 8, 4
HOP_NS, HOPS = 1000, 4
PLANE_BPS = 100_000_000_000
MTU = 4096
MSG = 64 << 10
DEPTH = 64
SLOTS = 1024              # 64 MiB of ring per side
FAULT_AT = 2_000_000      # ns of virtual time before the fault
FOREVER = 1 << 62
BASE_RTT_NS = 2 * HOPS * HOP_NS
ECN_BYTES = 32 << 10      # a switch port marks CE above this queue
JITTER_NS = 500           # per packet, up to: paths are not all equally long
REORDER_NS = BASE_RTT_NS   # the reordering allowance: one base RTT

SCENARIOS = {
    "path": "one path dies",
    "plane": "a whole plane dies",
    "flap": "one path flaps every 1 ms",
    "loss1": "1% loss on one plane",
    "loss20": "20% loss on one path",
    "all": "every path dies",
}


def qp_attr() -> QPAttr:
    """What a NIC on this fabric would be given: the allowances scale with
    the base RTT (8 us), not with a VM's millisecond jitter."""
    return QPAttr(planes=PLANES, mtu=MTU, sq_depth=DEPTH, ev_count=128, ev_backup=16,
                  reorder_ns=REORDER_NS, skip_ns=2 * BASE_RTT_NS, probe_interval_ns=50_000,
                  timeout=7, linear_cnt=3, exp_cnt=3,
                  cc={"base_rtt": BASE_RTT_NS + 2000, "target_delay": BASE_RTT_NS,
                      "max_cwnd": PLANES * PLANE_BPS // 8 * (BASE_RTT_NS + 4000) // 1_000_000_000})


def fault(sim: Sim, name: str, at: int) -> None:
    p2 = [sim.path(2, i) for i in range(PER_PLANE)]
    if name == "path":
        sim.set_path(sim.path(2, 1), down_from_ns=at, down_until_ns=FOREVER)
    elif name == "plane":
        for p in p2:
            sim.set_path(p, down_from_ns=at, down_until_ns=FOREVER)
    elif name == "flap":
        sim.set_path(sim.path(2, 1), down_from_ns=at, down_until_ns=FOREVER, flap_period_ns=1_000_000)
    elif name == "loss1":
        for p in p2:
            sim.set_path(p, loss_ppm=10_000)
    elif name == "loss20":
        sim.set_path(sim.path(2, 1), loss_ppm=200_000)
    elif name == "all":
        sim.set_all(down_from_ns=at, down_until_ns=FOREVER)


def run(name: str | None, run_ns: int, seed: int = 1) -> dict:
    """One transfer for FAULT_AT + run_ns of virtual time; the fault ``name``
    (None: none) strikes at FAULT_AT. Completion times are exact: the link
    stops at every completion."""
    sim = Sim(PLANES, PER_PLANE, seed=seed)
    a, b = ManualContext(planes=PLANES, seed=2 * seed + 1), ManualContext(planes=PLANES, seed=2 * seed + 2)
    qa, qb = sim.connect(a, b, qp_attr())
    sim.set_port_rate(PLANE_BPS)
    sim.set_all(delay_ns=HOPS * HOP_NS, jitter_ns=JITTER_NS, rate_bps=PLANE_BPS, ecn_queue_bytes=ECN_BYTES)
    if name and name not in ("loss1", "loss20"):
        fault(sim, name, FAULT_AT)
    end = FAULT_AT + run_ns
    # a ring of slots far deeper than the send queue; each message's bytes
    # are compared when it completes and its slot is zeroed for the next
    src = bytearray(hashlib.shake_256(seed.to_bytes(4, "little")).digest(SLOTS * MSG))
    dst = bytearray(len(src))
    ms, md = a.reg_mr(src), b.reg_mr(dst, remote_write=True)
    posted = done = 0
    times: list[int] = []
    failed = None
    corrupt = 0
    loss_set = name not in ("loss1", "loss20")
    while sim.now < end:
        while posted - done < DEPTH:
            off = (posted % SLOTS) * MSG
            qa.post_write(ms, off, MSG, md.addr + off, md.rkey, wr_id=posted)
            posted += 1
        if not loss_set and sim.now >= FAULT_AT:
            fault(sim, name, FAULT_AT)
            loss_set = True
        sim.run(end if loss_set else FAULT_AT, stop_on_cqe=True)
        for wc in a.poll_cq():
            if wc.status != 0:
                failed = failed or {"status": wc.status_name, "at_ns": sim.now, "wr_id": wc.wr_id}
            else:
                times.append(sim.now)
                off = (wc.wr_id % SLOTS) * MSG
                if dst[off:off + MSG] != src[off:off + MSG]:
                    corrupt += 1
                dst[off:off + MSG] = bytes(MSG)
            done += 1
        if failed:
            break
    st = qa.stats()
    for ctx in (a, b):
        ctx.close()
    sim.close()
    return {"times": times, "stats": st, "failed": failed, "corrupt_messages": corrupt}


def retry_budget_ns(attr: QPAttr) -> int:
    """The longest a QP that hears nothing back may live: one retransmit
    timeout per retry, linear_cnt of them at 1.024 us x 2^timeout, then
    doubling, until the retries run out (csrc/core/completer.c, rto_ns)."""
    a = attr.to_c()
    base = 1024 << a.timeout
    return sum(base if r < a.linear_cnt else base << min(r - a.linear_cnt + 1, 16)
               for r in range(a.linear_cnt + a.exp_cnt + 1))


def gaps_after(times: list[int], t: int) -> list[int]:
    prev = t
    out = []
    for x in times:
        if x < t:
            continue
        out.append(x - prev)
        prev = x
    return out


def bytes_between(times: list[int], a: int, b: int) -> int:
    return MSG * sum(1 for x in times if a <= x < b)


def scenario(name: str, run_ns: int, seed: int = 1) -> dict:
    base = run(None, run_ns, seed)
    r = run(name, run_ns, seed)
    end = FAULT_AT + run_ns
    g, g0 = gaps_after(r["times"], FAULT_AT), gaps_after(base["times"], FAULT_AT)
    out = {
        "desc": SCENARIOS[name],
        "base_rtt_us": BASE_RTT_NS / 1000,
        "max_gap_us": round(max(g, default=0) / 1000, 2),
        "max_gap_rtts": round(max(g, default=0) / BASE_RTT_NS, 2),
        "nofault_max_gap_us": round(max(g0, default=0) / 1000, 2),
        "timeouts": r["stats"]["timeouts"],
        "losses": r["stats"]["losses"],
        "retransmits": r["stats"]["rtx_packets"],
        "goodput_gbps": round(bytes_between(r["times"], FAULT_AT, end) * 8 / run_ns, 2),
        "nofault_goodput_gbps": round(bytes_between(base["times"], FAULT_AT, end) * 8 / run_ns, 2),
        "corrupt_messages": r["corrupt_messages"] + base["corrupt_messages"],
        "qp_errors": int(r["failed"] is not None),
    }
    out["goodput_ratio"] = round(out["goodput_gbps"] / out["nofault_goodput_gbps"], 4) \
        if out["nofault_goodput_gbps"] else 0.0
    # a dead plane takes its port's share with it: what is left, used in full, is 1.0
    surviving = {"plane": (PLANES - 1) / PLANES}.get(name, 1.0)
    if out["nofault_goodput_gbps"]:
        out["goodput_vs_surviving"] = round(out["goodput_ratio"] / surviving, 4)
    if name == "all":
        budget = retry_budget_ns(qp_attr()) / 1000
        out["error"] = r["failed"]["status"] if r["failed"] else None
        out["time_to_error_us"] = round((r["failed"]["at_ns"] - FAULT_AT) / 1000, 1) if r["failed"] else None
        # the budget runs from the QP's last progress: its last completion
        last = max([t for t in r["times"] if t <= r["failed"]["at_ns"]], default=0) if r["failed"] else 0
        out["error_after_last_progress_us"] = round((r["failed"]["at_ns"] - last) / 1000, 1) if r["failed"] else None
        # (each timer fires at the first event at or after its due time: one base RTT of slack)
        out["within_budget"] = bool(r["failed"]) and \
            r["failed"]["at_ns"] - last <= retry_budget_ns(qp_attr()) + BASE_RTT_NS
        out["retry_budget_us"] = round(budget, 1)
        out["qp_errors"] = 0 if out["error"] == "RETRY_EXC_ERR" else 1
        for k in ("max_gap_us", "max_gap_rtts", "goodput_ratio", "goodput_vs_surviving"):
            out.pop(k)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--only", default=",".join(SCENARIOS), help="scenarios, comma separated")
    ap.add_argument("--ms", type=float, default=10.0, help="virtual milliseconds after the fault (default 10)")
    ap.add_argument("--seed", type=int, default=1)
    import store  # bench/, beside this file

    store.add_argument(ap)
    a = ap.parse_args()
    names = [s for s in a.only.split(",") if s]
    bad = [s for s in names if s not in SCENARIOS]
    if bad:
        ap.error(f"unknown scenario(s) {', '.join(bad)}: pick from {', '.join(SCENARIOS)}")
    out = {"model": {"planes": PLANES, "paths_per_plane": PER_PLANE, "hop_ns": HOP_NS, "hops": HOPS,
                     "plane_gbps": PLANE_BPS / 1e9, "mtu": MTU, "msg_bytes": MSG, "depth": DEPTH,
                     "virtual_ms": a.ms, "seed": a.seed}, "scenarios": {}}
    t0 = time.perf_counter()
    for n in names:
        out["scenarios"][n] = scenario(n, int(a.ms * 1e6), a.seed)
        if not a.json:
            print(n, json.dumps(out["scenarios"][n]), file=sys.stderr, flush=True)
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    if a.save:
        store.save("failover_sim", out, a.save)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
