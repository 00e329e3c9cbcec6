/*
 * eng_sched.c — the layer schedules: how each combine style walks the
 * layer stack (scripts/train/ARCHITECTURES.md is the contract).
 *
 * Every style is built from the same blocks of eng_blocks.c and eng_moe.c,
 * applied to the residual x [dim] with the branch outputs in the session's
 * scratch rows:
 *   m = Attn(N_a(h))    eng_attn_block      into s->dec.m [dim]
 *   d = FFN(N_f(h))     eng_ffn_block       into s->dec.d [dim]
 *   e = MoE(N_m(h))     eng_moe_issue at the routing layer, eng_moe_inject
 *                       (or eng_moe_take, which adds it) at the injection
 *                       layer, into s->dec.e [dim]
 * and differ only in which residual each block reads and where its output
 * lands.  One function per style, picked from a table indexed by the
 * header's combine_style (enum in cflow_format.h); an unknown style runs
 * as ParallelSqrt2, the standard layer.
 *
 * Around every block the profiler gets a mark (eng_mark): the time since
 * the previous mark and the weight bytes the block streamed, booked to
 * the layer's attention, FFN or experts part.  Each finished layer
 * (layer_done) starts look-ahead's reads of the next layers' experts
 * (eng_moe_ahead.c), is checked for NaN and infinity while
 * eng_check_finite runs a token again (eng_probe_layer, eng_check.c), and
 * hands its residual's norm to the trace (trace_layer) when one is
 * attached.
 */
#include "config.h"

#include <math.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/eng_impl.h"
#include "prof/prof.h"

/* Each mark also hands over the bytes its part streamed (s->mv_bytes,
 * counted by the mat-vec of eng_mv.c). */
void eng_mark(eng_session *s, unsigned l, int part, double *pt)
{
    if (s->prof) {
        *pt = prof_layer_mark(s->prof, l, (enum prof_stream)part, *pt);
        prof_layer_bytes(s->prof, l, (enum prof_stream)part, s->mv_bytes);
    }
    s->mv_bytes = 0;
}

/* The residual after effective layer i (trace definition of
 * scripts/train/trace.py); two-stream styles pass their second stream. */
static void trace_layer(eng_session *s, unsigned i, const float *x, const float *a)
{
    eng_trace *t = s->trace;
    uint32_t dim = s->hp->dim;
    if (!t || i >= ENG_TRACE_MAX)
        return;
    if (a && s->hp->combine_style == FMT_COMBINE_DECOUPLED) {
        double acc = 0.0;
        for (uint32_t k = 0; k < dim; k++) {
            double v = 0.5 * ((double)x[k] + a[k]);
            acc += v * v;
        }
        t->layer_l2[i] = sqrt(acc);
    } else {
        t->layer_l2[i] = eng_l2(x, dim);
    }
    if (t->n_layers < i + 1)
        t->n_layers = i + 1;
}

/* Effective layer i is done, its residual x (a: a two-stream style's
 * second stream): what waits for a layer's end. */
static void layer_done(eng_session *s, unsigned i, const float *x, const float *a)
{
    eng_moe_ahead_guess(s, i + 1, x);   /* the next layers' experts, read ahead */
    eng_probe_layer(s, i, x, a);        /* eng_check_finite's second run */
    trace_layer(s, i, x, a);
}

/* ParallelSqrt2's combine in a layer with experts: x += (d + e) / sqrt(2)
 * beside a dense FFN, x += e alone in a layer without one (Mixtral, the
 * families' MoE layers), x += e + d with shared experts' d (DeepSeek,
 * llama.cpp's (moe + shexp) + x).  The decode
 * schedule below and the batched prefill (eng_prefill.c) both add through
 * here, so a position's residual gets the same bits either way. */
