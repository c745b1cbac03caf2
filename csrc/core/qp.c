/* Queue pairs: creation with their rings and EV set, the QP state machine
 * (RESET -> INIT -> RTR -> RTS, any -> ERROR, any -> RESET, as libibverbs
 * documents them), flushing into the CQs, and the counters.
 *
 * qp_transition() is the only writer of a QP's state: the table says which
 * moves the application may ask for, and entering a state does its work
 * (RTS joins the active list the tx path visits; ERROR leaves it and
 * flushes every WR and receive; RESET leaves it).
 *
 * Lock: every function here runs with the endpoint lock held. Calls ev.c,
 * the CC ops (cc_nscc.c) and ep.c. */
#include "core/cc_nscc.h"
#include "core/ep.h"
#include "core/ev.h"
#include "core/ev_pick.h"
#include "core/qp.h"
#include "core/rings.h"
#include "core/sec.h"
#include "core/types.h"

static const char *const state_names[] = {"RESET", "INIT", "RTR", "RTS", "ERROR"};

const char *mrc_qp_state_name(uint32_t s) { return s <= MRC_QPS_ERROR ? state_names[s] : NULL; }

/* may[from][to]: the transitions mrc_qp_modify accepts. A move to the state
 * the QP is in is accepted for ERROR only (nothing to do). */
static const uint8_t may[5][5] = {
    /*           RESET INIT RTR RTS ERROR */
    /* RESET */ {1, 1, 0, 0, 1},
    /* INIT */  {1, 0, 1, 0, 1},
    /* RTR */   {1, 0, 0, 1, 1},
    /* RTS */   {1, 0, 0, 0, 1},
    /* ERROR */ {1, 0, 0, 0, 1},
};

void mrc_qp_attr_default(struct mrc_qp_attr *a)
{
    *a = (struct mrc_qp_attr){
        .mpr = 8, /* 1024 PSNs */
        .max_wimm = 64,
        /* 1.024 us x 2^11 = 2.1 ms: a backstop for a QP that hears nothing
         * (losses are found by SACKs and the tail loss probe), well clear
         * of a software fabric's normal round
         * trips, and above the scheduling stalls of a loaded host, which
         * would otherwise fire it and resend a window that had arrived
         * (bench/fault_campaign.py --timeout N compares). A NIC on a
         * fabric with microsecond RTTs sets it lower (bench/failover_sim.py). */
        .timeout = 11,
        .linear_cnt = 7,
        .exp_cnt = 7,
        .mtu = 4096,
        .planes = 8,
        .ev_count = 128,
        .ev_min_active = 8,
        .ev_backup = 16,
        .ack_bytes = 16384,
        .probe_k = 3,
        .probe_interval_ns = 100000,
        .skip_ns = 20000,
        .reorder_ns = 20000,
        .sq_depth = 64,
        .rq_depth = 64,
        /* NSCC defaults scale from BDP = rate x base RTT (protocol.md section 5):
         * 100 Gb/s x 10 us = 125 KB */
        .cc = {.base_rtt = 10000, .target_delay = 8000, .max_cwnd = 187500, .fi = 256, .fi_scale = 1000, .eta = 128,
               .gamma = 800, .max_md_jump = 500, .qa_gate = 3, .qa_threshold = 40000,
               .adjust_bytes_threshold = 32768, .adjust_period_threshold = 10000},
    };
}

static size_t pow2_roundup(size_t n) { size_t p = 1; while (p < n) p <<= 1; return p; }

size_t qp_state_bytes(const struct mrc_qp_attr *a)
{
    size_t win = (size_t)a->mpr * MRC_MPR_UNIT;
    size_t nevs = mrc_qp_ev_total(a);
    return sizeof(struct qp) + (a->sq_depth + 1) * sizeof(struct wqe) + win * sizeof(struct pent) +
           nevs * sizeof(struct ev_entry) + a->ev_count * sizeof(uint16_t) + pow2_roundup(win) / 8 +
           win * sizeof(struct rxent) + (a->rq_depth + 1) * sizeof(uint64_t);
}

size_t mrc_qp_state_bytes(const struct mrc_qp_attr *a) { return qp_state_bytes(a); }

