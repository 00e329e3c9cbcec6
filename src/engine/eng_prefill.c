/*
 * eng_prefill.c — a batch of rows through the layers together: a chunk of
 * a prompt (ENG_BATCH positions of one sequence at a time, where the
 * schedule allows it; eng_prefill goes token by token otherwise), or one
 * position of each of several sequences (a decode step of eng_decode_batch,
 * eng_forward.c).  Row j is token tokens[j] at position bat.pos[j] of
 * sequence bat.seq[j]: the matrix products run over all the rows, the
 * attention of each row over its own sequence's cache.
 *
 * A prompt goes through the layers ENG_BATCH positions at a time: each
 * fused tile stream is read once per chunk and multiplied into every
 * position's input (kern_ops.tile_mm: a tile's bytes come from memory once
 * and stay in L1/L2 for the chunk), while the per-position steps (norms,
 * RoPE, the cache store and attention, which must see the chunk's earlier
 * positions) run position by position in order.  The batched kernels give
 * each position exactly the sums of its own mat-vec and everything else is
 * the decode path's code, so the logits are bit-identical to feeding the
 * tokens one by one; only the last position of a prompt goes through the
 * LM head, every row of a decode step (one mat-mat over the head).
 * Standard layers only (combine style ParallelSqrt2: Llama, and with
 * routed experts Mixtral/OLMoE/Qwen3-MoE, whose experts run grouped by
 * expert in eng_moe_batch.c, and DeepSeek's shared experts as a mat-mat
 * beside them; no trace): every other schedule prefills token by token
 * and decodes several sequences one after another.  DeepSeek-V2's latent
 * attention (eng_mla.c) runs its k_b, v_b and q_b as mat-mats too
 * (mla_batch), its per-position steps between.
 *
 * Buffers: the session's batch room (eng_batch, eng_impl.h), allocated
 * on first use by eng_batch_init for ENG_BATCH positions and freed by
 * eng_batch_free.
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/eng_impl.h"
#include "kernels/kern.h"
#include "prof/prof.h"

void eng_batch_free(eng_session *s)
{
    eng_batch *b = &s->bat;
    for (unsigned j = 0; j < ENG_BATCH; j++) {
        if (b->act_dim)
            kern_act_free(&b->act_dim[j]);
        if (b->act_q)
            kern_act_free(&b->act_q[j]);
        if (b->act_ffn)
            kern_act_free(&b->act_ffn[j]);
        if (b->act_xr)
            kern_act_free(&b->act_xr[j]);
    }
    free(b->act_dim); free(b->act_q); free(b->act_ffn); free(b->act_xr);
    free(b->x); free(b->xb); free(b->o); free(b->q); free(b->att);
    free(b->k); free(b->v); free(b->h); free(b->h2);
    free(b->dn); free(b->e); free(b->xr); free(b->w); free(b->exp);
    free(b->sel); free(b->ord); free(b->cnt); free(b->cur); free(b->log);
    free(b->work);
    free(b->logits);
    memset(b, 0, sizeof *b);
}

int eng_batch_init(eng_session *s)
{
    const size_t B = ENG_BATCH, dim = s->hp->dim;
    eng_batch *b = &s->bat;
    int oom = 0;
    if (b->ready)
        return 0;
    b->x = eng_xalloc(B * dim * sizeof(float), &oom);
    b->xb = eng_xalloc(B * dim * sizeof(float), &oom);
    b->o = eng_xalloc(B * dim * sizeof(float), &oom);
    b->q = eng_xalloc(B * s->q_dim * sizeof(float), &oom);
    b->att = eng_xalloc(B * s->q_dim * sizeof(float), &oom);
    b->k = eng_xalloc(B * s->kv_dim * sizeof(float), &oom);
    b->v = eng_xalloc(B * s->kv_dim * sizeof(float), &oom);
    b->h = eng_xalloc(B * s->hmax * sizeof(float), &oom);
    b->h2 = eng_xalloc(B * s->hmax * sizeof(float), &oom);
    b->act_dim = eng_xalloc(B * sizeof(kern_act), &oom);
    b->act_q = eng_xalloc(B * sizeof(kern_act), &oom);
    b->act_ffn = eng_xalloc(B * sizeof(kern_act), &oom);
    for (unsigned j = 0; !oom && j < B; j++)
        if (kern_act_init(&b->act_dim[j], s->hp->dim) ||
            kern_act_init(&b->act_q[j], s->q_dim) ||
            kern_act_init(&b->act_ffn[j], s->hmax))
            oom = 1;
    if (!oom && s->hp->n_experts) {   /* eng_moe_batch.c */
        const size_t K = s->hp->top_k, E = s->hp->n_experts;
        b->dn = eng_xalloc(B * dim * sizeof(float), &oom);
        b->e = eng_xalloc(B * dim * sizeof(float), &oom);
        b->xr = eng_xalloc(B * dim * sizeof(float), &oom);
        b->w = eng_xalloc(B * K * sizeof(float), &oom);
        b->exp = eng_xalloc(B * K * dim * sizeof(float), &oom);
        b->sel = eng_xalloc(B * K * sizeof(int), &oom);
        b->ord = eng_xalloc(B * K * sizeof(int), &oom);
        b->cnt = eng_xalloc((E + 1) * sizeof(int), &oom);
        b->cur = eng_xalloc(E * sizeof(int), &oom);
        b->log = eng_xalloc(B * E * sizeof(float), &oom);
        b->act_xr = eng_xalloc(B * sizeof(kern_act), &oom);
        for (unsigned j = 0; !oom && j < B; j++)
            if (kern_act_init(&b->act_xr[j], s->hp->dim))
                oom = 1;
    }
    if (oom) {
        eng_batch_free(s);
        return -1;
    }
    b->ready = 1;
    return 0;
}

