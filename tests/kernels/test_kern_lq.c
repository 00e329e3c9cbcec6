/*
 * test_kern_lq.c — the 32-column GGML block types (Q4_1, Q5_0, Q5_1,
 * IQ4_NL, MXFP4) and BF16: their payloads, checks and kernels
 * (kern_lq*.c).  ggml's own outputs are test_kern_lq_ggml.c's.
 *
 *   layout   put then get gives back every block bit for bit; the rows'
 *            puts write every payload byte (two payloads filled with
 *            different bytes come out equal), and the payload has the
 *            size and, byte by byte, the order kern_lq.c and cflow(5)
 *            document (re-derived here from the text);
 *   pack     kern_tile_pack of GGML blocks keeps them (kern_tile_row is
 *            ggml's dequantisation of the source), of floats quantises
 *            the zero-padded row, refuses GGML rows cut inside a block,
 *            scales that overflow and non-finite sources;
 *   check    each corrupt field refused with its row and name; the open's
 *            fast path (a panel's scales straight from the payload) gives
 *            the row by row verdict, row and field;
 *   ref      the scalar reference against a double-precision dot of the
 *            dequantised weights and the activations as the type reads
 *            them, both flavours;
 *   tiers    every SIMD table this CPU runs against the reference, bit for
 *            bit: tile_mv and tile_mv_rp on ragged shapes (rows 1 .. 128,
 *            every column class, column windows), rows past R untouched;
 *            tile_mm and tile_mm_rp at every batch size 1 .. 33;
 *   bf16 hw  on a CPU with AVX512_BF16, the reference's BF16 sums against
 *            ggml_vec_dot_bf16's own instructions on subnormal inputs.
 */
#include "config.h"

#include "kern_test.h"
#if HAVE_X86
#include <cpuid.h>
#endif

static const enum kern_type types[] = { KERN_Q4_1, KERN_Q5_0, KERN_Q5_1,
                                        KERN_IQ4_NL, KERN_MXFP4, KERN_BF16 };
#define NTYPES (sizeof types / sizeof types[0])

#define rng_u64 kt_rng_u64
#define rng_below kt_rng_below
#define rng_unit kt_rng_unit
#define fbits kt_fbits

static const kern_type_ops *ops_of(enum kern_type t)
{
    const kern_type_ops *o = kern_type_ops_of(t);
    assert_non_null(o);
    return o;
}

/* n random blocks of type t: every byte random but the scales, which are
 * finite f16 of magnitude dlo .. dhi (m up to 8 times that, negative),
 * E8M0 exponents e0 .. e0 + 15; BF16 finite values of magnitude below
 * dhi * 64, now and then subnormal (sub). */
static void rand_blocks(enum kern_type t, uint8_t *dst, unsigned n, float dlo,
                        float dhi, unsigned e0, int sub)
{
    const kern_type_ops *o = ops_of(t);
    for (unsigned k = 0; k < n; k++) {
        uint8_t *b = dst + (size_t)k * o->blk_bytes;
        for (unsigned j = 0; j < o->blk_bytes; j++)
            b[j] = (uint8_t)rng_u64();
        if (t == KERN_BF16) {
            uint32_t u = fbits(dhi * 64.0f * rng_unit());
            if (sub && rng_below(8) == 0)
                u &= 0x807FFFFFu;       /* subnormal (or zero) */
            uint16_t h = (uint16_t)(u >> 16);
            memcpy(b, &h, 2);
        } else if (t == KERN_MXFP4) {
            b[0] = (uint8_t)(e0 + rng_below(16));
        } else {
            uint16_t d = kern_fp32_to_fp16((dlo + (dhi - dlo) * fabsf(rng_unit())) *
                                           (rng_below(2) ? 1.0f : -1.0f));
            memcpy(b, &d, 2);
            if (t == KERN_Q4_1 || t == KERN_Q5_1) {
                uint16_t m = kern_fp32_to_fp16(-8.0f * dhi * fabsf(rng_unit()));
                memcpy(b + 2, &m, 2);
            }
        }
    }
}

/* ---- layout ------------------------------------------------------------------ */

/* The documented byte offset, re-derived from cflow(5)'s text: the payload
 * byte holding byte k of row r's block b (tile of nb blocks a row). */
