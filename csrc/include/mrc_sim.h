/*
 * mrc_sim.h - the fabric simulator (csrc/sim/simfab.c): whole contexts on a
 * simulated multi-plane Clos in virtual time (docs/sim.md). Read by
 * csrc/build_dp.py after mrc_manual.h, with the same rules: plain C between
 * CDEF BEGIN and CDEF END, 0 or -errno.
 */
#ifndef MRC_SIM_H
#define MRC_SIM_H

#include "mrc_manual.h"

/* CDEF BEGIN */
/* ------------------------------------------------ the RoCEv2 model
 * What MRC is measured against (csrc/sim/roce.c; docs/sim.md, "RoCEv2"): one RC queue pair as a
 * RoCEv2 NIC runs it, go-back-N with the verbs retry timer and DCQCN; and what its fabric does:
 * an ECMP hash per switch, ECMP groups that drop a failed member only once routing converged,
 * PFC's pause and resume on a port. Sans-I/O, as the engine: the caller moves the packets; time
 * in ns. PSNs count packets from 0 in 64 bits (the wire's 24 bits wrap; the model needs no wire). */
enum { MRC_ROCE_MSGS = 64, MRC_ROCE_GROUP_MAX = 64 };
enum mrc_roce_state { MRC_ROCE_RTS = 0, MRC_ROCE_ERROR = 1 };
enum mrc_roce_stage { MRC_ROCE_LINE = 0, MRC_ROCE_FAST_RECOVERY = 1, MRC_ROCE_ADDITIVE = 2, MRC_ROCE_HYPER = 3 };
enum mrc_roce_reply_kind { MRC_ROCE_NONE = 0, MRC_ROCE_ACK = 1, MRC_ROCE_NAK = 2 };
struct mrc_roce_cfg {
    uint64_t line_bps;     /* the NIC port's rate: where DCQCN starts and its ceiling */
    uint32_t mtu;          /* payload bytes per packet */
    uint32_t wire_extra;   /* bytes a packet takes on the wire beyond its payload */
    uint32_t timeout;      /* verbs' timeout: the local ACK timeout is 4.096 us << timeout (1-31) */
    uint32_t retry_cnt;    /* retries after a timeout or a NAK before the QP goes to ERROR (0-7) */
    uint32_t ack_every;    /* the responder ACKs every ack_every packets and each message's last (0: 1) */
    uint32_t dcqcn;        /* 0: line rate always; 1: DCQCN's reaction point */
    /* DCQCN, 0 for the default (docs/sim.md says where each comes from) */
    double g;              /* alpha's gain (1/256) */
    uint64_t alpha_ns;     /* alpha decays by (1 - g) for each alpha_ns without a CNP (55 us) */
    uint64_t timer_ns;     /* the rate-increase timer (55 us) */
    uint64_t byte_b;       /* the rate-increase byte counter (10 MB) */
    uint32_t f;            /* increase steps in fast recovery (5) */
    uint64_t rai_bps;      /* additive increase step (40 Mb/s) */
    uint64_t rhai_bps;     /* hyper increase step (400 Mb/s) */
    uint64_t min_bps;      /* the rate's floor (line / 1000) */
    uint64_t cnp_ns;       /* the responder sends a QP at most one CNP this often (50 us) */
};
/* The requester: posted messages go as packets of mtu bytes at its rate, oldest first. */
struct mrc_roce_qp {
    struct mrc_roce_cfg c;
    uint32_t state;
    uint64_t una, nxt, high, end; /* oldest unacknowledged, next to send, one past the highest sent, posted */
    uint64_t msg_end[MRC_ROCE_MSGS]; /* each message in flight: one past its last PSN (a ring, oldest at head) */
    uint32_t msg_tail[MRC_ROCE_MSGS]; /* and its last packet's bytes */
    uint32_t head, nmsgs, retries;
    uint32_t in_retry;     /* a retry began (NAK or timeout) and no ACK has moved una since */
    uint64_t rto_at;       /* the retry timer (0: off) */
    uint64_t next_tx;      /* the rate limiter: no packet before this */
    /* DCQCN's reaction point */
    double rc, rt, alpha;  /* current and target rate (b/s), alpha */
    uint64_t alpha_at, timer_at, bytes; /* the next alpha decay and timer step; bytes toward the counter */
    uint32_t t_count, bc_count, stage;  /* timer and byte-counter steps since the last decrease */
    /* counters */
    uint64_t sent, resent, timeouts, naks, cnps, decreases, done_msgs, done_bytes, error_at;
    uint64_t done_end;     /* one past the last PSN of the last message completed */
};
struct mrc_roce_tx { uint64_t psn; uint32_t bytes; uint32_t last; uint32_t retx; };
/* The responder: takes PSNs in order only. */
struct mrc_roce_resp {
    uint64_t epsn;         /* the next PSN it takes */
    uint32_t since_ack, nak_sent; /* nak_sent: a NAK for epsn went; no other until epsn moves */
    uint64_t cnp_at;       /* no CNP before this */
    uint64_t taken, dups, out_of_order, acks, naks, cnps;
};
struct mrc_roce_reply { uint32_t kind; uint32_t cnp; uint64_t psn; }; /* ACK: all through psn; NAK: expects psn */
int mrc_roce_qp_init(struct mrc_roce_qp *q, const struct mrc_roce_cfg *c); /* -EINVAL: c out of range */
/* A WRITE of bytes (0 is one empty packet); -ENOSPC with MRC_ROCE_MSGS in flight, -EIO in ERROR. */
int mrc_roce_post(struct mrc_roce_qp *q, uint64_t bytes);
/* The timers due by now (the retry timeout, DCQCN's alpha and rate steps): 0, or -EIO in ERROR. */
int mrc_roce_timers(struct mrc_roce_qp *q, uint64_t now);
/* mrc_roce_timers, then the packet to send now:
 * 1 with *out, 0 when none may go now, -EIO in ERROR. */
