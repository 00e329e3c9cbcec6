/*
 * eng_blocks.c — the blocks a layer is built of: the embedding row,
 * attention (QKV, RoPE, the cache store and attend, the output
 * projection), the dense SwiGLU/GeGLU FFN and the LM head, over one pass
 * of a tile stream per matrix group; and the decode scratch.  Below them:
 * the matrix products (eng_mv.c), attention over the cache (eng_attn.c)
 * and the element-wise steps (eng_vec.c), which DeepSeek-V2's latent
 * attention (eng_mla.c) is made of too.
 *
 * The schedules (eng_sched.c), the routed experts (eng_moe.c) and the
 * batched chunk (eng_prefill.c) are made of these; the walk that strings
 * them together is eng_forward.c's.
 *
 * The forward pass reads like run.c, but every weight matrix is a
 * stream of tiles straight from the mapping: one pass over the fused QKV
 * stream fills q, k and v (the tile's matrix id picks the output buffer),
 * one pass over the fused gate/up stream fills both FFN halves.  Each
 * mat-vec input is prepared once (kern_act_set) for every tile type that
 * reads it.
 *
 * Buffers: the session's decode scratch (eng_scratch, eng_impl.h, which
 * eng_scratch_init below allocates: one position's activations) and the
 * sequence's KV cache (position-major per effective layer, floats or, with
 * kv_f16, halves).
 *
 * Arithmetic.  Each model is held to the output of its peer program: a
 * llama2.c checkpoint to run.c, a GGUF model to llama.cpp (its x86 CPU
 * backend, AVX-512 build).  On Q8_0/Q4_0 models every mat-vec input is
 * quantised to Q8_0 blocks, round(x * 127/amax) turns a last-bit
 * difference into a whole quantisation step now and then, and greedy text
 * parts a few dozen tokens later: with run.c's arithmetic, stories260K Q4_0
 * left llama.cpp's text after 18 words.  So a session follows its peer's
 * roundings, chosen from the model's "cflow.source":
 *   - "gguf" (s->ggml): RMSNorm, RoPE and SwiGLU as ggml computes them
 *     (kern_*_ggml), and matrices whose row count is a multiple of 8, of
 *     a type llama.cpp repacks on x86 (Q4_0, IQ4_NL, MXFP4, the K-quants
 *     it has repacked kernels for: the kernels' tile_mv_rp), summed as its
 *     repacked kernels sum them, since llama.cpp repacks exactly those;
 *   - anything else: run.c's order (kern_rmsnorm, kern_rope, kern_swiglu).
 * The tile kernels and the Q8_0 activation quantiser follow llama.cpp for
 * every model (kernels/kern_ref.c); run.c models are F32, where the
 * kernels keep run.c's sum.
 *
 * KV precision: eng_attn.c.
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/eng_impl.h"
#include "kernels/kern.h"
#include "prof/prof.h"

/* One pass over a (fused) tile stream: out[matrix] receives each tile's
 * partial sums.  Outputs must be zeroed by the caller. */
static void matvec_stream(eng_session *s, const eng_mv *mv, const kern_act *x,
                          float *const *out)
{
    eng_matvec_streams(s, 1, &mv, &x, &out);
}

/* ---- the decode scratch (eng_scratch): one position's buffers ---------- */

