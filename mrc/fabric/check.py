"""Prove that every (src, dst, plane, spine) path delivers a packet.

Each source host sends one IPv6 packet per path to the path's uSID container,
with next header 253 (RFC 3692 experimental: no checksum to fix up after the
address shifts) and a payload naming the path. A raw socket per destination
host collects what arrives. Missing paths are retried a few times so a
neighbour-discovery hiccup does not count as a broken path.
"""

from __future__ import annotations

import os
import select
import socket
import struct
import time

from mrc.fabric import ns
from mrc.fabric.topology import Topology

PROTO_EXPERIMENT = 253
MAGIC = b"MRCCHECK"


def _raw_socket(t: Topology, host: int) -> socket.socket:
    def make() -> socket.socket:
        s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, PROTO_EXPERIMENT)
        s.setblocking(False)
        return s

    return ns.run_in(t.ns(t.host(host)), make)


def check(t: Topology, timeout: float = 2.0, tries: int = 3, only: list[dict] | None = None) -> dict:
    """Send a packet on every path and report which arrived.

    Returns ``{"paths": [{src, dst, plane, spine, address, ok}], "ok_count", "failed_count"}``.
    """
    paths = only if only is not None else t.paths()
    socks = {h: _raw_socket(t, h) for h in range(t.hosts)}
    nonce = os.urandom(4)
    got: set[int] = set()
    try:
        for _ in range(tries):
            pending = [i for i in range(len(paths)) if i not in got]
            if not pending:
                break
            for i in pending:
                p = paths[i]
                s = socks[t.host_index(p["src"])]
                payload = MAGIC + nonce + struct.pack("!I", i)
                try:
                    s.sendto(payload, (p["address"], 0))
                except OSError:
                    pass  # no route: the path is broken, it stays missing
            deadline = time.monotonic() + timeout / tries
            while len(got) < len(paths) and time.monotonic() < deadline:
                ready, _, _ = select.select(list(socks.values()), [], [], max(0.0, deadline - time.monotonic()))
                for s in ready:
                    while True:
                        try:
                            data, _addr = s.recvfrom(2048)
                        except BlockingIOError:
                            break
                        if data[:12] == MAGIC + nonce and len(data) >= 16:
                            (i,) = struct.unpack_from("!I", data, 12)
                            # count it only at the host the path names
                            if i < len(paths) and socks[t.host_index(paths[i]["dst"])] is s:
                                got.add(i)
    finally:
        for s in socks.values():
            s.close()
    out = [dict(p, ok=i in got) for i, p in enumerate(paths)]
    ok = sum(1 for p in out if p["ok"])
    return {"paths": out, "ok_count": ok, "failed_count": len(out) - ok}


def matrix(t: Topology, result: dict) -> str:
    """A text matrix: one row per (src, dst) pair, one column per plane; each
    cell counts the spines that delivered, ``4/4`` being all of them."""
    cells: dict[tuple[str, str, int], list[bool]] = {}
    for p in result["paths"]:
        cells.setdefault((p["src"], p["dst"], p["plane"]), []).append(p["ok"])
    head = "src->dst " + " ".join(f"{'p' + str(p):>5}" for p in range(t.planes))
    lines = [head]
    for s in range(t.hosts):
        for d in range(t.hosts):
            if s == d:
                continue
            row = f"{t.host(s) + '->' + t.host(d):<8} "
            cols = []
            for p in range(t.planes):
                oks = cells.get((t.host(s), t.host(d), p), [])
                mark = f"{sum(oks)}/{len(oks)}" if oks else "-"
                cols.append(f"{mark:>5}")
            lines.append(row + " ".join(cols))
    lines.append(f"{result['ok_count']} of {len(result['paths'])} paths deliver, {result['failed_count']} failed")
    return "\n".join(lines)