int mrc_roce_next_tx(struct mrc_roce_qp *q, uint64_t now, struct mrc_roce_tx *out);
/* When the requester next has something to do (a packet the rate allows, a timer): UINT64_MAX none. */
uint64_t mrc_roce_next_event(const struct mrc_roce_qp *q);
void mrc_roce_on_reply(struct mrc_roce_qp *q, const struct mrc_roce_reply *r, uint64_t now);
void mrc_roce_on_cnp(struct mrc_roce_qp *q, uint64_t now);
/* A data packet at the responder: 1 when taken (placed), 0 when dropped; *out what goes back. */
int mrc_roce_resp_rx(struct mrc_roce_resp *r, const struct mrc_roce_cfg *c, uint64_t psn, uint32_t last, uint32_t ce,
                     uint64_t now, struct mrc_roce_reply *out);

/* A switch's ECMP: the 5-tuple's hash under the switch's seed (CRC-32C, as switch ASICs hash),
 * and a group of next hops of which routing keeps a member's old state for delay_ns after a
 * change (a failed member is still chosen, and black-holes, until routing converged). */
uint32_t mrc_roce_ecmp_hash(uint32_t seed, const uint8_t *src16, const uint8_t *dst16, uint16_t sport, uint16_t dport);
struct mrc_roce_group {
    uint32_t n;
    uint64_t delay_ns;
    uint8_t up[MRC_ROCE_GROUP_MAX];
    uint64_t changed_at[MRC_ROCE_GROUP_MAX]; /* UINT64_MAX: never */
};
int mrc_roce_group_init(struct mrc_roce_group *g, uint32_t n, uint64_t delay_ns); /* all up; -EINVAL */
void mrc_roce_group_set(struct mrc_roce_group *g, uint32_t member, uint32_t up, uint64_t now);
int mrc_roce_group_pick(const struct mrc_roce_group *g, uint32_t hash, uint64_t now); /* member, -1: none routed */

