/* The endpoint's rings, beside its tables (ep.c): completion queues
 * (engine -> application), the control-packet ring, the EV and
 * asynchronous event rings, and posting (the application's side of a QP's
 * send and receive queues). Calls ep.c only.
 *
 * Lock: every function here runs with the context's endpoint lock held,
 * except ep_post_write, ep_post_recv and ep_cq_poll, which hold only the
 * application lock and touch the single-producer/single-consumer rings
 * (types.h states their contract). */
#include "core/ep.h"
#include "core/rings.h"
#include "core/types.h"

/* ------------------------------------------------------------ completion queues */
/* A full CQ takes nothing: the caller keeps the completion (in its QP) and
 * offers it again after the application polled; the CQ counts it and raises
 * MRC_EVENT_CQ_ERR once per filling (again only after it drained below
 * half: an application that polls one completion at a time keeps it full
 * without a new event each time). ep_cq_room says whether there is room
 * (and counts a full CQ); ep_cq_put then puts the completion in, which it
 * can: the engine is the ring's only producer. */
int ep_cq_room(struct mrc_ep *ep, uint32_t cqn, uint32_t qpn)
{
    struct cq *cq = &ep->cqs[cqn];
    if (ring_next(cq->tail, cq->size) != LOAD_ACQ(cq->head))
        return 1;
    cq->overflow++;
    ep->st.cq_overflow++;
    if (!cq->full)
        ep_async_event(ep, MRC_EVENT_CQ_ERR, qpn, cqn);
    cq->full = 1;
    return 0;
}

void ep_cq_put(struct mrc_ep *ep, uint32_t cqn, const struct mrc_wc *wc)
{
    struct cq *cq = &ep->cqs[cqn];
    uint32_t nt = ring_next(cq->tail, cq->size), head = LOAD_ACQ(cq->head);
    if (cq->full && (nt + cq->size - head) % cq->size < cq->size / 2)
        cq->full = 0;
    cq->ring[cq->tail] = *wc;
    STORE_REL(cq->tail, nt);
    ep->cq_dirty |= 1ull << cqn;
}

/* A completion into CQ cqn, or -ENOSPC (counted) when it is full. */
int ep_cq_push(struct mrc_ep *ep, uint32_t cqn, const struct mrc_wc *wc)
{
    if (!ep_cq_room(ep, cqn, wc->qpn))
        return -ENOSPC;
    ep_cq_put(ep, cqn, wc);
    return 0;
}

/* Lock: the application lock only (the consumer side of the ring). */
int ep_cq_poll(struct mrc_ep *ep, uint32_t cqn, struct mrc_wc *wc, uint32_t max)
{
    struct cq *cq = ep_cq(ep, cqn);
    if (!cq)
        return -ENOENT;
    uint32_t n = 0, head = cq->head, tail = LOAD_ACQ(cq->tail);
    while (n < max && head != tail) {
        wc[n++] = cq->ring[head];
        head = ring_next(head, cq->size);
    }
    STORE_REL(cq->head, head);
    if (n)
        __atomic_add_fetch(&ep->cq_polls, 1, __ATOMIC_RELEASE); /* room: waiting completions may go in */
    return (int)n;
}

/* 0 when every CQ is empty, 1 when some CQ holds a completion, 2 when one
 * is over half full. */
int ep_cq_pending(struct mrc_ep *ep)
{
    int most = 0;
    for (uint64_t live = ep->cq_live; live; live &= live - 1) {
        const struct cq *cq = &ep->cqs[__builtin_ctzll(live)];
        uint32_t used = cq_used(cq);
        if (used > cq->size / 2)
            return 2;
        if (used)
            most = 1;
    }
    return most;
}

/* ------------------------------------------------------------ control packets */
/* A control packet to peer on ev (DSCP control): the ring's next slot, not
 * yet queued (ctrl_put queues it); NULL, counted, when the ring is full (a
 * SACK is cumulative: the next one says the same and more). */
