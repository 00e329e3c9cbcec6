/*
 * test_kern.c — tests of src/kernels, with test_kern_mv.c and test_kern_vec.c
 * one program (kern_test.h says which file holds what).
 *
 * Oracles, from the most independent up:
 *   - the F16C instructions for the half conversions (every half, millions
 *     of floats), and a double-precision rounding for the same values;
 *   - the tile layout as the text of kern.h states it, recomputed here
 *     without the module's own index helpers;
 *   - GGML's dequantisation and llama.cpp's x86 quantize_row_q8_0 and
 *     vec_dot kernels, re-typed from their sources (with the same
 *     intrinsics where this CPU runs them);
 *   - hashes of the outputs of ggml's own CPU operators (built as the
 *     llama.cpp that produced shared/models/expected) for fixed inputs:
 *     the llama.cpp arithmetic kernels must match them bit for bit;
 *   - naive double-precision maths for the mat-vec reference and the
 *     vector kernels;
 *   - the scalar reference (kern_ops_ref) for every SIMD table this CPU
 *     runs: kern_impl.h documents that they reproduce it bit for bit, so
 *     the comparison is exact.
 *
 * "The report" (with its section numbers) is the Pipeline-Native
 * Transformers report.
 */
#include "config.h"

#include "kern_test.h"

/* Nearest half to a finite float, ties to even, computed in doubles. */
static uint16_t dbl_f2h(float f)
{
    double a = fabs((double)f);
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    if (a >= 65520.0)
        return sign | 0x7C00;
    int e;
    frexp(a, &e);                       /* a = m * 2^e, m in [0.5, 1) */
    int exp = e - 1;                    /* a in [2^exp, 2^(exp+1)) */
    if (a == 0.0 || exp < -14)
        exp = -14;                      /* subnormal spacing 2^-24 */
    double ulp = ldexp(1.0, exp - 10);
    double q = nearbyint(a / ulp);      /* default mode: ties to even */
    double v = q * ulp;
    if (v == 0.0)
        return sign;
    frexp(v, &e);
    exp = e - 1;
    if (exp < -14)
        return sign | (uint16_t)(v / ldexp(1.0, -24));
    uint16_t mant = (uint16_t)(v / ldexp(1.0, exp - 10)) - 1024;
    return sign | (uint16_t)((exp + 15) << 10) | mant;
}

/* ---- names and sizes -------------------------------------------------- */

static void test_names(void **state)
{
    (void)state;
    static const char *const t[] = { "f32", "f16", "q8_0", "q4_0" };
    for (int i = 0; i < KT_NLEGACY; i++) {
        assert_string_equal(kern_type_name((enum kern_type)i), t[i]);
        assert_int_equal(kern_type_from_name(t[i]), i);
    }
    assert_int_equal(kern_type_from_name("q9_1"), -1);
    assert_int_equal(kern_type_from_name(""), -1);
    assert_int_equal(kern_type_from_name(NULL), -1);
    assert_int_equal(KERN_F32, 0);
    assert_int_equal(KERN_Q4_0, 3);

    static const char *const isa[] = { "scalar", "avx2", "avx512", "avx512-vnni" };
    for (int i = 0; i < KERN_NISA; i++)
        assert_string_equal(kern_isa_name((enum kern_isa)i), isa[i]);
    assert_non_null(kern_isa_name(KERN_NISA));
    assert_string_equal(kern_ops_ref()->name, "scalar");
}

static void test_payload_size(void **state)
{
    (void)state;
    assert_int_equal(kern_tile_payload_size(KERN_Q4_0, 128, 256), 18432);
    for (unsigned r = 1; r <= 128; r += 9)
        for (unsigned c = 1; c <= 256; c += 13) {
            size_t rp = (r + 15) / 16 * 16, cp = (c + 31) / 32 * 32;
            assert_int_equal(kern_tile_payload_size(KERN_F32, r, c), rp * cp * 4);
            assert_int_equal(kern_tile_payload_size(KERN_F16, r, c), rp * cp * 2);
            assert_int_equal(kern_tile_payload_size(KERN_Q8_0, r, c),
                             rp * (cp / 32) * 2 + rp * cp);
            assert_int_equal(kern_tile_payload_size(KERN_Q4_0, r, c),
                             rp * (cp / 32) * 2 + rp * cp / 2);
        }
    assert_int_equal(kern_tile_payload_size(KERN_F32, 0, 10), 0);
    assert_int_equal(kern_tile_payload_size(KERN_F32, 129, 10), 0);
    assert_int_equal(kern_tile_payload_size(KERN_F32, 10, 0), 0);
    assert_int_equal(kern_tile_payload_size(KERN_F32, 10, 257), 0);
    assert_int_equal(kern_tile_payload_size(KERN_NTYPES, 10, 10), 0);
}

/* ---- half precision ------------------------------------------------------- */

static void test_fp16_all_halves(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = kern_fp16_to_fp32((uint16_t)h);
        if (kt_have_f16c()) {
#if HAVE_X86
            if (kt_fbits(f) != kt_fbits(kt_hw_h2f((uint16_t)h)))
                fail_msg("fp16_to_fp32(0x%04x) = 0x%08x, F16C 0x%08x", h,
                         kt_fbits(f), kt_fbits(kt_hw_h2f((uint16_t)h)));
            uint16_t back = kern_fp32_to_fp16(f);
            if (back != kt_hw_f2h(f))
                fail_msg("fp32_to_fp16(fp16_to_fp32(0x%04x)) = 0x%04x, F16C 0x%04x",
                         h, back, kt_hw_f2h(f));
#endif
        }
        int e = (h >> 10) & 31, m = h & 1023;
        if (e != 31) {
            /* value check independent of any hardware */
            double v = e ? ldexp(1.0 + m / 1024.0, e - 15) : ldexp(m, -24);
            if (h & 0x8000)
                v = -v;
            assert_true((double)f == v && !!signbit(f) == !!(h & 0x8000));
            assert_int_equal(kern_fp32_to_fp16(f), h);   /* exact round trip */
        } else {
            assert_true(m ? isnan(f) : isinf(f));
        }
    }
}

