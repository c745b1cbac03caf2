"""A host's seg6 encap.red and End.DT6 for a kernel without SRv6 (csrc/bpf/host_encap.bpf.c,
host_decap.bpf.c) on crafted frames, run by the kernel itself (BPF_PROG_TEST_RUN) as attached to
a real host's ports: the outer header byte for byte, the round trip through the switches' shifts,
ECN across the decapsulation, and what they leave alone; then the kernel's TCP through them over a
link failed and healed. Runs on any kernel (the programs are attached by hand where the kernel has
its own SRv6)."""

import os
import socket
import struct

import pytest

from mrc.fabric import apply, qos, srv6bpf, tcbpf
from mrc.fabric.topology import Topology

pytestmark = pytest.mark.root

TC_ACT_OK, TC_ACT_SHOT, TC_ACT_UNSPEC = 0, 2, 0xFFFFFFFF
PLANE = 1


class Port:
    """One host port's two programs, open for test runs."""

    def __init__(self, t: Topology, h: int) -> None:
        self.t, self.node, self.ifname = t, t.host(h), f"p{PLANE}"
        self.fds, self.maps = {}, {}
        for name, hook in (("host_encap", "egress"), ("host_decap", "ingress")):
            pid = tcbpf.prog_id(t, self.node, self.ifname, name, hook)
            self.fds[name], self.maps[name] = tcbpf.prog_fd(pid), tcbpf.prog_maps(pid)

    def run(self, name: str, frame: bytes) -> tuple[int, bytes, dict]:
        """(verdict, the frame as it goes on, the port's counters that moved)."""
        before = srv6bpf.host_counters(self.t, self.node, self.ifname)
        verdict, out = tcbpf.prog_test_run(self.fds[name], frame)
        after = srv6bpf.host_counters(self.t, self.node, self.ifname)
        return verdict, out, {k: after[k] - before[k] for k in after if after[k] != before[k]}

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        for maps in self.maps.values():
            for fd in maps.values():
                os.close(fd)


@pytest.fixture(scope="module")
def hosts():
    t = Topology(planes=2, spines=1, leaves=1, hosts=2, name=f"he{os.getpid() % 100000}")
    apply.up(t)
    ports = []
    try:
        if apply.srv6(t.name) == "kernel":  # the kernel's own SRv6: the programs beside it, for this test alone
            for h, d in ((0, 1), (1, 0)):
                fd = srv6bpf.host_port(t, t.host(h), f"p{PLANE}")
                srv6bpf.set_segment(fd, t.inner_address(d, PLANE), t.kernel_path_address(h, d, PLANE))
                os.close(fd)
        ports = [Port(t, 0), Port(t, 1)]
        yield t, ports
    finally:
        for p in ports:
            p.close()
        apply.down(t.name)


def a6(x: str) -> bytes:
    return socket.inet_pton(socket.AF_INET6, x)


ETH = b"\x02\x6d\x00\x00\x05\x01" + b"\x02\x6d\x00\x00\x05\x02" + b"\x86\xdd"


def ip6(src: str, dst: str, payload: bytes, nh: int = 6, tc: int = 0, flow: int = 0) -> bytes:
    return struct.pack("!IHBB", 6 << 28 | tc << 20 | flow, len(payload), nh, 63) + a6(src) + a6(dst) + payload


def inner(t: Topology, tc: int = 0x02, flow: int = 0x12345, dst_host: int = 1) -> bytes:
    """A TCP segment's IPv6 packet from h0's plane address to another host's (ECT(0) by default)."""
    return ip6(t.inner_address(0, PLANE), t.inner_address(dst_host, PLANE), b"\x13\x89" * 20 + b"\x5a" * 200,
               tc=tc, flow=flow)


