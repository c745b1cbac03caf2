/* A context opened by name (mrc_ctx_open): its ports from a list of
 * interfaces or a topology file, read from the kernel; the QP defaults of
 * the software data path; and connecting a QP to what the exchange told
 * about the other side (mrc_qp_connect), as mrc.verbs.Context does. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "app/app.h"
#include "drivers/engine.h"

/* The software data path's settings (mrc.verbs SOFTWARE_TIMING and
 * SOFTWARE_CC; tests/unit/test_libmrc.py keeps the two equal), and the
 * payload sizes a QP may use with the room its headers take (PAYLOAD_SIZES,
 * HEADER_ROOM). */
#define SW_REORDER_NS 200000
#define SW_TIMEOUT 11
#define SW_PROBE_INTERVAL_NS 200000
#define SW_SKIP_NS 200000
#define SW_ACK_BYTES 65536
#define SW_BASE_RTT 100000
#define SW_TARGET_DELAY 75000
#define SW_QA_THRESHOLD 400000
#define HEADER_ROOM (40 + 8 + 128)
static const uint32_t payload_sizes[] = {8192, 4096, 2048, 1024, 512};

static void app_free(void *p)
{
    struct app_ctx *a = p;
    if (!a)
        return;
    if (a->has_topo)
        topo_free(&a->topo);
    free(a->peers);
    pthread_mutex_destroy(&a->lock);
    free(a);
}

static void app_stop(void *p)
{
    struct app_ctx *a = p;
    if (a && a->ctl) {
        app_ctl_stop(a->ctl);
        a->ctl = NULL;
    }
}

struct app_ctx *app_of(struct mrc_ctx *c)
{
    if (!c || !c->app || c->app_free != app_free) {
        app_fail(EINVAL, "this context was not opened with mrc_ctx_open (it knows no ports or topology)");
        return NULL;
    }
    return c->app;
}

/* "eth1,eth2" or "eth1:0,eth3:2" */
static int parse_port_list(const char *list, struct app_ctx *a)
{
    char copy[512], *save = NULL;
    if (strlen(list) >= sizeof(copy))
        return app_fail(EINVAL, "the port list '%.40s...' is too long", list);
    strcpy(copy, list);
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (a->nports == MRC_MAX_PORTS)
            return app_fail(EINVAL, "at most %d ports", MRC_MAX_PORTS);
        struct app_port *p = &a->ports[a->nports];
        char *colon = strchr(tok, ':'), *end = NULL;
        p->plane = a->nports;
        if (colon) {
            *colon = 0;
            long plane = strtol(colon + 1, &end, 10);
            if (end == colon + 1 || *end || plane < 0 || plane >= MRC_MAX_PLANES)
                return app_fail(EINVAL, "port '%s': the plane after ':' is a number from 0 to 15", tok);
            p->plane = (uint32_t)plane;
        }
        if (!*tok || strlen(tok) >= IF_NAMESIZE)
            return app_fail(EINVAL, "'%s' is not an interface name", tok);
        strcpy(p->ifname, tok);
        a->nports++;
    }
    if (!a->nports)
        return app_fail(EINVAL, "no MRC ports given");
    return 0;
}

static int pick_ports(const struct mrc_open_attr *attr, struct app_ctx *a)
{
    const char *topology = attr->topology ? attr->topology : getenv("MRC_TOPOLOGY");
    const char *host = attr->host ? attr->host : getenv("MRC_HOST");
    int rc;
    if (topology && *topology) {
        if ((rc = topo_load(&a->topo, topology, host && *host ? host : NULL)) < 0)
            return rc;
        a->has_topo = 1;
    }
    if (attr->ports)
        return parse_port_list(attr->ports, a);
    if (!a->has_topo)
        return app_fail(EINVAL, "no MRC ports: name them (mrc_open_attr.ports = \"eth1,eth2\"), or give a topology "
                        "file (mrc_open_attr.topology, or $MRC_TOPOLOGY with $MRC_HOST; docs/topology.md)");
    if ((rc = topo_local_ports(&a->topo, a->ports, MRC_MAX_PORTS)) < 0)
        return rc;
    a->nports = (uint32_t)rc;
    return 0;
}

