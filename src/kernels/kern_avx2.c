/*
 * kern_avx2.c — tile mat-vec for AVX2 + FMA + F16C.
 *
 * Compiled for plain x86-64: only the functions below carry
 * __attribute__((target)), and kern_dispatch.c calls them only on a CPU
 * that has the features.
 *
 * A panel's 16 rows live in two ymm registers (rows 0-7, 8-15), one lane
 * per row, so a column (F32/F16) or a 4-column group (Q8_0/Q4_0) is one
 * broadcast of x against 16 rows and no horizontal sum runs per row.  Each
 * lane therefore performs exactly the additions of kern_ref.c in the same
 * order, and the results are bit-identical to the reference:
 *   F32   mul then add (no FMA: an FMA would round differently; the module
 *         is built with -ffp-contract=off so the compiler does not fuse them)
 *   F16   FMA, which rounds like mul+add here: the product of two halves
 *         is exact in f32
 *   Q4_0  offset binary: unsigned nibbles (0..15) x signed Q8 activation
 *         with vpmaddubsw, summed in int16 over the block (at most
 *         16 * 15 * 127 = 30480 in magnitude, no saturation), widened with
 *         vpmaddwd, then isum = sum - 8 * q8_sum
 *   Q8_0  vpmaddubsw would saturate on offset-binary bytes (2 * 255 * 127 >
 *         32767), so the bytes are made signed (xor 0x80) and multiplied as
 *         |w| x sign(x, w) (at most 2 * 128 * 127 per pair), as llama.cpp
 *         does; each quad is widened to int32 at once
 * and per block y_row += (d_w * d_x) * (float)isum with separate roundings.
 * F32/F16 run four panels side by side so that the additions of different
 * panels overlap in the pipeline (each lane's own additions stay in order).
 */
#include "config.h"

#include "kernels/kern.h"
#include "kernels/kern_impl.h"

#if HAVE_ISA_X86

#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))

#define NGROUP 4   /* panels processed side by side */

/* y[16p .. 16p+16) += (lo, hi), storing only rows < rows. */
AVX2 static inline void add_panel(float *y, unsigned rows, unsigned p,
                                  __m256 lo, __m256 hi)
{
    unsigned r0 = KERN_PANEL * p;
    if (r0 + KERN_PANEL <= rows) {
        _mm256_storeu_ps(y + r0, _mm256_add_ps(_mm256_loadu_ps(y + r0), lo));
        _mm256_storeu_ps(y + r0 + 8,
                         _mm256_add_ps(_mm256_loadu_ps(y + r0 + 8), hi));
    } else {
        float t[KERN_PANEL];
        _mm256_storeu_ps(t, lo);
        _mm256_storeu_ps(t + 8, hi);
        for (unsigned i = 0; r0 + i < rows; i++)
            y[r0 + i] += t[i];
    }
}

/* ---- F32 ---------------------------------------------------------------- */

AVX2 static void mv_f32(const void *payload, unsigned rows, unsigned cols,
                        const kern_act *x, unsigned col0, float *y)
{
    kern_geom g = kern_geom_of(rows, cols);
    const float *xv = x->f32 + col0;
    const size_t pstride = (size_t)g.cp * KERN_PANEL * 4;   /* bytes/panel */
    const uint8_t *w = payload;
    unsigned p = 0;

    for (; p + NGROUP <= g.np; p += NGROUP) {
        const uint8_t *wp = w + p * pstride;
        __m256 lo[NGROUP], hi[NGROUP];
#pragma GCC unroll 4
        for (int k = 0; k < NGROUP; k++)
            lo[k] = hi[k] = _mm256_setzero_ps();
        for (unsigned c = 0; c < cols; c++) {
            __m256 xb = _mm256_set1_ps(xv[c]);
#pragma GCC unroll 4
            for (int k = 0; k < NGROUP; k++) {
                const float *col = (const float *)(wp + k * pstride + c * 64);
                lo[k] = _mm256_add_ps(lo[k], _mm256_mul_ps(_mm256_loadu_ps(col), xb));
                hi[k] = _mm256_add_ps(hi[k], _mm256_mul_ps(_mm256_loadu_ps(col + 8), xb));
            }
        }
#pragma GCC unroll 4
        for (int k = 0; k < NGROUP; k++)
            add_panel(y, rows, p + k, lo[k], hi[k]);
    }
    for (; p < g.np; p++) {
        const uint8_t *wp = w + p * pstride;
        __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
        for (unsigned c = 0; c < cols; c++) {
            __m256 xb = _mm256_set1_ps(xv[c]);
            const float *col = (const float *)(wp + c * 64);
            lo = _mm256_add_ps(lo, _mm256_mul_ps(_mm256_loadu_ps(col), xb));
            hi = _mm256_add_ps(hi, _mm256_mul_ps(_mm256_loadu_ps(col + 8), xb));
        }
        add_panel(y, rows, p, lo, hi);
    }
}

