/* The fabric simulator's hosts when they run RoCEv2 (mrc_fab_cfg.transport
 * MRC_FAB_ROCE; docs/sim.md, "RoCEv2 on the fabric"): the same fabric,
 * queues, workloads and faults as MRC, with the RoCE model (roce.c) at every
 * NIC instead of the engine. A flow is roce_qps QPs, QP j of flow i on plane
 * (i + j) % planes with its own UDP source port; its WRITEs go to the QPs in
 * turn. Packets carry no address: a leaf sends a packet down to its host or
 * up to the spine its ECMP picks, the 5-tuple's hash under the leaf's seed
 * over the spines whose two links (up from this leaf, down to the
 * destination's) routing has; routing sees a link's change converge_ns late,
 * so a failed link's flows are black-holed until then. A spine sends down to
 * the destination's leaf. A NIC port takes one packet when it is free, from
 * its QPs in turn. Replies (ACK, NAK, CNP) are packets too, hashed the
 * other way. Switch queues: a RoCE packet is never trimmed (no MRC header),
 * it is dropped above the buffer and ECN-capable when DCQCN runs.
 *
 * Lock: none (simfab.c). */
#include "sim/simfab_roce.h"
#include "sim/simfab_app.h"
#include "sim/simfab_heap.h"
#include "sim/simfab_port.h"

enum { R_DATA = 0, R_ACK = 1, R_NAK = 2, R_CNP = 3 };
enum { ROCE_DATA_HDRS = 32, ROCE_ACK_BYTES = 20, ROCE_CNP_BYTES = 32, ROCEV2_PORT = 4791 };

struct froce {
    struct mrc_roce_qp *q;
    struct mrc_roce_resp *r;
    uint64_t *in;   /* per QP: the WRITEs (or parts) its responder has taken whole */
    uint16_t *sport;
    uint8_t *dead;  /* in ERROR (counted once in the flow's errors) */
    uint32_t nq;
};

static uint32_t qp_plane(const struct mrc_fab *f, const struct fflow *fl, uint32_t j)
{
    return (uint32_t)((fl - f->flows) + j) % f->c.planes;
}

/* The model's configuration: the fabric's rate and the QP attribute's MTU where it says 0. */
static struct mrc_roce_cfg cfg_of(const struct mrc_fab_cfg *fc, uint32_t mtu)
{
    struct mrc_roce_cfg c = fc->roce;
    c.line_bps = c.line_bps ? c.line_bps : fc->rate_bps;
    c.mtu = c.mtu ? c.mtu : mtu;
    c.wire_extra = WIRE_EXTRA + ROCE_DATA_HDRS;
    return c;
}

static struct mrc_roce_cfg qp_cfg(const struct mrc_fab *f) { return cfg_of(&f->c, f->qa.mtu); }

int roce_check_cfg(const struct mrc_fab_cfg *c, uint32_t mtu)
{
    if (c->transport > MRC_FAB_ROCE)
        return -EINVAL;
    if (c->transport == MRC_FAB_MRC)
        return 0;
    if (!c->roce_qps || c->roce_qps > MRC_FAB_ROCE_QPS || c->roce_split > 1 || c->converge_ns > PS_INF / 4000)
        return -EINVAL;
    struct mrc_roce_cfg rc = cfg_of(c, mtu);
    struct mrc_roce_qp q;
    return mrc_roce_qp_init(&q, &rc);
}

static int host_add_qp(struct mrc_fab *f, uint32_t h, uint32_t id)
{
    uint32_t n = f->host_nrq[h];
    if (!(n & (n - 1))) { /* 0, 1, 2, 4...: grow to the next power of two */
        uint32_t *v = realloc(f->host_rq[h], (n ? 2 * n : 1) * sizeof(*v));
        if (!v)
            return -ENOMEM;
        f->host_rq[h] = v;
    }
    f->host_rq[h][f->host_nrq[h]++] = id;
    return 0;
}

