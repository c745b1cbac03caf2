"""The application API: the nouns of the OCP ``mrc.h`` and of libibverbs.

A ``Context`` opens a device over a list of ports (one per plane) and starts
its engine thread, which plays the NIC: Python posts work requests and polls
completions, and is never called per packet.

>>> import mrc.verbs as v                                     # doctest: +SKIP
>>> with v.Context() as ctx:                                 # the ports of this fabric host
...     pd = ctx.alloc_pd()
...     mr = pd.reg_mr(bytearray(1 << 20), v.ACCESS_REMOTE_WRITE)
...     cq = ctx.create_cq()
...     qp = ctx.create_qp(pd, cq, v.QPAttr())
...     qp.connect(remote)                                   # a RemoteInfo from mrc.cm
...     qp.post_write(mr, 0, 4096, remote.addr, remote.rkey, wr_id=1)
...     wc = cq.wait()                                       # blocks on the completion channel

docs/api.md maps every call to its mrc.h counterpart.
"""

from __future__ import annotations

import dataclasses
import errno
import ipaddress
import os
import re
import select
import socket
import threading
import time
import weakref
from dataclasses import dataclass, field

from mrc._dp import ffi, lib
from mrc.ctl.profiles import SRV6, CtlError, Registry
from mrc.engine import (  # noqa: F401 (re-exported)
    AsyncEvent,
    Endpoint,
    EngineError,
    MemoryRegion,
    QPAttr,
    QueuePair,
    WorkCompletion,
    check,
)
from mrc.errors import MrcError, PrivilegeError

ACCESS_LOCAL_WRITE = lib.MRC_ACCESS_LOCAL_WRITE
ACCESS_REMOTE_WRITE = lib.MRC_ACCESS_REMOTE_WRITE
#: NSCC profile for a software data path over kernel-forwarded links (the
#: fabric in namespaces, or hosts through ordinary switches): base RTT about
#: 100 us instead of the 10 us of a hardware NIC. OCP CC profile names.
#: Quick adapt is off: on a host whose CPUs also do the forwarding, delay
#: spikes come from scheduling (a thread off its CPU for milliseconds), not
#: from a queue, and quick adapt would collapse the window to what one
#: scheduling gap achieved (bench/fabric_bench.py showed 20 ms stalls with it).
SOFTWARE_CC = {"base_rtt": 100_000, "target_delay": 75_000, "qa_threshold": 400_000, "disable_qa": 1}
#: Timing of the same software data path: queueing makes per-path delays
#: differ by far more than a hardware fabric's 20 us, so the reorder
#: allowance, the retry timer (2 ms), probes and SKIP are scaled to match, and
#: ACKs are coalesced over 64 KiB (every kernel-forwarded packet costs CPU).
SOFTWARE_TIMING = {"reorder_ns": 200_000, "timeout": 11, "probe_interval_ns": 200_000, "skip_ns": 200_000,
                   "ack_bytes": 65536}
#: Payload sizes a QP may use, largest first; a Context picks the largest
#: that its ports' MTU carries with the IPv6, UDP and MRC headers.
PAYLOAD_SIZES = (8192, 4096, 2048, 1024, 512)
HEADER_ROOM = 40 + 8 + 128

QPS_RESET, QPS_INIT, QPS_RTR, QPS_RTS, QPS_ERR = (lib.MRC_QPS_RESET, lib.MRC_QPS_INIT, lib.MRC_QPS_RTR,
                                                  lib.MRC_QPS_RTS, lib.MRC_QPS_ERROR)


@dataclass(frozen=True)
class DeviceAttr:
    """What a context supports (mrc_query_device_ex): limits the engine checks
    when a QP is created, and the OCP capability bits."""

    version: str                 # library and wire version (mrc_query_version)
    wire_versions: tuple[int, ...]
    ports: int
    planes: int
    max_qps: int
    max_payload: int             # bytes per packet this context's QPs use
    max_sge: int
    max_mpr: int                 # in units of mpr_granularity PSNs; powers of two only
    mpr_granularity: int
    max_wimm: int                # WRITE_IMMs outstanding, as requester and as responder
    max_timeout: int             # t in 1.024 us x 2^t
    max_linear_retry: int
    max_exp_retry: int           # this value means "forever"
    max_qp_hints: int            # 0: QP hints are not supported
    caps: dict[str, bool]        # TRIM_NACK, DYNAMIC_MPR, SVC_TIME


