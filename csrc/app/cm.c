/* Connection setup over TCP, the exchange of mrc.cm (its head comment has
 * the protocol) over a channel of chan.c: a greeting with a fresh 32-byte
 * challenge; the connector's hello (with a fresh nonce of its own) and the
 * listener's answer. Under a pre-shared key each is proven with
 * HMAC-SHA256(key, challenge + role + canonical JSON), the answer over the
 * connector's nonce too, and travels sealed (AES-256-GCM under keys from
 * the key, the challenge and the nonce); for authenticated MRC each side
 * adds an X25519 public key and the QP pair's keys come from the exchange
 * (mrc_cm_qp_connect). A bad peer is told why, costs one bounded wait and
 * is dropped. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <openssl/crypto.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "app/app.h"

struct mrc_cm_listener { int fd; int has_psk; uint8_t psk[MAX_PSK]; size_t psklen; uint32_t security; };

static const char *const sec_names[] = {"off", "auth", "encrypt"};

/* "security" of a hello: its mode's number, or -1 */
static int sec_mode_of(const struct json *d)
{
    int m = json_member(d, 0, "security");
    const char *s = json_str(d, m);
    if (m < 0)
        return MRC_SEC_OFF;
    for (int i = 0; s && i < 3; i++)
        if (!strcmp(s, sec_names[i]))
            return i;
    return -1;
}

/* hex HMAC-SHA256(key, the first clen bytes of challenge + nonce, role, canonical(msg without "auth")) */
static int proof(const struct mrc_cm *cm, const struct json *msg, const char *role, size_t clen, char out[65])
{
    struct text body = {0};
    uint8_t mac[32];
    json_canonical(msg, 0, "auth", &body);
    if (body.oom) {
        text_free(&body);
        return app_fail(ENOMEM, "out of memory");
    }
    const void *parts[3] = {cm->challenge, role, body.p};
    size_t lens[3] = {clen, strlen(role), body.n};
    int rc = hmac_sha256(cm->key, cm->klen, parts, lens, 3, mac);
    hex_encode(mac, 32, out);
    text_free(&body);
    return rc < 0 ? app_fail(ENOMEM, "out of memory") : 0;
}

static int check_proof(const struct mrc_cm *cm, const char *role, const char *who)
{
    char want[65];
    const char *got = json_str(&cm->msg, json_member(&cm->msg, 0, "auth"));
    if (proof(cm, &cm->msg, role, cm->clen, want) < 0)
        return -ENOMEM;
    unsigned diff = !got || strlen(got) != 64;
    for (int i = 0; !diff && i < 64; i++)
        diff |= (unsigned)(got[i] ^ want[i]);
    return diff ? app_fail(EACCES, "the %s did not prove it holds the pre-shared key", who) : 0;
}

/* The setup's sealing keys, once the challenge and the connector's nonce
 * are both in cm->challenge: HKDF(salt = them, the pre-shared key, "mrc v1
 * setup"), as mrc.secure.setup_keys. */
static int setup_keys(struct mrc_cm *cm)
{
    static const char info[] = "mrc v1 setup";
    uint8_t out[88];
    int rc = mrc_sec_hkdf(cm->challenge, (uint32_t)cm->clen, cm->key, (uint32_t)cm->klen, (const uint8_t *)info,
                          sizeof(info) - 1, out, sizeof(out));
    memcpy(cm->c2s, out, 44);
    memcpy(cm->s2c, out + 44, 44);
    OPENSSL_cleanse(out, sizeof(out));
    return rc < 0 ? app_fail(-rc, "cannot derive the setup's keys") : 0;
}

/* Replace the message received by the JSON object its "sealed" member carries. */
static int unseal_msg(struct mrc_cm *cm, const uint8_t key_iv[44], const char *aad, const char *what)
{
    const char *hex = json_str(&cm->msg, json_member(&cm->msg, 0, "sealed"));
    char *copy = hex ? strdup(hex) : NULL; /* the message it sits in is replaced */
    int rc = hex && !copy ? -ENOMEM : chan_open_hex(key_iv, 0, aad, copy, what, &cm->msg);
    free(copy);
    if (rc == -EBADMSG)
        return app_fail(EPROTO, "bad connection-setup message: the %s has no sealed part", what);
    if (rc == -EACCES)
        return app_fail(EACCES, "the sealed %s did not verify (another key?)", what);
    return rc == -ENOMEM ? app_fail(ENOMEM, "out of memory") : rc;
}

