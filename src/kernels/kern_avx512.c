/*
 * kern_avx512.c — tile mat-vec for AVX-512 F/BW/VL, and the AVX512-VNNI
 * variant of the quantised kernels.
 *
 * Compiled for plain x86-64; only these functions carry target attributes
 * and kern_dispatch.c hands them out only on a CPU that has the features.
 *
 * One zmm holds a whole panel: 16 rows, one 32-bit lane each, so every
 * partial sum that kern_ref.c keeps per row is one zmm here, and each lane
 * performs exactly the reference's roundings in the same order (the tests
 * check bit equality):
 *   F32   mul then add per column (run.c's order; no FMA).
 *   F16   64 partial sums per row (column c % 64, FMA: the product of two
 *         halves is exact), folded as kern_ref.c's fold64, then the columns
 *         past the last multiple of 64 added in double (two zmm of 8).
 *   Q8_0/Q4_0  8 partial sums per row, one per 4-column group of a block.
 *         A 64-byte chunk of quants is 16 rows x 4 columns, exactly what
 *         vpdpbusd consumes:
 *           lane i of chunk = 4 weight bytes of row i (columns 4g..4g+3)
 *           x4 = _mm512_set1_epi32(4 activation bytes of those columns)
 *           vpdpbusd(0, chunk, x4): the group's dot for 16 rows
 *         Q4_0 low nibbles are block columns 4g..4g+3 (group g), high
 *         nibbles 16+4g..19+4g (group 4+g), both unsigned 0..15 (offset 8);
 *         Q8_0 bytes are unsigned 0..255 (offset 128): the offset times the
 *         group's activation sum is subtracted.  Without VNNI the same sums
 *         come from vpmaddubsw + vpmaddwd (Q8_0 through |w| x sign(x, w),
 *         since offset-binary bytes could saturate vpmaddubsw).  Then
 *           lane_g = fma(d_w[16] * d_x, (float)isum_g, lane_g)
 *         and at the end of the tile the 8 lanes fold as kern_ref.c's fold8.
 *         The repacked Q4_0 flavour sums the block and does one FMA.
 * The batched Q8_0 and Q4_0 kernels of the plain AVX-512 table are
 * kern_mm_simd.h's (written once with the AVX2 tier's); the repacked
 * Q4_0 one and the VNNI table's are below.
 * The module is built with -ffp-contract=off so the compiler keeps these
 * roundings.  Ragged tiles compute the whole padded panel and store the
 * real rows through a mask.
 */
#include "config.h"

#include <math.h>

#include "kernels/kern.h"
#include "kernels/kern_impl.h"

#if HAVE_ISA_X86

#include <immintrin.h>

#define KERN_SIMD_W 512
#include "kernels/kern_simd.h"
#include "kernels/kern_mm_simd.h"

#define AVX512 KERN_VATTR
#define VNNI   __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

#define NGROUP 4   /* panels processed side by side (F32/F16) */

/* Software prefetch PF_DIST bytes ahead of the weights being read, into
 * L2 (T1).  Tiles of a stream lie back to back in the mapping, so a fixed
 * distance runs on into the next tile (its header and scales included) and
 * across 4 KiB pages, where the hardware prefetchers stop.  Measured on
 * the DRAM-bound mat-vecs (256 MiB of tiles, one thread, CPU-time GB/s,
 * paired runs on 2 vCPUs of a Zen 4 EPYC, tools in the issue-4 report):
 * none -> 4 KiB T0 gained ~20%; 8 KiB T0 a few % more; T1 instead of T0
 * another ~20-50% (Q4_0 repacked ~13.5 -> ~16.5 GB/s, Q8_0 ~10.6 -> ~16,
 * the level of a plain read loop on that CPU), 8-16 KiB alike; NTA no
 * better.  T1 leaves the L1 miss buffers to the demand loads.  A prefetch
 * past the end of the mapping is harmless (it never faults).  pf_ahead is
 * kern_simd.h's. */

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
                pf_ahead(wp + k * pstride + c * 64, 1);
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

/* One panel.  Column c < np feeds lane sum c % 64 (see kern_ref.c).  The
 * 64 sums of a panel do not fit the register file next to anything else,
 * so they are made 16 at a time: pass q keeps lanes 16q .. 16q+15 in 16
 * zmm and walks the panel's 64-column blocks, reading columns 64j + 16q ..
 * 64j + 16q + 15 (512 contiguous bytes) of each; the panel's weights (cp
 * columns of 32 bytes, at most 8 KiB) are prefetched whole before the
 * first pass, so the four passes read them from L1.  Each lane still adds
 * its columns in order, so the sums are the reference's.  (Keeping all 64
 * sums in memory instead cost a load and a store per FMA; from L3 this
 * runs at ~36 GB/s single-threaded against 11-32 before, the convert and
 * the FMA per 16 halves being the limit now.)  Then the fold of fold64
 * and the tail in double. */