int eng_scratch_init(eng_session *s)
{
    const fmt_hparams *hp = s->hp;
    eng_scratch *d = &s->dec;
    const size_t dim = hp->dim, hid = hp->expert_ffn_dim;
    int oom = 0;
    d->x = eng_xalloc(dim * sizeof(float), &oom);
    d->xb = eng_xalloc(dim * sizeof(float), &oom);
    d->q = eng_xalloc(s->q_dim * sizeof(float), &oom);
    d->att = eng_xalloc(s->q_dim * sizeof(float), &oom);
    d->hb = eng_xalloc(s->hmax * sizeof(float), &oom);
    d->hb2 = eng_xalloc(s->hmax * sizeof(float), &oom);
    d->k_tmp = eng_xalloc(s->kv_dim * sizeof(float), &oom);
    d->v_tmp = eng_xalloc(s->kv_dim * sizeof(float), &oom);
    if (s->kv_f16)
        d->att16 = eng_xalloc(2 * (size_t)s->hd_max * sizeof(uint16_t), &oom);
    d->m = eng_xalloc(dim * sizeof(float), &oom);
    d->d = eng_xalloc(dim * sizeof(float), &oom);
    d->e = eng_xalloc(dim * sizeof(float), &oom);
    d->a = eng_xalloc(dim * sizeof(float), &oom);
    d->hist = eng_xalloc((hp->dense_delay + 1u) * dim * sizeof(float), &oom);
    d->pend = eng_xalloc(dim * sizeof(float), &oom);
    d->probs = eng_xalloc((hp->n_experts + 1u) * sizeof(float), &oom);
    if (hp->n_experts) {
        d->n_xg = hp->top_k < ENG_MV_MAX ? hp->top_k : ENG_MV_MAX;
        d->xg_h = eng_xalloc(d->n_xg * hid * sizeof(float), &oom);
        d->xg_h2 = eng_xalloc(d->n_xg * hid * sizeof(float), &oom);
        d->xg_o = eng_xalloc(d->n_xg * dim * sizeof(float), &oom);
        d->xg_act = eng_xalloc(d->n_xg * sizeof(kern_act), &oom);
        for (unsigned j = 0; !oom && j < d->n_xg; j++)
            oom = kern_act_init(&d->xg_act[j], hp->expert_ffn_dim) != 0;
    }
    if (oom || kern_act_init(&d->act_dim, hp->dim) || kern_act_init(&d->act_q, s->q_dim) ||
        kern_act_init(&d->act_ffn, s->hmax))
        return -1;
    return 0;
}

int eng_scratch_ctx(eng_session *s, uint32_t n_ctx)
{
    eng_scratch *d = &s->dec;
    if (n_ctx <= d->ctx)
        return 0;
    float *sc = realloc(d->scores, (size_t)n_ctx * sizeof(float));
    if (!sc)
        return -1;
    d->scores = sc;
    free(d->par_sc);            /* attn_scratch grows it again, rows of n_ctx */
    d->par_sc = NULL;
    d->par_heads = 0;
    d->ctx = n_ctx;
    return 0;
}

void eng_scratch_free(eng_session *s)
{
    eng_scratch *d = &s->dec;
    kern_act_free(&d->act_dim);
    kern_act_free(&d->act_q);
    kern_act_free(&d->act_ffn);
    for (unsigned j = 0; d->xg_act && j < d->n_xg; j++)
        kern_act_free(&d->xg_act[j]);
    free(d->xg_act); free(d->xg_h); free(d->xg_h2); free(d->xg_o);
    free(d->x); free(d->xb); free(d->q); free(d->att); free(d->hb); free(d->hb2);
    free(d->k_tmp); free(d->v_tmp); free(d->scores); free(d->att16);
    free(d->par_sc); free(d->par_h16); free(d->ring_k); free(d->ring_v);
    free(d->m); free(d->d); free(d->e); free(d->a);
    free(d->hist); free(d->pend); free(d->probs);
    memset(d, 0, sizeof *d);
}

/* Row `token` of the tiled embedding matrix into x[dim]. */
void eng_embed(eng_session *s, int32_t token, float *x)
{
    uint32_t stripe = (uint32_t)token / KERN_TILE_ROWS;
    unsigned r = (unsigned)token % KERN_TILE_ROWS;
    const fmt_tile *t = s->embd->tiles + (size_t)stripe * s->embd_col_tiles;
    for (uint32_t j = 0; j < s->embd_col_tiles; j++, t++)
        kern_tile_row((enum kern_type)t->type, t->rows, t->cols, t->payload, r,
                      x + t->col0);
    if (s->hp->flags & FMT_FLAG_EMBED_SCALE) {
        float sc = sqrtf((float)s->hp->dim);
        for (uint32_t i = 0; i < s->hp->dim; i++)
            x[i] *= sc;
    }
}

/* RoPE of layer ly: its head size, rotated dimensions and base. */
static void rope(const eng_session *s, const eng_layer *ly, float *x,
                 unsigned n_heads, uint32_t pos)
{
    const fmt_hparams *hp = s->hp;
    const fmt_layer_geom *g = ly->g;
    int neox = (hp->flags & FMT_FLAG_ROPE_NEOX) != 0;
    if (s->ggml)       /* the layer's scaling and divisors: eng_family.c */
        kern_rope_ggml_ext(x, n_heads, g->head_dim, g->rope_dims, pos, g->rope_theta,
                           &ly->rope, neox);
    else
        kern_rope(x, n_heads, g->head_dim, g->rope_dims, pos, ly->inv_freq, neox);
}

