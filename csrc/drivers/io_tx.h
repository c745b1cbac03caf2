/* io_tx.c: the send side of a context's ports, one sendmmsg batch for
 * every port. Lock: the endpoint lock (the engine thread's loop, or an API
 * call), except io_queue_tx and io_flush_tx from the raw blaster, whose
 * context has no engine thread. */
#ifndef MRC_DRIVERS_IO_TX_H
#define MRC_DRIVERS_IO_TX_H
#include "drivers/io_types.h"

struct io;

void io_queue_tx(struct io *io, const struct mrc_txdesc *d, const uint8_t *pkt);
void io_flush_tx(struct io *io);
int io_tx_open(struct io *io);
void io_tx_close(struct io *io);
#endif
