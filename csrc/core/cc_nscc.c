/* Congestion control behind a small ops table (protocol.md section 5).
 * NSCC: a window driven by delay (rtt - base_rtt) and ECN, with quick adapt.
 * Fixed: the window stays at max_cwnd (for tests and baselines). */
#include "core/cc_nscc.h"

static uint64_t clamp_cwnd(const struct qp *q, double w)
{
    double lo = q->a.mtu, hi = (double)q->a.cc.max_cwnd;
    return (uint64_t)(w < lo ? lo : w > hi ? hi : w);
}

static void nscc_init(struct qp *q)
{
    memset(&q->ccs, 0, sizeof(q->ccs));
    q->ccs.cwnd = q->a.cc.max_cwnd; /* start at line rate, as UET NSCC does */
}

static void nscc_apply(struct qp *q, uint64_t now)
{
    const struct mrc_cc_params *c = &q->a.cc;
    struct cc_state *s = &q->ccs;
    if (s->acked_since >= c->adjust_bytes_threshold || now - s->last_adjust_ns >= c->adjust_period_threshold) {
        s->cwnd = clamp_cwnd(q, (double)s->cwnd + s->pending + (double)c->eta);
        s->pending = 0;
        s->acked_since = 0;
        s->last_adjust_ns = now;
    }
}

static void quick_adapt(struct qp *q, uint64_t now)
{
    const struct mrc_cc_params *c = &q->a.cc;
    struct cc_state *s = &q->ccs;
    if (c->disable_qa || now - s->last_qa_ns < c->base_rtt)
        return;
    if (s->achieved < (c->max_cwnd >> c->qa_gate)) {
        s->cwnd = clamp_cwnd(q, (double)s->achieved);
        s->pending = 0;
    }
    s->last_qa_ns = now;
}

/* The base RTT and the target delay: as configured, or, when the lowest RTT
 * this QP has seen is over CC_BASE_WRONG times the configured base, scaled
 * up together to it. That is a base configured for a faster fabric (slow
 * links, where one packet's serialization already exceeds the target: the
 * window would shrink to one packet and stay there). Any lowest RTT above
 * the base made it the base before, and a QP that started behind a standing
 * queue took that queue for its base: it stood its ground where the others
 * backed off, and QPs that started earlier sat at one packet (the in-memory
 * link, 6 senders sharing 4 queues, 16 seeds: Jain's index 0.42-0.99,
 * under 0.6 in four; now 0.82-1.00, 14 of 16 above 0.95). */
enum { CC_BASE_WRONG = 4 };

uint64_t cc_base_rtt(const struct qp *q)
{
    const struct mrc_cc_params *c = &q->a.cc;
    return q->min_rtt <= CC_BASE_WRONG * c->base_rtt || !c->base_rtt ? c->base_rtt : q->min_rtt;
}

static void nscc_on_ack(struct qp *q, uint64_t bytes, uint64_t rtt, int ecn, uint64_t now)
{
    struct mrc_cc_params sc = q->a.cc; /* with the base RTT and target this QP works with */
    sc.base_rtt = cc_base_rtt(q);
    if (sc.base_rtt != q->a.cc.base_rtt)
        sc.target_delay = (uint64_t)((double)sc.target_delay * (double)sc.base_rtt / (double)q->a.cc.base_rtt);
    const struct mrc_cc_params *c = &sc;
    struct cc_state *s = &q->ccs;
    /* bytes achieved over the last base RTT, for quick adapt */
    if (now - s->achieved_start_ns > c->base_rtt) {
        s->achieved_start_ns = now;
        s->achieved = 0;
    }
    s->achieved += bytes;
    s->acked_since += bytes;
    if (rtt) {
        double delay = rtt > c->base_rtt ? (double)(rtt - c->base_rtt) : 0.0;
        s->avg_delay += (delay - s->avg_delay) / 80.0;
        double target = (double)c->target_delay;
        if (!ecn && delay < target) {
            /* proportional increase, bigger the further below target */
            s->pending += (double)bytes * (target - delay) / target * (double)c->fi_scale / 1000.0 *
                          (double)q->a.mtu / (double)(s->cwnd ? s->cwnd : 1);
        } else if (!ecn) {
            s->pending += (double)c->fi * (double)bytes / (double)(s->cwnd ? s->cwnd : 1);
        } else if (delay >= target) {
            if (now - s->last_md_ns >= c->base_rtt) {
                /* by the average delay, or with md_by_sample by this ACK's, as
                 * the UET reference simulator (htsim's NSCC) cuts: where the
                 * flows sharing a queue hold its average at the target, the
                 * average's cut is near nothing and follows each flow's own
                 * noise, and on the namespace fabric windows drifted apart for
                 * a second at a time (README, congestion: incast 7:1) */
                double avg = c->md_by_sample ? delay : s->avg_delay > target ? s->avg_delay : target + 1;
                double f = 1.0 - (double)c->gamma / 1000.0 * (avg - target) / avg;
                double floor = (double)c->max_md_jump / 1000.0;
                s->cwnd = clamp_cwnd(q, (double)s->cwnd * (f > floor ? f : floor));
                s->pending = 0;
                s->last_md_ns = now;
            }
        } /* ECN below target: no window change, the EV manager steers away */
        if (!ecn && delay < target / 16) { /* the fast increase wants the delay near zero ACK after ACK */
            if (++s->near_zero_acks > 16)
                s->pending += (double)bytes;
        } else {
            s->near_zero_acks = 0;
        }
        if (delay > (double)c->qa_threshold && (q->inflight + bytes) * 2 >= s->cwnd)
            quick_adapt(q, now);
    } else if (ecn && now - s->last_md_ns >= c->base_rtt) {
        /* a trim: congestion without an RTT sample; half the largest
         * decrease (x 0.75 at NSCC's floor of 0.5; it was floor x 1.5,
         * which grew the window on a trim once the floor was above 2/3) */
        s->cwnd = clamp_cwnd(q, (double)s->cwnd * (1.0 - (1.0 - (double)c->max_md_jump / 1000.0) / 2.0));
        s->last_md_ns = now;
    }
    nscc_apply(q, now);
}

static void nscc_on_loss(struct qp *q, uint64_t now) { quick_adapt(q, now); }

static const struct cc_ops cc_nscc = {nscc_init, nscc_on_ack, nscc_on_loss};

static void fixed_init(struct qp *q)
{
    memset(&q->ccs, 0, sizeof(q->ccs));
    q->ccs.cwnd = q->a.cc.max_cwnd;
}
static void fixed_ack(struct qp *q, uint64_t b, uint64_t r, int e, uint64_t n)
{
    (void)q; (void)b; (void)r; (void)e; (void)n;
}
static void fixed_loss(struct qp *q, uint64_t n) { (void)q; (void)n; }

static const struct cc_ops cc_fixed = {fixed_init, fixed_ack, fixed_loss};

/* enum mrc_cc_algorithm -> its calls and its name */
static const struct {
    const struct cc_ops *ops;
    const char *name;
} ALGORITHMS[MRC_CC_NALGORITHMS] = {[MRC_CC_NSCC] = {&cc_nscc, "nscc"}, [MRC_CC_FIXED] = {&cc_fixed, "fixed"}};

const char *mrc_cc_algorithm_name(uint32_t algorithm)
{
    return algorithm < MRC_CC_NALGORITHMS ? ALGORITHMS[algorithm].name : NULL;
}

const struct cc_ops *cc_ops_of(uint32_t algorithm)
{
    return algorithm < MRC_CC_NALGORITHMS ? ALGORITHMS[algorithm].ops : NULL;
}
