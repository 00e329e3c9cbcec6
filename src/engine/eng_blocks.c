/*
 * eng_blocks.c — the blocks a layer is built of: the embedding row, the
 * norms, attention (QKV, RoPE, the cache store and attend, the output
 * projection), the dense SwiGLU/GeGLU FFN and the LM head, over one pass
 * of a tile stream per matrix group (the mat-vec, and the mat-mat of a
 * batched prompt chunk).
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
 *     (kern_*_ggml), and Q4_0 matrices whose row count is a multiple of 8
 *     summed as llama.cpp's repacked kernel (tile_mv_q4_0_rp), since
 *     llama.cpp repacks exactly those;
 *   - anything else: run.c's order (kern_rmsnorm, kern_rope, kern_swiglu).
 * The tile kernels and the Q8_0 activation quantiser follow llama.cpp for
 * every model (kernels/kern_ref.c); run.c models are F32, where the
 * kernels keep run.c's sum.
 *
 * KV precision.  llama.cpp's CPU backend keeps the cache in f16 by default
 * and runs flash attention over it, accumulating the weighted values in
 * f16: the largest single difference from an f32 softmax.  kv_f16
 * (eng_opts) therefore defaults to f16 for GGUF models and to f32 (run.c's
 * attention) otherwise; the f16 cache also halves the cache's memory and
 * bandwidth.  With both, stories260K's F32/F16/Q8_0/Q4_0 GGUF files give
 * llama.cpp's greedy texts byte for byte.
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/eng_impl.h"
#include "kernels/kern.h"
#include "prof/prof.h"

/* A parallel region over n tile streams: stream j's units are units
 * [first[j], first[j + 1]) of one index space, so the pool deals them out
 * as one run (thread i takes the i-th contiguous slice of it) and a
 * thread that finishes early helps with whichever stream is left.  The
 * routed experts of a decode step go through one region so (their
 * gate/up streams, then their down streams): 2 regions a layer instead of
 * 2 per expert, so fewer wake-ups and waits at a region's end, and each
 * thread streams one long run of weights across the experts' boundaries. */
typedef struct mv_task {
    const kern_ops        *ops;
    unsigned               n;      /* streams */
    const eng_mv *const   *mv;     /* [n] */
    const kern_act *const *x;      /* [n] each stream's prepared input */
    float *const *const   *out;    /* [n] each an out[FMT_NMATRIX] */
    size_t                 first[ENG_MV_MAX + 1];
    eng_pool              *pool;
} mv_task;

/* Whether a tile takes the repacked Q4_0 kernel: a Q4_0 tile of a matrix
 * mv_init marked (the one rule for the mat-vec and the mat-mat). */
static int tile_rp(const eng_mv *mv, const fmt_tile *ti)
{
    return ti->type == KERN_Q4_0 && (mv->rp >> ti->matrix & 1);
}

/* The kernel for a tile: its type's, or the repacked Q4_0 flavour. */
static kern_tile_mv_fn tile_fn(const kern_ops *ops, const eng_mv *mv,
                               const fmt_tile *ti)
{
    if (tile_rp(mv, ti))
        return ops->tile_mv_q4_0_rp;
    return ops->tile_mv[ti->type];
}

/* Tiles [i0, i1) of stream mv into out. */
static void mv_tiles(const kern_ops *ops, const eng_mv *mv, uint32_t i0, uint32_t i1,
                     const kern_act *x, float *const *out)
{
    const fmt_tile *ti = mv->st->tiles + i0;
    for (uint32_t i = i0; i < i1; i++, ti++)
        tile_fn(ops, mv, ti)(ti->payload, ti->rows, ti->cols, x, ti->col0,
                             out[ti->matrix] + ti->row0);
}

