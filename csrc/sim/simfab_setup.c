/* Building the fabric simulator and reading it out: hosts (contexts with a
 * region each), flows (a connected QP pair, WRITEs posted by simfab.c's
 * application), the local peer numbers of every host, the statistics.
 *
 * Lock: none (simfab.c). */
#include "sim/fab.h"
#include "sim/simfab_roce.h"

static int connect_qp(struct mrc_ctx *c, uint32_t qpn, uint32_t dqpn, uint32_t peer, uint32_t spines, uint32_t planes)
{
    struct mrc_qp_conn conn = {.dest_qpn = dqpn, .peer = (uint16_t)peer, .rq_psn = 1, .sq_psn = 1};
    uint32_t npaths[MRC_MAX_PLANES];
    for (uint32_t p = 0; p < planes; p++)
        npaths[p] = spines;
    int rc = mrc_qp_modify(c, qpn, MRC_QPS_INIT, NULL);
    rc = rc < 0 ? rc : mrc_qp_modify(c, qpn, MRC_QPS_RTR, &conn);
    rc = rc < 0 ? rc : mrc_qp_modify(c, qpn, MRC_QPS_RTS, &conn);
    return rc < 0 ? rc : mrc_ev_set_paths(c, qpn, npaths, planes);
}

/* One EV left per plane, the one a hash of the flow picks (so one spine),
 * as ECMP hashes a RoCE flow onto one path behind each NIC port. */
static int single_path(struct mrc_fab *f, struct mrc_ctx *c, uint32_t qpn, uint32_t idx)
{
    uint32_t max = mrc_qp_ev_total(&f->qa); /* active and spare */
    struct mrc_ev_info *evs = calloc(max, sizeof(*evs));
    if (!evs)
        return -ENOMEM;
    int n = mrc_ev_list(c, qpn, evs, max), rc = n > 0 ? 0 : -EINVAL;
    for (uint32_t p = 0; p < f->qa.planes && rc == 0; p++) {
        uint32_t cnt = 0, keep;
        for (int i = 0; i < n; i++)
            cnt += ev_plane(evs[i].ev) == p;
        uint64_t x = (f->c.seed * 1000003ull + idx * 131ull + p + 1) * 0x9E3779B97F4A7C15ull;
        keep = cnt ? (uint32_t)((x ^ x >> 29) % cnt) : 0;
        for (int i = 0; i < n && rc == 0; i++) {
            if (ev_plane(evs[i].ev) != p)
                continue;
            if (keep-- != 0 && evs[i].state != MRC_EV_DENIED)
                rc = mrc_ev_set_state(c, qpn, evs[i].ev, MRC_EV_DENIED);
        }
    }
    free(evs);
    return rc;
}

/* Host h's number for host g (a context knows MRC_MAX_PEERS peers, numbered
 * as it met them, as mrc_ctx_add_peer numbers them): -ENOSPC past that. */
static int local_peer(struct mrc_fab *f, uint32_t h, uint32_t g)
{
    struct fhost *x = &f->hosts[h];
    if (x->g2l[g] != 0xFFFF)
        return x->g2l[g];
    if (x->npeers == MRC_MAX_PEERS)
        return -ENOSPC;
    x->l2g[x->npeers] = (uint16_t)g;
    x->g2l[g] = (uint16_t)x->npeers;
    return (int)x->npeers++;
}

