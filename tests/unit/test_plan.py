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



def test_a_kernel_without_srv6_gets_the_same_behaviours_in_tc_bpf(monkeypatch):
    """This machine's kernel of 2026-12-04 was built without CONFIG_IPV6_SEG6_LWTUNNEL: every
    seg6local and seg6 route came back EOPNOTSUPP and `mrc demo` said only "Operation not
    supported". A refused End route puts the same End in tc BPF on the switch's ports; a refused
    End.DT6 route the host port's encap and decap programs; a refused encap route becomes a plain
    route to the port's leaf with room for the outer header, and the path's segment goes into the
    port's encap program. Any other refusal stays an error."""
    import errno

    import pytest

    from mrc.errors import FabricError
    from mrc.fabric import executor, nl, srv6bpf
    from mrc.fabric.plan import Op

    attached, ports, segments = [], [], []
    monkeypatch.setattr(srv6bpf, "end_program", lambda t, node, prefix: attached.append((node, prefix)))
    monkeypatch.setattr(srv6bpf, "host_port", lambda t, node, ifname: ports.append((node, ifname)) or 42)
    monkeypatch.setattr(srv6bpf, "set_segment", lambda fd, dst, seg: segments.append((fd, dst, seg)))

    class Raw:
        def __init__(self, code):
            self.code, self.plain = code, []

        def add(self, dst, oif, kind, **k):
            if kind is not None:  # an lwtunnel route (seg6local, seg6)
                raise OSError(self.code, "refused")
            self.plain.append((dst, k))

    class Refusing(executor.Executor):
        def __init__(self, t, code):  # no netlink: every SRv6 route is refused with code
            self.t, self.srv6_bpf, self._segs, self._raw = t, False, {}, Raw(code)

        def raw(self, node):
            return self._raw

        def index(self, node, ifname):
            return 1

    ex = Refusing(t(), errno.EOPNOTSUPP)
    ex.run([Op("end", "p0l0", {"prefix": "fc00:0:1000::/48", "ifname": "usid0"})])
    assert attached == [("p0l0", "fc00:0:1000::/48")] and ex.srv6_bpf
    ex2 = Refusing(t(), errno.EOPNOTSUPP)
    ex2.run([Op("dt6", "h0", {"prefix": "fc00:0:b000:d6::/64", "ifname": "p0", "table": 255}),
             Op("encap", "h0", {"dst": "fd6d:1:0::1/128", "segment": "fc00:0:1000:2000:1000:b001:d6::",
                                "ifname": "p0", "prefsrc": "fd6d:0:0::1"}),
             Op("encap", "h0", {"dst": "fd6d:1::/32", "segment": "fc00:0:1000:2000:1000:b001:d6::",
                                "ifname": "p0", "table": 100})])
    assert ex2.srv6_bpf and ports == [("h0", "p0")]  # attached once for the port's routes
    assert segments == [(42, "fd6d:1:0::1/128", "fc00:0:1000:2000:1000:b001:d6::"),
                        (42, "fd6d:1::/32", "fc00:0:1000:2000:1000:b001:d6::")]
    gw = {"gateway": "fe80::1", "mtu": 9000 - 40}  # the leaf's end; the link's MTU less the outer header
    assert ex2._raw.plain == [("fd6d:1:0::1/128", {"table": nl.RT_TABLE_MAIN, "prefsrc": "fd6d:0:0::1", **gw}),
                              ("fd6d:1::/32", {"table": 100, "prefsrc": None, **gw})]
    for kind, args in (("end", {"prefix": "fc00:0:1000::/48", "ifname": "usid0"}),
                       ("dt6", {"prefix": "fc00:0:b000:d6::/64", "ifname": "p0", "table": 255}),
                       ("encap", {"dst": "fd6d:1::/32", "segment": "fc00:0:1000::", "ifname": "p0"})):
        other = Refusing(t(), errno.EINVAL)  # anything else is an error, as before
        with pytest.raises(FabricError, match="refused"):
            other.run([Op(kind, "h0", args)])
        assert not other.srv6_bpf and not other._raw.plain
    assert len(attached) == 1 and len(ports) == 1


def test_the_state_says_what_runs_srv6_and_keeps_it_through_later_writes(tmp_path, monkeypatch):
    """srv6 is "tc-bpf" only where up() found a kernel without SRv6; a state file of an older
    version (no key), a fault recorded later, or a state file cut short do not change it."""
    import json

    import pytest

    from mrc.errors import FabricError
    from mrc.fabric import apply

    monkeypatch.setattr(apply, "STATE_DIR", str(tmp_path))
    topo = t()
    apply.save_state(topo)
    assert apply.srv6(topo.name) == "kernel"
    apply.save_state(topo, srv6="tc-bpf")
    apply.save_state(topo, {"h0-p0l0": {"down": True}})  # a fault: the record stays
    assert apply.srv6(topo.name) == "tc-bpf"
    path = apply.state_path(topo.name)
    st = json.load(open(path))
    del st["srv6"]  # written by an older mrc
    json.dump(st, open(path, "w"))
    assert apply.srv6(topo.name) == "kernel"
    open(path, "w").write('{"topology": ')  # cut short: rewritten whole, as a fresh fabric's
    apply.save_state(topo)
    assert apply.srv6(topo.name) == "kernel"
    with pytest.raises(FabricError, match="no fabric named"):
        apply.srv6("nosuchfab")