void eng_combine_sqrt2(const eng_session *s, const eng_layer *ly, float *x, const float *d,
                       const float *e)
{
    const uint32_t dim = s->hp->dim;
    if (!ly->dense && ly->sh_gu.st) {   /* DeepSeek: (experts + shared) + x */
        for (uint32_t i = 0; i < dim; i++)
            x[i] += e[i] + d[i];
        return;
    }
    if (!ly->dense) {
        eng_add_to(x, e, dim);
        return;
    }
    const float r2 = 0.70710678118654752f;
    for (uint32_t i = 0; i < dim; i++)
        x[i] += (d[i] + e[i]) * r2;
}

/* ParallelSqrt2: the standard pre-norm layer (attention, then the dense
 * FFN, with experts beside it scaled by 1/sqrt(2), or alone: Mixtral). */
static void sched_parallel_sqrt2(eng_session *s, eng_seq *seq, double *pt)
{
    const fmt_hparams *hp = s->hp;
    const uint32_t dim = hp->dim, L = hp->n_layers;
    float *x = s->dec.x, *m = s->dec.m, *d = s->dec.d, *e = s->dec.e;
    const int has_e = hp->n_experts > 0;
    for (unsigned l = 0; l < L; l++) {
        const eng_layer *ly = &s->layers[l];
        eng_prefetch_next(s, l);
        eng_attn_block(s, seq, ly, l, x, m);
        eng_add_to(x, m, dim);
        eng_mark(s, l, PROF_ST_ATTN, pt);
        if (has_e && ly->exp_gu)                /* read beside the dense FFN */
            eng_moe_issue(s, l, x, (int32_t)l, pt);
        eng_ffn_block(s, ly, x, d);
        eng_mark(s, l, PROF_ST_FFN, pt);
        if (!has_e || !ly->exp_gu) {          /* (per-layer: no experts) */
            eng_add_to(x, d, dim);                  /* a standard Llama layer */
            layer_done(s, l, x, NULL);
            continue;
        }
        eng_moe_inject(s, (int32_t)l, e, pt);
        eng_mark(s, l, PROF_ST_EXPERTS, pt);
        eng_combine_sqrt2(s, ly, x, d, e);
        layer_done(s, l, x, NULL);
    }
}

/* DelayedSum: the dense FFN reads the residual of dense_delay layers
 * before, experts land expert_delay layers after their routing. */
static void sched_delayed_sum(eng_session *s, eng_seq *seq, double *pt)
{
    const fmt_hparams *hp = s->hp;
    const uint32_t dim = hp->dim, L = hp->n_layers;
    float *x = s->dec.x, *m = s->dec.m, *d = s->dec.d, *e = s->dec.e;
    const int has_e = hp->n_experts > 0;
    unsigned dd = hp->dense_delay, de = hp->expert_delay, R = dd + 1;
    for (unsigned l = 0; l < L; l++) {
        const eng_layer *ly = &s->layers[l];
        eng_prefetch_next(s, l);
        eng_attn_block(s, seq, ly, l, x, m);
        eng_add_to(x, m, dim);                      /* x is x_mid */
        eng_mark(s, l, PROF_ST_ATTN, pt);
        const float *y = dd == 0 ? x
                         : l >= dd ? s->dec.hist + (size_t)((l - dd) % R) * dim
                                   : NULL;      /* before layer 0: d = 0 */
        eng_ffn_block(s, ly, y, d);
        eng_mark(s, l, PROF_ST_FFN, pt);
        if (has_e) {
            eng_moe_issue(s, l, x, (int32_t)(l + de), pt);  /* routed off x_mid */
            eng_mark(s, l, PROF_ST_EXPERTS, pt);
        }
        eng_add_to(x, d, dim);
        if (has_e) {
            int lr = eng_moe_inject(s, (int32_t)l, e, pt);
            if (lr >= 0) {
                eng_add_to(x, e, dim);
                eng_mark(s, (unsigned)lr, PROF_ST_EXPERTS, pt);
            }
        }
        memcpy(s->dec.hist + (size_t)(l % R) * dim, x, dim * sizeof(float));
        layer_done(s, l, x, NULL);
    }
    for (unsigned t = L; t < L + de; t++) {    /* flush past the end */
        int lr = eng_moe_take(s, (int32_t)t, x, pt);
        if (lr >= 0)
            eng_mark(s, (unsigned)lr, PROF_ST_EXPERTS, pt);
    }
}

