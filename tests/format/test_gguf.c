/*
 * test_gguf.c — the GGUF reader and the GGML dequantisers.
 *
 *   - every GGUF in shared/models and shared/tokenizer-tests opens, and its
 *     metadata re-serialises to the very bytes of the file;
 *   - known facts of the stories260K family (geometry, tensor types);
 *   - dequantised Q8_0/Q4_0/F16 tensors match the F32 file within the
 *     quantisation error of each block;
 *   - hand-built blocks of every quantised type decode to the values an
 *     independent encoder put in (exact: scales are powers of two);
 *   - a table of corrupted copies (truncations at every structural boundary,
 *     bad magic/version/counts/lengths/dims/types/offsets) each fails with
 *     FMT_EFORMAT (or FMT_EUNSUP where the file is well formed but beyond
 *     us) and a one-line message naming the file.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/cflow_format.h"
#include "testutil.h"

/* ---- helpers ----------------------------------------------------------- */
static fmt_gguf *open_ok(const char *rel)
{
    const char *p = tu_shared(rel);
    fmt_gguf *g = NULL;
    char err[512] = "";
    int rc = fmt_gguf_open(&g, p, err, sizeof err);
    if (rc != FMT_OK)
        fail_msg("%s: rc %d: %s", p, rc, err);
    return g;
}

static uint32_t kv_u32(const fmt_kv *kv, const char *k)
{
    uint32_t v = 0;
    if (fmt_kv_get_u32(kv, k, &v) != 0)
        fail_msg("key %s missing", k);
    return v;
}

/* ---- every shared GGUF opens; metadata round-trips byte for byte ------- */
static int open_dir(const char *rel)
{
    const char *dir = tu_shared(rel);
    DIR *d = opendir(dir);
    if (!d)
        fail_msg("cannot open %s", dir);
    struct dirent *de;
    int count = 0;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 5 || strcmp(de->d_name + l - 5, ".gguf") != 0)
            continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        fmt_gguf *g = NULL;
        char err[512] = "";
        int rc = fmt_gguf_open(&g, path, err, sizeof err);
        if (rc != FMT_OK)
            fail_msg("%s: rc %d: %s", path, rc, err);
        const fmt_kv *kv = fmt_gguf_kv(g);
        assert_true(fmt_kv_count(kv) > 0);
        assert_non_null(fmt_kv_get_str(kv, "general.architecture", NULL));
        assert_true(fmt_kv_arr_len(kv, "tokenizer.ggml.tokens") > 0);
        /* the KV section re-serialises to the file's own bytes */
        size_t n;
        uint8_t *file = tu_slurp(path, &n);
        size_t m = fmt_kv_write(kv, NULL);
        assert_true(24 + m <= n);
        uint8_t *w = malloc(m);
        fmt_kv_write(kv, w);
        assert_memory_equal(w, file + 24, m);
        free(w);
        /* tensors: data inside the file, aligned, findable by name */
        for (uint64_t i = 0; i < fmt_gguf_n_tensors(g); i++) {
            const fmt_tensor *t = fmt_gguf_tensor(g, i);
            assert_true(t->ndim >= 1 && t->ndim <= 4);
            assert_non_null(t->data);
            assert_ptr_equal(fmt_gguf_find(g, t->name), t);
            assert_int_equal(t->nbytes,
                             fmt_dtype_size(t->dtype, t->ne[0] * t->ne[1] *
                                            t->ne[2] * t->ne[3]));
        }
        assert_null(fmt_gguf_tensor(g, fmt_gguf_n_tensors(g)));
        free(file);
        fmt_gguf_close(g);
        count++;
    }
    closedir(d);
    return count;
}

static void test_open_all(void **state)
{
    (void)state;
    assert_true(open_dir("models") >= 5);
    assert_true(open_dir("tokenizer-tests") >= 9);
}

/* ---- known facts -------------------------------------------------------- */
static void check_stories(const char *rel, int embd_type, int out_type,
                          int q_type, int down_type)
{
    fmt_gguf *g = open_ok(rel);
    const fmt_kv *kv = fmt_gguf_kv(g);
    size_t len;
    const char *arch = fmt_kv_get_str(kv, "general.architecture", &len);
    assert_int_equal(len, 5);
    assert_memory_equal(arch, "llama", 5);
    assert_int_equal(kv_u32(kv, "llama.block_count"), 5);
    assert_int_equal(kv_u32(kv, "llama.embedding_length"), 64);
    assert_int_equal(kv_u32(kv, "llama.feed_forward_length"), 172);
    assert_int_equal(kv_u32(kv, "llama.attention.head_count"), 8);
    assert_int_equal(kv_u32(kv, "llama.attention.head_count_kv"), 4);
    assert_int_equal(fmt_kv_arr_len(kv, "tokenizer.ggml.tokens"), 512);
    assert_int_equal(fmt_gguf_n_tensors(g), 3 + 5 * 9);
    const fmt_tensor *t = fmt_gguf_find(g, "token_embd.weight");
    assert_non_null(t);
    assert_int_equal(t->ne[0], 64);
    assert_int_equal(t->ne[1], 512);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->dtype, embd_type);
    t = fmt_gguf_find(g, "output.weight");
    assert_non_null(t);
    assert_int_equal(t->dtype, out_type);
    for (int l = 0; l < 5; l++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%d.attn_q.weight", l);
        t = fmt_gguf_find(g, name);
        assert_non_null(t);
        assert_int_equal(t->dtype, q_type);
        assert_int_equal(t->ne[0], 64);
        assert_int_equal(t->ne[1], 64);
        snprintf(name, sizeof name, "blk.%d.attn_k.weight", l);
        t = fmt_gguf_find(g, name);
        assert_int_equal(t->ne[1], 32);
        snprintf(name, sizeof name, "blk.%d.ffn_down.weight", l);
        t = fmt_gguf_find(g, name);
        assert_non_null(t);
        assert_int_equal(t->dtype, down_type);
        assert_int_equal(t->ne[0], 172);
        assert_int_equal(t->ne[1], 64);
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
        t = fmt_gguf_find(g, name);
        assert_int_equal(t->dtype, FMT_DT_F32);
        assert_int_equal(t->ndim, 1);
    }
    assert_null(fmt_gguf_find(g, "blk.5.attn_q.weight"));
    assert_null(fmt_gguf_find(g, "output"));
    fmt_gguf_close(g);
}

