/*
 * kern_kq_simd.h — the K-quant tile kernels written once for the AVX2 and
 * the AVX-512 tiers (a template: kern_kq_avx2.c includes it once with
 * KQ_W 256, kern_kq_avx512.c twice with KQ_W 512, without and with VNNI).
 *
 * The includer defines
 *   KQ_W     256 or 512: the vector width
 *   KQ_VNNI  1 where vpdpbusd / vpdpwssd may be used (AVX512_VNNI)
 *   KQ_ATTR  the target attribute of the tier
 *   KQ_SUF   a suffix for every name defined here (two copies in one file)
 * and gets static kernels KQ_NAME(mm_q4k) ... and KQ_NAME(kq_fill), which
 * puts them into a kern_ops table.
 *
 * One vector holds KQ_VR = KQ_W / 32 rows (16: a whole panel; 8: half of
 * one), one 32-bit lane a row, so each integer sum the reference keeps per
 * row (kern_kq.c) is one vector, and each float step is one vector
 * operation with the reference's rounding (fma(a, b, 0) is written as
 * such, not as a product, so a zero keeps the reference's sign).  Units of
 * a panel's fields (kern_kq.h) put the KQ_VR rows of half h at byte
 * h * KQ_VR * w of the 16w-byte unit.  Integer sums are exact in any order,
 * so vpdpbusd (VNNI), or vpmaddubsw products summed in int16 and widened
 * by vpmaddwd, give the reference's integers: the comments bound every
 * int16 sum below 32768.
 *
 * Mat-vec and mat-mat are one kernel: a panel's weights are unpacked once
 * for a group of up to KQ_TG inputs (their own accumulators), so prefill
 * reads and unpacks each weight once per group; tile_mv is the group of
 * one.  Each input's arithmetic is the same whatever its group, so the
 * bits are tile_mv's.
 */
#if !defined(KQ_W) || !defined(KQ_ATTR) || !defined(KQ_SUF) || !defined(KQ_VNNI)
#error "define KQ_W, KQ_VNNI, KQ_ATTR and KQ_SUF before including kern_kq_simd.h"
#endif

/* Loops of a compile-time count are unrolled, so that their vectors stay
 * in registers; the sanitizer build keeps them rolled: the same
 * operations on the same data, and kern_kq_avx512.c compiles under
 * ASan/UBSan in 12 s of CPU instead of 201. */
#ifndef KQ_UNROLL
#define KQ_PRAGMA(x) _Pragma(#x)
#if defined(__SANITIZE_ADDRESS__)
#define KQ_UNROLL(n)
#else
#define KQ_UNROLL(n) KQ_PRAGMA(GCC unroll n)
#endif
#endif

#define KQ_CAT2(a, b) a##_##b
#define KQ_CAT(a, b) KQ_CAT2(a, b)
#define KQ_NAME(n) KQ_CAT(n, KQ_SUF)

/* ---- the tier's vocabulary ------------------------------------------------- */
#ifndef KQ_VOCAB
#define KQ_VOCAB KQ_W
#if KQ_W == 512
#define KQ_VR 16
#define KQ_TG 8                         /* inputs a group (32 zmm) */
typedef __m512i kq_vi;
typedef __m512 kq_vf;
#define kq_ld(p)          _mm512_loadu_si512((const void *)(p))
#define kq_zero()         _mm512_setzero_si512()
#define kq_and(a, b)      _mm512_and_si512(a, b)
#define kq_or(a, b)       _mm512_or_si512(a, b)
#define kq_srli16(a, n)   _mm512_srli_epi16(a, n)
#define kq_slli16(a, n)   _mm512_slli_epi16(a, n)
#define kq_slli32(a, n)   _mm512_slli_epi32(a, n)
#define kq_set8(a)        _mm512_set1_epi8((char)(a))
#define kq_set32(a)       _mm512_set1_epi32(a)
#define kq_add16(a, b)    _mm512_add_epi16(a, b)
#define kq_add32(a, b)    _mm512_add_epi32(a, b)
#define kq_sub32(a, b)    _mm512_sub_epi32(a, b)
#define kq_mullo(a, b)    _mm512_mullo_epi32(a, b)
#define kq_maddubs(u, s)  _mm512_maddubs_epi16(u, s)
#define kq_madd(a, b)     _mm512_madd_epi16(a, b)
/* the KQ_VR bytes of a w = 1 unit, in an xmm */
#define kq_ldb(p)         _mm_loadu_si128((const __m128i *)(p))
#define kq_u8x32(b)       _mm512_cvtepu8_epi32(b)
#define kq_s8x32(b)       _mm512_cvtepi8_epi32(b)
#define kq_vf_ldh(p)      _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define kq_vf_cvt(a)      _mm512_cvtepi32_ps(a)
#define kq_vf_set1(a)     _mm512_set1_ps(a)
#define kq_vf_zero()      _mm512_setzero_ps()
#define kq_vf_add(a, b)   _mm512_add_ps(a, b)
#define kq_vf_sub(a, b)   _mm512_sub_ps(a, b)
#define kq_vf_mul(a, b)   _mm512_mul_ps(a, b)
#define kq_vf_fma(a, b, c) _mm512_fmadd_ps(a, b, c)
#define kq_vf_ld(p)       _mm512_loadu_ps(p)
#define kq_vf_st(p, v)    _mm512_storeu_ps(p, v)
#define kq_andnot(a, b)   _mm512_andnot_si512(a, b)
#define kq_srli32(a, n)   _mm512_srli_epi32(a, n)
#define kq_sub16(a, b)    _mm512_sub_epi16(a, b)
#define kq_abs8(a)        _mm512_abs_epi8(a)
/* x negated where w's sign bit is set (no vpsignb in AVX-512; where w is 0
 * the product with |w| is 0 either way) */
