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
import subprocess
import threading
import time
from contextlib import contextmanager, suppress
from dataclasses import asdict

from mrc.errors import FabricError, PrivilegeError, UsageError
from mrc.fabric import bgp, gsobpf, ns, qos, resolver
from mrc.fabric.executor import Executor, nft, pyroute2
from mrc.fabric.plan import Op, link_ops, plan
from mrc.fabric.topology import NS_PREFIX, Topology
from mrc.units import parse_rate

STATE_DIR = os.environ.get("MRC_STATE_DIR", "/run/mrc/fabrics")


def require_root(what: str) -> None:
    """Raise PrivilegeError, naming ``what``, unless running as root."""
    if os.geteuid() != 0:
        raise PrivilegeError(
            f"{what} needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN to create namespaces); run it with sudo"
        )


# --------------------------------------------------------------------- state
def state_path(name: str) -> str:
    """The state file of fabric ``name``."""
    return os.path.join(STATE_DIR, f"{name}.json")


def topology_path(name: str) -> str:
    """The fabric's topology file for the stack (mrc.fabric.resolver.write)."""
    return os.path.join(STATE_DIR, f"{name}.topology")


def save_state(t: Topology, faults: dict | None = None, queues: dict | None = None,
               srv6: str | None = None, routing: str | None = None, bfd_ms: int | None = None) -> None:
    """Write the fabric's state; ``queues`` (switch port -> its queue, see
    :func:`set_queues`), ``srv6`` (:func:`srv6`) and ``routing`` (:func:`routing`) are kept from
    the file when not given."""
    os.makedirs(STATE_DIR, exist_ok=True)
    old = {}
    with suppress(FileNotFoundError, ValueError):
        with open(state_path(t.name)) as f:
            old = json.load(f)
    queues = old.get("queues") if queues is None else queues
    srv6 = old.get("srv6", "kernel") if srv6 is None else srv6
    routing = old.get("routing", "static") if routing is None else routing
    bfd_ms = old.get("bfd_ms") if bfd_ms is None else bfd_ms
    tmp = state_path(t.name) + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"topology": t.to_dict(), "faults": faults or {}, "queues": queues or {},
                   "srv6": srv6, "routing": routing, "bfd_ms": bfd_ms, "created": time.time()}, f, indent=1)
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
    fd = _lock_file(name, path)
    try:
        depth[name] = 1
        yield
    finally:
        depth.pop(name, None)
        if not os.path.exists(state_path(name)):  # no such fabric (any more): its lock goes too
            with suppress(FileNotFoundError):
                os.unlink(path)
        os.close(fd)  # and the lock with it


def _lock_file(name: str, path: str) -> int:
    """The lock file at ``path``, open and locked: the file the path names once locked (a holder
    that found no fabric removes it as it lets go, so a waiter may wake on a removed file, and then
    takes the new one)."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError as e:
            raise FabricError(f"fabric {name} cannot be locked for a change: {path}: {e.strerror} (it must "
                              "be a plain file or absent: remove it)") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


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


def routing(name: str) -> str:
    """How fabric ``name`` routes kernel traffic: ``static`` or ``bgp`` (mrc.fabric.plan.ROUTINGS)."""
    return load_state(name).get("routing", "static")


def load_state(name: str) -> dict:
    """Fabric ``name``'s state: topology, faults and queues in force (FabricError if it is not up)."""
    try:
        with open(state_path(name)) as f:
            return json.load(f)
    except FileNotFoundError:
        running = sorted(list_fabrics())
        hint = f"running fabrics: {', '.join(running)}" if running else "no fabric is running"
        raise FabricError(f"no fabric named {name!r} ({hint}); start one with `mrc fabric up --name {name}`") from None


def load_topology(name: str) -> Topology:
    """The topology fabric ``name`` was built with."""
    return Topology.from_dict(load_state(name)["topology"])


def list_fabrics() -> list[str]:
    """The names of the fabrics that are up (state files or namespaces)."""
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


