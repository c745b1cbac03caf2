/* Endpoint: memory regions, queue pairs, completion queue, packet dispatch.
 * The sans-I/O entry points (protocol.md section 3). */
#include "core.h"

static const char *state_names[] = {"RESET", "INIT", "RTR", "RTS", "ERROR"};

const char *mrc_qp_state_name(uint32_t s) { return s <= MRC_QPS_ERROR ? state_names[s] : "?"; }

static void qp_enter_error(struct mrc_ep *ep, struct qp *q, uint8_t first_status);

void mrc_qp_attr_default(struct mrc_qp_attr *a)
{
    memset(a, 0, sizeof(*a));
    a->mpr = 8;              /* 1024 PSNs */
    a->max_wimm = 64;
    a->timeout = 9;          /* 1.024 us x 2^9 = 524 us */
    a->linear_cnt = 7;
    a->exp_cnt = 7;
    a->mtu = 4096;
    a->planes = 8;
    a->ev_count = 128;
    a->ev_min_active = 8;
    a->ev_backup = 16;
    a->ack_bytes = 16384;
    a->probe_k = 3;
    a->probe_interval_ns = 100000;
    a->skip_ns = 20000;
    a->reorder_ns = 20000;
    a->sq_depth = 64;
    a->rq_depth = 64;
    /* NSCC defaults scale from BDP = rate x base RTT (protocol.md section 5):
     * 100 Gb/s x 10 us = 125 KB */
    a->cc.base_rtt = 10000;
    a->cc.target_delay = 8000;
    a->cc.max_cwnd = 187500;
    a->cc.fi = 256;
    a->cc.fi_scale = 1000;
    a->cc.eta = 128;
    a->cc.gamma = 800;
    a->cc.max_md_jump = 500;
    a->cc.qa_gate = 3;
    a->cc.qa_threshold = 40000;
    a->cc.adjust_bytes_threshold = 32768;
    a->cc.adjust_period_threshold = 10000;
}

static uint32_t ring_next(uint32_t i, uint32_t size) { return i + 1 == size ? 0 : i + 1; }

int mrc_ep_create(const struct mrc_ep_attr *attr, struct mrc_ep **out)
{
    struct mrc_ep *ep = calloc(1, sizeof(*ep));
    if (!ep)
        return -ENOMEM;
    ep->a = *attr;
    if (!ep->a.max_qps)
        ep->a.max_qps = 1024;
    if (!ep->a.cq_depth)
        ep->a.cq_depth = 65536;
    if (!ep->a.planes)
        ep->a.planes = 8;
    if (!ep->a.ev_event_depth)
        ep->a.ev_event_depth = 4096;
    if (ep->a.planes > MRC_MAX_PLANES || ep->a.max_qps > (1u << 20)) {
        free(ep);
        return -EINVAL;
    }
    if (!ep->a.port_bitmap)
        ep->a.port_bitmap = (uint32_t)((1ull << ep->a.planes) - 1);
    ep->port_up = ep->a.port_bitmap;
    ep->mr_cap = 1024;
    ep->mrs = calloc(ep->mr_cap, sizeof(*ep->mrs));
    ep->qps = calloc(ep->a.max_qps, sizeof(*ep->qps));
    ep->act = calloc(ep->a.max_qps, sizeof(*ep->act));
    ep->cq_size = ep->a.cq_depth + 1;
    ep->cq = calloc(ep->cq_size, sizeof(*ep->cq));
    ep->ctl_size = 4096;
    ep->ctl = calloc(ep->ctl_size, sizeof(*ep->ctl));
    ep->evq_size = ep->a.ev_event_depth + 1;
    ep->evq = calloc(ep->evq_size, sizeof(*ep->evq));
    ep->probes = calloc(MRC_PROBE_MAX, sizeof(*ep->probes));
    if (!ep->mrs || !ep->qps || !ep->act || !ep->cq || !ep->ctl || !ep->evq || !ep->probes) {
        mrc_ep_destroy(ep);
        return -ENOMEM;
    }
    *out = ep;
    return 0;
}

