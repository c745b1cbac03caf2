/* The libibverbs layer (libmrc-verbs.so, docs/verbs.md): an interposer,
 * loaded with LD_PRELOAD, that answers libibverbs' entry points for an
 * "mrc0" device and passes every other device's calls to the real
 * libibverbs. It is a client of <mrc/mrc.h> and nothing else of libmrc: a
 * verbs context is a context opened by name (mrc_ctx_open, the topology of
 * `mrc fabric exec` or $MRC_TOPOLOGY), a PD, MR, CQ and RC QP are the
 * engine's own, and a GID names a host of the topology. No protocol here.
 *
 * Files, lowest first: base.c (the device, the real libibverbs' calls,
 * failing with a reason), qp.c, obj.c, dev.c (the device list, opening, the device's and port's
 * attributes, GIDs, what is not supported), obj.c (PDs, MRs, completion
 * channels, CQs and polling), qp.c (QPs: creation, the state moves,
 * posting). Every object is the verbs struct first, so the pointer the
 * program holds is ours. */
#ifndef MRC_IBV_H
#define MRC_IBV_H
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdint.h>

#include "mrc/mrc.h"

#define MV_NAME "mrc0"
#define MV_MAX_INLINE 256   /* bytes a WR may carry inline (IBV_SEND_INLINE): copied at post time */
#define MV_MAX_WR 8192      /* work requests a send or receive queue holds */
#define MV_MAX_CQE 65536
#define MV_MAX_QPS 1024

struct mv_qp;

struct mv_ctx {
    struct verbs_context v;  /* v.context is what the program holds */
    struct mrc_ctx *mc;
    struct mrc_port_info ports[MRC_MAX_PORTS];
    uint32_t nports;
    struct mrc_qp_attr qpdef;     /* what a QP of this context runs (mrc_ctx_qp_attr_default) */
    pthread_mutex_t lock;         /* the QP table and object creation */
    struct mv_qp *qps[MV_MAX_QPS];
    uint32_t qps_hi;              /* one past the highest slot ever used: lookups scan no further */
    /* what destroyed QPs sent again and why, for the stats file */
    uint64_t rtx_packets, timeouts, tlp_probes, losses;
};

struct mv_pd { struct ibv_pd pd; uint32_t pdn; };
struct mv_mr { struct ibv_mr mr; };
struct mv_cq {
    struct ibv_cq cq;
    uint32_t cqn;
    int fd;                       /* the engine's eventfd for this CQ */
    struct mrc_wc spill[64];      /* polled from the engine, not yet handed out (a short ibv_poll_cq) */
    uint32_t nspill, spill_at;
    pthread_mutex_t lock;
};

/* One send WR as posted: what its completion must say, and whether the program sees it. */
struct mv_swr { uint64_t wr_id; uint8_t signaled, opcode; };
struct mv_qp {
    struct ibv_qp qp;
    uint32_t qpn;
    uint32_t sq_depth, rq_depth;
    int sig_all;
    struct mv_swr *ring;          /* by send sequence number mod sq_depth */
    uint64_t seq;                 /* the next send's sequence number */
    uint64_t freed;               /* sends before this one gave back their slots (a signaled one polled) */
    uint8_t *inl;                 /* sq_depth x MV_MAX_INLINE bytes, registered: inline data lands here */
    uint32_t inl_lkey;
    uint32_t dest_qpn, rq_psn, sq_psn; /* what RTR and RTS gave */
    pthread_mutex_t lock;         /* posting from several threads */
};

/* base.c: the device, and what every file shares. Whether a context, or the context of an object, is ours. */
extern struct ibv_device mv_device;
int mv_is_ours(const struct ibv_context *c);
static inline struct mv_ctx *mv_ctx(struct ibv_context *c)
{
    return (struct mv_ctx *)((char *)c - offsetof(struct mv_ctx, v.context));
}

/* The real libibverbs' call `name` at `version` (NULL when it has none). */
void *mv_real(const char *name, const char *version);
#define REAL(name, ver, ...) ((__typeof__(&name))mv_real(#name, ver))(__VA_ARGS__)

/* An engine completion's status as verbs names it (one table for sends and receives). */
enum ibv_wc_status mv_wc_status(uint8_t status);
/* errno set, NULL returned: a verbs call's way to fail. */
void *mv_fail(int err, const char *why, ...) __attribute__((format(printf, 2, 3)));
/* Say why (MRC_VERBS_DEBUG=1 prints to stderr) and return err. */
int mv_err(int err, const char *why, ...) __attribute__((format(printf, 2, 3)));

/* obj.c: the ops a context's verbs_context carries */
int mv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int mv_req_notify_cq(struct ibv_cq *cq, int solicited_only);
/* qp.c */
int mv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int mv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
struct mv_qp *mv_qp_of(struct mv_ctx *c, uint32_t qpn);
/* The send completion of sequence number seq (a wr_id the engine carries) as the program sees it:
 * 1 when it is to be handed out (and wc is filled), 0 when it is an unsignaled success. */
int mv_qp_send_done(struct mv_qp *q, const struct mrc_wc *w, struct ibv_wc *wc);
#endif
