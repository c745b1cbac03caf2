"""Prometheus metrics of every MRC context on this machine.

On each scrape, :class:`ContextCollector` asks every control endpoint
(``mrc.ctl.sockets.endpoints``) for its ``metrics`` answer and turns it into
metric families, labelled by process, host and role ("rank 2 of 4, job j1",
"mrc perf server"): each QP's counters, window, RTT and state, its EVs by
plane and state, the packets dropped by reason, the ports' counters and
state, and completions that found a CQ full. Names and
units follow Prometheus's conventions (``mrc_qp_retransmitted_bytes_total``,
``mrc_qp_srtt_seconds``). ``mrc ctl metrics --listen 127.0.0.1:9464`` serves
them; ``mrc dash`` serves them at ``/metrics`` with the fabric's switch ports
beside them. An endpoint that does not answer is skipped and counted in
``mrc_scrape_errors_total``.
"""

from __future__ import annotations

import errno
import socket
import threading
from collections.abc import Callable, Iterable

from mrc.ctl.endpoint import ControlClient
from mrc.ctl.sockets import endpoints
from mrc.errors import ErrnoError, listen_error

#: QP counters: (the engine's name, the metric's, its help)
QP_COUNTERS = [
    ("tx_packets", "mrc_qp_sent_packets_total", "Data packets sent, first transmissions"),
    ("tx_bytes", "mrc_qp_sent_bytes_total", "Payload bytes sent, first transmissions"),
    ("rtx_packets", "mrc_qp_retransmitted_packets_total", "Data packets sent again"),
    ("rtx_bytes", "mrc_qp_retransmitted_bytes_total", "Payload bytes sent again"),
    ("rx_packets", "mrc_qp_received_packets_total", "Data packets received"),
    ("rx_bytes", "mrc_qp_received_bytes_total", "Payload bytes received"),
    ("sacks_rx", "mrc_qp_sacks_received_total", "Selective ACKs received"),
    ("nacks_rx", "mrc_qp_nacks_received_total", "NACKs received"),
    ("losses", "mrc_qp_losses_total", "Packets found lost (each retires its EV)"),
    ("timeouts", "mrc_qp_retransmit_timeouts_total", "Retransmit timer expiries"),
    ("tlp_probes", "mrc_qp_tail_loss_probes_total", "Tail loss probes sent"),
    ("ecn_marks", "mrc_qp_ecn_marks_total", "ACKs that echoed a CE mark"),
    ("trims", "mrc_qp_trims_total", "Packets trimmed by a switch (NACK TRIMMED)"),
    ("rnr_naks", "mrc_qp_receiver_not_ready_total", "WRITE_IMMs refused for want of a posted receive"),
]
QP_GAUGES = [
    ("cwnd", "mrc_qp_cwnd_bytes", "The congestion window", 1),
    ("inflight", "mrc_qp_inflight_bytes", "Payload bytes sent and not acknowledged", 1),
    ("srtt_ns", "mrc_qp_srtt_seconds", "Smoothed round-trip time", 1e-9),
    ("min_rtt_ns", "mrc_qp_min_rtt_seconds", "The lowest round-trip time seen", 1e-9),
]
PORT_COUNTERS = [
    ("tx_packets", "mrc_port_sent_packets_total", "Frames sent on the port"),
    ("tx_bytes", "mrc_port_sent_bytes_total", "Bytes sent on the port"),
    ("rx_packets", "mrc_port_received_packets_total", "Frames received on the port"),
    ("rx_bytes", "mrc_port_received_bytes_total", "Bytes received on the port"),
    ("tx_errors", "mrc_port_send_errors_total", "Frames the kernel refused"),
    ("rx_ring_drops", "mrc_port_ring_drops_total", "Frames the kernel dropped for a full receive ring"),
    ("carrier_downs", "mrc_port_carrier_downs_total", "Times the link lost carrier or went down"),
    ("gso_tx_buffers", "mrc_port_sent_buffers_total", "Kernel buffers of several packets sent (UDP_SEGMENT)"),
    ("gso_rx_buffers", "mrc_port_received_buffers_total", "Kernel buffers of several packets taken whole"),
]


def _families():
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    return CounterMetricFamily, GaugeMetricFamily


