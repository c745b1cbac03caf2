/* Benchmark support: the raw ceiling (bench/fabric_bench.py). Pre-built
 * packets, no protocol, sent to a peer over every plane and path through
 * the same I/O layer the engine uses: what any user-space stack could reach
 * on these ports. Not part of the data path.
 *
 * Lock: none; the context's engine thread must not be started (nothing else
 * uses its ports meanwhile). */
#include "../csum.h"
#include "../io.h"

int64_t mrc_bench_blast(struct mrc_ctx *c, uint16_t peer, uint32_t payload, uint64_t duration_ns)
{
    struct io *io = engine_idle_io(c);
    if (!io)
        return -EBUSY;
    if (peer >= io_npeers(io) || payload + 64 > IO_FRAME - IO_HDRS)
        return -EINVAL;
    /* one data packet (WRITE_ONLY to QP 0, which nobody owns), built once */
    uint8_t *pkt = calloc(1, IO_FRAME), *zeros = calloc(1, IO_FRAME);
    if (!pkt || !zeros) {
        free(pkt);
        free(zeros);
        return -ENOMEM;
    }
    struct mrc_pkt p = {.opcode = MRC_OP_WRITE_ONLY, .dqpn = 0, .payload_len = payload, .dma_len = payload};
    int len = mrc_pkt_build(&p, zeros, pkt, IO_FRAME);
    free(zeros);
    if (len < 0) {
        free(pkt);
        return len;
    }
    /* its sum once (as the engine takes it while it builds a packet): the
     * raw ceiling pays for no pass over the payload */
    uint16_t sum = csum_fold16(csum_add(0, pkt, (size_t)len));
    int64_t sent = 0;
    uint64_t end = mrc_ctx_now_ns() + duration_ns;
    uint32_t n = io_nports(io), k = 0;
    while (mrc_ctx_now_ns() < end) {
        for (int i = 0; i < IO_BATCH; i++, k++) {
            uint32_t plane = io_port(io, k % n)->cfg.plane, entropy = (k / n) & 0xFF;
            struct mrc_txdesc d = {.len = (uint32_t)len, .ev = ev_make(plane, entropy), .peer = peer,
                                   .tclass = MRC_DSCP_DATA << 2 | MRC_ECN_ECT0, .is_data = 1, .has_sum = 1,
                                   .sum = sum};
            io_queue_tx(io, &d, pkt);
        }
        io_flush_tx(io);
        sent += IO_BATCH;
    }
    free(pkt);
    return sent;
}
