/* Fabric simulator (`mrc sim`, docs/sim.md): H hosts x P planes, each plane
 * a 2-tier Clos of L T0 leaves and S T1 spines, in virtual time. Every host
 * is an unchanged endpoint driven through the sans-I/O calls, as the
 * in-memory link drives its endpoints, with an application of WRITE flows
 * in C on top; every switch forwards on the packet's IPv6 destination as
 * the kernel's End with next-CSID does (lblen 32, nflen 16) over the static
 * routes of mrc.fabric.plan; every switch egress port is a FIFO at the
 * link's rate with the rules of the fabric's BPF queues
 * (csrc/bpf/port_queue.bpf.c): trim MRC data above trim_bytes, drop above
 * buffer_bytes, mark CE above ecn_bytes. A NIC pulls from its endpoint while
 * its ports hold less than one packet each on average (a NIC transmits, it
 * does not queue milliseconds). Links fail and heal on a schedule; packets
 * queued on or crossing a link when it fails are lost. Deterministic: no
 * clock and no randomness; time is in picoseconds, the engine sees ns.
 *
 * Lock: none; one thread drives the simulator and all its contexts. Calls
 * the public context API (engine.c) and the endpoint driver (dispatch.c). */
#include "core/rings.h"
#include "sim/fab.h"
#include "sim/simfab_app.h"
#include "sim/simfab_heap.h"
#include "sim/simfab_port.h"
#include "sim/simfab_roce.h"

static void container(uint8_t *a, const uint16_t *u, int n)
{
    memset(a, 0, 16);
    a[0] = 0xfc;
    for (int i = 0; i < n; i++) {
        a[4 + 2 * i] = (uint8_t)(u[i] >> 8);
        a[5 + 2 * i] = (uint8_t)u[i];
    }
}

/* End with next-CSID, lblen 32, nflen 16: the argument after the active
 * uSID moves up one uSID, zeros come in at the end. */
static void next_csid(uint8_t *a)
{
    memmove(a + 4, a + 6, 10);
    a[14] = a[15] = 0;
}

/* A switch's static routes (mrc.fabric.plan): the egress port and the next
 * node for the active uSID, or -1. Ports: link * 2 + 0 goes up (host to
 * leaf, leaf to spine), link * 2 + 1 down. */
static int64_t route(const struct mrc_fab *f, uint32_t kind, uint32_t plane, uint32_t idx, uint16_t u, uint32_t *next)
{
    uint32_t k = u >> 12, pl = (u >> 8) & 0xF, i = u & 0xFF, H = f->c.hosts, L = f->c.leaves, S = f->c.spines;
    if (pl != plane)
        return -1;
    if (kind == NODE_LEAF && k == KIND_T1 && i < S) {
        *next = node(NODE_SPINE, plane, i);
        return (int64_t)(f->c.planes * H + (plane * L + idx) * S + i) * 2;
    }
    if (kind == NODE_LEAF && k >= KIND_HOST && k < KIND_HOST + 4) {
        uint32_t h = (k - KIND_HOST) << 8 | i;
        if (H > MRC_FAB_NAMED_HOSTS)
            h += leaf_first(f, idx);
        if (h >= H || host_leaf(f, h) != idx)
            return -1;
        *next = node(NODE_HOST, plane, h);
        return (int64_t)(plane * H + h) * 2 + 1;
    }
    if (kind == NODE_SPINE && k == KIND_T0 && i < L) {
        *next = node(NODE_LEAF, plane, i);
        return (int64_t)(f->c.planes * H + (plane * L + i) * S + idx) * 2 + 1;
    }
    return -1;
}

/* One switch's decision: End next-CSID when the active uSID is its own,
 * then the route of the (new) active uSID. */
static int64_t forward(const struct mrc_fab *f, uint32_t at, uint8_t *a, uint32_t *next)
{
    uint32_t kind = at >> 28, plane = (at >> 24) & 0xF, idx = at & 0xFFFFFF;
    if (a[0] != 0xfc || a[1] || a[2] || a[3])
        return -1;
    if (active(a) == usid(kind == NODE_LEAF ? KIND_T0 : KIND_T1, plane, idx))
        next_csid(a);
    return route(f, kind, plane, idx, active(a), next);
}

/* A host's own port address on a plane: the end of every path to it. */
static int for_host(const struct mrc_fab *f, uint32_t h, uint32_t plane, const uint8_t *a)
{
    uint8_t want[16];
    uint16_t u = host_usid(f, h, plane);
    container(want, &u, 1);
    return !memcmp(want, a, 16);
}

