/*
 * test_kern_lq_ggml.c — the 32-column GGML block types and BF16 against
 * ggml itself: golden hashes of ggml's outputs for the inputs of
 * lq_golden.h, made by lq_golden_gen.c against llama.cpp mainline
 * (/work/peers/llama.cpp, ggml 0.18.1, no git metadata in the copy) built
 * with GGML_NATIVE by GCC 12.2 on an Intel Xeon (family 6 model 207:
 * AVX-512, VNNI, AVX512_BF16), CPU backend, one thread:
 *   - quant: each type's quant entry against ggml_quantize_chunk (what
 *     llama-quantize writes without an imatrix);
 *   - dequant: the dequant entry against the type's to_float;
 *   - matvec: every tier's tile_mv (and tile_mm, and tile_mv_rp where the
 *     type has it) against a one-token ggml_mul_mat of the same blocks and
 *     x, in ggml's plain CPU buffer (ggml_vec_dot_*) or its CPU_REPACK
 *     buffer (the repacked gemv llama.cpp runs on matrices of 8k rows);
 *     and, so that the two flavours are known apart, the other flavour
 *     does not give the repacked hash;
 *   - batch: every tier's tile_mm_rp against ggml_mul_mat of several
 *     tokens in the CPU_REPACK buffer (its repacked gemm on each 4, the
 *     gemv on the rest: the same sums, so prefill gives llama.cpp's bits
 *     for these types too);
 *   - act: kern_act_set's Q8_1 blocks (quants, d and s) and every tier's
 *     act_bf16 against the CPU backend's from_float.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

#include "kernels/kern.h"
#include "kernels/kern_impl.h"
#include "lq_golden.h"

static const uint64_t want_quant[LG_NTYPES] = {
    0x74b5a2183296750aull, /* q4_1 */
    0xf2dc07944492ee43ull, /* q5_0 */
    0x19e759ddfc4a8d32ull, /* q5_1 */
    0x46590eb0ff02ba4eull, /* iq4_nl */
    0xfea781ce12e23009ull, /* mxfp4 */
    0xd12a886ea82f4069ull, /* bf16 */
};

static const uint64_t want_dequant[LG_NTYPES] = {
    0xbee50606c92184aaull, /* q4_1 */
    0x6f5cb92e686ed085ull, /* q5_0 */
    0xe76594269ce6df87ull, /* q5_1 */
    0xde8c76bf7377c842ull, /* iq4_nl */
    0xc9b22041f82b47c3ull, /* mxfp4 */
    0xb852a285a50d479full, /* bf16 */
};

static const uint64_t want_matvec[LG_NCASES] = {
    0x11ddc7d6f8f733e7ull, /* q4_1 20x32 */
    0x6dc6997a128285bfull, /* q4_1 20x160 */
    0xe9650549bebeaaabull, /* q4_1 20x256 */
    0xc4492a45898ca325ull, /* q5_0 20x32 */
    0x2803cdcdf381eb64ull, /* q5_0 20x160 */
    0xec894c47eb5b5d0eull, /* q5_0 20x256 */
    0x3db83f3665f02d78ull, /* q5_1 20x32 */
    0xf135ef36502d0503ull, /* q5_1 20x160 */
    0x41c1edb14be6e6dcull, /* q5_1 20x256 */
    0x059d4a2bd35d2de0ull, /* iq4_nl 20x32 */
    0x56503c63d6e7d67eull, /* iq4_nl 20x96 */
    0x6c93f3a633fae632ull, /* iq4_nl 20x256 */
    0x94325047b7c56c0eull, /* mxfp4 20x32 */
    0x77bf846bf8db1eadull, /* mxfp4 20x96 */
    0xc352d9ffaf646e38ull, /* mxfp4 20x256 */
    0x1b765a28714c9f82ull, /* iq4_nl 16x32 repacked */
    0x2e6bd4c62084cb13ull, /* iq4_nl 16x160 repacked */
    0x37ea960827a43904ull, /* iq4_nl 24x256 repacked */
    0x63634f7ed780da01ull, /* mxfp4 16x32 repacked */
    0x373fdaa8829b3e29ull, /* mxfp4 16x160 repacked */
    0x24a4d4cdf81a6819ull, /* mxfp4 24x256 repacked */
    0x5c694d91c1c32c59ull, /* bf16 20x30 */
    0xb185de35186c544bull, /* bf16 20x64 */
    0x3d54874b404058a5ull, /* bf16 20x100 */
    0x110855c61dd07814ull, /* bf16 20x172 */
    0x251d1ce7373985ddull, /* bf16 20x256 */
};

static const uint64_t want_batch[LG_NBATCHES] = {
    0xd750970be5de8282ull, /* mxfp4 16x256, 5 tokens, repacked */
    0x98a31243b0c2813cull, /* mxfp4 40x96, 8 tokens, repacked */
    0x2d76913058f729d3ull, /* iq4_nl 24x160, 9 tokens, repacked */
};

