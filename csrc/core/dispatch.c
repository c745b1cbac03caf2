/* The core's entry points, above the roles: a received packet is parsed,
 * checked and handed to the one role it is for (responder, completer, EV
 * probes, port status); poll_tx drains control packets, then runs each
 * active QP's retransmit timer and its requester; next_timer says when to
 * come back; a port change stops or restarts a plane. Nothing below calls
 * in here (types.h has the layering).
 *
 * Lock: none is taken here; the caller drives the endpoint from one thread
 * at a time (the engine thread holds the endpoint lock; a test or the
 * in-memory link drives a context that has no thread). */
#include "core/completer.h"
#include "core/dispatch.h"
#include "core/ep.h"
#include "core/ev.h"
#include "core/ev_pick.h"
#include "core/evprobe.h"
#include "core/qp.h"
#include "core/requester.h"
#include "core/responder.h"
#include "core/rings.h"
#include "core/sec.h"
#include "core/types.h"

/* ------------------------------------------------------------ input */
/* A peer's port status update for QP q (protocol.md 3, "Probes and ports"). */
static void on_port_status(struct mrc_ep *ep, struct qp *q, const struct mrc_pkt *p)
{
    if (q->remote_ports != p->port_bitmap)
        ep_async_event(ep, MRC_EVENT_PEER_PORTS, q->qpn, p->port_bitmap);
    q->remote_ports = p->port_bitmap;
}

/* The packet comes from q's connected peer (its host's addresses: the I/O
 * layer names the peer by source address), and a SACK or NACK names this
 * connection (its connection ids: the low 16 bits of both QP numbers). */
static int from_peer(const struct mrc_ep *ep, const struct qp *q, const struct mrc_pkt *p, const struct mrc_meta *m)
{
    if (!ep_same_host(ep, m->peer, q->peer))
        return 0;
    if (p->opcode == MRC_OP_SACK || p->opcode == MRC_OP_NACK)
        return p->scid == (uint16_t)q->dqpn && p->dcid == (uint16_t)q->qpn;
    return 1;
}

/* A QP in a partition takes only packets of it (InfiniBand's rule: the same
 * low 15 bits, and one end a full member); a QP in none takes any. */
static int pkey_ok(uint16_t mine, uint16_t theirs)
{
    return !mine || ((mine & 0x7FFF) == (theirs & 0x7FFF) && ((mine | theirs) & 0x8000));
}

int mrc_ep_input(struct mrc_ep *ep, const uint8_t *pkt, uint32_t len, const struct mrc_meta *m, uint64_t now)
{
    struct mrc_pkt p;
    /* only a data packet can be trimmed: any other packet is whole, ICRC and all */
    int trimmed = m->trimmed && len && mrc_opcode_is_data(pkt[0]);
    int rc = mrc_pkt_parse(pkt, len, trimmed, &p);
    if (rc < 0) {
        ep_drop(ep, MRC_DROP_MALFORMED);
        return rc;
    }
    if (!trimmed && p.tver != MRC_WIRE_SECURED && !mrc_pkt_icrc_ok(pkt, len)) { /* a secured one has its tag */
        ep_drop(ep, MRC_DROP_ICRC);
        return -EBADMSG;
    }
    int ev_probe = (p.opcode == MRC_OP_ENDPOINT_REQUEST || p.opcode == MRC_OP_ENDPOINT_RESPONSE) &&
                   p.ep_op == MRC_EP_EV_PROBE;
    if (ev_probe && !p.dqpn) {
        ep->dl_all = 1; /* connectionless: no QP (and what it learns may reach any) */
        return evprobe_on_packet(ep, NULL, &p, m, now);
    }
    struct qp *q = ep_qp(ep, p.dqpn);
    if (!q) {
        ep_drop(ep, MRC_DROP_UNKNOWN_QP);
        return -ENOENT;
    }
    if (q->state != MRC_QPS_RTR && q->state != MRC_QPS_RTS) {
        ep_drop(ep, MRC_DROP_QP_STATE);
        return -EINVAL;
    }
    if (!from_peer(ep, q, &p, m)) {
        ep_drop(ep, MRC_DROP_WRONG_PEER);
        return -EPERM;
    }
    if (!pkey_ok(q->pkey, p.pkey)) {
        ep_drop(ep, MRC_DROP_PKEY);
        return -EPERM;
    }
    /* a secured QP acts only on packets that verify (and only once): the
     * rest are counted and change nothing */
    if ((q->sec || p.sec_mode) && (rc = sec_open(ep, q, pkt, len, &p, m->port, trimmed, &pkt)) < 0)
        return rc;
    ep_dl_stale(ep, q->idx); /* whatever it is, what is kept of the QP is computed again */
    if (mrc_opcode_is_data(p.opcode)) {
        struct mrc_meta mm = *m;
        mm.trimmed = (uint8_t)trimmed;
        resp_on_data(ep, q, pkt, len, &p, &mm, now);
    } else if (p.opcode == MRC_OP_SACK) {
        comp_on_sack(ep, q, &p, now);
    } else if (p.opcode == MRC_OP_NACK) {
        comp_on_nack(ep, q, &p, now);
    } else if (p.opcode == MRC_OP_RELIABILITY_PROBE) {
        resp_on_probe(ep, q, &p, m);
    } else if (p.opcode == MRC_OP_ENDPOINT_REQUEST && p.ep_op == MRC_EP_PORT_STATUS) {
        on_port_status(ep, q, &p);
    } else if (ev_probe && q->sec) { /* the controller's, sealed under q's keys (evprobe.c) */
        ep->dl_all = 1;
        return evprobe_on_packet(ep, q, &p, m, now);
    } else {
        ep_drop(ep, MRC_DROP_MALFORMED);
        return -EPROTO;
    }
    return 0;
}

