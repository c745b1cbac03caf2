/* The RoCEv2 model (mrc_sim.h, docs/sim.md "RoCEv2"): what MRC is measured
 * against, in the simulator's terms. One RC queue pair as a RoCEv2 NIC runs
 * it: messages go as packets of mtu bytes in PSN order at the rate DCQCN
 * allows; the responder takes them in order only, ACKs every ack_every and
 * each message's last, and answers the first packet past a gap with one NAK
 * (sequence error) until the gap closes; the requester goes back to the NAK's
 * PSN (go-back-N), or to its oldest unacknowledged PSN when the local ACK
 * timer (4.096 us << timeout) expires, each retry counted against retry_cnt
 * (a NAK does not start a second retry while one runs, as Linux's rxe does);
 * an ACK that moves forward gives the retries back; none left: ERROR.
 * DCQCN's reaction point (Zhu et al., SIGCOMM 2015): on a CNP, Rt = Rc,
 * Rc *= 1 - alpha/2, alpha = (1 - g) alpha + g; without one for alpha_ns,
 * alpha *= 1 - g; each expiry of the rate timer and each byte_b bytes sent
 * is a step up: fast recovery (Rc = (Rt + Rc) / 2) while both counts are
 * below F, hyper increase (Rt += i R_HAI) once both are above, additive
 * increase (Rt += R_AI) between. The notification point sends a QP at most
 * one CNP per cnp_ns. The timers run when next_tx looks (a sender that is
 * not sending needs no rate), so no event is spent on them.
 *
 * Lock: none; each object is its caller's. */
#include <errno.h>
#include <string.h>

#include "mrc_sim.h"
#include "mrc_wire.h"

enum { MAX_TIMEOUT = 31, MAX_RETRY = 7 };
#define NS_PER_TIMEOUT_UNIT 4096 /* verbs' timeout unit: 4.096 us */

static void defaults(struct mrc_roce_cfg *c)
{
    if (!c->ack_every)
        c->ack_every = 1;
    if (c->g <= 0)
        c->g = 1.0 / 256;
    if (!c->alpha_ns)
        c->alpha_ns = 55000;
    if (!c->timer_ns)
        c->timer_ns = 55000;
    if (!c->byte_b)
        c->byte_b = 10000000;
    if (!c->f)
        c->f = 5;
    if (!c->rai_bps)
        c->rai_bps = 40000000;
    if (!c->rhai_bps)
        c->rhai_bps = 400000000;
    if (!c->min_bps)
        c->min_bps = c->line_bps / 1000 ? c->line_bps / 1000 : 1;
    if (!c->cnp_ns)
        c->cnp_ns = 50000;
}

int mrc_roce_qp_init(struct mrc_roce_qp *q, const struct mrc_roce_cfg *c)
{
    if (!q || !c || !c->line_bps || !c->mtu || !c->timeout || c->timeout > MAX_TIMEOUT || c->retry_cnt > MAX_RETRY ||
        c->dcqcn > 1 || c->g >= 1)
        return -EINVAL;
    memset(q, 0, sizeof(*q));
    q->c = *c;
    defaults(&q->c);
    if (q->c.min_bps > q->c.line_bps)
        return -EINVAL;
    q->retries = c->retry_cnt;
    q->rc = q->rt = (double)c->line_bps;
    q->alpha = 1.0;
    q->stage = MRC_ROCE_LINE;
    return 0;
}

static uint64_t rto_ns(const struct mrc_roce_qp *q) { return (uint64_t)NS_PER_TIMEOUT_UNIT << q->c.timeout; }

int mrc_roce_post(struct mrc_roce_qp *q, uint64_t bytes)
{
    if (q->state == MRC_ROCE_ERROR)
        return -EIO;
    if (q->nmsgs == MRC_ROCE_MSGS)
        return -ENOSPC;
    uint64_t n = bytes ? (bytes + q->c.mtu - 1) / q->c.mtu : 1;
    uint32_t i = (q->head + q->nmsgs++) % MRC_ROCE_MSGS;
    q->end += n;
    q->msg_end[i] = q->end;
    q->msg_tail[i] = (uint32_t)(bytes - (n - 1) * q->c.mtu);
    return 0;
}