int eng_batch_logits(eng_session *s)
{
    int oom = 0;
    if (!s->bat.logits)
        s->bat.logits = eng_xalloc((size_t)ENG_BATCH * s->hp->vocab_size * sizeof(float), &oom);
    return oom ? -1 : 0;
}

int eng_batch_eligible(const eng_session *s)
{
    const fmt_hparams *hp = s->hp;
    return hp->combine_style == FMT_COMBINE_PARALLEL_SQRT2 &&
           (hp->ffn_dim || hp->n_experts) && !s->trace && s->n_eff == hp->n_layers;
}

/* ---- the steps between the matrix products, a position a claim ----------
 * The norms, RoPE, the GLU, the residual adds and the conversions of the
 * mat-mats' inputs are per position.  Run by the caller alone they leave
 * the workers waiting (a measurable part of a chunk's time:
 * docs/perf-log/2026-12-05.md, 05:08 UTC), so each step is one pool
 * region over the chunk's positions.  A position's arithmetic does not
 * depend on the thread that runs it. */
typedef void (*pos_step)(eng_session *s, const eng_layer *ly, unsigned j);

typedef struct pos_task {
    eng_session     *s;
    const eng_layer *ly;
    unsigned         m;
    pos_step         fn;
} pos_task;

static void pos_run(void *ctx, int tid, int n_threads)
{
    const pos_task *t = ctx;
    (void)tid;
    (void)n_threads;
    for (size_t j; (j = eng_pool_next(t->s->pool, 1)) < t->m;)
        t->fn(t->s, t->ly, (unsigned)j);
}

/* fn(s, ly, j) for the m positions j of the chunk */
static void each_position(eng_session *s, const eng_layer *ly, unsigned m,
                          pos_step fn)
{
    pos_task t = { s, ly, m, fn };
    if (m >= 2 && eng_pool_size(s->pool) >= 2)
        eng_pool_run(s->pool, pos_run, &t);
    else
        for (unsigned j = 0; j < m; j++)
            fn(s, ly, j);
}

/* xb[j] = RMSNorm(x[j]) with weight w, prepared (need) for the next
 * mat-mat in act_dim[j] */
static void norm_in(eng_session *s, unsigned j, const float *w, unsigned need)
{
    const uint32_t dim = s->hp->dim;
    float *xb = s->bat.xb + (size_t)j * dim;
    eng_rmsnorm(s, xb, s->bat.x + (size_t)j * dim, w, dim);
    kern_act_set(&s->bat.act_dim[j], xb, dim, need);
}

