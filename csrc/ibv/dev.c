/* The mrc0 device beside the real ones: the device list, opening and
 * closing a context, the device's and its port's attributes, GIDs (the
 * host's port addresses, RoCE v2), and the verbs MRC does not have, which
 * fail at once as a provider's do. Any other device's call goes to the real
 * libibverbs. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "ibv/ibv.h"

/* ------------------------------------------------------------ the device list */
/* The list handed out: the real list (kept to free it), then ours. */
struct list { struct ibv_device **real; struct ibv_device *devs[]; };

/* mrc0 is there when a topology says which host this is ($MRC_TOPOLOGY: `mrc fabric exec`, `mrc verbs run`). */
static int mrc0_here(void) { return getenv("MRC_TOPOLOGY") && *getenv("MRC_TOPOLOGY"); }

struct ibv_device **ibv_get_device_list(int *num)
{
    int nreal = 0;
    struct ibv_device **real = REAL(ibv_get_device_list, "IBVERBS_1.1", &nreal);
    if (!real)
        nreal = 0;
    int n = nreal + mrc0_here();
    struct list *l = calloc(1, sizeof(*l) + sizeof(l->devs[0]) * (size_t)(n + 1));
    if (!l) {
        if (real)
            REAL(ibv_free_device_list, "IBVERBS_1.1", real);
        return mv_fail(ENOMEM, "out of memory");
    }
    l->real = real;
    for (int i = 0; i < nreal; i++)
        l->devs[i] = real[i];
    if (mrc0_here())
        l->devs[nreal] = &mv_device;
    if (num)
        *num = n;
    return l->devs;
}

void ibv_free_device_list(struct ibv_device **list)
{
    if (!list)
        return;
    struct list *l = (struct list *)((char *)list - offsetof(struct list, devs));
    if (l->real)
        REAL(ibv_free_device_list, "IBVERBS_1.1", l->real);
    free(l);
}

const char *ibv_get_device_name(struct ibv_device *dev)
{
    return dev == &mv_device ? MV_NAME : REAL(ibv_get_device_name, "IBVERBS_1.1", dev);
}

/* EUI-64 from a MAC: what RoCE devices give as their GUID. */
static __be64 eui64(const uint8_t mac[6])
{
    uint8_t g[8] = {mac[0] ^ 2, mac[1], mac[2], 0xFF, 0xFE, mac[3], mac[4], mac[5]};
    __be64 out;
    memcpy(&out, g, 8);
    return out;
}

/* mrc0's GUID without opening it: from the topology's first port would need
 * the kernel; a context gives it exactly (see query_device). */
__be64 ibv_get_device_guid(struct ibv_device *dev)
{
    if (dev != &mv_device)
        return REAL(ibv_get_device_guid, "IBVERBS_1.1", dev);
    struct mrc_ctx *c;
    struct mrc_open_attr a = {0};
    struct mrc_port_info p;
    __be64 g = 0;
    if (mrc_ctx_open(&a, &c) == 0) {
        if (mrc_ctx_ports(c, &p, 1) == 1)
            g = eui64(p.mac);
        mrc_ctx_destroy(c);
    }
    return g;
}

/* ------------------------------------------------------------ a context */
static int query_port_ex(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, size_t len);
static int query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *in,
                           struct ibv_device_attr_ex *attr, size_t len);
static int no_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    *bad = wr;
    return mv_err(EOPNOTSUPP, "MRC has no shared receive queues");
}

static int real_open; /* real devices' contexts open now */