static void mv_run(void *ctx, int tid, int n_threads)
{
    const mv_task *t = ctx;
    unsigned j = 0;
    for (;;) {
        size_t u = eng_pool_claim(t->pool, tid, n_threads, t->first[t->n]);
        if (u >= t->first[t->n])
            break;
        while (u < t->first[j] || u >= t->first[j + 1])   /* mostly the same j */
            j = u < t->first[j] ? j - 1 : j + 1;
        const eng_mv *mv = t->mv[j];
        size_t k = u - t->first[j];
        mv_tiles(t->ops, mv, mv->unit[k], mv->unit[k + 1], t->x[j], t->out[j]);
    }
}

/* One pass over each of n (fused) tile streams (n <= ENG_MV_MAX), in one
 * parallel region: out[j][matrix] receives stream j's tiles' partial sums.
 * Outputs must be zeroed by the caller.  Each output row is summed by one
 * thread in the stream's tile order, so the bits do not depend on n or on
 * the thread count. */
void eng_matvec_streams(eng_session *s, unsigned n, const eng_mv *const *mv,
                        const kern_act *const *x, float *const *const *out)
{
    mv_task t = { .ops = s->ops, .n = n, .mv = mv, .x = x, .out = out, .pool = s->pool };
    uint64_t bytes = 0;
    for (unsigned j = 0; j < n; j++) {
        t.first[j + 1] = t.first[j] + mv[j]->n_units;
        bytes += mv[j]->st->length;
    }
    s->mv_bytes += bytes;   /* every tile of the streams is read */
    /* Waking workers costs microseconds: below a few hundred KB of tiles
     * (or with one unit) the caller does the whole pass itself. */
    if (t.first[n] < 2 || bytes < ENG_PAR_MIN_BYTES) {
        for (unsigned j = 0; j < n; j++)
            mv_tiles(s->ops, mv[j], 0, mv[j]->st->n_tiles, x[j], out[j]);
        return;
    }
    eng_pool_run(s->pool, mv_run, &t);
}

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
    free(d->par_sc); free(d->par_h16);
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

/* The session's peer decides the arithmetic (see the essay at the top). */
void eng_rmsnorm(const eng_session *s, float *out, const float *x,
                    const float *w, unsigned n)
{
    if (s->ggml)
        kern_rmsnorm_ggml(out, x, w, n, s->hp->norm_eps);
    else
        kern_rmsnorm(out, x, w, n, s->hp->norm_eps);
}

/* RoPE of layer ly: its head size, rotated dimensions and base. */
static void rope(const eng_session *s, const eng_layer *ly, float *x,
                 unsigned n_heads, uint32_t pos)
{
    const fmt_hparams *hp = s->hp;
    const fmt_layer_geom *g = ly->g;
    int neox = (hp->flags & FMT_FLAG_ROPE_NEOX) != 0;
    if (s->ggml)
        kern_rope_ggml(x, n_heads, g->head_dim, g->rope_dims, pos,
                       g->rope_theta, s->rope_ff, neox);
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
    /* Qwen3: per-head RMSNorm of q and k (one weight vector for all heads),
     * before RoPE */
    if (ly->q_norm)
        for (uint32_t hh = 0; hh < g->n_heads; hh++)
            eng_rmsnorm(s, q + hh * hd, q + hh * hd, ly->q_norm, hd);
    if (ly->k_norm)
        for (uint32_t hh = 0; hh < g->n_kv_heads; hh++)
            eng_rmsnorm(s, k + hh * hd, k + hh * hd, ly->k_norm, hd);
    if (hp->flags & FMT_FLAG_V_NORM)
        for (uint32_t hh = 0; hh < g->n_kv_heads; hh++)
            eng_rmsnorm(s, v + hh * hd, v + hh * hd, NULL, hd);
    rope(s, ly, q, g->n_heads, pos);
    rope(s, ly, k, g->n_kv_heads, pos);
}

typedef struct attn_task {
    eng_session *s;
    const float *q;
    float       *att;
    const void  *k, *v;      /* first visible position of this layer's cache */
    uint32_t     n_pos, n_heads, n_kv_heads, hd;
    float       *sc;         /* scores: n_heads rows of dec.ctx floats */
    uint16_t    *h16;        /* n_heads * 2 * hd_max halves */
} attn_task;