int mrc_fab_add_flow(struct mrc_fab *f, const struct mrc_fab_flow *fl)
{
    if (fl->src >= f->c.hosts || fl->dst >= f->c.hosts || fl->src == fl->dst || !fl->bytes || !fl->msg ||
        fl->msg > FAB_MEM || !fl->depth || fl->start_ns > PS_INF / 1000 - 1) /* as mrc_fab_link_at */
        return -EINVAL;
    if (f->nflows == f->flows_cap) {
        uint32_t cap = f->flows_cap ? 2 * f->flows_cap : 1024;
        struct fflow *nf = realloc(f->flows, cap * sizeof(*nf));
        if (!nf)
            return -ENOMEM;
        f->flows = nf;
        f->flows_cap = cap;
    }
    struct fhost *s = &f->hosts[fl->src], *d = &f->hosts[fl->dst];
    struct fflow *x = &f->flows[f->nflows];
    memset(x, 0, sizeof(*x));
    x->c = *fl;
    if (f->c.transport == MRC_FAB_ROCE) {
        f->nflows++; /* counted now: roce_free frees what roce_add_flow made of it, even in part */
        int rc = roce_add_flow(f, x);
        rc = rc < 0 ? rc : fab_push(f, fl->start_ns * 1000, EVT_FLOW, f->nflows - 1);
        if (rc < 0) {
            roce_free_flow(x);
            f->nflows--;
            return rc;
        }
        return (int)f->nflows - 1;
    }
    int rc = mrc_qp_create(s->ctx, &f->qa, &x->qpn);
    rc = rc < 0 ? rc : mrc_qp_create(d->ctx, &f->qa, &x->dqpn);
    int ps = local_peer(f, fl->src, fl->dst), pd = local_peer(f, fl->dst, fl->src);
    rc = rc < 0 ? rc : ps < 0 ? ps : pd < 0 ? pd : 0;
    rc = rc < 0 ? rc : connect_qp(s->ctx, x->qpn, x->dqpn, (uint32_t)ps, f->c.spines, f->qa.planes);
    rc = rc < 0 ? rc : connect_qp(d->ctx, x->dqpn, x->qpn, (uint32_t)pd, f->c.spines, f->qa.planes);
    rc = rc < 0 || !fl->single_path ? rc : single_path(f, s->ctx, x->qpn, f->nflows);
    if (rc < 0)
        return rc;
    rc = fab_push(f, fl->start_ns * 1000, EVT_FLOW, f->nflows);
    return rc < 0 ? rc : (int)f->nflows++;
}

int mrc_fab_flow_msgs(struct mrc_fab *f, uint32_t flow, uint32_t n, const uint32_t *lens, const int32_t *dep_flow,
                      const uint32_t *dep_msg)
{
    if (flow >= f->nflows || !n || f->flows[flow].lens || f->flows[flow].seq || f->flows[flow].c.depth > f->qa.rq_depth)
        return -EINVAL; /* every WRITE_IMM in flight needs a receive posted */
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!lens[i] || lens[i] > FAB_MEM || dep_flow[i] >= (int32_t)f->nflows ||
            (dep_flow[i] >= 0 && dep_msg[i] >= UINT32_MAX))
            return -EINVAL;
        bytes += lens[i];
    }
    struct fflow *x = &f->flows[flow];
    x->lens = malloc(n * sizeof(*x->lens));
    x->dep_msg = malloc(n * sizeof(*x->dep_msg));
    x->dep_flow = malloc(n * sizeof(*x->dep_flow));
    if (!x->lens || !x->dep_msg || !x->dep_flow)
        return -ENOMEM;
    memcpy(x->lens, lens, n * sizeof(*lens));
    memcpy(x->dep_msg, dep_msg, n * sizeof(*dep_msg));
    memcpy(x->dep_flow, dep_flow, n * sizeof(*dep_flow));
    x->nmsgs = n;
    x->c.bytes = bytes;
    for (uint32_t i = 0; i < x->c.depth && f->c.transport == MRC_FAB_MRC; i++) { /* the receiver's slots */
        uint64_t id = (uint64_t)flow << 32 | 0xFFFFFFFFu;
        if (mrc_post_recv(f->hosts[x->c.dst].ctx, x->dqpn, &id, 1) != 1)
            return -ENOSPC;
    }
    for (uint32_t i = 0; i < n; i++) { /* tell each flow waited for that this one waits (once) */
        if (dep_flow[i] < 0)
            continue;
        struct fflow *g = &f->flows[dep_flow[i]];
        if (g->ndependents && g->dependents[g->ndependents - 1] == flow)
            continue;
        uint32_t *nd = realloc(g->dependents, (g->ndependents + 1) * sizeof(*nd));
        if (!nd)
            return -ENOMEM;
        g->dependents = nd;
        g->dependents[g->ndependents++] = flow;
    }
    return 0;
}

