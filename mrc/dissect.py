"""scapy layers for mrc wire v1.1 (docs/protocol.md section 2).

Every header has its own layer, with the protocol doc's field names: BTH,
METH, TSETH, RETH, ImmDt, SETH, CCSTATE, NETH, PETH, ERTH, EETH and ICRC.
BTH is bound to UDP destination port 4791; the ICRC (the last 4 bytes) is a
layer of its own, checked by :func:`icrc_ok` and filled in when a packet is
built with ``icrc=None``.

scapy is GPL, so this module is an optional extra (``pip install mrc[dissect]``):
``import mrc`` never imports it.

>>> from scapy.all import IPv6, UDP                           # doctest: +SKIP
>>> from mrc.dissect import BTH, METH, RETH, ICRC
>>> raw = bytes(BTH(opcode="WRITE_ONLY", dest_qp=5, psn=7) / METH() / RETH(rkey=0x100, dma_len=3)
...             / b"abc" / ICRC())
>>> BTH(raw)[BTH].psn, icrc_ok(BTH(raw))
(7, True)
"""

from __future__ import annotations

try:
    from scapy.fields import (
        BitEnumField,
        BitField,
        ByteEnumField,
        ByteField,
        IntField,
        LongField,
        ShortField,
        SignedShortField,
        ThreeBytesField,
        XByteField,
        XIntField,
        XLongField,
        XShortField,
        XStrFixedLenField,
    )
    from scapy.layers.inet import UDP
    from scapy.layers.inet6 import IPv6
    from scapy.packet import Packet, Raw, bind_layers
except ImportError as e:  # pragma: no cover - depends on the extra being installed
    raise ImportError("mrc.dissect needs scapy: pip install 'mrc[dissect]' (scapy is GPL, so it is optional)") from e

from mrc import wire
from mrc._dp import lib

OPCODES = dict(wire.OPCODE_NAMES)
NACK_REASONS = dict(wire.NACK_REASONS)
EP_OPS = {wire.EP_EV_PROBE: "EV_PROBE", wire.EP_PORT_STATUS: "PORT_STATUS"}
DATA_OPCODES = {v for v in OPCODES if lib.mrc_opcode_is_data(v)}
IMM_OPCODES = {v for v in OPCODES if lib.mrc_opcode_has_imm(v)}


def crc32c(data: bytes) -> int:
    """CRC32C, the ICRC's polynomial (computed by the C module)."""
    return wire.crc32c(bytes(data))


class ICRC(Packet):
    """The invariant CRC: CRC32C over BTH through the end of the payload."""

    name = "MRC ICRC"
    fields_desc = [XIntField("icrc", None)]

    def extract_padding(self, s):
        """The ICRC ends the packet: nothing follows it."""
        return b"", s


class TAG(Packet):
    """The AES-GCM tag that ends a secured packet (protocol.md section 8)."""

    name = "MRC TAG"
    fields_desc = [XStrFixedLenField("tag", b"\0" * 16, 16)]

    def extract_padding(self, s):
        """The tag ends the packet: nothing follows it."""
        return b"", s


def _next_header(opcode: int):
    """The extension header that follows BTH (or SECH), by opcode."""
    if opcode in DATA_OPCODES:
        return METH
    return {wire.OP_SACK: SETH, wire.OP_NACK: NETH, wire.OP_RELIABILITY_PROBE: PETH,
            wire.OP_ENDPOINT_REQUEST: ERTH, wire.OP_ENDPOINT_RESPONSE: EETH}.get(opcode, Raw)