int mrc_fab_trace(struct mrc_fab *f, uint32_t src, uint32_t plane, const uint8_t *daddr, uint32_t *nodes,
                  uint32_t max, uint32_t *n)
{
    uint8_t a[16];
    uint32_t at, k = 0;
    if (src >= f->c.hosts || plane >= f->c.planes)
        return -EINVAL;
    memcpy(a, daddr, 16);
    /* the host's route: its leaf's uSID goes up its port on that plane */
    if (active(a) != usid(KIND_T0, plane, host_leaf(f, src)) || a[0] != 0xfc || a[1] || a[2] || a[3]) {
        *n = 0;
        return -ENETUNREACH;
    }
    at = node(NODE_LEAF, plane, host_leaf(f, src));
    for (;;) {
        if (k < max)
            nodes[k] = at;
        k++;
        if (at >> 28 == NODE_HOST) {
            *n = k < max ? k : max;
            return for_host(f, at & 0xFFFFFF, plane, a) ? 0 : -ENETUNREACH;
        }
        if (k > 8 || forward(f, at, a, &at) < 0) {
            *n = k < max ? k : max;
            return -ENETUNREACH;
        }
    }
}

/* ------------------------------------------------------------ events (simfab_heap.h) */
int fab_push(struct mrc_fab *f, uint64_t t, uint32_t kind, uint32_t idx)
{
    return push_seq(f, t, f->seq++, kind, idx);
}

static void host_wake(struct mrc_fab *f, uint32_t h);

static void send_from(struct mrc_fab *f, uint32_t h, const struct mrc_txdesc *d, const uint8_t *data)
{
    const struct fhost *x = &f->hosts[h];
    uint32_t plane = ev_plane(d->ev) % f->c.planes, spine = ev_entropy(d->ev) % f->c.spines;
    uint32_t dst = d->peer < x->npeers ? x->l2g[d->peer] : UINT32_MAX; /* the I/O layer's peer table */
    if (dst >= f->c.hosts || d->len > f->slot) {
        f->st.no_route++;
        return;
    }
    /* a data packet's headers (where a trimming port cuts it) and, when the
     * hosts' region holds zeros (fill 0), what is carried: the bytes around
     * its payload, which comes from that region (a receiver whose ICRC did
     * not hold would drop the packet and count it) */
    uint32_t hdr = d->hdr, zlen = f->k.fill ? 0 : d->plen;
    struct fpkt *k = fab_pkt_get(f, d->len - zlen);
    if (!k) {
        must(f, -ENOMEM);
        return;
    }
    memcpy(k->data, data, zlen ? hdr : d->len);
    if (zlen)
        memcpy(k->data + hdr, data + hdr + zlen, d->len - hdr - zlen);
    k->hdr = hdr;
    k->zlen = zlen;
    k->len = d->len;
    k->wire = d->len + WIRE_EXTRA;
    k->src = (uint16_t)h;
    k->tclass = d->tclass;
    k->ce = k->trimmed = 0;
    k->ev = d->ev;
    /* the I/O layer's path for this EV: paths[entropy % npaths], one per spine */
    uint16_t u[4] = {usid(KIND_T0, plane, host_leaf(f, h)), usid(KIND_T1, plane, spine),
                     usid(KIND_T0, plane, host_leaf(f, dst)), host_usid(f, dst, plane)};
    container(k->daddr, u, 4);
    f->st.sent++;
    fab_enqueue(f, k, (uint64_t)(plane * f->c.hosts + h) * 2, node(NODE_LEAF, plane, host_leaf(f, h)));
}

/* Port's first packet reaches the next node (the event's sequence number
 * seq: another means the packet it was for was flushed). */
