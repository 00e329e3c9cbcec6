/*
 * kern_lq_avx2.c — the 32-column GGML block types' and BF16's kernels for
 * AVX2 + FMA + F16C: kern_lq_simd.h in ymm (a panel's 16 rows as two
 * vectors of 8), to kern_lq_ref.c's bits.  Without VNNI the integer dots
 * are vpmaddubsw + vpmaddwd; BF16 runs vdpbf16ps's arithmetic in FMAs
 * (subnormal inputs and sums made zeros).
 */
#include "config.h"

#include "kernels/kern.h"
#include "kernels/kern_impl.h"
#include "kernels/kern_lq.h"

#if HAVE_ISA_X86

#include <immintrin.h>

#define KERN_SIMD_W 256
/* the header's own kernels are kern_avx2.c's; only its vocabulary is used */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "kernels/kern_simd.h"
#pragma GCC diagnostic pop

#define LQ_ATTR KERN_VATTR
#define LQ_SFX _avx2
#define LQ_VNNI 0
#define LQ_WITH_QUANT 1
#define LQ_WITH_BF16 1
#define LQ_BF16_NATIVE 0
#define LQ_RP_G 4       /* 8 accumulators of 16 ymm */
#define LQ_MM_T 4
#define LQ_MM8_T 0      /* 8 accumulators an input: one fills ymm */
#include "kernels/kern_lq_simd.h"

void kern_lq_fill_avx2(kern_ops *ops)
{
    lq_fill_avx2(ops);
}

#endif /* HAVE_ISA_X86 */
