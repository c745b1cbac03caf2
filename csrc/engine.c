/* A context: its engine thread ("the NIC"), the doorbells, and the API calls
 * of mrc_dp.h, each made under the context's locks.
 *
 * Locking contract. Two locks, always taken in this order:
 *   - ulock serialises the application's threads (the engine never takes it);
 *   - lock protects the endpoint, the I/O layer's peer table and the ports'
 *     state. The engine thread holds it while it runs the core (input,
 *     poll_tx, timers) and drops it around waits, and whenever an
 *     application thread is waiting for it (waiters).
 * The fast path takes only ulock: mrc_post_write, mrc_post_recv and
 * mrc_poll_cq work on the lock-free send, receive and completion rings
 * (csrc/core.h), so posting and polling never wait for the engine and the
 * engine never waits for Python. Every other API call takes both
 * (ctx_lock/ctx_unlock) for exactly one core call: the lock is never held
 * while the caller (Python) waits for its interpreter lock.
 * Progress by the caller: mrc_ctx_progress runs one pass in an application
 * thread when it gets lock with a trylock; each call, even one that finds
 * the engine in a pass, tells the engine to leave the ports to callers for
 * PROGRESS_NS: it stops spinning and sleeps on its doorbell alone, waking at
 * the end to look.
 * Doorbell: a producer bumps post_seq and writes wake_fd only if the engine
 * said it is going to sleep and no caller progresses. A CQ's eventfd is written when completions were
 * added to it: select/epoll/asyncio can wait on it.
 * A context without ports is driven by hand (mrc_ep_* calls, the in-memory
 * link): it has no thread and no file descriptors; its API calls take the
 * same locks, uncontended.
 *
 * Above each function: which locks its caller holds ("Lock:"). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "io.h"

/* PROGRESS_NS: after an application thread's mrc_ctx_progress, the engine
 * leaves the ports to it this long (it sleeps on its doorbell alone). */
enum { LINK_CHECK_NS = 200000, SPIN_NS = 200000, PROGRESS_NS = 100000 };

struct mrc_ctx {
    struct mrc_ep *ep;
    struct io *io;           /* NULL: a context driven by hand */
    struct link_watch lw;
    uint32_t ifindex[MRC_MAX_PORTS];
    uint32_t nports;
    pthread_mutex_t lock, ulock;
    uint32_t waiters;        /* application threads waiting for lock */
    uint32_t sleeping;       /* the engine is (about to be) blocked in ppoll */
    uint64_t post_seq;       /* bumped by every post: the engine's doorbell */
    uint64_t spin_ns;        /* how long the idle engine polls before it sleeps (atomic) */
    uint64_t sleep_until;    /* when the sleeping engine wakes by itself */
    uint64_t progress_until; /* an application thread progresses the NIC (mrc_ctx_progress) until then */
    pthread_t thread;
    int running, started;
    int wake_fd, async_fd;
    int cq_fd[MRC_MAX_CQS];  /* each CQ's completion channel (-1: none) */
    uint32_t aeq_signalled;  /* aeq_tail when async_fd was last written */
    uint32_t blocked;        /* callers blocked in a call that waits (batch_send_wait): destroy waits for them */
    uint32_t closing;        /* destroy began: blocked callers return -ECANCELED */
    uint8_t *txbuf;
    struct mrc_txdesc txd[IO_BATCH];
};

/* Lock: none. */
uint64_t mrc_ctx_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void ring_fd(int fd)
{
    uint64_t one = 1;
    if (fd >= 0 && write(fd, &one, sizeof(one)) < 0) { /* counter saturated: the reader is behind, it will see it */ }
}

/* Take the endpoint lock from an application thread: the engine sees
 * waiters and hands the lock over at the end of its current batch.
 * Lock: the caller holds ulock. */