static void test_fp32_to_fp16_many(void **state)
{
    (void)state;
    /* every sign/exponent/top-10-mantissa pattern with low 13 bits from a
     * set that hits ties, just-below and just-above ties */
    static const uint32_t low[] = {
        0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x0800, 0x17FF,
        0x0A5A, 0x1234,
    };
    unsigned long n = 0;
    for (uint32_t hi = 0; hi < (1u << 19); hi++)
        for (size_t k = 0; k < sizeof low / sizeof low[0]; k++) {
            uint32_t u = (hi << 13) | low[k];
            float f = kt_bitsf(u);
            uint16_t h = kern_fp32_to_fp16(f);
#if HAVE_X86
            if (kt_have_f16c() && h != kt_hw_f2h(f))
                fail_msg("fp32_to_fp16(0x%08x) = 0x%04x, F16C 0x%04x", u, h,
                         kt_hw_f2h(f));
#endif
            if (isfinite(f) && h != dbl_f2h(f))
                fail_msg("fp32_to_fp16(0x%08x) = 0x%04x, exact rounding 0x%04x",
                         u, h, dbl_f2h(f));
            n++;
        }
    for (int i = 0; i < 4000000; i++) {
        uint32_t u = (uint32_t)kt_rng_u64();
        float f = kt_bitsf(u);
        uint16_t h = kern_fp32_to_fp16(f);
#if HAVE_X86
        if (kt_have_f16c() && h != kt_hw_f2h(f))
            fail_msg("fp32_to_fp16(0x%08x) = 0x%04x, F16C 0x%04x", u, h, kt_hw_f2h(f));
#endif
        if (isfinite(f) && h != dbl_f2h(f))
            fail_msg("fp32_to_fp16(0x%08x) = 0x%04x, exact 0x%04x", u, h, dbl_f2h(f));
    }
    assert_true(n == 10ul << 19);
    /* every positive float whose half is subnormal or the smallest normals:
     * there rounding looks at up to 24 dropped bits, not just 13 */
    for (uint32_t u = 101u << 23; u < 114u << 23; u++) {
        float f = kt_bitsf(u);
        uint16_t h = kern_fp32_to_fp16(f);
#if HAVE_X86
        if (kt_have_f16c() && h != kt_hw_f2h(f))
            fail_msg("fp32_to_fp16(0x%08x) = 0x%04x, F16C 0x%04x", u, h, kt_hw_f2h(f));
#endif
        if (!kt_have_f16c() && h != dbl_f2h(f))
            fail_msg("fp32_to_fp16(0x%08x) = 0x%04x, exact 0x%04x", u, h, dbl_f2h(f));
    }
    /* landmarks */
    assert_int_equal(kern_fp32_to_fp16(65504.0f), 0x7BFF);
    assert_int_equal(kern_fp32_to_fp16(65519.99f), 0x7BFF);
    assert_int_equal(kern_fp32_to_fp16(65520.0f), 0x7C00);
    assert_int_equal(kern_fp32_to_fp16(ldexpf(1.0f, -25)), 0x0000);
    assert_int_equal(kern_fp32_to_fp16(ldexpf(1.5f, -25)), 0x0001);
    assert_int_equal(kern_fp32_to_fp16(ldexpf(3.0f, -25)), 0x0002);  /* tie -> even */
    assert_int_equal(kern_fp32_to_fp16(-0.0f), 0x8000);
    assert_int_equal(kern_fp32_to_fp16(1.0f + ldexpf(1.0f, -11)), 0x3C00);
    assert_int_equal(kern_fp32_to_fp16(1.0f + ldexpf(3.0f, -11)), 0x3C02);
    assert_true((kern_fp32_to_fp16(NAN) & 0x7FFF) > 0x7C00);
}

static void test_bf16(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++)
        assert_int_equal(kt_fbits(kern_bf16_to_fp32((uint16_t)h)), h << 16);
}

/* ---- the tile layout, as kern.h states it ------------------------------ */


static void build_ggml_q8(uint8_t *blk, float dmag)
{
    uint16_t d = kt_ref_f2h(dmag * (0.5f + 0.5f * fabsf(kt_rng_unit())));
    memcpy(blk, &d, 2);
    for (int k = 0; k < 32; k++)
        blk[2 + k] = (uint8_t)(int8_t)((int)kt_rng_below(255) - 127);
}

static void build_ggml_q4(uint8_t *blk, float dmag)
{
    uint16_t d = kt_ref_f2h(dmag * (0.5f + 0.5f * fabsf(kt_rng_unit())));
    memcpy(blk, &d, 2);
    for (int k = 0; k < 16; k++)
        blk[2 + k] = (uint8_t)kt_rng_below(256);
}

/* GGML's dequantize_row_q8_0 / _q4_0 for one block. */
static void ggml_deq_q8(const uint8_t *blk, float *y)
{
    uint16_t dh;
    memcpy(&dh, blk, 2);
    const float d = kt_ref_h2f(dh);
    for (int j = 0; j < 32; j++)
        y[j] = (float)(int8_t)blk[2 + j] * d;
}

static void ggml_deq_q4(const uint8_t *blk, float *y)
{
    uint16_t dh;
    memcpy(&dh, blk, 2);
    const float d = kt_ref_h2f(dh);
    for (int j = 0; j < 16; j++) {
        const int x0 = (blk[2 + j] & 0x0F) - 8;
        const int x1 = (blk[2 + j] >> 4) - 8;
        y[j] = x0 * d;
        y[j + 16] = x1 * d;
    }
}

