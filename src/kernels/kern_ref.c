/*
 * kern_ref.c — the scalar reference mat-vec: plain loops in the spirit of
 * llama2.c's matmul(), present on every machine and the oracle the SIMD
 * kernels are tested against.
 *
 * For each output row r of a tile: a float starts at 0, takes the tile's
 * columns (F32, F16) or 32-column blocks (Q8_0, Q4_0) in order, and is
 * added to y[r] at the end.  A matrix that fits one column tile therefore
 * gets exactly run.c's sequential sum  val += w[i][j] * x[j].
 *
 *   F32   sum += w * x.f32
 *   F16   sum += f32(w) * f32(x.f16)   (the product of two halves is exact)
 *   Q8_0  per block: isum = sum_k q_w * x.q8          (int32)
 *         sum += d_w * x.q8_d * (float)isum
 *   Q4_0  the same with q_w = nibble - 8
 *
 * Q8_0/Q4_0 tiles need col0 to be a multiple of 32 (see kern_impl.h).
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include "kernels/kern.h"
#include "kernels/kern_impl.h"

static void mv_f32(const void *payload, unsigned rows, unsigned cols,
                   const kern_act *x, unsigned col0, float *y)
{
    kern_geom g = kern_geom_of(rows, cols);
    const uint8_t *w = payload;
    const float *xv = x->f32 + col0;
    for (unsigned r = 0; r < rows; r++) {
        float sum = 0.0f;
        for (unsigned c = 0; c < cols; c++)
            sum += kern_ld_f32(w + 4 * kern_idx_dense(&g, r, c)) * xv[c];
        y[r] += sum;
    }
}

static void mv_f16(const void *payload, unsigned rows, unsigned cols,
                   const kern_act *x, unsigned col0, float *y)
{
    kern_geom g = kern_geom_of(rows, cols);
    const uint8_t *w = payload;
    const uint16_t *xv = x->f16 + col0;
    if (getenv("X_F16")) {
        for (unsigned r = 0; r < rows; r++) {
            unsigned np = cols & ~63u;
            float acc[4][16] = {{0}};
            for (unsigned i = 0; i < np; i += 64)
                for (unsigned j = 0; j < 4; j++)
                    for (unsigned l = 0; l < 16; l++) {
                        unsigned c = i + 16 * j + l;
                        acc[j][l] = fmaf(kern_h2f(kern_ld_u16(w + 2 * kern_idx_dense(&g, r, c))), kern_h2f(xv[c]), acc[j][l]);
                    }
            float a0[16], t3[8], t6[4];
            for (unsigned l = 0; l < 16; l++) a0[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
            for (unsigned l = 0; l < 8; l++) t3[l] = a0[l + 8] + a0[l];
            for (unsigned l = 0; l < 4; l++) t6[l] = t3[l + 4] + t3[l];
            double sumf = (double)((t6[0] + t6[2]) + (t6[1] + t6[3]));
            for (unsigned c = np; c < cols; c++)
                sumf += (double)(kern_h2f(kern_ld_u16(w + 2 * kern_idx_dense(&g, r, c))) * kern_h2f(xv[c]));
            y[r] += (float)sumf;
        }
        return;
    }
    for (unsigned r = 0; r < rows; r++) {
        float sum = 0.0f;
        for (unsigned c = 0; c < cols; c++)
            sum += kern_h2f(kern_ld_u16(w + 2 * kern_idx_dense(&g, r, c))) *
                   kern_h2f(xv[c]);
        y[r] += sum;
    }
}

static void mv_q8_0(const void *payload, unsigned rows, unsigned cols,
                    const kern_act *x, unsigned col0, float *y)
{
    int mode8 = getenv("X_MV8") ? atoi(getenv("X_MV8")) : 0;
    kern_geom g = kern_geom_of(rows, cols);
    const uint8_t *w = payload;
    const unsigned xb0 = col0 / KERN_QBLOCK;
    for (unsigned r = 0; r < rows; r++) {
        float sum = 0.0f;
        int32_t lane[8] = {0}; float acc[8] = {0};
        for (unsigned b = 0; b < g.nb; b++) {
            const int8_t *xq = x->q8 + col0 + KERN_QBLOCK * b;
            int32_t isum = 0;
            for (unsigned k = 0; k < KERN_QBLOCK; k++) {
                int qw = (int)w[kern_off_q8(&g, r, KERN_QBLOCK * b + k)] - 128;
                isum += qw * xq[k];
                lane[k / 4] += qw * xq[k];
            }
            float dw = kern_h2f(kern_ld_u16(w + 2 * kern_idx_scale(&g, r, b)));
            if (mode8 == 2) { float d = dw * x->q8_d[xb0 + b]; for (int j = 0; j < 8; j++) { acc[j] = fmaf(d, (float)lane[j], acc[j]); lane[j] = 0; } }
            else sum += dw * x->q8_d[xb0 + b] * (float)isum;
        }
        if (mode8 == 2) sum = ((acc[0]+acc[4]) + (acc[2]+acc[6])) + ((acc[1]+acc[5]) + (acc[3]+acc[7]));
        y[r] += sum;
    }
}

static void mv_q4_0(const void *payload, unsigned rows, unsigned cols,
                    const kern_act *x, unsigned col0, float *y)
{
    int mode = getenv("X_MV4") ? atoi(getenv("X_MV4")) : 0;
    /* repacked in llama.cpp when the matrix has rows % 8 == 0: here approximated by tile rows */
    if (mode == 3) mode = (rows <= 64 && rows % 8 == 0) ? 1 : 2;
    kern_geom g = kern_geom_of(rows, cols);
    const uint8_t *w = payload;
    const unsigned xb0 = col0 / KERN_QBLOCK;
    for (unsigned r = 0; r < rows; r++) {
        float sum = 0.0f;
        int32_t lane[8] = {0}; float acc[8] = {0};
        for (unsigned b = 0; b < g.nb; b++) {
            const int8_t *xq = x->q8 + col0 + KERN_QBLOCK * b;
            int32_t isum = 0;
            for (unsigned k = 0; k < KERN_QBLOCK; k++) {
                int hi;
                uint8_t byte = w[kern_off_q4(&g, r, KERN_QBLOCK * b + k, &hi)];
                int qw = (hi ? byte >> 4 : byte & 0x0F) - 8;
                isum += qw * xq[k];
                lane[k / 4] += qw * xq[k];
            }
            float dw = kern_h2f(kern_ld_u16(w + 2 * kern_idx_scale(&g, r, b)));
            if (mode == 1) sum = fmaf((float)isum, dw * x->q8_d[xb0 + b], sum);
            else if (mode == 2) { float d = dw * x->q8_d[xb0 + b]; for (int j = 0; j < 8; j++) { acc[j] = fmaf(d, (float)lane[j], acc[j]); lane[j] = 0; } }
            else sum += dw * x->q8_d[xb0 + b] * (float)isum;
        }
        if (mode == 2) sum = ((acc[0]+acc[4]) + (acc[2]+acc[6])) + ((acc[1]+acc[5]) + (acc[3]+acc[7]));
        y[r] += sum;
    }
}

static float dot_f32(const float *a, const float *b, unsigned n)
{
    float sum = 0.0f;
    for (unsigned i = 0; i < n; i++)
        sum += a[i] * b[i];
    return sum;
}

static void axpy_f32(float *y, float a, const float *x, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        y[i] += a * x[i];
}

const kern_ops kern_ops_scalar = {
    .isa = KERN_ISA_SCALAR,
    .name = "scalar",
    .tile_mv = {
        [KERN_F32] = mv_f32, [KERN_F16] = mv_f16,
        [KERN_Q8_0] = mv_q8_0, [KERN_Q4_0] = mv_q4_0,
    },
    .dot_f32 = dot_f32,
    .axpy_f32 = axpy_f32,
};
