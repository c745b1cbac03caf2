"""``mrc fabric``: build, check, break and remove a multi-plane SRv6 fabric."""

from __future__ import annotations

import argparse
import json
import os
import sys

from mrc.errors import UsageError
from mrc.fabric.topology import MAX_INDEX, MAX_PLANES
from mrc.tools import args
from mrc.tools.args import KB
from mrc.units import bounded, parse_rate, rate_type


def add_parser(sub) -> None:
    """``mrc fabric``'s subcommands and their options."""
    fab = sub.add_parser("fabric", help="build, check, break and remove a multi-plane SRv6 fabric",
                         description="A fabric of P independent planes (each a 2-tier Clos of T0 leaves and T1 "
                                     "spines) built from network namespaces and veth pairs; switches forward MRC "
                                     "with the kernel's SRv6 End next-CSID (uSID) behaviour and static routes, and "
                                     "the kernel's own traffic with static routes or, with `up --routing bgp`, "
                                     "FRR's BGP. "
                                     "Nodes are hosts h0.., leaves p<plane>l<i>, spines p<plane>s<i>; links are "
                                     "named <lower>-<upper>, e.g. h0-p0l0 or p0l0-p0s1.")
    fsub = fab.add_subparsers(dest="fcmd")
    _build_parsers(fsub)
    _fault_parsers(fsub)
    _queue_parsers(fsub)
    fab.set_defaults(run=run, parser=fab)


def _build_parsers(fsub) -> None:
    """Building, seeing and entering a fabric."""
    p = fsub.add_parser("up", help="build a fabric",
                        description="Build a fabric: namespaces, veths (MTU 9000), addresses, sysctls, uSID routes, "
                                    "kernel-traffic encap routes and the management bridge.")
    args.name_arg(p)
    p.add_argument("--planes", type=bounded(int, 1, MAX_PLANES),
                   default=8, help="independent network planes (default 8, max 16)")
    p.add_argument("--spines", type=bounded(int, 1, MAX_INDEX),
                   default=4, help="T1 spine switches per plane (default 4)")
    p.add_argument("--leaves", type=bounded(int, 1, MAX_INDEX),
                   default=2, help="T0 leaf switches per plane (default 2)")
    p.add_argument("--hosts", type=bounded(int, 2, MAX_INDEX),
                   default=4, help="hosts, spread over the leaves (default 4)")
    p.add_argument("--check", action="store_true", help="run `check` after building")
    p.add_argument("--routing", choices=("static", "bgp"), default="static",
                   help="how the kernel's own traffic (TCP, MPTCP, MPI) crosses the fabric: static (SRv6 "
                        "encap through one spine per host pair; the default, no daemon) or bgp (plain IPv6 "
                        "routed by FRR's BGP with ECMP and BFD in every switch; needs frr). MRC's uSID "
                        "forwarding is the same in both")
    p.add_argument("--bfd-ms", type=bounded(int, 0, 60_000), default=50, metavar="MS",
                   help="with --routing bgp: BFD on every session every MS ms, down after 3 missed (default 50; "
                        "0: no BFD, a dead link is seen by its carrier or at BGP's 3 s hold time). On this "
                        "machine FRR's bfdd costs about a core at 50 ms on the default fabric")
    p.add_argument("--link-rate", type=rate_type(10**3, 10**11), metavar="RATE",
                   help="give every switch port an egress queue at RATE (e.g. 200mbit) that marks ECN, trims MRC "
                        "data and drops, and every host port (NIC) the same rate, so congestion builds in the "
                        "network (default: no queues, as before)")
    _queue_args(p)
    args.json_arg(p)
    p.set_defaults(run=_up)

    p = fsub.add_parser("down", help="remove a fabric (or every fabric with --all)",
                        description="Remove a fabric's namespaces (every link and route goes with them).")
    args.name_arg(p)
    p.add_argument("--all", action="store_true", help="remove every mrc-* namespace, also after a crash")
    p.set_defaults(run=_down)

    p = fsub.add_parser("status", help="show nodes, links and the faults in force")
    args.name_arg(p)
    args.json_arg(p)
    p.set_defaults(run=_status)

    p = fsub.add_parser("check", help="send a packet on every path and show which arrived",
                        description="Send one packet per (src, dst, plane, spine) path and print a matrix: a cell "
                                    "counts the spines of that plane that delivered. Exit status 1 if any failed.")
    args.name_arg(p)
    args.json_arg(p)
    p.add_argument("--timeout", type=bounded(float, 0, 600, above=True),
                   default=2.0, help="seconds to wait for packets (default 2)")
    p.set_defaults(run=_check)

    p = fsub.add_parser("paths", help="list every path and its uSID destination address")
    args.name_arg(p)
    args.json_arg(p)
    p.set_defaults(run=_paths)

    p = fsub.add_parser("topology", help="print the fabric as a topology file (for --topology, docs/topology.md)",
                        description="Print the fabric's hosts, ports, management addresses, paths and uSID names "
                                    "in the topology-file format that `mrc perf`, `mrc decode` and the Python API "
                                    "read (`--topology FILE`); `mrc fabric exec` hands the same file to commands "
                                    "as $MRC_TOPOLOGY.")
    args.name_arg(p)
    p.set_defaults(run=_topology)

    p = fsub.add_parser("exec", help="run a command inside a host or switch namespace",
                        description="Run CMD inside NODE's namespace, e.g. `mrc fabric exec h0 -- ping fd6d:2:0::1`.")
    args.name_arg(p)
    p.add_argument("node", help="h0.., p<plane>l<i>, p<plane>s<i> or mgmt")
    p.add_argument("argv", nargs="*", help="the command, after --")
    p.set_defaults(run=_exec)