static void test_layout_dense(void **state)
{
    (void)state;
    static const unsigned shapes[][2] = { {1, 1}, {17, 33}, {128, 256}, {40, 100} };
    for (size_t s = 0; s < 4; s++) {
        unsigned R = shapes[s][0], C = shapes[s][1];
        kt_geo g = kt_geo_of(R, C);
        float *src = malloc((size_t)R * C * 4);
        uint16_t *hsrc = malloc((size_t)R * C * 2);
        for (unsigned r = 0; r < R; r++)
            for (unsigned c = 0; c < C; c++) {
                src[r * C + c] = (float)(r * 1000 + c + 1);
                hsrc[r * C + c] = kt_ref_f2h((float)(r * 8 + c % 8 + 1));
            }
        uint8_t *pl = malloc(kern_tile_payload_size(KERN_F32, R, C));
        assert_int_equal(kern_tile_pack(KERN_F32, R, C, KERN_SRC_F32, src,
                                        C * 4, pl), 0);
        for (unsigned r = 0; r < g.rp; r++)
            for (unsigned c = 0; c < g.cp; c++) {
                /* F32: for panel p, column c: 16 x f32 w[16p+i][c] */
                float v;
                memcpy(&v, pl + 4 * (((size_t)(r / 16) * g.cp + c) * 16 + r % 16), 4);
                float want = r < R && c < C ? src[r * C + c] : 0.0f;
                assert_true(kt_fbits(v) == kt_fbits(want));
            }
        free(pl);
        pl = malloc(kern_tile_payload_size(KERN_F16, R, C));
        assert_int_equal(kern_tile_pack(KERN_F16, R, C, KERN_SRC_F16, hsrc,
                                        C * 2, pl), 0);
        for (unsigned r = 0; r < g.rp; r++)
            for (unsigned c = 0; c < g.cp; c++) {
                uint16_t v;
                memcpy(&v, pl + 2 * (((size_t)(r / 16) * g.cp + c) * 16 + r % 16), 2);
                uint16_t want = r < R && c < C ? hsrc[r * C + c] : 0;
                assert_int_equal(v, want);
            }
        free(pl);
        free(src);
        free(hsrc);
    }
}

static void test_layout_quant(void **state)
{
    (void)state;
    static const unsigned shapes[][2] = {
        {1, 32}, {16, 256}, {17, 64}, {128, 256}, {5, 40}, {33, 172},
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        unsigned R = shapes[s][0], C = shapes[s][1];
        kt_geo g = kt_geo_of(R, C);
        size_t stride8 = (size_t)g.nb * 34 + 7, stride4 = (size_t)g.nb * 18 + 3;
        uint8_t *q8src = malloc(R * stride8), *q4src = malloc(R * stride4);
        for (unsigned r = 0; r < R; r++)
            for (unsigned b = 0; b < g.nb; b++) {
                build_ggml_q8(q8src + r * stride8 + b * 34, kt_rng_mag());
                build_ggml_q4(q4src + r * stride4 + b * 18, kt_rng_mag());
            }

        uint8_t *pl = malloc(kern_tile_payload_size(KERN_Q8_0, R, C));
        assert_int_equal(kern_tile_pack(KERN_Q8_0, R, C, KERN_SRC_GGML_Q8_0,
                                        q8src, stride8, pl), 0);
        for (unsigned r = 0; r < g.rp; r++)
            for (unsigned b = 0; b < g.nb; b++) {
                unsigned p = r / 16, i = r % 16;
                const uint8_t *blk = r < R ? q8src + r * stride8 + b * 34 : NULL;
                /* scales: for panel p, block b: 16 x f16 d[16p+i][b] */
                uint16_t d, want_d = 0;
                memcpy(&d, pl + 2 * (((size_t)p * g.nb + b) * 16 + i), 2);
                if (r < R)
                    memcpy(&want_d, blk, 2);
                assert_int_equal(d, want_d);
                /* quants: panel p, block b, quad g: byte[4i+j] = q + 128 */
                for (unsigned q = 0; q < 8; q++)
                    for (unsigned j = 0; j < 4; j++) {
                        unsigned c = 32 * b + 4 * q + j;
                        uint8_t v = pl[g.sbytes + (((size_t)p * g.nb + b) * 8 + q) * 64
                                       + 4 * i + j];
                        uint8_t want = r < R && c < C
                                     ? (uint8_t)((int8_t)blk[2 + 4 * q + j] + 128) : 128;
                        assert_int_equal(v, want);
                    }
            }
        free(pl);

        pl = malloc(kern_tile_payload_size(KERN_Q4_0, R, C));
        assert_int_equal(kern_tile_pack(KERN_Q4_0, R, C, KERN_SRC_GGML_Q4_0,
                                        q4src, stride4, pl), 0);
        for (unsigned r = 0; r < g.rp; r++)
            for (unsigned b = 0; b < g.nb; b++) {
                unsigned p = r / 16, i = r % 16;
                const uint8_t *blk = r < R ? q4src + r * stride4 + b * 18 : NULL;
                uint16_t d, want_d = 0;
                memcpy(&d, pl + 2 * (((size_t)p * g.nb + b) * 16 + i), 2);
                if (r < R)
                    memcpy(&want_d, blk, 2);
                assert_int_equal(d, want_d);
                /* quants: chunk q: byte[4i+j] = GGML byte 4q+j; low nibble
                 * column 32b+4q+j, high nibble column 32b+16+4q+j */
                for (unsigned q = 0; q < 4; q++)
                    for (unsigned j = 0; j < 4; j++) {
                        unsigned clo = 32 * b + 4 * q + j, chi = clo + 16;
                        uint8_t v = pl[g.sbytes + (((size_t)p * g.nb + b) * 4 + q) * 64
                                       + 4 * i + j];
                        uint8_t gb = r < R ? blk[2 + 4 * q + j] : 0x88;
                        uint8_t lo = clo < C ? gb & 0x0F : 8;
                        uint8_t hi = chi < C ? gb >> 4 : 8;
                        if (r >= R)
                            lo = hi = 8;
                        assert_int_equal(v, (uint8_t)(lo | hi << 4));
                    }
            }
        free(pl);
        free(q8src);
        free(q4src);
    }
}

/* GGML blocks into every tile type: same type bit-exact, F32 equal to
 * GGML's dequantisation, F16 its rounding, the other quant within a step. */
