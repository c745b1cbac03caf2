"""How the stack finds its ports and its peers: a path resolver.

A :class:`PathResolver` answers, for the host it runs on:

- which interfaces are this host's MRC ports, and the plane of each;
- at which address another host takes connection setup (the management
  network, :mod:`mrc.cm`);
- which destination addresses lead to a peer on each plane: the uSID
  containers of an SRv6 fabric's paths, or just the peer's port address on a
  plain routed network;
- whose port an address is, and which hops a uSID container still names
  (``mrc decode``).

The stack (verbs, cm, perf, ctl, decode) takes a resolver and never imports
the fabric. A topology file (JSON, or YAML with PyYAML installed; the format
is in docs/topology.md) gives one; ``mrc.fabric.resolver`` gives one for a
fabric built by ``mrc fabric up``, which also writes its topology file so
that ``mrc fabric exec`` can hand it to any tool (``MRC_TOPOLOGY`` and
``MRC_HOST``). :func:`from_environment` is what the tools use by default.

>>> r = TopologyResolver({"name": "lab", "hosts": {
...     "a": {"mgmt": "fd00::a", "ports": [{"plane": 0, "ifname": "eth1", "address": "2001:db8::a"}]},
...     "b": {"mgmt": "fd00::b", "ports": [{"plane": 0, "ifname": "eth1", "address": "2001:db8::b"}]}}},
...     host="a")
>>> r.local_ports(), r.mgmt_address("b"), r.paths("b", 0), r.host_of("2001:db8::b")
([('eth1', 0)], 'fd00::b', ['2001:db8::b'], 'b')
"""

from __future__ import annotations

import ipaddress
import os

from mrc import docfile
from mrc.errors import UsageError

#: environment variables the tools read (``mrc fabric exec`` sets both)
ENV_TOPOLOGY, ENV_HOST = "MRC_TOPOLOGY", "MRC_HOST"
USID_BITS = 16


def _addr(text: str, where: str) -> str:
    try:
        return str(ipaddress.IPv6Address(text))
    except (ipaddress.AddressValueError, ValueError):
        raise UsageError(f"{where}: {text!r} is not an IPv6 address") from None


def usids(address: str, block_bits: int) -> list[int]:
    """The 16-bit uSIDs a container carries after its locator block, up to the first zero.

    >>> [hex(u) for u in usids("fc00:0:1500:2502:1501:b503::", 32)]
    ['0x1500', '0x2502', '0x1501', '0xb503']
    """
    value = int(ipaddress.IPv6Address(address))
    out = []
    for shift in range(128 - block_bits - USID_BITS, -1, -USID_BITS):
        u = (value >> shift) & 0xFFFF
        if not u:
            break
        out.append(u)
    return out


class PathResolver:
    """What the stack asks of a topology. This base knows nothing: ports must
    be named, and a peer is reached at its port addresses (a plain network)."""

    #: the topology's name: two hosts share host names only within one topology
    name: str | None = None
    #: this host's name in it
    host: str | None = None

    def local_ports(self) -> list[tuple[str, int]] | None:
        """(interface name, plane) of each MRC port of this host; None: not known."""
        return None

    def mgmt_address(self, host: str) -> str | None:
        """Where ``host`` takes connection setup; None: not known."""
        return None

    def paths(self, dst: str, plane: int) -> list[str] | None:
        """Destination addresses from this host to host ``dst`` on ``plane``; None: not known."""
        return None

    def paths_to(self, peer_host: str | None, peer_topology: str | None, planes) -> dict[int, list[str]]:
        """Per plane, the addresses toward a peer that named itself ``peer_host``
        in ``peer_topology`` (empty when it is not a host of this topology)."""
        if not peer_host or peer_topology != self.name or self.name is None:
            return {}
        out = {}
        for p in planes:
            addrs = self.paths(peer_host, int(p))
            if addrs:
                out[int(p)] = addrs
        return out

    def host_of(self, address: str) -> str | None:
        """The host whose port ``address`` is (or where a path container ends)."""
        return None

    def describe(self, address: str) -> dict:
        """The hops a destination address still names and the host it ends at."""
        return {"hops": [], "host": self.host_of(address)}


