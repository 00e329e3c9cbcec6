/*
 * fmt_dequant.c — GGML tensor types: names, sizes and dequantisation.
 *
 * GGML stores a quantised row as a run of blocks; a block holds a fixed
 * number of weights (32 for the legacy types, 256 for the K-quants) and
 * fixed bytes.  All multi-byte fields are little endian; "f16" is IEEE
 * binary16.  The block layouts (from ggml-common.h), in byte order:
 *
 *   Q4_0  (32 w, 18 B)  f16 d; u8 qs[16]          w = d*(q-8)
 *   Q4_1  (32 w, 20 B)  f16 d, m; u8 qs[16]       w = d*q + m
 *   Q5_0  (32 w, 22 B)  f16 d; u8 qh[4]; qs[16]   w = d*(q-16), q 5 bits
 *   Q5_1  (32 w, 24 B)  f16 d, m; u8 qh[4]; qs[16] w = d*q + m
 *   Q8_0  (32 w, 34 B)  f16 d; i8 qs[32]          w = d*q
 *     legacy nibbles: weight j (< 16) is the low nibble of qs[j], weight
 *     j+16 the high nibble; Q5 adds bit j (resp. j+16) of qh as bit 4.
 *   Q2_K  (256 w, 84 B)  u8 scales[16]; u8 qs[64]; f16 d, dmin
 *   Q3_K  (256 w, 110 B) u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d
 *   Q4_K  (256 w, 144 B) f16 d, dmin; u8 scales[12]; u8 qs[128]
 *   Q5_K  (256 w, 176 B) f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]
 *   Q6_K  (256 w, 210 B) u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d
 *
 * The dequantisers below follow ggml's reference dequantize_row_* exactly
 * (same operation order, so the same float results): a converted model must
 * compute what llama.cpp computes from the same file.
 */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include "format/cflow_format.h"
#include "format/fmt_impl.h"

#define QK_K 256

