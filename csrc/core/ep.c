/* Endpoint objects, below the roles: the endpoint's creation and its keys,
 * the tables of protection domains, memory regions, peers, completion
 * queues and queue pairs. The rings that move through them (completions,
 * control packets, events) and posting are in rings.c. Calls nothing above
 * it: the roles call in here, never the other way (types.h has the
 * layering).
 *
 * Lock: every function here runs with the context's endpoint lock held. */
#include <string.h>

#include "core/ep.h"
#include "core/idmap.h"
#include "core/types.h"

static const char *const wc_status_names[] = {"SUCCESS", "LOC_LEN_ERR", "LOC_PROT_ERR", "REM_ACCESS_ERR",
                                              "RETRY_EXC_ERR", "WR_FLUSH_ERR", "REM_OP_ERR"};
static const char *const event_names[] = {NULL, "QP_FATAL", "PORT_ERR", "PORT_ACTIVE", "PEER_PORTS", "CQ_ERR"};
static const char *const drop_names[MRC_DROP_NREASONS] = {
    "malformed", "icrc", "unknown_qp", "qp_state", "psn_window", "rkey", "range", "duplicate", "no_recv", "trimmed",
    "stale_ack", "stale_probe", "wrong_peer", "pkey", "auth", "replay", "moved"};

#define NAME_OF(table, v) ((v) < sizeof(table) / sizeof((table)[0]) ? (table)[v] : NULL)
const char *mrc_wc_status_name(uint32_t s) { return NAME_OF(wc_status_names, s); }

static const char *const wc_status_words[] = {
    "done",
    "the message is longer than the receive buffer or the QP allows",
    "a scatter entry is outside its memory region (wrong lkey, offset or length, or another protection domain)",
    "the peer refused the access: its rkey, address range or rights do not allow it",
    "the peer stopped answering: it went away (stopped, crashed, closed the QP) or no path reaches it; retries ran "
    "out",
    "not done: the QP went to the error state before this request ran",
    "the peer could not do the operation (no receive posted for it, or an error at its end)"};
const char *mrc_wc_status_str(uint32_t s) { return NAME_OF(wc_status_words, s); }
const char *mrc_event_name(uint32_t t) { return NAME_OF(event_names, t); }
const char *mrc_drop_name(uint32_t r) { return NAME_OF(drop_names, r); }

/* ---------------------------------------------------------- a keyed PRF
 * SipHash-2-4 of one 64-bit word under the endpoint's secret: rkeys and QP
 * numbers come from it, so a peer that sees some cannot compute others. */
#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                            \
    do {                                                                                                     \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32); v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;      \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0; v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);     \
    } while (0)

