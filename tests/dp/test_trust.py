"""Trust boundaries (protocol.md section 3, "Trust"): a QP hears only its
peer; control packets act only on what is outstanding; protection domains;
unguessable, unreusable keys; no freed memory read; every attribute
bounded. Each test names the finding of issue 15 it covers."""
import ctypes
import errno

import pytest
from mrc._dp import ffi, lib

from mrc import wire
from mrc.core import QPAttr
from mrc.errors import ErrnoError
from mrc.manual import ManualContext

from .handdriven import DEST_QPN, PEER, HandDriven

OTHER = PEER + 1  # a third host the context also knows


def sent_data(h, n_bytes=64 << 10, wr_id=1):
    """Post one write on h's QP and let its packets leave (nobody answers)."""
    src = bytearray(n_bytes)
    mr = h.ctx.reg_mr(src)
    h.qp.post_write(mr, 0, n_bytes, 0x1000, 1, wr_id=wr_id)
    out = [p for p, d in h.out() if d["is_data"]]
    return mr, out


# ------------------------------------ 6. only the peer, only its own QP
def test_data_from_a_host_that_is_not_the_peer_writes_nothing():
    """Finding 6: a third host's packet to our QP, with the right rkey and a
    valid range, is dropped and counted; nothing is written or answered."""
    h = HandDriven()
    h.deliver(h.data(0, b"evil" * 16, flags=wire.BTH_ACKREQ), peer=OTHER)
    assert h.payload(0, 64) == bytes(64) and h.out() == []
    assert h.ctx.drops()["wrong_peer"] == 1
    h.deliver(h.data(0, b"good" * 16, flags=wire.BTH_ACKREQ), peer=PEER)
    assert h.payload(0, 64) == b"good" * 16


def test_a_forged_sack_completes_nothing():
    """Finding 6: one SACK with cack = next_psn - 1 from a third host, or
    from the peer's host for another connection, completes nothing."""
    h = HandDriven()
    _, out = sent_data(h)
    last = len(out) - 1
    h.deliver(h.sack(last), peer=OTHER)
    h.deliver(h.sack(last, scid=(DEST_QPN + 1) & 0xFFFF), peer=PEER)  # another QP of the peer
    h.deliver(h.sack(last, dcid=(h.qp.qpn + 1) & 0xFFFF), peer=PEER)  # meant for another QP here
    assert h.ctx.poll_cq() == [] and h.qp.stats()["una_psn"] == h.psn
    assert h.ctx.drops()["wrong_peer"] == 3
    h.deliver(h.sack(last), peer=PEER)
    assert [w.status_name for w in h.ctx.poll_cq()] == ["SUCCESS"]


def test_a_qp_reaches_only_regions_of_its_protection_domain():
    """Finding 6: a region registered in another PD is out of reach of the
    QP's own work requests (refused at post) and of the QP's peer (NACK
    REMOTE_ACCESS, nothing written, and the QP ends, as InfiniBand's
    responder does: a guess gets one try)."""
    h = HandDriven()
    pd = h.ctx.alloc_pd()
    other = bytearray(4096)
    mr = pd.reg_mr(other, remote_write=True)
    with pytest.raises(ErrnoError) as e:
        h.qp.post_write(mr, 0, 64, 0x1000, 1)
    assert e.value.errno == errno.EFAULT
    pkt = wire.build(b"x" * 64, opcode=wire.OP_WRITE_ONLY, dqpn=h.qp.qpn, psn=h.psn, va=mr.addr, rkey=mr.rkey,
                     dma_len=64, flags=wire.BTH_ACKREQ)
    h.deliver(pkt)
    nacks = [p for p, _ in h.out() if p["opcode"] == wire.OP_NACK]
    assert [n["nack_reason"] for n in nacks] == [wire.NACK_REMOTE_ACCESS] and other == bytearray(4096)
    assert h.qp.stats()["state"] == lib.MRC_QPS_ERROR
    assert [(e.type, e.qpn, e.info) for e in h.ctx.async_events()] == [("QP_FATAL", h.qp.qpn,
                                                                        lib.MRC_WC_LOC_PROT_ERR)]
    with pytest.raises(ErrnoError) as e:
        pd.dealloc()  # a region still uses it
    assert e.value.errno == errno.EBUSY


