/*
 * eng_session.c — a model, its KV cache and one token of dense decode.
 *
 * The forward pass reads like llama2.c's run.c, but every weight matrix is a
 * stream of tiles straight from the mapping: one pass over the fused QKV
 * stream fills q, k and v (the tile's matrix id picks the output buffer),
 * one pass over the fused gate/up stream fills both FFN halves.  Each
 * mat-vec input is prepared once (kern_act_set) for every tile type that
 * reads it.
 *
 * Buffers (floats unless noted):
 *   x      [dim]           residual stream
 *   xb     [dim]           normalised residual / attention-out projection
 *   q      [n_heads*hd]    queries; att [n_heads*hd] attention output
 *   kc, vc [L][n_ctx][n_kv*hd]  the KV cache, position-major per layer:
 *                          floats, or halves (kc16, vc16) with kv_f16
 *   k_tmp, v_tmp [n_kv*hd] this position's k and v before rounding to f16
 *   att16  [2*hd]          halves: scratch of the f16 attention
 *   hb,hb2 [ffn]           gate and up activations
 *   logits [vocab]
 *
 * KV precision.  Each model is held to the output of its peer: a llama2.c
 * checkpoint to run.c (f32 cache, f32 softmax), a GGUF model to llama.cpp,
 * whose CPU backend keeps the cache in f16 by default and runs flash
 * attention over it, accumulating the weighted values in f16.  That is not
 * a rounding detail: on Q8_0/Q4_0 models every mat-vec input is quantised
 * to Q8_0 blocks, round(x/d) turns last-bit differences into whole steps,
 * and with an f32 cache our greedy text left llama.cpp's after 18 words
 * (stories260K Q4_0, "Lily and Ben").  So kv_f16 (eng_opts) defaults to
 * f16 for models whose "cflow.source" is "gguf" and to f32 otherwise; the
 * f16 cache also halves the cache's memory and bandwidth.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/eng_impl.h"
#include "kernels/kern.h"
#include "prof/prof.h"

/* A tile stream prepared for parallel mat-vec: its tiles cut into units,
 * each the run of column tiles of one output stripe of one matrix.  A
 * unit owns its output rows, so units run on any thread in any order and
 * the sums inside a unit keep the single-thread order: results do not
 * depend on the thread count. */
typedef struct eng_mv {
    const fmt_stream *st;
    uint32_t         *unit;      /* [n_units + 1] first tile of each unit */
    uint32_t          n_units;
    unsigned          need;      /* KERN_NEED mask of its tile types */
} eng_mv;

typedef struct eng_layer {
    eng_mv        qkv, o, gate_up, down;
    const float  *attn_norm, *ffn_norm, *qkv_bias;
} eng_layer;

struct eng_session {
    fmt_model         *model;
    const fmt_hparams *hp;
    eng_tok           *tok;
    const kern_ops    *ops;
    eng_opts           opts;
    eng_layer         *layers;
    const fmt_stream  *embd;
    eng_mv             output;
    const float       *out_norm;
    eng_pool          *pool;
    uint32_t           n_ctx, n_past;
    uint32_t           q_dim, kv_dim, embd_col_tiles;

    float *x, *xb, *q, *att, *hb, *hb2, *logits, *scores, *kc, *vc, *inv_freq;
    float *k_tmp, *v_tmp;
    int kv_f16;                         /* resolved eng_opts.kv_f16: 0 or 1 */
    uint16_t *kc16, *vc16, *att16;
    kern_act act_dim, act_q, act_ffn;
    eng_stats stats;
    uint64_t bytes_per_token;
    /* profiling (eng_set_prof): NULL when off; prof_attached is 0 until
     * every worker thread has opened its counters */
    struct prof *prof;
    int prof_attached;
};

static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return code;
}

void eng_opts_default(eng_opts *o)
{
    memset(o, 0, sizeof *o);
    o->kv_f16 = -1;
}

/* eng_opts.kv_f16 -1: f16 when the model was converted from GGUF (see the
 * essay at the top). */
static int want_kv_f16(const eng_opts *o, const fmt_model *m)
{
    if (o->kv_f16 >= 0)
        return o->kv_f16 != 0;
    size_t len = 0;
    const char *src = fmt_kv_get_str(fmt_model_kv(m), "cflow.source", &len);
    return src && len == 4 && !memcmp(src, "gguf", 4);
}

