/*
 * test_kern_kq.c — the K-quant tile types (Q2_K .. Q6_K) and IQ4_XS:
 * payloads, ggml's conversions, the Q8_K activations and the mat-vec and
 * batched kernels of every ISA this CPU runs.
 *
 * Oracles:
 *   - the payload order as kern_kq.c's essay states it, recomputed here
 *     from the field table of the text (a permutation: every byte of
 *     every block once, get gives back what put took);
 *   - hashes of ggml's own outputs (libggml 0.18.1 of llama.cpp mainline,
 *     tests/data/kq/README.md) on the inputs of kq_gold.h: its
 *     dequantize_row_*, its reference quantisers (llama-quantize without
 *     an imatrix), its Q8_K quantiser and its mat-vec through the CPU
 *     backend (the repacked gemv of Q4_K and Q2_K, vec_dot of the others)
 *     for rows of one super-block, which every ISA's tile_mv and tile_mm
 *     must give bit for bit;
 *   - a double-precision dot of the dequantised weights and activations
 *     for the reference mat-vec (within the float rounding of its sums);
 *   - the scalar reference for every SIMD table, bit for bit, on rows
 *     1..128, tiles quantised from narrower rows, three activation
 *     blocks, and every batch size 1..33;
 *   - blocks with NaN or Inf scales refused by kern_tile_check and by
 *     kern_tile_pack, naming the row and the field.
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

#include "kernels/kern.h"
#include "kq_gold.h"

#define NT KQ_GOLD_NTYPES

static enum kern_type ktype(const kq_gold_type *T)
{
    return (enum kern_type)T->kern;
}

static enum kern_src ksrc(const kq_gold_type *T)
{
    return kern_type_src(ktype(T));
}

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* ---- the payload order ----------------------------------------------------- */

/* kern_kq.c's table of fields (off, len, w), as its essay and cflow(5)
 * print it */
static const struct { int kern; unsigned n; unsigned f[5][3]; } fields[] = {
    { KERN_Q2_K, 4, { { 0, 16, 1 }, { 16, 64, 4 }, { 80, 2, 2 }, { 82, 2, 2 } } },
    { KERN_Q3_K, 4, { { 0, 32, 4 }, { 32, 64, 4 }, { 96, 12, 1 }, { 108, 2, 2 } } },
    { KERN_Q4_K, 4, { { 0, 2, 2 }, { 2, 2, 2 }, { 4, 12, 1 }, { 16, 128, 4 } } },
    { KERN_Q5_K, 5, { { 0, 2, 2 }, { 2, 2, 2 }, { 4, 12, 1 }, { 16, 32, 4 }, { 48, 128, 4 } } },
    { KERN_Q6_K, 4, { { 0, 128, 4 }, { 128, 64, 4 }, { 192, 16, 1 }, { 208, 2, 2 } } },
    { KERN_IQ4_XS, 4, { { 0, 2, 2 }, { 2, 2, 2 }, { 4, 4, 1 }, { 8, 128, 4 } } },
};

/* payload byte of block byte b of row r */
static size_t doc_offset(unsigned ti, unsigned bytes, unsigned r, unsigned b)
{
    for (unsigned f = 0; f < fields[ti].n; f++) {
        unsigned off = fields[ti].f[f][0], len = fields[ti].f[f][1], w = fields[ti].f[f][2];
        if (b >= off && b < off + len)
            return (size_t)(r / 16) * 16 * bytes + 16 * off + (b - off) / w * 16 * w +
                   (r % 16) * w + (b - off) % w;
    }
    return (size_t)-1;
}

