/*
 * kern_avx2.c — tile mat-vec for AVX2 + FMA + F16C.
 *
 * Compiled for plain x86-64: only the functions below carry
 * __attribute__((target)), and kern_dispatch.c calls them only on a CPU
 * that has the features.
 *
 * A panel's 16 rows live in two ymm registers (rows 0-7, 8-15), one lane
 * per row, so a column (F32/F16) or a 4-column group (Q8_0/Q4_0) is one
 * broadcast of x against 8 rows and no horizontal sum runs per row.  Every
 * partial sum kern_ref.c keeps per row is one ymm per half panel, and each
 * lane performs exactly the reference's roundings in the same order, so
 * the results are bit-identical to it:
 *   F32   mul then add (no FMA: an FMA would round differently; the module
 *         is built with -ffp-contract=off so the compiler does not fuse them)
 *   F16   64 partial sums per row (column c % 64) by FMA, whose product of
 *         two halves is exact; folded as kern_ref.c's fold64; the columns
 *         past the last multiple of 64 added in double
 *   Q4_0  8 partial sums per row, one per 4-column group of a block:
 *         unsigned nibbles (0..15) x signed Q8 activation with vpmaddubsw,
 *         widened with vpmaddwd, minus 8 x the group's activation sum
 *   Q8_0  vpmaddubsw would saturate on offset-binary bytes (2 * 255 * 127 >
 *         32767), so the bytes are made signed (xor 0x80) and multiplied as
 *         |w| x sign(x, w) (at most 2 * 128 * 127 per pair), as llama.cpp
 *         does
 *   per block, group g: lane_g = fma(d_w * d_x, (float)isum_g, lane_g);
 *   at the end the 8 lanes fold as kern_ref.c's fold8.  The repacked Q4_0
 *   flavour sums the whole block and does one FMA per block.
 * The 8-lane quantised kernels run the two half panels one after the
 * other (their bytes are disjoint), to keep 8 accumulators in registers;
 * the F16 kernel keeps its 64 sums per half panel in memory and, like F32,
 * runs four panels side by side so that one broadcast of x serves them
 * (each lane's own additions stay in order).
 *
 * The batched kernels (tile_mm) of Q8_0 and Q4_0, plain and repacked,
 * are kern_mm_simd.h's, which share the weights' work among inputs and
 * keep each input's float steps those of the mat-vecs here; F32 and F16
 * run the mat-vec once per input.
 *
 * Attention over the f16 cache (attn_f16) is kern_avx512.c's, in 8-lane
 * vectors, 4 heads side by side for head_dim 64, to the same bits as the
 * reference: without it an AVX2 machine ran the scalar reference, whose
 * per-element fmaf calls made tinyllama decode at depth 1024 seven times
 * slower (docs/perf-log/2026-12-02.md).  Four query heads that
 * share a KV head at head_dim 64 (attn2_kvg64) widen each K row once, fold
 * scores 8 positions at a time and keep the value accumulators in
 * registers: 44.5 -> 30.6 ns per head and position at tinyllama's shape
 * over 4096 positions (Zen 1, one thread, 5 alternating pairs).  What is
 * left is mostly the f16 round trip of the value accumulator, which a CPU
 * that splits 256-bit operations into 128-bit halves (Zen 1) converts at
 * about one vector per 4-5 cycles.
 */
#include "config.h"

#include "kernels/kern.h"
#include "kernels/kern_impl.h"

#if HAVE_ISA_X86

#include <immintrin.h>
#include <math.h>

#define KERN_SIMD_W 256
#include "kernels/kern_simd.h"
#include "kernels/kern_mm_simd.h"

#define AVX2 KERN_VATTR

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


/* Up to NGROUP panels (ng) side by side, so that a column's broadcast of
 * x serves them all.  Column c < np goes to lane sum c % 64 (see
 * kern_ref.c); the 64 sums of each half panel live in memory so that the
 * weights stream in column order.  Then each half folds its sums as fold64
 * and adds its tail in double. */
AVX2 static void f16_panels(const uint8_t *wp, size_t pstride, unsigned ng,
                            unsigned np, unsigned cols, const float *xf,
                            __m256 *lo, __m256 *hi)
{
    __m256 acc[NGROUP][2][64];
    for (unsigned k = 0; k < ng; k++)
        for (unsigned l = 0; l < 64; l++)
            acc[k][0][l] = acc[k][1][l] = _mm256_setzero_ps();
    for (unsigned c = 0; c < np; c++) {
        const __m256 xb = _mm256_set1_ps(xf[c]);
#pragma GCC unroll 4
        for (unsigned k = 0; k < NGROUP; k++)
            if (k < ng) {
                const uint8_t *col = wp + k * pstride + c * 32;
                acc[k][0][c % 64] = _mm256_fmadd_ps(kern_vf_ld_half(col), xb, acc[k][0][c % 64]);
                acc[k][1][c % 64] = _mm256_fmadd_ps(kern_vf_ld_half(col + 16), xb,
                                                    acc[k][1][c % 64]);
            }
    }
    for (unsigned k = 0; k < ng; k++)
        for (unsigned h = 0; h < 2; h++) {
            const __m256 *ac = acc[k][h];
            __m256 a16[16], t8[8], t4[4];
#pragma GCC unroll 16
            for (unsigned l = 0; l < 16; l++)
                a16[l] = _mm256_add_ps(_mm256_add_ps(ac[l], ac[32 + l]),
                                       _mm256_add_ps(ac[16 + l], ac[48 + l]));
#pragma GCC unroll 8
            for (unsigned l = 0; l < 8; l++)
                t8[l] = _mm256_add_ps(a16[l + 8], a16[l]);
#pragma GCC unroll 4
            for (unsigned l = 0; l < 4; l++)
                t4[l] = _mm256_add_ps(t8[l + 4], t8[l]);
            __m256 r = _mm256_add_ps(_mm256_add_ps(t4[0], t4[2]),
                                     _mm256_add_ps(t4[1], t4[3]));
            if (np < cols) {
                const uint8_t *wk = wp + k * pstride + 16 * h;
                __m256d dl = _mm256_cvtps_pd(_mm256_castps256_ps128(r));
                __m256d dh = _mm256_cvtps_pd(_mm256_extractf128_ps(r, 1));
                for (unsigned c = np; c < cols; c++) {
                    __m256 pr = _mm256_mul_ps(kern_vf_ld_half(wk + c * 32), _mm256_set1_ps(xf[c]));
                    dl = _mm256_add_pd(dl, _mm256_cvtps_pd(_mm256_castps256_ps128(pr)));
                    dh = _mm256_add_pd(dh, _mm256_cvtps_pd(_mm256_extractf128_ps(pr, 1)));
                }
                r = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(dl)),
                                         _mm256_cvtpd_ps(dh), 1);
            }
            if (h)
                hi[k] = r;
            else
                lo[k] = r;
        }
}

