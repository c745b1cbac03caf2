/* Responder: validate, place by (rkey, VA) in any order, SACK/NACK, and
 * WRITE_IMM receive completions in message order (protocol.md section 3,
 * "Responder"). Nothing is ever written outside a registered region.
 *
 * Lock: every function here runs with the endpoint lock held. Calls ep.c. */
#include "core.h"

/* when the bitmap moves to the triggering PSN, it keeps this many PSNs above it
 * (packets sent later that overtook it) */
enum { SACK_ABOVE_TRIG = 16 };

static inline uint32_t widx(const struct qp *q, uint32_t psn) { return psn & (q->win - 1); }
static inline int rbit(const struct qp *q, uint32_t psn) { uint32_t i = widx(q, psn); return (int)((q->rbits[i >> 6] >> (i & 63)) & 1); }
static inline void rset(struct qp *q, uint32_t psn) { uint32_t i = widx(q, psn); q->rbits[i >> 6] |= 1ull << (i & 63); }
static inline void rclr(struct qp *q, uint32_t psn) { uint32_t i = widx(q, psn); q->rbits[i >> 6] &= ~(1ull << (i & 63)); }

static void send_sack(struct mrc_ep *ep, struct qp *q, uint32_t ev, int ecn, uint32_t trig, uint16_t flags, uint16_t ts)
{
    struct ctrl *c = ep_ctrl_to(ep, q->peer, ev); /* on the path the packet came in on */
    if (!c)
        return;
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
    for (uint32_t i = 0; i < MRC_SACK_BITS && o + i < q->win; i++)
        if (rbit(q, psn_add(q->epsn, o + i)))
            bm |= 1ull << i;
    int32_t off = (int32_t)(psn_sub(trig, cack));
    if (off > 0x7FFF)
        off = off - (int32_t)(MRC_PSN_MASK + 1); /* trig before cack: a duplicate */
    if (off > 0x7FFF || off < -0x8000)
        off = 0;
    struct mrc_pkt p = {.opcode = MRC_OP_SACK, .dqpn = q->dqpn, .sack_flags = (uint16_t)(flags | (ecn ? MRC_SETH_ECN : 0)),
                        .ack_psn_offset = (int16_t)off, .ev = ev, .scid = (uint16_t)q->qpn, .dcid = (uint16_t)q->dqpn,
                        .cack_psn = cack, .mpr = (uint8_t)q->a.mpr, .sack_base_off = (int16_t)(o + 1), .bitmap = bm,
                        .ts_echo = ts, .ooo_cnt = (uint16_t)q->ooo, .rcv_bytes = q->rcv_bytes >> 8};
    if (ctrl_put(ep, c, &p) < 0)
        return;
    q->bytes_unacked = 0;
    q->st.sacks_tx++;
}

static void send_nack(struct mrc_ep *ep, struct qp *q, uint8_t reason, uint32_t psn, uint32_t ev)
{
    struct ctrl *c = ep_ctrl_to(ep, q->peer, ev); /* on the path the packet came in on */
    if (!c)
        return;
    struct mrc_pkt p = {.opcode = MRC_OP_NACK, .dqpn = q->dqpn, .nack_reason = reason, .ev = ev,
                        .scid = (uint16_t)q->qpn, .dcid = (uint16_t)q->dqpn, .nack_psn = psn};
    if (ctrl_put(ep, c, &p) == 0)
        q->st.nacks_tx++;
}

/* Advance the cumulative PSN over what is placed. A WRITE_IMM completes once
 * it and every earlier PSN are placed: in message order, never before its
 * data. A full receive CQ stops the advance at the WRITE_IMM (it is placed
 * but not acknowledged, so nothing is lost): it goes on once the
 * application polled (resp_retry_completions). */
static void advance(struct mrc_ep *ep, struct qp *q)
{
    while (rbit(q, q->epsn)) {
        struct pimm *pi = &q->pimm[widx(q, q->epsn)];
        if (pi->valid && pi->psn == q->epsn) {
            if (q->rq_head == LOAD_ACQ(q->rq_tail)) {
                ep_drop(ep, MRC_DROP_NO_RECV);
            } else {
                struct mrc_wc wc = {.wr_id = q->rq[q->rq_head], .qpn = q->qpn, .status = MRC_WC_SUCCESS,
                                    .opcode = MRC_WC_RECV_WRITE_IMM, .byte_len = pi->len, .imm_data = pi->imm};
                if (ep_cq_push(ep, q->rcq, &wc) < 0) {
                    cq_wait(ep, &q->rcq_wait, 1);
                    return;
                }
                STORE_REL(q->rq_head, ring_next(q->rq_head, q->rq_size));
            }
            pi->valid = 0;
        }
        rclr(q, q->epsn);
        q->epsn = psn_add(q->epsn, 1);
    }
    cq_wait(ep, &q->rcq_wait, 0);
}

