/* Endpoint objects, below the roles: the tables of memory regions, queue
 * pairs and completion queues, the rings (completions, control packets, EV
 * events, asynchronous events) and posting. Calls nothing above it: the
 * roles call in here, never the other way (core.h has the layering).
 *
 * Lock: every function here runs with the context's endpoint lock held,
 * except ep_post_write, ep_post_recv and ep_cq_poll, which hold only the
 * application lock and touch the single-producer/single-consumer rings
 * (core.h states their contract). */
#include "core.h"

static const char *const wc_status_names[] = {"SUCCESS", "LOC_LEN_ERR", "LOC_PROT_ERR", "REM_ACCESS_ERR",
                                              "RETRY_EXC_ERR", "WR_FLUSH_ERR", "REM_OP_ERR"};
static const char *const event_names[] = {NULL, "QP_FATAL", "PORT_ERR", "PORT_ACTIVE", "PEER_PORTS", "CQ_ERR"};
static const char *const drop_names[MRC_DROP_NREASONS] = {
    "malformed", "icrc", "unknown_qp", "qp_state", "psn_window", "rkey", "range", "duplicate", "no_recv", "trimmed",
    "stale_ack", "stale_probe", "wrong_peer"};

#define NAME_OF(table, v) ((v) < sizeof(table) / sizeof((table)[0]) ? (table)[v] : NULL)
const char *mrc_wc_status_name(uint32_t s) { return NAME_OF(wc_status_names, s); }
const char *mrc_event_name(uint32_t t) { return NAME_OF(event_names, t); }
const char *mrc_drop_name(uint32_t r) { return NAME_OF(drop_names, r); }

/* ---------------------------------------------------------- a keyed PRF
 * SipHash-2-4 of one 64-bit word under the endpoint's secret: rkeys and QP
 * numbers come from it, so a peer that sees some cannot compute others. */
#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                            \
    do {                                                                                                     \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32); v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;      \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0; v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);     \
    } while (0)

