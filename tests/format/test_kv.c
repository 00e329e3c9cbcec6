/*
 * test_kv.c — fmt_kv: typed getters and setters, write/parse round trips,
 * and refusal of truncated or corrupt encodings.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "format/cflow_format.h"

/* A kv holding one value of every kind. */
static fmt_kv *make_full(void)
{
    static const char *const toks[] = { "<unk>", "", "hello", "\xe2\x96\x81w" };
    static const float scores[] = { 0.0f, -1.5f, 3.25f, 1e-7f };
    static const int32_t types[] = { 2, 3, 1, -7 };
    fmt_kv *kv = fmt_kv_new();
    assert_non_null(kv);
    assert_int_equal(fmt_kv_set_u32(kv, "a.u32", 4000000000u), 0);
    assert_int_equal(fmt_kv_set_i32(kv, "a.i32", -123456), 0);
    assert_int_equal(fmt_kv_set_f32(kv, "a.f32", 0.5f), 0);
    assert_int_equal(fmt_kv_set_bool(kv, "a.bool", 7), 0);
    assert_int_equal(fmt_kv_set_str(kv, "a.str", "llama\0x", 7), 0);
    assert_int_equal(fmt_kv_set_str(kv, "a.empty", "", 0), 0);
    assert_int_equal(fmt_kv_set_arr_str(kv, "tokenizer.ggml.tokens", toks,
                                        NULL, 4), 0);
    assert_int_equal(fmt_kv_set_arr_f32(kv, "tokenizer.ggml.scores", scores,
                                        4), 0);
    assert_int_equal(fmt_kv_set_arr_i32(kv, "tokenizer.ggml.token_type",
                                        types, 4), 0);
    assert_int_equal(fmt_kv_set_arr_i32(kv, "a.empty_arr", NULL, 0), 0);
    return kv;
}

