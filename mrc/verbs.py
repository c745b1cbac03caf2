"""The application API: the nouns of the OCP ``mrc.h`` and of libibverbs.

A :class:`Context` opens a device over a list of ports (one per plane) and
starts its engine thread, which plays the NIC: Python posts work requests
and polls completions, and is never called per packet. Where the ports are
and how to reach a peer comes from a path resolver (:mod:`mrc.paths`): a
topology file, a fabric, or ports named by hand.

>>> import mrc.verbs as v                                     # doctest: +SKIP
>>> with v.Context() as ctx:                                 # ports from $MRC_TOPOLOGY
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
import os
import select
import socket
import time
import weakref
from dataclasses import dataclass, field

from mrc._dp import ffi, lib
from mrc.core import (  # noqa: F401 (re-exported: the verbs nouns)
    AsyncEvent,
    CompletionQueue,
    Device,
    MemoryRegion,
    ProtectionDomain,
    QPAttr,
    QueuePair,
    WorkCompletion,
)
from mrc.ctl.profiles import SRV6, Registry
from mrc.errors import ErrnoError, MrcError, UsageError, check
from mrc.paths import PathResolver, from_environment
from mrc.ports import Port, discover_ports, port_cfgs
from mrc.wire import ev_entropy, ev_plane

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
    max_cqs: int
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
class RemoteInfo:
    """What a peer tells us out of band (``mrc.cm`` exchanges it). ``paths``
    (per plane, the destination addresses to use) may be left empty: the
    receiving context's resolver fills them from ``host`` and ``topology``."""

    qpn: int
    ports: dict[int, str]                       # plane -> port address
    psn: int = 0                                # the PSN of the QP's first packet
    paths: dict[int, list[str]] = field(default_factory=dict)  # plane -> destination addresses
    addr: int = 0
    rkey: int = 0
    length: int = 0
    topology: str | None = None                 # the name of the topology the peer's host is part of
    host: str | None = None                     # the peer's host name in it


