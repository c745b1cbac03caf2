"""Thin Python layer over the sans-I/O C engine, with a manual-progress API.

Tests and simulations drive endpoints over the in-memory link in simulated
time; nothing here runs per packet (``Sim.run`` loops in C).

>>> from mrc.engine import Endpoint, Sim, QPAttr
>>> sim = Sim(planes=2, per_plane=2, seed=1)
>>> a, b = Endpoint(planes=2), Endpoint(planes=2)
>>> qa, qb = sim.connect(a, b, QPAttr(planes=2, ev_count=8))
>>> src, dst = bytearray(b"hello" * 1000), bytearray(5000)
>>> ms, md = a.reg_mr(src), b.reg_mr(dst, remote_write=True)
>>> qa.post_write(ms, 0, len(src), md.addr, md.rkey, wr_id=7)
>>> sim.run_until(lambda: a.poll_cq())[0].wr_id
7
>>> bytes(dst) == bytes(src)
True
"""

from __future__ import annotations

import contextlib
import errno as _errno
import os
import threading
from dataclasses import dataclass, field, fields

from mrc._dp import ffi, lib
from mrc.errors import MrcError


class EngineError(MrcError, OSError):
    """A call into the C engine failed; ``errno`` tells why."""


_HINTS = {
    _errno.EINVAL: "an argument or a state transition is not allowed here",
    _errno.ENOENT: "no such object (destroyed, or never created)",
    _errno.ENOSPC: "a queue or table is full: poll completions or create fewer objects",
    _errno.EFAULT: "a scatter entry is outside its memory region (wrong lkey, offset or length)",
    _errno.EOPNOTSUPP: "only RDMA WRITE and WRITE_IMM exist in MRC",
    _errno.EMSGSIZE: "a message may carry at most 4 GiB - 1",
    _errno.ENOMEM: "out of memory",
    _errno.E2BIG: "the output array is too small",
}


def check(rc: int, what: str) -> int:
    """Map a C return code (0/positive or -errno) to a value or an exception."""
    if rc < 0:
        e = -rc
        raise EngineError(e, f"{what}: {os.strerror(e)} ({_HINTS.get(e, 'see errno')})")
    return rc


QP_STATES = {lib.MRC_QPS_RESET: "RESET", lib.MRC_QPS_INIT: "INIT", lib.MRC_QPS_RTR: "RTR",
             lib.MRC_QPS_RTS: "RTS", lib.MRC_QPS_ERROR: "ERROR"}
WC_STATUS = {lib.MRC_WC_SUCCESS: "SUCCESS", lib.MRC_WC_LOC_LEN_ERR: "LOC_LEN_ERR",
             lib.MRC_WC_LOC_PROT_ERR: "LOC_PROT_ERR", lib.MRC_WC_REM_ACCESS_ERR: "REM_ACCESS_ERR",
             lib.MRC_WC_RETRY_EXC_ERR: "RETRY_EXC_ERR", lib.MRC_WC_WR_FLUSH_ERR: "WR_FLUSH_ERR",
             lib.MRC_WC_REM_OP_ERR: "REM_OP_ERR"}
EV_STATES = {lib.MRC_EV_GOOD: "GOOD", lib.MRC_EV_SKIP: "SKIP", lib.MRC_EV_ASSUMED_BAD: "ASSUMED_BAD",
             lib.MRC_EV_DENIED: "DENIED", lib.MRC_EV_UNKNOWN: "UNKNOWN"}
DROP_REASONS = ["malformed", "icrc", "unknown_qp", "qp_state", "psn_window", "rkey", "range", "duplicate",
                "no_recv", "trimmed", "stale_ack", "stale_probe"]


