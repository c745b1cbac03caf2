/* The send side of a context's I/O: the framing (the Ethernet, IPv6 and UDP
 * headers around each MRC packet, the UDP checksum over the final,
 * post-uSID destination: protocol.md 2, from the sum the core took while it
 * built the packet) and one sendmmsg per batch for every port (docs/
 * engine.md, "A byte's way": why not a PACKET_TX_RING).
 * Lock: as io_packet.c's (io.h). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <sys/socket.h>
#include <unistd.h>

#include "drivers/io_gso.h"
#include "drivers/io_int.h"
#include "drivers/io_tx.h"

/* ------------------------------------------------------------------ open */
/* The sendmmsg socket: protocol 0, so it receives nothing. */
static int open_txq(struct txq *t)
{
    int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    big_buffers(fd, 0);
    t->fd = fd;
    for (int i = 0; i < IO_BATCH; i++) {
        t->iov[i][0] = (struct iovec){t->hdr[i], IO_HDRS};
        t->msg[i].msg_hdr = (struct msghdr){.msg_iov = t->iov[i], .msg_iovlen = 2,
                                            .msg_namelen = sizeof(struct sockaddr_ll)};
    }
    return 0;
}

int io_tx_open(struct io *io)
{
    io->tx.fd = -1;
    return open_txq(&io->tx);
}

void io_tx_close(struct io *io)
{
    if (io->tx.fd >= 0)
        close(io->tx.fd);
    io->tx.fd = -1;
}

/* ------------------------------------------------------------------ framing */
/* The Ethernet, IPv6 and UDP headers of a packet of d->len bytes for port p
 * and path pp into f (IO_HDRS bytes); the UDP checksum from the packet's sum
 * (d->has_sum: taken while the core built it) or a pass over pkt now. */
static void frame_headers(uint8_t *f, const struct io_port *p, const struct mrc_peer_plane *pp,
                          const struct mrc_txdesc *d, const uint8_t *pkt)
{
    memcpy(f, p->cfg.dst_mac, 6);
    memcpy(f + 6, p->cfg.src_mac, 6);
    f[12] = 0x86;
    f[13] = 0xDD;
    uint8_t *ip = f + MRC_ETH_HLEN;
    put32(ip, (6u << 28) | ((uint32_t)d->tclass << 20) | ev_flow_label(d->ev)); /* protocol.md 2, "EV on the wire" */
    put16(ip + 4, (uint16_t)(MRC_UDP_HLEN + d->len));
    ip[6] = 17;
    ip[7] = 64;
    memcpy(ip + 8, p->cfg.src_addr, 16);
    memcpy(ip + 24, pp->paths[ev_entropy(d->ev) % pp->npaths], 16);
    uint8_t *udp = ip + MRC_IPV6_HLEN;
    put16(udp, ev_udp_sport(d->ev));
    put16(udp + 2, MRC_UDP_PORT);
    put16(udp + 4, (uint16_t)(MRC_UDP_HLEN + d->len));
    put16(udp + 6, 0);
    /* checksum over the *final* destination, the one left after every uSID shift */
    uint8_t ph[8] = {0};
    put32(ph, MRC_UDP_HLEN + d->len);
    ph[7] = 17;
    uint64_t s = csum_add(0, p->cfg.src_addr, 16);
    s = csum_add(s, pp->final_addr, 16);
    s = csum_add(s, ph, 8);
    s = csum_add(s, udp, MRC_UDP_HLEN); /* 8 bytes: the payload's words stay aligned */
    s = d->has_sum ? s + d->sum : csum_add(s, pkt, d->len);
    uint16_t ck = (uint16_t)~csum_fold16(s);
    if (ck == 0)
        ck = 0xFFFF;
    memcpy(udp + 6, &ck, 2); /* already in network order: summed as raw words */
}

/* ------------------------------------------------------------------ send */
/* Send the batch. A message that fails (its interface went down, say) is
 * counted against its port; the engine retransmits what was lost. */
void io_flush_tx(struct io *io)
{
    struct txq *t = &io->tx;
    if (io->gso.n)
        io_gso_flush(io);
    uint32_t off = 0;
    while (off < t->n) {
        int n = sendmmsg(t->fd, t->msg + off, t->n - off, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == ENOBUFS) { /* the socket is full: drop the rest */
                for (; off < t->n; off++)
                    io->ports[t->port[off]].st.tx_errors++;
                break;
            }
            io->ports[t->port[off++]].st.tx_errors++;
            continue;
        }
        for (int i = 0; i < n; i++, off++) {
            struct io_port *p = &io->ports[t->port[off]];
            p->st.tx_packets++;
            p->st.tx_bytes += IO_HDRS + t->iov[off][1].iov_len;
        }
        if (n == 0)
            break;
    }
    uint32_t seen = 0;
    for (uint32_t i = 0; i < t->n; i++)
        seen |= 1u << t->port[i];
    for (uint32_t i = 0; i < io->nports; i++)
        io->ports[i].st.tx_batches += (seen >> i) & 1;
    t->n = 0;
}

/* Wrap one engine packet in Ethernet/IPv6/UDP for its EV's plane and path.
 * pkt must stay valid until the next io_flush_tx (the batch points into it). */
void io_queue_tx(struct io *io, const struct mrc_txdesc *d, const uint8_t *pkt)
{
    uint32_t plane = ev_plane(d->ev) & (MRC_MAX_PLANES - 1);
    int pi = io->plane_port[plane];
    if (pi < 0 || d->peer >= io->npeers || io->peers[d->peer].plane[plane].npaths == 0 || d->len + IO_HDRS > IO_FRAME) {
        if (pi >= 0)
            io->ports[pi].st.tx_no_path++;
        return;
    }
    struct io_port *p = &io->ports[pi];
    const struct mrc_peer_plane *pp = &io->peers[d->peer].plane[plane];
    /* (an EV with the mark's bit cannot ride in the mark) */
    if (io->gso.k >= 2 && !(d->ev & MRC_GSO_MARK) && io_gso_queue(io, p, pp, d, pkt) == 0)
        return;
    struct txq *t = &io->tx;
    frame_headers(t->hdr[t->n], p, pp, d, pkt);
    t->iov[t->n][1] = (struct iovec){(void *)pkt, d->len};
    t->msg[t->n].msg_hdr.msg_name = &p->sll;
    t->port[t->n] = (uint8_t)pi;
    if (++t->n == IO_BATCH)
        io_flush_tx(io);
}
