"""Topology -> ordered list of netlink operations (pure; no root needed).

Every operation names the node (namespace) it runs in and the links whose
interfaces it configures. ``apply`` executes the list in order; ``heal``
re-executes the operations of one link, because ``ip link set down`` flushes
a veth's addresses and routes (docs/fabric.md, "Kernel traps").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mrc.fabric.topology import INNER_PREFIX, Topology, usid_prefix

LINK_MTU = 9000  # every fabric link (veth pair)

#: Sysctls for every namespace (set before any interface exists, so the
#: ``default`` values reach every interface created later).
COMMON_SYSCTLS = {
    "net.ipv6.conf.default.accept_dad": "0",
    "net.ipv6.conf.all.accept_dad": "0",
    "net.ipv6.conf.default.addr_gen_mode": "1",  # no automatic link-locals
    "net.ipv6.conf.default.accept_ra": "0",
    "net.ipv6.conf.all.accept_ra": "0",
    "net.ipv6.conf.default.keep_addr_on_down": "1",
}
SWITCH_SYSCTLS = {**COMMON_SYSCTLS, "net.ipv6.conf.all.forwarding": "1"}
#: with BGP, a switch spreads flows over its equal-cost next hops by the 5-tuple, as a switch's ECMP hash
#: does: the custom policy (3) over source and destination address, protocol and ports (fields 0x37).
#: Policy 1 would take the sending socket's own random hash where a packet still carries it, so that
#: a flow's path changed with each connection (and each TCP timeout), not with its 5-tuple.
BGP_SWITCH_SYSCTLS = {**SWITCH_SYSCTLS, "net.ipv6.fib_multipath_hash_fields": "0x37",
                      "net.ipv6.fib_multipath_hash_policy": "3"}
#: how kernel traffic crosses the fabric: ``static`` (SRv6 encap through one spine per host pair) or ``bgp``
#: (plain IPv6, routed by FRR's BGP with ECMP on the switches: mrc.fabric.bgp)
ROUTINGS = ("static", "bgp")
HOST_SYSCTLS = {**COMMON_SYSCTLS}
HOST_NFT = """table inet mrc {
 chain input { type filter hook input priority 0; policy accept; udp dport 4791 counter drop; }
}
"""
KERNEL_TABLE_BASE = 100  # table 100 + p: kernel traffic pinned to plane p
RULE_PRIORITY = 100


@dataclass
class Op:
    """One step. ``kind`` selects the executor in ``mrc.fabric.apply``."""

    kind: str
    node: str
    args: dict = field(default_factory=dict)
    links: tuple[str, ...] = ()

    def describe(self) -> str:
        """The operation in one line."""
        args = " ".join(f"{k}={v}" for k, v in self.args.items())
        return f"{self.node}: {self.kind} {args}".rstrip()


def plan(t: Topology, routing: str = "static") -> list[Op]:
    """Every netlink operation that builds ``t``, in order, with kernel traffic routed as ``routing``
    says (ROUTINGS; with ``bgp`` the routing daemons start after the plan: mrc.fabric.bgp)."""
    if routing not in ROUTINGS:
        raise ValueError(f"unknown routing {routing!r}: use one of {', '.join(ROUTINGS)}")
    ops: list[Op] = []
    hosts = range(t.hosts)
    planes = range(t.planes)

    # 1. namespaces, sysctls, loopbacks
    for node in t.nodes():
        ops.append(Op("netns", node))
    for node in t.host_nodes():
        ops.append(Op("sysctl", node, {"values": HOST_SYSCTLS}))
    for node in t.switch_nodes():
        ops.append(Op("sysctl", node, {"values": BGP_SWITCH_SYSCTLS if routing == "bgp" else SWITCH_SYSCTLS}))
    ops.append(Op("sysctl", "mgmt", {"values": COMMON_SYSCTLS}))
    for node in t.nodes():
        ops.append(Op("up", node, {"ifname": "lo"}))

    # 2. every switch carries its End route on an interface of its own that no
    #    link fault touches: a seg6local route on lo does not work
    #    (docs/fabric.md, "Kernel traps") and this kernel has no dummy driver, so it is a veth
    #    pair with both ends inside the switch.
    for node in t.switch_nodes():
        ops.append(Op("veth", node, {"ifname": "usid0", "peer_node": node, "peer_ifname": "usid1"}))
        ops.append(Op("up", node, {"ifname": "usid1"}))
        ops.append(Op("up", node, {"ifname": "usid0"}))

    # 3. management network: a bridge in its own namespace, one port per host
    ops.append(Op("bridge", "mgmt", {"ifname": "br0"}))
    ops.append(Op("up", "mgmt", {"ifname": "br0"}))
    for h in hosts:
        host = t.host(h)
        ops.append(Op("veth", host, {"ifname": "mgmt", "peer_node": "mgmt", "peer_ifname": f"m{h}",
                                     "address": mac(0x6E, h, 1), "peer_address": mac(0x6E, h, 2)}))
        ops.append(Op("master", "mgmt", {"ifname": f"m{h}", "master": "br0"}))
        ops.append(Op("up", "mgmt", {"ifname": f"m{h}"}))
        ops.append(Op("addr", host, {"ifname": "mgmt", "address": t.mgmt_address(h), "prefixlen": 64}))
        ops.append(Op("addr", host, {"ifname": "mgmt", "address": t.mgmt_ipv4(h), "prefixlen": 15}))
        ops.append(Op("up", host, {"ifname": "mgmt"}))

    # 3b. no side effects from the kernel for MRC packets: the raw socket has
    #     seen the frame before IP input drops it (no ICMP port unreachable)
    for h in hosts:
        ops.append(Op("nft", t.host(h), {"script": HOST_NFT}))

    # 4. fabric links: veth pairs with MTU 9000 and static link-locals
    for link in t.links():
        ln = (link.name,)
        a_mac, b_mac = link_macs(link)
        ops.append(Op("veth", link.a_node,
                      {"ifname": link.a_if, "peer_node": link.b_node, "peer_ifname": link.b_if,
                       "address": a_mac, "peer_address": b_mac}, ln))
        ops += link_config(t, link)
    ops += host_port_programs(t)

    # 5. kernel traffic: inner addresses on lo and per-plane source rules
    #    (before the encap routes, whose prefsrc must already exist)
    for h in hosts:
        host = t.host(h)
        for p in planes:
            ops.append(Op("addr", host, {"ifname": "lo", "address": t.inner_address(h, p), "prefixlen": 128}))
            ops.append(Op("rule", host, {"src": t.inner_address(h, p),
                                         "table": KERNEL_TABLE_BASE + p, "priority": RULE_PRIORITY}))
    # 6. switches: End next-CSID for their own uSID, static routes toward the
    #    next uSID in both directions (protocol.md section 4)
    for p in planes:
        for leaf in range(t.leaves):
            node = t.leaf(p, leaf)
            ops.append(Op("end", node, {"prefix": usid_prefix(t.leaf_usid(p, leaf)), "ifname": "usid0"}))
        for s in range(t.spines):
            node = t.spine(p, s)
            ops.append(Op("end", node, {"prefix": usid_prefix(t.spine_usid(p, s)), "ifname": "usid0"}))
    for link in t.links():
        ops += link_routes(t, link, routing)

    return ops


def mac(kind: int, index: int, end: int) -> str:
    """A planned, locally administered MAC: 02:<kind>:<index, 24 bits>:<end>."""
    return f"02:{kind:02x}:{(index >> 16) & 0xFF:02x}:{(index >> 8) & 0xFF:02x}:{index & 0xFF:02x}:{end:02x}"


def link_macs(link) -> tuple[str, str]:
    """The planned MACs of a link's lower and upper end."""
    return mac(0x6D, link.index, 1), mac(0x6D, link.index, 2)