#define kq_sign8(x, w)    _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), _mm512_setzero_si512(), x)
#define kq_shuffle8(t, i) _mm512_shuffle_epi8(t, i)
#define kq_bcast16(p)     _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(p)))
#define kq_u16x32(p)      _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p)))
#define KQ_MAXU(a, b)     _mm512_max_epu32(a, b)
#define KQ_MINS(a, b)     _mm512_min_epi32(a, b)
#define KQ_CASTI(f)       _mm512_castps_si512(f)
#else
#define KQ_VR 8
#define KQ_TG 4                         /* inputs a group (16 ymm) */
typedef __m256i kq_vi;
typedef __m256 kq_vf;
#define kq_ld(p)          _mm256_loadu_si256((const __m256i *)(p))
#define kq_zero()         _mm256_setzero_si256()
#define kq_and(a, b)      _mm256_and_si256(a, b)
#define kq_or(a, b)       _mm256_or_si256(a, b)
#define kq_srli16(a, n)   _mm256_srli_epi16(a, n)
#define kq_slli16(a, n)   _mm256_slli_epi16(a, n)
#define kq_slli32(a, n)   _mm256_slli_epi32(a, n)
#define kq_set8(a)        _mm256_set1_epi8((char)(a))
#define kq_set32(a)       _mm256_set1_epi32(a)
#define kq_add16(a, b)    _mm256_add_epi16(a, b)
#define kq_add32(a, b)    _mm256_add_epi32(a, b)
#define kq_sub32(a, b)    _mm256_sub_epi32(a, b)
#define kq_mullo(a, b)    _mm256_mullo_epi32(a, b)
#define kq_maddubs(u, s)  _mm256_maddubs_epi16(u, s)
#define kq_madd(a, b)     _mm256_madd_epi16(a, b)
#define kq_ldb(p)         _mm_loadl_epi64((const __m128i *)(p))
#define kq_u8x32(b)       _mm256_cvtepu8_epi32(b)
#define kq_s8x32(b)       _mm256_cvtepi8_epi32(b)
#define kq_vf_ldh(p)      _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define kq_vf_cvt(a)      _mm256_cvtepi32_ps(a)
#define kq_vf_set1(a)     _mm256_set1_ps(a)
#define kq_vf_zero()      _mm256_setzero_ps()
#define kq_vf_add(a, b)   _mm256_add_ps(a, b)
#define kq_vf_sub(a, b)   _mm256_sub_ps(a, b)
#define kq_vf_mul(a, b)   _mm256_mul_ps(a, b)
#define kq_vf_fma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define kq_vf_ld(p)       _mm256_loadu_ps(p)
#define kq_vf_st(p, v)    _mm256_storeu_ps(p, v)
#define kq_andnot(a, b)   _mm256_andnot_si256(a, b)
#define kq_srli32(a, n)   _mm256_srli_epi32(a, n)
#define kq_sub16(a, b)    _mm256_sub_epi16(a, b)
#define kq_abs8(a)        _mm256_abs_epi8(a)
#define kq_sign8(x, w)    _mm256_sign_epi8(x, w)
#define kq_shuffle8(t, i) _mm256_shuffle_epi8(t, i)
#define kq_bcast16(p)     _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(p)))
#define kq_u16x32(p)      _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p)))
#define KQ_MAXU(a, b)     _mm256_max_epu32(a, b)
#define KQ_MINS(a, b)     _mm256_min_epi32(a, b)
#define KQ_CASTI(f)       _mm256_castps_si256(f)
#endif

/* 4 activation bytes in every lane */
#define kq_bcast4(p)      kq_set32(kern_ld_i32(p))

/* The unit u of the field at block offset off (w bytes a row) for the
 * rows of half h of panel P */
#define KQ_U(P, off, w, u, h)                                                  \
    ((P) + KERN_PANEL * (off) + (size_t)(u) * KERN_PANEL * (w) + (size_t)(h) * KQ_VR * (w))
#elif KQ_VOCAB != KQ_W
#error "kern_kq_simd.h: one width a file"
#endif

#undef kq_dpbusd
#undef kq_dpwssd
#if KQ_VNNI
/* acc + the dot of 4 unsigned bytes u with 4 signed bytes s, per lane */
#define kq_dpbusd(acc, u, s) _mm512_dpbusd_epi32(acc, u, s)
/* the same with s the 4 bytes at p in every lane: vpdpbusd's embedded
 * broadcast, one fused load-and-op where GCC 12 emits a vpbroadcastd and
 * a vpdpbusd (the mat-mat kernels issue one per 64 products) */
#define kq_dpbusd_b4(acc, u, p)                                                \
    __asm__("vpdpbusd %[x]%{1to16%}, %[w], %[a]"                               \
            : [a] "+v"(acc) : [w] "v"(u), [x] "m"(*(const int32_t *)(const void *)(p)))
/* acc + a0 b0 + a1 b1 of int16 pairs, per lane */
#define kq_dpwssd(acc, a, b) _mm512_dpwssd_epi32(acc, a, b)
#else
#define kq_dpwssd(acc, a, b) kq_add32(acc, kq_madd(a, b))
#endif

/* ggml's hsum_float_8 of 8 lane vectors, each row in its own lane */
KQ_ATTR static inline kq_vf KQ_NAME(kq_fold8)(const kq_vf *l)
{
    return kq_vf_add(kq_vf_add(kq_vf_add(l[0], l[4]), kq_vf_add(l[2], l[6])),
                     kq_vf_add(kq_vf_add(l[1], l[5]), kq_vf_add(l[3], l[7])));
}

/* The repacked gemv's row sums: fma(I, d_w d_x, 0) - fma(M, dmin_w d_x, 0) */
KQ_ATTR static inline kq_vf KQ_NAME(kq_rp_sum)(kq_vi I, kq_vi M, kq_vf d,
                                               kq_vf dmin, float dx)
{
    const kq_vf zero = kq_vf_zero(), x = kq_vf_set1(dx);
    return kq_vf_sub(kq_vf_fma(kq_vf_cvt(I), kq_vf_mul(d, x), zero),
                     kq_vf_fma(kq_vf_cvt(M), kq_vf_mul(dmin, x), zero));
}

/* Software prefetch of the weights KQ_PF bytes ahead into L2 (kern_simd.h
 * has the measurements behind the distance and the hint). */
#ifndef KQ_PF
#define KQ_PF 16384
#endif

KQ_ATTR static inline void KQ_NAME(kq_pf)(const uint8_t *p, unsigned bytes)
{
    for (unsigned i = 0; i < bytes; i += 64)
        _mm_prefetch((const char *)p + KQ_PF + i, _MM_HINT_T1);
}

/* ==== an input's numbers, taken once a tile ================================== */
#ifndef KQ_IN_DEFINED
#define KQ_IN_DEFINED
typedef struct kq_in {
    const int8_t *q;    /* the 256 quants of the tile's activation block */
    float d;            /* their scale */
    int32_t b16[8];     /* bsum_2l | bsum_2l+1 << 16, int16 pairs */
    int32_t b32[4];     /* sums of 32 as pairs: bsum_4k + bsum_4k+1, and
                         * bsum_4k+2 + bsum_4k+3 (|.| <= 4064) */
} kq_in;

static inline uint32_t kq_pair(int lo, int hi)
{
    return (uint32_t)(uint16_t)lo | (uint32_t)(uint16_t)hi << 16;
}

static inline void kq_in_set(kq_in *in, const kern_act *x, unsigned xb)
{
    const int16_t *bs = x->q8k_bsums + (size_t)xb * 16;
    in->q = x->q8k + (size_t)xb * KERN_QK_K;
    in->d = x->q8k_d[xb];
    for (unsigned l = 0; l < 8; l++)
        in->b16[l] = (int32_t)kq_pair(bs[2 * l], bs[2 * l + 1]);
    for (unsigned k = 0; k < 4; k++)
        in->b32[k] = (int32_t)kq_pair(bs[4 * k] + bs[4 * k + 1], bs[4 * k + 2] + bs[4 * k + 3]);
}
#endif

