/* EV probes of the controller (protocol.md 3, mrc_ctl_ep_batch_send_wait):
 * connectionless ENDPOINT_REQUESTs on a chosen EV to a peer, answered by
 * the peer's endpoint on the EV they came on; the table of probes in flight
 * and their round trips. (A QP's own probes of its ASSUMED_BAD EVs are
 * RELIABILITY_PROBEs: requester.c and responder.c.) A probe to a peer
 * with which a secured QP is connected goes through that QP, sealed under
 * its keys, and only an answer that comes back through it, verified, counts
 * (protocol.md 8): a forger on the path cannot make a dead path look alive.
 *
 * Lock: every function here runs with the endpoint lock held. Calls ep.c. */
#include "core/ep.h"
#include "core/evprobe.h"
#include "core/rings.h"
#include "core/sec.h"

/* A secured QP of ours that can send, to the host of peer (any of its
 * addresses): the probes to that host go through it. */
static struct qp *sealed_qp_to(struct mrc_ep *ep, uint16_t peer)
{
    for (uint32_t i = 0; i < ep->nact; i++) {
        struct qp *q = ep->qps[ep->act[i]];
        if (q->sec && ep->peer_host[q->peer] == ep->peer_host[peer])
            return q;
    }
    return NULL;
}

/* A probe packet (request or answer) to peer on ev, through q when it is
 * secured (sealed as it leaves) and in the clear otherwise. */
static int probe_put(struct mrc_ep *ep, struct qp *q, uint16_t peer, uint32_t ev, struct mrc_pkt *p)
{
    struct ctrl *c = ep_ctrl_to(ep, peer, ev);
    if (!c)
        return -ENOSPC;
    if (q && q->sec) {
        c->sec_qpn = q->qpn;
        p->dqpn = q->dqpn;
        p->pkey = q->pkey;
        p->sec_mode = sec_mode(q);
    }
    if (p->opcode == MRC_OP_ENDPOINT_REQUEST)
        c->probe_id = p->probe_id;
    return ctrl_put(ep, c, p);
}

int mrc_ep_probe_send(struct mrc_ep *ep, uint16_t peer, uint32_t ev, uint64_t now, uint32_t *id)
{
    uint32_t plane = ev_plane(ev);
    if (plane >= ep->a.planes)
        return -EINVAL;
    if (!(ep->port_up & (1u << plane)))
        return -ENETDOWN;
    /* the low bits pick the table entry in turn; the rest are the PRF's, so
     * an answer cannot be forged by counting (0 is "no probe") */
    uint32_t seq = ep->probe_seq + 1;
    uint32_t pid = ((uint32_t)ep_prf(ep, PRF_PROBE, seq) & ~(uint32_t)(MRC_PROBE_MAX - 1)) | (seq % MRC_PROBE_MAX);
    if (!pid)
        pid = MRC_PROBE_MAX;
    struct probe *pr = &ep->probes[pid % MRC_PROBE_MAX];
    if (pr->state != PROBE_FREE)
        return -EBUSY;
    struct qp *q = sealed_qp_to(ep, peer);
    int rc = probe_put(ep, q, peer, ev, &(struct mrc_pkt){.opcode = MRC_OP_ENDPOINT_REQUEST, .probe_id = pid,
                                                          .ep_op = MRC_EP_EV_PROBE, .port_bitmap = ep->port_up,
                                                          .t1 = now});
    if (rc < 0)
        return rc;
    ep->probe_seq = seq;
    *pr = (struct probe){.id = pid, .ev = ev, .peer = peer, .qpn = q ? q->qpn : 0, .state = PROBE_PENDING,
                         .t_sent = now};
    *id = pid;
    return 0;
}

int mrc_ep_probe_result(struct mrc_ep *ep, uint32_t id, struct mrc_probe_result *out)
{
    struct probe *pr = &ep->probes[id % MRC_PROBE_MAX];
    if (!id || pr->id != id || pr->state == PROBE_FREE)
        return -ENOENT;
    if (pr->state == PROBE_PENDING)
        return 0;
    *out = (struct mrc_probe_result){.id = id, .ev = pr->ev, .peer = pr->peer, .port = pr->port, .rtt_ns = pr->rtt};
    pr->state = PROBE_FREE;
    return 1;
}

int mrc_ep_probe_cancel(struct mrc_ep *ep, uint32_t id)
{
    struct probe *pr = &ep->probes[id % MRC_PROBE_MAX];
    if (!id || pr->id != id || pr->state == PROBE_FREE)
        return -ENOENT;
    pr->state = PROBE_FREE;
    return 0;
}

/* The request left now (poll_tx): its RTT starts here. */
void evprobe_left(struct mrc_ep *ep, uint32_t id, uint64_t now)
{
    struct probe *pr = &ep->probes[id % MRC_PROBE_MAX];
    if (pr->id == id)
        pr->t_sent = now;
}

/* A request: answer on the EV it came in on, with the plane it arrived on
 * (through q, sealed, when it came through q). An answer: the RTT of the
 * probe it names, when it came the way the probe went. q: the secured QP
 * the packet came through, verified (dispatch.c); NULL: in the clear. */
int evprobe_on_packet(struct mrc_ep *ep, struct qp *q, const struct mrc_pkt *p, const struct mrc_meta *m,
                      uint64_t now)
{
    if (p->opcode == MRC_OP_ENDPOINT_REQUEST)
        /* back on the plane it came on (one of our paths there), echoing its
         * EV; no room: the prober times out, as on a congested path */
        return probe_put(ep, q, m->peer, ev_make(m->port, ev_entropy(m->ev)),
                         &(struct mrc_pkt){.opcode = MRC_OP_ENDPOINT_RESPONSE, .probe_id = p->probe_id,
                                           .ep_op = MRC_EP_EV_PROBE, .rx_port = m->port, .port_bitmap = ep->port_up,
                                           .ev = m->ev, .t1 = p->t1, .t2 = 0});
    struct probe *pr = &ep->probes[p->probe_id % MRC_PROBE_MAX];
    if (!p->probe_id || pr->id != p->probe_id || pr->state != PROBE_PENDING || pr->peer != m->peer ||
        pr->qpn != (q ? q->qpn : 0)) {
        ep_drop(ep, MRC_DROP_STALE_PROBE);
        return -ENOENT;
    }
    pr->rtt = now > pr->t_sent ? now - pr->t_sent : 0;
    pr->port = (uint8_t)m->port;
    pr->state = PROBE_ANSWERED;
    __atomic_add_fetch(&ep->probe_answered, 1, __ATOMIC_RELEASE);
    return 0;
}
