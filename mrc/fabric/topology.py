"""Topology of a multi-plane SRv6 uSID fabric, as pure data.

A fabric has ``planes`` independent planes.  Each plane is a 2-tier Clos:
``leaves`` T0 switches and ``spines`` T1 switches, every leaf cabled to every
spine.  ``hosts`` hosts are spread over the leaves (host i sits under leaf
``i * leaves // hosts`` in every plane) and each host has one port per plane.

Addressing (docs/fabric.md, protocol.md section 4, F3216 format):

* locator block ``fc00:0::/32``, 16-bit micro-SIDs;
* a uSID's upper byte is ``(kind << 4) | plane`` and its lower byte the index:
  kind 1 = T0 leaf, 2 = T1 spine, 0xb = host port.  So ``0x1301`` is leaf 1 of
  plane 3 and ``0xb302`` is the plane-3 port of host 2;
* a path from host S to host D on plane p through spine s is the container
  ``fc00:0:<T0 of S>:<T1 s>:<T0 of D>:<port p of D>::``; every switch shifts
  its own uSID away, so D receives ``fc00:0:<port p of D>::``, the address
  its plane-p port owns.

Nothing here touches the system: this module is safe to import anywhere.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from mrc.errors import UsageError
from mrc.usid import (  # noqa: F401 (the address plan, as this module's names too)
    BLOCK,
    BLOCK_BITS,
    KIND_HOST,
    KIND_T0,
    KIND_T1,
    MAX_USIDS,
    USID_BITS,
    container,
    host_usid,
    usid,
    usid_prefix,
)

#: uSID function appended after a host port uSID for kernel traffic: the
#: host decapsulates with End.DT6 after an encap.red (docs/fabric.md, "Kernel traps").
DT6_FUNC = 0xD6
#: Kernel-traffic ("inner") addresses: fd6d:<host>:<plane>::1 on the host's lo.
INNER_PREFIX = "fd6d"
#: Management network (a bridge in its own namespace): fd6e::<host+1>/64, and for programs whose
#: out-of-band exchange is IPv4 only (perftest's), 198.18.<(host+1) div 256>.<(host+1) mod 256>/15:
#: RFC 2544's range for benchmark networks, which nothing routes
MGMT_PREFIX = "fd6e::"
NS_PREFIX = "mrc-"
IFNAMSIZ = 15  # Linux limit on interface names (16 with the NUL)
NAME_RE = re.compile(r"^[a-z0-9]{1,10}$")
MAX_PLANES = 16
MAX_INDEX = 256


@dataclass(frozen=True)
class Link:
    """One cable (a veth pair). ``a`` is the lower tier end, ``b`` the upper."""

    name: str
    index: int
    plane: int
    a_node: str
    a_if: str
    b_node: str
    b_if: str

    # Static link-locals (docs/fabric.md, "Kernel traps"): upper end fe80::1, lower end fe80::2.
    a_ll = "fe80::2"
    b_ll = "fe80::1"


@dataclass(frozen=True)
class Topology:
    """The shape of a fabric; ``Topology()`` is the production-like default.

    >>> t = Topology(planes=2, spines=2, leaves=2, hosts=2)
    >>> t.path_address(0, 1, plane=1, spine=0)
    'fc00:0:1100:2100:1101:b101::'
    """

    planes: int = 8
    spines: int = 4
    leaves: int = 2
    hosts: int = 4
    name: str = "mrc0"
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self.validate()

    # ---------------------------------------------------------------- checks
    def validate(self) -> None:
        """UsageError when the name or a dimension is out of range."""
        if not NAME_RE.match(self.name):
            raise UsageError(
                f"fabric name {self.name!r} is not valid: use 1-10 lower-case letters or digits"
            )
        for what, value, lo, hi in (
            ("planes", self.planes, 1, MAX_PLANES),
            ("spines", self.spines, 1, MAX_INDEX),
            ("leaves", self.leaves, 1, MAX_INDEX),
            ("hosts", self.hosts, 1, MAX_INDEX),
        ):
            if not isinstance(value, int) or not lo <= value <= hi:
                raise UsageError(
                    f"impossible topology: {what}={value!r}; it must be between {lo} and {hi} "
                    "(uSIDs carry the plane in 4 bits and the index in 8)"
                )
        if self.hosts < 2:
            raise UsageError("impossible topology: a fabric needs at least 2 hosts to connect")
        if self.hosts < self.leaves:
            raise UsageError(
                f"impossible topology: {self.leaves} leaves but only {self.hosts} hosts; "
                "every leaf needs at least one host (use --leaves <= --hosts)"
            )
        for ifname in self.all_ifnames():
            if len(ifname) > IFNAMSIZ:
                raise UsageError(
                    f"interface name {ifname!r} is longer than {IFNAMSIZ} characters; "
                    "use fewer hosts, leaves or spines"
                )

    # ----------------------------------------------------------------- nodes
    @property
    def prefix(self) -> str:
        """Namespace prefix of this fabric: every namespace it owns starts with it."""
        return f"{NS_PREFIX}{self.name}-"

    def ns(self, node: str) -> str:
        """The namespace of ``node``."""
        return f"{self.prefix}{node}"

    def host(self, h: int) -> str:
        """Host ``h``'s node name."""
        return f"h{h}"

    def leaf(self, p: int, leaf: int) -> str:
        """The node name of plane ``p``'s leaf ``leaf``."""
        return f"p{p}l{leaf}"

    def spine(self, p: int, s: int) -> str:
        """The node name of plane ``p``'s spine ``s``."""
        return f"p{p}s{s}"

    def host_leaf(self, h: int) -> int:
        """The leaf index a host hangs off (the same in every plane)."""
        return h * self.leaves // self.hosts

    def hosts_of_leaf(self, leaf: int) -> list[int]:
        """The hosts under leaf ``leaf`` (the same in every plane)."""
        return [h for h in range(self.hosts) if self.host_leaf(h) == leaf]

    def host_nodes(self) -> list[str]:
        """Every host's node name."""
        return [self.host(h) for h in range(self.hosts)]

    def switch_nodes(self) -> list[str]:
        """Every switch's node name, plane by plane."""
        out = []
        for p in range(self.planes):
            out += [self.leaf(p, leaf) for leaf in range(self.leaves)]
            out += [self.spine(p, s) for s in range(self.spines)]
        return out

    def nodes(self) -> list[str]:
        """Every node: hosts, switches and the management network."""
        return self.host_nodes() + self.switch_nodes() + ["mgmt"]

    def host_index(self, host: int | str) -> int:
        """Accept ``2`` or ``'h2'``; raise UsageError for anything else."""
        if isinstance(host, str):
            m = re.fullmatch(r"h?(\d+)", host)
            if not m:
                raise UsageError(f"unknown host {host!r}: hosts are h0..h{self.hosts - 1}")
            host = int(m.group(1))
        if not 0 <= host < self.hosts:
            raise UsageError(f"unknown host h{host}: hosts are h0..h{self.hosts - 1}")
        return host

    # ----------------------------------------------------------------- uSIDs
    def leaf_usid(self, p: int, leaf: int) -> int:
        """The uSID of plane ``p``'s leaf ``leaf``."""
        return usid(KIND_T0, p, leaf)

    def spine_usid(self, p: int, s: int) -> int:
        """The uSID of plane ``p``'s spine ``s``."""
        return usid(KIND_T1, p, s)

    def port_usid(self, h: int, p: int) -> int:
        """The uSID of host ``h``'s port on plane ``p``."""
        return host_usid(h, p)

    def port_address(self, h: int, p: int) -> str:
        """The address host ``h``'s plane-``p`` port owns: ``fc00:0:<port uSID>::``."""
        return container([self.port_usid(h, p)])

    def port_ifname(self, p: int) -> str:
        """The interface name of a host's port on plane ``p``."""
        return f"p{p}"

    def path_usids(self, src: int, dst: int, plane: int, spine: int) -> list[int]:
        """The uSIDs of the path from ``src`` to ``dst`` over ``plane`` and ``spine``."""
        return [
            self.leaf_usid(plane, self.host_leaf(src)),
            self.spine_usid(plane, spine),
            self.leaf_usid(plane, self.host_leaf(dst)),
            self.port_usid(dst, plane),
        ]

    def path_address(self, src: int | str, dst: int | str, plane: int, spine: int) -> str:
        """Destination address that steers a packet from ``src`` to ``dst``
        over ``plane`` through ``spine`` (T0 -> T1 -> T0 -> host, also when
        both hosts share a leaf, so every spine is a distinct path)."""
        s, d = self.host_index(src), self.host_index(dst)
        if s == d:
            raise UsageError(f"a path needs two different hosts, got h{s} twice")
        if not 0 <= plane < self.planes:
            raise UsageError(f"unknown plane {plane}: planes are 0..{self.planes - 1}")
        if not 0 <= spine < self.spines:
            raise UsageError(f"unknown spine {spine}: spines are 0..{self.spines - 1}")
        return container(self.path_usids(s, d, plane, spine))

    def kernel_path_address(self, src: int, dst: int, plane: int) -> str:
        """Outer destination for kernel traffic (encap.red): the MRC path through
        one fixed spine per host pair, then the host's End.DT6 function."""
        spine = (src + dst) % self.spines
        return container([*self.path_usids(src, dst, plane, spine), DT6_FUNC])

    def dt6_prefix(self, h: int, p: int) -> str:
        """The End.DT6 prefix of host ``h``'s port on plane ``p``."""
        return f"{BLOCK}:{self.port_usid(h, p):x}:{DT6_FUNC:x}::/64"

    def inner_address(self, h: int, p: int) -> str:
        """Address for ordinary kernel traffic to host ``h`` over plane ``p``."""
        return f"{INNER_PREFIX}:{h:x}:{p:x}::1"

    def inner_host_prefix(self, h: int) -> str:
        """The prefix of host ``h``'s kernel-traffic addresses."""
        return f"{INNER_PREFIX}:{h:x}::/32"

    def mgmt_address(self, h: int) -> str:
        """Host ``h``'s management address."""
        return f"{MGMT_PREFIX}{h + 1:x}"

    def mgmt_ipv4(self, h: int) -> str:
        """Host ``h``'s IPv4 management address (perftest's TCP exchange is IPv4 only)."""
        return f"198.18.{(h + 1) >> 8}.{(h + 1) & 0xFF}"

    def paths(self) -> list[dict]:
        """Every (src, dst, plane, spine) path with its address."""
        out = []
        for s in range(self.hosts):
            for d in range(self.hosts):
                if s == d:
                    continue
                for p in range(self.planes):
                    for sp in range(self.spines):
                        out.append(
                            {
                                "src": self.host(s),
                                "dst": self.host(d),
                                "plane": p,
                                "spine": sp,
                                "address": self.path_address(s, d, p, sp),
                            }
                        )
        return out

    def decode_address(self, address: str) -> dict:
        """Inverse of the plan: which nodes a uSID container names.

        >>> Topology(planes=2, spines=2, leaves=2, hosts=2).decode_address('fc00:0:1100:2100:1101:b101::')
        {'plane': 1, 'hops': ['p1l0', 'p1s0', 'p1l1'], 'host': 'h1'}
        """
        value = int(ipaddress.IPv6Address(address))
        words = [(value >> (16 * (7 - i))) & 0xFFFF for i in range(8)]
        if words[0] != 0xFC00 or words[1] != 0:
            raise ValueError(f"{address} is not inside the uSID block {BLOCK}::/32")
        hops, host, plane = [], None, None
        for w in words[2:]:
            if w == 0:
                break
            kind, p, idx = w >> 12, (w >> 8) & 0xF, w & 0xFF
            if kind == KIND_T0:
                hops.append(self.leaf(p, idx))
            elif kind == KIND_T1:
                hops.append(self.spine(p, idx))
            elif KIND_HOST <= kind < KIND_HOST + 4:
                host = self.host((kind - KIND_HOST) << 8 | idx)
            else:
                continue  # a function (such as End.DT6), not a node
            plane = p if plane is None else plane
        return {"plane": plane, "hops": hops, "host": host}

    # ----------------------------------------------------------------- links
    def links(self) -> list[Link]:
        """Every cable, named ``<lower node>-<upper node>``."""
        out: list[Link] = []
        for p in range(self.planes):
            for h in range(self.hosts):
                leaf = self.leaf(p, self.host_leaf(h))
                out.append(Link(f"{self.host(h)}-{leaf}", len(out), p, self.host(h), self.port_ifname(p),
                                leaf, f"h{h}"))
            for leaf in range(self.leaves):
                for s in range(self.spines):
                    ln, sn = self.leaf(p, leaf), self.spine(p, s)
                    out.append(Link(f"{ln}-{sn}", len(out), p, ln, f"s{s}", sn, f"l{leaf}"))
        return out

    def link(self, name: str) -> Link:
        """The link named ``name`` (UsageError if there is none)."""
        for link in self.links():
            if link.name == name:
                return link
        raise UsageError(
            f"unknown link {name!r}: links are named <lower>-<upper>, for example "
            f"h0-{self.leaf(0, 0)} or {self.leaf(0, 0)}-{self.spine(0, 0)} "
            "(see `mrc fabric status`)"
        )

    def links_of(self, node: str) -> list[Link]:
        """The links of ``node``."""
        return [link for link in self.links() if node in (link.a_node, link.b_node)]

    def all_ifnames(self) -> list[str]:
        """Every interface name any node has."""
        names = {"mgmt", "usid0", "usid1", "br0"}
        for p in range(self.planes):
            names.add(self.port_ifname(p))
        names.update(f"h{h}" for h in range(self.hosts))
        names.update(f"s{s}" for s in range(self.spines))
        names.update(f"l{leaf}" for leaf in range(self.leaves))
        names.update(f"m{h}" for h in range(self.hosts))
        return sorted(names)

    def to_dict(self) -> dict:
        """The topology as the state file keeps it."""
        return {
            "name": self.name,
            "planes": self.planes,
            "spines": self.spines,
            "leaves": self.leaves,
            "hosts": self.hosts,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Topology:
        """A topology from its state-file dict."""
        return cls(
            planes=d["planes"], spines=d["spines"], leaves=d["leaves"], hosts=d["hosts"], name=d["name"]
        )