static void lock_endpoint(struct mrc_ctx *c)
{
    __atomic_add_fetch(&c->waiters, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_lock(&c->lock);
    __atomic_sub_fetch(&c->waiters, 1, __ATOMIC_SEQ_CST);
}

/* Lock: the caller holds lock: tell async_fd's readers about new events. */
static void signal_async(struct mrc_ctx *c)
{
    if (c->async_fd < 0 || c->ep->aeq_tail == c->aeq_signalled)
        return;
    c->aeq_signalled = c->ep->aeq_tail;
    ring_fd(c->async_fd);
}

/* Lock: none held; takes both. */
static void ctx_lock(struct mrc_ctx *c)
{
    pthread_mutex_lock(&c->ulock);
    lock_endpoint(c);
}

/* Lock: both held; releases them and wakes the engine (a modify or a port
 * change may have made work: it looks now). */
static void ctx_unlock(struct mrc_ctx *c)
{
    c->ep->dl_all = 1; /* the call may have changed any QP's times (core.h, dl) */
    signal_async(c);
    pthread_mutex_unlock(&c->lock);
    pthread_mutex_unlock(&c->ulock);
    ring_fd(c->wake_fd);
}

/* Ring the doorbell after a post: a syscall only if the engine sleeps.
 * Lock: none needed. */
static void doorbell(struct mrc_ctx *c)
{
    __atomic_add_fetch(&c->post_seq, 1, __ATOMIC_SEQ_CST);
    if (LOAD_SC(c->sleeping) && mrc_ctx_now_ns() >= LOAD_SC(c->progress_until))
        ring_fd(c->wake_fd);
}

/* ------------------------------------------------------------ ports and carrier */
/* Tell the core when a port's effective state (admin and carrier) changes:
 * it stops using the plane at once and tells the peers (PORT_ERR).
 * Lock: lock held (or the context is not shared yet). */
static void port_apply(struct mrc_ctx *c, struct io_port *p, uint64_t now)
{
    int up = !p->admin_down && !p->carrier_down;
    p->st.admin_up = !p->admin_down;
    p->st.carrier = !p->carrier_down;
    if (!!(c->ep->port_up & (1u << p->cfg.plane)) != up)
        mrc_ep_set_port(c->ep, p->cfg.plane, up, now);
}

struct carrier_arg { struct mrc_ctx *c; uint64_t now; };

/* link_watch.c's report of one interface's carrier. Lock: as port_apply. */
static void on_carrier(void *arg, uint32_t ifindex, int carrier)
{
    struct carrier_arg *a = arg;
    for (uint32_t i = 0; i < a->c->nports; i++) {
        struct io_port *p = io_port(a->c->io, i);
        if (p->cfg.ifindex != ifindex || !p->carrier_down == !!carrier)
            continue;
        p->carrier_down = !carrier;
        if (!carrier)
            p->st.carrier_downs++;
        port_apply(a->c, p, a->now);
    }
}

/* Lock: lock held (mrc_ctx_port_admin). */
int mrc_ctx_port_admin(struct mrc_ctx *c, uint32_t plane, int up)
{
    if (!c->io)
        return -EOPNOTSUPP;
    ctx_lock(c);
    struct io_port *p = io_plane_port(c->io, plane);
    if (p) {
        p->admin_down = !up;
        port_apply(c, p, mrc_ctx_now_ns());
    }
    ctx_unlock(c); /* wakes the engine: the port status goes out now */
    return p ? 0 : -ENOENT;
}

/* Lock: none held; takes both. */
int mrc_ctx_port_stats(struct mrc_ctx *c, uint32_t port, struct mrc_port_stats *st)
{
    if (!c->io)
        return -EOPNOTSUPP;
    ctx_lock(c);
    int rc = io_port_stats(c->io, port, st);
    ctx_unlock(c);
    return rc;
}

/* A peer: its paths go to the I/O layer; the core learns which earlier peer
 * index is the same host (the same addresses), so that a QP connected
 * through one index hears its host's packets, whichever index they map to.
 * Lock: none held; takes both. */
int mrc_ctx_add_peer(struct mrc_ctx *c, const struct mrc_peer_cfg *peer)
{
    if (!c->io)
        return -EOPNOTSUPP;
    ctx_lock(c);
    int rc = io_add_peer(c->io, peer);
    if (rc >= 0)
        ep_set_peer_host(c->ep, (uint16_t)rc, (uint16_t)io_peer_host(c->io, (uint16_t)rc));
    ctx_unlock(c);
    return rc;
}

/* Lock: none held; takes both. Every index's host is worked out again: the
 * deleted one may have been the first of its host. */
int mrc_ctx_del_peer(struct mrc_ctx *c, uint32_t peer)
{
    if (!c->io)
        return -EOPNOTSUPP;
    if (peer >= MRC_MAX_PEERS)
        return -ENOENT;
    ctx_lock(c);
    int rc = ep_peer_in_use(c->ep, (uint16_t)peer) ? -EBUSY : io_del_peer(c->io, (uint16_t)peer);
    if (rc == 0) {
        ep_set_peer_host(c->ep, (uint16_t)peer, (uint16_t)peer);
        for (int i = 0; i < io_npeers(c->io); i++)
            ep_set_peer_host(c->ep, (uint16_t)i, (uint16_t)io_peer_host(c->io, (uint16_t)i));
    }
    ctx_unlock(c);
    return rc;
}

/* ------------------------------------------------------------ create, destroy */
static int new_eventfd(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

/* Lock: none (the context is not shared yet). */
static int open_ports(struct mrc_ctx *c, const struct mrc_port_cfg *ports, uint32_t nports)
{
    int rc = io_open(ports, nports, &c->io);
    if (rc < 0)
        return rc;
    c->txbuf = malloc((size_t)IO_BATCH * IO_FRAME);
    if (!c->txbuf)
        return -ENOMEM;
    c->wake_fd = new_eventfd();
    c->async_fd = new_eventfd();
    c->cq_fd[0] = new_eventfd();
    if (c->wake_fd < 0 || c->async_fd < 0 || c->cq_fd[0] < 0)
        return -errno;
    c->nports = nports;
    for (uint32_t i = 0; i < nports; i++) {
        struct io_port *p = io_port(c->io, i);
        c->ifindex[i] = p->cfg.ifindex;
        p->st.admin_up = p->st.carrier = 1;
    }
    lw_open(&c->lw);
    struct carrier_arg a = {c, mrc_ctx_now_ns()};
    lw_read_flags(c->ifindex, c->nports, on_carrier, &a);
    return 0;
}

int mrc_ctx_create(const struct mrc_ep_attr *attr, const struct mrc_port_cfg *ports, uint32_t nports,
                   struct mrc_ctx **out)
{
    if (nports > MRC_MAX_PORTS || (nports && !ports))
        return -EINVAL;
    struct mrc_ctx *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->wake_fd = c->async_fd = c->lw.fd = -1;
    for (int i = 0; i < MRC_MAX_CQS; i++)
        c->cq_fd[i] = -1;
    c->spin_ns = SPIN_NS;
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->ulock, NULL);
    /* the secret behind rkeys and QP numbers: the kernel's randomness, or
     * (tests) derived from the seed */
    uint64_t key[2];
    if (attr->seed) {
        key[0] = attr->seed * 0x9E3779B97F4A7C15ull ^ 0xA0761D6478BD642Full;
        key[1] = (attr->seed + 1) * 0xBF58476D1CE4E5B9ull ^ 0xE7037ED1A0B428DBull;
    } else if (getrandom(key, sizeof(key), 0) != (ssize_t)sizeof(key)) {
        free(c);
        return -EIO;
    }
    int rc = ep_create(attr, key, &c->ep);
    if (rc == 0 && nports)
        rc = open_ports(c, ports, nports);
    if (rc < 0) {
        mrc_ctx_destroy(c);
        return rc;
    }
    *out = c;
    return 0;
}

/* Lock: none. Callers blocked in a waiting call return -ECANCELED at once,
 * and new ones are refused: the first step of closing a context that other
 * threads may still be calling into. */
void mrc_ctx_cancel(struct mrc_ctx *c)
{
    if (c)
        __atomic_store_n(&c->closing, 1, __ATOMIC_SEQ_CST);
}

/* Lock: none held; the caller is the context's last user. */
void mrc_ctx_destroy(struct mrc_ctx *c)
{
    if (!c)
        return;
    __atomic_store_n(&c->closing, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&c->blocked, __ATOMIC_SEQ_CST)) /* a blocked caller leaves within 20 us */
        sched_yield();
    if (c->started) {
        ctx_lock(c);
        c->running = 0;
        ctx_unlock(c);
        pthread_join(c->thread, NULL);
    }
    io_close(c->io);
    lw_close(&c->lw);
    for (int i = 0; i < MRC_MAX_CQS; i++)
        if (c->cq_fd[i] >= 0)
            close(c->cq_fd[i]);
    if (c->wake_fd >= 0)
        close(c->wake_fd);
    if (c->async_fd >= 0)
        close(c->async_fd);
    if (c->ep) {
        qp_destroy_all(c->ep);
        ep_destroy(c->ep);
    }
    free(c->txbuf);
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->ulock);
    free(c);
}

