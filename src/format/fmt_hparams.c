/*
 * fmt_hparams.c — rules on a model's hyper-parameters (fmt_hparams) that
 * every reader and writer of this module shares: the names of the combine
 * styles, the pipeline fields' consistency, the .cflow header's fields
 * (their bytes both ways, and their widths) and the one rule for a
 * tensor's rank, and which slots a .cflow entry has, of what kind and
 * shape.  It sits below them all
 * (the .cflow reader, the source toolkit fmt_src.c and the converters), so
 * each imports the rules downwards and none holds them for the others.
 */
#include "config.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "format/cflow_format.h"
#include "format/fmt_impl.h"
#include "format/fmt_layout.h"

/* The .cflow header's fields and fmt_hparams, both ways: the writer's
 * bytes and the reader's fields side by side, so that a field added to
 * one is seen missing from the other. */
void fmt_header_store(uint8_t *h, const fmt_hparams *hp, uint64_t ltab, uint64_t meta,
                      uint8_t flags, uint8_t qtype)
{
    memset(h, 0, FMT_HEADER_SIZE);
    memcpy(h + FMT_H_MAGIC, FMT_MAGIC, 8);
    fmt_wr16(h + FMT_H_VERSION, FMT_VERSION);
    fmt_wr16(h + FMT_H_HSIZE, FMT_HEADER_SIZE);
    fmt_wr32(h + FMT_H_NLAYERS, hp->n_layers);
    fmt_wr32(h + FMT_H_DIM, hp->dim);
    fmt_wr32(h + FMT_H_FFN, hp->ffn_dim);
    fmt_wr32(h + FMT_H_EFFN, hp->expert_ffn_dim);
    fmt_wr32(h + FMT_H_VOCAB, hp->vocab_size);
    fmt_wr32(h + FMT_H_MAXSEQ, hp->max_seq);
    fmt_wr16(h + FMT_H_NHEADS, (uint16_t)hp->n_heads);
    fmt_wr16(h + FMT_H_NKV, (uint16_t)hp->n_kv_heads);
    fmt_wr16(h + FMT_H_HEADDIM, (uint16_t)hp->head_dim);
    fmt_wr16(h + FMT_H_NEXP, (uint16_t)hp->n_experts);
    fmt_wr16(h + FMT_H_TOPK, (uint16_t)hp->top_k);
    fmt_wr16(h + FMT_H_SWA, (uint16_t)hp->sliding_window);
    h[FMT_H_QTYPE] = qtype;
    h[FMT_H_FLAGS2] = (uint8_t)(hp->flags >> 8);
    fmt_wr16(h + FMT_H_TROWS, KERN_TILE_ROWS);
    fmt_wr16(h + FMT_H_TCOLS, KERN_TILE_COLS);
    fmt_wr16(h + FMT_H_QGROUP, KERN_QBLOCK);
    fmt_wrf32(h + FMT_H_THETA, hp->rope_theta);
    fmt_wrf32(h + FMT_H_EPS, hp->norm_eps);
    fmt_wr64(h + FMT_H_LTABLE, ltab);
    fmt_wr64(h + FMT_H_META, meta);
    h[FMT_H_DDELAY] = hp->dense_delay;
    h[FMT_H_EDELAY] = hp->expert_delay;
    h[FMT_H_COMBINE] = hp->combine_style;
    h[FMT_H_FLAGS] = flags;
    fmt_wrf32(h + FMT_H_SOFTCAP, hp->softcap);
}

void fmt_header_load(const uint8_t *h, fmt_hparams *hp)
{
    memset(hp, 0, sizeof *hp);
    hp->n_layers = kern_ld_u32(h + FMT_H_NLAYERS);
    hp->dim = kern_ld_u32(h + FMT_H_DIM);
    hp->ffn_dim = kern_ld_u32(h + FMT_H_FFN);
    hp->expert_ffn_dim = kern_ld_u32(h + FMT_H_EFFN);
    hp->vocab_size = kern_ld_u32(h + FMT_H_VOCAB);
    hp->max_seq = kern_ld_u32(h + FMT_H_MAXSEQ);
    hp->n_heads = kern_ld_u16(h + FMT_H_NHEADS);
    hp->n_kv_heads = kern_ld_u16(h + FMT_H_NKV);
    hp->head_dim = kern_ld_u16(h + FMT_H_HEADDIM);
    hp->n_experts = kern_ld_u16(h + FMT_H_NEXP);
    hp->top_k = kern_ld_u16(h + FMT_H_TOPK);
    hp->sliding_window = kern_ld_u16(h + FMT_H_SWA);
    hp->quant_type = h[FMT_H_QTYPE];
    hp->rope_theta = kern_ld_f32(h + FMT_H_THETA);
    hp->norm_eps = kern_ld_f32(h + FMT_H_EPS);
    hp->dense_delay = h[FMT_H_DDELAY];
    hp->expert_delay = h[FMT_H_EDELAY];
    hp->combine_style = h[FMT_H_COMBINE];
    hp->flags = h[FMT_H_FLAGS] | (uint32_t)h[FMT_H_FLAGS2] << 8;
    hp->softcap = kern_ld_f32(h + FMT_H_SOFTCAP);
}