def _fault_parsers(fsub) -> None:
    """Real, reversible faults."""
    p = fsub.add_parser("fail", help="take LINKs, or every link of SWITCHes, down",
                        description="Take links down (both veth ends), e.g. `mrc fabric fail p3l0-p3s1`, or a whole "
                                    "plane's spines at once: `mrc fabric fail p6s0 p6s1 p6s2 p6s3`.")
    args.name_arg(p)
    p.add_argument("target", nargs="+", help="links (h0-p0l0, p0l0-p0s1), switches (p0s1) or hosts (h0)")
    p.set_defaults(run=_fail)

    p = fsub.add_parser("heal", help="undo faults on a LINK or SWITCH, or on everything with --all",
                        description="Undo what fail, flap, loss and rate did: a link's or a switch's faults "
                                    "(TARGET), or every fault on the fabric (--all). A failed link comes back up "
                                    "with its routes; a loss or rate rule goes. Prints the links healed. "
                                    "Example: `mrc fabric heal p3l0-p3s1`, `mrc fabric heal --all`.")
    args.name_arg(p)
    p.add_argument("target", nargs="?", help="a link or switch; omit with --all")
    p.add_argument("--all", action="store_true", help="heal every link and switch")
    p.set_defaults(run=_heal)

    p = fsub.add_parser("flap", help="fail and heal a link every PERIOD seconds",
                        description="Flap LINK (down for half the period, up for the other half) until --count "
                                    "cycles or --duration seconds or Ctrl-C; the link is always left up.")
    args.name_arg(p)
    p.add_argument("target", help="the link")
    p.add_argument("--period", type=bounded(float, 0.01, 86_400),
                   default=1.0, help="seconds per down+up cycle (default 1)")
    p.add_argument("--count", type=bounded(int, 1, 10**9), help="number of cycles")
    p.add_argument("--duration", type=bounded(float, 0, 10**7, above=True), help="seconds to keep flapping")
    p.set_defaults(run=_flap)

    p = fsub.add_parser("loss", help="drop PERCENT of the packets crossing a link (nftables numgen)")
    args.name_arg(p)
    p.add_argument("target", help="the link")
    p.add_argument("percent", type=bounded(float, 0, 100), help="0-100; 0 keeps the rule, `heal` removes it")
    p.set_defaults(run=_loss)

    p = fsub.add_parser("rate", help="limit a link to RATE with tbf on both ends (e.g. 1gbit)")
    args.name_arg(p)
    p.add_argument("target", help="the link")
    p.add_argument("rate", type=rate_type(10**3, 10**11), help="bits per second, with k/m/g suffixes: 500mbit, 1gbit")
    p.set_defaults(run=_rate)


