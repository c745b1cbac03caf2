/* simfab_roce.c: the fabric simulator's hosts when they run RoCEv2
 * (mrc_fab_cfg.transport MRC_FAB_ROCE). Lock: none (simfab.c). */
#ifndef MRC_SIM_SIMFAB_ROCE_H
#define MRC_SIM_SIMFAB_ROCE_H
#include "sim/fab.h"

int roce_check_cfg(const struct mrc_fab_cfg *c, uint32_t mtu); /* 0, or -EINVAL: out of range */
int roce_add_flow(struct mrc_fab *f, struct fflow *fl);       /* its QPs on its source host */
void roce_post_more(struct mrc_fab *f, struct fflow *fl);     /* f->post_more under RoCE */
void roce_host_wake(struct mrc_fab *f, uint32_t h);           /* its NIC ports take their QPs' packets */
void roce_arrive(struct mrc_fab *f, struct fpkt *k);          /* k reached its node: forward or deliver */
void roce_flow_stats(const struct mrc_fab *f, const struct fflow *fl, struct mrc_qp_stats *qs);
void roce_free_flow(struct fflow *fl);
void roce_free(struct mrc_fab *f);
#endif