const char *fmt_combine_name(int c)
{
    static const char *const n[FMT_NCOMBINE] = {
        "ParallelSqrt2", "DelayedSum", "AsyncExperts", "DecoupledStreams",
        "PipelineRegisters", "FixedPoint"
    };
    return c >= 0 && c < FMT_NCOMBINE ? n[c] : "unknown";
}

/* The pipeline fields' rules, shared by the .cflow reader and every
 * converter's source check (fmt_src_check_hparams), so a converter never
 * writes a header the reader refuses (fuzz regression
 * hf/convert-delays-on-parallel-sqrt2.a). */
int fmt_pipeline_check(const fmt_hparams *hp, char *why, size_t whylen)
{
    if (hp->combine_style >= FMT_NCOMBINE)
        snprintf(why, whylen, "unknown combine style %u", hp->combine_style);
    else if (hp->combine_style != FMT_COMBINE_DELAYED_SUM &&
             hp->combine_style != FMT_COMBINE_ASYNC_EXPERTS &&
             (hp->dense_delay != 0 || hp->expert_delay != 0))
        snprintf(why, whylen, "combine style %s takes no delays (dense %u, expert %u)",
                 fmt_combine_name(hp->combine_style), hp->dense_delay, hp->expert_delay);
    else if (hp->combine_style == FMT_COMBINE_ASYNC_EXPERTS && hp->dense_delay != 0)
        snprintf(why, whylen, "AsyncExperts takes no dense delay (%u)", hp->dense_delay);
    else if (hp->dense_delay >= hp->n_layers)
        snprintf(why, whylen, "dense_delay %u exceeds the %u layers", hp->dense_delay,
                 hp->n_layers);
    else if (hp->expert_delay >= hp->n_layers)
        snprintf(why, whylen, "expert_delay %u exceeds the %u layers", hp->expert_delay,
                 hp->n_layers);
    else
        return 0;
    return -1;
}

/* The largest value each field of the .cflow header (fmt_layout.h) holds,
 * and the reader's bounds (fmt_cflow_read.c read_header), so a value that
 * does not fit is refused with its limit instead of stored modulo the
 * field's width (an HF sliding_window of 70000 became 4464 in 16 bits). */
int fmt_hparams_fit(const fmt_hparams *hp, char *why, size_t whylen)
{
    const struct { const char *name; uint64_t v, max; } f[] = {
        { "layer count", hp->n_layers, 4096 },
        { "embedding length", hp->dim, 65536 },
        { "feed-forward length", hp->ffn_dim, 65536 },
        { "expert feed-forward length", hp->expert_ffn_dim, 65536 },
        { "vocabulary size", hp->vocab_size, 1u << 24 },
        { "context length", hp->max_seq, 1u << 24 },
        { "attention head count", hp->n_heads, UINT16_MAX },
        { "KV head count", hp->n_kv_heads, UINT16_MAX },
        { "head dimension", hp->head_dim, UINT16_MAX },
        { "attention width (heads x head dimension)",
          (uint64_t)hp->n_heads * hp->head_dim, 65536 },
        /* tile headers hold expert ids in a byte, 255 meaning none */
        { "expert count", hp->n_experts, 254 },
        { "experts used per token", hp->top_k, UINT16_MAX },
        { "sliding window", hp->sliding_window, UINT16_MAX },
    };
    for (size_t i = 0; i < sizeof f / sizeof *f; i++)
        if (f[i].v > f[i].max) {
            snprintf(why, whylen, "%s %llu is over the %llu a .cflow file holds",
                     f[i].name, (unsigned long long)f[i].v, (unsigned long long)f[i].max);
            return -1;
        }
    if ((hp->flags >> 8) & ~FMT_FLAGS2_KNOWN) {
        snprintf(why, whylen, "feature flags 0x%x are not all known to .cflow (0x%x)",
                 hp->flags, (FMT_FLAGS2_KNOWN << 8) | FMT_FLAGS_KNOWN);
        return -1;
    }
    return 0;
}

