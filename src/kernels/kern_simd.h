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
 *                4 * KERN_VN bytes), and inline functions on them, each one
 *                intrinsic of the tier (or the short sequence a tier needs
 *                where the other has one instruction: AVX-512 has no
 *                vpsignb, so kern_vi_sign8 takes a mask);
 *   the loops written once at the bottom (the tile kernels' prefetch and
 *   Q8_0/Q4_0 group dots, the f32 vector kernels, the f16 conversion),
 *   compiled once per including file with its tier's attribute.
 * Where the tiers differ only in the tail of a loop (AVX-512 finishes with
 * a masked vector, AVX2 with scalars), the tail is a tier function and
 * the loop is shared.  Every function here compiles to the instructions
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

#include <stddef.h>
#include <stdint.h>

#include "kernels/kern_impl.h"

#if !defined(KERN_SIMD_W)
#error "define KERN_SIMD_W (256 or 512) before including kern_simd.h"
#endif

#define KERN_VROUND (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

/* ---- the tier's vocabulary ----------------------------------------------- */
#if KERN_SIMD_W == 256

#define KERN_VN 8
#define KERN_VATTR __attribute__((target("avx2,fma,f16c")))
typedef __m256  kern_vf;
typedef __m256i kern_vi;

KERN_VATTR static inline kern_vf kern_vf_zero(void) { return _mm256_setzero_ps(); }
KERN_VATTR static inline kern_vf kern_vf_set1(float a) { return _mm256_set1_ps(a); }
KERN_VATTR static inline kern_vf kern_vf_loadu(const float *p) { return _mm256_loadu_ps(p); }
KERN_VATTR static inline void kern_vf_storeu(float *p, kern_vf v) { _mm256_storeu_ps(p, v); }
KERN_VATTR static inline kern_vf kern_vf_add(kern_vf a, kern_vf b) { return _mm256_add_ps(a, b); }
KERN_VATTR static inline kern_vf kern_vf_mul(kern_vf a, kern_vf b) { return _mm256_mul_ps(a, b); }
/* a * b + c, one rounding */
KERN_VATTR static inline kern_vf kern_vf_fma(kern_vf a, kern_vf b, kern_vf c)
{
    return _mm256_fmadd_ps(a, b, c);
}
/* KERN_VN halves at p (any alignment), widened */
KERN_VATTR static inline kern_vf kern_vf_ld_half(const uint8_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
/* v rounded to KERN_VN halves (round to nearest even), stored at h */
KERN_VATTR static inline void kern_vf_st_half(uint16_t *h, kern_vf v)
{
    _mm_storeu_si128((__m128i *)h, _mm256_cvtps_ph(v, KERN_VROUND));
}

KERN_VATTR static inline kern_vi kern_vi_loadu(const uint8_t *p)
{
    return _mm256_loadu_si256((const __m256i *)p);
}
KERN_VATTR static inline kern_vi kern_vi_set1_8(char a) { return _mm256_set1_epi8(a); }
KERN_VATTR static inline kern_vi kern_vi_set1_16(short a) { return _mm256_set1_epi16(a); }
KERN_VATTR static inline kern_vi kern_vi_set1_32(int a) { return _mm256_set1_epi32(a); }
KERN_VATTR static inline kern_vi kern_vi_and(kern_vi a, kern_vi b) { return _mm256_and_si256(a, b); }
KERN_VATTR static inline kern_vi kern_vi_xor(kern_vi a, kern_vi b) { return _mm256_xor_si256(a, b); }
KERN_VATTR static inline kern_vi kern_vi_srli16(kern_vi a, int n) { return _mm256_srli_epi16(a, n); }
KERN_VATTR static inline kern_vi kern_vi_add32(kern_vi a, kern_vi b) { return _mm256_add_epi32(a, b); }
KERN_VATTR static inline kern_vi kern_vi_abs8(kern_vi a) { return _mm256_abs_epi8(a); }
/* unsigned bytes u x signed bytes s, adjacent pairs summed to int16
 * (saturating: the callers keep |u * s| pairs below 32768) */
KERN_VATTR static inline kern_vi kern_vi_maddubs(kern_vi u, kern_vi s)
{
    return _mm256_maddubs_epi16(u, s);
}
/* int16 x int16, adjacent pairs summed to int32 */
KERN_VATTR static inline kern_vi kern_vi_madd16(kern_vi a, kern_vi b)
{
    return _mm256_madd_epi16(a, b);
}
/* x with the sign of w per byte (x where w > 0, -x where w < 0; where w
 * is 0 the callers multiply by |w| = 0, so either value serves) */
KERN_VATTR static inline kern_vi kern_vi_sign8(kern_vi x, kern_vi w)
{
    return _mm256_sign_epi8(x, w);
}

#elif KERN_SIMD_W == 512

#define KERN_VN 16
#define KERN_VATTR __attribute__((target("avx512f,avx512bw,avx512vl")))
typedef __m512  kern_vf;
typedef __m512i kern_vi;

KERN_VATTR static inline kern_vf kern_vf_zero(void) { return _mm512_setzero_ps(); }
KERN_VATTR static inline kern_vf kern_vf_set1(float a) { return _mm512_set1_ps(a); }
KERN_VATTR static inline kern_vf kern_vf_loadu(const float *p) { return _mm512_loadu_ps(p); }
KERN_VATTR static inline void kern_vf_storeu(float *p, kern_vf v) { _mm512_storeu_ps(p, v); }
KERN_VATTR static inline kern_vf kern_vf_add(kern_vf a, kern_vf b) { return _mm512_add_ps(a, b); }
KERN_VATTR static inline kern_vf kern_vf_mul(kern_vf a, kern_vf b) { return _mm512_mul_ps(a, b); }
KERN_VATTR static inline kern_vf kern_vf_fma(kern_vf a, kern_vf b, kern_vf c)
{
    return _mm512_fmadd_ps(a, b, c);
}
KERN_VATTR static inline kern_vf kern_vf_ld_half(const uint8_t *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
KERN_VATTR static inline void kern_vf_st_half(uint16_t *h, kern_vf v)
{
    _mm256_storeu_si256((__m256i *)h, _mm512_cvtps_ph(v, KERN_VROUND));
}

KERN_VATTR static inline kern_vi kern_vi_loadu(const uint8_t *p) { return _mm512_loadu_si512(p); }
KERN_VATTR static inline kern_vi kern_vi_set1_8(char a) { return _mm512_set1_epi8(a); }
KERN_VATTR static inline kern_vi kern_vi_set1_16(short a) { return _mm512_set1_epi16(a); }
KERN_VATTR static inline kern_vi kern_vi_set1_32(int a) { return _mm512_set1_epi32(a); }
KERN_VATTR static inline kern_vi kern_vi_and(kern_vi a, kern_vi b) { return _mm512_and_si512(a, b); }
KERN_VATTR static inline kern_vi kern_vi_xor(kern_vi a, kern_vi b) { return _mm512_xor_si512(a, b); }
KERN_VATTR static inline kern_vi kern_vi_srli16(kern_vi a, int n) { return _mm512_srli_epi16(a, n); }
KERN_VATTR static inline kern_vi kern_vi_add32(kern_vi a, kern_vi b) { return _mm512_add_epi32(a, b); }
KERN_VATTR static inline kern_vi kern_vi_abs8(kern_vi a) { return _mm512_abs_epi8(a); }
KERN_VATTR static inline kern_vi kern_vi_maddubs(kern_vi u, kern_vi s)
{
    return _mm512_maddubs_epi16(u, s);
}
KERN_VATTR static inline kern_vi kern_vi_madd16(kern_vi a, kern_vi b)
{
    return _mm512_madd_epi16(a, b);
}
/* no vpsignb in AVX-512: negate x where w's sign bit is set */
KERN_VATTR static inline kern_vi kern_vi_sign8(kern_vi x, kern_vi w)
{
    return _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), _mm512_setzero_si512(), x);
}

#else
#error "KERN_SIMD_W must be 256 or 512"
#endif

/* 4 activation bytes broadcast to every 32-bit lane (one per row). */
KERN_VATTR static inline kern_vi kern_vi_bcast4(const int8_t *xq)
{
    return kern_vi_set1_32(kern_ld_i32(xq));
}

/* d_w * d_x for KERN_VN rows: their f16 scales at dw, times dx. */
KERN_VATTR static inline kern_vf kern_vf_block_d(const uint8_t *dw, float dx)
{
    return kern_vf_mul(kern_vf_ld_half(dw), kern_vf_set1(dx));
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

#endif /* CFLOW_KERN_SIMD_H */