/* ==== Q4_K ================================================================
 * Panel: d (0), dmin (32), scales (64: 12 units of 16 bytes), qs (256: 32
 * units of 64 bytes; unit 8jj + g holds qs bytes 32jj + 4g .. + 3 of each
 * row: low nibbles columns 64jj + 4g .. + 3 of sub-block 2jj, high
 * nibbles columns 64jj + 32 + 4g .. of sub-block 2jj + 1).
 * Repacked (q4krp, tile_mv_rp): I = sum_j sc_j D_j, D_j the sub-block's
 * dot (<= 32 * 15 * 127 = 60960); M = sum_j m_j (bsum_2j + bsum_2j+1), as
 * int16 pairs through vpmaddwd (m < 64, |bsum pair| <= 4064).  The
 * vec_dot flavour (q4k, tile_mv) is a lane type, below Q6_K. */

/* the 8 scales (sc, and sc in both int16 halves: sc16) and the 4 min
 * pairs (m_2k | m_2k+1 << 16) of half h of a panel */
typedef struct {
    kq_vi sc[8], sc16[8], mp[4];
} KQ_NAME(q4k_sc);

KQ_ATTR static inline void KQ_NAME(q4k_scales)(const uint8_t *P, unsigned h,
                                               KQ_NAME(q4k_sc) *s)
{
    __m128i S[12], sc8[8], m8[8];
    const __m128i m63 = _mm_set1_epi8(63), m15 = _mm_set1_epi8(15);
    const __m128i m48 = _mm_set1_epi8(0x30);
    KQ_UNROLL(12)
    for (int k = 0; k < 12; k++)
        S[k] = kq_ldb(KQ_U(P, 4, 1, k, h));
    KQ_UNROLL(4)
    for (int j = 0; j < 4; j++) {
        sc8[j] = _mm_and_si128(S[j], m63);
        m8[j] = _mm_and_si128(S[j + 4], m63);
        /* bits 6-7 of a byte to bits 4-5: 16-bit shift, then the mask
         * drops what came over from the neighbour byte */
        sc8[j + 4] = _mm_or_si128(_mm_and_si128(S[j + 8], m15),
                                  _mm_and_si128(_mm_srli_epi16(S[j], 2), m48));
        m8[j + 4] = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(S[j + 8], 4), m15),
                                 _mm_and_si128(_mm_srli_epi16(S[j + 4], 2), m48));
    }
    KQ_UNROLL(8)
    for (int j = 0; j < 8; j++) {
        s->sc[j] = kq_u8x32(sc8[j]);
        s->sc16[j] = kq_or(s->sc[j], kq_slli32(s->sc[j], 16));
    }
    KQ_UNROLL(4)
    for (int k = 0; k < 4; k++)
        s->mp[k] = kq_or(kq_u8x32(m8[2 * k]), kq_slli32(kq_u8x32(m8[2 * k + 1]), 16));
}

/* NT inputs against half h of panel P: y + t * ldy gets input t's sums of
 * rows r0 .. (below `rows`) */
KQ_ATTR static inline __attribute__((always_inline)) void
KQ_NAME(q4krp_group)(const uint8_t *P, unsigned h, const KQ_NAME(q4k_sc) *s,
                     const kq_in *in, unsigned NT, float *y, size_t ldy,
                     unsigned rows, unsigned r0)
{
    const kq_vi m4 = kq_set8(0x0F);
    kq_vi I[KQ_TG];
    KQ_UNROLL(8)
    for (unsigned t = 0; t < NT; t++)
        I[t] = kq_zero();
    for (unsigned jj = 0; jj < 4; jj++) {
        kq_vi Dl[KQ_TG], Dh[KQ_TG];
        KQ_UNROLL(8)
        for (unsigned t = 0; t < NT; t++)
            Dl[t] = Dh[t] = kq_zero();
        KQ_UNROLL(8)
        for (unsigned g = 0; g < 8; g++) {
            const kq_vi v = kq_ld(KQ_U(P, 16, 4, 8 * jj + g, h));
            const kq_vi lo = kq_and(v, m4), hi = kq_and(kq_srli16(v, 4), m4);
            KQ_UNROLL(8)
            for (unsigned t = 0; t < NT; t++) {
                const int8_t *xq = in[t].q + 64 * jj + 4 * g;
#if KQ_VNNI
                kq_dpbusd_b4(Dl[t], lo, xq);
                kq_dpbusd_b4(Dh[t], hi, xq + 32);
#else
                /* int16 pairs: 8 x 2 x 15 x 127 = 30480 at most */
                Dl[t] = kq_add16(Dl[t], kq_maddubs(lo, kq_bcast4(xq)));
                Dh[t] = kq_add16(Dh[t], kq_maddubs(hi, kq_bcast4(xq + 32)));
#endif
            }
        }
        KQ_UNROLL(8)
        for (unsigned t = 0; t < NT; t++) {
#if KQ_VNNI
            I[t] = kq_add32(I[t], kq_add32(kq_mullo(Dl[t], s->sc[2 * jj]),
                                           kq_mullo(Dh[t], s->sc[2 * jj + 1])));
#else
            I[t] = kq_add32(I[t], kq_add32(kq_madd(Dl[t], s->sc16[2 * jj]),
                                           kq_madd(Dh[t], s->sc16[2 * jj + 1])));
#endif
        }
    }
    const kq_vf d = kq_vf_ldh(KQ_U(P, 0, 2, 0, h)), dmin = kq_vf_ldh(KQ_U(P, 2, 2, 0, h));
    KQ_UNROLL(8)
    for (unsigned t = 0; t < NT; t++) {
        kq_vi M = kq_zero();
        KQ_UNROLL(4)
        for (unsigned k = 0; k < 4; k++)
            M = kq_dpwssd(M, s->mp[k], kq_set32(in[t].b32[k]));
        kern_vf_add_rows(y + t * ldy, rows, r0, KQ_NAME(kq_rp_sum)(I[t], M, d, dmin, in[t].d));
    }
}

/* ==== Q6_K ================================================================
 * Panel: ql (0: 32 units of 64 bytes), qh (2048: 16 units), scales (3072:
 * 16 units of 16 bytes), d (3328).  Half n of the super-block, group g:
 * A = ql unit 16n + g, B = ql unit 16n + 8 + g, H = qh unit 8n + g give
 * the 6-bit quants (0..63) of columns 128n + 32k + 4g .. + 3, k = 0..3,
 * all in ggml's lane g, of sub-block 8n + 2k + g / 4.  Lane g sums
 * sc * (q . x) of its 8 groups: vpmaddubsw pairs (<= 2 x 63 x 127 =
 * 16002) times the scale in both int16 halves by vpmaddwd (vpdpwssd),
 * starting from -32 (sc_2g bsum_2g + sc_2g+1 bsum_2g+1), made as minus
 * the vpmaddwd of 32 sc (|32 sc| <= 4096) with the bsum pair. */

typedef struct {
    kq_vi sc16[16], sp[8];   /* sc | sc << 16; 32 sc_2l | 32 sc_2l+1 << 16 */
} KQ_NAME(q6k_sc);

