/* mrc0's protection domains, memory regions, completion channels and
 * completion queues, each the engine's own (mrc_pd_*, mrc_mr_*, mrc_cq_*),
 * and polling: an engine completion becomes an ibv_wc, and the send
 * completions of unsignaled WRs are kept from the program (qp.c decides). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "ibv/ibv.h"

/* ------------------------------------------------------------ PDs and MRs */
struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx)
{
    if (!mv_is_ours(ctx))
        return REAL(ibv_alloc_pd, "IBVERBS_1.1", ctx);
    struct mv_pd *p = calloc(1, sizeof(*p));
    if (!p)
        return mv_fail(ENOMEM, "out of memory");
    int rc = mrc_pd_alloc(mv_ctx(ctx)->mc, &p->pdn);
    if (rc < 0) {
        free(p);
        return mv_fail(-rc, "alloc_pd: %s", strerror(-rc));
    }
    p->pd.context = ctx;
    p->pd.handle = p->pdn;
    return &p->pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
    if (!mv_is_ours(pd->context))
        return REAL(ibv_dealloc_pd, "IBVERBS_1.1", pd);
    struct mv_pd *p = (struct mv_pd *)pd;
    int rc = mrc_pd_dealloc(mv_ctx(pd->context)->mc, p->pdn);
    if (rc < 0)
        return mv_err(-rc, "dealloc_pd: %s (a region or QP still uses it)", strerror(-rc));
    free(p);
    return 0;
}

static struct ibv_mr *reg(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
    if (iova != (uintptr_t)addr)
        return mv_fail(EOPNOTSUPP, "mrc0 regions are addressed by their virtual address (iova %llu != %p)",
                       (unsigned long long)iova, addr);
    if (access & IBV_ACCESS_MW_BIND)
        return mv_fail(EOPNOTSUPP, "MRC has no memory windows");
    /* remote read and atomic access are taken and grant nothing: MRC has no READ or atomics, which
     * fail where they are posted (so a program that asks for them fails there, past connection setup) */
    if (!length)
        return mv_fail(EINVAL, "a region of 0 bytes");
    struct mv_mr *m = calloc(1, sizeof(*m));
    if (!m)
        return mv_fail(ENOMEM, "out of memory");
    /* as a NIC pins a region's pages when it is registered: faulted in now, not under the engine's
     * placement of the first packets (a mapping that cannot be written is left as it is) */
    mrc_ctx_populate(addr, length);
    uint32_t acc = (access & IBV_ACCESS_LOCAL_WRITE ? MRC_ACCESS_LOCAL_WRITE : 0) |
                   (access & IBV_ACCESS_REMOTE_WRITE ? MRC_ACCESS_REMOTE_WRITE : 0);
    int rc = mrc_mr_reg(mv_ctx(pd->context)->mc, ((struct mv_pd *)pd)->pdn, addr, length, acc, &m->mr.lkey,
                        &m->mr.rkey);
    if (rc < 0) {
        free(m);
        return mv_fail(-rc, "reg_mr: %s", strerror(-rc));
    }
    m->mr.context = pd->context;
    m->mr.pd = pd;
    m->mr.addr = addr;
    m->mr.length = length;
    m->mr.handle = m->mr.lkey;
    return &m->mr;
}

#undef ibv_reg_mr
struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
    if (!mv_is_ours(pd->context))
        return REAL(ibv_reg_mr, "IBVERBS_1.1", pd, addr, length, access);
    return reg(pd, addr, length, (uintptr_t)addr, access & ~IBV_ACCESS_OPTIONAL_RANGE);
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, unsigned int access)
{
    if (!mv_is_ours(pd->context))
        return REAL(ibv_reg_mr_iova2, "IBVERBS_1.8", pd, addr, length, iova, access);
    return reg(pd, addr, length, iova, (int)(access & ~IBV_ACCESS_OPTIONAL_RANGE));
}