AVX2 static void mv_f16(const void *payload, unsigned rows, unsigned cols,
                        const kern_act *x, unsigned col0, float *y)
{
    kern_geom g = kern_geom_of(rows, cols);
    const size_t pstride = (size_t)g.cp * KERN_PANEL * 2;
    const uint8_t *w = payload;
    const unsigned np = cols & ~63u;
    float xf[KERN_TILE_COLS];           /* x.f16 widened once per tile */
    unsigned c = 0;

    for (; c + 8 <= cols; c += 8)
        _mm256_storeu_ps(xf + c, _mm256_cvtph_ps(
            _mm_loadu_si128((const __m128i *)(x->f16 + col0 + c))));
    for (; c < cols; c++)
        xf[c] = kern_h2f(x->f16[col0 + c]);

    for (unsigned p = 0; p < g.np; p += NGROUP) {
        const unsigned ng = g.np - p < NGROUP ? g.np - p : NGROUP;
        __m256 lo[NGROUP], hi[NGROUP];
        f16_panels(w + p * pstride, pstride, ng, np, cols, xf, lo, hi);
        for (unsigned k = 0; k < ng; k++)
            add_panel(y, rows, p + k, lo[k], hi[k]);
    }
}

/* ---- Q8_0 / Q4_0 ---------------------------------------------------------- */

/* Q8_0/Q4_0 with 8 lanes per row, half a panel at a time (8 accumulators
 * fill the register file). */
#define MV_LANES(NAME, BLOCK_BYTES, LANES, OFFSET)                             \
AVX2 static void NAME(const void *payload, unsigned rows, unsigned cols,       \
                      const kern_act *x, unsigned col0, float *y)              \
{                                                                              \
    kern_geom g = kern_geom_of(rows, cols);                                    \
    const uint8_t *w = payload, *qbase = w + g.scale_bytes;                    \
    const unsigned xb0 = col0 / KERN_QBLOCK;                                   \
    int32_t init[KERN_TILE_COLS / 4];   /* -OFFSET * sum of each group */      \
    kern_group_init(x->q8 + col0, g.nb * 8, (OFFSET), init);                   \
    for (unsigned p = 0; p < g.np; p++)                                        \
        for (unsigned h = 0; h < 2; h++) {   /* rows 0-7, then 8-15 */         \
            __m256 acc[8];                                                     \
            _Pragma("GCC unroll 8")                                            \
            for (int j = 0; j < 8; j++)                                        \
                acc[j] = _mm256_setzero_ps();                                  \
            for (unsigned b = 0; b < g.nb; b++) {                              \
                const size_t pb = (size_t)p * g.nb + b;                        \
                __m256i isum[8];                                               \
                if (!h)                                                        \
                    pf_ahead(qbase + pb * (BLOCK_BYTES), (BLOCK_BYTES) / 64);  \
                LANES(qbase + pb * (BLOCK_BYTES) + 32 * h,                     \
                      x->q8 + col0 + KERN_QBLOCK * b, init + 8 * b, isum);     \
                const __m256 d = kern_vf_block_d(                              \
                    w + 2 * pb * KERN_PANEL + 16 * h, x->q8_d[xb0 + b]);       \
                _Pragma("GCC unroll 8")                                        \
                for (int j = 0; j < 8; j++)                                    \
                    acc[j] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(isum[j]),  \
                                             acc[j]);                          \
            }                                                                  \
            kern_vf_add_rows(y, rows, KERN_PANEL * p + 8 * h,                  \
                             kern_vf_fold8_rows(acc));                         \
        }                                                                      \
}

MV_LANES(mv_q8_0, KERN_Q8_BLOCK_BYTES, q8_lanes, 0)
MV_LANES(mv_q4_0, KERN_Q4_BLOCK_BYTES, q4_lanes, 8)

/* Repacked Q4_0: per block, sum = fma((float)isum, d_w * d_x, sum), both
 * half panels at once so that the activation broadcasts serve 16 rows. */
AVX2 static void mv_q4_0_rp(const void *payload, unsigned rows, unsigned cols,
                            const kern_act *x, unsigned col0, float *y)
{
    kern_geom g = kern_geom_of(rows, cols);
    const uint8_t *w = payload, *qbase = w + g.scale_bytes;
    const unsigned xb0 = col0 / KERN_QBLOCK;
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);

    for (unsigned p = 0; p < g.np; p++) {
        __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
        for (unsigned b = 0; b < g.nb; b++) {
            const size_t pb = (size_t)p * g.nb + b;
            const uint8_t *q = qbase + pb * KERN_Q4_BLOCK_BYTES;
            const int8_t *xq = x->q8 + col0 + KERN_QBLOCK * b;
            pf_ahead(q, KERN_Q4_BLOCK_BYTES / 64);
            __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int g4 = 0; g4 < 4; g4++) {
                __m256i xl = kern_vi_bcast4(xq + 4 * g4);
                __m256i xh = kern_vi_bcast4(xq + 16 + 4 * g4);
                __m256i v0 = _mm256_loadu_si256((const __m256i *)(q + 64 * g4));
                __m256i v1 = _mm256_loadu_si256((const __m256i *)(q + 64 * g4 + 32));
                s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(_mm256_and_si256(v0, m4), xl));
                s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(
                         _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4), xh));
                s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(_mm256_and_si256(v1, m4), xl));
                s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(
                         _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4), xh));
            }
            const __m256i corr = _mm256_set1_epi32(8 * x->q8_sum[xb0 + b]);
            const __m256i i0 = _mm256_sub_epi32(_mm256_madd_epi16(s0, ones), corr);
            const __m256i i1 = _mm256_sub_epi32(_mm256_madd_epi16(s1, ones), corr);
            const uint8_t *dw = w + 2 * pb * KERN_PANEL;
            const float dx = x->q8_d[xb0 + b];
            acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i0), kern_vf_block_d(dw, dx), acc0);
            acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i1), kern_vf_block_d(dw + 16, dx), acc1);
        }
        add_panel(y, rows, p, acc0, acc1);
    }
}

