/*
 * eng_moe_route.c — the router: its softmax over the experts, the top-k
 * by probability (in order, ties to the lower index) and their weights,
 * renormalised over the k unless the model says not (Qwen3-MoE).  Routing
 * (eng_moe.c, eng_moe_batch.c) counts its choices per layer for the
 * expert pane; look-ahead's guesses (eng_moe_ahead.c) use the same top-k
 * on another layer's input and count nothing.  Scratch: s->dec.probs
 * [n_experts].  The router is an f32 [n_experts][dim] matrix, 1 MiB for
 * Qwen3-MoE, read once for each routing and each guess: its rows are
 * split among the pool's threads (eng_moe_logits), every dot product
 * whole in one thread, so the logits do not depend on the thread count,
 * and look-ahead's guesses for several layers share one region.  A
 * prefill chunk's positions share one pass over their layer's router
 * (eng_moe_route_many): each row is used for every position while it is
 * in L1, so the chunk reads the router once, not once per position, and
 * each logit is the same dot product as a position routed alone.
 */
#include "config.h"

#include <math.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/eng_impl.h"
#include "kernels/kern.h"

/* Router rows a thread takes at a time: 16 rows of a 2048-wide f32
 * router are 128 KiB, eight bites of Qwen3-MoE's 1 MiB router. */
#define ROUTER_UNIT 16u

typedef struct router_task {
    const kern_ops     *ops;
    eng_pool           *pool;
    uint32_t            dim, E;
    unsigned            many;             /* inputs per pass, sharing its router */
    size_t              units, all;       /* units per pass (E / ROUTER_UNIT up); all passes' */
    const float *const *w;                /* [n] each pass's router [E][dim] */
    const float *const *x;                /* [n * many] each pass's inputs [dim] */
    float *const       *out;              /* [n * many] their logits [E] */
} router_task;

/* Unit u: ROUTER_UNIT rows of one pass, each row's dot product whole,
 * each row over all the pass's inputs while it is in L1. */
static void router_rows(const router_task *t, size_t u)
{
    size_t j = u / t->units;
    uint32_t e0 = (uint32_t)(u % t->units) * ROUTER_UNIT;
    uint32_t e1 = e0 + ROUTER_UNIT < t->E ? e0 + ROUTER_UNIT : t->E;
    for (uint32_t e = e0; e < e1; e++)
        for (size_t i = j * t->many; i < (j + 1) * t->many; i++)
            t->out[i][e] = t->ops->dot_f32(t->w[j] + (size_t)e * t->dim, t->x[i], t->dim);
}

static void router_run(void *ctx, int tid, int n_threads)
{
    const router_task *t = ctx;
    for (;;) {
        size_t u = eng_pool_claim(t->pool, tid, n_threads, t->all);
        if (u >= t->all)
            break;
        router_rows(t, u);
    }
}

/* n passes of many inputs each through routers ly[0 .. n). */
static void logits_run(eng_session *s, unsigned n, unsigned many, const eng_layer *const *ly,
                       const float *const *x, float *const *out)
{
    const uint32_t E = s->hp->n_experts, dim = s->hp->dim;
    const float *w[ENG_AHEAD_MAX + 1];
    router_task t = { .ops = s->ops, .pool = s->pool, .dim = dim, .E = E, .many = many,
                      .units = (E + ROUTER_UNIT - 1) / ROUTER_UNIT, .w = w, .x = x,
                      .out = out };
    if (n > ENG_AHEAD_MAX + 1)
        n = ENG_AHEAD_MAX + 1;       /* (the callers pass at most this) */
    for (unsigned j = 0; j < n; j++)
        w[j] = ly[j]->router;
    t.all = t.units * n;
    /* as eng_matvec_streams: small routers are not worth waking workers
     * (the work: passes x inputs x the router's bytes) */
    if (t.all < 2 || (uint64_t)n * many * E * dim * sizeof(float) < ENG_PAR_MIN_BYTES) {
        for (size_t u = 0; u < t.all; u++)
            router_rows(&t, u);
        return;
    }
    eng_pool_run(s->pool, router_run, &t);
}

void eng_moe_logits(eng_session *s, unsigned n, const eng_layer *const *ly,
                    const float *const *x, float *const *out)
{
    logits_run(s, n, 1, ly, x, out);
}

void eng_moe_pick(eng_session *s, float *p, int *expert, float *w)
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
    /* one pass keeping the k best in order: an expert goes after every
     * one at least as likely, so ties keep the lower index first */
    for (uint32_t e = 0; e < E; e++) {
        if (k == K && !(p[e] > p[expert[K - 1]]))
            continue;
        uint32_t at = k < K ? k++ : K - 1;
        while (at > 0 && p[e] > p[expert[at - 1]]) {
            expert[at] = expert[at - 1];
            at--;
        }
        expert[at] = (int)e;
    }
    for (uint32_t j = 0; j < K; j++)
        wsum += p[expert[j]];
    for (uint32_t j = 0; j < K; j++)
        w[j] = (hp->flags & FMT_FLAG_MOE_NO_RENORM)
                   ? p[expert[j]]      /* Qwen3-MoE, norm_topk_prob off */
                   : p[expert[j]] / wsum;
}

void eng_moe_topk(eng_session *s, const eng_layer *ly, const float *xr,
                  int *expert, float *w)
{
    float *out = s->dec.probs;
    eng_moe_logits(s, 1, &ly, &xr, &out);
    eng_moe_pick(s, s->dec.probs, expert, w);
}

/* The expert pane's per-layer counts of the choices expert[top_k]. */
static void count_choices(eng_session *s, const eng_layer *ly, const int *expert)
{
    uint64_t *cnt = s->routed + (size_t)(ly - s->layers) * s->hp->n_experts;
    for (uint32_t j = 0; j < s->hp->top_k; j++)
        cnt[expert[j]]++;
}

void eng_moe_route(eng_session *s, const eng_layer *ly, const float *xr,
                   int *expert, float *w)
{
    eng_moe_topk(s, ly, xr, expert, w);
    count_choices(s, ly, expert);
}

void eng_moe_route_many(eng_session *s, const eng_layer *ly, unsigned m, const float *xr,
                        float *logits, int *expert, float *w)
{
    const uint32_t dim = s->hp->dim, E = s->hp->n_experts, K = s->hp->top_k;
    const float *x[ENG_BATCH] = { 0 };
    float *out[ENG_BATCH] = { 0 };
    if (m > ENG_BATCH)
        m = ENG_BATCH;               /* (the caller passes at most this) */
    for (unsigned i = 0; i < m; i++) {
        x[i] = xr + (size_t)i * dim;
        out[i] = logits + (size_t)i * E;
    }
    logits_run(s, 1, m, &ly, x, out);
    for (unsigned i = 0; i < m; i++) {
        eng_moe_pick(s, out[i], expert + (size_t)i * K, w + (size_t)i * K);
        count_choices(s, ly, expert + (size_t)i * K);
    }
}

int eng_expert_routed(const eng_session *s, unsigned layer, uint64_t *counts)
{
    const uint32_t E = s->hp->n_experts;
    if (layer >= s->hp->n_layers || !E)
        return ENG_EARG;
    memcpy(counts, s->routed + (size_t)layer * E, E * sizeof *counts);
    return 0;
}
