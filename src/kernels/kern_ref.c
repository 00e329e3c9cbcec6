/*
 * kern_ref.c — the scalar reference mat-vec: plain loops, present on every
 * machine and the oracle the SIMD kernels are tested against.
 *
 * For each output row r of a tile, a sum is formed over the tile's columns
 * and added to y[r] once.  How the sum is formed is part of the contract,
 * because every model is held to the bits of a peer program:
 *
 *   F32   sum += w * x.f32, column by column: llama2.c run.c's matmul(), so
 *         a matrix that fits one column tile gets exactly run.c's sum.
 *
 *   F16, Q8_0, Q4_0 are what GGUF files hold, and their peer is llama.cpp
 *   on an x86 CPU with AVX-512 (the build that produced our reference
 *   texts).  Its kernels keep several partial sums per row:
 *
 *   F16   ggml_vec_dot_f16 with 16-lane vectors, 4 of them: column c below
 *         np = cols rounded down to 64 feeds lane c % 64 with an FMA (the
 *         product of two halves is exact), the lanes are folded as
 *         _mm512_reduce_add_ps folds them (see fold64() below), and the
 *         columns from np on are added in double to that total.
 *   Q8_0  ggml_vec_dot_q8_0_q8_0 (its AVX2 code, also used by AVX-512
 *         builds): 8 float lanes; per block b, lane j takes
 *         fma(d_w * d_x, (float)isum_bj, lane_j), isum_bj being the integer
 *         dot of block columns 4j..4j+3; at the end
 *         ((l0+l4) + (l2+l6)) + ((l1+l5) + (l3+l7)), as hsum_float_8.
 *   Q4_0  the same with q_w = nibble - 8 (ggml_vec_dot_q4_0_q8_0).
 *   Q4_0, repacked (tile_mv_q4_0_rp): llama.cpp repacks a Q4_0 matrix whose
 *         row count is a multiple of 8 and runs ggml_gemv_q4_0_8x8_q8_0,
 *         one FMA per block: sum = fma((float)isum_b, d_w * d_x, sum).
 *
 * A matrix wider than one tile (256 columns) adds its tiles' sums to y[r]
 * in float, which llama.cpp does not do; those matrices agree with it to
 * the last bits only.  Q8_0/Q4_0 tiles need col0 to be a multiple of 32
 * (see kern_impl.h).  This file is built with -ffp-contract=off: every FMA
 * below is an explicit fmaf().
 */
#include "config.h"

#include <math.h>

#include "kernels/kern.h"
#include "kernels/kern_impl.h"

static void mv_f32(const void *payload, unsigned rows, unsigned cols,
                   const kern_act *x, unsigned col0, float *y)
{
    kern_geom g = kern_geom_of(rows, cols);
    const uint8_t *w = payload;
    const float *xv = x->f32 + col0;
    for (unsigned r = 0; r < rows; r++) {
        float sum = 0.0f;
        for (unsigned c = 0; c < cols; c++)
            sum += kern_ld_f32(w + 4 * kern_idx_dense(&g, r, c)) * xv[c];
        y[r] += sum;
    }
}

/* Fold 64 lane sums as ggml_vec_dot_f16 does on AVX-512: the four
 * accumulators (lanes 0-15, 16-31, 32-47, 48-63) as (a0 + a2) + (a1 + a3),
 * then GCC's _mm512_reduce_add_ps: halves of 8, of 4, then
 * (t0 + t2) + (t1 + t3). */
static float fold64(const float *acc)
{
    float a[16];
    for (unsigned l = 0; l < 16; l++)
        a[l] = (acc[l] + acc[32 + l]) + (acc[16 + l] + acc[48 + l]);
    return kern_fold16_ref(a);
}

static void mv_f16(const void *payload, unsigned rows, unsigned cols,
                   const kern_act *x, unsigned col0, float *y)
{
    kern_geom g = kern_geom_of(rows, cols);
    const uint8_t *w = payload;
    const uint16_t *xv = x->f16 + col0;
    const unsigned np = cols & ~63u;
    for (unsigned r = 0; r < rows; r++) {
        float acc[64] = { 0 };
        for (unsigned c = 0; c < np; c++)
            acc[c % 64] = fmaf(kern_h2f(kern_ld_u16(w + 2 * kern_idx_dense(&g, r, c))),
                               kern_h2f(xv[c]), acc[c % 64]);
        double sum = fold64(acc);
        for (unsigned c = np; c < cols; c++)
            sum += (double)(kern_h2f(kern_ld_u16(w + 2 * kern_idx_dense(&g, r, c))) *
                            kern_h2f(xv[c]));
        y[r] += (float)sum;
    }
}

