/* ep.c: an endpoint's object tables (MRs, PDs, QPs, CQs, peers) and what is kept of its active QPs.
 * Calls nothing but csrc/wire/ */
#ifndef MRC_CORE_EP_H
#define MRC_CORE_EP_H
#include "core/types.h"

int ep_create(const struct mrc_ep_attr *attr, const uint64_t key[2], struct mrc_ep **out);
uint64_t ep_prf(const struct mrc_ep *ep, uint64_t domain, uint64_t x);
int ep_pd_alloc(struct mrc_ep *ep, uint32_t *pdn);
int ep_pd_dealloc(struct mrc_ep *ep, uint32_t pdn);
int ep_pd_hold(struct mrc_ep *ep, uint32_t pdn, int hold);
void ep_set_peer_host(struct mrc_ep *ep, uint16_t peer, uint16_t host);
int ep_peer_in_use(const struct mrc_ep *ep, uint16_t p);
int ep_same_host(const struct mrc_ep *ep, uint16_t a, uint16_t b);
void ep_wqe_release(struct mrc_ep *ep, const struct wqe *w);
void ep_destroy(struct mrc_ep *ep);
void ep_drop(struct mrc_ep *ep, int why);
int ep_mr_reg(struct mrc_ep *ep, uint32_t pdn, void *addr, uint64_t length, uint32_t access, uint32_t *lkey,
              uint32_t *rkey);
int ep_mr_dereg(struct mrc_ep *ep, uint32_t lkey);
struct mr *ep_mr(struct mrc_ep *ep, uint32_t key);
int ep_cq_create(struct mrc_ep *ep, uint32_t depth, uint32_t *cqn);
int ep_cq_destroy(struct mrc_ep *ep, uint32_t cqn);
struct cq *ep_cq(struct mrc_ep *ep, uint32_t cqn);
int ep_cq_query(struct mrc_ep *ep, uint32_t cqn, struct mrc_cq_stats *st);
struct qp *ep_qp(struct mrc_ep *ep, uint32_t qpn);
int ep_qp_insert(struct mrc_ep *ep, struct qp *q);
void ep_qp_remove(struct mrc_ep *ep, struct qp *q);
int ep_qp_list(const struct mrc_ep *ep, uint32_t *out, uint32_t max); /* every QP's number (up to max): how many */
void ep_set_active(struct mrc_ep *ep, struct qp *q, int on);
void ep_dl_store(struct mrc_ep *ep, uint32_t idx, uint64_t dl, uint32_t ports);
uint64_t ep_dl_min(const struct mrc_ep *ep);
uint32_t ep_dl_ports_any(const struct mrc_ep *ep);
int ep_drops(struct mrc_ep *ep, uint64_t *counts, uint32_t n);
#endif