/* Heads [h0, h1) of an attention task, each with its own scratch. */
static void attn_heads(const attn_task *t, unsigned h0, unsigned h1)
{
    eng_session *s = t->s;
    /* the heads' score rows are contiguous: (h1 - h0) * dec.ctx floats */
    if (s->kv_f16) {
        s->ops->attn_f16(t->att, t->q, t->k, t->v, t->n_pos, h0, h1,
                         t->n_heads, t->n_kv_heads, t->hd, s->kv_dim,
                         1.0f / sqrtf((float)t->hd), 0.0f,
                         t->sc + (size_t)h0 * s->dec.ctx,
                         t->h16 + (size_t)h0 * 2 * s->hd_max);
        return;
    }
    s->ops->attn_f32(t->att, t->q, t->k, t->v, t->n_pos, h0, h1, t->n_heads,
                     t->n_kv_heads, t->hd, s->kv_dim, 1.0f / sqrtf((float)t->hd),
                     0.0f, t->sc + (size_t)h0 * s->dec.ctx);
}

/* Heads per claim: whole kv-head groups (the query heads that share one
 * kv head read the same K and V rows, so they stay on one core), at least
 * 4 heads so that the kernels that run several heads side by side get
 * them even without GQA.  The arithmetic of a head does not depend on who
 * runs it, nor on the claim it came in. */
static unsigned attn_chunk(const attn_task *t)
{
    unsigned G = t->n_kv_heads ? t->n_heads / t->n_kv_heads : 1;
    if (!G)
        G = 1;
    return G * ((4 + G - 1) / G);
}

static void attn_run(void *ctx, int tid, int n_threads)
{
    const attn_task *t = ctx;
    const unsigned chunk = attn_chunk(t);
    (void)tid;
    (void)n_threads;
    for (;;) {
        size_t c = eng_pool_next(t->s->pool, 1);
        if (c * chunk >= t->n_heads)
            break;
        unsigned h0 = (unsigned)c * chunk;
        attn_heads(t, h0, h0 + chunk < t->n_heads ? h0 + chunk : t->n_heads);
    }
}

/* Multiply-adds (n_pos * n_heads * hd, summed over positions) below
 * which attention stays on the caller: waking workers costs more. */
#define ATTN_PAR_MIN 16384u

/* Grow the per-head scratch of the parallel path to n_heads heads for
 * `copies` threads at once (one copy: a single position's heads; the
 * batched prefill's threads each attend their own position): 0, or -1
 * when memory is short (the caller then takes the one-thread path). */
static int attn_scratch(eng_session *s, uint32_t n_heads, uint32_t copies)
{
    uint64_t want = (uint64_t)n_heads * copies;
    if (s->dec.par_heads >= want)
        return 0;
    float *sc = realloc(s->dec.par_sc, want * s->dec.ctx * sizeof(float));
    if (sc)
        s->dec.par_sc = sc;
    uint16_t *h16 = realloc(s->dec.par_h16, want * 2 * s->hd_max * sizeof(uint16_t));
    if (h16)
        s->dec.par_h16 = h16;
    if (!sc || !h16)
        return -1;
    s->dec.par_heads = (uint32_t)want;
    return 0;
}

/* Store this position's k, v into sequence seq's cache of effective layer
 * kvl; the attention task of the position (its q, att, visible cache). */
