/*
 * lq_golden.h — the inputs of the 32-column types' and BF16's golden
 * hashes, shared by test_kern_lq_ggml.c (cflow's outputs) and
 * lq_golden_gen.c (ggml's, the program that made the hashes; it is not
 * built by make).  Plain C: one xorshift stream and the functions that
 * draw from it, so that both programs hand their library the same bytes.
 *
 * Cases (the order of the stream):
 *   quant    LG_QROWS rows of LG_QCOLS floats per type, blocks of every
 *            magnitude from 1e-20 to 1e4, all-zero, one-value, all-equal
 *            and one-sign blocks, quantised by the type's reference
 *            quantiser (ggml_quantize_chunk, no imatrix)
 *   dequant  LG_DBLOCKS random blocks of each type (finite scales, random
 *            nibbles and fifth bits, E8M0 exponents 100 .. 154)
 *   matvec   lg_cases[]: R x C weights of random blocks (scales 0.005 to
 *            0.03, E8M0 117 .. 124) times x in [-2, 2), as ggml_mul_mat
 *            computes one token (decode), in the CPU buffer and, where
 *            repack is set, in the CPU_REPACK buffer
 *   batch    lg_batches[]: the same for m tokens at once (prefill), weights
 *            in the CPU_REPACK buffer
 *   act      LG_ACOLS floats to Q8_1 blocks (quantize_row_q8_1) and to
 *            bfloat16 (the CPU backend's from_float of those types)
 * Every hash is FNV-1a 64 of the output bytes.
 */
#ifndef CFLOW_LQ_GOLDEN_H
#define CFLOW_LQ_GOLDEN_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* ggml's type numbers (ggml.h enum ggml_type) */
enum { LG_Q4_1 = 3, LG_Q5_0 = 6, LG_Q5_1 = 7, LG_IQ4_NL = 20, LG_BF16 = 30,
       LG_MXFP4 = 39 };

#define LG_NTYPES 6
static const int lg_types[LG_NTYPES] = { LG_Q4_1, LG_Q5_0, LG_Q5_1, LG_IQ4_NL,
                                         LG_MXFP4, LG_BF16 };

#define LG_QROWS 4
#define LG_QCOLS 512
#define LG_DBLOCKS 64
#define LG_ACOLS 256

/* Bytes of one block (32 columns; BF16: one value). */
static inline unsigned lg_block_bytes(int type)
{
    switch (type) {
    case LG_Q4_1:   return 20;
    case LG_Q5_0:   return 22;
    case LG_Q5_1:   return 24;
    case LG_IQ4_NL: return 18;
    case LG_MXFP4:  return 17;
    default:        return 2;
    }
}

static inline unsigned lg_block_cols(int type)
{
    return type == LG_BF16 ? 1 : 32;
}

typedef struct {
    int type;
    unsigned R, C;
    int repack;
} lg_case;

/* The mat-vecs: odd and even block counts (MXFP4 and IQ4_NL pair their
 * blocks), BF16 below, at and past the 64-column chunks of its dot. */
static const lg_case lg_cases[] = {
    { LG_Q4_1, 20, 32, 0 },  { LG_Q4_1, 20, 160, 0 },  { LG_Q4_1, 20, 256, 0 },
    { LG_Q5_0, 20, 32, 0 },  { LG_Q5_0, 20, 160, 0 },  { LG_Q5_0, 20, 256, 0 },
    { LG_Q5_1, 20, 32, 0 },  { LG_Q5_1, 20, 160, 0 },  { LG_Q5_1, 20, 256, 0 },
    { LG_IQ4_NL, 20, 32, 0 }, { LG_IQ4_NL, 20, 96, 0 }, { LG_IQ4_NL, 20, 256, 0 },
    { LG_MXFP4, 20, 32, 0 }, { LG_MXFP4, 20, 96, 0 },  { LG_MXFP4, 20, 256, 0 },
    { LG_IQ4_NL, 16, 32, 1 }, { LG_IQ4_NL, 16, 160, 1 }, { LG_IQ4_NL, 24, 256, 1 },
    { LG_MXFP4, 16, 32, 1 }, { LG_MXFP4, 16, 160, 1 },  { LG_MXFP4, 24, 256, 1 },
    { LG_BF16, 20, 30, 0 },  { LG_BF16, 20, 64, 0 },   { LG_BF16, 20, 100, 0 },
    { LG_BF16, 20, 172, 0 }, { LG_BF16, 20, 256, 0 },
};
#define LG_NCASES (sizeof lg_cases / sizeof lg_cases[0])

/* Batches through the repacked kernels: llama.cpp runs its repacked gemm
 * on each 4 tokens and the gemv on the rest, one FMA a block in both. */
typedef struct {
    int type;
    unsigned R, C, m;
} lg_batch;

