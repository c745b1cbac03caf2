/* Requester: work requests -> packets sprayed over the EV rotation within
 * the PSN window, the congestion window and max_wimm: retransmissions of
 * what the completer declared lost, probes of ASSUMED_BAD EVs, then new
 * data (protocol.md section 3, "Requester"). The completer (completer.c)
 * consumes SACKs and NACKs and runs the retransmit timer; the two share the
 * send window (struct pent) and never call each other.
 *
 * Lock: every function here runs with the endpoint lock held. Calls ev.c. */
#include "core/ep.h"
#include "core/ev.h"
#include "core/ev_pick.h"
#include "core/requester.h"
#include "core/sec.h"
#include "core/types.h"
#include "wire/csum.h"
#include "wire/wire.h"

/* Where len bytes from off of w's payload are: the pieces of its SGEs. */
static void segments(const struct wqe *w, uint32_t off, uint32_t len, struct sec_src *out)
{
    out->n = 0;
    for (uint32_t i = 0; i < w->wr.num_sge && len; i++) {
        const struct mrc_sge *s = &w->wr.sg_list[i];
        if (off >= s->length) {
            off -= s->length;
            continue;
        }
        uint32_t n = s->length - off < len ? s->length - off : len;
        out->p[out->n] = (const uint8_t *)(uintptr_t)s->addr + off;
        out->len[out->n++] = n;
        len -= n;
        off = 0;
    }
}

/* Copy [off, off+len) of a message's scatter list to dst; with crc, extend
 * *crc over the bytes in the same pass (each byte of the region read once),
 * and with sum add their ones'-complement sum too (csrc/wire/csum.h; dst is at
 * byte offset at of the packet). */
static void gather(const struct wqe *w, uint32_t off, uint32_t len, uint8_t *dst, uint32_t *crc, uint64_t *sum,
                   uint32_t at)
{
    struct sec_src src;
    segments(w, off, len, &src);
    for (uint32_t i = 0; i < src.n; i++) {
        uint32_t n = src.len[i];
        if (sum) {
            uint64_t piece = 0;
            *crc = mrc_crc32c_copy_sum(*crc, dst, src.p[i], n, &piece);
            *sum += csum_at(piece, at);
        } else if (crc) {
            *crc = mrc_crc32c_copy(*crc, dst, src.p[i], n);
        } else {
            memcpy(dst, src.p[i], n);
        }
        dst += n;
        at += n;
    }
}

/* A data packet into out; with sum (a packet in the clear), its
 * ones'-complement sum taken in the same pass as the copy and the ICRC. */
static int build_data(struct qp *q, uint32_t psn, const struct pent *pe, int ackreq, int rtx, uint8_t *out,
                      uint32_t cap, uint16_t *sum)
{
    const struct wqe *w = &q->sq[pe->wqe];
    int first = pe->off == 0, last = pe->off + pe->len >= w->total;
    int imm = w->wr.opcode == MRC_WR_WRITE_IMM;
    struct mrc_pkt p = {.pkey = q->pkey};
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
    p.msn_rq = w->msn_rq;
    p.va = w->wr.remote_addr + pe->off;
    p.rkey = w->wr.rkey;
    p.dma_len = (uint32_t)w->total;
    p.imm = w->wr.imm_data;
    p.payload_len = pe->len;
    p.sec_mode = sec_mode(q);
    int hl = mrc_pkt_build_hdr(&p, out, cap);
    if (hl < 0)
        return hl;
    if (q->sec) { /* the tag, not the ICRC: sealed once it is whole (encrypted on its way in) */
        struct sec_src src, *from = sec_wants_src(q) ? &src : NULL;
        if (from)
            segments(w, pe->off, pe->len, from);
        else
            gather(w, pe->off, pe->len, out + hl, NULL, NULL, 0);
        int len = mrc_pkt_finish(out, (uint32_t)hl + pe->len);
        return sec_seal(q, out, (uint32_t)len, (uint32_t)hl, ev_plane(pe->ev), from) < 0 ? -EIO : len;
    }
    /* the payload copied, the ICRC and the checksum extended over it in one pass */
    uint32_t crc = mrc_crc32c(0, out, (uint32_t)hl), end = (uint32_t)hl + pe->len;
    uint64_t s = sum ? csum_add(0, out, (size_t)hl) : 0;
    gather(w, pe->off, pe->len, out + hl, &crc, sum ? &s : NULL, (uint32_t)hl);
    put32(out + end, crc);
    if (sum)
        *sum = csum_fold16(s + csum_at(csum_add(0, out + end, MRC_ICRC_LEN), end));
    return (int)end + MRC_ICRC_LEN;
}

