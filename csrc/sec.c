/* Authenticated MRC (protocol.md section 8): a QP's keys, sealing a packet
 * as it leaves (its number, then AES-256-GCM over it: the tag alone in
 * AUTH mode, the payload encrypted as well in ENCRYPT mode) and opening one
 * as it arrives (the mode and key it names, the number not seen before,
 * the tag), and the key exchange of connection setup (X25519 and
 * HKDF-SHA256). The cipher is OpenSSL's libcrypto (AES-NI); nothing here
 * is a hand-written cipher.
 *
 * Nonces: the direction's IV XOR the packet number, which counts up from 0
 * and is never reused with a key. Keys move on (a ratchet: HKDF-Expand of
 * the key, the key id one up) every SEC_ROTATE packets, well inside
 * AES-GCM's usage limits; the receiver follows when a packet names the
 * next id and verifies, and keeps the key before for packets still on the
 * way. The replay window holds the last SEC_WIN numbers.
 *
 * Lock: the endpoint lock (the engine thread, or a caller driving by hand).
 * Calls nothing of ours but the wire. */
#include <openssl/evp.h>
#include <openssl/kdf.h>

#include "core.h"

enum { SEC_WIN = 4096, SEC_ROTATE = 1u << 24 };

struct sec_key { EVP_CIPHER_CTX *ctx; uint8_t key[32], iv[12]; uint8_t id; };
struct qp_sec {
    uint8_t mode;
    uint32_t rotate;                /* packets per key */
    struct sec_key tx, rx, rx_prev; /* rx_prev.ctx: NULL until the peer's key first moves on */
    uint64_t tx_pn;                 /* the next number to send */
    uint64_t rx_top;                /* the highest number verified, plus one (0: none yet) */
    uint64_t rx_seen[SEC_WIN / 64]; /* bit n % SEC_WIN: number n, for n in [rx_top - SEC_WIN, rx_top) */
};

static int key_init(struct sec_key *k, const uint8_t key[32], const uint8_t iv[12], uint8_t id, int enc)
{
    if (!k->ctx && !(k->ctx = EVP_CIPHER_CTX_new()))
        return -ENOMEM;
    memcpy(k->key, key, 32);
    memcpy(k->iv, iv, 12);
    k->id = id;
    int ok = enc ? EVP_EncryptInit_ex(k->ctx, EVP_aes_256_gcm(), NULL, key, NULL)
                 : EVP_DecryptInit_ex(k->ctx, EVP_aes_256_gcm(), NULL, key, NULL);
    return ok == 1 ? 0 : -EOPNOTSUPP;
}

static void key_free(struct sec_key *k)
{
    EVP_CIPHER_CTX_free(k->ctx);
    OPENSSL_cleanse(k, sizeof(*k));
}

/* HKDF-SHA256: extract (salt, ikm) then expand (info), or expand alone (no salt and prk given as ikm). */
static int hkdf(int expand_only, const uint8_t *salt, size_t slen, const uint8_t *ikm, size_t ilen,
                const uint8_t *info, size_t infolen, uint8_t *out, size_t olen)
{
    EVP_PKEY_CTX *pc = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
    int ok = pc && EVP_PKEY_derive_init(pc) == 1 && EVP_PKEY_CTX_set_hkdf_md(pc, EVP_sha256()) == 1 &&
             EVP_PKEY_CTX_set_hkdf_mode(pc, expand_only ? EVP_PKEY_HKDEF_MODE_EXPAND_ONLY
                                                        : EVP_PKEY_HKDEF_MODE_EXTRACT_AND_EXPAND) == 1 &&
             (expand_only || EVP_PKEY_CTX_set1_hkdf_salt(pc, salt, (int)slen) == 1) &&
             EVP_PKEY_CTX_set1_hkdf_key(pc, ikm, (int)ilen) == 1 &&
             EVP_PKEY_CTX_add1_hkdf_info(pc, info, (int)infolen) == 1 && EVP_PKEY_derive(pc, out, &olen) == 1;
    EVP_PKEY_CTX_free(pc);
    return ok ? 0 : -EIO;
}