AVX512 static inline __m512 f16_panel(const uint8_t *wp, unsigned np,
                                      unsigned cols, const float *xf)
{
    __m512 lane[64];
    for (unsigned c = 0; c < cols; c += 2)
        _mm_prefetch((const char *)wp + 32 * c, _MM_HINT_T0);
    pf_ahead(wp, (cols * 32 + 63) / 64);    /* a panel PF_DIST on */
    for (unsigned q = 0; q < 4; q++) {
        __m512 acc[16];
#pragma GCC unroll 16
        for (unsigned i = 0; i < 16; i++)
            acc[i] = _mm512_setzero_ps();
        for (unsigned j = 0; j < np; j += 64) {
            const unsigned c0 = j + 16 * q;
#pragma GCC unroll 16
            for (unsigned i = 0; i < 16; i++)
                acc[i] = _mm512_fmadd_ps(kern_vf_ld_half(wp + 32 * (c0 + i)),
                                         _mm512_set1_ps(xf[c0 + i]), acc[i]);
        }
#pragma GCC unroll 16
        for (unsigned i = 0; i < 16; i++)
            lane[16 * q + i] = acc[i];
    }
    __m512 a16[16], t8[8], t4[4];
#pragma GCC unroll 16
    for (unsigned l = 0; l < 16; l++)
        a16[l] = _mm512_add_ps(_mm512_add_ps(lane[l], lane[32 + l]),
                               _mm512_add_ps(lane[16 + l], lane[48 + l]));
#pragma GCC unroll 8
    for (unsigned l = 0; l < 8; l++)
        t8[l] = _mm512_add_ps(a16[l + 8], a16[l]);
#pragma GCC unroll 4
    for (unsigned l = 0; l < 4; l++)
        t4[l] = _mm512_add_ps(t8[l + 4], t8[l]);
    __m512 v = _mm512_add_ps(_mm512_add_ps(t4[0], t4[2]),
                             _mm512_add_ps(t4[1], t4[3]));
    if (np < cols) {
        __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
        __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(
                         _mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
        for (unsigned c = np; c < cols; c++) {
            __m512 pr = _mm512_mul_ps(kern_vf_ld_half(wp + c * 32), _mm512_set1_ps(xf[c]));
            lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(pr)));
            hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm256_castpd_ps(
                     _mm512_extractf64x4_pd(_mm512_castps_pd(pr), 1))));
        }
        v = _mm512_castpd_ps(_mm512_insertf64x4(
                _mm512_castps_pd(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo))),
                _mm256_castps_pd(_mm512_cvtpd_ps(hi)), 1));
    }
    return v;
}

AVX512 static void mv_f16(const void *payload, unsigned rows, unsigned cols,
                          const kern_act *x, unsigned col0, float *y)
{
    kern_geom g = kern_geom_of(rows, cols);
    const size_t pstride = (size_t)g.cp * KERN_PANEL * 2;
    const uint8_t *w = payload;
    const unsigned np = cols & ~63u;
    float xf[KERN_TILE_COLS];           /* x.f16 widened once per tile */
    unsigned c = 0;

    for (; c + 16 <= cols; c += 16)
        _mm512_storeu_ps(xf + c, kern_vf_ld_half((const uint8_t *)(x->f16 + col0 + c)));
    for (; c < cols; c++)
        xf[c] = kern_h2f(x->f16[col0 + c]);

    for (unsigned p = 0; p < g.np; p++)
        add_panel(y, rows, p, f16_panel(w + p * pstride, np, cols, xf));
}

/* ---- Q8_0 / Q4_0 ---------------------------------------------------------- */

/* Panels processed side by side (8 accumulators each) by MV_LANES.  Q4_0
 * goes 2 at a time, so that a block's activations serve both.  Q8_0 goes
 * one at a time: two Q8_0 panels' 16 accumulators, 8 group dots and 8
 * activation broadcasts need more than AVX-512's 32 vector registers, and
 * GCC spilled accumulators to the stack inside the block loop; one panel
 * fits.  tinyllama-1.1b Q8_0 decode on 2 cores of a Zen 5 EPYC: 32.1-33.0
 * against 27.5-29.2 tok/s in three alternating rounds, olmoe-1b-7b Q8_0
 * 29.0-30.3 against 22.6-27.1 in two (docs/perf-log/2026-12-04.md); 4 at a
 * time was between.
 * The sums of each panel are the same operations either way: same bits. */
#define QGROUP 2
#define Q8_GROUP 1

AVX512 static inline __m512i ld64(const uint8_t *p)
{
    return _mm512_loadu_si512(p);
}

VNNI static inline void q4_lanes_vnni(const uint8_t *q, const int8_t *xq,
                                      const int32_t *init, __m512i *isum)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        __m512i v = ld64(q + 64 * g);
        isum[g] = _mm512_dpbusd_epi32(_mm512_set1_epi32(init[g]),
                                      _mm512_and_si512(v, m4), kern_vi_bcast4(xq + 4 * g));
        isum[g + 4] = _mm512_dpbusd_epi32(_mm512_set1_epi32(init[g + 4]),
                          _mm512_and_si512(_mm512_srli_epi16(v, 4), m4),
                          kern_vi_bcast4(xq + 16 + 4 * g));
    }
}

VNNI static inline void q8_lanes_vnni(const uint8_t *q, const int8_t *xq,
                                      const int32_t *init, __m512i *isum)
{
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++)
        isum[g] = _mm512_dpbusd_epi32(_mm512_set1_epi32(init[g]), ld64(q + 64 * g),
                                      kern_vi_bcast4(xq + 4 * g));
}

/* Whole-block dots (offset kept), for the repacked Q4_0 flavour. */
AVX512 static inline __m512i q4_isum(const uint8_t *q, const int8_t *xq)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i s = _mm512_setzero_si512();     /* int16, |s| <= 30480 */
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        __m512i v = ld64(q + 64 * g);
        s = _mm512_add_epi16(s, _mm512_maddubs_epi16(_mm512_and_si512(v, m4),
                                                     kern_vi_bcast4(xq + 4 * g)));
        s = _mm512_add_epi16(s, _mm512_maddubs_epi16(
                _mm512_and_si512(_mm512_srli_epi16(v, 4), m4),
                kern_vi_bcast4(xq + 16 + 4 * g)));
    }
    return _mm512_madd_epi16(s, _mm512_set1_epi16(1));
}

/* The block's activation broadcast: xl[g] = columns 4g..4g+3, xh[g] =
 * 16+4g..19+4g, each 4 bytes in every lane. */
