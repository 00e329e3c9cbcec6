/*
 * fmt_cflow_write.c — write a .cflow v5 file from an open source model.
 *
 * The file is written front to back in compute order (fmt_layout.h has the
 * byte map): a zeroed header and layer table first, then each layer's
 * sections, the vocabulary tiles and the metadata, and finally the real
 * header and table over the zeros.  Everything goes to an unnamed file in
 * the output's folder that gets its name only when complete (fmt_out in
 * fmt_convert_io.c), so an interrupted conversion never leaves a
 * half-written model under the requested name.
 *
 * Memory: the source is read one 128-row stripe of each fused matrix at a
 * time (fmt_plan's order), each stripe's pages handed back as soon as its
 * tiles are out (fmt_conv_release), and the output goes through a 1 MiB
 * stdio buffer with write(2).  Peak RSS is the program and the source's
 * tables (vocabulary, tensor index) plus a few stripes: per fused matrix
 * 128 rows of source bytes, and of the target type where `-q` names a
 * llama.cpp mix, so it does not grow with the model.
 *
 * Tile types (fmt_tile_src.c): without -q each matrix keeps its source
 * type bit for bit, every GGML type cflow has a tile type for; a matrix of
 * another type is refused by name.  -q f32|f16|q8_0|q4_0 makes every
 * matrix that type; -q q4_k_m and the other llama-quantize names give each
 * matrix the type of llama.cpp's mix (fmt_mix.c).  Norms, biases and
 * routers stay f32.
 *
 * "The report" (with its section numbers) is the Pipeline-Native
 * Transformers report.
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

#include "format/cflow_format.h"
#include "format/fmt_impl.h"
#include "format/fmt_layout.h"
#include "format/fmt_plan.h"

typedef struct writer {
    FILE                   *f;          /* the output (fmt_out's) */
    const fmt_src          *src;        /* the model being read */
    fmt_conv_src            in;         /* its pages, loaded and released */
    const char             *path;       /* final name, for messages */
    const char             *in_path;    /* the source's, for what is wrong in it */
    uint64_t                pos;        /* bytes written so far */
    const fmt_convert_opts *opts;
    char                   *err;
    size_t                  errlen;
    uint8_t                *payload;    /* one tile's payload scratch */
    fmt_tsrc                ts[FMT_MAX_FUSED]; /* each fused matrix's rows */
    fmt_mix_in              mix;        /* the model as llama.cpp's mix sees it */
    int                     expert;     /* expert id of the tiles, -1 dense */
    uint64_t                done, total; /* source bytes tiled so far, of all */
    uint64_t                next_tick;  /* done that moves the bar next */
} writer;

static int vfail(writer *w, const char *path, int code, const char *fmt, va_list ap)
{
    int n = snprintf(w->err, w->errlen, "%s: ", path);
    if (n >= 0 && (size_t)n < w->errlen)
        vsnprintf(w->err + n, w->errlen - (size_t)n, fmt, ap);
    if (w->errlen)
        fmt_one_line(w->err);        /* whatever a name from the source holds */
    return code;
}

/* An error of the output file (creating, writing it). */
static int fail(writer *w, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(w, w->path, code, fmt, ap);
    va_end(ap);
    return code;
}

/* An error in what the source holds (its geometry, a tensor's values):
 * named by the source's path, not the output's. */
static int fail_src(writer *w, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(w, w->in_path ? w->in_path : w->path, code, fmt, ap);
    va_end(ap);
    return code;
}

static void logf_(writer *w, int level, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    if (!w->opts || !w->opts->log)
        return;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    w->opts->log(w->opts->ud, level, buf);
}

/* Source bytes [p, p + n) are consumed: their pages go back, the bar moves. */
static void consumed(writer *w, const void *p, uint64_t n)
{
    fmt_conv_release(&w->in, p, n);
    w->done += n;
    /* a thousand steps at most: a big model has ~10^5 stripes */
    if (w->opts && w->opts->progress && w->done < w->total && w->done >= w->next_tick) {
        w->next_tick = w->done + w->total / 1000;
        w->opts->progress(w->opts->ud, "convert", w->done, w->total);
    }
}

static int load(writer *w, const fmt_tensor *t, const void *p, uint64_t n)
{
    if (fmt_conv_load(&w->in, p, n))
        return fail_src(w, FMT_EFORMAT, "tensor %s: cannot draw %llu bytes at %llu",
                        t->name, (unsigned long long)n,
                        (unsigned long long)((const uint8_t *)p -
                                             (const uint8_t *)t->data));
    return 0;
}

static int put(writer *w, const void *p, size_t n)
{
    if (n && (fwrite(p, 1, n, w->f) != n || ferror(w->f)))   /* a failed flush: errno now */
        return fail(w, FMT_EIO, "write failed: %s", strerror(errno));
    w->pos += n;
    return 0;
}

static int pad_to(writer *w, uint64_t align)
{
    static const uint8_t zero[FMT_ALIGN];
    uint64_t r = w->pos % align;
    return r ? put(w, zero, (size_t)(align - r)) : 0;
}

/* ---- type choice ------------------------------------------------------ */

/* The role of each matrix id (the mix's categories). */
static const int matrix_role[FMT_NMATRIX] = {
    [FMT_M_Q] = FMT_R_Q, [FMT_M_K] = FMT_R_K, [FMT_M_V] = FMT_R_V, [FMT_M_O] = FMT_R_O,
    [FMT_M_GATE] = FMT_R_GATE, [FMT_M_UP] = FMT_R_UP, [FMT_M_DOWN] = FMT_R_DOWN,
    [FMT_M_ROUTER] = FMT_R_ROUTER, [FMT_M_EXP_GATE] = FMT_R_EXP_GATE,
    [FMT_M_EXP_UP] = FMT_R_EXP_UP, [FMT_M_EXP_DOWN] = FMT_R_EXP_DOWN,
    [FMT_M_TOK_EMBD] = FMT_R_TOK_EMBD, [FMT_M_OUTPUT] = FMT_R_OUTPUT,
    [FMT_M_SH_GATE] = FMT_R_SH_GATE, [FMT_M_SH_UP] = FMT_R_SH_UP,
    [FMT_M_SH_DOWN] = FMT_R_SH_DOWN, [FMT_M_K_B] = FMT_R_K_B, [FMT_M_V_B] = FMT_R_V_B,
    [FMT_M_Q_B] = FMT_R_Q_B,
};

/* Whether layer l has a V projection of its own (not K = V sharing). */
static int has_v(const fmt_src *src, unsigned l)
{
    fmt_layer_geom g;
    fmt_src_layer_geom(src, l, &g);
    return fmt_layer_has_v(fmt_src_hparams(src), &g) && fmt_src_tensor(src, FMT_R_V, l);
}

