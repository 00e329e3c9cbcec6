/*
 * kern_lq.c — the 32-column GGML block types (Q4_1, Q5_0, Q5_1, IQ4_NL,
 * MXFP4) and BF16, kept bit for bit: their payload order, ggml's
 * dequantisers and reference quantisers, the block checks (the
 * kern_type_ops entries of kern_impl.h).  The kernels are in kern_lq_ref.c
 * (the scalar reference, whose essay states the arithmetic, and the
 * family's fill of each tier's table) and kern_lq_simd.h (AVX2, AVX-512).
 *
 * ------------------------------------------------------------------------
 * Payloads (cflow(5) has the same, byte by byte)
 * ------------------------------------------------------------------------
 * A tile of R <= 128 rows and C <= 256 columns stores rp = roundup(R, 16)
 * rows (rows past R are all-zero blocks, which decode to zeros) of
 * nb = ceil(C / 32) GGML blocks each; its payload is every byte of those
 * blocks, moved without arithmetic, in panels of 16 rows so that one
 * 32-bit lane of a vector holds one row:
 *
 *   GGML block (ggml-common.h)    meta          qh        qs
 *   block_q4_1    20 bytes        d, m (f16)    -         16 bytes
 *   block_q5_0    22 bytes        d (f16)       4 bytes   16 bytes
 *   block_q5_1    24 bytes        d, m (f16)    4 bytes   16 bytes
 *   block_iq4_nl  18 bytes        d (f16)       -         16 bytes
 *   block_mxfp4   17 bytes        e (E8M0)      -         16 bytes
 *
 * Panel p (16 rows, 16 * nb * block bytes, panels back to back) holds
 *   meta:   for block b = 0 .. nb-1, for each meta field in block order:
 *           the field of rows 16p .. 16p+15 (16 x 2 bytes, or 16 x 1 for e)
 *   quants: for block b = 0 .. nb-1:
 *           qh (Q5_0, Q5_1): 16 x the block's 4 qh bytes, row by row;
 *           qs: 4 chunks of 64 bytes, byte 4i + j of chunk g = qs byte
 *           4g + j of row 16p + i: its low nibble is column 4g + j of the
 *           block, its high nibble column 16 + 4g + j (ggml's order).
 * A chunk is thus 16 rows x 4 columns (low nibbles) and 16 rows x 4
 * columns 16 further (high nibbles), the 4-column groups of ggml's 8-lane
 * sums; qh bit k of a row is the fifth bit of its column k.  The meta of a
 * panel comes first so that its quant chunks start 64-byte aligned from
 * the panel's start when nb is a multiple of 4 (a whole 256-column tile).
 * A full 128 x 256 MXFP4 tile is 17,408 bytes, Q5_0 22,528.
 *
 * BF16 (2 bytes a weight): panel p is 16 rows x C values; column pair
 * (2k, 2k+1) is 64 bytes at 64k, row i's two values at 4i (the even
 * column first), so that a 32-bit lane is a row's pair as vdpbf16ps takes
 * it; when C is odd the last column follows as 16 values (32 bytes).
 * Size rp * C * 2.
 *
 * A tile whose C ends inside a block (the last tile of a float row that
 * is not a multiple of 32) keeps the block whole: the row is zero-padded
 * before quantising (kern_pack.c) and the mat-vec meets zero activations
 * there.  GGML rows of these types are whole blocks.
 *
 * ------------------------------------------------------------------------
 * Quantising and checking
 * ------------------------------------------------------------------------
 * quant is what llama-quantize writes without an imatrix: ggml's
 * quantize_row_{q4_1,q5_0,q5_1,mxfp4}_ref, and for IQ4_NL quantize_iq4_nl
 * (quantize_row_iq4_nl_impl with 7 tries of the scale, which is what
 * ggml_quantize_chunk runs; quantize_row_iq4_nl_ref tries none), BF16
 * GGML_FP32_TO_BF16.  ggml's own build of these (libggml-base) has no FMA,
 * and this file is built with -ffp-contract=off: the same roundings.  Two
 * departures, both where ggml's result is undefined or unusable: a scale
 * that overflows its f16 (or a bf16 weight that rounds to infinity) makes
 * quant return -1, and MXFP4's E8M0 exponent of a block whose largest
 * magnitude is below 2^-125 is 0 (ggml converts a negative float to
 * uint8_t there, undefined behaviour that gives 0xFF, NaN in the OCP spec,
 * on x86).
 * check refuses what would decode to a non-finite weight or is reserved:
 * an f16 d or m that is inf or NaN ("d", "m"), an E8M0 scale of 0xFF, or
 * one large enough that a nibble of its block decodes to infinity
 * ("e8m0 scale"), a BF16 weight that is inf or NaN ("weight").  IQ4_NL and
 * MXFP4 nibbles index 16-entry tables: no index can be out of range.  The
 * open checks every tile, lazily read experts on the decode's path, so
 * panel_ok reads a panel's scale area straight from the payload (an
 * MXFP4 exponent up to 252 is finite with any nibble) and only a panel it
 * cannot pass goes row by row through get and check.
 */
