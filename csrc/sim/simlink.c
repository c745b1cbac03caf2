/* In-memory link: a deterministic simulated fabric for tests, benchmarks and
 * simulation (architecture.md: "the simulated link is a first-class part of
 * the product"). Paths have delay, jitter (reordering), loss (seeded
 * probability or a 64-bit mask), duplication, trimming, a rate with a queue
 * that marks ECN above a threshold, and down/flap intervals. The run loop
 * lives in C: Python only starts it and reads the results. It drives each
 * endpoint through dispatch.c's entry points, as the engine thread does.
 *
 * Lock: none; the caller drives the link and its contexts (which have no
 * engine thread) from one thread. */
#include "core/rings.h"
#include "mrc_manual.h"
#include "sim/evheap.h"

enum { SIM_MAX_EPS = 8, SIM_TXBUF = 1 << 20, SIM_TXD = 256, SIM_BUFSZ = 9216 };

/* A packet on its way: in its slot of pk, its arrival an event of the
 * event heap (evheap.h, as the fabric simulator's) whose index is the slot. */
struct sim_pkt {
    uint8_t *data;
    uint32_t len;
    uint32_t next;       /* a free slot: the next free one (UINT32_MAX: none) */
    uint16_t dst;
    struct mrc_meta m;
};

struct mrc_sim {
    uint32_t planes, per_plane, npaths;
    struct mrc_sim_path *paths;
    uint64_t *busy;      /* npaths x SIM_MAX_EPS: when the path's queue toward an ep drains */
    uint64_t *txn;       /* packets offered per path (loss mask position) */
    uint64_t port_bps[MRC_MAX_PLANES];            /* 0: the host port is not a limit */
    uint64_t port_busy[SIM_MAX_EPS][MRC_MAX_PLANES]; /* when an ep's port on a plane is free */
    struct mrc_ep *eps[SIM_MAX_EPS];
    uint32_t neps;
    struct evheap q;
    struct sim_pkt *pk;
    uint32_t pkcap, pfree;
    uint64_t seq;
    uint8_t **freel;
    uint32_t nfree, free_cap;
    uint64_t rng;
    uint64_t now;
    struct mrc_sim_stats st;
    uint8_t *txbuf;
    struct mrc_txdesc *txd;
    uint8_t *rec;        /* mrc_sim_record: where delivered packets are copied */
    uint32_t rec_cap, rec_len;
};

