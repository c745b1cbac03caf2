/* A topology file (docs/topology.md, JSON), as mrc.paths reads it: this
 * host's ports, the management address of each host, and the destination
 * addresses of the paths from this host to another on each plane (the
 * uSID containers of a fabric, or the other host's port address). Checked
 * when it is read; asked afterwards. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/app.h"

#define MAX_FILE (64u << 20)

static int check_port(struct topo *t, const char *host, int port, int i, uint32_t *planes)
{
    const struct json *d = &t->doc;
    uint64_t plane;
    struct in6_addr a;
    if (json_uint(d, json_member(d, port, "plane"), MRC_MAX_PLANES - 1, &plane) < 0
        || parse_addr(json_str(d, json_member(d, port, "address")), &a) < 0)
        return app_fail(EINVAL, "%s: host '%s', port %d needs 'plane' (0..15) and 'address' (IPv6)", t->path, host,
                        i);
    if (*planes & 1u << plane)
        return app_fail(EINVAL, "%s: host '%s' has plane %d twice", t->path, host, (int)plane);
    *planes |= 1u << plane;
    int ifname = json_member(d, port, "ifname");
    const char *name = json_str(d, ifname);
    if (ifname >= 0 && d->n[ifname].type != J_NULL && (!name || strlen(name) >= IF_NAMESIZE))
        return app_fail(EINVAL, "%s: host '%s', port %d: 'ifname' is an interface name", t->path, host, i);
    return 0;
}

static int check(struct topo *t)
{
    const struct json *d = &t->doc;
    struct in6_addr a;
    if ((t->hosts = json_member(d, 0, "hosts")) < 0 || d->n[t->hosts].type != J_OBJ || !json_len(d, t->hosts))
        return app_fail(EINVAL, "%s: a topology needs a 'hosts' mapping with at least one host", t->path);
    for (int h = d->n[t->hosts].first; h >= 0; h = d->n[h].next) {
        const char *name = json_key(d, h);
        int ports = json_member(d, h, "ports"), mgmt = json_member(d, h, "mgmt");
        uint32_t planes = 0;
        if (ports < 0 || d->n[ports].type != J_ARR || !json_len(d, ports))
            return app_fail(EINVAL, "%s: host '%s' needs a non-empty 'ports' list", t->path, name);
        for (int i = 0, p = json_first(d, ports); p >= 0; i++, p = json_next(d, p))
            if (check_port(t, name, p, i, &planes) < 0)
                return -EINVAL;
        if (mgmt >= 0 && d->n[mgmt].type != J_NULL && parse_addr(json_str(d, mgmt), &a) < 0)
            return app_fail(EINVAL, "%s: host '%s': 'mgmt' is not an IPv6 address", t->path, name);
    }
    int paths = json_member(d, 0, "paths");
    for (int i = 0, p = json_first(d, paths); p >= 0; i++, p = json_next(d, p)) {
        int addrs = json_member(d, p, "addresses"), n = json_len(d, addrs);
        uint64_t plane;
        const char *src = json_str(d, json_member(d, p, "src")), *dst = json_str(d, json_member(d, p, "dst"));
        if (!src || !dst || json_member(d, t->hosts, src) < 0 || json_member(d, t->hosts, dst) < 0
            || json_uint(d, json_member(d, p, "plane"), MRC_MAX_PLANES - 1, &plane) < 0 || addrs < 0
            || d->n[addrs].type != J_ARR || n < 1 || n > MRC_MAX_PATHS)
            return app_fail(EINVAL, "%s: paths[%d] needs 'src' and 'dst' (hosts of the topology), 'plane' and "
                            "'addresses' (1 to 16)", t->path, i);
        int k = 0;
        for (int x = json_first(d, addrs); x >= 0; x = json_next(d, x), k++)
            if (parse_addr(json_str(d, x), &a) < 0)
                return app_fail(EINVAL, "%s: paths[%d]: address %d is not an IPv6 address", t->path, i, k);
    }
    return 0;
}

/* The host whose port addresses this namespace has (none or several: ""). */
static void find_me(struct topo *t)
{
    const struct json *d = &t->doc;
    struct in6_addr mine[256], a;
    int n = ports_local_addrs(mine, 256);
    const char *found = NULL;
    for (int h = d->n[t->hosts].first; h >= 0; h = d->n[h].next) {
        int ports = json_member(d, h, "ports");
        for (int p = json_first(d, ports); p >= 0; p = json_next(d, p)) {
            parse_addr(json_str(d, json_member(d, p, "address")), &a);
            for (int k = 0; k < n; k++)
                if (!memcmp(&a, &mine[k], 16)) {
                    if (found && strcmp(found, json_key(d, h)))
                        return;
                    found = json_key(d, h);
                }
        }
    }
    if (found && strlen(found) < sizeof(t->host))
        strcpy(t->host, found);
}

