/* Benchmark support: check what landed, message by message (the fault
 * campaign, which sends alternate contents into a slot lap by lap, so that
 * a write that never landed leaves the last lap's bytes and differs).
 * Counts the bytes of a received region slice that differ from what was
 * sent. Not part of the data path. */
#include <stdint.h>
#include <string.h>

#include "mrc_bench.h"

uint64_t mrc_bench_check(const uint8_t *want, const uint8_t *got, uint64_t n)
{
    uint64_t bad = 0;
    if (memcmp(want, got, n) != 0)
        for (uint64_t i = 0; i < n; i++)
            bad += want[i] != got[i];
    return bad;
}
