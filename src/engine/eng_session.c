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

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
    uint32_t          rp;        /* bit m: matrix m's Q4_0 tiles use
                                    tile_mv_q4_0_rp (llama.cpp repacks it) */
} eng_mv;

typedef struct eng_layer {
    eng_mv        qkv, o, gate_up, down;
    const float  *attn_norm, *ffn_norm, *qkv_bias;
    /* attention geometry (fmt_model_layer_geom: the header's unless the file
     * has per-layer records, as Gemma-4-style sliding/full layers do);
     * q_dim, kv_dim in floats; q_norm, k_norm [head_dim] per-head RMSNorm
     * weights (FMT_FLAG_QK_NORM) or NULL; inv_freq [rope_dims/2] this
     * layer's RoPE frequencies (s->inv_freq unless own_freq) */
    const fmt_layer_geom *g;
    uint32_t      q_dim, kv_dim;
    const float  *q_norm, *k_norm;
    float        *inv_freq;
    int           own_freq;
    /* MoE (n_experts > 0): input norm, router [E][dim], per expert its
     * fused gate/up and down streams */
    const float  *moe_norm, *router;
    eng_mv       *exp_gu, *exp_down;     /* [E] */
    uint64_t      bank_bytes;
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
    uint32_t           hd_max;     /* widest head over the layers */

    float *x, *xb, *q, *att, *hb, *hb2, *logits, *scores, *kc, *vc, *inv_freq;
    float *k_tmp, *v_tmp;
    /* the schedule (scripts/train/ARCHITECTURES.md): per-branch outputs
     * m, d, e [dim]; second stream a [dim]; residual history ring
     * hist [dense_delay+1][dim]; pending expert outputs pend [expert_delay+1]
     * [dim] with their target layers; router probabilities [E]; xr [dim]
     * the normalised router input */
    float *bm, *bd, *be, *bt, *ba, *hist, *pend, *probs, *xr;
    int32_t *pend_target;
    unsigned n_eff;                     /* effective layers (FixedPoint) */
    eng_trace *trace;                   /* per-layer norms of the last pass */
    uint32_t hmax;                      /* max(ffn, expert ffn) */
    int kv_f16;                         /* resolved eng_opts.kv_f16: 0 or 1 */
    int ggml;                           /* llama.cpp arithmetic (GGUF model) */
    uint16_t *kc16, *vc16, *att16;
    float *rope_ff;                     /* [head_dim/2] ggml RoPE divisors, or NULL */
    kern_act act_dim, act_q, act_ffn;
    eng_stats stats;
    uint64_t bytes_per_token;
    struct prof *prof;   /* profiling (eng_set_prof): NULL when off */
    uint64_t mv_bytes;   /* weight bytes matvec_stream read since the last
                            per-layer mark (prof_layer_bytes) */
    /* expert fetch (eng_io.c) and prefetch (eng_prefetch.c), see moe_issue */
    int          xio_mode;     /* enum eng_expert_io */
    eng_xio     *xio;          /* reader pool and staging slots (sync/staged) */
    struct eng_stage *stage;   /* [n_stage] tiles rebased into each slot */
    unsigned     n_stage;
    struct eng_route *route;   /* [expert_delay + 1] routed, not yet injected */
    int          xio_failed;   /* a read of this token failed: xio_err says why */
    double       xio_busy;     /* the reader pool's busy seconds charged so far */
    char         xio_err[320];
    eng_pf      *pf;           /* the PREFETCHT0 thread, NULL when off */
    /* the model file shrank under its mapping (eng_guard.c): the offset
     * of the byte whose read faulted; every later token fails */
    int      broken;
    uint64_t fault_off;
    /* parallel attention (attn_store_attend): per head, scores [n_ctx] floats
     * and 2*hd_max halves of scratch, for par_heads heads */
    float    *par_sc;
    uint16_t *par_h16;
    uint32_t  par_heads;
    /* batched prefill (forward_batch), allocated on first use for
     * ENG_BATCH positions: residuals bx [B][dim], normalised bxb [B][dim],
     * branch outputs bo [B][dim], bq/batt [B][q_dim], bk/bv [B][kv_dim],
     * bh/bh2 [B][hmax]; one prepared input per position for each width */
    float    *bx, *bxb, *bo, *bq, *batt, *bk, *bv, *bh, *bh2;
    kern_act *bact_dim, *bact_q, *bact_ffn;
    int       batch_ready;
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
    o->expert_io = -1;   /* $CFLOW_EXPERT_IO, else mmap (eng_io_setup) */
    o->prefetch = -1;    /* $CFLOW_PREFETCH, else off */
}

/* Whether llama.cpp is the model's peer: it was converted from GGUF. */
static int from_gguf(const fmt_model *m)
{
    size_t len = 0;
    const char *src = fmt_kv_get_str(fmt_model_kv(m), "cflow.source", &len);
    return src && len == 4 && !memcmp(src, "gguf", 4);
}

/* ggml: pick the Q4_0 matrices llama.cpp would repack for its x86 CPU
 * backend (ggml_repack_get_optimal_repack_type: Q4_0 with a row count that
 * is a multiple of 8, on AVX2 CPUs). */
static int mv_init(eng_mv *mv, const fmt_stream *st, int ggml)
{
    uint32_t rows[FMT_NMATRIX] = { 0 };
    unsigned q4 = 0;

    mv->st = st;
    mv->need = 0;
    mv->n_units = 0;
    mv->rp = 0;
    mv->unit = malloc(((size_t)st->n_tiles + 1) * sizeof *mv->unit);
    if (!mv->unit)
        return -1;
    for (uint32_t i = 0; i < st->n_tiles; i++) {
        const fmt_tile *t = &st->tiles[i];
        mv->need |= KERN_NEED(t->type);
        if (i == 0 || t->matrix != t[-1].matrix || t->row0 != t[-1].row0)
            mv->unit[mv->n_units++] = i;
        if (t->matrix < FMT_NMATRIX) {
            if (t->row0 + t->rows > rows[t->matrix])
                rows[t->matrix] = t->row0 + t->rows;
            if (t->type == KERN_Q4_0)
                q4 |= 1u << t->matrix;
        }
    }
    mv->unit[mv->n_units] = st->n_tiles;
    for (unsigned m = 0; ggml && m < FMT_NMATRIX; m++)
        if ((q4 >> m & 1) && rows[m] % 8 == 0)
            mv->rp |= 1u << m;
    return 0;
}

/* Every activation and cache buffer starts on a cache line.  malloc's
 * 16-byte alignment depends on the heap's history (which arena, which
 * frees came before), so the same model decoded measurably slower in one
 * program than in another: a 64-byte vector load that straddles two lines
 * costs two.  Freed with free(). */
