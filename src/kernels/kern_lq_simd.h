/*
 * kern_lq_simd.h — the 32-column GGML block types' and BF16's kernels,
 * written once for a tier's vectors: included by kern_lq_avx2.c (ymm, 8
 * rows a vector, a panel as two halves) and kern_lq_avx512.c (zmm, a
 * panel a vector; three times: without VNNI, with it, and BF16 alone with
 * vdpbf16ps), after kern_simd.h, with
 *   LQ_ATTR  the functions' target attribute
 *   LQ_SFX   the suffix of their names (so that one file holds two tiers)
 *   LQ_VNNI  1 where vpdpbusd forms the integer dots
 *   LQ_WITH_QUANT, LQ_WITH_BF16  which kernels to make (1 or 0), and
 *   LQ_BF16_NATIVE  1 for vdpbf16ps (the attribute then has avx512bf16)
 *   LQ_RP_G, LQ_MM_T  panels side by side in the repacked mat-vec, inputs
 *            at once in its batched kernel; LQ_MM8_T inputs at once in
 *            the batched 8-lane kernel (0: m mat-vecs)
 * and gets LQ(lq_fill)(ops), which puts the kernels it made in a table.
 * Each lane is a row and does kern_lq_ref.c's operations in its order (the
 * tests hold every tier to it bit for bit):
 *
 *   integers  a 64-byte chunk of a panel-block is 16 rows x 4 columns,
 *             so group j of a block (columns 4j..4j+3, low nibbles for j <
 *             4, high nibbles of the same bytes for 4 + j) is one vector of
 *             weights against the 4 activation quants broadcast to every
 *             lane: vpdpbusd (VNNI) or vpmaddubsw + vpmaddwd, unsigned
 *             weight bytes against signed activations.  The weights are made
 *             unsigned by an offset whose multiple of the group's activation
 *             sum starts the sum (Q5_0 q = 0..31, offset 16; MXFP4 its value
 *             table + 12; IQ4_NL + 128 with VNNI).  Without VNNI IQ4_NL's
 *             signed values (up to 127 in magnitude, which vpmaddubsw could
 *             saturate on with an offset) go as |w| x sign(x, w), as ggml
 *             does.  Q5_x's fifth bits: the qh byte of a group broadcast to
 *             its 4 lanes' bytes (vpshufb), tested against one bit per byte,
 *             16 added where set.
 *   floats    per block d = dw * dx for 16 rows and the reference's FMAs:
 *             8 accumulators a row (Q5_0, Q4_1, Q5_1, and IQ4_NL/MXFP4 with
 *             a second 8 for the odd blocks of each pair), Q4_1/Q5_1's min
 *             term in one more, and the fold of kern_ref.c's fold8; the
 *             repacked flavour one accumulator.  MXFP4's E8M0 scale halved
 *             is built from its bits.
 *   BF16      32 accumulators a row (column pair k in k % 32), run as passes
 *             of KERN_VN accumulators over the panel (a pass reads the pairs
 *             of its accumulators: every weight is read once),
 *             folded per half as _mm512_reduce_add_ps, then 0 + c1 + c2 and
 *             the tail columns in double.  vdpbf16ps where the CPU has it
 *             (LQ_BF16_NATIVE), else its arithmetic: subnormal inputs to
 *             zero, an FMA with the odd column, a flush of a subnormal sum,
 *             the same with the even one.
 */

#define LQ_CAT2(a, b) a##b
#define LQ_CAT(a, b) LQ_CAT2(a, b)
#define LQ(name) LQ_CAT(name, LQ_SFX)
#define LQ_INL LQ_ATTR static inline __attribute__((always_inline))

/* vectors a panel: 1 (zmm) or 2 (ymm) */
#define LQ_H (KERN_PANEL / KERN_VN)

/* ---- the width's few extra operations ------------------------------------ */
#ifndef LQ_WIDTH_OPS
#define LQ_WIDTH_OPS
/* kern_simd.h's pf_ahead, spelt as a macro: GCC dropped the inlined
 * function's prefetches from these kernels (GCC 12, seen in the object) */
#define LQ_PF(p, lines)                                                         \
    do {                                                                        \
        for (unsigned i_ = 0; i_ < (lines); i_++)                               \
            _mm_prefetch((const char *)(p) + PF_DIST + 64 * i_, PF_HINT);       \
    } while (0)
#if KERN_VN == 16
#define lq_shuf(t, i)   _mm512_shuffle_epi8(t, i)
#define lq_add16(a, b)  _mm512_add_epi16(a, b)
#define lq_cvt(v)       _mm512_cvtepi32_ps(v)
#define lq_bcast16(p)   _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(p)))
/* u with 16 added to the bytes whose bit sel is set in b */
#define lq_hbit(u, b, sel)                                                     \
    _mm512_mask_add_epi8(u, _mm512_test_epi8_mask(b, sel), u, _mm512_set1_epi8(16))