/* Matrix t (matrix id mid, of layer) as llama.cpp's mix sees it. */
static void mix_tensor(writer *w, const fmt_tensor *t, int mid, unsigned layer)
{
    fmt_mix_in *m = &w->mix;
    m->ftype = w->opts ? w->opts->ftype : FMT_FT_NONE;
    m->role = matrix_role[mid];
    m->layer = layer;
    m->ne0 = t->ne[0];
    /* an expert's view is 2-D; its bank has n_experts */
    m->ne2 = mid >= FMT_M_EXP_GATE && mid <= FMT_M_EXP_DOWN ? fmt_src_hparams(w->src)->n_experts
                                                           : t->ne[2];
    m->i_attn_v = 0;
    for (unsigned j = 0; mid == FMT_M_V && j < layer; j++)
        m->i_attn_v += (unsigned)has_v(w->src, j);
}

/* ---- sections --------------------------------------------------------- */

typedef struct slot {
    uint64_t offset, length;
    uint32_t rows, cols, n_tiles;
    uint8_t  kind, type, group;
} slot;

/* Write an f32 vector built from one or more source tensors. */
static int write_vec(writer *w, const fmt_tensor *const *parts, unsigned n,
                     slot *sl)
{
    uint64_t total = 0;
    int rc;
    for (unsigned i = 0; i < n; i++)
        total += parts[i]->ne[0] * (parts[i]->ndim > 1 ? parts[i]->ne[1] : 1);
    if ((rc = pad_to(w, FMT_ALIGN)))
        return rc;
    sl->offset = w->pos;
    sl->kind = FMT_K_VEC;
    sl->type = KERN_F32;
    sl->rows = (uint32_t)total;
    sl->cols = 1;
    for (unsigned i = 0; i < n; i++) {
        uint64_t cnt = parts[i]->ne[0] * (parts[i]->ndim > 1 ? parts[i]->ne[1] : 1);
        float *v = malloc(cnt * sizeof *v);
        if (!v)
            return fail(w, FMT_ENOMEM, "out of memory");
        if ((rc = load(w, parts[i], parts[i]->data, parts[i]->nbytes))) {
            free(v);
            return rc;
        }
        if (fmt_dequant(parts[i]->dtype, parts[i]->data, v, cnt)) {
            free(v);
            return fail_src(w, FMT_EUNSUP, "tensor %s: unsupported type %s",
                            parts[i]->name, fmt_dtype_name(parts[i]->dtype));
        }
        for (uint64_t k = 0; k < cnt; k++)
            v[k] += parts[i]->shift;   /* Gemma's HF norms: w - 1 stored */
        for (uint64_t k = 0; k < cnt; k++)
            if (!isfinite(v[k])) {
                free(v);
                return fail_src(w, FMT_EFORMAT, "tensor %s holds a non-finite value",
                                parts[i]->name);
            }
        /* the file is little endian, like every host we build for */
        rc = put(w, v, cnt * sizeof *v);
        free(v);
        consumed(w, parts[i]->data, parts[i]->nbytes);
        if (rc)
            return rc;
    }
    sl->length = w->pos - sl->offset;
    return 0;
}

typedef struct stream_ctx {
    writer           *w;
    const fmt_tensor *src[FMT_MAX_FUSED];
    fmt_plan_mat      mat[FMT_MAX_FUSED];
    const uint8_t    *cur[FMT_MAX_FUSED];   /* source stripe being tiled */
    uint64_t          cur_n[FMT_MAX_FUSED]; /* its bytes */
    unsigned          layer;
    int               rc;
} stream_ctx;

static int emit_tile(void *ud, unsigned mi, uint32_t row0, uint32_t col0,
                     unsigned rows, unsigned cols)
{
    stream_ctx *c = ud;
    writer *w = c->w;
    const fmt_tensor *t = c->src[mi];
    fmt_tsrc *ts = &w->ts[mi];
    uint8_t hdr[FMT_TILE_HEADER_SIZE];

    if (col0 == 0) { /* a new stripe: the last one's pages go back */
        size_t rb = (size_t)fmt_dtype_size(t->dtype, t->ne[0]);
        consumed(w, c->cur[mi], c->cur_n[mi]);
        c->cur[mi] = (const uint8_t *)t->data + (uint64_t)row0 * rb;
        c->cur_n[mi] = (uint64_t)rows * rb;
        if ((c->rc = load(w, t, c->cur[mi], c->cur_n[mi])) ||
            (c->rc = fmt_tsrc_stripe(ts, c->cur[mi], rows, row0, w->in_path, w->err,
                                     w->errlen)))
            return 1;
    }

    enum kern_type ty = (enum kern_type)c->mat[mi].type;
    if (kern_tile_pack(ty, rows, cols, (enum kern_src)ts->enc, fmt_tsrc_at(ts, 0, col0),
                       ts->rb, w->payload))
        return (c->rc = fail_src(w, FMT_EFORMAT,
                                 "tensor %s: cannot pack tile at row %u col %u "
                                 "(a value or scale out of %s's range)", t->name, row0,
                                 col0, kern_type_name(ty))), 1;
    if (!kern_tile_finite(ty, rows, cols, w->payload))
        return (c->rc = fail_src(w, FMT_EFORMAT,
                             "tensor %s: non-finite value in tile at row %u col %u",
                             t->name, row0, col0)), 1;
    memset(hdr, 0, sizeof hdr);
    fmt_wr16(hdr + FMT_T_LAYER, (uint16_t)c->layer);
    hdr[FMT_T_MATRIX] = c->mat[mi].matrix;
    hdr[FMT_T_EXPERT] = w->expert < 0 ? FMT_NO_EXPERT : (uint8_t)w->expert;
    fmt_wr32(hdr + FMT_T_ROW, row0);
    fmt_wr16(hdr + FMT_T_COL, (uint16_t)col0);
    fmt_wr16(hdr + FMT_T_ROWS, (uint16_t)rows);
    fmt_wr16(hdr + FMT_T_COLS, (uint16_t)cols);
    fmt_wr16(hdr + FMT_T_QGROUP, KERN_QBLOCK);
    if ((c->rc = put(w, hdr, sizeof hdr)))
        return 1;
    if ((c->rc = put(w, w->payload, kern_tile_payload_size(ty, rows, cols))))
        return 1;
    return 0;
}