#undef ibv_reg_mr_iova
struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
    if (!mv_is_ours(pd->context))
        return REAL(ibv_reg_mr_iova, "IBVERBS_1.7", pd, addr, length, iova, access);
    return reg(pd, addr, length, iova, access);
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
    if (!mv_is_ours(mr->context))
        return REAL(ibv_dereg_mr, "IBVERBS_1.1", mr);
    int rc = mrc_mr_dereg(mv_ctx(mr->context)->mc, mr->lkey);
    if (rc < 0)
        return mv_err(-rc, "dereg_mr: %s (a posted WR still reads from it)", strerror(-rc));
    free(mr);
    return 0;
}

/* ------------------------------------------------------------ completion channels */
/* A channel is an epoll set: a CQ armed with ibv_req_notify_cq is in it, once. */
struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *ctx)
{
    if (!mv_is_ours(ctx))
        return REAL(ibv_create_comp_channel, "IBVERBS_1.0", ctx);
    struct ibv_comp_channel *ch = calloc(1, sizeof(*ch));
    if (!ch)
        return mv_fail(ENOMEM, "out of memory");
    ch->context = ctx;
    ch->fd = epoll_create1(EPOLL_CLOEXEC);
    if (ch->fd < 0) {
        int err = errno;
        free(ch);
        return mv_fail(err, "epoll_create1: %s", strerror(err));
    }
    return ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *ch)
{
    if (!mv_is_ours(ch->context))
        return REAL(ibv_destroy_comp_channel, "IBVERBS_1.0", ch);
    if (ch->refcnt)
        return mv_err(EBUSY, "a CQ still uses the completion channel");
    close(ch->fd);
    free(ch);
    return 0;
}

/* ------------------------------------------------------------ CQs */
struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context, struct ibv_comp_channel *ch,
                             int comp_vector)
{
    if (!mv_is_ours(ctx))
        return REAL(ibv_create_cq, "IBVERBS_1.1", ctx, cqe, cq_context, ch, comp_vector);
    if (cqe < 1 || cqe > MV_MAX_CQE)
        return mv_fail(EINVAL, "a CQ of %d entries: 1 to %d", cqe, MV_MAX_CQE);
    if (ch && ch->context != ctx)
        return mv_fail(EINVAL, "the completion channel belongs to another context");
    struct mv_cq *q = calloc(1, sizeof(*q));
    if (!q)
        return mv_fail(ENOMEM, "out of memory");
    struct mv_ctx *c = mv_ctx(ctx);
    /* unsignaled sends complete in the engine too: room for a full send queue beside what was asked */
    uint32_t depth = (uint32_t)cqe + MV_MAX_WR;
    int rc = mrc_cq_create(c->mc, depth, &q->cqn);
    if (rc < 0) {
        free(q);
        return mv_fail(-rc, "create_cq: %s", strerror(-rc));
    }
    q->fd = mrc_cq_fd(c->mc, q->cqn);
    pthread_mutex_init(&q->lock, NULL);
    q->cq.context = ctx;
    q->cq.channel = ch;
    q->cq.cq_context = cq_context;
    q->cq.cqe = cqe;
    q->cq.handle = q->cqn;
    pthread_mutex_init(&q->cq.mutex, NULL);
    pthread_cond_init(&q->cq.cond, NULL);
    if (ch)
        __atomic_add_fetch(&ch->refcnt, 1, __ATOMIC_RELAXED);
    return &q->cq;
}

int ibv_destroy_cq(struct ibv_cq *cq)
{
    if (!mv_is_ours(cq->context))
        return REAL(ibv_destroy_cq, "IBVERBS_1.1", cq);
    struct mv_cq *q = (struct mv_cq *)cq;
    int rc = mrc_cq_destroy(mv_ctx(cq->context)->mc, q->cqn);
    if (rc < 0)
        return mv_err(-rc, "destroy_cq: %s (a QP still uses it)", strerror(-rc));
    if (cq->channel) {
        epoll_ctl(cq->channel->fd, EPOLL_CTL_DEL, q->fd, NULL);
        __atomic_sub_fetch(&cq->channel->refcnt, 1, __ATOMIC_RELAXED);
    }
    pthread_mutex_destroy(&q->lock);
    free(q);
    return 0;
}

