/* EV manager (protocol.md section 3, "Spraying"): a QP's EV set split
 * equally over planes and the EV state machine:
 * SKIP after congestion, ASSUMED_BAD after a loss (replaced at once by a
 * spare on the same plane, on a path the rotation does not use when the
 * plane's paths are known, else passed over; then probed until probe_k
 * probes in a row succeed), DENIED by the controller, and an ev_min_active
 * floor.
 *
 * ev_transition() is the only writer of an EV's state and the only emitter
 * of EV events. SKIP is this implementation's short detour: the controller
 * sees a SKIP EV as GOOD, so moves into and out of SKIP are reported as if
 * the EV had been GOOD.
 *
 * Slots are the rotation (ev_pick.c): slot i always belongs to plane
 * i % planes, so plane load stays equal when EVs are replaced, and a plane
 * that is down is simply passed over. EV values are built and taken apart
 * only through ev_make/ev_plane/ev_entropy (hdr.h).
 *
 * Lock: every function here runs with the endpoint lock held. Calls ep.c. */
#include "core/ep.h"
#include "core/ev.h"
#include "core/rings.h"
#include "core/types.h"

static const char *const state_names[] = {"GOOD", "SKIP", "ASSUMED_BAD", "DENIED", "UNKNOWN"};

const char *mrc_ev_state_name(uint32_t s)
{
    return s < sizeof(state_names) / sizeof(state_names[0]) ? state_names[s] : NULL;
}

/* allowed[from][to]: the transitions of an EV of a QP. UNKNOWN (an entry
 * not populated yet, mrc_ctl.h) never occurs in a QP's set. */
static const uint8_t allowed[5][5] = {
    /*                GOOD SKIP BAD DENIED UNKNOWN */
    /* GOOD */        {1, 1, 1, 1, 0},
    /* SKIP */        {1, 1, 1, 1, 0},
    /* ASSUMED_BAD */ {1, 0, 0, 1, 0},
    /* DENIED */      {1, 0, 0, 0, 0},
    /* UNKNOWN */     {0, 0, 0, 0, 0},
};


/* A QP's EVs: the rotation's and the spares (the application asks too, mrc.h). */
uint32_t mrc_qp_ev_total(const struct mrc_qp_attr *a) { return a->ev_count + a->ev_backup * a->planes; }

int ev_init(struct qp *q)
{
    uint32_t P = q->a.planes;
    q->nslots = q->a.ev_count;
    q->nevs = mrc_qp_ev_total(&q->a);
    q->evs = calloc(q->nevs, sizeof(*q->evs));
    q->slot = calloc(q->nslots, sizeof(*q->slot));
    if (!q->evs || !q->slot)
        return -ENOMEM;
    for (uint32_t i = 0; i < q->a.ev_count; i++) {
        q->evs[i].ev = ev_make(i % P, i / P);
        q->evs[i].in_slot = 1;
        q->slot[i] = (uint16_t)i;
    }
    ev_place_spares(q, 0);
    return 0;
}

/* The spares' entropies: spare b of a plane has base + (off + b) % span,
 * span a multiple of base (the rotation's EVs per plane) and at least
 * ev_backup, off from seed (a hash of the QP's number, qp.c). A path is an
 * entropy mod the plane's paths, which divide base when the rotation covers
 * them equally: so each QP's first spare takes another path. Were every
 * QP's first spare at entropy base, the EVs a dead spine took from every
 * QP would all be replaced on the one spine of that entropy, which would
 * then carry twice its share. */
void ev_place_spares(struct qp *q, uint32_t seed)
{
    uint32_t P = q->a.planes, base = ev_per_plane(q), B = q->a.ev_backup;
    uint32_t span = B ? (B + base - 1) / base * base : 1;
    if ((uint64_t)base + span > (uint64_t)MRC_EV_ENTROPY_MASK + 1) { /* no room: base + b, as they were */
        span = B ? B : 1;
        seed = 0;
    }
    q->spare_span = span;
    q->spare_off = seed % span;
    for (uint32_t p = 0; p < P; p++)
        for (uint32_t b = 0; b < B; b++)
            q->evs[q->a.ev_count + p * B + b].ev = ev_make(p, base + (q->spare_off + b) % span);
}

