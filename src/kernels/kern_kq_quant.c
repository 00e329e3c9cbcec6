/*
 * kern_kq_quant.c — ggml's own conversions of the K-quant and IQ4_XS
 * blocks, for the type table of kern_kq.c: dequantize_row_* (a payload
 * row back to floats, the source of a requantisation) and
 * quantize_row_*_ref (what llama-quantize writes without an imatrix:
 * quantize_q4_K and its siblings call these when no importance weights
 * are given), and the block checks.
 *
 * The code is ggml-quants.c's (llama.cpp mainline, ggml 0.18.1) re-typed
 * line for line over byte offsets instead of its structs, float operations
 * in its order: that file is built into libggml-base without FMA (no
 * -march), so no product is fused there, and this module is built with
 * -ffp-contract=off.  The tests hold every output to hashes made by
 * libggml-base itself (tests/kernels/test_kern_kq.c).  Integer
 * conversions keep C's: nearest_int's result stored into uint8_t or int8_t
 * wraps as ggml's does.
 */
#include "config.h"

#include <math.h>
#include <string.h>

#include "kernels/kern.h"
#include "kernels/kern_impl.h"
#include "kernels/kern_kq.h"

#define QK_K          KERN_QK_K
#define GROUP_MAX_EPS 1e-15f
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

const int8_t kern_kq_iq4_values[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};

static float h2f(const uint8_t *p)
{
    return kern_h2f(kern_ld_u16(p));
}

static void put_h(uint8_t *p, float f)
{
    uint16_t h = kern_f2h(f);
    memcpy(p, &h, 2);
}

/* ggml's nearest_int: round half to even by the 1.5 * 2^23 trick (valid
 * for |fval| <= 4194303, as ggml asserts in debug builds) */
static inline int nearest_int(float fval)
{
    float val = fval + 12582912.f;
    int i;
    memcpy(&i, &val, sizeof(int));
    return (i & 0x007fffff) - 0x00400000;
}

/* ---- checks ---------------------------------------------------------------- */

/* 0 when the f16 at p is finite, else -1 with *what = name */
static int check_h(const uint8_t *p, const char *name, const char **what)
{
    if ((kern_ld_u16(p) & 0x7C00u) != 0x7C00u)
        return 0;
    if (what)
        *what = name;
    return -1;
}

/* nblk blocks of `bytes`, whose f16 d (and dmin, dmin_off >= 0) must be
 * finite; the quants of these types are all in range by construction */
int kern_kq_check_blocks(const uint8_t *b, unsigned nblk, unsigned bytes,
                        unsigned d_off, int dmin_off, const char **what)
{
    for (unsigned i = 0; i < nblk; i++, b += bytes) {
        if (check_h(b + d_off, "d", what) < 0)
            return -1;
        if (dmin_off >= 0 && check_h(b + dmin_off, "dmin", what) < 0)
            return -1;
    }
    return 0;
}

/* ---- the search for scales and mins (ggml-quants.c's helpers) ------------- */

