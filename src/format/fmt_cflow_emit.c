/*
 * fmt_cflow_emit.c — how the .cflow writer (fmt_cflow_write.c) puts bytes
 * into the file: the writer's state (fmt_cw, fmt_impl.h), its errors (the
 * output's, or the source's by the source's name) and log lines, the
 * source's pages drawn and handed back as they are used (the progress
 * bar), and the two kinds of section every slot is: an f32 vector built
 * from source tensors, and a (fused) tile stream packed in fmt_plan's
 * order, each tile's type chosen as the options or llama.cpp's mix say
 * (fmt_tile_src.c).  fmt_cflow_write.c lays the sections out; nothing
 * here knows the layout.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/cflow_format.h"
#include "format/fmt_impl.h"
#include "format/fmt_layout.h"
#include "format/fmt_plan.h"
#include "format/fmt_cflow_emit.h"

static int vfail(fmt_cw *w, const char *path, int code, const char *fmt, va_list ap)
{
    int n = snprintf(w->err, w->errlen, "%s: ", path);
    if (n >= 0 && (size_t)n < w->errlen)
        vsnprintf(w->err + n, w->errlen - (size_t)n, fmt, ap);
    if (w->errlen)
        fmt_one_line(w->err);        /* whatever a name from the source holds */
    return code;
}

/* An error of the output file (creating, writing it). */
int fmt_cw_fail(fmt_cw *w, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(w, w->path, code, fmt, ap);
    va_end(ap);
    return code;
}

/* An error in what the source holds (its geometry, a tensor's values):
 * named by the source's path, not the output's. */
int fmt_cw_fail_src(fmt_cw *w, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(w, w->in_path ? w->in_path : w->path, code, fmt, ap);
    va_end(ap);
    return code;
}

void fmt_cw_log(fmt_cw *w, int level, const char *fmt, ...)
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
void fmt_cw_consumed(fmt_cw *w, const void *p, uint64_t n)
{
    fmt_conv_release(&w->in, p, n);
    w->done += n;
    /* a thousand steps at most: a big model has ~10^5 stripes */
    if (w->opts && w->opts->progress && w->done < w->total && w->done >= w->next_tick) {
        w->next_tick = w->done + w->total / 1000;
        w->opts->progress(w->opts->ud, "convert", w->done, w->total);
    }
}

int fmt_cw_load(fmt_cw *w, const fmt_tensor *t, const void *p, uint64_t n)
{
    if (fmt_conv_load(&w->in, p, n))
        return fmt_cw_fail_src(w, FMT_EFORMAT, "tensor %s: cannot draw %llu bytes at %llu",
                               t->name, (unsigned long long)n,
                               (unsigned long long)((const uint8_t *)p -
                                                    (const uint8_t *)t->data));
    return 0;
}

int fmt_cw_put(fmt_cw *w, const void *p, size_t n)
{
    if (n && (fwrite(p, 1, n, w->f) != n || ferror(w->f)))   /* a failed flush: errno now */
        return fmt_cw_fail(w, FMT_EIO, "write failed: %s", strerror(errno));
    w->pos += n;
    return 0;
}

int fmt_cw_pad(fmt_cw *w, uint64_t align)
{
    static const uint8_t zero[FMT_ALIGN];
    uint64_t r = w->pos % align;
    return r ? fmt_cw_put(w, zero, (size_t)(align - r)) : 0;
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
int fmt_cw_has_v(const fmt_src *src, unsigned l)
{
    fmt_layer_geom g;
    fmt_src_layer_geom(src, l, &g);
    return fmt_layer_has_v(fmt_src_hparams(src), &g) && fmt_src_tensor(src, FMT_R_V, l);
}

/* Matrix t (matrix id mid, of layer) as llama.cpp's mix sees it. */
static void mix_tensor(fmt_cw *w, const fmt_tensor *t, int mid, unsigned layer)
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
        m->i_attn_v += (unsigned)fmt_cw_has_v(w->src, j);
}

/* ---- sections --------------------------------------------------------- */


/* Write an f32 vector built from one or more source tensors. */
int fmt_cw_vec(fmt_cw *w, const fmt_tensor *const *parts, unsigned n, fmt_cw_slot *sl)
{
    uint64_t total = 0;
    int rc;
    for (unsigned i = 0; i < n; i++)
        total += parts[i]->ne[0] * (parts[i]->ndim > 1 ? parts[i]->ne[1] : 1);
    if ((rc = fmt_cw_pad(w, FMT_ALIGN)))
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
            return fmt_cw_fail(w, FMT_ENOMEM, "out of memory");
        if ((rc = fmt_cw_load(w, parts[i], parts[i]->data, parts[i]->nbytes))) {
            free(v);
            return rc;
        }
        if (fmt_dequant(parts[i]->dtype, parts[i]->data, v, cnt)) {
            free(v);
            return fmt_cw_fail_src(w, FMT_EUNSUP, "tensor %s: unsupported type %s",
                                   parts[i]->name, fmt_dtype_name(parts[i]->dtype));
        }
        for (uint64_t k = 0; k < cnt; k++)
            v[k] += parts[i]->shift;   /* Gemma's HF norms: w - 1 stored */
        for (uint64_t k = 0; k < cnt; k++)
            if (!isfinite(v[k])) {
                free(v);
                return fmt_cw_fail_src(w, FMT_EFORMAT, "tensor %s holds a non-finite value",
                                       parts[i]->name);
            }
        /* the file is little endian, like every host we build for */
        rc = fmt_cw_put(w, v, cnt * sizeof *v);
        free(v);
        fmt_cw_consumed(w, parts[i]->data, parts[i]->nbytes);
        if (rc)
            return rc;
    }
    sl->length = w->pos - sl->offset;
    return 0;
}