/* ------------------------------------------------------------ output */
/* When q's first timer fires: its EV probes, its retransmit timer, its
 * delayed SACK. */
static uint64_t qp_next(struct mrc_ep *ep, struct qp *q, uint64_t now)
{
    uint64_t x = ev_next_timer(q, now), y = comp_next_timer(ep, q, now), r = resp_next_timer(q);
    x = x < y ? x : y;
    return x < r ? x : r;
}

/* The ports of which one must be free for a visit of the tx path to q to
 * change anything (types.h, dl_ports): none when it has nothing it may send
 * (req_poll_tx returns before ev_pick), every one while its rotation is held
 * (ev_pick clears the hold), else the ports it may use (with none of them
 * free ev_pick gives up at once). */
static uint32_t qp_tx_ports(struct mrc_ep *ep, struct qp *q)
{
    if (req_idle(q))
        return 0;
    return ev_held_until(q) != MRC_INF_NS ? UINT32_MAX : qp_usable_ports(ep, q);
}

/* Whether a timer of the QP in slot idx is due at now, what is kept of it
 * computed again first when something changed the QP (its bit in dl_bits).
 * The bit is taken before the QP is read: a post that lands meanwhile sets
 * it again. */
static int qp_due(struct mrc_ep *ep, uint32_t idx, uint64_t now)
{
    uint64_t *w = &ep->dl_bits[idx / 64], bit = 1ull << (idx % 64);
    if ((__atomic_load_n(w, __ATOMIC_RELAXED) & bit) && (__atomic_fetch_and(w, ~bit, __ATOMIC_SEQ_CST) & bit)) {
        struct qp *q = ep->qps[idx];
        int rts = q && q->state == MRC_QPS_RTS;
        ep_dl_store(ep, idx, rts ? qp_next(ep, q, now) : MRC_INF_NS, rts ? qp_tx_ports(ep, q) : 0);
    }
    return ep->dl[idx] <= now;
}

/* Every QP something changed since the last look computed again now, found
 * by its bit (not by visiting every QP): after this the heap's top is the
 * first kept time of all, and ep_dl_ports_any the ports any QP needs. A
 * QP's kept time depends on that QP and the endpoint's ports alone, so
 * computing it here or at its turn in a walk gives the same. */
static void dl_take_dirty(struct mrc_ep *ep, uint64_t now)
{
    for (uint32_t w = 0; w < (ep->a.max_qps + 63) / 64; w++)
        for (uint64_t m = __atomic_load_n(&ep->dl_bits[w], __ATOMIC_RELAXED); m; m &= m - 1)
            qp_due(ep, w * 64 + (uint32_t)__builtin_ctzll(m), now); /* takes the bit */
}