static float make_qx_quants(int n, int nmax, const float *x, int8_t *L,
                            int rmse_type, const float *qw)
{
    float max = 0;
    float amax = 0;
    for (int i = 0; i < n; ++i) {
        float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i)
            L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    if (rmse_type == 0) {
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * x[i]);
            L[i] = (int8_t)(nmax + MAX(-nmax, MIN(nmax - 1, l)));
        }
        return 1 / iscale;
    }
    int return_early = 0;
    if (rmse_type < 0) {
        rmse_type = -rmse_type;
        return_early = 1;
    }
    float sumlx = 0;
    float suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = MAX(-nmax, MIN(nmax - 1, l));
        L[i] = (int8_t)(l + nmax);
        float w = qw ? qw[i] : rmse_type == 1 ? x[i] * x[i] : rmse_type == 2 ? 1
                : rmse_type == 3 ? fabsf(x[i]) : sqrtf(fabsf(x[i]));
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    if (return_early)
        return suml2 > 0 ? 0.5f * (scale + 1 / iscale) : 1 / iscale;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0)
            continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * x[i]);
            l = MAX(-nmax, MIN(nmax - 1, l));
            float w = qw ? qw[i] : rmse_type == 1 ? x[i] * x[i] : rmse_type == 2 ? 1
                    : rmse_type == 3 ? fabsf(x[i]) : sqrtf(fabsf(x[i]));
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) {
                int l = nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + MAX(-nmax, MIN(nmax - 1, l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

static float make_q3_quants(int n, int nmax, const float *x, int8_t *L,
                            int do_rmse)
{
    float max = 0;
    float amax = 0;
    for (int i = 0; i < n; ++i) {
        float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i)
            L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    if (do_rmse) {
        float sumlx = 0;
        float suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * x[i]);
            l = MAX(-nmax, MIN(nmax - 1, l));
            L[i] = (int8_t)l;
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        for (int itry = 0; itry < 5; ++itry) {
            int n_changed = 0;
            for (int i = 0; i < n; ++i) {
                float w = x[i] * x[i];
                float slx = sumlx - w * x[i] * L[i];
                if (slx > 0) {
                    float sl2 = suml2 - w * L[i] * L[i];
                    int new_l = nearest_int(x[i] * sl2 / slx);
                    new_l = MAX(-nmax, MIN(nmax - 1, new_l));
                    if (new_l != L[i]) {
                        slx += w * x[i] * new_l;
                        sl2 += w * new_l * new_l;
                        if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                            L[i] = (int8_t)new_l;
                            sumlx = slx;
                            suml2 = sl2;
                            ++n_changed;
                        }
                    }
                }
            }
            if (!n_changed)
                break;
        }
        for (int i = 0; i < n; ++i)
            L[i] = (int8_t)(L[i] + nmax);
        return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
    }
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = MAX(-nmax, MIN(nmax - 1, l));
        L[i] = (int8_t)(l + nmax);
    }
    return 1 / iscale;
}

