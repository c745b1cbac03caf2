"""``mrc decode``: a per-QP summary of a pcap of MRC packets, with the scapy
layers of :mod:`mrc.dissect` (the ``dissect`` extra: scapy). Works on any
capture: hosts are named when a topology (mrc.paths) describes them.

    mrc decode h0p2.pcap --json
    mrc decode trace.pcap --topology lab.json
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from mrc import wire
from mrc.errors import MrcError, UsageError
from mrc.paths import PathResolver

REORDER_BUCKETS = ["0", "1", "2-3", "4-7", "8-15", "16-31", "32+"]


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
        """The QP's summary as a dict."""
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
    """Why an MRC packet does not follow wire v1.3 (None if it does): TVer 1,
    or 2 for a secured packet (its SECH; its tag is the receiver's to check)."""
    from mrc import dissect as d

    b = pkt[d.BTH]
    if len(bytes(b)) < wire.BTH_LEN:
        return "short"
    if b.tver not in (wire.WIRE_VERSION, wire.CONSTANTS["WIRE_SECURED"]):
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


def _tally(q: QPSummary, b, d) -> None:
    """What one well-formed packet (its BTH ``b``) adds to its QP's counts: data and its order (a
    retransmission apart), SACKs, NACKs by reason, probes."""
    if b.opcode in d.DATA_OPCODES:
        q.data_packets += 1
        if b.rtx:
            q.retransmissions += 1
        elif q.max_psn is None or wire.psn_cmp(b.psn, q.max_psn) > 0:
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


#: the first four bytes of a pcap (either byte order, micro- or nanoseconds) and of a pcapng
CAPTURE_MAGICS = {bytes.fromhex(m) for m in ("a1b2c3d4", "d4c3b2a1", "a1b23c4d", "4d3cb2a1", "0a0d0d0a")}


def check_capture(path: str) -> None:
    """A readable pcap or pcapng file, or a UsageError that says what ``path`` is instead."""
    hint = "give a file that tcpdump or `mrc capture NODE -w FILE` wrote"
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except IsADirectoryError:
        raise UsageError(f"{path} is a directory: {hint}") from None
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror}") from None
    if not head:
        raise UsageError(f"{path} is empty: {hint}")
    if head not in CAPTURE_MAGICS:
        raise UsageError(f"{path} is not a pcap or pcapng capture (it starts {head.hex()}): {hint}")


def decode(path: str, resolver: PathResolver | None = None) -> dict:
    """Summarise a capture: totals, and per QP (sender host -> receiver host and
    destination QP) packets, bytes, retransmissions, EVs, planes, SACK and
    NACK counts, reordering, ICRC failures. Keys of the result: ``packets``,
    ``buffers`` (buffers of k packets captured whole, before the kernel cut
    them: each counts as its k packets), ``malformed``, ``truncated``,
    ``icrc_failures``, ``planes``, ``qps``.
    Hosts are named by the resolver's topology (else shown as addresses);
    the plane is the EV's, as this implementation's senders lay EVs out."""
    try:
        from scapy.utils import PcapReader

        from mrc import dissect  # noqa: F401 (its layers, bound to UDP 4791, dissect what follows)
    except ImportError as e:
        raise MrcError(f"mrc decode needs scapy: pip install 'mrc[dissect]' ({e})") from None
    from scapy.layers.inet import UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether

    resolver = resolver or PathResolver()

    def host(address: str) -> str:
        return resolver.host_of(address) or address

    qps: dict[str, QPSummary] = {}
    totals = collections.Counter()
    planes = collections.Counter()
    malformed = collections.Counter()
    from scapy.error import Scapy_Exception

    check_capture(path)
    try:
        reader = PcapReader(path)
    except (OSError, ValueError, Scapy_Exception) as e:
        raise UsageError(f"cannot read {path}: {e.strerror if isinstance(e, OSError) else e}") from None
    with reader:
        for captured in reader:
            if UDP not in captured or captured[UDP].dport != wire.UDP_PORT or IPv6 not in captured:
                totals["other"] += 1
                continue
            wirelen = getattr(captured, "wirelen", None) or len(captured)
            frames = wire.cut_buffer(bytes(captured)) if wirelen <= len(captured) else [bytes(captured)]
            totals["buffers"] += len(frames) > 1  # a buffer of k packets, captured whole
            for pkt in (captured,) if len(frames) == 1 else map(Ether, frames):
                _one(pkt, wirelen if len(frames) == 1 else len(pkt), qps, totals, planes, malformed, host)
    return {"file": path, "packets": totals["packets"], "buffers": totals["buffers"],
            "malformed": sum(malformed.values()),
            "malformed_reasons": dict(malformed), "truncated": totals["truncated"],
            "icrc_failures": totals["icrc_failures"], "other_packets": totals["other"],
            "planes": {str(k): v for k, v in sorted(planes.items())},
            "qps": [q.as_dict() for q in sorted(qps.values(), key=lambda q: -q.packets)]}


def _one(pkt, wirelen: int, qps: dict, totals, planes, malformed, host) -> None:
    """Count one MRC packet of a capture into decode's tallies."""
    from scapy.layers.inet import UDP
    from scapy.layers.inet6 import IPv6

    from mrc import dissect as d

    totals["packets"] += 1
    if wirelen > len(pkt):
        totals["truncated"] += 1  # snaplen cut it: the headers may be there, the ICRC is not
        return
    if d.BTH not in pkt:
        malformed["short"] += 1
        return
    why = malformed_reason(pkt)
    if why:
        malformed[why] += 1
        return
    b, ip = pkt[d.BTH], pkt[IPv6]
    ev = d.ev_of(pkt)
    key = f"{host(ip.src)}->{host(ip.dst)} qp {b.dest_qp}"
    q = qps.get(key) or qps.setdefault(key, QPSummary(key))
    q.packets += 1
    q.bytes += len(bytes(pkt[UDP].payload))
    plane = wire.ev_plane(ev)
    q.evs[ev] += 1
    q.planes[plane] += 1
    planes[plane] += 1
    if d.icrc_ok(pkt) is False:
        q.icrc_failures += 1
        totals["icrc_failures"] += 1
    _tally(q, b, d)


def decode_text(r: dict) -> str:
    """A decode result as text, QP by QP."""
    out = [f"{r['file']}: {r['packets']} MRC packets, {r['malformed']} malformed, {r['truncated']} truncated, "
           f"{r['icrc_failures']} ICRC failures"
           + (f" ({r['buffers']} buffers of several packets, captured whole, cut)" if r.get("buffers") else ""),
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