struct ibv_context *ibv_open_device(struct ibv_device *dev)
{
    if (dev != &mv_device) {
        struct ibv_context *ctx = REAL(ibv_open_device, "IBVERBS_1.1", dev);
        if (ctx)
            __atomic_add_fetch(&real_open, 1, __ATOMIC_RELAXED);
        return ctx;
    }
    struct mv_ctx *c = calloc(1, sizeof(*c));
    if (!c)
        return mv_fail(ENOMEM, "out of memory");
    struct mrc_open_attr a = {.max_qps = MV_MAX_QPS};
    int rc = mrc_ctx_open(&a, &c->mc);
    if (rc < 0) {
        fprintf(stderr, "libmrc-verbs: cannot open mrc0: %s\n", mrc_last_error());
        free(c);
        return mv_fail(-rc, "open");
    }
    c->nports = (uint32_t)mrc_ctx_ports(c->mc, c->ports, MRC_MAX_PORTS);
    /* the engine thread is this device's NIC: a program that busy-polls its CQ or its memory (perftest's
     * latency tests do both) must not keep it off the CPU for a scheduler tick; where the process may
     * (root, CAP_SYS_NICE), the thread runs at nice -20 (MRC_VERBS_NICE=0 leaves it alone) */
    uint64_t cpu;
    int32_t tid;
    const char *nice_env = getenv("MRC_VERBS_NICE");
    if (!(nice_env && !strcmp(nice_env, "0")) && mrc_ctx_engine_cpu(c->mc, &cpu, &tid) == 0)
        setpriority(PRIO_PROCESS, (id_t)tid, -20);
    mrc_ctx_qp_attr_default(c->mc, &c->qpdef);
    pthread_mutex_init(&c->lock, NULL);
    struct ibv_context *ctx = &c->v.context;
    ctx->device = &mv_device;
    ctx->cmd_fd = -1;
    ctx->async_fd = mrc_ctx_async_fd(c->mc);
    ctx->num_comp_vectors = 1;
    pthread_mutex_init(&ctx->mutex, NULL);
    ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
    ctx->ops.poll_cq = mv_poll_cq;
    ctx->ops.req_notify_cq = mv_req_notify_cq;
    ctx->ops.post_send = mv_post_send;
    ctx->ops.post_recv = mv_post_recv;
    ctx->ops.post_srq_recv = no_srq_recv;
    c->v.sz = sizeof(struct verbs_context);
    c->v.query_port = query_port_ex;
    c->v.query_device_ex = query_device_ex;
    return ctx;
}

/* What each plane carried, when MRC_VERBS_STATS names a file (mrc verbs run reads it). */
static void write_stats(struct mv_ctx *c)
{
    const char *path = getenv("MRC_VERBS_STATS");
    FILE *f = path && *path ? fopen(path, "a") : NULL;
    if (!f)
        return;
    fprintf(f, "{\"pid\": %d, \"planes\": [", (int)getpid());
    for (uint32_t i = 0; i < c->nports; i++) {
        struct mrc_port_stats st = {0};
        mrc_ctx_port_stats(c->mc, i, &st);
        fprintf(f, "%s{\"plane\": %u, \"tx_packets\": %llu, \"rx_packets\": %llu, \"tx_bytes\": %llu}",
                i ? ", " : "", c->ports[i].plane, (unsigned long long)st.tx_packets,
                (unsigned long long)st.rx_packets, (unsigned long long)st.tx_bytes);
    }
    uint64_t drops[MRC_DROP_NREASONS] = {0};
    int n = mrc_ctx_drops(c->mc, drops, MRC_DROP_NREASONS);
    fprintf(f, "], \"drops\": {");
    for (int i = 0, k = 0; i < n; i++)
        if (drops[i])
            fprintf(f, "%s\"%s\": %llu", k++ ? ", " : "", mrc_drop_name((uint32_t)i), (unsigned long long)drops[i]);
    fprintf(f, "}, \"qps\": {\"rtx_packets\": %llu, \"timeouts\": %llu, \"tlp_probes\": %llu, \"losses\": %llu}}\n",
            (unsigned long long)c->rtx_packets, (unsigned long long)c->timeouts, (unsigned long long)c->tlp_probes,
            (unsigned long long)c->losses);
    fclose(f);
}

int ibv_close_device(struct ibv_context *ctx)
{
    if (!mv_is_ours(ctx)) {
        __atomic_sub_fetch(&real_open, 1, __ATOMIC_RELAXED);
        return REAL(ibv_close_device, "IBVERBS_1.1", ctx);
    }
    struct mv_ctx *c = mv_ctx(ctx);
    write_stats(c);
    mrc_ctx_destroy(c->mc); /* with every object the program left: the engine frees them */
    pthread_mutex_destroy(&c->lock);
    free(c);
    return 0;
}

/* ------------------------------------------------------------ attributes */
static void device_attr(struct mv_ctx *c, struct ibv_device_attr *a)
{
    struct mrc_device_attr d = {0};
    mrc_ctx_query_device(c->mc, &d);
    memset(a, 0, sizeof(*a));
    snprintf(a->fw_ver, sizeof(a->fw_ver), "mrc %s", mrc_dp_version());
    a->node_guid = c->nports ? eui64(c->ports[0].mac) : 0;
    a->sys_image_guid = a->node_guid;
    a->max_mr_size = UINT64_MAX;
    a->page_size_cap = 4096;
    a->vendor_id = 0;        /* no IEEE OUI: software */
    a->vendor_part_id = 0x4d52; /* "MR" */
    a->hw_ver = 1;
    a->max_qp = (int)(d.max_qps < MV_MAX_QPS ? d.max_qps : MV_MAX_QPS);
    a->max_qp_wr = MV_MAX_WR;
    a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN;
    a->max_sge = (int)d.max_sge;
    a->max_sge_rd = 0;       /* no READ */
    a->max_cq = (int)d.max_cqs;
    a->max_cqe = MV_MAX_CQE;
    a->max_mr = 1 << 20;
    a->max_pd = 1 << 16;
    a->max_qp_rd_atom = 0;   /* no READ, no atomics */
    a->max_qp_init_rd_atom = 0;
    a->max_res_rd_atom = 0;
    a->atomic_cap = IBV_ATOMIC_NONE;
    a->max_srq = 0;
    a->max_pkeys = 1;
    a->phys_port_cnt = 1;    /* one verbs port: every plane is behind it */
}

