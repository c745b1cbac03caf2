/* k MRC packets per kernel buffer (docs/engine.md, "Buffers of k packets").
 *
 * Send: the packets the engine queues one after another for the same port,
 * path, EV and traffic class, each as long as the first (the last may be
 * shorter), go out as one message of a UDP socket with UDP_SEGMENT of the
 * first's length: the kernel keeps them one buffer through every veth and
 * forwarding hop and cuts it only where it must, each segment with its own
 * IPv6 and UDP headers, so each is a whole MRC packet (its BTH, RETH and
 * ICRC are the core's). The socket writes what a UDP socket cannot be told:
 * the EV rides in the buffer's mark to the port's egress program
 * (csrc/bpf/host_gso.bpf.c), which writes the flow label and source port
 * and moves the checksum to the final destination. A packet too short to
 * start a buffer (half a raw frame or less) that joins none goes by the raw
 * socket, as with k = 1.
 *
 * Receive: a buffer longer than a raw ring frame (IO_FRAME) comes to a
 * second AF_PACKET socket per port, with its virtio-net header, whose ring
 * frames hold 64 KiB; its segments go to the core one by one, each with the
 * buffer's headers (the same EV, ECN and source).
 *
 * Lock: as io_tx.c's. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/udp.h>
#include <linux/virtio_net.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "drivers/io_gso.h"
#include "drivers/io_int.h"
#include "drivers/io_rx.h"

#ifndef SOL_UDP
#define SOL_UDP 17
#endif
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef VIRTIO_NET_HDR_GSO_UDP_L4
#define VIRTIO_NET_HDR_GSO_UDP_L4 5 /* linux/virtio_net.h from 5.0 */
#endif

enum {
    GRX_FRAME = 17 * 4096,  /* a 64 KiB buffer, its tpacket and virtio-net headers */
    GRX_FRAMES = 32,
    GSO_MIN_PKT = IO_FRAME / 2 + 1, /* two such packets are longer than a raw ring frame */
};

/* ------------------------------------------------------------------ open */
static int open_rx(struct io_port *p)
{
    int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_IPV6)), one = 1, v = TPACKET_V2;
    if (fd < 0)
        return -errno;
    struct tpacket_req req = {.tp_block_size = GRX_FRAME, .tp_block_nr = GRX_FRAMES, .tp_frame_size = GRX_FRAME,
                              .tp_frame_nr = GRX_FRAMES};
    struct sockaddr_ll sll = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_IPV6),
                              .sll_ifindex = (int)p->cfg.ifindex};
    if (io_attach_filter(fd, 1) < 0 || setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one)) < 0 ||
        setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof(one)) < 0 ||
        setsockopt(fd, SOL_PACKET, PACKET_VERSION, &v, sizeof(v)) < 0 ||
        setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof(req)) < 0)
        goto fail;
    p->gring_len = (size_t)GRX_FRAMES * GRX_FRAME;
    p->gring = mmap(NULL, p->gring_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p->gring == MAP_FAILED) {
        p->gring = NULL;
        goto fail;
    }
    if (bind(fd, (struct sockaddr *)&sll, sizeof(sll)) < 0)
        goto fail;
    p->gfd = fd;
    return 0;
fail:;
    int e = errno;
    close(fd);
    return -e;
}

/* The receive side of every port and the UDP socket, opened with the ports
 * (in the namespace they are in: the socket's routes and interfaces are
 * that namespace's); k says whether the send side uses it (k >= 2) or not. A
 * peer may send buffers to a context that sends none. The caller flushes
 * what is queued first (it leaves the way it was queued). */
int io_gso_open(struct io *io, uint32_t k)
{
    if (k > GSO_MAX_K)
        return -EINVAL;
    for (uint32_t i = 0; i < io->nports; i++)
        if (io->ports[i].gfd < 0) {
            int rc = open_rx(&io->ports[i]);
            if (rc < 0)
                return rc;
        }
    if (io->gso.fd < 0) {
        int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0), big = 8 << 20;
        if (fd < 0)
            return -errno;
        if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big)) < 0)
            setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
        io->gso.fd = fd;
    }
    io->gso.k = k < 2 ? 1 : k;
    return 0;
}

