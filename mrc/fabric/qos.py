"""Switch egress queues on the fabric: a rate, ECN marking, trimming and drops.

Every switch port (the switch end of every link) can get, opt-in
(``mrc fabric up --link-rate RATE``, ``mrc fabric qos``):

- an htb class limiting the port to RATE, with a deep fifo behind it, so a
  real queue builds at the port when more arrives than it can send;
- a tc-BPF program on clsact egress (``csrc/bpf/port_queue.bpf.c``) that keeps
  a phantom queue (bytes, drained at RATE) and, against it, sets CE on
  ECN-capable packets above ``ecn_kb``, trims MRC data packets above
  ``trim_kb`` (protocol.md section 2) and drops above ``buffer_kb``; with per
  port counters (packets, bytes, marked, trimmed, dropped) and the
  estimate's high-water mark.

The kernel here has htb, tbf, fifo, clsact and cls_bpf but no red, codel or
netem (docs/fabric.md, "Kernel traps"): the program is
the switch's AQM. Each port loads its own instance of the program
(:mod:`mrc.fabric.tcbpf` builds and finds it), so each has its own two maps
(``cfg``, written here; ``st``, read here).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from mrc.errors import FabricError, UsageError
from mrc.fabric import tcbpf
from mrc.fabric.topology import Topology

FIFO_PACKETS = 100_000  # the htb leaf never drops before the program does
PRIO = 7  # the filter's preference on clsact egress

_CFG = struct.Struct("<QIIII")  # rate_bytes_per_s, ecn, trim, buffer (bytes), pad
_ST = struct.Struct("<II8Q")  # lock, pad, last_ns, backlog, hwm, packets, bytes, marked, trimmed, dropped
ST_FIELDS = ("last_ns", "backlog", "hwm", "packets", "bytes", "marked", "trimmed", "dropped")


@dataclass(frozen=True)
class PortQoS:
    """A switch port's queue: ``rate_bps`` (0: no limit, no program; else 1
    kbit/s to 400 Gbit/s), and the
    ECN, trim and buffer thresholds in KiB of the queue estimate (0: off)."""

    rate_bps: int
    ecn_kb: int = 0
    trim_kb: int = 0
    buffer_kb: int = 0

    def check(self) -> PortQoS:
        """The settings, or UsageError when one is out of range."""
        if self.rate_bps and not 1000 <= self.rate_bps <= 400_000_000_000 or self.rate_bps < 0:
            raise UsageError(f"link rate {self.rate_bps} b/s is out of range (1 kbit to 400 gbit)")
        for what, v in (("--ecn-kb", self.ecn_kb), ("--trim-kb", self.trim_kb), ("--buffer-kb", self.buffer_kb)):
            if not 0 <= v <= 1 << 20:
                raise UsageError(f"{what} {v} is out of range (0 to 1048576 KiB; 0 turns it off)")
        if self.buffer_kb and self.trim_kb and self.trim_kb >= self.buffer_kb:
            raise UsageError(f"--trim-kb {self.trim_kb} must be below --buffer-kb {self.buffer_kb}: "
                             "a packet is trimmed before the buffer is full")
        return self


DEFAULT_THRESHOLDS = {"ecn_kb": 32, "trim_kb": 96, "buffer_kb": 512}


def _counters(st_fd: int) -> dict:
    """The st map's counters (ST_FIELDS)."""
    return dict(zip(ST_FIELDS, _ST.unpack(tcbpf.map_rw(st_fd, None, _ST.size))[2:], strict=True))


# ------------------------------------------------------------------ ports
def switch_ports(t: Topology, target: str | None = None) -> list[tuple[str, str, str]]:
    """(node, ifname, link) of every switch port, or of those of ``target``
    (a link: its switch ends; a switch: all its ports)."""
    return ports(t, target)[0]


def ports(t: Topology, target: str | None = None) -> tuple[list, list]:
    """The switch ports and the host ports (the hosts' NICs) of ``target``
    (None: all; a link: its ends; a switch or a host: all its ports), each a
    list of (node, ifname, link)."""
    switches = set(t.switch_nodes())
    sw, hosts = [], []
    for link in t.links():
        for node, ifname in ((link.a_node, link.a_if), (link.b_node, link.b_if)):
            if target in (None, link.name, node):
                (sw if node in switches else hosts).append((node, ifname, link.name))
    if target is not None and not sw and not hosts:
        raise UsageError(f"{target!r} is neither a link, a switch nor a host of fabric {t.name} "
                         "(links look like p0l0-p0s1 or h0-p0l0, switches like p0l0 or p0s1, hosts like h0)")
    return sw, hosts


