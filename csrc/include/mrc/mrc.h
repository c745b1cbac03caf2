/*
 * mrc/mrc.h - the MRC application API: contexts, protection domains, memory
 * regions, completion queues, queue pairs, posting and polling, EVs and
 * events, ports and peers. What a program that uses MRC includes; libmrc
 * implements it (csrc/api/verbs.c, csrc/drivers/engine.c) and the Python package reads
 * the same declarations (csrc/build_dp.py, between CDEF BEGIN and CDEF END:
 * plain C, enums for constants). Every call returns 0 (or a count) or
 * -errno.
 *
 * Names and semantics follow libibverbs where the concept is the same
 * (PD, MR with lkey and rkey, CQ with a completion channel, QP states
 * RESET -> INIT -> RTR -> RTS -> ERROR, work requests and completions,
 * asynchronous events) and the OCP MRC API's concepts where MRC adds its
 * own (EVs and their states, planes, the window in units of 128 PSNs,
 * max_wimm, probes). Written for this project; docs/api.md has the map.
 */
#ifndef MRC_MRC_H
#define MRC_MRC_H

#include <stddef.h>
#include <stdint.h>

/* CDEF BEGIN */
const char *mrc_dp_version(void);

/* ------------------------------------------------------------------ limits
 * What the engine enforces; mrc_ctx_query_device reports them and Python
 * reads them from here (nothing is hand-copied). */
enum {
    MRC_MAX_SGE = 4,
    MRC_MAX_PLANES = 16,
    MRC_RETRY_FOREVER = 25,   /* exp_cnt this large: retry for ever */
    MRC_MPR_UNIT = 128,       /* PSNs per unit of a QP's window (mpr) */
    MRC_MAX_MPR = 64,         /* window, units of MRC_MPR_UNIT PSNs; a power of two */
    MRC_MAX_WIMM = 8192,      /* WRITE_IMMs outstanding (MRC_MAX_MPR x MRC_MPR_UNIT) */
    MRC_MAX_TIMEOUT = 24,     /* RTO = 1.024 us x 2^timeout, about 17 s */
    MRC_MAX_LINEAR_CNT = 7,
    MRC_MIN_MTU = 64,         /* payload bytes per packet */
    MRC_MAX_MTU = 8872,       /* 9000 less room for the headers */
    MRC_MAX_EV_COUNT = 4096,  /* EVs in a QP's rotation */
    MRC_MAX_SQ_DEPTH = 65535,
    MRC_MAX_PROBE_K = 255,
    MRC_MAX_QPS = 1048576,
    MRC_MAX_CQS = 64,
    MRC_MAX_PDS = 64,
    MRC_MAX_CQ_DEPTH = 4194304,
    MRC_MAX_RQ_DEPTH = 65535,
    MRC_MAX_EV_EVENT_DEPTH = 1048576,
    MRC_MAX_PORTS = 16,
    MRC_MAX_PEERS = 256,
    MRC_MAX_PATHS = 16,       /* destination addresses per peer and plane */
    MRC_PROBE_MAX = 1024,     /* EV probes in flight per context */
};

/* Device capability bits (mrc_query_device_ex). */
enum { MRC_CAP_TRIM_NACK = 1, MRC_CAP_DYNAMIC_MPR = 2, MRC_CAP_SVC_TIME = 4 };

/* ------------------------------------------------------------------ objects */
enum mrc_qp_state { MRC_QPS_RESET = 0, MRC_QPS_INIT = 1, MRC_QPS_RTR = 2, MRC_QPS_RTS = 3, MRC_QPS_ERROR = 4 };
enum mrc_wr_opcode { MRC_WR_WRITE = 0, MRC_WR_WRITE_IMM = 1 };
enum mrc_wc_opcode { MRC_WC_WRITE = 0, MRC_WC_RECV_WRITE_IMM = 1 };
enum mrc_wc_status {
    MRC_WC_SUCCESS = 0,
    MRC_WC_LOC_LEN_ERR = 1,
    MRC_WC_LOC_PROT_ERR = 2,
    MRC_WC_REM_ACCESS_ERR = 3,
    MRC_WC_RETRY_EXC_ERR = 4,
    MRC_WC_WR_FLUSH_ERR = 5,
    MRC_WC_REM_OP_ERR = 6,
};
enum mrc_access { MRC_ACCESS_LOCAL_WRITE = 1, MRC_ACCESS_REMOTE_WRITE = 2 };
/* EV states: GOOD, SKIP (pass over it for about one RTT after ECN or a
 * trim; reported as GOOD to the controller), ASSUMED_BAD (after a loss,
 * until probes succeed), DENIED (the controller), UNKNOWN (OCP: an
 * unpopulated entry). csrc/core/ev.c holds the transitions. */