/* ---- F16 ---------------------------------------------------------------- */

AVX2 static void mv_f16(const void *payload, unsigned rows, unsigned cols,
                        const kern_act *x, unsigned col0, float *y)
{
    kern_geom g = kern_geom_of(rows, cols);
    const size_t pstride = (size_t)g.cp * KERN_PANEL * 2;
    const uint8_t *w = payload;
    float xf[KERN_TILE_COLS];           /* x.f16 widened once per tile */
    unsigned c = 0;

    for (; c + 8 <= cols; c += 8)
        _mm256_storeu_ps(xf + c, _mm256_cvtph_ps(
            _mm_loadu_si128((const __m128i *)(x->f16 + col0 + c))));
    for (; c < cols; c++)
        xf[c] = kern_h2f(x->f16[col0 + c]);

    unsigned p = 0;
    for (; p + NGROUP <= g.np; p += NGROUP) {
        const uint8_t *wp = w + p * pstride;
        __m256 lo[NGROUP], hi[NGROUP];
#pragma GCC unroll 4
        for (int k = 0; k < NGROUP; k++)
            lo[k] = hi[k] = _mm256_setzero_ps();
        for (c = 0; c < cols; c++) {
            __m256 xb = _mm256_set1_ps(xf[c]);
#pragma GCC unroll 4
            for (int k = 0; k < NGROUP; k++) {
                const uint8_t *col = wp + k * pstride + c * 32;
                lo[k] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(
                            (const __m128i *)col)), xb, lo[k]);
                hi[k] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(
                            (const __m128i *)(col + 16))), xb, hi[k]);
            }
        }
#pragma GCC unroll 4
        for (int k = 0; k < NGROUP; k++)
            add_panel(y, rows, p + k, lo[k], hi[k]);
    }
    for (; p < g.np; p++) {
        const uint8_t *wp = w + p * pstride;
        __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
        for (c = 0; c < cols; c++) {
            __m256 xb = _mm256_set1_ps(xf[c]);
            const uint8_t *col = wp + c * 32;
            lo = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(
                     (const __m128i *)col)), xb, lo);
            hi = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(
                     (const __m128i *)(col + 16))), xb, hi);
        }
        add_panel(y, rows, p, lo, hi);
    }
}

/* ---- Q8_0 / Q4_0 ---------------------------------------------------------- */

/* 4 activation bytes broadcast to every 32-bit lane (one per row). */
AVX2 static inline __m256i bcast4(const int8_t *xq)
{
    return _mm256_set1_epi32(kern_ld_i32(xq));
}

/* Integer dot of one Q4_0 panel-block (256 bytes) with 32 activation
 * quants, offset not yet removed: rows 0-7 in *lo, 8-15 in *hi. */
AVX2 static inline void q4_isum(const uint8_t *q, const int8_t *xq,
                                __m256i *lo, __m256i *hi)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        __m256i xl = bcast4(xq + 4 * g), xh = bcast4(xq + 16 + 4 * g);
        __m256i v0 = _mm256_loadu_si256((const __m256i *)(q + 64 * g));
        __m256i v1 = _mm256_loadu_si256((const __m256i *)(q + 64 * g + 32));
        s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(_mm256_and_si256(v0, m4), xl));
        s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(
                 _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4), xh));
        s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(_mm256_and_si256(v1, m4), xl));
        s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(
                 _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4), xh));
    }
    const __m256i ones = _mm256_set1_epi16(1);
    *lo = _mm256_madd_epi16(s0, ones);
    *hi = _mm256_madd_epi16(s1, ones);
}

/* |w| x sign(x, w) for signed bytes, pairs summed to int16, then to int32. */
AVX2 static inline __m256i q8_quad(__m256i v, __m256i xb)
{
    const __m256i sgn = _mm256_set1_epi8((char)0x80);
    __m256i ws = _mm256_xor_si256(v, sgn);           /* u - 128 as int8 */
    __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(ws),
                                     _mm256_sign_epi8(xb, ws));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* Integer dot of one Q8_0 panel-block (512 bytes), exact signed quants. */
