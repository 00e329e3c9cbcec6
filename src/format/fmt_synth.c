/*
 * fmt_synth.c — random-weight source models for named presets (the
 * presets themselves are in fmt_synth_preset.c).
 *
 * `cflow synth` feeds these to the ordinary .cflow writer, so a synthetic
 * model goes through exactly the path a converted one does.  The report's
 * six pipeline-native architectures share its geometry (d 512, 6 layers, 8
 * heads, dense FFN 2048, 8 experts, top-2, expert FFN 512); only the header
 * fields that drive the schedule differ.  Weights are drawn from a seeded
 * generator (same seed, same file on every machine), roughly N(0, 0.02);
 * norms are 1.  The vocabulary is a small synthetic SentencePiece one (byte
 * fallback plus single characters) so the models can be run and tokenised.
 *
 * The weights are drawn lazily, so a synthetic source costs memory only for
 * what the writer is tiling now.  One anonymous MAP_NORESERVE reservation,
 * registered as the source's map (fmt_src_close unmaps it like any file),
 * holds at its start the generator table (synth_hdr: per tensor its byte
 * offset, size, the index of its first draw in the seeded stream, its fill
 * and sd) and after it every tensor at a page boundary, untouched until
 * the source's fill (synth_fill) draws a byte range of it.  The stream's
 * (fmt_splitmix64) state after k draws is seed + k * its gamma, so any
 * range is drawn by jumping straight to its first draw: the bytes are
 * those of drawing every tensor in order.
 * The writer hands pages back (MADV_DONTNEED) once tiled; tensors never
 * share a page, so that never drops a live one.
 * --routing zipf (fmt_synth_route.c) patches drawn ranges as they are
 * filled: one residual dimension made constant, read only by the routers;
 * and so that tokens route by token, draws the embedding with sd
 * FMT_SYNTH_ZIPF_EMBD_SD and adds an untied output head at the end of the
 * stream (a uniform file stays tied, byte for byte what it was).
 *
 * "The report" (with its section numbers) is the Pipeline-Native
 * Transformers report.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "format/cflow_format.h"
#include "format/fmt_impl.h"

/* Irwin-Hall of 4 uniforms: close enough to a normal, cheap, exact. */
static float next_normal(uint64_t *s, float sd)
{
    float acc = 0.0f;
    for (int i = 0; i < 4; i++)
        acc += (float)(fmt_splitmix64(s) >> 40) * (1.0f / 16777216.0f);
    return (acc - 2.0f) * sd * 1.7320508f;
}


/* One tensor's generator: bytes [off, off + nbytes) of the reservation are
 * f32 values, element i the draws draw0 + 4i .. + 3 (sd > 0) or fill;
 * with --routing zipf, then patched by rule (FMT_SR_*, fmt_synth_route.c)
 * as a [ne1][ne0] matrix (stacked experts: more of them) of layer. */
typedef struct synth_gen {
    uint64_t off, nbytes, draw0;
    float    fill, sd;
    uint64_t ne0, ne1;
    int      rule;
    unsigned layer;
} synth_gen;

/* The reservation's first bytes. */
typedef struct synth_hdr {
    uint64_t  seed;
    float     zipf;         /* --routing zipf:S, 0 uniform */
    uint32_t  dim, n_exp;
    size_t    n;            /* tensors in g[] */
    synth_gen g[];          /* [n], in increasing off */
} synth_hdr;

typedef struct synth_ctx {
    fmt_src   *s;
    uint8_t   *base;
    synth_hdr *hdr;
    size_t     used, cap, max_tensors, page;
    uint64_t   draws;       /* draws of the seeded stream so far */
    char      *err;
    size_t     errlen;
} synth_ctx;