/* The key after k: HKDF-Expand(k, "mrc key update"), its id one up. */
static int key_next(const struct sec_key *k, struct sec_key *out, int enc)
{
    static const uint8_t label[] = "mrc key update";
    uint8_t next[32];
    if (hkdf(1, NULL, 0, k->key, 32, label, sizeof(label) - 1, next, 32) < 0)
        return -EIO;
    int rc = key_init(out, next, k->iv, (uint8_t)(k->id + 1), enc);
    OPENSSL_cleanse(next, sizeof(next));
    return rc;
}

void sec_free(struct qp *q)
{
    if (!q->sec)
        return;
    key_free(&q->sec->tx);
    key_free(&q->sec->rx);
    key_free(&q->sec->rx_prev);
    free(q->sec);
    q->sec = NULL;
}

/* Lock: the endpoint lock. q in RESET or INIT: its packets are not yet numbered. */
int sec_ctl_set(struct mrc_ep *ep, uint32_t qpn, const struct mrc_qp_keys *k)
{
    struct qp *q = ep_qp(ep, qpn);
    if (!q)
        return -ENOENT;
    if (!k || (q->state != MRC_QPS_RESET && q->state != MRC_QPS_INIT))
        return -EINVAL;
    return sec_set(q, k);
}

int sec_set(struct qp *q, const struct mrc_qp_keys *k)
{
    if (k->mode > MRC_SEC_ENCRYPT)
        return -EINVAL;
    sec_free(q);
    if (k->mode == MRC_SEC_OFF)
        return 0;
    struct qp_sec *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->mode = (uint8_t)k->mode;
    s->rotate = k->rotate_every ? k->rotate_every : SEC_ROTATE;
    q->sec = s;
    int rc = key_init(&s->tx, k->tx_key, k->tx_iv, 0, 1);
    if (rc == 0)
        rc = key_init(&s->rx, k->rx_key, k->rx_iv, 0, 0);
    if (rc < 0)
        sec_free(q);
    return rc;
}

uint8_t sec_mode(const struct qp *q) { return q->sec ? q->sec->mode : 0; }

static void nonce_of(const uint8_t iv[12], uint64_t pn, uint8_t out[12])
{
    memcpy(out, iv, 12);
    for (int i = 0; i < 8; i++)
        out[4 + i] ^= (uint8_t)(pn >> (56 - 8 * i));
}

/* AES-GCM under ctx's key: aad, then len bytes of in to out (len 0: no
 * body), the tag written (enc) or checked (open). */
static int gcm(EVP_CIPHER_CTX *ctx, int enc, const uint8_t nonce[12], const uint8_t *aad, uint32_t aad_len,
               const uint8_t *in, uint32_t len, uint8_t *out, uint8_t tag[MRC_TAG_LEN])
{
    uint8_t none[MRC_TAG_LEN];
    int n = 0, ok = enc ? EVP_EncryptInit_ex(ctx, NULL, NULL, NULL, nonce)
                        : EVP_DecryptInit_ex(ctx, NULL, NULL, NULL, nonce);
    if (ok && aad_len)
        ok = enc ? EVP_EncryptUpdate(ctx, NULL, &n, aad, (int)aad_len) : EVP_DecryptUpdate(ctx, NULL, &n, aad,
                                                                                         (int)aad_len);
    if (ok && len)
        ok = enc ? EVP_EncryptUpdate(ctx, out, &n, in, (int)len) : EVP_DecryptUpdate(ctx, out, &n, in, (int)len);
    if (ok && !enc)
        ok = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, MRC_TAG_LEN, tag);
    if (ok) /* GCM writes nothing more here */
        ok = enc ? EVP_EncryptFinal_ex(ctx, none, &n) : EVP_DecryptFinal_ex(ctx, none, &n);
    if (ok && enc)
        ok = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, MRC_TAG_LEN, tag);
    return ok == 1 ? 0 : -EBADMSG;
}

int sec_seal(struct qp *q, uint8_t *pkt, uint32_t len, uint32_t hl)
{
    struct qp_sec *s = q->sec;
    if (!s || hl + MRC_TAG_LEN > len || (pkt[1] & 0x0F) != MRC_WIRE_SECURED)
        return -EINVAL;
    if (s->tx_pn && s->tx_pn % s->rotate == 0) { /* time for the next key */
        struct sec_key next = {0};
        if (key_next(&s->tx, &next, 1) < 0) {
            key_free(&next);
            return -EIO;
        }
        key_free(&s->tx);
        s->tx = next;
    }
    uint64_t pn = s->tx_pn++;
    uint8_t *x = pkt + MRC_BTH_LEN, nonce[12];
    x[1] = s->tx.id;
    for (int i = 0; i < 8; i++)
        x[4 + i] = (uint8_t)(pn >> (56 - 8 * i));
    nonce_of(s->tx.iv, pn, nonce);
    uint32_t body = len - MRC_TAG_LEN, aad = s->mode == MRC_SEC_ENCRYPT ? hl : body; /* AUTH: all of it */
    return gcm(s->tx.ctx, 1, nonce, pkt, aad, pkt + aad, body - aad, pkt + aad, pkt + body);
}

