/* io_gso.c: k MRC packets of one path per kernel buffer. The send side is
 * one UDP socket with UDP_SEGMENT for every port; the receive side one more
 * AF_PACKET socket per port that takes the buffers the raw ring cannot
 * hold, with their virtio-net header. Lock: as io_tx.c's (io_tx.h). */
#ifndef MRC_DRIVERS_IO_GSO_H
#define MRC_DRIVERS_IO_GSO_H
#include "drivers/io_types.h"

/* The mark a UDP send carries to the port's egress program
 * (csrc/bpf/host_gso.bpf.c): this bit, and the EV below it. */
#define MRC_GSO_MARK 0x80000000u

enum {
    GSO_MAX_K = MRC_GSO_MAX_K, /* packets per buffer at most (8 KiB packets: 7 fit in 64 KiB) */
    GSO_MAX_BYTES = MRC_GSO_MAX_BYTES,
};

struct io;
struct mrc_peer_plane;

int io_gso_open(struct io *io, uint32_t k);
void io_gso_close(struct io *io);
void io_gso_queue(struct io *io, struct io_port *p, const struct mrc_peer_plane *pp, const struct mrc_txdesc *d,
                  const uint8_t *pkt);
void io_gso_flush(struct io *io);
int io_gso_rx_port(struct io *io, struct io_port *p, struct mrc_ep *ep, uint64_t now, int max);
#endif