def host_port_programs(t: Topology) -> list[Op]:
    """Every host port's egress program for MRC's buffers of k packets (mrc.fabric.gsobpf), one ``tc``
    per host: once, at build (a fault takes a link down and up, and its clsact programs stay)."""
    ports: dict[str, list[str]] = {}
    for link in t.links():
        if link.a_node.startswith("h"):
            ports.setdefault(link.a_node, []).append(link.a_if)
    return [Op("gso", host, {"ifnames": ifnames}) for host, ifnames in ports.items()]


def link_config(t: Topology, link) -> list[Op]:
    """Addresses, neighbours and link state of one link's two ends (re-run by heal).

    The link-local next hops get permanent neighbour entries with the planned
    MACs, as a statically configured switch has: no neighbour discovery wait
    on the first packets of a path, before and after a heal.
    """
    ln = (link.name,)
    a_mac, b_mac = link_macs(link)
    ops = [
        Op("mtu", link.a_node, {"ifname": link.a_if, "mtu": LINK_MTU}, ln),
        Op("mtu", link.b_node, {"ifname": link.b_if, "mtu": LINK_MTU}, ln),
        Op("addr", link.a_node, {"ifname": link.a_if, "address": link.a_ll, "prefixlen": 64}, ln),
        Op("addr", link.b_node, {"ifname": link.b_if, "address": link.b_ll, "prefixlen": 64}, ln),
    ]
    if link.a_node.startswith("h"):
        h = t.host_index(link.a_node)
        ops.append(Op("addr", link.a_node,
                      {"ifname": link.a_if, "address": t.port_address(h, link.plane), "prefixlen": 128}, ln))
    ops += [
        Op("up", link.a_node, {"ifname": link.a_if}, ln),
        Op("up", link.b_node, {"ifname": link.b_if}, ln),
        Op("neigh", link.a_node, {"ifname": link.a_if, "address": link.b_ll, "lladdr": b_mac}, ln),
        Op("neigh", link.b_node, {"ifname": link.b_if, "address": link.a_ll, "lladdr": a_mac}, ln),
    ]
    return ops