/* A layer's geometry record (fmt_layout.h) stores heads, KV heads, head
 * dimension and rotated dimensions in 16 bits each. */
int fmt_layer_geom_fit(const fmt_layer_geom *g, unsigned layer, char *why, size_t whylen)
{
    const struct { const char *name; uint32_t v; } f[] = {
        { "attention head count", g->n_heads }, { "KV head count", g->n_kv_heads },
        { "head dimension", g->head_dim }, { "rotated dimensions", g->rope_dims },
    };
    for (size_t i = 0; i < sizeof f / sizeof *f; i++)
        if (f[i].v > UINT16_MAX) {
            snprintf(why, whylen, "layer %u: %s %u is over the %u a .cflow layer "
                     "record holds", layer, f[i].name, f[i].v, UINT16_MAX);
            return -1;
        }
    return 0;
}

/* A tensor's rank: its dimensions up to the last that is not 1.  GGUF and
 * safetensors both allow trailing unit dimensions ([64, 512, 1] is a
 * [64, 512] matrix); every reader stores this rank in fmt_tensor.ndim, so
 * each shape check sees one rule (a 3-D [64, 512, 1] embedding was refused
 * while a 4-D [64, 64, 1, 1] attention matrix was accepted). */
unsigned fmt_shape_rank(const uint64_t ne[4], unsigned ndim)
{
    unsigned r = ndim < 4 ? ndim : 4;
    while (r > 1 && ne[r - 1] == 1)
        r--;
    return r ? r : 1;
}

const char *fmt_shape_str(char *buf, size_t n, const uint64_t ne[4], unsigned ndim)
{
    size_t o = 0;
    unsigned r = fmt_shape_rank(ne, ndim);
    for (unsigned d = 0; d < r && o < n; d++)
        o += (size_t)snprintf(buf + o, n - o, "%s%llu", d ? ", " : "[",
                              (unsigned long long)ne[d]);
    if (o < n)
        snprintf(buf + o, n - o, "]");
    return buf;
}

/* ---- the families' fields ------------------------------------------------
 * What fmt_family.c's table sets beyond the header's fields is kept in a
 * .cflow's metadata, one cflow.* key a field, written only where the field
 * is not zero (zero is the Llama behaviour, so a file of the earlier
 * families keeps its bytes).  This table is the one list of those keys:
 * the writer stores through it and the reader loads through it. */
enum { HPM_U8, HPM_U32, HPM_F32 };
static const struct hp_meta {
    const char *key;
    int         type;
    size_t      off;
} hp_meta[] = {
    { "cflow.ffn_act", HPM_U8, offsetof(fmt_hparams, ffn_act) },
    { "cflow.gating", HPM_U8, offsetof(fmt_hparams, gating) },
    { "cflow.rope.scaling.kind", HPM_U8, offsetof(fmt_hparams, rope_scaling) },
    { "cflow.attn_scale", HPM_F32, offsetof(fmt_hparams, attn_scale) },
    { "cflow.q_scale", HPM_F32, offsetof(fmt_hparams, q_scale) },
    { "cflow.attn_softcap", HPM_F32, offsetof(fmt_hparams, attn_softcap) },
    { "cflow.expert_scale", HPM_F32, offsetof(fmt_hparams, expert_scale) },
    { "cflow.swiglu_alpha", HPM_F32, offsetof(fmt_hparams, swiglu_alpha) },
    { "cflow.swiglu_limit", HPM_F32, offsetof(fmt_hparams, swiglu_limit) },
    { "cflow.shared_ffn", HPM_U32, offsetof(fmt_hparams, shared_ffn_dim) },
    { "cflow.dense_lead", HPM_U32, offsetof(fmt_hparams, dense_lead) },
    { "cflow.rope.dimension_count", HPM_U32, offsetof(fmt_hparams, rope_dims) },
    { "cflow.rope.scaling.attn_factor", HPM_F32, offsetof(fmt_hparams, rope_attn_factor) },
    { "cflow.rope.yarn.beta_fast", HPM_F32, offsetof(fmt_hparams, yarn_beta_fast) },
    { "cflow.rope.yarn.beta_slow", HPM_F32, offsetof(fmt_hparams, yarn_beta_slow) },
    { "cflow.rope.yarn.log_mul", HPM_F32, offsetof(fmt_hparams, yarn_log_mul) },
    { "cflow.mla.kv_lora_rank", HPM_U32, offsetof(fmt_hparams, mla_rank) },
    { "cflow.mla.qk_nope_dim", HPM_U32, offsetof(fmt_hparams, mla_nope) },
    { "cflow.mla.v_dim", HPM_U32, offsetof(fmt_hparams, mla_v) },
    { "cflow.mla.q_lora_rank", HPM_U32, offsetof(fmt_hparams, mla_q_rank) },
    { "cflow.expert_group_count", HPM_U32, offsetof(fmt_hparams, expert_groups) },
    { "cflow.expert_group_used_count", HPM_U32, offsetof(fmt_hparams, expert_groups_used) },
};

