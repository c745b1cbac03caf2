/* sec.c: a QP's keys; sealing a secured packet as it leaves (its number and
 * tag; the payload encrypted in ENCRYPT mode) and opening one as it
 * arrives (*out: the packet to act on, decrypted where it was encrypted;
 * counted and refused when it does not verify). */
#ifndef MRC_CORE_SEC_H
#define MRC_CORE_SEC_H
#include "core/types.h"

struct qp_sec;
int sec_set(struct mrc_ep *ep, struct qp *q, const struct mrc_qp_keys *k);
int sec_ctl_set(struct mrc_ep *ep, uint32_t qpn, const struct mrc_qp_keys *k);
void sec_free(struct qp *q);
uint8_t sec_mode(const struct qp *q);
/* hl: where the packet's payload starts (len - MRC_TAG_LEN: it has none);
 * port: the plane it leaves on (sealed into it: protocol.md 8); src: where
 * the payload is, when it is not in the packet yet (sec_wants_src: only an
 * ENCRYPT QP takes it, encrypting it straight into the packet), else NULL */
struct sec_src { const uint8_t *p[MRC_MAX_SGE]; uint32_t len[MRC_MAX_SGE]; uint32_t n; };
int sec_seal(struct qp *q, uint8_t *pkt, uint32_t len, uint32_t hl, uint32_t port, const struct sec_src *src);
int sec_wants_src(const struct qp *q);
/* for a packet to q when q or the packet is secured, arrived on port; a
 * trimmed one verifies by its header tag */
int sec_open(struct mrc_ep *ep, struct qp *q, const uint8_t *pkt, uint32_t len, const struct mrc_pkt *p,
             uint32_t port, int trimmed, const uint8_t **out);
#endif