/* Write one (possibly fused) tile stream and fill its slots. */
static int write_stream(writer *w, const fmt_group *g, const fmt_tensor **src,
                        unsigned layer, uint8_t group_no, slot *slots)
{
    stream_ctx c;
    int rc;
    memset(&c, 0, sizeof c);
    c.w = w;
    c.layer = layer;
    for (unsigned i = 0; i < g->n; i++) {
        const fmt_tensor *t = src[i];
        if (t->ne[0] > 65536u || t->ne[0] == 0 ||
            t->ne[1] == 0 || t->ne[1] > UINT32_MAX)
            return fail_src(w, FMT_EUNSUP, "tensor %s: unsupported shape", t->name);
        c.src[i] = t;
        c.mat[i].rows = (uint32_t)t->ne[1];
        c.mat[i].cols = (uint32_t)t->ne[0];
        c.mat[i].matrix = g->matrix[i];
        mix_tensor(w, t, g->matrix[i], layer);
        if ((rc = fmt_tsrc_choose(&w->ts[i], t, w->opts, &w->mix, w->in_path ? w->in_path
                                  : w->path, w->err, w->errlen)))
            return rc;
        c.mat[i].type = (uint8_t)w->ts[i].tile;
        if (w->expert <= 0)   /* a bank's matrices once, as llama-quantize lists them */
            logf_(w, 0, "%s%s: %s -> %s tiles%s", t->name, w->expert == 0 ? " (experts)" : "",
                  fmt_dtype_name(t->dtype), kern_type_name((enum kern_type)w->ts[i].tile),
                  w->ts[i].requant ? " (requantised as llama-quantize does)"
                  : w->ts[i].dt == t->dtype && w->ts[i].tile == fmt_dtype_tile(t->dtype)
                  ? " (blocks copied)" : "");
    }
    if ((rc = pad_to(w, FMT_ALIGN)))
        return rc;
    uint64_t start = w->pos;
    long walked = fmt_plan_walk(c.mat, g->n, emit_tile, &c);
    for (unsigned i = 0; i < g->n; i++)
        consumed(w, c.cur[i], c.cur_n[i]);
    if (walked < 0)
        return c.rc ? c.rc : fail(w, FMT_EIO, "tile stream failed");
    for (unsigned i = 0; i < g->n; i++) {
        slot *sl = &slots[g->slots[i]];
        sl->offset = start;
        sl->length = w->pos - start;
        sl->rows = c.mat[i].rows;
        sl->cols = c.mat[i].cols;
        sl->kind = FMT_K_TILED;
        sl->type = c.mat[i].type;
        sl->group = group_no;
        sl->n_tiles = fmt_plan_tiles(c.mat[i].rows, c.mat[i].cols);
    }
    return 0;
}

static void slot_store(uint8_t *p, const slot *s)
{
    memset(p, 0, FMT_SLOT_SIZE);
    fmt_wr64(p + FMT_SL_OFFSET, s->offset);
    fmt_wr64(p + FMT_SL_LENGTH, s->length);
    fmt_wr32(p + FMT_SL_ROWS, s->rows);
    fmt_wr32(p + FMT_SL_COLS, s->cols);
    p[FMT_SL_KIND] = s->kind;
    p[FMT_SL_TYPE] = s->type;
    p[FMT_SL_GROUP] = s->group;
    fmt_wr32(p + FMT_SL_NTILES, s->n_tiles);
}

static const fmt_tensor *need(writer *w, const fmt_src *src, int role,
                              unsigned layer, int *rc)
{
    const fmt_tensor *t = fmt_src_tensor(src, role, layer);
    if (!t && !*rc)
        *rc = fail_src(w, FMT_EFORMAT, "missing tensor %s for layer %u",
                   fmt_role_name(role), layer);
    return t;
}

/* The 32-byte layer geometry record (fmt_layout.h). */
static int write_layer_geom(writer *w, const fmt_src *src, unsigned l, slot *sl)
{
    fmt_layer_geom g;
    uint8_t rec[FMT_LGEOM_SIZE];
    int rc;
    fmt_src_layer_geom(src, l, &g);
    char why[160];
    if (fmt_layer_geom_fit(&g, l, why, sizeof why))
        return fail_src(w, FMT_EUNSUP, "%s", why);
    memset(rec, 0, sizeof rec);
    fmt_wr16(rec + FMT_LG_NHEADS, (uint16_t)g.n_heads);
    fmt_wr16(rec + FMT_LG_NKV, (uint16_t)g.n_kv_heads);
    fmt_wr16(rec + FMT_LG_HEADDIM, (uint16_t)g.head_dim);
    fmt_wr16(rec + FMT_LG_ROPEDIMS, (uint16_t)g.rope_dims);
    fmt_wrf32(rec + FMT_LG_THETA, g.rope_theta);
    fmt_wr32(rec + FMT_LG_SWA, g.sliding_window);
    fmt_wr32(rec + FMT_LG_FLAGS, g.flags);
    fmt_wrf32(rec + FMT_LG_RSCALE, g.rope_scale == 1.0f ? 0.0f : g.rope_scale);
    if ((rc = pad_to(w, FMT_ALIGN)))
        return rc;
    sl[FMT_S_LAYER_GEOM].offset = w->pos;
    sl[FMT_S_LAYER_GEOM].length = FMT_LGEOM_SIZE;
    sl[FMT_S_LAYER_GEOM].rows = 1;
    sl[FMT_S_LAYER_GEOM].cols = FMT_LGEOM_SIZE;
    sl[FMT_S_LAYER_GEOM].kind = FMT_K_LGEOM;
    return put(w, rec, sizeof rec);
}

/* A vector of the families (slots 20-35) where the source has one. */
static int opt_vec(writer *w, const fmt_src *src, int role, unsigned l, slot *sl)
{
    const fmt_tensor *t = fmt_src_tensor(src, role, l);
    return t ? write_vec(w, &t, 1, sl) : 0;
}

/* MLA's parts: [the low-rank query's norm and q_b,] the latent's norm,
 * k_b and v_b (each head's rows in turn). */
static int write_mla(writer *w, const fmt_src *src, unsigned l, slot *sl)
{
    int rc = 0;
    if (fmt_src_hparams(src)->mla_q_rank) {
        const fmt_tensor *qn = need(w, src, FMT_R_Q_A_NORM, l, &rc);
        const fmt_tensor *qb = need(w, src, FMT_R_Q_B, l, &rc);
        if (rc || (rc = write_vec(w, &qn, 1, &sl[FMT_S_Q_A_NORM])) ||
            (rc = write_stream(w, &fmt_layer_groups[8], &qb, l, 10, sl)))
            return rc;
    }
    const fmt_tensor *n = need(w, src, FMT_R_KV_A_NORM, l, &rc);
    const fmt_tensor *kb = need(w, src, FMT_R_K_B, l, &rc);
    const fmt_tensor *vb = need(w, src, FMT_R_V_B, l, &rc);
    if (rc || (rc = write_vec(w, &n, 1, &sl[FMT_S_KV_A_NORM])) ||
        (rc = write_stream(w, &fmt_layer_groups[6], &kb, l, 8, sl)))
        return rc;
    return write_stream(w, &fmt_layer_groups[7], &vb, l, 9, sl);
}