#include "config.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kern.h"
#include "kernels/kern_impl.h"
#include "kernels/kern_lq.h"

const int8_t kern_lq_iq4nl[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};
const int8_t kern_lq_mxfp4[16] = {
    0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,
};

/* ---- put / get: the payload order above ---------------------------------- */

/* Move row r's nb blocks into (dir 1) or out of (dir 0) a payload. */
static void lq_move(const lq_fmt *f, uint8_t *pl, unsigned nb, unsigned r,
                    uint8_t *blocks, int dir)
{
    const unsigned bb = lq_blk_bytes(f), i = r % KERN_PANEL;
    uint8_t *panel = (uint8_t *)lq_panel(f, pl, nb, r / KERN_PANEL);
    for (unsigned b = 0; b < nb; b++) {
        uint8_t *blk = blocks + (size_t)b * bb;
        for (unsigned fi = 0; fi < f->meta / f->fw; fi++) {
            uint8_t *m = (uint8_t *)lq_meta(f, panel, b, fi) + i * f->fw;
            if (dir)
                memcpy(m, blk + fi * f->fw, f->fw);
            else
                memcpy(blk + fi * f->fw, m, f->fw);
        }
        uint8_t *q = (uint8_t *)lq_quants(f, panel, nb, b);
        if (f->qh) {
            if (dir)
                memcpy(q + 4 * i, blk + f->meta, 4);
            else
                memcpy(blk + f->meta, q + 4 * i, 4);
            q += KERN_PANEL * 4;
        }
        const uint8_t *qs = blk + f->meta + f->qh;
        for (unsigned g = 0; g < 4; g++) {
            if (dir)
                memcpy(q + 64 * g + 4 * i, qs + 4 * g, 4);
            else
                memcpy(blk + f->meta + f->qh + 4 * g, q + 64 * g + 4 * i, 4);
        }
    }
}

