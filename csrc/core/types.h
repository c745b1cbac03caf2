/* The sans-I/O core's shared state: the structs every owner reads (an
 * endpoint, its tables, a QP and its windows) and the small inlines that
 * only read or write their fields. Each owner's calls are in its own
 * header beside it (ep.h, rings.h, ev.h, ev_pick.h, cc_nscc.h, sec.h, qp.h,
 * requester.h, completer.h, responder.h, evprobe.h, dispatch.h): a file
 * includes the headers of the owners it calls, and tests/unit/test_layers.py
 * holds the includes to the calls. Not part of any contract with users.
 *
 * The core's owners, lowest first (docs/architecture.md has a paragraph per file):
 *   ep.c rings.c            object tables (MRs, QPs, CQs); their rings and posting
 *   ev.c ev_pick.c          EV sets and the EV state machine; the rotation (cc_nscc.c: NSCC)
 *   sec.c                   a QP's keys, sealing and opening
 *   qp.c                    QP lifecycle and the QP state machine
 *   requester.c completer.c responder.c evprobe.c    the roles
 *   dispatch.c              receive dispatch, poll_tx, timers, port changes
 * The drivers (csrc/drivers/: the raw-socket ports and the engine thread)
 * and the in-memory link (csrc/sim/simlink.c) drive the core through
 * dispatch.c's entry points only. The API calls (csrc/api/verbs.c) reach the
 * objects' owners (ep.c, rings.c, qp.c, ev.c) and dispatch.c's named
 * accessors of the endpoint's shared state, each call under the context's
 * locks; a context's creation and end (csrc/drivers/engine.c) make and free
 * the endpoint (ep.c, qp.c).
 *
 * Threading: an endpoint and everything it owns is used by one thread at a
 * time, the one holding the context's endpoint lock (the engine thread, or
 * an application thread inside one API call; csrc/drivers/engine.c has the locking
 * contract), except for single-producer/single-consumer rings that an
 * application thread may use while the engine runs:
 *   - a QP's send queue and receive queue: the application produces
 *     (ep_post_write/ep_post_recv publish sq_tail/rq_tail), the engine
 *     consumes (it publishes sq_head/rq_head as WRs retire);
 *   - a completion queue: the engine produces (tail), the application
 *     consumes (ep_cq_poll publishes head).
 * Indices are published with release stores and read with acquire loads. A
 * QP's state is read by the producer without the lock; a post that races the
 * QP into ERROR sets ep->flush_pending and the engine flushes it. */
#ifndef MRC_CORE_TYPES_H
#define MRC_CORE_TYPES_H
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/idmap.h"
#include "mrc/mrc.h"
#include "mrc_manual.h"
#include "mrc_wire.h"
#include "wire/hdr.h"
#include "wire/wire.h"

#define MRC_INF_NS UINT64_MAX
#define MRC_AEQ_SIZE 256
#define MRC_CTRL_RING 4096
#define LOAD_ACQ(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)
#define STORE_REL(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELEASE)
#define LOAD_SC(x) __atomic_load_n(&(x), __ATOMIC_SEQ_CST)
#define STORE_SC(x, v) __atomic_store_n(&(x), (v), __ATOMIC_SEQ_CST)

/* PSNs a SACK's bitmap covers (SETH: 8 bytes) */
enum { MRC_SACK_BITS = 64 };

static inline uint32_t psn_add(uint32_t a, uint32_t n) { return (a + n) & MRC_PSN_MASK; }
/* a - b modulo 2^24 (only meaningful when a is not before b) */
static inline uint32_t psn_sub(uint32_t a, uint32_t b) { return (a - b) & MRC_PSN_MASK; }
static inline int psn_lt(uint32_t a, uint32_t b) { return mrc_psn_cmp(a, b) < 0; }
static inline int psn_le(uint32_t a, uint32_t b) { return mrc_psn_cmp(a, b) <= 0; }
static inline uint32_t ring_next(uint32_t i, uint32_t size) { return i + 1 == size ? 0 : i + 1; }