/* Attention: [layer geometry], norm, fused QKV (QK when V shares K's
 * projection or MLA has none), optional QKV bias, optional Q/K norms,
 * [MLA's parts], [sinks], O, [O bias, post-norm]. */
static int write_attn(writer *w, const fmt_src *src, unsigned l, slot *sl)
{
    const fmt_hparams *hp = fmt_src_hparams(src);
    fmt_layer_geom lg;
    int rc = 0;
    fmt_src_layer_geom(src, l, &lg);
    int shared = !fmt_layer_has_v(hp, &lg);
    static const fmt_group qk_group = { FMT_S_Q, 2, { FMT_S_Q, FMT_S_K },
                                        { FMT_M_Q, FMT_M_K } };
    const fmt_tensor *an = need(w, src, FMT_R_ATTN_NORM, l, &rc);
    const fmt_tensor *qkv[3] = { need(w, src, hp->mla_q_rank ? FMT_R_Q_A : FMT_R_Q, l, &rc),
                                 need(w, src, FMT_R_K, l, &rc),
                                 shared ? NULL : need(w, src, FMT_R_V, l, &rc) };
    const fmt_tensor *o = need(w, src, FMT_R_O, l, &rc);
    if (rc)
        return rc;
    if ((hp->flags & FMT_FLAG_LAYER_GEOM) &&
        (rc = write_layer_geom(w, src, l, sl)))
        return rc;
    if ((rc = write_vec(w, &an, 1, &sl[FMT_S_ATTN_NORM])))
        return rc;
    if ((rc = write_stream(w, shared ? &qk_group : &fmt_layer_groups[0], qkv, l, 0,
                           sl)))
        return rc;
    if (hp->flags & FMT_FLAG_QKV_BIAS) {
        const fmt_tensor *b[3] = { need(w, src, FMT_R_Q_BIAS, l, &rc),
                                   need(w, src, FMT_R_K_BIAS, l, &rc),
                                   shared ? NULL : need(w, src, FMT_R_V_BIAS, l, &rc) };
        if (rc || (rc = write_vec(w, b, shared ? 2 : 3, &sl[FMT_S_QKV_BIAS])))
            return rc;
    }
    if (hp->flags & FMT_FLAG_QK_NORM) {
        const fmt_tensor *qn = need(w, src, FMT_R_Q_NORM, l, &rc);
        const fmt_tensor *kn = need(w, src, FMT_R_K_NORM, l, &rc);
        if (rc || (rc = write_vec(w, &qn, 1, &sl[FMT_S_Q_NORM])) ||
            (rc = write_vec(w, &kn, 1, &sl[FMT_S_K_NORM])))
            return rc;
    }
    if (hp->mla_rank && (rc = write_mla(w, src, l, sl)))
        return rc;
    if ((rc = opt_vec(w, src, FMT_R_SINKS, l, &sl[FMT_S_SINKS])) ||
        (rc = write_stream(w, &fmt_layer_groups[1], &o, l, 1, sl)) ||
        (rc = opt_vec(w, src, FMT_R_O_BIAS, l, &sl[FMT_S_O_BIAS])))
        return rc;
    return opt_vec(w, src, FMT_R_ATTN_POST_NORM, l, &sl[FMT_S_ATTN_POST_NORM]);
}

/* Dense FFN: norm, fused gate/up, down (nothing when the layer has none),
 * [post-norm: Gemma's, of whichever FFN the layer has]. */
static int write_dense(writer *w, const fmt_src *src, unsigned l, slot *sl)
{
    int rc = 0;
    if (!fmt_layer_dense(fmt_src_hparams(src), l))
        return opt_vec(w, src, FMT_R_FFN_POST_NORM, l, &sl[FMT_S_FFN_POST_NORM]);
    const fmt_tensor *fn = need(w, src, FMT_R_FFN_NORM, l, &rc);
    const fmt_tensor *gu[2] = { need(w, src, FMT_R_GATE, l, &rc),
                                need(w, src, FMT_R_UP, l, &rc) };
    const fmt_tensor *down = need(w, src, FMT_R_DOWN, l, &rc);
    if (rc || (rc = write_vec(w, &fn, 1, &sl[FMT_S_FFN_NORM])))
        return rc;
    if ((rc = write_stream(w, &fmt_layer_groups[2], gu, l, 2, sl)) ||
        (rc = write_stream(w, &fmt_layer_groups[3], &down, l, 3, sl)))
        return rc;
    return opt_vec(w, src, FMT_R_FFN_POST_NORM, l, &sl[FMT_S_FFN_POST_NORM]);
}

/* Expert e of a 3-D [E][rows][cols] tensor as a 2-D view. */
static fmt_tensor expert_view(const fmt_tensor *t, unsigned e)
{
    fmt_tensor v = *t;
    uint64_t bytes = fmt_dtype_size(t->dtype, t->ne[0]) * t->ne[1];
    v.ndim = 2;
    v.ne[2] = 1;
    v.data = t->parts ? t->parts[e] : (const uint8_t *)t->data + bytes * e;
    v.parts = NULL;
    v.nbytes = bytes;
    return v;
}

/* What the families add to a MoE layer: the router's bias, the experts'
 * biases (gpt-oss: f32 [2 E][expert_ffn], every expert's gate bias, then
 * every expert's up bias; [E][dim] down biases) and the shared experts'
 * streams (DeepSeek). */
static int write_moe_extras(writer *w, const fmt_src *src, unsigned l, slot *sl)
{
    const fmt_hparams *hp = fmt_src_hparams(src);
    const fmt_tensor *gb = fmt_src_tensor(src, FMT_R_EXP_GATE_BIAS, l);
    const fmt_tensor *ub = fmt_src_tensor(src, FMT_R_EXP_UP_BIAS, l);
    const fmt_tensor *db = fmt_src_tensor(src, FMT_R_EXP_DOWN_BIAS, l);
    int rc;
    if ((rc = opt_vec(w, src, FMT_R_ROUTER_BIAS, l, &sl[FMT_S_ROUTER_BIAS])))
        return rc;
    if (gb && ub) {
        const fmt_tensor *b[2] = { gb, ub };
        if ((rc = write_vec(w, b, 2, &sl[FMT_S_EXP_GU_BIAS])))
            return rc;
        sl[FMT_S_EXP_GU_BIAS].kind = FMT_K_F32MAT;
        sl[FMT_S_EXP_GU_BIAS].rows = 2 * hp->n_experts;
        sl[FMT_S_EXP_GU_BIAS].cols = hp->expert_ffn_dim;
    }
    if (db) {
        if ((rc = write_vec(w, &db, 1, &sl[FMT_S_EXP_DOWN_BIAS])))
            return rc;
        sl[FMT_S_EXP_DOWN_BIAS].kind = FMT_K_F32MAT;
        sl[FMT_S_EXP_DOWN_BIAS].rows = hp->n_experts;
        sl[FMT_S_EXP_DOWN_BIAS].cols = hp->dim;
    }
    if (!hp->shared_ffn_dim)
        return 0;
    rc = 0;
    const fmt_tensor *sgu[2] = { need(w, src, FMT_R_SH_GATE, l, &rc),
                                 need(w, src, FMT_R_SH_UP, l, &rc) };
    const fmt_tensor *sdn = need(w, src, FMT_R_SH_DOWN, l, &rc);
    if (rc || (rc = write_stream(w, &fmt_layer_groups[4], sgu, l, 6, sl)))
        return rc;
    return write_stream(w, &fmt_layer_groups[5], &sdn, l, 7, sl);
}

