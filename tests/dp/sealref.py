"""Protocol.md section 8's sealing, written again from the text for the
tests: the nonce of a packet number, the header tag of a data packet, the
full tag in AUTH and ENCRYPT, the key ratchet. AES-GCM is libcrypto's
through mrc.secure (the AEAD connection setup uses), HKDF-Expand is
Python's hmac; nothing here calls the engine's sealing."""
from __future__ import annotations

import hashlib
import hmac

from mrc._dp import lib

from mrc import secure

BTH, SECH, TAG, HTAG = lib.MRC_BTH_LEN, lib.MRC_SECH_LEN, lib.MRC_TAG_LEN, 8
DATA_OPS = range(lib.MRC_OP_WRITE_FIRST, lib.MRC_OP_WRITE_ONLY_IMM + 1)


def nonce(iv: bytes, pn: int, header: bool = False) -> bytes:
    """The IV XOR (4 zero bytes || pn); the header tag's also sets the top bit of byte 0."""
    x = bytearray(iv)
    x[0] ^= 0x80 if header else 0
    for i, b in enumerate(pn.to_bytes(8, "big")):
        x[4 + i] ^= b
    return bytes(x)


def key_next(key: bytes) -> bytes:
    """HKDF-Expand(key, "mrc key update", 32): one block of HMAC-SHA256."""
    return hmac.new(key, b"mrc key update\x01", hashlib.sha256).digest()


def header_len(pkt: bytes) -> int:
    """Where a data packet's payload starts (len - TAG for any other)."""
    return lib.mrc_pkt_hdr_len(pkt, len(pkt)) if pkt[0] in DATA_OPS else len(pkt) - TAG


def htag(key: bytes, iv: bytes, pn: int, headers: bytes) -> bytes:
    """GMAC of the kept headers less the tag field, 8 bytes."""
    at = BTH + SECH - HTAG
    return secure.seal((key, nonce(iv, pn, True)), headers[:at] + headers[at + HTAG:], b"")[:HTAG]


def seal(pkt: bytes, key: bytes, iv: bytes, pn: int, port: int, key_id: int = 0) -> bytes:
    """A packet built with its SECH (wire.build(sec_mode=...)) sealed as a sender seals it."""
    b = bytearray(pkt)
    mode = b[BTH]
    b[BTH + 1], b[BTH + 2], b[BTH + 3] = key_id, port, 0
    b[BTH + 4:BTH + 12] = pn.to_bytes(8, "big")
    b[BTH + 12:BTH + 20] = bytes(HTAG)
    body = len(b) - TAG
    data = b[0] in DATA_OPS
    hl = lib.mrc_pkt_hdr_len(bytes(b), len(b)) if data else body
    if data:
        b[BTH + 12:BTH + 20] = htag(key, iv, pn, bytes(b[:hl]))
    aad = hl if mode == lib.MRC_SEC_ENCRYPT else body
    out = secure.seal((key, nonce(iv, pn)), bytes(b[:aad]), bytes(b[aad:body]))
    return bytes(b[:aad]) + out


def verifies(pkt: bytes, key: bytes, iv: bytes) -> bool:
    """Whether a whole sealed packet's tag verifies under (key, iv)."""
    mode, pn = pkt[BTH], int.from_bytes(pkt[BTH + 4:BTH + 12], "big")
    body = len(pkt) - TAG
    aad = header_len(pkt) if mode == lib.MRC_SEC_ENCRYPT else body
    try:
        secure.unseal((key, nonce(iv, pn)), pkt[:aad], pkt[aad:])
    except Exception:
        return False
    return True
