/* A bottleneck line for the RoCE model alone (mrc_sim.h, mrc_roce_line_*):
 * senders whose QPs (roce.c) write to one receiver through one switch
 * egress port, in virtual time. It checks the model against hand-built cases
 * (go-back-N's resends, DCQCN's rates, PFC's pause) and the published
 * single-bottleneck figures, apart from the fabric.
 *
 * Events: a sender's wake (kind 0, idx the sender; idx senders: a rate
 * sample) and a packet's next step (kind 1, idx its slot), the packet's
 * stage saying which: at the switch, leaving it, at the receiver, a reply
 * or a pause frame at its sender.
 *
 * Lock: none; one caller drives a line. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mrc_sim.h"
#include "sim/evheap.h"

enum { EV_WAKE = 0, EV_PKT = 1 };
enum { AT_SWITCH, LEAVES_SWITCH, AT_RECEIVER, REPLY, PAUSE };

struct lpkt {
    uint32_t sender, stage, bytes, last, ce, next_free;
    uint64_t psn;
    int32_t pause;               /* PAUSE: 1 pause, -1 resume */
    struct mrc_roce_reply r;
};

struct lsender {
    struct mrc_roce_qp q;
    struct mrc_roce_resp r;
    struct mrc_roce_pfc pfc;
    struct mrc_roce_line_flow fl;
    uint64_t posted, wake_at, paused_since;
    uint32_t paused, has_flow;
};

struct mrc_roce_line {
    struct mrc_roce_line_cfg c;
    struct lsender s[MRC_ROCE_LINE_SENDERS];
    struct mrc_roce_line_drop drops[MRC_ROCE_LINE_DROPS];
    uint32_t ndrops, dropped_nth[MRC_ROCE_LINE_DROPS];
    struct evheap q;
    uint64_t now, seq, queue, port_free, rng;
    struct lpkt *pk;
    uint32_t npk, free_pk;
    struct mrc_roce_line_tx *trace;
    uint64_t ntrace;
    uint64_t *samples;
    uint64_t nsamples, samples_cap;
    struct mrc_roce_line_stats st;
    int err;
};

static uint64_t ser_ns(uint64_t bytes, uint64_t bps) { return (bytes * 8000000000ull + bps - 1) / bps; }

