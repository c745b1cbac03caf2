"""Root tests: a real fabric in namespaces, real packets, real faults."""
import json
import select
import socket
import subprocess
import sys
import threading
import time

import pytest

from mrc.errors import FabricError, UsageError
from mrc.fabric import apply, executor, ns, qos, srv6bpf
from mrc.fabric.check import PROTO_EXPERIMENT, check
from mrc.fabric.topology import Topology
from tests.integration.conftest import unique_name
from tests.waiting import wait_for

pytestmark = pytest.mark.root



def test_switch_routes_really_carry_next_csid(small_fabric):
    t = small_fabric
    st = subprocess.run([sys.executable, "-m", "mrc", "fabric", "status", "--json", "--name", t.name],
                        capture_output=True, text=True)
    assert st.returncode == 0 and json.loads(st.stdout)["srv6"] == apply.srv6(t.name), st.stdout + st.stderr
    for node in ("p0l0", "p1s1"):
        out = ns.command(t.ns(node), ["ip", "-6", "route", "show"], capture_output=True, text=True).stdout
        end = [line for line in out.splitlines() if "seg6local" in line]
        if apply.srv6(t.name) == "kernel":  # the kernel's SRv6
            assert len(end) == 1, out
            assert "action End flavors next-csid lblen 32 nflen 16" in end[0]
            continue
        # a kernel without SRv6: no End route, the End program on every port of the switch instead,
        # and it is what shifts the packets that cross it
        assert not end, out
        ports = [i for n, i, _ in qos.switch_ports(t, node)]
        before = [srv6bpf.end_shifted(t, node, i) for i in ports]
        assert ports and None not in before, before  # every port of the switch has it
        assert check(t)["failed_count"] == 0
        after = [srv6bpf.end_shifted(t, node, i) for i in ports]
        assert sum(after) > sum(before), (before, after)


