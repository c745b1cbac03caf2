"""Authenticated MRC's keys (protocol.md section 8): the security modes, the
ephemeral X25519 key pair each side of a connection setup makes, and the
keys of one QP pair derived from it (HKDF-SHA256, salted with the
pre-shared key, bound to what both sides saw). The cipher and the exchange
run in C (csrc/core/sec.c, OpenSSL's libcrypto); this module hands bytes across.

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

#: the modes by name (mrc perf --security, cm.connect(security=))
MODES = {"off": lib.MRC_SEC_OFF, "auth": lib.MRC_SEC_AUTH, "encrypt": lib.MRC_SEC_ENCRYPT}
#: a mode's name by its number
MODE_NAMES = {v: k for k, v in MODES.items()}


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


def setup_keys(psk: bytes, challenge: bytes, nonce: bytes) -> dict[str, tuple[bytes, bytes]]:
    """The keys connection setup seals its two messages with under a
    pre-shared key: (key, IV) from the connector to the listener ("c2s")
    and back ("s2c"), from HKDF-SHA256 over the key, salted with the
    greeting's challenge and the connector's nonce (fresh for each setup:
    each key seals one message)."""
    out = ffi.new("uint8_t[88]")
    salt, info = challenge + nonce, b"mrc v1 setup"
    check(lib.mrc_sec_hkdf(salt, len(salt), psk, len(psk), info, len(info), out, 88), "derive the setup's keys")
    b = bytes(out)
    return {"c2s": (b[:32], b[32:44]), "s2c": (b[44:76], b[76:88])}


def seal(key_iv: tuple[bytes, bytes], aad: bytes, data: bytes) -> bytes:
    """AES-256-GCM of ``data`` (the tag last)."""
    out = ffi.new("uint8_t[]", len(data) + 16)
    check(lib.mrc_sec_aead(1, key_iv[0], key_iv[1], aad, len(aad), data, len(data), out), "seal")
    return bytes(out)


def unseal(key_iv: tuple[bytes, bytes], aad: bytes, data: bytes) -> bytes:
    """What :func:`seal` sealed; ErrnoError EACCES when it does not verify."""
    out = ffi.new("uint8_t[]", max(1, len(data) - 16))
    if lib.mrc_sec_aead(0, key_iv[0], key_iv[1], aad, len(aad), data, len(data), out) < 0:
        raise ErrnoError(errno.EACCES, "a sealed connection-setup message did not verify (another key?)")
    return bytes(ffi.buffer(out, len(data) - 16))