typedef struct stream_ctx {
    fmt_cw           *w;
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
    fmt_cw *w = c->w;
    const fmt_tensor *t = c->src[mi];
    fmt_tsrc *ts = &w->ts[mi];
    uint8_t hdr[FMT_TILE_HEADER_SIZE];

    if (col0 == 0) { /* a new stripe: the last one's pages go back */
        size_t rb = (size_t)fmt_dtype_size(t->dtype, t->ne[0]);
        fmt_cw_consumed(w, c->cur[mi], c->cur_n[mi]);
        c->cur[mi] = (const uint8_t *)t->data + (uint64_t)row0 * rb;
        c->cur_n[mi] = (uint64_t)rows * rb;
        if ((c->rc = fmt_cw_load(w, t, c->cur[mi], c->cur_n[mi])) ||
            (c->rc = fmt_tsrc_stripe(ts, c->cur[mi], rows, row0, w->in_path, w->err,
                                     w->errlen)))
            return 1;
    }

    enum kern_type ty = (enum kern_type)c->mat[mi].type;
    if (kern_tile_pack(ty, rows, cols, (enum kern_src)ts->enc, fmt_tsrc_at(ts, 0, col0),
                       ts->rb, w->payload))
        return (c->rc = fmt_cw_fail_src(w, FMT_EFORMAT,
                                        "tensor %s: cannot pack tile at row %u col %u "
                                        "(a value or scale out of %s's range)", t->name,
                                        row0, col0, kern_type_name(ty))), 1;
    if (!kern_tile_finite(ty, rows, cols, w->payload))
        return (c->rc = fmt_cw_fail_src(w, FMT_EFORMAT,
                                        "tensor %s: non-finite value in tile at row %u "
                                        "col %u", t->name, row0, col0)), 1;
    memset(hdr, 0, sizeof hdr);
    fmt_wr16(hdr + FMT_T_LAYER, (uint16_t)c->layer);
    hdr[FMT_T_MATRIX] = c->mat[mi].matrix;
    hdr[FMT_T_EXPERT] = w->expert < 0 ? FMT_NO_EXPERT : (uint8_t)w->expert;
    fmt_wr32(hdr + FMT_T_ROW, row0);
    fmt_wr16(hdr + FMT_T_COL, (uint16_t)col0);
    fmt_wr16(hdr + FMT_T_ROWS, (uint16_t)rows);
    fmt_wr16(hdr + FMT_T_COLS, (uint16_t)cols);
    fmt_wr16(hdr + FMT_T_QGROUP, KERN_QBLOCK);
    if ((c->rc = fmt_cw_put(w, hdr, sizeof hdr)))
        return 1;
    if ((c->rc = fmt_cw_put(w, w->payload, kern_tile_payload_size(ty, rows, cols))))
        return 1;
    return 0;
}

/* Write one (possibly fused) tile stream and fill its slots. */
int fmt_cw_stream(fmt_cw *w, const fmt_group *g, const fmt_tensor **src, unsigned layer,
                  uint8_t group_no, fmt_cw_slot *slots)
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
            return fmt_cw_fail_src(w, FMT_EUNSUP, "tensor %s: unsupported shape", t->name);
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
            fmt_cw_log(w, 0, "%s%s: %s -> %s tiles%s", t->name,
                       w->expert == 0 ? " (experts)" : "", fmt_dtype_name(t->dtype),
                       kern_type_name((enum kern_type)w->ts[i].tile),
                       w->ts[i].requant ? " (requantised as llama-quantize does)"
                       : w->ts[i].dt == t->dtype && w->ts[i].tile == fmt_dtype_tile(t->dtype)
                       ? " (blocks copied)" : "");
    }
    if ((rc = fmt_cw_pad(w, FMT_ALIGN)))
        return rc;
    uint64_t start = w->pos;
    long walked = fmt_plan_walk(c.mat, g->n, emit_tile, &c);
    for (unsigned i = 0; i < g->n; i++)
        fmt_cw_consumed(w, c.cur[i], c.cur_n[i]);
    if (walked < 0)
        return c.rc ? c.rc : fmt_cw_fail(w, FMT_EIO, "tile stream failed");
    for (unsigned i = 0; i < g->n; i++) {
        fmt_cw_slot *sl = &slots[g->slots[i]];
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

void fmt_cw_slot_store(uint8_t *p, const fmt_cw_slot *s)
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

const fmt_tensor *fmt_cw_need(fmt_cw *w, const fmt_src *src, int role, unsigned layer,
                              int *rc)
{
    const fmt_tensor *t = fmt_src_tensor(src, role, layer);
    if (!t && !*rc)
        *rc = fmt_cw_fail_src(w, FMT_EFORMAT, "missing tensor %s for layer %u",
                              fmt_role_name(role), layer);
    return t;
}
