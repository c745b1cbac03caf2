"""The BGP fabric's plan and routing daemons' configuration, as pure data (no root)."""
import pytest

from mrc.fabric import bgp
from mrc.fabric.plan import link_ops, plan
from mrc.fabric.topology import Topology


def t():
    return Topology(planes=2, spines=3, leaves=2, hosts=4, name="t")


def test_bgp_kernel_traffic_is_plain_ipv6_with_no_encap_and_the_usid_routes_unchanged():
    static, routed = plan(t()), plan(t(), "bgp")
    assert not [o for o in routed if o.kind in ("encap", "dt6")]
    assert [o for o in static if o.kind in ("encap", "dt6")]
    usid = [(o.node, o.args["dst"]) for o in static if o.kind == "route"]
    assert usid == [(o.node, o.args["dst"]) for o in routed if o.kind == "route" and o.args["dst"].startswith("fc00")]
    # the leaf routes its hosts' kernel prefixes down their ports; the host reaches each peer's plane address
    # through that plane's leaf (main table, its own source) and every kernel address in table 100 + plane
    leaf = {(o.node, o.args["dst"], o.args["ifname"]) for o in routed if o.kind == "route" and o.node == "p1l1"}
    assert ("p1l1", "fd6d:2::/32", "h2") in leaf and ("p1l1", "fd6d:3::/32", "h3") in leaf
    h0 = [o.args for o in routed if o.kind == "route" and o.node == "h0" and o.args["dst"].startswith("fd6d")]
    assert {"dst": "fd6d:3:1::1/128", "gateway": "fe80::1", "ifname": "p1", "prefsrc": "fd6d:0:1::1"} in h0
    assert {"dst": "fd6d::/16", "gateway": "fe80::1", "ifname": "p0", "table": 100} in h0
    # a switch hashes flows by their 5-tuple only with BGP
    hashes = {o.node: o.args["values"].get("net.ipv6.fib_multipath_hash_policy") for o in routed
              if o.kind == "sysctl" and o.node.startswith("p")}
    assert set(hashes.values()) == {"3"}  # the custom policy, over the 5-tuple
    assert not any("net.ipv6.fib_multipath_hash_policy" in o.args["values"] for o in static if o.kind == "sysctl")


def test_heal_of_a_host_link_reapplies_its_bgp_routes():
    kinds = [(o.node, o.kind, o.args.get("dst")) for o in link_ops(t(), "h2-p0l1", "bgp")]
    assert ("p0l1", "route", "fd6d:2::/32") in kinds and ("h2", "route", "fd6d::/16") in kinds
    assert not [k for k in kinds if k[1] in ("encap", "dt6")]
    with pytest.raises(ValueError, match="unknown routing"):
        plan(t(), "ospf")


def test_asns_follow_rfc7938_one_per_leaf_one_per_plane_of_spines():
    topo = t()
    leaves = {bgp.leaf_asn(p, i) for p in range(topo.planes) for i in range(topo.leaves)}
    assert len(leaves) == topo.planes * topo.leaves
    spines = {bgp.spine_asn(p) for p in range(topo.planes)}
    assert len(spines) == topo.planes and not spines & leaves
    assert all(4_200_000_000 <= a <= 4_294_967_294 for a in leaves | spines)  # RFC 6996 private range


def test_leaf_config_announces_its_hosts_and_peers_every_spine_with_bfd():
    conf = bgp.config(t(), "p1l1")
    assert f"router bgp {bgp.leaf_asn(1, 1)}" in conf
    assert [line.strip() for line in conf.splitlines() if "network" in line and "import" not in line] == [
        "network fd6d:2::/32", "network fd6d:3::/32"]
    for s in range(3):
        assert f" neighbor s{s} interface peer-group FABRIC" in conf.splitlines()
    assert "neighbor FABRIC bfd profile fabric" in conf and f"receive-interval {bgp.BFD_INTERVAL_MS}" in conf
    assert "bgp bestpath as-path multipath-relax" in conf and "maximum-paths 64" in conf


def test_spine_config_peers_every_leaf_and_announces_nothing():
    conf = bgp.config(t(), "p0s2")
    assert f"router bgp {bgp.spine_asn(0)}" in conf and "network fd6d" not in conf
    assert [line for line in conf.splitlines() if "interface peer-group" in line] == [
        " neighbor l0 interface peer-group FABRIC", " neighbor l1 interface peer-group FABRIC"]
    ids = {bgp.config(t(), n).split("bgp router-id ")[1].split()[0] for n in t().switch_nodes()}
    assert len(ids) == len(t().switch_nodes())  # every router id unique


def test_a_host_or_unknown_node_gets_no_config():
    from mrc.errors import FabricError

    for node in ("h0", "p9l0", "mgmt"):
        with pytest.raises(FabricError, match="not a switch"):
            bgp.config(t(), node)


def test_without_bfd_the_config_has_no_bfd_at_all():
    conf = bgp.config(t(), "p0l0", bfd_ms=0)
    assert "bfd" not in conf and "router bgp" in conf
    assert "ipv6 nd ra-interval msec" not in bgp.config(t(), "p0l0")  # (a ms interval costs zebra a 10 ms tick)