/* the attention's input, N_a(x[j]); the QKV outputs q/k/v[j] zeroed
 * for the mat-mat to add into */
static void step_attn_in(eng_session *s, const eng_layer *ly, unsigned j)
{
    norm_in(s, j, ly->attn_norm, ly->qkv.need);
    memset(s->bat.q + (size_t)j * ly->q_dim, 0, ly->q_dim * sizeof(float));
    memset(s->bat.k + (size_t)j * ly->kv_dim, 0, ly->kv_dim * sizeof(float));
    memset(s->bat.v + (size_t)j * ly->kv_dim, 0, ly->kv_dim * sizeof(float));
}

/* bias, norms and RoPE of position j's q, k, v */
static void step_qkv_post(eng_session *s, const eng_layer *ly, unsigned j)
{
    eng_attn_qkv_post(s, ly, s->bat.pos[j], s->bat.q + (size_t)j * ly->q_dim,
                      s->bat.k + (size_t)j * ly->kv_dim, s->bat.v + (size_t)j * ly->kv_dim);
}

/* the attention's output prepared for the O projection */
static void step_attn_out(eng_session *s, const eng_layer *ly, unsigned j)
{
    kern_act_set(&s->bat.act_q[j], s->bat.att + (size_t)j * ly->q_dim, ly->q_dim, ly->o.need);
}

/* x[j] += o[j] */
static void step_residual(eng_session *s, const eng_layer *ly, unsigned j)
{
    const uint32_t dim = s->hp->dim;
    (void)ly;
    eng_add_to(s->bat.x + (size_t)j * dim, s->bat.o + (size_t)j * dim, dim);
}

/* the attention's output o[j] through its bias and post-norm */
static void step_attn_post(eng_session *s, const eng_layer *ly, unsigned j)
{
    eng_attn_out_post(s, ly, s->bat.o + (size_t)j * s->hp->dim);
}

/* the dense FFN's output dn[j] through Gemma's post-norm */
static void step_ffn_post(eng_session *s, const eng_layer *ly, unsigned j)
{
    float *d = s->bat.o + (size_t)j * s->hp->dim;
    eng_rmsnorm(s, d, d, ly->ffn_post_norm, s->hp->dim);
}

/* A GLU's input at position j, norm(x[j]) quantised as need asks; its
 * gate/up outputs h/h2[j] zeroed.  The dense FFN's and the shared
 * experts' (each with its own norm). */
static void glu_in(eng_session *s, unsigned j, const float *norm, unsigned need)
{
    norm_in(s, j, norm, need);
    memset(s->bat.h + (size_t)j * s->hmax, 0, s->hmax * sizeof(float));
    memset(s->bat.h2 + (size_t)j * s->hmax, 0, s->hmax * sizeof(float));
}

/* The GLU of position j over its first dim values, prepared for the down
 * projection (need). */
static void glu_at(eng_session *s, unsigned j, uint32_t dim, unsigned need)
{
    float *g = s->bat.h + (size_t)j * s->hmax, *u = s->bat.h2 + (size_t)j * s->hmax;
    eng_glu_act(s, g, u, dim);
    kern_act_set(&s->bat.act_ffn[j], g, dim, need);
}

/* the FFN's input, N_f(x[j]) */
static void step_ffn_in(eng_session *s, const eng_layer *ly, unsigned j)
{
    glu_in(s, j, ly->ffn_norm, ly->gate_up.need);
}

static void step_glu(eng_session *s, const eng_layer *ly, unsigned j)
{
    glu_at(s, j, s->hp->ffn_dim, ly->down.need);
}

/* dst [m][dim] = mv x[j] for the m positions (mv has one matrix,
 * `matrix`, whose output is dim wide): the attention output and FFN down
 * projections. */
static void matmat_into(eng_session *s, const eng_mv *mv, uint8_t matrix,
                        const kern_act *x, unsigned m, float *dst)
{
    uint32_t dim = s->hp->dim;
    float *out[FMT_NMATRIX] = { 0 };
    size_t ld[FMT_NMATRIX] = { 0 };
    memset(dst, 0, (size_t)m * dim * sizeof(float));
    out[matrix] = dst;
    ld[matrix] = dim;
    eng_matmat_stream(s, mv, x, m, out, ld);
}