/* What happens to one position's q, k, v between the QKV projection and
 * the cache: bias, K = V sharing, QK-norm, V-norm, RoPE.  Shared by
 * decode (attn_block) and batched prefill (forward_batch). */
void eng_attn_qkv_post(eng_session *s, const eng_layer *ly, uint32_t pos,
                          float *q, float *k, float *v)
{
    const fmt_hparams *hp = s->hp;
    const fmt_layer_geom *g = ly->g;
    uint32_t hd = g->head_dim;
    uint32_t qd = ly->q_dim, kvd = ly->kv_dim;   /* this layer's widths */
    int shared = (g->flags & FMT_LG_KV_SHARED) != 0;
    if (ly->qkv_bias) {
        const float *b = ly->qkv_bias;
        for (uint32_t i = 0; i < qd; i++) q[i] += b[i];
        for (uint32_t i = 0; i < kvd; i++) k[i] += b[qd + i];
        for (uint32_t i = 0; !shared && i < kvd; i++) v[i] += b[qd + kvd + i];
    }
    if (shared)                     /* V is K's projection (K = V sharing) */
        memcpy(v, k, kvd * sizeof(float));
    /* Qwen3, Gemma 3: per-head RMSNorm of q and k (one weight vector for
     * all heads), before RoPE; OLMoE: one RMSNorm over all of q, one over
     * all of k (q_norm_n, k_norm_n are the lengths normalised at a time) */
    for (uint32_t i = 0; ly->q_norm && i < qd; i += ly->q_norm_n)
        eng_rmsnorm(s, q + i, q + i, ly->q_norm, ly->q_norm_n);
    for (uint32_t i = 0; ly->k_norm && i < kvd; i += ly->k_norm_n)
        eng_rmsnorm(s, k + i, k + i, ly->k_norm, ly->k_norm_n);
    if (hp->flags & FMT_FLAG_V_NORM)
        for (uint32_t hh = 0; hh < g->n_kv_heads; hh++)
            eng_rmsnorm(s, v + hh * hd, v + hh * hd, NULL, hd);
    rope(s, ly, q, g->n_heads, pos);
    rope(s, ly, k, g->n_kv_heads, pos);
    /* Gemma, Phi-3: q scaled before the attention, which then scales by 1
     * (llama.cpp's ggml_scale of Qcur) */
    if (hp->q_scale > 0.0f)
        for (uint32_t i = 0; i < qd; i++)
            q[i] *= hp->q_scale;
}

/* m = Attn(N_a(h)) into mout[dim] at sequence seq's next position; kvl
 * picks the KV cache (the effective layer).  h and mout may not alias. */
void eng_attn_block(eng_session *s, eng_seq *seq, const eng_layer *ly, unsigned kvl,
                    const float *h, float *mout)
{
    const fmt_hparams *hp = s->hp;
    uint32_t dim = hp->dim, pos = seq->n_past;
    uint32_t qd = ly->q_dim, kvd = ly->kv_dim;   /* this layer's widths */
    float *out[FMT_NMATRIX] = { 0 };
    float *k, *v;                   /* this position's k and v */
    if (hp->mla_rank) {
        eng_mla_attn_block(s, seq, ly, kvl, h, mout);
        return;
    }
    if (s->kv_f16) {
        k = s->dec.k_tmp;               /* rounded into kc16/vc16 below */
        v = s->dec.v_tmp;
    } else {
        k = seq->kc + eng_kv_row(seq, kvl, pos);
        v = seq->vc + eng_kv_row(seq, kvl, pos);
    }
    eng_rmsnorm(s, s->dec.xb, h, ly->attn_norm, dim);
    kern_act_set(&s->dec.act_dim, s->dec.xb, dim, ly->qkv.need);
    memset(s->dec.q, 0, qd * sizeof(float));
    memset(k, 0, kvd * sizeof(float));
    memset(v, 0, kvd * sizeof(float));
    out[FMT_M_Q] = s->dec.q;
    out[FMT_M_K] = k;
    out[FMT_M_V] = v;
    matvec_stream(s, &ly->qkv, &s->dec.act_dim, out);
    eng_attn_qkv_post(s, ly, pos, s->dec.q, k, v);
    eng_attn_store_attend(s, seq, ly, kvl, pos, s->dec.q, k, v, s->dec.att);
    kern_act_set(&s->dec.act_q, s->dec.att, qd, ly->o.need);
    memset(mout, 0, dim * sizeof(float));
    out[FMT_M_O] = mout;
    matvec_stream(s, &ly->o, &s->dec.act_q, out);
    eng_attn_out_post(s, ly, mout);
}

