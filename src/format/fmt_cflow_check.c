/*
 * fmt_cflow_check.c — the checks a tile must pass before its bytes are
 * used: its 32-byte header names the stream position the layout puts it
 * at (layer, matrix, expert, first row and column, shape, quant group),
 * and its payload's scales and weights are finite.
 *
 * The open runs them over every tile it maps (fmt_cflow_read.c).  An
 * engine that reads the experts from the file itself (O_DIRECT into a RAM
 * cache) opens with FMT_OPEN_LAZY_EXPERTS instead: the expert banks'
 * tiles are laid out from the geometry without being read, so the open
 * reads only the dense weights (about 1.6 of a 32.5 GB Qwen3-30B-A3B at
 * Q8_0) and the first token is not held up by a read of the whole bank.
 * Each expert is then checked here, from the bytes the engine read
 * (fmt_model_expert_check), before its first use; or all of them at once
 * through the map (fmt_model_check_experts) for an engine that switches
 * to reading them in place.  A refused tile is the same one-line error
 * either way, naming the file and the tile's offset.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>

#include "format/cflow_format.h"
#include "format/fmt_impl.h"
#include "format/fmt_layout.h"

int fmt_bad(char *err, size_t errlen, int code, const char *path, const char *fmt, ...)
{
    va_list ap;
    int n = snprintf(err, errlen, "%s: ", path);
    if (n >= 0 && (size_t)n < errlen) {
        va_start(ap, fmt);
        vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return code;
}

int fmt_tile_check(const char *path, unsigned entry, const fmt_tile *t, const uint8_t *h,
                   uint64_t foff, char *err, size_t errlen)
{
    const int head_ok =
        kern_ld_u16(h + FMT_T_LAYER) == (uint16_t)entry && h[FMT_T_MATRIX] == t->matrix &&
        h[FMT_T_EXPERT] == t->expert && kern_ld_u32(h + FMT_T_ROW) == t->row0 &&
        kern_ld_u16(h + FMT_T_COL) == t->col0 && kern_ld_u16(h + FMT_T_ROWS) == t->rows &&
        kern_ld_u16(h + FMT_T_COLS) == t->cols && kern_ld_u16(h + FMT_T_QGROUP) == KERN_QBLOCK;
    if (head_ok &&
        kern_tile_finite((enum kern_type)t->type, t->rows, t->cols, h + FMT_TILE_HEADER_SIZE))
        return 0;
    char ex[24] = "";
    if (t->expert != FMT_NO_EXPERT)
        snprintf(ex, sizeof ex, " expert %u", t->expert);
    if (!head_ok)
        return fmt_bad(err, errlen, FMT_EFORMAT, path,
                       "tile header at offset %llu does not match the stream "
                       "(expected layer %u%s matrix %u row %u col %u %ux%u)",
                       (unsigned long long)foff, entry, ex, t->matrix, t->row0, t->col0,
                       t->rows, t->cols);
    return fmt_bad(err, errlen, FMT_EFORMAT, path,
                   "non-finite scale or weight in tile at offset %llu "
                   "(layer %u%s matrix %u row %u col %u)",
                   (unsigned long long)foff, entry, ex, t->matrix, t->row0, t->col0);
}

int fmt_model_expert_check(const fmt_model *m, unsigned layer, unsigned e,
                           const uint8_t *data, char *err, size_t errlen)
{
    const fmt_stream *st[2];
    uint64_t off = 0, size = 0;
    if (fmt_model_expert(m, layer, e, &st[0], &st[1], &off, NULL))
        return fmt_bad(err, errlen, FMT_EARG, fmt_model_path(m), "no expert %u in layer %u",
                       e, layer);
    const uint8_t *map = fmt_model_map(m, &size);
    for (int g = 0; g < 2; g++)
        for (uint32_t i = 0; i < st[g]->n_tiles; i++) {
            const fmt_tile *t = &st[g]->tiles[i];
            /* the header sits just before the payload the layout gave */
            uint64_t foff = (uint64_t)((const uint8_t *)t->payload - map) - FMT_TILE_HEADER_SIZE;
            int rc = fmt_tile_check(fmt_model_path(m), layer, t, data + (foff - off), foff, err,
                                    errlen);
            if (rc)
                return rc;
        }
    return 0;
}

int fmt_model_check_experts(fmt_model *m, char *err, size_t errlen)
{
    const fmt_hparams *hp = fmt_model_hparams(m);
    uint64_t size = 0;
    const uint8_t *map = fmt_model_map(m, &size);
    if (!fmt_model_experts_unchecked(m))
        return 0;
    for (unsigned l = 0; l < hp->n_layers; l++)
        for (unsigned e = 0; e < hp->n_experts; e++) {
            uint64_t off = 0;
            if (fmt_model_expert(m, l, e, NULL, NULL, &off, NULL))
                continue;                /* a layer without experts */
            int rc = fmt_model_expert_check(m, l, e, map + off, err, errlen);
            if (rc)
                return rc;
        }
    fmt_model_experts_checked(m);
    return 0;
}
