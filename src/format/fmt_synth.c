/*
 * fmt_synth.c — random-weight source models for named presets.
 *
 * `cflow synth` feeds these to the ordinary .cflow writer, so a synthetic
 * model goes through exactly the path a converted one does.  The report's
 * six pipeline-native architectures share its geometry (d 512, 6 layers, 8
 * heads, dense FFN 2048, 8 experts, top-2, expert FFN 512); only the header
 * fields that drive the schedule differ.  Weights are drawn from a seeded
 * generator (same seed, same file on every machine), roughly N(0, 0.02);
 * norms are 1.  The vocabulary is a small synthetic SentencePiece one (byte
 * fallback plus single characters) so the models can be run and tokenised.
 *
 * Tensors live in one anonymous mapping registered as the source's map, so
 * fmt_src_close releases them like any file-backed source.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "format/cflow_format.h"
#include "format/fmt_impl.h"

typedef struct preset {
    const char *name, *arch;
    unsigned    n_layers, dim, n_heads, n_kv, ffn, n_exp, top_k, exp_ffn, vocab;
    unsigned    dd, de, combine, merge, iters;
} preset;

static const preset presets[] = {
    { "report-arch1", "arch1", 6, 512, 8, 8, 2048, 8, 2, 512, 512, 0, 0,
      FMT_COMBINE_DECOUPLED, 3, 0 },
    { "report-arch2_4_combined", "arch2_4_combined", 6, 512, 8, 8, 2048, 8, 2, 512,
      512, 1, 2, FMT_COMBINE_DELAYED_SUM, 0, 0 },
    { "report-arch2_4_sync", "arch2_4_sync", 6, 512, 8, 8, 2048, 8, 2, 512, 512, 1,
      0, FMT_COMBINE_DELAYED_SUM, 0, 0 },
    { "report-arch3", "arch3", 6, 512, 8, 8, 2048, 8, 2, 512, 512, 0, 0,
      FMT_COMBINE_PIPELINE_REG, 0, 0 },
    { "report-arch4", "arch4", 6, 512, 8, 8, 2048, 8, 2, 512, 512, 0, 2,
      FMT_COMBINE_ASYNC_EXPERTS, 0, 0 },
    /* two unique blocks, each applied three times: effective depth 6 */
    { "report-arch5", "arch5", 2, 512, 8, 8, 2048, 8, 2, 512, 512, 0, 0,
      FMT_COMBINE_FIXED_POINT, 0, 3 },
    /* small versions for tests: same schedules, d 64 */
    { "tiny-moe", "arch2_4_combined", 4, 64, 4, 2, 128, 4, 2, 64, 512, 1, 2,
      FMT_COMBINE_DELAYED_SUM, 0, 0 },
    { "tiny-mixtral", "llama", 3, 64, 4, 2, 0, 4, 2, 96, 512, 0, 0,
      FMT_COMBINE_PARALLEL_SQRT2, 0, 0 },
    /* Gemma 4 26B-A4B as the report sizes it (chapters 2.5, 3.4, 6.2): 30
     * layers, d 2816, 25 sliding-window layers with B_attn = 4 d^2 (11
     * heads of 256, 11 KV heads) and 5 full-attention layers (every sixth:
     * head dim 512, K = V sharing, P-RoPE on a quarter of the dims at base
     * 1e6, no experts); a dense FFN of 2112 beside 128 experts of 704,
     * top-8, vocabulary 262144; under the report's 6.2 delays (dense 1,
     * expert 2).  Too large to synthesise (~26e9 weights): its critical
     * path comes from the geometry (fmt_synth_geometry). */
    { "gemma4-26b-a4b", "gemma4", 30, 2816, 11, 11, 2112, 128, 8, 704, 262144, 1, 2,
      FMT_COMBINE_DELAYED_SUM, 0, 0 },
    /* the same structure at d 256, small enough to run: 5 sliding layers
     * (4 heads of 64, window 16) and a full one (4 heads of 128, K = V),
     * 16 experts of 128, top-4, so that top-k expert bytes are 1.5x the
     * attention bytes as at full scale */
    { "gemma4-mini", "gemma4", 6, 256, 4, 4, 192, 16, 4, 128, 512, 1, 2,
      FMT_COMBINE_DELAYED_SUM, 0, 0 },
    /* one full-attention layer of gemma4-mini alone (tests: with one layer
     * a position's cache depends only on its token and position) */
    { "gemma4-mini-full1", "gemma4", 1, 256, 4, 4, 192, 16, 4, 128, 512, 0, 0,
      FMT_COMBINE_DELAYED_SUM, 0, 0 },
};