int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
    if (!mv_is_ours(ctx))
        return REAL(ibv_query_device, "IBVERBS_1.1", ctx, attr);
    device_attr(mv_ctx(ctx), attr);
    return 0;
}

static int query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *in,
                           struct ibv_device_attr_ex *attr, size_t len)
{
    if (len < sizeof(attr->orig_attr))
        return EINVAL;
    memset(attr, 0, len);
    device_attr(mv_ctx(ctx), &attr->orig_attr);
    return 0;
}

/* The MTU enum for a payload: the largest verbs has (4096) when the payload is larger. */
static enum ibv_mtu mtu_of(uint32_t payload)
{
    return payload >= 4096 ? IBV_MTU_4096 : payload >= 2048 ? IBV_MTU_2048 : payload >= 1024 ? IBV_MTU_1024
           : payload >= 512 ? IBV_MTU_512 : IBV_MTU_256;
}

static int port_attr(struct mv_ctx *c, uint8_t port, struct ibv_port_attr *a, size_t len)
{
    if (port != 1)
        return mv_err(EINVAL, "mrc0 has one port, 1 (every plane is behind it), not %u", port);
    memset(a, 0, len);
    uint32_t up = 0;
    for (uint32_t i = 0; i < c->nports; i++) {
        struct mrc_port_stats st = {0};
        up += mrc_ctx_port_stats(c->mc, i, &st) == 0 && st.carrier && st.admin_up;
    }
    a->state = up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
    a->phys_state = up ? 5 : 3; /* LinkUp, Disabled */
    a->max_mtu = mtu_of(c->qpdef.mtu);
    a->active_mtu = a->max_mtu;
    a->gid_tbl_len = (int)c->nports;
    a->port_cap_flags = 0;
    a->max_msg_sz = 1u << 31;
    a->pkey_tbl_len = 1;
    a->lid = 0;
    a->sm_lid = 0;
    a->lmc = 0;
    a->max_vl_num = 1;
    a->active_width = 2;   /* 4x */
    a->active_speed = 32;  /* EDR: a figure, not a promise */
    a->link_layer = IBV_LINK_LAYER_ETHERNET;
    return 0;
}

static int query_port_ex(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, size_t len)
{
    return port_attr(mv_ctx(ctx), port, attr, len < sizeof(*attr) ? len : sizeof(*attr));
}

#undef ibv_query_port
int ibv_query_port(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *attr)
{
    if (!mv_is_ours(ctx))
        return REAL(ibv_query_port, "IBVERBS_1.1", ctx, port, attr);
    return port_attr(mv_ctx(ctx), port, (struct ibv_port_attr *)attr, sizeof(struct ibv_port_attr));
}

/* GID index i: the address of the i-th port (plane) of this host, a RoCE v2 GID. */
static int gid_of(struct mv_ctx *c, uint32_t port, uint32_t index, union ibv_gid *gid)
{
    if (port != 1 || index >= c->nports)
        return mv_err(EINVAL, "mrc0 port %u has GIDs 0 to %u, not %u", port, c->nports - 1, index);
    memcpy(gid->raw, c->ports[index].addr, 16);
    return 0;
}

int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
    if (!mv_is_ours(ctx))
        return REAL(ibv_query_gid, "IBVERBS_1.1", ctx, port, index, gid);
    return gid_of(mv_ctx(ctx), port, (uint32_t)index, gid) ? -1 : 0;
}

int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index, struct ibv_gid_entry *e,
                      uint32_t flags, size_t size)
{
    if (!mv_is_ours(ctx))
        return REAL(_ibv_query_gid_ex, "IBVERBS_1.11", ctx, port, index, e, flags, size);
    struct mv_ctx *c = mv_ctx(ctx);
    if (flags || size < sizeof(*e))
        return EINVAL;
    memset(e, 0, size);
    int rc = gid_of(c, port, index, &e->gid);
    if (rc)
        return rc;
    e->gid_index = index;
    e->port_num = port;
    e->gid_type = IBV_GID_TYPE_ROCE_V2;
    return 0;
}

