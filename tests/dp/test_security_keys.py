"""Authenticated MRC's second pass (protocol.md section 8), by hand: no
(key, nonce) is ever used twice, however a QP is reconnected; the replay
window survives a reconnect and holds at its edges; a trimmed secured
packet verifies by its header tag and is answered NACK TRIMMED, a forged
or replayed one is not; a packet delivered on another plane than it was
sealed for is refused, so probes moved onto a live plane revive nothing."""
from __future__ import annotations

import errno

import pytest
from mrc._dp import lib

from mrc import secure, wire
from mrc.core import QPAttr
from mrc.errors import ErrnoError
from mrc.manual import ManualContext
from tests.dp import sealref

PSK = b"p" * 32
GOOD, BAD = "GOOD", "ASSUMED_BAD"


def sealed_port(pkt: bytes) -> int:
    """The plane a secured packet was sealed for (its SECH): where an honest network delivers it."""
    return pkt[lib.MRC_BTH_LEN + 2]


class Link:
    """Two contexts of two planes, a secured QP each, packets moved by hand
    with every packet each side sends kept (``sent``)."""

    def __init__(self, mode: str = "auth", rotate_every: int = 0, **qattr) -> None:
        self.a, self.b = ManualContext(planes=2, seed=3), ManualContext(planes=2, seed=4)
        q = dict(planes=2, ev_count=8, timeout=6, probe_interval_ns=20_000, probe_k=2, ev_min_active=2, **qattr)
        self.qa, self.qb = self.a.create_qp(QPAttr(**q)), self.b.create_qp(QPAttr(**q))
        self.mode, self.rotate = mode, rotate_every
        self.installs: dict[str, list[bytes]] = {"a": [], "b": []}  # each side's transmit keys, as installed
        self.sent: dict[str, list[bytes]] = {"a": [], "b": []}
        self.now = 0
        self.rekey(fresh=True)
        self.src = bytearray(bytes(range(256)) * 64)
        self.dst = bytearray(len(self.src))
        self.ms, self.md = self.a.reg_mr(self.src), self.b.reg_mr(self.dst, remote_write=True)

    def rekey(self, fresh: bool, install: bool = True) -> None:
        """Keys for both QPs from an exchange: a new one (``fresh``) or the
        last one again, as ``Connection.keys()`` gives the same keys twice."""
        if fresh:
            self._kx = secure.keypair(), secure.keypair()
        (pa, ua), (pb, ub) = self._kx
        seen = ua + ub + self.qa.qpn.to_bytes(4, "big") + self.qb.qpn.to_bytes(4, "big")
        self.ka = secure.derive(pa, ub, PSK, seen, True, self.mode, self.rotate)
        self.kb = secure.derive(pb, ua, PSK, seen, False, self.mode, self.rotate)
        if install:
            self.qa.set_keys(self.ka)
            self.qb.set_keys(self.kb)
            self.installs["a"].append(bytes(self.ka.tx_key) + bytes(self.ka.tx_iv))
            self.installs["b"].append(bytes(self.kb.tx_key) + bytes(self.kb.tx_iv))

    def connect(self) -> None:
        self.qa.connect(self.qb.qpn, 0, rq_psn=self.qb.sq_psn)
        self.qb.connect(self.qa.qpn, 0, rq_psn=self.qa.sq_psn)

    def reset(self) -> None:
        """ERROR, then RESET, on both sides: what an application does before it reconnects."""
        for ctx, qp in ((self.a, self.qa), (self.b, self.qb)):
            qp.modify(lib.MRC_QPS_ERROR)
            ctx.poll_tx(now_ns=self.now)
            ctx.poll_cq()
            qp.modify(lib.MRC_QPS_RESET)

    def pump(self, rounds: int = 200, step_ns: int = 5_000, route=None) -> None:
        """Move every packet to the other side, on the plane it was sent on,
        unless ``route(side, pkt, plane)`` says otherwise (None: lost)."""
        for _ in range(rounds):
            self.now += step_ns
            for side, src, dst in (("a", self.a, self.b), ("b", self.b, self.a)):
                for pkt, meta in src.poll_tx(now_ns=self.now):
                    self.sent[side].append(pkt)
                    port = wire.ev_plane(meta["ev"])
                    port = route(side, pkt, port) if route else port
                    if port is not None:
                        dst.input(pkt, port=port, now_ns=self.now + 1000)

    def write(self, n: int = 4, size: int = 2048, before: int = 0) -> None:
        """n writes, each completed (with ``before`` posted earlier and still out)."""
        for i in range(n):
            self.qa.post_write(self.ms, 0, size, self.md.addr, self.md.rkey, wr_id=i)
        done = []
        for _ in range(100):
            self.pump(rounds=20)
            done += self.a.poll_cq()
            if len(done) >= n + before:
                break
        assert [w.ok for w in done] == [True] * (n + before)
        assert self.dst[:size] == self.src[:size]


