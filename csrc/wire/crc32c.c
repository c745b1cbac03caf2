/* CRC32C (Castagnoli) for the ICRC: carry-less multiply folding (AVX-512
 * VPCLMULQDQ) for 512 bytes and more where the CPU has it, the SSE4.2
 * instruction otherwise, a slicing table without either (protocol.md
 * section 2, "ICRC"). MRC_CRC_NO_FOLD in the environment keeps the folding
 * off (the control for a before/after measurement). */
#include "mrc_wire.h"
#include "wire/csum.h"
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

static uint32_t table[8][256];
static int table_ready;
static int have_hw = -1;

static void build_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xFF];
    table_ready = 1;
}

static uint32_t crc_sw(uint32_t crc, const uint8_t *p, size_t n)
{
    if (!table_ready)
        build_table();
    while (n >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        crc = table[7][lo & 0xFF] ^ table[6][(lo >> 8) & 0xFF] ^ table[5][(lo >> 16) & 0xFF] ^
              table[4][lo >> 24] ^ table[3][p[4]] ^ table[2][p[5]] ^ table[1][p[6]] ^ table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xFF];
    return crc;
}

#define POLY 0x82F63B78u

/* Multiply two polynomials modulo P, bit-reflected (as in zlib's
 * crc32_combine): used to join CRCs computed over separate blocks. */
static uint32_t multmodp(uint32_t a, uint32_t b)
{
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0)
                break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ POLY : b >> 1;
    }
    return p;
}

/* x^(8n) mod P: the operator that shifts a CRC over n zero bytes. */
static uint32_t x8nmodp(size_t n)
{
    uint32_t sq = 1u << 30, p = 1u << 31; /* x^1, x^0 */
    for (int k = 0; k < 3; k++)
        sq = multmodp(sq, sq); /* x^8 */
    while (n) {
        if (n & 1)
            p = multmodp(sq, p);
        sq = multmodp(sq, sq);
        n >>= 1;
    }
    return p;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_hw_serial(uint32_t crc, const uint8_t *p, size_t n)
{
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t v;
        __builtin_memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--)
        c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32;
}

/* Three independent crc32q chains hide the instruction's 3-cycle latency;
 * the partial CRCs are then shifted into place and combined. */
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const uint8_t *p, size_t n)
{
    static __thread size_t op_len;
    static __thread uint32_t op;
    if (n < 768)
        return crc_hw_serial(crc, p, n);
    size_t blk = (n / 3) & ~(size_t)7;
    uint64_t c0 = crc, c1 = 0, c2 = 0;
    const uint8_t *p1 = p + blk, *p2 = p + 2 * blk;
    for (size_t i = 0; i < blk; i += 8) {
        uint64_t v0, v1, v2;
        __builtin_memcpy(&v0, p + i, 8);
        __builtin_memcpy(&v1, p1 + i, 8);
        __builtin_memcpy(&v2, p2 + i, 8);
        c0 = __builtin_ia32_crc32di(c0, v0);
        c1 = __builtin_ia32_crc32di(c1, v1);
        c2 = __builtin_ia32_crc32di(c2, v2);
    }
    if (op_len != blk) {
        op = x8nmodp(blk);
        op_len = blk;
    }
    uint32_t c = multmodp(op, (uint32_t)c0) ^ (uint32_t)c1;
    c = multmodp(op, c) ^ (uint32_t)c2;
    return crc_hw_serial(c, p + 3 * blk, n - 3 * blk);
}

/* Folding with carry-less multiplies (VPCLMULQDQ on AVX-512): four 64-byte
 * accumulators, each of their 128-bit lanes carried 256 bytes on per step
 * as lo x (x^(D+32) mod P) ^ hi x (x^(D-32) mod P) (bit-reflected, one bit
 * up), which keeps the message's CRC (Intel, "Fast CRC Computation for
 * Generic Polynomials Using PCLMULQDQ"). The last 64 bytes so folded stand
 * for everything before them: the instruction finishes them and the tail.
 * n >= 256. It is faster than the three crc32q chains (bench/engine_bench.py
 * against MRC_CRC_NO_FOLD=1, alternated, measures by how much). */
static int have_fold = -1;
static uint64_t fold_k[4]; /* 256 bytes on: lo, hi; 64 bytes on: lo, hi */

static uint64_t fold_const(size_t bits) { return (uint64_t)x8nmodp(bits / 8) << 1; }