static int mv_init(eng_mv *mv, const fmt_stream *st)
{
    mv->st = st;
    mv->need = 0;
    mv->n_units = 0;
    mv->unit = malloc(((size_t)st->n_tiles + 1) * sizeof *mv->unit);
    if (!mv->unit)
        return -1;
    for (uint32_t i = 0; i < st->n_tiles; i++) {
        const fmt_tile *t = &st->tiles[i];
        mv->need |= KERN_NEED(t->type);
        if (i == 0 || t->matrix != t[-1].matrix || t->row0 != t[-1].row0)
            mv->unit[mv->n_units++] = i;
    }
    mv->unit[mv->n_units] = st->n_tiles;
    return 0;
}

static void *xalloc(size_t n, int *oom)
{
    void *p = calloc(n ? n : 1, 1);
    if (!p)
        *oom = 1;
    return p;
}

/* Rotation frequencies, with Llama-3 scaling when the model asks for it
 * (llama.cpp's rope_yarn with the llama3 factors precomputed per pair). */
static void rope_freqs(const fmt_hparams *hp, float *inv, unsigned rot)
{
    for (unsigned i = 0; i < rot / 2; i++) {
        float f = 1.0f / powf(hp->rope_theta, (float)(2 * i) / (float)rot);
        if (hp->flags & FMT_FLAG_ROPE_LLAMA3) {
            float lo_wl = (float)hp->rope_orig_ctx / hp->rope_low_freq;
            float hi_wl = (float)hp->rope_orig_ctx / hp->rope_high_freq;
            float wl = 2.0f * (float)M_PI / f;
            if (wl > lo_wl) {
                f /= hp->rope_factor;
            } else if (wl >= hi_wl) {
                float smooth = ((float)hp->rope_orig_ctx / wl - hp->rope_low_freq) /
                               (hp->rope_high_freq - hp->rope_low_freq);
                f = (1.0f - smooth) * f / hp->rope_factor + smooth * f;
            }
        }
        inv[i] = f;
    }
}

