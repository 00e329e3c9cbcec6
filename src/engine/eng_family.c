/*
 * eng_family.c — what differs per model family, on the engine's side: a
 * table per variant, indexed by the field of the model's header or
 * metadata that names it, as the schedules are indexed by combine_style
 * (eng_sched.c).  The format module's family table (fmt_family.c) says
 * which variant each architecture has; the engine never reads the
 * architecture's name.
 *
 *   acts[ffn_act]     the FFN's gated activation: SwiGLU, GeGLU (Gemma),
 *                     the clamped SwiGLU of gpt-oss
 *   gates[gating]     router logits into the top k and their weights:
 *                     softmax then top-k (renormalised unless the header
 *                     says not; among the best groups of experts where the
 *                     model groups them, DeepSeek), or top-k of the logits
 *                     then their softmax (gpt-oss); the routed scale
 *                     (expert_scale) after either, eng_moe_pick
 *   eng_family_layer  a layer's parts that only some families have
 *                     (post-norms, sinks, biases, shared experts, MLA's
 *                     latent attention: eng_mla.c) and its RoPE beyond the
 *                     base: linear and YaRN scaling, Phi-3's LongRoPE
 *                     divisors, Llama 3's
 *
 * Where a part is absent its pointer is NULL and the forward pass does
 * nothing for it: a part present is a part used.
 *
 * RoPE.  A session whose peer is llama.cpp (eng_session.c's `ggml`) turns
 * its pairs with ggml's rope_ext (kern_rope_ggml_ext): theta_i = pos *
 * base^(-2i/rot) / divisor_i, times freq_scale (1 / the linear or YaRN
 * factor), YaRN's ramp between the interpolated and extrapolated angles
 * over the correction dimensions of ggml_rope_yarn_corr_dims, and cos/sin
 * times the attention factor llama.cpp's context computes (llama-context.cpp:
 * YaRN's 0.1 ln(factor) + 1, over its mscale_all_dim's where the model has
 * one, divided by the 1 + 0.1 ln(1/freq_scale) rope_yarn multiplies in
 * again, times the model's rope.scaling.attn_factor).  LongRoPE's divisors
 * are the short ones within the original context and the long ones past
 * it, chosen by the session's context as llama.cpp chooses by n_ctx_seq.
 */
#include "config.h"

#include <math.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/eng_impl.h"
#include "kernels/kern.h"

/* ---- activations ---------------------------------------------------------- */

static void act_swiglu(const eng_session *s, float *g, const float *u, uint32_t n)
{
    if (s->ggml)
        s->ops->swiglu_ggml(g, g, u, n);
    else
        kern_swiglu(g, g, u, n);
}

static void act_geglu(const eng_session *s, float *g, const float *u, uint32_t n)
{
    if (s->ggml)
        kern_geglu_ggml(g, g, u, n);
    else
        kern_geglu(g, g, u, n);
}

static void act_swiglu_oai(const eng_session *s, float *g, const float *u, uint32_t n)
{
    kern_swiglu_oai(g, g, u, n, s->hp->swiglu_alpha, s->hp->swiglu_limit);
}

static const eng_act_fn acts[FMT_NACT] = {
    [FMT_ACT_SWIGLU] = act_swiglu,
    [FMT_ACT_GEGLU] = act_geglu,
    [FMT_ACT_SWIGLU_OAI] = act_swiglu_oai,
};

/* ---- gating: logits p [E] (overwritten) into expert[K] and w[K] ----------- */

/* Insert expert e of score v into the k best so far (descending; a tie
 * keeps the lower index first). */
static uint32_t topk_insert(const float *p, int *expert, uint32_t k, uint32_t K, uint32_t e)
{
    if (k == K && !(p[e] > p[expert[K - 1]]))
        return k;
    uint32_t at = k < K ? k++ : K - 1;
    while (at > 0 && p[e] > p[expert[at - 1]]) {
        expert[at] = expert[at - 1];
        at--;
    }
    expert[at] = (int)e;
    return k;
}

/* Group-limited top-k (DeepSeek; llama.cpp's build_moe_ffn): each group of
 * E / G experts scores the sum of its two best probabilities, the best
 * expert_groups_used groups (a tie: the lower group) are kept in used[]. */
