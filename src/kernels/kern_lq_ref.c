/*
 * kern_lq_ref.c — the scalar reference mat-vec of the 32-column GGML block
 * types and BF16: plain loops over each row's GGML blocks (rebuilt from
 * the payload by the type's get), the oracle of kern_lq_avx2.c and
 * kern_lq_avx512.c; and the family's fill of each tier's table (as
 * kern_kq.c's for the K-quants), this reference first.
 *
 * Contract.  As for Q8_0/Q4_0 (kern_ref.c), the peer is llama.cpp's CPU
 * backend on x86 (a GGML_NATIVE build; AVX2 code, which its AVX-512 builds
 * run too), and within one tile (<= 256 columns) a row's sum is the one
 * llama.cpp forms for that row, bit for bit; a matrix wider than a tile
 * adds its tiles' sums to y in float.  Activations: Q8_0 blocks (x->q8,
 * q8_d) for Q5_0, IQ4_NL and MXFP4; Q8_1 (the same quants and d, and s,
 * x->q8_s) for Q4_1 and Q5_1; bfloat16 (x->bf16, GGML_FP32_TO_BF16) for
 * BF16.  col0 is a multiple of 32 (any for BF16).  Integer dots are
 * exact; isum_j below is the dot of block columns 4j .. 4j+3, dw, m the
 * block's f16 scale and min (dw of MXFP4: its E8M0 scale halved,
 * ggml_e8m0_to_fp32_half, as the doubled value table wants), dx, s the
 * activation block's.
 *
 *   Q5_0    ggml_vec_dot_q5_0_q8_0: 8 lanes, per block
 *           lane_j = fma(dw * dx, isum_j, lane_j) (weights q - 16); at the
 *           end hsum_float_8 (kern_ref.c's fold8).
 *   Q4_1    ggml_vec_dot_q4_1_q8_1: the same lanes on the unsigned nibbles,
 *           and per block summs = fma(m, s, summs) (GCC contracts ggml's
 *           summs += m * s); the sum is fold8(lanes) + summs.
 *   Q5_1    ggml_vec_dot_q5_1_q8_1: as Q4_1 with 5-bit quants.
 *   IQ4_NL, MXFP4  ggml_vec_dot_{iq4_nl,mxfp4}_q8_0: blocks in pairs, the
 *           first of a pair into 8 lanes a, the second into 8 lanes b,
 *           lane = fma(dx * dw, isum_j, lane); then fold8(a + b) and, when
 *           the block count is odd, the last block as
 *           sum = fma(isum, dx * dw, sum) (GCC contracts sumf += d * sumi).
 *   IQ4_NL, MXFP4 repacked (tile_mv_rp): llama.cpp repacks the matrices of
 *           these types whose row count is a multiple of 8 (ggml-cpu
 *           repack.cpp, ggml_repack_get_optimal_repack_type, on any AVX2
 *           CPU; MoE expert tensors too) and runs
 *           gemv_q4_b32_8x8_q8_0_lut_avx: sum = fma(isum, dw * dx, sum),
 *           one per block, as Q4_0's repacked flavour (kern_ref.c).
 *   BF16    ggml_vec_dot_bf16 as a CPU with AVX512_BF16 runs it (the build
 *           of the machines we compare with: Sapphire Rapids, Zen 4, Zen 5;
 *           on an AVX-512 CPU without it, Ice Lake, llama.cpp multiplies
 *           and adds in 2 x 16 lanes instead, and its last bits differ from
 *           ours): column pair k below np = C & ~63 feeds lane k % 32 with
 *           vdpbf16ps, which adds the odd column's product and then the even
 *           one's, each a fused multiply-add (the exact product, one
 *           rounding to nearest even), its subnormal inputs read as zeros
 *           and subnormal sums flushed to zero (checked against the
 *           instruction on millions of lanes, subnormals included); lanes
 *           0-15 and 16-31 are each folded as _mm512_reduce_add_ps
 *           (kern_fold16_ref) and added in double, 0 + c1 + c2; the
 *           columns from np on are added in double, each product in float.
 *
 * The block types read whole 32-column blocks: a tile that ends inside a
 * block meets the activations' zero padding there (kern_lq.c).  This file
 * is built with -ffp-contract=off: every FMA is an explicit fmaf().
 */
