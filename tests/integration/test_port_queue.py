"""The switch port queue program (csrc/bpf/port_queue.bpf.c) on crafted
packets, run by the kernel itself (BPF_PROG_TEST_RUN) as loaded on a real
fabric port: what it marks, trims and drops, byte for byte."""

import json
import os
import socket
import struct
import time

import pytest
from scapy.layers.inet import TCP
from scapy.layers.inet6 import UDP, IPv6
from scapy.layers.l2 import Ether

from mrc import dissect, wire
from mrc.fabric import apply, qos, tcbpf
from mrc.fabric.topology import Topology

pytestmark = pytest.mark.root

TC_ACT_OK, TC_ACT_SHOT = 0, 2
K, T, B = 32, 96, 512  # KiB


@pytest.fixture(scope="module")
def port():
    t = Topology(planes=1, spines=1, leaves=1, hosts=2, name=f"pq{os.getpid() % 100000}")
    apply.up(t)
    try:
        node, ifname, _ = qos.switch_ports(t, "h1-p0l0")[0]
        qos.apply_ports(t, [(node, ifname, "h1-p0l0")], qos.PortQoS(1000, K, T, B))  # 1 kbit/s: it never drains
        pid = tcbpf.prog_id(t, node, ifname, "port_queue", "egress")
        maps = tcbpf.prog_maps(pid)
        prog = tcbpf.prog_fd(pid)
        yield t, prog, maps
        os.close(prog)
        for fd in maps.values():
            os.close(fd)
    finally:
        apply.down(t.name)


def run(port, frame: bytes, backlog_kb: float) -> tuple[int, bytes, dict]:
    """Set the queue estimate, run the program on ``frame``; (verdict, the
    packet as it leaves, the counters' change)."""
    t, prog, maps = port
    before = qos._ST.unpack(tcbpf.map_rw(maps["st"], None, qos._ST.size))
    st = list(before)
    st[2], st[3] = time.monotonic_ns(), int(backlog_kb * 1024)  # last_ns, backlog
    tcbpf.map_rw(maps["st"], qos._ST.pack(*st), qos._ST.size)
    verdict, out = tcbpf.prog_test_run(prog, frame)
    after = qos._ST.unpack(tcbpf.map_rw(maps["st"], None, qos._ST.size))
    delta = {k: after[5 + i] - before[5 + i] for i, k in enumerate(("packets", "bytes", "marked", "trimmed",
                                                                     "dropped"))}
    return verdict, out, delta


def mrc_frame(t, opcode=wire.OP_WRITE_MIDDLE, payload=b"\xab" * 2048, ecn=wire.ECN_ECT0, **fields):
    """An MRC data frame on its way from h0 to h1 (uSID container destination),
    UDP checksum over the final destination as the engine writes it."""
    body = wire.build(payload, opcode=opcode, dqpn=7, psn=100, va=0x1000, rkey=0x55, dma_len=1 << 20, **fields)
    seg = struct.pack("!HHHH", 0xC001, wire.UDP_PORT, 8 + len(body), 0) + body
    ck = wire.udp6_checksum(t.port_address(0, 0), t.port_address(1, 0), seg)
    ip = struct.pack("!IHBB", 6 << 28 | (wire.DSCP_DATA << 2 | ecn) << 20 | 0x12345, len(seg), 17, 64)
    ip += socket.inet_pton(socket.AF_INET6, t.port_address(0, 0))
    ip += socket.inet_pton(socket.AF_INET6, t.path_address(0, 1, 0, 0))
    return bytes.fromhex("020000000002020000000001") + b"\x86\xdd" + ip + seg[:6] + struct.pack("!H", ck) + seg[8:]


def checksum_ok(t, frame: bytes) -> bool:
    """The UDP checksum over the final destination (where the receiver checks it)."""
    seg = frame[54:]
    return wire.udp6_checksum(t.port_address(0, 0), t.port_address(1, 0), seg) == struct.unpack("!H", seg[6:8])[0]


def test_below_the_thresholds_a_packet_passes_untouched(port):
    f = mrc_frame(port[0])
    assert checksum_ok(port[0], f)
    verdict, out, d = run(port, f, 0)
    assert (verdict, out) == (TC_ACT_OK, f)
    assert d == {"packets": 1, "bytes": len(f), "marked": 0, "trimmed": 0, "dropped": 0}
    verdict, out, d = run(port, f, K - 1)  # just below the marking threshold
    assert (verdict, out, d["marked"]) == (TC_ACT_OK, f, 0)


