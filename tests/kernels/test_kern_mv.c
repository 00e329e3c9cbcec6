/*
 * test_kern_mv.c — part of test_kern (kern_test.h): the tile mat-vec of every table this CPU runs against the scalar
 * reference on ragged shapes, column windows and every batch class, and
 * llama.cpp's mat-vec sums re-typed from its sources.
 */
#include "config.h"

#include "kern_test.h"

/* ---- tile mat-vec ------------------------------------------------------- */

/* x as the tile type sees it. */
static double act_value(enum kern_type t, const kern_act *a, unsigned i)
{
    switch (t) {
    case KERN_F32: return a->f32[i];
    case KERN_F16: return kt_ref_h2f(a->f16[i]);
    default:       return (double)a->q8[i] * a->q8_d[i / 32];
    }
}


static void check_tile_fn(enum kern_type t, int rp, unsigned R, unsigned C,
                          unsigned col0, unsigned n, const void *pl, kern_act *a,
                          const float *x, float *wdeq)
{
    enum { GUARD = 16 };
    float y0[128 + GUARD], yref[128 + GUARD], y[128 + GUARD];
    kern_act_set(a, x, n, KERN_NEED(t));
    for (unsigned r = 0; r < R + GUARD; r++)
        y0[r] = r < R ? 3.0f * kt_rng_unit() : 12345.0f;
    memcpy(yref, y0, (R + GUARD) * sizeof(float));
    kt_tile_fn(kern_ops_ref(), t, rp)(pl, R, C, a, col0, yref);

    /* the reference against doubles, through the unpacked weights */
    kern_tile_unpack(t, R, C, pl, wdeq, C);
    unsigned cp = (C + 31) / 32 * 32;
    for (unsigned r = 0; r < R; r++) {
        double sum = 0, mag = 0;
        for (unsigned c = 0; c < C; c++) {
            double term = (double)wdeq[r * C + c] * act_value(t, a, col0 + c);
            sum += term;
            mag += fabs(term);
        }
        double tol = (cp + 8) * 1.2e-7 * mag + 1.2e-7 * fabs(yref[r]) + 1e-30;
        if (!(fabs((double)yref[r] - (double)y0[r] - sum) <= tol))
            fail_msg("ref %s%s %ux%u col0 %u row %u: %.9g, want %.9g (tol %g)",
                     kern_type_name(t), rp ? " (repacked)" : "", R, C, col0, r,
                     yref[r] - y0[r], sum, tol);
    }
    for (unsigned r = R; r < R + GUARD; r++)
        assert_true(yref[r] == 12345.0f);

    /* every SIMD table: bit for bit the reference, rows past R untouched */
    for (int isa = 1; isa < KERN_NISA; isa++) {
        const kern_ops *ops = kern_ops_for((enum kern_isa)isa);
        if (!ops)
            continue;
        assert_int_equal(ops->isa, isa);
        memcpy(y, y0, (R + GUARD) * sizeof(float));
        kt_tile_fn(ops, t, rp)(pl, R, C, a, col0, y);
        for (unsigned r = 0; r < R + GUARD; r++)
            if (kt_fbits(y[r]) != kt_fbits(yref[r]))
                fail_msg("%s %s%s %ux%u col0 %u n %u row %u: %.9g, ref %.9g",
                         ops->name, kern_type_name(t), rp ? " (repacked)" : "",
                         R, C, col0, n, r, y[r], yref[r]);
    }
}

/* Every kernel of type t on this tile; Q4_0 in both flavours. */
static void check_tile(enum kern_type t, unsigned R, unsigned C, unsigned col0,
                       unsigned n, const void *pl, kern_act *a, const float *x,
                       float *wdeq)
{
    check_tile_fn(t, 0, R, C, col0, n, pl, a, x, wdeq);
    if (t == KERN_Q4_0)
        check_tile_fn(t, 1, R, C, col0, n, pl, a, x, wdeq);
}