def link_routes(t: Topology, link, routing: str = "static") -> list[Op]:
    """Routes that leave through one of this link's ends (re-run by heal)."""
    ln = (link.name,)
    p = link.plane
    ops: list[Op] = []
    if link.a_node.startswith("h"):
        h = t.host_index(link.a_node)
        leaf = t.host_leaf(h)
        # host -> its leaf: everything in the plane's block goes up
        ops.append(Op("route", link.a_node, {"dst": usid_prefix(t.leaf_usid(p, leaf)),
                                             "gateway": link.b_ll, "ifname": link.a_if}, ln))
        # leaf -> host: the host port's uSID goes down
        ops.append(Op("route", link.b_node, {"dst": usid_prefix(t.port_usid(h, p)),
                                             "gateway": link.a_ll, "ifname": link.b_if}, ln))
        if routing == "bgp":
            return ops + bgp_host_routes(t, link, h)
        # kernel traffic: decapsulate what arrives for our End.DT6 function
        ops.append(Op("dt6", link.a_node, {"prefix": t.dt6_prefix(h, p), "ifname": link.a_if, "table": 255}, ln))
        for d in range(t.hosts):
            if d == h:
                continue
            segment = t.kernel_path_address(h, d, p)
            ops.append(Op("encap", link.a_node, {"dst": t.inner_address(d, p) + "/128", "segment": segment,
                                                 "ifname": link.a_if, "prefsrc": t.inner_address(h, p)}, ln))
            ops.append(Op("encap", link.a_node, {"dst": t.inner_host_prefix(d), "segment": segment,
                                                 "ifname": link.a_if, "table": KERNEL_TABLE_BASE + p}, ln))
    else:
        leaf_i = int(link.a_node.split("l")[1])
        s = int(link.b_node.split("s")[1])
        ops.append(Op("route", link.a_node, {"dst": usid_prefix(t.spine_usid(p, s)),
                                             "gateway": link.b_ll, "ifname": link.a_if}, ln))
        ops.append(Op("route", link.b_node, {"dst": usid_prefix(t.leaf_usid(p, leaf_i)),
                                             "gateway": link.a_ll, "ifname": link.b_if}, ln))
    return ops


def bgp_host_routes(t: Topology, link, h: int) -> list[Op]:
    """Kernel traffic without SRv6, for a fabric routed by BGP: the host sends plain IPv6 to its
    plane-``p`` leaf (each peer's plane-``p`` address in the main table, every kernel address in
    table 100 + ``p``), and the leaf routes the host's kernel prefix down its port; the leaf
    announces that prefix to the spines (mrc.fabric.bgp), so every plane reaches every host."""
    ln, p = (link.name,), link.plane
    ops = [Op("route", link.b_node, {"dst": t.inner_host_prefix(h), "gateway": link.a_ll, "ifname": link.b_if}, ln),
           Op("route", link.a_node, {"dst": INNER_PREFIX + "::/16", "gateway": link.b_ll, "ifname": link.a_if,
                                     "table": KERNEL_TABLE_BASE + p}, ln)]
    for d in range(t.hosts):
        if d != h:
            ops.append(Op("route", link.a_node, {"dst": t.inner_address(d, p) + "/128", "gateway": link.b_ll,
                                                 "ifname": link.a_if, "prefsrc": t.inner_address(h, p)}, ln))
    return ops


def link_ops(t: Topology, link_name: str, routing: str = "static") -> list[Op]:
    """What ``heal`` re-applies for one link, in plan order."""
    link = t.link(link_name)
    return link_config(t, link) + link_routes(t, link, routing)