int roce_add_flow(struct mrc_fab *f, struct fflow *fl)
{
    uint32_t nq = f->c.roce_qps, idx = (uint32_t)(fl - f->flows);
    if (!f->host_rq) {
        f->host_rq = calloc(f->c.hosts, sizeof(*f->host_rq));
        f->host_nrq = calloc(f->c.hosts, sizeof(*f->host_nrq));
        f->host_rr = calloc(f->c.hosts, sizeof(*f->host_rr));
        if (!f->host_rq || !f->host_nrq || !f->host_rr)
            return -ENOMEM;
    }
    struct froce *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    fl->r = r;
    r->nq = nq;
    r->q = aligned_alloc(64, ((nq * sizeof(*r->q) + 63) / 64) * 64);
    r->r = calloc(nq, sizeof(*r->r));
    r->in = calloc(nq, sizeof(*r->in));
    r->sport = calloc(nq, sizeof(*r->sport));
    r->dead = calloc(nq, 1);
    if (!r->q || !r->r || !r->in || !r->sport || !r->dead)
        return -ENOMEM;
    struct mrc_roce_cfg c = qp_cfg(f);
    for (uint32_t j = 0; j < nq; j++) {
        int rc = mrc_roce_qp_init(&r->q[j], &c);
        if (rc < 0)
            return rc;
        uint64_t x = (f->c.seed * 1000003ull + idx * 131ull + j + 1) * 0x9E3779B97F4A7C15ull;
        r->sport[j] = (uint16_t)(49152 + (x >> 40) % 16384); /* as a NIC picks a QP's source port */
    }
    for (uint32_t j = 0; j < nq; j++)
        if (host_add_qp(f, fl->c.src, idx * MRC_FAB_ROCE_QPS + j) < 0) {
            f->host_nrq[fl->c.src] -= j; /* none of this flow's stays listed */
            return -ENOMEM;
        }
    return 0;
}

/* WRITE i of fl: its length (as fab_next_len gave it when it was posted). */
static uint64_t msg_len(const struct fflow *fl, uint64_t i)
{
    if (fl->lens)
        return fl->lens[i];
    uint64_t off = i * fl->c.msg;
    return fl->c.bytes - off < fl->c.msg ? fl->c.bytes - off : fl->c.msg;
}

/* Whether WRITE i is whole where count(j) says how many WRITEs (or parts) QP j has: in turn, WRITE i
 * is QP i % nq's (i / nq)th; split, every QP's ith. */
static int whole(const struct mrc_fab *f, const struct froce *r, uint64_t i, const uint64_t *count, size_t stride)
{
    if (!f->c.roce_split) {
        uint32_t j = (uint32_t)(i % r->nq);
        return *(const uint64_t *)((const char *)count + j * stride) > i / r->nq;
    }
    for (uint32_t j = 0; j < r->nq; j++)
        if (*(const uint64_t *)((const char *)count + j * stride) <= i)
            return 0;
    return 1;
}

static int post_one(struct mrc_fab *f, struct fflow *fl, uint32_t j, uint64_t len)
{
    struct froce *r = fl->r;
    int rc = mrc_roce_post(&r->q[j], len);
    if (rc == -EIO && !r->dead[j]) {
        r->dead[j] = 1;
        fl->errors++;
    }
    return rc;
}

void roce_post_more(struct mrc_fab *f, struct fflow *fl)
{
    struct froce *r = fl->r;
    uint64_t len;
    while ((len = fab_next_len(f, fl))) {
        if (!f->c.roce_split) {
            if (post_one(f, fl, (uint32_t)(fl->seq % r->nq), len) < 0)
                return;
        } else {
            for (uint32_t j = 0; j < r->nq; j++) /* part j: an equal share, the first ones a byte more */
                if (post_one(f, fl, j, len / r->nq + (j < len % r->nq)) < 0)
                    return;
        }
        fl->posted += len;
        fl->seq++;
    }
}

