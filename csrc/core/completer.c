/* Completer: what comes back to a sender (protocol.md section 3,
 * "Requester"). SACKs move the cumulative and selective acknowledgements,
 * feed NSCC and the RTT, widen the reordering allowance when a loss turns
 * out to have been reordering, and find losses (a hole that packets sent
 * more than the allowance after it have passed: its EV failed); NACKs make
 * trimmed packets go again at once or fail a WR; a tail loss probe sends
 * the newest packet again when nothing came back for two RTTs; the
 * retransmit timer resends what nothing acknowledged for an RTO and ends a
 * QP whose retry budget is spent; WRs complete in order once the
 * cumulative ACK covers them. What is lost goes back to the requester
 * (PE_LOST) to be resent.
 *
 * Lock: every function here runs with the endpoint lock held. Calls qp.c,
 * ev.c, the CC ops and ep.c. */
#include "core/cc_nscc.h"
#include "core/completer.h"
#include "core/ep.h"
#include "core/ev.h"
#include "core/qp.h"
#include "core/rings.h"
#include "core/types.h"

/* 1.024 us x 2^timeout for the first linear_cnt tries, then doubling; never
 * below 4 smoothed RTTs, so that a fabric whose queues hold milliseconds
 * (slow links, or a rate-limited emulation) does not see every queue as a
 * loss (a timer expiry retires an EV and starts probes). */
static uint64_t rto_ns(const struct qp *q)
{
    uint64_t base = 1024ull << q->a.timeout;
    if (4 * q->srtt > base)
        base = 4 * q->srtt;
    if (q->retries < q->a.linear_cnt)
        return base;
    uint32_t sh = q->retries - q->a.linear_cnt + 1;
    return base << (sh > 16 ? 16 : sh);
}

/* Complete, in order, every WR whose last PSN the cumulative ACK covers. A
 * full send CQ leaves the rest acknowledged but queued (they go as soon as
 * the application has polled: dispatch.c offers them again). */
void comp_complete(struct mrc_ep *ep, struct qp *q)
{
    while (q->sq_head != q->sq_cur) {
        struct wqe *w = &q->sq[q->sq_head];
        uint32_t last = psn_add(w->psn_first, w->npkts - 1);
        if (!psn_lt(last, q->una_psn))
            break;
        struct mrc_wc wc = {.wr_id = w->wr.wr_id, .qpn = q->qpn, .status = MRC_WC_SUCCESS, .opcode = MRC_WC_WRITE,
                            .byte_len = (uint32_t)w->total};
        if (!ep_cq_room(ep, q->scq, q->qpn)) {
            cq_wait(ep, &q->scq_wait, 1);
            return;
        }
        if (w->wr.opcode == MRC_WR_WRITE_IMM)
            q->wimm_out--;
        ep_wqe_release(ep, w);
        w->done = 1;
        /* the slot is free before the completion is seen: the application
         * may post again the moment it polls it */
        STORE_REL(q->sq_head, ring_next(q->sq_head, q->sq_size));
        ep_cq_put(ep, q->scq, &wc);
    }
    cq_wait(ep, &q->scq_wait, 0);
}

static void mark_lost(struct mrc_ep *ep, struct qp *q, struct pent *pe, uint64_t now, int path_failed)
{
    if (pe->st != PE_INFLIGHT)
        return;
    pe->st = PE_LOST;
    q->nlost++;
    q->inflight -= pe->len;
    if (path_failed) {
        /* a loss is a path failure: the EV manager retires the path; the
         * window is not cut for it (protocol.md section 1) */
        q->st.losses++;
        ev_on_loss(ep, q, pe->ev, pe->sent_ns, now);
    }
}

/* ------------------------------------------------------------ SACK */
/* What the PSNs a SACK acknowledges add up to. */
struct tally {
    uint64_t acked;          /* payload bytes newly acknowledged */
    uint64_t rtt;            /* the triggering packet's round trip (0: none) */
    uint64_t rack;           /* latest send time among first transmissions acknowledged */
    uint32_t spurious;       /* packets declared lost that arrived after all */
};