struct mr {
    uint8_t *addr;
    uint64_t len;
    uint32_t access;
    uint32_t key;   /* lkey == rkey: a keyed permutation of the 32-bit registration count, found through ep->mrmap */
    uint32_t pd;
    uint32_t users; /* queued WRs that read from it (atomic: posted by the application, released by the engine) */
    int used;
};

enum { MR_CAP = 1024 }; /* regions per endpoint */
/* what the endpoint's PRF (ep_prf) makes: the domains of its inputs */
enum { PRF_RKEY = 1, PRF_QPN = 2, PRF_MAP = 3, PRF_PROBE = 4, PRF_KEYFP = 5 };

/* A completion queue: an SPSC ring (engine -> application). */
struct cq {
    struct mrc_wc *ring;
    uint32_t size, head, tail;
    uint32_t users;          /* QPs that post here */
    uint64_t overflow;       /* completions that found it full (they wait in their QP) */
    uint8_t used;
    uint8_t full;            /* full since the last MRC_EVENT_CQ_ERR (one event per filling) */
};

struct wqe {
    struct mrc_wr wr;
    uint64_t total;
    uint32_t psn_first;
    uint32_t npkts;
    uint16_t msn;
    uint16_t msn_rq;         /* WRITE_IMMs this QP sent before this message (METH) */
    uint8_t done;
    uint8_t status;
};

enum { PE_FREE = 0, PE_INFLIGHT = 1, PE_ACKED = 2, PE_LOST = 3 };

/* One PSN of the send window. */
struct pent {
    uint64_t sent_ns;
    uint32_t wqe;   /* index into the send queue */
    uint32_t off;   /* payload offset inside the message */
    uint32_t ev;
    uint16_t len;
    uint8_t st;
    uint8_t nrtx : 7; /* times resent (stops counting at 127) */
    uint8_t rnr : 1;  /* the receiver had no receive for it (NACK NO_RESOURCE): its timer resend is no path failure */
};
/* a window of 1024 PSNs is 24 KiB of these: one more byte would make it 32 */
_Static_assert(sizeof(struct pent) == 24, "struct pent grew: the QP state target (64 KiB) depends on it");

/* One EV of a QP's set: its value, its state (written by ev_transition()
 * alone) and its probing. */
struct ev_entry {
    uint64_t until_ns;       /* SKIP expiry */
    uint64_t probe_due_ns;
    uint64_t probe_sent_ns;
    uint32_t ev;
    uint32_t probe_id;
    uint8_t state;           /* enum mrc_ev_state */
    uint8_t probe_ok;        /* consecutive successful probes */
    uint8_t probing;         /* a probe is outstanding */
    uint8_t in_slot;         /* the EV occupies a rotation slot (else it is a spare) */
    uint8_t probe_shift;     /* probe interval = probe_interval_ns << probe_shift */
};

/* What the responder keeps of a received PSN until the cumulative PSN passes it. */
struct rxent {
    uint32_t psn;
    uint32_t imm;
    uint32_t dma_len;        /* the message's length as the packet's RETH says */
    uint16_t plen;           /* payload bytes it placed */
    uint8_t last;            /* the last packet of a message */
    uint8_t imm_valid;       /* a WRITE_IMM's last packet: completes a receive */
};

struct cc_ops; /* the congestion control's calls (cc_nscc.h) */

struct cc_state {
    uint64_t cwnd;
    double avg_delay;
    double pending;
    uint64_t acked_since;
    uint64_t last_adjust_ns;
    uint64_t last_md_ns;
    uint64_t achieved;
    uint64_t achieved_start_ns;
    uint64_t last_qa_ns;
    uint32_t near_zero_acks;
};

