/*
 * kern_avx512.c — tile mat-vec for AVX-512 F/BW/VL, and the AVX512-VNNI
 * variant of the quantised kernels.
 *
 * Compiled for plain x86-64; only these functions carry target attributes
 * and kern_dispatch.c hands them out only on a CPU that has the features.
 *
 * One zmm holds a whole panel: 16 rows, one 32-bit lane each.  An F32/F16
 * column is one FMA-sized step for 16 rows; a 64-byte chunk of Q8_0/Q4_0
 * quants is 16 rows x 4 columns, exactly what vpdpbusd consumes:
 *
 *   lane i of  chunk  = 4 weight bytes of row i (columns 4g..4g+3)
 *              x4     = _mm512_set1_epi32(4 activation bytes of those columns)
 *   vpdpbusd(acc, chunk, x4): acc[i] += sum_j u[i][j] * x[j]
 *
 * Q4_0 low nibbles are block columns 4g..4g+3, high nibbles 16+4g..19+4g,
 * both unsigned 0..15 (offset 8); Q8_0 bytes are unsigned 0..255 (offset
 * 128).  After the block: isum = acc - offset * q8_sum.  Without VNNI the
 * same products come from vpmaddubsw + vpmaddwd (Q8_0 through |w| x
 * sign(x, w), since offset-binary bytes could saturate vpmaddubsw; see
 * kern_avx2.c).
 *
 * Per block, the 16 int32 sums become floats and
 *   acc += (d_w[16] * d_x) * (float)isum         (d_w via vcvtph2ps)
 * rounded as in kern_ref.c (mul, mul, add: an FMA would round once less),
 * so every lane reproduces the reference bit for bit; likewise F32 uses
 * mul + add, and F16 uses FMA, whose product of two halves is exact.  The
 * module is built with -ffp-contract=off so the compiler keeps these
 * roundings.  Ragged tiles compute the whole padded panel and store the
 * real rows through a mask.
 */
#include "config.h"

#include "kernels/kern.h"
#include "kernels/kern_impl.h"

#if HAVE_ISA_X86

#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define VNNI   __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

#define NGROUP 4   /* panels processed side by side (F32/F16) */

/* y[16p .. 16p+16) += acc, storing only rows < rows. */
AVX512 static inline void add_panel(float *y, unsigned rows, unsigned p,
                                    __m512 acc)
{
    unsigned r0 = KERN_PANEL * p;
    unsigned n = rows - r0 < KERN_PANEL ? rows - r0 : KERN_PANEL;
    __mmask16 m = (__mmask16)((1u << n) - 1);
    __m512 yv = _mm512_maskz_loadu_ps(m, y + r0);
    _mm512_mask_storeu_ps(y + r0, m, _mm512_add_ps(yv, acc));
}

/* ---- F32 ---------------------------------------------------------------- */

AVX512 static void mv_f32(const void *payload, unsigned rows, unsigned cols,
                          const kern_act *x, unsigned col0, float *y)
{
    kern_geom g = kern_geom_of(rows, cols);
    const float *xv = x->f32 + col0;
    const size_t pstride = (size_t)g.cp * KERN_PANEL * 4;
    const uint8_t *w = payload;
    unsigned p = 0;

    for (; p + NGROUP <= g.np; p += NGROUP) {
        const uint8_t *wp = w + p * pstride;
        __m512 acc[NGROUP];
#pragma GCC unroll 4
        for (int k = 0; k < NGROUP; k++)
            acc[k] = _mm512_setzero_ps();
        for (unsigned c = 0; c < cols; c++) {
            __m512 xb = _mm512_set1_ps(xv[c]);
#pragma GCC unroll 4
            for (int k = 0; k < NGROUP; k++)
                acc[k] = _mm512_add_ps(acc[k], _mm512_mul_ps(
                             _mm512_loadu_ps(wp + k * pstride + c * 64), xb));
        }
#pragma GCC unroll 4
        for (int k = 0; k < NGROUP; k++)
            add_panel(y, rows, p + k, acc[k]);
    }
    for (; p < g.np; p++) {
        const uint8_t *wp = w + p * pstride;
        __m512 acc = _mm512_setzero_ps();
        for (unsigned c = 0; c < cols; c++)
            acc = _mm512_add_ps(acc, _mm512_mul_ps(
                      _mm512_loadu_ps(wp + c * 64), _mm512_set1_ps(xv[c])));
        add_panel(y, rows, p, acc);
    }
}

