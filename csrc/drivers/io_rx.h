/* io_rx.c: what the raw ring (io_packet.c) and the ring of buffers
 * (io_gso.c) share of receiving. Lock: as io_packet.c's. */
#ifndef MRC_DRIVERS_IO_RX_H
#define MRC_DRIVERS_IO_RX_H
#include "drivers/io_types.h"

struct io;

/* A TPACKET_V2 ring of n frames of size bytes: the frame at *head once the
 * kernel handed it over (NULL: not yet) and whether it is whole (snap the
 * length it says, within the frame); io_ring_give hands it back and moves
 * *head on. Shared by the raw ring and the ring of buffers. */
static inline struct tpacket2_hdr *io_ring_take(uint8_t *ring, uint32_t head, uint32_t size)
{
    struct tpacket2_hdr *h = (struct tpacket2_hdr *)(ring + (size_t)head * size);
    return __atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER ? h : NULL;
}

static inline int io_ring_whole(const struct tpacket2_hdr *h, uint32_t size)
{
    return h->tp_snaplen >= h->tp_len && h->tp_mac + h->tp_snaplen <= size;
}

static inline void io_ring_give(struct tpacket2_hdr *h, uint32_t *head, uint32_t n)
{
    __atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
    *head = *head + 1 == n ? 0 : *head + 1;
}

/* Classic BPF on a port's socket: IPv6, UDP, destination port 4791, and a
 * frame a raw ring frame holds (big 0) or longer (big 1). */
int io_attach_filter(int fd, int big);
/* A received frame's Ethernet, IPv6 and UDP headers for port p: ours, from a
 * known peer. Fills m and returns the UDP length, or -1 (counted as foreign). */
int io_rx_head(struct io *io, struct io_port *p, const uint8_t *f, uint32_t len, struct mrc_meta *m);
/* One received frame that is one datagram: its headers checked (io_rx_head), counted in the port's
 * rx_packets, and its MRC packet handed to the core, which checks it (an empty one too). */
void io_rx_frame(struct io *io, struct io_port *p, struct mrc_ep *ep, const uint8_t *f, uint32_t len, uint64_t now);
#endif
