"""Wire format v1.1 (docs/protocol.md): every packet type round-trips through the C builder and parser."""
import os
import subprocess
import sys

import pytest
from mrc._dp import ffi, lib

from mrc import wire

CASES = {
    "WRITE_FIRST": dict(opcode=wire.OP_WRITE_FIRST, dqpn=0xABCDEF, psn=0xFFFFFE, va=0x1122334455667788,
                        rkey=0xDEADBEEF, dma_len=123456, msn=7, msn_rq=3),
    "WRITE_LAST_IMM_TS": dict(opcode=wire.OP_WRITE_LAST_IMM, dqpn=5, psn=9, va=64, rkey=1, dma_len=9000,
                              imm=0xCAFEBABE, flags=wire.BTH_TS | wire.BTH_RTX, ts=0x1234),
    "WRITE_ONLY_IMM": dict(opcode=wire.OP_WRITE_ONLY_IMM, dqpn=1, psn=0, va=0, rkey=2, dma_len=24, imm=1),
    "SACK": dict(opcode=wire.OP_SACK, dqpn=3, sack_flags=wire.SETH_PR | wire.SETH_ECN, ack_psn_offset=-5,
                 ev=0x30007, scid=1, dcid=2, cack_psn=0x00FFFF, mpr=8, sack_base_off=2,
                 bitmap=0x8000000000000001, ts_echo=77, ooo_cnt=3, cc_flags=0x81, rcv_bytes=0xABCDE),
    "NACK": dict(opcode=wire.OP_NACK, dqpn=3, nack_reason=wire.NACK_TRIMMED, ev=0x10002, scid=4, dcid=5,
                 nack_psn=0x123456, ts_echo=9),
    "PROBE": dict(opcode=wire.OP_RELIABILITY_PROBE, dqpn=3, probe_id=42, ev=0x70001, t1=123456789012),
    "EP_REQUEST": dict(opcode=wire.OP_ENDPOINT_REQUEST, probe_id=8, ep_op=wire.EP_PORT_STATUS,
                       port_bitmap=0xF7, rx_port=3, t1=0x12345678),
    "EP_RESPONSE": dict(opcode=wire.OP_ENDPOINT_RESPONSE, probe_id=8, ep_op=wire.EP_EV_PROBE, port_bitmap=0xFF,
                        rx_port=2, ev=0x20003, t1=1, t2=2),
}


@pytest.mark.parametrize("name", list(CASES))
def test_round_trip(name):
    fields = CASES[name]
    payload = b"payload!" * 3 if wire.OP_WRITE_FIRST <= fields["opcode"] <= wire.OP_WRITE_ONLY_IMM else b""
    pkt = wire.build(payload, **fields)
    d = wire.parse(pkt)
    for k, v in fields.items():
        assert d[k] == v, k
    assert d["payload"] == payload and d["icrc_ok"] and d["tver"] == wire.WIRE_VERSION


def test_header_sizes_match_protocol_doc():
    assert len(wire.build(opcode=wire.OP_SACK)) == 12 + 28 + 8 + 4
    assert len(wire.build(opcode=wire.OP_NACK)) == 12 + 20 + 4
    assert len(wire.build(b"ab", opcode=wire.OP_WRITE_ONLY_IMM)) == 12 + 4 + 16 + 4 + 2 + 4


def test_a_secured_packet_has_its_sech_after_bth_and_a_tag_for_the_icrc():
    """protocol.md section 8: TVer 2, SECH (mode, key id, port, reserved,
    packet number, header tag), the extension headers, the payload, a
    16-byte tag."""
    pkt = wire.build(b"ab", opcode=wire.OP_WRITE_ONLY_IMM, sec_mode=2, key_id=3, sec_port=5,
                     pn=0x0102030405060708, htag=0x1112131415161718)
    assert len(pkt) == 12 + 20 + 4 + 16 + 4 + 2 + 16 and pkt[1] & 0x0F == 2
    assert pkt[12:32] == bytes([2, 3, 5, 0]) + bytes(range(1, 9)) + bytes(range(0x11, 0x19))
    p = wire.parse(pkt)
    assert (p["sec_mode"], p["key_id"], p["sec_port"], p["pn"], p["htag"], p["payload"]) == (
        2, 3, 5, 0x0102030405060708, 0x1112131415161718, b"ab")
    assert lib.mrc_pkt_hdr_len(pkt, len(pkt)) == 12 + 20 + 4 + 16 + 4
    for bad in (bytes([3]), bytes([0])):  # a mode that is none of the two
        with pytest.raises(ValueError):
            wire.parse(pkt[:12] + bad + pkt[13:])
    with pytest.raises(ValueError):  # the reserved byte set
        wire.parse(pkt[:15] + b"\x01" + pkt[16:])


