/*
 * test_src.c — source models: GGUF, llama2.c checkpoints and Hugging Face
 * directories seen through fmt_src.
 *
 *   - stories260K.bin (llama2.c, tokenizer tok512.bin): geometry, tied
 *     head, every role tensor identical to the F32 GGUF's;
 *   - the shared GGUFs; GGUFs this test writes from the F32 one with one
 *     change each (qwen2 with biases, missing or misshapen tensors, short
 *     vocabulary, Llama-3 RoPE scaling by tensor or keys, MoE tensors,
 *     absurd geometry);
 *   - HF directories this test generates from stories260K.bin's weights:
 *     config.json + model.safetensors (BF16 / F32), Q and K permuted into
 *     HF's split-half layout exactly as transformers' conversion script
 *     does; single file, sharded with an index, Qwen2 with biases, a
 *     padded vocabulary, and a table of damaged headers and configs.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/cflow_format.h"
#include "testutil.h"

/* ---- helpers ----------------------------------------------------------- */
static fmt_src *open_ok(const char *path, const char *tok)
{
    fmt_src *s = NULL;
    char err[512] = "";
    int rc = fmt_src_open(&s, path, tok, err, sizeof err);
    if (rc != FMT_OK)
        fail_msg("%s: rc %d: %s", path, rc, err);
    assert_non_null(s);
    return s;
}

/* Open must fail with rc; the message is one line naming `names`. */
static void open_fails(const char *path, const char *tok, int rc_want,
                       const char *names)
{
    fmt_src *s = NULL;
    char err[512] = "";
    int rc = fmt_src_open(&s, path, tok, err, sizeof err);
    if (rc != rc_want)
        fail_msg("%s: rc %d, expected %d (%s)", path, rc, rc_want, err);
    assert_null(s);
    assert_null(strchr(err, '\n'));
    if (names && !strstr(err, names))
        fail_msg("%s: message '%s' lacks '%s'", path, err, names);
}

static uint64_t nel(const fmt_tensor *t)
{
    return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
}

static float *deq(const fmt_tensor *t)
{
    float *y = malloc(nel(t) * sizeof *y);
    assert_int_equal(fmt_dequant(t->dtype, t->data, y, nel(t)), 0);
    return y;
}

static uint16_t to_bf16(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    b += 0x7FFF + ((b >> 16) & 1);
    return (uint16_t)(b >> 16);
}

static float bf16_round(float f)
{
    uint32_t b = (uint32_t)to_bf16(f) << 16;
    float r;
    memcpy(&r, &b, 4);
    return r;
}

/* ---- llama2.c ----------------------------------------------------------- */
static void test_llama2c(void **state)
{
    (void)state;
    const char *bin = tu_shared_file("models/stories260K.bin");
    const char *tok = tu_shared_file("models/tok512.bin");
    const char *gg = tu_shared_file("models/stories260K-f32.gguf");
    fmt_src *s = open_ok(bin, tok);
    const fmt_hparams *h = fmt_src_hparams(s);
    assert_string_equal(fmt_src_kind(s), "llama2c");
    assert_string_equal(h->arch, "llama");
    assert_int_equal(h->n_layers, 5);
    assert_int_equal(h->dim, 64);
    assert_int_equal(h->ffn_dim, 172);
    assert_int_equal(h->n_heads, 8);
    assert_int_equal(h->n_kv_heads, 4);
    assert_int_equal(h->head_dim, 8);
    assert_int_equal(h->vocab_size, 512);
    assert_int_equal(h->max_seq, 512);
    assert_true(h->rope_theta == 10000.0f);
    assert_true(h->norm_eps == 1e-5f);
    assert_int_equal(h->flags & FMT_FLAG_TIED, FMT_FLAG_TIED);
    assert_int_equal(h->flags & (FMT_FLAG_ROPE_NEOX | FMT_FLAG_QKV_BIAS), 0);
    assert_int_equal(h->n_experts, 0);
    assert_null(fmt_src_tensor(s, FMT_R_OUTPUT, 0));
    assert_null(fmt_src_tensor(s, FMT_R_Q, 5));
    assert_null(fmt_src_tensor(s, FMT_R_Q_BIAS, 0));
    assert_null(fmt_src_tensor(s, FMT_NROLES, 0));
    const fmt_kv *kv = fmt_src_kv(s);
    assert_int_equal(fmt_kv_arr_len(kv, "tokenizer.ggml.tokens"), 512);

    /* every tensor equals llama.cpp's F32 conversion of the same file */
    fmt_src *g = open_ok(gg, NULL);
    assert_string_equal(fmt_src_kind(g), "gguf");
    int compared = 0;
    for (int r = 0; r < FMT_NROLES; r++) {
        for (unsigned l = 0; l < 5; l++) {
            const fmt_tensor *a = fmt_src_tensor(s, r, l);
            const fmt_tensor *b = fmt_src_tensor(g, r, l);
            if (r == FMT_R_OUTPUT) {
                /* the GGUF stores the tied head as its own copy */
                assert_null(a);
                assert_non_null(b);
                const fmt_tensor *e = fmt_src_tensor(s, FMT_R_TOK_EMBD, 0);
                assert_memory_equal(e->data, b->data, b->nbytes);
                continue;
            }
            assert_true((a == NULL) == (b == NULL));
            if (!a)
                continue;
            assert_int_equal(a->dtype, FMT_DT_F32);
            assert_int_equal(a->ndim, b->ndim);
            assert_memory_equal(a->ne, b->ne, sizeof a->ne);
            assert_int_equal(a->nbytes, b->nbytes);
            assert_memory_equal(a->data, b->data, a->nbytes);
            compared++;
        }
    }
    assert_int_equal(compared, 5 * 9 + 2 * 5);  /* globals seen per l */
    fmt_src_close(g);
    fmt_src_close(s);

    /* no tokenizer: refused with the flag to use */
    open_fails(bin, NULL, FMT_EARG, "--tokenizer");
}

