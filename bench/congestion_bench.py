"""Congestion on the fabric: incast, a victim flow and all-to-all, MRC against
kernel TCP (cubic with ECN, bbr) and MPTCP, on a fabric whose switch ports
queue, mark ECN, trim MRC data and drop (mrc fabric up --link-rate), and whose
kernel traffic is routed by FRR's BGP with ECMP (--routing bgp; static: the
SRv6 encap through one spine per host pair).

Every switch port runs at --rate (default 100 Mbit/s: a host's 8 planes then
carry 800 Mbit/s, far below what this 2-core VM forwards, so queues build at
the switches, not in the CPU). One process per fabric host
(``python -m mrc.tools.workload`` through ``mrc fabric exec``) runs that host's
flows; each flow writes one --msg message at a time (default 1 MiB) into the
next slot of its receiver's region and waits for its completion (TCP: for the
receiver's one-byte answer when the whole message is in), for --seconds.

Workloads (hosts h0..h(H-1)):
  incast    h1..h(H-1) -> h0: the bottleneck is h0's ports
  victim    incast h1..h(H-2) -> h0, plus a victim flow h1 -> h(H-1) that
            shares h1's uplinks with h1's incast flow
  alltoall  every host -> every other host, with the ports at --alltoall-rate
            (default --rate x 2 / hosts: the fabric then carries what an
            incast's receiver does, and the CPUs stay out of the way)

Per workload and transport: per flow goodput (messages completed in the
steady window, after the first fifth), message completion p50/p99 against
the ideal (msg x senders into the receiver / its capacity + base RTT),
utilization of the bottleneck, Jain's fairness index, switch marks, trims,
drops, retransmitted bytes, QP errors, every region's bytes verified by
SHA-256, and each host process's CPU share. Beside each baseline:
p99_vs_<baseline> (MRC's p99 over its) and ideal_vs_<baseline> (the ideal
over its p99: where a transport sharing the receiver fairly stands at best).

    python bench/congestion_bench.py --json                  # 4 hosts: incast 3:1, victim, all-to-all
    python bench/congestion_bench.py --hosts 8 --workloads incast --json   # 7:1
    python bench/congestion_bench.py --plots out/            # a PNG per workload (matplotlib)
    python bench/congestion_bench.py --workloads incast --rounds 3 --json   # A B C D A B C D A B C D:
                          # p99_vs_<baseline>_median and _spread over the rounds' ratios
    python bench/congestion_bench.py --workloads victim --victim-nic-x 2 --json   # the control: the
                          # victim's sender's NIC twice as fast, so that it is no longer shared at capacity

Needs root (it builds a fabric of namespaces) and clang + libbpf headers for
the switch queues (tools/setup.sh installs them).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import threading
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fabric_args  # noqa: E402  (bench/, beside this file)
from campaign_report import PauseMonitor  # noqa: E402  (bench/, beside this file)
from congestion_figures import SECURED, log, plot, rounds_summary, summarize, wide_nic  # noqa: E402

from mrc.errors import MrcError  # noqa: E402
from mrc.fabric import apply, baseline, ns, qos  # noqa: E402
from mrc.fabric.topology import Topology  # noqa: E402
from mrc.units import parse_rate, parse_size  # noqa: E402

TRANSPORTS = ("mrc", "tcp_cubic", "tcp_bbr", "mptcp")
WORKLOADS = ("incast", "victim", "alltoall")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def flows_of(workload: str, hosts: int) -> list[dict]:
    if workload == "incast":
        pairs = [(h, 0) for h in range(1, hosts)]
    elif workload == "victim":
        pairs = [(h, 0) for h in range(1, hosts - 1)] + [(1, hosts - 1)]
    elif workload == "alltoall":
        pairs = [(s, d) for s in range(hosts) for d in range(hosts) if s != d]
    else:
        raise SystemExit(f"unknown workload {workload!r}: use {', '.join(WORKLOADS)}")
    return [{"id": i, "src": f"h{s}", "dst": f"h{d}"} for i, (s, d) in enumerate(pairs)]


class Host:
    """One worker process inside a host's namespace."""

    def __init__(self, fabric: str, host: str) -> None:
        env = dict(os.environ, PYTHONPATH=ROOT)
        self.host = host
        self.p = subprocess.Popen([sys.executable, "-m", "mrc", "fabric", "exec", host, "--name", fabric, "--",
                                   sys.executable, "-m", "mrc.tools.workload"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env=env)

    def ask(self, obj: dict, timeout: float = 120) -> dict:
        self.p.stdin.write(json.dumps(obj) + "\n")
        self.p.stdin.flush()
        box: list = []
        th = threading.Thread(target=lambda: box.append(self.p.stdout.readline()), daemon=True)
        th.start()
        th.join(timeout)
        if not box or not box[0]:
            raise RuntimeError(f"{self.host}'s worker did not answer {sorted(obj)} (exit {self.p.poll()})")
        ans = json.loads(box[0])
        if "error" in ans:
            raise RuntimeError(f"{self.host}: {ans['error']}")
        return ans

    def close(self) -> None:
        try:
            if self.p.poll() is None:
                self.p.stdin.write(json.dumps({"bye": True}) + "\n")
                self.p.stdin.flush()
                self.p.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            self.p.kill()
            self.p.wait()


def _connect_all(hosts: dict, flows: list[dict], infos: dict) -> None:
    """Connect every end, in parallel: a TCP receiver accepts while its senders connect; an MRC QP sends
    nothing before the start."""
    threads = []
    for h, w in hosts.items():
        peers = {f["id"]: infos[f["id"]][f["dst"] if h == f["src"] else f["src"]] for f in flows
                 if h in (f["src"], f["dst"])}
        threads.append(threading.Thread(target=w.ask, args=({"connect": peers},), daemon=True))
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)


