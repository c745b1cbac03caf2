/* io_rx.c: what the raw ring (io_packet.c) and the ring of buffers
 * (io_gso.c) share of receiving. Lock: as io_packet.c's. */
#ifndef MRC_DRIVERS_IO_RX_H
#define MRC_DRIVERS_IO_RX_H
#include "drivers/io_types.h"

struct io;

/* Classic BPF on a port's socket: IPv6, UDP, destination port 4791, and a
 * frame a raw ring frame holds (big 0) or longer (big 1). */
int io_attach_filter(int fd, int big);
/* A received frame's Ethernet, IPv6 and UDP headers for port p: ours, from a
 * known peer. Fills m and returns the UDP length, or -1 (counted as foreign). */
int io_rx_head(struct io *io, struct io_port *p, const uint8_t *f, uint32_t len, struct mrc_meta *m);
#endif
