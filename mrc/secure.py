"""Authenticated MRC's keys (protocol.md section 8): the security modes, the
ephemeral X25519 key pair each side of a connection setup makes, and the
keys of one QP pair derived from it (HKDF-SHA256, salted with the
pre-shared key, bound to what both sides saw). The cipher and the exchange
run in C (csrc/sec.c, OpenSSL's libcrypto); this module hands bytes across.

>>> priv_a, pub_a = keypair(); priv_b, pub_b = keypair()
>>> ka = derive(priv_a, pub_b, b"k" * 32, b"setup", True, "auth")
>>> kb = derive(priv_b, pub_a, b"k" * 32, b"setup", False, "auth")
>>> bytes(ka.tx_key) == bytes(kb.rx_key) and bytes(ka.rx_iv) == bytes(kb.tx_iv)
True
"""

from __future__ import annotations

import errno

from mrc._dp import ffi, lib
from mrc.errors import ErrnoError, check

#: the modes by name (mrc perf --security, Context(security=))
MODES = {"off": lib.MRC_SEC_OFF, "auth": lib.MRC_SEC_AUTH, "encrypt": lib.MRC_SEC_ENCRYPT}


def mode_of(name: str | int) -> int:
    """A mode's number from its name (or number); EINVAL for anything else."""
    if isinstance(name, int) and not isinstance(name, bool) and name in MODES.values():
        return name
    if name not in MODES:
        raise ErrnoError(errno.EINVAL, f"security mode {name!r}: use {', '.join(MODES)}")
    return MODES[name]


def keypair() -> tuple[bytes, bytes]:
    """A fresh X25519 key pair: (private, public), 32 bytes each."""
    priv, pub = ffi.new("uint8_t[32]"), ffi.new("uint8_t[32]")
    check(lib.mrc_sec_keypair(priv, pub), "make an X25519 key pair")
    return bytes(priv), bytes(pub)


def pair_keys(qpn_a: int, qpn_b: int, mode: str, psk: bytes = b"one process: both ends", rotate_every: int = 0):
    """Keys for two QPs of one process (the in-memory link, benchmarks):
    both halves of an X25519 exchange, as connection setup makes them."""
    (pa, ua), (pb, ub) = keypair(), keypair()
    seen = ua + ub + qpn_a.to_bytes(4, "big") + qpn_b.to_bytes(4, "big")
    return (derive(pa, ub, psk, seen, True, mode, rotate_every), derive(pb, ua, psk, seen, False, mode, rotate_every))


def derive(priv: bytes, peer_pub: bytes, psk: bytes, transcript: bytes, initiator: bool, mode: str | int,
           rotate_every: int = 0):
    """One QP's keys (a ``struct mrc_qp_keys``) from our private key, the
    peer's public key, the pre-shared key and the setup's transcript;
    ``initiator`` is the side that connected."""
    if len(priv) != 32 or len(peer_pub) != 32:
        raise ErrnoError(errno.EINVAL, "X25519 keys are 32 bytes")
    if not psk:
        raise ErrnoError(errno.EINVAL, "authenticated MRC needs a pre-shared key (--psk-file)")
    out = ffi.new("struct mrc_qp_keys *")
    check(lib.mrc_sec_derive(priv, peer_pub, psk, len(psk), transcript, len(transcript), int(initiator),
                             mode_of(mode), out), "derive the QP's keys")
    out.rotate_every = rotate_every
    return out
