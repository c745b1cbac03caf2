"""Authenticated MRC (protocol.md section 8) in the engine, by hand and over
the in-memory link: secured transfers arrive whole through loss and
reordering; on the wire the payload is sealed (AUTH) or unreadable
(ENCRYPT); a packet that was changed, replayed, sent in the clear, in the
other mode or under another key is dropped and counted, and changes
nothing; keys move on (a ratchet) without losing a packet."""
from __future__ import annotations

import errno

import pytest
from mrc._dp import lib

from mrc import secure, wire
from mrc.core import QPAttr
from mrc.errors import ErrnoError
from mrc.manual import ManualContext
from tests.dp.harness import SIZES, WR_OK, Pair, attr, digest

PSK = b"p" * 32


@pytest.mark.parametrize("mode", ["auth", "encrypt"])
def test_a_secured_transfer_arrives_whole_through_loss_and_reordering(mode):
    pair = Pair(seed=5, loss_ppm=20_000, jitter_ns=20_000)
    pair.qa, pair.qb = pair.sim.connect(pair.a, pair.b, attr(), security=mode)
    src, dst, send, _ = pair.transfer(SIZES)
    assert [w.status for w in send] == [WR_OK] * len(SIZES) and digest(src) == digest(dst)
    assert pair.qa.stats()["rtx_packets"] > 0  # losses were recovered, under the keys
    for ctx in (pair.a, pair.b):
        assert ctx.drops()["auth"] == 0 and ctx.drops()["replay"] == 0


def test_the_key_id_moves_on_every_rotate_every_packets_and_the_receiver_follows():
    h = Hand("encrypt", rotate_every=2)
    sent = [p for _ in range(3) for p in h.send(512)]  # one packet each
    assert [wire.parse(p)["key_id"] for p in sent] == [0, 0, 1] and [wire.parse(p)["pn"] for p in sent] == [0, 1, 2]
    assert [h.to_b(p) for p in (sent[0], sent[2], sent[1])] == [0, 0, 0]  # the old key still takes a late one
    assert h.b.drops()["auth"] == 0


def test_keys_move_on_and_every_packet_still_verifies():
    pair = Pair(seed=6, jitter_ns=10_000)
    pair.qa, pair.qb = pair.sim.connect(pair.a, pair.b, attr(), security="encrypt", rotate_every=64)
    src, dst, send, _ = pair.transfer([1 << 20] * 3)  # about 800 packets: a dozen keys each way
    assert all(w.status == WR_OK for w in send) and digest(src) == digest(dst)
    assert pair.b.drops()["auth"] == 0 and pair.a.drops()["auth"] == 0


def plane_of(pkt: bytes) -> int:
    """The plane a secured packet was sent on (its SECH names it), as a
    network that delivers it there does; 0 for a packet in the clear."""
    return pkt[lib.MRC_BTH_LEN + 2] if len(pkt) > lib.MRC_BTH_LEN + 2 and pkt[1] & 0x0F == 2 else 0


class Hand:
    """Two contexts and a secured QP each, packets moved by the test."""

    def __init__(self, mode: str = "auth", mode_b: str | None = None, rotate_every: int = 0) -> None:
        self.a, self.b = ManualContext(planes=2, seed=3), ManualContext(planes=2, seed=4)
        qattr = QPAttr(planes=2, ev_count=8, timeout=6)
        self.qa, self.qb = self.a.create_qp(qattr), self.b.create_qp(qattr)
        (pa, ua), (pb, ub) = secure.keypair(), secure.keypair()
        self.qa.set_keys(secure.derive(pa, ub, PSK, b"t", True, mode, rotate_every))
        self.qb.set_keys(secure.derive(pb, ua, PSK, b"t", False, mode_b or mode, rotate_every))
        self.qa.connect(self.qb.qpn, 0, rq_psn=self.qb.sq_psn)
        self.qb.connect(self.qa.qpn, 0, rq_psn=self.qa.sq_psn)
        self.src = bytearray(b"secret payload! " * 64)
        self.dst = bytearray(len(self.src))
        self.ms, self.md = self.a.reg_mr(self.src), self.b.reg_mr(self.dst, remote_write=True)
        self.now = 0

    def send(self, n: int = 1024) -> list[bytes]:
        self.qa.post_write(self.ms, 0, n, self.md.addr, self.md.rkey, wr_id=1)
        self.now += 1000
        return [p for p, _ in self.a.poll_tx(now_ns=self.now)]

    def to_b(self, pkt: bytes, trimmed: bool = False) -> int:
        self.now += 1000
        return self.b.input(pkt, port=plane_of(pkt), trimmed=trimmed, now_ns=self.now)

    def to_a(self, pkt: bytes) -> int:
        return self.a.input(pkt, port=plane_of(pkt), now_ns=self.now)

    def back(self) -> list[bytes]:
        self.now += 1000
        return [p for p, _ in self.b.poll_tx(now_ns=self.now)]


