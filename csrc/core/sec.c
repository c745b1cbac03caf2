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

#include "core/ep.h"
#include "core/sec.h"

enum { SEC_WIN = 4096, SEC_ROTATE = 1u << 24 };
/* The first packet number no sender reaches: at 10^10 packets a second a
 * QP needs 29 years to send 2^63 packets. A number at or above it is
 * refused on both sides, so the window's top never wraps. */
#define SEC_PN_LIMIT (1ull << 63)
#define HTAG_LEN 8

struct sec_key { EVP_CIPHER_CTX *ctx; uint8_t key[32], iv[12]; uint8_t id; };
struct qp_sec {
    uint8_t mode;
    uint32_t rotate;                /* packets per key */
    /* rx_prev.ctx: NULL until the peer's key first moves on; rx_next: derived
     * ahead, so a packet that names it costs what any other packet costs */
    struct sec_key tx, rx, rx_prev, rx_next;
    uint64_t tx_fp, rx_fp;          /* the installed keys' fingerprints (key_fp) */
    uint64_t tx_pn;                 /* the next number to send: never goes back (protocol.md 8, nonces) */
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

/* A fingerprint of a key and its IV under the endpoint's secret (SipHash):
 * whether two installs are the same keys, with no copy of them kept. */
static uint64_t key_fp(const struct mrc_ep *ep, const uint8_t key[32], const uint8_t iv[12])
{
    uint64_t w[6] = {0}, fp = 0;
    memcpy(w, key, 32);
    memcpy(&w[4], iv, 12);
    for (int i = 0; i < 6; i++)
        fp = ep_prf(ep, PRF_KEYFP, fp ^ w[i]);
    OPENSSL_cleanse(w, sizeof(w));
    return fp;
}

void sec_free(struct qp *q)
{
    if (!q->sec)
        return;
    key_free(&q->sec->tx);
    key_free(&q->sec->rx);
    key_free(&q->sec->rx_prev);
    key_free(&q->sec->rx_next);
    OPENSSL_cleanse(q->sec, sizeof(*q->sec));
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
    return sec_set(ep, q, k);
}

/* Install k on q (protocol.md 8, "Nonces"). A QP is secured for life: its
 * keys cannot be taken away (mode OFF on a secured QP is EPERM), and its
 * packet number never goes back, across a RESET and a second install
 * alike, so (key, nonce) never repeats even when the same keys come again
 * (the reconnect idiom). The replay window stays when the receive key is
 * the one it had (a replay from before the reconnect is refused) and starts
 * anew under another. A transmit key that another QP of the endpoint holds
 * is refused (EEXIST): two QPs counting from their own numbers would seal
 * under one (key, nonce). */
int sec_set(struct mrc_ep *ep, struct qp *q, const struct mrc_qp_keys *k)
{
    if (k->mode > MRC_SEC_ENCRYPT)
        return -EINVAL;
    if (k->mode == MRC_SEC_OFF)
        return q->sec ? -EPERM : 0;
    uint64_t tx_fp = key_fp(ep, k->tx_key, k->tx_iv), rx_fp = key_fp(ep, k->rx_key, k->rx_iv);
    for (uint32_t i = 0; i < ep->a.max_qps; i++) {
        const struct qp *o = ep->qps[i];
        if (o && o != q && o->sec && o->sec->tx_fp == tx_fp)
            return -EEXIST;
    }
    struct qp_sec *s = calloc(1, sizeof(*s)), *old = q->sec;
    if (!s)
        return -ENOMEM;
    s->mode = (uint8_t)k->mode;
    s->rotate = k->rotate_every ? k->rotate_every : SEC_ROTATE;
    s->tx_fp = tx_fp;
    s->rx_fp = rx_fp;
    int rc = key_init(&s->tx, k->tx_key, k->tx_iv, 0, 1);
    if (rc == 0)
        rc = key_init(&s->rx, k->rx_key, k->rx_iv, 0, 0);
    if (rc == 0)
        rc = key_next(&s->rx, &s->rx_next, 0);
    if (rc < 0) {
        q->sec = s;
        sec_free(q);
        q->sec = old;
        return rc;
    }
    if (old) {
        s->tx_pn = old->tx_pn;
        if (old->rx_fp == rx_fp) {
            s->rx_top = old->rx_top;
            memcpy(s->rx_seen, old->rx_seen, sizeof(s->rx_seen));
        }
        sec_free(q);
    }
    q->sec = s;
    return 0;
}

uint8_t sec_mode(const struct qp *q) { return q->sec ? q->sec->mode : 0; }

/* The full seal's nonce: the IV XOR (4 zero bytes || pn). The header tag's
 * sets the top bit of the first byte too: the two never meet (pn < 2^63
 * touches the last 8 bytes only). */
static void nonce_of(const uint8_t iv[12], uint64_t pn, int htag, uint8_t out[12])
{
    memcpy(out, iv, 12);
    out[0] ^= htag ? 0x80 : 0;
    for (int i = 0; i < 8; i++)
        out[4 + i] ^= (uint8_t)(pn >> (56 - 8 * i));
}

/* AES-GCM under ctx's key: aad (in one or two parts), then len bytes of in
 * to out (len 0: no body), the tag (tlen bytes) written (enc) or checked
 * (open). */
static int gcm(EVP_CIPHER_CTX *ctx, int enc, const uint8_t nonce[12], const uint8_t *aad, uint32_t aad_len,
               const uint8_t *aad2, uint32_t aad2_len, const uint8_t *in, uint32_t len, uint8_t *out, uint8_t *tag,
               int tlen)
{
    uint8_t none[MRC_TAG_LEN];
    int n = 0, ok = enc ? EVP_EncryptInit_ex(ctx, NULL, NULL, NULL, nonce)
                        : EVP_DecryptInit_ex(ctx, NULL, NULL, NULL, nonce);
    for (int part = 0; part < 2; part++) {
        const uint8_t *a = part ? aad2 : aad;
        uint32_t al = part ? aad2_len : aad_len;
        if (ok && al)
            ok = enc ? EVP_EncryptUpdate(ctx, NULL, &n, a, (int)al) : EVP_DecryptUpdate(ctx, NULL, &n, a, (int)al);
    }
    if (ok && len)
        ok = enc ? EVP_EncryptUpdate(ctx, out, &n, in, (int)len) : EVP_DecryptUpdate(ctx, out, &n, in, (int)len);
    if (ok && !enc)
        ok = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, tlen, tag);
    if (ok) /* GCM writes nothing more here */
        ok = enc ? EVP_EncryptFinal_ex(ctx, none, &n) : EVP_DecryptFinal_ex(ctx, none, &n);
    if (ok && enc)
        ok = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, tlen, tag);
    return ok == 1 ? 0 : -EBADMSG;
}

