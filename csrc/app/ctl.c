/* The control endpoint of a context opened by name: what `mrc ctl list`, `mrc ctl metrics` and `mrc dash`
 * read from a Python process's mrc.ctl.endpoint, served for a C program (and a libibverbs program over
 * libmrc-verbs). A UNIX socket at $MRC_CTL_DIR/<pid>.sock (default /run/mrc/ctl), mode 0600, made where
 * nobody else can reach it first (bound in a private directory, then renamed into place), one JSON
 * request a line and one answer a line, as mrc/ctl/endpoint.py speaks: ops info, qps and metrics (the
 * readings); the others answer EOPNOTSUPP (a C program steers its own QPs). No endpoint where the
 * directory cannot be made or written (not root) or with MRC_CTL=off: the program runs on without. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "app/app.h"
#include "mrc_wire.h"

#define CTL_DIR "/run/mrc/ctl"
#define MAX_REQUEST 4096   /* a request line (they are a few dozen bytes) */
#define IDLE_MS 2000       /* a client silent this long is dropped: one at a time, none can hold it */
#define MAX_QPS_LISTED 4096
#define PUT(b, lit) text_put((b), (lit), sizeof(lit) - 1) /* a string literal, its length counted */

struct app_ctl {
    struct mrc_ctx *c;
    struct app_ctx *a;
    int fd, stop[2];
    pthread_t thread;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    char role[96];
};

/* The directory: made if missing, a directory of root's or ours that nobody else may write. */
static int ctl_dir_ok(const char *dir)
{
    char parent[sizeof(((struct sockaddr_un *)0)->sun_path)];
    snprintf(parent, sizeof(parent), "%s", dir);
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent) {
        *slash = 0;
        mkdir(parent, 0755);
    }
    mkdir(dir, 0755);
    struct stat st;
    if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || (st.st_uid != 0 && st.st_uid != geteuid())
        || (st.st_mode & 022))
        return -1;
    return 0;
}

/* A listening socket at path, mode 0600, bound in a private directory and renamed into place. */
static int ctl_bind(const char *dir, const char *path)
{
    char priv[sizeof(((struct sockaddr_un *)0)->sun_path)];
    if (snprintf(priv, sizeof(priv), "%s/.bind-XXXXXX", dir) >= (int)sizeof(priv) || !mkdtemp(priv))
        return -1;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd = -1;
    if (snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/s", priv) < (int)sizeof(sa.sun_path)
        && (fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0) {
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(sa.sun_path, 0600) < 0 || listen(fd, 16) < 0
            || rename(sa.sun_path, path) < 0) {
            close(fd);
            fd = -1;
            unlink(sa.sun_path);
        }
    }
    rmdir(priv);
    return fd;
}

static void put_u64(struct text *b, const char *key, uint64_t v) { text_printf(b, ", \"%s\": %llu", key,
                                                                                (unsigned long long)v); }

static void answer_ports(struct app_ctl *t, struct text *b, int full)
{
    PUT(b, "[");
    for (uint32_t i = 0; i < t->a->nports; i++) {
        struct mrc_port_stats st = {0};
        mrc_ctx_port_stats(t->c, t->a->ports[i].plane, &st);
        char addr[INET6_ADDRSTRLEN];
        inet_ntop(AF_INET6, &t->a->ports[i].addr, addr, sizeof(addr));
        text_printf(b, "%s{\"ifname\": ", i ? ", " : "");
        text_quote(b, t->a->ports[i].ifname);
        text_printf(b, ", \"plane\": %u, \"address\": \"%s\"", t->a->ports[i].plane, addr);
        if (full) {
            put_u64(b, "tx_packets", st.tx_packets);
            put_u64(b, "tx_bytes", st.tx_bytes);
            put_u64(b, "rx_packets", st.rx_packets);
            put_u64(b, "rx_bytes", st.rx_bytes);
            put_u64(b, "tx_errors", st.tx_errors);
            put_u64(b, "rx_ring_drops", st.rx_ring_drops);
            put_u64(b, "carrier_downs", st.carrier_downs);
            uint64_t gtx = 0, grx = 0;
            mrc_ctx_port_gso(t->c, t->a->ports[i].plane, &gtx, &grx);
            put_u64(b, "gso_tx_buffers", gtx);
            put_u64(b, "gso_rx_buffers", grx);
            text_printf(b, ", \"carrier\": %s, \"admin_up\": %s", st.carrier ? "true" : "false",
                        st.admin_up ? "true" : "false");
        } else {
            text_printf(b, ", \"admin\": \"%s\", \"link\": \"%s\", \"carrier_downs\": %llu",
                        st.admin_up ? "ENABLED" : "DISABLED", st.carrier ? "UP" : "DOWN",
                        (unsigned long long)st.carrier_downs);
        }
        PUT(b, "}");
    }
    PUT(b, "]");
}

