/*
 * kern_act.c — a mat-vec input prepared once for every tile type.
 *
 * One 64-byte aligned allocation holds, each part starting on a 64-byte
 * boundary (cap = roundup(n_max, 256), at least 256, so that the Q8_K
 * blocks of 256 fit too):
 *   f32    [cap]      floats: x, zero past n
 *   f16    [cap]      halves: x rounded to nearest even
 *   q8     [cap]      int8:   Q8_0 quants
 *   q8_d   [cap/32]   floats: block scales, the value the f16 scale holds
 *   q8_sum [cap/32]   int32:  sum of the block's 32 quants
 *   q8_s   [cap/32]   floats: Q8_1's s (kern.h)
 *   bf16   [cap]      bfloat16 x
 *   q8k    [cap]      int8:   Q8_K quants
 *   q8k_d  [cap/256]  floats: Q8_K scales
 *   q8k_bsums [cap/16] int16: sums of 16 Q8_K quants
 * a->f32 is the start of the allocation.
 *
 * kern_act_set fills the parts a mat-vec needs with the conversions of the
 * tier kern_init chose; their scalar references (the oracle, and the
 * scalar and AVX2 tables' own) are kern_act_ref.c's.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/kern.h"
#include "kernels/kern_impl.h"

#define ACT_ALIGN 64

static size_t align_up(size_t v)
{
    return (v + ACT_ALIGN - 1) / ACT_ALIGN * ACT_ALIGN;
}

/* Initialise a fresh (or freed) kern_act for inputs of up to n_max. */
int kern_act_init(kern_act *a, unsigned n_max)
{
    memset(a, 0, sizeof *a);
    if (n_max > (1u << 30))
        return -1;                      /* keeps every size below in range */
    unsigned cap = n_max ? kern_roundup(n_max, KERN_QK_K) : KERN_QK_K;
    size_t nblk = cap / KERN_QBLOCK;
    size_t o_f16 = align_up((size_t)cap * sizeof(float));
    size_t o_q8 = o_f16 + align_up((size_t)cap * sizeof(uint16_t));
    size_t o_d = o_q8 + align_up(cap);
    size_t o_sum = o_d + align_up(nblk * sizeof(float));
    size_t o_s = o_sum + align_up(nblk * sizeof(int32_t));
    size_t o_bf = o_s + align_up(nblk * sizeof(float));
    size_t o_q8k = o_bf + align_up((size_t)cap * sizeof(uint16_t));
    size_t o_kd = o_q8k + align_up(cap);
    size_t o_ks = o_kd + align_up(cap / KERN_QK_K * sizeof(float));
    size_t total = o_ks + align_up(cap / 16 * sizeof(int16_t));

    uint8_t *mem = aligned_alloc(ACT_ALIGN, total);
    if (!mem)
        return -1;
    memset(mem, 0, total);
    a->cap = cap;
    a->f32 = (float *)mem;
    a->f16 = (uint16_t *)(mem + o_f16);
    a->q8 = (int8_t *)(mem + o_q8);
    a->q8_d = (float *)(mem + o_d);
    a->q8_sum = (int32_t *)(mem + o_sum);
    a->q8_s = (float *)(mem + o_s);
    a->bf16 = (uint16_t *)(mem + o_bf);
    a->q8k = (int8_t *)(mem + o_q8k);
    a->q8k_d = (float *)(mem + o_kd);
    a->q8k_bsums = (int16_t *)(mem + o_ks);
    return 0;
}

void kern_act_free(kern_act *a)
{
    if (!a)
        return;
    free(a->f32);
    memset(a, 0, sizeof *a);
}

void kern_act_set(kern_act *a, const float *x, unsigned n, unsigned need)
{
    if (n > a->cap)
        n = a->cap;                     /* caller bug: never write past cap */
    unsigned n_pad = kern_roundup(n, KERN_QBLOCK);
    a->n = n;
    a->n_pad = n_pad;

    memmove(a->f32, x, (size_t)n * sizeof(float));  /* x may be a->f32 */
    memset(a->f32 + n, 0, (size_t)(n_pad - n) * sizeof(float));

    const kern_ops *ops = kern_init();  /* its conversions give these bits */
    if (need & KERN_NEED(KERN_F16)) {
        ops->act_f16(a->f32, n, a->f16);
        memset(a->f16 + n, 0, (size_t)(n_pad - n) * sizeof(uint16_t));
    }
    if (need & (KERN_NEED_Q8_0 | KERN_NEED_Q8_1))
        /* blocks read the zero-padded f32 copy */
        ops->act_q8(a->f32, n_pad / KERN_QBLOCK, a->q8, a->q8_d, a->q8_sum);
    if (need & KERN_NEED_Q8_1)
        kern_act_q8_1_s(a->f32, n_pad / KERN_QBLOCK, a->q8_sum, a->q8_s);
    if (need & KERN_NEED(KERN_BF16)) {
        ops->act_bf16(a->f32, n, a->bf16);
        memset(a->bf16 + n, 0, (size_t)(n_pad - n) * sizeof(uint16_t));
    }
    if (need & KERN_NEED_Q8_K) {
        /* whole blocks of 256 over the zero-padded copy */
        unsigned n256 = kern_roundup(n, KERN_QK_K);
        memset(a->f32 + n_pad, 0, (size_t)(n256 - n_pad) * sizeof(float));
        ops->act_q8k(a->f32, n256 / KERN_QK_K, a->q8k, a->q8k_d,
                     a->q8k_bsums);
    }
}
