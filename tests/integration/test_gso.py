"""Root tests: MRC's buffers of k packets on a real fabric (mrc_ctx_set_gso,
drivers/io_gso.c, csrc/bpf/host_gso.bpf.c). What leaves a host as one buffer
is, wherever it is cut, the same packets the raw socket sends one at a time:
captured whole at the leaf and cut by hand (mrc.wire.cut_buffer), and cut by
the kernel at the host's port, the frames equal those of the same blast sent
one packet per buffer, byte for byte but for a cut segment's checksum, which
the kernel leaves partial (its seed is checked instead). A QP's transfer with
k = 7 arrives whole and in buffers, and `mrc decode` counts k packets for a
buffer captured whole."""
import os
import shutil
import socket
import struct
import subprocess
import sys
import time

import pytest

from mrc import usid, wire
from mrc.fabric import apply, gsobpf, ns
from mrc.fabric.pair import host_context, qp_pair
from mrc.fabric.topology import Topology
from mrc.tools.perf import stream
from mrc.verbs import RemoteInfo
from tests.integration.conftest import _built, unique_name
from tests.waiting import wait_for

pytestmark = pytest.mark.root

K = 7
FRAMES = 28  # what each capture keeps: 4 buffers' worth


@pytest.fixture(scope="module")
def gso_fabric():
    """2 planes, 1 spine, 1 leaf, 2 hosts: every capture below sees a whole plane's traffic."""
    yield from _built(Topology(planes=2, spines=1, leaves=1, hosts=2, name=unique_name("g")))


def leaf_port(t: Topology, host: str, plane: int):
    """The leaf and its interface on the link from ``host``'s port on ``plane``."""
    link = next(lk for lk in t.links() if lk.a_node == host and lk.plane == plane)
    return link.b_node, link.b_if


def blast_and_capture(t: Topology, k: int, segs: int | None = None) -> list[bytes]:
    """Blast from h0 to h1 in bursts of K packets per EV, k to a kernel buffer, and capture
    what reaches plane 0's leaf from h0 (the first frames). ``segs``: h0's port p0 cuts its
    buffers into that many packets at most (gso_max_segs), as a NIC would."""
    node, ifname = leaf_port(t, "h0", 0)
    if segs is not None:
        ns.command(t.ns("h0"), ["ip", "link", "set", "dev", "p0", "gso_max_segs", str(segs)], check=True)
    # every frame as it arrives (ETH_P_ALL: before the leaf's own tc programs touch it)
    cap = ns.run_in(t.ns(node), lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3)))
    h0 = socket.inet_pton(socket.AF_INET6, t.port_address(0, 0))
    try:
        cap.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20)
        cap.bind((ifname, 3))
        ca = host_context(t, 0, start=False, packets_per_buffer=k)
        cb = host_context(t, 1)
        try:
            def info(c, h):
                return RemoteInfo(qpn=0, ports={p.plane: p.address for p in c.ports}, topology=t.name,
                                  host=t.host(h))
            peer = ca.peer_index(info(cb, 1))
            cb.peer_index(info(ca, 0))
            ca.engine.blast(peer, 8192, 0.02, None, burst=K)
        finally:
            ca.close()
            cb.close()
        cap.settimeout(2)
        frames: list[bytes] = []
        while sum(len(wire.cut_buffer(f)) for f in frames) < FRAMES:
            f = cap.recv(1 << 17)
            if len(f) > 62 and f[20] == 17 and f[22:38] == h0 and struct.unpack_from("!H", f, 56)[0] == wire.UDP_PORT:
                frames.append(f)
        return frames
    finally:
        cap.close()
        if segs is not None:
            ns.command(t.ns("h0"), ["ip", "link", "set", "dev", "p0", "gso_max_segs", "65535"], check=True)


def cut(frames: list[bytes]) -> list[bytes]:
    return [x for f in frames for x in wire.cut_buffer(f)][:FRAMES]


def without_checksum(f: bytes) -> bytes:
    return f[:60] + b"\0\0" + f[62:]