static size_t doc_offset(enum kern_type t, unsigned nb, unsigned r, unsigned b,
                         unsigned k)
{
    /* meta bytes, field width, qh bytes of each type */
    unsigned meta = 2, fw = 2, qh = 0;
    if (t == KERN_Q4_1 || t == KERN_Q5_1)
        meta = 4;
    if (t == KERN_MXFP4)
        meta = fw = 1;
    if (t == KERN_Q5_0 || t == KERN_Q5_1)
        qh = 4;
    const unsigned bb = meta + qh + 16, i = r % 16;
    const size_t panel = (size_t)(r / 16) * 16 * nb * bb;
    if (k < meta)                       /* field k / fw, byte k % fw */
        return panel + (size_t)b * 16 * meta + (k / fw) * 16 * fw + i * fw + k % fw;
    const size_t quants = panel + (size_t)nb * 16 * meta + (size_t)b * 16 * (qh + 16);
    if (k < meta + qh)
        return quants + 4 * i + (k - meta);
    k -= meta + qh;                     /* qs byte k: chunk k / 4 */
    return quants + 16 * qh + 64 * (k / 4) + 4 * i + k % 4;
}

/* BF16 value (r, c) of an R x C tile */
static size_t doc_offset_bf16(unsigned C, unsigned r, unsigned c)
{
    const size_t panel = (size_t)(r / 16) * 16 * C * 2;
    if (c / 2 < C / 2)                  /* in a whole pair */
        return panel + (size_t)(c / 2) * 64 + 4 * (r % 16) + 2 * (c % 2);
    return panel + (size_t)(C / 2) * 64 + 2 * (r % 16);
}

static void test_layout(void **state)
{
    (void)state;
    static const unsigned rows[] = { 1, 15, 16, 17, 100, 128 };
    static const unsigned cols_q[] = { 32, 64, 96, 160, 256 };
    static const unsigned cols_bf[] = { 1, 2, 3, 63, 64, 65, 100, 255, 256 };
    const size_t cap = 128 * 256 * 2;
    uint8_t *a = malloc(cap), *b = malloc(cap), *blocks = malloc(cap), *back = malloc(512);

    for (size_t ti = 0; ti < NTYPES; ti++) {
        const enum kern_type t = types[ti];
        const kern_type_ops *o = ops_of(t);
        const int bf = t == KERN_BF16;
        const unsigned ncols = bf ? 9 : 5;
        assert_string_equal(o->name, kern_type_name(t));
        assert_int_equal(o->src, kern_type_src(t));
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++)
            for (unsigned ci = 0; ci < ncols; ci++) {
                const unsigned R = rows[ri], C = bf ? cols_bf[ci] : cols_q[ci];
                const unsigned rp = (R + 15) / 16 * 16, nb = C / o->blk_cols;
                const size_t rb = (size_t)nb * o->blk_bytes, size = rp * rb;
                assert_int_equal(kern_tile_payload_size(t, R, C), size);
                rand_blocks(t, blocks, rp * nb, 1e-3f, 1.0f, 100, 1);
                memset(a, 0x00, size);
                memset(b, 0xFF, size);
                for (unsigned r = 0; r < rp; r++) {
                    o->put(a, rp, nb, r, blocks + r * rb);
                    o->put(b, rp, nb, r, blocks + r * rb);
                }
                assert_memory_equal(a, b, size);     /* every byte written */
                for (unsigned r = 0; r < rp; r++) {
                    o->get(a, rp, nb, r, back);
                    assert_memory_equal(back, blocks + r * rb, rb);
                    for (unsigned k = 0; k < nb; k++)
                        for (unsigned j = 0; j < o->blk_bytes; j++) {
                            size_t off = bf ? doc_offset_bf16(C, r, k)
                                                + j : doc_offset(t, nb, r, k, j);
                            if (a[off] != blocks[r * rb + k * o->blk_bytes + j])
                                fail_msg("%s %ux%u: row %u block %u byte %u not at %zu",
                                         o->name, R, C, r, k, j, off);
                        }
                }
            }
    }
    free(a);
    free(b);
    free(blocks);
    free(back);
}

/* ---- packing -------------------------------------------------------------------- */

