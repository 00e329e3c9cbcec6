/*
 * fmt_family.c — what differs per model family, in one table.
 *
 * A family is an architecture as llama.cpp defines it (its
 * general.architecture name) and as Hugging Face names it (config.json's
 * architectures[0] and model_type).  Its entry says everything cflow does
 * differently for it:
 *
 *   flags          FMT_FLAG_* every model of it has (split-half RoPE,
 *                  embeddings times sqrt(dim), ...)
 *   act, gating    the FFN's gated activation and how router logits become
 *                  expert weights (enum fmt_act, enum fmt_gating)
 *   gguf           the family's own GGUF keys into fmt_hparams, once the
 *                  common ones (fmt_src_gguf.c) are read
 *   gguf_names     GGUF tensor names that differ from fmt_gguf_role_names
 *   hf, hf_names   the same for a config.json (fmt_hf_family.c)
 *
 * Everything a family sets lands in fmt_hparams and in the file's tensors,
 * so the .cflow it converts to describes itself: the engine reads the
 * fields (ffn_act, gating, q_scale, per-layer windows ...) and the slots
 * present, never the architecture's name, and picks each variant from a
 * table of its own indexed by the field (eng_family.c).
 *
 * What each family is, as llama.cpp builds it (src/models/<arch>.cpp):
 *   llama     Llama, Mistral, Mixtral (experts without a dense FFN)
 *   qwen2     Llama with Q/K/V biases, split-half RoPE
 *   qwen3     per-head RMSNorm of Q and K
 *   qwen3moe  qwen3 with experts, renormalised unless expert_weights_norm
 *   olmoe     Mixtral-like experts, RMSNorm of all of Q and of K (the whole
 *             width), split-half RoPE, weights never renormalised
 *   phi3      fused QKV and gate/up (split here into views), q scaled by
 *             1/sqrt(head_dim) before attention, partial RoPE, LongRoPE
 *             divisors; its sliding window is read and not applied, as
 *             llama.cpp disables it ("Phi SWA is currently disabled")
 *   gemma2    embeddings * sqrt(dim), RMSNorm after attention and after the
 *             FFN too, GeGLU, q scaled by query_pre_attn_scalar^-1/2,
 *             attention and final logit soft-capping, every other layer
 *             sliding (period 2, window 4096 unless set)
 *   gemma3    gemma2's layer with per-head Q/K norms, no attention soft-cap,
 *             five sliding layers in six with their own RoPE base (10000
 *             unless set), linear RoPE scaling on the full layers only
 *   gpt-oss   attention sinks, biases on Q/K/V/O, router and experts,
 *             alternate sliding (window from the file) and full layers,
 *             YaRN, the clamped SwiGLU (alpha 1.702, limit 7), top-k of the
 *             logits then their softmax
 *   deepseek2 multi-head latent attention as llama.cpp runs it (absorbed:
 *             one KV head of the normed latent and the rotated key, k_b and
 *             v_b per head; the GGUF's split attn_k_b/attn_v_b, not the old
 *             attn_kv_b), Q direct (V2-Lite) or through the low-rank pair
 *             attn_q_a, its norm and attn_q_b (V2, where the file has them),
 *             first_k_dense_replace dense layers, shared experts beside the
 *             routed ones, softmax routing not renormalised unless
 *             expert_weights_norm, the routed scale, group-limited top-k,
 *             YaRN with mscale_all_dim: the q.k scale mscale^2 / sqrt(q/k
 *             head), adjacent-pair RoPE of the rotated part alone
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/cflow_format.h"
#include "format/fmt_impl.h"

/* ---- GGUF keys ----------------------------------------------------------- */

/* Sliding windows by a pattern: every layer slides over `window` positions
 * but every `period`-th (llama.cpp's set_swa_pattern: layer l slides when
 * l % period < period - 1; period 0: all of them), or by the per-layer
 * booleans of an array key; sliding layers turn at base theta_swa, full
 * ones at the header's base and the header's RoPE scale (full_scale: the
 * scale applies to the full layers alone, Gemma 3's linear factor). */