struct qp {
    uint32_t qpn, dqpn;
    uint32_t idx;            /* its place in ep->qps (its number says nothing of it) */
    uint16_t peer;
    uint32_t state;          /* enum mrc_qp_state: written by qp_transition() alone */
    struct mrc_qp_attr a;
    uint16_t ev_paths[MRC_MAX_PLANES]; /* per plane: EVs with equal entropy mod this share a path (0: unknown) */
    uint32_t spare_off, spare_span; /* spare b of a plane has entropy base + (spare_off + b) % spare_span (ev.c) */
    uint32_t win;            /* mpr * 128 */
    uint32_t pd;
    uint16_t pkey;           /* its partition (0: none): every packet of the QP carries it */
    struct qp_sec *sec;      /* its keys and packet numbers (sec.c), NULL: security off */
    uint32_t scq, rcq;       /* send and receive CQ numbers */
    uint8_t scq_wait;        /* acknowledged WRs wait for room in the send CQ */
    uint8_t rcq_wait;        /* a placed WRITE_IMM waits for room in the receive CQ */
    /* requester */
    struct wqe *sq;
    uint32_t sq_size, sq_head, sq_tail, sq_cur, cur_off;
    uint16_t next_msn;
    uint16_t imm_sent;       /* WRITE_IMM messages started (METH's RQ message number) */
    uint32_t next_psn, una_psn;
    struct pent *pe;
    uint32_t nlost;
    uint32_t wimm_out;
    uint64_t inflight;
    uint64_t since_ackreq;   /* payload bytes sent since the last ACK request */
    uint64_t last_progress_ns;
    uint64_t loss_sent_ns;   /* while a loss retires EVs: when the lost packet was sent */
    uint32_t retries;
    uint64_t srtt, min_rtt;
    uint64_t rack_sent_ns;
    uint64_t reo_ns;         /* the reordering allowance now: widened by spurious losses */
    uint64_t last_spurious_ns;
    uint64_t last_tx_ns;     /* the latest data packet sent (new or again) */
    uint64_t last_ack_ns;    /* the latest SACK that acknowledged something */
    uint8_t tlp_out;         /* a tail loss probe is out: no other until a SACK acknowledges something */
    uint8_t burst_left;      /* packets that may still take burst_ev (ev_pick_burst: buffers of k packets) */
    uint32_t burst_ev;
    /* EVs */
    struct ev_entry *evs;
    uint32_t nevs;
    uint16_t *slot;          /* slot -> index into evs */
    uint32_t nslots, rr;     /* rr: the slot the rotation tries next (it picks the plane) */
    uint16_t prr[MRC_MAX_PLANES]; /* per plane: its slot (index among the plane's) tried next */
    uint8_t owed[MRC_MAX_PLANES]; /* per plane: turns the rotation passed while its paced port was busy */
    uint32_t owed_mask;      /* planes owed a turn */
    uint32_t owed_next;      /* the plane pick_owed looks at first (after the last it served) */
    uint64_t held_ns;        /* 0, or: the rotation waits for a busy port owed all it may be, until then */
    uint32_t nbad;           /* EVs in ASSUMED_BAD (probing) */
    uint32_t remote_ports;
    uint32_t probe_seq;
    /* congestion control */
    const struct cc_ops *cc;
    struct cc_state ccs;
    /* responder */
    uint32_t epsn;
    uint64_t *rbits;
    struct rxent *rx;
    uint64_t *rq;
    uint32_t rq_size, rq_head, rq_tail;
    uint16_t rq_taken;       /* receives consumed (WRITE_IMMs completed), mod 2^16 */
    uint64_t msg_bytes;      /* bytes placed of the message the cumulative PSN is in */
    uint32_t bytes_unacked;
    uint32_t rcv_bytes;
    uint32_t ooo;
    uint32_t last_rx_ev;     /* the EV the last data packet came on */
    uint8_t last_rx_port;    /* and the plane */
    uint16_t last_rx_ts;     /* and its TSETH timestamp (0: none) */
    uint32_t last_rx_psn;    /* and its PSN */
    uint64_t ack_due_ns;     /* data waits for its SACK until then (0: none waits): see RESP_ACK_DELAY_NS */
    uint32_t sack_slot;      /* 1 + the control-ring slot of this QP's plain SACK not sent yet (0: none) */
    struct mrc_qp_stats st;
};