static void test_pack(void **state)
{
    (void)state;
    const size_t cap = 128 * 256 * 2;
    uint8_t *pl = malloc(cap), *src = malloc(2 * cap), *qb = malloc(512);
    float w[256 + 32], row[256], want[256 + 32];

    for (size_t ti = 0; ti < NTYPES; ti++) {
        const enum kern_type t = types[ti];
        const kern_type_ops *o = ops_of(t);
        const unsigned bc = o->blk_cols;
        for (int iter = 0; iter < 30; iter++) {
            /* GGML blocks: kept as they are */
            unsigned R = 1 + rng_below(128);
            unsigned C = bc * (1 + rng_below(256 / bc));
            const size_t rb = (size_t)(C / bc) * o->blk_bytes;
            rand_blocks(t, src, R * (C / bc), 1e-3f, 1.0f, 100, 1);
            assert_int_equal(kern_tile_pack(t, R, C, o->src, src, rb, pl), 0);
            assert_int_equal(kern_tile_check(t, R, C, pl, NULL, NULL), 0);
            for (unsigned r = 0; r < R; r++) {
                kern_tile_row(t, R, C, pl, r, row);
                o->dequant(src + r * rb, C / bc, want);
                for (unsigned c = 0; c < C; c++)
                    assert_int_equal(fbits(row[c]), fbits(want[c]));
            }
            /* padding rows: all-zero blocks */
            size_t size = kern_tile_payload_size(t, R, C);
            unsigned rp = (R + 15) / 16 * 16;
            for (unsigned r = R; r < rp; r++) {
                uint8_t blk[512];
                o->get(pl, rp, C / bc, r, blk);
                for (size_t j = 0; j < rb; j++)
                    assert_int_equal(blk[j], 0);
            }
            assert_true(size == rp * rb);

            /* floats, any column count: the row zero-padded to whole
             * blocks, quantised by the type's quantiser */
            C = 1 + rng_below(256);
            const unsigned nb = (C + bc - 1) / bc;
            for (unsigned c = 0; c < C * R; c++)
                ((float *)src)[c] = (float)(0.1 * rng_unit());
            assert_int_equal(kern_tile_pack(t, R, C, KERN_SRC_F32, src, C * 4, pl), 0);
            for (unsigned r = 0; r < R; r++) {
                memset(w, 0, sizeof w);
                memcpy(w, (float *)src + r * C, C * sizeof(float));
                assert_int_equal(o->quant(w, nb, qb), 0);
                o->dequant(qb, nb, want);
                kern_tile_row(t, R, C, pl, r, row);
                for (unsigned c = 0; c < C; c++)
                    assert_int_equal(fbits(row[c]), fbits(want[c]));
            }
        }
        if (bc == 32) {
            /* a GGML row cut inside a block is refused */
            rand_blocks(t, src, 8, 1e-3f, 1.0f, 100, 0);
            assert_int_equal(kern_tile_pack(t, 1, 40, o->src, src, 8 * o->blk_bytes, pl), -1);
        }
        /* a source value that is not finite, or a scale that overflows */
        for (unsigned c = 0; c < 64; c++)
            w[c] = 0.5f;
        w[5] = NAN;
        assert_int_equal(kern_tile_pack(t, 1, 64, KERN_SRC_F32, w, 0, pl), -1);
        /* (an E8M0 scale holds any float's) */
        w[5] = t == KERN_BF16 ? 3.4e38f : t == KERN_IQ4_NL ? 1e8f : 3e6f;
        if (t != KERN_MXFP4)
            assert_int_equal(kern_tile_pack(t, 1, 64, KERN_SRC_F32, w, 0, pl), -1);
    }
    free(pl);
    free(src);
    free(qb);
}

/* ---- checks --------------------------------------------------------------------- */

static void expect_refused(enum kern_type t, const uint8_t *blk, unsigned C,
                           const char *field)
{
    const kern_type_ops *o = ops_of(t);
    enum { R = 20, BAD = 17 };
    const unsigned nb = C / o->blk_cols;
    const size_t rb = (size_t)nb * o->blk_bytes;
    uint8_t *rows = malloc(R * rb), *pl = malloc(kern_tile_payload_size(t, R, C));
    unsigned row = 99;
    const char *what = NULL;
    rand_blocks(t, rows, R * nb, 1e-3f, 1.0f, 110, 0);
    assert_int_equal(kern_tile_pack(t, R, C, o->src, rows, rb, pl), 0);
    /* the corrupt block put straight into the payload: the file's case */
    memcpy(rows + BAD * rb + (nb - 1) * o->blk_bytes, blk, o->blk_bytes);
    o->put(pl, 32, nb, BAD, rows + BAD * rb);
    assert_int_equal(kern_tile_check(t, R, C, pl, &row, &what), -1);
    assert_int_equal(row, BAD);
    assert_non_null(what);
    assert_string_equal(what, field);
    assert_false(kern_tile_finite(t, R, C, pl));
    /* and packing such a row fails */
    assert_int_equal(kern_tile_pack(t, R, C, o->src, rows, rb, pl), -1);
    free(rows);
    free(pl);
}

