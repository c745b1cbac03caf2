/* Requester: work requests -> packets sprayed over the EV rotation, the PSN
 * window, SACK/NACK processing, loss detection, retransmission and the retry
 * timer (protocol.md section 3, "Requester"). */
#include "core.h"

static inline struct pent *pe_at(struct qp *q, uint32_t psn) { return &q->pe[psn & (q->win - 1)]; }
static uint32_t sq_next(const struct qp *q, uint32_t i) { return i + 1 == q->sq_size ? 0 : i + 1; }

/* Copy [off, off+len) of a message's scatter list to dst. */
static void gather(const struct wqe *w, uint32_t off, uint32_t len, uint8_t *dst)
{
    for (uint32_t i = 0; i < w->wr.num_sge && len; i++) {
        const struct mrc_sge *s = &w->wr.sg_list[i];
        if (off >= s->length) {
            off -= s->length;
            continue;
        }
        uint32_t n = s->length - off < len ? s->length - off : len;
        memcpy(dst, (const uint8_t *)(uintptr_t)s->addr + off, n);
        dst += n;
        len -= n;
        off = 0;
    }
}

static int build_data(struct qp *q, uint32_t psn, const struct pent *pe, int ackreq, int rtx, uint8_t *out,
                      uint32_t cap)
{
    const struct wqe *w = &q->sq[pe->wqe];
    int first = pe->off == 0, last = pe->off + pe->len >= w->total;
    int imm = w->wr.opcode == MRC_WR_WRITE_IMM;
    struct mrc_pkt p = {0};
    if (first && last)
        p.opcode = imm ? MRC_OP_WRITE_ONLY_IMM : MRC_OP_WRITE_ONLY;
    else if (first)
        p.opcode = MRC_OP_WRITE_FIRST;
    else if (last)
        p.opcode = imm ? MRC_OP_WRITE_LAST_IMM : MRC_OP_WRITE_LAST;
    else
        p.opcode = MRC_OP_WRITE_MIDDLE;
    p.flags = (uint8_t)((last || ackreq ? MRC_BTH_ACKREQ : 0) | (rtx ? MRC_BTH_RTX | MRC_BTH_ACKREQ : 0));
    p.dqpn = q->dqpn;
    p.psn = psn;
    p.msn = w->msn;
    p.va = w->wr.remote_addr + pe->off;
    p.rkey = w->wr.rkey;
    p.dma_len = (uint32_t)w->total;
    p.imm = w->wr.imm_data;
    p.payload_len = pe->len;
    int hl = mrc_pkt_build_hdr(&p, out, cap);
    if (hl < 0)
        return hl;
    gather(w, pe->off, pe->len, out + hl);
    return mrc_pkt_finish(out, (uint32_t)hl + pe->len);
}

static uint64_t rto_ns(const struct qp *q)
{
    uint64_t base = 1024ull << q->a.timeout;
    if (q->retries < q->a.linear_cnt)
        return base;
    uint32_t sh = q->retries - q->a.linear_cnt + 1;
    return base << (sh > 16 ? 16 : sh);
}

static void emit(struct mrc_txdesc *d, uint32_t off, int len, uint32_t ev, struct qp *q, uint8_t tclass, int data)
{
    *d = (struct mrc_txdesc){.off = off, .len = (uint32_t)len, .ev = ev, .peer = q->peer, .tclass = tclass,
                             .is_data = (uint8_t)data};
}

static int cwnd_allows(const struct qp *q, uint32_t len)
{
    return q->inflight == 0 || q->inflight + len <= q->ccs.cwnd;
}

/* Payload length of the next new-data packet, or -1 when there is none or
 * the PSN window or max_wimm holds it back (the congestion window is the
 * caller's check). */
static int64_t next_data_len(const struct qp *q)
{
    if (q->sq_cur == LOAD_ACQ(q->sq_tail) || psn_sub(q->next_psn, q->una_psn) >= q->win)
        return -1;
    const struct wqe *w = &q->sq[q->sq_cur];
    if (q->cur_off == 0 && w->wr.opcode == MRC_WR_WRITE_IMM && q->wimm_out >= q->a.max_wimm)
        return -1;
    return w->total - q->cur_off < q->a.mtu ? (int64_t)(w->total - q->cur_off) : (int64_t)q->a.mtu;
}

