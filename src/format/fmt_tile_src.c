/*
 * fmt_tile_src.c — what the .cflow writer packs one matrix's tiles from:
 * the tile type it gets, and the rows its tiles are cut from, one 128-row
 * stripe at a time.
 *
 * The type (fmt_tsrc_choose):
 *   no -q          the source's own type, kept bit for bit: every GGML type
 *                  with a tile type of its own (fmt_dtype_tile), F32, F16
 *                  and BF16 included.  A type cflow has no tile type for is
 *                  refused, naming the tensor and the type: nothing is
 *                  requantised behind the user's back.
 *   -q f32|f16|q8_0|q4_0   (force_type) cflow's uniform tile type;
 *                  kern_tile_pack converts the source rows itself.
 *   -q q4_k_m ...  (ftype) the GGML type of llama.cpp's mix (fmt_mix.c).
 *                  A matrix already of that type is copied; otherwise each
 *                  stripe is widened to floats (kern_src_dequant) and
 *                  quantised as llama-quantize does (kern_src_quant) into
 *                  a buffer of GGML rows, whose blocks the tiles copy.
 *
 * The rows (fmt_tsrc_stripe): before any tile of a stripe is packed,
 * every block of the stripe's source rows passes the kernels' check
 * (kern_src_check), so a damaged block is named by tensor, row, block and
 * field rather than failing a pack.  Memory: the requantised stripe (128
 * rows of the target type) and one row of floats per fused matrix.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "format/cflow_format.h"
#include "format/fmt_impl.h"

/* 1 when cflow can widen dt's rows to floats (a block type needs its
 * kernels' entry; F32, F16, BF16, Q8_0 and Q4_0 are read by kern_pack.c
 * itself). */
static int readable(int dt)
{
    int s = fmt_dtype_src(dt);
    return s >= 0 && (s <= KERN_SRC_GGML_Q4_0 || fmt_dtype_tile(dt) >= 0);
}

int fmt_tsrc_choose(fmt_tsrc *ts, const fmt_tensor *t, const fmt_convert_opts *o,
                    const fmt_mix_in *mi, const char *path, char *err, size_t errlen)
{
    char nm[64], have[192];
    fmt_safe_name(nm, t->name, strlen(t->name));
    ts->t = t;
    ts->dt = t->dtype;
    ts->requant = 0;
    if (o && o->force_type >= 0) {
        ts->tile = o->force_type;
    } else if (o && o->ftype != FMT_FT_NONE && mi) {
        ts->dt = fmt_mix_type(mi);
        if (ts->dt < 0)
            return fmt_bad(err, errlen, FMT_EUNSUP, path, "tensor '%s': no type of "
                           "llama.cpp's %s mix fits its %llu columns", nm,
                           fmt_ftype_name(o->ftype), (unsigned long long)t->ne[0]);
        ts->tile = fmt_dtype_tile(ts->dt);
        if (ts->tile < 0)
            return fmt_bad(err, errlen, FMT_EUNSUP, path, "tensor '%s': %s names %s for "
                           "it, which has no tile type in this build (it keeps %s)", nm,
                           fmt_ftype_name(o->ftype), fmt_dtype_name(ts->dt),
                           fmt_tile_types_built(have, sizeof have));
        ts->requant = ts->dt != t->dtype;
    } else {
        ts->tile = fmt_dtype_tile(t->dtype);
        if (ts->tile < 0)
            return fmt_bad(err, errlen, FMT_EUNSUP, path, "tensor '%s' has type %s, "
                           "which cflow has no tile type for (it keeps %s)", nm,
                           fmt_dtype_name(t->dtype), fmt_tile_types_built(have, sizeof have));
    }
    if ((ts->requant || ts->tile != fmt_dtype_tile(t->dtype)) && !readable(t->dtype))
        return fmt_bad(err, errlen, FMT_EUNSUP, path, "tensor '%s' has type %s, which "
                       "cflow cannot read to requantise (it reads %s)", nm,
                       fmt_dtype_name(t->dtype), fmt_tile_types_built(have, sizeof have));
    ts->enc = fmt_dtype_src(ts->dt);
    ts->rb = (size_t)fmt_dtype_size(ts->dt, t->ne[0]);
    ts->rows = NULL;
    return 0;
}

int fmt_tsrc_stripe(fmt_tsrc *ts, const uint8_t *src, unsigned rows, uint32_t row0,
                    const char *path, char *err, size_t errlen)
{
    const fmt_tensor *t = ts->t;
    const uint64_t n = t->ne[0];
    const size_t srb = (size_t)fmt_dtype_size(t->dtype, n);
    const unsigned blk = fmt_dtype_block(t->dtype);
    char nm[64];
    for (unsigned r = 0; r < rows; r++) {
        size_t b;
        const char *what;
        if (kern_src_check((enum kern_src)fmt_dtype_src(t->dtype), src + r * srb, n, &b,
                           &what)) {
            fmt_safe_name(nm, t->name, strlen(t->name));
            if (blk == 1)
                return fmt_bad(err, errlen, FMT_EFORMAT, path, "tensor '%s' (%s): row %u "
                               "column %zu: bad %s (not finite)", nm,
                               fmt_dtype_name(t->dtype), row0 + r, b, what);
            return fmt_bad(err, errlen, FMT_EFORMAT, path, "tensor '%s' (%s): row %u block "
                           "%zu (columns %zu-%zu): bad %s", nm, fmt_dtype_name(t->dtype),
                           row0 + r, b, b * blk, b * blk + blk - 1, what);
        }
    }
    if (!ts->requant) {
        ts->rows = src;
        return 0;
    }
    size_t need = (size_t)rows * ts->rb;
    if (ts->cap < need) {
        uint8_t *p = realloc(ts->buf, need);
        if (!p)
            return fmt_bad(err, errlen, FMT_ENOMEM, path, "out of memory");
        ts->buf = p;
        ts->cap = need;
    }
    if (ts->fcap < n) {
        float *p = realloc(ts->f, (size_t)n * sizeof *p);
        if (!p)
            return fmt_bad(err, errlen, FMT_ENOMEM, path, "out of memory");
        ts->f = p;
        ts->fcap = (size_t)n;
    }
    for (unsigned r = 0; r < rows; r++) {
        if (kern_src_dequant((enum kern_src)fmt_dtype_src(t->dtype), src + r * srb,
                             (size_t)n, ts->f) ||
            kern_src_quant((enum kern_src)ts->enc, ts->f, (size_t)n, ts->buf + r * ts->rb)) {
            fmt_safe_name(nm, t->name, strlen(t->name));
            return fmt_bad(err, errlen, FMT_EFORMAT, path, "tensor '%s': row %u does not "
                           "quantise to %s (a scale out of its range)", nm, row0 + r,
                           fmt_dtype_name(ts->dt));
        }
    }
    ts->rows = ts->buf;
    return 0;
}

const uint8_t *fmt_tsrc_at(const fmt_tsrc *ts, unsigned r, uint32_t col0)
{
    return ts->rows + r * ts->rb + fmt_dtype_size(ts->dt, col0);
}

void fmt_tsrc_free(fmt_tsrc *ts)
{
    free(ts->buf);
    free(ts->f);
    memset(ts, 0, sizeof *ts);
}