static void qp_free(struct qp *q)
{
    if (!q)
        return;
    free(q->sq);
    free(q->pe);
    free(q->evs);
    free(q->slot);
    free(q->rbits);
    free(q->pimm);
    free(q->rq);
    free(q);
}

void mrc_ep_destroy(struct mrc_ep *ep)
{
    if (!ep)
        return;
    if (ep->qps)
        for (uint32_t i = 0; i < ep->a.max_qps; i++)
            qp_free(ep->qps[i]);
    free(ep->qps);
    free(ep->act);
    free(ep->mrs);
    free(ep->cq);
    free(ep->ctl);
    free(ep->evq);
    free(ep->probes);
    free(ep);
}

/* ------------------------------------------------------------ memory */
int mrc_mr_reg(struct mrc_ep *ep, void *addr, uint64_t length, uint32_t access, uint32_t *lkey, uint32_t *rkey)
{
    if (!addr && length)
        return -EINVAL;
    if ((uintptr_t)addr + length < (uintptr_t)addr)
        return -EINVAL;
    for (uint32_t i = 0; i < ep->mr_cap; i++) {
        if (ep->mrs[i].used)
            continue;
        ep->mr_gen++;
        struct mr *m = &ep->mrs[i];
        m->addr = addr;
        m->len = length;
        m->access = access;
        m->key = ((i + 1) << 8) | ep->mr_gen;
        m->used = 1;
        *lkey = *rkey = m->key;
        return 0;
    }
    return -ENOSPC;
}

struct mr *ep_mr(struct mrc_ep *ep, uint32_t key)
{
    uint32_t i = (key >> 8);
    if (i == 0 || i > ep->mr_cap)
        return NULL;
    struct mr *m = &ep->mrs[i - 1];
    return (m->used && m->key == key) ? m : NULL;
}

int mrc_mr_dereg(struct mrc_ep *ep, uint32_t lkey)
{
    struct mr *m = ep_mr(ep, lkey);
    if (!m)
        return -ENOENT;
    memset(m, 0, sizeof(*m));
    return 0;
}

/* ------------------------------------------------------------ queue pairs */
static size_t pow2_roundup(size_t n) { size_t p = 1; while (p < n) p <<= 1; return p; }

size_t mrc_ep_qp_state_bytes(const struct mrc_qp_attr *a)
{
    size_t win = (size_t)a->mpr * MRC_MPR_UNIT;
    size_t nevs = a->ev_count + (size_t)a->ev_backup * a->planes;
    return sizeof(struct qp) + (a->sq_depth + 1) * sizeof(struct wqe) + win * sizeof(struct pent) +
           nevs * sizeof(struct event) + a->ev_count * sizeof(uint16_t) + pow2_roundup(win) / 8 +
           win * sizeof(struct pimm) + (a->rq_depth + 1) * sizeof(uint64_t);
}

