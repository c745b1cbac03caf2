/* JSON for connection setup and topology files: a growable buffer, a
 * parser into an array of nodes (strict: what Python's json.loads takes,
 * less fractions, NUL characters and lone surrogates, which the exchange
 * never carries), and the canonical text the proof of a pre-shared key is
 * computed over (Python's sort_keys and compact separators). */
#define _GNU_SOURCE
#include <errno.h>
#include <openssl/crypto.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/app.h"

#define MAX_DEPTH 32

void text_put(struct text *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void text_printf(struct text *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(tmp))
        b->oom = 1;
    else
        text_put(b, tmp, (size_t)n);
}

void text_free(struct text *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

/* One code point from valid UTF-8 (the parser checked it). */
static uint32_t utf8_next(const unsigned char **s)
{
    const unsigned char *p = *s;
    uint32_t c = *p++;
    int more = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    if (more)
        c &= 0x3F >> more;
    while (more--)
        c = c << 6 | (*p++ & 0x3F);
    *s = p;
    return c;
}

void text_quote(struct text *b, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    text_put(b, "\"", 1);
    while (*p) {
        uint32_t c = utf8_next(&p);
        char tmp[16];
        const char *esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                        : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
        if (esc) {
            text_put(b, esc, strlen(esc));
        } else if (c >= 0x20 && c < 0x7F) {
            tmp[0] = (char)c;
            text_put(b, tmp, 1);
        } else if (c < 0x10000) {
            snprintf(tmp, sizeof(tmp), "\\u%04x", c);
            text_put(b, tmp, 6);
        } else {
            c -= 0x10000;
            snprintf(tmp, sizeof(tmp), "\\u%04x\\u%04x", 0xD800 + (c >> 10), 0xDC00 + (c & 0x3FF));
            text_put(b, tmp, 12);
        }
    }
    text_put(b, "\"", 1);
}

/* ------------------------------------------------------------ the parser */
struct parser { struct json *d; const char *start, *p, *end; const char *what; int err; };

static int bad(struct parser *ps, const char *why)
{
    if (!ps->err)
        ps->err = app_fail(EPROTO, "%s is not valid JSON: %s (at byte %zu)", ps->what, why,
                           (size_t)(ps->p - ps->start));
    return -1;
}

static int new_node(struct parser *ps, uint8_t type)
{
    struct json *d = ps->d;
    if (d->count == d->cap) {
        int cap = d->cap ? d->cap * 2 : 64;
        struct jnode *n = realloc(d->n, (size_t)cap * sizeof(*n));
        if (!n) {
            ps->err = app_fail(ENOMEM, "out of memory reading %s", ps->what);
            return -1;
        }
        d->n = n;
        d->cap = cap;
    }
    d->n[d->count] = (struct jnode){.type = type, .key = -1, .val = -1, .first = -1, .next = -1};
    return d->count++;
}

static int str_put(struct parser *ps, const char *s, size_t n)
{
    struct json *d = ps->d;
    if (d->slen + n + 1 > d->scap) {
        size_t cap = d->scap ? d->scap : 256;
        while (cap < d->slen + n + 1)
            cap *= 2;
        char *p = realloc(d->strs, cap);
        if (!p) {
            ps->err = app_fail(ENOMEM, "out of memory reading %s", ps->what);
            return -1;
        }
        d->strs = p;
        d->scap = cap;
    }
    memcpy(d->strs + d->slen, s, n);
    d->slen += n;
    d->strs[d->slen] = 0;
    return 0;
}

static void skip_ws(struct parser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int hex4(struct parser *ps, uint32_t *out)
{
    if (ps->end - ps->p < 4)
        return bad(ps, "a short \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = *ps->p++;
        v = v << 4 | (uint32_t)(c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                : c >= 'A' && c <= 'F' ? c - 'A' + 10 : 99);
        if (v > 0xFFFF && i < 3)
            return bad(ps, "a \\u escape that is not hex");
    }
    if (v > 0xFFFF)
        return bad(ps, "a \\u escape that is not hex");
    *out = v;
    return 0;
}

static int put_utf8(struct parser *ps, uint32_t c)
{
    char u[4];
    int n = 0;
    if (c < 0x80) {
        u[n++] = (char)c;
    } else if (c < 0x800) {
        u[n++] = (char)(0xC0 | c >> 6);
        u[n++] = (char)(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        u[n++] = (char)(0xE0 | c >> 12);
        u[n++] = (char)(0x80 | ((c >> 6) & 0x3F));
        u[n++] = (char)(0x80 | (c & 0x3F));
    } else {
        u[n++] = (char)(0xF0 | c >> 18);
        u[n++] = (char)(0x80 | ((c >> 12) & 0x3F));
        u[n++] = (char)(0x80 | ((c >> 6) & 0x3F));
        u[n++] = (char)(0x80 | (c & 0x3F));
    }
    return str_put(ps, u, (size_t)n);
}

/* The length of the well-formed UTF-8 sequence at p (Unicode's table 3-7:
 * no overlong forms, no surrogates, nothing past U+10FFFF), or -1. */
static int utf8_len(const char *p, const char *end)
{
    const unsigned char *u = (const unsigned char *)p;
    unsigned char c = u[0], lo = 0x80, hi = 0xBF;
    int n = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : -1;
    if (n < 0 || end - p < n)
        return -1;
    if (c == 0xE0)
        lo = 0xA0;
    else if (c == 0xED)
        hi = 0x9F;
    else if (c == 0xF0)
        lo = 0x90;
    else if (c == 0xF4)
        hi = 0x8F;
    for (int i = 1; i < n; i++, lo = 0x80, hi = 0xBF)
        if (u[i] < lo || u[i] > hi)
            return -1;
    return n;
}

/* A string's text into strs: its offset, or -1. */
static int32_t parse_string(struct parser *ps)
{
    int32_t at = (int32_t)ps->d->slen;
    ps->p++; /* the opening quote */
    for (;;) {
        if (ps->p >= ps->end)
            return bad(ps, "a string without its closing quote");
        unsigned char c = (unsigned char)*ps->p;
        if (c == '"') {
            ps->p++;
            break;
        }
        if (c < 0x20)
            return bad(ps, "a control character inside a string");
        if (c == '\\') {
            if (++ps->p >= ps->end)
                return bad(ps, "a string ending in a backslash");
            char e = *ps->p++;
            const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t", *hit = strchr(from, e);
            if (e && hit) {
                if (str_put(ps, to + (hit - from), 1))
                    return -1;
                continue;
            }
            uint32_t cp, lo;
            if (e != 'u')
                return bad(ps, "an unknown escape in a string");
            if (hex4(ps, &cp))
                return -1;
            if (cp >= 0xD800 && cp < 0xDC00) {
                if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u')
                    return bad(ps, "a lone surrogate in a string");
                ps->p += 2;
                if (hex4(ps, &lo) || lo < 0xDC00 || lo >= 0xE000)
                    return bad(ps, "a lone surrogate in a string");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp < 0xE000) {
                return bad(ps, "a lone surrogate in a string");
            }
            if (cp == 0)
                return bad(ps, "a NUL character in a string");
            if (put_utf8(ps, cp))
                return -1;
            continue;
        }
        int n = utf8_len(ps->p, ps->end);
        if (n < 0)
            return bad(ps, "text that is not UTF-8");
        if (str_put(ps, ps->p, (size_t)n))
            return -1;
        ps->p += n;
    }
    return str_put(ps, "", 1) ? -1 : at; /* each text ends in its own NUL */
}

static int parse_value(struct parser *ps, int depth);

static int parse_container(struct parser *ps, int depth, int obj)
{
    int node = new_node(ps, obj ? J_OBJ : J_ARR), last = -1;
    if (node < 0)
        return -1;
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == (obj ? '}' : ']')) {
        ps->p++;
        return node;
    }
    for (;;) {
        int32_t key = -1;
        skip_ws(ps);
        if (obj) {
            if (ps->p >= ps->end || *ps->p != '"')
                return bad(ps, "an object member without a quoted name");
            if ((key = parse_string(ps)) < 0)
                return -1;
            for (int m = ps->d->n[node].first; m >= 0; m = ps->d->n[m].next)
                if (!strcmp(ps->d->strs + ps->d->n[m].key, ps->d->strs + key))
                    return bad(ps, "an object with the same member twice");
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':')
                return bad(ps, "a member name without a colon");
            ps->p++;
        }
        int v = parse_value(ps, depth + 1);
        if (v < 0)
            return -1;
        ps->d->n[v].key = key;
        if (last < 0)
            ps->d->n[node].first = v;
        else
            ps->d->n[last].next = v;
        last = v;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == (obj ? '}' : ']')) {
            ps->p++;
            return node;
        }
        return bad(ps, obj ? "an object without its closing brace" : "an array without its closing bracket");
    }
}

