/* simfab_port.c: the fabric simulator's packets, egress FIFOs and PFC.
 * Lock: none (simfab.c). */
#ifndef MRC_SIM_SIMFAB_PORT_H
#define MRC_SIM_SIMFAB_PORT_H
#include "sim/fab.h"

/* A packet able to carry n bytes (NULL: out of memory); back to the free list. */
struct fpkt *fab_pkt_get(struct mrc_fab *f, uint32_t n);
void fab_pkt_put(struct mrc_fab *f, struct fpkt *k);
/* The packet joins egress port's FIFO now and reaches next one hop after it has left; a switch
 * port applies the queue's rules first (the packet may be trimmed, marked or dropped). */
void fab_enqueue(struct mrc_fab *f, struct fpkt *k, uint64_t port, uint32_t next);
/* Everything the port holds is lost (its link failed): counted as cut. */
void fab_port_flush(struct mrc_fab *f, uint64_t port);
/* The series: bytes to column col of the bucket of now. */
void fab_bucket_add(struct mrc_fab *f, uint32_t col, uint64_t bytes);

/* PFC (mrc_fab_cfg.pfc_xoff): k, which left a node by port, arrives where it goes (its ingress
 * there is port); a PAUSE or RESUME event (EVT_LINK with EVT_PFC_BIT) reaches its port. */
void pfc_out(struct mrc_fab *f, struct fpkt *k, uint64_t port);
void pfc_event(struct mrc_fab *f, uint32_t idx);
#endif