static void expect_accepted(enum kern_type t, const uint8_t *blk)
{
    uint8_t pl[16 * 24];
    const kern_type_ops *o = ops_of(t);
    assert_int_equal(kern_tile_pack(t, 1, o->blk_cols, o->src, blk, 0, pl), 0);
    assert_int_equal(kern_tile_check(t, 1, o->blk_cols, pl, NULL, NULL), 0);
}

static void test_check(void **state)
{
    (void)state;
    static const uint16_t bad_h[] = { 0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFFFF };
    uint8_t blk[32];
    for (size_t ti = 0; ti < NTYPES; ti++) {
        const enum kern_type t = types[ti];
        if (t == KERN_MXFP4 || t == KERN_BF16)
            continue;
        for (size_t k = 0; k < sizeof bad_h / sizeof bad_h[0]; k++) {
            rand_blocks(t, blk, 1, 1e-3f, 1.0f, 0, 0);
            memcpy(blk, &bad_h[k], 2);
            expect_refused(t, blk, 64, "d");
            if (t == KERN_Q4_1 || t == KERN_Q5_1) {
                rand_blocks(t, blk, 1, 1e-3f, 1.0f, 0, 0);
                memcpy(blk + 2, &bad_h[k], 2);
                expect_refused(t, blk, 96, "m");
            }
        }
        /* the largest finite halves are fine */
        rand_blocks(t, blk, 1, 1e-3f, 1.0f, 0, 0);
        memcpy(blk, "\xFF\x7B", 2);
        expect_accepted(t, blk);
    }

    /* MXFP4: E8M0 0xFF (NaN), and a scale at which a nibble decodes to inf */
    rand_blocks(KERN_MXFP4, blk, 1, 0, 0, 0, 0);
    blk[0] = 0xFF;
    expect_refused(KERN_MXFP4, blk, 64, "e8m0 scale");
    memset(blk + 1, 0x00, 16);
    blk[1] = 0x07;                      /* one nibble 7: 12 x 2^(e - 128) */
    blk[0] = 253;
    expect_refused(KERN_MXFP4, blk, 32, "e8m0 scale");
    blk[0] = 252;                       /* 1.5 x 2^127: finite */
    expect_accepted(KERN_MXFP4, blk);
    blk[0] = 254;
    blk[1] = 0x11;                      /* nibbles 1: 2^126 */
    expect_accepted(KERN_MXFP4, blk);
    blk[1] = 0x44;                      /* nibbles 4 (value 4): 2^128 */
    expect_refused(KERN_MXFP4, blk, 32, "e8m0 scale");
    blk[0] = 0;                         /* the subnormal scales */
    expect_accepted(KERN_MXFP4, blk);

    /* BF16: an inf or NaN weight */
    static const uint16_t bad_bf[] = { 0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFFF };
    for (size_t k = 0; k < sizeof bad_bf / sizeof bad_bf[0]; k++)
        expect_refused(KERN_BF16, (const uint8_t *)&bad_bf[k], 31, "weight");
}

/* kern_tile_check (with its types' panel fast path) against the row by row
 * verdict, on payloads with a few fields set to what the checks refuse,
 * MXFP4 exponents 253 and 254 over small and large nibbles among them. */
