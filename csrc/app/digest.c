/* Digests for connection setup (HMAC-SHA256 of the key's proofs) and for
 * `mrc perf server`'s check of a written region (SHA-256), through
 * OpenSSL's libcrypto, which libmrc links for authenticated MRC; and hex. */
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdlib.h>
#include <string.h>

#include "app/app.h"

int hmac_sha256(const uint8_t *key, size_t klen, const void *const *parts, const size_t *lens, int nparts,
                uint8_t out[32])
{
    size_t n = 0;
    for (int i = 0; i < nparts; i++)
        n += lens[i];
    uint8_t *msg = malloc(n ? n : 1);
    if (!msg)
        return -1;
    for (int i = 0, at = 0; i < nparts; at += (int)lens[i], i++)
        memcpy(msg + at, parts[i], lens[i]);
    unsigned int olen = 0;
    int ok = HMAC(EVP_sha256(), key, (int)klen, msg, n, out, &olen) != NULL && olen == 32;
    free(msg);
    return ok ? 0 : -1;
}

void hex_encode(const uint8_t *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = 0;
}

static int nibble(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

int hex_decode(const char *hex, uint8_t *out, size_t max)
{
    size_t n = hex ? strlen(hex) : 1;
    if (n % 2 || n / 2 > max)
        return -1;
    for (size_t i = 0; i < n / 2; i++) {
        int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return (int)(n / 2);
}

void mrc_sha256_hex(const void *data, size_t len, char out[65])
{
    uint8_t d[32];
    unsigned int n = 0;
    if (EVP_Digest(data, len, d, &n, EVP_sha256(), NULL) != 1 || n != 32)
        memset(d, 0, sizeof(d)); /* out of memory in libcrypto: a digest that matches nothing */
    hex_encode(d, 32, out);
}