static void test_stories_facts(void **state)
{
    (void)state;
    check_stories("models/stories260K-f32.gguf", FMT_DT_F32, FMT_DT_F32,
                  FMT_DT_F32, FMT_DT_F32);
    check_stories("models/stories260K-f16.gguf", FMT_DT_F16, FMT_DT_F16,
                  FMT_DT_F16, FMT_DT_F16);
    check_stories("models/stories260K-q8_0.gguf", FMT_DT_Q8_0, FMT_DT_Q8_0,
                  FMT_DT_Q8_0, FMT_DT_F16);
    check_stories("models/stories260K-q4_0.gguf", FMT_DT_Q4_0, FMT_DT_Q8_0,
                  FMT_DT_Q4_0, FMT_DT_F16);

    fmt_gguf *g = open_ok("models/llama-2-tiny-random.gguf");
    const fmt_kv *kv = fmt_gguf_kv(g);
    assert_int_equal(kv_u32(kv, "llama.embedding_length"), 8);
    assert_int_equal(kv_u32(kv, "llama.block_count"), 1);
    assert_int_equal(fmt_kv_arr_len(kv, "tokenizer.ggml.tokens"), 32000);
    size_t len;
    const char *s = fmt_kv_arr_str(kv, "tokenizer.ggml.tokens", 0, &len);
    assert_int_equal(len, 5);
    assert_memory_equal(s, "<unk>", 5);
    const fmt_tensor *t = fmt_gguf_find(g, "token_embd.weight");
    assert_int_equal(t->ne[1], 32000);
    assert_int_equal(t->dtype, FMT_DT_F16);
    fmt_gguf_close(g);
}

/* ---- dequantisation against the F32 file ------------------------------- */
/* Each block of 32 weights: a Q8_0 weight is within one step (amax/127) of
 * the truth, a Q4_0 weight within one step (amax/8; ggml clamps the
 * extreme opposite to the max to 7, hence a full step), plus f16 rounding
 * of the scale.  F16 is within 2^-11 relative. */
static void compare_file(const char *rel, int qtype)
{
    fmt_gguf *ref = open_ok("models/stories260K-f32.gguf");
    fmt_gguf *g = open_ok(rel);
    int n_q = 0;
    for (uint64_t i = 0; i < fmt_gguf_n_tensors(g); i++) {
        const fmt_tensor *t = fmt_gguf_tensor(g, i);
        const fmt_tensor *r = fmt_gguf_find(ref, t->name);
        assert_non_null(r);
        uint64_t n = r->ne[0] * r->ne[1] * r->ne[2] * r->ne[3];
        assert_int_equal(n, t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        float *y = malloc(n * sizeof *y), *x = malloc(n * sizeof *x);
        assert_int_equal(fmt_dequant(t->dtype, t->data, y, n), 0);
        assert_int_equal(fmt_dequant(FMT_DT_F32, r->data, x, n), 0);
        if (t->dtype == FMT_DT_F32) {
            assert_memory_equal(x, y, n * 4);
        } else if (t->dtype == FMT_DT_F16) {
            for (uint64_t k = 0; k < n; k++)
                assert_true(fabsf(x[k] - y[k]) <= fabsf(x[k]) / 2048.0f +
                            1e-7f);
        } else {
            /* the Q4_0 file keeps output.weight in Q8_0 */
            assert_true(t->dtype == qtype || t->dtype == FMT_DT_Q8_0);
            n_q += t->dtype == qtype;
            float steps = t->dtype == FMT_DT_Q8_0 ? 127.0f : 8.0f;
            double err2 = 0, sig2 = 0;
            for (uint64_t b = 0; b < n; b += 32) {
                float amax = 0;
                for (int k = 0; k < 32; k++)
                    amax = fmaxf(amax, fabsf(x[b + k]));
                float tol = amax / steps * 1.01f + 1e-6f;
                for (int k = 0; k < 32; k++) {
                    float d = fabsf(x[b + k] - y[b + k]);
                    if (d > tol)
                        fail_msg("%s %s[%llu]: %g vs %g (tol %g)", rel,
                                 t->name, (unsigned long long)(b + k),
                                 x[b + k], y[b + k], tol);
                    err2 += (double)d * d;
                    sig2 += (double)x[b + k] * x[b + k];
                }
            }
            /* and the error is small overall, not just bounded */
            assert_true(err2 < sig2 * (t->dtype == FMT_DT_Q8_0 ? 1e-4 : 2e-2));
        }
        free(x);
        free(y);
    }
    if (qtype != FMT_DT_F16)
        assert_true(n_q >= 5 * 6);
    fmt_gguf_close(g);
    fmt_gguf_close(ref);
}

static void test_dequant_files(void **state)
{
    (void)state;
    compare_file("models/stories260K-q8_0.gguf", FMT_DT_Q8_0);
    compare_file("models/stories260K-q4_0.gguf", FMT_DT_Q4_0);
    compare_file("models/stories260K-f16.gguf", FMT_DT_F16);
}

/* ---- hand-built blocks -------------------------------------------------- */
static uint64_t rng = 88172645463325252ull;
static unsigned rnd(unsigned n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng % n);
}

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

