/* pingpong: round trips of RDMA WRITE-with-immediate over MRC, from a C
 * program: a client and a server, each of which also talks to mrc perf
 * (`mrc perf server` serves this client; this server serves
 * `mrc perf client --latency`).
 *
 *   cc -O2 -o pingpong examples/c/pingpong.c $(pkg-config --cflags --libs mrc)
 *   mrc fabric exec h1 -- ./pingpong --server --once &
 *   mrc fabric exec h0 -- ./pingpong h1
 *
 * The client writes `size` bytes with an immediate into the server's
 * region; the server's receive completion tells it the length, and it
 * writes the bytes straight back, with the same immediate, into the
 * client's echo region (named in the client's hello). The client times each
 * round trip from its post to its receive completion, checks the echoed
 * bytes, and prints the median, 99th percentile and minimum (--json: JSON).
 * Exit status 0 when every round trip came back with the bytes sent. */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mrc/mrc.h>

#include "opts.h"

/* Ctrl-C or SIGTERM: the loops stop, the context is destroyed (its control socket goes with it) */
static volatile sig_atomic_t stop_now;
#define NOBODY 3 /* serve(): no client came within the timeout */
static void on_signal(int sig) { (void)sig; stop_now = 1; }

#define RECVS 16               /* receives kept posted */
#define MAX_SIZE (64u << 20)   /* bytes a client may ask the server for */

struct side { struct mrc_ctx *c; uint32_t qpn; unsigned char *buf; uint32_t lkey, rkey; };

static int security_of(const char *name)
{
    static const char *const names[] = {"off", "auth", "encrypt"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, names[i]))
            return i;
    return -1;
}

static int fail(const char *what, int rc)
{
    const char *why = mrc_last_error();
    fprintf(stderr, "pingpong: %s: %s\n", what, *why ? why : strerror(rc < 0 ? -rc : rc));
    return 1;
}

/* The next completion: for 50 us drive the NIC from this thread (or give
 * the core to the engine thread while it runs: two spinning threads on a
 * small machine starve it), then sleep on the CQ's completion channel.
 * 0, or -ETIMEDOUT after timeout_ms. */
static int next_wc(struct mrc_ctx *c, struct mrc_wc *wc, int timeout_ms)
{
    uint64_t start = mrc_ctx_now_ns();
    for (;;) {
        int n = mrc_poll_cq(c, 0, wc, 1);
        if (n != 0)
            return n < 0 ? n : 0;
        uint64_t waited = mrc_ctx_now_ns() - start;
        if (waited > (uint64_t)timeout_ms * 1000000u)
            return -ETIMEDOUT;
        if (waited < 50000) {
            if (mrc_ctx_progress(c) <= 0)
                sched_yield();
            continue;
        }
        mrc_ctx_progress_done(c);
        struct pollfd pf = {.fd = mrc_cq_fd(c, 0), .events = POLLIN};
        uint64_t drain;
        if (poll(&pf, 1, 1) > 0 && read(pf.fd, &drain, sizeof(drain)) < 0)
            return -errno;
    }
}

static int post_recvs(struct side *s, int n)
{
    uint64_t ids[RECVS] = {0};
    return mrc_post_recv(s->c, s->qpn, ids, (uint32_t)n);
}