/* Exact binary16 -> binary32 (every half is representable as a float). */
float fmt_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {                 /* inf / nan */
        bits = sign | 0x7f800000u | (mant << 13);
    } else if (exp != 0) {             /* normal */
        bits = sign | ((exp + 112u) << 23) | (mant << 13);
    } else if (mant == 0) {            /* signed zero */
        bits = sign;
    } else {                           /* subnormal: renormalise */
        uint32_t e = 113;
        while (!(mant & 0x400u)) {
            mant <<= 1;
            e--;
        }
        bits = sign | (e << 23) | ((mant & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

float fmt_bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

unsigned fmt_dtype_block(int dtype)
{
    switch (dtype) {
    case FMT_DT_F32: case FMT_DT_F16: case FMT_DT_BF16: return 1;
    case FMT_DT_Q4_0: case FMT_DT_Q4_1: case FMT_DT_Q5_0: case FMT_DT_Q5_1:
    case FMT_DT_Q8_0: return 32;
    case FMT_DT_Q2_K: case FMT_DT_Q3_K: case FMT_DT_Q4_K: case FMT_DT_Q5_K:
    case FMT_DT_Q6_K: return QK_K;
    default: return 0;
    }
}

unsigned fmt_dtype_block_bytes(int dtype)
{
    switch (dtype) {
    case FMT_DT_F32: return 4;
    case FMT_DT_F16: case FMT_DT_BF16: return 2;
    case FMT_DT_Q4_0: return 18;
    case FMT_DT_Q4_1: return 20;
    case FMT_DT_Q5_0: return 22;
    case FMT_DT_Q5_1: return 24;
    case FMT_DT_Q8_0: return 34;
    case FMT_DT_Q2_K: return 84;
    case FMT_DT_Q3_K: return 110;
    case FMT_DT_Q4_K: return 144;
    case FMT_DT_Q5_K: return 176;
    case FMT_DT_Q6_K: return 210;
    default: return 0;
    }
}

const char *fmt_dtype_name(int dtype)
{
    switch (dtype) {
    case FMT_DT_F32: return "F32";
    case FMT_DT_F16: return "F16";
    case FMT_DT_BF16: return "BF16";
    case FMT_DT_Q4_0: return "Q4_0";
    case FMT_DT_Q4_1: return "Q4_1";
    case FMT_DT_Q5_0: return "Q5_0";
    case FMT_DT_Q5_1: return "Q5_1";
    case FMT_DT_Q8_0: return "Q8_0";
    case FMT_DT_Q2_K: return "Q2_K";
    case FMT_DT_Q3_K: return "Q3_K";
    case FMT_DT_Q4_K: return "Q4_K";
    case FMT_DT_Q5_K: return "Q5_K";
    case FMT_DT_Q6_K: return "Q6_K";
    default: return "unknown";
    }
}

uint64_t fmt_dtype_size(int dtype, uint64_t n)
{
    unsigned blk = fmt_dtype_block(dtype), bb = fmt_dtype_block_bytes(dtype);
    if (blk == 0 || n % blk != 0 || n / blk > UINT64_MAX / bb)
        return 0;
    return n / blk * bb;
}

/* ---- legacy 32-weight blocks ------------------------------------------- */
static void dq_q4_0(const uint8_t *x, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, x += 18, y += 32) {
        const float d = fmt_f16_to_f32(kern_ld_u16(x));
        const uint8_t *qs = x + 2;
        for (int j = 0; j < 16; j++) {
            const int x0 = (qs[j] & 0x0F) - 8;
            const int x1 = (qs[j] >> 4) - 8;
            y[j] = x0 * d;
            y[j + 16] = x1 * d;
        }
    }
}

static void dq_q4_1(const uint8_t *x, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, x += 20, y += 32) {
        const float d = fmt_f16_to_f32(kern_ld_u16(x));
        const float m = fmt_f16_to_f32(kern_ld_u16(x + 2));
        const uint8_t *qs = x + 4;
        for (int j = 0; j < 16; j++) {
            const int x0 = qs[j] & 0x0F;
            const int x1 = qs[j] >> 4;
            y[j] = x0 * d + m;
            y[j + 16] = x1 * d + m;
        }
    }
}

static void dq_q5_0(const uint8_t *x, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, x += 22, y += 32) {
        const float d = fmt_f16_to_f32(kern_ld_u16(x));
        const uint32_t qh = kern_ld_u32(x + 2);
        const uint8_t *qs = x + 6;
        for (int j = 0; j < 16; j++) {
            const uint8_t xh_0 = (uint8_t)(((qh >> (j + 0)) << 4) & 0x10);
            const uint8_t xh_1 = (uint8_t)(((qh >> (j + 12))) & 0x10);
            const int32_t x0 = ((qs[j] & 0x0F) | xh_0) - 16;
            const int32_t x1 = ((qs[j] >> 4) | xh_1) - 16;
            y[j] = x0 * d;
            y[j + 16] = x1 * d;
        }
    }
}

static void dq_q5_1(const uint8_t *x, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, x += 24, y += 32) {
        const float d = fmt_f16_to_f32(kern_ld_u16(x));
        const float m = fmt_f16_to_f32(kern_ld_u16(x + 2));
        const uint32_t qh = kern_ld_u32(x + 4);
        const uint8_t *qs = x + 8;
        for (int j = 0; j < 16; j++) {
            const uint8_t xh_0 = (uint8_t)(((qh >> (j + 0)) << 4) & 0x10);
            const uint8_t xh_1 = (uint8_t)(((qh >> (j + 12))) & 0x10);
            const int x0 = (qs[j] & 0x0F) | xh_0;
            const int x1 = (qs[j] >> 4) | xh_1;
            y[j] = x0 * d + m;
            y[j + 16] = x1 * d + m;
        }
    }
}

