/*
 * test_src.c — source models: GGUF and llama2.c checkpoints seen through
 * fmt_src (Hugging Face directories: test_src_hf.c).
 *
 *   - stories260K.bin (llama2.c, tokenizer tok512.bin): geometry, tied
 *     head, every role tensor identical to the F32 GGUF's;
 *   - the shared GGUFs; GGUFs this test writes from the F32 one with one
 *     change each (qwen2 with biases, missing or misshapen tensors, short
 *     vocabulary, Llama-3 RoPE scaling by tensor or keys, MoE tensors,
 *     absurd geometry).
 */
#include "config.h"

#include "src_test.h"

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

/* A qwen2 GGUF written from the stories model with Q/K/V biases and no
 * output head opens with its biases, tied; one bias missing is refused by
 * name. */
static void check_qwen2_biases(void)
{
    gsrc g;
    char name[64];
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
    fmt_src *s = open_ok(tu_tmp("qwen2.gguf"), NULL);
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
}

static void test_gguf_written(void **state)
{
    (void)state;
    gsrc g;

    /* the unchanged copy opens like the original */
    gs_load(&g);
    gs_write(&g, tu_tmp("same.gguf"));
    fmt_src *s = open_ok(tu_tmp("same.gguf"), NULL);
    assert_int_equal(fmt_src_hparams(s)->n_layers, 5);
    fmt_src_close(s);
    gs_free(&g);

    check_qwen2_biases();

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
    /* YaRN is read (gpt-oss's); a scaling cflow does not implement is
     * refused by its name */
    fmt_kv_set_str(g.kv, "llama.rope.scaling.type", "yarn", 4);
    gs_write(&g, tu_tmp("yarn.gguf"));
    s = open_ok(tu_tmp("yarn.gguf"), NULL);
    assert_int_equal(fmt_src_hparams(s)->rope_scaling, FMT_ROPE_YARN);
    assert_true(fmt_src_hparams(s)->rope_factor == 32.0f);
    assert_int_equal(fmt_src_hparams(s)->rope_orig_ctx, 4096);
    fmt_src_close(s);
    fmt_kv_set_str(g.kv, "llama.rope.scaling.type", "dynamic", 7);
    gs_write(&g, tu_tmp("dyn.gguf"));
    open_fails(tu_tmp("dyn.gguf"), NULL, FMT_EUNSUP, "'dynamic'");
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