# ------------------------------------ 7. control packets act on what is outstanding
def test_a_remote_access_nack_for_an_acknowledged_psn_changes_nothing():
    """Finding 7: NACK REMOTE_ACCESS ends a QP only for a PSN still out, and
    only from the peer."""
    h = HandDriven()
    _, out = sent_data(h)
    h.deliver(h.sack(0, bitmap=1))  # PSN 0 cumulatively, PSN 2 by the bitmap (base = cack + 2)
    h.deliver(h.nack(2, wire.NACK_REMOTE_ACCESS))
    assert h.qp.state == "RTS"
    h.deliver(h.nack(3, wire.NACK_REMOTE_ACCESS), peer=OTHER)
    assert h.qp.state == "RTS"
    h.deliver(h.nack(len(out) + 5, wire.NACK_REMOTE_ACCESS))  # never sent
    assert h.qp.state == "RTS"
    h.deliver(h.nack(3, wire.NACK_REMOTE_ACCESS))  # still out: the peer refuses it
    assert h.qp.state == "ERROR"


def test_a_port_status_of_no_ports_does_not_stall_a_qp_for_ever():
    """Finding 7: a peer saying it has no usable port leaves nothing to send
    on; queued work then ends in RETRY_EXC_ERR within the retry budget
    instead of waiting for ever. A third host's port status is ignored."""
    h = HandDriven(timeout=4, linear_cnt=1, exp_cnt=1)
    status = wire.build(opcode=wire.OP_ENDPOINT_REQUEST, dqpn=h.qp.qpn, ep_op=wire.EP_PORT_STATUS, port_bitmap=0)
    h.deliver(status, peer=OTHER)
    assert h.ctx.drops()["wrong_peer"] == 1
    h.deliver(status)
    src = bytearray(4096)
    mr = h.ctx.reg_mr(src)
    h.qp.post_write(mr, 0, 4096, 0x1000, 1, wr_id=3)
    assert [p for p, d in h.out() if d["is_data"]] == []  # nowhere to send
    t = h.now
    for _ in range(50):
        nxt = h.ctx.next_timer(t)
        assert nxt is not None, "the QP waits for ever"
        t = max(nxt, t + 1)
        h.out(at=t)
        wc = h.ctx.poll_cq()
        if wc:
            break
    assert [(w.wr_id, w.status_name) for w in wc] == [(3, "RETRY_EXC_ERR")]


def test_probe_responses_count_only_after_the_sack_is_checked():
    """Finding 7: a SACK flagged as a probe response that acknowledges what
    was never sent is dropped before it can bring a retired EV back."""
    h = HandDriven(ev_min_active=1, timeout=4, probe_k=1)
    _, out = sent_data(h, 4096)
    first_ev = [d["ev"] for p, d in h.out(at=h.now + (1024 << 4) + 1) if d["is_data"]]  # the timer resends
    bad = [e["ev"] for e in h.qp.evs() if e["state"] == "ASSUMED_BAD"]
    assert bad, (first_ev, h.qp.evs())
    h.out(at=h.now + 1)  # its probe leaves
    for _ in range(5):
        h.deliver(h.sack(1000, flags=wire.SETH_PR, ev=bad[0]))  # stale: acknowledges PSNs never sent
    assert {e["ev"]: e["state"] for e in h.qp.evs()}[bad[0]] == "ASSUMED_BAD"
    assert h.ctx.drops()["stale_ack"] == 5


def test_the_trimmed_class_does_not_excuse_a_control_packet_from_its_icrc():
    """Finding 7: only data packets can be trimmed; a NACK marked trimmed
    with a broken ICRC is dropped, not acted on."""
    h = HandDriven()
    sent_data(h)
    nack = bytearray(h.nack(0, wire.NACK_TRIMMED))
    nack[-1] ^= 0xFF
    h.deliver(bytes(nack), trimmed=True)
    assert h.qp.stats()["trims"] == 0 and h.qp.stats()["nacks_rx"] == 0
    assert h.ctx.drops()["malformed"] + h.ctx.drops()["icrc"] == 1


