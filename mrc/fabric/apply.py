"""Execute a fabric plan with pyroute2, tear it down, and inject real faults.

State of a running fabric (its topology and the faults in force) lives in
``/run/mrc/fabrics/<name>.json`` so that every ``mrc fabric`` command, from
any process, finds it. Namespaces are named ``mrc-<name>-<node>``; ``down
--all`` removes every ``mrc-*`` namespace even when no state file survived.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import json
import os
import socket
import subprocess
import threading
import time
from contextlib import contextmanager, suppress
from dataclasses import asdict

from mrc.errors import FabricError, PrivilegeError, UsageError
from mrc.fabric import nl, ns, qos, resolver, srv6bpf
from mrc.fabric.plan import Op, link_ops, plan
from mrc.fabric.topology import NS_PREFIX, Link, Topology
from mrc.units import parse_rate  # noqa: F401  (mrc fabric and the benches read rates through here)

STATE_DIR = os.environ.get("MRC_STATE_DIR", "/run/mrc/fabrics")


def exit_cleanly_on_sigterm() -> None:
    """Make SIGTERM (kill, a CI timeout) end this process like Ctrl-C, so that
    every ``finally`` runs and what a command built is torn down. A child
    forked later (pyroute2 forks one to make each namespace, and ends it
    with SIGTERM) inherits the handler: there it ends at once, as the default
    action would, instead of running the parent's ``finally`` blocks."""
    import signal
    import sys

    owner = os.getpid()

    def on_term(signum, frame):
        if os.getpid() != owner:
            os._exit(128 + signum)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)


def require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise PrivilegeError(
            f"{what} needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN to create namespaces); run it with sudo"
        )


def _pyroute2():
    from pyroute2 import IPRoute, netns

    return IPRoute, netns


# --------------------------------------------------------------------- state
def state_path(name: str) -> str:
    return os.path.join(STATE_DIR, f"{name}.json")


def topology_path(name: str) -> str:
    """The fabric's topology file for the stack (mrc.fabric.resolver.write)."""
    return os.path.join(STATE_DIR, f"{name}.topology")


def save_state(t: Topology, faults: dict | None = None, queues: dict | None = None,
               srv6: str | None = None) -> None:
    """Write the fabric's state; ``queues`` (switch port -> its queue, see
    :func:`set_queues`) and ``srv6`` (:func:`srv6`) are kept from the file when not given."""
    os.makedirs(STATE_DIR, exist_ok=True)
    old = {}
    with suppress(FileNotFoundError, ValueError):
        with open(state_path(t.name)) as f:
            old = json.load(f)
    queues = old.get("queues") if queues is None else queues
    srv6 = old.get("srv6", "kernel") if srv6 is None else srv6
    tmp = state_path(t.name) + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"topology": t.to_dict(), "faults": faults or {}, "queues": queues or {},
                   "srv6": srv6, "created": time.time()}, f, indent=1)
    os.replace(tmp, state_path(t.name))


_held = threading.local()  # the fabrics whose lock this thread holds, and how deep


@contextmanager
def state_lock(name: str):
    """Hold fabric ``name`` for one change: a fault operation (fail, heal, loss, rate, queues: see
    :func:`_one_at_a_time`) or a read-modify-write of its state file. They run from several
    processes and threads at once (the dash's flap thread beside a heal from the page, `mrc fabric`
    beside the dash). Interleaved, a heal wrote back the faults it had read at its start, bringing
    back faults another writer had just cleared (the page showed healed links lossy for good), and
    re-added a link's routes just as the flap took that link down (ENETDOWN: the heal failed).
    Re-entrant within a thread; an flock across processes."""
    depth = getattr(_held, "names", None)
    if depth is None:
        depth = _held.names = {}
    if depth.get(name):
        depth[name] += 1
        try:
            yield
        finally:
            depth[name] -= 1
        return
    os.makedirs(STATE_DIR, exist_ok=True)
    path = os.path.join(STATE_DIR, f"{name}.lock")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as e:
        raise FabricError(f"fabric {name} cannot be locked for a change: {path}: {e.strerror} (it must be "
                          "a plain file or absent: remove it)") from e
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        depth[name] = 1
        yield
    finally:
        depth.pop(name, None)
        os.close(fd)  # and the lock with it


def _one_at_a_time(fn):
    """``fn(name, ...)`` changes fabric ``name`` while no other change runs (:func:`state_lock`)."""
    @functools.wraps(fn)
    def run(name: str, *args, **kw):
        with state_lock(name):
            return fn(name, *args, **kw)
    return run


