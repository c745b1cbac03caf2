"""Real-fabric benchmark: in one run, on the same fabric and payload size,

  (a) the raw ceiling: a C blaster sending pre-built packets of MRC's payload
      size over the same planes and paths with no protocol; and the copying
      blaster, which first copies each payload from a 64 MiB region with its
      ICRC and checksum in one pass, as MRC must (no protocol either);
      and the same blaster with k packets of a path to a kernel buffer
      (raw_buffers_gbps: UDP_SEGMENT, docs/engine.md "Buffers of k packets");
  (b) `mrc perf`-style: one MRC QP over all planes (1 MiB WRITEs; the payload
      size is the largest the ports' MTU carries: 8 KiB on the fabric), k
      packets of a path to a kernel buffer (--packets-per-buffer; default:
      as many as fit in 64 KiB, 7, where the hosts' ports have the fabric's
      host_gso program);
  (c) kernel TCP, one stream over one plane, sending from and receiving into
      64 MiB buffers as MRC does (and, for comparison, tcp_hot_gbps: the same
      1 MiB buffer at each end every time, always in cache);
  (d) MPTCP with one subflow per plane, from and into 64 MiB buffers;
  then the longest completion stall when a T0-T1 link is cut mid-transfer
  (64 KiB WRITEs, so that one message is not itself longer than the target),
  beside the longest stall of the same transfer without a fault and with the
  link black-holed by nftables instead of taken down.

The fabric routes kernel traffic with FRR's BGP (mrc fabric up --routing
bgp: plain IPv6, ECMP, BFD), as a datacenter fabric routes TCP; --routing
static keeps the SRv6 encap through one spine per host pair.

The control beside ratio_tcp: the copying blaster with k packets to a buffer
(copy_buffers_gbps) sends MRC's packets as MRC does and does only what any
sender of them must, each payload copied with its ICRC, with a receiver
that only counts them. copy_buffers_over_tcp is what such a sender moves
over TCP here; ratio_copy_buffers is MRC over it (its protocol's cost).

With buffers of k packets, MRC is also measured before the switches are
made wire-sized (mrc_whole_gbps; ratio_tcp_whole, over tcp_superpacket_gbps):
both stacks' buffers then cross every hop whole.

Same payload size: the hosts keep GSO (as a host keeps TSO on a real NIC),
but every switch interface gets gso_max_segs 1 (mrc.fabric.apply.wire_sized),
so the leaf cuts TCP's 64 KB super-packets and the fabric forwards packets of
at most the MTU, as a real one does. The hosts then receive as a NIC driver
does, with GRO (mrc.fabric.apply.host_gro): TCP's segments merge again at
the receiving host, and with UDP GRO for forwarding so do a path's MRC
packets, into buffers the receiver takes whole. Without it an emulated switch does one
route lookup per 64 KB of TCP and one per 8 KB of MRC. For transparency, TCP
is also measured first without it (tcp_superpacket_gbps).

    python bench/fabric_bench.py [--json] [--seconds 3]
    python bench/fabric_bench.py --security-pairs 5 [--json]

Needs root. Prints the rates and ratio_raw, ratio_copy, ratio_mptcp,
ratio_tcp, stall_ms. All rates are measured at the receiver.

CPU per byte (bench/cpu.py): the cycles per delivered byte of MRC's threads
(mrc_cycles_per_byte: the sender's application and engine threads and the
receiver's engine thread, from their CPU clocks), of both blasters' and of
kernel TCP's, and the machine's floor measured in the same run
(min_cycles_per_byte: a packet copied from a region and checksummed in one
pass, at each end), with cpu_vs_min = mrc / min. On this kernel a thread's
clock also holds the softirq work that ran on its CPU while it ran: the
fabric's forwarding of what it sent, the delivery into the receiver's ring.

--security-pairs N measures authenticated MRC instead: one QP over all
planes with security off, auth and encrypt in turn (off auth encrypt off
...), N rounds, and prints each mode's rates and auth_over_off,
encrypt_over_off (the medians of the rounds' ratios) with their spreads.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from mrc.errors import UsageError
from mrc.fabric import apply
from mrc.fabric.baseline import IPPROTO_MPTCP, mptcp_setup, stream_gbps
from mrc.fabric.faults import FaultScheduler
from mrc.fabric.pair import host_context, qp_pair
from mrc.fabric.topology import Topology
from mrc.signals import exit_cleanly_on_sigterm
from mrc.tools.perf import stream
from mrc.units import bounded, median_spread
from mrc.verbs import RemoteInfo

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu  # noqa: E402 (bench/, beside this file)
import fabric_args  # noqa: E402 (bench/, beside this file)

#: what every sender here walks (MRC's source and destination regions, the copying blaster's
#: source, TCP's and MPTCP's buffers at each end): larger than the caches, as an application's
REGION = 64 << 20


def _info(t: Topology, ctx, host: int) -> RemoteInfo:
    """What a peer needs to send to ``ctx`` (host ``host``): no QP, no region."""
    return RemoteInfo(qpn=0, ports={p.plane: p.address for p in ctx.ports}, topology=t.name, host=t.host(host))


def raw_ceiling(t, src, dst, seconds, payload, source=None, k=1):
    """The blaster's rate in Gb/s, the bytes that arrived (as packets: headers
    and payload) and the CPU of its two threads (the sender's, this one, and
    the receiving context's engine thread); with ``source``, the copying
    blaster's; with ``k`` > 1, k packets of a path to a kernel buffer."""
    ca = host_context(t, src, start=False, packets_per_buffer=k)  # the blaster sends from this thread
    cb = host_context(t, dst)  # counts what arrives
    try:
        peer = ca.peer_index(_info(t, cb, dst))
        cb.peer_index(_info(t, ca, src))  # the receiver counts only packets from a known peer
        before = sum(p["rx_bytes"] for p in cb.port_stats())
        th = cpu.Threads()
        th.this_thread("sender")
        th.engine("receiver", cb)
        th.start()
        t0 = time.perf_counter()
        ca.engine.blast(peer, payload, seconds, source, burst=ca.packets_per_buffer)
        time.sleep(0.2)  # let the last packets arrive
        got = sum(p["rx_bytes"] for p in cb.port_stats()) - before
        use = th.stop()
        return got * 8 / (time.perf_counter() - t0 - 0.2) / 1e9, got, use
    finally:
        ca.close()
        cb.close()


def mrc_rate(t, src, dst, seconds, cut=None, msg=1 << 20, mode="cut", security="off", k=1):
    """One QP's rate (and longest stall); with ``cut``, that link fails half
    way through: taken down (``cut``) or black-holed by nftables (``blackhole``).
    ``k``: packets of a path per kernel buffer."""
    window = REGION
    faults = FaultScheduler(t.name) if cut else None  # started before the transfer
    try:
        with qp_pair(t, src, dst, window, security=security, packets_per_buffer=k) as p:
            # size the transfer for about `seconds` at 5 Gb/s
            total = int(seconds * 5e9 / 8) // (1 << 20) * (1 << 20)

            def do_cut():
                faults.now("fail", cut) if mode == "cut" else faults.now("loss", cut, 100)
                return cut

            th = cpu.Threads()
            th.this_thread("sender_app")
            th.engine("sender_engine", p.ca)
            th.engine("receiver_engine", p.cb)
            th.start()
            r = stream(p.ca, p.qa, p.ms, p.remote, total, msg=msg, depth=max(16, min(64, (16 << 20) // msg)),
                       window=window, events=[(0.5, do_cut)] if cut else None)
            r["cpu"] = th.stop()
            r["verified"] = p.verify()  # every slot was written last from the same source bytes
            r["payload"] = p.qa.attr_mtu
            r["packets_per_buffer"] = p.ca.packets_per_buffer
            sent = [(s["tx_packets"], s["gso_tx_buffers"]) for s in p.ca.port_stats()]
            bufs = sum(b for _, b in sent)  # buffers of 2 or more; the rest went one a buffer
            r["packets_per_kernel_buffer"] = round(sum(n for n, _ in sent) / bufs, 2) if bufs else 1.0
            return r
    finally:
        if faults:
            faults.close()
            apply.heal(t.name, cut)


def cpu_per_byte(m: dict, raw: tuple, copy: tuple, tcp_use: dict, floor: dict) -> dict:
    """Cycles per delivered byte of MRC's threads (the sender's application
    and engine threads, the receiver's engine thread), of the raw and the
    copying blaster's (``raw``, ``copy``: bytes and CPU) and of kernel TCP's
    (each side's one thread), against the machine's floor: one fused
    copy-and-CRC pass at each end."""
    hz = floor["cpu_ghz"]
    use = m["cpu"]
    tcp_cpu = {side: cpu.delta(*tcp_use[side]) for side in ("sender", "receiver")}
    mrc_all = cpu.per_byte(use, ["sender_app", "sender_engine", "receiver_engine"], m["bytes"], hz)
    raw_all = cpu.per_byte(raw[1], ["sender", "receiver"], raw[0], hz)
    copy_all = cpu.per_byte(copy[1], ["sender", "receiver"], copy[0], hz)
    tcp_all = cpu.per_byte(tcp_cpu, ["sender", "receiver"], tcp_use["bytes"], hz)
    least = round(2 * floor["fused_cycles_per_byte"], 4)
    return {
        "mrc_cycles_per_byte": mrc_all["cycles_per_byte"],
        "mrc_user_cycles_per_byte": mrc_all["user_cycles_per_byte"],
        "mrc_sender_cycles_per_byte": cpu.per_byte(use, ["sender_app", "sender_engine"], m["bytes"], hz)[
            "cycles_per_byte"],
        "mrc_receiver_cycles_per_byte": cpu.per_byte(use, ["receiver_engine"], m["bytes"], hz)["cycles_per_byte"],
        "raw_cycles_per_byte": raw_all["cycles_per_byte"],
        "copy_cycles_per_byte": copy_all["cycles_per_byte"],
        "copy_sender_cycles_per_byte": cpu.per_byte(copy[1], ["sender"], copy[0], hz)["cycles_per_byte"],
        "tcp_cycles_per_byte": tcp_all["cycles_per_byte"],
        "min_cycles_per_byte": least,
        "cpu_vs_min": round(mrc_all["cycles_per_byte"] / least, 2),
        "user_cpu_vs_min": round(mrc_all["user_cycles_per_byte"] / least, 2),
        "mrc_cpu_over_raw": round(mrc_all["cycles_per_byte"] / raw_all["cycles_per_byte"], 3),
        "mrc_cpu_over_copy": round(mrc_all["cycles_per_byte"] / copy_all["cycles_per_byte"], 3),
        "cpu": {"mrc": use, "raw": raw[1], "copy": copy[1], "tcp": tcp_cpu, "floor": floor},
    }


def security_pairs(t, src, dst, a, log) -> int:
    """Off, auth and encrypt in turn, ``a.security_pairs`` rounds: the rates and the ratios to off."""
    import store  # bench/, beside this file

    apply.wire_sized(t)
    rates: dict[str, list[float]] = {"off": [], "auth": [], "encrypt": []}
    for r in range(a.security_pairs):
        for mode in rates:
            rates[mode].append(mrc_rate(t, src, dst, a.seconds, security=mode)["gbps"])
            log(f"round {r + 1}/{a.security_pairs} {mode:8} {rates[mode][-1]:.2f} Gb/s")
    res = {"security_pairs": a.security_pairs, "srv6": apply.srv6(t.name), "seconds": a.seconds,
           **{f"{m}_gbps": v for m, v in rates.items()}}
    for m in ("auth", "encrypt"):
        med, spread = median_spread([x / o for x, o in zip(rates[m], rates["off"], strict=True)])
        res[f"{m}_over_off"], res[f"{m}_over_off_spread"] = med, spread
    res["targets"] = {"auth_over_off": 0.9, "encrypt_over_off": 0.85}
    if a.save:
        store.save("fabric_bench_security", res, a.save, srv6=res["srv6"])
    print(json.dumps(res, indent=1) if a.json else "\n".join(f"{k:24} {v}" for k, v in res.items()))
    return 0


def buffer_packets(t, src, dst, want: int) -> int:
    """``--packets-per-buffer`` as the contexts take it (mrc.fabric.apply.packets_per_buffer):
    0 is the most that fit in 64 KiB; anything but 1 needs the fabric's host_gso program on both
    hosts' ports."""
    k = apply.packets_per_buffer(t, [t.host(src), t.host(dst)], want)
    if want > 1 and k == 1:
        raise UsageError(f"--packets-per-buffer {want} needs the host_gso program on every host port "
                         "(mrc.fabric.gsobpf; it needs clang: bash tools/setup.sh installs it)")
    return k


def measure(t, src, dst, a, log) -> dict:
    """Every rate of the run, in its order (the module's text), with MRC and the second raw
    ceiling at ``--packets-per-buffer``."""
    k = buffer_packets(t, src, dst, a.packets_per_buffer)
    log("kernel TCP, one stream over plane 0, GSO super-packets through the switches ...")
    tcp_super = stream_gbps(t, src, dst, a.seconds)
    log(f"  {tcp_super:.2f} Gb/s\nmrc, one QP over all planes, its buffers whole through the switches too ...")
    whole = mrc_rate(t, src, dst, a.seconds, k=k) if k != 1 else None  # the control beside tcp_super
    nif, ngro = apply.wire_sized(t), apply.host_gro(t)
    log(f"  {whole['gbps'] if whole else '-'} Gb/s\nswitches now forward wire-size packets ({nif} interfaces), "
        f"hosts receive with GRO ({ngro} ports)\nmrc, one QP over all planes ...")
    m = mrc_rate(t, src, dst, a.seconds, k=k)
    payload, k = m["payload"], m["packets_per_buffer"]
    log(f"  {m['gbps']:.2f} Gb/s ({payload} B packets)\nraw ceiling, same packets ...")
    raw, raw_bytes, raw_cpu = raw_ceiling(t, src, dst, a.seconds, payload)
    log(f"  {raw:.2f} Gb/s\nraw ceiling, {k} packets to a kernel buffer ...")
    raw_k = raw_ceiling(t, src, dst, a.seconds, payload, k=k)[0] if k > 1 else raw
    log(f"  {raw_k:.2f} Gb/s\nthe copying blaster: each payload copied from a 64 MiB region first ...")
    source = bytearray(os.urandom(1 << 20)) * (REGION >> 20)
    copy, copy_bytes, copy_cpu = raw_ceiling(t, src, dst, a.seconds, payload, source)
    log(f"  {copy:.2f} Gb/s\nthe copying blaster, {k} packets to a kernel buffer ...")
    copy_k = raw_ceiling(t, src, dst, a.seconds, payload, source, k=k)[0] if k > 1 else copy
    log(f"  {copy_k:.2f} Gb/s\nmrc, 64 KiB writes, no fault ...")
    small = mrc_rate(t, src, dst, a.seconds / 2, msg=64 << 10, k=k)
    log(f"  {small['gbps']:.2f} Gb/s\nkernel TCP, one stream over plane 0 ...")
    tcp_use: dict = {}
    tcp = stream_gbps(t, src, dst, a.seconds, clock=cpu.own_cpu, readings=tcp_use, region=REGION)
    log(f"  {tcp:.2f} Gb/s\nkernel TCP, the same 1 MiB buffer at each end every time ...")
    tcp_hot = stream_gbps(t, src, dst, a.seconds)
    log(f"  {tcp_hot:.2f} Gb/s\nthe machine's floor: a packet copied and checksummed ...")
    floor = cpu.minimum(payload)
    log(f"  {floor['fused_cycles_per_byte']} cycles per byte in one pass\nMPTCP, one subflow per plane ...")
    mptcp_setup(t, src)
    mptcp_setup(t, dst)
    mp = stream_gbps(t, src, dst, a.seconds, proto=IPPROTO_MPTCP, region=REGION)
    log(f"  {mp:.2f} Gb/s\nmrc with a T0-T1 link cut mid-transfer ...")
    link = f"{t.leaf(2, t.host_leaf(src))}-{t.spine(2, 1)}"
    cut = mrc_rate(t, src, dst, a.seconds / 2, cut=link, msg=64 << 10, k=k)
    log(f"  longest stall {cut['max_stall_after_event_ms']} ms\nmrc with the same link black-holed (nftables) ...")
    hole = mrc_rate(t, src, dst, a.seconds / 2, cut=link, msg=64 << 10, mode="blackhole", k=k)
    return {"payload": payload, "packets_per_buffer": k, "raw_gbps": round(raw, 3),
            "raw_buffers_gbps": round(raw_k, 3), "ratio_raw_buffers": round(m["gbps"] / raw_k, 3),
            "mrc_gbps": m["gbps"], "tcp_gbps": round(tcp, 3),
            "mrc_packets_per_buffer": m["packets_per_kernel_buffer"],
            "mptcp_gbps": round(mp, 3), "ratio_raw": round(m["gbps"] / raw, 3),
            "ratio_mptcp": round(m["gbps"] / mp, 3), "ratio_tcp": round(m["gbps"] / tcp, 3),
            "copy_gbps": round(copy, 3), "ratio_copy": round(m["gbps"] / copy, 3),
            # the control beside ratio_tcp: MRC's packets, k to a buffer, each payload copied with its ICRC,
            # no protocol, a receiver that only counts; over TCP, what any MRC sender here can be
            "copy_buffers_gbps": round(copy_k, 3), "ratio_copy_buffers": round(m["gbps"] / copy_k, 3),
            "copy_buffers_over_tcp": round(copy_k / tcp, 3),
            "tcp_hot_gbps": round(tcp_hot, 3), "ratio_tcp_hot": round(m["gbps"] / tcp_hot, 3),
            "data_verified": m["verified"] and small["verified"], "qp_errors": 0,
            "tcp_superpacket_gbps": round(tcp_super, 3), "ratio_tcp_superpacket": round(m["gbps"] / tcp_super, 3),
            # both with their buffers whole through every hop (None: MRC sends a packet per buffer)
            "mrc_whole_gbps": whole["gbps"] if whole else None,
            "ratio_tcp_whole": round(whole["gbps"] / tcp_super, 3) if whole else None,
            "srv6": apply.srv6(t.name), "routing": a.routing, "bfd_ms": a.bfd_ms, "host_gro_ports": ngro,
            "stall_ms": cut["max_stall_after_event_ms"], "stall_ms_whole_run": cut["max_stall_ms"],
            "stall_ms_no_fault": small["max_stall_ms"], "stall_ms_blackhole": hole["max_stall_after_event_ms"],
            "stall_msg_bytes": 64 << 10,
            **cpu_per_byte(m, (raw_bytes, raw_cpu), (copy_bytes, copy_cpu), tcp_use, floor),
            "targets": {"ratio_raw": 0.8, "ratio_raw_buffers": 0.8, "ratio_mptcp": 2.0, "ratio_tcp": 1.2,
                        "stall_ms": 1.0, "cpu_vs_min": 1.5}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print JSON only")
    ap.add_argument("--seconds", type=float, default=3.0, help="seconds per measurement (default 3)")
    import store  # bench/, beside this file

    ap.add_argument("--security-pairs", type=int, default=0, metavar="N",
                    help="measure security off against auth and encrypt, N rounds (alternated) instead")
    ap.add_argument("--packets-per-buffer", type=bounded(int, 0, 8), default=0, metavar="K",
                    help="MRC's packets of one path per kernel buffer (UDP_SEGMENT; 1: one each, through the raw "
                         "socket; default 0: as many as fit in 64 KiB, where every host port has the fabric's "
                         "host_gso program)")
    fabric_args.add_routing(ap)
    store.add_argument(ap)
    a = ap.parse_args()
    if a.security_pairs < 0 or a.security_pairs > 50:
        ap.error("--security-pairs is 1 to 50")
    exit_cleanly_on_sigterm()  # a killed run still removes its fabric
    t = Topology(name=f"b{os.getpid() % 100000}")
    log = (lambda *x: None) if a.json else (lambda *x: print(*x, file=sys.stderr, flush=True))
    apply.up(t, routing=a.routing, bfd_ms=a.bfd_ms)
    try:
        src, dst = 0, t.hosts - 1
        if a.security_pairs:
            return security_pairs(t, src, dst, a, log)
        if apply.srv6(t.name) != "kernel":
            log("this kernel has no SRv6: the fabric's End, encap and End.DT6 run in tc BPF (mrc.fabric.srv6bpf)")
        res = measure(t, src, dst, a, log)
        if a.save:
            store.save("fabric_bench", res, a.save, srv6=res["srv6"])
        print(json.dumps(res, indent=1) if a.json else "\n".join(f"{k:20} {v}" for k, v in res.items()))
        return 0
    finally:
        apply.down(t.name)


if __name__ == "__main__":
    sys.exit(main())