static void best_groups(const fmt_hparams *hp, const float *p, uint8_t *used)
{
    const uint32_t G = hp->expert_groups, per = hp->n_experts / G;
    float score[FMT_MAX_EXPERT_GROUPS];
    for (uint32_t g = 0; g < G; g++) {
        float a = -INFINITY, b = -INFINITY;
        for (uint32_t e = g * per; e < (g + 1) * per; e++) {
            if (p[e] > a) {
                b = a;
                a = p[e];
            } else if (p[e] > b) {
                b = p[e];
            }
        }
        score[g] = a + b;
        used[g] = 0;
    }
    for (uint32_t n = 0; n < hp->expert_groups_used; n++) {
        uint32_t best = G;
        for (uint32_t g = 0; g < G; g++)
            if (!used[g] && (best == G || score[g] > score[best]))
                best = g;
        used[best] = 1;
    }
}

/* softmax over all experts, the top k by probability (among the best
 * groups' experts where the model groups them), their weights
 * renormalised unless the header says not (Mixtral, Qwen3-MoE, OLMoE) */
static void gate_softmax(const eng_session *s, float *p, int *expert, float *w)
{
    const fmt_hparams *hp = s->hp;
    uint32_t E = hp->n_experts, K = hp->top_k, k = 0;
    float mx = -INFINITY, sum = 0.0f, wsum = 0.0f;
    for (uint32_t e = 0; e < E; e++)
        if (p[e] > mx)
            mx = p[e];
    for (uint32_t e = 0; e < E; e++)
        sum += (p[e] = expf(p[e] - mx));
    for (uint32_t e = 0; e < E; e++)
        p[e] /= sum;
    uint8_t used[FMT_MAX_EXPERT_GROUPS];
    const uint32_t per = hp->expert_groups > 1 ? E / hp->expert_groups : E;
    if (hp->expert_groups > 1)
        best_groups(hp, p, used);
    for (uint32_t e = 0; e < E; e++)
        if (hp->expert_groups <= 1 || used[e / per])
            k = topk_insert(p, expert, k, K, e);
    for (uint32_t j = 0; j < K; j++)
        wsum += p[expert[j]];
    for (uint32_t j = 0; j < K; j++)
        w[j] = (hp->flags & FMT_FLAG_MOE_NO_RENORM) ? p[expert[j]] : p[expert[j]] / wsum;
}

/* the top k of the logits themselves, then the softmax of those k
 * (llama.cpp's SOFTMAX_WEIGHT: gpt-oss); p keeps the logits */
static void gate_topk_softmax(const eng_session *s, float *p, int *expert, float *w)
{
    const uint32_t E = s->hp->n_experts, K = s->hp->top_k;
    uint32_t k = 0;
    float sum = 0.0f;
    for (uint32_t e = 0; e < E; e++)
        k = topk_insert(p, expert, k, K, e);
    const float mx = p[expert[0]];
    for (uint32_t j = 0; j < K; j++)
        sum += (w[j] = expf(p[expert[j]] - mx));
    for (uint32_t j = 0; j < K; j++)
        w[j] /= sum;
}

static const eng_gate_fn gates[FMT_NGATE] = {
    [FMT_GATE_SOFTMAX] = gate_softmax,
    [FMT_GATE_TOPK_SOFTMAX] = gate_topk_softmax,
};

void eng_family_session(eng_session *s)
{
    const fmt_hparams *hp = s->hp;
    /* (the reader refused values past the tables) */
    s->act = acts[(hp->flags & FMT_FLAG_GELU) ? FMT_ACT_GEGLU : hp->ffn_act];
    s->gate = gates[hp->gating];
}

/* ---- a layer's parts and RoPE --------------------------------------------- */