int eng_open(eng_session **out, const char *model_path, const eng_opts *o,
             char *err, size_t errlen)
{
    eng_session *s;
    int rc, oom = 0;

    *out = NULL;
    s = calloc(1, sizeof *s);
    if (!s)
        return fail(err, errlen, ENG_ENOMEM, "%s: out of memory", model_path);
    if (o)
        s->opts = *o;
    else
        eng_opts_default(&s->opts);
    rc = fmt_model_open(&s->model, model_path, err, errlen);
    if (rc)
        goto fail;
    s->hp = fmt_model_hparams(s->model);
    const fmt_hparams *hp = s->hp;
    rc = eng_tok_load(&s->tok, fmt_model_kv(s->model), err, errlen);
    if (rc) {
        /* name the model file: the tokenizer lives in its metadata */
        char tmp[256];
        snprintf(tmp, sizeof tmp, "%s", err);
        fail(err, errlen, rc, "%s: tokenizer: %s", model_path, tmp);
        goto fail;
    }
    if (eng_tok_n_vocab(s->tok) > hp->vocab_size) {
        rc = fail(err, errlen, ENG_EFORMAT,
                  "%s: tokenizer has %u tokens but the model only %u",
                  model_path, eng_tok_n_vocab(s->tok), hp->vocab_size);
        goto fail;
    }
    if (hp->dense_delay || hp->expert_delay || hp->combine_style) {
        rc = fail(err, errlen, ENG_EUNSUP,
                  "%s: pipeline-native schedule (dense_delay %u, expert_delay %u, "
                  "combine style %u) is not supported by this build",
                  model_path, hp->dense_delay, hp->expert_delay, hp->combine_style);
        goto fail;
    }
    s->ops = kern_init();
    /* Without a request the context stops at 4096 positions: a header may
     * claim millions, and the cache must not grow out of proportion. */
    s->n_ctx = (o && o->n_ctx) ? o->n_ctx
                               : (hp->max_seq < 4096 ? hp->max_seq : 4096);
    if (s->n_ctx > hp->max_seq)
        s->n_ctx = hp->max_seq;
    s->q_dim = hp->n_heads * hp->head_dim;
    s->kv_dim = hp->n_kv_heads * hp->head_dim;

    unsigned L = hp->n_layers;
    s->layers = xalloc(L * sizeof *s->layers, &oom);
    if (oom) {
        rc = fail(err, errlen, ENG_ENOMEM, "%s: out of memory", model_path);
        goto fail;
    }
    for (unsigned l = 0; l < L; l++) {
        eng_layer *ly = &s->layers[l];
        if (mv_init(&ly->qkv, fmt_model_stream(s->model, l, FMT_S_Q)) ||
            mv_init(&ly->o, fmt_model_stream(s->model, l, FMT_S_O)) ||
            mv_init(&ly->gate_up, fmt_model_stream(s->model, l, FMT_S_GATE)) ||
            mv_init(&ly->down, fmt_model_stream(s->model, l, FMT_S_DOWN)))
            oom = 1;
        ly->attn_norm = fmt_model_vec(s->model, l, FMT_S_ATTN_NORM, NULL);
        ly->ffn_norm = fmt_model_vec(s->model, l, FMT_S_FFN_NORM, NULL);
        ly->qkv_bias = fmt_model_vec(s->model, l, FMT_S_QKV_BIAS, NULL);
        if (!oom)
            s->bytes_per_token += ly->qkv.st->length + ly->o.st->length +
                                  ly->gate_up.st->length + ly->down.st->length;
    }
    s->embd = fmt_model_stream(s->model, L, FMT_S_TOK_EMBD);
    if (mv_init(&s->output, (hp->flags & FMT_FLAG_TIED)
                                ? s->embd
                                : fmt_model_stream(s->model, L, FMT_S_OUTPUT)))
        oom = 1;
    s->out_norm = fmt_model_vec(s->model, L, FMT_S_OUT_NORM, NULL);
    s->embd_col_tiles = (hp->dim + KERN_TILE_COLS - 1) / KERN_TILE_COLS;
    if (!oom)
        s->bytes_per_token += s->output.st->length;
    s->pool = eng_pool_new(eng_default_threads(o ? o->n_threads : 0));
    if (!s->pool)
        oom = 1;

    size_t kv = (size_t)L * s->n_ctx * s->kv_dim;
    s->x = xalloc(hp->dim * sizeof(float), &oom);
    s->xb = xalloc(hp->dim * sizeof(float), &oom);
    s->q = xalloc(s->q_dim * sizeof(float), &oom);
    s->att = xalloc(s->q_dim * sizeof(float), &oom);
    s->hb = xalloc(hp->ffn_dim * sizeof(float), &oom);
    s->hb2 = xalloc(hp->ffn_dim * sizeof(float), &oom);
    s->logits = xalloc(hp->vocab_size * sizeof(float), &oom);
    s->scores = xalloc(s->n_ctx * sizeof(float), &oom);
    s->k_tmp = xalloc(s->kv_dim * sizeof(float), &oom);
    s->v_tmp = xalloc(s->kv_dim * sizeof(float), &oom);
    s->inv_freq = xalloc(hp->head_dim / 2 * sizeof(float), &oom);
    s->kv_f16 = want_kv_f16(&s->opts, s->model);
    if (s->kv_f16) {
        s->kc16 = xalloc(kv * sizeof(uint16_t), &oom);
        s->vc16 = xalloc(kv * sizeof(uint16_t), &oom);
        s->att16 = xalloc(2 * (size_t)hp->head_dim * sizeof(uint16_t), &oom);
    } else {
        s->kc = xalloc(kv * sizeof(float), &oom);
        s->vc = xalloc(kv * sizeof(float), &oom);
    }
    if (oom || kern_act_init(&s->act_dim, hp->dim) ||
        kern_act_init(&s->act_q, s->q_dim) ||
        kern_act_init(&s->act_ffn, hp->ffn_dim)) {
        rc = fail(err, errlen, ENG_ENOMEM,
                  "%s: out of memory for a %u-token context", model_path,
                  s->n_ctx);
        goto fail;
    }
    rope_freqs(hp, s->inv_freq, hp->head_dim);
    *out = s;
    return 0;
fail:
    eng_close(s);
    return rc;
}

void eng_close(eng_session *s)
{
    if (!s)
        return;
    kern_act_free(&s->act_dim);
    kern_act_free(&s->act_q);
    kern_act_free(&s->act_ffn);
    free(s->x); free(s->xb); free(s->q); free(s->att); free(s->hb);
    free(s->hb2); free(s->logits); free(s->scores); free(s->kc); free(s->vc);
    free(s->k_tmp); free(s->v_tmp); free(s->inv_freq);
    free(s->kc16); free(s->vc16); free(s->att16);
    for (unsigned l = 0; s->layers && l < s->hp->n_layers; l++) {
        free(s->layers[l].qkv.unit);
        free(s->layers[l].o.unit);
        free(s->layers[l].gate_up.unit);
        free(s->layers[l].down.unit);
    }
    free(s->output.unit);
    free(s->layers);
    eng_pool_free(s->pool);
    eng_tok_free(s->tok);
    fmt_model_close(s->model);
    free(s);
}

