"""The switches' End next-CSID for a kernel without SRv6 (csrc/bpf/usid_end.bpf.c)
on crafted frames, run by the kernel itself (BPF_PROG_TEST_RUN) as attached
to a real switch's ports: what it shifts, byte for byte, and what it leaves
alone. Runs on any kernel (the program is attached by hand where the kernel
has its own End)."""

import os
import socket
import struct

import pytest

from mrc.fabric import apply, qos, srv6bpf, tcbpf
from mrc.fabric.topology import Topology

pytestmark = pytest.mark.root

TC_ACT_OK = 0
LEAF = "p0l0"


@pytest.fixture(scope="module")
def end():
    t = Topology(planes=1, spines=1, leaves=1, hosts=2, name=f"ue{os.getpid() % 100000}")
    apply.up(t)
    try:
        prefix = f"fc00:0:{t.leaf_usid(0, 0):x}::/48"
        if apply.srv6(t.name) == "kernel":  # the kernel's own End: the program beside it, for this test alone
            srv6bpf.end_program(t, LEAF, prefix)
        node, ifname, _ = qos.switch_ports(t, LEAF)[0]
        pid = tcbpf.prog_id(t, node, ifname, "usid_end", "ingress")
        maps = tcbpf.prog_maps(pid)
        prog = tcbpf.prog_fd(pid)
        yield t, prog, maps, t.leaf_usid(0, 0), (node, ifname)
        os.close(prog)
        for fd in maps.values():
            os.close(fd)
    finally:
        apply.down(t.name)


def run(end, frame: bytes) -> tuple[int, bytes, int]:
    """(verdict, the frame as it goes on, packets counted as shifted)."""
    t, prog, maps, _, _ = end
    before = struct.unpack("<Q", tcbpf.map_rw(maps["st"], None, 8))[0]
    verdict, out = tcbpf.prog_test_run(prog, frame)
    after = struct.unpack("<Q", tcbpf.map_rw(maps["st"], None, 8))[0]
    return verdict, out, after - before


def frame(dst: str, ethertype: int = 0x86DD, payload: bytes = b"\x5a" * 64) -> bytes:
    ip6 = struct.pack("!IHBB", 6 << 28, len(payload), 17, 64) + socket.inet_pton(socket.AF_INET6, "fd00::1") + \
        socket.inet_pton(socket.AF_INET6, dst)
    return b"\x02" * 6 + b"\x04" * 6 + struct.pack("!H", ethertype) + ip6 + payload


def da(f: bytes) -> str:
    return socket.inet_ntop(socket.AF_INET6, f[38:54])


def test_its_own_usid_is_shifted_out_and_nothing_else_changes(end):
    own = end[3]
    f = frame(f"fc00:0:{own:x}:2000:1000:b001::")
    verdict, out, shifted = run(end, f)
    assert verdict == TC_ACT_OK and shifted == 1
    assert da(out) == "fc00:0:2000:1000:b001::"
    assert out[:38] == f[:38] and out[54:] == f[54:]  # source, hop limit, payload: as they came
    # the last uSID: zeros behind it
    verdict, out, shifted = run(end, frame(f"fc00:0:{own:x}:b001::"))
    assert verdict == TC_ACT_OK and shifted == 1 and da(out) == "fc00:0:b001::"


def test_another_switchs_usid_another_block_and_other_frames_pass_untouched(end):
    own = end[3]
    for f in (frame("fc00:0:2000:1000:b001::"),            # the next switch's uSID: routed as it is
              frame(f"fc01:0:{own:x}:2000::"),             # another block
              frame(f"fc00:1:{own:x}:2000::"),
              frame(f"fc00:0:{own:x}:2000::", ethertype=0x0800),  # not IPv6
              frame(f"fc00:0:{own:x}:2000::", ethertype=0x0800)[:40]):  # short (the kernel's test run
        # refuses an IPv6 frame cut inside its header; the program reads with bpf_skb_load_bytes,
        # which fails on one, and lets it pass)
        verdict, out, shifted = run(end, f)
        assert verdict == TC_ACT_OK and out == f and shifted == 0, da(f) if len(f) >= 54 else f


def test_every_port_of_the_switch_has_it(end):
    t = end[0]
    ports = qos.switch_ports(t, LEAF)
    assert len(ports) == 3  # two hosts and the spine
    assert all(srv6bpf.end_shifted(t, node, i) is not None for node, i, _ in ports)


def test_a_port_queue_set_and_removed_leaves_the_end_in_place(end):
    # the queues' program shares clsact with the End: setting a queue deleted clsact (and the End
    # with it) on a fresh port, removing one deleted it again; each now touches only its egress filter
    t, node, ifname = end[0], *end[4]
    link = [ln for n, i, ln in qos.switch_ports(t, LEAF) if i == ifname][0]
    before = srv6bpf.end_shifted(t, node, ifname)
    qos.apply_ports(t, [(node, ifname, link)], qos.PortQoS(100_000_000, 32, 96, 512))
    assert tcbpf.prog_id(t, node, ifname, "port_queue", "egress") is not None  # the queue is there
    assert srv6bpf.end_shifted(t, node, ifname) == before  # and the same End program, its count kept
    qos.apply_ports(t, [(node, ifname, link)], qos.PortQoS(0))
    assert tcbpf.prog_id(t, node, ifname, "port_queue", "egress") is None
    assert srv6bpf.end_shifted(t, node, ifname) == before
    verdict, out, shifted = run(end, frame(f"fc00:0:{end[3]:x}:2000:b001::"))
    assert shifted == 1 and da(out) == "fc00:0:2000:b001::"


def test_the_programs_of_many_ports_come_from_one_tc_batch_and_a_missing_port_costs_only_itself(end):
    # prog_ids asks tc once for all of a node's ports; a port that is not there makes the batch
    # fail, and then each port is asked on its own: the others keep their answers, the missing one
    # has none
    t, node, ifname = end[0], *end[4]
    ports = [i for _, i, _ in qos.switch_ports(t, LEAF)]
    pid = tcbpf.prog_id(t, node, ifname, "usid_end", "ingress")
    ids = tcbpf.prog_ids(t, node, [(i, "ingress") for i in ports])
    assert [x.get("usid_end") for x in ids] == [tcbpf.prog_id(t, node, i, "usid_end", "ingress") for i in ports]
    assert ids[ports.index(ifname)]["usid_end"] == pid and all(x.get("usid_end") for x in ids)
    got = tcbpf.prog_ids(t, node, [(ifname, "ingress"), ("nosuchport", "ingress"), (ifname, "egress")])
    assert got == [{"usid_end": pid}, {}, {}]  # the switch port's egress has no program (no queue set)