/* ---- F16 ---------------------------------------------------------------- */

AVX512 static inline __m512 ld_half16(const uint8_t *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

AVX512 static void mv_f16(const void *payload, unsigned rows, unsigned cols,
                          const kern_act *x, unsigned col0, float *y)
{
    kern_geom g = kern_geom_of(rows, cols);
    const size_t pstride = (size_t)g.cp * KERN_PANEL * 2;
    const uint8_t *w = payload;
    float xf[KERN_TILE_COLS];           /* x.f16 widened once per tile */
    unsigned c = 0;

    for (; c + 16 <= cols; c += 16)
        _mm512_storeu_ps(xf + c, ld_half16((const uint8_t *)(x->f16 + col0 + c)));
    for (; c < cols; c++)
        xf[c] = kern_h2f(x->f16[col0 + c]);

    unsigned p = 0;
    for (; p + NGROUP <= g.np; p += NGROUP) {
        const uint8_t *wp = w + p * pstride;
        __m512 acc[NGROUP];
#pragma GCC unroll 4
        for (int k = 0; k < NGROUP; k++)
            acc[k] = _mm512_setzero_ps();
        for (c = 0; c < cols; c++) {
            __m512 xb = _mm512_set1_ps(xf[c]);
#pragma GCC unroll 4
            for (int k = 0; k < NGROUP; k++)
                acc[k] = _mm512_fmadd_ps(ld_half16(wp + k * pstride + c * 32),
                                         xb, acc[k]);
        }
#pragma GCC unroll 4
        for (int k = 0; k < NGROUP; k++)
            add_panel(y, rows, p + k, acc[k]);
    }
    for (; p < g.np; p++) {
        const uint8_t *wp = w + p * pstride;
        __m512 acc = _mm512_setzero_ps();
        for (c = 0; c < cols; c++)
            acc = _mm512_fmadd_ps(ld_half16(wp + c * 32),
                                  _mm512_set1_ps(xf[c]), acc);
        add_panel(y, rows, p, acc);
    }
}

/* ---- Q8_0 / Q4_0 ---------------------------------------------------------- */

AVX512 static inline __m512i bcast4(const int8_t *xq)
{
    return _mm512_set1_epi32(kern_ld_i32(xq));
}

AVX512 static inline __m512i ld64(const uint8_t *p)
{
    return _mm512_loadu_si512(p);
}

/* Q4_0 panel-block (4 chunks of 64 bytes): sum u*x per row, offset kept. */
AVX512 static inline __m512i q4_isum(const uint8_t *q, const int8_t *xq)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i s = _mm512_setzero_si512();     /* int16, |s| <= 30480 */
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        __m512i v = ld64(q + 64 * g);
        s = _mm512_add_epi16(s, _mm512_maddubs_epi16(_mm512_and_si512(v, m4),
                                                     bcast4(xq + 4 * g)));
        s = _mm512_add_epi16(s, _mm512_maddubs_epi16(
                _mm512_and_si512(_mm512_srli_epi16(v, 4), m4),
                bcast4(xq + 16 + 4 * g)));
    }
    return _mm512_madd_epi16(s, _mm512_set1_epi16(1));
}

