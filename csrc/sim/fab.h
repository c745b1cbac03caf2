/* The fabric simulator's state, shared by its files: simfab.c runs it
 * (forwarding, MRC's hosts, events), simfab_port.c its ports and packets,
 * simfab_app.c the flows' application, simfab_roce.c RoCE's hosts,
 * simfab_setup.c builds it and reads it out (sim/simfab.c says what it
 * models). */
#ifndef MRC_SIM_FAB_H
#define MRC_SIM_FAB_H
#include "core/types.h"
#include "mrc_sim.h"
#include "sim/evcal.h"

enum { FAB_BATCH = 16, FAB_TXBUF = 256 << 10, FAB_WCS = 64 };
#define FAB_MEM (64u << 20) /* the hosts' one region: every WRITE's source and destination */
enum { NODE_HOST = 0, NODE_LEAF = 1, NODE_SPINE = 2 };
enum { EVT_PKT = 0, EVT_WAKE = 1, EVT_LINK = 2, EVT_FLOW = 3 };
/* an EVT_LINK with this bit is PFC's: (port << 1 | pause) below it (simfab_pfc.c) */
enum { EVT_PFC_BIT = 1u << 23, PFC_MAX_PORTS = 1u << 22 };
enum { KIND_T0 = 0x1, KIND_T1 = 0x2, KIND_HOST = 0xB };
#define WIRE_EXTRA MRC_FAB_WIRE_EXTRA
_Static_assert(MRC_FAB_WIRE_EXTRA == MRC_ETH_HLEN + MRC_IPV6_HLEN + MRC_UDP_HLEN + 4 + 20, "the wire's extra bytes");
#define PS_INF UINT64_MAX

/* A switch or NIC egress port: busy, when its FIFO drains (ps); head..tail,
 * the packets it took in and has not delivered yet (queued or on the wire),
 * in order of arrival at the next node. Only the head has an event, with the
 * sequence number the packet took when it joined: the heap holds the busy
 * ports, not every packet in flight, and runs them in the same order. */
struct fport {
    uint64_t busy;
    struct fpkt *head, *tail;
    uint8_t down;
    uint8_t paused, pause_sent; /* PFC (simfab_pfc.c): this port is paused; its downstream asked it to be */
    struct fpkt *hhead, *htail; /* PFC: what waits while paused, not yet begun */
    uint64_t held;              /* their bytes */
    uint64_t ing;               /* bytes that came through this port and are queued in the next node */
    uint64_t paused_at;         /* since when (ps) */
    uint64_t head_at;           /* when the head reaches the next node (its event's time) */
};

/* A packet in flight: what forwarding reads (its first cache line) apart
 * from its bytes, which only the two hosts touch. Each packet holds its
 * successor's arrival and sequence number, so a port's next event is made
 * from the packet leaving it, not from a read of the next one (cold: that
 * read was a fifth of the simulator's time at 256-byte packets).
 * A data packet whose payload is all zeros (every WRITE of the simulator's
 * applications while their one region holds zeros, mrc_fab_checks fill 0: it is never
 * written but by placement, and no QP is encrypted) does not carry it: data
 * holds its headers (hdr bytes) and what follows the payload (ICRC or tag),
 * and the zlen zero bytes between go back in at delivery, the same bytes
 * the sender made. What is in flight is then about
 * 256 bytes a packet, not a full frame: at 8,192 NICs, each with its window
 * of about a megabyte in flight, that is the difference between 2 and
 * 9 GB. Packets that fit (headers, ACKs) sit in inl; others in big, a
 * buffer of slot bytes the packet keeps when it goes back to the free list. */
enum { FAB_INLINE = 160 };
struct fpkt {
    /* what every hop reads, in its first cache line (packets are 64-byte aligned) */
    struct fpkt *next;       /* its port's FIFO, or the free list */
    uint64_t seq;            /* its event's sequence number */
    uint64_t nat, nseq;      /* the next packet in its FIFO: when it reaches its next node (ps), its seq */
    union {
        uint8_t daddr[16];
        struct { /* RoCE: no address */
            uint64_t psn : 48, q : 8, kind : 4, last : 4;
            uint32_t flow, inport; /* inport: the port it came through to this node (PFC) */
        } r;
    };
    uint32_t len, node, wire; /* len: the packet's bytes, zlen of them not carried */
    uint8_t tclass, ce, trimmed;
    /* what its two hosts and a trimming port read */
    uint32_t ev;
    uint16_t src;
    uint32_t hdr, zlen;      /* a data packet's headers (0: not parsed, not trimmable); zero bytes not carried */
    uint8_t *data;           /* inl or big */
    uint8_t *big;
    uint8_t inl[FAB_INLINE];
};
_Static_assert(__builtin_offsetof(struct fpkt, ev) <= 64 && sizeof(struct fpkt) % 64 == 0, "a packet's first line");

struct fhost {
    struct mrc_ctx *ctx;
    struct mrc_ep *ep;
    uint64_t wake;                 /* the earliest wake asked for since it last ran (PS_INF: none) */
    uint32_t lkey, rkey;
    uint16_t *g2l;                 /* host index -> this context's peer number (0xFFFF: none) */
    uint16_t l2g[MRC_MAX_PEERS];   /* and back */
    uint32_t npeers;
};

