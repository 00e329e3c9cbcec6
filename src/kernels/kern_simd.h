/*
 * kern_simd.h — private to src/kernels: one vocabulary of vector
 * operations for the AVX2 and the AVX-512 file, so that a loop that is the
 * same in both tiers but for the register width is written once (ggml-cpu
 * does the same per architecture with its GGML_F32_VEC_* macros).
 *
 * A tier file defines KERN_SIMD_W (256: AVX2 + FMA + F16C, ymm; 512:
 * AVX-512 F/BW/VL, zmm) and includes this header after <immintrin.h>.  It
 * gets
 *   KERN_VN      32-bit lanes per vector (8 or 16)
 *   KERN_VATTR   the target attribute of that tier's functions
 *   kern_vf      a vector of KERN_VN floats, kern_vi of KERN_VN int32 (or
 *                4 * KERN_VN bytes), and the operations on them
 *                (kern_vf_add, kern_vi_maddubs, ...), each one intrinsic of
 *                the tier or the short sequence a tier needs where the
 *                other has one instruction (AVX-512 has no vpsignb, so
 *                kern_vi_sign8 takes a mask);
 *   the loops written once at the bottom (the tile kernels' prefetch and
 *   Q8_0/Q4_0 group dots, the f32 vector kernels, the f16 conversion),
 *   compiled once per including file with its tier's attribute.
 * Where the tiers differ only in the tail of a loop (AVX-512 finishes with
 * a masked vector, AVX2 with scalars), the tail is a tier macro
 * (KERN_DOT_TAIL, KERN_AXPY_TAIL) and the loop is shared.  Every function here compiles to the instructions
 * the tier's hand-written loop compiled to: the commits that moved each
 * loop here compared the disassembly of the kernels that use it.  Loops
 * whose tiers are shaped differently (the F32/F16 panels, the 8-lane
 * quantised mat-vecs, the attention kernels, SwiGLU's exponential, the Q8
 * activation quantiser) stay in their files.
 *
 * Nothing here is for the scalar reference; the shared bits contract
 * (kern_impl.h) holds for every loop below exactly as it did before.
 */
#ifndef CFLOW_KERN_SIMD_H
#define CFLOW_KERN_SIMD_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/kern_impl.h"

#if !defined(KERN_SIMD_W)
#error "define KERN_SIMD_W (256 or 512) before including kern_simd.h"
#endif

#define KERN_VROUND (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

/* ---- the tier's vocabulary -------------------------------------------------
 * One intrinsic is a macro, as ggml's are; a short sequence that the
 * tier files had as an inline function (the f16 load and round trip, the
 * broadcast, the block scale) stays one.  The difference shows: GCC's
 * register allocation follows the inline-function structure (dot_f32 came
 * out with its accumulators renamed through wrapper functions, and the
 * quantised mat-vecs with spills moved when their helpers became macros),
 * and the point is the same code. */
#if KERN_SIMD_W == 256

#define KERN_VN 8
#define KERN_VATTR __attribute__((target("avx2,fma,f16c")))
typedef __m256  kern_vf;
typedef __m256i kern_vi;