/* ---- attention over an f16 cache -------------------------------------------
 * kern_attn_f16_ref's arithmetic with head_dim in ymm lanes, as
 * kern_avx512.c's ATTN_GROUP does it in zmm lanes.  The K dot is ggml's
 * AVX-512 ggml_vec_dot_f16: over the first hd & ~63 columns, column c in
 * lane sum c % 64 (eight ymm accumulators, column c in accumulator
 * (c % 64) / 8), folded as kern_ref.c's fold64 (the fold f16_panels
 * spells out); the columns past the last 64 in double in column order.
 * The f16 value accumulator is kept widened in registers and rounded
 * through f16 after every step (vcvtps2ph round-to-nearest-even, as
 * kern_f2h).  expf and the scalar FMA of the softmax sum are the
 * reference's.  head_dim a multiple of 8 up to 8 * ATTN2_MAXV; others go
 * to the reference. */
#define ATTN2_MAXV 32   /* head_dim up to 256 */

/* fold64's first levels: 64 lane sums held as a[0..7] (lane l of a[m]:
 * sum 8m + l) down to 8. */
AVX2 static inline __m256 fold64_t8(const __m256 *a)
{
    /* a16[l] = (s[l] + s[32+l]) + (s[16+l] + s[48+l]), l < 8 then l >= 8 */
    __m256 lo = _mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6]));
    __m256 hi = _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7]));
    return _mm256_add_ps(hi, lo);
}

/* fold64 of 64 lane sums held as a[0..7]. */
AVX2 static inline float fold64_ymm(const __m256 *a) { return kern_fold8(fold64_t8(a)); }

/* HG heads side by side from head h (see kern_avx512.c's ATTN_GROUP: a
 * head's value accumulator is a chain through every position, an FMA and
 * a round trip through f16, so heads in parallel hide its latency; every
 * head does the same operations in the same order however many run beside
 * it).  NV 8-lane vectors per head: a constant for head_dim 64 and 128,
 * the argument nvr otherwise; CAP bounds it.  Scores of head h + j go to
 * scores + j * n_pos. */
#define ATTN2_GROUP(NAME, NV, HG, CAP)                                         \
AVX2 static void NAME(float *out, const float *q, const uint16_t *k,           \
                      const uint16_t *v, unsigned n_pos, unsigned h,           \
                      unsigned nvr, unsigned kv_mul, size_t kv_stride,         \
                      float scale, float softcap, const float *sinks,          \
                      float *scores)                                           \
{                                                                              \
    const unsigned nv = (NV), np = nv & ~7u, hd = 8 * nv;                      \
    size_t koff[HG];                                                           \
    float qr[HG][8 * (CAP)] __attribute__((aligned(32)));                      \
    (void)nvr;                                                                 \
    for (int j = 0; j < (HG); j++) {                                           \
        koff[j] = (size_t)(kv_mul ? (h + j) / kv_mul : h + j) * hd;            \
        for (unsigned i = 0; i < nv; i++)                                      \
            _mm256_store_ps(qr[j] + 8 * i, kern_vf_round_h(_mm256_loadu_ps(          \
                                q + (size_t)(h + j) * hd + 8 * i)));           \
    }                                                                          \
    /* GQA: the heads may share one K/V row, prefetched once */              \
    const int n_rows = koff[0] == koff[(HG) - 1] ? 1 : (HG);                   \
    for (unsigned t = 0; t < n_pos; t++) {                                     \
        kern_pf_kv_rows(k, t + KERN_KV_PF_DIST, n_pos, kv_stride, koff, n_rows, hd);\
        _Pragma("GCC unroll 4")                                                \
        for (int j = 0; j < (HG); j++) {                                       \
            const uint8_t *kt = (const uint8_t *)(k + t * kv_stride + koff[j]);\
            double sum = 0.0;                                                  \
            if (np) {                                                          \
                __m256 a[8];                                                   \
                _Pragma("GCC unroll 8")                                        \
                for (unsigned i = 0; i < 8; i++)                               \
                    a[i] = _mm256_setzero_ps();                                \
                for (unsigned c0 = 0; c0 < np; c0 += 8) {   /* 64 columns */  \
                    _Pragma("GCC unroll 8")                                    \
                    for (unsigned i = 0; i < 8; i++)                           \
                        a[i] = _mm256_fmadd_ps(kern_vf_ld_half(kt + 16 * (c0 + i)),   \
                                               _mm256_load_ps(qr[j] + 8 * (c0 + i)),\
                                               a[i]);                          \
                }                                                              \
                sum = fold64_ymm(a);                                           \
            }                                                                  \
            for (unsigned i = np; i < nv; i++) {   /* past the last 64 */     \
                float pr[8];                                                   \
                _mm256_storeu_ps(pr, _mm256_mul_ps(kern_vf_ld_half(kt + 16 * i),      \
                                                   _mm256_load_ps(qr[j] + 8 * i)));\
                for (unsigned l = 0; l < 8; l++)                               \
                    sum += (double)pr[l];                                      \
            }                                                                  \
            float sc = (float)sum * scale;                                     \
            scores[(size_t)j * n_pos + t] =                                    \
                softcap > 0.0f ? softcap * tanhf(sc) : sc;                     \
        }                                                                      \
    }                                                                          \
    float S[HG], M[HG];   /* the softmax's scalars first (kern_impl.h) */  \
    for (int j = 0; j < (HG); j++)                                             \
        S[j] = kern_attn_softmax_scalars(scores + (size_t)j * n_pos, n_pos, &M[j]);\
    __m256 acc[HG][CAP];                                                       \
    for (int j = 0; j < (HG); j++)                                             \
        for (unsigned i = 0; i < nv; i++)                                      \
            acc[j][i] = _mm256_setzero_ps();                                   \
    for (unsigned t = 0; t < n_pos; t++) {                                     \
        kern_pf_kv_rows(v, t + KERN_KV_PF_DIST, n_pos, kv_stride, koff, n_rows, hd);\
        _Pragma("GCC unroll 4")                                                \
        for (int j = 0; j < (HG); j++) {                                       \
            const uint8_t *vt = (const uint8_t *)(v + t * kv_stride + koff[j]);\
            const float e = scores[(size_t)j * n_pos + t];                     \
            float vs = e;                                                      \
            if (e < 0.0f || (e == 0.0f && signbit(e))) {                       \
                const __m256 msv = _mm256_set1_ps(-e);                         \
                vs = 1.0f;                                                     \
                _Pragma("GCC unroll 16")                                       \
                for (unsigned i = 0; i < nv; i++)                              \
                    acc[j][i] = kern_vf_round_h(_mm256_mul_ps(acc[j][i], msv));       \
            }                                                                  \
            const __m256 vsv = _mm256_set1_ps(vs);                             \
            _Pragma("GCC unroll 16")                                           \
            for (unsigned i = 0; i < nv; i++)                                  \
                acc[j][i] = kern_vf_round_h(_mm256_fmadd_ps(kern_vf_ld_half(vt + 16 * i),    \
                                                     vsv, acc[j][i]));         \
        }                                                                      \
    }                                                                          \
    for (int j = 0; j < (HG); j++) {                                           \
        const __m256 ms = _mm256_set1_ps(sinks ? kern_attn_sink(sinks[h + j], M[j], \
                                                                &S[j]) : 1.0f);\
        const __m256 inv = _mm256_set1_ps(S[j] == 0.0f ? 0.0f : 1.0f / S[j]);  \
        for (unsigned i = 0; i < nv; i++)                                      \
            _mm256_storeu_ps(out + (size_t)(h + j) * hd + 8 * i,               \
                             _mm256_mul_ps(_mm256_mul_ps(acc[j][i], ms), inv));\
    }                                                                          \
}

