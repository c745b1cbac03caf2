"""The RoCEv2 model (csrc/sim/roce.c) from Python: its configuration, and the
bottleneck line (csrc/sim/roce_line.c) that tries it alone: senders writing to
one receiver through one switch port, in virtual time (docs/sim.md, "RoCEv2").

    with Line(senders=2, port_bps=40 * G, qp=roce_cfg(40 * G, dcqcn=True),
              kmin=5_000, kmax=200_000, pmax=0.01, sample_ns=100_000) as line:
        line.flow(0, 64 << 20)
        line.flow(1, 64 << 20, start_ns=10_000_000)
        line.run(1_000_000_000)
        rates = line.samples()      # per sample, per sender: (rate b/s, bytes done)
"""
from __future__ import annotations

from mrc._dp import ffi, lib
from mrc.errors import ErrnoError

G = 1_000_000_000


def check(rc: int, what: str) -> int:
    """``rc``, or ErrnoError when the C call refused (a negative errno)."""
    if rc < 0:
        raise ErrnoError(-rc, what)
    return rc


def roce_cfg(line_bps: int, mtu: int = 4096, timeout: int = 14, retry_cnt: int = 7, ack_every: int = 1,
             dcqcn: bool = False, wire_extra: int = 0, **dcqcn_params) -> dict:
    """A QP's configuration (struct mrc_roce_cfg) as a dict: verbs' timeout and retry_cnt, and
    DCQCN's parameters by their names in mrc_sim.h (0 or absent: the defaults, docs/sim.md)."""
    return {"line_bps": line_bps, "mtu": mtu, "timeout": timeout, "retry_cnt": retry_cnt,
            "ack_every": ack_every, "dcqcn": int(dcqcn), "wire_extra": wire_extra, **dcqcn_params}


def qp_dict(q) -> dict:
    """A requester's state (struct mrc_roce_qp) as plain numbers."""
    names = ("state", "una", "nxt", "high", "end", "retries", "rc", "rt", "alpha", "stage", "t_count", "bc_count",
             "sent", "resent", "timeouts", "naks", "cnps", "decreases", "done_msgs", "done_bytes", "error_at")
    return {n: getattr(q, n) for n in names}


class Line:
    """n senders, one switch port, one receiver (mrc_roce_line_*)."""

    def __init__(self, senders: int, port_bps: int, qp: dict, hop_ns: int = 1000, buffer_bytes: int = 0,
                 kmin: int = 0, kmax: int = 0, pmax: float = 0.0, pfc_xoff: int = 0, pfc_xon: int = 0,
                 seed: int = 1, sample_ns: int = 0, trace_max: int = 0) -> None:
        self._l = None
        cfg = ffi.new("struct mrc_roce_line_cfg *", {
            "qp": qp, "senders": senders, "port_bps": port_bps, "hop_ns": hop_ns, "buffer_bytes": buffer_bytes,
            "kmin": kmin, "kmax": kmax, "pmax": pmax, "pfc_xoff": pfc_xoff, "pfc_xon": pfc_xon, "seed": seed,
            "sample_ns": sample_ns, "trace_max": trace_max})
        out = ffi.new("struct mrc_roce_line **")
        check(lib.mrc_roce_line_create(cfg, out), "RoCE line")
        self._l = out[0]
        self.senders = senders
        self.trace_max = trace_max

    def flow(self, sender: int, nbytes: int, msg: int = 1 << 20, depth: int = 8, start_ns: int = 0) -> None:
        """Sender writes nbytes from start_ns, in WRITEs of msg bytes, depth in flight."""
        fl = ffi.new("struct mrc_roce_line_flow *", {"bytes": nbytes, "msg": msg, "depth": depth,
                                                      "start_ns": start_ns})
        check(lib.mrc_roce_line_flow(self._l, sender, fl), f"flow of sender {sender}")

    def drop(self, sender: int, psn: int, nth: int = 1) -> None:
        """Lose the nth transmission of sender's psn on its way to the switch."""
        d = ffi.new("struct mrc_roce_line_drop *", {"sender": sender, "psn": psn, "nth": nth})
        check(lib.mrc_roce_line_drop(self._l, d), f"drop of sender {sender}'s psn {psn}")

    def run(self, until_ns: int) -> bool:
        """True when every flow completed (a QP in ERROR counts as ended)."""
        return check(lib.mrc_roce_line_run(self._l, until_ns), "RoCE line run") == 1

    def stats(self) -> dict:
        """The line's counters: packets delivered, dropped (buffer), lost (told to), marked, the
        highest queue, PFC's pauses, and per sender when its flow ended and how long it was paused."""
        st = ffi.new("struct mrc_roce_line_stats *")
        lib.mrc_roce_line_stats(self._l, st)
        out = {n: getattr(st, n) for n in ("now_ns", "events", "delivered", "dropped", "lost", "marked",
                                           "max_queue", "pauses", "resumes", "done")}
        out["end_ns"] = list(st.end_ns)[:self.senders]
        out["paused_ns"] = list(st.paused_ns)[:self.senders]
        return out

    def qp(self, sender: int) -> tuple[dict, dict]:
        """The sender's requester and its responder at the receiver."""
        q, r = ffi.new("struct mrc_roce_qp *"), ffi.new("struct mrc_roce_resp *")
        check(lib.mrc_roce_line_qp(self._l, sender, q, r), f"sender {sender}")
        resp = {n: getattr(r, n) for n in ("epsn", "taken", "dups", "out_of_order", "acks", "naks", "cnps")}
        return qp_dict(q), resp

    def trace(self) -> list[tuple[int, int, int, bool]]:
        """Every transmission kept: (t_ns, sender, psn, retransmission)."""
        buf = ffi.new("struct mrc_roce_line_tx[]", max(1, self.trace_max))
        n = lib.mrc_roce_line_trace(self._l, buf, self.trace_max)
        return [(buf[i].t_ns, buf[i].sender, buf[i].psn, bool(buf[i].retx)) for i in range(n)]

    def samples(self) -> list[list[tuple[int, int]]]:
        """Per sample, per sender: (its rate in b/s, its bytes completed)."""
        cap = 1 << 16
        while True:
            buf = ffi.new("uint64_t[]", cap)
            n = lib.mrc_roce_line_samples(self._l, buf, cap)
            if n < cap:
                break
            cap *= 4
        per = 2 * self.senders
        return [[(buf[k + 2 * s], buf[k + 2 * s + 1]) for s in range(self.senders)] for k in range(0, n, per)]

    def close(self) -> None:
        """Free the line (also at garbage collection)."""
        if self._l is not None:
            lib.mrc_roce_line_destroy(self._l)
            self._l = None

    def __enter__(self) -> Line:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()
