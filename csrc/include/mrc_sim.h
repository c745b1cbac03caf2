/*
 * mrc_sim.h - the contract of the two drivers that move contexts by hand in
 * virtual time: the in-memory link (csrc/simlink.c) and the fabric
 * simulator (csrc/simfab.c). Read by csrc/build_dp.py after mrc_dp.h, with
 * the same rules: plain C between CDEF BEGIN and CDEF END, 0 or -errno.
 */
#ifndef MRC_SIM_H
#define MRC_SIM_H

#include "mrc_dp.h"

/* CDEF BEGIN */
/* ----------------------------------------------------- in-memory link
 * Two or more endpoints joined by npaths paths (path = plane * per_plane +
 * entropy % per_plane). Deterministic: all randomness from the seed. */
struct mrc_sim_path {
    uint64_t delay_ns;
    uint64_t jitter_ns;      /* extra random delay up to this: reordering */
    uint32_t loss_ppm;       /* random loss, parts per million */
    uint64_t loss_mask;      /* bit i set: drop the i-th packet mod 64 */
    uint32_t dup_ppm;
    uint32_t trim_ppm;
    uint64_t rate_bps;       /* 0: infinite; else queueing at this rate */
    uint32_t ecn_queue_bytes;/* mark CE above this queue depth */
    uint32_t trim_queue_bytes;/* trim above this queue depth (0: never) */
    uint64_t down_from_ns;   /* path dead in [down_from, down_until) */
    uint64_t down_until_ns;
    uint64_t flap_period_ns; /* if set: down for half of every period */
};

struct mrc_sim_stats {
    uint64_t delivered, dropped, duplicated, trimmed, ecn_marked, events;
    uint64_t per_path_tx[256];
    uint64_t now_ns;
};

struct mrc_sim;
int mrc_sim_create(uint32_t planes, uint32_t per_plane, uint64_t seed, struct mrc_sim **out);
void mrc_sim_destroy(struct mrc_sim *s);
int mrc_sim_attach(struct mrc_sim *s, struct mrc_ep *ep);
int mrc_sim_set_path(struct mrc_sim *s, uint32_t path, const struct mrc_sim_path *p);
int mrc_sim_get_path(struct mrc_sim *s, uint32_t path, struct mrc_sim_path *p);
int mrc_sim_run(struct mrc_sim *s, uint64_t until_ns, uint32_t stop_on_cqe);
/* Every endpoint's port on a plane sends at most rate_bps (0: no limit);
 * a packet waits for its port, then for its path (rate_bps of the path). */
int mrc_sim_set_port_rate(struct mrc_sim *s, uint32_t plane, uint64_t rate_bps);
int mrc_sim_stats(struct mrc_sim *s, struct mrc_sim_stats *st);
/* Copy every packet the link delivers into buf (until cap is reached): each
 * as u16 length, u8 destination endpoint, u8 plane (| 0x10 ECN CE, | 0x20
 * trimmed), u32 EV (little endian), then the packet. The fuzzers' seed corpus comes from it (tools/fuzz.sh).
 * NULL stops recording; mrc_sim_recorded says how many bytes were written. */
int mrc_sim_record(struct mrc_sim *s, uint8_t *buf, uint32_t cap);
uint32_t mrc_sim_recorded(const struct mrc_sim *s);

/* ------------------------------------------------ the fabric simulator
 * H hosts x P planes, each plane a 2-tier Clos (L T0 leaves, S T1 spines),
 * in virtual time (csrc/simfab.c; docs/sim.md). Every host is a context
 * driven by hand with an application of WRITE flows in C; every switch
 * forwards on the uSID destination as the kernel's End with next-CSID does
 * (the address plan of mrc.fabric.topology: host uSID kinds 0xB-0xE carry
 * host bits 8-9) and queues at its egress ports with the rules of the
 * fabric's BPF queues. Deterministic for a seed. Links are numbered:
 * host link (h, p) = p * H + h; leaf-spine link (p, l, s) =
 * P * H + (p * L + l) * S + s. */
/* Bytes a packet takes on a simulated link beyond the MRC packet: Ethernet
 * 14, IPv6 40, UDP 8, FCS 4, preamble and inter-frame gap 20. */
enum { MRC_FAB_WIRE_EXTRA = 86 };
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
    uint32_t unpaced;        /* 0 or 1: NICs do not pace their ports (the engine fills an 8-frame NIC queue, any plane) */
    uint32_t check_times;    /* 0 or 1: every NIC's kept QP times checked at each wake (mrc_ep_check_times; tests) */
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
struct mrc_fab_tier { uint64_t packets, bytes, marked, trimmed, dropped, down_dropped, cut, hwm_bytes; };
struct mrc_fab_stats {
    uint64_t now_ns, events, sent, delivered, no_route, flows_done, buckets;
    uint64_t done_bytes, late_times; /* WRITEs completed (bytes); check_times: QPs found late (0 always) */
    struct mrc_fab_tier tier[4];
};
struct mrc_fab_flow_stats {
    uint32_t src, dst, qpn, errors;
    uint64_t bytes, done, msgs, start_ns, end_ns, first_ns, max_gap_ns, max_gap_end_ns;
    uint64_t arrived, arrived_ns; /* a collective's flow: WRITE_IMMs its receiver got, and when the last came */
};
struct mrc_fab;
int mrc_fab_create(const struct mrc_fab_cfg *cfg, const struct mrc_qp_attr *qp, struct mrc_fab **out);
void mrc_fab_destroy(struct mrc_fab *f);
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
/* CDEF END */

#endif
