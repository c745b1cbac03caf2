/* An open-addressing map from a 32-bit id (never 0) to a table slot: QP
 * numbers and memory keys are random, not derived from their slot, and are
 * found through it. Linear probing at a load of at most one half; the hash
 * is keyed by the endpoint's secret, so a peer cannot pick ids that
 * collide; removal shifts the run back (no tombstones, probes stay short).
 * Not part of any contract with users (ep.c owns the endpoint's two maps). */
#ifndef MRC_IDMAP_H
#define MRC_IDMAP_H
#include <stdint.h>
#include <stdlib.h>

struct idmap { uint32_t *id, *slot; uint32_t mask; uint64_t k0, k1; };

static inline int idmap_init(struct idmap *m, uint32_t n, uint64_t k0, uint64_t k1)
{
    uint32_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    m->id = calloc(cap, sizeof(*m->id));
    m->slot = calloc(cap, sizeof(*m->slot));
    m->mask = cap - 1;
    m->k0 = k0;
    m->k1 = k1 | 1; /* an odd multiplier */
    return m->id && m->slot ? 0 : -1;
}

static inline void idmap_free(struct idmap *m)
{
    free(m->id);
    free(m->slot);
    m->id = m->slot = NULL;
}

static inline uint32_t idmap_home(const struct idmap *m, uint32_t id)
{
    return (uint32_t)((((uint64_t)id ^ m->k0) * m->k1) >> 32) & m->mask;
}

/* The slot of id, or -1. */
static inline int64_t idmap_get(const struct idmap *m, uint32_t id)
{
    if (!id)
        return -1;
    for (uint32_t i = idmap_home(m, id);; i = (i + 1) & m->mask) {
        if (m->id[i] == id)
            return m->slot[i];
        if (!m->id[i])
            return -1;
    }
}

/* id must be absent and the map below half full (the caller sized it). */
static inline void idmap_put(struct idmap *m, uint32_t id, uint32_t slot)
{
    uint32_t i = idmap_home(m, id);
    while (m->id[i])
        i = (i + 1) & m->mask;
    m->id[i] = id;
    m->slot[i] = slot;
}

static inline void idmap_del(struct idmap *m, uint32_t id)
{
    uint32_t i = idmap_home(m, id);
    while (m->id[i] != id) {
        if (!m->id[i])
            return;
        i = (i + 1) & m->mask;
    }
    m->id[i] = 0;
    /* move back every later entry of the run whose home is not between the hole and it */
    for (uint32_t j = (i + 1) & m->mask; m->id[j]; j = (j + 1) & m->mask) {
        uint32_t h = idmap_home(m, m->id[j]);
        int stays = i <= j ? (h > i && h <= j) : (h > i || h <= j);
        if (stays)
            continue;
        m->id[i] = m->id[j];
        m->slot[i] = m->slot[j];
        m->id[j] = 0;
        i = j;
    }
}
#endif