/* Lock: none. */
struct mrc_ep *mrc_ctx_ep(struct mrc_ctx *c) { return c->ep; }
int mrc_ctx_async_fd(struct mrc_ctx *c) { return c->async_fd >= 0 ? c->async_fd : -EOPNOTSUPP; }
void mrc_ctx_set_spin(struct mrc_ctx *c, uint64_t ns) { __atomic_store_n(&c->spin_ns, ns, __ATOMIC_RELAXED); }
struct io *engine_idle_io(struct mrc_ctx *c) { return c->io && !c->started ? c->io : NULL; }

/* ------------------------------------------------------------ the API calls
 * Lock: none held by the caller; each takes both locks for one core call. */
#define LOCKED_CALL(name, core, params, args) \
    int name params                           \
    {                                         \
        ctx_lock(c);                          \
        int rc = core args;                   \
        ctx_unlock(c);                        \
        return rc;                            \
    }
LOCKED_CALL(mrc_pd_alloc, ep_pd_alloc, (struct mrc_ctx *c, uint32_t *pdn), (c->ep, pdn))
LOCKED_CALL(mrc_pd_dealloc, ep_pd_dealloc, (struct mrc_ctx *c, uint32_t pdn), (c->ep, pdn))
LOCKED_CALL(mrc_mr_reg, ep_mr_reg, (struct mrc_ctx *c, uint32_t pdn, void *addr, uint64_t length, uint32_t access, uint32_t *lkey, uint32_t *rkey), (c->ep, pdn, addr, length, access, lkey, rkey))
LOCKED_CALL(mrc_mr_dereg, ep_mr_dereg, (struct mrc_ctx *c, uint32_t lkey), (c->ep, lkey))
LOCKED_CALL(mrc_cq_query, ep_cq_query, (struct mrc_ctx *c, uint32_t cqn, struct mrc_cq_stats *st), (c->ep, cqn, st))
LOCKED_CALL(mrc_qp_create, qp_create, (struct mrc_ctx *c, const struct mrc_qp_attr *attr, uint32_t *qpn), (c->ep, attr, qpn))
LOCKED_CALL(mrc_qp_destroy, qp_destroy, (struct mrc_ctx *c, uint32_t qpn), (c->ep, qpn))
LOCKED_CALL(mrc_qp_modify, qp_modify, (struct mrc_ctx *c, uint32_t qpn, uint32_t state, const struct mrc_qp_conn *conn), (c->ep, qpn, state, conn))
LOCKED_CALL(mrc_qp_query, qp_query, (struct mrc_ctx *c, uint32_t qpn, struct mrc_qp_stats *st), (c->ep, qpn, st))
LOCKED_CALL(mrc_ctx_set_port_rate, mrc_ep_set_port_rate, (struct mrc_ctx *c, uint32_t plane, uint64_t rate_bps), (c->ep, plane, rate_bps))
LOCKED_CALL(mrc_ctx_drops, ep_drops, (struct mrc_ctx *c, uint64_t *counts, uint32_t n), (c->ep, counts, n))
LOCKED_CALL(mrc_ev_list, ev_ctl_list, (struct mrc_ctx *c, uint32_t qpn, struct mrc_ev_info *out, uint32_t max), (c->ep, qpn, out, max))
LOCKED_CALL(mrc_ev_set_state, ev_ctl_set_state, (struct mrc_ctx *c, uint32_t qpn, uint32_t ev, uint32_t state), (c->ep, qpn, ev, state))
LOCKED_CALL(mrc_ev_set_paths, ev_ctl_set_paths, (struct mrc_ctx *c, uint32_t qpn, const uint32_t *npaths, uint32_t nplanes), (c->ep, qpn, npaths, nplanes))
LOCKED_CALL(mrc_ev_poll_events, ep_ev_events, (struct mrc_ctx *c, struct mrc_ev_event *out, uint32_t max), (c->ep, out, max))
LOCKED_CALL(mrc_async_events, ep_async_events, (struct mrc_ctx *c, struct mrc_async_event *out, uint32_t max), (c->ep, out, max))