/* heads side by side at head_dim 64 (tinyllama tg @ d1024, 2 threads,
 * Zen 1: 20.2 tok/s with 1, 20.5 with 2, 21.3 with 4) */
#define ATTN2_HG64 4
ATTN2_GROUP(attn2_grp64, 8, ATTN2_HG64, 8)
ATTN2_GROUP(attn2_hd128, 16, 1, 16)
ATTN2_GROUP(attn2_one, nvr, 1, ATTN2_MAXV)

/* Four query heads of one KV head at head_dim 64 (GQA with a group of 4
 * or more: tinyllama, Llama 3, most current models) — the same bits as
 * ATTN2_GROUP, in an order that suits 16 ymm registers.
 *
 *   scores  each K row is widened once for the four heads; a head's 64
 *           products are summed down to 8 lanes (fold64_ymm's vertical
 *           adds) and parked, and every 8 positions the last three levels
 *           of the fold run across the 8 positions at once (permutes and
 *           shuffles pair the same lanes fold64_ymm pairs), so there is
 *           no horizontal reduction per position, and the scale is one
 *           vector multiply;
 *   values  dims outer, positions inner: two 8-lane slices of the four
 *           heads' accumulators (8 registers) stay in registers through a
 *           block of A2_TB positions, whose V slices come from L1; the
 *           ATTN2_GROUP loop kept all 32 accumulators live and spilled
 *           them to the stack at every position.
 *
 * Each lane still sees kern_attn_f16_ref's operations in its order: the
 * same products, sums and f16 roundings per position, the rescale at a new
 * maximum before that position's FMA. */
#define A2_TB 64   /* positions per block of the value pass (8 KiB of V) */

/* The last three levels of fold64_ymm for 8 positions: x[p] holds
 * position p's 8 lane sums (t8); returns the 8 sums in position order. */