VNNI static inline void q4_bcast(const int8_t *xq, __m512i *xl, __m512i *xh)
{
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        xl[g] = kern_vi_bcast4(xq + 4 * g);
        xh[g] = kern_vi_bcast4(xq + 16 + 4 * g);
    }
}

VNNI static inline __m512i q4_isum_vnni_bx(const uint8_t *q, const __m512i *xl,
                                           const __m512i *xh)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        __m512i v = ld64(q + 64 * g);
        s0 = _mm512_dpbusd_epi32(s0, _mm512_and_si512(v, m4), xl[g]);
        s1 = _mm512_dpbusd_epi32(s1, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4), xh[g]);
    }
    return _mm512_add_epi32(s0, s1);
}

VNNI static inline __m512i q4_isum_vnni(const uint8_t *q, const int8_t *xq)
{
    __m512i xl[4], xh[4];
    q4_bcast(xq, xl, xh);
    return q4_isum_vnni_bx(q, xl, xh);
}

/* The 8-lane kernels.  LANES fills the 8 group dots of a panel-block,
 * starting from init = -OFFSET x the group's activation sum (OFFSET 8,
 * 128, or 0 when LANES works on signed weights).  Panels go QGROUP at a
 * time so that a block's activations serve several panels. */
#define MV_LANES(NAME, ATTR, BLOCK_BYTES, LANES, OFFSET, QG)                   \
ATTR static void NAME(const void *payload, unsigned rows, unsigned cols,       \
                      const kern_act *x, unsigned col0, float *y)              \
{                                                                              \
    kern_geom g = kern_geom_of(rows, cols);                                    \
    const uint8_t *w = payload, *qbase = w + g.scale_bytes;                    \
    const unsigned xb0 = col0 / KERN_QBLOCK;                                   \
    int32_t init[KERN_TILE_COLS / 4];   /* -OFFSET * sum of each group */      \
    kern_group_init(x->q8 + col0, g.nb * 8, (OFFSET), init);                   \
    unsigned p = 0;                                                            \
    for (; p + QG <= g.np; p += QG) {                                          \
        __m512 acc[QG][8];                                                     \
        _Pragma("GCC unroll 2")                                                \
        for (unsigned k = 0; k < QG; k++)                                      \
            _Pragma("GCC unroll 8")                                            \
            for (int j = 0; j < 8; j++)                                        \
                acc[k][j] = _mm512_setzero_ps();                               \
        for (unsigned b = 0; b < g.nb; b++) {                                  \
            const int8_t *xq = x->q8 + col0 + KERN_QBLOCK * b;                 \
            _Pragma("GCC unroll 2")                                            \
            for (unsigned k = 0; k < QG; k++) {                                \
                const size_t pb = (size_t)(p + k) * g.nb + b;                  \
                __m512i isum[8];                                               \
                pf_ahead(qbase + pb * (BLOCK_BYTES), (BLOCK_BYTES) / 64);      \
                LANES(qbase + pb * (BLOCK_BYTES), xq, init + 8 * b, isum);     \
                const __m512 d = kern_vf_block_d(w + 2 * pb * KERN_PANEL,      \
                                         x->q8_d[xb0 + b]);                    \
                _Pragma("GCC unroll 8")                                        \
                for (int j = 0; j < 8; j++)                                    \
                    acc[k][j] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(isum[j]), \
                                                acc[k][j]);                    \
            }                                                                  \
        }                                                                      \
        _Pragma("GCC unroll 2")                                                \
        for (unsigned k = 0; k < QG; k++)                                      \
            add_panel(y, rows, p + k, kern_vf_fold8_rows(acc[k]));             \
    }                                                                          \
    for (; p < g.np; p++) {                                                    \
        __m512 acc[8];                                                         \
        _Pragma("GCC unroll 8")                                                \
        for (int j = 0; j < 8; j++)                                            \
            acc[j] = _mm512_setzero_ps();                                      \
        for (unsigned b = 0; b < g.nb; b++) {                                  \
            const size_t pb = (size_t)p * g.nb + b;                            \
            __m512i isum[8];                                                   \
            pf_ahead(qbase + pb * (BLOCK_BYTES), (BLOCK_BYTES) / 64);          \
            LANES(qbase + pb * (BLOCK_BYTES), x->q8 + col0 + KERN_QBLOCK * b,  \
                  init + 8 * b, isum);                                         \
            const __m512 d = kern_vf_block_d(w + 2 * pb * KERN_PANEL, x->q8_d[xb0 + b]); \
            _Pragma("GCC unroll 8")                                            \
            for (int j = 0; j < 8; j++)                                        \
                acc[j] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(isum[j]), acc[j]); \
        }                                                                      \
        add_panel(y, rows, p, kern_vf_fold8_rows(acc));                        \
    }                                                                          \
}

MV_LANES(mv_q8_0, AVX512, KERN_Q8_BLOCK_BYTES, q8_lanes, 0, Q8_GROUP)
MV_LANES(mv_q4_0, AVX512, KERN_Q4_BLOCK_BYTES, q4_lanes, 8, QGROUP)
MV_LANES(mv_q8_0_vnni, VNNI, KERN_Q8_BLOCK_BYTES, q8_lanes_vnni, 128, Q8_GROUP)
MV_LANES(mv_q4_0_vnni, VNNI, KERN_Q4_BLOCK_BYTES, q4_lanes_vnni, 8, QGROUP)

/* Repacked Q4_0: sum = fma((float)isum_block, d_w * d_x, sum).  PANEL
 * makes panel p of a tile and adds it to y. */
