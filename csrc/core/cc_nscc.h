/* cc_nscc.c: the congestion controls a QP runs (NSCC, and a fixed window), as a table of calls */
#ifndef MRC_CORE_CC_NSCC_H
#define MRC_CORE_CC_NSCC_H
#include "core/types.h"

struct cc_ops {
    void (*init)(struct qp *q);
    void (*on_ack)(struct qp *q, uint64_t bytes, uint64_t rtt_ns, int ecn, uint64_t now);
    void (*on_loss)(struct qp *q, uint64_t now);
};
/* The calls of an enum mrc_cc_algorithm (NULL: no such algorithm). */
const struct cc_ops *cc_ops_of(uint32_t algorithm);
/* The base RTT NSCC works with: the configured one, or the lowest RTT the QP
 * has seen when that is longer (cc_nscc.c). */
uint64_t cc_base_rtt(const struct qp *q);
#endif
