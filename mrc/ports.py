"""A context's ports: what the kernel says about each interface MRC sends on
(index, MAC, global IPv6 address, MTU, the next hop's MAC), read once when
the context opens them, and the same as the C engine takes it."""

from __future__ import annotations

import ipaddress
import socket
import time
from dataclasses import dataclass

from mrc._dp import ffi
from mrc.errors import MrcError


@dataclass
class Port:
    """One NIC port: an interface on one plane."""

    ifname: str
    plane: int
    ifindex: int
    mac: str
    address: str
    next_hop_mac: str
    mtu: int = 1500


def _mac_bytes(mac: str) -> bytes:
    return bytes(int(x, 16) for x in mac.split(":"))


def _next_hop_mac(ipr, idx: int, ifname: str, timeout: float = 1.0) -> str:
    """The MAC of the gateway of the interface's routes, from the kernel's
    neighbour table; when the kernel does not know it yet, a datagram toward
    the gateway makes it ask (neighbour discovery), and it is read again."""
    gws = sorted({r.get("RTA_GATEWAY") for r in ipr.get_routes(family=socket.AF_INET6, oif=idx)
                  if r.get("RTA_GATEWAY")})
    if not gws:
        raise MrcError(f"port {ifname} has no route through a gateway: MRC sends every packet to the next hop "
                       f"of its port (add a route via the switch, e.g. `ip -6 route add 2001:db8::/32 via fe80::1 "
                       f"dev {ifname}`)")
    deadline = time.monotonic() + timeout
    asked = False
    while True:
        for n in ipr.get_neighbours(family=socket.AF_INET6, ifindex=idx):
            if n.get("NDA_DST") in gws and n.get("NDA_LLADDR"):
                return n.get("NDA_LLADDR")
        if time.monotonic() >= deadline:
            raise MrcError(f"no neighbour entry for the next hop of {ifname} (gateways {', '.join(gws)}): is the "
                           f"gateway up? (`ping -c1 -I {ifname} {gws[0]}` shows it)")
        if not asked:
            asked = True
            for gw in gws:  # any datagram makes the kernel resolve the gateway
                with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
                    try:
                        s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())
                        s.sendto(b"", (gw, 9, 0, idx if ipaddress.IPv6Address(gw).is_link_local else 0))
                    except OSError:
                        pass
        time.sleep(0.01)


def discover_ports(ports: list[tuple[str, int]] | list[str]) -> list[Port]:
    """Read this host's MRC ports from the kernel (current network namespace):
    each interface's index, MAC, global IPv6 address, MTU and next-hop MAC.
    ``ports`` is a list of (interface, plane), or of interface names (planes
    0, 1, ... in that order)."""
    from pyroute2 import IPRoute

    spec = [(p, i) if isinstance(p, str) else (str(p[0]), int(p[1])) for i, p in enumerate(ports)]
    if not spec:
        raise MrcError("no MRC ports given")
    out = []
    with IPRoute() as ipr:
        links = {link.get("ifname"): link for link in ipr.get_links()}
        for name, plane in spec:
            if name not in links:
                raise MrcError(f"no interface named {name!r} in this network namespace "
                               f"(it has {', '.join(sorted(n for n in links if n)) or 'none'})")
            link = links[name]
            idx = link["index"]
            addrs = [a.get("IFA_ADDRESS") for a in ipr.get_addr(family=socket.AF_INET6, index=idx)]
            glob = [a for a in addrs if a and not ipaddress.IPv6Address(a).is_link_local]
            if not glob:
                raise MrcError(f"port {name} has no global IPv6 address")
            mac = _next_hop_mac(ipr, idx, name)
            out.append(Port(name, plane, idx, link.get("IFLA_ADDRESS"), glob[0], mac, link.get("IFLA_MTU") or 1500))
    return out


def port_cfgs(ports: list[Port]):
    """The ports as the ``struct mrc_port_cfg`` array mrc_ctx_create takes."""
    arr = ffi.new("struct mrc_port_cfg[]", len(ports))
    for i, p in enumerate(ports):
        arr[i].ifindex = p.ifindex
        arr[i].plane = p.plane
        arr[i].src_mac = list(_mac_bytes(p.mac))
        arr[i].dst_mac = list(_mac_bytes(p.next_hop_mac))
        arr[i].src_addr = list(socket.inet_pton(socket.AF_INET6, p.address))
    return arr
