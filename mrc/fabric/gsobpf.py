"""The host ports' egress program for MRC's buffers of k packets
(``csrc/bpf/host_gso.bpf.c``): a UDP send of the engine (``mrc_ctx_set_gso``)
carries its EV in its mark, and the program writes it into the flow label and
the UDP source port and moves the checksum to the final destination, as
protocol.md section 2 has it. Every other packet passes untouched. Attached on
clsact egress of every host port when the fabric is built and healed; a
context sends buffers only through ports that have it (:func:`ready`;
mrc.fabric.apply.packets_per_buffer says what a context may ask for)."""

from __future__ import annotations

import struct

from mrc.errors import FabricError
from mrc.fabric import tcbpf
from mrc.fabric.topology import Topology

GSO_PRIO = 2  # after the SRv6 encap's (srv6bpf.HOST_PRIO), before the port queue's (qos.PRIO)
_ST = struct.Struct("<2Q")  # fixed, dropped


def attach(t: Topology, node: str, ifnames: list[str]) -> None:
    """Put the program on ``node``'s ports ``ifnames`` (again: ``filter replace``), in one ``tc``.
    Raises FabricError when it cannot be built or loaded."""
    obj = tcbpf.build("host_gso", "buffers of k MRC packets (mrc_ctx_set_gso)")
    r = tcbpf.tc_batch(t, node, [x for i in ifnames for x in (
        f"qdisc replace dev {i} clsact",
        f"filter replace dev {i} egress prio {GSO_PRIO} handle 1 bpf direct-action obj {obj} sec tc")])
    if r.returncode != 0:
        raise FabricError(f"attaching host_gso in {t.ns(node)} failed: {r.stderr.strip()}")


def ready(t: Topology, node: str, ifnames: list[str]) -> bool:
    """Whether every one of the host's ports ``ifnames`` has the program."""
    return all("host_gso" in found for found in tcbpf.prog_ids(t, node, [(i, "egress") for i in ifnames]))


def counters(t: Topology, node: str, ifname: str) -> dict | None:
    """The program's counts on a port (None: no program there)."""
    with tcbpf.port_maps(t, node, ifname, "host_gso", "egress") as maps:
        if maps is None:
            return None
        fixed, dropped = _ST.unpack(tcbpf.map_rw(maps["st"], None, _ST.size))
        return {"fixed": fixed, "dropped": dropped}