int req_poll_tx(struct mrc_ep *ep, struct qp *q, uint64_t now, uint8_t *buf, uint32_t buflen, uint32_t *used,
                struct mrc_txdesc *d, uint32_t max)
{
    uint32_t n = 0;
    const uint32_t room_hdr = MRC_BTH_LEN + 40 + MRC_ICRC_LEN;
    /* 1. retransmissions, oldest hole first, on a different EV */
    for (uint32_t psn = q->una_psn; q->nlost && n < max && psn != q->next_psn; psn = psn_add(psn, 1)) {
        struct pent *pe = pe_at(q, psn);
        if (pe->st != PE_LOST)
            continue;
        /* the oldest hole may always go: the window must never block recovery */
        if (*used + room_hdr + pe->len > buflen || (psn != q->una_psn && !cwnd_allows(q, pe->len)))
            return (int)n;
        uint32_t ev;
        if (ev_pick(ep, q, now, pe->ev, &ev) < 0)
            break;
        pe->ev = ev;
        int len = build_data(q, psn, pe, 1, 1, buf + *used, buflen - *used);
        if (len < 0)
            break;
        emit(&d[n++], *used, len, ev, q, MRC_DSCP_RTX << 2 | MRC_ECN_ECT0, 1);
        *used += (uint32_t)len;
        pe->st = PE_INFLIGHT;
        pe->nrtx++;
        if (psn == q->una_psn && pe->nrtx > q->st.head_rtx_max)
            q->st.head_rtx_max = pe->nrtx;
        pe->sent_ns = now;
        q->nlost--;
        if (q->inflight == 0)
            q->last_progress_ns = now;
        q->inflight += pe->len;
        q->st.rtx_packets++;
        q->st.rtx_bytes += pe->len;
        q->st.plane_tx[(ev >> 16) & 15]++;
    }
    /* 2. probes of ASSUMED_BAD EVs */
    struct event *e;
    while (n < max && *used + 64 <= buflen && ev_probe_due(ep, q, now, &e)) {
        struct mrc_pkt p = {.opcode = MRC_OP_RELIABILITY_PROBE, .dqpn = q->dqpn, .probe_id = ++q->probe_seq,
                            .ev = e->ev, .t1 = now};
        int len = mrc_pkt_build(&p, NULL, buf + *used, buflen - *used);
        if (len < 0)
            break;
        emit(&d[n++], *used, len, e->ev, q, MRC_DSCP_CONTROL << 2, 0);
        *used += (uint32_t)len;
        ev_probe_sent(q, e, now);
        e->probe_id = q->probe_seq;
        q->st.probes_tx++;
    }
    /* 3. new data while the PSN window, the congestion window and max_wimm allow */
    int64_t next;
    while (n < max && (next = next_data_len(q)) >= 0) {
        struct wqe *w = &q->sq[q->sq_cur];
        uint32_t len = (uint32_t)next;
        if (*used + room_hdr + len > buflen || !cwnd_allows(q, len))
            break;
        uint32_t ev;
        if (ev_pick(ep, q, now, UINT32_MAX, &ev) < 0)
            break;
        if (q->cur_off == 0) {
            w->psn_first = q->next_psn;
            w->msn = q->next_msn++;
            if (w->wr.opcode == MRC_WR_WRITE_IMM)
                q->wimm_out++;
        }
        struct pent *pe = pe_at(q, q->next_psn);
        *pe = (struct pent){.sent_ns = now, .wqe = q->sq_cur, .off = q->cur_off, .ev = ev, .len = (uint16_t)len,
                            .st = PE_INFLIGHT, .nrtx = 0};
        /* ask for an ACK when this packet fills the congestion or PSN window:
         * otherwise the receiver would wait for ack_bytes and we for the RTO */
        uint64_t half = q->ccs.cwnd / 2 < q->a.ack_bytes / 2 ? q->ccs.cwnd / 2 : q->a.ack_bytes / 2;
        int full = q->inflight + 2ull * len > q->ccs.cwnd || psn_sub(q->next_psn, q->una_psn) + 1 >= q->win;
        int ackreq = full && q->since_ackreq + len >= half; /* at most one per half window */
        q->since_ackreq = ackreq ? 0 : q->since_ackreq + len;
        int plen = build_data(q, q->next_psn, pe, ackreq, 0, buf + *used, buflen - *used);
        if (plen < 0)
            break;
        emit(&d[n++], *used, plen, ev, q, MRC_DSCP_DATA << 2 | MRC_ECN_ECT0, 1);
        *used += (uint32_t)plen;
        if (q->inflight == 0)
            q->last_progress_ns = now;
        q->inflight += len;
        q->next_psn = psn_add(q->next_psn, 1);
        q->cur_off += len;
        q->st.tx_packets++;
        q->st.tx_bytes += len;
        q->st.plane_tx[(ev >> 16) & 15]++;
        if (q->cur_off >= w->total) {
            q->sq_cur = sq_next(q, q->sq_cur);
            q->cur_off = 0;
        }
    }
    return (int)n;
}

