/* dispatch.c, beyond the entry points of mrc_manual.h: the endpoint's shared
 * state, by name, for a context (engine.c, verbs.c). */
#ifndef MRC_CORE_DISPATCH_H
#define MRC_CORE_DISPATCH_H
#include "core/types.h"

void disp_api_done(struct mrc_ep *ep);
uint64_t disp_take_cq_dirty(struct mrc_ep *ep);
int disp_cq_dirty(const struct mrc_ep *ep);
void disp_set_data_first(struct mrc_ep *ep, int on);
uint32_t disp_cq_waiters(const struct mrc_ep *ep);
uint32_t disp_probe_answered(const struct mrc_ep *ep);
uint32_t disp_aeq_seq(const struct mrc_ep *ep);
int disp_port_up(const struct mrc_ep *ep, uint32_t plane);
void disp_stats(const struct mrc_ep *ep, struct mrc_ep_stats *st);
void disp_device_attr(const struct mrc_ep *ep, struct mrc_device_attr *out);
#endif
