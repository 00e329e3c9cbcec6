/*
 * kern_mm_simd.h — private to src/kernels: the batched Q8_0 and Q4_0 tile
 * kernels (kern_ops.tile_mm, tile_mm_q4_0_rp) written once, in
 * kern_simd.h's vocabulary, for the tiers without VNNI: kern_avx2.c
 * (ymm, a panel's 16 rows in two parts of 8) and kern_avx512.c (zmm, the
 * panel in one part) include it after kern_simd.h.  Before it those tiers
 * ran the mat-vec once per input, so a CPU without VNNI (Zen 1-3, Intel
 * client cores before Alder Lake, Skylake-X) prefilled Q8_0 and Q4_0 at
 * mat-vec speed per token.
 *
 * The contract is the mat-vec's bits (kern_impl.h): every output here is
 * made by the same operations in the same order as the tier's mat-vec
 * makes it, so the tests compare the batched kernels with the scalar
 * reference exactly.  What a batch can share is the work on the weights;
 * what it cannot is the per-input arithmetic that makes the bits.
 *
 *   8-lane Q8_0 / Q4_0 (mv_q8_0, mv_q4_0): per row and input, 8 float
 *     sums, sum g over the blocks of fma(d_w * d_x, (float)isum_g, sum_g)
 *     in block order, isum_g the exact dot of the block's group g
 *     (columns 4g .. 4g+3), folded at the end as kern_ref.c's fold8.  The
 *     8 sums of 8 inputs are 64 vectors, more than either register file,
 *     but the 8 sums are independent chains, so they are made one group at
 *     a time: a pass over the blocks for group g keeps one accumulator per
 *     input (KERN_MM_T of them), loads the group's chunk of weights once
 *     per block and, for Q8_0, makes it signed and takes its magnitude
 *     once (q8_lanes's |w| x sign(x, w)) for all inputs.  The d_w * d_x
 *     of every block and input is made once per panel part (mv's
 *     kern_vf_block_d product) and read from L1 by each pass.
 *   repacked Q4_0 (mv_q4_0_rp): per row and input, one float sum of
 *     fma((float)(isum - 8 sum_x), d_w * d_x, sum) per block.  A
 *     panel-block's nibbles are unpacked once for KERN_MM_RP_T inputs
 *     (kern_avx512.c's MM_Q4_RP_GROUP does the same with zmm and 8 inputs); the
 *     int16 sums that mv_q4_0_rp adds are exact in any order.
 * Integer dots are exact whatever instructions make them; the float steps
 * (the int -> float conversion, the d product, the FMA, the fold, the add
 * into y) are the mat-vec's, one for one.  A last single input runs the
 * mat-vec itself (MV), so a batch of one costs what a decode does.
 */
#ifndef CFLOW_KERN_MM_SIMD_H
#define CFLOW_KERN_MM_SIMD_H

#if !defined(KERN_VN)
#error "include kern_simd.h (with KERN_SIMD_W) before kern_mm_simd.h"
#endif

#define KERN_MM_PARTS (KERN_PANEL / KERN_VN)   /* vectors per 16-row panel */
#ifndef KERN_MM_T
#define KERN_MM_T 8        /* inputs per group, 8-lane kernels */
#endif
#ifndef KERN_MM_RP_T
#define KERN_MM_RP_T 4     /* inputs per group, repacked Q4_0 */
#endif

#define KERN_MM_ALWAYS __attribute__((always_inline))

/* One pass: group gi of T inputs over the nb blocks of a panel part.
 * qg: the part's bytes of group gi's chunk in block 0 (blocks bb bytes
 * apart); Q4 takes the low nibbles for gi < 4, the high ones after (the
 * group's columns are 4 gi .. 4 gi + 3 either way).  acc[j] ends as input
 * j's sum_gi. */