def test_icrc_is_crc32c_and_catches_corruption():
    assert wire.crc32c(b"123456789") == 0xE3069283
    pkt = bytearray(wire.build(b"data", opcode=wire.OP_WRITE_ONLY))
    assert wire.parse(bytes(pkt))["icrc_ok"]
    pkt[-6] ^= 1
    assert not wire.parse(bytes(pkt))["icrc_ok"]


def test_a_payload_that_disagrees_with_its_reth_is_malformed():
    """protocol.md 2: an ONLY packet carries its whole message; any other
    data packet stays inside its message."""
    with pytest.raises(ValueError):
        wire.parse(wire.build(b"x" * 28, opcode=wire.OP_WRITE_ONLY_IMM, dma_len=64))
    with pytest.raises(ValueError):
        wire.parse(wire.build(b"x" * 28, opcode=wire.OP_WRITE_MIDDLE, dma_len=20))
    assert wire.parse(wire.build(b"x" * 28, opcode=wire.OP_WRITE_MIDDLE, dma_len=4096))["payload_len"] == 28
    # a trimmed packet has lost its payload: its RETH still says the message's length
    t = wire.build(b"x" * 28, opcode=wire.OP_WRITE_ONLY)
    assert wire.parse(t[:12 + 4 + 16], trimmed=True)["dma_len"] == 28


def test_trimmed_packet_parses_without_payload_or_icrc():
    pkt = wire.build(b"x" * 100, opcode=wire.OP_WRITE_ONLY_IMM, imm=5)
    d = wire.parse(pkt[:12 + 4 + 16 + 4], trimmed=True)
    assert d["imm"] == 5 and d["payload_len"] == 0


@pytest.mark.parametrize("blob", [b"", b"\xca", bytes(11), bytes([0xCA, 2]) + bytes(40), bytes([0x01, 1]) + bytes(40)])
def test_malformed_is_an_error_not_a_crash(blob):
    with pytest.raises(ValueError):
        wire.parse(blob)


PROTOCOL_MD = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "protocol.md")


def protocol_table(header: str) -> list[list[str]]:
    """The rows of the table in docs/protocol.md whose header row starts with ``header``."""
    lines = open(PROTOCOL_MD).read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def test_the_header_says_what_the_protocol_doc_says():
    """docs/protocol.md is normative: its opcode, NACK reason, header size
    and DSCP tables are read here and the C header must agree."""
    opcodes = {int(r[0], 16): r[1] for r in protocol_table("| opcode | name |")}
    nacks = {int(r[0], 16): r[1] for r in protocol_table("| reason | name |")}
    sizes = {f"{r[0]}_LEN": int(r[1]) for r in protocol_table("| header | size |")}
    dscp = {r[1]: int(r[0]) for r in protocol_table("| DSCP | class |")}
    assert len(opcodes) == 11 and len(nacks) == 8 and len(sizes) == 14 and len(dscp) == 4
    assert wire.OPCODE_NAMES == opcodes
    assert wire.NACK_REASONS == nacks
    assert {k: wire.CONSTANTS[k] for k in sizes} == sizes
    assert dscp == {"DATA": wire.DSCP_DATA, "RTX": wire.DSCP_RTX, "CONTROL": wire.DSCP_CONTROL,
                    "TRIMMED": wire.DSCP_TRIMMED}
    assert wire.UDP_PORT == 4791
    # and the C names of each (mrc_opcode_name) agree with the table
    from mrc._dp import ffi

    assert {op: ffi.string(lib.mrc_opcode_name(op)).decode() for op in opcodes} == opcodes


def test_crc32c_instruction_path_equals_the_table_for_every_length():
    import random

    from mrc._dp import ffi

    r = random.Random(7)
    for n in list(range(0, 40)) + [767, 768, 769, 1000, 4096, 4099, 8999, 9000, 65537]:
        data = r.randbytes(n)
        for init in (0, 0x12345678):
            assert lib.mrc_crc32c(init, data, n) == lib.mrc_crc32c_sw(init, data, n), n
    # the folding path (512 bytes and more, where the CPU has VPCLMULQDQ): around its block
    # sizes (64 and 256 bytes), from every alignment
    buf = ffi.from_buffer(r.randbytes(5000))
    for n in [511, 512, 513, 575, 576, 577, 767, 1023, 1024, 1025, 1279, 1280, 4160, 4172]:
        for off in range(0, 64, 7):
            init = r.getrandbits(32)
            assert lib.mrc_crc32c(init, buf + off, n) == lib.mrc_crc32c_sw(init, buf + off, n), (n, off)
    assert lib.mrc_crc32c(0, b"123456789", 9) == 0xE3069283  # the standard check value