static void test_ggml_import(void **state)
{
    (void)state;
    static const unsigned shapes[][2] = { {16, 256}, {7, 96}, {128, 256}, {33, 64} };
    for (size_t s = 0; s < 4; s++)
        for (int st = 0; st < 2; st++) {
            unsigned R = shapes[s][0], C = shapes[s][1];
            enum kern_src src = st ? KERN_SRC_GGML_Q4_0 : KERN_SRC_GGML_Q8_0;
            size_t bsz = st ? 18 : 34, nb = C / 32, stride = nb * bsz;
            uint8_t *blocks = malloc(R * stride);
            float *deq = malloc((size_t)R * C * 4), *out = malloc((size_t)R * C * 4);
            float rowbuf[256];
            for (unsigned r = 0; r < R; r++)
                for (unsigned b = 0; b < nb; b++) {
                    uint8_t *blk = blocks + r * stride + b * bsz;
                    if (st) {
                        build_ggml_q4(blk, kt_rng_mag());
                        ggml_deq_q4(blk, deq + r * C + 32 * b);
                    } else {
                        build_ggml_q8(blk, kt_rng_mag());
                        ggml_deq_q8(blk, deq + r * C + 32 * b);
                    }
                }
            for (int t = 0; t < KT_NLEGACY; t++) {
                uint8_t *pl = malloc(kern_tile_payload_size((enum kern_type)t, R, C));
                assert_int_equal(kern_tile_pack((enum kern_type)t, R, C, src,
                                                blocks, stride, pl), 0);
                assert_int_equal(kern_tile_finite((enum kern_type)t, R, C, pl), 1);
                kern_tile_unpack((enum kern_type)t, R, C, pl, out, C);
                int same = (t == KERN_Q8_0 && !st) || (t == KERN_Q4_0 && st);
                for (unsigned r = 0; r < R; r++) {
                    kern_tile_row((enum kern_type)t, R, C, pl, r, rowbuf);
                    assert_memory_equal(rowbuf, out + r * C, C * 4);
                    for (unsigned b = 0; b < nb; b++) {
                        float amax = 0;
                        for (unsigned k = 0; k < 32; k++)
                            amax = fmaxf(amax, fabsf(deq[r * C + 32 * b + k]));
                        for (unsigned k = 0; k < 32; k++) {
                            size_t i = r * C + 32 * b + k;
                            if (same || t == KERN_F32)
                                assert_true(kt_fbits(out[i]) == kt_fbits(deq[i]));
                            else if (t == KERN_F16)
                                assert_true(kt_fbits(out[i]) ==
                                            kt_fbits(kt_ref_h2f(kt_ref_f2h(deq[i]))));
                            else {
                                float qmax = t == KERN_Q8_0 ? 127.0f : 7.0f;
                                float d = amax / qmax, dh = kt_ref_h2f(kt_ref_f2h(d));
                                float tol = 0.50001f * d + (qmax + 1.0f) * fabsf(dh - d)
                                          + 1e-6f * amax;
                                assert_true(fabsf(out[i] - deq[i]) <= tol);
                            }
                        }
                    }
                }
                free(pl);
            }
            free(blocks);
            free(deq);
            free(out);
        }
}

/* ---- packing from floats ------------------------------------------------ */


static void test_pack_roundtrip(void **state)
{
    (void)state;
    static const unsigned rows[] = { 1, 15, 16, 17, 100, 128 };
    static const unsigned cols[] = { 1, 31, 32, 33, 172, 256 };
    float *w = malloc(128 * 256 * 4), *out = malloc(128 * 256 * 4);
    uint16_t *wh = malloc(128 * 256 * 2), *wb = malloc(128 * 256 * 2);
    uint8_t *pl = malloc(kern_tile_payload_size(KERN_F32, 128, 256));

    for (size_t ri = 0; ri < 6; ri++)
        for (size_t ci = 0; ci < 6; ci++) {
            unsigned R = rows[ri], C = cols[ci];
            kt_fill_matrix(w, R, C);
            for (size_t i = 0; i < (size_t)R * C; i++) {
                wh[i] = kt_ref_f2h(w[i]);
                wb[i] = (uint16_t)(kt_fbits(w[i]) >> 16);      /* truncated bf16 */
            }
            /* F32 exact */
            assert_int_equal(kern_tile_pack(KERN_F32, R, C, KERN_SRC_F32, w, C * 4, pl), 0);
            kern_tile_unpack(KERN_F32, R, C, pl, out, C);
            assert_memory_equal(out, w, (size_t)R * C * 4);
            /* F16: exact from halves, and from their float values */
            assert_int_equal(kern_tile_pack(KERN_F16, R, C, KERN_SRC_F16, wh, C * 2, pl), 0);
            kern_tile_unpack(KERN_F16, R, C, pl, out, C);
            for (size_t i = 0; i < (size_t)R * C; i++)
                assert_true(kt_fbits(out[i]) == kt_fbits(kt_ref_h2f(wh[i])));
            for (size_t i = 0; i < (size_t)R * C; i++)
                w[i] = kt_ref_h2f(wh[i]);
            assert_int_equal(kern_tile_pack(KERN_F16, R, C, KERN_SRC_F32, w, C * 4, pl), 0);
            kern_tile_unpack(KERN_F16, R, C, pl, out, C);
            assert_memory_equal(out, w, (size_t)R * C * 4);
            /* BF16 into F32 exact */
            assert_int_equal(kern_tile_pack(KERN_F32, R, C, KERN_SRC_BF16, wb, C * 2, pl), 0);
            kern_tile_unpack(KERN_F32, R, C, pl, out, C);
            for (size_t i = 0; i < (size_t)R * C; i++)
                assert_true(kt_fbits(out[i]) == (uint32_t)wb[i] << 16);

            /* quantised: within half a step (plus the f16 rounding of the
             * scale), from F32 and F16 sources alike */
            for (int t = KERN_Q8_0; t <= KERN_Q4_0; t++)
                for (int from16 = 0; from16 < 2; from16++) {
                    assert_int_equal(kern_tile_pack((enum kern_type)t, R, C,
                                                    from16 ? KERN_SRC_F16 : KERN_SRC_F32,
                                                    from16 ? (void *)wh : (void *)w,
                                                    from16 ? C * 2 : C * 4, pl), 0);
                    assert_int_equal(kern_tile_finite((enum kern_type)t, R, C, pl), 1);
                    kern_tile_unpack((enum kern_type)t, R, C, pl, out, C);
                    float qmax = t == KERN_Q8_0 ? 127.0f : 7.0f;
                    for (unsigned r = 0; r < R; r++)
                        for (unsigned b = 0; b * 32 < C; b++) {
                            float amax = 0;
                            unsigned end = b * 32 + 32 < C ? b * 32 + 32 : C;
                            for (unsigned c = b * 32; c < end; c++)
                                amax = fmaxf(amax, fabsf(w[r * C + c]));
                            float d = amax / qmax, dh = kt_ref_h2f(kt_ref_f2h(d));
                            float tol = 0.50001f * d + (qmax + 1.0f) * fabsf(dh - d) + 1e-6f * amax;
                            for (unsigned c = b * 32; c < end; c++)
                                if (!(fabsf(out[r * C + c] - w[r * C + c]) <= tol))
                                    fail_msg("%s %ux%u (%u,%u): %g vs %g (tol %g)",
                                             kern_type_name((enum kern_type)t), R, C,
                                             r, c, out[r * C + c], w[r * C + c], tol);
                        }
                }
        }
    free(w);
    free(out);
    free(wh);
    free(wb);
    free(pl);
}