#define kern_vf_zero()          _mm256_setzero_ps()
#define kern_vf_set1(a)         _mm256_set1_ps(a)
#define kern_vf_loadu(p)        _mm256_loadu_ps(p)
#define kern_vf_storeu(p, v)    _mm256_storeu_ps(p, v)
#define kern_vf_add(a, b)       _mm256_add_ps(a, b)
#define kern_vf_mul(a, b)       _mm256_mul_ps(a, b)
#define kern_vf_fma(a, b, c)    _mm256_fmadd_ps(a, b, c)     /* a * b + c */
/* KERN_VN halves at byte address p (any alignment), widened */
KERN_VATTR static inline kern_vf kern_vf_ld_half(const uint8_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
/* v as KERN_VN halves (round to nearest even, as kern_f2h) at h */
#define kern_vf_st_half(h, v)   _mm_storeu_si128((__m128i *)(h), _mm256_cvtps_ph(v, KERN_VROUND))
/* v rounded through f16 and back */
KERN_VATTR static inline kern_vf kern_vf_round_h(kern_vf v)
{
    return _mm256_cvtph_ps(_mm256_cvtps_ph(v, KERN_VROUND));
}

#define kern_vi_loadu(p)        _mm256_loadu_si256((const __m256i *)(p))
#define kern_vi_set1_8(a)       _mm256_set1_epi8(a)
#define kern_vi_set1_16(a)      _mm256_set1_epi16(a)
#define kern_vi_set1_32(a)      _mm256_set1_epi32(a)
#define kern_vi_and(a, b)       _mm256_and_si256(a, b)
#define kern_vi_xor(a, b)       _mm256_xor_si256(a, b)
#define kern_vi_srli16(a, n)    _mm256_srli_epi16(a, n)
#define kern_vi_add32(a, b)     _mm256_add_epi32(a, b)
#define kern_vi_add16(a, b)     _mm256_add_epi16(a, b)
#define kern_vi_sub32(a, b)     _mm256_sub_epi32(a, b)
#define kern_vi_zero()          _mm256_setzero_si256()
#define kern_vf_cvt_i32(a)      _mm256_cvtepi32_ps(a)
#define kern_vi_abs8(a)         _mm256_abs_epi8(a)
/* unsigned bytes u x signed bytes s, adjacent pairs summed to int16
 * (saturating: the callers keep each pair's sum below 32768) */
#define kern_vi_maddubs(u, s)   _mm256_maddubs_epi16(u, s)
/* int16 x int16, adjacent pairs summed to int32 */
#define kern_vi_madd16(a, b)    _mm256_madd_epi16(a, b)
/* x with the sign of w per byte (x where w > 0, -x where w < 0; where w
 * is 0 the callers multiply by |w| = 0, so either value serves) */
#define kern_vi_sign8(x, w)     _mm256_sign_epi8(x, w)

#define kern_vf_sub(a, b)       _mm256_sub_ps(a, b)
#define kern_vf_fnma(a, b, c)   _mm256_fnmadd_ps(a, b, c)    /* c - a * b */
#define kern_vf_max(a, b)       _mm256_max_ps(a, b)
KERN_VATTR static inline float kern_vf_hmax(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
}
/* the lanes of v below n (any int), the others w's */
KERN_VATTR static inline __m256 kern_vf_first(__m256 v, int n, __m256 w)
{
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(n),
                                         _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_blendv_ps(w, v, _mm256_castsi256_ps(m));
}

/* dot_f32's end: the four accumulators folded, then the elements past the
 * last vector in scalars (returns from the function) */
#define KERN_DOT_TAIL(s0, s1, s2, s3, a, b, i, n)                              \
    do {                                                                       \
        __m256 s_ = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));\
        __m128 h_ = _mm_add_ps(_mm256_castps256_ps128(s_),                     \
                               _mm256_extractf128_ps(s_, 1));                  \
        h_ = _mm_add_ps(h_, _mm_movehl_ps(h_, h_));                            \
        h_ = _mm_add_ss(h_, _mm_movehdup_ps(h_));                              \
        float sum_ = _mm_cvtss_f32(h_);                                        \
        for (; i < n; i++)                                                     \
            sum_ += a[i] * b[i];                                               \
        return sum_;                                                           \
    } while (0)
/* axpy_f32's end: y += a x past the last vector (av: a in every lane) */
#define KERN_AXPY_TAIL(y, a, av, x, i, n)                                      \
    do {                                                                       \
        for (; i < n; i++)                                                     \
            y[i] += a * x[i];                                                  \
    } while (0)

#elif KERN_SIMD_W == 512

#define KERN_VN 16
#define KERN_VATTR __attribute__((target("avx512f,avx512bw,avx512vl")))
typedef __m512  kern_vf;
typedef __m512i kern_vi;

