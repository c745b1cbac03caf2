/* Benchmark support: `mrc perf --latency` (and bench/latency_bench.py).
 * One WRITE_IMM at a time and its echo, timed in C so that the figure is
 * the stack's, not the interpreter's: the client posts a receive and a
 * WRITE_IMM and waits for the echo's receive completion; the echo side
 * waits for a receive completion and writes the same length and immediate
 * back. Both poll their CQ for SPIN_NS, progressing the NIC themselves
 * (mrc_ctx_progress: no engine wake-up on the way), then wait on its
 * completion channel (a long or busy spin takes the core the engines need
 * on a small machine: Python polling for 200 us took 470 us per round trip).
 * Through the public API only; not part of the data path. */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <sched.h>
#include <unistd.h>

#include "mrc_bench.h"

/* How long a side polls its CQ (progressing, or yielding when the engine is
 * in a pass) before it sleeps on the channel. Measured with yielding alone,
 * before mrc_ctx_progress (bench/latency_bench.py, 3 rounds each): sleeping at
 * once 30.9-43.6 us p50; 50 us of yielding polls 22.9-23.4 us, p99 39-65
 * against 93-136 us; 100 us 24.2. An echo usually comes back within it, and
 * yielding leaves the core to the engines whenever they have work. */
enum { SPIN_NS = 50000 };

/* The next receive completion on cqn (send completions are passed over);
 * 0 and *out, -ETIMEDOUT after timeout_ns without one, -EIO on an error. */
static int next_recv(struct mrc_ctx *c, uint32_t cqn, uint64_t timeout_ns, struct mrc_wc *out)
{
    int fd = mrc_cq_fd(c, cqn);
    if (fd < 0)
        return fd;
    uint64_t start = mrc_ctx_now_ns(), deadline = start + timeout_ns;
    int slept = 0;
    for (;;) {
        struct mrc_wc wc[16];
        int n = mrc_poll_cq(c, cqn, wc, 16);
        if (n < 0)
            return n;
        int got = 0;
        for (int i = 0; i < n; i++) {
            if (wc[i].status != MRC_WC_SUCCESS)
                return -EIO;
            if (wc[i].opcode == MRC_WC_RECV_WRITE_IMM && !got) {
                *out = wc[i];
                got = 1; /* one echo is outstanding at a time: there is no second */
            }
        }
        if (got)
            return 0;
        if (n)
            continue;
        uint64_t now = mrc_ctx_now_ns();
        if (now >= deadline)
            return -ETIMEDOUT;
        if (now - start < SPIN_NS) { /* the answer is usually this close: no wake-up for it */
            if (mrc_ctx_progress(c) <= 0)
                sched_yield();
            continue;
        }
        if (!slept++)
            mrc_ctx_progress_done(c);
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        uint64_t ms = (deadline - now) / 1000000 + 1;
        if (poll(&pf, 1, (int)(ms > 1000 ? 1000 : ms)) > 0) {
            uint64_t v;
            if (read(fd, &v, sizeof(v)) < 0) { /* another reader took it: poll again */ }
        }
    }
}

int64_t mrc_bench_pingpong(struct mrc_ctx *c, uint32_t qpn, uint32_t cqn, const struct mrc_wr *tmpl, uint32_t n,
                           int echo, uint64_t timeout_ns, uint64_t *rtt_ns)
{
    struct mrc_wr wr = *tmpl;
    struct mrc_wc wc;
    for (uint32_t i = 0; i < n; i++) {
        if (echo) {
            int rc = next_recv(c, cqn, timeout_ns, &wc);
            if (rc == -ETIMEDOUT)
                return i; /* idle: the caller decides whether to go on */
            if (rc < 0)
                return rc;
            wr.wr_id = wc.wr_id;
            wr.imm_data = wc.imm_data;
            wr.sg_list[0].length = wc.byte_len < tmpl->sg_list[0].length ? wc.byte_len : tmpl->sg_list[0].length;
            uint64_t id = wc.wr_id;
            if ((rc = mrc_post_write(c, qpn, &wr, 1)) < 0 || (rc = mrc_post_recv(c, qpn, &id, 1)) < 0)
                return rc;
            continue;
        }
        uint64_t id = i;
        int rc = mrc_post_recv(c, qpn, &id, 1);
        if (rc < 0)
            return rc;
        wr.wr_id = i;
        wr.imm_data = i;
        uint64_t t0 = mrc_ctx_now_ns();
        if ((rc = mrc_post_write(c, qpn, &wr, 1)) < 0)
            return rc;
        if ((rc = next_recv(c, cqn, timeout_ns, &wc)) < 0)
            return rc;
        rtt_ns[i] = mrc_ctx_now_ns() - t0;
    }
    return n;
}