@dataclass
class QPAttr:
    """QP attributes (OCP names where OCP has them). ``None`` keeps the C default."""

    mpr: int | None = None
    max_wimm: int | None = None
    timeout: int | None = None
    linear_cnt: int | None = None
    exp_cnt: int | None = None
    mtu: int | None = None
    ev_count: int | None = None
    ev_min_active: int | None = None
    ev_backup: int | None = None
    planes: int | None = None
    ack_bytes: int | None = None
    probe_k: int | None = None
    probe_interval_ns: int | None = None
    skip_ns: int | None = None
    reorder_ns: int | None = None
    sq_depth: int | None = None
    rq_depth: int | None = None
    cc: dict = field(default_factory=dict)

    def to_c(self):
        a = ffi.new("struct mrc_qp_attr *")
        lib.mrc_qp_attr_default(a)
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "cc":
                for k, cv in v.items():
                    setattr(a.cc, k, cv)
            elif v is not None:
                setattr(a, f.name, v)
        return a


ASYNC_EVENTS = {lib.MRC_EVENT_QP_FATAL: "QP_FATAL", lib.MRC_EVENT_PORT_ERR: "PORT_ERR",
                lib.MRC_EVENT_PORT_ACTIVE: "PORT_ACTIVE", lib.MRC_EVENT_PEER_PORTS: "PEER_PORTS"}


@dataclass(frozen=True)
class AsyncEvent:
    """An asynchronous event. ``info``: for QP_FATAL the status that failed the
    QP (``status_name``), for PORT_ERR/PORT_ACTIVE the plane, for PEER_PORTS
    the peer's port bitmap. ``dropped``: events lost before this one."""

    type: str
    qpn: int
    info: int
    dropped: int = 0

    @property
    def status_name(self) -> str | None:
        return WC_STATUS.get(self.info) if self.type == "QP_FATAL" else None


@dataclass(frozen=True)
class WorkCompletion:
    wr_id: int
    qpn: int
    status: int
    opcode: int
    byte_len: int
    imm_data: int

    @property
    def status_name(self) -> str:
        return WC_STATUS.get(self.status, str(self.status))

    @property
    def ok(self) -> bool:
        return self.status == lib.MRC_WC_SUCCESS


class MemoryRegion:
    """A registered buffer; keeps the buffer alive while registered."""

    def __init__(self, ep: Endpoint, buf, remote_write: bool) -> None:
        self.ep = ep
        self.buf = buf
        self._cbuf = ffi.from_buffer(buf, require_writable=remote_write)
        self.addr = int(ffi.cast("uintptr_t", self._cbuf))
        self.length = len(self._cbuf)
        lkey, rkey = ffi.new("uint32_t *"), ffi.new("uint32_t *")
        access = lib.MRC_ACCESS_LOCAL_WRITE | (lib.MRC_ACCESS_REMOTE_WRITE if remote_write else 0)
        check(ep.call(lib.mrc_mr_reg, self._cbuf, self.length, access, lkey, rkey), "register memory")
        self.lkey, self.rkey = lkey[0], rkey[0]

    def close(self) -> None:
        if self._cbuf is not None and self.ep._ep is not None:
            self.ep.call(lib.mrc_mr_dereg, self.lkey)
        self._cbuf = None