#define F16_1     0x3C00  /* 1.0 */
#define F16_EIGHTH 0x3000 /* 0.125 */
#define F16_16TH  0x2C00  /* 0.0625 */
#define F16_M2    0xC000  /* -2.0 */

static void test_f16(void **state)
{
    (void)state;
    uint16_t h[] = { 0x3C00, 0xC000, 0x0001, 0x03FF, 0x7BFF, 0x8000, 0x3555 };
    float want[] = { 1.0f, -2.0f, 5.9604644775390625e-08f,
                     6.0975551605224609e-05f, 65504.0f, -0.0f,
                     0.33325195f };
    float y[7];
    assert_int_equal(fmt_dequant(FMT_DT_F16, h, y, 7), 0);
    for (int i = 0; i < 7; i++)
        assert_true(y[i] == want[i]);
    assert_true(signbit(y[5]));
    uint16_t inf = 0x7C00, nan = 0x7E00;
    assert_int_equal(fmt_dequant(FMT_DT_F16, &inf, y, 1), 0);
    assert_true(isinf(y[0]) && y[0] > 0);
    assert_int_equal(fmt_dequant(FMT_DT_F16, &nan, y, 1), 0);
    assert_true(isnan(y[0]));
    uint16_t bf[] = { 0x3F80, 0xC0A0, 0x0000 };
    assert_int_equal(fmt_dequant(FMT_DT_BF16, bf, y, 3), 0);
    assert_true(y[0] == 1.0f && y[1] == -5.0f && y[2] == 0.0f);
    /* sizes and names */
    assert_int_equal(fmt_dtype_size(FMT_DT_Q4_0, 64), 36);
    assert_int_equal(fmt_dtype_size(FMT_DT_Q8_0, 32), 34);
    assert_int_equal(fmt_dtype_size(FMT_DT_Q4_K, 512), 288);
    assert_int_equal(fmt_dtype_size(FMT_DT_Q6_K, 256), 210);
    assert_int_equal(fmt_dtype_size(FMT_DT_Q5_K, 256), 176);
    assert_int_equal(fmt_dtype_size(FMT_DT_Q3_K, 256), 110);
    assert_int_equal(fmt_dtype_size(FMT_DT_Q2_K, 256), 84);
    assert_int_equal(fmt_dtype_size(FMT_DT_BF16, 3), 6);
    assert_int_equal(fmt_dtype_size(FMT_DT_Q4_0, 33), 0);
    assert_int_equal(fmt_dtype_size(FMT_DT_IQ4_XS, 512), 272);
    assert_int_equal(fmt_dtype_size(FMT_DT_IQ4_NL, 64), 36);
    assert_int_equal(fmt_dtype_size(FMT_DT_MXFP4, 64), 34);
    assert_int_equal(fmt_dtype_size(FMT_DT_Q5_1, 32), 24);
    /* every GGML type is known by its geometry, even those cflow cannot
     * read (IQ1_S: 50 bytes / 256); removed and unknown numbers are not */
    assert_int_equal(fmt_dtype_size(FMT_DT_IQ1_S, 256), 50);
    assert_int_equal(fmt_dtype_size(FMT_DT_Q1_0, 128), 18);
    assert_int_equal(fmt_dtype_size(4, 32), 0);
    assert_int_equal(fmt_dtype_size(31, 32), 0);
    assert_int_equal(fmt_dtype_size(99, 32), 0);
    assert_string_equal(fmt_dtype_name(FMT_DT_Q6_K), "Q6_K");
    assert_string_equal(fmt_dtype_name(FMT_DT_IQ2_XXS), "IQ2_XXS");
    assert_string_equal(fmt_dtype_name(4), "unknown");
    assert_int_equal(fmt_dequant(FMT_DT_IQ1_S, h, y, 256), -1);
    assert_int_equal(fmt_dtype_tile(FMT_DT_IQ1_S), -1);
    assert_int_equal(fmt_dtype_tile(FMT_DT_Q8_0), KERN_Q8_0);
    assert_int_equal(fmt_dtype_tile(FMT_DT_F16), KERN_F16);
    assert_int_equal(fmt_dequant(FMT_DT_Q8_0, h, y, 7), -1);
}