/* The report's quantisers on hand-computed blocks. */
static void test_quantiser_formula(void **state)
{
    (void)state;
    uint8_t pl[16 * 2 + 16 * 32];
    float out[32];
    kt_geo g = kt_geo_of(1, 32);

    /* Q4_0, s = 7/7 = 1: q = round(w) + 8, halves away from zero */
    float w4[32] = { 7, -7, 2.5f, -2.5f, 0.49f, 3.5f, -3.5f, 1, -0.5f };
    int q4[32] = { 15, 1, 11, 5, 8, 12, 4, 9, 7 };
    for (int k = 9; k < 32; k++)
        q4[k] = 8;
    /* Q4_0, s = 14/7 = 2 */
    float w4b[32] = { 14, 5, -5, 1, 0.9f, -14, 13 };
    int q4b[32] = { 15, 11, 5, 9, 8, 1, 15 };       /* 13/2 = 6.5 -> 7 */
    for (int k = 7; k < 32; k++)
        q4b[k] = 8;
    for (int pass = 0; pass < 2; pass++) {
        const float *w = pass ? w4b : w4;
        const int *q = pass ? q4b : q4;
        assert_int_equal(kern_tile_pack(KERN_Q4_0, 1, 32, KERN_SRC_F32, w, 128, pl), 0);
        uint16_t d;
        memcpy(&d, pl, 2);
        assert_int_equal(d, pass ? 0x4000 : 0x3C00);        /* 2.0, 1.0 */
        for (int k = 0; k < 16; k++) {
            uint8_t byte = pl[g.sbytes + (k / 4) * 64 + k % 4];
            assert_int_equal(byte & 0x0F, q[k]);
            assert_int_equal(byte >> 4, q[k + 16]);
        }
        kern_tile_row(KERN_Q4_0, 1, 32, pl, 0, out);
        for (int k = 0; k < 32; k++)
            assert_true(out[k] == (float)(q[k] - 8) * (pass ? 2.0f : 1.0f));
    }

    /* Q8_0, d = 127/127 = 1, then d = 254/127 = 2 */
    float w8[32] = { 127, -127, 0.5f, -0.5f, 2.49f, 100.5f, -100.5f, 3 };
    int q8[32] = { 127, -127, 1, -1, 2, 101, -101, 3 };
    float w8b[32] = { 254, 5, -5, 1, 0.9f, -3, -254 };
    int q8b[32] = { 127, 3, -3, 1, 0, -2, -127 };
    for (int pass = 0; pass < 2; pass++) {
        const float *w = pass ? w8b : w8;
        const int *q = pass ? q8b : q8;
        assert_int_equal(kern_tile_pack(KERN_Q8_0, 1, 32, KERN_SRC_F32, w, 128, pl), 0);
        uint16_t d;
        memcpy(&d, pl, 2);
        assert_int_equal(d, pass ? 0x4000 : 0x3C00);
        for (int k = 0; k < 32; k++)
            assert_int_equal(pl[g.sbytes + (k / 4) * 64 + k % 4], q[k] + 128);
    }

    /* an all-zero block: scale 0, zero quants */
    float z[32] = { 0 };
    assert_int_equal(kern_tile_pack(KERN_Q4_0, 1, 32, KERN_SRC_F32, z, 128, pl), 0);
    assert_int_equal(pl[0] | pl[1], 0);
    for (int k = 0; k < 16; k++)
        assert_int_equal(pl[g.sbytes + (k / 4) * 64 + k % 4], 0x88);
    assert_int_equal(kern_tile_pack(KERN_Q8_0, 1, 32, KERN_SRC_F32, z, 128, pl), 0);
    for (int k = 0; k < 32; k++)
        assert_int_equal(pl[g.sbytes + (k / 4) * 64 + k % 4], 128);

    /* s = 1/7 is stored through f16 but quantises with the f32 value */
    float w1[32] = { 1.0f, 0.5f, -0.3f };
    assert_int_equal(kern_tile_pack(KERN_Q4_0, 1, 32, KERN_SRC_F32, w1, 128, pl), 0);
    uint16_t d;
    memcpy(&d, pl, 2);
    assert_int_equal(d, kt_ref_f2h(1.0f / 7.0f));
    assert_int_equal(pl[g.sbytes] & 0x0F, 15);
    assert_int_equal(pl[g.sbytes + 1] & 0x0F, (int)roundf(0.5f / (1.0f / 7.0f)) + 8);
    assert_int_equal(pl[g.sbytes + 2] & 0x0F, (int)roundf(-0.3f / (1.0f / 7.0f)) + 8);
}