/* MoE: its input norm, the f32 router, [the families' extras,] the expert
 * offset table and the expert bank (per expert: fused gate/up stream, then
 * down stream). */
static int write_moe(writer *w, const fmt_src *src, unsigned l, slot *sl)
{
    const fmt_hparams *hp = fmt_src_hparams(src);
    unsigned E = hp->n_experts;
    int rc = 0;
    fmt_layer_geom lg;
    fmt_src_layer_geom(src, l, &lg);
    if (!fmt_layer_moe(hp, &lg, l))
        return 0;
    const fmt_tensor *mn = fmt_src_tensor(src, FMT_R_MOE_NORM, l);
    if (!mn) /* Mixtral-style models route off the FFN norm */
        mn = need(w, src, FMT_R_FFN_NORM, l, &rc);
    const fmt_tensor *router = need(w, src, FMT_R_ROUTER, l, &rc);
    const fmt_tensor *eg = need(w, src, FMT_R_EXP_GATE, l, &rc);
    const fmt_tensor *eu = need(w, src, FMT_R_EXP_UP, l, &rc);
    const fmt_tensor *ed = need(w, src, FMT_R_EXP_DOWN, l, &rc);
    if (rc || (rc = write_vec(w, &mn, 1, &sl[FMT_S_MOE_NORM])))
        return rc;
    /* the router stays f32: per-group scales would dominate its size */
    if ((rc = write_vec(w, &router, 1, &sl[FMT_S_ROUTER])))
        return rc;
    sl[FMT_S_ROUTER].kind = FMT_K_F32MAT;
    sl[FMT_S_ROUTER].rows = E;
    sl[FMT_S_ROUTER].cols = hp->dim;
    if ((rc = write_moe_extras(w, src, l, sl)))
        return rc;

    /* the table is written as zeros now and filled in once the bank is */
    uint8_t *table = calloc(E, 16);
    if (!table)
        return fail(w, FMT_ENOMEM, "out of memory");
    if ((rc = pad_to(w, FMT_ALIGN))) {
        free(table);
        return rc;
    }
    uint64_t table_off = w->pos;
    if ((rc = put(w, table, (size_t)E * 16))) {
        free(table);
        return rc;
    }
    sl[FMT_S_EXPERT_TABLE].offset = table_off;
    sl[FMT_S_EXPERT_TABLE].length = (uint64_t)E * 16;
    sl[FMT_S_EXPERT_TABLE].rows = E;
    sl[FMT_S_EXPERT_TABLE].cols = 2;
    sl[FMT_S_EXPERT_TABLE].kind = FMT_K_EXPTABLE;

    slot tmp[FMT_NSLOT_ALL];
    uint64_t bank = 0;
    for (unsigned e = 0; e < E && !rc; e++) {
        fmt_tensor g = expert_view(eg, e), u = expert_view(eu, e), d = expert_view(ed, e);
        const fmt_tensor *gu[2] = { &g, &u }, *dn = &d;
        static const fmt_group eg_group = { FMT_S_EXP_GATE, 2,
                                            { FMT_S_EXP_GATE, FMT_S_EXP_UP },
                                            { FMT_M_EXP_GATE, FMT_M_EXP_UP } };
        static const fmt_group ed_group = { FMT_S_EXP_DOWN, 1, { FMT_S_EXP_DOWN },
                                            { FMT_M_EXP_DOWN } };
        memset(tmp, 0, sizeof tmp);
        w->expert = (int)e;
        if ((rc = pad_to(w, FMT_ALIGN)))
            break;
        uint64_t start = w->pos;
        if (e == 0)
            bank = start;
        if ((rc = write_stream(w, &eg_group, gu, l, 4, tmp)) ||
            (rc = write_stream(w, &ed_group, &dn, l, 5, tmp)))
            break;
        fmt_wr64(table + 16 * e, start);
        fmt_wr64(table + 16 * e + 8, w->pos - start);
        if (e == 0)
            for (int s2 = FMT_S_EXP_GATE; s2 <= FMT_S_EXP_DOWN; s2++)
                sl[s2] = tmp[s2];
    }
    w->expert = -1;
    if (!rc) {
        for (int s2 = FMT_S_EXP_GATE; s2 <= FMT_S_EXP_DOWN; s2++) {
            sl[s2].offset = bank;
            sl[s2].length = w->pos - bank;
        }
        /* fill in the table */
        if (fflush(w->f) || fseek(w->f, (long)table_off, SEEK_SET) ||
            fwrite(table, 16, E, w->f) != E || fseek(w->f, 0, SEEK_END))
            rc = fail(w, FMT_EIO, "write failed: %s", strerror(errno));
    }
    free(table);
    return rc;
}

/*
 * The order of sections in the file follows the delayed schedule (the
 * report's DelayedMoESource): the region of layer l holds layer l's
 * attention, then the dense FFN of layer l + dense_delay (the one the
 * schedule computes next), then the experts routed at layer l.  Dense FFNs
 * of layers below dense_delay come before layer 0.
 */
/* The .vflow's vertical groups (report 3.4.1): maximal runs of consecutive
 * layers that share one attention geometry.  Uniform models are one group;
 * Gemma 4's 5:1 pattern gives a group per 5 sliding layers and a solo
 * group per full-attention layer.  first[g] is group g's first layer;
 * returns the count (first[count] = n_layers). */
static unsigned vflow_groups(const fmt_src *src, unsigned *first)
{
    unsigned L = fmt_src_hparams(src)->n_layers, n = 0;
    fmt_layer_geom prev = { 0 }, g;
    for (unsigned l = 0; l < L; l++) {
        fmt_src_layer_geom(src, l, &g);
        if (l == 0 || g.n_heads != prev.n_heads || g.n_kv_heads != prev.n_kv_heads ||
            g.head_dim != prev.head_dim || g.rope_dims != prev.rope_dims ||
            g.rope_theta != prev.rope_theta || g.sliding_window != prev.sliding_window ||
            g.flags != prev.flags) {
            if (first)
                first[n] = l;
            n++;
        }
        prev = g;
    }
    if (first)
        first[n] = L;
    return n;
}

