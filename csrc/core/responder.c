/* Responder: validate, place by (rkey, VA) in any order, answer with SACKs
 * and NACKs, and complete WRITE_IMM receives in message order (protocol.md
 * section 3, "Responder"). Nothing is ever written outside a registered
 * region of the QP's protection domain.
 *
 * Replies go back on the plane the packet arrived on, over one of our own
 * paths to the sender there, and echo the packet's EV: a receiver never reads
 * a plane (or anything else) out of an EV (protocol.md 2, "EV on the wire").
 *
 * Lock: every function here runs with the endpoint lock held. Calls ep.c. */
#include "core/ep.h"
#include "core/qp.h"
#include "core/responder.h"
#include "core/rings.h"
#include "core/sec.h"
#include "core/types.h"

/* when the bitmap moves to the triggering PSN, it keeps this many PSNs above it
 * (packets sent later that overtook it) */
/* RESP_ACK_DELAY_NS: received data never waits longer than this for its
 * SACK. A SACK goes every ack_bytes, or at once when asked; but a sender
 * whose window shrank after it sent its last packet without an ACK request
 * can send nothing more, and the bytes that would trigger the SACK never
 * come: without the delay it waits for its retransmit timer. */
enum { SACK_ABOVE_TRIG = 16, RESP_ACK_DELAY_NS = 100000 };

static inline uint32_t widx(const struct qp *q, uint32_t psn) { return psn & (q->win - 1); }
static inline int rbit(const struct qp *q, uint32_t psn)
{
    uint32_t i = widx(q, psn);
    return (int)((q->rbits[i >> 6] >> (i & 63)) & 1);
}
static inline void rset(struct qp *q, uint32_t psn) { uint32_t i = widx(q, psn); q->rbits[i >> 6] |= 1ull << (i & 63); }
static inline void rclr(struct qp *q, uint32_t psn)
{
    uint32_t i = widx(q, psn);
    q->rbits[i >> 6] &= ~(1ull << (i & 63));
}
/* The 64 received-bits from psn up, bit 0 psn's (the array wraps at win, a
 * power of two of at least 128): two words, not 64 single bits. */
static inline uint64_t rbits64(const struct qp *q, uint32_t psn)
{
    uint32_t i = widx(q, psn), w = i >> 6, b = i & 63, last = (q->win >> 6) - 1;
    uint64_t lo = q->rbits[w] >> b;
    return b ? lo | q->rbits[w == last ? 0 : w + 1] << (64 - b) : lo;
}

/* The EV a reply travels on: the arrival plane, and one of our own paths to
 * the sender there (the I/O layer takes path entropy % paths). */
static uint32_t reply_ev(uint8_t port, uint32_t echo) { return ev_make(port, ev_entropy(echo)); }

/* A SACK for q as its state is now, triggered by PSN trig that came on
 * (port, echo). A plain SACK (no ECN echo, no probe answer) that is still
 * waiting in the control ring is brought up to date instead of queueing
 * another: it leaves in the same poll_tx, with everything the newer one says. */