/* One engine completion as the program sees it; 0 when it is not to be seen (an unsignaled send).
 * *last: the QP of the completion before (most come from one QP in a row). */
static int convert(struct mv_ctx *c, const struct mrc_wc *w, struct ibv_wc *wc, struct mv_qp **last)
{
    struct mv_qp *q = *last && (*last)->qpn == w->qpn ? *last : (*last = mv_qp_of(c, w->qpn));
    if (!q)
        return 0; /* its QP was destroyed: nobody to tell */
    if (w->opcode == MRC_WC_WRITE)
        return mv_qp_send_done(q, w, wc);
    memset(wc, 0, sizeof(*wc));
    wc->wr_id = w->wr_id;
    wc->status = mv_wc_status(w->status);
    wc->opcode = IBV_WC_RECV_RDMA_WITH_IMM;
    wc->byte_len = w->byte_len;
    wc->imm_data = htobe32(w->imm_data);
    wc->wc_flags = IBV_WC_WITH_IMM;
    wc->qp_num = w->qpn;
    wc->src_qp = q->dest_qpn;
    return 1;
}

int mv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
    struct mv_cq *q = (struct mv_cq *)cq;
    struct mv_ctx *c = mv_ctx(cq->context);
    int got = 0;
    struct mv_qp *last = NULL;
    if (n <= 0)
        return 0;
    pthread_mutex_lock(&q->lock);
    while (got < n) {
        if (q->spill_at == q->nspill) { /* the next batch from the engine */
            int k = mrc_poll_cq(c->mc, q->cqn, q->spill, sizeof(q->spill) / sizeof(q->spill[0]));
            if (k == 0 && !got && mrc_ctx_progress(c->mc) > 0) /* a program that spins here drives the NIC */
                k = mrc_poll_cq(c->mc, q->cqn, q->spill, sizeof(q->spill) / sizeof(q->spill[0]));
            if (k < 0) {
                pthread_mutex_unlock(&q->lock);
                return got ? got : -1;
            }
            q->nspill = (uint32_t)k;
            q->spill_at = 0;
            if (!k)
                break;
        }
        got += convert(c, &q->spill[q->spill_at++], &wc[got], &last);
    }
    pthread_mutex_unlock(&q->lock);
    return got;
}

int mv_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
    struct mv_cq *q = (struct mv_cq *)cq;
    if (!cq->channel)
        return mv_err(EINVAL, "the CQ has no completion channel");
    struct epoll_event ev = {.events = EPOLLIN | EPOLLONESHOT, .data.ptr = q};
    if (epoll_ctl(cq->channel->fd, EPOLL_CTL_MOD, q->fd, &ev) < 0 &&
        (errno != ENOENT || epoll_ctl(cq->channel->fd, EPOLL_CTL_ADD, q->fd, &ev) < 0))
        return mv_err(errno, "req_notify_cq: %s", strerror(errno));
    return 0;
}

int ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context)
{
    if (!mv_is_ours(ch->context))
        return REAL(ibv_get_cq_event, "IBVERBS_1.1", ch, cq, cq_context);
    struct epoll_event ev;
    int n;
    while ((n = epoll_wait(ch->fd, &ev, 1, -1)) < 0 && errno == EINTR)
        ;
    if (n != 1)
        return -1;
    struct mv_cq *q = ev.data.ptr;
    uint64_t x;
    if (read(q->fd, &x, sizeof(x)) < 0 && errno != EAGAIN)
        return -1;
    *cq = &q->cq;
    *cq_context = q->cq.cq_context;
    return 0;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
    if (!mv_is_ours(cq->context))
        REAL(ibv_ack_cq_events, "IBVERBS_1.1", cq, nevents);
}