#define Q4_RP_PANEL(NAME, ATTR, ISUM)                                          \
ATTR static inline void NAME(const uint8_t *w, kern_geom g, unsigned rows,     \
                             const kern_act *x, unsigned col0, unsigned p,     \
                             float *y)                                         \
{                                                                              \
    const uint8_t *qbase = w + g.scale_bytes;                                  \
    const unsigned xb0 = col0 / KERN_QBLOCK;                                   \
    __m512 acc = _mm512_setzero_ps();                                          \
    for (unsigned b = 0; b < g.nb; b++) {                                      \
        const size_t pb = (size_t)p * g.nb + b;                                \
        pf_ahead(qbase + pb * KERN_Q4_BLOCK_BYTES, KERN_Q4_BLOCK_BYTES / 64);  \
        __m512i isum = ISUM(qbase + pb * KERN_Q4_BLOCK_BYTES,                  \
                            x->q8 + col0 + KERN_QBLOCK * b);                   \
        isum = _mm512_sub_epi32(isum, _mm512_set1_epi32(8 * x->q8_sum[xb0 + b]));\
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum),                        \
                              kern_vf_block_d(w + 2 * pb * KERN_PANEL, x->q8_d[xb0 + b]),\
                              acc);                                            \
    }                                                                          \
    add_panel(y, rows, p, acc);                                                \
}

Q4_RP_PANEL(q4_rp_panel, AVX512, q4_isum)
Q4_RP_PANEL(q4_rp_panel_vnni, VNNI, q4_isum_vnni)

AVX512 static void mv_q4_0_rp(const void *payload, unsigned rows, unsigned cols,
                              const kern_act *x, unsigned col0, float *y)
{
    kern_geom g = kern_geom_of(rows, cols);
    for (unsigned p = 0; p < g.np; p++)
        q4_rp_panel(payload, g, rows, x, col0, p, y);
}

/* VNNI: panels G at a time, blocks outside, so each block's activation
 * broadcasts (and offset) are made once for G panels and the G panels'
 * block runs are read side by side, G streams 2 KiB apart (llama.cpp's
 * AMX-buffer gemv reads 4 row groups so).  Tinyllama decode on 2 vCPUs of
 * a Sapphire Rapids Xeon: 1-2% faster than one panel at a time in each of 5
 * alternating pairs (1 and 2 threads).  8 panels, 8 streams 2 KiB apart,
 * keep more of the core's misses in flight: tinyllama-1.1b Q4_0 decode on
 * 2 vCPUs of a Zen 5 EPYC 53.4-54.8 against 45.1-47.3 tok/s in four
 * alternating rounds with 2 threads (6 of 7 rounds faster, 1.13-1.21x),
 * 39.1-39.8 against 30.8-31.1 with one; on Zen 4 8 and 4 were level in
 * the trial of docs/perf-log/2026-12-04.md; not yet timed on Sapphire Rapids.
 * The sums per panel are the same operations in the same order, so the
 * bits are. */
#define RP_G 8
VNNI static void mv_q4_0_rp_vnni(const void *payload, unsigned rows, unsigned cols,
                                 const kern_act *x, unsigned col0, float *y)
{
    kern_geom g = kern_geom_of(rows, cols);
    const uint8_t *w = payload, *qbase = w + g.scale_bytes;
    const unsigned xb0 = col0 / KERN_QBLOCK;
    unsigned p = 0;
    for (; p + RP_G <= g.np; p += RP_G) {
        __m512 acc[RP_G];
        _Pragma("GCC unroll 8")
        for (int k = 0; k < RP_G; k++)
            acc[k] = _mm512_setzero_ps();
        for (unsigned b = 0; b < g.nb; b++) {
            __m512i xl[4], xh[4];
            q4_bcast(x->q8 + col0 + KERN_QBLOCK * b, xl, xh);
            const __m512i off = _mm512_set1_epi32(8 * x->q8_sum[xb0 + b]);
            const float dx = x->q8_d[xb0 + b];
            _Pragma("GCC unroll 8")
            for (int k = 0; k < RP_G; k++) {
                const size_t pb = (size_t)(p + k) * g.nb + b;
                const uint8_t *q = qbase + pb * KERN_Q4_BLOCK_BYTES;
                pf_ahead(q, KERN_Q4_BLOCK_BYTES / 64);
                __m512i isum = _mm512_sub_epi32(q4_isum_vnni_bx(q, xl, xh), off);
                acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum),
                                         kern_vf_block_d(w + 2 * pb * KERN_PANEL, dx),
                                         acc[k]);
            }
        }
        _Pragma("GCC unroll 8")
        for (int k = 0; k < RP_G; k++)
            add_panel(y, rows, p + k, acc[k]);
    }
    for (; p < g.np; p++)   /* a ragged tile's last panels */
        q4_rp_panel_vnni(w, g, rows, x, col0, p, y);
}

/* Batched repacked Q4_0: a panel-block's nibbles are unpacked into
 * registers once and serve up to MM_TOKENS inputs; each input's block dot
 * is the same integer as q4_isum's (integer sums are exact in any order)
 * and its float steps are mv_q4_0_rp's, so every output is bit-identical
 * to the mat-vec.  The inputs go 8 at a time, the last 2-7 as one group
 * of that many (T a constant in each call: KERN_MM_BATCH_A) and a last
 * single one through the mat-vec: a decode step of 2-7 sequences (cflow
 * serve's slots, bench -B) unpacks each panel-block once, where running
 * the mat-vec once per input unpacked it once per sequence. */
#define MM_TOKENS 8

AVX512 static inline __m512i q4_dot_unpacked(const __m512i *lo,
                                             const __m512i *hi,
                                             const int8_t *xq)
{
    __m512i s = _mm512_setzero_si512();     /* int16, |s| <= 30480 */
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        s = _mm512_add_epi16(s, _mm512_maddubs_epi16(lo[g], kern_vi_bcast4(xq + 4 * g)));
        s = _mm512_add_epi16(s, _mm512_maddubs_epi16(hi[g],
                                                     kern_vi_bcast4(xq + 16 + 4 * g)));
    }
    return _mm512_madd_epi16(s, _mm512_set1_epi16(1));
}

