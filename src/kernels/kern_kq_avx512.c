/*
 * kern_kq_avx512.c — the K-quant tile kernels for AVX-512 F/BW/VL, and
 * with AVX512_VNNI: kern_kq_simd.h's template with 16 rows (a panel) in
 * a zmm, once with vpmaddubsw / vpmaddwd and once with vpdpbusd /
 * vpdpwssd.  The arithmetic is kern_kq.c's (its essay); the tests hold
 * these kernels to its bits.
 */
#include "config.h"

#include <string.h>

#include "kernels/kern.h"
#include "kernels/kern_impl.h"
#include "kernels/kern_kq.h"

#if HAVE_ISA_X86

#include <immintrin.h>

#define KERN_SIMD_W 512
/* the header's own kernels are kern_avx512.c's; only its vocabulary is used
 * (kern_vf_add_rows) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "kernels/kern_simd.h"
#pragma GCC diagnostic pop

#define KQ_W 512

#define KQ_VNNI 0
#define KQ_ATTR __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))
#define KQ_SUF avx512
#include "kernels/kern_kq_simd.h"
#undef KQ_VNNI
#undef KQ_ATTR
#undef KQ_SUF

#define KQ_VNNI 1
#define KQ_ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")))
#define KQ_SUF vnni
#include "kernels/kern_kq_simd.h"

void kern_kq_fill_avx512(kern_ops *ops, int vnni)
{
    if (vnni)
        kq_fill_vnni(ops);
    else
        kq_fill_avx512(ops);
}

#endif /* HAVE_ISA_X86 */