/* A control packet waiting to leave (SACK, NACK, probe, endpoint packets). */
struct ctrl {
    uint8_t buf[112];
    uint16_t len;
    uint16_t peer;
    uint32_t ev;
    uint8_t tclass;
    uint32_t probe_id;       /* an EV probe request: stamp its send time when it leaves */
    uint32_t sack_qpn;       /* a plain SACK of this QP, which a newer one may bring up to date */
    uint32_t sec_qpn;        /* a packet of this secured QP: sealed as it leaves (sec.c) */
};

struct probe {
    uint32_t id;
    uint32_t ev;
    uint16_t peer;
    uint32_t qpn;            /* sent sealed through this secured QP (its answer must be too); 0: in the clear */
    uint8_t state;           /* PROBE_FREE, _PENDING, _ANSWERED */
    uint8_t port;
    uint64_t t_sent, rtt;
};
enum { PROBE_FREE = 0, PROBE_PENDING = 1, PROBE_ANSWERED = 2 };

struct mrc_ep {
    struct mrc_ep_attr a;
    uint64_t key[2];         /* the secret behind rkeys and QP numbers (SipHash key) */
    struct mr *mrs;
    uint32_t mr_cap;
    uint32_t mr_seq;         /* registrations so far */
    struct idmap mrmap;      /* key -> slot of mrs */
    uint8_t sec_buf[9216];   /* a secured packet, decrypted (sec_open) */
    uint32_t pd_users[MRC_MAX_PDS]; /* regions and QPs of each PD */
    uint64_t pd_live;        /* bit n: PD n exists */
    struct qp **qps;         /* by place (q->idx) */
    struct idmap qpmap;      /* QP number (24 random bits) -> slot */
    uint32_t qp_seq;
    uint16_t peer_host[MRC_MAX_PEERS]; /* peer index -> the first index of the same host (its addresses) */
    struct cq cqs[MRC_MAX_CQS];
    uint64_t cq_live;        /* bit n: CQ n exists */
    uint32_t data_first;     /* poll_tx sends data before control packets */
    uint8_t tx_sums;         /* data packets leave with their ones'-complement sum (mrc_txdesc.sum) */
    uint8_t gso_k;           /* new full-size data packets go k in a row on one EV (mrc_ep_set_gso; 0, 1: one) */
    uint64_t cq_dirty;       /* bit n: completions were added to CQ n (the engine signals and clears) */
    uint32_t cq_waiters;     /* QPs whose completions wait for room in a CQ */
    uint32_t cq_polls;       /* bumped by every poll that took completions (the application's side) */
    uint32_t cq_polls_seen;  /* cq_polls when the waiting completions were last offered again */
    struct ctrl *ctl;
    uint32_t ctl_size, ctl_head, ctl_tail;
    uint64_t drops[MRC_DROP_NREASONS];
    struct mrc_ep_stats st;
    struct mrc_ev_event *evq;
    uint32_t evq_size, evq_head, evq_tail, ev_dropped;
    uint32_t port_up;
    /* the ports' transmit pacing (mrc_ep_set_port_rate): a port sends at
     * most its rate, so a host queue in front of a slower wire never fills
     * (NSCC would count it as the network's delay). port_free_ns: when the
     * port's last packet has left; a port is busy until then. */
    uint32_t port_paced;     /* bit n: plane n has a rate */
    uint64_t port_ps_per_byte[MRC_MAX_PLANES];
    uint64_t port_free_ns[MRC_MAX_PLANES];
    /* per plane: the path cursor of the last QP that sent on it (its qpn in
     * path_qpn, UINT32_MAX before any: QP numbers have 24 bits); a QP that
     * sends next on that plane takes it up (ev.c, plane_cursor), so the
     * port's packets go over the plane's paths in turn whichever QPs they
     * belong to */
    uint16_t path_rr[MRC_MAX_PLANES];
    uint32_t path_qpn[MRC_MAX_PLANES];
    uint32_t rr_qp;
    uint32_t *act;           /* indices of QPs in RTS: the only ones the tx path visits */
    uint32_t nact;
    /* What poll_tx and next_timer keep of each QP (by slot), so that they
     * read the state of the QPs that have work, not of every QP on every
     * call (an all-to-all's hundreds of QPs per NIC: most of the simulator's
     * time went there). dl[slot]: when its first timer fires (dispatch.c,
     * qp_next); dl_ports[slot]: the ports of which one must be free for a
     * visit of the tx path to change anything (dispatch.c, qp_tx_ports):
     * none when it has nothing it may send, every one while its rotation is
     * held (a visit clears the hold), else the ports it may use, and while
     * they are all busy it may send next when the first is free. Both change
     * only through the QP (a packet for it, a post, a visit of the tx path),
     * which sets the slot's bit in dl_bits (a post: the application thread, after it
     * publishes), or through the endpoint (an API call, a port, a CQ's
     * room), which sets dl_all: they are computed again before use. */
    uint64_t *dl;
    uint32_t *dl_ports;
    uint8_t dl_all;
    /* Kept over the active QPs so that a call finds what is due without
     * visiting every QP (ep.c, ep_dl_store): dl_bits, a bit per slot (the
     * slots to compute again: taken by dispatch.c, qp_due); dl_heap, the active slots
     * in a min-heap by dl (dl_hix: a slot's place, UINT32_MAX: not active);
     * dl_pcnt[b], how many active QPs have bit b in dl_ports. */
    uint64_t *dl_bits;
    uint32_t *dl_heap, *dl_hix, dl_hn;
    uint32_t dl_pcnt[32], dl_any; /* dl_any: the bits b with dl_pcnt[b] > 0 */
    uint32_t flush_pending;  /* a post raced a QP into ERROR: flush on the next poll_tx */
    struct mrc_async_event aeq[MRC_AEQ_SIZE]; /* asynchronous events (ring; full: counted in aeq_dropped) */
    uint32_t aeq_head, aeq_tail, aeq_dropped;
    struct probe *probes;    /* EV probes in flight, slot = id % MRC_PROBE_MAX */
    uint32_t probe_seq;
    uint32_t probe_answered; /* bumped on every answer: a waiter reads it without the lock */
};

