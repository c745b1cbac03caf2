/* Raw-socket I/O of a context, its ports and receive side: one AF_PACKET
 * socket per port (plane) with a classic BPF filter for UDP 4791 and a
 * PACKET_RX_RING, read without a system call; the peer table, which says
 * how to reach each peer on each plane. Sending is io_tx.c's.
 *
 * Lock: io_open runs before the context is shared and io_close after its
 * thread ended; every other function runs with the endpoint lock held (the
 * engine thread's loop, or an API call), except the raw blaster's
 * io_queue_tx/io_flush_tx on a context whose thread never started (io.h). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <net/if.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "drivers/io_gso.h"
#include "drivers/io_int.h"
#include "drivers/io_packet.h"
#include "drivers/io_rx.h"
#include "drivers/io_tx.h"

enum { RX_FRAME = 10240, RX_BLOCK = 4 * RX_FRAME, RX_FRAMES = 512 };

static int open_port(struct io_port *p)
{
    int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_IPV6));
    if (fd < 0)
        return -errno;
    int one = 1;
    if (io_attach_filter(fd, 0) < 0 || setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one)) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    big_buffers(fd, 1);
    /* the receive ring: RX_FRAMES frames of RX_FRAME bytes (a 9216-byte frame
     * plus the tpacket header), RX_BLOCK (a whole number of pages) per block */
    int v = TPACKET_V2;
    struct tpacket_req req = {.tp_block_size = RX_BLOCK, .tp_block_nr = RX_FRAMES * RX_FRAME / RX_BLOCK,
                              .tp_frame_size = RX_FRAME, .tp_frame_nr = RX_FRAMES};
    if (setsockopt(fd, SOL_PACKET, PACKET_VERSION, &v, sizeof(v)) < 0 ||
        setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof(req)) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    p->ring_len = (size_t)RX_FRAMES * RX_FRAME;
    p->ring = mmap(NULL, p->ring_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0); /* no faults later */
    if (p->ring == MAP_FAILED) {
        int e = errno;
        p->ring = NULL;
        close(fd);
        return -e;
    }
    struct sockaddr_ll sll = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_IPV6),
                              .sll_ifindex = (int)p->cfg.ifindex};
    if (bind(fd, (struct sockaddr *)&sll, sizeof(sll)) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    p->fd = fd;
    p->sll = (struct sockaddr_ll){.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_IPV6),
                                  .sll_ifindex = (int)p->cfg.ifindex, .sll_halen = 6};
    memcpy(p->sll.sll_addr, p->cfg.dst_mac, 6);
    return 0;
}

int io_open(const struct mrc_port_cfg *ports, uint32_t nports, struct io **out)
{
    if (nports == 0 || nports > MRC_MAX_PORTS)
        return -EINVAL;
    struct io *io = calloc(1, sizeof(*io));
    if (!io)
        return -ENOMEM;
    for (int i = 0; i < MRC_MAX_PLANES; i++)
        io->plane_port[i] = -1;
    for (uint32_t i = 0; i < MRC_MAX_PORTS; i++)
        io->ports[i].fd = io->ports[i].gfd = -1;
    io->tx.fd = io->gso.fd = -1;
    io->gso.k = 1;
    int rc = 0;
    io->peers = calloc(MRC_MAX_PEERS, sizeof(*io->peers));
    if (!io->peers)
        rc = -ENOMEM;
    for (uint32_t i = 0; i < nports && !rc; i++) {
        if (ports[i].plane >= MRC_MAX_PLANES) {
            rc = -EINVAL;
            break;
        }
        io->ports[i].cfg = ports[i];
        io->plane_port[ports[i].plane] = (int)i;
        io->nports = i + 1;
        rc = open_port(&io->ports[i]);
    }
    if (!rc)
        rc = io_tx_open(io);
    if (!rc)
        rc = io_gso_open(io, 1); /* the receive side of buffers of k packets */
    if (rc < 0) {
        io_close(io);
        return rc;
    }
    *out = io;
    return 0;
}

void io_close(struct io *io)
{
    if (!io)
        return;
    for (uint32_t i = 0; i < MRC_MAX_PORTS; i++) {
        if (io->ports[i].fd >= 0)
            close(io->ports[i].fd);
        if (io->ports[i].ring)
            munmap(io->ports[i].ring, io->ports[i].ring_len);
    }
    io_tx_close(io);
    io_gso_close(io);
    free(io->peers);
    free(io);
}

uint32_t io_nports(const struct io *io) { return io->nports; }
struct io_port *io_port(struct io *io, uint32_t i) { return i < io->nports ? &io->ports[i] : NULL; }

struct io_port *io_plane_port(struct io *io, uint32_t plane)
{
    return plane < MRC_MAX_PLANES && io->plane_port[plane] >= 0 ? &io->ports[io->plane_port[plane]] : NULL;
}

uint32_t io_pollfds(struct io *io, struct pollfd *pf)
{
    for (uint32_t i = 0; i < io->nports; i++) {
        pf[2 * i] = (struct pollfd){.fd = io->ports[i].fd, .events = POLLIN};
        pf[2 * i + 1] = (struct pollfd){.fd = io->ports[i].gfd, .events = POLLIN}; /* -1: ignored */
    }
    return 2 * io->nports;
}

