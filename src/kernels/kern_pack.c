/*
 * kern_pack.c — names, payload sizes, and the conversion of source rows to
 * and from tile payloads (the layout is specified in kern.h).
 *
 * Packing works one source row at a time.  A row arrives either as floats
 * (F32, F16 and BF16 sources are widened exactly; GGML blocks of another
 * type are dequantised exactly as GGML does: d * (q - 8) for Q4_0, d * q for
 * Q8_0) or, when the source blocks are already of the destination's
 * quantisation, as the GGML blocks themselves, whose scale and quant bytes
 * are moved without arithmetic (Q8_0 quants gain the +128 offset).
 *
 * Quantising floats follows the report:
 *   Q4_0: s = max|w| / 7,   q = round(w / s) + 8 clipped to [0, 15]
 *   Q8_0: d = max|w| / 127, q = round(w / d)
 * with round() half away from zero (roundf), s = 0 giving q = 8 (Q4_0) or
 * 0 (Q8_0), and the scale stored as the nearest f16.
 *
 * Padding rows and columns are written as exact zeros (Q4_0 nibble 8, Q8_0
 * byte 128, scale 0, F16/F32 +0.0).  When a tile ends inside a GGML block
 * (C not a multiple of 32) the block's scale is kept and its quants past C
 * become zeros, so the real columns stay bit-exact.
 *
 * kern_tile_pack never produces a payload that kern_tile_finite rejects: a
 * non-finite source value, or a weight or scale that would overflow f16,
 * makes it return -1 (for every destination type, so a broken checkpoint is
 * caught when converting rather than at run time).
 *
 * "The report" (with its section numbers) is the Pipeline-Native
 * Transformers report.
 */
#include "config.h"

#include <math.h>
#include <string.h>
#include <strings.h>

#include "kernels/kern.h"
#include "kernels/kern_impl.h"

#define GGML_Q8_BYTES 34    /* f16 d, int8 qs[32] */
#define GGML_Q4_BYTES 18    /* f16 d, uint8 qs[16] */

/* ---- names ---------------------------------------------------------------- */

static const char *const type_names[KERN_NTYPES] = {
    [KERN_F32] = "f32", [KERN_F16] = "f16",
    [KERN_Q8_0] = "q8_0", [KERN_Q4_0] = "q4_0",
    [KERN_BF16] = "bf16", [KERN_Q4_1] = "q4_1", [KERN_Q5_0] = "q5_0",
    [KERN_Q5_1] = "q5_1", [KERN_IQ4_NL] = "iq4_nl", [KERN_MXFP4] = "mxfp4",
    [KERN_Q2_K] = "q2_k", [KERN_Q3_K] = "q3_k", [KERN_Q4_K] = "q4_k",
    [KERN_Q5_K] = "q5_k", [KERN_Q6_K] = "q6_k", [KERN_IQ4_XS] = "iq4_xs",
};

/* Each source encoding: its block (columns, bytes) and the tile type that
 * keeps it bit for bit (ggml-common.h's structs). */
static const struct { unsigned cols, bytes; enum kern_type type; }
src_info[KERN_NSRC] = {
    [KERN_SRC_F32]          = { 1, 4, KERN_F32 },
    [KERN_SRC_F16]          = { 1, 2, KERN_F16 },
    [KERN_SRC_BF16]         = { 1, 2, KERN_BF16 },
    [KERN_SRC_GGML_Q8_0]    = { 32, 34, KERN_Q8_0 },
    [KERN_SRC_GGML_Q4_0]    = { 32, 18, KERN_Q4_0 },
    [KERN_SRC_GGML_Q4_1]    = { 32, 20, KERN_Q4_1 },
    [KERN_SRC_GGML_Q5_0]    = { 32, 22, KERN_Q5_0 },
    [KERN_SRC_GGML_Q5_1]    = { 32, 24, KERN_Q5_1 },
    [KERN_SRC_GGML_IQ4_NL]  = { 32, 18, KERN_IQ4_NL },
    [KERN_SRC_GGML_MXFP4]   = { 32, 17, KERN_MXFP4 },
    [KERN_SRC_GGML_Q2_K]    = { 256, 84, KERN_Q2_K },
    [KERN_SRC_GGML_Q3_K]    = { 256, 110, KERN_Q3_K },
    [KERN_SRC_GGML_Q4_K]    = { 256, 144, KERN_Q4_K },
    [KERN_SRC_GGML_Q5_K]    = { 256, 176, KERN_Q5_K },
    [KERN_SRC_GGML_Q6_K]    = { 256, 210, KERN_Q6_K },
    [KERN_SRC_GGML_IQ4_XS]  = { 256, 136, KERN_IQ4_XS },
};