static uint64_t rnd(struct mrc_roce_line *l) /* splitmix64 */
{
    uint64_t z = (l->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void push(struct mrc_roce_line *l, uint64_t t, uint32_t kind, uint32_t idx)
{
    int rc = evq_push(&l->q, t, l->seq++, kind, idx);
    if (rc < 0 && !l->err)
        l->err = rc;
}

static struct lpkt *pkt_new(struct mrc_roce_line *l, uint32_t *idx)
{
    if (l->free_pk == UINT32_MAX) {
        uint32_t n = l->npk ? 2 * l->npk : 256;
        struct lpkt *p = realloc(l->pk, n * sizeof(*p));
        if (!p) {
            l->err = -ENOMEM;
            return NULL;
        }
        for (uint32_t i = l->npk; i < n; i++)
            p[i].next_free = i + 1 == n ? UINT32_MAX : i + 1;
        l->pk = p;
        l->free_pk = l->npk;
        l->npk = n;
    }
    *idx = l->free_pk;
    struct lpkt *p = &l->pk[*idx];
    l->free_pk = p->next_free;
    memset(p, 0, sizeof(*p));
    return p;
}

static void pkt_free(struct mrc_roce_line *l, uint32_t idx)
{
    l->pk[idx].next_free = l->free_pk;
    l->free_pk = idx;
}

int mrc_roce_line_create(const struct mrc_roce_line_cfg *cfg, struct mrc_roce_line **out)
{
    if (!cfg || !out || !cfg->senders || cfg->senders > MRC_ROCE_LINE_SENDERS || !cfg->port_bps ||
        cfg->kmin > cfg->kmax || cfg->pmax < 0 || cfg->pmax > 1 || cfg->pfc_xon > cfg->pfc_xoff)
        return -EINVAL;
    struct mrc_roce_line *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->c = *cfg;
    l->rng = cfg->seed;
    l->free_pk = UINT32_MAX;
    int rc = evq_init(&l->q, 1024, NULL, 0);
    for (uint32_t i = 0; !rc && i < cfg->senders; i++) {
        rc = mrc_roce_qp_init(&l->s[i].q, &cfg->qp);
        l->s[i].pfc = (struct mrc_roce_pfc){.xoff = cfg->pfc_xoff, .xon = cfg->pfc_xon};
        l->s[i].wake_at = UINT64_MAX;
    }
    if (!rc && cfg->trace_max && !(l->trace = calloc(cfg->trace_max, sizeof(*l->trace))))
        rc = -ENOMEM;
    if (rc) {
        mrc_roce_line_destroy(l);
        return rc;
    }
    if (cfg->sample_ns)
        push(l, 0, EV_WAKE, cfg->senders);
    *out = l;
    return 0;
}

void mrc_roce_line_destroy(struct mrc_roce_line *l)
{
    if (!l)
        return;
    evq_free(&l->q);
    free(l->pk);
    free(l->trace);
    free(l->samples);
    free(l);
}

static void wake(struct mrc_roce_line *l, uint32_t s, uint64_t t)
{
    if (t >= l->s[s].wake_at)
        return;
    l->s[s].wake_at = t;
    push(l, t, EV_WAKE, s);
}

int mrc_roce_line_flow(struct mrc_roce_line *l, uint32_t sender, const struct mrc_roce_line_flow *fl)
{
    if (sender >= l->c.senders || !fl->msg || !fl->depth || fl->depth > MRC_ROCE_MSGS || l->s[sender].has_flow)
        return -EINVAL;
    l->s[sender].fl = *fl;
    l->s[sender].has_flow = 1;
    wake(l, sender, fl->start_ns);
    return 0;
}

int mrc_roce_line_drop(struct mrc_roce_line *l, const struct mrc_roce_line_drop *d)
{
    if (l->ndrops == MRC_ROCE_LINE_DROPS || d->sender >= l->c.senders || !d->nth)
        return -EINVAL;
    l->drops[l->ndrops++] = *d;
    return 0;
}

/* Whether this transmission of psn is one the line was told to lose. */
static int lost(struct mrc_roce_line *l, uint32_t s, uint64_t psn)
{
    int hit = 0;
    for (uint32_t i = 0; i < l->ndrops; i++) /* each entry counts this PSN's transmissions */
        if (l->drops[i].sender == s && l->drops[i].psn == psn)
            hit |= ++l->dropped_nth[i] == l->drops[i].nth;
    return hit;
}

/* The application: more WRITEs as completions make room. */
static void post_more(struct mrc_roce_line *l, uint32_t i)
{
    struct lsender *s = &l->s[i];
    while (s->has_flow && s->posted < s->fl.bytes && s->q.nmsgs < s->fl.depth) {
        uint64_t n = s->fl.bytes - s->posted < s->fl.msg ? s->fl.bytes - s->posted : s->fl.msg;
        if (mrc_roce_post(&s->q, n) < 0)
            return;
        s->posted += n;
    }
    if (s->has_flow && !l->st.end_ns[i] && s->q.done_bytes == s->fl.bytes) {
        l->st.end_ns[i] = l->now;
        l->st.done++;
    }
}

static void send(struct mrc_roce_line *l, uint32_t i)
{
    struct lsender *s = &l->s[i];
    struct mrc_roce_tx tx;
    if (l->now < s->fl.start_ns)
        return;
    post_more(l, i);
    if (s->paused) { /* PFC holds the port; the retry timer still runs, as a NIC's does */
        if (mrc_roce_timers(&s->q, l->now) == 0 && s->q.rto_at)
            wake(l, i, s->q.rto_at);
        return;
    }
    while (mrc_roce_next_tx(&s->q, l->now, &tx) == 1) {
        if (l->ntrace < l->c.trace_max)
            l->trace[l->ntrace++] = (struct mrc_roce_line_tx){.t_ns = l->now, .psn = tx.psn, .sender = i,
                                                              .retx = tx.retx};
        if (lost(l, i, tx.psn)) {
            l->st.lost++;
            continue;
        }
        uint32_t k;
        struct lpkt *p = pkt_new(l, &k);
        if (!p)
            return;
        *p = (struct lpkt){.sender = i, .stage = AT_SWITCH, .bytes = tx.bytes + l->c.qp.wire_extra,
                           .last = tx.last, .psn = tx.psn};
        push(l, l->now + ser_ns(p->bytes, l->c.qp.line_bps) + l->c.hop_ns, EV_PKT, k);
    }
    wake(l, i, mrc_roce_next_event(&s->q));
}

/* RED between kmin and kmax, certain above kmax. */
static int mark(struct mrc_roce_line *l)
{
    if (!l->c.kmax || l->queue <= l->c.kmin)
        return 0;
    if (l->queue > l->c.kmax)
        return 1;
    double p = l->c.pmax * (double)(l->queue - l->c.kmin) / (double)(l->c.kmax - l->c.kmin);
    return (double)(rnd(l) >> 11) * (1.0 / 9007199254740992.0) < p;
}

static void pause_frame(struct mrc_roce_line *l, uint32_t s, int32_t what)
{
    uint32_t k;
    struct lpkt *p = pkt_new(l, &k);
    if (!p)
        return;
    *p = (struct lpkt){.sender = s, .stage = PAUSE, .pause = what};
    what > 0 ? l->st.pauses++ : l->st.resumes++;
    push(l, l->now + l->c.hop_ns, EV_PKT, k);
}

static void at_switch(struct mrc_roce_line *l, struct lpkt *p, uint32_t k)
{
    if (l->c.buffer_bytes && l->queue + p->bytes > l->c.buffer_bytes) {
        l->st.dropped++;
        pkt_free(l, k);
        return;
    }
    if (mark(l)) {
        p->ce = 1;
        l->st.marked++;
    }
    l->queue += p->bytes;
    if (l->queue > l->st.max_queue)
        l->st.max_queue = l->queue;
    if (l->c.pfc_xoff && mrc_roce_pfc_add(&l->s[p->sender].pfc, p->bytes) == 1)
        pause_frame(l, p->sender, 1);
    l->port_free = (l->port_free > l->now ? l->port_free : l->now) + ser_ns(p->bytes, l->c.port_bps);
    p->stage = LEAVES_SWITCH;
    push(l, l->port_free, EV_PKT, k);
}

static void at_receiver(struct mrc_roce_line *l, struct lpkt *p, uint32_t k)
{
    struct lsender *s = &l->s[p->sender];
    struct mrc_roce_reply r;
    l->st.delivered++;
    mrc_roce_resp_rx(&s->r, &l->c.qp, p->psn, p->last, p->ce, l->now, &r);
    if (r.kind == MRC_ROCE_NONE && !r.cnp) {
        pkt_free(l, k);
        return;
    }
    p->stage = REPLY;
    p->r = r;
    push(l, l->now + 2 * l->c.hop_ns, EV_PKT, k);
}

static void packet_step(struct mrc_roce_line *l, uint32_t k)
{
    struct lpkt *p = &l->pk[k];
    struct lsender *s = &l->s[p->sender];
    switch (p->stage) {
    case AT_SWITCH:
        at_switch(l, p, k);
        return;
    case LEAVES_SWITCH:
        l->queue -= p->bytes;
        if (l->c.pfc_xoff && mrc_roce_pfc_add(&s->pfc, -(int64_t)p->bytes) == -1)
            pause_frame(l, p->sender, -1);
        p->stage = AT_RECEIVER;
        push(l, l->now + l->c.hop_ns, EV_PKT, k);
        return;
    case AT_RECEIVER:
        at_receiver(l, p, k);
        return;
    case REPLY:
        if (p->r.cnp)
            mrc_roce_on_cnp(&s->q, l->now);
        mrc_roce_on_reply(&s->q, &p->r, l->now);
        break;
    case PAUSE:
        if (p->pause > 0 && !s->paused) {
            s->paused = 1;
            s->paused_since = l->now;
        } else if (p->pause < 0 && s->paused) {
            s->paused = 0;
            l->st.paused_ns[p->sender] += l->now - s->paused_since;
        }
        break;
    }
    uint32_t i = p->sender;
    pkt_free(l, k);
    send(l, i);
}

static void sample(struct mrc_roce_line *l)
{
    uint32_t n = 2 * l->c.senders;
    if (l->nsamples + n > l->samples_cap) {
        uint64_t cap = l->samples_cap ? 2 * l->samples_cap : 1024;
        uint64_t *v = realloc(l->samples, cap * sizeof(*v));
        if (!v) {
            l->err = -ENOMEM;
            return;
        }
        l->samples = v;
        l->samples_cap = cap;
    }
    for (uint32_t i = 0; i < l->c.senders; i++) {
        l->samples[l->nsamples++] = (uint64_t)l->s[i].q.rc;
        l->samples[l->nsamples++] = l->s[i].q.done_bytes;
    }
    push(l, l->now + l->c.sample_ns, EV_WAKE, l->c.senders);
}

static int flows_left(const struct mrc_roce_line *l)
{
    uint32_t want = 0;
    for (uint32_t i = 0; i < l->c.senders; i++)
        want += l->s[i].has_flow && l->s[i].q.state != MRC_ROCE_ERROR;
    return l->st.done < want;
}

int mrc_roce_line_run(struct mrc_roce_line *l, uint64_t until_ns)
{
    while (!l->err && flows_left(l) && l->q.n && l->q.e[0].t <= until_ns) {
        struct fev e = evq_pop(&l->q);
        l->now = e.t;
        l->st.events++;
        uint32_t i = fev_idx(&e);
        if (fev_kind(&e) == EV_PKT) {
            packet_step(l, i);
        } else if (i == l->c.senders) {
            sample(l);
        } else if (l->s[i].wake_at == e.t) {
            l->s[i].wake_at = UINT64_MAX;
            send(l, i);
        }
    }
    if (l->err)
        return l->err;
    if (!flows_left(l))
        return 1;
    if (l->q.n && l->now < until_ns)
        l->now = until_ns;
    return 0;
}

int mrc_roce_line_stats(struct mrc_roce_line *l, struct mrc_roce_line_stats *st)
{
    *st = l->st;
    st->now_ns = l->now;
    for (uint32_t i = 0; i < l->c.senders; i++)
        if (l->s[i].paused)
            st->paused_ns[i] += l->now - l->s[i].paused_since;
    return 0;
}

int mrc_roce_line_qp(struct mrc_roce_line *l, uint32_t sender, struct mrc_roce_qp *q, struct mrc_roce_resp *r)
{
    if (sender >= l->c.senders)
        return -EINVAL;
    *q = l->s[sender].q;
    *r = l->s[sender].r;
    return 0;
}

int64_t mrc_roce_line_trace(struct mrc_roce_line *l, struct mrc_roce_line_tx *out, uint64_t max)
{
    uint64_t n = l->ntrace < max ? l->ntrace : max;
    if (n)
        memcpy(out, l->trace, n * sizeof(*out));
    return (int64_t)n;
}

int64_t mrc_roce_line_samples(struct mrc_roce_line *l, uint64_t *out, uint64_t max)
{
    uint64_t n = l->nsamples < max ? l->nsamples : max;
    if (n)
        memcpy(out, l->samples, n * sizeof(*out));
    return (int64_t)n;
}