int mrc_ctx_open(const struct mrc_open_attr *attr, struct mrc_ctx **out)
{
    app_clear_error();
    if (!attr || !out)
        return app_fail(EINVAL, "mrc_ctx_open needs its attributes and where to put the context");
    struct app_ctx *a = calloc(1, sizeof(*a));
    if (!a)
        return app_fail(ENOMEM, "out of memory");
    pthread_mutex_init(&a->lock, NULL);
    int rc = pick_ports(attr, a);
    if (rc == 0)
        rc = ports_discover(a->ports, a->nports);
    uint32_t mtu = UINT32_MAX;
    for (uint32_t i = 0; rc == 0 && i < a->nports; i++) {
        mtu = a->ports[i].mtu < mtu ? a->ports[i].mtu : mtu;
        a->planes = a->ports[i].plane + 1 > a->planes ? a->ports[i].plane + 1 : a->planes;
    }
    for (size_t i = 0; rc == 0 && !a->payload && i < sizeof(payload_sizes) / sizeof(payload_sizes[0]); i++)
        if (payload_sizes[i] + HEADER_ROOM <= mtu)
            a->payload = payload_sizes[i];
    if (rc == 0 && !a->payload)
        rc = app_fail(EINVAL, "the ports' MTU (%u) is too small for MRC: it needs at least %u", mtu,
                      512 + HEADER_ROOM);
    struct mrc_port_cfg cfg[MRC_MAX_PORTS] = {0};
    for (uint32_t i = 0; rc == 0 && i < a->nports; i++) {
        cfg[i].ifindex = a->ports[i].ifindex;
        cfg[i].plane = a->ports[i].plane;
        memcpy(cfg[i].src_mac, a->ports[i].mac, 6);
        memcpy(cfg[i].dst_mac, a->ports[i].next_hop_mac, 6);
        memcpy(cfg[i].src_addr, &a->ports[i].addr, 16);
    }
    struct mrc_ep_attr ep = {.max_qps = attr->max_qps ? attr->max_qps : 1024,
                             .cq_depth = attr->cq_depth ? attr->cq_depth : 65536, .planes = a->planes};
    struct mrc_ctx *c = NULL;
    if (rc == 0 && (rc = mrc_ctx_create(&ep, cfg, a->nports, &c)) < 0)
        rc = app_fail(-rc, "cannot open the MRC ports: %s%s", strerror(-rc),
                      rc == -EPERM ? " (raw sockets need CAP_NET_RAW: run as root)" : "");
    if (rc < 0) {
        app_free(a);
        return rc;
    }
    c->app = a;
    c->app_free = app_free;
    if ((rc = mrc_ctx_start(c)) < 0) {
        mrc_ctx_destroy(c);
        return app_fail(-rc, "cannot start the engine thread: %s", strerror(-rc));
    }
    a->ctl = app_ctl_start(c, a);
    c->app_stop = app_stop;
    *out = c;
    return 0;
}

int mrc_ctx_qp_attr_default(struct mrc_ctx *c, struct mrc_qp_attr *attr)
{
    struct app_ctx *a = app_of(c);
    if (!a || !attr)
        return -EINVAL;
    mrc_qp_attr_default(attr);
    attr->reorder_ns = SW_REORDER_NS;
    attr->timeout = SW_TIMEOUT;
    attr->probe_interval_ns = SW_PROBE_INTERVAL_NS;
    attr->skip_ns = SW_SKIP_NS;
    attr->ack_bytes = SW_ACK_BYTES;
    attr->cc.base_rtt = SW_BASE_RTT;
    attr->cc.target_delay = SW_TARGET_DELAY;
    attr->cc.qa_threshold = SW_QA_THRESHOLD;
    attr->cc.disable_qa = 1;
    attr->planes = a->planes;
    attr->mtu = a->payload;
    return 0;
}

int mrc_ctx_ports(struct mrc_ctx *c, struct mrc_port_info *out, uint32_t max)
{
    struct app_ctx *a = app_of(c);
    if (!a || !out)
        return -EINVAL;
    uint32_t n = 0;
    for (; n < a->nports && n < max; n++) {
        memset(&out[n], 0, sizeof(out[n]));
        snprintf(out[n].ifname, sizeof(out[n].ifname), "%s", a->ports[n].ifname);
        out[n].plane = a->ports[n].plane;
        out[n].mtu = a->ports[n].mtu;
        memcpy(out[n].addr, &a->ports[n].addr, 16);
        memcpy(out[n].mac, a->ports[n].mac, 6);
    }
    return (int)n;
}

int mrc_ctx_resolve_addr(struct mrc_ctx *c, const uint8_t addr[16], struct mrc_remote *out)
{
    app_clear_error();
    struct app_ctx *a = app_of(c);
    if (!a || !addr || !out)
        return -EINVAL;
    memset(out, 0, sizeof(*out));
    char text[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, addr, text, sizeof(text));
    if (!a->has_topo)
        return app_fail(ENOENT, "no topology to find the host of %s in (run it under `mrc fabric exec`, or set "
                        "$MRC_TOPOLOGY)", text);
    if (topo_host_of(&a->topo, (const struct in6_addr *)addr, out->host) < 0)
        return app_fail(ENOENT, "no host of topology %s has the address %s", a->topo.name, text);
    snprintf(out->topology, sizeof(out->topology), "%s", a->topo.name);
    out->reach.nplanes = a->planes;
    for (uint32_t p = 0; p < a->planes; p++) {
        struct mrc_peer_plane *pp = &out->reach.plane[p];
        if (topo_port_addr(&a->topo, out->host, p, (struct in6_addr *)pp->final_addr) < 0)
            continue; /* the peer has no port on this plane */
        pp->npaths = (uint32_t)topo_paths(&a->topo, out->host, p, pp->paths);
        if (!pp->npaths) {
            memcpy(pp->paths[0], pp->final_addr, 16);
            pp->npaths = 1;
        }
    }
    return 0;
}