int fmt_hp_meta_store(const fmt_hparams *hp, fmt_kv *kv)
{
    for (size_t i = 0; i < sizeof hp_meta / sizeof *hp_meta; i++) {
        const char *p = (const char *)hp + hp_meta[i].off;
        int rc = 0;
        switch (hp_meta[i].type) {
        case HPM_U8:
            if (*(const uint8_t *)p)
                rc = fmt_kv_set_u32(kv, hp_meta[i].key, *(const uint8_t *)p);
            break;
        case HPM_U32: {
            uint32_t v;
            memcpy(&v, p, 4);
            if (v)
                rc = fmt_kv_set_u32(kv, hp_meta[i].key, v);
            break;
        }
        default: {
            float v;
            memcpy(&v, p, 4);
            if (v != 0.0f)
                rc = fmt_kv_set_f32(kv, hp_meta[i].key, v);
        }
        }
        if (rc)
            return -1;
    }
    /* the factor and context of linear and YaRN scaling: Llama 3's keys */
    if (hp->rope_scaling != FMT_ROPE_NONE && !(hp->flags & FMT_FLAG_ROPE_LLAMA3) &&
        (fmt_kv_set_f32(kv, "cflow.rope.scaling.factor", hp->rope_factor) ||
         fmt_kv_set_u32(kv, "cflow.rope.scaling.original_context_length", hp->rope_orig_ctx)))
        return -1;
    return 0;
}

int fmt_hp_meta_load(const fmt_kv *kv, fmt_hparams *hp, char *why, size_t whylen)
{
    for (size_t i = 0; i < sizeof hp_meta / sizeof *hp_meta; i++) {
        char *p = (char *)hp + hp_meta[i].off;
        const char *k = hp_meta[i].key;
        if (!fmt_kv_has(kv, k))
            continue;
        uint32_t u;
        float f;
        if (hp_meta[i].type == HPM_F32) {
            if (fmt_kv_get_f32(kv, k, &f)) {
                snprintf(why, whylen, "metadata %s is not a float", k);
                return -1;
            }
            memcpy(p, &f, 4);
        } else if (fmt_kv_get_u32(kv, k, &u) ||
                   (hp_meta[i].type == HPM_U8 && u > 255)) {
            snprintf(why, whylen, "metadata %s is not a %s", k,
                     hp_meta[i].type == HPM_U8 ? "small unsigned integer" : "u32");
            return -1;
        } else if (hp_meta[i].type == HPM_U8) {
            *(uint8_t *)p = (uint8_t)u;
        } else {
            memcpy(p, &u, 4);
        }
    }
    if (hp->rope_scaling != FMT_ROPE_NONE && !(hp->flags & FMT_FLAG_ROPE_LLAMA3) &&
        (fmt_kv_get_f32(kv, "cflow.rope.scaling.factor", &hp->rope_factor) ||
         fmt_kv_get_u32(kv, "cflow.rope.scaling.original_context_length",
                        &hp->rope_orig_ctx))) {
        snprintf(why, whylen, "RoPE scaling %u without cflow.rope.scaling.factor and "
                 "original_context_length", hp->rope_scaling);
        return -1;
    }
    return fmt_family_check(hp, why, whylen);
}

/* The families' fields together: each value one cflow implements, named
 * with its value when not.  Shared by every converter's source check and
 * the .cflow reader, so nothing is written that the reader refuses. */