VNNI static inline __m512i q4_dot_unpacked_vnni(const __m512i *lo,
                                                const __m512i *hi,
                                                const int8_t *xq)
{
    __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        s0 = _mm512_dpbusd_epi32(s0, lo[g], kern_vi_bcast4(xq + 4 * g));
        s1 = _mm512_dpbusd_epi32(s1, hi[g], kern_vi_bcast4(xq + 16 + 4 * g));
    }
    return _mm512_add_epi32(s0, s1);
}

/* Inputs x[0 .. T) (T <= MM_TOKENS, a constant where it is inlined)
 * through the tile, one panel at a time, one accumulator per input. */
#define MM_Q4_RP_GROUP(NAME, ATTR, DOT)                                        \
ATTR KERN_MM_ALWAYS static inline void                                         \
NAME(const uint8_t *w, kern_geom g, unsigned rows, const kern_act *x,          \
     const int T, unsigned col0, float *y, size_t ldy)                         \
{                                                                              \
    const uint8_t *qbase = w + g.scale_bytes;                                  \
    const unsigned xb0 = col0 / KERN_QBLOCK;                                   \
    const __m512i m4 = _mm512_set1_epi8(0x0F);                                 \
    for (unsigned p = 0; p < g.np; p++) {                                      \
        __m512 acc[MM_TOKENS];                                                 \
        _Pragma("GCC unroll 8")                                                \
        for (int j = 0; j < T; j++)                                            \
            acc[j] = _mm512_setzero_ps();                                      \
        for (unsigned b = 0; b < g.nb; b++) {                                  \
            const size_t pb = (size_t)p * g.nb + b;                            \
            const uint8_t *q = qbase + pb * KERN_Q4_BLOCK_BYTES;               \
            __m512i lo[4], hi[4];                                              \
            pf_ahead(q, KERN_Q4_BLOCK_BYTES / 64);   /* for a tile read once */    \
            _Pragma("GCC unroll 4")                                            \
            for (int k = 0; k < 4; k++) {                                      \
                __m512i v = ld64(q + 64 * k);                                  \
                lo[k] = _mm512_and_si512(v, m4);                               \
                hi[k] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);         \
            }                                                                  \
            const __m512 dw = kern_vf_ld_half(w + 2 * pb * KERN_PANEL);        \
            _Pragma("GCC unroll 8")                                            \
            for (int j = 0; j < T; j++) {                                      \
                __m512i isum = DOT(lo, hi, x[j].q8 + col0 + KERN_QBLOCK * b);  \
                isum = _mm512_sub_epi32(isum,                                  \
                           _mm512_set1_epi32(8 * x[j].q8_sum[xb0 + b]));       \
                acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum),             \
                             _mm512_mul_ps(dw, _mm512_set1_ps(x[j].q8_d[xb0 + b])), \
                             acc[j]);                                          \
            }                                                                  \
        }                                                                      \
        _Pragma("GCC unroll 8")                                                \
        for (int j = 0; j < T; j++)                                            \
            add_panel(y + j * ldy, rows, p, acc[j]);                           \
    }                                                                          \
}

MM_Q4_RP_GROUP(mm_q4_0_rp_group, AVX512, q4_dot_unpacked)
MM_Q4_RP_GROUP(mm_q4_0_rp_vnni_group, VNNI, q4_dot_unpacked_vnni)
KERN_MM_BATCH_A(AVX512, mm_q4_0_rp, MM_TOKENS, mv_q4_0_rp, mm_q4_0_rp_group)
KERN_MM_BATCH_A(VNNI, mm_q4_0_rp_vnni, MM_TOKENS, mv_q4_0_rp_vnni, mm_q4_0_rp_vnni_group)

/* Batched Q8_0 (VNNI).  The contract keeps 8 float lanes per row and
 * input (mv_q8_0_vnni's), so per panel-block and input the kernel owes 8
 * vpdpbusd, 8 int->float conversions and 8 FMAs whatever the blocking,
 * and those 24 ops on the two 512-bit ports are its floor.  What batching
 * saves is the rest: a panel-block's 8 quant chunks are loaded once and
 * serve Q8_MM_T inputs (3: their 24 accumulators, the chunk, the 3 scales
 * and 2 temporaries fit the 32 registers without spilling), and the offset
 * term of each group (-128 x its activation sum) is made with vector code
 * once per tile and input instead of a scalar loop per mat-vec.  Each
 * input's group dots, conversions and FMAs are mv_q8_0_vnni's, in its
 * order, so every output is bit-identical to the mat-vec; the inputs past
 * the last full group of Q8_MM_T run the same code, 2 or 1 at a time.
 * One 128 x 256 tile, 32 inputs, one thread of the Xeon family 6 model
 * 207: 5.3 against 8.1 ns per panel-block and input through the mat-vec. */
#define Q8_MM_T 3

/* init[8b + k] = -128 x (sum of block b's activation quants 4k .. 4k+3),
 * for the nb blocks of xq. */
VNNI static inline void q8_init(const int8_t *xq, unsigned nb, int32_t *init)
{
    const __m256i ones = _mm256_set1_epi8(1);
    for (unsigned b = 0; b < nb; b++) {
        const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones,
                              _mm256_loadu_si256((const __m256i *)(xq + KERN_QBLOCK * b)));
        _mm256_storeu_si256((__m256i *)(init + 8 * b),
                            _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(s, 7)));
    }
}

/* Inputs x[0 .. T) (T <= Q8_MM_T, a constant where it is inlined) through
 * the tile: panels one at a time, 8 accumulators per input. */
__attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512vnni")))
static inline void q8_mm_group(const uint8_t *w, kern_geom g, unsigned rows,
                               const kern_act *x, const int T, unsigned col0,
                               float *y, size_t ldy)
{
    const uint8_t *qbase = w + g.scale_bytes;
    const unsigned xb0 = col0 / KERN_QBLOCK;
    int32_t init[Q8_MM_T][KERN_TILE_COLS / 4];
    for (int j = 0; j < T; j++)
        q8_init(x[j].q8 + col0, g.nb, init[j]);
    for (unsigned p = 0; p < g.np; p++) {
        __m512 acc[Q8_MM_T][8];
        _Pragma("GCC unroll 4")
        for (int j = 0; j < T; j++)
            _Pragma("GCC unroll 8")
            for (int k = 0; k < 8; k++)
                acc[j][k] = _mm512_setzero_ps();
        for (unsigned b = 0; b < g.nb; b++) {
            const size_t pb = (size_t)p * g.nb + b;
            const uint8_t *q = qbase + pb * KERN_Q8_BLOCK_BYTES;
            __m512 d[Q8_MM_T];
            pf_ahead(q, KERN_Q8_BLOCK_BYTES / 64);   /* for a tile read once */
            _Pragma("GCC unroll 4")
            for (int j = 0; j < T; j++)
                d[j] = kern_vf_block_d(w + 2 * pb * KERN_PANEL, x[j].q8_d[xb0 + b]);
            _Pragma("GCC unroll 8")
            for (int k = 0; k < 8; k++) {
                const __m512i v = ld64(q + 64 * k);
                _Pragma("GCC unroll 4")
                for (int j = 0; j < T; j++) {
                    const __m512i s = _mm512_dpbusd_epi32(
                        _mm512_set1_epi32(init[j][8 * b + k]), v,
                        kern_vi_bcast4(x[j].q8 + col0 + KERN_QBLOCK * b + 4 * k));
                    acc[j][k] = _mm512_fmadd_ps(d[j], _mm512_cvtepi32_ps(s), acc[j][k]);
                }
            }
        }
        _Pragma("GCC unroll 4")
        for (int j = 0; j < T; j++)
            add_panel(y + j * ldy, rows, p, kern_vf_fold8_rows(acc[j]));
    }
}

VNNI static void mm_q8_0_vnni(const void *payload, unsigned rows, unsigned cols,
                              const kern_act *x, unsigned m, unsigned col0,
                              float *y, size_t ldy)
{
    const kern_geom g = kern_geom_of(rows, cols);
    unsigned j = 0;
    for (; j + Q8_MM_T <= m; j += Q8_MM_T)
        q8_mm_group(payload, g, rows, x + j, Q8_MM_T, col0, y + j * ldy, ldy);
    _Static_assert(Q8_MM_T == 3, "the last inputs are 2 or 1");
    switch (m - j) {   /* the last inputs, fewer than Q8_MM_T */
    case 2: q8_mm_group(payload, g, rows, x + j, 2, col0, y + j * ldy, ldy); break;
    case 1: q8_mm_group(payload, g, rows, x + j, 1, col0, y + j * ldy, ldy); break;
    }
}

KERN_MM_FROM_MV(mm_f32, mv_f32)
KERN_MM_FROM_MV(mm_f16, mv_f16)
KERN_MM_LANES(mm_q8_0, 0, mv_q8_0)     /* kern_mm_simd.h */
KERN_MM_LANES(mm_q4_0, 1, mv_q4_0)
KERN_MM_FROM_MV(mm_q4_0_vnni, mv_q4_0_vnni)

/* ---- attention over an f16 cache -------------------------------------------
 * kern_attn_f16_ref's arithmetic with head_dim in zmm lanes.  The K dot is
 * ggml_vec_dot_f16: 4 accumulators of 16 lanes over the first hd & ~63
 * columns (column c in lane c % 64), folded (a0 + a2) + (a1 + a3) and by
 * kern_fold16 (the fold the reference spells out), the rest in
 * double in column order.  The f16 accumulator of the values is kept
 * widened in registers and rounded through f16 after every step
 * (vcvtps2ph round-to-nearest-even, as kern_f2h).  expf and the scalar
 * FMA of the softmax sum are the reference's. */
#define ATTN_MAXV 36   /* head_dim up to 576 (DeepSeek-V2's latent + rotated key) */

/* Heads side by side.  A head's value accumulator is a chain through
 * every position (an FMA, then the round through f16: ~18 cycles of
 * latency a step), so one head at a time leaves the core waiting; HG heads
 * at once run HG chains in parallel.  Every head does the same operations
 * in the same order however many run beside it, so the bits do not depend
 * on HG.  Scores of head h + j go to scores + j * n_pos.  NV is the
 * 16-lane vectors per head: a constant for the grouped kernels (head_dim
 * 64 and 128), the argument nvr for the one-head kernel that serves every
 * other head_dim up to 16 * ATTN_MAXV; CAP bounds it. */
