/* libFuzzer: what a connection-setup peer sends, before anything checks it
 * (csrc/app/json.c and the "info" reader of open.c): arbitrary bytes as one
 * message, then its "info" as the other side.
 *
 * Invariants (abort on breach): the parser never reads past len (ASan);
 * what parses has a canonical text (what the key's proof is computed over)
 * that parses again to the same canonical text; reading "info" either
 * fails with EPROTO or gives a peer whose every plane has 1 to 16 paths. */
#include <errno.h>

#include "app/app.h"
#include "fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *in = malloc(size ? size : 1); /* exactly size bytes: ASan sees any read past it */
    memcpy(in, data, size);
    struct json d, again;
    if (json_parse(&d, in, size, "input") == 0) {
        struct text a = {0}, b = {0};
        json_canonical(&d, 0, "auth", &a);
        FZ_CHECK(!a.oom && a.p, "no canonical text");
        FZ_CHECK(json_parse(&again, a.p, a.n, "canonical") == 0, "the canonical text does not parse: %s", a.p);
        json_canonical(&again, 0, NULL, &b);
        FZ_CHECK(a.n == b.n && !memcmp(a.p, b.p, a.n), "canonical text changed: %s / %s", a.p, b.p);
        json_free(&again);
        static struct app_ctx ctx = {.planes = MRC_MAX_PLANES};
        struct mrc_remote r;
        int rc = app_remote(&ctx, &d, json_member(&d, 0, "info"), &r);
        FZ_CHECK(rc == 0 || rc == -EPROTO, "info read failed with %d", rc);
        for (int p = 0; rc == 0 && p < MRC_MAX_PLANES; p++)
            FZ_CHECK(r.reach.plane[p].npaths <= MRC_MAX_PATHS, "plane %d has %u paths", p, r.reach.plane[p].npaths);
        text_free(&a);
        text_free(&b);
        json_free(&d);
    }
    free(in);
    return 0;
}