static void check_full(const fmt_kv *kv)
{
    uint32_t u;
    int64_t i64;
    float f;
    int b, arr;
    size_t len;
    int32_t i32;
    assert_int_equal(fmt_kv_count(kv), 10);
    assert_int_equal(fmt_kv_get_u32(kv, "a.u32", &u), 0);
    assert_int_equal(u, 4000000000u);
    assert_int_equal(fmt_kv_get_i64(kv, "a.u32", &i64), 0);
    assert_int_equal(i64, 4000000000);
    assert_int_equal(fmt_kv_get_i64(kv, "a.i32", &i64), 0);
    assert_int_equal(i64, -123456);
    assert_int_equal(fmt_kv_get_u32(kv, "a.i32", &u), -1); /* negative */
    assert_int_equal(fmt_kv_get_f32(kv, "a.f32", &f), 0);
    assert_true(f == 0.5f);
    assert_int_equal(fmt_kv_get_f32(kv, "a.u32", &f), -1);
    assert_int_equal(fmt_kv_get_bool(kv, "a.bool", &b), 0);
    assert_int_equal(b, 1);
    assert_int_equal(fmt_kv_get_bool(kv, "a.u32", &b), -1);
    const char *s = fmt_kv_get_str(kv, "a.str", &len);
    assert_non_null(s);
    assert_int_equal(len, 7);
    assert_memory_equal(s, "llama\0x", 7);
    s = fmt_kv_get_str(kv, "a.empty", &len);
    assert_non_null(s);
    assert_int_equal(len, 0);
    assert_null(fmt_kv_get_str(kv, "a.u32", &len));
    assert_null(fmt_kv_get_str(kv, "nope", &len));

    assert_int_equal(fmt_kv_type_of(kv, "a.str", NULL), FMT_KV_STR);
    assert_int_equal(fmt_kv_type_of(kv, "tokenizer.ggml.tokens", NULL),
                     FMT_KV_ARR);
    assert_int_equal(fmt_kv_type_of(kv, "tokenizer.ggml.tokens", &arr),
                     FMT_KV_STR);
    assert_int_equal(arr, 1);
    assert_int_equal(fmt_kv_type_of(kv, "a.bool", &arr), FMT_KV_BOOL);
    assert_int_equal(arr, 0);
    assert_int_equal(fmt_kv_type_of(kv, "missing", &arr), -1);
    assert_true(fmt_kv_has(kv, "a.f32"));
    assert_false(fmt_kv_has(kv, "a.f3"));

    assert_int_equal(fmt_kv_arr_len(kv, "tokenizer.ggml.tokens"), 4);
    assert_int_equal(fmt_kv_arr_len(kv, "a.str"), 0);
    assert_int_equal(fmt_kv_arr_len(kv, "a.empty_arr"), 0);
    s = fmt_kv_arr_str(kv, "tokenizer.ggml.tokens", 2, &len);
    assert_non_null(s);
    assert_int_equal(len, 5);
    assert_memory_equal(s, "hello", 5);
    s = fmt_kv_arr_str(kv, "tokenizer.ggml.tokens", 1, &len);
    assert_non_null(s);
    assert_int_equal(len, 0);
    s = fmt_kv_arr_str(kv, "tokenizer.ggml.tokens", 3, &len);
    assert_int_equal(len, 4);
    assert_memory_equal(s, "\xe2\x96\x81w", 4);
    assert_null(fmt_kv_arr_str(kv, "tokenizer.ggml.tokens", 4, &len));
    assert_null(fmt_kv_arr_str(kv, "tokenizer.ggml.scores", 0, &len));
    assert_int_equal(fmt_kv_arr_f32(kv, "tokenizer.ggml.scores", 1, &f), 0);
    assert_true(f == -1.5f);
    assert_int_equal(fmt_kv_arr_f32(kv, "tokenizer.ggml.scores", 3, &f), 0);
    assert_true(f == 1e-7f);
    assert_int_equal(fmt_kv_arr_f32(kv, "tokenizer.ggml.scores", 4, &f), -1);
    assert_int_equal(fmt_kv_arr_f32(kv, "tokenizer.ggml.tokens", 0, &f), -1);
    assert_int_equal(fmt_kv_arr_i32(kv, "tokenizer.ggml.token_type", 3,
                                    &i32), 0);
    assert_int_equal(i32, -7);
    assert_int_equal(fmt_kv_arr_i32(kv, "tokenizer.ggml.token_type", 4,
                                    &i32), -1);
    assert_int_equal(fmt_kv_arr_i32(kv, "tokenizer.ggml.scores", 0, &i32),
                     -1);
    assert_int_equal(fmt_kv_arr_i32(kv, "a.i32", 0, &i32), -1);
}

static void test_set_get(void **state)
{
    (void)state;
    fmt_kv *kv = make_full();
    check_full(kv);
    /* keys keep their order */
    size_t len;
    const char *k = fmt_kv_key(kv, 0, &len);
    assert_int_equal(len, 5);
    assert_memory_equal(k, "a.u32", 5);
    assert_null(fmt_kv_key(kv, 10, &len));
    fmt_kv_free(kv);
}

static void test_replace(void **state)
{
    (void)state;
    fmt_kv *kv = make_full();
    uint32_t u;
    size_t len;
    /* replacing keeps the count and the position, and changes the type */
    assert_int_equal(fmt_kv_set_str(kv, "a.u32", "now a string", 12), 0);
    assert_int_equal(fmt_kv_count(kv), 10);
    assert_int_equal(fmt_kv_get_u32(kv, "a.u32", &u), -1);
    assert_memory_equal(fmt_kv_get_str(kv, "a.u32", &len), "now a string",
                        12);
    assert_memory_equal(fmt_kv_key(kv, 0, &len), "a.u32", 5);
    /* replacing a value with a copy of itself (aliasing source) */
    const char *s = fmt_kv_get_str(kv, "a.u32", &len);
    assert_int_equal(fmt_kv_set_str(kv, "a.u32", s + 4, len - 4), 0);
    assert_memory_equal(fmt_kv_get_str(kv, "a.u32", &len), "a string", 8);
    assert_int_equal(len, 8);
    fmt_kv_free(kv);
}