static void test_kq_payload(void **state)
{
    (void)state;
    uint8_t *blocks = malloc(128 * 256), *pl = malloc(128 * 256), *seen = malloc(128 * 256);
    for (unsigned ti = 0; ti < NT; ti++) {
        const kq_gold_type *T = &kq_gold_types[ti];
        assert_int_equal(fields[ti].kern, T->kern);
        assert_int_equal(kern_type_block(ktype(T)), 256);
        unsigned bytes = 0;
        assert_int_equal(kern_src_block(ksrc(T), &bytes), 256);
        assert_int_equal(bytes, T->bytes);
        assert_string_equal(kern_type_name(ktype(T)), T->name);
        assert_int_equal(kern_type_from_name(T->name), T->kern);
        /* the fields cover the block once, in order */
        unsigned at = 0;
        for (unsigned f = 0; f < fields[ti].n; f++) {
            assert_int_equal(fields[ti].f[f][0], at);
            assert_int_equal(fields[ti].f[f][1] % fields[ti].f[f][2], 0);
            at += fields[ti].f[f][1];
        }
        assert_int_equal(at, T->bytes);

        for (unsigned R = 1; R <= 128; R += R < 20 ? 1 : 27) {
            const unsigned rp = (R + 15) / 16 * 16;
            const size_t size = (size_t)rp * T->bytes;
            assert_int_equal(kern_tile_payload_size(ktype(T), R, 256), size);
            assert_int_equal(kern_tile_payload_size(ktype(T), R, 100), size);
            kq_gold_seed(R * 7 + ti);
            kq_gold_blocks(T, blocks, R);
            memset(pl, 0xA5, size);
            assert_int_equal(kern_tile_pack(ktype(T), R, 256, ksrc(T), blocks, T->bytes, pl), 0);
            /* every byte where the text puts it, padding rows zero, and a
             * permutation: each payload byte written once */
            memset(seen, 0, size);
            for (unsigned r = 0; r < rp; r++)
                for (unsigned b = 0; b < T->bytes; b++) {
                    size_t o = doc_offset(ti, T->bytes, r, b);
                    assert_true(o < size);
                    assert_int_equal(seen[o], 0);
                    seen[o] = 1;
                    if (pl[o] != (r < R ? blocks[r * T->bytes + b] : 0))
                        fail_msg("%s R %u: row %u block byte %u at payload byte %zu: 0x%02x, "
                                 "want 0x%02x", T->name, R, r, b, o, pl[o],
                                 r < R ? blocks[r * T->bytes + b] : 0);
                }
            /* a block cut by the tile's edge is refused */
            assert_int_equal(kern_tile_pack(ktype(T), R, 200, ksrc(T), blocks, T->bytes, pl), -1);
        }
    }
    free(blocks);
    free(pl);
    free(seen);
}

/* ---- ggml's own outputs ------------------------------------------------------ */

/* made by tests/data/kq/ggml_golden.c (README.md there) */
/* deq, qnt: dequantize_row_*, quantize_chunk; mv: mul_mat from the CPU
 * buffer (vec_dot); rp: from the CPU_REPACK buffer (0: not repacked) */
static const struct { const char *name; uint64_t deq, qnt, mv, rp; } gold[] = {
    { "q2_k", 0x207215cecd0a23bbull, 0xb6e7adc84a15e915ull, 0x52989fb3397acd2aull, 0x86f434355c175337ull },
    { "q3_k", 0x24704d31542ac800ull, 0xa82ae4cfaaa9a939ull, 0x33953700be0cd677ull, 0 },
    { "q4_k", 0xee0bcadfdc5133deull, 0x8428a288f6250652ull, 0x848fbdafd142cbafull, 0x334e76a24b6ee948ull },
    { "q5_k", 0xb06b7d6bd2270e98ull, 0xd7b69b43be8b1c9bull, 0xe8cb6010bd4a929aull, 0 },
    { "q6_k", 0xb759f412a65467ceull, 0x8fc80a348c509de4ull, 0x7a03b03116371c7eull, 0 },
    { "iq4_xs", 0x3604785e61a97fb1ull, 0x5611f25046202b20ull, 0x4a58bb3868d23186ull, 0 },
};
#define GOLD_Q8K 0x059f722d76025fe8ull

static void want_hash(const char *what, const char *type, uint64_t got, uint64_t want)
{
    if (got != want)
        fail_msg("%s %s: hash 0x%016llx, ggml's 0x%016llx", type, what,
                 (unsigned long long)got, (unsigned long long)want);
}

