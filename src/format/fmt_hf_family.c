/*
 * fmt_hf_family.c — the model families' Hugging Face folders: what each
 * config.json says beyond fmt_hf.c's common geometry, and the tensors a
 * family's checkpoint does not hold as cflow reads them.
 *
 * The keys, per family (config.json; transformers' names):
 *   OlmoeForCausalLM   num_experts, num_experts_per_tok, intermediate_size
 *                      (each expert's FFN), norm_topk_prob (false: the
 *                      weights are the softmax as it is), clip_qkv (must be
 *                      null: no clamp is implemented); q_norm/k_norm are the
 *                      whole width
 *   Phi3ForCausalLM    qkv_proj and gate_up_proj fused (fmt_src_bind splits
 *                      them), partial_rotary_factor, rope_scaling {type
 *                      longrope|su, short_factor, long_factor}: the factors
 *                      become the rope_short/rope_long tensors here, and
 *                      LongRoPE's attention factor is llama.cpp converter's,
 *                      sqrt(1 + ln(s) / ln(original)) for s =
 *                      max_position_embeddings / original > 1;
 *                      original_max_position_embeddings
 *   Gemma2ForCausalLM, Gemma3ForCausalLM
 *                      query_pre_attn_scalar (q * its -1/2 power),
 *                      attn_logit_softcapping, final_logit_softcapping,
 *                      sliding_window with layer_types (or Gemma 3's
 *                      sliding_window_pattern, Gemma 2's every other layer),
 *                      rope_local_base_freq (Gemma 3's sliding layers),
 *                      rope_scaling {linear, factor} of the full layers;
 *                      every *norm.weight holds w - 1 (Gemma's RMSNorm
 *                      multiplies by 1 + w): the tensors' shift is 1
 *   GptOssForCausalLM  num_local_experts, num_experts_per_tok,
 *                      intermediate_size, sliding_window with layer_types,
 *                      swiglu_limit, rope_scaling {yarn, factor, beta_fast,
 *                      beta_slow, original_max_position_embeddings}; the
 *                      experts are stacked Linear-style: gate_up_proj [E,
 *                      dim, 2 ffn] with gate and up interleaved by column,
 *                      down_proj [E, ffn, dim], which gptoss_banks turns
 *                      into [E][rows][cols] banks in memory the source owns
 *                      (a checkpoint in MXFP4 blocks is refused by name)
 *   DeepseekV2ForCausalLM  kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim,
 *                      v_head_dim, q_lora_rank (null: V2-Lite's direct query;
 *                      else q_a_proj, q_a_layernorm, q_b_proj),
 *                      n_routed_experts, num_experts_per_tok,
 *                      moe_intermediate_size, n_shared_experts,
 *                      first_k_dense_replace, norm_topk_prob,
 *                      routed_scaling_factor, n_group and topk_group,
 *                      scoring_func softmax, rope_scaling {yarn, factor,
 *                      beta_fast, beta_slow, mscale_all_dim,
 *                      original_max_position_embeddings}; its RoPE turns
 *                      adjacent pairs (the checkpoint's layout, which
 *                      llama.cpp keeps); kv_b_proj [heads (nope + v), rank]
 *                      becomes k_b (each head's nope rows, transposed) and
 *                      v_b (its v rows), as llama.cpp's converter splits it
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/cflow_format.h"
#include "format/fmt_impl.h"

/* An error naming config.json and the key. */
static int bad_key(const fmt_hf_cfg *c, int code, const char *key, const char *why)
{
    fmt_err(c->err, c->errlen, "%s: %s %s", c->path, key, why);
    return code;
}

/* The same naming the value a key has (text: a string's, or a number's
 * digits). */
static int bad_val(const fmt_hf_cfg *c, int code, const char *key, const char *val,
                   const char *why)
{
    char nm[64];
    fmt_err(c->err, c->errlen, "%s: %s %s: %s", c->path, key,
            fmt_safe_name(nm, val, strlen(val)), why);
    return code;
}

