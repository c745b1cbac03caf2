/* The application side of libmrc (csrc/app/): what a C program needs around
 * the data path to open a context by name and set up a connection, where
 * Python has mrc.ports, mrc.paths and mrc.cm. Shared by its files, lowest
 * first: err.c (the error sentence), digest.c (HMAC, SHA-256, hex), json.c, ports.c (the kernel's
 * view of a port), topo.c (a topology file), chan.c (a connection-setup
 * channel), open.c (a context opened by name, connecting a QP), cm.c (the
 * exchange: proofs, sealing, the listener and the connector). Not part of any contract
 * with users: mrc/mrc.h declares the calls. */
#ifndef MRC_APP_H
#define MRC_APP_H
#include <netinet/in.h>
#include <net/if.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "mrc/mrc.h"

/* err.c: set this thread's error sentence; returns -err (err > 0). */
int app_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void app_clear_error(void);

/* digest.c: HMAC-SHA256 of the concatenation of `parts` (libcrypto): 0 or -1. */
int hmac_sha256(const uint8_t *key, size_t klen, const void *const *parts, const size_t *lens, int nparts,
                uint8_t out[32]);
void hex_encode(const uint8_t *in, size_t n, char *out); /* 2n digits and a NUL */
int hex_decode(const char *hex, uint8_t *out, size_t max); /* bytes decoded, or -1 (not hex, or over max) */

/* json.c: a growable text buffer, and a JSON document parsed into nodes
 * (objects, arrays, strings, integers, booleans, null; no fractions). */
