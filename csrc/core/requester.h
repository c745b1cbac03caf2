/* requester.c: work requests -> packets. Calls ev.c. */
#ifndef MRC_CORE_REQUESTER_H
#define MRC_CORE_REQUESTER_H
#include "core/types.h"

int req_poll_tx(struct mrc_ep *ep, struct qp *q, uint64_t now, uint8_t *buf, uint32_t buflen, uint32_t *used,
                struct mrc_txdesc *d, uint32_t max);
uint64_t req_next_tx(struct mrc_ep *ep, struct qp *q, uint64_t now);
int req_idle(struct qp *q);
#endif
