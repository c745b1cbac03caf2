"""Real-fabric benchmark: in one run, on the same fabric and payload size,

  (a) the raw ceiling: a C blaster sending pre-built packets of MRC's payload
      size over the same planes and paths with no protocol;
  (b) `mrc perf`-style: one MRC QP over all planes (1 MiB WRITEs; the payload
      size is the largest the ports' MTU carries: 8 KiB on the fabric);
  (c) kernel TCP, one stream over one plane;
  (d) MPTCP with one subflow per plane;
  then the longest completion stall when a T0-T1 link is cut mid-transfer
  (64 KiB WRITEs, so that one message is not itself longer than the target),
  beside the longest stall of the same transfer without a fault and with the
  link black-holed by nftables instead of taken down.

Same payload size: the hosts keep GSO (as a host keeps TSO on a real NIC),
but every switch interface gets gso_max_segs 1 (mrc.fabric.apply.wire_sized),
so the leaf cuts TCP's 64 KB super-packets and the fabric forwards packets of
at most the MTU, as a real one does. Without it an emulated switch does one
route lookup per 64 KB of TCP and one per 8 KB of MRC. For transparency, TCP
is also measured first without it (tcp_superpacket_gbps).

    python bench/fabric_bench.py [--json] [--seconds 3]

Needs root. Prints the four rates and ratio_raw, ratio_mptcp, ratio_tcp,
stall_ms. All rates are measured at the receiver.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time

from mrc.fabric import apply, ns
from mrc.fabric.topology import Topology
from mrc.perf import stream
from mrc.verbs import Context

IPPROTO_MPTCP = 262


def paths_between(t, src, dst):
    return {p: [t.path_address(src, dst, p, s) for s in range(t.spines)] for p in range(t.planes)}


# A fault from another process, as an operator's would be. On this one
# machine the "switch" shares the hosts' CPUs, so the process starts before
# the transfer (its interpreter start-up stays out of the measurement) and
# runs under SCHED_IDLE: the netlink work of taking the link down (about 7 ms
# of CPU) must not preempt the engine threads, because in a real fabric a
# link fails in the network, not on the hosts. It cuts the link when told to.
# Mode "cut" takes the link down (ip link set down on both veth ends);
# "blackhole" drops everything crossing it with nftables (a silent failure,
# without the kernel's link-state work on these shared CPUs).
FAULT = ("import os, sys; os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0)); "
         "from mrc.fabric import apply; print('ready', flush=True); sys.stdin.readline(); "
         "apply.fail(sys.argv[1], sys.argv[2]) if sys.argv[3] == 'cut' else apply.loss(sys.argv[1], sys.argv[2], 100); "
         "print('done', flush=True)")


def raw_ceiling(t, src, dst, seconds, payload):
    ca = ns.run_in(t.ns(t.host(src)), lambda: Context(start=False))
    cb = ns.run_in(t.ns(t.host(dst)), lambda: Context())  # counts what arrives
    try:
        from mrc._dp import lib

        from mrc.verbs import RemoteInfo

        peer = ca.peer_index(RemoteInfo(qpn=0, ports={p.plane: p.address for p in cb.ports},
                                        paths=paths_between(t, src, dst)))
        # the receiver counts only packets from a known peer
        cb.peer_index(RemoteInfo(qpn=0, ports={p.plane: p.address for p in ca.ports},
                                 paths=paths_between(t, dst, src)))
        before = sum(p["rx_bytes"] for p in cb.port_stats())
        t0 = time.perf_counter()
        lib.mrc_ctx_blast(ca._ctx, peer, payload, int(seconds * 1e9))
        time.sleep(0.2)  # let the last packets arrive
        got = sum(p["rx_bytes"] for p in cb.port_stats()) - before
        return got * 8 / (time.perf_counter() - t0 - 0.2) / 1e9
    finally:
        ca.close()
        cb.close()


def connect_pair(t, ca, cb, src, dst, window):
    """A QP from ca (host src) to cb (host dst) over every plane and path, with
    a window-byte region on each side; returns the QP, its MR and the peer's info."""
    sbuf, dbuf = bytearray(os.urandom(window)), bytearray(window)
    ms, md = ca.reg_mr(sbuf), cb.reg_mr(dbuf, remote_write=True)  # the MRs keep the buffers
    qa, qb = ca.create_qp(), cb.create_qp()
    ia, ib = ca.local_info(qa, ms), cb.local_info(qb, md)
    ia.paths, ib.paths = paths_between(t, dst, src), paths_between(t, src, dst)
    qb.connect(ia)
    qa.connect(ib)
    return qa, ms, ib


