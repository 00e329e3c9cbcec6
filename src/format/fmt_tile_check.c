/*
 * fmt_tile_check.c — the check a tile must pass before its bytes are
 * used: its 32-byte header names the stream position the layout puts it
 * at (layer, matrix, expert, first row and column, shape, quant group),
 * and its payload's scales and weights are finite.  The open runs it on
 * every tile it reads (fmt_cflow_read.c); a lazily opened model's experts
 * run it when their bytes are read (fmt_cflow_check.c).  It knows tiles,
 * not models, so both can use it.
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

const char *fmt_matrix_name(int m)
{
    static const char *const n[FMT_NMATRIX] = { "q", "k", "v", "o", "gate", "up", "down",
                                                "router", "exp_gate", "exp_up", "exp_down",
                                                "token_embd", "output", "sh_gate",
                                                "sh_up", "sh_down", "k_b", "v_b", "q_b" };
    return m >= 0 && m < FMT_NMATRIX ? n[m] : "?";
}

int fmt_tile_check(const char *path, unsigned entry, const fmt_tile *t, const uint8_t *h,
                   uint64_t foff, char *err, size_t errlen)
{
    unsigned bad_row = 0;
    const char *what = "";
    const int head_ok =
        kern_ld_u16(h + FMT_T_LAYER) == (uint16_t)entry && h[FMT_T_MATRIX] == t->matrix &&
        h[FMT_T_EXPERT] == t->expert && kern_ld_u32(h + FMT_T_ROW) == t->row0 &&
        kern_ld_u16(h + FMT_T_COL) == t->col0 && kern_ld_u16(h + FMT_T_ROWS) == t->rows &&
        kern_ld_u16(h + FMT_T_COLS) == t->cols && kern_ld_u16(h + FMT_T_QGROUP) == KERN_QBLOCK;
    if (head_ok && kern_tile_check((enum kern_type)t->type, t->rows, t->cols,
                                   h + FMT_TILE_HEADER_SIZE, &bad_row, &what) == 0)
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
    char where[48] = "";
    if (t->matrix != FMT_M_TOK_EMBD && t->matrix != FMT_M_OUTPUT)
        snprintf(where, sizeof where, "layer %u%s ", entry, ex);
    return fmt_bad(err, errlen, FMT_EFORMAT, path,
                   "bad %s in tile at offset %llu (%s; %s%s, row %u, tile at row %u "
                   "col %u)", what, (unsigned long long)foff,
                   kern_type_name((enum kern_type)t->type), where, fmt_matrix_name(t->matrix),
                   t->row0 + bad_row, t->row0, t->col0);
}
