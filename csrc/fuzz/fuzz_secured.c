/* libFuzzer: a responder whose QP is secured (authenticated MRC, sec.c),
 * fed arbitrary packets (fuzz.h's records). A record with aux bit 1 set is
 * sealed by the harness as the peer would seal it (its fix-ups first, then
 * a secured layout for the port it arrives on, the next packet number, a
 * data packet's header tag, AES-256-GCM under the peer's key), so that the
 * fuzzer reaches past the check into the responder (a trimmed one too); aux
 * bit 2 reuses packet number 0 (a replay); the rest arrive as they are. The
 * input's first byte picks AUTH or ENCRYPT.
 *
 * Invariants (abort on breach): the region's guards and the other PD's
 * region keep their pattern; completions name our QP and a posted receive;
 * the context sends only packets that parse, sealed ones with its own
 * mode; nothing crashes or reads out of bounds (ASan, UBSan). */
#include "fuzz/fuzz_target.h"
#include "wire/wire.h"

static struct fz_target t;

/* The record as the peer would send it on a secured connection. */
static uint32_t seal(uint8_t *buf, uint32_t len, const struct fz_rec *r, struct fz_ctx *f, uint64_t base,
                     uint32_t rkey, const struct mrc_qp_keys *peer, uint64_t *pn)
{
    struct mrc_pkt p;
    static uint8_t out[FZ_MAXPKT + 64], body[FZ_MAXPKT + 64];
    if (mrc_pkt_parse(buf, len, 0, &p) < 0)
        return len;
    fz_patch(f, &p, r->flags | FZ_PATCH_QP, base, rkey);
    p.sec_mode = (uint8_t)peer->mode;
    p.key_id = 0;
    p.sec_port = r->port;
    p.pn = (r->aux & 4) ? 0 : (*pn)++;
    p.htag = 0;
    int n = mrc_pkt_build(&p, buf + p.payload_off, out, sizeof(out));
    int hl = n > 0 ? mrc_pkt_hdr_len(out, (size_t)n) : -1;
    if (hl < 0)
        return len;
    uint8_t nonce[12];
    memcpy(nonce, peer->tx_iv, 12);
    for (int i = 0; i < 8; i++)
        nonce[4 + i] ^= (uint8_t)(p.pn >> (56 - 8 * i));
    if (mrc_opcode_is_data(out[0])) { /* the header tag: GMAC of the kept headers less itself, nonce byte 0 ^ 0x80 */
        uint8_t hn[12], tag[MRC_TAG_LEN], hdr[128];
        const uint32_t at = MRC_BTH_LEN + MRC_SECH_LEN - 8;
        memcpy(hn, nonce, 12);
        hn[0] ^= 0x80;
        memcpy(hdr, out, at);
        memcpy(hdr + at, out + at + 8, (size_t)hl - at - 8);
        FZ_CHECK(mrc_sec_aead(1, peer->tx_key, hn, hdr, (uint32_t)hl - 8, NULL, 0, tag) == 0, "header tag");
        memcpy(out + at, tag, 8);
    }
    uint32_t aad = peer->mode == MRC_SEC_ENCRYPT ? (uint32_t)hl : (uint32_t)n - MRC_TAG_LEN;
    uint32_t plain = (uint32_t)n - MRC_TAG_LEN - aad;
    FZ_CHECK(mrc_sec_aead(1, peer->tx_key, nonce, out, aad, out + aad, plain, body) == 0, "seal");
    memcpy(out + aad, body, plain + MRC_TAG_LEN);
    memcpy(buf, out, (size_t)n);
    return (uint32_t)n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint32_t mode = data[0] & 1 ? MRC_SEC_ENCRYPT : MRC_SEC_AUTH;
    struct fz_ctx f;
    fz_open_secured(&f, mode);
    static struct mrc_qp_keys mine, peer;
    if (!mine.mode) { /* one exchange for the whole run: the keys of a QP pair, both sides */
        uint8_t pa[32], ua[32], pb[32], ub[32];
        FZ_CHECK(mrc_sec_keypair(pa, ua) == 0 && mrc_sec_keypair(pb, ub) == 0, "keypairs");
        FZ_CHECK(mrc_sec_derive(pa, ub, (const uint8_t *)"fuzz", 4, ua, 32, 0, MRC_SEC_AUTH, &mine) == 0 &&
                 mrc_sec_derive(pb, ua, (const uint8_t *)"fuzz", 4, ua, 32, 1, MRC_SEC_AUTH, &peer) == 0, "derive");
    }
    mine.mode = peer.mode = mode;
    FZ_CHECK(fz_secure(&f, &mine) == 0, "secure the QP");
    fz_target_open(&f, &t);
    uint64_t pn = 0;
    const uint8_t *p = data + 1, *end = data + size;
    struct fz_rec r;
    int n = 0;
    static uint8_t buf[FZ_MAXPKT + 64];
    while (fz_next(&p, end, &r) && n++ < 512) {
        uint32_t len = r.len < FZ_MAXPKT ? r.len : FZ_MAXPKT;
        memcpy(buf, r.pkt, len);
        if (r.aux & 2)
            len = seal(buf, len, &r, &f, fz_target_base(&t, &r), fz_target_rkey(&t, &r), &peer, &pn);
        else if ((r.flags & FZ_FIX_ICRC) && len >= 16)
            mrc_pkt_finish(buf, len - 4);
        f.now += (r.flags & FZ_TICK) ? 1001000 : 1000;
        struct mrc_meta m = {.ev = r.ev, .peer = (r.flags & FZ_WRONG_PEER) ? 1 : FZ_PEER, .port = r.port,
                             .ecn_ce = !!(r.flags & FZ_CE), .trimmed = !!(r.flags & FZ_TRIM)};
        FZ_CHECK(mrc_ep_input(f.ep, buf, len, &m, f.now) <= 0, "mrc_ep_input returned a count");
        fz_drain(&f);
        fz_target_reap(&f);
    }
    fz_run_timers(&f, 64);
    fz_target_check(&t);
    fz_close(&f);
    return 0;
}