static int attr_ok(const struct mrc_ep *ep, const struct mrc_qp_attr *a)
{
    return a->mpr && a->mpr <= MRC_MAX_MPR && !(a->mpr & (a->mpr - 1)) && a->mtu >= MRC_MIN_MTU &&
           a->mtu <= MRC_MAX_MTU && a->planes && a->planes <= ep->a.planes && a->ev_count &&
           !(a->ev_count % a->planes) && a->ev_count <= MRC_MAX_EV_COUNT &&
           a->ev_backup <= 0xFFFF && mrc_qp_ev_total(a) <= 0xFFFF && a->linear_cnt <= MRC_MAX_LINEAR_CNT &&
           a->exp_cnt <= MRC_RETRY_FOREVER && a->timeout <= MRC_MAX_TIMEOUT && a->sq_depth &&
           a->sq_depth <= MRC_MAX_SQ_DEPTH && a->rq_depth && a->rq_depth <= MRC_MAX_RQ_DEPTH && a->probe_k &&
           a->probe_k <= MRC_MAX_PROBE_K && a->ev_min_active <= a->ev_count && a->max_wimm &&
           a->max_wimm <= MRC_MAX_WIMM && a->cc.md_by_sample <= 1 && cc_ops_of(a->cc.algorithm) && a->pkey <= 0xFFFF;
}

/* Where a QP's EV rotation starts: a hash of its number. QPs that all
 * started at slot 0 would spray in step (every sender's first packet on the
 * same plane and spine, then every second one on the next...) and collide
 * at the switch ports the paths share. */
static uint32_t rotation_start(const struct qp *q)
{
    return q->nslots ? (uint32_t)(((uint64_t)q->qpn * 0x9E3779B97F4A7C15ull) >> 40) % q->nslots : 0;
}

/* Where a QP's spares start (ev_place_spares): another hash of its number. */
static uint32_t spare_seed(const struct qp *q) { return (uint32_t)(((uint64_t)q->qpn * 0xC2B2AE3D27D4EB4Full) >> 33); }

static void qp_free(struct qp *q)
{
    if (!q)
        return;
    sec_free(q);
    free(q->sq);
    free(q->pe);
    free(q->evs);
    free(q->slot);
    free(q->rbits);
    free(q->rx);
    free(q->rq);
    free(q);
}

int qp_create(struct mrc_ep *ep, const struct mrc_qp_attr *a, uint32_t *qpn)
{
    if (!attr_ok(ep, a))
        return -EINVAL;
    struct cq *scq = ep_cq(ep, a->send_cq), *rcq = ep_cq(ep, a->recv_cq);
    if (!scq || !rcq || a->pd >= MRC_MAX_PDS || !(ep->pd_live >> a->pd & 1))
        return -ENOENT;
    struct qp *q = calloc(1, sizeof(*q));
    if (!q)
        return -ENOMEM;
    q->a = *a;
    q->win = a->mpr * MRC_MPR_UNIT;
    q->pd = a->pd;
    q->pkey = (uint16_t)a->pkey;
    q->reo_ns = a->reorder_ns;
    q->scq = a->send_cq;
    q->rcq = a->recv_cq;
    q->sq_size = a->sq_depth + 1;
    q->sq = calloc(q->sq_size, sizeof(*q->sq));
    q->pe = calloc(q->win, sizeof(*q->pe));
    q->rbits = calloc(pow2_roundup(q->win) / 64 + 1, sizeof(uint64_t));
    q->rx = calloc(q->win, sizeof(*q->rx));
    q->rq_size = a->rq_depth + 1;
    q->rq = calloc(q->rq_size, sizeof(*q->rq));
    q->remote_ports = 0xFFFFFFFFu;
    q->cc = cc_ops_of(a->cc.algorithm);
    if (!q->sq || !q->pe || !q->rbits || !q->rx || !q->rq || ev_init(q) < 0) {
        qp_free(q);
        return -ENOMEM;
    }
    q->cc->init(q);
    q->state = MRC_QPS_RESET;
    int rc = ep_qp_insert(ep, q);
    if (rc < 0) {
        qp_free(q);
        return rc;
    }
    scq->users++;
    rcq->users++;
    ep_pd_hold(ep, q->pd, 1);
    ev_set_rotation(q, rotation_start(q));
    ev_place_spares(q, spare_seed(q));
    *qpn = q->qpn;
    return 0;
}

