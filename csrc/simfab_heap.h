/* The fabric simulator's event queue (simfab.c): a 4-ary heap of events
 * ordered by time, then sequence number, in which each host keeps at most
 * one wake event whose place it knows. Static inline, for simfab.c alone:
 * every packet and every wake goes through it, and the calls stay inside
 * one translation unit. */
#ifndef MRC_SIMFAB_HEAP_H
#define MRC_SIMFAB_HEAP_H
#include "simfab.h"

/* An event's order as one number: the time, then the sequence number. */
static inline unsigned __int128 ev_key(const struct fev *e) { return (unsigned __int128)e->t << 64 | e->x; }
static inline int ev_before(const struct fev *a, const struct fev *b) { return ev_key(a) < ev_key(b); }

/* Every entry moves through here: a host's wake event keeps its place in
 * hosts[].hpos, so a wake that is moved or dropped leaves no stale entry
 * behind (else one per packet a host took in, popped for nothing). */
static inline void heap_put(struct mrc_fab *f, uint64_t i, const struct fev *e)
{
    f->heap[i] = *e;
    if (fev_kind(e) == EVT_WAKE)
        f->hosts[fev_idx(e)].hpos = i;
}

static inline void sift_up(struct mrc_fab *f, uint64_t i, const struct fev *e)
{
    while (i && ev_before(e, &f->heap[(i - 1) / 4])) {
        heap_put(f, i, &f->heap[(i - 1) / 4]);
        i = (i - 1) / 4;
    }
    heap_put(f, i, e);
}

static inline void sift_down(struct mrc_fab *f, uint64_t i, const struct fev *e)
{
    const unsigned __int128 k = ev_key(e);
    for (;;) {
        uint64_t c = 4 * i + 1;
        if (c >= f->hn)
            break;
        uint64_t best = c;
        unsigned __int128 bk = ev_key(&f->heap[c]);
        if (c + 3 < f->hn) { /* all four children: the least without branches (the keys are random) */
            unsigned __int128 k1 = ev_key(&f->heap[c + 1]), k2 = ev_key(&f->heap[c + 2]), k3 = ev_key(&f->heap[c + 3]);
            uint64_t b01 = k1 < bk ? c + 1 : c, b23 = k3 < k2 ? c + 3 : c + 2;
            unsigned __int128 m01 = k1 < bk ? k1 : bk, m23 = k3 < k2 ? k3 : k2;
            best = m23 < m01 ? b23 : b01;
            bk = m23 < m01 ? m23 : m01;
        } else {
            for (uint64_t j = c + 1; j < f->hn; j++)
                if (ev_key(&f->heap[j]) < bk) {
                    best = j;
                    bk = ev_key(&f->heap[j]);
                }
        }
        if (bk >= k)
            break;
        heap_put(f, i, &f->heap[best]);
        i = best;
    }
    heap_put(f, i, e);
}

/* Entry i becomes e, moved up or down to its place. */
static inline void heap_move(struct mrc_fab *f, uint64_t i, const struct fev *e)
{
    if (ev_before(e, &f->heap[i]))
        sift_up(f, i, e);
    else
        sift_down(f, i, e);
}

/* an event with the sequence number seq, taken from f->seq earlier */
static inline int push_seq(struct mrc_fab *f, uint64_t t, uint64_t seq, uint32_t kind, uint32_t idx)
{
    if (idx > FEV_IDX_MAX || seq > FEV_SEQ_MAX)
        return -EOVERFLOW;
    if (f->hn == f->hcap) {
        struct fev *h = realloc(f->heap, 2 * f->hcap * sizeof(*h));
        if (!h)
            return -ENOMEM;
        f->heap = h;
        f->hcap *= 2;
    }
    struct fev e = fev_make(t, seq, kind, idx);
    sift_up(f, f->hn++, &e);
    return 0;
}

/* An event or a packet that could not be had: what it was for would never
 * happen (a port's FIFO stalled, a host asleep for good, a packet lost
 * unmodelled), so the run stops with the first such failure. */
static inline void must(struct mrc_fab *f, int rc)
{
    if (rc < 0 && !f->err)
        f->err = rc;
}

static inline struct fev pop(struct mrc_fab *f)
{
    struct fev top = f->heap[0], last = f->heap[--f->hn];
    if (f->hn)
        sift_down(f, 0, &last);
    if (fev_kind(&top) == EVT_WAKE)
        f->hosts[fev_idx(&top)].hpos = HPOS_NONE;
    return top;
}

/* Host h's wake event leaves the heap unrun. */
static inline void unwake(struct mrc_fab *f, uint32_t h)
{
    uint64_t i = f->hosts[h].hpos;
    if (i == HPOS_NONE)
        return;
    f->hosts[h].hpos = HPOS_NONE;
    struct fev last = f->heap[--f->hn];
    if (i != f->hn)
        heap_move(f, i, &last);
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
    if (x->hpos == HPOS_NONE || seq > FEV_SEQ_MAX) {
        must(f, push_seq(f, t, seq, EVT_WAKE, h));
        return;
    }
    struct fev e = fev_make(t, seq, EVT_WAKE, h);
    heap_move(f, x->hpos, &e);
}
#endif