@dataclass
class Port:
    """One NIC port: an interface on one plane."""

    ifname: str
    plane: int
    ifindex: int
    mac: str
    address: str
    next_hop_mac: str
    mtu: int = 1500


@dataclass
class RemoteInfo:
    """What a peer tells us out of band (``mrc.cm`` exchanges it)."""

    qpn: int
    ports: dict[int, str]                       # plane -> port address
    paths: dict[int, list[str]] = field(default_factory=dict)  # plane -> destination addresses
    addr: int = 0
    rkey: int = 0
    length: int = 0
    fabric: str | None = None
    host: str | None = None


def _mac_bytes(mac: str) -> bytes:
    return bytes(int(x, 16) for x in mac.split(":"))


def discover_ports(ifnames: list[str] | None = None) -> list[Port]:
    """Find this host's MRC ports in the current network namespace.

    Without ``ifnames``: every interface named ``p<plane>`` with a global IPv6
    address (a fabric host). The next-hop MAC comes from the kernel's
    neighbour table (the gateway of the interface's route).
    """
    from pyroute2 import IPRoute

    ports = []
    with IPRoute() as ipr:
        links = {link.get("ifname"): link for link in ipr.get_links()}
        names = ifnames or sorted((n for n in links if re.fullmatch(r"p\d+", n or "")), key=lambda n: int(n[1:]))
        if not names:
            raise MrcError("no MRC ports found: this is not a fabric host (run it with `mrc fabric exec HOST --`) "
                           "or name the ports with --ports eth1,eth2")
        for i, name in enumerate(names):
            if name not in links:
                raise MrcError(f"no interface named {name!r} in this network namespace")
            link = links[name]
            idx = link["index"]
            addrs = [a.get("IFA_ADDRESS") for a in ipr.get_addr(family=socket.AF_INET6, index=idx)]
            glob = [a for a in addrs if a and not ipaddress.IPv6Address(a).is_link_local]
            if not glob:
                raise MrcError(f"port {name} has no global IPv6 address")
            gws = [r.get("RTA_GATEWAY") for r in ipr.get_routes(family=socket.AF_INET6, oif=idx)
                   if r.get("RTA_GATEWAY")]
            mac = None
            for gw in gws:
                for n in ipr.get_neighbours(family=socket.AF_INET6, ifindex=idx):
                    if n.get("NDA_DST") == gw and n.get("NDA_LLADDR"):
                        mac = n.get("NDA_LLADDR")
                        break
                if mac:
                    break
            if not mac:
                raise MrcError(f"no neighbour entry for the next hop of {name} (gateways {gws or 'none'}): "
                               "ping the gateway once so the kernel learns its MAC")
            plane = int(name[1:]) if re.fullmatch(r"p\d+", name) else i
            ports.append(Port(name, plane, idx, link.get("IFLA_ADDRESS"), glob[0], mac, link.get("IFLA_MTU") or 1500))
    return ports


class CompletionQueue:
    """The context's completion queue, with its completion channel (an eventfd)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    @property
    def fd(self) -> int:
        """A file descriptor that becomes readable when completions arrive (select/epoll/asyncio)."""
        return lib.mrc_ctx_comp_fd(self.ctx._ctx)

    def poll(self, max_entries: int = 1024) -> list[WorkCompletion]:
        return self.ctx.poll_cq(max_entries)

    def get_event(self, timeout: float | None = None) -> bool:
        """Wait until the completion channel fires; True if it did (acknowledges the event)."""
        r, _, _ = select.select([self.fd], [], [], timeout)
        if r:
            try:
                os.read(self.fd, 8)
            except BlockingIOError:
                pass
            return True
        return False

    def wait(self, n: int = 1, timeout: float = 10.0) -> list[WorkCompletion]:
        """Poll until at least ``n`` completions arrived, sleeping on the channel in between."""
        out: list[WorkCompletion] = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            out += self.poll()
            if len(out) >= n:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{len(out)} of {n} completions after {timeout} s")
            self.get_event(min(left, 0.05))
        return out


class ProtectionDomain:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def reg_mr(self, buf, access: int = ACCESS_LOCAL_WRITE) -> MemoryRegion:
        """Register a bytearray, mmap or any buffer (writable for remote write)."""
        return self.ctx.reg_mr(buf, remote_write=bool(access & ACCESS_REMOTE_WRITE))


class _EndpointLock:
    """Holds the context's endpoint lock around a slow-path call (create, modify, query)."""

    __slots__ = ("ctx",)

    def __init__(self, ctx) -> None:
        self.ctx = ctx

    def __enter__(self) -> None:
        lib.mrc_ctx_lock(self.ctx)

    def __exit__(self, *exc) -> None:
        lib.mrc_ctx_unlock(self.ctx)