@pytest.mark.parametrize("value", ["1", "0", "", "yes", "x" * 4096])
def test_crc32c_with_the_folding_switched_off_by_any_value_is_the_same_crc(value):
    """MRC_CRC_NO_FOLD (the control for a before/after measurement) turns the
    folding off whatever it holds, once per process; every length still gets
    the table's CRC."""
    code = ("import random; from mrc._dp import lib; r = random.Random(3)\n"
            "for n in (0, 9, 511, 512, 4096, 9000):\n"
            "    d = r.randbytes(n)\n"
            "    assert lib.mrc_crc32c(7, d, n) == lib.mrc_crc32c_sw(7, d, n), n\n"
            "print('ok')")
    env = dict(os.environ, MRC_CRC_NO_FOLD=value)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


@pytest.mark.parametrize("n", [0, 1, 63, 255, 256, 511, 512, 513, 4096, 4097, 8192 + 7])
@pytest.mark.parametrize("at", [0, 1, 3])
def test_the_fused_copy_gives_the_crc_and_the_sum_of_what_it_copied(n, at):
    """mrc_crc32c_copy(_sum): the copy, the CRC and the ones'-complement sum
    in one pass equal a plain copy, mrc_crc32c and the sum over the bytes,
    at any length and alignment; nothing past n is written."""
    import struct

    src = bytes((i * 151 + 17) & 0xFF for i in range(n + 8))
    dst = bytearray(b"\xAA" * (n + 16))
    s = ffi.from_buffer(src)
    d = ffi.from_buffer(dst)
    total = ffi.new("uint64_t *", 5)
    crc = lib.mrc_crc32c_copy_sum(0x1234, d + at, s + at, n, total)
    assert bytes(dst[at:at + n]) == src[at:at + n] and dst[at + n:] == b"\xAA" * (16 - at)
    assert crc == lib.mrc_crc32c(0x1234, src[at:], n)
    body = src[at:at + n] + (b"\0" if n % 2 else b"")
    want = 5 + sum(struct.unpack(f"<{len(body) // 2}H", body))
    fold = lambda x: x if x < 0x10000 else fold((x & 0xFFFF) + (x >> 16))  # noqa: E731
    assert fold(total[0]) == fold(want)
    dst2 = bytearray(n + 1)
    assert lib.mrc_crc32c_copy(7, ffi.from_buffer(dst2), s + at, n) == lib.mrc_crc32c(7, src[at:], n)
    assert bytes(dst2[:n]) == src[at:at + n]


def test_the_pass_bench_refuses_what_it_cannot_time():
    buf = ffi.new("uint8_t[]", 4096)
    for kind, span, length in [(9, 4096, 512), (lib.MRC_PASS_COPY, 100, 512), (lib.MRC_PASS_FUSED, 4096, 0)]:
        assert lib.mrc_bench_pass(kind, buf, buf, span, length, 1 << 20) == -22
    assert lib.mrc_bench_pass(lib.MRC_PASS_FUSED, buf, buf + 2048, 2048, 1024, 1 << 16) >= 0


def _frame(payload: bytes, ulen: int, nexthdr: int = 17, ethertype: bytes = b"\x86\xdd") -> bytes:
    import socket as s
    import struct as st

    ip = st.pack("!IHBB", 6 << 28, 8 + len(payload), nexthdr, 64) + s.inet_pton(s.AF_INET6, "fc00:0:b000::") \
        + s.inet_pton(s.AF_INET6, "fc00:0:1000:b001::")
    return bytes(12) + ethertype + ip + st.pack("!HHHH", 0xC000, 4791, ulen, 0) + payload


def test_cut_buffer_cuts_a_buffer_into_its_segments_with_their_own_lengths_and_checksums():
    import struct as st

    segs = [bytes([i]) * 100 for i in range(3)] + [b"\x09" * 40]
    out = wire.cut_buffer(_frame(b"".join(segs), 108))
    assert len(out) == 4 and [f[62:] for f in out] == segs
    for f, seg in zip(out, segs, strict=True):
        assert st.unpack_from("!H", f, 18)[0] == 8 + len(seg) == st.unpack_from("!H", f, 58)[0]
        assert st.unpack_from("!H", f, 60)[0] == wire.udp6_checksum("fc00:0:b000::", "fc00:0:b001::", f[54:])


@pytest.mark.parametrize("frame", [
    b"", b"\x00" * 61,                                        # too short for the headers
    _frame(b"x" * 300, 308),                                  # one datagram: its UDP length is the payload's
    _frame(b"x" * 300, 8), _frame(b"x" * 300, 0),             # no segment size, a length below the header
    _frame(b"x" * 300, 60000),                                # a UDP length beyond the frame
    _frame(b"x" * 300, 108, nexthdr=6),                       # not UDP
    _frame(b"x" * 300, 108, ethertype=b"\x08\x00"),           # not IPv6
])
def test_cut_buffer_leaves_any_other_frame_whole(frame):
    assert wire.cut_buffer(frame) == [frame]
