"""Root tests: kernel traffic routed by FRR's BGP (mrc fabric up --routing bgp), with real daemons,
real sessions, real ECMP routes and real faults; MRC's uSID paths unchanged beside it."""
import ipaddress
import json
import os
import socket
import subprocess
import sys
import time

import pytest

from mrc.fabric import apply, bgp, ns
from mrc.fabric.check import check
from mrc.fabric.probe import ProbeStream
from mrc.fabric.topology import Topology
from tests.integration.conftest import unique_name
from tests.waiting import wait_for

pytestmark = [pytest.mark.root, pytest.mark.skipif(bgp.available() is not None, reason="FRR is not installed")]


def daemons_of(name: str) -> list[int]:
    """Pids of every process whose command line names this fabric's FRR directory."""
    mark = os.path.join(bgp.RUN_DIR, name).encode()
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if mark in f.read():
                    out.append(int(pid))
        except OSError:
            pass
    return out


@pytest.fixture(scope="module")
def bgp_fabric():
    t = Topology(planes=2, spines=2, leaves=2, hosts=4, name=unique_name("b"))
    apply.up(t, routing="bgp")
    try:
        yield t
    finally:
        apply.down(t.name)
    assert not apply.project_namespaces(ns.list_netns(), t.name)
    assert not daemons_of(t.name) and not os.path.exists(os.path.join(bgp.RUN_DIR, t.name))


def spine_routes(t, leaf_node: str, prefix: str) -> list[str]:
    """The spines (interfaces) a leaf's BGP route to ``prefix`` leaves through."""
    r = ns.command(t.ns(leaf_node), ["ip", "-6", "-j", "route", "show", prefix, "proto", "bgp"],
                   capture_output=True, text=True)
    routes = json.loads(r.stdout or "[]")
    if not routes:
        return []
    return sorted(n["dev"] for n in routes[0].get("nexthops", [routes[0]]))


def test_every_session_is_established_every_route_has_every_spine_and_status_shows_them(bgp_fabric):
    t = bgp_fabric
    ss = bgp.all_sessions(t)
    assert len(ss) == bgp.expected_sessions(t) == 16
    assert all(s["state"] == "Established" and s["bfd"] == "up" for s in ss), ss
    for p in range(t.planes):
        assert spine_routes(t, t.leaf(p, 0), "fd6d:2::/32") == ["s0", "s1"]
        assert spine_routes(t, t.leaf(p, 1), "fd6d:0::/32") == ["s0", "s1"]
    st = subprocess.run([sys.executable, "-m", "mrc", "fabric", "status", "--json", "--name", t.name],
                        capture_output=True, text=True)
    obj = json.loads(st.stdout)
    assert obj["routing"] == "bgp" and len(obj["bgp_sessions"]) == 16
    text = subprocess.run([sys.executable, "-m", "mrc", "fabric", "status", "--name", t.name],
                          capture_output=True, text=True).stdout
    assert "BGP sessions: 16/16 Established" in text
    assert check(t)["failed_count"] == 0  # MRC's uSID paths, beside BGP


def test_kernel_flows_are_hashed_over_every_spine(bgp_fabric):
    t = bgp_fabric

    def forwarded():
        out = {}
        for s in range(t.spines):
            node = t.spine(0, s)
            links = json.loads(ns.command(t.ns(node), ["ip", "-j", "-s", "link", "show", "l0"],
                                          capture_output=True, text=True).stdout)
            out[node] = links[0]["stats64"]["rx"]["packets"]
        return out

    before = forwarded()
    with ProbeStream(t, 0, 2, plane=0, flows=16, interval_s=0.002):
        time.sleep(0.5)
    after = forwarded()
    grew = [n for n in after if after[n] - before[n] > 100]
    assert grew == [t.spine(0, s) for s in range(t.spines)], (before, after)


def test_a_silent_link_is_withdrawn_within_the_bfd_time_and_traffic_moves(bgp_fabric):
    t = bgp_fabric
    spine = t.spine(0, 1)
    # the spine stops hearing leaf 1 (no carrier change: only BFD can tell)
    cut = ('table netdev mrcsilent {\n chain cut {\n'
           '  type filter hook ingress device "l1" priority 0; policy drop;\n }\n}\n')
    with ProbeStream(t, 0, 2, plane=0, flows=8) as probe:
        time.sleep(0.3)
        ns.command(t.ns(spine), ["nft", "-f", "-"], input=cut, text=True, check=True)
        try:
            t0 = time.monotonic()
            wait_for(lambda: spine_routes(t, t.leaf(0, 0), "fd6d:2::/32") == ["s0"], timeout=5,
                     what="the route through the silent spine withdrawn")
            withdrawn = time.monotonic() - t0
            time.sleep(0.5)
        finally:
            ns.command(t.ns(spine), ["nft", "delete", "table", "netdev", "mrcsilent"], check=True)
    r = probe.result()
    detect = bgp.BFD_INTERVAL_MS * bgp.BFD_DETECT_MULT / 1e3
    assert withdrawn < detect + 0.5, withdrawn  # BFD's detection time, and this VM's scheduling
    # every flow through the silent spine lost at most the detection window, then moved to s0
    assert r["loss_window_ms"] < (detect + 0.5) * 1e3, r
    assert all(f["received"] > 0.9 * f["sent"] for f in r["flows"]), r
    wait_for(lambda: spine_routes(t, t.leaf(0, 0), "fd6d:2::/32") == ["s0", "s1"], timeout=30,
             what="the healed spine back in the route")