class QueuePair:
    def __init__(self, ep: Endpoint, attr: QPAttr) -> None:
        self.ep = ep
        self.attr = attr
        qpn = ffi.new("uint32_t *")
        check(ep.call(lib.mrc_qp_create, attr.to_c(), qpn), "create QP")
        self.qpn = qpn[0]
        self.destroyed = False

    def modify(self, state: int, dest_qpn: int = 0, peer: int = 0) -> None:
        check(self.ep.call(lib.mrc_qp_modify, self.qpn, state, dest_qpn, peer),
              f"modify QP {self.qpn} to {QP_STATES.get(state, state)}")

    def connect(self, dest_qpn: int, peer: int) -> None:
        """RESET -> INIT -> RTR -> RTS in one call."""
        self.modify(lib.MRC_QPS_INIT)
        self.modify(lib.MRC_QPS_RTR, dest_qpn, peer)
        self.modify(lib.MRC_QPS_RTS)

    def post_write(self, mr: MemoryRegion, offset: int, length: int, remote_addr: int, rkey: int,
                   wr_id: int = 0, imm: int | None = None, sges: list[tuple[MemoryRegion, int, int]] | None = None
                   ) -> None:
        """Post one RDMA WRITE (or WRITE_IMM when ``imm`` is given)."""
        wr = ffi.new("struct mrc_wr *")
        wr.wr_id = wr_id
        wr.opcode = lib.MRC_WR_WRITE if imm is None else lib.MRC_WR_WRITE_IMM
        wr.imm_data = imm or 0
        wr.remote_addr = remote_addr
        wr.rkey = rkey
        parts = sges if sges is not None else [(mr, offset, length)]
        if len(parts) > lib.MRC_MAX_SGE:
            raise EngineError(_errno.EINVAL, f"at most {lib.MRC_MAX_SGE} scatter entries per work request")
        wr.num_sge = len(parts)
        for i, (m, off, ln) in enumerate(parts):
            wr.sg_list[i].addr = m.addr + off
            wr.sg_list[i].length = ln
            wr.sg_list[i].lkey = m.lkey
        check(self.ep.fast("post_write", self.qpn, wr, 1), f"post WRITE on QP {self.qpn}")

    def post_recv(self, wr_ids: list[int]) -> None:
        arr = ffi.new("uint64_t[]", wr_ids)
        n = check(self.ep.fast("post_recv", self.qpn, arr, len(wr_ids)), f"post receives on QP {self.qpn}")
        if n != len(wr_ids):
            raise EngineError(_errno.ENOSPC, f"only {n} of {len(wr_ids)} receives fit the receive queue")

    def stats(self) -> dict:
        st = ffi.new("struct mrc_qp_stats *")
        check(self.ep.call(lib.mrc_qp_query, self.qpn, st), f"query QP {self.qpn}")
        d = {name: getattr(st, name) for name, _ in ffi.typeof("struct mrc_qp_stats").fields}
        d["plane_tx"] = list(st.plane_tx)
        d["state_name"] = QP_STATES.get(d["state"], "?")
        return d

    @property
    def state(self) -> str:
        return self.stats()["state_name"]

    @property
    def attr_mtu(self) -> int:
        """Payload bytes per packet (the C default when the attribute was not set)."""
        return self.attr.mtu or 4096

    def evs(self) -> list[dict]:
        out = ffi.new("struct mrc_ev_info[]", 8192)
        n = check(self.ep.call(lib.mrc_ev_list, self.qpn, out, 8192), "list EVs")
        return [{"ev": out[i].ev, "plane": out[i].ev >> 16, "entropy": out[i].ev & 0xFFFF,
                 "state": EV_STATES[out[i].state], "active": bool(out[i].in_slot)} for i in range(n)]

    def set_ev_state(self, ev: int, state: int) -> None:
        check(self.ep.call(lib.mrc_ev_set_state, self.qpn, ev, state), f"set EV {ev:#x} state")

    def set_ev_paths(self, npaths: list[int]) -> None:
        """Which EVs share a path: on plane p, EVs whose entropy is equal mod
        npaths[p] (0: unknown). A loss retires an EV and its aliases at once."""
        arr = ffi.new("uint32_t[]", list(npaths) or [0])
        check(self.ep.call(lib.mrc_ev_set_paths, self.qpn, arr, len(npaths)), f"set QP {self.qpn} paths")

    def destroy(self) -> None:
        check(self.ep.call(lib.mrc_qp_destroy, self.qpn), f"destroy QP {self.qpn}")
        self.destroyed = True