/* ------------------------------------------------------------------ peers */
int io_add_peer(struct io *io, const struct mrc_peer_cfg *peer)
{
    if (peer->nplanes > MRC_MAX_PLANES)
        return -EINVAL;
    for (uint32_t p = 0; p < MRC_MAX_PLANES; p++)
        if (peer->plane[p].npaths > MRC_MAX_PATHS)
            return -EINVAL;
    uint32_t i = 0;
    while (i < io->npeers && io->live[i])
        i++;
    if (i >= MRC_MAX_PEERS)
        return -ENOSPC;
    io->peers[i] = *peer;
    io->live[i] = 1;
    if (i == io->npeers)
        io->npeers++;
    return (int)i;
}

/* Free a peer's slot (the next add may reuse it). */
int io_del_peer(struct io *io, uint16_t peer)
{
    if (peer >= io->npeers || !io->live[peer])
        return -ENOENT;
    memset(&io->peers[peer], 0, sizeof(io->peers[peer]));
    io->live[peer] = 0;
    while (io->npeers && !io->live[io->npeers - 1])
        io->npeers--;
    return 0;
}

int io_npeers(const struct io *io) { return (int)io->npeers; }

/* The first live peer index with the same final address on every plane:
 * the same host (several indices differ only in their paths). */
int io_peer_host(const struct io *io, uint16_t peer)
{
    const struct mrc_peer_cfg *p = &io->peers[peer];
    for (uint32_t i = 0; i < peer; i++) {
        const struct mrc_peer_cfg *o = &io->peers[i];
        int same = io->live[i];
        for (uint32_t pl = 0; pl < MRC_MAX_PLANES && same; pl++)
            same = (o->plane[pl].npaths > 0) == (p->plane[pl].npaths > 0) &&
                   (!p->plane[pl].npaths || !memcmp(o->plane[pl].final_addr, p->plane[pl].final_addr, 16));
        if (same)
            return (int)i;
    }
    return peer;
}

int io_has_path(const struct io *io, uint16_t peer, uint32_t plane)
{
    return peer < io->npeers && plane < MRC_MAX_PLANES && io->peers[peer].plane[plane].npaths > 0;
}

/* ------------------------------------------------------------------ rx */
/* Take up to max frames from the port's receive ring (no system call). */
static int rx_port(struct io *io, struct io_port *p, struct mrc_ep *ep, uint64_t now, int max)
{
    int n = 0;
    struct tpacket2_hdr *h;
    while (n < max && (h = io_ring_take(p->ring, p->rhead, RX_FRAME))) {
        if (!io_ring_whole(h, RX_FRAME))
            p->st.rx_foreign++; /* truncated: larger than any MRC frame */
        else
            io_rx_frame(io, p, ep, (const uint8_t *)h + h->tp_mac, h->tp_snaplen, now);
        io_ring_give(h, &p->rhead, RX_FRAMES);
        n++;
    }
    if (n)
        p->st.rx_batches++;
    return n;
}

/* A few frames from every port: draining one plane's backlog before the
 * next would look to the peer like reordering by plane. */
int io_rx_round(struct io *io, struct mrc_ep *ep, uint64_t now)
{
    int got = 0;
    for (uint32_t i = 0; i < io->nports; i++) {
        struct io_port *p = &io->ports[i];
        got += rx_port(io, p, ep, now, IO_RX_ROUND);
        if (p->gfd >= 0)
            got += io_gso_rx_port(io, p, ep, now, 1); /* a buffer is up to GSO_MAX_K frames' worth */
    }
    return got;
}

int io_port_stats(struct io *io, uint32_t port, struct mrc_port_stats *st)
{
    if (port >= io->nports)
        return -EINVAL;
    struct io_port *p = &io->ports[port];
    struct tpacket_stats ks;
    socklen_t kl = sizeof(ks);
    /* the kernel's counters reset on every read: add them up here */
    if (p->fd >= 0 && getsockopt(p->fd, SOL_PACKET, PACKET_STATISTICS, &ks, &kl) == 0)
        p->st.rx_ring_drops += ks.tp_drops;
    kl = sizeof(ks);
    if (p->gfd >= 0 && getsockopt(p->gfd, SOL_PACKET, PACKET_STATISTICS, &ks, &kl) == 0)
        p->st.rx_ring_drops += ks.tp_drops;
    *st = p->st;
    return 0;
}

/* ------------------------------------------------------------ memory registration */
/* Lock: none (it touches only the application's pages). */
int mrc_ctx_populate(void *addr, uint64_t len)
{
    /* fault the pages in for writing now, as ibv_reg_mr pins them, so the
     * engine does not take a page fault on the first packet to each page */
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)addr & ~(uintptr_t)(pg - 1);
    uintptr_t e = ((uintptr_t)addr + len + (uintptr_t)pg - 1) & ~(uintptr_t)(pg - 1);
    if (len == 0)
        return 0;
#ifdef MADV_POPULATE_WRITE
    if (madvise((void *)a, e - a, MADV_POPULATE_WRITE) == 0)
        return 0;
    return -errno;
#else
    return -EOPNOTSUPP;
#endif
}