static int seen(const struct qp_sec *s, uint64_t pn)
{
    if (pn >= s->rx_top)
        return 0;
    if (s->rx_top - pn > SEC_WIN)
        return 1; /* too old to tell: as good as seen */
    return (int)(s->rx_seen[pn / 64 % (SEC_WIN / 64)] >> (pn % 64) & 1);
}

static void mark(struct qp_sec *s, uint64_t pn)
{
    for (; s->rx_top <= pn; s->rx_top++) { /* the window moves up: what falls out of it is forgotten */
        if (pn - s->rx_top >= SEC_WIN) {
            memset(s->rx_seen, 0, sizeof(s->rx_seen));
            s->rx_top = pn + 1 - SEC_WIN;
        }
        s->rx_seen[s->rx_top / 64 % (SEC_WIN / 64)] &= ~(1ull << (s->rx_top % 64));
    }
    s->rx_seen[pn / 64 % (SEC_WIN / 64)] |= 1ull << (pn % 64);
}

int sec_open(struct mrc_ep *ep, struct qp *q, const uint8_t *pkt, uint32_t len, const struct mrc_pkt *p,
             int trimmed, const uint8_t **out)
{
    struct qp_sec *s = q->sec;
    *out = pkt;
    if (!s || p->sec_mode != s->mode || trimmed || len < MRC_TAG_LEN) {
        ep_drop(ep, MRC_DROP_AUTH);
        return -EACCES;
    }
    if (seen(s, p->pn)) {
        ep_drop(ep, MRC_DROP_REPLAY);
        return -EALREADY;
    }
    struct sec_key *k = p->key_id == s->rx.id ? &s->rx : NULL, next = {0};
    if (!k && s->rx_prev.ctx && p->key_id == s->rx_prev.id)
        k = &s->rx_prev;
    int moved = 0;
    if (!k && p->key_id == (uint8_t)(s->rx.id + 1)) { /* the peer's key moved on: follow if the packet verifies */
        if (key_next(&s->rx, &next, 0) < 0) {
            key_free(&next);
            ep_drop(ep, MRC_DROP_AUTH);
            return -EIO;
        }
        k = &next;
        moved = 1;
    }
    /* where the payload starts, from the parse: only data packets have one */
    uint32_t body = len - MRC_TAG_LEN, hl = mrc_opcode_is_data(p->opcode) ? p->payload_off : body;
    uint32_t aad = s->mode == MRC_SEC_ENCRYPT ? hl : body; /* AUTH: all of it */
    uint8_t nonce[12], *dst = s->mode == MRC_SEC_ENCRYPT ? ep->sec_buf : NULL;
    int rc = -EACCES;
    if (k && len <= sizeof(ep->sec_buf)) {
        nonce_of(k->iv, p->pn, nonce);
        if (dst) /* the headers as they are, the payload decrypted after them */
            memcpy(dst, pkt, hl);
        rc = gcm(k->ctx, 0, nonce, pkt, aad, pkt + aad, body - aad, dst ? dst + aad : NULL, (uint8_t *)pkt + body);
    }
    if (rc < 0) {
        if (moved)
            key_free(&next);
        ep_drop(ep, MRC_DROP_AUTH);
        return -EACCES;
    }
    if (moved) {
        key_free(&s->rx_prev);
        s->rx_prev = s->rx;
        s->rx = next;
    }
    mark(s, p->pn);
    if (dst)
        *out = dst;
    return 0;
}