int fmt_family_check(const fmt_hparams *hp, char *why, size_t whylen)
{
    const struct { const char *name; float v; } pos[] = {
        { "attention scale", hp->attn_scale }, { "query scale", hp->q_scale },
        { "attention soft-cap", hp->attn_softcap }, { "expert weight scale", hp->expert_scale },
        { "RoPE attention factor", hp->rope_attn_factor },
        { "YaRN beta_fast", hp->yarn_beta_fast }, { "YaRN beta_slow", hp->yarn_beta_slow },
        { "YaRN log multiplier", hp->yarn_log_mul },
        { "SwiGLU alpha", hp->swiglu_alpha }, { "SwiGLU limit", hp->swiglu_limit },
    };
    for (size_t i = 0; i < sizeof pos / sizeof *pos; i++)
        if (!isfinite(pos[i].v) || pos[i].v < 0.0f || pos[i].v > 1e6f) {
            snprintf(why, whylen, "%s %g is outside 0 .. 1e6", pos[i].name, (double)pos[i].v);
            return -1;
        }
    if (hp->ffn_act >= FMT_NACT)
        snprintf(why, whylen, "FFN activation %u is not one cflow implements (0-%u)",
                 hp->ffn_act, FMT_NACT - 1);
    else if (hp->gating >= FMT_NGATE)
        snprintf(why, whylen, "expert gating %u is not one cflow implements (0-%u)",
                 hp->gating, FMT_NGATE - 1);
    else if (hp->rope_scaling >= FMT_NROPE)
        snprintf(why, whylen, "RoPE scaling %u is not one cflow implements (0-%u)",
                 hp->rope_scaling, FMT_NROPE - 1);
    else if (hp->ffn_act == FMT_ACT_SWIGLU_OAI &&
             !(hp->swiglu_alpha > 0.0f && hp->swiglu_limit > 0.0f))
        snprintf(why, whylen, "the clamped SwiGLU needs alpha and limit (%g, %g)",
                 (double)hp->swiglu_alpha, (double)hp->swiglu_limit);
    else if ((hp->rope_scaling == FMT_ROPE_LINEAR || hp->rope_scaling == FMT_ROPE_YARN) &&
             !(hp->rope_factor > 0.0f && isfinite(hp->rope_factor) && hp->rope_factor <= 1e6f))
        snprintf(why, whylen, "RoPE scaling factor %g is not a positive number",
                 (double)hp->rope_factor);
    else if (hp->rope_scaling == FMT_ROPE_YARN && hp->rope_orig_ctx == 0)
        snprintf(why, whylen, "YaRN needs the original context length");
    else if (hp->rope_dims % 2 || hp->rope_dims > hp->head_dim)
        snprintf(why, whylen, "%u rotated dimensions: not even, or more than the head's %u",
                 hp->rope_dims, hp->head_dim);
    else if (hp->shared_ffn_dim && (hp->n_experts == 0 || hp->shared_ffn_dim > 65536))
        snprintf(why, whylen, "shared experts of %u without routed experts, or over 65536",
                 hp->shared_ffn_dim);
    else if (hp->mla_rank && (!hp->mla_nope || !hp->mla_v || hp->n_kv_heads != 1 ||
                              !hp->rope_dims || hp->head_dim != hp->mla_rank + hp->rope_dims ||
                              hp->mla_rank % 128 || hp->mla_nope % 32 || hp->mla_v % 128 ||
                              (uint64_t)hp->n_heads * hp->mla_rank > 65535 ||
                              (uint64_t)hp->n_heads * hp->mla_v > 65535))
        snprintf(why, whylen, "latent attention of rank %u (q/k %u + %u, v %u, %u KV heads, "
                 "head %u): cflow needs one KV head of rank + rotated dims, a rank and v of 128s "
                 "(a tile's rows, one head's), q/k of 32s and heads * rank within 65535", hp->mla_rank, hp->mla_nope, hp->rope_dims,
                 hp->mla_v, hp->n_kv_heads, hp->head_dim);
    else if (!hp->mla_rank && (hp->mla_nope || hp->mla_v || hp->mla_q_rank))
        snprintf(why, whylen, "latent attention dimensions %u, %u, %u without its rank",
                 hp->mla_nope, hp->mla_v, hp->mla_q_rank);
    else if (hp->mla_q_rank % 32 || hp->mla_q_rank > 65536)
        snprintf(why, whylen, "a low-rank query of %u: not a multiple of 32 up to 65536",
                 hp->mla_q_rank);
    else if (hp->expert_groups > 1 &&
             (hp->expert_groups > FMT_MAX_EXPERT_GROUPS ||
              hp->n_experts % hp->expert_groups || !hp->expert_groups_used ||
              hp->expert_groups_used > hp->expert_groups ||
              hp->n_experts / hp->expert_groups < 2 ||
              hp->top_k > hp->expert_groups_used * (hp->n_experts / hp->expert_groups)))
        snprintf(why, whylen, "%u expert groups (%u used) for %u experts, top %u: groups (at "
                 "most 64) must divide the experts, hold two or more each and the used ones "
                 "the top k",
                 hp->expert_groups, hp->expert_groups_used, hp->n_experts, hp->top_k);
    else if (hp->dense_lead && (hp->n_experts == 0 || hp->ffn_dim == 0 ||
                                hp->dense_lead >= hp->n_layers))
        snprintf(why, whylen, "%u leading dense layers need experts, a dense FFN size and "
                 "a layer with experts after them (%u layers)", hp->dense_lead, hp->n_layers);
    else
        return 0;
    return -1;
}