static void test_llama2c_variants(void **state)
{
    (void)state;
    const char *bin = tu_shared_file("models/stories260K.bin");
    const char *tok = tu_shared_file("models/tok512.bin");
    size_t n;
    uint8_t *b = tu_slurp(bin, &n);
    int32_t v;

    /* unshared classifier: vocab < 0 and wcls appended */
    uint8_t *u = malloc(n + 512 * 64 * 4);
    memcpy(u, b, n);
    v = -512;
    memcpy(u + 20, &v, 4);
    float *wcls = (float *)(void *)(u + n);
    for (int i = 0; i < 512 * 64; i++)
        wcls[i] = (float)i * 0.001f;
    tu_spit(tu_tmp("unshared.bin"), u, n + 512 * 64 * 4);
    fmt_src *s = open_ok(tu_tmp("unshared.bin"), tok);
    assert_int_equal(fmt_src_hparams(s)->flags & FMT_FLAG_TIED, 0);
    assert_int_equal(fmt_src_hparams(s)->vocab_size, 512);
    const fmt_tensor *o = fmt_src_tensor(s, FMT_R_OUTPUT, 0);
    assert_non_null(o);
    assert_int_equal(o->ne[0], 64);
    assert_int_equal(o->ne[1], 512);
    assert_memory_equal(o->data, wcls, 512 * 64 * 4);
    fmt_src_close(s);
    /* the same header without wcls: size mismatch */
    tu_spit(tu_tmp("unshared-short.bin"), u, n);
    open_fails(tu_tmp("unshared-short.bin"), tok, FMT_EFORMAT,
               "unshared-short.bin");
    free(u);

    /* truncated, one float too many */
    tu_spit(tu_tmp("trunc.bin"), b, n - 4);
    open_fails(tu_tmp("trunc.bin"), tok, FMT_EFORMAT, "implies");
    uint8_t *big = calloc(1, n + 4);
    memcpy(big, b, n);
    tu_spit(tu_tmp("long.bin"), big, n + 4);
    open_fails(tu_tmp("long.bin"), tok, FMT_EFORMAT, "long.bin");
    free(big);
    /* implausible headers are not recognised at all */
    int32_t bad[][2] = { { 3, 0 }, { 4, 3 }, { 3, 7 }, { 0, -5 },
                         { 2, 0 }, { 6, 1 << 30 } };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint8_t *c = malloc(n);
        memcpy(c, b, n);
        memcpy(c + 4 * bad[i][0], &bad[i][1], 4);
        tu_spit(tu_tmp("bad.bin"), c, n);
        open_fails(tu_tmp("bad.bin"), tok, FMT_EFORMAT, "bad.bin");
        free(c);
    }
    /* a plausible header with other numbers: the size gives it away */
    uint8_t *c = malloc(n);
    memcpy(c, b, n);
    v = 6;
    memcpy(c + 8, &v, 4);
    tu_spit(tu_tmp("layers.bin"), c, n);
    open_fails(tu_tmp("layers.bin"), tok, FMT_EFORMAT, "implies");
    /* newer export versions */
    memcpy(c, "ak42", 4);
    tu_spit(tu_tmp("v1.bin"), c, n);
    open_fails(tu_tmp("v1.bin"), tok, FMT_EUNSUP, "v1.bin");
    free(c);
    /* a tokenizer with fewer tokens than the vocabulary */
    size_t tn;
    uint8_t *t = tu_slurp(tok, &tn);
    tu_spit(tu_tmp("tok-short.bin"), t, tn / 2);
    fmt_src *s2 = NULL;
    char err[512];
    assert_true(fmt_src_open(&s2, bin, tu_tmp("tok-short.bin"), err,
                             sizeof err) < 0);
    assert_null(s2);
    free(t);
    /* a missing path */
    open_fails(tu_tmp("nonexistent.bin"), tok, FMT_EIO, "nonexistent.bin");
    free(b);
}

/* ---- GGUF --------------------------------------------------------------- */
static void test_gguf_shared(void **state)
{
    (void)state;
    const char *files[] = { "models/stories260K-f32.gguf",
                            "models/stories260K-f16.gguf",
                            "models/stories260K-q8_0.gguf",
                            "models/stories260K-q4_0.gguf" };
    for (size_t i = 0; i < 4; i++) {
        const char *p = tu_shared_file(files[i]);
        fmt_src *s = open_ok(p, NULL);
        const fmt_hparams *h = fmt_src_hparams(s);
        assert_string_equal(h->arch, "llama");
        assert_int_equal(h->n_layers, 5);
        assert_int_equal(h->dim, 64);
        assert_int_equal(h->vocab_size, 512);
        assert_int_equal(h->head_dim, 8);
        assert_int_equal(h->n_kv_heads, 4);
        assert_int_equal(h->max_seq, 128);  /* what the converter wrote */
        assert_int_equal(h->flags & (FMT_FLAG_TIED | FMT_FLAG_ROPE_NEOX |
                                     FMT_FLAG_QKV_BIAS |
                                     FMT_FLAG_ROPE_LLAMA3), 0);
        const fmt_tensor *t = fmt_src_tensor(s, FMT_R_DOWN, 4);
        assert_non_null(t);
        assert_string_equal(t->name, "blk.4.ffn_down.weight");
        assert_int_equal(t->ne[0], 172);
        t = fmt_src_tensor(s, FMT_R_OUT_NORM, 3);  /* layer ignored */
        assert_string_equal(t->name, "output_norm.weight");
        assert_int_equal(fmt_kv_arr_len(fmt_src_kv(s),
                                        "tokenizer.ggml.tokens"), 512);
        fmt_src_close(s);
    }
    const char *p = tu_shared_file("models/llama-2-tiny-random.gguf");
    fmt_src *s = open_ok(p, NULL);
    const fmt_hparams *h = fmt_src_hparams(s);
    assert_int_equal(h->dim, 8);
    assert_int_equal(h->n_heads, 2);
    assert_int_equal(h->head_dim, 4);
    assert_int_equal(h->vocab_size, 32000);
    assert_int_equal(h->ffn_dim, 32);
    fmt_src_close(s);
    /* vocabulary-only GGUFs: wrong architecture, or no tensors */
    p = tu_shared_file("tokenizer-tests/ggml-vocab-gpt-2.gguf");
    open_fails(p, NULL, FMT_EUNSUP, "gpt2");
    p = tu_shared_file("tokenizer-tests/ggml-vocab-llama-spm.gguf");
    open_fails(p, NULL, FMT_EFORMAT, "token_embd.weight");
    p = tu_shared_file("models/tok512.bin");
    open_fails(p, NULL, FMT_EFORMAT, "tok512.bin");
}

/* A GGUF writer for the variants below. */
typedef struct gt {
    char        name[64];
    int         dtype;
    unsigned    ndim;
    uint64_t    ne[4];
    const void *data;
    uint64_t    nbytes;
} gt;

typedef struct gsrc {
    fmt_kv *kv;
    gt      t[256];
    size_t  nt;
    fmt_gguf *base;
    void   *owned[64];
    size_t  nowned;
} gsrc;

static void gs_load(gsrc *g)
{
    memset(g, 0, sizeof *g);
    const char *p = tu_shared_file("models/stories260K-f32.gguf");
    char err[256];
    assert_int_equal(fmt_gguf_open(&g->base, p, err, sizeof err), 0);
    const fmt_kv *kv = fmt_gguf_kv(g->base);
    g->kv = fmt_kv_new();
    for (size_t i = 0; i < fmt_kv_count(kv); i++) {
        size_t l;
        const char *k = fmt_kv_key(kv, i, &l);
        char key[128];
        memcpy(key, k, l);
        key[l] = 0;
        assert_int_equal(fmt_kv_copy(g->kv, kv, key), 0);
    }
    for (uint64_t i = 0; i < fmt_gguf_n_tensors(g->base); i++) {
        const fmt_tensor *t = fmt_gguf_tensor(g->base, i);
        gt *d = &g->t[g->nt++];
        snprintf(d->name, sizeof d->name, "%s", t->name);
        d->dtype = t->dtype;
        d->ndim = t->ndim;
        memcpy(d->ne, t->ne, sizeof d->ne);
        d->data = t->data;
        d->nbytes = t->nbytes;
    }
}

static void gs_free(gsrc *g)
{
    fmt_kv_free(g->kv);
    fmt_gguf_close(g->base);
    for (size_t i = 0; i < g->nowned; i++)
        free(g->owned[i]);
}

static gt *gs_find(gsrc *g, const char *name)
{
    size_t i = 0;
    while (i < g->nt && strcmp(g->t[i].name, name) != 0)
        i++;
    if (i == g->nt)
        fail_msg("no tensor %s", name);
    return &g->t[i < g->nt ? i : 0];
}

static void gs_drop(gsrc *g, const char *name)
{
    gt *t = gs_find(g, name);
    size_t i = (size_t)(t - g->t);
    memmove(&g->t[i], &g->t[i + 1], (g->nt - i - 1) * sizeof *t);
    g->nt--;
}