def _run_workers(hosts: dict, at: int, seconds: float) -> tuple[dict, dict, list]:
    """Every host's flows from ``at`` for ``seconds``: their results by flow, each host's CPU share, and the
    pause monitor's record (the control: when the machine kept even an idle process from running)."""
    results: dict = {}
    cpu: dict = {}
    lock = threading.Lock()

    def start(w):
        ans = w.ask({"start": {"at_ns": at, "seconds": seconds}}, timeout=seconds + 120)
        with lock:
            results.update({int(k): v for k, v in ans["result"].items()})
            cpu[w.host] = ans["cpu_share"]

    threads = [threading.Thread(target=start, args=(w,)) for w in hosts.values()]
    monitor = PauseMonitor()
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        pauses = [((p0 - at) / 1e9, d / 1e9, w / 1e9, st) for p0, d, w, st in monitor.stop()]
    return results, cpu, pauses


def _verified(hosts: dict, flows: list[dict], results: dict) -> bool:
    """Every region holds what its sender wrote (the slots it filled)."""
    ok = True
    for h, w in hosts.items():
        want = {f["id"]: results[f["id"]]["written"] for f in flows if f["dst"] == h}
        if want:
            got = w.ask({"hash": want})["hashes"]
            ok &= all(got[str(k)] == results[k]["sha256"] for k in want)
    return ok