@pytest.mark.parametrize("mode", ["auth", "encrypt"])
def test_on_the_wire_a_secured_packet_is_sealed_and_its_payload_hidden_when_encrypted(mode):
    h = Hand(mode)
    h.qa.post_write(h.ms, 0, 1024, h.md.addr, h.md.rkey, wr_id=1)
    h.now += 1000
    ((pkt, meta),) = h.a.poll_tx(now_ns=h.now)
    p = wire.parse(pkt)
    # the descriptor's header and payload bytes: then the tag, not the ICRC
    assert meta["plen"] == 1024 and meta["hdr"] + 1024 + lib.MRC_TAG_LEN == len(pkt)
    assert p["tver"] == lib.MRC_WIRE_SECURED and p["sec_mode"] == secure.MODES[mode] and p["pn"] == 0
    assert (b"secret payload" in pkt) == (mode == "auth")
    assert h.to_b(pkt) == 0 and bytes(h.dst[:1024]) == bytes(h.src[:1024])
    acks = h.back()
    assert acks and all(wire.parse(a)["tver"] == lib.MRC_WIRE_SECURED for a in acks)
    assert all((m["hdr"], m["plen"]) == (0, 0) for _, m in h.b.poll_tx(now_ns=h.now))
    for a in acks:
        assert h.to_a(a) == 0
    assert [w.status for w in h.a.poll_cq()] == [WR_OK]


def _flip(pkt: bytes, at: int) -> bytes:
    b = bytearray(pkt)
    b[at] ^= 0x01
    return bytes(b)


@pytest.mark.parametrize("mode", ["auth", "encrypt"])
def test_a_changed_replayed_or_clear_packet_is_dropped_counted_and_changes_nothing(mode):
    h = Hand(mode)
    (pkt,) = h.send()
    hl = lib.mrc_pkt_hdr_len(pkt, len(pkt))
    forged = [_flip(pkt, hl + 5),               # the payload
              _flip(pkt, len(pkt) - 1),         # the tag
              _flip(pkt, 20),                   # the packet number
              _flip(pkt, 11)]                   # the PSN, in the authenticated BTH
    for f in forged:
        assert h.to_b(f) < 0
    assert h.b.drops()["auth"] == len(forged) and h.dst == bytearray(len(h.dst)) and h.back() == []
    # in the clear: a plain packet to a secured QP (what a peer without the keys can send)
    clear = wire.build(b"x" * 64, opcode=wire.OP_WRITE_ONLY, dqpn=h.qb.qpn, psn=h.qa.sq_psn, va=h.md.addr,
                       rkey=h.md.rkey, dma_len=64, flags=wire.BTH_ACKREQ)
    assert h.to_b(clear) < 0 and h.b.drops()["auth"] == len(forged) + 1 and h.dst == bytearray(len(h.dst))
    # the real one lands once; its replay is refused
    assert h.to_b(pkt) == 0 and bytes(h.dst[:1024]) == bytes(h.src[:1024])
    assert h.to_b(pkt) == -errno.EALREADY and h.b.drops()["replay"] == 1
    assert h.qb.stats()["state"] == lib.MRC_QPS_RTS and h.qb.stats()["rx_packets"] == 1


def test_a_forged_sack_completes_nothing():
    """What completes work must come from the holder of the keys: a SACK in
    the clear (the peer's address, the right QP and connection ids) is
    refused, the real one completes."""
    h = Hand("auth")
    (pkt,) = h.send()
    forged = wire.build(opcode=wire.OP_SACK, dqpn=h.qa.qpn, cack_psn=h.qa.sq_psn, sack_base_off=2,
                        scid=h.qb.qpn & 0xFFFF, dcid=h.qa.qpn & 0xFFFF)
    assert h.a.input(forged, now_ns=h.now) < 0 and h.a.poll_cq() == [] and h.a.drops()["auth"] == 1
    assert h.to_b(pkt) == 0
    for a in h.back():
        h.to_a(a)
    assert [w.status for w in h.a.poll_cq()] == [WR_OK]