/* The .vflow order: per group, the attention sections of its layers, then
 * their dense sections; then the expert bank.  g[4 * i ..] gets group i's
 * attention offset and length and dense offset and length; bank its
 * range. */
static int write_layers_vflow(writer *w, const fmt_src *src, slot *table,
                              const unsigned *first, unsigned ng, uint64_t *g,
                              uint64_t bank[2])
{
    const fmt_hparams *hp = fmt_src_hparams(src);
    unsigned L = hp->n_layers;
    int rc;
    for (unsigned gi = 0; gi < ng; gi++, g += 4) {
        if ((rc = pad_to(w, FMT_ALIGN)))
            return rc;
        g[0] = w->pos;
        for (unsigned l = first[gi]; l < first[gi + 1]; l++)
            if ((rc = write_attn(w, src, l, &table[(size_t)l * FMT_NSLOT_ALL])))
                return rc;
        g[1] = w->pos - g[0];
        if ((rc = pad_to(w, FMT_ALIGN)))
            return rc;
        g[2] = w->pos;
        for (unsigned l = first[gi]; l < first[gi + 1]; l++)
            if ((rc = write_dense(w, src, l, &table[(size_t)l * FMT_NSLOT_ALL])))
                return rc;
        g[3] = w->pos - g[2];
    }
    if ((rc = pad_to(w, FMT_ALIGN)))
        return rc;
    bank[0] = w->pos;
    for (unsigned l = 0; l < L; l++) {
        if ((rc = write_moe(w, src, l, &table[(size_t)l * FMT_NSLOT_ALL])))
            return rc;
    }
    bank[1] = w->pos - bank[0];
    return 0;
}

static int write_layers(writer *w, const fmt_src *src, slot *table)
{
    const fmt_hparams *hp = fmt_src_hparams(src);
    unsigned L = hp->n_layers, dd = hp->dense_delay;
    int rc;
    for (unsigned j = 0; j < dd && j < L; j++)
        if ((rc = write_dense(w, src, j, &table[(size_t)j * FMT_NSLOT_ALL])))
            return rc;
    for (unsigned l = 0; l < L; l++) {
        slot *sl = &table[(size_t)l * FMT_NSLOT_ALL];
        if ((rc = write_attn(w, src, l, sl)))
            return rc;
        if (l + dd < L &&
            (rc = write_dense(w, src, l + dd, &table[(size_t)(l + dd) * FMT_NSLOT_ALL])))
            return rc;
        if ((rc = write_moe(w, src, l, sl)))
            return rc;
    }
    return 0;
}

static int build_meta(writer *w, const fmt_src *src, fmt_kv *meta)
{
    const fmt_kv *kv = fmt_src_kv(src);
    const fmt_hparams *hp = fmt_src_hparams(src);
    size_t n = kv ? fmt_kv_count(kv) : 0;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *k = fmt_kv_key(kv, i, &len);
        char key[256];
        if (len >= sizeof key || memchr(k, 0, len))
            continue;                /* (a key no C string names: not copied) */
        memcpy(key, k, len);
        key[len] = 0;
        char nm[64];
        if (!strncmp(key, "tokenizer.", 10) || !strcmp(key, "general.name") ||
            !strcmp(key, FMT_SYNTH_ROUTING_KEY))
            if (fmt_kv_copy(meta, kv, key))
                return fail(w, FMT_ENOMEM, "cannot copy metadata %s",
                            fmt_safe_name(nm, key, len));
    }
    if (fmt_kv_set_str(meta, "general.architecture", hp->arch, strlen(hp->arch)) ||
        fmt_kv_set_str(meta, "cflow.source", fmt_src_kind(src),
                       strlen(fmt_src_kind(src))))
        return fail(w, FMT_ENOMEM, "out of memory");
    if ((hp->merge_interval &&
         fmt_kv_set_u32(meta, "cflow.merge_interval", hp->merge_interval)) ||
        (hp->iterations && fmt_kv_set_u32(meta, "cflow.iterations", hp->iterations)))
        return fail(w, FMT_ENOMEM, "out of memory");
    if (fmt_hp_meta_store(hp, meta) ||
        (src->fam && src->fam->peer_ggml &&
         fmt_kv_set_str(meta, "cflow.peer", "llama.cpp", 9)))
        return fail(w, FMT_ENOMEM, "out of memory");
    if (hp->flags & FMT_FLAG_ROPE_LLAMA3) {
        if (fmt_kv_set_f32(meta, "cflow.rope.scaling.factor", hp->rope_factor) ||
            fmt_kv_set_f32(meta, "cflow.rope.scaling.low_freq_factor", hp->rope_low_freq) ||
            fmt_kv_set_f32(meta, "cflow.rope.scaling.high_freq_factor", hp->rope_high_freq) ||
            fmt_kv_set_u32(meta, "cflow.rope.scaling.original_context_length",
                           hp->rope_orig_ctx))
            return fail(w, FMT_ENOMEM, "out of memory");
    }
    return 0;
}

static int dominant_type(const slot *table, unsigned n_entries)
{
    uint64_t bytes[KERN_NTYPES] = { 0 };
    int best = KERN_F32;
    for (unsigned i = 0; i < n_entries * FMT_NSLOT_ALL; i++)
        if (table[i].kind == FMT_K_TILED && table[i].type < KERN_NTYPES)
            bytes[table[i].type] += (uint64_t)table[i].rows * table[i].cols;
    for (int t = 0; t < KERN_NTYPES; t++)
        if (bytes[t] > bytes[best])
            best = t;
    return best;
}

/* What fmt_cflow_write carries between its phases. */
typedef struct out_file {
    fmt_out     out;                   /* the file, named when complete */
    slot       *table;                 /* [(L + 1) * FMT_NSLOT_ALL] */
    uint8_t    *tbuf;                  /* the same, stored: the layer table,
                                          then the xslot tables */
    size_t      tbytes;                /* bytes of tbuf */
    int         xslots;                /* FMT_FLAG_XSLOTS: the families' slots */
    uint8_t     hdr[FMT_HEADER_SIZE], vhdr[FMT_VHEADER_SIZE];
    uint64_t    ghdr_off, ltab, gtab, meta_off, bank[2];
    uint8_t    *gdesc;                 /* .vflow group table */
    unsigned   *gfirst, ngroups;
    uint64_t   *grp;
    uint8_t     flags;                 /* feature_flags byte */
    int         vflow;
} out_file;

/* Every field the header narrows (fmt_hparams_fit): never write a file
 * the reader refuses, nor a value cut to its field's width. */
static int check_geometry(writer *w, const fmt_hparams *hp)
{
    char why[160];
    if (fmt_hparams_fit(hp, why, sizeof why))
        return fail_src(w, FMT_EUNSUP, "%s", why);
    return 0;
}