static void test_check_fast(void **state)
{
    (void)state;
    uint8_t *pl = malloc(128 * 256 * 2), *src = malloc(128 * 256 * 2), blk[512];
    for (size_t ti = 0; ti < NTYPES; ti++) {
        const enum kern_type t = types[ti];
        const kern_type_ops *o = ops_of(t);
        assert_non_null(o->panel_ok);
        for (int iter = 0; iter < 150; iter++) {
            const unsigned R = 1 + rng_below(128);
            const unsigned C = o->blk_cols * (1 + rng_below(256 / o->blk_cols));
            const unsigned nb = C / o->blk_cols, rp = (R + 15) / 16 * 16;
            rand_blocks(t, src, R * nb, 1e-3f, 1.0f, 120, 1);
            assert_int_equal(kern_tile_pack(t, R, C, o->src, src, nb * o->blk_bytes, pl), 0);
            const unsigned nbad = rng_below(3);
            for (unsigned k = 0; k < nbad; k++) {
                const unsigned r = rng_below(rp), b = rng_below(nb);
                o->get(pl, rp, nb, r, blk);
                uint8_t *x = blk + b * o->blk_bytes;
                if (t == KERN_MXFP4) {
                    x[0] = (uint8_t)(253 + rng_below(3));
                    if (rng_below(2))
                        memset(x + 1, 0x11 * rng_below(4), 16);   /* values 0 .. 3 */
                } else if (t == KERN_BF16) {
                    x[1] |= 0x7F;
                    x[0] |= 0x80;
                } else {
                    const unsigned field = (t == KERN_Q4_1 || t == KERN_Q5_1) ? rng_below(2) : 0;
                    x[2 * field + 1] |= 0x7C;
                }
                o->put(pl, rp, nb, r, blk);
            }
            int want_rc = 0;
            unsigned want_row = 0;
            const char *want_what = NULL;
            for (unsigned r = 0; r < rp && !want_rc; r++) {
                o->get(pl, rp, nb, r, blk);
                if (o->check(blk, nb, &want_what) < 0) {
                    want_rc = -1;
                    want_row = r;
                }
            }
            unsigned row = 999;
            const char *what = NULL;
            assert_int_equal(kern_tile_check(t, R, C, pl, &row, &what), want_rc);
            if (want_rc) {
                assert_int_equal(row, want_row);
                assert_string_equal(what, want_what);
            }
        }
    }
    free(pl);
    free(src);
}

/* ---- the reference against doubles ------------------------------------------- */

/* activation i as the type reads it */
static double act_value(enum kern_type t, const kern_act *a, unsigned i)
{
    if (t == KERN_BF16)
        return kern_bf16_to_fp32(a->bf16[i]);
    return (double)a->q8[i] * a->q8_d[i / 32];
}

static kern_tile_mv_fn mv_of(const kern_ops *ops, enum kern_type t, int rp)
{
    return rp ? ops->tile_mv_rp[t] : ops->tile_mv[t];
}

static kern_tile_mm_fn mm_of(const kern_ops *ops, enum kern_type t, int rp)
{
    return rp ? ops->tile_mm_rp[t] : ops->tile_mm[t];
}

static int has_rp(enum kern_type t)
{
    return t == KERN_IQ4_NL || t == KERN_MXFP4;
}

static void test_ref(void **state)
{
    (void)state;
    const size_t cap = 128 * 256 * 2;
    uint8_t *pl = malloc(cap);
    float *w = malloc(128 * 256 * 4), *wd = malloc(128 * 256 * 4), x[512];
    kern_act a;
    assert_int_equal(kern_act_init(&a, 512), 0);
    const kern_ops *ref = kern_ops_ref();

    for (size_t ti = 0; ti < NTYPES; ti++) {
        const enum kern_type t = types[ti];
        for (int iter = 0; iter < 40; iter++) {
            const unsigned R = 1 + rng_below(128), C = 1 + rng_below(256);
            const unsigned col0 = t == KERN_BF16 ? rng_below(64) : 32 * rng_below(4);
            const float mag = powf(10.0f, 3.0f * rng_unit());
            for (unsigned i = 0; i < R * C; i++)
                w[i] = mag * rng_unit();
            assert_int_equal(kern_tile_pack(t, R, C, KERN_SRC_F32, w, C * 4, pl), 0);
            kern_tile_unpack(t, R, C, pl, wd, C);
            for (unsigned i = 0; i < col0 + C; i++)
                x[i] = (i / 32) % 5 == 3 ? 0.0f : 4.0f * rng_unit();
            kern_act_set(&a, x, col0 + C, KERN_NEED(t));
            for (int rp = 0; rp <= has_rp(t); rp++) {
                float y[128];
                for (unsigned r = 0; r < R; r++)
                    y[r] = 1.0f;
                mv_of(ref, t, rp)(pl, R, C, &a, col0, y);
                for (unsigned r = 0; r < R; r++) {
                    /* Q4_1/Q5_1 read the min's share through s: w = q d + m
                     * gives sum (w - m) x + m s per block */
                    const int has_m = t == KERN_Q4_1 || t == KERN_Q5_1;
                    const kern_type_ops *o = ops_of(t);
                    uint8_t blk[8 * 24];
                    const unsigned nb = (C + 31) / 32;
                    if (has_m)
                        o->get(pl, (R + 15) / 16 * 16, nb, r, blk);
                    double sum = 0, sabs = 0;
                    for (unsigned c = 0; c < C; c++) {
                        double m = 0;
                        if (has_m)
                            m = kern_fp16_to_fp32((uint16_t)(blk[c / 32 * o->blk_bytes + 2] |
                                                  blk[c / 32 * o->blk_bytes + 3] << 8));
                        double term = ((double)wd[r * C + c] - m) * act_value(t, &a, col0 + c);
                        sum += term;
                        sabs += fabs(term) + fabs(m * act_value(t, &a, col0 + c));
                    }
                    for (unsigned b = 0; has_m && b < nb; b++) {
                        double m = kern_fp16_to_fp32((uint16_t)(blk[b * o->blk_bytes + 2] |
                                                     blk[b * o->blk_bytes + 3] << 8));
                        sum += m * a.q8_s[col0 / 32 + b];
                        sabs += fabs(m * a.q8_s[col0 / 32 + b]);
                    }
                    double tol = 300 * 1.2e-7 * sabs + 1.2e-7 * (1 + fabs(sum)) + 1e-30;
                    if (!(fabs((double)y[r] - 1.0 - sum) <= tol))
                        fail_msg("%s%s %ux%u col0 %u row %u: %.9g, want %.9g",
                                 kern_type_name(t), rp ? " (repacked)" : "", R, C,
                                 col0, r, y[r] - 1.0, sum);
                }
            }
        }
    }
    kern_act_free(&a);
    free(pl);
    free(w);
    free(wd);
}