/* The experts shared by OLMoE and gpt-oss: counts and each one's FFN. */
static int hf_experts(fmt_src *s, const fmt_hf_cfg *c, const char *count_key)
{
    fmt_hparams *h = &s->hp;
    if (fmt_hf_u32(c, count_key, &h->n_experts) < 0 ||
        fmt_hf_u32(c, "num_experts_per_tok", &h->top_k) < 0)
        return FMT_EFORMAT;
    if (!h->n_experts || !h->top_k)
        return bad_key(c, FMT_EFORMAT, count_key, "and num_experts_per_tok must be set");
    h->expert_ffn_dim = h->ffn_dim;
    h->ffn_dim = 0;
    return FMT_OK;
}

/* layer_types ["sliding_attention", "full_attention", ...] or a period:
 * each sliding layer gets window (and theta_swa), a full one the header's
 * geometry (and its RoPE scale when full_scale). */
static int hf_windows(fmt_src *s, const fmt_hf_cfg *c, uint32_t window, uint32_t period,
                      float theta_swa, int full_scale)
{
    fmt_hparams *h = &s->hp;
    int n_types = fmt_hf_str_at(c, "layer_types", 0, NULL);
    if (n_types < 0)
        return FMT_EFORMAT;
    if (n_types > 0 && (unsigned)n_types != h->n_layers)
        return bad_key(c, FMT_EFORMAT, "layer_types", "does not name every layer once");
    if (!window)
        return FMT_OK;
    if (window > h->max_seq)
        window = h->max_seq;
    s->lgeom = calloc(h->n_layers, sizeof *s->lgeom);
    if (!s->lgeom) {
        fmt_err(c->err, c->errlen, "%s: out of memory", c->path);
        return FMT_ENOMEM;
    }
    for (unsigned l = 0; l < h->n_layers; l++) {
        fmt_layer_geom *g = &s->lgeom[l];
        const char *ty = NULL;
        if (n_types > 0)
            fmt_hf_str_at(c, "layer_types", l, &ty);
        int swa = n_types > 0 ? ty && !strcmp(ty, "sliding_attention")
                              : period == 0 || l % period < period - 1;
        if (n_types > 0 && !swa && !(ty && !strcmp(ty, "full_attention")))
            return bad_key(c, FMT_EUNSUP, "layer_types", "names a layer type cflow does not "
                           "implement (sliding_attention, full_attention)");
        fmt_layer_geom_swa(h, g, swa, window, theta_swa, full_scale);
    }
    h->sliding_window = 0;
    h->flags |= FMT_FLAG_LAYER_GEOM;
    return FMT_OK;
}

/* rope_scaling of the families: none, linear (Gemma 3), yarn (gpt-oss),
 * longrope (Phi-3, below); anything else refused by name. */
static int hf_rope(fmt_src *s, const fmt_hf_cfg *c, int allowed)
{
    fmt_hparams *h = &s->hp;
    fmt_hf_cfg rs;
    int r = fmt_hf_obj(c, "rope_scaling", &rs);
    if (r <= 0)
        return r < 0 ? FMT_EFORMAT : FMT_OK;
    const char *t = fmt_hf_str(&rs, "rope_type");
    if (!t)
        t = fmt_hf_str(&rs, "type");
    int kind = !t || !strcmp(t, "default") ? FMT_ROPE_NONE
               : !strcmp(t, "linear") ? FMT_ROPE_LINEAR
               : !strcmp(t, "yarn") ? FMT_ROPE_YARN
               : !strcmp(t, "longrope") || !strcmp(t, "su") ? FMT_ROPE_LONGROPE : -1;
    if (kind < 0 || (kind && !(allowed >> kind & 1))) {
        char nm[64];
        fmt_err(c->err, c->errlen, "%s: rope_scaling type %s is not one cflow implements for "
                "%s", c->path, fmt_safe_name(nm, t, strlen(t)), h->arch);
        return FMT_EUNSUP;
    }
    h->rope_scaling = (uint8_t)kind;
    if (kind == FMT_ROPE_LINEAR || kind == FMT_ROPE_YARN) {
        if (fmt_hf_f32(&rs, "factor", &h->rope_factor) <= 0)
            return bad_key(c, FMT_EFORMAT, "rope_scaling.factor", "is missing");
        if (h->rope_factor == 1.0f && kind == FMT_ROPE_LINEAR)
            h->rope_scaling = FMT_ROPE_NONE;
    }
    if (kind == FMT_ROPE_YARN) {
        h->rope_orig_ctx = h->max_seq;
        if (fmt_hf_u32(&rs, "original_max_position_embeddings", &h->rope_orig_ctx) < 0 ||
            fmt_hf_f32(&rs, "beta_fast", &h->yarn_beta_fast) < 0 ||
            fmt_hf_f32(&rs, "beta_slow", &h->yarn_beta_slow) < 0)
            return FMT_EFORMAT;
    }
    return FMT_OK;
}

