/* verbs_check: patterned RDMA WRITEs checked byte for byte at the other end,
 * written against <infiniband/verbs.h> alone (no MRC header): the program a
 * user of any RDMA device could write. Under `mrc verbs run` it runs over
 * MRC (mrc0); perftest does not check what it wrote, this does.
 *
 *   server:  verbs_check [-d mrc0] [-x 0] [-s 1M] [-n 100] [-p 18600]
 *   client:  verbs_check [-d mrc0] [-x 0] [-s 1M] [-n 100] [-p 18600] SERVER
 *
 * Both sides exchange QP number, PSN, GID, region address and rkey over TCP
 * (as perftest does). For each iteration the client fills its buffer with
 * the iteration's pattern and writes it to the server's region: every chunk
 * but the last as RDMA WRITE, the last as WRITE_WITH_IMM carrying the
 * iteration number, unsignaled but for the last of each iteration. The
 * server checks every byte when the immediate arrives and answers over TCP.
 * Prints one JSON line; exits 0 only when no byte was wrong.
 *
 *   cc -O2 -o verbs_check verbs_check.c -libverbs */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct side { uint32_t qpn, psn, rkey; uint64_t addr; uint8_t gid[16]; };

static void die(const char *what, int err)
{
    fprintf(stderr, "verbs_check: %s: %s\n", what, strerror(err));
    exit(2);
}

static uint8_t pattern(uint64_t i, uint32_t iter) { return (uint8_t)(i * 131 + iter * 7 + (i >> 12)); }

static int tcp(const char *server, const char *port)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = server ? 0 : AI_PASSIVE};
    struct addrinfo *res;
    int rc = getaddrinfo(server, port, &hints, &res);
    if (rc)
        die(gai_strerror(rc), EINVAL);
    int fd = socket(res->ai_family, SOCK_STREAM, 0), one = 1;
    if (fd < 0)
        die("socket", errno);
    if (server) {
        for (int tries = 0; connect(fd, res->ai_addr, res->ai_addrlen) < 0; tries++) {
            if (tries > 100)
                die("connect to the server", errno);
            usleep(100000);
        }
    } else {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, 1) < 0)
            die("listen", errno);
        int c = accept(fd, NULL, NULL);
        if (c < 0)
            die("accept", errno);
        close(fd);
        fd = c;
    }
    freeaddrinfo(res);
    return fd;
}

static void xfer(int fd, void *buf, size_t n, int out)
{
    for (size_t off = 0; off < n;) {
        ssize_t k = out ? write(fd, (char *)buf + off, n - off) : read(fd, (char *)buf + off, n - off);
        if (k <= 0)
            die(out ? "write to the peer" : "read from the peer (did it exit?)", k < 0 ? errno : ECONNRESET);
        off += (size_t)k;
    }
}

