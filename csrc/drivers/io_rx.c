/* What both receive sides of a port share (io_packet.c's raw ring,
 * io_gso.c's ring of buffers): the socket filter, and the check of a frame's
 * Ethernet, IPv6 and UDP headers with the peer it comes from, and the
 * taking of one datagram.
 * Lock: as io_packet.c's. */
#define _GNU_SOURCE
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <sys/socket.h>

#include "drivers/io_int.h"
#include "drivers/io_rx.h"

/* Classic BPF: IPv6, next header UDP, destination port 4791, and a frame
 * that a ring frame holds (big 0: the raw ring's, up to IO_FRAME) or not
 * (big 1: io_gso.c's buffers of k packets). */
int io_attach_filter(int fd, int big)
{
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 12),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IPV6, 0, 7),
        BPF_STMT(BPF_LD | BPF_B | BPF_ABS, MRC_ETH_HLEN + 6),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 17, 0, 5),
        BPF_STMT(BPF_LD | BPF_H | BPF_ABS, MRC_ETH_HLEN + MRC_IPV6_HLEN + 2),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, MRC_UDP_PORT, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_LEN, 0),
        BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, IO_FRAME, big ? 0 : 1, big ? 1 : 0),
        BPF_STMT(BPF_RET | BPF_K, 0x40000),
        BPF_STMT(BPF_RET | BPF_K, 0),
    };
    struct sock_fprog prog = {.len = sizeof(code) / sizeof(code[0]), .filter = code};
    return setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog));
}

static int peer_of(const struct io *io, const uint8_t *src, uint32_t plane)
{
    for (uint32_t i = 0; i < io->npeers; i++)
        if (io->peers[i].plane[plane].npaths && !memcmp(io->peers[i].plane[plane].final_addr, src, 16))
            return (int)i;
    return -1;
}

int io_rx_head(struct io *io, struct io_port *p, const uint8_t *f, uint32_t len, struct mrc_meta *m)
{
    if (len < IO_HDRS + MRC_BTH_LEN) {
        p->st.rx_foreign++;
        return -1;
    }
    const uint8_t *ip = f + MRC_ETH_HLEN, *udp = ip + MRC_IPV6_HLEN;
    uint32_t w0 = get32(ip);
    uint8_t tclass = (uint8_t)(w0 >> 20);
    uint32_t ulen = get16(udp + 4);
    if (ulen < MRC_UDP_HLEN || ulen > len - MRC_ETH_HLEN - MRC_IPV6_HLEN) {
        p->st.rx_foreign++;
        return -1;
    }
    /* for this port (its MAC and address: not a frame the NIC saw pass, nor
     * one for another address of the host) and from a peer of ours */
    int peer = memcmp(f, p->cfg.src_mac, 6) || memcmp(ip + 24, p->cfg.src_addr, 16) ? -1
                                                                                    : peer_of(io, ip + 8, p->cfg.plane);
    if (peer < 0) {
        p->st.rx_foreign++;
        return -1;
    }
    *m = (struct mrc_meta){.ev = ev_from_wire(w0, get16(udp)), .peer = (uint16_t)peer, .port = (uint8_t)p->cfg.plane,
                           .ecn_ce = (tclass & 3) == MRC_ECN_CE, .trimmed = (tclass >> 2) == MRC_DSCP_TRIMMED};
    return (int)ulen;
}

void io_rx_frame(struct io *io, struct io_port *p, struct mrc_ep *ep, const uint8_t *f, uint32_t len, uint64_t now)
{
    struct mrc_meta m;
    int ulen = io_rx_head(io, p, f, len, &m);
    if (ulen < 0)
        return;
    p->st.rx_packets++;
    p->st.rx_bytes += len;
    mrc_ep_input(ep, f + IO_HDRS, (uint32_t)ulen - MRC_UDP_HLEN, &m, now);
}