static uint64_t siphash_u64(const uint64_t k[2], uint64_t m)
{
    uint64_t v0 = 0x736f6d6570736575ull ^ k[0], v1 = 0x646f72616e646f6dull ^ k[1];
    uint64_t v2 = 0x6c7967656e657261ull ^ k[0], v3 = 0x7465646279746573ull ^ k[1];
    const uint64_t b = 8ull << 56; /* an 8-byte message */
    v3 ^= m;
    SIPROUND;
    SIPROUND;
    v0 ^= m;
    v3 ^= b;
    SIPROUND;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t ep_prf(const struct mrc_ep *ep, uint64_t domain, uint64_t x) { return siphash_u64(ep->key, domain << 56 ^ x); }

enum { PRF_RKEY = 1, PRF_QPN = 2 };

/* A bijection of the 22-bit registration count (a 4-round Feistel network):
 * every count gives another key until the count wraps, 2^22 registrations on. */
static uint32_t key_perm(const struct mrc_ep *ep, uint32_t x)
{
    uint32_t half = MR_SEQ_BITS / 2, mask = (1u << half) - 1, l = x >> half & mask, r = x & mask;
    for (uint32_t round = 0; round < 4; round++) {
        uint32_t f = (uint32_t)ep_prf(ep, PRF_RKEY, (uint64_t)round << 32 | r) & mask;
        uint32_t t = r;
        r = l ^ f;
        l = t;
    }
    return l << half | r;
}

/* Lock: none (the endpoint is not shared yet). key: the PRF's secret. */
int ep_create(const struct mrc_ep_attr *attr, const uint64_t key[2], struct mrc_ep **out)
{
    struct mrc_ep *ep = calloc(1, sizeof(*ep));
    if (!ep)
        return -ENOMEM;
    ep->a = *attr;
    ep->key[0] = key[0];
    ep->key[1] = key[1];
    if (!ep->a.max_qps)
        ep->a.max_qps = 1024;
    if (!ep->a.cq_depth)
        ep->a.cq_depth = 65536;
    if (!ep->a.planes)
        ep->a.planes = 8;
    if (!ep->a.ev_event_depth)
        ep->a.ev_event_depth = 4096;
    for (uint32_t p = 0; p < MRC_MAX_PLANES; p++)
        ep->path_qpn[p] = UINT32_MAX; /* no QP has sent: the first one's own cursor stands */
    if (ep->a.planes > MRC_MAX_PLANES || ep->a.max_qps > MRC_MAX_QPS || ep->a.cq_depth > MRC_MAX_CQ_DEPTH ||
        ep->a.ev_event_depth > MRC_MAX_EV_EVENT_DEPTH) {
        free(ep);
        return -EINVAL;
    }
    if (!ep->a.port_bitmap)
        ep->a.port_bitmap = (uint32_t)((1ull << ep->a.planes) - 1);
    ep->port_up = ep->a.port_bitmap;
    ep->mr_cap = 1u << MR_SLOT_BITS;
    while ((1u << ep->qp_bits) < ep->a.max_qps)
        ep->qp_bits++;
    for (uint32_t i = 0; i < MRC_MAX_PEERS; i++)
        ep->peer_host[i] = (uint16_t)i; /* each peer its own host until told otherwise */
    ep->pd_live = 1; /* PD 0 */
    ep->mrs = calloc(ep->mr_cap, sizeof(*ep->mrs));
    ep->qps = calloc(ep->a.max_qps, sizeof(*ep->qps));
    ep->act = calloc(ep->a.max_qps, sizeof(*ep->act));
    ep->dl = calloc(ep->a.max_qps, sizeof(*ep->dl));
    ep->dl_ports = calloc(ep->a.max_qps, sizeof(*ep->dl_ports));
    ep->dl_dirty = calloc(ep->a.max_qps, sizeof(*ep->dl_dirty));
    ep->dl_all = 1;
    ep->ctl_size = MRC_CTRL_RING;
    ep->ctl = calloc(ep->ctl_size, sizeof(*ep->ctl));
    ep->evq_size = ep->a.ev_event_depth + 1;
    ep->evq = calloc(ep->evq_size, sizeof(*ep->evq));
    ep->probes = calloc(MRC_PROBE_MAX, sizeof(*ep->probes));
    uint32_t cq0;
    if (!ep->mrs || !ep->qps || !ep->act || !ep->dl || !ep->dl_ports || !ep->dl_dirty || !ep->ctl || !ep->evq ||
        !ep->probes || ep_cq_create(ep, ep->a.cq_depth, &cq0) < 0) {
        ep_destroy(ep);
        return -ENOMEM;
    }
    *out = ep;
    return 0;
}

/* The endpoint's own memory (its QPs are gone: qp_destroy_all). */
void ep_destroy(struct mrc_ep *ep)
{
    if (!ep)
        return;
    for (uint32_t i = 0; i < MRC_MAX_CQS; i++)
        free(ep->cqs[i].ring);
    free(ep->qps);
    free(ep->act);
    free(ep->dl);
    free(ep->dl_ports);
    free(ep->dl_dirty);
    free(ep->mrs);
    free(ep->ctl);
    free(ep->evq);
    free(ep->probes);
    free(ep);
}

void ep_drop(struct mrc_ep *ep, int why) { ep->drops[why]++; }

int ep_drops(struct mrc_ep *ep, uint64_t *counts, uint32_t n)
{
    for (uint32_t i = 0; i < n && i < MRC_DROP_NREASONS; i++)
        counts[i] = ep->drops[i];
    return MRC_DROP_NREASONS;
}

/* ------------------------------------------------------------ protection domains */
int ep_pd_alloc(struct mrc_ep *ep, uint32_t *pdn)
{
    for (uint32_t i = 0; i < MRC_MAX_PDS; i++) {
        if (!(ep->pd_live >> i & 1)) {
            ep->pd_live |= 1ull << i;
            ep->pd_users[i] = 0;
            *pdn = i;
            return 0;
        }
    }
    return -ENOSPC;
}

int ep_pd_dealloc(struct mrc_ep *ep, uint32_t pdn)
{
    if (pdn >= MRC_MAX_PDS || !(ep->pd_live >> pdn & 1))
        return -ENOENT;
    if (pdn == 0 || ep->pd_users[pdn])
        return -EBUSY; /* PD 0 lives as long as its context */
    ep->pd_live &= ~(1ull << pdn);
    return 0;
}

/* A region or QP takes (hold) or gives back a place in PD pdn. */
int ep_pd_hold(struct mrc_ep *ep, uint32_t pdn, int hold)
{
    if (pdn >= MRC_MAX_PDS || !(ep->pd_live >> pdn & 1))
        return -ENOENT;
    ep->pd_users[pdn] += hold ? 1 : (uint32_t)-1;
    return 0;
}

/* ------------------------------------------------------------ memory */
int ep_mr_reg(struct mrc_ep *ep, uint32_t pdn, void *addr, uint64_t length, uint32_t access, uint32_t *lkey,
              uint32_t *rkey)
{
    if ((!addr && length) || (uintptr_t)addr + length < (uintptr_t)addr || (access & ~3u))
        return -EINVAL;
    for (uint32_t i = 0; i < ep->mr_cap; i++) {
        if (ep->mrs[i].used)
            continue;
        int rc = ep_pd_hold(ep, pdn, 1);
        if (rc < 0)
            return rc;
        uint32_t key;
        do { /* a fresh count for every registration: the key 0 is never handed out */
            key = key_perm(ep, ep->mr_seq++ & ((1u << MR_SEQ_BITS) - 1)) << MR_SLOT_BITS | i;
        } while (key == 0);
        ep->mrs[i] = (struct mr){.addr = addr, .len = length, .access = access, .key = key, .pd = pdn, .used = 1};
        *lkey = *rkey = key;
        return 0;
    }
    return -ENOSPC;
}

struct mr *ep_mr(struct mrc_ep *ep, uint32_t key)
{
    struct mr *m = &ep->mrs[key & (ep->mr_cap - 1)];
    return (m->used && m->key == key) ? m : NULL;
}

int ep_mr_dereg(struct mrc_ep *ep, uint32_t lkey)
{
    struct mr *m = ep_mr(ep, lkey);
    if (!m)
        return -ENOENT;
    if (__atomic_load_n(&m->users, __ATOMIC_ACQUIRE))
        return -EBUSY; /* a queued WR still reads from it */
    ep_pd_hold(ep, m->pd, 0);
    memset(m, 0, sizeof(*m));
    return 0;
}

/* A WR left its send queue (completed, flushed or discarded): its regions
 * may go. */
void ep_wqe_release(struct mrc_ep *ep, const struct wqe *w)
{
    for (uint32_t i = 0; i < w->wr.num_sge && i < MRC_MAX_SGE; i++) {
        struct mr *m = ep_mr(ep, w->wr.sg_list[i].lkey);
        if (m)
            __atomic_sub_fetch(&m->users, 1, __ATOMIC_RELEASE);
    }
}

/* ------------------------------------------------------------ peers */
void ep_set_peer_host(struct mrc_ep *ep, uint16_t peer, uint16_t host)
{
    if (peer < MRC_MAX_PEERS && host < MRC_MAX_PEERS)
        ep->peer_host[peer] = host;
}

/* A QP out of RESET is connected through peer index p. */
int ep_peer_in_use(const struct mrc_ep *ep, uint16_t p)
{
    for (uint32_t i = 0; i < ep->a.max_qps; i++)
        if (ep->qps[i] && ep->qps[i]->peer == p && ep->qps[i]->state != MRC_QPS_RESET)
            return 1;
    return 0;
}

/* Peer indices a and b are the same host (its addresses). */
int ep_same_host(const struct mrc_ep *ep, uint16_t a, uint16_t b)
{
    return a < MRC_MAX_PEERS && b < MRC_MAX_PEERS && ep->peer_host[a] == ep->peer_host[b];
}

/* ------------------------------------------------------------ completion queues */
struct cq *ep_cq(struct mrc_ep *ep, uint32_t cqn)
{
    return cqn < MRC_MAX_CQS && ep->cqs[cqn].used ? &ep->cqs[cqn] : NULL;
}

int ep_cq_create(struct mrc_ep *ep, uint32_t depth, uint32_t *cqn)
{
    if (depth == 0 || depth > MRC_MAX_CQ_DEPTH)
        return -EINVAL;
    for (uint32_t i = 0; i < MRC_MAX_CQS; i++) {
        struct cq *cq = &ep->cqs[i];
        if (cq->used)
            continue;
        *cq = (struct cq){.size = depth + 1};
        cq->ring = calloc(cq->size, sizeof(*cq->ring));
        if (!cq->ring)
            return -ENOMEM;
        cq->used = 1;
        ep->cq_live |= 1ull << i;
        *cqn = i;
        return 0;
    }
    return -ENOSPC;
}

int ep_cq_destroy(struct mrc_ep *ep, uint32_t cqn)
{
    struct cq *cq = ep_cq(ep, cqn);
    if (!cq)
        return -ENOENT;
    if (cq->users)
        return -EBUSY;
    free(cq->ring);
    memset(cq, 0, sizeof(*cq));
    ep->cq_live &= ~(1ull << cqn);
    ep->cq_dirty &= ~(1ull << cqn);
    return 0;
}

static uint32_t cq_used(const struct cq *cq)
{
    uint32_t t = LOAD_ACQ(cq->tail), h = LOAD_ACQ(cq->head);
    return (t + cq->size - h) % cq->size;
}

int ep_cq_query(struct mrc_ep *ep, uint32_t cqn, struct mrc_cq_stats *st)
{
    struct cq *cq = ep_cq(ep, cqn);
    if (!cq)
        return -ENOENT;
    *st = (struct mrc_cq_stats){.depth = cq->size - 1, .waiting = cq_used(cq), .overflow = cq->overflow};
    return 0;
}

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

/* ------------------------------------------------------------ the QP table */
struct qp *ep_qp(struct mrc_ep *ep, uint32_t qpn)
{
    uint32_t idx = ep_qp_slot(ep, qpn);
    if (qpn == 0 || idx >= ep->a.max_qps)
        return NULL;
    struct qp *q = ep->qps[idx];
    return q && q->qpn == qpn ? q : NULL;
}

/* Give q a number and a place in the table. */
int ep_qp_insert(struct mrc_ep *ep, struct qp *q)
{
    for (uint32_t idx = 0; idx < ep->a.max_qps; idx++) {
        if (ep->qps[idx])
            continue;
        uint32_t qpn;
        do {
            qpn = ((uint32_t)ep_prf(ep, PRF_QPN, ep->qp_seq++) << ep->qp_bits | idx) & MRC_PSN_MASK;
        } while (qpn == 0);
        q->qpn = qpn;
        ep->qps[idx] = q;
        return 0;
    }
    return -ENOSPC;
}

void ep_qp_remove(struct mrc_ep *ep, struct qp *q)
{
    ep_set_active(ep, q, 0);
    ep->qps[ep_qp_slot(ep, q->qpn)] = NULL;
}

/* The active list: the QPs the tx path visits. */
void ep_set_active(struct mrc_ep *ep, struct qp *q, int on)
{
    uint32_t idx = ep_qp_slot(ep, q->qpn);
    for (uint32_t i = 0; i < ep->nact; i++) {
        if (ep->act[i] == idx) {
            if (!on)
                ep->act[i] = ep->act[--ep->nact];
            return;
        }
    }
    if (on) {
        ep->act[ep->nact++] = idx;
        ep_dl_stale(ep, idx);
    }
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