class EngineThread:
    """The thread that plays the NIC for a context with ports: its raw
    sockets, the ports' carrier and admin state, and the blocking calls that
    wait for it (csrc/drivers/engine.c). A :class:`Context` has one."""

    def __init__(self, dev: Device, ports: list[Port]) -> None:
        self._dev = dev
        self.ports = ports

    def start(self) -> None:
        """Start the engine thread."""
        check(lib.mrc_ctx_start(self._dev.handle()), "start the engine thread")

    def set_spin(self, spin_us: float) -> None:
        """How long the idle thread polls before it sleeps: latency against CPU."""
        lib.mrc_ctx_set_spin(self._dev.handle(), int(spin_us * 1000))

    def set_port_rate(self, rate_bps: int, plane: int | None = None) -> None:
        """Send at most ``rate_bps`` (frames with their headers) on ``plane``'s
        port, or every port (None); 0: no limit. Data then waits in its QP
        for the port, as in a NIC, and not in a slower qdisc or link in
        front of the wire, where NSCC would count it as the network's delay."""
        for pl in [p.plane for p in self.ports] if plane is None else [plane]:
            check(lib.mrc_ctx_set_port_rate(self._dev.handle(), pl, int(rate_bps)), f"port rate {rate_bps} bit/s on "
                  f"plane {pl}", "a plane of this context, a rate of 0 or at least 8 kbit/s")

    def progress(self) -> int:
        """Run one pass of the NIC (receive, complete, send) in the calling
        thread unless the engine thread is in one; the engine leaves the ports
        to callers for 100 us after each call. Returns the work done (0: none
        or the engine was busy). For a thread that spins waiting for one
        answer: it saves the engine thread's wake-ups (``mrc perf --latency``)."""
        return check(lib.mrc_ctx_progress(self._dev.handle()), "progress the engine")

    def progress_done(self) -> None:
        """Stop progressing: the engine thread watches the ports again now."""
        lib.mrc_ctx_progress_done(self._dev.handle())

    def add_peer(self, cfg) -> int:
        """Add a peer's paths; returns its index."""
        return check(lib.mrc_ctx_add_peer(self._dev.handle(), cfg), "add peer")

    def del_peer(self, peer: int) -> None:
        """Forget a peer (refused while a QP uses it)."""
        check(lib.mrc_ctx_del_peer(self._dev.handle(), peer), f"forget peer {peer}")

    def port_admin(self, plane: int, up: bool) -> None:
        """Set a port's admin state."""
        check(lib.mrc_ctx_port_admin(self._dev.handle(), plane, int(up)), f"set port {plane} admin state")

    def port_stats(self) -> list[dict]:
        """Every port's counters and state."""
        out = []
        st = ffi.new("struct mrc_port_stats *")
        for i, p in enumerate(self.ports):
            check(lib.mrc_ctx_port_stats(self._dev.handle(), i, st), "port stats")
            d = {name: getattr(st, name) for name, _ in ffi.typeof("struct mrc_port_stats").fields}
            d["gso_tx_buffers"], d["gso_rx_buffers"] = self.port_gso(i)
            d.update(ifname=p.ifname, plane=p.plane)
            out.append(d)
        return out

    def cpu(self) -> dict:
        """The engine thread's CPU time so far (``cpu_ns``, user and system
        from its thread CPU clock) and its thread id (``tid``)."""
        ns, tid = ffi.new("uint64_t *"), ffi.new("int32_t *")
        check(lib.mrc_ctx_engine_cpu(self._dev.handle(), ns, tid), "engine thread CPU time")
        return {"cpu_ns": ns[0], "tid": tid[0]}

    @property
    def async_fd(self) -> int:
        """An eventfd that is readable when asynchronous events wait."""
        return check(lib.mrc_ctx_async_fd(self._dev.handle()), "asynchronous event channel")

    def probe(self, req, n: int, timeout_ns: int, out) -> int:
        # cffi drops the interpreter lock for the call: other threads run while it waits
        """Send EV probes and wait for their answers (``mrc_ctx_ep_batch_send_wait``)."""
        with self._dev.waiting_call() as h:
            return check(lib.mrc_ctx_ep_batch_send_wait(h, req, n, timeout_ns, out), "probe")

    def blast(self, peer: int, payload: int, seconds: float, source: bytearray | None = None,
              burst: int = 1) -> int:
        """Benchmark support, the raw ceiling: pre-built packets to ``peer`` over
        every plane and path for ``seconds``, from this thread (the engine
        thread must not have been started). With ``source``, each payload is
        copied from it (walked in turn) with its ICRC and sum first, as the
        engine builds a packet. ``burst`` packets in a row take one EV (with
        :meth:`set_gso`'s k, k of them to a kernel buffer). Returns packets sent."""
        src = ffi.from_buffer(source) if source is not None else ffi.NULL
        return check(lib.mrc_bench_blast_from(self._dev.handle(), peer, payload, int(seconds * 1e9), src,
                                              len(source) if source is not None else 0, burst), "raw blast")

    def set_gso(self, k: int) -> None:
        """Send up to ``k`` (2-8) packets of one path per kernel buffer through a UDP
        socket (``mrc_ctx_set_gso``: each port needs the fabric's host_gso
        egress program); 1, the default, one per buffer through the raw socket."""
        check(lib.mrc_ctx_set_gso(self._dev.handle(), k), f"packets per buffer {k}")

    def port_gso(self, port: int) -> tuple[int, int]:
        """Buffers of more than one packet port ``port`` sent and took."""
        tx, rx = ffi.new("uint64_t *"), ffi.new("uint64_t *")
        check(lib.mrc_ctx_port_gso(self._dev.handle(), port, tx, rx), "buffer counts")
        return tx[0], rx[0]


