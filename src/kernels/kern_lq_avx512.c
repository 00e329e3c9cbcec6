/*
 * kern_lq_avx512.c — the 32-column GGML block types' and BF16's kernels for
 * AVX-512 F/BW/VL, with VNNI and with AVX512_BF16 where the CPU has them:
 * kern_lq_simd.h in zmm (a panel's 16 rows in one vector), to
 * kern_lq_ref.c's bits.  Three instances of the template: the quantised
 * kernels without VNNI (vpmaddubsw + vpmaddwd) and BF16 in FMAs; the
 * quantised kernels with vpdpbusd; BF16 with vdpbf16ps.
 */
#include "config.h"

#include "kernels/kern.h"
#include "kernels/kern_impl.h"
#include "kernels/kern_lq.h"

#if HAVE_ISA_X86

#include <immintrin.h>

#define KERN_SIMD_W 512
/* the header's own kernels are kern_avx512.c's; only its vocabulary is used */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "kernels/kern_simd.h"
#pragma GCC diagnostic pop

#define LQ_ATTR KERN_VATTR
#define LQ_SFX _avx512
#define LQ_VNNI 0
#define LQ_WITH_QUANT 1
#define LQ_WITH_BF16 1
#define LQ_BF16_NATIVE 0
#define LQ_RP_G 8
#define LQ_MM_T 8
#define LQ_MM8_T 2
#include "kernels/kern_lq_simd.h"

#define LQ_ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#define LQ_SFX _vnni
#define LQ_VNNI 1
#define LQ_WITH_QUANT 1
#define LQ_WITH_BF16 0
#define LQ_BF16_NATIVE 0
#define LQ_RP_G 8
#define LQ_MM_T 8
#define LQ_MM8_T 2
#include "kernels/kern_lq_simd.h"

#define LQ_ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define LQ_SFX _bf16
#define LQ_VNNI 0
#define LQ_WITH_QUANT 0
#define LQ_WITH_BF16 1
#define LQ_BF16_NATIVE 1
#define LQ_RP_G 8
#define LQ_MM_T 8
#define LQ_MM8_T 2
#include "kernels/kern_lq_simd.h"

void kern_lq_fill_avx512(kern_ops *ops, int vnni, int bf16)
{
    lq_fill_avx512(ops);
    if (vnni)
        lq_fill_vnni(ops);
    if (bf16)
        lq_fill_bf16(ops);
}

#endif /* HAVE_ISA_X86 */
