/*
 * kern_act_ref.c — the scalar activation conversions: kern_ops.act_q8 and
 * act_f16 of the scalar and AVX2 tables, and the oracle of the others'
 * (kern_act.c's buffer is filled through the tier's table).
 *
 * The Q8_0 quantisation is llama.cpp's quantize_row_q8_0 as its x86 build
 * runs it (arch/x86/quants.c, AVX2 code, also in AVX-512 builds): per block
 * of 32, amax = max |x|, d = amax/127, id = amax ? 127/amax : 0,
 * q = x*id rounded half to even (_mm256_round_ps, _MM_ROUND_NEAREST), and
 * the scale kept is d rounded to f16.  Its portable quantize_row_q8_0_ref
 * uses id = 1/d and rounds halves away from zero; the two differ in a
 * quant now and then, and on a Q8_0/Q4_0 model such a difference is enough
 * to change greedy text a few dozen tokens later, so we follow the code
 * llama.cpp actually runs on the machines we compare with.  q8 * q8_d is
 * llama.cpp's dequantised activation.
 */
#include "config.h"

#include <math.h>

#include "kernels/kern.h"
#include "kernels/kern_impl.h"

/* Round half to even, whatever the FP environment's rounding mode. */
static float round_even(float v)
{
    float r = roundf(v);                /* halves away from zero */
    if (fabsf(r - v) == 0.5f)
        r = 2.0f * roundf(0.5f * v);    /* the even neighbour */
    return r;
}

/* Quantise one block of 32 as llama.cpp's x86 quantize_row_q8_0. */
static void quant_q8_block(const float *x, int8_t *q, float *d_out,
                           int32_t *sum_out)
{
    float amax = 0.0f;
    for (int j = 0; j < KERN_QBLOCK; j++) {
        float v = fabsf(x[j]);
        amax = amax > v ? amax : v;     /* ggml's MAX() */
    }
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int32_t sum = 0;
    for (int j = 0; j < KERN_QBLOCK; j++) {
        float v = round_even(x[j] * id);
        /* |x*id| <= 127 for finite x; clamp so a NaN or inf input gives a
         * defined quant instead of an out-of-range conversion */
        int qi = v >= -127.0f && v <= 127.0f ? (int)v : v > 127.0f ? 127
               : v < -127.0f ? -127 : 0;
        q[j] = (int8_t)qi;
        sum += qi;
    }
    *d_out = kern_h2f(kern_f2h(d));
    *sum_out = sum;
}

/* The scalar conversions (kern_ops.act_q8 / act_f16 of the scalar and
 * AVX2 tables; the oracle of the others). */
void kern_act_q8_ref(const float *x, unsigned nb, int8_t *q, float *d,
                     int32_t *sum)
{
    for (unsigned b = 0; b < nb; b++)
        quant_q8_block(x + KERN_QBLOCK * b, q + KERN_QBLOCK * b, &d[b], &sum[b]);
}

void kern_act_f16_ref(const float *x, unsigned n, uint16_t *h)
{
    for (unsigned i = 0; i < n; i++)
        h[i] = kern_f2h(x[i]);
}