def test_above_the_ecn_threshold_only_ecn_capable_packets_get_ce(port):
    t = port[0]
    verdict, out, d = run(port, mrc_frame(t), K + 1)
    assert verdict == TC_ACT_OK and Ether(out)[IPv6].tc & 3 == wire.ECN_CE and d["marked"] == 1
    assert Ether(out)[IPv6].tc >> 2 == wire.DSCP_DATA and len(out) == len(mrc_frame(t))
    not_ect = mrc_frame(t, ecn=0)
    verdict, out, d = run(port, not_ect, K + 1)
    assert (verdict, out, d["marked"]) == (TC_ACT_OK, not_ect, 0)


@pytest.mark.parametrize("opcode,flags,kept", [
    (wire.OP_WRITE_MIDDLE, 0, ["BTH", "METH", "RETH"]),
    (wire.OP_WRITE_ONLY_IMM, 0, ["BTH", "METH", "RETH", "ImmDt"]),
    (wire.OP_WRITE_LAST_IMM, wire.BTH_TS, ["BTH", "METH", "TSETH", "RETH", "ImmDt"]),
])
def test_above_the_trim_threshold_mrc_data_is_trimmed_exactly_as_the_protocol_says(port, opcode, flags, kept):
    t = port[0]
    f = mrc_frame(t, opcode=opcode, flags=flags, imm=0xC0FFEE, ts=0x1234)
    verdict, out, d = run(port, f, T + 1)
    assert verdict == TC_ACT_OK and d["trimmed"] == 1 and d["marked"] == 0
    hdr = {"BTH": 12, "METH": 4, "TSETH": 4, "RETH": 16, "ImmDt": 4}
    keep = 14 + 40 + 8 + sum(hdr[k] for k in kept)
    # the headers through ImmDt, byte for byte, but for the traffic class and the lengths and checksum
    assert len(out) == keep and out[62:keep] == f[62:keep]
    p = Ether(out)
    ip, udp = p[IPv6], p[UDP]
    assert ip.tc >> 2 == wire.DSCP_TRIMMED and ip.tc & 3 == wire.ECN_ECT0 and ip.fl == 0x12345
    assert ip.plen == udp.len == keep - 54 and ip.dst == t.path_address(0, 1, 0, 0)
    assert checksum_ok(t, out)
    # and the dissector reads it as a trimmed packet: no payload, no ICRC
    bth = p[dissect.BTH]
    assert bth.trimmed() and bth.opcode == opcode and bth.psn == 100 and not p.haslayer(dissect.ICRC)
    assert p[dissect.RETH].va == 0x1000 and p[dissect.RETH].rkey == 0x55
    if "ImmDt" in kept:
        assert p[dissect.ImmDt].imm == 0xC0FFEE
    parsed = wire.parse(bytes(p[dissect.BTH]), trimmed=True)
    assert parsed["opcode"] == opcode and parsed["payload_len"] == 0
    # trimmed again downstream: left as it is
    verdict, again, d = run(port, out, T + 1)
    assert (verdict, again, d["trimmed"]) == (TC_ACT_OK, out, 0)


def test_a_secured_packet_is_trimmed_after_its_sech(port):
    """Authenticated MRC (protocol.md section 8): the SECH stays with the
    headers, its header tag with it, so the trimmed packet still parses
    (its receiver verifies the header tag and answers NACK TRIMMED)."""
    t = port[0]
    f = mrc_frame(t, opcode=wire.OP_WRITE_ONLY_IMM, sec_mode=2, pn=77, imm=5)
    verdict, out, d = run(port, f, T + 1)
    keep = 14 + 40 + 8 + 12 + 20 + 4 + 16 + 4
    assert verdict == TC_ACT_OK and d["trimmed"] == 1 and len(out) == keep and out[62:keep] == f[62:keep]
    parsed = wire.parse(bytes(Ether(out)[dissect.BTH]), trimmed=True)
    assert (parsed["sec_mode"], parsed["pn"], parsed["imm"], parsed["payload_len"]) == (2, 77, 5, 0)
    assert checksum_ok(t, out)