def srv6(name: str) -> str:
    """What runs fabric ``name``'s SRv6: ``kernel`` (seg6local and seg6 routes) or ``tc-bpf``
    (a kernel without SRv6: the same behaviours as tc-BPF programs, mrc.fabric.srv6bpf)."""
    return load_state(name).get("srv6", "kernel")


def load_state(name: str) -> dict:
    try:
        with open(state_path(name)) as f:
            return json.load(f)
    except FileNotFoundError:
        running = sorted(list_fabrics())
        hint = f"running fabrics: {', '.join(running)}" if running else "no fabric is running"
        raise FabricError(f"no fabric named {name!r} ({hint}); start one with `mrc fabric up --name {name}`") from None


def load_topology(name: str) -> Topology:
    return Topology.from_dict(load_state(name)["topology"])


def list_fabrics() -> list[str]:
    names = set()
    with suppress(FileNotFoundError):
        names.update(f[:-5] for f in os.listdir(STATE_DIR) if f.endswith(".json"))
    for n in project_namespaces(ns.list_netns()):
        names.add(n[len(NS_PREFIX):].split("-", 1)[0])
    return sorted(names)


def project_namespaces(names: list[str], fabric: str | None = None) -> list[str]:
    """The namespaces this project made (all of them, or one fabric's)."""
    prefix = f"{NS_PREFIX}{fabric}-" if fabric else NS_PREFIX
    return [n for n in names if n.startswith(prefix)]