/* KERN_VN E8M0 bytes at p as ggml_e8m0_to_fp32_half */
KERN_VATTR static inline __m512 lq_e8m0_half(const uint8_t *p)
{
    const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    const __m512i n = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    return _mm512_castsi512_ps(_mm512_mask_sllv_epi32(
        n, _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2)),
        _mm512_set1_epi32(0x00200000), e));
}
/* v, with its subnormal lanes made zeros of their sign */
#define lq_flush(v)                                                            \
    _mm512_castsi512_ps(_mm512_mask_and_epi32(                                 \
        _mm512_castps_si512(v),                                                \
        _mm512_testn_epi32_mask(_mm512_castps_si512(v), _mm512_set1_epi32(0x7F800000)), \
        _mm512_castps_si512(v), _mm512_set1_epi32((int)0x80000000u)))
#define lq_vi_and32(a, m) _mm512_and_si512(a, _mm512_set1_epi32((int)(m)))
#define lq_vi_sll32(a, n) _mm512_slli_epi32(a, n)
#define lq_as_f(v)      _mm512_castsi512_ps(v)
/* KERN_VN floats to doubles (low, high halves) and back */
typedef __m512d lq_vd;
#define lq_vd_lo(v)     _mm512_cvtps_pd(_mm512_castps512_ps256(v))
#define lq_vd_hi(v)     _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)))
#define lq_vd_add(a, b) _mm512_add_pd(a, b)
#define lq_vd_zero()    _mm512_setzero_pd()
#define lq_vd_join(lo, hi)                                                     \
    _mm512_castpd_ps(_mm512_insertf64x4(                                       \
        _mm512_castps_pd(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo))),         \
        _mm256_castps_pd(_mm512_cvtpd_ps(hi)), 1))
#else
#define lq_shuf(t, i)   _mm256_shuffle_epi8(t, i)
#define lq_add16(a, b)  _mm256_add_epi16(a, b)
#define lq_cvt(v)       _mm256_cvtepi32_ps(v)
#define lq_bcast16(p)   _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(p)))
KERN_VATTR static inline __m256i lq_hbit(__m256i u, __m256i b, __m256i sel)
{
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(b, sel), sel);
    return _mm256_or_si256(u, _mm256_and_si256(set, _mm256_set1_epi8(16)));
}
KERN_VATTR static inline __m256 lq_e8m0_half(const uint8_t *p)
{
    const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    const __m256i n = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i s = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(
        n, s, _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e)));
}
KERN_VATTR static inline __m256 lq_flush(__m256 v)
{
    const __m256i u = _mm256_castps_si256(v);
    const __m256i sub = _mm256_cmpeq_epi32(
        _mm256_and_si256(u, _mm256_set1_epi32(0x7F800000)), _mm256_setzero_si256());
    return _mm256_castsi256_ps(_mm256_andnot_si256(
        _mm256_and_si256(sub, _mm256_set1_epi32(0x7FFFFFFF)), u));
}
#define lq_vi_and32(a, m) _mm256_and_si256(a, _mm256_set1_epi32((int)(m)))
#define lq_vi_sll32(a, n) _mm256_slli_epi32(a, n)
#define lq_as_f(v)      _mm256_castsi256_ps(v)
typedef __m256d lq_vd;
#define lq_vd_lo(v)     _mm256_cvtps_pd(_mm256_castps256_ps128(v))
#define lq_vd_hi(v)     _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))
#define lq_vd_add(a, b) _mm256_add_pd(a, b)
#define lq_vd_zero()    _mm256_setzero_pd()
#define lq_vd_join(lo, hi)                                                     \
    _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(lo)), _mm256_cvtpd_ps(hi), 1)
#endif

/* The value tables as the dots take them: IQ4_NL + 128 (VNNI), signed
 * (without), MXFP4 + 12. */
static const uint8_t lq_lut_iq4nl_u[16] = {
    1, 24, 45, 63, 79, 93, 106, 118, 129, 141, 153, 166, 181, 197, 217, 241,
};
static const int8_t lq_lut_iq4nl_s[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};
static const uint8_t lq_lut_mxfp4_u[16] = {
    12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,
};
/* vpshufb indexes: byte k of each 32-bit lane to its 4 bytes */
static const uint8_t lq_qh_idx[4][16] = {
    { 0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12 },
    { 1, 1, 1, 1, 5, 5, 5, 5, 9, 9, 9, 9, 13, 13, 13, 13 },
    { 2, 2, 2, 2, 6, 6, 6, 6, 10, 10, 10, 10, 14, 14, 14, 14 },
    { 3, 3, 3, 3, 7, 7, 7, 7, 11, 11, 11, 11, 15, 15, 15, 15 },
};

/* y[0 .. n) += v (n <= KERN_VN lanes), the partial store in scalars */
KERN_VATTR static inline void lq_add_rows(float *y, unsigned n, kern_vf v)
{
    if (n >= KERN_VN) {
        kern_vf_storeu(y, kern_vf_add(kern_vf_loadu(y), v));
        return;
    }
    float t[KERN_VN];
    kern_vf_storeu(t, v);
    for (unsigned i = 0; i < n; i++)
        y[i] += t[i];
}