/* One QP's counters and state; with evs, its EVs counted by plane and state. */
static void answer_qp(struct app_ctl *t, struct text *b, uint32_t qpn, int evs)
{
    struct mrc_qp_stats st;
    if (mrc_qp_query(t->c, qpn, &st) < 0)
        return;
    const char *state = mrc_qp_state_name(st.state);
    text_printf(b, "{\"qpn\": %u, \"state\": \"%s\", \"state_name\": \"%s\"", qpn, state ? state : "?",
                state ? state : "?");
#define F(k) put_u64(b, #k, st.k)
    F(tx_packets); F(tx_bytes); F(rtx_packets); F(rtx_bytes); F(rx_packets); F(rx_bytes); F(sacks_tx);
    F(sacks_rx); F(nacks_tx); F(nacks_rx); F(probes_tx); F(probes_rx); F(losses); F(timeouts); F(ecn_marks);
    F(trims); F(cwnd); F(srtt_ns); F(inflight); F(good_evs); F(bad_evs); F(rnr_naks); F(min_rtt_ns);
    F(base_rtt_ns); F(tlp_probes);
#undef F
    if (evs) { /* {"plane": {"STATE": count}}, as mrc.ctl.endpoint's metrics answer */
        struct mrc_ev_info *info = calloc(MRC_MAX_EV_COUNT, sizeof(*info));
        int n = info ? mrc_ev_list(t->c, qpn, info, MRC_MAX_EV_COUNT) : 0;
        uint32_t count[16][5] = {{0}};
        for (int i = 0; i < n && i < MRC_MAX_EV_COUNT; i++)
            if (info[i].state < 5)
                count[(info[i].ev >> MRC_EV_PLANE_SHIFT) & 15][info[i].state]++;
        free(info);
        PUT(b, ", \"evs\": {");
        int planes = 0;
        for (int p = 0; p < 16; p++) {
            int states = 0;
            for (int s = 0; s < 5; s++) {
                if (!count[p][s])
                    continue;
                if (!states++)
                    text_printf(b, "%s\"%d\": {", planes++ ? ", " : "", p);
                else
                    PUT(b, ", ");
                text_printf(b, "\"%s\": %u", mrc_ev_state_name((uint32_t)s), count[p][s]);
            }
            if (states)
                PUT(b, "}");
        }
        PUT(b, "}");
    }
    PUT(b, "}");
}

static int qp_list(struct app_ctl *t, uint32_t *qpns)
{
    int n = mrc_ctx_qp_list(t->c, qpns, MAX_QPS_LISTED);
    return n < 0 ? 0 : n > MAX_QPS_LISTED ? MAX_QPS_LISTED : n;
}