/* The flow's WRITEs done at its sender, in order (fab_wr_done), and more posted. */
static void sender_progress(struct mrc_fab *f, struct fflow *fl)
{
    const struct froce *r = fl->r;
    uint64_t n = 0, bytes = 0;
    while (fl->msgs + n < fl->seq && whole(f, r, fl->msgs + n, &r->q[0].done_msgs, sizeof(r->q[0]))) {
        bytes += msg_len(fl, fl->msgs + n);
        n++;
    }
    if (n) {
        fab_wr_done(f, fl, n, bytes);
        roce_post_more(f, fl);
    }
}

/* ------------------------------------------------------------ packets */
static void send_pkt(struct mrc_fab *f, uint32_t h, struct fflow *fl, uint32_t j, uint32_t kind, uint64_t psn,
                     uint32_t bytes, uint32_t last)
{
    struct fpkt *k = fab_pkt_get(f, 0);
    if (!k) {
        f->err = f->err ? f->err : -ENOMEM;
        return;
    }
    uint32_t plane = qp_plane(f, fl, j);
    k->r.psn = psn;
    k->r.flow = (uint32_t)(fl - f->flows);
    k->r.q = (uint16_t)j;
    k->r.kind = (uint8_t)kind;
    k->r.last = (uint8_t)last;
    k->hdr = k->zlen = 0; /* nothing to trim */
    k->len = bytes;
    k->wire = bytes + WIRE_EXTRA;
    k->src = (uint16_t)h;
    k->tclass = f->c.roce.dcqcn ? 2 : 0; /* ECT(0) where DCQCN reads the marks */
    k->ce = k->trimmed = 0;
    k->ev = 0;
    f->st.sent++;
    fab_enqueue(f, k, (uint64_t)(plane * f->c.hosts + h) * 2, node(NODE_LEAF, plane, host_leaf(f, h)));
}

/* Whether routing has a link at now: its state converge_ns ago (the last change only). */
static int routed(const struct mrc_fab *f, uint32_t link)
{
    int up = !f->ports[(uint64_t)link * 2].down;
    uint64_t t = f->link_changed[link];
    return !t || f->now >= t + f->c.converge_ns * 1000 ? up : !up;
}

/* The spine leaf l's ECMP picks toward leaf ld on plane p, or -1 when routing has none. */
static int ecmp_spine(const struct mrc_fab *f, const struct fpkt *k, uint32_t at, uint32_t dst, uint32_t ld)
{
    uint32_t p = (at >> 24) & 0xF, l = at & 0xFFFFFF, S = f->c.spines, base = f->c.planes * f->c.hosts;
    const struct fflow *fl = &f->flows[k->r.flow];
    uint8_t sa[16] = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, (uint8_t)p, 0, 0, (uint8_t)(k->src >> 8), (uint8_t)k->src};
    uint8_t da[16] = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, (uint8_t)p, 0, 0, (uint8_t)(dst >> 8), (uint8_t)dst};
    uint32_t h = mrc_roce_ecmp_hash((uint32_t)(f->c.seed * 0x9E3779B1u) ^ at, sa, da, fl->r->sport[k->r.q],
                                    ROCEV2_PORT);
    if (!f->links_changed)
        return (int)(h % S);
    uint16_t live[256];
    uint32_t n = 0;
    for (uint32_t s = 0; s < S; s++)
        if (routed(f, base + (p * f->c.leaves + l) * S + s) && routed(f, base + (p * f->c.leaves + ld) * S + s))
            live[n++] = (uint16_t)s;
    return n ? live[h % n] : -1;
}

static int64_t roce_forward(struct mrc_fab *f, const struct fpkt *k, uint32_t at, uint32_t *next)
{
    uint32_t kind = at >> 28, p = (at >> 24) & 0xF, idx = at & 0xFFFFFF, H = f->c.hosts, L = f->c.leaves;
    const struct fflow *fl = &f->flows[k->r.flow];
    uint32_t dst = k->r.kind == R_DATA ? fl->c.dst : fl->c.src, ld = host_leaf(f, dst);
    if (kind == NODE_SPINE) {
        *next = node(NODE_LEAF, p, ld);
        return (int64_t)(f->c.planes * H + (p * L + ld) * f->c.spines + idx) * 2 + 1;
    }
    if (kind != NODE_LEAF)
        return -1;
    if (ld == idx) {
        *next = node(NODE_HOST, p, dst);
        return (int64_t)(p * H + dst) * 2 + 1;
    }
    int s = ecmp_spine(f, k, at, dst, ld);
    if (s < 0)
        return -1;
    *next = node(NODE_SPINE, p, (uint32_t)s);
    return (int64_t)(f->c.planes * H + (p * L + idx) * f->c.spines + (uint32_t)s) * 2;
}