/* No active QP has a timer due and none may send on a port that is free:
 * a walk of the tx path would visit none. */
static int all_still(struct mrc_ep *ep, uint64_t now)
{
    dl_take_dirty(ep, now);
    return ep_dl_min(ep) > now && !(ep_dl_ports_any(ep) & ep_ports_ready(ep, now));
}

/* A visit of the tx path to the QP in slot idx would change nothing: no
 * timer is due and none of the ports it needs is free. */
static int qp_still(struct mrc_ep *ep, uint32_t idx, uint64_t now)
{
    if (qp_due(ep, idx, now)) /* (first: it computes dl_ports again when the QP changed) */
        return 0;
    uint32_t ports = ep->dl_ports[idx];
    return !ports || !(ports & ep_ports_ready(ep, now));
}

/* Something of the endpoint's changed (an API call, a port, a CQ's room):
 * every active QP's time is computed again. */
static void dl_take_all(struct mrc_ep *ep)
{
    if (!ep->dl_all)
        return;
    ep->dl_all = 0;
    for (uint32_t i = 0; i < ep->nact; i++)
        ep_dl_stale(ep, ep->act[i]);
}

/* Completions that waited for room in a CQ go in once the application has
 * polled; a QP in ERROR goes on flushing. */
static void offer_waiting_completions(struct mrc_ep *ep)
{
    uint32_t polls = __atomic_load_n(&ep->cq_polls, __ATOMIC_ACQUIRE);
    if (!ep->cq_waiters || polls == ep->cq_polls_seen)
        return;
    ep->cq_polls_seen = polls;
    ep->dl_all = 1; /* completions go on: a QP that waited may send again */
    for (uint32_t i = 0; i < ep->a.max_qps && ep->cq_waiters; i++) {
        struct qp *q = ep->qps[i];
        if (!q || !(q->scq_wait || q->rcq_wait))
            continue;
        if (q->state == MRC_QPS_ERROR) {
            qp_flush(ep, q, MRC_WC_WR_FLUSH_ERR);
            continue;
        }
        if (q->scq_wait)
            comp_complete(ep, q);
        if (q->rcq_wait)
            resp_retry_completions(ep, q);
    }
}

/* Control packets waiting in the endpoint's queue, from d[n] on. */
static uint32_t tx_ctrl(struct mrc_ep *ep, uint64_t now, uint8_t *buf, uint32_t buflen, uint32_t *used,
                        struct mrc_txdesc *d, uint32_t n, uint32_t max)
{
    struct ctrl *c;
    while (n < max && (c = ep_ctrl_peek(ep)) != NULL) {
        if (!c->len) { /* a SACK whose update could not be built: nothing to send */
            ep_ctrl_pop(ep);
            continue;
        }
        if (*used + c->len > buflen)
            break;
        memcpy(buf + *used, c->buf, c->len);
        if (c->sec_qpn) { /* a secured QP's: numbered and sealed now, in the order packets leave */
            struct qp *q = ep_qp(ep, c->sec_qpn);
            if (!q || !q->sec || sec_seal(q, buf + *used, c->len, c->len - MRC_TAG_LEN, ev_plane(c->ev), NULL) < 0) {
                ep_ctrl_pop(ep); /* its QP is gone, or changed: nothing leaves unsealed */
                continue;
            }
        }
        d[n] = (struct mrc_txdesc){.off = *used, .len = c->len, .ev = c->ev, .peer = c->peer, .tclass = c->tclass};
        ep_port_charge(ep, ev_plane(c->ev), c->len, now); /* control packets never wait, but take the wire */
        if (c->probe_id)
            evprobe_left(ep, c->probe_id, now); /* the RTT starts when it leaves */
        *used += c->len;
        n++;
        ep_ctrl_pop(ep);
    }
    return n;
}