AVX2 static inline __m256 fold8x8(const __m256 *x)
{
    __m256 u[4];
    _Pragma("GCC unroll 8")
    for (int i = 0; i < 4; i++)   /* t4 = hi128 + lo128, two positions */
        u[i] = _mm256_add_ps(_mm256_permute2f128_ps(x[2 * i], x[2 * i + 1], 0x31),
                             _mm256_permute2f128_ps(x[2 * i], x[2 * i + 1], 0x20));
    __m256 w[2];
    _Pragma("GCC unroll 8")
    for (int i = 0; i < 2; i++)   /* t2 = t4[0,1] + t4[2,3], four positions */
        w[i] = _mm256_add_ps(_mm256_shuffle_ps(u[2 * i], u[2 * i + 1], 0x44),
                             _mm256_shuffle_ps(u[2 * i], u[2 * i + 1], 0xEE));
    /* r = t2[0] + t2[1]: lanes (0 2 4 6 | 1 3 5 7) */
    __m256 r = _mm256_add_ps(_mm256_shuffle_ps(w[0], w[1], 0x88),
                             _mm256_shuffle_ps(w[0], w[1], 0xDD));
    return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* A head's 64 products with the K row kk, folded to 8 lane sums. */
AVX2 static inline __m256 t8_of(const __m256 *kk, const float *qj)
{
    __m256 a[8];
    _Pragma("GCC unroll 8")
    for (int i = 0; i < 8; i++)
        a[i] = _mm256_mul_ps(kk[i], _mm256_load_ps(qj + 8 * i));
    return fold64_t8(a);
}

/* attn2_kvg64's first pass: the four heads' scores against every position
 * into scores[4][n_pos] (scaled, then soft-capped): each head's Q row
 * rounded through f16 and dotted with the position's K row (one row for
 * the four), 8 positions at a time folded as ggml_vec_dot_f16 folds. */
AVX2 static inline void kvg64_scores(const float *q, const uint16_t *k, unsigned n_pos,
                                     unsigned h, size_t koff, size_t kv_stride, float scale,
                                     float softcap, float *scores)
{
    float qr[4][64] __attribute__((aligned(32)));
    __m256 t8[4][8];                       /* [head][position in the 8] */
    _Pragma("GCC unroll 8")
    for (int j = 0; j < 4; j++)
        _Pragma("GCC unroll 8")
        for (int i = 0; i < 8; i++)
            _mm256_store_ps(qr[j] + 8 * i,
                            kern_vf_round_h(_mm256_loadu_ps(q + (size_t)(h + j) * 64 + 8 * i)));
    const __m256 sv = _mm256_set1_ps(scale);
    const unsigned n8 = n_pos & ~7u;
    for (unsigned t0 = 0; t0 < n8; t0 += 8) {
        _Pragma("GCC unroll 8")
        for (unsigned p = 0; p < 8; p++) {
            kern_pf_kv_rows(k, t0 + p + KERN_KV_PF_DIST, n_pos, kv_stride, &koff, 1, 64);
            const uint8_t *kt = (const uint8_t *)(k + (t0 + p) * kv_stride + koff);
            __m256 kk[8];
            _Pragma("GCC unroll 8")
            for (int i = 0; i < 8; i++)
                kk[i] = kern_vf_ld_half(kt + 16 * i);
            _Pragma("GCC unroll 8")
            for (int j = 0; j < 4; j++)
                t8[j][p] = t8_of(kk, qr[j]);
        }
        _Pragma("GCC unroll 8")
        for (int j = 0; j < 4; j++)
            _mm256_storeu_ps(scores + (size_t)j * n_pos + t0,
                             _mm256_mul_ps(fold8x8(t8[j]), sv));
    }
    for (unsigned t = n8; t < n_pos; t++) {
        const uint8_t *kt = (const uint8_t *)(k + t * kv_stride + koff);
        __m256 kk[8];
        _Pragma("GCC unroll 8")
        for (int i = 0; i < 8; i++)
            kk[i] = kern_vf_ld_half(kt + 16 * i);
        _Pragma("GCC unroll 8")
        for (int j = 0; j < 4; j++)
            scores[(size_t)j * n_pos + t] = kern_fold8(t8_of(kk, qr[j])) * scale;
    }
    if (softcap > 0.0f)
        for (size_t i = 0; i < 4 * (size_t)n_pos; i++)
            scores[i] = softcap * tanhf(scores[i]);
}

AVX2 static void attn2_kvg64(float *out, const float *q, const uint16_t *k,
                             const uint16_t *v, unsigned n_pos, unsigned h,
                             size_t koff, size_t kv_stride, float scale,
                             float softcap, const float *sinks, float *scores)
{
    kvg64_scores(q, k, n_pos, h, koff, kv_stride, scale, softcap, scores);
    float S[4], M[4];
    _Pragma("GCC unroll 8")
    for (int j = 0; j < 4; j++)
        S[j] = kern_attn_softmax_scalars(scores + (size_t)j * n_pos, n_pos, &M[j]);

    __m256 acc[4][8];
    _Pragma("GCC unroll 8")
    for (int j = 0; j < 4; j++)
        _Pragma("GCC unroll 8")
        for (int i = 0; i < 8; i++)
            acc[j][i] = _mm256_setzero_ps();
    for (unsigned tb = 0; tb < n_pos; tb += A2_TB) {
        const unsigned te = tb + A2_TB < n_pos ? tb + A2_TB : n_pos;
        /* which 8-position chunks hold a rescale (a new maximum) for any
         * of the heads: the slot is -ms, negative or -0 and not NaN.  The
         * others run without the per-head test (29.0-29.9 against
         * 30.5-32.4 ns per head and position, 5 alternating pairs) */
        unsigned char resc[A2_TB / 8];
        for (unsigned t = te; t < te + A2_TB; t++)   /* the next block's V rows */
            kern_pf_kv_rows(v, t, n_pos, kv_stride, &koff, 1, 64);
        for (unsigned c = 0; c < (te - tb) / 8; c++) {
            int m = 0;
            _Pragma("GCC unroll 4")
            for (int j = 0; j < 4; j++) {
                const __m256 e = _mm256_loadu_ps(scores + (size_t)j * n_pos + tb + 8 * c);
                m |= _mm256_movemask_ps(_mm256_and_ps(e, _mm256_cmp_ps(e, e, _CMP_ORD_Q)));
            }
            resc[c] = m != 0;
        }
        _Pragma("GCC unroll 1")
        for (int d = 0; d < 8; d += 2) {
            __m256 a0 = acc[0][d], a1 = acc[0][d + 1], b0 = acc[1][d], b1 = acc[1][d + 1];
            __m256 c0 = acc[2][d], c1 = acc[2][d + 1], e0 = acc[3][d], e1 = acc[3][d + 1];
            const float *s0 = scores, *s1 = scores + n_pos, *s2 = scores + 2 * (size_t)n_pos,
                        *s3 = scores + 3 * (size_t)n_pos;
#define A2_SLOW(J, X0, X1)                                                       \
                {                                                                \
                    const float e = scores[(size_t)(J) * n_pos + t];             \
                    __m256 vsv;                                                  \
                    if (e < 0.0f || (e == 0.0f && signbit(e))) {                 \
                        const __m256 msv = _mm256_set1_ps(-e);                   \
                        X0 = kern_vf_round_h(_mm256_mul_ps(X0, msv));                   \
                        X1 = kern_vf_round_h(_mm256_mul_ps(X1, msv));                   \
                        vsv = _mm256_set1_ps(1.0f);                              \
                    } else {                                                     \
                        vsv = _mm256_set1_ps(e);                                 \
                    }                                                            \
                    X0 = kern_vf_round_h(_mm256_fmadd_ps(v0, vsv, X0));                 \
                    X1 = kern_vf_round_h(_mm256_fmadd_ps(v1, vsv, X1));                 \
                }
#define A2_FAST(SJ, X0, X1)                                                      \
                {                                                                \
                    const __m256 vsv = _mm256_broadcast_ss(SJ + t);              \
                    X0 = kern_vf_round_h(_mm256_fmadd_ps(v0, vsv, X0));                 \
                    X1 = kern_vf_round_h(_mm256_fmadd_ps(v1, vsv, X1));                 \
                }
            for (unsigned t8 = tb; t8 < te; t8 += 8) {
                const unsigned t8e = t8 + 8 < te ? t8 + 8 : te;
                if (t8e - t8 == 8 && !resc[(t8 - tb) / 8]) {
                    _Pragma("GCC unroll 2")
                    for (unsigned t = t8; t < t8e; t++) {
                        const uint8_t *vt = (const uint8_t *)(v + t * kv_stride + koff) + 16 * d;
                        const __m256 v0 = kern_vf_ld_half(vt), v1 = kern_vf_ld_half(vt + 16);
                        A2_FAST(s0, a0, a1)
                        A2_FAST(s1, b0, b1)
                        A2_FAST(s2, c0, c1)
                        A2_FAST(s3, e0, e1)
                    }
                } else {
                    for (unsigned t = t8; t < t8e; t++) {
                        const uint8_t *vt = (const uint8_t *)(v + t * kv_stride + koff) + 16 * d;
                        const __m256 v0 = kern_vf_ld_half(vt), v1 = kern_vf_ld_half(vt + 16);
                        A2_SLOW(0, a0, a1)
                        A2_SLOW(1, b0, b1)
                        A2_SLOW(2, c0, c1)
                        A2_SLOW(3, e0, e1)
                    }
                }
            }
#undef A2_SLOW
#undef A2_FAST
            acc[0][d] = a0, acc[0][d + 1] = a1, acc[1][d] = b0, acc[1][d + 1] = b1;
            acc[2][d] = c0, acc[2][d + 1] = c1, acc[3][d] = e0, acc[3][d + 1] = e1;
        }
    }
    for (int j = 0; j < 4; j++) {
        const __m256 ms = _mm256_set1_ps(sinks ? kern_attn_sink(sinks[h + j], M[j], &S[j])
                                               : 1.0f);
        const __m256 inv = _mm256_set1_ps(S[j] == 0.0f ? 0.0f : 1.0f / S[j]);
        _Pragma("GCC unroll 8")
        for (int i = 0; i < 8; i++)
            _mm256_storeu_ps(out + (size_t)(h + j) * 64 + 8 * i,
                             _mm256_mul_ps(_mm256_mul_ps(acc[j][i], ms), inv));
    }
}

AVX2 static void attn_f16(float *out, const float *q, const uint16_t *k,
                          const uint16_t *v, unsigned n_pos, unsigned h0,
                          unsigned h1, unsigned n_heads, unsigned n_kv_heads,
                          unsigned hd, size_t kv_stride, float scale,
                          float softcap, const float *sinks, float *scores,
                          uint16_t *scratch)
{
    if (hd % 8 || hd > 8 * ATTN2_MAXV || !scores) {
        kern_attn_f16_ref(out, q, k, v, n_pos, h0, h1, n_heads, n_kv_heads,
                          hd, kv_stride, scale, softcap, sinks, scores, scratch);
        return;
    }
    const unsigned kv_mul = n_kv_heads ? n_heads / n_kv_heads : 1;
    if (softcap > 0.0f)
        scale /= softcap;
    if (hd == 64 && kv_mul % 4 == 0)   /* whole groups of 4 on one KV head */
        for (; h0 % 4 == 0 && h0 + 4 <= h1; h0 += 4, scores += 4 * (size_t)n_pos)
            attn2_kvg64(out, q, k, v, n_pos, h0, (size_t)(h0 / kv_mul) * 64, kv_stride,
                        scale, softcap, sinks, scores);
    if (hd == 64)
        for (; h0 + ATTN2_HG64 <= h1; h0 += ATTN2_HG64, scores += ATTN2_HG64 * (size_t)n_pos)
            attn2_grp64(out, q, k, v, n_pos, h0, 8, kv_mul, kv_stride, scale, softcap, sinks,
                        scores);
    for (; h0 < h1; h0++, scores += n_pos) {
        if (hd == 128)
            attn2_hd128(out, q, k, v, n_pos, h0, 16, kv_mul, kv_stride, scale, softcap, sinks,
                        scores);
        else
            attn2_one(out, q, k, v, n_pos, h0, hd / 8, kv_mul, kv_stride, scale, softcap,
                      sinks, scores);
    }
}

/* ---- attention over an f32 cache ----------------------------------------------
 * kern_attn_decode's arithmetic (run.c's), to the same bits, with positions
 * in the lanes for the scores and dims in the lanes for the values:
 *   scores   8 positions at a time: their K rows, 8 dims at a time, are
 *            transposed in registers so that lane p holds position p's dim
 *            i, and each lane adds q[i] * k[i] in order of i as the scalar
 *            loop does, then divides by sqrt(head_dim) (or multiplies by
 *            scale).  The query heads on one KV head (up to 4) share the
 *            transposed rows.  Positions past the last 8 take the scalar
 *            loop; dims past the last 8 are gathered lane by lane.
 *   softmax  kern_softmax's: the maximum, expf and the sum in order, in
 *            scalars; the division by the sum in vectors.
 *   values   dims in the lanes: out[i] += a_t * v_t[i] in order of t.
 * run.c's loops were bound by the latency of one running sum (per head
 * and position for the scores, per dim for the values): on the shipped
 * model they took ~58% of a decode (perf, Zen 1). */
AVX2 static inline void tr8x8(__m256 *r)
{
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* Scores of G query heads (q: G rows of hd) on the K rows at k, for the
 * positions [0, n8) (a multiple of 8), into sc + j * n_pos. */
#define ATTN32_SCORES(G)                                                         \
AVX2 static void attn32_scores##G(const float *q, const float *k, unsigned hd,  \
                                  size_t kv_stride, unsigned n8, unsigned n_pos, \
                                  int divide, __m256 dv, float *sc)              \
{                                                                              \
    const unsigned c8 = hd & ~7u;                                              \
    for (unsigned t0 = 0; t0 < n8; t0 += 8) {                                  \
        const float *kt = k + (size_t)t0 * kv_stride;                          \
        __m256 acc[G];                                                         \
        _Pragma("GCC unroll 4")                                                \
        for (int j = 0; j < (G); j++)                                          \
            acc[j] = _mm256_setzero_ps();                                      \
        for (unsigned i0 = 0; i0 < c8; i0 += 8) {                              \
            __m256 r[8];                                                       \
            _Pragma("GCC unroll 8")                                            \
            for (int p = 0; p < 8; p++)                                        \
                r[p] = _mm256_loadu_ps(kt + p * kv_stride + i0);               \
            tr8x8(r);                                                          \
            _Pragma("GCC unroll 8")                                            \
            for (int i = 0; i < 8; i++)                                        \
                _Pragma("GCC unroll 4")                                        \
                for (int j = 0; j < (G); j++)                                  \
                    acc[j] = _mm256_add_ps(acc[j], _mm256_mul_ps(              \
                        _mm256_broadcast_ss(q + (size_t)j * hd + i0 + i), r[i]));\
        }                                                                      \
        for (unsigned i = c8; i < hd; i++) {                                   \
            const __m256 c = _mm256_setr_ps(kt[i], kt[kv_stride + i],          \
                kt[2 * kv_stride + i], kt[3 * kv_stride + i],                  \
                kt[4 * kv_stride + i], kt[5 * kv_stride + i],                  \
                kt[6 * kv_stride + i], kt[7 * kv_stride + i]);                 \
            _Pragma("GCC unroll 4")                                            \
            for (int j = 0; j < (G); j++)                                      \
                acc[j] = _mm256_add_ps(acc[j], _mm256_mul_ps(                  \
                    _mm256_broadcast_ss(q + (size_t)j * hd + i), c));          \
        }                                                                      \
        _Pragma("GCC unroll 4")                                                \
        for (int j = 0; j < (G); j++)                                          \
            _mm256_storeu_ps(sc + (size_t)j * n_pos + t0,                      \
                             divide ? _mm256_div_ps(acc[j], dv)                \
                                    : _mm256_mul_ps(acc[j], dv));              \
    }                                                                          \
}
ATTN32_SCORES(1)
ATTN32_SCORES(2)
ATTN32_SCORES(3)
ATTN32_SCORES(4)

/* out[0 .. 8 NV) = sum over t of a[t] * v_t, in order of t. */
#define ATTN32_VALUES(NV)                                                        \
AVX2 static void attn32_values##NV(float *out, const float *a, const float *v,  \
                                   size_t kv_stride, unsigned n_pos)             \
{                                                                              \
    __m256 acc[NV];                                                            \
    _Pragma("GCC unroll 8")                                                    \
    for (int i = 0; i < (NV); i++)                                             \
        acc[i] = _mm256_setzero_ps();                                          \
    for (unsigned t = 0; t < n_pos; t++) {                                     \
        const __m256 at = _mm256_broadcast_ss(a + t);                          \
        const float *vt = v + (size_t)t * kv_stride;                           \
        _Pragma("GCC unroll 8")                                                \
        for (int i = 0; i < (NV); i++)                                         \
            acc[i] = _mm256_add_ps(acc[i], _mm256_mul_ps(at, _mm256_loadu_ps(vt + 8 * i)));\
    }                                                                          \
    _Pragma("GCC unroll 8")                                                    \
    for (int i = 0; i < (NV); i++)                                             \
        _mm256_storeu_ps(out + 8 * i, acc[i]);                                 \
}
ATTN32_VALUES(8)
ATTN32_VALUES(4)
ATTN32_VALUES(2)
ATTN32_VALUES(1)