struct ev_entry *ev_find(struct qp *q, uint32_t ev)
{
    uint32_t p = ev_plane(ev), e = ev_entropy(ev), base = ev_per_plane(q);
    if (p >= q->a.planes)
        return NULL;
    if (e < base)
        return &q->evs[e * q->a.planes + p];
    uint32_t b = (e - base + q->spare_span - q->spare_off) % q->spare_span; /* which spare, if it is one */
    if (e - base >= q->spare_span || b >= q->a.ev_backup)
        return NULL;
    return &q->evs[q->a.ev_count + p * q->a.ev_backup + b];
}

/* EVs of the rotation that carry traffic (GOOD or SKIP), and those that are ASSUMED_BAD. */
uint32_t ev_count_good(const struct qp *q)
{
    uint32_t n = 0;
    for (uint32_t s = 0; s < q->nslots; s++) {
        uint8_t st = q->evs[q->slot[s]].state;
        n += (st == MRC_EV_GOOD || st == MRC_EV_SKIP);
    }
    return n;
}

uint32_t ev_count_bad(const struct qp *q)
{
    uint32_t n = 0;
    for (uint32_t s = 0; s < q->nslots; s++)
        n += q->evs[q->slot[s]].state == MRC_EV_ASSUMED_BAD;
    return n;
}

/* Does an EV of q's rotation that carries traffic take this path of the plane? */
static int path_in_use(const struct qp *q, uint32_t plane, uint32_t path, uint32_t np)
{
    for (uint32_t s = 0; s < q->nslots; s++) {
        const struct ev_entry *e = &q->evs[q->slot[s]];
        if (ev_plane(e->ev) == plane && ev_entropy(e->ev) % np == path &&
            (e->state == MRC_EV_GOOD || e->state == MRC_EV_SKIP))
            return 1;
    }
    return 0;
}

/* May spare c stand in for bad (same plane, GOOD, not in a slot)? When
 * the plane's paths are known (np), only on a path that is not bad's and
 * that the rotation does not use yet. */
static int spare_fits(const struct qp *q, const struct ev_entry *c, const struct ev_entry *bad, uint32_t plane,
                      uint32_t np)
{
    if (c->in_slot || c->state != MRC_EV_GOOD || ev_plane(c->ev) != plane)
        return 0;
    uint32_t path = np ? ev_entropy(c->ev) % np : 0;
    return !np || (path != ev_entropy(bad->ev) % np && !path_in_use(q, plane, path, np));
}

/* Put a GOOD spare of the same plane into the slot of a retired EV. When
 * the plane's paths are known, only a spare on a path the rotation does not
 * use yet: one on a path it uses would double that path's share of the QP,
 * and a spine whose EVs every QP replaced that way would carry far more
 * than the others. Without such a spare the slot is passed over, and the plane's
 * other EVs, spread over its live paths, carry the QP's share of the plane
 * that its capacity still allows. */
static void replace_in_slot(struct qp *q, struct ev_entry *bad)
{
    uint32_t bi = (uint32_t)(bad - q->evs), plane = ev_plane(bad->ev);
    uint32_t np = plane < MRC_MAX_PLANES ? q->ev_paths[plane] : 0;
    for (uint32_t s = 0; s < q->nslots; s++) {
        if (q->slot[s] != bi)
            continue;
        for (uint32_t i = 0; i < q->nevs; i++) {
            struct ev_entry *c = &q->evs[i];
            if (spare_fits(q, c, bad, plane, np)) {
                q->slot[s] = (uint16_t)i;
                c->in_slot = 1;
                bad->in_slot = 0;
                return;
            }
        }
        return; /* no spare: the slot keeps the bad EV and is passed over */
    }
}

/* An EV of the initial rotation that is GOOD again takes its own slot back
 * from the spare that stood in for it, so its path carries its share again
 * (else a path retired once stays out of the rotation and the spines of a
 * plane are loaded unequally). Slot i started with EV i. */
static void restore_slot(struct qp *q, struct ev_entry *e)
{
    uint32_t bi = (uint32_t)(e - q->evs);
    if (e->in_slot || bi >= q->nslots || q->slot[bi] == bi)
        return;
    q->evs[q->slot[bi]].in_slot = 0;
    q->slot[bi] = (uint16_t)bi;
    e->in_slot = 1;
}

static void emit(struct mrc_ep *ep, struct qp *q, uint32_t ev, uint8_t old, uint8_t st, uint64_t now)
{
    struct mrc_ev_event e = {.qpn = q->qpn, .ev = ev, .old_state = old, .new_state = st, .t_ns = now,
                             .cause_ns = st == MRC_EV_ASSUMED_BAD ? q->loss_sent_ns : 0};
    ep_ev_event(ep, &e);
}

