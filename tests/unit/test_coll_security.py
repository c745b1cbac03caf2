"""A secured job's QP keys (mrc.coll.net, protocol.md section 8): the two
ranks of a pair derive the same keys from their own exchange, each
direction its own, and what rank 0 relays (the public keys) is not enough
to derive them; a hello asking for another mode is refused."""
from __future__ import annotations

import pytest

from mrc import secure
from mrc.coll.net import FabricNet, check_hello
from mrc.errors import ErrnoError

KEY = b"j" * 32


def _rank(rank: int, mode: str = "auth") -> FabricNet:
    """The part of a rank that keys QPs (no context, no ports)."""
    n = object.__new__(FabricNet)
    n.rank, n.job, n.psk, n.security, n._kx = rank, "job-1", KEY, mode, {}
    return n


@pytest.mark.parametrize("mode", ["auth", "encrypt"])
def test_the_two_ranks_of_a_pair_derive_each_others_keys(mode):
    a, b = _rank(1, mode), _rank(3, mode)
    for net, peer in ((a, 3), (b, 1)):
        priv, pub = secure.keypair()
        net._kx[(peer, 0)] = (bytearray(priv), pub)
    pub_a, pub_b = a._kx[(3, 0)][1], b._kx[(1, 0)][1]
    priv_a = a._kx[(3, 0)][0]
    ka = a._pair_keys(3, 0, 0x111, 0x222, pub_b.hex())
    kb = b._pair_keys(1, 0, 0x222, 0x111, pub_a.hex())
    assert bytes(ka.tx_key) == bytes(kb.rx_key) and bytes(ka.rx_key) == bytes(kb.tx_key)
    assert bytes(ka.tx_key) != bytes(ka.rx_key) and bytes(ka.tx_iv) == bytes(kb.rx_iv)
    assert not any(priv_a) and a._kx == {}  # the private key is wiped once used
    # rank 0 relays both public keys, but with a key pair of its own it derives other keys
    relay = _rank(0, mode)
    priv0, pub0 = secure.keypair()
    relay._kx[(3, 0)] = (bytearray(priv0), pub0)
    assert bytes(relay._pair_keys(3, 0, 0x111, 0x222, pub_b.hex()).tx_key) != bytes(ka.tx_key)


def test_a_bad_public_key_in_an_offer_is_refused():
    a = _rank(1)
    a._kx[(2, 0)] = (bytearray(32), b"x" * 32)
    with pytest.raises(ErrnoError, match="kx"):
        a._pair_keys(2, 0, 1, 2, "zz")


def test_rank_0_refuses_a_hello_asking_for_another_mode():
    h = {"job": "j", "rank": 1, "nranks": 2, "qps": {}, "qp_security": "off"}
    assert "security" in check_hello(h, "j", 2, set(), "encrypt")
    assert check_hello({**h, "qp_security": "encrypt"}, "j", 2, set(), "encrypt") is None