int fmt_hf_olmoe(fmt_src *s, const fmt_hf_cfg *c)
{
    int rc;
    float clip = 0.0f;
    if ((rc = hf_experts(s, c, "num_experts")) < 0 || (rc = hf_rope(s, c, 0)) < 0)
        return rc;
    if (fmt_hf_f32(c, "clip_qkv", &clip) < 0)
        return FMT_EFORMAT;
    if (clip != 0.0f) {
        char v[32];
        snprintf(v, sizeof v, "%g", (double)clip);
        return bad_val(c, FMT_EUNSUP, "clip_qkv", v, "cflow implements OLMoE without the "
                       "clamp of Q, K and V (null)");
    }
    if (fmt_hf_bool(c, "norm_topk_prob", 0))
        s->hp.flags &= ~(uint32_t)FMT_FLAG_MOE_NO_RENORM;
    /* llama.cpp's converter writes 1e-5 whatever the file says */
    s->hp.norm_eps = 1e-5f;
    return FMT_OK;
}

int fmt_hf_phi3(fmt_src *s, const fmt_hf_cfg *c)
{
    fmt_hparams *h = &s->hp;
    float prf = 1.0f;
    int rc;
    h->rope_orig_ctx = h->max_seq;
    if (fmt_hf_f32(c, "partial_rotary_factor", &prf) < 0 ||
        fmt_hf_u32(c, "original_max_position_embeddings", &h->rope_orig_ctx) < 0)
        return FMT_EFORMAT;
    if (!(prf > 0.0f && prf <= 1.0f))
        return bad_key(c, FMT_EFORMAT, "partial_rotary_factor", "is outside (0, 1]");
    uint32_t rd = (uint32_t)(prf * (float)h->dim) / h->n_heads;   /* the converter's */
    if (rd != h->head_dim)
        h->rope_dims = rd;
    if ((rc = hf_rope(s, c, 1 << FMT_ROPE_LONGROPE)) < 0)
        return rc;
    h->q_scale = 1.0f / sqrtf((float)h->head_dim);
    h->attn_scale = 1.0f;
    h->sliding_window = 0;             /* as llama.cpp: fmt_family.c's essay */
    if (h->rope_scaling == FMT_ROPE_LONGROPE) {
        float scale = (float)h->max_seq / (float)h->rope_orig_ctx;
        h->rope_attn_factor = scale > 1.0f ? sqrtf(1.0f + logf(scale) /
                                                    logf((float)h->rope_orig_ctx))
                                           : 1.0f;
    }
    return FMT_OK;
}

