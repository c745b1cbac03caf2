"""Kernel traffic routed by BGP: FRR's zebra, bgpd and bfdd in every switch
namespace of a fabric built with ``--routing bgp`` (docs/fabric.md, "Dynamic
routing (BGP) for kernel traffic").

The configuration is a datacenter fabric's (RFC 7938): eBGP only, every leaf
its own private ASN, the spines of a plane one ASN, unnumbered sessions on
the switch links (the interface names the peer), ECMP over every spine with
as-path multipath-relax, and BFD on every session so that a link that stops
passing packets is withdrawn in a few hundred ms, not at the hold time.
Leaves announce the kernel prefix of each host under them (``fd6d:<h>::/32``,
routed down the host's port by the fabric's plan); hosts keep static routes
to their leaf, as hosts under a ToR do. MRC's uSID routes are static and
untouched: BGP carries only the kernel's traffic.

Each switch's daemons live in ``/run/mrc/frr/<fabric>/<node>/`` (config, pid
files, sockets, log), owned by the ``frr`` user they run as; :func:`stop`
ends them by their pid files. Configs are pure functions of the topology.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time
from contextlib import suppress

from mrc.errors import FabricError
from mrc.fabric import ns
from mrc.fabric.topology import Topology

FRR_DIR = "/usr/lib/frr"
RUN_DIR = os.environ.get("MRC_FRR_DIR", "/run/mrc/frr")
DAEMONS = ("zebra", "bfdd", "bgpd")
#: BFD: a session is down after DETECT_MULT missed packets sent every INTERVAL_MS (both directions)
BFD_INTERVAL_MS = 50
BFD_DETECT_MULT = 3
#: BGP keepalive and hold time (s): BFD detects failures long before the hold time
KEEPALIVE_S, HOLD_S = 1, 3
#: router advertisements on the switch links (unnumbered BGP learns its peer's link-local from them), in s:
#: an interval in ms makes every zebra tick every 10 ms, which took a core of this machine on the
#: default fabric's 48 switches
RA_INTERVAL_S = 3
ASN_LEAF_BASE = 4_200_000_000  # private 4-byte ASNs (RFC 6996): one per leaf
ASN_SPINE_BASE = 4_200_100_000  # one per plane's spine tier


def leaf_asn(p: int, leaf: int) -> int:
    """The ASN of plane ``p``'s leaf ``leaf`` (each leaf its own, RFC 7938 section 5.2.1)."""
    return ASN_LEAF_BASE + (p << 8) + leaf


def spine_asn(p: int) -> int:
    """The ASN every spine of plane ``p`` shares."""
    return ASN_SPINE_BASE + p


def router_id(kind: int, p: int, index: int) -> str:
    """A unique BGP router id (an IPv4-shaped number; the fabric has no IPv4)."""
    return f"10.{kind}.{p}.{index}"


def config(t: Topology, node: str, bfd_ms: int = BFD_INTERVAL_MS) -> str:
    """The frr.conf of switch ``node`` (a leaf p<P>l<i> or a spine p<P>s<i>), with BFD every ``bfd_ms``
    on every session (0: no BFD, the sessions' own timers and the links' carrier only)."""
    p, kind, idx = _parse(t, node)
    if kind == "l":
        asn, peers = leaf_asn(p, idx), [f"s{s}" for s in range(t.spines)]
        networks = [t.inner_host_prefix(h) for h in t.hosts_of_leaf(idx)]
    else:
        asn, peers, networks = spine_asn(p), [f"l{leaf}" for leaf in range(t.leaves)], []
    # zebra installs routes with plain next hops, not kernel nexthop objects: FRR 8.4 lost track of
    # a group's members when a link went down and up, and left a healed spine out (FRR issue 14160)
    lines = ["frr defaults datacenter", f"hostname {node}", "log file {log} informational",
             "log timestamp precision 3", "no zebra nexthop kernel enable", "!"]
    for ifname in peers:
        lines += [f"interface {ifname}", f" ipv6 nd ra-interval {RA_INTERVAL_S}",
                  " no ipv6 nd suppress-ra", "!"]
    if bfd_ms:
        lines += ["bfd", " profile fabric", f"  detect-multiplier {BFD_DETECT_MULT}",
                  f"  receive-interval {bfd_ms}", f"  transmit-interval {bfd_ms}", " !", "!"]
    lines += [f"router bgp {asn}", f" bgp router-id {router_id(1 if kind == 'l' else 2, p, idx)}",
              " no bgp ebgp-requires-policy", " no bgp network import-check",
              " bgp bestpath as-path multipath-relax",
              " neighbor FABRIC peer-group", " neighbor FABRIC remote-as external",
              *([" neighbor FABRIC bfd", " neighbor FABRIC bfd profile fabric"] if bfd_ms else []),
              f" neighbor FABRIC timers {KEEPALIVE_S} {HOLD_S}", " neighbor FABRIC timers connect 1",
              " neighbor FABRIC advertisement-interval 0"]
    lines += [f" neighbor {ifname} interface peer-group FABRIC" for ifname in peers]
    lines += [" !", " address-family ipv6 unicast", *[f"  network {n}" for n in networks],
              "  neighbor FABRIC activate", "  maximum-paths 64", " exit-address-family", "!", ""]
    return "\n".join(lines)