void app_info_json(struct app_ctx *a, const struct mrc_local *mine, struct text *out)
{
    char addr[INET6_ADDRSTRLEN];
    text_printf(out, "{\"qpn\":%u,\"ports\":{", mine->qpn);
    for (uint32_t i = 0; i < a->nports; i++) {
        inet_ntop(AF_INET6, &a->ports[i].addr, addr, sizeof(addr));
        text_printf(out, "%s\"%u\":\"%s\"", i ? "," : "", a->ports[i].plane, addr);
    }
    text_printf(out, "},\"psn\":%u,\"paths\":{},\"addr\":%llu,\"rkey\":%u,\"length\":%llu,\"topology\":", mine->psn,
               (unsigned long long)mine->addr, mine->rkey, (unsigned long long)mine->length);
    if (a->has_topo)
        text_quote(out, a->topo.name);
    else
        text_put(out, "null", 4);
    text_put(out, ",\"host\":", 8);
    if (a->has_topo && a->topo.host[0])
        text_quote(out, a->topo.host);
    else
        text_put(out, "null", 4);
    text_put(out, "}", 1);
}

static int bad_info(const char *what)
{
    return app_fail(EPROTO, "bad connection-setup message: %s", what);
}

static int plane_key(const char *k)
{
    if (!k || !k[0] || (k[1] && k[2]) || k[0] < '0' || k[0] > '9' || (k[1] && (k[1] < '0' || k[1] > '9')))
        return -1;
    int p = k[1] ? (k[0] - '0') * 10 + k[1] - '0' : k[0] - '0';
    return p < MRC_MAX_PLANES && !(k[1] && k[0] == '0') ? p : -1;
}

static int name_field(const struct json *d, int info, const char *key, char out[65])
{
    int m = json_member(d, info, key);
    const char *s = json_str(d, m);
    out[0] = 0;
    if (m < 0 || d->n[m].type == J_NULL)
        return 0;
    if (!s || strlen(s) > 64)
        return bad_info("host and topology are names of at most 64 characters");
    strcpy(out, s);
    return 0;
}

int app_remote(struct app_ctx *a, const struct json *d, int info, struct mrc_remote *out)
{
    uint64_t v[5] = {0};
    static const struct { const char *key; uint64_t lo, hi; int need; } ints[5] = {
        {"qpn", 1, 0xFFFFFF, 1}, {"psn", 0, 0xFFFFFF, 0}, {"addr", 0, UINT64_MAX, 0},
        {"rkey", 0, UINT32_MAX, 0}, {"length", 0, UINT64_MAX, 0}};
    memset(out, 0, sizeof(*out));
    if (info < 0 || d->n[info].type != J_OBJ)
        return bad_info("info is not an object");
    for (int i = 0; i < 5; i++) {
        int m = json_member(d, info, ints[i].key), rc = json_uint(d, m, ints[i].hi, &v[i]);
        if ((rc == -ENOENT && ints[i].need) || rc == -EINVAL || v[i] < ints[i].lo)
            return app_fail(EPROTO, "bad connection-setup message: %s must be an integer from %llu to %llu",
                            ints[i].key, (unsigned long long)ints[i].lo, (unsigned long long)ints[i].hi);
    }
    out->qpn = (uint32_t)v[0];
    out->psn = (uint32_t)v[1];
    out->addr = v[2];
    out->rkey = (uint32_t)v[3];
    out->length = v[4];
    if (name_field(d, info, "host", out->host) < 0 || name_field(d, info, "topology", out->topology) < 0)
        return -EPROTO;
    int ports = json_member(d, info, "ports"), paths = json_member(d, info, "paths");
    if (ports < 0 || d->n[ports].type != J_OBJ || json_len(d, ports) < 1 || json_len(d, ports) > 16)
        return bad_info("ports must map 1 to 16 planes to addresses");
    if (paths >= 0 && d->n[paths].type != J_NULL && (d->n[paths].type != J_OBJ || json_len(d, paths) > 16))
        return bad_info("paths must map at most 16 planes to address lists");
    int any_paths = paths >= 0 && d->n[paths].type == J_OBJ && json_len(d, paths) > 0;
    int ours = a->has_topo && out->host[0] && !strcmp(out->topology, a->topo.name);
    out->reach.nplanes = a->planes;
    for (int m = d->n[ports].first; m >= 0; m = d->n[m].next) {
        int p = plane_key(json_key(d, m));
        if (p < 0)
            return bad_info("a plane is a number from 0 to 15");
        struct mrc_peer_plane *pp = &out->reach.plane[p];
        if (parse_addr(json_str(d, m), (struct in6_addr *)pp->final_addr) < 0)
            return bad_info("a port address is not an IPv6 address");
        char key[4];
        snprintf(key, sizeof(key), "%d", p);
        int list = any_paths ? json_member(d, paths, key) : -1, n = json_len(d, list);
        if (list >= 0 && (d->n[list].type != J_ARR || n > MRC_MAX_PATHS))
            return bad_info("a plane's paths are a list of at most 16 addresses");
        int k = 0;
        for (int x = json_first(d, list); x >= 0; x = json_next(d, x))
            if (parse_addr(json_str(d, x), (struct in6_addr *)pp->paths[k++]) < 0)
                return bad_info("a path is not an IPv6 address");
        pp->npaths = (uint32_t)n;
        if (!n && !any_paths && ours)
            pp->npaths = (uint32_t)topo_paths(&a->topo, out->host, (uint32_t)p, pp->paths);
        if (!pp->npaths) { /* a plain network: the port address itself */
            memcpy(pp->paths[0], pp->final_addr, 16);
            pp->npaths = 1;
        }
    }
    return 0;
}