static int write_imm(struct side *s, uint32_t len, uint64_t raddr, uint32_t rkey, uint32_t imm)
{
    struct mrc_wr wr = {.wr_id = imm, .opcode = MRC_WR_WRITE_IMM, .num_sge = 1,
                        .sg_list = {{(uint64_t)(uintptr_t)s->buf, len, s->lkey}},
                        .remote_addr = raddr, .rkey = rkey, .imm_data = imm};
    return mrc_post_write(s->c, s->qpn, &wr, 1);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int new_qp(struct side *s)
{
    struct mrc_qp_attr qa;
    mrc_ctx_qp_attr_default(s->c, &qa);
    qa.rq_depth = 64;
    return mrc_qp_create(s->c, &qa, &s->qpn);
}

/* One client, from its hello to its bye. */
static int serve(struct mrc_ctx *c, struct mrc_cm_listener *l, int timeout_ms)
{
    struct side s = {.c = c};
    struct mrc_cm *cm;
    struct mrc_remote cli;
    uint64_t size = 1 << 20, echo_addr, echo_rkey;
    int rc = mrc_cm_accept(l, c, timeout_ms, &cm, &cli);
    if (rc == -ETIMEDOUT || (rc == -EINTR && stop_now))
        return NOBODY; /* nobody came this time: the caller looks at stop_now and waits again */
    if (rc < 0)
        return fail("accept a client", rc);
    mrc_cm_get(cm, "params.max_size", &size);
    if (mrc_cm_get(cm, "params.echo.addr", &echo_addr) < 0 || mrc_cm_get(cm, "params.echo.rkey", &echo_rkey) < 0
        || !size || size > MAX_SIZE) {
        mrc_cm_send(cm, "{\"error\":\"this server echoes round trips: params needs max_size (at most 64 MiB) "
                        "and echo {addr, rkey}\",\"errno\":22}");
        mrc_cm_close(cm);
        return fail("serve a client", -EINVAL);
    }
    struct mrc_local me = {0};
    if (!(s.buf = calloc(1, size)))
        return fail("allocate the buffer", -ENOMEM);
    if ((rc = mrc_mr_reg(c, 0, s.buf, size, MRC_ACCESS_LOCAL_WRITE | MRC_ACCESS_REMOTE_WRITE, &s.lkey, &s.rkey)) < 0
        || (rc = new_qp(&s)) < 0)
        return fail("make the client's region and QP", rc);
    me = (struct mrc_local){.qpn = s.qpn, .addr = (uint64_t)(uintptr_t)s.buf, .rkey = s.rkey, .length = size};
    if ((rc = mrc_cm_qp_connect(cm, c, &me, &cli)) < 0 || (rc = post_recvs(&s, RECVS)) < 0
        || (rc = mrc_cm_reply(cm, c, &me, NULL)) < 0)
        return fail("connect to the client", rc);
    fprintf(stderr, "pingpong: serving QP %u of %s\n", cli.qpn, cli.host[0] ? cli.host : "a client");
    unsigned long echoed = 0;
    while (!stop_now) {
        struct mrc_wc wc;
        rc = next_wc(c, &wc, 100);
        if (rc == 0 && wc.status != MRC_WC_SUCCESS) {
            fprintf(stderr, "pingpong: completion failed: %s (%s)\n", mrc_wc_status_str(wc.status),
                    mrc_wc_status_name(wc.status));
            break;
        }
        if (rc == 0 && wc.opcode == MRC_WC_RECV_WRITE_IMM) {
            if ((rc = post_recvs(&s, 1)) < 0 || (rc = write_imm(&s, wc.byte_len, echo_addr, (uint32_t)echo_rkey,
                                                                  wc.imm_data)) < 0)
                return fail("echo", rc);
            echoed++;
            continue;
        }
        if (rc < 0 && rc != -ETIMEDOUT)
            return fail("poll the CQ", rc);
        /* between round trips: the client's messages (tick, bye) */
        struct pollfd pf = {.fd = mrc_cm_fd(cm), .events = POLLIN};
        if (poll(&pf, 1, 0) > 0) {
            uint64_t bye = 0;
            if (mrc_cm_recv(cm, 1000) < 0 || mrc_cm_get(cm, "bye", &bye) == 0)
                break;
        }
    }
    fprintf(stderr, "pingpong: echoed %lu round trips\n", echoed);
    mrc_cm_close(cm);
    mrc_qp_destroy(c, s.qpn);
    mrc_mr_dereg(c, s.lkey);
    free(s.buf);
    return 0;
}

static int client(struct mrc_ctx *c, const char *server, uint16_t port, const char *psk, uint32_t size,
                  unsigned long iters, int json, int security)
{
    struct side s = {.c = c};
    unsigned char *back = calloc(1, size);
    uint32_t blkey, brkey;
    int rc;
    if (!(s.buf = malloc(size)) || !back)
        return fail("allocate the buffers", -ENOMEM);
    for (uint32_t i = 0; i < size; i++)
        s.buf[i] = (unsigned char)(i * 131 + 7);
    if ((rc = mrc_mr_reg(c, 0, s.buf, size, MRC_ACCESS_LOCAL_WRITE, &s.lkey, &s.rkey)) < 0
        || (rc = mrc_mr_reg(c, 0, back, size, MRC_ACCESS_LOCAL_WRITE | MRC_ACCESS_REMOTE_WRITE, &blkey, &brkey)) < 0
        || (rc = new_qp(&s)) < 0)
        return fail("make the buffers and the QP", rc);
    char extra[200];
    snprintf(extra, sizeof(extra), "\"params\":{\"max_size\":%u,\"imm\":true,\"echo\":{\"addr\":%llu,\"rkey\":%u}}",
             size, (unsigned long long)(uintptr_t)back, brkey);
    struct mrc_local me = {.qpn = s.qpn, .security = (uint32_t)security};
    struct mrc_remote srv;
    struct mrc_cm *cm;
    if ((rc = mrc_cm_connect(c, server, port, psk, &me, extra, 0, &cm, &srv)) < 0)
        return fail("set up the connection", rc);
    if ((rc = mrc_cm_qp_connect(cm, c, &me, &srv)) < 0 || (rc = post_recvs(&s, RECVS)) < 0)
        return fail("connect the QP", rc);
    uint64_t *rtt = calloc(iters, sizeof(*rtt));
    for (unsigned long i = 0; rtt && i < iters; i++) {
        if (stop_now) {
            fprintf(stderr, "pingpong: stopped after %lu round trips\n", i);
            return 130;
        }
        uint64_t t0 = mrc_ctx_now_ns();
        if ((rc = write_imm(&s, size, srv.addr, srv.rkey, (uint32_t)i)) < 0)
            return fail("post", rc);
        for (int got_echo = 0; !got_echo;) {
            struct mrc_wc wc;
            if ((rc = next_wc(c, &wc, 10000)) < 0)
                return fail("wait for the echo", rc);
            if (wc.status != MRC_WC_SUCCESS) {
                fprintf(stderr, "pingpong: round trip %lu failed: %s (%s)\n", i, mrc_wc_status_str(wc.status),
                        mrc_wc_status_name(wc.status));
                return 1;
            }
            if (wc.opcode == MRC_WC_RECV_WRITE_IMM) {
                if (wc.imm_data != (uint32_t)i || wc.byte_len != size) {
                    fprintf(stderr, "pingpong: echo %lu came back as %u (%u bytes)\n", i, wc.imm_data, wc.byte_len);
                    return 1;
                }
                got_echo = 1;
                if ((rc = post_recvs(&s, 1)) < 0)
                    return fail("post a receive", rc);
            }
        }
        rtt[i] = mrc_ctx_now_ns() - t0;
    }
    mrc_ctx_progress_done(c);
    mrc_cm_send(cm, "{\"bye\":true}");
    mrc_cm_close(cm);
    int same = rtt && memcmp(back, s.buf, size) == 0;
    qsort(rtt, iters, sizeof(*rtt), cmp_u64);
    double p50 = (double)rtt[iters / 2] / 1e3, p99 = (double)rtt[iters * 99 / 100] / 1e3, lo = (double)rtt[0] / 1e3;
    if (json)
        printf("{\"size\": %u, \"iters\": %lu, \"op\": \"WRITE_IMM round trip\", \"p50_us\": %.1f, \"p99_us\": %.1f, "
               "\"min_us\": %.1f, \"verified\": %s}\n", size, iters, p50, p99, lo, same ? "true" : "false");
    else
        printf("%10u B  round trip p50 %.1f us  p99 %.1f us  min %.1f us  verified %s\n", size, p50, p99, lo,
               same ? "yes" : "NO");
    mrc_qp_destroy(c, s.qpn);
    mrc_mr_dereg(c, s.lkey);
    mrc_mr_dereg(c, blkey);
    free(rtt);
    free(back);
    free(s.buf);
    return !same;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: pingpong [options] SERVER     round trips to a server\n"
               "       pingpong [options] --server   echo clients' round trips\n"
               "  -s, --size N      bytes per write (default 64)\n"
               "  -n, --iters N     round trips (default 1000)\n"
               "  -1, --once        serve one client, then exit\n"
               "  -b, --bind ADDR   listen on this address only\n"
               "  -p, --ports LIST  this host's ports, e.g. eth1,eth2 (default: the topology's)\n"
               "  -t, --topology F  topology file (default $MRC_TOPOLOGY)\n"
               "  -P, --port N      connection-setup port (default 18515)\n"
               "  -k, --psk-file F  pre-shared key (a server admits only clients that prove it)\n"
               "      --security M  off, auth or encrypt (authenticated MRC; needs -k; both sides the same)\n"
               "  -j, --json        print the result as JSON\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"size", 1, 0, 's'}, {"iters", 1, 0, 'n'}, {"server", 0, 0, 'S'}, {"once", 0, 0, '1'}, {"bind", 1, 0, 'b'},
        {"ports", 1, 0, 'p'}, {"topology", 1, 0, 't'}, {"port", 1, 0, 'P'}, {"psk-file", 1, 0, 'k'},
        {"json", 0, 0, 'j'}, {"security", 1, 0, 'x'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    struct mrc_open_attr oa = {0};
    unsigned long size = 64, iters = 1000, port = MRC_CM_PORT;
    const char *psk = NULL, *bind = NULL;
    int json = 0, server = 0, once = 0, security = 0, bad = 0, o;
    opterr = 0; /* getopt's own messages off: one line of ours names the option */
    while ((o = getopt_long(argc, argv, "s:n:S1b:p:t:P:k:x:jh", opts, NULL)) != -1) {
        switch (o) {
        case 's': bad = opt_number("pingpong", "--size", optarg, 1, MAX_SIZE, &size); break;
        case 'n': bad = opt_number("pingpong", "--iters", optarg, 1, 1000000000ul, &iters); break;
        case 'S': server = 1; break;
        case '1': once = 1; break;
        case 'b': bind = optarg; break;
        case 'p': oa.ports = optarg; break;
        case 't': oa.topology = optarg; break;
        case 'P': bad = opt_number("pingpong", "--port", optarg, 1, 65535, &port); break;
        case 'k': psk = optarg; break;
        case 'j': json = 1; break;
        case 'x':
            if ((security = security_of(optarg)) < 0) {
                fprintf(stderr, "pingpong: --security wants off, auth or encrypt, not '%s'\n", optarg);
                bad = -1;
            }
            break;
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "pingpong: '%s' is an unknown option or lacks its value (--help lists the options)\n",
                    argv[optind - 1]);
            return 2;
        }
        if (bad)
            return 2;
    }
    if (optind != argc - !server) {
        fprintf(stderr, server ? "pingpong: --server takes no SERVER (--help lists the options)\n"
                               : "pingpong: give one SERVER (a host of the topology, or an IPv6 address), or "
                                 "--server (--help lists the options)\n");
        return 2;
    }
    struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART: a blocked call returns EINTR */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    struct mrc_ctx *c;
    int rc = mrc_ctx_open(&oa, &c);
    if (rc < 0)
        return fail("open the ports", rc);
    if (!server) {
        rc = client(c, argv[optind], (uint16_t)port, psk, (uint32_t)size, iters, json, security);
        mrc_ctx_destroy(c);
        return rc;
    }
    struct mrc_cm_listener *l;
    if ((rc = mrc_cm_listen(bind, (uint16_t)port, psk, &l)) < 0
        || (rc = mrc_cm_listener_security(l, (uint32_t)security)) < 0)
        return fail("listen", rc);
    fprintf(stderr, "pingpong: waiting on [%s]:%lu\n", bind ? bind : "::", port);
    do
        rc = serve(c, l, 500);
    while (!stop_now && (rc == NOBODY || !once));
    if (rc == NOBODY)
        rc = 0;
    mrc_cm_listener_close(l);
    mrc_ctx_destroy(c);
    return rc;
}
