/* simfab_app.c: the fabric simulator's application of WRITE flows, over
 * either transport. Lock: none (simfab.c). */
#ifndef MRC_SIM_SIMFAB_APP_H
#define MRC_SIM_SIMFAB_APP_H
#include "sim/fab.h"

/* The length of fl's next WRITE, or 0 when it must wait (all posted, its depth in flight, or the
 * WRITE a collective's next one waits for not arrived yet). */
uint64_t fab_next_len(const struct mrc_fab *f, const struct fflow *fl);
/* n WRITEs of fl, bytes in all, completed at its sender now. */
void fab_wr_done(struct mrc_fab *f, struct fflow *fl, uint64_t n, uint64_t bytes);
/* A collective's next WRITE of fl arrived whole at its receiver: the flows that wait for it post. */
void fab_arrived(struct mrc_fab *f, struct fflow *fl);
#endif
