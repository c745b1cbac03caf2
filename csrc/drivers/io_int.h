/* What io_packet.c (the ports, the receive side, the peers) and io_tx.c
 * (the send side) share of a context's I/O: struct io itself. Nothing
 * else includes it (io_packet.h and io_tx.h are their calls). */
#ifndef MRC_IO_INT_H
#define MRC_IO_INT_H
#include <netinet/in.h>
#include <sys/socket.h>

#include "drivers/io_types.h"
#include "wire/csum.h"

/* The sendmmsg path: one batch for all ports, in the order the engine built
 * the packets (so that no plane waits behind another's burst), one unbound
 * AF_PACKET socket, each message addressed to its port; the headers live
 * here, the MRC packet stays where the core built it (two iovecs); the
 * kernel copies both into its buffer (its one copy of each byte sent). */
struct txq {
    int fd;
    uint32_t n;
    struct mmsghdr msg[IO_BATCH];
    struct iovec iov[IO_BATCH][2];
    uint8_t hdr[IO_BATCH][IO_HDRS];
    uint8_t port[IO_BATCH];
};

/* The UDP_SEGMENT path (io_gso.c): one UDP socket for every port, each
 * message k packets of one path (an iovec each, where the core built them),
 * with its source and port (IPV6_PKTINFO), traffic class, EV (SO_MARK, for
 * the port's egress program) and segment size as control messages. */
struct gso_msg {
    uint32_t first, count, bytes, seg; /* its iovecs are iov[first .. first + count) */
    uint32_t ev, path;
    uint16_t peer;
    uint8_t port, tclass, open;        /* open: a packet of seg bytes may still join */
};

struct gsoq {
    int fd; /* -1: off */
    uint32_t k;
    uint32_t n, pkts;
    struct gso_msg m[IO_BATCH];
    struct mmsghdr msg[IO_BATCH];
    struct iovec iov[IO_BATCH];
    struct sockaddr_in6 dst[IO_BATCH];
    uint8_t ctl[IO_BATCH][128];
};

struct io {
    struct io_port ports[MRC_MAX_PORTS];
    uint32_t nports;
    int plane_port[MRC_MAX_PLANES]; /* plane -> index into ports, -1 if none */
    struct mrc_peer_cfg *peers;
    uint8_t live[MRC_MAX_PEERS]; /* slot in use (a deleted peer's slot is reused); a
                                  * deleted peer's config is zeroed: no paths, so the
                                  * per-packet lookups need not test this */
    uint32_t npeers;             /* one past the highest slot in use */
    struct txq tx;
    struct gsoq gso;
};


/* A socket's buffers as large as the kernel allows (root may go past its
 * limits): bursts of a batch must not find them full. */
static inline void big_buffers(int fd, int rcv)
{
    int big = 8 << 20;
    if (rcv && setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big)) < 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big)) < 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
}

#endif