def test_the_two_ends_must_agree_on_mode_and_keys():
    h = Hand("auth", mode_b="encrypt")
    (pkt,) = h.send()
    assert h.to_b(pkt) < 0 and h.b.drops()["auth"] == 1 and h.dst == bytearray(len(h.dst))
    other = Hand("auth")
    (pkt2,) = other.send()
    assert h.to_b(pkt2) < 0  # the right QP number and mode, another connection's keys


def test_keys_are_set_before_the_qp_connects_and_need_a_pre_shared_key():
    h = Hand("auth")
    with pytest.raises(ErrnoError) as e:
        h.qa.set_keys(secure.derive(*secure.keypair()[:1], secure.keypair()[1], PSK, b"", True, "auth"))
    assert e.value.errno == errno.EINVAL
    with pytest.raises(ErrnoError, match="pre-shared key"):
        secure.derive(*secure.keypair(), b"", b"", True, "auth")
    with pytest.raises(ErrnoError, match="security mode"):
        secure.mode_of("strong")


def test_a_controller_probe_to_a_secured_peer_goes_sealed_and_only_a_sealed_answer_counts():
    """The controller's EV probes to a host with which a secured QP is
    connected go through that QP under its keys: an answer in the clear,
    with the right probe id (an on-path forger reads it), counts for
    nothing; the real one, verified, gives the round trip."""
    h = Hand("auth")
    ev = wire.ev_make(1, 3)
    pid = h.a.probe_send(0, ev, now_ns=h.now)
    h.now += 1000
    (req,) = [p for p, _ in h.a.poll_tx(now_ns=h.now)]
    p = wire.parse(req)
    assert p["tver"] == lib.MRC_WIRE_SECURED and p["dqpn"] == h.qb.qpn and p["probe_id"] == pid
    forged = wire.build(opcode=wire.OP_ENDPOINT_RESPONSE, dqpn=0, probe_id=pid, ep_op=wire.EP_EV_PROBE, ev=ev,
                        rx_port=1, t1=p["t1"])
    assert h.a.input(forged, now_ns=h.now) < 0 and h.a.probe_result(pid) is None
    assert h.a.drops()["stale_probe"] == 1
    assert h.to_b(req) == 0
    (ans,) = h.back()
    assert wire.parse(ans)["tver"] == lib.MRC_WIRE_SECURED and wire.parse(ans)["dqpn"] == h.qa.qpn
    assert h.to_a(_flip(ans, len(ans) - 1)) < 0 and h.a.drops()["auth"] == 1
    assert h.a.probe_result(pid) is None
    h.now += 1000
    assert h.to_a(ans) == 0
    r = h.a.probe_result(pid)
    assert r["ev"] == ev and r["rtt_ns"] > 0


def test_a_controller_probe_to_a_peer_without_a_secured_qp_stays_in_the_clear():
    a, b = ManualContext(planes=2, seed=3), ManualContext(planes=2, seed=4)
    pid = a.probe_send(0, wire.ev_make(0, 1), now_ns=0)
    (req,) = [p for p, _ in a.poll_tx(now_ns=1000)]
    assert wire.parse(req)["tver"] == 1 and wire.parse(req)["dqpn"] == 0
    assert b.input(req, now_ns=2000) == 0
    (ans,) = [p for p, _ in b.poll_tx(now_ns=3000)]
    assert a.input(ans, now_ns=4000) == 0 and a.probe_result(pid)["rtt_ns"] > 0
    a.close()
    b.close()


def test_a_probe_addressed_to_a_qp_in_the_clear_is_refused():
    """Only a secured QP carries the controller's probes: one addressed to a
    QP without keys is dropped and counted, and nothing answers it."""
    from tests.dp.harness import Pair

    pair = Pair(seed=7)
    pair.qa, pair.qb = pair.sim.connect(pair.a, pair.b, attr())
    req = wire.build(opcode=wire.OP_ENDPOINT_REQUEST, dqpn=pair.qb.qpn, probe_id=5, ep_op=wire.EP_EV_PROBE,
                     ev=wire.ev_make(0, 1))
    before = pair.b.drops()["malformed"]
    assert pair.b.input(req, now_ns=1000) < 0 and pair.b.drops()["malformed"] == before + 1
    assert [p for p, m in pair.b.poll_tx(now_ns=2000) if wire.parse(p)["opcode"] == wire.OP_ENDPOINT_RESPONSE] == []