static void answer(struct app_ctl *t, const char *op, struct text *b)
{
    static uint32_t qpns[MAX_QPS_LISTED];
    int n = qp_list(t, qpns);
    const char *host = t->a->has_topo && t->a->topo.host[0] ? t->a->topo.host : NULL;
    if (!strcmp(op, "info")) {
        text_printf(b, "{\"ok\": true, \"pid\": %d, \"role\": ", (int)getpid());
        text_quote(b, t->role);
        PUT(b, ", \"ports\": ");
        answer_ports(t, b, 0);
        PUT(b, ", \"qps\": [");
        for (int i = 0; i < n; i++)
            text_printf(b, "%s%u", i ? ", " : "", qpns[i]);
        PUT(b, "], \"host\": ");
        host ? text_quote(b, host) : PUT(b, "null");
        PUT(b, ", \"topology\": ");
        t->a->has_topo ? text_quote(b, t->a->topo.name) : PUT(b, "null");
        text_printf(b, ", \"peers\": %d, \"regions\": null}", t->a->npeers);
    } else if (!strcmp(op, "qps") || !strcmp(op, "metrics")) {
        int metrics = !strcmp(op, "metrics");
        text_printf(b, "{\"ok\": true, \"pid\": %d, \"role\": ", (int)getpid());
        text_quote(b, t->role);
        PUT(b, ", \"host\": ");
        host ? text_quote(b, host) : PUT(b, "null");
        PUT(b, ", \"qps\": [");
        for (int i = 0; i < n; i++) {
            if (i)
                PUT(b, ", ");
            answer_qp(t, b, qpns[i], metrics);
        }
        PUT(b, "]");
        if (metrics) {
            uint64_t drops[MRC_DROP_NREASONS] = {0};
            mrc_ctx_drops(t->c, drops, MRC_DROP_NREASONS);
            PUT(b, ", \"drops\": {");
            for (int r = 0; r < MRC_DROP_NREASONS; r++)
                text_printf(b, "%s\"%s\": %llu", r ? ", " : "", mrc_drop_name((uint32_t)r),
                            (unsigned long long)drops[r]);
            struct mrc_ep_stats es = {0};
            mrc_ctx_stats(t->c, &es);
            PUT(b, "}, \"ports\": ");
            answer_ports(t, b, 1);
            text_printf(b, ", \"cq_overflow\": %llu", (unsigned long long)es.cq_overflow);
        }
        PUT(b, "}");
    } else {
        text_printf(b, "{\"ok\": false, \"errno\": %d, \"error\": \"EOPNOTSUPP: a C program's control endpoint "
                       "answers info, qps and metrics; the program steers its own QPs\"}", EOPNOTSUPP);
    }
    PUT(b, "\n");
}

/* One client: its requests, a line each, until it hangs up, goes silent or sends nonsense. */
static void serve_client(struct app_ctl *t, int fd)
{
    char req[MAX_REQUEST + 1];
    size_t n = 0;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, IDLE_MS) <= 0)
            return;
        ssize_t got = read(fd, req + n, MAX_REQUEST - n);
        if (got <= 0)
            return;
        n += (size_t)got;
        char *nl;
        while ((nl = memchr(req, '\n', n))) {
            struct json d = {0};
            struct text b = {0};
            const char *op = NULL;
            if (json_parse(&d, req, (size_t)(nl - req), "a control request") == 0)
                op = json_str(&d, json_member(&d, 0, "op"));
            if (op)
                answer(t, op, &b);
            else
                text_printf(&b, "{\"ok\": false, \"errno\": %d, \"error\": \"EINVAL: a request is a JSON object "
                                "with an op\"}\n", EINVAL);
            json_free(&d);
            int ok = !b.oom && write(fd, b.p, b.n) == (ssize_t)b.n;
            text_free(&b);
            if (!ok)
                return;
            n -= (size_t)(nl + 1 - req);
            memmove(req, nl + 1, n);
        }
        if (n == MAX_REQUEST)
            return; /* a line this long is no request */
    }
}

/* The sockets this process serves, removed at exit() too: a C program often exits without destroying its
 * context (a killed one leaves its socket, which `mrc ctl list` passes over and the next endpoint sweeps). */