struct ctrl *ep_ctrl_to(struct mrc_ep *ep, uint16_t peer, uint32_t ev)
{
    if (ring_next(ep->ctl_tail, ep->ctl_size) == ep->ctl_head) {
        ep->st.ctrl_ring_full++;
        return NULL;
    }
    struct ctrl *c = &ep->ctl[ep->ctl_tail];
    c->peer = peer;
    c->ev = ev;
    c->tclass = MRC_DSCP_CONTROL << 2;
    c->probe_id = 0;
    c->sack_qpn = 0;
    c->sec_qpn = 0;
    return c;
}

/* Build p into the slot ep_ctrl_to gave and queue it; a packet that cannot
 * be built is counted and never queued (no empty packet leaves). */
int ctrl_put(struct mrc_ep *ep, struct ctrl *c, const struct mrc_pkt *p)
{
    int len = mrc_pkt_build(p, NULL, c->buf, sizeof(c->buf));
    if (len <= 0) {
        ep->st.ctrl_build_errors++;
        return len < 0 ? len : -EINVAL;
    }
    c->len = (uint16_t)len;
    ep->ctl_tail = ring_next(ep->ctl_tail, ep->ctl_size);
    return 0;
}

/* Build p again into a queued slot (a SACK brought up to date). */
int ctrl_rebuild(struct mrc_ep *ep, struct ctrl *c, const struct mrc_pkt *p)
{
    int len = mrc_pkt_build(p, NULL, c->buf, sizeof(c->buf));
    if (len <= 0) {
        ep->st.ctrl_build_errors++;
        c->len = 0; /* never sent: ep_ctrl_peek skips an empty slot */
        return len < 0 ? len : -EINVAL;
    }
    c->len = (uint16_t)len;
    return 0;
}

/* q's plain SACK still in the ring (queued, not sent), or NULL. */
struct ctrl *ep_ctrl_pending(struct mrc_ep *ep, struct qp *q)
{
    if (!q->sack_slot)
        return NULL;
    uint32_t i = q->sack_slot - 1, size = ep->ctl_size;
    uint32_t queued = (ep->ctl_tail + size - ep->ctl_head) % size, at = (i + size - ep->ctl_head) % size;
    return at < queued && ep->ctl[i].sack_qpn == q->qpn ? &ep->ctl[i] : NULL;
}

void ep_ctrl_mark_pending(struct mrc_ep *ep, struct ctrl *c, struct qp *q)
{
    c->sack_qpn = q->qpn;
    q->sack_slot = (uint32_t)(c - ep->ctl) + 1;
}

struct ctrl *ep_ctrl_peek(struct mrc_ep *ep) { return ep->ctl_head != ep->ctl_tail ? &ep->ctl[ep->ctl_head] : NULL; }

void ep_ctrl_pop(struct mrc_ep *ep) { ep->ctl_head = ring_next(ep->ctl_head, ep->ctl_size); }

/* ------------------------------------------------------------ events */
void ep_ev_event(struct mrc_ep *ep, const struct mrc_ev_event *e)
{
    uint32_t nt = ring_next(ep->evq_tail, ep->evq_size);
    if (nt == ep->evq_head) {
        ep->ev_dropped++;
        ep->st.ev_events_dropped++;
        return;
    }
    ep->evq[ep->evq_tail] = *e;
    ep->evq[ep->evq_tail].dropped = ep->ev_dropped;
    ep->ev_dropped = 0;
    ep->evq_tail = nt;
}

int ep_ev_events(struct mrc_ep *ep, struct mrc_ev_event *out, uint32_t max)
{
    uint32_t n = 0;
    while (n < max && ep->evq_head != ep->evq_tail) {
        out[n++] = ep->evq[ep->evq_head];
        ep->evq_head = ring_next(ep->evq_head, ep->evq_size);
    }
    return (int)n;
}

void ep_async_event(struct mrc_ep *ep, uint32_t type, uint32_t qpn, uint32_t info)
{
    uint32_t nt = ring_next(ep->aeq_tail, MRC_AEQ_SIZE);
    if (nt == ep->aeq_head) {
        ep->aeq_dropped++;
        ep->st.async_events_dropped++;
        return;
    }
    ep->aeq[ep->aeq_tail] = (struct mrc_async_event){.type = type, .qpn = qpn, .info = info,
                                                     .dropped = ep->aeq_dropped};
    ep->aeq_dropped = 0;
    ep->aeq_tail = nt;
}