/* PFC on one ingress port: pause the sender upstream above xoff bytes, resume at or below xon. */
struct mrc_roce_pfc { uint64_t xoff, xon, bytes; uint32_t paused; uint64_t pauses; };
/* The port's ingress holds delta more (or fewer) bytes: 1 send PAUSE now, -1 send RESUME, 0 neither. */
int mrc_roce_pfc_add(struct mrc_roce_pfc *p, int64_t delta);
/* ------------------------------------------------ the fabric simulator
 * H hosts x P planes, each plane a 2-tier Clos (L T0 leaves, S T1 spines),
 * in virtual time (csrc/sim/simfab.c; docs/sim.md). Every host is a context
 * driven by hand with an application of WRITE flows in C; every switch
 * forwards on the uSID destination as the kernel's End with next-CSID does
 * (the address plan of mrc.fabric.topology: host uSID kinds 0xB-0xE carry
 * host bits 8-9; past MRC_FAB_NAMED_HOSTS hosts the last uSID numbers the
 * host's port on its leaf instead) and queues at its egress ports with the rules of the
 * fabric's BPF queues. Deterministic for a seed. Links are numbered:
 * host link (h, p) = p * H + h; leaf-spine link (p, l, s) =
 * P * H + (p * L + l) * S + s. */
/* Bytes a packet takes on a simulated link beyond the MRC packet: Ethernet
 * 14, IPv6 40, UDP 8, FCS 4, preamble and inter-frame gap 20. */
enum { MRC_FAB_WIRE_EXTRA = 86 };
/* Hosts: 2 to MRC_FAB_MAX_HOSTS, at most MRC_FAB_LEAF_HOSTS under one leaf
 * (the four host kinds x 256); up to MRC_FAB_NAMED_HOSTS, host uSIDs name
 * hosts, as on the namespace fabric; past it, ports on their leaf. */
enum { MRC_FAB_NAMED_HOSTS = 1024, MRC_FAB_LEAF_HOSTS = 1024, MRC_FAB_MAX_HOSTS = 8192 };
struct mrc_fab_cfg {
    uint32_t hosts, planes, leaves, spines;
    uint64_t rate_bps;       /* every link and NIC port, each direction */
    uint64_t hop_ns;         /* per link: propagation and switching */
    uint32_t buffer_bytes;   /* per switch egress port: drop above (0: never) */
    uint32_t ecn_bytes;      /* mark CE above (0: never) */
    uint32_t trim_bytes;     /* trim MRC data above (0: never) */
    uint32_t max_qps;        /* per host */
    uint32_t cq_depth;
    uint64_t bucket_ns;      /* time series resolution */
    uint64_t seed;
    uint32_t unpaced;        /* 0 or 1: NICs do not pace their ports (the engine fills an 8-frame NIC queue,
                              * any plane) */
    /* the transport every host runs: MRC (its engine), or the RoCEv2 model above with roce_qps QPs per
     * flow, QP j of flow i on plane (i + j) % planes (WRITEs to the QPs in turn, or split over them: a WRITE
     * is done, or has arrived, when every part has), each packet's spine picked by the leaf's ECMP over
     * the spines routing has, routing seeing a link's change converge_ns late (simfab_roce.c) */
    uint32_t transport;      /* MRC_FAB_MRC or MRC_FAB_ROCE */
    uint32_t roce_qps;       /* 1 to MRC_FAB_ROCE_QPS */
    uint32_t roce_split;     /* 0: WRITEs go to the QPs in turn; 1: each WRITE in roce_qps equal parts, one a QP */
    uint64_t converge_ns;
    struct mrc_roce_cfg roce; /* line_bps and mtu: the fabric's and the QP attribute's when 0 */
    /* PFC (RoCE only; 0: off): a switch pauses the port upstream of one of its ingresses when more than
     * pfc_xoff bytes that came in through it are queued in the switch, and resumes it at pfc_xon; the
     * frames take a hop's delay; a paused port finishes the packet on its wire and holds the rest */
    uint64_t pfc_xoff, pfc_xon;
};
enum { MRC_FAB_MRC = 0, MRC_FAB_ROCE = 1, MRC_FAB_ROCE_QPS = 64 };
/* What the tests check the simulator with, set before its first run (mrc_fab_set_checks); none changes
 * what a run gives. */