int topo_load(struct topo *t, const char *path, const char *host)
{
    memset(t, 0, sizeof(*t));
    snprintf(t->path, sizeof(t->path), "%s", path);
    FILE *f = fopen(path, "rb");
    if (!f)
        return app_fail(errno, "cannot read topology file %s: %s", path, strerror(errno));
    char *text = malloc(MAX_FILE);
    size_t len = text ? fread(text, 1, MAX_FILE, f) : 0;
    int over = text && len == MAX_FILE && fgetc(f) != EOF;
    fclose(f);
    if (!text)
        return app_fail(ENOMEM, "out of memory reading %s", path);
    if (over) {
        free(text);
        return app_fail(EFBIG, "topology file %s is over %u MiB", path, MAX_FILE >> 20);
    }
    char what[300];
    snprintf(what, sizeof(what), "topology file %s", path);
    int rc = json_parse(&t->doc, text, len, what);
    free(text);
    if (rc < 0)
        return rc;
    if ((rc = check(t)) < 0) {
        topo_free(t);
        return rc;
    }
    const char *name = json_str(&t->doc, json_member(&t->doc, 0, "name"));
    snprintf(t->name, sizeof(t->name), "%s", name && *name ? name : path);
    if (host) {
        if (json_member(&t->doc, t->hosts, host) < 0 || strlen(host) >= sizeof(t->host)) {
            topo_free(t);
            return app_fail(ENOENT, "%s: no host '%s'", path, host);
        }
        strcpy(t->host, host);
    } else {
        find_me(t);
    }
    return 0;
}

void topo_free(struct topo *t)
{
    json_free(&t->doc);
}

int topo_local_ports(const struct topo *t, struct app_port *out, uint32_t max)
{
    const struct json *d = &t->doc;
    if (!t->host[0])
        return app_fail(ENOENT, "%s: which host is this? None of its hosts has the addresses of this network "
                        "namespace: give the host ($MRC_HOST, or mrc_open_attr.host)", t->path);
    int ports = json_member(d, json_member(d, t->hosts, t->host), "ports");
    uint32_t n = 0;
    for (int p = json_first(d, ports); p >= 0 && n < max; p = json_next(d, p)) {
        uint64_t plane;
        const char *ifname = json_str(d, json_member(d, p, "ifname"));
        json_uint(d, json_member(d, p, "plane"), MRC_MAX_PLANES - 1, &plane);
        if (!ifname)
            return app_fail(EINVAL, "%s: host '%s' names no interface ('ifname') for plane %d", t->path, t->host,
                            (int)plane);
        memset(&out[n], 0, sizeof(out[n]));
        snprintf(out[n].ifname, sizeof(out[n].ifname), "%s", ifname);
        out[n++].plane = (uint32_t)plane;
    }
    return (int)n;
}

int topo_mgmt(const struct topo *t, const char *host, struct in6_addr *out)
{
    int h = json_member(&t->doc, t->hosts, host);
    return h >= 0 && parse_addr(json_str(&t->doc, json_member(&t->doc, h, "mgmt")), out) == 0 ? 0 : -ENOENT;
}

int topo_paths(const struct topo *t, const char *dst, uint32_t plane, uint8_t out[][16])
{
    const struct json *d = &t->doc;
    int paths = json_member(d, 0, "paths");
    uint64_t pl;
    if (!t->host[0] || json_member(d, t->hosts, dst) < 0)
        return 0;
    for (int p = json_first(d, paths); p >= 0; p = json_next(d, p)) {
        if (strcmp(json_str(d, json_member(d, p, "src")), t->host) || strcmp(json_str(d, json_member(d, p, "dst")), dst)
            || json_uint(d, json_member(d, p, "plane"), MRC_MAX_PLANES - 1, &pl) < 0 || pl != plane)
            continue;
        int k = 0; /* checked when the file was read: 1 to 16 addresses */
        for (int x = json_first(d, json_member(d, p, "addresses")); x >= 0; x = json_next(d, x))
            parse_addr(json_str(d, x), (struct in6_addr *)out[k++]);
        return k;
    }
    int ports = json_member(d, json_member(d, t->hosts, dst), "ports");
    for (int p = json_first(d, ports); p >= 0; p = json_next(d, p))
        if (json_uint(d, json_member(d, p, "plane"), MRC_MAX_PLANES - 1, &pl) == 0 && pl == plane)
            return parse_addr(json_str(d, json_member(d, p, "address")), (struct in6_addr *)out[0]) == 0;
    return 0;
}

int topo_host_of(const struct topo *t, const struct in6_addr *addr, char host[65])
{
    const struct json *d = &t->doc;
    struct in6_addr a;
    for (int h = d->n[t->hosts].first; h >= 0; h = d->n[h].next)
        for (int p = json_first(d, json_member(d, h, "ports")); p >= 0; p = json_next(d, p))
            if (parse_addr(json_str(d, json_member(d, p, "address")), &a) == 0 && !memcmp(&a, addr, 16)) {
                snprintf(host, 65, "%s", json_key(d, h));
                return 0;
            }
    return -ENOENT;
}

int topo_port_addr(const struct topo *t, const char *host, uint32_t plane, struct in6_addr *out)
{
    const struct json *d = &t->doc;
    uint64_t pl;
    int ports = json_member(d, json_member(d, t->hosts, host), "ports");
    for (int p = json_first(d, ports); p >= 0; p = json_next(d, p))
        if (json_uint(d, json_member(d, p, "plane"), MRC_MAX_PLANES - 1, &pl) == 0 && pl == plane)
            return parse_addr(json_str(d, json_member(d, p, "address")), out) == 0 ? 0 : -ENOENT;
    return -ENOENT;
}
