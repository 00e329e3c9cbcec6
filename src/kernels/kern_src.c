/*
 * kern_src.c — rows of the source encodings (enum kern_src) as llama.cpp
 * writes and checks them: the quantisers `llama-quantize` runs (ggml's
 * quantize_row_*_ref, what it writes without an importance matrix) and
 * the block checks, one row of n values at a time.  kern_pack.c widens
 * rows to floats (kern_src_dequant); the format module uses the three to
 * read any GGML tensor, to write llama.cpp's blocks for `convert -q` and
 * `synth --gguf -q`, and to name the field of a damaged block.
 *
 * The block types (kern_type_ops, kern_lq.c and kern_kq.c) bring their own
 * quant and check; this file adds what those entries do not cover:
 *   F32    copied; finite values only
 *   F16    each value rounded to the nearest half, ties to even
 *          (GGML_FP32_TO_FP16); a value that overflows to infinity is
 *          refused, not written
 *   Q8_0   ggml's quantize_row_q8_0_ref: d = amax / 127, q = roundf(x * (1/d))
 *   Q4_0   ggml's quantize_row_q4_0_ref: d = max / -8 (max: the value of
 *          largest magnitude, sign kept), q = min(15, (int8)(x * (1/d) + 8.5))
 * The Q8_0 and Q4_0 ones are not kern_tile_pack's report quantisers: a
 * model quantised through these has llama.cpp's bytes.
 */
#include "config.h"

#include <math.h>
#include <string.h>

#include "kernels/kern.h"
#include "kernels/kern_impl.h"

/* The entry of a block type that can quantise and check (NULL otherwise). */
static const kern_type_ops *src_ops(enum kern_src src)
{
    unsigned cols = kern_src_block(src, NULL);
    if (cols == 0 || src == KERN_SRC_F32 || src == KERN_SRC_F16 ||
        src == KERN_SRC_GGML_Q8_0 || src == KERN_SRC_GGML_Q4_0)
        return NULL;
    for (int t = 0; t < KERN_NTYPES; t++)
        if (kern_type_src((enum kern_type)t) == src) {
            const kern_type_ops *o = kern_type_ops_of((enum kern_type)t);
            return o && o->put && o->get && o->dequant && o->quant && o->check &&
                   o->blk_cols == cols ? o : NULL;
        }
    return NULL;
}

static int f16_bad(uint16_t h) { return (h & 0x7C00u) == 0x7C00u; }

/* ggml's quantize_row_q8_0_ref, one block of 32. */
static int quant_q8_0(const float *x, uint8_t *y)
{
    float amax = 0.0f;
    for (int j = 0; j < 32; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint16_t h = kern_f2h(d);
    if (f16_bad(h))
        return -1;
    memcpy(y, &h, 2);
    for (int j = 0; j < 32; j++)
        y[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
    return 0;
}

/* ggml's quantize_row_q4_0_ref, one block of 32. */
static int quant_q4_0(const float *x, uint8_t *y)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++)
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint16_t h = kern_f2h(d);
    if (f16_bad(h))
        return -1;
    memcpy(y, &h, 2);
    for (int j = 0; j < 16; j++) {
        int q0 = (int8_t)(x[j] * id + 8.5f), q1 = (int8_t)(x[16 + j] * id + 8.5f);
        q0 = q0 < 15 ? q0 : 15;
        q1 = q1 < 15 ? q1 : 15;
        y[2 + j] = (uint8_t)((unsigned)q0 | (unsigned)q1 << 4);
    }
    return 0;
}

int kern_src_quant(enum kern_src src, const float *x, size_t n, void *out)
{
    unsigned bytes, cols = kern_src_block(src, &bytes);
    uint8_t *y = out;
    if (cols == 0 || n % cols)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return -1;
    switch (src) {
    case KERN_SRC_F32:
        memcpy(out, x, n * sizeof *x);
        return 0;
    case KERN_SRC_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h = kern_f2h(x[i]);
            if (f16_bad(h))
                return -1;
            memcpy(y + 2 * i, &h, 2);
        }
        return 0;
    case KERN_SRC_GGML_Q8_0:
    case KERN_SRC_GGML_Q4_0:
        for (size_t b = 0; b < n / 32; b++)
            if ((src == KERN_SRC_GGML_Q8_0 ? quant_q8_0 : quant_q4_0)(x + 32 * b,
                                                                      y + bytes * b))
                return -1;
        return 0;
    default: {
        const kern_type_ops *o = src_ops(src);
        if (!o)
            return -1;
        /* a row at a time of at most 64 blocks keeps nblk within unsigned */
        for (size_t b = 0; b < n / cols; b += 64) {
            size_t nb = n / cols - b < 64 ? n / cols - b : 64;
            if (o->quant(x + b * cols, (unsigned)nb, y + b * bytes) < 0)
                return -1;
        }
        return 0;
    }
    }
}

/* The first of n values (F32, F16, BF16) that is not finite, or n. */
static size_t first_bad_value(enum kern_src src, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (src == KERN_SRC_F32 ? !isfinite(kern_ld_f32(p + 4 * i))
            : src == KERN_SRC_F16 ? f16_bad(kern_ld_u16(p + 2 * i))
                                  : (kern_ld_u16(p + 2 * i) & 0x7F80u) == 0x7F80u)
            return i;
    }
    return n;
}

int kern_src_check(enum kern_src src, const void *row, size_t n, size_t *blk,
                   const char **what)
{
    unsigned bytes, cols = kern_src_block(src, &bytes);
    const uint8_t *p = row;
    const char *w = "shape";
    size_t b = 0, nb = cols ? n / cols : 0;
    const kern_type_ops *o = src_ops(src);
    if (cols == 0 || n % cols) {
        /* no block of this source cuts a row */
    } else if (src == KERN_SRC_F32 || src == KERN_SRC_F16 || src == KERN_SRC_BF16) {
        w = "weight";
        if ((b = first_bad_value(src, p, n)) == n)
            return 0;
    } else if (src == KERN_SRC_GGML_Q8_0 || src == KERN_SRC_GGML_Q4_0) {
        w = "d";
        while (b < nb && !f16_bad(kern_ld_u16(p + (size_t)bytes * b)))
            b++;
        if (b == nb)
            return 0;
    } else if (o) {
        /* block by block, so that the first bad one is named */
        while (b < nb && o->check(p + (size_t)bytes * b, 1, &w) == 0)
            b++;
        if (b == nb)
            return 0;
    } else {
        w = "type";
    }
    if (blk)
        *blk = b;
    if (what)
        *what = w;
    return -1;
}