/* hsum_float_8 of llama.cpp's x86 quants.c */
static float fold8(const float *l)
{
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

/* Weight quant (signed) of row r, column c of a Q8_0/Q4_0 payload. */
static int quant_w(enum kern_type t, const kern_geom *g, const uint8_t *w,
                   unsigned r, unsigned c)
{
    if (t == KERN_Q8_0)
        return (int)w[kern_off_q8(g, r, c)] - 128;
    int hi;
    uint8_t byte = w[kern_off_q4(g, r, c, &hi)];
    return (hi ? byte >> 4 : byte & 0x0F) - 8;
}

/* Q8_0/Q4_0 with 8 lanes per row (rp = 0) or one FMA per block (rp = 1). */
static void mv_quant(enum kern_type t, int rp, const void *payload,
                     unsigned rows, unsigned cols, const kern_act *x,
                     unsigned col0, float *y)
{
    kern_geom g = kern_geom_of(rows, cols);
    const uint8_t *w = payload;
    const unsigned xb0 = col0 / KERN_QBLOCK;
    for (unsigned r = 0; r < rows; r++) {
        float lane[8] = { 0 }, sum = 0.0f;
        for (unsigned b = 0; b < g.nb; b++) {
            const int8_t *xq = x->q8 + col0 + KERN_QBLOCK * b;
            int32_t isum[8] = { 0 };
            for (unsigned k = 0; k < KERN_QBLOCK; k++)
                isum[k / 4] += quant_w(t, &g, w, r, KERN_QBLOCK * b + k) * xq[k];
            const float d = kern_h2f(kern_ld_u16(w + 2 * kern_idx_scale(&g, r, b))) *
                            x->q8_d[xb0 + b];
            if (rp) {
                int32_t s = 0;
                for (unsigned j = 0; j < 8; j++)
                    s += isum[j];
                sum = fmaf((float)s, d, sum);
            } else {
                for (unsigned j = 0; j < 8; j++)
                    lane[j] = fmaf(d, (float)isum[j], lane[j]);
            }
        }
        y[r] += rp ? sum : fold8(lane);
    }
}

static void mv_q8_0(const void *payload, unsigned rows, unsigned cols,
                    const kern_act *x, unsigned col0, float *y)
{
    mv_quant(KERN_Q8_0, 0, payload, rows, cols, x, col0, y);
}

static void mv_q4_0(const void *payload, unsigned rows, unsigned cols,
                    const kern_act *x, unsigned col0, float *y)
{
    mv_quant(KERN_Q4_0, 0, payload, rows, cols, x, col0, y);
}

static void mv_q4_0_rp(const void *payload, unsigned rows, unsigned cols,
                       const kern_act *x, unsigned col0, float *y)
{
    mv_quant(KERN_Q4_0, 1, payload, rows, cols, x, col0, y);
}

static float dot_f32(const float *a, const float *b, unsigned n)
{
    float sum = 0.0f;
    for (unsigned i = 0; i < n; i++)
        sum += a[i] * b[i];
    return sum;
}

static void axpy_f32(float *y, float a, const float *x, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        y[i] += a * x[i];
}

/* Batched: m mat-vecs, by definition (the oracle of the native kernels). */
KERN_MM_FROM_MV(mm_f32, mv_f32)
KERN_MM_FROM_MV(mm_f16, mv_f16)
KERN_MM_FROM_MV(mm_q8_0, mv_q8_0)
KERN_MM_FROM_MV(mm_q4_0, mv_q4_0)
KERN_MM_FROM_MV(mm_q4_0_rp, mv_q4_0_rp)

const kern_ops kern_ops_scalar = {
    .isa = KERN_ISA_SCALAR,
    .name = "scalar",
    .tile_mv = {
        [KERN_F32] = mv_f32, [KERN_F16] = mv_f16,
        [KERN_Q8_0] = mv_q8_0, [KERN_Q4_0] = mv_q4_0,
    },
    .tile_mv_q4_0_rp = mv_q4_0_rp,
    .dot_f32 = dot_f32,
    .axpy_f32 = axpy_f32,
    .tile_mm = {
        [KERN_F32] = mm_f32, [KERN_F16] = mm_f16,
        [KERN_Q8_0] = mm_q8_0, [KERN_Q4_0] = mm_q4_0,
    },
    .tile_mm_q4_0_rp = mm_q4_0_rp,
    .attn_f16 = kern_attn_f16_ref,
    .attn_prefill_f16 = kern_attn_prefill_f16,
    .attn_f32 = kern_attn_f32_ref,
    .swiglu_ggml = kern_swiglu_ggml,
    .act_q8 = kern_act_q8_ref,
    .act_f16 = kern_act_f16_ref,
};