class Context(Device):
    """A device over a list of ports, progressed by its engine thread.

    ``Context()`` takes its ports from the resolver (``resolver`` or, by
    default, the topology file of ``$MRC_TOPOLOGY`` as host ``$MRC_HOST``);
    ``Context(ports)`` takes them from ``discover_ports([("eth1", 0), ...])``.
    ``start=False`` leaves the engine thread stopped (the raw-ceiling
    benchmark sends from the calling thread instead). ``port_rate_bps``:
    each port sends at most that (:meth:`EngineThread.set_port_rate`; for
    ports behind a slower link or a rate-limiting qdisc). ``packets_per_buffer``:
    new data goes k packets of one path to a kernel buffer (:meth:`EngineThread.set_gso`;
    0: as many as fit in 64 KiB; 1, the default: one per buffer); it needs the
    fabric's egress program on every port (mrc.fabric.gsobpf) and no queue
    that must see single packets on the way."""

    def __init__(self, ports: list[Port] | None = None, *, resolver: PathResolver | None = None,
                 max_qps: int = 1024, cq_depth: int = 65536, start: bool = True, spin_us: float = 200.0,
                 port_rate_bps: int = 0, packets_per_buffer: int = 1) -> None:
        self.resolver = resolver if resolver is not None else from_environment()
        if ports is None:
            named = self.resolver.local_ports()
            if not named and getattr(self.resolver, "name", None) and self.resolver.host is None:
                hosts = self.resolver.hosts()
                raise UsageError(f"this network namespace is none of topology {self.resolver.name}'s hosts "
                                 f"({', '.join(hosts)}): run it in one, `mrc fabric exec --name "
                                 f"{self.resolver.name} {hosts[0]} -- mrc ...`, or give --host")
            if not named:
                raise MrcError("no MRC ports: name them (`--ports eth1,eth2`), or give a topology file "
                               "(`--topology FILE`, or $MRC_TOPOLOGY with $MRC_HOST; docs/topology.md)")
            ports = discover_ports(named)
        self.ports = ports
        link_mtu = min(p.mtu for p in self.ports)
        fits = [s for s in PAYLOAD_SIZES if s + HEADER_ROOM <= link_mtu]
        if not fits:
            raise MrcError(f"the ports' MTU ({link_mtu}) is too small for MRC: it needs at least "
                           f"{PAYLOAD_SIZES[-1] + HEADER_ROOM}")
        #: payload bytes per packet for this context's QPs (the largest the ports carry)
        self.payload_size = fits[0]
        super().__init__(planes=max(p.plane for p in self.ports) + 1, max_qps=max_qps, cq_depth=cq_depth,
                         ports=port_cfgs(self.ports), nports=len(self.ports), what="open the MRC device",
                         hint="opening raw sockets needs CAP_NET_RAW: run as root (or inside `mrc fabric exec`)")
        self._pending_async: list = []
        self._peers: dict[tuple, int] = {}
        self._peer_paths: dict[int, dict] = {}
        self._peer_ports: dict[int, dict] = {}
        self._peer_host: dict[int, str | None] = {}
        self._peer_refs: dict[int, int] = {}  # QPs connected through each peer index (hold=True)
        self._qps: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        #: NSCC parameters every new QP gets on top of SOFTWARE_CC (``mrc ctl cc set``)
        self.cc_overrides: dict = {}
        #: the controller's EV format, EV and CC profiles (``create_qp(ev_profile_id=, cc_profile_id=)``)
        self.profiles = Registry()
        #: the thread that plays the NIC
        self.engine = EngineThread(self, self.ports)
        self.engine.set_spin(spin_us)
        if port_rate_bps:
            self.engine.set_port_rate(port_rate_bps)
        #: packets of one path per kernel buffer (1: one packet per buffer)
        self.packets_per_buffer = packets_per_buffer or self.buffer_packets_max()
        if self.packets_per_buffer > 1:
            self.engine.set_gso(self.packets_per_buffer)
        if start:
            self.engine.start()

    def buffer_packets_max(self) -> int:
        """The most full-size packets of this context that fit in one 64 KiB kernel buffer."""
        return max(1, min(lib.MRC_GSO_MAX_K, lib.MRC_GSO_MAX_BYTES // (self.payload_size + HEADER_ROOM)))

    def reg_mr(self, buf, remote_write: bool = False, pd: ProtectionDomain | None = None) -> MemoryRegion:
        """Register ``buf``; a remote-writable one is faulted in now, as a NIC pins it."""
        mr = super().reg_mr(buf, remote_write, pd)
        if remote_write:
            # fault the pages in now, as a NIC's registration pins them: else the
            # first pass of packets pays a page fault per 4 KiB in the engine
            lib.mrc_ctx_populate(ffi.cast("void *", mr.addr), mr.length)
        return mr

    def query_device(self) -> DeviceAttr:
        """The device's attributes and capabilities (mrc_query_device_ex)."""
        a = self.device_attr()
        return DeviceAttr(version=ffi.string(lib.mrc_dp_version()).decode(), wire_versions=(lib.MRC_WIRE_VERSION,),
                          ports=a["ports"], planes=a["planes"], max_qps=a["max_qps"], max_cqs=a["max_cqs"],
                          max_payload=self.payload_size, max_sge=a["max_sge"], max_mpr=a["max_mpr"],
                          mpr_granularity=a["mpr_granularity"], max_wimm=a["max_wimm"],
                          max_timeout=a["max_timeout"], max_linear_retry=a["max_linear_cnt"],
                          max_exp_retry=a["max_exp_cnt"], max_qp_hints=a["max_qp_hints"],
                          caps={"TRIM_NACK": bool(a["caps"] & lib.MRC_CAP_TRIM_NACK),
                                "DYNAMIC_MPR": bool(a["caps"] & lib.MRC_CAP_DYNAMIC_MPR),
                                "SVC_TIME": bool(a["caps"] & lib.MRC_CAP_SVC_TIME)})

    @property
    def async_fd(self) -> int:
        """Readable when asynchronous events wait (select/epoll/asyncio)."""
        return self.engine.async_fd

    def get_async_event(self, timeout: float | None = None):
        """Wait up to ``timeout`` s for the next asynchronous event (ibv_get_async_event);
        None if there is none. Events: QP_FATAL, PORT_ERR, PORT_ACTIVE, PEER_PORTS, CQ_ERR."""
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
    def create_qp(self, pd: ProtectionDomain | None = None, cq: CompletionQueue | None = None,
                  attr: QPAttr | None = None, *, recv_cq: CompletionQueue | None = None,
                  ev_profile_id: int | None = None, cc_profile_id: int | None = None) -> ConnectedQP:
        """A QP in protection domain ``pd`` (default PD 0) whose completions go
        to ``cq`` (receive completions to ``recv_cq``, by default the same;
        both default to CQ 0). With
        ``cc_profile_id`` it runs that ONLINE CC profile's NSCC parameters,
        with ``ev_profile_id`` (an SRV6 profile) it sprays over that
        profile's paths and follows its denials. The QP holds both profiles
        until it is destroyed: meanwhile they cannot go OFFLINE."""
        attr = dataclasses.replace(attr) if attr is not None else QPAttr()
        if attr.planes is None:
            attr.planes = self.planes
        if attr.mtu is None:
            attr.mtu = self.payload_size
        held = []
        ev_profile = None
        try:
            cc = self.cc_overrides
            if cc_profile_id is not None:
                held.append(self.profiles.acquire("cc", cc_profile_id))
                cc = held[-1].config
            if ev_profile_id is not None:
                ev_profile = self.profiles.acquire("ev", ev_profile_id)
                held.append(ev_profile)
                if ev_profile.fmt is None or ev_profile.fmt.mode != SRV6:
                    raise ErrnoError(errno.EINVAL, f"EV profile {ev_profile_id} is not an SRV6 profile: this "
                                                   "device's QPs take their paths from SRV6 EV profiles")
                if attr.ev_min_active is None:
                    attr.ev_min_active = ev_profile.ev_min_active
            attr.cc = {**SOFTWARE_CC, **cc, **attr.cc}
            for k, val in SOFTWARE_TIMING.items():
                if getattr(attr, k) is None:
                    setattr(attr, k, val)
            send = cq or self.cq
            qp = ConnectedQP(self, attr, send, recv_cq or send, pd or self.pd)
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

    # peers and paths ---------------------------------------------------
    def ev_address(self, qp: QueuePair, ev: int) -> str | None:
        """The destination address EV ``ev`` of a connected ``qp`` sends to."""
        return self.peer_address(getattr(qp, "peer", None), ev)

    def peer_address(self, peer: int | None, ev: int) -> str | None:
        """The destination address a packet to ``peer`` on EV ``ev`` goes to."""
        paths = self._peer_paths.get(peer, {}).get(ev_plane(ev))
        return paths[ev_entropy(ev) % len(paths)] if paths else None  # as io_queue_tx picks it

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
            raise ErrnoError(errno.E2BIG, f"at most {lib.MRC_PROBE_MAX} probes per batch, not {len(targets)}")
        req = ffi.new("struct mrc_probe_req[]", max(1, len(targets)))
        out = ffi.new("struct mrc_probe_resp[]", max(1, len(targets)))
        for i, (peer, ev) in enumerate(targets):
            req[i].peer, req[i].ev = peer, ev
        self.engine.probe(req, len(targets), int(timeout * 1e9), out)
        names = {0: "ok", -errno.ETIMEDOUT: "timeout", -errno.EHOSTUNREACH: "unreachable", -errno.ENETDOWN: "down"}
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
        return RemoteInfo(qpn=qp.qpn, ports={p.plane: p.address for p in self.ports}, psn=qp.sq_psn,
                          addr=mr.addr if mr else 0, rkey=mr.rkey if mr else 0, length=mr.length if mr else 0,
                          topology=self.resolver.name, host=self.resolver.host)

    def resolve(self, remote: RemoteInfo) -> RemoteInfo:
        """``remote`` with its paths: those it brought, else what this
        context's resolver knows of its host, else (a plain network) none:
        each plane then sends to the peer's port address."""
        if remote.paths:
            return remote
        return dataclasses.replace(remote, paths=self.resolver.paths_to(remote.host, remote.topology, remote.ports))

    def peer_index(self, remote: RemoteInfo, hold: bool = False) -> int:
        """Register how to reach a peer (its paths per plane) with the I/O layer.
        ``hold``: a QP uses it, and :meth:`release_peer` gives it back (the last
        release forgets the peer, so a long-running server does not run out of
        the engine's 256 peer slots)."""
        remote = self.resolve(remote)
        key = (tuple(sorted(remote.ports.items())), tuple(sorted((p, tuple(a)) for p, a in remote.paths.items())))
        if key in self._peers:
            idx = self._peers[key]
            if hold:
                self._peer_refs[idx] = self._peer_refs.get(idx, 0) + 1
            return idx
        cfg = ffi.new("struct mrc_peer_cfg *")
        cfg.nplanes = self.planes
        used = {}
        for plane, final in remote.ports.items():
            paths = (remote.paths.get(plane) or [final])[:lib.MRC_MAX_PATHS]
            pp = cfg.plane[plane]
            pp.final_addr = list(socket.inet_pton(socket.AF_INET6, final))
            for i, a in enumerate(paths):
                pp.paths[i] = list(socket.inet_pton(socket.AF_INET6, a))
            pp.npaths = len(paths)
            used[int(plane)] = paths
        idx = self.engine.add_peer(cfg)
        self._peers[key] = idx
        self._peer_paths[idx] = used  # what the engine sends to: ev_address() reads it
        self._peer_ports[idx] = {int(k): v for k, v in remote.ports.items()}
        self._peer_host[idx] = remote.host
        if hold:
            self._peer_refs[idx] = 1
        return idx

    def release_peer(self, idx: int) -> None:
        """One holder fewer; the last one forgets the peer."""
        n = self._peer_refs.get(idx, 0) - 1
        if n > 0:
            self._peer_refs[idx] = n
            return
        self._peer_refs.pop(idx, None)
        if n < 0 or self._h is None:
            return
        self.engine.del_peer(idx)
        self._peers = {k: v for k, v in self._peers.items() if v != idx}
        for d in (self._peer_paths, self._peer_ports, self._peer_host):
            d.pop(idx, None)

    def set_port(self, plane: int, up: bool) -> None:
        """A port's admin state (``mrc_ctl_modify_port``): a disabled port is
        DOWN; an enabled one is up while its link has carrier, which the
        engine follows by itself (rtnetlink): either way the plane's EVs stop
        at once and the peers are told."""
        self.engine.port_admin(plane, up)

    def port_stats(self) -> list[dict]:
        """Every port's counters and state."""
        return self.engine.port_stats()

    def close(self) -> None:
        """Release every QP's profiles, then close the context."""
        if self._h is not None:
            for qp in list(self._qps.values()):
                qp.release_profiles()
        super().close()


class ConnectedQP(QueuePair):
    """A queue pair of a Context; ``connect()`` takes it to RTS toward a peer."""

    profiles: tuple | list = ()
    ev_profile = None

    def connect(self, remote: RemoteInfo, keys=None) -> None:  # type: ignore[override]
        """Connect to ``remote`` (its paths from the EV profile when the QP has
        one); a secured QP under ``keys``, its connection setup's
        (``conn.keys(qp.qpn, remote.qpn)``: None when the setup agreed on no
        security), which are wiped here once installed. Reconnecting (after
        ERROR and RESET) may give the same keys again, new ones, or none (the
        QP keeps those it has): its packet numbers go on either way
        (protocol.md 8, nonces)."""
        if keys is not None:
            try:
                self.set_keys(keys)
            finally:
                ffi.memmove(keys, bytes(ffi.sizeof(keys[0])), ffi.sizeof(keys[0]))
        prof = self.ev_profile
        if prof is not None:
            # the profile's paths (its denied ones too: allow brings them back) replace the peer's own
            planned = prof.paths(include_denied=True)
            missing = sorted(set(planned) - set(remote.ports))
            if missing:
                raise ErrnoError(errno.EINVAL, f"EV profile {prof.id} has paths on plane(s) "
                                               f"{', '.join(map(str, missing))}, where the peer has no port")
            remote = dataclasses.replace(remote, paths=planned)
        peer = self.dev.peer_index(remote, hold=True)
        # the engine sends EV e of plane p to paths[p][e % len]: tell the QP which EVs alias
        paths = self.dev._peer_paths[peer]
        self.set_ev_paths([len(paths.get(p, [])) for p in range(self.dev.planes)])
        try:
            super().connect(remote.qpn, peer, rq_psn=remote.psn)
        except BaseException:
            self.dev.release_peer(peer)
            raise
        old, self.peer = getattr(self, "peer", None), peer
        if old is not None:
            self.dev.release_peer(old)
        if prof is not None:
            # what the profile denies, and planes it has no path on, start DENIED
            usable = {a for addrs in prof.paths().values() for a in addrs}
            for e in self.evs():
                if e["plane"] not in planned or self.dev.ev_address(self, e["ev"]) not in usable:
                    self.set_ev_state(e["ev"], lib.MRC_EV_DENIED)
            ref = weakref.ref(self)

            def follow(address: str, state: str) -> None:
                qp = ref()
                if qp is None or qp.destroyed:
                    return
                code = lib.MRC_EV_DENIED if state == "DENIED" else lib.MRC_EV_GOOD
                for e in qp.evs():
                    if qp.dev.ev_address(qp, e["ev"]) == address:
                        qp.set_ev_state(e["ev"], code)

            self._follow = follow
            prof.watchers.append(follow)

    def destroy(self) -> None:
        """Destroy the QP, release its profiles and forget its peer."""
        super().destroy()
        self.release_profiles()
        peer, self.peer = getattr(self, "peer", None), None
        if peer is not None:
            self.dev.release_peer(peer)

    def release_profiles(self) -> None:
        """Give back the profiles this QP held (destroy and close do it)."""
        if self.ev_profile is not None and getattr(self, "_follow", None) in self.ev_profile.watchers:
            self.ev_profile.watchers.remove(self._follow)
        for prof in self.profiles:
            self.dev.profiles.release(prof)
        self.profiles, self.ev_profile = (), None