/* AES-GCM sealing as gcm() does, the body taken from n segments (src,
 * lens) instead of one buffer: ENCRYPT encrypts a WQE's payload straight
 * from the application's memory into the packet, one pass, no copy first. */
static int gcm_from(EVP_CIPHER_CTX *ctx, const uint8_t nonce[12], const uint8_t *aad, uint32_t aad_len,
                    const struct sec_src *src, uint8_t *out, uint8_t tag[MRC_TAG_LEN])
{
    uint8_t none[MRC_TAG_LEN];
    int n = 0, ok = EVP_EncryptInit_ex(ctx, NULL, NULL, NULL, nonce);
    if (ok && aad_len)
        ok = EVP_EncryptUpdate(ctx, NULL, &n, aad, (int)aad_len);
    for (uint32_t i = 0; ok && i < src->n; i++) {
        ok = EVP_EncryptUpdate(ctx, out, &n, src->p[i], (int)src->len[i]);
        out += src->len[i];
    }
    if (ok)
        ok = EVP_EncryptFinal_ex(ctx, none, &n);
    if (ok)
        ok = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, MRC_TAG_LEN, tag);
    return ok == 1 ? 0 : -EBADMSG;
}

/* A data packet's header tag (the SECH's last 8 bytes): GMAC under the
 * direction's key, with its own nonce, over the headers a trimming switch
 * keeps (BTH..IMMDT, hl bytes) less the tag itself. */