int fmt_hf_gemma(fmt_src *s, const fmt_hf_cfg *c)
{
    fmt_hparams *h = &s->hp;
    const int v3 = !strcmp(h->arch, "gemma3");
    float qpas = (float)h->head_dim, theta_swa = v3 ? 10000.0f : h->rope_theta;
    uint32_t window = v3 ? 0 : 4096, period = v3 ? 6 : 2;
    const char *act = fmt_hf_str(c, "hidden_activation");
    int rc;
    if (!act)
        act = fmt_hf_str(c, "hidden_act");
    if (act && strcmp(act, "gelu_pytorch_tanh") && strcmp(act, "gelu"))
        return bad_val(c, FMT_EUNSUP, "hidden_activation", act, "cflow implements "
                       "gelu_pytorch_tanh");
    if (fmt_hf_f32(c, "query_pre_attn_scalar", &qpas) < 0 ||
        fmt_hf_f32(c, "final_logit_softcapping", &h->softcap) < 0 ||
        fmt_hf_f32(c, "attn_logit_softcapping", &h->attn_softcap) < 0 ||
        fmt_hf_u32(c, "sliding_window", &window) < 0 ||
        fmt_hf_u32(c, "sliding_window_pattern", &period) < 0 ||
        fmt_hf_f32(c, "rope_local_base_freq", &theta_swa) < 0)
        return FMT_EFORMAT;
    if (!(qpas > 0.0f))
        return bad_key(c, FMT_EFORMAT, "query_pre_attn_scalar", "is not positive");
    if (v3 && h->attn_softcap != 0.0f) {
        char v[32];
        snprintf(v, sizeof v, "%g", (double)h->attn_softcap);
        return bad_val(c, FMT_EUNSUP, "attn_logit_softcapping", v, "Gemma 3 has none "
                       "(null)");
    }
    h->q_scale = 1.0f / sqrtf(qpas);
    h->attn_scale = 1.0f;
    if ((rc = hf_rope(s, c, 1 << FMT_ROPE_LINEAR)) < 0)
        return rc;
    /* Gemma ties its head to the embedding unless it says otherwise */
    return hf_windows(s, c, window, period, theta_swa, v3);
}

int fmt_hf_gptoss(fmt_src *s, const fmt_hf_cfg *c)
{
    fmt_hparams *h = &s->hp;
    uint32_t window = 0;
    fmt_hf_cfg q;
    int rc;
    h->swiglu_alpha = 1.702f;
    h->swiglu_limit = 7.0f;
    if ((rc = hf_experts(s, c, "num_local_experts")) < 0 ||
        fmt_hf_u32(c, "sliding_window", &window) < 0 ||
        fmt_hf_f32(c, "swiglu_limit", &h->swiglu_limit) < 0 ||
        (rc = hf_rope(s, c, 1 << FMT_ROPE_YARN)) < 0)
        return rc < 0 ? rc : FMT_EFORMAT;
    if (fmt_hf_obj(c, "quantization_config", &q) > 0)
        return bad_key(c, FMT_EUNSUP, "quantization_config", "is set: cflow reads gpt-oss "
                       "folders of unquantised experts (convert an MXFP4 checkpoint to GGUF "
                       "with llama.cpp's convert_hf_to_gguf.py)");
    if (!window)
        return bad_key(c, FMT_EFORMAT, "sliding_window", "is missing");
    return hf_windows(s, c, window, 2, h->rope_theta, 0);
}

