"""SRV6 EV profiles from the fabric's address plan (the OCP SRv6 example):
per plane, a GENERATED profile whose fields fix the locator block and every
uSID but the T1 one, whose upper 8 bits fix the tier and lower 8 bits run
over the spines; all planes together as one EXPLICIT profile a QP can use.

>>> from mrc.fabric.topology import Topology
>>> t = Topology(planes=2, spines=2, leaves=2, hosts=2)
>>> srv6_from_fabric(t, 0, 1).paths()[1] == [t.path_address(0, 1, 1, s) for s in range(2)]
True
"""

from __future__ import annotations

import ipaddress

from mrc.ctl.profiles import EXPLICIT, GENERATED, SRV6, EVField, EVFormatProfile, EVProfile, srv6_format
from mrc.fabric.topology import BLOCK_BITS, Topology


def srv6_plane_fields(t: Topology, src: int, dst: int, plane: int) -> list[EVField]:
    """GENERATED fields for the paths from host ``src`` to ``dst`` over one
    plane: everything fixed but the T1 uSID's lower byte, which runs over
    the spines (the OCP SRv6 example: upper 8 bits fix the tier)."""
    u = t.path_usids(src, dst, plane, 0)
    block = int(ipaddress.IPv6Address(t.path_address(src, dst, plane, 0))) >> (128 - BLOCK_BITS)
    return [EVField(32, init_val=block), EVField(16, init_val=u[0]),
            EVField(16, init_val=u[1] & 0xFF00, mask=0x00FF, max_val=t.spines - 1),
            EVField(16, init_val=u[2]), EVField(16, init_val=u[3])]


def srv6_from_fabric(t: Topology, src: int, dst: int, pid: int = 1, fmt: EVFormatProfile | None = None) -> EVProfile:
    """An EXPLICIT SRV6 EV profile holding every path from ``src`` to ``dst``
    (each plane's GENERATED expansion, port = plane + 1), in OFFLINE state;
    nobody writes an address by hand."""
    fmt = fmt or EVFormatProfile(pid, SRV6, srv6_format())
    per_plane = []
    for p in range(t.planes):
        g = EVProfile(0, GENERATED, fmt, fields=srv6_plane_fields(t, src, dst, p), port=p + 1)
        per_plane.append(g.entries)
    prof = EVProfile(pid, EXPLICIT, fmt, ev_count=sum(len(e) for e in per_plane), ev_min_active=1)
    i = 0
    for entries in per_plane:
        for e in entries:
            prof.replace(i, e.value, e.port)
            i += 1
    return prof