unsigned kern_src_block(enum kern_src src, unsigned *bytes)
{
    if ((unsigned)src >= KERN_NSRC)
        return 0;
    if (bytes)
        *bytes = src_info[src].bytes;
    return src_info[src].cols;
}

enum kern_src kern_type_src(enum kern_type t)
{
    for (int i = 0; i < KERN_NSRC; i++)
        if (src_info[i].type == t)
            return (enum kern_src)i;
    return KERN_SRC_F32;
}

unsigned kern_type_block(enum kern_type t)
{
    if ((unsigned)t >= KERN_NTYPES)
        return 0;
    return kern_src_block(kern_type_src(t), NULL);
}

const kern_type_ops *kern_type_ops_of(enum kern_type t)
{
    const kern_type_ops *o = kern_lq_type(t);
    return o ? o : kern_kq_type(t);
}

/* The entry of a block type that can hold payloads (NULL otherwise). */
static const kern_type_ops *block_ops(enum kern_type t)
{
    const kern_type_ops *o = (unsigned)t < KERN_NTYPES ? kern_type_ops_of(t)
                                                       : NULL;
    return o && o->put && o->get && o->dequant && o->quant && o->check ? o
                                                                        : NULL;
}

static const char *const isa_names[KERN_NISA] = {
    [KERN_ISA_SCALAR] = "scalar", [KERN_ISA_AVX2] = "avx2",
    [KERN_ISA_AVX512] = "avx512", [KERN_ISA_AVX512_VNNI] = "avx512-vnni",
};

const char *kern_type_name(enum kern_type t)
{
    return (unsigned)t < KERN_NTYPES ? type_names[t] : "unknown";
}

int kern_type_from_name(const char *s)
{
    if (!s)
        return -1;
    for (int t = 0; t < KERN_NTYPES; t++)
        if (strcasecmp(s, type_names[t]) == 0)
            return t;
    return -1;
}

const char *kern_isa_name(enum kern_isa isa)
{
    return (unsigned)isa < KERN_NISA ? isa_names[isa] : "unknown";
}

/* ---- half / bfloat conversions -------------------------------------------- */

uint16_t kern_fp32_to_fp16(float f) { return kern_f2h(f); }
float    kern_fp16_to_fp32(uint16_t h) { return kern_h2f(h); }

float kern_bf16_to_fp32(uint16_t h)
{
    return kern_bits_f32((uint32_t)h << 16);
}

/* ---- sizes ---------------------------------------------------------------- */

static int shape_ok(enum kern_type t, unsigned rows, unsigned cols)
{
    return (unsigned)t < KERN_NTYPES && rows >= 1 && rows <= KERN_TILE_ROWS &&
           cols >= 1 && cols <= KERN_TILE_COLS &&
           (t <= KERN_Q4_0 || block_ops(t));
}

/* The bytes of a tile row's blocks, at most (BF16: 256 x 2; Q6_K 210). */
#define KERN_ROW_BLOCK_BYTES (KERN_TILE_COLS * 2)

/* Blocks a row of a block type's tile holds. */
static unsigned n_blocks(const kern_type_ops *o, unsigned cols)
{
    return (cols + o->blk_cols - 1) / o->blk_cols;
}

size_t kern_tile_payload_size(enum kern_type t, unsigned rows, unsigned cols)
{
    if (!shape_ok(t, rows, cols))
        return 0;
    kern_geom g = kern_geom_of(rows, cols);
    size_t cells = (size_t)g.rp * g.cp;
    switch (t) {
    case KERN_F32:  return cells * 4;
    case KERN_F16:  return cells * 2;
    case KERN_Q8_0: return g.scale_bytes + cells;
    case KERN_Q4_0: return g.scale_bytes + cells / 2;
    default: {
        const kern_type_ops *o = block_ops(t);
        return (size_t)g.rp * n_blocks(o, cols) * o->blk_bytes;
    }
    }
}

/* ---- writing one row ------------------------------------------------------ */

