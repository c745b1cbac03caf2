/* EV manager (protocol.md section 3, "Spraying"): per-QP EV set split
 * equally over planes, rotation over GOOD EVs, SKIP after congestion,
 * ASSUMED_BAD after a loss (replaced at once by a spare on the same plane,
 * then probed until probe_k probes in a row succeed), DENIED by the
 * controller, and an ev_min_active floor.
 *
 * An EV value is (plane << 16) | entropy. Slots are the rotation: slot i
 * always belongs to plane i % planes, so plane load stays equal when EVs are
 * replaced, and a plane that is down is simply passed over. */
#include "core.h"

static uint32_t per_plane(const struct qp *q) { return q->a.ev_count / q->a.planes; }

int ev_init(struct qp *q)
{
    uint32_t P = q->a.planes, base = per_plane(q);
    q->nslots = q->a.ev_count;
    q->nevs = q->a.ev_count + q->a.ev_backup * P;
    q->evs = calloc(q->nevs, sizeof(*q->evs));
    q->slot = calloc(q->nslots, sizeof(*q->slot));
    if (!q->evs || !q->slot)
        return -ENOMEM;
    for (uint32_t i = 0; i < q->a.ev_count; i++) {
        q->evs[i].ev = ((i % P) << 16) | (i / P);
        q->evs[i].in_slot = 1;
        q->slot[i] = (uint16_t)i;
    }
    for (uint32_t p = 0; p < P; p++)
        for (uint32_t b = 0; b < q->a.ev_backup; b++)
            q->evs[q->a.ev_count + p * q->a.ev_backup + b].ev = (p << 16) | (base + b);
    return 0;
}

struct event *ev_find(struct qp *q, uint32_t ev)
{
    uint32_t p = ev >> 16, e = ev & 0xFFFF, base = per_plane(q);
    if (p >= q->a.planes)
        return NULL;
    uint32_t idx;
    if (e < base)
        idx = e * q->a.planes + p;
    else if (e - base < q->a.ev_backup)
        idx = q->a.ev_count + p * q->a.ev_backup + (e - base);
    else
        return NULL;
    return &q->evs[idx];
}

uint32_t ev_count_good(struct qp *q)
{
    uint32_t n = 0;
    for (uint32_t s = 0; s < q->nslots; s++) {
        uint8_t st = q->evs[q->slot[s]].state;
        n += (st == MRC_EV_GOOD || st == MRC_EV_SKIP);
    }
    return n;
}

static void push_event(struct mrc_ep *ep, struct qp *q, uint32_t ev, uint8_t old, uint8_t st, uint64_t now)
{
    uint32_t nt = ep->evq_tail + 1 == ep->evq_size ? 0 : ep->evq_tail + 1;
    if (nt == ep->evq_head) {
        ep->ev_dropped++;
        return;
    }
    ep->evq[ep->evq_tail] = (struct mrc_ev_event){.qpn = q->qpn, .ev = ev, .old_state = old, .new_state = st,
                                                  .t_ns = now, .dropped = ep->ev_dropped,
                                                  .cause_ns = st == MRC_EV_ASSUMED_BAD ? q->loss_sent_ns : 0};
    ep->ev_dropped = 0;
    ep->evq_tail = nt;
}

