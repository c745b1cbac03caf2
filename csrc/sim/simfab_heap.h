/* The fabric simulator's events (simfab.c) on the event heap (evheap.h),
 * packets' on the calendar in front of it (evcal.h): each host keeps at
 * most one wake event, whose place it knows (hpos), so that a wake that is
 * moved or dropped leaves no stale entry behind (else one per packet a
 * host took in, popped for nothing). Static inline, for simfab.c alone. */
#ifndef MRC_SIMFAB_HEAP_H
#define MRC_SIMFAB_HEAP_H
#include "sim/fab.h"

/* an event with the sequence number seq, taken from f->seq earlier: a
 * packet's on the calendar (it is at most a frame's wire time and a hop
 * ahead, which the ring spans), the rest on the heap */
static inline int push_seq(struct mrc_fab *f, uint64_t t, uint64_t seq, uint32_t kind, uint32_t idx)
{
    int rc = kind == EVT_PKT && !f->k.heap_only ? evcal_push(&f->cal, t, seq, kind, idx) : 0;
    return rc ? (rc < 0 ? rc : 0) : evq_push(&f->q, t, seq, kind, idx);
}

/* The earliest event of the calendar and the heap, or NULL: none. */
static inline const struct fev *first_event(struct mrc_fab *f)
{
    const struct fev *c = f->cal.n ? evcal_top(&f->cal) : NULL, *h = f->q.n ? &f->q.e[0] : NULL;
    return !c || (h && ev_before(h, c)) ? h : c;
}

/* The earliest event, first (what first_event found, nothing pushed
 * since), taken out of where it is. */
static inline struct fev take_event(struct mrc_fab *f, const struct fev *first)
{
    return first == &f->q.e[0] ? evq_pop(&f->q) : evcal_pop(&f->cal);
}

/* An event or a packet that could not be had: what it was for would never
 * happen (a port's FIFO stalled, a host asleep for good, a packet lost
 * unmodelled), so the run stops with the first such failure. */
static inline void must(struct mrc_fab *f, int rc)
{
    if (rc < 0 && !f->err)
        f->err = rc;
}

/* Host h's wake event leaves the heap unrun. */
static inline void unwake(struct mrc_fab *f, uint32_t h)
{
    if (f->hpos[h] != EVQ_NOWHERE)
        evq_remove(&f->q, f->hpos[h]);
}

/* Host h wakes at t, unless it already does no later: one wake event per
 * host, the earliest asked for since its last wake. A pending wake is moved
 * in place, with the sequence number a new event would take (it may be later
 * than t: a packet's arrival runs the host without popping its wake). */
static inline void wake_at(struct mrc_fab *f, uint32_t h, uint64_t t)
{
    struct fhost *x = &f->hosts[h];
    if (x->wake <= t)
        return;
    x->wake = t;
    uint64_t seq = f->seq++;
    if (f->hpos[h] == EVQ_NOWHERE || seq > FEV_SEQ_MAX) {
        must(f, push_seq(f, t, seq, EVT_WAKE, h));
        return;
    }
    struct fev e = fev_make(t, seq, EVT_WAKE, h);
    evq_move(&f->q, f->hpos[h], &e);
}
#endif