/* the whole of the entries of kern_tile_row over a payload of one block a
 * row: out [R][256] */
static void unpack_rows(enum kern_type t, unsigned R, const uint8_t *pl, float *out)
{
    kern_tile_unpack(t, R, 256, pl, out, 256);
}

static void test_kq_golden(void **state)
{
    (void)state;
    enum { NB = KQ_GOLD_DEQ_BLOCKS, MR = KQ_GOLD_MV_ROWS, NV = KQ_GOLD_MV_VECS };
    uint8_t *blocks = malloc(NB * 256), *pl = malloc(128 * 256);
    float *f = malloc(NB * 256 * sizeof(float)), y[NV * MR];
    kern_act act[NV];
    for (unsigned v = 0; v < NV; v++)
        assert_int_equal(kern_act_init(&act[v], 256), 0);

    for (unsigned ti = 0; ti < NT; ti++) {
        const kq_gold_type *T = &kq_gold_types[ti];
        assert_string_equal(gold[ti].name, T->name);

        /* dequantize_row_*: through a payload and kern_tile_row */
        kq_gold_seed(16 * ti + 1);
        kq_gold_blocks(T, blocks, NB);
        assert_int_equal(kern_tile_pack(ktype(T), NB, 256, ksrc(T), blocks, T->bytes, pl), 0);
        unpack_rows(ktype(T), NB, pl, f);
        want_hash("dequantize", T->name, kq_gold_fnv(KQ_GOLD_FNV0, f, NB * 256 * sizeof(float)),
                  gold[ti].deq);

        /* quantize_row_*_ref: packing floats, then the blocks back */
        kq_gold_seed(16 * ti + 2);
        for (unsigned r = 0; r < KQ_GOLD_QROWS; r++)
            kq_gold_row(r, f + 256 * r);
        assert_int_equal(kern_tile_pack(ktype(T), KQ_GOLD_QROWS, 256, KERN_SRC_F32, f,
                                        256 * sizeof(float), pl), 0);
        /* the blocks, in row order, are the payload in the text's order */
        uint64_t h = KQ_GOLD_FNV0;
        for (unsigned r = 0; r < KQ_GOLD_QROWS; r++)
            for (unsigned b = 0; b < T->bytes; b++)
                h = kq_gold_fnv(h, pl + doc_offset(ti, T->bytes, r, b), 1);
        want_hash("quantize", T->name, h, gold[ti].qnt);

        /* mul_mat: every table's tile_mv and tile_mm */
        kq_gold_seed(16 * ti + 3);
        kq_gold_blocks(T, blocks, MR);
        kq_gold_vec(f, 256 * NV, -1);
        for (unsigned v = 0; v < NV; v++)
            kern_act_set(&act[v], f + 256 * v, 256, KERN_NEED_Q8_K);
        assert_int_equal(kern_tile_pack(ktype(T), MR, 256, ksrc(T), blocks, T->bytes, pl), 0);
        for (int isa = 0; isa < KERN_NISA; isa++) {
            const kern_ops *ops = kern_ops_for((enum kern_isa)isa);
            if (!ops)
                continue;
            for (int rp = 0; rp < 2; rp++) {
                kern_tile_mv_fn mv = rp ? ops->tile_mv_rp[ktype(T)] : ops->tile_mv[ktype(T)];
                kern_tile_mm_fn mm = rp ? ops->tile_mm_rp[ktype(T)] : ops->tile_mm[ktype(T)];
                const uint64_t want = rp ? gold[ti].rp : gold[ti].mv;
                /* a repacked flavour exactly where llama.cpp repacks */
                assert_int_equal(mv != NULL, !rp || want);
                assert_int_equal(mm != NULL, !rp || want);
                if (!mv)
                    continue;
                char what[64];
                memset(y, 0, sizeof y);
                for (unsigned v = 0; v < NV; v++)
                    mv(pl, MR, 256, &act[v], 0, y + MR * v);
                snprintf(what, sizeof what, "%s tile_mv%s", ops->name, rp ? "_rp" : "");
                want_hash(what, T->name, kq_gold_fnv(KQ_GOLD_FNV0, y, sizeof y), want);
                memset(y, 0, sizeof y);
                mm(pl, MR, 256, act, NV, 0, y, MR);
                snprintf(what, sizeof what, "%s tile_mm%s", ops->name, rp ? "_rp" : "");
                want_hash(what, T->name, kq_gold_fnv(KQ_GOLD_FNV0, y, sizeof y), want);
            }
        }
    }

    /* quantize_row_q8_K: every table's act_q8k */
    kq_gold_seed(1000);
    for (unsigned r = 0; r < KQ_GOLD_Q8K_BLOCKS; r++)
        kq_gold_row(r, f + 256 * r);
    for (int isa = 0; isa < KERN_NISA; isa++) {
        const kern_ops *ops = kern_ops_for((enum kern_isa)isa);
        if (!ops)
            continue;
        int8_t q[KQ_GOLD_Q8K_BLOCKS * 256];
        float d[KQ_GOLD_Q8K_BLOCKS];
        int16_t bs[KQ_GOLD_Q8K_BLOCKS * 16];
        ops->act_q8k(f, KQ_GOLD_Q8K_BLOCKS, q, d, bs);
        uint64_t h = KQ_GOLD_FNV0;
        for (unsigned b = 0; b < KQ_GOLD_Q8K_BLOCKS; b++)
            h = kq_gold_q8k(h, d[b], q + 256 * b, bs + 16 * b);
        want_hash(ops->name, "act_q8k", h, GOLD_Q8K);
    }
    for (unsigned v = 0; v < NV; v++)
        kern_act_free(&act[v]);
    free(blocks);
    free(pl);
    free(f);
}

