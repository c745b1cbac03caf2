"""Root test: the hostile-peer suite (bench/hostile_peer.py) on a fabric. A
process on the peer host, with the peer's address and a plain UDP socket,
forges a write, a SACK, a NACK, a port status, a trim and answers to
the probes of a dead path; a forger on the
receiver's leaf port (a raw socket in the switch) replays a captured frame,
sends one it changed, and one it trimmed; the same forger watches two
reconnects under the same keys, and moves a dead path's probes onto a live
plane; a relay without the key meddles with the setup channel. Secured (auth, encrypt): none has any effect, and
each is counted. Off: each but the plain replay takes effect (what
InfiniBand-level protection leaves to an attacker that learned the QP's
numbers, or sees its packets), as the README's security table says."""
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.root
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import hostile_peer  # noqa: E402


@pytest.mark.parametrize("mode", ["auth", "encrypt"])
@pytest.mark.parametrize("kind", hostile_peer.ATTACKS)
def test_a_secured_connection_ignores_every_forgery_and_counts_it(fabric, mode, kind):
    r = hostile_peer.attack(fabric, mode, kind)
    assert not r["any_effect"], r
    if kind == "probe":  # a burst this fast loses some on the kernel's way; each that arrives is counted
        assert list(r["counted"]) == ["auth"] and 0 < r["counted"]["auth"] <= hostile_peer.PROBE_ANSWERS, r
    elif kind == "moved":  # every probe moved onto the live plane is refused as moved
        assert r["counted"]["probes_moved"] > 0 and r["counted"]["moved"] == r["counted"]["probes_moved"], r
    elif kind == "relay":  # each of the 10 meddlings (5 kinds, both ways) ended its channel
        assert r["counted"] == {"auth": 10}, r
    else:
        assert r["counted"] == {"replay" if kind in ("replay", "rekey") else "auth": 1}, r


@pytest.mark.parametrize("kind,effect", [("write", "bytes_written"), ("sack", "completions_changed"),
                                         ("nack", "qp_errors"), ("port", "peer_port_changes"),
                                         ("trim", "nacks_caused"), ("probe", "evs_revived"),
                                         ("tamper", "bytes_written"), ("ftrim", "nacks_caused"),
                                         ("moved", "evs_revived"), ("relay", "changes_taken")])
def test_without_security_each_forgery_takes_effect(fabric, kind, effect):
    r = hostile_peer.attack(fabric, "off", kind)
    assert r["effects"][effect] > 0, r


def test_without_security_a_plain_replay_is_only_a_duplicate(fabric):
    """The PSN window stops a frame sent again as it was: it writes nothing."""
    r = hostile_peer.attack(fabric, "off", "replay")
    assert not r["any_effect"] and r["counted"] == {"duplicate": 1}, r


def test_the_controllers_probes_to_a_secured_peer_go_sealed_and_are_answered(fabric):
    """On the wire at the receiver's leaf port, the controller's EV probes to
    a host with a secured connection are sealed requests to that connection's
    QP; each is answered (through the QP, verified)."""
    from mrc import wire
    from mrc.fabric.pair import qp_pair

    with qp_pair(fabric, 0, 1, 1 << 16, security="auth") as p:
        p.qa.post_write(p.ms, 0, 4096, p.remote.addr, p.remote.rkey, wr_id=1)
        assert p.cq.wait(1, timeout=5)[0].ok
        peer = next(i for i, v in p.ca.peers().items() if v["host"] == fabric.host(1))
        tap = hostile_peer.tap(fabric, 1)
        try:
            res = p.ca.probe([(peer, wire.ev_make(0, e)) for e in range(4)], timeout=1.0)
            seen = []
            while True:
                try:
                    frame, addr = tap.recvfrom(1 << 16)
                except OSError:
                    break
                m = frame[hostile_peer.HDRS:]
                if addr[2] == hostile_peer.PACKET_OUTGOING and frame[12:14] == b"\x86\xdd" and len(m) > 12 \
                        and m[0] == wire.OP_ENDPOINT_REQUEST:
                    seen.append((m[1] & 0xF, int.from_bytes(m[5:8], "big")))
        finally:
            tap.close()
        assert [r["status"] for r in res] == ["ok"] * 4, res
        assert len(seen) == 4 and set(seen) == {(2, p.qb.qpn)}, seen
