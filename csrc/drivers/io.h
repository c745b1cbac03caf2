/* Internal interface of the I/O side of a context: the raw-socket ports
 * (io_packet.c, io_tx.c) and the link watcher (link_watch.c), which the
 * engine thread drives (engine.c, engine.h). These files, and no others, make system calls
 * (architecture.md). Not part of the Python contract.
 *
 * Layering: engine.c calls io_packet.c, link_watch.c and the core's entry
 * points (dispatch.c and the API calls); io_packet.c calls dispatch.c
 * (mrc_ep_input) and nothing above; link_watch.c calls nothing of ours (it
 * reports through a callback). bench/blast.c calls io_packet.c. */
#ifndef MRC_IO_H
#define MRC_IO_H
#include <linux/if_packet.h>
#include <poll.h>

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
};

struct io;

/* io_packet.c. Lock: io_open runs before the context is shared and
 * io_close after its thread ended; every other call runs with the
 * endpoint lock held (the engine thread's loop, or an API call), except
 * io_queue_tx and io_flush_tx from the raw blaster, whose context has no
 * engine thread. */
int io_open(const struct mrc_port_cfg *ports, uint32_t nports, struct io **out);
void io_close(struct io *io);
uint32_t io_nports(const struct io *io);
struct io_port *io_port(struct io *io, uint32_t i);
struct io_port *io_plane_port(struct io *io, uint32_t plane);
int io_add_peer(struct io *io, const struct mrc_peer_cfg *peer);
int io_del_peer(struct io *io, uint16_t peer);
int io_npeers(const struct io *io);
int io_peer_host(const struct io *io, uint16_t peer);
int io_has_path(const struct io *io, uint16_t peer, uint32_t plane);
void io_queue_tx(struct io *io, const struct mrc_txdesc *d, const uint8_t *pkt);
void io_flush_tx(struct io *io);
int io_rx_round(struct io *io, struct mrc_ep *ep, uint64_t now);
int io_port_stats(struct io *io, uint32_t port, struct mrc_port_stats *st);
uint32_t io_pollfds(struct io *io, struct pollfd *pf);

/* link_watch.c: the ports' carrier from rtnetlink link events. Lock: the
 * engine thread (or the creator, before the thread starts). */
struct link_watch {
    int fd;                  /* -1: no netlink here; ports count as having carrier */
    uint64_t next_ns;        /* when the engine next reads the events */
};
typedef void (*lw_fn)(void *arg, uint32_t ifindex, int carrier);
void lw_open(struct link_watch *w);
void lw_close(struct link_watch *w);
void lw_read_flags(const uint32_t *ifindex, uint32_t n, lw_fn fn, void *arg);
void lw_read_events(struct link_watch *w, const uint32_t *ifindex, uint32_t n, lw_fn fn, void *arg);
#endif