def test_tcp_and_other_udp_are_never_trimmed(port):
    t = port[0]
    ip = IPv6(src=t.port_address(0, 0), dst=t.port_address(1, 0), tc=wire.ECN_ECT0)
    tcp = bytes(Ether() / ip / TCP(sport=5000, dport=6000, flags="A") / (b"x" * 2000))
    verdict, out, d = run(port, tcp, T + 1)
    assert verdict == TC_ACT_OK and len(out) == len(tcp) and d["trimmed"] == 0
    assert Ether(out)[IPv6].tc & 3 == wire.ECN_CE and d["marked"] == 1  # marked instead: it is ECN-capable
    other = bytes(Ether() / ip / UDP(sport=1, dport=4792) / (b"y" * 2000))
    verdict, out, d = run(port, other, T + 1)
    assert verdict == TC_ACT_OK and len(out) == len(other) and d["trimmed"] == 0


def test_hostile_and_malformed_frames_pass_untouched_and_are_never_trimmed(port):
    """Above every threshold but the buffer, frames that are not what they
    claim: the program reads nothing past their end, changes nothing and
    trims nothing (only a well-formed MRC data packet is trimmed)."""
    t = port[0]
    full = mrc_frame(t)  # ECT, MRC data, 2 KiB payload
    eth_ip = full[:14 + 40]
    not_ect = bytes([full[14], full[15] & 0xCF]) + full[16:]  # the same without ECT: CE may not be set
    bad = {
        # (an IPv6 frame shorter than its header never reaches a forwarding
        # port, and the kernel's test run refuses one: nothing to try there)
        "an IPv6 header and nothing after it": full[:14 + 40],
        "UDP to 4791, no BTH": not_ect[:14 + 40 + 8 - 2] + full[14 + 40 + 8 - 2:14 + 40 + 8],
        "MRC data header cut before RETH": full[:14 + 40 + 8 + 12 + 4],
        "headers only: nothing to cut": full[:14 + 40 + 8 + 12 + 4 + 16],
        "an IPv4 frame": bytes.fromhex("020000000002020000000001") + b"\x08\x00" + bytes(40),
        "a hop-by-hop header before UDP": eth_ip[:20] + b"\x00" + eth_ip[21:] + bytes([17, 0]) + bytes(6) +
        full[54:],
        "unknown opcode 0xff": full[:62] + b"\xff" + full[63:],
    }
    for what, f in bad.items():
        if len(f) > 54 and f[12:14] == b"\x86\xdd":  # keep IPv6's own length honest where there is one
            f = f[:18] + struct.pack("!H", len(f) - 54) + f[20:]
        try:
            verdict, out, d = run(port, f, T + 1)
        except OSError as e:
            raise AssertionError(f"{what}: {e}") from e
        assert verdict == TC_ACT_OK and d["trimmed"] == 0 and d["dropped"] == 0, what
        assert len(out) == len(f) and (out == f or d["marked"] == 1), what  # at most CE, on an ECT header
        assert d["packets"] == 1, what  # counted, as every frame that leaves


def test_an_encapsulated_packet_is_marked_inside_too(port):
    """Kernel TCP crosses the fabric in IPv6-in-IPv6 (seg6 encap); End.DT6
    does not copy the outer CE inward, so the switch marks both."""
    t = port[0]
    inner = IPv6(src="fd00::1", dst="fd00::2", tc=wire.ECN_ECT0) / TCP(flags="A") / (b"z" * 1000)
    f = bytes(Ether() / IPv6(src=t.port_address(0, 0), dst=t.port_address(1, 0), tc=wire.ECN_ECT0, nh=41) / inner)
    verdict, out, d = run(port, f, K + 1)
    p = Ether(out)
    assert verdict == TC_ACT_OK and d["marked"] == 1
    assert p[IPv6].tc & 3 == wire.ECN_CE and p[IPv6].payload.tc & 3 == wire.ECN_CE


def test_over_the_buffer_a_packet_is_dropped_and_a_trimmed_one_still_fits(port):
    t = port[0]
    f = mrc_frame(t)
    verdict, _, d = run(port, f, B - 1)  # trimmed: its headers fit
    assert verdict == TC_ACT_OK and d["trimmed"] == 1 and d["dropped"] == 0
    verdict, _, d = run(port, f, B + 1)  # even the headers do not
    assert verdict == TC_ACT_SHOT and d == {"packets": 0, "bytes": 0, "marked": 0, "trimmed": 0, "dropped": 1}
    tcp = bytes(Ether() / IPv6(src=t.port_address(0, 0), dst=t.port_address(1, 0)) / TCP() / (b"x" * 2000))
    verdict, _, d = run(port, tcp, B - 1)  # not trimmable: its whole length counts
    assert verdict == TC_ACT_SHOT and d["dropped"] == 1