/* Complete, in order, every WR whose last PSN the cumulative ACK covers. */
void req_complete(struct mrc_ep *ep, struct qp *q)
{
    while (q->sq_head != q->sq_cur) {
        struct wqe *w = &q->sq[q->sq_head];
        uint32_t last = psn_add(w->psn_first, w->npkts - 1);
        if (!psn_lt(last, q->una_psn))
            break;
        struct mrc_wc wc = {.wr_id = w->wr.wr_id, .qpn = q->qpn, .status = MRC_WC_SUCCESS, .opcode = MRC_WC_WRITE,
                            .byte_len = (uint32_t)w->total};
        if (ep_push_wc(ep, &wc) < 0)
            break; /* CQ full: completes on a later ACK */
        if (w->wr.opcode == MRC_WR_WRITE_IMM)
            q->wimm_out--;
        w->done = 1;
        STORE_REL(q->sq_head, sq_next(q, q->sq_head));
    }
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

void req_on_sack(struct mrc_ep *ep, struct qp *q, const struct mrc_pkt *p, const struct mrc_meta *m, uint64_t now)
{
    q->st.sacks_rx++;
    if (p->sack_flags & MRC_SETH_PR)
        ev_on_probe_response(ep, q, p->ev, now);
    uint32_t cack = p->cack_psn;
    if (!psn_lt(cack, q->next_psn) && cack != psn_add(q->next_psn, MRC_PSN_MASK)) {
        ep->drops[MRC_DROP_STALE_ACK]++; /* acknowledges what was never sent */
        return;
    }
    uint32_t trig = psn_add(cack, (uint32_t)(int32_t)p->ack_psn_offset);
    uint64_t acked = 0, rtt = 0, rack = q->rack_sent_ns;
    uint32_t spurious = 0;
    uint32_t from = psn_lt(q->una_psn, psn_add(cack, 1)) ? q->una_psn : psn_add(cack, 1);
    /* cumulative part, then the bitmap, then the triggering PSN (received,
     * whether or not the bitmap reaches it) */
    const uint32_t los[3] = {from, psn_add(cack, (uint32_t)(int32_t)p->sack_base_off), trig};
    const uint32_t cnts[3] = {psn_le(q->una_psn, cack) ? psn_sub(psn_add(cack, 1), from) : 0, MRC_SACK_BITS,
                              (uint32_t)psn_lt(cack, trig)};
    for (int part = 0; part < 3; part++) {
        uint32_t lo = los[part], cnt = cnts[part];
        for (uint32_t i = 0; i < cnt; i++) {
            uint32_t psn = psn_add(lo, i);
            if (part == 1 && !(p->bitmap & (1ull << i)))
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
                spurious++;
                ev_on_alive(ep, q, pe->ev, now);
            } else {
                continue;
            }
            acked += pe->len;
            if (pe->nrtx == 0) {
                if (pe->sent_ns > rack)
                    rack = pe->sent_ns;
                if (psn == trig)
                    rtt = now - pe->sent_ns;
            }
            pe->st = PE_ACKED;
        }
    }
    if (rtt) {
        q->srtt = q->srtt ? (7 * q->srtt + rtt) / 8 : rtt;
        if (!q->min_rtt || rtt < q->min_rtt)
            q->min_rtt = rtt;
    }
    int ecn = (p->sack_flags & MRC_SETH_ECN) != 0;
    if (ecn) {
        q->st.ecn_marks++;
        ev_on_congestion(ep, q, p->ev, now);
    }
    q->cc->on_ack(q, acked, rtt, ecn, now);
    uint32_t old_una = q->una_psn;
    while (q->una_psn != q->next_psn && pe_at(q, q->una_psn)->st == PE_ACKED) {
        pe_at(q, q->una_psn)->st = PE_FREE;
        q->una_psn = psn_add(q->una_psn, 1);
    }
    if (q->una_psn != old_una) {
        q->last_progress_ns = now;
        q->retries = 0;
    }
    /* The reordering allowance starts at reorder_ns, doubles (up to half the
     * retry timer) on every SACK that shows a spurious loss, and halves back
     * after 32 RTTs without one (RACK's adaptive window, RFC 8985 6.2). */
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
    /* Loss: a hole that a packet sent more than the allowance after it has
     * already passed (packets on other paths overtook it for longer than
     * reordering explains): the hole's EV failed. */
    if (rack > q->rack_sent_ns) {
        q->rack_sent_ns = rack;
        for (uint32_t psn = q->una_psn; psn != q->next_psn; psn = psn_add(psn, 1)) {
            struct pent *pe = pe_at(q, psn);
            if (pe->nrtx == 0 && pe->sent_ns + reo >= rack)
                break;
            if (pe->st == PE_INFLIGHT && pe->sent_ns + reo < rack)
                mark_lost(ep, q, pe, now, 1);
        }
    }
    req_complete(ep, q);
}

