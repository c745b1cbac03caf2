/* libFuzzer: the receive side of buffers of k packets (drivers/io_gso.c,
 * io_gso_rx_buffer), as the buffer socket hands a frame and its virtio-net
 * header to it, into a context with one QP.
 *
 * Input: u8 flags, u16 gso_size (little endian), u8 gso_type, then the
 * frame (Ethernet, IPv6, UDP, the segments). Flags:
 *   0x01  the frame is for the port and from the peer (its MAC and
 *         addresses patched): it reaches the splitter and the core
 *   0x02  gso_type is UDP_L4 whatever the input says, 0x04 with the ECN bit
 *
 * Invariants (abort on breach): every segment lies inside the frame
 * (AddressSanitizer: the frame is exactly its length); the port counts one
 * rx_packet per segment, at most one per byte of payload (and one for a
 * frame that is not a buffer of segments); a frame for another port or from
 * another host is counted foreign and goes nowhere; the context survives
 * and its timers run. */
#define _GNU_SOURCE
#include <linux/virtio_net.h>
#include <sys/socket.h>

#include "drivers/io_gso.h"
#include "drivers/io_int.h"
#include "fuzz/fuzz.h"

#ifndef VIRTIO_NET_HDR_GSO_UDP_L4
#define VIRTIO_NET_HDR_GSO_UDP_L4 5
#endif

static const uint8_t PORT_MAC[6] = {2, 0, 0, 0, 0, 1};
static const uint8_t PORT_ADDR[16] = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
static const uint8_t PEER_ADDR[16] = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};

static struct io io;
static struct mrc_peer_cfg peer;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    uint8_t flags = data[0];
    struct virtio_net_hdr vh = {.gso_size = (uint16_t)(data[1] | data[2] << 8), .gso_type = data[3]};
    if (flags & 0x02)
        vh.gso_type = VIRTIO_NET_HDR_GSO_UDP_L4 | (flags & 0x04 ? VIRTIO_NET_HDR_GSO_ECN : 0);
    size_t len = size - 4;
    uint8_t *f = malloc(len ? len : 1); /* exactly len bytes: ASan sees any read past it */
    memcpy(f, data + 4, len);
    int ours = (flags & 0x01) && len >= IO_HDRS;
    if (ours) {
        memcpy(f, PORT_MAC, 6);
        memcpy(f + MRC_ETH_HLEN + 8, PEER_ADDR, 16);
        memcpy(f + MRC_ETH_HLEN + 24, PORT_ADDR, 16);
    } else if (len >= 1) {
        f[0] = PORT_MAC[0] ^ 0x80; /* never for the port, whatever the rest says */
    }

    struct fz_ctx c;
    fz_open(&c, 0);
    memset(&io, 0, sizeof(io));
    memset(&peer, 0, sizeof(peer));
    memcpy(peer.plane[0].final_addr, PEER_ADDR, 16);
    peer.plane[0].npaths = 1;
    peer.nplanes = 1;
    io.peers = &peer;
    io.npeers = 1;
    io.nports = 1;
    struct io_port *p = &io.ports[0];
    memcpy(p->cfg.src_mac, PORT_MAC, 6);
    memcpy(p->cfg.src_addr, PORT_ADDR, 16);

    io_gso_rx_buffer(&io, p, c.ep, f, (uint32_t)len, &vh, c.now);
    uint64_t got = p->st.rx_packets, foreign = p->st.rx_foreign;
    FZ_CHECK(got + foreign >= 1, "a frame went uncounted");
    if (!ours)
        FZ_CHECK(got == 0 && foreign == 1, "a frame for another port or host was taken: %llu",
                 (unsigned long long)got);
    if (got) {
        FZ_CHECK(foreign == 0, "taken and foreign at once");
        uint64_t payload = len - IO_HDRS;
        FZ_CHECK(got <= (payload ? payload : 1), "%llu segments from %llu bytes", (unsigned long long)got,
                 (unsigned long long)payload);
        FZ_CHECK(p->st.rx_bytes <= got * IO_HDRS + payload, "more bytes counted than the frame holds");
        if (vh.gso_size && (vh.gso_type & ~VIRTIO_NET_HDR_GSO_ECN) == VIRTIO_NET_HDR_GSO_UDP_L4)
            FZ_CHECK(got == (payload + vh.gso_size - 1) / vh.gso_size, "segments: %llu for %llu bytes of %u",
                     (unsigned long long)got, (unsigned long long)payload, vh.gso_size);
        else
            FZ_CHECK(got == 1, "a frame that is no buffer gave %llu segments", (unsigned long long)got);
    }
    fz_drain(&c);
    fz_run_timers(&c, 4);
    fz_close(&c);
    free(f);
    return 0;
}
