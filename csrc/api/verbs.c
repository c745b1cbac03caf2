/* The API calls on a context (mrc/mrc.h), written out: each takes the
 * context's locks (engine.c's locking contract) for one call into the core,
 * and wakes the engine when it may have made work. The calls on objects go
 * to their owners in the core: PDs, MRs, CQs, rings and counters to ep.c,
 * QPs to qp.c, EV control to ev.c, EV probes and the endpoint's shared
 * state to dispatch.c and evprobe.c; ports and peers to the I/O layer.
 * As rxe's rxe_verbs.c beside its tasks, the thread that runs the NIC is
 * elsewhere (engine.c).
 *
 * Lock: none held by the callers unless a function says otherwise. */
#define _GNU_SOURCE
#include <time.h>
#include <unistd.h>

#include "core/dispatch.h"
#include "core/ep.h"
#include "core/ev.h"
#include "core/qp.h"
#include "core/responder.h"
#include "core/rings.h"
#include "core/sec.h"
#include "drivers/engine.h"
#include "drivers/io_gso.h"
#include "drivers/io_tx.h"
#include "drivers/io_packet.h"

const char *mrc_dp_version(void) { return "mrc-dp 0.1.0 wire v1"; }

/* ------------------------------------------------------------ the device and its counters */
int mrc_ctx_query_device(struct mrc_ctx *c, struct mrc_device_attr *out)
{
    ctx_lock(c);
    disp_device_attr(c->ep, out);
    out->ports = c->nports;
    ctx_unlock(c);
    return 0;
}

int mrc_ctx_stats(struct mrc_ctx *c, struct mrc_ep_stats *st)
{
    ctx_lock(c);
    disp_stats(c->ep, st);
    ctx_unlock(c);
    return 0;
}

int mrc_ctx_drops(struct mrc_ctx *c, uint64_t *counts, uint32_t n)
{
    ctx_lock(c);
    int rc = ep_drops(c->ep, counts, n);
    ctx_unlock(c);
    return rc;
}

int mrc_ctx_set_port_rate(struct mrc_ctx *c, uint32_t plane, uint64_t rate_bps)
{
    ctx_lock(c);
    int rc = mrc_ep_set_port_rate(c->ep, plane, rate_bps);
    ctx_unlock(c);
    return rc;
}

int mrc_ctx_set_gso(struct mrc_ctx *c, uint32_t k)
{
    if (!c->io)
        return -EOPNOTSUPP;
    ctx_lock(c);
    int rc = mrc_ep_set_gso(c->ep, k);
    if (!rc) {
        io_flush_tx(c->io);
        rc = io_gso_open(c->io, k);
    }
    ctx_unlock(c);
    return rc;
}

int mrc_ctx_port_gso(struct mrc_ctx *c, uint32_t port, uint64_t *tx_buffers, uint64_t *rx_buffers)
{
    if (!c->io)
        return -EOPNOTSUPP;
    ctx_lock(c);
    struct io_port *p = io_port(c->io, port);
    if (p) {
        *tx_buffers = p->gso_tx_buffers;
        *rx_buffers = p->gso_rx_buffers;
    }
    ctx_unlock(c);
    return p ? 0 : -EINVAL;
}

/* ------------------------------------------------------------ protection domains and regions */
int mrc_pd_alloc(struct mrc_ctx *c, uint32_t *pdn)
{
    ctx_lock(c);
    int rc = ep_pd_alloc(c->ep, pdn);
    ctx_unlock(c);
    return rc;
}

int mrc_pd_dealloc(struct mrc_ctx *c, uint32_t pdn)
{
    ctx_lock(c);
    int rc = ep_pd_dealloc(c->ep, pdn);
    ctx_unlock(c);
    return rc;
}

int mrc_mr_reg(struct mrc_ctx *c, uint32_t pdn, void *addr, uint64_t length, uint32_t access, uint32_t *lkey,
               uint32_t *rkey)
{
    ctx_lock(c);
    int rc = ep_mr_reg(c->ep, pdn, addr, length, access, lkey, rkey);
    ctx_unlock(c);
    return rc;
}

int mrc_mr_dereg(struct mrc_ctx *c, uint32_t lkey)
{
    ctx_lock(c);
    int rc = ep_mr_dereg(c->ep, lkey);
    ctx_unlock(c);
    return rc;
}