def run_once(t: Topology, workload: str, transport: str, a, q: qos.PortQoS, reader: qos.PortReader) -> dict:
    flows = flows_of(workload, t.hosts)
    for f in flows:  # TCP: one stream per pair, on the plane a hash of its addresses and ports picks (ECMP)
        s, d, port = int(f["src"][1:]), int(f["dst"][1:]), 21000 + f["id"]
        plane = zlib.crc32(f"{s}/{d}/{port}".encode()) % t.planes
        f.update(addr=t.inner_address(d, plane), port=port, plane=plane)
    names = sorted({f["src"] for f in flows} | {f["dst"] for f in flows}, key=lambda h: int(h[1:]))
    prof = qos.qp_profile(q.rate_bps, t.planes, q=q)
    prof["cc"].update(a.cc)
    # the control --victim-nic-x: the victim's sender's NIC (its qdiscs, and MRC's pacing) that much faster
    wide = flows[-1]["src"] if workload == "victim" and a.victim_nic_x != 1 else None
    wide_ports = qos.ports(t, wide)[1] if wide and not a.no_nic_rate else []  # (--no-nic-rate: no rate to widen)
    wide_reader = out = None
    hosts = {h: Host(t.name, h) for h in names}
    try:
        # MRC's ports send at the NIC's rate, as a NIC's do: its packets wait in their QPs, not in the
        # host port's qdisc (NSCC would count that queue as the network's)
        pace = 0 if a.no_nic_rate or a.no_pacing else q.rate_bps
        if wide_ports:
            qos.apply_ports(t, wide_ports, qos.PortQoS(round(q.rate_bps * a.victim_nic_x)))
            wide_reader = qos.PortReader(t, wide_ports)  # what the widened NIC sent, sampled with the rest
        setup = {"transport": transport, "msg": a.msg, "slots": 4, "flows": flows, "qp": prof, "port_rate_bps": pace,
                 "spin_us": a.spin_us}
        infos: dict = {}
        for h, w in hosts.items():
            mine = {"port_rate_bps": round(pace * a.victim_nic_x)} if h == wide else {}
            for k, v in w.ask({"setup": {**setup, "host": h, **mine}})["infos"].items():
                infos.setdefault(int(k), {})[h] = v
        _connect_all(hosts, flows, infos)
        before = apply.queue_stats(t.name)
        at = time.monotonic_ns() + 300_000_000
        samples: list = []
        wide_samples: list = []  # (seconds, bytes the widened NIC's ports have sent)
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                ts = round((time.monotonic_ns() - at) / 1e9, 3)
                samples.append((ts, reader.read()))
                if wide_reader:
                    wide_samples.append((ts, sum(c["bytes"] for c in wide_reader.read().values())))
                time.sleep(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        results, cpu, pauses = _run_workers(hosts, at, a.seconds)
        stop.set()
        sampler.join()
        after = apply.queue_stats(t.name)
        verified = _verified(hosts, flows, results)
        out = summarize(t, workload, transport, flows, results, before, after, samples, verified, a, q, pauses)
        out["cpu_share"] = dict(sorted(cpu.items(), key=lambda kv: int(kv[0][1:])))
        if wide_ports:
            out["wide_nic"] = wide_nic(t, wide, wide_samples, a)
        return out
    finally:
        for w in hosts.values():
            w.close()
        if wide_reader:
            wide_reader.close()
        if wide_ports:  # the fabric's rate again, and the JSON says the kernel holds it
            qos.apply_ports(t, wide_ports, qos.nic(q))
            if out and "wide_nic" in out:
                out["wide_nic"]["rates_after_bps"] = [c["rate_bps"] for c in qos.stats(t, wide)]


def cc_problem(cc: dict, planes: int) -> str | None:
    """What the engine says of --cc, from a QP made with it on a context of its own (an unknown
    name, a value out of its range: md_by_sample 2, a negative one), before anything is built."""
    from mrc.manual import ManualContext
    from mrc.verbs import QPAttr

    try:
        with ManualContext(planes=planes) as ctx:
            ctx.create_qp(QPAttr(planes=planes, cc=dict(cc)))
    except (MrcError, AttributeError, OverflowError, TypeError) as e:
        return f"--cc {' '.join(f'{k}={v}' for k, v in cc.items())}: the engine refuses it ({e})"
    return None


def check_args(a, workloads: list[str]) -> str | None:
    """What is wrong with the command line, in a sentence (before anything is built)."""
    bad = [w for w in workloads if w not in WORKLOADS]
    if bad or not workloads:
        return f"unknown workload {', '.join(bad) or '(none)'}: use {', '.join(WORKLOADS)}"
    if a.hosts < 2 or ("victim" in workloads and a.hosts < 4):
        return "incast needs at least 2 hosts, the victim workload 4 (2 incast senders, a victim's receiver)"
    if a.seconds <= 0 or a.msg <= 0:
        return "--seconds and --msg must be positive"
    if not 0 <= a.spin_us <= 1_000_000:
        return f"--spin-us {a.spin_us}: from 0 (sleep at once) to 1000000"
    if not 1 <= a.victim_nic_x <= 16:
        return f"--victim-nic-x {a.victim_nic_x}: from 1 (as every NIC) to 16"
    if a.victim_nic_x != 1 and "victim" not in workloads:
        return "--victim-nic-x goes with the victim workload (--workloads victim)"
    try:
        qos.PortQoS(parse_rate(a.rate), a.ecn_kb, a.trim_kb, a.buffer_kb).check()
        if a.alltoall_rate:
            qos.PortQoS(parse_rate(a.alltoall_rate)).check()
    except MrcError as e:
        return str(e)
    return None


def workload_qos(workload: str, t: Topology, q: qos.PortQoS, a) -> qos.PortQoS:
    """All-to-all loads every host's ports at once: at --rate the fabric
    would carry hosts x planes x rate, and this machine's two cores (which
    forward every packet and run every engine) become the bottleneck. Its
    ports run at --alltoall-rate (default: --rate x 2 / hosts, so the fabric
    carries what an incast's receiver does)."""
    if workload != "alltoall":
        return q
    rate = parse_rate(a.alltoall_rate) if a.alltoall_rate else q.rate_bps * 2 // t.hosts
    return qos.PortQoS(rate, q.ecn_kb, q.trim_kb, q.buffer_kb)


def idle_cpu(t: Topology, a, seconds: float = 2.0) -> float:
    """The CPU share of a host process whose context has no traffic: its
    engine thread must sleep, not spin (two cores serve 8 hosts here)."""
    w = Host(t.name, "h0")
    try:
        w.ask({"setup": {"transport": "mrc", "msg": a.msg, "flows": [], "host": "h0", "spin_us": a.spin_us}})
        w.ask({"connect": {}})
        return w.ask({"start": {"at_ns": time.monotonic_ns() + 200_000_000, "seconds": seconds}})["cpu_share"]
    finally:
        w.close()


def build(a) -> tuple[Topology, qos.PortQoS]:
    t = Topology(planes=a.planes, spines=a.spines, leaves=a.leaves, hosts=a.hosts,
                 name=f"cg{secrets.token_hex(3)}")
    q = qos.PortQoS(parse_rate(a.rate), a.ecn_kb, a.trim_kb, a.buffer_kb).check()
    apply.up(t, routing=a.routing, bfd_ms=a.bfd_ms)
    try:
        apply.wire_sized(t)  # switches forward wire-size packets (TCP's GSO super-packets are cut at the leaf)
        apply.set_queues(t.name, None, q)
        if a.no_nic_rate:  # the control: hosts send at whatever rate their CPU manages
            qos.apply_ports(t, qos.ports(t)[1], qos.PortQoS(0))
        for h in range(t.hosts):
            ns.command(t.ns(t.host(h)), ["sysctl", "-qw", "net.ipv4.tcp_ecn=1"], check=True)
            baseline.mptcp_setup(t, h)
    except BaseException:  # the fabric goes with the failure
        apply.down(t.name)
        raise
    return t, q


def _args() -> argparse.Namespace:
    """The bench's options."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print one JSON object (progress on stderr)")
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--planes", type=int, default=8)
    ap.add_argument("--spines", type=int, default=4)
    ap.add_argument("--leaves", type=int, default=2)
    ap.add_argument("--rate", default="100mbit", help="every switch port's rate (default 100mbit)")
    ap.add_argument("--alltoall-rate", help="the ports' rate during all-to-all (default: --rate x 2 / hosts)")
    ap.add_argument("--ecn-kb", type=int, default=32)
    ap.add_argument("--trim-kb", type=int, default=96)
    ap.add_argument("--buffer-kb", type=int, default=1024)
    ap.add_argument("--msg", type=parse_size, default=1 << 20, help="message size (default 1M)")
    ap.add_argument("--seconds", type=float, default=5.0, help="length of each run (default 5)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--transports", default=",".join(TRANSPORTS),
                    help=f"of {','.join(TRANSPORTS + SECURED)} (default {','.join(TRANSPORTS)}); MRC's modes "
                         "alone (mrc,mrc_auth,mrc_encrypt) are saved as congestion_bench_security")
    ap.add_argument("--plots", metavar="DIR", help="write a PNG per workload into DIR")
    ap.add_argument("--no-nic-rate", action="store_true",
                    help="a control: leave the hosts' ports unlimited (only the switch ports queue)")
    ap.add_argument("--no-pacing", action="store_true",
                    help="a control: MRC's engine sends as fast as it is asked, not at its ports' rate "
                         "(its packets then queue in the hosts' qdiscs)")
    ap.add_argument("--spin-us", type=int, default=0, metavar="US",
                    help="how long an idle MRC engine polls before it sleeps (default 0 here, the engine's own "
                         "default 200: this machine's two cores also forward every packet of the fabric, and "
                         "engines that poll between packets take their time; README, congestion)")
    ap.add_argument("--victim-nic-x", type=float, default=1.0, metavar="X",
                    help="a control for the victim workload: the victim's sender (whose NIC carries its incast "
                         "flow and the victim) gets ports X times --rate (its qdiscs and MRC's pacing), so that "
                         "its NIC is no longer full; what unfairness stays between the flows into h0 is then "
                         "the network's and the transport's (default 1; README, congestion)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the transports this many times in turn (mrc, tcp_cubic, ..., mrc, ...) and report "
                         "each p99 ratio as the median of the rounds' ratios, with their spread (default 1)")
    ap.add_argument("--cc", action="append", default=[], metavar="NAME=VALUE",
                    help="an NSCC parameter for every MRC QP (struct mrc_cc_params), e.g. gamma=400; repeatable")
    import store  # bench/, beside this file

    fabric_args.add_routing(ap)
    store.add_argument(ap)
    return ap.parse_args()


def _problem(a) -> tuple[str | None, list[str], list[str]]:
    """What is wrong with the options (None: nothing), and the workloads and transports they ask for."""
    try:
        a.cc = {k: int(v) for k, v in (x.split("=", 1) for x in a.cc)}
    except ValueError:
        return "--cc takes NAME=INTEGER, e.g. --cc gamma=400", [], []
    problem = cc_problem(a.cc, a.planes) if a.cc else None
    if problem:
        return problem, [], []
    if os.geteuid() != 0:
        return "needs root (it builds a fabric of namespaces)", [], []
    workloads = [w for w in a.workloads.split(",") if w]
    transports = [x for x in a.transports.split(",") if x]
    for x in transports:
        if x not in TRANSPORTS + SECURED:
            return f"unknown transport {x!r} (use {', '.join(TRANSPORTS + SECURED)})", [], []
    problem = check_args(a, workloads) or (None if 1 <= a.rounds <= 20 else f"--rounds {a.rounds}: 1 to 20")
    return problem, workloads, transports


def _workload_result(runs: dict, rounds: list[dict], transports: list[str], a) -> dict:
    """A workload's entry: the MRC run's figures at the top, the baselines beside them, MRC's p99 against
    each, and with several rounds the median of the rounds' ratios."""
    res = {tr: {k: v for k, v in r.items() if k != "_series"} for tr, r in runs.items()}
    mrc = res.get("mrc")
    if mrc:  # the MRC run's keys at the top, the baselines beside them
        res = {**mrc, **{tr: r for tr, r in res.items() if tr != "mrc"}}
        for tr in transports:
            if tr != "mrc" and runs[tr]["p99_ms"]:
                res[f"p99_vs_{tr}"] = round(mrc["p99_ms"] / runs[tr]["p99_ms"], 3)
                # where a fair share's p99 stands against theirs: each flow's message
                # takes the ideal time when the receiver is shared equally, so no
                # fair transport's p99_vs can go far below this
                res[f"ideal_vs_{tr}"] = round(mrc["ideal_p99_ms"] / runs[tr]["p99_ms"], 3)
        if a.rounds > 1:
            res |= rounds_summary(rounds, transports, mrc["ideal_p99_ms"])
    return res


def main() -> int:
    a = _args()
    import store  # bench/, beside this file

    problem, workloads, transports = _problem(a)
    if problem:
        print(f"congestion_bench: {problem}", file=sys.stderr)
        return 2
    t, q = build(a)
    out = {"cc": a.cc, "routing": a.routing, "bfd_ms": a.bfd_ms, "spin_us": a.spin_us, "nic_rate": not a.no_nic_rate,
           "victim_nic_x": a.victim_nic_x,
           "pacing": not (a.no_nic_rate or a.no_pacing), "rate_bps": q.rate_bps, "ecn_kb": q.ecn_kb,
           "trim_kb": q.trim_kb, "buffer_kb": q.buffer_kb,
           "hosts": t.hosts, "planes": t.planes, "msg": a.msg, "seconds": a.seconds, "workloads": {},
           "srv6": apply.srv6(t.name)}
    reader = qos.PortReader(t, qos.switch_ports(t))
    cur = q
    try:
        out["idle_engine_cpu_share"] = idle_cpu(t, a)
        log(f"an idle MRC context (engine thread, no traffic) takes {out['idle_engine_cpu_share']} of a CPU")
        for wl in workloads:
            wq = workload_qos(wl, t, q, a)
            if wq != cur:
                log(f"{wl}: switch ports at {wq.rate_bps / 1e6:g} Mbit/s")
                apply.set_queues(t.name, None, wq)
                cur = wq
                if a.no_nic_rate:
                    qos.apply_ports(t, qos.ports(t)[1], qos.PortQoS(0))
            runs, rounds = {}, []  # runs: the first round's, in full; rounds: every round's p99 per transport
            for i in range(a.rounds):
                p99 = {}
                for tr in transports:
                    log(f"{wl} / {tr} ..." + (f" (round {i + 1} of {a.rounds})" if a.rounds > 1 else ""))
                    r = run_once(t, wl, tr, a, wq, reader)
                    runs.setdefault(tr, r)
                    p99[tr] = r["p99_ms"] if r["verified"] and not r["qp_errors"] else None
                    log(f"  utilization {r['utilization']}  jain {r['jain']}  p99 {r['p99_ms']} ms "
                        f"(ideal {r['ideal_p99_ms']})  marks {r['marks']}  trims {r['trims']}  drops {r['drops']}  "
                        f"verified {r['verified']}  errors {r['qp_errors']}"
                        + (f"  victim {r['victim_fair_share_ratio']}" if "victim_fair_share_ratio" in r else ""))
                rounds.append(p99)
            if a.plots and "mrc" in runs:
                os.makedirs(a.plots, exist_ok=True)
                png = os.path.join(a.plots, f"congestion_{wl}.png")
                if plot(png, wl, runs):
                    runs["mrc"]["plot"] = png
            res = _workload_result(runs, rounds, transports, a)
            res["rate_bps"] = wq.rate_bps
            out["workloads"][wl] = res
    finally:
        reader.close()
        apply.down(t.name)
    if a.save:  # MRC's modes alone (mrc,mrc_auth,...): authenticated MRC's run, kept apart
        name = "congestion_bench_security" if set(transports) <= {"mrc", *SECURED} and len(transports) > 1 else \
            "congestion_bench"
        store.save(name, out, a.save, srv6=out.get("srv6"))
    if a.json:
        print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