int fmt_hf_deepseek2(fmt_src *s, const fmt_hf_cfg *c)
{
    fmt_hparams *h = &s->hp;
    uint32_t rope = 0, n_shared = 0;
    float scale = 0.0f;
    fmt_hf_cfg rs;
    int rc;
    if (fmt_hf_u32(c, "kv_lora_rank", &h->mla_rank) < 0 ||
        fmt_hf_u32(c, "qk_nope_head_dim", &h->mla_nope) < 0 ||
        fmt_hf_u32(c, "qk_rope_head_dim", &rope) < 0 ||
        fmt_hf_u32(c, "v_head_dim", &h->mla_v) < 0 ||
        fmt_hf_u32(c, "q_lora_rank", &h->mla_q_rank) < 0 ||
        fmt_hf_u32(c, "n_routed_experts", &h->n_experts) < 0 ||
        fmt_hf_u32(c, "num_experts_per_tok", &h->top_k) < 0 ||
        fmt_hf_u32(c, "moe_intermediate_size", &h->expert_ffn_dim) < 0 ||
        fmt_hf_u32(c, "n_shared_experts", &n_shared) < 0 ||
        fmt_hf_u32(c, "first_k_dense_replace", &h->dense_lead) < 0 ||
        fmt_hf_f32(c, "routed_scaling_factor", &scale) < 0 ||
        fmt_hf_u32(c, "n_group", &h->expert_groups) < 0 ||
        fmt_hf_u32(c, "topk_group", &h->expert_groups_used) < 0)
        return FMT_EFORMAT;
    if (!h->mla_rank || !h->mla_nope || !rope || !h->mla_v)
        return bad_key(c, FMT_EFORMAT, "kv_lora_rank", "and qk_nope_head_dim, qk_rope_head_dim, "
                       "v_head_dim must be set");
    const char *sf = fmt_hf_str(c, "scoring_func");
    if (sf && strcmp(sf, "softmax"))
        return bad_val(c, FMT_EUNSUP, "scoring_func", sf, "cflow implements DeepSeek-V2's "
                       "softmax routing");
    /* one KV head of the latent and the rotated key, turned in adjacent
     * pairs */
    h->n_kv_heads = 1;
    h->head_dim = h->mla_rank + rope;
    h->rope_dims = rope;
    h->flags &= ~(uint32_t)FMT_FLAG_ROPE_NEOX;
    h->shared_ffn_dim = n_shared * h->expert_ffn_dim;
    if (scale != 0.0f && scale != 1.0f)
        h->expert_scale = scale;
    if (h->expert_groups <= 1)
        h->expert_groups = h->expert_groups_used = 0;
    if (!h->dense_lead)
        h->ffn_dim = 0;                /* experts in every layer */
    if (fmt_hf_bool(c, "norm_topk_prob", 0))
        h->flags &= ~(uint32_t)FMT_FLAG_MOE_NO_RENORM;
    if ((rc = hf_rope(s, c, 1 << FMT_ROPE_YARN)) < 0)
        return rc;
    if (h->rope_scaling == FMT_ROPE_YARN && fmt_hf_obj(c, "rope_scaling", &rs) > 0) {
        float all = 0.0f;
        if (fmt_hf_f32(&rs, "mscale_all_dim", &all) < 0)
            return FMT_EFORMAT;
        /* the converter's 0.1 * mscale_all_dim as a float, llama.cpp's / 0.1 */
        if (all != 0.0f)
            h->yarn_log_mul = (float)(0.1 * (double)all) / 0.1f;
    }
    fmt_deepseek2_scale(h);
    return FMT_OK;
}

/* ---- tensors the checkpoints do not hold as cflow reads them ------------- */

/* Phi-3's LongRoPE factors: config.json's arrays as two f32 tensors. */
int fmt_hf_phi3_tensors(fmt_src *s, const fmt_hf_cfg *c)
{
    const fmt_hparams *h = &s->hp;
    static const char *const key[2] = { "short_factor", "long_factor" };
    static const char *const name[2] = { "rope_factors_short", "rope_factors_long" };
    fmt_hf_cfg rs;
    if (h->rope_scaling != FMT_ROPE_LONGROPE || fmt_hf_obj(c, "rope_scaling", &rs) <= 0)
        return FMT_OK;
    uint32_t n = (h->rope_dims ? h->rope_dims : h->head_dim) / 2;
    for (int i = 0; i < 2; i++) {
        float *v = fmt_src_own(s, n * sizeof *v, c->err, c->errlen);
        uint64_t ne[4] = { n, 1, 1, 1 };
        int r;
        if (!v)
            return FMT_ENOMEM;
        if ((r = fmt_hf_f32s(&rs, key[i], v, n)) <= 0)
            return r < 0 ? FMT_EFORMAT
                         : bad_key(c, FMT_EFORMAT, "rope_scaling", "has no short_factor and "
                                   "long_factor for longrope");
        if ((r = fmt_src_add_tensor(s, name[i], FMT_DT_F32, 1, ne, v, n * sizeof *v, c->err,
                                    c->errlen)) < 0)
            return r;
    }
    return FMT_OK;
}

/* Gemma's norms: the checkpoint's w - 1 read as w (llama.cpp's converter
 * adds the 1 the same way, to every tensor named *norm.weight). */
int fmt_hf_gemma_tensors(fmt_src *s, const fmt_hf_cfg *c)
{
    (void)c;
    for (size_t i = 0; i < s->n_tensors; i++) {
        size_t n = strlen(s->tensors[i].name);
        if (n >= 11 && !strcmp(s->tensors[i].name + n - 11, "norm.weight"))
            s->tensors[i].shift = 1.0f;
    }
    return FMT_OK;
}

