/*
 * fuzz_kv.c — fmt_kv_parse, the GGUF key/value decoder that GGUF headers
 * and .cflow metadata both go through, straight on the input bytes.
 *
 * Input: u64 entry count (little endian), then the encoded entries.
 * Checks: a parse that succeeds consumed no more than it was given, holds
 * count entries, and writes back byte for byte what it read (fmt_kv keeps
 * values in their file encoding, so write(parse(x)) == x); copying every
 * entry into a fresh kv writes the same bytes again; every getter answers
 * for every key without reading out of bounds; a parse that fails says why
 * in one line.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

/* Every getter on one key (NUL-terminated copy). */
static void probe(const fmt_kv *kv, const char *key)
{
    uint32_t u;
    int64_t i64;
    float f;
    int b, arr = 0;
    size_t len;
    int type = fmt_kv_type_of(kv, key, &arr);
    FUZZ_ASSERT(type >= 0 && type <= FMT_KV_F64);
    FUZZ_ASSERT(fmt_kv_has(kv, key));
    (void)fmt_kv_get_u32(kv, key, &u);
    (void)fmt_kv_get_i64(kv, key, &i64);
    (void)fmt_kv_get_f32(kv, key, &f);
    (void)fmt_kv_get_bool(kv, key, &b);
    const char *s = fmt_kv_get_str(kv, key, &len);
    if (s) {
        FUZZ_ASSERT(!arr && type == FMT_KV_STR);
        if (len) {
            volatile char c = s[len - 1];
            (void)c;
        }
    }
    uint64_t n = fmt_kv_arr_len(kv, key);
    if (!arr)
        FUZZ_ASSERT(n == 0);
    for (uint64_t k = 0; k <= n && k < 100000; k++) {
        int32_t v;
        const char *e = fmt_kv_arr_str(kv, key, k, &len);
        if (k == n) {
            FUZZ_ASSERT(e == NULL);
            FUZZ_ASSERT(fmt_kv_arr_f32(kv, key, k, &f) != 0);
            FUZZ_ASSERT(fmt_kv_arr_i32(kv, key, k, &v) != 0);
            break;
        }
        if (e && len) {
            volatile char c = e[len - 1];
            (void)c;
        }
        (void)fmt_kv_arr_f32(kv, key, k, &f);
        (void)fmt_kv_arr_i32(kv, key, k, &v);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256] = "";
    uint64_t count;
    if (size < 8)
        return 0;
    memcpy(&count, data, 8);
    /* the entries in a buffer of their own, so that reading past them is
     * an overflow even when data has slack */
    size_t n = size - 8;
    uint8_t *p = malloc(n ? n : 1);
    FUZZ_ASSERT(p);
    memcpy(p, data + 8, n);

    fmt_kv *kv = fmt_kv_new();
    FUZZ_ASSERT(kv);
    size_t used = (size_t)-1;
    int rc = fmt_kv_parse(kv, p, n, count, &used, "fuzz", err, sizeof err);
    fuzz_check_err("fmt_kv_parse", rc, FMT_EARG, err, sizeof err);
    if (rc == 0) {
        FUZZ_ASSERT(used <= n);
        FUZZ_ASSERT(fmt_kv_count(kv) == count);
        size_t w = fmt_kv_write(kv, NULL);
        if (w != used)
            fuzz_fail("parsed %zu bytes, writes %zu", used, w);
        uint8_t *out = malloc(w ? w : 1);
        FUZZ_ASSERT(out);
        FUZZ_ASSERT(fmt_kv_write(kv, out) == w);
        if (memcmp(out, p, w) != 0)
            fuzz_fail("fmt_kv_write does not give back the parsed bytes");

        /* every key: getters, and a copy into a second kv */
        fmt_kv *cp = fmt_kv_new();
        FUZZ_ASSERT(cp);
        int all_copied = 1;
        for (size_t i = 0; i < fmt_kv_count(kv); i++) {
            size_t kl = 0;
            const char *k = fmt_kv_key(kv, i, &kl);
            FUZZ_ASSERT(k && kl > 0);
            char *key = malloc(kl + 1);
            FUZZ_ASSERT(key);
            memcpy(key, k, kl);
            key[kl] = '\0';
            if (strlen(key) != kl) {     /* a NUL inside: not addressable */
                all_copied = 0;
                free(key);
                continue;
            }
            probe(kv, key);
            if (fmt_kv_copy(cp, kv, key) != 0)
                fuzz_fail("fmt_kv_copy of a present key failed");
            free(key);
        }
        FUZZ_ASSERT(fmt_kv_key(kv, fmt_kv_count(kv), NULL) == NULL);
        if (all_copied) {
            size_t w2 = fmt_kv_write(cp, NULL);
            FUZZ_ASSERT(w2 == w);
            uint8_t *out2 = malloc(w2 ? w2 : 1);
            FUZZ_ASSERT(out2);
            fmt_kv_write(cp, out2);
            if (memcmp(out2, out, w) != 0)
                fuzz_fail("a copy of every key writes different bytes");
            free(out2);
        }
        fmt_kv_free(cp);
        free(out);
    }
    fmt_kv_free(kv);
    free(p);
    return 0;
}