int main(int argc, char **argv)
{
    const char *dev = "mrc0", *port = "18600", *server = NULL;
    int gid_index = 0, opt;
    size_t size = 1 << 20;
    uint32_t iters = 100, chunk = 64 << 10;
    while ((opt = getopt(argc, argv, "d:x:s:n:p:c:")) != -1) {
        char *end;
        switch (opt) {
        case 'd': dev = optarg; break;
        case 'x': gid_index = atoi(optarg); break;
        case 's':
            size = strtoull(optarg, &end, 10);
            size <<= *end == 'K' ? 10 : *end == 'M' ? 20 : 0;
            if (!size)
                die("-s: a size above 0 (e.g. 1M)", EINVAL);
            break;
        case 'n': iters = (uint32_t)atoi(optarg); break;
        case 'p': port = optarg; break;
        case 'c': chunk = (uint32_t)strtoul(optarg, NULL, 10); break;
        default:
            fprintf(stderr, "usage: verbs_check [-d DEV] [-x GID] [-s SIZE] [-n ITERS] [-p PORT] [-c CHUNK] [SERVER]\n");
            return 2;
        }
    }
    if (optind < argc)
        server = argv[optind];
    if (!chunk || !iters)
        die("-c and -n: above 0", EINVAL);
    int n;
    struct ibv_device **list = ibv_get_device_list(&n), *d = NULL;
    for (int i = 0; list && i < n; i++)
        if (!strcmp(ibv_get_device_name(list[i]), dev))
            d = list[i];
    if (!d)
        die("no such device (is it run under `mrc verbs run`?)", ENODEV);
    struct ibv_context *ctx = ibv_open_device(d);
    if (!ctx)
        die("ibv_open_device", errno);
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    uint8_t *buf = aligned_alloc(4096, (size + 4095) & ~(size_t)4095);
    memset(buf, 0, size);
    struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) : NULL;
    struct ibv_cq *cq = mr ? ibv_create_cq(ctx, 1024, NULL, NULL, 0) : NULL;
    struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 512, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1}};
    struct ibv_qp *qp = cq ? ibv_create_qp(pd, &qa) : NULL;
    if (!qp)
        die("creating the PD, region, CQ and QP", errno);
    struct side me = {.qpn = qp->qp_num, .psn = (uint32_t)getpid() & 0xFFFFFF, .rkey = mr->rkey,
                      .addr = (uintptr_t)buf}, peer;
    union ibv_gid gid;
    if (ibv_query_gid(ctx, 1, gid_index, &gid))
        die("ibv_query_gid", EINVAL);
    memcpy(me.gid, gid.raw, 16);
    int fd = tcp(server, port);
    xfer(fd, &me, sizeof(me), 1);
    xfer(fd, &peer, sizeof(peer), 0);
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .pkey_index = 0,
                            .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        die("modify QP to INIT", errno);
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_4096;
    a.dest_qp_num = peer.qpn;
    a.rq_psn = peer.psn;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    memcpy(a.ah_attr.grh.dgid.raw, peer.gid, 16);
    a.ah_attr.grh.sgid_index = (uint8_t)gid_index;
    a.ah_attr.grh.hop_limit = 64;
    int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc)
        die("modify QP to RTR", rc);
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = me.psn;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    if ((rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                        IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)))
        die("modify QP to RTS", rc);
    uint64_t wrong = 0, checked = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (uint32_t it = 0; it < iters; it++) {
        struct ibv_wc wc;
        if (!server) { /* the server: a receive for the immediate, then check every byte */
            struct ibv_sge none = {0};
            struct ibv_recv_wr rw = {.wr_id = it, .sg_list = &none, .num_sge = 0}, *bad;
            if ((rc = ibv_post_recv(qp, &rw, &bad)))
                die("ibv_post_recv", rc);
            uint8_t go = 1;
            xfer(fd, &go, 1, 1); /* the receive is there: write */
            while ((rc = ibv_poll_cq(cq, 1, &wc)) == 0)
                ;
            if (rc < 0 || wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM ||
                ntohl(wc.imm_data) != it)
                die("the WRITE_WITH_IMM's completion", rc < 0 ? EIO : EPROTO);
            for (size_t i = 0; i < size; i++)
                wrong += buf[i] != pattern(i, it);
            checked += size;
            xfer(fd, &go, 1, 1);
            continue;
        }
        uint8_t go;
        xfer(fd, &go, 1, 0);
        for (size_t i = 0; i < size; i++)
            buf[i] = pattern(i, it);
        for (size_t off = 0; off < size; off += chunk) {
            uint32_t len = (uint32_t)(size - off < chunk ? size - off : chunk);
            int last = off + len >= size;
            struct ibv_sge sge = {.addr = (uintptr_t)buf + off, .length = len, .lkey = mr->lkey};
            struct ibv_send_wr w = {.wr_id = off, .sg_list = &sge, .num_sge = 1,
                                    .opcode = last ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE,
                                    .send_flags = last ? IBV_SEND_SIGNALED : 0, .imm_data = htonl(it),
                                    .wr = {.rdma = {.remote_addr = peer.addr + off, .rkey = peer.rkey}}}, *bad;
            if ((rc = ibv_post_send(qp, &w, &bad)))
                die("ibv_post_send", rc);
        }
        while ((rc = ibv_poll_cq(cq, 1, &wc)) == 0)
            ;
        if (rc < 0 || wc.status != IBV_WC_SUCCESS)
            die(rc < 0 ? "ibv_poll_cq" : ibv_wc_status_str(wc.status), EIO);
        xfer(fd, &go, 1, 0); /* the server checked: the buffer may change */
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("{\"role\": \"%s\", \"iters\": %u, \"size\": %zu, \"checked_bytes\": %llu, \"wrong_bytes\": %llu, "
           "\"seconds\": %.3f}\n", server ? "client" : "server", iters, size, (unsigned long long)checked,
           (unsigned long long)wrong, s);
    /* the writer's last WRITE completes when its ACK is back, which a cut can delay past the reader's last
     * check: the reader keeps its QP until the writer has its completion and says so */
    uint8_t bye = 1;
    xfer(fd, &bye, 1, server ? 1 : 0);
    close(fd);
    ibv_destroy_qp(qp);
    ibv_destroy_cq(cq);
    ibv_dereg_mr(mr);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    ibv_free_device_list(list);
    free(buf);
    return wrong ? 1 : 0;
}