static attn_task attn_store(eng_session *s, eng_seq *seq, const eng_layer *ly,
                            unsigned kvl, uint32_t pos, const float *q, const float *k,
                            const float *v, float *att)
{
    const fmt_layer_geom *g = ly->g;
    uint32_t kvd = ly->kv_dim;
    const size_t lo = (size_t)kvl * seq->n_ctx * s->kv_dim;  /* layer offset */
    /* sliding-window layers see only the last sliding_window positions */
    uint32_t first = 0, W = g->sliding_window;
    if (W && pos + 1 > W)
        first = pos + 1 - W;
    attn_task t = { s, q, att, NULL, NULL, pos + 1 - first, g->n_heads,
                    g->n_kv_heads, g->head_dim, NULL, NULL };  /* scratch: the caller's */
    if (s->kv_f16) {
        uint16_t *kc = seq->kc16 + lo, *vc = seq->vc16 + lo;
        uint16_t *kp = kc + (size_t)pos * s->kv_dim, *vp = vc + (size_t)pos * s->kv_dim;
        for (uint32_t i = 0; i < kvd; i++) {
            kp[i] = kern_fp32_to_fp16(k[i]);
            vp[i] = kern_fp32_to_fp16(v[i]);
        }
        t.k = kc + (size_t)first * s->kv_dim;
        t.v = vc + (size_t)first * s->kv_dim;
    } else {
        float *kc = seq->kc + lo, *vc = seq->vc + lo;
        float *kp = kc + (size_t)pos * s->kv_dim, *vp = vc + (size_t)pos * s->kv_dim;
        if (kp != k)
            memcpy(kp, k, kvd * sizeof(float));
        if (vp != v)
            memcpy(vp, v, kvd * sizeof(float));
        t.k = kc + (size_t)first * s->kv_dim;
        t.v = vc + (size_t)first * s->kv_dim;
    }
    return t;
}

/* Attend one stored position: att[n_heads*hd] from q. */
static void attn_attend(eng_session *s, attn_task *t)
{
    const uint32_t hd = t->hd;
    int scratch = attn_scratch(s, t->n_heads, 1) == 0;
    t->sc = s->dec.par_sc;
    t->h16 = s->dec.par_h16;
    /* The work is about n_pos * n_heads * hd multiply-adds: small caches
     * stay on the caller; without scratch, the scalar kernels as before. */
    if (scratch && eng_pool_size(s->pool) >= 2 &&
        (uint64_t)t->n_pos * t->n_heads * hd >= ATTN_PAR_MIN) {
        eng_pool_run(s->pool, attn_run, t);
    } else if (scratch) {
        attn_heads(t, 0, t->n_heads);
    } else {
        if (s->kv_f16)
            kern_attn_decode_f16(t->att, t->q, t->k, t->v, t->n_pos, t->n_heads,
                                 t->n_kv_heads, hd, s->kv_dim,
                                 1.0f / sqrtf((float)hd), 0.0f, s->dec.att16);
        else
            kern_attn_decode(t->att, t->q, t->k, t->v, t->n_pos, t->n_heads,
                             t->n_kv_heads, hd, s->kv_dim, 1.0f / sqrtf((float)hd),
                             0.0f, s->dec.scores);
    }
}

/* The rows of a batch, each's heads in claims of attn_chunk:
 * unit u is position u / per, claim u % per; a thread's scores go to its
 * own copy of the scratch (tid). */
typedef struct attn_batch {
    attn_task t[ENG_BATCH];
    unsigned  m, per, chunk;
} attn_batch;

static void attn_batch_run(void *ctx, int tid, int n_threads)
{
    const attn_batch *b = ctx;
    eng_session *s = b->t[0].s;
    (void)n_threads;
    for (;;) {
        size_t u = eng_pool_next(s->pool, 1);
        if (u >= (size_t)b->m * b->per)
            break;
        attn_task t = b->t[u / b->per];
        const uint32_t nh = t.n_heads;
        t.sc = s->dec.par_sc + (size_t)tid * nh * s->dec.ctx;
        t.h16 = s->dec.par_h16 + (size_t)tid * nh * 2 * s->hd_max;
        unsigned h0 = (unsigned)(u % b->per) * b->chunk;
        attn_heads(&t, h0, h0 + b->chunk < nh ? h0 + b->chunk : nh);
    }
}