static int parse_value(struct parser *ps, int depth)
{
    if (depth > MAX_DEPTH)
        return bad(ps, "nested too deep");
    skip_ws(ps);
    if (ps->p >= ps->end)
        return bad(ps, "the text ends where a value should be");
    char c = *ps->p;
    if (c == '{' || c == '[')
        return parse_container(ps, depth, c == '{');
    if (c == '"') {
        int node = new_node(ps, J_STR);
        if (node < 0)
            return -1;
        int32_t at = parse_string(ps);
        if (at < 0)
            return -1;
        ps->d->n[node].val = at;
        return node;
    }
    static const struct { const char *word; uint8_t type; int32_t val; } words[] = {
        {"true", J_BOOL, 1}, {"false", J_BOOL, 0}, {"null", J_NULL, 0}};
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        size_t n = strlen(words[i].word);
        if ((size_t)(ps->end - ps->p) >= n && !memcmp(ps->p, words[i].word, n)) {
            int node = new_node(ps, words[i].type);
            if (node >= 0)
                ps->d->n[node].val = words[i].val;
            ps->p += n;
            return node;
        }
    }
    const char *s = ps->p;
    if (ps->p < ps->end && *ps->p == '-')
        ps->p++;
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
        return bad(ps, "an unknown value");
    if (*ps->p == '0' && ps->p + 1 < ps->end && ps->p[1] >= '0' && ps->p[1] <= '9')
        return bad(ps, "a number with a leading zero");
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
        ps->p++;
    if (ps->p < ps->end && (*ps->p == '.' || *ps->p == 'e' || *ps->p == 'E'))
        return bad(ps, "a fraction or exponent (connection setup and topology files use integers only)");
    int node = new_node(ps, J_INT);
    if (node < 0)
        return -1;
    int negzero = ps->p - s == 2 && s[0] == '-' && s[1] == '0';
    ps->d->n[node].val = (int32_t)ps->d->slen;
    if (str_put(ps, negzero ? s + 1 : s, negzero ? 1 : (size_t)(ps->p - s)) || str_put(ps, "", 1))
        return -1;
    return node;
}

