/*
 * kern_lq.c — the legacy GGML block types kept bit for bit (Q4_1, Q5_0,
 * Q5_1, IQ4_NL, MXFP4: blocks of 32 columns) and BF16: their payload
 * order, ggml's dequantisers and reference quantisers, the block checks
 * and the scalar reference mat-vec (kern_impl.h, kern_type_ops).
 *
 * SKELETON: the entries are filled in by the work on issue 41.
 */
#include "config.h"

#include <math.h>
#include <string.h>

#include "kernels/kern.h"
#include "kernels/kern_impl.h"

const kern_type_ops *kern_lq_type(enum kern_type t)
{
    (void)t;
    return NULL;
}

void kern_lq_fill(kern_ops *ops, enum kern_isa isa)
{
    (void)ops;
    (void)isa;
}

void kern_act_q8_1_s(const float *x, unsigned nb, const int32_t *sum,
                     float *s)
{
    for (unsigned b = 0; b < nb; b++) {
        float amax = 0.0f;
        for (unsigned j = 0; j < KERN_QBLOCK; j++) {
            float v = fabsf(x[KERN_QBLOCK * b + j]);
            amax = amax > v ? amax : v;
        }
        const float d = amax / 127.0f;
        s[b] = kern_h2f(kern_f2h(d * (float)sum[b]));
    }
}
