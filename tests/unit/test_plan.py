from collections import Counter

from mrc.fabric.plan import link_ops, plan
from mrc.fabric.topology import Topology


def t():
    return Topology(planes=2, spines=2, leaves=2, hosts=2, name="t")


def test_namespaces_come_first_one_per_node():
    ops = plan(t())
    n = len(t().nodes())
    assert [o.kind for o in ops[:n]] == ["netns"] * n
    assert {o.node for o in ops[:n]} == set(t().nodes())
    assert all(o.kind != "netns" for o in ops[n:])


def test_sysctls_before_any_interface_and_forwarding_only_on_switches():
    ops = plan(t())
    first_veth = next(i for i, o in enumerate(ops) if o.kind == "veth")
    assert all(i < first_veth for i, o in enumerate(ops) if o.kind == "sysctl")
    for o in ops:
        if o.kind == "sysctl":
            fwd = o.args["values"].get("net.ipv6.conf.all.forwarding")
            assert (fwd == "1") == (o.node.startswith("p"))


def test_every_switch_has_one_end_route_for_its_own_usid():
    topo = t()
    ends = [o for o in plan(topo) if o.kind == "end"]
    assert Counter(o.node for o in ends) == Counter(topo.switch_nodes())
    assert {o.args["prefix"] for o in ends if o.node == "p1s0"} == {"fc00:0:2100::/48"}


def test_every_link_is_a_veth_created_before_it_is_configured():
    topo = t()
    ops = plan(topo)
    for link in topo.links():
        idx = [i for i, o in enumerate(ops) if link.name in o.links]
        assert ops[idx[0]].kind == "veth"
        kinds = {ops[i].kind for i in idx}
        assert {"veth", "mtu", "addr", "up", "route"} <= kinds


def test_routes_point_toward_the_next_usid_in_both_directions():
    topo = t()
    routes = [(o.node, o.args["dst"]) for o in plan(topo) if o.kind == "route"]
    assert ("p0l0", "fc00:0:2001::/48") in routes  # leaf -> spine 1
    assert ("p0s1", "fc00:0:1000::/48") in routes  # spine 1 -> leaf 0
    assert ("p0l1", "fc00:0:b001::/48") in routes  # leaf -> host port
    assert ("h1", "fc00:0:1001::/48") in routes    # host -> its leaf


def test_heal_reapplies_addresses_and_routes_of_that_link_only():
    topo = t()
    ops = link_ops(topo, "h0-p1l0")
    assert ops and all(o.links == ("h0-p1l0",) for o in ops)
    kinds = [o.kind for o in ops]
    assert kinds.count("up") == 2 and "dt6" in kinds and "encap" in kinds
    assert "veth" not in kinds


def test_kernel_traffic_routes_for_every_other_host_and_plane():
    topo = Topology(name="t")
    enc = [o for o in plan(topo) if o.kind == "encap" and o.node == "h0"]
    # per plane: 3 other hosts, one main-table route and one per-plane table route each
    assert len(enc) == topo.planes * 3 * 2


def test_loss_ruleset_thresholds():
    from mrc.fabric.apply import loss_ruleset

    assert "numgen random mod 10000 < 2000 counter drop" in loss_ruleset("l0", 20)
    assert "numgen random mod 10000 < 1 counter drop" in loss_ruleset("l0", 0.01)
    full = loss_ruleset("l0", 100)  # nftables refuses "< 10000": everything is dropped instead
    assert "numgen" not in full and 'iifname "l0" counter drop' in full and 'oifname "l0" counter drop' in full


def test_the_carrier_wait_covers_every_veth_end_the_plan_sets_up_and_no_other():
    from mrc.fabric.apply import veths_set_up

    ops = plan(t())
    ends = veths_set_up(ops)
    veths = [o for o in ops if o.kind == "veth"]
    assert len(ends) == 2 * len(veths)  # the plan sets up every end of every veth
    assert all((o.node, o.args["ifname"]) in ends and (o.args["peer_node"], o.args["peer_ifname"]) in ends
               for o in veths)
    # an end the plan leaves down, and an interface set up that is no veth (lo, the bridge), are not waited for
    left_down = [o for o in ops if not (o.kind == "up" and (o.node, o.args["ifname"]) == (veths[0].node,
                                                                                            veths[0].args["ifname"]))]
    assert veths_set_up(left_down) == ends - {(veths[0].node, veths[0].args["ifname"])}
    assert not any(i in ("lo", "br0") for _, i in ends)
    assert veths_set_up([]) == set()