static void send_sack(struct mrc_ep *ep, struct qp *q, uint8_t port, uint32_t echo, int ecn, uint32_t trig,
                      uint16_t flags, uint16_t ts)
{
    int plain = !ecn && !flags;
    struct ctrl *c = plain ? ep_ctrl_pending(ep, q) : NULL;
    int update = c != NULL;
    if (!c && !(c = qp_ctrl_to(ep, q, reply_ev(port, echo))))
        return;
    c->ev = reply_ev(port, echo);
    uint32_t cack = psn_add(q->epsn, MRC_PSN_MASK); /* epsn - 1 */
    uint64_t bm = 0;
    /* The bitmap covers 64 PSNs from epsn + o (epsn itself is, by definition,
     * missing): o = 1, unless the packet that triggered this SACK lies beyond
     * that; then the bitmap moves to end a little above it. Else, behind one
     * hole, a window wider than 64 packets would never be acknowledged past
     * the bitmap: the sender's window stays full of packets that arrived, and
     * nothing it can still see was sent late enough to call the hole lost. */
    uint32_t o = 1, ahead = psn_sub(trig, q->epsn);
    if (ahead > MRC_SACK_BITS && ahead < q->win)
        o = ahead - (MRC_SACK_BITS - SACK_ABOVE_TRIG - 1); /* the trigger at bit 47 */
    if (o < q->win) {
        bm = rbits64(q, psn_add(q->epsn, o));
        if (q->win - o < MRC_SACK_BITS) /* no bit past the window */
            bm &= (1ull << (q->win - o)) - 1;
    }
    int32_t off = (int32_t)(psn_sub(trig, cack));
    if (off > 0x7FFF)
        off = off - (int32_t)(MRC_PSN_MASK + 1); /* trig before cack: a duplicate */
    if (off > 0x7FFF || off < -0x8000)
        off = 0;
    struct mrc_pkt p = {.opcode = MRC_OP_SACK, .pkey = q->pkey, .dqpn = q->dqpn,
                        .sack_flags = (uint16_t)(flags | (ecn ? MRC_SETH_ECN : 0)),
                        .ack_psn_offset = (int16_t)off, .ev = echo, .scid = (uint16_t)q->qpn, .dcid = (uint16_t)q->dqpn,
                        .cack_psn = cack, .mpr = (uint8_t)q->a.mpr, .sack_base_off = (int16_t)(o + 1), .bitmap = bm,
                        .ts_echo = ts, .ooo_cnt = (uint16_t)q->ooo, .rcv_bytes = q->rcv_bytes >> 8,
                        .sec_mode = sec_mode(q)};
    if ((update ? ctrl_rebuild(ep, c, &p) : ctrl_put(ep, c, &p)) < 0)
        return;
    if (plain)
        ep_ctrl_mark_pending(ep, c, q);
    q->bytes_unacked = 0;
    q->ack_due_ns = 0;
    q->st.sacks_tx += !update;
}

static void send_nack(struct mrc_ep *ep, struct qp *q, uint8_t reason, uint32_t psn, uint8_t port, uint32_t echo,
                      uint16_t ts)
{
    struct ctrl *c = qp_ctrl_to(ep, q, reply_ev(port, echo));
    if (!c)
        return;
    struct mrc_pkt p = {.opcode = MRC_OP_NACK, .pkey = q->pkey, .dqpn = q->dqpn, .nack_reason = reason, .ev = echo,
                        .scid = (uint16_t)q->qpn, .dcid = (uint16_t)q->dqpn, .nack_psn = psn, .ts_echo = ts,
                        .sec_mode = sec_mode(q)};
    if (ctrl_put(ep, c, &p) == 0)
        q->st.nacks_tx++;
}

/* A receive waits for the WRITE_IMM message that msn_rq numbers: as many
 * receives are posted as there are WRITE_IMMs before it not yet completed,
 * and one more (METH's RQ message number). */
static int receive_for(const struct qp *q, uint16_t msn_rq)
{
    uint32_t posted = (LOAD_ACQ(q->rq_tail) + q->rq_size - q->rq_head) % q->rq_size;
    return (uint16_t)(msn_rq - q->rq_taken) < posted;
}

/* Advance the cumulative PSN over what is placed. At a message's last packet
 * the bytes its packets placed are compared with its RETH length; a
 * WRITE_IMM completes its receive then, with that byte count: in message
 * order, never before its data, SUCCESS only when the lengths agree (else
 * LOC_LEN_ERR). A full receive CQ stops the advance at the WRITE_IMM (placed,
 * not acknowledged: nothing is lost); it goes on once the application polled
 * (resp_retry_completions). */