/* cnt PSNs from lo were received (with a bitmap: those whose bit is set). */
static inline __attribute__((always_inline)) void take_acks(struct mrc_ep *ep, struct qp *q, uint32_t lo,
                                                            uint32_t cnt, const uint64_t *bitmap, uint32_t trig,
                                                            uint64_t now, struct tally *t)
{
    for (uint32_t i = 0; i < cnt; i++) {
        uint32_t psn = psn_add(lo, i);
        if (bitmap && !(*bitmap & (1ull << i)))
            continue;
        if (psn_lt(psn, q->una_psn) || !psn_lt(psn, q->next_psn))
            continue;
        struct pent *pe = pe_at(q, psn);
        if (pe->st == PE_INFLIGHT) {
            q->inflight -= pe->len;
        } else if (pe->st == PE_LOST) {
            /* declared lost, not yet resent, and here it is: reordering,
             * not loss. Its path works, and the allowance was too small. */
            q->nlost--;
            t->spurious++;
            ev_on_alive(ep, q, pe->ev, now);
        } else {
            continue;
        }
        t->acked += pe->len;
        if (pe->nrtx == 0) {
            if (pe->sent_ns > t->rack)
                t->rack = pe->sent_ns;
            if (psn == trig)
                t->rtt = now - pe->sent_ns;
        } else if (q->min_rtt && now - pe->sent_ns >= q->min_rtt && pe->sent_ns > t->rack) {
            /* a packet sent again counts for RACK when its latest copy had
             * time to come back (RFC 8985 6.2 step 2): a tail loss probe's
             * SACK then shows what was lost before it */
            t->rack = pe->sent_ns;
        }
        pe->st = PE_ACKED;
    }
}

/* The reordering allowance starts at reorder_ns, doubles (up to half the
 * retry timer) on every SACK that shows a spurious loss, and halves back
 * after 32 RTTs without one (RACK's adaptive window, RFC 8985 6.2). */
static void adapt_reorder(struct qp *q, uint32_t spurious, uint64_t now)
{
    uint64_t base = q->a.reorder_ns, reo = q->reo_ns; /* reo_ns starts at reorder_ns */
    if (spurious) {
        uint64_t cap = rto_ns(q) / 2 > base ? rto_ns(q) / 2 : base;
        reo = 2 * reo < cap ? 2 * reo : cap;
        q->last_spurious_ns = now;
    } else if (reo > base && now - q->last_spurious_ns > 32 * (q->srtt ? q->srtt : base)) {
        reo = reo / 2 > base ? reo / 2 : base;
        q->last_spurious_ns = now;
    }
    q->reo_ns = reo;
}

/* The reordering allowance: never below half an RTT (paths whose queues
 * differ by milliseconds, slow links, reorder by that much without losing
 * anything). */
static uint64_t reo_allowance(const struct qp *q) { return q->reo_ns > q->srtt / 2 ? q->reo_ns : q->srtt / 2; }

/* When the oldest packet out counts as lost by time (RACK's reorder timer,
 * RFC 8985 6.2): a packet sent after it has been acknowledged, and two
 * smoothed RTTs and the allowance have passed since it left (one RTT
 * called a packet that sat behind a deeper queue lost: tests/dp/
 * test_transfer.py's ECN test). Without it a lost packet
 * that every later one overtook by less than the allowance would wait for
 * the retransmit timer whenever nothing more is sent (an application with
 * all its WRITEs behind that packet). MRC_INF_NS: none. */
static uint64_t reorder_deadline(struct qp *q)
{
    if (q->una_psn == q->next_psn)
        return MRC_INF_NS;
    const struct pent *pe = pe_at(q, q->una_psn);
    if (pe->st != PE_INFLIGHT || pe->sent_ns >= q->rack_sent_ns)
        return MRC_INF_NS;
    return pe->sent_ns + 2 * q->srtt + reo_allowance(q);
}

/* Loss: a hole that a packet sent more than the allowance after it has
 * already passed (packets on other paths overtook it for longer than
 * reordering explains): the hole's EV failed. */
static void detect_losses(struct mrc_ep *ep, struct qp *q, uint64_t rack, uint64_t now)
{
    if (rack <= q->rack_sent_ns)
        return;
    q->rack_sent_ns = rack;
    uint64_t reo = reo_allowance(q);
    for (uint32_t psn = q->una_psn; psn != q->next_psn; psn = psn_add(psn, 1)) {
        struct pent *pe = pe_at(q, psn);
        if (pe->nrtx == 0 && pe->sent_ns + reo >= rack)
            break;
        if (pe->st == PE_INFLIGHT && pe->sent_ns + reo < rack)
            mark_lost(ep, q, pe, now, 1);
    }
}