static void put_scale(const kern_geom *g, uint8_t *pl, unsigned r, unsigned b,
                      uint16_t h)
{
    memcpy(pl + 2 * kern_idx_scale(g, r, b), &h, 2);
}

/* Q8_0 quant q (signed) of (r, c). */
static void put_q8(const kern_geom *g, uint8_t *pl, unsigned r, unsigned c,
                   int q)
{
    pl[kern_off_q8(g, r, c)] = (uint8_t)(q + 128);
}

/* Q4_0 nibble u (0..15, offset 8) of (r, c); the other nibble is kept. */
static void put_q4(const kern_geom *g, uint8_t *pl, unsigned r, unsigned c,
                   unsigned u)
{
    int hi;
    size_t off = kern_off_q4(g, r, c, &hi);
    if (hi)
        pl[off] = (uint8_t)((pl[off] & 0x0Fu) | (u << 4));
    else
        pl[off] = (uint8_t)((pl[off] & 0xF0u) | u);
}

/* Quantise w[0..32) (zeros past the tile's columns) into row r, block b. */
static int quant_block(enum kern_type t, const kern_geom *g, uint8_t *pl,
                       unsigned r, unsigned b, const float *w)
{
    float amax = 0.0f;
    for (int k = 0; k < KERN_QBLOCK; k++)
        if (fabsf(w[k]) > amax)
            amax = fabsf(w[k]);

    if (t == KERN_Q4_0) {
        float s = amax / 7.0f;
        uint16_t sh = kern_f2h(s);
        if ((sh & 0x7C00u) == 0x7C00u)
            return -1;                  /* scale overflows f16 */
        put_scale(g, pl, r, b, sh);
        for (int k = 0; k < KERN_QBLOCK; k++) {
            float v = s != 0.0f ? roundf(w[k] / s) + 8.0f : 8.0f;
            v = v < 0.0f ? 0.0f : v > 15.0f ? 15.0f : v;
            put_q4(g, pl, r, KERN_QBLOCK * b + (unsigned)k, (unsigned)v);
        }
    } else {
        float d = amax / 127.0f;
        uint16_t dh = kern_f2h(d);
        if ((dh & 0x7C00u) == 0x7C00u)
            return -1;
        put_scale(g, pl, r, b, dh);
        for (int k = 0; k < KERN_QBLOCK; k++) {
            float v = d != 0.0f ? roundf(w[k] / d) : 0.0f;
            v = v < -127.0f ? -127.0f : v > 127.0f ? 127.0f : v;
            put_q8(g, pl, r, KERN_QBLOCK * b + (unsigned)k, (int)v);
        }
    }
    return 0;
}

/* Store the floats w[0..cols) as row r of a payload of type t. */
static int put_row_f32(enum kern_type t, const kern_geom *g, unsigned cols,
                       uint8_t *pl, unsigned r, const float *w)
{
    for (unsigned c = 0; c < cols; c++)
        if (!isfinite(w[c]))
            return -1;

    switch (t) {
    case KERN_F32:
        for (unsigned c = 0; c < cols; c++)
            memcpy(pl + 4 * kern_idx_dense(g, r, c), &w[c], 4);
        return 0;
    case KERN_F16:
        for (unsigned c = 0; c < cols; c++) {
            uint16_t h = kern_f2h(w[c]);
            if ((h & 0x7C00u) == 0x7C00u)
                return -1;              /* overflows f16 */
            memcpy(pl + 2 * kern_idx_dense(g, r, c), &h, 2);
        }
        return 0;
    case KERN_Q8_0:
    case KERN_Q4_0:
        for (unsigned b = 0; b < g->nb; b++) {
            float blk[KERN_QBLOCK];
            for (unsigned k = 0; k < KERN_QBLOCK; k++) {
                unsigned c = KERN_QBLOCK * b + k;
                blk[k] = c < cols ? w[c] : 0.0f;
            }
            if (quant_block(t, g, pl, r, b, blk) < 0)
                return -1;
        }
        return 0;
    default:
        return -1;
    }
}