enum mrc_ev_state { MRC_EV_GOOD = 0, MRC_EV_SKIP = 1, MRC_EV_ASSUMED_BAD = 2, MRC_EV_DENIED = 3, MRC_EV_UNKNOWN = 4 };

/* Why a received packet was dropped (counters, never a crash). */
enum mrc_drop {
    MRC_DROP_MALFORMED = 0,
    MRC_DROP_ICRC = 1,
    MRC_DROP_UNKNOWN_QP = 2,
    MRC_DROP_QP_STATE = 3,
    MRC_DROP_PSN_WINDOW = 4,
    MRC_DROP_RKEY = 5,
    MRC_DROP_RANGE = 6,
    MRC_DROP_DUPLICATE = 7,
    MRC_DROP_NO_RECV = 8,
    MRC_DROP_TRIMMED = 9,
    MRC_DROP_STALE_ACK = 10,
    MRC_DROP_STALE_PROBE = 11, /* an EV probe response nobody waits for (late, or never asked) */
    MRC_DROP_WRONG_PEER = 12,  /* not from the QP's connected peer, or for another connection */
    MRC_DROP_PKEY = 13,        /* another partition than the QP's (mrc_qp_attr.pkey) */
    MRC_DROP_AUTH = 14,        /* a secured QP's packet that does not verify (or is not secured), or the reverse */
    MRC_DROP_REPLAY = 15,      /* a secured packet whose number was seen, or is too old to tell */
    MRC_DROP_MOVED = 16,       /* a secured packet that came on another port (plane) than it was sealed for */
    MRC_DROP_NREASONS = 17,
};

/* The names of the values above (NULL for a value out of range). */
const char *mrc_qp_state_name(uint32_t state);
const char *mrc_ev_state_name(uint32_t state);
const char *mrc_wc_status_name(uint32_t status);
const char *mrc_event_name(uint32_t type);
const char *mrc_drop_name(uint32_t reason);
/* A work completion's status in words a person can act on ("the peer stopped answering: ..."), NULL out of range. */
const char *mrc_wc_status_str(uint32_t status);

struct mrc_sge { uint64_t addr; uint32_t length; uint32_t lkey; };

struct mrc_wr {
    uint64_t wr_id;
    uint8_t opcode;          /* MRC_WR_* */
    uint8_t num_sge;
    struct mrc_sge sg_list[4];
    uint64_t remote_addr;
    uint32_t rkey;
    uint32_t imm_data;
};

struct mrc_wc {
    uint64_t wr_id;
    uint32_t qpn;
    uint8_t status;          /* MRC_WC_* status */
    uint8_t opcode;          /* MRC_WC_* opcode */
    uint32_t byte_len;
    uint32_t imm_data;
};

/* NSCC parameters, OCP names (protocol.md section 5). Times in ns. */
struct mrc_cc_params {
    uint64_t base_rtt;
    uint64_t target_delay;
    uint64_t max_cwnd;
    uint64_t fi;             /* fair increase, bytes per adjustment */
    uint64_t fi_scale;       /* proportional increase scale (x / 1000) */
    uint64_t eta;            /* additive increase, bytes per adjustment */
    uint64_t gamma;          /* MD gain (x / 1000) */
    uint64_t max_md_jump;    /* smallest MD factor (x / 1000) */
    uint64_t qa_gate;
    uint64_t qa_threshold;
    uint64_t adjust_bytes_threshold;
    uint64_t adjust_period_threshold;
    uint32_t disable_qa;
    uint32_t algorithm;      /* enum mrc_cc_algorithm */
    uint32_t md_by_sample;   /* 0: the decrease follows the average delay (the OCP brief); 1: the
                              * delay of the ACK that brings it, as the UET reference simulator cuts */
};

/* A QP's congestion control (struct mrc_cc_params.algorithm); mrc_cc_algorithm_name names each. */
enum mrc_cc_algorithm { MRC_CC_NSCC = 0, MRC_CC_FIXED = 1, MRC_CC_NALGORITHMS = 2 };
const char *mrc_cc_algorithm_name(uint32_t algorithm); /* "nscc", "fixed"; NULL: no such */