KQ_ATTR static inline void KQ_NAME(q6k_scales)(const uint8_t *P, unsigned h,
                                               KQ_NAME(q6k_sc) *s)
{
    kq_vi sc[16];
    const kq_vi lo16 = kq_set32(0xFFFF);
    KQ_UNROLL(16)
    for (int j = 0; j < 16; j++) {
        sc[j] = kq_s8x32(kq_ldb(KQ_U(P, 192, 1, j, h)));
        s->sc16[j] = kq_or(kq_and(sc[j], lo16), kq_slli32(sc[j], 16));
    }
    KQ_UNROLL(8)
    for (int l = 0; l < 8; l++)
        s->sp[l] = kq_or(kq_and(kq_slli32(sc[2 * l], 5), lo16),
                         kq_slli32(sc[2 * l + 1], 21));
}

/* Lane g of NT inputs: acc[t] = ggml's sumi_g */
KQ_ATTR static inline __attribute__((always_inline)) void
KQ_NAME(q6k_lane)(const uint8_t *P, unsigned h, const KQ_NAME(q6k_sc) *s,
                  unsigned g, const kq_in *in, unsigned NT, kq_vi *acc)
{
    const kq_vi m4 = kq_set8(0x0F), m3 = kq_set8(0x03), mC = kq_set8(0x0C);
    const kq_vi m30 = kq_set8(0x30), zi = kq_zero();
    KQ_UNROLL(8)
    for (unsigned t = 0; t < NT; t++)
        acc[t] = kq_sub32(zi, kq_madd(s->sp[g], kq_set32(in[t].b16[g])));
    KQ_UNROLL(2)
    for (unsigned n = 0; n < 2; n++) {
        const kq_vi A = kq_ld(KQ_U(P, 0, 4, 16 * n + g, h));
        const kq_vi B = kq_ld(KQ_U(P, 0, 4, 16 * n + 8 + g, h));
        const kq_vi H = kq_ld(KQ_U(P, 128, 4, 8 * n + g, h));
        kq_vi q[4];
        q[0] = kq_or(kq_and(A, m4), kq_slli16(kq_and(H, m3), 4));
        q[1] = kq_or(kq_and(B, m4), kq_slli16(kq_and(H, mC), 2));
        q[2] = kq_or(kq_and(kq_srli16(A, 4), m4), kq_and(H, m30));
        q[3] = kq_or(kq_and(kq_srli16(B, 4), m4), kq_and(kq_srli16(H, 2), m30));
        KQ_UNROLL(4)
        for (unsigned k = 0; k < 4; k++) {
            const kq_vi sc = s->sc16[8 * n + 2 * k + g / 4];
            KQ_UNROLL(8)
            for (unsigned t = 0; t < NT; t++)
                acc[t] = kq_dpwssd(acc[t], kq_maddubs(q[k], kq_bcast4(
                                               in[t].q + 128 * n + 32 * k + 4 * g)), sc);
        }
    }
}

KQ_ATTR static inline kq_vf KQ_NAME(q6k_d)(const uint8_t *P, unsigned h)
{
    return kq_vf_ldh(KQ_U(P, 208, 2, 0, h));
}


/* Q4_K as ggml_vec_dot_q4_K_q8_K sums it (matrices llama.cpp does not
 * repack): a lane type, each lane's 8 groups scaled (pairs <= 2 x 15 x
 * 127), and after the fold its 4 min lanes fma(-d_x dmin_w, m_2k S_2k +
 * m_2k+1 S_2k+1, 0) folded ((m0 + m2) + (m1 + m3)). */
/* Lane g of Q4_K (qs at block offset 16) or, with Q5 (qs at 48), of Q5_K,
 * whose fifth bits come from qh unit g */
KQ_ATTR static inline __attribute__((always_inline)) void
KQ_NAME(q45k_lane)(const uint8_t *P, unsigned h, const KQ_NAME(q4k_sc) *s,
                   unsigned g, const kq_in *in, unsigned NT, kq_vi *acc,
                   const int Q5)
{
    const kq_vi m4 = kq_set8(0x0F), m16 = kq_set8(0x10);
    kq_vi H = Q5 ? kq_ld(KQ_U(P, 16, 4, g, h)) : kq_zero();
    KQ_UNROLL(8)
    for (unsigned t = 0; t < NT; t++)
        acc[t] = kq_zero();
    KQ_UNROLL(4)
    for (unsigned jj = 0; jj < 4; jj++) {
        const kq_vi v = kq_ld(KQ_U(P, Q5 ? 48 : 16, 4, 8 * jj + g, h));
        kq_vi lo = kq_and(v, m4), hi = kq_and(kq_srli16(v, 4), m4);
        if (Q5) {
            /* H holds qh >> 2jj (16-bit shifts: what crosses from the
             * next byte lands above the bits read) */
            lo = kq_or(lo, kq_and(kq_slli16(H, 4), m16));
            hi = kq_or(hi, kq_and(kq_slli16(H, 3), m16));
            H = kq_srli16(H, 2);
        }
        KQ_UNROLL(8)
        for (unsigned t = 0; t < NT; t++) {
            const int8_t *xq = in[t].q + 64 * jj + 4 * g;
            acc[t] = kq_dpwssd(acc[t], kq_maddubs(lo, kq_bcast4(xq)), s->sc16[2 * jj]);
            acc[t] = kq_dpwssd(acc[t], kq_maddubs(hi, kq_bcast4(xq + 32)), s->sc16[2 * jj + 1]);
        }
    }
}

KQ_ATTR static inline __attribute__((always_inline)) void
KQ_NAME(q4k_lane)(const uint8_t *P, unsigned h, const KQ_NAME(q4k_sc) *s,
                  unsigned g, const kq_in *in, unsigned NT, kq_vi *acc)
{
    KQ_NAME(q45k_lane)(P, h, s, g, in, NT, acc, 0);
}

KQ_ATTR static inline kq_vf KQ_NAME(q4k_d)(const uint8_t *P, unsigned h)
{
    return kq_vf_ldh(KQ_U(P, 0, 2, 0, h));
}

KQ_ATTR static inline kq_vf KQ_NAME(q4k_extra)(const uint8_t *P, unsigned h,
                                               const KQ_NAME(q4k_sc) *s,
                                               const kq_in *in)
{
    const kq_vf dmin = kq_vf_mul(kq_vf_set1(-in->d), kq_vf_ldh(KQ_U(P, 2, 2, 0, h)));
    kq_vf m[4];
    KQ_UNROLL(4)
    for (unsigned k = 0; k < 4; k++)
        m[k] = kq_vf_fma(dmin, kq_vf_cvt(kq_madd(s->mp[k], kq_set32(in->b32[k]))),
                         kq_vf_zero());
    return kq_vf_add(kq_vf_add(m[0], m[2]), kq_vf_add(m[1], m[3]));
}

