"""Property tests (hypothesis) of the wire format and the receive path."""
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from mrc import wire
from mrc.core import QPAttr
from mrc.manual import ManualContext

MASK = 0xFFFFFF


@given(st.integers(0, MASK), st.integers(1, (1 << 23) - 1))
def test_psn_compare_across_wraparound(a, d):
    b = (a + d) & MASK
    assert wire.psn_cmp(a, b) < 0 and wire.psn_cmp(b, a) > 0 and wire.psn_cmp(a, a) == 0


def responder(win_mpr=1):
    ep = ManualContext(planes=2)
    qp = ep.create_qp(QPAttr(planes=2, ev_count=8, mpr=win_mpr, ack_bytes=1 << 30))
    qp.connect(dest_qpn=77, peer=0)
    region = bytearray(64 * 1024 + 512)
    view = memoryview(region)[256:256 + 64 * 1024]  # guard bytes on both sides
    mr = ep.reg_mr(view, remote_write=True)
    return ep, qp, region, mr


def data_packet(qpn, psn, mr, off=0, length=16, rkey=None, flags=0, payload=None):
    payload = payload if payload is not None else bytes([psn & 0xFF]) * length
    return wire.build(payload, opcode=wire.OP_WRITE_ONLY, dqpn=qpn, psn=psn, va=mr.addr + off,
                      rkey=mr.rkey if rkey is None else rkey, dma_len=len(payload), flags=flags)


def last_sack(ep):
    sacks = [wire.parse(p) for p, _ in ep.poll_tx() if p[0] == wire.OP_SACK]
    return sacks[-1] if sacks else None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 127), min_size=1, max_size=200))
def test_sack_tracker_equals_a_set_model(psns):
    ep, qp, region, mr = responder()
    got: set[int] = set()
    for psn in psns:
        assert ep.input(data_packet(qp.qpn, psn, mr, off=(psn % 64) * 16), ev=3) == 0
        got.add(psn)
        # ask for a SACK with ACKREQ on a duplicate-free probe of the state
    ep.input(data_packet(qp.qpn, psns[-1], mr, off=(psns[-1] % 64) * 16, flags=wire.BTH_ACKREQ), ev=3)
    s = last_sack(ep)
    epsn = 0
    while epsn in got:
        epsn += 1
    assert s["cack_psn"] == (epsn - 1) & MASK
    base = (s["cack_psn"] + s["sack_base_off"]) & MASK
    for i in range(64):
        assert bool(s["bitmap"] >> i & 1) == (((base + i) & MASK) in got), (i, sorted(got))
    assert qp.stats()["epsn"] == epsn


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=0, max_size=200), st.integers(0, 2))
def test_random_bytes_never_crash_never_write_and_are_counted(blob, mode):
    ep, qp, region, mr = responder()
    before = bytes(region)
    if mode == 1 and len(blob) >= 12:
        blob = bytes([wire.OP_WRITE_ONLY, 1]) + blob[2:5] + qp.qpn.to_bytes(3, "big") + blob[8:]
    elif mode == 2:
        good = bytearray(data_packet(qp.qpn, 0, mr, off=0, length=32, payload=b"\x55" * 32))
        r = random.Random(len(blob))
        for b in blob[:8]:
            good[r.randrange(len(good))] ^= b | 1  # mutate: ICRC must catch it
        blob = bytes(good)
    drops_before = sum(ep.drops().values())
    rc = ep.input(blob, ev=1)
    dropped = sum(ep.drops().values()) - drops_before
    if rc != 0 or dropped:
        assert dropped == 1 and bytes(region) == before
    # whatever happened, nothing outside the registered region changed
    assert region[:256] == before[:256] and region[-256:] == before[-256:]


@settings(max_examples=50, deadline=None)
@given(st.integers(-70000, 70000), st.integers(0, 9000), st.booleans())
def test_bad_rkey_or_range_gets_remote_access_and_writes_nothing(off, length, bad_key):
    ep, qp, region, mr = responder()
    before = bytes(region)
    in_range = 0 <= off and off + length <= mr.length and not bad_key
    pkt = data_packet(qp.qpn, 0, mr, off=off if off >= 0 else 0, length=length,
                      rkey=(mr.rkey ^ 0x100) if bad_key else None)
    if off < 0:  # below the region: build the VA by hand
        pkt = wire.build(b"\x77" * length, opcode=wire.OP_WRITE_ONLY, dqpn=qp.qpn, psn=0,
                         va=mr.addr + off, rkey=mr.rkey, dma_len=length)
    ep.input(pkt, ev=2)
    out = [wire.parse(p) for p, _ in ep.poll_tx()]
    if in_range:
        assert ep.drops()["rkey"] + ep.drops()["range"] == 0
    else:
        nacks = [p for p in out if p["opcode"] == wire.OP_NACK]
        assert nacks and nacks[0]["nack_reason"] == wire.NACK_REMOTE_ACCESS
        assert bytes(region) == before


def test_requester_gets_remote_access_error_and_target_unchanged():
    from mrc.simlink import Sim

    sim = Sim(planes=2, per_plane=2, seed=3)
    a, b = ManualContext(planes=2), ManualContext(planes=2)
    qa, qb = sim.connect(a, b, QPAttr(planes=2, ev_count=8))
    src = bytearray(b"x" * 10000)
    target = bytearray(b"\x01" * 8192)
    ms, md = a.reg_mr(src), b.reg_mr(target, remote_write=True)
    qa.post_write(ms, 0, 10000, md.addr, md.rkey, wr_id=5)      # 10000 > 8192: out of range
    qa.post_write(ms, 0, 100, md.addr, md.rkey ^ 0x100, wr_id=6)  # never reached: flushed
    wcs = sim.run_until(lambda: a.poll_cq())
    wcs += a.poll_cq()
    assert wcs[0].wr_id == 5 and wcs[0].status_name == "REM_ACCESS_ERR"
    assert [w.status_name for w in wcs[1:]] == ["WR_FLUSH_ERR"]
    assert qa.state == "ERROR"
    # the in-range part of the message may have landed before the NACK; a
    # wrong rkey never writes
    qa2, qb2 = sim.connect(a, b, QPAttr(planes=2, ev_count=8))
    t2 = bytearray(4096)
    m2 = b.reg_mr(t2, remote_write=True)
    qa2.post_write(ms, 0, 100, m2.addr, m2.rkey ^ 0x100, wr_id=7)
    w = sim.run_until(lambda: a.poll_cq())
    assert w[0].status_name == "REM_ACCESS_ERR" and bytes(t2) == bytes(4096)
