"""The in-memory link (csrc/sim/simlink.c): ``planes * per_plane`` paths between
contexts driven by hand (:class:`mrc.manual.ManualContext`), each with delay,
jitter, loss (random or a 64-bit mask), duplication, trimming, a rate with
an ECN-marking queue and down or flapping intervals. Deterministic for a
seed, rootless, and fast: the run loop is in C, Python only starts it.

>>> from mrc.manual import ManualContext
>>> from mrc.core import QPAttr
>>> sim = Sim(planes=2, per_plane=2, seed=1)
>>> a, b = ManualContext(planes=2), ManualContext(planes=2)
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

from mrc import secure
from mrc._dp import ffi, lib
from mrc.core import QPAttr, QueuePair
from mrc.errors import check
from mrc.manual import ManualContext


class Sim:
    """The in-memory link: ``planes * per_plane`` paths between endpoints."""

    def __init__(self, planes: int = 8, per_plane: int = 4, seed: int = 1) -> None:
        out = ffi.new("struct mrc_sim **")
        check(lib.mrc_sim_create(planes, per_plane, seed, out), "create simulated link")
        self._sim = out[0]
        self.planes, self.per_plane = planes, per_plane
        self.eps: list[ManualContext] = []

    def attach(self, ep: ManualContext) -> int:
        """Join a context to the link; its index is the peer number the others use."""
        idx = check(lib.mrc_sim_attach(self._sim, ep.ep), "attach endpoint")
        self.eps.append(ep)
        return idx

    def index(self, ep: ManualContext) -> int:
        """``ep``'s index on the link (its peer number)."""
        for i, e in enumerate(self.eps):
            if e is ep:
                return i
        return self.attach(ep)

    def connect(self, a: ManualContext, b: ManualContext, attr: QPAttr | None = None, security: str = "off",
                rotate_every: int = 0) -> tuple[QueuePair, QueuePair]:
        """A QP on each context, connected to each other across the link;
        ``security`` "auth" or "encrypt" secures both with keys from an
        X25519 exchange (as connection setup makes them, under a test key)."""
        attr = attr or QPAttr(planes=self.planes)
        ia, ib = self.index(a), self.index(b)
        qa, qb = a.create_qp(attr), b.create_qp(attr)
        if security != "off":
            ka, kb = secure.pair_keys(qa.qpn, qb.qpn, security, rotate_every=rotate_every)
            qa.set_keys(ka)
            qb.set_keys(kb)
        qa.connect(qb.qpn, ib, rq_psn=qb.sq_psn)  # as connection setup exchanges them
        qb.connect(qa.qpn, ia, rq_psn=qa.sq_psn)
        return qa, qb

    def path(self, plane: int, index: int) -> int:
        """The path number of ``plane``'s path ``index``."""
        return plane * self.per_plane + index

    def set_path(self, path: int, **kw) -> None:
        """Change a path's delay, loss, rate, queues or down time (``struct mrc_sim_path`` fields)."""
        p = ffi.new("struct mrc_sim_path *")
        check(lib.mrc_sim_get_path(self._sim, path, p), f"path {path}")
        for k, v in kw.items():
            setattr(p, k, v)
        check(lib.mrc_sim_set_path(self._sim, path, p), f"set path {path}")

    def set_port_rate(self, rate_bps: int, plane: int | None = None) -> None:
        """Each endpoint's port on ``plane`` (None: every plane) sends at most
        ``rate_bps``: the NIC's own line rate, before any path's queue."""
        for p in range(self.planes) if plane is None else (plane,):
            check(lib.mrc_sim_set_port_rate(self._sim, p, rate_bps), f"port rate of plane {p}")

    def set_all(self, **kw) -> None:
        """The same change on every path."""
        for i in range(self.planes * self.per_plane):
            self.set_path(i, **kw)

    @property
    def now(self) -> int:
        """Virtual time, ns."""
        return self.stats()["now_ns"]

    def stats(self) -> dict:
        """What the link did: packets delivered, dropped, duplicated, trimmed, marked, per path."""
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
            before = self.now
            if self.run(min(before + step_ns, deadline), stop_on_cqe=True) and self.now == before:
                # a completion nobody polls (another context's CQ) must not stop time
                self.run(min(before + step_ns, deadline))

    def record(self, cap: int = 8 << 20) -> None:
        """From now on, keep a copy of every packet the link delivers (up to
        ``cap`` bytes in all): :meth:`recorded` hands them out."""
        self._rec = ffi.new("uint8_t[]", cap)
        lib.mrc_sim_record(self._sim, self._rec, cap)

    def recorded(self) -> list[dict]:
        """The packets delivered since :meth:`record`: ``dst`` (endpoint
        index), ``port`` (plane), ``ecn_ce``, ``trimmed``, ``ev``, ``packet``."""
        rec = getattr(self, "_rec", None)
        if rec is None:
            return []
        raw = bytes(ffi.buffer(rec, lib.mrc_sim_recorded(self._sim)))
        out, i = [], 0
        while i + 8 <= len(raw):
            n = int.from_bytes(raw[i:i + 2], "little")
            out.append({"dst": raw[i + 2], "port": raw[i + 3] & 0xF, "ecn_ce": bool(raw[i + 3] & 0x10),
                        "trimmed": bool(raw[i + 3] & 0x20), "ev": int.from_bytes(raw[i + 4:i + 8], "little"),
                        "packet": raw[i + 8:i + 8 + n]})
            i += 8 + n
        return out

    def close(self) -> None:
        """Free the link (its endpoints stay)."""
        if self._sim is not None:
            lib.mrc_sim_record(self._sim, ffi.NULL, 0)
            lib.mrc_sim_destroy(self._sim)
            self._sim = None

    def __del__(self) -> None:
        self.close()
