/* The Internet checksum's ones'-complement sum (RFC 1071), as the data path
 * computes it: memory read in native (little-endian) 32-bit words into a
 * 64-bit accumulator; folded, the result is the checksum's bytes as they go
 * on the wire. A block that starts at an odd offset of the packet has its
 * folded sum byte-swapped (csum_at). Shared by the core, which sums a data
 * packet while it builds it (requester.c), and the I/O side, which adds the
 * pseudo-header and the UDP header (io_packet.c). */
#ifndef MRC_CSUM_H
#define MRC_CSUM_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint64_t csum_add(uint64_t s, const uint8_t *p, size_t n)
{
    while (n >= 8) {
        uint32_t a, b;
        memcpy(&a, p, 4);
        memcpy(&b, p + 4, 4);
        s += (uint64_t)a + b;
        p += 8;
        n -= 8;
    }
    while (n >= 2) {
        uint16_t a;
        memcpy(&a, p, 2);
        s += a;
        p += 2;
        n -= 2;
    }
    if (n)
        s += *p; /* little-endian host: the odd byte is the high byte of a big-endian word */
    return s;
}

/* Fold to 16 bits (not complemented). */
static inline uint16_t csum_fold16(uint64_t s)
{
    while (s >> 16)
        s = (s & 0xFFFF) + (s >> 16);
    return (uint16_t)s;
}

/* The sum of a block that starts at byte offset at of the packet. */
static inline uint16_t csum_at(uint64_t block_sum, size_t at)
{
    uint16_t x = csum_fold16(block_sum);
    return at & 1 ? (uint16_t)(x << 8 | x >> 8) : x;
}
#endif