/* ---- the reference against doubles -------------------------------------------- */

/* The two parts of the dequantised weights of R blocks: wd with dmin
 * zeroed (d sc q), wm with d zeroed (minus dmin m, or 0) */
static void parts(const kq_gold_type *T, unsigned R, const uint8_t *blocks,
                  uint8_t *pl, float *wd, float *wm)
{
    uint8_t *b = malloc(R * T->bytes);
    for (int part = 0; part < 2; part++) {
        memcpy(b, blocks, R * T->bytes);
        for (unsigned r = 0; r < R; r++) {
            if (T->dmin_off >= 0)
                memset(b + r * T->bytes + (part ? T->d_off : T->dmin_off), 0, 2);
            else if (part)
                memset(b + r * T->bytes + T->d_off, 0, 2);
        }
        assert_int_equal(kern_tile_pack(ktype(T), R, 256, ksrc(T), b, T->bytes, pl), 0);
        unpack_rows(ktype(T), R, pl, part ? wm : wd);
    }
    free(b);
}

static void test_kq_ref_double(void **state)
{
    (void)state;
    enum { R = 40, N = 768 };
    uint8_t *blocks = malloc(R * 256), *pl = malloc(128 * 256);
    float *w = malloc(R * 256 * sizeof(float)), x[N], y[R];
    float *wd = malloc(R * 256 * sizeof(float)), *wm = malloc(R * 256 * sizeof(float));
    kern_act a;
    assert_int_equal(kern_act_init(&a, N), 0);
    const kern_ops *ref = kern_ops_ref();
    for (unsigned ti = 0; ti < NT; ti++) {
        const kq_gold_type *T = &kq_gold_types[ti];
        for (unsigned trial = 0; trial < 6; trial++) {
            kq_gold_seed(5000 + 16 * ti + trial);
            kq_gold_blocks(T, blocks, R);
            kq_gold_vec(x, N, trial == 2 ? 1 : -1);
            kern_act_set(&a, x, N, KERN_NEED_Q8_K);
            parts(T, R, blocks, pl, wd, wm);
            assert_int_equal(kern_tile_pack(ktype(T), R, 256, ksrc(T), blocks, T->bytes, pl), 0);
            unpack_rows(ktype(T), R, pl, w);
            const unsigned col0 = 256 * (trial % 3);
            memset(y, 0, sizeof y);
            /* the repacked flavour where there is one, on odd trials */
            if (trial % 2 && ref->tile_mv_rp[ktype(T)])
                ref->tile_mv_rp[ktype(T)](pl, R, 256, &a, col0, y);
            else
                ref->tile_mv[ktype(T)](pl, R, 256, &a, col0, y);
            const float dx = a.q8k_d[col0 / 256];
            for (unsigned r = 0; r < R; r++) {
                double s = 0, mag = 0;
                for (unsigned c = 0; c < 256; c++) {
                    double xv = (double)dx * a.q8k[col0 + c];
                    s += (double)w[r * 256 + c] * xv;
                    mag += (fabs(wd[r * 256 + c]) + fabs(wm[r * 256 + c])) * fabs(xv);
                }
                const double got = y[r];
                /* float steps: the products of scales, the int -> float of
                 * sums up to ~2^25, the folds and the difference of the
                 * scale and min parts: a few ulps of both parts' size */
                if (fabs(got - s) > 5e-7 * mag + 1e-30)
                    fail_msg("%s trial %u row %u: %.9g, double %.9g (sum |w x| %.3g)",
                             T->name, trial, r, got, s, mag);
            }
        }
    }
    kern_act_free(&a);
    free(blocks);
    free(pl);
    free(w);
    free(wd);
    free(wm);
}