__attribute__((target("avx512f,vpclmulqdq"))) static inline __m512i fold_step(__m512i x, __m512i k, __m512i d)
{
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00), _mm512_clmulepi64_epi128(x, k, 0x11), d,
                                     0x96); /* a ^ b ^ c */
}

__attribute__((target("avx512f,vpclmulqdq,sse4.2"))) static uint32_t crc_fold(uint32_t crc, const uint8_t *p, size_t n)
{
    const __m512i k256 = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)fold_k[1], (long long)fold_k[0]));
    const __m512i k64 = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)fold_k[3], (long long)fold_k[2]));
    __m512i x0 = _mm512_loadu_si512((const void *)p), x1 = _mm512_loadu_si512((const void *)(p + 64));
    __m512i x2 = _mm512_loadu_si512((const void *)(p + 128)), x3 = _mm512_loadu_si512((const void *)(p + 192));
    x0 = _mm512_xor_si512(x0, _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, (int)crc));
    for (p += 256, n -= 256; n >= 256; p += 256, n -= 256) {
        x0 = fold_step(x0, k256, _mm512_loadu_si512((const void *)p));
        x1 = fold_step(x1, k256, _mm512_loadu_si512((const void *)(p + 64)));
        x2 = fold_step(x2, k256, _mm512_loadu_si512((const void *)(p + 128)));
        x3 = fold_step(x3, k256, _mm512_loadu_si512((const void *)(p + 192)));
    }
    __m512i x = fold_step(fold_step(fold_step(x0, k64, x1), k64, x2), k64, x3);
    for (; n >= 64; p += 64, n -= 64)
        x = fold_step(x, k64, _mm512_loadu_si512((const void *)p));
    uint8_t last[64];
    _mm512_storeu_si512((void *)last, x);
    return crc_hw_serial(crc_hw_serial(0, last, sizeof(last)), p, n);
}

/* crc_fold that also stores every byte it reads at dst, and with sum adds
 * the bytes' ones'-complement sum to *sum (csrc/wire/csum.h: native 32-bit
 * words): the copy, the CRC and the checksum in one pass, each 64-byte
 * block loaded once (n >= 256). */
__attribute__((target("avx512f,vpclmulqdq,sse4.2"), always_inline)) static inline uint32_t
crc_fold_copy_impl(uint32_t crc, uint8_t *d, const uint8_t *p, size_t n, uint64_t *sum)
{
    const __m512i k256 = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)fold_k[1], (long long)fold_k[0]));
    const __m512i k64 = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)fold_k[3], (long long)fold_k[2]));
    const __m512i lo32 = _mm512_set1_epi64(0xFFFFFFFFll);
    __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
#define MRC_SUM(y)                                                                                                     \
    do {                                                                                                               \
        if (sum) {                                                                                                     \
            s0 = _mm512_add_epi64(s0, _mm512_and_si512((y), lo32));                                                    \
            s1 = _mm512_add_epi64(s1, _mm512_srli_epi64((y), 32));                                                     \
        }                                                                                                              \
    } while (0)
    __m512i x0 = _mm512_loadu_si512((const void *)p), x1 = _mm512_loadu_si512((const void *)(p + 64));
    __m512i x2 = _mm512_loadu_si512((const void *)(p + 128)), x3 = _mm512_loadu_si512((const void *)(p + 192));
    _mm512_storeu_si512((void *)d, x0);
    _mm512_storeu_si512((void *)(d + 64), x1);
    _mm512_storeu_si512((void *)(d + 128), x2);
    _mm512_storeu_si512((void *)(d + 192), x3);
    MRC_SUM(x0);
    MRC_SUM(x1);
    MRC_SUM(x2);
    MRC_SUM(x3);
    x0 = _mm512_xor_si512(x0, _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, (int)crc));
    for (p += 256, d += 256, n -= 256; n >= 256; p += 256, d += 256, n -= 256) {
        __m512i y0 = _mm512_loadu_si512((const void *)p), y1 = _mm512_loadu_si512((const void *)(p + 64));
        __m512i y2 = _mm512_loadu_si512((const void *)(p + 128)), y3 = _mm512_loadu_si512((const void *)(p + 192));
        _mm512_storeu_si512((void *)d, y0);
        _mm512_storeu_si512((void *)(d + 64), y1);
        _mm512_storeu_si512((void *)(d + 128), y2);
        _mm512_storeu_si512((void *)(d + 192), y3);
        MRC_SUM(y0);
        MRC_SUM(y1);
        MRC_SUM(y2);
        MRC_SUM(y3);
        x0 = fold_step(x0, k256, y0);
        x1 = fold_step(x1, k256, y1);
        x2 = fold_step(x2, k256, y2);
        x3 = fold_step(x3, k256, y3);
    }
    __m512i x = fold_step(fold_step(fold_step(x0, k64, x1), k64, x2), k64, x3);
    for (; n >= 64; p += 64, d += 64, n -= 64) {
        __m512i y = _mm512_loadu_si512((const void *)p);
        _mm512_storeu_si512((void *)d, y);
        MRC_SUM(y);
        x = fold_step(x, k64, y);
    }