struct mrc_qp_attr {
    uint32_t mpr;            /* window, units of MRC_MPR_UNIT PSNs */
    uint32_t max_wimm;
    uint32_t timeout;        /* RTO = 1.024 us x 2^timeout */
    uint32_t linear_cnt;
    uint32_t exp_cnt;        /* 25 = forever */
    uint32_t mtu;            /* payload bytes per packet */
    uint32_t ev_count;       /* EVs per QP, equal per plane */
    uint32_t ev_min_active;
    uint32_t ev_backup;      /* spare EVs per plane for replacement */
    uint32_t planes;
    uint32_t ack_bytes;      /* SACK every this many bytes (16 KiB) */
    uint32_t probe_k;        /* successful probes that restore an EV */
    uint64_t probe_interval_ns;
    uint64_t skip_ns;        /* how long SKIP lasts (about one RTT) */
    uint64_t reorder_ns;     /* reorder allowance of the loss detector */
    uint32_t sq_depth;
    uint32_t rq_depth;
    uint32_t send_cq;        /* the CQ of this QP's WRITE completions (0: the context's first CQ) */
    uint32_t recv_cq;        /* the CQ of its receive (WRITE_IMM) completions */
    uint32_t pd;             /* its protection domain: it reaches only regions of this PD (0: the first) */
    uint32_t pkey;           /* its partition (P_Key; 0: none). Set, its packets carry it and it takes only
                              * packets of the same partition (low 15 bits equal, one end a full member:
                              * bit 15), as InfiniBand's; others are dropped (MRC_DROP_PKEY) */
    struct mrc_cc_params cc;
};

/* What connection setup decides (mrc_qp_modify): at RTR the peer (index of
 * mrc_ctx_add_peer, or of the in-memory link), its QP and the PSN its first
 * packet will carry; at RTS the PSN of this QP's first packet. Initial PSNs
 * may be anything (the application picks them at random and exchanges them,
 * as it does the QP numbers). */
struct mrc_qp_conn { uint32_t dest_qpn; uint16_t peer; uint32_t rq_psn; uint32_t sq_psn; };

/* A context: its endpoint's sizes, and the ports it opens. */
struct mrc_ep_attr {
    uint32_t max_qps;
    uint32_t cq_depth;       /* depth of CQ 0, which every context has */
    uint32_t planes;
    uint32_t port_bitmap;    /* local planes up */
    uint32_t ev_event_depth;
    uint64_t seed;           /* 0: rkeys and QP numbers from the kernel's randomness; else from this (tests) */
};

struct mrc_qp_stats {
    uint64_t tx_packets, tx_bytes, rtx_packets, rtx_bytes, rx_packets, rx_bytes;
    uint64_t sacks_tx, sacks_rx, nacks_tx, nacks_rx, probes_tx, probes_rx;
    uint64_t losses, timeouts, ecn_marks, trims;
    uint64_t plane_tx[16];
    uint64_t cwnd, srtt_ns, inflight;
    uint32_t state, next_psn, una_psn, epsn, good_evs, bad_evs;
    /* the most retransmit timeouts in a row without progress, and the most
     * times the oldest unacknowledged packet was sent again: when a QP
     * stalls, they tell resends that went unanswered from resends never made */
    uint32_t retries_max, head_rtx_max;
    uint64_t rnr_naks;       /* NACK NO_RESOURCE: a WRITE_IMM found no receive posted (retried on the timer) */
    uint64_t min_rtt_ns;     /* the lowest RTT sample so far */
    uint64_t base_rtt_ns;    /* the base RTT NSCC works with: configured, or min_rtt_ns when longer */
    uint64_t tlp_probes;     /* tail loss probes: the last packet out sent again when nothing came back */
};

/* A CQ: its depth, completions waiting, and how many times a completion
 * found it full (it then waits in its QP until the application polls:
 * never lost; each time the CQ fills, an MRC_EVENT_CQ_ERR says so). */
struct mrc_cq_stats { uint32_t depth; uint32_t waiting; uint64_t overflow; };

/* What the endpoint could not do at once, counted (never lost in silence). */
struct mrc_ep_stats {
    uint64_t ctrl_ring_full;     /* SACKs, NACKs or probe answers not queued: control ring full */
    uint64_t ctrl_build_errors;  /* control packets that could not be built (never queued empty) */
    uint64_t ev_events_dropped;  /* EV events lost to a full EV event queue */
    uint64_t async_events_dropped;
    uint64_t cq_overflow;        /* completions that found their CQ full (all CQs) */
    uint64_t msg_len_mismatch;   /* messages whose packets placed another length than their RETH said */
};

struct mrc_device_attr {
    uint32_t ports, planes, max_qps, max_cqs, max_sge, max_mpr, mpr_granularity, max_wimm;
    uint32_t max_timeout, max_linear_cnt, max_exp_cnt, max_qp_hints, min_mtu, max_mtu, max_ev_count, caps;
};