static int swa_layers(fmt_src *s, uint32_t window, uint32_t period, float theta_swa,
                      int full_scale, char *err, size_t errlen)
{
    fmt_hparams *h = &s->hp;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", h->arch);
    int arr = 0;
    int ty = fmt_kv_type_of(s->kv, key, &arr);
    if (ty >= 0 && arr && fmt_kv_arr_len(s->kv, key) != h->n_layers) {
        fmt_err(err, errlen, "%s: metadata %s holds %llu values for %u layers", s->path, key,
                (unsigned long long)fmt_kv_arr_len(s->kv, key), h->n_layers);
        return FMT_EFORMAT;
    }
    if (ty >= 0 && !arr && fmt_gguf_key_u32(s, "attention.sliding_window_pattern", &period, 0,
                                            err, errlen) < 0)
        return FMT_EFORMAT;
    if (window == 0)
        return FMT_OK;
    if (window > h->max_seq)
        window = h->max_seq;           /* a window past the context is none */
    s->lgeom = calloc(h->n_layers, sizeof *s->lgeom);
    if (!s->lgeom) {
        fmt_err(err, errlen, "%s: out of memory", s->path);
        return FMT_ENOMEM;
    }
    for (unsigned l = 0; l < h->n_layers; l++) {
        int swa;
        if (ty >= 0 && arr) {
            /* (bool arrays are read as integers) */
            int32_t b = 0;
            if (fmt_kv_arr_i32(s->kv, key, l, &b) < 0) {
                fmt_err(err, errlen, "%s: metadata %s[%u] is not a boolean", s->path, key, l);
                return FMT_EFORMAT;
            }
            swa = b != 0;
        } else {
            swa = period == 0 || l % period < period - 1;
        }
        fmt_layer_geom_swa(h, &s->lgeom[l], swa, window, theta_swa, full_scale);
    }
    h->sliding_window = 0;
    h->flags |= FMT_FLAG_LAYER_GEOM;
    return FMT_OK;
}

/* RoPE scaling: rope.scaling.type none, linear, yarn, longrope (llama3 is
 * fmt_src_gguf.c's, with its divisor tensor); llama.cpp's default is linear
 * with no factor, no scaling at all.  The families without keys of their
 * own read this alone. */
