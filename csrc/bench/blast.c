/* Benchmark support: the raw ceiling (bench/fabric_bench.py). Pre-built
 * packets, no protocol, sent to a peer over every plane and path through
 * the same I/O layer the engine uses: what any user-space stack could reach
 * on these ports. The copying blaster also copies each payload from a
 * region, with its ICRC and sum, as the engine must: what a stack that
 * touches each byte once could reach. Not part of the data path.
 *
 * Lock: none; the context's engine thread must not be started (nothing else
 * uses its ports meanwhile). */
#include <stdlib.h>
#include <string.h>

#include "drivers/engine.h"
#include "drivers/io_packet.h"
#include "drivers/io_tx.h"
#include "wire/csum.h"

/* The blaster, and with src the copying blaster: each packet's payload
 * copied from src (walking span bytes in turn, as a sender walks a region)
 * into a batch buffer with its ICRC and sum in one pass (what the engine
 * does per byte sent and nothing else). burst packets in a row take the same
 * EV (a port's buffers of k packets: mrc_ctx_set_gso), 1 a new EV each. */
int64_t mrc_bench_blast_from(struct mrc_ctx *c, uint16_t peer, uint32_t payload, uint64_t duration_ns,
                             const uint8_t *src, uint64_t span, uint32_t burst)
{
    struct io *io = engine_idle_io(c);
    if (!io)
        return -EBUSY;
    if (peer >= io_npeers(io) || payload + 64 > IO_FRAME - IO_HDRS || (src && span < payload) || !burst ||
        burst > IO_BATCH)
        return -EINVAL;
    /* one data packet (WRITE_ONLY to QP 0, which nobody owns), built once */
    uint8_t *pkt = calloc(1, IO_FRAME), *zeros = calloc(1, IO_FRAME);
    uint8_t *batch = src ? malloc((size_t)IO_BATCH * IO_FRAME) : NULL;
    if (!pkt || !zeros || (src && !batch)) {
        free(pkt);
        free(zeros);
        free(batch);
        return -ENOMEM;
    }
    struct mrc_pkt p = {.opcode = MRC_OP_WRITE_ONLY, .dqpn = 0, .payload_len = payload, .dma_len = payload};
    int len = mrc_pkt_build(&p, zeros, pkt, IO_FRAME);
    free(zeros);
    if (len < 0) {
        free(pkt);
        free(batch);
        return len;
    }
    uint32_t hl = (uint32_t)len - payload - MRC_ICRC_LEN;
    /* its sum once (as the engine takes it while it builds a packet): the
     * raw ceiling pays for no pass over the payload */
    uint16_t sum = csum_fold16(csum_add(0, pkt, (size_t)len));
    int64_t sent = 0;
    uint64_t end = mrc_ctx_now_ns() + duration_ns, off = 0;
    uint32_t n = io_nports(io), k = 0;
    while (mrc_ctx_now_ns() < end) {
        for (int i = 0; i < IO_BATCH; i++, k++) {
            uint32_t b = k / burst, plane = io_port(io, b % n)->cfg.plane, entropy = (b / n) & 0xFF;
            const uint8_t *out = pkt;
            if (src) { /* the header as built, the payload from the region, as build_data does */
                uint8_t *b = batch + (size_t)i * IO_FRAME;
                memcpy(b, pkt, hl);
                uint64_t s = csum_add(0, b, hl);
                uint32_t crc = mrc_crc32c_copy_sum(mrc_crc32c(0, b, hl), b + hl, src + off, payload, &s);
                put32(b + hl + payload, crc);
                sum = csum_fold16(s + csum_at(csum_add(0, b + hl + payload, MRC_ICRC_LEN), hl + payload));
                off = off + 2 * (uint64_t)payload <= span ? off + payload : 0;
                out = b;
            }
            struct mrc_txdesc d = {.len = (uint32_t)len, .ev = ev_make(plane, entropy), .peer = peer,
                                   .tclass = MRC_DSCP_DATA << 2 | MRC_ECN_ECT0, .is_data = 1, .has_sum = 1,
                                   .sum = sum};
            io_queue_tx(io, &d, out);
        }
        io_flush_tx(io);
        sent += IO_BATCH;
    }
    free(pkt);
    free(batch);
    return sent;
}