static void test_int_ranges(void **state)
{
    (void)state;
    /* hand-encode integers of every width and check the conversions */
    uint8_t buf[512];
    size_t o = 0;
    struct { const char *k; uint32_t t; uint64_t v; unsigned sz; } e[] = {
        { "u8", FMT_KV_U8, 200, 1 },
        { "i8", FMT_KV_I8, (uint8_t)-5, 1 },
        { "u16", FMT_KV_U16, 65535, 2 },
        { "i16", FMT_KV_I16, (uint16_t)-300, 2 },
        { "u64big", FMT_KV_U64, 1ull << 40, 8 },
        { "u64max", FMT_KV_U64, UINT64_MAX, 8 },
        { "i64min", FMT_KV_I64, (uint64_t)INT64_MIN, 8 },
        { "i64", FMT_KV_I64, 77, 8 },
        { "f64", FMT_KV_F64, 0, 8 },
    };
    unsigned ne = sizeof e / sizeof e[0];
    double dv = 2.5;
    memcpy(&e[8].v, &dv, 8);
    for (unsigned i = 0; i < ne; i++) {
        uint64_t kl = strlen(e[i].k);
        memcpy(buf + o, &kl, 8);
        memcpy(buf + o + 8, e[i].k, kl);
        memcpy(buf + o + 8 + kl, &e[i].t, 4);
        memcpy(buf + o + 12 + kl, &e[i].v, e[i].sz);
        o += 12 + kl + e[i].sz;
    }
    fmt_kv *kv = fmt_kv_new();
    size_t used = 0;
    char err[256];
    assert_int_equal(fmt_kv_parse(kv, buf, o, ne, &used, "ints", err,
                                  sizeof err), FMT_OK);
    assert_int_equal(used, o);
    uint32_t u;
    int64_t i;
    float f;
    assert_int_equal(fmt_kv_get_u32(kv, "u8", &u), 0);
    assert_int_equal(u, 200);
    assert_int_equal(fmt_kv_get_u32(kv, "i8", &u), -1);
    assert_int_equal(fmt_kv_get_i64(kv, "i8", &i), 0);
    assert_int_equal(i, -5);
    assert_int_equal(fmt_kv_get_u32(kv, "u16", &u), 0);
    assert_int_equal(u, 65535);
    assert_int_equal(fmt_kv_get_i64(kv, "i16", &i), 0);
    assert_int_equal(i, -300);
    assert_int_equal(fmt_kv_get_u32(kv, "u64big", &u), -1);
    assert_int_equal(fmt_kv_get_i64(kv, "u64big", &i), 0);
    assert_true(i == (int64_t)1 << 40);
    assert_int_equal(fmt_kv_get_i64(kv, "u64max", &i), -1);
    assert_int_equal(fmt_kv_get_i64(kv, "i64min", &i), 0);
    assert_true(i == INT64_MIN);
    assert_int_equal(fmt_kv_get_u32(kv, "i64", &u), 0);
    assert_int_equal(u, 77);
    assert_int_equal(fmt_kv_get_f32(kv, "f64", &f), 0);
    assert_true(f == 2.5f);
    assert_int_equal(fmt_kv_get_u32(kv, "f64", &u), -1);
    /* a round trip keeps the original types and bytes */
    size_t n = fmt_kv_write(kv, NULL);
    assert_int_equal(n, o);
    uint8_t *w = malloc(n);
    assert_int_equal(fmt_kv_write(kv, w), n);
    assert_memory_equal(w, buf, n);
    free(w);
    fmt_kv_free(kv);
}