static int add(synth_ctx *c, const char *name, unsigned ndim, uint64_t n0,
               uint64_t n1, uint64_t n2, float fill, float sd)
{
    uint64_t ne[4] = { n0, n1, n2, 1 };
    uint64_t n = n0 * n1 * n2;
    if (c->hdr->n >= c->max_tensors || c->used + n * sizeof(float) > c->cap) {
        fmt_err(c->err, c->errlen, "%s: tensor %s outside the reservation",
                c->s->path, name);
        return FMT_EFORMAT;
    }
    synth_gen *g = &c->hdr->g[c->hdr->n++];
    g->off = c->used;
    g->nbytes = n * sizeof(float);
    g->draw0 = c->draws;
    g->fill = fill;
    g->sd = sd;
    g->ne0 = n0;
    g->ne1 = n1;
    g->rule = c->hdr->zipf > 0 ? fmt_synth_rule(name, &g->layer) : FMT_SR_NONE;
    if (sd > 0)
        c->draws += 4 * n;
    c->used += (n * sizeof(float) + c->page - 1) / c->page * c->page;
    return fmt_src_add_tensor(c->s, name, FMT_DT_F32, ndim, ne, c->base + g->off,
                              n * sizeof(float), c->err, c->errlen);
}

/* --routing zipf: elements [i0, i0 + cnt) of g's tensor, drawn into v,
 * patched (fmt_synth_route.c): the constant dimension z = dim - 1. */
static void synth_patch(const synth_hdr *h, const synth_gen *g, float *v, uint64_t i0,
                        uint64_t cnt)
{
    const uint64_t z = h->dim - 1;
    for (uint64_t i = i0; i < i0 + cnt; i++) {
        uint64_t col = i % g->ne0, row = i / g->ne0;
        float *p = &v[i - i0];
        switch (g->rule) {
        case FMT_SR_CONST:  if (col == z) *p = FMT_SYNTH_ZC(h->dim); break;
        case FMT_SR_COL0:   if (col == z) *p = 0.0f; break;
        case FMT_SR_ROW0:   if (row % g->ne1 == z) *p = 0.0f; break;
        case FMT_SR_ROUTER:
            if (col == z)
                *p = fmt_synth_zipf_bias(h->seed, g->layer, (unsigned)row, h->n_exp, h->zipf);
            break;
        default: return;
        }
    }
}

/* fmt_src.fill: draw bytes [p, p + n) of one tensor (whole f32 values). */
static int synth_fill(const fmt_src *s, const void *p, uint64_t n)
{
    if (!s->kind || strcmp(s->kind, "synth") || !s->n_maps)
        return 0;
    const uint8_t *base = s->maps[0].p;
    const synth_hdr *h = (const synth_hdr *)(const void *)base;
    uint64_t off = (uint64_t)((const uint8_t *)p - base);
    size_t lo = 0, hi = h->n;
    while (hi - lo > 1) { /* the last tensor starting at or before off */
        size_t mid = (lo + hi) / 2;
        if (h->g[mid].off <= off)
            lo = mid;
        else
            hi = mid;
    }
    const synth_gen *g = &h->g[lo];
    if (h->n == 0 || off < g->off || off + n > g->off + g->nbytes ||
        (off - g->off) % sizeof(float) || n % sizeof(float))
        return -1;
    float *v = (float *)(void *)(uintptr_t)p;
    uint64_t i0 = (off - g->off) / sizeof(float), cnt = n / sizeof(float);
    uint64_t rng = h->seed + (g->draw0 + 4 * i0) * FMT_SPLITMIX64_GAMMA;
    for (uint64_t i = 0; i < cnt; i++)
        v[i] = g->sd > 0 ? next_normal(&rng, g->sd) : g->fill;
    if (g->rule != FMT_SR_NONE)
        synth_patch(h, g, v, i0, cnt);
    return 0;
}

/* Lay out every tensor of the preset in c->s->hp in the reservation, in
 * the order of the seeded stream, and register each as a view. */
