/*
 * eng_attn.c — attention over a sequence's KV cache: a position's k and v
 * stored into its layer's rows (a sliding layer's ring, eng_kv_row), its
 * query heads attended over the rows it sees, in the pool's threads: one
 * position (decode), a batch's rows together (a prompt chunk, or one
 * position of each of several sequences), or llama.cpp's tiled prefill
 * attention; and what follows the output projection.  The blocks that
 * project q, k, v and the output (eng_blocks.c, eng_mla.c) call these.
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

typedef struct attn_task {
    eng_session *s;
    const float *q;
    float       *att;
    const void  *k, *v;      /* first visible position of this layer's cache */
    uint32_t     n_pos, n_heads, n_kv_heads, hd;
    float       *sc;         /* scores: n_heads rows of dec.ctx floats */
    uint16_t    *h16;        /* n_heads * 2 * hd_max halves */
    float        scale, softcap;   /* of the scores (eng_attn_scale) */
    const float *sinks;      /* [n_heads] the layer's sinks, or NULL */
} attn_task;

/* The scale of the layer's q.k scores: the header's (Phi-3 and Gemma scale
 * q instead and take 1 here), else 1/sqrt(head_dim). */
static float attn_scale(const eng_session *s, const eng_layer *ly)
{
    return s->hp->attn_scale > 0.0f ? s->hp->attn_scale : 1.0f / sqrtf((float)ly->g->head_dim);
}

/* Heads [h0, h1) of an attention task, each with its own scratch. */
static void attn_heads(const attn_task *t, unsigned h0, unsigned h1)
{
    eng_session *s = t->s;
    /* the heads' score rows are contiguous: (h1 - h0) * dec.ctx floats */
    if (s->kv_f16) {
        s->ops->attn_f16(t->att, t->q, t->k, t->v, t->n_pos, h0, h1,
                         t->n_heads, t->n_kv_heads, t->hd, s->kv_dim,
                         t->scale, t->softcap, t->sinks,
                         t->sc + (size_t)h0 * s->dec.ctx,
                         t->h16 + (size_t)h0 * 2 * s->hd_max);
        return;
    }
    s->ops->attn_f32(t->att, t->q, t->k, t->v, t->n_pos, h0, h1, t->n_heads,
                     t->n_kv_heads, t->hd, s->kv_dim, t->scale, t->softcap, t->sinks,
                     t->sc + (size_t)h0 * s->dec.ctx);
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

/* A wrapped ring's rows in the order of their positions, oldest first:
 * rows [r0, cap) then [0, r0) copied into the decode scratch (ring_k,
 * ring_v), so the attention sums over the window in the order llama.cpp's
 * cache holds it (its SWA cells run in position order until they wrap; an
 * f16 accumulator's roundings depend on the order).  The copy is the
 * window's K and V once a token, the price of keeping only the window;
 * when memory is short the ring's own order is used. */
static void ring_in_order(eng_session *s, attn_task *t, uint32_t cap, uint32_t r0)
{
    eng_scratch *d = &s->dec;
    const size_t es = s->kv_f16 ? sizeof(uint16_t) : sizeof(float);
    const size_t row = (size_t)s->kv_dim * es, n = (size_t)cap * row;
    if (d->ring_cap < cap) {
        void *k = realloc(d->ring_k, n), *v = k ? realloc(d->ring_v, n) : NULL;
        if (k)
            d->ring_k = k;
        if (!k || !v)
            return;
        d->ring_v = v;
        d->ring_cap = cap;
    }
    const uint8_t *k = t->k, *v = t->v;
    memcpy(d->ring_k, k + r0 * row, (cap - r0) * row);
    memcpy((uint8_t *)d->ring_k + (cap - r0) * row, k, r0 * row);
    memcpy(d->ring_v, v + r0 * row, (cap - r0) * row);
    memcpy((uint8_t *)d->ring_v + (cap - r0) * row, v, r0 * row);
    t->k = d->ring_k;
    t->v = d->ring_v;
}

/* Store this position's k, v into sequence seq's cache of effective layer
 * kvl; the attention task of the position (its q, att, visible cache).  A
 * layer sliding over W positions sees the last W; where its cache is a
 * ring of W rows (eng_kv_row) those are all its rows once it has wrapped,
 * taken in the order of their positions (ring_in_order).  v NULL: MLA,
 * whose values are its keys' rows (eng_mla.c; no V cache). */
static attn_task attn_store(eng_session *s, eng_seq *seq, const eng_layer *ly,
                            unsigned kvl, uint32_t pos, const float *q, const float *k,
                            const float *v, float *att)
{
    const fmt_layer_geom *g = ly->g;
    uint32_t kvd = ly->kv_dim, cap = seq->kv_cap[kvl];
    const size_t lo = seq->kv_off[kvl] * (size_t)s->kv_dim;  /* the layer's first row */
    const size_t at = eng_kv_row(seq, kvl, pos);              /* this position's */
    uint32_t first = 0, W = g->sliding_window, n_pos = pos + 1;
    if (cap < seq->n_ctx)
        n_pos = pos + 1 < cap ? pos + 1 : cap;   /* the ring's rows */
    else if (W && pos + 1 > W)
        first = pos + 1 - W, n_pos = W;
    attn_task t = { s, q, att, NULL, NULL, n_pos, g->n_heads,
                    g->n_kv_heads, g->head_dim, NULL, NULL,   /* scratch: the caller's */
                    attn_scale(s, ly), s->hp->attn_softcap, ly->sinks };
    if (s->kv_f16) {
        uint16_t *kp = seq->kc16 + at;
        for (uint32_t i = 0; i < kvd; i++)
            kp[i] = kern_fp32_to_fp16(k[i]);
        for (uint32_t i = 0; v && i < kvd; i++)
            seq->vc16[at + i] = kern_fp32_to_fp16(v[i]);
        t.k = seq->kc16 + lo + (size_t)first * s->kv_dim;
        t.v = v ? seq->vc16 + lo + (size_t)first * s->kv_dim : t.k;
    } else {
        float *kp = seq->kc + at;
        if (kp != k)
            memcpy(kp, k, kvd * sizeof(float));
        if (v && seq->vc + at != v)
            memcpy(seq->vc + at, v, kvd * sizeof(float));
        t.k = seq->kc + lo + (size_t)first * s->kv_dim;
        t.v = v ? seq->vc + lo + (size_t)first * s->kv_dim : t.k;
    }
    if (cap < seq->n_ctx && pos + 1 > cap && (pos + 1) % cap)
        ring_in_order(s, &t, cap, (pos + 1) % cap);
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
        /* (the scalar tables' kernels, their scratch the session's own) */
        for (uint32_t h = 0; h < t->n_heads; h++) {
            if (s->kv_f16)
                kern_ops_ref()->attn_f16(t->att, t->q, t->k, t->v, t->n_pos, h, h + 1,
                                         t->n_heads, t->n_kv_heads, hd, s->kv_dim, t->scale,
                                         t->softcap, t->sinks, NULL, s->dec.att16);
            else
                kern_ops_ref()->attn_f32(t->att, t->q, t->k, t->v, t->n_pos, h, h + 1,
                                         t->n_heads, t->n_kv_heads, hd, s->kv_dim, t->scale,
                                         t->softcap, t->sinks, s->dec.scores);
        }
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
    float           scale;
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
                             s->kv_dim, t->hd, t->scale, work);
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
    /* (its kernel has neither sinks nor a soft-cap: those layers take the
     * per-position kernels) */
    if (!s->bat.tiled || !s->kv_f16 || !s->ops->attn_prefill_f16 || !g->n_kv_heads ||
        g->n_heads % g->n_kv_heads || (W && pos0 + m > W) || ly->sinks ||
        s->hp->attn_softcap > 0.0f || s->hp->mla_rank)
        return -1;
    const int nt = eng_pool_size(s->pool);
    attn_tiled_task t = { s, q, att, NULL, NULL, pos0, m, m, 1,
                          g->n_heads / g->n_kv_heads, g->head_dim, g->n_kv_heads,
                          attn_scale(s, ly) };
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
    const size_t lo = seq->kv_off[kvl] * (size_t)s->kv_dim;  /* the layer's first row */
    t.k = seq->kc16 + lo;
    t.v = seq->vc16 + lo;
    if (nt >= 2)
        eng_pool_run(s->pool, attn_tiled_run, &t);
    else
        for (size_t u = 0; u < (size_t)t.n_kv * t.nblk; u++)
            attn_tiled_claim(&t, u, s->bat.work);
    return 0;
}