/* x[j] += mv x[j] for the m positions (through step, if not NULL, first:
 * what the layer does to a branch's output before the residual add). */
static void matmat_residual(eng_session *s, const eng_layer *ly, const eng_mv *mv,
                            uint8_t matrix, const kern_act *x, unsigned m, pos_step step)
{
    matmat_into(s, mv, matrix, x, m, s->bat.o);
    if (step)
        each_position(s, ly, m, step);
    each_position(s, ly, m, step_residual);
}

/* The dense FFN of the m positions: x[j] += FFN(N_f(x[j])), or, in a
 * layer that also has experts, into dn[j] for the combine. */
static void ffn_batch(eng_session *s, const eng_layer *ly, unsigned m, int moe)
{
    float *out[FMT_NMATRIX] = { 0 };
    size_t ld[FMT_NMATRIX] = { 0 };
    each_position(s, ly, m, step_ffn_in);
    out[FMT_M_GATE] = s->bat.h;
    out[FMT_M_UP] = s->bat.h2;
    ld[FMT_M_GATE] = ld[FMT_M_UP] = s->hmax;
    eng_matmat_stream(s, &ly->gate_up, s->bat.act_dim, m, out, ld);
    each_position(s, ly, m, step_glu);
    if (moe)
        matmat_into(s, &ly->down, FMT_M_DOWN, s->bat.act_ffn, m, s->bat.dn);
    else
        matmat_residual(s, ly, &ly->down, FMT_M_DOWN, s->bat.act_ffn, m,
                        ly->ffn_post_norm ? step_ffn_post : NULL);
}

/* The output norm of row j, prepared for the LM head's mat-mat. */
static void step_head_in(eng_session *s, const eng_layer *ly, unsigned j)
{
    (void)ly;
    norm_in(s, j, s->out_norm, s->output.need);
}

/* Every row's logits, each into its sequence: the output norm of each
 * row, one mat-mat over the LM head (a tile's bytes read once for all the
 * rows), the soft cap, as eng_lm_head gives a row alone. */
static void head_batch(eng_session *s, unsigned m)
{
    const fmt_hparams *hp = s->hp;
    const size_t nv = hp->vocab_size;
    float *out[FMT_NMATRIX] = { 0 };
    size_t ld[FMT_NMATRIX] = { 0 };
    each_position(s, NULL, m, step_head_in);
    memset(s->bat.logits, 0, m * nv * sizeof(float));
    out[FMT_M_OUTPUT] = out[FMT_M_TOK_EMBD] = s->bat.logits;
    ld[FMT_M_OUTPUT] = ld[FMT_M_TOK_EMBD] = nv;
    eng_matmat_stream(s, &s->output, s->bat.act_dim, m, out, ld);
    for (unsigned j = 0; j < m; j++) {
        float *lg = s->bat.logits + j * nv;
        if (hp->softcap > 0.0f)
            for (size_t i = 0; i < nv; i++)
                lg[i] = tanhf(lg[i] / hp->softcap) * hp->softcap;
        memcpy(s->bat.seq[j]->logits, lg, nv * sizeof(float));
    }
}

/* The shared experts of a layer with routed ones (DeepSeek): dn[j] =
 * FFN_sh(N_moe(x[j])), the combine's d. */
static void step_sh_in(eng_session *s, const eng_layer *ly, unsigned j)
{
    glu_in(s, j, ly->moe_norm, ly->sh_gu.need);
}

static void step_sh_glu(eng_session *s, const eng_layer *ly, unsigned j)
{
    glu_at(s, j, s->hp->shared_ffn_dim, ly->sh_down.need);
}

static void shared_batch(eng_session *s, const eng_layer *ly, unsigned m)
{
    float *out[FMT_NMATRIX] = { 0 };
    size_t ld[FMT_NMATRIX] = { 0 };
    each_position(s, ly, m, step_sh_in);
    out[FMT_M_SH_GATE] = s->bat.h;
    out[FMT_M_SH_UP] = s->bat.h2;
    ld[FMT_M_SH_GATE] = ld[FMT_M_SH_UP] = s->hmax;
    eng_matmat_stream(s, &ly->sh_gu, s->bat.act_dim, m, out, ld);
    each_position(s, ly, m, step_sh_glu);
    matmat_into(s, &ly->sh_down, FMT_M_SH_DOWN, s->bat.act_ffn, m, s->bat.dn);
}