/* b (our message) becomes {"nonce": nonce, "sealed": b sealed}: the
 * connector's key and "mrc hello", or the listener's and "mrc answer". */
static int seal_text(struct mrc_cm *cm, struct text *b, const char *nonce)
{
    struct text out = {0};
    text_put(&out, "{", 1);
    if (nonce)
        text_printf(&out, "\"nonce\":\"%s\",", nonce);
    text_put(&out, "\"sealed\":\"", 10);
    int rc = chan_seal_hex(cm->initiator ? cm->c2s : cm->s2c, 0, cm->initiator ? "mrc hello" : "mrc answer", b->p,
                           b->n, &out);
    text_put(&out, "\"}", 2);
    if (rc < 0 || out.oom) {
        text_free(&out);
        return app_fail(rc < 0 ? -rc : ENOMEM, "cannot seal our message");
    }
    text_free(b);
    *b = out;
    return 0;
}

/* {"info": our side, extra..., "nonce": nonce, "security" and "kx" (secured), "auth": proof (when proven)};
 * under a key {"nonce": nonce, "sealed": the rest, sealed, "auth": proof} */
static int send_side(struct mrc_cm *cm, struct mrc_ctx *c, struct mrc_local *mine, const char *extra, const char *role,
                     const char *nonce)
{
    struct app_ctx *a = app_of(c);
    if (!a || !mine)
        return -EINVAL;
    app_pick_psn(mine);
    struct text b = {0};
    text_put(&b, "{\"info\":", 8);
    app_info_json(a, mine, &b);
    if (extra && *extra) {
        text_put(&b, ",", 1);
        text_put(&b, extra, strlen(extra));
    }
    if (nonce && !cm->auth)
        text_printf(&b, ",\"nonce\":\"%s\"", nonce);
    if (cm->security) {
        char kx[65];
        hex_encode(cm->kx_pub, 32, kx);
        if (cm->initiator)
            text_printf(&b, ",\"security\":\"%s\"", sec_names[cm->security]);
        text_printf(&b, ",\"kx\":\"%s\"", kx);
    }
    text_put(&b, "}", 1);
    struct json check;
    int rc = b.oom ? app_fail(ENOMEM, "out of memory") : json_parse(&check, b.p, b.n, "our message (check `extra`)");
    if (rc == 0)
        json_free(&check);
    if (rc == 0 && cm->auth && (rc = seal_text(cm, &b, nonce)) == 0) { /* {"nonce", "sealed"}, then its proof */
        struct json outer;
        char mac[65];
        if ((rc = json_parse(&outer, b.p, b.n, "our sealed message")) == 0) {
            /* the hello is proven over the challenge alone; the answer over the nonce too */
            rc = proof(cm, &outer, role, cm->initiator ? cm->glen : cm->clen, mac);
            json_free(&outer);
        }
        if (rc == 0) {
            b.n--; /* the closing brace */
            text_printf(&b, ",\"auth\":\"%s\"}", mac);
        }
    }
    if (rc == 0)
        rc = b.oom ? app_fail(ENOMEM, "out of memory") : mrc_cm_send(cm, b.p);
    text_free(&b);
    return rc;
}

/* --------------------------------------------------------- the listener */
int mrc_cm_listen(const char *addr, uint16_t port, const char *psk_file, struct mrc_cm_listener **out)
{
    app_clear_error();
    struct mrc_cm_listener *l = calloc(1, sizeof(*l));
    if (!l)
        return app_fail(ENOMEM, "out of memory");
    int rc = psk_file ? chan_read_psk(psk_file, l->psk, &l->psklen) : 0;
    l->has_psk = psk_file != NULL;
    struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_port = htons(port), .sin6_addr = in6addr_any};
    if (rc == 0 && addr && parse_addr(addr, &sa.sin6_addr) < 0)
        rc = app_fail(EINVAL, "'%s' is not an IPv6 address to listen on", addr);
    l->fd = rc ? -1 : socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (rc == 0 && (l->fd < 0 || setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0
                    || bind(l->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(l->fd, 8) < 0))
        rc = app_fail(errno, "cannot listen on [%s]:%u: %s (another server running? pick another port)",
                      addr ? addr : "::", port, strerror(errno));
    if (rc < 0) {
        mrc_cm_listener_close(l);
        return rc;
    }
    *out = l;
    return 0;
}

