/*
 * kern_kq.c — the K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) and IQ4_XS kept
 * bit for bit: their payload order, the Q8_K activations, and the scalar
 * reference mat-vec, the oracle of the SIMD tiers (kern_kq_avx2.c,
 * kern_kq_avx512.c).  ggml's dequantisers, reference quantisers and the
 * block checks are in kern_kq_quant.c.
 *
 * ------------------------------------------------------------------------
 * Payload (cflow(5) has the same tables)
 * ------------------------------------------------------------------------
 * These types have super-blocks of 256 columns, a tile's width, so a tile
 * row is exactly one GGML block and an R-row tile is rp = roundup(R, 16)
 * blocks, rows past R all-zero blocks (which decode to zeros).  The
 * payload is np = rp / 16 panels of 16 x B bytes (B the block's size),
 * panel p holding the blocks of rows 16p .. 16p+15.  A block is cut into
 * fields, runs of its own bytes; in the panel a field of len bytes at
 * block offset off takes the 16 x len bytes from panel offset 16 x off,
 * as len / w units of 16 rows x w bytes:
 *     block byte off + u*w + k of row 16p + i  ->  panel byte
 *     16*off + u*16*w + i*w + k                (k < w, i < 16)
 * so one unit of the 16 rows is one 16w-byte vector, a row's bytes in
 * lane i.  Quants have w = 4 (4 bytes a row: one 32-bit lane, the shape
 * of vpdpbusd), the f16 scales w = 2, packed scale bytes w = 1.
 *
 *   type    B    fields (off len w)
 *   q2_k    84   scales (0 16 1)  qs (16 64 4)  d (80 2 2)  dmin (82 2 2)
 *   q3_k    110  hmask (0 32 4)  qs (32 64 4)  scales (96 12 1)  d (108 2 2)
 *   q4_k    144  d (0 2 2)  dmin (2 2 2)  scales (4 12 1)  qs (16 128 4)
 *   q5_k    176  d (0 2 2)  dmin (2 2 2)  scales (4 12 1)  qh (16 32 4)
 *                qs (48 128 4)
 *   q6_k    210  ql (0 128 4)  qh (128 64 4)  scales (192 16 1)  d (208 2 2)
 *   iq4_xs  136  d (0 2 2)  scales_h (2 2 2)  scales_l (4 4 1)  qs (8 128 4)
 *
 * Every byte of every block is in the payload once: packing a GGUF tensor
 * of these types is a rearrangement (get gives back the blocks put took).
 * A full 128 x 256 Q4_K tile is 18,432 bytes, Q4_0's size.
 *
 * ------------------------------------------------------------------------
 * Arithmetic: llama.cpp's on an x86 CPU with AVX-512
 * ------------------------------------------------------------------------
 * Activations: x quantised to Q8_K as ggml's quantize_row_q8_K, which the
 * x86 build runs as quantize_row_q8_K_ref: per block of 256, max = the
 * first x of the largest |x|, iscale = -127/max, q = nearest_int(iscale x)
 * (round half to even through 1.5 * 2^23) capped at 127, d = 1/iscale,
 * bsums the sums of each 16 q; an all-zero block is d = 0, q = 0 (and
 * bsums 0, which ggml leaves as they were: they meet d = 0 only).  The
 * block of a tile at column col0 is col0 / 256.
 *
 * Per row the tile's sum is formed exactly as llama.cpp forms the sum of
 * one super-block, then added to y[r] once.  Integer sums are exact, so
 * only the float steps are the contract; which kernel llama.cpp runs is
 * what ggml_repack_get_optimal_repack_type picks on an AVX-512 CPU:
 *
 *   tile_mv, all six types: ggml_vec_dot_*_q8_K (arch/x86/quants.c, the
 *               AVX2 code that AVX-512 builds run): 8 int32 lanes, lane l
 *               taking the columns c with (c % 32) / 4 == l, each product
 *               times its sub-block scale; then per lane
 *                   fma(d, (float)sumi_l, init_l)
 *               (init_l 0 but for Q2_K) and the 8 folded as hsum_float_8:
 *               ((l0+l4) + (l2+l6)) + ((l1+l5) + (l3+l7)), d = d_x d_w.
 *               Q6_K's lanes count its quants unsigned (0..63) and lane l
 *               subtracts 32 (sc_2l bsum_2l + sc_2l+1 bsum_2l+1).  Q5_K
 *               adds its mins after the fold: + fma(-d_x dmin_w, M, 0),
 *               M = sum_j m_j (bsum_2j + bsum_2j+1); Q4_K adds 4 min lanes
 *               fma(-d_x dmin_w, m_2k S_2k + m_2k+1 S_2k+1, 0) (S_j that
 *               pair of bsums) folded ((m0 + m2) + (m1 + m3)); Q2_K's lane
 *               l starts at init_l = fma(-d_x dmin_w, m_2l bsum_2l +
 *               m_2l+1 bsum_2l+1, 0).
 *   tile_mv_rp, Q4_K and Q2_K: llama.cpp repacks the matrices of these
 *               whose row count is a multiple of 8 (all of a real model's;
 *               Q4_K on any AVX2 CPU, Q2_K on AVX-512) and runs
 *               ggml_gemv_q4_K_8x8_q8_K / ggml_gemv_q2_K_8x8_q8_K
 *               (arch/x86/repack.cpp): per row one integer sum I =
 *               sum_j sc_j (q_j . x_j) over the sub-blocks (32 columns for
 *               Q4_K, 16 for Q2_K) and the min sum M = sum_j m_j bsum_j,
 *               then
 *                   fma(I, d_w d_x, 0) - fma(M, dmin_w d_x, 0).
 *               A caller runs these for such matrices, as the engine
 *               runs tile_mv_q4_0_rp for Q4_0 (eng_session.c, mv_init).
 *               llama.cpp's prefill (ggml_gemm_*_8x8_q8_K, 4 inputs at a
 *               time) takes the same steps per output; its activation
 *               quantiser there (ggml_quantize_mat_q8_K_4x8) differs from
 *               quantize_row_q8_K_ref only in which of x and -x is max
 *               when both have the largest magnitude.
 *
 * A matrix wider than one tile adds its tiles' sums to y[r] in float,
 * where llama.cpp carries its float accumulators across super-blocks: such
 * rows agree with llama.cpp to the last bits only (kern_ref.c's essay says
 * the same of Q4_0).  This module is built with -ffp-contract=off; every
 * FMA is an explicit fmaf().
 */