static int htag(EVP_CIPHER_CTX *ctx, int enc, const uint8_t iv[12], uint64_t pn, const uint8_t *pkt, uint32_t hl,
                uint8_t *tag)
{
    uint8_t nonce[12];
    const uint32_t at = MRC_BTH_LEN + MRC_SECH_LEN - HTAG_LEN;
    nonce_of(iv, pn, 1, nonce);
    return gcm(ctx, enc, nonce, pkt, at, pkt + at + HTAG_LEN, hl - at - HTAG_LEN, NULL, 0, NULL, tag, HTAG_LEN);
}

int sec_seal(struct qp *q, uint8_t *pkt, uint32_t len, uint32_t hl, uint32_t port, const struct sec_src *src)
{
    struct qp_sec *s = q->sec;
    if (!s || hl + MRC_TAG_LEN > len || (pkt[1] & 0x0F) != MRC_WIRE_SECURED || s->tx_pn >= SEC_PN_LIMIT)
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
    x[2] = (uint8_t)port;
    x[3] = 0;
    for (int i = 0; i < 8; i++)
        x[4 + i] = (uint8_t)(pn >> (56 - 8 * i));
    memset(x + MRC_SECH_LEN - HTAG_LEN, 0, HTAG_LEN);
    uint32_t body = len - MRC_TAG_LEN, aad = s->mode == MRC_SEC_ENCRYPT ? hl : body; /* AUTH: all of it */
    if (mrc_opcode_is_data(pkt[0]) && htag(s->tx.ctx, 1, s->tx.iv, pn, pkt, hl, x + MRC_SECH_LEN - HTAG_LEN) < 0)
        return -EIO; /* a data packet: its headers get a tag of their own, which a trim leaves */
    nonce_of(s->tx.iv, pn, 0, nonce);
    if (src && s->mode == MRC_SEC_ENCRYPT)
        return gcm_from(s->tx.ctx, nonce, pkt, aad, src, pkt + aad, pkt + body);
    return gcm(s->tx.ctx, 1, nonce, pkt, aad, NULL, 0, pkt + aad, body - aad, pkt + aad, pkt + body, MRC_TAG_LEN);
}

int sec_wants_src(const struct qp *q) { return q->sec && q->sec->mode == MRC_SEC_ENCRYPT; }

static int seen(const struct qp_sec *s, uint64_t pn)
{
    if (pn >= s->rx_top)
        return 0;
    if (s->rx_top - pn > SEC_WIN)
        return 1; /* too old to tell: as good as seen */
    return (int)(s->rx_seen[pn / 64 % (SEC_WIN / 64)] >> (pn % 64) & 1);
}

/* pn (below SEC_PN_LIMIT) verified: the window moves up to it, forgetting
 * what falls out of it, and marks it. */
static void mark(struct qp_sec *s, uint64_t pn)
{
    if (pn >= s->rx_top) {
        if (pn - s->rx_top >= SEC_WIN)
            memset(s->rx_seen, 0, sizeof(s->rx_seen));
        else
            for (uint64_t n = s->rx_top; n < pn; n++)
                s->rx_seen[n / 64 % (SEC_WIN / 64)] &= ~(1ull << (n % 64));
        s->rx_top = pn + 1;
    }
    s->rx_seen[pn / 64 % (SEC_WIN / 64)] |= 1ull << (pn % 64);
}

/* The receive key a packet names: the current one, the one before, or the
 * next (then *moved). */