class TopologyResolver(PathResolver):
    """A resolver over a topology dict (the format of docs/topology.md), as read
    from a file or exported by a fabric. ``host`` is this host's name in it."""

    def __init__(self, data: dict, host: str | None = None, source: str = "topology") -> None:
        self.source = source
        if not isinstance(data, dict) or not isinstance(data.get("hosts"), dict) or not data["hosts"]:
            raise UsageError(f"{source}: a topology needs a 'hosts' mapping with at least one host")
        self.name = str(data.get("name") or source)
        self._ports: dict[str, dict[int, dict]] = {}
        self._mgmt: dict[str, str] = {}
        self._owner: dict[str, tuple[str, int]] = {}
        for h, spec in data["hosts"].items():
            where = f"{source}: host {h!r}"
            if not isinstance(spec, dict) or not isinstance(spec.get("ports"), list) or not spec["ports"]:
                raise UsageError(f"{where} needs a non-empty 'ports' list")
            ports: dict[int, dict] = {}
            for i, port in enumerate(spec["ports"]):
                pw = f"{where}, port {i}"
                if not isinstance(port, dict) or "plane" not in port or "address" not in port:
                    raise UsageError(f"{pw} needs 'plane' and 'address' (and 'ifname' on the host that uses it)")
                plane = port["plane"]
                if not isinstance(plane, int) or not 0 <= plane < 16 or plane in ports:
                    raise UsageError(f"{pw}: plane must be a distinct integer 0..15, got {plane!r}")
                ports[plane] = {"ifname": port.get("ifname"), "address": _addr(str(port["address"]), pw)}
                self._owner[ports[plane]["address"]] = (str(h), plane)
            self._ports[str(h)] = ports
            if spec.get("mgmt") is not None:
                self._mgmt[str(h)] = _addr(str(spec["mgmt"]), f"{where}, mgmt")
        self._paths: dict[tuple[str, str, int], list[str]] = {}
        for i, p in enumerate(data.get("paths") or []):
            pw = f"{source}: paths[{i}]"
            if not isinstance(p, dict) or not {"src", "dst", "plane", "addresses"} <= set(p):
                raise UsageError(f"{pw} needs 'src', 'dst', 'plane' and 'addresses'")
            for end in ("src", "dst"):
                if str(p[end]) not in self._ports:
                    raise UsageError(f"{pw}: {end} {p[end]!r} is not a host of the topology")
            addrs = p["addresses"]
            if not isinstance(addrs, list) or not 1 <= len(addrs) <= 16:
                raise UsageError(f"{pw}: 'addresses' is a list of 1 to 16 destination addresses")
            self._paths[(str(p["src"]), str(p["dst"]), int(p["plane"]))] = [_addr(str(a), pw) for a in addrs]
        usid = data.get("usids") or {}
        self._block_bits = 0
        self._usid_names: dict[int, str] = {}
        if usid:
            try:
                net = ipaddress.IPv6Network(str(usid["block"]))
                self._block = net
                self._block_bits = net.prefixlen
                self._usid_names = {int(k, 16): str(v) for k, v in (usid.get("names") or {}).items()}
            except (KeyError, ValueError) as e:
                raise UsageError(f"{source}: 'usids' needs a 'block' prefix and 'names' by hex uSID ({e})") from None
        if host is not None and host not in self._ports:
            raise UsageError(f"{source}: no host {host!r} (hosts: {', '.join(sorted(self._ports))})")
        self.host = host

    @classmethod
    def from_file(cls, path: str, host: str | None = None) -> TopologyResolver:
        """Read a topology file (JSON; YAML when the name ends in .yaml or .yml)."""
        data = docfile.read(path, "topology file")
        r = cls(data, None, source=path)
        r.host = host or r.find_me()
        if r.host is not None and r.host not in r._ports:
            raise UsageError(f"{path}: no host {r.host!r} (hosts: {', '.join(sorted(r._ports))})")
        return r

    def hosts(self) -> list[str]:
        """Every host the topology names."""
        return sorted(self._ports)

    def find_me(self) -> str | None:
        """The host whose port addresses this network namespace has (None: none, or several)."""
        from pyroute2 import IPRoute

        with IPRoute() as ipr:
            mine = {str(ipaddress.IPv6Address(a.get("IFA_ADDRESS"))) for a in ipr.get_addr(family=10)
                    if a.get("IFA_ADDRESS")}
        found = {self._owner[a][0] for a in mine if a in self._owner}
        return found.pop() if len(found) == 1 else None

    def local_ports(self) -> list[tuple[str, int]] | None:
        """This host's ports as (interface, plane), or None when it is unknown."""
        if self.host is None:
            return None
        ports = self._ports[self.host]
        missing = [p for p, v in ports.items() if not v["ifname"]]
        if missing:
            raise UsageError(f"{self.source}: host {self.host!r} names no interface ('ifname') for plane(s) "
                             f"{', '.join(map(str, missing))}")
        return [(v["ifname"], p) for p, v in sorted(ports.items())]

    def mgmt_address(self, host: str) -> str | None:
        """``host``'s management address, if the topology gives one."""
        return self._mgmt.get(host)

    def port_address(self, host: str, plane: int) -> str | None:
        """The address of ``host``'s port on ``plane``."""
        port = self._ports.get(host, {}).get(plane)
        return port["address"] if port else None

    def paths(self, dst: str, plane: int) -> list[str] | None:
        """The destination addresses of this host's paths to ``dst`` on ``plane``."""
        if self.host is None or dst not in self._ports:
            return None
        explicit = self._paths.get((self.host, dst, plane))
        if explicit:
            return list(explicit)
        final = self.port_address(dst, plane)
        return [final] if final else None

    def host_of(self, address: str) -> str | None:
        """The host that owns ``address``, or None."""
        a = str(ipaddress.IPv6Address(address))
        if a in self._owner:
            return self._owner[a][0]
        if self._block_bits and ipaddress.IPv6Address(a) in self._block:
            us = usids(a, self._block_bits)
            if us:  # a container ends at its last uSID: the one the host's port owns
                last = int(self._block.network_address) | us[-1] << (128 - self._block_bits - USID_BITS)
                return self._owner.get(str(ipaddress.IPv6Address(last)), (None,))[0]
        return None

    def describe(self, address: str) -> dict:
        """What ``address`` names: host, plane, and the switches a uSID container lists."""
        hops: list[str] = []
        if self._block_bits and ipaddress.IPv6Address(address) in self._block:
            us = usids(address, self._block_bits)
            hops = [self._usid_names.get(u, f"{u:04x}") for u in us[:-1]]
        return {"hops": hops, "host": self.host_of(address)}


def from_environment(host: str | None = None, topology: str | None = None) -> PathResolver:
    """The resolver the tools use: the topology file given (or ``$MRC_TOPOLOGY``),
    as host ``host`` (or ``$MRC_HOST``, or the host whose addresses this
    namespace has); without a topology, a plain :class:`PathResolver`."""
    path = topology or os.environ.get(ENV_TOPOLOGY)
    if not path:
        return PathResolver()
    return TopologyResolver.from_file(path, host or os.environ.get(ENV_HOST))