static uint64_t siphash_u64(const uint64_t k[2], uint64_t m)
{
    uint64_t v0 = 0x736f6d6570736575ull ^ k[0], v1 = 0x646f72616e646f6dull ^ k[1];
    uint64_t v2 = 0x6c7967656e657261ull ^ k[0], v3 = 0x7465646279746573ull ^ k[1];
    const uint64_t b = 8ull << 56; /* an 8-byte message */
    v3 ^= m;
    SIPROUND;
    SIPROUND;
    v0 ^= m;
    v3 ^= b;
    SIPROUND;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t ep_prf(const struct mrc_ep *ep, uint64_t domain, uint64_t x) { return siphash_u64(ep->key, domain << 56 ^ x); }


/* A keyed bijection of a bits-wide count (a 4-round Feistel network, bits
 * even): the numbers it gives look random to a peer, and none comes again
 * until the count wraps, 2^bits numbers on. */
static uint32_t perm(const struct mrc_ep *ep, uint64_t domain, uint32_t bits, uint32_t x)
{
    uint32_t half = bits / 2, mask = (1u << half) - 1, l = x >> half & mask, r = x & mask;
    for (uint32_t round = 0; round < 4; round++) {
        uint32_t f = (uint32_t)ep_prf(ep, domain, (uint64_t)round << 32 | r) & mask;
        uint32_t t = r;
        r = l ^ f;
        l = t;
    }
    return l << half | r;
}

/* Lock: none (the endpoint is not shared yet). key: the PRF's secret. */
int ep_create(const struct mrc_ep_attr *attr, const uint64_t key[2], struct mrc_ep **out)
{
    struct mrc_ep *ep = calloc(1, sizeof(*ep));
    if (!ep)
        return -ENOMEM;
    ep->a = *attr;
    ep->key[0] = key[0];
    ep->key[1] = key[1];
    if (!ep->a.max_qps)
        ep->a.max_qps = 1024;
    if (!ep->a.cq_depth)
        ep->a.cq_depth = 65536;
    if (!ep->a.planes)
        ep->a.planes = 8;
    if (!ep->a.ev_event_depth)
        ep->a.ev_event_depth = 4096;
    for (uint32_t p = 0; p < MRC_MAX_PLANES; p++)
        ep->path_qpn[p] = UINT32_MAX; /* no QP has sent: the first one's own cursor stands */
    if (ep->a.planes > MRC_MAX_PLANES || ep->a.max_qps > MRC_MAX_QPS || ep->a.cq_depth > MRC_MAX_CQ_DEPTH ||
        ep->a.ev_event_depth > MRC_MAX_EV_EVENT_DEPTH) {
        free(ep);
        return -EINVAL;
    }
    if (!ep->a.port_bitmap)
        ep->a.port_bitmap = (uint32_t)((1ull << ep->a.planes) - 1);
    ep->port_up = ep->a.port_bitmap;
    ep->mr_cap = MR_CAP;
    for (uint32_t i = 0; i < MRC_MAX_PEERS; i++)
        ep->peer_host[i] = (uint16_t)i; /* each peer its own host until told otherwise */
    ep->pd_live = 1; /* PD 0 */
    ep->mrs = calloc(ep->mr_cap, sizeof(*ep->mrs));
    ep->qps = calloc(ep->a.max_qps, sizeof(*ep->qps));
    ep->act = calloc(ep->a.max_qps, sizeof(*ep->act));
    ep->dl = calloc(ep->a.max_qps, sizeof(*ep->dl));
    ep->dl_ports = calloc(ep->a.max_qps, sizeof(*ep->dl_ports));
    ep->dl_bits = calloc((ep->a.max_qps + 63) / 64, sizeof(*ep->dl_bits));
    ep->dl_heap = calloc(ep->a.max_qps, sizeof(*ep->dl_heap));
    ep->dl_hix = malloc(ep->a.max_qps * sizeof(*ep->dl_hix));
    if (ep->dl_hix)
        memset(ep->dl_hix, 0xFF, ep->a.max_qps * sizeof(*ep->dl_hix));
    ep->dl_all = 1;
    ep->ctl_size = MRC_CTRL_RING;
    ep->ctl = calloc(ep->ctl_size, sizeof(*ep->ctl));
    ep->evq_size = ep->a.ev_event_depth + 1;
    ep->evq = calloc(ep->evq_size, sizeof(*ep->evq));
    ep->probes = calloc(MRC_PROBE_MAX, sizeof(*ep->probes));
    uint32_t cq0;
    /* the maps' hashes are keyed: a peer cannot pick numbers that collide */
    int maps = idmap_init(&ep->qpmap, ep->a.max_qps, ep_prf(ep, PRF_MAP, 0), ep_prf(ep, PRF_MAP, 1)) |
               idmap_init(&ep->mrmap, ep->mr_cap, ep_prf(ep, PRF_MAP, 2), ep_prf(ep, PRF_MAP, 3));
    if (maps || !ep->mrs || !ep->qps || !ep->act || !ep->dl || !ep->dl_ports || !ep->dl_bits ||
        !ep->dl_heap || !ep->dl_hix || !ep->ctl ||
        !ep->evq || !ep->probes || ep_cq_create(ep, ep->a.cq_depth, &cq0) < 0) {
        ep_destroy(ep);
        return -ENOMEM;
    }
    *out = ep;
    return 0;
}

/* The endpoint's own memory (its QPs are gone: qp_destroy_all). */
void ep_destroy(struct mrc_ep *ep)
{
    if (!ep)
        return;
    for (uint32_t i = 0; i < MRC_MAX_CQS; i++)
        free(ep->cqs[i].ring);
    free(ep->qps);
    free(ep->act);
    free(ep->dl);
    free(ep->dl_ports);
    free(ep->dl_bits);
    free(ep->dl_heap);
    free(ep->dl_hix);
    free(ep->mrs);
    idmap_free(&ep->qpmap);
    idmap_free(&ep->mrmap);
    free(ep->ctl);
    free(ep->evq);
    free(ep->probes);
    free(ep);
}

void ep_drop(struct mrc_ep *ep, int why) { ep->drops[why]++; }

int ep_drops(struct mrc_ep *ep, uint64_t *counts, uint32_t n)
{
    for (uint32_t i = 0; i < n && i < MRC_DROP_NREASONS; i++)
        counts[i] = ep->drops[i];
    return MRC_DROP_NREASONS;
}

/* ------------------------------------------------------------ protection domains */
int ep_pd_alloc(struct mrc_ep *ep, uint32_t *pdn)
{
    for (uint32_t i = 0; i < MRC_MAX_PDS; i++) {
        if (!(ep->pd_live >> i & 1)) {
            ep->pd_live |= 1ull << i;
            ep->pd_users[i] = 0;
            *pdn = i;
            return 0;
        }
    }
    return -ENOSPC;
}

int ep_pd_dealloc(struct mrc_ep *ep, uint32_t pdn)
{
    if (pdn >= MRC_MAX_PDS || !(ep->pd_live >> pdn & 1))
        return -ENOENT;
    if (pdn == 0 || ep->pd_users[pdn])
        return -EBUSY; /* PD 0 lives as long as its context */
    ep->pd_live &= ~(1ull << pdn);
    return 0;
}

/* A region or QP takes (hold) or gives back a place in PD pdn. */
int ep_pd_hold(struct mrc_ep *ep, uint32_t pdn, int hold)
{
    if (pdn >= MRC_MAX_PDS || !(ep->pd_live >> pdn & 1))
        return -ENOENT;
    ep->pd_users[pdn] += hold ? 1 : (uint32_t)-1;
    return 0;
}

/* ------------------------------------------------------------ memory */
int ep_mr_reg(struct mrc_ep *ep, uint32_t pdn, void *addr, uint64_t length, uint32_t access, uint32_t *lkey,
              uint32_t *rkey)
{
    if ((!addr && length) || (uintptr_t)addr + length < (uintptr_t)addr || (access & ~3u))
        return -EINVAL;
    for (uint32_t i = 0; i < ep->mr_cap; i++) {
        if (ep->mrs[i].used)
            continue;
        int rc = ep_pd_hold(ep, pdn, 1);
        if (rc < 0)
            return rc;
        uint32_t key;
        do { /* 32 bits that no registration had in the last 2^32: never 0, never one still live */
            key = perm(ep, PRF_RKEY, 32, ep->mr_seq++);
        } while (key == 0 || idmap_get(&ep->mrmap, key) >= 0);
        ep->mrs[i] = (struct mr){.addr = addr, .len = length, .access = access, .key = key, .pd = pdn, .used = 1};
        idmap_put(&ep->mrmap, key, i);
        *lkey = *rkey = key;
        return 0;
    }
    return -ENOSPC;
}

struct mr *ep_mr(struct mrc_ep *ep, uint32_t key)
{
    int64_t i = idmap_get(&ep->mrmap, key);
    struct mr *m = i >= 0 ? &ep->mrs[i] : NULL;
    return m && m->used && m->key == key ? m : NULL;
}

int ep_mr_dereg(struct mrc_ep *ep, uint32_t lkey)
{
    struct mr *m = ep_mr(ep, lkey);
    if (!m)
        return -ENOENT;
    if (__atomic_load_n(&m->users, __ATOMIC_ACQUIRE))
        return -EBUSY; /* a queued WR still reads from it */
    ep_pd_hold(ep, m->pd, 0);
    idmap_del(&ep->mrmap, m->key);
    memset(m, 0, sizeof(*m));
    return 0;
}

/* A WR left its send queue (completed, flushed or discarded): its regions
 * may go. */
void ep_wqe_release(struct mrc_ep *ep, const struct wqe *w)
{
    for (uint32_t i = 0; i < w->wr.num_sge && i < MRC_MAX_SGE; i++) {
        struct mr *m = ep_mr(ep, w->wr.sg_list[i].lkey);
        if (m)
            __atomic_sub_fetch(&m->users, 1, __ATOMIC_RELEASE);
    }
}

/* ------------------------------------------------------------ peers */
void ep_set_peer_host(struct mrc_ep *ep, uint16_t peer, uint16_t host)
{
    if (peer < MRC_MAX_PEERS && host < MRC_MAX_PEERS)
        ep->peer_host[peer] = host;
}

/* A QP out of RESET is connected through peer index p. */
int ep_peer_in_use(const struct mrc_ep *ep, uint16_t p)
{
    for (uint32_t i = 0; i < ep->a.max_qps; i++)
        if (ep->qps[i] && ep->qps[i]->peer == p && ep->qps[i]->state != MRC_QPS_RESET)
            return 1;
    return 0;
}

/* Peer indices a and b are the same host (its addresses). */
int ep_same_host(const struct mrc_ep *ep, uint16_t a, uint16_t b)
{
    return a < MRC_MAX_PEERS && b < MRC_MAX_PEERS && ep->peer_host[a] == ep->peer_host[b];
}

/* ------------------------------------------------------------ completion queues */
struct cq *ep_cq(struct mrc_ep *ep, uint32_t cqn)
{
    return cqn < MRC_MAX_CQS && ep->cqs[cqn].used ? &ep->cqs[cqn] : NULL;
}

int ep_cq_create(struct mrc_ep *ep, uint32_t depth, uint32_t *cqn)
{
    if (depth == 0 || depth > MRC_MAX_CQ_DEPTH)
        return -EINVAL;
    for (uint32_t i = 0; i < MRC_MAX_CQS; i++) {
        struct cq *cq = &ep->cqs[i];
        if (cq->used)
            continue;
        *cq = (struct cq){.size = depth + 1};
        cq->ring = calloc(cq->size, sizeof(*cq->ring));
        if (!cq->ring)
            return -ENOMEM;
        cq->used = 1;
        ep->cq_live |= 1ull << i;
        *cqn = i;
        return 0;
    }
    return -ENOSPC;
}

int ep_cq_destroy(struct mrc_ep *ep, uint32_t cqn)
{
    struct cq *cq = ep_cq(ep, cqn);
    if (!cq)
        return -ENOENT;
    if (cq->users)
        return -EBUSY;
    free(cq->ring);
    memset(cq, 0, sizeof(*cq));
    ep->cq_live &= ~(1ull << cqn);
    ep->cq_dirty &= ~(1ull << cqn);
    return 0;
}

int ep_cq_query(struct mrc_ep *ep, uint32_t cqn, struct mrc_cq_stats *st)
{
    struct cq *cq = ep_cq(ep, cqn);
    if (!cq)
        return -ENOENT;
    *st = (struct mrc_cq_stats){.depth = cq->size - 1, .waiting = cq_used(cq), .overflow = cq->overflow};
    return 0;
}

/* ------------------------------------------------------------ the QP table */
struct qp *ep_qp(struct mrc_ep *ep, uint32_t qpn)
{
    int64_t idx = idmap_get(&ep->qpmap, qpn);
    struct qp *q = idx >= 0 ? ep->qps[idx] : NULL;
    if (!q)
        return NULL;
    qp_prefetch(q);
    return q->qpn == qpn ? q : NULL;
}

/* Give q a number and a place in the table. */
int ep_qp_insert(struct mrc_ep *ep, struct qp *q)
{
    for (uint32_t idx = 0; idx < ep->a.max_qps; idx++) {
        if (ep->qps[idx])
            continue;
        uint32_t qpn;
        do { /* 24 bits (what the wire carries) no QP had in the last 2^24: never 0, never one in use */
            qpn = perm(ep, PRF_QPN, 24, ep->qp_seq++);
        } while (qpn == 0 || idmap_get(&ep->qpmap, qpn) >= 0);
        q->qpn = qpn;
        q->idx = idx;
        ep->qps[idx] = q;
        idmap_put(&ep->qpmap, qpn, idx);
        return 0;
    }
    return -ENOSPC;
}

int ep_qp_list(const struct mrc_ep *ep, uint32_t *out, uint32_t max)
{
    uint32_t n = 0;
    for (uint32_t idx = 0; idx < ep->a.max_qps; idx++)
        if (ep->qps[idx]) {
            if (n < max)
                out[n] = ep->qps[idx]->qpn;
            n++;
        }
    return (int)n;
}

void ep_qp_remove(struct mrc_ep *ep, struct qp *q)
{
    ep_set_active(ep, q, 0);
    idmap_del(&ep->qpmap, q->qpn);
    ep->qps[q->idx] = NULL;
}

/* ------------------------------------------------------------ kept times */
/* The active slots in a binary min-heap by dl (struct mrc_ep, dl_heap). */
static void heap_set(struct mrc_ep *ep, uint32_t i, uint32_t idx)
{
    ep->dl_heap[i] = idx;
    ep->dl_hix[idx] = i;
}

static void heap_fix(struct mrc_ep *ep, uint32_t i)
{
    uint32_t idx = ep->dl_heap[i];
    uint64_t t = ep->dl[idx];
    while (i && ep->dl[ep->dl_heap[(i - 1) / 2]] > t) {
        heap_set(ep, i, ep->dl_heap[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= ep->dl_hn)
            break;
        if (c + 1 < ep->dl_hn && ep->dl[ep->dl_heap[c + 1]] < ep->dl[ep->dl_heap[c]])
            c++;
        if (ep->dl[ep->dl_heap[c]] >= t)
            break;
        heap_set(ep, i, ep->dl_heap[c]);
        i = c;
    }
    heap_set(ep, i, idx);
}

static void ports_count(struct mrc_ep *ep, uint32_t ports, int by)
{
    for (uint32_t m = ports; m; m &= m - 1) {
        uint32_t b = (uint32_t)__builtin_ctz(m);
        ep->dl_pcnt[b] += (uint32_t)by;
        ep->dl_any = ep->dl_pcnt[b] ? ep->dl_any | 1u << b : ep->dl_any & ~(1u << b);
    }
}

/* What is kept of the QP in slot idx, computed again (dispatch.c, qp_due):
 * the heap and the ports' counts follow when it is active. */
void ep_dl_store(struct mrc_ep *ep, uint32_t idx, uint64_t dl, uint32_t ports)
{
    uint32_t i = ep->dl_hix[idx];
    if (i != UINT32_MAX && ports != ep->dl_ports[idx]) {
        ports_count(ep, ep->dl_ports[idx], -1);
        ports_count(ep, ports, 1);
    }
    uint64_t was = ep->dl[idx];
    ep->dl[idx] = dl;
    ep->dl_ports[idx] = ports;
    if (i != UINT32_MAX && dl != was)
        heap_fix(ep, i);
}

/* The earliest kept time of an active QP (exact when none is dirty). */
uint64_t ep_dl_min(const struct mrc_ep *ep) { return ep->dl_hn ? ep->dl[ep->dl_heap[0]] : MRC_INF_NS; }

/* Every port some active QP needs one of (the union of their dl_ports). */
uint32_t ep_dl_ports_any(const struct mrc_ep *ep) { return ep->dl_any; }

/* The active list: the QPs the tx path visits (and the heap of their kept
 * times: a QP joins it with nothing kept, to be computed at once). */
void ep_set_active(struct mrc_ep *ep, struct qp *q, int on)
{
    uint32_t idx = q->idx;
    for (uint32_t i = 0; i < ep->nact; i++) {
        if (ep->act[i] == idx) {
            if (!on) {
                ep->act[i] = ep->act[--ep->nact];
                uint32_t h = ep->dl_hix[idx], last = ep->dl_heap[--ep->dl_hn];
                ports_count(ep, ep->dl_ports[idx], -1);
                ep->dl_hix[idx] = UINT32_MAX;
                ep->dl[idx] = MRC_INF_NS;
                ep->dl_ports[idx] = 0;
                if (h < ep->dl_hn) {
                    heap_set(ep, h, last);
                    heap_fix(ep, h);
                }
            }
            return;
        }
    }
    if (on) {
        ep->act[ep->nact++] = idx;
        ep->dl[idx] = MRC_INF_NS;
        ep->dl_ports[idx] = 0;
        heap_set(ep, ep->dl_hn++, idx);
        heap_fix(ep, ep->dl_hn - 1);
        ep_dl_stale(ep, idx);
    }
}