AVX2 void kern_attn_f32_avx2(float *out, const float *q, const float *k,
                        const float *v, unsigned n_pos, unsigned h0,
                        unsigned h1, unsigned n_heads, unsigned n_kv_heads,
                        unsigned hd, size_t kv_stride, float scale,
                        float softcap, const float *sinks, float *scores)
{
    const unsigned kv_mul = n_kv_heads ? n_heads / n_kv_heads : 1;
    const float sqrt_hd = sqrtf((float)hd);
    const int divide = scale == 1.0f / sqrt_hd;
    const __m256 dv = _mm256_set1_ps(divide ? sqrt_hd : scale);
    const unsigned n8 = n_pos & ~7u, c8 = hd & ~7u;
    for (unsigned h = h0; h < h1;) {
        const unsigned kh = kv_mul ? h / kv_mul : h;
        unsigned g = 1;   /* heads h .. h + g - 1 read KV head kh */
        while (g < 4 && h + g < h1 && (kv_mul ? (h + g) / kv_mul : h + g) == kh)
            g++;
        const float *kk = k + (size_t)kh * hd, *vv = v + (size_t)kh * hd;
        const float *qh = q + (size_t)h * hd;
        float *sc = scores + (size_t)(h - h0) * n_pos;
        switch (g) {
        case 4: attn32_scores4(qh, kk, hd, kv_stride, n8, n_pos, divide, dv, sc); break;
        case 3: attn32_scores3(qh, kk, hd, kv_stride, n8, n_pos, divide, dv, sc); break;
        case 2: attn32_scores2(qh, kk, hd, kv_stride, n8, n_pos, divide, dv, sc); break;
        default: attn32_scores1(qh, kk, hd, kv_stride, n8, n_pos, divide, dv, sc); break;
        }
        for (unsigned j = 0; j < g; j++) {
            const float *qj = qh + (size_t)j * hd;
            float *sj = sc + (size_t)j * n_pos, *o = out + (size_t)(h + j) * hd;
            for (unsigned t = n8; t < n_pos; t++)
                sj[t] = kern_attn_score_f32(qj, kk + t * kv_stride, hd, divide, sqrt_hd, scale);
            if (softcap > 0.0f)
                for (unsigned t = 0; t < n_pos; t++)
                    sj[t] = tanhf(sj[t] / softcap) * softcap;
            /* kern_softmax (with the head's sink), its division in vectors */
            if (n_pos) {
                const float sum = sinks ? kern_softmax_exps_sink(sj, n_pos, sinks[h + j])
                                        : kern_softmax_exps(sj, n_pos);
                const __m256 sv = _mm256_set1_ps(sum);
                unsigned t = 0;
                for (; t < n8; t += 8)
                    _mm256_storeu_ps(sj + t, _mm256_div_ps(_mm256_loadu_ps(sj + t), sv));
                for (; t < n_pos; t++)
                    sj[t] /= sum;
            }
            unsigned d = 0;
            for (; d + 64 <= c8; d += 64)
                attn32_values8(o + d, sj, vv + d, kv_stride, n_pos);
            if (d + 32 <= c8) {
                attn32_values4(o + d, sj, vv + d, kv_stride, n_pos);
                d += 32;
            }
            if (d + 16 <= c8) {
                attn32_values2(o + d, sj, vv + d, kv_stride, n_pos);
                d += 16;
            }
            if (d + 8 <= c8) {
                attn32_values1(o + d, sj, vv + d, kv_stride, n_pos);
                d += 8;
            }
            for (; d < hd; d++) {
                float acc = 0.0f;
                for (unsigned t = 0; t < n_pos; t++)
                    acc += sj[t] * vv[t * kv_stride + d];
                o[d] = acc;
            }
        }
        h += g;
    }
}