#include "config.h"

#include <math.h>
#include <string.h>

#include "kernels/kern.h"
#include "kernels/kern_impl.h"
#include "kernels/kern_kq.h"

/* ---- payload order ---------------------------------------------------------- */

static const kq_layout layouts[] = {
    { KERN_Q2_K, KQ_Q2_BYTES, 4, { { 0, 16, 1 }, { 16, 64, 4 }, { 80, 2, 2 }, { 82, 2, 2 } } },
    { KERN_Q3_K, KQ_Q3_BYTES, 4, { { 0, 32, 4 }, { 32, 64, 4 }, { 96, 12, 1 }, { 108, 2, 2 } } },
    { KERN_Q4_K, KQ_Q4_BYTES, 4, { { 0, 2, 2 }, { 2, 2, 2 }, { 4, 12, 1 }, { 16, 128, 4 } } },
    { KERN_Q5_K, KQ_Q5_BYTES, 5,
      { { 0, 2, 2 }, { 2, 2, 2 }, { 4, 12, 1 }, { 16, 32, 4 }, { 48, 128, 4 } } },
    { KERN_Q6_K, KQ_Q6_BYTES, 4, { { 0, 128, 4 }, { 128, 64, 4 }, { 192, 16, 1 }, { 208, 2, 2 } } },
    { KERN_IQ4_XS, KQ_IQ4_BYTES, 4, { { 0, 2, 2 }, { 2, 2, 2 }, { 4, 4, 1 }, { 8, 128, 4 } } },
};