/* Data of every active QP in turn, at most EP_TX_QUANTUM packets each per
 * round, rounds until nothing more goes; the next call starts after the
 * last QP that sent (from d[n] on), not one QP further whoever had sent:
 * that way the first QP with data after a run of QPs with nothing to send
 * (an all-to-all's receiving QPs) would be served first every time and
 * take every free port, and the others' packets would wait past their
 * retransmit timers. */
enum { EP_TX_QUANTUM = 4 };
static uint32_t tx_data(struct mrc_ep *ep, uint64_t now, uint8_t *buf, uint32_t buflen, uint32_t *used,
                        struct mrc_txdesc *d, uint32_t n, uint32_t max)
{
    uint32_t nq = ep->nact, last = UINT32_MAX;
    if (nq && all_still(ep, now)) { /* what the walk would do: visit none, move on one */
        ep->rr_qp = (ep->rr_qp + 1) % ep->nact;
        return n;
    }
    for (int round = 0; n < max && ep->nact; round++) {
        uint32_t before = n;
        if (round && all_still(ep, now)) /* this round would visit none */
            break;
        for (uint32_t k = 0; k < nq && n < max && ep->nact; k++) {
            uint32_t slot = (ep->rr_qp + k) % ep->nact, idx = ep->act[slot];
            if (qp_still(ep, idx, now)) /* its state stays unread */
                continue;
            struct qp *q = ep->qps[idx];
            if (!q || q->state != MRC_QPS_RTS)
                continue;
            uint32_t room = max - n < EP_TX_QUANTUM ? max - n : EP_TX_QUANTUM;
            uint32_t got = (uint32_t)req_poll_tx(ep, q, now, buf, buflen, used, d + n, room);
            ep_dl_stale(ep, idx);
            if (got)
                last = slot;
            n += got;
            /* its packets took the ports: when none is free for any QP and no
             * timer is due, the rest of the round would visit none */
            if (got && all_still(ep, now))
                break;
        }
        if (n == before)
            break;
    }
    if (ep->nact)
        ep->rr_qp = last == UINT32_MAX ? (ep->rr_qp + 1) % ep->nact : (last + 1) % ep->nact;
    return n;
}

/* Every active QP's delayed SACK and retransmit timer, whatever goes out
 * in this call, not only those of the QPs the data loop visits: a batch
 * filled by control packets (a receiver of many flows sends a SACK for
 * every few packets) visits none, and a delayed SACK must not wait until
 * its sender's retransmit timer fires. */
static void run_timers(struct mrc_ep *ep, uint64_t now)
{
    dl_take_dirty(ep, now);
    if (ep_dl_min(ep) > now) /* none is due */
        return;
    for (uint32_t i = 0; i < ep->nact;) {
        uint32_t idx = ep->act[i];
        struct qp *q = qp_due(ep, idx, now) ? ep->qps[idx] : NULL;
        if (q && q->state == MRC_QPS_RTS) {
            resp_on_timer(ep, q, now);
            comp_on_timer(ep, q, now); /* may end the QP: it leaves the list, the last one takes its place */
            ep_dl_stale(ep, idx);
        }
        if (i < ep->nact && ep->act[i] == idx)
            i++;
    }
}

int mrc_ep_poll_tx(struct mrc_ep *ep, uint64_t now, uint8_t *buf, uint32_t buflen, struct mrc_txdesc *d, uint32_t max)
{
    uint32_t n = 0, used = 0;
    if (LOAD_SC(ep->flush_pending) && __atomic_exchange_n(&ep->flush_pending, 0, __ATOMIC_SEQ_CST)) {
        for (uint32_t i = 0; i < ep->a.max_qps; i++)
            if (ep->qps[i] && ep->qps[i]->state == MRC_QPS_ERROR)
                qp_flush(ep, ep->qps[i], MRC_WC_WR_FLUSH_ERR);
    }
    offer_waiting_completions(ep);
    dl_take_all(ep);
    run_timers(ep, now);
    if (ep->data_first) {
        n = tx_data(ep, now, buf, buflen, &used, d, n, max);
        return (int)tx_ctrl(ep, now, buf, buflen, &used, d, n, max);
    }
    /* control packets first: they unblock the peer */
    n = tx_ctrl(ep, now, buf, buflen, &used, d, n, max);
    return (int)tx_data(ep, now, buf, buflen, &used, d, n, max);
}