static void *xalloc(size_t n, int *oom)
{
    void *p = NULL;
    if (n == 0)
        n = 1;
    if (posix_memalign(&p, 64, (n + 63) & ~(size_t)63)) {
        *oom = 1;
        return NULL;
    }
    memset(p, 0, n);
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

/* ggml RoPE divisors for Llama-3 scaling: the rope_freqs.weight that
 * llama.cpp's converter (convert_hf_to_gguf.py) computes in f32 and ggml
 * divides theta by: 1, factor, or 1 / ((1 - smooth)/factor + smooth). */
static void rope_divisors(const fmt_hparams *hp, float *ff, unsigned rot)
{
    const float lo_wl = (float)hp->rope_orig_ctx / hp->rope_low_freq;
    const float hi_wl = (float)hp->rope_orig_ctx / hp->rope_high_freq;
    for (unsigned i = 0; i < rot / 2; i++) {
        float f = 1.0f / powf(hp->rope_theta, (float)(2 * i) / (float)rot);
        float wl = 2.0f * (float)M_PI / f;
        if (wl < hi_wl) {
            ff[i] = 1.0f;
        } else if (wl > lo_wl) {
            ff[i] = hp->rope_factor;
        } else {
            float smooth = ((float)hp->rope_orig_ctx / wl - hp->rope_low_freq) /
                           (hp->rope_high_freq - hp->rope_low_freq);
            ff[i] = 1.0f / ((1.0f - smooth) / hp->rope_factor + smooth);
        }
    }
}

static int  opts_from_env(eng_opts *o, char *err, size_t errlen);
static int  eng_io_setup(eng_session *s, char *err, size_t errlen);
static void eng_io_teardown(eng_session *s);
static int  xio_error(eng_session *s, char *err, size_t errlen);

int eng_open(eng_session **out, const char *model_path, const eng_opts *o,
             char *err, size_t errlen)
{
    eng_session *s;
    int rc, oom = 0;

    *out = NULL;
    eng_guard_install();   /* a truncated model file: an error, not a crash */
    s = calloc(1, sizeof *s);
    if (!s)
        return fail(err, errlen, ENG_ENOMEM, "%s: out of memory", model_path);
    if (o)
        s->opts = *o;
    else
        eng_opts_default(&s->opts);
    if ((rc = opts_from_env(&s->opts, err, errlen)))
        goto fail;
    /* --no-mmap copies the weights; the expert banks stay mapped when
     * sync or staged I/O reads them from the file (switching to mmap
     * later still finds them in place) */
    rc = fmt_model_open_ex(&s->model, model_path,
                           !s->opts.no_mmap ? 0
                           : s->opts.expert_io == ENG_XIO_MMAP ? FMT_OPEN_READ
                           : FMT_OPEN_READ | FMT_OPEN_MAP_EXPERTS, err, errlen);
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
    s->ops = kern_init();
    s->ggml = from_gguf(s->model);
    /* Without a request the context stops at 4096 positions: a header may
     * claim millions, and the cache must not grow out of proportion. */
    s->n_ctx = (o && o->n_ctx) ? o->n_ctx
                               : (hp->max_seq < 4096 ? hp->max_seq : 4096);
    if (s->n_ctx > hp->max_seq)
        s->n_ctx = hp->max_seq;
    s->q_dim = hp->n_heads * hp->head_dim;
    s->kv_dim = hp->n_kv_heads * hp->head_dim;
    /* per-layer geometry: q, att, k_tmp/v_tmp and the cache row are sized
     * for the widest layer; narrower layers use the front of each row */
    s->hd_max = hp->head_dim;
    for (unsigned l = 0; l < hp->n_layers; l++) {
        const fmt_layer_geom *g = fmt_model_layer_geom(s->model, l);
        if (g->n_heads * g->head_dim > s->q_dim)
            s->q_dim = g->n_heads * g->head_dim;
        if (g->n_kv_heads * g->head_dim > s->kv_dim)
            s->kv_dim = g->n_kv_heads * g->head_dim;
        if (g->head_dim > s->hd_max)
            s->hd_max = g->head_dim;
    }

    unsigned L = hp->n_layers;
    s->layers = xalloc(L * sizeof *s->layers, &oom);
    if (oom) {
        rc = fail(err, errlen, ENG_ENOMEM, "%s: out of memory", model_path);
        goto fail;
    }
    for (unsigned l = 0; l < L; l++) {
        eng_layer *ly = &s->layers[l];
        if (mv_init(&ly->qkv, fmt_model_stream(s->model, l, FMT_S_Q), s->ggml) ||
            mv_init(&ly->o, fmt_model_stream(s->model, l, FMT_S_O), s->ggml))
            oom = 1;
        if (hp->ffn_dim &&
            (mv_init(&ly->gate_up, fmt_model_stream(s->model, l, FMT_S_GATE), s->ggml) ||
             mv_init(&ly->down, fmt_model_stream(s->model, l, FMT_S_DOWN), s->ggml)))
            oom = 1;
        ly->attn_norm = fmt_model_vec(s->model, l, FMT_S_ATTN_NORM, NULL);
        ly->ffn_norm = fmt_model_vec(s->model, l, FMT_S_FFN_NORM, NULL);
        ly->qkv_bias = fmt_model_vec(s->model, l, FMT_S_QKV_BIAS, NULL);
        ly->q_norm = fmt_model_vec(s->model, l, FMT_S_Q_NORM, NULL);
        ly->k_norm = fmt_model_vec(s->model, l, FMT_S_K_NORM, NULL);
        ly->g = fmt_model_layer_geom(s->model, l);
        ly->q_dim = ly->g->n_heads * ly->g->head_dim;
        ly->kv_dim = ly->g->n_kv_heads * ly->g->head_dim;
        if (oom)
            break;
        s->bytes_per_token += ly->qkv.st->length + ly->o.st->length;
        if (hp->ffn_dim)
            s->bytes_per_token += ly->gate_up.st->length + ly->down.st->length;
        /* per-layer geometry may leave a layer without experts */
        if (hp->n_experts && !(ly->g->flags & FMT_LG_NO_EXPERTS)) {
            ly->moe_norm = fmt_model_vec(s->model, l, FMT_S_MOE_NORM, NULL);
            ly->router = fmt_model_vec(s->model, l, FMT_S_ROUTER, NULL);
            ly->exp_gu = xalloc(hp->n_experts * sizeof *ly->exp_gu, &oom);
            ly->exp_down = xalloc(hp->n_experts * sizeof *ly->exp_down, &oom);
            for (unsigned e = 0; !oom && e < hp->n_experts; e++) {
                const fmt_stream *gu = NULL, *dn = NULL;
                if (fmt_model_expert(s->model, l, e, &gu, &dn, NULL, NULL) || !gu || !dn ||
                    !ly->router || !ly->moe_norm) {
                    rc = fail(err, errlen, ENG_EFORMAT, "%s: layer %u has no expert %u",
                              model_path, l, e);
                    goto fail;
                }
                if (mv_init(&ly->exp_gu[e], gu, s->ggml) ||
                    mv_init(&ly->exp_down[e], dn, s->ggml))
                    oom = 1;
                else
                    ly->bank_bytes += gu->length + dn->length;
            }
            s->stats.expert_bank_bytes += ly->bank_bytes;
            s->bytes_per_token += ly->bank_bytes / hp->n_experts * hp->top_k;
        }
    }
    s->embd = fmt_model_stream(s->model, L, FMT_S_TOK_EMBD);
    if (mv_init(&s->output, (hp->flags & FMT_FLAG_TIED)
                                ? s->embd
                                : fmt_model_stream(s->model, L, FMT_S_OUTPUT),
                s->ggml))
        oom = 1;
    s->out_norm = fmt_model_vec(s->model, L, FMT_S_OUT_NORM, NULL);
    s->embd_col_tiles = (hp->dim + KERN_TILE_COLS - 1) / KERN_TILE_COLS;
    if (!oom)
        s->bytes_per_token += s->output.st->length;
    s->pool = eng_pool_new(eng_default_threads(o ? o->n_threads : 0));
    if (!s->pool)
        oom = 1;

    s->n_eff = hp->combine_style == FMT_COMBINE_FIXED_POINT ? L * hp->iterations : L;
    /* a FixedPoint block is read again by each of its applications */
    if (s->n_eff > L) {
        uint64_t head = s->output.st ? s->output.st->length : 0;
        s->bytes_per_token = (s->bytes_per_token - head) * hp->iterations + head;
    }
    s->hmax = hp->ffn_dim > hp->expert_ffn_dim ? hp->ffn_dim : hp->expert_ffn_dim;
    size_t kv = (size_t)s->n_eff * s->n_ctx * s->kv_dim;
    s->x = xalloc(hp->dim * sizeof(float), &oom);
    s->xb = xalloc(hp->dim * sizeof(float), &oom);
    s->q = xalloc(s->q_dim * sizeof(float), &oom);
    s->att = xalloc(s->q_dim * sizeof(float), &oom);
    s->hb = xalloc(s->hmax * sizeof(float), &oom);
    s->hb2 = xalloc(s->hmax * sizeof(float), &oom);
    s->bm = xalloc(hp->dim * sizeof(float), &oom);
    s->bd = xalloc(hp->dim * sizeof(float), &oom);
    s->be = xalloc(hp->dim * sizeof(float), &oom);
    s->bt = xalloc(hp->dim * sizeof(float), &oom);
    s->ba = xalloc(hp->dim * sizeof(float), &oom);
    s->xr = xalloc(hp->dim * sizeof(float), &oom);
    s->hist = xalloc((hp->dense_delay + 1u) * hp->dim * sizeof(float), &oom);
    s->pend = xalloc((hp->expert_delay + 1u) * hp->dim * sizeof(float), &oom);
    s->pend_target = xalloc((hp->expert_delay + 1u) * sizeof(int32_t), &oom);
    s->probs = xalloc((hp->n_experts + 1u) * sizeof(float), &oom);
    s->logits = xalloc(hp->vocab_size * sizeof(float), &oom);
    s->scores = xalloc(s->n_ctx * sizeof(float), &oom);
    s->k_tmp = xalloc(s->kv_dim * sizeof(float), &oom);
    s->v_tmp = xalloc(s->kv_dim * sizeof(float), &oom);
    s->inv_freq = xalloc(hp->head_dim / 2 * sizeof(float), &oom);
    s->kv_f16 = s->opts.kv_f16 < 0 ? s->ggml : s->opts.kv_f16 != 0;
    if (s->ggml && (hp->flags & FMT_FLAG_ROPE_LLAMA3))
        s->rope_ff = xalloc(hp->head_dim / 2 * sizeof(float), &oom);
    if (s->kv_f16) {
        s->kc16 = xalloc(kv * sizeof(uint16_t), &oom);
        s->vc16 = xalloc(kv * sizeof(uint16_t), &oom);
        s->att16 = xalloc(2 * (size_t)s->hd_max * sizeof(uint16_t), &oom);
    } else {
        s->kc = xalloc(kv * sizeof(float), &oom);
        s->vc = xalloc(kv * sizeof(float), &oom);
    }
    if (oom || kern_act_init(&s->act_dim, hp->dim) ||
        kern_act_init(&s->act_q, s->q_dim) ||
        kern_act_init(&s->act_ffn, s->hmax)) {
        rc = fail(err, errlen, ENG_ENOMEM,
                  "%s: out of memory for a %u-token context", model_path,
                  s->n_ctx);
        goto fail;
    }
    rope_freqs(hp, s->inv_freq, hp->head_dim);
    /* layers with their own RoPE (partial rotation, another base) */
    for (unsigned l = 0; l < L; l++) {
        eng_layer *ly = &s->layers[l];
        const fmt_layer_geom *g = ly->g;
        if (g->rope_dims == hp->head_dim && g->rope_theta == hp->rope_theta) {
            ly->inv_freq = s->inv_freq;
            continue;
        }
        ly->inv_freq = calloc(g->rope_dims / 2 + 1u, sizeof(float));
        if (!ly->inv_freq) {
            rc = fail(err, errlen, ENG_ENOMEM, "%s: out of memory", model_path);
            goto fail;
        }
        ly->own_freq = 1;
        for (unsigned i = 0; i < g->rope_dims / 2; i++)
            ly->inv_freq[i] = 1.0f / powf(g->rope_theta,
                                          (float)(2 * i) / (float)g->rope_dims);
    }
    if (s->rope_ff)
        rope_divisors(hp, s->rope_ff, hp->head_dim);
    if ((rc = eng_io_setup(s, err, errlen)))
        goto fail;
    *out = s;
    return 0;
fail:
    eng_close(s);
    return rc;
}

static void batch_free(eng_session *s);

void eng_close(eng_session *s)
{
    if (!s)
        return;
    eng_io_teardown(s);
    kern_act_free(&s->act_dim);
    kern_act_free(&s->act_q);
    kern_act_free(&s->act_ffn);
    free(s->x); free(s->xb); free(s->q); free(s->att); free(s->hb);
    free(s->hb2); free(s->logits); free(s->scores); free(s->kc); free(s->vc);
    free(s->k_tmp); free(s->v_tmp); free(s->inv_freq);
    free(s->kc16); free(s->vc16); free(s->att16); free(s->rope_ff);
    free(s->par_sc); free(s->par_h16);
    batch_free(s);
    free(s->bm); free(s->bd); free(s->be); free(s->bt); free(s->ba); free(s->xr);
    free(s->hist); free(s->pend); free(s->pend_target); free(s->probs);
    for (unsigned l = 0; s->layers && l < s->hp->n_layers; l++) {
        eng_layer *ly = &s->layers[l];
        for (unsigned e = 0; e < s->hp->n_experts; e++) {
            if (ly->exp_gu)
                free(ly->exp_gu[e].unit);
            if (ly->exp_down)
                free(ly->exp_down[e].unit);
        }
        free(ly->exp_gu);
        free(ly->exp_down);
        if (ly->own_freq)
            free(ly->inv_freq);
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

/* Context shift (engine.h): the cached keys carry RoPE rotations by their
 * positions; moving a row from position p to p - n_discard turns each pair
 * by -n_discard * freq_i, the rotation RoPE composes with (a rotation by
 * a then b is one by a + b).  The frequencies are those rope() used: run.c's
 * inv_freq, or ggml's base^(-2i/d) by repeated multiplication over its
 * Llama-3 divisors.  Values carry no position and only move. */
/* Each layer turns its own rotated dimensions (per-layer geometry: head
 * size, rope_dims, base). */
static void rerope_row(const eng_session *s, const fmt_layer_geom *g, float *k,
                       const float *c, const float *sn)
{
    const fmt_hparams *hp = s->hp;
    unsigned half = g->rope_dims / 2;
    int neox = (hp->flags & FMT_FLAG_ROPE_NEOX) != 0;
    for (unsigned h = 0; h < g->n_kv_heads; h++) {
        float *v = k + (size_t)h * g->head_dim;
        for (unsigned i = 0; i < half; i++) {
            unsigned a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
            float x0 = v[a], x1 = v[b];
            v[a] = x0 * c[i] - x1 * sn[i];
            v[b] = x0 * sn[i] + x1 * c[i];
        }
    }
}

int eng_shift(eng_session *s, uint32_t n_keep, uint32_t n_discard, char *err,
              size_t errlen)
{
    const fmt_hparams *hp = s->hp;
    if (n_keep > s->n_past || n_discard > s->n_past - n_keep)
        return fail(err, errlen, ENG_EARG,
                    "cannot drop %u positions after the first %u: the cache holds %u",
                    n_discard, n_keep, s->n_past);
    if (n_discard == 0)
        return 0;
    unsigned half = s->hd_max / 2;
    float *c = calloc(half ? half : 1, sizeof *c), *sn = calloc(half ? half : 1, sizeof *sn);
    if (!c || !sn) {
        free(c);
        free(sn);
        return fail(err, errlen, ENG_ENOMEM, "context shift: out of memory");
    }
    uint32_t n_move = s->n_past - n_keep - n_discard;
    size_t row = s->kv_dim, n = (size_t)n_move * row;
    unsigned reps = s->n_eff / hp->n_layers;     /* FixedPoint applications */
    for (unsigned l = 0; l < s->n_eff; l++) {
        /* cos/sin of the turn of each pair of this layer, angles in double
         * (layers differ only with per-layer geometry) */
        const eng_layer *ly = &s->layers[l / reps];
        const fmt_layer_geom *g = ly->g;
        float ts = powf(g->rope_theta, -2.0f / (float)g->rope_dims), theta = 1.0f;
        for (unsigned i = 0; i < g->rope_dims / 2; i++) {
            double f = s->ggml ? (double)(s->rope_ff ? theta / s->rope_ff[i] : theta)
                               : (double)ly->inv_freq[i];
            double ang = -(double)n_discard * f;
            c[i] = (float)cos(ang);
            sn[i] = (float)sin(ang);
            theta *= ts;
        }
        size_t dst = (size_t)l * s->n_ctx * row + (size_t)n_keep * row;
        size_t src = dst + (size_t)n_discard * row;
        if (s->kv_f16) {
            memmove(s->kc16 + dst, s->kc16 + src, n * sizeof(uint16_t));
            memmove(s->vc16 + dst, s->vc16 + src, n * sizeof(uint16_t));
            for (uint32_t p = 0; p < n_move; p++) {
                uint16_t *kr = s->kc16 + dst + (size_t)p * row;
                for (size_t i = 0; i < row; i++)
                    s->k_tmp[i] = kern_fp16_to_fp32(kr[i]);
                rerope_row(s, g, s->k_tmp, c, sn);
                for (size_t i = 0; i < row; i++)
                    kr[i] = kern_fp32_to_fp16(s->k_tmp[i]);
            }
        } else {
            memmove(s->kc + dst, s->kc + src, n * sizeof(float));
            memmove(s->vc + dst, s->vc + src, n * sizeof(float));
            for (uint32_t p = 0; p < n_move; p++)
                rerope_row(s, g, s->kc + dst + (size_t)p * row, c, sn);
        }
    }
    s->n_past -= n_discard;
    free(c);
    free(sn);
    return 0;
}

int eng_default_threads(int requested)
{
    if (requested > 0)
        return requested;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void prof_attach(eng_session *s);

int eng_set_threads(eng_session *s, int n_threads)
{
    int rc = eng_pool_resize(s->pool, eng_default_threads(n_threads)) ? ENG_ENOMEM : 0;
    prof_attach(s);   /* new workers open their own counters */
    return rc;
}

int eng_threads(const eng_session *s) { return eng_pool_size(s->pool); }

/* Profiling: one parallel region in which every worker (and the caller,
 * tid 0) opens counters on itself — perf_event counters belong to the
 * thread that opens them.  Done when attaching, not inside a token, so the
 * opening never counts as a token's time. */
static void prof_attach_run(void *ctx, int tid, int n_threads)
{
    (void)n_threads;
    prof_thread_attach(ctx, tid);
}

static void prof_attach(eng_session *s)
{
    if (s->prof && prof_threads_reset(s->prof, eng_pool_size(s->pool)) == 0)
        eng_pool_run(s->pool, prof_attach_run, s->prof);
}

/* The critical-path model (fmt_critical_path, report eq. 4.23) per stored
 * layer, handed to the profiler: src/prof knows no format types.  A
 * FixedPoint block carries the sum over its applications, as its
 * measured bytes do. */
static void prof_model(eng_session *s)
{
    unsigned L = s->hp->n_layers, n = s->n_eff ? s->n_eff : L;
    fmt_cp_layer *cl = calloc(n ? n : 1, sizeof *cl);
    fmt_cp_total tot;
    if (!cl)
        return;
    if (fmt_critical_path(s->model, 0.0, cl, n, &tot) == 0) {
        for (unsigned b = 0; b < L; b++) {
            prof_layer_model m = { 0 };
            int any = 0;
            for (unsigned i = 0; i < n; i++) {
                if (cl[i].block != b)
                    continue;
                m.attn += cl[i].attn;
                m.dense += cl[i].dense;
                m.expert += cl[i].expert;
                m.naive += cl[i].naive;
                m.critical += cl[i].critical;
                if (!any)
                    m.binding = cl[i].binding == FMT_CP_DENSE    ? PROF_ST_FFN
                                : cl[i].binding == FMT_CP_EXPERT ? PROF_ST_EXPERTS
                                                                 : PROF_ST_ATTN;
                any = 1;
            }
            if (any)
                prof_set_layer_model(s->prof, b, &m);
        }
    }
    free(cl);
}

void eng_set_prof(eng_session *s, struct prof *p)
{
    s->prof = p;
    if (p)
        prof_model(s);
    prof_attach(s);
}

#define ENG_PAR_MIN_BYTES (256u * 1024u)

typedef struct mv_task {
    const kern_ops *ops;
    const eng_mv   *mv;
    const kern_act *x;
    float *const   *out;
    eng_pool       *pool;
} mv_task;

/* The kernel for a tile: its type's, or the repacked Q4_0 flavour for the
 * matrices mv_init marked. */
static kern_tile_mv_fn tile_fn(const kern_ops *ops, const eng_mv *mv,
                               const fmt_tile *ti)
{
    if (ti->type == KERN_Q4_0 && (mv->rp >> ti->matrix & 1))
        return ops->tile_mv_q4_0_rp;
    return ops->tile_mv[ti->type];
}

static void mv_run(void *ctx, int tid, int n_threads)
{
    const mv_task *t = ctx;
    const eng_mv *mv = t->mv;
    const fmt_tile *tiles = mv->st->tiles;
    for (;;) {
        size_t u = eng_pool_claim(t->pool, tid, n_threads, mv->n_units);
        if (u >= mv->n_units)
            break;
        for (uint32_t i = mv->unit[u]; i < mv->unit[u + 1]; i++) {
            const fmt_tile *ti = &tiles[i];
            tile_fn(t->ops, mv, ti)(ti->payload, ti->rows, ti->cols, t->x,
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
    s->mv_bytes += mv->st->length;   /* every tile of the stream is read */
    /* Waking workers costs microseconds: below a few hundred KB of tiles
     * (or with one unit) the caller does the whole stream itself. */
    if (mv->n_units < 2 || mv->st->length < ENG_PAR_MIN_BYTES) {
        const fmt_tile *ti = mv->st->tiles;
        for (uint32_t i = 0; i < mv->st->n_tiles; i++, ti++)
            tile_fn(s->ops, mv, ti)(ti->payload, ti->rows, ti->cols, x, ti->col0,
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

/* The session's peer decides the arithmetic (see the essay at the top). */
static void rmsnorm(const eng_session *s, float *out, const float *x,
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
static void attn_qkv_post(eng_session *s, const eng_layer *ly, uint32_t pos,
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
            rmsnorm(s, q + hh * hd, q + hh * hd, ly->q_norm, hd);
    if (ly->k_norm)
        for (uint32_t hh = 0; hh < g->n_kv_heads; hh++)
            rmsnorm(s, k + hh * hd, k + hh * hd, ly->k_norm, hd);
    if (hp->flags & FMT_FLAG_V_NORM)
        for (uint32_t hh = 0; hh < g->n_kv_heads; hh++)
            rmsnorm(s, v + hh * hd, v + hh * hd, NULL, hd);
    rope(s, ly, q, g->n_heads, pos);
    rope(s, ly, k, g->n_kv_heads, pos);
}

typedef struct attn_task {
    eng_session *s;
    const float *q;
    float       *att;
    const void  *k, *v;      /* first visible position of this layer's cache */
    uint32_t     n_pos, n_heads, n_kv_heads, hd;
} attn_task;

/* Heads [h0, h1) of an attention task, each with its own scratch. */
static void attn_heads(const attn_task *t, unsigned h0, unsigned h1)
{
    eng_session *s = t->s;
    /* the heads' score rows are contiguous: (h1 - h0) * n_ctx floats */
    if (s->kv_f16) {
        s->ops->attn_f16(t->att, t->q, t->k, t->v, t->n_pos, h0, h1,
                         t->n_heads, t->n_kv_heads, t->hd, s->kv_dim,
                         1.0f / sqrtf((float)t->hd), 0.0f,
                         s->par_sc + (size_t)h0 * s->n_ctx,
                         s->par_h16 + (size_t)h0 * 2 * s->hd_max);
        return;
    }
    s->ops->attn_f32(t->att, t->q, t->k, t->v, t->n_pos, h0, h1, t->n_heads,
                     t->n_kv_heads, t->hd, s->kv_dim, 1.0f / sqrtf((float)t->hd),
                     0.0f, s->par_sc + (size_t)h0 * s->n_ctx);
}

/* Heads are independent: each thread claims whole kv-head groups (the
 * query heads that share one kv head read the same K and V rows, so they
 * stay on one core), at least 4 heads a claim so that the kernels that run
 * several heads side by side get them even without GQA.  The arithmetic
 * of a head does not depend on who runs it. */
static void attn_run(void *ctx, int tid, int n_threads)
{
    const attn_task *t = ctx;
    unsigned G = t->n_kv_heads ? t->n_heads / t->n_kv_heads : 1;
    if (!G)
        G = 1;
    const unsigned chunk = G * ((4 + G - 1) / G);
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

/* Store this position's k, v into the cache of effective layer kvl and
 * attend over the visible positions: att[n_heads*hd] from q. */
static void attn_store_attend(eng_session *s, const eng_layer *ly, unsigned kvl,
                              uint32_t pos, const float *q, const float *k,
                              const float *v, float *att)
{
    const fmt_layer_geom *g = ly->g;
    uint32_t hd = g->head_dim, kvd = ly->kv_dim;
    const size_t lo = (size_t)kvl * s->n_ctx * s->kv_dim;  /* layer offset */
    /* sliding-window layers see only the last sliding_window positions */
    uint32_t first = 0, W = g->sliding_window;
    if (W && pos + 1 > W)
        first = pos + 1 - W;
    attn_task t = { s, q, att, NULL, NULL, pos + 1 - first, g->n_heads,
                    g->n_kv_heads, hd };
    if (s->kv_f16) {
        uint16_t *kc = s->kc16 + lo, *vc = s->vc16 + lo;
        uint16_t *kp = kc + (size_t)pos * s->kv_dim, *vp = vc + (size_t)pos * s->kv_dim;
        for (uint32_t i = 0; i < kvd; i++) {
            kp[i] = kern_fp32_to_fp16(k[i]);
            vp[i] = kern_fp32_to_fp16(v[i]);
        }
        t.k = kc + (size_t)first * s->kv_dim;
        t.v = vc + (size_t)first * s->kv_dim;
    } else {
        float *kc = s->kc + lo, *vc = s->vc + lo;
        float *kp = kc + (size_t)pos * s->kv_dim, *vp = vc + (size_t)pos * s->kv_dim;
        if (kp != k)
            memcpy(kp, k, kvd * sizeof(float));
        if (vp != v)
            memcpy(vp, v, kvd * sizeof(float));
        t.k = kc + (size_t)first * s->kv_dim;
        t.v = vc + (size_t)first * s->kv_dim;
    }
    /* per-head scratch for the parallel path (grown on demand) */
    if (s->par_heads < g->n_heads) {
        float *sc = realloc(s->par_sc, (size_t)g->n_heads * s->n_ctx * sizeof(float));
        if (sc)
            s->par_sc = sc;
        uint16_t *h16 = realloc(s->par_h16, (size_t)g->n_heads * 2 * s->hd_max *
                                            sizeof(uint16_t));
        if (h16)
            s->par_h16 = h16;
        if (sc && h16)
            s->par_heads = g->n_heads;
    }
    /* The work is about n_pos * n_heads * hd multiply-adds: small caches
     * stay on the caller; without scratch, the scalar kernels as before. */
    if (s->par_heads >= g->n_heads && eng_pool_size(s->pool) >= 2 &&
        (uint64_t)t.n_pos * g->n_heads * hd >= 16384u) {
        eng_pool_run(s->pool, attn_run, &t);
    } else if (s->par_heads >= g->n_heads) {
        attn_heads(&t, 0, g->n_heads);
    } else {
        if (s->kv_f16)
            kern_attn_decode_f16(att, q, t.k, t.v, t.n_pos, g->n_heads,
                                 g->n_kv_heads, hd, s->kv_dim,
                                 1.0f / sqrtf((float)hd), 0.0f, s->att16);
        else
            kern_attn_decode(att, q, t.k, t.v, t.n_pos, g->n_heads, g->n_kv_heads,
                             hd, s->kv_dim, 1.0f / sqrtf((float)hd), 0.0f, s->scores);
    }
}

/* m = Attn(N_a(h)) into mout[dim]; kvl picks the KV cache (the effective
 * layer).  h and mout may not alias. */
static void attn_block(eng_session *s, const eng_layer *ly, unsigned kvl,
                       const float *h, float *mout)
{
    const fmt_hparams *hp = s->hp;
    uint32_t dim = hp->dim, pos = s->n_past;
    uint32_t qd = ly->q_dim, kvd = ly->kv_dim;   /* this layer's widths */
    const size_t lo = (size_t)kvl * s->n_ctx * s->kv_dim;  /* layer offset */
    float *out[FMT_NMATRIX] = { 0 };
    float *k, *v;                   /* this position's k and v */
    if (s->kv_f16) {
        k = s->k_tmp;               /* rounded into kc16/vc16 below */
        v = s->v_tmp;
    } else {
        k = s->kc + lo + (size_t)pos * s->kv_dim;
        v = s->vc + lo + (size_t)pos * s->kv_dim;
    }
    rmsnorm(s, s->xb, h, ly->attn_norm, dim);
    kern_act_set(&s->act_dim, s->xb, dim, ly->qkv.need);
    memset(s->q, 0, qd * sizeof(float));
    memset(k, 0, kvd * sizeof(float));
    memset(v, 0, kvd * sizeof(float));
    out[FMT_M_Q] = s->q;
    out[FMT_M_K] = k;
    out[FMT_M_V] = v;
    matvec_stream(s, &ly->qkv, &s->act_dim, out);
    attn_qkv_post(s, ly, pos, s->q, k, v);
    attn_store_attend(s, ly, kvl, pos, s->q, k, v, s->att);
    kern_act_set(&s->act_q, s->att, qd, ly->o.need);
    memset(mout, 0, dim * sizeof(float));
    out[FMT_M_O] = mout;
    matvec_stream(s, &ly->o, &s->act_q, out);
}

/* One SwiGLU/GeGLU FFN over the prepared input act, from a fused gate/up
 * stream and a down stream, into dout[dim] (overwritten). */
/* g[0..n) = act(g) * u: GeGLU where the header says so, else SwiGLU in
 * llama.cpp's arithmetic for GGUF-sourced models or run.c's otherwise. */
static void glu_act(eng_session *s, float *g, const float *u, uint32_t n)
{
    if (s->hp->flags & FMT_FLAG_GELU)
        kern_geglu(g, g, u, n);
    else if (s->ggml)
        s->ops->swiglu_ggml(g, g, u, n);
    else
        kern_swiglu(g, g, u, n);
}

static void glu_ffn(eng_session *s, const eng_mv *gu, const eng_mv *down,
                    uint32_t hidden, uint8_t mg, uint8_t mu, uint8_t md,
                    const kern_act *act, float *dout)
{
    float *out[FMT_NMATRIX] = { 0 };
    memset(s->hb, 0, hidden * sizeof(float));
    memset(s->hb2, 0, hidden * sizeof(float));
    out[mg] = s->hb;
    out[mu] = s->hb2;
    matvec_stream(s, gu, act, out);
    glu_act(s, s->hb, s->hb2, hidden);
    kern_act_set(&s->act_ffn, s->hb, hidden, down->need);
    memset(dout, 0, s->hp->dim * sizeof(float));
    out[md] = dout;
    matvec_stream(s, down, &s->act_ffn, out);
}

/* d = FFN(N_f(h)) into dout; zero when there is no dense FFN or no h (a
 * delayed residual from before layer 0). */
static void ffn_block(eng_session *s, const eng_layer *ly, const float *h,
                      float *dout)
{
    const fmt_hparams *hp = s->hp;
    if (!hp->ffn_dim || !h) {
        memset(dout, 0, hp->dim * sizeof(float));
        return;
    }
    rmsnorm(s, s->xb, h, ly->ffn_norm, hp->dim);
    kern_act_set(&s->act_dim, s->xb, hp->dim, ly->gate_up.need);
    glu_ffn(s, &ly->gate_up, &ly->down, hp->ffn_dim, FMT_M_GATE, FMT_M_UP,
            FMT_M_DOWN, &s->act_dim, dout);
}

/* ---- routed experts: routing, fetch and the deferred compute ----------
 *
 * An expert's output is routed at layer l (the router reads N_m(h) there)
 * and lands at its injection layer l + expert_delay.  Routing and compute
 * are split so the expert's bytes can travel in between:
 *
 *   moe_issue   at the routing layer: the router, top-k, the weights, and
 *               the fetch — nothing in mmap mode (a PREFETCHT0 hint when
 *               the prefetch thread runs), a read into a staging slot per
 *               expert otherwise; sync mode waits for it right there.
 *   moe_inject  at the injection layer: wait for the reads (staged), then
 *               the expert FFNs on the saved router input xr, weighted,
 *               added into the target.
 *
 * A ring of expert_delay + 1 routes holds what is in between.  The compute
 * is the same arithmetic on the same bytes in every mode and at whatever
 * layer it runs (the saved xr is re-quantised exactly as it was), so every
 * mode gives the same tokens.  Styles without a delay (and
 * ParallelSqrt2's MoE beside the dense FFN) inject in their own layer;
 * staged then overlaps the read with the dense FFN (and, for
 * PipelineRegisters, the attention) of that layer.
 */
#define ENG_MAX_TOPK 256

typedef struct eng_route {
    int32_t  layer;                  /* routing layer (stored block); -1: empty */
    int32_t  target;                 /* injection layer */
    uint32_t k;
    int      expert[ENG_MAX_TOPK];
    float    w[ENG_MAX_TOPK];        /* renormalised router weights */
    int      slot[ENG_MAX_TOPK];     /* staging slot, -1: read in place */
    int      ready;                  /* reads waited for */
    float   *xr;                     /* [dim] N_m(h) at the routing layer */
} eng_route;

/* A staging slot's view of an expert: its two streams with every tile's
 * payload pointing into the slot instead of the mapping.  The units of the
 * original eng_mv stay valid (same tiles in the same order). */
typedef struct eng_stage {
    fmt_tile  *t[2];                 /* [max tiles of a gate/up or down stream] */
    fmt_stream st[2];
    eng_mv     mv[2];
} eng_stage;

static void xio_fail(eng_session *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void xio_fail(eng_session *s, const char *fmt, ...)
{
    va_list ap;
    if (s->xio_failed)
        return;                      /* the first cause is the one to tell */
    s->xio_failed = 1;
    va_start(ap, fmt);
    vsnprintf(s->xio_err, sizeof s->xio_err, fmt, ap);
    va_end(ap);
}

/* Point stage k's copy of stream orig (part which: 0 gate/up, 1 down) at
 * data, which holds the file bytes [off, off + len). */
static int stage_stream(eng_session *s, unsigned k, int which, const eng_mv *orig,
                        const uint8_t *data, uint64_t off, uint64_t len)
{
    const fmt_stream *st = orig->st;
    eng_stage *sg = &s->stage[k];
    /* the mapping's base: a stream's first tile header sits at its offset */
    const uint8_t *base = (const uint8_t *)st->tiles[0].payload - FMT_TILE_HEADER_SIZE -
                          st->offset;
    for (uint32_t i = 0; i < st->n_tiles; i++) {
        uint64_t at = (uint64_t)((const uint8_t *)st->tiles[i].payload - base);
        if (at < off || at >= off + len)
            return -1;
        sg->t[which][i] = st->tiles[i];
        sg->t[which][i].payload = data + (at - off);
    }
    sg->st[which] = *st;
    sg->st[which].tiles = sg->t[which];
    sg->mv[which] = *orig;
    sg->mv[which].st = &sg->st[which];
    return 0;
}

/* Wait for route r's reads; their time goes to PROF_ST_IO_WAIT of the
 * routing layer and is taken out of the part the caller marks next (*pt).
 * The route's read time IO is the growth of the reader pool's busy time
 * (the union of the intervals with a read queued or in flight) since the
 * previous route's reads completed: overlapping reads are not counted
 * twice, and the routes' times sum to the time storage was busy. */
static void moe_wait(eng_session *s, eng_route *r, double *pt)
{
    const eng_layer *ly = &s->layers[r->layer];
    double t0 = prof_now(), busy = 0.0;
    uint64_t bytes = 0;
    if (r->ready)
        return;
    r->ready = 1;
    /* After a failed read the token is lost: its other reads are left to
     * land on their own (their slots wait for them, eng_io.c). */
    for (uint32_t j = 0; j < r->k && !s->xio_failed; j++) {
        int k = r->slot[j], e = r->expert[j];
        const uint8_t *data;
        uint64_t off = 0, len = 0;
        double bd = 0.0;
        char why[256];
        if (k < 0)
            continue;
        fmt_model_expert(s->model, (unsigned)r->layer, (unsigned)e, NULL, NULL, &off, &len);
        if (eng_xio_wait(s->xio, k, &data, &bd, why, sizeof why)) {
            xio_fail(s, "%s (layer %d, expert %d)", why, r->layer, e);
            continue;
        }
        if (stage_stream(s, (unsigned)k, 0, &ly->exp_gu[e], data, off, len) ||
            stage_stream(s, (unsigned)k, 1, &ly->exp_down[e], data, off, len)) {
            xio_fail(s, "%s: layer %d expert %d: tiles outside the expert's range",
                     fmt_model_path(s->model), r->layer, e);
            continue;
        }
        if (bd > busy)
            busy = bd;
        bytes += len;
    }
    if (bytes) {
        double io = busy > s->xio_busy ? busy - s->xio_busy : 0.0;
        if (busy > s->xio_busy)
            s->xio_busy = busy;
        s->stats.xio_bytes += bytes;
        s->stats.xio_s += io;
        if (s->prof)
            prof_layer_io(s->prof, (unsigned)r->layer, io, bytes);
    }
    double t1 = prof_now();
    s->stats.xio_stall_s += t1 - t0;
    if (s->prof && r->k && r->slot[0] >= 0)
        prof_layer_mark(s->prof, (unsigned)r->layer, PROF_ST_IO_WAIT, t0);
    if (pt)
        *pt += t1 - t0;
}

static void moe_release(eng_session *s, eng_route *r)
{
    for (uint32_t j = 0; j < r->k; j++)
        if (r->slot[j] >= 0) {
            eng_xio_release(s->xio, r->slot[j]);
            r->slot[j] = -1;
        }
    r->layer = -1;
}

/* Route N_m(h) of layer l (softmax router, top-k with ties to the lower
 * index, weights renormalised over the chosen k) and start the fetch of
 * the chosen experts; the output is due at layer target. */
static void moe_issue(eng_session *s, unsigned l, const float *h, int32_t target,
                      double *pt)
{
    const fmt_hparams *hp = s->hp;
    const eng_layer *ly = &s->layers[l];
    uint32_t dim = hp->dim, E = hp->n_experts, K = hp->top_k;
    eng_route *r = &s->route[(unsigned)target % (hp->expert_delay + 1u)];
    if (r->layer >= 0)
        moe_release(s, r);           /* never injected (cannot happen) */
    r->layer = (int32_t)l;
    r->target = target;
    r->k = K;
    r->ready = 0;
    if (!ly->exp_gu) {               /* a layer without experts adds nothing */
        r->k = 0;
        return;
    }
    rmsnorm(s, r->xr, h, ly->moe_norm, dim);
    float mx = -INFINITY, sum = 0.0f, wsum = 0.0f;
    for (uint32_t e = 0; e < E; e++) {
        s->probs[e] = s->ops->dot_f32(ly->router + (size_t)e * dim, r->xr, dim);
        if (s->probs[e] > mx)
            mx = s->probs[e];
    }
    for (uint32_t e = 0; e < E; e++)
        sum += (s->probs[e] = expf(s->probs[e] - mx));
    for (uint32_t e = 0; e < E; e++)
        s->probs[e] /= sum;
    for (uint32_t j = 0; j < K; j++) {
        int best = -1;
        for (uint32_t e = 0; e < E; e++) {
            int taken = 0;
            for (uint32_t t = 0; t < j; t++)
                taken |= r->expert[t] == (int)e;
            if (!taken && (best < 0 || s->probs[e] > s->probs[best]))
                best = (int)e;
        }
        r->expert[j] = best;
        r->slot[j] = -1;
        wsum += s->probs[best];
    }
    for (uint32_t j = 0; j < K; j++)
        r->w[j] = (hp->flags & FMT_FLAG_MOE_NO_RENORM)
                      ? s->probs[r->expert[j]]   /* Qwen3-MoE, norm_topk_prob off */
                      : s->probs[r->expert[j]] / wsum;
    if (s->xio_mode != ENG_XIO_MMAP && s->xio) {
        for (uint32_t j = 0; j < K; j++) {
            uint64_t off = 0, len = 0;
            fmt_model_expert(s->model, l, (unsigned)r->expert[j], NULL, NULL, &off, &len);
            r->slot[j] = eng_xio_issue(s->xio, off, len);
            if (r->slot[j] < 0)
                xio_fail(s, "%s: layer %u expert %d: no staging slot for %llu bytes",
                         fmt_model_path(s->model), l, r->expert[j],
                         (unsigned long long)len);
        }
        if (s->xio_mode == ENG_XIO_SYNC)
            moe_wait(s, r, pt);      /* the read is a dead stop here */
    } else if (s->pf) {
        /* ExpertTiles: exactly the routed experts' streams */
        for (uint32_t j = 0; j < K; j++) {
            const fmt_stream *gu = ly->exp_gu[r->expert[j]].st;
            const fmt_stream *dn = ly->exp_down[r->expert[j]].st;
            eng_pf_range(s->pf, (const uint8_t *)gu->tiles[0].payload - FMT_TILE_HEADER_SIZE,
                         gu->length);
            eng_pf_range(s->pf, (const uint8_t *)dn->tiles[0].payload - FMT_TILE_HEADER_SIZE,
                         dn->length);
        }
    }
}

/* The experts due at layer target, weighted, into eout[dim] (overwritten;
 * zero when nothing is due).  Returns the routing layer, or -1. */
static int moe_inject(eng_session *s, int32_t target, float *eout, double *pt)
{
    const fmt_hparams *hp = s->hp;
    uint32_t dim = hp->dim;
    eng_route *r = &s->route[(unsigned)target % (hp->expert_delay + 1u)];
    memset(eout, 0, dim * sizeof(float));
    if (r->layer < 0 || r->target != target)
        return -1;
    int l = r->layer;
    const eng_layer *ly = &s->layers[l];
    moe_wait(s, r, pt);
    if (s->xio_failed) {
        moe_release(s, r);
        return l;
    }
    unsigned need = 0;
    for (uint32_t j = 0; j < r->k; j++)
        need |= ly->exp_gu[r->expert[j]].need;
    kern_act_set(&s->act_dim, r->xr, dim, need);
    for (uint32_t j = 0; j < r->k; j++) {
        int e = r->expert[j], k = r->slot[j];
        const eng_mv *gu = k >= 0 ? &s->stage[k].mv[0] : &ly->exp_gu[e];
        const eng_mv *dn = k >= 0 ? &s->stage[k].mv[1] : &ly->exp_down[e];
        glu_ffn(s, gu, dn, hp->expert_ffn_dim, FMT_M_EXP_GATE, FMT_M_EXP_UP,
                FMT_M_EXP_DOWN, &s->act_dim, s->bt);
        for (uint32_t i = 0; i < dim; i++)
            eout[i] += r->w[j] * s->bt[i];
        s->stats.expert_bytes += gu->st->length + dn->st->length;
    }
    moe_release(s, r);
    return l;
}

/* e = MoE(N_m(h)) into eout, routed and injected in the same layer. */
static void moe_block(eng_session *s, const eng_layer *ly, const float *h,
                      float *eout, double *pt)
{
    unsigned l = (unsigned)(ly - s->layers);
    moe_issue(s, l, h, (int32_t)l, pt);
    moe_inject(s, (int32_t)l, eout, pt);
}

/* x += the experts due at layer target (a delayed injection); the
 * routing layer, or -1 when none was due. */
static int moe_take(eng_session *s, int32_t target, float *x, double *pt)
{
    /* pend [dim] is free scratch: outputs wait as routes, not as sums */
    int lr = moe_inject(s, target, s->pend, pt);
    if (lr < 0)
        return -1;
    for (uint32_t k = 0; k < s->hp->dim; k++)
        x[k] += s->pend[k];
    return lr;
}

/* PREFETCHT0 over the next layer's attention and dense FFN streams (the
 * output head after the last), posted as layer l starts. */
static void prefetch_next(eng_session *s, unsigned l)
{
    const eng_mv *mv[4];
    unsigned n = 0, L = s->hp->n_layers;
    if (!s->pf)
        return;
    eng_pf_layer(s->pf);
    if (l + 1 < L) {
        const eng_layer *nx = &s->layers[l + 1];
        mv[n++] = &nx->qkv;
        mv[n++] = &nx->o;
        if (s->hp->ffn_dim) {
            mv[n++] = &nx->gate_up;
            mv[n++] = &nx->down;
        }
    } else {
        mv[n++] = &s->output;
    }
    for (unsigned i = 0; i < n; i++)
        if (mv[i]->st && mv[i]->st->n_tiles)
            eng_pf_range(s->pf,
                         (const uint8_t *)mv[i]->st->tiles[0].payload - FMT_TILE_HEADER_SIZE,
                         mv[i]->st->length);
}

static double l2(const float *x, uint32_t n)
{
    double acc = 0.0;
    for (uint32_t i = 0; i < n; i++)
        acc += (double)x[i] * x[i];
    return sqrt(acc);
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
        t->layer_l2[i] = l2(x, dim);
    }
    if (t->n_layers < i + 1)
        t->n_layers = i + 1;
}

static void add_to(float *x, const float *y, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        x[i] += y[i];
}

/* The layer stack for every combine style (scripts/train/ARCHITECTURES.md
 * is the contract).  x holds the embedding on entry and the final residual
 * on return. */
static void run_layers(eng_session *s)
{
    const fmt_hparams *hp = s->hp;
    uint32_t dim = hp->dim;
    unsigned L = hp->n_layers;
    float *x = s->x, *m = s->bm, *d = s->bd, *e = s->be;
    double pt = s->prof ? prof_now() : 0.0;
    int has_e = hp->n_experts > 0;
    /* each mark also hands over the bytes its part streamed */
#define MARK(l, st)                                                       \
    do {                                                                  \
        if (s->prof) {                                                    \
            pt = prof_layer_mark(s->prof, (l), (st), pt);                 \
            prof_layer_bytes(s->prof, (l), (st), s->mv_bytes);            \
        }                                                                 \
        s->mv_bytes = 0;                                                  \
    } while (0)
    s->mv_bytes = 0;

    for (unsigned i = 0; i <= hp->expert_delay; i++)
        if (s->route[i].layer >= 0)
            moe_release(s, &s->route[i]);   /* left by a failed token */
    switch (hp->combine_style) {
    case FMT_COMBINE_PARALLEL_SQRT2:
    default:
        for (unsigned l = 0; l < L; l++) {
            const eng_layer *ly = &s->layers[l];
            prefetch_next(s, l);
            attn_block(s, ly, l, x, m);
            add_to(x, m, dim);
            MARK(l, PROF_ST_ATTN);
            if (has_e && ly->exp_gu)                /* read beside the dense FFN */
                moe_issue(s, l, x, (int32_t)l, &pt);
            ffn_block(s, ly, x, d);
            MARK(l, PROF_ST_FFN);
            if (!has_e || !ly->exp_gu) {          /* (per-layer: no experts) */
                add_to(x, d, dim);                  /* a standard Llama layer */
                trace_layer(s, l, x, NULL);
                continue;
            }
            moe_inject(s, (int32_t)l, e, &pt);
            MARK(l, PROF_ST_EXPERTS);
            if (hp->ffn_dim) {
                const float r2 = 0.70710678118654752f;
                for (uint32_t i = 0; i < dim; i++)
                    x[i] += (d[i] + e[i]) * r2;
            } else {
                add_to(x, e, dim);                  /* Mixtral-style */
            }
            trace_layer(s, l, x, NULL);
        }
        break;
    case FMT_COMBINE_DELAYED_SUM: {
        unsigned dd = hp->dense_delay, de = hp->expert_delay, R = dd + 1;
        for (unsigned l = 0; l < L; l++) {
            const eng_layer *ly = &s->layers[l];
            prefetch_next(s, l);
            attn_block(s, ly, l, x, m);
            add_to(x, m, dim);                      /* x is x_mid */
            MARK(l, PROF_ST_ATTN);
            const float *y = dd == 0 ? x
                             : l >= dd ? s->hist + (size_t)((l - dd) % R) * dim
                                       : NULL;      /* before layer 0: d = 0 */
            ffn_block(s, ly, y, d);
            MARK(l, PROF_ST_FFN);
            if (has_e) {
                moe_issue(s, l, x, (int32_t)(l + de), &pt);  /* routed off x_mid */
                MARK(l, PROF_ST_EXPERTS);
            }
            add_to(x, d, dim);
            if (has_e) {
                int lr = moe_inject(s, (int32_t)l, e, &pt);
                if (lr >= 0) {
                    add_to(x, e, dim);
                    MARK((unsigned)lr, PROF_ST_EXPERTS);
                }
            }
            memcpy(s->hist + (size_t)(l % R) * dim, x, dim * sizeof(float));
            trace_layer(s, l, x, NULL);
        }
        for (unsigned t = L; t < L + de; t++) {    /* flush past the end */
            int lr = moe_take(s, (int32_t)t, x, &pt);
            if (lr >= 0)
                MARK((unsigned)lr, PROF_ST_EXPERTS);
        }
        break;
    }
    case FMT_COMBINE_ASYNC_EXPERTS: {
        unsigned de = hp->expert_delay;
        for (unsigned l = 0; l < L; l++) {
            const eng_layer *ly = &s->layers[l];
            prefetch_next(s, l);
            int lr = moe_take(s, (int32_t)l, x, &pt); /* injected at the input */
            if (lr >= 0)
                MARK((unsigned)lr, PROF_ST_EXPERTS);
            /* The router reads the layer's input, which attention and the
             * FFN leave as it is (their outputs are added below), so the
             * routing comes first: the read then overlaps this layer's
             * compute too, not only the next expert_delay layers'.  The
             * last layer's routing (injected after the stack, nothing left
             * to hide behind before) gains the most. */
            if (has_e) {
                moe_issue(s, l, x, (int32_t)(l + de), &pt);
                MARK(l, PROF_ST_EXPERTS);
            }
            attn_block(s, ly, l, x, m);
            MARK(l, PROF_ST_ATTN);
            ffn_block(s, ly, x, d);
            MARK(l, PROF_ST_FFN);
            add_to(x, m, dim);
            add_to(x, d, dim);
            if (has_e && de == 0)
                moe_take(s, (int32_t)l, x, &pt);
            trace_layer(s, l, x, NULL);
        }
        for (unsigned t = L; t < L + de; t++) {
            int lr = moe_take(s, (int32_t)t, x, &pt);
            if (lr >= 0)
                MARK((unsigned)lr, PROF_ST_EXPERTS);
        }
        break;
    }
    case FMT_COMBINE_DECOUPLED: {
        float *a = s->ba;                           /* attention stream; x: FFN */
        unsigned M = hp->merge_interval ? hp->merge_interval : 1;
        memcpy(a, x, dim * sizeof(float));
        for (unsigned l = 0; l < L; l++) {
            const eng_layer *ly = &s->layers[l];
            prefetch_next(s, l);
            if (has_e)                              /* read beside attention and FFN */
                moe_issue(s, l, x, (int32_t)l, &pt);
            attn_block(s, ly, l, a, m);
            add_to(a, m, dim);
            MARK(l, PROF_ST_ATTN);
            ffn_block(s, ly, x, d);
            MARK(l, PROF_ST_FFN);
            if (has_e) {
                moe_inject(s, (int32_t)l, e, &pt);
                MARK(l, PROF_ST_EXPERTS);
            }
            add_to(x, d, dim);
            if (has_e)
                add_to(x, e, dim);
            if ((l + 1) % M == 0)
                for (uint32_t i = 0; i < dim; i++)
                    a[i] = x[i] = (a[i] + x[i]) * 0.5f;
            trace_layer(s, l, x, a);
        }
        for (uint32_t i = 0; i < dim; i++)
            x[i] = (a[i] + x[i]) * 0.5f;
        break;
    }
    case FMT_COMBINE_PIPELINE_REG: {
        float *a = s->ba;                           /* attn_reg; x: xfm_reg */
        memcpy(a, x, dim * sizeof(float));
        for (unsigned l = 0; l < L; l++) {
            const eng_layer *ly = &s->layers[l];
            prefetch_next(s, l);
            if (has_e)
                moe_issue(s, l, x, (int32_t)l, &pt);
            ffn_block(s, ly, x, d);                 /* off xfm_reg[l-1] */
            MARK(l, PROF_ST_FFN);
            if (has_e) {
                moe_inject(s, (int32_t)l, e, &pt);
                MARK(l, PROF_ST_EXPERTS);
                add_to(d, e, dim);
            }
            attn_block(s, ly, l, a, m);
            add_to(a, m, dim);
            MARK(l, PROF_ST_ATTN);
            for (uint32_t i = 0; i < dim; i++)
                x[i] = a[i] + d[i];
            trace_layer(s, l, x, NULL);
        }
        break;
    }
    case FMT_COMBINE_FIXED_POINT: {
        unsigned T = hp->iterations ? hp->iterations : 1;
        for (unsigned b = 0; b < L; b++) {
            const eng_layer *ly = &s->layers[b];
            prefetch_next(s, b);
            for (unsigned it = 0; it < T; it++) {
                attn_block(s, ly, b * T + it, x, m);
                add_to(x, m, dim);
                MARK(b, PROF_ST_ATTN);
                ffn_block(s, ly, x, d);
                MARK(b, PROF_ST_FFN);
                if (has_e) {
                    moe_block(s, ly, x, e, &pt);
                    MARK(b, PROF_ST_EXPERTS);
                    add_to(d, e, dim);
                }
                add_to(x, d, dim);
                trace_layer(s, b * T + it, x, NULL);
            }
        }
        break;
    }
    }
#undef MARK
}

static int forward(eng_session *s, int32_t token, int want_logits)
{
    const fmt_hparams *hp = s->hp;
    uint32_t dim = hp->dim;
    float *out[FMT_NMATRIX] = { 0 };

    embed(s, token, s->x);
    run_layers(s);
    if (s->xio_failed)
        return ENG_EIO;   /* the position is not taken: eng_decode reports */
    if (hp->n_experts)
        s->stats.expert_tokens++;
    s->n_past++;
    if (!want_logits)
        return 0;

    if (s->trace)
        s->trace->final_in_l2 = l2(s->x, dim);
    rmsnorm(s, s->x, s->x, s->out_norm, dim);
    if (s->trace)
        s->trace->final_norm_l2 = l2(s->x, dim);
    kern_act_set(&s->act_dim, s->x, dim, s->output.need);
    memset(s->logits, 0, hp->vocab_size * sizeof(float));
    out[FMT_M_OUTPUT] = s->logits;
    out[FMT_M_TOK_EMBD] = s->logits;
    matvec_stream(s, &s->output, &s->act_dim, out);
    if (hp->softcap > 0.0f)
        for (uint32_t i = 0; i < hp->vocab_size; i++)
            s->logits[i] = tanhf(s->logits[i] / hp->softcap) * hp->softcap;
    return 0;
}

/* The error of a session whose model file shrank under the mapping. */
static int model_fault(eng_session *s, char *err, size_t errlen)
{
    struct stat st;
    const char *path = fmt_model_path(s->model);
    if (stat(path, &st) == 0)
        return fail(err, errlen, ENG_EIO,
                    "%s: the model file changed while in use: reading byte %llu "
                    "failed (the file is now %lld bytes, %llu when opened)",
                    path, (unsigned long long)s->fault_off, (long long)st.st_size,
                    (unsigned long long)fmt_model_file_size(s->model));
    return fail(err, errlen, ENG_EIO,
                "%s: the model file changed while in use: reading byte %llu "
                "failed (%s)", path, (unsigned long long)s->fault_off, strerror(errno));
}

/* forward() with a guard over the model's mapping (eng_guard.c): a SIGBUS
 * from a file truncated under us, on this thread or a worker, comes back
 * as ENG_EIO and breaks the session. */
static void forward_batch(eng_session *s, const int32_t *tokens, unsigned m,
                          int want_logits);
/* tokens[0..m) through forward() (batch 0: one token) or forward_batch(). */
static int guarded_run(eng_session *s, const int32_t *tokens, unsigned m,
                       int batch, int want_logits, char *err, size_t errlen)
{
    uint64_t size = 0;
    const uint8_t *base = fmt_model_map(s->model, &size);
    eng_guard g;
    g.lo = base;
    g.hi = base + size;
    if (sigsetjmp(g.jb, 0)) {
        eng_guard_pop(&g);
        s->broken = 1;
        s->fault_off = (uint64_t)((const uint8_t *)g.addr - base);
        return model_fault(s, err, errlen);
    }
    eng_guard_push(&g);
    if (batch)
        forward_batch(s, tokens, m, want_logits);
    else
        forward(s, tokens[0], want_logits);
    eng_guard_pop(&g);
    return 0;
}

static int guarded_forward(eng_session *s, int32_t token, int want_logits,
                           char *err, size_t errlen)
{
    return guarded_run(s, &token, 1, 0, want_logits, err, errlen);
}

static int check_token(eng_session *s, int32_t token, char *err, size_t errlen)
{
    if (s->broken)
        return model_fault(s, err, errlen);
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
        prof_token_begin(s->prof);
    double t0 = prof_now();
    if ((rc = guarded_forward(s, token, 1, err, errlen)))
        return rc;
    if (s->xio_failed)
        return xio_error(s, err, errlen);
    s->stats.decode_s += prof_now() - t0;
    if (s->prof)
        prof_token_end(s->prof, PROF_DECODE);
    s->stats.n_gen++;
    return 0;
}

/* ---- batched prefill ---------------------------------------------------
 *
 * A prompt goes through the layers ENG_BATCH positions at a time: each
 * fused tile stream is read once per chunk and multiplied into every
 * position's input (kern_ops.tile_mm: a tile's bytes come from memory once
 * and stay in L1/L2 for the chunk), while the per-position steps (norms,
 * RoPE, the cache store and attention, which must see the chunk's earlier
 * positions) run position by position in order.  The batched kernels give
 * each position exactly the sums of its own mat-vec and everything else is
 * the decode path's code, so the logits are bit-identical to feeding the
 * tokens one by one; only the last position of the prompt goes through the
 * LM head.  Plain Llama layers only (combine style ParallelSqrt2 without
 * experts, a dense FFN, no trace): every other schedule prefills token by
 * token. */
#define ENG_BATCH 32

static void batch_free(eng_session *s)
{
    for (unsigned j = 0; j < ENG_BATCH; j++) {
        if (s->bact_dim)
            kern_act_free(&s->bact_dim[j]);
        if (s->bact_q)
            kern_act_free(&s->bact_q[j]);
        if (s->bact_ffn)
            kern_act_free(&s->bact_ffn[j]);
    }
    free(s->bact_dim); free(s->bact_q); free(s->bact_ffn);
    free(s->bx); free(s->bxb); free(s->bo); free(s->bq); free(s->batt);
    free(s->bk); free(s->bv); free(s->bh); free(s->bh2);
    s->bact_dim = s->bact_q = s->bact_ffn = NULL;
    s->bx = s->bxb = s->bo = s->bq = s->batt = s->bk = s->bv = s->bh = s->bh2 = NULL;
    s->batch_ready = 0;
}

static int batch_init(eng_session *s)
{
    const size_t B = ENG_BATCH, dim = s->hp->dim;
    int oom = 0;
    if (s->batch_ready)
        return 0;
    s->bx = xalloc(B * dim * sizeof(float), &oom);
    s->bxb = xalloc(B * dim * sizeof(float), &oom);
    s->bo = xalloc(B * dim * sizeof(float), &oom);
    s->bq = xalloc(B * s->q_dim * sizeof(float), &oom);
    s->batt = xalloc(B * s->q_dim * sizeof(float), &oom);
    s->bk = xalloc(B * s->kv_dim * sizeof(float), &oom);
    s->bv = xalloc(B * s->kv_dim * sizeof(float), &oom);
    s->bh = xalloc(B * s->hmax * sizeof(float), &oom);
    s->bh2 = xalloc(B * s->hmax * sizeof(float), &oom);
    s->bact_dim = xalloc(B * sizeof(kern_act), &oom);
    s->bact_q = xalloc(B * sizeof(kern_act), &oom);
    s->bact_ffn = xalloc(B * sizeof(kern_act), &oom);
    for (unsigned j = 0; !oom && j < B; j++)
        if (kern_act_init(&s->bact_dim[j], s->hp->dim) ||
            kern_act_init(&s->bact_q[j], s->q_dim) ||
            kern_act_init(&s->bact_ffn[j], s->hmax))
            oom = 1;
    if (oom) {
        batch_free(s);
        return -1;
    }
    s->batch_ready = 1;
    return 0;
}

static int batch_eligible(const eng_session *s)
{
    const fmt_hparams *hp = s->hp;
    return hp->combine_style == FMT_COMBINE_PARALLEL_SQRT2 && !hp->n_experts &&
           hp->ffn_dim && !s->trace && s->n_eff == hp->n_layers;
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
    if (ti->type == KERN_Q4_0 && (mv->rp >> ti->matrix & 1))
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

/* matvec_stream for m positions: out[matrix] + j*ld[matrix] receives
 * position j's sums.  Outputs must be zeroed by the caller. */
static void matmat_stream(eng_session *s, const eng_mv *mv, const kern_act *x,
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

/* bx[j] += mv x[j] for the m positions (mv has one matrix, `matrix`, whose
 * output is dim wide): the attention output and FFN down projections. */
static void matmat_residual(eng_session *s, const eng_mv *mv, uint8_t matrix,
                            const kern_act *x, unsigned m)
{
    uint32_t dim = s->hp->dim;
    float *out[FMT_NMATRIX] = { 0 };
    size_t ld[FMT_NMATRIX] = { 0 };
    memset(s->bo, 0, (size_t)m * dim * sizeof(float));
    out[matrix] = s->bo;
    ld[matrix] = dim;
    matmat_stream(s, mv, x, m, out, ld);
    for (unsigned j = 0; j < m; j++)
        add_to(s->bx + (size_t)j * dim, s->bo + (size_t)j * dim, dim);
}

/* m (<= ENG_BATCH) prompt tokens at positions n_past.. through every
 * layer; with want_logits, the logits of the last one. */
static void forward_batch(eng_session *s, const int32_t *tokens, unsigned m,
                          int want_logits)
{
    const fmt_hparams *hp = s->hp;
    const uint32_t dim = hp->dim, L = hp->n_layers, hid = hp->ffn_dim;
    const uint32_t pos0 = s->n_past;
    float *out[FMT_NMATRIX] = { 0 };
    size_t ld[FMT_NMATRIX] = { 0 };
    double pt = s->prof ? prof_now() : 0.0;
#define BMARK(l, st)                                                      \
    do {                                                                  \
        if (s->prof) {                                                    \
            pt = prof_layer_mark(s->prof, (l), (st), pt);                 \
            prof_layer_bytes(s->prof, (l), (st), s->mv_bytes);            \
        }                                                                 \
        s->mv_bytes = 0;                                                  \
    } while (0)
    s->mv_bytes = 0;

    for (unsigned j = 0; j < m; j++)
        embed(s, tokens[j], s->bx + (size_t)j * dim);
    for (uint32_t l = 0; l < L; l++) {
        const eng_layer *ly = &s->layers[l];
        const uint32_t qd = ly->q_dim, kvd = ly->kv_dim;
        prefetch_next(s, l);
        /* attention */
        for (unsigned j = 0; j < m; j++) {
            float *xb = s->bxb + (size_t)j * dim;
            rmsnorm(s, xb, s->bx + (size_t)j * dim, ly->attn_norm, dim);
            kern_act_set(&s->bact_dim[j], xb, dim, ly->qkv.need);
        }
        memset(s->bq, 0, (size_t)m * qd * sizeof(float));
        memset(s->bk, 0, (size_t)m * kvd * sizeof(float));
        memset(s->bv, 0, (size_t)m * kvd * sizeof(float));
        memset(out, 0, sizeof out);
        out[FMT_M_Q] = s->bq;
        out[FMT_M_K] = s->bk;
        out[FMT_M_V] = s->bv;
        ld[FMT_M_Q] = qd;
        ld[FMT_M_K] = ld[FMT_M_V] = kvd;
        matmat_stream(s, &ly->qkv, s->bact_dim, m, out, ld);
        for (unsigned j = 0; j < m; j++) {
            float *q = s->bq + (size_t)j * qd, *att = s->batt + (size_t)j * qd;
            float *k = s->bk + (size_t)j * kvd, *v = s->bv + (size_t)j * kvd;
            attn_qkv_post(s, ly, pos0 + j, q, k, v);
            attn_store_attend(s, ly, l, pos0 + j, q, k, v, att);
            kern_act_set(&s->bact_q[j], att, qd, ly->o.need);
        }
        matmat_residual(s, &ly->o, FMT_M_O, s->bact_q, m);
        BMARK(l, PROF_ST_ATTN);
        /* FFN */
        for (unsigned j = 0; j < m; j++) {
            float *xb = s->bxb + (size_t)j * dim;
            rmsnorm(s, xb, s->bx + (size_t)j * dim, ly->ffn_norm, dim);
            kern_act_set(&s->bact_dim[j], xb, dim, ly->gate_up.need);
        }
        memset(s->bh, 0, (size_t)m * s->hmax * sizeof(float));
        memset(s->bh2, 0, (size_t)m * s->hmax * sizeof(float));
        memset(out, 0, sizeof out);
        out[FMT_M_GATE] = s->bh;
        out[FMT_M_UP] = s->bh2;
        ld[FMT_M_GATE] = ld[FMT_M_UP] = s->hmax;
        matmat_stream(s, &ly->gate_up, s->bact_dim, m, out, ld);
        for (unsigned j = 0; j < m; j++) {
            float *g = s->bh + (size_t)j * s->hmax, *u = s->bh2 + (size_t)j * s->hmax;
            glu_act(s, g, u, hid);
            kern_act_set(&s->bact_ffn[j], g, hid, ly->down.need);
        }
        matmat_residual(s, &ly->down, FMT_M_DOWN, s->bact_ffn, m);
        BMARK(l, PROF_ST_FFN);
    }
#undef BMARK
    s->n_past += m;
    if (!want_logits)
        return;
    /* the LM head, for the last position only (forward()'s tail) */
    memcpy(s->x, s->bx + (size_t)(m - 1) * dim, dim * sizeof(float));
    rmsnorm(s, s->x, s->x, s->out_norm, dim);
    kern_act_set(&s->act_dim, s->x, dim, s->output.need);
    memset(s->logits, 0, hp->vocab_size * sizeof(float));
    memset(out, 0, sizeof out);
    out[FMT_M_OUTPUT] = s->logits;
    out[FMT_M_TOK_EMBD] = s->logits;
    matvec_stream(s, &s->output, &s->act_dim, out);
    if (hp->softcap > 0.0f)
        for (uint32_t i = 0; i < hp->vocab_size; i++)
            s->logits[i] = tanhf(s->logits[i] / hp->softcap) * hp->softcap;
}


/* Batched prefill of tokens[0..n), or 1 when the model's schedule (or
 * memory) does not allow it and the caller should go token by token.
 * Every token is checked before any is run. */
static int prefill_batched(eng_session *s, const int32_t *tokens, size_t n,
                           char *err, size_t errlen)
{
    if (n < 2 || !batch_eligible(s) || getenv("CFLOW_NO_BATCH") || batch_init(s))
        return 1;
    if (s->broken)
        return model_fault(s, err, errlen);
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= s->hp->vocab_size)
            return fail(err, errlen, ENG_EARG,
                        "token id %d is outside the %u-token vocabulary", tokens[i],
                        s->hp->vocab_size);
    for (size_t i = 0; i < n;) {
        if (s->n_past >= s->n_ctx)
            return fail(err, errlen, ENG_ECTX,
                        "context full: all %u positions are used", s->n_ctx);
        size_t m = n - i < ENG_BATCH ? n - i : ENG_BATCH;
        if (m > s->n_ctx - s->n_past)
            m = s->n_ctx - s->n_past;
        if (s->prof)
            prof_token_begin(s->prof);
        int rc = guarded_run(s, tokens + i, (unsigned)m, 1, i + m == n, err, errlen);
        if (rc)
            return rc;
        /* The profiler counts tokens: the chunk's time, bytes and counters
         * go on the record of its first position, the others get empty
         * records, so run totals and per-layer sums stay right. */
        if (s->prof) {
            prof_token_end(s->prof, PROF_PREFILL);
            for (size_t k = 1; k < m; k++) {
                prof_token_begin(s->prof);
                prof_token_end(s->prof, PROF_PREFILL);
            }
        }
        i += m;
    }
    return 0;
}

int eng_prefill(eng_session *s, const int32_t *tokens, size_t n, char *err,
                size_t errlen)
{
    double t0 = prof_now();
    int brc = prefill_batched(s, tokens, n, err, errlen);
    if (brc <= 0) {
        if (brc < 0)
            return brc;
        s->stats.prefill_s += prof_now() - t0;
        s->stats.n_prompt += n;
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        int rc = check_token(s, tokens[i], err, errlen);
        if (rc)
            return rc;
        if (s->prof)
            prof_token_begin(s->prof);
        if ((rc = guarded_forward(s, tokens[i], i + 1 == n, err, errlen)))
            return rc;
        if (s->xio_failed)
            return xio_error(s, err, errlen);
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
    if (s->pf) {                 /* the running prefetch thread's counts too */
        uint64_t lines, dropped;
        eng_pf_counts(s->pf, &lines, &dropped);
        st->pf_lines += lines;
        st->pf_dropped += dropped;
    }
}

void eng_set_trace(eng_session *s, eng_trace *t)
{
    s->trace = t;
    if (t)
        memset(t, 0, sizeof *t);
}

/* ---- expert I/O and prefetch: modes, switching, setup ------------------ */
static const char *const xio_names[] = { "mmap", "sync", "staged" };

const char *eng_expert_io_name(int mode)
{
    return mode >= 0 && mode < 3 ? xio_names[mode] : "?";
}

int eng_expert_io_from_name(const char *name)
{
    for (int i = 0; name && i < 3; i++)
        if (!strcmp(name, xio_names[i]))
            return i;
    return -1;
}

/* Staging for sync/staged: one slot per route and chosen expert (the ring
 * holds expert_delay + 1 routes of top_k experts), each as large as the
 * largest expert, and the rebased tile arrays of every slot. */
static int xio_open(eng_session *s, char *err, size_t errlen)
{
    const fmt_hparams *hp = s->hp;
    uint64_t max_len = 0;
    uint32_t max_t[2] = { 0, 0 };
    if (s->xio || !hp->n_experts)
        return 0;
    for (unsigned l = 0; l < hp->n_layers; l++)
        for (unsigned e = 0; s->layers[l].exp_gu && e < hp->n_experts; e++) {
            uint64_t off = 0, len = 0;   /* (per-layer geometry: no experts) */
            fmt_model_expert(s->model, l, e, NULL, NULL, &off, &len);
            if (len > max_len)
                max_len = len;
            if (s->layers[l].exp_gu[e].st->n_tiles > max_t[0])
                max_t[0] = s->layers[l].exp_gu[e].st->n_tiles;
            if (s->layers[l].exp_down[e].st->n_tiles > max_t[1])
                max_t[1] = s->layers[l].exp_down[e].st->n_tiles;
        }
    unsigned n = (hp->expert_delay + 1u) * hp->top_k;
    int rc = eng_xio_new(&s->xio, fmt_model_path(s->model), max_len, n, s->opts.io_readers,
                         s->opts.log, s->opts.log_ud, err, errlen);
    if (rc)
        return rc;
    s->stage = calloc(n, sizeof *s->stage);
    s->n_stage = n;
    for (unsigned k = 0; s->stage && k < n; k++)
        for (int w = 0; w < 2; w++)
            if (!(s->stage[k].t[w] = calloc(max_t[w] ? max_t[w] : 1, sizeof(fmt_tile))))
                goto oom;
    if (s->stage)
        return 0;
oom:
    snprintf(err, errlen, "%s: out of memory for expert staging", fmt_model_path(s->model));
    return ENG_ENOMEM;
}

int eng_set_expert_io(eng_session *s, int mode, char *err, size_t errlen)
{
    if (mode < ENG_XIO_MMAP || mode > ENG_XIO_STAGED)
        return fail(err, errlen, ENG_EARG, "expert I/O mode %d: use mmap, sync or staged", mode);
    if (mode != ENG_XIO_MMAP) {
        int rc = xio_open(s, err, errlen);
        if (rc)
            return rc;
    }
    s->xio_mode = mode;
    return 0;
}

int eng_expert_io(const eng_session *s) { return s->xio_mode; }

int eng_expert_io_direct(const eng_session *s)
{
    if (s->xio_mode == ENG_XIO_MMAP || !s->xio)
        return -1;
    return eng_xio_direct(s->xio);
}

int eng_set_prefetch(eng_session *s, int on)
{
    if (on && !s->pf) {
        if (!(s->pf = eng_pf_new()))
            return ENG_ENOMEM;
    } else if (!on && s->pf) {
        uint64_t lines, dropped;
        eng_pf_counts(s->pf, &lines, &dropped);
        s->stats.pf_lines += lines;
        s->stats.pf_dropped += dropped;
        eng_pf_free(s->pf);
        s->pf = NULL;
    }
    return 0;
}

int eng_prefetch(const eng_session *s) { return s->pf != NULL; }

/* eng_opts' expert I/O and prefetch, from the environment where they say
 * -1 (before the model is opened: --no-mmap leaves the expert banks
 * mapped when sync or staged I/O will read them). */
static int opts_from_env(eng_opts *o, char *err, size_t errlen)
{
    const char *v;
    if (o->expert_io < 0) {
        o->expert_io = ENG_XIO_MMAP;
        if ((v = getenv("CFLOW_EXPERT_IO")) && *v &&
            (o->expert_io = eng_expert_io_from_name(v)) < 0)
            return fail(err, errlen, ENG_EARG,
                        "CFLOW_EXPERT_IO='%s': use mmap, sync or staged", v);
    }
    if (o->prefetch < 0) {
        o->prefetch = 0;
        if ((v = getenv("CFLOW_PREFETCH")) && *v) {
            if (!strcmp(v, "on") || !strcmp(v, "1"))
                o->prefetch = 1;
            else if (strcmp(v, "off") && strcmp(v, "0"))
                return fail(err, errlen, ENG_EARG, "CFLOW_PREFETCH='%s': use on or off", v);
        }
    }
    return 0;
}

static int eng_io_setup(eng_session *s, char *err, size_t errlen)
{
    const fmt_hparams *hp = s->hp;
    s->route = calloc(hp->expert_delay + 1u, sizeof *s->route);
    if (!s->route)
        return fail(err, errlen, ENG_ENOMEM, "%s: out of memory", fmt_model_path(s->model));
    for (unsigned i = 0; i <= hp->expert_delay; i++) {
        s->route[i].layer = -1;
        if (!(s->route[i].xr = calloc(hp->dim ? hp->dim : 1, sizeof(float))))
            return fail(err, errlen, ENG_ENOMEM, "%s: out of memory", fmt_model_path(s->model));
    }
    int rc = eng_set_expert_io(s, s->opts.expert_io, err, errlen);
    if (rc)
        return rc;
    if (eng_set_prefetch(s, s->opts.prefetch))
        return fail(err, errlen, ENG_ENOMEM, "cannot start the prefetch thread");
    return 0;
}

static void eng_io_teardown(eng_session *s)
{
    eng_set_prefetch(s, 0);
    eng_xio_free(s->xio);        /* joins the readers: no read in flight */
    s->xio = NULL;
    for (unsigned k = 0; s->stage && k < s->n_stage; k++) {
        free(s->stage[k].t[0]);
        free(s->stage[k].t[1]);
    }
    free(s->stage);
    s->stage = NULL;
    for (unsigned i = 0; s->route && i <= s->hp->expert_delay; i++)
        free(s->route[i].xr);
    free(s->route);
    s->route = NULL;
}

/* A failed expert read of the last token, as eng_decode's error. */
static int xio_error(eng_session *s, char *err, size_t errlen)
{
    s->xio_failed = 0;
    return fail(err, errlen, ENG_EIO, "%s", s->xio_err);
}