def test_every_path_delivers_and_cli_agrees(small_fabric):
    t = small_fabric
    r = check(t)
    assert r["failed_count"] == 0 and r["ok_count"] == len(t.paths()) == 2 * 2 * 2
    env_cmd = [sys.executable, "-m", "mrc", "fabric"]
    out = subprocess.run(env_cmd + ["check", "--json", "--name", t.name], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    j = json.loads(out.stdout)
    assert j["failed_count"] == 0 and all(p["ok"] for p in j["paths"])
    # each address of `paths --json`, sent from its source, arrives at its destination
    paths = json.loads(subprocess.run(env_cmd + ["paths", "--json", "--name", t.name],
                                      capture_output=True, text=True).stdout)
    r2 = check(t, only=paths)
    assert r2["failed_count"] == 0


def _tcpdump(t, node, ifname, path):
    # --immediate-mode: without it packets wait in the ring for the buffer
    # timeout and are lost when tcpdump is stopped
    proc = ns.popen(t.ns(node), ["tcpdump", "-n", "-U", "--immediate-mode", "-i", ifname, "-w", path,
                                 "ip6 proto 253"], stderr=subprocess.PIPE, text=True)
    # tcpdump needs a moment inside a namespace: wait for its "listening on" line
    for _ in range(5):
        line = proc.stderr.readline()
        if "listening" in line:
            return proc
    raise AssertionError(f"tcpdump did not start: {line}")


def test_capture_in_t1_shows_the_address_shifted_hop_by_hop(small_fabric, tmp_path):
    from scapy.all import IPv6, rdpcap

    t = small_fabric
    # h0 (leaf 0) -> h1 (leaf 1) over plane 1, spine 1
    addr = t.path_address(0, 1, plane=1, spine=1)
    spine = t.spine(1, 1)
    assert check(t)["failed_count"] == 0  # resolves every neighbour first
    caps = {ifn: str(tmp_path / f"{ifn}.pcap") for ifn in ("l0", "l1")}
    procs = {ifn: _tcpdump(t, spine, ifn, path) for ifn, path in caps.items()}
    try:
        s = ns.run_in(t.ns("h0"), lambda: socket.socket(socket.AF_INET6, socket.SOCK_RAW, PROTO_EXPERIMENT))
        for _ in range(3):
            s.sendto(b"shift-test", (addr, 0))
        s.close()

        def captured(path):
            try:
                return len(rdpcap(path))
            except Exception:  # nothing written yet
                return 0

        # tcpdump writes each packet as it comes (-U): wait until both saw all three
        wait_for(lambda: all(captured(p) >= 3 for p in caps.values()), 5, 0.02, what="tcpdump writing the packets")
    finally:
        for p in procs.values():
            p.terminate()
            p.wait(5)
    into = [p[IPv6].dst for p in rdpcap(caps["l0"]) if IPv6 in p]
    out = [p[IPv6].dst for p in rdpcap(caps["l1"]) if IPv6 in p]
    # the leaf shifted its uSID away before the spine; the spine shifts its own
    assert addr == "fc00:0:1100:2101:1101:b101::"
    assert into and set(into) == {"fc00:0:2101:1101:b101::"}
    assert out and set(out) == {"fc00:0:1101:b101::"}


def _expected_through(t, link_name):
    link = t.link(link_name)
    broken = set()
    for i, p in enumerate(t.paths()):
        s, d = t.host_index(p["src"]), t.host_index(p["dst"])
        hops = {f"h{s}-{t.leaf(p['plane'], t.host_leaf(s))}",
                f"{t.leaf(p['plane'], t.host_leaf(s))}-{t.spine(p['plane'], p['spine'])}",
                f"{t.leaf(p['plane'], t.host_leaf(d))}-{t.spine(p['plane'], p['spine'])}",
                f"h{d}-{t.leaf(p['plane'], t.host_leaf(d))}"}
        if link.name in hops:
            broken.add(i)
    return broken


@pytest.mark.parametrize("link", ["p0l0-p0s1", "h1-p1l1"])
def test_fail_blackholes_exactly_the_paths_through_the_link_and_heal_restores(small_fabric, link):
    t = small_fabric
    apply.fail(t.name, link)
    r = check(t, timeout=1.0)
    failed = {i for i, p in enumerate(r["paths"]) if not p["ok"]}
    assert failed == _expected_through(t, link) and failed
    assert apply.load_state(t.name)["faults"][link]["down"] is True
    apply.heal(t.name, link)
    assert check(t)["failed_count"] == 0
    assert link not in apply.load_state(t.name)["faults"]


def test_fail_switch_and_flap(small_fabric):
    t = small_fabric
    apply.fail(t.name, "p1s0")
    r = check(t, timeout=1.0)
    assert {p["plane"] for p in r["paths"] if not p["ok"]} == {1}
    assert {p["spine"] for p in r["paths"] if not p["ok"]} == {0}
    apply.heal(t.name, None)
    # the CLI takes several targets in one command: here a whole plane
    out = subprocess.run([sys.executable, "-m", "mrc", "fabric", "fail", "p0s0", "p0s1", "--name", t.name],
                         capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("down: "), out.stderr
    r = check(t, timeout=1.0)
    assert {p["plane"] for p in r["paths"] if not p["ok"]} == {0}
    assert all(not p["ok"] for p in r["paths"] if p["plane"] == 0)
    apply.heal(t.name, None)
    assert check(t)["failed_count"] == 0
    events = []
    n = apply.flap(t.name, "p0l1-p0s0", period=0.2, count=2, on_event=lambda *e: events.append(e[0]))
    assert n == 2 and events == ["down", "up", "down", "up"]
    assert check(t)["failed_count"] == 0


@pytest.mark.parametrize("percent,low,high", [(20, 0.15, 0.25), (100, 1.0, 1.0)])
def test_loss_drops_that_share(small_fabric, percent, low, high):
    t = small_fabric
    link = "p0l0-p0s0"
    apply.loss(t.name, link, percent)
    addr = t.path_address(0, 1, plane=0, spine=0)
    rx = ns.run_in(t.ns("h1"), lambda: socket.socket(socket.AF_INET6, socket.SOCK_RAW, PROTO_EXPERIMENT))
    tx = ns.run_in(t.ns("h0"), lambda: socket.socket(socket.AF_INET6, socket.SOCK_RAW, PROTO_EXPERIMENT))
    rx.setblocking(False)
    got = 0
    try:
        for i in range(2000):
            tx.sendto(b"loss%d" % i, (addr, 0))
            if i % 50 == 0:  # drain as we go so the receive buffer never overflows
                got += _drain(rx, 0.0)
        got += _drain(rx, 0.5)
    finally:
        tx.close()
        rx.close()
    lost = (2000 - got) / 2000
    assert low <= lost <= high, f"lost {lost:.1%}"
    apply.heal(t.name, link)
    assert check(t)["failed_count"] == 0


def _drain(sock, wait):
    n = 0
    deadline = time.monotonic() + wait
    while True:
        r, _, _ = select.select([sock], [], [], max(0.0, deadline - time.monotonic()))
        if not r:
            return n
        while True:
            try:
                sock.recv(2048)
                n += 1
            except BlockingIOError:
                break


def _tx_bytes(t, node, ifname):
    from pyroute2 import IPRoute

    with IPRoute(netns=t.ns(node)) as ipr:
        link = ipr.get_links(ifname=ifname)[0]
        return link.get("IFLA_STATS64")["tx_bytes"]


def test_kernel_tcp_runs_over_the_chosen_plane(small_fabric):
    t = small_fabric
    plane = 1
    before = {p: _tx_bytes(t, "h0", f"p{p}") for p in range(t.planes)}
    received = _tcp_send(t, plane, 4 << 20)
    after = {p: _tx_bytes(t, "h0", f"p{p}") for p in range(t.planes)}
    assert received == [4 << 20]
    sent = {p: after[p] - before[p] for p in after}
    # GSO super-packets make packet counts small: compare bytes
    assert sent[plane] > 4 << 20 and sent[0] < 10_000, sent


def _link_stats(t, node, ifnames):
    from pyroute2 import IPRoute

    with IPRoute(netns=t.ns(node)) as ipr:
        st = [ipr.get_links(ifname=i)[0].get("IFLA_STATS64") for i in ifnames]
    return sum(x["tx_packets"] for x in st), sum(x["tx_bytes"] for x in st)


def _tcp_send(t, plane, nbytes):
    dst = t.inner_address(1, plane)
    srv = ns.run_in(t.ns("h1"), lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM))
    srv.bind((dst, 5202))
    srv.listen(1)
    got = []

    def serve():
        c, _ = srv.accept()
        c.settimeout(30)  # a sender that stops without closing fails the test, not hangs it
        n = 0
        while b := c.recv(1 << 20):
            n += len(b)
        got.append(n)
        c.close()

    th = threading.Thread(target=serve)
    th.start()
    cli = ns.run_in(t.ns("h0"), lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM))
    cli.settimeout(10)
    cli.connect((dst, 5202))
    cli.sendall(b"y" * nbytes)
    cli.close()
    th.join(10)
    srv.close()
    return got


