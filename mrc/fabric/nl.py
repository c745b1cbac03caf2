"""Netlink route messages that pyroute2 0.9.7 cannot express.

pyroute2 accepts seg6local ``flavors`` but drops them silently (the route
becomes plain End, which drops every packet without an SRH), and turns seg6
``encap.red`` into ``encap``. So we encode these three route kinds ourselves
(docs/fabric.md, "Kernel traps"; include/uapi/linux/seg6_local.h, seg6_iptunnel.h):

* ``End`` with the NEXT-C-SID flavour (SEG6_LOCAL_FLAVORS, lblen/nflen),
* ``End.DT6`` (decapsulate, look the inner packet up in a table),
* seg6 ``encap.red`` with one segment (a 40-byte outer header, no SRH).

The encoders are pure functions returning bytes (unit tested without root);
``NetlinkRoute`` sends them on a NETLINK_ROUTE socket and reads the ACK.
"""

from __future__ import annotations

import errno
import os
import socket
import struct

# linux/netlink.h, linux/rtnetlink.h
NLMSG_ERROR = 2
NLMSG_DONE = 3
RTM_GETLINK = 18
RTM_NEWLINK = 16
RTM_NEWROUTE = 24
RTM_DELROUTE = 25
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLM_F_DUMP = 0x300
NLM_F_EXCL = 0x200
NLM_F_CREATE = 0x400
NLA_F_NESTED = 0x8000
RTA_DST = 1
RTA_OIF = 4
RTA_GATEWAY = 5
RTA_PREFSRC = 7
RTA_METRICS = 8
RTAX_MTU = 2
RTA_TABLE = 15
RTA_ENCAP_TYPE = 21
RTA_ENCAP = 22
RTPROT_STATIC = 4
RT_SCOPE_UNIVERSE = 0
RTN_UNICAST = 1
RT_TABLE_MAIN = 254
# linux/if_link.h, linux/if.h
IFLA_IFNAME = 3
IFLA_OPERSTATE = 16
IFLA_STATS64 = 23
IF_OPER_UP = 6
IFF_UP = 0x1
# linux/lwtunnel.h
LWTUNNEL_ENCAP_SEG6 = 5
LWTUNNEL_ENCAP_SEG6_LOCAL = 7
# linux/seg6_local.h
SEG6_LOCAL_ACTION = 1
SEG6_LOCAL_TABLE = 3
SEG6_LOCAL_FLAVORS = 11
SEG6_LOCAL_FLV_OPERATION = 1
SEG6_LOCAL_FLV_LCBLOCK_BITS = 2
SEG6_LOCAL_FLV_LCNODE_FN_BITS = 3
SEG6_LOCAL_ACTION_END = 1
SEG6_LOCAL_ACTION_END_DT6 = 7
SEG6_LOCAL_FLV_OP_NEXT_CSID = 4  # bit number: the operation mask is 1 << 4
# linux/seg6_iptunnel.h
SEG6_IPTUNNEL_SRH = 1
SEG6_IPTUN_MODE_ENCAP_RED = 3
IPV6_SRCRT_TYPE_4 = 4


def _attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * ((4 - length % 4) % 4)


def _nest(kind: int, *attrs: bytes) -> bytes:
    return _attr(kind | NLA_F_NESTED, b"".join(attrs))


def _u32(kind: int, value: int) -> bytes:
    return _attr(kind, struct.pack("=I", value))


def _u8(kind: int, value: int) -> bytes:
    return _attr(kind, struct.pack("=B", value))


def _in6(address: str) -> bytes:
    return socket.inet_pton(socket.AF_INET6, address)


def _split(prefix: str) -> tuple[str, int]:
    addr, _, plen = prefix.partition("/")
    return addr, int(plen or 128)