def run_cli(*argv):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "mrc", *argv], capture_output=True, text=True)


def test_the_cli_sets_changes_and_removes_queues_and_faults_keep_them(small_fabric):
    t = small_fabric
    r = run_cli("fabric", "qos", "all", "--name", t.name, "--rate", "200mbit", "--json")
    assert r.returncode == 0, r.stderr
    sw, hosts = qos.ports(t)
    assert json.loads(r.stdout)["ports"] == len(sw)
    stats = json.loads(run_cli("fabric", "stats", "--name", t.name, "--json").stdout)
    assert len(stats) == len(sw) + len(hosts) and all(s["rate_bps"] == 200_000_000 for s in stats)
    # switch ports mark, trim and drop; host ports (NICs) only queue
    assert all((s["ecn_kb"], s["trim_kb"], s["buffer_kb"]) == ((0, 0, 0) if s["host"] else (32, 96, 512))
               for s in stats)
    # a switch's ports only, new thresholds, counters kept
    assert run_cli("fabric", "qos", "p0l0", "--name", t.name, "--rate", "50mbit", "--trim-kb", "0").returncode == 0
    by = {(s["node"], s["ifname"]): s for s in apply.queue_stats(t.name) if not s["host"]}
    assert all((s["rate_bps"], s["trim_kb"]) == ((50_000_000, 0) if sw == "p0l0" else (200_000_000, 96))
               for (sw, _), s in by.items())
    # a link cut and healed keeps its queue; a rate fault replaces it and its heal puts it back
    link = "p0l0-p0s0"
    apply.fail(t.name, link)
    apply.heal(t.name, link)
    apply.rate(t.name, link, "1gbit")
    assert not apply.queue_stats(t.name, link)  # tbf in its place while the fault lasts
    apply.heal(t.name, link)
    back = apply.queue_stats(t.name, link)
    assert {(s["node"], s["rate_bps"]) for s in back} == {("p0l0", 50_000_000), ("p0s0", 200_000_000)}
    # a target the fabric does not have, or a rate below 1 kbit: one line, nothing changed
    before = apply.queue_stats(t.name)
    for args, msg in ((["nosuch", "--rate", "1mbit"], "neither a link, a switch nor a host"),
                      (["all", "--rate", "500bit"], "--rate: wants a rate from 1kbit"),
                      (["all", "--rate", "1mbit", "--buffer-kb=-1"], "--buffer-kb: wants an integer from 0")):
        r = run_cli("fabric", "qos", *args, "--name", t.name)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and msg in lines[0], r.stderr
    assert [(s["node"], s["ifname"], s["rate_bps"]) for s in apply.queue_stats(t.name)] == \
        [(s["node"], s["ifname"], s["rate_bps"]) for s in before]
    # removed everywhere
    assert run_cli("fabric", "qos", "all", "--name", t.name, "--rate", "0").returncode == 0
    assert apply.queue_stats(t.name) == []
    r = run_cli("fabric", "stats", "--name", t.name)
    assert r.returncode == 0 and "no switch port has a queue" in r.stdout


def test_network_control_is_never_dropped_marked_or_trimmed_but_fills_the_queue(port):
    """BGP and BFD (DSCP CS6, as FRR sends them) take a switch's strict-priority control queue:
    a full buffer drops data, never them; CS5 (below network control) is dropped as data is."""
    src, dst = "fe80::1", "fe80::2"
    bfd = bytes(Ether() / IPv6(src=src, dst=dst, tc=48 << 2 | wire.ECN_ECT0) / UDP(sport=49152, dport=3784)
                / (b"b" * 24))
    bgp = bytes(Ether() / IPv6(src=src, dst=dst, tc=56 << 2) / TCP(sport=179, dport=40000, flags="PA") / (b"k" * 19))
    for f in (bfd, bgp):
        verdict, out, d = run(port, f, B + 10)
        assert verdict == TC_ACT_OK and out == f and d == {"packets": 1, "bytes": len(f), "marked": 0,
                                                           "trimmed": 0, "dropped": 0}
    cs5 = bytes(Ether() / IPv6(src=src, dst=dst, tc=40 << 2) / UDP(sport=1, dport=3784) / (b"b" * 24))
    verdict, _, d = run(port, cs5, B + 10)
    assert verdict == TC_ACT_SHOT and d["dropped"] == 1