const kq_layout *kern_kq_layout(enum kern_type t)
{
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
        if (layouts[i].type == t)
            return &layouts[i];
    return NULL;
}

/* Copy row r's nblk blocks to (to_pl) or from a payload of rp rows. */
static void move_row(const kq_layout *L, uint8_t *pl, unsigned rp,
                     unsigned nblk, unsigned r, uint8_t *blocks, int to_pl)
{
    const unsigned i = r % KERN_PANEL;
    (void)rp;
    for (unsigned bi = 0; bi < nblk; bi++) {
        uint8_t *panel = pl + ((size_t)(r / KERN_PANEL) * nblk + bi) * KERN_PANEL * L->bytes;
        uint8_t *blk = blocks + (size_t)bi * L->bytes;
        for (unsigned f = 0; f < L->nfield; f++) {
            const kq_field *F = &L->field[f];
            for (unsigned u = 0; u < (unsigned)F->len / F->w; u++) {
                uint8_t *p = panel + (size_t)KERN_PANEL * F->off +
                             (size_t)u * KERN_PANEL * F->w + (size_t)i * F->w;
                uint8_t *b = blk + F->off + u * F->w;
                if (to_pl)
                    memcpy(p, b, F->w);
                else
                    memcpy(b, p, F->w);
            }
        }
    }
}

#define KQ_PUT_GET(NAME, T)                                                    \
    static void put_##NAME(uint8_t *pl, unsigned rp, unsigned nblk,            \
                           unsigned r, const uint8_t *blocks)                  \
    {                                                                          \
        move_row(kern_kq_layout(T), pl, rp, nblk, r, (uint8_t *)blocks, 1);    \
    }                                                                          \
    static void get_##NAME(const uint8_t *pl, unsigned rp, unsigned nblk,      \
                           unsigned r, uint8_t *blocks)                        \
    {                                                                          \
        move_row(kern_kq_layout(T), (uint8_t *)pl, rp, nblk, r, blocks, 0);    \
    }

KQ_PUT_GET(q2_k, KERN_Q2_K)
KQ_PUT_GET(q3_k, KERN_Q3_K)
KQ_PUT_GET(q4_k, KERN_Q4_K)
KQ_PUT_GET(q5_k, KERN_Q5_K)
KQ_PUT_GET(q6_k, KERN_Q6_K)
KQ_PUT_GET(iq4_xs, KERN_IQ4_XS)

static int check_q2_k(const uint8_t *b, unsigned n, const char **what)
{
    return kern_kq_check_blocks(b, n, KQ_Q2_BYTES, 80, 82, what);
}
static int check_q3_k(const uint8_t *b, unsigned n, const char **what)
{
    return kern_kq_check_blocks(b, n, KQ_Q3_BYTES, 108, -1, what);
}
static int check_q4_k(const uint8_t *b, unsigned n, const char **what)
{
    return kern_kq_check_blocks(b, n, KQ_Q4_BYTES, 0, 2, what);
}
static int check_q5_k(const uint8_t *b, unsigned n, const char **what)
{
    return kern_kq_check_blocks(b, n, KQ_Q5_BYTES, 0, 2, what);
}
static int check_q6_k(const uint8_t *b, unsigned n, const char **what)
{
    return kern_kq_check_blocks(b, n, KQ_Q6_BYTES, 208, -1, what);
}
static int check_iq4_xs(const uint8_t *b, unsigned n, const char **what)
{
    return kern_kq_check_blocks(b, n, KQ_IQ4_BYTES, 0, -1, what);
}