struct mrc_ev_info { uint32_t ev; uint8_t state; uint8_t in_slot; uint16_t slot; };
/* Asynchronous events (ibv_get_async_event): a QP that fell into ERROR by
 * itself (info = the WC status of the failure), a local port (plane) going
 * down or up (info = plane), a peer reporting new port status (info = its
 * port bitmap), a CQ that filled up (info = the CQ number: completions wait
 * until it is polled). dropped = events lost before this one (ring full). */
enum mrc_event_type {
    MRC_EVENT_QP_FATAL = 1,
    MRC_EVENT_PORT_ERR = 2,
    MRC_EVENT_PORT_ACTIVE = 3,
    MRC_EVENT_PEER_PORTS = 4,
    MRC_EVENT_CQ_ERR = 5,
};
struct mrc_async_event { uint32_t type; uint32_t qpn; uint32_t info; uint32_t dropped; };
/* cause_ns: for a retirement by a loss, when the lost packet was sent (0 otherwise) */
struct mrc_ev_event { uint32_t qpn; uint32_t ev; uint8_t old_state; uint8_t new_state; uint64_t t_ns; uint32_t dropped;
                      uint64_t cause_ns; };

/* ------------------------------------------------------------- contexts
 * A context (OCP mrc_create_context) owns an endpoint (the sans-I/O core:
 * a NIC's worth of state) and, when it has ports, the raw sockets and the
 * engine thread that drives the endpoint (csrc/drivers/engine.c, which states the
 * locking contract). A context made with no ports is driven by hand: the
 * caller moves packets and time through the mrc_ep_* driver calls of
 * mrc_manual.h (the in-memory link and tests do). Every call here takes
 * the context's locks itself; they return 0 (or a count) or -errno. */
struct mrc_ctx;

struct mrc_port_cfg {
    uint32_t ifindex;
    uint32_t plane;
    uint8_t src_mac[6];
    uint8_t dst_mac[6];      /* next hop, from the kernel's neighbour table */
    uint8_t src_addr[16];    /* the port's IPv6 address */
};

void mrc_qp_attr_default(struct mrc_qp_attr *a);
/* The EVs a QP with these attributes holds: its rotation's ev_count and ev_backup spares a plane. */
uint32_t mrc_qp_ev_total(const struct mrc_qp_attr *a);
size_t mrc_qp_state_bytes(const struct mrc_qp_attr *a);
int mrc_ctx_create(const struct mrc_ep_attr *attr, const struct mrc_port_cfg *ports, uint32_t nports,
                   struct mrc_ctx **out);
/* Callers blocked in mrc_ctx_ep_batch_send_wait return -ECANCELED and new
 * ones are refused; call before mrc_ctx_destroy when other threads may still
 * be inside a waiting call (destroy waits for them to leave). */
void mrc_ctx_cancel(struct mrc_ctx *c);
void mrc_ctx_destroy(struct mrc_ctx *c);
int mrc_ctx_query_device(struct mrc_ctx *c, struct mrc_device_attr *out);
int mrc_ctx_stats(struct mrc_ctx *c, struct mrc_ep_stats *st);
int mrc_ctx_drops(struct mrc_ctx *c, uint64_t *counts, uint32_t n);

/* Protection domains: a region and a QP belong to one; a QP reaches only the
 * regions of its own (PD 0 exists from the start). */
int mrc_pd_alloc(struct mrc_ctx *c, uint32_t *pdn);
int mrc_pd_dealloc(struct mrc_ctx *c, uint32_t pdn);  /* -EBUSY while a region or QP uses it */
/* Keys are 32 unpredictable bits (a keyed permutation of the registration
 * count: a deregistered key is not handed out again for 2^32 registrations).
 * A packet that names a wrong key, or writes outside its region, ends the QP
 * it came to (MRC_EVENT_QP_FATAL, MRC_WC_LOC_PROT_ERR), as in InfiniBand. */
int mrc_mr_reg(struct mrc_ctx *c, uint32_t pdn, void *addr, uint64_t length, uint32_t access, uint32_t *lkey,
               uint32_t *rkey);
int mrc_mr_dereg(struct mrc_ctx *c, uint32_t lkey);  /* -EBUSY while a queued WR reads from it */
int mrc_cq_create(struct mrc_ctx *c, uint32_t depth, uint32_t *cqn);
int mrc_cq_destroy(struct mrc_ctx *c, uint32_t cqn);  /* -EBUSY while a QP uses it */
int mrc_cq_query(struct mrc_ctx *c, uint32_t cqn, struct mrc_cq_stats *st);
/* A CQ's completion channel: an eventfd that becomes readable when
 * completions were added (-EOPNOTSUPP for a context driven by hand). */
