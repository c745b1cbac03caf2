/* mrc0's queue pairs: RC only, each the engine's own QP. The verbs state
 * moves follow the engine's: at RTR it connects (mrc_qp_connect_rtr) toward
 * the host RTR's GID names in the topology, with the peer's first PSN, and
 * takes its packets; at RTS it sends from the PSN given. Timeout and retry
 * count are the engine's own (its loss recovery is MRC's, not go-back-N).
 * Posting: RDMA WRITE and WRITE_WITH_IMM (and receives for the latter); a WR
 * carried inline is copied into the QP's own registered slots at once; an
 * unsignaled WR's completion is kept from the program but its send-queue
 * slot is given back only when a later signaled one is polled, as in verbs. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ibv/ibv.h"

struct mv_qp *mv_qp_of(struct mv_ctx *c, uint32_t qpn)
{
    uint32_t hi = __atomic_load_n(&c->qps_hi, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < hi; i++) {
        struct mv_qp *q = __atomic_load_n(&c->qps[i], __ATOMIC_ACQUIRE);
        if (q && q->qpn == qpn)
            return q;
    }
    return NULL;
}

static void qp_free(struct mv_qp *q)
{
    free(q->ring);
    free(q->inl);
    pthread_mutex_destroy(&q->lock);
    free(q);
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
    if (!mv_is_ours(pd->context))
        return REAL(ibv_create_qp, "IBVERBS_1.1", pd, a);
    if (a->qp_type != IBV_QPT_RC)
        return mv_fail(EOPNOTSUPP, "MRC is reliable connected only: qp_type %d is not IBV_QPT_RC", a->qp_type);
    if (a->srq)
        return mv_fail(EOPNOTSUPP, "MRC has no shared receive queues");
    if (!a->send_cq || !a->recv_cq || a->send_cq->context != pd->context || a->recv_cq->context != pd->context)
        return mv_fail(EINVAL, "a QP needs a send and a receive CQ of its own context");
    struct ibv_qp_cap *cap = &a->cap;
    if (cap->max_send_wr < 1 || cap->max_send_wr > MV_MAX_WR || cap->max_recv_wr > MV_MAX_WR ||
        cap->max_send_sge > 4 || cap->max_recv_sge > 4 || cap->max_inline_data > MV_MAX_INLINE)
        return mv_fail(EINVAL, "QP capabilities: up to %d WRs a queue, 4 SGEs, %d bytes inline", MV_MAX_WR,
                       MV_MAX_INLINE);
    struct mv_ctx *c = mv_ctx(pd->context);
    struct mv_qp *q = calloc(1, sizeof(*q));
    if (!q)
        return mv_fail(ENOMEM, "out of memory");
    pthread_mutex_init(&q->lock, NULL);
    q->sq_depth = cap->max_send_wr;
    q->rq_depth = cap->max_recv_wr ? cap->max_recv_wr : 1;
    q->sig_all = a->sq_sig_all;
    q->ring = calloc(q->sq_depth, sizeof(*q->ring));
    q->inl = aligned_alloc(64, (size_t)q->sq_depth * MV_MAX_INLINE);
    struct mrc_qp_attr qa = c->qpdef;
    qa.sq_depth = q->sq_depth;
    qa.rq_depth = q->rq_depth;
    qa.max_wimm = q->sq_depth < qa.max_wimm ? q->sq_depth : qa.max_wimm;
    qa.send_cq = ((struct mv_cq *)a->send_cq)->cqn;
    qa.recv_cq = ((struct mv_cq *)a->recv_cq)->cqn;
    qa.pd = ((struct mv_pd *)pd)->pdn;
    uint32_t rkey;
    int rc = !q->ring || !q->inl ? -ENOMEM : mrc_qp_create(c->mc, &qa, &q->qpn);
    if (rc == 0 && (rc = mrc_mr_reg(c->mc, qa.pd, q->inl, (uint64_t)q->sq_depth * MV_MAX_INLINE,
                                    MRC_ACCESS_LOCAL_WRITE, &q->inl_lkey, &rkey)) < 0)
        mrc_qp_destroy(c->mc, q->qpn);
    pthread_mutex_lock(&c->lock);
    uint32_t slot = 0;
    while (rc == 0 && slot < MV_MAX_QPS && c->qps[slot])
        slot++;
    if (rc == 0 && slot == MV_MAX_QPS) {
        mrc_mr_dereg(c->mc, q->inl_lkey);
        mrc_qp_destroy(c->mc, q->qpn);
        rc = -ENOSPC;
    }
    if (rc == 0) {
        __atomic_store_n(&c->qps[slot], q, __ATOMIC_RELEASE);
        if (slot + 1 > c->qps_hi)
            __atomic_store_n(&c->qps_hi, slot + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&c->lock);
    if (rc < 0) {
        qp_free(q);
        return mv_fail(-rc, "create_qp: %s", strerror(-rc));
    }
    q->qp.context = pd->context;
    q->qp.qp_context = a->qp_context;
    q->qp.pd = pd;
    q->qp.send_cq = a->send_cq;
    q->qp.recv_cq = a->recv_cq;
    q->qp.handle = q->qpn;
    q->qp.qp_num = q->qpn;
    q->qp.state = IBV_QPS_RESET;
    q->qp.qp_type = IBV_QPT_RC;
    pthread_mutex_init(&q->qp.mutex, NULL);
    pthread_cond_init(&q->qp.cond, NULL);
    cap->max_inline_data = MV_MAX_INLINE;
    cap->max_send_sge = cap->max_recv_sge = 4;
    return &q->qp;
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
    if (!mv_is_ours(qp->context))
        return REAL(ibv_destroy_qp, "IBVERBS_1.1", qp);
    struct mv_ctx *c = mv_ctx(qp->context);
    struct mv_qp *q = (struct mv_qp *)qp;
    struct mrc_qp_stats st;
    if (mrc_qp_query(c->mc, q->qpn, &st) == 0) {
        c->rtx_packets += st.rtx_packets;
        c->timeouts += st.timeouts;
        c->tlp_probes += st.tlp_probes;
        c->losses += st.losses;
    }
    int rc = mrc_qp_destroy(c->mc, q->qpn);
    if (rc < 0)
        return mv_err(-rc, "destroy_qp: %s", strerror(-rc));
    mrc_mr_dereg(c->mc, q->inl_lkey);
    pthread_mutex_lock(&c->lock);
    for (uint32_t i = 0; i < MV_MAX_QPS; i++)
        if (c->qps[i] == q)
            __atomic_store_n(&c->qps[i], NULL, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&c->lock);
    qp_free(q);
    return 0;
}

/* ------------------------------------------------------------ the state moves */
/* RTR: the peer is the host the GID names (the topology's reader: mrc_ctx_resolve_addr); the engine's
 * QP is at RTR from here on and takes the peer's packets (a passive side may stay there). */