static void advance(struct mrc_ep *ep, struct qp *q)
{
    while (rbit(q, q->epsn)) {
        struct rxent *r = &q->rx[widx(q, q->epsn)];
        if (r->last) {
            uint64_t placed = q->msg_bytes + r->plen;
            if (r->imm_valid) {
                if (q->rq_head == LOAD_ACQ(q->rq_tail)) {
                    ep_drop(ep, MRC_DROP_NO_RECV); /* checked on arrival: only a flush could take it */
                } else {
                    struct mrc_wc wc = {.wr_id = q->rq[q->rq_head], .qpn = q->qpn,
                                        .status = placed == r->dma_len ? MRC_WC_SUCCESS : MRC_WC_LOC_LEN_ERR,
                                        .opcode = MRC_WC_RECV_WRITE_IMM, .byte_len = (uint32_t)placed,
                                        .imm_data = r->imm};
                    if (!ep_cq_room(ep, q->rcq, q->qpn)) {
                        cq_wait(ep, &q->rcq_wait, 1);
                        return;
                    }
                    STORE_REL(q->rq_head, ring_next(q->rq_head, q->rq_size)); /* free before it is seen */
                    q->rq_taken++;
                    ep_cq_put(ep, q->rcq, &wc);
                }
                r->imm_valid = 0;
            }
            if (placed != r->dma_len)
                ep->st.msg_len_mismatch++;
            q->msg_bytes = 0;
        } else {
            q->msg_bytes += r->plen;
        }
        rclr(q, q->epsn);
        q->epsn = psn_add(q->epsn, 1);
    }
    cq_wait(ep, &q->rcq_wait, 0);
}

/* The receive CQ has room again: complete what waited, and tell the sender
 * how far the cumulative PSN moved (on the plane the last packet came on). */
void resp_retry_completions(struct mrc_ep *ep, struct qp *q)
{
    uint32_t before = q->epsn;
    advance(ep, q);
    if (q->epsn != before)
        send_sack(ep, q, q->last_rx_port, q->last_rx_ev, 0, psn_add(q->epsn, MRC_PSN_MASK), 0, 0);
}

