/* libFuzzer: a responder fed arbitrary packets (fuzz.h's records) through
 * mrc_ep_input. Its one remote-writable region sits between guard bytes in
 * the same allocation (AddressSanitizer cannot see a write there, so the
 * harness checks them); a second region, of another protection domain, must
 * stay untouched too (records with aux bit 0 aim at it). Receives are kept posted so WRITE_IMM completes.
 *
 * Invariants (abort on breach): guards and the other PD's region keep their
 * pattern; every receive completion names our QP, a posted receive and at
 * most the region's size; the context only sends packets that parse with a
 * good ICRC; nothing crashes, leaks or reads out of bounds (ASan, UBSan). */
#include "fuzz.h"

enum { SIZE = 64 * 1024, GUARD = 4096, PAT = 0xA5, OTHER_PAT = 0x5A };

static uint8_t mem[GUARD + SIZE + GUARD];
static uint8_t other[4096];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fz_ctx f;
    fz_open(&f, 0);
    memset(mem, PAT, sizeof(mem));
    memset(mem + GUARD, 0, SIZE);
    memset(other, OTHER_PAT, sizeof(other));
    uint32_t lkey, rkey, olkey, orkey, pd1;
    FZ_CHECK(mrc_mr_reg(f.c, 0, mem + GUARD, SIZE, MRC_ACCESS_LOCAL_WRITE | MRC_ACCESS_REMOTE_WRITE, &lkey, &rkey)
                 == 0, "register the region");
    FZ_CHECK(mrc_pd_alloc(f.c, &pd1) == 0, "second PD");
    FZ_CHECK(mrc_mr_reg(f.c, pd1, other, sizeof(other), MRC_ACCESS_LOCAL_WRITE | MRC_ACCESS_REMOTE_WRITE, &olkey,
                        &orkey) == 0, "register the other PD's region");
    uint64_t ids[64];
    for (uint32_t i = 0; i < 64; i++)
        ids[i] = i;
    FZ_CHECK(mrc_post_recv(f.c, f.qpn, ids, 64) >= 0, "post receives");
    uint64_t base = (uint64_t)(uintptr_t)(mem + GUARD);

    const uint8_t *p = data, *end = data + size;
    struct fz_rec r;
    int n = 0;
    while (fz_next(&p, end, &r) && n++ < 512) {
        /* aux bit 0: the fix-ups aim at the other PD's region (address and key) */
        fz_feed(&f, &r, (r.aux & 1) ? (uint64_t)(uintptr_t)other : base, (r.aux & 1) ? orkey : rkey);
        fz_drain(&f);
        struct mrc_wc wc[64];
        int k = mrc_poll_cq(f.c, 0, wc, 64);
        FZ_CHECK(k >= 0, "poll CQ: %d", k);
        for (int i = 0; i < k; i++) {
            FZ_CHECK(wc[i].qpn == f.qpn, "completion for QP %u", wc[i].qpn);
            if (wc[i].status == MRC_WC_SUCCESS) {
                FZ_CHECK(wc[i].opcode == MRC_WC_RECV_WRITE_IMM && wc[i].wr_id < 64,
                         "a responder completion that is not a receive (opcode %u, wr_id %llu)", wc[i].opcode,
                         (unsigned long long)wc[i].wr_id);
                FZ_CHECK(wc[i].byte_len <= SIZE, "receive completion of %u bytes into a %u-byte region",
                         wc[i].byte_len, SIZE);
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