def _queue_parsers(fsub) -> None:
    """The switch ports' egress queues."""
    p = fsub.add_parser("qos", help="set or remove the egress queues of switch ports",
                        description="Give the switch ports of TARGET (a link: its ends; a switch or a host: all "
                                    "its ports; all: every port) an egress queue: an htb rate and a tc-BPF "
                                    "program that marks ECN-capable packets CE above --ecn-kb of queue, trims MRC "
                                    "data packets above --trim-kb and drops above --buffer-kb. Host ports (NICs) "
                                    "get the same rate and a queue that never marks, trims or drops. A port that "
                                    "has a queue keeps its counters. `--rate 0` removes the queues.",
                        epilog="e.g. `mrc fabric qos all --rate 200mbit --ecn-kb 32 --trim-kb 96 --buffer-kb 512`, "
                               "`mrc fabric qos p0l0 --rate 100mbit`, `mrc fabric qos all --rate 0`")
    args.name_arg(p)
    p.add_argument("target", help="a link (p0l0-p0s1, h0-p0l0), a switch (p0l0, p0s1), a host (h0) or all")
    p.add_argument("--rate", type=rate_type(10**3, 10**11, also=("0",)), required=True,
                   help="bits per second, with k/m/g suffixes (0: remove the queues)")
    _queue_args(p)
    args.json_arg(p)
    p.set_defaults(run=_qos)

    p = fsub.add_parser("stats", help="the switch queues' counters",
                        description="Per port with a queue (switches', then hosts'): packets and bytes sent, "
                                    "marked, trimmed, dropped, the queue estimate now and its high-water mark, and "
                                    "the settings.")
    args.name_arg(p)
    p.add_argument("target", nargs="?", help="a link, a switch or a host (default: every port with a queue)")
    args.json_arg(p)
    p.set_defaults(run=_stats)


def _queue_args(p: argparse.ArgumentParser) -> None:
    from mrc.fabric.qos import DEFAULT_THRESHOLDS as d

    p.add_argument("--ecn-kb", type=KB, default=d["ecn_kb"],
                   help=f"mark CE above this many KiB of queue (default {d['ecn_kb']}; 0: never)")
    p.add_argument("--trim-kb", type=KB, default=d["trim_kb"],
                   help=f"trim MRC data above this many KiB (default {d['trim_kb']}; 0: never)")
    p.add_argument("--buffer-kb", type=KB, default=d["buffer_kb"],
                   help=f"drop above this many KiB (default {d['buffer_kb']}; 0: never)")


def _port_qos(rate: str, a: argparse.Namespace):
    """The switch queues ``--rate`` and the threshold options ask for (rate 0 or off: none)."""
    from mrc.fabric.qos import PortQoS

    bps = 0 if rate.strip() in ("0", "off") else parse_rate(rate)
    return PortQoS(bps, a.ecn_kb, a.trim_kb, a.buffer_kb).check()


#: ``mrc fabric`` without a subcommand prints its help (each subcommand runs its own function)
run = args.show_help


def _up(a: argparse.Namespace) -> int:
    """``mrc fabric up``: build it, with queues and a check when asked."""
    from mrc.fabric import apply
    from mrc.fabric.topology import Topology

    t = Topology(planes=a.planes, spines=a.spines, leaves=a.leaves, hosts=a.hosts, name=a.name)

    def progress(done: int, total: int) -> None:
        if not a.json and sys.stderr.isatty():
            print(f"\rbuilding {t.name}: {done}/{total} operations", end="", file=sys.stderr, flush=True)

    def bgp_progress(done: int, total: int) -> None:
        if not a.json and sys.stderr.isatty():
            print(f"\rBGP on {t.name}: {done}/{total} sessions Established   ", end="", file=sys.stderr, flush=True)

    q = _port_qos(a.link_rate, a) if a.link_rate else None  # a bad value fails before anything is built
    secs = apply.up(t, progress, routing=a.routing, bgp_progress=bgp_progress, bfd_ms=a.bfd_ms)
    if not a.json and sys.stderr.isatty():
        print(file=sys.stderr)
    res = {"name": t.name, "seconds": round(secs, 3), "namespaces": len(t.nodes()), "links": len(t.links()),
           "paths": len(t.paths()), "routing": a.routing}
    if a.routing == "bgp":
        res["bfd_ms"] = a.bfd_ms
    if q:
        try:
            res["queues"] = apply.set_queues(t.name, None, q)
        except BaseException:
            apply.down(t.name)
            raise
    if a.check:
        from mrc.fabric.check import check

        r = check(t)
        res.update(ok_count=r["ok_count"], failed_count=r["failed_count"])
    res["srv6"] = apply.srv6(t.name)
    args.print_result(res, a.json, f"fabric {t.name} up in {secs:.2f} s: {res['namespaces']} namespaces, "
                        f"{res['links']} links, {res['paths']} paths"
                        + ("; kernel traffic routed by BGP (every session Established)" if a.routing == "bgp" else "")
                        + (f"; check: {res['ok_count']} ok, {res['failed_count']} failed" if a.check else "")
                        + ("" if res["srv6"] == "kernel" else _no_srv6_text(a.routing)))
    return 1 if a.check and res["failed_count"] else 0