/* ---- every tier against the reference ------------------------------------------ */

/* A tile of random blocks (from GGML blocks: whole blocks; or floats: any
 * column count) */
static void random_tile(enum kern_type t, unsigned R, unsigned C, uint8_t *pl,
                        uint8_t *tmp)
{
    const kern_type_ops *o = ops_of(t);
    if (C % o->blk_cols == 0 && rng_below(4)) {
        const unsigned nb = C / o->blk_cols;
        rand_blocks(t, tmp, R * nb, 1e-3f, 0.05f, 116, 1);
        assert_int_equal(kern_tile_pack(t, R, C, o->src, tmp, nb * o->blk_bytes, pl), 0);
    } else {
        float *w = (float *)tmp;
        for (unsigned i = 0; i < R * C; i++)
            w[i] = 0.05f * rng_unit();
        assert_int_equal(kern_tile_pack(t, R, C, KERN_SRC_F32, w, C * 4, pl), 0);
    }
}

static void test_tiers(void **state)
{
    (void)state;
    enum { MMAX = 33, LDY = 136 };
    static const unsigned rows[] = { 1, 3, 15, 16, 17, 31, 33, 64, 100, 127, 128 };
    static const unsigned cols_q[] = { 32, 64, 96, 160, 224, 256, 1, 7, 33, 200, 255 };
    static const unsigned cols_bf[] = { 1, 2, 31, 63, 64, 65, 100, 127, 128, 191, 255, 256 };
    uint8_t *pl = malloc(128 * 256 * 2), *tmp = malloc(128 * 256 * 4);
    float *yref = malloc(sizeof(float) * MMAX * LDY), *y = malloc(sizeof(float) * MMAX * LDY);
    kern_act xs[MMAX];
    float x[512];
    for (int j = 0; j < MMAX; j++)
        assert_int_equal(kern_act_init(&xs[j], 512), 0);
    const kern_ops *ref = kern_ops_ref();

    for (size_t ti = 0; ti < NTYPES; ti++) {
        const enum kern_type t = types[ti];
        const int bf = t == KERN_BF16;
        const unsigned ncols = bf ? 12 : 11;
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++)
            for (unsigned ci = 0; ci < ncols; ci++) {
                const unsigned R = rows[ri], C = bf ? cols_bf[ci] : cols_q[ci];
                const unsigned col0 = bf ? 3 * rng_below(3) : 32 * rng_below(3);
                /* batch sizes: a few per shape, every one over the shapes */
                const unsigned m = 1 + (unsigned)((ri * ncols + ci) % MMAX);
                random_tile(t, R, C, pl, tmp);
                for (unsigned j = 0; j < m; j++) {
                    const float mag = j % 5 == 4 ? 1e-39f : j % 3 == 2 ? 1e-3f : 3.0f;
                    for (unsigned i = 0; i < col0 + C + 5; i++)
                        x[i] = (i / 32) % 7 == 4 ? 0.0f : mag * rng_unit();
                    kern_act_set(&xs[j], x, col0 + C, KERN_NEED(t));
                }
                for (int rp = 0; rp <= has_rp(t); rp++) {
                    for (unsigned i = 0; i < MMAX * LDY; i++)
                        yref[i] = i % LDY < R ? rng_unit() : 777.0f;
                    memcpy(y, yref, sizeof(float) * MMAX * LDY);
                    for (unsigned j = 0; j < m; j++)
                        mv_of(ref, t, rp)(pl, R, C, &xs[j], col0, yref + j * LDY);
                    for (int isa = 1; isa < KERN_NISA; isa++) {
                        const kern_ops *ops = kern_ops_for((enum kern_isa)isa);
                        if (!ops)
                            continue;
                        float *ymv = malloc(sizeof(float) * LDY);
                        memcpy(ymv, y, sizeof(float) * LDY);
                        mv_of(ops, t, rp)(pl, R, C, &xs[0], col0, ymv);
                        for (unsigned r = 0; r < LDY; r++)
                            if (fbits(ymv[r]) != fbits(yref[r]))
                                fail_msg("%s %s%s mv %ux%u col0 %u row %u: %.9g, ref %.9g",
                                         ops->name, kern_type_name(t), rp ? " rp" : "", R,
                                         C, col0, r, ymv[r], yref[r]);
                        free(ymv);
                        float *ymm = malloc(sizeof(float) * MMAX * LDY);
                        memcpy(ymm, y, sizeof(float) * MMAX * LDY);
                        mm_of(ops, t, rp)(pl, R, C, xs, m, col0, ymm, LDY);
                        for (unsigned i = 0; i < MMAX * LDY; i++)
                            if (fbits(ymm[i]) != fbits(i < m * LDY ? yref[i] : y[i]))
                                fail_msg("%s %s%s mm %ux%u col0 %u m %u input %u row %u: "
                                         "%.9g, ref %.9g", ops->name, kern_type_name(t),
                                         rp ? " rp" : "", R, C, col0, m, i / LDY, i % LDY,
                                         ymm[i], yref[i]);
                        free(ymm);
                    }
                }
            }
    }
    for (int j = 0; j < MMAX; j++)
        kern_act_free(&xs[j]);
    free(pl);
    free(tmp);
    free(yref);
    free(y);
}