int mrc_fab_roce_path(struct mrc_fab *f, uint32_t flow, uint32_t q, uint32_t *plane, int32_t *spine)
{
    if (f->c.transport != MRC_FAB_ROCE || flow >= f->nflows || q >= f->flows[flow].r->nq)
        return -EINVAL;
    const struct fflow *fl = &f->flows[flow];
    struct fpkt k = {.src = (uint16_t)fl->c.src};
    k.r.flow = flow;
    k.r.q = q;
    k.r.kind = R_DATA;
    uint32_t p = qp_plane(f, fl, q), ls = host_leaf(f, fl->c.src), ld = host_leaf(f, fl->c.dst);
    *plane = p;
    *spine = ls == ld ? -1 : ecmp_spine(f, &k, node(NODE_LEAF, p, ls), fl->c.dst, ld);
    return 0;
}

/* A data packet at its receiver: the responder's answer goes back at once. */
static void at_receiver(struct mrc_fab *f, uint32_t h, struct fflow *fl, const struct fpkt *k)
{
    struct mrc_roce_reply rep;
    uint32_t j = k->r.q;
    /* the responder reads its QP's settings (ack_every, cnp_ns): the requester's copy, the pair's own */
    int taken = mrc_roce_resp_rx(&fl->r->r[j], &fl->r->q[j].c, k->r.psn, k->r.last, k->ce, f->now / 1000, &rep);
    fl->r->in[j] += taken && k->r.last;
    if (rep.cnp)
        send_pkt(f, h, fl, j, R_CNP, 0, ROCE_CNP_BYTES, 0);
    if (rep.kind != MRC_ROCE_NONE)
        send_pkt(f, h, fl, j, rep.kind == MRC_ROCE_ACK ? R_ACK : R_NAK, rep.psn, ROCE_ACK_BYTES, 0);
    while (taken && k->r.last && fl->lens && fl->arrived < fl->nmsgs &&
           whole(f, fl->r, fl->arrived, fl->r->in, sizeof(*fl->r->in)))
        fab_arrived(f, fl); /* a collective's WRITE_IMM: its receiver has it whole, and every one before */
}

/* A reply at the sender: the QP moves on; what completed is the application's. */
static void at_sender(struct mrc_fab *f, uint32_t h, struct fflow *fl, const struct fpkt *k)
{
    struct mrc_roce_qp *q = &fl->r->q[k->r.q];
    uint64_t now_ns = f->now / 1000, msgs = q->done_msgs;
    if (k->r.kind == R_CNP) {
        mrc_roce_on_cnp(q, now_ns);
    } else {
        struct mrc_roce_reply rep = {.kind = k->r.kind == R_ACK ? MRC_ROCE_ACK : MRC_ROCE_NAK, .psn = k->r.psn};
        mrc_roce_on_reply(q, &rep, now_ns);
    }
    if (q->done_msgs != msgs)
        sender_progress(f, fl);
    wake_at(f, h, f->now);
}

void roce_arrive(struct mrc_fab *f, struct fpkt *k)
{
    uint32_t at = k->node;
    if (at >> 28 == NODE_HOST) {
        uint32_t h = at & 0xFFFFFF;
        struct fflow *fl = &f->flows[k->r.flow];
        f->st.delivered++;
        if (k->r.kind == R_DATA)
            at_receiver(f, h, fl, k);
        else
            at_sender(f, h, fl, k);
        fab_pkt_put(f, k);
        return;
    }
    uint32_t next;
    int64_t out = roce_forward(f, k, at, &next);
    if (out < 0) {
        f->st.no_route++;
        fab_pkt_put(f, k);
        return;
    }
    fab_enqueue(f, k, (uint64_t)out, next);
}

