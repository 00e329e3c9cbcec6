/*
 * eng_session.c — a session's life: open a model in named phases, close
 * it, and the accessors, threads, profiler and statistics around it.
 *
 * The session struct lives in eng_impl.h, which says what each buffer
 * holds; the forward pass that uses them is eng_forward.c (the walk) and
 * eng_blocks.c (its blocks).  eng_open runs
 * these phases in order, each filling its part of the session:
 *
 *   open_model      the options (environment defaults for expert I/O and
 *                   prefetch), the model file and its tokenizer;
 *   size_geometry   the widest q, kv and head rows over the layers
 *                   (per-layer geometry);
 *   bind_layers     per layer its tile streams prepared for mat-vec
 *                   (eng_mv), vectors, geometry and experts, and the
 *                   weight bytes one token streams;
 *   bind_head       the embedding, the LM head and the worker pool;
 *   alloc_buffers   the decode scratch, and the session's own sequence:
 *                   its KV cache for the context asked for (eng_seq_new);
 *   bind_rope       RoPE frequencies, shared or per layer;
 *   eng_io_setup    the expert route ring, I/O mode and prefetch (eng_io.c).
 *
 * A phase that fails writes one line into err and returns an ENG_E* code;
 * eng_open then closes the half-built session (eng_close accepts one at
 * any phase: every pointer starts NULL).  The format module's FMT_E*
 * codes become ENG_E* codes through eng_code_from_fmt, never by accident
 * of equal values.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/eng_impl.h"
#include "kernels/kern.h"
#include "prof/prof.h"

void eng_opts_default(eng_opts *o)
{
    memset(o, 0, sizeof *o);
    o->kv_f16 = -1;
    o->prefill_attn = -1;
    o->expert_io = -1;   /* $CFLOW_EXPERT_IO, else mmap (eng_io_setup) */
    o->prefetch = -1;    /* $CFLOW_PREFETCH, else off */
    o->expert_cache = -1; /* $CFLOW_EXPERT_CACHE, else none */
    o->expert_ahead = -1; /* $CFLOW_EXPERT_AHEAD, else on */
    o->no_mmap = -1;      /* read in where it fits (open_model, below) */
}

uint64_t eng_weights_copied(const eng_session *s)
{
    return fmt_model_copied_bytes(s->model);
}

/* Whether llama.cpp is the model's peer: it was converted from GGUF, or it is
 * of a family llama.cpp defines (cflow.peer, fmt_family.c). */