/* ==== Q5_K ================================================================
 * Panel: d (0), dmin (32), scales (64, Q4_K's), qh (256: 8 units of 64
 * bytes), qs (768: 32 units).  Unit 8jj + g of qs and unit g of qh give
 * the 5-bit quants (0..31) of columns 64jj + 4g .. + 3 (sub-block 2jj,
 * high bit: qh bit 2jj) and 64jj + 32 + 4g .. (2jj + 1, bit 2jj + 1), both
 * in lane g: 8 scaled groups a lane as Q6_K's (pairs <= 2 x 31 x 127).
 * After the fold: + fma(-d_x dmin_w, M, 0), M as Q4_K's. */
#define q5k_sc q4k_sc
#define q5k_scales q4k_scales
#define q5k_d q4k_d
#define q4krp_sc q4k_sc
#define q4krp_scales q4k_scales
#define q2krp_sc q2k_sc
#define q2krp_scales q2k_scales

KQ_ATTR static inline __attribute__((always_inline)) void
KQ_NAME(q5k_lane)(const uint8_t *P, unsigned h, const KQ_NAME(q5k_sc) *s,
                  unsigned g, const kq_in *in, unsigned NT, kq_vi *acc)
{
    KQ_NAME(q45k_lane)(P, h, s, g, in, NT, acc, 1);
}

KQ_ATTR static inline kq_vf KQ_NAME(q5k_extra)(const uint8_t *P, unsigned h,
                                               const KQ_NAME(q5k_sc) *s,
                                               const kq_in *in)
{
    kq_vi M = kq_zero();
    KQ_UNROLL(4)
    for (unsigned k = 0; k < 4; k++)
        M = kq_dpwssd(M, s->mp[k], kq_set32(in->b32[k]));
    const kq_vf dmin = kq_vf_mul(kq_vf_set1(-in->d), kq_vf_ldh(KQ_U(P, 2, 2, 0, h)));
    return kq_vf_fma(dmin, kq_vf_cvt(M), kq_vf_zero());
}

/* ==== Q3_K ================================================================
 * Panel: hmask (0: 8 units of 64 bytes), qs (512: 16 units), scales (1536:
 * 12 units of 16 bytes), d (1728).  Column 128n + 32k + t: 2 bits at 2k
 * of qs byte 32n + t (unit 8n + g for t = 4g ..), high bit 4n + k of
 * hmask byte t (unit g); the weight is the 2 bits, less 4 where the high
 * bit is clear (ggml's two vpmaddubsw and a difference, each pair <= 2 x
 * 4 x 127), times the sub-block's scale (6 bits less 32), sub-block
 * 8n + 2k + g / 4. */
typedef struct {
    kq_vi sc16[16];
} KQ_NAME(q3k_sc);

KQ_ATTR static inline void KQ_NAME(q3k_scales)(const uint8_t *P, unsigned h,
                                               KQ_NAME(q3k_sc) *s)
{
    __m128i S[12];
    const __m128i m15 = _mm_set1_epi8(15), m3 = _mm_set1_epi8(3);
    KQ_UNROLL(12)
    for (int k = 0; k < 12; k++)
        S[k] = kq_ldb(KQ_U(P, 96, 1, k, h));
    KQ_UNROLL(16)
    for (int j = 0; j < 16; j++) {
        const __m128i lo = j < 8 ? _mm_and_si128(S[j], m15)
                                 : _mm_and_si128(_mm_srli_epi16(S[j - 8], 4), m15);
        const __m128i hi = _mm_and_si128(_mm_srli_epi16(S[8 + j % 4], 2 * (j / 4)), m3);
        const kq_vi sc = kq_sub32(kq_u8x32(_mm_or_si128(lo, _mm_slli_epi16(hi, 4))),
                                  kq_set32(32));
        s->sc16[j] = kq_or(kq_and(sc, kq_set32(0xFFFF)), kq_slli32(sc, 16));
    }
}

KQ_ATTR static inline __attribute__((always_inline)) void
KQ_NAME(q3k_lane)(const uint8_t *P, unsigned h, const KQ_NAME(q3k_sc) *s,
                  unsigned g, const kq_in *in, unsigned NT, kq_vi *acc)
{
    const kq_vi m3 = kq_set8(3), m4 = kq_set8(4);
    const kq_vi hm = kq_ld(KQ_U(P, 0, 4, g, h));
    KQ_UNROLL(8)
    for (unsigned t = 0; t < NT; t++)
        acc[t] = kq_zero();
    KQ_UNROLL(2)
    for (unsigned n = 0; n < 2; n++) {
        const kq_vi v = kq_ld(KQ_U(P, 32, 4, 8 * n + g, h));
        KQ_UNROLL(4)
        for (unsigned k = 0; k < 4; k++) {
            const unsigned b = 4 * n + k;
            const kq_vi q = kq_and(kq_srli16(v, 2 * k), m3);
            /* 4 where the high bit is clear: (~hm >> b & 1) << 2 */
            const kq_vi neg = kq_andnot(b >= 2 ? kq_srli16(hm, b - 2) : kq_slli16(hm, 2 - b), m4);
            const kq_vi sc = s->sc16[8 * n + 2 * k + g / 4];
            KQ_UNROLL(8)
            for (unsigned t = 0; t < NT; t++) {
                const kq_vi xb = kq_bcast4(in[t].q + 128 * n + 32 * k + 4 * g);
                acc[t] = kq_dpwssd(acc[t], kq_sub16(kq_maddubs(q, xb), kq_maddubs(neg, xb)), sc);
            }
        }
    }
}

KQ_ATTR static inline kq_vf KQ_NAME(q3k_d)(const uint8_t *P, unsigned h)
{
    return kq_vf_ldh(KQ_U(P, 108, 2, 0, h));
}


/* ==== IQ4_XS ================================================================
 * Panel: d (0), scales_h (32: one unit of 16 x 2 bytes), scales_l (64: 4
 * units of 16), qs (128: 32 units of 64).  Unit 4ib + g4 of qs holds
 * columns 32ib + 4g4 .. (low nibbles, lane g4) and 32ib + 16 + 4g4 ..
 * (high, lane 4 + g4) of sub-block ib, as indexes of ggml's 16 levels
 * (vpshufb).  Signed levels times signed activations: vpmaddubsw of
 * |w| and x with w's sign (pairs <= 2 x 127 x 127 = 32258), as ggml's
 * mul_add_epi8; then the scale (6 bits less 32). */
typedef struct {
    kq_vi sc16[8];
} KQ_NAME(iq4xs_sc);

KQ_ATTR static inline void KQ_NAME(iq4xs_scales)(const uint8_t *P, unsigned h,
                                                 KQ_NAME(iq4xs_sc) *s)
{
    const kq_vi sh = kq_u16x32(KQ_U(P, 2, 2, 0, h));
    KQ_UNROLL(8)
    for (int ib = 0; ib < 8; ib++) {
        const kq_vi l = kq_u8x32(kq_ldb(KQ_U(P, 4, 1, ib / 2, h)));
        const kq_vi lo = kq_and(kq_srli32(l, 4 * (ib % 2)), kq_set32(0xF));
        const kq_vi hi = kq_and(kq_srli32(sh, 2 * ib), kq_set32(3));
        const kq_vi sc = kq_sub32(kq_or(lo, kq_slli32(hi, 4)), kq_set32(32));
        s->sc16[ib] = kq_or(kq_and(sc, kq_set32(0xFFFF)), kq_slli32(sc, 16));
    }
}

