/* A context (struct mrc_ctx), as its two files share it: engine.c (its
 * life, its ports and its engine thread) and verbs.c (the API calls, each
 * under the context's locks). engine.c's head has the locking contract.
 * Not part of any contract with users. */
#ifndef MRC_DRIVERS_ENGINE_H
#define MRC_DRIVERS_ENGINE_H
#include <pthread.h>

#include "drivers/io_packet.h"
#include "drivers/link_watch.h"

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
    int32_t tid;             /* the engine thread's id, once it runs (0 before) */
    int running, started;
    int wake_fd, async_fd;
    int cq_fd[MRC_MAX_CQS];  /* each CQ's completion channel (-1: none) */
    uint32_t aeq_signalled;  /* aeq_tail when async_fd was last written */
    uint32_t blocked;        /* callers blocked in a call that waits (batch_send_wait): destroy waits for them */
    uint32_t closing;        /* destroy began: blocked callers return -ECANCELED */
    uint8_t *txbuf;
    struct mrc_txdesc txd[IO_BATCH];
    /* what a context opened by name keeps (csrc/app/open.c: its ports'
     * names and addresses, its topology, its peers), freed by destroy */
    void *app;
    void (*app_free)(void *app);
    void (*app_stop)(void *app); /* called first by destroy, before anything is freed (its control endpoint) */
};

/* engine.c: the locks, the doorbell and the ports, for verbs.c. */
void ctx_lock(struct mrc_ctx *c);   /* Lock: none held; takes both */
void ctx_unlock(struct mrc_ctx *c); /* Lock: both held; releases them and wakes the engine */
void ctx_doorbell(struct mrc_ctx *c);
int ctx_new_eventfd(void);
/* The raw blaster's way to the ports of a context whose engine
 * thread was not started (NULL otherwise). */
struct io *engine_idle_io(struct mrc_ctx *c);
void ctx_port_apply(struct mrc_ctx *c, struct io_port *p, uint64_t now);
#endif
