/*
 * mrc_bench.h - benchmark support (csrc/bench/): the raw ceiling, the
 * kernel's UDP round trip, byte checks and the latency loop, in C so that
 * no Python runs per packet. Read by the cffi build after mrc/mrc.h.
 */
#ifndef MRC_BENCH_H
#define MRC_BENCH_H

#include "mrc/mrc.h"

/* CDEF BEGIN */
/* Benchmark support (csrc/bench/blast.c), the raw ceiling: send pre-built
 * packets (no protocol) to a peer over every plane and path for
 * duration_ns, from the calling thread (the engine thread must not be
 * started). Returns packets sent or -errno. With src, the copying blaster:
 * each payload copied from src (span bytes walked in turn) with its ICRC
 * and UDP sum in one pass before it goes, as the engine builds a data
 * packet; src NULL sends one packet, built once, again and again. burst
 * packets in a row take the same EV (1-64; with mrc_ctx_set_gso's k, they
 * leave k to a kernel buffer). */
int64_t mrc_bench_blast_from(struct mrc_ctx *c, uint16_t peer, uint32_t payload, uint64_t duration_ns,
                             const uint8_t *src, uint64_t span, uint32_t burst);
/* (csrc/bench/verify.c) The bytes of got[0, n) that differ from want. */
uint64_t mrc_bench_check(const uint8_t *want, const uint8_t *got, uint64_t n);
/* (csrc/bench/udpping.c) The kernel's UDP round trip: n pings of size bytes
 * on a connected UDP socket, each one's round trip into rtt_ns[i]; and the
 * other side, echoing n datagrams (returns early on a receive timeout). */
int64_t mrc_bench_udp_pingpong(int fd, uint32_t size, uint32_t n, uint64_t *rtt_ns);
int64_t mrc_bench_udp_echo(int fd, uint32_t n);
/* (csrc/bench/pingpong.c) Latency: the client (echo 0) posts a receive and
 * tmpl as a WRITE_IMM n times, one at a time, and times each until the
 * echo's receive completion (rtt_ns[i]); the echo side (echo 1) answers up
 * to n WRITE_IMMs with the same length and immediate into tmpl's remote
 * region, reposting each receive, and returns early, with the count, after
 * timeout_ns without one. Completions on cqn only; each wait polls for 50 us
 * (progressing the NIC: mrc_ctx_progress), then sleeps on the CQ's channel;
 * -errno on an error. */
int64_t mrc_bench_pingpong(struct mrc_ctx *c, uint32_t qpn, uint32_t cqn, const struct mrc_wr *tmpl, uint32_t n,
                           int echo, uint64_t timeout_ns, uint64_t *rtt_ns);
/* (csrc/bench/passes.c) The machine's cost of a byte: bytes of src
 * (chunks of len bytes, walking span bytes in turn) copied to dst
 * (MRC_PASS_COPY), checksummed (MRC_PASS_CRC), copied then checksummed
 * (MRC_PASS_APART) or both in one pass (MRC_PASS_FUSED, mrc_crc32c_copy).
 * Returns the calling thread's CPU nanoseconds, or -EINVAL. */
enum { MRC_PASS_COPY = 0, MRC_PASS_CRC = 1, MRC_PASS_APART = 2, MRC_PASS_FUSED = 3 };
int64_t mrc_bench_pass(int kind, uint8_t *dst, const uint8_t *src, uint64_t span, uint32_t len, uint64_t bytes);
/* CDEF END */

#endif