int fmt_family_gguf_rope(fmt_src *s, char *err, size_t errlen)
{
    fmt_hparams *h = &s->hp;
    char key[128];
    size_t tl = 0;
    snprintf(key, sizeof key, "%s.rope.scaling.type", h->arch);
    const char *type = fmt_kv_get_str(s->kv, key, &tl);
    float factor = 0.0f;
    int rc;
    if ((type && tl == 6 && !memcmp(type, "llama3", 6)) || fmt_src_find(s, "rope_freqs.weight"))
        return FMT_OK;                 /* Llama 3's: fmt_src_gguf.c */
    if ((rc = fmt_gguf_key_f32(s, "rope.scaling.factor", &factor, err, errlen)) < 0 ||
        (rc = fmt_gguf_key_f32(s, "rope.scaling.attn_factor", &h->rope_attn_factor, err,
                               errlen)) < 0)
        return rc;
    if (!type || (tl == 6 && !memcmp(type, "linear", 6))) {
        if (factor != 0.0f && factor != 1.0f) {
            h->rope_scaling = FMT_ROPE_LINEAR;
            h->rope_factor = factor;
        }
    } else if (tl == 4 && !memcmp(type, "yarn", 4)) {
        float ext = 1.0f;
        h->rope_scaling = FMT_ROPE_YARN;
        h->rope_factor = factor;
        h->rope_orig_ctx = h->max_seq;
        if ((rc = fmt_gguf_key_u32(s, "rope.scaling.original_context_length", &h->rope_orig_ctx,
                                   0, err, errlen)) < 0 ||
            (rc = fmt_gguf_key_f32(s, "rope.scaling.yarn_beta_fast", &h->yarn_beta_fast, err,
                                   errlen)) < 0 ||
            (rc = fmt_gguf_key_f32(s, "rope.scaling.yarn_beta_slow", &h->yarn_beta_slow, err,
                                   errlen)) < 0 ||
            (rc = fmt_gguf_key_f32(s, "rope.scaling.yarn_log_multiplier", &h->yarn_log_mul, err,
                                   errlen)) < 0 ||
            (rc = fmt_gguf_key_f32(s, "rope.scaling.yarn_ext_factor", &ext, err, errlen)) < 0)
            return rc;
        if (ext != 1.0f) {
            fmt_err(err, errlen, "%s: metadata %s.rope.scaling.yarn_ext_factor %g: cflow "
                    "implements YaRN's extrapolation factor 1 only", s->path, h->arch,
                    (double)ext);
            return FMT_EUNSUP;
        }
    } else if (tl == 8 && !memcmp(type, "longrope", 8)) {
        h->rope_scaling = FMT_ROPE_LONGROPE;
    } else if (!(tl == 4 && !memcmp(type, "none", 4))) {
        char nm[64];
        fmt_err(err, errlen, "%s: metadata %s '%s' is not a RoPE scaling cflow implements "
                "(none, linear, yarn, longrope, llama3)", s->path, key,
                fmt_safe_name(nm, type, tl));
        return FMT_EUNSUP;
    }
    /* Phi-3's divisors make LongRoPE whatever the type says (llama.cpp
     * reads them when present) */
    if (fmt_src_find(s, "rope_factors_short.weight") || fmt_src_find(s, "rope_factors_long.weight")) {
        if (h->rope_scaling != FMT_ROPE_NONE && h->rope_scaling != FMT_ROPE_LONGROPE) {
            fmt_err(err, errlen, "%s: rope_factors tensors beside RoPE scaling '%.*s'", s->path,
                    (int)tl, type);
            return FMT_EUNSUP;
        }
        h->rope_scaling = FMT_ROPE_LONGROPE;
        if ((rc = fmt_gguf_key_u32(s, "rope.scaling.original_context_length", &h->rope_orig_ctx,
                                   0, err, errlen)) < 0)
            return rc;
        if (!h->rope_orig_ctx)
            h->rope_orig_ctx = h->max_seq;
    }
    return FMT_OK;
}

static int olmoe_gguf(fmt_src *s, char *err, size_t errlen)
{
    return fmt_family_gguf_rope(s, err, errlen);
}

/* Phi-3: q * 1/sqrt(head_dim), then attention at scale 1 (llama.cpp
 * scales Qcur before build_attn with kq_scale 1). */
static int phi3_gguf(fmt_src *s, char *err, size_t errlen)
{
    fmt_hparams *h = &s->hp;
    h->q_scale = 1.0f / sqrtf((float)h->head_dim);
    h->attn_scale = 1.0f;
    h->sliding_window = 0;             /* read, not applied: see the essay */
    return fmt_family_gguf_rope(s, err, errlen);
}

/* Gemma 2 and 3: the query scale llama.cpp takes (1/sqrt(dim / heads) for
 * the 27B models it knows by their layer count, 46 and 62, else
 * 1/sqrt(head_dim)), soft-caps, the sliding pattern. */