# ------------------------------------------------------------------ executor
class Executor:
    """Runs plan operations; keeps one netlink socket per namespace."""

    def __init__(self, t: Topology) -> None:
        self.t = t
        self.IPRoute, self.netns = _pyroute2()
        self._ipr: dict[str, object] = {}
        self._nl: dict[str, nl.NetlinkRoute] = {}
        self._idx: dict[tuple[str, str], int] = {}
        self.srv6_bpf = False  # a kernel without SRv6 refused a seg6local or seg6 route: tc BPF instead
        self._segs: dict[tuple[str, str], int] = {}  # a host port -> its encap program's segs map

    def ipr(self, node: str):
        if node not in self._ipr:
            self._ipr[node] = self.IPRoute(netns=self.t.ns(node))
        return self._ipr[node]

    def raw(self, node: str) -> nl.NetlinkRoute:
        if node not in self._nl:
            sock = ns.run_in(self.t.ns(node), lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))
            self._nl[node] = nl.NetlinkRoute(sock)
        return self._nl[node]

    def index(self, node: str, ifname: str) -> int:
        key = (node, ifname)
        if key not in self._idx:
            found = self.ipr(node).link_lookup(ifname=ifname)
            if not found:
                raise FabricError(f"interface {ifname} not found in {self.t.ns(node)}")
            self._idx[key] = found[0]
        return self._idx[key]

    def close(self) -> None:
        for i in self._ipr.values():
            with suppress(Exception):
                i.close()
        for r in self._nl.values():
            r.close()
        for fd in self._segs.values():
            os.close(fd)
        self._ipr.clear()
        self._nl.clear()
        self._segs.clear()

    def run(self, ops: list[Op], exist_ok: bool = False) -> None:
        for op in ops:
            try:
                getattr(self, "op_" + op.kind)(op.node, **op.args)
            except Exception as e:
                # OSError carries errno, pyroute2's NetlinkError carries code
                code = getattr(e, "errno", None) or getattr(e, "code", None)
                if exist_ok and code == errno.EEXIST:
                    continue
                raise FabricError(f"{self.t.ns(op.node)}: {op.kind} {op.args}: {e}") from e

    # one method per op kind ----------------------------------------------
    def op_netns(self, node: str) -> None:
        self.netns.create(self.t.ns(node))

    def op_sysctl(self, node: str, values: dict) -> None:
        ns.write_sysctls(self.t.ns(node), values)

    def op_up(self, node: str, ifname: str) -> None:
        self.ipr(node).link("set", index=self.index(node, ifname), state="up")

    def op_down(self, node: str, ifname: str) -> None:
        self.ipr(node).link("set", index=self.index(node, ifname), state="down")

    def op_mtu(self, node: str, ifname: str, mtu: int) -> None:
        self.ipr(node).link("set", index=self.index(node, ifname), mtu=mtu)

    def op_bridge(self, node: str, ifname: str) -> None:
        self.ipr(node).link("add", ifname=ifname, kind="bridge")

    def op_veth(self, node: str, ifname: str, peer_node: str, peer_ifname: str,
                address: str | None = None, peer_address: str | None = None) -> None:
        peer = {"ifname": peer_ifname, "net_ns_fd": self.t.ns(peer_node)}
        extra = {}
        if address:
            extra["address"] = address
            peer["address"] = peer_address
        self.ipr(node).link("add", ifname=ifname, kind="veth", peer=peer, **extra)

    def op_neigh(self, node: str, ifname: str, address: str, lladdr: str) -> None:
        # NUD_PERMANENT (0x80); "replace" so that a heal simply rewrites it
        self.ipr(node).neigh("replace", dst=address, lladdr=lladdr, ifindex=self.index(node, ifname),
                             state=0x80, family=socket.AF_INET6)

    def op_master(self, node: str, ifname: str, master: str) -> None:
        self.ipr(node).link("set", index=self.index(node, ifname), master=self.index(node, master))

    def op_addr(self, node: str, ifname: str, address: str, prefixlen: int) -> None:
        # IFA_F_NODAD: the address is usable at once (no duplicate detection wait)
        self.ipr(node).addr("add", index=self.index(node, ifname), address=address,
                            prefixlen=prefixlen, flags=0x02)

    def op_route(self, node: str, dst: str, gateway: str, ifname: str) -> None:
        self.ipr(node).route("add", dst=dst, gateway=gateway, oif=self.index(node, ifname))

    def op_rule(self, node: str, src: str, table: int, priority: int) -> None:
        self.ipr(node).rule("add", family=socket.AF_INET6, src=src, src_len=128,
                            table=table, priority=priority)

    def op_nft(self, node: str, script: str) -> None:
        _nft(self.t, node, script)

    def op_end(self, node: str, prefix: str, ifname: str) -> None:
        try:
            self.raw(node).add(prefix, self.index(node, ifname), nl.end_next_csid(32, 16))
        except OSError as e:
            if e.errno != errno.EOPNOTSUPP:
                raise
            srv6bpf.end_program(self.t, node, prefix)  # a kernel without SRv6: the same End in tc BPF
            self.srv6_bpf = True

    def op_dt6(self, node: str, prefix: str, ifname: str, table: int) -> None:
        try:
            self.raw(node).add(prefix, self.index(node, ifname), nl.end_dt6(table))
        except OSError as e:
            if e.errno != errno.EOPNOTSUPP:
                raise
            self._host_port(node, ifname)  # the End.DT6 (and the encap) in tc BPF
            self.srv6_bpf = True

    def op_encap(self, node: str, dst: str, segment: str, ifname: str, prefsrc: str | None = None,
                 table: int = nl.RT_TABLE_MAIN) -> None:
        oif = self.index(node, ifname)
        try:
            self.raw(node).add(dst, oif, nl.encap_red(segment), table=table, prefsrc=prefsrc)
            return
        except OSError as e:
            if e.errno != errno.EOPNOTSUPP:
                raise
        # a kernel without SRv6: a plain route to the port's leaf, with room for the outer header
        # the port's encap program adds (with this segment)
        self.raw(node).add(dst, oif, None, table=table, prefsrc=prefsrc, gateway=Link.b_ll,
                           mtu=srv6bpf.ENCAP_ROUTE_MTU)
        srv6bpf.set_segment(self._host_port(node, ifname), dst, segment)
        self.srv6_bpf = True

    def _host_port(self, node: str, ifname: str) -> int:
        """The host port's encap and End.DT6 programs (srv6bpf.host_port), attached once per
        executor; returns its ``segs`` map, kept open until :meth:`close`."""
        key = (node, ifname)
        if key not in self._segs:
            self._segs[key] = srv6bpf.host_port(self.t, node, ifname)
        return self._segs[key]


# ------------------------------------------------------------------ up/down
CARRIER_TIMEOUT_S = 10.0


def veths_set_up(ops: list[Op]) -> set[tuple[str, str]]:
    """(node, ifname) of every veth end the plan creates and sets up."""
    ends = set()
    for op in ops:
        if op.kind == "veth":
            ends |= {(op.node, op.args["ifname"]), (op.args["peer_node"], op.args["peer_ifname"])}
    return ends & {(op.node, op.args["ifname"]) for op in ops if op.kind == "up"}


