/* Benchmark support: check what landed, message by message (the fault
 * campaign). Compares a received region slice with what was sent and
 * counts the bytes that differ; with clear, zeroes the slice too, so that
 * the next write into it must land again to pass (or send alternate
 * contents into a slot and leave clear 0: half the memory traffic). Not
 * part of the data path. */
#include <stdint.h>
#include <string.h>

#include "mrc_dp.h"

uint64_t mrc_bench_check(const uint8_t *want, uint8_t *got, uint64_t n, int clear)
{
    uint64_t bad = 0;
    if (memcmp(want, got, n) != 0)
        for (uint64_t i = 0; i < n; i++)
            bad += want[i] != got[i];
    if (clear)
        memset(got, 0, n);
    return bad;
}