/* The Gemma-4 layer pattern of a preset: every `every`-th layer is a full-
 * attention layer of its own geometry; the others slide over `window`
 * positions with the header's. */
static const struct gemma_geom {
    const char *name;
    unsigned    every, window, full_heads, full_kv, full_hd, full_rope;
    float       full_theta;
} gemma_geoms[] = {
    { "gemma4-26b-a4b", 6, 1024, 11, 11, 512, 128, 1e6f },
    { "gemma4-mini", 6, 16, 4, 4, 128, 32, 1e6f },
    { "gemma4-mini-full1", 1, 16, 4, 4, 128, 32, 1e6f },
};

static const struct gemma_geom *gemma_of(const char *name)
{
    for (size_t i = 0; i < sizeof gemma_geoms / sizeof *gemma_geoms; i++)
        if (!strcmp(gemma_geoms[i].name, name))
            return &gemma_geoms[i];
    return NULL;
}

/* Per-layer geometry of a Gemma-4 preset into lg[n_layers]. */
static void gemma_layers(const struct gemma_geom *gg, const fmt_hparams *h,
                         fmt_layer_geom *lg)
{
    for (unsigned l = 0; l < h->n_layers; l++) {
        fmt_layer_geom *g = &lg[l];
        if ((l + 1) % gg->every == 0) {
            g->n_heads = gg->full_heads;
            g->n_kv_heads = gg->full_kv;
            g->head_dim = gg->full_hd;
            g->rope_dims = gg->full_rope;
            g->rope_theta = gg->full_theta;
            g->sliding_window = 0;
            g->flags = FMT_LG_KV_SHARED | FMT_LG_NO_EXPERTS;
        } else {
            g->n_heads = h->n_heads;
            g->n_kv_heads = h->n_kv_heads;
            g->head_dim = h->head_dim;
            g->rope_dims = h->head_dim;
            g->rope_theta = h->rope_theta;
            g->sliding_window = gg->window;
            g->flags = 0;
        }
    }
}

/* The hyper-parameters of preset p. */
static void preset_hparams(const preset *p, fmt_hparams *h)
{
    memset(h, 0, sizeof *h);
    snprintf(h->arch, sizeof h->arch, "%s", p->arch);
    h->n_layers = p->n_layers;
    h->dim = p->dim;
    h->n_heads = p->n_heads;
    h->n_kv_heads = p->n_kv;
    h->head_dim = p->dim / p->n_heads;
    h->ffn_dim = p->ffn;
    h->n_experts = p->n_exp;
    h->top_k = p->top_k;
    h->expert_ffn_dim = p->exp_ffn;
    h->vocab_size = p->vocab;
    h->max_seq = 2048;
    h->rope_theta = 10000.0f;
    h->norm_eps = 1e-5f;
    h->flags = FMT_FLAG_ROPE_NEOX | FMT_FLAG_TIED;
    h->dense_delay = (uint8_t)p->dd;
    h->expert_delay = (uint8_t)p->de;
    h->combine_style = (uint8_t)p->combine;
    h->merge_interval = p->merge;
    h->iterations = p->iters;
    const struct gemma_geom *gg = gemma_of(p->name);
    if (gg) {
        h->flags |= FMT_FLAG_LAYER_GEOM;
        h->sliding_window = gg->window;
        h->max_seq = 8192;
    }
}

int fmt_synth_geometry(const char *name, fmt_hparams *hp, fmt_layer_geom **lg,
                       char *err, size_t errlen)
{
    *lg = NULL;
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        if (strcmp(presets[i].name, name))
            continue;
        preset_hparams(&presets[i], hp);
        const struct gemma_geom *gg = gemma_of(name);
        if (gg) {
            *lg = calloc(hp->n_layers, sizeof **lg);
            if (!*lg) {
                fmt_err(err, errlen, "%s: out of memory", name);
                return FMT_ENOMEM;
            }
            gemma_layers(gg, hp, *lg);
        }
        return 0;
    }
    fmt_err(err, errlen, "unknown preset '%s' (see cflow synth --help)", name);
    return FMT_EARG;
}

