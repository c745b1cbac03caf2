/* EV manager (protocol.md section 3, "Spraying"): a QP's EV set split
 * equally over planes, the rotation over GOOD EVs, and the EV state machine:
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
 * Slots are the rotation: slot i always belongs to plane i % planes, so
 * plane load stays equal when EVs are replaced, and a plane that is down is
 * simply passed over. EV values are built and taken apart only through
 * ev_make/ev_plane/ev_entropy (hdr.h).
 *
 * Lock: every function here runs with the endpoint lock held. Calls ep.c. */
#include "core.h"

static const char *const state_names[] = {"GOOD", "SKIP", "ASSUMED_BAD", "DENIED", "UNKNOWN"};

const char *mrc_ev_state_name(uint32_t s) { return s < sizeof(state_names) / sizeof(state_names[0]) ? state_names[s] : NULL; }

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

static uint32_t per_plane(const struct qp *q) { return q->a.ev_count / q->a.planes; }

int ev_init(struct qp *q)
{
    uint32_t P = q->a.planes;
    q->nslots = q->a.ev_count;
    q->nevs = q->a.ev_count + q->a.ev_backup * P;
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
    uint32_t P = q->a.planes, base = per_plane(q), B = q->a.ev_backup;
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
    uint32_t p = ev_plane(ev), e = ev_entropy(ev), base = per_plane(q);
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

/* A SKIP EV whose time is up is GOOD again. */
static inline void skip_expiry(struct mrc_ep *ep, struct qp *q, struct ev_entry *e, uint64_t now)
{
    if (e->state == MRC_EV_SKIP && now >= e->until_ns)
        ev_transition(ep, q, e, MRC_EV_GOOD, now);
}

/* The rotation starts at slot start: the plane of each slot from there on
 * in turn, and on each plane its slots from the first one at or after start. */
void ev_set_rotation(struct qp *q, uint32_t start)
{
    uint32_t P = q->a.planes; /* plane p's slots are p, p + P, ...: per_plane of them (ev_count % P == 0) */
    q->rr = start % q->nslots;
    for (uint32_t p = 0; p < P; p++) {
        q->prr[p] = (uint16_t)((q->rr + (p + P - q->rr % P) % P) / P % per_plane(q)); /* its first at or after rr */
        q->owed[p] = 0;
    }
    q->owed_mask = 0;
    q->held_ns = 0;
}

/* q's cursor on plane: the port's when another QP sent on that plane last.
 * A NIC serving many QPs a few packets each, every QP from a cursor of its
 * own, would spray at random over the plane's paths and queue its leaf's
 * uplinks into trimming; from the port's cursor the NIC's packets go over
 * the paths in turn. A QP alone on its NIC keeps its own, in step with its
 * rotation (below). */
static inline uint32_t plane_cursor(struct mrc_ep *ep, struct qp *q, uint32_t plane)
{
    if (ep->path_qpn[plane] != q->qpn && ep->path_qpn[plane] != UINT32_MAX)
        q->prr[plane] = ep->path_rr[plane];
    return q->prr[plane];
}

/* The EVs q's next packets take, one a plane, asked for at once: with
 * thousands of QPs a QP's table is cold when its turn comes, and each pick
 * would wait for its entry in turn. */
void ev_prefetch(const struct mrc_ep *ep, const struct qp *q)
{
    uint32_t P = q->a.planes;
    for (uint32_t p = 0; p < P; p++) {
        uint32_t j = ep->path_qpn[p] != q->qpn && ep->path_qpn[p] != UINT32_MAX ? ep->path_rr[p] : q->prr[p];
        __builtin_prefetch(&q->evs[q->slot[p + P * (j % per_plane(q))]]);
    }
}

static inline void plane_cursor_set(struct mrc_ep *ep, struct qp *q, uint32_t plane, uint32_t j)
{
    q->prr[plane] = ep->path_rr[plane] = (uint16_t)j;
    ep->path_qpn[plane] = q->qpn;
}

/* The EV a packet on plane takes: the plane's next GOOD slot from the
 * cursor, not avoid_ev unless allow_avoid. The plane's EVs go strictly in
 * turn whatever the other planes' ports did: when a paced port was busy and
 * the rotation jumped to another plane, taking the slot it landed on would
 * skip EVs, and a plane's paths then carried unequal shares at random,
 * where in turn every path of a leaf gets its share from every sender and
 * queues stay bounded. */
static int plane_pick(struct mrc_ep *ep, struct qp *q, uint32_t plane, uint64_t now, uint32_t avoid_ev,
                      int allow_avoid, uint32_t *out)
{
    uint32_t P = q->a.planes, n = per_plane(q), j = plane_cursor(ep, q, plane) % n;
    for (uint32_t k = 0; k < n; k++, j = j + 1 == n ? 0 : j + 1) {
        struct ev_entry *e = &q->evs[q->slot[plane + P * j]];
        skip_expiry(ep, q, e, now);
        if (e->state != MRC_EV_GOOD || (!allow_avoid && e->ev == avoid_ev))
            continue;
        plane_cursor_set(ep, q, plane, j + 1 == n ? 0 : j + 1);
        *out = e->ev;
        return 0;
    }
    return -EAGAIN;
}

/* The slot k places after the rotation's next one. */
static inline uint32_t rot_slot(const struct qp *q, uint32_t k)
{
    uint32_t s = q->rr + k;
    return s >= q->nslots ? s - q->nslots : s;
}

/* The EV in slot s when its plane is in mask (its SKIP expired first if
 * due), else NULL: where each scan of the rotation starts. */
static inline struct ev_entry *slot_ev(struct mrc_ep *ep, struct qp *q, uint32_t s, uint32_t mask, uint64_t now)
{
    struct ev_entry *e = &q->evs[q->slot[s]];
    if (!(mask & (1u << ev_plane(e->ev))))
        return NULL;
    skip_expiry(ep, q, e, now);
    return e;
}

/* The rotation passes slot s (not GOOD, or avoided, or taken): when it was
 * its plane's next, the plane's cursor passes it too, so that without busy
 * ports the plane's cursor is always the slot the rotation lands on.
 * Returns whether it was. */
static inline int plane_pass(struct mrc_ep *ep, struct qp *q, uint32_t plane, uint32_t s)
{
    uint32_t n = per_plane(q), j = s / q->a.planes;
    if (plane_cursor(ep, q, plane) != j)
        return 0;
    plane_cursor_set(ep, q, plane, j + 1 == n ? 0 : j + 1);
    return 1;
}

/* A retransmission's pick: the first slot on a usable plane whose port may
 * send, not on avoid_plane (a different EV on the same plane may share the
 * failed link, and a lost retransmission at the head of the window can only
 * be found by the timer). */
static int pick_other_plane(struct mrc_ep *ep, struct qp *q, uint64_t now, uint32_t usable, uint32_t avoid_ev,
                            uint32_t *out)
{
    uint32_t avoid_plane = ev_plane(avoid_ev);
    for (uint32_t k = 0; k < q->nslots; k++) {
        uint32_t s = rot_slot(q, k);
        struct ev_entry *e = slot_ev(ep, q, s, usable, now);
        if (!e)
            continue;
        uint32_t plane = ev_plane(e->ev);
        if (plane == avoid_plane || e->state != MRC_EV_GOOD) {
            plane_pass(ep, q, plane, s);
            continue;
        }
        if (plane_pick(ep, q, plane, now, avoid_ev, 1, out) < 0)
            continue;
        q->rr = s + 1 == q->nslots ? 0 : s + 1;
        return 0;
    }
    return -EAGAIN;
}

/* Of the ready ports, those faster than plane's (unpaced, or a higher rate). */
static uint32_t faster_ports(const struct mrc_ep *ep, uint32_t plane, uint32_t ready)
{
    uint32_t out = ready & ~ep->port_paced;
    for (uint32_t m = ready & ep->port_paced; m; m &= m - 1) {
        uint32_t p = (uint32_t)__builtin_ctz(m);
        if (ep->port_ps_per_byte[p] < ep->port_ps_per_byte[plane])
            out |= 1u << p;
    }
    return out;
}

/* A plane the rotation owes a turn and whose port is free now takes it; the
 * planes take turns at going first. */
static int pick_owed(struct mrc_ep *ep, struct qp *q, uint64_t now, uint32_t ready, uint32_t avoid_ev,
                     int allow_avoid, uint32_t *out)
{
    /* the planes from owed_next up, then those below it (the mask rotated
     * right by owed_next): lowest first, a NIC of many QPs whose ports free
     * together would feed its low planes and leave its high ones idle */
    uint32_t owed = q->owed_mask & ready, r = q->owed_next % 32;
    for (uint32_t m = r ? owed >> r | owed << (32 - r) : owed; m; m &= m - 1) {
        uint32_t plane = ((uint32_t)__builtin_ctz(m) + r) % 32;
        if (plane_pick(ep, q, plane, now, avoid_ev, allow_avoid, out) < 0)
            continue;
        if (!--q->owed[plane])
            q->owed_mask &= ~(1u << plane);
        q->owed_next = plane + 1;
        return 0;
    }
    return -EAGAIN;
}

/* Next EV of the rotation: GOOD, on a plane both ends can use and whose
 * port may send now, preferably not avoid_ev (retransmissions go on a
 * different path). The rotation's slot order picks the plane: a slot whose
 * EV is not GOOD is passed over, so a plane's share follows what of it is
 * alive (a plane with a dead spine carries less); plane_pick the EV on it.
 * With paced ports the rotation goes on past a slot whose port is busy, and
 * that plane is owed the turn (taken first when its port is free): at most
 * EV_OWED turns, then the rotation waits for that port. So a plane gets its
 * share of the rotation whatever the ports' timing, and never more: a free
 * port whose plane has had its turns waits (else a plane with a dead spine
 * keeps its port busy and carries a full share over fewer spines). */
int ev_pick(struct mrc_ep *ep, struct qp *q, uint64_t now, uint32_t avoid_ev, uint32_t *out)
{
    uint32_t up = qp_usable_ports(ep, q), ready = up & ep_ports_ready(ep, now); /* a paced port that is busy waits */
    q->held_ns = 0;
    if (!ready)
        return -EAGAIN;
    if (avoid_ev != UINT32_MAX && (ready & ~(1u << ev_plane(avoid_ev))) &&
        pick_other_plane(ep, q, now, ready, avoid_ev, out) == 0)
        return 0;
    for (int pass = 0; pass < 2; pass++) {
        uint32_t allow = ready;
        if (pick_owed(ep, q, now, ready, avoid_ev, pass, out) == 0)
            return 0;
        for (uint32_t k = 0; k < q->nslots; k++) {
            uint32_t s = rot_slot(q, k);
            struct ev_entry *e = slot_ev(ep, q, s, up, now);
            if (!e)
                continue;
            uint32_t plane = ev_plane(e->ev);
            if (e->state != MRC_EV_GOOD || (pass == 0 && e->ev == avoid_ev)) {
                plane_pass(ep, q, plane, s);
                continue;
            }
            if (!(ready & (1u << plane))) { /* its port is busy: owe it the turn */
                if (q->owed[plane] < EV_OWED) {
                    q->owed[plane]++;
                    q->owed_mask |= 1u << plane;
                    continue;
                }
                allow &= faster_ports(ep, plane, ready); /* only a faster port may go on without it */
                if (!allow) {
                    q->rr = s;
                    q->held_ns = ep_first_free(ep, q->owed_mask & ~ready); /* the first busy port it owes */
                    return -EAGAIN;
                }
                continue;
            }
            if (!(allow & (1u << plane)))
                continue;
            if (plane_pass(ep, q, plane, s)) { /* the cursor was this slot (alone, unpaced: always) */
                *out = e->ev;
            } else if (plane_pick(ep, q, plane, now, avoid_ev, pass, out) < 0) {
                continue;
            }
            q->rr = s + 1 == q->nslots ? 0 : s + 1;
            return 0;
        }
        if (avoid_ev == UINT32_MAX)
            break;
    }
    return -EAGAIN;
}

/* When a rotation that waits (ev_pick) may go on; MRC_INF_NS: it does not wait. */
uint64_t ev_held_until(const struct qp *q) { return q->held_ns ? q->held_ns : MRC_INF_NS; }

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