static const uint64_t want_act_q8_1 = 0xb239bc74602d0b07ull;
static const uint64_t want_act_bf16 = 0xfab100e5398b1cdbull;

/* ggml's type number to cflow's tile type */
static enum kern_type kt_of(int ggml)
{
    switch (ggml) {
    case LG_Q4_1:   return KERN_Q4_1;
    case LG_Q5_0:   return KERN_Q5_0;
    case LG_Q5_1:   return KERN_Q5_1;
    case LG_IQ4_NL: return KERN_IQ4_NL;
    case LG_MXFP4:  return KERN_MXFP4;
    default:        return KERN_BF16;
    }
}

static void want(const char *what, uint64_t got, uint64_t wanted)
{
    if (got != wanted)
        fail_msg("%s: output hash 0x%016llx, ggml's 0x%016llx", what,
                 (unsigned long long)got, (unsigned long long)wanted);
}

static void test_quant(void **state)
{
    (void)state;
    static float x[LG_QROWS * LG_QCOLS];
    static uint8_t out[LG_QROWS * LG_QCOLS * 2];
    for (int k = 0; k < LG_NTYPES; k++) {
        const int t = lg_types[k];
        const kern_type_ops *o = kern_type_ops_of(kt_of(t));
        assert_non_null(o);
        const unsigned nb = LG_QCOLS / lg_block_cols(t);
        const size_t rb = (size_t)nb * lg_block_bytes(t);
        lg_state = 11 + (uint64_t)t;
        for (unsigned r = 0; r < LG_QROWS; r++) {
            lg_quant_row(x + r * LG_QCOLS, LG_QCOLS, r);
            assert_int_equal(o->quant(x + r * LG_QCOLS, nb, out + r * rb), 0);
        }
        want(o->name, lg_fnv(LG_FNV0, out, LG_QROWS * rb), want_quant[k]);
    }
}

static void test_dequant(void **state)
{
    (void)state;
    static uint8_t blk[LG_DBLOCKS * 32 * 2];
    static float y[LG_DBLOCKS * 32];
    for (int k = 0; k < LG_NTYPES; k++) {
        const int t = lg_types[k];
        const kern_type_ops *o = kern_type_ops_of(kt_of(t));
        const unsigned n = t == LG_BF16 ? LG_DBLOCKS * 32 : LG_DBLOCKS;
        lg_state = 101 + (uint64_t)t;
        lg_dequant_blocks(t, blk, n);
        o->dequant(blk, n, y);
        want(o->name, lg_fnv(LG_FNV0, y, sizeof y), want_dequant[k]);
    }
}

static void test_matvec(void **state)
{
    (void)state;
    uint8_t *pl = malloc(kern_tile_payload_size(KERN_BF16, 128, 256));
    kern_act a;
    assert_int_equal(kern_act_init(&a, 256), 0);
    for (unsigned i = 0; i < LG_NCASES; i++) {
        const lg_case *c = &lg_cases[i];
        const enum kern_type t = kt_of(c->type);
        const unsigned n = c->R * (c->C / lg_block_cols(c->type));
        const size_t rb = (size_t)(c->C / lg_block_cols(c->type)) * lg_block_bytes(c->type);
        uint8_t *w = malloc((size_t)n * lg_block_bytes(c->type));
        float x[256], y[3][128];
        lg_state = 1001 + i;
        lg_matvec_blocks(c->type, w, n);
        lg_vector(x, c->C);
        assert_int_equal(kern_tile_pack(t, c->R, c->C, kern_type_src(t), w, rb, pl), 0);
        kern_act_set(&a, x, c->C, KERN_NEED(t));
        for (int isa = 0; isa < KERN_NISA; isa++) {
            const kern_ops *ops = kern_ops_for((enum kern_isa)isa);
            if (!ops)
                continue;
            kern_tile_mv_fn mv = c->repack ? ops->tile_mv_rp[t] : ops->tile_mv[t];
            kern_tile_mm_fn mm = c->repack ? ops->tile_mm_rp[t] : ops->tile_mm[t];
            kern_act three[3] = { a, a, a };
            char what[80];
            memset(y, 0, sizeof y);
            assert_non_null(mv);
            mv(pl, c->R, c->C, &a, 0, y[0]);
            snprintf(what, sizeof what, "%s %s %ux%u%s", ops->name, kern_type_name(t),
                     c->R, c->C, c->repack ? " repacked" : "");
            want(what, lg_fnv(LG_FNV0, y[0], c->R * sizeof(float)), want_matvec[i]);
            memset(y, 0, sizeof y);
            mm(pl, c->R, c->C, three, 3, 0, y[0], 128);
            for (int j = 0; j < 3; j++) {
                snprintf(what, sizeof what, "%s %s %ux%u%s (mm input %d)", ops->name,
                         kern_type_name(t), c->R, c->C, c->repack ? " repacked" : "", j);
                want(what, lg_fnv(LG_FNV0, y[j], c->R * sizeof(float)), want_matvec[i]);
            }
            if (c->repack && c->C > 32) {
                /* the other flavour's sum is not the repacked one (one
                 * block is one FMA in both) */
                memset(y, 0, sizeof y);
                ops->tile_mv[t](pl, c->R, c->C, &a, 0, y[0]);
                if (lg_fnv(LG_FNV0, y[0], c->R * sizeof(float)) == want_matvec[i])
                    fail_msg("%s: the plain flavour gives the repacked sums", what);
            }
        }
        free(w);
    }
    kern_act_free(&a);
    free(pl);
}