int qp_destroy(struct mrc_ep *ep, uint32_t qpn)
{
    struct qp *q = ep_qp(ep, qpn);
    if (!q)
        return -ENOENT;
    ep_qp_remove(ep, q);
    ep->cqs[q->scq].users--;
    ep->cqs[q->rcq].users--;
    ep_pd_hold(ep, q->pd, 0);
    for (uint32_t i = q->sq_head, tail = LOAD_ACQ(q->sq_tail); i != tail; i = ring_next(i, q->sq_size))
        if (!q->sq[i].done)
            ep_wqe_release(ep, &q->sq[i]); /* its regions may go */
    cq_wait(ep, &q->scq_wait, 0);
    cq_wait(ep, &q->rcq_wait, 0);
    qp_free(q);
    return 0;
}

/* Every QP (by its number: numbers are random, not slot + 1). */
void qp_destroy_all(struct mrc_ep *ep)
{
    for (uint32_t i = 0; i < ep->a.max_qps; i++)
        if (ep->qps[i])
            qp_destroy(ep, ep->qps[i]->qpn);
}

/* Complete every WR still queued on q: the first with first_status, the rest
 * with FLUSH_ERR (a WR that remembers a status of its own gets that), and
 * every posted receive with FLUSH_ERR. A full CQ stops it: what is left
 * stays queued and goes on once the application polled (dispatch.c offers
 * waiting completions again); -ENOSPC then. */
int qp_flush(struct mrc_ep *ep, struct qp *q, uint8_t first_status)
{
    uint32_t tail = LOAD_SC(q->sq_tail);
    for (uint32_t i = q->sq_head; i != tail; i = ring_next(i, q->sq_size)) {
        struct wqe *w = &q->sq[i];
        if (w->done)
            continue;
        uint8_t status = w->status ? w->status : first_status;
        struct mrc_wc wc = {.wr_id = w->wr.wr_id, .qpn = q->qpn, .status = status, .opcode = MRC_WC_WRITE,
                            .byte_len = (uint32_t)w->total};
        if (ep_cq_push(ep, q->scq, &wc) < 0) {
            w->status = status;
            cq_wait(ep, &q->scq_wait, 1);
            return -ENOSPC;
        }
        ep_wqe_release(ep, w);
        w->done = 1;
        first_status = MRC_WC_WR_FLUSH_ERR;
    }
    q->sq_cur = tail;
    STORE_REL(q->sq_head, tail);
    uint32_t rtail = LOAD_SC(q->rq_tail);
    while (q->rq_head != rtail) {
        struct mrc_wc wc = {.wr_id = q->rq[q->rq_head], .qpn = q->qpn, .status = MRC_WC_WR_FLUSH_ERR,
                            .opcode = MRC_WC_RECV_WRITE_IMM};
        if (ep_cq_push(ep, q->rcq, &wc) < 0) {
            cq_wait(ep, &q->rcq_wait, 1);
            return -ENOSPC;
        }
        STORE_REL(q->rq_head, ring_next(q->rq_head, q->rq_size));
    }
    cq_wait(ep, &q->scq_wait, 0);
    cq_wait(ep, &q->rcq_wait, 0);
    return 0;
}

/* RESET: nothing of the old connection is left. Queued WRs and receives are
 * discarded without completions (as verbs does), the windows, PSNs, message
 * counts, EV states and congestion state start again. */
