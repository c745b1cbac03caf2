"""A context driven by hand: no ports, no thread, no clock. The caller moves
its packets (``input``, ``poll_tx``) and its time (every call takes
``now_ns``), as the engine thread does for a context with ports. Tests, the
in-memory link (:mod:`mrc.simlink`) and simulations use it; it is the
sans-I/O core with nothing around it.

>>> ctx = ManualContext(planes=2)
>>> qp = ctx.create_qp(QPAttr(planes=2, ev_count=8))
>>> qp.connect(dest_qpn=9, peer=0)
>>> ctx.poll_tx(now_ns=0)                         # nothing posted: nothing to send
[]
>>> ctx.close()
"""

from __future__ import annotations

from mrc._dp import ffi, lib
from mrc.core import Device, QPAttr  # noqa: F401 (QPAttr: the doctest's, and a user's first import)
from mrc.errors import check

#: the largest batch poll_tx hands back, and its buffer
TX_BUF = 1 << 20


class ManualContext(Device):
    """A context whose endpoint the caller drives (``mrc_ep_*`` driver calls)."""

    def __init__(self, planes: int = 8, max_qps: int = 1024, cq_depth: int = 65536, seed: int = 0,
                 ev_event_depth: int = 0) -> None:
        """``seed``: 0 makes keys, QP numbers and initial PSNs unpredictable;
        another value makes them the same in every run (tests)."""
        super().__init__(planes=planes, max_qps=max_qps, cq_depth=cq_depth, seed=seed, ev_event_depth=ev_event_depth)
        #: the endpoint, as the in-memory link attaches it
        self.ep = lib.mrc_ctx_ep(self._h)

    def _ep(self):
        self.handle()  # EBADF once closed
        return self.ep

    def input(self, packet: bytes, ev: int = 0, peer: int = 0, port: int = 0, ecn_ce: bool = False,
              trimmed: bool = False, now_ns: int = 0) -> int:
        """Feed one packet (BTH..ICRC) to the engine; returns 0 or -errno (never raises)."""
        m = ffi.new("struct mrc_meta *", {"ev": ev, "peer": peer, "port": port, "ecn_ce": int(ecn_ce),
                                          "trimmed": int(trimmed)})
        return lib.mrc_ep_input(self._ep(), packet, len(packet), m, now_ns)

    def poll_tx(self, now_ns: int = 0, max_packets: int = 256) -> list[tuple[bytes, dict]]:
        """The packets the engine sends now, each with its EV, peer, traffic class
        and kind, and for a data packet in the clear its ones'-complement sum
        (``sum``, taken while it was built; None for the others); a data
        packet's header bytes (``hdr``: what a trimming switch keeps) and payload
        bytes (``plen``), 0 for the others."""
        buf = ffi.new("uint8_t[]", TX_BUF)
        d = ffi.new("struct mrc_txdesc[]", max_packets)
        n = check(lib.mrc_ep_poll_tx(self._ep(), now_ns, buf, TX_BUF, d, max_packets), "poll tx")
        return [(bytes(ffi.buffer(buf + d[i].off, d[i].len)),
                 {"ev": d[i].ev, "peer": d[i].peer, "tclass": d[i].tclass, "is_data": d[i].is_data,
                  "sum": d[i].sum if d[i].has_sum else None, "hdr": d[i].hdr, "plen": d[i].plen})
                for i in range(n)]

    def want_tx_sums(self, on: bool = True) -> None:
        """Data packets in the clear leave with their ones'-complement sum
        (poll_tx's ``sum``), as the engine asks for its UDP checksums."""
        lib.mrc_ep_want_tx_sums(self._ep(), int(on))

    def set_gso(self, k: int) -> None:
        """New full-size data packets of a QP go ``k`` in a row on one EV
        (``mrc_ep_set_gso``: the engine then sends them as one kernel buffer)."""
        check(lib.mrc_ep_set_gso(self._ep(), k), f"packets per buffer {k}")

    def next_timer(self, now_ns: int = 0) -> int | None:
        """When to call poll_tx again (None: not before something comes in)."""
        t = lib.mrc_ep_next_timer(self._ep(), now_ns)
        return None if t == 2**64 - 1 else t

    def set_port(self, plane: int, up: bool, now_ns: int = 0) -> None:
        """A local port (plane) went down or up, as the engine reports carrier."""
        check(lib.mrc_ep_set_port(self._ep(), plane, int(up), now_ns), f"set port {plane}")

    def set_port_rate(self, plane: int, rate_bps: int) -> None:
        """The port of ``plane`` sends at most ``rate_bps`` (0: no limit)."""
        check(lib.mrc_ep_set_port_rate(self._ep(), plane, rate_bps), f"port rate of plane {plane}")

    def probe_send(self, peer: int, ev: int, now_ns: int = 0) -> int:
        """Queue an EV probe to ``peer`` on ``ev``; returns its id (the packet
        leaves on the next poll_tx)."""
        pid = ffi.new("uint32_t *")
        check(lib.mrc_ep_probe_send(self._ep(), peer, ev, now_ns, pid), f"probe EV {ev:#x}")
        return pid[0]

    def probe_result(self, probe_id: int) -> dict | None:
        """The answer to probe ``probe_id`` (and forget it), or None while it is pending."""
        r = ffi.new("struct mrc_probe_result *")
        if not check(lib.mrc_ep_probe_result(self._ep(), probe_id, r), f"probe {probe_id}"):
            return None
        return {"id": r.id, "ev": r.ev, "peer": r.peer, "port": r.port, "rtt_ns": r.rtt_ns}

    def probe_cancel(self, probe_id: int) -> None:
        """Forget a probe: a late answer is dropped as STALE_PROBE."""
        check(lib.mrc_ep_probe_cancel(self._ep(), probe_id), f"cancel probe {probe_id}")