static void dq_q8_0(const uint8_t *x, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, x += 34, y += 32) {
        const float d = fmt_f16_to_f32(kern_ld_u16(x));
        for (int j = 0; j < 32; j++)
            y[j] = (int8_t)x[2 + j] * d;
    }
}

/* ---- K-quants (256-weight super-blocks) -------------------------------- */
static void dq_q2_k(const uint8_t *x, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, x += 84) {
        const uint8_t *scales = x;
        const uint8_t *q = x + 16;
        const float d = fmt_f16_to_f32(kern_ld_u16(x + 80));
        const float min = fmt_f16_to_f32(kern_ld_u16(x + 82));
        int is = 0;
        float dl, ml;
        for (int n = 0; n < QK_K; n += 128) {
            int shift = 0;
            for (int j = 0; j < 4; ++j) {
                uint8_t sc = scales[is++];
                dl = d * (sc & 0xF);
                ml = min * (sc >> 4);
                for (int l = 0; l < 16; ++l)
                    *y++ = dl * ((int8_t)((q[l] >> shift) & 3)) - ml;
                sc = scales[is++];
                dl = d * (sc & 0xF);
                ml = min * (sc >> 4);
                for (int l = 0; l < 16; ++l)
                    *y++ = dl * ((int8_t)((q[l + 16] >> shift) & 3)) - ml;
                shift += 2;
            }
            q += 32;
        }
    }
}

static void dq_q3_k(const uint8_t *x, float *y, uint64_t nb)
{
    const uint32_t kmask1 = 0x03030303;
    const uint32_t kmask2 = 0x0f0f0f0f;
    uint32_t aux[4];
    int8_t scales[16];
    for (uint64_t i = 0; i < nb; i++, x += 110) {
        const uint8_t *hm = x;
        const uint8_t *q = x + 32;
        const float d_all = fmt_f16_to_f32(kern_ld_u16(x + 108));
        uint8_t m = 1;
        memcpy(aux, x + 96, 12);
        uint32_t tmp = aux[2];
        aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
        aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
        aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
        aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
        memcpy(scales, aux, 16);
        int is = 0;
        float dl;
        for (int n = 0; n < QK_K; n += 128) {
            int shift = 0;
            for (int j = 0; j < 4; ++j) {
                dl = d_all * (scales[is++] - 32);
                for (int l = 0; l < 16; ++l)
                    *y++ = dl * ((int8_t)((q[l + 0] >> shift) & 3) -
                                 ((hm[l + 0] & m) ? 0 : 4));
                dl = d_all * (scales[is++] - 32);
                for (int l = 0; l < 16; ++l)
                    *y++ = dl * ((int8_t)((q[l + 16] >> shift) & 3) -
                                 ((hm[l + 16] & m) ? 0 : 4));
                shift += 2;
                m = (uint8_t)(m << 1);
            }
            q += 32;
        }
    }
}

/* The 6-bit scale and min of sub-block j of a Q4_K/Q5_K block. */
static void get_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
    }
}

/* Sub-blocks is and is + 1 of a Q4_K/Q5_K block, which every 64 weights
 * take together: their scales d1, d2 and mins m1, m2 in floats, from the
 * block's f16 scale d and min scale min. */
static void k4_pair(const uint8_t *scales, int is, float d, float min,
                    float *d1, float *m1, float *d2, float *m2)
{
    uint8_t sc, m;
    get_scale_min_k4(is + 0, scales, &sc, &m);
    *d1 = d * sc;
    *m1 = min * m;
    get_scale_min_k4(is + 1, scales, &sc, &m);
    *d2 = d * sc;
    *m2 = min * m;
}

static void dq_q4_k(const uint8_t *x, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, x += 144) {
        const float d = fmt_f16_to_f32(kern_ld_u16(x));
        const float min = fmt_f16_to_f32(kern_ld_u16(x + 2));
        const uint8_t *scales = x + 4;
        const uint8_t *q = x + 16;
        int is = 0;
        for (int j = 0; j < QK_K; j += 64) {
            float d1, m1, d2, m2;
            k4_pair(scales, is, d, min, &d1, &m1, &d2, &m2);
            for (int l = 0; l < 32; ++l)
                *y++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; ++l)
                *y++ = d2 * (q[l] >> 4) - m2;
            q += 32;
            is += 2;
        }
    }
}

