"""The Python core: one C context (``struct mrc_ctx``) and the objects it
owns (memory regions, completion queues, queue pairs) with their EV state,
events and counters. Every method calls one C function of
csrc/include/mrc/mrc.h (or mrc_manual.h) by its name, and every failure goes through the one
errno mapping (:func:`mrc.errors.check`). Names of states and counters come
from the C module's tables, limits from its constants.

Two kinds of context build on :class:`Device`: ``mrc.verbs.Context`` (ports
and the engine thread that plays the NIC) and ``mrc.manual.ManualContext``
(no ports: tests and the in-memory link move its packets and its time).

>>> from mrc.manual import ManualContext
>>> with ManualContext(planes=2) as dev:
...     qp = dev.create_qp(QPAttr(planes=2, ev_count=8))
...     qp.state, QP_STATES[lib.MRC_QPS_RTS]
('RESET', 'RTS')
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import secrets
import select
import threading
import time
from dataclasses import dataclass, field, fields

from mrc._dp import ffi, lib
from mrc.errors import ErrnoError, check
from mrc.secure import MODE_NAMES
from mrc.wire import ev_entropy, ev_plane


def _names(fn, values) -> dict[int, str]:
    out = {}
    for v in values:
        s = fn(v)
        if s != ffi.NULL:
            out[v] = ffi.string(s).decode()
    return out


QP_STATES = _names(lib.mrc_qp_state_name, range(8))
WC_STATUS = _names(lib.mrc_wc_status_name, range(32))
WC_WORDS = _names(lib.mrc_wc_status_str, range(32))
EV_STATES = _names(lib.mrc_ev_state_name, range(8))
ASYNC_EVENTS = _names(lib.mrc_event_name, range(32))
DROP_REASONS = [ffi.string(lib.mrc_drop_name(i)).decode() for i in range(lib.MRC_DROP_NREASONS)]
EV_STATE_CODES = {name: code for code, name in EV_STATES.items()}
#: completions one poll hands back at most
POLL_BATCH = 1024


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
    pkey: int | None = None      # a partition (P_Key), as InfiniBand's; None/0: none
    cc: dict = field(default_factory=dict)

    def to_c(self):
        """The attributes as a ``struct mrc_qp_attr`` (the engine's defaults where unset)."""
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

    def state_bytes(self) -> int:
        """The engine memory of one QP with these attributes."""
        return int(lib.mrc_qp_state_bytes(self.to_c()))


@dataclass(frozen=True)
class AsyncEvent:
    """An asynchronous event. ``info``: for QP_FATAL the status that failed the
    QP (``status_name``), for PORT_ERR/PORT_ACTIVE the plane, for PEER_PORTS
    the peer's port bitmap, for CQ_ERR the CQ that filled up. ``dropped``:
    events lost before this one."""

    type: str
    qpn: int
    info: int
    dropped: int = 0

    @property
    def status_name(self) -> str | None:
        """For a QP_FATAL event, the status the QP failed with."""
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
        """The status's name (SUCCESS, RETRY_EXC_ERR, ...)."""
        return WC_STATUS.get(self.status, str(self.status))

    @property
    def status_words(self) -> str:
        """The status in words, with its name: "the peer stopped answering: ... (RETRY_EXC_ERR)"."""
        return f"{WC_WORDS.get(self.status, 'status ' + str(self.status))} ({self.status_name})"

    @property
    def ok(self) -> bool:
        """Whether the work request succeeded."""
        return self.status == lib.MRC_WC_SUCCESS


def _as_dict(cdata, ctype: str) -> dict:
    return {name: getattr(cdata, name) for name, _ in ffi.typeof(ctype).fields}


class ProtectionDomain:
    """A protection domain: its regions are reachable only through its QPs."""

    def __init__(self, dev: Device, pdn: int) -> None:
        self.dev, self.pdn = dev, pdn

    def reg_mr(self, buf, access: int | None = None, remote_write: bool = False) -> MemoryRegion:
        """Register a bytearray, mmap or any buffer in this PD (writable for remote write:
        ``access=ACCESS_REMOTE_WRITE`` or ``remote_write=True``)."""
        if access is not None:
            remote_write = bool(access & lib.MRC_ACCESS_REMOTE_WRITE)
        return self.dev.reg_mr(buf, remote_write, pd=self)

    def dealloc(self) -> None:
        """Free the PD (EBUSY while a region or QP is in it)."""
        check(lib.mrc_pd_dealloc(self.dev.handle(), self.pdn), f"free protection domain {self.pdn}")


class MemoryRegion:
    """A registered buffer; keeps the buffer alive while registered. Closing it
    while a queued WR still reads from it is refused (EBUSY)."""

    def __init__(self, dev: Device, buf, remote_write: bool, pd: ProtectionDomain) -> None:
        self.dev = dev
        self.buf = buf
        self.pd = pd
        self._cbuf = ffi.from_buffer(buf, require_writable=remote_write)
        self.addr = int(ffi.cast("uintptr_t", self._cbuf))
        self.length = len(self._cbuf)
        lkey, rkey = ffi.new("uint32_t *"), ffi.new("uint32_t *")
        access = lib.MRC_ACCESS_LOCAL_WRITE | (lib.MRC_ACCESS_REMOTE_WRITE if remote_write else 0)
        check(lib.mrc_mr_reg(dev.handle(), pd.pdn, self._cbuf, self.length, access, lkey, rkey), "register memory")
        self.lkey, self.rkey = lkey[0], rkey[0]

    def close(self) -> None:
        """Deregister the region (refused while a queued work request reads from it)."""
        if self._cbuf is not None and dev_open(self.dev):
            check(lib.mrc_mr_dereg(self.dev.handle(), self.lkey), "close a memory region",
                  "a queued work request still reads from it: poll its completion first")
        self._cbuf = None
        if self in self.dev._mrs:  # the device no longer keeps the buffer alive
            self.dev._mrs.remove(self)


class CompletionQueue:
    """A completion queue and its completion channel (an eventfd, for a
    context with an engine thread)."""

    def __init__(self, dev: Device, cqn: int, depth: int) -> None:
        self.dev, self.cqn, self.depth = dev, cqn, depth
        self.destroyed = False

    @property
    def fd(self) -> int:
        """A file descriptor that becomes readable when completions arrive (select/epoll/asyncio)."""
        return check(lib.mrc_cq_fd(self.dev.handle(), self.cqn), f"completion channel of CQ {self.cqn}")

    def poll(self, max_entries: int = POLL_BATCH) -> list[WorkCompletion]:
        """Up to ``max_entries`` completions, oldest first."""
        w = self.dev.wc_buffer()
        n = check(lib.mrc_poll_cq(self.dev.handle(), self.cqn, w, min(max_entries, POLL_BATCH)),
                  f"poll CQ {self.cqn}")
        return [WorkCompletion(w[i].wr_id, w[i].qpn, w[i].status, w[i].opcode, w[i].byte_len, w[i].imm_data)
                for i in range(n)]

    def stats(self) -> dict:
        """``depth``, ``waiting`` (completions not polled yet) and ``overflow``
        (completions that found the CQ full: they waited, none was lost)."""
        st = ffi.new("struct mrc_cq_stats *")
        check(lib.mrc_cq_query(self.dev.handle(), self.cqn, st), f"query CQ {self.cqn}")
        return _as_dict(st, "struct mrc_cq_stats")

    @property
    def overflow(self) -> int:
        """Completions that found the CQ full (they waited; none was lost)."""
        return self.stats()["overflow"]

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

    def destroy(self) -> None:
        """Destroy the CQ (refused while a QP uses it)."""
        check(lib.mrc_cq_destroy(self.dev.handle(), self.cqn), f"destroy CQ {self.cqn}")
        self.destroyed = True


class QueuePair:
    """A queue pair of a :class:`Device`. ``sq_psn`` is the PSN of its first
    packet: random, unless given (connection setup tells the peer)."""

    def __init__(self, dev: Device, attr: QPAttr, send_cq: CompletionQueue, recv_cq: CompletionQueue,
                 pd: ProtectionDomain) -> None:
        self.dev = dev
        self.attr = attr
        self.send_cq, self.recv_cq, self.pd = send_cq, recv_cq, pd
        self.sq_psn = dev.random_psn()
        a = attr.to_c()
        a.send_cq, a.recv_cq, a.pd = send_cq.cqn, recv_cq.cqn, pd.pdn
        self._nevs = lib.mrc_qp_ev_total(a)  # the rotation and the spares
        qpn = ffi.new("uint32_t *")
        check(lib.mrc_qp_create(dev.handle(), a, qpn), "create QP")
        self.qpn = qpn[0]
        self.destroyed = False

    def modify(self, state: int, dest_qpn: int = 0, peer: int = 0, rq_psn: int = 0, sq_psn: int | None = None
               ) -> None:
        """Move the QP to ``state``. RTR takes the peer, its QP (``dest_qpn``)
        and the PSN of its first packet (``rq_psn``); RTS the PSN of this
        QP's first packet (``sq_psn``, by default ``self.sq_psn``)."""
        if sq_psn is not None:
            self.sq_psn = sq_psn
        conn = ffi.new("struct mrc_qp_conn *", {"dest_qpn": dest_qpn, "peer": peer, "rq_psn": rq_psn,
                                                 "sq_psn": self.sq_psn})
        check(lib.mrc_qp_modify(self.dev.handle(), self.qpn, state, conn),
              f"modify QP {self.qpn} to {QP_STATES.get(state, state)}")

    def set_keys(self, keys) -> None:
        """Secure the QP (before it connects) with ``keys``, a ``struct
        mrc_qp_keys`` (mrc.secure.derive): every packet it sends is sealed and
        only packets that verify reach it."""
        check(lib.mrc_qp_set_keys(self.dev.handle(), self.qpn, keys), f"set the keys of QP {self.qpn}",
              "keys are set in RESET or INIT, before the QP connects")

    def connect(self, dest_qpn: int, peer: int, rq_psn: int = 0, sq_psn: int | None = None) -> None:
        """RESET -> INIT -> RTR -> RTS in one call, toward QP ``dest_qpn`` of
        ``peer``, whose first packet carries ``rq_psn``."""
        self.modify(lib.MRC_QPS_INIT)
        self.modify(lib.MRC_QPS_RTR, dest_qpn, peer, rq_psn)
        self.modify(lib.MRC_QPS_RTS, sq_psn=sq_psn)

    def post_write(self, mr: MemoryRegion | None, offset: int, length: int, remote_addr: int, rkey: int,
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
            raise ErrnoError(errno.EINVAL, f"at most {lib.MRC_MAX_SGE} scatter entries per work request")
        wr.num_sge = len(parts)
        for i, (m, off, ln) in enumerate(parts):
            wr.sg_list[i].addr = m.addr + off
            wr.sg_list[i].length = ln
            wr.sg_list[i].lkey = m.lkey
        check(lib.mrc_post_write(self.dev.handle(), self.qpn, wr, 1), f"post WRITE on QP {self.qpn}")

    def post_recv(self, wr_ids: list[int]) -> None:
        """Post receives for WRITE_IMMs, one per work request id."""
        arr = ffi.new("uint64_t[]", wr_ids)
        n = check(lib.mrc_post_recv(self.dev.handle(), self.qpn, arr, len(wr_ids)), f"post receives on QP {self.qpn}")
        if n != len(wr_ids):
            raise ErrnoError(errno.ENOSPC, f"only {n} of {len(wr_ids)} receives fit the receive queue")

    def stats(self) -> dict:
        """The QP's counters, state and window (``struct mrc_qp_stats``)."""
        st = ffi.new("struct mrc_qp_stats *")
        check(lib.mrc_qp_query(self.dev.handle(), self.qpn, st), f"query QP {self.qpn}")
        d = _as_dict(st, "struct mrc_qp_stats")
        d["plane_tx"] = list(st.plane_tx)
        d["state_name"] = QP_STATES.get(d["state"], "?")
        return d

    @property
    def state(self) -> str:
        """RESET, INIT, RTR, RTS or ERROR."""
        return self.stats()["state_name"]

    @property
    def security(self) -> str:
        """The mode of the keys the QP holds ("off": none, ever): C holds it, and a secured QP stays so."""
        mode = check(lib.mrc_qp_security(self.dev.handle(), self.qpn), f"query QP {self.qpn}")
        return MODE_NAMES[mode]

    @property
    def attr_mtu(self) -> int:
        """Payload bytes per packet (the C default when the attribute was not set)."""
        return self.attr.mtu or QPAttr().to_c().mtu

    def evs(self) -> list[dict]:
        """Every EV of the QP: value, plane, entropy, state, and whether it is in the rotation."""
        out = ffi.new("struct mrc_ev_info[]", self._nevs)
        n = check(lib.mrc_ev_list(self.dev.handle(), self.qpn, out, self._nevs), "list EVs")
        return [{"ev": out[i].ev, "plane": ev_plane(out[i].ev), "entropy": ev_entropy(out[i].ev),
                 "state": EV_STATES[out[i].state], "active": bool(out[i].in_slot)} for i in range(n)]

    def set_ev_state(self, ev: int, state: int) -> None:
        """Set an EV GOOD or DENIED (the controller's allow and deny)."""
        check(lib.mrc_ev_set_state(self.dev.handle(), self.qpn, ev, state), f"set EV {ev:#x} state")

    def set_ev_paths(self, npaths: list[int]) -> None:
        """Which EVs share a path: on plane p, EVs whose entropy is equal mod
        npaths[p] (0: unknown). A loss retires an EV and its aliases at once."""
        arr = ffi.new("uint32_t[]", list(npaths) or [0])
        check(lib.mrc_ev_set_paths(self.dev.handle(), self.qpn, arr, len(npaths)), f"set QP {self.qpn} paths")

    def destroy(self) -> None:
        """Destroy the QP."""
        check(lib.mrc_qp_destroy(self.dev.handle(), self.qpn), f"destroy QP {self.qpn}")
        self.destroyed = True


def dev_open(dev: Device) -> bool:
    """Whether ``dev``'s context is still open."""
    return dev._h is not None


class Device:
    """One C context and the objects it owns. Subclasses decide how it is
    progressed (an engine thread, or by hand) and what ports it has.

    ``ports`` is a ``struct mrc_port_cfg[]`` (none: a context driven by hand)."""

    qp_class: type = QueuePair
    _h = None

    def __init__(self, planes: int = 8, max_qps: int = 1024, cq_depth: int = 65536, ports=None, nports: int = 0,
                 what: str = "create the MRC context", hint: str | None = None, seed: int = 0,
                 ev_event_depth: int = 0) -> None:
        if not all(isinstance(v, int) and 0 <= v < 1 << 32 for v in (planes, max_qps, cq_depth, ev_event_depth)):
            raise ErrnoError(errno.EINVAL, f"{what}: sizes are integers from 0 to 2^32 - 1")
        attr = ffi.new("struct mrc_ep_attr *", {"planes": planes, "max_qps": max_qps, "cq_depth": cq_depth,
                                                 "ev_event_depth": ev_event_depth, "seed": seed & (2**64 - 1)})
        out = ffi.new("struct mrc_ctx **")
        self._calls = threading.Condition()  # guards _h and _waiting
        self._waiting = 0                    # threads inside a call that blocks (waiting_call)
        #: called first by close(), while the context is still whole: what serves it from
        #: other threads (a control endpoint) stops and waits for those threads
        self.close_hooks: list = []
        check(lib.mrc_ctx_create(attr, ports if nports else ffi.NULL, nports, out), what, hint)
        self._h = out[0]
        self.planes = planes
        self.max_qps = max_qps
        # initial PSNs: unpredictable, or (a seed: tests) reproducible
        self._rng = random.Random(seed) if seed else secrets.SystemRandom()
        self._mrs: list[MemoryRegion] = []
        self._tls = threading.local()
        #: CQ 0 and PD 0: every context has them; objects created without one use them
        self.cq = CompletionQueue(self, 0, cq_depth)
        self.pd = ProtectionDomain(self, 0)

    def handle(self):
        """The C context; EBADF once closed."""
        h = self._h
        if h is None:
            raise ErrnoError(errno.EBADF, "the context is closed: open a new one")
        return h

    @contextlib.contextmanager
    def waiting_call(self):
        """The C context for a call that blocks (EV probes): close() from
        another thread cancels the call (it returns ECANCELED) and waits for it
        to leave before it frees anything."""
        with self._calls:
            h = self.handle()
            self._waiting += 1
        try:
            yield h
        finally:
            with self._calls:
                self._waiting -= 1
                self._calls.notify_all()

    def wc_buffer(self):
        """A completion buffer for the calling thread."""
        buf = getattr(self._tls, "wc", None)
        if buf is None:
            buf = self._tls.wc = ffi.new("struct mrc_wc[]", POLL_BATCH)
        return buf

    def random_psn(self) -> int:
        """A random initial PSN (24 bits)."""
        return self._rng.getrandbits(24)

    # objects -------------------------------------------------------------
    def alloc_pd(self) -> ProtectionDomain:
        """A new protection domain (``self.pd`` is PD 0)."""
        pdn = ffi.new("uint32_t *")
        check(lib.mrc_pd_alloc(self.handle(), pdn), "allocate a protection domain")
        return ProtectionDomain(self, pdn[0])

    def reg_mr(self, buf, remote_write: bool = False, pd: ProtectionDomain | None = None) -> MemoryRegion:
        """Register ``buf`` (remote-writable if asked) in ``pd``, or the device's PD."""
        mr = MemoryRegion(self, buf, remote_write, pd or self.pd)
        self._mrs.append(mr)
        return mr

    def live_regions(self) -> int:
        """Memory regions registered and not closed."""
        return len(self._mrs)

    def create_cq(self, depth: int | None = None) -> CompletionQueue:
        """A new completion queue (``depth`` completions; default that of CQ 0)."""
        depth = self.cq.depth if depth is None else depth
        cqn = ffi.new("uint32_t *")
        check(lib.mrc_cq_create(self.handle(), depth, cqn), f"create a CQ of depth {depth}")
        return CompletionQueue(self, cqn[0], depth)

    def create_qp(self, attr: QPAttr | None = None, send_cq: CompletionQueue | None = None,
                  recv_cq: CompletionQueue | None = None, pd: ProtectionDomain | None = None) -> QueuePair:
        """A queue pair on these CQs and PD (the device's by default)."""
        return self.qp_class(self, attr or QPAttr(), send_cq or self.cq, recv_cq or send_cq or self.cq,
                             pd or self.pd)

    def poll_cq(self, max_entries: int = POLL_BATCH) -> list[WorkCompletion]:
        """Poll CQ 0."""
        return self.cq.poll(max_entries)

    # state and counters --------------------------------------------------
    def drops(self) -> dict:
        """Received packets dropped, by reason (never a crash: a counter)."""
        arr = ffi.new("uint64_t[]", len(DROP_REASONS))
        check(lib.mrc_ctx_drops(self.handle(), arr, len(DROP_REASONS)), "read drop counters")
        return {name: arr[i] for i, name in enumerate(DROP_REASONS)}

    def stats(self) -> dict:
        """What the endpoint could not do at once: control packets not queued
        (ring full) or not built, events dropped, completions that waited for CQ room."""
        st = ffi.new("struct mrc_ep_stats *")
        check(lib.mrc_ctx_stats(self.handle(), st), "read endpoint counters")
        return _as_dict(st, "struct mrc_ep_stats")

    def device_attr(self) -> dict:
        """The limits the engine enforces and the capability bits (mrc_query_device_ex)."""
        a = ffi.new("struct mrc_device_attr *")
        check(lib.mrc_ctx_query_device(self.handle(), a), "query the device")
        return _as_dict(a, "struct mrc_device_attr")

    def ev_events(self) -> list[dict]:
        """EV state changes since the last call, oldest first."""
        cap = 4096
        out = ffi.new("struct mrc_ev_event[]", cap)
        n = check(lib.mrc_ev_poll_events(self.handle(), out, cap), "poll EV events")
        return [{"qpn": out[i].qpn, "ev": out[i].ev, "old": EV_STATES[out[i].old_state],
                 "new": EV_STATES[out[i].new_state], "t_ns": out[i].t_ns, "dropped": out[i].dropped,
                 "cause_ns": out[i].cause_ns}
                for i in range(n)]

    def async_events(self) -> list[AsyncEvent]:
        """Asynchronous events waiting (ibv_get_async_event): QP_FATAL, PORT_ERR,
        PORT_ACTIVE, PEER_PORTS, CQ_ERR. Does not block."""
        cap = 256
        out = ffi.new("struct mrc_async_event[]", cap)
        n = check(lib.mrc_async_events(self.handle(), out, cap), "poll asynchronous events")
        return [AsyncEvent(ASYNC_EVENTS.get(out[i].type, str(out[i].type)), out[i].qpn, out[i].info,
                           out[i].dropped) for i in range(n)]

    # lifetime ------------------------------------------------------------
    def close(self) -> None:
        """Destroy every QP, CQ, region and PD, then the context."""
        calls = getattr(self, "_calls", None)
        if calls is None:  # __init__ failed early
            return
        for hook in list(self.close_hooks):
            hook()
        with calls:
            h, self._h = self._h, None
        if h is None:
            return
        lib.mrc_ctx_cancel(h)  # callers blocked in C return at once, new ones are refused
        with calls:
            calls.wait_for(lambda: self._waiting == 0)
        lib.mrc_ctx_destroy(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()