def nic(q: PortQoS) -> PortQoS:
    """A host port's queue for a switch port's ``q``: the same rate, and a
    NIC's queue, which never marks, trims or drops (the sender's window is
    what bounds it)."""
    return PortQoS(q.rate_bps)


def _removal(ifnames: list[str]) -> list[str]:
    """tc lines that take a port's queue away (deleting what is absent is no error): the htb and
    the queue's own filter; clsact stays, with the other programs it holds (mrc.fabric.srv6bpf's,
    on a kernel without SRv6)."""
    return [x for i in ifnames for x in (f"qdisc del dev {i} root", f"filter del dev {i} egress prio {PRIO}")]


def apply_ports(t: Topology, ports: list[tuple[str, str, str]], q: PortQoS) -> int:
    """Give each port the queue ``q`` (rate 0: remove it). Returns how many."""
    q.check()
    obj = tcbpf.build("port_queue", "the switch queues") if q.rate_bps else None
    per_node: dict[str, list[str]] = {}
    for node, ifname, _ in ports:
        per_node.setdefault(node, []).append(ifname)
    for node, ifnames in per_node.items():
        if not q.rate_bps:
            tcbpf.tc_batch(t, node, _removal(ifnames), force=True)
            continue
        ids = tcbpf.prog_ids(t, node, [(i, "egress") for i in ifnames])
        lines, fresh = [], [i for i, found in zip(ifnames, ids, strict=True) if "port_queue" not in found]
        tcbpf.tc_batch(t, node, _removal(fresh), force=True)
        for i in ifnames:
            rate = f"htb rate {q.rate_bps}bit ceil {q.rate_bps}bit quantum 9100"
            if i not in fresh:  # a port that has its queue keeps it (and its counters): a new rate
                lines.append(f"class change dev {i} parent 1: classid 1:1 {rate}")
                continue
            lines += [f"qdisc add dev {i} root handle 1: htb default 1",
                      f"class add dev {i} parent 1: classid 1:1 {rate}",
                      f"qdisc add dev {i} parent 1:1 handle 10: pfifo limit {FIFO_PACKETS}",
                      f"qdisc replace dev {i} clsact",
                      f"filter add dev {i} egress prio {PRIO} handle 1 bpf direct-action obj {obj} sec tc"]
        r = tcbpf.tc_batch(t, node, lines)
        if r.returncode != 0:
            raise FabricError(f"setting the queues in {t.ns(node)} failed: {r.stderr.strip()}")
        for i in ifnames:
            _write_cfg(t, node, i, q)
    return len(ports)