/* Move GGML blocks of the destination's own type into row r, bit-exactly. */
static int put_row_ggml(enum kern_type t, const kern_geom *g, unsigned cols,
                        uint8_t *pl, unsigned r, const uint8_t *row)
{
    size_t bsz = t == KERN_Q8_0 ? GGML_Q8_BYTES : GGML_Q4_BYTES;
    for (unsigned b = 0; b < g->nb; b++) {
        const uint8_t *blk = row + b * bsz;
        uint16_t d = kern_ld_u16(blk);
        if ((d & 0x7C00u) == 0x7C00u)
            return -1;                  /* inf or NaN scale */
        put_scale(g, pl, r, b, d);
        for (unsigned k = 0; k < KERN_QBLOCK; k++) {
            unsigned c = KERN_QBLOCK * b + k;
            if (c >= cols)
                break;                  /* padding stays zero */
            if (t == KERN_Q8_0)
                put_q8(g, pl, r, c, (int8_t)blk[2 + k]);
            else
                put_q4(g, pl, r, c, k < 16 ? blk[2 + k] & 0x0Fu
                                           : blk[2 + k - 16] >> 4);
        }
    }
    return 0;
}

/* Widen one source row to floats (exactly; GGML blocks as GGML dequantises). */
static void get_row_f32(enum kern_src st, const uint8_t *row, unsigned cols,
                        float *w)
{
    switch (st) {
    case KERN_SRC_F32:
        for (unsigned c = 0; c < cols; c++)
            w[c] = kern_ld_f32(row + 4 * (size_t)c);
        break;
    case KERN_SRC_F16:
        for (unsigned c = 0; c < cols; c++)
            w[c] = kern_h2f(kern_ld_u16(row + 2 * (size_t)c));
        break;
    case KERN_SRC_BF16:
        for (unsigned c = 0; c < cols; c++)
            w[c] = kern_bf16_to_fp32(kern_ld_u16(row + 2 * (size_t)c));
        break;
    case KERN_SRC_GGML_Q8_0:
        for (unsigned c = 0; c < cols; c++) {
            const uint8_t *blk = row + (c / 32) * GGML_Q8_BYTES;
            float d = kern_h2f(kern_ld_u16(blk));
            w[c] = (float)(int8_t)blk[2 + c % 32] * d;
        }
        break;
    case KERN_SRC_GGML_Q4_0:
        for (unsigned c = 0; c < cols; c++) {
            const uint8_t *blk = row + (c / 32) * GGML_Q4_BYTES;
            float d = kern_h2f(kern_ld_u16(blk));
            unsigned k = c % 32;
            int q = k < 16 ? blk[2 + k] & 0x0F : blk[2 + k - 16] >> 4;
            w[c] = (float)(q - 8) * d;
        }
        break;
    default: {
        /* a block type's own dequantiser, whole blocks at a time */
        const kern_type_ops *o = block_ops(src_info[st].type);
        float blk[256];
        for (unsigned c0 = 0; o && c0 < cols; c0 += o->blk_cols) {
            o->dequant(row + (size_t)(c0 / o->blk_cols) * o->blk_bytes, 1,
                       blk);
            for (unsigned k = 0; k < o->blk_cols && c0 + k < cols; k++)
                w[c0 + k] = blk[k];
        }
        break;
    }
    }
}

int kern_src_dequant(enum kern_src src, const void *row, size_t n, float *out)
{
    unsigned cols = kern_src_block(src, NULL);
    if (cols == 0 || n % cols || n > UINT32_MAX ||
        (cols > 1 && src > KERN_SRC_GGML_Q4_0 && !block_ops(src_info[src].type)))
        return -1;
    get_row_f32(src, row, (unsigned)n, out);
    return 0;
}

/* Row r of a block type's payload from a source row: the blocks as they
 * are when the source is the type's own (whole blocks only), else the
 * row widened to floats, zero-padded to whole blocks and quantised as
 * ggml quantises; the blocks must pass the type's check. */
static int put_row_blocks(const kern_type_ops *o,
                          unsigned rp, unsigned cols, uint8_t *pl, unsigned r,
                          enum kern_src st, const uint8_t *row)
{
    unsigned nb = n_blocks(o, cols);
    uint8_t blocks[KERN_ROW_BLOCK_BYTES];   /* the largest row of blocks */
    const uint8_t *b = blocks;
    if ((size_t)nb * o->blk_bytes > sizeof blocks)
        return -1;
    if (st == o->src) {
        if (cols % o->blk_cols)
            return -1;                  /* a block cut by the tile's edge */
        b = row;
    } else {
        float w[KERN_TILE_COLS] = { 0 };
        get_row_f32(st, row, cols, w);
        for (unsigned c = 0; c < cols; c++)
            if (!isfinite(w[c]))
                return -1;
        if (o->quant(w, nb, blocks) < 0)
            return -1;
    }
    if (o->check(b, nb, NULL) < 0)
        return -1;
    o->put(pl, rp, nb, r, b);
    return 0;
}