def mrc_rate(t, src, dst, seconds, cut=None, msg=1 << 20, mode="cut"):
    ca = ns.run_in(t.ns(t.host(src)), lambda: Context())
    cb = ns.run_in(t.ns(t.host(dst)), lambda: Context())
    try:
        window = 64 << 20
        qa, ms, ib = connect_pair(t, ca, cb, src, dst, window)
        # size the transfer for about `seconds` at 5 Gb/s
        total = int(seconds * 5e9 / 8) // (1 << 20) * (1 << 20)
        events = []
        proc = None
        if cut:
            proc = subprocess.Popen([sys.executable, "-c", FAULT, t.name, cut, mode], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True)
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError("the fault process did not start")

            def do_cut():
                proc.stdin.write("go\n")
                proc.stdin.flush()
                return proc.stdout.readline().strip() == "done" and cut
            events = [(0.5, do_cut)]
        try:
            r = stream(ca, qa, ms, ib, total, msg=msg, depth=max(16, min(64, (16 << 20) // msg)), window=window,
                       events=events)
        finally:
            if proc:
                proc.stdin.close()
                proc.wait(10)
        r["payload"] = qa.attr_mtu
        return r
    finally:
        ca.close()
        cb.close()
        if cut:
            apply.heal(t.name, cut)


def _tcp(t, src, dst, seconds, plane_addrs, proto=0):
    """One stream from src to dst; returns receiver goodput in Gb/s."""
    dst_addr = t.inner_address(dst, plane_addrs)
    srv = ns.run_in(t.ns(t.host(dst)), lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM, proto))
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("::", 5201))
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
    cli.connect((dst_addr, 5201))
    chunk = b"\0" * (1 << 20)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        cli.sendall(chunk)
    cli.close()
    th.join()
    srv.close()
    return got[0] * 8 / got[1] / 1e9


def mptcp_setup(t, h):
    node = t.ns(t.host(h))
    ns.command(node, ["ip", "mptcp", "limits", "set", "subflow", str(t.planes), "add_addr_accepted",
                      str(t.planes)], check=True)
    for p in range(1, t.planes):
        ns.command(node, ["ip", "mptcp", "endpoint", "add", t.inner_address(h, p), "subflow"], check=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print JSON only")
    ap.add_argument("--seconds", type=float, default=3.0, help="seconds per measurement (default 3)")
    a = ap.parse_args()
    t = Topology(name=f"b{os.getpid() % 100000}")
    log = (lambda *x: None) if a.json else (lambda *x: print(*x, file=sys.stderr, flush=True))
    apply.up(t)
    try:
        src, dst = 0, t.hosts - 1
        log("kernel TCP, one stream over plane 0, GSO super-packets through the switches ...")
        tcp_super = _tcp(t, src, dst, a.seconds, 0)
        nif = apply.wire_sized(t)
        log(f"  {tcp_super:.2f} Gb/s\nswitches now forward wire-size packets ({nif} interfaces)\n"
            "mrc, one QP over all planes ...")
        m = mrc_rate(t, src, dst, a.seconds)
        payload = m["payload"]
        log(f"  {m['gbps']:.2f} Gb/s ({payload} B packets)\nraw ceiling, same packets ...")
        raw = raw_ceiling(t, src, dst, a.seconds, payload)
        log(f"  {raw:.2f} Gb/s\nmrc, 64 KiB writes, no fault ...")
        small = mrc_rate(t, src, dst, a.seconds / 2, msg=64 << 10)
        log(f"  {small['gbps']:.2f} Gb/s\nkernel TCP, one stream over plane 0 ...")
        tcp = _tcp(t, src, dst, a.seconds, 0)
        log(f"  {tcp:.2f} Gb/s\nMPTCP, one subflow per plane ...")
        mptcp_setup(t, src)
        mptcp_setup(t, dst)
        mp = _tcp(t, src, dst, a.seconds, 0, IPPROTO_MPTCP)
        log(f"  {mp:.2f} Gb/s\nmrc with a T0-T1 link cut mid-transfer ...")
        link = f"{t.leaf(2, t.host_leaf(src))}-{t.spine(2, 1)}"
        cut = mrc_rate(t, src, dst, a.seconds / 2, cut=link, msg=64 << 10)
        log(f"  longest stall {cut['max_stall_after_event_ms']} ms\nmrc with the same link black-holed (nftables) ...")
        hole = mrc_rate(t, src, dst, a.seconds / 2, cut=link, msg=64 << 10, mode="blackhole")
        res = {"payload": payload, "raw_gbps": round(raw, 3), "mrc_gbps": m["gbps"], "tcp_gbps": round(tcp, 3),
               "mptcp_gbps": round(mp, 3), "ratio_raw": round(m["gbps"] / raw, 3),
               "ratio_mptcp": round(m["gbps"] / mp, 3), "ratio_tcp": round(m["gbps"] / tcp, 3),
               "tcp_superpacket_gbps": round(tcp_super, 3), "ratio_tcp_superpacket": round(m["gbps"] / tcp_super, 3),
               "stall_ms": cut["max_stall_after_event_ms"], "stall_ms_whole_run": cut["max_stall_ms"],
               "stall_ms_no_fault": small["max_stall_ms"], "stall_ms_blackhole": hole["max_stall_after_event_ms"],
               "stall_msg_bytes": 64 << 10,
               "targets": {"ratio_raw": 0.9, "ratio_mptcp": 1.2, "ratio_tcp": 0.8, "stall_ms": 1.0}}
        print(json.dumps(res, indent=1) if a.json else "\n".join(f"{k:20} {v}" for k, v in res.items()))
        return 0
    finally:
        apply.down(t.name)


if __name__ == "__main__":
    sys.exit(main())