int mrc_fab_create(const struct mrc_fab_cfg *cfg, const struct mrc_qp_attr *qp, struct mrc_fab **out)
{
    const struct mrc_fab_cfg *c = cfg;
    if (!c->hosts || c->hosts > MRC_FAB_MAX_HOSTS || c->hosts < 2 || !c->planes || c->planes > MRC_MAX_PLANES ||
        !c->leaves || c->leaves > 256 || c->leaves > c->hosts || !c->spines || c->spines > 256 ||
        c->rate_bps < 1000000 || c->rate_bps > 8000000000000ull || !c->bucket_ns || qp->planes > c->planes ||
        qp->mtu > MRC_MAX_MTU || c->unpaced > 1 ||
        (c->hosts + c->leaves - 1) / c->leaves > MRC_FAB_LEAF_HOSTS || roce_check_cfg(c, qp->mtu) < 0 ||
        (c->pfc_xoff && (c->transport != MRC_FAB_ROCE || c->pfc_xon > c->pfc_xoff)))
        return -EINVAL;
    struct mrc_fab *f = calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    f->c = *c;
    f->qa = *qp;
    f->post_more = c->transport == MRC_FAB_ROCE ? roce_post_more : fab_mrc_post_more;
    f->ppb = 8000000000000ull / c->rate_bps;
    f->slot = qp->mtu + 256;
    f->nlinks = c->planes * c->hosts + c->planes * c->leaves * c->spines;
    if (c->pfc_xoff && 2ull * f->nlinks >= PFC_MAX_PORTS) { /* a PFC event names its port in 22 bits */
        free(f);
        return -EINVAL;
    }
    f->hosts = calloc(c->hosts, sizeof(*f->hosts));
    f->ports = calloc((size_t)f->nlinks * 2, sizeof(*f->ports));
    f->hpos = malloc(c->hosts * sizeof(*f->hpos));
    f->link_changed = calloc(f->nlinks, sizeof(*f->link_changed));
    /* a packet's event is at most a frame's wire time and a hop ahead; some
     * two buckets a port */
    uint32_t nb = 64;
    while (nb < 4 * (uint64_t)f->nlinks && nb < (1u << 24))
        nb *= 2;
    int qrc = evq_init(&f->q, 1 << 16, f->hpos, EVT_WAKE);
    qrc = qrc < 0 ? qrc : evcal_init(&f->cal, (f->slot + WIRE_EXTRA) * f->ppb + c->hop_ns * 1000 + 1, nb);
    f->txbuf = malloc(FAB_TXBUF);
    f->rxbuf = calloc(1, f->slot);
    f->mem = calloc(1, FAB_MEM);
    if (!f->hosts || !f->ports || !f->hpos || !f->link_changed || qrc < 0 || !f->txbuf || !f->rxbuf || !f->mem) {
        mrc_fab_destroy(f);
        return -ENOMEM;
    }
    for (uint32_t h = 0; h < c->hosts; h++) {
        struct mrc_ep_attr ea = {.max_qps = c->max_qps, .cq_depth = c->cq_depth, .planes = c->planes,
                                 .port_bitmap = (uint32_t)((1ull << c->planes) - 1),
                                 .seed = c->seed * 1000003ull + h + 1};
        struct fhost *x = &f->hosts[h];
        x->wake = PS_INF;
        f->hpos[h] = EVQ_NOWHERE;
        if (c->transport == MRC_FAB_ROCE) /* the RoCE model at the NIC (simfab_roce.c): no context */
            continue;
        int rc = mrc_ctx_create(&ea, NULL, 0, &x->ctx);
        rc = rc < 0 ? rc : mrc_mr_reg(x->ctx, 0, f->mem, FAB_MEM, MRC_ACCESS_LOCAL_WRITE | MRC_ACCESS_REMOTE_WRITE,
                                      &x->lkey, &x->rkey);
        if (rc < 0) {
            mrc_fab_destroy(f);
            return rc;
        }
        x->ep = mrc_ctx_ep(x->ctx);
        /* A NIC sends on a port only when the port is free, as the engine's
         * pacing does: a packet takes a free port's plane. Unpaced, the
         * engine fills one queue of the NIC's ports in rotation order, and
         * the planes' ports go busy and idle at random (all-to-all, 64 NICs:
         * 0.41 of line rate, 0.78 paced). */
        for (uint32_t p = 0; p < c->planes && !c->unpaced; p++)
            rc = rc < 0 ? rc : mrc_ep_set_port_rate(x->ep, p, c->rate_bps);
        if (rc < 0) {
            mrc_fab_destroy(f);
            return rc;
        }
        x->g2l = malloc(c->hosts * sizeof(*x->g2l));
        if (!x->g2l) {
            mrc_fab_destroy(f);
            return -ENOMEM;
        }
        memset(x->g2l, 0xFF, c->hosts * sizeof(*x->g2l));
    }
    *out = f;
    return 0;
}

