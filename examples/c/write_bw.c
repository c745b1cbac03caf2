/* write_bw: RDMA WRITE bandwidth over MRC from a C program, against
 * `mrc perf server` (any host of the fabric or network).
 *
 *   cc -O2 -o write_bw examples/c/write_bw.c $(pkg-config --cflags --libs mrc)
 *   mrc fabric exec h1 -- mrc perf server &
 *   mrc fabric exec h0 -- ./write_bw h1
 *
 * It opens a context over this host's ports (the topology file of
 * $MRC_TOPOLOGY as $MRC_HOST, which `mrc fabric exec` sets, or --ports),
 * sets up a connection with the server through the exchange of mrc.cm,
 * writes one buffer `iters` times with `depth` writes in flight, asks the
 * server to check what arrived (its SHA-256), and prints the rate; --json
 * prints it as JSON. Exit status 0 when every write completed and the
 * server found the bytes it was sent. */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <mrc/mrc.h>

#include "opts.h"

/* Ctrl-C or SIGTERM: the writes stop, the context is destroyed (its control socket goes with it) */
static volatile sig_atomic_t stop_now;
static void on_signal(int sig) { (void)sig; stop_now = 1; }

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int fail(const char *what, int rc)
{
    const char *why = mrc_last_error();
    fprintf(stderr, "write_bw: %s: %s\n", what, *why ? why : strerror(-rc));
    return 1;
}