#undef MRC_SUM
    memcpy(d, p, n);
    if (sum) /* the tail starts at a multiple of 64: its words line up */
        *sum += (uint64_t)_mm512_reduce_add_epi64(s0) + (uint64_t)_mm512_reduce_add_epi64(s1) + csum_add(0, p, n);
    uint8_t last[64];
    _mm512_storeu_si512((void *)last, x);
    return crc_hw_serial(crc_hw_serial(0, last, sizeof(last)), p, n);
}

__attribute__((target("avx512f,vpclmulqdq,sse4.2"))) static uint32_t crc_fold_copy(uint32_t crc, uint8_t *d,
                                                                                  const uint8_t *p, size_t n,
                                                                                  uint64_t *sum)
{
    /* two copies of the loop, one summing and one not: the test is not taken per block */
    return sum ? crc_fold_copy_impl(crc, d, p, n, sum) : crc_fold_copy_impl(crc, d, p, n, NULL);
}

/* Several threads may ask first: each computes the same constants, and the
 * flag is published after them. */
static int fold_ok(void)
{
    int have = __atomic_load_n(&have_fold, __ATOMIC_ACQUIRE);
    if (have < 0) {
        int ok = mrc_crc32c_hw() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq") &&
                 !getenv("MRC_CRC_NO_FOLD"); /* mrc_crc32c_hw: sse4.2, after __builtin_cpu_init */
        if (ok) {
            fold_k[0] = fold_const(2048 + 32);
            fold_k[1] = fold_const(2048 - 32);
            fold_k[2] = fold_const(512 + 32);
            fold_k[3] = fold_const(512 - 32);
        }
        __atomic_store_n(&have_fold, ok, __ATOMIC_RELEASE);
        have = ok;
    }
    return have;
}
#endif

/* The table implementation alone (tests compare it with the instruction). */
uint32_t mrc_crc32c_sw(uint32_t crc, const uint8_t *buf, size_t len) { return ~crc_sw(~crc, buf, len); }

int mrc_crc32c_hw(void)
{
#if defined(__x86_64__)
    if (have_hw < 0) {
        __builtin_cpu_init();
        have_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    }
    return have_hw;
#else
    return 0;
#endif
}

/* Copy len bytes from src to dst and extend crc over them, as
 * mrc_crc32c(crc, src, len) would: one pass where the CPU folds (each byte
 * read once), a copy and a CRC of the copy otherwise. The regions must not
 * overlap. */
uint32_t mrc_crc32c_copy(uint32_t crc, uint8_t *dst, const uint8_t *src, size_t len)
{
#if defined(__x86_64__)
    if (len >= 512 && fold_ok())
        return ~crc_fold_copy(~crc, dst, src, len, NULL);
#endif
    memcpy(dst, src, len);
    return mrc_crc32c(crc, dst, len);
}

/* mrc_crc32c_copy that also adds the bytes' ones'-complement sum to *sum
 * (native 32-bit words, csrc/wire/csum.h), in the same pass where the CPU folds. */
uint32_t mrc_crc32c_copy_sum(uint32_t crc, uint8_t *dst, const uint8_t *src, size_t len, uint64_t *sum)
{
#if defined(__x86_64__)
    if (len >= 512 && fold_ok())
        return ~crc_fold_copy(~crc, dst, src, len, sum);
#endif
    memcpy(dst, src, len);
    *sum = csum_add(*sum, dst, len);
    return mrc_crc32c(crc, dst, len);
}

/* Standard CRC32C: pass crc = 0 to start; chain calls to extend. */
uint32_t mrc_crc32c(uint32_t crc, const uint8_t *buf, size_t len)
{
    crc = ~crc;
#if defined(__x86_64__)
    if (len >= 512 && fold_ok())
        return ~crc_fold(crc, buf, len);
    if (mrc_crc32c_hw())
        return ~crc_hw(crc, buf, len);
#endif
    return ~crc_sw(crc, buf, len);
}