static uint64_t rnd(struct mrc_sim *s)
{
    uint64_t x = s->rng; /* xorshift64* */
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    s->rng = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static int chance(struct mrc_sim *s, uint32_t ppm) { return ppm && (rnd(s) % 1000000) < ppm; }

/* One delivered packet into the recording: 8 bytes of header (length,
 * destination, plane | 0x10 CE | 0x20 trimmed, EV; little endian), then the
 * packet. */
static void record(struct mrc_sim *s, const struct sim_pkt *p)
{
    if (s->rec_len + 8 + p->len > s->rec_cap)
        return;
    uint8_t *r = s->rec + s->rec_len;
    r[0] = (uint8_t)p->len;
    r[1] = (uint8_t)(p->len >> 8);
    r[2] = (uint8_t)p->dst;
    r[3] = (uint8_t)((p->m.port & 0xF) | (p->m.ecn_ce ? 0x10 : 0) | (p->m.trimmed ? 0x20 : 0));
    for (int i = 0; i < 4; i++)
        r[4 + i] = (uint8_t)(p->m.ev >> (8 * i));
    memcpy(r + 8, p->data, p->len);
    s->rec_len += 8 + p->len;
}

int mrc_sim_record(struct mrc_sim *s, uint8_t *buf, uint32_t cap)
{
    s->rec = buf;
    s->rec_cap = buf ? cap : 0;
    s->rec_len = 0;
    return 0;
}

uint32_t mrc_sim_recorded(const struct mrc_sim *s) { return s->rec_len; }

int mrc_sim_create(uint32_t planes, uint32_t per_plane, uint64_t seed, struct mrc_sim **out)
{
    if (!planes || planes > MRC_MAX_PLANES || !per_plane || planes * per_plane > 4096)
        return -EINVAL;
    struct mrc_sim *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->planes = planes;
    s->per_plane = per_plane;
    s->npaths = planes * per_plane;
    s->paths = calloc(s->npaths, sizeof(*s->paths));
    s->busy = calloc((size_t)s->npaths * SIM_MAX_EPS, sizeof(uint64_t));
    s->txn = calloc(s->npaths, sizeof(uint64_t));
    s->pfree = UINT32_MAX;
    int qrc = evq_init(&s->q, 4096, NULL, 0);
    s->free_cap = 8192;
    s->freel = malloc(s->free_cap * sizeof(*s->freel));
    s->txbuf = malloc(SIM_TXBUF);
    s->txd = malloc(SIM_TXD * sizeof(*s->txd));
    s->rng = seed ? seed : 0x9E3779B97F4A7C15ull;
    if (!s->paths || !s->busy || !s->txn || qrc < 0 || !s->freel || !s->txbuf || !s->txd) {
        mrc_sim_destroy(s);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < s->npaths; i++)
        s->paths[i].delay_ns = 2000;
    *out = s;
    return 0;
}

void mrc_sim_destroy(struct mrc_sim *s)
{
    if (!s)
        return;
    for (uint64_t i = 0; i < s->q.n; i++)
        free(s->pk[fev_idx(&s->q.e[i])].data);
    for (uint32_t i = 0; i < s->nfree; i++)
        free(s->freel[i]);
    free(s->paths);
    free(s->busy);
    free(s->txn);
    evq_free(&s->q);
    free(s->pk);
    free(s->freel);
    free(s->txbuf);
    free(s->txd);
    free(s);
}

int mrc_sim_attach(struct mrc_sim *s, struct mrc_ep *ep)
{
    if (s->neps == SIM_MAX_EPS)
        return -ENOSPC;
    s->eps[s->neps] = ep;
    return (int)s->neps++;
}

int mrc_sim_set_path(struct mrc_sim *s, uint32_t path, const struct mrc_sim_path *p)
{
    if (path >= s->npaths)
        return -EINVAL;
    s->paths[path] = *p;
    return 0;
}

int mrc_sim_get_path(struct mrc_sim *s, uint32_t path, struct mrc_sim_path *p)
{
    if (path >= s->npaths)
        return -EINVAL;
    *p = s->paths[path];
    return 0;
}

int mrc_sim_stats(struct mrc_sim *s, struct mrc_sim_stats *st)
{
    *st = s->st;
    st->now_ns = s->now;
    return 0;
}

static uint8_t *buf_get(struct mrc_sim *s) { return s->nfree ? s->freel[--s->nfree] : malloc(SIM_BUFSZ); }

static void buf_put(struct mrc_sim *s, uint8_t *b)
{
    if (s->nfree < s->free_cap)
        s->freel[s->nfree++] = b;
    else
        free(b);
}

/* The packet arrives at t: a slot for it, an event for the slot. */
static int pkt_push(struct mrc_sim *s, const struct sim_pkt *p, uint64_t t)
{
    if (s->pfree == UINT32_MAX) {
        uint32_t cap = s->pkcap ? 2 * s->pkcap : 64; /* grows with what is in flight */
        struct sim_pkt *n = cap - 1 > FEV_IDX_MAX ? NULL : realloc(s->pk, cap * sizeof(*n));
        if (!n)
            return -ENOMEM;
        for (uint32_t i = cap; i-- > s->pkcap;)
            n[i].next = i + 1 < cap ? i + 1 : UINT32_MAX;
        s->pfree = s->pkcap;
        s->pk = n;
        s->pkcap = cap;
    }
    uint32_t slot = s->pfree;
    int rc = evq_push(&s->q, t, s->seq, 0, slot);
    if (rc < 0)
        return rc;
    s->seq++;
    s->pfree = s->pk[slot].next;
    s->pk[slot] = *p;
    return 0;
}

/* The first packet to arrive, out of the heap and its slot. */
static struct sim_pkt pkt_pop(struct mrc_sim *s)
{
    struct fev e = evq_pop(&s->q);
    uint32_t slot = fev_idx(&e);
    struct sim_pkt p = s->pk[slot];
    s->pk[slot].next = s->pfree;
    s->pfree = slot;
    return p;
}

static int path_down(const struct mrc_sim_path *p, uint64_t now)
{
    if (now < p->down_from_ns || now >= p->down_until_ns)
        return 0;
    if (!p->flap_period_ns)
        return 1;
    return ((now - p->down_from_ns) % p->flap_period_ns) < p->flap_period_ns / 2;
}

static void offer(struct mrc_sim *s, uint32_t src, const struct mrc_txdesc *d, const uint8_t *data)
{
    uint32_t plane = ev_plane(d->ev) % s->planes;
    uint32_t path = plane * s->per_plane + ev_entropy(d->ev) % s->per_plane;
    struct mrc_sim_path *P = &s->paths[path];
    uint32_t dst = d->peer;
    if (dst >= s->neps || d->len > SIM_BUFSZ) {
        s->st.dropped++;
        return;
    }
    s->st.per_path_tx[path & 255]++;
    uint64_t n = s->txn[path]++;
    if (path_down(P, s->now) || (P->loss_mask & (1ull << (n & 63))) || chance(s, P->loss_ppm)) {
        s->st.dropped++;
        return;
    }
    uint64_t depart = s->now, qbytes = 0;
    if (s->port_bps[plane]) {
        /* the sender's own port on this plane first (a host queue: no marks) */
        uint64_t *pb = &s->port_busy[src][plane];
        *pb = (*pb > s->now ? *pb : s->now) + (uint64_t)d->len * 8000000000ull / s->port_bps[plane];
        depart = *pb;
    }
    if (P->rate_bps) {
        uint64_t *busy = &s->busy[(size_t)path * SIM_MAX_EPS + dst];
        uint64_t start = *busy > depart ? *busy : depart;
        qbytes = (start - depart) * P->rate_bps / 8000000000ull;
        *busy = start + (uint64_t)d->len * 8000000000ull / P->rate_bps;
        depart = *busy;
    }
    struct sim_pkt pk = {.dst = (uint16_t)dst, .len = d->len};
    pk.m.ev = d->ev;
    pk.m.peer = (uint16_t)src;
    pk.m.port = (uint8_t)plane;
    if ((d->tclass & 3) && P->ecn_queue_bytes && qbytes > P->ecn_queue_bytes) {
        pk.m.ecn_ce = 1;
        s->st.ecn_marked++;
    }
    uint32_t len = d->len;
    if (d->is_data && (chance(s, P->trim_ppm) || (P->trim_queue_bytes && qbytes > P->trim_queue_bytes))) {
        len = d->hdr; /* the switch keeps the headers through ImmDt */
        pk.m.trimmed = 1;
        s->st.trimmed++;
    }
    for (int copy = 0; copy < 1 + chance(s, P->dup_ppm); copy++) {
        pk.data = buf_get(s);
        if (!pk.data)
            return;
        memcpy(pk.data, data, len);
        pk.len = len;
        uint64_t t = depart + P->delay_ns + (P->jitter_ns ? rnd(s) % P->jitter_ns : 0) + (uint64_t)copy * 1000;
        if (copy)
            s->st.duplicated++;
        if (pkt_push(s, &pk, t) < 0)
            buf_put(s, pk.data);
    }
}

int mrc_sim_set_port_rate(struct mrc_sim *s, uint32_t plane, uint64_t rate_bps)
{
    if (plane >= s->planes)
        return -EINVAL;
    s->port_bps[plane] = rate_bps;
    return 0;
}

/* Advance simulated time to until_ns, or until the link is idle, or (with
 * stop_on_cqe) until a completion is waiting. Returns 1 if it stopped for a
 * completion, 0 otherwise. */
int mrc_sim_run(struct mrc_sim *s, uint64_t until_ns, uint32_t stop_on_cqe)
{
    for (;;) {
        uint64_t progress = 0;
        for (uint32_t i = 0; i < s->neps; i++) {
            int n;
            do {
                n = mrc_ep_poll_tx(s->eps[i], s->now, s->txbuf, SIM_TXBUF, s->txd, SIM_TXD);
                for (int k = 0; k < n; k++)
                    offer(s, i, &s->txd[k], s->txbuf + s->txd[k].off);
                progress += (uint64_t)(n > 0 ? n : 0);
            } while (n == SIM_TXD);
        }
        while (s->q.n && s->q.e[0].t <= s->now) {
            struct sim_pkt p = pkt_pop(s);
            if (s->rec)
                record(s, &p);
            mrc_ep_input(s->eps[p.dst], p.data, p.len, &p.m, s->now);
            buf_put(s, p.data);
            s->st.delivered++;
            s->st.events++;
            progress++;
        }
        for (uint32_t i = 0; i < s->neps; i++)
            if (ep_cq_pending(s->eps[i]) > (stop_on_cqe ? 0 : 1))
                return 1;
        if (progress)
            continue;
        uint64_t next = s->q.n ? s->q.e[0].t : MRC_INF_NS;
        for (uint32_t i = 0; i < s->neps; i++) {
            uint64_t t = mrc_ep_next_timer(s->eps[i], s->now);
            if (t < next)
                next = t;
        }
        if (next == MRC_INF_NS) { /* idle: nothing will happen before until_ns */
            if (until_ns != MRC_INF_NS && until_ns > s->now)
                s->now = until_ns;
            return 0;
        }
        if (next <= s->now)
            next = s->now + 100; /* a timer that is due but made no progress: step on */
        if (next > until_ns) {
            s->now = until_ns > s->now ? until_ns : s->now;
            return 0;
        }
        s->now = next;
    }
}