/* AsyncExperts: experts routed off the layer input, injected
 * expert_delay layers later at a layer input. */
static void sched_async_experts(eng_session *s, eng_seq *seq, double *pt)
{
    const fmt_hparams *hp = s->hp;
    const uint32_t dim = hp->dim, L = hp->n_layers;
    float *x = s->dec.x, *m = s->dec.m, *d = s->dec.d;
    const int has_e = hp->n_experts > 0;
    unsigned de = hp->expert_delay;
    for (unsigned l = 0; l < L; l++) {
        const eng_layer *ly = &s->layers[l];
        eng_prefetch_next(s, l);
        int lr = eng_moe_take(s, (int32_t)l, x, pt); /* injected at the input */
        if (lr >= 0)
            eng_mark(s, (unsigned)lr, PROF_ST_EXPERTS, pt);
        /* The router reads the layer's input, which attention and the
         * FFN leave as it is (their outputs are added below), so the
         * routing comes first: the read then overlaps this layer's
         * compute too, not only the next expert_delay layers'.  The
         * last layer's routing (injected after the stack, nothing left
         * to hide behind before) gains the most. */
        if (has_e) {
            eng_moe_issue(s, l, x, (int32_t)(l + de), pt);
            eng_mark(s, l, PROF_ST_EXPERTS, pt);
        }
        eng_attn_block(s, seq, ly, l, x, m);
        eng_mark(s, l, PROF_ST_ATTN, pt);
        eng_ffn_block(s, ly, x, d);
        eng_mark(s, l, PROF_ST_FFN, pt);
        eng_add_to(x, m, dim);
        eng_add_to(x, d, dim);
        if (has_e && de == 0)
            eng_moe_take(s, (int32_t)l, x, pt);
        layer_done(s, l, x, NULL);
    }
    for (unsigned t = L; t < L + de; t++) {
        int lr = eng_moe_take(s, (int32_t)t, x, pt);
        if (lr >= 0)
            eng_mark(s, (unsigned)lr, PROF_ST_EXPERTS, pt);
    }
}

/* DecoupledStreams: an attention stream and an FFN stream, averaged
 * every merge_interval layers and at the end. */
static void sched_decoupled(eng_session *s, eng_seq *seq, double *pt)
{
    const fmt_hparams *hp = s->hp;
    const uint32_t dim = hp->dim, L = hp->n_layers;
    float *x = s->dec.x, *m = s->dec.m, *d = s->dec.d, *e = s->dec.e;
    const int has_e = hp->n_experts > 0;
    float *a = s->dec.a;                           /* attention stream; x: FFN */
    unsigned M = hp->merge_interval ? hp->merge_interval : 1;
    memcpy(a, x, dim * sizeof(float));
    for (unsigned l = 0; l < L; l++) {
        const eng_layer *ly = &s->layers[l];
        eng_prefetch_next(s, l);
        if (has_e)                              /* read beside attention and FFN */
            eng_moe_issue(s, l, x, (int32_t)l, pt);
        eng_attn_block(s, seq, ly, l, a, m);
        eng_add_to(a, m, dim);
        eng_mark(s, l, PROF_ST_ATTN, pt);
        eng_ffn_block(s, ly, x, d);
        eng_mark(s, l, PROF_ST_FFN, pt);
        if (has_e) {
            eng_moe_inject(s, (int32_t)l, e, pt);
            eng_mark(s, l, PROF_ST_EXPERTS, pt);
        }
        eng_add_to(x, d, dim);
        if (has_e)
            eng_add_to(x, e, dim);
        if ((l + 1) % M == 0)
            for (uint32_t i = 0; i < dim; i++)
                a[i] = x[i] = (a[i] + x[i]) * 0.5f;
        layer_done(s, l, x, a);
    }
    for (uint32_t i = 0; i < dim; i++)
        x[i] = (a[i] + x[i]) * 0.5f;
}