/* ---- every tier against the reference ------------------------------------------- */

enum { TG_MMAX = 33, TG_LDY = 128 + 3 };

/* Every SIMD table's flavour (rp: the repacked one) of type t on an R x C
 * payload pl at col0, against the reference's, bit for bit: tile_mv of
 * each of the TG_MMAX inputs and tile_mm of the first m (every m 1..33 for
 * some row counts, every 8th for the rest), over random y with guard
 * rows; returns the runs checked. */
static unsigned tiers_check(const char *name, enum kern_type t, int rp,
                            const uint8_t *pl, unsigned R, unsigned C,
                            unsigned col0, const kern_act *acts, float *y0,
                            float *yr, float *y)
{
    const kern_ops *ref = kern_ops_ref();
    unsigned checked = 0;
    for (size_t i = 0; i < TG_MMAX * TG_LDY; i++)
        y0[i] = i % TG_LDY < R ? kq_gold_unit() : 777.0f;
    memcpy(yr, y0, TG_MMAX * TG_LDY * sizeof(float));
    for (unsigned j = 0; j < TG_MMAX; j++)
        (rp ? ref->tile_mv_rp[t] : ref->tile_mv[t])(pl, R, C, &acts[j], col0,
                                                     yr + j * TG_LDY);
    for (int isa = KERN_ISA_SCALAR + 1; isa < KERN_NISA; isa++) {
        const kern_ops *ops = kern_ops_for((enum kern_isa)isa);
        if (!ops)
            continue;
        kern_tile_mv_fn mv = rp ? ops->tile_mv_rp[t] : ops->tile_mv[t];
        kern_tile_mm_fn mm = rp ? ops->tile_mm_rp[t] : ops->tile_mm[t];
        for (unsigned m = 0; m <= TG_MMAX; m += m == 0 || R % 16 == 7 || R == 128 ? 1 : 8) {
            const unsigned n = m ? m : TG_MMAX;
            memcpy(y, y0, n * TG_LDY * sizeof(float));
            if (m)
                mm(pl, R, C, acts, m, col0, y, TG_LDY);
            else
                for (unsigned j = 0; j < n; j++)
                    mv(pl, R, C, &acts[j], col0, y + j * TG_LDY);
            for (size_t i = 0; i < n * TG_LDY; i++)
                if (fbits(y[i]) != fbits(yr[i]))
                    fail_msg("%s %s%s %s %ux%u col0 %u m %u: input %zu row %zu: "
                             "%.9g, want %.9g", ops->name, m ? "mm" : "mv",
                             rp ? "_rp" : "", name, R, C, col0, n, i / TG_LDY,
                             i % TG_LDY, y[i], yr[i]);
            checked++;
        }
    }
    return checked;
}