int mrc_cq_fd(struct mrc_ctx *c, uint32_t cqn);
int mrc_qp_create(struct mrc_ctx *c, const struct mrc_qp_attr *attr, uint32_t *qpn);
int mrc_qp_destroy(struct mrc_ctx *c, uint32_t qpn);
/* RESET -> INIT -> RTR (conn: peer, dest_qpn, rq_psn) -> RTS (conn: sq_psn);
 * any -> ERROR; any -> RESET (the QP starts afresh). QP numbers are 24
 * unpredictable bits, none again for 2^24 QPs. */
int mrc_qp_modify(struct mrc_ctx *c, uint32_t qpn, uint32_t state, const struct mrc_qp_conn *conn);
int mrc_qp_query(struct mrc_ctx *c, uint32_t qpn, struct mrc_qp_stats *st);
/* The numbers of the context's QPs (at most max written): how many there are. */
int mrc_ctx_qp_list(struct mrc_ctx *c, uint32_t *qpns, uint32_t max);
/* The enum mrc_security of the keys the QP holds (MRC_SEC_OFF: none, ever), or -ENOENT. */
int mrc_qp_security(struct mrc_ctx *c, uint32_t qpn);
/* The fast path: posting and polling never wait for the engine thread. */
int mrc_post_write(struct mrc_ctx *c, uint32_t qpn, const struct mrc_wr *wr, uint32_t n);
int mrc_post_recv(struct mrc_ctx *c, uint32_t qpn, const uint64_t *wr_ids, uint32_t n);
int mrc_poll_cq(struct mrc_ctx *c, uint32_t cqn, struct mrc_wc *wc, uint32_t max);

/* EVs of a QP, and their state changes (the controller's view). */
int mrc_ev_list(struct mrc_ctx *c, uint32_t qpn, struct mrc_ev_info *out, uint32_t max);
int mrc_ev_set_state(struct mrc_ctx *c, uint32_t qpn, uint32_t ev, uint32_t state); /* GOOD or DENIED */
/* Tell a QP which of its EVs share a path: on plane p, EVs whose entropy is
 * equal modulo npaths[p] go to the same destination (the I/O layer sends EV
 * e to paths[e % npaths]; 0: unknown, every EV its own path). A loss then
 * retires the lost EV and its aliases at once; each comes back on its own
 * probes. */
int mrc_ev_set_paths(struct mrc_ctx *c, uint32_t qpn, const uint32_t *npaths, uint32_t nplanes);
int mrc_ev_poll_events(struct mrc_ctx *c, struct mrc_ev_event *out, uint32_t max);
int mrc_async_events(struct mrc_ctx *c, struct mrc_async_event *out, uint32_t max);

/* ---------------------------------------------------- authenticated MRC
 * A QP's security mode (protocol.md section 8): OFF (as InfiniBand: nothing
 * but unpredictable numbers), AUTH (every packet of the QP carries an
 * AES-256-GCM tag over all of it) or ENCRYPT (the payload is encrypted too,
 * the headers authenticated). A secured packet carries its key id and a
 * 64-bit packet number, from which its nonce is made (never twice with one
 * key); the receiver keeps a window of the numbers seen. A packet that
 * does not verify is dropped and counted (MRC_DROP_AUTH, MRC_DROP_REPLAY)
 * and nothing else happens; in a secured mode a trimmed packet cannot be
 * verified and is dropped too (the loss is then found as any other). */
enum mrc_security { MRC_SEC_OFF = 0, MRC_SEC_AUTH = 1, MRC_SEC_ENCRYPT = 2 };
/* One QP's keys, one per direction (mrc_sec_derive makes them). */
struct mrc_qp_keys {
    uint32_t mode;           /* enum mrc_security */
    uint32_t rotate_every;   /* packets sent under one key before the next (0: 2^24, inside AES-GCM's limits) */
    uint8_t tx_key[32], tx_iv[12];
    uint8_t rx_key[32], rx_iv[12];
};
/* Secure a QP (in RESET or INIT, before it connects); mode OFF takes the
 * keys away. -EOPNOTSUPP without AES-256-GCM in libcrypto. */
int mrc_qp_set_keys(struct mrc_ctx *c, uint32_t qpn, const struct mrc_qp_keys *k);
/* An ephemeral X25519 key pair (connection setup: each side makes one). */
int mrc_sec_keypair(uint8_t priv[32], uint8_t pub[32]);
/* The keys of one QP pair: HKDF-SHA256 over the X25519 secret of priv and
 * peer_pub, salted with the pre-shared key, bound to `transcript` (what
 * both sides saw of the setup: nonces, public keys, QP numbers). The
 * initiator's tx is the responder's rx. */
int mrc_sec_derive(const uint8_t priv[32], const uint8_t peer_pub[32], const uint8_t *psk, uint32_t psk_len,
                   const uint8_t *transcript, uint32_t transcript_len, uint32_t initiator, uint32_t mode,
                   struct mrc_qp_keys *out);