class Endpoint:
    """A sans-I/O engine instance (a NIC's worth of state).

    Every call into the engine goes through ``call()``; a subclass that runs
    an engine thread (``mrc.verbs.Context``) holds the engine lock there.
    """

    _ep = None

    def _guard(self):
        return contextlib.nullcontext()

    def call(self, fn, *args):
        if self._ep is None:
            raise EngineError(_errno.EBADF, "the context is closed: open a new one")
        with self._guard():
            return fn(self._ep, *args)

    def fast(self, op: str, *args):
        """The lock-free ring operations (post_write, post_recv, poll_cq)."""
        if self._ep is None:
            raise EngineError(_errno.EBADF, "the context is closed: open a new one")
        return getattr(lib, "mrc_" + op)(self._ep, *args)

    def _wc_buf(self):
        # one completion buffer per polling thread
        buf = getattr(self._tls, "wc", None)
        if buf is None:
            buf = self._tls.wc = ffi.new("struct mrc_wc[]", 1024)
        return buf

    def __init__(self, planes: int = 8, max_qps: int = 1024, cq_depth: int = 65536) -> None:
        attr = ffi.new("struct mrc_ep_attr *", {"planes": planes, "max_qps": max_qps, "cq_depth": cq_depth})
        out = ffi.new("struct mrc_ep **")
        check(lib.mrc_ep_create(attr, out), "create endpoint")
        self._ep = out[0]
        self._mrs: list[MemoryRegion] = []
        self._tls = threading.local()

    def reg_mr(self, buf, remote_write: bool = False) -> MemoryRegion:
        mr = MemoryRegion(self, buf, remote_write)
        self._mrs.append(mr)
        return mr

    def create_qp(self, attr: QPAttr | None = None) -> QueuePair:
        return QueuePair(self, attr or QPAttr())

    def poll_cq(self, max_entries: int = 1024) -> list[WorkCompletion]:
        w = self._wc_buf()
        n = self.fast("poll_cq", w, min(max_entries, 1024))
        return [WorkCompletion(w[i].wr_id, w[i].qpn, w[i].status, w[i].opcode, w[i].byte_len, w[i].imm_data)
                for i in range(n)]

    def drops(self) -> dict:
        arr = ffi.new("uint64_t[]", len(DROP_REASONS))
        self.call(lib.mrc_ep_drops, arr, len(DROP_REASONS))
        return {name: arr[i] for i, name in enumerate(DROP_REASONS)}

    def set_port(self, plane: int, up: bool, now_ns: int = 0) -> None:
        check(self.call(lib.mrc_ep_set_port, plane, int(up), now_ns), f"set port {plane}")

    def ev_events(self) -> list[dict]:
        out = ffi.new("struct mrc_ev_event[]", 4096)
        n = self.call(lib.mrc_ev_poll_events, out, 4096)
        return [{"qpn": out[i].qpn, "ev": out[i].ev, "old": EV_STATES[out[i].old_state],
                 "new": EV_STATES[out[i].new_state], "t_ns": out[i].t_ns, "dropped": out[i].dropped,
                 "cause_ns": out[i].cause_ns}
                for i in range(n)]

    def async_events(self) -> list[AsyncEvent]:
        """Asynchronous events waiting (ibv_get_async_event): QP_FATAL, PORT_ERR,
        PORT_ACTIVE, PEER_PORTS. Does not block; Context.get_async_event() waits."""
        out = ffi.new("struct mrc_async_event[]", 256)
        n = self.call(lib.mrc_ep_async_events, out, 256)
        return [AsyncEvent(ASYNC_EVENTS.get(out[i].type, str(out[i].type)), out[i].qpn, out[i].info,
                           out[i].dropped) for i in range(n)]

    def probe_send(self, peer: int, ev: int, now_ns: int = 0) -> int:
        """Queue an EV probe to ``peer`` on ``ev``; returns its id (the packet
        leaves on the next poll_tx)."""
        pid = ffi.new("uint32_t *")
        check(self.call(lib.mrc_ep_probe_send, peer, ev, now_ns, pid), f"probe EV {ev:#x}")
        return pid[0]

    def probe_result(self, probe_id: int) -> dict | None:
        """The answer to probe ``probe_id`` (and forget it), or None while it is pending."""
        r = ffi.new("struct mrc_probe_result *")
        if not check(self.call(lib.mrc_ep_probe_result, probe_id, r), f"probe {probe_id}"):
            return None
        return {"id": r.id, "ev": r.ev, "peer": r.peer, "port": r.port, "rtt_ns": r.rtt_ns}

    def probe_cancel(self, probe_id: int) -> None:
        check(self.call(lib.mrc_ep_probe_cancel, probe_id), f"cancel probe {probe_id}")

    def input(self, packet: bytes, ev: int = 0, peer: int = 0, port: int = 0, ecn_ce: bool = False,
              trimmed: bool = False, now_ns: int = 0) -> int:
        """Feed one packet (BTH..ICRC) to the engine; returns 0 or -errno (never raises)."""
        m = ffi.new("struct mrc_meta *", {"ev": ev, "peer": peer, "port": port, "ecn_ce": int(ecn_ce),
                                          "trimmed": int(trimmed)})
        return self.call(lib.mrc_ep_input, packet, len(packet), m, now_ns)

    def poll_tx(self, now_ns: int = 0, max_packets: int = 256) -> list[tuple[bytes, dict]]:
        """Packets the engine wants to send now (for tests; the I/O layer does this in C)."""
        buf = ffi.new("uint8_t[]", 1 << 20)
        d = ffi.new("struct mrc_txdesc[]", max_packets)
        n = check(self.call(lib.mrc_ep_poll_tx, now_ns, buf, 1 << 20, d, max_packets), "poll tx")
        return [(bytes(ffi.buffer(buf + d[i].off, d[i].len)),
                 {"ev": d[i].ev, "peer": d[i].peer, "tclass": d[i].tclass, "is_data": d[i].is_data})
                for i in range(n)]

    def close(self) -> None:
        if self._ep is not None:
            lib.mrc_ep_destroy(self._ep)
            self._ep = None

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