static int synth_tensors(synth_ctx *c)
{
    fmt_src *s = c->s;
    const fmt_hparams *p = &s->hp;
    uint64_t d = p->dim;
    int rc;
    char nm[96];
    const float sd = 0.02f;
    const float esd = c->hdr->zipf > 0 ? FMT_SYNTH_ZIPF_EMBD_SD : sd;
    if ((rc = add(c, "token_embd", 2, d, p->vocab_size, 1, 0, esd)) ||
        (rc = add(c, "output_norm", 1, d, 1, 1, 1.0f, 0)))
        return rc;
    for (unsigned l = 0; l < p->n_layers; l++) {
        fmt_layer_geom lg;
        fmt_src_layer_geom(s, l, &lg);
        uint64_t ql = (uint64_t)lg.n_heads * lg.head_dim;
        uint64_t kvl = (uint64_t)lg.n_kv_heads * lg.head_dim;
        int no_exp = (lg.flags & FMT_LG_NO_EXPERTS) != 0;
#define T(suffix, nd, a, b, cc, fill, s_) \
        snprintf(nm, sizeof nm, "blk.%u." suffix, l); \
        if ((rc = add(c, nm, nd, a, b, cc, fill, s_))) return rc;
        T("attn_norm", 1, d, 1, 1, 1.0f, 0);
        T("attn_q", 2, d, ql, 1, 0, sd);
        T("attn_k", 2, d, kvl, 1, 0, sd);
        if (!(lg.flags & FMT_LG_KV_SHARED)) {
            T("attn_v", 2, d, kvl, 1, 0, sd);
        }
        T("attn_output", 2, ql, d, 1, 0, sd);
        T("ffn_norm", 1, d, 1, 1, 1.0f, 0);
        if (p->ffn_dim) {
            T("ffn_gate", 2, d, p->ffn_dim, 1, 0, sd);
            T("ffn_up", 2, d, p->ffn_dim, 1, 0, sd);
            T("ffn_down", 2, p->ffn_dim, d, 1, 0, sd);
        }
        if (p->n_experts && !no_exp) {
            T("moe_norm", 1, d, 1, 1, 1.0f, 0);
            T("ffn_gate_inp", 2, d, p->n_experts, 1, 0, 0.2f);
            T("ffn_gate_exps", 3, d, p->expert_ffn_dim, p->n_experts, 0, sd);
            T("ffn_up_exps", 3, d, p->expert_ffn_dim, p->n_experts, 0, sd);
            T("ffn_down_exps", 3, p->expert_ffn_dim, d, p->n_experts, 0, sd);
        }
#undef T
    }
    /* zipf: an untied head, last in the stream so every weight before it
     * is drawn where the uniform file draws it (tied to an embedding this
     * large, the head would echo its input token: fmt_synth_route.c) */
    if (c->hdr->zipf > 0 && (rc = add(c, "output", 2, d, p->vocab_size, 1, 0, sd)))
        return rc;
    return 0;
}

/* Bytes of f32 weights the preset in s->hp needs (untied: with an output
 * head): an upper bound over both layer kinds when the layers have their
 * own geometry. */
static uint64_t synth_bytes(const fmt_src *s, int untied)
{
    const fmt_hparams *h = &s->hp;
    uint64_t d = h->dim, q = (uint64_t)h->n_heads * h->head_dim,
             kv = (uint64_t)h->n_kv_heads * h->head_dim;
    for (unsigned l = 0; s->lgeom && l < h->n_layers; l++) {
        const fmt_layer_geom *g = &s->lgeom[l];
        if ((uint64_t)g->n_heads * g->head_dim > q)
            q = (uint64_t)g->n_heads * g->head_dim;
        if ((uint64_t)g->n_kv_heads * g->head_dim > kv)
            kv = (uint64_t)g->n_kv_heads * g->head_dim;
    }
    uint64_t per_layer = 3 * d + q * d + 2 * kv * d + d * q + 3 * d * h->ffn_dim +
                         (uint64_t)h->n_experts * (d + 3 * d * h->expert_ffn_dim);
    /* the embedding, the output norm and, for zipf, an untied head */
    return ((untied ? 2 : 1) * (uint64_t)h->vocab_size * d + d +
            per_layer * h->n_layers) * sizeof(float);
}

/* Tensors synth_tensors adds at most: three globals, 15 per layer. */
static size_t synth_max_tensors(const fmt_src *s)
{
    return 3 + (size_t)s->hp.n_layers * 16;
}