static int to_rtr(struct mv_ctx *c, struct mv_qp *q, const struct ibv_qp_attr *a, int mask)
{
    int need = IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    if ((mask & need) != need)
        return mv_err(EINVAL, "RTR needs the address vector (a GID), dest_qp_num and rq_psn");
    if (!a->ah_attr.is_global)
        return mv_err(EINVAL, "mrc0 is RoCE v2: the address vector needs a GID (is_global, grh.dgid)");
    if (!a->dest_qp_num || a->dest_qp_num > 0xFFFFFF)
        return mv_err(EINVAL, "dest_qp_num %u is not a QP number", a->dest_qp_num);
    struct mrc_remote peer;
    if (mrc_ctx_resolve_addr(c->mc, a->ah_attr.grh.dgid.raw, &peer) < 0)
        return mv_err(EINVAL, "RTR: %s", mrc_last_error());
    peer.qpn = a->dest_qp_num;
    peer.psn = a->rq_psn & 0xFFFFFF;
    if (mrc_qp_connect_rtr(c->mc, q->qpn, &peer) < 0)
        return mv_err(EINVAL, "RTR: %s", mrc_last_error());
    q->dest_qpn = peer.qpn;
    q->rq_psn = peer.psn;
    return 0;
}

/* RTS: the engine's QP sends from the PSN given. */
static int to_rts(struct mv_ctx *c, struct mv_qp *q, const struct ibv_qp_attr *a, int mask)
{
    if (!(mask & IBV_QP_SQ_PSN))
        return mv_err(EINVAL, "RTS needs sq_psn");
    q->sq_psn = a->sq_psn & 0xFFFFFF;
    struct mrc_qp_conn conn = {.sq_psn = q->sq_psn};
    int rc = mrc_qp_modify(c->mc, q->qpn, MRC_QPS_RTS, &conn);
    return rc < 0 ? mv_err(-rc, "RTS: %s", strerror(-rc)) : 0;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
    if (!mv_is_ours(qp->context))
        return REAL(ibv_modify_qp, "IBVERBS_1.1", qp, a, mask);
    struct mv_ctx *c = mv_ctx(qp->context);
    struct mv_qp *q = (struct mv_qp *)qp;
    if (!(mask & IBV_QP_STATE))
        return 0; /* attributes alone: what MRC takes comes with the moves */
    enum ibv_qp_state from = qp->state, to = a->qp_state;
    int rc = 0;
    /* read and atomic access flags and rd_atomic depths are taken and mean nothing: many write-only
     * programs set them by habit; a READ or an atomic fails where it is posted, a region for one where
     * it is registered */
    if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) {
        rc = mrc_qp_modify(c->mc, q->qpn, to == IBV_QPS_RESET ? MRC_QPS_RESET : MRC_QPS_ERROR, NULL);
        if (rc == -EINVAL && to == IBV_QPS_RESET) /* the engine goes to RESET from ERROR: through it */
            rc = mrc_qp_modify(c->mc, q->qpn, MRC_QPS_ERROR, NULL) ?: mrc_qp_modify(c->mc, q->qpn, MRC_QPS_RESET,
                                                                                      NULL);
        if (rc < 0)
            return mv_err(-rc, "modify_qp to %s: %s", to == IBV_QPS_RESET ? "RESET" : "ERR", strerror(-rc));
    } else if (from == IBV_QPS_RESET && to == IBV_QPS_INIT) {
        if ((mask & (IBV_QP_PORT)) && a->port_num != 1)
            return mv_err(EINVAL, "mrc0 has one port, 1, not %u", a->port_num);
    } else if (from == IBV_QPS_INIT && to == IBV_QPS_RTR) {
        rc = to_rtr(c, q, a, mask);
    } else if (from == IBV_QPS_RTR && to == IBV_QPS_RTS) {
        rc = to_rts(c, q, a, mask);
    } else if (!(from == to && (to == IBV_QPS_RTS || to == IBV_QPS_INIT || to == IBV_QPS_RTR))) {
        rc = mv_err(EINVAL, "a QP moves RESET -> INIT -> RTR -> RTS (or to RESET or ERR), not %d -> %d", from, to);
    }
    if (rc)
        return rc;
    qp->state = to;
    return 0;
}

