/*
 * kern_kq.h — private to the K-quant family of src/kernels (kern_kq*.c):
 * the GGML block structs it reads, the payload order of each type, and
 * the pieces the scalar reference and the SIMD tiers share.
 *
 * A K-quant or IQ4_XS tile row is one super-block of 256 columns, so a
 * payload of R rows holds rp = roundup(R, 16) blocks (rows past R are
 * all-zero blocks).  Rows go in panels of 16; panel p is the 16 blocks of
 * rows 16p .. 16p+15, their bytes interleaved field by field (kern_kq.c
 * states the order byte by byte, and cflow(5)).
 */
#ifndef CFLOW_KERN_KQ_H
#define CFLOW_KERN_KQ_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kern_impl.h"

/* ---- GGML's blocks (ggml-common.h), as byte offsets ----------------------
 * Every multi-byte field is little endian; ggml_half is IEEE binary16. */
#define KQ_Q2_BYTES   84    /* scales[16] qs[64] d dmin */
#define KQ_Q3_BYTES   110   /* hmask[32] qs[64] scales[12] d */
#define KQ_Q4_BYTES   144   /* d dmin scales[12] qs[128] */
#define KQ_Q5_BYTES   176   /* d dmin scales[12] qh[32] qs[128] */
#define KQ_Q6_BYTES   210   /* ql[128] qh[64] scales[16] d */
#define KQ_IQ4_BYTES  136   /* d scales_h scales_l[4] qs[128] */

/* ggml's kvalues_iq4nl: the 16 levels of an IQ4_XS (and IQ4_NL) quant */
extern const int8_t kern_kq_iq4_values[16];

/* ---- the payload order ----------------------------------------------------
 * A block's bytes are cut into fields (a run of the block's own bytes),
 * each stored for the 16 rows of a panel side by side in units of w bytes:
 * field [off, off + len) of row i, unit u (bytes off + u*w .. + w - 1) at
 * panel byte 16*off + u*16*w + i*w.  So a field's region in the panel is
 * 16 times as long as the field and starts at 16 times its offset, and one
 * unit of the 16 rows is one 16*w-byte vector: w = 4 for quants (one
 * 32-bit lane a row: vpdpbusd's shape), 2 for f16 scales, 1 for packed
 * scale bytes. */
typedef struct kq_field {
    uint8_t off, len, w;
} kq_field;

#define KQ_MAX_FIELDS 5

typedef struct kq_layout {
    enum kern_type type;
    unsigned bytes;                   /* of one block */
    unsigned nfield;
    kq_field field[KQ_MAX_FIELDS];
} kq_layout;

/* The layout of type t (NULL for a type that is not the family's). */
const kq_layout *kern_kq_layout(enum kern_type t);

/* The panel byte of block byte b of row lane i (< 16). */
static inline size_t kq_panel_off(const kq_layout *L, unsigned b, unsigned i)
{
    for (unsigned f = 0; f < L->nfield; f++) {
        const kq_field *F = &L->field[f];
        if (b >= F->off && b < (unsigned)F->off + F->len) {
            unsigned k = b - F->off;
            return (size_t)KERN_PANEL * F->off + (size_t)(k / F->w) * KERN_PANEL * F->w +
                   (size_t)i * F->w + k % F->w;
        }
    }
    return 0;
}

/* Start of field f's region in a panel of a payload: panel p of type L */
static inline const uint8_t *kq_region(const kq_layout *L, const uint8_t *pl,
                                       unsigned p, unsigned off)
{
    return pl + (size_t)p * KERN_PANEL * L->bytes + (size_t)KERN_PANEL * off;
}

/* ---- scale unpacking shared by the tiers -----------------------------------
 * Q4_K / Q5_K: ggml's get_scale_min_k4, scale and min j (< 8) of the 12
 * packed bytes q. */
static inline void kq_scale_min_k4(unsigned j, const uint8_t *q, uint8_t *sc,
                                   uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Q3_K: scale j (< 16) of the 12 packed bytes, as ggml unpacks them
 * (6 bits, minus 32). */
static inline int kq_scale_q3(unsigned j, const uint8_t *s)
{
    int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
    int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | hi << 4) - 32;
}

/* IQ4_XS: the 6-bit scale of sub-block ib (< 8), minus 32. */
static inline int kq_scale_iq4(unsigned ib, const uint8_t *scales_l,
                               uint16_t scales_h)
{
    return (((scales_l[ib / 2] >> 4 * (ib % 2)) & 0xF) |
            (((scales_h >> 2 * ib) & 3) << 4)) - 32;
}

/* ---- the per-row float steps (kern_kq.c's essay) ---------------------------
 * "Repacked" types (Q4_K, Q2_K): a row's integer sum I and min sum M of
 * its super-block give fma(I, d_w d_x, 0) - fma(M, dmin_w d_x, 0).
 * "Lane" types (Q3_K, Q5_K, Q6_K, IQ4_XS): 8 lane sums, each
 * fma(d, (float)sumi_l, 0), folded as ggml's hsum_float_8. */
static inline float kq_fold8(const float *l)
{
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

/* ---- the reference's pieces ------------------------------------------------ */

/* kern_kq_quant.c: the type table entries' functions */
void kern_kq_dequant_q2_k(const uint8_t *b, unsigned nblk, float *y);
void kern_kq_dequant_q3_k(const uint8_t *b, unsigned nblk, float *y);
void kern_kq_dequant_q4_k(const uint8_t *b, unsigned nblk, float *y);
void kern_kq_dequant_q5_k(const uint8_t *b, unsigned nblk, float *y);
void kern_kq_dequant_q6_k(const uint8_t *b, unsigned nblk, float *y);
void kern_kq_dequant_iq4_xs(const uint8_t *b, unsigned nblk, float *y);
int  kern_kq_quant_q2_k(const float *x, unsigned nblk, uint8_t *b);
int  kern_kq_quant_q3_k(const float *x, unsigned nblk, uint8_t *b);
int  kern_kq_quant_q4_k(const float *x, unsigned nblk, uint8_t *b);
int  kern_kq_quant_q5_k(const float *x, unsigned nblk, uint8_t *b);
int  kern_kq_quant_q6_k(const float *x, unsigned nblk, uint8_t *b);
int  kern_kq_quant_iq4_xs(const float *x, unsigned nblk, uint8_t *b);

/* 0 when nblk blocks of `bytes` have a finite f16 at d_off (and at
 * dmin_off when >= 0), else -1 with *what (may be NULL) "d" or "dmin" */
int  kern_kq_check_blocks(const uint8_t *b, unsigned nblk, unsigned bytes,
                          unsigned d_off, int dmin_off, const char **what);

/* kern_kq.c: ggml's quantize_row_q8_K (the scalar act_q8k) */
void kern_kq_act_q8k_ref(const float *x, unsigned nb, int8_t *q, float *d,
                         int16_t *bsums);

#if HAVE_ISA_X86
/* kern_kq_avx2.c, kern_kq_avx512.c: a tier's kernels into its table
 * (over the scalar reference's entries) */
void kern_kq_fill_avx2(kern_ops *ops);
void kern_kq_fill_avx512(kern_ops *ops, int vnni);
#endif

#endif /* CFLOW_KERN_KQ_H */