int mrc_qp_create(struct mrc_ep *ep, const struct mrc_qp_attr *attr, uint32_t *qpn)
{
    const struct mrc_qp_attr *a = attr;
    if (a->mpr == 0 || a->mpr > 64 || (a->mpr & (a->mpr - 1)) || a->mtu < 64 || a->mtu > 9000 - 128 || a->planes == 0 ||
        a->planes > ep->a.planes || a->ev_count == 0 || a->ev_count % a->planes || a->ev_count > 4096 ||
        a->linear_cnt > 7 || a->exp_cnt > 25 || a->timeout > 24 || a->sq_depth == 0 || a->sq_depth > 65535 ||
        a->rq_depth == 0 || a->probe_k == 0 || a->probe_k > 255 || a->ev_min_active > a->ev_count ||
        a->max_wimm == 0)
        return -EINVAL;
    uint32_t idx;
    for (idx = 0; idx < ep->a.max_qps; idx++)
        if (!ep->qps[idx])
            break;
    if (idx == ep->a.max_qps)
        return -ENOSPC;
    struct qp *q = calloc(1, sizeof(*q));
    if (!q)
        return -ENOMEM;
    q->a = *a;
    q->qpn = idx + 1;
    q->win = a->mpr * MRC_MPR_UNIT;
    q->reo_ns = a->reorder_ns;
    q->sq_size = a->sq_depth + 1;
    q->sq = calloc(q->sq_size, sizeof(*q->sq));
    q->pe = calloc(q->win, sizeof(*q->pe));
    q->rbits = calloc(pow2_roundup(q->win) / 64 + 1, sizeof(uint64_t));
    q->pimm = calloc(q->win, sizeof(*q->pimm));
    q->rq_size = a->rq_depth + 1;
    q->rq = calloc(q->rq_size, sizeof(*q->rq));
    q->remote_ports = 0xFFFFFFFFu;
    q->cc = a->cc.algorithm == 1 ? &mrc_cc_fixed : &mrc_cc_nscc;
    if (!q->sq || !q->pe || !q->rbits || !q->pimm || !q->rq || ev_init(q) < 0) {
        qp_free(q);
        return -ENOMEM;
    }
    q->cc->init(q);
    q->state = MRC_QPS_RESET;
    ep->qps[idx] = q;
    *qpn = q->qpn;
    return 0;
}

void ep_set_active(struct mrc_ep *ep, struct qp *q, int on)
{
    uint32_t idx = q->qpn - 1;
    for (uint32_t i = 0; i < ep->nact; i++) {
        if (ep->act[i] == idx) {
            if (!on)
                ep->act[i] = ep->act[--ep->nact];
            return;
        }
    }
    if (on)
        ep->act[ep->nact++] = idx;
}

struct qp *ep_qp(struct mrc_ep *ep, uint32_t qpn)
{
    if (qpn == 0 || qpn > ep->a.max_qps)
        return NULL;
    return ep->qps[qpn - 1];
}

int mrc_qp_destroy(struct mrc_ep *ep, uint32_t qpn)
{
    struct qp *q = ep_qp(ep, qpn);
    if (!q)
        return -ENOENT;
    ep_set_active(ep, q, 0);
    ep->qps[qpn - 1] = NULL;
    qp_free(q);
    return 0;
}

/* RESET -> INIT -> RTR -> RTS; any -> ERROR; ERROR/any -> RESET. */
int mrc_qp_modify(struct mrc_ep *ep, uint32_t qpn, uint32_t state, uint32_t dest_qpn, uint16_t peer)
{
    struct qp *q = ep_qp(ep, qpn);
    if (!q)
        return -ENOENT;
    uint32_t cur = q->state;
    if (state == MRC_QPS_ERROR) { /* the application's own modify: no asynchronous event */
        if (cur != MRC_QPS_ERROR)
            qp_enter_error(ep, q, MRC_WC_WR_FLUSH_ERR);
        return 0;
    }
    if (state == MRC_QPS_RESET) {
        STORE_SC(q->state, MRC_QPS_RESET);
        ep_set_active(ep, q, 0);
        return 0;
    }
    if (!((cur == MRC_QPS_RESET && state == MRC_QPS_INIT) || (cur == MRC_QPS_INIT && state == MRC_QPS_RTR) ||
          (cur == MRC_QPS_RTR && state == MRC_QPS_RTS)))
        return -EINVAL;
    if (state == MRC_QPS_RTR) {
        if (dest_qpn == 0 || dest_qpn > MRC_PSN_MASK)
            return -EINVAL;
        q->dqpn = dest_qpn;
        q->peer = peer;
    }
    STORE_SC(q->state, state);
    if (state == MRC_QPS_RTS)
        ep_set_active(ep, q, 1);
    return 0;
}

uint32_t qp_usable_ports(struct mrc_ep *ep, struct qp *q) { return ep->port_up & q->remote_ports; }