int json_parse(struct json *d, const char *text, size_t len, const char *what)
{
    memset(d, 0, sizeof(*d));
    struct parser ps = {.d = d, .start = text, .p = text, .end = text + len, .what = what};
    int root = parse_value(&ps, 0);
    if (root >= 0) {
        skip_ws(&ps);
        if (ps.p != ps.end)
            root = bad(&ps, "more text after the value");
    }
    if (root < 0) {
        int err = ps.err ? ps.err : -EPROTO;
        json_free(d);
        return err;
    }
    return 0;
}

void json_free(struct json *d)
{
    free(d->n);
    if (d->strs) /* a decrypted message's text is not left behind */
        OPENSSL_cleanse(d->strs, d->scap);
    free(d->strs);
    memset(d, 0, sizeof(*d));
}

/* ------------------------------------------------------------ reading */
int json_member(const struct json *d, int node, const char *key)
{
    if (node < 0 || d->n[node].type != J_OBJ)
        return -1;
    for (int m = d->n[node].first; m >= 0; m = d->n[m].next)
        if (!strcmp(d->strs + d->n[m].key, key))
            return m;
    return -1;
}

int json_first(const struct json *d, int node)
{
    return node >= 0 && (d->n[node].type == J_ARR || d->n[node].type == J_OBJ) ? d->n[node].first : -1;
}

int json_next(const struct json *d, int node) { return node >= 0 ? d->n[node].next : -1; }

int json_len(const struct json *d, int node)
{
    int k = 0;
    if (node >= 0 && (d->n[node].type == J_ARR || d->n[node].type == J_OBJ))
        for (int m = d->n[node].first; m >= 0; m = d->n[m].next)
            k++;
    return k;
}

const char *json_str(const struct json *d, int node)
{
    return node >= 0 && d->n[node].type == J_STR ? d->strs + d->n[node].val : NULL;
}

const char *json_key(const struct json *d, int node)
{
    return node >= 0 && d->n[node].key >= 0 ? d->strs + d->n[node].key : NULL;
}

int json_uint(const struct json *d, int node, uint64_t max, uint64_t *out)
{
    if (node < 0)
        return -ENOENT;
    if (d->n[node].type != J_INT)
        return -EINVAL;
    const char *s = d->strs + d->n[node].val;
    if (*s == '-')
        return -EINVAL;
    uint64_t v = 0;
    for (; *s; s++) {
        if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
            return -EINVAL;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    if (v > max)
        return -EINVAL;
    *out = v;
    return 0;
}

static int by_key(const void *a, const void *b, void *d)
{
    const struct json *j = d;
    return strcmp(j->strs + j->n[*(const int *)a].key, j->strs + j->n[*(const int *)b].key);
}

void json_canonical(const struct json *d, int node, const char *skip, struct text *out)
{
    const struct jnode *n = &d->n[node];
    switch (n->type) {
    case J_NULL:
        text_put(out, "null", 4);
        return;
    case J_BOOL:
        text_put(out, n->val ? "true" : "false", n->val ? 4 : 5);
        return;
    case J_INT:
        text_put(out, d->strs + n->val, strlen(d->strs + n->val));
        return;
    case J_STR:
        text_quote(out, d->strs + n->val);
        return;
    case J_ARR:
        text_put(out, "[", 1);
        for (int m = n->first; m >= 0; m = d->n[m].next) {
            if (m != n->first)
                text_put(out, ",", 1);
            json_canonical(d, m, NULL, out);
        }
        text_put(out, "]", 1);
        return;
    }
    int k = json_len(d, node), *order = malloc(sizeof(int) * (size_t)(k ? k : 1)), i = 0;
    if (!order) {
        out->oom = 1;
        return;
    }
    for (int m = n->first; m >= 0; m = d->n[m].next)
        if (!skip || strcmp(d->strs + d->n[m].key, skip))
            order[i++] = m;
    qsort_r(order, (size_t)i, sizeof(int), by_key, (void *)d);
    text_put(out, "{", 1);
    for (int j = 0; j < i; j++) {
        if (j)
            text_put(out, ",", 1);
        text_quote(out, d->strs + d->n[order[j]].key);
        text_put(out, ":", 1);
        json_canonical(d, order[j], NULL, out);
    }
    text_put(out, "}", 1);
    free(order);
}