int mrc_cm_listener_security(struct mrc_cm_listener *l, uint32_t mode)
{
    if (mode > MRC_SEC_ENCRYPT)
        return app_fail(EINVAL, "security mode %u: use MRC_SEC_OFF, MRC_SEC_AUTH or MRC_SEC_ENCRYPT", mode);
    if (mode && !l->has_psk)
        return app_fail(EINVAL, "security %s needs a pre-shared key: listen with a key file", sec_names[mode]);
    l->security = mode;
    return 0;
}


/* Our half of the X25519 exchange, and the peer's public key from msg's "kx". */
static int key_exchange(struct mrc_cm *cm, uint32_t mode, const char *who)
{
    cm->security = mode;
    if (!mode)
        return 0;
    if (hex_decode(json_str(&cm->msg, json_member(&cm->msg, 0, "kx")), cm->kx_peer, 32) != 32)
        return app_fail(EPROTO, "bad connection-setup message: the %s's kx is not an X25519 public key", who);
    return 0;
}

int mrc_cm_listener_fd(struct mrc_cm_listener *l)
{
    return l->fd;
}

void mrc_cm_listener_close(struct mrc_cm_listener *l)
{
    if (!l)
        return;
    if (l->fd >= 0)
        close(l->fd);
    OPENSSL_cleanse(l->psk, sizeof(l->psk));
    free(l);
}

static int greet_and_hear(struct mrc_cm_listener *l, struct mrc_cm *cm, struct mrc_ctx *c, struct mrc_remote *peer)
{
    uint8_t ch[32];
    char hex[65], greeting[160];
    if (getrandom(ch, sizeof(ch), 0) != sizeof(ch))
        return app_fail(EIO, "no randomness for the challenge");
    hex_encode(ch, sizeof(ch), hex);
    snprintf(greeting, sizeof(greeting), "{\"mrc\":%d,\"challenge\":\"%s\",\"auth\":%s}", PROTOCOL, hex,
             l->has_psk ? "true" : "false");
    int rc = mrc_cm_send(cm, greeting);
    if (rc == 0 && (rc = mrc_cm_recv(cm, SETUP_MS)) > 0)
        rc = 0;
    if (rc == 0 && l->has_psk) {
        memcpy(cm->key, l->psk, l->psklen);
        cm->klen = l->psklen;
        memcpy(cm->challenge, ch, sizeof(ch));
        cm->clen = sizeof(ch);
        cm->auth = 1;
        rc = check_proof(cm, "", "client");
        /* the answer is proven over the client's nonce too */
        const char *nonce = json_str(&cm->msg, json_member(&cm->msg, 0, "nonce"));
        int n = rc ? 0 : hex_decode(nonce, cm->challenge + cm->clen, 64);
        if (rc == 0 && n < 16)
            rc = app_fail(EPROTO, "bad connection-setup message: the hello's nonce must be 16 to 64 bytes as hex");
        cm->clen += rc ? 0 : (size_t)n;
        if (rc == 0 && (rc = setup_keys(cm)) == 0) /* what the hello carries is sealed */
            rc = unseal_msg(cm, cm->c2s, "mrc hello", "hello");
    }
    struct app_ctx *a = rc == 0 ? app_of(c) : NULL;
    if (rc == 0)
        rc = a ? app_remote(a, &cm->msg, json_member(&cm->msg, 0, "info"), peer) : -EINVAL;
    int asked = rc == 0 ? sec_mode_of(&cm->msg) : 0;
    if (rc == 0 && asked != (int)l->security)
        rc = app_fail(EPROTO, "this server's QPs run security %s, the client asked for another (give the same "
                      "--security on both sides)", sec_names[l->security]);
    if (rc == 0 && (rc = key_exchange(cm, l->security, "client")) == 0 && l->security)
        rc = mrc_sec_keypair(cm->kx_priv, cm->kx_pub);
    return rc;
}