int fmt_synth_open(fmt_src **out, const char *name, uint64_t seed, float zipf,
                   char *err, size_t errlen)
{
    fmt_src *s;
    int rc;
    *out = NULL;
    if (fmt_synth_bench_find(name)) /* real geometry: Q4_0 through a GGUF */
        return fmt_synth_bench_open(out, name, seed, zipf, err, errlen);
    s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(name)) || !(s->maps = calloc(1, sizeof *s->maps))) {
        free(s ? s->path : NULL);
        free(s);
        fmt_err(err, errlen, "%s: out of memory", name);
        return FMT_ENOMEM;
    }
    s->kind = "synth";
    s->fill = synth_fill;
    if ((rc = fmt_synth_geometry(name, &s->hp, &s->lgeom, err, errlen)))
        goto fail;
    const fmt_hparams *p = &s->hp;
    uint64_t total = synth_bytes(s, zipf > 0);
    /* the tiled output of more f32 weights than this is not a test model,
     * unless the preset is a benchmark model meant to be written at its
     * size (the weights are drawn page by page as the writer tiles them,
     * so memory stays small either way; the time is the draws') */
    if (total > ((uint64_t)8 << 30) && !fmt_synth_at_scale(name)) {
        fmt_err(err, errlen, "%s: %.1f GiB of f32 weights is too large to "
                "synthesise (cflow inspect --critical-path --bytes-per-param 0.5 "
                "%s works from its geometry alone)", name,
                (double)total / (1 << 30), name);
        rc = FMT_EUNSUP;
        goto fail;
    }
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t nt = synth_max_tensors(s);
    size_t head = (sizeof(synth_hdr) + nt * sizeof(synth_gen) + page - 1) / page * page;
    /* each tensor rounded up to its own pages */
    uint64_t span = head + total + (uint64_t)nt * page;
    void *mem = mmap(NULL, span, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) {
        fmt_err(err, errlen, "%s: cannot reserve %llu bytes", name,
                (unsigned long long)span);
        rc = FMT_ENOMEM;
        goto fail;
    }
    s->maps[0].p = mem;
    s->maps[0].n = span;
    s->n_maps = 1;

    synth_ctx c = { s, mem, mem, head, span, nt, page, 0, err, errlen };
    c.hdr->seed = seed ? seed : 0x5eedull;
    c.hdr->zipf = zipf > 0 ? zipf : 0.0f;
    c.hdr->dim = p->dim;
    c.hdr->n_exp = p->n_experts;
    if (zipf > 0 && (p->n_experts == 0 || p->n_experts > FMT_SYNTH_MAX_EXP)) {
        fmt_err(err, errlen, "%s: --routing zipf needs a preset with 1 to %u experts, "
                "not %u", name, FMT_SYNTH_MAX_EXP, p->n_experts);
        rc = FMT_EARG;
        goto fail;
    }
    if ((rc = synth_tensors(&c)))
        goto fail;
    s->kv_own = fmt_kv_new();
    if (!s->kv_own || fmt_synth_vocab(s->kv_own, p->vocab_size) ||
        fmt_kv_set_str(s->kv_own, "general.name", name, strlen(name)) ||
        fmt_synth_routing_kv(s->kv_own, zipf)) {
        fmt_err(err, errlen, "%s: out of memory", name);
        rc = FMT_ENOMEM;
        goto fail;
    }
    s->kv = s->kv_own;
    static const fmt_role_names synth_names = {
        [FMT_R_TOK_EMBD] = "token_embd", [FMT_R_OUT_NORM] = "output_norm",
        [FMT_R_OUTPUT] = "output",   /* zipf only (fmt_src_bind ties the others) */
        [FMT_R_ATTN_NORM] = "blk.%u.attn_norm", [FMT_R_Q] = "blk.%u.attn_q",
        [FMT_R_K] = "blk.%u.attn_k", [FMT_R_V] = "blk.%u.attn_v",
        [FMT_R_O] = "blk.%u.attn_output", [FMT_R_FFN_NORM] = "blk.%u.ffn_norm",
        [FMT_R_GATE] = "blk.%u.ffn_gate", [FMT_R_UP] = "blk.%u.ffn_up",
        [FMT_R_DOWN] = "blk.%u.ffn_down", [FMT_R_ROUTER] = "blk.%u.ffn_gate_inp",
        [FMT_R_EXP_GATE] = "blk.%u.ffn_gate_exps",
        [FMT_R_EXP_UP] = "blk.%u.ffn_up_exps",
        [FMT_R_EXP_DOWN] = "blk.%u.ffn_down_exps",
        [FMT_R_MOE_NORM] = "blk.%u.moe_norm",
    };
    if ((rc = fmt_src_check_hparams(s, err, errlen)) ||
        (rc = fmt_src_bind(s, synth_names, !(zipf > 0), err, errlen)))
        goto fail;
    *out = s;
    return 0;
fail:
    fmt_src_close(s);
    return rc;
}
