/* The fabric simulator's ports (docs/sim.md): the packets in flight and the
 * egress FIFOs they queue in, with the queue's rules (trim, drop, mark),
 * the series of bytes per bucket, and PFC.
 *
 * A port's FIFO: each packet's arrival at the next node is set when it
 * joins (busy, the time its wire frees, moves on by its serialization); only
 * the head has an event. Switch ports apply the fabric's queue rules
 * (csrc/bpf/port_queue.bpf.c) to the backlog a packet finds.
 *
 * PFC (mrc_fab_cfg.pfc_xoff; RoCE's lossless class): a switch counts, per
 * ingress (the port upstream of it that a packet came through), the bytes
 * queued in it; above pfc_xoff it sends that port a pause, at or below
 * pfc_xon a resume, each taking a hop. A paused port finishes the packet on
 * its wire and holds the others (and any that join) until resumed: what it
 * holds waits behind the pause whatever its destination, which is PFC's
 * head-of-line blocking. A NIC port paused sends nothing; its host is woken
 * at the resume. A pause takes back the packets not begun, a resume sets
 * their arrivals again from its time.
 *
 * Lock: none (simfab.c). */
#include "sim/simfab_port.h"
#include "sim/simfab_heap.h"

static int pfc_hold(struct mrc_fab *f, struct fpkt *k, uint64_t port);
static void pfc_in(struct mrc_fab *f, struct fpkt *k);
static void pfc_flush(struct mrc_fab *f, uint64_t port);

void fab_pkt_put(struct mrc_fab *f, struct fpkt *k) { k->next = f->freel, f->freel = k; }

/* A packet able to carry n bytes (NULL: out of memory). */
struct fpkt *fab_pkt_get(struct mrc_fab *f, uint32_t n)
{
    struct fpkt *k = f->freel;
    if (k) {
        f->freel = k->next;
    } else {
        if (!(k = aligned_alloc(64, sizeof(*k))))
            return NULL;
        k->big = NULL;
        f->st.packet_bytes += sizeof(*k);
    }
    k->data = k->inl;
    if (n > FAB_INLINE) {
        if (!k->big) {
            if (!(k->big = malloc(f->slot))) {
                fab_pkt_put(f, k);
                return NULL;
            }
            f->st.packet_bytes += f->slot;
        }
        k->data = k->big;
    }
    return k;
}


void fab_bucket_add(struct mrc_fab *f, uint32_t col, uint64_t bytes)
{
    uint64_t b = f->now / (f->c.bucket_ns * 1000), w = 1 + f->c.planes;
    if (b >= f->series_len) {
        if ((b + 1) * w > f->series_cap) {
            uint64_t cap = f->series_cap ? f->series_cap : 1024 * w;
            while (cap < (b + 1) * w)
                cap *= 2;
            uint64_t *s = realloc(f->series, cap * sizeof(*s));
            if (!s)
                return;
            memset(s + f->series_cap, 0, (cap - f->series_cap) * sizeof(*s));
            f->series = s;
            f->series_cap = cap;
        }
        f->series_len = b + 1;
    }
    f->series[b * w + col] += bytes;
}

/* The packet goes on the port's wire at start (ps), after what the FIFO holds: it reaches the next
 * node a hop after its last bit; the head's arrival is an event, the others' are their predecessors'. */
static void fifo_append(struct mrc_fab *f, uint64_t port, struct fpkt *k, uint64_t start)
{
    struct fport *pt = &f->ports[port];
    pt->busy = start + (uint64_t)k->wire * f->ppb;
    uint64_t at = pt->busy + f->c.hop_ns * 1000;
    k->seq = f->seq++;
    k->next = NULL;
    if (pt->tail) {
        pt->tail->next = k;
        pt->tail->nat = at;
        pt->tail->nseq = k->seq;
    } else {
        pt->head = k;
        pt->head_at = at;
        must(f, push_seq(f, at, k->seq, EVT_PKT, (uint32_t)port));
    }
    pt->tail = k;
}

/* The packet joins an egress port's FIFO now and arrives at next one hop
 * after it has left; switch ports apply the queue's rules first. */
void fab_enqueue(struct mrc_fab *f, struct fpkt *k, uint64_t port, uint32_t next)
{
    struct fport *pt = &f->ports[port];
    uint32_t tier = port_tier(f, port);
    struct mrc_fab_tier *ts = &f->st.tier[tier];
    if (pt->down) {
        ts->down_dropped++;
        fab_pkt_put(f, k);
        return;
    }
    uint64_t start = pt->busy > f->now ? pt->busy : f->now, q = (start - f->now) / f->ppb + pt->held;
    if (tier != MRC_FAB_NIC) {
        int trimmed = 0;
        if (f->c.trim_bytes && q > f->c.trim_bytes && k->hdr && !k->trimmed) {
            k->len = k->hdr; /* the headers through ImmDt stay */
            k->zlen = 0;
            k->wire = k->len + WIRE_EXTRA;
            k->trimmed = trimmed = 1;
            ts->trimmed++;
        }
        if (f->c.buffer_bytes && q + k->wire > f->c.buffer_bytes) {
            ts->dropped++;
            fab_pkt_put(f, k);
            return;
        }
        if (!trimmed && !k->trimmed && f->c.ecn_bytes && q > f->c.ecn_bytes && (k->tclass & 3) && !k->ce) {
            k->ce = 1;
            ts->marked++;
        }
    }
    if (q + k->wire > ts->hwm_bytes)
        ts->hwm_bytes = q + k->wire;
    ts->packets++;
    ts->bytes += k->wire;
    if (tier == MRC_FAB_LEAF_UP)
        fab_bucket_add(f, 1 + ((next >> 24) & 0xF), k->wire);
    k->node = next;
    if (f->c.pfc_xoff) {
        if (tier != MRC_FAB_NIC)
            pfc_in(f, k); /* queued in this switch: its ingress counts it */
        if (pfc_hold(f, k, port))
            return;
    }
    fifo_append(f, port, k, start);
}