/* ------------------------------------------------------------ the NIC */
/* Each free port takes one packet from its QPs, in turn from where the last wake began. */
void roce_host_wake(struct mrc_fab *f, uint32_t h)
{
    f->hosts[h].wake = PS_INF;
    uint32_t n = f->host_nrq ? f->host_nrq[h] : 0, first = n ? f->host_rr[h]++ % n : 0;
    uint64_t now_ns = f->now / 1000, next = PS_INF;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t id = f->host_rq[h][(first + i) % n], j = id % MRC_FAB_ROCE_QPS;
        struct fflow *fl = &f->flows[id / MRC_FAB_ROCE_QPS];
        struct froce *r = fl->r;
        struct fport *pt = &f->ports[(uint64_t)(qp_plane(f, fl, j) * f->c.hosts + h) * 2];
        struct mrc_roce_tx tx;
        if (pt->paused) { /* PFC: nothing goes; the resume wakes the host */
            mrc_roce_timers(&r->q[j], now_ns);
            next = r->q[j].rto_at && r->q[j].rto_at * 1000 < next ? r->q[j].rto_at * 1000 : next;
            continue;
        }
        int rc = pt->busy > f->now ? 0 : mrc_roce_next_tx(&r->q[j], now_ns, &tx);
        if (rc == -EIO) {
            if (!r->dead[j]) {
                r->dead[j] = 1;
                fl->errors++;
            }
            continue;
        }
        if (rc == 1)
            send_pkt(f, h, fl, j, R_DATA, tx.psn, tx.bytes + ROCE_DATA_HDRS, tx.last);
        uint64_t t = mrc_roce_next_event(&r->q[j]);
        if (t != UINT64_MAX) {
            t = t * 1000 > pt->busy ? t * 1000 : pt->busy; /* its port frees first */
            next = t < next ? t : next;
        }
    }
    if (next == PS_INF)
        unwake(f, h);
    else
        wake_at(f, h, next > f->now ? next : f->now + 1000);
}

void roce_flow_stats(const struct mrc_fab *f, const struct fflow *fl, struct mrc_qp_stats *qs)
{
    memset(qs, 0, sizeof(*qs));
    qs->state = MRC_QPS_RTS;
    for (uint32_t j = 0; j < fl->r->nq; j++) {
        const struct mrc_roce_qp *q = &fl->r->q[j];
        uint64_t first = q->sent - q->resent;
        qs->tx_packets += first;
        qs->rtx_packets += q->resent;
        qs->tx_bytes += q->done_bytes + (q->high - q->una) * q->c.mtu; /* payload sent once, roughly */
        qs->rtx_bytes += q->resent * q->c.mtu;
        qs->timeouts += q->timeouts;
        qs->nacks_rx += q->naks;
        qs->sacks_rx += fl->r->r[j].acks;
        qs->ecn_marks += q->cnps;
        qs->plane_tx[qp_plane(f, fl, j)] += q->sent;
        if (q->state == MRC_ROCE_ERROR)
            qs->state = MRC_QPS_ERROR;
    }
}

void roce_free_flow(struct fflow *fl)
{
    struct froce *r = fl->r;
    if (!r)
        return;
    free(r->q);
    free(r->r);
    free(r->in);
    free(r->sport);
    free(r->dead);
    free(r);
    fl->r = NULL;
}

void roce_free(struct mrc_fab *f)
{
    for (uint32_t i = 0; f->flows && i < f->nflows; i++)
        roce_free_flow(&f->flows[i]);
    for (uint32_t h = 0; f->host_rq && h < f->c.hosts; h++)
        free(f->host_rq[h]);
    free(f->host_rq);
    free(f->host_nrq);
    free(f->host_rr);
}
