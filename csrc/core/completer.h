/* completer.c: SACK/NACK, loss detection, the retransmit timer,
 * completions. Calls qp.c, ev.c, the CC ops, ep.c. */
#ifndef MRC_CORE_COMPLETER_H
#define MRC_CORE_COMPLETER_H
#include "core/types.h"

void comp_on_sack(struct mrc_ep *ep, struct qp *q, const struct mrc_pkt *p, uint64_t now);
void comp_on_nack(struct mrc_ep *ep, struct qp *q, const struct mrc_pkt *p, uint64_t now);
void comp_on_timer(struct mrc_ep *ep, struct qp *q, uint64_t now);
uint64_t comp_next_timer(struct mrc_ep *ep, struct qp *q, uint64_t now);
void comp_complete(struct mrc_ep *ep, struct qp *q);
#endif