static int gemma_gguf(fmt_src *s, int v3, char *err, size_t errlen)
{
    fmt_hparams *h = &s->hp;
    uint32_t window = v3 ? 0 : 4096, period = v3 ? 6 : 2;
    float theta_swa = v3 ? 10000.0f : h->rope_theta;
    int rc;
    h->q_scale = h->n_layers == (v3 ? 62u : 46u)
                     ? 1.0f / sqrtf((float)(h->dim / h->n_heads))
                     : 1.0f / sqrtf((float)h->head_dim);
    h->attn_scale = 1.0f;
    if ((rc = fmt_gguf_key_f32(s, "final_logit_softcapping", &h->softcap, err, errlen)) < 0 ||
        (!v3 && (rc = fmt_gguf_key_f32(s, "attn_logit_softcapping", &h->attn_softcap, err,
                                       errlen)) < 0) ||
        (rc = fmt_gguf_key_u32(s, "attention.sliding_window", &window, 0, err, errlen)) < 0 ||
        (rc = fmt_gguf_key_f32(s, "rope.freq_base_swa", &theta_swa, err, errlen)) < 0 ||
        (rc = fmt_family_gguf_rope(s, err, errlen)) < 0)
        return rc;
    if (!v3 && h->attn_softcap == 0.0f)
        h->attn_softcap = 50.0f;       /* llama.cpp's default for Gemma 2 */
    if (!v3 && h->softcap == 0.0f)
        h->softcap = 30.0f;
    if (h->rope_scaling != FMT_ROPE_NONE && h->rope_scaling != FMT_ROPE_LINEAR) {
        fmt_err(err, errlen, "%s: Gemma with RoPE scaling %u: cflow implements linear scaling "
                "only", s->path, h->rope_scaling);
        return FMT_EUNSUP;
    }
    return swa_layers(s, window, period, theta_swa, v3, err, errlen);
}

static int gemma2_gguf(fmt_src *s, char *err, size_t errlen)
{
    return gemma_gguf(s, 0, err, errlen);
}

static int gemma3_gguf(fmt_src *s, char *err, size_t errlen)
{
    return gemma_gguf(s, 1, err, errlen);
}

/* gpt-oss: the window is required, every other layer slides. */
static int gptoss_gguf(fmt_src *s, char *err, size_t errlen)
{
    fmt_hparams *h = &s->hp;
    uint32_t window = 0;
    float theta_swa = h->rope_theta;
    int rc;
    h->swiglu_alpha = 1.702f;
    h->swiglu_limit = 7.0f;
    if ((rc = fmt_gguf_key_u32(s, "attention.sliding_window", &window, 1, err, errlen)) < 0 ||
        (rc = fmt_gguf_key_u32(s, "expert_feed_forward_length", &h->expert_ffn_dim, 1, err,
                               errlen)) < 0 ||
        (rc = fmt_gguf_key_f32(s, "rope.freq_base_swa", &theta_swa, err, errlen)) < 0 ||
        (rc = fmt_family_gguf_rope(s, err, errlen)) < 0)
        return rc;
    if (h->rope_scaling == FMT_ROPE_LONGROPE) {
        fmt_err(err, errlen, "%s: gpt-oss with LongRoPE is not a model cflow knows", s->path);
        return FMT_EUNSUP;
    }
    h->ffn_dim = 0;                    /* experts alone, no dense FFN */
    return swa_layers(s, window, 2, theta_swa, 0, err, errlen);
}

/* DeepSeek-V2: the latent attention's sizes, the experts' extras, YaRN's
 * log multiplier (the converter writes 0.1 mscale_all_dim; llama.cpp
 * divides by 0.1 again) and the q.k scale llama.cpp's graph takes. */