/* The header's geometry as one layer's (every layer's without per-layer
 * records). */
void fmt_layer_geom_default(const fmt_hparams *hp, fmt_layer_geom *g)
{
    memset(g, 0, sizeof *g);
    g->n_heads = hp->n_heads;
    g->n_kv_heads = hp->n_kv_heads;
    g->head_dim = hp->head_dim;
    g->rope_dims = hp->rope_dims ? hp->rope_dims : hp->head_dim;
    g->rope_theta = hp->rope_theta;
    g->sliding_window = hp->sliding_window;
    g->rope_scale = (hp->rope_scaling == FMT_ROPE_LINEAR || hp->rope_scaling == FMT_ROPE_YARN)
                        ? 1.0f / hp->rope_factor : 1.0f;
}

void fmt_layer_geom_swa(const fmt_hparams *h, fmt_layer_geom *g, int swa, uint32_t window,
                        float theta_swa, int full_scale)
{
    fmt_layer_geom_default(h, g);
    if (swa) {
        g->sliding_window = window;
        g->rope_theta = theta_swa;
        if (full_scale)
            g->rope_scale = 1.0f;
    } else {
        g->sliding_window = 0;
    }
}

/* Whether layer l has a dense FFN, and whether it has routed experts:
 * every layer both ways but for DeepSeek's leading dense layers
 * (dense_lead) and layers whose record says no_experts. */
int fmt_layer_dense(const fmt_hparams *hp, unsigned l)
{
    return hp->ffn_dim && (!hp->dense_lead || l < hp->dense_lead);
}

int fmt_layer_moe(const fmt_hparams *hp, const fmt_layer_geom *g, unsigned l)
{
    return hp->n_experts && l >= hp->dense_lead && !(g && (g->flags & FMT_LG_NO_EXPERTS));
}

uint32_t fmt_layer_q_rows(const fmt_hparams *hp, const fmt_layer_geom *g)
{
    return g->n_heads * (hp->mla_rank ? hp->mla_nope + g->rope_dims : g->head_dim);
}

uint32_t fmt_layer_o_cols(const fmt_hparams *hp, const fmt_layer_geom *g)
{
    return g->n_heads * (hp->mla_rank ? hp->mla_v : g->head_dim);
}

int fmt_layer_has_v(const fmt_hparams *hp, const fmt_layer_geom *g)
{
    return !(g->flags & FMT_LG_KV_SHARED) && !hp->mla_rank;
}

float fmt_rope_attn_factor(const fmt_hparams *hp, float freq_scale)
{
    float af = 1.0f;
    if (hp->rope_scaling == FMT_ROPE_YARN) {
        const float factor = 1.0f / freq_scale;
        float mscale = 1.0f, mscale_all = hp->yarn_log_mul;
#define GET_MSCALE(sc, m) ((sc) <= 1.0f ? 1.0f : 0.1f * (m) * logf(sc) + 1.0f)
        if (mscale_all != 0.0f) {
            if (mscale_all != 1.0f)
                mscale = mscale_all;     /* DeepSeek-V2's, llama.cpp's special case */
            af = GET_MSCALE(factor, mscale) / GET_MSCALE(factor, mscale_all);
        } else {
            af = GET_MSCALE(factor, 1.0f);
        }
#undef GET_MSCALE
        af *= 1.0f / (1.0f + 0.1f * logf(factor));
    }
    return af * (hp->rope_attn_factor > 0.0f ? hp->rope_attn_factor : 1.0f);
}

