"""The seg6 route encoders, decoded independently of the encoder."""
import socket
import struct

import pytest

from mrc.fabric import nl


def attrs(buf):
    out, off = [], 0
    while off + 4 <= len(buf):
        length, kind = struct.unpack_from("=HH", buf, off)
        out.append((kind & 0x3FFF, kind & nl.NLA_F_NESTED, buf[off + 4:off + length]))
        off += (length + 3) & ~3
    return out


def route(msg):
    length, mtype, flags, seq, pid = struct.unpack_from("=IHHII", msg)
    assert length == len(msg) and mtype == nl.RTM_NEWROUTE
    family, dst_len = msg[16], msg[17]
    return family, dst_len, {k: v for k, _, v in attrs(msg[28:])}, attrs(msg[28:])


def test_end_next_csid_carries_the_flavors_attribute():
    et, enc = nl.end_next_csid(32, 16)
    msg = nl.route_message("fc00:0:1000::/48", oif=7, encap_type=et, encap=enc)
    family, dst_len, a, _ = route(msg)
    assert family == socket.AF_INET6 and dst_len == 48
    assert a[nl.RTA_DST] == socket.inet_pton(socket.AF_INET6, "fc00:0:1000::")
    assert struct.unpack("=I", a[nl.RTA_OIF])[0] == 7
    assert struct.unpack("=H", a[nl.RTA_ENCAP_TYPE])[0] == nl.LWTUNNEL_ENCAP_SEG6_LOCAL
    inner = {k: v for k, _, v in attrs(a[nl.RTA_ENCAP])}
    assert struct.unpack("=I", inner[nl.SEG6_LOCAL_ACTION])[0] == nl.SEG6_LOCAL_ACTION_END
    flv = {k: v for k, _, v in attrs(inner[nl.SEG6_LOCAL_FLAVORS])}
    assert struct.unpack("=I", flv[1])[0] == 1 << 4  # NEXT-C-SID
    assert flv[2][0] == 32 and flv[3][0] == 16


def test_encap_red_has_mode_3_and_the_segment():
    et, enc = nl.encap_red("fc00:0:1000:2001:1001:b001:d6:0")
    msg = nl.route_message("fd6d:1::/32", oif=3, encap_type=et, encap=enc, table=101,
                           prefsrc="fd6d:0:1::1")
    _, dst_len, a, _ = route(msg)
    assert dst_len == 32
    assert struct.unpack("=I", a[nl.RTA_TABLE])[0] == 101
    srh = {k: v for k, _, v in attrs(a[nl.RTA_ENCAP])}[nl.SEG6_IPTUNNEL_SRH]
    mode = struct.unpack_from("=i", srh)[0]
    assert mode == nl.SEG6_IPTUN_MODE_ENCAP_RED
    assert srh[4 + 2] == 4  # SRH type 4
    assert srh[4 + 8:4 + 24] == socket.inet_pton(socket.AF_INET6, "fc00:0:1000:2001:1001:b001:d6:0")


def test_end_dt6_table():
    et, enc = nl.end_dt6(255)
    inner = {k: v for k, _, v in attrs(attrs(enc)[0][2])}
    assert struct.unpack("=I", inner[nl.SEG6_LOCAL_ACTION])[0] == nl.SEG6_LOCAL_ACTION_END_DT6
    assert struct.unpack("=I", inner[nl.SEG6_LOCAL_TABLE])[0] == 255


def _newlink(name: bytes, flags: int, oper: int, stats: tuple | None, seq: int = 1) -> bytes:
    body = struct.pack("=BBHiII", 0, 0, 1, 7, flags, 0)
    attrs = nl._attr(nl.IFLA_IFNAME, name + b"\0") + nl._u8(nl.IFLA_OPERSTATE, oper)
    if stats is not None:
        attrs += nl._attr(nl.IFLA_STATS64, struct.pack("=4Q", *stats) + bytes(8 * 20))
    return struct.pack("=IHHII", 16 + len(body + attrs), nl.RTM_NEWLINK, 2, seq, 0) + body + attrs


def test_link_dump_is_a_getlink_dump_request():
    msg = nl.link_dump_message(seq=9)
    length, mtype, flags, seq, _ = struct.unpack_from("=IHHII", msg)
    assert (length, mtype, seq) == (len(msg), nl.RTM_GETLINK, 9)
    assert flags & nl.NLM_F_DUMP == nl.NLM_F_DUMP and flags & nl.NLM_F_REQUEST


def test_parse_links_reads_state_and_counters_across_messages():
    part1 = _newlink(b"s0", nl.IFF_UP, nl.IF_OPER_UP, (1, 2, 3, 4)) + _newlink(b"h1", nl.IFF_UP, 2, (5, 6, 7, 8))
    out, done = nl.parse_links(part1)
    assert not done
    assert out["s0"] == {"up": True, "rx_packets": 1, "tx_packets": 2, "rx_bytes": 3, "tx_bytes": 4}
    assert out["h1"]["up"] is False  # administratively up, operationally down: a failed link
    done_msg = struct.pack("=IHHIIi", 20, nl.NLMSG_DONE, 2, 1, 0, 0)
    out, done = nl.parse_links(_newlink(b"l0", 0, nl.IF_OPER_UP, None) + done_msg, out)
    assert done and out["l0"]["up"] is False and out["l0"]["rx_bytes"] == 0 and set(out) == {"s0", "h1", "l0"}


def test_parse_links_survives_truncated_and_hostile_input():
    good = _newlink(b"s0", nl.IFF_UP, nl.IF_OPER_UP, (1, 2, 3, 4))
    for cut in range(len(good)):
        nl.parse_links(good[:cut])  # never raises, never loops
    zero_len = struct.pack("=IHHII", 0, nl.RTM_NEWLINK, 2, 1, 0) + bytes(64)
    assert nl.parse_links(zero_len) == ({}, False)
    bad_attr = good[:32] + struct.pack("=HH", 0, nl.IFLA_IFNAME) + bytes(8)  # an attribute of length 0
    nl.parse_links(bad_attr)
    err = struct.pack("=IHHIIi", 20, nl.NLMSG_ERROR, 0, 1, 0, -1)
    with pytest.raises(OSError):
        nl.parse_links(err)