KERN_VATTR KERN_MM_ALWAYS static inline void
mm_lanes_pass(const uint8_t *qg, unsigned nb, size_t bb, const int8_t *const *xq,
              const int32_t (*init)[KERN_TILE_COLS / 4],
              const kern_vf (*d)[KERN_TILE_COLS / KERN_QBLOCK], const int T,
              const int q4, const int hi, const unsigned gi, kern_vf *acc)
{
    const kern_vi m4 = kern_vi_set1_8(0x0F), sgn = kern_vi_set1_8((char)0x80);
    const kern_vi ones = kern_vi_set1_16(1);
    _Pragma("GCC unroll 8")
    for (int j = 0; j < T; j++)
        acc[j] = kern_vf_zero();
    for (unsigned b = 0; b < nb; b++) {
        kern_vi v = kern_vi_loadu(qg + b * bb), u;
        if (q4) {
            u = kern_vi_and(hi ? kern_vi_srli16(v, 4) : v, m4);
        } else {
            v = kern_vi_xor(v, sgn);   /* signed weights */
            u = kern_vi_abs8(v);
        }
        _Pragma("GCC unroll 8")
        for (int j = 0; j < T; j++) {
            const kern_vi xb = kern_vi_bcast4(xq[j] + KERN_QBLOCK * b + 4 * gi);
            kern_vi s = kern_vi_madd16(kern_vi_maddubs(u, q4 ? xb : kern_vi_sign8(xb, v)),
                                       ones);
            if (q4)
                s = kern_vi_add32(kern_vi_set1_32(init[j][8 * b + gi]), s);
            acc[j] = kern_vf_fma(d[j][b], kern_vf_cvt_i32(s), acc[j]);
        }
    }
}

/* T inputs x[0 .. T) (a constant where inlined) through the tile, 8 lanes
 * per row: panel by panel, part by part, group by group. */
KERN_VATTR KERN_MM_ALWAYS static inline void
mm_lanes_group(const uint8_t *w, kern_geom g, unsigned rows, const kern_act *x,
               const int T, unsigned col0, float *y, size_t ldy, const int q4)
{
    const size_t bb = q4 ? KERN_Q4_BLOCK_BYTES : KERN_Q8_BLOCK_BYTES;
    const uint8_t *qbase = w + g.scale_bytes;
    const unsigned xb0 = col0 / KERN_QBLOCK;
    const int8_t *xq[KERN_MM_T];
    int32_t init[KERN_MM_T][KERN_TILE_COLS / 4];   /* Q4_0: -8 x group sums */
    kern_vf d[KERN_MM_T][KERN_TILE_COLS / KERN_QBLOCK];   /* d_w * d_x */
    kern_vf lane[KERN_MM_T][8];                    /* the 8 group sums */
    for (int j = 0; j < T; j++) {
        xq[j] = x[j].q8 + col0;
        if (q4)
            kern_group_init(xq[j], 8 * g.nb, 8, init[j]);
    }
    for (unsigned p = 0; p < g.np; p++)
        for (unsigned h = 0; h < KERN_MM_PARTS; h++) {
            const uint8_t *qp = qbase + (size_t)p * g.nb * bb + 4 * KERN_VN * h;
            for (unsigned b = 0; b < g.nb; b++) {
                const size_t pb = (size_t)p * g.nb + b;
                if (!h)
                    pf_ahead(qbase + pb * bb, bb / 64);   /* for a tile read once */
                const kern_vf dw = kern_vf_ld_half(w + 2 * pb * KERN_PANEL + 2 * KERN_VN * h);
                _Pragma("GCC unroll 8")
                for (int j = 0; j < T; j++)
                    d[j][b] = kern_vf_mul(dw, kern_vf_set1(x[j].q8_d[xb0 + b]));
            }
            for (unsigned gi = 0; gi < 8; gi++) {
                kern_vf acc[KERN_MM_T];
                const uint8_t *qg = qp + 64 * (q4 ? gi % 4 : gi);
                if (q4 && gi >= 4)
                    mm_lanes_pass(qg, g.nb, bb, xq, init, d, T, 1, 1, gi, acc);
                else if (q4)
                    mm_lanes_pass(qg, g.nb, bb, xq, init, d, T, 1, 0, gi, acc);
                else
                    mm_lanes_pass(qg, g.nb, bb, xq, init, d, T, 0, 0, gi, acc);
                _Pragma("GCC unroll 8")
                for (int j = 0; j < T; j++)
                    lane[j][gi] = acc[j];
            }
            for (int j = 0; j < T; j++)
                kern_vf_add_rows(y + j * ldy, rows, KERN_PANEL * p + KERN_VN * h,
                                 kern_vf_fold8_rows(lane[j]));
        }
}