#define MAX_LIVE 64
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static char *live[MAX_LIVE];

static void unlink_live(void)
{
    pthread_mutex_lock(&live_lock);
    for (int i = 0; i < MAX_LIVE; i++)
        if (live[i])
            unlink(live[i]);
    pthread_mutex_unlock(&live_lock);
}

static void track(const char *path, int on)
{
    static int registered;
    pthread_mutex_lock(&live_lock);
    if (on && !registered)
        registered = atexit(unlink_live) == 0;
    for (int i = 0; i < MAX_LIVE; i++) {
        if (on && !live[i]) {
            live[i] = strdup(path);
            break;
        }
        if (!on && live[i] && !strcmp(live[i], path)) {
            free(live[i]);
            live[i] = NULL;
            break;
        }
    }
    pthread_mutex_unlock(&live_lock);
}

/* Sockets in dir whose process is gone (<pid>.sock, <pid>-<tag>.sock), removed. */
static void sweep_stale(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (pid <= 0 || (*end != '.' && *end != '-') || !strstr(end, ".sock") || kill((pid_t)pid, 0) == 0
            || errno != ESRCH)
            continue;
        char path[PATH_MAX];
        if (snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) < (int)sizeof(path))
            unlink(path);
    }
    closedir(d);
}

static void *ctl_thread(void *arg)
{
    struct app_ctl *t = arg;
    for (;;) {
        struct pollfd p[2] = {{.fd = t->fd, .events = POLLIN}, {.fd = t->stop[0], .events = POLLIN}};
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            return NULL;
        if (p[1].revents)
            return NULL;
        if (p[0].revents & POLLIN) {
            int c = accept4(t->fd, NULL, NULL, SOCK_CLOEXEC);
            if (c >= 0) {
                serve_client(t, c);
                close(c);
            }
        }
    }
}

struct app_ctl *app_ctl_start(struct mrc_ctx *c, struct app_ctx *a)
{
    const char *off = getenv("MRC_CTL");
    if (off && (!strcmp(off, "off") || !strcmp(off, "0")))
        return NULL;
    const char *dir = getenv("MRC_CTL_DIR");
    dir = dir && *dir ? dir : CTL_DIR;
    struct app_ctl *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->c = c;
    t->a = a;
    t->fd = -1;
    t->stop[0] = t->stop[1] = -1;
    char comm[32] = "a C program";
    FILE *f = fopen("/proc/self/comm", "r");
    if (f) {
        if (fgets(comm, sizeof(comm), f))
            comm[strcspn(comm, "\n")] = 0;
        fclose(f);
    }
    const char *role = getenv("MRC_CTL_ROLE");
    snprintf(t->role, sizeof(t->role), role && *role ? "%s" : "%s (libmrc)", role && *role ? role : comm);
    if (snprintf(t->path, sizeof(t->path), "%s/%d.sock", dir, (int)getpid()) >= (int)sizeof(t->path)
        || ctl_dir_ok(dir) < 0 || (t->fd = ctl_bind(dir, t->path)) < 0 || pipe2(t->stop, O_CLOEXEC) < 0
        || pthread_create(&t->thread, NULL, ctl_thread, t) != 0) {
        if (t->fd >= 0) {
            close(t->fd);
            unlink(t->path);
        }
        if (t->stop[0] >= 0) {
            close(t->stop[0]);
            close(t->stop[1]);
        }
        free(t);
        return NULL;
    }
    track(t->path, 1);
    sweep_stale(dir);
    return t;
}

void app_ctl_stop(struct app_ctl *t)
{
    if (!t)
        return;
    if (write(t->stop[1], "x", 1) < 0) {
        /* the thread polls the pipe: a full pipe still wakes it */
    }
    pthread_join(t->thread, NULL);
    close(t->stop[0]);
    close(t->stop[1]);
    close(t->fd);
    unlink(t->path);
    track(t->path, 0);
    free(t);
}