#define kern_vf_zero()          _mm512_setzero_ps()
#define kern_vf_set1(a)         _mm512_set1_ps(a)
#define kern_vf_loadu(p)        _mm512_loadu_ps(p)
#define kern_vf_storeu(p, v)    _mm512_storeu_ps(p, v)
#define kern_vf_add(a, b)       _mm512_add_ps(a, b)
#define kern_vf_mul(a, b)       _mm512_mul_ps(a, b)
#define kern_vf_fma(a, b, c)    _mm512_fmadd_ps(a, b, c)
KERN_VATTR static inline kern_vf kern_vf_ld_half(const uint8_t *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
#define kern_vf_st_half(h, v)   _mm256_storeu_si256((__m256i *)(h), _mm512_cvtps_ph(v, KERN_VROUND))
KERN_VATTR static inline kern_vf kern_vf_round_h(kern_vf v)
{
    return _mm512_cvtph_ps(_mm512_cvtps_ph(v, KERN_VROUND));
}

#define kern_vi_loadu(p)        _mm512_loadu_si512(p)
#define kern_vi_set1_8(a)       _mm512_set1_epi8(a)
#define kern_vi_set1_16(a)      _mm512_set1_epi16(a)
#define kern_vi_set1_32(a)      _mm512_set1_epi32(a)
#define kern_vi_and(a, b)       _mm512_and_si512(a, b)
#define kern_vi_xor(a, b)       _mm512_xor_si512(a, b)
#define kern_vi_srli16(a, n)    _mm512_srli_epi16(a, n)
#define kern_vi_add32(a, b)     _mm512_add_epi32(a, b)
#define kern_vi_add16(a, b)     _mm512_add_epi16(a, b)
#define kern_vi_sub32(a, b)     _mm512_sub_epi32(a, b)
#define kern_vi_zero()          _mm512_setzero_si512()
#define kern_vf_cvt_i32(a)      _mm512_cvtepi32_ps(a)
#define kern_vi_abs8(a)         _mm512_abs_epi8(a)
#define kern_vi_maddubs(u, s)   _mm512_maddubs_epi16(u, s)
#define kern_vi_madd16(a, b)    _mm512_madd_epi16(a, b)
/* no vpsignb in AVX-512: x negated where w's sign bit is set */
#define kern_vi_sign8(x, w)                                                    \
    _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), _mm512_setzero_si512(), x)

#define kern_vf_sub(a, b)       _mm512_sub_ps(a, b)
#define kern_vf_fnma(a, b, c)   _mm512_fnmadd_ps(a, b, c)
#define kern_vf_max(a, b)       _mm512_max_ps(a, b)
#define kern_vf_hmax(v)         _mm512_reduce_max_ps(v)
KERN_VATTR static inline __m512 kern_vf_first(__m512 v, int n, __m512 w)
{
    const __mmask16 m = n >= 16 ? (__mmask16)0xFFFF
                      : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
    return _mm512_mask_blend_ps(m, w, v);
}

/* the elements past the last vector through a masked vector into s1, then
 * the fold (returns from the function) */
#define KERN_DOT_TAIL(s0, s1, s2, s3, a, b, i, n)                              \
    do {                                                                       \
        if (i < n) {                                                           \
            __mmask16 m_ = (__mmask16)((1u << (n - i)) - 1);                   \
            s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m_, a + i),             \
                                 _mm512_maskz_loadu_ps(m_, b + i), s1);        \
        }                                                                      \
        return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1),       \
                                                  _mm512_add_ps(s2, s3)));     \
    } while (0)
#define KERN_AXPY_TAIL(y, a, av, x, i, n)                                      \
    do {                                                                       \
        if (i < n) {                                                           \
            __mmask16 m_ = (__mmask16)((1u << (n - i)) - 1);                   \
            __m512 yv_ = _mm512_maskz_loadu_ps(m_, y + i);                     \
            _mm512_mask_storeu_ps(y + i, m_, _mm512_add_ps(yv_,                \
                _mm512_mul_ps(av, _mm512_maskz_loadu_ps(m_, x + i))));         \
        }                                                                      \
    } while (0)

#else
#error "KERN_SIMD_W must be 256 or 512"
#endif

/* 4 activation bytes broadcast to every 32-bit lane (one per row) */
KERN_VATTR static inline kern_vi kern_vi_bcast4(const int8_t *xq)
{
    return kern_vi_set1_32(kern_ld_i32(xq));
}

/* d_w * d_x for KERN_VN rows: their f16 scales at dw, times dx */
KERN_VATTR static inline kern_vf kern_vf_block_d(const uint8_t *dw, float dx)
{
    return kern_vf_mul(kern_vf_ld_half(dw), kern_vf_set1(dx));
}

/* kern_ref.c's fold8 for KERN_VN rows at once: the 8 group sums of each
 * row (l[g], one lane per row) to one, (l0 + l4) + (l2 + l6) added to
 * (l1 + l5) + (l3 + l7), the order that makes the 8-lane kernels' bits. */
KERN_VATTR static inline kern_vf kern_vf_fold8_rows(const kern_vf *l)
{
    return kern_vf_add(kern_vf_add(kern_vf_add(l[0], l[4]), kern_vf_add(l[2], l[6])),
                       kern_vf_add(kern_vf_add(l[1], l[5]), kern_vf_add(l[3], l[7])));
}

/* y[r0 .. r0 + KERN_VN) += v, storing only rows < rows (none when r0 is
 * past them): one float add per row. */