int ep_async_events(struct mrc_ep *ep, struct mrc_async_event *out, uint32_t max)
{
    uint32_t n = 0;
    while (n < max && ep->aeq_head != ep->aeq_tail) {
        out[n++] = ep->aeq[ep->aeq_head];
        ep->aeq_head = ring_next(ep->aeq_head, MRC_AEQ_SIZE);
    }
    return (int)n;
}

/* ------------------------------------------------------------ posting */
/* The entry lies inside a region of the QP's protection domain. */
static int sge_ok(struct mrc_ep *ep, const struct qp *q, const struct mrc_sge *s)
{
    struct mr *m = ep_mr(ep, s->lkey);
    if (!m || m->pd != q->pd)
        return 0;
    uint64_t a = s->addr, base = (uint64_t)(uintptr_t)m->addr;
    return a >= base && s->length <= m->len && a - base <= m->len - s->length;
}

/* Lock: the application lock only (the producer side of the send queue). */
int ep_post_write(struct mrc_ep *ep, uint32_t qpn, const struct mrc_wr *wrs, uint32_t n)
{
    struct qp *q = ep_qp(ep, qpn);
    if (!q)
        return -ENOENT;
    if (LOAD_SC(q->state) != MRC_QPS_RTS)
        return -EINVAL;
    uint32_t k;
    int err = 0;
    for (k = 0; k < n; k++) {
        const struct mrc_wr *wr = &wrs[k];
        if (wr->opcode > MRC_WR_WRITE_IMM || wr->num_sge > MRC_MAX_SGE) {
            err = -EOPNOTSUPP;
            break;
        }
        uint64_t total = 0;
        for (uint32_t i = 0; i < wr->num_sge && !err; i++) {
            if (!sge_ok(ep, q, &wr->sg_list[i]))
                err = -EFAULT;
            total += wr->sg_list[i].length;
        }
        if (!err && total > 0xFFFFFFFFu)
            err = -EMSGSIZE;
        uint32_t nt = ring_next(q->sq_tail, q->sq_size);
        if (!err && nt == LOAD_ACQ(q->sq_head))
            err = -ENOSPC;
        if (err)
            break;
        for (uint32_t i = 0; i < wr->num_sge; i++) /* the regions stay until the WR is done */
            __atomic_add_fetch(&ep_mr(ep, wr->sg_list[i].lkey)->users, 1, __ATOMIC_ACQ_REL);
        struct wqe *w = &q->sq[q->sq_tail];
        memset(w, 0, sizeof(*w));
        w->wr = *wr;
        w->total = total;
        w->npkts = total ? (uint32_t)((total + q->a.mtu - 1) / q->a.mtu) : 1;
        STORE_SC(q->sq_tail, nt); /* publish: the engine may send it from now on */
    }
    if (k)
        ep_dl_posted(ep, q);
    if (k && LOAD_SC(q->state) != MRC_QPS_RTS)
        STORE_SC(ep->flush_pending, 1); /* the engine moved the QP to ERROR meanwhile */
    return k ? (int)k : err;
}

/* Lock: the application lock only (the producer side of the receive queue). */
int ep_post_recv(struct mrc_ep *ep, uint32_t qpn, const uint64_t *wr_ids, uint32_t n)
{
    struct qp *q = ep_qp(ep, qpn);
    if (!q)
        return -ENOENT;
    uint32_t st = LOAD_SC(q->state);
    if (st == MRC_QPS_RESET || st == MRC_QPS_ERROR)
        return -EINVAL;
    uint32_t k;
    for (k = 0; k < n; k++) {
        uint32_t nt = ring_next(q->rq_tail, q->rq_size);
        if (nt == LOAD_ACQ(q->rq_head))
            break;
        q->rq[q->rq_tail] = wr_ids[k];
        STORE_SC(q->rq_tail, nt);
    }
    if (k)
        ep_dl_posted(ep, q);
    if (k && LOAD_SC(q->state) == MRC_QPS_ERROR)
        STORE_SC(ep->flush_pending, 1);
    return k ? (int)k : -ENOSPC;
}
