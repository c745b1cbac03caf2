"""The ``mrc`` command.

    mrc fabric up [--planes 8 --spines 4 --leaves 2 --hosts 4] [--name NAME]
    mrc fabric check [--json]      prove every path delivers
    mrc fabric paths [--json]      every (src, dst, plane, spine) address
    mrc fabric status [--json]     nodes, links, faults in force
    mrc fabric fail|heal|flap|loss|rate ...   real, reversible faults
    mrc fabric qos TARGET|all --rate R   switch egress queues: rate, ECN, trimming
    mrc fabric stats [--json]      the switch queues' counters
    mrc fabric exec HOST -- CMD    run a command inside a namespace
    mrc fabric down [--name NAME | --all]
    mrc fabric topology            the fabric as a topology file (docs/topology.md)
    mrc perf server | client HOST  RDMA WRITE bandwidth and latency
    mrc capture NODE -w FILE       tcpdump of MRC packets inside a namespace
    mrc decode FILE [--json]       per-QP summary of a capture (scapy)
    mrc ctl ev|events|port|cc ...  controller API of a running MRC process
    mrc soak [--seconds S | --packets N]   writes over a misbehaving in-memory link, every byte checked
    mrc coll all_reduce --fabric NAME      collectives across hosts, in nccl-tests' columns
    mrc train --fabric NAME [--faults ..]  a data-parallel training step, under faults

Every error prints one line saying what is wrong and what to do, and exits 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from mrc.errors import MrcError, UsageError
from mrc.units import size_type

DEFAULT_NAME = os.environ.get("MRC_FABRIC", "mrc0")


def _name(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", default=DEFAULT_NAME,
                   help=f"fabric name, 1-10 lower-case letters or digits (default: {DEFAULT_NAME}, or $MRC_FABRIC)")


def _json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")


def _spin_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--spin-us", type=float, metavar="US",
                   help="how long the engine thread polls after its last work before it sleeps (default 200; "
                        "0 sleeps at once and saves a CPU, more can lower latency on a machine with cores to spare)")


def _where(p: argparse.ArgumentParser, ports: bool = True) -> None:
    """Options that say which host this is and where its ports and peers are."""
    p.add_argument("--topology", metavar="FILE", help="a topology file naming hosts, ports and paths "
                                                      "(docs/topology.md; default: $MRC_TOPOLOGY, which "
                                                      "`mrc fabric exec` sets)")
    p.add_argument("--host", help="this host's name in the topology (default: $MRC_HOST, else the host whose "
                                  "port addresses this machine has)")
    if ports:
        p.add_argument("--ports", metavar="IF[:PLANE],...", help="the MRC ports, instead of the topology's: "
                                                                 "interface names, planes 0.. in order "
                                                                 "unless given (eth1:0,eth2:1)")


def _ports(spec: str | None) -> list | None:
    if not spec:
        return None
    out = []
    for i, item in enumerate(x for x in spec.split(",") if x):
        name, _, plane = item.partition(":")
        try:
            out.append((name, int(plane) if plane else i))
        except ValueError:
            raise UsageError(f"bad port {item!r}: write IFNAME or IFNAME:PLANE") from None
    return out


def _psk(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--psk-file", metavar="FILE", help=f"a pre-shared key (at least 16 bytes, e.g. `head -c 32 "
                                                      f"/dev/urandom | base64 > key`): {what}")


def _read_psk(a: argparse.Namespace) -> bytes | None:
    from mrc import cm

    return cm.read_psk(a.psk_file) if a.psk_file else None


_size_arg = size_type(1)


def _resolver(a: argparse.Namespace):
    from mrc.paths import from_environment

    return from_environment(a.host, a.topology)


def build_parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="mrc",
        description="MRC (Multipath Reliable Connection) in user space: a multi-plane SRv6 uSID fabric "
                    "in network namespaces, and the tools around it.",
        epilog="Run `mrc fabric --help` for the fabric commands. Most commands need root.",
    )
    top.add_argument("--version", action="store_true", help="print the version and exit")
    sub = top.add_subparsers(dest="cmd")
    d = sub.add_parser("demo", help="build the default fabric, prove every path, cut a link, tear down",
                       description="The main demo: needs root; always removes what it built.")
    d.add_argument("--name", help="fabric name (default: demo<pid>)")
    d.add_argument("--dash", action="store_true",
                   help="serve the live web view (mrc dash) of the demo's fabric: print its URL, wait for a page "
                        "to open it (up to --dash-wait s), and keep the fabric up --dash-linger s at the end")
    d.add_argument("--dash-port", type=int, default=8080, help="the web view's port (default 8080)")
    d.add_argument("--dash-wait", type=float, default=60.0, help="seconds to wait for a page (default 60)")
    d.add_argument("--dash-linger", type=float, default=30.0, help="seconds the fabric stays up after the "
                                                                  "transfer for the page (default 30)")

    dash = sub.add_parser("dash", help="a live web view of a running fabric and its MRC connections, with fault "
                                       "buttons (needs the dash extra: aiohttp)",
                          description="Serves one page that shows the fabric (links coloured by state and load), "
                                      "per-plane and per-host rates, every MRC context in the fabric's hosts with "
                                      "its QPs and a QP's EV grid, EV events and link changes on a timeline, and "
                                      "the switch queues, updated 5 times a second. Clicking a link or switch "
                                      "fails, heals, flaps, adds loss or limits its rate (as `mrc fabric` does) "
                                      "with the token printed at start; without it the page is read-only. It binds "
                                      "to 127.0.0.1 unless told otherwise. Example: `mrc fabric up --name lab` "
                                      "then `mrc dash --name lab` and open the URL it prints. docs/dash.md.")
    dash.add_argument("--name", help="the fabric (default: the only one up)")
    dash.add_argument("--port", type=int, default=8080, help="TCP port (default 8080)")
    dash.add_argument("--bind", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine "
                                                          "only; 0.0.0.0 opens it to the network)")
    dash.add_argument("--hz", type=float, default=5.0, help="updates per second (0.5-20, default 5)")
    dash.add_argument("--token", help="the token that allows changes (default: a random one, or $MRC_DASH_TOKEN)")

    perf = sub.add_parser("perf", help="RDMA WRITE bandwidth and latency over MRC (like ib_write_bw)",
                          description="Run `mrc perf server` on one host and `mrc perf client SERVER` on another, "
                                      "e.g. inside a fabric: `mrc fabric exec h2 -- mrc perf server` and "
                                      "`mrc fabric exec h0 -- mrc perf client h2 --verify`; between any hosts a "
                                      "topology file describes: `mrc perf server --topology lab.json` and "
                                      "`mrc perf client b --topology lab.json --verify` (docs/topology.md).")
    psub = perf.add_subparsers(dest="pcmd")
    ps = psub.add_parser("server", help="wait for a client and receive its writes")
    ps.add_argument("--port", type=int, default=18515, help="connection-setup TCP port (default 18515)")
    ps.add_argument("--forever", action="store_true", help="serve one client after another (default: exit after "
                                                           "the first client that gets through setup)")
    ps.add_argument("--bind", metavar="ADDR", help="listen on this address (default: this host's management address "
                                                   "from the topology, else all addresses)")
    ps.add_argument("--max-size", type=_size_arg, default="1G", metavar="SIZE",
                    help="the most remote-writable memory one client may ask for (default 1G)")
    ps.add_argument("--max-qps", type=int, default=64, metavar="N", help="the most QPs one client may ask for "
                                                                         "(default 64)")
    ps.add_argument("--idle-timeout", type=float, default=60.0, metavar="S",
                    help="drop a connected client silent this long (default 60 s; clients tick every 10 s)")
    _psk(ps, "only clients that prove they hold this key (challenge-response, HMAC-SHA256) get a QP")
    _spin_arg(ps)
    _where(ps)
    pc = psub.add_parser("client", help="write to a server and measure")
    pc.add_argument("server", help="the server: a host of the topology (h2) or its management address")
    pc.add_argument("--port", type=int, default=18515, help="connection-setup TCP port (default 18515)")
    pc.add_argument("--sizes", default="4K,64K,1M", help="message sizes, comma separated (default 4K,64K,1M)")
    pc.add_argument("--iters", type=int, default=100, help="messages per size (default 100)")
    pc.add_argument("--depth", type=int, default=16, help="messages in flight (default 16)")
    pc.add_argument("--imm", action="store_true", help="RDMA WRITE with immediate instead of WRITE")
    pc.add_argument("--verify", action="store_true", help="check the received data by hash")
    pc.add_argument("--qps", type=int, default=1, help="queue pairs, messages spread round robin (default 1)")
    pc.add_argument("--latency", action="store_true",
                    help="round trips instead of bandwidth: a WRITE_IMM of each size, which the server writes straight "
                         "back; one at a time, p50/p99 (try --sizes 64 --iters 2000)")
    _psk(pc, "prove to the server that we hold this key (and check that it does)")
    _spin_arg(pc)
    _where(pc)
    _json(pc)

    cap = sub.add_parser("capture", help="capture MRC packets with tcpdump inside a fabric host or switch",
                         description="Run tcpdump (filter: udp port 4791) in NODE's namespace and write a pcap. "
                                     "It returns to you once tcpdump listens, so start it before the traffic; "
                                     "Ctrl-C, --seconds or --count stop it cleanly. Example: "
                                     "`mrc capture h0 --port 2 -w h0p2.pcap --seconds 5`, then "
                                     "`mrc decode h0p2.pcap`.")
    cap.add_argument("node", help="a host (h0) or a switch (p0l0, p0s1)")
    cap.add_argument("-w", "--write", required=True, metavar="FILE", help="pcap file to write")
    cap.add_argument("--port", type=int, help="a host's port (plane) P: capture on interface pP")
    cap.add_argument("-i", "--interface", help="any interface of the node (default: all of them)")
    cap.add_argument("--seconds", type=float, help="stop after this many seconds")
    cap.add_argument("--count", type=int, help="stop after this many packets")
    cap.add_argument("--snaplen", type=int, default=0, help="bytes kept per packet (default: all, so the "
                                                            "ICRC can be checked)")
    _name(cap)
    dec = sub.add_parser("decode", help="summarise a capture per QP (needs the dissect extra: scapy)",
                         description="Decode every MRC packet of a pcap with the scapy layers of mrc.dissect and "
                                     "print, per QP, packets, bytes, retransmissions, counts per EV and per plane, "
                                     "SACK and NACK counts by reason, a reorder-distance histogram and ICRC "
                                     "failures, and the malformed packets. Example: `mrc decode h0p2.pcap --json`.")
    dec.add_argument("file", help="a pcap or pcapng file")
    _where(dec, ports=False)
    _json(dec)

    soak = sub.add_parser("soak", help="many writes over a misbehaving in-memory link, every byte checked (rootless)",
                          description="Two contexts with QPs both ways keep random writes (1 B to 1 MiB, WRITE and "
                                      "WRITE_IMM) in flight over the in-memory link while its 16 paths lose, "
                                      "reorder, duplicate, trim and mark packets and flap; every landed byte, every "
                                      "gap between writes, every immediate and the order of completions are "
                                      "checked. Prints packets, bytes, retransmits, qp_errors and corrupt_bytes; "
                                      "exits 1 on any error. Example: `mrc soak --seconds 10 --json`.")
    soak.add_argument("--seconds", type=float, help="stop after this much wall-clock time (default 10 unless "
                                                    "--packets is given)")
    soak.add_argument("--packets", type=int, help="stop once the endpoints have sent this many packets")
    soak.add_argument("--seed", type=int, default=1, help="the link's and the writes' randomness (default 1)")
    _json(soak)

    sim = sub.add_parser("sim", help="the engine at up to 1,024 NICs on a simulated multi-plane Clos (virtual time)",
                         description="Every NIC runs the unchanged engine; switches forward on the uSID destination "
                                     "(End next-CSID over the fabric's address plan) and queue at their egress ports "
                                     "(ECN, trimming, drops as the fabric's BPF queues do). Prints per-flow completion "
                                     "times, utilisation per tier and plane, drops/trims/marks, failover gaps, QP "
                                     "errors and the simulator's speed. Deterministic for a seed. docs/sim.md has "
                                     "the model. Example: `mrc sim --hosts 64 --workload permutation --size 16M "
                                     "--single-path --json`.")
    sim.add_argument("--hosts", type=int, default=1024, help="NICs (2-1024, default 1024)")
    sim.add_argument("--planes", type=int, default=8, help="planes, one NIC port each (default 8)")
    sim.add_argument("--leaves", type=int, default=0, help="T0 leaves per plane (default: one per 32 hosts)")
    sim.add_argument("--spines", type=int, default=0, help="T1 spines per plane (default: hosts per leaf, "
                                                            "non-blocking)")
    sim.add_argument("--rate", default="100G", help="every link's rate, e.g. 100G, 400G (default 100G)")
    sim.add_argument("--hop-delay", default="1us", help="per link: propagation and switching (default 1us)")
    sim.add_argument("--buffer", default="1M", help="switch egress buffer per port (default 1M)")
    sim.add_argument("--ecn", default="64K", help="queue above which switches mark CE (default 64K)")
    sim.add_argument("--trim", default="128K", help="queue above which switches trim MRC data (default 128K; 0: off)")
    sim.add_argument("--mtu", type=int, default=4096, help="payload bytes per packet (64-8872, default 4096)")
    sim.add_argument("--workload", default="permutation", choices=["permutation", "alltoall", "incast", "victim",
                                                                    "ring-allreduce", "all-reduce", "all-to-all"],
                     help="permutation: each NIC writes to one other (random); alltoall: to every other; incast: "
                          "--incast senders to host 0; victim: that plus one sender's flow to another host; "
                          "ring-allreduce: each to the next, 2(N-1)/N x size; all-reduce, all-to-all: mrc.coll's "
                          "schedule (ring reduce-scatter + all-gather; pairwise), --size bytes of float32 per rank "
                          "in 512 KiB pieces, 16 in flight per pair, each waiting for the piece it depends on")
    sim.add_argument("--size", default="16M", help="bytes each sender writes in all (default 16M)")
    sim.add_argument("--msg", default="1M", help="bytes per WRITE (default 1M)")
    sim.add_argument("--incast", type=int, default=7, help="incast senders (default 7)")
    sim.add_argument("--victim-at", default="0", metavar="TIME",
                     help="victim workload: start the victim flow this long into the incast, e.g. 100us "
                          "(default 0: together)")
    sim.add_argument("--fail", action="append", default=[], metavar="SPEC",
                     help="t1:P.S, t0:P.L, link:P.L.S or host:H.P, then @AT and +DURATION, e.g. t1:0.3@50us "
                          "(repeatable)")
    sim.add_argument("--flap", action="append", default=[], metavar="SPEC",
                     help="link:P.L.S/PERIOD@AT+DURATION: down half of every period, e.g. link:0.0.0/10ms@0+100ms")
    sim.add_argument("--single-path", action="store_true", help="also run the workload with one EV per QP "
                                                                "(ECMP-hashed), the baseline, in the same run")
    sim.add_argument("--no-pacing", action="store_true",
                     help="NICs do not pace their ports: the engine fills one 8-frame queue of all the NIC's ports "
                          "in rotation order (the control for pacing; default: a packet goes when a port is free, "
                          "as in a NIC)")
    sim.add_argument("--seed", type=int, default=1, help="the workload's and the flows' randomness (default 1)")
    sim.add_argument("--plots", metavar="DIR", help="write the completion-time CDF and utilisation-over-time PNGs")
    sim.add_argument("--quiet", action="store_true",
                     help="no progress on stderr (default: on a terminal a line rewritten each second, in a log "
                          "a line every 10 s of CPU time; stdout, the JSON included, is the same either way)")
    _json(sim)

    from mrc.coll import cli as coll_cli
    from mrc.ctl import cli as ctl_cli

    ctl_cli.add_parser(sub)
    coll_cli.add_parser(sub)
    fab = sub.add_parser("fabric", help="build, check, break and remove a multi-plane SRv6 fabric",
                         description="A fabric of P independent planes (each a 2-tier Clos of T0 leaves and T1 "
                                     "spines) built from network namespaces and veth pairs; switches forward with "
                                     "the kernel's SRv6 End next-CSID (uSID) behaviour and static routes only. "
                                     "Nodes are hosts h0.., leaves p<plane>l<i>, spines p<plane>s<i>; links are "
                                     "named <lower>-<upper>, e.g. h0-p0l0 or p0l0-p0s1.")
    fsub = fab.add_subparsers(dest="fcmd")

    p = fsub.add_parser("up", help="build a fabric",
                        description="Build a fabric: namespaces, veths (MTU 9000), addresses, sysctls, uSID routes, "
                                    "kernel-traffic encap routes and the management bridge.")
    _name(p)
    p.add_argument("--planes", type=int, default=8, help="independent network planes (default 8, max 16)")
    p.add_argument("--spines", type=int, default=4, help="T1 spine switches per plane (default 4)")
    p.add_argument("--leaves", type=int, default=2, help="T0 leaf switches per plane (default 2)")
    p.add_argument("--hosts", type=int, default=4, help="hosts, spread over the leaves (default 4)")
    p.add_argument("--check", action="store_true", help="run `check` after building")
    p.add_argument("--link-rate", metavar="RATE",
                   help="give every switch port an egress queue at RATE (e.g. 200mbit) that marks ECN, trims MRC "
                        "data and drops, and every host port (NIC) the same rate, so congestion builds in the "
                        "network (default: no queues, as before)")
    _queue_args(p)
    _json(p)

    p = fsub.add_parser("down", help="remove a fabric (or every fabric with --all)",
                        description="Remove a fabric's namespaces (every link and route goes with them).")
    _name(p)
    p.add_argument("--all", action="store_true", help="remove every mrc-* namespace, also after a crash")

    p = fsub.add_parser("status", help="show nodes, links and the faults in force")
    _name(p)
    _json(p)

    p = fsub.add_parser("check", help="send a packet on every path and show which arrived",
                        description="Send one packet per (src, dst, plane, spine) path and print a matrix: a cell "
                                    "counts the spines of that plane that delivered. Exit status 1 if any failed.")
    _name(p)
    _json(p)
    p.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for packets (default 2)")

    p = fsub.add_parser("paths", help="list every path and its uSID destination address")
    _name(p)
    _json(p)

    p = fsub.add_parser("topology", help="print the fabric as a topology file (for --topology, docs/topology.md)",
                        description="Print the fabric's hosts, ports, management addresses, paths and uSID names "
                                    "in the topology-file format that `mrc perf`, `mrc decode` and the Python API "
                                    "read (`--topology FILE`); `mrc fabric exec` hands the same file to commands "
                                    "as $MRC_TOPOLOGY.")
    _name(p)

    p = fsub.add_parser("exec", help="run a command inside a host or switch namespace",
                        description="Run CMD inside NODE's namespace, e.g. `mrc fabric exec h0 -- ping fd6d:2:0::1`.")
    _name(p)
    p.add_argument("node", help="h0.., p<plane>l<i>, p<plane>s<i> or mgmt")
    p.add_argument("argv", nargs="*", help="the command, after --")

    p = fsub.add_parser("fail", help="take LINKs, or every link of SWITCHes, down",
                        description="Take links down (both veth ends), e.g. `mrc fabric fail p3l0-p3s1`, or a whole "
                                    "plane's spines at once: `mrc fabric fail p6s0 p6s1 p6s2 p6s3`.")
    _name(p)
    p.add_argument("target", nargs="+", help="links (h0-p0l0, p0l0-p0s1), switches (p0s1) or hosts (h0)")

    p = fsub.add_parser("heal", help="undo faults on a LINK or SWITCH, or on everything with --all")
    _name(p)
    p.add_argument("target", nargs="?", help="a link or switch; omit with --all")
    p.add_argument("--all", action="store_true", help="heal every link")

    p = fsub.add_parser("flap", help="fail and heal a link every PERIOD seconds",
                        description="Flap LINK (down for half the period, up for the other half) until --count "
                                    "cycles or --duration seconds or Ctrl-C; the link is always left up.")
    _name(p)
    p.add_argument("target", help="the link")
    p.add_argument("--period", type=float, default=1.0, help="seconds per down+up cycle (default 1)")
    p.add_argument("--count", type=int, help="number of cycles")
    p.add_argument("--duration", type=float, help="seconds to keep flapping")

    p = fsub.add_parser("loss", help="drop PERCENT of the packets crossing a link (nftables numgen)")
    _name(p)
    p.add_argument("target", help="the link")
    p.add_argument("percent", type=float, help="0-100; 0 keeps the rule, `heal` removes it")

    p = fsub.add_parser("rate", help="limit a link to RATE with tbf on both ends (e.g. 1gbit)")
    _name(p)
    p.add_argument("target", help="the link")
    p.add_argument("rate", help="bits per second, with k/m/g suffixes: 500mbit, 1gbit")

    p = fsub.add_parser("qos", help="set or remove the egress queues of switch ports",
                        description="Give the switch ports of TARGET (a link: its ends; a switch or a host: all "
                                    "its ports; all: every port) an egress queue: an htb rate and a tc-BPF "
                                    "program that marks ECN-capable packets CE above --ecn-kb of queue, trims MRC "
                                    "data packets above --trim-kb and drops above --buffer-kb. Host ports (NICs) "
                                    "get the same rate and a queue that never marks, trims or drops. A port that "
                                    "has a queue keeps its counters. `--rate 0` removes the queues.",
                        epilog="e.g. `mrc fabric qos all --rate 200mbit --ecn-kb 32 --trim-kb 96 --buffer-kb 512`, "
                               "`mrc fabric qos p0l0 --rate 100mbit`, `mrc fabric qos all --rate 0`")
    _name(p)
    p.add_argument("target", help="a link (p0l0-p0s1, h0-p0l0), a switch (p0l0, p0s1), a host (h0) or all")
    p.add_argument("--rate", required=True, help="bits per second, with k/m/g suffixes (0: remove the queues)")
    _queue_args(p)
    _json(p)

    p = fsub.add_parser("stats", help="the switch queues' counters",
                        description="Per port with a queue (switches', then hosts'): packets and bytes sent, "
                                    "marked, trimmed, dropped, the queue estimate now and its high-water mark, and "
                                    "the settings.")
    _name(p)
    p.add_argument("target", nargs="?", help="a link, a switch or a host (default: every port with a queue)")
    _json(p)
    return top


def _queue_args(p: argparse.ArgumentParser) -> None:
    from mrc.fabric.qos import DEFAULT_THRESHOLDS as d

    p.add_argument("--ecn-kb", type=int, default=d["ecn_kb"],
                   help=f"mark CE above this many KiB of queue (default {d['ecn_kb']}; 0: never)")
    p.add_argument("--trim-kb", type=int, default=d["trim_kb"],
                   help=f"trim MRC data above this many KiB (default {d['trim_kb']}; 0: never)")
    p.add_argument("--buffer-kb", type=int, default=d["buffer_kb"],
                   help=f"drop above this many KiB (default {d['buffer_kb']}; 0: never)")


def _port_qos(rate: str, a: argparse.Namespace):
    from mrc.fabric import apply
    from mrc.fabric.qos import PortQoS

    bps = 0 if rate.strip() in ("0", "off") else apply.parse_rate(rate)
    return PortQoS(bps, a.ecn_kb, a.trim_kb, a.buffer_kb).check()


def _dash_port(port: int, flag: str) -> None:
    if not 1 <= port <= 65535:
        raise UsageError(f"{flag} must be 1-65535, not {port}")


def _print(obj, as_json: bool, text: str) -> None:
    print(json.dumps(obj, indent=1) if as_json else text)


def fabric_main(a: argparse.Namespace) -> int:
    from mrc.fabric import apply, ns
    from mrc.fabric.topology import Topology

    if a.fcmd == "up":
        t = Topology(planes=a.planes, spines=a.spines, leaves=a.leaves, hosts=a.hosts, name=a.name)

        def progress(done: int, total: int) -> None:
            if not a.json and sys.stderr.isatty():
                print(f"\rbuilding {t.name}: {done}/{total} operations", end="", file=sys.stderr, flush=True)

        q = _port_qos(a.link_rate, a) if a.link_rate else None  # a bad value fails before anything is built
        secs = apply.up(t, progress)
        if not a.json and sys.stderr.isatty():
            print(file=sys.stderr)
        res = {"name": t.name, "seconds": round(secs, 3), "namespaces": len(t.nodes()), "links": len(t.links()),
               "paths": len(t.paths())}
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
        _print(res, a.json, f"fabric {t.name} up in {secs:.2f} s: {res['namespaces']} namespaces, "
                            f"{res['links']} links, {res['paths']} paths"
                            + (f"; check: {res['ok_count']} ok, {res['failed_count']} failed" if a.check else "")
                            + ("" if res["srv6"] == "kernel" else
                               "\nthis kernel has no SRv6 (CONFIG_IPV6_SEG6_LWTUNNEL): the switches' End next-CSID "
                               "and the hosts' seg6 encap and End.DT6 run as tc-BPF programs on the ports "
                               "(csrc/bpf/usid_end, host_encap, host_decap .bpf.c); MRC and the kernel's TCP "
                               "and MPTCP cross the fabric as with the kernel's SRv6"))
        return 1 if a.check and res["failed_count"] else 0
    if a.fcmd == "down":
        removed = apply.down(a.name, all_fabrics=a.all)
        print(f"removed {len(removed)} namespaces" + ("" if a.all else f" of fabric {a.name}"))
        return 0
    if a.fcmd == "status":
        t = apply.load_topology(a.name)
        from mrc.fabric.status import status_text

        obj, text = status_text(t, apply.load_state(a.name), ns.list_netns())
        _print(obj, a.json, text)
        return 0
    if a.fcmd == "paths":
        t = apply.load_topology(a.name)
        paths = t.paths()
        _print(paths, a.json, "\n".join(f"{p['src']:<4} -> {p['dst']:<4} plane {p['plane']:<2} spine {p['spine']:<2} "
                                        f"{p['address']}" for p in paths))
        return 0
    if a.fcmd == "check":
        from mrc.fabric.check import check, matrix

        apply.require_root("mrc fabric check")
        t = apply.load_topology(a.name)
        r = check(t, timeout=a.timeout)
        _print(r, a.json, matrix(t, r))
        return 1 if r["failed_count"] else 0
    if a.fcmd == "topology":
        from mrc.fabric import resolver

        print(json.dumps(resolver.export(apply.load_topology(a.name)), indent=1))
        return 0
    if a.fcmd == "exec":
        from mrc.fabric import resolver

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
    if a.fcmd == "fail":
        links = [link for target in a.target for link in apply.fail(a.name, target)]
        print(f"down: {', '.join(links)}")
        return 0
    if a.fcmd == "heal":
        if not a.all and not a.target:
            raise UsageError("say what to heal: a LINK, a SWITCH, or --all")
        links = apply.heal(a.name, None if a.all else a.target)
        print(f"healed {len(links)} link(s)" + ("" if a.all else f": {', '.join(links)}"))
        return 0
    if a.fcmd == "flap":
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
    if a.fcmd == "loss":
        apply.loss(a.name, a.target, a.percent)
        print(f"{a.target}: dropping {a.percent}% in both directions (undo with `mrc fabric heal {a.target}`)")
        return 0
    if a.fcmd == "qos":
        q = _port_qos(a.rate, a)
        n = apply.set_queues(a.name, None if a.target == "all" else a.target, q)
        _print({"ports": n, **q.__dict__}, a.json,
               f"{n} switch port(s): " + (f"{q.rate_bps / 1e6:g} Mbit/s, ECN above {q.ecn_kb} KiB, trim above "
                                          f"{q.trim_kb} KiB, drop above {q.buffer_kb} KiB" if q.rate_bps
                                          else "queues removed"))
        return 0
    if a.fcmd == "stats":
        rows = apply.queue_stats(a.name, a.target)
        head = f"{'port':<16} {'packets':>9} {'MB':>8} {'marked':>8} {'trimmed':>8} {'dropped':>8} {'hwm KiB':>8}"
        _print(rows, a.json, "\n".join([head] + [
            f"{r['node'] + ':' + r['ifname']:<16} {r['packets']:>9} {r['bytes'] / 1e6:>8.1f} {r['marked']:>8} "
            f"{r['trimmed']:>8} {r['dropped']:>8} {r['hwm_kb']:>8}" for r in rows]) if rows else
            "no switch port has a queue (see `mrc fabric qos --help`)")
        return 0
    if a.fcmd == "rate":
        bps = apply.rate(a.name, a.target, a.rate)
        print(f"{a.target}: limited to {bps / 1e6:g} Mbit/s in both directions "
              f"(undo with `mrc fabric heal {a.target}`)")
        return 0
    raise UsageError("missing fabric command: see `mrc fabric --help`")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    # everything after the first "--" is the command of `mrc fabric exec`,
    # wherever the options stand
    command: list[str] | None = None
    if "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1:]
    a = parser.parse_args(argv)
    if command is not None:
        if getattr(a, "fcmd", None) != "exec":
            parser.error("`--` only goes with `mrc fabric exec NODE -- CMD`")
        a.argv = a.argv + command
    try:
        if a.version:
            from mrc import __version__

            print(__version__)
            return 0
        if a.cmd == "demo":
            from mrc import demo

            if a.dash:
                _dash_port(a.dash_port, "--dash-port")
                for flag, v in (("--dash-wait", a.dash_wait), ("--dash-linger", a.dash_linger)):
                    if not 0 <= v <= 3600:
                        raise UsageError(f"{flag} is 0-3600 seconds, not {v}")
            dash_opts = {"port": a.dash_port, "wait": a.dash_wait, "linger": a.dash_linger} if a.dash else None
            return demo.main(a.name, dash=dash_opts)
        if a.cmd == "dash":
            from mrc.dash.server import run
            from mrc.fabric import apply

            _dash_port(a.port, "--port")
            if not 0.5 <= a.hz <= 20:
                raise UsageError(f"--hz must be 0.5-20, not {a.hz}")
            name = a.name
            if name is None:
                found = apply.list_fabrics()
                if len(found) != 1:
                    raise UsageError(f"{len(found)} fabrics are up ({', '.join(found) or 'none'}): name one with "
                                     "--name" if found else "no fabric is up: `mrc fabric up --name lab` first")
                name = found[0]
            apply.require_root("mrc dash (it reads the fabric's namespaces)")
            return run(name, a.port, a.bind, a.hz, a.token)
        if a.cmd == "perf":
            from mrc import perf

            if a.pcmd == "server":
                return perf.server(a.port, once=not a.forever, resolver=_resolver(a), ports=_ports(a.ports),
                                   bind=a.bind, max_size=a.max_size, max_qps=a.max_qps, psk=_read_psk(a),
                                   idle_timeout=a.idle_timeout, spin_us=a.spin_us)
            if a.pcmd == "client":
                sizes = [perf.parse_size(x) for x in a.sizes.split(",") if x]
                if a.latency:
                    res = perf.latency(a.server, sizes, a.iters, a.port, progress=not a.json,
                                       resolver=_resolver(a), ports=_ports(a.ports), psk=_read_psk(a),
                                       spin_us=a.spin_us)
                    perf.main_json(res) if a.json else perf.print_latency(res)
                    return 0 if all(r["verified"] for r in res) else 1
                res = perf.client(a.server, sizes, a.iters, a.imm, a.verify, a.depth, a.port,
                                  progress=sys.stderr.isatty() or not a.json, qps=a.qps, resolver=_resolver(a),
                                  ports=_ports(a.ports), psk=_read_psk(a), spin_us=a.spin_us)
                perf.main_json(res) if a.json else perf.print_table(res)
                return 0 if all(r["verified"] is not False for r in res) else 1
            parser.parse_args(["perf", "--help"])
        if a.cmd in ("coll", "train"):
            from mrc.coll import cli as coll_cli

            return coll_cli.run(a)
        if a.cmd == "ctl":
            from mrc.ctl import cli as ctl_cli

            return ctl_cli.run(a)
        if a.cmd == "capture":
            from mrc.fabric import capture

            return capture.capture_main(a.name, a.node, a.write, a.port, a.interface, a.seconds, a.count,
                                        a.snaplen)
        if a.cmd == "soak":
            from mrc import soak

            if (a.seconds is not None and a.seconds <= 0) or (a.packets is not None and a.packets <= 0):
                raise UsageError("--seconds and --packets must be positive")
            return soak.main(a.seconds, a.packets, a.seed, a.json)
        if a.cmd == "sim":
            from mrc import sim

            return sim.main(a)
        if a.cmd == "decode":
            from mrc import decode

            r = decode.decode(a.file, _resolver(a))
            _print(r, a.json, decode.decode_text(r))
            return 1 if r["malformed"] else 0
        if a.cmd == "fabric":
            if not a.fcmd:
                parser.parse_args(["fabric", "--help"])
            return fabric_main(a)
        parser.print_help()
        return 2
    except MrcError as e:
        print(f"mrc: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader went away (`mrc ... | head`): what was done stays done, nothing more is printed
        # (stdout goes to /dev/null, so the interpreter's last flush cannot fail again); 141 is what
        # a shell reports for a command that SIGPIPE ended
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