/* Q8_0 panel-block (8 quads of 64 bytes): exact signed sum per row. */
AVX512 static inline __m512i q8_isum(const uint8_t *q, const int8_t *xq)
{
    const __m512i sgn = _mm512_set1_epi8((char)0x80);
    const __m512i ones = _mm512_set1_epi16(1);
    __m512i s = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        __m512i ws = _mm512_xor_si512(ld64(q + 64 * g), sgn);  /* u - 128 */
        __m512i xb = bcast4(xq + 4 * g);
        __mmask64 neg = _mm512_movepi8_mask(ws);
        __m512i xs = _mm512_mask_sub_epi8(xb, neg, _mm512_setzero_si512(), xb);
        s = _mm512_add_epi32(s, _mm512_madd_epi16(
                _mm512_maddubs_epi16(_mm512_abs_epi8(ws), xs), ones));
    }
    return s;
}

VNNI static inline __m512i q4_isum_vnni(const uint8_t *q, const int8_t *xq)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        __m512i v = ld64(q + 64 * g);
        s0 = _mm512_dpbusd_epi32(s0, _mm512_and_si512(v, m4), bcast4(xq + 4 * g));
        s1 = _mm512_dpbusd_epi32(s1, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4),
                                 bcast4(xq + 16 + 4 * g));
    }
    return _mm512_add_epi32(s0, s1);
}

VNNI static inline __m512i q8_isum_vnni(const uint8_t *q, const int8_t *xq)
{
    __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int g = 0; g < 8; g += 2) {
        s0 = _mm512_dpbusd_epi32(s0, ld64(q + 64 * g), bcast4(xq + 4 * g));
        s1 = _mm512_dpbusd_epi32(s1, ld64(q + 64 * g + 64), bcast4(xq + 4 * g + 4));
    }
    return _mm512_add_epi32(s0, s1);
}

/* acc += (d_w * d_x) * (float)isum for the 16 rows of a panel. */
AVX512 static inline __m512 scale_add(__m512 acc, const uint8_t *dw, float dx,
                                      __m512i isum)
{
    __m512 d = _mm512_mul_ps(ld_half16(dw), _mm512_set1_ps(dx));
    return _mm512_add_ps(acc, _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum)));
}

/* The panel/block walk shared by all four quantised kernels.  ISUM returns
 * the raw sum u*x of one panel-block; OFFSET (8 or 128) times q8_sum is
 * removed here, or nothing (0) when ISUM already works on signed weights.
 * Panels go in groups of NGROUP, so that the activation broadcasts of a
 * block are loaded once for the group and the groups' chains overlap. */
#define MV_QUANT(NAME, ATTR, BLOCK_BYTES, ISUM, OFFSET)                        \
ATTR static void NAME(const void *payload, unsigned rows, unsigned cols,       \
                      const kern_act *x, unsigned col0, float *y)              \
{                                                                              \
    kern_geom g = kern_geom_of(rows, cols);                                    \
    const uint8_t *w = payload, *qbase = w + g.scale_bytes;                    \
    const unsigned xb0 = col0 / KERN_QBLOCK;                                   \
    const size_t pq = (size_t)g.nb * (BLOCK_BYTES);   /* quant bytes/panel */  \
    const size_t ps = (size_t)g.nb * KERN_PANEL * 2;  /* scale bytes/panel */  \
    unsigned p = 0;                                                            \
    for (; p + NGROUP <= g.np; p += NGROUP) {                                  \
        __m512 acc[NGROUP];                                                    \
        _Pragma("GCC unroll 4")                                                \
        for (int k = 0; k < NGROUP; k++)                                       \
            acc[k] = _mm512_setzero_ps();                                      \
        for (unsigned b = 0; b < g.nb; b++) {                                  \
            const int8_t *xq = x->q8 + col0 + KERN_QBLOCK * b;                 \
            const float dx = x->q8_d[xb0 + b];                                 \
            const __m512i corr = _mm512_set1_epi32(                            \
                (OFFSET) * x->q8_sum[xb0 + b]);                                \
            const size_t pb = (size_t)p * g.nb + b;                            \
            _Pragma("GCC unroll 4")                                            \
            for (int k = 0; k < NGROUP; k++) {                                 \
                __m512i isum = ISUM(qbase + pb * (BLOCK_BYTES) + k * pq, xq);  \
                acc[k] = scale_add(acc[k], w + 2 * pb * KERN_PANEL + k * ps,   \
                                   dx, _mm512_sub_epi32(isum, corr));          \
            }                                                                  \
        }                                                                      \
        _Pragma("GCC unroll 4")                                                \
        for (int k = 0; k < NGROUP; k++)                                       \
            add_panel(y, rows, p + k, acc[k]);                                 \
    }                                                                          \
    for (; p < g.np; p++) {                                                    \
        __m512 acc = _mm512_setzero_ps();                                      \
        for (unsigned b = 0; b < g.nb; b++) {                                  \
            size_t pb = (size_t)p * g.nb + b;                                  \
            __m512i isum = ISUM(qbase + pb * (BLOCK_BYTES),                    \
                                x->q8 + col0 + KERN_QBLOCK * b);               \
            isum = _mm512_sub_epi32(isum, _mm512_set1_epi32(                   \
                       (OFFSET) * x->q8_sum[xb0 + b]));                        \
            acc = scale_add(acc, w + 2 * pb * KERN_PANEL, x->q8_d[xb0 + b],    \
                            isum);                                             \
        }                                                                      \
        add_panel(y, rows, p, acc);                                            \
    }                                                                          \
}

