/*
 * fam_golden.h — the inputs of the model families' vector kernels whose
 * ggml outputs test_kern_vec.c holds cflow to (test_ggml_family_golden):
 * GeGLU (Gemma), gpt-oss's clamped SwiGLU, and RoPE with LongRoPE's
 * divisors, linear scaling and YaRN.  fam_golden_gen.c computes ggml's
 * outputs of the same cases; both sides draw the inputs from fg_unit.
 */
#ifndef CFLOW_FAM_GOLDEN_H
#define CFLOW_FAM_GOLDEN_H

#include <stddef.h>
#include <stdint.h>

static uint64_t fg_state;

/* uniform in [-1, 1), the same stream on both sides */
static float fg_unit(void)
{
    fg_state ^= fg_state >> 12;
    fg_state ^= fg_state << 25;
    fg_state ^= fg_state >> 27;
    return (float)((double)((fg_state * 0x2545F4914F6CDD1Dull) >> 40) / (double)(1ull << 23) -
                   1.0);
}

static uint64_t fg_fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}
#define FG_FNV0 0xcbf29ce484222325ull

/* GeGLU and the clamped SwiGLU: n inputs of gate * 12 (past GELU's +-10
 * cut) and up */
static const unsigned fg_glu_n[] = { 172, 1000 };

/* RoPE: 4 heads of hd, rot rotated, at pos; neox or adjacent pairs; the
 * divisors (0 none, 1 near 1, 2 near 4), freq_scale, ext_factor,
 * attn_factor, n_ctx_orig and YaRN's betas */
typedef struct fg_rope {
    unsigned hd, rot, pos;
    int      neox, ff;
    float    base, freq_scale, ext_factor, attn_factor;
    unsigned orig;
    float    beta_fast, beta_slow;
} fg_rope;
static const fg_rope fg_ropes[] = {
    { 16, 12, 5, 1, 1, 10000.0f, 1.0f, 0.0f, 1.1338934f, 256, 32.0f, 1.0f },    /* Phi-3 */
    { 16, 12, 300, 1, 2, 10000.0f, 1.0f, 0.0f, 1.1338934f, 256, 32.0f, 1.0f },
    { 128, 128, 777, 1, 0, 1e6f, 0.125f, 0.0f, 1.0f, 131072, 32.0f, 1.0f },     /* Gemma 3 */
    { 64, 64, 100, 1, 0, 150000.0f, 1.0f / 32, 1.0f, 0.7311508f, 4096, 32.0f, 1.0f },
    { 64, 64, 5000, 1, 0, 150000.0f, 1.0f / 32, 1.0f, 0.7311508f, 4096, 32.0f, 1.0f },
    { 64, 64, 4000, 0, 0, 10000.0f, 1.0f / 40, 1.0f, 1.0f, 4096, 32.0f, 1.0f },  /* DeepSeek */
};
#define FG_NROPE (sizeof fg_ropes / sizeof fg_ropes[0])

/* the inputs of rope case c: x [4][hd] and the divisors [rot / 2] */
static void fg_rope_inputs(const fg_rope *c, float *x, float *ff)
{
    for (unsigned i = 0; i < 4 * c->hd; i++)
        x[i] = 2 * fg_unit();
    for (unsigned i = 0; i < c->rot / 2; i++)
        ff[i] = (c->ff == 2 ? 4.0f : 1.0f) + (c->ff == 2 ? 0.5f : 0.1f) * fg_unit();
}

#endif