KERN_VATTR static inline void kern_vf_add_rows(float *y, unsigned rows, unsigned r0,
                                               kern_vf v)
{
    if (r0 >= rows)
        return;
    if (r0 + KERN_VN <= rows) {
        kern_vf_storeu(y + r0, kern_vf_add(kern_vf_loadu(y + r0), v));
    } else {
        float t[KERN_VN];
        kern_vf_storeu(t, v);
        for (unsigned i = 0; r0 + i < rows; i++)
            y[r0 + i] += t[i];
    }
}

/* init[k] = -offset x the sum of activation quants xq[4k .. 4k+3], for
 * the ngroups 4-column groups of an 8-lane kernel's blocks: the term that
 * turns a dot against offset-binary weights (Q4_0's nibbles, offset 8;
 * VNNI's unsigned Q8_0, 128) into the signed one. */
static inline void kern_group_init(const int8_t *xq, unsigned ngroups, int offset,
                                   int32_t *init)
{
    for (unsigned k = 0; k < ngroups; k++)
        init[k] = -offset * (xq[4 * k] + xq[4 * k + 1] + xq[4 * k + 2] + xq[4 * k + 3]);
}

/* The last levels of kern_ref.c's fold64 (and of kern_fold16 below):
 * 8 lane sums to one, the upper 4 lanes added to the lower 4, then lanes
 * 2-3 to 0-1, then lane 1 to lane 0. */
KERN_VATTR static inline float kern_fold8(__m256 t8)
{
    __m128 t4 = _mm_add_ps(_mm256_extractf128_ps(t8, 1), _mm256_castps256_ps128(t8));
    __m128 t2 = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));   /* t0+t2, t1+t3 */
    return _mm_cvtss_f32(_mm_add_ss(t2, _mm_shuffle_ps(t2, t2, 1)));
}

/* ggml_v_expf of ggml's vec.h, AVX-512 flavour (kern_ggml_v_expf1 is one
 * lane of it): exp(x) = 2^n (1 + p(b)), n = round(x / ln 2) by the
 * 0x1.8p23 trick, b = x - n ln 2 in two parts; kern_vf_exp_poly gives
 * 1 + p(b) and n, the tiers scale by 2^n below. */
KERN_VATTR static inline kern_vf kern_vf_exp_poly(kern_vf x, kern_vf *n)
{
    const kern_vf r = kern_vf_set1(0x1.8p23f);
    *n = kern_vf_sub(kern_vf_fma(x, kern_vf_set1(0x1.715476p+0f), r), r);
    const kern_vf b = kern_vf_fnma(*n, kern_vf_set1(0x1.7f7d1cp-20f),
                                   kern_vf_fnma(*n, kern_vf_set1(0x1.62e4p-1f), x));
    const kern_vf u = kern_vf_mul(b, b);
    return kern_vf_fma(
        kern_vf_fma(kern_vf_fma(kern_vf_set1(0x1.0e4020p-7f), b, kern_vf_set1(0x1.573e2ep-5f)),
                    u,
                    kern_vf_fma(kern_vf_set1(0x1.555e66p-3f), b, kern_vf_set1(0x1.fffdb6p-2f))),
        u, kern_vf_fma(kern_vf_set1(0x1.ffffecp-1f), b, kern_vf_set1(1.0f)));
}

#if KERN_VN == 16
/* _mm512_scalef_ps(j, n), and 0 or inf where |n| > 192, as ggml */
KERN_VATTR static inline __m512 kern_vf_exp_ggml(__m512 x)
{
    __m512 n;
    const __m512 j = kern_vf_exp_poly(x, &n);
    const __mmask16 d = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192),
                                           _CMP_GT_OQ);
    const __m512 res = _mm512_scalef_ps(j, n);
    if (_mm512_kortestz(d, d))
        return res;
    const __m512 zero = _mm512_setzero_ps();
    const __m512 alt = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(n, zero, _CMP_LE_OQ),
                                            _mm512_set1_ps(INFINITY), zero);
    return _mm512_mask_blend_ps(d, res, alt);
}
#else
/* AVX2 has no scalef: a product with 2^n built from its bits, the same
 * correctly rounded value while 2^n is a normal float (|n| <= 126); a
 * vector with a lane outside that (|x| > ~87, or NaN) takes the scalar
 * lane function. */