def test_every_host_port_has_the_egress_program_and_keeps_it_through_a_fault(gso_fabric):
    t = gso_fabric
    link = next(lk for lk in t.links() if lk.a_node == "h0" and lk.plane == 1)
    apply.fail(t.name, link.name)
    apply.heal(t.name, link.name)  # the build attached it; a fault takes the link down and up and leaves it
    for h in t.host_nodes():
        assert gsobpf.ready(t, h, [f"p{p}" for p in range(t.planes)])


def test_a_buffer_captured_whole_and_cut_by_hand_is_the_packets_sent_one_at_a_time(gso_fabric):
    t = gso_fabric
    one = blast_and_capture(t, 1)
    whole = blast_and_capture(t, K)
    assert all(len(wire.cut_buffer(f)) == 1 for f in one)
    assert len(wire.cut_buffer(whole[0])) == K and len(whole[0]) > 7 * 8192  # one buffer of K packets
    assert cut(whole) == one[:FRAMES]  # every byte: headers, EV fields, lengths, checksums, MRC
    for f in one[:FRAMES]:  # and each is a valid MRC packet with its checksum over the final address
        src = socket.inet_ntop(socket.AF_INET6, f[22:38])
        dst = usid.final(socket.inet_ntop(socket.AF_INET6, f[38:54]))
        assert struct.unpack_from("!H", f, 60)[0] == wire.udp6_checksum(src, dst, f[54:])
        assert wire.parse(f[62:])["icrc_ok"]
    fixed = gsobpf.counters(t, "h0", "p0")
    assert fixed["fixed"] > 0 and fixed["dropped"] == 0


def test_a_buffer_cut_by_the_kernel_is_the_packets_sent_one_at_a_time(gso_fabric):
    t = gso_fabric
    one = blast_and_capture(t, 1)
    kernel = blast_and_capture(t, K, segs=1)[:FRAMES]
    assert [without_checksum(f) for f in kernel] == [without_checksum(f) for f in one[:FRAMES]]
    for f in kernel:  # the kernel leaves each segment's checksum partial: its seed, over the final address
        src = socket.inet_pton(socket.AF_INET6, socket.inet_ntop(socket.AF_INET6, f[22:38]))
        dst = socket.inet_pton(socket.AF_INET6, usid.final(socket.inet_ntop(socket.AF_INET6, f[38:54])))
        words = src + dst + struct.pack("!I3xB", len(f) - 54, 17)
        s = sum(struct.unpack("!20H", words))
        while s >> 16:
            s = (s & 0xFFFF) + (s >> 16)
        assert struct.unpack_from("!H", f, 60)[0] == s


@pytest.mark.parametrize("security", ["off", "encrypt"])
def test_a_transfer_in_buffers_of_k_arrives_whole(gso_fabric, security):
    """Sealed or not, each packet of a buffer is a packet of its own (sealed on its own)."""
    t = gso_fabric
    with qp_pair(t, 0, 1, 16 << 20, security=security, packets_per_buffer=K) as p:
        r = stream(p.ca, p.qa, p.ms, p.remote, 64 << 20, msg=1 << 20, depth=16, window=16 << 20)
        assert p.verify(16 << 20) and r["gbps"] > 0
        sent = sum(p.ca.engine.port_gso(i)[0] for i in range(t.planes))
        taken = sum(p.cb.engine.port_gso(i)[1] for i in range(t.planes))
        assert sent > 0 and taken > 0 and taken <= sent


def udp_socket_sends(t: Topology, host: str) -> int:
    """MRC datagrams the host's kernel UDP stack sent since the counter was made: netfilter's output
    hook sees a UDP socket's sends, never the raw socket's (AF_PACKET goes straight to the port)."""
    out = ns.command(t.ns(host), ["nft", "list", "counter", "inet", "mrcudp", "sends"], capture_output=True,
                     text=True, check=True).stdout
    return int(out.split("packets", 1)[1].split()[0])