class BTH(Packet):
    name = "MRC BTH"
    fields_desc = [
        ByteEnumField("opcode", wire.OP_WRITE_ONLY, OPCODES),
        BitField("se", 0, 1),
        BitField("m", 0, 1),
        BitField("padcnt", 0, 2),
        BitField("tver", wire.WIRE_VERSION, 4),
        XShortField("pkey", 0),
        ByteField("reserved", 0),
        ThreeBytesField("dest_qp", 0),
        BitField("ack_req", 0, 1),
        BitField("rtx", 0, 1),
        BitField("ts", 0, 1),
        BitField("reserved2", 0, 5),
        ThreeBytesField("psn", 0),
    ]

    def trimmed(self) -> bool:
        """A switch cut this packet (DSCP TRIMMED in the IPv6 header): no payload, no ICRC."""
        ip = self.underlayer.underlayer if self.underlayer is not None else None
        return isinstance(ip, IPv6) and (ip.tc >> 2) == wire.DSCP_TRIMMED

    def secured(self) -> bool:
        """TVer 2: a SECH follows, and a tag ends the packet instead of the ICRC."""
        return self.tver == wire.CONSTANTS["WIRE_SECURED"]

    def dissect(self, s):
        """Dissect, keeping the last bytes for the ICRC (or a secured packet's tag)."""
        s = self.pre_dissect(s)
        s = self.do_dissect(s)
        s = self.post_dissect(s)
        n = wire.CONSTANTS["TAG_LEN"] if self.secured() else wire.ICRC_LEN
        if not self.trimmed() and len(s) >= n:
            body, end = s[:-n], s[-n:]
        else:
            body, end = s, b""
        if body:
            self.do_dissect_payload(body)
        if end:
            self.add_payload((TAG if self.secured() else ICRC)(end, _internal=1, _underlayer=self))

    def guess_payload_class(self, payload):
        """SECH in a secured packet, else the extension header, by opcode."""
        return SECH if self.secured() else _next_header(self.opcode)

    def post_build(self, pkt, pay):
        """Fill in the ICRC when it was left as None."""
        last = self.lastlayer()
        if isinstance(last, ICRC) and last.icrc is None and len(pay) >= wire.ICRC_LEN:
            body = pkt + pay[: -wire.ICRC_LEN]
            pay = pay[: -wire.ICRC_LEN] + crc32c(body).to_bytes(4, "big")
        return pkt + pay

    def mysummary(self):
        """One line: opcode, destination QP, PSN."""
        return self.sprintf("MRC %BTH.opcode% qp=%BTH.dest_qp% psn=%BTH.psn%")


class SECH(Packet):
    """A secured packet's security header: mode, key id, the port (plane) it
    was sealed for, packet number, a data packet's header tag."""

    name = "MRC SECH"
    fields_desc = [ByteEnumField("mode", 1, {1: "AUTH", 2: "ENCRYPT"}), ByteField("key_id", 0),
                   ByteField("port", 0), ByteField("reserved", 0), LongField("pn", 0), XLongField("htag", 0)]

    def guess_payload_class(self, payload):
        """The extension header, by the BTH's opcode."""
        b = _bth(self)
        return _next_header(b.opcode) if b is not None else Raw


def _bth(pkt: Packet) -> BTH | None:
    while pkt is not None and not isinstance(pkt, BTH):
        pkt = pkt.underlayer
    return pkt


class METH(Packet):
    name = "MRC METH"
    fields_desc = [ShortField("rq_msn", 0), ShortField("msn", 0)]

    def guess_payload_class(self, payload):
        """TSETH when the BTH says a timestamp follows, else RETH."""
        b = _bth(self)
        return TSETH if b is not None and b.ts else RETH


class TSETH(Packet):
    name = "MRC TSETH"
    fields_desc = [IntField("timestamp", 0)]

    def guess_payload_class(self, payload):
        """RETH follows the timestamp."""
        return RETH


class RETH(Packet):
    name = "MRC RETH"
    fields_desc = [XLongField("va", 0), XIntField("rkey", 0), IntField("dma_len", 0)]

    def guess_payload_class(self, payload):
        """ImmDt for a WRITE with immediate, else the payload."""
        b = _bth(self)
        return ImmDt if b is not None and b.opcode in IMM_OPCODES else Raw


class ImmDt(Packet):
    name = "MRC ImmDt"
    fields_desc = [XIntField("imm", 0)]

    def guess_payload_class(self, payload):
        """The payload follows the immediate."""
        return Raw