static void test_pack_rejects(void **state)
{
    (void)state;
    float w[64] = { 1, 2, 3 };
    uint8_t pl[4096];
    assert_int_equal(kern_tile_pack(KERN_F32, 0, 4, KERN_SRC_F32, w, 16, pl), -1);
    assert_int_equal(kern_tile_pack(KERN_F32, 129, 4, KERN_SRC_F32, w, 16, pl), -1);
    assert_int_equal(kern_tile_pack(KERN_F32, 1, 257, KERN_SRC_F32, w, 16, pl), -1);
    assert_int_equal(kern_tile_pack(KERN_F32, 1, 4, KERN_SRC_F32, NULL, 16, pl), -1);
    assert_int_equal(kern_tile_pack(KERN_NTYPES, 1, 4, KERN_SRC_F32, w, 16, pl), -1);
    for (int t = 0; t < KT_NLEGACY; t++) {
        w[5] = NAN;
        assert_int_equal(kern_tile_pack((enum kern_type)t, 1, 8, KERN_SRC_F32, w, 32, pl), -1);
        w[5] = INFINITY;
        assert_int_equal(kern_tile_pack((enum kern_type)t, 1, 8, KERN_SRC_F32, w, 32, pl), -1);
        w[5] = 0;
        assert_int_equal(kern_tile_pack((enum kern_type)t, 1, 8, KERN_SRC_F32, w, 32, pl), 0);
    }
    /* overflow of f16 weights or scales */
    w[5] = 70000.0f;
    assert_int_equal(kern_tile_pack(KERN_F16, 1, 8, KERN_SRC_F32, w, 32, pl), -1);
    assert_int_equal(kern_tile_pack(KERN_Q8_0, 1, 8, KERN_SRC_F32, w, 32, pl), 0);
    w[5] = 1e7f;        /* d = 1e7/127 > 65504 */
    assert_int_equal(kern_tile_pack(KERN_Q8_0, 1, 8, KERN_SRC_F32, w, 32, pl), -1);
    assert_int_equal(kern_tile_pack(KERN_Q4_0, 1, 8, KERN_SRC_F32, w, 32, pl), -1);
    assert_int_equal(kern_tile_pack(KERN_F32, 1, 8, KERN_SRC_F32, w, 32, pl), 0);
    /* a GGML block with an inf scale */
    uint8_t blk[34] = { 0x00, 0x7C };
    assert_int_equal(kern_tile_pack(KERN_Q8_0, 1, 32, KERN_SRC_GGML_Q8_0, blk, 34, pl), -1);
    assert_int_equal(kern_tile_pack(KERN_F32, 1, 32, KERN_SRC_GGML_Q8_0, blk, 34, pl), -1);
}

static void test_tile_finite(void **state)
{
    (void)state;
    float w[16 * 64];
    uint8_t pl[16 * 64 * 4];
    for (int i = 0; i < 16 * 64; i++)
        w[i] = kt_rng_unit();
    for (int t = 0; t < KT_NLEGACY; t++) {
        assert_int_equal(kern_tile_pack((enum kern_type)t, 16, 64, KERN_SRC_F32, w,
                                        64 * 4, pl), 0);
        assert_int_equal(kern_tile_finite((enum kern_type)t, 16, 64, pl), 1);
        uint16_t bad = 0x7E00;          /* NaN: a scale, or an F16 weight */
        size_t at = t == KERN_F32 ? 4 * 37 : 2 * 21;
        if (t == KERN_F32) {
            float nan = NAN;
            memcpy(pl + at, &nan, 4);
        } else {
            memcpy(pl + at, &bad, 2);
        }
        assert_int_equal(kern_tile_finite((enum kern_type)t, 16, 64, pl), 0);
        if (t == KERN_F32)
            continue;
        /* every f16 of the scale area (F16: the weights), whatever its
         * position in a vector a faster check would take: Inf and NaN of
         * either sign refused, the largest finite values and zero passed */
        size_t n = t == KERN_F16 ? 16 * 64 : 16 * 64 / 32;
        const uint16_t refused[] = { 0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFFFF };
        const uint16_t passed[] = { 0x7BFF, 0xFBFF, 0x0000, 0x8000, 0x3C00 };
        assert_int_equal(kern_tile_pack((enum kern_type)t, 16, 64, KERN_SRC_F32, w,
                                        64 * 4, pl), 0);
        for (size_t i = 0; i < n; i++) {
            uint16_t keep;
            memcpy(&keep, pl + 2 * i, 2);
            for (size_t v = 0; v < sizeof refused / sizeof refused[0]; v++) {
                memcpy(pl + 2 * i, &refused[v], 2);
                if (kern_tile_finite((enum kern_type)t, 16, 64, pl) != 0)
                    fail_msg("type %d: %#x at f16 %zu passed", t, refused[v], i);
                memcpy(pl + 2 * i, &passed[v], 2);
                if (kern_tile_finite((enum kern_type)t, 16, 64, pl) != 1)
                    fail_msg("type %d: %#x at f16 %zu refused", t, passed[v], i);
            }
            memcpy(pl + 2 * i, &keep, 2);
        }
    }
}

/* ---- activations ------------------------------------------------------- */


#if HAVE_X86
/* The same, with the AVX2 intrinsics of llama.cpp's quantize_row_q8_0
 * re-typed: the scalar oracle above is checked against it. */
__attribute__((target("avx2,f16c"))) static void
llama_q8_0_avx2(const float *x, int k, int8_t *qs, uint16_t *dh)
{
    for (int i = 0; i < k / 32; i++, x += 32) {
        __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
        __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
        const __m256 signBit = _mm256_set1_ps(-0.0f);
        __m256 maxAbs = _mm256_andnot_ps(signBit, v0);
        maxAbs = _mm256_max_ps(maxAbs, _mm256_andnot_ps(signBit, v1));
        maxAbs = _mm256_max_ps(maxAbs, _mm256_andnot_ps(signBit, v2));
        maxAbs = _mm256_max_ps(maxAbs, _mm256_andnot_ps(signBit, v3));
        __m128 max4 = _mm_max_ps(_mm256_extractf128_ps(maxAbs, 1),
                                 _mm256_castps256_ps128(maxAbs));
        max4 = _mm_max_ps(max4, _mm_movehl_ps(max4, max4));
        max4 = _mm_max_ss(max4, _mm_movehdup_ps(max4));
        const float maxScalar = _mm_cvtss_f32(max4);
        dh[i] = (uint16_t)_cvtss_sh(maxScalar / 127.f, 0);
        const __m256 mul = _mm256_set1_ps(maxScalar != 0.0f ? 127.f / maxScalar : 0.0f);
        __m256 vs[4] = { v0, v1, v2, v3 };
        for (int j = 0; j < 4; j++) {
            __m256i q = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(vs[j], mul),
                                                           _MM_ROUND_NEAREST));
            int32_t t[8];
            _mm256_storeu_si256((__m256i *)t, q);
            for (int e = 0; e < 8; e++)
                qs[32 * i + 8 * j + e] = (int8_t)t[e];
        }
    }
}
#endif