/* ---- MLA's attention over a chunk (eng_mla.c's steps, a position each) -- */

/* position j's q and k into the attention's; its heads' q_nope prepared
 * for k_b, whose output goes to att[j] */
static void step_mla_qk(eng_session *s, const eng_layer *ly, unsigned j)
{
    const fmt_hparams *hp = s->hp;
    const uint32_t H = ly->g->n_heads;
    float *att = s->bat.att + (size_t)j * ly->q_dim;
    eng_mla_qk(s, ly, s->bat.pos[j], s->bat.q + (size_t)j * ly->q_dim,
               s->bat.k + (size_t)j * ly->kv_dim, att);
    kern_act_set(&s->bat.act_q[j], att, H * hp->mla_nope, ly->k_b.need);
    memset(att, 0, (size_t)H * hp->mla_rank * sizeof(float));
}

static void step_mla_absorbed(eng_session *s, const eng_layer *ly, unsigned j)
{
    eng_mla_absorbed(s, ly, s->bat.q + (size_t)j * ly->q_dim,
                     s->bat.att + (size_t)j * ly->q_dim);
}

/* the heads' attended latents prepared for v_b, whose output goes to att[j] */
static void step_mla_latent(eng_session *s, const eng_layer *ly, unsigned j)
{
    const fmt_hparams *hp = s->hp;
    const uint32_t H = ly->g->n_heads;
    float *att = s->bat.att + (size_t)j * ly->q_dim, *lat = s->bat.q + (size_t)j * ly->q_dim;
    eng_mla_latent(s, ly, att, lat);
    kern_act_set(&s->bat.act_q[j], lat, H * hp->mla_rank, ly->v_b.need);
    memset(att, 0, (size_t)H * hp->mla_v * sizeof(float));
}

static void step_mla_out(eng_session *s, const eng_layer *ly, unsigned j)
{
    kern_act_set(&s->bat.act_q[j], s->bat.att + (size_t)j * ly->q_dim,
                 ly->g->n_heads * s->hp->mla_v, ly->o.need);
}

/* the low-rank query q_a (q[j]'s first rows) prepared for q_b, whose
 * output is q[j] */
static void step_mla_qa(eng_session *s, const eng_layer *ly, unsigned j)
{
    float *q = s->bat.q + (size_t)j * ly->q_dim;
    eng_mla_qa(s, ly, q, &s->bat.act_q[j]);
    memset(q, 0, fmt_layer_q_rows(s->hp, ly->g) * sizeof(float));
}

/* MLA from the QKV projections (q[j], k[j]) to the output projection's
 * input (act_q[j]) for the m positions of layer l */
static void mla_batch(eng_session *s, const eng_layer *ly, unsigned l, unsigned m)
{
    float *out[FMT_NMATRIX] = { 0 };
    size_t ld[FMT_NMATRIX] = { 0 };
    if (s->hp->mla_q_rank) {
        each_position(s, ly, m, step_mla_qa);
        out[FMT_M_Q_B] = s->bat.q;
        ld[FMT_M_Q_B] = ly->q_dim;
        eng_matmat_stream(s, &ly->q_b, s->bat.act_q, m, out, ld);
        out[FMT_M_Q_B] = NULL;
    }
    each_position(s, ly, m, step_mla_qk);
    out[FMT_M_K_B] = s->bat.att;
    ld[FMT_M_K_B] = ly->q_dim;
    eng_matmat_stream(s, &ly->k_b, s->bat.act_q, m, out, ld);
    each_position(s, ly, m, step_mla_absorbed);
    eng_attn_store_attend_batch(s, ly, l, m, s->bat.q, s->bat.k, NULL, s->bat.att);
    each_position(s, ly, m, step_mla_latent);
    out[FMT_M_K_B] = NULL;
    out[FMT_M_V_B] = s->bat.att;
    ld[FMT_M_V_B] = ly->q_dim;
    eng_matmat_stream(s, &ly->v_b, s->bat.act_q, m, out, ld);
    each_position(s, ly, m, step_mla_out);
}

