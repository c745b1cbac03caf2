"""The kernel's transports over the same fabric, as baselines for MRC: one
TCP stream over one plane, or MPTCP with one subflow per plane, between two
fabric hosts' kernel addresses (encap.red + End.DT6 through the same uSID
switches; docs/fabric.md; on a kernel without SRv6 the same in tc BPF,
mrc.fabric.srv6bpf)."""

from __future__ import annotations

import socket
import threading
import time

from mrc.fabric import ns
from mrc.fabric.topology import Topology

IPPROTO_MPTCP = 262


def mptcp_setup(t: Topology, h: int) -> None:
    """Let host ``h`` open one MPTCP subflow per plane (an endpoint per extra plane address)."""
    node = t.ns(t.host(h))
    ns.command(node, ["ip", "mptcp", "limits", "set", "subflow", str(t.planes), "add_addr_accepted",
                      str(t.planes)], check=True)
    for p in range(1, t.planes):
        ns.command(node, ["ip", "mptcp", "endpoint", "add", t.inner_address(h, p), "subflow"], check=True)


def stream_gbps(t: Topology, src: int, dst: int, seconds: float, plane: int = 0, proto: int = 0,
                port: int = 5201) -> float:
    """One stream from ``src`` to ``dst`` (TCP, or MPTCP with
    ``proto=IPPROTO_MPTCP``) to the receiver's kernel address on ``plane``,
    for ``seconds``; returns the receiver's goodput in Gb/s."""
    srv = ns.run_in(t.ns(t.host(dst)), lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM, proto))
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("::", port))
    srv.listen(1)
    got = [0, 0.0]

    def serve():
        c, _ = srv.accept()
        t0 = time.perf_counter()
        n = 0
        buf = bytearray(1 << 20)
        while True:
            k = c.recv_into(buf)
            if not k:
                break
            n += k
        got[0], got[1] = n, time.perf_counter() - t0
        c.close()

    th = threading.Thread(target=serve)
    th.start()
    cli = ns.run_in(t.ns(t.host(src)), lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM, proto))
    try:
        cli.connect((t.inner_address(dst, plane), port))
        chunk = b"\0" * (1 << 20)
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            cli.sendall(chunk)
    finally:
        cli.close()
        th.join(30)
        srv.close()
    return got[0] * 8 / got[1] / 1e9 if got[1] else 0.0