/* Prefill through the repacked kernels: every tier's tile_mm_rp gives
 * ggml's gemm (each 4 tokens) and gemv (the rest) outputs. */
static void test_batch(void **state)
{
    (void)state;
    uint8_t *pl = malloc(kern_tile_payload_size(KERN_IQ4_NL, 128, 256));
    for (unsigned i = 0; i < LG_NBATCHES; i++) {
        const lg_batch *bt = &lg_batches[i];
        const enum kern_type t = kt_of(bt->type);
        const unsigned n = bt->R * (bt->C / 32);
        const size_t rb = (size_t)(bt->C / 32) * lg_block_bytes(bt->type);
        uint8_t *w = malloc((size_t)n * lg_block_bytes(bt->type));
        float *x = malloc(sizeof(float) * bt->C * bt->m);
        float *y = malloc(sizeof(float) * bt->R * bt->m);
        kern_act *a = malloc(sizeof(kern_act) * bt->m);
        lg_state = 2001 + i;
        lg_matvec_blocks(bt->type, w, n);
        lg_vector(x, bt->C * bt->m);
        assert_int_equal(kern_tile_pack(t, bt->R, bt->C, kern_type_src(t), w, rb, pl), 0);
        for (unsigned j = 0; j < bt->m; j++) {
            assert_int_equal(kern_act_init(&a[j], bt->C), 0);
            kern_act_set(&a[j], x + j * bt->C, bt->C, KERN_NEED(t));
        }
        for (int isa = 0; isa < KERN_NISA; isa++) {
            const kern_ops *ops = kern_ops_for((enum kern_isa)isa);
            if (!ops)
                continue;
            char what[80];
            memset(y, 0, sizeof(float) * bt->R * bt->m);
            ops->tile_mm_rp[t](pl, bt->R, bt->C, a, bt->m, 0, y, bt->R);
            snprintf(what, sizeof what, "%s %s %ux%u, %u inputs, repacked", ops->name,
                     kern_type_name(t), bt->R, bt->C, bt->m);
            want(what, lg_fnv(LG_FNV0, y, sizeof(float) * bt->R * bt->m), want_batch[i]);
        }
        for (unsigned j = 0; j < bt->m; j++)
            kern_act_free(&a[j]);
        free(a);
        free(w);
        free(x);
        free(y);
    }
    free(pl);
}

static void test_act(void **state)
{
    (void)state;
    float xa[LG_ACOLS];
    uint8_t q81[LG_ACOLS / 32 * 36];
    uint16_t bf[LG_ACOLS];
    kern_act a;
    assert_int_equal(kern_act_init(&a, LG_ACOLS), 0);
    lg_state = 7;
    for (unsigned i = 0; i < LG_ACOLS; i++)
        xa[i] = lg_unit() * lg_mags[(i / 32 + 2) % 12];
    kern_act_set(&a, xa, LG_ACOLS, KERN_NEED(KERN_Q4_1) | KERN_NEED(KERN_BF16));
    for (unsigned b = 0; b < LG_ACOLS / 32; b++) {
        uint16_t d = kern_fp32_to_fp16(a.q8_d[b]), s = kern_fp32_to_fp16(a.q8_s[b]);
        memcpy(q81 + 36 * b, &d, 2);
        memcpy(q81 + 36 * b + 2, &s, 2);
        memcpy(q81 + 36 * b + 4, a.q8 + 32 * b, 32);
    }
    want("q8_1 activations", lg_fnv(LG_FNV0, q81, sizeof q81), want_act_q8_1);
    want("bf16 activations", lg_fnv(LG_FNV0, a.bf16, sizeof bf), want_act_bf16);
    for (int isa = 0; isa < KERN_NISA; isa++) {
        const kern_ops *ops = kern_ops_for((enum kern_isa)isa);
        if (!ops)
            continue;
        memset(bf, 0, sizeof bf);
        ops->act_bf16(xa, LG_ACOLS, bf);
        want(ops->name, lg_fnv(LG_FNV0, bf, sizeof bf), want_act_bf16);
    }
    kern_act_free(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quant),
        cmocka_unit_test(test_dequant),
        cmocka_unit_test(test_matvec),
        cmocka_unit_test(test_batch),
        cmocka_unit_test(test_act),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