const char *fmt_synth_preset_name(unsigned i)
{
    const unsigned np = sizeof presets / sizeof *presets;
    return i < np ? presets[i].name : fmt_synth_bench_name(i - np);
}

/* splitmix64: a seeded stream, identical everywhere */
static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Irwin-Hall of 4 uniforms: close enough to a normal, cheap, exact. */
static float next_normal(uint64_t *s, float sd)
{
    float acc = 0.0f;
    for (int i = 0; i < 4; i++)
        acc += (float)(next_u64(s) >> 40) * (1.0f / 16777216.0f);
    return (acc - 2.0f) * sd * 1.7320508f;
}

typedef struct synth_ctx {
    fmt_src  *s;
    uint8_t  *base;
    size_t    used, cap;
    uint64_t  rng;
    char     *err;
    size_t    errlen;
} synth_ctx;

static int add(synth_ctx *c, const char *name, unsigned ndim, uint64_t n0,
               uint64_t n1, uint64_t n2, float fill, float sd)
{
    uint64_t ne[4] = { n0, n1, n2, 1 };
    uint64_t n = n0 * n1 * n2;
    float *p = (float *)(void *)(c->base + c->used);
    for (uint64_t i = 0; i < n; i++)
        p[i] = sd > 0 ? next_normal(&c->rng, sd) : fill;
    c->used += n * sizeof(float);
    return fmt_src_add_tensor(c->s, name, FMT_DT_F32, ndim, ne, p, n * sizeof(float),
                              c->err, c->errlen);
}

/* A small SentencePiece vocabulary: specials, 256 byte tokens, then single
 * characters ("▁" for space) and a few common pairs, up to vocab entries. */
static int synth_vocab(fmt_kv *kv, unsigned vocab)
{
    const char **tok = calloc(vocab, sizeof *tok);
    size_t *len = calloc(vocab, sizeof *len);
    float *score = calloc(vocab, sizeof *score);
    int32_t *type = calloc(vocab, sizeof *type);
    char (*buf)[24] = calloc(vocab, sizeof *buf);
    int rc = -1;
    if (!tok || !len || !score || !type || !buf)
        goto out;
    static const char *const sp[3] = { "<unk>", "<s>", "</s>" };
    static const char *const chars =
        "etaoinshrdlucmfwypvbgkjqxzETAOINSHRDLUCMFWYPVBGKJQXZ0123456789.,!?'\"-:;()";
    static const char *const pairs[] = { "th", "he", "in", "er", "an", "re", "on",
                                         "at", "en", "nd", "ti", "es", "or", "te" };
    unsigned i = 0, ci = 0, pi = 0;
    for (; i < vocab; i++) {
        if (i < 3) {
            snprintf(buf[i], sizeof buf[i], "%s", sp[i]);
            type[i] = i == 0 ? 2 : 3;
        } else if (i < 259) {
            snprintf(buf[i], sizeof buf[i], "<0x%02X>", i - 3);
            type[i] = 6;
        } else if (i == 259) {
            snprintf(buf[i], sizeof buf[i], "\xe2\x96\x81"); /* ▁ */
            type[i] = 1;
        } else if (chars[ci]) {
            buf[i][0] = chars[ci++];
            type[i] = 1;
        } else if (pi < sizeof pairs / sizeof *pairs) {
            snprintf(buf[i], sizeof buf[i], "%s", pairs[pi++]);
            type[i] = 1;
        } else {
            snprintf(buf[i], sizeof buf[i], "<unused%u>", i);
            type[i] = 5;
        }
        tok[i] = buf[i];
        len[i] = strlen(buf[i]);
        score[i] = -(float)i;
    }
    if (fmt_kv_set_str(kv, "tokenizer.ggml.model", "llama", 5) ||
        fmt_kv_set_arr_str(kv, "tokenizer.ggml.tokens", tok, len, vocab) ||
        fmt_kv_set_arr_f32(kv, "tokenizer.ggml.scores", score, vocab) ||
        fmt_kv_set_arr_i32(kv, "tokenizer.ggml.token_type", type, vocab) ||
        fmt_kv_set_u32(kv, "tokenizer.ggml.bos_token_id", 1) ||
        fmt_kv_set_u32(kv, "tokenizer.ggml.eos_token_id", 2) ||
        fmt_kv_set_u32(kv, "tokenizer.ggml.unknown_token_id", 0) ||
        fmt_kv_set_bool(kv, "tokenizer.ggml.add_bos_token", 1))
        goto out;
    rc = 0;
out:
    free(tok);
    free(len);
    free(score);
    free(type);
    free(buf);
    return rc;
}