static int deepseek2_gguf(fmt_src *s, char *err, size_t errlen)
{
    fmt_hparams *h = &s->hp;
    uint32_t q_lora = 0, kl_mla = 0, vl_mla = 0, n_shared = 0, gating = 0;
    float scale = 0.0f;
    int rc;
    char k[128];
    if ((rc = fmt_gguf_key_u32(s, "attention.q_lora_rank", &q_lora, 0, err, errlen)) < 0 ||
        (rc = fmt_gguf_key_u32(s, "attention.kv_lora_rank", &h->mla_rank, 1, err, errlen)) < 0 ||
        (rc = fmt_gguf_key_u32(s, "attention.key_length_mla", &kl_mla, 0, err, errlen)) < 0 ||
        (rc = fmt_gguf_key_u32(s, "attention.value_length_mla", &vl_mla, 0, err, errlen)) < 0 ||
        (rc = fmt_gguf_key_u32(s, "leading_dense_block_count", &h->dense_lead, 0, err,
                               errlen)) < 0 ||
        (rc = fmt_gguf_key_u32(s, "expert_shared_count", &n_shared, 0, err, errlen)) < 0 ||
        (rc = fmt_gguf_key_u32(s, "expert_gating_func", &gating, 0, err, errlen)) < 0 ||
        (rc = fmt_gguf_key_f32(s, "expert_weights_scale", &scale, err, errlen)) < 0 ||
        (rc = fmt_gguf_key_u32(s, "expert_group_count", &h->expert_groups, 0, err, errlen)) < 0 ||
        (rc = fmt_gguf_key_u32(s, "expert_group_used_count", &h->expert_groups_used, 0, err,
                               errlen)) < 0 ||
        (rc = fmt_family_gguf_rope(s, err, errlen)) < 0)
        return rc;
    /* the low-rank query where the tensors are there (llama.cpp takes it
     * by the layer count: V2-Lite's 27 layers project q directly) */
    if (fmt_src_find(s, "blk.0.attn_q_a.weight")) {
        if (!q_lora) {
            fmt_err(err, errlen, "%s: tensor blk.0.attn_q_a.weight without metadata "
                    "%s.attention.q_lora_rank", s->path, h->arch);
            return FMT_EFORMAT;
        }
        h->mla_q_rank = q_lora;
    }
    if (!kl_mla || !vl_mla || fmt_src_find(s, "blk.0.attn_kv_b.weight")) {
        fmt_err(err, errlen, "%s: metadata %s.attention.key_length_mla %u, value_length_mla %u: "
                "a GGUF with the unsplit attn_kv_b (convert the model again with a llama.cpp "
                "of 2025 or later: cflow runs the absorbed attention)", s->path, h->arch,
                kl_mla, vl_mla);
        return FMT_EUNSUP;
    }
    if (gating > 1) {
        fmt_err(err, errlen, "%s: metadata %s.expert_gating_func %u: cflow implements the "
                "softmax (1) only", s->path, h->arch, gating);
        return FMT_EUNSUP;
    }
    if (h->rope_scaling != FMT_ROPE_NONE && h->rope_scaling != FMT_ROPE_YARN) {
        fmt_err(err, errlen, "%s: DeepSeek-V2 with RoPE scaling %u: cflow implements YaRN only",
                s->path, h->rope_scaling);
        return FMT_EUNSUP;
    }
    if (!h->rope_dims || kl_mla <= h->rope_dims) {
        fmt_err(err, errlen, "%s: metadata %s.attention.key_length_mla %u: not more than the "
                "%u rotated dimensions", s->path, h->arch, kl_mla, h->rope_dims);
        return FMT_EFORMAT;
    }
    h->mla_nope = kl_mla - h->rope_dims;
    h->mla_v = vl_mla;
    h->shared_ffn_dim = n_shared * h->expert_ffn_dim;
    if (scale != 0.0f && scale != 1.0f)
        h->expert_scale = scale;       /* (llama.cpp skips a scale of 1) */
    if (h->expert_groups <= 1)
        h->expert_groups = h->expert_groups_used = 0;
    /* not renormalised unless the file says so (llama.cpp's default) */
    int norm = 0;
    snprintf(k, sizeof k, "%s.expert_weights_norm", h->arch);
    if (fmt_kv_has(s->kv, k) && fmt_kv_get_bool(s->kv, k, &norm) < 0) {
        fmt_err(err, errlen, "%s: metadata %s is not a boolean", s->path, k);
        return FMT_EFORMAT;
    }
    if (norm)
        h->flags &= ~(uint32_t)FMT_FLAG_MOE_NO_RENORM;
    if (h->yarn_log_mul != 0.0f)
        h->yarn_log_mul /= 0.1f;
    fmt_deepseek2_scale(h);
    return FMT_OK;
}