/* Everything a port holds is lost (its link failed): counted as cut. Its
 * event, if any, finds another packet or none at the head and is passed over. */
void fab_port_flush(struct mrc_fab *f, uint64_t port)
{
    struct fport *pt = &f->ports[port];
    struct mrc_fab_tier *ts = &f->st.tier[port_tier(f, port)];
    while (pt->head) {
        struct fpkt *k = pt->head;
        pt->head = k->next;
        if (f->c.pfc_xoff)
            pfc_out(f, k, port); /* it leaves the switch's count too */
        ts->cut++;
        fab_pkt_put(f, k);
    }
    pt->tail = NULL;
    if (f->c.pfc_xoff)
        pfc_flush(f, port);
}

/* ------------------------------------------------------------ PFC */
static void pfc_signal(struct mrc_fab *f, uint64_t port, int pause)
{
    uint32_t idx = EVT_PFC_BIT | (uint32_t)(port << 1) | !!pause;
    must(f, push_seq(f, f->now + f->c.hop_ns * 1000, f->seq++, EVT_LINK, idx));
}

static int pfc_hold(struct mrc_fab *f, struct fpkt *k, uint64_t port)
{
    struct fport *pt = &f->ports[port];
    if (!pt->paused)
        return 0;
    k->next = NULL;
    if (pt->htail)
        pt->htail->next = k;
    else
        pt->hhead = k;
    pt->htail = k;
    pt->held += k->wire;
    return 1;
}

static void pfc_in(struct mrc_fab *f, struct fpkt *k)
{
    struct fport *in = &f->ports[k->r.inport];
    in->ing += k->wire;
    if (!in->pause_sent && in->ing > f->c.pfc_xoff) {
        in->pause_sent = 1;
        pfc_signal(f, k->r.inport, 1);
    }
}

void pfc_out(struct mrc_fab *f, struct fpkt *k, uint64_t port)
{
    if (port_tier(f, port) != MRC_FAB_NIC) { /* it left a switch: its ingress there holds less */
        struct fport *in = &f->ports[k->r.inport];
        in->ing -= k->wire < in->ing ? k->wire : in->ing;
        if (in->pause_sent && in->ing <= f->c.pfc_xon) {
            in->pause_sent = 0;
            pfc_signal(f, k->r.inport, 0);
        }
    }
    k->r.inport = (uint32_t)port;
}

/* Pause: the FIFO keeps the packets begun by now (the head's arrival is the event's, the others'
 * their predecessor's nat); the rest go to the front of the held list, in order. */
static void pause_port(struct mrc_fab *f, uint64_t port)
{
    struct fport *pt = &f->ports[port];
    uint64_t hop = f->c.hop_ns * 1000, at = pt->head ? pt->head_at : 0;
    struct fpkt *keep = NULL, *k = pt->head;
    for (; k; at = k->nat, k = k->next) {
        if (at - hop - (uint64_t)k->wire * f->ppb >= f->now)
            break; /* not begun: this one and the rest wait */
        keep = k;
        pt->busy = at - hop;
    }
    if (k) { /* an unpaused port holds nothing: the held list is these */
        uint64_t n = 0;
        for (struct fpkt *x = k; x; x = x->next)
            n += x->wire;
        pt->hhead = k;
        pt->htail = pt->tail;
        pt->held = n;
        pt->tail = keep;
        if (keep)
            keep->next = NULL;
        else
            pt->head = NULL, pt->busy = f->now; /* its head's event finds another packet or none */
    }
    pt->paused = 1;
    pt->paused_at = f->now;
    f->st.tier[port_tier(f, port)].pauses++;
}

static void resume_port(struct mrc_fab *f, uint64_t port)
{
    struct fport *pt = &f->ports[port];
    pt->paused = 0;
    f->st.tier[port_tier(f, port)].paused_ns += (f->now - pt->paused_at) / 1000;
    struct fpkt *k = pt->hhead;
    pt->hhead = pt->htail = NULL;
    pt->held = 0;
    while (k) {
        struct fpkt *next = k->next;
        fifo_append(f, port, k, pt->busy > f->now ? pt->busy : f->now);
        k = next;
    }
    if (port_tier(f, port) == MRC_FAB_NIC) /* a NIC's port: its host sends again */
        wake_at(f, (uint32_t)(port / 2 % f->c.hosts), f->now);
}

void pfc_event(struct mrc_fab *f, uint32_t idx)
{
    uint64_t port = idx >> 1;
    struct fport *pt = &f->ports[port];
    if ((idx & 1) && !pt->paused && !pt->down)
        pause_port(f, port);
    else if (!(idx & 1) && pt->paused)
        resume_port(f, port);
}

static void pfc_flush(struct mrc_fab *f, uint64_t port)
{
    struct fport *pt = &f->ports[port];
    struct mrc_fab_tier *ts = &f->st.tier[port_tier(f, port)];
    while (pt->hhead) {
        struct fpkt *k = pt->hhead;
        pt->hhead = k->next;
        pfc_out(f, k, port);
        ts->cut++;
        fab_pkt_put(f, k);
    }
    pt->htail = NULL;
    pt->held = 0;
    if (pt->paused)
        resume_port(f, port); /* nothing held: it ends the pause's count; a failed link carries no pause */
}