def test_wire_sized_makes_switches_forward_mtu_size_packets(small_fabric):
    """Kernel TCP's GSO super-packets cross the emulated switches whole until
    wire_sized() sets gso_max_segs 1 on the switch interfaces; then the leaf
    cuts them and its uplinks carry packets no larger than the MTU."""
    t = small_fabric
    plane = 1
    leaf = t.leaf(plane, t.host_leaf(0))
    uplinks = [link.a_if for link in t.links() if link.a_node == leaf]
    from pyroute2 import IPRoute

    with IPRoute(netns=t.ns(leaf)) as ipr:
        mtu = ipr.get_links(ifname=uplinks[0])[0].get("IFLA_MTU")

    def mean_size():
        p0, b0 = _link_stats(t, leaf, uplinks)
        assert _tcp_send(t, plane, 16 << 20) == [16 << 20]
        p1, b1 = _link_stats(t, leaf, uplinks)
        return (b1 - b0) / (p1 - p0)

    assert mean_size() > 2 * mtu  # super-packets: one forwarding step per many MTUs
    n = apply.wire_sized(t)
    assert n == sum(1 for link in t.links() for node in (link.a_node, link.b_node) if node in t.switch_nodes())
    assert mean_size() <= mtu + 14
    # the hosts keep their GSO
    out = ns.command(t.ns("h0"), ["ip", "-d", "link", "show", "dev", t.port_ifname(plane)], capture_output=True,
                     text=True, check=True).stdout
    assert "gso_max_segs 65535" in out, out