/* A layer with experts: each position's residual takes the combine of
 * sched_parallel_sqrt2 (eng_combine_sqrt2). */
static void combine_batch(eng_session *s, const eng_layer *ly, unsigned m)
{
    const size_t dim = s->hp->dim;
    for (unsigned j = 0; j < m; j++)
        eng_combine_sqrt2(s, ly, s->bat.x + j * dim, s->bat.dn + j * dim, s->bat.e + j * dim);
}

/* The m (<= ENG_BATCH) rows of the batch room through every layer: row j
 * token tokens[j] at position pos[j] of sequence seq[j]; the logits as
 * `logits` says (ENG_LOGITS_*). */
void eng_forward_batch(eng_session *s, const int32_t *tokens, unsigned m, int logits)
{
    const fmt_hparams *hp = s->hp;
    const uint32_t dim = hp->dim, L = hp->n_layers;
    float *out[FMT_NMATRIX] = { 0 };
    size_t ld[FMT_NMATRIX] = { 0 };
    double pt = s->prof ? prof_now() : 0.0;
    s->mv_bytes = 0;

    eng_fetch_tick(s, m);            /* the expert cache's clock: m tokens */
    for (unsigned j = 0; j < m; j++)
        eng_embed(s, tokens[j], s->bat.x + (size_t)j * dim);
    for (uint32_t l = 0; l < L; l++) {
        const eng_layer *ly = &s->layers[l];
        const uint32_t qd = ly->q_dim, kvd = ly->kv_dim;
        eng_prefetch_next(s, l);
        /* attention */
        each_position(s, ly, m, step_attn_in);
        memset(out, 0, sizeof out);
        out[FMT_M_Q] = s->bat.q;
        out[FMT_M_K] = s->bat.k;
        out[FMT_M_V] = s->bat.v;
        ld[FMT_M_Q] = qd;
        ld[FMT_M_K] = ld[FMT_M_V] = kvd;
        eng_matmat_stream(s, &ly->qkv, s->bat.act_dim, m, out, ld);
        if (hp->mla_rank) {
            mla_batch(s, ly, l, m);
        } else {
            each_position(s, ly, m, step_qkv_post);
            eng_attn_store_attend_batch(s, ly, l, m, s->bat.q, s->bat.k, s->bat.v, s->bat.att);
            each_position(s, ly, m, step_attn_out);
        }
        matmat_residual(s, ly, &ly->o, FMT_M_O, s->bat.act_q, m,
                        ly->o_bias || ly->attn_post_norm ? step_attn_post : NULL);
        eng_mark(s, l, PROF_ST_ATTN, &pt);
        /* FFN: the dense one, the experts, their combine */
        const int moe = ly->exp_gu != NULL;
        if (ly->dense)
            ffn_batch(s, ly, m, moe);
        else if (moe && ly->sh_gu.st)
            shared_batch(s, ly, m);
        eng_mark(s, l, PROF_ST_FFN, &pt);
        if (!moe)
            continue;
        if (eng_moe_batch(s, l, s->bat.x, m, s->bat.e, &pt))
            return;                  /* a failed read: the positions are not taken */
        eng_mark(s, l, PROF_ST_EXPERTS, &pt);
        combine_batch(s, ly, m);
    }
    for (unsigned j = 0; j < m; j++) {          /* each row takes its position */
        eng_seq *seq = s->bat.seq[j];
        seq->tok[s->bat.pos[j]] = tokens[j];
        seq->n_past = s->bat.pos[j] + 1;
    }
    if (hp->n_experts)
        s->stats.expert_tokens += m;
    if (logits == ENG_LOGITS_LAST) {              /* the LM head, the last row only */
        memcpy(s->dec.x, s->bat.x + (size_t)(m - 1) * dim, dim * sizeof(float));
        eng_lm_head(s, s->bat.seq[m - 1]->logits);
    } else if (logits == ENG_LOGITS_ALL) {
        head_batch(s, m);
    }
}

