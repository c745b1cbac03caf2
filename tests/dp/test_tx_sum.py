"""The sum a data packet carries out of the core (mrc_txdesc.sum): the
ones'-complement sum of exactly its bytes, taken in the pass that copies
the payload and computes the ICRC, whatever the scatter list's pieces and
their odd lengths and offsets. The I/O side finishes the UDP checksum from
it without reading the packet again (io_packet.c), so a wrong one would
leave every frame with a bad checksum."""
import struct

import pytest

from mrc import wire
from mrc.core import QPAttr
from mrc.manual import ManualContext


def ones_sum(b: bytes) -> int:
    """RFC 1071 over native little-endian 16-bit words (csrc/wire/csum.h), folded."""
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"<{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


@pytest.mark.parametrize("pieces", [[4096], [1], [333, 4001, 77], [7, 9, 1000, 3], [2048, 2047, 1], [5000]])
def test_each_data_packets_sum_is_the_sum_of_its_bytes(pieces):
    a, b = ManualContext(planes=2, seed=3), ManualContext(planes=2, seed=4)
    a.want_tx_sums()
    qa, qb = a.create_qp(QPAttr(planes=2, mtu=4096)), b.create_qp(QPAttr(planes=2, mtu=4096))
    qa.connect(qb.qpn, 0, rq_psn=qb.sq_psn)
    qb.connect(qa.qpn, 0, rq_psn=qa.sq_psn)
    src = bytearray((i * 131 + 7) & 0xFF for i in range(sum(pieces) + 64))
    dst = bytearray(len(src))
    ms, md = a.reg_mr(src), b.reg_mr(dst, remote_write=True)
    parts, off = [], 1  # an odd start in the region too
    for n in pieces:
        parts.append((ms, off, n))
        off += n
    qa.post_write(None, 0, 0, md.addr, md.rkey, wr_id=1, sges=parts)
    sent = [(p, m) for p, m in a.poll_tx(now_ns=1000) if m["is_data"]]
    assert sent and sum(len(wire.parse(p)["payload"]) for p, _ in sent) == sum(pieces)
    for p, m in sent:
        assert wire.parse(p)["icrc_ok"] and m["sum"] == ones_sum(p), (len(p), m["sum"], ones_sum(p))
        w = wire.parse(p)  # where the payload is, as the descriptor says (the simulators cut and elide by it)
        assert (m["hdr"], m["plen"]) == (w["payload_off"], w["payload_len"]) and m["hdr"] + m["plen"] + 4 == len(p)
    for p, _ in sent:
        assert b.input(p, now_ns=2000) == 0
    assert bytes(dst[:sum(pieces)]) == bytes(src[1:1 + sum(pieces)])
    a.close()
    b.close()


def test_without_asking_no_sum_is_taken():
    a, b = ManualContext(planes=2, seed=3), ManualContext(planes=2, seed=4)
    qa, qb = a.create_qp(QPAttr(planes=2)), b.create_qp(QPAttr(planes=2))
    qa.connect(qb.qpn, 0, rq_psn=qb.sq_psn)
    src, dst = bytearray(4096), bytearray(4096)
    ms, md = a.reg_mr(src), b.reg_mr(dst, remote_write=True)
    qa.post_write(ms, 0, 4096, md.addr, md.rkey, wr_id=1)
    assert [m["sum"] for _, m in a.poll_tx(now_ns=1000)] == [None]
    a.close()
    b.close()
