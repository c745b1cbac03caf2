/* A context: its creation and end, its ports' carrier, its engine thread
 * ("the NIC") and the doorbells. The API calls on it are in verbs.c; the
 * state both share is in engine.h. The engine thread drives the core through
 * dispatch.c's entry points; creation and destruction make and free the
 * endpoint (ep.c, qp.c).
 *
 * Locking contract. Two locks, always taken in this order:
 *   - ulock serialises the application's threads (the engine never takes it);
 *   - lock protects the endpoint, the I/O layer's peer table and the ports'
 *     state. The engine thread holds it while it runs the core (input,
 *     poll_tx, timers) and drops it around waits, and whenever an
 *     application thread is waiting for it (waiters).
 * The fast path takes only ulock: mrc_post_write, mrc_post_recv and
 * mrc_poll_cq work on the lock-free send, receive and completion rings
 * (csrc/core/types.h), so posting and polling never wait for the engine and the
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

#include "core/dispatch.h"
#include "core/ep.h"
#include "core/qp.h"
#include "drivers/engine.h"
#include "drivers/io_packet.h"
#include "drivers/io_tx.h"
#include "drivers/link_watch.h"

/* PROGRESS_NS: after an application thread's mrc_ctx_progress, the engine
 * leaves the ports to it this long (it sleeps on its doorbell alone). */
enum { LINK_CHECK_NS = 200000, SPIN_NS = 200000, PROGRESS_NS = 100000 };

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
    uint32_t seq = disp_aeq_seq(c->ep);
    if (c->async_fd < 0 || seq == c->aeq_signalled)
        return;
    c->aeq_signalled = seq;
    ring_fd(c->async_fd);
}

/* Lock: none held; takes both. */
void ctx_lock(struct mrc_ctx *c)
{
    pthread_mutex_lock(&c->ulock);
    lock_endpoint(c);
}

/* Lock: both held; releases them and wakes the engine (a modify or a port
 * change may have made work: it looks now). */
void ctx_unlock(struct mrc_ctx *c)
{
    disp_api_done(c->ep); /* the call may have changed any QP's times */
    signal_async(c);
    pthread_mutex_unlock(&c->lock);
    pthread_mutex_unlock(&c->ulock);
    ring_fd(c->wake_fd);
}

/* Ring the doorbell after a post: a syscall only if the engine sleeps.
 * Lock: none needed. */
void ctx_doorbell(struct mrc_ctx *c)
{
    __atomic_add_fetch(&c->post_seq, 1, __ATOMIC_SEQ_CST);
    if (LOAD_SC(c->sleeping) && mrc_ctx_now_ns() >= LOAD_SC(c->progress_until))
        ring_fd(c->wake_fd);
}

/* ------------------------------------------------------------ ports and carrier */
/* Tell the core when a port's effective state (admin and carrier) changes:
 * it stops using the plane at once and tells the peers (PORT_ERR).
 * Lock: lock held (or the context is not shared yet). */
void ctx_port_apply(struct mrc_ctx *c, struct io_port *p, uint64_t now)
{
    int up = !p->admin_down && !p->carrier_down;
    p->st.admin_up = !p->admin_down;
    p->st.carrier = !p->carrier_down;
    if (disp_port_up(c->ep, p->cfg.plane) != up)
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
        ctx_port_apply(a->c, p, a->now);
    }
}

/* ------------------------------------------------------------ create, destroy */
int ctx_new_eventfd(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

/* Lock: none (the context is not shared yet). */
static int open_ports(struct mrc_ctx *c, const struct mrc_port_cfg *ports, uint32_t nports)
{
    int rc = io_open(ports, nports, &c->io);
    if (rc < 0)
        return rc;
    c->txbuf = malloc((size_t)IO_BATCH * IO_FRAME);
    if (!c->txbuf)
        return -ENOMEM;
    c->wake_fd = ctx_new_eventfd();
    c->async_fd = ctx_new_eventfd();
    c->cq_fd[0] = ctx_new_eventfd();
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
    if (rc == 0 && nports) {
        mrc_ep_want_tx_sums(c->ep, 1); /* its packets go in UDP (io_queue_tx) */
        rc = open_ports(c, ports, nports);
    }
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
    if (c->app_stop)
        c->app_stop(c->app);
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
    if (c->app_free)
        c->app_free(c->app);
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->ulock);
    free(c);
}