def wait_carrier(ex: Executor, ends: set[tuple[str, str]], timeout: float = CARRIER_TIMEOUT_S) -> float:
    """Wait until every veth end in ``ends`` is operationally up (carrier on both sides): a
    link set up has no carrier yet, and a packet sent on it then is dropped.
    Returns seconds waited; raises FabricError naming the ends still down after ``timeout``."""
    start = time.monotonic()
    by_node: dict[str, list[str]] = {}
    for n, i in sorted(ends):
        by_node.setdefault(n, []).append(i)
    while True:
        down = []
        for n, names in by_node.items():
            links = ex.raw(n).links()  # one dump per namespace
            down += [(n, i) for i in names if not links.get(i, {}).get("up")]
        if not down:
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            shown = ", ".join(f"{ex.t.ns(n)}/{i}" for n, i in down[:6]) + (" ..." if len(down) > 6 else "")
            raise FabricError(f"{len(down)} of {len(ends)} links have no carrier {timeout:g} s after being set up "
                              f"({shown}): see `ip -n NAMESPACE link` for their state")
        time.sleep(0.02)


def up(t: Topology, progress=None) -> float:
    """Build fabric ``t``, and return once every link has carrier; on any failure remove whatever
    was built. Returns seconds."""
    require_root("mrc fabric up")
    existing = project_namespaces(ns.list_netns(), t.name)
    if existing or os.path.exists(state_path(t.name)):
        raise UsageError(
            f"a fabric named {t.name!r} already exists; pick another --name or remove it with "
            f"`mrc fabric down --name {t.name}`"
        )
    start = time.monotonic()
    ops = plan(t)
    ex = Executor(t)
    try:
        save_state(t)
        resolver.write(t, topology_path(t.name))
        batch = max(1, len(ops) // 20)
        for i in range(0, len(ops), batch):
            ex.run(ops[i:i + batch])
            if progress:
                progress(min(i + batch, len(ops)), len(ops))
        wait_carrier(ex, veths_set_up(ops))
        if ex.srv6_bpf:
            save_state(t, srv6="tc-bpf")
    except BaseException:
        ex.close()
        down(t.name)
        raise
    ex.close()
    return time.monotonic() - start


def down(name: str | None = None, all_fabrics: bool = False) -> list[str]:
    """Remove one fabric's namespaces (or every ``mrc-*`` one). Returns the names removed."""
    require_root("mrc fabric down")
    _, netns = _pyroute2()
    targets = project_namespaces(ns.list_netns(), None if all_fabrics else name)
    for n in targets:
        with suppress(FileNotFoundError):
            netns.remove(n)
    if all_fabrics:
        with suppress(FileNotFoundError):
            for f in os.listdir(STATE_DIR):
                os.unlink(os.path.join(STATE_DIR, f))
    elif name:
        for path in (state_path(name), topology_path(name), os.path.join(STATE_DIR, f"{name}.lock")):
            with suppress(FileNotFoundError):
                os.unlink(path)
    return targets


# -------------------------------------------------------------------- faults
def _links_of_target(t: Topology, target: str) -> list:
    """Links named by a LINK or SWITCH (or host) argument."""
    if target in t.switch_nodes() or target in t.host_nodes():
        return t.links_of(target)
    return [t.link(target)]


def _set_link(ex: Executor, link, up: bool) -> None:
    for node, ifname in ((link.a_node, link.a_if), (link.b_node, link.b_if)):
        (ex.op_up if up else ex.op_down)(node, ifname)


@_one_at_a_time
def fail(name: str, target: str) -> list[str]:
    """Take a link (both veth ends) or every link of a switch down."""
    require_root("mrc fabric fail")
    t = load_topology(name)
    links = _links_of_target(t, target)
    ex = Executor(t)
    try:
        for link in links:
            _set_link(ex, link, up=False)
    finally:
        ex.close()
    _record(t, "down", [link.name for link in links], True)
    return [link.name for link in links]


@_one_at_a_time
def heal(name: str, target: str | None = None) -> list[str]:
    """Bring links back up and re-apply their addresses and routes; clear loss and rate faults."""
    require_root("mrc fabric heal")
    t = load_topology(name)
    links = t.links() if target is None else _links_of_target(t, target)
    faults = load_state(name)["faults"]
    ex = Executor(t)
    try:
        for link in links:
            f = faults.get(link.name, {})
            # a link that was down lost its addresses and routes: re-apply all
            # of them (an operation that still holds answers EEXIST)
            ex.run(link_ops(t, link.name), exist_ok=True)
            if f.get("loss") is not None:
                _clear_loss(t, link)
            if f.get("rate") is not None:
                _clear_rate(ex, link)
    finally:
        ex.close()
    rated = {link.name for link in links if faults.get(link.name, {}).get("rate") is not None}
    for link in links:
        faults.pop(link.name, None)
    save_state(t, faults)
    if rated:
        _restore_queues(t, rated)
    return [link.name for link in links]


def _record(t: Topology, key: str, links: list[str], value) -> None:
    with state_lock(t.name):
        state = load_state(t.name)
        for ln in links:
            entry = state["faults"].setdefault(ln, {})
            if value is None:
                entry.pop(key, None)
            else:
                entry[key] = value
            if not entry:
                state["faults"].pop(ln)
        save_state(t, state["faults"])


def _switch_end(link) -> tuple[str, str]:
    """The end of a link that sits in a switch (forwarded traffic passes its nftables hook)."""
    return link.b_node, link.b_if


def _nft(t: Topology, node: str, script: str) -> None:
    r = ns.command(t.ns(node), ["nft", "-f", "-"], input=script, text=True, capture_output=True)
    if r.returncode != 0:
        raise FabricError(f"nft in {t.ns(node)} failed: {r.stderr.strip()} (is nftables installed?)")


@_one_at_a_time
def loss(name: str, target: str, percent: float) -> None:
    """Drop ``percent``% of the packets crossing a link, in both directions
    (nftables ``numgen random`` in the switch at its upper end; no netem here)."""
    require_root("mrc fabric loss")
    if not 0 <= percent <= 100:
        raise UsageError(f"loss must be a percentage between 0 and 100, got {percent}")
    t = load_topology(name)
    link = t.link(target)
    node, ifname = _switch_end(link)
    _nft(t, node, loss_ruleset(ifname, percent))
    _record(t, "loss", [link.name], percent)


def loss_ruleset(ifname: str, percent: float) -> str:
    """The nftables table that drops ``percent``% of what crosses ``ifname``
    (numgen gives 0..9999: two decimals of precision; 100% drops everything).

    >>> 'numgen' in loss_ruleset('l0', 100), '< 2000' in loss_ruleset('l0', 20)
    (False, True)
    """
    table = f"mrcloss_{ifname}"
    threshold = int(round(percent * 100))
    match = "" if threshold >= 10000 else f"numgen random mod 10000 < {threshold} "
    return (f"table inet {table}\ndelete table inet {table}\n"
            f"table inet {table} {{\n chain lossfwd {{\n  type filter hook forward priority 0; policy accept;\n"
            f"  iifname \"{ifname}\" {match}counter drop\n"
            f"  oifname \"{ifname}\" {match}counter drop\n }}\n}}\n")


def _clear_loss(t: Topology, link) -> None:
    node, ifname = _switch_end(link)
    _nft(t, node, f"table inet mrcloss_{ifname}\ndelete table inet mrcloss_{ifname}\n")


@_one_at_a_time
def rate(name: str, target: str, rate_spec: str) -> int:
    """Limit a link to a rate with tbf on both ends' egress (a real queue)."""
    require_root("mrc fabric rate")
    bps = parse_rate(rate_spec)
    if bps <= 0:
        raise UsageError("rate must be positive")
    t = load_topology(name)
    link = t.link(target)
    queued = [p for p in sum(qos.ports(t, link.name), []) if _queue_key(p) in load_state(name).get("queues", {})]
    if queued:  # the tbf stands in for the switch queue (program included) until the heal
        qos.apply_ports(t, queued, qos.PortQoS(0))
    ex = Executor(t)
    try:
        for node, ifname in ((link.a_node, link.a_if), (link.b_node, link.b_if)):
            idx = ex.index(node, ifname)
            _del_root_qdisc(ex, node, idx)
            # tbf, burst 256 KB, latency 20 ms (docs/fabric.md, "Kernel traps")
            ex.ipr(node).tc("add", "tbf", index=idx, handle="1:", rate=bps // 8,
                            burst=256 * 1024, latency=20_000)
    finally:
        ex.close()
    _record(t, "rate", [link.name], bps)
    return bps


# ------------------------------------------------------- switch queues (mrc.fabric.qos)
@_one_at_a_time
def set_queues(name: str, target: str | None, q: qos.PortQoS) -> int:
    """Give the switch ports of ``target`` (a link: its ends; a switch or a
    host: its ports; None: every port) the queue ``q``, and the hosts' ports
    among them a NIC's queue at the same rate (qos.nic); remember them (rate
    0 removes them). Returns how many switch ports got ``q``."""
    require_root("mrc fabric qos")
    t = load_topology(name)
    sw, hosts = qos.ports(t, target)
    qos.apply_ports(t, sw, q)
    qos.apply_ports(t, hosts, qos.nic(q))
    st = load_state(name)  # (the fabric is held: _one_at_a_time)
    queues = st.get("queues", {})
    for ports, pq in ((sw, q), (hosts, qos.nic(q))):
        for port in ports:
            if q.rate_bps:
                queues[_queue_key(port)] = asdict(pq)
            else:
                queues.pop(_queue_key(port), None)
    save_state(t, st["faults"], queues)
    return len(sw)


def _restore_queues(t: Topology, links: set[str]) -> None:
    """Put back the queues a rate fault's tbf replaced (its heal removed both)."""
    queues = load_state(t.name).get("queues", {})
    sw, hosts = qos.ports(t)
    for port in sw + hosts:
        q = queues.get(_queue_key(port))
        if port[2] in links and q:
            qos.apply_ports(t, [port], qos.PortQoS(**q))


def _queue_key(port: tuple[str, str, str]) -> str:
    """How the state file names a port's queue: node/ifname."""
    return f"{port[0]}/{port[1]}"


def queue_stats(name: str, target: str | None = None) -> list[dict]:
    """Counters of the switch ports with a queue (all, or ``target``'s)."""
    require_root("mrc fabric stats")
    return qos.stats(load_topology(name), target)


def _del_root_qdisc(ex: Executor, node: str, idx: int) -> None:
    try:
        ex.ipr(node).tc("del", index=idx, root=True)
    except Exception as e:
        if getattr(e, "code", None) not in (errno.ENOENT, errno.EINVAL):  # none installed
            raise FabricError(f"cannot remove the rate limit in {ex.t.ns(node)}: {e}") from e


def _clear_rate(ex: Executor, link) -> None:
    for node, ifname in ((link.a_node, link.a_if), (link.b_node, link.b_if)):
        _del_root_qdisc(ex, node, ex.index(node, ifname))


def flap(name: str, target: str, period: float, count: int | None = None, duration: float | None = None,
         on_event=None) -> int:
    """Fail and heal a link every ``period`` seconds until ``count`` cycles or
    ``duration`` seconds pass (or Ctrl-C); always leaves the link healed."""
    t = load_topology(name)
    link = t.link(target)
    cycles = 0
    start = time.monotonic()
    try:
        while (count is None or cycles < count) and (duration is None or time.monotonic() - start < duration):
            fail(name, link.name)
            if on_event:
                on_event("down", link.name, time.monotonic() - start)
            time.sleep(period / 2)
            heal(name, link.name)
            if on_event:
                on_event("up", link.name, time.monotonic() - start)
            cycles += 1
            time.sleep(period / 2)
    finally:
        heal(name, link.name)
    return cycles


# ------------------------------------------------------- wire-sized packets
def wire_sized(t: Topology, segs: int = 1) -> int:
    """Make every switch interface carry wire-size packets (``gso_max_segs``).

    Kernel TCP hands 64 KB GSO super-packets to a veth and they cross the
    emulated switches whole: one route lookup per 64 KB, which no real switch
    does. With ``gso_max_segs 1`` on the switch interfaces, a super-packet is
    cut into MTU-size packets at the first switch (the leaf), so the fabric
    forwards the same packet sizes a real one would. The hosts keep their
    GSO, as a host keeps TSO on a real NIC. MRC is unaffected (it sends
    packets of at most the MTU). Returns the number of interfaces set."""
    require_root("wire-sized fabric")
    per_node: dict[str, list[str]] = {}
    switches = set(t.switch_nodes())
    for link in t.links():
        for node, ifname in ((link.a_node, link.a_if), (link.b_node, link.b_if)):
            if node in switches:
                per_node.setdefault(node, []).append(ifname)
    for node, ifnames in per_node.items():
        script = "".join(f"link set dev {i} gso_max_segs {segs}\n" for i in ifnames)
        r = subprocess.run(["ip", "-n", t.ns(node), "-batch", "-"], input=script, text=True, capture_output=True)
        if r.returncode != 0:
            raise FabricError(f"setting gso_max_segs in {t.ns(node)} failed: {r.stderr.strip()}")
    return sum(len(v) for v in per_node.values())