void io_gso_close(struct io *io)
{
    if (io->gso.fd >= 0)
        close(io->gso.fd);
    io->gso.fd = -1;
    for (uint32_t i = 0; i < MRC_MAX_PORTS; i++) {
        struct io_port *p = &io->ports[i];
        if (p->gfd >= 0)
            close(p->gfd);
        if (p->gring)
            munmap(p->gring, p->gring_len);
        p->gfd = -1;
        p->gring = NULL;
    }
}

/* ------------------------------------------------------------------ send */
static size_t put_cmsg(uint8_t *at, int level, int type, const void *v, size_t len)
{
    struct cmsghdr *c = (struct cmsghdr *)at;
    c->cmsg_level = level;
    c->cmsg_type = type;
    c->cmsg_len = CMSG_LEN(len);
    memcpy(CMSG_DATA(c), v, len);
    return CMSG_SPACE(len);
}

/* The message of m: its path, source, traffic class, EV and segment size. */
static void build_msg(struct io *io, uint32_t i)
{
    struct gsoq *g = &io->gso;
    const struct gso_msg *m = &g->m[i];
    const struct io_port *p = &io->ports[m->port];
    const struct mrc_peer_plane *pp = &io->peers[m->peer].plane[p->cfg.plane];
    g->dst[i] = (struct sockaddr_in6){.sin6_family = AF_INET6, .sin6_port = htons(MRC_UDP_PORT)};
    memcpy(&g->dst[i].sin6_addr, pp->paths[m->path], 16);
    struct in6_pktinfo pi = {.ipi6_ifindex = p->cfg.ifindex};
    memcpy(&pi.ipi6_addr, p->cfg.src_addr, 16);
    int tc = m->tclass;
    uint32_t mark = MRC_GSO_MARK | m->ev;
    uint16_t seg = (uint16_t)m->seg;
    size_t n = put_cmsg(g->ctl[i], IPPROTO_IPV6, IPV6_PKTINFO, &pi, sizeof(pi));
    n += put_cmsg(g->ctl[i] + n, IPPROTO_IPV6, IPV6_TCLASS, &tc, sizeof(tc));
    n += put_cmsg(g->ctl[i] + n, SOL_SOCKET, SO_MARK, &mark, sizeof(mark));
    if (m->count > 1)
        n += put_cmsg(g->ctl[i] + n, SOL_UDP, UDP_SEGMENT, &seg, sizeof(seg));
    g->msg[i].msg_hdr = (struct msghdr){.msg_name = &g->dst[i], .msg_namelen = sizeof(g->dst[i]),
                                        .msg_iov = &g->iov[m->first], .msg_iovlen = m->count,
                                        .msg_control = g->ctl[i], .msg_controllen = n};
}

static void sent(struct io *io, const struct gso_msg *m)
{
    struct io_port *p = &io->ports[m->port];
    p->st.tx_packets += m->count;
    p->st.tx_bytes += (uint64_t)m->count * IO_HDRS + m->bytes;
    p->gso_tx_buffers += m->count > 1;
}

/* Send the batch; a message that fails is counted against its port (as
 * io_flush_tx does: the engine retransmits what was lost). */
void io_gso_flush(struct io *io)
{
    struct gsoq *g = &io->gso;
    for (uint32_t i = 0; i < g->n; i++)
        build_msg(io, i);
    uint32_t off = 0, seen = 0;
    while (off < g->n) {
        int n = sendmmsg(g->fd, g->msg + off, g->n - off, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            uint32_t to = errno == EAGAIN || errno == ENOBUFS ? g->n : off + 1; /* full: drop the rest */
            for (; off < to; off++)
                io->ports[g->m[off].port].st.tx_errors += g->m[off].count;
            continue;
        }
        for (int i = 0; i < n; i++, off++)
            sent(io, &g->m[off]);
        if (n == 0)
            break;
    }
    for (uint32_t i = 0; i < g->n; i++)
        seen |= 1u << g->m[i].port;
    for (uint32_t i = 0; i < io->nports; i++)
        io->ports[i].st.tx_batches += (seen >> i) & 1;
    g->n = g->pkts = 0;
}