def attribute(pkt: bytes, installs: list[bytes], rotations: int = 64) -> tuple[bytes, bytes]:
    """(the key that sealed pkt, its nonce): tried under every installed key and its ratchet."""
    pn, kid = int.from_bytes(pkt[16:24], "big"), pkt[13]
    for base in installs:
        key, iv = base[:32], base[32:]
        for _ in range(kid):
            key = sealref.key_next(key)
        if sealref.verifies(pkt, key, iv):
            return key, sealref.nonce(iv, pn)
    raise AssertionError(f"a packet (pn {pn}, key id {kid}) that no installed key sealed")


@pytest.mark.parametrize("mode", ["auth", "encrypt"])
def test_no_key_and_nonce_is_used_twice_however_a_qp_reconnects(mode):
    """Every packet both sides send is recorded, its key found by verifying
    it, and its (key, nonce) noted: across the same keys installed again (as
    ``conn.keys()`` gives them), fresh keys, and a reconnect that keeps the
    keys it has, with keys moving on every 3 packets, none repeats."""
    link = Link(mode, rotate_every=3)
    link.connect()
    link.write()
    for how in ("same keys again", "fresh keys", "keys kept", "same keys again"):
        link.reset()
        if how != "keys kept":
            link.rekey(fresh=how == "fresh keys")
        link.connect()
        link.write()
    used: dict[tuple[bytes, bytes], str] = {}
    for side in ("a", "b"):
        assert len(link.sent[side]) >= (20 if side == "a" else 5)
        for pkt in link.sent[side]:
            kn = attribute(pkt, link.installs[side])
            assert kn not in used, f"{side} sealed two packets under one key and nonce"
            used[kn] = side
    for ctx in (link.a, link.b):
        assert ctx.drops()["auth"] == 0 and ctx.drops()["replay"] == 0


def test_the_replay_window_survives_a_reconnect_under_the_same_keys():
    link = Link("auth")
    link.connect()
    link.write(n=1)
    old = [p for p in link.sent["a"] if p[0] in sealref.DATA_OPS]
    link.reset()
    link.rekey(fresh=False)
    link.connect()
    link.now += 1000
    assert link.b.input(old[0], port=sealed_port(old[0]), now_ns=link.now) == -errno.EALREADY
    assert link.b.drops()["replay"] == 1
    link.write(n=1)  # and the connection works
    link.reset()
    link.rekey(fresh=True)  # under new keys the old packet does not verify at all
    link.connect()
    assert link.b.input(old[0], port=sealed_port(old[0]), now_ns=link.now) < 0
    assert link.b.drops()["auth"] == 1


def test_a_secured_qp_stays_secured_and_one_transmit_key_serves_one_qp():
    link = Link("auth")
    off = secure.derive(*secure.keypair(), PSK, b"x", True, "auth")
    off.mode = lib.MRC_SEC_OFF
    with pytest.raises(ErrnoError) as e:
        link.qa.set_keys(off)
    assert e.value.errno == errno.EPERM
    other = link.a.create_qp(QPAttr(planes=2, ev_count=8))
    with pytest.raises(ErrnoError) as e:
        other.set_keys(link.ka)  # the same keys on a second QP: two counters under one key
    assert e.value.errno == errno.EEXIST


def _data(link: Link, pn: int, psn_off: int = 0, port: int = 0, mode: int = lib.MRC_SEC_AUTH) -> bytes:
    pkt = wire.build(b"z" * 64, opcode=wire.OP_WRITE_ONLY, dqpn=link.qb.qpn, psn=(link.qa.sq_psn + psn_off) & 0xFFFFFF,
                     va=link.md.addr, rkey=link.md.rkey, dma_len=64, sec_mode=mode)
    return sealref.seal(pkt, bytes(link.ka.tx_key), bytes(link.ka.tx_iv), pn, port)


def test_the_replay_window_at_its_edges():
    """Sealed by a holder of the keys (the reference sealer), so only the
    numbers decide: 0 once; the window's size (4,096) moves it so that 0
    is too old to tell and 1 still counts; 2^63 and 2^64 - 1, numbers no
    sender reaches, are refused at once (2^64 - 1 once hung the endpoint)."""
    link = Link("auth")
    link.connect()

    def feed(pn, off=0):
        link.now += 1000
        return link.b.input(_data(link, pn, off), port=0, now_ns=link.now)

    assert feed(0) == 0 and feed(0) == -errno.EALREADY
    assert feed(4096, 1) == 0
    assert feed(0, 2) == -errno.EALREADY and feed(1, 3) == 0 and feed(4095, 4) == 0
    assert feed(1 << 63, 5) == -errno.EACCES and feed(2**64 - 1, 6) == -errno.EACCES
    assert link.b.drops()["auth"] == 2 and link.b.drops()["replay"] == 2
    # a holder of the keys can still jump to the last number below the line: the window is then
    # there, and lower numbers are old (protocol.md 8: only the peer itself can do this)
    assert feed((1 << 63) - 1, 7) == 0 and feed(5000, 8) == -errno.EALREADY