/* kern_ref.c's fold8, lane by lane */
KERN_VATTR static inline kern_vf lq_fold8(const kern_vf *l)
{
    return kern_vf_add(kern_vf_add(kern_vf_add(l[0], l[4]), kern_vf_add(l[2], l[6])),
                       kern_vf_add(kern_vf_add(l[1], l[5]), kern_vf_add(l[3], l[7])));
}

/* kern_fold16_ref of 16 accumulators, lane by lane */
KERN_VATTR static inline kern_vf lq_fold16(const kern_vf *a)
{
    kern_vf t8[8], t4[4];
    for (int l = 0; l < 8; l++)
        t8[l] = kern_vf_add(a[l + 8], a[l]);
    for (int l = 0; l < 4; l++)
        t4[l] = kern_vf_add(t8[l + 4], t8[l]);
    return kern_vf_add(kern_vf_add(t4[0], t4[2]), kern_vf_add(t4[1], t4[3]));
}

/* Rows [r0, r0 + KERN_VN) of a tile of `rows`: how many are real. */
static inline unsigned lq_nrows(unsigned rows, unsigned r0)
{
    return r0 >= rows ? 0 : rows - r0 < KERN_VN ? rows - r0 : KERN_VN;
}

/* The 4 activation quants of group j of a block, in every lane */
KERN_VATTR static inline kern_vi lq_xg(const int8_t *xq, int j)
{
    return kern_vi_bcast4(xq + (j < 4 ? 4 * j : 16 + 4 * (j - 4)));
}

/* Minus the offset times each group's activation sum, for nb blocks. */
static inline void lq_init(int32_t *init, const int8_t *xq, unsigned nb, int off)
{
    for (unsigned b = 0; b < nb; b++)
        for (int j = 0; j < 8; j++) {
            const int8_t *g = xq + 32 * b + (j < 4 ? 4 * j : 16 + 4 * (j - 4));
            init[8 * b + j] = -off * (g[0] + g[1] + g[2] + g[3]);
        }
}
#endif /* LQ_WIDTH_OPS */

#if LQ_WITH_QUANT
/* ---- one tier's weights and dots ---------------------------------------------- */

/* The weights' offset, and whether the dot takes signed weights */
#define LQ_OFF(t) ((t) == KERN_Q5_0 ? 16 : (t) == KERN_MXFP4 ? 12                \
                   : (t) == KERN_IQ4_NL && LQ_VNNI ? 128 : 0)
#define LQ_SGN(t) ((t) == KERN_IQ4_NL && !LQ_VNNI)

/* acc + the 4-byte dot of each lane: weights w (unsigned, or signed with
 * sgn) against activations x */
LQ_INL kern_vi LQ(lq_dot)(kern_vi acc, kern_vi w, kern_vi x, int sgn)
{
#if LQ_VNNI
    (void)sgn;
    return _mm512_dpbusd_epi32(acc, w, x);
#else
    const kern_vi ones = kern_vi_set1_16(1);
    if (sgn)
        return kern_vi_add32(acc, kern_vi_madd16(kern_vi_maddubs(kern_vi_abs8(w),
                                                                 kern_vi_sign8(x, w)), ones));
    return kern_vi_add32(acc, kern_vi_madd16(kern_vi_maddubs(w, x), ones));
#endif
}

/* The 8 weight vectors of KERN_VN rows of a block: q its chunks, qh its
 * fifth bits (Q5_x), both at the rows' first lane; w[j] group j. */
LQ_INL void LQ(lq_unpack)(enum kern_type t, const uint8_t *q, const uint8_t *qh,
                          kern_vi *w)
{
    const kern_vi m4 = kern_vi_set1_8(0x0F);
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        const kern_vi v = kern_vi_loadu(q + 64 * g);
        w[g] = kern_vi_and(v, m4);
        w[4 + g] = kern_vi_and(kern_vi_srli16(v, 4), m4);
    }
    if (t == KERN_Q5_0 || t == KERN_Q5_1) {
        const kern_vi hv = kern_vi_loadu(qh);
        const kern_vi sel[2] = { kern_vi_set1_32(0x08040201), kern_vi_set1_32((int)0x80402010u) };
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const kern_vi b = lq_shuf(hv, lq_bcast16(lq_qh_idx[k]));
            /* byte k holds bits 8k .. 8k+7: groups 2k, 2k+1 (of the low
             * nibbles for k < 2, of the high ones for k >= 2) */
            const int j = k < 2 ? 2 * k : 4 + 2 * (k - 2);
            w[j] = lq_hbit(w[j], b, sel[0]);
            w[j + 1] = lq_hbit(w[j + 1], b, sel[1]);
        }
    } else if (t == KERN_IQ4_NL || t == KERN_MXFP4) {
        const kern_vi lut = lq_bcast16(t == KERN_MXFP4 ? lq_lut_mxfp4_u
                                       : LQ_VNNI ? lq_lut_iq4nl_u
                                       : (const uint8_t *)lq_lut_iq4nl_s);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            w[j] = lq_shuf(lut, w[j]);
    }
}

/* The block's whole dot, from init.  Without VNNI, weights below 32 (all
 * but IQ4_NL's) let 4 groups' vpmaddubsw pairs add up in 16 bits (at most
 * 4 x 2 x 31 x 127 = 31496) before one vpmaddwd. */