/* The peer slot of `reach`: the same one for the same paths. */
static int peer_slot(struct mrc_ctx *c, struct app_ctx *a, const struct mrc_peer_cfg *reach)
{
    pthread_mutex_lock(&a->lock);
    for (int i = 0; i < a->npeers; i++)
        if (!memcmp(&a->peers[i].cfg, reach, sizeof(*reach))) {
            int idx = a->peers[i].idx;
            pthread_mutex_unlock(&a->lock);
            return idx;
        }
    void *grown = realloc(a->peers, sizeof(*a->peers) * (size_t)(a->npeers + 1));
    int idx = grown ? mrc_ctx_add_peer(c, reach) : -ENOMEM;
    if (grown)
        a->peers = grown;
    if (idx >= 0) {
        a->peers[a->npeers].cfg = *reach;
        a->peers[a->npeers++].idx = idx;
    }
    pthread_mutex_unlock(&a->lock);
    return idx < 0 ? app_fail(-idx, "cannot register the peer: %s%s", strerror(-idx),
                              idx == -ENOSPC ? " (a context reaches at most 256 distinct peers)" : "")
                   : idx;
}

int mrc_qp_connect_rtr(struct mrc_ctx *c, uint32_t qpn, const struct mrc_remote *peer)
{
    app_clear_error();
    struct app_ctx *a = app_of(c);
    if (!a || !peer)
        return -EINVAL;
    int idx = peer_slot(c, a, &peer->reach);
    if (idx < 0)
        return idx;
    uint32_t npaths[MRC_MAX_PLANES] = {0};
    for (uint32_t p = 0; p < a->planes; p++)
        npaths[p] = peer->reach.plane[p].npaths;
    struct mrc_qp_conn conn = {.dest_qpn = peer->qpn, .peer = (uint16_t)idx, .rq_psn = peer->psn};
    int rc = mrc_ev_set_paths(c, qpn, npaths, a->planes);
    const char *step = "tell it its paths";
    if (rc == 0 && (rc = mrc_qp_modify(c, qpn, MRC_QPS_INIT, &conn)) < 0)
        step = "move it to INIT";
    if (rc == 0 && (rc = mrc_qp_modify(c, qpn, MRC_QPS_RTR, &conn)) < 0)
        step = "move it to RTR";
    return rc < 0 ? app_fail(-rc, "cannot connect QP %u: %s failed: %s", qpn, step, strerror(-rc)) : 0;
}

int mrc_qp_connect(struct mrc_ctx *c, struct mrc_local *mine, const struct mrc_remote *peer)
{
    app_clear_error();
    if (!app_of(c) || !mine || !peer)
        return -EINVAL;
    app_pick_psn(mine);
    int rc = mrc_qp_connect_rtr(c, mine->qpn, peer);
    struct mrc_qp_conn conn = {.sq_psn = mine->psn};
    if (rc == 0 && (rc = mrc_qp_modify(c, mine->qpn, MRC_QPS_RTS, &conn)) < 0)
        return app_fail(-rc, "cannot connect QP %u: move it to RTS failed: %s", mine->qpn, strerror(-rc));
    return rc;
}

/* A random first PSN where the caller left 0. */
void app_pick_psn(struct mrc_local *mine)
{
    while (!mine->psn && getrandom(&mine->psn, sizeof(mine->psn), 0) == sizeof(mine->psn))
        mine->psn &= 0xFFFFFF;
}