/* The payload bytes of packet psn (in flight: una <= psn < end) and whether it ends its message. */
static uint32_t packet_bytes(const struct mrc_roce_qp *q, uint64_t psn, uint32_t *last)
{
    for (uint32_t k = 0; k < q->nmsgs; k++) {
        uint32_t i = (q->head + k) % MRC_ROCE_MSGS;
        if (psn < q->msg_end[i]) {
            *last = psn + 1 == q->msg_end[i];
            return *last ? q->msg_tail[i] : q->c.mtu;
        }
    }
    *last = 1;
    return 0;
}

static void fail(struct mrc_roce_qp *q, uint64_t now)
{
    q->state = MRC_ROCE_ERROR;
    q->error_at = now;
    q->rto_at = 0;
}

/* Go back to psn for a retry (a NAK's or the timer's); none left: ERROR. */
static void retry(struct mrc_roce_qp *q, uint64_t psn, uint64_t now)
{
    if (!q->retries) {
        fail(q, now);
        return;
    }
    q->retries--;
    q->in_retry = 1;
    q->nxt = psn;
    q->rto_at = now + rto_ns(q);
}

/* ------------------------------------------------------------------ DCQCN */
static void clamp(struct mrc_roce_qp *q)
{
    double line = (double)q->c.line_bps, lo = (double)q->c.min_bps;
    q->rt = q->rt > line ? line : q->rt;
    q->rc = q->rc > line ? line : (q->rc < lo ? lo : q->rc);
}

/* One step up: a timer expiry or byte_b bytes sent since the last decrease's counters were reset. */
static void increase(struct mrc_roce_qp *q)
{
    uint32_t lo = q->t_count < q->bc_count ? q->t_count : q->bc_count;
    uint32_t hi = q->t_count < q->bc_count ? q->bc_count : q->t_count;
    if (hi < q->c.f) {
        q->stage = MRC_ROCE_FAST_RECOVERY;
    } else if (lo > q->c.f) {
        q->stage = MRC_ROCE_HYPER;
        q->rt += (double)(lo - q->c.f) * (double)q->c.rhai_bps;
    } else {
        q->stage = MRC_ROCE_ADDITIVE;
        q->rt += (double)q->c.rai_bps;
    }
    clamp(q); /* the target first: the rate never averages toward more than the line */
    q->rc = (q->rt + q->rc) / 2;
    clamp(q);
    if (q->rc >= (double)q->c.line_bps) /* back at line rate: nothing to recover, no timer */
        q->stage = MRC_ROCE_LINE;
}

/* The decays and timer steps due by now (alpha decays at line rate too, until it is negligible). */
static void dcqcn_catch_up(struct mrc_roce_qp *q, uint64_t now)
{
    while (q->alpha_at && q->alpha_at <= now) {
        q->alpha *= 1 - q->c.g;
        q->alpha_at = q->alpha < 1e-6 ? 0 : q->alpha_at + q->c.alpha_ns;
    }
    while (q->stage != MRC_ROCE_LINE && q->timer_at <= now) {
        q->timer_at += q->c.timer_ns;
        q->t_count++;
        increase(q);
    }
}

void mrc_roce_on_cnp(struct mrc_roce_qp *q, uint64_t now)
{
    q->cnps++;
    if (!q->c.dcqcn || q->state == MRC_ROCE_ERROR)
        return;
    dcqcn_catch_up(q, now);
    q->rt = q->rc;
    q->rc *= 1 - q->alpha / 2;
    q->alpha = (1 - q->c.g) * q->alpha + q->c.g;
    clamp(q);
    q->decreases++;
    q->t_count = q->bc_count = 0;
    q->bytes = 0;
    q->alpha_at = now + q->c.alpha_ns;
    q->timer_at = now + q->c.timer_ns;
    q->stage = MRC_ROCE_FAST_RECOVERY;
}