static gt *gs_add_f32(gsrc *g, const char *name, unsigned ndim,
                      const uint64_t *ne, const float *v)
{
    gt *t = &g->t[g->nt++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = FMT_DT_F32;
    t->ndim = ndim;
    uint64_t n = 1;
    for (unsigned d = 0; d < 4; d++) {
        t->ne[d] = d < ndim ? ne[d] : 1;
        n *= t->ne[d];
    }
    float *c = calloc(n, sizeof *c);
    if (v)
        memcpy(c, v, n * sizeof *c);
    g->owned[g->nowned++] = c;
    t->data = c;
    t->nbytes = n * 4;
    return t;
}

/* Rename every "llama." key to "<arch>." and set general.architecture. */
static void gs_arch(gsrc *g, const char *arch)
{
    fmt_kv *kv = fmt_kv_new();
    for (size_t i = 0; i < fmt_kv_count(g->kv); i++) {
        size_t l;
        const char *k = fmt_kv_key(g->kv, i, &l);
        char key[128], nk[160];
        memcpy(key, k, l);
        key[l] = 0;
        if (strncmp(key, "llama.", 6) != 0) {
            fmt_kv_copy(kv, g->kv, key);
            continue;
        }
        snprintf(nk, sizeof nk, "%s.%s", arch, key + 6);
        int t = fmt_kv_type_of(g->kv, key, NULL);
        if (t == FMT_KV_F32) {
            float f;
            fmt_kv_get_f32(g->kv, key, &f);
            fmt_kv_set_f32(kv, nk, f);
        } else {
            uint32_t u;
            assert_int_equal(fmt_kv_get_u32(g->kv, key, &u), 0);
            fmt_kv_set_u32(kv, nk, u);
        }
    }
    fmt_kv_set_str(kv, "general.architecture", arch, strlen(arch));
    fmt_kv_free(g->kv);
    g->kv = kv;
}

static void gs_write(gsrc *g, const char *path)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint32_t ver = 3;
    uint64_t nt = g->nt, nkv = fmt_kv_count(g->kv);
    fwrite("GGUF", 1, 4, f);
    fwrite(&ver, 4, 1, f);
    fwrite(&nt, 8, 1, f);
    fwrite(&nkv, 8, 1, f);
    size_t kn = fmt_kv_write(g->kv, NULL);
    uint8_t *kb = malloc(kn);
    fmt_kv_write(g->kv, kb);
    fwrite(kb, 1, kn, f);
    free(kb);
    uint64_t off = 0;
    for (size_t i = 0; i < g->nt; i++) {
        gt *t = &g->t[i];
        uint64_t l = strlen(t->name);
        uint32_t nd = t->ndim, ty = (uint32_t)t->dtype;
        fwrite(&l, 8, 1, f);
        fwrite(t->name, 1, l, f);
        fwrite(&nd, 4, 1, f);
        fwrite(t->ne, 8, nd, f);
        fwrite(&ty, 4, 1, f);
        fwrite(&off, 8, 1, f);
        off += (t->nbytes + 31) / 32 * 32;
    }
    long pos = ftell(f);
    static const uint8_t zero[32];
    fwrite(zero, 1, (size_t)((32 - pos % 32) % 32), f);
    for (size_t i = 0; i < g->nt; i++) {
        gt *t = &g->t[i];
        fwrite(t->data, 1, t->nbytes, f);
        fwrite(zero, 1, (size_t)((32 - t->nbytes % 32) % 32), f);
    }
    assert_int_equal(fclose(f), 0);
}

static void test_gguf_written(void **state)
{
    (void)state;
    gsrc g;
    char name[64];

    /* the unchanged copy opens like the original */
    gs_load(&g);
    gs_write(&g, tu_tmp("same.gguf"));
    fmt_src *s = open_ok(tu_tmp("same.gguf"), NULL);
    assert_int_equal(fmt_src_hparams(s)->n_layers, 5);
    fmt_src_close(s);
    gs_free(&g);

    /* qwen2 with Q/K/V biases and no output head */
    gs_load(&g);
    gs_arch(&g, "qwen2");
    gs_drop(&g, "output.weight");
    float bias[64];
    for (int i = 0; i < 64; i++)
        bias[i] = (float)i - 20.5f;
    for (unsigned l = 0; l < 5; l++) {
        uint64_t ne = 64;
        snprintf(name, sizeof name, "blk.%u.attn_q.bias", l);
        gs_add_f32(&g, name, 1, &ne, bias);
        ne = 32;
        snprintf(name, sizeof name, "blk.%u.attn_k.bias", l);
        gs_add_f32(&g, name, 1, &ne, bias + 1);
        snprintf(name, sizeof name, "blk.%u.attn_v.bias", l);
        gs_add_f32(&g, name, 1, &ne, bias + 2);
    }
    gs_write(&g, tu_tmp("qwen2.gguf"));
    s = open_ok(tu_tmp("qwen2.gguf"), NULL);
    const fmt_hparams *h = fmt_src_hparams(s);
    assert_string_equal(h->arch, "qwen2");
    assert_int_equal(h->flags & (FMT_FLAG_ROPE_NEOX | FMT_FLAG_QKV_BIAS |
                                 FMT_FLAG_TIED),
                     FMT_FLAG_ROPE_NEOX | FMT_FLAG_QKV_BIAS | FMT_FLAG_TIED);
    assert_null(fmt_src_tensor(s, FMT_R_OUTPUT, 0));
    const fmt_tensor *t = fmt_src_tensor(s, FMT_R_K_BIAS, 3);
    assert_non_null(t);
    assert_int_equal(t->ne[0], 32);
    assert_memory_equal(t->data, bias + 1, 32 * 4);
    fmt_src_close(s);
    /* ...with one bias missing */
    gs_drop(&g, "blk.2.attn_v.bias");
    gs_write(&g, tu_tmp("qwen2-nobias.gguf"));
    open_fails(tu_tmp("qwen2-nobias.gguf"), NULL, FMT_EFORMAT,
               "blk.2.attn_v.bias");
    gs_free(&g);

    /* a missing tensor, a misshapen one, a short vocabulary */
    gs_load(&g);
    gs_drop(&g, "blk.3.ffn_up.weight");
    gs_write(&g, tu_tmp("missing.gguf"));
    open_fails(tu_tmp("missing.gguf"), NULL, FMT_EFORMAT, "blk.3.ffn_up.weight");
    open_fails(tu_tmp("missing.gguf"), NULL, FMT_EFORMAT, "missing.gguf");
    gs_free(&g);
    gs_load(&g);
    {
        /* layer 2's K with Q's shape and data */
        gt *k = gs_find(&g, "blk.2.attn_k.weight");
        const gt *q = gs_find(&g, "blk.2.attn_q.weight");
        memcpy(k->ne, q->ne, sizeof k->ne);
        k->data = q->data;
        k->nbytes = q->nbytes;
    }
    gs_write(&g, tu_tmp("shape.gguf"));
    open_fails(tu_tmp("shape.gguf"), NULL, FMT_EFORMAT, "blk.2.attn_k.weight");
    gs_free(&g);
    gs_load(&g);
    {
        const char *toks[500];
        size_t lens[500];
        for (int i = 0; i < 500; i++)
            toks[i] = fmt_kv_arr_str(g.kv, "tokenizer.ggml.tokens",
                                     (uint64_t)i, &lens[i]);
        fmt_kv *kv2 = fmt_kv_new();
        fmt_kv_set_arr_str(kv2, "tokenizer.ggml.tokens", toks, lens, 500);
        fmt_kv_copy(g.kv, kv2, "tokenizer.ggml.tokens");
        fmt_kv_free(kv2);
    }
    gs_write(&g, tu_tmp("shortvocab.gguf"));
    open_fails(tu_tmp("shortvocab.gguf"), NULL, FMT_EFORMAT, "500 tokens");
    gs_free(&g);

    /* absurd geometry */
    struct { const char *key; uint32_t v; int rc; const char *msg; } geo[] = {
        { "llama.block_count", 0, FMT_EFORMAT, "layer" },
        { "llama.block_count", 6, FMT_EFORMAT, "blk.5." },
        { "llama.block_count", 100000, FMT_EFORMAT, "layer" },
        { "llama.attention.head_count", 7, FMT_EFORMAT, "heads" },
        { "llama.attention.head_count", 0, FMT_EFORMAT, "head" },
        { "llama.attention.head_count_kv", 3, FMT_EFORMAT, "KV head" },
        { "llama.attention.head_count_kv", 16, FMT_EFORMAT, "KV head" },
        { "llama.embedding_length", 65, FMT_EFORMAT, "heads" },
        { "llama.embedding_length", 128, FMT_EUNSUP, "8 of 16" },
        { "llama.feed_forward_length", 171, FMT_EFORMAT, "ffn_gate" },
        { "llama.context_length", 0, FMT_EFORMAT, "context" },
        { "llama.rope.dimension_count", 4, FMT_EUNSUP, "RoPE" },
        { "llama.attention.value_length", 4, FMT_EUNSUP, "value length" },
        { "llama.attention.key_length", 16, FMT_EUNSUP, "8 of 16" },
        { "llama.vocab_size", 511, FMT_EFORMAT, "vocab_size" },
    };
    for (size_t i = 0; i < sizeof geo / sizeof geo[0]; i++) {
        gs_load(&g);
        fmt_kv_set_u32(g.kv, geo[i].key, geo[i].v);
        gs_write(&g, tu_tmp("geo.gguf"));
        open_fails(tu_tmp("geo.gguf"), NULL, geo[i].rc, geo[i].msg);
        gs_free(&g);
    }
    /* a geometry consistent in itself that the tensors contradict */
    gs_load(&g);
    fmt_kv_set_u32(g.kv, "llama.embedding_length", 128);
    fmt_kv_set_u32(g.kv, "llama.rope.dimension_count", 16);
    gs_write(&g, tu_tmp("dim.gguf"));
    open_fails(tu_tmp("dim.gguf"), NULL, FMT_EFORMAT, "token_embd.weight");
    gs_free(&g);
    gs_load(&g);
    fmt_kv_set_f32(g.kv, "llama.attention.layer_norm_rms_epsilon", 0.0f);
    gs_write(&g, tu_tmp("eps.gguf"));
    open_fails(tu_tmp("eps.gguf"), NULL, FMT_EFORMAT, "epsilon");
    fmt_kv_set_str(g.kv, "llama.block_count", "five", 4);
    gs_write(&g, tu_tmp("str.gguf"));
    open_fails(tu_tmp("str.gguf"), NULL, FMT_EFORMAT, "llama.block_count");
    gs_free(&g);
    /* RoPE base and epsilon are read */
    gs_load(&g);
    fmt_kv_set_f32(g.kv, "llama.rope.freq_base", 500000.0f);
    fmt_kv_set_f32(g.kv, "llama.attention.layer_norm_rms_epsilon", 1e-6f);
    gs_write(&g, tu_tmp("theta.gguf"));
    s = open_ok(tu_tmp("theta.gguf"), NULL);
    assert_true(fmt_src_hparams(s)->rope_theta == 500000.0f);
    assert_true(fmt_src_hparams(s)->norm_eps == 1e-6f);
    fmt_src_close(s);
    gs_free(&g);
}