LQ_INL kern_vi LQ(lq_dot_all)(enum kern_type t, const kern_vi *w, const int8_t *xq,
                              int32_t init)
{
    kern_vi a = kern_vi_set1_32(init), b = kern_vi_set1_32(0);
#if !LQ_VNNI
    if (!LQ_SGN(t)) {
        kern_vi s0 = kern_vi_maddubs(w[0], lq_xg(xq, 0));
        kern_vi s1 = kern_vi_maddubs(w[4], lq_xg(xq, 4));
#pragma GCC unroll 4
        for (int j = 1; j < 4; j++) {
            s0 = lq_add16(s0, kern_vi_maddubs(w[j], lq_xg(xq, j)));
            s1 = lq_add16(s1, kern_vi_maddubs(w[4 + j], lq_xg(xq, 4 + j)));
        }
        const kern_vi ones = kern_vi_set1_16(1);
        return kern_vi_add32(kern_vi_add32(a, kern_vi_madd16(s0, ones)),
                             kern_vi_madd16(s1, ones));
    }
#endif
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        a = LQ(lq_dot)(a, w[j], lq_xg(xq, j), LQ_SGN(t));
        b = LQ(lq_dot)(b, w[4 + j], lq_xg(xq, 4 + j), LQ_SGN(t));
    }
    return kern_vi_add32(a, b);
}

/* KERN_VN rows' weight scales (f16 d, or MXFP4's E8M0 halved) at p */
LQ_INL kern_vf LQ(lq_dw)(enum kern_type t, const uint8_t *p)
{
    if (t == KERN_MXFP4)
        return lq_e8m0_half(p);
    return kern_vf_ld_half(p);
}

/* ---- the 8-lane mat-vecs (ggml_vec_dot_*) --------------------------------------- */

/* Rows [16p + KERN_VN h, + KERN_VN) of a tile: their block pointers */
#define LQ_ROWS_AT(f, panel, nb, b, h, q, qh)                                   \
    const uint8_t *qh = lq_quants(f, panel, nb, b) + 4 * KERN_VN * (h);          \
    const uint8_t *q = qh + KERN_PANEL * (f)->qh

LQ_INL void LQ(lq_mv8)(enum kern_type t, const uint8_t *pl,
                       unsigned rows, unsigned cols, const kern_act *x,
                       unsigned col0, float *y)
{
    const lq_fmt fm = lq_fmt_of(t), *f = &fm;
    const unsigned nb = (cols + KERN_QBLOCK - 1) / KERN_QBLOCK;
    const unsigned np = (rows + KERN_PANEL - 1) / KERN_PANEL, xb0 = col0 / KERN_QBLOCK;
    const int pairs = t == KERN_IQ4_NL || t == KERN_MXFP4;
    const int hasm = t == KERN_Q4_1 || t == KERN_Q5_1;
    const unsigned nl = pairs ? nb & ~1u : nb;    /* blocks into the lanes */
    const unsigned bq = KERN_PANEL * (f->qh + 16);
    int32_t init[KERN_TILE_COLS / 4];
    lq_init(init, x->q8 + col0, nb, LQ_OFF(t));

    for (unsigned p = 0; p < np; p++) {
        const uint8_t *panel = lq_panel(f, pl, nb, p);
        for (unsigned h = 0; h < LQ_H; h++) {
            kern_vf acc[2][8], summs = kern_vf_zero();
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++)
                acc[0][j] = acc[1][j] = kern_vf_zero();
            for (unsigned b = 0; b < nl; b++) {
                LQ_ROWS_AT(f, panel, nb, b, h, q, qh);
                const int8_t *xq = x->q8 + col0 + KERN_QBLOCK * b;
                const float dx = x->q8_d[xb0 + b];
                kern_vi w[8];
                if (!h)
                    LQ_PF(qh, bq / 64);
                LQ(lq_unpack)(t, q, qh, w);
                const kern_vf dw = LQ(lq_dw)(t, lq_meta(f, panel, b, 0) + f->fw * KERN_VN * h);
                const kern_vf d = pairs ? kern_vf_mul(kern_vf_set1(dx), dw)
                                        : kern_vf_mul(dw, kern_vf_set1(dx));
                kern_vf *a = acc[pairs ? b & 1 : 0];
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++)
                    a[j] = kern_vf_fma(d, lq_cvt(LQ(lq_dot)(kern_vi_set1_32(init[8 * b + j]),
                                                             w[j], lq_xg(xq, j), LQ_SGN(t))),
                                       a[j]);
                if (hasm)
                    summs = kern_vf_fma(kern_vf_ld_half(lq_meta(f, panel, b, 1) + 2 * KERN_VN * h),
                                        kern_vf_set1(x->q8_s[xb0 + b]), summs);
            }
            kern_vf s;
            if (pairs) {
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++)
                    acc[0][j] = kern_vf_add(acc[0][j], acc[1][j]);
                s = lq_fold8(acc[0]);
                if (nl < nb) {          /* the last block of an odd count */
                    LQ_ROWS_AT(f, panel, nb, nl, h, q, qh);
                    const int8_t *xq = x->q8 + col0 + KERN_QBLOCK * nl;
                    kern_vi w[8];
                    LQ(lq_unpack)(t, q, qh, w);
                    const kern_vi isum = LQ(lq_dot_all)(
                        t, w, xq, -LQ_OFF(t) * x->q8_sum[xb0 + nl]);
                    const kern_vf dw = LQ(lq_dw)(t, lq_meta(f, panel, nl, 0) +
                                                    f->fw * KERN_VN * h);
                    s = kern_vf_fma(lq_cvt(isum),
                                    kern_vf_mul(kern_vf_set1(x->q8_d[xb0 + nl]), dw), s);
                }
            } else {
                s = lq_fold8(acc[0]);
                if (hasm)
                    s = kern_vf_add(s, summs);
            }
            const unsigned r0 = KERN_PANEL * p + KERN_VN * h;
            lq_add_rows(y + r0, lq_nrows(rows, r0), s);
        }
    }
}