KQ_ATTR static inline __attribute__((always_inline)) void
KQ_NAME(iq4xs_lane)(const uint8_t *P, unsigned h, const KQ_NAME(iq4xs_sc) *s,
                    unsigned g, const kq_in *in, unsigned NT, kq_vi *acc)
{
    const kq_vi m4 = kq_set8(0x0F), tab = kq_bcast16(kern_kq_iq4_values);
    KQ_UNROLL(8)
    for (unsigned t = 0; t < NT; t++)
        acc[t] = kq_zero();
    KQ_UNROLL(8)
    for (unsigned ib = 0; ib < 8; ib++) {
        const kq_vi v = kq_ld(KQ_U(P, 8, 4, 4 * ib + g % 4, h));
        const kq_vi w = kq_shuffle8(tab, g < 4 ? kq_and(v, m4) : kq_and(kq_srli16(v, 4), m4));
        const kq_vi aw = kq_abs8(w);
        KQ_UNROLL(8)
        for (unsigned t = 0; t < NT; t++) {
            const kq_vi xb = kq_bcast4(in[t].q + 32 * ib + 16 * (g / 4) + 4 * (g % 4));
            acc[t] = kq_dpwssd(acc[t], kq_maddubs(aw, kq_sign8(xb, w)), s->sc16[ib]);
        }
    }
}

KQ_ATTR static inline kq_vf KQ_NAME(iq4xs_d)(const uint8_t *P, unsigned h)
{
    return kq_vf_ldh(KQ_U(P, 0, 2, 0, h));
}


/* The hooks of the lane types that add nothing: no start value for a
 * lane, nothing after the fold */