int eng_family_layer(eng_session *s, unsigned l)
{
    const fmt_hparams *hp = s->hp;
    const fmt_model *m = s->model;
    eng_layer *ly = &s->layers[l];
    const fmt_layer_geom *g = ly->g;
    uint64_t n = 0;
    ly->dense = fmt_layer_dense(hp, l);
    ly->attn_post_norm = fmt_model_vec(m, l, FMT_S_ATTN_POST_NORM, NULL);
    ly->ffn_post_norm = fmt_model_vec(m, l, FMT_S_FFN_POST_NORM, NULL);
    ly->sinks = fmt_model_vec(m, l, FMT_S_SINKS, NULL);
    ly->o_bias = fmt_model_vec(m, l, FMT_S_O_BIAS, NULL);
    ly->router_bias = fmt_model_vec(m, l, FMT_S_ROUTER_BIAS, NULL);
    ly->exp_gu_bias = fmt_model_vec(m, l, FMT_S_EXP_GU_BIAS, NULL);
    ly->exp_down_bias = fmt_model_vec(m, l, FMT_S_EXP_DOWN_BIAS, NULL);
    /* Q/K norms per head, or over all of q and of k (OLMoE) */
    if (fmt_model_vec(m, l, FMT_S_Q_NORM, &n))
        ly->q_norm_n = n == ly->q_dim ? ly->q_dim : g->head_dim;
    if (fmt_model_vec(m, l, FMT_S_K_NORM, &n))
        ly->k_norm_n = n == ly->kv_dim ? ly->kv_dim : g->head_dim;
    /* RoPE: scale, YaRN, attention factor; LongRoPE's or Llama 3's divisors */
    kern_rope_ext *r = &ly->rope;
    const unsigned L = hp->n_layers;
    r->freq_scale = g->rope_scale > 0.0f ? g->rope_scale : 1.0f;
    r->ext_factor = hp->rope_scaling == FMT_ROPE_YARN ? 1.0f : 0.0f;
    r->attn_factor = fmt_rope_attn_factor(hp, r->freq_scale);
    kern_rope_yarn_corr(g->rope_dims, hp->rope_orig_ctx ? hp->rope_orig_ctx : hp->max_seq,
                        g->rope_theta, hp->yarn_beta_fast > 0.0f ? hp->yarn_beta_fast : 32.0f,
                        hp->yarn_beta_slow > 0.0f ? hp->yarn_beta_slow : 1.0f, r->corr);
    r->freq_factors = s->rope_ff;
    if (hp->rope_scaling == FMT_ROPE_LONGROPE) {
        const float *lf = fmt_model_vec(m, L, FMT_S_ROPE_LONG, NULL);
        r->freq_factors = lf && s->seq->n_ctx > hp->rope_orig_ctx
                              ? lf : fmt_model_vec(m, L, FMT_S_ROPE_SHORT, NULL);
    }
    if (hp->mla_rank && eng_mla_bind(s, ly, l))
        return -1;
    /* the shared experts (DeepSeek) */
    const fmt_stream *sg = fmt_model_stream(m, l, FMT_S_SH_GATE);
    const fmt_stream *sd = fmt_model_stream(m, l, FMT_S_SH_DOWN);
    if (sg && sd && (eng_mv_init(&ly->sh_gu, sg, s->ggml) || eng_mv_init(&ly->sh_down, sd,
                                                                       s->ggml)))
        return -1;
    return 0;
}

/* The angle pair i of layer ly turns by per position (the shift's re-turn,
 * eng_kv.c): what kern_rope_ggml_ext or kern_rope applies at position 1,
 * without the magnitude. */
double eng_rope_step(const eng_session *s, const eng_layer *ly, unsigned i)
{
    const fmt_layer_geom *g = ly->g;
    if (!s->ggml)
        return ly->inv_freq[i];
    const kern_rope_ext *r = &ly->rope;
    float ts = powf(g->rope_theta, -2.0f / (float)g->rope_dims), th = 1.0f;
    for (unsigned k = 0; k < i; k++)
        th *= ts;
    double t = r->freq_factors ? th / r->freq_factors[i] : th;
    double mix = 0.0;
    if (r->ext_factor != 0.0f) {
        double y = ((double)i - r->corr[0]) / fmax(0.001, r->corr[1] - r->corr[0]);
        mix = (1 - fmin(1, fmax(0, y))) * r->ext_factor;
    }
    return t * (r->freq_scale * (1 - mix) + mix);
}