/* Rows of a new [E][rows][cols] bank from a Linear-style [E][cols][w]
 * tensor t: out[e][r][k] = t[e][k][stride * r + off] (element size es);
 * the bank is added as a tensor named name.  gate_up: stride 2, off 0 and
 * 1; down_proj: stride 1, off 0 (a transpose). */
static int transpose_bank(fmt_src *s, const fmt_hf_cfg *c, const fmt_tensor *t,
                          uint64_t rows, unsigned stride, unsigned off, const char *name)
{
    unsigned es = fmt_dtype_block_bytes(t->dtype);
    uint64_t E = t->ne[2], cols = t->ne[1], w = t->ne[0];
    if (fmt_dtype_block(t->dtype) != 1 || w != stride * rows) {
        fmt_err(c->err, c->errlen, "%s: tensor '%s' is not a float bank of %llu x %u columns",
                s->path, t->name, (unsigned long long)rows, stride);
        return FMT_EFORMAT;
    }
    uint8_t *b = fmt_src_own(s, E * rows * cols * es, c->err, c->errlen);
    if (!b)
        return FMT_ENOMEM;
    const uint8_t *src = t->data;
    for (uint64_t e = 0; e < E; e++)
        for (uint64_t r = 0; r < rows; r++)
            for (uint64_t k = 0; k < cols; k++)
                memcpy(b + ((e * rows + r) * cols + k) * es,
                       src + ((e * cols + k) * w + stride * r + off) * es, es);
    uint64_t ne[4] = { cols, rows, E, 1 };
    return fmt_src_add_tensor(s, name, t->dtype, 3, ne, b, E * rows * cols * es, c->err,
                              c->errlen);
}

/* Gate/up biases [E][2 ffn], interleaved, into two [E][ffn]. */
static int split_bias(fmt_src *s, const fmt_hf_cfg *c, const fmt_tensor *t, unsigned off,
                      const char *name)
{
    unsigned es = fmt_dtype_block_bytes(t->dtype);
    uint64_t E = t->ne[1], n = t->ne[0] / 2;
    if (fmt_dtype_block(t->dtype) != 1 || t->ne[0] % 2 || t->ndim != 2) {
        fmt_err(c->err, c->errlen, "%s: tensor '%s' is not a float [E, 2 ffn] bias", s->path,
                t->name);
        return FMT_EFORMAT;
    }
    uint8_t *b = fmt_src_own(s, E * n * es, c->err, c->errlen);
    if (!b)
        return FMT_ENOMEM;
    for (uint64_t i = 0; i < E * n; i++)
        memcpy(b + i * es, (const uint8_t *)t->data + (2 * i + off) * es, es);
    uint64_t ne[4] = { n, E, 1, 1 };
    return fmt_src_add_tensor(s, name, t->dtype, 2, ne, b, E * n * es, c->err, c->errlen);
}