/* Llama-3 factors the way convert_hf_to_gguf.py computes them. */
static void l3_factors(float theta, unsigned hd, float factor, float low,
                       float high, float ctx, float *out)
{
    for (unsigned i = 0; i < hd / 2; i++) {
        float freq = 1.0f / powf(theta, (float)(2 * i) / (float)hd);
        double wl = 2 * M_PI / freq;
        if (wl < ctx / high)
            out[i] = 1;
        else if (wl > ctx / low)
            out[i] = factor;
        else {
            double sm = (ctx / wl - low) / (high - low);
            out[i] = (float)(1 / ((1 - sm) / factor + sm));
        }
    }
}

static void test_gguf_rope(void **state)
{
    (void)state;
    gsrc g;
    float f[4];
    uint64_t ne = 4;
    /* rope_freqs.weight alone (what llama.cpp writes for Llama 3.x) */
    gs_load(&g);
    l3_factors(10000.0f, 8, 8.0f, 1.0f, 4.0f, 8192.0f, f);
    assert_true(f[0] == 1.0f && f[3] > 1.0f && f[3] < 8.0f);
    gs_add_f32(&g, "rope_freqs.weight", 1, &ne, f);
    gs_write(&g, tu_tmp("l3.gguf"));
    fmt_src *s = open_ok(tu_tmp("l3.gguf"), NULL);
    const fmt_hparams *h = fmt_src_hparams(s);
    assert_true(h->flags & FMT_FLAG_ROPE_LLAMA3);
    assert_true(fabsf(h->rope_factor - 8.0f) < 1e-3f);
    assert_true(h->rope_low_freq == 1.0f && h->rope_high_freq == 4.0f);
    assert_int_equal(h->rope_orig_ctx, 8192);
    fmt_src_close(s);
    /* keys take precedence and must agree with the tensor */
    fmt_kv_set_f32(g.kv, "llama.rope.scaling.factor", 8.0f);
    fmt_kv_set_u32(g.kv, "llama.rope.scaling.original_context_length", 8192);
    gs_write(&g, tu_tmp("l3k.gguf"));
    s = open_ok(tu_tmp("l3k.gguf"), NULL);
    assert_true(fmt_src_hparams(s)->rope_factor == 8.0f);
    fmt_src_close(s);
    fmt_kv_set_u32(g.kv, "llama.rope.scaling.original_context_length", 4096);
    gs_write(&g, tu_tmp("l3bad.gguf"));
    open_fails(tu_tmp("l3bad.gguf"), NULL, FMT_EUNSUP, "rope_freqs");
    gs_free(&g);
    /* factors that are not Llama-3 scaling */
    gs_load(&g);
    float junk[4] = { 2, 2, 2, 2 };
    gs_add_f32(&g, "rope_freqs.weight", 1, &ne, junk);
    gs_write(&g, tu_tmp("junk.gguf"));
    open_fails(tu_tmp("junk.gguf"), NULL, FMT_EUNSUP, "rope_freqs");
    gs_free(&g);
    /* by keys only */
    gs_load(&g);
    fmt_kv_set_str(g.kv, "llama.rope.scaling.type", "llama3", 6);
    fmt_kv_set_f32(g.kv, "llama.rope.scaling.factor", 32.0f);
    fmt_kv_set_u32(g.kv, "llama.rope.scaling.original_context_length", 4096);
    gs_write(&g, tu_tmp("l3keys.gguf"));
    s = open_ok(tu_tmp("l3keys.gguf"), NULL);
    h = fmt_src_hparams(s);
    assert_true(h->flags & FMT_FLAG_ROPE_LLAMA3);
    assert_true(h->rope_factor == 32.0f);
    assert_true(h->rope_low_freq == 1.0f && h->rope_high_freq == 4.0f);
    assert_int_equal(h->rope_orig_ctx, 4096);
    fmt_src_close(s);
    fmt_kv_set_str(g.kv, "llama.rope.scaling.type", "yarn", 4);
    gs_write(&g, tu_tmp("yarn.gguf"));
    open_fails(tu_tmp("yarn.gguf"), NULL, FMT_EUNSUP, "yarn");
    fmt_kv_set_str(g.kv, "llama.rope.scaling.type", "none", 4);
    gs_write(&g, tu_tmp("none.gguf"));
    s = open_ok(tu_tmp("none.gguf"), NULL);
    assert_int_equal(fmt_src_hparams(s)->flags & FMT_FLAG_ROPE_LLAMA3, 0);
    fmt_src_close(s);
    gs_free(&g);
}

