/* What the libFuzzer harnesses share (tools/fuzz.sh builds and runs them).
 *
 * An input for the responder and requester harnesses is a list of records,
 * each an 8-byte header and a packet (BTH..ICRC) fed to the context through
 * mrc_ep_input, the entry point the engine thread and the in-memory link
 * use:
 *
 *   u8 flags   FZ_* below: fix-ups that keep a mutated packet interesting
 *              (without them almost every mutation dies at the ICRC check
 *              or the QP lookup, which is tested too: flags 0)
 *   u8 port    the plane it arrived on (low 4 bits); the high 4 bits are
 *              for the harness (aux)
 *   u32 ev     the EV it travelled on (little endian)
 *   u16 len    the packet's length (little endian), then the packet
 *
 * Every context is made afresh for each input (deterministic: a fixed
 * seed), so a crash reproduces from its input alone.
 */
#ifndef MRC_FUZZ_H
#define MRC_FUZZ_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrc_manual.h"
#include "wire/wire.h"

enum {
    FZ_FIX_ICRC = 0x01,  /* recompute the ICRC after the fix-ups */
    FZ_PATCH_QP = 0x02,  /* DestQP (and a SACK's or NACK's connection ids) name our QP */
    FZ_PATCH_KEY = 0x04, /* RETH rkey = our region's */
    FZ_PATCH_VA = 0x08,  /* RETH va = our region + (va mod 1 MiB): inside it, or past its end */
    FZ_CE = 0x10,        /* arrived with ECN CE */
    FZ_TRIM = 0x20,      /* arrived trimmed (DSCP) */
    FZ_TICK = 0x40,      /* 1 ms passes before it arrives (timers fire) */
    FZ_WRONG_PEER = 0x80 /* arrived from another host than the QP's peer */
};

enum { FZ_PLANES = 4, FZ_PEER = 0, FZ_DEST_QPN = 77, FZ_TXBUF = 1 << 20, FZ_TXD = 256, FZ_MAXPKT = 9216 };

struct fz_rec {
    uint8_t flags, port, aux;
    uint32_t ev;
    const uint8_t *pkt;
    uint32_t len;
};

#define FZ_CHECK(cond, ...)                                                                   \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "fuzz: invariant broken at %s:%d: ", __FILE__, __LINE__);        \
            fprintf(stderr, __VA_ARGS__);                                                     \
            fputc('\n', stderr);                                                              \
            abort();                                                                          \
        }                                                                                     \
    } while (0)

/* The next record of [*p, end), or 0 at the end (a short tail is ignored). */
static inline int fz_next(const uint8_t **p, const uint8_t *end, struct fz_rec *r)
{
    if (end - *p < 8)
        return 0;
    const uint8_t *h = *p;
    r->flags = h[0];
    r->port = h[1] & 0xF;
    r->aux = h[1] >> 4;
    r->ev = (uint32_t)h[2] | (uint32_t)h[3] << 8 | (uint32_t)h[4] << 16 | (uint32_t)h[5] << 24;
    r->len = (uint32_t)h[6] | (uint32_t)h[7] << 8;
    if (r->len > (size_t)(end - h - 8))
        r->len = (uint32_t)(end - h - 8);
    r->pkt = h + 8;
    *p = h + 8 + r->len;
    return 1;
}

struct fz_ctx {
    struct mrc_ctx *c;
    struct mrc_ep *ep;
    uint32_t qpn;
    uint64_t now;
    uint8_t *txbuf;
    struct mrc_txdesc txd[FZ_TXD];
    uint64_t tx_packets;
};

/* A context driven by hand with one QP connected to FZ_PEER's FZ_DEST_QPN,
 * both initial PSNs 0 (the seed corpus is recorded that way). */
static inline void fz_open_qp(struct fz_ctx *f, const struct mrc_qp_keys *keys);

static inline void fz_open(struct fz_ctx *f, uint32_t pd_regions_hint)
{
    (void)pd_regions_hint;
    fz_open_qp(f, NULL);
}

/* The same context; its QP still in RESET, to be secured (fz_secure). */
static inline void fz_open_secured(struct fz_ctx *f, uint32_t mode)
{
    (void)mode;
    fz_open_qp(f, (const struct mrc_qp_keys *)f); /* marks "wait": the QP connects in fz_secure */
}

static inline void fz_open_qp(struct fz_ctx *f, const struct mrc_qp_keys *keys)
{
    memset(f, 0, sizeof(*f));
    struct mrc_ep_attr ea = {.max_qps = 4, .cq_depth = 1024, .planes = FZ_PLANES, .seed = 1};
    FZ_CHECK(mrc_ctx_create(&ea, NULL, 0, &f->c) == 0, "create context");
    f->ep = mrc_ctx_ep(f->c);
    struct mrc_qp_attr a;
    mrc_qp_attr_default(&a);
    a.planes = FZ_PLANES;
    a.ev_count = 8;
    a.rq_depth = 64;
    FZ_CHECK(mrc_qp_create(f->c, &a, &f->qpn) == 0, "create QP");
    f->txbuf = malloc(FZ_TXBUF);
    FZ_CHECK(f->txbuf != NULL, "tx buffer");
    if (!keys) {
        struct mrc_qp_conn conn = {.dest_qpn = FZ_DEST_QPN, .peer = FZ_PEER, .rq_psn = 0, .sq_psn = 0};
        FZ_CHECK(mrc_qp_modify(f->c, f->qpn, MRC_QPS_INIT, NULL) == 0, "INIT");
        FZ_CHECK(mrc_qp_modify(f->c, f->qpn, MRC_QPS_RTR, &conn) == 0, "RTR");
        FZ_CHECK(mrc_qp_modify(f->c, f->qpn, MRC_QPS_RTS, &conn) == 0, "RTS");
    }
}