/* NAME: a batched kernel whose mat-vec is MV: the inputs in groups of TG
 * (at most 8) through GROUP(w, g, rows, x, T, col0, y, ldy), the last
 * fewer than TG with T a constant for each count, a last single input
 * through MV.  KERN_MM_BATCH_A gives NAME the target attribute ATTR (a
 * tier beyond KERN_VATTR's, such as VNNI, whose GROUP must inline into
 * it). */
#define KERN_MM_BATCH(NAME, TG, MV, GROUP) KERN_MM_BATCH_A(KERN_VATTR, NAME, TG, MV, GROUP)
#define KERN_MM_BATCH_A(ATTR, NAME, TG, MV, GROUP)                             \
ATTR static void NAME(const void *payload, unsigned rows, unsigned cols, \
                            const kern_act *x, unsigned m, unsigned col0,      \
                            float *y, size_t ldy)                              \
{                                                                              \
    const kern_geom g = kern_geom_of(rows, cols);                              \
    unsigned j = 0;                                                            \
    _Static_assert((TG) >= 2 && (TG) <= 8, "groups of 2 to 8 inputs");         \
    for (; j + (TG) <= m; j += (TG))                                           \
        GROUP(payload, g, rows, x + j, (TG), col0, y + j * ldy, ldy);          \
    const kern_act *xj = x + j;                                                \
    float *yj = y + j * ldy;                                                   \
    switch (m - j) {                                                           \
    case 7: if (7 < (TG)) GROUP(payload, g, rows, xj, 7, col0, yj, ldy); break; \
    case 6: if (6 < (TG)) GROUP(payload, g, rows, xj, 6, col0, yj, ldy); break; \
    case 5: if (5 < (TG)) GROUP(payload, g, rows, xj, 5, col0, yj, ldy); break; \
    case 4: if (4 < (TG)) GROUP(payload, g, rows, xj, 4, col0, yj, ldy); break; \
    case 3: if (3 < (TG)) GROUP(payload, g, rows, xj, 3, col0, yj, ldy); break; \
    case 2: GROUP(payload, g, rows, xj, 2, col0, yj, ldy); break;              \
    case 1: MV(payload, rows, cols, xj, col0, yj); break;                      \
    }                                                                          \
}

/* NAME: the batched 8-lane kernel of Q8_0 (Q4 0) or Q4_0 (Q4 1) whose
 * mat-vec is MV. */
