/* responder.c: validate, place, answer. Calls ep.c. */
#ifndef MRC_CORE_RESPONDER_H
#define MRC_CORE_RESPONDER_H
#include "core/types.h"

void resp_on_data(struct mrc_ep *ep, struct qp *q, const uint8_t *pkt, uint32_t len, const struct mrc_pkt *p,
                  const struct mrc_meta *m, uint64_t now);
void resp_on_probe(struct mrc_ep *ep, struct qp *q, const struct mrc_pkt *p, const struct mrc_meta *m);
void resp_retry_completions(struct mrc_ep *ep, struct qp *q);
void resp_on_timer(struct mrc_ep *ep, struct qp *q, uint64_t now);
uint64_t resp_next_timer(const struct qp *q);
void resp_flush(struct mrc_ep *ep, struct qp *q); /* the SACK still owed, queued before the QP goes */
#endif
