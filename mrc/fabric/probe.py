"""A probe stream over the kernel's path between two fabric hosts: UDP packets
at a fixed interval on several flows (source ports, so an ECMP hash spreads
them over the spines), each stamped with its flow, sequence number and send
time. What arrives tells how long the network lost each flow: the loss
window of a fault, seen as an application would see it, whatever the
routing did (docs/fabric.md, "Dynamic routing (BGP) for kernel traffic").

>>> with ProbeStream(t, 0, 2, plane=0) as probe:   # doctest: +SKIP
...     apply.fail(t.name, "p0s1")
...     time.sleep(2)
>>> probe.result()["loss_window_ms"]               # doctest: +SKIP
"""

from __future__ import annotations

import socket
import struct
import threading
import time

from mrc.fabric import ns
from mrc.fabric.topology import Topology

STAMP = struct.Struct("!HIQ")  # flow, sequence number, send time (CLOCK_MONOTONIC ns)
PORT = 47000
SO_RCVBUFFORCE = 33
RCVBUF = 64 << 20


class ProbeStream:
    """Probes from host ``src`` to host ``dst`` over ``plane``'s kernel addresses: ``flows`` flows,
    each sending one packet every ``interval_s``, from ``start()`` (or ``with``) to ``stop()``."""

    def __init__(self, t: Topology, src: int, dst: int, plane: int = 0, flows: int = 8,
                 interval_s: float = 0.001, port: int = PORT) -> None:
        self.t, self.flows, self.interval = t, flows, interval_s
        self.dst_addr = (t.inner_address(dst, plane), port)
        self.rx = ns.run_in(t.ns(t.host(dst)), lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM))
        # room for seconds of probes: a receiving thread that the machine holds back for a moment
        # must not turn into a loss window that the network never had (SO_RCVBUFFORCE: root)
        try:
            self.rx.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
        except OSError:
            self.rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        self.rx.bind(("::", port))
        self.rx.settimeout(0.05)
        self.tx = []
        for f in range(flows):
            s = ns.run_in(t.ns(t.host(src)), lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM))
            s.bind((t.inner_address(src, plane), port + 1 + f))
            self.tx.append(s)
        self.sent = [0] * flows
        self.got: list[list[tuple[int, int]]] = [[] for _ in range(flows)]  # (seq, send ns) per flow
        self._stop, self._done = threading.Event(), threading.Event()  # stop sending; stop receiving
        self._threads: list[threading.Thread] = []

    def start(self) -> ProbeStream:
        """Start sending and receiving."""
        self.start_ns = time.monotonic_ns()
        self._threads = [threading.Thread(target=self._send, daemon=True),
                         threading.Thread(target=self._receive, daemon=True)]
        for th in self._threads:
            th.start()
        return self

    def _send(self) -> None:
        nxt = time.monotonic()
        while not self._stop.is_set():
            for f, s in enumerate(self.tx):
                try:
                    s.sendto(STAMP.pack(f, self.sent[f], time.monotonic_ns()), self.dst_addr)
                except OSError:
                    pass  # no route while the fabric reconverges: that probe is lost
                self.sent[f] += 1
            nxt += self.interval
            time.sleep(max(0.0, nxt - time.monotonic()))

    def _receive(self) -> None:
        while not self._done.is_set():
            try:
                data = self.rx.recv(64)
            except TimeoutError:
                continue
            if len(data) >= STAMP.size:
                f, seq, sent_ns = STAMP.unpack_from(data)
                if f < self.flows:
                    self.got[f].append((seq, sent_ns))

    def stop(self) -> None:
        """Stop sending, let the last probes arrive, close the sockets."""
        self._stop.set()
        if self._threads:
            self._threads[0].join(5)
            time.sleep(0.1)  # the last probes' flight
        self._done.set()
        for th in self._threads:
            th.join(5)
        for s in [*self.tx, self.rx]:
            s.close()

    def __enter__(self) -> ProbeStream:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def result(self) -> dict:
        """Per flow: sent, received, lost, and its longest loss window (ms: from the last probe
        that arrived before a loss to the first after it, by their send times) with when it began
        (``at_ms``, from :meth:`start`), and ``tail_lost``, the probes lost after the last one that
        arrived (a loss that never ended is no window); over every flow,
        the longest window and the number of flows that lost any probe."""
        per = []
        for f in range(self.flows):
            got = sorted(set(self.got[f]))
            window, at = 0.0, None
            for (s0, t0), (s1, t1) in zip(got, got[1:], strict=False):
                if s1 - s0 > 1 and (t1 - t0) / 1e6 > window:
                    window, at = (t1 - t0) / 1e6, (t0 - self.start_ns) / 1e6
            tail = self.sent[f] - 1 - got[-1][0] if got else self.sent[f]
            per.append({"flow": f, "sent": self.sent[f], "received": len(got), "lost": self.sent[f] - len(got),
                        "tail_lost": tail,
                        "loss_window_ms": round(window, 1), "at_ms": None if at is None else round(at, 1)})
        return {"flows": per, "interval_ms": self.interval * 1e3,
                "loss_window_ms": max(p["loss_window_ms"] for p in per),
                "flows_with_loss": sum(1 for p in per if p["lost"]), "lost": sum(p["lost"] for p in per),
                "tail_lost": sum(p["tail_lost"] for p in per)}