#if LQ_MM8_T
/* Batched 8-lane sums of the types that do not pair their blocks (Q5_0,
 * Q4_1, Q5_1): a block's weights unpacked once for LQ_MM8_T inputs, each
 * input's 8 accumulators (and min term) the mat-vec's, in its order; the
 * inputs past the last group through the mat-vec. */
LQ_INL void LQ(lq_mm8)(enum kern_type t, const uint8_t *pl, unsigned rows,
                       unsigned cols, const kern_act *x, unsigned m,
                       unsigned col0, float *y, size_t ldy)
{
    const lq_fmt fm = lq_fmt_of(t), *f = &fm;
    const unsigned nb = (cols + KERN_QBLOCK - 1) / KERN_QBLOCK;
    const unsigned np = (rows + KERN_PANEL - 1) / KERN_PANEL, xb0 = col0 / KERN_QBLOCK;
    const int hasm = t == KERN_Q4_1 || t == KERN_Q5_1;
    int32_t init[LQ_MM8_T][KERN_TILE_COLS / 4];
    unsigned j0 = 0;
    for (; j0 + LQ_MM8_T <= m; j0 += LQ_MM8_T) {
        const kern_act *xj = x + j0;
        for (int j = 0; j < LQ_MM8_T; j++)
            lq_init(init[j], xj[j].q8 + col0, nb, LQ_OFF(t));
        for (unsigned p = 0; p < np; p++) {
            const uint8_t *panel = lq_panel(f, pl, nb, p);
            for (unsigned h = 0; h < LQ_H; h++) {
                kern_vf acc[LQ_MM8_T][8], summs[LQ_MM8_T];
#pragma GCC unroll 8
                for (int j = 0; j < LQ_MM8_T; j++) {
                    summs[j] = kern_vf_zero();
#pragma GCC unroll 8
                    for (int g = 0; g < 8; g++)
                        acc[j][g] = kern_vf_zero();
                }
                for (unsigned b = 0; b < nb; b++) {
                    LQ_ROWS_AT(f, panel, nb, b, h, q, qh);
                    kern_vi w[8];
                    LQ(lq_unpack)(t, q, qh, w);
                    const kern_vf dw = kern_vf_ld_half(lq_meta(f, panel, b, 0) +
                                                       2 * KERN_VN * h);
                    const kern_vf mw = hasm ? kern_vf_ld_half(lq_meta(f, panel, b, 1) +
                                                              2 * KERN_VN * h)
                                            : kern_vf_zero();
#pragma GCC unroll 8
                    for (int j = 0; j < LQ_MM8_T; j++) {
                        const int8_t *xq = xj[j].q8 + col0 + KERN_QBLOCK * b;
                        const kern_vf d = kern_vf_mul(dw, kern_vf_set1(xj[j].q8_d[xb0 + b]));
#pragma GCC unroll 8
                        for (int g = 0; g < 8; g++)
                            acc[j][g] = kern_vf_fma(
                                d, lq_cvt(LQ(lq_dot)(kern_vi_set1_32(init[j][8 * b + g]),
                                                     w[g], lq_xg(xq, g), LQ_SGN(t))),
                                acc[j][g]);
                        if (hasm)
                            summs[j] = kern_vf_fma(mw, kern_vf_set1(xj[j].q8_s[xb0 + b]),
                                                   summs[j]);
                    }
                }
                const unsigned r0 = KERN_PANEL * p + KERN_VN * h;
                for (int j = 0; j < LQ_MM8_T; j++) {
                    kern_vf r = lq_fold8(acc[j]);
                    if (hasm)
                        r = kern_vf_add(r, summs[j]);
                    lq_add_rows(y + (j0 + j) * ldy + r0, lq_nrows(rows, r0), r);
                }
            }
        }
    }
    for (; j0 < m; j0++)
        LQ(lq_mv8)(t, pl, rows, cols, x + j0, col0, y + j0 * ldy);
}
#endif

/* ---- the repacked flavour (one FMA a block) ------------------------------------ */

/* LQ_RP_G panels (x LQ_H vectors) side by side, so that a block's
 * activation broadcasts serve all of them; then the panels left. */