/* ---- a prompt chunk's tiled attention --------------------------------------
 * Where llama.cpp's prefill takes its tiled flash attention (a ubatch of
 * 64 tokens or more over an f16 cache; eng_prefill sets pf_tiled), the
 * chunk's attention is kern_ops.attn_prefill_f16: per KV head, the rows of
 * the query heads that read it (G = n_heads / n_kv_heads of them a
 * position) go through each 64-position tile of the cache together, so a
 * tile's K and V are widened once for G * positions rows instead of read
 * by every row on its own.  A claim is one KV head and a block of
 * positions; every row's bits are its own (kern.h), so neither the blocks
 * nor the threads change them. */
typedef struct attn_tiled_task {
    eng_session    *s;
    const float    *q;
    float          *att;
    const uint16_t *k, *v;   /* this layer's cache at position 0 */
    uint32_t        pos0, m, pb, nblk, G, hd, n_kv;
} attn_tiled_task;

/* Claim u: KV head u / nblk, the positions of block u % nblk. */
static void attn_tiled_claim(const attn_tiled_task *t, size_t u, float *work)
{
    const eng_session *s = t->s;
    const size_t ld = (size_t)t->G * t->n_kv * t->hd;        /* q_dim */
    const uint32_t kh = (uint32_t)(u / t->nblk), j0 = (uint32_t)(u % t->nblk) * t->pb;
    const uint32_t np = t->m - j0 < t->pb ? t->m - j0 : t->pb;
    const size_t off = (size_t)j0 * ld + (size_t)kh * t->G * t->hd;
    s->ops->attn_prefill_f16(t->att + off, t->q + off, ld, np, t->G, t->pos0 + j0,
                             t->k + (size_t)kh * t->hd, t->v + (size_t)kh * t->hd,
                             s->kv_dim, t->hd, 1.0f / sqrtf((float)t->hd), work);
}

static void attn_tiled_run(void *ctx, int tid, int n_threads)
{
    const attn_tiled_task *t = ctx;
    float *work = t->s->bat.work + (size_t)tid * t->s->bat.work_n;
    (void)n_threads;
    for (size_t u; (u = eng_pool_next(t->s->pool, 1)) < (size_t)t->n_kv * t->nblk;)
        attn_tiled_claim(t, u, work);
}

/* A prompt chunk's attention by attn_prefill_f16 (its k, v already
 * stored; the batch's rows are positions pos0.. of one sequence, seq): 0,
 * or -1 when it does not apply or memory is short (the caller then takes
 * the per-position kernels). */
static int attn_tiled(eng_session *s, const eng_layer *ly, unsigned kvl, unsigned m,
                      const float *q, float *att)
{
    const fmt_layer_geom *g = ly->g;
    const uint32_t W = g->sliding_window, pos0 = s->bat.pos[0];
    const eng_seq *seq = s->bat.seq[0];
    if (!s->bat.tiled || !s->kv_f16 || !s->ops->attn_prefill_f16 || !g->n_kv_heads ||
        g->n_heads % g->n_kv_heads || (W && pos0 + m > W))
        return -1;
    const int nt = eng_pool_size(s->pool);
    attn_tiled_task t = { s, q, att, NULL, NULL, pos0, m, m, 1,
                          g->n_heads / g->n_kv_heads, g->head_dim, g->n_kv_heads };
    /* blocks of positions until there are two claims a thread, a block
     * keeping at least 8 positions */
    while (t.n_kv * t.nblk < 2u * (uint32_t)nt && t.pb >= 16) {
        t.pb = (t.pb + 1) / 2;
        t.nblk = (m + t.pb - 1) / t.pb;
    }
    /* per thread: a claim's work, for as many threads as the pool has now
     * (eng_set_threads may have grown it since the last chunk) */
    const size_t want = KERN_ATTN_PF_WORK(t.pb * t.G, t.hd);
    if (s->bat.work_n < want || s->bat.work_threads < (uint32_t)nt) {
        const size_t per = want > s->bat.work_n ? want : s->bat.work_n;
        float *w = realloc(s->bat.work, per * (size_t)nt * sizeof(float));
        if (!w)
            return -1;
        s->bat.work = w;
        s->bat.work_n = per;
        s->bat.work_threads = (uint32_t)nt;
    }
    const size_t lo = (size_t)kvl * seq->n_ctx * s->kv_dim;  /* layer offset */
    t.k = seq->kc16 + lo;
    t.v = seq->vc16 + lo;
    if (nt >= 2)
        eng_pool_run(s->pool, attn_tiled_run, &t);
    else
        for (size_t u = 0; u < (size_t)t.n_kv * t.nblk; u++)
            attn_tiled_claim(&t, u, s->bat.work);
    return 0;
}