/* Legacy 32-weight types: y = d*(q - off) (+ m). */
static void test_legacy_blocks(void **state)
{
    (void)state;
    uint8_t b[64];
    float y[32];
    int q[32];
    for (int rep = 0; rep < 50; rep++) {
        /* Q4_0 / Q4_1: nibble j low, j+16 high */
        for (int j = 0; j < 32; j++)
            q[j] = (int)rnd(16);
        memset(b, 0, sizeof b);
        put16(b, F16_EIGHTH);
        for (int j = 0; j < 16; j++)
            b[2 + j] = (uint8_t)(q[j] | q[j + 16] << 4);
        assert_int_equal(fmt_dequant(FMT_DT_Q4_0, b, y, 32), 0);
        for (int j = 0; j < 32; j++)
            assert_true(y[j] == 0.125f * (q[j] - 8));
        memset(b, 0, sizeof b);
        put16(b, F16_EIGHTH);
        put16(b + 2, F16_M2);
        for (int j = 0; j < 16; j++)
            b[4 + j] = (uint8_t)(q[j] | q[j + 16] << 4);
        assert_int_equal(fmt_dequant(FMT_DT_Q4_1, b, y, 32), 0);
        for (int j = 0; j < 32; j++)
            assert_true(y[j] == 0.125f * q[j] - 2.0f);
        /* Q5_0 / Q5_1: bit 4 of weight j in bit j of qh */
        uint32_t qh = 0;
        for (int j = 0; j < 32; j++) {
            q[j] = (int)rnd(32);
            qh |= (uint32_t)(q[j] >> 4) << j;
        }
        memset(b, 0, sizeof b);
        put16(b, F16_EIGHTH);
        memcpy(b + 2, &qh, 4);
        for (int j = 0; j < 16; j++)
            b[6 + j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
        assert_int_equal(fmt_dequant(FMT_DT_Q5_0, b, y, 32), 0);
        for (int j = 0; j < 32; j++)
            assert_true(y[j] == 0.125f * (q[j] - 16));
        memset(b, 0, sizeof b);
        put16(b, F16_EIGHTH);
        put16(b + 2, F16_M2);
        memcpy(b + 4, &qh, 4);
        for (int j = 0; j < 16; j++)
            b[8 + j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
        assert_int_equal(fmt_dequant(FMT_DT_Q5_1, b, y, 32), 0);
        for (int j = 0; j < 32; j++)
            assert_true(y[j] == 0.125f * q[j] - 2.0f);
        /* Q8_0 */
        memset(b, 0, sizeof b);
        put16(b, F16_EIGHTH);
        for (int j = 0; j < 32; j++) {
            q[j] = (int)rnd(256) - 128;
            b[2 + j] = (uint8_t)(int8_t)q[j];
        }
        assert_int_equal(fmt_dequant(FMT_DT_Q8_0, b, y, 32), 0);
        for (int j = 0; j < 32; j++)
            assert_true(y[j] == 0.125f * q[j]);
    }
}

/* K-quants.  The encoders below are written from the block layouts (the
 * quantisers' packing in ggml), not from our decoder: weight w of a
 * 256-weight super-block. */
static void pack_scale_min_k4(uint8_t sc12[12], const int sc[8],
                              const int mn[8])
{
    memset(sc12, 0, 12);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            sc12[j] = (uint8_t)sc[j];
            sc12[j + 4] = (uint8_t)mn[j];
        } else {
            sc12[j + 4] = (uint8_t)((sc[j] & 0xF) | ((mn[j] & 0xF) << 4));
            sc12[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
            sc12[j] |= (uint8_t)((mn[j] >> 4) << 6);
        }
    }
}

static void test_kquant_blocks(void **state)
{
    (void)state;
    uint8_t b[2 * 210];
    float y[512];
    int q[512], sc[32], mn[32];
    for (int rep = 0; rep < 40; rep++) {
        /* Q4_K, two super-blocks: y = d*sc[w/32]*q - dmin*m[w/32] */
        memset(b, 0, sizeof b);
        for (int s = 0; s < 2; s++) {
            uint8_t *x = b + 144 * s;
            put16(x, F16_EIGHTH);
            put16(x + 2, F16_16TH);
            for (int j = 0; j < 8; j++) {
                sc[8 * s + j] = (int)rnd(64);
                mn[8 * s + j] = (int)rnd(64);
            }
            pack_scale_min_k4(x + 4, sc + 8 * s, mn + 8 * s);
            for (int w = 0; w < 256; w++) {
                q[256 * s + w] = (int)rnd(16);
                int byte = (w / 64) * 32 + w % 32;
                x[16 + byte] |= (uint8_t)(q[256 * s + w] << ((w % 64) / 32 * 4));
            }
        }
        assert_int_equal(fmt_dequant(FMT_DT_Q4_K, b, y, 512), 0);
        for (int w = 0; w < 512; w++)
            assert_true(y[w] == 0.125f * sc[w / 32] * q[w] -
                                0.0625f * mn[w / 32]);

        /* Q5_K: as Q4_K plus bit 4 of weight w in qh[w%32], bit w/32 */
        memset(b, 0, sizeof b);
        put16(b, F16_EIGHTH);
        put16(b + 2, F16_16TH);
        for (int j = 0; j < 8; j++) {
            sc[j] = (int)rnd(64);
            mn[j] = (int)rnd(64);
        }
        pack_scale_min_k4(b + 4, sc, mn);
        for (int w = 0; w < 256; w++) {
            q[w] = (int)rnd(32);
            int byte = (w / 64) * 32 + w % 32;
            b[48 + byte] |= (uint8_t)((q[w] & 15) << ((w % 64) / 32 * 4));
            b[16 + w % 32] |= (uint8_t)((q[w] >> 4) << (w / 32));
        }
        assert_int_equal(fmt_dequant(FMT_DT_Q5_K, b, y, 256), 0);
        for (int w = 0; w < 256; w++)
            assert_true(y[w] == 0.125f * sc[w / 32] * q[w] -
                                0.0625f * mn[w / 32]);

        /* Q6_K: y = d*scale[w/16]*(q-32); in each 128-half h, weight
         * h*128 + 32*k + l (k = 0..3, l < 32) keeps its low nibble in
         * ql[64h + l + 32*(k&1)] (high nibble when k >= 2) and its top two
         * bits in qh[32h + l] at bit 2k. */
        memset(b, 0, sizeof b);
        put16(b + 208, F16_EIGHTH);
        for (int j = 0; j < 16; j++) {
            sc[j] = (int)rnd(256) - 128;
            b[192 + j] = (uint8_t)(int8_t)sc[j];
        }
        for (int w = 0; w < 256; w++) {
            q[w] = (int)rnd(64);
            int h = w / 128, k = (w % 128) / 32, l = w % 32;
            b[64 * h + l + 32 * (k & 1)] |=
                (uint8_t)((q[w] & 15) << (k >= 2 ? 4 : 0));
            b[128 + 32 * h + l] |= (uint8_t)((q[w] >> 4) << (2 * k));
        }
        assert_int_equal(fmt_dequant(FMT_DT_Q6_K, b, y, 256), 0);
        for (int w = 0; w < 256; w++)
            assert_true(y[w] == 0.125f * sc[w / 16] * (q[w] - 32));

        /* Q3_K: y = d*(scale[w/16]-32)*(L-4), L in 0..7: low two bits in
         * qs[32*(w/128) + w%32] at bit 2*((w%128)/32), bit 2 in
         * hmask[w%32] at bit w/32; 6-bit scales packed as ggml does. */
        memset(b, 0, sizeof b);
        put16(b + 108, F16_EIGHTH);
        for (int j = 0; j < 16; j++) {
            sc[j] = (int)rnd(64);
            int l = sc[j];
            if (j < 8)
                b[96 + j] = (uint8_t)(l & 0xF);
            else
                b[96 + j - 8] |= (uint8_t)((l & 0xF) << 4);
            b[96 + j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
        }
        for (int w = 0; w < 256; w++) {
            q[w] = (int)rnd(8);
            b[32 + 32 * (w / 128) + w % 32] |=
                (uint8_t)((q[w] & 3) << (2 * ((w % 128) / 32)));
            if (q[w] & 4)
                b[w % 32] |= (uint8_t)(1u << (w / 32));
        }
        assert_int_equal(fmt_dequant(FMT_DT_Q3_K, b, y, 256), 0);
        for (int w = 0; w < 256; w++)
            assert_true(y[w] == 0.125f * (sc[w / 16] - 32) * (q[w] - 4));

        /* Q2_K: y = d*(s&15)*q - dmin*(s>>4), s = scales[w/16], q two bits
         * in qs[32*(w/128) + w%32] at bit 2*((w%128)/32). */
        memset(b, 0, sizeof b);
        put16(b + 80, F16_EIGHTH);
        put16(b + 82, F16_16TH);
        for (int j = 0; j < 16; j++) {
            sc[j] = (int)rnd(256);
            b[j] = (uint8_t)sc[j];
        }
        for (int w = 0; w < 256; w++) {
            q[w] = (int)rnd(4);
            b[16 + 32 * (w / 128) + w % 32] |=
                (uint8_t)(q[w] << (2 * ((w % 128) / 32)));
        }
        assert_int_equal(fmt_dequant(FMT_DT_Q2_K, b, y, 256), 0);
        for (int w = 0; w < 256; w++)
            assert_true(y[w] == 0.125f * (sc[w / 16] & 15) * q[w] -
                                0.0625f * (sc[w / 16] >> 4));
    }
    /* a K-quant count that is not whole super-blocks is refused */
    assert_int_equal(fmt_dequant(FMT_DT_Q4_K, b, y, 128), -1);
}

/* ---- corrupted files ---------------------------------------------------- */
/* Field offsets of a GGUF, found by a walker independent of the reader. */
#define MAXF 4096
typedef struct layout {
    size_t kv_key[64], kv_type[64], kv_val[64];
    const char *kv_name[64];
    size_t n_kv;
    size_t ti_name[64], ti_ndim[64], ti_dims[64], ti_type[64], ti_off[64];
    size_t n_t;
    size_t bounds[MAXF], n_bounds;
    size_t data_start;
} layout;

static void lay_bound(layout *L, size_t o)
{
    assert_true(L->n_bounds < MAXF);
    L->bounds[L->n_bounds++] = o;
}

static size_t skip_val(layout *L, const uint8_t *p, size_t o, uint32_t t)
{
    static const int sz[] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };
    uint64_t v;
    if (t == 8) {
        memcpy(&v, p + o, 8);
        return o + 8 + v;
    }
    if (t == 9) {
        uint32_t et;
        memcpy(&et, p + o, 4);
        memcpy(&v, p + o + 4, 8);
        o += 12;
        lay_bound(L, o);
        for (uint64_t i = 0; i < v; i++) {
            o = skip_val(L, p, o, et);
            if (i < 4)
                lay_bound(L, o);
        }
        return o;
    }
    return o + (size_t)sz[t];
}

static void walk(layout *L, const uint8_t *p, size_t n)
{
    uint64_t nt, nkv, v;
    memset(L, 0, sizeof *L);
    memcpy(&nt, p + 8, 8);
    memcpy(&nkv, p + 16, 8);
    assert_true(nt <= 64 && nkv <= 64);
    lay_bound(L, 0);
    lay_bound(L, 3);
    lay_bound(L, 4);
    lay_bound(L, 8);
    lay_bound(L, 16);
    size_t o = 24;
    for (uint64_t i = 0; i < nkv; i++) {
        lay_bound(L, o);
        L->kv_key[i] = o;
        L->kv_name[i] = (const char *)p + o + 8;
        memcpy(&v, p + o, 8);
        o += 8 + v;
        lay_bound(L, o);
        L->kv_type[i] = o;
        uint32_t t;
        memcpy(&t, p + o, 4);
        o += 4;
        lay_bound(L, o);
        L->kv_val[i] = o;
        o = skip_val(L, p, o, t);
    }
    L->n_kv = nkv;
    for (uint64_t i = 0; i < nt; i++) {
        lay_bound(L, o);
        L->ti_name[i] = o;
        memcpy(&v, p + o, 8);
        o += 8 + v;
        lay_bound(L, o);
        L->ti_ndim[i] = o;
        uint32_t nd;
        memcpy(&nd, p + o, 4);
        o += 4;
        L->ti_dims[i] = o;
        for (uint32_t d = 0; d < nd; d++) {
            lay_bound(L, o);
            o += 8;
        }
        lay_bound(L, o);
        L->ti_type[i] = o;
        o += 4;
        lay_bound(L, o);
        L->ti_off[i] = o;
        o += 8;
    }
    L->n_t = nt;
    lay_bound(L, o);
    L->data_start = (o + 31) / 32 * 32;
    lay_bound(L, L->data_start);
    /* tensor data starts */
    for (uint64_t i = 0; i < nt; i++) {
        uint64_t off;
        memcpy(&off, p + L->ti_off[i], 8);
        lay_bound(L, L->data_start + off);
        lay_bound(L, L->data_start + off + 1);
    }
    assert_true(o <= n);
}

typedef struct corrupt_env {
    uint8_t *orig;
    size_t   n;
    layout   L;
    char     dir[256];
    char     path[512];
    size_t   data_end;
} corrupt_env;

static int try_open(corrupt_env *E, const uint8_t *b, size_t n, char *err,
                    size_t errlen)
{
    tu_spit(E->path, b, n);
    fmt_gguf *g = NULL;
    err[0] = '\0';
    int rc = fmt_gguf_open(&g, E->path, err, errlen);
    if (rc == FMT_OK) {
        assert_non_null(g);
        fmt_gguf_close(g);
    } else {
        assert_null(g);
        assert_non_null(strstr(err, E->path));
        assert_null(strchr(err, '\n'));
    }
    return rc;
}

static int setup_corrupt(void **state)
{
    corrupt_env *E = calloc(1, sizeof *E);
    const char *p = tu_shared("models/stories260K-q4_0.gguf");
    E->orig = tu_slurp(p, &E->n);
    walk(&E->L, E->orig, E->n);
    const char *tmp = getenv("TMPDIR");
    snprintf(E->dir, sizeof E->dir, "%s/cflow-gguf-XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    assert_non_null(mkdtemp(E->dir));
    snprintf(E->path, sizeof E->path, "%s/corrupt.gguf", E->dir);
    /* the end of the tensor data, from the intact file */
    fmt_gguf *g;
    char err[256];
    tu_spit(E->path, E->orig, E->n);
    assert_int_equal(fmt_gguf_open(&g, E->path, err, sizeof err), FMT_OK);
    for (uint64_t i = 0; i < fmt_gguf_n_tensors(g); i++) {
        const fmt_tensor *t = fmt_gguf_tensor(g, i);
        /* data pointers are into the mapping; recompute from offsets */
        uint64_t off;
        memcpy(&off, E->orig + E->L.ti_off[i], 8);
        size_t end = E->L.data_start + off + t->nbytes;
        if (end > E->data_end)
            E->data_end = end;
    }
    fmt_gguf_close(g);
    assert_true(E->data_end <= E->n);
    assert_true(E->data_end > E->n - 32);
    *state = E;
    return 0;
}

static int teardown_corrupt(void **state)
{
    corrupt_env *E = *state;
    unlink(E->path);
    rmdir(E->dir);
    free(E->orig);
    free(E);
    return 0;
}

static void test_truncations(void **state)
{
    corrupt_env *E = *state;
    char err[512];
    int checked = 0;
    for (size_t i = 0; i < E->L.n_bounds; i++) {
        size_t cut = E->L.bounds[i];
        if (cut >= E->data_end)
            continue;
        int rc = try_open(E, E->orig, cut, err, sizeof err);
        if (rc != FMT_EFORMAT)
            fail_msg("truncated at %zu: rc %d (%s)", cut, rc, err);
        checked++;
    }
    /* and a stride through everything else */
    for (size_t cut = 1; cut < E->data_end; cut += 4099) {
        assert_int_equal(try_open(E, E->orig, cut, err, sizeof err),
                         FMT_EFORMAT);
        checked++;
    }
    assert_true(checked > 200);
    assert_int_equal(try_open(E, E->orig, E->data_end - 1, err, sizeof err),
                     FMT_EFORMAT);
    /* the intact file still opens */
    assert_int_equal(try_open(E, E->orig, E->n, err, sizeof err), FMT_OK);
}

static size_t kv_index(const layout *L, const char *name)
{
    size_t l = strlen(name);
    for (size_t i = 0; i < L->n_kv; i++) {
        uint64_t kl;
        memcpy(&kl, L->kv_name[i] - 8, 8);
        if (kl == l && memcmp(L->kv_name[i], name, l) == 0)
            return i;
    }
    fail_msg("no key %s", name);
    return 0;
}

/* Index of the tensor info whose name is name. */
static size_t t_index(const corrupt_env *E, const char *name)
{
    size_t l = strlen(name);
    for (size_t i = 0; i < E->L.n_t; i++) {
        uint64_t nl;
        memcpy(&nl, E->orig + E->L.ti_name[i], 8);
        if (nl == l && memcmp(E->orig + E->L.ti_name[i] + 8, name, l) == 0)
            return i;
    }
    fail_msg("no tensor %s", name);
    return 0;
}

typedef struct patch {
    const char *what;
    int         expect;
    size_t      at;       /* byte offset */
    unsigned    width;    /* 1, 4 or 8; 0: rename the key at 'at' to
                           * general.alignment (same length) */
    uint64_t    value;
} patch;

/* What test_patches' table cannot say: a duplicate tensor name, an
 * alignment of 3 (refused by name), random byte flips in the header (no
 * crash; whatever opens is self-consistent), a missing file. */
static void check_other_damage(corrupt_env *E)
{
    const layout *L = &E->L;
    size_t bc = kv_index(L, "llama.block_count");
    char err[512];
    uint8_t *b = malloc(E->n);
    /* a duplicate tensor name: blk.0.attn_k -> blk.0.attn_q */
    memcpy(b, E->orig, E->n);
    size_t k0 = t_index(E, "blk.0.attn_k.weight");
    b[L->ti_name[k0] + 8 + strlen("blk.0.attn_")] = 'q';
    assert_int_equal(try_open(E, b, E->n, err, sizeof err), FMT_EFORMAT);
    assert_non_null(strstr(err, "blk.0.attn_q.weight"));
    /* alignment 3 is refused by name */
    uint32_t a;
    memcpy(b + L->kv_key[bc] + 8, "general.alignment", 17);
    a = 3;
    memcpy(b + L->kv_val[bc], &a, 4);
    assert_int_equal(try_open(E, b, E->n, err, sizeof err), FMT_EFORMAT);
    assert_non_null(strstr(err, "alignment"));
    /* random byte flips never crash; whatever opens is self-consistent */
    uint8_t *c = malloc(E->n);
    for (int it = 0; it < 300; it++) {
        memcpy(c, E->orig, E->n);
        size_t lim = E->L.data_start + 64;
        for (int f = 0; f < 1 + it % 3; f++)
            c[rnd((unsigned)lim)] = (uint8_t)rnd(256);
        int rc = try_open(E, c, E->n, err, sizeof err);
        assert_true(rc == FMT_OK || rc == FMT_EFORMAT || rc == FMT_EUNSUP);
    }
    free(c);
    free(b);
    /* a missing file is an I/O error naming it */
    fmt_gguf *g = NULL;
    assert_int_equal(fmt_gguf_open(&g, "/nonexistent/x.gguf", err,
                                   sizeof err), FMT_EIO);
    assert_non_null(strstr(err, "/nonexistent/x.gguf"));
}

static void test_patches(void **state)
{
    corrupt_env *E = *state;
    const layout *L = &E->L;
    uint64_t n_t, n_kv;
    memcpy(&n_t, E->orig + 8, 8);
    memcpy(&n_kv, E->orig + 16, 8);
    size_t tok = kv_index(L, "tokenizer.ggml.tokens");
    size_t arch = kv_index(L, "general.architecture");
    size_t bc = kv_index(L, "llama.block_count");
    size_t q0 = t_index(E, "blk.0.attn_q.weight");
    size_t dn = t_index(E, "blk.0.ffn_down.weight");
    size_t last = L->n_t - 1;
    uint64_t last_off;
    memcpy(&last_off, E->orig + L->ti_off[last], 8);
    const patch P[] = {
        { "bad magic", FMT_EFORMAT, 0, 1, 'X' },
        { "bad magic 2", FMT_EFORMAT, 3, 1, 'G' },
        { "version 0", FMT_EFORMAT, 4, 4, 0 },
        { "version 99", FMT_EFORMAT, 4, 4, 99 },
        { "version 1 (old)", FMT_EUNSUP, 4, 4, 1 },
        { "huge n_tensors", FMT_EFORMAT, 8, 8, 1ull << 62 },
        { "n_tensors all ones", FMT_EFORMAT, 8, 8, UINT64_MAX },
        { "n_tensors + 1", FMT_EFORMAT, 8, 8, n_t + 1 },
        { "huge n_kv", FMT_EFORMAT, 16, 8, 1ull << 40 },
        { "n_kv all ones", FMT_EFORMAT, 16, 8, UINT64_MAX },
        { "n_kv + 1", FMT_EFORMAT, 16, 8, n_kv + 1 },
        { "key length huge", FMT_EFORMAT, L->kv_key[0], 8, 1ull << 50 },
        { "key length zero", FMT_EFORMAT, L->kv_key[0], 8, 0 },
        { "key length past end", FMT_EFORMAT, L->kv_key[0], 8, E->n },
        { "value type 13", FMT_EFORMAT, L->kv_type[arch], 4, 13 },
        { "value type huge", FMT_EFORMAT, L->kv_type[arch], 4, 0xFFFFFFFFu },
        { "string length huge", FMT_EFORMAT, L->kv_val[arch], 8,
          UINT64_MAX - 3 },
        { "string length past end", FMT_EFORMAT, L->kv_val[arch], 8,
          E->n - L->kv_val[arch] - 7 },
        { "array element type 99", FMT_EFORMAT, L->kv_val[tok], 4, 99 },
        { "nested array", FMT_EUNSUP, L->kv_val[tok], 4, 9 },
        { "array count huge", FMT_EFORMAT, L->kv_val[tok] + 4, 8,
          1ull << 60 },
        { "array count past end", FMT_EFORMAT, L->kv_val[tok] + 4, 8,
          E->n / 8 },
        { "first token length huge", FMT_EFORMAT, L->kv_val[tok] + 12, 8,
          1ull << 33 },
        /* llama.block_count (17 bytes) renamed general.alignment: 5 */
        { "alignment 5", FMT_EFORMAT, L->kv_key[bc] + 8, 0, 0 },
        { "tensor name length 0", FMT_EFORMAT, L->ti_name[0], 8, 0 },
        { "tensor name length huge", FMT_EFORMAT, L->ti_name[0], 8,
          1ull << 40 },
        { "ndim 0", FMT_EFORMAT, L->ti_ndim[q0], 4, 0 },
        { "ndim 5", FMT_EFORMAT, L->ti_ndim[q0], 4, 5 },
        { "ndim huge", FMT_EFORMAT, L->ti_ndim[q0], 4, 0x7FFFFFFFu },
        { "dim 0", FMT_EFORMAT, L->ti_dims[q0], 8, 0 },
        { "dim 1 zero", FMT_EFORMAT, L->ti_dims[q0] + 8, 8, 0 },
        { "dim huge", FMT_EFORMAT, L->ti_dims[q0] + 8, 8, 1ull << 62 },
        { "dims overflow", FMT_EFORMAT, L->ti_dims[q0] + 8, 8,
          (1ull << 63) / 32 },
        { "cols not whole blocks", FMT_EFORMAT, L->ti_dims[q0], 8, 48 },
        { "type 99", FMT_EUNSUP, L->ti_type[q0], 4, 99 },
        /* a type the reader knows but cflow cannot read opens (a role
         * refuses it later, by name); here its block cuts the row */
        { "type IQ2_XXS over 64 cols", FMT_EFORMAT, L->ti_type[q0], 4, 16 },
        { "type 4 (removed from GGML)", FMT_EUNSUP, L->ti_type[q0], 4, 4 },
        { "F16 down made Q4_0 (172 cols)", FMT_EFORMAT, L->ti_type[dn], 4,
          FMT_DT_Q4_0 },
        { "offset past end", FMT_EFORMAT, L->ti_off[last], 8, E->n },
        { "offset overflow", FMT_EFORMAT, L->ti_off[last], 8,
          UINT64_MAX - 31 },
        { "offset misaligned", FMT_EFORMAT, L->ti_off[last], 8,
          last_off + 1 },
        { "offset one block late", FMT_EFORMAT, L->ti_off[last], 8,
          last_off + 32 * ((E->n - E->L.data_start - last_off) / 32 + 1) },
    };
    char err[512];
    uint8_t *b = malloc(E->n);
    for (size_t i = 0; i < sizeof P / sizeof P[0]; i++) {
        memcpy(b, E->orig, E->n);
        if (P[i].width == 0) {
            memcpy(b + P[i].at, "general.alignment", 17);
        } else {
            assert_true(P[i].at + P[i].width <= E->n);
            if (P[i].width == 1) {
                b[P[i].at] = (uint8_t)P[i].value;
            } else if (P[i].width == 4) {
                uint32_t v = (uint32_t)P[i].value;
                memcpy(b + P[i].at, &v, 4);
            } else {
                memcpy(b + P[i].at, &P[i].value, 8);
            }
        }
        int rc = try_open(E, b, E->n, err, sizeof err);
        if (rc != P[i].expect)
            fail_msg("%s: rc %d, expected %d (%s)", P[i].what, rc,
                     P[i].expect, err);
    }
    free(b);
    check_other_damage(E);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_all),
        cmocka_unit_test(test_stories_facts),
        cmocka_unit_test(test_dequant_files),
        cmocka_unit_test(test_f16),
        cmocka_unit_test(test_legacy_blocks),
        cmocka_unit_test(test_kquant_blocks),
        cmocka_unit_test_setup_teardown(test_truncations, setup_corrupt,
                                        teardown_corrupt),
        cmocka_unit_test_setup_teardown(test_patches, setup_corrupt,
                                        teardown_corrupt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
