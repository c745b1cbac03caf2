/* What the two responder harnesses (fuzz_responder.c, fuzz_secured.c)
 * aim at: one remote-writable region between guard bytes in the same
 * allocation (AddressSanitizer cannot see a write there, so the guards are
 * checked), a region of another protection domain that must stay
 * untouched, receives kept posted, and the checks of what completes. */
#ifndef MRC_FUZZ_TARGET_H
#define MRC_FUZZ_TARGET_H
#include "fuzz/fuzz.h"

enum { FZ_SIZE = 64 * 1024, FZ_GUARD = 4096, FZ_PAT = 0xA5, FZ_OTHER_PAT = 0x5A, FZ_RECVS = 64 };

struct fz_target {
    uint8_t mem[FZ_GUARD + FZ_SIZE + FZ_GUARD];
    uint8_t other[4096];
    uint32_t rkey, orkey;
    uint64_t base;  /* the region's first byte */
};

/* Register the region (PD 0) and the other PD's, and post the receives. */
static inline void fz_target_open(struct fz_ctx *f, struct fz_target *t)
{
    uint32_t lkey, olkey, pd1;
    memset(t->mem, FZ_PAT, sizeof(t->mem));
    memset(t->mem + FZ_GUARD, 0, FZ_SIZE);
    memset(t->other, FZ_OTHER_PAT, sizeof(t->other));
    FZ_CHECK(mrc_mr_reg(f->c, 0, t->mem + FZ_GUARD, FZ_SIZE, MRC_ACCESS_LOCAL_WRITE | MRC_ACCESS_REMOTE_WRITE, &lkey,
                        &t->rkey) == 0, "register the region");
    FZ_CHECK(mrc_pd_alloc(f->c, &pd1) == 0, "second PD");
    FZ_CHECK(mrc_mr_reg(f->c, pd1, t->other, sizeof(t->other), MRC_ACCESS_LOCAL_WRITE | MRC_ACCESS_REMOTE_WRITE,
                        &olkey, &t->orkey) == 0, "register the other PD's region");
    uint64_t ids[FZ_RECVS];
    for (uint32_t i = 0; i < FZ_RECVS; i++)
        ids[i] = i;
    FZ_CHECK(mrc_post_recv(f->c, f->qpn, ids, FZ_RECVS) >= 0, "post receives");
    t->base = (uint64_t)(uintptr_t)(t->mem + FZ_GUARD);
}

/* aux bit 0 of a record: its fix-ups aim at the other PD's region (address and key). */
static inline uint64_t fz_target_base(const struct fz_target *t, const struct fz_rec *r)
{
    return (r->aux & 1) ? (uint64_t)(uintptr_t)t->other : t->base;
}

static inline uint32_t fz_target_rkey(const struct fz_target *t, const struct fz_rec *r)
{
    return (r->aux & 1) ? t->orkey : t->rkey;
}

/* What completed: only receives of our QP, of a posted receive, at most
 * the region's size (each posted again). */
static inline void fz_target_reap(struct fz_ctx *f)
{
    struct mrc_wc wc[64];
    int k = mrc_poll_cq(f->c, 0, wc, 64);
    FZ_CHECK(k >= 0, "poll CQ: %d", k);
    for (int i = 0; i < k; i++) {
        FZ_CHECK(wc[i].qpn == f->qpn, "completion for QP %u", wc[i].qpn);
        if (wc[i].status != MRC_WC_SUCCESS)
            continue;
        FZ_CHECK(wc[i].opcode == MRC_WC_RECV_WRITE_IMM && wc[i].wr_id < FZ_RECVS,
                 "a responder completion that is not a receive (opcode %u, wr_id %llu)", wc[i].opcode,
                 (unsigned long long)wc[i].wr_id);
        FZ_CHECK(wc[i].byte_len <= FZ_SIZE, "receive completion of %u bytes into a %u-byte region", wc[i].byte_len,
                 FZ_SIZE);
        uint64_t again = wc[i].wr_id;
        mrc_post_recv(f->c, f->qpn, &again, 1);
    }
}

/* The guards and the other PD's region kept their pattern. */
static inline void fz_target_check(const struct fz_target *t)
{
    for (size_t i = 0; i < FZ_GUARD; i++) {
        FZ_CHECK(t->mem[i] == FZ_PAT, "guard byte %zu before the region overwritten", FZ_GUARD - i);
        FZ_CHECK(t->mem[FZ_GUARD + FZ_SIZE + i] == FZ_PAT, "guard byte %zu after the region overwritten", i);
    }
    for (size_t i = 0; i < sizeof(t->other); i++)
        FZ_CHECK(t->other[i] == FZ_OTHER_PAT, "a region of another protection domain was written (byte %zu)", i);
}
#endif