KERN_VATTR static inline __m256 kern_vf_exp_ggml(__m256 x)
{
    __m256 n;
    const __m256 j = kern_vf_exp_poly(x, &n);
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    /* all |n| <= 126 (false for NaN) */
    if (_mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(n, absm), _mm256_set1_ps(126.0f),
                                         _CMP_LE_OQ)) == 0xFF) {
        const __m256i p2 = _mm256_slli_epi32(
            _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
        return _mm256_mul_ps(j, _mm256_castsi256_ps(p2));
    }
    float ex[8], xs[8];
    _mm256_storeu_ps(xs, x);
    for (int l = 0; l < 8; l++)
        ex[l] = kern_ggml_v_expf1(xs[l]);
    return _mm256_loadu_ps(ex);
}
#endif

#if KERN_VN == 16
/* The 16 lanes of v summed as GCC's _mm512_reduce_add_ps sums them
 * (kern_fold16_ref): halves of 8, then kern_fold8.  Spelt out, so that
 * another compiler's reduction order cannot change the bits. */
KERN_VATTR static inline float kern_fold16(__m512 v)
{
    return kern_fold8(_mm256_add_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(
                                        _mm512_castps_pd(v), 1)),
                                    _mm512_castps512_ps256(v)));
}
#endif

/* 16 floats at p summed as kern_fold16_ref sums them */
KERN_VATTR static inline float kern_sum16(const float *p)
{
#if KERN_VN == 16
    return kern_fold16(_mm512_loadu_ps(p));
#else
    return kern_fold8(_mm256_add_ps(_mm256_loadu_ps(p + 8), _mm256_loadu_ps(p)));
#endif
}

/* ---- the tile kernels' pieces ---------------------------------------------
 * Software prefetch PF_DIST bytes ahead of the quantised weights being
 * read, into L2 (PF_HINT T1): the hardware prefetchers stop at 4 KiB pages
 * and a tile stream crosses many (kern_avx512.c has the measurements; for
 * the AVX2 kernels, the DRAM-bound repacked Q4_0 mat-vec, one thread, CPU
 * time: none ~10.7, 8 KiB T0 ~10.6-14.7, T1 at 8 or 16 KiB ~13.3 GB/s in
 * paired runs). */
#ifndef PF_DIST
#define PF_DIST 16384
#endif
#ifndef PF_HINT
#define PF_HINT _MM_HINT_T1
#endif

KERN_VATTR static inline void pf_ahead(const uint8_t *p, unsigned lines)
{
    for (unsigned i = 0; i < lines; i++)
        _mm_prefetch((const char *)p + PF_DIST + 64 * i, PF_HINT);
}

/* Attention over the f16 cache.  The cache is position-major: a head's K
 * (or V) row, 2 * head_dim bytes, recurs every kv_stride halves, so a head
 * group reads 128-256 bytes of each 512 or more and the hardware
 * prefetchers leave most rows to demand misses (on a Xeon 6/207 VM the
 * loads of a row's first line took ~17% of the AVX-512 kernel's samples at
 * 1536 positions).  The kernels prefetch the rows KERN_KV_PF_DIST positions
 * ahead; the arithmetic is untouched.  kern_pf_kv_rows: the n_rows rows
 * at offsets off[0 .. n_rows) (halves) of position t, none past n_pos. */
#define KERN_KV_PF_DIST 16

KERN_VATTR static inline void kern_pf_kv_rows(const uint16_t *base, unsigned t,
                                              unsigned n_pos, size_t kv_stride,
                                              const size_t *off, int n_rows, unsigned hd)
{
    if (t >= n_pos)
        return;
    const char *row = (const char *)(base + (size_t)t * kv_stride);
    for (int j = 0; j < n_rows; j++)
        for (unsigned o = 0; o < 2 * hd; o += 64)
            _mm_prefetch(row + 2 * off[j] + o, _MM_HINT_T0);
}

/* The 8 group dots of KERN_VN rows of a Q4_0 panel-block: q the 4 chunks
 * of those rows (64 bytes apart), xq the block's 32 activation quants;
 * isum[j] = init[j] + the dot of block columns 4j .. 4j+3 (init: minus 8
 * x the group's activation sum).  Low nibbles are columns 4g .. 4g+3 (group
 * g), high nibbles 16+4g .. 19+4g (group 4+g), both unsigned 0..15, so
 * vpmaddubsw cannot saturate (2 * 15 * 128 < 32768). */
