/*
 * kern_kq_avx2.c — the K-quant tile kernels for AVX2 + FMA + F16C:
 * kern_kq_simd.h's template with 8 rows (half a panel) in a ymm.  The
 * arithmetic is kern_kq.c's (its essay); the tests hold these kernels to
 * its bits.
 */
#include "config.h"

#include <string.h>

#include "kernels/kern.h"
#include "kernels/kern_impl.h"
#include "kernels/kern_kq.h"

#if HAVE_ISA_X86

#include <immintrin.h>

#define KERN_SIMD_W 256
/* the header's own kernels are kern_avx2.c's; only its vocabulary is used
 * (kern_vf_add_rows) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "kernels/kern_simd.h"
#pragma GCC diagnostic pop

#define KQ_W 256
#define KQ_VNNI 0
#define KQ_ATTR __attribute__((target("avx2,fma,f16c")))
#define KQ_SUF avx2
#include "kernels/kern_kq_simd.h"

void kern_kq_fill_avx2(kern_ops *ops)
{
    kq_fill_avx2(ops);
}

#endif /* HAVE_ISA_X86 */