class Sim:
    """The in-memory link: ``planes * per_plane`` paths between endpoints."""

    def __init__(self, planes: int = 8, per_plane: int = 4, seed: int = 1) -> None:
        out = ffi.new("struct mrc_sim **")
        check(lib.mrc_sim_create(planes, per_plane, seed, out), "create simulated link")
        self._sim = out[0]
        self.planes, self.per_plane = planes, per_plane
        self.eps: list[Endpoint] = []

    def attach(self, ep: Endpoint) -> int:
        idx = check(lib.mrc_sim_attach(self._sim, ep._ep), "attach endpoint")
        self.eps.append(ep)
        return idx

    def index(self, ep: Endpoint) -> int:
        for i, e in enumerate(self.eps):
            if e is ep:
                return i
        return self.attach(ep)

    def connect(self, a: Endpoint, b: Endpoint, attr: QPAttr | None = None) -> tuple[QueuePair, QueuePair]:
        attr = attr or QPAttr(planes=self.planes)
        ia, ib = self.index(a), self.index(b)
        qa, qb = a.create_qp(attr), b.create_qp(attr)
        qa.connect(qb.qpn, ib)
        qb.connect(qa.qpn, ia)
        return qa, qb

    def path(self, plane: int, index: int) -> int:
        return plane * self.per_plane + index

    def set_path(self, path: int, **kw) -> None:
        p = ffi.new("struct mrc_sim_path *")
        check(lib.mrc_sim_get_path(self._sim, path, p), f"path {path}")
        for k, v in kw.items():
            setattr(p, k, v)
        check(lib.mrc_sim_set_path(self._sim, path, p), f"set path {path}")

    def set_all(self, **kw) -> None:
        for i in range(self.planes * self.per_plane):
            self.set_path(i, **kw)

    @property
    def now(self) -> int:
        return self.stats()["now_ns"]

    def stats(self) -> dict:
        st = ffi.new("struct mrc_sim_stats *")
        lib.mrc_sim_stats(self._sim, st)
        d = {name: getattr(st, name) for name, _ in ffi.typeof("struct mrc_sim_stats").fields}
        d["per_path_tx"] = list(st.per_path_tx)[: self.planes * self.per_plane]
        return d

    def run(self, until_ns: int, stop_on_cqe: bool = False) -> bool:
        """Advance simulated time (in C). True if it stopped for a completion."""
        return bool(lib.mrc_sim_run(self._sim, until_ns, int(stop_on_cqe)))

    def run_until(self, pred, budget_ns: int = 10_000_000_000, step_ns: int = 1_000_000):
        """Run until ``pred()`` returns something truthy (checked between steps); return it."""
        deadline = self.now + budget_ns
        while True:
            r = pred()
            if r:
                return r
            if self.now >= deadline:
                raise TimeoutError(f"simulated {budget_ns / 1e9:.3f} s without reaching the condition")
            self.run(min(self.now + step_ns, deadline), stop_on_cqe=True)

    def close(self) -> None:
        if self._sim is not None:
            lib.mrc_sim_destroy(self._sim)
            self._sim = None

    def __del__(self) -> None:
        self.close()