void test_tile_mv(void **state)
{
    (void)state;
    static const unsigned rows[] = { 1, 3, 15, 16, 17, 64, 100, 127, 128 };
    static const unsigned cols[] = { 1, 7, 31, 32, 33, 64, 172, 200, 255, 256 };
    static const unsigned col0_f[] = { 0, 3, 37 }, col0_q[] = { 0, 32, 96 };
    float *w = malloc(128 * 256 * 4), *wdeq = malloc(128 * 256 * 4);
    float x[512];
    uint8_t *pl = malloc(kern_tile_payload_size(KERN_F32, 128, 256));
    kern_act a;
    assert_int_equal(kern_act_init(&a, 512), 0);

    for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++)
        for (size_t ci = 0; ci < sizeof cols / sizeof cols[0]; ci++) {
            unsigned R = rows[ri], C = cols[ci];
            kt_fill_matrix(w, R, C);
            for (int t = 0; t < KT_NLEGACY; t++) {
                assert_int_equal(kern_tile_pack((enum kern_type)t, R, C, KERN_SRC_F32,
                                                w, C * 4, pl), 0);
                for (int k = 0; k < 3; k++) {
                    unsigned col0 = t >= KERN_Q8_0 ? col0_q[k] : col0_f[k];
                    unsigned n = col0 + C + (k == 2 ? 9 : 0);   /* x may run on */
                    for (unsigned i = 0; i < n; i++)
                        x[i] = (i / 32) % 7 == 5 ? 0.0f : kt_rng_mag() * kt_rng_unit();
                    check_tile((enum kern_type)t, R, C, col0, n, pl, &a, x, wdeq);
                }
            }
        }

    /* hostile but finite quantised payloads: every byte value, including
     * Q8_0 byte 0 (-128) and non-zero padding */
    for (int iter = 0; iter < 40; iter++) {
        unsigned R = 1 + kt_rng_below(128), C = 1 + kt_rng_below(256);
        for (int t = KERN_Q8_0; t <= KERN_Q4_0; t++) {
            size_t size = kern_tile_payload_size((enum kern_type)t, R, C);
            kt_geo g = kt_geo_of(R, C);
            for (size_t i = 0; i < size; i++)
                pl[i] = (uint8_t)kt_rng_u64();
            for (size_t i = 0; i < g.sbytes / 2; i++) {
                uint16_t d = kt_ref_f2h(kt_rng_mag() * kt_rng_unit());
                memcpy(pl + 2 * i, &d, 2);
            }
            /* x ends with the tile: the garbage in the padding columns
             * meets zero activations, as the unpacked oracle assumes */
            unsigned col0 = 32 * kt_rng_below(4);
            unsigned n = col0 + C;
            for (unsigned i = 0; i < n; i++)
                x[i] = iter % 2 ? 100.0f * kt_rng_unit() : (kt_rng_below(2) ? 1.0f : -1.0f);
            check_tile((enum kern_type)t, R, C, col0, n, pl, &a, x, wdeq);
        }
    }
    kern_act_free(&a);
    free(w);
    free(wdeq);
    free(pl);
}

/* A one-tile matrix gives exactly run.c's sequential float sum. */
void test_tile_mv_sequential(void **state)
{
    (void)state;
    enum { R = 20, C = 172 };
    float w[R * C], x[C], y[R];
    uint8_t pl[32 * 192 * 4];
    kern_act a;
    assert_int_equal(kern_act_init(&a, C), 0);
    for (int i = 0; i < R * C; i++)
        w[i] = kt_rng_unit();
    for (int i = 0; i < C; i++)
        x[i] = kt_rng_unit();
    kern_act_set(&a, x, C, KERN_NEED(KERN_F32));
    assert_int_equal(kern_tile_pack(KERN_F32, R, C, KERN_SRC_F32, w, C * 4, pl), 0);
    for (int isa = 0; isa < KERN_NISA; isa++) {
        const kern_ops *ops = kern_ops_for((enum kern_isa)isa);
        if (!ops)
            continue;
        memset(y, 0, sizeof y);
        ops->tile_mv[KERN_F32](pl, R, C, &a, 0, y);
        for (int i = 0; i < R; i++) {
            float val = 0.0f;           /* llama2.c matmul() */
            for (int j = 0; j < C; j++)
                val += w[i * C + j] * x[j];
            assert_true(kt_fbits(y[i]) == kt_fbits(val));
        }
    }
    kern_act_free(&a);
}

/* ---- llama.cpp's mat-vec sums, re-typed ------------------------------------ */

/* GGML rows (block_q8_0: f16 d + 32 int8; block_q4_0: f16 d + 16 bytes,
 * element j low nibble, j + 16 high) of random quants and scales. */
static void fill_ggml_rows(enum kern_type t, unsigned R, unsigned C, uint8_t *rows)
{
    const size_t bs = t == KERN_Q8_0 ? 34 : 18;
    for (unsigned b = 0; b < R * (C / 32); b++) {
        uint8_t *blk = rows + b * bs;
        uint16_t d = kt_ref_f2h(0.001f + 0.05f * fabsf(kt_rng_unit()));
        memcpy(blk, &d, 2);
        for (size_t j = 2; j < bs; j++)
            blk[j] = t == KERN_Q8_0 ? (uint8_t)(int8_t)((int)kt_rng_below(255) - 127)
                                    : (uint8_t)kt_rng_u64();
    }
}