int mrc_fab_set_checks(struct mrc_fab *f, const struct mrc_fab_checks *k)
{
    if (k->check_times > 1 || k->fill > 255 || k->heap_only > 1)
        return -EINVAL;
    if (f->ran)
        return -EBUSY;
    f->k = *k;
    memset(f->mem, (int)k->fill, FAB_MEM);
    return 0;
}

void mrc_fab_destroy(struct mrc_fab *f)
{
    if (!f)
        return;
    for (uint64_t i = 0; f->ports && i < (uint64_t)f->nlinks * 2; i++) { /* in flight: in their FIFOs, held */
        for (struct fpkt **l = &f->ports[i].head; l; l = l == &f->ports[i].head ? &f->ports[i].hhead : NULL)
            while (*l) {
                struct fpkt *k = *l;
                *l = k->next;
                free(k->big);
                free(k);
            }
    }
    while (f->freel) {
        struct fpkt *k = f->freel;
        f->freel = k->next;
        free(k->big);
        free(k);
    }
    for (uint32_t h = 0; f->hosts && h < f->c.hosts; h++) {
        if (f->hosts[h].ctx)
            mrc_ctx_destroy(f->hosts[h].ctx);
        free(f->hosts[h].g2l);
    }
    roce_free(f);
    free(f->link_changed);
    for (uint32_t i = 0; f->flows && i < f->nflows; i++) {
        free(f->flows[i].lens);
        free(f->flows[i].dep_msg);
        free(f->flows[i].dep_flow);
        free(f->flows[i].dependents);
    }
    free(f->hosts);
    free(f->ports);
    evq_free(&f->q);
    evcal_free(&f->cal);
    free(f->hpos);
    free(f->txbuf);
    free(f->rxbuf);
    free(f->mem);
    free(f->flows);
    free(f->series);
    free(f);
}

int mrc_fab_stats(struct mrc_fab *f, struct mrc_fab_stats *st)
{
    *st = f->st;
    st->now_ns = f->now / 1000, st->buckets = f->series_len;
    st->event_bytes = f->q.cap * sizeof(*f->q.e) + evcal_bytes(&f->cal);
    uint64_t per_host = sizeof(*f->hosts) + sizeof(*f->hpos) + f->c.hosts * sizeof(*f->hosts->g2l);
    st->table_bytes = (uint64_t)f->nlinks * 2 * sizeof(*f->ports) + FAB_MEM + f->c.hosts * per_host;
    return 0;
}

int mrc_fab_flow_stats(struct mrc_fab *f, uint32_t flow, struct mrc_fab_flow_stats *st, struct mrc_qp_stats *qp)
{
    if (flow >= f->nflows)
        return -EINVAL;
    const struct fflow *x = &f->flows[flow];
    *st = (struct mrc_fab_flow_stats){.src = x->c.src, .dst = x->c.dst, .qpn = x->qpn, .errors = x->errors,
                                      .bytes = x->c.bytes, .done = x->done, .msgs = x->msgs,
                                      .start_ns = x->c.start_ns, .end_ns = x->end / 1000, .first_ns = x->first / 1000,
                                      .max_gap_ns = x->max_gap / 1000, .max_gap_end_ns = x->max_gap_end / 1000,
                                      .arrived = x->arrived, .arrived_ns = x->arrived_at / 1000};
    if (qp && x->r)
        roce_flow_stats(f, x, qp);
    return qp && !x->r ? mrc_qp_query(f->hosts[x->c.src].ctx, x->qpn, qp) : 0;
}

int64_t mrc_fab_series(struct mrc_fab *f, uint64_t *out, uint64_t max)
{
    uint64_t n = f->series_len * (1 + f->c.planes);
    if (out && n && max) /* a run with no flows has no series (f->series NULL) */
        memcpy(out, f->series, (n < max ? n : max) * sizeof(*out));
    return (int64_t)n;
}
