"""The executor of a fabric's plan: runs netlink operations (mrc.fabric.plan's
``Op``) in the fabric's namespaces with one socket per namespace, and on a
kernel without SRv6 puts the same behaviours on the ports as tc-BPF
programs (mrc.fabric.srv6bpf). mrc.fabric.apply drives it to build, heal
and change a fabric."""

from __future__ import annotations

import errno
import os
import socket
from contextlib import suppress

from mrc.errors import FabricError
from mrc.fabric import gsobpf, nl, ns, srv6bpf
from mrc.fabric.plan import Op
from mrc.fabric.topology import Link, Topology


def pyroute2():
    """pyroute2's IPRoute and netns, imported when first needed."""
    from pyroute2 import IPRoute, netns

    return IPRoute, netns


def nft(t: Topology, node: str, script: str) -> None:
    """Run an nftables script in ``node``'s namespace."""
    r = ns.command(t.ns(node), ["nft", "-f", "-"], input=script, text=True, capture_output=True)
    if r.returncode != 0:
        raise FabricError(f"nft in {t.ns(node)} failed: {r.stderr.strip()} (is nftables installed?)")


class Executor:
    """Runs plan operations; keeps one netlink socket per namespace."""

    def __init__(self, t: Topology) -> None:
        self.t = t
        self.IPRoute, self.netns = pyroute2()
        self._ipr: dict[str, object] = {}
        self._nl: dict[str, nl.NetlinkRoute] = {}
        self._idx: dict[tuple[str, str], int] = {}
        self.srv6_bpf = False  # a kernel without SRv6 refused a seg6local or seg6 route: tc BPF instead
        self._segs: dict[tuple[str, str], int] = {}  # a host port -> its encap program's segs map
        self.gso_missing: str | None = None  # why the host ports have no host_gso program

    def ipr(self, node: str):
        """pyroute2's IPRoute inside ``node``'s namespace (one per node)."""
        if node not in self._ipr:
            self._ipr[node] = self.IPRoute(netns=self.t.ns(node))
        return self._ipr[node]

    def raw(self, node: str) -> nl.NetlinkRoute:
        """Our netlink socket inside ``node``'s namespace, for the routes pyroute2 mangles."""
        if node not in self._nl:
            sock = ns.run_in(self.t.ns(node), lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))
            self._nl[node] = nl.NetlinkRoute(sock)
        return self._nl[node]

    def index(self, node: str, ifname: str) -> int:
        """The interface index of ``ifname`` in ``node``."""
        key = (node, ifname)
        if key not in self._idx:
            found = self.ipr(node).link_lookup(ifname=ifname)
            if not found:
                raise FabricError(f"interface {ifname} not found in {self.t.ns(node)}")
            self._idx[key] = found[0]
        return self._idx[key]

    def close(self) -> None:
        """Close every netlink socket and BPF map this executor opened."""
        for i in self._ipr.values():
            with suppress(Exception):
                i.close()
        for r in self._nl.values():
            r.close()
        for fd in self._segs.values():
            os.close(fd)
        self._ipr.clear()
        self._nl.clear()
        self._segs.clear()

    def run(self, ops: list[Op], exist_ok: bool = False) -> None:
        """Run ``ops`` in order (``exist_ok``: what exists already is not an error)."""
        for op in ops:
            try:
                getattr(self, "op_" + op.kind)(op.node, **op.args)
            except Exception as e:
                # OSError carries errno, pyroute2's NetlinkError carries code
                code = getattr(e, "errno", None) or getattr(e, "code", None)
                if exist_ok and code == errno.EEXIST:
                    continue
                raise FabricError(f"{self.t.ns(op.node)}: {op.kind} {op.args}: {e}") from e

    # one method per op kind ----------------------------------------------
    def op_netns(self, node: str) -> None:
        """Create the node's namespace."""
        self.netns.create(self.t.ns(node))

    def op_sysctl(self, node: str, values: dict) -> None:
        """Write sysctls inside the node."""
        ns.write_sysctls(self.t.ns(node), values)

    def op_up(self, node: str, ifname: str) -> None:
        """Set an interface up."""
        self.ipr(node).link("set", index=self.index(node, ifname), state="up")

    def op_down(self, node: str, ifname: str) -> None:
        """Set an interface down."""
        self.ipr(node).link("set", index=self.index(node, ifname), state="down")

    def op_mtu(self, node: str, ifname: str, mtu: int) -> None:
        """Set an interface's MTU."""
        self.ipr(node).link("set", index=self.index(node, ifname), mtu=mtu)

    def op_bridge(self, node: str, ifname: str) -> None:
        """Create a bridge."""
        self.ipr(node).link("add", ifname=ifname, kind="bridge")

    def op_veth(self, node: str, ifname: str, peer_node: str, peer_ifname: str,
                address: str | None = None, peer_address: str | None = None) -> None:
        """Create a veth pair between two nodes."""
        peer = {"ifname": peer_ifname, "net_ns_fd": self.t.ns(peer_node)}
        extra = {}
        if address:
            extra["address"] = address
            peer["address"] = peer_address
        self.ipr(node).link("add", ifname=ifname, kind="veth", peer=peer, **extra)

    def op_neigh(self, node: str, ifname: str, address: str, lladdr: str) -> None:
        # NUD_PERMANENT (0x80); "replace" so that a heal simply rewrites it
        """A static neighbour entry."""
        self.ipr(node).neigh("replace", dst=address, lladdr=lladdr, ifindex=self.index(node, ifname),
                             state=0x80, family=socket.AF_INET6)

    def op_master(self, node: str, ifname: str, master: str) -> None:
        """Enslave an interface to a bridge."""
        self.ipr(node).link("set", index=self.index(node, ifname), master=self.index(node, master))

    def op_addr(self, node: str, ifname: str, address: str, prefixlen: int) -> None:
        # IFA_F_NODAD: the address is usable at once (no duplicate detection wait)
        """Add an address to an interface."""
        self.ipr(node).addr("add", index=self.index(node, ifname), address=address,
                            prefixlen=prefixlen, flags=0x02)

    def op_route(self, node: str, dst: str, gateway: str, ifname: str, table: int = nl.RT_TABLE_MAIN,
                 prefsrc: str | None = None) -> None:
        """Add a route through a gateway (in ``table``, with a preferred source address)."""
        extra = {"prefsrc": prefsrc} if prefsrc else {}
        self.ipr(node).route("add", dst=dst, gateway=gateway, oif=self.index(node, ifname), table=table, **extra)

    def op_rule(self, node: str, src: str, table: int, priority: int) -> None:
        """Add a policy routing rule for a source address."""
        self.ipr(node).rule("add", family=socket.AF_INET6, src=src, src_len=128,
                            table=table, priority=priority)

    def op_nft(self, node: str, script: str) -> None:
        """Load an nftables script."""
        nft(self.t, node, script)

    def op_gso(self, node: str, ifnames: list[str]) -> None:
        """A host's ports' egress program for MRC's buffers of k packets (mrc.fabric.gsobpf). Where
        it cannot be built (no clang), the fabric works without it: its contexts send one packet
        per buffer."""
        try:
            gsobpf.attach(self.t, node, ifnames)
        except FabricError as e:
            self.gso_missing = str(e)

    def op_end(self, node: str, prefix: str, ifname: str) -> None:
        """A switch's End with NEXT-C-SID for its uSID (tc BPF on a kernel without SRv6)."""
        try:
            self.raw(node).add(prefix, self.index(node, ifname), nl.end_next_csid(32, 16))
        except OSError as e:
            if e.errno != errno.EOPNOTSUPP:
                raise
            srv6bpf.end_program(self.t, node, prefix)  # a kernel without SRv6: the same End in tc BPF
            self.srv6_bpf = True

    def op_dt6(self, node: str, prefix: str, ifname: str, table: int) -> None:
        """A host's End.DT6 for kernel traffic (tc BPF on a kernel without SRv6)."""
        try:
            self.raw(node).add(prefix, self.index(node, ifname), nl.end_dt6(table))
        except OSError as e:
            if e.errno != errno.EOPNOTSUPP:
                raise
            self._host_port(node, ifname)  # the End.DT6 (and the encap) in tc BPF
            self.srv6_bpf = True

    def op_encap(self, node: str, dst: str, segment: str, ifname: str, prefsrc: str | None = None,
                 table: int = nl.RT_TABLE_MAIN) -> None:
        """A host's seg6 encap.red route to a peer (tc BPF on a kernel without SRv6)."""
        oif = self.index(node, ifname)
        try:
            self.raw(node).add(dst, oif, nl.encap_red(segment), table=table, prefsrc=prefsrc)
            return
        except OSError as e:
            if e.errno != errno.EOPNOTSUPP:
                raise
        # a kernel without SRv6: a plain route to the port's leaf, with room for the outer header
        # the port's encap program adds (with this segment)
        self.raw(node).add(dst, oif, None, table=table, prefsrc=prefsrc, gateway=Link.b_ll,
                           mtu=srv6bpf.ENCAP_ROUTE_MTU)
        srv6bpf.set_segment(self._host_port(node, ifname), dst, segment)
        self.srv6_bpf = True

    def _host_port(self, node: str, ifname: str) -> int:
        """The host port's encap and End.DT6 programs (srv6bpf.host_port), attached once per
        executor; returns its ``segs`` map, kept open until :meth:`close`."""
        key = (node, ifname)
        if key not in self._segs:
            self._segs[key] = srv6bpf.host_port(self.t, node, ifname)
        return self._segs[key]