static int ggml_quant(enum kern_type t, const uint8_t *blk, int j)
{
    if (t == KERN_Q8_0)
        return (int8_t)blk[2 + j];
    return (j < 16 ? blk[2 + j] & 0x0F : blk[2 + j - 16] >> 4) - 8;
}

/* ggml_vec_dot_q8_0_q8_0 / ggml_vec_dot_q4_0_q8_0, x86 (AVX2 code, also in
 * AVX-512 builds), in scalar form: mul_sum_i8_pairs_float gives lane j the
 * sum of elements 4j..4j+3; acc = _mm256_fmadd_ps(d, q, acc); then
 * hsum_float_8. */
static float ggml_vec_dot_q(enum kern_type t, const uint8_t *wrow, unsigned nb,
                            const int8_t *xq, const uint16_t *xd)
{
    const size_t bs = t == KERN_Q8_0 ? 34 : 18;
    float acc[8] = { 0 };
    for (unsigned b = 0; b < nb; b++) {
        const uint8_t *blk = wrow + b * bs;
        uint16_t dw;
        memcpy(&dw, blk, 2);
        const float d = kt_ref_h2f(dw) * kt_ref_h2f(xd[b]);
        for (int j = 0; j < 8; j++) {
            int s = 0;
            for (int e = 4 * j; e < 4 * j + 4; e++)
                s += ggml_quant(t, blk, e) * xq[32 * b + e];
            acc[j] = fmaf(d, (float)s, acc[j]);
        }
    }
    /* hsum_float_8: (hi + lo), then movehl, then movehdup */
    float r[4];
    for (int i = 0; i < 4; i++)
        r[i] = acc[i + 4] + acc[i];
    return (r[0] + r[2]) + (r[1] + r[3]);
}

/* ggml_gemv_q4_0_8x8_q8_0 (repacked Q4_0): per block
 * acc = fmadd(cvtepi32(isum), col_scale * row_scale, acc). */
static float ggml_gemv_q4(const uint8_t *wrow, unsigned nb, const int8_t *xq,
                          const uint16_t *xd)
{
    float acc = 0.0f;
    for (unsigned b = 0; b < nb; b++) {
        const uint8_t *blk = wrow + b * 18;
        uint16_t dw;
        memcpy(&dw, blk, 2);
        int s = 0;
        for (int e = 0; e < 32; e++)
            s += ggml_quant(KERN_Q4_0, blk, e) * xq[32 * b + e];
        acc = fmaf((float)s, kt_ref_h2f(dw) * kt_ref_h2f(xd[b]), acc);
    }
    return acc;
}

#if HAVE_X86
/* The AVX2 form of the above, as in llama.cpp (mul_sum_i8_pairs_float
 * without VNNI, hsum_float_8), to check the scalar transcription. */
__attribute__((target("avx2,fma,f16c"))) static float
ggml_vec_dot_q_avx2(enum kern_type t, const uint8_t *wrow, unsigned nb,
                    const int8_t *xq, const uint16_t *xd)
{
    const size_t bs = t == KERN_Q8_0 ? 34 : 18;
    __m256 acc = _mm256_setzero_ps();
    for (unsigned b = 0; b < nb; b++) {
        const uint8_t *blk = wrow + b * bs;
        uint16_t dw;
        memcpy(&dw, blk, 2);
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(dw) * _cvtsh_ss(xd[b]));
        __m256i qx;
        if (t == KERN_Q8_0) {
            qx = _mm256_loadu_si256((const __m256i *)(blk + 2));
        } else {            /* bytes_from_nibbles_32, then - 8 */
            const __m128i tmp = _mm_loadu_si128((const __m128i *)(blk + 2));
            const __m256i bytes = _mm256_insertf128_si256(
                _mm256_castsi128_si256(tmp), _mm_srli_epi16(tmp, 4), 1);
            qx = _mm256_sub_epi8(_mm256_and_si256(_mm256_set1_epi8(0xF), bytes),
                                 _mm256_set1_epi8(8));
        }
        const __m256i qy = _mm256_loadu_si256((const __m256i *)(xq + 32 * b));
        const __m256i ax = _mm256_sign_epi8(qx, qx), sy = _mm256_sign_epi8(qy, qx);
        const __m256i dot = _mm256_maddubs_epi16(ax, sy);
        const __m256 q = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_set1_epi16(1), dot));
        acc = _mm256_fmadd_ps(d, q, acc);
    }
    __m128 res = _mm256_extractf128_ps(acc, 1);
    res = _mm_add_ps(res, _mm256_castps256_ps128(acc));
    res = _mm_add_ps(res, _mm_movehl_ps(res, res));
    res = _mm_add_ss(res, _mm_movehdup_ps(res));
    return _mm_cvtss_f32(res);
}