/* Lock: none. */
struct mrc_ep *mrc_ctx_ep(struct mrc_ctx *c) { return c->ep; }
int mrc_ctx_async_fd(struct mrc_ctx *c) { return c->async_fd >= 0 ? c->async_fd : -EOPNOTSUPP; }
void mrc_ctx_set_spin(struct mrc_ctx *c, uint64_t ns) { __atomic_store_n(&c->spin_ns, ns, __ATOMIC_RELAXED); }
struct io *engine_idle_io(struct mrc_ctx *c) { return c->io && !c->started ? c->io : NULL; }

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
    uint64_t dirty = disp_take_cq_dirty(c->ep);
    for (int i = 0; dirty; i++, dirty >>= 1)
        if (dirty & 1)
            ring_fd(c->cq_fd[i]);
}

/* One pass of the NIC: link events, a few rounds of receiving, then send
 * until the core has nothing more. Returns how much it did. From an
 * application thread (app set, mrc_ctx_progress) a pass that completed
 * something returns before sending (*app = 0): the caller's answer then
 * leaves ahead of the ACKs, as it does in a pass that sends, data first.
 * Each send forwards its packet through the fabric on this CPU, so an ACK
 * ahead of the answer would delay it by that packet's whole trip. Lock:
 * lock held. */
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
    if (app && (*app = !disp_cq_dirty(c->ep)) == 0)
        return work;
    disp_set_data_first(c->ep, !!app);
    int n;
    do {
        n = mrc_ep_poll_tx(c->ep, now, c->txbuf, (uint32_t)IO_BATCH * IO_FRAME, c->txd, IO_BATCH);
        for (int k = 0; k < n; k++)
            io_queue_tx(c->io, &c->txd[k], c->txbuf + c->txd[k].off);
        io_flush_tx(c->io); /* before txbuf is reused */
        work += n;
    } while (n == IO_BATCH);
    disp_set_data_first(c->ep, 0);
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
    __atomic_store_n(&c->tid, (int32_t)gettid(), __ATOMIC_RELEASE);
    pthread_setname_np(pthread_self(), "mrc-engine"); /* top, perf: whose CPU it is */
    struct pollfd pf[2 * MRC_MAX_PORTS + 2]; /* each port's raw and buffer sockets (io_pollfds) */
    uint32_t np = io_pollfds(c->io, pf);
    pf[np] = (struct pollfd){.fd = c->wake_fd, .events = POLLIN};
    pf[np + 1] = (struct pollfd){.fd = c->lw.fd, .events = POLLIN}; /* fd -1: ignored */
    uint64_t idle_since = 0;
    pthread_mutex_lock(&c->lock);
    while (c->running) {
        uint64_t seen = LOAD_SC(c->post_seq);
        uint64_t now = mrc_ctx_now_ns();
        int work = engine_pass(c, now, NULL);
        if (disp_cq_dirty(c->ep)) {
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

/* Lock: none (the thread handle is set before started, and read after). */
int mrc_ctx_engine_cpu(struct mrc_ctx *c, uint64_t *cpu_ns, int32_t *tid)
{
    clockid_t id;
    struct timespec ts;
    int32_t t = __atomic_load_n(&c->tid, __ATOMIC_ACQUIRE);
    if (!c->started || !t || pthread_getcpuclockid(c->thread, &id) || clock_gettime(id, &ts))
        return -ENOENT;
    *cpu_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    *tid = t;
    return 0;
}

/* Lock: none (the I/O's path is chosen when it opens and never changes). */

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