LQ_INL void LQ(lq_rp_panels)(enum kern_type t, const uint8_t *pl,
                             unsigned rows, unsigned nb, const kern_act *x,
                             unsigned col0, unsigned p0, unsigned g, float *y)
{
    const lq_fmt fm = lq_fmt_of(t), *f = &fm;
    const unsigned xb0 = col0 / KERN_QBLOCK, bq = KERN_PANEL * (f->qh + 16);
    kern_vf acc[LQ_RP_G * LQ_H];
#pragma GCC unroll 16
    for (unsigned k = 0; k < g * LQ_H; k++)
        acc[k] = kern_vf_zero();
    for (unsigned b = 0; b < nb; b++) {
        const int8_t *xq = x->q8 + col0 + KERN_QBLOCK * b;
        const int32_t init = -LQ_OFF(t) * x->q8_sum[xb0 + b];
        const kern_vf dx = kern_vf_set1(x->q8_d[xb0 + b]);
#pragma GCC unroll 16
        for (unsigned k = 0; k < g * LQ_H; k++) {
            const unsigned p = p0 + k / LQ_H, h = k % LQ_H;
            const uint8_t *panel = lq_panel(f, pl, nb, p);
            LQ_ROWS_AT(f, panel, nb, b, h, q, qh);
            kern_vi w[8];
            if (!h)
                LQ_PF(qh, bq / 64);
            LQ(lq_unpack)(t, q, qh, w);
            const kern_vf dw = LQ(lq_dw)(t, lq_meta(f, panel, b, 0) + f->fw * KERN_VN * h);
            acc[k] = kern_vf_fma(lq_cvt(LQ(lq_dot_all)(t, w, xq, init)),
                                 kern_vf_mul(dw, dx), acc[k]);
        }
    }
    for (unsigned k = 0; k < g * LQ_H; k++) {
        const unsigned r0 = KERN_PANEL * (p0 + k / LQ_H) + KERN_VN * (k % LQ_H);
        lq_add_rows(y + r0, lq_nrows(rows, r0), acc[k]);
    }
}

LQ_INL void LQ(lq_mv_rp)(enum kern_type t, const uint8_t *pl,
                         unsigned rows, unsigned cols, const kern_act *x,
                         unsigned col0, float *y)
{
    const unsigned nb = (cols + KERN_QBLOCK - 1) / KERN_QBLOCK;
    const unsigned np = (rows + KERN_PANEL - 1) / KERN_PANEL;
    unsigned p = 0;
    for (; p + LQ_RP_G <= np; p += LQ_RP_G)
        LQ(lq_rp_panels)(t, pl, rows, nb, x, col0, p, LQ_RP_G, y);
    for (; p < np; p++)
        LQ(lq_rp_panels)(t, pl, rows, nb, x, col0, p, 1, y);
}

/* Batched: a block's weights unpacked once for LQ_MM_T inputs, each input's
 * steps the mat-vec's; the inputs past the last group through it. */
LQ_INL void LQ(lq_mm_rp)(enum kern_type t, const uint8_t *pl,
                         unsigned rows, unsigned cols, const kern_act *x,
                         unsigned m, unsigned col0, float *y, size_t ldy)
{
    const lq_fmt fm = lq_fmt_of(t), *f = &fm;
    const unsigned nb = (cols + KERN_QBLOCK - 1) / KERN_QBLOCK;
    const unsigned np = (rows + KERN_PANEL - 1) / KERN_PANEL, xb0 = col0 / KERN_QBLOCK;
    unsigned j0 = 0;
    for (; j0 + LQ_MM_T <= m; j0 += LQ_MM_T) {
        const kern_act *xj = x + j0;
        for (unsigned p = 0; p < np; p++) {
            const uint8_t *panel = lq_panel(f, pl, nb, p);
            for (unsigned h = 0; h < LQ_H; h++) {
                kern_vf acc[LQ_MM_T];
#pragma GCC unroll 8
                for (int j = 0; j < LQ_MM_T; j++)
                    acc[j] = kern_vf_zero();
                for (unsigned b = 0; b < nb; b++) {
                    LQ_ROWS_AT(f, panel, nb, b, h, q, qh);
                    kern_vi w[8];
                    LQ(lq_unpack)(t, q, qh, w);
                    const kern_vf dw = LQ(lq_dw)(t, lq_meta(f, panel, b, 0) +
                                                    f->fw * KERN_VN * h);
#pragma GCC unroll 8
                    for (int j = 0; j < LQ_MM_T; j++) {
                        const kern_vi isum = LQ(lq_dot_all)(
                            t, w, xj[j].q8 + col0 + KERN_QBLOCK * b,
                            -LQ_OFF(t) * xj[j].q8_sum[xb0 + b]);
                        acc[j] = kern_vf_fma(lq_cvt(isum),
                                             kern_vf_mul(dw, kern_vf_set1(xj[j].q8_d[xb0 + b])),
                                             acc[j]);
                    }
                }
                const unsigned r0 = KERN_PANEL * p + KERN_VN * h;
                for (int j = 0; j < LQ_MM_T; j++)
                    lq_add_rows(y + (j0 + j) * ldy + r0, lq_nrows(rows, r0), acc[j]);
            }
        }
    }
    for (; j0 < m; j0++)
        LQ(lq_mv_rp)(t, pl, rows, cols, x + j0, col0, y + j0 * ldy);
}