class ContextCollector:
    """A prometheus_client collector over every control endpoint on this machine."""

    def __init__(self, timeout: float = 2.0, where: Callable[[], list[str]] = endpoints) -> None:
        self.timeout, self.where = timeout, where
        self.errors = 0
        self._lock = threading.Lock()

    def snapshots(self) -> list[dict]:
        """Every endpoint's ``metrics`` answer (those that fail are counted and skipped)."""
        out = []
        for path in self.where():
            try:
                with ControlClient(path, timeout=self.timeout) as c:
                    out.append(c.call("metrics"))
            except (ErrnoError, OSError, ValueError):
                with self._lock:
                    self.errors += 1
        return out

    def collect(self) -> Iterable:
        """The metric families of one scrape."""
        counter, gauge = _families()
        snaps = self.snapshots()
        ctx = ["pid", "host", "role"]
        qc = {name: counter(name[:-6], help_, labels=[*ctx, "qpn"]) for _, name, help_ in QP_COUNTERS}
        qg = {name: gauge(name, help_, labels=[*ctx, "qpn"]) for _, name, help_, _ in QP_GAUGES}
        state = gauge("mrc_qp_state", "1 for the state the QP is in", labels=[*ctx, "qpn", "state"])
        evs = gauge("mrc_qp_evs", "EVs of a QP by plane and state", labels=[*ctx, "qpn", "plane", "state"])
        drops = counter("mrc_dropped_packets", "Received packets dropped, by reason", labels=[*ctx, "reason"])
        pc = {name: counter(name[:-6], help_, labels=[*ctx, "port", "plane"]) for _, name, help_ in PORT_COUNTERS}
        up = gauge("mrc_port_up", "1 when the port is enabled and has carrier", labels=[*ctx, "port", "plane"])
        cq = counter("mrc_cq_overflows", "Completions that found their CQ full (they waited; none was lost)",
                     labels=ctx)
        for s in snaps:
            try:
                self._add(s, qc, qg, state, evs, drops, pc, up, cq)
            except (AttributeError, KeyError, TypeError, ValueError):  # an answer of the wrong shape: skipped
                with self._lock:
                    self.errors += 1
        yield from qc.values()
        yield from qg.values()
        yield from (state, evs, drops)
        yield from pc.values()
        yield from (up, cq)
        errors = counter("mrc_scrape_errors", "Control endpoints that did not answer a scrape, or answered nonsense")
        errors.add_metric([], float(self.errors))
        yield errors

    @staticmethod
    def _add(s: dict, qc, qg, state, evs, drops, pc, up, cq) -> None:
        """One endpoint's answer into the families; raises on an answer of the wrong shape. Everything is
        checked before any sample is added, so a bad answer adds nothing."""
        num = float
        lab = [str(s.get("pid", "")), str(s.get("host") or ""), str(s.get("role") or "")]
        qps = [(q, [*lab, str(int(q["qpn"]))]) for q in s.get("qps", [])]
        rows = []
        for q, ql in qps:
            rows += [(qc[name], ql, num(q.get(key, 0))) for key, name, _ in QP_COUNTERS]
            rows += [(qg[name], ql, num(q.get(key, 0)) * scale) for key, name, _, scale in QP_GAUGES]
            rows.append((state, [*ql, str(q.get("state", "?"))], 1.0))
            rows += [(evs, [*ql, str(int(plane)), str(st)], num(n))
                     for plane, counts in sorted(q.get("evs", {}).items()) for st, n in sorted(counts.items())]
        rows += [(drops, [*lab, str(reason)], num(n)) for reason, n in sorted(s.get("drops", {}).items())]
        for p in s.get("ports", []):
            pl = [*lab, str(p["ifname"]), str(int(p["plane"]))]
            rows += [(pc[name], pl, num(p.get(key, 0))) for key, name, _ in PORT_COUNTERS]
            rows.append((up, pl, 1.0 if p.get("admin_up") and p.get("carrier") else 0.0))
        rows.append((cq, lab, num(s.get("cq_overflow", 0))))
        for fam, labels, value in rows:
            fam.add_metric(labels, value)


def registry(*collectors):
    """A registry of ``collectors`` (and nothing of this process's own)."""
    from prometheus_client import CollectorRegistry

    reg = CollectorRegistry(auto_describe=False)
    for c in collectors:
        reg.register(c)
    return reg


def exposition(*collectors) -> bytes:
    """The metrics of ``collectors`` in Prometheus's text format."""
    from prometheus_client import generate_latest

    return generate_latest(registry(*collectors))


def parse_listen(text: str) -> tuple[str, int]:
    """``ADDR:PORT`` (``[::1]:9464`` for IPv6) as (address, port)."""
    addr, sep, port = text.rpartition(":")
    try:
        n = int(port)
    except ValueError:
        n = -1
    if not sep or not addr or not 1 <= n <= 65535:
        raise ErrnoError(errno.EINVAL, f"--listen {text!r}: write ADDR:PORT with a port from 1 to 65535, e.g. "
                                       "127.0.0.1:9464")
    return addr.strip("[]"), n


def serve(listen: str, *collectors, token: str | None = None):
    """Serve ``collectors`` at http://ADDR:PORT/metrics in a thread; returns
    (server, thread). With ``token``, a scrape must send it as a bearer
    token (Prometheus's ``bearer_token``; 401 otherwise): what is served
    comes from root-only control sockets. prometheus-client's own handler
    writes the answer (content negotiation, compression)."""
    import hmac
    from http.server import ThreadingHTTPServer

    from prometheus_client.exposition import MetricsHandler

    addr, port = parse_listen(listen)

    class Handler(MetricsHandler.factory(registry(*collectors))):
        def do_GET(self):  # noqa: N802 - http.server's name
            if self.path.split("?")[0] != "/metrics":
                return self.send_error(404, "only /metrics is here")
            given = self.headers.get("Authorization", "")
            if token is not None and not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                return self.send_error(401, "a scrape needs the bearer token mrc ctl metrics printed")
            return super().do_GET()

    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    server_class = type("Server", (ThreadingHTTPServer,), {"address_family": family, "daemon_threads": True})
    try:
        server = server_class((addr, port), Handler)
    except OSError as e:
        raise listen_error(e, "--listen", addr, port) from None
    thread = threading.Thread(target=server.serve_forever, name="mrc-metrics", daemon=True)
    thread.start()
    return server, thread