struct fflow {
    struct mrc_fab_flow c;
    uint32_t qpn, dqpn, errors;
    uint64_t posted, done, msgs, seq, first, end, last, max_gap, max_gap_end;
    /* a collective's flow (mrc_fab_flow_msgs): each WRITE's length and the WRITE it waits for */
    uint32_t nmsgs, *lens, *dep_msg;
    uint64_t arrived, arrived_at;  /* its WRITE_IMMs the receiver got (their receive completions), the last's time */
    int32_t *dep_flow;
    uint32_t *dependents, ndependents; /* the flows some WRITE of which waits for one of this flow's */
    struct froce *r;               /* RoCE: its QPs (simfab_roce.c) */
};

struct mrc_fab {
    struct mrc_fab_cfg c;
    struct mrc_fab_checks k;  /* the tests' checks (mrc_fab_set_checks) */
    uint8_t ran;             /* mrc_fab_run was called: the checks stay as they are */
    struct mrc_qp_attr qa;
    uint64_t ppb;            /* picoseconds per byte at the link rate */
    uint64_t now, seq;
    struct fhost *hosts;
    struct fport *ports;
    uint32_t nlinks, slot;
    struct evcal cal;        /* packets' events (simfab_heap.h) */
    struct evheap q;         /* the others, four to a cache line */
    uint64_t *hpos;          /* each host's one wake event's place in q (EVQ_NOWHERE: none) */
    struct fpkt *freel;
    struct fflow *flows;
    uint32_t nflows, flows_cap;
    uint8_t *mem;            /* every host's one region (placement goes there) */
    uint8_t *txbuf;
    uint8_t *rxbuf;          /* a packet whose zero payload was not carried, whole again for its receiver;
                              * zeros between packets (only its ends are written) */
    struct mrc_txdesc txd[FAB_BATCH];
    uint64_t *series;
    uint64_t series_len, series_cap;
    struct mrc_fab_stats st;
    int err;                 /* the first failure to grow (-ENOMEM): the run stops and returns it */
    uint64_t *link_changed;  /* when each link last went down or up (ps; 0: never), for routing */
    uint32_t links_changed;  /* some link did */
    uint32_t **host_rq, *host_nrq, *host_rr; /* RoCE: each host's sending QPs (flow * MRC_FAB_ROCE_QPS + q) */
    void (*post_more)(struct mrc_fab *f, struct fflow *fl); /* the transport's: post what a flow may now */
};

/* ------------------------------------------------------------ the address plan */
static inline uint16_t usid(uint32_t kind, uint32_t plane, uint32_t idx)
{
    return (uint16_t)(kind << 12 | plane << 8 | (idx & 0xFF));
}
static inline uint32_t host_leaf(const struct mrc_fab *f, uint32_t h)
{
    return (uint32_t)((uint64_t)h * f->c.leaves / f->c.hosts);
}
/* the first host under a leaf: the least h with host_leaf(h) == leaf */
static inline uint32_t leaf_first(const struct mrc_fab *f, uint32_t leaf)
{
    return (uint32_t)(((uint64_t)leaf * f->c.hosts + f->c.leaves - 1) / f->c.leaves);
}
/* The number a host port's uSID carries (kinds 0xB-0xE hold its bits 8-9).
 * Up to MRC_FAB_NAMED_HOSTS hosts it is the host's own, as in
 * mrc.fabric.topology.host_usid (the namespace fabric's plan). Past that, 16
 * bits cannot name every host's port on every plane (8,192 hosts x 8 planes
 * would take every 16-bit value), and it is the port's on the host's leaf:
 * the host's place among that leaf's hosts, as a switch names its own ports. */
static inline uint32_t host_port(const struct mrc_fab *f, uint32_t h)
{
    return f->c.hosts > MRC_FAB_NAMED_HOSTS ? h - leaf_first(f, host_leaf(f, h)) : h;
}
static inline uint16_t host_usid(const struct mrc_fab *f, uint32_t h, uint32_t plane)
{
    uint32_t i = host_port(f, h);
    return usid(KIND_HOST + (i >> 8), plane, i);
}
static inline uint32_t node(uint32_t kind, uint32_t plane, uint32_t idx) { return kind << 28 | plane << 24 | idx; }
/* The tier of an egress port: link * 2 + 0 goes up, + 1 down; host links first. */
static inline uint32_t port_tier(const struct mrc_fab *f, uint64_t port)
{
    int up = !(port & 1);
    if (port / 2 < (uint64_t)f->c.planes * f->c.hosts)
        return up ? MRC_FAB_NIC : MRC_FAB_LEAF_DOWN;
    return up ? MRC_FAB_LEAF_UP : MRC_FAB_SPINE_DOWN;
}
static inline uint16_t active(const uint8_t *a) { return (uint16_t)(a[4] << 8 | a[5]); }

/* an event at t (ps); kind EVT_*, idx a port, host, link or flow (FEV_IDX_MAX at most) */
int fab_push(struct mrc_fab *f, uint64_t t, uint32_t kind, uint32_t idx);
/* simfab.c: f->post_more when the hosts run MRC (WRITEs posted to the flow's QP on its context) */
void fab_mrc_post_more(struct mrc_fab *f, struct fflow *fl);

#endif