/* gpt-oss's experts per layer in cflow's layout (the essay). */
int fmt_hf_gptoss_tensors(fmt_src *s, const fmt_hf_cfg *c)
{
    const fmt_hparams *h = &s->hp;
    char n1[128], n2[128];
    int rc;
    for (unsigned l = 0; l < h->n_layers; l++) {
        const fmt_tensor *gu, *dn, *gb;
        snprintf(n1, sizeof n1, "model.layers.%u.mlp.experts.gate_up_proj_blocks", l);
        if (fmt_src_find(s, n1)) {
            fmt_err(c->err, c->errlen, "%s: tensor '%s': experts in MXFP4 blocks are read from "
                    "GGUF only", s->path, n1);
            return FMT_EUNSUP;
        }
        snprintf(n1, sizeof n1, "model.layers.%u.mlp.experts.gate_up_proj", l);
        snprintf(n2, sizeof n2, "model.layers.%u.mlp.experts.down_proj", l);
        if (!(gu = fmt_src_find(s, n1)) || !(dn = fmt_src_find(s, n2))) {
            fmt_err(c->err, c->errlen, "%s: tensor '%s' is missing", s->path, gu ? n2 : n1);
            return FMT_EFORMAT;
        }
        /* (each add may move s->tensors: names, not pointers, between them) */
        fmt_tensor g = *gu, d = *dn;
        snprintf(n1, sizeof n1, "model.layers.%u.mlp.experts.gate_proj.weight", l);
        if ((rc = transpose_bank(s, c, &g, h->expert_ffn_dim, 2, 0, n1)) < 0)
            return rc;
        snprintf(n1, sizeof n1, "model.layers.%u.mlp.experts.up_proj.weight", l);
        if ((rc = transpose_bank(s, c, &g, h->expert_ffn_dim, 2, 1, n1)) < 0)
            return rc;
        snprintf(n1, sizeof n1, "model.layers.%u.mlp.experts.down_proj.weight", l);
        if ((rc = transpose_bank(s, c, &d, h->dim, 1, 0, n1)) < 0)
            return rc;
        snprintf(n1, sizeof n1, "model.layers.%u.mlp.experts.gate_up_proj_bias", l);
        if (!(gb = fmt_src_find(s, n1)))
            continue;
        fmt_tensor b = *gb;
        snprintf(n1, sizeof n1, "model.layers.%u.mlp.experts.gate_proj.bias", l);
        snprintf(n2, sizeof n2, "model.layers.%u.mlp.experts.up_proj.bias", l);
        if ((rc = split_bias(s, c, &b, 0, n1)) < 0 || (rc = split_bias(s, c, &b, 1, n2)) < 0)
            return rc;
    }
    return FMT_OK;
}

/* DeepSeek-V2's kv_b_proj of each layer as k_b [heads][rank][nope] (each
 * head's first nope rows, transposed) and v_b [heads][v][rank] (its next v
 * rows). */
int fmt_hf_deepseek2_tensors(fmt_src *s, const fmt_hf_cfg *c)
{
    const fmt_hparams *h = &s->hp;
    const uint64_t H = h->n_heads, R = h->mla_rank, N = h->mla_nope, V = h->mla_v;
    char nm[128];
    int rc;
    for (unsigned l = 0; l < h->n_layers; l++) {
        snprintf(nm, sizeof nm, "model.layers.%u.self_attn.kv_b_proj.weight", l);
        const fmt_tensor *t = fmt_src_find(s, nm);
        if (!t) {
            fmt_err(c->err, c->errlen, "%s: tensor '%s' is missing", s->path, nm);
            return FMT_EFORMAT;
        }
        const fmt_tensor kv = *t;   /* (adds may move s->tensors) */
        unsigned es = fmt_dtype_block_bytes(kv.dtype);
        if (fmt_dtype_block(kv.dtype) != 1 || kv.ndim != 2 || kv.ne[0] != R ||
            kv.ne[1] != H * (N + V)) {
            fmt_err(c->err, c->errlen, "%s: tensor '%s' is not a float [%llu, %llu] matrix",
                    s->path, nm, (unsigned long long)(H * (N + V)), (unsigned long long)R);
            return FMT_EFORMAT;
        }
        uint8_t *kb = fmt_src_own(s, H * R * N * es, c->err, c->errlen);
        uint8_t *vb = kb ? fmt_src_own(s, H * V * R * es, c->err, c->errlen) : NULL;
        if (!vb)
            return FMT_ENOMEM;
        const uint8_t *src = kv.data;
        for (uint64_t hh = 0; hh < H; hh++) {
            const uint8_t *blk = src + hh * (N + V) * R * es;
            for (uint64_t r = 0; r < R; r++)
                for (uint64_t j = 0; j < N; j++)
                    memcpy(kb + ((hh * R + r) * N + j) * es, blk + (j * R + r) * es, es);
            memcpy(vb + hh * V * R * es, blk + N * R * es, V * R * es);
        }
        uint64_t nk[4] = { N, R, H, 1 }, nv[4] = { R, V, H, 1 };
        snprintf(nm, sizeof nm, "model.layers.%u.self_attn.k_b_proj.weight", l);
        if ((rc = fmt_src_add_tensor(s, nm, kv.dtype, 3, nk, kb, H * R * N * es, c->err,
                                     c->errlen)) < 0)
            return rc;
        snprintf(nm, sizeof nm, "model.layers.%u.self_attn.v_b_proj.weight", l);
        if ((rc = fmt_src_add_tensor(s, nm, kv.dtype, 3, nv, vb, H * V * R * es, c->err,
                                     c->errlen)) < 0)
            return rc;
    }
    return FMT_OK;
}