#define ATTN_GROUP(NAME, NV, HG, CAP)                                          \
__attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))                  \
static void NAME(float *out, const float *q, const uint16_t *k,                \
                 const uint16_t *v, unsigned n_pos, unsigned h, unsigned nvr,  \
                 unsigned kv_mul, size_t kv_stride, float scale,               \
                 float softcap, const float *sinks, float *scores)             \
{                                                                              \
    const unsigned nv = (NV), np = nv & ~3u, hd = 16 * nv;                     \
    size_t koff[HG];                                                           \
    float qr[HG][16 * (CAP)] __attribute__((aligned(64)));                     \
    (void)nvr;                                                                 \
    for (int j = 0; j < (HG); j++) {                                           \
        koff[j] = (size_t)(kv_mul ? (h + j) / kv_mul : h + j) * hd;            \
        for (unsigned i = 0; i < nv; i++)                                      \
            _mm512_store_ps(qr[j] + 16 * i, kern_vf_round_h(_mm512_loadu_ps(          \
                                q + (size_t)(h + j) * hd + 16 * i)));          \
    }                                                                          \
    /* GQA: the heads share one K row, converted once */                     \
    const int shared = koff[0] == koff[(HG) - 1];                              \
    for (unsigned t = 0; t < n_pos; t++) {                                     \
        __m512 kf[CAP];                                                        \
        kern_pf_kv_rows(k, t + KERN_KV_PF_DIST, n_pos, kv_stride, koff,         \
                        shared ? 1 : (HG), hd);                              \
        if (shared) {                                                          \
            const uint8_t *kt = (const uint8_t *)(k + t * kv_stride + koff[0]);\
            _Pragma("GCC unroll 16")                                           \
            for (unsigned i = 0; i < nv; i++)                                  \
                kf[i] = kern_vf_ld_half(kt + 32 * i);                                \
        }                                                                      \
        _Pragma("GCC unroll 8")                                                \
        for (int j = 0; j < (HG); j++) {                                       \
            const uint8_t *kt = (const uint8_t *)(k + t * kv_stride + koff[j]);\
            double sum = 0.0;                                                  \
            if (np) {                                                          \
                __m512 a[4] = { _mm512_setzero_ps(), _mm512_setzero_ps(),      \
                                _mm512_setzero_ps(), _mm512_setzero_ps() };    \
                _Pragma("GCC unroll 16")                                       \
                for (unsigned i = 0; i < np; i++)                              \
                    a[i % 4] = _mm512_fmadd_ps(                                \
                        shared ? kf[i] : kern_vf_ld_half(kt + 32 * i),               \
                        _mm512_load_ps(qr[j] + 16 * i), a[i % 4]);             \
                sum = kern_fold16(_mm512_add_ps(_mm512_add_ps(a[0], a[2]),          \
                                           _mm512_add_ps(a[1], a[3])));        \
            }                                                                  \
            for (unsigned i = np; i < nv; i++) {   /* past the last 64 */     \
                float pr[16];                                                  \
                _mm512_storeu_ps(pr, _mm512_mul_ps(                            \
                    shared ? kf[i] : kern_vf_ld_half(kt + 32 * i),                   \
                    _mm512_load_ps(qr[j] + 16 * i)));                          \
                for (unsigned l = 0; l < 16; l++)                              \
                    sum += (double)pr[l];                                      \
            }                                                                  \
            float sc = (float)sum * scale;                                     \
            scores[(size_t)j * n_pos + t] = softcap > 0.0f ? softcap * tanhf(sc) : sc;\
        }                                                                      \
    }                                                                          \
    __m512 acc[HG][CAP];                                                       \
    float S[HG], M[HG];                                                        \
    for (int j = 0; j < (HG); j++) {                                           \
        for (unsigned i = 0; i < nv; i++)                                      \
            acc[j][i] = _mm512_setzero_ps();                                   \
        /* the softmax's scalars first (kern_impl.h) */                       \
        S[j] = kern_attn_softmax_scalars(scores + (size_t)j * n_pos, n_pos, &M[j]);\
    }                                                                          \
    for (unsigned t = 0; t < n_pos; t++) {                                     \
        kern_pf_kv_rows(v, t + KERN_KV_PF_DIST, n_pos, kv_stride, koff,         \
                        shared ? 1 : (HG), hd);                              \
        _Pragma("GCC unroll 8")                                                \
        for (int j = 0; j < (HG); j++) {                                       \
            const uint8_t *vt = (const uint8_t *)(v + t * kv_stride + koff[j]);\
            const float e = scores[(size_t)j * n_pos + t];                     \
            float vs = e;                                                      \
            if (e < 0.0f || (e == 0.0f && signbit(e))) {                       \
                const __m512 msv = _mm512_set1_ps(-e);                         \
                vs = 1.0f;                                                     \
                _Pragma("GCC unroll 16")                                       \
                for (unsigned i = 0; i < nv; i++)                              \
                    acc[j][i] = kern_vf_round_h(_mm512_mul_ps(acc[j][i], msv));        \
            }                                                                  \
            const __m512 vsv = _mm512_set1_ps(vs);                             \
            _Pragma("GCC unroll 16")                                           \
            for (unsigned i = 0; i < nv; i++)                                  \
                acc[j][i] = kern_vf_round_h(_mm512_fmadd_ps(kern_vf_ld_half(vt + 32 * i),    \
                                                    vsv, acc[j][i]));          \
        }                                                                      \
    }                                                                          \
    for (int j = 0; j < (HG); j++) {                                           \
        const __m512 ms = _mm512_set1_ps(sinks ? kern_attn_sink(sinks[h + j], M[j], \
                                                                &S[j]) : 1.0f);\
        const __m512 inv = _mm512_set1_ps(S[j] == 0.0f ? 0.0f : 1.0f / S[j]);  \
        for (unsigned i = 0; i < nv; i++)                                      \
            _mm512_storeu_ps(out + (size_t)(h + j) * hd + 16 * i,              \
                             _mm512_mul_ps(_mm512_mul_ps(acc[j][i], ms), inv));\
    }                                                                          \
}

ATTN_GROUP(attn_grp64, 4, 4, 4)
ATTN_GROUP(attn_grp128, 8, 2, 8)
ATTN_GROUP(attn_one, nvr, 1, ATTN_MAXV)

__attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))
static void attn_f16(float *out, const float *q, const uint16_t *k,
                     const uint16_t *v, unsigned n_pos, unsigned h0,
                     unsigned h1, unsigned n_heads, unsigned n_kv_heads,
                     unsigned hd, size_t kv_stride, float scale,
                     float softcap, const float *sinks, float *scores,
                     uint16_t *scratch)
{
    if (hd % 16 || hd > 16 * ATTN_MAXV || !scores) {
        kern_attn_f16_ref(out, q, k, v, n_pos, h0, h1, n_heads, n_kv_heads,
                          hd, kv_stride, scale, softcap, sinks, scores, scratch);
        return;
    }
    const unsigned kv_mul = n_kv_heads ? n_heads / n_kv_heads : 1;
    if (softcap > 0.0f)
        scale /= softcap;
    if (hd == 64)
        for (; h0 + 4 <= h1; h0 += 4, scores += 4 * (size_t)n_pos)
            attn_grp64(out, q, k, v, n_pos, h0, 4, kv_mul, kv_stride, scale, softcap, sinks,
                       scores);
    else if (hd == 128)
        for (; h0 + 2 <= h1; h0 += 2, scores += 2 * (size_t)n_pos)
            attn_grp128(out, q, k, v, n_pos, h0, 8, kv_mul, kv_stride, scale, softcap, sinks,
                        scores);
    for (; h0 < h1; h0++)
        attn_one(out, q, k, v, n_pos, h0, hd / 16, kv_mul, kv_stride, scale, softcap, sinks,
                 scores);
}

/* ---- SwiGLU as ggml computes it ---------------------------------------------
 * ggml_vec_swiglu_f32 of its AVX-512 build, line for line: 16 lanes of
 * ggml_v_silu (x / (1 + ggml_v_expf(0 - x))) times up, the tail past the
 * last 16 through libm expf (kern_swiglu_ggml is the scalar spelling of
 * the same, which the tests hold these bits to). */
AVX512 static void swiglu_ggml(float *out, const float *gate, const float *up,
                               unsigned n)
{
    unsigned i = 0;
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        const __m512 x = _mm512_loadu_ps(gate + i);
        const __m512 e = kern_vf_exp_ggml(_mm512_sub_ps(zero, x));
        const __m512 silu = _mm512_div_ps(x, _mm512_add_ps(one, e));
        _mm512_storeu_ps(out + i, _mm512_mul_ps(silu, _mm512_loadu_ps(up + i)));
    }
    if (i < n)
        kern_swiglu_ggml(out + i, gate + i, up + i, n - i);   /* < 16: libm */
}

/* ---- activation conversions -------------------------------------------------
 * llama.cpp's x86 quantize_row_q8_0 per block of 32: amax = max |x| (taken
 * here as the largest absolute value's bit pattern, which orders like the
 * value for non-NaN floats, so any order gives ggml's max), d = amax/127
 * kept through f16, id = 127/amax, q = round-half-even(x * id), and the sum
 * of q.  A block holding an inf or NaN, or whose amax is so small that
 * 127/amax overflows, goes through the scalar code, which defines what
 * comes out. */
AVX512 static void act_q8(const float *x, unsigned nb, int8_t *q, float *d,
                          int32_t *sum)
{
    const __m512i absm = _mm512_set1_epi32(0x7FFFFFFF);
    for (unsigned b = 0; b < nb; b++) {
        const float *xb = x + KERN_QBLOCK * b;
        const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
        const __m512i a = _mm512_max_epu32(
            _mm512_and_si512(_mm512_castps_si512(v0), absm),
            _mm512_and_si512(_mm512_castps_si512(v1), absm));
        const uint32_t amax_bits = (uint32_t)_mm512_reduce_max_epu32(a);
        /* inf/NaN, or so tiny (below 2^-119) that 127/amax overflows */
        if (amax_bits >= 0x7F800000u || (amax_bits && amax_bits < 0x04000000u)) {
            kern_act_q8_ref(xb, 1, q + KERN_QBLOCK * b, &d[b], &sum[b]);
            continue;
        }
        const float amax = kern_bits_f32(amax_bits);
        const float dd = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        const __m512 m = _mm512_set1_ps(id);
        const __m512i i0 = _mm512_cvtps_epi32(_mm512_roundscale_ps(
            _mm512_mul_ps(v0, m), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        const __m512i i1 = _mm512_cvtps_epi32(_mm512_roundscale_ps(
            _mm512_mul_ps(v1, m), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        _mm_storeu_si128((__m128i *)(q + KERN_QBLOCK * b), _mm512_cvtepi32_epi8(i0));
        _mm_storeu_si128((__m128i *)(q + KERN_QBLOCK * b + 16), _mm512_cvtepi32_epi8(i1));
        sum[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
        d[b] = kern_h2f(kern_f2h(dd));
    }
}

const kern_ops kern_ops_avx512 = {
    .isa = KERN_ISA_AVX512,
    .name = "avx512",
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

const kern_ops kern_ops_avx512_vnni = {
    .isa = KERN_ISA_AVX512_VNNI,
    .name = "avx512-vnni",
    .tile_mv = {
        [KERN_F32] = mv_f32, [KERN_F16] = mv_f16,
        [KERN_Q8_0] = mv_q8_0_vnni, [KERN_Q4_0] = mv_q4_0_vnni,
    },
    .tile_mv_q4_0_rp = mv_q4_0_rp_vnni,
    .dot_f32 = dot_f32,
    .axpy_f32 = axpy_f32,
    .tile_mm = {
        [KERN_F32] = mm_f32, [KERN_F16] = mm_f16,
        [KERN_Q8_0] = mm_q8_0_vnni, [KERN_Q4_0] = mm_q4_0_vnni,
    },
    .tile_mm_q4_0_rp = mm_q4_0_rp_vnni,
    .attn_f16 = attn_f16,
    .attn_prefill_f16 = simd_attn_prefill_f16,
    .attn_f32 = kern_attn_f32_avx2,
    .swiglu_ggml = swiglu_ggml,
    .act_q8 = act_q8,
    .act_f16 = simd_act_f16,
};

#endif /* HAVE_ISA_X86 */