int fmt_synth_vocab(fmt_kv *kv, unsigned vocab)
{
    return synth_vocab(kv, vocab);
}

/* For GGUF output (fmt_synth_gguf.c): the "llama" presets with a plain
 * combine (Mixtral-style MoE or dense), which llama.cpp runs as they are. */
int fmt_synth_llama_geom(const char *name, fmt_synth_geom *g)
{
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        const preset *p = &presets[i];
        if (strcmp(p->name, name) || strcmp(p->arch, "llama") ||
            p->combine != FMT_COMBINE_PARALLEL_SQRT2 || p->dd || p->de ||
            (p->ffn && p->n_exp))
            continue;
        memset(g, 0, sizeof *g);
        g->name = p->name;
        g->n_layers = p->n_layers;
        g->dim = p->dim;
        g->n_heads = p->n_heads;
        g->n_kv = p->n_kv;
        g->head_dim = p->dim / p->n_heads;
        g->ffn = p->n_exp ? p->exp_ffn : p->ffn;
        g->n_exp = p->n_exp;
        g->top_k = p->top_k;
        g->vocab = p->vocab;
        g->ctx = 2048;
        g->theta = 10000.0f;
        g->eps = 1e-5f;
        /* untied: a random tied head mostly echoes its input token, which
         * makes a poor greedy-token comparison */
        g->tied = 0;
        return 0;
    }
    return -1;
}