/* What is kept of the QP in slot idx (ep->dl, dl_ports) is computed again
 * before its next use. The engine's own thread. */
static inline void ep_dl_stale(struct mrc_ep *ep, uint32_t idx)
{
    uint64_t *w = &ep->dl_bits[idx / 64], bit = 1ull << (idx % 64);
    if (!(__atomic_load_n(w, __ATOMIC_RELAXED) & bit)) /* set already (a packet for it): no locked write */
        __atomic_fetch_or(w, bit, __ATOMIC_RELAXED);
}

/* The same from the application's thread, after a post is published and
 * before the doorbell (the engine takes the flag before it reads the QP). */
static inline void ep_dl_posted(struct mrc_ep *ep, const struct qp *q)
{
    __atomic_fetch_or(&ep->dl_bits[q->idx / 64], 1ull << (q->idx % 64), __ATOMIC_SEQ_CST);
}

/* The planes both ends of q can use now. */
static inline uint32_t qp_usable_ports(const struct mrc_ep *ep, const struct qp *q)
{
    return ep->port_up & q->remote_ports;
}

enum { EP_FRAME_HDRS = MRC_ETH_HLEN + MRC_IPV6_HLEN + MRC_UDP_HLEN }; /* a frame's bytes around the packet */

/* The planes whose port may send now: unpaced, or its last packet gone. */
static inline uint32_t ep_ports_ready(const struct mrc_ep *ep, uint64_t now)
{
    uint32_t busy = 0;
    for (uint32_t m = ep->port_paced; m; m &= m - 1) {
        uint32_t p = (uint32_t)__builtin_ctz(m);
        if (ep->port_free_ns[p] > now)
            busy |= 1u << p;
    }
    return ~busy;
}