/* Secure the QP fz_open_secured made with keys, then connect it as fz_open does. */
static inline int fz_secure(struct fz_ctx *f, const struct mrc_qp_keys *keys)
{
    int rc = mrc_qp_set_keys(f->c, f->qpn, keys);
    struct mrc_qp_conn conn = {.dest_qpn = FZ_DEST_QPN, .peer = FZ_PEER, .rq_psn = 0, .sq_psn = 0};
    if (rc == 0)
        rc = mrc_qp_modify(f->c, f->qpn, MRC_QPS_INIT, NULL);
    if (rc == 0)
        rc = mrc_qp_modify(f->c, f->qpn, MRC_QPS_RTR, &conn);
    return rc == 0 ? mrc_qp_modify(f->c, f->qpn, MRC_QPS_RTS, &conn) : rc;
}

static inline void fz_close(struct fz_ctx *f)
{
    mrc_ctx_destroy(f->c);
    free(f->txbuf);
}

/* Everything the context sends now (to nobody), each packet well formed. */
static inline void fz_drain(struct fz_ctx *f)
{
    int n;
    do {
        n = mrc_ep_poll_tx(f->ep, f->now, f->txbuf, FZ_TXBUF, f->txd, FZ_TXD);
        FZ_CHECK(n >= 0, "poll_tx failed: %d", n);
        for (int i = 0; i < n; i++) {
            struct mrc_pkt p;
            FZ_CHECK(f->txd[i].off + f->txd[i].len <= FZ_TXBUF, "tx descriptor out of the buffer");
            FZ_CHECK(mrc_pkt_parse(f->txbuf + f->txd[i].off, f->txd[i].len, 0, &p) == 0,
                     "the context sent a packet it cannot parse (opcode %u)", f->txbuf[f->txd[i].off]);
            FZ_CHECK(p.sec_mode || mrc_pkt_icrc_ok(f->txbuf + f->txd[i].off, f->txd[i].len),
                     "the context sent a bad ICRC"); /* a secured one carries its tag instead */
        }
        f->tx_packets += (uint64_t)n;
    } while (n == FZ_TXD);
}

/* A record's fix-ups (FZ_PATCH_*) on its parsed packet; ``base``/``rkey``: our region. */
static inline void fz_patch(const struct fz_ctx *f, struct mrc_pkt *p, uint8_t flags, uint64_t base, uint32_t rkey)
{
    if (flags & FZ_PATCH_QP) {
        p->dqpn = f->qpn;
        p->scid = FZ_DEST_QPN & 0xFFFF;
        p->dcid = f->qpn & 0xFFFF;
    }
    if (mrc_opcode_is_data(p->opcode) && (flags & FZ_PATCH_KEY))
        p->rkey = rkey;
    if (mrc_opcode_is_data(p->opcode) && (flags & FZ_PATCH_VA))
        p->va = base + (p->va & 0xFFFFF);
}

/* Feed one record, with its fix-ups; ``base``/``rkey``: our region. */
static inline void fz_feed(struct fz_ctx *f, const struct fz_rec *r, uint64_t base, uint32_t rkey)
{
    static uint8_t buf[FZ_MAXPKT + 64];
    uint32_t len = r->len < FZ_MAXPKT ? r->len : FZ_MAXPKT;
    memcpy(buf, r->pkt, len);
    struct mrc_pkt p;
    if ((r->flags & (FZ_PATCH_QP | FZ_PATCH_KEY | FZ_PATCH_VA)) && mrc_pkt_parse(buf, len, 0, &p) == 0) {
        fz_patch(f, &p, r->flags, base, rkey);
        static uint8_t out[FZ_MAXPKT + 64];
        int n = mrc_pkt_build(&p, buf + p.payload_off, out, sizeof(out));
        if (n > 0) {
            memcpy(buf, out, (size_t)n);
            len = (uint32_t)n;
        }
    }
    if ((r->flags & FZ_FIX_ICRC) && len >= 16)
        mrc_pkt_finish(buf, len - 4);
    if (r->flags & FZ_TICK)
        f->now += 1000000;
    f->now += 1000;
    struct mrc_meta m = {.ev = r->ev, .peer = (r->flags & FZ_WRONG_PEER) ? 1 : FZ_PEER, .port = r->port,
                         .ecn_ce = !!(r->flags & FZ_CE), .trimmed = !!(r->flags & FZ_TRIM)};
    int rc = mrc_ep_input(f->ep, buf, len, &m, f->now);
    FZ_CHECK(rc <= 0, "mrc_ep_input returned %d", rc);
}

/* Let time run (timers, retransmissions) until nothing is due or ``limit``
 * steps have passed. */
static inline void fz_run_timers(struct fz_ctx *f, int limit)
{
    for (int i = 0; i < limit; i++) {
        fz_drain(f);
        uint64_t t = mrc_ep_next_timer(f->ep, f->now);
        if (t == UINT64_MAX)
            return;
        f->now = t > f->now ? t : f->now + 1;
    }
}
#endif