def test_a_kernel_without_srv6_gets_the_end_program_and_no_kernel_traffic(monkeypatch):
    """This machine's kernel of 2026-12-04 was built without CONFIG_IPV6_SEG6_LWTUNNEL: every
    seg6local and seg6 route came back EOPNOTSUPP and `mrc demo` said only "Operation not
    supported". A refused End route now puts the same End in tc BPF on the switch's ports; a
    refused End.DT6 or encap route leaves the hosts without kernel traffic, and the fabric's state
    says so; any other refusal stays an error."""
    import errno

    import pytest

    from mrc.errors import FabricError
    from mrc.fabric import apply, qos
    from mrc.fabric.plan import Op

    attached = []
    monkeypatch.setattr(qos, "end_program", lambda t, node, prefix: attached.append((node, prefix)))

    class Raw:
        def __init__(self, code):
            self.code = code

        def add(self, *a, **k):
            raise OSError(self.code, "refused")

    class Refusing(apply.Executor):
        def __init__(self, t, code):  # no netlink: every route is refused with code
            self.t, self.code, self.no_kernel_traffic = t, code, False

        def raw(self, node):
            return Raw(self.code)

        def index(self, node, ifname):
            return 1

    ex = Refusing(t(), errno.EOPNOTSUPP)
    ex.run([Op("end", "p0l0", {"prefix": "fc00:0:1000::/48", "ifname": "usid0"})])
    assert attached == [("p0l0", "fc00:0:1000::/48")] and not ex.no_kernel_traffic
    ex.run([Op("dt6", "h0", {"prefix": "fc00:0:b000::/48", "ifname": "p0", "table": 255})])
    assert ex.no_kernel_traffic
    ex2 = Refusing(t(), errno.EOPNOTSUPP)
    ex2.run([Op("encap", "h0", {"dst": "fd00::1/128", "segment": "fc00:0:1000::", "ifname": "p0"})])
    assert ex2.no_kernel_traffic
    for kind, args in (("end", {"prefix": "fc00:0:1000::/48", "ifname": "usid0"}),
                       ("dt6", {"prefix": "fc00:0:b000::/48", "ifname": "p0", "table": 255})):
        other = Refusing(t(), errno.EINVAL)  # anything else is an error, as before
        with pytest.raises(FabricError, match="refused"):
            other.run([Op(kind, "p0l0", args)])
        assert not other.no_kernel_traffic
    assert len(attached) == 1


def test_the_state_says_whether_kernel_traffic_runs_and_keeps_it_through_later_writes(tmp_path, monkeypatch):
    """kernel_traffic is False only where up() found a kernel without SRv6; a state file of an older
    version (no key), a fault recorded later, or a state file cut short do not turn it on or off."""
    import json

    import pytest

    from mrc.errors import FabricError, SRv6Missing
    from mrc.fabric import apply

    monkeypatch.setattr(apply, "STATE_DIR", str(tmp_path))
    topo = t()
    apply.save_state(topo)
    assert apply.kernel_traffic(topo.name) is True
    apply.save_state(topo, kernel_traffic=False)
    apply.save_state(topo, {"h0-p0l0": {"down": True}})  # a fault: the flag stays
    assert apply.kernel_traffic(topo.name) is False
    with pytest.raises(SRv6Missing, match="kernel TCP crosses the fabric"):
        apply.require_kernel_traffic(topo.name, "kernel TCP")
    path = apply.state_path(topo.name)
    st = json.load(open(path))
    del st["kernel_traffic"]  # written by an older mrc
    json.dump(st, open(path, "w"))
    assert apply.kernel_traffic(topo.name) is True
    apply.require_kernel_traffic(topo.name, "kernel TCP")
    open(path, "w").write('{"topology": ')  # cut short: rewritten whole, kernel traffic as a fresh fabric
    apply.save_state(topo)
    assert apply.kernel_traffic(topo.name) is True
    with pytest.raises(FabricError, match="no fabric named"):
        apply.kernel_traffic("nosuchfab")