/* Write the exact-zero padding of a fresh payload. */
static void zero_payload(enum kern_type t, const kern_geom *g, uint8_t *pl,
                         size_t size)
{
    memset(pl, 0, size);                /* f32/f16 zeros, scales 0 */
    if (t == KERN_Q8_0)
        memset(pl + g->scale_bytes, 128, size - g->scale_bytes);
    else if (t == KERN_Q4_0)
        memset(pl + g->scale_bytes, 0x88, size - g->scale_bytes);
}

int kern_tile_pack(enum kern_type dst, unsigned rows, unsigned cols,
                   enum kern_src src_type, const void *src, size_t row_stride,
                   void *payload)
{
    if (!shape_ok(dst, rows, cols) || !src || !payload ||
        (unsigned)src_type >= KERN_NSRC)
        return -1;

    kern_geom g = kern_geom_of(rows, cols);
    uint8_t *pl = payload;
    const uint8_t *s = src;
    zero_payload(dst, &g, pl, kern_tile_payload_size(dst, rows, cols));

    const kern_type_ops *o = block_ops(dst);
    if (o) {
        for (unsigned r = 0; r < rows; r++)
            if (put_row_blocks(o, g.rp, cols, pl, r, src_type,
                               s + r * row_stride) < 0)
                return -1;
        return 0;
    }

    int same = (src_type == KERN_SRC_GGML_Q8_0 && dst == KERN_Q8_0) ||
               (src_type == KERN_SRC_GGML_Q4_0 && dst == KERN_Q4_0);
    for (unsigned r = 0; r < rows; r++) {
        const uint8_t *row = s + r * row_stride;
        int rc;
        if (same) {
            rc = put_row_ggml(dst, &g, cols, pl, r, row);
        } else if (src_type == KERN_SRC_F16 && dst == KERN_F16) {
            /* copy the halves as they are (no round trip through float) */
            rc = 0;
            for (unsigned c = 0; c < cols && rc == 0; c++) {
                uint16_t h = kern_ld_u16(row + 2 * (size_t)c);
                if ((h & 0x7C00u) == 0x7C00u)
                    rc = -1;
                memcpy(pl + 2 * kern_idx_dense(&g, r, c), &h, 2);
            }
        } else {
            float w[KERN_TILE_COLS];
            get_row_f32(src_type, row, cols, w);
            rc = put_row_f32(dst, &g, cols, pl, r, w);
        }
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* ---- reading -------------------------------------------------------------- */

/* Weight (r, c) of a payload, dequantised. */
static float weight_at(enum kern_type t, const kern_geom *g, const uint8_t *pl,
                       unsigned r, unsigned c)
{
    switch (t) {
    case KERN_F32:
        return kern_ld_f32(pl + 4 * kern_idx_dense(g, r, c));
    case KERN_F16:
        return kern_h2f(kern_ld_u16(pl + 2 * kern_idx_dense(g, r, c)));
    case KERN_Q8_0: {
        float d = kern_h2f(kern_ld_u16(pl + 2 * kern_idx_scale(g, r, c / 32)));
        int q = (int)pl[kern_off_q8(g, r, c)] - 128;
        return (float)q * d;
    }
    case KERN_Q4_0: {
        float d = kern_h2f(kern_ld_u16(pl + 2 * kern_idx_scale(g, r, c / 32)));
        int hi;
        uint8_t byte = pl[kern_off_q4(g, r, c, &hi)];
        int q = hi ? byte >> 4 : byte & 0x0F;
        return (float)(q - 8) * d;
    }
    default:
        return 0.0f;
    }
}

void kern_tile_row(enum kern_type t, unsigned rows, unsigned cols,
                   const void *payload, unsigned r, float *dst)
{
    if (!shape_ok(t, rows, cols) || r >= rows)
        return;
    kern_geom g = kern_geom_of(rows, cols);
    const kern_type_ops *o = block_ops(t);
    if (o) {
        unsigned nb = n_blocks(o, cols);
        uint8_t blocks[KERN_ROW_BLOCK_BYTES];
        float w[KERN_TILE_COLS + 256];
        o->get(payload, g.rp, nb, r, blocks);
        o->dequant(blocks, nb, w);
        memcpy(dst, w, (size_t)cols * sizeof(float));
        return;
    }
    for (unsigned c = 0; c < cols; c++)
        dst[c] = weight_at(t, &g, payload, r, c);
}

int kern_tile_blocks(enum kern_type t, unsigned rows, unsigned cols,
                     const void *payload, unsigned r, void *blocks)
{
    const kern_type_ops *o = block_ops(t);
    if (!shape_ok(t, rows, cols) || r >= rows || t == KERN_F32 || t == KERN_F16 ||
        cols % kern_type_block(t))
        return -1;
    kern_geom g = kern_geom_of(rows, cols);
    if (o) {
        o->get(payload, g.rp, n_blocks(o, cols), r, blocks);
        return 0;
    }
    /* Q8_0, Q4_0: the scale and the quants back in GGML's block order */
    const uint8_t *pl = payload;
    uint8_t *y = blocks;
    size_t bsz = t == KERN_Q8_0 ? GGML_Q8_BYTES : GGML_Q4_BYTES;
    for (unsigned b = 0; b < cols / KERN_QBLOCK; b++, y += bsz) {
        memcpy(y, pl + 2 * kern_idx_scale(&g, r, b), 2);
        for (unsigned k = 0; k < KERN_QBLOCK; k++) {
            unsigned c = KERN_QBLOCK * b + k;
            int hi;
            if (t == KERN_Q8_0) {
                y[2 + k] = (uint8_t)(pl[kern_off_q8(&g, r, c)] - 128);
            } else {
                size_t off = kern_off_q4(&g, r, c, &hi);
                unsigned q = hi ? pl[off] >> 4 : pl[off] & 0x0Fu;
                if (k < 16)
                    y[2 + k] = (uint8_t)q;
                else
                    y[2 + k - 16] |= (uint8_t)(q << 4);
            }
        }
    }
    return 0;
}

void kern_tile_unpack(enum kern_type t, unsigned rows, unsigned cols,
                      const void *payload, float *dst, size_t ld)
{
    if (!shape_ok(t, rows, cols))
        return;
    for (unsigned r = 0; r < rows; r++)
        kern_tile_row(t, rows, cols, payload, r, dst + r * ld);
}

/* 1 when kern_tile_check passes, else 0. */
int kern_tile_finite(enum kern_type t, unsigned rows, unsigned cols,
                     const void *payload)
{
    return kern_tile_check(t, rows, cols, payload, NULL, NULL) == 0;
}

int kern_tile_check(enum kern_type t, unsigned rows, unsigned cols,
                    const void *payload, unsigned *row, const char **what)
{
    if (row)
        *row = 0;
    if (what)
        *what = "shape";
    if (!shape_ok(t, rows, cols) || !payload)
        return -1;
    kern_geom g = kern_geom_of(rows, cols);
    const uint8_t *pl = payload;
    size_t n;

    const kern_type_ops *o = block_ops(t);
    if (o) {
        unsigned nb = n_blocks(o, cols);
        uint8_t blocks[KERN_ROW_BLOCK_BYTES];
        for (unsigned r = 0; r < g.rp; r++) {
            if (r % KERN_PANEL == 0 && o->panel_ok &&
                o->panel_ok(pl, g.rp, nb, r / KERN_PANEL)) {
                r += KERN_PANEL - 1;    /* the whole panel passes */
                continue;
            }
            o->get(pl, g.rp, nb, r, blocks);
            if (o->check(blocks, nb, what) < 0) {
                if (row)
                    *row = r;
                return -1;
            }
        }
        return 0;
    }
    if (what)
        *what = t == KERN_F32 || t == KERN_F16 ? "weight" : "d";

    switch (t) {
    case KERN_F32:
        n = (size_t)g.rp * g.cp;
        for (size_t i = 0; i < n; i++)
            if (!isfinite(kern_ld_f32(pl + 4 * i)))
                return -1;
        return 0;
    case KERN_F16:
        n = (size_t)g.rp * g.cp;
        break;
    default:
        n = (size_t)g.rp * g.nb;        /* the scale area */
        break;
    }
    for (size_t i = 0; i < n; i++)
        if ((kern_ld_u16(pl + 2 * i) & 0x7C00u) == 0x7C00u)
            return -1;
    return 0;
}