def route_message(
    dst: str,
    oif: int,
    encap_type: int | None = None,
    encap: bytes = b"",
    table: int = RT_TABLE_MAIN,
    gateway: str | None = None,
    prefsrc: str | None = None,
    mtu: int | None = None,
    seq: int = 1,
    msg_type: int = RTM_NEWROUTE,
    flags: int = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
) -> bytes:
    """A complete RTM_NEWROUTE message for an IPv6 route."""
    addr, plen = _split(dst)
    body = struct.pack(
        "=BBBBBBBBI",
        socket.AF_INET6,
        plen,
        0,
        0,
        table if table < 256 else 252,  # RT_TABLE_COMPAT; the real id goes in RTA_TABLE
        RTPROT_STATIC,
        RT_SCOPE_UNIVERSE,
        RTN_UNICAST,
        0,
    )
    attrs = _attr(RTA_DST, _in6(addr)) + _u32(RTA_TABLE, table) + _u32(RTA_OIF, oif)
    if gateway:
        attrs += _attr(RTA_GATEWAY, _in6(gateway))
    if prefsrc:
        attrs += _attr(RTA_PREFSRC, _in6(prefsrc))
    if mtu:
        attrs += _nest(RTA_METRICS, _u32(RTAX_MTU, mtu))
    if encap_type is not None:
        attrs += _attr(RTA_ENCAP_TYPE, struct.pack("=H", encap_type)) + encap
    payload = body + attrs
    return struct.pack("=IHHII", 16 + len(payload), msg_type, flags, seq, 0) + payload


def end_next_csid(lblen: int = 32, nflen: int = 16) -> tuple[int, bytes]:
    """``encap seg6local action End flavors next-csid lblen L nflen N``."""
    flavors = _nest(
        SEG6_LOCAL_FLAVORS,
        _u32(SEG6_LOCAL_FLV_OPERATION, 1 << SEG6_LOCAL_FLV_OP_NEXT_CSID),
        _u8(SEG6_LOCAL_FLV_LCBLOCK_BITS, lblen),
        _u8(SEG6_LOCAL_FLV_LCNODE_FN_BITS, nflen),
    )
    return LWTUNNEL_ENCAP_SEG6_LOCAL, _nest(RTA_ENCAP, _u32(SEG6_LOCAL_ACTION, SEG6_LOCAL_ACTION_END), flavors)


def end_dt6(table: int = 255) -> tuple[int, bytes]:
    """``encap seg6local action End.DT6 table T``."""
    return LWTUNNEL_ENCAP_SEG6_LOCAL, _nest(
        RTA_ENCAP, _u32(SEG6_LOCAL_ACTION, SEG6_LOCAL_ACTION_END_DT6), _u32(SEG6_LOCAL_TABLE, table)
    )


def encap_red(segment: str) -> tuple[int, bytes]:
    """``encap seg6 mode encap.red segs SEGMENT``: with one segment the kernel
    writes it as the outer destination and adds no SRH."""
    segs = [_in6(segment)]
    srh = struct.pack(
        "=BBBBBBH", 0, 2 * len(segs), IPV6_SRCRT_TYPE_4, len(segs) - 1, len(segs) - 1, 0, 0
    ) + b"".join(reversed(segs))
    tun = struct.pack("=i", SEG6_IPTUN_MODE_ENCAP_RED) + srh
    return LWTUNNEL_ENCAP_SEG6, _nest(RTA_ENCAP, _attr(SEG6_IPTUNNEL_SRH, tun))