int mrc_ctx_stats(struct mrc_ctx *c, struct mrc_ep_stats *st)
{
    ctx_lock(c);
    *st = c->ep->st;
    ctx_unlock(c);
    return 0;
}

int mrc_ctx_query_device(struct mrc_ctx *c, struct mrc_device_attr *out)
{
    ctx_lock(c);
    *out = (struct mrc_device_attr){
        .ports = c->nports, .planes = c->ep->a.planes, .max_qps = c->ep->a.max_qps, .max_cqs = MRC_MAX_CQS,
        .max_sge = MRC_MAX_SGE, .max_mpr = MRC_MAX_MPR, .mpr_granularity = MRC_MPR_UNIT, .max_wimm = MRC_MAX_WIMM,
        .max_timeout = MRC_MAX_TIMEOUT, .max_linear_cnt = MRC_MAX_LINEAR_CNT, .max_exp_cnt = MRC_RETRY_FOREVER,
        .max_qp_hints = 0, .min_mtu = MRC_MIN_MTU, .max_mtu = MRC_MAX_MTU, .max_ev_count = MRC_MAX_EV_COUNT,
        .caps = MRC_CAP_TRIM_NACK};
    ctx_unlock(c);
    return 0;
}

/* A CQ, with a completion channel when the context has an engine thread. */
int mrc_cq_create(struct mrc_ctx *c, uint32_t depth, uint32_t *cqn)
{
    ctx_lock(c);
    int rc = ep_cq_create(c->ep, depth, cqn);
    if (rc == 0 && c->io && (c->cq_fd[*cqn] = new_eventfd()) < 0) {
        rc = -errno;
        ep_cq_destroy(c->ep, *cqn);
    }
    ctx_unlock(c);
    return rc;
}