# ------------------------------------ 8. keys nobody can guess or reuse
def test_rkeys_are_unpredictable_and_a_dead_key_stays_dead_for_2_to_the_20_registrations():
    """Finding 8: a fresh context's rkeys are not (slot + 1) << 8 | counter;
    two contexts differ; a deregistered key is not valid again within 2^20
    registrations, and a late packet with it writes nothing."""
    keys = [[ctx.reg_mr(bytearray(64)).rkey for _ in range(4)] for ctx in (ManualContext(planes=2),
                                                                            ManualContext(planes=2))]
    assert keys[0] != keys[1] and len(set(keys[0])) == 4
    assert not set(keys[0]) & {0x101, 0x202, 0x303, 0x404}  # not slot and counter
    h = HandDriven()
    old = h.mr.rkey
    h.mr.close()
    buf = ffi.new("uint8_t[]", 64)
    lkey, rkey = ffi.new("uint32_t *"), ffi.new("uint32_t *")
    seen_old = 0
    dev = h.ctx.handle()
    for _ in range(1 << 20):
        assert lib.mrc_mr_reg(dev, 0, buf, 64, lib.MRC_ACCESS_REMOTE_WRITE, lkey, rkey) == 0
        seen_old += rkey[0] == old
        assert lib.mrc_mr_dereg(dev, lkey[0]) == 0
    assert seen_old == 0
    fresh = h.ctx.reg_mr(memoryview(h.region)[256:256 + 4096], remote_write=True)
    h.deliver(h.data(0, b"late" * 16, rkey=old, flags=wire.BTH_ACKREQ))
    assert h.payload(0, 64) == bytes(64) and fresh.rkey != old
    assert [p["nack_reason"] for p, _ in h.out() if p["opcode"] == wire.OP_NACK] == [wire.NACK_REMOTE_ACCESS]


def test_qp_numbers_and_keys_use_every_bit_and_are_found_through_a_table():
    """As InfiniBand's: QP numbers are 24 random-looking bits and keys 32,
    neither carries its slot (so a peer that learns one learns nothing of
    the next), and every live one is found after any churn of creations and
    destructions (the table's removals keep its runs whole)."""
    import random

    ctx = ManualContext(planes=2, max_qps=1024)
    qps = [ctx.create_qp(QPAttr(planes=2, ev_count=8)) for _ in range(64)]
    nums = [q.qpn for q in qps]
    assert len(set(nums)) == 64 and all(0 < n < 1 << 24 for n in nums)
    assert max(nums) >= 1 << 20 and sum(n & 1023 == i for i, n in enumerate(nums)) < 4  # high bits used, no slots
    keys = [ctx.reg_mr(bytearray(64)).rkey for _ in range(64)]
    assert len(set(keys)) == 64 and max(keys) >= 1 << 28 and sum(k & 1023 == i for i, k in enumerate(keys)) < 4
    rng = random.Random(7)
    live = {q.qpn: q for q in qps}
    st = ffi.new("struct mrc_qp_stats *")
    for _ in range(2000):
        if live and rng.random() < 0.5:
            q = live.pop(rng.choice(sorted(live)))
            q.destroy()
            assert lib.mrc_qp_query(ctx.handle(), q.qpn, st) == -errno.ENOENT  # gone from the table too
        else:
            q = ctx.create_qp(QPAttr(planes=2, ev_count=8))
            live[q.qpn] = q
    for n in live:
        assert lib.mrc_qp_query(ctx.handle(), n, st) == 0, n  # each found by its number
    ctx.close()


def test_a_qp_in_a_partition_takes_only_its_partitions_packets():
    """P_Keys, as InfiniBand's: a QP in partition 0x8012 sends it on every
    packet and drops (and counts) packets of another partition or none; a
    limited member (bit 15 clear) of the same partition gets through, and a
    QP in no partition ignores P_Key."""
    h = HandDriven(pkey=0x8012)
    for pkey in (0x0000, 0x8013, 0x7FFF):
        pkt = wire.build(b"x" * 64, opcode=wire.OP_WRITE_ONLY, dqpn=h.qp.qpn, psn=h.psn, va=h.mr.addr,
                         rkey=h.mr.rkey, dma_len=64, flags=wire.BTH_ACKREQ, pkey=pkey)
        h.deliver(pkt)
    assert h.ctx.drops()["pkey"] == 3 and h.payload(0, 64) == bytes(64) and h.out() == []
    h.deliver(wire.build(b"y" * 64, opcode=wire.OP_WRITE_ONLY, dqpn=h.qp.qpn, psn=h.psn, va=h.mr.addr,
                         rkey=h.mr.rkey, dma_len=64, flags=wire.BTH_ACKREQ, pkey=0x0012))  # a limited member
    assert h.payload(0, 64) == b"y" * 64
    sent = h.out()
    assert sent and all(p["pkey"] == 0x8012 for p, _ in sent)  # its SACK carries the partition
    plain = HandDriven()
    plain.deliver(plain.data(0, b"z" * 64))
    assert plain.payload(0, 64) == b"z" * 64 and plain.ctx.drops()["pkey"] == 0
    with pytest.raises(ErrnoError):
        HandDriven(pkey=0x10000)