/* The names of each family's tensors that differ from fmt_hf.c's. */
#define HF_STACK "model.layers.%u.mlp.experts."
const fmt_role_names fmt_hf_olmoe_names = {
    [FMT_R_ROUTER] = "model.layers.%u.mlp.gate.weight",
    [FMT_R_EXP_GATE] = HF_STACK "gate_proj.weight",
    [FMT_R_EXP_UP] = HF_STACK "up_proj.weight",
    [FMT_R_EXP_DOWN] = HF_STACK "down_proj.weight",
};

const fmt_role_names fmt_hf_phi3_names = {
    [FMT_R_QKV] = "model.layers.%u.self_attn.qkv_proj.weight",
    [FMT_R_GATE_UP] = "model.layers.%u.mlp.gate_up_proj.weight",
    [FMT_R_GATE] = "", [FMT_R_UP] = "",
    [FMT_R_ROPE_SHORT] = "rope_factors_short", [FMT_R_ROPE_LONG] = "rope_factors_long",
};

const fmt_role_names fmt_hf_gemma_names = {
    [FMT_R_ATTN_POST_NORM] = "model.layers.%u.post_attention_layernorm.weight",
    [FMT_R_FFN_NORM] = "model.layers.%u.pre_feedforward_layernorm.weight",
    [FMT_R_FFN_POST_NORM] = "model.layers.%u.post_feedforward_layernorm.weight",
};

const fmt_role_names fmt_hf_gptoss_names = {
    [FMT_R_O_BIAS] = "model.layers.%u.self_attn.o_proj.bias",
    [FMT_R_SINKS] = "model.layers.%u.self_attn.sinks",
    [FMT_R_ROUTER] = "model.layers.%u.mlp.router.weight",
    [FMT_R_ROUTER_BIAS] = "model.layers.%u.mlp.router.bias",
    [FMT_R_EXP_GATE] = HF_STACK "gate_proj.weight",
    [FMT_R_EXP_UP] = HF_STACK "up_proj.weight",
    [FMT_R_EXP_DOWN] = HF_STACK "down_proj.weight",
    [FMT_R_EXP_GATE_BIAS] = HF_STACK "gate_proj.bias",
    [FMT_R_EXP_UP_BIAS] = HF_STACK "up_proj.bias",
    [FMT_R_EXP_DOWN_BIAS] = HF_STACK "down_proj_bias",
};

const fmt_role_names fmt_hf_deepseek2_names = {
    [FMT_R_K] = "model.layers.%u.self_attn.kv_a_proj_with_mqa.weight",
    [FMT_R_Q_A] = "model.layers.%u.self_attn.q_a_proj.weight",
    [FMT_R_Q_A_NORM] = "model.layers.%u.self_attn.q_a_layernorm.weight",
    [FMT_R_Q_B] = "model.layers.%u.self_attn.q_b_proj.weight",
    [FMT_R_KV_A_NORM] = "model.layers.%u.self_attn.kv_a_layernorm.weight",
    [FMT_R_K_B] = "model.layers.%u.self_attn.k_b_proj.weight",
    [FMT_R_V_B] = "model.layers.%u.self_attn.v_b_proj.weight",
    [FMT_R_ROUTER] = "model.layers.%u.mlp.gate.weight",
    [FMT_R_EXP_GATE] = HF_STACK "gate_proj.weight",
    [FMT_R_EXP_UP] = HF_STACK "up_proj.weight",
    [FMT_R_EXP_DOWN] = HF_STACK "down_proj.weight",
    [FMT_R_SH_GATE] = "model.layers.%u.mlp.shared_experts.gate_proj.weight",
    [FMT_R_SH_UP] = "model.layers.%u.mlp.shared_experts.up_proj.weight",
    [FMT_R_SH_DOWN] = "model.layers.%u.mlp.shared_experts.down_proj.weight",
};