KERN_VATTR static inline void q4_lanes(const uint8_t *q, const int8_t *xq,
                                       const int32_t *init, kern_vi *isum)
{
    const kern_vi m4 = kern_vi_set1_8(0x0F), ones = kern_vi_set1_16(1);
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        kern_vi v = kern_vi_loadu(q + 64 * g);
        isum[g] = kern_vi_add32(kern_vi_set1_32(init[g]), kern_vi_madd16(
                      kern_vi_maddubs(kern_vi_and(v, m4), kern_vi_bcast4(xq + 4 * g)),
                      ones));
        isum[g + 4] = kern_vi_add32(kern_vi_set1_32(init[g + 4]), kern_vi_madd16(
                      kern_vi_maddubs(kern_vi_and(kern_vi_srli16(v, 4), m4),
                                      kern_vi_bcast4(xq + 16 + 4 * g)), ones));
    }
}

/* The same for Q8_0, whose offset-binary bytes could saturate vpmaddubsw
 * (2 * 255 * 127 > 32767): the bytes are made signed (xor 0x80, u - 128)
 * and multiplied as |w| x sign(x, w), at most 2 * 128 * 127 per pair, as
 * llama.cpp does.  Exact signed products: no offset, init unused. */
KERN_VATTR static inline void q8_lanes(const uint8_t *q, const int8_t *xq,
                                       const int32_t *init, kern_vi *isum)
{
    const kern_vi sgn = kern_vi_set1_8((char)0x80), ones = kern_vi_set1_16(1);
    (void)init;
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        kern_vi xb = kern_vi_bcast4(xq + 4 * g);
        kern_vi ws = kern_vi_xor(kern_vi_loadu(q + 64 * g), sgn);
        isum[g] = kern_vi_madd16(kern_vi_maddubs(kern_vi_abs8(ws), kern_vi_sign8(xb, ws)),
                                 ones);
    }
}

/* ---- the vector kernels of the tables --------------------------------------
 * dot_f32: four vector accumulators (column i in accumulator (i / KERN_VN)
 * % 4), then one vector at a time into the first, the tail and the fold the
 * tier's (the tests compare the sum with a tolerance: the order is not the
 * reference's).  axpy_f32: y += a x with the reference's rounding (mul,
 * then add).  simd_act_f16: kern_act_f16_ref's halves, KERN_VN at a time
 * (vcvtps2ph rounds to nearest even, as kern_f2h). */
KERN_VATTR static float dot_f32(const float *a, const float *b, unsigned n)
{
    kern_vf s0 = kern_vf_zero(), s1 = kern_vf_zero();
    kern_vf s2 = kern_vf_zero(), s3 = kern_vf_zero();
    unsigned i = 0;
    for (; i + 4 * KERN_VN <= n; i += 4 * KERN_VN) {
        s0 = kern_vf_fma(kern_vf_loadu(a + i), kern_vf_loadu(b + i), s0);
        s1 = kern_vf_fma(kern_vf_loadu(a + i + KERN_VN),
                         kern_vf_loadu(b + i + KERN_VN), s1);
        s2 = kern_vf_fma(kern_vf_loadu(a + i + 2 * KERN_VN),
                         kern_vf_loadu(b + i + 2 * KERN_VN), s2);
        s3 = kern_vf_fma(kern_vf_loadu(a + i + 3 * KERN_VN),
                         kern_vf_loadu(b + i + 3 * KERN_VN), s3);
    }
    for (; i + KERN_VN <= n; i += KERN_VN)
        s0 = kern_vf_fma(kern_vf_loadu(a + i), kern_vf_loadu(b + i), s0);
    KERN_DOT_TAIL(s0, s1, s2, s3, a, b, i, n);
}

KERN_VATTR static void axpy_f32(float *y, float a, const float *x, unsigned n)
{
    const kern_vf av = kern_vf_set1(a);
    unsigned i = 0;
    for (; i + KERN_VN <= n; i += KERN_VN)
        kern_vf_storeu(y + i, kern_vf_add(kern_vf_loadu(y + i),
                                          kern_vf_mul(av, kern_vf_loadu(x + i))));
    KERN_AXPY_TAIL(y, a, av, x, i, n);
}

KERN_VATTR static void simd_act_f16(const float *x, unsigned n, uint16_t *h)
{
    unsigned i = 0;
    for (; i + KERN_VN <= n; i += KERN_VN)
        kern_vf_st_half(h + i, kern_vf_loadu(x + i));
    kern_act_f16_ref(x + i, n - i, h + i);
}

