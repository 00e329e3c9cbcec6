/*
 * kq_gold.h — the inputs of the K-quant golden hashes, shared by
 * tests/kernels/test_kern_kq.c and by the program that made the hashes
 * with ggml itself (tests/data/kq/ggml_golden.c, README.md there), so that
 * both draw the very same blocks, rows and vectors.  Plain C, no cflow
 * headers: every value is made from integers by exact float operations.
 */
#ifndef CFLOW_KQ_GOLD_H
#define CFLOW_KQ_GOLD_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The types, as ggml numbers them (GGML_TYPE_Q2_K = 10 .. Q6_K = 14,
 * IQ4_XS = 23) and as kern.h does (KERN_Q2_K = 10 .. Q6_K = 14,
 * IQ4_XS = 15), with their block sizes and where their f16 scales are. */
typedef struct kq_gold_type {
    const char *name;
    int ggml, kern;
    unsigned bytes;
    int d_off, dmin_off;   /* -1: none */
} kq_gold_type;

static const kq_gold_type kq_gold_types[] = {
    { "q2_k", 10, 10, 84, 80, 82 },
    { "q3_k", 11, 11, 110, 108, -1 },
    { "q4_k", 12, 12, 144, 0, 2 },
    { "q5_k", 13, 13, 176, 0, 2 },
    { "q6_k", 14, 14, 210, 208, -1 },
    { "iq4_xs", 23, 15, 136, 0, -1 },
};
#define KQ_GOLD_NTYPES (sizeof kq_gold_types / sizeof kq_gold_types[0])

/* Sizes of the cases: dequantised blocks, quantised rows, mat-vec rows
 * (a multiple of 8, which llama.cpp repacks) and input vectors, Q8_K
 * blocks. */
#define KQ_GOLD_DEQ_BLOCKS 24
#define KQ_GOLD_QROWS      16
#define KQ_GOLD_MV_ROWS    24
#define KQ_GOLD_MV_VECS    3
#define KQ_GOLD_Q8K_BLOCKS 8

static uint64_t kq_gold_state;

static inline void kq_gold_seed(uint64_t s)
{
    kq_gold_state = s * 0x9E3779B97F4A7C15ull + 1;
}

static inline uint64_t kq_gold_u64(void)
{
    kq_gold_state ^= kq_gold_state >> 12;
    kq_gold_state ^= kq_gold_state << 25;
    kq_gold_state ^= kq_gold_state >> 27;
    return kq_gold_state * 0x2545F4914F6CDD1Dull;
}

/* uniform in [-1, 1), a multiple of 2^-23 */
static inline float kq_gold_unit(void)
{
    return (float)((double)(kq_gold_u64() >> 40) / (double)(1u << 23) - 1.0);
}

/* a power of two in [2^lo, 2^hi] */
static inline float kq_gold_pow2(int lo, int hi)
{
    return ldexpf(1.0f, lo + (int)(kq_gold_u64() % (uint64_t)(hi - lo + 1)));
}

/* f16 bits of a normal half of either sign (neg) or positive, magnitude
 * 2^-14 .. 2^-3 */
static inline uint16_t kq_gold_half(int neg)
{
    uint64_t u = kq_gold_u64();
    uint16_t h = (uint16_t)(((1 + u % 12) << 10) | ((u >> 8) & 0x3FF));
    return neg && (u >> 20 & 1) ? (uint16_t)(h | 0x8000) : h;
}

/* n random blocks of type T: random bytes, the f16 scales made normal
 * (d of either sign where the type's quantiser can make one, dmin
 * positive) */
static inline void kq_gold_blocks(const kq_gold_type *T, uint8_t *b,
                                  unsigned n)
{
    for (unsigned i = 0; i < n; i++, b += T->bytes) {
        for (unsigned k = 0; k < T->bytes; k++)
            b[k] = (uint8_t)(kq_gold_u64() >> 32);
        uint16_t d = kq_gold_half(T->dmin_off < 0);
        memcpy(b + T->d_off, &d, 2);
        if (T->dmin_off >= 0) {
            uint16_t m = kq_gold_half(0);
            memcpy(b + T->dmin_off, &m, 2);
        }
    }
}

/* Row r of the quantiser's input (256 floats), one of 8 shapes by r % 8:
 * uniform; a magnitude per 32-block; all positive; constant; all zero;
 * zero 16-blocks among others; heavy tails with outliers; values below
 * ggml's GROUP_MAX_EPS (1e-15) beside normal ones. */
static inline void kq_gold_row(unsigned r, float *x)
{
    float m = kq_gold_pow2(-8, 4);
    const float c = m * kq_gold_unit();
    for (unsigned i = 0; i < 256; i++) {
        float v = m * kq_gold_unit();
        switch (r % 8) {
        case 1:
            if (i % 32 == 0)
                m = kq_gold_pow2(-10, 6);
            v = m * kq_gold_unit();
            break;
        case 2: v = fabsf(v) + m * 0.25f; break;
        case 3: v = c; break;
        case 4: v = 0.0f; break;
        case 5: if ((i / 16) % 3 == 1) v = 0.0f; break;
        case 6:
            v = m * (kq_gold_unit() + kq_gold_unit() + kq_gold_unit() + kq_gold_unit());
            if (kq_gold_u64() % 61 == 0)
                v *= 16.0f;
            break;
        case 7: if ((i / 32) % 2) v *= 0x1p-60f; break;
        default: break;
        }
        x[i] = v;
    }
}

/* An input vector of n floats: uniform times a magnitude per 64 (one
 * block of 256 all zero when zero_block >= 0: that block) */
static inline void kq_gold_vec(float *x, unsigned n, int zero_block)
{
    float m = 1.0f;
    for (unsigned i = 0; i < n; i++) {
        if (i % 64 == 0)
            m = kq_gold_pow2(-6, 3);
        x[i] = (int)(i / 256) == zero_block ? 0.0f : m * kq_gold_unit();
    }
}

#define KQ_GOLD_FNV0 0xcbf29ce484222325ull

static inline uint64_t kq_gold_fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* A Q8_K block's hash: d, the quants, and the bsums where d != 0 (ggml
 * leaves an all-zero block's bsums as they were). */
static inline uint64_t kq_gold_q8k(uint64_t h, float d, const int8_t *q,
                                   const int16_t *bsums)
{
    h = kq_gold_fnv(h, &d, 4);
    h = kq_gold_fnv(h, q, 256);
    return d != 0.0f ? kq_gold_fnv(h, bsums, 32) : h;
}

#endif /* CFLOW_KQ_GOLD_H */