int mrc_cq_destroy(struct mrc_ctx *c, uint32_t cqn)
{
    ctx_lock(c);
    int rc = cqn == 0 ? -EBUSY : ep_cq_destroy(c->ep, cqn); /* CQ 0 lives as long as its context */
    if (rc == 0 && c->cq_fd[cqn] >= 0) {
        close(c->cq_fd[cqn]);
        c->cq_fd[cqn] = -1;
    }
    ctx_unlock(c);
    return rc;
}

/* Lock: none (the descriptor lives as long as its CQ). */
int mrc_cq_fd(struct mrc_ctx *c, uint32_t cqn)
{
    if (!c->io)
        return -EOPNOTSUPP;
    return cqn < MRC_MAX_CQS && c->cq_fd[cqn] >= 0 ? c->cq_fd[cqn] : -ENOENT;
}

/* ------------------------------------------------------------ the fast path
 * Lock: none held by the caller; each takes ulock only. A post rings the
 * doorbell when it queued anything. */
#define POSTING_CALL(name, core, params, args) \
    int name params                            \
    {                                          \
        pthread_mutex_lock(&c->ulock);         \
        int rc = core args;                    \
        pthread_mutex_unlock(&c->ulock);       \
        if (rc > 0)                            \
            doorbell(c);                       \
        return rc;                             \
    }
POSTING_CALL(mrc_post_write, ep_post_write, (struct mrc_ctx *c, uint32_t qpn, const struct mrc_wr *wr, uint32_t n), (c->ep, qpn, wr, n))
POSTING_CALL(mrc_post_recv, ep_post_recv, (struct mrc_ctx *c, uint32_t qpn, const uint64_t *wr_ids, uint32_t n), (c->ep, qpn, wr_ids, n))