/* ---- a prompt chunk's attention (kern_attn_pf_fn) ---------------------------
 * kern_attn_prefill_f16's bits (kern_vec.c) the way llama.cpp's simd_gemm
 * gets them: all the rows of one KV head go through a tile of 64 positions
 * together, Q.K^T and then P.V as small matrix products, each element a
 * chain of FMAs in the reference's order (PF_R rows x PF_CV vectors of
 * accumulators; the tile's K widened and transposed once for every row).
 * Where rows of one call stop at different positions, P.V runs every row
 * to the tile's last stored position and gives the masked ones weight 0:
 * x + v * 0 is x, or a zero of the other sign, which the reference's final
 * + 0 makes the same (the cache holds finite values).
 * Work (floats): Q [nr][hd] | O [nr][hd] | KQ [nr][64] | M [nr] | S [nr] |
 * KT [hd][64] | V [64][hd]; nr = np * G. */
#if KERN_VN == 16
#define PF_R  4                 /* 16 accumulators of 32 zmm */
#define PF_CV 4
#else
#define PF_R  6                 /* 12 accumulators of 16 ymm */
#define PF_CV 2
#endif

/* C[R][CV vectors] += A[R][K] . B[K][CV vectors] (row strides lda, ldb,
 * ldc in floats); R and CV constants where inlined */
KERN_VATTR static inline __attribute__((always_inline)) void
pf_uk(float *C, size_t ldc, const float *A, size_t lda, const float *B,
      size_t ldb, unsigned K, const int R, const int CV)
{
    kern_vf acc[PF_R][PF_CV], b[PF_CV];
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 8")
        for (int c = 0; c < CV; c++)
            acc[r][c] = kern_vf_loadu(C + r * ldc + c * KERN_VN);
    for (unsigned kk = 0; kk < K; kk++) {
        _Pragma("GCC unroll 8")
        for (int c = 0; c < CV; c++)
            b[c] = kern_vf_loadu(B + kk * ldb + c * KERN_VN);
        _Pragma("GCC unroll 8")
        for (int r = 0; r < R; r++) {
            const kern_vf a = kern_vf_set1(A[r * lda + kk]);
            _Pragma("GCC unroll 8")
            for (int c = 0; c < CV; c++)
                acc[r][c] = kern_vf_fma(b[c], a, acc[r][c]);
        }
    }
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 8")
        for (int c = 0; c < CV; c++)
            kern_vf_storeu(C + r * ldc + c * KERN_VN, acc[r][c]);
}

/* C[M][N] += A[M][K] . B[K][N], N a multiple of KERN_VN */
KERN_VATTR static void pf_gemm(float *C, size_t ldc, const float *A,
                               size_t lda, const float *B, size_t ldb,
                               unsigned M, unsigned K, unsigned N)
{
    unsigned i = 0, c;
    for (; i + PF_R <= M; i += PF_R) {
        for (c = 0; c + PF_CV * KERN_VN <= N; c += PF_CV * KERN_VN)
            pf_uk(C + i * ldc + c, ldc, A + i * lda, lda, B + c, ldb, K, PF_R, PF_CV);
        for (; c < N; c += KERN_VN)
            pf_uk(C + i * ldc + c, ldc, A + i * lda, lda, B + c, ldb, K, PF_R, 1);
    }
    for (; i < M; i++) {
        for (c = 0; c + PF_CV * KERN_VN <= N; c += PF_CV * KERN_VN)
            pf_uk(C + i * ldc + c, ldc, A + i * lda, lda, B + c, ldb, K, 1, PF_CV);
        for (; c < N; c += KERN_VN)
            pf_uk(C + i * ldc + c, ldc, A + i * lda, lda, B + c, ldb, K, 1, 1);
    }
}

/* One row's softmax step over a tile whose first n positions it sees: e
 * [64] holds its raw scores and leaves with the weights (0 past n); M, S,
 * and the accumulator o [hd] as the reference updates them. */
KERN_VATTR static void pf_softmax_row(float *e, unsigned n, unsigned nt,
                                      float scale, float *M, float *S,
                                      float *o, unsigned hd)
{
    const kern_vf zero = kern_vf_zero(), ninf = kern_vf_set1(-INFINITY);
    const kern_vf sv = kern_vf_set1(scale);
    kern_vf mx = ninf;
    unsigned b;
    for (b = 0; b < n; b += KERN_VN) {
        const kern_vf s = kern_vf_mul(kern_vf_loadu(e + b), sv);
        kern_vf_storeu(e + b, s);
        mx = kern_vf_max(mx, kern_vf_first(s, (int)(n - b), ninf));
    }
    const float Mn = fmaxf(*M, kern_vf_hmax(mx));
    if (Mn > *M) {                      /* ms is 0 on the first tile */
        const float ms = expf(*M - Mn);
        const kern_vf msv = kern_vf_set1(ms);
        for (unsigned d = 0; d < hd; d += KERN_VN)
            kern_vf_storeu(o + d, kern_vf_mul(kern_vf_loadu(o + d), msv));
        *S *= ms;
    }
    *M = Mn;
    const kern_vf mv = kern_vf_set1(Mn);
    double sum = 0.0;
    for (b = 0; b < n; b += 16) {
        for (unsigned l = b; l < b + 16; l += KERN_VN) {
            /* masked lanes: the exp of 0, then weight 0 */
            const kern_vf x = kern_vf_first(kern_vf_sub(kern_vf_loadu(e + l), mv),
                                            (int)(n - l), zero);
            kern_vf_storeu(e + l, kern_vf_first(kern_vf_exp_ggml(x), (int)(n - l), zero));
        }
        sum += (double)kern_sum16(e + b);
    }
    for (; b < nt; b += KERN_VN)
        kern_vf_storeu(e + b, zero);
    *S = (float)((double)*S + sum);
}