/* Every batch size 1 .. 33 on one full tile per type and flavour. */
static void test_tiers_batch(void **state)
{
    (void)state;
    enum { MMAX = 33, R = 100, C = 256 };
    uint8_t *pl = malloc(128 * 256 * 2), *tmp = malloc(128 * 256 * 4);
    float yref[MMAX][R], y[MMAX][R], x[C];
    kern_act xs[MMAX];
    for (int j = 0; j < MMAX; j++)
        assert_int_equal(kern_act_init(&xs[j], C), 0);
    const kern_ops *ref = kern_ops_ref();
    for (size_t ti = 0; ti < NTYPES; ti++) {
        const enum kern_type t = types[ti];
        random_tile(t, R, C, pl, tmp);
        for (int j = 0; j < MMAX; j++) {
            for (unsigned i = 0; i < C; i++)
                x[i] = 2.0f * rng_unit();
            kern_act_set(&xs[j], x, C, KERN_NEED(t));
        }
        for (int rp = 0; rp <= has_rp(t); rp++) {
            memset(yref, 0, sizeof yref);
            for (int j = 0; j < MMAX; j++)
                mv_of(ref, t, rp)(pl, R, C, &xs[j], 0, yref[j]);
            for (int isa = 1; isa < KERN_NISA; isa++) {
                const kern_ops *ops = kern_ops_for((enum kern_isa)isa);
                if (!ops)
                    continue;
                for (unsigned m = 1; m <= MMAX; m++) {
                    memset(y, 0, sizeof y);
                    mm_of(ops, t, rp)(pl, R, C, xs + MMAX - m, m, 0, y[0], R);
                    for (unsigned j = 0; j < m; j++)
                        if (memcmp(y[j], yref[MMAX - m + j], sizeof y[j]))
                            fail_msg("%s %s%s mm m %u: input %u differs", ops->name,
                                     kern_type_name(t), rp ? " rp" : "", m, j);
                }
            }
        }
    }
    for (int j = 0; j < MMAX; j++)
        kern_act_free(&xs[j]);
    free(pl);
    free(tmp);
}

