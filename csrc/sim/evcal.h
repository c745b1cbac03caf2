/* A calendar of near events in front of the event heap (evheap.h). Most of
 * a fabric's events are a packet reaching its next node, and each falls
 * within one wire time and one hop of now: a ring of nb buckets, each
 * 2^shift time units wide, from the bucket of now on, covers that horizon.
 * A bucket keeps its events as a list in order (time, then sequence
 * number), and a bit says which buckets hold any: an event goes in at the
 * head of its bucket's list or a few steps from its tail, and comes out of
 * the first nonempty bucket, where the heap takes a step per level of a
 * tree of thousands. The rest go to the heap: an event beyond the ring (or
 * before its start), or one whose place is deeper in a list (a bucket may
 * hold thousands of events of one time, NICs that started together, and
 * a port's next packet keeps the sequence number it took when it joined
 * the port, older than theirs). In a large fabric of NICs that move in
 * step most events are such, and the calendar then stands aside for a
 * while. Whichever of the two holds the earlier event runs it: the order
 * is the one the heap alone would give. Static inline, for the
 * simulator's loop. */
#ifndef MRC_EVCAL_H
#define MRC_EVCAL_H
#include "sim/evheap.h"

struct evcal_node { struct fev e; uint32_t next, prev; };
/* the longest walk from a bucket's tail; of every EVCAL_WINDOW events on
 * the ring, less than half taken (the rest found their place deeper):
 * the next EVCAL_REST go to the heap without a look */
enum { EVCAL_WALK = 16, EVCAL_WINDOW = 1 << 16, EVCAL_REST = 1 << 20 };

/* node: the events held, each bucket's in a list both ways (node 0 is
 * unused: index 0 ends a list); free: a list of unused ones; head, tail
 * and bits: each bucket's first and last node and whether it has one.
 * Every event held is in the buckets [cur, cur + nb). */
struct evcal {
    struct evcal_node *node;
    uint32_t nodes, cap, free;
    uint32_t *head, *tail;
    uint64_t *bits;
    uint64_t cur, n;
    uint32_t shift, nb;
    uint32_t tries, taken, rest;
};

/* A ring of nb buckets (a power of 2, at least 64) spanning at least
 * horizon time units. */
static inline int evcal_init(struct evcal *c, uint64_t horizon, uint32_t nb)
{
    *c = (struct evcal){.nb = nb, .cap = 1024, .nodes = 1};
    while (((uint64_t)nb << c->shift) < horizon)
        c->shift++;
    c->node = malloc(c->cap * sizeof(*c->node));
    c->head = calloc(nb, sizeof(*c->head));
    c->tail = calloc(nb, sizeof(*c->tail));
    c->bits = calloc(nb / 64, sizeof(*c->bits));
    return c->node && c->head && c->tail && c->bits ? 0 : -ENOMEM;
}

static inline void evcal_free(struct evcal *c)
{
    free(c->node), free(c->head), free(c->tail), free(c->bits);
    *c = (struct evcal){0};
}

static inline uint64_t evcal_bytes(const struct evcal *c)
{
    return c->cap * sizeof(*c->node) + c->nb * (sizeof(*c->head) + sizeof(*c->tail)) + c->nb / 8;
}

/* The event, if its place in its bucket of the ring is first or within
 * EVCAL_WALK of the last (1); else 0 (the heap's), or -ENOMEM. */
static inline int evcal_push(struct evcal *c, uint64_t t, uint64_t seq, uint32_t kind, uint32_t idx)
{
    uint64_t b = t >> c->shift;
    if (c->rest) { /* most went to the heap lately: all do for a while */
        c->rest--;
        return 0;
    }
    if (b - c->cur >= c->nb || idx > FEV_IDX_MAX || seq > FEV_SEQ_MAX)
        return 0;
    if (++c->tries == EVCAL_WINDOW) {
        if (2 * c->taken < c->tries)
            c->rest = EVCAL_REST;
        c->tries = c->taken = 0;
    }
    struct fev e = fev_make(t, seq, kind, idx);
    uint32_t s = (uint32_t)b & (c->nb - 1), first = c->head[s], after = 0;
    if (first && !ev_before(&e, &c->node[first].e)) { /* after the last event not later, looked for from the end */
        int k = 0;
        for (after = c->tail[s]; ev_before(&e, &c->node[after].e); after = c->node[after].prev)
            if (++k > EVCAL_WALK)
                return 0;
    }
    c->taken++;
    uint32_t i = c->free;
    if (i) {
        c->free = c->node[i].next;
    } else {
        if (c->nodes == c->cap) {
            struct evcal_node *m = realloc(c->node, 2 * c->cap * sizeof(*m));
            if (!m)
                return -ENOMEM;
            c->node = m;
            c->cap *= 2;
        }
        i = c->nodes++;
    }
    struct evcal_node *x = &c->node[i];
    x->e = e;
    x->prev = after;
    x->next = after ? c->node[after].next : first;
    *(after ? &c->node[after].next : &c->head[s]) = i;
    *(x->next ? &c->node[x->next].prev : &c->tail[s]) = i;
    c->bits[s / 64] |= 1ull << (s % 64);
    c->n++;
    return 1;
}

/* The earliest event held (there must be one); the ring then starts at its
 * bucket, none being earlier. */
static inline struct fev *evcal_top(struct evcal *c)
{
    uint32_t mask = c->nb - 1, m = (uint32_t)c->cur & mask, w = m / 64, words = c->nb / 64;
    uint64_t word = c->bits[w] & (~0ull << (m % 64));
    while (!word) {
        w = (w + 1) & (words - 1);
        word = c->bits[w];
    }
    uint32_t s = w * 64 + (uint32_t)__builtin_ctzll(word);
    c->cur += (s - m) & mask;
    return &c->node[c->head[s]].e;
}

/* The earliest event, taken out (evcal_top found it: the ring starts at
 * its bucket). */
static inline struct fev evcal_pop(struct evcal *c)
{
    uint32_t s = (uint32_t)c->cur & (c->nb - 1), i = c->head[s];
    struct fev e = c->node[i].e;
    c->head[s] = c->node[i].next;
    if (c->head[s])
        c->node[c->head[s]].prev = 0;
    else
        c->bits[s / 64] &= ~(1ull << (s % 64));
    c->node[i].next = c->free;
    c->free = i;
    c->n--;
    return e;
}
#endif
