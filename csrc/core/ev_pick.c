/* The rotation (protocol.md section 3, "Spraying"): which EV a packet
 * takes. Slot i of a QP's set belongs to plane i % planes; the rotation
 * visits the slots in turn and each plane's own slots in turn (a NIC's QPs
 * share each port's cursor), passes over EVs that are not GOOD, planes
 * that are down and paced ports that are busy (owing them their turns),
 * and a retransmission takes another plane. The EVs' states are ev.c's:
 * a SKIP whose time is up becomes GOOD there (ev_transition) as the
 * rotation reaches it.
 *
 * Lock: every function here runs with the endpoint lock held. Calls ev.c
 * and ep.c. */
#include "core/ev.h"
#include "core/ev_pick.h"
#include "core/types.h"

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
        q->prr[p] = (uint16_t)((q->rr + (p + P - q->rr % P) % P) / P % ev_per_plane(q)); /* its first at or after rr */
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
static inline uint32_t cursor_of(const struct mrc_ep *ep, const struct qp *q, uint32_t plane)
{
    return ep->path_qpn[plane] != q->qpn && ep->path_qpn[plane] != UINT32_MAX ? ep->path_rr[plane] : q->prr[plane];
}

/* and q's own from then on */
static inline uint32_t plane_cursor(struct mrc_ep *ep, struct qp *q, uint32_t plane)
{
    return q->prr[plane] = (uint16_t)cursor_of(ep, q, plane);
}

/* The EVs q's next packets take, one a plane, asked for at once: with
 * thousands of QPs a QP's table is cold when its turn comes, and each pick
 * would wait for its entry in turn. */
void ev_prefetch(const struct mrc_ep *ep, const struct qp *q)
{
    uint32_t P = q->a.planes;
    for (uint32_t p = 0; p < P; p++)
        __builtin_prefetch(&q->evs[q->slot[p + P * (cursor_of(ep, q, p) % ev_per_plane(q))]]);
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
    uint32_t P = q->a.planes, n = ev_per_plane(q), j = plane_cursor(ep, q, plane) % n;
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
    uint32_t n = ev_per_plane(q), j = s / q->a.planes;
    if (plane_cursor(ep, q, plane) != j)
        return 0;
    plane_cursor_set(ep, q, plane, j + 1 == n ? 0 : j + 1);
    return 1;
}

/* The EV in the rotation's slot k places on (*slot) when the rotation may
 * take it: on a plane in mask, GOOD, and neither on avoid_plane nor
 * avoid_ev (UINT32_MAX: none); else NULL, and a slot of a plane in mask is
 * passed over (plane_pass). */
static inline struct ev_entry *rot_take(struct mrc_ep *ep, struct qp *q, uint32_t k, uint32_t mask, uint64_t now,
                                        uint32_t avoid_plane, uint32_t avoid_ev, uint32_t *slot)
{
    uint32_t s = *slot = rot_slot(q, k);
    struct ev_entry *e = slot_ev(ep, q, s, mask, now);
    if (!e)
        return NULL;
    if (ev_plane(e->ev) == avoid_plane || e->state != MRC_EV_GOOD || e->ev == avoid_ev) {
        plane_pass(ep, q, ev_plane(e->ev), s);
        return NULL;
    }
    return e;
}

/* A retransmission's pick: the first slot on a usable plane whose port may
 * send, not on avoid_plane (a different EV on the same plane may share the
 * failed link, and a lost retransmission at the head of the window can only
 * be found by the timer). */
static int pick_other_plane(struct mrc_ep *ep, struct qp *q, uint64_t now, uint32_t usable, uint32_t avoid_ev,
                            uint32_t *out)
{
    for (uint32_t k = 0, s; k < q->nslots; k++) {
        struct ev_entry *e = rot_take(ep, q, k, usable, now, ev_plane(avoid_ev), UINT32_MAX, &s);
        if (!e || plane_pick(ep, q, ev_plane(e->ev), now, avoid_ev, 1, out) < 0)
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
        for (uint32_t k = 0, s; k < q->nslots; k++) {
            struct ev_entry *e = rot_take(ep, q, k, up, now, UINT32_MAX, pass == 0 ? avoid_ev : UINT32_MAX, &s);
            if (!e)
                continue;
            uint32_t plane = ev_plane(e->ev);
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

/* A new data packet's EV with buffers of k packets (ep->gso_k, mrc_ep_set_gso):
 * it takes the EV of the packet before it while that one's burst lasts (k in
 * a row) and the EV is still GOOD on a ready port, else ev_pick's. So the
 * rotation moves one step per k packets, and the I/O layer can hand the
 * kernel the k as one buffer of one path. A packet shorter than the MTU
 * (full 0: a message's last) may end a burst, never start one; a paced
 * port's packets go one EV turn each. */
int ev_pick_burst(struct mrc_ep *ep, struct qp *q, uint64_t now, int full, uint32_t *out)
{
    if (q->burst_left) {
        const struct ev_entry *e = ev_find(q, q->burst_ev);
        uint32_t port = 1u << ev_plane(q->burst_ev);
        if (e && e->state == MRC_EV_GOOD && (qp_usable_ports(ep, q) & ep_ports_ready(ep, now) & port)) {
            q->burst_left = full ? q->burst_left - 1 : 0;
            *out = q->burst_ev;
            return 0;
        }
    }
    int rc = ev_pick(ep, q, now, UINT32_MAX, out);
    /* a paced port sends one packet per turn of its pacer: no burst there (its pacing counts
     * packets one by one) */
    q->burst_left = rc == 0 && full && ep->gso_k > 1 && !(ep->port_paced & (1u << ev_plane(*out)))
                        ? (uint8_t)(ep->gso_k - 1) : 0;
    q->burst_ev = *out;
    return rc;
}

/* When a rotation that waits (ev_pick) may go on; MRC_INF_NS: it does not wait. */
uint64_t ev_held_until(const struct qp *q) { return q->held_ns ? q->held_ns : MRC_INF_NS; }
