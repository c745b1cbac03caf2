"""Wire-format constants of mrc wire v1, read from the compiled C module.

Nothing here is hand-copied: every name ``MRC_X`` of csrc/include/mrc_wire.h
appears as ``X`` (``wire.OP_SACK``, ``wire.NACK_TRIMMED``, ``wire.UDP_PORT``).

>>> from mrc import wire
>>> hex(wire.OP_WRITE_ONLY)
'0xca'
"""

from __future__ import annotations

import socket
import struct

from mrc import usid
from mrc._dp import ffi, lib

_names = [n for n in dir(lib) if n.startswith("MRC_") and isinstance(getattr(lib, n), int)]
globals().update({n[4:]: getattr(lib, n) for n in _names})
CONSTANTS: dict[str, int] = {n[4:]: getattr(lib, n) for n in _names}



def _names(name_of) -> dict[int, str]:
    """Every byte value C's name table names (mrc_opcode_name, mrc_nack_reason_name): one table."""
    return {v: ffi.string(name_of(v)).decode() for v in range(256) if name_of(v) != ffi.NULL}


OPCODE_NAMES = _names(lib.mrc_opcode_name)
NACK_REASONS = _names(lib.mrc_nack_reason_name)


# --------------------------------------------------------------- EV fields
# An EV is plane << 16 | entropy in this implementation (protocol.md 2 leaves
# the EV-to-path mapping to the sender); on the wire the IPv6 flow label holds
# EV bits 0-19 and the UDP source port 0xC000 | bits 18-31. These are the
# Python twins of csrc/wire/hdr.h's accessors, with the same constants; no other
# module shifts or masks an EV.

def ev_make(plane: int, entropy: int) -> int:
    """The EV of ``entropy`` on ``plane``.

    >>> hex(ev_make(2, 5))
    '0x20005'
    """
    return plane << lib.MRC_EV_PLANE_SHIFT | (entropy & lib.MRC_EV_ENTROPY_MASK)


def ev_plane(ev: int) -> int:
    """The plane an EV travels on."""
    return ev >> lib.MRC_EV_PLANE_SHIFT


def ev_entropy(ev: int) -> int:
    """An EV's entropy (which path of the plane)."""
    return ev & lib.MRC_EV_ENTROPY_MASK


def ev_flow_label(ev: int) -> int:
    """The IPv6 flow label an EV sets."""
    return ev & lib.MRC_EV_FLOW_MASK


def ev_udp_sport(ev: int) -> int:
    """The UDP source port an EV sets."""
    return lib.MRC_EV_SPORT_BASE | ((ev >> lib.MRC_EV_SPORT_SHIFT) & lib.MRC_EV_SPORT_MASK)


def ev_from_wire(flow_label: int, sport: int) -> int:
    """The EV a packet travelled on, from its flow label and UDP source port.

    >>> hex(ev_from_wire(ev_flow_label(0x7ABC1005), ev_udp_sport(0x7ABC1005)))
    '0x7abc1005'
    """
    high = ((sport & lib.MRC_EV_SPORT_MASK) << lib.MRC_EV_SPORT_SHIFT) & ~lib.MRC_EV_FLOW_MASK & 0xFFFFFFFF
    return (flow_label & lib.MRC_EV_FLOW_MASK) | high


def ev_name(ev: int) -> str:
    """``PLANE/ENTROPY``, as ``mrc ctl`` writes an EV."""
    return f"{ev_plane(ev)}/{ev_entropy(ev)}"


def psn_cmp(a: int, b: int) -> int:
    """Serial compare of 24-bit PSNs (the C function): <0, 0 or >0."""
    return lib.mrc_psn_cmp(a, b)


def crc32c(data: bytes, crc: int = 0) -> int:
    """CRC32C of ``data`` (continuing ``crc``)."""
    return lib.mrc_crc32c(crc, data, len(data))