def _no_srv6_text(routing: str) -> str:
    """What runs in tc BPF on a kernel without SRv6, for the fabric's routing of kernel traffic."""
    if routing == "bgp":
        return ("\nthis kernel has no SRv6 (CONFIG_IPV6_SEG6_LWTUNNEL): the switches' End next-CSID runs as a "
                "tc-BPF program on their ports (csrc/bpf/usid_end.bpf.c); MRC crosses the fabric as with the "
                "kernel's SRv6, and kernel traffic is plain IPv6 routed by BGP")
    return ("\nthis kernel has no SRv6 (CONFIG_IPV6_SEG6_LWTUNNEL): the switches' End next-CSID "
            "and the hosts' seg6 encap and End.DT6 run as tc-BPF programs on the ports "
            "(csrc/bpf/usid_end, host_encap, host_decap .bpf.c); MRC and the kernel's TCP "
            "and MPTCP cross the fabric as with the kernel's SRv6")


def _down(a: argparse.Namespace) -> int:
    """``mrc fabric down``."""
    from mrc.fabric import apply

    removed = apply.down(a.name, all_fabrics=a.all)
    print(f"removed {len(removed)} namespaces" + ("" if a.all else f" of fabric {a.name}"))
    return 0


def _status(a: argparse.Namespace) -> int:
    """``mrc fabric status``."""
    from mrc.fabric import apply, ns

    t = apply.load_topology(a.name)
    from mrc.fabric.status import status_text

    state = apply.load_state(a.name)
    sessions = None
    if state.get("routing") == "bgp":
        from mrc.fabric import bgp

        sessions = bgp.all_sessions(t)
    obj, text = status_text(t, state, ns.list_netns(), sessions)
    args.print_result(obj, a.json, text)
    return 0


def _paths(a: argparse.Namespace) -> int:
    """``mrc fabric paths``."""
    from mrc.fabric import apply

    t = apply.load_topology(a.name)
    paths = t.paths()
    args.print_result(paths, a.json, "\n".join(f"{p['src']:<4} -> {p['dst']:<4} plane {p['plane']:<2} "
                                               f"spine {p['spine']:<2} {p['address']}" for p in paths))
    return 0


def _check(a: argparse.Namespace) -> int:
    """``mrc fabric check``: exit 1 when a path failed."""
    from mrc.fabric import apply
    from mrc.fabric.check import check, matrix

    apply.require_root("mrc fabric check")
    t = apply.load_topology(a.name)
    r = check(t, timeout=a.timeout)
    args.print_result(r, a.json, matrix(t, r))
    return 1 if r["failed_count"] else 0


def _topology(a: argparse.Namespace) -> int:
    """``mrc fabric topology``."""
    from mrc.fabric import apply, resolver

    print(json.dumps(resolver.export(apply.load_topology(a.name)), indent=1))
    return 0