@pytest.mark.parametrize("mode", ["auth", "encrypt"])
def test_a_trimmed_secured_packet_is_answered_nack_trimmed_and_counted_as_a_trim(mode):
    link = Link(mode)
    link.connect()
    link.qa.post_write(link.ms, 0, 1024, link.md.addr, link.md.rkey, wr_id=1)
    link.now += 1000
    ((pkt, meta),) = link.a.poll_tx(now_ns=link.now)
    kept = pkt[:meta["hdr"]]  # what a trimming switch leaves
    forged = bytearray(kept)
    forged[40] ^= 1  # the RETH's address: the header tag no longer verifies
    assert link.b.input(bytes(forged), port=sealed_port(pkt), trimmed=True, now_ns=link.now) == -errno.EACCES
    assert link.b.drops()["auth"] == 1 and link.b.poll_tx(now_ns=link.now) == []
    assert link.b.input(kept, port=sealed_port(pkt), trimmed=True, now_ns=link.now) == 0
    assert link.b.drops()["trimmed"] == 1 and link.b.drops()["auth"] == 1
    (nack,) = [p for p, _ in link.b.poll_tx(now_ns=link.now)]
    n = wire.parse(nack)
    assert n["opcode"] == wire.OP_NACK and n["nack_reason"] == wire.NACK_TRIMMED and n["tver"] == 2
    # the trim takes its number: replayed, or the whole packet after it, it is refused
    assert link.b.input(kept, port=sealed_port(pkt), trimmed=True, now_ns=link.now) == -errno.EALREADY
    assert link.b.input(pkt, port=sealed_port(pkt), now_ns=link.now) == -errno.EALREADY
    # the sender resends at once, under a new number, and the write completes
    assert link.a.input(nack, port=sealed_port(nack), now_ns=link.now) == 0
    link.write(n=1, size=16, before=1)
    assert link.qa.stats()["trims"] == 1 and link.dst[:1024] == link.src[:1024]


def test_a_packet_delivered_on_another_plane_than_it_was_sealed_for_is_refused():
    link = Link("auth")
    link.connect()
    link.qa.post_write(link.ms, 0, 1024, link.md.addr, link.md.rkey, wr_id=1)
    link.now += 1000
    ((pkt, meta),) = link.a.poll_tx(now_ns=link.now)
    plane = wire.ev_plane(meta["ev"])
    assert sealed_port(pkt) == plane
    assert link.b.input(pkt, port=1 - plane, now_ns=link.now) == -errno.EACCES
    assert link.b.drops()["moved"] == 1 and link.dst[:1024] == bytearray(1024)
    assert link.b.input(pkt, port=plane, now_ns=link.now) == 0 and link.dst[:1024] == link.src[:1024]


@pytest.mark.parametrize("move", [True, False])
def test_probes_moved_onto_a_live_plane_do_not_revive_a_dead_ev(move):
    """Plane 1 dies: its EVs go ASSUMED_BAD and are probed. A forger on the
    path moves each sealed probe onto plane 0, which is alive: the receiver
    refuses them (``moved``), nothing answers, and the EVs stay bad. The
    control (``move`` False) delivers the probes on plane 1 once it heals:
    the EVs come back."""
    link = Link("auth")
    link.connect()
    link.qa.post_write(link.ms, 0, 8192, link.md.addr, link.md.rkey, wr_id=1)
    link.pump(rounds=100, route=lambda side, pkt, port: None if port == 1 else port)  # plane 1 is dead
    bad = {e["ev"] for e in link.qa.evs() if e["state"] == BAD}
    assert bad and all(wire.ev_plane(ev) == 1 for ev in bad)
    probes = []

    def route(side, pkt, port):
        if side == "a" and pkt[0] == wire.OP_RELIABILITY_PROBE:
            probes.append(pkt)
            return 0 if move else port  # moved onto the live plane, or plane 1 healed
        return None if port == 1 and move else port

    link.pump(rounds=200, route=route)
    assert len(probes) >= 2
    states = {e["ev"]: e["state"] for e in link.qa.evs()}
    if move:
        assert all(states[ev] == BAD for ev in bad) and link.b.drops()["moved"] >= len(probes)
    else:
        assert all(states[ev] == GOOD for ev in bad) and link.b.drops()["moved"] == 0