struct text { char *p; size_t n, cap; int oom; };
void text_put(struct text *b, const char *s, size_t n);
void text_printf(struct text *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void text_quote(struct text *b, const char *s); /* a JSON string, escaped as Python's json.dumps does */
void text_free(struct text *b);

enum { J_NULL, J_BOOL, J_INT, J_STR, J_ARR, J_OBJ };
struct jnode { uint8_t type; int32_t key, val, first, next; }; /* key, val: offsets into strs (-1: none) */
struct json { struct jnode *n; int count, cap; char *strs; size_t slen, scap; };
/* Parse `len` bytes; 0, or -EPROTO with the reason as the error sentence
 * (`what` names the text in it). Node 0 is the root. */
int json_parse(struct json *d, const char *text, size_t len, const char *what);
void json_free(struct json *d);
int json_member(const struct json *d, int node, const char *key); /* the member's node, or -1 */
int json_first(const struct json *d, int node);                   /* its first item or member, or -1 */
int json_next(const struct json *d, int node);                    /* the one after it, or -1 */
int json_len(const struct json *d, int node);                      /* members or items */
const char *json_str(const struct json *d, int node);             /* a string's text (NULL: not a string) */
const char *json_key(const struct json *d, int node);             /* a member's key */
/* An unsigned integer (or a boolean as 0/1) in [0, max]: 0, -ENOENT (node -1), -EINVAL. */
int json_uint(const struct json *d, int node, uint64_t max, uint64_t *out);
/* The canonical text Python's json.dumps(sort_keys=True, separators=(",", ":"))
 * gives, without the top-level member `skip` (NULL: none). */
void json_canonical(const struct json *d, int node, const char *skip, struct text *out);

/* ports.c: one port as the kernel knows it. */
struct app_port {
    char ifname[IF_NAMESIZE];
    uint32_t plane, ifindex, mtu;
    uint8_t mac[6], next_hop_mac[6];
    struct in6_addr addr;
};
/* Fill in each port's index, MAC, MTU, global address and next hop's MAC
 * from ifname (network namespace of the caller). */
int ports_discover(struct app_port *ports, uint32_t n);
/* This namespace's IPv6 addresses (at most max): how many. */
int ports_local_addrs(struct in6_addr *out, int max);
int parse_addr(const char *text, struct in6_addr *out); /* 0 or -EINVAL */

/* topo.c: a topology file (docs/topology.md), JSON. */
struct topo { struct json doc; int hosts; char name[65]; char host[65]; char path[256]; };
int topo_load(struct topo *t, const char *path, const char *host);
void topo_free(struct topo *t);
/* This host's ports (ifname and plane): how many, or -errno. */
int topo_local_ports(const struct topo *t, struct app_port *out, uint32_t max);
int topo_mgmt(const struct topo *t, const char *host, struct in6_addr *out); /* 0, -ENOENT */
/* The host that owns port address addr (host: its name), and its port address on plane (0, -ENOENT). */
int topo_host_of(const struct topo *t, const struct in6_addr *addr, char host[65]);
int topo_port_addr(const struct topo *t, const char *host, uint32_t plane, struct in6_addr *out);
/* This host's path addresses toward `dst` on `plane` (out: up to
 * MRC_MAX_PATHS): how many (0: none known). */
int topo_paths(const struct topo *t, const char *dst, uint32_t plane, uint8_t out[][16]);

/* open.c: what a context opened by name keeps (mrc_ctx.app). */
struct app_ctx {
    struct app_port ports[MRC_MAX_PORTS];
    uint32_t nports, planes, payload;
    struct topo topo;
    int has_topo;
    struct { struct mrc_peer_cfg cfg; int idx; } *peers;
    int npeers;
    pthread_mutex_t lock;
    struct app_ctl *ctl; /* its control endpoint (ctl.c), NULL: none */
};
struct app_ctx *app_of(struct mrc_ctx *c); /* NULL: not opened by name (error sentence set) */
/* ctl.c: the context's control endpoint ($MRC_CTL_DIR/<pid>.sock) for `mrc ctl` and the dash, read only;
 * NULL where none can be made or $MRC_CTL is off. Stopped (the socket removed) before the context goes. */
struct app_ctl *app_ctl_start(struct mrc_ctx *c, struct app_ctx *a);
void app_ctl_stop(struct app_ctl *t);
/* Our side as the exchange's "info" object. */
void app_info_json(struct app_ctx *a, const struct mrc_local *mine, struct text *out);
/* The other side from an "info" object, every field checked, with its paths. */
int app_remote(struct app_ctx *a, const struct json *d, int info, struct mrc_remote *out);
void app_pick_psn(struct mrc_local *mine); /* a random first PSN where it is 0 */
/* chan.c: a connection-setup channel, and what cm.c's exchange keeps in it. */
#define PROTOCOL 2
#define MAX_LINE (64u << 10)
#define SETUP_MS 10000
#define MAX_PSK 1024
#define SEAL_TAG 16 /* AES-GCM's tag, after what mrc_sec_aead seals */

struct mrc_cm {
    int fd;
    char *in;          /* bytes read and not yet a message */
    size_t n;
    struct json msg;   /* the last message */
    int auth;          /* the setup was proven: key and challenge below */
    uint8_t key[MAX_PSK], challenge[128]; /* the greeting's challenge, then the connector's nonce */
    size_t klen, clen;
    size_t glen;       /* the greeting's challenge alone: what the hello's proof covers */
    /* authenticated MRC: the mode, our X25519 pair, the peer's public key, who connected */
    uint32_t security;
    uint8_t kx_priv[32], kx_pub[32], kx_peer[32];
    int initiator;
    /* under a key, the two messages travel sealed: (key, IV) each way, from the key, challenge and nonce */
    uint8_t c2s[44], s2c[44];
    /* and so does every message after them (sealed set once the answer went): the next one's number
     * each way, the hello and the answer being 0 (mrc.cm's Connection) */
    int sealed;
    uint64_t ntx, nrx;
};

int chan_read_psk(const char *path, uint8_t *key, size_t *len);
void chan_arm(struct mrc_cm *cm);          /* the hello and the answer went: seal from message 1 on */
/* A channel message sealed under key_iv (key, IV) as message number n of its direction (nonce: the IV
 * XOR n) with additional data aad, appended to out as hex: 0 or -errno. And the reverse, into *out: 0,
 * -EBADMSG (not hex of more than a tag), -EACCES (does not verify), -EPROTO (not a JSON object, `what`
 * in the sentence). The hello and the answer are message 0; the rest of the channel, 1 on. */
int chan_seal_hex(const uint8_t key_iv[44], uint64_t n, const char *aad, const char *in, size_t len,
                  struct text *out);
int chan_open_hex(const uint8_t key_iv[44], uint64_t n, const char *aad, const char *hex, const char *what,
                  struct json *out);
struct mrc_cm *chan_new(int fd);           /* NULL (fd closed) when out of memory */
void chan_refuse(struct mrc_cm *cm, int err); /* tell the peer why (mrc_last_error), then let it go */
#endif
