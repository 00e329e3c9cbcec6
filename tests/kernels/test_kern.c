/*
 * test_kern.c — tests of src/kernels.
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
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/kern.h"
#include "kernels/kern_impl.h"   /* kern_isa_choose() */

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HAVE_X86 1
#else
#define HAVE_X86 0
#endif

/* ---- helpers ------------------------------------------------------------ */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rng_u64(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

static unsigned rng_below(unsigned n) { return (unsigned)(rng_u64() % n); }

/* uniform in [-1, 1) */
static float rng_unit(void)
{
    return (float)((double)(rng_u64() >> 40) / (double)(1ull << 23) - 1.0);
}

/* a magnitude 10^[-3, 2) */
static float rng_mag(void)
{
    return (float)pow(10.0, -3.0 + 5.0 * (double)(rng_u64() >> 11) / 9007199254740992.0);
}

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int have_f16c(void)
{
#if HAVE_X86
    return __builtin_cpu_supports("f16c");
#else
    return 0;
#endif
}

#if HAVE_X86
__attribute__((target("f16c"))) static uint16_t hw_f2h(float f)
{
    return (uint16_t)_cvtss_sh(f, 0);   /* round to nearest even */
}
__attribute__((target("f16c"))) static float hw_h2f(uint16_t h)
{
    return _cvtsh_ss(h);
}
#endif

/* Conversions for the oracles: the hardware when present; the module's
 * own otherwise (those are tested against the hardware and doubles). */
static uint16_t ref_f2h(float f)
{
#if HAVE_X86
    if (have_f16c())
        return hw_f2h(f);
#endif
    return kern_fp32_to_fp16(f);
}

static float ref_h2f(uint16_t h)
{
#if HAVE_X86
    if (have_f16c())
        return hw_h2f(h);
#endif
    return kern_fp16_to_fp32(h);
}

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
    for (int i = 0; i < KERN_NTYPES; i++) {
        assert_string_equal(kern_type_name((enum kern_type)i), t[i]);
        assert_int_equal(kern_type_from_name(t[i]), i);
    }
    assert_int_equal(kern_type_from_name("q4_1"), -1);
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
        if (have_f16c()) {
#if HAVE_X86
            if (fbits(f) != fbits(hw_h2f((uint16_t)h)))
                fail_msg("fp16_to_fp32(0x%04x) = 0x%08x, F16C 0x%08x", h,
                         fbits(f), fbits(hw_h2f((uint16_t)h)));
            uint16_t back = kern_fp32_to_fp16(f);
            if (back != hw_f2h(f))
                fail_msg("fp32_to_fp16(fp16_to_fp32(0x%04x)) = 0x%04x, F16C 0x%04x",
                         h, back, hw_f2h(f));
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
            float f = bitsf(u);
            uint16_t h = kern_fp32_to_fp16(f);
#if HAVE_X86
            if (have_f16c() && h != hw_f2h(f))
                fail_msg("fp32_to_fp16(0x%08x) = 0x%04x, F16C 0x%04x", u, h,
                         hw_f2h(f));
#endif
            if (isfinite(f) && h != dbl_f2h(f))
                fail_msg("fp32_to_fp16(0x%08x) = 0x%04x, exact rounding 0x%04x",
                         u, h, dbl_f2h(f));
            n++;
        }
    for (int i = 0; i < 4000000; i++) {
        uint32_t u = (uint32_t)rng_u64();
        float f = bitsf(u);
        uint16_t h = kern_fp32_to_fp16(f);
#if HAVE_X86
        if (have_f16c() && h != hw_f2h(f))
            fail_msg("fp32_to_fp16(0x%08x) = 0x%04x, F16C 0x%04x", u, h, hw_f2h(f));
#endif
        if (isfinite(f) && h != dbl_f2h(f))
            fail_msg("fp32_to_fp16(0x%08x) = 0x%04x, exact 0x%04x", u, h, dbl_f2h(f));
    }
    assert_true(n == 10ul << 19);
    /* every positive float whose half is subnormal or the smallest normals:
     * there rounding looks at up to 24 dropped bits, not just 13 */
    for (uint32_t u = 101u << 23; u < 114u << 23; u++) {
        float f = bitsf(u);
        uint16_t h = kern_fp32_to_fp16(f);
#if HAVE_X86
        if (have_f16c() && h != hw_f2h(f))
            fail_msg("fp32_to_fp16(0x%08x) = 0x%04x, F16C 0x%04x", u, h, hw_f2h(f));
#endif
        if (!have_f16c() && h != dbl_f2h(f))
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
        assert_int_equal(fbits(kern_bf16_to_fp32((uint16_t)h)), h << 16);
}

/* ---- the tile layout, as kern.h states it ------------------------------ */

typedef struct {
    unsigned rp, cp, nb;
    size_t sbytes;
} geo;

static geo geo_of(unsigned r, unsigned c)
{
    geo g;
    g.rp = (r + 15) / 16 * 16;
    g.cp = (c + 31) / 32 * 32;
    g.nb = g.cp / 32;
    g.sbytes = (size_t)g.rp * g.nb * 2;
    return g;
}

static void build_ggml_q8(uint8_t *blk, float dmag)
{
    uint16_t d = ref_f2h(dmag * (0.5f + 0.5f * fabsf(rng_unit())));
    memcpy(blk, &d, 2);
    for (int k = 0; k < 32; k++)
        blk[2 + k] = (uint8_t)(int8_t)((int)rng_below(255) - 127);
}

static void build_ggml_q4(uint8_t *blk, float dmag)
{
    uint16_t d = ref_f2h(dmag * (0.5f + 0.5f * fabsf(rng_unit())));
    memcpy(blk, &d, 2);
    for (int k = 0; k < 16; k++)
        blk[2 + k] = (uint8_t)rng_below(256);
}

/* GGML's dequantize_row_q8_0 / _q4_0 for one block. */
static void ggml_deq_q8(const uint8_t *blk, float *y)
{
    uint16_t dh;
    memcpy(&dh, blk, 2);
    const float d = ref_h2f(dh);
    for (int j = 0; j < 32; j++)
        y[j] = (float)(int8_t)blk[2 + j] * d;
}

static void ggml_deq_q4(const uint8_t *blk, float *y)
{
    uint16_t dh;
    memcpy(&dh, blk, 2);
    const float d = ref_h2f(dh);
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
        geo g = geo_of(R, C);
        float *src = malloc((size_t)R * C * 4);
        uint16_t *hsrc = malloc((size_t)R * C * 2);
        for (unsigned r = 0; r < R; r++)
            for (unsigned c = 0; c < C; c++) {
                src[r * C + c] = (float)(r * 1000 + c + 1);
                hsrc[r * C + c] = ref_f2h((float)(r * 8 + c % 8 + 1));
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
                assert_true(fbits(v) == fbits(want));
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
        geo g = geo_of(R, C);
        size_t stride8 = (size_t)g.nb * 34 + 7, stride4 = (size_t)g.nb * 18 + 3;
        uint8_t *q8src = malloc(R * stride8), *q4src = malloc(R * stride4);
        for (unsigned r = 0; r < R; r++)
            for (unsigned b = 0; b < g.nb; b++) {
                build_ggml_q8(q8src + r * stride8 + b * 34, rng_mag());
                build_ggml_q4(q4src + r * stride4 + b * 18, rng_mag());
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
                        build_ggml_q4(blk, rng_mag());
                        ggml_deq_q4(blk, deq + r * C + 32 * b);
                    } else {
                        build_ggml_q8(blk, rng_mag());
                        ggml_deq_q8(blk, deq + r * C + 32 * b);
                    }
                }
            for (int t = 0; t < KERN_NTYPES; t++) {
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
                                assert_true(fbits(out[i]) == fbits(deq[i]));
                            else if (t == KERN_F16)
                                assert_true(fbits(out[i]) ==
                                            fbits(ref_h2f(ref_f2h(deq[i]))));
                            else {
                                float qmax = t == KERN_Q8_0 ? 127.0f : 7.0f;
                                float d = amax / qmax, dh = ref_h2f(ref_f2h(d));
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

static void fill_matrix(float *w, unsigned R, unsigned C)
{
    for (unsigned r = 0; r < R; r++) {
        float m = rng_mag();
        for (unsigned c = 0; c < C; c++) {
            if (c % 32 == 0 && rng_below(8) == 0)
                m = rng_below(3) == 0 ? 0.0f : rng_mag();   /* new block scale */
            w[r * C + c] = m * rng_unit();
        }
    }
}

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
            fill_matrix(w, R, C);
            for (size_t i = 0; i < (size_t)R * C; i++) {
                wh[i] = ref_f2h(w[i]);
                wb[i] = (uint16_t)(fbits(w[i]) >> 16);      /* truncated bf16 */
            }
            /* F32 exact */
            assert_int_equal(kern_tile_pack(KERN_F32, R, C, KERN_SRC_F32, w, C * 4, pl), 0);
            kern_tile_unpack(KERN_F32, R, C, pl, out, C);
            assert_memory_equal(out, w, (size_t)R * C * 4);
            /* F16: exact from halves, and from their float values */
            assert_int_equal(kern_tile_pack(KERN_F16, R, C, KERN_SRC_F16, wh, C * 2, pl), 0);
            kern_tile_unpack(KERN_F16, R, C, pl, out, C);
            for (size_t i = 0; i < (size_t)R * C; i++)
                assert_true(fbits(out[i]) == fbits(ref_h2f(wh[i])));
            for (size_t i = 0; i < (size_t)R * C; i++)
                w[i] = ref_h2f(wh[i]);
            assert_int_equal(kern_tile_pack(KERN_F16, R, C, KERN_SRC_F32, w, C * 4, pl), 0);
            kern_tile_unpack(KERN_F16, R, C, pl, out, C);
            assert_memory_equal(out, w, (size_t)R * C * 4);
            /* BF16 into F32 exact */
            assert_int_equal(kern_tile_pack(KERN_F32, R, C, KERN_SRC_BF16, wb, C * 2, pl), 0);
            kern_tile_unpack(KERN_F32, R, C, pl, out, C);
            for (size_t i = 0; i < (size_t)R * C; i++)
                assert_true(fbits(out[i]) == (uint32_t)wb[i] << 16);

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
                            float d = amax / qmax, dh = ref_h2f(ref_f2h(d));
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
    geo g = geo_of(1, 32);

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
    assert_int_equal(d, ref_f2h(1.0f / 7.0f));
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
    for (int t = 0; t < KERN_NTYPES; t++) {
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
        w[i] = rng_unit();
    for (int t = 0; t < KERN_NTYPES; t++) {
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

/* llama.cpp's quantize_row_q8_0 as its x86 build runs it (arch/x86/
 * quants.c), in scalar form: id = 127/amax, round half to even
 * (nearbyintf in the default rounding mode), GGML_FP32_TO_FP16 being the
 * F16C conversion where present. */
static void llama_q8_0(const float *x, int k, int8_t *qs, uint16_t *dh)
{
    const int nb = k / 32;
    for (int i = 0; i < nb; i++) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) {
            const float v = x[i * 32 + j];
            amax = amax > fabsf(v) ? amax : fabsf(v);
        }
        const float d = amax / 127.f;
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        dh[i] = ref_f2h(d);
        for (int j = 0; j < 32; ++j)
            qs[i * 32 + j] = (int8_t)nearbyintf(x[i * 32 + j] * id);
    }
}

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
            x[i] = 1000.0f * rng_unit();
        kern_act_set(&a, x, 1000, KERN_NEED_ALL);
        for (unsigned i = 0; i < n; i++) {
            x[i] = (i / 32) % 5 == 3 ? 0.0f : rng_mag() * rng_unit();
        }
        for (unsigned i = n; i < n_pad; i++)
            x[i] = 0.0f;                /* llama.cpp sees the padded row */
        kern_act_set(&a, x, n, KERN_NEED_ALL);
        assert_int_equal(a.n, n);
        assert_int_equal(a.n_pad, n_pad);
        llama_q8_0(x, (int)n_pad, qs, dh);
#if HAVE_X86
        if (__builtin_cpu_supports("avx2") && have_f16c()) {
            int8_t qs2[1024];
            uint16_t dh2[32];
            llama_q8_0_avx2(x, (int)n_pad, qs2, dh2);
            assert_memory_equal(qs2, qs, n_pad);
            assert_memory_equal(dh2, dh, n_pad / 32 * 2);
        }
#endif
        for (unsigned i = 0; i < n_pad; i++) {
            assert_true(fbits(a.f32[i]) == fbits(i < n ? x[i] : 0.0f));
            assert_int_equal(a.f16[i], i < n ? ref_f2h(x[i]) : 0);
            assert_int_equal(a.q8[i], qs[i]);
            if (i >= n)
                assert_int_equal(a.q8[i], 0);
        }
        for (unsigned b = 0; b < n_pad / 32; b++) {
            assert_true(fbits(a.q8_d[b]) == fbits(ref_h2f(dh[b])));
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
    kern_act_set(&a, x, 0, KERN_NEED_ALL);
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
        float amax = 0.01f + rng_mag() * fabsf(rng_unit());
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

/* ---- tile mat-vec ------------------------------------------------------- */

/* x as the tile type sees it. */
static double act_value(enum kern_type t, const kern_act *a, unsigned i)
{
    switch (t) {
    case KERN_F32: return a->f32[i];
    case KERN_F16: return ref_h2f(a->f16[i]);
    default:       return (double)a->q8[i] * a->q8_d[i / 32];
    }
}

/* The tile kernel of a table: by type, or (rp) the repacked Q4_0 one. */
static kern_tile_mv_fn tile_fn(const kern_ops *ops, enum kern_type t, int rp)
{
    return rp ? ops->tile_mv_q4_0_rp : ops->tile_mv[t];
}

static void check_tile_fn(enum kern_type t, int rp, unsigned R, unsigned C,
                          unsigned col0, unsigned n, const void *pl, kern_act *a,
                          const float *x, float *wdeq)
{
    enum { GUARD = 16 };
    float y0[128 + GUARD], yref[128 + GUARD], y[128 + GUARD];
    kern_act_set(a, x, n, KERN_NEED(t));
    for (unsigned r = 0; r < R + GUARD; r++)
        y0[r] = r < R ? 3.0f * rng_unit() : 12345.0f;
    memcpy(yref, y0, (R + GUARD) * sizeof(float));
    tile_fn(kern_ops_ref(), t, rp)(pl, R, C, a, col0, yref);

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
        tile_fn(ops, t, rp)(pl, R, C, a, col0, y);
        for (unsigned r = 0; r < R + GUARD; r++)
            if (fbits(y[r]) != fbits(yref[r]))
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

static void test_tile_mv(void **state)
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
            fill_matrix(w, R, C);
            for (int t = 0; t < KERN_NTYPES; t++) {
                assert_int_equal(kern_tile_pack((enum kern_type)t, R, C, KERN_SRC_F32,
                                                w, C * 4, pl), 0);
                for (int k = 0; k < 3; k++) {
                    unsigned col0 = t >= KERN_Q8_0 ? col0_q[k] : col0_f[k];
                    unsigned n = col0 + C + (k == 2 ? 9 : 0);   /* x may run on */
                    for (unsigned i = 0; i < n; i++)
                        x[i] = (i / 32) % 7 == 5 ? 0.0f : rng_mag() * rng_unit();
                    check_tile((enum kern_type)t, R, C, col0, n, pl, &a, x, wdeq);
                }
            }
        }

    /* hostile but finite quantised payloads: every byte value, including
     * Q8_0 byte 0 (-128) and non-zero padding */
    for (int iter = 0; iter < 40; iter++) {
        unsigned R = 1 + rng_below(128), C = 1 + rng_below(256);
        for (int t = KERN_Q8_0; t <= KERN_Q4_0; t++) {
            size_t size = kern_tile_payload_size((enum kern_type)t, R, C);
            geo g = geo_of(R, C);
            for (size_t i = 0; i < size; i++)
                pl[i] = (uint8_t)rng_u64();
            for (size_t i = 0; i < g.sbytes / 2; i++) {
                uint16_t d = ref_f2h(rng_mag() * rng_unit());
                memcpy(pl + 2 * i, &d, 2);
            }
            /* x ends with the tile: the garbage in the padding columns
             * meets zero activations, as the unpacked oracle assumes */
            unsigned col0 = 32 * rng_below(4);
            unsigned n = col0 + C;
            for (unsigned i = 0; i < n; i++)
                x[i] = iter % 2 ? 100.0f * rng_unit() : (rng_below(2) ? 1.0f : -1.0f);
            check_tile((enum kern_type)t, R, C, col0, n, pl, &a, x, wdeq);
        }
    }
    kern_act_free(&a);
    free(w);
    free(wdeq);
    free(pl);
}

/* A one-tile matrix gives exactly run.c's sequential float sum. */
static void test_tile_mv_sequential(void **state)
{
    (void)state;
    enum { R = 20, C = 172 };
    float w[R * C], x[C], y[R];
    uint8_t pl[32 * 192 * 4];
    kern_act a;
    assert_int_equal(kern_act_init(&a, C), 0);
    for (int i = 0; i < R * C; i++)
        w[i] = rng_unit();
    for (int i = 0; i < C; i++)
        x[i] = rng_unit();
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
            assert_true(fbits(y[i]) == fbits(val));
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
        uint16_t d = ref_f2h(0.001f + 0.05f * fabsf(rng_unit()));
        memcpy(blk, &d, 2);
        for (size_t j = 2; j < bs; j++)
            blk[j] = t == KERN_Q8_0 ? (uint8_t)(int8_t)((int)rng_below(255) - 127)
                                    : (uint8_t)rng_u64();
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
        const float d = ref_h2f(dw) * ref_h2f(xd[b]);
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
        acc = fmaf((float)s, ref_h2f(dw) * ref_h2f(xd[b]), acc);
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
        acc[i % 64] = fmaf(ref_h2f(x[i]), ref_h2f(y[i]), acc[i % 64]);
    for (int l = 0; l < 16; l++)
        a[l] = (acc[l] + acc[32 + l]) + (acc[16 + l] + acc[48 + l]);
    for (int l = 0; l < 8; l++)
        t8[l] = a[l + 8] + a[l];
    for (int l = 0; l < 4; l++)
        t4[l] = t8[l + 4] + t8[l];
    double sumf = (t4[0] + t4[2]) + (t4[1] + t4[3]);
    for (unsigned i = np; i < n; i++)
        sumf += (double)(ref_h2f(x[i]) * ref_h2f(y[i]));
    return (float)sumf;
}

/* One-tile matrices: every table's sums are llama.cpp's, bit for bit. */
static void test_tile_mv_llama(void **state)
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
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && have_f16c();
    const int avx512 = __builtin_cpu_supports("avx512f") && have_f16c();
#endif
    for (int iter = 0; iter < 8; iter++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            unsigned R = shapes[si][0], C = shapes[si][1], nb = C / 32;
            for (unsigned i = 0; i < C; i++)
                x[i] = (iter % 3 ? 1.0f : rng_mag()) * rng_unit();
            llama_q8_0(x, (int)C, xq, xd);
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
                        tile_fn(ops, (enum kern_type)t, rp)(pl, R, C, &a, 0, y);
                        for (unsigned r = 0; r < R; r++) {
                            const uint8_t *wr = rows + r * rb;
                            float want = rp ? ggml_gemv_q4(wr, nb, xq, xd)
                                            : ggml_vec_dot_q((enum kern_type)t, wr, nb, xq, xd);
#if HAVE_X86
                            if (!rp && avx2)
                                assert_true(fbits(want) == fbits(ggml_vec_dot_q_avx2(
                                                (enum kern_type)t, wr, nb, xq, xd)));
#endif
                            if (fbits(y[r]) != fbits(want))
                                fail_msg("%s %s%s %ux%u row %u: %.9g, llama.cpp %.9g",
                                         ops->name, kern_type_name((enum kern_type)t),
                                         rp ? " (repacked)" : "", R, C, r, y[r], want);
                        }
                    }
            }
            /* F16: any width up to a tile, tails included */
            unsigned Cf = C - (unsigned)(iter * 7) % 30;
            for (unsigned i = 0; i < R * Cf; i++)
                wh[i] = ref_f2h(rng_unit());
            for (unsigned i = 0; i < Cf; i++)
                xh[i] = ref_f2h(x[i]);
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
                        assert_true(fbits(want) == fbits(ggml_vec_dot_f16_avx512(
                                                      Cf, wh + r * Cf, xh)));
#endif
                    if (fbits(y[r]) != fbits(want))
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

static void test_dot_axpy(void **state)
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
                a[i] = rng_unit();
                b[i] = rng_mag() * rng_unit();
                y0[i] = rng_unit();
                exact += (double)a[i] * b[i];
                mag += fabs((double)a[i] * b[i]);
            }
            float d = ops->dot_f32(a, b, n);
            assert_true(fabs(d - exact) <= (n + 4) * 1.2e-7 * mag + 1e-30);
            float alpha = rng_unit();
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

/* ---- vector kernels --------------------------------------------------------- */

static void test_rmsnorm(void **state)
{
    (void)state;
    float x[300], w[300], out[300], in[300];
    for (unsigned n = 1; n <= 300; n += 37) {
        for (unsigned i = 0; i < n; i++) {
            x[i] = rng_mag() * rng_unit();
            w[i] = rng_unit();
        }
        double ss = 0;
        for (unsigned i = 0; i < n; i++)
            ss += (double)x[i] * x[i];
        double inv = 1.0 / sqrt(ss / n + 1e-5);
        kern_rmsnorm(out, x, w, n, 1e-5f);
        for (unsigned i = 0; i < n; i++)
            assert_true(fabs(out[i] - x[i] * inv * w[i]) <=
                        1e-6 * fabs(x[i] * inv * w[i]) + 1e-30);
        kern_rmsnorm(out, x, NULL, n, 1e-5f);
        for (unsigned i = 0; i < n; i++)
            assert_true(fabs(out[i] - x[i] * inv) <= 1e-6 * fabs(x[i] * inv) + 1e-30);
        memcpy(in, x, sizeof x);
        kern_rmsnorm(out, x, w, n, 1e-5f);
        kern_rmsnorm(in, in, w, n, 1e-5f);     /* in place */
        assert_memory_equal(in, out, n * 4);
    }
}

static void test_softmax(void **state)
{
    (void)state;
    float x[500];
    for (unsigned n = 1; n <= 500; n += 61) {
        double mx = -INFINITY, sum = 0, e[500];
        for (unsigned i = 0; i < n; i++) {
            x[i] = 20.0f * rng_unit();
            mx = fmax(mx, x[i]);
        }
        for (unsigned i = 0; i < n; i++)
            sum += e[i] = exp(x[i] - mx);
        kern_softmax(x, n);
        double total = 0;
        for (unsigned i = 0; i < n; i++) {
            assert_true(fabs(x[i] - e[i] / sum) <= 1e-6 * (e[i] / sum) + 1e-12);
            total += x[i];
        }
        assert_true(fabs(total - 1.0) < 1e-5);
    }
    kern_softmax(x, 0);
}

static void test_rope(void **state)
{
    (void)state;
    enum { H = 3, HD = 24 };
    float x[H * HD], orig[H * HD], inv_freq[HD / 2];
    static const unsigned rots[] = { 24, 16, 2 };
    static const unsigned poss[] = { 0, 1, 17, 511 };
    for (int neox = 0; neox < 2; neox++)
        for (size_t ri = 0; ri < 3; ri++)
            for (size_t pi = 0; pi < 4; pi++) {
                unsigned rot = rots[ri], pos = poss[pi];
                for (unsigned i = 0; i < rot / 2; i++)
                    inv_freq[i] = 1.0f / powf(10000.0f, (float)(2 * i) / (float)rot);
                for (int i = 0; i < H * HD; i++)
                    orig[i] = x[i] = rng_unit();
                kern_rope(x, H, HD, rot, pos, inv_freq, neox);
                for (int h = 0; h < H; h++) {
                    const float *o = orig + h * HD, *v = x + h * HD;
                    for (unsigned i = 0; i < rot / 2; i++) {
                        unsigned a = neox ? i : 2 * i, b = neox ? i + rot / 2 : 2 * i + 1;
                        double th = (double)pos * inv_freq[i];
                        double ra = o[a] * cos(th) - o[b] * sin(th);
                        double rb = o[a] * sin(th) + o[b] * cos(th);
                        double tol = 1e-6 * (1.0 + th) * (fabs(o[a]) + fabs(o[b]));
                        assert_true(fabs(v[a] - ra) <= tol);
                        assert_true(fabs(v[b] - rb) <= tol);
                    }
                    for (unsigned i = rot; i < HD; i++)
                        assert_true(fbits(v[i]) == fbits(o[i]));
                }
            }
}

static void naive_attn(double *out, const float *q, const float *k, const float *v,
                       unsigned n_pos, unsigned nh, unsigned nkv, unsigned hd,
                       size_t stride, double scale, double softcap)
{
    double s[64];
    for (unsigned h = 0; h < nh; h++) {
        unsigned kh = h / (nh / nkv);
        double mx = -INFINITY, sum = 0;
        for (unsigned t = 0; t < n_pos; t++) {
            double d = 0;
            for (unsigned i = 0; i < hd; i++)
                d += (double)q[h * hd + i] * k[t * stride + kh * hd + i];
            d *= scale;
            if (softcap > 0)
                d = tanh(d / softcap) * softcap;
            s[t] = d;
            mx = fmax(mx, d);
        }
        for (unsigned t = 0; t < n_pos; t++)
            sum += s[t] = exp(s[t] - mx);
        for (unsigned i = 0; i < hd; i++) {
            double o = 0;
            for (unsigned t = 0; t < n_pos; t++)
                o += s[t] / sum * v[t * stride + kh * hd + i];
            out[h * hd + i] = o;
        }
    }
}

static void test_attn(void **state)
{
    (void)state;
    static const unsigned kvs[] = { 4, 8, 1 };
    static const unsigned poss[] = { 1, 5, 37, 64 };
    enum { NH = 8, HD = 16 };
    float q[NH * HD], out[NH * HD], scratch[64];
    double want[NH * HD];
    float *k = malloc(64 * (NH * HD + 3) * 4), *v = malloc(64 * (NH * HD + 3) * 4);
    for (size_t ki = 0; ki < 3; ki++)
        for (size_t pi = 0; pi < 4; pi++)
            for (int variant = 0; variant < 3; variant++) {
                unsigned nkv = kvs[ki], n_pos = poss[pi];
                size_t stride = nkv * HD + 3;   /* a cache row with slack */
                float scale = variant == 1 ? 0.3f : 1.0f / sqrtf((float)HD);
                float softcap = variant == 2 ? 2.0f : 0.0f;
                for (int i = 0; i < NH * HD; i++)
                    q[i] = 2.0f * rng_unit();
                for (size_t i = 0; i < n_pos * stride; i++) {
                    k[i] = rng_unit();
                    v[i] = rng_unit();
                }
                kern_attn_decode(out, q, k, v, n_pos, NH, nkv, HD, stride, scale,
                                 softcap, scratch);
                naive_attn(want, q, k, v, n_pos, NH, nkv, HD, stride, scale, softcap);
                for (int i = 0; i < NH * HD; i++)
                    if (!(fabs(out[i] - want[i]) <= 1e-5))
                        fail_msg("attn nkv %u n_pos %u variant %d [%d]: %.9g want %.9g",
                                 nkv, n_pos, variant, i, out[i], want[i]);
            }
    free(k);
    free(v);
}

/* With scale 1/sqrt(head_dim) the scores are run.c's: dot / sqrtf(hd). */
static void test_attn_runc(void **state)
{
    (void)state;
    enum { NH = 8, NKV = 4, HS = 8, NPOS = 9, KVD = NKV * HS };
    float q[NH * HS], k[NPOS * KVD], v[NPOS * KVD], out[NH * HS], xb[NH * HS];
    float att[NPOS], scratch[NPOS];
    for (int i = 0; i < NH * HS; i++)
        q[i] = rng_unit();
    for (int i = 0; i < NPOS * KVD; i++) {
        k[i] = rng_unit();
        v[i] = rng_unit();
    }
    kern_attn_decode(out, q, k, v, NPOS, NH, NKV, HS, KVD,
                     1.0f / sqrtf((float)HS), 0.0f, scratch);
    /* llama2.c run.c forward(), attention part */
    int kv_mul = NH / NKV;
    for (int h = 0; h < NH; h++) {
        const float *qh = q + h * HS;
        for (int t = 0; t < NPOS; t++) {
            const float *kt = k + t * KVD + (h / kv_mul) * HS;
            float score = 0.0f;
            for (int i = 0; i < HS; i++)
                score += qh[i] * kt[i];
            score /= sqrtf(HS);
            att[t] = score;
        }
        float max_val = att[0];
        for (int i = 1; i < NPOS; i++)
            if (att[i] > max_val)
                max_val = att[i];
        float sum = 0.0f;
        for (int i = 0; i < NPOS; i++) {
            att[i] = expf(att[i] - max_val);
            sum += att[i];
        }
        for (int i = 0; i < NPOS; i++)
            att[i] /= sum;
        float *o = xb + h * HS;
        memset(o, 0, HS * sizeof(float));
        for (int t = 0; t < NPOS; t++) {
            const float *vt = v + t * KVD + (h / kv_mul) * HS;
            for (int i = 0; i < HS; i++)
                o[i] += att[t] * vt[i];
        }
    }
    assert_memory_equal(out, xb, sizeof xb);
}

static void test_glu(void **state)
{
    (void)state;
    float g[257], u[257], out[257];
    for (int i = 0; i < 257; i++) {
        g[i] = 8.0f * rng_unit();
        u[i] = rng_unit();
    }
    kern_swiglu(out, g, u, 257);
    for (int i = 0; i < 257; i++) {
        double want = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
        assert_true(fabs(out[i] - want) <= 1e-6 * fabs(want) + 1e-7);
    }
    kern_geglu(out, g, u, 257);
    for (int i = 0; i < 257; i++) {
        double x = g[i];
        double want = 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * x *
                                          (1.0 + 0.044715 * x * x))) * u[i];
        assert_true(fabs(out[i] - want) <= 1e-6 * fabs(want) + 1e-7);
    }
    /* out may alias gate */
    float g2[257];
    memcpy(g2, g, sizeof g);
    kern_swiglu(out, g, u, 257);
    kern_swiglu(g2, g2, u, 257);
    assert_memory_equal(g2, out, sizeof out);
}