static void test_kq_tiers(void **state)
{
    (void)state;
    enum { N = 768 };
    kern_act *acts = calloc(TG_MMAX, sizeof *acts);
    uint8_t *blocks = malloc(128 * 256), *pl = malloc(128 * 256);
    float *x = malloc(N * sizeof(float)), *w = malloc(128 * 256 * sizeof(float));
    float *y0 = malloc(TG_MMAX * TG_LDY * sizeof(float));
    float *yr = malloc(TG_MMAX * TG_LDY * sizeof(float));
    float *y = malloc(TG_MMAX * TG_LDY * sizeof(float));
    for (unsigned j = 0; j < TG_MMAX; j++) {
        assert_int_equal(kern_act_init(&acts[j], N), 0);
        kq_gold_seed(700 + j);
        kq_gold_vec(x, N, j % 7 == 3 ? (int)(j % 3) : -1);
        kern_act_set(&acts[j], x, N, KERN_NEED_Q8_K);
    }
    unsigned checked = 0;
    for (unsigned ti = 0; ti < NT; ti++) {
        const kq_gold_type *T = &kq_gold_types[ti];
        const enum kern_type t = ktype(T);
        for (unsigned R = 1; R <= 128; R++) {
            /* columns: whole blocks, or a row of fewer than 256 quantised
             * by the reference quantiser (the last tile of a narrow row) */
            const unsigned C = R % 5 == 2 ? 256 - 7 * R % 200 : 256;
            kq_gold_seed(9000 + 131 * ti + R);
            if (C == 256) {
                kq_gold_blocks(T, blocks, R);
                assert_int_equal(kern_tile_pack(t, R, C, ksrc(T), blocks, T->bytes, pl), 0);
            } else {
                for (unsigned r = 0; r < R; r++)
                    for (unsigned c = 0; c < C; c++)
                        w[r * C + c] = kq_gold_pow2(-6, 0) * kq_gold_unit();
                assert_int_equal(kern_tile_pack(t, R, C, KERN_SRC_F32, w, C * sizeof(float), pl), 0);
            }
            for (int rp = 0; rp < 2; rp++)
                if (!rp || kern_ops_ref()->tile_mv_rp[t])
                    checked += tiers_check(T->name, t, rp, pl, R, C, 256 * (R % 3), acts,
                                           y0, yr, y);
        }
    }
    print_message("%u kernel runs checked against the reference\n", checked);
    for (unsigned j = 0; j < TG_MMAX; j++)
        kern_act_free(&acts[j]);
    free(acts);
    free(blocks);
    free(pl);
    free(x);
    free(w);
    free(y0);
    free(yr);
    free(y);
}

/* ---- the Q8_K activations ------------------------------------------------------- */