/* ggml_vec_dot_f16 of an AVX-512 build: GGML_F16_STEP 64, 4 accumulators
 * of 16, GGML_F32x16_REDUCE, the tail in double. */
__attribute__((target("avx512f,f16c"))) static float
ggml_vec_dot_f16_avx512(unsigned n, const uint16_t *x, const uint16_t *y)
{
    const unsigned np = n & ~63u;
    __m512 sum[4] = { _mm512_setzero_ps(), _mm512_setzero_ps(),
                      _mm512_setzero_ps(), _mm512_setzero_ps() };
    for (unsigned i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++) {
            __m512 ax = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i + 16 * j)));
            __m512 ay = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(y + i + 16 * j)));
            sum[j] = _mm512_fmadd_ps(ax, ay, sum[j]);
        }
    sum[0] = _mm512_add_ps(sum[0], sum[2]);
    sum[1] = _mm512_add_ps(sum[1], sum[3]);
    sum[0] = _mm512_add_ps(sum[0], sum[1]);
    double sumf = _mm512_reduce_add_ps(sum[0]);
    for (unsigned i = np; i < n; i++)
        sumf += (double)(_cvtsh_ss(x[i]) * _cvtsh_ss(y[i]));
    return (float)sumf;
}
#endif

/* The same in plain C (kern_ref.c's description, for CPUs without
 * AVX-512). */
static float ggml_vec_dot_f16_c(unsigned n, const uint16_t *x, const uint16_t *y)
{
    const unsigned np = n & ~63u;
    float acc[64] = { 0 }, a[16], t8[8], t4[4];
    for (unsigned i = 0; i < np; i++)
        acc[i % 64] = fmaf(kt_ref_h2f(x[i]), kt_ref_h2f(y[i]), acc[i % 64]);
    for (int l = 0; l < 16; l++)
        a[l] = (acc[l] + acc[32 + l]) + (acc[16 + l] + acc[48 + l]);
    for (int l = 0; l < 8; l++)
        t8[l] = a[l + 8] + a[l];
    for (int l = 0; l < 4; l++)
        t4[l] = t8[l + 4] + t8[l];
    double sumf = (t4[0] + t4[2]) + (t4[1] + t4[3]);
    for (unsigned i = np; i < n; i++)
        sumf += (double)(kt_ref_h2f(x[i]) * kt_ref_h2f(y[i]));
    return (float)sumf;
}