static const lg_batch lg_batches[] = {
    { LG_MXFP4, 16, 256, 5 }, { LG_MXFP4, 40, 96, 8 }, { LG_IQ4_NL, 24, 160, 9 },
};
#define LG_NBATCHES (sizeof lg_batches / sizeof lg_batches[0])

static uint64_t lg_state;

static inline uint64_t lg_u64(void)
{
    lg_state ^= lg_state >> 12;
    lg_state ^= lg_state << 25;
    lg_state ^= lg_state >> 27;
    return lg_state * 0x2545F4914F6CDD1Dull;
}

/* uniform in [-1, 1), 2^-23 apart */
static inline float lg_unit(void)
{
    return (float)((double)(lg_u64() >> 40) / (double)(1ull << 23) - 1.0);
}

static inline uint64_t lg_fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

#define LG_FNV0 0xcbf29ce484222325ull

/* IEEE half of f, round to nearest even (finite f, no overflow: the
 * scales drawn below are far from both ends) */
static inline uint16_t lg_f2h(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7FFFFFFFu;
    if (ax < 0x38800000u) {             /* subnormal half */
        float a = fabsf(f) * 16777216.0f;     /* units of 2^-24, exact */
        return (uint16_t)(sign | (uint32_t)nearbyintf(a));
    }
    uint32_t odd = (ax >> 13) & 1u;
    ax = ax - (112u << 23) + 0xFFFu + odd;
    return (uint16_t)(sign | (ax >> 13));
}

/* Floats for the quantisers: block k of a row takes magnitude
 * lg_mags[k % 12]; some blocks are special (see the header). */
static const float lg_mags[12] = { 1e-20f, 1e-6f, 1e-3f, 0.01f, 0.1f, 0.5f,
                                   1.0f, 3.0f, 10.0f, 100.0f, 1000.0f, 1e4f };

static inline void lg_quant_row(float *x, unsigned n, unsigned row)
{
    for (unsigned k = 0; k < n / 32; k++) {
        const float mag = lg_mags[(k + row) % 12];
        const unsigned kind = (k + 3 * row) % 9;
        float *b = x + 32 * k;
        for (unsigned j = 0; j < 32; j++)
            b[j] = mag * lg_unit();
        if (kind == 1)
            memset(b, 0, 32 * sizeof(float));
        else if (kind == 2) {
            memset(b, 0, 32 * sizeof(float));
            b[lg_u64() % 32] = mag;
        } else if (kind == 3)
            for (unsigned j = 1; j < 32; j++)
                b[j] = b[0];
        else if (kind == 4)
            for (unsigned j = 0; j < 32; j++)
                b[j] = fabsf(b[j]);
        else if (kind == 5)
            for (unsigned j = 0; j < 32; j++)
                b[j] = -fabsf(b[j]) - mag;
    }
}

/* n random blocks of type; lo/hi bound the f16 scales (and m), e0 + 0..span
 * the E8M0 exponents.  BF16: n values of magnitude up to hi * 64. */
static inline void lg_blocks_ex(int type, uint8_t *dst, unsigned n, float lo,
                                float hi, unsigned e0, unsigned span)
{
    const unsigned bb = lg_block_bytes(type);
    for (unsigned k = 0; k < n; k++) {
        uint8_t *b = dst + (size_t)k * bb;
        if (type == LG_BF16) {
            float v = hi * 64.0f * lg_unit();
            uint32_t u;
            memcpy(&u, &v, 4);
            uint16_t h = (uint16_t)(u >> 16);  /* truncated: any bf16 */
            memcpy(b, &h, 2);
            continue;
        }
        unsigned meta = 0;
        if (type == LG_MXFP4) {
            b[0] = (uint8_t)(e0 + lg_u64() % (span + 1));
            meta = 1;
        } else {
            uint16_t d = lg_f2h(lo + (hi - lo) * fabsf(lg_unit()));
            memcpy(b, &d, 2);
            meta = 2;
            if (type == LG_Q4_1 || type == LG_Q5_1) {
                uint16_t m = lg_f2h(-(lo + (hi - lo) * fabsf(lg_unit())) * 8.0f);
                memcpy(b + 2, &m, 2);
                meta = 4;
            }
        }
        for (unsigned j = meta; j < bb; j++)
            b[j] = (uint8_t)lg_u64();
    }
}

static inline void lg_dequant_blocks(int type, uint8_t *dst, unsigned n)
{
    lg_blocks_ex(type, dst, n, 1e-4f, 2.0f, 100, 54);
}

static inline void lg_matvec_blocks(int type, uint8_t *dst, unsigned n)
{
    lg_blocks_ex(type, dst, n, 0.005f, 0.03f, 117, 7);
}

/* x of a mat-vec or of the activation case */
static inline void lg_vector(float *x, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        x[i] = 2.0f * lg_unit();
}

#endif /* CFLOW_LQ_GOLDEN_H */
