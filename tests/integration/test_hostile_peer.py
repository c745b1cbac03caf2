"""Root test: the hostile-peer suite (bench/hostile_peer.py) on a fabric. A
process on the peer host, with the peer's address and a plain UDP socket,
forges a write, a SACK, a NACK and a port status. Secured (auth, encrypt):
none has any effect, and each is counted. Off: each takes effect (what
InfiniBand-level protection leaves to an attacker that learned the QP's
numbers), as the README's security table says."""
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
    assert r["counted"] == {"auth": 1}, r


@pytest.mark.parametrize("kind,effect", [("write", "bytes_written"), ("sack", "completions_changed"),
                                         ("nack", "qp_errors"), ("port", "peer_port_changes")])
def test_without_security_each_forgery_takes_effect(fabric, kind, effect):
    r = hostile_peer.attack(fabric, "off", kind)
    assert r["effects"][effect] > 0, r