/* ------------------------------------------------------------------ send */
int mrc_roce_timers(struct mrc_roce_qp *q, uint64_t now)
{
    if (q->state == MRC_ROCE_ERROR)
        return -EIO;
    if (q->rto_at && q->rto_at <= now) {
        q->timeouts++;
        retry(q, q->una, now);
        if (q->state == MRC_ROCE_ERROR)
            return -EIO;
    }
    if (q->c.dcqcn)
        dcqcn_catch_up(q, now);
    return 0;
}

int mrc_roce_next_tx(struct mrc_roce_qp *q, uint64_t now, struct mrc_roce_tx *out)
{
    if (mrc_roce_timers(q, now) < 0)
        return -EIO;
    if (q->nxt >= q->end || now < q->next_tx)
        return 0;
    out->psn = q->nxt;
    out->bytes = packet_bytes(q, q->nxt, &out->last);
    out->retx = q->nxt < q->high;
    q->nxt++;
    if (q->nxt > q->high)
        q->high = q->nxt;
    q->sent++;
    q->resent += out->retx;
    uint64_t wire = (uint64_t)out->bytes + q->c.wire_extra;
    q->next_tx = now + (uint64_t)((double)wire * 8e9 / q->rc + 0.5);
    if (!q->rto_at)
        q->rto_at = now + rto_ns(q);
    if (q->c.dcqcn && q->stage != MRC_ROCE_LINE && (q->bytes += wire) >= q->c.byte_b) {
        q->bytes -= q->c.byte_b;
        q->bc_count++;
        increase(q);
    }
    return 1;
}

uint64_t mrc_roce_next_event(const struct mrc_roce_qp *q)
{
    if (q->state == MRC_ROCE_ERROR)
        return UINT64_MAX;
    uint64_t t = q->nxt < q->end ? q->next_tx : UINT64_MAX;
    if (q->rto_at && q->rto_at < t)
        t = q->rto_at;
    return t;
}

/* Everything through psn arrived: move una, complete messages, rearm the timer. */
static void acked(struct mrc_roce_qp *q, uint64_t psn, uint64_t now)
{
    if (psn + 1 <= q->una || psn >= q->high)
        return; /* old, or for a PSN never sent: nothing */
    q->una = psn + 1;
    q->retries = q->c.retry_cnt;
    q->in_retry = 0;
    if (q->nxt < q->una)
        q->nxt = q->una;
    while (q->nmsgs && q->msg_end[q->head] <= q->una) {
        q->done_bytes += (q->msg_end[q->head] - q->done_end - 1) * q->c.mtu + q->msg_tail[q->head];
        q->done_end = q->msg_end[q->head];
        q->done_msgs++;
        q->head = (q->head + 1) % MRC_ROCE_MSGS;
        q->nmsgs--;
    }
    q->rto_at = q->una < q->high ? now + rto_ns(q) : 0;
}

void mrc_roce_on_reply(struct mrc_roce_qp *q, const struct mrc_roce_reply *r, uint64_t now)
{
    if (q->state == MRC_ROCE_ERROR)
        return;
    if (r->kind == MRC_ROCE_ACK) {
        acked(q, r->psn, now);
    } else if (r->kind == MRC_ROCE_NAK) {
        q->naks++;
        if (r->psn > q->una)
            acked(q, r->psn - 1, now);
        if (!q->in_retry && r->psn >= q->una && r->psn < q->high)
            retry(q, r->psn, now);
    }
}