static void dq_q5_k(const uint8_t *x, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, x += 176) {
        const float d = fmt_f16_to_f32(kern_ld_u16(x));
        const float min = fmt_f16_to_f32(kern_ld_u16(x + 2));
        const uint8_t *scales = x + 4;
        const uint8_t *qh = x + 16;
        const uint8_t *ql = x + 48;
        int is = 0;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < QK_K; j += 64) {
            float d1, m1, d2, m2;
            k4_pair(scales, is, d, min, &d1, &m1, &d2, &m2);
            for (int l = 0; l < 32; ++l)
                *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; ++l)
                *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
            ql += 32;
            is += 2;
            u1 = (uint8_t)(u1 << 2);
            u2 = (uint8_t)(u2 << 2);
        }
    }
}

static void dq_q6_k(const uint8_t *x, float *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, x += 210) {
        const float d = fmt_f16_to_f32(kern_ld_u16(x + 208));
        const uint8_t *ql = x;
        const uint8_t *qh = x + 128;
        int8_t scb[16];
        memcpy(scb, x + 192, 16);
        const int8_t *sc = scb;
        for (int n = 0; n < QK_K; n += 128) {
            for (int l = 0; l < 32; ++l) {
                int is = l / 16;
                const int8_t q1 = (int8_t)((ql[l + 0] & 0xF) |
                                           (((qh[l] >> 0) & 3) << 4)) - 32;
                const int8_t q2 = (int8_t)((ql[l + 32] & 0xF) |
                                           (((qh[l] >> 2) & 3) << 4)) - 32;
                const int8_t q3 = (int8_t)((ql[l + 0] >> 4) |
                                           (((qh[l] >> 4) & 3) << 4)) - 32;
                const int8_t q4 = (int8_t)((ql[l + 32] >> 4) |
                                           (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l + 0] = d * sc[is + 0] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

int fmt_dequant(int dtype, const void *src, float *dst, uint64_t n)
{
    const uint8_t *x = src;
    unsigned blk = fmt_dtype_block(dtype);
    if (blk == 0 || n % blk != 0)
        return -1;
    uint64_t nb = n / blk;
    switch (dtype) {
    case FMT_DT_F32:
        if (n)
            memcpy(dst, src, (size_t)n * 4);
        return 0;
    case FMT_DT_F16:
        for (uint64_t i = 0; i < n; i++)
            dst[i] = fmt_f16_to_f32(kern_ld_u16(x + 2 * i));
        return 0;
    case FMT_DT_BF16:
        for (uint64_t i = 0; i < n; i++)
            dst[i] = fmt_bf16_to_f32(kern_ld_u16(x + 2 * i));
        return 0;
    case FMT_DT_Q4_0: dq_q4_0(x, dst, nb); return 0;
    case FMT_DT_Q4_1: dq_q4_1(x, dst, nb); return 0;
    case FMT_DT_Q5_0: dq_q5_0(x, dst, nb); return 0;
    case FMT_DT_Q5_1: dq_q5_1(x, dst, nb); return 0;
    case FMT_DT_Q8_0: dq_q8_0(x, dst, nb); return 0;
    case FMT_DT_Q2_K: dq_q2_k(x, dst, nb); return 0;
    case FMT_DT_Q3_K: dq_q3_k(x, dst, nb); return 0;
    case FMT_DT_Q4_K: dq_q4_k(x, dst, nb); return 0;
    case FMT_DT_Q5_K: dq_q5_k(x, dst, nb); return 0;
    case FMT_DT_Q6_K: dq_q6_k(x, dst, nb); return 0;
    default: return -1;
    }
}