#endif /* LQ_WITH_QUANT */

#if LQ_WITH_BF16
/* ---- BF16 ---------------------------------------------------------------------- */

/* One column pair of KERN_VN rows (their 32-bit lanes at w) into acc, with
 * the activation pair xp (as 32 bits) or its halves xe, xo (floats,
 * subnormals already zeros). */
#if LQ_BF16_NATIVE
#define LQ_BF16_STEP(acc, w, xp, xe, xo)                                        \
    (acc = _mm512_dpbf16_ps(acc, (__m512bh)kern_vi_loadu(w), (__m512bh)kern_vi_set1_32((int)(xp))))
#else
#define LQ_BF16_STEP(acc, w, xp, xe, xo)                                        \
    do {                                                                        \
        const kern_vi wv_ = kern_vi_loadu(w);                                   \
        acc = lq_flush(kern_vf_fma(lq_flush(lq_as_f(lq_vi_and32(wv_, 0xFFFF0000u))), \
                                   kern_vf_set1(xo), acc));                     \
        acc = lq_flush(kern_vf_fma(lq_flush(lq_as_f(lq_vi_sll32(wv_, 16))),     \
                                   kern_vf_set1(xe), acc));                     \
    } while (0)
#endif

LQ_ATTR static void LQ(lq_mv_bf16)(const void *payload, unsigned rows, unsigned cols,
                                   const kern_act *x, unsigned col0, float *y)
{
    const uint8_t *pl = payload;
    const unsigned np = (rows + KERN_PANEL - 1) / KERN_PANEL;
    const unsigned n64 = cols & ~63u, npair = n64 / 2;
    const uint16_t *xb = x->bf16 + col0;
    uint32_t xp[KERN_TILE_COLS / 2];
    float xe[KERN_TILE_COLS / 2], xo[KERN_TILE_COLS / 2];
    for (unsigned k = 0; k < npair; k++) {
        xp[k] = (uint32_t)xb[2 * k] | (uint32_t)xb[2 * k + 1] << 16;
        uint32_t e = (uint32_t)xb[2 * k] << 16, o = (uint32_t)xb[2 * k + 1] << 16;
        xe[k] = kern_bits_f32(e & 0x7F800000u ? e : e & 0x80000000u);
        xo[k] = kern_bits_f32(o & 0x7F800000u ? o : o & 0x80000000u);
    }
    (void)xp;
    (void)xe;
    (void)xo;
    for (unsigned p = 0; p < np; p++) {
        const uint8_t *panel = pl + (size_t)p * KERN_PANEL * cols * 2;
        LQ_PF(panel, (KERN_PANEL * cols * 2 + 63) / 64);
        for (unsigned h = 0; h < LQ_H; h++) {
            kern_vf lane[32];
            /* passes of KERN_VN accumulators: pairs 32c + KERN_VN s + i */
            for (unsigned s = 0; s < 32 / KERN_VN; s++) {
                kern_vf acc[KERN_VN];
#pragma GCC unroll 16
                for (int i = 0; i < KERN_VN; i++)
                    acc[i] = kern_vf_zero();
                for (unsigned c = 0; c < npair; c += 32) {
                    const unsigned k0 = c + KERN_VN * s;
#pragma GCC unroll 16
                    for (int i = 0; i < KERN_VN; i++)
                        LQ_BF16_STEP(acc[i], panel + 64 * (size_t)(k0 + i) + 4 * KERN_VN * h,
                                     xp[k0 + i], xe[k0 + i], xo[k0 + i]);
                }
#pragma GCC unroll 16
                for (int i = 0; i < KERN_VN; i++)
                    lane[KERN_VN * s + i] = acc[i];
            }
            const kern_vf c1 = lq_fold16(lane), c2 = lq_fold16(lane + 16);
            lq_vd lo = lq_vd_add(lq_vd_add(lq_vd_zero(), lq_vd_lo(c1)), lq_vd_lo(c2));
            lq_vd hi = lq_vd_add(lq_vd_add(lq_vd_zero(), lq_vd_hi(c1)), lq_vd_hi(c2));
            for (unsigned c = n64; c < cols; c++) {
                /* the weights of column c: a pair's half, or a lone column */
                kern_vf wv;
                if ((c | 1u) < cols) {
                    const kern_vi v = kern_vi_loadu(panel + 64 * (size_t)(c / 2) + 4 * KERN_VN * h);
                    wv = lq_as_f(c & 1 ? lq_vi_and32(v, 0xFFFF0000u) : lq_vi_sll32(v, 16));
                } else {
                    float t[KERN_VN];
                    for (int i = 0; i < KERN_VN; i++)
                        t[i] = kern_lq_bf2f(kern_ld_u16(panel + 64 * (size_t)(c / 2) +
                                                        2 * (KERN_VN * h + i)));
                    wv = kern_vf_loadu(t);
                }
                const kern_vf pr = kern_vf_mul(wv, kern_vf_set1(kern_lq_bf2f(xb[c])));
                lo = lq_vd_add(lo, lq_vd_lo(pr));
                hi = lq_vd_add(hi, lq_vd_hi(pr));
            }
            const unsigned r0 = KERN_PANEL * p + KERN_VN * h;
            lq_add_rows(y + r0, lq_nrows(rows, r0), lq_vd_join(lo, hi));
        }
    }
}