static void test_act(void **state)
{
    (void)state;
    static const unsigned ns[] = { 1, 31, 32, 33, 100, 256, 300, 1000 };
    kern_act a;
    assert_int_equal(kern_act_init(&a, 1000), 0);
    assert_true(a.cap >= 1000);
    assert_int_equal((uintptr_t)a.f32 % 64, 0);
    assert_int_equal((uintptr_t)a.f16 % 64, 0);
    assert_int_equal((uintptr_t)a.q8 % 64, 0);
    assert_int_equal((uintptr_t)a.q8_d % 64, 0);
    assert_int_equal((uintptr_t)a.q8_sum % 64, 0);

    float x[1024];
    int8_t qs[1024];
    uint16_t dh[32];
    for (size_t s = 0; s < sizeof ns / sizeof ns[0]; s++) {
        unsigned n = ns[s], n_pad = (n + 31) / 32 * 32;
        /* dirty the buffers first, so "zero past n" is really checked */
        for (unsigned i = 0; i < 1024; i++)
            x[i] = 1000.0f * kt_rng_unit();
        kern_act_set(&a, x, 1000, KT_NEED_LEGACY);
        for (unsigned i = 0; i < n; i++) {
            x[i] = (i / 32) % 5 == 3 ? 0.0f : kt_rng_mag() * kt_rng_unit();
        }
        for (unsigned i = n; i < n_pad; i++)
            x[i] = 0.0f;                /* llama.cpp sees the padded row */
        kern_act_set(&a, x, n, KT_NEED_LEGACY);
        assert_int_equal(a.n, n);
        assert_int_equal(a.n_pad, n_pad);
        kt_llama_q8_0(x, (int)n_pad, qs, dh);
#if HAVE_X86
        if (__builtin_cpu_supports("avx2") && kt_have_f16c()) {
            int8_t qs2[1024];
            uint16_t dh2[32];
            llama_q8_0_avx2(x, (int)n_pad, qs2, dh2);
            assert_memory_equal(qs2, qs, n_pad);
            assert_memory_equal(dh2, dh, n_pad / 32 * 2);
        }
#endif
        for (unsigned i = 0; i < n_pad; i++) {
            assert_true(kt_fbits(a.f32[i]) == kt_fbits(i < n ? x[i] : 0.0f));
            assert_int_equal(a.f16[i], i < n ? kt_ref_f2h(x[i]) : 0);
            assert_int_equal(a.q8[i], qs[i]);
            if (i >= n)
                assert_int_equal(a.q8[i], 0);
        }
        for (unsigned b = 0; b < n_pad / 32; b++) {
            assert_true(kt_fbits(a.q8_d[b]) == kt_fbits(kt_ref_h2f(dh[b])));
            int sum = 0;
            for (int j = 0; j < 32; j++)
                sum += qs[32 * b + j];
            assert_int_equal(a.q8_sum[b], sum);
        }
    }
    kern_act_free(&a);
    kern_act_free(&a);                  /* a freed act may be freed again */
    assert_null(a.f32);

    assert_int_equal(kern_act_init(&a, 0), 0);
    kern_act_set(&a, x, 0, KT_NEED_LEGACY);
    assert_int_equal(a.n_pad, 0);
    kern_act_free(&a);
}

/* The two choices that set llama.cpp's x86 quantiser apart from its
 * portable quantize_row_q8_0_ref: halves round to even, and the
 * multiplier is 127/amax, not 1/(amax/127). */
static void test_act_rounding(void **state)
{
    (void)state;
    kern_act a;
    float x[32];
    assert_int_equal(kern_act_init(&a, 32), 0);

    /* amax 127: id is exactly 1, so x*id = x and every half is a tie */
    static const float ties[] = { 0.5f, -0.5f, 1.5f, 2.5f, -2.5f, 3.5f, 126.5f, -125.5f };
    static const int8_t even[] = { 0, 0, 2, 2, -2, 4, 126, -126 };
    for (int j = 0; j < 32; j++)
        x[j] = j < 8 ? ties[j] : j == 31 ? 127.0f : 0.25f * (float)(j - 16);
    kern_act_set(&a, x, 32, KERN_NEED(KERN_Q8_0));
    for (int j = 0; j < 8; j++)
        assert_int_equal(a.q8[j], even[j]);
    assert_int_equal(a.q8[31], 127);

    /* find amax and x where 127/amax and 1/(amax/127) quantise x apart */
    int found = 0;
    for (int tries = 0; tries < 200000 && !found; tries++) {
        float amax = 0.01f + kt_rng_mag() * fabsf(kt_rng_unit());
        float id_x86 = 127.f / amax, id_ref = 1.0f / (amax / 127.f);
        if (id_x86 == id_ref)
            continue;
        for (int q = 1; q < 127 && !found; q++) {
            /* a value whose product with one id lands just around q + 0.5 */
            float v = ((float)q + 0.5f) / id_x86;
            for (int s = -2; s <= 2 && !found; s++) {
                float vv = nextafterf(v, s < 0 ? 0.0f : INFINITY);
                for (int k = 0; k < (s < 0 ? -s : s); k++)
                    vv = nextafterf(vv, s < 0 ? 0.0f : INFINITY);
                float a1 = nearbyintf(vv * id_x86), a2 = roundf(vv * id_ref);
                if (a1 == a2 || vv >= amax)
                    continue;
                for (int j = 0; j < 32; j++)
                    x[j] = j == 0 ? vv : j == 1 ? amax : 0.0f;
                kern_act_set(&a, x, 32, KERN_NEED(KERN_Q4_0));
                assert_int_equal(a.q8[0], (int)a1);
                assert_int_equal(a.q8[1], 127);
                found = 1;
            }
        }
    }
    assert_true(found);
    kern_act_free(&a);
}

