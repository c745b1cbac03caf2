/* evprobe.c: connectionless EV probes (mrc_ep_probe_*). Calls ep.c. */
#ifndef MRC_CORE_EVPROBE_H
#define MRC_CORE_EVPROBE_H
#include "core/types.h"

int evprobe_on_packet(struct mrc_ep *ep, struct qp *q, const struct mrc_pkt *p, const struct mrc_meta *m,
                      uint64_t now);
void evprobe_left(struct mrc_ep *ep, uint32_t id, uint64_t now);
#endif