int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, struct ibv_qp_init_attr *init)
{
    if (!mv_is_ours(qp->context))
        return REAL(ibv_query_qp, "IBVERBS_1.1", qp, a, mask, init);
    struct mv_qp *q = (struct mv_qp *)qp;
    struct mrc_qp_stats st;
    memset(a, 0, sizeof(*a));
    if (init)
        memset(init, 0, sizeof(*init));
    if (mrc_qp_query(mv_ctx(qp->context)->mc, q->qpn, &st) == 0 && st.state == MRC_QPS_ERROR)
        qp->state = IBV_QPS_ERR; /* the engine ended it (a retry or access error) */
    a->qp_state = a->cur_qp_state = qp->state;
    a->path_mtu = a->ah_attr.is_global = 0;
    a->dest_qp_num = q->dest_qpn;
    a->rq_psn = q->rq_psn;
    a->sq_psn = q->sq_psn;
    a->port_num = 1;
    a->cap.max_send_wr = q->sq_depth;
    a->cap.max_recv_wr = q->rq_depth;
    a->cap.max_send_sge = a->cap.max_recv_sge = 4;
    a->cap.max_inline_data = MV_MAX_INLINE;
    if (init) {
        init->send_cq = qp->send_cq;
        init->recv_cq = qp->recv_cq;
        init->cap = a->cap;
        init->qp_type = IBV_QPT_RC;
        init->sq_sig_all = q->sig_all;
    }
    return 0;
}

