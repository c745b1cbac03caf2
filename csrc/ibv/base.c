/* What every file of the layer shares, lowest: the mrc0 device itself,
 * whether an object is ours, the real libibverbs' calls, and failing with a
 * reason (MRC_VERBS_DEBUG=1 prints it). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "ibv/ibv.h"

struct ibv_device mv_device = {.node_type = IBV_NODE_CA, .transport_type = IBV_TRANSPORT_IB,
                               .name = MV_NAME, .dev_name = "uverbs-mrc0",
                               .dev_path = "/run/mrc/verbs/mrc0", .ibdev_path = "/run/mrc/verbs/mrc0"};
void *mv_real(const char *name, const char *version)
{
    void *f = dlvsym(RTLD_NEXT, name, version);
    return f ? f : dlsym(RTLD_NEXT, name);
}

static void say(const char *fmt, va_list ap)
{
    static int debug = -1;
    if (debug < 0)
        debug = getenv("MRC_VERBS_DEBUG") && *getenv("MRC_VERBS_DEBUG") == '1';
    if (!debug)
        return;
    fprintf(stderr, "libmrc-verbs: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void *mv_fail(int err, const char *why, ...)
{
    va_list ap;
    va_start(ap, why);
    say(why, ap);
    va_end(ap);
    errno = err;
    return NULL;
}

int mv_err(int err, const char *why, ...)
{
    va_list ap;
    va_start(ap, why);
    say(why, ap);
    va_end(ap);
    return err;
}

int mv_is_ours(const struct ibv_context *c) { return c && c->device == &mv_device; }


enum ibv_wc_status mv_wc_status(uint8_t status)
{
    static const enum ibv_wc_status of[] = {
        [MRC_WC_SUCCESS] = IBV_WC_SUCCESS,           [MRC_WC_LOC_LEN_ERR] = IBV_WC_LOC_LEN_ERR,
        [MRC_WC_LOC_PROT_ERR] = IBV_WC_LOC_PROT_ERR,   [MRC_WC_REM_ACCESS_ERR] = IBV_WC_REM_ACCESS_ERR,
        [MRC_WC_RETRY_EXC_ERR] = IBV_WC_RETRY_EXC_ERR, [MRC_WC_WR_FLUSH_ERR] = IBV_WC_WR_FLUSH_ERR,
        [MRC_WC_REM_OP_ERR] = IBV_WC_REM_OP_ERR};
    return status < sizeof(of) / sizeof(of[0]) ? of[status] : IBV_WC_GENERAL_ERR;
}