/* PipelineRegisters: the FFN reads last layer's register while attention
 * writes its own. */
static void sched_pipeline_reg(eng_session *s, eng_seq *seq, double *pt)
{
    const fmt_hparams *hp = s->hp;
    const uint32_t dim = hp->dim, L = hp->n_layers;
    float *x = s->dec.x, *m = s->dec.m, *d = s->dec.d, *e = s->dec.e;
    const int has_e = hp->n_experts > 0;
    float *a = s->dec.a;                           /* attn_reg; x: xfm_reg */
    memcpy(a, x, dim * sizeof(float));
    for (unsigned l = 0; l < L; l++) {
        const eng_layer *ly = &s->layers[l];
        eng_prefetch_next(s, l);
        if (has_e)
            eng_moe_issue(s, l, x, (int32_t)l, pt);
        eng_ffn_block(s, ly, x, d);                 /* off xfm_reg[l-1] */
        eng_mark(s, l, PROF_ST_FFN, pt);
        if (has_e) {
            eng_moe_inject(s, (int32_t)l, e, pt);
            eng_mark(s, l, PROF_ST_EXPERTS, pt);
            eng_add_to(d, e, dim);
        }
        eng_attn_block(s, seq, ly, l, a, m);
        eng_add_to(a, m, dim);
        eng_mark(s, l, PROF_ST_ATTN, pt);
        for (uint32_t i = 0; i < dim; i++)
            x[i] = a[i] + d[i];
        layer_done(s, l, x, NULL);
    }
}

/* FixedPoint: each stored block applied `iterations` times in a row. */
static void sched_fixed_point(eng_session *s, eng_seq *seq, double *pt)
{
    const fmt_hparams *hp = s->hp;
    const uint32_t dim = hp->dim, L = hp->n_layers;
    float *x = s->dec.x, *m = s->dec.m, *d = s->dec.d, *e = s->dec.e;
    const int has_e = hp->n_experts > 0;
    unsigned T = hp->iterations ? hp->iterations : 1;
    for (unsigned b = 0; b < L; b++) {
        const eng_layer *ly = &s->layers[b];
        eng_prefetch_next(s, b);
        for (unsigned it = 0; it < T; it++) {
            eng_attn_block(s, seq, ly, b * T + it, x, m);
            eng_add_to(x, m, dim);
            eng_mark(s, b, PROF_ST_ATTN, pt);
            eng_ffn_block(s, ly, x, d);
            eng_mark(s, b, PROF_ST_FFN, pt);
            if (has_e) {
                eng_moe_block(s, ly, x, e, pt);
                eng_mark(s, b, PROF_ST_EXPERTS, pt);
                eng_add_to(d, e, dim);
            }
            eng_add_to(x, d, dim);
            layer_done(s, b * T + it, x, NULL);
        }
    }
}

typedef void (*sched_fn)(eng_session *s, eng_seq *seq, double *pt);

/* One entry per combine style (FMT_COMBINE_*). */
static const sched_fn schedules[] = {
    [FMT_COMBINE_PARALLEL_SQRT2] = sched_parallel_sqrt2,
    [FMT_COMBINE_DELAYED_SUM]    = sched_delayed_sum,
    [FMT_COMBINE_ASYNC_EXPERTS]  = sched_async_experts,
    [FMT_COMBINE_DECOUPLED]      = sched_decoupled,
    [FMT_COMBINE_PIPELINE_REG]   = sched_pipeline_reg,
    [FMT_COMBINE_FIXED_POINT]    = sched_fixed_point,
};

void eng_run_layers(eng_session *s, eng_seq *seq)
{
    unsigned style = s->hp->combine_style;
    double pt = s->prof ? prof_now() : 0.0;
    s->mv_bytes = 0;
    eng_moe_flush(s);                   /* routes left by a failed token */
    if (style >= sizeof schedules / sizeof *schedules || !schedules[style])
        style = FMT_COMBINE_PARALLEL_SQRT2;
    schedules[style](s, seq, &pt);
}