#include "config.h"

#include <math.h>
#if HAVE_ISA_X86 && (defined(__x86_64__) || defined(__i386__))
#include <cpuid.h>
#endif

#include "kernels/kern.h"
#include "kernels/kern_impl.h"
#include "kernels/kern_lq.h"

/* hsum_float_8 of llama.cpp's x86 quants.c */
static float fold8(const float *l)
{
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

/* A block's 32 weights as the integers its dot multiplies (ggml's order:
 * column j low nibble of byte j, column 16 + j its high nibble). */
static void block_ints(enum kern_type t, const uint8_t *blk, int *w)
{
    for (unsigned j = 0; j < 32; j++) {
        unsigned k = j % 16;
        unsigned n;
        switch (t) {
        case KERN_Q4_1:
            w[j] = (int)(j < 16 ? blk[4 + k] & 0x0Fu : blk[4 + k] >> 4);
            break;
        case KERN_Q5_0:
        case KERN_Q5_1: {
            const uint8_t *qh = blk + (t == KERN_Q5_0 ? 2 : 4), *qs = qh + 4;
            n = j < 16 ? qs[k] & 0x0Fu : qs[k] >> 4;
            n |= (kern_ld_u32(qh) >> j & 1u) << 4;
            w[j] = t == KERN_Q5_0 ? (int)n - 16 : (int)n;
            break;
        }
        case KERN_IQ4_NL:
            n = j < 16 ? blk[2 + k] & 0x0Fu : blk[2 + k] >> 4;
            w[j] = kern_lq_iq4nl[n];
            break;
        default:                        /* MXFP4 */
            n = j < 16 ? blk[1 + k] & 0x0Fu : blk[1 + k] >> 4;
            w[j] = kern_lq_mxfp4[n];
            break;
        }
    }
}

/* The 8 group dots of a block with activation quants xq. */
static void group_dots(enum kern_type t, const uint8_t *blk, const int8_t *xq,
                       int32_t *isum)
{
    int w[32];
    block_ints(t, blk, w);
    for (unsigned j = 0; j < 8; j++) {
        isum[j] = 0;
        for (unsigned e = 4 * j; e < 4 * j + 4; e++)
            isum[j] += w[e] * xq[e];
    }
}

static int32_t block_dot(enum kern_type t, const uint8_t *blk, const int8_t *xq)
{
    int32_t isum[8], s = 0;
    group_dots(t, blk, xq, isum);
    for (unsigned j = 0; j < 8; j++)
        s += isum[j];
    return s;
}

/* The block's weight scale (f16 d, or MXFP4's halved E8M0). */
static float block_dw(enum kern_type t, const uint8_t *blk)
{
    return t == KERN_MXFP4 ? kern_e8m0_half(blk[0]) : kern_h2f(kern_ld_u16(blk));
}

/* One row's sum over its nb blocks (activation block xb0 on), as the
 * essay's table says; rp: the repacked flavour. */
static float row_dot(enum kern_type t, int rp, const uint8_t *blocks,
                     unsigned nb, const kern_act *x, unsigned xb0)
{
    const unsigned bb = kern_lq_type(t)->blk_bytes;
    float lane[2][8] = { { 0 } }, summs = 0.0f, sum = 0.0f;
    const int pairs = t == KERN_IQ4_NL || t == KERN_MXFP4;
    unsigned b = 0;

    if (rp) {
        for (; b < nb; b++) {
            const uint8_t *blk = blocks + (size_t)b * bb;
            const int8_t *xq = x->q8 + KERN_QBLOCK * (xb0 + b);
            sum = fmaf((float)block_dot(t, blk, xq),
                       block_dw(t, blk) * x->q8_d[xb0 + b], sum);
        }
        return sum;
    }
    /* blocks in order; for the pairing types, the whole pairs only */
    const unsigned nlanes = pairs ? nb & ~1u : nb;
    for (; b < nlanes; b++) {
        const uint8_t *blk = blocks + (size_t)b * bb;
        const int8_t *xq = x->q8 + KERN_QBLOCK * (xb0 + b);
        const float dx = x->q8_d[xb0 + b];
        int32_t isum[8];
        group_dots(t, blk, xq, isum);
        float *l = lane[pairs ? b % 2 : 0];
        const float d = pairs ? dx * block_dw(t, blk) : block_dw(t, blk) * dx;
        for (unsigned j = 0; j < 8; j++)
            l[j] = fmaf(d, (float)isum[j], l[j]);
        if (t == KERN_Q4_1 || t == KERN_Q5_1)
            summs = fmaf(kern_h2f(kern_ld_u16(blk + 2)), x->q8_s[xb0 + b], summs);
    }
    if (!pairs)
        return fold8(lane[0]) + summs;
    for (unsigned j = 0; j < 8; j++)
        lane[0][j] += lane[1][j];
    sum = fold8(lane[0]);
    if (b < nb) {                       /* the last block of an odd count */
        const uint8_t *blk = blocks + (size_t)b * bb;
        sum = fmaf((float)block_dot(t, blk, x->q8 + KERN_QBLOCK * (xb0 + b)),
                   x->q8_d[xb0 + b] * block_dw(t, blk), sum);
    }
    return sum;
}

static void mv_blocks(enum kern_type t, int rp, const void *payload,
                      unsigned rows, unsigned cols, const kern_act *x,
                      unsigned col0, float *y)
{
    const kern_type_ops *o = kern_lq_type(t);
    const unsigned nb = (cols + KERN_QBLOCK - 1) / KERN_QBLOCK;
    const unsigned rp16 = kern_roundup(rows, KERN_PANEL);
    uint8_t blocks[KERN_TILE_COLS / KERN_QBLOCK * 24];
    for (unsigned r = 0; r < rows; r++) {
        o->get(payload, rp16, nb, r, blocks);
        y[r] += row_dot(t, rp, blocks, nb, x, col0 / KERN_QBLOCK);
    }
}

/* ---- BF16 ------------------------------------------------------------------ */

/* v, or a zero of its sign when v is subnormal (vdpbf16ps's DAZ and FTZ) */
static float flush(float v)
{
    uint32_t u = kern_f32_bits(v);
    return u & 0x7F800000u ? v : kern_bits_f32(u & 0x80000000u);
}

/* One lane of vdpbf16ps: acc + w1 x1, then + w0 x0, each a fused
 * multiply-add (the exact product, one rounding). */
static float dp_bf16(float acc, uint16_t w0, uint16_t w1, uint16_t x0,
                     uint16_t x1)
{
    acc = flush(fmaf(flush(kern_lq_bf2f(w1)), flush(kern_lq_bf2f(x1)), acc));
    return flush(fmaf(flush(kern_lq_bf2f(w0)), flush(kern_lq_bf2f(x0)), acc));
}

static void mv_bf16(const void *payload, unsigned rows, unsigned cols,
                    const kern_act *x, unsigned col0, float *y)
{
    const uint8_t *pl = payload;
    const uint16_t *xb = x->bf16 + col0;
    const unsigned np = cols & ~63u;
    for (unsigned r = 0; r < rows; r++) {
        float acc[32] = { 0 };
        for (unsigned c = 0; c < np; c += 2)
            acc[c / 2 % 32] = dp_bf16(acc[c / 2 % 32],
                                      kern_ld_u16(pl + lq_bf16_off(cols, r, c)),
                                      kern_ld_u16(pl + lq_bf16_off(cols, r, c + 1)),
                                      xb[c], xb[c + 1]);
        double sum = 0.0;
        sum += (double)kern_fold16_ref(acc);
        sum += (double)kern_fold16_ref(acc + 16);
        for (unsigned c = np; c < cols; c++)
            sum += (double)(kern_lq_bf2f(kern_ld_u16(pl + lq_bf16_off(cols, r, c))) *
                            kern_lq_bf2f(xb[c]));
        y[r] += (float)sum;
    }
}

void kern_lq_act_bf16_ref(const float *x, unsigned n, uint16_t *h)
{
    for (unsigned i = 0; i < n; i++)
        h[i] = kern_lq_f2bf(x[i]);
}

/* ---- the table entries --------------------------------------------------------- */

#define LQ_MV(NAME, T, RP)                                                     \
    static void NAME(const void *payload, unsigned rows, unsigned cols,        \
                     const kern_act *x, unsigned col0, float *y)               \
    {                                                                          \
        mv_blocks(T, RP, payload, rows, cols, x, col0, y);                     \
    }

LQ_MV(mv_q4_1, KERN_Q4_1, 0)
LQ_MV(mv_q5_0, KERN_Q5_0, 0)
LQ_MV(mv_q5_1, KERN_Q5_1, 0)
LQ_MV(mv_iq4_nl, KERN_IQ4_NL, 0)
LQ_MV(mv_mxfp4, KERN_MXFP4, 0)
LQ_MV(mv_iq4_nl_rp, KERN_IQ4_NL, 1)
LQ_MV(mv_mxfp4_rp, KERN_MXFP4, 1)

KERN_MM_FROM_MV(mm_bf16, mv_bf16)
KERN_MM_FROM_MV(mm_q4_1, mv_q4_1)
KERN_MM_FROM_MV(mm_q5_0, mv_q5_0)
KERN_MM_FROM_MV(mm_q5_1, mv_q5_1)
KERN_MM_FROM_MV(mm_iq4_nl, mv_iq4_nl)
KERN_MM_FROM_MV(mm_mxfp4, mv_mxfp4)
KERN_MM_FROM_MV(mm_iq4_nl_rp, mv_iq4_nl_rp)
KERN_MM_FROM_MV(mm_mxfp4_rp, mv_mxfp4_rp)

void kern_lq_fill_ref(kern_ops *ops)
{
    ops->tile_mv[KERN_BF16] = mv_bf16;
    ops->tile_mv[KERN_Q4_1] = mv_q4_1;
    ops->tile_mv[KERN_Q5_0] = mv_q5_0;
    ops->tile_mv[KERN_Q5_1] = mv_q5_1;
    ops->tile_mv[KERN_IQ4_NL] = mv_iq4_nl;
    ops->tile_mv[KERN_MXFP4] = mv_mxfp4;
    ops->tile_mv_rp[KERN_IQ4_NL] = mv_iq4_nl_rp;
    ops->tile_mv_rp[KERN_MXFP4] = mv_mxfp4_rp;
    ops->tile_mm[KERN_BF16] = mm_bf16;
    ops->tile_mm[KERN_Q4_1] = mm_q4_1;
    ops->tile_mm[KERN_Q5_0] = mm_q5_0;
    ops->tile_mm[KERN_Q5_1] = mm_q5_1;
    ops->tile_mm[KERN_IQ4_NL] = mm_iq4_nl;
    ops->tile_mm[KERN_MXFP4] = mm_mxfp4;
    ops->tile_mm_rp[KERN_IQ4_NL] = mm_iq4_nl_rp;
    ops->tile_mm_rp[KERN_MXFP4] = mm_mxfp4_rp;
    ops->act_bf16 = kern_lq_act_bf16_ref;
}

#if HAVE_ISA_X86 && (defined(__x86_64__) || defined(__i386__))
/* CPUID.(7,1):EAX bit 5 (clang 14's __builtin_cpu_supports lacks the name) */
static int cpu_has_bf16(void)
{
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 5 & 1);
}
#endif

/* The scalar reference first (every tier starts from it), then what the
 * tier has its own kernels for: AVX-512 over AVX2's, vdpbf16ps where the
 * CPU has it (the tables are per tier; within a tier the BF16 kernel with
 * and without the instruction give the same bits). */
void kern_lq_fill(kern_ops *ops, enum kern_isa isa)
{
    switch (isa) {
    case KERN_ISA_SCALAR:
        kern_lq_fill_ref(ops);
        break;
#if HAVE_ISA_X86 && (defined(__x86_64__) || defined(__i386__))
    case KERN_ISA_AVX2:
        kern_lq_fill_avx2(ops);
        break;
    case KERN_ISA_AVX512:
    case KERN_ISA_AVX512_VNNI:
        kern_lq_fill_avx2(ops);
        kern_lq_fill_avx512(ops, isa == KERN_ISA_AVX512_VNNI, cpu_has_bf16());
        break;
#endif
    default:
        break;
    }
}