/* Move e to state st: the table says whether it may; leaving a state and
 * entering the new one do their work (entering SKIP (again) starts its
 * timer; ASSUMED_BAD starts probing and hands the slot to a spare, as DENIED
 * does; GOOD takes the EV's own slot back); the controller hears of it,
 * with SKIP shown as GOOD. */
void ev_transition(struct mrc_ep *ep, struct qp *q, struct ev_entry *e, uint8_t st, uint64_t now)
{
    uint8_t old = e->state;
    if ((old == st && st != MRC_EV_SKIP) || old > MRC_EV_UNKNOWN || st > MRC_EV_UNKNOWN || !allowed[old][st])
        return;
    if (old == MRC_EV_ASSUMED_BAD)
        q->nbad--;
    e->state = st;
    switch (st) {
    case MRC_EV_SKIP: /* about one RTT (at least skip_ns) */
        e->until_ns = now + (q->srtt > q->a.skip_ns ? q->srtt : q->a.skip_ns);
        break;
    case MRC_EV_ASSUMED_BAD:
        q->nbad++;
        e->probe_ok = 0;
        e->probing = 0;
        e->probe_due_ns = now;
        replace_in_slot(q, e);
        break;
    case MRC_EV_DENIED:
        replace_in_slot(q, e);
        break;
    case MRC_EV_GOOD:
        restore_slot(q, e);
        break;
    }
    uint8_t shown_old = old == MRC_EV_SKIP ? MRC_EV_GOOD : old, shown_new = st == MRC_EV_SKIP ? MRC_EV_GOOD : st;
    if (shown_old != shown_new)
        emit(ep, q, e->ev, shown_old, shown_new, now);
}

static void retire(struct mrc_ep *ep, struct qp *q, struct ev_entry *e, uint64_t now)
{
    if (!e || (e->state != MRC_EV_GOOD && e->state != MRC_EV_SKIP))
        return;
    if (e->in_slot && ev_count_good(q) <= q->a.ev_min_active)
        return; /* the floor: never demote below ev_min_active */
    ev_transition(ep, q, e, MRC_EV_ASSUMED_BAD, now);
}

void ev_on_loss(struct mrc_ep *ep, struct qp *q, uint32_t ev, uint64_t sent_ns, uint64_t now)
{
    struct ev_entry *e = ev_find(q, ev);
    if (!e || (e->state != MRC_EV_GOOD && e->state != MRC_EV_SKIP))
        return;
    q->loss_sent_ns = sent_ns; /* the events of this retirement carry it */
    retire(ep, q, e, now);
    /* its aliases take the same path: the loss is evidence about them too */
    uint32_t plane = ev_plane(ev), np = plane < MRC_MAX_PLANES ? q->ev_paths[plane] : 0;
    if (np && e->state == MRC_EV_ASSUMED_BAD) {
        for (uint32_t i = 0; i < q->nevs; i++) {
            struct ev_entry *f = &q->evs[i];
            if (f != e && ev_plane(f->ev) == plane && ev_entropy(f->ev) % np == ev_entropy(ev) % np)
                retire(ep, q, f, now);
        }
    }
    q->loss_sent_ns = 0;
}

void ev_on_congestion(struct mrc_ep *ep, struct qp *q, uint32_t ev, uint64_t now)
{
    struct ev_entry *e = ev_find(q, ev);
    if (e && (e->state == MRC_EV_GOOD || e->state == MRC_EV_SKIP))
        ev_transition(ep, q, e, MRC_EV_SKIP, now);
}

/* Probes go at most once per RTT per EV (at least probe_interval_ns apart). */
static uint64_t probe_interval(const struct qp *q)
{
    return q->srtt > q->a.probe_interval_ns ? q->srtt : q->a.probe_interval_ns;
}

void ev_on_probe_response(struct mrc_ep *ep, struct qp *q, uint32_t ev, uint64_t now)
{
    struct ev_entry *e = ev_find(q, ev);
    if (!e || e->state != MRC_EV_ASSUMED_BAD || !e->probing)
        return;
    e->probing = 0;
    e->probe_shift = 0;
    if (++e->probe_ok >= q->a.probe_k)
        ev_transition(ep, q, e, MRC_EV_GOOD, now);
    else
        e->probe_due_ns = now + probe_interval(q) / 8;
}

