"""The fabric's address plan: 16-bit micro-SIDs after the locator block
``fc00:0::/32`` (docs/fabric.md, protocol.md section 4, F3216 format). A
uSID's upper byte is ``(kind << 4) | plane`` and its lower byte the index;
a path is a container of uSIDs that every switch shifts. The namespace
fabric (mrc.fabric.topology) and the simulator (mrc.simspec) both address
by it; nothing here touches the system.
"""

from __future__ import annotations

import ipaddress

BLOCK = "fc00:0"
BLOCK_BITS = 32  # lblen of the End next-CSID behaviour
USID_BITS = 16  # nflen
KIND_T0 = 0x1
KIND_T1 = 0x2
KIND_HOST = 0xB
MAX_USIDS = (128 - BLOCK_BITS) // USID_BITS  # 6 uSIDs after the block


def usid(kind: int, plane: int, index: int) -> int:
    """The 16-bit uSID of a node: upper byte ``kind << 4 | plane``, lower ``index``.

    >>> hex(usid(KIND_T0, 3, 1))
    '0x1301'
    """
    return (kind << 12) | (plane << 8) | index


def host_usid(h: int, plane: int) -> int:
    """A host port's uSID: kind 0xB for hosts 0-255; kinds 0xC-0xE carry host
    bits 8-9 (the simulator's 1,024 hosts, csrc/sim/simfab.c; a namespace
    fabric stops at 256).

    >>> hex(host_usid(2, 1)), hex(host_usid(1023, 7))
    ('0xb102', '0xe7ff')
    """
    return usid(KIND_HOST + (h >> 8), plane, h & 0xFF)


def container(usids: list[int]) -> str:
    """The IPv6 address ``fc00:0:u1:u2:...::`` for a list of uSIDs.

    >>> container([0x1000, 0x2001, 0x1001, 0xb002])
    'fc00:0:1000:2001:1001:b002::'
    """
    if len(usids) > MAX_USIDS:
        raise ValueError(f"at most {MAX_USIDS} uSIDs fit after a 32-bit block, got {len(usids)}")
    words = [0xFC00, 0x0000, *usids] + [0] * (8 - 2 - len(usids))
    value = 0
    for w in words:
        value = (value << 16) | w
    return str(ipaddress.IPv6Address(value))


def final(address: str) -> str:
    """The destination a container leaves at its last hop, after every shift (F3216):
    the 32-bit block, the container's last non-zero uSID, zeros. The address a
    packet's UDP checksum is over (protocol.md section 2).

    >>> final('fc00:0:1000:2001:1001:b002::')
    'fc00:0:b002::'
    """
    words = [(int(ipaddress.IPv6Address(address)) >> (16 * (7 - i))) & 0xFFFF for i in range(8)]
    last = next((w for w in reversed(words[2:]) if w), 0)
    return str(ipaddress.IPv6Address((words[0] << 112) | (words[1] << 96) | (last << 80)))


def usid_prefix(u: int) -> str:
    """The /48 that a uSID owns as the first uSID after the block."""
    return f"{BLOCK}:{u:x}::/48"