def _parse(t: Topology, node: str) -> tuple[int, str, int]:
    if node not in t.switch_nodes():
        raise FabricError(f"{node} is not a switch of fabric {t.name}: BGP runs on p<plane>l<i> and p<plane>s<i>")
    p, rest = node[1:].split("l", 1) if "l" in node else node[1:].split("s", 1)
    return int(p), "l" if "l" in node else "s", int(rest)


def node_dir(t: Topology, node: str) -> str:
    """Where switch ``node``'s daemons keep their config, pid files, sockets and log."""
    return os.path.join(RUN_DIR, t.name, node)


def available() -> str | None:
    """None when FRR's daemons are installed, else what to do about it."""
    missing = [d for d in DAEMONS if not os.access(os.path.join(FRR_DIR, d), os.X_OK)]
    if missing or not shutil.which("vtysh"):
        return (f"--routing bgp needs FRR ({', '.join(missing) or 'vtysh'} missing): "
                "apt-get install frr (bash tools/setup.sh test installs it)")
    return None


def start(t: Topology, bfd_ms: int = BFD_INTERVAL_MS) -> None:
    """Write every switch's config and start its zebra, bfdd (with BFD: ``bfd_ms`` > 0) and bgpd
    (zebra first everywhere)."""
    why = available()
    if why:
        raise FabricError(why)
    import grp
    import pwd

    uid, gid = pwd.getpwnam("frr").pw_uid, grp.getgrnam("frr").gr_gid
    for node in t.switch_nodes():
        d = node_dir(t, node)
        os.makedirs(d, exist_ok=True)
        os.chown(d, uid, gid)
        with open(os.path.join(d, "frr.conf"), "w") as f:
            f.write(config(t, node, bfd_ms).replace("{log}", os.path.join(d, "frr.log")))
    # each daemon forks once it is ready (-d): in parallel over the switches
    for daemon in (d for d in DAEMONS if bfd_ms or d != "bfdd"):
        procs = [(node, ns.popen(t.ns(node), _argv(t, node, daemon), stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)) for node in t.switch_nodes()]
        for node, proc in procs:
            _, err = proc.communicate(timeout=60)
            if proc.returncode != 0:
                raise FabricError(f"{daemon} did not start in {t.ns(node)} (exit {proc.returncode}): "
                                  f"{err.strip()[-300:]}; its log: {node_dir(t, node)}/frr.log")


def _argv(t: Topology, node: str, daemon: str) -> list[str]:
    d = node_dir(t, node)
    argv = [os.path.join(FRR_DIR, daemon), "-d", "-f", os.path.join(d, "frr.conf"),
            "-i", os.path.join(d, f"{daemon}.pid"), "-z", os.path.join(d, "zserv.api"),
            "--vty_socket", d, "-A", "127.0.0.1", "-P", "0"]
    if daemon == "bfdd":
        argv += ["--bfdctl", os.path.join(d, "bfdd.sock")]
    return argv