/* ---- SwiGLU and the activation conversions ----------------------------------
 * The bits of kern_swiglu_ggml and of the scalar conversions, as
 * kern_avx512.c's versions give them.  SwiGLU: ggml's AVX-512
 * ggml_v_expf in 8 lanes (kern_vf_exp_ggml, kern_simd.h).  The columns
 * past the last multiple of 16 go through libm expf, as the reference's. */
AVX2 static void swiglu_ggml(float *out, const float *gate, const float *up,
                             unsigned n)
{
    const unsigned nv = n & ~15u;
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    unsigned i = 0;
    for (; i < nv; i += 8) {
        const __m256 x = _mm256_loadu_ps(gate + i);
        const __m256 e = kern_vf_exp_ggml(_mm256_sub_ps(zero, x));
        const __m256 silu = _mm256_div_ps(x, _mm256_add_ps(one, e));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
    }
    if (i < n)
        kern_swiglu_ggml(out + i, gate + i, up + i, n - i);   /* < 16: libm */
}

/* quantize_row_q8_0 per block, as kern_avx512.c's act_q8 (see there):
 * amax from the absolute values' bit patterns, blocks with inf/NaN or a
 * tiny amax through the scalar code. */
AVX2 static void act_q8(const float *x, unsigned nb, int8_t *q, float *d,
                        int32_t *sum)
{
    const __m256i absm = _mm256_set1_epi32(0x7FFFFFFF);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (unsigned b = 0; b < nb; b++) {
        const float *xb = x + KERN_QBLOCK * b;
        __m256 v[4];
        __m256i a = _mm256_setzero_si256();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(xb + 8 * k);
            a = _mm256_max_epu32(a, _mm256_and_si256(_mm256_castps_si256(v[k]), absm));
        }
        __m128i a4 = _mm_max_epu32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
        a4 = _mm_max_epu32(a4, _mm_shuffle_epi32(a4, _MM_SHUFFLE(1, 0, 3, 2)));
        a4 = _mm_max_epu32(a4, _mm_shuffle_epi32(a4, _MM_SHUFFLE(2, 3, 0, 1)));
        const uint32_t amax_bits = (uint32_t)_mm_cvtsi128_si32(a4);
        if (amax_bits >= 0x7F800000u || (amax_bits && amax_bits < 0x04000000u)) {
            kern_act_q8_ref(xb, 1, q + KERN_QBLOCK * b, &d[b], &sum[b]);
            continue;
        }
        const float amax = kern_bits_f32(amax_bits);
        const float dd = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        const __m256 m = _mm256_set1_ps(id);
        __m256i iq[4];
        for (int k = 0; k < 4; k++)
            iq[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[k], m),
                                                       _MM_FROUND_TO_NEAREST_INT |
                                                       _MM_FROUND_NO_EXC));
        /* |q| <= 127: the saturating packs are exact; then dwords back in
         * column order */
        const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(iq[0], iq[1]),
                                             _mm256_packs_epi32(iq[2], iq[3]));
        _mm256_storeu_si256((__m256i *)(q + KERN_QBLOCK * b),
                            _mm256_permutevar8x32_epi32(p, order));
        __m256i s8 = _mm256_add_epi32(_mm256_add_epi32(iq[0], iq[1]),
                                      _mm256_add_epi32(iq[2], iq[3]));
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
        sum[b] = _mm_cvtsi128_si32(s4);
        d[b] = kern_h2f(kern_f2h(dd));
    }
}

KERN_MM_FROM_MV(mm_f32, mv_f32)
KERN_MM_FROM_MV(mm_f16, mv_f16)
KERN_MM_LANES(mm_q8_0, 0, mv_q8_0)     /* kern_mm_simd.h */
KERN_MM_LANES(mm_q4_0, 1, mv_q4_0)
KERN_MM_RP(mm_q4_0_rp, mv_q4_0_rp)

const kern_ops kern_ops_avx2 = {
    .isa = KERN_ISA_AVX2,
    .name = "avx2",
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
    .attn_f16 = attn_f16,
    .attn_prefill_f16 = simd_attn_prefill_f16,
    .attn_f32 = kern_attn_f32_avx2,
    .swiglu_ggml = swiglu_ggml,
    .act_q8 = act_q8,
    .act_f16 = simd_act_f16,
};

#endif /* HAVE_ISA_X86 */
