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
/* 0: queued in a message of the UDP socket; -1: the packet can neither join one nor start one (too short),
 * the raw socket's to send. */
int io_gso_queue(struct io *io, struct io_port *p, const struct mrc_peer_plane *pp, const struct mrc_txdesc *d,
                 const uint8_t *pkt);
void io_gso_flush(struct io *io);
int io_gso_rx_port(struct io *io, struct io_port *p, struct mrc_ep *ep, uint64_t now, int max);
/* One frame of the buffer socket (its Ethernet, IPv6 and UDP headers first) with its virtio-net header:
 * the headers checked once (io_rx_head), then, when the header says UDP segments of gso_size bytes, each
 * segment to the core with the buffer's metadata, the last one shorter if the payload ends so; any other
 * header, or gso_size 0, makes the frame one datagram. Every segment lies inside the frame; each is
 * counted in the port's rx_packets, and the core checks and drops it on its own. */
struct virtio_net_hdr;
void io_gso_rx_buffer(struct io *io, struct io_port *p, struct mrc_ep *ep, const uint8_t *f, uint32_t len,
                      const struct virtio_net_hdr *vh, uint64_t now);
#endif