/* Store one position's k, v (v NULL: MLA) and attend: att from q. */
void eng_attn_store_attend(eng_session *s, eng_seq *seq, const eng_layer *ly, unsigned kvl,
                           uint32_t pos, const float *q, const float *k, const float *v,
                           float *att)
{
    attn_task t = attn_store(s, seq, ly, kvl, pos, q, k, v, att);
    attn_attend(s, &t);
}

/* The m (<= ENG_BATCH) rows of the batch room, row j position pos[j] of
 * sequence seq[j] (a prompt chunk: consecutive positions of one): store
 * each's k, v (k, v [m][kv_dim]; v NULL: MLA), then attend them all, att
 * [m][q_dim] from q [m][q_dim].  A row sees its sequence's positions up to its own, all
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
    /* a ring that wraps within the batch: a later row's store would
     * overwrite a row an earlier one sees, so each row stores and attends
     * in turn */
    int wraps = 0;
    for (unsigned j = 0; j < m; j++) {
        const eng_seq *sq = s->bat.seq[j];
        wraps |= sq->kv_cap[kvl] < sq->n_ctx && s->bat.pos[j] + m > sq->kv_cap[kvl];
    }
    for (unsigned j = 0; wraps && j < m; j++) {
        attn_task t = attn_store(s, s->bat.seq[j], ly, kvl, s->bat.pos[j], q + (size_t)j * qd,
                                 k + (size_t)j * kvd, v ? v + (size_t)j * kvd : NULL,
                                 att + (size_t)j * qd);
        attn_attend(s, &t);
    }
    if (wraps)
        return;
    for (unsigned j = 0; j < m; j++) {
        b.t[j] = attn_store(s, s->bat.seq[j], ly, kvl, s->bat.pos[j], q + (size_t)j * qd,
                            k + (size_t)j * kvd, v ? v + (size_t)j * kvd : NULL,
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

/* What follows the output projection before the residual add: its bias
 * (gpt-oss), Gemma's norm of the attention's output. */
void eng_attn_out_post(const eng_session *s, const eng_layer *ly, float *mout)
{
    if (ly->o_bias)
        eng_add_to(mout, ly->o_bias, s->hp->dim);
    if (ly->attn_post_norm)
        eng_rmsnorm(s, mout, mout, ly->attn_post_norm, s->hp->dim);
}
