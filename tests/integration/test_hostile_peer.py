"""Root test: the hostile-peer suite (bench/hostile_peer.py) on a fabric. A
process on the peer host, with the peer's address and a plain UDP socket,
forges a write, a SACK, a NACK, a port status, a trim and answers to
the probes of a dead path; a forger on the
receiver's leaf port (a raw socket in the switch) replays a captured frame
and sends one it changed. Secured (auth, encrypt): none has any effect, and
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
    else:
        assert r["counted"] == {"replay" if kind == "replay" else "auth": 1}, r


@pytest.mark.parametrize("kind,effect", [("write", "bytes_written"), ("sack", "completions_changed"),
                                         ("nack", "qp_errors"), ("port", "peer_port_changes"),
                                         ("trim", "nacks_caused"), ("probe", "evs_revived"),
                                         ("tamper", "bytes_written")])
def test_without_security_each_forgery_takes_effect(fabric, kind, effect):
    r = hostile_peer.attack(fabric, "off", kind)
    assert r["effects"][effect] > 0, r


def test_without_security_a_plain_replay_is_only_a_duplicate(fabric):
    """The PSN window stops a frame sent again as it was: it writes nothing."""
    r = hostile_peer.attack(fabric, "off", "replay")
    assert not r["any_effect"] and r["counted"] == {"duplicate": 1}, r