static void test_gguf_moe(void **state)
{
    (void)state;
    gsrc g;
    char name[64];
    gs_load(&g);
    fmt_kv_set_u32(g.kv, "llama.expert_count", 4);
    fmt_kv_set_u32(g.kv, "llama.expert_used_count", 2);
    for (unsigned l = 0; l < 5; l++) {
        static const char *dense[] = { "ffn_gate", "ffn_up", "ffn_down" };
        for (int k = 0; k < 3; k++) {
            snprintf(name, sizeof name, "blk.%u.%s.weight", l, dense[k]);
            gs_drop(&g, name);
        }
        uint64_t r[2] = { 64, 4 }, gu[3] = { 64, 172, 4 }, dn[3] = { 172, 64, 4 };
        snprintf(name, sizeof name, "blk.%u.ffn_gate_inp.weight", l);
        gs_add_f32(&g, name, 2, r, NULL);
        snprintf(name, sizeof name, "blk.%u.ffn_gate_exps.weight", l);
        gs_add_f32(&g, name, 3, gu, NULL);
        snprintf(name, sizeof name, "blk.%u.ffn_up_exps.weight", l);
        gs_add_f32(&g, name, 3, gu, NULL);
        snprintf(name, sizeof name, "blk.%u.ffn_down_exps.weight", l);
        gs_add_f32(&g, name, 3, dn, NULL);
    }
    gs_write(&g, tu_tmp("moe.gguf"));
    fmt_src *s = open_ok(tu_tmp("moe.gguf"), NULL);
    const fmt_hparams *h = fmt_src_hparams(s);
    assert_int_equal(h->n_experts, 4);
    assert_int_equal(h->top_k, 2);
    assert_int_equal(h->expert_ffn_dim, 172);
    assert_null(fmt_src_tensor(s, FMT_R_GATE, 0));
    const fmt_tensor *t = fmt_src_tensor(s, FMT_R_EXP_DOWN, 4);
    assert_non_null(t);
    assert_int_equal(t->ne[0], 172);
    assert_int_equal(t->ne[2], 4);
    assert_non_null(fmt_src_tensor(s, FMT_R_ROUTER, 2));
    fmt_src_close(s);
    /* top_k above the expert count */
    fmt_kv_set_u32(g.kv, "llama.expert_used_count", 5);
    gs_write(&g, tu_tmp("moe-bad.gguf"));
    open_fails(tu_tmp("moe-bad.gguf"), NULL, FMT_EFORMAT, "expert");
    gs_free(&g);
}

/* ---- Hugging Face directories ------------------------------------------ */
typedef struct st_ent {
    char        name[96];
    const char *dtype;      /* "F32", "BF16", "I64", ... */
    unsigned    nd;
    uint64_t    shape[3];
    uint8_t    *data;
    size_t      nbytes;
} st_ent;

typedef struct hfopt {
    int         qwen;         /* Qwen2ForCausalLM with biases */
    int         bf16;         /* matrices in BF16 (norms stay F32) */
    int         lm_head;      /* write lm_head.weight, tie false */
    int         shards;       /* 0: model.safetensors; 2: two shards */
    unsigned    vocab_pad;    /* extra embedding rows (zeros) */
    const char *drop;         /* tensor left out */
    const char *i64;          /* tensor stored as I64 (same bytes) */
    const char *cfg_extra;    /* raw JSON members added to config.json */
    const char *arch;         /* architectures[0] override */
    int         no_config_key;/* drop hidden_size */
} hfopt;

/* Meta (adjacent pairs) row -> HF (split halves) row, per head:
 * w.view(n_heads, hd/2, 2, dim).transpose(1, 2).reshape(rows, dim) puts
 * Meta row h*hd + 2i + p at HF row h*hd + p*hd/2 + i. */
static unsigned meta_row_of_hf(unsigned r, unsigned hd)
{
    unsigned h = r / hd, j = r % hd, p = j / (hd / 2), i = j % (hd / 2);
    return h * hd + 2 * i + p;
}

static void st_write(const char *path, st_ent *e, size_t n)
{
    size_t cap = 64 + n * 256, o = 0;
    char *hdr = malloc(cap);
    o += (size_t)snprintf(hdr + o, cap - o,
                          "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        o += (size_t)snprintf(hdr + o, cap - o,
                              ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", e[i].name,
                              e[i].dtype);
        for (unsigned d = 0; d < e[i].nd; d++)
            o += (size_t)snprintf(hdr + o, cap - o, "%s%llu", d ? "," : "",
                                  (unsigned long long)e[i].shape[d]);
        o += (size_t)snprintf(hdr + o, cap - o,
                              "],\"data_offsets\":[%llu,%llu]}",
                              (unsigned long long)off,
                              (unsigned long long)(off + e[i].nbytes));
        off += e[i].nbytes;
    }
    o += (size_t)snprintf(hdr + o, cap - o, "}");
    while (o % 8)
        hdr[o++] = ' ';
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t hl = o;
    fwrite(&hl, 8, 1, f);
    fwrite(hdr, 1, o, f);
    for (size_t i = 0; i < n; i++)
        fwrite(e[i].data, 1, e[i].nbytes, f);
    assert_int_equal(fclose(f), 0);
    free(hdr);
}