int mrc_qp_query(struct mrc_ep *ep, uint32_t qpn, struct mrc_qp_stats *st)
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
    st->inflight = q->inflight;
    st->good_evs = ev_count_good(q);
    uint32_t bad = 0;
    for (uint32_t i = 0; i < q->nslots; i++)
        if (q->evs[q->slot[i]].state == MRC_EV_ASSUMED_BAD)
            bad++;
    st->bad_evs = bad;
    return 0;
}

/* ------------------------------------------------------------ completions */
int ep_push_wc(struct mrc_ep *ep, const struct mrc_wc *wc)
{
    uint32_t nt = ring_next(ep->cq_tail, ep->cq_size);
    if (nt == LOAD_ACQ(ep->cq_head)) {
        ep->cq_overflow++;
        return -ENOSPC;
    }
    ep->cq[ep->cq_tail] = *wc;
    STORE_REL(ep->cq_tail, nt);
    return 0;
}

int mrc_poll_cq(struct mrc_ep *ep, struct mrc_wc *wc, uint32_t max)
{
    uint32_t n = 0, head = ep->cq_head, tail = LOAD_ACQ(ep->cq_tail);
    while (n < max && head != tail) {
        wc[n++] = ep->cq[head];
        head = ring_next(head, ep->cq_size);
    }
    STORE_REL(ep->cq_head, head);
    return (int)n;
}

struct ctrl *ep_ctrl_slot(struct mrc_ep *ep)
{
    uint32_t nt = ring_next(ep->ctl_tail, ep->ctl_size);
    if (nt == ep->ctl_head)
        return NULL; /* full: the SACK is dropped; the next one is cumulative */
    struct ctrl *c = &ep->ctl[ep->ctl_tail];
    ep->ctl_tail = nt;
    c->probe_id = 0;
    return c;
}

struct ctrl *ep_ctrl_to(struct mrc_ep *ep, uint16_t peer, uint32_t ev)
{
    struct ctrl *c = ep_ctrl_slot(ep);
    if (c) {
        c->peer = peer;
        c->ev = ev;
        c->tclass = MRC_DSCP_CONTROL << 2;
    }
    return c;
}

void ctrl_put(struct ctrl *c, const struct mrc_pkt *p)
{
    int len = mrc_pkt_build(p, NULL, c->buf, sizeof(c->buf));
    c->len = (uint16_t)(len > 0 ? len : 0);
}

void ep_async_event(struct mrc_ep *ep, uint32_t type, uint32_t qpn, uint32_t info)
{
    uint32_t nt = (ep->aeq_tail + 1) % MRC_AEQ_SIZE;
    if (nt == ep->aeq_head) {
        ep->aeq_dropped++;
        return;
    }
    ep->aeq[ep->aeq_tail] = (struct mrc_async_event){.type = type, .qpn = qpn, .info = info,
                                                     .dropped = ep->aeq_dropped};
    ep->aeq_dropped = 0;
    ep->aeq_tail = nt;
}

int mrc_ep_async_events(struct mrc_ep *ep, struct mrc_async_event *out, uint32_t max)
{
    uint32_t n = 0;
    while (n < max && ep->aeq_head != ep->aeq_tail) {
        out[n++] = ep->aeq[ep->aeq_head];
        ep->aeq_head = (ep->aeq_head + 1) % MRC_AEQ_SIZE;
    }
    return (int)n;
}

/* Into ERROR: flush everything queued (the first WR gets first_status). */
static void qp_enter_error(struct mrc_ep *ep, struct qp *q, uint8_t first_status)
{
    STORE_SC(q->state, MRC_QPS_ERROR);
    ep_set_active(ep, q, 0);
    qp_flush(ep, q, first_status);
    q->inflight = 0;
    q->nlost = 0;
}

/* The engine failed the QP by itself: ERROR, and the application hears of it. */
void qp_to_error(struct mrc_ep *ep, struct qp *q, uint8_t first_status)
{
    if (q->state == MRC_QPS_ERROR)
        return;
    ep_async_event(ep, MRC_EVENT_QP_FATAL, q->qpn, first_status);
    qp_enter_error(ep, q, first_status);
}