/* ------------------------------------------------------------ completion queues */
/* A CQ, with a completion channel when the context has an engine thread. */
int mrc_cq_create(struct mrc_ctx *c, uint32_t depth, uint32_t *cqn)
{
    ctx_lock(c);
    int rc = ep_cq_create(c->ep, depth, cqn);
    if (rc == 0 && c->io && (c->cq_fd[*cqn] = ctx_new_eventfd()) < 0) {
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

int mrc_cq_query(struct mrc_ctx *c, uint32_t cqn, struct mrc_cq_stats *st)
{
    ctx_lock(c);
    int rc = ep_cq_query(c->ep, cqn, st);
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

/* ------------------------------------------------------------ queue pairs */
int mrc_qp_create(struct mrc_ctx *c, const struct mrc_qp_attr *attr, uint32_t *qpn)
{
    ctx_lock(c);
    int rc = qp_create(c->ep, attr, qpn);
    ctx_unlock(c);
    return rc;
}

int mrc_qp_destroy(struct mrc_ctx *c, uint32_t qpn)
{
    ctx_lock(c);
    struct qp *q = ep_qp(c->ep, qpn);
    if (q)
        resp_flush(c->ep, q); /* built into the control ring: it goes out after the QP */
    int rc = qp_destroy(c->ep, qpn);
    ctx_unlock(c);
    if (q)
        ctx_doorbell(c);
    return rc;
}

int mrc_qp_modify(struct mrc_ctx *c, uint32_t qpn, uint32_t state, const struct mrc_qp_conn *conn)
{
    ctx_lock(c);
    int rc = qp_modify(c->ep, qpn, state, conn);
    ctx_unlock(c);
    return rc;
}

int mrc_qp_query(struct mrc_ctx *c, uint32_t qpn, struct mrc_qp_stats *st)
{
    ctx_lock(c);
    int rc = qp_query(c->ep, qpn, st);
    ctx_unlock(c);
    return rc;
}

int mrc_ctx_qp_list(struct mrc_ctx *c, uint32_t *qpns, uint32_t max)
{
    if (!c || (max && !qpns))
        return -EINVAL;
    ctx_lock(c);
    int n = ep_qp_list(c->ep, qpns, max);
    ctx_unlock(c);
    return n;
}

int mrc_qp_security(struct mrc_ctx *c, uint32_t qpn)
{
    ctx_lock(c);
    struct qp *q = ep_qp(c->ep, qpn);
    int rc = q ? sec_mode(q) : -ENOENT;
    ctx_unlock(c);
    return rc;
}

/* ------------------------------------------------------------ the fast path
 * Each takes ulock only: the rings are lock-free towards the engine. A post
 * rings the doorbell when it queued anything. */
int mrc_post_write(struct mrc_ctx *c, uint32_t qpn, const struct mrc_wr *wr, uint32_t n)
{
    pthread_mutex_lock(&c->ulock);
    int rc = ep_post_write(c->ep, qpn, wr, n);
    pthread_mutex_unlock(&c->ulock);
    if (rc > 0)
        ctx_doorbell(c);
    return rc;
}

int mrc_post_recv(struct mrc_ctx *c, uint32_t qpn, const uint64_t *wr_ids, uint32_t n)
{
    pthread_mutex_lock(&c->ulock);
    int rc = ep_post_recv(c->ep, qpn, wr_ids, n);
    pthread_mutex_unlock(&c->ulock);
    if (rc > 0)
        ctx_doorbell(c);
    return rc;
}

int mrc_poll_cq(struct mrc_ctx *c, uint32_t cqn, struct mrc_wc *wc, uint32_t max)
{
    pthread_mutex_lock(&c->ulock);
    int n = ep_cq_poll(c->ep, cqn, wc, max);
    pthread_mutex_unlock(&c->ulock);
    if (n > 0 && disp_cq_waiters(c->ep))
        ctx_doorbell(c); /* completions waited for room: the engine offers them again */
    return n;
}

/* ------------------------------------------------------------ EVs and events (the controller's view) */
int mrc_ev_list(struct mrc_ctx *c, uint32_t qpn, struct mrc_ev_info *out, uint32_t max)
{
    ctx_lock(c);
    int rc = ev_ctl_list(c->ep, qpn, out, max);
    ctx_unlock(c);
    return rc;
}

int mrc_ev_set_state(struct mrc_ctx *c, uint32_t qpn, uint32_t ev, uint32_t state)
{
    ctx_lock(c);
    int rc = ev_ctl_set_state(c->ep, qpn, ev, state);
    ctx_unlock(c);
    return rc;
}

int mrc_ev_set_paths(struct mrc_ctx *c, uint32_t qpn, const uint32_t *npaths, uint32_t nplanes)
{
    ctx_lock(c);
    int rc = ev_ctl_set_paths(c->ep, qpn, npaths, nplanes);
    ctx_unlock(c);
    return rc;
}

int mrc_qp_set_keys(struct mrc_ctx *c, uint32_t qpn, const struct mrc_qp_keys *k)
{
    ctx_lock(c);
    int rc = sec_ctl_set(c->ep, qpn, k);
    ctx_unlock(c);
    return rc;
}

int mrc_ev_poll_events(struct mrc_ctx *c, struct mrc_ev_event *out, uint32_t max)
{
    ctx_lock(c);
    int rc = ep_ev_events(c->ep, out, max);
    ctx_unlock(c);
    return rc;
}

int mrc_async_events(struct mrc_ctx *c, struct mrc_async_event *out, uint32_t max)
{
    ctx_lock(c);
    int rc = ep_async_events(c->ep, out, max);
    ctx_unlock(c);
    return rc;
}

/* ------------------------------------------------------------ ports and peers */
int mrc_ctx_port_admin(struct mrc_ctx *c, uint32_t plane, int up)
{
    if (!c->io)
        return -EOPNOTSUPP;
    ctx_lock(c);
    struct io_port *p = io_plane_port(c->io, plane);
    if (p) {
        p->admin_down = !up;
        ctx_port_apply(c, p, mrc_ctx_now_ns());
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

/* ------------------------------------------------------------ EV probes, for the controller */
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
        uint32_t got = disp_probe_answered(c->ep);
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