def udp6_checksum(src: str, dst: str, seg: bytes) -> int:
    """The UDP checksum of ``seg`` (UDP header and payload) between IPv6
    addresses ``src`` and ``dst``: RFC 8200 8.1, over the pseudo-header and
    the segment with its checksum field read as zero.

    >>> hex(udp6_checksum("::1", "::1", bytes(8)))
    '0xffe4'
    """
    data = (socket.inet_pton(socket.AF_INET6, src) + socket.inet_pton(socket.AF_INET6, dst)
            + struct.pack("!I3xB", len(seg), 17) + seg[:6] + b"\0\0" + seg[8:])
    data += b"\0" * (len(data) % 2)
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s & 0xFFFF) or 0xFFFF


def cut_buffer(frame: bytes) -> list[bytes]:
    """An Ethernet frame cut as the kernel cuts a buffer of k MRC packets
    (UDP_SEGMENT: docs/engine.md, "Buffers of k packets"). Such a buffer
    carries its segments' UDP length, shorter than its UDP payload: each
    segment of that many bytes (the last may be shorter) becomes a frame with
    the same Ethernet, IPv6 and UDP headers, its own lengths and its UDP
    checksum over the final destination. Any other frame comes back alone."""
    eth, ip = 14, 14 + 40
    if len(frame) < ip + 8 or frame[12:14] != b"\x86\xdd" or frame[eth + 6] != 17:
        return [frame]
    ulen = struct.unpack_from("!H", frame, ip + 4)[0]
    payload = frame[ip + 8:]
    seg = ulen - 8
    if seg <= 0 or seg >= len(payload):
        return [frame]
    src = socket.inet_ntop(socket.AF_INET6, frame[eth + 8:eth + 24])
    dst = usid.final(socket.inet_ntop(socket.AF_INET6, frame[eth + 24:eth + 40]))
    out = []
    for off in range(0, len(payload), seg):
        chunk = payload[off:off + seg]
        udp = frame[ip:ip + 4] + struct.pack("!HH", 8 + len(chunk), 0) + chunk
        udp = udp[:6] + struct.pack("!H", udp6_checksum(src, dst, udp)) + udp[8:]
        out.append(frame[:eth + 4] + struct.pack("!H", 8 + len(chunk)) + frame[eth + 6:ip] + udp)
    return out


PKT_FIELDS = [name for name, _ in ffi.typeof("struct mrc_pkt").fields]


def build(payload: bytes = b"", **fields) -> bytes:
    """Build a packet from BTH to ICRC. ``fields`` are ``struct mrc_pkt``
    members; ``dma_len`` defaults to the payload's length.

    >>> len(build(opcode=OP_NACK, nack_reason=NACK_TRIMMED))
    36
    """
    p = ffi.new("struct mrc_pkt *")
    for k, v in fields.items():
        setattr(p, k, v)
    if payload:
        p.payload_len = len(payload)
    if "dma_len" not in fields:
        p.dma_len = len(payload)  # a message of this one packet, unless told otherwise
    out = ffi.new("uint8_t[]", len(payload) + 256)
    n = lib.mrc_pkt_build(p, payload, out, len(out))
    if n < 0:
        raise ValueError(f"cannot build packet: {fields} (errno {-n})")
    return bytes(ffi.buffer(out, n))


def parse(data: bytes, trimmed: bool = False) -> dict:
    """Parse BTH..ICRC into a dict of ``struct mrc_pkt`` fields (payload included)."""
    p = ffi.new("struct mrc_pkt *")
    rc = lib.mrc_pkt_parse(data, len(data), int(trimmed), p)
    if rc < 0:
        raise ValueError(f"malformed MRC packet (errno {-rc}, {len(data)} bytes)")
    d = {k: getattr(p, k) for k in PKT_FIELDS}
    d["payload"] = data[p.payload_off:p.payload_off + p.payload_len] if p.payload_len else b""
    d["icrc_ok"] = bool(lib.mrc_pkt_icrc_ok(data, len(data))) if not trimmed else None
    return d
