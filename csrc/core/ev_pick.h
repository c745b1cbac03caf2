/* ev_pick.c: the rotation, which EV a packet takes. Calls ev.c, ep.c. */
#ifndef MRC_CORE_EV_PICK_H
#define MRC_CORE_EV_PICK_H
#include "core/types.h"

void ev_set_rotation(struct qp *q, uint32_t start);
uint64_t ev_held_until(const struct qp *q);
enum { EV_OWED = 2 }; /* turns a busy paced port may be owed before the rotation waits for it */
int ev_pick(struct mrc_ep *ep, struct qp *q, uint64_t now, uint32_t avoid_ev, uint32_t *ev_out);
int ev_pick_burst(struct mrc_ep *ep, struct qp *q, uint64_t now, int full, uint32_t *ev_out);
void ev_prefetch(const struct mrc_ep *ep, const struct qp *q);
#endif