#define LQ_PUT_GET(T, NAME)                                                    \
    static void put_##NAME(uint8_t *pl, unsigned rp, unsigned nb, unsigned r,  \
                           const uint8_t *blocks)                              \
    {                                                                          \
        const lq_fmt f = lq_fmt_of(KERN_##T);                                  \
        (void)rp;                                                              \
        lq_move(&f, pl, nb, r, (uint8_t *)blocks, 1);                          \
    }                                                                          \
    static void get_##NAME(const uint8_t *pl, unsigned rp, unsigned nb,        \
                           unsigned r, uint8_t *blocks)                        \
    {                                                                          \
        const lq_fmt f = lq_fmt_of(KERN_##T);                                  \
        (void)rp;                                                              \
        lq_move(&f, (uint8_t *)pl, nb, r, blocks, 0);                          \
    }

LQ_PUT_GET(Q4_1, q4_1)
LQ_PUT_GET(Q5_0, q5_0)
LQ_PUT_GET(Q5_1, q5_1)
LQ_PUT_GET(IQ4_NL, iq4_nl)
LQ_PUT_GET(MXFP4, mxfp4)

/* BF16: a "block" is one value; nb is the tile's columns. */
static void put_bf16(uint8_t *pl, unsigned rp, unsigned nb, unsigned r,
                     const uint8_t *blocks)
{
    (void)rp;
    for (unsigned c = 0; c < nb; c++)
        memcpy(pl + lq_bf16_off(nb, r, c), blocks + 2 * c, 2);
}

static void get_bf16(const uint8_t *pl, unsigned rp, unsigned nb, unsigned r,
                     uint8_t *blocks)
{
    (void)rp;
    for (unsigned c = 0; c < nb; c++)
        memcpy(blocks + 2 * c, pl + lq_bf16_off(nb, r, c), 2);
}

/* ---- ggml's dequantisers (ggml-quants.c dequantize_row_*) ---------------- */

static float h16(const uint8_t *p)
{
    return kern_h2f(kern_ld_u16(p));
}

/* Block column j (0..31) of a block's nibbles qs. */
static unsigned nib(const uint8_t *qs, unsigned j)
{
    return j < 16 ? qs[j] & 0x0Fu : qs[j - 16] >> 4;
}

/* The fifth bit of column j from qh (ggml's xh_0 / xh_1), as 0 or 16. */
static unsigned hbit(const uint8_t *qh, unsigned j)
{
    return (kern_ld_u32(qh) >> j & 1u) << 4;
}

static void dq_q4_1(const uint8_t *x, unsigned nb, float *y)
{
    for (unsigned b = 0; b < nb; b++, x += 20, y += 32) {
        const float d = h16(x), m = h16(x + 2);
        for (unsigned j = 0; j < 32; j++)
            y[j] = (float)(int)nib(x + 4, j) * d + m;
    }
}

static void dq_q5_0(const uint8_t *x, unsigned nb, float *y)
{
    for (unsigned b = 0; b < nb; b++, x += 22, y += 32) {
        const float d = h16(x);
        for (unsigned j = 0; j < 32; j++)
            y[j] = (float)((int)(nib(x + 6, j) | hbit(x + 2, j)) - 16) * d;
    }
}

static void dq_q5_1(const uint8_t *x, unsigned nb, float *y)
{
    for (unsigned b = 0; b < nb; b++, x += 24, y += 32) {
        const float d = h16(x), m = h16(x + 2);
        for (unsigned j = 0; j < 32; j++)
            y[j] = (float)(int)(nib(x + 8, j) | hbit(x + 4, j)) * d + m;
    }
}

static void dq_iq4_nl(const uint8_t *x, unsigned nb, float *y)
{
    for (unsigned b = 0; b < nb; b++, x += 18, y += 32) {
        const float d = h16(x);
        for (unsigned j = 0; j < 32; j++)
            y[j] = d * (float)kern_lq_iq4nl[nib(x + 2, j)];
    }
}

static void dq_mxfp4(const uint8_t *x, unsigned nb, float *y)
{
    for (unsigned b = 0; b < nb; b++, x += 17, y += 32) {
        const float d = kern_e8m0_half(x[0]);
        for (unsigned j = 0; j < 32; j++)
            y[j] = (float)kern_lq_mxfp4[nib(x + 1, j)] * d;
    }
}

static void dq_bf16(const uint8_t *x, unsigned n, float *y)
{
    for (unsigned c = 0; c < n; c++)
        y[c] = kern_lq_bf2f(kern_ld_u16(x + 2 * c));
}

/* ---- ggml's reference quantisers ------------------------------------------ */

/* x as f16 at p; -1 when it overflows (inf) */
static int put_h16(uint8_t *p, float x)
{
    uint16_t h = kern_f2h(x);
    memcpy(p, &h, 2);
    return (h & 0x7C00u) == 0x7C00u ? -1 : 0;
}

/* the qs byte of columns j and j + 16 */
static uint8_t pack2(unsigned lo, unsigned hi)
{
    return (uint8_t)((lo & 0x0Fu) | (hi & 0x0Fu) << 4);
}

/* quantize_row_q4_1_ref (q5 0) and quantize_row_q5_1_ref (q5 1) */
static int q_min_d(const float *x, unsigned nb, uint8_t *y, int q5)
{
    const unsigned bb = q5 ? 24 : 20;
    for (unsigned b = 0; b < nb; b++, x += 32, y += bb) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (unsigned j = 0; j < 32; j++) {
            if (x[j] < min)
                min = x[j];
            if (x[j] > max)
                max = x[j];
        }
        const float d = (max - min) / (q5 ? 31 : 15);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        if (put_h16(y, d) < 0 || put_h16(y + 2, min) < 0)
            return -1;
        uint32_t qh = 0;
        uint8_t *qs = y + (q5 ? 8 : 4);
        for (unsigned j = 0; j < 16; j++) {
            const float x0 = (x[j] - min) * id, x1 = (x[16 + j] - min) * id;
            unsigned xi0, xi1;
            if (q5) {
                xi0 = (uint8_t)(x0 + 0.5f);
                xi1 = (uint8_t)(x1 + 0.5f);
                qh |= ((xi0 & 0x10u) >> 4) << j | ((xi1 & 0x10u) >> 4) << (j + 16);
            } else {
                int8_t t0 = (int8_t)(x0 + 0.5f), t1 = (int8_t)(x1 + 0.5f);
                xi0 = (uint8_t)(t0 < 15 ? t0 : 15);
                xi1 = (uint8_t)(t1 < 15 ? t1 : 15);
            }
            qs[j] = pack2(xi0, xi1);
        }
        if (q5)
            memcpy(y + 4, &qh, 4);
    }
    return 0;
}