/* Build an HF directory at dir from the llama2.c source. */
static void make_hf(const char *dir, const fmt_src *l2c, const hfopt *op)
{
    const fmt_hparams *h = fmt_src_hparams(l2c);
    static const struct { int role; const char *pat; } map[] = {
        { FMT_R_ATTN_NORM, "model.layers.%u.input_layernorm.weight" },
        { FMT_R_Q, "model.layers.%u.self_attn.q_proj.weight" },
        { FMT_R_K, "model.layers.%u.self_attn.k_proj.weight" },
        { FMT_R_V, "model.layers.%u.self_attn.v_proj.weight" },
        { FMT_R_O, "model.layers.%u.self_attn.o_proj.weight" },
        { FMT_R_FFN_NORM, "model.layers.%u.post_attention_layernorm.weight" },
        { FMT_R_GATE, "model.layers.%u.mlp.gate_proj.weight" },
        { FMT_R_UP, "model.layers.%u.mlp.up_proj.weight" },
        { FMT_R_DOWN, "model.layers.%u.mlp.down_proj.weight" },
    };
    st_ent *e = calloc(256, sizeof *e);
    size_t n = 0;
    mkdir(dir, 0700);
    /* (role, layer) list: globals first */
    struct { int role; unsigned layer; char name[96]; } lst[128];
    size_t nl = 0;
    lst[nl].role = FMT_R_TOK_EMBD;
    snprintf(lst[nl++].name, 96, "model.embed_tokens.weight");
    for (unsigned l = 0; l < h->n_layers; l++)
        for (size_t k = 0; k < sizeof map / sizeof map[0]; k++) {
            lst[nl].role = map[k].role;
            lst[nl].layer = l;
            snprintf(lst[nl++].name, 96, map[k].pat, l);
        }
    lst[nl].role = FMT_R_OUT_NORM;
    snprintf(lst[nl++].name, 96, "model.norm.weight");
    if (op->lm_head) {
        lst[nl].role = FMT_R_OUTPUT;  /* the tied embedding, stored twice */
        snprintf(lst[nl++].name, 96, "lm_head.weight");
    }
    for (size_t i = 0; i < nl; i++) {
        if (op->drop && strcmp(op->drop, lst[i].name) == 0)
            continue;
        int role = lst[i].role == FMT_R_OUTPUT ? FMT_R_TOK_EMBD : lst[i].role;
        const fmt_tensor *t = fmt_src_tensor(l2c, role, lst[i].layer);
        assert_non_null(t);
        unsigned rows = (unsigned)t->ne[1], cols = (unsigned)t->ne[0];
        unsigned out_rows = rows;
        if (role == FMT_R_TOK_EMBD)
            out_rows += op->vocab_pad;
        st_ent *s = &e[n++];
        snprintf(s->name, sizeof s->name, "%s", lst[i].name);
        int is_mat = t->ndim == 2;
        int bf = op->bf16 && is_mat;
        s->dtype = op->i64 && strcmp(op->i64, s->name) == 0 ? "I64"
                   : bf ? "BF16" : "F32";
        s->nd = is_mat ? 2 : 1;
        s->shape[0] = is_mat ? out_rows : cols;
        s->shape[1] = cols;
        size_t es = bf ? 2 : 4;
        if (strcmp(s->dtype, "I64") == 0) /* 8-byte elements: half as many */
            s->shape[s->nd - 1] = cols / 2;
        s->nbytes = (size_t)out_rows * cols * es;
        s->data = calloc(1, s->nbytes);
        const float *src = t->data;
        unsigned hd = h->head_dim;
        for (unsigned r = 0; r < rows; r++) {
            unsigned sr = r;
            if (role == FMT_R_Q || role == FMT_R_K)
                sr = meta_row_of_hf(r, hd);
            for (unsigned c = 0; c < cols; c++) {
                float v;
                memcpy(&v, src + (size_t)sr * cols + c, 4);
                if (bf) {
                    uint16_t b = to_bf16(v);
                    memcpy(s->data + ((size_t)r * cols + c) * 2, &b, 2);
                } else {
                    memcpy(s->data + ((size_t)r * cols + c) * 4, &v, 4);
                }
            }
        }
    }
    if (op->qwen) {
        for (unsigned l = 0; l < h->n_layers; l++) {
            static const char *nm[] = { "q", "k", "v" };
            for (int k = 0; k < 3; k++) {
                st_ent *s = &e[n++];
                unsigned len = k == 0 ? h->n_heads * h->head_dim
                                      : h->n_kv_heads * h->head_dim;
                snprintf(s->name, sizeof s->name,
                         "model.layers.%u.self_attn.%s_proj.bias", l, nm[k]);
                s->dtype = "F32";
                s->nd = 1;
                s->shape[0] = len;
                s->nbytes = len * 4;
                s->data = malloc(s->nbytes);
                for (unsigned i = 0; i < len; i++) {
                    float v = (float)(l * 100 + (unsigned)k * 10) + (float)i;
                    memcpy(s->data + i * 4, &v, 4);
                }
            }
        }
    }
    char path[1024];
    if (op->shards == 0) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        st_write(path, e, n);
    } else {
        size_t half = n / 2;
        snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors",
                 dir);
        st_write(path, e, half);
        snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors",
                 dir);
        st_write(path, e + half, n - half);
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        FILE *f = fopen(path, "w");
        fprintf(f, "{\"metadata\":{\"total_size\":0},\"weight_map\":{");
        for (size_t i = 0; i < n; i++)
            fprintf(f, "%s\"%s\":\"model-0000%d-of-00002.safetensors\"",
                    i ? "," : "", e[i].name, i < half ? 1 : 2);
        fprintf(f, "}}\n");
        fclose(f);
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "{\n  \"architectures\": [\"%s\"],\n",
            op->arch ? op->arch
                     : op->qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM");
    if (!op->no_config_key)
        fprintf(f, "  \"hidden_size\": %u,\n", h->dim);
    fprintf(f, "  \"intermediate_size\": %u,\n  \"num_hidden_layers\": %u,\n"
               "  \"num_attention_heads\": %u,\n"
               "  \"num_key_value_heads\": %u,\n"
               "  \"max_position_embeddings\": %u,\n"
               "  \"vocab_size\": %u,\n  \"rms_norm_eps\": 1e-05,\n"
               "  \"rope_theta\": 10000.0,\n  \"hidden_act\": \"silu\",\n"
               "  \"rope_scaling\": null,\n"
               "  \"tie_word_embeddings\": %s%s%s\n}\n",
            h->ffn_dim, h->n_layers, h->n_heads, h->n_kv_heads, h->max_seq,
            h->vocab_size + op->vocab_pad, op->lm_head ? "false" : "true",
            op->cfg_extra ? ",\n" : "", op->cfg_extra ? op->cfg_extra : "");
    fclose(f);
    for (size_t i = 0; i < n; i++)
        free(e[i].data);
    free(e);
}

/* Compare every role of an HF source with the llama2.c one. */
static void check_hf(const fmt_src *hf, const fmt_src *l2c, int bf16)
{
    const fmt_hparams *a = fmt_src_hparams(hf), *b = fmt_src_hparams(l2c);
    assert_int_equal(a->n_layers, b->n_layers);
    assert_int_equal(a->dim, b->dim);
    assert_int_equal(a->ffn_dim, b->ffn_dim);
    assert_int_equal(a->n_heads, b->n_heads);
    assert_int_equal(a->n_kv_heads, b->n_kv_heads);
    assert_int_equal(a->head_dim, b->head_dim);
    assert_int_equal(a->max_seq, b->max_seq);
    assert_true(a->norm_eps == 1e-5f);
    assert_true(a->rope_theta == 10000.0f);
    assert_true(a->flags & FMT_FLAG_ROPE_NEOX);
    int n_checked = 0;
    for (int r = 0; r < FMT_NROLES; r++) {
        if (r == FMT_R_OUTPUT || r == FMT_R_Q_BIAS || r == FMT_R_K_BIAS ||
            r == FMT_R_V_BIAS)
            continue;
        for (unsigned l = 0; l < a->n_layers; l++) {
            const fmt_tensor *x = fmt_src_tensor(hf, r, l);
            const fmt_tensor *y = fmt_src_tensor(l2c, r, l);
            assert_true((x == NULL) == (y == NULL));
            if (!x)
                continue;
            assert_int_equal(x->ndim, y->ndim);
            assert_memory_equal(x->ne, y->ne, sizeof x->ne);
            assert_int_equal(x->dtype,
                             bf16 && x->ndim == 2 ? FMT_DT_BF16 : FMT_DT_F32);
            float *xv = deq(x), *yv = deq(y);
            unsigned rows = (unsigned)x->ne[1], cols = (unsigned)x->ne[0];
            for (unsigned i = 0; i < rows; i++) {
                unsigned si = (r == FMT_R_Q || r == FMT_R_K)
                              ? meta_row_of_hf(i, a->head_dim) : i;
                for (unsigned c = 0; c < cols; c++) {
                    float want = yv[(size_t)si * cols + c];
                    if (bf16 && x->ndim == 2)
                        want = bf16_round(want);
                    if (xv[(size_t)i * cols + c] != want)
                        fail_msg("%s[%u][%u]: %g != %g", x->name, i, c,
                                 xv[(size_t)i * cols + c], want);
                }
            }
            /* the permutation really moved rows of Q and K */
            if (r == FMT_R_Q && !bf16)
                assert_true(memcmp(x->data, y->data, x->nbytes) != 0);
            free(xv);
            free(yv);
            n_checked++;
        }
    }
    assert_true(n_checked >= 9 * 5);
}