class Context(Endpoint):
    """A device over a list of ports, with its engine thread.

    ``Context()`` discovers the ports of the fabric host it runs in;
    ``Context(ports)`` takes them from ``discover_ports(["eth1", ...])``.
    """

    def __init__(self, ports: list[Port] | None = None, max_qps: int = 1024, cq_depth: int = 65536,
                 start: bool = True, spin_us: float = 200.0) -> None:
        self.ports = ports if ports is not None else discover_ports()
        self.planes = max(p.plane for p in self.ports) + 1
        self.max_qps = max_qps
        link_mtu = min(p.mtu for p in self.ports)
        fits = [s for s in PAYLOAD_SIZES if s + HEADER_ROOM <= link_mtu]
        if not fits:
            raise MrcError(f"the ports' MTU ({link_mtu}) is too small for MRC: it needs at least "
                           f"{PAYLOAD_SIZES[-1] + HEADER_ROOM}")
        #: payload bytes per packet for this context's QPs (the largest the ports carry)
        self.payload_size = fits[0]
        arr = ffi.new("struct mrc_port_cfg[]", len(self.ports))
        for i, p in enumerate(self.ports):
            arr[i].ifindex = p.ifindex
            arr[i].plane = p.plane
            arr[i].src_mac = list(_mac_bytes(p.mac))
            arr[i].dst_mac = list(_mac_bytes(p.next_hop_mac))
            arr[i].src_addr = list(socket.inet_pton(socket.AF_INET6, p.address))
        attr = ffi.new("struct mrc_ep_attr *", {"planes": self.planes, "max_qps": max_qps, "cq_depth": cq_depth})
        out = ffi.new("struct mrc_ctx **")
        rc = lib.mrc_ctx_create(attr, arr, len(self.ports), out)
        if rc == -1 or rc == -13:  # EPERM / EACCES
            raise PrivilegeError("opening raw sockets needs CAP_NET_RAW: run as root (or inside `mrc fabric exec`)")
        check(rc, "open the MRC device")
        self._ctx = out[0]
        self._ep = lib.mrc_ctx_ep(self._ctx)
        self._mrs = []
        self._tls = threading.local()
        self._pending_async: list = []
        self._peers: dict[tuple, int] = {}
        self._peer_paths: dict[int, dict] = {}
        self._peer_ports: dict[int, dict] = {}
        self._peer_host: dict[int, str | None] = {}
        self._qps: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        #: NSCC parameters every new QP gets on top of SOFTWARE_CC (``mrc ctl cc set``)
        self.cc_overrides: dict = {}
        #: the controller's EV format, EV and CC profiles (``create_qp(ev_profile_id=, cc_profile_id=)``)
        self.profiles = Registry()
        # how long the idle engine polls before it sleeps: latency against CPU
        lib.mrc_ctx_set_spin(self._ctx, int(spin_us * 1000))
        if start:  # start=False: only for the raw-ceiling blaster (bench/)
            check(lib.mrc_ctx_start(self._ctx), "start the engine thread")

    def _guard(self):
        return _EndpointLock(self._ctx)

    def reg_mr(self, buf, remote_write: bool = False) -> MemoryRegion:
        mr = super().reg_mr(buf, remote_write)
        if remote_write:
            # fault the pages in now, as a NIC's registration pins them: else the
            # first pass of packets pays a page fault per 4 KiB in the engine
            lib.mrc_ctx_populate(ffi.cast("void *", mr.addr), mr.length)
        return mr

    def call(self, fn, *args):
        """Run an endpoint call under the context's lock, taken and released in C
        (mrc_ctx_<name>), so that the engine never waits for this interpreter."""
        if self._ep is None:
            raise EngineError(errno.EBADF, "the context is closed: open a new one")
        locked = getattr(lib, "mrc_ctx_" + fn.__name__[4:], None)
        if locked is None:
            return super().call(fn, *args)
        return locked(self._ctx, *args)

    def fast(self, op: str, *args):
        """Post and poll on the lock-free rings: never waits for the engine thread."""
        ctx = self._ctx
        if ctx is None:
            raise EngineError(errno.EBADF, "the context is closed: open a new one")
        return getattr(lib, "mrc_ctx_" + op)(ctx, *args)

    def query_device(self) -> DeviceAttr:
        """The device's attributes and capabilities (mrc_query_device_ex)."""
        max_mpr = 64
        return DeviceAttr(version=ffi.string(lib.mrc_dp_version()).decode(), wire_versions=(lib.MRC_WIRE_VERSION,),
                          ports=len(self.ports), planes=self.planes, max_qps=self.max_qps,
                          max_payload=self.payload_size, max_sge=lib.MRC_MAX_SGE, max_mpr=max_mpr,
                          mpr_granularity=lib.MRC_MPR_UNIT, max_wimm=max_mpr * lib.MRC_MPR_UNIT, max_timeout=24,
                          max_linear_retry=7, max_exp_retry=lib.MRC_RETRY_FOREVER, max_qp_hints=0,
                          caps={"TRIM_NACK": True, "DYNAMIC_MPR": False, "SVC_TIME": False})

    @property
    def async_fd(self) -> int:
        """Readable when asynchronous events wait (select/epoll/asyncio)."""
        return lib.mrc_ctx_async_fd(self._ctx)

    def get_async_event(self, timeout: float | None = None):
        """Wait up to ``timeout`` s for the next asynchronous event (ibv_get_async_event);
        None if there is none. Events: QP_FATAL, PORT_ERR, PORT_ACTIVE, PEER_PORTS."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if not self._pending_async:
                self._pending_async = self.async_events()
            if self._pending_async:
                return self._pending_async.pop(0)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            if select.select([self.async_fd], [], [], left)[0]:
                try:
                    os.read(self.async_fd, 8)
                except BlockingIOError:
                    pass

    # verbs nouns -----------------------------------------------------------
    def alloc_pd(self) -> ProtectionDomain:
        return ProtectionDomain(self)

    def create_cq(self) -> CompletionQueue:
        return CompletionQueue(self)

    def create_qp(self, pd: ProtectionDomain | None = None, cq: CompletionQueue | None = None,
                  attr: QPAttr | None = None, *, ev_profile_id: int | None = None,
                  cc_profile_id: int | None = None) -> ConnectedQP:
        """A QP; with ``cc_profile_id`` it runs that ONLINE CC profile's NSCC
        parameters, with ``ev_profile_id`` (an SRV6 profile) it sprays over
        that profile's paths and follows its denials. The QP holds both
        profiles until it is destroyed: meanwhile they cannot go OFFLINE."""
        attr = attr or QPAttr()
        if attr.planes is None:
            attr.planes = self.planes
        if attr.mtu is None:
            attr.mtu = self.payload_size
        held = []
        try:
            cc = self.cc_overrides
            if cc_profile_id is not None:
                held.append(self.profiles.acquire("cc", cc_profile_id))
                cc = held[-1].config
            ev_profile = None
            if ev_profile_id is not None:
                ev_profile = self.profiles.acquire("ev", ev_profile_id)
                held.append(ev_profile)
                if ev_profile.fmt is None or ev_profile.fmt.mode != SRV6:
                    raise CtlError(errno.EINVAL, f"EV profile {ev_profile_id} is not an SRV6 profile: this "
                                                 "device's QPs take their paths from SRV6 EV profiles")
                if attr.ev_min_active is None:
                    attr.ev_min_active = ev_profile.ev_min_active
            attr.cc = {**SOFTWARE_CC, **cc, **attr.cc}
            for k, val in SOFTWARE_TIMING.items():
                if getattr(attr, k) is None:
                    setattr(attr, k, val)
            qp = ConnectedQP(self, attr)
        except BaseException:
            for prof in held:
                self.profiles.release(prof)
            raise
        qp.profiles, qp.ev_profile = held, ev_profile
        self._qps[qp.qpn] = qp
        return qp

    def live_qps(self) -> dict:
        """QPN -> QP for this context's QPs that still exist."""
        return {n: q for n, q in list(self._qps.items()) if not q.destroyed}

    def cc_config(self) -> dict:
        """The NSCC parameters a new QP gets (C defaults, SOFTWARE_CC, overrides)."""
        a = ffi.new("struct mrc_qp_attr *")
        lib.mrc_qp_attr_default(a)
        base = {name: getattr(a.cc, name) for name, _ in ffi.typeof("struct mrc_cc_params").fields}
        return {**base, **SOFTWARE_CC, **self.cc_overrides}

    def ev_address(self, qp: QueuePair, ev: int) -> str | None:
        """The destination address EV ``ev`` of a connected ``qp`` sends to."""
        return self.peer_address(getattr(qp, "peer", None), ev)

    def peer_address(self, peer: int | None, ev: int) -> str | None:
        """The destination address a packet to ``peer`` on EV ``ev`` goes to."""
        paths = self._peer_paths.get(peer, {}).get(ev >> 16)
        return paths[(ev & 0xFFFF) % len(paths)] if paths else None  # as queue_tx picks it

    def peers(self) -> dict[int, dict]:
        """Peer index -> its host name (if it said), final address and paths per plane."""
        return {i: {"host": self._peer_host.get(i), "ports": self._peer_ports[i], "paths": self._peer_paths[i]}
                for i in sorted(self._peer_paths)}

    def probe(self, targets: list[tuple[int, int]], timeout: float = 0.1) -> list[dict]:
        """EV probes (mrc_ctl_ep_batch_send_wait): one per (peer, ev), sent at
        once; waits until all are answered or ``timeout`` s passed. Each
        result: peer, ev, status ("ok", "timeout", "unreachable", "down"),
        rtt_ns and the local plane the answer came back on."""
        if len(targets) > lib.MRC_PROBE_MAX:
            raise MrcError(f"at most {lib.MRC_PROBE_MAX} probes per batch, not {len(targets)}")
        req = ffi.new("struct mrc_probe_req[]", max(1, len(targets)))
        out = ffi.new("struct mrc_probe_resp[]", max(1, len(targets)))
        for i, (peer, ev) in enumerate(targets):
            req[i].peer, req[i].ev = peer, ev
        # cffi drops the interpreter lock for the call: other threads run while it waits
        check(lib.mrc_ctx_ep_batch_send_wait(self._ctx, req, len(targets), int(timeout * 1e9), out), "probe")
        names = {0: "ok", -errno.ETIMEDOUT: "timeout", -errno.EHOSTUNREACH: "unreachable",
                 -errno.ENETDOWN: "down"}
        res = []
        for i in range(len(targets)):
            o = out[i]
            status = names.get(o.status, errno.errorcode.get(-o.status, str(o.status)))
            res.append({"peer": o.peer, "ev": o.ev, "status": status,
                        "rtt_ns": o.rtt_ns if o.status == 0 else None, "port": o.port if o.status == 0 else None,
                        "corrected": bool(o.corrected)})
        return res

    def local_info(self, qp: QueuePair, mr: MemoryRegion | None = None) -> RemoteInfo:
        """What to send a peer so it can connect to ``qp`` (and write into ``mr``)."""
        return RemoteInfo(qpn=qp.qpn, ports={p.plane: p.address for p in self.ports},
                          addr=mr.addr if mr else 0, rkey=mr.rkey if mr else 0, length=mr.length if mr else 0,
                          fabric=os.environ.get("MRC_FABRIC"), host=os.environ.get("MRC_HOST"))

    def peer_index(self, remote: RemoteInfo) -> int:
        """Register how to reach a peer (its paths per plane) with the I/O layer."""
        key = (tuple(sorted(remote.ports.items())), tuple(sorted((p, tuple(a)) for p, a in remote.paths.items())))
        if key in self._peers:
            return self._peers[key]
        cfg = ffi.new("struct mrc_peer_cfg *")
        cfg.nplanes = self.planes
        used = {}
        for plane, final in remote.ports.items():
            paths = (remote.paths.get(plane) or [final])[:len(cfg.plane[0].paths)]
            pp = cfg.plane[plane]
            pp.final_addr = list(socket.inet_pton(socket.AF_INET6, final))
            for i, a in enumerate(paths):
                pp.paths[i] = list(socket.inet_pton(socket.AF_INET6, a))
            pp.npaths = len(paths)
            used[int(plane)] = paths
        idx = check(lib.mrc_ctx_add_peer(self._ctx, cfg), "add peer")
        self._peers[key] = idx
        self._peer_paths[idx] = used  # what the engine sends to: ev_address() reads it
        self._peer_ports[idx] = {int(k): v for k, v in remote.ports.items()}
        self._peer_host[idx] = remote.host
        return idx

    def set_port(self, plane: int, up: bool, now_ns: int = 0) -> None:
        """A port's admin state (``mrc_ctl_modify_port``): a disabled port is
        DOWN; an enabled one is up while its link has carrier, which the
        engine follows by itself (rtnetlink): either way the plane's EVs stop
        at once and the peers are told."""
        check(lib.mrc_ctx_port_admin(self._ctx, plane, int(up)), f"set port {plane} admin state")

    def port_stats(self) -> list[dict]:
        out = []
        st = ffi.new("struct mrc_port_stats *")
        for i, p in enumerate(self.ports):
            check(lib.mrc_ctx_port_stats(self._ctx, i, st), "port stats")
            d = {name: getattr(st, name) for name, _ in ffi.typeof("struct mrc_port_stats").fields}
            d.update(ifname=p.ifname, plane=p.plane)
            out.append(d)
        return out

    def close(self) -> None:
        if getattr(self, "_ctx", None) is not None:
            for qp in list(self._qps.values()):
                qp.release_profiles()
            lib.mrc_ctx_destroy(self._ctx)
            self._ctx = None
            self._ep = None


