/* qp.c: QP lifecycle and state machine. Calls ev.c, cc_nscc.c, ep.c. */
#ifndef MRC_CORE_QP_H
#define MRC_CORE_QP_H
#include "core/types.h"

size_t qp_state_bytes(const struct mrc_qp_attr *a);
int qp_create(struct mrc_ep *ep, const struct mrc_qp_attr *attr, uint32_t *qpn);
int qp_destroy(struct mrc_ep *ep, uint32_t qpn);
void qp_destroy_all(struct mrc_ep *ep);
int qp_modify(struct mrc_ep *ep, uint32_t qpn, uint32_t state, const struct mrc_qp_conn *conn);
int qp_query(struct mrc_ep *ep, uint32_t qpn, struct mrc_qp_stats *st);
void qp_to_error(struct mrc_ep *ep, struct qp *q, uint8_t first_status);
int qp_flush(struct mrc_ep *ep, struct qp *q, uint8_t first_status);
#endif