/* Fail the WR at index bad with status; flush everything after it. */
static void fail_at(struct mrc_ep *ep, struct qp *q, uint32_t bad, uint8_t status)
{
    for (uint32_t i = q->sq_head, tail = LOAD_ACQ(q->sq_tail); i != bad && i != tail; i = sq_next(q, i)) {
        struct wqe *w = &q->sq[i];
        struct mrc_wc wc = {.wr_id = w->wr.wr_id, .qpn = q->qpn, .status = MRC_WC_WR_FLUSH_ERR,
                            .opcode = MRC_WC_WRITE, .byte_len = (uint32_t)w->total};
        ep_push_wc(ep, &wc);
        w->done = 1;
    }
    STORE_REL(q->sq_head, bad);
    qp_to_error(ep, q, status);
}

void req_on_nack(struct mrc_ep *ep, struct qp *q, const struct mrc_pkt *p, uint64_t now)
{
    q->st.nacks_rx++;
    uint32_t psn = p->nack_psn;
    if (psn_lt(psn, q->una_psn) || !psn_lt(psn, q->next_psn))
        return;
    struct pent *pe = pe_at(q, psn);
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
    case MRC_NACK_REMOTE_ACCESS:
        req_complete(ep, q);
        if (pe->st != PE_FREE)
            fail_at(ep, q, pe->wqe, MRC_WC_REM_ACCESS_ERR);
        break;
    default:
        break; /* out of window and the like: the timer recovers */
    }
}

void req_on_timer(struct mrc_ep *ep, struct qp *q, uint64_t now)
{
    if (q->una_psn == q->next_psn)
        return;
    if (now < q->last_progress_ns + rto_ns(q))
        return;
    q->retries++;
    q->st.timeouts++;
    if (q->retries > q->st.retries_max)
        q->st.retries_max = q->retries;
    if (q->a.exp_cnt != MRC_RETRY_FOREVER && q->retries > q->a.linear_cnt + q->a.exp_cnt) {
        req_complete(ep, q);
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
            mark_lost(ep, q, pe, now, psn == q->una_psn);
    }
    q->cc->on_loss(q, now);
    q->last_progress_ns = now;
}

uint64_t req_next_timer(struct mrc_ep *ep, struct qp *q, uint64_t now)
{
    uint64_t t = ev_next_timer(q, now);
    if (q->una_psn != q->next_psn) {
        uint64_t x = q->last_progress_ns + rto_ns(q);
        if (x < t)
            t = x < now ? now : x;
    }
    int64_t len = next_data_len(q);
    int want = q->nlost > 0 || (len >= 0 && cwnd_allows(q, (uint32_t)len));
    if (want) {
        /* sendable now if an EV is usable, else when the first SKIP ends */
        uint32_t usable = qp_usable_ports(ep, q);
        uint64_t skip_end = MRC_INF_NS;
        for (uint32_t s = 0; s < q->nslots; s++) {
            struct event *e = &q->evs[q->slot[s]];
            if (!(usable & (1u << (e->ev >> 16))))
                continue;
            if (e->state == MRC_EV_GOOD || (e->state == MRC_EV_SKIP && e->until_ns <= now))
                return now;
            if (e->state == MRC_EV_SKIP && e->until_ns < skip_end)
                skip_end = e->until_ns;
        }
        if (skip_end < t)
            t = skip_end;
    }
    return t;
}