/* llama.cpp's q.k scale of DeepSeek-V2 (its graph's kq_scale): mscale^2 /
 * sqrt(mla_nope + rope_dims), mscale = the context's attention factor
 * times 1 + 0.1 ln(factor), times 1 + 0.1 log_mul ln(factor); float, in
 * llama.cpp's order. */
void fmt_deepseek2_scale(fmt_hparams *h)
{
    const float freq_scale = h->rope_scaling == FMT_ROPE_YARN ? 1.0f / h->rope_factor : 1.0f;
    const float af = fmt_rope_attn_factor(h, freq_scale);
    const float org = af * (1.0f + 0.1f * logf(1.0f / freq_scale));
    const float mscale = org * (1.0f + 0.1f * h->yarn_log_mul * logf(1.0f / freq_scale));
    h->attn_scale = 1.0f * mscale * mscale / sqrtf((float)(h->mla_nope + h->rope_dims));
}

/* ---- the .cflow's slots: each entry's, of what kind and shape ---------- */

/* The globals' entry's slot s. */
static void global_slot(const fmt_hparams *hp, int s, int *kind, uint32_t *rows,
                        uint32_t *cols)
{
    switch (s) {
    case FMT_S_TOK_EMBD: *kind = FMT_K_TILED; *rows = hp->vocab_size; *cols = hp->dim; break;
    case FMT_S_OUT_NORM: *kind = FMT_K_VEC; *rows = hp->dim; *cols = 1; break;
    case FMT_S_OUTPUT:
        if (!(hp->flags & FMT_FLAG_TIED)) {
            *kind = FMT_K_TILED; *rows = hp->vocab_size; *cols = hp->dim;
        }
        break;
    case FMT_S_XSLOTS:
        if (hp->flags & FMT_FLAG_XSLOTS) {
            *kind = FMT_K_XSLOTS; *rows = FMT_NXSLOT; *cols = FMT_SLOT_SIZE;
        }
        break;
    case FMT_S_ROPE_SHORT:
    case FMT_S_ROPE_LONG:
        /* LongRoPE: short always, long where the model has it */
        if (hp->rope_scaling == FMT_ROPE_LONGROPE) {
            *kind = s == FMT_S_ROPE_SHORT ? FMT_K_VEC : -FMT_K_VEC;
            *rows = (hp->rope_dims ? hp->rope_dims : hp->head_dim) / 2; *cols = 1;
        }
        break;
    }
}

/* A layer's slots that the families add (post-norms, biases, sinks, shared
 * experts, MLA's parts, the geometry record).  A negative kind: optional,
 * empty or of that kind and shape. */
static void family_slot(const fmt_hparams *hp, const fmt_layer_geom *g, int s, int *kind,
                        uint32_t *rows, uint32_t *cols)
{
    const uint32_t E = hp->n_experts, ef = hp->expert_ffn_dim;
    const int opt = -FMT_K_VEC, optm = -FMT_K_F32MAT;
    switch (s) {
    case FMT_S_ATTN_POST_NORM:
    case FMT_S_FFN_POST_NORM:
    case FMT_S_O_BIAS: *kind = opt; *rows = hp->dim; *cols = 1; break;
    case FMT_S_SINKS: *kind = opt; *rows = g->n_heads; *cols = 1; break;
    case FMT_S_ROUTER_BIAS: *kind = opt; *rows = E; *cols = 1; break;
    case FMT_S_EXP_GU_BIAS: *kind = optm; *rows = 2 * E; *cols = ef; break;
    case FMT_S_EXP_DOWN_BIAS: *kind = optm; *rows = E; *cols = hp->dim; break;
    case FMT_S_SH_GATE:
    case FMT_S_SH_UP:
        if (hp->shared_ffn_dim) {
            *kind = FMT_K_TILED; *rows = hp->shared_ffn_dim; *cols = hp->dim;
        }
        break;
    case FMT_S_SH_DOWN:
        if (hp->shared_ffn_dim) {
            *kind = FMT_K_TILED; *rows = hp->dim; *cols = hp->shared_ffn_dim;
        }
        break;
    case FMT_S_KV_A_NORM:
        if (hp->mla_rank) {
            *kind = FMT_K_VEC; *rows = hp->mla_rank; *cols = 1;
        }
        break;
    case FMT_S_K_B:
        if (hp->mla_rank) {
            *kind = FMT_K_TILED; *rows = g->n_heads * hp->mla_rank; *cols = hp->mla_nope;
        }
        break;
    case FMT_S_V_B:
        if (hp->mla_rank) {
            *kind = FMT_K_TILED; *rows = g->n_heads * hp->mla_v; *cols = hp->mla_rank;
        }
        break;
    case FMT_S_Q_A_NORM:
        if (hp->mla_q_rank) {
            *kind = FMT_K_VEC; *rows = hp->mla_q_rank; *cols = 1;
        }
        break;
    case FMT_S_Q_B:
        if (hp->mla_q_rank) {
            *kind = FMT_K_TILED; *rows = fmt_layer_q_rows(hp, g); *cols = hp->mla_q_rank;
        }
        break;
    case FMT_S_LAYER_GEOM:
        if (hp->flags & FMT_FLAG_LAYER_GEOM) {
            *kind = FMT_K_LGEOM; *rows = 1; *cols = FMT_LGEOM_SIZE;
        }
        break;
    }
}