#undef LQ_BF16_STEP
#endif /* LQ_WITH_BF16 */

/* ---- the table entries ---------------------------------------------------------- */

#if LQ_WITH_QUANT
#define LQ_ENTRY(NAME, T, KERNEL)                                              \
    LQ_ATTR static void LQ(NAME)(const void *pl, unsigned rows, unsigned cols, \
                                 const kern_act *x, unsigned col0, float *y)   \
    {                                                                          \
        LQ(KERNEL)(KERN_##T, pl, rows, cols, x, col0, y);                      \
    }
LQ_ENTRY(mv_q4_1, Q4_1, lq_mv8)
LQ_ENTRY(mv_q5_0, Q5_0, lq_mv8)
LQ_ENTRY(mv_q5_1, Q5_1, lq_mv8)
LQ_ENTRY(mv_iq4_nl, IQ4_NL, lq_mv8)
LQ_ENTRY(mv_mxfp4, MXFP4, lq_mv8)
LQ_ENTRY(mv_iq4_nl_rp, IQ4_NL, lq_mv_rp)
LQ_ENTRY(mv_mxfp4_rp, MXFP4, lq_mv_rp)
#undef LQ_ENTRY

#define LQ_MM_ENTRY(NAME, T, KERNEL)                                           \
    LQ_ATTR static void LQ(NAME)(const void *pl, unsigned rows, unsigned cols, \
                                 const kern_act *x, unsigned m, unsigned col0, \
                                 float *y, size_t ldy)                         \
    {                                                                          \
        LQ(KERNEL)(KERN_##T, pl, rows, cols, x, m, col0, y, ldy);              \
    }
LQ_MM_ENTRY(mm_iq4_nl_rp, IQ4_NL, lq_mm_rp)
LQ_MM_ENTRY(mm_mxfp4_rp, MXFP4, lq_mm_rp)
#if LQ_MM8_T
LQ_MM_ENTRY(mm_q4_1, Q4_1, lq_mm8)
LQ_MM_ENTRY(mm_q5_0, Q5_0, lq_mm8)
LQ_MM_ENTRY(mm_q5_1, Q5_1, lq_mm8)
#else
KERN_MM_FROM_MV(LQ(mm_q4_1), LQ(mv_q4_1))
KERN_MM_FROM_MV(LQ(mm_q5_0), LQ(mv_q5_0))
KERN_MM_FROM_MV(LQ(mm_q5_1), LQ(mv_q5_1))
#endif
KERN_MM_FROM_MV(LQ(mm_iq4_nl), LQ(mv_iq4_nl))
KERN_MM_FROM_MV(LQ(mm_mxfp4), LQ(mv_mxfp4))
#undef LQ_MM_ENTRY
#endif
#if LQ_WITH_BF16
KERN_MM_FROM_MV(LQ(mm_bf16), LQ(lq_mv_bf16))
#endif

static void LQ(lq_fill)(kern_ops *ops)
{
#if LQ_WITH_QUANT
    ops->tile_mv[KERN_Q4_1] = LQ(mv_q4_1);
    ops->tile_mv[KERN_Q5_0] = LQ(mv_q5_0);
    ops->tile_mv[KERN_Q5_1] = LQ(mv_q5_1);
    ops->tile_mv[KERN_IQ4_NL] = LQ(mv_iq4_nl);
    ops->tile_mv[KERN_MXFP4] = LQ(mv_mxfp4);
    ops->tile_mv_rp[KERN_IQ4_NL] = LQ(mv_iq4_nl_rp);
    ops->tile_mv_rp[KERN_MXFP4] = LQ(mv_mxfp4_rp);
    ops->tile_mm[KERN_Q4_1] = LQ(mm_q4_1);
    ops->tile_mm[KERN_Q5_0] = LQ(mm_q5_0);
    ops->tile_mm[KERN_Q5_1] = LQ(mm_q5_1);
    ops->tile_mm[KERN_IQ4_NL] = LQ(mm_iq4_nl);
    ops->tile_mm[KERN_MXFP4] = LQ(mm_mxfp4);
    ops->tile_mm_rp[KERN_IQ4_NL] = LQ(mm_iq4_nl_rp);
    ops->tile_mm_rp[KERN_MXFP4] = LQ(mm_mxfp4_rp);
#endif
#if LQ_WITH_BF16
    ops->tile_mv[KERN_BF16] = LQ(lq_mv_bf16);
    ops->tile_mm[KERN_BF16] = LQ(mm_bf16);
#endif
    (void)ops;
}

#undef LQ_ATTR
#undef LQ_SFX
#undef LQ_VNNI
#undef LQ_WITH_QUANT
#undef LQ_WITH_BF16
#undef LQ_BF16_NATIVE
#undef LQ_RP_G
#undef LQ_MM_T
#undef LQ_MM8_T