static void test_round_trip(void **state)
{
    (void)state;
    fmt_kv *kv = make_full();
    size_t n = fmt_kv_write(kv, NULL);
    uint8_t *buf = malloc(n + 16);
    assert_non_null(buf);
    assert_int_equal(fmt_kv_write(kv, buf), n);
    /* trailing bytes are not consumed */
    memset(buf + n, 0xAB, 16);
    fmt_kv *kv2 = fmt_kv_new();
    size_t used = 0;
    char err[256] = "";
    int rc = fmt_kv_parse(kv2, buf, n + 16, fmt_kv_count(kv), &used, "rt",
                          err, sizeof err);
    assert_int_equal(rc, FMT_OK);
    assert_int_equal(used, n);
    check_full(kv2);
    /* writing the parsed kv gives the same bytes */
    uint8_t *buf2 = malloc(n);
    assert_int_equal(fmt_kv_write(kv2, buf2), n);
    assert_memory_equal(buf, buf2, n);

    /* copies of parsed (borrowed) values survive the buffer */
    fmt_kv *kv3 = fmt_kv_new();
    for (size_t i = 0; i < fmt_kv_count(kv2); i++) {
        size_t kl;
        const char *k = fmt_kv_key(kv2, i, &kl);
        char key[64];
        memcpy(key, k, kl);
        key[kl] = '\0';
        assert_int_equal(fmt_kv_copy(kv3, kv2, key), 0);
    }
    assert_int_equal(fmt_kv_copy(kv3, kv2, "absent"), -1);
    fmt_kv_free(kv2);
    memset(buf, 0, n);
    check_full(kv3);
    assert_int_equal(fmt_kv_write(kv3, buf2), n);
    assert_int_equal(fmt_kv_write(kv, buf), n);
    assert_memory_equal(buf, buf2, n);
    fmt_kv_free(kv3);
    fmt_kv_free(kv);
    free(buf);
    free(buf2);
}

/* Every proper prefix of a valid encoding is refused with a one-line
 * message naming the source. */
static void test_truncated(void **state)
{
    (void)state;
    fmt_kv *kv = make_full();
    size_t n = fmt_kv_write(kv, NULL);
    uint8_t *buf = malloc(n);
    fmt_kv_write(kv, buf);
    for (size_t cut = 0; cut < n; cut++) {
        uint8_t *c = malloc(cut ? cut : 1);   /* exact size: ASan sees overreads */
        memcpy(c, buf, cut);
        fmt_kv *k2 = fmt_kv_new();
        char err[256] = "";
        size_t used = 99;
        int rc = fmt_kv_parse(k2, c, cut, fmt_kv_count(kv), &used,
                              "cut.gguf", err, sizeof err);
        assert_int_equal(rc, FMT_EFORMAT);
        assert_non_null(strstr(err, "cut.gguf"));
        assert_null(strchr(err, '\n'));
        fmt_kv_free(k2);
        free(c);
    }
    fmt_kv_free(kv);
    free(buf);
}

/* Build "key" + type + raw value bytes. */
static size_t enc(uint8_t *b, const char *key, uint32_t type, const void *v,
                  size_t vn)
{
    uint64_t kl = strlen(key);
    memcpy(b, &kl, 8);
    memcpy(b + 8, key, kl);
    memcpy(b + 8 + kl, &type, 4);
    memcpy(b + 12 + kl, v, vn);
    return 12 + kl + vn;
}

static int parse_one(const uint8_t *b, size_t n, uint64_t count, char *err,
                     size_t errlen)
{
    fmt_kv *kv = fmt_kv_new();
    size_t used;
    int rc = fmt_kv_parse(kv, b, n, count, &used, "bad.bin", err, errlen);
    fmt_kv_free(kv);
    return rc;
}