AVX2 static inline void q8_isum(const uint8_t *q, const int8_t *xq,
                                __m256i *lo, __m256i *hi)
{
    __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        __m256i xb = bcast4(xq + 4 * g);
        s0 = _mm256_add_epi32(s0, q8_quad(_mm256_loadu_si256(
                 (const __m256i *)(q + 64 * g)), xb));
        s1 = _mm256_add_epi32(s1, q8_quad(_mm256_loadu_si256(
                 (const __m256i *)(q + 64 * g + 32)), xb));
    }
    *lo = s0;
    *hi = s1;
}

/* acc += (d_w * d_x) * (float)isum for 8 rows. */
AVX2 static inline __m256 scale_add(__m256 acc, const uint8_t *dw, __m256 dx,
                                    __m256i isum)
{
    __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(
                                 (const __m128i *)dw)), dx);
    return _mm256_add_ps(acc, _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum)));
}

AVX2 static void mv_quant(enum kern_type t, const void *payload,
                          unsigned rows, unsigned cols, const kern_act *x,
                          unsigned col0, float *y)
{
    kern_geom g = kern_geom_of(rows, cols);
    const uint8_t *w = payload;
    const uint8_t *qbase = w + g.scale_bytes;
    const size_t bbytes = t == KERN_Q8_0 ? KERN_Q8_BLOCK_BYTES
                                         : KERN_Q4_BLOCK_BYTES;
    const int offset = t == KERN_Q8_0 ? 128 : 8;  /* removed in the int sum */
    const unsigned xb0 = col0 / KERN_QBLOCK;

    for (unsigned p = 0; p < g.np; p++) {
        __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
        for (unsigned b = 0; b < g.nb; b++) {
            size_t pb = (size_t)p * g.nb + b;
            const int8_t *xq = x->q8 + col0 + KERN_QBLOCK * b;
            __m256i lo, hi;
            if (t == KERN_Q8_0) {
                q8_isum(qbase + pb * bbytes, xq, &lo, &hi);
            } else {
                __m256i corr = _mm256_set1_epi32(offset * x->q8_sum[xb0 + b]);
                q4_isum(qbase + pb * bbytes, xq, &lo, &hi);
                lo = _mm256_sub_epi32(lo, corr);
                hi = _mm256_sub_epi32(hi, corr);
            }
            __m256 dx = _mm256_set1_ps(x->q8_d[xb0 + b]);
            const uint8_t *dw = w + 2 * pb * KERN_PANEL;
            acc0 = scale_add(acc0, dw, dx, lo);
            acc1 = scale_add(acc1, dw + 16, dx, hi);
        }
        add_panel(y, rows, p, acc0, acc1);
    }
}

AVX2 static void mv_q8_0(const void *payload, unsigned rows, unsigned cols,
                         const kern_act *x, unsigned col0, float *y)
{
    mv_quant(KERN_Q8_0, payload, rows, cols, x, col0, y);
}

AVX2 static void mv_q4_0(const void *payload, unsigned rows, unsigned cols,
                         const kern_act *x, unsigned col0, float *y)
{
    mv_quant(KERN_Q4_0, payload, rows, cols, x, col0, y);
}

/* ---- vectors ------------------------------------------------------------ */

AVX2 static float dot_f32(const float *a, const float *b, unsigned n)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    __m256 s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    unsigned i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    __m256 s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    float sum = _mm_cvtss_f32(h);
    for (; i < n; i++)
        sum += a[i] * b[i];
    return sum;
}

/* y += a x with the reference's rounding (mul, then add). */
AVX2 static void axpy_f32(float *y, float a, const float *x, unsigned n)
{
    __m256 av = _mm256_set1_ps(a);
    unsigned i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i),
                              _mm256_mul_ps(av, _mm256_loadu_ps(x + i))));
    for (; i < n; i++)
        y[i] += a * x[i];
}

const kern_ops kern_ops_avx2 = {
    .isa = KERN_ISA_AVX2,
    .name = "avx2",
    .tile_mv = {
        [KERN_F32] = mv_f32, [KERN_F16] = mv_f16,
        [KERN_Q8_0] = mv_q8_0, [KERN_Q4_0] = mv_q4_0,
    },
    .dot_f32 = dot_f32,
    .axpy_f32 = axpy_f32,
};

#endif /* HAVE_ISA_X86 */
