/*
 * test_kern_mm.c — the batched tile kernels (kern_ops.tile_mm*) and the
 * f16-cache attention kernel (kern_ops.attn_f16) of every ISA this CPU
 * runs.
 *
 * Oracles:
 *   - tile_mm: m separate calls of the scalar reference mat-vec (whose own
 *     sums test_kern.c checks against doubles and llama.cpp).  kern.h
 *     promises the batched kernels bit-identical results, so the
 *     comparison is exact, on ragged tiles (rows and columns that are not
 *     multiples of the 16-row panel, the 32-column block, 128 or 256) and
 *     at every batch size m from 1 to 33, 64 and 512 (each remainder of
 *     the native kernels' 3-, 4- and 8-input groups after whole groups,
 *     and the engine's prefill chunk of 32), with y strides wider than the
 *     tile so that a write past a row shows, for every ISA table this CPU
 *     runs (an AVX-512 CPU checks its avx2 table too);
 *   - attn_f16: the scalar reference kern_attn_f16_ref (through
 *     kern_attn_decode_f16 for whole head ranges; its golden outputs from
 *     ggml are checked in test_kern.c), exactly, per head range, for head
 *     sizes with and without the 64-lane part of ggml's f16 dot, GQA
 *     groups and a soft cap; and an independent double-precision softmax
 *     within f16 accuracy;
 *   - attn_prefill_f16 (a prompt chunk's causal attention, llama.cpp's tiled
 *     arithmetic): the scalar reference kern_attn_prefill_f16 against a
 *     double-precision softmax, then exactly, with rows split over calls;
 *   - swiglu_ggml: kern_swiglu_ggml (ggml's vector exp spelt out per lane,
 *     its outputs hashed against ggml in test_kern.c), exactly, and a
 *     double-precision silu loosely;
 *   - act_q8 / act_f16 (kern_act_set's conversions): the scalar code
 *     (llama.cpp's quantize_row_q8_0, checked in test_kern.c), exactly, on
 *     blocks from huge to subnormal, all-zero, exact halves, inf and NaN.
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

static uint64_t rng = 0x243F6A8885A308D3ull;

static uint64_t rng_u64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static float rng_unit(void)   /* [-1, 1) */
{
    return (float)((double)(rng_u64() >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* ---- tile_mm ------------------------------------------------------------ */

static kern_tile_mm_fn mm_of(const kern_ops *ops, enum kern_type t, int rp)
{
    return rp ? ops->tile_mm_q4_0_rp : ops->tile_mm[t];
}

static kern_tile_mv_fn mv_of(const kern_ops *ops, enum kern_type t, int rp)
{
    return rp ? ops->tile_mv_q4_0_rp : ops->tile_mv[t];
}

static void test_tile_mm(void **state)
{
    (void)state;
    /* every batch class: every size from one input (decode) to 33, so
     * each remainder of the native kernels' groups (3, 4 and 8 inputs)
     * comes after zero to four whole groups, the prefill's full chunk of
     * 32 (ENG_BATCH) and one past it; far past it */
    enum { NM = 33 + 2 };
    unsigned ms[NM];
    for (unsigned i = 0; i < 33; i++)
        ms[i] = i + 1;
    ms[33] = 64;
    ms[34] = 512;
    static const struct { unsigned r, c, col0; } shapes[] = {
        { 128, 256, 0 }, { 100, 200, 32 }, { 17, 33, 64 }, { 1, 7, 0 },
        { 127, 255, 96 }, { 48, 96, 32 }, { 16, 32, 0 }, { 5, 250, 0 },
    };
    enum { NMAX = 512, XN = 384, GUARD = 5 };
    kern_act *acts = calloc(NMAX, sizeof *acts);
    float *w = malloc(128 * 256 * sizeof(float)), *x = malloc(XN * sizeof(float));
    uint8_t *pl = malloc(kern_tile_payload_size(KERN_F32, 128, 256));
    const size_t ldy = 128 + GUARD;
    float *y0 = malloc(NMAX * ldy * sizeof(float));
    float *yr = malloc(NMAX * ldy * sizeof(float));
    float *y = malloc(NMAX * ldy * sizeof(float));
    assert_non_null(acts);
    assert_non_null(y);
    for (unsigned j = 0; j < NMAX; j++) {
        assert_int_equal(kern_act_init(&acts[j], XN), 0);
        for (unsigned i = 0; i < XN; i++)   /* some inputs all zero */
            x[i] = j % 37 == 11 ? 0.0f : rng_unit() * (1.0f + (float)(j % 5));
        kern_act_set(&acts[j], x, XN, ((1u << (KERN_Q4_0 + 1)) - 1));
    }
    unsigned checked = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const unsigned R = shapes[si].r, C = shapes[si].c, col0 = shapes[si].col0;
        for (unsigned i = 0; i < R * C; i++)
            w[i] = rng_unit() * (i % 97 == 3 ? 0.0f : 1.0f);
        for (int t = 0; t <= KERN_Q4_0; t++)
            for (int rp = 0; rp <= (t == KERN_Q4_0); rp++) {
                assert_int_equal(kern_tile_pack((enum kern_type)t, R, C, KERN_SRC_F32,
                                                w, C * sizeof(float), pl), 0);
                for (size_t mi = 0; mi < NM; mi++) {
                    const unsigned m = ms[mi];
                    for (size_t i = 0; i < m * ldy; i++)
                        y0[i] = i % ldy < R ? rng_unit() : 777.0f;
                    memcpy(yr, y0, m * ldy * sizeof(float));
                    for (unsigned j = 0; j < m; j++)
                        mv_of(kern_ops_ref(), (enum kern_type)t, rp)(
                            pl, R, C, &acts[j], col0, yr + j * ldy);
                    for (int isa = 0; isa < KERN_NISA; isa++) {
                        const kern_ops *ops = kern_ops_for((enum kern_isa)isa);
                        if (!ops)
                            continue;
                        memcpy(y, y0, m * ldy * sizeof(float));
                        mm_of(ops, (enum kern_type)t, rp)(pl, R, C, acts, m, col0, y, ldy);
                        for (size_t i = 0; i < m * ldy; i++)
                            if (fbits(y[i]) != fbits(yr[i]))
                                fail_msg("%s mm %s%s %ux%u col0 %u m %u: input %zu row %zu:"
                                         " %.9g, want %.9g", ops->name,
                                         kern_type_name((enum kern_type)t),
                                         rp ? " (repacked)" : "", R, C, col0, m,
                                         i / ldy, i % ldy, y[i], yr[i]);
                        checked++;
                    }
                }
            }
    }
    print_message("%u batched kernel runs checked\n", checked);
    for (unsigned j = 0; j < NMAX; j++)
        kern_act_free(&acts[j]);
    free(acts);
    free(w);
    free(x);
    free(pl);
    free(y0);
    free(yr);
    free(y);
}

/* ---- attention over an f16 cache ------------------------------------------ */

/* One attention call's arguments, for an f32 (f16 0) or f16 cache. */
typedef struct attn_case {
    int          f16;
    const float *q;
    const void  *k, *v;
    unsigned     np, nh, nkv, hd;
    size_t       stride;
    float        scale, softcap;
    float       *scores;
    uint16_t    *scratch;
    const float *sinks;      /* [nh] or NULL */
} attn_case;

/* Every table this CPU runs, over head ranges of every power-of-two
 * split, gives ref's bits, or the test fails naming the kernel, the shape
 * and the first differing output. */
static void attn_all_tables(const attn_case *a, const float *ref, float *out)
{
    const unsigned nh = a->nh, hd = a->hd;
    for (int isa = 0; isa < KERN_NISA; isa++) {
        const kern_ops *ops = kern_ops_for((enum kern_isa)isa);
        if (!ops)
            continue;
        for (unsigned split = 1; split <= nh; split *= 2) {
            for (unsigned i = 0; i < nh * hd; i++)
                out[i] = NAN;
            for (unsigned h0 = 0; h0 < nh; h0 += split) {
                unsigned h1 = h0 + split < nh ? h0 + split : nh;
                if (a->f16)
                    ops->attn_f16(out, a->q, a->k, a->v, a->np, h0, h1, nh, a->nkv, hd,
                                  a->stride, a->scale, a->softcap, a->sinks, a->scores,
                                  a->scratch);
                else
                    ops->attn_f32(out, a->q, a->k, a->v, a->np, h0, h1, nh, a->nkv, hd,
                                  a->stride, a->scale, a->softcap, a->sinks, a->scores);
            }
            for (unsigned i = 0; i < nh * hd; i++)
                if (fbits(out[i]) != fbits(ref[i]))
                    fail_msg("%s %s hd %u nh %u nkv %u npos %u split %u: out[%u] %.9g, "
                             "want %.9g", ops->name, a->f16 ? "attn_f16" : "attn_f32", hd,
                             nh, a->nkv, a->np, split, i, out[i], ref[i]);
        }
    }
}

/* The float buffers of one attention shape: the query (nh rows of hd,
 * filled first from the generator), the reference's and a kernel's
 * outputs, and nh rows of np scores. */
typedef struct attn_bufs {
    float *q, *ref, *out, *scores;
} attn_bufs;

static attn_bufs attn_bufs_new(unsigned nh, unsigned hd, unsigned np)
{
    attn_bufs b = { malloc(nh * hd * sizeof(float)), malloc(nh * hd * sizeof(float)),
                    malloc(nh * hd * sizeof(float)), malloc((size_t)nh * np * sizeof(float)) };
    assert_true(b.q && b.ref && b.out && b.scores);
    for (unsigned i = 0; i < nh * hd; i++)
        b.q[i] = 2.0f * rng_unit();
    return b;
}

static void attn_bufs_free(attn_bufs *b)
{
    free(b->q);
    free(b->ref);
    free(b->out);
    free(b->scores);
}

/* f32-cache attention: every table gives kern_attn_decode's bits, head by
 * head, over ragged head_dims and position counts (a multiple of 8 and
 * not: the vector kernels take 8 positions at a time), GQA and MHA, the
 * division by sqrt(head_dim) and a plain scale, softcap, head splits. */
static void test_attn_f32(void **state)
{
    (void)state;
    static const struct { unsigned hd, nh, nkv, npos; int plain; float softcap; } ac[] = {
        { 32, 4, 2, 37, 0, 0 }, { 32, 4, 2, 256, 0, 0 }, { 8, 8, 4, 9, 0, 0 },
        { 12, 6, 2, 23, 0, 0 }, { 64, 8, 1, 130, 0, 0 }, { 80, 5, 5, 8, 1, 0 },
        { 128, 4, 4, 1, 0, 0 }, { 96, 6, 2, 65, 0, 40.0f }, { 4, 2, 1, 3, 1, 0 },
        { 48, 12, 4, 512, 0, 0 }, { 256, 2, 1, 17, 1, 0 },
    };
    for (size_t c = 0; c < sizeof ac / sizeof ac[0]; c++) {
        const unsigned hd = ac[c].hd, nh = ac[c].nh, nkv = ac[c].nkv, np = ac[c].npos;
        const size_t stride = (size_t)nkv * hd + 3;   /* rows not 32-byte aligned */
        attn_bufs b = attn_bufs_new(nh, hd, np);
        float *k = malloc(np * stride * sizeof(float)), *v = malloc(np * stride * sizeof(float));
        for (size_t i = 0; i < np * stride; i++) {
            k[i] = 2.0f * rng_unit();
            v[i] = rng_unit();
        }
        const float scale = ac[c].plain ? 0.3f : 1.0f / sqrtf((float)hd);
        kern_attn_decode(b.ref, b.q, k, v, np, nh, nkv, hd, stride, scale, ac[c].softcap,
                         b.scores);
        const attn_case ca = { 0, b.q, k, v, np, nh, nkv, hd, stride, scale, ac[c].softcap,
                               b.scores, NULL, NULL };
        attn_all_tables(&ca, b.ref, b.out);
        attn_bufs_free(&b);
        free(k);
        free(v);
    }
}

/* gpt-oss's attention sinks, over either cache: the scalar tables' result
 * is the softmax with each head's sink as one more logit of value zero
 * (double precision agrees), and every table gives its bits, sinks large
 * (a new maximum: the accumulator rescaled) and small, with and without a
 * soft-cap.  Without sinks the same calls give the unsinked bits, so the
 * sink must act for this test to pass. */
static void test_attn_sinks(void **state)
{
    (void)state;
    static const struct { unsigned hd, nh, nkv, npos; float softcap, sink; } ac[] = {
        { 64, 8, 1, 37, 0, 0.5f }, { 64, 8, 2, 130, 0, 8.0f }, { 16, 4, 2, 9, 0, -3.0f },
        { 128, 4, 4, 20, 30.0f, 2.0f }, { 64, 4, 1, 1, 0, 6.0f }, { 48, 6, 3, 33, 0, 1.0f },
    };
    for (int f16 = 0; f16 <= 1; f16++)
        for (size_t c = 0; c < sizeof ac / sizeof ac[0]; c++) {
            const unsigned hd = ac[c].hd, nh = ac[c].nh, nkv = ac[c].nkv, np = ac[c].npos;
            const size_t stride = (size_t)nkv * hd, n = np * stride;
            attn_bufs b = attn_bufs_new(nh, hd, np);
            float *kf = malloc(n * sizeof(float)), *vf = malloc(n * sizeof(float));
            uint16_t *kh = malloc(n * 2), *vh = malloc(n * 2), *scratch = malloc(2 * hd * 2);
            float sinks[16], *plain = malloc(nh * hd * sizeof(float));
            for (size_t i = 0; i < n; i++) {
                kh[i] = kern_fp32_to_fp16(kf[i] = 2.0f * rng_unit());
                vh[i] = kern_fp32_to_fp16(vf[i] = rng_unit());
                kf[i] = kern_fp16_to_fp32(kh[i]);
                vf[i] = kern_fp16_to_fp32(vh[i]);
            }
            for (unsigned h = 0; h < nh; h++)
                sinks[h] = ac[c].sink + 0.25f * (float)h;
            const float scale = 1.0f / sqrtf((float)hd);
            const kern_ops *r = kern_ops_ref();
            attn_case ca = { f16, b.q, f16 ? (const void *)kh : kf, f16 ? (const void *)vh : vf,
                             np, nh, nkv, hd, stride, scale, ac[c].softcap, b.scores,
                             scratch, sinks };
            if (f16) {
                r->attn_f16(b.ref, b.q, kh, vh, np, 0, nh, nh, nkv, hd, stride, scale,
                            ac[c].softcap, sinks, b.scores, scratch);
                r->attn_f16(plain, b.q, kh, vh, np, 0, nh, nh, nkv, hd, stride, scale,
                            ac[c].softcap, NULL, b.scores, scratch);
            } else {
                r->attn_f32(b.ref, b.q, kf, vf, np, 0, nh, nh, nkv, hd, stride, scale,
                            ac[c].softcap, sinks, b.scores);
                r->attn_f32(plain, b.q, kf, vf, np, 0, nh, nh, nkv, hd, stride, scale,
                            ac[c].softcap, NULL, b.scores);
            }
            int moved = 0;
            for (unsigned h = 0; h < nh; h++) {
                const unsigned kvh = h / (nh / nkv);
                double mx = sinks[h], sum = 0, o[256] = { 0 };
                double *sc = malloc(np * sizeof(double));
                for (unsigned t = 0; t < np; t++) {
                    double d = 0;
                    for (unsigned i = 0; i < hd; i++)
                        d += (double)(f16 ? kern_fp16_to_fp32(kern_fp32_to_fp16(b.q[h * hd + i]))
                                          : b.q[h * hd + i]) *
                             kf[t * stride + kvh * hd + i];
                    d *= scale;
                    if (ac[c].softcap > 0)
                        d = ac[c].softcap * tanh(d / ac[c].softcap);
                    mx = d > mx ? d : mx;
                    sc[t] = d;
                }
                for (unsigned t = 0; t < np; t++) {
                    double e = exp(sc[t] - mx);
                    sum += e;
                    for (unsigned i = 0; i < hd; i++)
                        o[i] += e * vf[t * stride + kvh * hd + i];
                }
                sum += exp(sinks[h] - mx);
                for (unsigned i = 0; i < hd; i++) {
                    double want = o[i] / sum;
                    if (!(fabs(b.ref[h * hd + i] - want) <= 4e-3 + 4e-3 * fabs(want)))
                        fail_msg("%s sinks hd %u head %u dim %u: %g, want %g",
                                 f16 ? "attn_f16" : "attn_f32", hd, h, i, b.ref[h * hd + i],
                                 want);
                    moved |= fbits(plain[h * hd + i]) != fbits(b.ref[h * hd + i]);
                }
                free(sc);
            }
            assert_true(moved);
            attn_all_tables(&ca, b.ref, b.out);
            attn_bufs_free(&b);
            free(kf); free(vf); free(kh); free(vh); free(scratch); free(plain);
        }
}

static void test_attn_f16(void **state)
{
    (void)state;
    static const struct { unsigned hd, nh, nkv, npos; float softcap; } ac[] = {
        { 8, 8, 4, 37, 0 }, { 16, 4, 4, 3, 0 }, { 32, 6, 2, 50, 0 },
        { 64, 8, 2, 130, 0 }, { 64, 4, 1, 1, 0 }, { 80, 4, 2, 33, 0 },
        { 128, 4, 4, 70, 0 }, { 128, 8, 2, 40, 30.0f }, { 48, 2, 1, 9, 0 },
        /* the shapes of the grouped AVX-512 paths: tinyllama (64, 32/4),
         * olmoe (128, 16/16), softcapped, a group's remainder heads */
        { 64, 32, 4, 300, 0 }, { 128, 16, 16, 77, 0 }, { 64, 6, 3, 65, 50.0f },
        { 128, 3, 1, 1, 0 },
        /* AVX2's four heads on one KV head at head_dim 64: softcapped, a
         * tail of 3 past the last 8 positions, 4 blocks of the value pass */
        { 64, 8, 1, 203, 30.0f },
        /* DeepSeek-V2's latent attention: one KV head of 576 (V2-Lite) and
         * of 144 (the tests' tiny-deepseek2) for all the query heads */
        { 576, 16, 1, 40, 0 }, { 144, 4, 1, 23, 0 },
    };
    for (size_t c = 0; c < sizeof ac / sizeof ac[0]; c++) {
        const unsigned hd = ac[c].hd, nh = ac[c].nh, nkv = ac[c].nkv, np = ac[c].npos;
        const size_t stride = (size_t)nkv * hd;
        attn_bufs b = attn_bufs_new(nh, hd, np);
        const float *q = b.q, *ref = b.ref;
        uint16_t *k = malloc(np * stride * 2), *v = malloc(np * stride * 2);
        uint16_t *scratch = malloc(2 * hd * 2);
        for (size_t i = 0; i < np * stride; i++) {
            k[i] = kern_fp32_to_fp16(2.0f * rng_unit());
            v[i] = kern_fp32_to_fp16(rng_unit());
        }
        const float scale = 1.0f / sqrtf((float)hd);
        kern_attn_decode_f16(b.ref, q, k, v, np, nh, nkv, hd, stride, scale,
                             ac[c].softcap, scratch);

        /* an f32/double softmax agrees to f16 accuracy */
        const unsigned kv_mul = nh / nkv;
        for (unsigned h = 0; h < nh; h++) {
            const unsigned kh = h / kv_mul;
            double mx = -INFINITY, sum = 0, o[576] = { 0 };
            double *sc = malloc(np * sizeof(double));
            for (unsigned t = 0; t < np; t++) {
                double d = 0;
                for (unsigned i = 0; i < hd; i++)
                    d += (double)kern_fp16_to_fp32(kern_fp32_to_fp16(q[h * hd + i])) *
                         kern_fp16_to_fp32(k[t * stride + kh * hd + i]);
                d *= scale;
                if (ac[c].softcap > 0)
                    d = ac[c].softcap * tanh(d / ac[c].softcap);
                sc[t] = d;
                mx = d > mx ? d : mx;
            }
            for (unsigned t = 0; t < np; t++) {
                double e = exp(sc[t] - mx);
                sum += e;
                for (unsigned i = 0; i < hd; i++)
                    o[i] += e * kern_fp16_to_fp32(v[t * stride + kh * hd + i]);
            }
            for (unsigned i = 0; i < hd; i++) {
                double want = o[i] / sum;
                if (!(fabs(ref[h * hd + i] - want) <= 4e-3 + 4e-3 * fabs(want)))
                    fail_msg("attn_f16 ref hd %u head %u dim %u: %g, want %g", hd, h, i,
                             ref[h * hd + i], want);
            }
            free(sc);
        }

        /* every table, over head ranges, gives the reference's bits */
        const attn_case ca = { 1, q, k, v, np, nh, nkv, hd, stride, scale, ac[c].softcap,
                               b.scores, scratch, NULL };
        attn_all_tables(&ca, ref, b.out);
        attn_bufs_free(&b);
        free(k);
        free(v);
        free(scratch);
    }
}

/* ---- a prompt chunk's attention (kern_ops.attn_prefill_f16) ---------------
 * The reference kern_attn_prefill_f16 against a causal softmax in double
 * (it keeps f32 q and accumulators, so closely); then every table this CPU
 * runs against the reference, bit for bit, on head sizes below, at and
 * past the vector widths, GQA groups of 1 to 8 query heads, chunks that
 * start at 0, inside a 64-position tile and across tile boundaries, and
 * rows written with a stride wider than the rows (a write past one shows);
 * and the same rows split over two calls (as threads split a chunk) give
 * the same bits. */
static void test_attn_prefill(void **state)
{
    (void)state;
    static const struct { unsigned hd, G, np, p0; } pc[] = {
        { 64, 8, 32, 0 }, { 64, 8, 32, 480 }, { 64, 8, 17, 55 }, { 128, 1, 32, 100 },
        { 16, 3, 5, 0 }, { 8, 2, 7, 60 }, { 80, 2, 33, 63 }, { 48, 4, 9, 128 },
        { 128, 2, 1, 0 }, { 64, 1, 32, 1000 }, { 32, 5, 31, 64 }, { 64, 4, 2, 63 },
    };
    const unsigned NKV = 2, KH = 1;            /* the second of two KV heads */
    for (size_t c = 0; c < sizeof pc / sizeof pc[0]; c++) {
        const unsigned hd = pc[c].hd, G = pc[c].G, np = pc[c].np, p0 = pc[c].p0;
        const unsigned npos = p0 + np;
        const size_t stride = (size_t)NKV * hd + 8, ld = (size_t)G * hd + 16;
        uint16_t *k = malloc(npos * stride * 2), *v = malloc(npos * stride * 2);
        float *q = malloc(np * ld * 4), *ref = malloc(np * ld * 4), *out = malloc(np * ld * 4);
        float *work = malloc(KERN_ATTN_PF_WORK(np * G, hd) * sizeof(float));
        for (size_t i = 0; i < npos * stride; i++) {
            k[i] = kern_fp32_to_fp16(2.0f * rng_unit());
            v[i] = kern_fp32_to_fp16(rng_unit());
        }
        for (size_t i = 0; i < np * ld; i++)
            q[i] = 2.0f * rng_unit();
        const float scale = 1.0f / sqrtf((float)hd);
        const uint16_t *kc = k + KH * hd, *vc = v + KH * hd;
        for (size_t i = 0; i < np * ld; i++)
            ref[i] = -7.0f;
        kern_attn_prefill_f16(ref, q, ld, np, G, p0, kc, vc, stride, hd, scale, work);

        for (unsigned j = 0; j < np; j++)
            for (unsigned g = 0; g < G; g++) {
                const float *qr = q + j * ld + g * hd;
                const unsigned n = p0 + j + 1;
                double mx = -INFINITY, sum = 0, o[128] = { 0 };
                double *sc = malloc(n * sizeof(double));
                for (unsigned t = 0; t < n; t++) {
                    double d = 0;
                    for (unsigned i = 0; i < hd; i++)
                        d += (double)qr[i] * kern_fp16_to_fp32(kc[t * stride + i]);
                    sc[t] = d * scale;
                    mx = sc[t] > mx ? sc[t] : mx;
                }
                for (unsigned t = 0; t < n; t++) {
                    double e = exp(sc[t] - mx);
                    sum += e;
                    for (unsigned i = 0; i < hd; i++)
                        o[i] += e * kern_fp16_to_fp32(vc[t * stride + i]);
                }
                for (unsigned i = 0; i < hd; i++) {
                    const double want = o[i] / sum, got = ref[j * ld + g * hd + i];
                    if (!(fabs(got - want) <= 2e-5 + 2e-5 * fabs(want)))
                        fail_msg("attn_prefill ref hd %u G %u p0 %u row %u/%u dim %u: "
                                 "%.9g, want %.9g", hd, G, p0, j, g, i, got, want);
                }
                free(sc);
                for (unsigned i = G * hd; j + 1 < np && i < ld; i++)
                    assert_true(ref[j * ld + i] == -7.0f);   /* the slack untouched */
            }

        for (int isa = 0; isa < KERN_NISA; isa++) {
            const kern_ops *ops = kern_ops_for((enum kern_isa)isa);
            if (!ops)
                continue;
            assert_non_null(ops->attn_prefill_f16);
            for (unsigned split = 0; split < 2; split++) {
                const unsigned a = split ? np / 2 : np;   /* rows [0,a), [a,np) */
                for (size_t i = 0; i < np * ld; i++)
                    out[i] = -7.0f;
                ops->attn_prefill_f16(out, q, ld, a, G, p0, kc, vc, stride, hd, scale, work);
                if (a < np)
                    ops->attn_prefill_f16(out + a * ld, q + a * ld, ld, np - a, G, p0 + a,
                                          kc, vc, stride, hd, scale, work);
                for (size_t i = 0; i < np * ld; i++)
                    if (fbits(out[i]) != fbits(ref[i]))
                        fail_msg("%s attn_prefill_f16 hd %u G %u np %u p0 %u split %u: "
                                 "out[%zu] %.9g, want %.9g", ops->name, hd, G, np, p0,
                                 split, i, out[i], ref[i]);
            }
        }
        free(k);
        free(v);
        free(q);
        free(ref);
        free(out);
        free(work);
    }
}

/* ---- SwiGLU with ggml's arithmetic ------------------------------------------ */

static void test_swiglu_ggml(void **state)
{
    (void)state;
    static const unsigned ns[] = { 1, 15, 16, 17, 172, 1000, 5632 };
    enum { NMAX = 5632 };
    float *g = malloc(NMAX * 4), *u = malloc(NMAX * 4);
    float *ref = malloc(NMAX * 4), *out = malloc(NMAX * 4);
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        const unsigned n = ns[k];
        for (unsigned i = 0; i < n; i++) {
            /* mostly ordinary, some far out where exp over/underflows */
            float mag = i % 53 == 7 ? 300.0f : i % 11 == 3 ? 40.0f : 6.0f;
            g[i] = mag * rng_unit();
            u[i] = 2.0f * rng_unit();
        }
        kern_swiglu_ggml(ref, g, u, n);
        for (unsigned i = 0; i < n; i++) {     /* a plain silu, loosely */
            double want = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
            if (!(fabs(ref[i] - want) <= 1e-5 * fabs(want) + 1e-30))
                fail_msg("swiglu_ggml n %u [%u]: %g, want %g", n, i, ref[i], want);
        }
        for (int isa = 0; isa < KERN_NISA; isa++) {
            const kern_ops *ops = kern_ops_for((enum kern_isa)isa);
            if (!ops)
                continue;
            memcpy(out, g, n * 4);              /* out may alias gate */
            ops->swiglu_ggml(out, out, u, n);
            for (unsigned i = 0; i < n; i++)
                if (fbits(out[i]) != fbits(ref[i]))
                    fail_msg("%s swiglu_ggml n %u [%u] (x %g): %.9g, want %.9g",
                             ops->name, n, i, g[i], out[i], ref[i]);
        }
    }
    free(g);
    free(u);
    free(ref);
    free(out);
}

/* ---- activation conversions ---------------------------------------------------- */

static void test_act_convert(void **state)
{
    (void)state;
    enum { NB = 64, N = NB * 32 };
    float *x = malloc(N * 4);
    int8_t q0[N], q1[N];
    float d0[NB], d1[NB];
    int32_t s0[NB], s1[NB];
    uint16_t h0[N], h1[N];
    for (int iter = 0; iter < 40; iter++) {
        for (unsigned b = 0; b < NB; b++) {
            /* block scales from huge to subnormal; some special blocks */
            float mag = ldexpf(1.0f, (int)(b % 9) * 8 - 40 + iter % 7);
            for (unsigned i = 0; i < 32; i++)
                x[b * 32 + i] = mag * rng_unit();
            if (b % 13 == 1)
                for (unsigned i = 0; i < 32; i++)
                    x[b * 32 + i] = 0.0f;
            if (b % 13 == 2)
                x[b * 32 + 5] = iter % 2 ? INFINITY : NAN;
            if (b % 13 == 3)
                for (unsigned i = 0; i < 32; i++)
                    x[b * 32 + i] = ldexpf(rng_unit(), -130 + iter % 12);
            if (b % 13 == 4)         /* exact halves after scaling */
                for (unsigned i = 0; i < 32; i++)
                    x[b * 32 + i] = i == 0 ? 127.0f : (float)(int)(rng_unit() * 200) / 2.0f;
        }
        const unsigned n = N - (unsigned)(iter * 37 % 31);
        kern_ops_ref()->act_q8(x, NB, q0, d0, s0);
        kern_ops_ref()->act_f16(x, n, h0);
        for (int isa = 0; isa < KERN_NISA; isa++) {
            const kern_ops *ops = kern_ops_for((enum kern_isa)isa);
            if (!ops)
                continue;
            memset(q1, 0x55, sizeof q1);
            ops->act_q8(x, NB, q1, d1, s1);
            for (unsigned b = 0; b < NB; b++) {
                if (fbits(d1[b]) != fbits(d0[b]) || s1[b] != s0[b] ||
                    memcmp(q1 + 32 * b, q0 + 32 * b, 32))
                    fail_msg("%s act_q8 iter %d block %u: d %g/%g sum %d/%d", ops->name,
                             iter, b, d1[b], d0[b], s1[b], s0[b]);
            }
            memset(h1, 0x55, sizeof h1);
            ops->act_f16(x, n, h1);
            if (memcmp(h0, h1, n * 2))
                fail_msg("%s act_f16 iter %d differs", ops->name, iter);
        }
    }
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tile_mm),
        cmocka_unit_test(test_attn_f16),
        cmocka_unit_test(test_attn_sinks),
        cmocka_unit_test(test_attn_prefill),
        cmocka_unit_test(test_attn_f32),
        cmocka_unit_test(test_swiglu_ggml),
        cmocka_unit_test(test_act_convert),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