/* ---- tensor names that differ from the common ones ----------------------- */

static const fmt_role_names phi3_names = {
    [FMT_R_QKV] = "blk.%u.attn_qkv.weight",
    [FMT_R_GATE_UP] = "blk.%u.ffn_up.weight",   /* gate rows, then up rows */
    [FMT_R_UP] = "",                             /* (that name is the fused one) */
    [FMT_R_ROPE_SHORT] = "rope_factors_short.weight",
    [FMT_R_ROPE_LONG] = "rope_factors_long.weight",
};

static const fmt_role_names gemma_names = {
    [FMT_R_ATTN_POST_NORM] = "blk.%u.post_attention_norm.weight",
    [FMT_R_FFN_POST_NORM] = "blk.%u.post_ffw_norm.weight",
};

/* gpt-oss calls the MoE's input norm post_attention_norm */
static const fmt_role_names gptoss_names = {
    [FMT_R_FFN_NORM] = "blk.%u.post_attention_norm.weight",
    [FMT_R_SINKS] = "blk.%u.attn_sinks.weight",
    [FMT_R_O_BIAS] = "blk.%u.attn_output.bias",
    [FMT_R_ROUTER_BIAS] = "blk.%u.ffn_gate_inp.bias",
    [FMT_R_EXP_GATE_BIAS] = "blk.%u.ffn_gate_exps.bias",
    [FMT_R_EXP_UP_BIAS] = "blk.%u.ffn_up_exps.bias",
    [FMT_R_EXP_DOWN_BIAS] = "blk.%u.ffn_down_exps.bias",
};

/* DeepSeek-V2: the latent attention's projections take the K slot (the
 * latent and the rotated key) and slots of their own */
static const fmt_role_names deepseek2_names = {
    [FMT_R_K] = "blk.%u.attn_kv_a_mqa.weight",
    [FMT_R_Q_A] = "blk.%u.attn_q_a.weight",
    [FMT_R_Q_A_NORM] = "blk.%u.attn_q_a_norm.weight",
    [FMT_R_Q_B] = "blk.%u.attn_q_b.weight",
    [FMT_R_KV_A_NORM] = "blk.%u.attn_kv_a_norm.weight",
    [FMT_R_K_B] = "blk.%u.attn_k_b.weight",
    [FMT_R_V_B] = "blk.%u.attn_v_b.weight",
    [FMT_R_SH_GATE] = "blk.%u.ffn_gate_shexp.weight",
    [FMT_R_SH_UP] = "blk.%u.ffn_up_shexp.weight",
    [FMT_R_SH_DOWN] = "blk.%u.ffn_down_shexp.weight",
};

/* ---- the table ------------------------------------------------------------ */