uint64_t mrc_ep_next_timer(struct mrc_ep *ep, uint64_t now)
{
    if (ep_ctrl_peek(ep))
        return now;
    dl_take_all(ep);
    dl_take_dirty(ep, now);
    uint32_t any = ep_dl_ports_any(ep);
    if (!(any & ep_ports_ready(ep, now))) {
        /* every QP waits for its first timer or for the first of its ports
         * to be free: the earliest of both over all, without a walk */
        uint64_t t = ep_dl_min(ep), x = ep_first_free(ep, any);
        t = t < now ? now : t;
        return x < t ? x : t;
    }
    uint64_t t = MRC_INF_NS;
    for (uint32_t i = 0; i < ep->nact; i++) {
        uint32_t idx = ep->act[i];
        qp_due(ep, idx, now);
        uint64_t x, y = ep->dl[idx] < now ? now : ep->dl[idx];
        uint32_t ports = ep->dl_ports[idx];
        if (!ports || !(ports & ep_ports_ready(ep, now))) { /* as req_next_tx: when its first port is free */
            x = ep_first_free(ep, ports);
        } else {
            struct qp *q = ep->qps[idx];
            if (!q || q->state != MRC_QPS_RTS)
                continue;
            x = req_next_tx(ep, q, now);
        }
        x = x < y ? x : y;
        if (x < t)
            t = x;
    }
    return t;
}

/* The kept times' invariant, for tests: how many active QPs' kept time,
 * not due to be computed again, is later than the exact one now (a QP the
 * tx path would leave waiting). 0 always. */
int mrc_ep_check_times(struct mrc_ep *ep, uint64_t now)
{
    int late = 0;
    for (uint32_t i = 0; i < ep->nact; i++) {
        uint32_t idx = ep->act[i];
        struct qp *q = ep->qps[idx];
        if (ep->dl_all || (__atomic_load_n(&ep->dl_bits[idx / 64], __ATOMIC_RELAXED) >> (idx % 64) & 1) || !q ||
            q->state != MRC_QPS_RTS)
            continue;
        late += qp_next(ep, q, now) < ep->dl[idx] || ep->dl_ports[idx] != qp_tx_ports(ep, q);
    }
    return late;
}

/* The I/O wraps packets in UDP: the core sums each data packet in the pass
 * that copies its payload (mrc_txdesc.sum), so the UDP checksum needs no
 * pass of its own. */
void mrc_ep_want_tx_sums(struct mrc_ep *ep, int on) { ep->tx_sums = (uint8_t)!!on; }

int mrc_ep_set_gso(struct mrc_ep *ep, uint32_t k)
{
    if (k > MRC_GSO_MAX_K)
        return -EINVAL;
    ep->gso_k = (uint8_t)k;
    return 0;
}

/* ------------------------------------------------------------ ports */
/* The port of plane sends at most rate_bps (frames: the packet with its
 * Ethernet, IPv6 and UDP headers, as a qdisc counts them); 0: no limit. */
int mrc_ep_set_port_rate(struct mrc_ep *ep, uint32_t plane, uint64_t rate_bps)
{
    if (plane >= ep->a.planes || plane >= MRC_MAX_PLANES || (rate_bps && rate_bps < 8000))
        return -EINVAL; /* below 1 kB/s a frame would take longer than a retransmit timer can wait */
    ep->dl_all = 1; /* every QP's next packet waits for its port differently */
    if (!rate_bps) {
        ep->port_paced &= ~(1u << plane);
        return 0;
    }
    ep->port_ps_per_byte[plane] = 8000000000000ull / rate_bps;
    if (!ep->port_ps_per_byte[plane])
        ep->port_ps_per_byte[plane] = 1;
    ep->port_paced |= 1u << plane;
    return 0;
}

/* A local port (plane) went down or up: stop using its EVs at once and tell
 * every connected peer through a port status update (protocol.md 3). */