#undef KQ_NO_HOOKS
#define KQ_NO_HOOKS(TYPE)                                                      \
KQ_ATTR static inline kq_vf KQ_NAME(TYPE##_init)(const uint8_t *P, unsigned h, \
                                                 const KQ_NAME(TYPE##_sc) *s,  \
                                                 const kq_in *in, unsigned g)  \
{                                                                              \
    (void)P, (void)h, (void)s, (void)in, (void)g;                              \
    return kq_vf_zero();                                                       \
}
#undef KQ_NO_EXTRA
#define KQ_NO_EXTRA(TYPE)                                                      \
KQ_ATTR static inline kq_vf KQ_NAME(TYPE##_extra)(const uint8_t *P, unsigned h, \
                                                  const KQ_NAME(TYPE##_sc) *s, \
                                                  const kq_in *in)             \
{                                                                              \
    (void)P, (void)h, (void)s, (void)in;                                       \
    return kq_vf_zero();                                                       \
}

KQ_NO_HOOKS(q4k)
KQ_NO_HOOKS(q6k)
KQ_NO_EXTRA(q6k)
KQ_NO_HOOKS(q5k)
KQ_NO_HOOKS(q3k)
KQ_NO_EXTRA(q3k)
KQ_NO_HOOKS(iq4xs)
KQ_NO_EXTRA(iq4xs)

/* ==== the lane types' groups ===============================================
 * NT inputs against half h of panel P: each lane's sum (TYPE_lane), then
 * fma(d_x d_w, (float)sumi_l, TYPE_init) per lane, the fold, TYPE_extra
 * after it,
 * into y + t * ldy (rows r0 .. below `rows`).  One input on AVX-512 runs
 * its lanes unrolled, in registers; a group, or any input with AVX2's 16
 * registers, runs them rolled, or its unpacked quants and accumulators
 * spill (IQ4_XS one input, AVX2: 8.7 -> 12.0 GB/s in cache). */
#undef KQ_LANES_GROUP
#define KQ_LANES_GROUP(TYPE)                                                   \
KQ_ATTR static inline __attribute__((always_inline)) void                      \
KQ_NAME(TYPE##_group)(const uint8_t *P, unsigned h, const KQ_NAME(TYPE##_sc) *s, \
                      const kq_in *in, unsigned NT, float *y, size_t ldy,      \
                      unsigned rows, unsigned r0)                              \
{                                                                              \
    const kq_vf d = KQ_NAME(TYPE##_d)(P, h);                                   \
    kq_vf lane[8][KQ_TG], dd[KQ_TG];                                           \
    KQ_UNROLL(8)                                                    \
    for (unsigned t = 0; t < NT; t++)                                          \
        dd[t] = kq_vf_mul(kq_vf_set1(in[t].d), d);       /* d_x d_w */         \
    if (NT == 1 && KQ_VR == 16) {                                             \
        KQ_UNROLL(8)                                                \
        for (unsigned g = 0; g < 8; g++) {                                     \
            kq_vi acc[1];                                                      \
            KQ_NAME(TYPE##_lane)(P, h, s, g, in, 1, acc);                      \
            lane[g][0] = kq_vf_fma(dd[0], kq_vf_cvt(acc[0]),                   \
                                   KQ_NAME(TYPE##_init)(P, h, s, in, g));      \
        }                                                                      \
    } else {                                                                   \
        for (unsigned g = 0; g < 8; g++) {                                     \
            kq_vi acc[KQ_TG];                                                  \
            KQ_NAME(TYPE##_lane)(P, h, s, g, in, NT, acc);                     \
            KQ_UNROLL(8)                                            \
            for (unsigned t = 0; t < NT; t++)                                  \
                lane[g][t] = kq_vf_fma(dd[t], kq_vf_cvt(acc[t]),               \
                                       KQ_NAME(TYPE##_init)(P, h, s, in + t, g)); \
        }                                                                      \
    }                                                                          \
    KQ_UNROLL(8)                                                    \
    for (unsigned t = 0; t < NT; t++) {                                        \
        const kq_vf l[8] = { lane[0][t], lane[1][t], lane[2][t], lane[3][t],   \
                             lane[4][t], lane[5][t], lane[6][t], lane[7][t] }; \
        kern_vf_add_rows(y + t * ldy, rows, r0,                               \
                          kq_vf_add(KQ_NAME(kq_fold8)(l),                      \
                                    KQ_NAME(TYPE##_extra)(P, h, s, in + t)));  \
    }                                                                          \
}

KQ_LANES_GROUP(q4k)
KQ_LANES_GROUP(q6k)
KQ_LANES_GROUP(q5k)
KQ_LANES_GROUP(q3k)
KQ_LANES_GROUP(iq4xs)

/* ==== Q2_K =================================================================
 * Panel: scales (0: 16 units of 16 bytes: scale low nibble, min high),
 * qs (256: 16 units of 64), d (1280), dmin (1312).  Column 128n + 32k + t:
 * 2 bits at 2k of qs byte 32n + t (unit 8n + g for t = 4g ..), sub-block
 * 8n + 2k + g / 4 of 16 columns.  Repacked (q2krp, tile_mv_rp): each
 * sub-block's dot (<= 16 x 3 x 127 = 6096) summed in int16 and scaled by
 * vpmaddwd (vpdpwssd) into I; M = sum_j m_j bsum_j by min pairs; then
 * Q4_K's float steps.  The vec_dot flavour (q2k, tile_mv) follows. */
typedef struct {
    kq_vi sc16[16], mp[8];
} KQ_NAME(q2k_sc);

KQ_ATTR static inline void KQ_NAME(q2k_scales)(const uint8_t *P, unsigned h,
                                               KQ_NAME(q2k_sc) *s)
{
    kq_vi sc[16], m[16];
    KQ_UNROLL(16)
    for (int j = 0; j < 16; j++) {
        const kq_vi b = kq_u8x32(kq_ldb(KQ_U(P, 0, 1, j, h)));
        sc[j] = kq_and(b, kq_set32(0xF));
        m[j] = kq_srli32(b, 4);
        s->sc16[j] = kq_or(sc[j], kq_slli32(sc[j], 16));
    }
    KQ_UNROLL(8)
    for (int l = 0; l < 8; l++)
        s->mp[l] = kq_or(m[2 * l], kq_slli32(m[2 * l + 1], 16));
}

KQ_ATTR static inline __attribute__((always_inline)) void
KQ_NAME(q2krp_group)(const uint8_t *P, unsigned h, const KQ_NAME(q2k_sc) *s,
                     const kq_in *in, unsigned NT, float *y, size_t ldy,
                     unsigned rows, unsigned r0)
{
    const kq_vi m3 = kq_set8(3);
    kq_vi I[KQ_TG];
    KQ_UNROLL(8)
    for (unsigned t = 0; t < NT; t++)
        I[t] = kq_zero();
    for (unsigned n = 0; n < 2; n++) {
        KQ_UNROLL(4)
        for (unsigned k = 0; k < 4; k++) {
            kq_vi S0[KQ_TG], S1[KQ_TG];
            KQ_UNROLL(8)
            for (unsigned t = 0; t < NT; t++)
                S0[t] = S1[t] = kq_zero();
            KQ_UNROLL(8)
            for (unsigned g = 0; g < 8; g++) {
                const kq_vi q = kq_and(kq_srli16(kq_ld(KQ_U(P, 16, 4, 8 * n + g, h)), 2 * k), m3);
                KQ_UNROLL(8)
                for (unsigned t = 0; t < NT; t++) {
                    const kq_vi p = kq_maddubs(q, kq_bcast4(in[t].q + 128 * n + 32 * k + 4 * g));
                    if (g < 4)
                        S0[t] = kq_add16(S0[t], p);
                    else
                        S1[t] = kq_add16(S1[t], p);
                }
            }
            KQ_UNROLL(8)
            for (unsigned t = 0; t < NT; t++) {
                I[t] = kq_dpwssd(I[t], S0[t], s->sc16[8 * n + 2 * k]);
                I[t] = kq_dpwssd(I[t], S1[t], s->sc16[8 * n + 2 * k + 1]);
            }
        }
    }
    const kq_vf d = kq_vf_ldh(KQ_U(P, 80, 2, 0, h)), dmin = kq_vf_ldh(KQ_U(P, 82, 2, 0, h));
    KQ_UNROLL(8)
    for (unsigned t = 0; t < NT; t++) {
        kq_vi M = kq_zero();
        KQ_UNROLL(8)
        for (unsigned l = 0; l < 8; l++)
            M = kq_dpwssd(M, s->mp[l], kq_set32(in[t].b16[l]));
        kern_vf_add_rows(y + t * ldy, rows, r0, KQ_NAME(kq_rp_sum)(I[t], M, d, dmin, in[t].d));
    }
}

/* Q2_K as ggml_vec_dot_q2_K_q8_K sums it (on a CPU without AVX-512, or a
 * matrix llama.cpp does not repack): a lane type whose lane l starts at
 * fma(-d_x dmin_w, m_2l bsum_2l + m_2l+1 bsum_2l+1, 0) (pairs <= 2 x 3 x
 * 127). */
KQ_ATTR static inline __attribute__((always_inline)) void
KQ_NAME(q2k_lane)(const uint8_t *P, unsigned h, const KQ_NAME(q2k_sc) *s,
                  unsigned g, const kq_in *in, unsigned NT, kq_vi *acc)
{
    const kq_vi m3 = kq_set8(3);
    KQ_UNROLL(8)
    for (unsigned t = 0; t < NT; t++)
        acc[t] = kq_zero();
    KQ_UNROLL(2)
    for (unsigned n = 0; n < 2; n++) {
        const kq_vi v = kq_ld(KQ_U(P, 16, 4, 8 * n + g, h));
        KQ_UNROLL(4)
        for (unsigned k = 0; k < 4; k++) {
            const kq_vi q = kq_and(kq_srli16(v, 2 * k), m3);
            const kq_vi sc = s->sc16[8 * n + 2 * k + g / 4];
            KQ_UNROLL(8)
            for (unsigned t = 0; t < NT; t++)
                acc[t] = kq_dpwssd(acc[t], kq_maddubs(q, kq_bcast4(
                                               in[t].q + 128 * n + 32 * k + 4 * g)), sc);
        }
    }
}

KQ_ATTR static inline kq_vf KQ_NAME(q2k_d)(const uint8_t *P, unsigned h)
{
    return kq_vf_ldh(KQ_U(P, 80, 2, 0, h));
}

KQ_ATTR static inline kq_vf KQ_NAME(q2k_init)(const uint8_t *P, unsigned h,
                                              const KQ_NAME(q2k_sc) *s,
                                              const kq_in *in, unsigned g)
{
    const kq_vf dmin = kq_vf_mul(kq_vf_set1(-in->d), kq_vf_ldh(KQ_U(P, 82, 2, 0, h)));
    return kq_vf_fma(dmin, kq_vf_cvt(kq_madd(s->mp[g], kq_set32(in->b16[g]))),
                     kq_vf_zero());
}

KQ_NO_EXTRA(q2k)
KQ_LANES_GROUP(q2k)

/* ==== the tile kernels ======================================================
 * Inputs KQ_CHUNK at a time (their numbers taken once), then for each
 * panel and half the scales once and the inputs KQ_TG at a time, the last
 * few one at a time (a group is the same arithmetic as one input). */
#ifndef KQ_CHUNK
#define KQ_CHUNK 32
#endif
#undef KQ_MM
#define KQ_MM(TYPE, BYTES)                                                     \
KQ_ATTR static void KQ_NAME(mm_##TYPE)(const void *payload, unsigned rows,     \
                                       unsigned cols, const kern_act *x,       \
                                       unsigned m, unsigned col0, float *y,    \
                                       size_t ldy)                             \
{                                                                              \
    const uint8_t *pl = payload;                                               \
    const unsigned np = (rows + KERN_PANEL - 1) / KERN_PANEL, xb = col0 / KERN_QK_K; \
    (void)cols;                                                                \
    for (unsigned c0 = 0; c0 < m; c0 += KQ_CHUNK) {                            \
        const unsigned nc = m - c0 < KQ_CHUNK ? m - c0 : KQ_CHUNK;             \
        kq_in in[KQ_CHUNK];                                                    \
        for (unsigned t = 0; t < nc; t++)                                      \
            kq_in_set(&in[t], x + c0 + t, xb);                                 \
        float *yc = y + c0 * ldy;                                              \
        for (unsigned p = 0; p < np; p++) {                                    \
            const uint8_t *P = pl + (size_t)p * KERN_PANEL * (BYTES);          \
            KQ_NAME(kq_pf)(P, KERN_PANEL * (BYTES));                           \
            for (unsigned h = 0; h < KERN_PANEL / KQ_VR; h++) {                \
                const unsigned r0 = KERN_PANEL * p + KQ_VR * h;                \
                if (r0 >= rows)                                                \
                    break;                                                     \
                KQ_NAME(TYPE##_sc) s;                                          \
                KQ_NAME(TYPE##_scales)(P, h, &s);                              \
                unsigned t = 0;                                                \
                for (; t + KQ_TG <= nc; t += KQ_TG)                            \
                    KQ_NAME(TYPE##_group)(P, h, &s, in + t, KQ_TG,             \
                                          yc + t * ldy, ldy, rows, r0);        \
                for (; t < nc; t++)                                            \
                    KQ_NAME(TYPE##_group)(P, h, &s, in + t, 1,                 \
                                          yc + t * ldy, ldy, rows, r0);        \
            }                                                                  \
        }                                                                      \
    }                                                                          \
}                                                                              \
KQ_ATTR static void KQ_NAME(mv_##TYPE)(const void *payload, unsigned rows,     \
                                       unsigned cols, const kern_act *x,       \
                                       unsigned col0, float *y)                \
{                                                                              \
    KQ_NAME(mm_##TYPE)(payload, rows, cols, x, 1, col0, y, 0);                 \
}

KQ_MM(q2k, KQ_Q2_BYTES)
KQ_MM(q2krp, KQ_Q2_BYTES)
KQ_MM(q3k, KQ_Q3_BYTES)
KQ_MM(q4k, KQ_Q4_BYTES)
KQ_MM(q4krp, KQ_Q4_BYTES)
KQ_MM(q5k, KQ_Q5_BYTES)
KQ_MM(q6k, KQ_Q6_BYTES)
KQ_MM(iq4xs, KQ_IQ4_BYTES)

/* ==== Q8_K activations ======================================================
 * quantize_row_q8_K_ref per block of 256, KQ_VR lanes at a time: amax as
 * the largest |x| bit pattern (the order of the values, for non-NaN
 * floats), max the first x of that magnitude, then q = nearest_int(iscale
 * x) by ggml's own trick in lanes (a product, then + 1.5 * 2^23, the low
 * 23 bits less 2^22), capped at 127 and narrowed with truncation as C's
 * int8_t conversion does.  A block holding an inf or a NaN goes through
 * the scalar code. */
KQ_ATTR static void KQ_NAME(act_q8k)(const float *x, unsigned nb, int8_t *q,
                                     float *d, int16_t *bsums)
{
    const kq_vi absm = kq_set32(0x7FFFFFFF);
    for (unsigned b = 0; b < nb; b++, x += KERN_QK_K, q += KERN_QK_K, bsums += 16) {
        kq_vi mx = kq_zero();
        for (unsigned i = 0; i < KERN_QK_K; i += KQ_VR)
            mx = KQ_MAXU(mx, kq_and(kq_ld(x + i), absm));
        uint32_t ab[KQ_VR], amax_bits = 0;
        memcpy(ab, &mx, sizeof ab);
        for (unsigned l = 0; l < KQ_VR; l++)
            amax_bits = ab[l] > amax_bits ? ab[l] : amax_bits;
        if (amax_bits >= 0x7F800000u) {
            kern_kq_act_q8k_ref(x, 1, q, d + b, bsums);
            continue;
        }
        if (!amax_bits) {
            d[b] = 0;
            memset(q, 0, KERN_QK_K);
            memset(bsums, 0, 16 * sizeof *bsums);
            continue;
        }
        unsigned first = 0;
        while ((kern_f32_bits(x[first]) & 0x7FFFFFFFu) != amax_bits)
            first++;
        const float iscale = -127.f / x[first];
        const kq_vf is = kq_vf_set1(iscale), magic = kq_vf_set1(12582912.f);
        const kq_vi lo23 = kq_set32(0x007FFFFF), off = kq_set32(0x00400000);
        const kq_vi cap = kq_set32(127);
        for (unsigned i = 0; i < KERN_QK_K; i += 16) {
            int32_t v[16];
            for (unsigned k = 0; k < 16; k += KQ_VR) {
                const kq_vf f = kq_vf_add(kq_vf_mul(is, kq_vf_ld(x + i + k)), magic);
                kq_vi n = kq_sub32(kq_and(KQ_CASTI(f), lo23), off);
                n = KQ_MINS(n, cap);
                memcpy(v + k, &n, sizeof n);
            }
            int s = 0;
            for (unsigned k = 0; k < 16; k++) {
                q[i + k] = (int8_t)v[k];
                s += (int8_t)v[k];
            }
            bsums[i / 16] = (int16_t)s;
        }
        d[b] = 1 / iscale;
    }
}

/* ==== the table ================================================================ */
KQ_ATTR static void KQ_NAME(kq_fill)(kern_ops *ops)
{
    ops->tile_mv[KERN_Q2_K] = KQ_NAME(mv_q2k);
    ops->tile_mm[KERN_Q2_K] = KQ_NAME(mm_q2k);
    ops->tile_mv[KERN_Q3_K] = KQ_NAME(mv_q3k);
    ops->tile_mm[KERN_Q3_K] = KQ_NAME(mm_q3k);
    ops->tile_mv[KERN_Q4_K] = KQ_NAME(mv_q4k);
    ops->tile_mm[KERN_Q4_K] = KQ_NAME(mm_q4k);
    ops->tile_mv[KERN_Q5_K] = KQ_NAME(mv_q5k);
    ops->tile_mm[KERN_Q5_K] = KQ_NAME(mm_q5k);
    ops->tile_mv[KERN_Q6_K] = KQ_NAME(mv_q6k);
    ops->tile_mm[KERN_Q6_K] = KQ_NAME(mm_q6k);
    ops->tile_mv[KERN_IQ4_XS] = KQ_NAME(mv_iq4xs);
    ops->tile_mm[KERN_IQ4_XS] = KQ_NAME(mm_iq4xs);
    ops->tile_mv_rp[KERN_Q2_K] = KQ_NAME(mv_q2krp);
    ops->tile_mm_rp[KERN_Q2_K] = KQ_NAME(mm_q2krp);
    ops->tile_mv_rp[KERN_Q4_K] = KQ_NAME(mv_q4krp);
    ops->tile_mm_rp[KERN_Q4_K] = KQ_NAME(mm_q4krp);
    ops->act_q8k = KQ_NAME(act_q8k);
}