static void test_kq_act(void **state)
{
    (void)state;
    enum { NB = 12 };
    float x[NB * 256];
    for (unsigned b = 0; b < NB; b++) {
        float *xb = x + 256 * b;
        kq_gold_seed(300 + b);
        kq_gold_vec(xb, 256, -1);
        switch (b) {
        case 0: break;
        case 1: memset(xb, 0, 256 * sizeof(float)); break;            /* d = 0 */
        case 2: for (int i = 0; i < 256; i++) xb[i] *= 1e30f; break;  /* huge */
        case 3: for (int i = 0; i < 256; i++) xb[i] *= 1e-40f; break; /* subnormal */
        case 4:                       /* ties: x = (k + 1/2) / 127 of max */
            for (int i = 0; i < 256; i++)
                xb[i] = (float)((i % 254) - 127) + 0.5f;
            xb[7] = -127.0f;
            break;
        case 5: xb[100] = 2.0f; xb[200] = -2.0f; break;   /* the first of equal |x| */
        case 6: xb[100] = -2.0f; xb[200] = 2.0f; break;
        case 7: xb[17] = INFINITY; break;
        case 8: xb[17] = NAN; break;
        case 9: xb[0] = -INFINITY; xb[1] = NAN; break;
        case 10: for (int i = 0; i < 256; i++) xb[i] = i == 255 ? 1e-45f : 0.0f; break;
        default: xb[3] = -3.0f; break;
        }
    }
    int8_t qr[NB * 256], q[NB * 256];
    float dr[NB], d[NB];
    int16_t br[NB * 16], bs[NB * 16];
    const kern_ops *ref = kern_ops_ref();
    ref->act_q8k(x, NB, qr, dr, br);
    /* the reference itself: ggml's d = 1 / (-127 / max) and q = round(x *
     * iscale) for the ordinary blocks */
    for (unsigned b = 0; b < NB; b++) {
        if (b == 1) {
            assert_true(dr[b] == 0.0f);
            continue;
        }
        if (b == 3 || (b >= 7 && b <= 10))
            continue;   /* -127 / max overflows, or inf and NaN: ggml's trick */
        float max = 0, amax = 0;
        for (int i = 0; i < 256; i++)
            if (fabsf(x[256 * b + i]) > amax) {
                amax = fabsf(x[256 * b + i]);
                max = x[256 * b + i];
            }
        const float iscale = -127.f / max;
        assert_true(fbits(dr[b]) == fbits(1 / iscale));
        for (int i = 0; i < 256; i++) {
            float v = iscale * x[256 * b + i];
            int want = (int)nearbyintf(v);
            assert_int_equal(qr[256 * b + i], want > 127 ? 127 : want);
        }
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int i = 0; i < 16; i++)
                s += qr[256 * b + 16 * g + i];
            assert_int_equal(br[16 * b + g], s);
        }
    }
    for (int isa = 1; isa < KERN_NISA; isa++) {
        const kern_ops *ops = kern_ops_for((enum kern_isa)isa);
        if (!ops)
            continue;
        memset(q, 0x55, sizeof q);
        ops->act_q8k(x, NB, q, d, bs);
        for (unsigned b = 0; b < NB; b++) {
            if (fbits(d[b]) != fbits(dr[b]) || memcmp(q + 256 * b, qr + 256 * b, 256) ||
                memcmp(bs + 16 * b, br + 16 * b, 32))
                fail_msg("%s act_q8k block %u: d %.9g, want %.9g", ops->name, b, d[b], dr[b]);
        }
    }
}

/* ---- corrupt blocks ---------------------------------------------------------------- */

static void test_kq_check(void **state)
{
    (void)state;
    static const uint16_t bad[] = { 0x7C00, 0xFC00, 0x7E00, 0xFE01, 0x7C01 };
    uint8_t *blocks = malloc(40 * 256), *pl = malloc(128 * 256);
    for (unsigned ti = 0; ti < NT; ti++) {
        const kq_gold_type *T = &kq_gold_types[ti];
        const enum kern_type t = ktype(T);
        for (int field = 0; field < 2; field++) {
            const int off = field ? T->dmin_off : T->d_off;
            if (off < 0)
                continue;
            for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
                const unsigned R = 33, bad_row = (unsigned)(7 * k + 3 * field) % R;
                kq_gold_seed(40 + k);
                kq_gold_blocks(T, blocks, R);
                assert_int_equal(kern_tile_pack(t, R, 256, ksrc(T), blocks, T->bytes, pl), 0);
                unsigned row = 99;
                const char *what = NULL;
                assert_int_equal(kern_tile_check(t, R, 256, pl, &row, &what), 0);
                assert_true(kern_tile_finite(t, R, 256, pl));
                /* in the payload: check names the row and the field */
                for (unsigned i = 0; i < 2; i++)
                    pl[doc_offset(ti, T->bytes, bad_row, (unsigned)off + i)] =
                        (uint8_t)(bad[k] >> 8 * i);
                assert_int_equal(kern_tile_check(t, R, 256, pl, &row, &what), -1);
                assert_int_equal(row, bad_row);
                assert_string_equal(what, field ? "dmin" : "d");
                assert_false(kern_tile_finite(t, R, 256, pl));
                /* in the source blocks: packing refuses them */
                memcpy(blocks + bad_row * T->bytes + off, &bad[k], 2);
                assert_int_equal(kern_tile_pack(t, R, 256, ksrc(T), blocks, T->bytes, pl), -1);
            }
        }
        /* floats: a NaN, or a scale past the f16 range, is refused */
        float *w = (float *)blocks;
        for (unsigned i = 0; i < 2 * 256; i++)
            w[i] = 0.01f * (float)(i % 17) - 0.05f;
        assert_int_equal(kern_tile_pack(t, 2, 256, KERN_SRC_F32, w, 1024, pl), 0);
        w[300] = NAN;
        assert_int_equal(kern_tile_pack(t, 2, 256, KERN_SRC_F32, w, 1024, pl), -1);
        w[300] = 1e9f;      /* every type's d past 65504 */
        w[301] = -1e9f;
        assert_int_equal(kern_tile_pack(t, 2, 256, KERN_SRC_F32, w, 1024, pl), -1);
    }
    free(blocks);
    free(pl);
}

