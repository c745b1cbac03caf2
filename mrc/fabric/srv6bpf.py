"""The fabric's SRv6 in tc BPF, for a kernel built without SRv6.

A kernel without ``CONFIG_IPV6_SEG6_LWTUNNEL`` refuses seg6local and seg6
routes (EOPNOTSUPP). :class:`mrc.fabric.executor.Executor` then puts the same
behaviours on the ports as tc-BPF programs (built and found by
:mod:`mrc.fabric.tcbpf`), and everything else of the fabric (addresses, static
routes, the switch queues) stays as it is:

- a switch's End next-CSID (``csrc/bpf/usid_end.bpf.c``), clsact ingress of
  every port of the switch: :func:`end_program`;
- a host's seg6 encap.red (``csrc/bpf/host_encap.bpf.c``), clsact egress of
  each host port, and its End.DT6 (``csrc/bpf/host_decap.bpf.c``), clsact
  ingress: :func:`host_port` attaches both; the encap routes become plain
  routes to the port's leaf with room for the outer header
  (:data:`ENCAP_ROUTE_MTU`), and the program adds that header with the path's
  segment (:func:`set_segment`). Kernel TCP and MPTCP then cross the fabric as
  they do with the kernel's SRv6.

The fabric's state records which it runs (``srv6``: ``kernel`` or
``tc-bpf``).
"""

from __future__ import annotations

import os
import socket
import struct

from mrc.errors import FabricError
from mrc.fabric import tcbpf
from mrc.fabric.plan import LINK_MTU
from mrc.fabric.qos import switch_ports
from mrc.fabric.topology import Topology

END_PRIO = 1  # the End program's preference on clsact ingress
HOST_PRIO = 1  # the host port programs' (egress: before the port queue's, mrc.fabric.qos.PRIO)
ENCAP_ROUTE_MTU = LINK_MTU - 40  # an inner packet and its outer IPv6 header fit the link
WHO = "the fabric on a kernel without SRv6"

_ENCAP_ST = struct.Struct("<2Q")  # encapsulated, dropped
_DECAP_ST = struct.Struct("<3Q")  # decapsulated, CE copied inward, dropped


def _attach(t: Topology, node: str, lines: list[str], what: str) -> None:
    r = tcbpf.tc_batch(t, node, lines)
    if r.returncode != 0:
        raise FabricError(f"attaching {what} in {t.ns(node)} failed: {r.stderr.strip()}")


def _maps(t: Topology, node: str, ifname: str, name: str, hook: str, pid: int | None):
    """The maps of program ``name`` (its id ``pid``, from tcbpf.prog_ids) on a port."""
    if pid is None:
        raise FabricError(f"the {name} program did not load on {node}:{ifname} "
                          f"(see `tc -n {t.ns(node)} filter show dev {ifname} {hook}`)")
    return tcbpf.prog_maps(pid)


def _close(maps: dict[str, int], keep: str | None = None) -> None:
    for name, fd in maps.items():
        if name != keep:
            os.close(fd)


# ------------------------------------------------------------------ switches
def end_program(t: Topology, node: str, prefix: str) -> None:
    """Switch ``node``'s End next-CSID for its uSID ``prefix`` (block:uSID::/48) as a tc-BPF
    program on clsact ingress of every one of its fabric ports (csrc/bpf/usid_end.bpf.c). Raises
    FabricError if it does not load."""
    addr = socket.inet_pton(socket.AF_INET6, prefix.split("/")[0])
    obj = tcbpf.build("usid_end", f"the switches of {WHO}")
    ifnames = [i for _, i, _ in switch_ports(t, node)]
    _attach(t, node, [x for i in ifnames for x in (
        f"qdisc replace dev {i} clsact",
        f"filter replace dev {i} ingress prio {END_PRIO} handle 1 bpf direct-action obj {obj} sec tc")],
        "the End program")
    ids = tcbpf.prog_ids(t, node, [(i, "ingress") for i in ifnames])
    for i, found in zip(ifnames, ids, strict=True):
        maps = _maps(t, node, i, "usid_end", "ingress", found.get("usid_end"))
        try:
            tcbpf.map_rw(maps["cfg"], addr[:6] + b"\0\0", 8)
        finally:
            _close(maps)