/* Placeholders for the header(s), the layer table (and the xslot tables
 * after it) and the group table, then every layer's sections. */
static int write_body(writer *w, const fmt_src *src, out_file *o)
{
    int rc;
    if (o->vflow) {
        if ((rc = put(w, o->vhdr, sizeof o->vhdr)))
            return rc;
        o->ghdr_off = w->pos;
    }
    if ((rc = put(w, o->hdr, sizeof o->hdr)) || (rc = pad_to(w, FMT_ALIGN)))
        return rc;
    o->ltab = w->pos;
    if ((rc = put(w, o->tbuf, o->tbytes)))
        return rc;
    if (!o->vflow)
        return write_layers(w, src, o->table);
    o->gtab = w->pos;
    o->ngroups = vflow_groups(src, NULL);
    o->gfirst = calloc(o->ngroups + 1u, sizeof *o->gfirst);
    o->grp = calloc((size_t)o->ngroups * 4, sizeof *o->grp);
    o->gdesc = calloc(o->ngroups, FMT_VGROUP_SIZE);
    if (!o->gfirst || !o->grp || !o->gdesc)
        return fail(w, FMT_ENOMEM, "out of memory");
    vflow_groups(src, o->gfirst);
    if ((rc = put(w, o->gdesc, (size_t)o->ngroups * FMT_VGROUP_SIZE)))
        return rc;
    return write_layers_vflow(w, src, o->table, o->gfirst, o->ngroups, o->grp,
                              o->bank);
}

/* The globals: output norm, embedding, output head (absent when tied),
 * [LongRoPE's divisors]. */
static int write_globals(writer *w, const fmt_src *src, out_file *o)
{
    const fmt_hparams *hp = fmt_src_hparams(src);
    unsigned L = hp->n_layers;
    slot *gs = &o->table[(size_t)L * FMT_NSLOT_ALL];
    int rc = 0;
    const fmt_tensor *onorm = need(w, src, FMT_R_OUT_NORM, 0, &rc);
    const fmt_tensor *emb = need(w, src, FMT_R_TOK_EMBD, 0, &rc);
    if (rc)
        return rc;
    o->flags = (uint8_t)(hp->flags & FMT_FLAGS_KNOWN);
    if ((rc = write_vec(w, &onorm, 1, &gs[FMT_S_OUT_NORM])))
        return rc;
    if ((rc = write_stream(w, &fmt_global_groups[0], &emb, L, 0, gs)))
        return rc;
    const fmt_tensor *outp = fmt_src_tensor(src, FMT_R_OUTPUT, 0);
    if (outp && !(hp->flags & FMT_FLAG_TIED)) {
        o->flags &= (uint8_t)~FMT_FLAG_TIED;
        if ((rc = write_stream(w, &fmt_global_groups[1], &outp, L, 1, gs)))
            return rc;
    } else {
        o->flags |= FMT_FLAG_TIED;
    }
    if ((rc = opt_vec(w, src, FMT_R_ROPE_SHORT, 0, &gs[FMT_S_ROPE_SHORT])) ||
        (rc = opt_vec(w, src, FMT_R_ROPE_LONG, 0, &gs[FMT_S_ROPE_LONG])))
        return rc;
    if (emb->ne[1] != hp->vocab_size || emb->ne[0] != hp->dim)
        return fail_src(w, FMT_EFORMAT, "token embedding is %llux%llu, expected %ux%u",
                    (unsigned long long)emb->ne[1], (unsigned long long)emb->ne[0],
                    hp->vocab_size, hp->dim);
    return 0;
}

/* The metadata section: u64 count, then fmt_kv's encoding. */
static int write_meta(writer *w, const fmt_src *src, out_file *o)
{
    fmt_kv *meta = fmt_kv_new();
    if (!meta)
        return fail(w, FMT_ENOMEM, "out of memory");
    int rc = build_meta(w, src, meta);
    if (!rc)
        rc = pad_to(w, FMT_ALIGN);
    o->meta_off = w->pos;
    if (!rc) {
        uint8_t cnt[8];
        size_t n = fmt_kv_write(meta, NULL);
        uint8_t *buf = malloc(n ? n : 1);
        if (!buf) {
            fmt_kv_free(meta);
            return fail(w, FMT_ENOMEM, "out of memory");
        }
        fmt_kv_write(meta, buf);
        fmt_wr64(cnt, fmt_kv_count(meta));
        rc = put(w, cnt, 8);
        if (!rc)
            rc = put(w, buf, n);
        free(buf);
    }
    fmt_kv_free(meta);
    return rc;
}

/* The .vflow header and group table over their placeholders; the
 * vocabulary tiles end the streaming region, after the bank. */
static int write_vflow_tables(writer *w, out_file *o)
{
    uint8_t *vhdr = o->vhdr;
    const uint64_t *grp = o->grp;
    unsigned ngroups = o->ngroups;
    memcpy(vhdr + FMT_V_MAGIC, FMT_VMAGIC, 8);
    fmt_wr16(vhdr + FMT_V_VERSION, FMT_VVERSION);
    fmt_wr16(vhdr + FMT_V_HSIZE, FMT_VHEADER_SIZE);
    const uint64_t *last = grp + 4 * (size_t)(ngroups - 1);
    fmt_wr32(vhdr + FMT_V_NGROUPS, ngroups);
    fmt_wr64(vhdr + FMT_V_GTABLE, o->gtab);
    fmt_wr64(vhdr + FMT_V_GHEADER, o->ghdr_off);
    fmt_wr64(vhdr + FMT_V_STREAM, grp[0]);
    fmt_wr64(vhdr + FMT_V_STREAMLEN, (last[2] + last[3]) - grp[0]);
    fmt_wr64(vhdr + FMT_V_BANK, o->bank[0]);
    fmt_wr64(vhdr + FMT_V_BANKLEN, o->bank[1]);
    for (unsigned gi = 0; gi < ngroups; gi++) {
        uint8_t *d = o->gdesc + (size_t)gi * FMT_VGROUP_SIZE;
        fmt_wr32(d + 0, o->gfirst[gi]);
        fmt_wr32(d + 4, o->gfirst[gi + 1] - o->gfirst[gi]);
        for (unsigned k = 0; k < 4; k++)
            fmt_wr64(d + 8 + 8 * k, grp[4 * (size_t)gi + k]);
    }
    if (fflush(w->f) || fseek(w->f, 0, SEEK_SET) ||
        fwrite(vhdr, 1, sizeof o->vhdr, w->f) != sizeof o->vhdr ||
        fseek(w->f, (long)o->gtab, SEEK_SET) ||
        fwrite(o->gdesc, FMT_VGROUP_SIZE, ngroups, w->f) != ngroups)
        return fail(w, FMT_EIO, "write failed: %s", strerror(errno));
    return 0;
}

