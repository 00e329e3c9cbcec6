/*
 * kern_lq.h — private to the 32-column GGML block types and BF16
 * (kern_lq.c, kern_lq_ref.c, kern_lq_avx2.c, kern_lq_avx512.c): where a
 * row's block fields sit in a payload (the layout is set out in kern_lq.c
 * and cflow(5)), ggml's value tables, and the tiers' fills.
 *
 * A payload of a 32-column type (Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4) for rp
 * rows and nb blocks a row is rp / 16 panels of nb * 16 * bb bytes (bb:
 * the GGML block's bytes); a panel is
 *   meta   nb x [field f: 16 rows x fw bytes] for each field f (e; d; d, m)
 *   quants nb x [qh: 16 rows x 4 bytes (Q5_0, Q5_1 only)]
 *                [4 chunks of 64 bytes: byte 4i + j of chunk g = qs byte
 *                 4g + j of row i]
 * so that a 64-byte chunk is 16 rows x 4 columns, one 32-bit lane a row.
 */
#ifndef CFLOW_KERN_LQ_H
#define CFLOW_KERN_LQ_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kern.h"
#include "kernels/kern_impl.h"

/* The fields of one 32-column type's GGML block, in block order: meta
 * bytes of scales (fields of fw bytes), then qh (4 bytes or none), then
 * the 16 bytes of nibbles. */
typedef struct lq_fmt {
    unsigned meta;   /* 1 (MXFP4 e), 2 (d), 4 (Q4_1/Q5_1 d, m) */
    unsigned fw;     /* bytes of one scale field: 1 or 2 */
    unsigned qh;     /* 4 (Q5_0, Q5_1) or 0 */
} lq_fmt;

static inline unsigned lq_blk_bytes(const lq_fmt *f)
{
    return f->meta + f->qh + 16;
}

/* Panel p of a payload of nb blocks a row. */
static inline const uint8_t *lq_panel(const lq_fmt *f, const uint8_t *pl,
                                      unsigned nb, unsigned p)
{
    return pl + (size_t)p * KERN_PANEL * nb * lq_blk_bytes(f);
}

/* Block b's scale field fi (16 rows x fw bytes) in a panel. */
static inline const uint8_t *lq_meta(const lq_fmt *f, const uint8_t *panel,
                                     unsigned b, unsigned fi)
{
    return panel + (size_t)b * KERN_PANEL * f->meta + fi * KERN_PANEL * f->fw;
}

/* Block b's quants in a panel: qh (16 x 4 bytes) when the type has them,
 * then the 4 chunks of 64 bytes. */
static inline const uint8_t *lq_quants(const lq_fmt *f, const uint8_t *panel,
                                       unsigned nb, unsigned b)
{
    return panel + (size_t)nb * KERN_PANEL * f->meta +
           (size_t)b * KERN_PANEL * (f->qh + 16);
}

/* The format of each of the five types (inline, so that a kernel made for
 * one type has its offsets as constants). */
static inline lq_fmt lq_fmt_of(enum kern_type t)
{
    switch (t) {
    case KERN_Q4_1:   return (lq_fmt){ 4, 2, 0 };
    case KERN_Q5_0:   return (lq_fmt){ 2, 2, 4 };
    case KERN_Q5_1:   return (lq_fmt){ 4, 2, 4 };
    case KERN_IQ4_NL: return (lq_fmt){ 2, 2, 0 };
    default:          return (lq_fmt){ 1, 1, 0 };   /* MXFP4 */
    }
}

/* BF16: panel p is 16 rows x cols halves at p * 32 * cols; column pair
 * (2k, 2k + 1) at 64k in it, row i's two values at 4i (the even column
 * first); a last odd column at 64 * (cols / 2), row i at 2i. */
static inline size_t lq_bf16_off(unsigned cols, unsigned r, unsigned c)
{
    size_t panel = (size_t)(r / KERN_PANEL) * KERN_PANEL * cols * 2;
    unsigned i = r % KERN_PANEL;
    if ((c | 1u) < cols)
        return panel + (size_t)(c / 2) * 64 + 4 * i + 2 * (c & 1);
    return panel + (size_t)(c / 2) * 64 + 2 * i;
}

/* ggml's value tables (ggml-common.h): kvalues_iq4nl, and kvalues_mxfp4,
 * the E2M1 values doubled (the E8M0 scale is halved to match). */
extern const int8_t kern_lq_iq4nl[16];
extern const int8_t kern_lq_mxfp4[16];

/* ggml_e8m0_to_fp32_half: 2^(e - 128), the two smallest as subnormals. */
static inline float kern_e8m0_half(uint8_t e)
{
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    return kern_bits_f32(bits);
}

/* bfloat16 to float, and GGML_FP32_TO_BF16 (nearest even; NaN quieted). */
static inline float kern_lq_bf2f(uint16_t h)
{
    return kern_bits_f32((uint32_t)h << 16);
}

static inline uint16_t kern_lq_f2bf(float f)
{
    uint32_t u = kern_f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7FFFu + ((u >> 16) & 1u))) >> 16);
}

/* kern_lq_ref.c: the scalar reference kernels into a table (every entry
 * of the family), and the scalar bf16 conversion (kern_ops.act_bf16). */
void kern_lq_fill_ref(kern_ops *ops);
void kern_lq_act_bf16_ref(const float *x, unsigned n, uint16_t *h);

#if HAVE_ISA_X86
/* kern_lq_avx2.c, kern_lq_avx512.c: each tier's kernels over the entries
 * the tier below left (bf16: whether the CPU has AVX512_BF16). */
void kern_lq_fill_avx2(kern_ops *ops);
void kern_lq_fill_avx512(kern_ops *ops, int vnni, int bf16);
#endif

#endif /* CFLOW_KERN_LQ_H */