/* A packet sent on ev was acknowledged after it had been declared lost: the
 * path works, so an EV retired for that loss is GOOD again at once. */
void ev_on_alive(struct mrc_ep *ep, struct qp *q, uint32_t ev, uint64_t now)
{
    struct ev_entry *e = ev_find(q, ev);
    if (e && e->state == MRC_EV_ASSUMED_BAD)
        ev_transition(ep, q, e, MRC_EV_GOOD, now);
}

/* An ASSUMED_BAD EV whose probe is due. */
int ev_probe_due(struct mrc_ep *ep, struct qp *q, uint64_t now, struct ev_entry **out)
{
    if (!q->nbad)
        return 0;
    uint32_t usable = qp_usable_ports(ep, q);
    for (uint32_t i = 0; i < q->nevs; i++) {
        struct ev_entry *e = &q->evs[i];
        if (e->state == MRC_EV_ASSUMED_BAD && (usable & (1u << ev_plane(e->ev))) && now >= e->probe_due_ns) {
            *out = e;
            return 1;
        }
    }
    return 0;
}

/* A probe went out on e. The previous one still unanswered after its
 * interval breaks the run of successes, and a path that keeps failing is
 * probed ever less often (up to 1024 x) so that a dead plane costs no
 * bandwidth. An answer is never too late: it counts whenever it comes (a
 * slow fabric or a busy peer must not keep a healed path out for good). */
void ev_probe_sent(struct qp *q, struct ev_entry *e, uint64_t now)
{
    if (e->probing) {
        e->probe_ok = 0;
        if (e->probe_shift < 10)
            e->probe_shift++;
    }
    e->probing = 1;
    e->probe_sent_ns = now;
    e->probe_due_ns = now + (probe_interval(q) << e->probe_shift);
}

/* When the next probe is due (an ASSUMED_BAD EV waits for it). */
uint64_t ev_next_timer(struct qp *q, uint64_t now)
{
    uint64_t t = MRC_INF_NS;
    if (!q->nbad)
        return t;
    for (uint32_t i = 0; i < q->nevs; i++) {
        struct ev_entry *e = &q->evs[i];
        if (e->state == MRC_EV_ASSUMED_BAD && e->probe_due_ns < t)
            t = e->probe_due_ns;
    }
    return t < now ? now : t;
}

/* ------------------------------------------------ the API's EV calls (by QP number) */
int ev_ctl_list(struct mrc_ep *ep, uint32_t qpn, struct mrc_ev_info *out, uint32_t max)
{
    struct qp *q = ep_qp(ep, qpn);
    if (!q)
        return -ENOENT;
    if (max < q->nevs)
        return -E2BIG;
    for (uint32_t i = 0; i < q->nevs; i++)
        out[i] = (struct mrc_ev_info){.ev = q->evs[i].ev, .state = q->evs[i].state, .in_slot = 0, .slot = 0xFFFF};
    for (uint32_t s = 0; s < q->nslots; s++) {
        out[q->slot[s]].in_slot = 1;
        out[q->slot[s]].slot = (uint16_t)s;
    }
    return (int)q->nevs;
}

/* The controller denies an EV, or allows it (GOOD) again. */
int ev_ctl_set_state(struct mrc_ep *ep, uint32_t qpn, uint32_t ev, uint32_t state)
{
    struct qp *q = ep_qp(ep, qpn);
    if (!q)
        return -ENOENT;
    struct ev_entry *e = ev_find(q, ev);
    if (!e)
        return -ENOENT;
    if (state != MRC_EV_GOOD && state != MRC_EV_DENIED)
        return -EINVAL;
    ev_transition(ep, q, e, (uint8_t)state, 0);
    return 0;
}

int ev_ctl_set_paths(struct mrc_ep *ep, uint32_t qpn, const uint32_t *npaths, uint32_t nplanes)
{
    struct qp *q = ep_qp(ep, qpn);
    if (!q)
        return -ENOENT;
    if (nplanes > MRC_MAX_PLANES)
        return -EINVAL;
    for (uint32_t p = 0; p < MRC_MAX_PLANES; p++)
        q->ev_paths[p] = (uint16_t)(p < nplanes && npaths[p] < 0x10000 ? npaths[p] : 0);
    return 0;
}