/* The primitives connection setup seals its messages with under a
 * pre-shared key: HKDF-SHA256 (out_len at most 255 x 32), and AES-256-GCM
 * of len bytes into out (enc: len + 16 bytes, the tag last; open: len
 * counts the tag, out gets len - 16 bytes, -EBADMSG when it does not verify). */
int mrc_sec_hkdf(const uint8_t *salt, uint32_t salt_len, const uint8_t *ikm, uint32_t ikm_len, const uint8_t *info,
                 uint32_t info_len, uint8_t *out, uint32_t out_len);
int mrc_sec_aead(uint32_t enc, const uint8_t key[32], const uint8_t nonce[12], const uint8_t *aad, uint32_t aad_len,
                 const uint8_t *in, uint32_t len, uint8_t *out);

/* ---------------------------------------------- a context with ports
 * How to reach one peer: per plane, its final address (for the UDP
 * checksum and to recognise its packets) and the destination addresses of
 * the paths (uSID containers, or just the final address on a plain network). */
struct mrc_peer_plane { uint8_t final_addr[16]; uint8_t paths[16][16]; uint32_t npaths; };
struct mrc_peer_cfg { struct mrc_peer_plane plane[16]; uint32_t nplanes; };

struct mrc_port_stats {
    uint64_t tx_packets, tx_bytes, rx_packets, rx_bytes, tx_errors, rx_foreign, tx_no_path, rx_batches, tx_batches;
    uint64_t rx_ring_drops; /* frames the kernel dropped because the rx ring was full (PACKET_STATISTICS) */
    uint64_t carrier_downs; /* times the link lost carrier or went down (rtnetlink) */
    uint32_t carrier, admin_up; /* link has carrier; the controller enables the port: both make it up */
};

int mrc_ctx_add_peer(struct mrc_ctx *c, const struct mrc_peer_cfg *peer);
/* Forget a peer (its slot may be reused): -EBUSY while a QP out of RESET is
 * connected through it, -ENOENT if there is no such peer. */
int mrc_ctx_del_peer(struct mrc_ctx *c, uint32_t peer);
int mrc_ctx_start(struct mrc_ctx *c);
/* How long the idle engine thread keeps polling before it sleeps (default
 * 200 us: waking a sleeping thread costs tens of us on a VM). */
void mrc_ctx_set_spin(struct mrc_ctx *c, uint64_t ns);
/* mrc_ep_set_port_rate for a context's port, under its lock. */
int mrc_ctx_set_port_rate(struct mrc_ctx *c, uint32_t plane, uint64_t rate_bps);
/* Send up to k (2-8) packets of one path and size per kernel buffer: a UDP
 * socket with UDP_SEGMENT, which needs each port's egress program
 * (csrc/bpf/host_gso.bpf.c; mrc fabric puts it on every host port). 1, the
 * default: one packet per buffer through the raw socket. Every context takes
 * such buffers whatever its own k. -EINVAL beyond 8, -EOPNOTSUPP for a
 * context without ports. docs/engine.md, "Buffers of k packets". */
int mrc_ctx_set_gso(struct mrc_ctx *c, uint32_t k);
/* Buffers of more than one packet a port sent and took. */
int mrc_ctx_port_gso(struct mrc_ctx *c, uint32_t port, uint64_t *tx_buffers, uint64_t *rx_buffers);
/* Progress the NIC once from the calling thread (receive, complete, send)
 * unless the engine thread is doing so right now: a thread that waits for a
 * completion calls it instead of yielding. Returns how much work it did,
 * -EOPNOTSUPP for a context without an engine thread. */
int mrc_ctx_progress(struct mrc_ctx *c);
/* The calling thread stops calling mrc_ctx_progress (it is about to block):
 * the engine thread takes the ports back at once rather than PROGRESS_NS
 * (100 us) after the last call. */
void mrc_ctx_progress_done(struct mrc_ctx *c);
/* A port's admin state (mrc_ctl_modify_port): the port is up when it is
 * enabled and its link has carrier (the engine follows carrier by itself). */
int mrc_ctx_port_admin(struct mrc_ctx *c, uint32_t plane, int up);
int mrc_ctx_port_stats(struct mrc_ctx *c, uint32_t port, struct mrc_port_stats *st);
/* An eventfd that becomes readable when asynchronous events are waiting. */
int mrc_ctx_async_fd(struct mrc_ctx *c);
/* Fault a buffer's pages in for writing (madvise MADV_POPULATE_WRITE), as
 * memory registration pins pages on a NIC; 0 or -errno (contents unchanged). */