def test_encap_adds_the_paths_outer_header_byte_for_byte(hosts):
    t, (h0, _) = hosts
    pkt = inner(t)
    verdict, out, moved = h0.run("host_encap", ETH + pkt)
    assert verdict == TC_ACT_UNSPEC and moved == {"encapsulated": 1}  # and on to the port's queue
    assert out[:14] == ETH and out[54:] == pkt  # the inner packet whole behind the outer header
    o = out[14:54]
    first, plen, nh, hl = struct.unpack("!IHBB", o[:8])
    assert first == 6 << 28 | 0x02 << 20 | 0x12345  # traffic class (its ECN) and flow label copied
    assert (plen, nh, hl) == (len(pkt), 41, 64)
    assert o[8:24] == a6(t.port_address(0, PLANE))
    assert o[24:40] == a6(t.kernel_path_address(0, 1, PLANE))  # leaf, spine, leaf, h1's port, End.DT6


def test_encap_leaves_everything_else_alone(hosts):
    t, (h0, _) = hosts
    mrc = ip6(t.port_address(0, PLANE), t.path_address(0, 1, PLANE, 0), b"\0" * 64, nh=17)
    for f in (ETH + mrc,                                   # MRC: already on its path
              ETH + inner(t, dst_host=7),                  # a host the port has no path to
              ETH + inner(t, dst_host=0x100),              # a host index past the plan's (fd6d:100:...)
              ETH + ip6("fd6d::1", "fd6e::2", b"\0" * 40),  # the management network's
              ETH[:12] + b"\x08\x00" + bytes(40)):         # IPv4
        verdict, out, moved = h0.run("host_encap", f)
        assert verdict == TC_ACT_UNSPEC and out == f and not moved


def shifted(t: Topology, frame: bytes, hops: int) -> bytes:
    """The frame as it leaves the last of ``hops`` switches: its outer destination shifted by one
    uSID per switch (usid_end.bpf.c, tested in test_usid_end.py)."""
    da = frame[38:54]
    da = da[:4] + da[4 + 2 * hops:] + bytes(2 * hops)
    return frame[:38] + da + frame[54:]


def test_the_round_trip_through_the_switches_gives_back_the_packet_sent(hosts):
    t, (h0, h1) = hosts
    pkt = inner(t)
    _, out, _ = h0.run("host_encap", ETH + pkt)
    arrived = shifted(t, out, 3)  # leaf, spine, leaf
    assert arrived[38:54] == a6(t.dt6_prefix(1, PLANE).split("/")[0])
    verdict, got, moved = h1.run("host_decap", arrived)
    assert verdict == TC_ACT_OK and moved == {"decapsulated": 1}
    assert got == ETH + pkt


def test_a_ce_mark_on_the_way_reaches_the_inner_header_and_not_ect_is_dropped(hosts):
    t, (h0, h1) = hosts
    for tc, want in ((0x02, 0x03), (0x01, 0x03), (0xB9, 0xBB), (0x03, 0x03)):  # ECT(0), ECT(1), DSCP kept, CE
        pkt = inner(t, tc=tc)
        _, out, _ = h0.run("host_encap", ETH + pkt)
        marked = bytearray(shifted(t, out, 3))
        marked[15] |= 0x30  # a switch queue set CE on the outer header
        verdict, got, moved = h1.run("host_decap", bytes(marked))
        assert verdict == TC_ACT_OK and got[14] >> 4 == 6
        assert (struct.unpack("!I", got[14:18])[0] >> 20) & 0xFF == want, hex(tc)
        assert got[16:] == pkt[2:]  # nothing else changed
        assert moved == ({"decapsulated": 1, "ce_copied": 1} if tc & 3 != 3 else {"decapsulated": 1}), moved
    _, out, _ = h0.run("host_encap", ETH + inner(t, tc=0x00))  # not ECN-capable
    marked = bytearray(shifted(t, out, 3))
    marked[15] |= 0x30
    verdict, _, moved = h1.run("host_decap", bytes(marked))
    assert verdict == TC_ACT_SHOT and moved == {"decap_dropped": 1}  # RFC 6040