/* Complete every WR still queued on q: the first with first_status, the rest
 * with FLUSH_ERR, and every posted receive with FLUSH_ERR. */
void qp_flush(struct mrc_ep *ep, struct qp *q, uint8_t first_status)
{
    uint8_t status = first_status;
    uint32_t tail = LOAD_SC(q->sq_tail);
    for (uint32_t i = q->sq_head; i != tail; i = ring_next(i, q->sq_size)) {
        struct wqe *w = &q->sq[i];
        if (w->done)
            continue;
        struct mrc_wc wc = {.wr_id = w->wr.wr_id, .qpn = q->qpn, .status = status, .opcode = MRC_WC_WRITE,
                            .byte_len = (uint32_t)w->total};
        ep_push_wc(ep, &wc);
        w->done = 1;
        status = MRC_WC_WR_FLUSH_ERR;
    }
    q->sq_cur = tail;
    STORE_REL(q->sq_head, tail);
    uint32_t rtail = LOAD_SC(q->rq_tail);
    while (q->rq_head != rtail) {
        struct mrc_wc wc = {.wr_id = q->rq[q->rq_head], .qpn = q->qpn, .status = MRC_WC_WR_FLUSH_ERR,
                            .opcode = MRC_WC_RECV_WRITE_IMM};
        ep_push_wc(ep, &wc);
        STORE_REL(q->rq_head, ring_next(q->rq_head, q->rq_size));
    }
}

/* ------------------------------------------------------------ posting */
static int sge_ok(struct mrc_ep *ep, const struct mrc_sge *s)
{
    struct mr *m = ep_mr(ep, s->lkey);
    if (!m)
        return 0;
    uint64_t a = s->addr, base = (uint64_t)(uintptr_t)m->addr;
    return a >= base && s->length <= m->len && a - base <= m->len - s->length;
}

int mrc_post_write(struct mrc_ep *ep, uint32_t qpn, const struct mrc_wr *wrs, uint32_t n)
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
            if (!sge_ok(ep, &wr->sg_list[i]))
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
        struct wqe *w = &q->sq[q->sq_tail];
        memset(w, 0, sizeof(*w));
        w->wr = *wr;
        w->total = total;
        w->npkts = total ? (uint32_t)((total + q->a.mtu - 1) / q->a.mtu) : 1;
        STORE_SC(q->sq_tail, nt); /* publish: the engine may send it from now on */
    }
    if (k && LOAD_SC(q->state) != MRC_QPS_RTS)
        STORE_SC(ep->flush_pending, 1); /* the engine moved the QP to ERROR meanwhile */
    return k ? (int)k : err;
}

int mrc_post_recv(struct mrc_ep *ep, uint32_t qpn, const uint64_t *wr_ids, uint32_t n)
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
    if (k && LOAD_SC(q->state) == MRC_QPS_ERROR)
        STORE_SC(ep->flush_pending, 1);
    return k ? (int)k : -ENOSPC;
}

/* ------------------------------------------------------------ input */
static void drop(struct mrc_ep *ep, int why) { ep->drops[why]++; }

/* ------------------------------------------------------------ EV probes */
int mrc_ep_probe_send(struct mrc_ep *ep, uint16_t peer, uint32_t ev, uint64_t now, uint32_t *id)
{
    uint32_t plane = ev >> 16;
    if (plane >= ep->a.planes)
        return -EINVAL;
    if (!(ep->port_up & (1u << plane)))
        return -ENETDOWN;
    uint32_t pid = ep->probe_seq + 1 ? ep->probe_seq + 1 : 1; /* 0 is "no probe" */
    struct probe *pr = &ep->probes[pid % MRC_PROBE_MAX];
    if (pr->state != PROBE_FREE)
        return -EBUSY;
    struct ctrl *c = ep_ctrl_to(ep, peer, ev);
    if (!c)
        return -ENOSPC;
    ctrl_put(c, &(struct mrc_pkt){.opcode = MRC_OP_ENDPOINT_REQUEST, .dqpn = 0, .probe_id = pid,
                                  .ep_op = MRC_EP_EV_PROBE, .port_bitmap = ep->port_up, .t1 = now});
    c->probe_id = pid;
    ep->probe_seq = pid;
    *pr = (struct probe){.id = pid, .ev = ev, .peer = peer, .state = PROBE_PENDING, .t_sent = now};
    *id = pid;
    return 0;
}