def test_rate_installs_tbf_and_heal_removes_it(small_fabric):
    from pyroute2 import IPRoute

    t = small_fabric
    apply.rate(t.name, "h0-p0l0", "100mbit")

    def kinds():
        with IPRoute(netns=t.ns("h0")) as ipr:
            idx = ipr.link_lookup(ifname="p0")[0]
            return [q.get("TCA_KIND") for q in ipr.get_qdiscs(index=idx)]

    assert "tbf" in kinds()
    assert check(t)["failed_count"] == 0
    apply.heal(t.name, "h0-p0l0")
    assert "tbf" not in kinds()


def test_name_in_use_and_unknown_link_are_refused(small_fabric):
    t = small_fabric
    with pytest.raises(UsageError, match="already exists"):
        apply.up(Topology(planes=2, spines=2, leaves=2, hosts=2, name=t.name))
    with pytest.raises(UsageError, match="unknown link"):
        apply.fail(t.name, "p0l0-p9s9")
    # nothing of the refused fabric was built, the running one is intact
    assert check(t)["failed_count"] == 0


def veth_states(t: Topology) -> dict[tuple[str, str], str]:
    """(namespace, ifname) -> operational state of every veth end, as `ip -o link` shows it."""
    out = {}
    for n in apply.project_namespaces(ns.list_netns(), t.name):
        text = subprocess.run(["ip", "-n", n, "-o", "link", "show"], capture_output=True, text=True).stdout
        for line in text.splitlines():
            name = line.split(": ")[1]
            if "@" in name:  # a veth end names its peer: ifname@ifN
                out[(n, name.split("@")[0])] = line.split(" state ")[1].split()[0]
    return out


def test_default_fabric_up_check_down_leaves_nothing():
    t = Topology(name=unique_name("d"))
    try:
        secs = apply.up(t)
        print(f"default fabric up in {secs:.2f} s")
        states = veth_states(t)  # up returns once every link has carrier, not when it was set up
        assert len(states) > 100 and all(st == "UP" for st in states.values()), states
        r = check(t)
        assert r["failed_count"] == 0 and r["ok_count"] == 384
    finally:
        apply.down(t.name)
    assert not apply.project_namespaces(ns.list_netns(), t.name)
    routes = subprocess.run(["ip", "-6", "route", "show"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    assert "fc00:0:" not in routes and t.name not in links


def test_failed_build_leaves_nothing_behind(monkeypatch):
    t = Topology(planes=2, spines=2, leaves=2, hosts=2, name=unique_name("f"))
    real = executor.Executor.op_end

    def broken(self, node, prefix, ifname):
        if node == "p1s1":
            raise OSError(22, "injected failure")
        return real(self, node, prefix, ifname)

    monkeypatch.setattr(executor.Executor, "op_end", broken)
    with pytest.raises(Exception, match="injected failure"):
        apply.up(t)
    assert not apply.project_namespaces(ns.list_netns(), t.name)
    assert not __import__("os").path.exists(apply.state_path(t.name))


def test_a_link_without_carrier_fails_the_wait_with_its_name(small_fabric):
    t = small_fabric
    ex = executor.Executor(t)
    ends = apply.veths_set_up(apply.plan(t))
    node, ifname = sorted(e for e in ends if e[0] == "p0s0" and not e[1].startswith("usid"))[0]  # a spine's link
    try:
        assert apply.wait_carrier(ex, ends) < 1.0  # up already: no wait
        subprocess.run(["ip", "-n", t.ns(node), "link", "set", ifname, "down"], check=True)
        # its peer loses carrier with it: both ends are named
        with pytest.raises(FabricError, match=f"2 of {len(ends)} links have no carrier.*{t.ns(node)}/{ifname}"):
            apply.wait_carrier(ex, ends, timeout=0.3)
    finally:
        subprocess.run(["ip", "-n", t.ns(node), "link", "set", ifname, "up"], check=False)
        ex.close()
    wait_for(lambda: veth_states(t)[(t.ns(node), ifname)] == "UP", timeout=10)
