/* libFuzzer: a requester with writes in flight fed arbitrary control
 * packets (SACKs, NACKs, probes, port status: fuzz.h's records) through
 * mrc_ep_input, with time passing in between.
 *
 * Invariants (abort on breach): every posted write completes exactly once
 * and in the order posted; once one fails, all after it fail too (flushed);
 * when the input ends and time runs on, every write completes (success, or
 * an error once retries run out): no forged packet stalls a QP for ever;
 * the in-flight count never underflows; the context only sends packets that
 * parse with a good ICRC; nothing crashes or reads out of bounds. */
#include "fuzz/fuzz.h"

enum { K = 4, SRC = 32 * 1024 };

static uint8_t src[SRC];
static const uint32_t lens[K] = {8192, 8192, 1, 15000};
static const uint8_t ops[K] = {MRC_WR_WRITE, MRC_WR_WRITE_IMM, MRC_WR_WRITE, MRC_WR_WRITE};

struct order {
    uint32_t next;      /* the wr_id the next completion must carry */
    int failed;         /* a completion failed: every later one must fail too */
};

static void take(struct fz_ctx *f, struct order *o)
{
    struct mrc_wc wc[16];
    int k;
    while ((k = mrc_poll_cq(f->c, 0, wc, 16)) > 0) {
        for (int i = 0; i < k; i++) {
            FZ_CHECK(wc[i].qpn == f->qpn, "completion for QP %u", wc[i].qpn);
            FZ_CHECK(wc[i].opcode == MRC_WC_WRITE, "a requester completion of opcode %u", wc[i].opcode);
            FZ_CHECK(wc[i].wr_id == o->next, "completion %llu, expected %u: out of order or twice",
                     (unsigned long long)wc[i].wr_id, o->next);
            FZ_CHECK(!o->failed || wc[i].status != MRC_WC_SUCCESS, "write %u succeeded after an earlier one failed",
                     o->next);
            if (wc[i].status != MRC_WC_SUCCESS)
                o->failed = 1;
            o->next++;
        }
    }
    FZ_CHECK(k >= 0, "poll CQ: %d", k);
    FZ_CHECK(o->next <= K, "more completions than writes");
    struct mrc_qp_stats st;
    FZ_CHECK(mrc_qp_query(f->c, f->qpn, &st) == 0, "query QP");
    FZ_CHECK(st.inflight < (1ull << 40), "in-flight count underflowed: %llu", (unsigned long long)st.inflight);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fz_ctx f;
    memset(&f, 0, sizeof(f));
    struct mrc_ep_attr ea = {.max_qps = 4, .cq_depth = 1024, .planes = FZ_PLANES, .seed = 1};
    FZ_CHECK(mrc_ctx_create(&ea, NULL, 0, &f.c) == 0, "create context");
    f.ep = mrc_ctx_ep(f.c);
    struct mrc_qp_attr a;
    mrc_qp_attr_default(&a);
    a.planes = FZ_PLANES;
    a.ev_count = 8;
    a.timeout = 6;      /* 65 us */
    a.linear_cnt = 2;
    a.exp_cnt = 3;      /* a silent peer fails the QP after a few retries */
    FZ_CHECK(mrc_qp_create(f.c, &a, &f.qpn) == 0, "create QP");
    struct mrc_qp_conn conn = {.dest_qpn = FZ_DEST_QPN, .peer = FZ_PEER, .rq_psn = 0, .sq_psn = 0};
    FZ_CHECK(mrc_qp_modify(f.c, f.qpn, MRC_QPS_INIT, NULL) == 0, "INIT");
    FZ_CHECK(mrc_qp_modify(f.c, f.qpn, MRC_QPS_RTR, &conn) == 0, "RTR");
    FZ_CHECK(mrc_qp_modify(f.c, f.qpn, MRC_QPS_RTS, &conn) == 0, "RTS");
    f.txbuf = malloc(FZ_TXBUF);
    FZ_CHECK(f.txbuf != NULL, "tx buffer");

    uint32_t lkey, rkey;
    FZ_CHECK(mrc_mr_reg(f.c, 0, src, SRC, MRC_ACCESS_LOCAL_WRITE, &lkey, &rkey) == 0, "register the source");
    uint64_t off = 0;
    for (uint32_t i = 0; i < K; i++) {
        struct mrc_wr wr = {.wr_id = i, .opcode = ops[i], .num_sge = 1, .remote_addr = 0x100000 + off,
                            .rkey = 0x1234, .imm_data = i};
        wr.sg_list[0] = (struct mrc_sge){.addr = (uint64_t)(uintptr_t)(src + off % SRC), .length = lens[i],
                                         .lkey = lkey};
        FZ_CHECK(mrc_post_write(f.c, f.qpn, &wr, 1) == 1, "post write %u", i);
        off += lens[i];
    }
    struct order o = {0, 0};
    fz_drain(&f);

    const uint8_t *p = data, *end = data + size;
    struct fz_rec r;
    int n = 0;
    while (fz_next(&p, end, &r) && n++ < 512) {
        fz_feed(&f, &r, 0x100000, 0x1234);
        fz_drain(&f);
        take(&f, &o);
    }
    /* the peer falls silent: time alone must finish every write */
    for (int i = 0; i < 20000 && o.next < K; i++) {
        fz_drain(&f);
        take(&f, &o);
        uint64_t t = mrc_ep_next_timer(f.ep, f.now);
        if (t == UINT64_MAX)
            break;
        f.now = t > f.now ? t : f.now + 1;
    }
    take(&f, &o);
    struct mrc_qp_stats st;
    mrc_qp_query(f.c, f.qpn, &st);
    FZ_CHECK(o.next == K, "after the input, %u of %u writes never completed (QP state %u, next timer %s)", K - o.next,
             K, st.state, mrc_ep_next_timer(f.ep, f.now) == UINT64_MAX ? "none" : "set");
    fz_close(&f);
    return 0;
}