int mrc_poll_cq(struct mrc_ctx *c, uint32_t cqn, struct mrc_wc *wc, uint32_t max)
{
    pthread_mutex_lock(&c->ulock);
    int n = ep_cq_poll(c->ep, cqn, wc, max);
    pthread_mutex_unlock(&c->ulock);
    if (n > 0 && __atomic_load_n(&c->ep->cq_waiters, __ATOMIC_RELAXED))
        doorbell(c); /* completions waited for room: the engine offers them again */
    return n;
}

/* ------------------------------------------------------------ the engine thread */
/* Give the endpoint lock to a waiting application thread. Lock: lock held. */
static void hand_over(struct mrc_ctx *c)
{
    pthread_mutex_unlock(&c->lock);
    while (LOAD_SC(c->waiters))
        sched_yield();
    pthread_mutex_lock(&c->lock);
}

/* Write the completion channel of every CQ that got completions. Lock: lock held. */
static void ring_cqs(struct mrc_ctx *c)
{
    uint64_t dirty = c->ep->cq_dirty;
    c->ep->cq_dirty = 0;
    for (int i = 0; dirty; i++, dirty >>= 1)
        if (dirty & 1)
            ring_fd(c->cq_fd[i]);
}

/* One pass of the NIC: link events, a few rounds of receiving, then send
 * until the core has nothing more. Returns how much it did. From an
 * application thread (app set, mrc_ctx_progress) a pass that completed
 * something returns before sending (*app = 0): the caller's answer then
 * leaves ahead of the ACKs, as it does in a pass that sends, data first.
 * Each send forwards its packet through the fabric on this CPU: an ACK ahead
 * of the answer cost a 64 B round trip 4 of its 10 us. Lock: lock held. */
static int engine_pass(struct mrc_ctx *c, uint64_t now, int *app)
{
    int work = 0;
    if (c->lw.fd >= 0 && now >= c->lw.next_ns) {
        c->lw.next_ns = now + LINK_CHECK_NS;
        struct carrier_arg a = {c, now};
        lw_read_events(&c->lw, c->ifindex, c->nports, on_carrier, &a);
    }
    for (int round = 0, got = 1; got && round < IO_BATCH / IO_RX_ROUND; round++) {
        got = io_rx_round(c->io, c->ep, now);
        work += got;
    }
    if (app && (*app = !c->ep->cq_dirty) == 0)
        return work;
    c->ep->data_first = !!app;
    int n;
    do {
        n = mrc_ep_poll_tx(c->ep, now, c->txbuf, (uint32_t)IO_BATCH * IO_FRAME, c->txd, IO_BATCH);
        for (int k = 0; k < n; k++)
            io_queue_tx(c->io, &c->txd[k], c->txbuf + c->txd[k].off);
        io_flush_tx(c->io); /* before txbuf is reused */
        work += n;
    } while (n == IO_BATCH);
    c->ep->data_first = 0;
    return work;
}

/* Lock: none held. One pass of the NIC from the caller's thread, unless the
 * engine thread is in one: a thread about to wait for a completion runs the
 * receive, the completion and the answer itself instead of waiting for the
 * engine thread to be scheduled (two hand-overs per round trip fewer). */
int mrc_ctx_progress(struct mrc_ctx *c)
{
    if (!c->io || !c->started)
        return -EOPNOTSUPP;
    uint64_t now = mrc_ctx_now_ns();
    STORE_SC(c->progress_until, now + PROGRESS_NS);
    if (pthread_mutex_trylock(&c->lock))
        return 0;
    int sent = 1, work = engine_pass(c, now, &sent);
    ring_cqs(c);
    signal_async(c);
    /* a timer this pass armed may be due before the sleeping engine wakes;
     * and a pass that left its ACKs for later needs the engine to look by
     * the end of PROGRESS_NS, not at the end of a sleep begun before it */
    uint64_t until = LOAD_SC(c->sleep_until);
    int wake = LOAD_SC(c->sleeping) && (sent ? work && mrc_ep_next_timer(c->ep, now) < until
                                             : until > now + PROGRESS_NS);
    pthread_mutex_unlock(&c->lock);
    if (wake)
        ring_fd(c->wake_fd);
    return work;
}