def test_fault_operations_on_a_fabric_run_one_at_a_time_and_keep_each_others_records(tmp_path, monkeypatch):
    """The dash's flap thread fails and heals its link while a heal of everything from the page runs
    (and `mrc fabric` may run beside the dash). Interleaved, a heal wrote back the faults it had
    read at its start, so one cleared meanwhile came back (the dash test saw a healed link lossy for
    good, 1 run in 12), and re-added a link's routes as the flap took it down (ENETDOWN: a heal
    answered 500, 1 run in 7). A change now waits for the one running, in another thread or
    process, and starts from the state as it is."""
    import threading

    from mrc.fabric import apply

    monkeypatch.setattr(apply, "STATE_DIR", str(tmp_path))
    monkeypatch.setattr(apply, "require_root", lambda what: None)
    topo = t()
    a, b, c = (link.name for link in topo.links()[:3])
    apply.save_state(topo, {a: {"down": True}, b: {"loss": 1.5}})
    during = []

    class Busy:  # the heal's netlink work: another thread tries to record a fault meanwhile
        def __init__(self, t):
            pass

        def run(self, ops, exist_ok=False):
            if not during:
                other = threading.Thread(target=apply._record, args=(topo, "down", [c], True))
                other.start()
                other.join(0.3)
                during.append((other, other.is_alive()))  # still waiting: the heal holds the fabric

        def close(self):
            pass

    monkeypatch.setattr(apply, "Executor", Busy)
    apply.heal(topo.name, a)
    other, waited = during[0]
    assert waited
    other.join(5)
    assert not other.is_alive()
    assert apply.load_state(topo.name)["faults"] == {b: {"loss": 1.5}, c: {"down": True}}
    # within one thread (a heal that records, a flap's fail inside a change) the lock is re-entrant,
    # and the heal's write starts from the state as it is: what was cleared meanwhile stays cleared
    monkeypatch.setattr(apply, "_clear_loss", lambda t, link: None)
    with apply.state_lock(topo.name):
        apply._record(topo, "loss", [b], None)
        apply.heal(topo.name, c)
    assert apply.load_state(topo.name)["faults"] == {}


def test_a_lock_path_that_is_not_a_file_is_a_clear_error_and_changes_nothing(tmp_path, monkeypatch):
    """The fabric's lock lives beside its state (/run/mrc/fabrics/NAME.lock): a directory or a
    symbolic link there (planted, or left by something else) stops a change with the path and what
    to do, not a traceback, and the state is as it was."""
    import os

    import pytest

    from mrc.errors import FabricError
    from mrc.fabric import apply

    monkeypatch.setattr(apply, "STATE_DIR", str(tmp_path))
    monkeypatch.setattr(apply, "require_root", lambda what: None)
    topo = t()
    apply.save_state(topo, {"x": {"down": True}})
    lock = tmp_path / f"{topo.name}.lock"
    for plant in (lambda: lock.mkdir(), lambda: os.symlink(tmp_path / "elsewhere", lock)):
        plant()
        with pytest.raises(FabricError, match=f"cannot be locked.*{lock.name}.*remove it"):
            apply._record(topo, "down", ["y"], True)
        assert apply.load_state(topo.name)["faults"] == {"x": {"down": True}}
        assert not (tmp_path / "elsewhere").exists()  # a link is not followed
        lock.rmdir() if lock.is_dir() and not lock.is_symlink() else lock.unlink()


def test_a_change_on_no_fabric_leaves_no_lock_and_the_next_changes_still_take_turns(tmp_path, monkeypatch):
    """A change asked of a fabric that does not exist (`mrc fabric fail ... --name nosuchfab`) left
    /run/mrc/fabrics/nosuchfab.lock behind for good. Its holder now removes it as it lets go; a
    change that waited on the removed file then takes the path's new one, so it never runs beside a
    change that came later and locked the new file."""
    import threading
    import time

    from mrc.fabric import apply

    monkeypatch.setattr(apply, "STATE_DIR", str(tmp_path))
    lock = tmp_path / "nofab.lock"
    with apply.state_lock("nofab"):
        assert lock.exists()
    assert not lock.exists()

    held, release = threading.Event(), threading.Event()
    active, most = [0], [0]
    count = threading.Lock()

    def first():
        with apply.state_lock("nofab"):
            held.set()
            release.wait(5)

    def change():
        with apply.state_lock("nofab"):
            with count:
                active[0] += 1
                most[0] = max(most[0], active[0])
            time.sleep(0.3)
            with count:
                active[0] -= 1

    a = threading.Thread(target=first)
    a.start()
    assert held.wait(5)
    waiter = threading.Thread(target=change)  # blocks on the file the first holder will remove
    waiter.start()
    time.sleep(0.2)
    release.set()
    a.join(5)
    time.sleep(0.05)
    later = threading.Thread(target=change)  # opens the path anew
    later.start()
    for th in (waiter, later):
        th.join(5)
    assert most[0] == 1
    assert not lock.exists()
