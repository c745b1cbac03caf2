/*
 * mrc_manual.h - driving a context by hand: the sans-I/O endpoint's inputs
 * and outputs, and the in-memory link that joins endpoints in virtual time
 * (csrc/core/dispatch.c, csrc/sim/simlink.c). For tests, the simulator and tools
 * that move packets themselves; read by the cffi build after mrc/mrc.h.
 */
#ifndef MRC_MANUAL_H
#define MRC_MANUAL_H

#include "mrc/mrc.h"

/* CDEF BEGIN */
/* ------------------------------------------- driving a context by hand
 * The sans-I/O core's inputs and outputs (architecture.md): no syscalls, no
 * clock reads; time is the now_ns argument. Packets come in through
 * mrc_ep_input() and go out through mrc_ep_poll_tx(); mrc_ep_next_timer()
 * says when to call again. The engine thread makes these calls for a
 * context with ports; for one without, the caller does (mrc_ctx_ep gives
 * the endpoint; no call here takes a lock). */

/* Metadata the I/O layer (or the simulated link) passes with a packet. */
struct mrc_meta {
    uint32_t ev;             /* EV the packet travelled on */
    uint16_t peer;           /* which remote endpoint it came from */
    uint8_t port;            /* local plane it arrived on */
    uint8_t ecn_ce;          /* IP ECN field was CE */
    uint8_t trimmed;         /* DSCP says the payload was trimmed */
};

/* One packet to send: BTH..ICRC in the caller's buffer at off. */
struct mrc_txdesc {
    uint32_t off;
    uint32_t len;
    uint32_t ev;             /* the EV it goes on (plane and entropy: csrc/wire/hdr.h) */
    uint16_t peer;
    uint8_t tclass;          /* DSCP << 2 | ECN */
    uint8_t is_data;
    uint8_t has_sum;         /* sum is the packet's ones'-complement sum, taken while it was built */
    uint16_t sum;            /* (RFC 1071, folded, not complemented, in the packet's byte order) */
    uint16_t hdr, plen;      /* a data packet's header bytes (through ImmDt: what a trimming switch keeps) and
                              * payload bytes after them (then its ICRC, or its tag when sealed); 0 for others */
};

struct mrc_ep;
struct mrc_ep *mrc_ctx_ep(struct mrc_ctx *c);
int mrc_ep_input(struct mrc_ep *ep, const uint8_t *pkt, uint32_t len, const struct mrc_meta *meta, uint64_t now_ns);
int mrc_ep_poll_tx(struct mrc_ep *ep, uint64_t now_ns, uint8_t *buf, uint32_t buflen, struct mrc_txdesc *d,
                   uint32_t max);
uint64_t mrc_ep_next_timer(struct mrc_ep *ep, uint64_t now_ns);
/* Data packets in the clear leave with their ones'-complement sum
 * (mrc_txdesc.has_sum, .sum), taken in the pass that copies the payload:
 * for an I/O side that wraps them in UDP (the engine asks for it). */
void mrc_ep_want_tx_sums(struct mrc_ep *ep, int on);
/* New full-size data packets of a QP go k in a row on one EV (0 or 1: each
 * on the rotation's next), so that the I/O side can send them as one buffer
 * (mrc_ctx_set_gso). -EINVAL beyond MRC_GSO_MAX_K. */
enum {
    MRC_GSO_MAX_K = 8,
    MRC_GSO_MAX_BYTES = 65000, /* a buffer's UDP payload at most (the UDP length field, with room) */
};
int mrc_ep_set_gso(struct mrc_ep *ep, uint32_t k);
int mrc_ep_check_times(struct mrc_ep *ep, uint64_t now_ns); /* tests: QPs whose kept times are late now (0) */
/* A local port (plane) went down or up (the engine calls it when carrier or
 * the admin state changes). */
int mrc_ep_set_port(struct mrc_ep *ep, uint32_t plane, int up, uint64_t now_ns);
/* A port (plane) sends at most rate_bps of frames (packet plus Ethernet,
 * IPv6 and UDP headers); 0 (the default): as fast as it is asked. Data
 * waits in the QPs for its port, as in a NIC, so a slower wire in front
 * queues nothing (NSCC would count that queue as the network's).
 * -EINVAL: no such plane, or a rate below 8 kbit/s. */
int mrc_ep_set_port_rate(struct mrc_ep *ep, uint32_t plane, uint64_t rate_bps);

/* EV probes (protocol.md 3): a connectionless ENDPOINT_REQUEST on one EV to
 * a peer, answered by the peer's endpoint on the EV it arrived on. send
 * queues one (-ENOSPC: control ring full, -EBUSY: probe table full,
 * -ENETDOWN: the EV's plane is down here, -EINVAL: no such plane) and gives
 * its id; result gives 1 and the answer (and forgets the probe), 0 while it
 * is pending, -ENOENT for an id it does not know; cancel forgets a probe
 * (timed out), so a late answer is dropped as STALE_PROBE. The RTT runs from
 * the poll_tx that sent the request to the input of the answer. */
struct mrc_probe_result { uint32_t id; uint32_t ev; uint16_t peer; uint8_t port; uint64_t rtt_ns; };
int mrc_ep_probe_send(struct mrc_ep *ep, uint16_t peer, uint32_t ev, uint64_t now_ns, uint32_t *id);
int mrc_ep_probe_result(struct mrc_ep *ep, uint32_t id, struct mrc_probe_result *out);
int mrc_ep_probe_cancel(struct mrc_ep *ep, uint32_t id);

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

/* CDEF END */

#endif