/* Lock: none held. The caller stops progressing (it is going to sleep): the
 * engine thread watches the ports again, now. */
void mrc_ctx_progress_done(struct mrc_ctx *c)
{
    if (!c->io || !c->started)
        return;
    STORE_SC(c->progress_until, 0);
    if (LOAD_SC(c->sleeping))
        ring_fd(c->wake_fd);
}

/* Lock: the thread takes lock and holds it but for waits and hand-overs. */
static void *engine_main(void *arg)
{
    struct mrc_ctx *c = arg;
    struct pollfd pf[MRC_MAX_PORTS + 2];
    uint32_t np = io_pollfds(c->io, pf);
    pf[np] = (struct pollfd){.fd = c->wake_fd, .events = POLLIN};
    pf[np + 1] = (struct pollfd){.fd = c->lw.fd, .events = POLLIN}; /* fd -1: ignored */
    uint64_t idle_since = 0;
    pthread_mutex_lock(&c->lock);
    while (c->running) {
        uint64_t seen = LOAD_SC(c->post_seq);
        uint64_t now = mrc_ctx_now_ns();
        int work = engine_pass(c, now, NULL);
        if (c->ep->cq_dirty) {
            ring_cqs(c);
            sched_yield(); /* the woken application thread runs now, not behind this busy one */
        }
        signal_async(c);
        if (LOAD_SC(c->waiters))
            hand_over(c);
        /* busy, or spinning a little before sleeping: the next SACK is
         * usually microseconds away */
        if (work) {
            idle_since = 0;
            continue;
        }
        if (!idle_since)
            idle_since = now;
        uint64_t prog = LOAD_SC(c->progress_until);
        if (now - idle_since < __atomic_load_n(&c->spin_ns, __ATOMIC_RELAXED) && now >= prog) {
            sched_yield(); /* spin politely: a runnable application or switch gets the core */
            continue;
        }
        uint64_t next = mrc_ep_next_timer(c->ep, now);
        uint64_t wait = next == UINT64_MAX ? 100000000ull : (next > now ? next - now : 0);
        if (wait > 100000000ull)
            wait = 100000000ull;
        int by_app = now < prog; /* the application polls the ports: wait for the doorbell or its end */
        if (by_app && wait > prog - now)
            wait = prog - now;
        STORE_SC(c->sleep_until, now + wait);
        STORE_SC(c->sleeping, 1);
        if (LOAD_SC(c->post_seq) != seen) { /* a post raced the decision to sleep */
            STORE_SC(c->sleeping, 0);
            continue;
        }
        pthread_mutex_unlock(&c->lock);
        struct timespec ts = {.tv_sec = (time_t)(wait / 1000000000ull), .tv_nsec = (long)(wait % 1000000000ull)};
        if (ppoll(by_app ? &pf[np] : pf, by_app ? 1 : np + 2, &ts, NULL) > 0 && (pf[np].revents & POLLIN)) {
            uint64_t v;
            if (read(c->wake_fd, &v, sizeof(v)) < 0) { /* spurious wake */ }
        }
        STORE_SC(c->sleeping, 0);
        idle_since = 0;
        pthread_mutex_lock(&c->lock);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

/* Lock: none held. */
int mrc_ctx_start(struct mrc_ctx *c)
{
    if (!c->io)
        return -EOPNOTSUPP; /* driven by hand */
    if (c->started)
        return -EALREADY;
    c->running = 1;
    int rc = pthread_create(&c->thread, NULL, engine_main, c);
    if (rc)
        return -rc;
    c->started = 1;
    return 0;
}

/* ------------------------------------------------------------ EV probes for the controller */
static int probe_wait(struct mrc_ctx *c, const struct mrc_probe_req *req, uint32_t n, uint64_t timeout_ns,
                      struct mrc_probe_resp *out);

/* Lock: none held by the caller (it blocks); takes both for each look. A
 * context being destroyed meanwhile waits for it, and it returns
 * -ECANCELED. */
int mrc_ctx_ep_batch_send_wait(struct mrc_ctx *c, const struct mrc_probe_req *req, uint32_t n, uint64_t timeout_ns,
                               struct mrc_probe_resp *out)
{
    __atomic_add_fetch(&c->blocked, 1, __ATOMIC_SEQ_CST);
    int rc = __atomic_load_n(&c->closing, __ATOMIC_SEQ_CST) ? -ECANCELED : probe_wait(c, req, n, timeout_ns, out);
    __atomic_sub_fetch(&c->blocked, 1, __ATOMIC_SEQ_CST);
    return rc;
}

static int probe_wait(struct mrc_ctx *c, const struct mrc_probe_req *req, uint32_t n, uint64_t timeout_ns,
                      struct mrc_probe_resp *out)
{
    if (n > MRC_PROBE_MAX || (n && (!req || !out)))
        return -EINVAL;
    if (!c->started)
        return -ENOTCONN; /* nothing would send them */
    uint32_t *ids = calloc(n ? n : 1, sizeof(*ids));
    if (!ids)
        return -ENOMEM;
    uint64_t deadline = mrc_ctx_now_ns() + timeout_ns;
    uint32_t queued = 0, left = 0, answered = 0;
    ctx_lock(c); /* the peer table changes under the lock */
    for (uint32_t i = 0; i < n; i++) {
        uint32_t plane = ev_plane(req[i].ev);
        out[i] = (struct mrc_probe_resp){.status = -ETIMEDOUT, .ev = req[i].ev, .peer = req[i].peer};
        if (!io_plane_port(c->io, plane))
            out[i].status = -ENETDOWN; /* no port on that plane */
        else if (!io_has_path(c->io, req[i].peer, plane))
            out[i].status = -EHOSTUNREACH;
        else
            left++;
    }
    ctx_unlock(c);
    /* queue them all (the control ring may fill: let the engine drain it), then wait */
    uint32_t seen = 0;
    while (left) {
        uint64_t now = mrc_ctx_now_ns();
        if (queued < n) {
            ctx_lock(c);
            for (; queued < n; queued++) {
                if (out[queued].status != -ETIMEDOUT)
                    continue;
                int rc = mrc_ep_probe_send(c->ep, req[queued].peer, req[queued].ev, mrc_ctx_now_ns(), &ids[queued]);
                if (rc == -ENOSPC || rc == -EBUSY)
                    break; /* try again after the engine sent some */
                if (rc < 0) {
                    out[queued].status = rc;
                    left--;
                }
            }
            ctx_unlock(c);
        }
        uint32_t got = __atomic_load_n(&c->ep->probe_answered, __ATOMIC_ACQUIRE);
        if (got != seen) {
            seen = got;
            ctx_lock(c);
            for (uint32_t i = 0; i < queued; i++) {
                struct mrc_probe_result r;
                if (!ids[i] || out[i].status != -ETIMEDOUT || mrc_ep_probe_result(c->ep, ids[i], &r) != 1)
                    continue;
                out[i].status = 0;
                out[i].port = r.port;
                out[i].rtt_ns = r.rtt_ns;
                ids[i] = 0;
                answered++;
                left--;
            }
            ctx_unlock(c);
            continue;
        }
        if (now >= deadline || __atomic_load_n(&c->closing, __ATOMIC_SEQ_CST))
            break;
        struct timespec ts = {0, 20000}; /* 20 us: probes answer in tens of us */
        nanosleep(&ts, NULL);
    }
    ctx_lock(c);
    for (uint32_t i = 0; i < n; i++)
        if (ids[i] && out[i].status == -ETIMEDOUT)
            mrc_ep_probe_cancel(c->ep, ids[i]); /* a late answer is now STALE_PROBE */
    ctx_unlock(c);
    free(ids);
    if (left && __atomic_load_n(&c->closing, __ATOMIC_SEQ_CST))
        return -ECANCELED; /* cut short: the context is closing */
    return (int)answered;
}