ssize_t _ibv_query_gid_table(struct ibv_context *ctx, struct ibv_gid_entry *entries, size_t max, uint32_t flags,
                             size_t size)
{
    if (!mv_is_ours(ctx))
        return REAL(_ibv_query_gid_table, "IBVERBS_1.11", ctx, entries, max, flags, size);
    struct mv_ctx *c = mv_ctx(ctx);
    if (flags || size < sizeof(*entries))
        return -EINVAL;
    size_t n = 0;
    for (; n < c->nports && n < max; n++)
        _ibv_query_gid_ex(ctx, 1, (uint32_t)n, (struct ibv_gid_entry *)((char *)entries + n * size), 0, size);
    return (ssize_t)n;
}

/* rdma-core's private call ibv_devinfo uses (driver.h: enum ibv_gid_type_sysfs, RoCE v2 = 1). */
int ibv_query_gid_type(struct ibv_context *ctx, uint8_t port, unsigned int index, int *type);
int ibv_query_gid_type(struct ibv_context *ctx, uint8_t port, unsigned int index, int *type)
{
    if (!mv_is_ours(ctx))
        return REAL(ibv_query_gid_type, "IBVERBS_PRIVATE_34", ctx, port, index, type);
    union ibv_gid gid;
    if (gid_of(mv_ctx(ctx), port, index, &gid))
        return EINVAL;
    *type = 1;
    return 0;
}

int ibv_query_pkey(struct ibv_context *ctx, uint8_t port, int index, __be16 *pkey)
{
    if (!mv_is_ours(ctx))
        return REAL(ibv_query_pkey, "IBVERBS_1.1", ctx, port, index, pkey);
    if (port != 1 || index != 0)
        return -1;
    *pkey = 0xFFFF; /* the default partition, full member */
    return 0;
}

/* ------------------------------------------------------------ what MRC does not have */
struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
    if (!mv_is_ours(pd->context))
        return REAL(ibv_create_srq, "IBVERBS_1.1", pd, attr);
    return mv_fail(EOPNOTSUPP, "MRC has no shared receive queues");
}

int ibv_destroy_srq(struct ibv_srq *srq)
{
    return mv_is_ours(srq->context) ? EINVAL : REAL(ibv_destroy_srq, "IBVERBS_1.1", srq);
}

struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
    if (!mv_is_ours(pd->context))
        return REAL(ibv_create_ah, "IBVERBS_1.1", pd, attr);
    return mv_fail(EOPNOTSUPP, "MRC has no UD QPs, so no address handles");
}

int ibv_destroy_ah(struct ibv_ah *ah)
{
    return mv_is_ours(ah->context) ? EINVAL : REAL(ibv_destroy_ah, "IBVERBS_1.1", ah);
}

struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
    if (!mv_is_ours(qp->context))
        return REAL(ibv_qp_to_qp_ex, "IBVERBS_1.6", qp);
    return mv_fail(EOPNOTSUPP, "mrc0's QPs take ibv_post_send, not the ibv_wr_* calls");
}

int ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *event)
{
    if (!mv_is_ours(ctx))
        return REAL(ibv_get_async_event, "IBVERBS_1.1", ctx, event);
    struct mv_ctx *c = mv_ctx(ctx);
    for (;;) {
        struct mrc_async_event e;
        if (mrc_async_events(c->mc, &e, 1) == 1) {
            memset(event, 0, sizeof(*event));
            struct mv_qp *q = mv_qp_of(c, e.qpn);
            event->event_type = e.type == MRC_EVENT_QP_FATAL ? IBV_EVENT_QP_FATAL : IBV_EVENT_PORT_ERR;
            if (q)
                event->element.qp = &q->qp;
            else
                event->element.port_num = 1;
            return 0;
        }
        uint64_t x;
        if (read(ctx->async_fd, &x, sizeof(x)) < 0 && errno != EAGAIN && errno != EINTR)
            return -1;
    }
}

void ibv_ack_async_event(struct ibv_async_event *event)
{
    /* ours need no ack; a QP event of a real device, or any event while a real device is open, goes on */
    int qp_event = event->event_type == IBV_EVENT_QP_FATAL || event->event_type == IBV_EVENT_QP_REQ_ERR ||
                   event->event_type == IBV_EVENT_QP_ACCESS_ERR || event->event_type == IBV_EVENT_COMM_EST ||
                   event->event_type == IBV_EVENT_SQ_DRAINED || event->event_type == IBV_EVENT_PATH_MIG ||
                   event->event_type == IBV_EVENT_PATH_MIG_ERR || event->event_type == IBV_EVENT_QP_LAST_WQE_REACHED;
    if (qp_event ? !mv_is_ours(event->element.qp->context) : __atomic_load_n(&real_open, __ATOMIC_RELAXED) > 0)
        REAL(ibv_ack_async_event, "IBVERBS_1.1", event);
}
