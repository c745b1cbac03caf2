/* Benchmark support: the machine's own cost of touching a byte, the floor
 * under what MRC spends per byte (bench/cpu_min.py): packet-sized chunks
 * of a source span walked in turn (larger than the caches, as a region
 * is) into one packet buffer, copied, checksummed (CRC32C), both one after
 * the other, or both in one pass. Timed on the calling thread's CPU clock,
 * so that time the thread spent preempted does not count. Not part of the
 * data path. */
#include <string.h>
#include <time.h>

#include "mrc_bench.h"
#include "mrc_wire.h"

static uint64_t thread_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int64_t mrc_bench_pass(int kind, uint8_t *dst, const uint8_t *src, uint64_t span, uint32_t len, uint64_t bytes)
{
    if (kind < MRC_PASS_COPY || kind > MRC_PASS_FUSED || !len || span < len)
        return -22; /* -EINVAL */
    volatile uint32_t sink = 0; /* the CRCs are used: the compiler keeps every pass */
    uint64_t off = 0, t0 = thread_ns();
    for (uint64_t done = 0; done < bytes; done += len) {
        const uint8_t *s = src + off;
        switch (kind) {
        case MRC_PASS_COPY: memcpy(dst, s, len); break;
        case MRC_PASS_CRC: sink ^= mrc_crc32c(0, s, len); break;
        case MRC_PASS_APART:
            memcpy(dst, s, len);
            sink ^= mrc_crc32c(0, dst, len);
            break;
        default: sink ^= mrc_crc32c_copy(0, dst, s, len); break;
        }
        off = off + 2 * (uint64_t)len <= span ? off + len : 0;
    }
    (void)sink;
    return (int64_t)(thread_ns() - t0);
}