void resp_on_data(struct mrc_ep *ep, struct qp *q, const uint8_t *pkt, uint32_t len, const struct mrc_pkt *p,
                  const struct mrc_meta *m, uint64_t now)
{
    (void)len;
    q->st.rx_packets++;
    q->last_rx_ev = m->ev;
    q->last_rx_port = m->port;
    /* TSETH's 16-bit timestamp, echoed by every answer to this packet */
    uint16_t ts = (p->flags & MRC_BTH_TS) ? (uint16_t)(p->ts >> 16) : 0;
    if (m->trimmed) {
        ep_drop(ep, MRC_DROP_TRIMMED);
        send_nack(ep, q, MRC_NACK_TRIMMED, p->psn, m->port, m->ev, ts);
        return;
    }
    uint32_t psn = p->psn;
    if (psn_lt(psn, q->epsn) || (psn_sub(psn, q->epsn) < q->win && rbit(q, psn))) {
        /* a duplicate writes nothing and says what we have */
        ep_drop(ep, MRC_DROP_DUPLICATE);
        send_sack(ep, q, m->port, m->ev, m->ecn_ce, psn, 0, ts);
        return;
    }
    if (psn_sub(psn, q->epsn) >= q->win) {
        ep_drop(ep, MRC_DROP_PSN_WINDOW);
        send_nack(ep, q, MRC_NACK_PSN_OUT_OF_WINDOW, psn, m->port, m->ev, ts);
        return;
    }
    /* an rkey, access or range violation ends this QP, as InfiniBand's
     * responder does: the sender hears NACK REMOTE_ACCESS, this side an
     * asynchronous QP_FATAL (LOC_PROT_ERR), and a guess gets one try */
    struct mr *mr = ep_mr(ep, p->rkey);
    if (!mr || mr->pd != q->pd || !(mr->access & MRC_ACCESS_REMOTE_WRITE)) {
        ep_drop(ep, MRC_DROP_RKEY);
        send_nack(ep, q, MRC_NACK_REMOTE_ACCESS, psn, m->port, m->ev, ts);
        qp_to_error(ep, q, MRC_WC_LOC_PROT_ERR);
        return;
    }
    uint64_t base = (uint64_t)(uintptr_t)mr->addr, va = p->va, plen = p->payload_len;
    if (va < base || plen > mr->len || va - base > mr->len - plen || plen > p->dma_len) {
        ep_drop(ep, MRC_DROP_RANGE);
        send_nack(ep, q, MRC_NACK_REMOTE_ACCESS, psn, m->port, m->ev, ts);
        qp_to_error(ep, q, MRC_WC_LOC_PROT_ERR);
        return;
    }
    int imm = mrc_opcode_has_imm(p->opcode);
    if (imm && !receive_for(q, p->msn_rq)) {
        /* no receive for this WRITE_IMM: nothing placed, nothing acknowledged;
         * the sender retries on its timer (protocol.md 3) */
        ep_drop(ep, MRC_DROP_NO_RECV);
        send_nack(ep, q, MRC_NACK_NO_RESOURCE, psn, m->port, m->ev, ts);
        return;
    }
    if (plen)
        memcpy(mr->addr + (va - base), pkt + p->payload_off, plen);
    q->st.rx_bytes += plen;
    q->rcv_bytes += (uint32_t)plen;
    q->bytes_unacked += (uint32_t)plen;
    rset(q, psn);
    int last = p->opcode == MRC_OP_WRITE_LAST || p->opcode == MRC_OP_WRITE_ONLY || imm;
    q->rx[widx(q, psn)] = (struct rxent){.psn = psn, .imm = p->imm, .dma_len = p->dma_len, .plen = (uint16_t)plen,
                                         .last = (uint8_t)last, .imm_valid = (uint8_t)imm};
    uint32_t expected = q->epsn;
    advance(ep, q);
    /* Out of order (a PSN other than the next expected: it opened a hole, or
     * landed below the highest received) or filling a hole (the cumulative
     * PSN moved by more than one): answered at once, so a sender never waits
     * for its timer to learn that a hole opened or closed (protocol.md 3). */
    int ooo = psn != expected, filled = psn_sub(q->epsn, expected) > 1;
    if (ooo)
        q->ooo++;
    if (ooo || filled || m->ecn_ce || (p->flags & (MRC_BTH_ACKREQ | MRC_BTH_RTX)) ||
        q->bytes_unacked >= q->a.ack_bytes)
        send_sack(ep, q, m->port, m->ev, m->ecn_ce, psn, 0, ts);
    q->last_rx_psn = psn;
    q->last_rx_ts = ts;
    if (q->bytes_unacked && !q->ack_due_ns)
        q->ack_due_ns = now + RESP_ACK_DELAY_NS;
}

/* Data that waited RESP_ACK_DELAY_NS gets its SACK (for the last packet). */
void resp_on_timer(struct mrc_ep *ep, struct qp *q, uint64_t now)
{
    if (q->ack_due_ns && now >= q->ack_due_ns)
        send_sack(ep, q, q->last_rx_port, q->last_rx_ev, 0, q->last_rx_psn, 0, q->last_rx_ts);
}

uint64_t resp_next_timer(const struct qp *q) { return q->ack_due_ns ? q->ack_due_ns : MRC_INF_NS; }

/* The SACK that received data still waits for (RESP_ACK_DELAY_NS), queued now: a QP destroyed within that
 * delay of its last data (a program that got all it needed and closes) would otherwise leave the sender's
 * last writes unacknowledged for good, its retransmissions finding no QP (RETRY_EXC_ERR at the sender). */
void resp_flush(struct mrc_ep *ep, struct qp *q)
{
    if (q->ack_due_ns)
        send_sack(ep, q, q->last_rx_port, q->last_rx_ev, 0, q->last_rx_psn, 0, q->last_rx_ts);
}

/* A RELIABILITY_PROBE of one of the sender's EVs: a SACK with the PR flag,
 * back on the plane it came on, echoing the probed EV. */
void resp_on_probe(struct mrc_ep *ep, struct qp *q, const struct mrc_pkt *p, const struct mrc_meta *m)
{
    q->st.probes_rx++;
    send_sack(ep, q, m->port, p->ev, 0, psn_add(q->epsn, MRC_PSN_MASK), MRC_SETH_PR, 0);
}