/* The m (<= ENG_BATCH) rows of the batch room, row j position pos[j] of
 * sequence seq[j] (a prompt chunk: consecutive positions of one): store
 * each's k, v (k, v [m][kv_dim]), then attend them all, att [m][q_dim] from
 * q [m][q_dim].  A row sees its sequence's positions up to its own, all
 * stored by then, so the attention of the batch is one parallel region of
 * (row, heads) claims instead of a region a row, and each row's heads get
 * the arithmetic, and the bits, of eng_attn_block's. */
void eng_attn_store_attend_batch(eng_session *s, const eng_layer *ly,
                                 unsigned kvl, unsigned m, const float *q,
                                 const float *k, const float *v, float *att)
{
    const uint32_t qd = ly->q_dim, kvd = ly->kv_dim;
    attn_batch b;
    uint64_t work = 0;
    b.m = m;
    for (unsigned j = 0; j < m; j++) {
        b.t[j] = attn_store(s, s->bat.seq[j], ly, kvl, s->bat.pos[j], q + (size_t)j * qd,
                            k + (size_t)j * kvd, v + (size_t)j * kvd,
                            att + (size_t)j * qd);
        work += (uint64_t)b.t[j].n_pos * b.t[j].n_heads * b.t[j].hd;
    }
    if (attn_tiled(s, ly, kvl, m, q, att) == 0)
        return;
    const int nt = eng_pool_size(s->pool);
    if (m < 2 || nt < 2 || work < ATTN_PAR_MIN ||
        attn_scratch(s, ly->g->n_heads, (uint32_t)nt) != 0) {
        for (unsigned j = 0; j < m; j++)
            attn_attend(s, &b.t[j]);
        return;
    }
    b.chunk = attn_chunk(&b.t[0]);
    b.per = (ly->g->n_heads + b.chunk - 1) / b.chunk;
    eng_pool_run(s->pool, attn_batch_run, &b);
}

/* m = Attn(N_a(h)) into mout[dim] at sequence seq's next position; kvl
 * picks the KV cache (the effective layer).  h and mout may not alias. */