static void arrive(struct mrc_fab *f, uint32_t port, uint64_t seq)
{
    struct fport *pt = &f->ports[port];
    struct fpkt *k = pt->head;
    if (!k || k->seq != seq)
        return;
    pt->head = k->next;
    if (pt->head) {
        pt->head_at = k->nat;
        must(f, push_seq(f, k->nat, k->nseq, EVT_PKT, port));
    } else {
        pt->tail = NULL;
    }
    if (f->c.pfc_xoff)
        pfc_out(f, k, port);
    uint32_t at = k->node, plane = (at >> 24) & 0xF;
    if (f->c.transport == MRC_FAB_ROCE) {
        roce_arrive(f, k);
        return;
    }
    if (at >> 28 == NODE_HOST) {
        uint32_t h = at & 0xFFFFFF, peer = f->hosts[h].g2l[k->src]; /* the source address names the peer */
        if (!for_host(f, h, plane, k->daddr) || peer == 0xFFFF) {
            f->st.no_route++;
        } else {
            struct mrc_meta m = {.ev = k->ev, .peer = (uint16_t)peer, .port = (uint8_t)plane, .ecn_ce = k->ce,
                                 .trimmed = k->trimmed};
            const uint8_t *b = k->data;
            uint32_t tail = k->len - k->hdr - k->zlen;
            if (k->zlen) { /* the zeros it did not carry go back in: rxbuf holds zeros but for this */
                memcpy(f->rxbuf, k->data, k->hdr);
                memcpy(f->rxbuf + k->hdr + k->zlen, k->data + k->hdr, tail);
                b = f->rxbuf;
            }
            mrc_ep_input(f->hosts[h].ep, b, k->len, &m, f->now / 1000);
            if (k->zlen) {
                memset(f->rxbuf, 0, k->hdr);
                memset(f->rxbuf + k->hdr + k->zlen, 0, tail);
            }
            f->st.delivered++;
            fab_pkt_put(f, k);
            host_wake(f, h); /* what the packet set off (an ACK, a completion, more data) goes now */
            return;
        }
        fab_pkt_put(f, k);
        return;
    }
    uint32_t next;
    int64_t out = forward(f, at, k->daddr, &next);
    if (out < 0) {
        f->st.no_route++;
        fab_pkt_put(f, k);
        return;
    }
    fab_enqueue(f, k, (uint64_t)out, next);
}

/* ------------------------------------------------------------ hosts */
/* A WRITE's wr_id: its flow (high 32 bits) and its length. */
void fab_mrc_post_more(struct mrc_fab *f, struct fflow *fl)
{
    struct fhost *s = &f->hosts[fl->c.src], *d = &f->hosts[fl->c.dst];
    uint64_t len;
    while ((len = fab_next_len(f, fl))) {
        struct mrc_wr wr = {.wr_id = (uint64_t)(fl - f->flows) << 32 | len,
                            .opcode = fl->lens ? MRC_WR_WRITE_IMM : MRC_WR_WRITE, .num_sge = 1,
                            .sg_list = {{.addr = (uintptr_t)f->mem, .length = (uint32_t)len, .lkey = s->lkey}},
                            .remote_addr = (uintptr_t)f->mem, .rkey = d->rkey, .imm_data = (uint32_t)fl->seq};
        if (mrc_post_write(s->ctx, fl->qpn, &wr, 1) < 0) {
            fl->errors++;
            return;
        }
        fl->posted += len;
        fl->seq++;
    }
}

static void app_poll(struct mrc_fab *f, uint32_t h)
{
    struct mrc_wc wc[FAB_WCS];
    int n;
    while (ep_cq_pending(f->hosts[h].ep) && (n = mrc_poll_cq(f->hosts[h].ctx, 0, wc, FAB_WCS)) > 0) {
        for (int i = 0; i < n; i++) {
            uint64_t idx = wc[i].wr_id >> 32, len = wc[i].wr_id & 0xFFFFFFFFu;
            if (idx >= f->nflows)
                continue;
            struct fflow *fl = &f->flows[idx];
            if (wc[i].status != MRC_WC_SUCCESS) {
                fl->errors++;
                continue;
            }
            if (wc[i].opcode == MRC_WC_RECV_WRITE_IMM) { /* a collective's WRITE arrived at its receiver */
                uint64_t again = wc[i].wr_id;
                if (mrc_post_recv(f->hosts[h].ctx, fl->dqpn, &again, 1) != 1)
                    fl->errors++;
                fab_arrived(f, fl);
                continue;
            }
            fab_wr_done(f, fl, 1, len);
            f->post_more(f, fl);
        }
    }
}

/* Bytes waiting in host h's NIC ports now; *free_at: when the first busy one is free. */
static uint64_t nic_backlog(struct mrc_fab *f, uint32_t h, uint64_t *free_at)
{
    uint64_t q = 0, first = PS_INF;
    for (uint32_t p = 0; p < f->c.planes; p++) {
        const struct fport *pt = &f->ports[(uint64_t)(p * f->c.hosts + h) * 2];
        if (pt->busy > f->now) {
            q += (pt->busy - f->now) / f->ppb;
            first = pt->busy < first ? pt->busy : first;
        }
    }
    *free_at = first;
    return q;
}

