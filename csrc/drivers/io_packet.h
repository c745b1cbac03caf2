/* io_packet.c: a context's ports (one AF_PACKET socket with a receive ring
 * each), the receive side and the peer table. Together with io_tx.c (the
 * send side, io_tx.h) and link_watch.c (carrier, link_watch.h) these are
 * the files that make system calls for the engine thread (engine.c); what
 * io_packet.c and io_tx.c share of struct io is io_int.h. Not part of any
 * contract with users. */
#ifndef MRC_DRIVERS_IO_PACKET_H
#define MRC_DRIVERS_IO_PACKET_H
#include <poll.h>

#include "drivers/io_types.h"

struct io;

/* Lock: io_open runs before the context is shared and io_close after its
 * thread ended; every other call runs with the endpoint lock held (the
 * engine thread's loop, or an API call). */
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
int io_rx_round(struct io *io, struct mrc_ep *ep, uint64_t now);
int io_port_stats(struct io *io, uint32_t port, struct mrc_port_stats *st);
uint32_t io_pollfds(struct io *io, struct pollfd *pf);

#endif