static float make_qkx2_quants(int n, int nmax, const float *x,
                              const float *weights, uint8_t *L, float *the_min,
                              uint8_t *Laux, float rmin, float rdelta,
                              int nstep, int use_mad)
{
    float min = x[0];
    float max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0)
        min = 0;
    if (max == min) {
        for (int i = 0; i < n; ++i)
            L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)MAX(0, MIN(nmax, l));
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        float w = weights[i];
        best_error += w * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * (x[i] - min));
            l = MAX(0, MIN(nmax, l));
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                float w = weights[i];
                cur_error += w * diff;
            }
            if (cur_error < best_error) {
                for (int i = 0; i < n; ++i)
                    L[i] = Laux[i];
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* ---- Q2_K: scales[16] qs[64] d dmin ------------------------------------------ */

void kern_kq_dequant_q2_k(const uint8_t *b, unsigned nblk, float *y)
{
    for (unsigned i = 0; i < nblk; i++, b += KQ_Q2_BYTES) {
        const float d = h2f(b + 80), min = h2f(b + 82);
        const uint8_t *q = b + 16, *scales = b;
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

int kern_kq_quant_q2_k(const float *x, unsigned nblk, uint8_t *b)
{
    uint8_t L[QK_K], Laux[16];
    float weights[16], mins[QK_K / 16], scales[QK_K / 16];
    const float q4scale = 15.f;
    uint8_t *out = b;

    for (unsigned i = 0; i < nblk; i++, b += KQ_Q2_BYTES, x += QK_K) {
        uint8_t *ys = b, *qs = b + 16;
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < QK_K / 16; ++j) {
            for (int l = 0; l < 16; ++l)
                weights[l] = fabsf(x[16 * j + l]);
            scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j,
                                         &mins[j], Laux, -0.5f, 0.1f, 15, 1);
            if (scales[j] > max_scale)
                max_scale = scales[j];
            if (mins[j] > max_min)
                max_min = mins[j];
        }
        if (max_scale > 0) {
            float iscale = q4scale / max_scale;
            for (int j = 0; j < QK_K / 16; ++j) {
                int l = nearest_int(iscale * scales[j]);
                ys[j] = (uint8_t)l;
            }
            put_h(b + 80, max_scale / q4scale);
        } else {
            for (int j = 0; j < QK_K / 16; ++j)
                ys[j] = 0;
            put_h(b + 80, 0.f);
        }
        if (max_min > 0) {
            float iscale = q4scale / max_min;
            for (int j = 0; j < QK_K / 16; ++j) {
                int l = nearest_int(iscale * mins[j]);
                ys[j] = (uint8_t)(ys[j] | (l << 4));
            }
            put_h(b + 82, max_min / q4scale);
        } else {
            put_h(b + 82, 0.f);
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = h2f(b + 80) * (ys[j] & 0xF);
            if (!d)
                continue;
            const float dm = h2f(b + 82) * (ys[j] >> 4);
            for (int ii = 0; ii < 16; ++ii) {
                int l = nearest_int((x[16 * j + ii] + dm) / d);
                l = MAX(0, MIN(3, l));
                L[16 * j + ii] = (uint8_t)l;
            }
        }
        for (int j = 0; j < QK_K; j += 128)
            for (int l = 0; l < 32; ++l)
                qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) |
                                          (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
    }
    return kern_kq_check_blocks(out, nblk, KQ_Q2_BYTES, 80, 82, NULL);
}

/* ---- Q3_K: hmask[32] qs[64] scales[12] d ------------------------------------- */

void kern_kq_dequant_q3_k(const uint8_t *b, unsigned nblk, float *y)
{
    for (unsigned i = 0; i < nblk; i++, b += KQ_Q3_BYTES) {
        const float d_all = h2f(b + 108);
        const uint8_t *q = b + 32, *hm = b;
        uint8_t m = 1;
        int is = 0;
        float dl;
        for (int n = 0; n < QK_K; n += 128) {
            int shift = 0;
            for (int j = 0; j < 4; ++j) {
                dl = d_all * kq_scale_q3((unsigned)is++, b + 96);
                for (int l = 0; l < 16; ++l)
                    *y++ = dl * ((int8_t)((q[l + 0] >> shift) & 3) -
                                 ((hm[l + 0] & m) ? 0 : 4));
                dl = d_all * kq_scale_q3((unsigned)is++, b + 96);
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

int kern_kq_quant_q3_k(const float *x, unsigned nblk, uint8_t *b)
{
    int8_t L[QK_K];
    float scales[QK_K / 16];
    uint8_t *out = b;

    for (unsigned i = 0; i < nblk; i++, b += KQ_Q3_BYTES, x += QK_K) {
        uint8_t *hmask = b, *qs = b + 32, *ys = b + 96;
        float max_scale = 0, amax = 0;
        for (int j = 0; j < QK_K / 16; ++j) {
            scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j, 1);
            float scale = fabsf(scales[j]);
            if (scale > amax) {
                amax = scale;
                max_scale = scales[j];
            }
        }
        memset(ys, 0, 12);
        if (max_scale) {
            float iscale = -32.f / max_scale;
            for (int j = 0; j < QK_K / 16; ++j) {
                int8_t l = (int8_t)nearest_int(iscale * scales[j]);
                l = (int8_t)(MAX(-32, MIN(31, l)) + 32);
                if (j < 8)
                    ys[j] = (uint8_t)(l & 0xF);
                else
                    ys[j - 8] = (uint8_t)(ys[j - 8] | ((l & 0xF) << 4));
                l = (int8_t)(l >> 4);
                ys[j % 4 + 8] = (uint8_t)(ys[j % 4 + 8] | (l << (2 * (j / 4))));
            }
            put_h(b + 108, 1 / iscale);
        } else {
            put_h(b + 108, 0.f);
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            float d = h2f(b + 108) * kq_scale_q3((unsigned)j, ys);
            if (!d)
                continue;
            for (int ii = 0; ii < 16; ++ii) {
                int l = nearest_int(x[16 * j + ii] / d);
                l = MAX(-4, MIN(3, l));
                L[16 * j + ii] = (int8_t)(l + 4);
            }
        }
        memset(hmask, 0, QK_K / 8);
        int m = 0;
        uint8_t hm = 1;
        for (int j = 0; j < QK_K; ++j) {
            if (L[j] > 3) {
                hmask[m] |= hm;
                L[j] -= 4;
            }
            if (++m == QK_K / 8) {
                m = 0;
                hm = (uint8_t)(hm << 1);
            }
        }
        for (int j = 0; j < QK_K; j += 128)
            for (int l = 0; l < 32; ++l)
                qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) |
                                          (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
    }
    return kern_kq_check_blocks(out, nblk, KQ_Q3_BYTES, 108, -1, NULL);
}

/* ---- Q4_K and Q5_K: d dmin scales[12] (qh[32]) qs[128] ---------------------- */

void kern_kq_dequant_q4_k(const uint8_t *b, unsigned nblk, float *y)
{
    for (unsigned i = 0; i < nblk; i++, b += KQ_Q4_BYTES) {
        const uint8_t *q = b + 16;
        const float d = h2f(b), min = h2f(b + 2);
        int is = 0;
        uint8_t sc, m;
        for (int j = 0; j < QK_K; j += 64) {
            kq_scale_min_k4((unsigned)is + 0, b + 4, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            kq_scale_min_k4((unsigned)is + 1, b + 4, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; ++l)
                *y++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; ++l)
                *y++ = d2 * (q[l] >> 4) - m2;
            q += 32;
            is += 2;
        }
    }
}

void kern_kq_dequant_q5_k(const uint8_t *b, unsigned nblk, float *y)
{
    for (unsigned i = 0; i < nblk; i++, b += KQ_Q5_BYTES) {
        const uint8_t *ql = b + 48, *qh = b + 16;
        const float d = h2f(b), min = h2f(b + 2);
        int is = 0;
        uint8_t sc, m;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < QK_K; j += 64) {
            kq_scale_min_k4((unsigned)is + 0, b + 4, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            kq_scale_min_k4((unsigned)is + 1, b + 4, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
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

/* The part quantize_row_q4_K_ref and quantize_row_q5_K_ref share: the
 * sub-block scales and mins (nmax 15 or 31, make_qkx2_quants with the
 * type's search), packed into the 12 scale bytes at s, d and dmin at b,
 * then every weight's level L against the stored scales. */
static void quant_k4_scales(const float *x, int nmax, float rmin, int nstep,
                            uint8_t *b, uint8_t *L)
{
    uint8_t Laux[32], *s = b + 4;
    float weights[32], mins[QK_K / 32], scales[QK_K / 32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK_K / 32; ++j) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l)
            sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; ++l)
            weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j,
                                     &mins[j], Laux, rmin, 0.1f, nstep, 0);
        if (scales[j] > max_scale)
            max_scale = scales[j];
        if (mins[j] > max_min)
            max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < QK_K / 32; ++j) {
        uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
        ls = MIN(63, ls);
        lm = MIN(63, lm);
        if (j < 4) {
            s[j] = ls;
            s[j + 4] = lm;
        } else {
            s[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            s[j - 4] = (uint8_t)(s[j - 4] | ((ls >> 4) << 6));
            s[j - 0] = (uint8_t)(s[j - 0] | ((lm >> 4) << 6));
        }
    }
    put_h(b, max_scale / 63.f);
    put_h(b + 2, max_min / 63.f);

    uint8_t sc, m;
    for (int j = 0; j < QK_K / 32; ++j) {
        kq_scale_min_k4((unsigned)j, s, &sc, &m);
        const float d = h2f(b) * sc;
        if (!d)
            continue;
        const float dm = h2f(b + 2) * m;
        for (int ii = 0; ii < 32; ++ii) {
            int l = nearest_int((x[32 * j + ii] + dm) / d);
            l = MAX(0, MIN(nmax, l));
            L[32 * j + ii] = (uint8_t)l;
        }
    }
}

int kern_kq_quant_q4_k(const float *x, unsigned nblk, uint8_t *b)
{
    uint8_t L[QK_K], *out = b;
    for (unsigned i = 0; i < nblk; i++, b += KQ_Q4_BYTES, x += QK_K) {
        memset(b, 0, KQ_Q4_BYTES);
        quant_k4_scales(x, 15, -1.f, 20, b, L);
        uint8_t *q = b + 16;
        for (int j = 0; j < QK_K; j += 64) {
            for (int l = 0; l < 32; ++l)
                q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
            q += 32;
        }
    }
    return kern_kq_check_blocks(out, nblk, KQ_Q4_BYTES, 0, 2, NULL);
}

int kern_kq_quant_q5_k(const float *x, unsigned nblk, uint8_t *b)
{
    uint8_t L[QK_K], *out = b;
    for (unsigned i = 0; i < nblk; i++, b += KQ_Q5_BYTES, x += QK_K) {
        memset(b, 0, KQ_Q5_BYTES);
        quant_k4_scales(x, 31, -0.5f, 15, b, L);
        uint8_t *qh = b + 16, *ql = b + 48;
        uint8_t m1 = 1, m2 = 2;
        for (int n = 0; n < QK_K; n += 64) {
            for (int j = 0; j < 32; ++j) {
                int l1 = L[n + j];
                if (l1 > 15) {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                int l2 = L[n + j + 32];
                if (l2 > 15) {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                ql[j] = (uint8_t)(l1 | (l2 << 4));
            }
            m1 = (uint8_t)(m1 << 2);
            m2 = (uint8_t)(m2 << 2);
            ql += 32;
        }
    }
    return kern_kq_check_blocks(out, nblk, KQ_Q5_BYTES, 0, 2, NULL);
}

/* ---- Q6_K: ql[128] qh[64] scales[16] d ---------------------------------------- */

void kern_kq_dequant_q6_k(const uint8_t *b, unsigned nblk, float *y)
{
    for (unsigned i = 0; i < nblk; i++, b += KQ_Q6_BYTES) {
        const float d = h2f(b + 208);
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        for (int n = 0; n < QK_K; n += 128) {
            for (int l = 0; l < 32; ++l) {
                int is = l / 16;
                const int8_t q1 = (int8_t)((int8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
                const int8_t q2 = (int8_t)((int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
                const int8_t q3 = (int8_t)((int8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                const int8_t q4 = (int8_t)((int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
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

int kern_kq_quant_q6_k(const float *x, unsigned nblk, uint8_t *b)
{
    int8_t L[QK_K];
    float scales[QK_K / 16];
    uint8_t *out = b;

    for (unsigned i = 0; i < nblk; i++, b += KQ_Q6_BYTES, x += QK_K) {
        int8_t *ys = (int8_t *)(b + 192);
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, 1, NULL);
            scales[ib] = scale;
            const float abs_scale = fabsf(scale);
            if (abs_scale > max_abs_scale) {
                max_abs_scale = abs_scale;
                max_scale = scale;
            }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(b, 0, KQ_Q6_BYTES);
            put_h(b + 208, 0.f);
            continue;
        }
        float iscale = -128.f / max_scale;
        put_h(b + 208, 1 / iscale);
        for (int ib = 0; ib < QK_K / 16; ++ib)
            ys[ib] = (int8_t)MIN(127, nearest_int(iscale * scales[ib]));
        for (int j = 0; j < QK_K / 16; ++j) {
            float d = h2f(b + 208) * ys[j];
            if (!d)
                continue;
            for (int ii = 0; ii < 16; ++ii) {
                int l = nearest_int(x[16 * j + ii] / d);
                l = MAX(-32, MIN(31, l));
                L[16 * j + ii] = (int8_t)(l + 32);
            }
        }
        uint8_t *ql = b, *qh = b + 128;
        for (int j = 0; j < QK_K; j += 128) {
            for (int l = 0; l < 32; ++l) {
                const uint8_t q1 = L[j + l + 0] & 0xF;
                const uint8_t q2 = L[j + l + 32] & 0xF;
                const uint8_t q3 = L[j + l + 64] & 0xF;
                const uint8_t q4 = L[j + l + 96] & 0xF;
                ql[l + 0] = (uint8_t)(q1 | (q3 << 4));
                ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
                qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                  ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
            }
            ql += 64;
            qh += 32;
        }
    }
    return kern_kq_check_blocks(out, nblk, KQ_Q6_BYTES, 208, -1, NULL);
}

/* ---- IQ4_XS: d scales_h scales_l[4] qs[128] ----------------------------------- */

void kern_kq_dequant_iq4_xs(const uint8_t *b, unsigned nblk, float *y)
{
    for (unsigned i = 0; i < nblk; i++, b += KQ_IQ4_BYTES) {
        const uint8_t *qs = b + 8;
        const float d = h2f(b);
        const uint16_t sh = kern_ld_u16(b + 2);
        for (unsigned ib = 0; ib < QK_K / 32; ++ib) {
            const float dl = d * kq_scale_iq4(ib, b + 4, sh);
            for (int j = 0; j < 16; ++j) {
                y[j + 0] = dl * kern_kq_iq4_values[qs[j] & 0xf];
                y[j + 16] = dl * kern_kq_iq4_values[qs[j] >> 4];
            }
            y += 32;
            qs += 16;
        }
    }
}

static int best_index_int8(int n, const int8_t *val, float x)
{
    if (x <= val[0]) return 0;
    if (x >= val[n - 1]) return n - 1;
    int ml = 0, mu = n - 1;
    while (mu - ml > 1) {
        int mav = (ml + mu) / 2;
        if (x < val[mav]) mu = mav; else ml = mav;
    }
    return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

/* quantize_row_iq4_nl_impl for a super-block of 256 in blocks of 32, with
 * no importance weights and ntry 7 (quantize_iq4_xs) */
int kern_kq_quant_iq4_xs(const float *x, unsigned nblk, uint8_t *b)
{
    enum { block_size = 32, nsub = QK_K / 32, ntry = 7 };
    const int8_t *values = kern_kq_iq4_values;
    uint8_t L[QK_K], *out = b;
    float weight[32], scales[nsub];

    for (unsigned i = 0; i < nblk; i++, b += KQ_IQ4_BYTES, x += QK_K) {
        uint8_t *q4 = b + 8, *scales_l = b + 4;
        uint16_t scales_h = 0;
        memset(q4, 0, QK_K / 2);
        put_h(b, 0.f);
        float max_scale = 0, amax_scale = 0;
        for (int ib = 0; ib < nsub; ++ib) {
            const float *xb = x + ib * block_size;
            uint8_t *Lb = L + ib * block_size;
            for (int j = 0; j < block_size; ++j)
                weight[j] = xb[j] * xb[j];
            float amax = 0, max = 0;
            for (int j = 0; j < block_size; ++j) {
                float ax = fabsf(xb[j]);
                if (ax > amax) {
                    amax = ax;
                    max = xb[j];
                }
            }
            if (amax < GROUP_MAX_EPS) {
                scales[ib] = 0;
                continue;
            }
            float d = ntry > 0 ? -max / values[0] : max / values[0];
            float id = 1 / d;
            float sumqx = 0, sumq2 = 0;
            for (int j = 0; j < block_size; ++j) {
                float al = id * xb[j];
                int l = best_index_int8(16, values, al);
                Lb[j] = (uint8_t)l;
                float q = values[l];
                float w = weight[j];
                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
            float best = d * sumqx;
            for (int itry = -ntry; itry <= ntry; ++itry) {
                id = (itry + values[0]) / max;
                sumqx = sumq2 = 0;
                for (int j = 0; j < block_size; ++j) {
                    float al = id * xb[j];
                    int l = best_index_int8(16, values, al);
                    float q = values[l];
                    float w = weight[j];
                    sumqx += w * q * xb[j];
                    sumq2 += w * q * q;
                }
                if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                    d = sumqx / sumq2;
                    best = d * sumqx;
                }
            }
            scales[ib] = d;
            float abs_d = fabsf(d);
            if (abs_d > amax_scale) {
                amax_scale = abs_d;
                max_scale = d;
            }
        }
        float d = -max_scale / 32;
        put_h(b, d);
        float id = d ? 1 / d : 0.f;
        for (int ib = 0; ib < nsub; ++ib) {
            int l = nearest_int(id * scales[ib]);
            l = MAX(-32, MIN(31, l));
            float dl = d * l;
            float idl = dl ? 1 / dl : 0.f;
            uint8_t *Lb = L + ib * block_size;
            const float *xb = x + ib * block_size;
            for (int j = 0; j < block_size; ++j)
                Lb[j] = (uint8_t)best_index_int8(16, values, idl * xb[j]);
            l += 32;
            uint8_t l_l = l & 0xf;
            uint8_t l_h = (uint8_t)(l >> 4);
            if (ib % 2 == 0)
                scales_l[ib / 2] = l_l;
            else
                scales_l[ib / 2] = (uint8_t)(scales_l[ib / 2] | (l_l << 4));
            scales_h = (uint16_t)(scales_h | (l_h << 2 * (ib % 8)));
        }
        memcpy(b + 2, &scales_h, 2);
        for (int k = 0; k < QK_K / 32; ++k)
            for (int j = 0; j < 16; ++j)
                q4[16 * k + j] = (uint8_t)(L[32 * k + j] | (L[32 * k + 16 + j] << 4));
    }
    return kern_kq_check_blocks(out, nblk, KQ_IQ4_BYTES, 0, -1, NULL);
}