int mrc_ep_probe_result(struct mrc_ep *ep, uint32_t id, struct mrc_probe_result *out)
{
    struct probe *pr = &ep->probes[id % MRC_PROBE_MAX];
    if (!id || pr->id != id || pr->state == PROBE_FREE)
        return -ENOENT;
    if (pr->state == PROBE_PENDING)
        return 0;
    *out = (struct mrc_probe_result){.id = id, .ev = pr->ev, .peer = pr->peer, .port = pr->port, .rtt_ns = pr->rtt};
    pr->state = PROBE_FREE;
    return 1;
}

int mrc_ep_probe_cancel(struct mrc_ep *ep, uint32_t id)
{
    struct probe *pr = &ep->probes[id % MRC_PROBE_MAX];
    if (!id || pr->id != id || pr->state == PROBE_FREE)
        return -ENOENT;
    pr->state = PROBE_FREE;
    return 0;
}

/* A request: answer on the EV it came in on, with the plane it arrived on.
 * An answer: the RTT of the probe it names. */
static int ep_on_ev_probe(struct mrc_ep *ep, const struct mrc_pkt *p, const struct mrc_meta *m, uint64_t now)
{
    if (p->opcode == MRC_OP_ENDPOINT_REQUEST) {
        struct ctrl *c = ep_ctrl_to(ep, m->peer, m->ev);
        if (!c)
            return -ENOSPC; /* the prober times out, as on a congested path */
        ctrl_put(c, &(struct mrc_pkt){.opcode = MRC_OP_ENDPOINT_RESPONSE, .dqpn = 0, .probe_id = p->probe_id,
                                      .ep_op = MRC_EP_EV_PROBE, .rx_port = m->port, .port_bitmap = ep->port_up,
                                      .ev = m->ev, .t1 = p->t1, .t2 = 0});
        return 0;
    }
    struct probe *pr = &ep->probes[p->probe_id % MRC_PROBE_MAX];
    if (!p->probe_id || pr->id != p->probe_id || pr->state != PROBE_PENDING || pr->peer != m->peer) {
        drop(ep, MRC_DROP_STALE_PROBE);
        return -ENOENT;
    }
    pr->rtt = now > pr->t_sent ? now - pr->t_sent : 0;
    pr->port = (uint8_t)m->port;
    pr->state = PROBE_ANSWERED;
    __atomic_add_fetch(&ep->probe_answered, 1, __ATOMIC_RELEASE);
    return 0;
}