#define KQ_ENTRY(T, NAME, SRC, BYTES)                                          \
    { #NAME, SRC, KERN_QK_K, BYTES, put_##NAME, get_##NAME,                   \
      kern_kq_dequant_##NAME, kern_kq_quant_##NAME, check_##NAME, NULL }

static const struct { enum kern_type t; kern_type_ops ops; } entries[] = {
    { KERN_Q2_K, KQ_ENTRY(KERN_Q2_K, q2_k, KERN_SRC_GGML_Q2_K, KQ_Q2_BYTES) },
    { KERN_Q3_K, KQ_ENTRY(KERN_Q3_K, q3_k, KERN_SRC_GGML_Q3_K, KQ_Q3_BYTES) },
    { KERN_Q4_K, KQ_ENTRY(KERN_Q4_K, q4_k, KERN_SRC_GGML_Q4_K, KQ_Q4_BYTES) },
    { KERN_Q5_K, KQ_ENTRY(KERN_Q5_K, q5_k, KERN_SRC_GGML_Q5_K, KQ_Q5_BYTES) },
    { KERN_Q6_K, KQ_ENTRY(KERN_Q6_K, q6_k, KERN_SRC_GGML_Q6_K, KQ_Q6_BYTES) },
    { KERN_IQ4_XS, KQ_ENTRY(KERN_IQ4_XS, iq4_xs, KERN_SRC_GGML_IQ4_XS, KQ_IQ4_BYTES) },
};

const kern_type_ops *kern_kq_type(enum kern_type t)
{
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++)
        if (entries[i].t == t)
            return &entries[i].ops;
    return NULL;
}

/* ---- Q8_K activations ---------------------------------------------------------- */