#define KERN_MM_LANES(NAME, Q4, MV)                                            \
KERN_VATTR KERN_MM_ALWAYS static inline void                                   \
NAME##_group(const uint8_t *w, kern_geom g, unsigned rows, const kern_act *x,  \
             const int T, unsigned col0, float *y, size_t ldy)                 \
{                                                                              \
    mm_lanes_group(w, g, rows, x, T, col0, y, ldy, Q4);                        \
}                                                                              \
KERN_MM_BATCH(NAME, KERN_MM_T, MV, NAME##_group)

/* T inputs through a repacked Q4_0 tile: per panel-block the nibbles of
 * every part are unpacked once (u), then each input's block dot per part
 * is mv_q4_0_rp's int16 sum of 8 vpmaddubsw, widened, less 8 x the
 * block's activation sum, and one FMA. */
KERN_VATTR KERN_MM_ALWAYS static inline void
mm_rp_group(const uint8_t *w, kern_geom g, unsigned rows, const kern_act *x,
            const int T, unsigned col0, float *y, size_t ldy)
{
    const uint8_t *qbase = w + g.scale_bytes;
    const unsigned xb0 = col0 / KERN_QBLOCK;
    const kern_vi m4 = kern_vi_set1_8(0x0F), ones = kern_vi_set1_16(1);
    for (unsigned p = 0; p < g.np; p++) {
        kern_vf acc[KERN_MM_RP_T][KERN_MM_PARTS];
        _Pragma("GCC unroll 4")
        for (int j = 0; j < T; j++)
            _Pragma("GCC unroll 2")
            for (int h = 0; h < KERN_MM_PARTS; h++)
                acc[j][h] = kern_vf_zero();
        for (unsigned b = 0; b < g.nb; b++) {
            const size_t pb = (size_t)p * g.nb + b;
            const uint8_t *q = qbase + pb * KERN_Q4_BLOCK_BYTES;
            kern_vi u[KERN_MM_PARTS][8];   /* [k]: low nibbles of chunk k, [4 + k]: high */
            kern_vf dw[KERN_MM_PARTS];
            pf_ahead(q, KERN_Q4_BLOCK_BYTES / 64);
            _Pragma("GCC unroll 2")
            for (int h = 0; h < KERN_MM_PARTS; h++) {
                _Pragma("GCC unroll 4")
                for (int k = 0; k < 4; k++) {
                    const kern_vi v = kern_vi_loadu(q + 64 * k + 4 * KERN_VN * h);
                    u[h][k] = kern_vi_and(v, m4);
                    u[h][4 + k] = kern_vi_and(kern_vi_srli16(v, 4), m4);
                }
                dw[h] = kern_vf_ld_half(w + 2 * pb * KERN_PANEL + 2 * KERN_VN * h);
            }
            _Pragma("GCC unroll 4")
            for (int j = 0; j < T; j++) {
                const int8_t *xq = x[j].q8 + col0 + KERN_QBLOCK * b;
                kern_vi s[KERN_MM_PARTS];   /* int16, |s| <= 30480 */
                _Pragma("GCC unroll 2")
                for (int h = 0; h < KERN_MM_PARTS; h++)
                    s[h] = kern_vi_zero();
                _Pragma("GCC unroll 4")
                for (int k = 0; k < 4; k++) {
                    const kern_vi xl = kern_vi_bcast4(xq + 4 * k);
                    const kern_vi xh = kern_vi_bcast4(xq + 16 + 4 * k);
                    _Pragma("GCC unroll 2")
                    for (int h = 0; h < KERN_MM_PARTS; h++) {
                        s[h] = kern_vi_add16(s[h], kern_vi_maddubs(u[h][k], xl));
                        s[h] = kern_vi_add16(s[h], kern_vi_maddubs(u[h][4 + k], xh));
                    }
                }
                const kern_vi corr = kern_vi_set1_32(8 * x[j].q8_sum[xb0 + b]);
                const kern_vf dx = kern_vf_set1(x[j].q8_d[xb0 + b]);
                _Pragma("GCC unroll 2")
                for (int h = 0; h < KERN_MM_PARTS; h++)
                    acc[j][h] = kern_vf_fma(
                        kern_vf_cvt_i32(kern_vi_sub32(kern_vi_madd16(s[h], ones), corr)),
                        kern_vf_mul(dw[h], dx), acc[j][h]);
            }
        }
        for (int j = 0; j < T; j++)
            for (int h = 0; h < KERN_MM_PARTS; h++)
                kern_vf_add_rows(y + j * ldy, rows, KERN_PANEL * p + KERN_VN * h,
                                 acc[j][h]);
    }
}

/* NAME: the batched repacked Q4_0 kernel whose mat-vec is MV. */
#define KERN_MM_RP(NAME, MV) KERN_MM_BATCH(NAME, KERN_MM_RP_T, MV, mm_rp_group)

#endif /* CFLOW_KERN_MM_SIMD_H */