static int security_of(const char *name)
{
    static const char *const names[] = {"off", "auth", "encrypt"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, names[i]))
            return i;
    return -1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: write_bw [options] SERVER\n"
               "  SERVER            a host of the topology, or an IPv6 address of `mrc perf server`\n"
               "  -s, --size N      bytes per write (default 1048576)\n"
               "  -n, --iters N     writes (default 100)\n"
               "  -d, --depth N     writes in flight (default 16)\n"
               "  -p, --ports LIST  this host's ports, e.g. eth1,eth2 (default: the topology's)\n"
               "  -t, --topology F  topology file (default $MRC_TOPOLOGY)\n"
               "  -P, --port N      the server's connection-setup port (default 18515)\n"
               "  -k, --psk-file F  prove the pre-shared key in F to the server\n"
               "  -S, --security M  off, auth or encrypt (authenticated MRC; needs -k; the server's own)\n"
               "  -j, --json        print the result as JSON\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"size", 1, 0, 's'}, {"iters", 1, 0, 'n'}, {"depth", 1, 0, 'd'}, {"ports", 1, 0, 'p'},
        {"topology", 1, 0, 't'}, {"port", 1, 0, 'P'}, {"psk-file", 1, 0, 'k'}, {"json", 0, 0, 'j'},
        {"security", 1, 0, 'S'},
        {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    struct mrc_open_attr oa = {0};
    unsigned long size = 1 << 20, iters = 100, depth = 16, port = MRC_CM_PORT;
    const char *psk = NULL;
    int json = 0, security = 0, bad = 0, o;
    opterr = 0; /* getopt's own messages off: one line of ours names the option */
    while ((o = getopt_long(argc, argv, "s:n:d:p:t:P:k:S:jh", opts, NULL)) != -1) {
        switch (o) {
        case 's': bad = opt_number("write_bw", "--size", optarg, 1, 1ul << 30, &size); break;
        case 'n': bad = opt_number("write_bw", "--iters", optarg, 1, 1000000000ul, &iters); break;
        case 'd': bad = opt_number("write_bw", "--depth", optarg, 1, 4096, &depth); break;
        case 'p': oa.ports = optarg; break;
        case 't': oa.topology = optarg; break;
        case 'P': bad = opt_number("write_bw", "--port", optarg, 1, 65535, &port); break;
        case 'k': psk = optarg; break;
        case 'j': json = 1; break;
        case 'S':
            if ((security = security_of(optarg)) < 0) {
                fprintf(stderr, "write_bw: --security wants off, auth or encrypt, not '%s'\n", optarg);
                bad = -1;
            }
            break;
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "write_bw: '%s' is an unknown option or lacks its value (--help lists the options)\n",
                    argv[optind - 1]);
            return 2;
        }
        if (bad)
            return 2;
    }
    if (optind != argc - 1) {
        fprintf(stderr, "write_bw: give one SERVER (a host of the topology, or an IPv6 address), not %d "
                        "(--help lists the options)\n", argc - optind);
        return 2;
    }
    struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART: a blocked call returns EINTR */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    struct mrc_ctx *c;
    int rc = mrc_ctx_open(&oa, &c);
    if (rc < 0)
        return fail("open the ports", rc);
    unsigned char *buf = malloc(size);
    if (!buf)
        return fail("allocate the buffer", -ENOMEM);
    srand((unsigned)time(NULL));
    for (unsigned long i = 0; i < size; i++)
        buf[i] = (unsigned char)rand();
    uint32_t lkey, rkey;
    struct mrc_qp_attr qa;
    struct mrc_local me = {.security = (uint32_t)security};
    if ((rc = mrc_mr_reg(c, 0, buf, size, MRC_ACCESS_LOCAL_WRITE, &lkey, &rkey)) < 0)
        return fail("register the buffer", rc);
    mrc_ctx_qp_attr_default(c, &qa);
    qa.sq_depth = depth * 2 > 64 ? (uint32_t)depth * 2 : 64;
    if ((rc = mrc_qp_create(c, &qa, &me.qpn)) < 0)
        return fail("create the QP", rc);

    /* the server registers max_size bytes we may write, and answers with them */
    char extra[128];
    struct mrc_cm *cm;
    struct mrc_remote srv;
    snprintf(extra, sizeof(extra), "\"params\":{\"max_size\":%lu,\"imm\":false}", size);
    if ((rc = mrc_cm_connect(c, argv[optind], (uint16_t)port, psk, &me, extra, 0, &cm, &srv)) < 0)
        return fail("set up the connection", rc);
    if ((rc = mrc_cm_qp_connect(cm, c, &me, &srv)) < 0) /* under the setup's keys when secured */
        return fail("connect the QP", rc);

    unsigned long posted = 0, done = 0, failed = 0;
    int cqfd = mrc_cq_fd(c, 0);
    double t0 = now_s();
    while (done < iters) {
        if (stop_now) {
            fprintf(stderr, "write_bw: stopped after %lu of %lu writes\n", done, iters);
            mrc_cm_close(cm);
            mrc_ctx_destroy(c);
            free(buf);
            return 130;
        }
        while (posted < iters && posted - done < depth) {
            struct mrc_wr wr = {.wr_id = posted, .opcode = MRC_WR_WRITE, .num_sge = 1,
                                .sg_list = {{(uint64_t)(uintptr_t)buf, (uint32_t)size, lkey}},
                                .remote_addr = srv.addr, .rkey = srv.rkey};
            if ((rc = mrc_post_write(c, me.qpn, &wr, 1)) < 0)
                return fail("post a write", rc);
            posted++;
        }
        struct mrc_wc wc[64];
        int n = mrc_poll_cq(c, 0, wc, 64);
        if (n < 0)
            return fail("poll the CQ", n);
        for (int i = 0; i < n; i++) {
            if (wc[i].status != MRC_WC_SUCCESS) {
                fprintf(stderr, "write_bw: write %llu failed: %s (%s)\n", (unsigned long long)wc[i].wr_id,
                        mrc_wc_status_str(wc[i].status), mrc_wc_status_name(wc[i].status));
                failed++;
            }
            done++;
        }
        if (!n) { /* nothing yet: sleep on the CQ's completion channel (at most 1 ms) */
            struct pollfd pf = {.fd = cqfd, .events = POLLIN};
            uint64_t drain;
            if (poll(&pf, 1, 1) > 0 && read(cqfd, &drain, sizeof(drain)) < 0)
                return fail("read the completion channel", -errno);
        }
    }
    double dt = now_s() - t0;

    /* the server hashes what arrived in its region */
    char msg[200], digest[65];
    uint64_t verified = 0;
    mrc_sha256_hex(buf, size, digest);
    snprintf(msg, sizeof(msg), "{\"check\":%lu,\"iters\":%lu,\"sha256\":\"%s\"}", size, iters, digest);
    if ((rc = mrc_cm_send(cm, msg)) < 0 || (rc = mrc_cm_recv(cm, 30000)) < 0
        || (rc = mrc_cm_get(cm, "verified", &verified)) < 0)
        return fail("ask the server to check the bytes", rc);
    mrc_cm_send(cm, "{\"bye\":true}");
    struct mrc_qp_stats st;
    mrc_qp_query(c, me.qpn, &st);
    double gbps = (double)size * (double)iters * 8 / dt / 1e9;
    if (json)
        printf("{\"size\": %lu, \"iters\": %lu, \"op\": \"WRITE\", \"gbps\": %.3f, \"msg_rate\": %.1f, "
               "\"retransmits\": %llu, \"failed\": %lu, \"verified\": %s}\n", size, iters, gbps, (double)iters / dt,
               (unsigned long long)st.rtx_packets, failed, verified ? "true" : "false");
    else
        printf("%10lu B  %8.3f Gb/s  %9.1f msg/s  rtx %llu  verified %s\n", size, gbps, (double)iters / dt,
               (unsigned long long)st.rtx_packets, verified ? "yes" : "NO");
    mrc_cm_close(cm);
    mrc_qp_destroy(c, me.qpn);
    mrc_mr_dereg(c, lkey);
    mrc_ctx_destroy(c);
    free(buf);
    return failed || !verified;
}