def test_a_cut_link_is_withdrawn_and_its_heal_brings_the_spine_back(bgp_fabric):
    t = bgp_fabric
    with ProbeStream(t, 0, 2, plane=1, flows=8) as probe:
        time.sleep(0.2)
        apply.fail(t.name, "p1l1-p1s0")  # the far side: leaf 0 learns it from BGP
        wait_for(lambda: spine_routes(t, t.leaf(1, 0), "fd6d:2::/32") == ["s1"], timeout=5,
                 what="the route through the cut link withdrawn")
        time.sleep(0.3)
        apply.heal(t.name, "p1l1-p1s0")
        wait_for(lambda: spine_routes(t, t.leaf(1, 0), "fd6d:2::/32") == ["s0", "s1"], timeout=30,
                 what="the healed link back in the route")
    r = probe.result()
    assert r["loss_window_ms"] < 1000 and all(f["received"] > 0.8 * f["sent"] for f in r["flows"]), r


def test_tcp_crosses_planes_and_leaves_on_plain_ipv6(bgp_fabric):
    t = bgp_fabric
    srv = ns.run_in(t.ns("h3"), lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM))
    srv.bind(("::", 5301))
    srv.listen(4)
    try:
        for p in range(t.planes):
            cli = ns.run_in(t.ns("h0"), lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM))
            cli.settimeout(5)
            cli.connect((t.inner_address(3, p), 5301))
            c, peer = srv.accept()
            # the source of the plane's route, with no encap in between
            assert ipaddress.ip_address(peer[0]) == ipaddress.ip_address(t.inner_address(0, p))
            cli.sendall(b"x" * 100_000)
            cli.close()
            got = 0
            while (k := len(c.recv(65536))):
                got += k
            c.close()
            assert got == 100_000
    finally:
        srv.close()


def test_down_ends_every_daemon_and_removes_their_directory():
    t = Topology(planes=1, spines=1, leaves=1, hosts=2, name=unique_name("d"))
    apply.up(t, routing="bgp")
    try:
        pids = daemons_of(t.name)
        assert len(pids) == len(t.switch_nodes()) * len(bgp.DAEMONS), pids
    finally:
        apply.down(t.name)
    assert not daemons_of(t.name) and not os.path.exists(os.path.join(bgp.RUN_DIR, t.name))
    assert all(not os.path.exists(f"/proc/{p}") for p in pids)


def test_mptcp_carries_data_on_every_plane_and_acks_return_on_each(bgp_fabric):
    from mrc.fabric import baseline

    t = bgp_fabric
    for h in (0, 2):
        baseline.mptcp_setup(t, h)
    try:
        before = {h: baseline.plane_bytes(t, h) for h in (0, 2)}
        gbps = baseline.stream_gbps(t, 0, 2, 1.5, proto=baseline.IPPROTO_MPTCP, port=5302)
        after = {h: baseline.plane_bytes(t, h) for h in (0, 2)}
    finally:
        for h in (0, 2):
            baseline.mptcp_teardown(t, h)
    assert gbps > 0
    for p in range(t.planes):
        sent = after[0][p][0] - before[0][p][0]
        acks = after[2][p][0] - before[2][p][0]
        assert sent > 20 << 20, (p, sent)  # data on this plane
        assert acks > 20 << 10, (p, acks)  # and its subflow's ACKs back on the same plane


def test_ecmp_hashes_the_5_tuple_so_a_chosen_source_port_keeps_its_spine(bgp_fabric):
    t = bgp_fabric
    for spine in range(t.spines):
        sport = bgp.sport_through(t, 0, 2, 1, spine, 5310)
        # the same 5-tuple again, and again: the same spine (a flow's path is its 5-tuple's)
        for _ in range(2):
            assert bgp.sport_through(t, 0, 2, 1, spine, 5310, first=sport, tries=1) == sport


def test_a_fabric_without_bfd_converges_and_its_status_says_so():
    t = Topology(planes=1, spines=2, leaves=2, hosts=2, name=unique_name("n"))
    apply.up(t, routing="bgp", bfd_ms=0)
    try:
        assert len(daemons_of(t.name)) == len(t.switch_nodes()) * 2  # zebra and bgpd, no bfdd
        ss = bgp.all_sessions(t)
        assert len(ss) == bgp.expected_sessions(t) and all(s["state"] == "Established" and s["bfd"] == "none"
                                                           for s in ss), ss
        text = subprocess.run([sys.executable, "-m", "mrc", "fabric", "status", "--name", t.name],
                              capture_output=True, text=True).stdout
        assert "no BFD" in text and "BGP sessions: 8/8 Established" in text
    finally:
        apply.down(t.name)