static void emit(struct mrc_ep *ep, uint64_t now, struct mrc_txdesc *d, uint32_t off, int len, uint32_t ev,
                 struct qp *q, uint8_t tclass, int data)
{
    ep_port_charge(ep, ev_plane(ev), (uint32_t)len, now);
    *d = (struct mrc_txdesc){.off = off, .len = (uint32_t)len, .ev = ev, .peer = q->peer, .tclass = tclass,
                             .is_data = (uint8_t)data};
}

/* A data packet's (of payload bytes, ICRC or tag after them): emit, with
 * the sum build_data took (none for a secured one). */
static void emit_data(struct mrc_ep *ep, uint64_t now, struct mrc_txdesc *d, uint32_t off, int len, uint32_t ev,
                      struct qp *q, uint8_t tclass, uint16_t sum, uint32_t payload)
{
    emit(ep, now, d, off, len, ev, q, tclass, 1);
    d->has_sum = ep->tx_sums && !q->sec;
    d->sum = sum;
    d->plen = (uint16_t)payload;
    d->hdr = (uint16_t)((uint32_t)len - payload - (q->sec ? MRC_TAG_LEN : MRC_ICRC_LEN));
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

/* The batch req_poll_tx fills: packets go at buf + *used, their descriptors at d[n] (n < max). */
struct txb {
    uint8_t *buf;
    uint32_t buflen, *used, n, max;
    struct mrc_txdesc *d;
};

enum { ROOM_HDR = MRC_BTH_LEN + 40 + MRC_ICRC_LEN }; /* the most a data packet adds to its payload */

/* 1. Retransmissions, oldest hole first, on a different EV. 0 when the
 * batch's buffer is full (nothing more may go this call), else 1. */
static int tx_retransmits(struct mrc_ep *ep, struct qp *q, uint64_t now, struct txb *b)
{
    for (uint32_t psn = q->una_psn; q->nlost && b->n < b->max && psn != q->next_psn; psn = psn_add(psn, 1)) {
        struct pent *pe = pe_at(q, psn);
        if (pe->st != PE_LOST)
            continue;
        /* the oldest hole may always go: the window must never block recovery */
        if (*b->used + ROOM_HDR + pe->len > b->buflen || (psn != q->una_psn && !cwnd_allows(q, pe->len)))
            return 0;
        uint32_t ev;
        if (ev_pick(ep, q, now, pe->ev, &ev) < 0)
            break;
        pe->ev = ev;
        uint16_t sum = 0;
        int len = build_data(q, psn, pe, 1, 1, b->buf + *b->used, b->buflen - *b->used, ep->tx_sums ? &sum : NULL);
        if (len < 0)
            break;
        emit_data(ep, now, &b->d[b->n++], *b->used, len, ev, q, MRC_DSCP_RTX << 2 | MRC_ECN_ECT0, sum, pe->len);
        *b->used += (uint32_t)len;
        pe->st = PE_INFLIGHT;
        pe->rnr = 0;
        if (pe->nrtx < 127)
            pe->nrtx++;
        if (psn == q->una_psn && pe->nrtx > q->st.head_rtx_max)
            q->st.head_rtx_max = pe->nrtx;
        pe->sent_ns = now;
        q->last_tx_ns = now;
        q->nlost--;
        if (q->inflight == 0)
            q->last_progress_ns = now;
        q->inflight += pe->len;
        q->st.rtx_packets++;
        q->st.rtx_bytes += pe->len;
        q->st.plane_tx[ev_plane(ev)]++;
    }
    return 1;
}

/* 2. Probes of ASSUMED_BAD EVs. */
static void tx_probes(struct mrc_ep *ep, struct qp *q, uint64_t now, struct txb *b)
{
    struct ev_entry *e;
    while (b->n < b->max && *b->used + 64 <= b->buflen && ev_probe_due(ep, q, now, &e)) {
        uint32_t pid = (uint32_t)ep_prf(ep, PRF_PROBE, (uint64_t)q->qpn << 32 | ++q->probe_seq) | 1;
        struct mrc_pkt p = {.opcode = MRC_OP_RELIABILITY_PROBE, .pkey = q->pkey, .dqpn = q->dqpn, .probe_id = pid,
                            .ev = e->ev, .t1 = now, .sec_mode = sec_mode(q)};
        uint8_t *out = b->buf + *b->used;
        int len = mrc_pkt_build(&p, NULL, out, b->buflen - *b->used);
        if (len < 0
            || (q->sec && sec_seal(q, out, (uint32_t)len, (uint32_t)len - MRC_TAG_LEN, ev_plane(e->ev), NULL) < 0))
            break;
        emit(ep, now, &b->d[b->n++], *b->used, len, e->ev, q, MRC_DSCP_CONTROL << 2, 0);
        *b->used += (uint32_t)len;
        ev_probe_sent(q, e, now);
        e->probe_id = pid;
        q->st.probes_tx++;
    }
}

/* A new packet of the current WQE goes at q->next_psn on ev: its message
 * numbers when it is the message's first, its window entry, whether it asks
 * for an ACK. Returns the window entry. */
static struct pent *new_packet(struct qp *q, struct wqe *w, uint32_t len, uint32_t ev, uint64_t now, uint32_t next,
                               int *ackreq)
{
    if (q->cur_off == 0) {
        w->psn_first = q->next_psn;
        w->msn = q->next_msn++;
        w->msn_rq = q->imm_sent; /* the receive this message will take, if it is a WRITE_IMM */
        if (w->wr.opcode == MRC_WR_WRITE_IMM) {
            q->wimm_out++;
            q->imm_sent++;
        }
    }
    struct pent *pe = pe_at(q, q->next_psn);
    *pe = (struct pent){.sent_ns = now, .wqe = q->sq_cur, .off = q->cur_off, .ev = ev, .len = (uint16_t)len,
                        .st = PE_INFLIGHT, .nrtx = 0};
    /* ask for an ACK when this packet fills the congestion or PSN window (leaves no room for the next
     * send, `next` bytes: a packet, or a whole burst): otherwise the receiver would wait for ack_bytes
     * and we for the RTO */
    uint64_t half = q->ccs.cwnd / 2 < q->a.ack_bytes / 2 ? q->ccs.cwnd / 2 : q->a.ack_bytes / 2;
    uint32_t more = len && next > len ? (next + len - 1) / len : 1; /* packets the next send takes */
    int full = q->inflight + len + next > q->ccs.cwnd || psn_sub(q->next_psn, q->una_psn) + 1 + more > q->win;
    *ackreq = full && q->since_ackreq + len >= half; /* at most one per half window */
    q->since_ackreq = *ackreq ? 0 : q->since_ackreq + len;
    return pe;
}

/* With buffers of k packets (ep->gso_k), what a new burst of full packets needs the windows to hold:
 * all of it, so that it leaves as one kernel buffer and not as two, the second after the next ACK.
 * It waits for that when the windows can hold a burst at all, the message has a burst's worth left,
 * something is in flight (its ACK comes) and no port is paced (a paced port sends no bursts). */
static uint32_t burst_bytes(const struct mrc_ep *ep, const struct qp *q, uint32_t len)
{
    const struct wqe *w = &q->sq[q->sq_cur];
    uint64_t burst = (uint64_t)ep->gso_k * len;
    if (ep->gso_k < 2 || ep->port_paced || len != q->a.mtu || w->total - q->cur_off < burst ||
        burst > q->ccs.cwnd || ep->gso_k > q->win)
        return len;
    return (uint32_t)burst;
}

static int burst_waits(const struct mrc_ep *ep, const struct qp *q, uint32_t len)
{
    uint32_t need = q->burst_left || q->inflight == 0 ? len : burst_bytes(ep, q, len);
    return need > len && (q->inflight + need > q->ccs.cwnd || psn_sub(q->next_psn, q->una_psn) + need / len > q->win);
}

/* 3. New data while the PSN window, the congestion window and max_wimm allow. */
static void tx_new_data(struct mrc_ep *ep, struct qp *q, uint64_t now, struct txb *b)
{
    int64_t next;
    while (b->n < b->max && (next = next_data_len(q)) >= 0) {
        struct wqe *w = &q->sq[q->sq_cur];
        uint32_t len = (uint32_t)next, ev;
        if (*b->used + ROOM_HDR + len > b->buflen || !cwnd_allows(q, len) || burst_waits(ep, q, len) ||
            ev_pick_burst(ep, q, now, len == q->a.mtu, &ev) < 0)
            break;
        int ackreq; /* burst_left as the pick left it: what follows this packet, not what it needed */
        struct pent *pe = new_packet(q, w, len, ev, now, q->burst_left ? len : burst_bytes(ep, q, len), &ackreq);
        uint16_t sum = 0;
        int plen = build_data(q, q->next_psn, pe, ackreq, 0, b->buf + *b->used, b->buflen - *b->used,
                              ep->tx_sums ? &sum : NULL);
        if (plen < 0)
            break;
        emit_data(ep, now, &b->d[b->n++], *b->used, plen, ev, q, MRC_DSCP_DATA << 2 | MRC_ECN_ECT0, sum, pe->len);
        *b->used += (uint32_t)plen;
        if (q->inflight == 0)
            q->last_progress_ns = now;
        q->last_tx_ns = now;
        q->inflight += len;
        q->next_psn = psn_add(q->next_psn, 1);
        q->cur_off += len;
        q->st.tx_packets++;
        q->st.tx_bytes += len;
        q->st.plane_tx[ev_plane(ev)]++;
        if (q->cur_off >= w->total) {
            q->sq_cur = ring_next(q->sq_cur, q->sq_size);
            q->cur_off = 0;
        }
    }
}

int req_poll_tx(struct mrc_ep *ep, struct qp *q, uint64_t now, uint8_t *buf, uint32_t buflen, uint32_t *used,
                struct mrc_txdesc *d, uint32_t max)
{
    struct txb b = {.buf = buf, .buflen = buflen, .used = used, .n = 0, .max = max, .d = d};
    ev_prefetch(ep, q);
    __builtin_prefetch(&q->sq[q->sq_cur]);
    __builtin_prefetch(pe_at(q, q->next_psn));
    if (tx_retransmits(ep, q, now, &b)) {
        tx_probes(ep, q, now, &b);
        tx_new_data(ep, q, now, &b);
    }
    return (int)b.n;
}

/* A retransmission may go now: the oldest lost packet is the head (which
 * always may) or fits the congestion window (req_poll_tx's rule). */
static int rtx_ready(struct qp *q)
{
    if (!q->nlost)
        return 0;
    for (uint32_t psn = q->una_psn; psn != q->next_psn; psn = psn_add(psn, 1)) {
        const struct pent *pe = pe_at(q, psn);
        if (pe->st == PE_LOST)
            return psn == q->una_psn || cwnd_allows(q, pe->len);
    }
    return 0;
}

/* q has nothing it may send: no data or retransmission the windows let go
 * (probes aside: they come with its EV timers). req_poll_tx then changes
 * nothing, and req_next_tx says never. */
int req_idle(struct qp *q)
{
    int64_t len = next_data_len(q);
    return !(rtx_ready(q) || (len >= 0 && cwnd_allows(q, (uint32_t)len)));
}

/* When q next wants the tx path: now if it has something to send and an EV
 * to send it on whose port may send, else when the first SKIP ends or the
 * first busy port is free; never (MRC_INF_NS) when it
 * has nothing to send or the windows hold it back (lost packets the window
 * holds back included: else the engine would spin until an ACK opens it). */
uint64_t req_next_tx(struct mrc_ep *ep, struct qp *q, uint64_t now)
{
    if (req_idle(q))
        return MRC_INF_NS;
    uint32_t usable = qp_usable_ports(ep, q), ready = ep_ports_ready(ep, now);
    uint64_t first = MRC_INF_NS, held = ev_held_until(q);
    if (held != MRC_INF_NS) /* the rotation waits for a port it owes turns (ev_pick) */
        return held > now ? held : now;
    if (usable && !(usable & ready)) /* every port it may use is busy: try again when the first is free */
        return ep_first_free(ep, usable);
    for (uint32_t s = 0; s < q->nslots; s++) {
        const struct ev_entry *e = &q->evs[q->slot[s]];
        uint32_t plane = ev_plane(e->ev);
        if (!(usable & (1u << plane)) || (e->state != MRC_EV_GOOD && e->state != MRC_EV_SKIP))
            continue;
        uint64_t at = e->state == MRC_EV_SKIP && e->until_ns > now ? e->until_ns : now;
        if (!(ready & (1u << plane)) && ep->port_free_ns[plane] > at)
            at = ep->port_free_ns[plane]; /* its port is busy until then */
        if (at <= now)
            return now;
        if (at < first)
            first = at;
    }
    return first;
}
