/* One connection-setup channel (struct mrc_cm): a TCP connection carrying
 * JSON objects one per line, each read bounded in size (MAX_LINE) and time;
 * the pre-shared key file; refusing a peer politely. The exchange over it
 * is cm.c's. */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "app/app.h"

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

/* (key, nonce) of a direction's message n: the IV XOR n in its last 8 bytes */
static void nth(const uint8_t key_iv[44], uint64_t n, uint8_t nonce[12])
{
    memcpy(nonce, key_iv + 32, 12);
    for (int i = 0; i < 8; i++)
        nonce[4 + i] ^= (uint8_t)(n >> (56 - 8 * i));
}

static const char MSG_AAD[] = "mrc message";

void chan_arm(struct mrc_cm *cm)
{
    cm->sealed = cm->auth;
    cm->ntx = cm->nrx = 1;
}

int chan_seal_hex(const uint8_t key_iv[44], uint64_t n, const char *aad, const char *in, size_t len, struct text *out)
{
    uint8_t nonce[12], *sealed = malloc(len + SEAL_TAG);
    char *hex = malloc(2 * (len + SEAL_TAG) + 1);
    nth(key_iv, n, nonce);
    int rc = sealed && hex ? mrc_sec_aead(1, key_iv, nonce, (const uint8_t *)aad, (uint32_t)strlen(aad),
                                          (const uint8_t *)in, (uint32_t)len, sealed)
                           : -ENOMEM;
    if (rc == 0) {
        hex_encode(sealed, len + SEAL_TAG, hex);
        text_put(out, hex, strlen(hex));
    }
    free(sealed);
    free(hex);
    return rc < 0 ? rc : out->oom ? -ENOMEM : 0;
}

int chan_open_hex(const uint8_t key_iv[44], uint64_t n, const char *aad, const char *hex, const char *what,
                  struct json *out)
{
    size_t len = hex ? strlen(hex) / 2 : 0;
    uint8_t *raw = len ? malloc(len) : NULL, *plain = len ? malloc(len) : NULL, nonce[12];
    int rc = raw && plain && len > SEAL_TAG && hex_decode(hex, raw, len) == (int)len ? 0 : -EBADMSG;
    nth(key_iv, n, nonce);
    if (rc == 0 && mrc_sec_aead(0, key_iv, nonce, (const uint8_t *)aad, (uint32_t)strlen(aad), raw, (uint32_t)len,
                                plain) < 0)
        rc = -EACCES;
    if (rc == 0) {
        json_free(out);
        rc = json_parse(out, (const char *)plain, len - SEAL_TAG, "a sealed connection-setup message");
        if (rc == 0 && out->n[0].type != J_OBJ) {
            json_free(out);
            rc = app_fail(EPROTO, "bad connection-setup message: the sealed %s is not a JSON object", what);
        }
    }
    if (plain) /* the decrypted text (QP numbers, keys) is not left behind */
        OPENSSL_cleanse(plain, len);
    free(raw);
    free(plain);
    return rc;
}

/* {"sealed": hex of the message under our direction's key and its next number} into b */
static int seal_line(struct mrc_cm *cm, const char *json_object, size_t len, struct text *b)
{
    text_put(b, "{\"sealed\":\"", 11);
    int rc = chan_seal_hex(cm->initiator ? cm->c2s : cm->s2c, cm->ntx, MSG_AAD, json_object, len, b);
    text_put(b, "\"}", 2);
    if (rc < 0)
        return app_fail(ENOMEM, "cannot seal a connection-setup message");
    cm->ntx++;
    return 0;
}

/* cm->msg, {"sealed": ...} and nothing else, becomes the message it carries: the next of its direction. */
static int open_line(struct mrc_cm *cm)
{
    const char *hex = json_str(&cm->msg, json_member(&cm->msg, 0, "sealed"));
    uint64_t n = cm->nrx;
    if (!hex || json_len(&cm->msg, 0) != 1)
        return app_fail(EACCES, "setup-channel message %llu came unsealed on a sealed channel (a relay without "
                        "the key?): the connection ends", (unsigned long long)n);
    char *copy = strdup(hex); /* the message it sits in is replaced */
    int rc = copy ? chan_open_hex(cm->initiator ? cm->s2c : cm->c2s, n, MSG_AAD, copy, "message", &cm->msg)
                  : -ENOMEM;
    free(copy);
    if (rc == -EBADMSG || rc == -EACCES)
        return app_fail(EACCES, "setup-channel message %llu did not verify: changed, replayed, out of order or one "
                        "before it dropped on the way; the connection ends", (unsigned long long)n);
    if (rc == 0)
        cm->nrx++;
    return rc == -ENOMEM ? app_fail(ENOMEM, "out of memory") : rc;
}

int mrc_cm_send(struct mrc_cm *cm, const char *json_object)
{
    size_t len = strlen(json_object);
    if (len >= MAX_LINE || memchr(json_object, '\n', len))
        return app_fail(EINVAL, "a connection-setup message is one line of less than %u bytes", MAX_LINE);
    struct text b = {0};
    if (cm->sealed) {
        int rc = seal_line(cm, json_object, len, &b);
        if (rc < 0) {
            text_free(&b);
            return rc;
        }
    } else {
        text_put(&b, json_object, len);
    }
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
    if (cm->sealed && (rc = open_line(cm)) < 0) {
        json_free(&cm->msg);
        return rc;
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
    OPENSSL_cleanse(cm, sizeof(*cm)); /* the key, the X25519 private key, the channel's keys */
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
