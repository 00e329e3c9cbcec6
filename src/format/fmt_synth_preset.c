/*
 * fmt_synth_preset.c — the named presets of `cflow synth` and what a
 * synthetic model is besides its weights.
 *
 * Two lists: the report's pipeline-native architectures and their small
 * test versions (random f32 weights, fmt_synth.c), and the benchmark
 * presets at the real models' geometry (Q4_0 GGUF, fmt_synth_gguf.c).
 * Both writers, and cflow's --critical-path from geometry alone, look the
 * presets up here, with the synthetic SentencePiece vocabulary they share;
 * this file uses neither writer.
 *
 * "The report" (with its section numbers) is the Pipeline-Native
 * Transformers report.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/cflow_format.h"
#include "format/fmt_impl.h"

typedef struct preset {
    const char *name, *arch;
    unsigned    n_layers, dim, n_heads, n_kv, ffn, n_exp, top_k, exp_ffn, vocab;
    unsigned    dd, de, combine, merge, iters;
    unsigned    at_scale;   /* written whatever its size (fmt_synth_at_scale) */
} preset;

static const preset presets[] = {
    { "report-arch1", "arch1", 6, 512, 8, 8, 2048, 8, 2, 512, 512, 0, 0,
      FMT_COMBINE_DECOUPLED, 3, 0, 0 },
    { "report-arch2_4_combined", "arch2_4_combined", 6, 512, 8, 8, 2048, 8, 2, 512,
      512, 1, 2, FMT_COMBINE_DELAYED_SUM, 0, 0, 0 },
    { "report-arch2_4_sync", "arch2_4_sync", 6, 512, 8, 8, 2048, 8, 2, 512, 512, 1,
      0, FMT_COMBINE_DELAYED_SUM, 0, 0, 0 },
    { "report-arch3", "arch3", 6, 512, 8, 8, 2048, 8, 2, 512, 512, 0, 0,
      FMT_COMBINE_PIPELINE_REG, 0, 0, 0 },
    { "report-arch4", "arch4", 6, 512, 8, 8, 2048, 8, 2, 512, 512, 0, 2,
      FMT_COMBINE_ASYNC_EXPERTS, 0, 0, 0 },
    /* two unique blocks, each applied three times: effective depth 6 */
    { "report-arch5", "arch5", 2, 512, 8, 8, 2048, 8, 2, 512, 512, 0, 0,
      FMT_COMBINE_FIXED_POINT, 0, 3, 0 },
    /* the report's 30.9B arch2_4_8k_16l (5.13, 5.14), as its figures size
     * it: d 8192, 16 layers, 64 heads of 128 (B_attn = 4 d^2), a dense FFN
     * of 32768 beside 8 experts of 4096, top-2 (108 MiB of experts a
     * layer at Q4_0, "108 MB per layer for the top-2 selection"; ~20e9
     * weights a token), the arch2_4 delays; 30.6e9 weights with a
     * 32000-token vocabulary: 17 GB at Q4_0, 32.5 GB at Q8_0.  The
     * model of the report's expert-overlap experiment (5.14). */
    { "report-arch2_4-30b", "arch2_4_combined", 16, 8192, 64, 64, 32768, 8, 2, 4096, 32000,
      1, 2, FMT_COMBINE_DELAYED_SUM, 0, 0, 1 },
    /* small versions for tests: same schedules, d 64 */
    { "tiny-moe", "arch2_4_combined", 4, 64, 4, 2, 128, 4, 2, 64, 512, 1, 2,
      FMT_COMBINE_DELAYED_SUM, 0, 0, 0 },
    { "tiny-mixtral", "llama", 3, 64, 4, 2, 0, 4, 2, 96, 512, 0, 0,
      FMT_COMBINE_PARALLEL_SQRT2, 0, 0, 0 },
    /* the GGML types' fixtures (tests/data/quant): a dense llama whose rows
     * are multiples of 256 for the K-quants and IQ4_XS (4 heads of 64, one
     * KV head), one of rows that are multiples of 32 only for the 32-column
     * types; and for llama.cpp's mixes, eight layers with a 288-wide FFN
     * (ffn_down's rows take the fallbacks) and a Mixtral of 8 experts
     * (llama.cpp's n_expert == 8 rules) */
    { "tiny-llama256", "llama", 1, 256, 4, 1, 256, 0, 0, 0, 512, 0, 0,
      FMT_COMBINE_PARALLEL_SQRT2, 0, 0, 0 },
    { "tiny-llama64", "llama", 2, 64, 4, 2, 96, 0, 0, 0, 512, 0, 0,
      FMT_COMBINE_PARALLEL_SQRT2, 0, 0, 0 },
    { "tiny-llama-mix", "llama", 8, 256, 8, 2, 288, 0, 0, 0, 512, 0, 0,
      FMT_COMBINE_PARALLEL_SQRT2, 0, 0, 0 },
    { "tiny-mixtral256", "llama", 2, 256, 4, 2, 0, 8, 2, 256, 512, 0, 0,
      FMT_COMBINE_PARALLEL_SQRT2, 0, 0, 0 },
    /* Gemma 4 26B-A4B as the report sizes it (chapters 2.5, 3.4, 6.2): 30
     * layers, d 2816, 25 sliding-window layers with B_attn = 4 d^2 (11
     * heads of 256, 11 KV heads) and 5 full-attention layers (every sixth:
     * head dim 512, K = V sharing, P-RoPE on a quarter of the dims at base
     * 1e6, no experts); a dense FFN of 2112 beside 128 experts of 704,
     * top-8, vocabulary 262144; under the report's 6.2 delays (dense 1,
     * expert 2).  Too large to synthesise (~26e9 weights): its critical
     * path comes from the geometry (fmt_synth_geometry). */
    { "gemma4-26b-a4b", "gemma4", 30, 2816, 11, 11, 2112, 128, 8, 704, 262144, 1, 2,
      FMT_COMBINE_DELAYED_SUM, 0, 0, 0 },
    /* the same structure at d 256, small enough to run: 5 sliding layers
     * (4 heads of 64, window 16) and a full one (4 heads of 128, K = V),
     * 16 experts of 128, top-4, so that top-k expert bytes are 1.5x the
     * attention bytes as at full scale */
    { "gemma4-mini", "gemma4", 6, 256, 4, 4, 192, 16, 4, 128, 512, 1, 2,
      FMT_COMBINE_DELAYED_SUM, 0, 0, 0 },
    /* one full-attention layer of gemma4-mini alone (tests: with one layer
     * a position's cache depends only on its token and position) */
    { "gemma4-mini-full1", "gemma4", 1, 256, 4, 4, 192, 16, 4, 128, 512, 0, 0,
      FMT_COMBINE_DELAYED_SUM, 0, 0, 0 },
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

int fmt_synth_at_scale(const char *name)
{
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++)
        if (!strcmp(presets[i].name, name))
            return (int)presets[i].at_scale;
    return 0;
}