/* ---- llama.cpp arithmetic: golden hashes from ggml ---------------------- */

/*
 * FNV-1a 64 of the output floats of ggml's own CPU operators, for inputs
 * drawn from g_unit() with the seeds below (ggml-org/ggml at d99724f, a
 * GGML_NATIVE build on an AVX-512 CPU by GCC 12 with its default
 * -ffp-contract=fast: the configuration of the llama.cpp whose greedy texts
 * are in shared/models/expected, which it reproduces).  Operators:
 * ggml_mul(ggml_rms_norm(x, 1e-5), w); ggml_rope_ext (NORMAL/NEOX, no
 * scaling); ggml_swiglu_split; ggml_flash_attn_ext over f16 K/V with no
 * mask; ggml_mul_mat of Q8_0, Q4_0 (plain and CPU_REPACK-ed) and F16 rows
 * with an f32 vector.
 */
static uint64_t g_state;

static uint64_t g_u64(void)
{
    g_state ^= g_state >> 12;
    g_state ^= g_state << 25;
    g_state ^= g_state >> 27;
    return g_state * 0x2545F4914F6CDD1Dull;
}

static float g_unit(void)
{
    return (float)((double)(g_u64() >> 40) / (double)(1ull << 23) - 1.0);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

#define FNV0 0xcbf29ce484222325ull

static void want_hash(const char *what, uint64_t got, uint64_t want)
{
    if (got != want)
        fail_msg("%s: output hash 0x%016llx, ggml's 0x%016llx", what,
                 (unsigned long long)got, (unsigned long long)want);
}

static void test_ggml_vec_golden(void **state)
{
    (void)state;
    float x[1000], w[1000], out[1000];

    g_state = 1;
    uint64_t h = FNV0;
    static const unsigned rn[] = { 64, 172 };
    for (int k = 0; k < 2; k++) {
        unsigned n = rn[k];
        for (unsigned i = 0; i < n; i++)
            x[i] = 3 * g_unit();
        for (unsigned i = 0; i < n; i++)
            w[i] = g_unit();
        kern_rmsnorm_ggml(out, x, w, n, 1e-5f);
        h = fnv(h, out, n * 4);
    }
    want_hash("kern_rmsnorm_ggml", h, 0x3d025a7d91bd4ba1ull);

    g_state = 2;
    h = FNV0;
    static const struct { unsigned hd; int neox; float base; unsigned pos; } rc[] = {
        { 8, 0, 10000, 0 }, { 8, 0, 10000, 1 }, { 8, 0, 10000, 7 }, { 8, 0, 10000, 100 },
        { 64, 0, 10000, 1000 }, { 64, 1, 500000, 37 }, { 8, 1, 10000, 5 },
    };
    for (size_t k = 0; k < sizeof rc / sizeof rc[0]; k++) {
        unsigned n = rc[k].hd * 8;
        for (unsigned i = 0; i < n; i++)
            x[i] = 2 * g_unit();
        kern_rope_ggml(x, 8, rc[k].hd, rc[k].hd, rc[k].pos, rc[k].base, NULL, rc[k].neox);
        h = fnv(h, x, n * 4);
    }
    want_hash("kern_rope_ggml", h, 0xaab948500bc4d6d7ull);

    g_state = 3;
    h = FNV0;
    static const unsigned gn[] = { 172, 1000 };
    for (int k = 0; k < 2; k++) {
        unsigned n = gn[k];
        for (unsigned i = 0; i < n; i++)
            x[i] = 8 * g_unit();
        for (unsigned i = 0; i < n; i++)
            w[i] = g_unit();
        kern_swiglu_ggml(out, x, w, n);
        h = fnv(h, out, n * 4);
    }
    want_hash("kern_swiglu_ggml", h, 0xd51ccd3d5c64a7b4ull);
}

static void test_ggml_attn_golden(void **state)
{
    (void)state;
    static const struct { unsigned hd, nh, nkv, npos; } ac[] = {
        { 8, 8, 4, 1 }, { 8, 8, 4, 5 }, { 8, 8, 4, 37 }, { 32, 4, 2, 20 },
    };
    float q[128], out[128];
    /* the largest case needs 37 * 4 * 8 = 1184 and 20 * 2 * 32 = 1280 halves */
    uint16_t *k = malloc(1280 * 2), *v = malloc(1280 * 2), scratch[64];
    g_state = 4;
    uint64_t h = FNV0;
    for (size_t c = 0; c < sizeof ac / sizeof ac[0]; c++) {
        const unsigned hd = ac[c].hd, nh = ac[c].nh, nkv = ac[c].nkv, np = ac[c].npos;
        for (unsigned i = 0; i < hd * nh; i++)
            q[i] = 2 * g_unit();
        for (unsigned t = 0; t < np; t++)
            for (unsigned kh = 0; kh < nkv; kh++)
                for (unsigned i = 0; i < hd; i++) {
                    k[(t * nkv + kh) * hd + i] = ref_f2h(2 * g_unit());
                    v[(t * nkv + kh) * hd + i] = ref_f2h(g_unit());
                }
        kern_attn_decode_f16(out, q, k, v, np, nh, nkv, hd, nkv * hd,
                             1.0f / sqrtf((float)hd), 0.0f, scratch);
        h = fnv(h, out, hd * nh * 4);
    }
    want_hash("kern_attn_decode_f16", h, 0xd994995937d65a2bull);
    free(k);
    free(v);
}

/* A prompt chunk's attention (kern_attn_prefill_f16, kern.h) against
 * ggml_flash_attn_ext with a causal f16 mask and 64 or more query rows,
 * which ggml's CPU backend runs through its tiled kernel
 * (ggml_compute_forward_flash_attn_ext_tiled, unslothai/llama.cpp at
 * d32676d, a GGML_NATIVE build on AVX-512 Zen 5 by GCC 12, 2 threads):
 * q [rows][heads][hd], the cache [position][kv head][hd], the output as
 * ggml's [rows][heads][hd]. */
static void test_ggml_attn_tiled_golden(void **state)
{
    (void)state;
    static const struct { unsigned hd, nh, nkv, nq, p0; } ac[] = {
        { 64, 8, 2, 64, 0 }, { 32, 4, 4, 70, 30 }, { 128, 2, 1, 65, 64 },
    };
    g_state = 5;
    uint64_t h = FNV0;
    for (size_t c = 0; c < sizeof ac / sizeof ac[0]; c++) {
        const unsigned hd = ac[c].hd, nh = ac[c].nh, nkv = ac[c].nkv, nq = ac[c].nq;
        const unsigned n = ac[c].p0 + nq, G = nh / nkv;
        float *q = malloc((size_t)nq * nh * hd * 4), *out = malloc((size_t)nq * nh * hd * 4);
        uint16_t *k = malloc((size_t)n * nkv * hd * 2), *v = malloc((size_t)n * nkv * hd * 2);
        float *work = malloc(KERN_ATTN_PF_WORK(nq * G, hd) * sizeof(float));
        for (size_t i = 0; i < (size_t)nq * nh * hd; i++)
            q[i] = 2 * g_unit();
        for (size_t i = 0; i < (size_t)n * nkv * hd; i++) {
            k[i] = ref_f2h(2 * g_unit());
            v[i] = ref_f2h(g_unit());
        }
        for (unsigned kh = 0; kh < nkv; kh++)
            kern_attn_prefill_f16(out + kh * G * hd, q + kh * G * hd, (size_t)nh * hd, nq,
                                  G, ac[c].p0, k + kh * hd, v + kh * hd, (size_t)nkv * hd,
                                  hd, 1.0f / sqrtf((float)hd), work);
        h = fnv(h, out, (size_t)nq * nh * hd * 4);
        free(q);
        free(out);
        free(k);
        free(v);
        free(work);
    }
    want_hash("kern_attn_prefill_f16", h, 0x3747a85ff1039298ull);
}

static void test_ggml_matvec_golden(void **state)
{
    (void)state;
    static const struct { enum kern_type t; unsigned R, C; int rp; uint64_t want; } mc[] = {
        { KERN_Q8_0, 20, 64, 0, 0x252729ed056c7edcull },
        { KERN_Q4_0, 20, 64, 0, 0x29373d0aa657f151ull },
        { KERN_Q4_0, 16, 96, 1, 0xde8ab82ae2a78b74ull },
        { KERN_F16, 20, 172, 0, 0x950b7b510565d948ull },
        { KERN_F16, 3, 256, 0, 0xbe39b13f6d543d26ull },
    };
    uint8_t *rows = malloc(20 * 256 * 2), *pl = malloc(kern_tile_payload_size(KERN_F32, 128, 256));
    float x[256], y[20];
    kern_act a;
    assert_int_equal(kern_act_init(&a, 256), 0);
    g_state = 5;
    for (size_t c = 0; c < sizeof mc / sizeof mc[0]; c++) {
        const enum kern_type t = mc[c].t;
        const unsigned R = mc[c].R, C = mc[c].C;
        const size_t bs = t == KERN_Q8_0 ? 34 : 18;
        const size_t rb = t == KERN_F16 ? 2 * C : C / 32 * bs;
        for (unsigned r = 0; r < R; r++) {
            uint8_t *row = rows + r * rb;
            if (t == KERN_F16) {
                for (unsigned i = 0; i < C; i++) {
                    uint16_t hv = ref_f2h(g_unit());
                    memcpy(row + 2 * i, &hv, 2);
                }
                continue;
            }
            for (unsigned b = 0; b < C / 32; b++) {
                uint8_t *blk = row + b * bs;
                uint16_t d = ref_f2h(0.01f + 0.02f * fabsf(g_unit()));
                memcpy(blk, &d, 2);
                for (size_t j = 0; j < bs - 2; j++)
                    blk[2 + j] = t == KERN_Q8_0
                        ? (uint8_t)(int8_t)((int)(g_u64() % 255) - 127)
                        : (uint8_t)(g_u64() & 0xFF);
            }
        }
        for (unsigned i = 0; i < C; i++)
            x[i] = 2 * g_unit();
        enum kern_src src = t == KERN_F16 ? KERN_SRC_F16 : t == KERN_Q8_0
                          ? KERN_SRC_GGML_Q8_0 : KERN_SRC_GGML_Q4_0;
        assert_int_equal(kern_tile_pack(t, R, C, src, rows, rb, pl), 0);
        kern_act_set(&a, x, C, KERN_NEED(t));
        for (int isa = 0; isa < KERN_NISA; isa++) {
            const kern_ops *ops = kern_ops_for((enum kern_isa)isa);
            if (!ops)
                continue;
            memset(y, 0, sizeof y);
            tile_fn(ops, t, mc[c].rp)(pl, R, C, &a, 0, y);
            char what[64];
            snprintf(what, sizeof what, "%s %s%s %ux%u", ops->name, kern_type_name(t),
                     mc[c].rp ? " (repacked)" : "", R, C);
            want_hash(what, fnv(FNV0, y, R * 4), mc[c].want);
        }
    }
    kern_act_free(&a);
    free(rows);
    free(pl);
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
        cmocka_unit_test(test_ggml_attn_golden),
        cmocka_unit_test(test_ggml_attn_tiled_golden),
        cmocka_unit_test(test_ggml_matvec_golden),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