/* Queue one packet: it joins the last message if that one is of the same
 * port, path, EV and traffic class, has room, and its packets are as long as
 * this one (a shorter packet joins and ends it); else a packet long enough
 * to start one starts one. A packet that can neither (an ACK, a small
 * message, a short last one after another path's) is left to the raw
 * socket (returns -1): one datagram gains nothing from the UDP socket and
 * pays its route lookup and the egress program. */
int io_gso_queue(struct io *io, struct io_port *p, const struct mrc_peer_plane *pp, const struct mrc_txdesc *d,
                 const uint8_t *pkt)
{
    struct gsoq *g = &io->gso;
    uint32_t port = (uint32_t)(p - io->ports), path = ev_entropy(d->ev) % pp->npaths;
    struct gso_msg *m = g->n ? &g->m[g->n - 1] : NULL;
    if (m && m->open && m->port == port && m->path == path && m->ev == d->ev && m->peer == d->peer &&
        m->tclass == d->tclass && d->len <= m->seg && m->count < g->k && m->bytes + d->len <= GSO_MAX_BYTES) {
        m->count++;
        m->bytes += d->len;
        m->open = d->len == m->seg;
    } else if (d->len < GSO_MIN_PKT) {
        return -1;
    } else {
        if (g->n == IO_BATCH)
            io_gso_flush(io);
        m = &g->m[g->n++];
        *m = (struct gso_msg){.first = g->pkts, .count = 1, .bytes = d->len, .seg = d->len, .ev = d->ev,
                              .path = path, .peer = d->peer, .port = (uint8_t)port, .tclass = d->tclass,
                              .open = 1};
    }
    g->iov[g->pkts++] = (struct iovec){(void *)pkt, d->len};
    if (g->pkts == IO_BATCH)
        io_gso_flush(io);
    return 0;
}

/* ------------------------------------------------------------------ receive */
void io_gso_rx_buffer(struct io *io, struct io_port *p, struct mrc_ep *ep, const uint8_t *f, uint32_t len,
                      const struct virtio_net_hdr *vh, uint64_t now)
{
    uint32_t plen = len - IO_HDRS, seg = vh->gso_size;
    if ((vh->gso_type & ~VIRTIO_NET_HDR_GSO_ECN) != VIRTIO_NET_HDR_GSO_UDP_L4 || seg == 0) {
        io_rx_frame(io, p, ep, f, len, now); /* not a buffer of segments: one datagram, as the raw ring's */
        return;
    }
    struct mrc_meta m;
    if (io_rx_head(io, p, f, len, &m) < 0)
        return;
    p->gso_rx_buffers++;
    for (uint32_t off = 0; off < plen; off += seg) {
        uint32_t n = plen - off < seg ? plen - off : seg;
        p->st.rx_packets++;
        p->st.rx_bytes += IO_HDRS + n;
        mrc_ep_input(ep, f + IO_HDRS + off, n, &m, now);
    }
}

int io_gso_rx_port(struct io *io, struct io_port *p, struct mrc_ep *ep, uint64_t now, int max)
{
    int n = 0;
    struct tpacket2_hdr *h;
    while (n < max && (h = io_ring_take(p->gring, p->ghead, GRX_FRAME))) {
        if (!io_ring_whole(h, GRX_FRAME) || h->tp_mac < sizeof(*h) + sizeof(struct virtio_net_hdr))
            p->st.rx_foreign++;
        else
            io_gso_rx_buffer(io, p, ep, (const uint8_t *)h + h->tp_mac, h->tp_snaplen,
                             (const struct virtio_net_hdr *)((const uint8_t *)h + h->tp_mac -
                                                             sizeof(struct virtio_net_hdr)), now);
        io_ring_give(h, &p->ghead, GRX_FRAMES);
        n++;
    }
    return n;
}