/* ---- dispatch -------------------------------------------------------------- */

static void test_isa_choose(void **state)
{
    (void)state;
    for (int best = 0; best < KERN_NISA; best++) {
        assert_int_equal(kern_isa_choose((enum kern_isa)best, NULL), best);
        assert_int_equal(kern_isa_choose((enum kern_isa)best, "bogus"), best);
        assert_int_equal(kern_isa_choose((enum kern_isa)best, ""), best);
        for (int want = 0; want < KERN_NISA; want++)
            assert_int_equal(kern_isa_choose((enum kern_isa)best,
                                             kern_isa_name((enum kern_isa)want)),
                             want < best ? want : best);
    }
}

static int has_word(const char *list, const char *w)
{
    size_t n = strlen(w);
    for (const char *p = list; (p = strstr(p, w)) != NULL; p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
            return 1;
    return 0;
}

static void test_cpu_features(void **state)
{
    (void)state;
    const char *f = kern_cpu_features();
    assert_non_null(f);
    assert_non_null(kern_ops_for(KERN_ISA_SCALAR));
    assert_ptr_equal(kern_ops_for(KERN_ISA_SCALAR), kern_ops_ref());
    assert_null(kern_ops_for(KERN_NISA));
    int avx2 = has_word(f, "avx2") && has_word(f, "fma") && has_word(f, "f16c");
    int avx512 = avx2 && has_word(f, "avx512f") && has_word(f, "avx512bw") &&
                 has_word(f, "avx512vl");
    int vnni = avx512 && has_word(f, "avx512vnni");
#if HAVE_X86 && HAVE_ISA_X86
    assert_int_equal(has_word(f, "avx2"), !!__builtin_cpu_supports("avx2"));
    assert_int_equal(has_word(f, "avx512vnni"), !!__builtin_cpu_supports("avx512vnni"));
#else
    avx2 = avx512 = vnni = 0;
#endif
    assert_int_equal(kern_ops_for(KERN_ISA_AVX2) != NULL, avx2);
    assert_int_equal(kern_ops_for(KERN_ISA_AVX512) != NULL, avx512);
    assert_int_equal(kern_ops_for(KERN_ISA_AVX512_VNNI) != NULL, vnni);
    print_message("cpu features: %s\n", f);
}

static enum kern_isa best_isa(void)
{
    int best = 0;
    for (int i = 0; i < KERN_NISA; i++)
        if (kern_ops_for((enum kern_isa)i))
            best = i;
    return (enum kern_isa)best;
}

/* kern_init in this process, with CFLOW_ISA=scalar. */
static void test_init_scalar(void **state)
{
    (void)state;
    setenv("CFLOW_ISA", "scalar", 1);
    const kern_ops *ops = kern_init();
    assert_non_null(ops);
    assert_int_equal(ops->isa, KERN_ISA_SCALAR);
    assert_ptr_equal(ops, kern_ops_ref());
    setenv("CFLOW_ISA", "avx2", 1);
    assert_ptr_equal(kern_init(), ops);       /* chosen once */
    unsetenv("CFLOW_ISA");
}

/* kern_init in fresh processes, for every CFLOW_ISA value. */
static void test_init_env(void **state)
{
    (void)state;
    static const char *const vals[] = {
        NULL, "scalar", "avx2", "avx512", "avx512-vnni", "bogus", "",
    };
    const enum kern_isa best = best_isa();
    for (int k = 0; k < KERN_NISA; k++)
        assert_int_equal(kern_isa_from_name(kern_isa_name((enum kern_isa)k)), k);
    assert_int_equal(kern_isa_from_name("bogus"), -1);
    assert_int_equal(kern_isa_from_name(""), -1);
    assert_int_equal(kern_isa_from_name(NULL), -1);
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        enum kern_isa want = best;
        for (int k = 0; k < KERN_NISA; k++)
            if (vals[i] && strcmp(vals[i], kern_isa_name((enum kern_isa)k)) == 0)
                want = (enum kern_isa)k < best ? (enum kern_isa)k : best;
        fflush(NULL);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            if (vals[i])
                setenv("CFLOW_ISA", vals[i], 1);
            else
                unsetenv("CFLOW_ISA");
            const kern_ops *ops = kern_init();
            _exit(ops && ops->isa == want && ops == kern_ops_for(want) &&
                  strcmp(ops->name, kern_isa_name(want)) == 0 ? 0 : 1);
        }
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            fail_msg("CFLOW_ISA=%s: kern_init did not pick %s",
                     vals[i] ? vals[i] : "(unset)", kern_isa_name(want));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        /* first: children must not inherit a kern_init() already made */
        cmocka_unit_test(test_init_env),
        cmocka_unit_test(test_init_scalar),
        cmocka_unit_test(test_isa_choose),
        cmocka_unit_test(test_cpu_features),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_payload_size),
        cmocka_unit_test(test_fp16_all_halves),
        cmocka_unit_test(test_fp32_to_fp16_many),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_layout_dense),
        cmocka_unit_test(test_layout_quant),
        cmocka_unit_test(test_ggml_import),
        cmocka_unit_test(test_pack_roundtrip),
        cmocka_unit_test(test_quantiser_formula),
        cmocka_unit_test(test_pack_rejects),
        cmocka_unit_test(test_tile_finite),
        cmocka_unit_test(test_act),
        cmocka_unit_test(test_act_rounding),
        cmocka_unit_test(test_tile_mv),
        cmocka_unit_test(test_tile_mv_sequential),
        cmocka_unit_test(test_tile_mv_llama),
        cmocka_unit_test(test_dot_axpy),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_attn),
        cmocka_unit_test(test_attn_runc),
        cmocka_unit_test(test_glu),
        cmocka_unit_test(test_ggml_vec_golden),
        cmocka_unit_test(test_ggml_family_golden),
        cmocka_unit_test(test_ggml_attn_golden),
        cmocka_unit_test(test_ggml_attn_tiled_golden),
        cmocka_unit_test(test_ggml_matvec_golden),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
