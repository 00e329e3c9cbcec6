/*
 * kern_kq.c — the K-quants (Q2_K .. Q6_K) and IQ4_XS kept bit for bit
 * (super-blocks of 256 columns, one per tile row): their payload order,
 * ggml's dequantisers and reference quantisers, the block checks, the
 * Q8_K activations and the scalar reference mat-vec (kern_impl.h,
 * kern_type_ops).
 *
 * SKELETON: the entries are filled in by the work on issue 41.
 */
#include "config.h"

#include <math.h>
#include <string.h>

#include "kernels/kern.h"
#include "kernels/kern_impl.h"

const kern_type_ops *kern_kq_type(enum kern_type t)
{
    (void)t;
    return NULL;
}

void kern_kq_fill(kern_ops *ops, enum kern_isa isa)
{
    (void)ops;
    (void)isa;
}