/* ------------------------------------------------------------ posting */
int mv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    struct mv_ctx *c = mv_ctx(qp->context);
    struct mv_qp *q = (struct mv_qp *)qp;
    struct mrc_wr batch[32];
    struct ibv_send_wr *first[32];
    int rc = 0;
    pthread_mutex_lock(&q->lock);
    if (qp->state != IBV_QPS_RTS)
        rc = mv_err(EINVAL, "post_send on a QP in state %d (it must be RTS)", qp->state);
    while (!rc && wr) {
        uint32_t n = 0;
        for (; wr && n < 32; wr = wr->next, n++) {
            struct mrc_wr *m = &batch[n];
            first[n] = wr;
            if (wr->opcode != IBV_WR_RDMA_WRITE && wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM) {
                rc = mv_err(EOPNOTSUPP, "MRC has RDMA WRITE and WRITE_WITH_IMM only, not opcode %d", wr->opcode);
                break;
            }
            if (wr->num_sge < 0 || wr->num_sge > 4) {
                rc = mv_err(EINVAL, "a WR has 0 to 4 SGEs, not %d", wr->num_sge);
                break;
            }
            if (q->seq - q->freed + n + 1 > q->sq_depth) {
                rc = mv_err(ENOMEM, "the send queue is full (%u WRs; an unsignaled WR holds its slot until a later "
                            "signaled one is polled)", q->sq_depth);
                break;
            }
            uint64_t seq = q->seq + n;
            memset(m, 0, sizeof(*m));
            m->wr_id = seq;
            m->opcode = wr->opcode == IBV_WR_RDMA_WRITE ? MRC_WR_WRITE : MRC_WR_WRITE_IMM;
            m->remote_addr = wr->wr.rdma.remote_addr;
            m->rkey = wr->wr.rdma.rkey;
            m->imm_data = be32toh(wr->imm_data);
            if (wr->send_flags & IBV_SEND_INLINE) { /* copied now: the program may reuse its buffer at once */
                uint8_t *slot = q->inl + (seq % q->sq_depth) * MV_MAX_INLINE;
                uint32_t len = 0;
                for (int i = 0; i < wr->num_sge; i++) {
                    if (len + wr->sg_list[i].length > MV_MAX_INLINE) {
                        rc = mv_err(EINVAL, "%u bytes inline: at most %d", len + wr->sg_list[i].length,
                                    MV_MAX_INLINE);
                        break;
                    }
                    memcpy(slot + len, (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
                    len += wr->sg_list[i].length;
                }
                if (rc)
                    break;
                m->num_sge = 1;
                m->sg_list[0] = (struct mrc_sge){.addr = (uintptr_t)slot, .length = len, .lkey = q->inl_lkey};
            } else {
                m->num_sge = (uint8_t)wr->num_sge;
                for (int i = 0; i < wr->num_sge; i++)
                    m->sg_list[i] = (struct mrc_sge){.addr = wr->sg_list[i].addr, .length = wr->sg_list[i].length,
                                                     .lkey = wr->sg_list[i].lkey};
            }
            q->ring[seq % q->sq_depth] = (struct mv_swr){
                .wr_id = wr->wr_id, .signaled = q->sig_all || (wr->send_flags & IBV_SEND_SIGNALED),
                .opcode = (uint8_t)wr->opcode};
        }
        uint32_t done = 0; /* the engine takes a batch whole, or up to the WR it refuses */
        while (done < n) {
            int k = mrc_post_write(c->mc, q->qpn, batch + done, n - done);
            if (k < 0) {
                rc = mv_err(-k == ENOSPC ? ENOMEM : -k, "post_send: %s", strerror(-k));
                break;
            }
            done += (uint32_t)k;
        }
        q->seq += done;
        if (rc) {
            *bad = first[done];
            break;
        }
    }
    pthread_mutex_unlock(&q->lock);
    return rc;
}

int mv_qp_send_done(struct mv_qp *q, const struct mrc_wc *w, struct ibv_wc *wc)
{
    const struct mv_swr *s = &q->ring[w->wr_id % q->sq_depth];
    if (w->status == MRC_WC_SUCCESS && !s->signaled)
        return 0;
    memset(wc, 0, sizeof(*wc));
    wc->wr_id = s->wr_id;
    wc->status = mv_wc_status(w->status);
    wc->opcode = IBV_WC_RDMA_WRITE;
    wc->qp_num = q->qpn;
    wc->byte_len = w->byte_len;
    /* this WR and every one before it give back their slots */
    __atomic_store_n(&q->freed, w->wr_id + 1, __ATOMIC_RELEASE);
    return 1;
}

int mv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    struct mv_ctx *c = mv_ctx(qp->context);
    struct mv_qp *q = (struct mv_qp *)qp;
    uint64_t ids[32];
    int rc = 0;
    if (qp->state == IBV_QPS_RESET || qp->state == IBV_QPS_ERR) {
        *bad = wr;
        return mv_err(EINVAL, "post_recv on a QP in RESET or ERR");
    }
    pthread_mutex_lock(&q->lock);
    while (wr && !rc) {
        struct ibv_recv_wr *head = wr;
        uint32_t n = 0;
        for (; wr && n < 32; wr = wr->next) {
            uint64_t bytes = 0;
            for (int i = 0; i < wr->num_sge; i++)
                bytes += wr->sg_list[i].length;
            if (wr->num_sge < 0 || bytes) { /* a buffer to receive into is a SEND's: refused, as SEND is */
                rc = mv_err(EINVAL, "MRC has no SEND: a receive takes a WRITE_WITH_IMM's immediate and no buffer "
                            "(post it with num_sge 0, or empty SGEs)");
                break;
            }
            ids[n++] = wr->wr_id;
        }
        if (rc) {
            struct ibv_recv_wr *at = head;
            for (uint32_t i = 0; i < n; i++)
                at = at->next;
            *bad = at;
        }
        if (!n)
            break;
        int k = mrc_post_recv(c->mc, q->qpn, ids, n);
        if (k < 0 || (uint32_t)k < n) { /* the engine took the first k */
            int err = k < 0 ? -k : ENOMEM;
            rc = mv_err(err == ENOSPC ? ENOMEM : err, "post_recv: %s", strerror(err));
            struct ibv_recv_wr *at = head;
            for (int i = 0; i < (k > 0 ? k : 0); i++)
                at = at->next;
            *bad = at;
        }
    }
    pthread_mutex_unlock(&q->lock);
    return rc;
}