def _exec(a: argparse.Namespace) -> int:
    """``mrc fabric exec NODE -- CMD``: CMD in NODE's namespace, with the topology in its environment."""
    from mrc.fabric import apply, ns, resolver

    t = apply.load_topology(a.name)
    argv = a.argv
    if not argv:
        raise UsageError("nothing to run: use `mrc fabric exec NODE -- CMD ARGS...`")
    if a.node not in t.nodes():
        raise UsageError(f"unknown node {a.node!r}: use a host h0..h{t.hosts - 1}, a switch such as "
                         f"{t.leaf(0, 0)} or {t.spine(0, 0)}, or mgmt")
    apply.require_root("mrc fabric exec")
    # tell tools inside where they run: the stack reads the topology file
    # and the host's name in it (mrc.paths), the fabric tools the fabric
    topo = apply.topology_path(t.name)
    if not os.path.exists(topo):  # a fabric built by an older mrc
        resolver.write(t, topo)
    os.environ.update(MRC_FABRIC=t.name, MRC_HOST=a.node, MRC_TOPOLOGY=topo)
    ns.execvp(t.ns(a.node), argv)
    return 127  # not reached


def _fail(a: argparse.Namespace) -> int:
    """``mrc fabric fail``."""
    from mrc.fabric import apply

    links = [link for target in a.target for link in apply.fail(a.name, target)]
    print(f"down: {', '.join(links)}")
    return 0


def _heal(a: argparse.Namespace) -> int:
    """``mrc fabric heal``."""
    from mrc.fabric import apply

    if not a.all and not a.target:
        raise UsageError("say what to heal: a LINK, a SWITCH, or --all")
    links = apply.heal(a.name, None if a.all else a.target)
    print(f"healed {len(links)} link(s)" + ("" if a.all else f": {', '.join(links)}"))
    return 0


def _flap(a: argparse.Namespace) -> int:
    """``mrc fabric flap``: the link is left up."""
    from mrc.fabric import apply

    if a.period <= 0:
        raise UsageError("--period must be positive")

    def event(kind: str, link: str, at: float) -> None:
        print(f"{at:8.2f}s {link} {kind}", flush=True)

    try:
        n = apply.flap(a.name, a.target, a.period, a.count, a.duration, on_event=event)
    except KeyboardInterrupt:
        print("stopped; link left up")
        return 0
    print(f"{n} flap cycle(s); link left up")
    return 0


def _loss(a: argparse.Namespace) -> int:
    """``mrc fabric loss``."""
    from mrc.fabric import apply

    apply.loss(a.name, a.target, a.percent)
    print(f"{a.target}: dropping {a.percent}% in both directions (undo with `mrc fabric heal {a.target}`)")
    return 0


def _qos(a: argparse.Namespace) -> int:
    """``mrc fabric qos``."""
    from mrc.fabric import apply

    q = _port_qos(a.rate, a)
    n = apply.set_queues(a.name, None if a.target == "all" else a.target, q)
    args.print_result({"ports": n, **q.__dict__}, a.json,
           f"{n} switch port(s): " + (f"{q.rate_bps / 1e6:g} Mbit/s, ECN above {q.ecn_kb} KiB, trim above "
                                      f"{q.trim_kb} KiB, drop above {q.buffer_kb} KiB" if q.rate_bps
                                      else "queues removed"))
    return 0


def _stats(a: argparse.Namespace) -> int:
    """``mrc fabric stats``."""
    from mrc.fabric import apply

    rows = apply.queue_stats(a.name, a.target)
    head = f"{'port':<16} {'packets':>9} {'MB':>8} {'marked':>8} {'trimmed':>8} {'dropped':>8} {'hwm KiB':>8}"
    args.print_result(rows, a.json, "\n".join([head] + [
        f"{r['node'] + ':' + r['ifname']:<16} {r['packets']:>9} {r['bytes'] / 1e6:>8.1f} {r['marked']:>8} "
        f"{r['trimmed']:>8} {r['dropped']:>8} {r['hwm_kb']:>8}" for r in rows]) if rows else
        "no switch port has a queue (see `mrc fabric qos --help`)")
    return 0


def _rate(a: argparse.Namespace) -> int:
    """``mrc fabric rate``."""
    from mrc.fabric import apply

    bps = apply.rate(a.name, a.target, a.rate)
    print(f"{a.target}: limited to {bps / 1e6:g} Mbit/s in both directions "
          f"(undo with `mrc fabric heal {a.target}`)")
    return 0
