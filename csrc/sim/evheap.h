/* The one event queue of virtual time: a 4-ary heap of 16-byte events
 * ordered by time, then sequence number (ties at one time run in the order
 * they were made). The fabric simulator (simfab.c, times in ps: packets
 * reaching a node, NICs waking, links changing) and the in-memory link
 * (simlink.c, times in ns: packets reaching an endpoint) both run on it.
 * Events of one kind may keep their place in the heap (pos[idx]), so that
 * one can be moved or taken out where it is (the fabric's host wakes).
 * Static inline: every packet goes through here, and the calls stay inside
 * the translation unit that uses them. */
#ifndef MRC_EVHEAP_H
#define MRC_EVHEAP_H
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

/* An event: x is its sequence number (bits 63-26), its kind (25-24) and its
 * index (23-0: what it is about, a port, a host, a packet's slot...). */
struct fev { uint64_t t, x; };
enum { FEV_IDX_BITS = 24, FEV_SEQ_SHIFT = 26 };
#define FEV_IDX_MAX ((1u << FEV_IDX_BITS) - 1)
#define FEV_SEQ_MAX ((1ull << (64 - FEV_SEQ_SHIFT)) - 1)
#define EVQ_NOWHERE UINT64_MAX
static inline uint32_t fev_kind(const struct fev *e) { return (uint32_t)(e->x >> FEV_IDX_BITS) & 3; }
static inline uint32_t fev_idx(const struct fev *e) { return (uint32_t)e->x & FEV_IDX_MAX; }
static inline uint64_t fev_seq(const struct fev *e) { return e->x >> FEV_SEQ_SHIFT; }
/* the event at t with sequence number seq, of kind (0-3), about idx */
static inline struct fev fev_make(uint64_t t, uint64_t seq, uint32_t kind, uint32_t idx)
{
    return (struct fev){.t = t, .x = seq << FEV_SEQ_SHIFT | (uint64_t)kind << FEV_IDX_BITS | idx};
}

/* e: n events in cap slots; pos: where each event of kind pos_kind is (by
 * its index; EVQ_NOWHERE when it is not in the heap), or NULL. */
struct evheap {
    struct fev *e;
    uint64_t n, cap;
    uint64_t *pos;
    uint32_t pos_kind;
};

static inline int evq_init(struct evheap *q, uint64_t cap, uint64_t *pos, uint32_t pos_kind)
{
    *q = (struct evheap){.e = malloc(cap * sizeof(*q->e)), .cap = cap, .pos = pos, .pos_kind = pos_kind};
    return q->e ? 0 : -ENOMEM;
}

static inline void evq_free(struct evheap *q) { free(q->e), q->e = NULL, q->n = q->cap = 0; }

/* An event's order as one number: the time, then the sequence number. */
static inline unsigned __int128 ev_key(const struct fev *e) { return (unsigned __int128)e->t << 64 | e->x; }
static inline int ev_before(const struct fev *a, const struct fev *b) { return ev_key(a) < ev_key(b); }

/* Every entry moves through here, so a kept place is never stale. */
static inline void evq_put(struct evheap *q, uint64_t i, const struct fev *e)
{
    q->e[i] = *e;
    if (q->pos && fev_kind(e) == q->pos_kind)
        q->pos[fev_idx(e)] = i;
}

static inline void evq_sift_up(struct evheap *q, uint64_t i, const struct fev *e)
{
    while (i && ev_before(e, &q->e[(i - 1) / 4])) {
        evq_put(q, i, &q->e[(i - 1) / 4]);
        i = (i - 1) / 4;
    }
    evq_put(q, i, e);
}

static inline void evq_sift_down(struct evheap *q, uint64_t i, const struct fev *e)
{
    const unsigned __int128 k = ev_key(e);
    for (;;) {
        uint64_t c = 4 * i + 1;
        if (c >= q->n)
            break;
        uint64_t best = c;
        unsigned __int128 bk = ev_key(&q->e[c]);
        if (c + 3 < q->n) { /* all four children: the least without branches (the keys are random) */
            unsigned __int128 k1 = ev_key(&q->e[c + 1]), k2 = ev_key(&q->e[c + 2]), k3 = ev_key(&q->e[c + 3]);
            uint64_t b01 = k1 < bk ? c + 1 : c, b23 = k3 < k2 ? c + 3 : c + 2;
            unsigned __int128 m01 = k1 < bk ? k1 : bk, m23 = k3 < k2 ? k3 : k2;
            best = m23 < m01 ? b23 : b01;
            bk = m23 < m01 ? m23 : m01;
        } else {
            for (uint64_t j = c + 1; j < q->n; j++)
                if (ev_key(&q->e[j]) < bk) {
                    best = j;
                    bk = ev_key(&q->e[j]);
                }
        }
        if (bk >= k)
            break;
        evq_put(q, i, &q->e[best]);
        i = best;
    }
    evq_put(q, i, e);
}

/* Entry i becomes e, moved up or down to its place. */
static inline void evq_move(struct evheap *q, uint64_t i, const struct fev *e)
{
    if (ev_before(e, &q->e[i]))
        evq_sift_up(q, i, e);
    else
        evq_sift_down(q, i, e);
}

/* An event at t with the sequence number seq; -EOVERFLOW when its index or
 * sequence number does not fit, -ENOMEM when the heap cannot grow. */
static inline int evq_push(struct evheap *q, uint64_t t, uint64_t seq, uint32_t kind, uint32_t idx)
{
    if (idx > FEV_IDX_MAX || seq > FEV_SEQ_MAX)
        return -EOVERFLOW;
    if (q->n == q->cap) {
        struct fev *h = realloc(q->e, 2 * q->cap * sizeof(*h));
        if (!h)
            return -ENOMEM;
        q->e = h;
        q->cap *= 2;
    }
    struct fev e = fev_make(t, seq, kind, idx);
    evq_sift_up(q, q->n++, &e);
    return 0;
}

/* The first event, taken out (the heap must not be empty). */
static inline struct fev evq_pop(struct evheap *q)
{
    struct fev top = q->e[0], last = q->e[--q->n];
    if (q->n)
        evq_sift_down(q, 0, &last);
    if (q->pos && fev_kind(&top) == q->pos_kind)
        q->pos[fev_idx(&top)] = EVQ_NOWHERE;
    return top;
}

/* Entry i leaves the heap unrun. */
static inline void evq_remove(struct evheap *q, uint64_t i)
{
    if (q->pos && fev_kind(&q->e[i]) == q->pos_kind)
        q->pos[fev_idx(&q->e[i])] = EVQ_NOWHERE;
    struct fev last = q->e[--q->n];
    if (i != q->n)
        evq_move(q, i, &last);
}
#endif
