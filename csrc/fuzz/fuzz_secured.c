/* libFuzzer: a responder whose QP is secured (authenticated MRC, sec.c),
 * fed arbitrary packets (fuzz.h's records). A record with aux bit 1 set is
 * sealed by the harness as the peer would seal it (its fix-ups first, then
 * a secured layout, the next packet number, AES-256-GCM under the peer's
 * key), so that the fuzzer reaches past the check into the responder; aux
 * bit 2 reuses packet number 0 (a replay); the rest arrive as they are. The
 * input's first byte picks AUTH or ENCRYPT.
 *
 * Invariants (abort on breach): the region's guards and the other PD's
 * region keep their pattern; completions name our QP and a posted receive;
 * the context sends only packets that parse, sealed ones with its own
 * mode; nothing crashes or reads out of bounds (ASan, UBSan). */
#include "fuzz.h"

enum { SIZE = 64 * 1024, GUARD = 4096, PAT = 0xA5, OTHER_PAT = 0x5A };

static uint8_t mem[GUARD + SIZE + GUARD];
static uint8_t other[4096];

/* The record as the peer would send it on a secured connection. */
static uint32_t seal(uint8_t *buf, uint32_t len, const struct fz_rec *r, struct fz_ctx *f, uint64_t base,
                     uint32_t rkey, const struct mrc_qp_keys *peer, uint64_t *pn)
{
    struct mrc_pkt p;
    static uint8_t out[FZ_MAXPKT + 64], body[FZ_MAXPKT + 64];
    if (mrc_pkt_parse(buf, len, 0, &p) < 0)
        return len;
    p.dqpn = f->qpn;
    p.scid = FZ_DEST_QPN & 0xFFFF;
    p.dcid = f->qpn & 0xFFFF;
    if (mrc_opcode_is_data(p.opcode) && (r->flags & FZ_PATCH_KEY))
        p.rkey = rkey;
    if (mrc_opcode_is_data(p.opcode) && (r->flags & FZ_PATCH_VA))
        p.va = base + (p.va & 0xFFFFF);
    p.sec_mode = (uint8_t)peer->mode;
    p.key_id = 0;
    p.pn = (r->aux & 4) ? 0 : (*pn)++;
    int n = mrc_pkt_build(&p, buf + p.payload_off, out, sizeof(out));
    int hl = n > 0 ? mrc_pkt_hdr_len(out, (size_t)n) : -1;
    if (hl < 0)
        return len;
    uint8_t nonce[12];
    memcpy(nonce, peer->tx_iv, 12);
    for (int i = 0; i < 8; i++)
        nonce[4 + i] ^= (uint8_t)(p.pn >> (56 - 8 * i));
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
    memset(mem, PAT, sizeof(mem));
    memset(mem + GUARD, 0, SIZE);
    memset(other, OTHER_PAT, sizeof(other));
    uint32_t lkey, rkey, olkey, orkey, pd1;
    FZ_CHECK(mrc_mr_reg(f.c, 0, mem + GUARD, SIZE, MRC_ACCESS_LOCAL_WRITE | MRC_ACCESS_REMOTE_WRITE, &lkey, &rkey)
                 == 0, "register the region");
    FZ_CHECK(mrc_pd_alloc(f.c, &pd1) == 0, "second PD");
    FZ_CHECK(mrc_mr_reg(f.c, pd1, other, sizeof(other), MRC_ACCESS_LOCAL_WRITE | MRC_ACCESS_REMOTE_WRITE, &olkey,
                        &orkey) == 0, "register the other PD's region");
    uint64_t ids[64], pn = 0;
    for (uint32_t i = 0; i < 64; i++)
        ids[i] = i;
    FZ_CHECK(mrc_post_recv(f.c, f.qpn, ids, 64) >= 0, "post receives");
    uint64_t base = (uint64_t)(uintptr_t)(mem + GUARD);
    const uint8_t *p = data + 1, *end = data + size;
    struct fz_rec r;
    int n = 0;
    static uint8_t buf[FZ_MAXPKT + 64];
    while (fz_next(&p, end, &r) && n++ < 512) {
        uint32_t len = r.len < FZ_MAXPKT ? r.len : FZ_MAXPKT;
        memcpy(buf, r.pkt, len);
        if (r.aux & 2)
            len = seal(buf, len, &r, &f, (r.aux & 1) ? (uint64_t)(uintptr_t)other : base, (r.aux & 1) ? orkey : rkey,
                       &peer, &pn);
        else if ((r.flags & FZ_FIX_ICRC) && len >= 16)
            mrc_pkt_finish(buf, len - 4);
        f.now += (r.flags & FZ_TICK) ? 1001000 : 1000;
        struct mrc_meta m = {.ev = r.ev, .peer = (r.flags & FZ_WRONG_PEER) ? 1 : FZ_PEER, .port = r.port,
                             .ecn_ce = !!(r.flags & FZ_CE), .trimmed = !!(r.flags & FZ_TRIM)};
        FZ_CHECK(mrc_ep_input(f.ep, buf, len, &m, f.now) <= 0, "mrc_ep_input returned a count");
        fz_drain(&f);
        struct mrc_wc wc[64];
        int k = mrc_poll_cq(f.c, 0, wc, 64);
        FZ_CHECK(k >= 0, "poll CQ: %d", k);
        for (int i = 0; i < k; i++) {
            FZ_CHECK(wc[i].qpn == f.qpn, "completion for QP %u", wc[i].qpn);
            if (wc[i].status == MRC_WC_SUCCESS) {
                FZ_CHECK(wc[i].opcode == MRC_WC_RECV_WRITE_IMM && wc[i].wr_id < 64 && wc[i].byte_len <= SIZE,
                         "a completion that is not a receive of the region");
                uint64_t again = wc[i].wr_id;
                mrc_post_recv(f.c, f.qpn, &again, 1);
            }
        }
    }
    fz_run_timers(&f, 64);
    for (size_t i = 0; i < GUARD; i++) {
        FZ_CHECK(mem[i] == PAT, "guard byte %zu before the region overwritten", GUARD - i);
        FZ_CHECK(mem[GUARD + SIZE + i] == PAT, "guard byte %zu after the region overwritten", i);
    }
    for (size_t i = 0; i < sizeof(other); i++)
        FZ_CHECK(other[i] == OTHER_PAT, "a region of another protection domain was written (byte %zu)", i);
    fz_close(&f);
    return 0;
}