/* The receive CQ has room again: complete what waited, and tell the sender
 * how far the cumulative PSN moved (on the EV the last packet came on). */
void resp_retry_completions(struct mrc_ep *ep, struct qp *q)
{
    uint32_t before = q->epsn;
    advance(ep, q);
    if (q->epsn != before)
        send_sack(ep, q, q->last_rx_ev, 0, psn_add(q->epsn, MRC_PSN_MASK), 0, 0);
}

void resp_on_data(struct mrc_ep *ep, struct qp *q, const uint8_t *pkt, uint32_t len, const struct mrc_pkt *p,
                  const struct mrc_meta *m, uint64_t now)
{
    (void)len;
    (void)now;
    q->st.rx_packets++;
    q->last_rx_ev = m->ev;
    if (m->trimmed) {
        ep_drop(ep, MRC_DROP_TRIMMED);
        send_nack(ep, q, MRC_NACK_TRIMMED, p->psn, m->ev);
        return;
    }
    uint32_t psn = p->psn;
    if (psn_lt(psn, q->epsn) || (psn_sub(psn, q->epsn) < q->win && rbit(q, psn))) {
        /* a duplicate writes nothing and says what we have */
        ep_drop(ep, MRC_DROP_DUPLICATE);
        send_sack(ep, q, m->ev, m->ecn_ce, psn, 0, 0);
        return;
    }
    if (psn_sub(psn, q->epsn) >= q->win) {
        ep_drop(ep, MRC_DROP_PSN_WINDOW);
        send_nack(ep, q, MRC_NACK_PSN_OUT_OF_WINDOW, psn, m->ev);
        return;
    }
    struct mr *mr = ep_mr(ep, p->rkey);
    if (!mr || !(mr->access & MRC_ACCESS_REMOTE_WRITE)) {
        ep_drop(ep, MRC_DROP_RKEY);
        send_nack(ep, q, MRC_NACK_REMOTE_ACCESS, psn, m->ev);
        return;
    }
    uint64_t base = (uint64_t)(uintptr_t)mr->addr, va = p->va, plen = p->payload_len;
    if (va < base || plen > mr->len || va - base > mr->len - plen || plen > p->dma_len) {
        ep_drop(ep, MRC_DROP_RANGE);
        send_nack(ep, q, MRC_NACK_REMOTE_ACCESS, psn, m->ev);
        return;
    }
    if (plen)
        memcpy(mr->addr + (va - base), pkt + p->payload_off, plen);
    q->st.rx_bytes += plen;
    q->rcv_bytes += (uint32_t)plen;
    q->bytes_unacked += (uint32_t)plen;
    rset(q, psn);
    if (mrc_opcode_has_imm(p->opcode)) {
        struct pimm *pi = &q->pimm[widx(q, psn)];
        *pi = (struct pimm){.psn = psn, .imm = p->imm, .len = p->dma_len, .valid = 1};
    }
    int ooo = psn != q->epsn;
    if (ooo)
        q->ooo++;
    advance(ep, q);
    /* With spraying nearly every packet arrives out of order: an out-of-order
     * packet asks for a SACK once half of ack_bytes is waiting, not each
     * time, or SACKs would double the packet load (protocol.md 3, Responder) */
    if (m->ecn_ce || (p->flags & (MRC_BTH_ACKREQ | MRC_BTH_RTX)) || q->bytes_unacked >= q->a.ack_bytes ||
        (ooo && q->bytes_unacked >= q->a.ack_bytes / 2))
        send_sack(ep, q, m->ev, m->ecn_ce, psn, 0, (uint16_t)p->ts);
}

void resp_on_probe(struct mrc_ep *ep, struct qp *q, const struct mrc_pkt *p, const struct mrc_meta *m)
{
    (void)m;
    q->st.probes_rx++;
    send_sack(ep, q, p->ev, 0, psn_add(q->epsn, MRC_PSN_MASK), MRC_SETH_PR, 0);
}