int mrc_ctx_populate(void *addr, uint64_t len);
uint64_t mrc_ctx_now_ns(void);
/* The CPU time the context's engine thread has used (user and system, its
 * thread CPU clock) and its thread id (for /proc/self/task/<tid>): 0, or
 * -ENOENT for a context whose thread is not running. */
int mrc_ctx_engine_cpu(struct mrc_ctx *c, uint64_t *cpu_ns, int32_t *tid);
/* mrc_ctl_ep_batch_send_wait for EV probes: send one probe per request and
 * wait until every one is answered or timeout_ns has passed. out[i].status:
 * 0 answered (port = local plane the answer arrived on, rtt_ns), -ETIMEDOUT,
 * -EHOSTUNREACH (no such peer or no path on that plane), -ENETDOWN (plane
 * down here), -EINVAL. corrected is 0: the responder's service time is not
 * reported (device caps SVC_TIME false). Returns how many were answered, or
 * -errno (-ECANCELED: mrc_ctx_cancel cut the wait short). Blocks the calling
 * thread (not the engine). */
struct mrc_probe_req { uint32_t ev; uint16_t peer; };
struct mrc_probe_resp { int32_t status; uint32_t ev; uint16_t peer; uint8_t port; uint8_t corrected; uint64_t rtt_ns; };
int mrc_ctx_ep_batch_send_wait(struct mrc_ctx *c, const struct mrc_probe_req *req, uint32_t n, uint64_t timeout_ns,
                               struct mrc_probe_resp *out);
/* CDEF END */

/* ------------------------------------- opening by name, and connecting
 * What a C program uses where Python has mrc.ports, mrc.paths and mrc.cm
 * (csrc/app/; Python does not wrap these). A failed call here also leaves a
 * sentence saying what went wrong and what to do in mrc_last_error(). */

/* The sentence of the last failure of a call in this section, in this thread
 * ("" when there was none). Valid until the thread's next such call. */
const char *mrc_last_error(void);

/* Which ports a context opens: `ports` names them ("eth1,eth2": planes 0,
 * 1, ... in that order, or "eth1:0,eth3:2"); when it is NULL the topology
 * file `topology` (JSON, docs/topology.md; NULL: $MRC_TOPOLOGY) lists them
 * for host `host` (NULL: $MRC_HOST, else the host whose port addresses this
 * network namespace has). 0 sizes take the defaults (1024 QPs, CQ 0 of
 * 65536). */
struct mrc_open_attr {
    const char *ports;
    const char *topology;
    const char *host;
    uint32_t max_qps;
    uint32_t cq_depth;
};
/* Read each port's index, MAC, global IPv6 address, MTU and next hop from
 * the kernel (rtnetlink), open them (raw sockets: CAP_NET_RAW) and start the
 * engine thread. Destroy the context with mrc_ctx_destroy. */
int mrc_ctx_open(const struct mrc_open_attr *attr, struct mrc_ctx **out);
/* mrc_qp_attr_default with what a context opened by name runs: the
 * software data path's timing and NSCC settings (those of mrc.verbs), its
 * planes, and the largest payload its ports' MTU carries. */
int mrc_ctx_qp_attr_default(struct mrc_ctx *c, struct mrc_qp_attr *a);
/* The ports of a context opened by name, by plane: interface, global
 * address, MAC, MTU. Returns how many (at most max). */
struct mrc_port_info { char ifname[16]; uint32_t plane, mtu; uint8_t addr[16], mac[6]; };
int mrc_ctx_ports(struct mrc_ctx *c, struct mrc_port_info *out, uint32_t max);

/* One side of a connection: its QP, the PSN of its first packet (0: the
 * first call that needs it, mrc_qp_connect or mrc_cm_*, picks one at
 * random and writes it here) and a region the other side may write (0s:
 * none). */
struct mrc_local {
    uint32_t qpn;
    uint32_t psn;
    uint64_t addr;
    uint32_t rkey;
    uint64_t length;
    uint32_t security;       /* enum mrc_security the connector asks for (the listener's is its own) */
};
/* The other side, as the exchange gives it: its QP, first PSN and region,
 * its host and topology names ("" when it gave none), and how to reach it
 * (per plane its port address and the paths this host's topology knows
 * toward it, or the port address alone). */
struct mrc_remote {
    uint32_t qpn, psn, rkey;
    uint64_t addr, length;
    char host[65], topology[65];
    struct mrc_peer_cfg reach;
};
/* RESET -> INIT -> RTR -> RTS toward `peer`: registers its paths (one peer
 * slot per distinct peer, kept for the context's life), tells the QP which
 * EVs share a path, and starts its PSNs at mine->psn and peer->psn. */
