/* libFuzzer: a responder fed arbitrary packets (fuzz.h's records) through
 * mrc_ep_input, aimed at fuzz_target.h's region between guard bytes and a
 * region of another protection domain (records with aux bit 0 aim at it).
 * Receives are kept posted so WRITE_IMM completes.
 *
 * Invariants (abort on breach): guards and the other PD's region keep their
 * pattern; every receive completion names our QP, a posted receive and at
 * most the region's size; the context only sends packets that parse with a
 * good ICRC; nothing crashes, leaks or reads out of bounds (ASan, UBSan). */
#include "fuzz/fuzz_target.h"

static struct fz_target t;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fz_ctx f;
    fz_open(&f, 0);
    fz_target_open(&f, &t);
    const uint8_t *p = data, *end = data + size;
    struct fz_rec r;
    int n = 0;
    while (fz_next(&p, end, &r) && n++ < 512) {
        fz_feed(&f, &r, fz_target_base(&t, &r), fz_target_rkey(&t, &r));
        fz_drain(&f);
        fz_target_reap(&f);
    }
    fz_run_timers(&f, 64);
    fz_target_check(&t);
    fz_close(&f);
    return 0;
}