static int from_gguf(const fmt_model *m)
{
    size_t len = 0, plen = 0;
    const char *src = fmt_kv_get_str(fmt_model_kv(m), "cflow.source", &len);
    /* the families llama.cpp defines: their peer whatever the source */
    const char *peer = fmt_kv_get_str(fmt_model_kv(m), "cflow.peer", &plen);
    return (src && len == 4 && !memcmp(src, "gguf", 4)) ||
           (peer && plen == 9 && !memcmp(peer, "llama.cpp", 9));
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

/* The format module's codes as the engine's.  The numbers are the same
 * on purpose (a front end printing either sees one numbering), but the
 * mapping is written out so that neither enum can drift silently. */
_Static_assert((int)ENG_OK == (int)FMT_OK && (int)ENG_EIO == (int)FMT_EIO &&
               (int)ENG_EFORMAT == (int)FMT_EFORMAT &&
               (int)ENG_EUNSUP == (int)FMT_EUNSUP &&
               (int)ENG_ENOMEM == (int)FMT_ENOMEM && (int)ENG_EARG == (int)FMT_EARG,
               "ENG_E* and FMT_E* codes must keep the same numbers");

static int eng_code_from_fmt(int rc)
{
    switch (rc) {
    case FMT_OK:      return ENG_OK;
    case FMT_EIO:     return ENG_EIO;
    case FMT_EFORMAT: return ENG_EFORMAT;
    case FMT_EUNSUP:  return ENG_EUNSUP;
    case FMT_ENOMEM:  return ENG_ENOMEM;
    case FMT_EARG:    return ENG_EARG;
    default:          return ENG_EFORMAT;
    }
}

/* Phase: the options, the model file, its tokenizer, the arithmetic. */
static int open_model(eng_session *s, const char *model_path, const eng_opts *o,
                      char *err, size_t errlen)
{
    int rc;
    if (o)
        s->opts = *o;
    else
        eng_opts_default(&s->opts);
    if ((rc = eng_io_opts_from_env(&s->opts, err, errlen)))
        return rc;
    if (s->opts.expert_io == ENG_XIO_AUTO) {  /* before the open: --no-mmap's flags */
        s->io.by_auto = 1;
        s->opts.expert_io = eng_io_auto(&s->opts, model_path, 0);
    }
    /* Where the weights live.  Decode reads every weight once a token, and
     * reads them faster from anonymous memory with transparent huge pages
     * than from the file's 4 KiB page-cache pages (fewer TLB misses;
     * docs/perf-log/2026-12-01.md and 2026-12-04.md), so auto copies the
     * file in when it takes at most half the free memory, leaving the
     * page cache's copy and the rest room; up to four fifths of it, it
     * copies the file and drops its cached pages behind the copy
     * (FMT_OPEN_DROP_CACHE): on gpt-oss-20b (12.1 GB of MXFP4 experts and
     * Q8_0 on a 23 GiB machine), whose experts a token picks from all
     * over the file, decode ran 2.4x faster copied than mapped
     * (docs/perf-log/2026-12-07.md).  The fifth left is the KV cache's and
     * the rest of the system's.  --no-mmap copies the weights;
     * the expert banks stay mapped when sync or staged I/O reads them from
     * the file (switching to mmap later still finds them in place) */
    unsigned drop = 0;
    if (s->opts.no_mmap < 0) {
        s->opts.no_mmap = eng_file_fits(model_path, 1, 2, 0) == 1;
        if (!s->opts.no_mmap && eng_file_fits(model_path, 4, 5, 0) == 1)
            s->opts.no_mmap = 1, drop = FMT_OPEN_DROP_CACHE;
    }
    /* sync and staged read the experts with O_DIRECT and check each
     * expert's bytes as they arrive (eng_fetch.c): the open lays the bank
     * out without reading it (FMT_OPEN_LAZY_EXPERTS), so the first token
     * waits for the dense weights only, not for a pass over the whole
     * file, which took most of a large model's time to its first token
     * (docs/perf-log/2026-12-04.md, 21:50 UTC; 2026-12-05.md, 12:35 UTC) */
    const int direct = s->opts.expert_io != ENG_XIO_MMAP;
    rc = fmt_model_open_ex(&s->model, model_path,
                           (!s->opts.no_mmap ? 0
                            : !direct ? FMT_OPEN_READ
                            : FMT_OPEN_READ | FMT_OPEN_MAP_EXPERTS) | drop |
                           (direct ? FMT_OPEN_LAZY_EXPERTS : 0u), err, errlen);
    if (rc)
        return eng_code_from_fmt(rc);
    s->hp = fmt_model_hparams(s->model);
    rc = eng_tok_load(&s->tok, fmt_model_kv(s->model), err, errlen);
    if (rc) {
        /* name the model file: the tokenizer lives in its metadata */
        char tmp[256];
        snprintf(tmp, sizeof tmp, "%s", err);
        return eng_fail(err, errlen, rc, "%s: %s", model_path, tmp);
    }
    if (eng_tok_n_vocab(s->tok) > s->hp->vocab_size)
        return eng_fail(err, errlen, ENG_EFORMAT,
                        "%s: tokenizer has %u tokens but the model only %u",
                        model_path, eng_tok_n_vocab(s->tok), s->hp->vocab_size);
    s->ops = kern_init();
    s->ggml = from_gguf(s->model);
    return 0;
}

/* Phase: the widest rows over the layers. */
static void size_geometry(eng_session *s)
{
    const fmt_hparams *hp = s->hp;
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
    s->n_eff = hp->combine_style == FMT_COMBINE_FIXED_POINT
                   ? hp->n_layers * hp->iterations : hp->n_layers;
}

/* Layer l's routed experts: router, norm and each expert's two streams.
 * Per-layer geometry may leave a layer without experts. */
static int bind_experts(eng_session *s, unsigned l, const char *model_path,
                        char *err, size_t errlen)
{
    const fmt_hparams *hp = s->hp;
    eng_layer *ly = &s->layers[l];
    int oom = 0;
    if (!fmt_layer_moe(hp, ly->g, l))
        return 0;
    ly->moe_norm = fmt_model_vec(s->model, l, FMT_S_MOE_NORM, NULL);
    ly->router = fmt_model_vec(s->model, l, FMT_S_ROUTER, NULL);
    ly->exp_gu = eng_xalloc(hp->n_experts * sizeof *ly->exp_gu, &oom);
    ly->exp_down = eng_xalloc(hp->n_experts * sizeof *ly->exp_down, &oom);
    for (unsigned e = 0; !oom && e < hp->n_experts; e++) {
        const fmt_stream *gu = NULL, *dn = NULL;
        if (fmt_model_expert(s->model, l, e, &gu, &dn, NULL, NULL) || !gu || !dn ||
            !ly->router || !ly->moe_norm)
            return eng_fail(err, errlen, ENG_EFORMAT, "%s: layer %u has no expert %u",
                            model_path, l, e);
        if (eng_mv_init(&ly->exp_gu[e], gu, s->ggml) ||
            eng_mv_init(&ly->exp_down[e], dn, s->ggml))
            oom = 1;
        else
            ly->bank_bytes += gu->length + dn->length;
    }
    if (oom)
        return eng_fail(err, errlen, ENG_ENOMEM, "%s: out of memory", model_path);
    s->stats.expert_bank_bytes += ly->bank_bytes;
    s->bytes_per_token += ly->bank_bytes / hp->n_experts * hp->top_k;
    return 0;
}

/* Phase: every layer's streams, vectors and geometry, and the weight
 * bytes one token streams through them. */
static int bind_layers(eng_session *s, const char *model_path, char *err,
                       size_t errlen)
{
    const fmt_hparams *hp = s->hp;
    int oom = 0, rc;
    s->layers = eng_xalloc(hp->n_layers * sizeof *s->layers, &oom);
    if (oom)
        return eng_fail(err, errlen, ENG_ENOMEM, "%s: out of memory", model_path);
    for (unsigned l = 0; l < hp->n_layers; l++) {
        eng_layer *ly = &s->layers[l];
        const int dense = fmt_layer_dense(hp, l);
        if (eng_mv_init(&ly->qkv, fmt_model_stream(s->model, l, FMT_S_Q), s->ggml) ||
            eng_mv_init(&ly->o, fmt_model_stream(s->model, l, FMT_S_O), s->ggml) ||
            (dense &&
             (eng_mv_init(&ly->gate_up, fmt_model_stream(s->model, l, FMT_S_GATE), s->ggml) ||
              eng_mv_init(&ly->down, fmt_model_stream(s->model, l, FMT_S_DOWN), s->ggml))))
            return eng_fail(err, errlen, ENG_ENOMEM, "%s: out of memory", model_path);
        ly->attn_norm = fmt_model_vec(s->model, l, FMT_S_ATTN_NORM, NULL);
        ly->ffn_norm = fmt_model_vec(s->model, l, FMT_S_FFN_NORM, NULL);
        ly->qkv_bias = fmt_model_vec(s->model, l, FMT_S_QKV_BIAS, NULL);
        ly->q_norm = fmt_model_vec(s->model, l, FMT_S_Q_NORM, NULL);
        ly->k_norm = fmt_model_vec(s->model, l, FMT_S_K_NORM, NULL);
        ly->g = fmt_model_layer_geom(s->model, l);
        ly->q_dim = ly->g->n_heads * ly->g->head_dim;
        ly->kv_dim = ly->g->n_kv_heads * ly->g->head_dim;
        s->bytes_per_token += ly->qkv.st->length + ly->o.st->length;
        /* DelayedSum skips the FFN of the first dense_delay layers (its
         * input would come from before layer 0): nothing of it streams */
        if (dense && !(hp->combine_style == FMT_COMBINE_DELAYED_SUM &&
                       l < hp->dense_delay))
            s->bytes_per_token += ly->gate_up.st->length + ly->down.st->length;
        const fmt_stream *sg = fmt_model_stream(s->model, l, FMT_S_SH_GATE),
                         *sd = fmt_model_stream(s->model, l, FMT_S_SH_DOWN);
        if (sg && sd)
            s->bytes_per_token += sg->length + sd->length;   /* the shared experts */
        if ((rc = bind_experts(s, l, model_path, err, errlen)))
            return rc;
    }
    return 0;
}

/* Phase: the embedding, the LM head and the worker threads. */
static int bind_head(eng_session *s, const char *model_path, char *err,
                     size_t errlen)
{
    const fmt_hparams *hp = s->hp;
    unsigned L = hp->n_layers;
    s->embd = fmt_model_stream(s->model, L, FMT_S_TOK_EMBD);
    if (eng_mv_init(&s->output, (hp->flags & FMT_FLAG_TIED)
                                ? s->embd
                                : fmt_model_stream(s->model, L, FMT_S_OUTPUT),
                s->ggml))
        return eng_fail(err, errlen, ENG_ENOMEM, "%s: out of memory", model_path);
    s->out_norm = fmt_model_vec(s->model, L, FMT_S_OUT_NORM, NULL);
    s->embd_col_tiles = (hp->dim + KERN_TILE_COLS - 1) / KERN_TILE_COLS;
    s->bytes_per_token += s->output.st->length;
    /* a FixedPoint block is read again by each of its applications */
    if (s->n_eff > L) {
        uint64_t head = s->output.st->length;
        s->bytes_per_token = (s->bytes_per_token - head) * hp->iterations + head;
    }
    int n_threads = eng_default_threads(s->opts.n_threads);
    if (!(s->pool = eng_pool_new(n_threads)))
        return eng_fail(err, errlen, ENG_ENOMEM,
                        "%s: cannot start %d worker threads%s: out of memory or over "
                        "the process's limits; ask for fewer threads", model_path,
                        n_threads, s->opts.n_threads > 0 ? "" : " (one per core)");
    return 0;
}

/* Phase: the decode scratch (eng_blocks.c), the routing counts, the RoPE
 * tables and the session's own sequence (its KV cache) for the context
 * asked for. */
static int alloc_buffers(eng_session *s, const char *model_path, char *err,
                         size_t errlen)
{
    const fmt_hparams *hp = s->hp;
    int oom = 0;
    s->hmax = hp->ffn_dim > hp->expert_ffn_dim ? hp->ffn_dim : hp->expert_ffn_dim;
    if (hp->shared_ffn_dim > s->hmax)
        s->hmax = hp->shared_ffn_dim;    /* the shared experts' FFN (DeepSeek) */
    s->kv_f16 = s->opts.kv_f16 < 0 ? s->ggml : s->opts.kv_f16 != 0;
    s->routed = eng_xalloc((size_t)hp->n_layers * hp->n_experts * sizeof(uint64_t), &oom);
    s->inv_freq = eng_xalloc(hp->head_dim / 2 * sizeof(float), &oom);
    if (s->ggml && (hp->flags & FMT_FLAG_ROPE_LLAMA3))
        s->rope_ff = eng_xalloc(hp->head_dim / 2 * sizeof(float), &oom);
    if (oom || eng_scratch_init(s))
        return eng_fail(err, errlen, ENG_ENOMEM, "%s: out of memory", model_path);
    /* Without a request the context stops at 4096 positions: a header may
     * claim millions, and the cache must not grow out of proportion. */
    uint32_t n_ctx = s->opts.n_ctx ? s->opts.n_ctx
                                   : (hp->max_seq < 4096 ? hp->max_seq : 4096);
    if (n_ctx > hp->max_seq)
        n_ctx = hp->max_seq;
    return eng_seq_new(s, n_ctx, &s->seq, err, errlen);
}

/* Phase: RoPE frequencies, shared, or per layer where a layer rotates
 * differently (partial rotation, another base). */
static int bind_rope(eng_session *s, const char *model_path, char *err,
                     size_t errlen)
{
    const fmt_hparams *hp = s->hp;
    rope_freqs(hp, s->inv_freq, hp->head_dim);
    for (unsigned l = 0; l < hp->n_layers; l++) {
        eng_layer *ly = &s->layers[l];
        const fmt_layer_geom *g = ly->g;
        if (g->rope_dims == hp->head_dim && g->rope_theta == hp->rope_theta) {
            ly->inv_freq = s->inv_freq;
            continue;
        }
        ly->inv_freq = calloc(g->rope_dims / 2 + 1u, sizeof(float));
        if (!ly->inv_freq)
            return eng_fail(err, errlen, ENG_ENOMEM, "%s: out of memory", model_path);
        ly->own_freq = 1;
        for (unsigned i = 0; i < g->rope_dims / 2; i++)
            ly->inv_freq[i] = 1.0f / powf(g->rope_theta,
                                          (float)(2 * i) / (float)g->rope_dims);
    }
    if (s->rope_ff)
        rope_divisors(hp, s->rope_ff, hp->head_dim);
    /* the families' parts and each layer's RoPE beyond its base */
    eng_family_session(s);
    for (unsigned l = 0; l < hp->n_layers; l++)
        if (eng_family_layer(s, l))
            return eng_fail(err, errlen, ENG_ENOMEM, "%s: out of memory", model_path);
    return 0;
}

int eng_open(eng_session **out, const char *model_path, const eng_opts *o,
             char *err, size_t errlen)
{
    eng_session *s;
    int rc;

    *out = NULL;
    if ((rc = eng_env_check(err, errlen)))
        return rc;
    eng_guard_install();   /* a truncated model file: an error, not a crash */
    s = calloc(1, sizeof *s);
    if (!s)
        return eng_fail(err, errlen, ENG_ENOMEM, "%s: out of memory", model_path);
    if (!(rc = open_model(s, model_path, o, err, errlen))) {
        size_geometry(s);
        if (!(rc = bind_layers(s, model_path, err, errlen)) &&
            !(rc = bind_head(s, model_path, err, errlen)) &&
            !(rc = alloc_buffers(s, model_path, err, errlen)) &&
            !(rc = bind_rope(s, model_path, err, errlen)) &&
            !(rc = eng_moe_ahead_setup(s, err, errlen)))
            rc = eng_io_setup(s, err, errlen);
    }
    if (rc) {
        eng_close(s);
        return rc;
    }
    *out = s;
    return 0;
}

void eng_close(eng_session *s)
{
    if (!s)
        return;
    eng_io_teardown(s);
    eng_moe_ahead_free(s);
    while (s->seqs)
        eng_seq_free(s->seqs);
    eng_scratch_free(s);
    eng_batch_free(s);
    free(s->inv_freq); free(s->rope_ff); free(s->routed);
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
        free(s->layers[l].sh_gu.unit);
        free(s->layers[l].sh_down.unit);
        eng_mla_free(ly);
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

const char *eng_model_meta(const eng_session *s, const char *key, size_t *len)
{
    return fmt_kv_get_str(fmt_model_kv(s->model), key, len);
}
int eng_kv_f16(const eng_session *s) { return s->kv_f16; }
uint32_t eng_n_ctx(const eng_session *s) { return s->seq->n_ctx; }
uint32_t eng_n_past(const eng_session *s) { return s->seq->n_past; }
float *eng_logits(eng_session *s) { return s->seq->logits; }

const fmt_model *eng_model(const eng_session *s) { return s->model; }

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
        eng_pool_run_all(s->pool, prof_attach_run, s->prof);
}

/* The critical-path model (fmt_critical_path; eq. 4.23 of the
 * Pipeline-Native Transformers report) per stored
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
    if (fmt_critical_path(s->model, 0.0, 0, cl, n, &tot) == 0) {
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

void eng_get_stats(const eng_session *s, eng_stats *st)
{
    *st = s->stats;
    st->bytes_per_token = s->bytes_per_token;
    if (s->io.pf) {                 /* the running prefetch thread's counts too */
        uint64_t lines, dropped;
        eng_pf_counts(s->io.pf, &lines, &dropped);
        st->pf_lines += lines;
        st->pf_dropped += dropped;
    }
    if (s->io.xio)
        eng_xio_hits(s->io.xio, &st->xio_hits, &st->xio_misses, &st->xio_depth_s);
    st->xio_cache_bytes = s->io.cache_bytes;
    eng_moe_ahead_stats(s, st);
}

void eng_set_trace(eng_session *s, eng_trace *t)
{
    s->trace = t;
    if (t)
        memset(t, 0, sizeof *t);
}