def stop(name: str) -> int:
    """End every routing daemon of fabric ``name`` (all fabrics: ``name=None``) by its pid file and
    remove their directories. Returns how many processes were ended."""
    root = RUN_DIR if name is None else os.path.join(RUN_DIR, name)
    pids = []
    for dirpath, _, files in os.walk(root):
        for f in files:
            if f.endswith(".pid") and f[:-4] in DAEMONS:
                with suppress(OSError, ValueError), open(os.path.join(dirpath, f)) as fh:
                    pid = int(fh.read().strip())
                    if _is_frr(pid, dirpath):
                        pids.append(pid)
    ended = len(pids)
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if os.path.exists(f"/proc/{p}")]
        time.sleep(0.02)
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(root, ignore_errors=True)
    with suppress(OSError):
        os.rmdir(RUN_DIR)  # only when no other fabric's daemons live there
    return ended


def _is_frr(pid: int, dirpath: str) -> bool:
    """Whether ``pid`` is one of our daemons (its command line names its directory): a pid file
    that outlived its process must not end an unrelated process that took the number."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return dirpath.encode() in f.read()
    except OSError:
        return False


def vtysh(t: Topology, node: str, *commands: str, timeout: float = 10.0) -> str:
    """Run vtysh commands against switch ``node``'s daemons (one vtysh process); their output."""
    argv = ["vtysh", "--vty_socket", node_dir(t, node)]
    for c in commands:
        argv += ["-c", c]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise FabricError(f"vtysh in {t.ns(node)}: {'; '.join(commands)}: {(r.stderr or r.stdout).strip()[-300:]}")
    return r.stdout


def _json_documents(text: str) -> list:
    """The JSON documents printed one after another (vtysh's answers to several commands)."""
    dec, out, i = json.JSONDecoder(), [], 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return out
        doc, i = dec.raw_decode(text, i)
        out.append(doc)


def sessions(t: Topology, node: str) -> list[dict]:
    """Switch ``node``'s BGP sessions: peer interface, state, prefixes received, and its BFD state."""
    with_bfd = os.path.exists(os.path.join(node_dir(t, node), "bfdd.pid"))  # (a fabric built without BFD)
    try:
        docs = _json_documents(vtysh(t, node, "show bgp ipv6 unicast summary json",
                                     *(["show bfd peers json"] if with_bfd else [])))
        summary, bfd = docs[0], docs[1] if with_bfd else []
    except (FabricError, ValueError, IndexError, subprocess.TimeoutExpired) as e:
        return [{"node": node, "peer": "?", "state": f"no answer ({str(e)[:80]})", "prefixes": 0, "bfd": "?"}]
    bfd_of = {b.get("interface"): b.get("status") for b in bfd}
    out = []
    for peer, v in sorted(summary.get("peers", {}).items()):
        out.append({"node": node, "peer": peer, "state": v.get("state", "?"),
                    "prefixes": v.get("pfxRcd", 0), "bfd": bfd_of.get(peer, "none")})
    return out