int mrc_ep_set_port(struct mrc_ep *ep, uint32_t plane, int up, uint64_t now)
{
    if (plane >= ep->a.planes)
        return -EINVAL;
    if (!!(ep->port_up & (1u << plane)) != !!up)
        ep_async_event(ep, up ? MRC_EVENT_PORT_ACTIVE : MRC_EVENT_PORT_ERR, 0, plane);
    ep->dl_all = 1; /* the ports every QP may use */
    if (up)
        ep->port_up |= 1u << plane;
    else
        ep->port_up &= ~(1u << plane);
    for (uint32_t i = 0; i < ep->a.max_qps; i++) {
        struct qp *q = ep->qps[i];
        if (!q || (q->state != MRC_QPS_RTS && q->state != MRC_QPS_RTR))
            continue;
        for (uint32_t pl = 0; pl < q->a.planes; pl++) {
            if (!(ep->port_up & (1u << pl)))
                continue;
            struct ctrl *c = qp_ctrl_to(ep, q, ev_make(pl, 0));
            if (!c)
                break;
            ctrl_put(ep, c, &(struct mrc_pkt){.opcode = MRC_OP_ENDPOINT_REQUEST, .pkey = q->pkey, .dqpn = q->dqpn,
                                              .sec_mode = sec_mode(q), .ep_op = MRC_EP_PORT_STATUS,
                                              .port_bitmap = ep->port_up, .t1 = now});
        }
    }
    return 0;
}

/* ------------------------------------------------------------ the endpoint's shared state, by name
 * What a context (engine.c, verbs.c) reads and changes of its endpoint
 * beyond packets and timers. Lock: the endpoint lock, except where said. */

/* An API call ran: it may have changed any QP's times and ports; every kept
 * time is computed again before use (types.h, dl). */
void disp_api_done(struct mrc_ep *ep) { ep->dl_all = 1; }

/* Which CQs got completions since the last call (bit n: CQ n), cleared. */
uint64_t disp_take_cq_dirty(struct mrc_ep *ep)
{
    uint64_t d = ep->cq_dirty;
    ep->cq_dirty = 0;
    return d;
}

int disp_cq_dirty(const struct mrc_ep *ep) { return ep->cq_dirty != 0; }

/* poll_tx sends data before control packets (an application thread's pass:
 * its answer leaves ahead of the ACKs). */
void disp_set_data_first(struct mrc_ep *ep, int on) { ep->data_first = !!on; }

/* Lock: none (an atomic read): QPs whose completions wait for CQ room. */
uint32_t disp_cq_waiters(const struct mrc_ep *ep) { return __atomic_load_n(&ep->cq_waiters, __ATOMIC_RELAXED); }

/* Lock: none (an atomic read): bumped on every EV probe answer. */
uint32_t disp_probe_answered(const struct mrc_ep *ep)
{
    return __atomic_load_n(&ep->probe_answered, __ATOMIC_ACQUIRE);
}

/* How many asynchronous events were ever queued: changes when one is. */
uint32_t disp_aeq_seq(const struct mrc_ep *ep) { return ep->aeq_tail; }

int disp_port_up(const struct mrc_ep *ep, uint32_t plane) { return plane < 32 && (ep->port_up >> plane) & 1; }

void disp_stats(const struct mrc_ep *ep, struct mrc_ep_stats *st) { *st = ep->st; }

/* The limits the endpoint enforces and its capabilities (ports: the caller's). */
void disp_device_attr(const struct mrc_ep *ep, struct mrc_device_attr *out)
{
    *out = (struct mrc_device_attr){
        .planes = ep->a.planes, .max_qps = ep->a.max_qps, .max_cqs = MRC_MAX_CQS, .max_sge = MRC_MAX_SGE,
        .max_mpr = MRC_MAX_MPR, .mpr_granularity = MRC_MPR_UNIT, .max_wimm = MRC_MAX_WIMM,
        .max_timeout = MRC_MAX_TIMEOUT, .max_linear_cnt = MRC_MAX_LINEAR_CNT, .max_exp_cnt = MRC_RETRY_FOREVER,
        .max_qp_hints = 0, .min_mtu = MRC_MIN_MTU, .max_mtu = MRC_MAX_MTU, .max_ev_count = MRC_MAX_EV_COUNT,
        .caps = MRC_CAP_TRIM_NACK};
}