static int qz_q4_1(const float *x, unsigned nb, uint8_t *y)
{
    return q_min_d(x, nb, y, 0);
}

static int qz_q5_1(const float *x, unsigned nb, uint8_t *y)
{
    return q_min_d(x, nb, y, 1);
}

/* quantize_row_q5_0_ref */
static int qz_q5_0(const float *x, unsigned nb, uint8_t *y)
{
    for (unsigned b = 0; b < nb; b++, x += 32, y += 22) {
        float amax = 0.0f, max = 0.0f;
        for (unsigned j = 0; j < 32; j++)
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        const float d = max / -16;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        if (put_h16(y, d) < 0)
            return -1;
        uint32_t qh = 0;
        for (unsigned j = 0; j < 16; j++) {
            int8_t t0 = (int8_t)(x[j] * id + 16.5f);
            int8_t t1 = (int8_t)(x[16 + j] * id + 16.5f);
            unsigned xi0 = (uint8_t)(t0 < 31 ? t0 : 31);
            unsigned xi1 = (uint8_t)(t1 < 31 ? t1 : 31);
            y[6 + j] = pack2(xi0, xi1);
            qh |= ((xi0 & 0x10u) >> 4) << j | ((xi1 & 0x10u) >> 4) << (j + 16);
        }
        memcpy(y + 2, &qh, 4);
    }
    return 0;
}