int fmt_synth_open(fmt_src **out, const char *name, uint64_t seed, char *err,
                   size_t errlen)
{
    const preset *p = NULL;
    fmt_src *s;
    int rc;
    *out = NULL;
    if (fmt_synth_bench_find(name)) /* real geometry: Q4_0 through a GGUF */
        return fmt_synth_bench_open(out, name, seed, err, errlen);
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++)
        if (!strcmp(presets[i].name, name))
            p = &presets[i];
    if (!p) {
        fmt_err(err, errlen, "unknown preset '%s' (see cflow synth --help)", name);
        return FMT_EARG;
    }
    s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(name)) || !(s->maps = calloc(1, sizeof *s->maps))) {
        free(s ? s->path : NULL);
        free(s);
        fmt_err(err, errlen, "%s: out of memory", name);
        return FMT_ENOMEM;
    }
    s->kind = "synth";
    fmt_hparams *h = &s->hp;
    preset_hparams(p, h);
    const struct gemma_geom *gg = gemma_of(p->name);
    if (gg) {
        if (!(s->lgeom = calloc(h->n_layers, sizeof *s->lgeom))) {
            fmt_err(err, errlen, "%s: out of memory", name);
            rc = FMT_ENOMEM;
            goto fail;
        }
        gemma_layers(gg, h, s->lgeom);
    }

    uint64_t d = p->dim, q = (uint64_t)p->n_heads * h->head_dim,
             kv = (uint64_t)p->n_kv * h->head_dim;
    if (gg) {   /* an upper bound over both layer kinds */
        if ((uint64_t)gg->full_heads * gg->full_hd > q)
            q = (uint64_t)gg->full_heads * gg->full_hd;
        if ((uint64_t)gg->full_kv * gg->full_hd > kv)
            kv = (uint64_t)gg->full_kv * gg->full_hd;
    }
    uint64_t per_layer = 3 * d + q * d + 2 * kv * d + d * q + 3 * d * p->ffn +
                         (uint64_t)p->n_exp * (d + 3 * d * p->exp_ffn);
    uint64_t total = ((uint64_t)p->vocab * d + d + per_layer * p->n_layers) *
                     sizeof(float);
    /* the random weights are held as f32 before the writer tiles them */
    if (total > ((uint64_t)8 << 30)) {
        fmt_err(err, errlen, "%s: %.1f GiB of f32 weights is too large to "
                "synthesise (cflow inspect --critical-path --bytes-per-param 0.5 "
                "%s works from its geometry alone)", name,
                (double)total / (1 << 30), name);
        rc = FMT_EUNSUP;
        goto fail;
    }
    void *mem = mmap(NULL, total, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        fmt_err(err, errlen, "%s: cannot allocate %llu bytes", name,
                (unsigned long long)total);
        rc = FMT_ENOMEM;
        goto fail;
    }
    s->maps[0].p = mem;
    s->maps[0].n = total;
    s->n_maps = 1;

    synth_ctx c = { s, mem, 0, total, seed ? seed : 0x5eedull, err, errlen };
    char nm[96];
    const float sd = 0.02f;
    if ((rc = add(&c, "token_embd", 2, d, p->vocab, 1, 0, sd)) ||
        (rc = add(&c, "output_norm", 1, d, 1, 1, 1.0f, 0)))
        goto fail;
    for (unsigned l = 0; l < p->n_layers; l++) {
        fmt_layer_geom lg;
        fmt_src_layer_geom(s, l, &lg);
        uint64_t ql = (uint64_t)lg.n_heads * lg.head_dim;
        uint64_t kvl = (uint64_t)lg.n_kv_heads * lg.head_dim;
        int no_exp = (lg.flags & FMT_LG_NO_EXPERTS) != 0;
#define T(suffix, nd, a, b, cc, fill, s_) \
        snprintf(nm, sizeof nm, "blk.%u." suffix, l); \
        if ((rc = add(&c, nm, nd, a, b, cc, fill, s_))) goto fail;
        T("attn_norm", 1, d, 1, 1, 1.0f, 0);
        T("attn_q", 2, d, ql, 1, 0, sd);
        T("attn_k", 2, d, kvl, 1, 0, sd);
        if (!(lg.flags & FMT_LG_KV_SHARED)) {
            T("attn_v", 2, d, kvl, 1, 0, sd);
        }
        T("attn_output", 2, ql, d, 1, 0, sd);
        T("ffn_norm", 1, d, 1, 1, 1.0f, 0);
        if (p->ffn) {
            T("ffn_gate", 2, d, p->ffn, 1, 0, sd);
            T("ffn_up", 2, d, p->ffn, 1, 0, sd);
            T("ffn_down", 2, p->ffn, d, 1, 0, sd);
        }
        if (p->n_exp && !no_exp) {
            T("moe_norm", 1, d, 1, 1, 1.0f, 0);
            T("ffn_gate_inp", 2, d, p->n_exp, 1, 0, 0.2f);
            T("ffn_gate_exps", 3, d, p->exp_ffn, p->n_exp, 0, sd);
            T("ffn_up_exps", 3, d, p->exp_ffn, p->n_exp, 0, sd);
            T("ffn_down_exps", 3, p->exp_ffn, d, p->n_exp, 0, sd);
        }
#undef T
    }
    mprotect(mem, total, PROT_READ);
    s->kv_own = fmt_kv_new();
    if (!s->kv_own || synth_vocab(s->kv_own, p->vocab) ||
        fmt_kv_set_str(s->kv_own, "general.name", name, strlen(name))) {
        fmt_err(err, errlen, "%s: out of memory", name);
        rc = FMT_ENOMEM;
        goto fail;
    }
    s->kv = s->kv_own;
    static const fmt_role_names synth_names = {
        [FMT_R_TOK_EMBD] = "token_embd", [FMT_R_OUT_NORM] = "output_norm",
        [FMT_R_ATTN_NORM] = "blk.%u.attn_norm", [FMT_R_Q] = "blk.%u.attn_q",
        [FMT_R_K] = "blk.%u.attn_k", [FMT_R_V] = "blk.%u.attn_v",
        [FMT_R_O] = "blk.%u.attn_output", [FMT_R_FFN_NORM] = "blk.%u.ffn_norm",
        [FMT_R_GATE] = "blk.%u.ffn_gate", [FMT_R_UP] = "blk.%u.ffn_up",
        [FMT_R_DOWN] = "blk.%u.ffn_down", [FMT_R_ROUTER] = "blk.%u.ffn_gate_inp",
        [FMT_R_EXP_GATE] = "blk.%u.ffn_gate_exps",
        [FMT_R_EXP_UP] = "blk.%u.ffn_up_exps",
        [FMT_R_EXP_DOWN] = "blk.%u.ffn_down_exps",
        [FMT_R_MOE_NORM] = "blk.%u.moe_norm",
    };
    if ((rc = fmt_src_check_hparams(s, err, errlen)) ||
        (rc = fmt_src_bind(s, synth_names, 1, err, errlen)))
        goto fail;
    *out = s;
    return 0;
fail:
    fmt_src_close(s);
    return rc;
}