class SETH(Packet):
    name = "MRC SETH"
    fields_desc = [
        BitField("pr", 0, 1),
        BitField("flags_rsv1", 0, 1),
        BitEnumField("m", 0, 2, {0: "none", 1: "skip_once", 2: "always_skip"}),
        BitField("flags_rsv2", 0, 11),
        BitField("ecn", 0, 1),
        SignedShortField("ack_psn_offset", 0),
        XIntField("ev", 0),
        ShortField("scid", 0),
        ShortField("dcid", 0),
        ByteField("reserved", 0),
        ThreeBytesField("cack_psn", 0),
        BitField("cc_type", 0, 4),
        BitField("cc_flags", 0, 4),
        ByteField("mpr", 0),
        SignedShortField("sack_base_off", 2),
        XLongField("bitmap", 0),
    ]

    def guess_payload_class(self, payload):
        """CCSTATE follows the SACK header."""
        return CCSTATE

    def acked(self) -> list[int]:
        """The PSNs this SACK says were received beyond the cumulative one."""
        base = (self.cack_psn + self.sack_base_off) & wire.PSN_MASK
        return [(base + i) & wire.PSN_MASK for i in range(64) if self.bitmap >> i & 1]


class CCSTATE(Packet):
    name = "MRC CCSTATE"
    fields_desc = [
        ShortField("ts_echo", 0),
        ShortField("ooo_cnt", 0),
        BitField("restore_cwnd", 0, 1),
        BitField("penalty", 0, 7),
        ThreeBytesField("rcv_bytes", 0),
    ]


class NETH(Packet):
    name = "MRC NETH"
    fields_desc = [
        XShortField("flags", 0),
        ByteEnumField("reason", wire.NACK_TRIMMED, NACK_REASONS),
        ByteField("vendor", 0),
        XIntField("ev", 0),
        ShortField("scid", 0),
        ShortField("dcid", 0),
        ByteField("reserved", 0),
        ThreeBytesField("nack_psn", 0),
        XByteField("cc", 0),
        ByteField("reserved2", 0),
        ShortField("ts_echo", 0),
    ]


class PETH(Packet):
    name = "MRC PETH"
    fields_desc = [IntField("probe_id", 0), XIntField("ev", 0), LongField("t1", 0)]


class ERTH(Packet):
    name = "MRC ERTH"
    fields_desc = [IntField("probe_id", 0), ByteEnumField("op", wire.EP_PORT_STATUS, EP_OPS), ByteField("reserved", 0),
                   ShortField("port", 0), XIntField("port_bitmap", 0), IntField("t1", 0)]


class EETH(Packet):
    name = "MRC EETH"
    fields_desc = [IntField("probe_id", 0), ByteEnumField("op", wire.EP_EV_PROBE, EP_OPS), ByteField("reserved", 0),
                   ShortField("port", 0), XIntField("port_bitmap", 0), XIntField("ev", 0), LongField("t1", 0),
                   LongField("t2", 0), IntField("service_time", 0)]


for _layer in (ERTH, EETH, PETH, NETH, CCSTATE):
    _layer.guess_payload_class = lambda self, payload: Raw  # nothing follows them

bind_layers(UDP, BTH, dport=wire.UDP_PORT)
HEADERS = (BTH, METH, TSETH, RETH, ImmDt, SETH, CCSTATE, NETH, PETH, ERTH, EETH, ICRC)


# ------------------------------------------------------------------ helpers
def icrc_ok(pkt: Packet) -> bool | None:
    """True if the ICRC matches, False if not, None if there is none (trimmed or truncated)."""
    b = pkt[BTH] if BTH in pkt else None
    if b is None or ICRC not in b:
        return None
    raw = bytes(b)
    return crc32c(raw[: -wire.ICRC_LEN]) == b[ICRC].icrc


def ev_of(pkt: Packet) -> int | None:
    """The EV a packet travelled on: IPv6 flow label (low 20 bits) plus the UDP
    source port's low 14 bits as EV bits 18..31 (protocol.md section 2)."""
    if IPv6 not in pkt or UDP not in pkt:
        return None
    return wire.ev_from_wire(pkt[IPv6].fl, pkt[UDP].sport)