void kern_kq_act_q8k_ref(const float *x, unsigned nb, int8_t *q, float *d,
                         int16_t *bsums)
{
    for (unsigned i = 0; i < nb; i++, x += KERN_QK_K, q += KERN_QK_K, bsums += 16) {
        float amax;
        const float max = kq_signed_max(x, KERN_QK_K, &amax);
        if (!amax) {
            d[i] = 0;
            memset(q, 0, KERN_QK_K);
            memset(bsums, 0, 16 * sizeof *bsums);
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < KERN_QK_K; ++j) {
            int v = kq_nearest_int(iscale * x[j]);
            q[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < KERN_QK_K / 16; ++j) {
            int sum = 0;
            for (int ii = 0; ii < 16; ++ii)
                sum += q[j * 16 + ii];
            bsums[j] = (int16_t)sum;
        }
        d[i] = 1 / iscale;
    }
}

/* ---- the reference dots of one super-block ---------------------------------------
 * b the GGML block, q its 256 activation quants, dx their scale, bs their
 * 16 bsums.  Each returns the tile row's sum (see the essay). */

static float dot_q4_k_rp(const uint8_t *b, const int8_t *q, float dx,
                         const int16_t *bs)
{
    int32_t I = 0, M = 0;
    for (unsigned j = 0; j < 8; j++) {
        uint8_t sc, m;
        kq_scale_min_k4(j, b + 4, &sc, &m);
        const uint8_t *qs = b + 16 + 32 * (j / 2);
        int32_t s = 0;
        for (unsigned l = 0; l < 32; l++)
            s += (j % 2 ? qs[l] >> 4 : qs[l] & 0xF) * q[32 * j + l];
        I += sc * s;
        M += m * (bs[2 * j] + bs[2 * j + 1]);
    }
    const float d = kern_h2f(kern_ld_u16(b)), dmin = kern_h2f(kern_ld_u16(b + 2));
    return fmaf((float)I, d * dx, 0.0f) - fmaf((float)M, dmin * dx, 0.0f);
}

static float dot_q2_k_rp(const uint8_t *b, const int8_t *q, float dx,
                         const int16_t *bs)
{
    int32_t I = 0, M = 0;
    for (unsigned j = 0; j < 16; j++) {
        /* columns 16j .. 16j+15 = 128n + 32k + t: bits 2k of qs[32n + t] */
        const unsigned n = j / 8, k = (j % 8) / 2, t0 = 16 * (j % 2);
        int32_t s = 0;
        for (unsigned t = t0; t < t0 + 16; t++)
            s += ((b[16 + 32 * n + t] >> 2 * k) & 3) * q[128 * n + 32 * k + t];
        I += (b[j] & 0xF) * s;
        M += (b[j] >> 4) * bs[j];
    }
    const float d = kern_h2f(kern_ld_u16(b + 80)), dmin = kern_h2f(kern_ld_u16(b + 82));
    return fmaf((float)I, d * dx, 0.0f) - fmaf((float)M, dmin * dx, 0.0f);
}

/* The lane types: w[c] the integer weight of column c (its quant times its
 * sub-block scale), lane l summing the columns with (c % 32) / 4 == l, then
 * corr[l] subtracted; each lane fma(d, (float)sum, init_l) (init NULL: 0)
 * and the lanes folded. */
static float lanes_fold(const int32_t *w, const int8_t *q, const int32_t *corr,
                        float d, const float *init)
{
    float lane[8];
    for (unsigned l = 0; l < 8; l++) {
        int32_t s = 0;
        for (unsigned c = 4 * l; c < KERN_QK_K; c += 32)
            for (unsigned k = 0; k < 4; k++)
                s += w[c + k] * q[c + k];
        lane[l] = fmaf(d, (float)(s - corr[l]), init ? init[l] : 0.0f);
    }
    return kq_fold8(lane);
}

static const int32_t no_corr[8];

/* ggml_vec_dot_q4_K_q8_K: the lanes with d = d_x d_w, then its 4 min lanes
 * fma(-d_x dmin_w, m_2k S_2k + m_2k+1 S_2k+1, 0) (S_j the activation sum
 * of sub-block j) folded as ((m0 + m2) + (m1 + m3)) and added */
static float dot_q4_k(const uint8_t *b, const int8_t *q, float dx,
                      const int16_t *bs)
{
    int32_t w[KERN_QK_K], P[4] = { 0 };
    float ml[4];
    for (unsigned j = 0; j < 8; j++) {
        uint8_t sc, m;
        kq_scale_min_k4(j, b + 4, &sc, &m);
        P[j / 2] += m * (bs[2 * j] + bs[2 * j + 1]);
        for (unsigned t = 0; t < 32; t++) {
            const uint8_t byte = b[16 + 32 * (j / 2) + t];
            w[32 * j + t] = sc * (j % 2 ? byte >> 4 : byte & 0xF);
        }
    }
    const float dmin = -dx * kern_h2f(kern_ld_u16(b + 2));
    for (unsigned k = 0; k < 4; k++)
        ml[k] = fmaf(dmin, (float)P[k], 0.0f);
    return lanes_fold(w, q, no_corr, dx * kern_h2f(kern_ld_u16(b)), NULL) +
           ((ml[0] + ml[2]) + (ml[1] + ml[3]));
}

/* ggml_vec_dot_q2_K_q8_K: lane l starts at fma(-d_x dmin_w, m_2l bsum_2l +
 * m_2l+1 bsum_2l+1, 0), then fma(d_x d_w, sumi_l, that) */
static float dot_q2_k(const uint8_t *b, const int8_t *q, float dx,
                      const int16_t *bs)
{
    int32_t w[KERN_QK_K];
    float init[8];
    for (unsigned c = 0; c < KERN_QK_K; c++) {
        const unsigned n = c / 128, k = (c % 128) / 32, t = c % 32;
        w[c] = (b[c / 16] & 0xF) * ((b[16 + 32 * n + t] >> 2 * k) & 3);
    }
    const float dmin = -dx * kern_h2f(kern_ld_u16(b + 82));
    for (unsigned l = 0; l < 8; l++)
        init[l] = fmaf(dmin, (float)((b[2 * l] >> 4) * bs[2 * l] +
                                     (b[2 * l + 1] >> 4) * bs[2 * l + 1]), 0.0f);
    return lanes_fold(w, q, no_corr, dx * kern_h2f(kern_ld_u16(b + 80)), init);
}

static float dot_q6_k(const uint8_t *b, const int8_t *q, float dx,
                      const int16_t *bs)
{
    int32_t w[KERN_QK_K], corr[8];
    const int8_t *sc = (const int8_t *)(b + 192);
    for (unsigned c = 0; c < KERN_QK_K; c++) {
        const unsigned n = c / 128, k = (c % 128) / 32, t = c % 32;
        const uint8_t lo = b[64 * n + 32 * (k % 2) + t];
        const unsigned q6 = (k < 2 ? lo & 0xF : lo >> 4) |
                            ((b[128 + 32 * n + t] >> 2 * k) & 3) << 4;
        w[c] = sc[c / 16] * (int32_t)q6;
    }
    for (unsigned l = 0; l < 8; l++)
        corr[l] = 32 * (sc[2 * l] * bs[2 * l] + sc[2 * l + 1] * bs[2 * l + 1]);
    return lanes_fold(w, q, corr, dx * kern_h2f(kern_ld_u16(b + 208)), NULL);
}

static float dot_q5_k(const uint8_t *b, const int8_t *q, float dx,
                      const int16_t *bs)
{
    int32_t w[KERN_QK_K], M = 0;
    for (unsigned j = 0; j < 8; j++) {
        uint8_t sc, m;
        kq_scale_min_k4(j, b + 4, &sc, &m);
        M += m * (bs[2 * j] + bs[2 * j + 1]);
        for (unsigned t = 0; t < 32; t++) {
            const uint8_t lo = b[48 + 32 * (j / 2) + t];
            const unsigned q5 = (j % 2 ? lo >> 4 : lo & 0xF) | ((b[16 + t] >> j) & 1) << 4;
            w[32 * j + t] = sc * (int32_t)q5;
        }
    }
    const float d = dx * kern_h2f(kern_ld_u16(b));
    const float dmin = -dx * kern_h2f(kern_ld_u16(b + 2));
    return lanes_fold(w, q, no_corr, d, NULL) + fmaf(dmin, (float)M, 0.0f);
}

static float dot_q3_k(const uint8_t *b, const int8_t *q, float dx,
                      const int16_t *bs)
{
    int32_t w[KERN_QK_K];
    (void)bs;
    for (unsigned c = 0; c < KERN_QK_K; c++) {
        const unsigned n = c / 128, k = (c % 128) / 32, t = c % 32;
        const int q3 = ((b[32 + 32 * n + t] >> 2 * k) & 3) -
                       ((b[t] >> (4 * n + k)) & 1 ? 0 : 4);
        w[c] = kq_scale_q3(c / 16, b + 96) * q3;
    }
    return lanes_fold(w, q, no_corr, dx * kern_h2f(kern_ld_u16(b + 108)), NULL);
}

static float dot_iq4_xs(const uint8_t *b, const int8_t *q, float dx,
                        const int16_t *bs)
{
    int32_t w[KERN_QK_K];
    const uint16_t sh = kern_ld_u16(b + 2);
    (void)bs;
    for (unsigned c = 0; c < KERN_QK_K; c++) {
        const unsigned ib = c / 32, t = c % 32;
        const uint8_t byte = b[8 + 16 * ib + t % 16];
        w[c] = kq_scale_iq4(ib, b + 4, sh) * kern_kq_iq4_values[t < 16 ? byte & 0xF : byte >> 4];
    }
    return lanes_fold(w, q, no_corr, kern_h2f(kern_ld_u16(b)) * dx, NULL);
}

/* y[r] += the dot of row r's block with the activation block of col0. */
#define KQ_MV_REF(NAME, T, DOT)                                                \
    static void NAME(const void *payload, unsigned rows, unsigned cols,        \
                     const kern_act *x, unsigned col0, float *y)               \
    {                                                                          \
        const kern_type_ops *o = kern_kq_type(T);                              \
        const unsigned rp = kern_roundup(rows, KERN_PANEL), xb = col0 / KERN_QK_K; \
        uint8_t blk[KQ_Q6_BYTES];                                              \
        (void)cols;                                                            \
        for (unsigned r = 0; r < rows; r++) {                                  \
            o->get(payload, rp, 1, r, blk);                                    \
            y[r] += DOT(blk, x->q8k + (size_t)xb * KERN_QK_K, x->q8k_d[xb],    \
                        x->q8k_bsums + (size_t)xb * 16);                       \
        }                                                                      \
    }

KQ_MV_REF(mv_q2_k, KERN_Q2_K, dot_q2_k)
KQ_MV_REF(mv_q2_k_rp, KERN_Q2_K, dot_q2_k_rp)
KQ_MV_REF(mv_q3_k, KERN_Q3_K, dot_q3_k)
KQ_MV_REF(mv_q4_k, KERN_Q4_K, dot_q4_k)
KQ_MV_REF(mv_q4_k_rp, KERN_Q4_K, dot_q4_k_rp)
KQ_MV_REF(mv_q5_k, KERN_Q5_K, dot_q5_k)
KQ_MV_REF(mv_q6_k, KERN_Q6_K, dot_q6_k)
KQ_MV_REF(mv_iq4_xs, KERN_IQ4_XS, dot_iq4_xs)

KERN_MM_FROM_MV(mm_q2_k, mv_q2_k)
KERN_MM_FROM_MV(mm_q2_k_rp, mv_q2_k_rp)
KERN_MM_FROM_MV(mm_q3_k, mv_q3_k)
KERN_MM_FROM_MV(mm_q4_k, mv_q4_k)
KERN_MM_FROM_MV(mm_q4_k_rp, mv_q4_k_rp)
KERN_MM_FROM_MV(mm_q5_k, mv_q5_k)
KERN_MM_FROM_MV(mm_q6_k, mv_q6_k)
KERN_MM_FROM_MV(mm_iq4_xs, mv_iq4_xs)

void kern_kq_fill(kern_ops *ops, enum kern_isa isa)
{
    switch (isa) {
    case KERN_ISA_SCALAR:
        ops->tile_mv[KERN_Q2_K] = mv_q2_k;
        ops->tile_mv[KERN_Q3_K] = mv_q3_k;
        ops->tile_mv[KERN_Q4_K] = mv_q4_k;
        ops->tile_mv[KERN_Q5_K] = mv_q5_k;
        ops->tile_mv[KERN_Q6_K] = mv_q6_k;
        ops->tile_mv[KERN_IQ4_XS] = mv_iq4_xs;
        ops->tile_mm[KERN_Q2_K] = mm_q2_k;
        ops->tile_mm[KERN_Q3_K] = mm_q3_k;
        ops->tile_mm[KERN_Q4_K] = mm_q4_k;
        ops->tile_mm[KERN_Q5_K] = mm_q5_k;
        ops->tile_mm[KERN_Q6_K] = mm_q6_k;
        ops->tile_mm[KERN_IQ4_XS] = mm_iq4_xs;
        ops->tile_mv_rp[KERN_Q2_K] = mv_q2_k_rp;
        ops->tile_mv_rp[KERN_Q4_K] = mv_q4_k_rp;
        ops->tile_mm_rp[KERN_Q2_K] = mm_q2_k_rp;
        ops->tile_mm_rp[KERN_Q4_K] = mm_q4_k_rp;
        ops->act_q8k = kern_kq_act_q8k_ref;
        break;
#if HAVE_ISA_X86
    case KERN_ISA_AVX2:
        kern_kq_fill_avx2(ops);
        break;
    case KERN_ISA_AVX512:
        kern_kq_fill_avx512(ops, 0);
        break;
    case KERN_ISA_AVX512_VNNI:
        kern_kq_fill_avx512(ops, 1);
        break;
#endif
    default:
        break;
    }
}