KERN_VATTR static void simd_attn_prefill_f16(float *out, const float *q,
                                             size_t ld, unsigned np, unsigned G,
                                             unsigned p0, const uint16_t *k,
                                             const uint16_t *v, size_t kv_stride,
                                             unsigned hd, float scale, float *work)
{
    const unsigned T = KERN_ATTN_PF_TILE, nr = np * G;
    if (!nr || hd % KERN_VN) {
        kern_attn_prefill_f16(out, q, ld, np, G, p0, k, v, kv_stride, hd, scale, work);
        return;
    }
    float *Q = work, *O = Q + (size_t)nr * hd, *KQ = O + (size_t)nr * hd;
    float *M = KQ + (size_t)nr * T, *S = M + nr, *KT = S + nr, *V = KT + (size_t)hd * T;
    for (unsigned r = 0; r < nr; r++) {
        memcpy(Q + (size_t)r * hd, q + (r / G) * ld + (size_t)(r % G) * hd,
               hd * sizeof(float));
        memset(O + (size_t)r * hd, 0, hd * sizeof(float));
        M[r] = -INFINITY;
        S[r] = 0.0f;
    }
    memset(KT, 0, (size_t)hd * T * sizeof(float));   /* columns past a short tile */
    const unsigned pmax = p0 + np - 1;
    for (unsigned ic = 0; ic <= pmax; ic += T) {
        const unsigned nt = pmax + 1 - ic < T ? pmax + 1 - ic : T;
        const unsigned r0 = (ic > p0 ? ic - p0 : 0) * G;   /* rows that see it */
        for (unsigned t = 0; t < nt; t++) {
            const uint8_t *kt = (const uint8_t *)(k + (size_t)(ic + t) * kv_stride);
            const uint8_t *vt = (const uint8_t *)(v + (size_t)(ic + t) * kv_stride);
            for (unsigned d = 0; d < hd; d += KERN_VN) {
                float w[KERN_VN];
                kern_vf_storeu(w, kern_vf_ld_half(kt + 2 * d));
                for (unsigned l = 0; l < KERN_VN; l++)
                    KT[(size_t)(d + l) * T + t] = w[l];
                kern_vf_storeu(V + (size_t)t * hd + d, kern_vf_ld_half(vt + 2 * d));
            }
        }
        memset(KQ + (size_t)r0 * T, 0, (size_t)(nr - r0) * T * sizeof(float));
        pf_gemm(KQ + (size_t)r0 * T, T, Q + (size_t)r0 * hd, hd, KT, T, nr - r0, hd, T);
        for (unsigned r = r0; r < nr; r++) {
            const unsigned left = p0 + r / G + 1 - ic;
            pf_softmax_row(KQ + (size_t)r * T, left < T ? left : T, nt, scale,
                           &M[r], &S[r], O + (size_t)r * hd, hd);
        }
        pf_gemm(O + (size_t)r0 * hd, hd, KQ + (size_t)r0 * T, T, V, hd, nr - r0, nt, hd);
    }
    const kern_vf zero = kern_vf_zero();
    for (unsigned r = 0; r < nr; r++) {
        const kern_vf inv = kern_vf_set1(S[r] == 0.0f ? 0.0f : 1.0f / S[r]);
        float *o = out + (r / G) * ld + (size_t)(r % G) * hd;
        for (unsigned d = 0; d < hd; d += KERN_VN)
            kern_vf_storeu(o + d, kern_vf_add(kern_vf_mul(kern_vf_loadu(O + (size_t)r * hd + d),
                                                          inv), zero));
    }
}

#endif /* CFLOW_KERN_SIMD_H */
