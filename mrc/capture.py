"""``mrc capture`` (tcpdump inside a fabric namespace) and ``mrc decode`` (a
per-QP summary of a capture, with the scapy layers of :mod:`mrc.dissect`).

    mrc capture h0 --port 2 -w h0p2.pcap          # Ctrl-C (or --seconds/--count) stops it
    mrc decode h0p2.pcap --json

Decoding needs the ``dissect`` extra (scapy); capturing needs tcpdump.
"""

from __future__ import annotations

import collections
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from mrc import wire
from mrc.errors import MrcError, UsageError

REORDER_BUCKETS = ["0", "1", "2-3", "4-7", "8-15", "16-31", "32+"]


# ------------------------------------------------------------------ capture
class Capture:
    """tcpdump running in a fabric node's namespace, writing MRC packets to a file.

    Start it before the traffic: ``start()`` returns once tcpdump is listening.
    ``stop()`` ends it cleanly (SIGINT, so the file is complete)."""

    def __init__(self, fabric: str, node: str, out: str, interface: str | None = None, count: int | None = None,
                 snaplen: int = 0) -> None:
        self.fabric, self.node, self.out = fabric, node, out
        self.interface, self.count, self.snaplen = interface, count, snaplen
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []

    def argv(self) -> list[str]:
        # -B: a 64 MiB kernel buffer, so a burst at line rate is not dropped
        a = ["tcpdump", "-n", "-B", "65536", "-i", self.interface or "any", "-w", self.out]
        if self.snaplen:
            a += ["-s", str(self.snaplen)]
        if self.count:
            a += ["-c", str(self.count)]
        return a + ["udp", "port", str(wire.UDP_PORT)]

    def start(self, timeout: float = 10.0) -> Capture:
        from mrc.fabric import apply, ns

        if not shutil.which("tcpdump"):
            raise MrcError("tcpdump is not installed: apt-get install tcpdump")
        apply.require_root("mrc capture")
        t = apply.load_topology(self.fabric)
        if self.node not in t.nodes():
            raise UsageError(f"unknown node {self.node!r}: use a host h0..h{t.hosts - 1} or a switch such as "
                             f"{t.leaf(0, 0)} or {t.spine(0, 0)}")
        self.proc = ns.popen(t.ns(self.node), self.argv(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
        ready = threading.Event()

        def read_stderr() -> None:
            for line in self.proc.stderr:
                self.lines.append(line.rstrip())
                if "listening on" in line:
                    ready.set()
            ready.set()

        threading.Thread(target=read_stderr, daemon=True).start()
        if not ready.wait(timeout) or self.proc.poll() is not None:
            self.stop()
            raise MrcError(f"tcpdump did not start in {self.node}: {' / '.join(self.lines[-3:]) or 'no output'}")
        return self

    def stop(self, timeout: float = 10.0) -> int:
        """Stop tcpdump; returns the number of packets it says it captured (or -1).
        ``self.dropped`` is how many the kernel dropped because tcpdump fell behind."""
        self.dropped = 0
        if self.proc is None:
            return -1
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        time.sleep(0.05)  # let the reader thread see the summary lines
        n = -1
        for line in self.lines:
            if line.endswith("packets captured"):
                n = int(line.split()[0])
            elif line.endswith("packets dropped by kernel"):
                self.dropped = int(line.split()[0])
        return n

    def __enter__(self) -> Capture:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def capture_main(fabric: str, node: str, out: str, port: int | None, interface: str | None, seconds: float | None,
                 count: int | None, snaplen: int, quiet: bool = False) -> int:
    iface = interface or (f"p{port}" if port is not None else None)
    say = (lambda *x: None) if quiet else (lambda *x: print(*x, file=sys.stderr, flush=True))

    def on_term(signum, frame):
        raise KeyboardInterrupt  # `kill` stops the capture as cleanly as Ctrl-C

    signal.signal(signal.SIGTERM, on_term)
    cap = Capture(fabric, node, out, iface, count, snaplen)
    try:
        cap.start()
        say(f"mrc capture: {node} {iface or 'all interfaces'} -> {out}; "
            + (f"for {seconds} s" if seconds else f"until {count} packets" if count else "Ctrl-C to stop"))
        end = time.monotonic() + seconds if seconds else None
        while cap.proc.poll() is None and (end is None or time.monotonic() < end):
            time.sleep(0.1)
    except KeyboardInterrupt:
        pass
    finally:
        n = cap.stop()
    say(f"mrc capture: {n if n >= 0 else 'an unknown number of'} packets written to {out}")
    if cap.dropped:
        say(f"mrc capture: the kernel dropped {cap.dropped} packets that tcpdump could not take in time: capture "
            "one port (--port), keep fewer bytes (--snaplen 128) or send more slowly")
    return 0


# ------------------------------------------------------------------ decode
@dataclass
class QPSummary:
    key: str
    packets: int = 0
    bytes: int = 0
    data_packets: int = 0
    retransmissions: int = 0
    sacks: int = 0
    probes: int = 0
    nacks: collections.Counter = field(default_factory=collections.Counter)
    evs: collections.Counter = field(default_factory=collections.Counter)
    planes: collections.Counter = field(default_factory=collections.Counter)
    reorder: collections.Counter = field(default_factory=collections.Counter)
    icrc_failures: int = 0
    max_psn: int | None = None

    def as_dict(self) -> dict:
        return {"qp": self.key, "packets": self.packets, "bytes": self.bytes, "data_packets": self.data_packets,
                "retransmissions": self.retransmissions, "sacks": self.sacks, "probes": self.probes,
                "nacks": dict(self.nacks), "icrc_failures": self.icrc_failures,
                "evs": {f"{k:#x}": v for k, v in sorted(self.evs.items())},
                "planes": {str(k): v for k, v in sorted(self.planes.items())},
                "reorder_histogram": {b: self.reorder.get(b, 0) for b in REORDER_BUCKETS}}


def _bucket(d: int) -> str:
    if d <= 1:
        return str(d)
    for i, b in enumerate(REORDER_BUCKETS[2:-1]):
        if d < 4 << i:
            return b
    return REORDER_BUCKETS[-1]


def malformed_reason(pkt) -> str | None:
    """Why an MRC packet does not follow wire v1 (None if it does)."""
    from mrc import dissect as d

    b = pkt[d.BTH]
    if len(bytes(b)) < wire.BTH_LEN:
        return "short"
    if b.tver != wire.WIRE_VERSION:
        return "version"
    if b.opcode not in d.OPCODES:
        return "opcode"
    try:
        parsed = wire.parse(bytes(b), trimmed=b.trimmed())
    except ValueError:
        return "length"
    if parsed["dqpn"] != b.dest_qp or parsed["psn"] != b.psn:
        return "fields"  # scapy and the C parser disagree: a dissector bug worth a report
    return None


def _host(address: str, topology) -> str:
    from mrc.dissect import usid_path

    info = usid_path(address, topology)
    return info["host"] or address


def decode(path: str, topology=None) -> dict:
    """Summarise a capture: totals, and per QP (sender host -> receiver host and
    destination QP) packets, bytes, retransmissions, EVs, planes, SACK and
    NACK counts, reordering, ICRC failures. Keys of the result: ``packets``,
    ``malformed``, ``truncated``, ``icrc_failures``, ``planes``, ``qps``."""
    try:
        from scapy.utils import PcapReader

        from mrc import dissect as d
    except ImportError as e:
        raise MrcError(f"mrc decode needs scapy: pip install 'mrc[dissect]' ({e})") from None
    from scapy.layers.inet import UDP
    from scapy.layers.inet6 import IPv6

    from mrc.fabric.topology import Topology

    topology = topology or Topology()
    qps: dict[str, QPSummary] = {}
    totals = collections.Counter()
    planes = collections.Counter()
    malformed = collections.Counter()
    try:
        reader = PcapReader(path)
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read {path}: {e}") from None
    with reader:
        for pkt in reader:
            if UDP not in pkt or pkt[UDP].dport != wire.UDP_PORT or IPv6 not in pkt:
                totals["other"] += 1
                continue
            totals["packets"] += 1
            wirelen = getattr(pkt, "wirelen", None) or len(pkt)
            if wirelen > len(pkt):
                totals["truncated"] += 1  # snaplen cut it: the headers may be there, the ICRC is not
                continue
            if d.BTH not in pkt:
                malformed["short"] += 1
                continue
            why = malformed_reason(pkt)
            if why:
                malformed[why] += 1
                continue
            b, ip = pkt[d.BTH], pkt[IPv6]
            ev = d.ev_of(pkt)
            key = f"{_host(ip.src, topology)}->{_host(ip.dst, topology)} qp {b.dest_qp}"
            q = qps.get(key) or qps.setdefault(key, QPSummary(key))
            q.packets += 1
            q.bytes += len(bytes(pkt[UDP].payload))
            plane = (ev >> 16) & 0xF
            q.evs[ev] += 1
            q.planes[plane] += 1
            planes[plane] += 1
            ok = d.icrc_ok(pkt)
            if ok is False:
                q.icrc_failures += 1
                totals["icrc_failures"] += 1
            if b.opcode in d.DATA_OPCODES:
                q.data_packets += 1
                if b.rtx:
                    q.retransmissions += 1
                    continue
                if q.max_psn is None or wire.psn_cmp(b.psn, q.max_psn) > 0:
                    q.max_psn = b.psn
                    q.reorder["0"] += 1
                else:
                    q.reorder[_bucket((q.max_psn - b.psn) & wire.PSN_MASK)] += 1
            elif b.opcode == wire.OP_SACK:
                q.sacks += 1
            elif b.opcode == wire.OP_NACK:
                q.nacks[d.NACK_REASONS.get(b[d.NETH].reason, str(b[d.NETH].reason))] += 1
            elif b.opcode == wire.OP_RELIABILITY_PROBE:
                q.probes += 1
    return {"file": path, "packets": totals["packets"], "malformed": sum(malformed.values()),
            "malformed_reasons": dict(malformed), "truncated": totals["truncated"],
            "icrc_failures": totals["icrc_failures"], "other_packets": totals["other"],
            "planes": {str(k): v for k, v in sorted(planes.items())},
            "qps": [q.as_dict() for q in sorted(qps.values(), key=lambda q: -q.packets)]}


def decode_text(r: dict) -> str:
    out = [f"{r['file']}: {r['packets']} MRC packets, {r['malformed']} malformed, {r['truncated']} truncated, "
           f"{r['icrc_failures']} ICRC failures",
           "packets per plane: " + "  ".join(f"p{k}:{v}" for k, v in r["planes"].items())]
    for q in r["qps"]:
        nacks = ", ".join(f"{k} {v}" for k, v in q["nacks"].items()) or "none"
        reo = " ".join(f"{k}:{v}" for k, v in q["reorder_histogram"].items())
        out += [f"\n{q['qp']}: {q['packets']} packets, {q['bytes']} bytes, {q['data_packets']} data, "
                f"{q['retransmissions']} retransmitted, {q['sacks']} SACKs, NACKs: {nacks}, {q['probes']} probes, "
                f"{q['icrc_failures']} ICRC failures",
                "  planes: " + "  ".join(f"p{k}:{v}" for k, v in q["planes"].items())
                + f"   EVs used: {len(q['evs'])}",
                f"  reorder distance (PSNs behind the highest seen): {reo}"]
    return "\n".join(out)
