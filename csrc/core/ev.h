/* ev.c: EV sets and the EV state machine. Calls ep.c. */
#ifndef MRC_CORE_EV_H
#define MRC_CORE_EV_H
#include "core/types.h"

int ev_init(struct qp *q);
void ev_place_spares(struct qp *q, uint32_t seed);
void ev_transition(struct mrc_ep *ep, struct qp *q, struct ev_entry *e, uint8_t st, uint64_t now);
void ev_on_loss(struct mrc_ep *ep, struct qp *q, uint32_t ev, uint64_t sent_ns, uint64_t now);
void ev_on_congestion(struct mrc_ep *ep, struct qp *q, uint32_t ev, uint64_t now);
void ev_on_probe_response(struct mrc_ep *ep, struct qp *q, uint32_t ev, uint64_t now);
void ev_on_alive(struct mrc_ep *ep, struct qp *q, uint32_t ev, uint64_t now);
int ev_probe_due(struct mrc_ep *ep, struct qp *q, uint64_t now, struct ev_entry **out);
void ev_probe_sent(struct qp *q, struct ev_entry *e, uint64_t now);
uint64_t ev_next_timer(struct qp *q, uint64_t now);
struct ev_entry *ev_find(struct qp *q, uint32_t ev);
uint32_t ev_count_good(const struct qp *q);
uint32_t ev_count_bad(const struct qp *q);
int ev_ctl_list(struct mrc_ep *ep, uint32_t qpn, struct mrc_ev_info *out, uint32_t max);
int ev_ctl_set_state(struct mrc_ep *ep, uint32_t qpn, uint32_t ev, uint32_t state);
int ev_ctl_set_paths(struct mrc_ep *ep, uint32_t qpn, const uint32_t *npaths, uint32_t nplanes);
#endif