/* Put a GOOD spare of the same plane into the slot of a retired EV. */
static void replace_in_slot(struct qp *q, struct event *bad)
{
    uint32_t bi = (uint32_t)(bad - q->evs), plane = bad->ev >> 16;
    for (uint32_t s = 0; s < q->nslots; s++) {
        if (q->slot[s] != bi)
            continue;
        for (uint32_t i = 0; i < q->nevs; i++) {
            struct event *c = &q->evs[i];
            if (!c->in_slot && c->state == MRC_EV_GOOD && (c->ev >> 16) == plane) {
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
static void restore_slot(struct qp *q, struct event *e)
{
    uint32_t bi = (uint32_t)(e - q->evs);
    if (e->in_slot || bi >= q->nslots || q->slot[bi] == bi)
        return;
    q->evs[q->slot[bi]].in_slot = 0;
    q->slot[bi] = (uint16_t)bi;
    e->in_slot = 1;
}

void ev_set_state(struct mrc_ep *ep, struct qp *q, struct event *e, uint8_t st, uint64_t now)
{
    uint8_t old = e->state;
    if (old == st)
        return;
    if (old == MRC_EV_ASSUMED_BAD)
        q->nbad--;
    if (st == MRC_EV_ASSUMED_BAD) {
        q->nbad++;
        e->probe_ok = 0;
        e->probing = 0;
        e->probe_due_ns = now;
    }
    e->state = st;
    if (st == MRC_EV_ASSUMED_BAD || st == MRC_EV_DENIED)
        replace_in_slot(q, e);
    else if (st == MRC_EV_GOOD)
        restore_slot(q, e);
    if (old != MRC_EV_SKIP && st != MRC_EV_SKIP)
        push_event(ep, q, e->ev, old, st, now);
    else if (old == MRC_EV_SKIP && st != MRC_EV_GOOD)
        push_event(ep, q, e->ev, MRC_EV_GOOD, st, now);
}

/* Next EV of the rotation: GOOD, on a plane both ends can use, preferably
 * not avoid_ev (retransmissions go on a different path). */
int ev_pick(struct mrc_ep *ep, struct qp *q, uint64_t now, uint32_t avoid_ev, uint32_t *out)
{
    uint32_t usable = qp_usable_ports(ep, q);
    /* A retransmission first tries another plane: a different EV on the same
     * plane may share the failed link, and a lost retransmission at the head
     * of the window can only be found by the timer. */
    uint32_t avoid_plane = avoid_ev == UINT32_MAX ? UINT32_MAX : avoid_ev >> 16;
    if (avoid_plane != UINT32_MAX && (usable & ~(1u << avoid_plane))) {
        for (uint32_t k = 0; k < q->nslots; k++) {
            uint32_t s = q->rr + k;
            if (s >= q->nslots)
                s -= q->nslots;
            struct event *e = &q->evs[q->slot[s]];
            if (!(usable & (1u << (e->ev >> 16))) || (e->ev >> 16) == avoid_plane)
                continue;
            if (e->state == MRC_EV_SKIP && now >= e->until_ns)
                e->state = MRC_EV_GOOD;
            if (e->state != MRC_EV_GOOD)
                continue;
            q->rr = s + 1 == q->nslots ? 0 : s + 1;
            *out = e->ev;
            return 0;
        }
    }
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t k = 0; k < q->nslots; k++) {
            uint32_t s = q->rr + k;
            if (s >= q->nslots)
                s -= q->nslots;
            struct event *e = &q->evs[q->slot[s]];
            if (!(usable & (1u << (e->ev >> 16))))
                continue;
            if (e->state == MRC_EV_SKIP && now >= e->until_ns)
                e->state = MRC_EV_GOOD;
            if (e->state != MRC_EV_GOOD || (pass == 0 && e->ev == avoid_ev))
                continue;
            q->rr = s + 1 == q->nslots ? 0 : s + 1;
            *out = e->ev;
            return 0;
        }
        if (avoid_ev == UINT32_MAX)
            break;
    }
    return -EAGAIN;
}

static void retire(struct mrc_ep *ep, struct qp *q, struct event *e, uint64_t now)
{
    if (!e || (e->state != MRC_EV_GOOD && e->state != MRC_EV_SKIP))
        return;
    if (e->in_slot && ev_count_good(q) <= q->a.ev_min_active)
        return; /* the floor: never demote below ev_min_active */
    ev_set_state(ep, q, e, MRC_EV_ASSUMED_BAD, now);
}

void ev_on_loss(struct mrc_ep *ep, struct qp *q, uint32_t ev, uint64_t sent_ns, uint64_t now)
{
    struct event *e = ev_find(q, ev);
    if (!e || (e->state != MRC_EV_GOOD && e->state != MRC_EV_SKIP))
        return;
    q->loss_sent_ns = sent_ns; /* the events of this retirement carry it */
    retire(ep, q, e, now);
    /* its aliases take the same path: the loss is evidence about them too */
    uint32_t plane = ev >> 16, np = plane < MRC_MAX_PLANES ? q->ev_paths[plane] : 0;
    if (!np || e->state != MRC_EV_ASSUMED_BAD) {
        q->loss_sent_ns = 0;
        return;
    }
    for (uint32_t i = 0; i < q->nevs; i++) {
        struct event *f = &q->evs[i];
        if (f != e && (f->ev >> 16) == plane && (f->ev & 0xFFFF) % np == (ev & 0xFFFF) % np)
            retire(ep, q, f, now);
    }
    q->loss_sent_ns = 0;
}

void ev_on_congestion(struct mrc_ep *ep, struct qp *q, uint32_t ev, uint64_t now)
{
    struct event *e = ev_find(q, ev);
    if (e && (e->state == MRC_EV_GOOD || e->state == MRC_EV_SKIP)) {
        e->state = MRC_EV_SKIP;
        e->until_ns = now + q->a.skip_ns;
    }
}

void ev_on_probe_response(struct mrc_ep *ep, struct qp *q, uint32_t ev, uint64_t now)
{
    struct event *e = ev_find(q, ev);
    if (!e || e->state != MRC_EV_ASSUMED_BAD || !e->probing)
        return;
    e->probing = 0;
    e->probe_shift = 0;
    if (++e->probe_ok >= q->a.probe_k)
        ev_set_state(ep, q, e, MRC_EV_GOOD, now);
    else
        e->probe_due_ns = now + q->a.probe_interval_ns / 8;
}

/* A packet sent on ev was acknowledged after it had been declared lost: the
 * path works, so an EV retired for that loss is GOOD again at once. */
void ev_on_alive(struct mrc_ep *ep, struct qp *q, uint32_t ev, uint64_t now)
{
    struct event *e = ev_find(q, ev);
    if (e && e->state == MRC_EV_ASSUMED_BAD)
        ev_set_state(ep, q, e, MRC_EV_GOOD, now);
}

/* An ASSUMED_BAD EV whose probe is due. */
int ev_probe_due(struct mrc_ep *ep, struct qp *q, uint64_t now, struct event **out)
{
    if (!q->nbad)
        return 0;
    uint32_t usable = qp_usable_ports(ep, q);
    for (uint32_t i = 0; i < q->nevs; i++) {
        struct event *e = &q->evs[i];
        if (e->state == MRC_EV_ASSUMED_BAD && (usable & (1u << (e->ev >> 16))) && now >= e->probe_due_ns) {
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
void ev_probe_sent(struct qp *q, struct event *e, uint64_t now)
{
    if (e->probing) {
        e->probe_ok = 0;
        if (e->probe_shift < 10)
            e->probe_shift++;
    }
    e->probing = 1;
    e->probe_sent_ns = now;
    e->probe_due_ns = now + (q->a.probe_interval_ns << e->probe_shift);
}

uint64_t ev_next_timer(struct qp *q, uint64_t now)
{
    uint64_t t = MRC_INF_NS;
    if (!q->nbad)
        return t;
    for (uint32_t i = 0; i < q->nevs; i++) {
        struct event *e = &q->evs[i];
        if (e->state != MRC_EV_ASSUMED_BAD)
            continue;
        uint64_t x = e->probe_due_ns;
        if (x < t)
            t = x;
    }
    return t < now ? now : t;
}