int mrc_cm_accept(struct mrc_cm_listener *l, struct mrc_ctx *c, int timeout_ms, struct mrc_cm **out,
                  struct mrc_remote *peer)
{
    app_clear_error();
    struct pollfd pf = {.fd = l->fd, .events = POLLIN};
    int r;
    while ((r = poll(&pf, 1, timeout_ms < 0 ? -1 : timeout_ms)) < 0 && errno == EINTR)
        ;
    if (r == 0)
        return app_fail(ETIMEDOUT, "no client within %d ms", timeout_ms);
    struct sockaddr_in6 from;
    socklen_t flen = sizeof(from);
    int fd = accept4(l->fd, (struct sockaddr *)&from, &flen, SOCK_CLOEXEC);
    if (fd < 0)
        return app_fail(errno, "accept: %s", strerror(errno));
    struct mrc_cm *cm = chan_new(fd);
    if (!cm)
        return app_fail(ENOMEM, "out of memory");
    int rc = greet_and_hear(l, cm, c, peer);
    if (rc < 0) {
        char who[INET6_ADDRSTRLEN], why[512];
        inet_ntop(AF_INET6, &from.sin6_addr, who, sizeof(who));
        snprintf(why, sizeof(why), "%s", mrc_last_error());
        chan_refuse(cm, -rc);
        mrc_cm_close(cm);
        return app_fail(-rc, "client [%s]: %s", who, why);
    }
    *out = cm;
    return 0;
}

int mrc_cm_reply(struct mrc_cm *cm, struct mrc_ctx *c, struct mrc_local *mine, const char *extra)
{
    app_clear_error();
    int rc = send_side(cm, c, mine, extra, "answer", NULL);
    if (rc == 0)
        chan_arm(cm); /* from here on, every message each way is sealed */
    return rc;
}