void eng_glu_ffn(eng_session *s, const eng_mv *gu, const eng_mv *down,
                    uint32_t hidden, uint8_t mg, uint8_t mu, uint8_t md,
                    const kern_act *act, float *dout)
{
    float *out[FMT_NMATRIX] = { 0 };
    memset(s->dec.hb, 0, hidden * sizeof(float));
    memset(s->dec.hb2, 0, hidden * sizeof(float));
    out[mg] = s->dec.hb;
    out[mu] = s->dec.hb2;
    matvec_stream(s, gu, act, out);
    eng_glu_act(s, s->dec.hb, s->dec.hb2, hidden);
    kern_act_set(&s->dec.act_ffn, s->dec.hb, hidden, down->need);
    memset(dout, 0, s->hp->dim * sizeof(float));
    out[md] = dout;
    matvec_stream(s, down, &s->dec.act_ffn, out);
}

/* d = FFN(N_f(h)) into dout (through Gemma's post-norm where the layer has
 * one); in a layer of routed experts with shared ones beside them
 * (DeepSeek), the shared experts' FFN of the experts' input N_moe(h); zero
 * when the layer has neither or there is no h (a delayed residual from
 * before layer 0). */
void eng_ffn_block(eng_session *s, const eng_layer *ly, const float *h,
                      float *dout)
{
    const fmt_hparams *hp = s->hp;
    if (!ly->dense && ly->sh_gu.st && h) {
        eng_rmsnorm(s, s->dec.xb, h, ly->moe_norm, hp->dim);
        kern_act_set(&s->dec.act_dim, s->dec.xb, hp->dim, ly->sh_gu.need);
        eng_glu_ffn(s, &ly->sh_gu, &ly->sh_down, hp->shared_ffn_dim, FMT_M_SH_GATE,
                    FMT_M_SH_UP, FMT_M_SH_DOWN, &s->dec.act_dim, dout);
        return;
    }
    if (!ly->dense || !h) {
        memset(dout, 0, hp->dim * sizeof(float));
        return;
    }
    eng_rmsnorm(s, s->dec.xb, h, ly->ffn_norm, hp->dim);
    kern_act_set(&s->dec.act_dim, s->dec.xb, hp->dim, ly->gate_up.need);
    eng_glu_ffn(s, &ly->gate_up, &ly->down, hp->ffn_dim, FMT_M_GATE, FMT_M_UP,
            FMT_M_DOWN, &s->dec.act_dim, dout);
    if (ly->ffn_post_norm)       /* Gemma */
        eng_rmsnorm(s, dout, dout, ly->ffn_post_norm, hp->dim);
}

/* The LM head: dec.x (the final residual) through the output norm and the
 * output matrix into logits [vocab], soft-capped where the header says. */
void eng_lm_head(eng_session *s, float *logits)
{
    const fmt_hparams *hp = s->hp;
    uint32_t dim = hp->dim;
    float *out[FMT_NMATRIX] = { 0 };

    if (s->trace)
        s->trace->final_in_l2 = eng_l2(s->dec.x, dim);
    eng_rmsnorm(s, s->dec.x, s->dec.x, s->out_norm, dim);
    if (s->trace)
        s->trace->final_norm_l2 = eng_l2(s->dec.x, dim);
    kern_act_set(&s->dec.act_dim, s->dec.x, dim, s->output.need);
    memset(logits, 0, hp->vocab_size * sizeof(float));
    out[FMT_M_OUTPUT] = logits;
    out[FMT_M_TOK_EMBD] = logits;
    matvec_stream(s, &s->output, &s->dec.act_dim, out);
    if (hp->softcap > 0.0f)
        for (uint32_t i = 0; i < hp->vocab_size; i++)
            logits[i] = tanhf(logits[i] / hp->softcap) * hp->softcap;
}