int mrc_ep_input(struct mrc_ep *ep, const uint8_t *pkt, uint32_t len, const struct mrc_meta *m, uint64_t now)
{
    struct mrc_pkt p;
    int rc = mrc_pkt_parse(pkt, len, m->trimmed, &p);
    if (rc < 0) {
        drop(ep, MRC_DROP_MALFORMED);
        return rc;
    }
    if (!m->trimmed && !mrc_pkt_icrc_ok(pkt, len)) {
        drop(ep, MRC_DROP_ICRC);
        return -EBADMSG;
    }
    if ((p.opcode == MRC_OP_ENDPOINT_REQUEST || p.opcode == MRC_OP_ENDPOINT_RESPONSE) && p.ep_op == MRC_EP_EV_PROBE)
        return ep_on_ev_probe(ep, &p, m, now); /* connectionless: no QP */
    struct qp *q = ep_qp(ep, p.dqpn);
    if (!q) {
        drop(ep, MRC_DROP_UNKNOWN_QP);
        return -ENOENT;
    }
    if (q->state != MRC_QPS_RTR && q->state != MRC_QPS_RTS) {
        drop(ep, MRC_DROP_QP_STATE);
        return -EINVAL;
    }
    if (mrc_opcode_is_data(p.opcode)) {
        resp_on_data(ep, q, pkt, len, &p, m, now);
    } else if (p.opcode == MRC_OP_SACK) {
        if (m->trimmed) {
            drop(ep, MRC_DROP_TRIMMED);
            return -EBADMSG;
        }
        req_on_sack(ep, q, &p, m, now);
    } else if (p.opcode == MRC_OP_NACK) {
        req_on_nack(ep, q, &p, now);
    } else if (p.opcode == MRC_OP_RELIABILITY_PROBE) {
        resp_on_probe(ep, q, &p, m);
    } else if (p.opcode == MRC_OP_ENDPOINT_REQUEST && p.ep_op == MRC_EP_PORT_STATUS) {
        if (q->remote_ports != p.port_bitmap)
            ep_async_event(ep, MRC_EVENT_PEER_PORTS, q->qpn, p.port_bitmap);
        q->remote_ports = p.port_bitmap;
    } else {
        drop(ep, MRC_DROP_MALFORMED);
        return -EPROTO;
    }
    return 0;
}

/* ------------------------------------------------------------ output */
int mrc_ep_poll_tx(struct mrc_ep *ep, uint64_t now, uint8_t *buf, uint32_t buflen, struct mrc_txdesc *d, uint32_t max)
{
    uint32_t n = 0, used = 0;
    if (LOAD_SC(ep->flush_pending) && __atomic_exchange_n(&ep->flush_pending, 0, __ATOMIC_SEQ_CST)) {
        for (uint32_t i = 0; i < ep->a.max_qps; i++)
            if (ep->qps[i] && ep->qps[i]->state == MRC_QPS_ERROR)
                qp_flush(ep, ep->qps[i], MRC_WC_WR_FLUSH_ERR);
    }
    /* control packets first: they unblock the peer */
    while (n < max && ep->ctl_head != ep->ctl_tail) {
        struct ctrl *c = &ep->ctl[ep->ctl_head];
        if (used + c->len > buflen)
            return (int)n;
        memcpy(buf + used, c->buf, c->len);
        d[n] = (struct mrc_txdesc){.off = used, .len = c->len, .ev = c->ev, .peer = c->peer, .tclass = c->tclass};
        if (c->probe_id && ep->probes[c->probe_id % MRC_PROBE_MAX].id == c->probe_id)
            ep->probes[c->probe_id % MRC_PROBE_MAX].t_sent = now; /* the RTT starts when it leaves */
        used += c->len;
        n++;
        ep->ctl_head = ring_next(ep->ctl_head, ep->ctl_size);
    }
    /* then every active QP in turn, starting after the one served first last time */
    uint32_t nq = ep->nact;
    for (uint32_t k = 0; k < nq && n < max && ep->nact; k++) {
        uint32_t slot = (ep->rr_qp + k) % ep->nact;
        struct qp *q = ep->qps[ep->act[slot]];
        if (!q || q->state != MRC_QPS_RTS)
            continue;
        req_on_timer(ep, q, now);
        if (q->state != MRC_QPS_RTS)
            continue;
        int got = req_poll_tx(ep, q, now, buf, buflen, &used, d + n, max - n);
        n += (uint32_t)got;
    }
    if (ep->nact)
        ep->rr_qp = (ep->rr_qp + 1) % ep->nact;
    return (int)n;
}

uint64_t mrc_ep_next_timer(struct mrc_ep *ep, uint64_t now)
{
    if (ep->ctl_head != ep->ctl_tail)
        return now;
    uint64_t t = MRC_INF_NS;
    for (uint32_t i = 0; i < ep->nact; i++) {
        struct qp *q = ep->qps[ep->act[i]];
        if (!q || q->state != MRC_QPS_RTS)
            continue;
        uint64_t x = req_next_timer(ep, q, now);
        if (x < t)
            t = x;
    }
    return t;
}