const fmt_hparams *eng_hparams(const eng_session *s) { return s->hp; }
const eng_tok *eng_tokenizer(const eng_session *s) { return s->tok; }
const char *eng_isa(const eng_session *s) { return s->ops->name; }
int eng_kv_f16(const eng_session *s) { return s->kv_f16; }
uint32_t eng_n_ctx(const eng_session *s) { return s->n_ctx; }
uint32_t eng_n_past(const eng_session *s) { return s->n_past; }
float *eng_logits(eng_session *s) { return s->logits; }
const fmt_model *eng_model(const eng_session *s) { return s->model; }

void eng_reset(eng_session *s)
{
    s->n_past = 0;
}

int eng_default_threads(int requested)
{
    if (requested > 0)
        return requested;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int eng_set_threads(eng_session *s, int n_threads)
{
    s->prof_attached = 0;   /* new workers open their own counters */
    return eng_pool_resize(s->pool, eng_default_threads(n_threads)) ? ENG_ENOMEM : 0;
}

int eng_threads(const eng_session *s) { return eng_pool_size(s->pool); }

void eng_set_prof(eng_session *s, struct prof *p)
{
    s->prof = p;
    s->prof_attached = 0;
}

/* Profiling: one parallel region in which every worker (and the caller,
 * tid 0) opens counters on itself — perf_event counters belong to the
 * thread that opens them.  Then the token's clock and counters start. */
static void prof_attach_run(void *ctx, int tid, int n_threads)
{
    (void)n_threads;
    prof_thread_attach(ctx, tid);
}

static void prof_begin(eng_session *s)
{
    if (!s->prof_attached) {
        if (prof_threads_reset(s->prof, eng_pool_size(s->pool)) == 0)
            eng_pool_run(s->pool, prof_attach_run, s->prof);
        s->prof_attached = 1;
    }
    prof_token_begin(s->prof);
}

#define ENG_PAR_MIN_BYTES (256u * 1024u)

typedef struct mv_task {
    const kern_ops *ops;
    const eng_mv   *mv;
    const kern_act *x;
    float *const   *out;
    eng_pool       *pool;
} mv_task;

static void mv_run(void *ctx, int tid, int n_threads)
{
    const mv_task *t = ctx;
    const eng_mv *mv = t->mv;
    const fmt_tile *tiles = mv->st->tiles;
    (void)tid;
    (void)n_threads;
    for (;;) {
        size_t u = eng_pool_next(t->pool, 1);
        if (u >= mv->n_units)
            break;
        for (uint32_t i = mv->unit[u]; i < mv->unit[u + 1]; i++) {
            const fmt_tile *ti = &tiles[i];
            t->ops->tile_mv[ti->type](ti->payload, ti->rows, ti->cols, t->x,
                                      ti->col0, t->out[ti->matrix] + ti->row0);
        }
    }
}

/* One pass over a (fused) tile stream: out[matrix] receives each tile's
 * partial sums.  Outputs must be zeroed by the caller. */
static void matvec_stream(eng_session *s, const eng_mv *mv, const kern_act *x,
                          float *const *out)
{
    mv_task t = { s->ops, mv, x, out, s->pool };
    /* Waking workers costs microseconds: below a few hundred KB of tiles
     * (or with one unit) the caller does the whole stream itself. */
    if (mv->n_units < 2 || mv->st->length < ENG_PAR_MIN_BYTES) {
        const fmt_tile *ti = mv->st->tiles;
        for (uint32_t i = 0; i < mv->st->n_tiles; i++, ti++)
            s->ops->tile_mv[ti->type](ti->payload, ti->rows, ti->cols, x, ti->col0,
                                      out[ti->matrix] + ti->row0);
        return;
    }
    eng_pool_run(s->pool, mv_run, &t);
}

/* Row `token` of the tiled embedding matrix into x[dim]. */
static void embed(eng_session *s, int32_t token, float *x)
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

static void DBG(const char *n, int l, const float *p, unsigned cnt)
{
    const char *f = getenv("CFLOW_DUMPF");
    if (!f) return;
    FILE *df = fopen(f, "ab");
    char name[32] = {0};
    snprintf(name, sizeof name, "%s.%d", n, l);
    int32_t c = (int32_t)cnt;
    fwrite(name, 1, 32, df); fwrite(&c, 4, 1, df); fwrite(p, 4, cnt, df);
    fclose(df);
}

static int forward(eng_session *s, int32_t token, int want_logits)
{
    const fmt_hparams *hp = s->hp;
    uint32_t dim = hp->dim, pos = s->n_past, hd = hp->head_dim;
    float *out[FMT_NMATRIX] = { 0 };
    double pt = 0.0;   /* profiling: when the current part of a layer began */

    embed(s, token, s->x);
    DBG("embd", 0, s->x, hp->dim);
    for (unsigned l = 0; l < hp->n_layers; l++) {
        const eng_layer *ly = &s->layers[l];
        const size_t lo = (size_t)l * s->n_ctx * s->kv_dim;  /* layer offset */
        if (s->prof)
            pt = prof_now();
        float *k, *v;                   /* this position's k and v */
        if (s->kv_f16) {
            k = s->k_tmp;               /* rounded into kc16/vc16 below */
            v = s->v_tmp;
        } else {
            k = s->kc + lo + (size_t)pos * s->kv_dim;
            v = s->vc + lo + (size_t)pos * s->kv_dim;
        }

        /* attention */
        kern_rmsnorm(s->xb, s->x, ly->attn_norm, dim, hp->norm_eps);
        DBG("attn_norm", l, s->xb, dim);
        kern_act_set(&s->act_dim, s->xb, dim, ly->qkv.need);
        memset(s->q, 0, s->q_dim * sizeof(float));
        memset(k, 0, s->kv_dim * sizeof(float));
        memset(v, 0, s->kv_dim * sizeof(float));
        out[FMT_M_Q] = s->q;
        out[FMT_M_K] = k;
        out[FMT_M_V] = v;
        matvec_stream(s, &ly->qkv, &s->act_dim, out);
        if (ly->qkv_bias) {
            const float *b = ly->qkv_bias;
            for (uint32_t i = 0; i < s->q_dim; i++) s->q[i] += b[i];
            for (uint32_t i = 0; i < s->kv_dim; i++) k[i] += b[s->q_dim + i];
            for (uint32_t i = 0; i < s->kv_dim; i++) v[i] += b[s->q_dim + s->kv_dim + i];
        }
        if (hp->flags & FMT_FLAG_V_NORM)
            for (uint32_t h = 0; h < hp->n_kv_heads; h++)
                kern_rmsnorm(v + h * hd, v + h * hd, NULL, hd, hp->norm_eps);
        int neox = (hp->flags & FMT_FLAG_ROPE_NEOX) != 0;
        kern_rope(s->q, hp->n_heads, hd, hd, pos, s->inv_freq, neox);
        kern_rope(k, hp->n_kv_heads, hd, hd, pos, s->inv_freq, neox);
        DBG("q", l, s->q, s->q_dim); DBG("k", l, k, s->kv_dim); DBG("v", l, v, s->kv_dim);
        /* sliding-window layers see only the last sliding_window positions */
        uint32_t first = 0, W = hp->sliding_window;
        if (W && pos + 1 > W)
            first = pos + 1 - W;
        if (s->kv_f16) {
            uint16_t *kc = s->kc16 + lo, *vc = s->vc16 + lo;
            uint16_t *kp = kc + (size_t)pos * s->kv_dim, *vp = vc + (size_t)pos * s->kv_dim;
            for (uint32_t i = 0; i < s->kv_dim; i++) {
                kp[i] = kern_fp32_to_fp16(k[i]);
                vp[i] = kern_fp32_to_fp16(v[i]);
            }
            /* llama.cpp's kq_scale: a multiplication by 1/sqrt(head_dim) */
            kern_attn_decode_f16(s->att, s->q, kc + (size_t)first * s->kv_dim,
                                 vc + (size_t)first * s->kv_dim, pos + 1 - first,
                                 hp->n_heads, hp->n_kv_heads, hd, s->kv_dim,
                                 1.0f / sqrtf((float)hd), 0.0f, s->att16);
        } else {
            float *kc = s->kc + lo, *vc = s->vc + lo;
            kern_attn_decode(s->att, s->q, kc + (size_t)first * s->kv_dim,
                             vc + (size_t)first * s->kv_dim, pos + 1 - first,
                             hp->n_heads, hp->n_kv_heads, hd, s->kv_dim,
                             1.0f / sqrtf((float)hd), 0.0f, s->scores);
        }
        DBG("attn", l, s->att, s->q_dim);
        kern_act_set(&s->act_q, s->att, s->q_dim, ly->o.need);
        memset(s->xb, 0, dim * sizeof(float));
        out[FMT_M_O] = s->xb;
        matvec_stream(s, &ly->o, &s->act_q, out);
        DBG("wo", l, s->xb, dim);
        for (uint32_t i = 0; i < dim; i++)
            s->x[i] += s->xb[i];
        DBG("ffn_inp", l, s->x, dim);

        if (s->prof)
            pt = prof_layer_mark(s->prof, l, PROF_ST_ATTN, pt);

        /* feed-forward */
        kern_rmsnorm(s->xb, s->x, ly->ffn_norm, dim, hp->norm_eps);
        DBG("ffn_norm", l, s->xb, dim);
        kern_act_set(&s->act_dim, s->xb, dim, ly->gate_up.need);
        memset(s->hb, 0, hp->ffn_dim * sizeof(float));
        memset(s->hb2, 0, hp->ffn_dim * sizeof(float));
        out[FMT_M_GATE] = s->hb;
        out[FMT_M_UP] = s->hb2;
        matvec_stream(s, &ly->gate_up, &s->act_dim, out);
        if (hp->flags & FMT_FLAG_GELU)
            kern_geglu(s->hb, s->hb, s->hb2, hp->ffn_dim);
        else
            kern_swiglu(s->hb, s->hb, s->hb2, hp->ffn_dim);
        DBG("up", l, s->hb2, hp->ffn_dim);
        DBG("glu", l, s->hb, hp->ffn_dim);
        kern_act_set(&s->act_ffn, s->hb, hp->ffn_dim, ly->down.need);
        memset(s->xb, 0, dim * sizeof(float));
        out[FMT_M_DOWN] = s->xb;
        matvec_stream(s, &ly->down, &s->act_ffn, out);
        DBG("down", l, s->xb, dim);
        for (uint32_t i = 0; i < dim; i++)
            s->x[i] += s->xb[i];
        DBG("out", l, s->x, dim);
        if (s->prof)
            pt = prof_layer_mark(s->prof, l, PROF_ST_FFN, pt);
    }
    s->n_past++;
    if (!want_logits)
        return 0;

    kern_rmsnorm(s->x, s->x, s->out_norm, dim, hp->norm_eps);
    DBG("final_norm", 0, s->x, dim);
    kern_act_set(&s->act_dim, s->x, dim, s->output.need);
    memset(s->logits, 0, hp->vocab_size * sizeof(float));
    out[FMT_M_OUTPUT] = s->logits;
    out[FMT_M_TOK_EMBD] = s->logits;
    matvec_stream(s, &s->output, &s->act_dim, out);
    DBG("logits", 0, s->logits, hp->vocab_size);
    if (hp->softcap > 0.0f)
        for (uint32_t i = 0; i < hp->vocab_size; i++)
            s->logits[i] = tanhf(s->logits[i] / hp->softcap) * hp->softcap;
    return 0;
}

static int check_token(eng_session *s, int32_t token, char *err, size_t errlen)
{
    if (token < 0 || (uint32_t)token >= s->hp->vocab_size)
        return fail(err, errlen, ENG_EARG, "token id %d is outside the %u-token vocabulary",
                    token, s->hp->vocab_size);
    if (s->n_past >= s->n_ctx)
        return fail(err, errlen, ENG_ECTX,
                    "context full: all %u positions are used", s->n_ctx);
    return 0;
}

int eng_decode(eng_session *s, int32_t token, char *err, size_t errlen)
{
    int rc = check_token(s, token, err, errlen);
    if (rc)
        return rc;
    if (s->prof)
        prof_begin(s);
    double t0 = prof_now();
    forward(s, token, 1);
    s->stats.decode_s += prof_now() - t0;
    if (s->prof)
        prof_token_end(s->prof, PROF_DECODE);
    s->stats.n_gen++;
    return 0;
}

int eng_prefill(eng_session *s, const int32_t *tokens, size_t n, char *err,
                size_t errlen)
{
    double t0 = prof_now();
    for (size_t i = 0; i < n; i++) {
        int rc = check_token(s, tokens[i], err, errlen);
        if (rc)
            return rc;
        if (s->prof)
            prof_begin(s);
        forward(s, tokens[i], i + 1 == n);
        if (s->prof)
            prof_token_end(s->prof, PROF_PREFILL);
    }
    s->stats.prefill_s += prof_now() - t0;
    s->stats.n_prompt += n;
    return 0;
}

void eng_get_stats(const eng_session *s, eng_stats *st)
{
    *st = s->stats;
    st->bytes_per_token = s->bytes_per_token;
}