/* The real header and layer table over their placeholders, then the file
 * to disk and renamed into place. */
static int finish(writer *w, const fmt_hparams *hp, out_file *o)
{
    const size_t ne = (size_t)hp->n_layers + 1, nslot = o->tbytes / FMT_SLOT_SIZE;
    const uint64_t xtab = o->ltab + ne * FMT_NSLOT * FMT_SLOT_SIZE;
    int rc;
    for (size_t en = 0; en < ne; en++) {
        slot *sl = &o->table[en * FMT_NSLOT_ALL];
        if (o->xslots) {               /* slot 19: this entry's xslot table */
            sl[FMT_S_XSLOTS] = (slot){ .offset = xtab + en * FMT_NXSLOT * FMT_SLOT_SIZE,
                                       .length = FMT_NXSLOT * FMT_SLOT_SIZE,
                                       .rows = FMT_NXSLOT, .cols = FMT_SLOT_SIZE,
                                       .kind = FMT_K_XSLOTS };
            for (int x = 0; x < FMT_NXSLOT; x++)
                slot_store(o->tbuf + ((ne * FMT_NSLOT) + en * FMT_NXSLOT + (size_t)x) *
                                         FMT_SLOT_SIZE, &sl[FMT_NSLOT + x]);
        }
        for (int k = 0; k < FMT_NSLOT; k++)
            slot_store(o->tbuf + (en * FMT_NSLOT + (size_t)k) * FMT_SLOT_SIZE, &sl[k]);
    }
    fmt_header_store(o->hdr, hp, o->ltab, o->meta_off, o->flags,
                 (uint8_t)dominant_type(o->table, hp->n_layers + 1));
    if (o->vflow && (rc = write_vflow_tables(w, o)))
        return rc;
    if (fflush(w->f) || fseek(w->f, (long)o->ghdr_off, SEEK_SET) ||
        fwrite(o->hdr, 1, sizeof o->hdr, w->f) != sizeof o->hdr ||
        fseek(w->f, (long)o->ltab, SEEK_SET) ||
        fwrite(o->tbuf, FMT_SLOT_SIZE, nslot, w->f) != nslot)
        return fail(w, FMT_EIO, "write failed: %s", strerror(errno));
    w->f = NULL;
    return fmt_out_commit(&o->out, w->err, w->errlen);
}

/* Whether the source has any tensor of slots 20-35 (then every entry gets
 * its xslot table). */
static int has_xslots(const fmt_src *src)
{
    static const int roles[] = { FMT_R_ATTN_POST_NORM, FMT_R_FFN_POST_NORM, FMT_R_SINKS,
                                 FMT_R_O_BIAS, FMT_R_ROUTER_BIAS, FMT_R_EXP_GATE_BIAS,
                                 FMT_R_EXP_DOWN_BIAS, FMT_R_SH_GATE, FMT_R_ROPE_SHORT };
    const fmt_hparams *hp = fmt_src_hparams(src);
    for (size_t i = 0; i < sizeof roles / sizeof *roles; i++)
        for (unsigned l = 0; l < hp->n_layers; l++)
            if (fmt_src_tensor(src, roles[i], l))
                return 1;
    return 0;
}

int fmt_cflow_write(const fmt_src *src, const char *out_path,
                    const fmt_convert_opts *opts, char *err, size_t errlen)
{
    const fmt_hparams *hp = fmt_src_hparams(src);
    unsigned L = hp->n_layers;
    writer w;
    out_file o;
    int rc;

    memset(&w, 0, sizeof w);
    memset(&o, 0, sizeof o);
    w.expert = -1;
    w.path = out_path;
    w.in_path = src->path;
    w.src = src;
    w.total = fmt_conv_total(src);
    w.opts = opts;
    w.err = err;
    w.errlen = errlen;
    if (opts && opts->force_type >= KERN_NTYPES)
        return fail(&w, FMT_EARG, "unknown tile type %d", opts->force_type);
    if (opts && (opts->ftype < 0 || opts->ftype >= FMT_NFTYPE))
        return fail(&w, FMT_EARG, "unknown quantisation mix %d", opts->ftype);
    {
        unsigned nv = 0;
        for (unsigned l = 0; l < L; l++)
            nv += (unsigned)has_v(src, l);
        fmt_mix_model(&w.mix, hp, (hp->flags & FMT_FLAG_TIED) ||
                                  !fmt_src_tensor(src, FMT_R_OUTPUT, 0), nv);
    }
    if ((rc = check_geometry(&w, hp)))
        return rc;
    o.vflow = opts && opts->vflow;
    /* the families' tensors take slots 20-35 (fmt_layout.h) */
    fmt_hparams hw = *hp;
    o.xslots = has_xslots(src);
    if (o.xslots)
        hw.flags |= FMT_FLAG_XSLOTS;
    hp = &hw;
    o.tbytes = (size_t)(L + 1) * (FMT_NSLOT + (o.xslots ? FMT_NXSLOT : 0)) * FMT_SLOT_SIZE;
    o.table = calloc((size_t)(L + 1) * FMT_NSLOT_ALL, sizeof *o.table);
    o.tbuf = calloc(o.tbytes, 1);
    w.payload = malloc(kern_tile_payload_size(KERN_F32, KERN_TILE_ROWS,
                                              KERN_TILE_COLS));
    if (!o.table || !o.tbuf || !w.payload || fmt_conv_begin(&w.in, src)) {
        rc = fail(&w, FMT_ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = fmt_out_open(&o.out, out_path, err, errlen)))
        goto out;
    w.f = o.out.f;
    if (opts && opts->progress)
        opts->progress(opts->ud, "convert", 0, w.total);
    if ((rc = write_body(&w, src, &o)) ||
        (rc = write_globals(&w, src, &o)))
        goto out;
    if ((rc = write_meta(&w, src, &o)) || (rc = finish(&w, hp, &o)))
        goto out;
    if (opts && opts->progress)
        opts->progress(opts->ud, "convert", w.total, w.total);

out:
    fmt_out_abort(&o.out);
    fmt_conv_end(&w.in);
    for (int i = 0; i < FMT_MAX_FUSED; i++)
        fmt_tsrc_free(&w.ts[i]);
    free(w.payload);
    free(o.gdesc);
    free(o.gfirst);
    free(o.grp);
    free(o.table);
    free(o.tbuf);
    return rc;
}

int fmt_convert(const char *in_path, const char *out_path,
                const fmt_convert_opts *opts, char *err, size_t errlen)
{
    fmt_src *src = NULL;
    int rc = fmt_src_open(&src, in_path, opts ? opts->tokenizer_path : NULL,
                          err, errlen);
    if (rc)
        return rc;
    rc = fmt_cflow_write(src, out_path, opts, err, errlen);
    fmt_src_close(src);
    return rc;
}