int mrc_ep_drops(struct mrc_ep *ep, uint64_t *counts, uint32_t n)
{
    for (uint32_t i = 0; i < n && i < MRC_DROP_NREASONS; i++)
        counts[i] = ep->drops[i];
    return MRC_DROP_NREASONS;
}

/* A local port (plane) went down or up: stop using its EVs at once and tell
 * every connected peer through a port status update (protocol.md 3). */
int mrc_ep_set_port(struct mrc_ep *ep, uint32_t plane, int up, uint64_t now)
{
    if (plane >= ep->a.planes)
        return -EINVAL;
    if (!!(ep->port_up & (1u << plane)) != !!up)
        ep_async_event(ep, up ? MRC_EVENT_PORT_ACTIVE : MRC_EVENT_PORT_ERR, 0, plane);
    if (up)
        ep->port_up |= 1u << plane;
    else
        ep->port_up &= ~(1u << plane);
    for (uint32_t i = 0; i < ep->a.max_qps; i++) {
        struct qp *q = ep->qps[i];
        if (!q || (q->state != MRC_QPS_RTS && q->state != MRC_QPS_RTR))
            continue;
        for (uint32_t pl = 0; pl < q->a.planes; pl++) {
            if (!(ep->port_up & (1u << pl)))
                continue;
            struct ctrl *c = ep_ctrl_to(ep, q->peer, pl << 16);
            if (!c)
                break;
            ctrl_put(c, &(struct mrc_pkt){.opcode = MRC_OP_ENDPOINT_REQUEST, .dqpn = q->dqpn,
                                          .ep_op = MRC_EP_PORT_STATUS, .port_bitmap = ep->port_up, .t1 = now});
        }
    }
    return 0;
}

int mrc_ev_list(struct mrc_ep *ep, uint32_t qpn, struct mrc_ev_info *out, uint32_t max)
{
    struct qp *q = ep_qp(ep, qpn);
    if (!q)
        return -ENOENT;
    if (max < q->nevs)
        return -E2BIG;
    for (uint32_t i = 0; i < q->nevs; i++) {
        out[i].ev = q->evs[i].ev;
        out[i].state = q->evs[i].state;
        out[i].in_slot = 0;
        out[i].slot = 0xFFFF;
    }
    for (uint32_t s = 0; s < q->nslots; s++) {
        out[q->slot[s]].in_slot = 1;
        out[q->slot[s]].slot = (uint16_t)s;
    }
    return (int)q->nevs;
}

int mrc_ev_set_state(struct mrc_ep *ep, uint32_t qpn, uint32_t ev, uint32_t state)
{
    struct qp *q = ep_qp(ep, qpn);
    if (!q)
        return -ENOENT;
    struct event *e = ev_find(q, ev);
    if (!e)
        return -ENOENT;
    if (state != MRC_EV_GOOD && state != MRC_EV_DENIED)
        return -EINVAL;
    ev_set_state(ep, q, e, (uint8_t)state, 0);
    return 0;
}

int mrc_ev_set_paths(struct mrc_ep *ep, uint32_t qpn, const uint32_t *npaths, uint32_t nplanes)
{
    struct qp *q = ep_qp(ep, qpn);
    if (!q)
        return -ENOENT;
    if (nplanes > MRC_MAX_PLANES)
        return -EINVAL;
    for (uint32_t p = 0; p < MRC_MAX_PLANES; p++)
        q->ev_paths[p] = (uint16_t)(p < nplanes && npaths[p] < 0x10000 ? npaths[p] : 0);
    return 0;
}

int mrc_ev_poll_events(struct mrc_ep *ep, struct mrc_ev_event *out, uint32_t max)
{
    uint32_t n = 0;
    while (n < max && ep->evq_head != ep->evq_tail) {
        out[n++] = ep->evq[ep->evq_head];
        ep->evq_head = ring_next(ep->evq_head, ep->evq_size);
    }
    return (int)n;
}