def end_shifted(t: Topology, node: str, ifname: str) -> int | None:
    """Packets the End program of a switch port has shifted (None: the port has no program, as on a
    kernel with SRv6)."""
    with tcbpf.port_maps(t, node, ifname, "usid_end", "ingress") as maps:
        return None if maps is None else struct.unpack("<Q", tcbpf.map_rw(maps["st"], None, 8))[0]


# ------------------------------------------------------------------ hosts
def host_port(t: Topology, node: str, ifname: str) -> int:
    """Host ``node``'s port ``ifname`` (``p<plane>``) gets the encap program on clsact egress and
    the End.DT6 program on ingress, unless it has them (a heal: they and their maps stay), with
    the port's address as the outer source and its End.DT6 prefix. Returns an open fd of the
    encap program's ``segs`` map (:func:`set_segment`; the caller closes it)."""
    h, p = t.host_index(node), int(ifname[1:])
    hooks = [(ifname, "egress"), (ifname, "ingress")]
    egress, ingress = tcbpf.prog_ids(t, node, hooks)
    if "host_encap" not in egress or "host_decap" not in ingress:
        objs = [tcbpf.build(n, f"the hosts of {WHO}") for n in ("host_encap", "host_decap")]
        _attach(t, node, [
            f"qdisc replace dev {ifname} clsact",
            f"filter replace dev {ifname} egress prio {HOST_PRIO} handle 1 bpf direct-action obj {objs[0]} sec tc",
            f"filter replace dev {ifname} ingress prio {HOST_PRIO} handle 1 bpf direct-action obj {objs[1]} sec tc"],
            "the encap and End.DT6 programs")
        egress, ingress = tcbpf.prog_ids(t, node, hooks)
    dmaps = _maps(t, node, ifname, "host_decap", "ingress", ingress.get("host_decap"))
    try:
        dt6 = socket.inet_pton(socket.AF_INET6, t.dt6_prefix(h, p).split("/")[0])
        tcbpf.map_rw(dmaps["cfg"], dt6[:8], 8)
    finally:
        _close(dmaps)
    emaps = _maps(t, node, ifname, "host_encap", "egress", egress.get("host_encap"))
    try:
        tcbpf.map_rw(emaps["cfg"], socket.inet_pton(socket.AF_INET6, t.port_address(h, p)), 16)
    except BaseException:
        _close(emaps)
        raise
    _close(emaps, keep="segs")
    return emaps["segs"]


def set_segment(segs_fd: int, inner_dst: str, segment: str) -> None:
    """Packets to ``inner_dst`` (an inner address or prefix, ``fd6d:<host>:...``) leave the port
    whose ``segs`` map this is inside an outer header to ``segment``."""
    host = struct.unpack("!H", socket.inet_pton(socket.AF_INET6, inner_dst.split("/")[0])[2:4])[0]
    tcbpf.map_rw(segs_fd, socket.inet_pton(socket.AF_INET6, segment), 16, key=host)


def host_counters(t: Topology, node: str, ifname: str) -> dict | None:
    """A host port's encap and End.DT6 counters (None: it has no programs, as on a kernel with
    SRv6): encapsulated, encap_dropped, decapsulated, ce_copied, decap_dropped."""
    with tcbpf.port_maps(t, node, ifname, "host_encap", "egress") as e, \
            tcbpf.port_maps(t, node, ifname, "host_decap", "ingress") as d:
        if e is None or d is None:
            return None
        enc = _ENCAP_ST.unpack(tcbpf.map_rw(e["st"], None, _ENCAP_ST.size))
        dec = _DECAP_ST.unpack(tcbpf.map_rw(d["st"], None, _DECAP_ST.size))
    return dict(zip(("encapsulated", "encap_dropped", "decapsulated", "ce_copied", "decap_dropped"), enc + dec,
                    strict=True))
