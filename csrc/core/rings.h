/* rings.c: an endpoint's rings (CQs, the control ring, EV and asynchronous events) and posting, over ep.c's tables */
#ifndef MRC_CORE_RINGS_H
#define MRC_CORE_RINGS_H
#include "core/types.h"

int ep_cq_poll(struct mrc_ep *ep, uint32_t cqn, struct mrc_wc *wc, uint32_t max);
int ep_cq_push(struct mrc_ep *ep, uint32_t cqn, const struct mrc_wc *wc);
/* The two halves of ep_cq_push, for a caller that frees the completion's
 * queue slot in between: a completion seen by the application has freed
 * its slot, so the application may post again the moment it polls it. */
int ep_cq_room(struct mrc_ep *ep, uint32_t cqn, uint32_t qpn);
void ep_cq_put(struct mrc_ep *ep, uint32_t cqn, const struct mrc_wc *wc);
int ep_cq_pending(struct mrc_ep *ep);
struct ctrl *ep_ctrl_to(struct mrc_ep *ep, uint16_t peer, uint32_t ev);
int ctrl_put(struct mrc_ep *ep, struct ctrl *c, const struct mrc_pkt *p);
int ctrl_rebuild(struct mrc_ep *ep, struct ctrl *c, const struct mrc_pkt *p);
struct ctrl *ep_ctrl_pending(struct mrc_ep *ep, struct qp *q);
void ep_ctrl_mark_pending(struct mrc_ep *ep, struct ctrl *c, struct qp *q);
struct ctrl *ep_ctrl_peek(struct mrc_ep *ep);
void ep_ctrl_pop(struct mrc_ep *ep);
/* A control-ring slot for a packet of q to its peer on ev: a secured QP's
 * is sealed as it leaves (tx_ctrl). NULL, counted, when the ring is full. */
static inline struct ctrl *qp_ctrl_to(struct mrc_ep *ep, const struct qp *q, uint32_t ev)
{
    struct ctrl *c = ep_ctrl_to(ep, q->peer, ev);
    if (c)
        c->sec_qpn = q->sec ? q->qpn : 0;
    return c;
}
void ep_ev_event(struct mrc_ep *ep, const struct mrc_ev_event *e);
int ep_ev_events(struct mrc_ep *ep, struct mrc_ev_event *out, uint32_t max);
void ep_async_event(struct mrc_ep *ep, uint32_t type, uint32_t qpn, uint32_t info);
int ep_async_events(struct mrc_ep *ep, struct mrc_async_event *out, uint32_t max);
int ep_post_write(struct mrc_ep *ep, uint32_t qpn, const struct mrc_wr *wr, uint32_t n);
int ep_post_recv(struct mrc_ep *ep, uint32_t qpn, const uint64_t *wr_ids, uint32_t n);
#endif