/* One-tile matrices: every table's sums are llama.cpp's, bit for bit. */
void test_tile_mv_llama(void **state)
{
    (void)state;
    static const unsigned shapes[][2] = { { 16, 32 }, { 20, 64 }, { 37, 96 },
                                          { 128, 256 }, { 5, 224 } };
    uint8_t *rows = malloc(128 * 8 * 34), *pl = malloc(kern_tile_payload_size(KERN_F32, 128, 256));
    uint16_t *wh = malloc(128 * 256 * 2), xh[256], xd[8];
    float x[256], y[128];
    int8_t xq[256];
    kern_act a;
    assert_int_equal(kern_act_init(&a, 256), 0);
#if HAVE_X86
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && kt_have_f16c();
    const int avx512 = __builtin_cpu_supports("avx512f") && kt_have_f16c();
#endif
    for (int iter = 0; iter < 8; iter++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            unsigned R = shapes[si][0], C = shapes[si][1], nb = C / 32;
            for (unsigned i = 0; i < C; i++)
                x[i] = (iter % 3 ? 1.0f : kt_rng_mag()) * kt_rng_unit();
            kt_llama_q8_0(x, (int)C, xq, xd);
            for (int t = KERN_Q8_0; t <= KERN_Q4_0; t++) {
                const size_t rb = nb * (t == KERN_Q8_0 ? 34 : 18);
                fill_ggml_rows((enum kern_type)t, R, C, rows);
                assert_int_equal(kern_tile_pack((enum kern_type)t, R, C,
                                                t == KERN_Q8_0 ? KERN_SRC_GGML_Q8_0
                                                               : KERN_SRC_GGML_Q4_0,
                                                rows, rb, pl), 0);
                kern_act_set(&a, x, C, KERN_NEED(t));
                for (int rp = 0; rp <= (t == KERN_Q4_0); rp++)
                    for (int isa = 0; isa < KERN_NISA; isa++) {
                        const kern_ops *ops = kern_ops_for((enum kern_isa)isa);
                        if (!ops)
                            continue;
                        memset(y, 0, sizeof y);
                        kt_tile_fn(ops, (enum kern_type)t, rp)(pl, R, C, &a, 0, y);
                        for (unsigned r = 0; r < R; r++) {
                            const uint8_t *wr = rows + r * rb;
                            float want = rp ? ggml_gemv_q4(wr, nb, xq, xd)
                                            : ggml_vec_dot_q((enum kern_type)t, wr, nb, xq, xd);
#if HAVE_X86
                            if (!rp && avx2)
                                assert_true(kt_fbits(want) == kt_fbits(ggml_vec_dot_q_avx2(
                                                (enum kern_type)t, wr, nb, xq, xd)));
#endif
                            if (kt_fbits(y[r]) != kt_fbits(want))
                                fail_msg("%s %s%s %ux%u row %u: %.9g, llama.cpp %.9g",
                                         ops->name, kern_type_name((enum kern_type)t),
                                         rp ? " (repacked)" : "", R, C, r, y[r], want);
                        }
                    }
            }
            /* F16: any width up to a tile, tails included */
            unsigned Cf = C - (unsigned)(iter * 7) % 30;
            for (unsigned i = 0; i < R * Cf; i++)
                wh[i] = kt_ref_f2h(kt_rng_unit());
            for (unsigned i = 0; i < Cf; i++)
                xh[i] = kt_ref_f2h(x[i]);
            assert_int_equal(kern_tile_pack(KERN_F16, R, Cf, KERN_SRC_F16, wh, Cf * 2, pl), 0);
            kern_act_set(&a, x, Cf, KERN_NEED(KERN_F16));
            for (int isa = 0; isa < KERN_NISA; isa++) {
                const kern_ops *ops = kern_ops_for((enum kern_isa)isa);
                if (!ops)
                    continue;
                memset(y, 0, sizeof y);
                ops->tile_mv[KERN_F16](pl, R, Cf, &a, 0, y);
                for (unsigned r = 0; r < R; r++) {
                    float want = ggml_vec_dot_f16_c(Cf, wh + r * Cf, xh);
#if HAVE_X86
                    if (avx512)
                        assert_true(kt_fbits(want) == kt_fbits(ggml_vec_dot_f16_avx512(
                                                      Cf, wh + r * Cf, xh)));
#endif
                    if (kt_fbits(y[r]) != kt_fbits(want))
                        fail_msg("%s f16 %ux%u row %u: %.9g, llama.cpp %.9g",
                                 ops->name, R, Cf, r, y[r], want);
                }
            }
        }
    kern_act_free(&a);
    free(rows);
    free(pl);
    free(wh);
}

void test_dot_axpy(void **state)
{
    (void)state;
    static const unsigned ns[] = { 0, 1, 7, 15, 16, 17, 31, 63, 64, 65, 100, 1000 };
    float a[1000], b[1000], y0[1000], yr[1000], y[1000];
    for (int isa = 0; isa < KERN_NISA; isa++) {
        const kern_ops *ops = kern_ops_for((enum kern_isa)isa);
        if (!ops)
            continue;
        for (size_t s = 0; s < sizeof ns / sizeof ns[0]; s++) {
            unsigned n = ns[s];
            double exact = 0, mag = 0;
            for (unsigned i = 0; i < n; i++) {
                a[i] = kt_rng_unit();
                b[i] = kt_rng_mag() * kt_rng_unit();
                y0[i] = kt_rng_unit();
                exact += (double)a[i] * b[i];
                mag += fabs((double)a[i] * b[i]);
            }
            float d = ops->dot_f32(a, b, n);
            assert_true(fabs(d - exact) <= (n + 4) * 1.2e-7 * mag + 1e-30);
            float alpha = kt_rng_unit();
            memcpy(yr, y0, sizeof y0);
            memcpy(y, y0, sizeof y0);
            kern_ops_ref()->axpy_f32(yr, alpha, b, n);
            ops->axpy_f32(y, alpha, b, n);
            assert_memory_equal(y, yr, sizeof y);
            for (unsigned i = 0; i < n; i++)
                assert_true(fabs(yr[i] - (y0[i] + (double)alpha * b[i])) <=
                            1.2e-7 * (fabs(y0[i]) + fabs(alpha * b[i])));
        }
    }
}