def test_decap_leaves_everything_else_alone(hosts):
    t, (_, h1) = hosts
    dt6 = t.dt6_prefix(1, PLANE).split("/")[0]
    for f in (ETH + ip6(t.port_address(0, PLANE), t.port_address(1, PLANE), b"\0" * 64, nh=17),  # MRC, arrived
              ETH + ip6(t.port_address(0, PLANE), dt6, b"\0" * 64, nh=17),  # the End.DT6 address, not IPv6 in it
              ETH + ip6(t.port_address(0, PLANE), t.dt6_prefix(1, 0).split("/")[0], inner(t), nh=41),  # another port's
              ETH + ip6(t.port_address(0, PLANE), dt6, b"\x45" + bytes(39), nh=41),  # IPv4 inside
              ETH[:12] + b"\x08\x00" + bytes(40)):
        verdict, out, moved = h1.run("host_decap", f)
        assert verdict == TC_ACT_OK and out == f and not moved


def test_decap_drops_and_counts_an_inner_packet_too_short_to_be_one(hosts):
    t, (_, h1) = hosts
    dt6 = t.dt6_prefix(1, PLANE).split("/")[0]
    for inner_bytes in (b"\x60" + bytes(7), b"\x60" + bytes(38)):  # an IPv6 version and less than its header
        verdict, _, moved = h1.run("host_decap", ETH + ip6(t.port_address(0, PLANE), dt6, inner_bytes, nh=41))
        assert verdict == TC_ACT_SHOT and moved == {"decap_dropped": 1}, (len(inner_bytes), moved)


def test_a_host_port_queue_set_and_removed_leaves_the_programs_in_place(hosts):
    """The NIC queue's program shares the host port's clsact egress with the encap: setting and
    removing it touches only its own filter (it deleted every egress filter before)."""
    t, (h0, _) = hosts
    port = (h0.node, h0.ifname, f"{h0.node}-{t.leaf(PLANE, 0)}")
    ids = lambda: [tcbpf.prog_id(t, h0.node, h0.ifname, n, k)  # noqa: E731
                   for n, k in (("host_encap", "egress"), ("host_decap", "ingress"), ("port_queue", "egress"))]
    before = ids()
    assert None not in before[:2] and before[2] is None
    qos.apply_ports(t, [port], qos.nic(qos.PortQoS(100_000_000)))
    during = ids()
    assert during[:2] == before[:2] and during[2] is not None
    qos.apply_ports(t, [port], qos.PortQoS(0))
    assert ids() == before


def test_kernel_tcp_crosses_them_and_again_after_a_link_fails_and_heals(hosts):
    """On a kernel without SRv6 the programs are what carries the kernel's TCP; a link set down
    loses its routes (docs/fabric.md, "Kernel traps"), and the heal puts them back beside the same programs."""
    from tests.integration.test_fabric import _tcp_send

    t, (h0, h1) = hosts
    if apply.srv6(t.name) == "kernel":
        pytest.skip("the kernel's own SRv6 carries TCP here; the programs were attached beside it")
    link = f"{h0.node}-{t.leaf(PLANE, 0)}"
    for step in ("before", "healed"):
        a = srv6bpf.host_counters(t, h0.node, h0.ifname)
        b = srv6bpf.host_counters(t, h1.node, h1.ifname)
        assert _tcp_send(t, PLANE, 2 << 20) == [2 << 20], step
        a2 = srv6bpf.host_counters(t, h0.node, h0.ifname)
        b2 = srv6bpf.host_counters(t, h1.node, h1.ifname)
        assert a2["encapsulated"] > a["encapsulated"] and b2["decapsulated"] > b["decapsulated"], step
        assert a2["encap_dropped"] == a["encap_dropped"] and b2["decap_dropped"] == b["decap_dropped"], step
        if step == "before":
            apply.fail(t.name, link)
            apply.heal(t.name, link)