/* ---- BF16 against the instruction ---------------------------------------------- */

#if HAVE_X86
static int cpu_bf16(void)
{
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 5 & 1) &&
           __builtin_cpu_supports("avx512f");
}

/* ggml_vec_dot_bf16 of an AVX512_BF16 build (vec.cpp), as it is written */
__attribute__((target("avx512f,avx512bf16"))) static float
ggml_dot_bf16(int n, const uint16_t *x, const uint16_t *y)
{
    int i = 0;
    double sumf = 0;
    __m512 c1 = _mm512_setzero_ps(), c2 = _mm512_setzero_ps();
    for (; i + 64 <= n; i += 64) {
        c1 = _mm512_dpbf16_ps(c1, (__m512bh)_mm512_loadu_si512(x + i),
                              (__m512bh)_mm512_loadu_si512(y + i));
        c2 = _mm512_dpbf16_ps(c2, (__m512bh)_mm512_loadu_si512(x + i + 32),
                              (__m512bh)_mm512_loadu_si512(y + i + 32));
    }
    sumf += (double)_mm512_reduce_add_ps(c1);
    sumf += (double)_mm512_reduce_add_ps(c2);
    for (; i < n; ++i)
        sumf += (double)(kern_bf16_to_fp32(x[i]) * kern_bf16_to_fp32(y[i]));
    return (float)sumf;
}
#endif

static void test_bf16_hw(void **state)
{
    (void)state;
#if HAVE_X86
    if (!cpu_bf16()) {
        print_message("no AVX512_BF16 here: the reference is held to ggml's "
                      "hashes only\n");
        return;
    }
    enum { R = 16, C = 256 };
    uint16_t w[R * C], xb[C];
    uint8_t pl[R * C * 2];
    kern_act a;
    assert_int_equal(kern_act_init(&a, C), 0);
    for (int iter = 0; iter < 400; iter++) {
        const unsigned n = iter % 4 == 0 ? 64 + rng_below(C - 63) : C;
        /* small magnitudes (exponents 2^-70 .. 2^-56, sums near the
         * subnormal range), subnormals and ordinary values */
        for (unsigned i = 0; i < R * n + n; i++) {
            uint32_t u = (uint32_t)rng_u64();
            unsigned kind = rng_below(iter % 2 ? 3 : 4);  /* odd: tiny only */
            if (kind == 0)
                u &= 0x807FFFFFu;
            else if (kind < 3)
                u = (u & 0x807FFFFFu) | (uint32_t)(57 + rng_below(15)) << 23;
            else
                u = fbits(rng_unit());
            if (i < R * n)
                w[i] = (uint16_t)(u >> 16);
            else
                xb[i - R * n] = (uint16_t)(u >> 16);
        }
        assert_int_equal(kern_tile_pack(KERN_BF16, R, n, KERN_SRC_BF16, w, n * 2, pl), 0);
        a.n = n;                        /* subnormal activations, as they are */
        a.n_pad = (n + 31) / 32 * 32;
        memset(a.bf16, 0, a.n_pad * 2);
        memcpy(a.bf16, xb, n * 2);
        for (int isa = 0; isa < KERN_NISA; isa++) {
            const kern_ops *ops = kern_ops_for((enum kern_isa)isa);
            if (!ops)
                continue;
            float y[R] = { 0 };
            ops->tile_mv[KERN_BF16](pl, R, n, &a, 0, y);
            for (unsigned r = 0; r < R; r++) {
                float want = ggml_dot_bf16((int)n, w + r * n, xb);
                if (fbits(y[r]) != fbits(want))
                    fail_msg("%s bf16 16x%u row %u: %a, the instruction's %a",
                             ops->name, n, r, y[r], want);
            }
        }
    }
    kern_act_free(&a);
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_pack),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_check_fast),
        cmocka_unit_test(test_ref),
        cmocka_unit_test(test_tiers),
        cmocka_unit_test(test_tiers_batch),
        cmocka_unit_test(test_bf16_hw),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