def all_sessions(t: Topology) -> list[dict]:
    """Every switch's sessions (the switches asked 8 at a time: each answer takes a vtysh process)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=8) as pool:
        return [s for per in pool.map(lambda node: sessions(t, node), t.switch_nodes()) for s in per]


def expected_sessions(t: Topology) -> int:
    """Sessions a fully up fabric has, counted at both ends."""
    return 2 * t.planes * t.leaves * t.spines


def wait_converged(t: Topology, timeout: float = 60.0, progress=None, bfd: bool = True) -> float:
    """Wait until every leaf has a route to every other leaf's hosts through every spine (which, with
    two leaves or more, needs every session up) and every session is Established with its BFD session
    up (until then a failure is seen only at the hold time; ``bfd=False``: a fabric without BFD).
    Returns seconds;
    FabricError naming what is missing after ``timeout``. The routes are read from the kernel, which
    is cheap; the daemons are asked only once the routes are complete."""
    start = time.monotonic()
    while True:
        missing = missing_routes(t)
        ss = all_sessions(t) if not missing or progress or time.monotonic() - start > timeout else None
        up = [s for s in ss or [] if s["state"] == "Established" and (s["bfd"] == "up" or not bfd)]
        if progress and ss is not None:
            progress(len(up), expected_sessions(t))
        if not missing and len(up) == expected_sessions(t):
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            down = [f"{s['node']}/{s['peer']} {s['state']}, BFD {s['bfd']}" for s in ss or []
                    if s["state"] != "Established" or (bfd and s["bfd"] != "up")]
            what = (f"{len(down)} sessions not Established with BFD up ({', '.join(down[:5])})" if down else
                    f"routes missing or without every spine ({', '.join((missing or [])[:5])})")
            raise FabricError(f"BGP did not converge in {timeout:g} s: {what}; see `mrc fabric status "
                              f"--name {t.name}` and the logs under {os.path.join(RUN_DIR, t.name)}")
        time.sleep(0.05 if ss is None else 0.2)


def ecmp_routes(t: Topology, node: str) -> dict[str, int]:
    """The kernel routes BGP installed in switch ``node``: prefix -> number of next hops."""
    r = ns.command(t.ns(node), ["ip", "-6", "-j", "route", "show", "proto", "bgp"], capture_output=True, text=True)
    routes = json.loads(r.stdout or "[]") if r.returncode == 0 else []
    return {str(ipaddress.ip_network(x["dst"])): len(x.get("nexthops", [])) or 1 for x in routes}


def missing_routes(t: Topology) -> list[str]:
    """``node:prefix`` of every leaf route that is absent or lacks a spine."""
    out = []
    for p in range(t.planes):
        for leaf in range(t.leaves):
            node = t.leaf(p, leaf)
            routes = ecmp_routes(t, node)
            for h in range(t.hosts):
                prefix = str(ipaddress.ip_network(t.inner_host_prefix(h)))
                if t.host_leaf(h) != leaf and routes.get(prefix, 0) < t.spines:
                    out.append(f"{node}:{t.inner_host_prefix(h)}")
    return out


def flow_spine(t: Topology, src: int, dst: int, plane: int, sport: int, dport: int) -> str | None:
    """The spine that ECMP gives the TCP flow (``src``'s plane address, ``sport``) -> (``dst``'s,
    ``dport``) on ``plane``, found by what it does: a short connection (closed with a reset, so that
    its 4-tuple is free again at once) and the byte counters of the spines' ports toward ``src``'s
    leaf. None when no spine carried it (no route, or nothing listening at ``dport``: see
    :func:`sport_through`, which listens)."""
    import socket
    import struct

    leaf_if = f"l{t.host_leaf(src)}"
    spines = [t.spine(plane, s) for s in range(t.spines)]

    def rx() -> dict[str, int]:
        out = {}
        for node in spines:
            r = ns.command(t.ns(node), ["ip", "-j", "-s", "link", "show", leaf_if], capture_output=True, text=True)
            out[node] = json.loads(r.stdout)[0]["stats64"]["rx"]["bytes"] if r.returncode == 0 else 0
        return out

    before = rx()
    c = ns.run_in(t.ns(t.host(src)), lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM))
    try:
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        c.settimeout(2)
        c.bind((t.inner_address(src, plane), sport))
        c.connect((t.inner_address(dst, plane), dport))
        c.sendall(bytes(256 << 10))
        c.shutdown(socket.SHUT_WR)
        while c.recv(1 << 16):  # until the listener has read it all and closed
            pass
    except OSError:
        return None
    finally:
        c.close()
    after = rx()
    grew = {n: after[n] - before[n] for n in spines}
    best = max(grew, key=grew.get)
    return best if grew[best] > 128 << 10 else None


def sport_through(t: Topology, src: int, dst: int, plane: int, spine: int, dport: int,
                  first: int = 41000, tries: int = 64) -> int:
    """A source port whose TCP flow from ``src`` to ``dst`` (``dport``) ECMP hashes through
    ``spine`` of ``plane`` (:func:`flow_spine`): how a bench puts a kernel flow where its fault is."""
    import socket
    import threading

    want = t.spine(plane, spine)
    srv = ns.run_in(t.ns(t.host(dst)), lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM))
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("::", dport))
    srv.listen(8)
    srv.settimeout(0.2)
    done = threading.Event()

    def drain() -> None:
        while not done.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                continue
            with suppress(OSError):
                while c.recv(1 << 20):
                    pass
            c.close()

    th = threading.Thread(target=drain, daemon=True)
    th.start()
    try:
        for sport in range(first, first + tries):
            if flow_spine(t, src, dst, plane, sport, dport) == want:
                return sport
    finally:
        done.set()
        th.join(5)
        srv.close()
    raise FabricError(f"no source port in {first}..{first + tries - 1} hashes through {want}")