struct mrc_fab_checks {
    uint32_t check_times;    /* 0 or 1: every NIC's kept QP times checked at each wake (mrc_ep_check_times) */
    uint32_t fill;           /* 0-255: the byte the hosts' region holds, so every payload (0: zeros, which
                              * packets in flight do not carry; another: every byte is carried) */
    uint32_t heap_only;      /* 0 or 1: every event on the heap, none on the calendar in front of it (the
                              * events run in the same order either way) */
};
struct mrc_fab_flow {
    uint32_t src, dst;
    uint64_t bytes;          /* to write in all */
    uint32_t msg;            /* per WRITE */
    uint32_t depth;          /* WRITEs in flight */
    uint64_t start_ns;
    uint32_t single_path;    /* one EV per plane (so one hashed spine), as ECMP places a RoCE flow per port */
};
enum mrc_fab_tier_id { MRC_FAB_NIC = 0, MRC_FAB_LEAF_UP = 1, MRC_FAB_SPINE_DOWN = 2, MRC_FAB_LEAF_DOWN = 3 };
/* packets and bytes a tier's ports took in; of those offered, marked, trimmed, dropped (buffer),
 * down_dropped (refused: the port's link was down); cut: taken in, then lost when the link failed */
struct mrc_fab_tier {
    uint64_t packets, bytes, marked, trimmed, dropped, down_dropped, cut, hwm_bytes;
    uint64_t pauses, paused_ns; /* PFC: times a port of the tier was paused, and for how long in all */
};
struct mrc_fab_stats {
    uint64_t now_ns, events, sent, delivered, no_route, flows_done, buckets;
    uint64_t done_bytes, late_times; /* WRITEs completed (bytes); check_times: QPs found late (0 always) */
    struct mrc_fab_tier tier[4];
    /* the simulator's own memory (bytes): packets (as many as were ever in flight at once, each kept
     * for reuse), the event heap, and the fabric's tables (ports, hosts, the region payloads come from) */
    uint64_t packet_bytes, event_bytes, table_bytes;
};
struct mrc_fab_flow_stats {
    uint32_t src, dst, qpn, errors;
    uint64_t bytes, done, msgs, start_ns, end_ns, first_ns, max_gap_ns, max_gap_end_ns;
    uint64_t arrived, arrived_ns; /* a collective's flow: WRITE_IMMs its receiver got, and when the last came */
};
struct mrc_fab;
int mrc_fab_create(const struct mrc_fab_cfg *cfg, const struct mrc_qp_attr *qp, struct mrc_fab **out);
void mrc_fab_destroy(struct mrc_fab *f);
/* The tests' checks (struct mrc_fab_checks); -EINVAL when out of range, -EBUSY once the fabric ran. */
int mrc_fab_set_checks(struct mrc_fab *f, const struct mrc_fab_checks *k);
int mrc_fab_add_flow(struct mrc_fab *f, const struct mrc_fab_flow *fl);      /* the flow's index */
/* A collective's flow: its n WRITEs are lens[i] bytes each (the flow's bytes become their sum), and
 * WRITE i is posted only once WRITE dep_msg[i] of flow dep_flow[i] has completed (dep_flow[i] < 0:
 * at once), at most depth in flight, as a receiver's credits allow. Call after every flow is added. */
int mrc_fab_flow_msgs(struct mrc_fab *f, uint32_t flow, uint32_t n, const uint32_t *lens, const int32_t *dep_flow,
                      const uint32_t *dep_msg);
int mrc_fab_link_at(struct mrc_fab *f, uint32_t link, int up, uint64_t at_ns); /* a scheduled change */
/* Run until until_ns or until every flow is done (1) or nothing is left to happen (0);
 * -ENOMEM when an event or a packet could not be allocated (the run cannot go on). */
int mrc_fab_run(struct mrc_fab *f, uint64_t until_ns);
int mrc_fab_stats(struct mrc_fab *f, struct mrc_fab_stats *st);
int mrc_fab_flow_stats(struct mrc_fab *f, uint32_t flow, struct mrc_fab_flow_stats *st, struct mrc_qp_stats *qp);
/* The series: per bucket, the payload bytes completed, then per plane the
 * bytes its leaf uplinks sent (buckets x (1 + planes) values). */
int64_t mrc_fab_series(struct mrc_fab *f, uint64_t *out, uint64_t max);
/* Forwarding alone: from host src's port on plane, where does a packet for
 * daddr go? The nodes it passes (kind << 28 | plane << 24 | index; kind 0
 * host, 1 leaf, 2 spine), the last the host it reaches; -ENETUNREACH with
 * the nodes so far in *n when a node has no route. */