const char *fmt_synth_preset_name(unsigned i)
{
    const unsigned np = sizeof presets / sizeof *presets;
    return i < np ? presets[i].name : fmt_synth_bench_name(i - np);
}

/* Benchmark presets (the real models' geometry; see docs/PERFORMANCE.md,
 * "How the figures are taken").  ctx is generous so that depth sweeps fit. */
#define GEO(nm, L, d, h, kv, hd, ff, E, k, V, c, th, ep, ti) \
    .name = nm, .n_layers = L, .dim = d, .n_heads = h, .n_kv = kv, .head_dim = hd, .ffn = ff, \
    .n_exp = E, .top_k = k, .vocab = V, .ctx = c, .theta = th, .eps = ep, .tied = ti
static const fmt_synth_geom bench[] = {
    /*    name            layers  dim heads kv  hd    ffn    E  k  vocab    ctx   theta  eps  tied */
    { GEO("tinyllama-1.1b",  22, 2048, 32,  4,  64,  5632,   0, 0, 32000,  8192, 1e4f, 1e-5f, 0) },
    { GEO("llama2-7b",       32, 4096, 32, 32, 128, 11008,   0, 0, 32000,  8192, 1e4f, 1e-5f, 0) },
    /* OLMoE's sizes as a Mixtral-shaped llama (the olmoe-1b-7b of earlier
     * measurements, docs/perf-log) */
    { GEO("olmoe-mixtral-1b-7b", 16, 2048, 16, 16, 128, 1024, 64, 8, 50304, 8192, 1e4f, 1e-5f, 0) },
    { GEO("qwen3-30b-a3b",   48, 2048, 32,  4, 128,   768, 128, 8, 151936, 8192, 1e6f, 1e-6f, 0) },
    /* the families in their own architectures (fmt_family.c), at the real
     * models' sizes: allenai/OLMoE-1B-7B-0924, openai/gpt-oss-20b and
     * -120b, google/gemma-3-4b-it, google/gemma-2-2b-it,
     * microsoft/Phi-4-mini-instruct */
    { GEO("olmoe-1b-7b",     16, 2048, 16, 16, 128,  1024,  64, 8, 50304,  4096, 1e4f, 1e-5f, 0),
      .arch = "olmoe", .feat = FMT_SG_QK_FULL },
    { GEO("gpt-oss-20b",     24, 2880, 64,  8,  64,  2880,  32, 4, 201088, 131072, 150000.0f,
          1e-5f, 0), .arch = "gpt-oss", .feat = FMT_SG_BIAS | FMT_SG_SINKS, .swa = 128,
      .rope_factor = 32.0f, .rope_orig = 4096 },
    { GEO("gpt-oss-120b",    36, 2880, 64,  8,  64,  2880, 128, 4, 201088, 131072, 150000.0f,
          1e-5f, 0), .arch = "gpt-oss", .feat = FMT_SG_BIAS | FMT_SG_SINKS, .swa = 128,
      .rope_factor = 32.0f, .rope_orig = 4096 },
    { GEO("gemma3-4b",       34, 2560,  8,  4, 256, 10240,   0, 0, 262144, 131072, 1e6f,
          1e-6f, 1), .arch = "gemma3", .feat = FMT_SG_QK_HEAD | FMT_SG_POST, .swa = 1024,
      .rope_factor = 8.0f },
    { GEO("gemma2-2b",       26, 2304,  8,  4, 256,  9216,   0, 0, 256000, 8192, 1e4f, 1e-6f, 1),
      .arch = "gemma2", .feat = FMT_SG_POST, .swa = 4096, .softcap = 30.0f,
      .attn_softcap = 50.0f },
    { GEO("phi4-mini",       32, 3072, 24,  8, 128,  8192,   0, 0, 200064, 131072, 1e4f,
          1e-5f, 1), .arch = "phi3", .feat = FMT_SG_FUSED | FMT_SG_LONGROPE, .rope_dims = 96,
      .rope_orig = 4096, .swa = 262144 },    /* Phi-4-mini's config.json: no window in effect,
                                              * but the key convert_hf_to_gguf writes and
                                              * ik_llama.cpp requires */
    /* the same families small enough for the tests: each takes the
     * vocabulary it is given (--vocab) and keeps its oddities within the
     * tokens a test runs: windows of 8 positions, LongRoPE's original
     * context of 128 (short divisors at a context up to it), YaRN over 64 */
    { GEO("tiny-olmoe",       2,   64,  4,  4,  16,    64,   8, 2, 512, 2048, 1e4f, 1e-5f, 0),
      .arch = "olmoe", .feat = FMT_SG_QK_FULL, .qk_sd = 0.3f },
    { GEO("tiny-phi",         2,   64,  4,  2,  16,    96,   0, 0, 512, 1024, 1e4f, 1e-5f, 0),
      .arch = "phi3", .feat = FMT_SG_FUSED | FMT_SG_LONGROPE, .rope_dims = 12, .rope_orig = 256,
      .qk_sd = 0.3f },
    { GEO("tiny-gemma2",      4,   64,  4,  2,  16,    96,   0, 0, 512, 2048, 1e4f, 1e-6f, 1),
      .arch = "gemma2", .feat = FMT_SG_POST, .swa = 8, .softcap = 30.0f, .attn_softcap = 50.0f,
      .qk_sd = 0.3f },
    { GEO("tiny-gemma3",      6,   64,  4,  2,  16,    96,   0, 0, 512, 2048, 1e6f, 1e-6f, 1),
      .arch = "gemma3", .feat = FMT_SG_QK_HEAD | FMT_SG_POST, .swa = 8, .rope_factor = 8.0f,
      .qk_sd = 0.3f },
    { GEO("tiny-gptoss",      2,   64,  4,  2,  16,    64,   8, 2, 512, 2048, 150000.0f, 1e-5f,
          0), .arch = "gpt-oss", .feat = FMT_SG_BIAS | FMT_SG_SINKS, .swa = 8,
      .rope_factor = 32.0f, .rope_orig = 64, .qk_sd = 0.3f },
    /* DeepSeek-V2-Lite at its size (deepseek-ai/DeepSeek-V2-Lite-Chat);
     * a small DeepSeek-V2 whose query is low-rank and whose experts route
     * in groups (llama.cpp reads the direct query of 26- and 27-layer
     * models alone), and a small V2-Lite of 27 layers */
    { GEO("deepseek-v2-lite", 27, 2048, 16,  1, 576,  1408,  64, 6, 102400, 163840, 1e4f,
          1e-6f, 0), .arch = "deepseek2", .rope_dims = 64, .rope_factor = 40.0f,
      .rope_orig = 4096, .mla_rank = 512, .mla_nope = 128, .mla_v = 128, .n_shared = 2,
      .dense_lead = 1, .dense_ffn = 10944, .mscale_all = 0.707f },
    { GEO("tiny-deepseek2",   3,   64,  4,  1, 144,    64,   8, 2, 512, 2048, 1e4f, 1e-6f, 0),
      .arch = "deepseek2", .rope_dims = 16, .rope_factor = 4.0f, .rope_orig = 64,
      .mla_rank = 128, .mla_nope = 32, .mla_v = 128, .mla_q_rank = 64, .n_shared = 1,
      .dense_lead = 1, .dense_ffn = 96, .groups = 4, .groups_used = 2, .mscale_all = 0.707f,
      .qk_sd = 0.3f },
    { GEO("tiny-deepseek2-lite", 27, 64, 2,  1, 144,    32,   4, 2, 512, 2048, 1e4f, 1e-6f, 0),
      .arch = "deepseek2", .rope_dims = 16, .rope_factor = 4.0f, .rope_orig = 64,
      .mla_rank = 128, .mla_nope = 32, .mla_v = 128, .n_shared = 1, .dense_lead = 1,
      .dense_ffn = 64, .mscale_all = 0.707f, .qk_sd = 0.3f },
};
#undef GEO

const fmt_synth_geom *fmt_synth_bench_find(const char *name)
{
    for (size_t i = 0; i < sizeof bench / sizeof *bench; i++)
        if (!strcmp(bench[i].name, name))
            return &bench[i];
    return NULL;
}

const char *fmt_synth_bench_name(unsigned i)
{
    return i < sizeof bench / sizeof *bench ? bench[i].name : NULL;
}

/* A small SentencePiece vocabulary: specials, 256 byte tokens, then single
 * characters ("▁" for space) and a few common pairs, up to vocab entries. */
int fmt_synth_vocab(fmt_kv *kv, unsigned vocab)
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