/* ggml-quants.c best_index_int8 */
static int best_index_int8(int n, const int8_t *val, float x)
{
    if (x <= val[0])
        return 0;
    if (x >= val[n - 1])
        return n - 1;
    int ml = 0, mu = n - 1;
    while (mu - ml > 1) {
        int mav = (ml + mu) / 2;
        if (x < val[mav])
            mu = mav;
        else
            ml = mav;
    }
    return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

/* The weighted sums of one trial scale 1 / id of quantize_row_iq4_nl_impl:
 * each x rounded to the nearest table value q, sum w q x and sum w q^2. */
static void iq4_nl_sums(const float *x, const float *weight, float id,
                        float *sumqx, float *sumq2)
{
    float sx = 0, s2 = 0;
    for (int j = 0; j < 32; j++) {
        float al = id * x[j];
        int l = best_index_int8(16, kern_lq_iq4nl, al);
        float q = kern_lq_iq4nl[l], w = weight[j];
        sx += w * q * x[j];
        s2 += w * q * q;
    }
    *sumqx = sx;
    *sumq2 = s2;
}

/* quantize_row_iq4_nl_impl(32, 32, ..., quant_weights NULL, ntry 7): one
 * block, what ggml_quantize_chunk (llama-quantize) writes */
static int iq4_nl_block(const float *x, uint8_t *y)
{
    const int8_t *values = kern_lq_iq4nl;
    const int ntry = 7;
    float weight[32];
    uint8_t L[32];
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++) {
        weight[j] = x[j] * x[j];
        float ax = fabsf(x[j]);
        if (ax > amax) {
            amax = ax;
            max = x[j];
        }
    }
    float d = 0.0f;
    if (!(amax < 1e-15f)) {             /* GROUP_MAX_EPS */
        d = -max / values[0];
        float sumqx, sumq2;
        iq4_nl_sums(x, weight, 1 / d, &sumqx, &sumq2);
        d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
        float best = d * sumqx;
        for (int itry = -ntry; itry <= ntry; ++itry) {
            iq4_nl_sums(x, weight, (itry + values[0]) / max, &sumqx, &sumq2);
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
    }
    if (put_h16(y, d) < 0)
        return -1;
    const float id = d != 0.0f ? 1 / d : 0;
    for (int j = 0; j < 32; j++)
        L[j] = (uint8_t)best_index_int8(16, values, id * x[j]);
    for (int j = 0; j < 16; j++)
        y[2 + j] = (uint8_t)(L[j] | L[16 + j] << 4);
    return 0;
}

static int qz_iq4_nl(const float *x, unsigned nb, uint8_t *y)
{
    for (unsigned b = 0; b < nb; b++)
        if (iq4_nl_block(x + 32 * b, y + 18 * b) < 0)
            return -1;
    return 0;
}

/* quantize_row_mxfp4_ref */
static int qz_mxfp4(const float *x, unsigned nb, uint8_t *y)
{
    for (unsigned b = 0; b < nb; b++, x += 32, y += 17) {
        float amax = 0.0f;
        for (unsigned j = 0; j < 32; j++)
            if (amax < fabsf(x[j]))
                amax = fabsf(x[j]);
        float ex = amax > 0.0f ? floorf(log2f(amax)) - 2 + 127 : 0.0f;
        const uint8_t e = ex > 0.0f ? (uint8_t)ex : 0;   /* see the essay */
        const float d = kern_e8m0_half(e);
        y[0] = e;
        for (unsigned j = 0; j < 32; j++) {
            unsigned best = 0;
            float best_err = fabsf((float)kern_lq_mxfp4[0] * d - x[j]);
            for (unsigned i = 1; i < 16; i++) {
                float err = fabsf((float)kern_lq_mxfp4[i] * d - x[j]);
                if (err < best_err) {
                    best = i;
                    best_err = err;
                }
            }
            if (j < 16)
                y[1 + j] = (uint8_t)best;
            else
                y[1 + j - 16] |= (uint8_t)(best << 4);
        }
    }
    return 0;
}

static int qz_bf16(const float *x, unsigned n, uint8_t *y)
{
    for (unsigned c = 0; c < n; c++) {
        uint16_t h = kern_lq_f2bf(x[c]);
        if ((h & 0x7F80u) == 0x7F80u)
            return -1;                  /* rounds to inf (or was not finite) */
        memcpy(y + 2 * c, &h, 2);
    }
    return 0;
}

/* ---- block checks ------------------------------------------------------------ */

static int bad_h16(const uint8_t *p)
{
    return (kern_ld_u16(p) & 0x7C00u) == 0x7C00u;
}

/* f16 fields at the block's start: d (and m) */
static int chk_dm(const uint8_t *x, unsigned nb, unsigned bb, int has_m,
                  const char **what)
{
    for (unsigned b = 0; b < nb; b++, x += bb) {
        if (bad_h16(x)) {
            if (what)
                *what = "d";
            return -1;
        }
        if (has_m && bad_h16(x + 2)) {
            if (what)
                *what = "m";
            return -1;
        }
    }
    return 0;
}

static int ck_q4_1(const uint8_t *x, unsigned nb, const char **what)
{
    return chk_dm(x, nb, 20, 1, what);
}

static int ck_q5_0(const uint8_t *x, unsigned nb, const char **what)
{
    return chk_dm(x, nb, 22, 0, what);
}

static int ck_q5_1(const uint8_t *x, unsigned nb, const char **what)
{
    return chk_dm(x, nb, 24, 1, what);
}

static int ck_iq4_nl(const uint8_t *x, unsigned nb, const char **what)
{
    return chk_dm(x, nb, 18, 0, what);
}

/* 0xFF is NaN in the OCP MX spec (ggml would read 2^127); a scale whose
 * largest nibble value overflows float decodes to infinity. */
static int ck_mxfp4(const uint8_t *x, unsigned nb, const char **what)
{
    for (unsigned b = 0; b < nb; b++, x += 17) {
        if (x[0] <= 252)
            continue;                   /* 12 x 2^124 at most: finite */
        int big = 0;
        for (unsigned j = 0; j < 32; j++) {
            int v = abs(kern_lq_mxfp4[nib(x + 1, j)]);
            big = v > big ? v : big;
        }
        if (x[0] == 0xFF || !isfinite((float)big * kern_e8m0_half(x[0]))) {
            if (what)
                *what = "e8m0 scale";
            return -1;
        }
    }
    return 0;
}

static int ck_bf16(const uint8_t *x, unsigned n, const char **what)
{
    for (unsigned c = 0; c < n; c++)
        if ((kern_ld_u16(x + 2 * c) & 0x7F80u) == 0x7F80u) {
            if (what)
                *what = "weight";
            return -1;
        }
    return 0;
}

/* ---- the open's fast path: a panel's scale fields straight from the payload -- */

/* Every f16 of n at p finite (no exponent of all ones). */
static int halves_ok(const uint8_t *p, size_t n)
{
    unsigned bad = 0;
    for (size_t i = 0; i < n; i++)
        bad |= (kern_ld_u16(p + 2 * i) & 0x7C00u) == 0x7C00u;
    return !bad;
}

/* The f16 types: a panel's meta area is nothing but their d (and m). */
#define LQ_PANEL_OK(T, NAME)                                                   \
    static int pok_##NAME(const uint8_t *pl, unsigned rp, unsigned nb,         \
                          unsigned p)                                          \
    {                                                                          \
        const lq_fmt f = lq_fmt_of(KERN_##T);                                  \
        (void)rp;                                                              \
        return halves_ok(lq_panel(&f, pl, nb, p),                              \
                         (size_t)nb * KERN_PANEL * f.meta / 2);                \
    }

LQ_PANEL_OK(Q4_1, q4_1)
LQ_PANEL_OK(Q5_0, q5_0)
LQ_PANEL_OK(Q5_1, q5_1)
LQ_PANEL_OK(IQ4_NL, iq4_nl)

/* MXFP4: an exponent up to 252 is finite with any nibble (12 x 2^124);
 * 253 and 254 are decided row by row, by the nibbles. */
static int pok_mxfp4(const uint8_t *pl, unsigned rp, unsigned nb, unsigned p)
{
    const lq_fmt f = lq_fmt_of(KERN_MXFP4);
    const uint8_t *e = lq_panel(&f, pl, nb, p);
    unsigned bad = 0;
    (void)rp;
    for (size_t i = 0; i < (size_t)nb * KERN_PANEL; i++)
        bad |= e[i] > 252;
    return !bad;
}

/* BF16: the panel's 16 x nb values */
static int pok_bf16(const uint8_t *pl, unsigned rp, unsigned nb, unsigned p)
{
    const uint8_t *v = pl + (size_t)p * KERN_PANEL * nb * 2;
    unsigned bad = 0;
    (void)rp;
    for (size_t i = 0; i < (size_t)nb * KERN_PANEL; i++)
        bad |= (kern_ld_u16(v + 2 * i) & 0x7F80u) == 0x7F80u;
    return !bad;
}

/* ---- the table ------------------------------------------------------------------ */

static const kern_type_ops lq_ops[KERN_NTYPES] = {
    [KERN_BF16] = { "bf16", KERN_SRC_BF16, 1, 2, put_bf16, get_bf16, dq_bf16,
                    qz_bf16, ck_bf16, pok_bf16 },
    [KERN_Q4_1] = { "q4_1", KERN_SRC_GGML_Q4_1, 32, 20, put_q4_1, get_q4_1,
                    dq_q4_1, qz_q4_1, ck_q4_1, pok_q4_1 },
    [KERN_Q5_0] = { "q5_0", KERN_SRC_GGML_Q5_0, 32, 22, put_q5_0, get_q5_0,
                    dq_q5_0, qz_q5_0, ck_q5_0, pok_q5_0 },
    [KERN_Q5_1] = { "q5_1", KERN_SRC_GGML_Q5_1, 32, 24, put_q5_1, get_q5_1,
                    dq_q5_1, qz_q5_1, ck_q5_1, pok_q5_1 },
    [KERN_IQ4_NL] = { "iq4_nl", KERN_SRC_GGML_IQ4_NL, 32, 18, put_iq4_nl,
                      get_iq4_nl, dq_iq4_nl, qz_iq4_nl, ck_iq4_nl, pok_iq4_nl },
    [KERN_MXFP4] = { "mxfp4", KERN_SRC_GGML_MXFP4, 32, 17, put_mxfp4,
                     get_mxfp4, dq_mxfp4, qz_mxfp4, ck_mxfp4, pok_mxfp4 },
};

const kern_type_ops *kern_lq_type(enum kern_type t)
{
    if ((unsigned)t >= KERN_NTYPES || !lq_ops[t].name)
        return NULL;
    return &lq_ops[t];
}

/* quantize_row_q8_1's s (x86 build): d * the sum of the block's quants,
 * d = amax / 127 unrounded, the product stored through f16. */
void kern_act_q8_1_s(const float *x, unsigned nb, const int32_t *sum,
                     float *s)
{
    for (unsigned b = 0; b < nb; b++) {
        float amax = 0.0f;
        for (unsigned j = 0; j < KERN_QBLOCK; j++) {
            float v = fabsf(x[KERN_QBLOCK * b + j]);
            amax = amax > v ? amax : v;
        }
        const float d = amax / 127.0f;
        s[b] = kern_h2f(kern_f2h(d * (float)sum[b]));
    }
}