/* ------------------------------------------------------------------ receive */
int mrc_roce_resp_rx(struct mrc_roce_resp *r, const struct mrc_roce_cfg *c, uint64_t psn, uint32_t last, uint32_t ce,
                     uint64_t now, struct mrc_roce_reply *out)
{
    *out = (struct mrc_roce_reply){.kind = MRC_ROCE_NONE};
    if (ce && now >= r->cnp_at) {
        out->cnp = 1;
        r->cnps++;
        r->cnp_at = now + (c->cnp_ns ? c->cnp_ns : 50000);
    }
    if (psn == r->epsn) {
        r->epsn++;
        r->taken++;
        r->nak_sent = 0;
        if (++r->since_ack >= (c->ack_every ? c->ack_every : 1) || last) {
            *out = (struct mrc_roce_reply){.kind = MRC_ROCE_ACK, .cnp = out->cnp, .psn = psn};
            r->since_ack = 0;
            r->acks++;
        }
        return 1;
    }
    if (psn < r->epsn) { /* a duplicate (a go-back resent it): say again how far it got */
        r->dups++;
        *out = (struct mrc_roce_reply){.kind = MRC_ROCE_ACK, .cnp = out->cnp, .psn = r->epsn - 1};
        r->acks++;
        return 0;
    }
    r->out_of_order++;
    if (!r->nak_sent) {
        *out = (struct mrc_roce_reply){.kind = MRC_ROCE_NAK, .cnp = out->cnp, .psn = r->epsn};
        r->nak_sent = 1;
        r->naks++;
    }
    return 0;
}

/* ------------------------------------------------------------------ the fabric's parts */
uint32_t mrc_roce_ecmp_hash(uint32_t seed, const uint8_t *src16, const uint8_t *dst16, uint16_t sport, uint16_t dport)
{
    uint8_t t[16 + 16 + 1 + 4];
    memcpy(t, src16, 16);
    memcpy(t + 16, dst16, 16);
    t[32] = 17; /* UDP */
    t[33] = (uint8_t)(sport >> 8);
    t[34] = (uint8_t)sport;
    t[35] = (uint8_t)(dport >> 8);
    t[36] = (uint8_t)dport;
    return mrc_crc32c(seed, t, sizeof(t));
}

int mrc_roce_group_init(struct mrc_roce_group *g, uint32_t n, uint64_t delay_ns)
{
    if (!g || !n || n > MRC_ROCE_GROUP_MAX)
        return -EINVAL;
    memset(g, 0, sizeof(*g));
    g->n = n;
    g->delay_ns = delay_ns;
    for (uint32_t i = 0; i < n; i++) {
        g->up[i] = 1;
        g->changed_at[i] = UINT64_MAX;
    }
    return 0;
}

void mrc_roce_group_set(struct mrc_roce_group *g, uint32_t member, uint32_t up, uint64_t now)
{
    if (member >= g->n || g->up[member] == !!up)
        return;
    g->up[member] = !!up;
    g->changed_at[member] = now;
}

/* Whether routing has member in its table at now: its state delay_ns ago (the last change only). */
static int routed(const struct mrc_roce_group *g, uint32_t m, uint64_t now)
{
    uint64_t t = g->changed_at[m];
    return t == UINT64_MAX || now >= t + g->delay_ns ? g->up[m] : !g->up[m];
}

int mrc_roce_group_pick(const struct mrc_roce_group *g, uint32_t hash, uint64_t now)
{
    uint32_t live[MRC_ROCE_GROUP_MAX], n = 0;
    for (uint32_t i = 0; i < g->n; i++)
        if (routed(g, i, now))
            live[n++] = i;
    return n ? (int)live[hash % n] : -1;
}

int mrc_roce_pfc_add(struct mrc_roce_pfc *p, int64_t delta)
{
    p->bytes = delta < 0 && (uint64_t)-delta > p->bytes ? 0 : p->bytes + (uint64_t)delta;
    if (!p->paused && p->bytes > p->xoff) {
        p->paused = 1;
        p->pauses++;
        return 1;
    }
    if (p->paused && p->bytes <= p->xon) {
        p->paused = 0;
        return -1;
    }
    return 0;
}
