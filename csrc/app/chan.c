/* One connection-setup channel (struct mrc_cm): a TCP connection carrying
 * JSON objects one per line, each read bounded in size (MAX_LINE) and time;
 * the pre-shared key file; refusing a peer politely. The exchange over it
 * is cm.c's. */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "app.h"

int chan_read_psk(const char *path, uint8_t *key, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return app_fail(errno, "cannot read the pre-shared key file %s: %s", path, strerror(errno));
    uint8_t raw[MAX_PSK + 2];
    size_t n = fread(raw, 1, sizeof(raw), f), s = 0;
    fclose(f);
    while (s < n && (raw[s] == ' ' || (raw[s] >= '\t' && raw[s] <= '\r')))
        s++;
    while (n > s && (raw[n - 1] == ' ' || (raw[n - 1] >= '\t' && raw[n - 1] <= '\r')))
        n--;
    if (n - s > MAX_PSK)
        return app_fail(EINVAL, "the pre-shared key in %s is over %d bytes", path, MAX_PSK);
    if (n - s < 16)
        return app_fail(EINVAL, "the pre-shared key in %s is %zu bytes: use at least 16 (e.g. `head -c 32 "
                        "/dev/urandom | base64 > %s`)", path, n - s, path);
    memcpy(key, raw + s, n - s);
    *len = n - s;
    return 0;
}

int mrc_cm_send(struct mrc_cm *cm, const char *json_object)
{
    size_t len = strlen(json_object);
    if (len >= MAX_LINE || memchr(json_object, '\n', len))
        return app_fail(EINVAL, "a connection-setup message is one line of less than %u bytes", MAX_LINE);
    struct text b = {0};
    text_put(&b, json_object, len);
    text_put(&b, "\n", 1);
    if (b.oom) {
        text_free(&b);
        return app_fail(ENOMEM, "out of memory");
    }
    for (size_t off = 0; off < b.n;) {
        ssize_t k = send(cm->fd, b.p + off, b.n - off, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            int err = errno;
            text_free(&b);
            return app_fail(err, "cannot write the connection-setup channel: %s", strerror(err));
        }
        off += (size_t)k;
    }
    text_free(&b);
    return 0;
}

int mrc_cm_recv(struct mrc_cm *cm, int timeout_ms)
{
    uint64_t deadline = mrc_ctx_now_ns() / 1000000 + (uint64_t)(timeout_ms > 0 ? timeout_ms : SETUP_MS);
    char *nl;
    json_free(&cm->msg);
    while (!(nl = cm->n ? memchr(cm->in, '\n', cm->n) : NULL)) {
        if (cm->n > MAX_LINE)
            return app_fail(EMSGSIZE, "a connection-setup message over %u bytes", MAX_LINE);
        uint64_t t = mrc_ctx_now_ns() / 1000000;
        struct pollfd pf = {.fd = cm->fd, .events = POLLIN};
        int r = t >= deadline ? 0 : poll(&pf, 1, (int)(deadline - t));
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0)
            return app_fail(ETIMEDOUT, "the peer sent no complete message within %d ms",
                            timeout_ms > 0 ? timeout_ms : SETUP_MS);
        char *grown = realloc(cm->in, cm->n + 65536);
        if (!grown)
            return app_fail(ENOMEM, "out of memory");
        cm->in = grown;
        ssize_t k = recv(cm->fd, cm->in + cm->n, 65536, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return app_fail(errno, "cannot read the connection-setup channel: %s", strerror(errno));
        if (k == 0)
            return app_fail(ECONNRESET, "the peer closed the connection-setup channel");
        cm->n += (size_t)k;
    }
    size_t len = (size_t)(nl - cm->in);
    if (len > MAX_LINE)
        return app_fail(EMSGSIZE, "a connection-setup message over %u bytes", MAX_LINE);
    int rc = json_parse(&cm->msg, cm->in, len, "a connection-setup message");
    memmove(cm->in, nl + 1, cm->n - len - 1);
    cm->n -= len + 1;
    if (rc < 0)
        return rc;
    if (cm->msg.n[0].type != J_OBJ) {
        json_free(&cm->msg);
        return app_fail(EPROTO, "bad connection-setup message: not a JSON object");
    }
    int err = json_member(&cm->msg, 0, "error");
    if (err >= 0) {
        uint64_t code = EPROTO;
        json_uint(&cm->msg, json_member(&cm->msg, 0, "errno"), 4095, &code);
        const char *why = json_str(&cm->msg, err);
        app_fail(code ? (int)code : EPROTO, "the peer refused: %.200s", why ? why : "(no reason given)");
        json_free(&cm->msg);
        return -(code ? (int)code : EPROTO);
    }
    return (int)len;
}

int mrc_cm_get(struct mrc_cm *cm, const char *path, uint64_t *value)
{
    if (!cm->msg.n)
        return -ENOENT;
    char part[128];
    int node = 0;
    for (const char *p = path; node >= 0;) {
        size_t k = strcspn(p, ".");
        if (k >= sizeof(part))
            return -EINVAL;
        memcpy(part, p, k);
        part[k] = 0;
        node = json_member(&cm->msg, node, part);
        if (!p[k])
            break;
        p += k + 1;
    }
    if (node >= 0 && cm->msg.n[node].type == J_BOOL) {
        *value = (uint64_t)cm->msg.n[node].val;
        return 0;
    }
    return json_uint(&cm->msg, node, UINT64_MAX, value);
}

int mrc_cm_fd(struct mrc_cm *cm)
{
    return cm->fd;
}

void mrc_cm_close(struct mrc_cm *cm)
{
    if (!cm)
        return;
    if (cm->fd >= 0)
        close(cm->fd);
    json_free(&cm->msg);
    free(cm->in);
    explicit_bzero(cm->key, sizeof(cm->key));
    explicit_bzero(cm->kx_priv, sizeof(cm->kx_priv));
    free(cm);
}

struct mrc_cm *chan_new(int fd)
{
    struct mrc_cm *cm = calloc(1, sizeof(*cm));
    if (!cm) {
        close(fd);
        return NULL;
    }
    cm->fd = fd;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return cm;
}

/* hex HMAC-SHA256(key, challenge + role + canonical(msg without "auth")) */

/* Tell the peer why (best effort), then read and drop what it still sends
 * for a moment, so that closing does not reset the connection first. */
void chan_refuse(struct mrc_cm *cm, int err)
{
    struct text b = {0};
    text_put(&b, "{\"error\":", 9);
    text_quote(&b, mrc_last_error());
    text_printf(&b, ",\"errno\":%d}", err);
    if (!b.oom)
        mrc_cm_send(cm, b.p);
    text_free(&b);
    shutdown(cm->fd, SHUT_WR);
    char sink[4096];
    uint64_t deadline = mrc_ctx_now_ns() / 1000000 + 500;
    for (size_t left = 1u << 20; left > 0;) {
        uint64_t t = mrc_ctx_now_ns() / 1000000;
        struct pollfd pf = {.fd = cm->fd, .events = POLLIN};
        if (t >= deadline || poll(&pf, 1, (int)(deadline - t)) <= 0)
            break;
        ssize_t k = recv(cm->fd, sink, sizeof(sink), 0);
        if (k <= 0)
            break;
        left = (size_t)k > left ? 0 : left - (size_t)k;
    }
}