static struct sec_key *rx_key(struct qp_sec *s, uint8_t id, int *moved)
{
    *moved = 0;
    if (id == s->rx.id)
        return &s->rx;
    if (s->rx_prev.ctx && id == s->rx_prev.id)
        return &s->rx_prev;
    if (s->rx_next.ctx && id == s->rx_next.id) {
        *moved = 1;
        return &s->rx_next;
    }
    return NULL;
}

/* The peer's key moved on and a packet under it verified: follow, and
 * derive the one after ahead of time. */
static void rx_move_on(struct qp_sec *s)
{
    key_free(&s->rx_prev);
    s->rx_prev = s->rx;
    s->rx = s->rx_next;
    memset(&s->rx_next, 0, sizeof(s->rx_next));
    if (key_next(&s->rx, &s->rx_next, 0) < 0)
        key_free(&s->rx_next); /* no key after: a packet naming it is refused, nothing else changes */
}

int sec_open(struct mrc_ep *ep, struct qp *q, const uint8_t *pkt, uint32_t len, const struct mrc_pkt *p,
             uint32_t port, int trimmed, const uint8_t **out)
{
    struct qp_sec *s = q->sec;
    *out = pkt;
    if (!s || p->sec_mode != s->mode || p->pn >= SEC_PN_LIMIT || (!trimmed && len < MRC_TAG_LEN)) {
        ep_drop(ep, MRC_DROP_AUTH);
        return -EACCES;
    }
    if (p->sec_port != port) { /* sealed for another plane than the one it came on: moved */
        ep_drop(ep, MRC_DROP_MOVED);
        return -EACCES;
    }
    if (seen(s, p->pn)) {
        ep_drop(ep, MRC_DROP_REPLAY);
        return -EALREADY;
    }
    int moved;
    struct sec_key *k = rx_key(s, p->key_id, &moved);
    int rc = -EACCES;
    uint8_t *dst = NULL;
    if (k && trimmed) { /* the payload and the tag are gone: the header tag speaks for what is left */
        uint8_t tag[HTAG_LEN];
        memcpy(tag, pkt + MRC_BTH_LEN + MRC_SECH_LEN - HTAG_LEN, HTAG_LEN);
        rc = htag(k->ctx, 0, k->iv, p->pn, pkt, p->payload_off, tag);
    } else if (k && len <= sizeof(ep->sec_buf)) {
        /* where the payload starts, from the parse: only data packets have one */
        uint32_t body = len - MRC_TAG_LEN, hl = mrc_opcode_is_data(p->opcode) ? p->payload_off : body;
        uint32_t aad = s->mode == MRC_SEC_ENCRYPT ? hl : body; /* AUTH: all of it */
        uint8_t nonce[12];
        dst = s->mode == MRC_SEC_ENCRYPT ? ep->sec_buf : NULL;
        nonce_of(k->iv, p->pn, 0, nonce);
        if (dst) /* the headers as they are, the payload decrypted after them */
            memcpy(dst, pkt, hl);
        rc = gcm(k->ctx, 0, nonce, pkt, aad, NULL, 0, pkt + aad, body - aad, dst ? dst + aad : NULL,
                 (uint8_t *)pkt + body, MRC_TAG_LEN);
    }
    if (rc < 0) {
        ep_drop(ep, MRC_DROP_AUTH);
        return -EACCES;
    }
    if (moved)
        rx_move_on(s);
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
        rc = gcm(k.ctx, (int)enc, nonce, aad, aad_len, NULL, 0, in, body, out, tag, MRC_TAG_LEN);
    if (rc == 0 && enc)
        memcpy(out + body, tag, MRC_TAG_LEN);
    if (rc < 0 && !enc)
        OPENSSL_cleanse(out, body); /* nothing of what did not verify is left */
    key_free(&k);
    return rc < 0 ? (enc ? -EIO : -EBADMSG) : 0;
}