MV_QUANT(mv_q8_0, AVX512, KERN_Q8_BLOCK_BYTES, q8_isum, 0)
MV_QUANT(mv_q4_0, AVX512, KERN_Q4_BLOCK_BYTES, q4_isum, 8)
MV_QUANT(mv_q8_0_vnni, VNNI, KERN_Q8_BLOCK_BYTES, q8_isum_vnni, 128)
MV_QUANT(mv_q4_0_vnni, VNNI, KERN_Q4_BLOCK_BYTES, q4_isum_vnni, 8)

/* ---- vectors ------------------------------------------------------------ */

AVX512 static float dot_f32(const float *a, const float *b, unsigned n)
{
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    __m512 s2 = _mm512_setzero_ps(), s3 = _mm512_setzero_ps();
    unsigned i = 0;
    for (; i + 64 <= n; i += 64) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
        s2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32), s2);
        s3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48), s3);
    }
    for (; i + 16 <= n; i += 16)
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i),
                             _mm512_maskz_loadu_ps(m, b + i), s1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1),
                                              _mm512_add_ps(s2, s3)));
}

/* y += a x with the reference's rounding (mul, then add). */
AVX512 static void axpy_f32(float *y, float a, const float *x, unsigned n)
{
    __m512 av = _mm512_set1_ps(a);
    unsigned i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_loadu_ps(y + i),
                              _mm512_mul_ps(av, _mm512_loadu_ps(x + i))));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m512 yv = _mm512_maskz_loadu_ps(m, y + i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(yv,
                              _mm512_mul_ps(av, _mm512_maskz_loadu_ps(m, x + i))));
    }
}

const kern_ops kern_ops_avx512 = {
    .isa = KERN_ISA_AVX512,
    .name = "avx512",
    .tile_mv = {
        [KERN_F32] = mv_f32, [KERN_F16] = mv_f16,
        [KERN_Q8_0] = mv_q8_0, [KERN_Q4_0] = mv_q4_0,
    },
    .dot_f32 = dot_f32,
    .axpy_f32 = axpy_f32,
};

const kern_ops kern_ops_avx512_vnni = {
    .isa = KERN_ISA_AVX512_VNNI,
    .name = "avx512-vnni",
    .tile_mv = {
        [KERN_F32] = mv_f32, [KERN_F16] = mv_f16,
        [KERN_Q8_0] = mv_q8_0_vnni, [KERN_Q4_0] = mv_q4_0_vnni,
    },
    .dot_f32 = dot_f32,
    .axpy_f32 = axpy_f32,
};

#endif /* HAVE_ISA_X86 */