static void test_hf(void **state)
{
    (void)state;
    const char *bin = tu_shared_file("models/stories260K.bin");
    const char *tok = tu_shared_file("models/tok512.bin");
    fmt_src *l2c = open_ok(bin, tok);

    /* BF16 matrices, tied, one file */
    hfopt o1 = { .bf16 = 1 };
    make_hf(tu_tmp("hf-bf16"), l2c, &o1);
    fmt_src *s = open_ok(tu_tmp("hf-bf16"), tok);
    assert_string_equal(fmt_src_kind(s), "hf");
    assert_string_equal(fmt_src_hparams(s)->arch, "llama");
    assert_true(fmt_src_hparams(s)->flags & FMT_FLAG_TIED);
    assert_null(fmt_src_tensor(s, FMT_R_OUTPUT, 0));
    assert_int_equal(fmt_src_hparams(s)->vocab_size, 512);
    check_hf(s, l2c, 1);
    size_t len;
    const char *nm = fmt_kv_get_str(fmt_src_kv(s), "general.architecture",
                                    &len);
    assert_non_null(nm);
    assert_int_equal(fmt_kv_arr_len(fmt_src_kv(s), "tokenizer.ggml.tokens"),
                     512);
    fmt_src_close(s);

    /* F32, separate lm_head, sharded over two files with an index */
    hfopt o2 = { .lm_head = 1, .shards = 2 };
    make_hf(tu_tmp("hf-shards"), l2c, &o2);
    s = open_ok(tu_tmp("hf-shards"), tok);
    assert_int_equal(fmt_src_hparams(s)->flags & FMT_FLAG_TIED, 0);
    const fmt_tensor *out = fmt_src_tensor(s, FMT_R_OUTPUT, 0);
    assert_non_null(out);
    assert_string_equal(out->name, "lm_head.weight");
    check_hf(s, l2c, 0);
    fmt_src_close(s);
    /* the same with tie_word_embeddings true: the head is ignored */
    hfopt o2b = { .lm_head = 1, .cfg_extra = "\"tie_word_embeddings\": true" };
    make_hf(tu_tmp("hf-tie"), l2c, &o2b);
    s = open_ok(tu_tmp("hf-tie"), tok);
    assert_true(fmt_src_hparams(s)->flags & FMT_FLAG_TIED);
    assert_null(fmt_src_tensor(s, FMT_R_OUTPUT, 0));
    fmt_src_close(s);

    /* Qwen2 with biases */
    hfopt o3 = { .qwen = 1, .bf16 = 1 };
    make_hf(tu_tmp("hf-qwen"), l2c, &o3);
    s = open_ok(tu_tmp("hf-qwen"), tok);
    const fmt_hparams *h = fmt_src_hparams(s);
    assert_string_equal(h->arch, "qwen2");
    assert_true(h->flags & FMT_FLAG_QKV_BIAS);
    check_hf(s, l2c, 1);
    const fmt_tensor *vb = fmt_src_tensor(s, FMT_R_V_BIAS, 3);
    assert_non_null(vb);
    assert_int_equal(vb->ne[0], 32);
    float v0;
    memcpy(&v0, vb->data, 4);
    assert_true(v0 == 320.0f);
    fmt_src_close(s);

    /* an embedding larger than the tokenizer: padded like llama.cpp */
    hfopt o4 = { .vocab_pad = 8 };
    make_hf(tu_tmp("hf-pad"), l2c, &o4);
    s = open_ok(tu_tmp("hf-pad"), tok);
    assert_int_equal(fmt_src_hparams(s)->vocab_size, 520);
    const fmt_kv *kv = fmt_src_kv(s);
    assert_int_equal(fmt_kv_arr_len(kv, "tokenizer.ggml.tokens"), 520);
    const char *pad = fmt_kv_arr_str(kv, "tokenizer.ggml.tokens", 515, &len);
    assert_int_equal(len, 8);
    assert_memory_equal(pad, "[PAD515]", 8);
    if (fmt_kv_arr_len(kv, "tokenizer.ggml.scores"))
        assert_int_equal(fmt_kv_arr_len(kv, "tokenizer.ggml.scores"), 520);
    fmt_src_close(s);

    /* Llama-3 RoPE scaling from config.json */
    hfopt o5 = { .cfg_extra = "\"rope_scaling\": {\"rope_type\": \"llama3\", "
                              "\"factor\": 32.0, \"low_freq_factor\": 1.0, "
                              "\"high_freq_factor\": 4.0, "
                              "\"original_max_position_embeddings\": 8192}" };
    make_hf(tu_tmp("hf-l3"), l2c, &o5);
    s = open_ok(tu_tmp("hf-l3"), tok);
    h = fmt_src_hparams(s);
    assert_true(h->flags & FMT_FLAG_ROPE_LLAMA3);
    assert_true(h->rope_factor == 32.0f);
    assert_true(h->rope_high_freq == 4.0f);
    assert_int_equal(h->rope_orig_ctx, 8192);
    fmt_src_close(s);

    /* failures */
    struct { const char *dir; hfopt o; int rc; const char *msg; } bad[] = {
        { "hf-drop", { .drop = "model.layers.1.mlp.up_proj.weight" },
          FMT_EFORMAT, "model.layers.1.mlp.up_proj.weight" },
        { "hf-i64", { .i64 = "model.layers.2.self_attn.k_proj.weight" },
          FMT_EUNSUP, "model.layers.2.self_attn.k_proj.weight" },
        { "hf-arch", { .arch = "GPT2LMHeadModel" }, FMT_EUNSUP, "GPT2" },
        { "hf-nokey", { .no_config_key = 1 }, FMT_EFORMAT, "hidden_size" },
        { "hf-linear", { .cfg_extra = "\"rope_scaling\": {\"type\": "
                                      "\"linear\", \"factor\": 2.0}" },
          FMT_EUNSUP, "linear" },
        { "hf-act", { .cfg_extra = "\"hidden_act\": \"gelu\"" }, FMT_EUNSUP,
          "gelu" },
        { "hf-heads", { .cfg_extra = "\"num_key_value_heads\": 3" },
          FMT_EFORMAT, "KV head" },
        { "hf-type", { .cfg_extra = "\"num_hidden_layers\": \"5\"" },
          FMT_EFORMAT, "num_hidden_layers" },
        { "hf-shape", { .cfg_extra = "\"intermediate_size\": 171" },
          FMT_EFORMAT, "mlp.gate_proj" },
        { "hf-vocab", { .cfg_extra = "\"vocab_size\": 600" }, FMT_EFORMAT,
          "embed_tokens" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        make_hf(tu_tmp(bad[i].dir), l2c, &bad[i].o);
        /* the message names the folder or the file inside it */
        open_fails(tu_tmp(bad[i].dir), tok, bad[i].rc, bad[i].msg);
        open_fails(tu_tmp(bad[i].dir), tok, bad[i].rc, bad[i].dir);
    }
    fmt_src_close(l2c);
}

/* A safetensors file from a header text and DATA_N data bytes (zeros). */
static void spit_st(const char *path, const char *hdr, size_t data_n)
{
    size_t hl = strlen(hdr), n = 8 + hl + data_n;
    uint8_t *b = calloc(1, n);
    assert_non_null(b);
    uint64_t h64 = hl;
    memcpy(b, &h64, 8);
    memcpy(b + 8, hdr, hl);
    tu_spit(path, b, n);
    free(b);
}

/* Damaged safetensors headers and indexes. */
static void test_hf_damage(void **state)
{
    (void)state;
    const char *bin = tu_shared_file("models/stories260K.bin");
    const char *tok = tu_shared_file("models/tok512.bin");
    fmt_src *l2c = open_ok(bin, tok);
    hfopt o = { 0 };
    make_hf(tu_tmp("hf-base"), l2c, &o);
    char st[1024], cfg[1024];
    snprintf(st, sizeof st, "%s/model.safetensors", tu_tmp("hf-base"));
    snprintf(cfg, sizeof cfg, "%s/config.json", tu_tmp("hf-base"));
    size_t n, cn;
    uint8_t *orig = tu_slurp(st, &n);
    uint8_t *corig = tu_slurp(cfg, &cn);
    uint64_t hl;
    memcpy(&hl, orig, 8);
    uint8_t *b = malloc(n);

    /* header length: past the end, zero, huge */
    uint64_t lens[] = { n, n - 7, 0, UINT64_MAX, hl / 2 };
    for (size_t i = 0; i < 5; i++) {
        memcpy(b, orig, n);
        memcpy(b, &lens[i], 8);
        tu_spit(st, b, n);
        open_fails(tu_tmp("hf-base"), tok, FMT_EFORMAT, "model.safetensors");
    }
    /* truncations: inside the header, inside the data */
    size_t cuts[] = { 0, 4, 8, 8 + (size_t)hl / 2, 8 + (size_t)hl,
                      n - 1 };
    for (size_t i = 0; i < 6; i++) {
        tu_spit(st, orig, cuts[i]);
        open_fails(tu_tmp("hf-base"), tok, FMT_EFORMAT, "model.safetensors");
    }
    /* JSON damage: a byte at every 97th position of the header */
    int fails = 0, tries = 0;
    for (size_t pos = 8; pos < 8 + hl; pos += 97) {
        memcpy(b, orig, n);
        b[pos] = (b[pos] == '"') ? 'x' : '"';
        tu_spit(st, b, n);
        fmt_src *s = NULL;
        char err[512];
        int rc = fmt_src_open(&s, tu_tmp("hf-base"), tok, err, sizeof err);
        tries++;
        if (rc == FMT_OK)
            fmt_src_close(s);
        else {
            fails++;
            assert_null(strchr(err, '\n'));
        }
    }
    assert_true(fails > tries / 2);
    /* offsets and sizes that disagree (edit the digits in place) */
    const char *keys[] = { "\"data_offsets\":[0,", "\"shape\":[512," };
    for (int k = 0; k < 2; k++) {
        memcpy(b, orig, n);
        char *hp = (char *)b + 8;
        char *at = memmem(hp, hl, keys[k], strlen(keys[k]));
        assert_non_null(at);
        at += strlen(keys[k]);
        /* bump the first digit: a wrong end offset / a wrong row count */
        *at = *at == '9' ? '1' : (char)(*at + 1);
        tu_spit(st, b, n);
        open_fails(tu_tmp("hf-base"), tok, FMT_EFORMAT, "model.safetensors");
    }
    tu_spit(st, orig, n);
    fmt_src_close(open_ok(tu_tmp("hf-base"), tok));

    /* The tensors must tile the data (the specification; its reference
     * loader refuses the rest): bytes after the last tensor, ... */
    memcpy(b, orig, n);
    uint8_t *b2 = malloc(n + 4);
    memcpy(b2, orig, n);
    memset(b2 + n, 0, 4);
    tu_spit(st, b2, n + 4);
    free(b2);
    open_fails(tu_tmp("hf-base"), tok, FMT_EFORMAT, "cover");
    /* ... two tensors on the same bytes, a hole between two, one that
     * starts after 0 ... */
    const char *bad[] = {
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
        "{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
    };
    for (int i = 0; i < 4; i++) {
        spit_st(st, bad[i], 12);
        open_fails(tu_tmp("hf-base"), tok, FMT_EFORMAT, "data_offsets start at");
    }
    /* ... while an exact tiling in any key order, with an empty tensor on
     * a boundary, passes the check (and fails later, for the missing
     * weights the config asks for) */
    spit_st(st, "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},"
                "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]},"
                "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12);
    {
        fmt_src *s = NULL;
        char err[512] = "";
        int rc = fmt_src_open(&s, tu_tmp("hf-base"), tok, err, sizeof err);
        if (rc == FMT_OK)
            fmt_src_close(s);
        else if (strstr(err, "data_offsets") || strstr(err, "cover"))
            fail_msg("an exact tiling was refused: %s", err);
    }
    tu_spit(st, orig, n);

    /* config.json damage */
    tu_spit(cfg, corig, cn / 2);
    open_fails(tu_tmp("hf-base"), tok, FMT_EFORMAT, "config.json");
    tu_spit(cfg, "[1, 2]", 6);
    open_fails(tu_tmp("hf-base"), tok, FMT_EFORMAT, "config.json");
    tu_spit(cfg, corig, cn);
    /* no weights */
    unlink(st);
    open_fails(tu_tmp("hf-base"), tok, FMT_EFORMAT, "model.safetensors");

    /* index pointing outside the folder, or at a missing tensor */
    hfopt os = { .shards = 2 };
    make_hf(tu_tmp("hf-idx"), l2c, &os);
    char ix[1024];
    snprintf(ix, sizeof ix, "%s/model.safetensors.index.json", tu_tmp("hf-idx"));
    size_t in;
    uint8_t *iorig = tu_slurp(ix, &in);
    char *t = malloc(in + 256);
    memcpy(t, iorig, in);
    t[in] = 0;
    char *p = strstr(t, "model-00002-of-00002");
    assert_non_null(p);
    memcpy(p, "../", 3);
    tu_spit(ix, t, in);
    open_fails(tu_tmp("hf-idx"), tok, FMT_EFORMAT, "shard");
    snprintf(t, in + 256, "{\"weight_map\":{\"model.norm.weight\":"
             "\"model-00001-of-00002.safetensors\"}}");
    tu_spit(ix, t, strlen(t));
    open_fails(tu_tmp("hf-idx"), tok, FMT_EFORMAT, "model.norm.weight");
    snprintf(t, in + 256, "{\"weight_map\":{\"x\":"
             "\"missing.safetensors\"}}");
    tu_spit(ix, t, strlen(t));
    open_fails(tu_tmp("hf-idx"), tok, FMT_EIO, "missing.safetensors");
    snprintf(t, in + 256, "{\"weight_map\": 3}");
    tu_spit(ix, t, strlen(t));
    open_fails(tu_tmp("hf-idx"), tok, FMT_EFORMAT, "weight_map");
    tu_spit(ix, iorig, in);
    fmt_src_close(open_ok(tu_tmp("hf-idx"), tok));

    /* a pipeline config whose delays its combine style cannot take, or
     * that reach past the last layer: refused at open, as the .cflow
     * reader would refuse the converted file (fuzz regression
     * hf/convert-delays-on-parallel-sqrt2.a) */
#define PIPE "\"cflow_arch\": \"arch2_4_combined\", \"num_experts\": 0, "
    static const struct { const char *extra, *why; } pipe[] = {
        { PIPE "\"dense_delay\": 1, \"combine_style\": 0", "takes no delays" },
        { PIPE "\"expert_delay\": 1, \"combine_style\": 3", "takes no delays" },
        { PIPE "\"dense_delay\": 1, \"combine_style\": 2", "AsyncExperts takes no dense delay" },
        { PIPE "\"dense_delay\": 9, \"combine_style\": 1", "dense_delay 9 exceeds" },
        { PIPE "\"expert_delay\": 200, \"combine_style\": 1", "expert_delay 200 exceeds" },
    };
    for (size_t i = 0; i < sizeof pipe / sizeof pipe[0]; i++) {
        hfopt op = { .arch = "CflowPipelineForCausalLM", .cfg_extra = pipe[i].extra };
        make_hf(tu_tmp("hf-pipe"), l2c, &op);
        open_fails(tu_tmp("hf-pipe"), tok, FMT_EFORMAT, pipe[i].why);
    }
    hfopt okp = { .arch = "CflowPipelineForCausalLM",
                  .cfg_extra = PIPE "\"dense_delay\": 1, \"combine_style\": 1" };
#undef PIPE
    make_hf(tu_tmp("hf-pipe"), l2c, &okp);
    fmt_src_close(open_ok(tu_tmp("hf-pipe"), tok));
    free(t);
    free(iorig);
    free(b);
    free(orig);
    free(corig);
    fmt_src_close(l2c);
}

static void test_role_names(void **state)
{
    (void)state;
    assert_string_equal(fmt_role_name(FMT_R_TOK_EMBD), "token_embd");
    assert_string_equal(fmt_role_name(FMT_R_O), "attn_output");
    assert_string_equal(fmt_role_name(FMT_R_EXP_DOWN), "ffn_down_exps");
    assert_string_equal(fmt_role_name(FMT_NROLES), "unknown");
    assert_string_equal(fmt_role_name(-1), "unknown");
    for (int r = 0; r < FMT_NROLES; r++)
        assert_non_null(fmt_role_name(r));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_role_names),
        cmocka_unit_test(test_llama2c),
        cmocka_unit_test(test_llama2c_variants),
        cmocka_unit_test(test_gguf_shared),
        cmocka_unit_test(test_gguf_written),
        cmocka_unit_test(test_gguf_rope),
        cmocka_unit_test(test_gguf_moe),
        cmocka_unit_test(test_hf),
        cmocka_unit_test(test_hf_damage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