def test_acks_and_small_messages_go_by_the_raw_socket_at_k(gso_fabric):
    """What cannot start a buffer (a 64 B message, every ACK) leaves by the raw socket as at k = 1,
    without the UDP socket's route lookup and egress program; full-size data goes by the UDP socket."""
    t = gso_fabric
    rules = (f"table inet mrcudp {{\n counter sends {{}}\n chain out {{\n type filter hook output priority 0;\n"
             f" udp dport {wire.UDP_PORT} counter name sends\n }}\n}}\n")
    made = []
    try:
        for h in ("h0", "h1"):
            ns.command(t.ns(h), ["nft", "-f", "-"], input=rules, text=True, check=True)
            made.append(h)
        with qp_pair(t, 0, 1, 16 << 20, packets_per_buffer=K) as p:
            stream(p.ca, p.qa, p.ms, p.remote, 64 * 500, msg=64, depth=1, window=64 * 500)
            assert p.verify(64 * 500)
            assert udp_socket_sends(t, "h0") == 0 and udp_socket_sends(t, "h1") == 0
            stream(p.ca, p.qa, p.ms, p.remote, 16 << 20, msg=1 << 20, depth=8, window=16 << 20)
            assert p.verify(16 << 20)
            assert udp_socket_sends(t, "h0") > 0  # the data, in buffers (a control: the counter counts)
            assert udp_socket_sends(t, "h1") == 0  # the receiver's ACKs, all raw
    finally:
        for h in made:
            ns.command(t.ns(h), ["nft", "delete", "table", "inet", "mrcudp"], check=True)


def write_pcap(path: str, frames: list[bytes]) -> str:
    """A classic pcap of Ethernet frames, whole."""
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 1 << 18, 1))
        for fr in frames:
            now = time.time()
            f.write(struct.pack("<IIII", int(now), int(now % 1 * 1e6), len(fr), len(fr)) + fr)
    return path


def test_decode_counts_k_packets_for_a_buffer_captured_whole(gso_fabric, tmp_path):
    pytest.importorskip("scapy")
    from mrc.tools.decode import decode

    t = gso_fabric
    whole = blast_and_capture(t, K)
    path = write_pcap(os.path.join(tmp_path, "whole.pcap"), whole)
    r = decode(path)
    assert r["packets"] == sum(len(wire.cut_buffer(fr)) for fr in whole) > len(whole)
    assert r["buffers"] == sum(1 for fr in whole if len(wire.cut_buffer(fr)) > 1)
    assert r["malformed"] == 0 and r["icrc_failures"] == 0


@pytest.mark.skipif(not shutil.which("tshark"), reason="tshark is not installed")
def test_the_lua_dissector_shows_k_packets_for_a_buffer_captured_whole(gso_fabric, tmp_path):
    whole = blast_and_capture(gso_fabric, K)
    path = write_pcap(os.path.join(tmp_path, "whole.pcap"), whole[:2])
    lua = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "mrc.lua")
    out = subprocess.run(["tshark", "-X", f"lua_script:{lua}", "-r", path, "-Y", "mrc", "-T", "fields",
                          "-e", "mrc.psn", "-e", "mrc.icrc_ok", "-e", "_ws.col.Info"],
                         capture_output=True, text=True, timeout=120)
    rows = [ln.split("\t") for ln in out.stdout.splitlines() if ln.strip()]
    assert len(rows) == 2, out.stdout + out.stderr
    for psns, oks, info in rows:
        assert len(psns.split(",")) == K and oks.split(",") == ["1"] * K, (psns, oks)
        assert info.startswith(f"buffer of {K} MRC packets")


def test_mrc_perf_in_buffers_of_k_verifies_every_byte_over_every_plane(gso_fabric):
    from tests.integration.test_perf import perf

    res = perf(gso_fabric, "--verify", "--sizes", "4K,1M", "--iters", "40", "--packets-per-buffer", "0")
    for r in res:
        assert r["verified"] is True
    assert all(abs(s - 1 / gso_fabric.planes) < 0.15 for s in res[-1]["plane_share"]), res[-1]["plane_share"]


