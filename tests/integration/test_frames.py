"""Root test: the frames an MRC connection puts on a fabric, as the last
switch hands them to each host. Every one carries a UDP checksum that is
good over its final destination (the address left after the last uSID
shift): the data packets', whose payload sum the core takes while it copies
the payload (csrc/wire/csum.h), and the SACKs', summed by the I/O side. Checked
byte by byte here because nothing on the fabric checks it: the switches
forward by address and the MRC receiver reads frames off its ring."""
import os
import socket

import pytest

from mrc import wire
from mrc.fabric import ns
from mrc.fabric.pair import qp_pair

pytestmark = pytest.mark.root
HDRS = 14 + 40 + 8


def taps(t, host):
    """A raw socket on each leaf port facing ``host`` (one per plane)."""
    out = []
    for plane in range(t.planes):
        link = t.link(f"{t.host(host)}-{t.leaf(plane, t.host_leaf(host))}")

        def make(link=link):
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
            s.bind((link.b_if, 0))
            s.settimeout(0.05)
            return s

        out.append(ns.run_in(t.ns(link.b_node), make))
    return out


def mrc_frames_out(socks):
    """What the switches sent out of these ports to the host: MRC frames only."""
    out = []
    for sock in socks:
        while True:
            try:
                f, addr = sock.recvfrom(1 << 16)
            except OSError:
                break
            if addr[2] == 4 and f[12:14] == b"\x86\xdd" and f[20] == 17 and \
                    int.from_bytes(f[56:58], "big") == wire.UDP_PORT:
                out.append(f)
        sock.close()
    return out


def checksum_good(f: bytes) -> bool:
    src, dst = (socket.inet_ntop(socket.AF_INET6, f[a:a + 16]) for a in (22, 38))
    return wire.udp6_checksum(src, dst, f[54:]) == int.from_bytes(f[60:62], "big")


@pytest.mark.parametrize("size", [1 << 20, 4096 * 3 + 1001])
def test_every_frame_has_a_good_udp_checksum_over_its_final_destination(fabric, size):
    with qp_pair(fabric, 0, 1, 1 << 21) as p:
        p.src[:] = bytes((i * 7 + 3) & 0xFF for i in range(len(p.src)))
        to_b, to_a = taps(fabric, 1), taps(fabric, 0)
        try:
            p.qa.post_write(p.ms, 1, size, p.remote.addr + 3, p.remote.rkey, wr_id=1)  # odd offsets, odd length
            assert p.cq.wait(1, timeout=5)[0].ok
        finally:
            data, acks = mrc_frames_out(to_b), mrc_frames_out(to_a)
        assert bytes(p.dst[3:3 + size]) == bytes(p.src[1:1 + size])
        data = [f for f in data if lib_is_data(f[HDRS])]
        assert data and acks
        assert all(checksum_good(f) for f in data), "a data frame with a bad UDP checksum"
        assert all(checksum_good(f) for f in acks), "a SACK with a bad UDP checksum"


def lib_is_data(opcode: int) -> bool:
    from mrc._dp import lib
    return bool(lib.mrc_opcode_is_data(opcode))


def test_a_context_without_its_thread_has_no_engine_cpu_and_says_how_it_sends(fabric):
    """mrc_ctx_engine_cpu: the engine thread's clock, and ENOENT (not a
    number) for a context whose thread never started; the tx path is named."""
    import errno

    from mrc.errors import ErrnoError
    from mrc.fabric.pair import host_context

    idle, running = host_context(fabric, 0, start=False), host_context(fabric, 1)
    try:
        with pytest.raises(ErrnoError) as e:
            idle.engine.cpu()
        assert e.value.errno == errno.ENOENT
        c = running.engine.cpu()
        assert c["tid"] > 0 and c["cpu_ns"] >= 0 and os.path.exists(f"/proc/self/task/{c['tid']}")
    finally:
        idle.close()
        running.close()