/* ------------------------------------------------------------ key exchange */
int mrc_sec_keypair(uint8_t priv[32], uint8_t pub[32])
{
    EVP_PKEY *k = NULL;
    EVP_PKEY_CTX *pc = EVP_PKEY_CTX_new_id(EVP_PKEY_X25519, NULL);
    size_t a = 32, b = 32;
    int ok = pc && EVP_PKEY_keygen_init(pc) == 1 && EVP_PKEY_keygen(pc, &k) == 1 &&
             EVP_PKEY_get_raw_private_key(k, priv, &a) == 1 && EVP_PKEY_get_raw_public_key(k, pub, &b) == 1;
    EVP_PKEY_free(k);
    EVP_PKEY_CTX_free(pc);
    return ok ? 0 : -EOPNOTSUPP;
}

int mrc_sec_derive(const uint8_t priv[32], const uint8_t peer_pub[32], const uint8_t *psk, uint32_t psk_len,
                   const uint8_t *transcript, uint32_t transcript_len, uint32_t initiator, uint32_t mode,
                   struct mrc_qp_keys *out)
{
    if (mode < MRC_SEC_AUTH || mode > MRC_SEC_ENCRYPT || !psk_len || transcript_len > 4096)
        return -EINVAL;
    EVP_PKEY *mine = EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, NULL, priv, 32);
    EVP_PKEY *theirs = EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, NULL, peer_pub, 32);
    EVP_PKEY_CTX *pc = mine ? EVP_PKEY_CTX_new(mine, NULL) : NULL;
    uint8_t shared[32], okm[88], info[4096 + 16];
    size_t slen = sizeof(shared);
    int ok = pc && theirs && EVP_PKEY_derive_init(pc) == 1 && EVP_PKEY_derive_set_peer(pc, theirs) == 1 &&
             EVP_PKEY_derive(pc, shared, &slen) == 1 && slen == 32;
    EVP_PKEY_CTX_free(pc);
    EVP_PKEY_free(mine);
    EVP_PKEY_free(theirs);
    static const char label[] = "mrc v1 qp keys";
    memcpy(info, label, sizeof(label) - 1);
    memcpy(info + sizeof(label) - 1, transcript, transcript_len);
    /* the pre-shared key salts the extraction: a man in the middle without it derives other keys */
    if (ok)
        ok = hkdf(0, psk, psk_len, shared, 32, info, sizeof(label) - 1 + transcript_len, okm, sizeof(okm)) == 0;
    if (ok) { /* initiator to responder, then responder to initiator */
        const uint8_t *i2r = okm, *r2i = okm + 44;
        out->mode = mode;
        memcpy(out->tx_key, initiator ? i2r : r2i, 32);
        memcpy(out->tx_iv, (initiator ? i2r : r2i) + 32, 12);
        memcpy(out->rx_key, initiator ? r2i : i2r, 32);
        memcpy(out->rx_iv, (initiator ? r2i : i2r) + 32, 12);
    }
    OPENSSL_cleanse(shared, sizeof(shared));
    OPENSSL_cleanse(okm, sizeof(okm));
    return ok ? 0 : -EIO;
}

int mrc_sec_hkdf(const uint8_t *salt, uint32_t salt_len, const uint8_t *ikm, uint32_t ikm_len, const uint8_t *info,
                 uint32_t info_len, uint8_t *out, uint32_t out_len)
{
    if (!out_len || out_len > 255 * 32 || !ikm_len)
        return -EINVAL;
    return hkdf(0, salt, salt_len, ikm, ikm_len, info, info_len, out, out_len);
}

int mrc_sec_aead(uint32_t enc, const uint8_t key[32], const uint8_t nonce[12], const uint8_t *aad, uint32_t aad_len,
                 const uint8_t *in, uint32_t len, uint8_t *out)
{
    if ((!enc && len < MRC_TAG_LEN) || len > (1u << 30))
        return enc ? -EINVAL : -EBADMSG;
    struct sec_key k = {0};
    uint32_t body = enc ? len : len - MRC_TAG_LEN;
    uint8_t tag[MRC_TAG_LEN];
    if (!enc)
        memcpy(tag, in + body, MRC_TAG_LEN);
    int rc = key_init(&k, key, nonce, 0, (int)enc);
    if (rc == 0)
        rc = gcm(k.ctx, (int)enc, nonce, aad, aad_len, in, body, out, tag);
    if (rc == 0 && enc)
        memcpy(out + body, tag, MRC_TAG_LEN);
    if (rc < 0 && !enc)
        OPENSSL_cleanse(out, body); /* nothing of what did not verify is left */
    key_free(&k);
    return rc < 0 ? (enc ? -EIO : -EBADMSG) : 0;
}