void comp_on_sack(struct mrc_ep *ep, struct qp *q, const struct mrc_pkt *p, uint64_t now)
{
    uint32_t cack = p->cack_psn;
    /* a cumulative PSN at or after next_psn acknowledges what was never sent
     * (next_psn - 1 is every PSN so far); an older one is a late SACK, whose
     * bitmap still counts */
    if (!psn_lt(cack, q->next_psn) && cack != psn_add(q->next_psn, MRC_PSN_MASK)) {
        ep_drop(ep, MRC_DROP_STALE_ACK);
        return;
    }
    q->st.sacks_rx++;
    if (p->sack_flags & MRC_SETH_PR) /* only now: a probe answer must be a valid SACK first */
        ev_on_probe_response(ep, q, p->ev, now);
    uint32_t trig = psn_add(cack, (uint32_t)(int32_t)p->ack_psn_offset);
    struct tally t = {.rack = q->rack_sent_ns};
    /* the cumulative part, then the bitmap, then the triggering PSN
     * (received, whether or not the bitmap reaches it) */
    uint32_t from = psn_lt(q->una_psn, psn_add(cack, 1)) ? q->una_psn : psn_add(cack, 1);
    if (psn_le(q->una_psn, cack))
        take_acks(ep, q, from, psn_sub(psn_add(cack, 1), from), NULL, trig, now, &t);
    take_acks(ep, q, psn_add(cack, (uint32_t)(int32_t)p->sack_base_off), MRC_SACK_BITS, &p->bitmap, trig, now, &t);
    if (psn_lt(cack, trig))
        take_acks(ep, q, trig, 1, NULL, trig, now, &t);
    if (t.rtt) {
        q->srtt = q->srtt ? (7 * q->srtt + t.rtt) / 8 : t.rtt;
        if (!q->min_rtt || t.rtt < q->min_rtt)
            q->min_rtt = t.rtt;
    }
    int ecn = (p->sack_flags & MRC_SETH_ECN) != 0;
    if (ecn) {
        q->st.ecn_marks++;
        ev_on_congestion(ep, q, p->ev, now);
    }
    q->cc->on_ack(q, t.acked, t.rtt, ecn, now);
    if (t.acked) {
        q->last_ack_ns = now;
        q->tlp_out = 0;
    }
    uint32_t old_una = q->una_psn;
    while (q->una_psn != q->next_psn && pe_at(q, q->una_psn)->st == PE_ACKED) {
        pe_at(q, q->una_psn)->st = PE_FREE;
        q->una_psn = psn_add(q->una_psn, 1);
    }
    if (q->una_psn != old_una) {
        q->last_progress_ns = now;
        q->retries = 0;
    }
    adapt_reorder(q, t.spurious, now);
    detect_losses(ep, q, t.rack, now);
    comp_complete(ep, q);
}

/* ------------------------------------------------------------ NACK */
/* The WR at index bad failed with status: the QP goes to ERROR; the WRs
 * before it are flushed, it carries status, the rest are flushed after it. */
static void fail_at(struct mrc_ep *ep, struct qp *q, uint32_t bad, uint8_t status)
{
    for (uint32_t i = q->sq_head, tail = LOAD_ACQ(q->sq_tail); i != bad && i != tail; i = ring_next(i, q->sq_size))
        q->sq[i].status = MRC_WC_WR_FLUSH_ERR;
    q->sq[bad].status = status;
    qp_to_error(ep, q, status);
}

/* A NACK acts only on a PSN that is out: sent, and neither acknowledged nor
 * forgotten (protocol.md 3, "Trust"). */
void comp_on_nack(struct mrc_ep *ep, struct qp *q, const struct mrc_pkt *p, uint64_t now)
{
    uint32_t psn = p->nack_psn;
    struct pent *pe = pe_at(q, psn);
    if (psn_lt(psn, q->una_psn) || !psn_lt(psn, q->next_psn) || (pe->st != PE_INFLIGHT && pe->st != PE_LOST)) {
        ep_drop(ep, MRC_DROP_STALE_ACK);
        return;
    }
    q->st.nacks_rx++;
    switch (p->nack_reason) {
    case MRC_NACK_TRIMMED:
    case MRC_NACK_TRIMMED_LASTHOP:
        /* congestion at a switch: retransmit at once, steer away briefly */
        q->st.trims++;
        mark_lost(ep, q, pe, now, 0);
        ev_on_congestion(ep, q, p->ev, now);
        q->cc->on_ack(q, 0, 0, 1, now);
        break;
    case MRC_NACK_ICRC:
        mark_lost(ep, q, pe, now, 0);
        break;
    case MRC_NACK_NO_RESOURCE:
        /* the receiver had no receive for this WRITE_IMM: it placed nothing;
         * the retransmit timer sends it again (a receiver-not-ready retry, in
         * the retry budget), and its path is not at fault */
        pe->rnr = 1;
        q->st.rnr_naks++;
        break;
    case MRC_NACK_REMOTE_ACCESS:
        comp_complete(ep, q);
        if (pe->st != PE_FREE)
            fail_at(ep, q, pe->wqe, MRC_WC_REM_ACCESS_ERR);
        break;
    default:
        break; /* out of window and the like: the timer recovers */
    }
}