void fmt_slot_expect(const fmt_hparams *hp, const fmt_layer_geom *g, unsigned entry, int s,
                     int *kind, uint32_t *rows, uint32_t *cols)
{
    *kind = FMT_K_EMPTY;
    *rows = *cols = 0;
    if (entry == hp->n_layers) {
        global_slot(hp, s, kind, rows, cols);
        return;
    }
    uint32_t q = hp->mla_q_rank ? hp->mla_q_rank : fmt_layer_q_rows(hp, g);
    uint32_t kv = g->n_kv_heads * g->head_dim;
    uint32_t oc = fmt_layer_o_cols(hp, g);
    int shared = !fmt_layer_has_v(hp, g);
    uint32_t E = hp->n_experts, ef = hp->expert_ffn_dim;
    const int dense = fmt_layer_dense(hp, entry), moe = fmt_layer_moe(hp, g, entry);
    if (!dense && s >= FMT_S_FFN_NORM && s <= FMT_S_DOWN)
        return;
    if (!moe && ((s >= FMT_S_ROUTER && s <= FMT_S_EXP_DOWN) || s == FMT_S_MOE_NORM ||
                 (s >= FMT_S_ROUTER_BIAS && s <= FMT_S_SH_DOWN)))
        return;
    if (shared && s == FMT_S_V)
        return;
    switch (s) {
    case FMT_S_ATTN_NORM:
    case FMT_S_FFN_NORM:
    case FMT_S_MOE_NORM: *kind = FMT_K_VEC; *rows = hp->dim; *cols = 1; break;
    case FMT_S_ROUTER: *kind = FMT_K_F32MAT; *rows = E; *cols = hp->dim; break;
    case FMT_S_EXPERT_TABLE: *kind = FMT_K_EXPTABLE; *rows = E; *cols = 2; break;
    case FMT_S_EXP_GATE:
    case FMT_S_EXP_UP: *kind = FMT_K_TILED; *rows = ef; *cols = hp->dim; break;
    case FMT_S_EXP_DOWN: *kind = FMT_K_TILED; *rows = hp->dim; *cols = ef; break;
    case FMT_S_Q: *kind = FMT_K_TILED; *rows = q; *cols = hp->dim; break;
    case FMT_S_K:
    case FMT_S_V: *kind = FMT_K_TILED; *rows = kv; *cols = hp->dim; break;
    case FMT_S_O: *kind = FMT_K_TILED; *rows = hp->dim; *cols = oc; break;
    case FMT_S_GATE:
    case FMT_S_UP: *kind = FMT_K_TILED; *rows = hp->ffn_dim; *cols = hp->dim; break;
    case FMT_S_DOWN: *kind = FMT_K_TILED; *rows = hp->dim; *cols = hp->ffn_dim; break;
    case FMT_S_QKV_BIAS:
        if (hp->flags & FMT_FLAG_QKV_BIAS) {
            *kind = FMT_K_VEC; *rows = q + (shared ? 1 : 2) * kv; *cols = 1;
        }
        break;
    case FMT_S_Q_NORM:
    case FMT_S_K_NORM:
        /* per head, or the whole width (OLMoE): read_slot takes either */
        if (hp->flags & FMT_FLAG_QK_NORM) {
            *kind = FMT_K_VEC; *rows = g->head_dim; *cols = 1;
        }
        break;
    case FMT_S_XSLOTS:
        if (hp->flags & FMT_FLAG_XSLOTS) {
            *kind = FMT_K_XSLOTS; *rows = FMT_NXSLOT; *cols = FMT_SLOT_SIZE;
        }
        break;
    default:
        family_slot(hp, g, s, kind, rows, cols);
        break;
    }
}