def link_dump_message(seq: int = 1) -> bytes:
    """RTM_GETLINK for every interface of the namespace (``ip -s link``)."""
    body = struct.pack("=BBHiII", socket.AF_UNSPEC, 0, 0, 0, 0, 0)
    return struct.pack("=IHHII", 16 + len(body), RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + body


def parse_links(data: bytes, out: dict | None = None) -> tuple[dict, bool]:
    """The RTM_NEWLINK messages in ``data`` as ``{ifname: {"up", "rx_bytes",
    "tx_bytes", "rx_packets", "tx_packets"}}`` (``up``: administratively up
    with its operational state UP), and whether the dump ended here.

    >>> body = struct.pack("=BBHiII", 0, 0, 1, 7, IFF_UP, 0)
    >>> attrs = _attr(IFLA_IFNAME, b"l0\\0") + _u8(IFLA_OPERSTATE, IF_OPER_UP)
    >>> attrs += _attr(IFLA_STATS64, struct.pack("=4Q", 1, 2, 300, 400) + bytes(8 * 20))
    >>> msg = struct.pack("=IHHII", 16 + len(body + attrs), RTM_NEWLINK, 2, 1, 0) + body + attrs
    >>> parse_links(msg + struct.pack("=IHHIIi", 20, NLMSG_DONE, 2, 1, 0, 0))
    ({'l0': {'up': True, 'rx_packets': 1, 'tx_packets': 2, 'rx_bytes': 300, 'tx_bytes': 400}}, True)
    """
    out = {} if out is None else out
    off = 0
    while off + 16 <= len(data):
        length, mtype, _flags, _seq, _pid = struct.unpack_from("=IHHII", data, off)
        if length < 16 or off + length > len(data):
            break  # a truncated message: nothing more to read here
        if mtype == NLMSG_DONE:
            return out, True
        if mtype == NLMSG_ERROR and length >= 20:
            (code,) = struct.unpack_from("=i", data, off + 16)
            raise OSError(-code, os.strerror(-code))
        if mtype == RTM_NEWLINK and length >= 32:
            flags = struct.unpack_from("=I", data, off + 24)[0]
            name, oper, st = None, 0, (0, 0, 0, 0)
            a = off + 32
            while a + 4 <= off + length:
                alen, akind = struct.unpack_from("=HH", data, a)
                if alen < 4:
                    break
                val = data[a + 4:a + alen]
                akind &= 0x3FFF
                if akind == IFLA_IFNAME:
                    name = val.split(b"\0", 1)[0].decode(errors="replace")
                elif akind == IFLA_OPERSTATE and val:
                    oper = val[0]
                elif akind == IFLA_STATS64 and len(val) >= 32:
                    st = struct.unpack_from("=4Q", val)
                a += (alen + 3) & ~3
            if name is not None:
                out[name] = {"up": bool(flags & IFF_UP) and oper == IF_OPER_UP, "rx_packets": st[0],
                             "tx_packets": st[1], "rx_bytes": st[2], "tx_bytes": st[3]}
        off += (length + 3) & ~3
    return out, False


class NetlinkRoute:
    """A NETLINK_ROUTE socket (already inside the right namespace)."""

    def __init__(self, sock: socket.socket | None = None) -> None:
        self.sock = sock or socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
        self.sock.bind((0, 0))
        self.seq = 0

    def request(self, build, **kw) -> None:
        """Send one message built by ``build(seq=...)`` and raise OSError on a NACK."""
        self.seq += 1
        self.sock.send(build(seq=self.seq, **kw))
        while True:
            data = self.sock.recv(65536)
            off = 0
            while off + 16 <= len(data):
                length, mtype, _flags, seq, _pid = struct.unpack_from("=IHHII", data, off)
                if mtype == NLMSG_ERROR and seq == self.seq:
                    (code,) = struct.unpack_from("=i", data, off + 16)
                    if code:
                        raise OSError(-code, os.strerror(-code))
                    return
                off += (length + 3) & ~3

    def add(self, dst: str, oif: int, kind: tuple[int, bytes] | None, table: int = RT_TABLE_MAIN,
            exist_ok: bool = False, **kw) -> None:
        """Add an IPv6 route; ``kind``: its lwtunnel encap (end_next_csid, end_dt6, encap_red) or
        None for a plain route; ``kw``: route_message's gateway, prefsrc, mtu."""
        encap_type, encap = kind or (None, b"")
        try:
            self.request(route_message, dst=dst, oif=oif, encap_type=encap_type, encap=encap,
                         table=table, **kw)
        except OSError as e:
            if not (exist_ok and e.errno == errno.EEXIST):
                raise

    def links(self) -> dict:
        """Every interface's state and counters (parse_links)."""
        self.seq += 1
        self.sock.send(link_dump_message(self.seq))
        out: dict = {}
        done = False
        while not done:
            out, done = parse_links(self.sock.recv(1 << 16), out)
        return out

    def close(self) -> None:
        """Close the netlink socket."""
        self.sock.close()