class ConnectedQP(QueuePair):
    """A queue pair of a Context; ``connect()`` takes it to RTS toward a peer."""

    profiles: tuple | list = ()
    ev_profile = None

    def connect(self, remote: RemoteInfo) -> None:  # type: ignore[override]
        prof = self.ev_profile
        if prof is not None:
            # the profile's paths (its denied ones too: allow brings them back) replace the peer's own
            planned = prof.paths(include_denied=True)
            missing = sorted(set(planned) - set(remote.ports))
            if missing:
                raise CtlError(errno.EINVAL, f"EV profile {prof.id} has paths on plane(s) "
                                             f"{', '.join(map(str, missing))}, where the peer has no port")
            remote = dataclasses.replace(remote, paths=planned)
        peer = self.ep.peer_index(remote)
        # the engine sends EV e of plane p to paths[p][e % len]: tell the QP which EVs alias
        paths = self.ep._peer_paths[peer]
        self.set_ev_paths([len(paths.get(p, [])) for p in range(self.ep.planes)])
        super().connect(remote.qpn, peer)
        self.peer = peer
        if prof is not None:
            # what the profile denies, and planes it has no path on, start DENIED
            usable = {a for addrs in prof.paths().values() for a in addrs}
            for e in self.evs():
                if e["plane"] not in planned or self.ep.ev_address(self, e["ev"]) not in usable:
                    self.set_ev_state(e["ev"], lib.MRC_EV_DENIED)
            ref = weakref.ref(self)

            def follow(address: str, state: str) -> None:
                qp = ref()
                if qp is None or qp.destroyed:
                    return
                code = lib.MRC_EV_DENIED if state == "DENIED" else lib.MRC_EV_GOOD
                for e in qp.evs():
                    if qp.ep.ev_address(qp, e["ev"]) == address:
                        qp.set_ev_state(e["ev"], code)

            self._follow = follow
            prof.watchers.append(follow)

    def destroy(self) -> None:
        super().destroy()
        self.release_profiles()

    def release_profiles(self) -> None:
        """Give back the profiles this QP held (destroy and close do it)."""
        if self.ev_profile is not None and getattr(self, "_follow", None) in self.ev_profile.watchers:
            self.ev_profile.watchers.remove(self._follow)
        for prof in self.profiles:
            self.ep.profiles.release(prof)
        self.profiles, self.ev_profile = (), None