static void test_garbage(void **state)
{
    (void)state;
    uint8_t b[256], v[64];
    char err[256];
    size_t n;
    uint64_t big = UINT64_MAX, x;
    uint32_t t;

    /* string length past the end */
    memcpy(v, &big, 8);
    n = enc(b, "s", FMT_KV_STR, v, 8);
    assert_int_equal(parse_one(b, n, 1, err, sizeof err), FMT_EFORMAT);
    assert_non_null(strstr(err, "bad.bin"));
    /* array count past the end (u32 and string elements) */
    t = FMT_KV_U32;
    memcpy(v, &t, 4);
    x = 1ull << 61;
    memcpy(v + 4, &x, 8);
    n = enc(b, "a", FMT_KV_ARR, v, 12);
    assert_int_equal(parse_one(b, n, 1, err, sizeof err), FMT_EFORMAT);
    t = FMT_KV_STR;
    memcpy(v, &t, 4);
    n = enc(b, "a", FMT_KV_ARR, v, 12);
    assert_int_equal(parse_one(b, n, 1, err, sizeof err), FMT_EFORMAT);
    /* a string element whose length runs past the end */
    x = 1;
    memcpy(v + 4, &x, 8);
    x = 1000;
    memcpy(v + 12, &x, 8);
    n = enc(b, "a", FMT_KV_ARR, v, 20);
    assert_int_equal(parse_one(b, n, 1, err, sizeof err), FMT_EFORMAT);
    /* nested arrays are refused as unsupported */
    t = FMT_KV_ARR;
    memcpy(v, &t, 4);
    x = 0;
    memcpy(v + 4, &x, 8);
    n = enc(b, "nest", FMT_KV_ARR, v, 12);
    assert_int_equal(parse_one(b, n, 1, err, sizeof err), FMT_EUNSUP);
    assert_non_null(strstr(err, "nest"));
    /* unknown value type and unknown element type */
    memset(v, 0, 16);
    n = enc(b, "u", 13, v, 8);
    assert_int_equal(parse_one(b, n, 1, err, sizeof err), FMT_EFORMAT);
    t = 99;
    memcpy(v, &t, 4);
    n = enc(b, "u", FMT_KV_ARR, v, 12);
    assert_int_equal(parse_one(b, n, 1, err, sizeof err), FMT_EFORMAT);
    /* empty key, huge key length */
    memset(b, 0, 32);
    assert_int_equal(parse_one(b, 32, 1, err, sizeof err), FMT_EFORMAT);
    memcpy(b, &big, 8);
    assert_int_equal(parse_one(b, 32, 1, err, sizeof err), FMT_EFORMAT);
    /* duplicate keys */
    t = 5;
    n = enc(b, "dup", FMT_KV_U32, &t, 4);
    n += enc(b + n, "dup", FMT_KV_U32, &t, 4);
    assert_int_equal(parse_one(b, n, 2, err, sizeof err), FMT_EFORMAT);
    assert_non_null(strstr(err, "dup"));
    /* a count that cannot fit is refused before anything is allocated */
    assert_int_equal(parse_one(b, n, UINT64_MAX, err, sizeof err),
                     FMT_EFORMAT);
    assert_int_equal(parse_one(b, n, 3, err, sizeof err), FMT_EFORMAT);
    /* control characters in keys do not reach the message */
    n = enc(b, "bad\nkey", 77, v, 4);
    assert_int_equal(parse_one(b, n, 1, err, sizeof err), FMT_EFORMAT);
    assert_null(strchr(err, '\n'));
}

/* Random bytes and random mutations of a valid encoding: any result is
 * fine as long as nothing crashes and errors are reported (run under ASan
 * by --enable-sanitizers). */
static void test_fuzz(void **state)
{
    (void)state;
    fmt_kv *kv = make_full();
    size_t n = fmt_kv_write(kv, NULL);
    uint8_t *good = malloc(n);
    fmt_kv_write(kv, good);
    uint64_t seed = 0x1234567;
    int n_ok = 0, n_bad = 0;
    for (int it = 0; it < 20000; it++) {
        uint8_t *c = malloc(n);
        memcpy(c, good, n);
        int flips = 1 + it % 4;
        for (int f = 0; f < flips; f++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            c[(seed >> 33) % n] = (uint8_t)(seed >> 17);
        }
        fmt_kv *k2 = fmt_kv_new();
        char err[256] = "";
        size_t used;
        int rc = fmt_kv_parse(k2, c, n, fmt_kv_count(kv), &used, "fz", err,
                              sizeof err);
        if (rc == FMT_OK) {
            n_ok++;
            assert_true(used <= n);
            /* whatever parsed must write back to the same bytes */
            size_t m = fmt_kv_write(k2, NULL);
            assert_int_equal(m, used);
            uint8_t *w = malloc(m ? m : 1);
            fmt_kv_write(k2, w);
            assert_memory_equal(w, c, m);
            free(w);
        } else {
            n_bad++;
            assert_true(err[0] != '\0');
        }
        fmt_kv_free(k2);
        free(c);
    }
    assert_true(n_ok > 0);
    assert_true(n_bad > 0);
    fmt_kv_free(kv);
    free(good);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set_get),
        cmocka_unit_test(test_replace),
        cmocka_unit_test(test_int_ranges),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_garbage),
        cmocka_unit_test(test_fuzz),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
