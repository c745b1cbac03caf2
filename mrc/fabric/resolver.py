"""The fabric's path resolver: a fabric's address plan (mrc.fabric.topology)
in the topology format of docs/topology.md, so the stack reaches fabric
hosts the way it reaches any other (mrc.paths).

In one process: ``resolver(t, "h0")``. For other processes, ``mrc fabric
up`` saves the plan as a topology file next to the fabric's state
(``write``), ``mrc fabric exec`` hands its path to the command as
``MRC_TOPOLOGY`` (with ``MRC_HOST``), and ``mrc fabric topology`` prints it.

>>> from mrc.fabric.topology import Topology
>>> r = resolver(Topology(planes=2, spines=2, leaves=2, hosts=2), "h0")
>>> r.local_ports(), r.paths("h1", 1)
([('p0', 0), ('p1', 1)], ['fc00:0:1100:2100:1101:b101::', 'fc00:0:1100:2101:1101:b101::'])
>>> r.describe('fc00:0:1100:2100:1101:b101::')
{'hops': ['p1l0', 'p1s0', 'p1l1'], 'host': 'h1'}
"""

from __future__ import annotations

import json
import os

from mrc.fabric.topology import BLOCK, BLOCK_BITS, Topology
from mrc.paths import TopologyResolver


def export(t: Topology) -> dict:
    """The fabric as a topology dict: hosts with their ports and management
    addresses, every path (one address per spine), and the names of the uSIDs."""
    hosts = {t.host(h): {"mgmt": t.mgmt_address(h),
                         "ports": [{"plane": p, "ifname": t.port_ifname(p), "address": t.port_address(h, p)}
                                   for p in range(t.planes)]}
             for h in range(t.hosts)}
    paths = [{"src": t.host(s), "dst": t.host(d), "plane": p,
              "addresses": [t.path_address(s, d, p, sp) for sp in range(t.spines)]}
             for s in range(t.hosts) for d in range(t.hosts) if s != d for p in range(t.planes)]
    names = {}
    for p in range(t.planes):
        names.update({f"{t.leaf_usid(p, i):04x}": t.leaf(p, i) for i in range(t.leaves)})
        names.update({f"{t.spine_usid(p, i):04x}": t.spine(p, i) for i in range(t.spines)})
        names.update({f"{t.port_usid(h, p):04x}": t.host(h) for h in range(t.hosts)})
    return {"name": t.name, "hosts": hosts, "paths": paths,
            "usids": {"block": f"{BLOCK}::/{BLOCK_BITS}", "names": names}}


def resolver(t: Topology, host: str | None = None) -> TopologyResolver:
    """The resolver of fabric ``t`` as seen from ``host`` (h0, h1, ...)."""
    return TopologyResolver(export(t), host, source=f"fabric {t.name}")


def write(t: Topology, path: str) -> str:
    """Save the fabric's topology file at ``path``; returns it."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(export(t), f, indent=1)
    os.replace(tmp, path)
    return path