/* ---- packing from floats: ggml's quantiser, within its error ---------------------- */

static void test_kq_roundtrip(void **state)
{
    (void)state;
    enum { R = 19, C = 256 };
    float *w = malloc(R * C * sizeof(float)), *back = malloc(R * C * sizeof(float));
    uint8_t *pl = malloc(128 * 256);
    /* the largest error relative to a row's largest |w|: 2 bits (Q2_K) to
     * 6 bits (Q6_K), with room for the scales' own rounding */
    static const double tol[NT] = { 0.50, 0.35, 0.15, 0.08, 0.05, 0.15 };
    for (unsigned ti = 0; ti < NT; ti++) {
        const kq_gold_type *T = &kq_gold_types[ti];
        kq_gold_seed(77 + ti);
        for (unsigned r = 0; r < R; r++) {
            float m = kq_gold_pow2(-8, 8);
            for (unsigned c = 0; c < C; c++)
                w[r * C + c] = m * kq_gold_unit();
        }
        assert_int_equal(kern_tile_pack(ktype(T), R, C, KERN_SRC_F32, w, C * sizeof(float), pl), 0);
        kern_tile_unpack(ktype(T), R, C, pl, back, C);
        for (unsigned r = 0; r < R; r++) {
            double amax = 0, err = 0;
            for (unsigned c = 0; c < C; c++) {
                amax = fmax(amax, fabs(w[r * C + c]));
                err = fmax(err, fabs((double)back[r * C + c] - w[r * C + c]));
            }
            if (err > tol[ti] * amax)
                fail_msg("%s row %u: error %.3g of max %.3g", T->name, r, err, amax);
        }
        /* and a GGML source of the same type copies its blocks (the
         * payload of the floats, repacked from its own blocks, is itself) */
        uint8_t *blocks = malloc(R * T->bytes), *pl2 = malloc(128 * 256);
        for (unsigned r = 0; r < R; r++)
            for (unsigned b = 0; b < T->bytes; b++)
                blocks[r * T->bytes + b] = pl[doc_offset(ti, T->bytes, r, b)];
        assert_int_equal(kern_tile_pack(ktype(T), R, C, ksrc(T), blocks, T->bytes, pl2), 0);
        assert_memory_equal(pl, pl2, kern_tile_payload_size(ktype(T), R, C));
        free(blocks);
        free(pl2);
    }
    free(w);
    free(back);
    free(pl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kq_payload),
        cmocka_unit_test(test_kq_golden),
        cmocka_unit_test(test_kq_ref_double),
        cmocka_unit_test(test_kq_act),
        cmocka_unit_test(test_kq_tiers),
        cmocka_unit_test(test_kq_check),
        cmocka_unit_test(test_kq_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