def test_mrc_perf_refuses_buffers_where_the_fabric_does_not_allow_them(tmp_path):
    """A fabric with switch queues (which must see packets), and no fabric at all: one line, exit 2."""
    t = Topology(planes=2, spines=1, leaves=1, hosts=2, name=unique_name("q"))
    for _ in _built(t):
        mrc = [sys.executable, "-m", "mrc"]
        subprocess.run(mrc + ["fabric", "qos", "all", "--name", t.name, "--rate", "1gbit"], check=True,
                       capture_output=True, timeout=60)
        out = subprocess.run(mrc + ["fabric", "exec", "h0", "--name", t.name, "--"] + mrc
                             + ["perf", "client", "h1", "--packets-per-buffer", "7"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and "does not allow it" in out.stderr and "Traceback" not in out.stderr
    alone = {**os.environ, "MRC_STATE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "mrc", "perf", "client", "::1", "--ports", "lo",
                          "--packets-per-buffer", "0"], capture_output=True, text=True, timeout=60, env=alone)
    assert out.returncode == 2 and "a host of a running mrc fabric" in out.stderr and "Traceback" not in out.stderr


def test_a_hostile_buffer_of_tiny_garbage_segments_is_cut_dropped_and_harms_nothing(gso_fabric):
    """A buffer from a peer's address whose 128 segments of 80 bytes are garbage: the receiver cuts
    it, the core drops every piece, and a transfer afterwards arrives whole."""
    t = gso_fabric
    with qp_pair(t, 0, 1, 4 << 20) as p:
        before = p.cb.port_stats()[0]

        def send_garbage():
            s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
            try:
                s.bind((t.port_address(0, 0), 0))
                s.setsockopt(socket.SOL_UDP, 103, 80)  # UDP_SEGMENT: the kernel's smallest sane cut of 10 KiB
                dst = usid.container([t.leaf_usid(0, 0), t.port_usid(1, 0)])
                for _ in range(8):
                    s.sendto(os.urandom(80 * 128), (dst, wire.UDP_PORT))
            finally:
                s.close()

        ns.run_in(t.ns("h0"), send_garbage)
        after = wait_for(lambda: (a := p.cb.port_stats()[0])["gso_rx_buffers"] > before["gso_rx_buffers"] and a,
                         5, what="the receiver took the hostile buffers")
        assert after["rx_packets"] - before["rx_packets"] >= 128  # cut into its segments, each counted
        r = stream(p.ca, p.qa, p.ms, p.remote, 16 << 20, msg=1 << 20, depth=8, window=4 << 20)
        assert p.verify(4 << 20) and r["gbps"] > 0


@pytest.fixture(scope="module")
def wire_sized_fabric():
    """As gso_fabric, with switches that forward wire-size packets (the benches' fabric)."""
    built = _built(Topology(planes=2, spines=1, leaves=1, hosts=2, name=unique_name("w")))
    t = next(built)
    try:
        apply.wire_sized(t)
        yield t
    finally:
        built.close()  # removes the fabric, also after a failure


def test_buffers_cut_at_the_leaf_merge_again_at_a_host_with_gro(wire_sized_fabric):
    """The wire-sized leaf cuts every buffer into packets and the receiving host takes them one by
    one; with host_gro its ports merge a path's packets again (UDP GRO for forwarding) and the
    engine takes them in buffers, every byte checked, sealed or not."""
    t = wire_sized_fabric

    def transfer(security: str) -> tuple[int, int]:
        with qp_pair(t, 0, 1, 16 << 20, security=security, packets_per_buffer=K) as p:
            r = stream(p.ca, p.qa, p.ms, p.remote, 64 << 20, msg=1 << 20, depth=16, window=16 << 20)
            assert p.verify(16 << 20) and r["gbps"] > 0
            return (sum(p.ca.engine.port_gso(i)[0] for i in range(t.planes)),
                    sum(p.cb.engine.port_gso(i)[1] for i in range(t.planes)))

    sent, taken = transfer("off")
    assert sent > 0 and taken == 0  # cut at the leaf, and nothing merges them
    assert apply.host_gro(t) == t.hosts * t.planes
    for security in ("off", "encrypt"):
        sent, taken = transfer(security)
        assert sent > 0 and taken > 0, security