int mrc_qp_connect(struct mrc_ctx *c, struct mrc_local *mine, const struct mrc_remote *peer);
/* The first half of mrc_qp_connect, as verbs moves a QP: RESET -> INIT -> RTR
 * toward `peer` (its paths, its first PSN): the QP takes the peer's packets
 * from now on. mrc_qp_modify(RTS) with the first PSN of ours finishes it. */
int mrc_qp_connect_rtr(struct mrc_ctx *c, uint32_t qpn, const struct mrc_remote *peer);
/* The host of the context's topology that owns port address `addr` (on any
 * plane), as a peer to connect to: out->host, out->topology and out->reach
 * (each plane's port address and this host's paths toward it); the QP, PSN
 * and region fields are left 0. -ENOENT: no host has that address (or the
 * context has no topology). What a RoCE GID names, for the verbs layer. */
int mrc_ctx_resolve_addr(struct mrc_ctx *c, const uint8_t addr[16], struct mrc_remote *out);

/* Connection setup over TCP (the management network), the exchange of
 * mrc.cm: JSON lines of at most 64 KiB; the listener greets with a fresh
 * challenge, the connector sends its QP ("info") and, when the listener
 * holds a pre-shared key, proves it holds it too (HMAC-SHA256); the
 * listener connects its QP and answers, proven the same way. Every step
 * waits at most timeout_ms (0: 10 s). A C program and `mrc perf` interoperate. */
struct mrc_cm;
struct mrc_cm_listener;
#define MRC_CM_PORT 18515
/* Listen on [addr]:port (NULL: every address); psk_file: only clients that
 * prove they hold the key in it (NULL: anyone). */
int mrc_cm_listen(const char *addr, uint16_t port, const char *psk_file, struct mrc_cm_listener **out);
int mrc_cm_listener_fd(struct mrc_cm_listener *l);
void mrc_cm_listener_close(struct mrc_cm_listener *l);
/* The next client whose hello is well formed (and proven): its side in
 * *peer, its whole hello readable with mrc_cm_get. A bad client is told
 * why and refused: the call returns -errno and the listener goes on. */
int mrc_cm_accept(struct mrc_cm_listener *l, struct mrc_ctx *c, int timeout_ms, struct mrc_cm **out,
                  struct mrc_remote *peer);
/* Answer an accepted client with our side (connect our QP first: the
 * client sends as soon as it reads this). `extra`: more members for the
 * message, JSON text such as "\"job\":7" (NULL: none). */
int mrc_cm_reply(struct mrc_cm *cm, struct mrc_ctx *c, struct mrc_local *mine, const char *extra);
/* Connect to the listener at `server` (an IPv6 address, or a host of the
 * context's topology: its management address), send our side (and
 * `extra`), wait for its answer: its side in *peer. */
int mrc_cm_connect(struct mrc_ctx *c, const char *server, uint16_t port, const char *psk_file,
                   struct mrc_local *mine, const char *extra, int timeout_ms, struct mrc_cm **out,
                   struct mrc_remote *peer);
/* Authenticated MRC (mrc_security): the mode this listener's QPs run; a
 * client asking for another is refused. A secured mode needs the key. */
int mrc_cm_listener_security(struct mrc_cm_listener *l, uint32_t mode);
/* mrc_qp_connect, under the keys the setup derived for this QP pair when
 * it is secured (an X25519 exchange under the pre-shared key, as mrc.cm's):
 * what a program calls instead of mrc_qp_connect after mrc_cm_connect or
 * mrc_cm_accept. */
int mrc_cm_qp_connect(struct mrc_cm *cm, struct mrc_ctx *c, struct mrc_local *mine, const struct mrc_remote *peer);
/* After setup the channel carries the application's own JSON objects. */
int mrc_cm_send(struct mrc_cm *cm, const char *json_object);
/* The next message (its length), or -errno: -ETIMEDOUT, -ECONNRESET, -EPROTO
 * (not a JSON object), or the peer's refusal ("error": mrc_last_error). */
int mrc_cm_recv(struct mrc_cm *cm, int timeout_ms);
/* A member of the last message received, by dotted path ("params.max_size"):
 * an unsigned integer, or a boolean as 0 or 1. -ENOENT when it is absent,
 * -EINVAL when it is something else. */
int mrc_cm_get(struct mrc_cm *cm, const char *path, uint64_t *value);
int mrc_cm_fd(struct mrc_cm *cm);
void mrc_cm_close(struct mrc_cm *cm);
/* SHA-256 of a buffer as 64 hex digits and a NUL (what `mrc perf server`
 * checks a written region against: {"check": length, "sha256": ...}). */
void mrc_sha256_hex(const void *data, size_t len, char out[65]);

#endif