def _write_cfg(t: Topology, node: str, ifname: str, q: PortQoS) -> None:
    with tcbpf.port_maps(t, node, ifname, "port_queue", "egress") as maps:
        if maps is None:
            raise FabricError(f"the queue program did not load on {node}:{ifname} "
                              f"(see `tc -n {t.ns(node)} filter show dev {ifname} egress`)")
        tcbpf.map_rw(maps["cfg"], _CFG.pack(q.rate_bps // 8, q.ecn_kb * 1024, q.trim_kb * 1024, q.buffer_kb * 1024, 0),
                _CFG.size)


def shown(c: dict) -> dict:
    """A port's counters (PortReader.read, _counters) as they are shown: the
    queue estimate and its high-water mark in KiB, no timestamp."""
    out = {k: v for k, v in c.items() if k not in ("last_ns", "hwm", "backlog")}
    out.update(hwm_kb=round(c["hwm"] / 1024, 1), backlog_kb=round(c["backlog"] / 1024, 1))
    return out


def port_counters(t: Topology, node: str, ifname: str) -> dict | None:
    """The port's counters, or None when it has no queue program."""
    with tcbpf.port_maps(t, node, ifname, "port_queue", "egress") as maps:
        if maps is None:
            return None
        cfg = _CFG.unpack(tcbpf.map_rw(maps["cfg"], None, _CFG.size))
        out = shown(_counters(maps["st"]))
    out.update(rate_bps=cfg[0] * 8, ecn_kb=cfg[1] // 1024, trim_kb=cfg[2] // 1024, buffer_kb=cfg[3] // 1024)
    return out


def stats(t: Topology, target: str | None = None) -> list[dict]:
    """Counters of every port with a queue, switches' then hosts' (or ``target``'s)."""
    out = []
    sw, hosts = ports(t, target)
    for node, ifname, link in sw + hosts:
        c = port_counters(t, node, ifname)
        if c is not None:
            out.append({"node": node, "ifname": ifname, "link": link, "host": node in t.host_nodes(), **c})
    return out


def unloaded_rtt_s(rate_bps: int, mtu_payload: int = 8192, hops: int = 3) -> float:
    """The round trip of a full-size packet over ``hops`` store-and-forward
    ports at ``rate_bps`` with no queue (and its small answer), in seconds."""
    return hops * (mtu_payload + 200) * 8 / rate_bps + 200e-6


def qp_profile(rate_bps: int, planes: int, mtu_payload: int = 8192, hops: int = 3, q: PortQoS | None = None) -> dict:
    """QP settings that match a fabric whose ports run at ``rate_bps``: the
    NSCC window a lone QP needs to fill its planes (1.5 x the bandwidth-delay
    product over the RTT a full-size packet sees crossing ``hops`` store-and-
    forward ports), and a retransmit timer (1.024 us x 2^timeout) above the
    longest queue the ports let build (up to the trim threshold, or the
    buffer): on a 100 Mbit/s port an 8 KiB packet alone takes 655 us, so the
    timings of a 100 Gbit/s fabric would call every queue a loss. Returns
    ``{"cc": {...}, "timeout": n, "reorder_ns": ns}``: QPAttr fields. The
    reorder allowance covers the queueing difference between two paths (up
    to the trim threshold's worth: a trimming fabric drops nothing)."""
    ser = (mtu_payload + 200) * 8 / rate_bps  # one packet's serialization, seconds
    rtt = unloaded_rtt_s(rate_bps, mtu_payload, hops)
    cwnd = int(1.5 * planes * rate_bps / 8 * rtt)
    q = q or PortQoS(rate_bps, **DEFAULT_THRESHOLDS)
    worst_kb = q.trim_kb or q.buffer_kb or 1024
    worst = 2 * hops * worst_kb * 1024 * 8 / rate_bps + rtt  # seconds of queue on the way there and back
    timeout = 11
    while 1.024e-6 * (1 << timeout) < worst and timeout < 20:
        timeout += 1
    reorder = 1.5 * worst_kb * 1024 * 8 / rate_bps
    # one base RTT for every QP: the NIC and the switch ports a full packet
    # crosses, and the way back; a QP that measured its own (the engine's
    # fallback when the configured one is shorter) would take whatever queue
    # it met at its start for base, and a latecomer would crowd the others out
    base = (hops + 1) * ser + 300e-6
    max_cwnd = max(cwnd, 4 * mtu_payload)
    cc = {"max_cwnd": max_cwnd, "base_rtt": int(base * 1e9), "target_delay": int(0.75 * base * 1e9),
          # a multiplicative decrease of at most 5%: a message here lasts tens
          # of RTTs, and halving the window on a mark (NSCC's default floor)
          # swings each flow's rate 2x and the completion tail with it; with
          # md_by_sample every marked ACK past the target cuts by this floor
          # (bench/congestion_bench.py, incast p99 with --cc max_md_jump=900)
          "max_md_jump": 950,
          # the window moves once per base RTT: NSCC adds eta at every
          # adjustment, and with the defaults' 10 us or 32 KiB acknowledged
          # (every ACK here) a window grew eta per ACK, in proportion to its
          # rate, so flows sharing a port drift apart for hundreds of ms
          "adjust_period_threshold": int(base * 1e9), "adjust_bytes_threshold": max_cwnd,
          # the decrease follows the delay of the marked ACK, as the UET reference
          # simulator cuts, not the average: the RTT samples of flows sharing a
          # slow port scatter over milliseconds while each flow's average sits at
          # the target, where its cut is near nothing, and flows drift apart
          "md_by_sample": 1}
    return {"cc": cc, "timeout": timeout,
            "reorder_ns": max(200_000, int(reorder * 1e9))}


class PortReader:
    """Fast repeated reads of some ports' counters (a sampler during a run):
    the maps are opened once, each read is two bpf(2) calls per port."""

    def __init__(self, t: Topology, ports: list[tuple[str, str, str]]) -> None:
        self.ports, self.fds = [], []
        for node, ifname, _ in ports:
            pid = tcbpf.prog_id(t, node, ifname, "port_queue", "egress")
            if pid is not None:
                maps = tcbpf.prog_maps(pid)
                self.ports.append(f"{node}:{ifname}")
                self.fds.append(maps)

    def read(self) -> dict[str, dict]:
        """Every port's counters now."""
        return {name: _counters(maps["st"]) for name, maps in zip(self.ports, self.fds, strict=True)}

    def close(self) -> None:
        """Close the ports' BPF maps."""
        for maps in self.fds:
            for fd in maps.values():
                os.close(fd)
        self.fds = []