def up(t: Topology, progress=None, routing: str = "static", bgp_progress=None,
       bfd_ms: int = bgp.BFD_INTERVAL_MS) -> float:
    """Build fabric ``t``, and return once every link has carrier (and, with ``routing="bgp"``, once
    BGP has converged, with BFD every ``bfd_ms`` or none for 0: mrc.fabric.bgp); on any failure
    remove whatever was built. Returns seconds."""
    require_root("mrc fabric up")
    if routing == "bgp" and bgp.available():
        raise UsageError(bgp.available())
    existing = project_namespaces(ns.list_netns(), t.name)
    if existing or os.path.exists(state_path(t.name)):
        raise UsageError(
            f"a fabric named {t.name!r} already exists; pick another --name or remove it with "
            f"`mrc fabric down --name {t.name}`"
        )
    start = time.monotonic()
    ops = plan(t, routing)
    ex = Executor(t)
    try:
        save_state(t, routing=routing, bfd_ms=bfd_ms if routing == "bgp" else None)
        resolver.write(t, topology_path(t.name))
        batch = max(1, len(ops) // 20)
        for i in range(0, len(ops), batch):
            ex.run(ops[i:i + batch])
            if progress:
                progress(min(i + batch, len(ops)), len(ops))
        wait_carrier(ex, veths_set_up(ops))
        if ex.srv6_bpf:
            save_state(t, srv6="tc-bpf")
        if routing == "bgp":
            if not 0 <= bfd_ms <= 10_000:
                raise UsageError(f"--bfd-ms {bfd_ms}: 0 (no BFD) or an interval up to 10000 ms")
            bgp.start(t, bfd_ms)
            bgp.wait_converged(t, progress=bgp_progress, bfd=bfd_ms > 0)
    except BaseException:
        ex.close()
        down(t.name)
        raise
    ex.close()
    return time.monotonic() - start


def down(name: str | None = None, all_fabrics: bool = False) -> list[str]:
    """Remove one fabric's namespaces (or every ``mrc-*`` one). Returns the names removed."""
    require_root("mrc fabric down")
    _, netns = pyroute2()
    bgp.stop(None if all_fabrics else name)  # before the namespaces: a daemon would keep its own alive
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
    how = routing(name)
    ex = Executor(t)
    try:
        for link in links:
            f = faults.get(link.name, {})
            # a link that was down lost its addresses and routes: re-apply all
            # of them (an operation that still holds answers EEXIST)
            ex.run(link_ops(t, link.name, how), exist_ok=True)
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
    nft(t, node, loss_ruleset(ifname, percent))
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
    nft(t, node, f"table inet mrcloss_{ifname}\ndelete table inet mrcloss_{ifname}\n")


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
def packets_per_buffer(t: Topology, hosts: list[str], want: int = 0) -> int:
    """What a context on ``hosts`` may ask for (``Context(packets_per_buffer=)``): ``want``
    (0: as many as fit) where every one of their ports has the host_gso program (mrc.fabric.gsobpf)
    and no switch port of the fabric has a queue (a queue that marks and trims must see packets, not
    buffers), else 1."""
    if want == 1 or load_state(t.name).get("queues"):
        return 1
    ports = [f"p{p}" for p in range(t.planes)]
    return want if all(gsobpf.ready(t, h, ports) for h in hosts) else 1


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


#: veth takes a packet through NAPI (and so GRO) only from a peer without TCP segmentation offload
TSO_FEATURES = ("tx-tcp-segmentation", "tx-tcp-ecn-segmentation", "tx-tcp-mangleid-segmentation",
                "tx-tcp6-segmentation", "tx-tcp-accecn-segmentation")
GRO_FEATURES = ("rx-gro", "rx-udp-gro-forwarding")


def _set_features(ifaces: dict[str, dict[str, bool]]) -> None:
    """Set ethtool features by name in the calling thread's namespace; a feature the kernel does not
    have is skipped, one it refuses raises FabricError."""
    from pyroute2 import Ethtool

    with Ethtool() as e:
        for ifname, want in ifaces.items():
            f = e.get_features(ifname)
            for name, on in want.items():
                if name in f.features and f.features[name].available:
                    f.features[name].enable = on
            e.set_features(ifname, f)
            got = e.get_features(ifname).features
            wrong = [n for n, on in want.items() if n in got and got[n].available and got[n].enable != on]
            if wrong:
                raise FabricError(f"{ifname}: the kernel kept {', '.join(wrong)} as they were")


def host_gro(t: Topology) -> int:
    """Let every host port receive as a NIC driver does: through NAPI, with GRO.

    A veth hands each packet up on its own unless GRO is on, and then only
    from a peer without TSO. On a wire-sized fabric (``wire_sized``) the
    leaf cuts TCP's super-packets and MRC's buffers of k packets into
    packets; with GRO the receiving host merges a flow's packets again, as a
    real host's driver does: TCP's segments, and with UDP GRO for forwarding
    (``rx-udp-gro-forwarding``) a path's MRC packets into a buffer, which the
    engine's buffer socket takes whole and cuts (docs/engine.md, "Buffers of
    k packets"). The switch side of each host link drops TSO, which it does
    not use (its packets are cut already). Returns the number of host ports
    set."""
    require_root("host GRO")
    hosts, switches = set(t.host_nodes()), set(t.switch_nodes())
    todo: dict[str, dict[str, dict[str, bool]]] = {}
    for link in t.links():
        for (node, ifname), (peer, pif) in (((link.a_node, link.a_if), (link.b_node, link.b_if)),
                                            ((link.b_node, link.b_if), (link.a_node, link.a_if))):
            if node in hosts and peer in switches:
                todo.setdefault(node, {})[ifname] = dict.fromkeys(GRO_FEATURES, True)
                todo.setdefault(peer, {})[pif] = dict.fromkeys(TSO_FEATURES, False)
    for node, ifaces in todo.items():
        ns.run_in(t.ns(node), lambda ifaces=ifaces: _set_features(ifaces))
    return sum(len(v) for n, v in todo.items() if n in hosts)