/* When the first of the paced ports in mask is free (MRC_INF_NS: none is paced). */
static inline uint64_t ep_first_free(const struct mrc_ep *ep, uint32_t mask)
{
    uint64_t t = MRC_INF_NS;
    for (uint32_t m = mask & ep->port_paced; m; m &= m - 1) {
        uint32_t p = (uint32_t)__builtin_ctz(m);
        t = ep->port_free_ns[p] < t ? ep->port_free_ns[p] : t;
    }
    return t;
}

/* A packet of len bytes (BTH..ICRC) goes out on plane's port: the port is
 * busy for its frame's time at the port's rate. The port may have saved up
 * one full frame's time while idle, no more: what the engine sends late
 * (it woke late) it may catch up, and the queue in front of the wire holds
 * at most two frames. */
static inline void ep_port_charge(struct mrc_ep *ep, uint32_t plane, uint32_t len, uint64_t now)
{
    if (plane >= MRC_MAX_PLANES || !(ep->port_paced & (1u << plane)))
        return;
    uint64_t ps = ep->port_ps_per_byte[plane], credit = (MRC_MAX_MTU + EP_FRAME_HDRS) * ps / 1000;
    uint64_t t = ep->port_free_ns[plane];
    if (t + credit < now)
        t = now - credit;
    ep->port_free_ns[plane] = t + (len + EP_FRAME_HDRS) * ps / 1000;
}

/* Mark (on) or clear a QP's "completions wait for room in a CQ" flag. */
static inline void cq_wait(struct mrc_ep *ep, uint8_t *flag, uint8_t on)
{
    if (*flag == on)
        return;
    *flag = on;
    __atomic_add_fetch(&ep->cq_waiters, on ? 1u : (uint32_t)-1, __ATOMIC_RELAXED); /* the poller reads it */
}

static inline struct pent *pe_at(struct qp *q, uint32_t psn) { return &q->pe[psn & (q->win - 1)]; }

/* Work is queued but no plane is usable by both ends (the peer reported no
 * port we have, or ours are all down): the retry timer runs, so the QP ends
 * in RETRY_EXC_ERR instead of waiting for ever. */
static inline int qp_send_blocked(const struct mrc_ep *ep, const struct qp *q)
{
    uint32_t planes = q->a.planes >= 32 ? ~0u : (1u << q->a.planes) - 1;
    return !(qp_usable_ports(ep, q) & planes) && (q->sq_cur != LOAD_ACQ(q->sq_tail) || q->cur_off);
}

/* How many completions wait in a CQ. */
static inline uint32_t cq_used(const struct cq *cq)
{
    uint32_t t = LOAD_ACQ(cq->tail), h = LOAD_ACQ(cq->head);
    return (t + cq->size - h) % cq->size;
}

/* Every line of q's state asked for at once: a packet or a turn of the
 * rotation reads a field here and there across it, and with thousands of
 * QPs each read would otherwise wait for the last. */
static inline void qp_prefetch(const struct qp *q)
{
    for (size_t off = 0; off < sizeof(*q); off += 64)
        __builtin_prefetch((const char *)q + off);
}

/* A QP's EVs on each plane. */
static inline uint32_t ev_per_plane(const struct qp *q) { return q->a.ev_count / q->a.planes; }
#endif