int mrc_fab_trace(struct mrc_fab *f, uint32_t src, uint32_t plane, const uint8_t *daddr, uint32_t *nodes,
                  uint32_t max, uint32_t *n);
/* RoCE: the path of QP q of flow's data now: its plane, and the spine its source leaf's ECMP picks (-1:
 * the destination is below the same leaf, or routing has no spine for it); -EINVAL without RoCE. */
int mrc_fab_roce_path(struct mrc_fab *f, uint32_t flow, uint32_t q, uint32_t *plane, int32_t *spine);
/* A bottleneck line to try the RoCE model on alone (csrc/sim/roce_line.c): senders, each a NIC port
 * at the QP's line rate hop_ns from one switch, whose egress port (port_bps) queues for the one
 * receiver: drops above buffer_bytes, marks CE with RED between kmin and kmax bytes (up to pmax),
 * and with pfc_xoff set pauses a sender whose packets hold more than pfc_xoff bytes of it, until
 * they hold pfc_xon (the pause and the resume reach the sender hop_ns later). Replies (ACK, NAK,
 * CNP) take 2 hop_ns back, unqueued. Each sender writes its bytes in messages of msg bytes, depth
 * in flight. Deterministic for a seed. */
enum { MRC_ROCE_LINE_SENDERS = 64, MRC_ROCE_LINE_DROPS = 64 };
struct mrc_roce_line_cfg {
    struct mrc_roce_cfg qp;  /* every sender's QP */
    uint32_t senders;        /* 1 to MRC_ROCE_LINE_SENDERS */
    uint64_t port_bps, hop_ns;
    uint64_t buffer_bytes;   /* 0: never drops */
    uint64_t kmin, kmax;     /* 0: no marks */
    double pmax;
    uint64_t pfc_xoff, pfc_xon; /* 0: no PFC */
    uint64_t seed, sample_ns;   /* sample_ns: every sender's rate every sample_ns (0: none) */
    uint32_t trace_max;      /* transmissions kept (mrc_roce_line_trace) */
};
struct mrc_roce_line_flow { uint64_t bytes, start_ns; uint32_t msg, depth; };
/* the nth transmission (1: the first) of sender's psn is lost on its way to the switch */
struct mrc_roce_line_drop { uint32_t sender, nth; uint64_t psn; };
struct mrc_roce_line_stats {
    uint64_t now_ns, events, delivered, dropped, lost, marked, max_queue, pauses, resumes, done;
    uint64_t end_ns[MRC_ROCE_LINE_SENDERS];    /* when its flow completed (0: not yet) */
    uint64_t paused_ns[MRC_ROCE_LINE_SENDERS]; /* how long its port was paused in all */
};
struct mrc_roce_line_tx { uint64_t t_ns, psn; uint32_t sender, retx; };
struct mrc_roce_line;
int mrc_roce_line_create(const struct mrc_roce_line_cfg *cfg, struct mrc_roce_line **out);
void mrc_roce_line_destroy(struct mrc_roce_line *l);
int mrc_roce_line_flow(struct mrc_roce_line *l, uint32_t sender, const struct mrc_roce_line_flow *fl);
int mrc_roce_line_drop(struct mrc_roce_line *l, const struct mrc_roce_line_drop *d);
/* Run until until_ns or every flow is done (1) or stuck in ERROR or idle (0); -ENOMEM. */
int mrc_roce_line_run(struct mrc_roce_line *l, uint64_t until_ns);
int mrc_roce_line_stats(struct mrc_roce_line *l, struct mrc_roce_line_stats *st);
int mrc_roce_line_qp(struct mrc_roce_line *l, uint32_t sender, struct mrc_roce_qp *q, struct mrc_roce_resp *r);
/* Transmissions in order (the first trace_max); the count kept. */
int64_t mrc_roce_line_trace(struct mrc_roce_line *l, struct mrc_roce_line_tx *out, uint64_t max);
/* Per sample, per sender: its current rate (b/s) and bytes completed; the values written. */
int64_t mrc_roce_line_samples(struct mrc_roce_line *l, uint64_t *out, uint64_t max);
/* CDEF END */

#endif
