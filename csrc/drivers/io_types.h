/* What the ports' files share of their state with the engine (engine.h):
 * the batch and frame sizes and a port (struct io_port). struct io itself
 * is io_int.h's, seen by io_packet.c and io_tx.c alone. */
#ifndef MRC_DRIVERS_IO_TYPES_H
#define MRC_DRIVERS_IO_TYPES_H
#include <linux/if_packet.h>

#include "core/types.h"

enum {
    IO_BATCH = 64,                                   /* packets per sendmmsg */
    IO_FRAME = 9216,                                 /* the largest frame */
    IO_HDRS = MRC_ETH_HLEN + MRC_IPV6_HLEN + MRC_UDP_HLEN,
    IO_RX_ROUND = 4,                                 /* frames per port per round */
};

/* One NIC port: an AF_PACKET socket with a receive ring, and its state. */
struct io_port {
    struct mrc_port_cfg cfg;
    int fd;
    struct mrc_port_stats st;
    struct sockaddr_ll sll; /* where tx frames for this port go */
    /* rx: a PACKET_RX_RING (TPACKET_V2) shared with the kernel, so that
     * receiving costs no system call: frames are read where they landed */
    uint8_t *ring;
    size_t ring_len;
    uint32_t rhead;
    /* the port is up for MRC when the controller enables it (admin) and the
     * link has carrier (the kernel's IFF_UP and IFF_RUNNING) */
    uint8_t admin_down, carrier_down;
    /* rx of buffers of k packets (io_gso.c): a second AF_PACKET socket whose
     * ring frames hold 64 KiB, with each buffer's virtio-net header */
    int gfd;
    uint8_t *gring;
    size_t gring_len;
    uint32_t ghead;
    uint64_t gso_tx_buffers, gso_rx_buffers; /* buffers of more than one packet sent, taken */
};
#endif