# ------------------------------------ 11. no freed memory read
def test_closing_a_region_with_work_queued_is_refused():
    """Finding 11: a region a queued write reads from cannot be closed
    (EBUSY) until that write completed; then it can."""
    h = HandDriven()
    mr, _ = sent_data(h)
    with pytest.raises(ErrnoError) as e:
        mr.close()
    assert e.value.errno == errno.EBUSY
    h.qp.modify(lib.MRC_QPS_ERROR)
    assert [w.status_name for w in h.ctx.poll_cq()] == ["WR_FLUSH_ERR"]
    mr.close()


# ------------------------------------ 12. every attribute bounded
@pytest.mark.parametrize("bad", [dict(ev_backup=0x40000000), dict(rq_depth=0xFFFFFFFF), dict(sq_depth=0x10000),
                                 dict(max_wimm=0), dict(mtu=9000), dict(ev_count=3)])
def test_qp_attributes_out_of_bounds_are_refused(bad):
    with pytest.raises(ErrnoError) as e:
        ManualContext(planes=4).create_qp(QPAttr(**{"planes": 4, "ev_count": 8, **bad}))
    assert e.value.errno == errno.EINVAL


@pytest.mark.parametrize("kw", [dict(cq_depth=0xFFFFFFFF), dict(ev_event_depth=0xFFFFFFFF), dict(planes=17),
                                dict(max_qps=1 << 21)])
def test_context_attributes_out_of_bounds_are_refused(kw):
    with pytest.raises(ErrnoError) as e:
        ManualContext(**kw)
    assert e.value.errno == errno.EINVAL
    with pytest.raises(ErrnoError):
        ManualContext(planes=2).create_cq(0xFFFFFFFF)


def test_error_then_reset_starts_the_qp_afresh_and_a_late_sack_is_harmless():
    """Finding 12: ERROR -> RESET -> RTS with new PSNs keeps nothing of the
    old window; a late SACK for the old PSNs neither completes nor
    underflows anything, and the QP sends again."""
    h = HandDriven()
    sent_data(h)
    h.qp.modify(lib.MRC_QPS_ERROR)
    h.ctx.poll_cq()
    for st in (lib.MRC_QPS_RESET, lib.MRC_QPS_INIT):
        h.qp.modify(st)
    h.qp.modify(lib.MRC_QPS_RTR, DEST_QPN, PEER, rq_psn=0x500000)
    h.qp.modify(lib.MRC_QPS_RTS, sq_psn=0x500000)
    st = h.qp.stats()
    assert (st["inflight"], st["next_psn"], st["una_psn"], st["epsn"]) == (0, 0x500000, 0x500000, 0x500000)
    h.deliver(h.sack(10))  # for the old window
    assert h.qp.stats()["inflight"] == 0 and h.ctx.poll_cq() == []
    _, out = sent_data(h, 8192, wr_id=9)
    assert [p["psn"] for p in out] == [0x500000, 0x500001]
    assert h.qp.stats()["inflight"] == 8192


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]


def _heap_in_use() -> int:
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _MallInfo2
    m = libc.mallinfo2()
    return m.uordblks + m.hblkhd


def test_closing_a_context_frees_its_qps():
    """Found by the fuzzers' leak check: QP numbers became random, and
    closing a context looked its QPs up by slot + 1, so every QP of every
    closed context stayed allocated (a long-running server leaks with each
    client). Big QPs make a leak impossible to miss."""
    def cycle():
        with ManualContext(planes=4, max_qps=8) as ctx:
            for _ in range(4):
                ctx.create_qp(QPAttr(planes=4, mpr=64, sq_depth=4096, rq_depth=4096))

    cycle()
    before = _heap_in_use()
    for _ in range(50):
        cycle()
    grown = _heap_in_use() - before
    assert grown < 8 << 20, f"the heap grew by {grown >> 20} MiB over 50 contexts of 4 QPs"


def test_a_qp_with_a_1024_psn_window_keeps_under_64_kib_of_state():
    """The memory target (bench/engine_bench.py, qp_state_bytes): a byte added
    to the per-PSN entry made it 69,040 once (24 -> 32 bytes of padding)."""
    n = QPAttr(mpr=8).state_bytes()
    assert n <= 65536, n