static const fmt_family families[] = {
    { .arch = "llama", .hf_arch = "LlamaForCausalLM", .hf_type = "llama", .full_rope = 1 },
    { .arch = "qwen2", .hf_arch = "Qwen2ForCausalLM", .hf_type = "qwen2",
      .flags = FMT_FLAG_ROPE_NEOX },
    { .arch = "qwen3", .hf_arch = "Qwen3ForCausalLM", .hf_type = "qwen3",
      .flags = FMT_FLAG_ROPE_NEOX },
    { .arch = "qwen3moe", .hf_arch = "Qwen3MoeForCausalLM", .hf_type = "qwen3_moe",
      .flags = FMT_FLAG_ROPE_NEOX },
    { .arch = "olmoe", .peer_ggml = 1, .hf_arch = "OlmoeForCausalLM", .hf_type = "olmoe",
      .flags = FMT_FLAG_ROPE_NEOX | FMT_FLAG_MOE_NO_RENORM, .gguf = olmoe_gguf,
      .hf = fmt_hf_olmoe, .hf_names = &fmt_hf_olmoe_names },
    { .arch = "phi3", .peer_ggml = 1, .hf_arch = "Phi3ForCausalLM", .hf_type = "phi3",
      .flags = FMT_FLAG_ROPE_NEOX, .gguf = phi3_gguf, .gguf_names = &phi3_names,
      .hf = fmt_hf_phi3, .hf_names = &fmt_hf_phi3_names, .hf_tensors = fmt_hf_phi3_tensors },
    { .arch = "gemma2", .peer_ggml = 1, .hf_arch = "Gemma2ForCausalLM", .hf_type = "gemma2",
      .flags = FMT_FLAG_ROPE_NEOX | FMT_FLAG_EMBED_SCALE, .act = FMT_ACT_GEGLU, .hf_tied = 1,
      .gguf = gemma2_gguf, .gguf_names = &gemma_names, .hf = fmt_hf_gemma,
      .hf_names = &fmt_hf_gemma_names, .hf_tensors = fmt_hf_gemma_tensors },
    { .arch = "gemma3", .peer_ggml = 1, .hf_arch = "Gemma3ForCausalLM", .hf_type = "gemma3_text",
      .flags = FMT_FLAG_ROPE_NEOX | FMT_FLAG_EMBED_SCALE, .act = FMT_ACT_GEGLU, .hf_tied = 1,
      .gguf = gemma3_gguf, .gguf_names = &gemma_names, .hf = fmt_hf_gemma,
      .hf_names = &fmt_hf_gemma_names, .hf_tensors = fmt_hf_gemma_tensors },
    { .arch = "gpt-oss", .peer_ggml = 1, .hf_arch = "GptOssForCausalLM", .hf_type = "gpt_oss",
      .flags = FMT_FLAG_ROPE_NEOX | FMT_FLAG_MOE_NO_RENORM, .act = FMT_ACT_SWIGLU_OAI,
      .gating = FMT_GATE_TOPK_SOFTMAX, .gguf = gptoss_gguf, .gguf_names = &gptoss_names,
      .hf = fmt_hf_gptoss, .hf_names = &fmt_hf_gptoss_names,
      .hf_tensors = fmt_hf_gptoss_tensors },
    { .arch = "deepseek2", .peer_ggml = 1, .hf_arch = "DeepseekV2ForCausalLM",
      .hf_type = "deepseek_v2", .flags = FMT_FLAG_MOE_NO_RENORM, .gguf = deepseek2_gguf,
      .gguf_names = &deepseek2_names, .hf = fmt_hf_deepseek2, .hf_names = &fmt_hf_deepseek2_names,
      .hf_tensors = fmt_hf_deepseek2_tensors },
};
#define N_FAMILIES (sizeof families / sizeof *families)

const fmt_family *fmt_family_by_arch(const char *arch, size_t len)
{
    for (size_t i = 0; i < N_FAMILIES; i++)
        if (strlen(families[i].arch) == len && !memcmp(families[i].arch, arch, len))
            return &families[i];
    return NULL;
}

const fmt_family *fmt_family_by_hf(const char *hf_arch, const char *model_type)
{
    for (size_t i = 0; i < N_FAMILIES; i++)
        if (hf_arch ? !strcmp(families[i].hf_arch, hf_arch)
                    : model_type && !strcmp(families[i].hf_type, model_type))
            return &families[i];
    return NULL;
}

const char *fmt_family_list(char *buf, size_t n, int hf)
{
    size_t o = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < N_FAMILIES && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%s", i ? ", " : "",
                              hf ? families[i].hf_arch : families[i].arch);
    return buf;
}

void fmt_family_names(const fmt_role_names *base, const fmt_role_names *own,
                      const char **out)
{
    for (int r = 0; r < FMT_NROLES; r++) {
        const char *n = own && (*own)[r] ? (*own)[r] : (*base)[r];
        out[r] = n && *n ? n : NULL;
    }
}

int fmt_family_apply(fmt_src *s, const fmt_family *f)
{
    s->fam = f;
    s->hp.flags |= f->flags;
    s->hp.ffn_act = f->act;
    s->hp.gating = f->gating;
    return FMT_OK;
}