static void host_wake(struct mrc_fab *f, uint32_t h)
{
    if (f->c.transport == MRC_FAB_ROCE) {
        roce_host_wake(f, h);
        return;
    }
    struct fhost *x = &f->hosts[h];
    uint64_t now_ns = f->now / 1000, free_at;
    x->wake = PS_INF;
    if (f->k.check_times)
        f->st.late_times += (uint64_t)mrc_ep_check_times(x->ep, now_ns);
    app_poll(f, h);
    uint64_t limit = (uint64_t)f->c.planes * (f->qa.mtu + 128 + WIRE_EXTRA);
    for (;;) {
        if (nic_backlog(f, h, &free_at) >= limit) {
            wake_at(f, h, free_at);
            return;
        }
        int n = mrc_ep_poll_tx(x->ep, now_ns, f->txbuf, FAB_TXBUF, f->txd, FAB_BATCH);
        for (int i = 0; i < n; i++)
            send_from(f, h, &f->txd[i], f->txbuf + f->txd[i].off);
        if (n <= 0)
            break;
    }
    uint64_t t = mrc_ep_next_timer(x->ep, now_ns);
    if (t == MRC_INF_NS) {
        unwake(f, h); /* nothing to wake it for but a packet */
        return;
    }
    /* due now but nothing went: step on (as the in-memory link does) */
    wake_at(f, h, t > now_ns ? t * 1000 : f->now + 100000);
}

static void link_set(struct mrc_fab *f, uint32_t link, int up)
{
    if (f->ports[(uint64_t)link * 2].down != !up) { /* routing hears of it (RoCE's ECMP, converge_ns late) */
        f->link_changed[link] = f->now ? f->now : 1;
        f->links_changed = 1;
    }
    for (int dir = 0; dir < 2; dir++) {
        struct fport *pt = &f->ports[(uint64_t)link * 2 + dir];
        if (pt->down == !up)
            continue;
        pt->down = !up;
        pt->busy = f->now; /* what it held is lost */
        fab_port_flush(f, (uint64_t)link * 2 + dir);
    }
    if (link < f->c.planes * f->c.hosts) { /* a host's own port: its NIC sees carrier go */
        uint32_t h = link % f->c.hosts, plane = link / f->c.hosts;
        if (f->hosts[h].ep)
            mrc_ep_set_port(f->hosts[h].ep, plane, up, f->now / 1000);
        wake_at(f, h, f->now);
    }
}

/* ------------------------------------------------------------ the API */
int mrc_fab_run(struct mrc_fab *f, uint64_t until_ns)
{
    f->ran = 1;
    uint64_t until = until_ns > PS_INF / 1000 ? PS_INF : until_ns * 1000;
    const struct fev *next;
    while ((next = first_event(f))) {
        if (f->err)
            return f->err;
        if (f->nflows && f->st.flows_done == f->nflows)
            return 1;
        if (next->t > until) {
            f->now = until;
            return 0;
        }
        struct fev e = take_event(f, next);
        if ((next = first_event(f)) && fev_kind(next) == EVT_PKT)
            __builtin_prefetch(f->ports[fev_idx(next)].head); /* the next packet */
        f->now = e.t;
        f->st.events++;
        uint32_t i = fev_idx(&e);
        switch (fev_kind(&e)) {
        case EVT_PKT:
            arrive(f, i, fev_seq(&e));
            break;
        case EVT_WAKE:
            host_wake(f, i);
            break;
        case EVT_LINK:
            if (i & EVT_PFC_BIT)
                pfc_event(f, i & ~(uint32_t)EVT_PFC_BIT);
            else
                link_set(f, i >> 1, i & 1);
            break;
        case EVT_FLOW:
            f->post_more(f, &f->flows[i]);
            wake_at(f, f->flows[i].c.src, f->now);
            break;
        }
    }
    if (f->err)
        return f->err;
    return f->nflows && f->st.flows_done == f->nflows;
}

int mrc_fab_link_at(struct mrc_fab *f, uint32_t link, int up, uint64_t at_ns)
{
    if (link >= f->nlinks || at_ns > PS_INF / 1000 - 1)
        return -EINVAL;
    return fab_push(f, at_ns * 1000, EVT_LINK, link << 1 | !!up);
}