static void qp_reset(struct mrc_ep *ep, struct qp *q)
{
    uint32_t tail = LOAD_ACQ(q->sq_tail);
    for (uint32_t i = q->sq_head; i != tail; i = ring_next(i, q->sq_size))
        if (!q->sq[i].done)
            ep_wqe_release(ep, &q->sq[i]);
    q->sq_cur = tail;
    STORE_REL(q->sq_head, tail);
    STORE_REL(q->rq_head, LOAD_ACQ(q->rq_tail));
    memset(q->pe, 0, q->win * sizeof(*q->pe));
    memset(q->rx, 0, q->win * sizeof(*q->rx));
    memset(q->rbits, 0, (q->win / 64 + 1) * sizeof(*q->rbits));
    q->cur_off = 0;
    q->next_msn = q->imm_sent = q->rq_taken = 0;
    q->next_psn = q->una_psn = q->epsn = 0;
    q->nlost = q->wimm_out = q->retries = 0;
    q->inflight = q->since_ackreq = q->last_progress_ns = q->loss_sent_ns = 0;
    q->srtt = q->min_rtt = q->rack_sent_ns = q->last_spurious_ns = 0;
    q->reo_ns = q->a.reorder_ns;
    q->msg_bytes = 0;
    q->bytes_unacked = q->rcv_bytes = q->ooo = 0;
    q->ack_due_ns = 0;
    q->remote_ports = 0xFFFFFFFFu;
    q->nbad = q->rr = 0;
    free(q->evs);
    free(q->slot);
    q->evs = NULL;
    q->slot = NULL;
    if (ev_init(q) < 0) /* a QP that cannot have its EVs back stays in ERROR */
        qp_to_error(ep, q, MRC_WC_WR_FLUSH_ERR);
    else
        ev_place_spares(q, spare_seed(q));
    ev_set_rotation(q, rotation_start(q));
    q->cc->init(q);
    cq_wait(ep, &q->scq_wait, 0);
    cq_wait(ep, &q->rcq_wait, 0);
}

/* Enter state st (the only writer of q->state) and do what entering it means. */
static void qp_transition(struct mrc_ep *ep, struct qp *q, uint32_t st, uint8_t first_status)
{
    STORE_SC(q->state, st);
    switch (st) {
    case MRC_QPS_RTS:
        ep_set_active(ep, q, 1);
        break;
    case MRC_QPS_RESET:
        ep_set_active(ep, q, 0);
        qp_reset(ep, q);
        break;
    case MRC_QPS_ERROR:
        ep_set_active(ep, q, 0);
        qp_flush(ep, q, first_status);
        q->inflight = 0;
        q->nlost = 0;
        break;
    }
}

/* The engine failed the QP by itself: ERROR, and the application hears of it. */
void qp_to_error(struct mrc_ep *ep, struct qp *q, uint8_t first_status)
{
    if (q->state == MRC_QPS_ERROR)
        return;
    ep_async_event(ep, MRC_EVENT_QP_FATAL, q->qpn, first_status);
    qp_transition(ep, q, MRC_QPS_ERROR, first_status);
}

/* The application's modify. Its own move to ERROR is no asynchronous event.
 * RTR takes the peer, its QP and the PSN of its first packet; RTS the PSN of
 * this QP's first packet. */
int qp_modify(struct mrc_ep *ep, uint32_t qpn, uint32_t state, const struct mrc_qp_conn *conn)
{
    struct qp *q = ep_qp(ep, qpn);
    if (!q)
        return -ENOENT;
    if (state > MRC_QPS_ERROR || !may[q->state][state])
        return -EINVAL;
    if (state == q->state)
        return 0;
    if (state == MRC_QPS_RTR) {
        if (!conn || conn->dest_qpn == 0 || conn->dest_qpn > MRC_PSN_MASK || conn->peer >= MRC_MAX_PEERS ||
            conn->rq_psn > MRC_PSN_MASK)
            return -EINVAL;
        q->dqpn = conn->dest_qpn;
        q->peer = conn->peer;
        q->epsn = conn->rq_psn;
    } else if (state == MRC_QPS_RTS) {
        if (!conn || conn->sq_psn > MRC_PSN_MASK)
            return -EINVAL;
        q->next_psn = q->una_psn = conn->sq_psn;
    }
    qp_transition(ep, q, state, MRC_WC_WR_FLUSH_ERR);
    return 0;
}

int qp_query(struct mrc_ep *ep, uint32_t qpn, struct mrc_qp_stats *st)
{
    struct qp *q = ep_qp(ep, qpn);
    if (!q)
        return -ENOENT;
    *st = q->st;
    st->state = q->state;
    st->next_psn = q->next_psn;
    st->una_psn = q->una_psn;
    st->epsn = q->epsn;
    st->cwnd = q->ccs.cwnd;
    st->srtt_ns = q->srtt;
    st->min_rtt_ns = q->min_rtt;
    st->base_rtt_ns = cc_base_rtt(q);
    st->inflight = q->inflight;
    st->good_evs = ev_count_good(q);
    st->bad_evs = ev_count_bad(q);
    return 0;
}
