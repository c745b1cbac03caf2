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
};
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
struct mrc_fab_tier { uint64_t packets, bytes, marked, trimmed, dropped, down_dropped, cut, hwm_bytes; };
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
/* CDEF END */

#endif