/* ------------------------------------------------------------ the retransmit timer */
/* When the tail loss probe goes (RFC 8985 7): nothing was sent and no SACK
 * acknowledged anything for two smoothed RTTs and the reordering allowance.
 * Losses at the tail of what is out (a path that died under the last
 * packets of a message) have no later packet whose SACK would show them,
 * and would wait for the retransmit timer: 4 RTTs at least, a whole step of
 * a collective whose next message waits for this one. MRC_INF_NS: none
 * (nothing out, a probe out already, losses waiting to go, no RTT yet). */
static uint64_t tlp_deadline(const struct qp *q)
{
    if (q->una_psn == q->next_psn || q->tlp_out || q->nlost || !q->srtt)
        return MRC_INF_NS;
    uint64_t from = q->last_tx_ns > q->last_ack_ns ? q->last_tx_ns : q->last_ack_ns;
    return from + 2 * q->srtt + reo_allowance(q);
}

/* The probe: the newest packet out goes again, on another EV. Its path
 * counts as failed when a SACK came back after it left (the peer answers,
 * this packet does not); its SACK shows, through RACK, any other packet of
 * the tail that was lost. Packets that the receiver refused for want of a
 * receive (NACK NO_RESOURCE) wait for the retransmit timer, as the NACK
 * asks: with nothing else out, the episode has no probe, and the deadline
 * passes until a SACK starts another (a deadline that stayed due would
 * call the timer again at once, for ever). */
static void send_tlp(struct mrc_ep *ep, struct qp *q, uint64_t now)
{
    q->tlp_out = 1;
    for (uint32_t psn = psn_add(q->next_psn, MRC_PSN_MASK);; psn = psn_add(psn, MRC_PSN_MASK)) {
        struct pent *pe = pe_at(q, psn);
        if (pe->st == PE_INFLIGHT && !pe->rnr) {
            mark_lost(ep, q, pe, now, q->last_ack_ns > pe->sent_ns);
            q->st.tlp_probes++;
            return;
        }
        if (psn == q->una_psn)
            return;
    }
}

void comp_on_timer(struct mrc_ep *ep, struct qp *q, uint64_t now)
{
    if (q->una_psn == q->next_psn && !qp_send_blocked(ep, q))
        return;
    if (now >= reorder_deadline(q)) /* lost by time: its path failed, as a loss found by a SACK */
        mark_lost(ep, q, pe_at(q, q->una_psn), now, 1);
    uint64_t rto_at = q->last_progress_ns + rto_ns(q);
    if (now >= tlp_deadline(q) && now < rto_at)
        send_tlp(ep, q, now);
    if (now < rto_at)
        return;
    q->retries++;
    q->st.timeouts++;
    if (q->retries > q->st.retries_max)
        q->st.retries_max = q->retries;
    if (q->a.exp_cnt != MRC_RETRY_FOREVER && q->retries > q->a.linear_cnt + q->a.exp_cnt) {
        comp_complete(ep, q);
        qp_to_error(ep, q, MRC_WC_RETRY_EXC_ERR);
        return;
    }
    /* Everything that has been out for a whole RTO is resent, but only the
     * oldest packet's path counts as failed: when nothing at all came back
     * for an RTO, the likelier cause is a stall (of this host, the peer or
     * the fabric's CPUs) than every path failing at once, and retiring every
     * path in flight would empty the rotation; a path that really died is
     * found by the SACKs that follow. */
    uint64_t rto = rto_ns(q);
    for (uint32_t psn = q->una_psn; psn != q->next_psn; psn = psn_add(psn, 1)) {
        struct pent *pe = pe_at(q, psn);
        if (pe->st == PE_INFLIGHT && (psn == q->una_psn || pe->sent_ns + rto <= now))
            mark_lost(ep, q, pe, now, psn == q->una_psn && !pe->rnr);
    }
    q->cc->on_loss(q, now);
    q->last_progress_ns = now;
}

/* When the retransmit timer of q fires (never while nothing is out and
 * nothing is kept from going out). */
uint64_t comp_next_timer(struct mrc_ep *ep, struct qp *q, uint64_t now)
{
    if (q->una_psn == q->next_psn && !qp_send_blocked(ep, q))
        return MRC_INF_NS;
    uint64_t x = q->last_progress_ns + rto_ns(q), r = reorder_deadline(q), t = tlp_deadline(q);
    x = r < x ? r : x;
    x = t < x ? t : x;
    return x < now ? now : x;
}