/* --------------------------------------------------------- the connector */
static int dial(struct mrc_ctx *c, const char *server, uint16_t port, int timeout_ms)
{
    struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
    if (parse_addr(server, &sa.sin6_addr) < 0) {
        struct app_ctx *a = app_of(c);
        if (!a)
            return -EINVAL;
        if (!a->has_topo || topo_mgmt(&a->topo, server, &sa.sin6_addr) < 0)
            return app_fail(EINVAL, "unknown server '%s': not an IPv6 address, and %s%s gives it no management "
                            "address", server, a->has_topo ? "topology " : "no topology (give one)",
                            a->has_topo ? a->topo.name : "");
    }
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return app_fail(errno, "socket: %s", strerror(errno));
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 ? 0 : errno;
    if (rc == EINPROGRESS) {
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        socklen_t len = sizeof(rc);
        rc = poll(&pf, 1, timeout_ms) <= 0 ? ETIMEDOUT
             : getsockopt(fd, SOL_SOCKET, SO_ERROR, &rc, &len) < 0 ? errno : rc;
    }
    if (rc) {
        close(fd);
        return app_fail(rc, "cannot reach the connection-setup server at [%s]:%u: %s (is the server running "
                        "there, and the management network up?)", server, port, strerror(rc));
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

static int exchange(struct mrc_cm *cm, struct mrc_ctx *c, const char *psk_file, struct mrc_local *mine,
                    const char *extra, int timeout_ms, struct mrc_remote *peer)
{
    int rc = mrc_cm_recv(cm, timeout_ms);
    if (rc < 0)
        return rc;
    uint64_t proto = 0, auth = 0;
    const char *ch = json_str(&cm->msg, json_member(&cm->msg, 0, "challenge"));
    if (mrc_cm_get(cm, "mrc", &proto) < 0 || proto != PROTOCOL || !ch)
        return app_fail(EPROTO, "bad connection-setup message: the server does not speak this connection setup");
    mrc_cm_get(cm, "auth", &auth);
    if (mine->security > MRC_SEC_ENCRYPT || (mine->security && !psk_file))
        return app_fail(EINVAL, "security needs a pre-shared key file, and a mode of mrc_security");
    cm->initiator = 1;
    if (mine->security && (rc = mrc_sec_keypair(cm->kx_priv, cm->kx_pub)) < 0)
        return app_fail(-rc, "cannot make an X25519 key pair (libcrypto)");
    cm->security = mine->security;
    if (psk_file && !auth)
        return app_fail(EACCES, "we hold a pre-shared key but the server does not ask for one: is it the server "
                        "you meant (started with a key)?");
    if (auth && !psk_file)
        return app_fail(EACCES, "the server wants a pre-shared key: give its key file");
    if (auth) {
        int n = hex_decode(ch, cm->challenge, 64);
        if (n < 16)
            return app_fail(EPROTO, "bad connection-setup message: the greeting's challenge is not hex of at "
                            "least 16 bytes");
        cm->clen = cm->glen = (size_t)n;
        if ((rc = chan_read_psk(psk_file, cm->key, &cm->klen)) < 0)
            return rc;
        cm->auth = 1;
    }
    uint8_t nonce[32];
    char nonce_hex[65];
    if (getrandom(nonce, sizeof(nonce), 0) != sizeof(nonce))
        return app_fail(EIO, "no randomness for the nonce");
    hex_encode(nonce, sizeof(nonce), nonce_hex);
    memcpy(cm->challenge + cm->clen, nonce, sizeof(nonce)); /* the answer's proof and the sealing keys cover it */
    cm->clen += sizeof(nonce);
    if (auth && (rc = setup_keys(cm)) < 0)
        return rc;
    if ((rc = send_side(cm, c, mine, extra, "", nonce_hex)) < 0)
        return rc;
    if ((rc = mrc_cm_recv(cm, timeout_ms)) < 0)
        return rc;
    if (auth && ((rc = check_proof(cm, "answer", "server")) < 0 || (rc = unseal_msg(cm, cm->s2c, "mrc answer",
                                                                                    "answer")) < 0))
        return rc;
    chan_arm(cm); /* from here on, every message each way is sealed */
    if ((rc = key_exchange(cm, mine->security, "server")) < 0)
        return rc;
    return app_remote(app_of(c), &cm->msg, json_member(&cm->msg, 0, "info"), peer);
}

int mrc_cm_connect(struct mrc_ctx *c, const char *server, uint16_t port, const char *psk_file,
                   struct mrc_local *mine, const char *extra, int timeout_ms, struct mrc_cm **out,
                   struct mrc_remote *peer)
{
    app_clear_error();
    if (!app_of(c) || !server || !mine || !out || !peer)
        return -EINVAL;
    timeout_ms = timeout_ms > 0 ? timeout_ms : SETUP_MS;
    int fd = dial(c, server, port, timeout_ms);
    if (fd < 0)
        return fd;
    struct mrc_cm *cm = chan_new(fd);
    if (!cm)
        return app_fail(ENOMEM, "out of memory");
    int rc = exchange(cm, c, psk_file, mine, extra, timeout_ms, peer);
    if (rc < 0) {
        mrc_cm_close(cm);
        return rc;
    }
    *out = cm;
    return 0;
}

int mrc_cm_qp_connect(struct mrc_cm *cm, struct mrc_ctx *c, struct mrc_local *mine, const struct mrc_remote *peer)
{
    app_clear_error();
    if (!cm || !mine || !peer)
        return app_fail(EINVAL, "mrc_cm_qp_connect needs the setup channel, our side and the peer's");
    if (cm->security) {
        /* what both saw: challenge, the connector's nonce, its public key, the listener's, the connector's
         * QPN, the listener's (mrc.cm's order) */
        uint8_t seen[128 + 64 + 8];
        size_t n = cm->clen;
        memcpy(seen, cm->challenge, n);
        memcpy(seen + n, cm->initiator ? cm->kx_pub : cm->kx_peer, 32);
        memcpy(seen + n + 32, cm->initiator ? cm->kx_peer : cm->kx_pub, 32);
        uint32_t first = cm->initiator ? mine->qpn : peer->qpn, second = cm->initiator ? peer->qpn : mine->qpn;
        for (int i = 0; i < 4; i++) {
            seen[n + 64 + i] = (uint8_t)(first >> (24 - 8 * i));
            seen[n + 68 + i] = (uint8_t)(second >> (24 - 8 * i));
        }
        struct mrc_qp_keys k;
        int rc = mrc_sec_derive(cm->kx_priv, cm->kx_peer, cm->key, (uint32_t)cm->klen, seen, (uint32_t)(n + 72),
                                (uint32_t)cm->initiator, cm->security, &k);
        if (rc == 0)
            rc = mrc_qp_set_keys(c, mine->qpn, &k);
        OPENSSL_cleanse(&k, sizeof(k));
        OPENSSL_cleanse(seen, sizeof(seen));
        if (rc < 0)
            return app_fail(-rc, "cannot secure QP %u: %s", mine->qpn, strerror(-rc));
    }
    return mrc_qp_connect(c, mine, peer);
}