void eng_attn_block(eng_session *s, eng_seq *seq, const eng_layer *ly, unsigned kvl,
                    const float *h, float *mout)
{
    const fmt_hparams *hp = s->hp;
    uint32_t dim = hp->dim, pos = seq->n_past;
    uint32_t qd = ly->q_dim, kvd = ly->kv_dim;   /* this layer's widths */
    const size_t lo = (size_t)kvl * seq->n_ctx * s->kv_dim;  /* layer offset */
    float *out[FMT_NMATRIX] = { 0 };
    float *k, *v;                   /* this position's k and v */
    if (s->kv_f16) {
        k = s->dec.k_tmp;               /* rounded into kc16/vc16 below */
        v = s->dec.v_tmp;
    } else {
        k = seq->kc + lo + (size_t)pos * s->kv_dim;
        v = seq->vc + lo + (size_t)pos * s->kv_dim;
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
    attn_task t = attn_store(s, seq, ly, kvl, pos, s->dec.q, k, v, s->dec.att);
    attn_attend(s, &t);
    kern_act_set(&s->dec.act_q, s->dec.att, qd, ly->o.need);
    memset(mout, 0, dim * sizeof(float));
    out[FMT_M_O] = mout;
    matvec_stream(s, &ly->o, &s->dec.act_q, out);
}

/* One SwiGLU/GeGLU FFN over the prepared input act, from a fused gate/up
 * stream and a down stream, into dout[dim] (overwritten). */
/* g[0..n) = act(g) * u: GeGLU where the header says so, else SwiGLU in
 * llama.cpp's arithmetic for GGUF-sourced models or run.c's otherwise. */
void eng_glu_act(eng_session *s, float *g, const float *u, uint32_t n)
{
    if (s->hp->flags & FMT_FLAG_GELU)
        kern_geglu(g, g, u, n);
    else if (s->ggml)
        s->ops->swiglu_ggml(g, g, u, n);
    else
        kern_swiglu(g, g, u, n);
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

/* d = FFN(N_f(h)) into dout; zero when there is no dense FFN or no h (a
 * delayed residual from before layer 0). */
void eng_ffn_block(eng_session *s, const eng_layer *ly, const float *h,
                      float *dout)
{
    const fmt_hparams *hp = s->hp;
    if (!hp->ffn_dim || !h) {
        memset(dout, 0, hp->dim * sizeof(float));
        return;
    }
    eng_rmsnorm(s, s->dec.xb, h, ly->ffn_norm, hp->dim);
    kern_act_set(&s->dec.act_dim, s->dec.xb, hp->dim, ly->gate_up.need);
    eng_glu_ffn(s, &ly->gate_up, &ly->down, hp->ffn_dim, FMT_M_GATE, FMT_M_UP,
            FMT_M_DOWN, &s->dec.act_dim, dout);
}

/* The L2 norm of x[0..n), in double. */
double eng_l2(const float *x, uint32_t n)
{
    double acc = 0.0;
    for (uint32_t i = 0; i < n; i++)
        acc += (double)x[i] * x[i];
    return sqrt(acc);
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

typedef struct mm_task {
    const kern_ops *ops;
    const eng_mv   *mv;
    const kern_act *x;       /* [m] */
    unsigned        m;
    float *const   *out;     /* per matrix: position 0's output */
    const size_t   *ld;      /* per matrix: floats between positions */
    eng_pool       *pool;
} mm_task;

static kern_tile_mm_fn tile_mm_fn(const kern_ops *ops, const eng_mv *mv,
                                  const fmt_tile *ti)
{
    if (tile_rp(mv, ti))
        return ops->tile_mm_q4_0_rp;
    return ops->tile_mm[ti->type];
}

static void mm_unit(const mm_task *t, size_t u)
{
    const eng_mv *mv = t->mv;
    for (uint32_t i = mv->unit[u]; i < mv->unit[u + 1]; i++) {
        const fmt_tile *ti = &mv->st->tiles[i];
        tile_mm_fn(t->ops, mv, ti)(ti->payload, ti->rows, ti->cols, t->x, t->m,
                                   ti->col0, t->out[ti->matrix] + ti->row0,
                                   t->ld[ti->matrix]);
    }
}

static void mm_run(void *ctx, int tid, int n_threads)
{
    const mm_task *t = ctx;
    (void)tid;
    (void)n_threads;
    for (;;) {
        size_t u = eng_pool_next(t->pool, 1);
        if (u >= t->mv->n_units)
            break;
        mm_unit(t, u);
    }
}

void eng_matmat_stream(eng_session *s, const eng_mv *mv, const kern_act *x,
                       unsigned m, float *const *out, const size_t *ld)
{
    mm_task t = { s->ops, mv, x, m, out, ld, s->pool };
    s->mv_bytes += mv->st->length;
    if (mv->n_units < 2) {
        for (size_t u = 0; u < mv->n_units; u++)
            mm_unit(&t, u);
        return;
    }
    eng_pool_run(s->pool, mm_run, &t);
}
