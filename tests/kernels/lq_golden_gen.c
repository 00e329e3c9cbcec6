/*
 * lq_golden_gen.c — ggml's outputs for the inputs of lq_golden.h, as the
 * golden hashes test_kern_lq_ggml.c holds cflow to.  Not built by make (it
 * links llama.cpp's ggml); run once against a llama.cpp build, its output
 * pasted into test_kern_lq_ggml.c:
 *
 *   L=/path/to/llama.cpp
 *   gcc -O2 -I$L/ggml/include -Itests/kernels tests/kernels/lq_golden_gen.c \
 *       -L$L/build/bin -lggml -lggml-base -lggml-cpu -lm \
 *       -Wl,-rpath,$L/build/bin -o /tmp/lq_golden_gen && /tmp/lq_golden_gen
 *
 * quant and dequant go through ggml's reference code (ggml_quantize_chunk,
 * the type's to_float); matvec through a one-token ggml_mul_mat on the CPU
 * backend, with the weights in its plain buffer or, for the repack cases,
 * in its CPU_REPACK buffer (the extra buffer llama.cpp puts weights in by
 * default, whose IQ4_NL and MXFP4 matrices of 8k rows take the repacked
 * gemv, and gemm for each 4 tokens of a batch); act through the CPU
 * backend's from_float of Q8_1 and BF16.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#include "lq_golden.h"

static ggml_backend_buffer_type_t repack_buft(void)
{
    ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
    ggml_backend_dev_get_extra_bufts_t get = (ggml_backend_dev_get_extra_bufts_t)
        ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
    for (ggml_backend_buffer_type_t *p = get ? get(dev) : NULL; p && *p; p++)
        if (!strcmp(ggml_backend_buft_name(*p), "CPU_REPACK"))
            return *p;
    fprintf(stderr, "no CPU_REPACK buffer type\n");
    exit(1);
}

/* y[m][R] = W x[m] for m tokens */
static void mul_mat(ggml_backend_t be, const lg_case *c, unsigned m,
                    const void *w, const float *x, float *y)
{
    struct ggml_init_params ip = { ggml_tensor_overhead() * 4, NULL, true };
    struct ggml_context *cw = ggml_init(ip);
    struct ggml_tensor *W = ggml_new_tensor_2d(cw, (enum ggml_type)c->type, c->C, c->R);
    ggml_backend_buffer_t bw = ggml_backend_alloc_ctx_tensors_from_buft(
        cw, c->repack ? repack_buft() : ggml_backend_cpu_buffer_type());
    ggml_backend_tensor_set(W, w, 0, ggml_nbytes(W));

    struct ggml_init_params ic = { ggml_tensor_overhead() * 8 + ggml_graph_overhead(),
                                   NULL, true };
    struct ggml_context *cc = ggml_init(ic);
    struct ggml_tensor *X = ggml_new_tensor_2d(cc, GGML_TYPE_F32, c->C, m);
    struct ggml_tensor *Y = ggml_mul_mat(cc, W, X);
    struct ggml_cgraph *gf = ggml_new_graph(cc);
    ggml_build_forward_expand(gf, Y);
    ggml_backend_buffer_t bc = ggml_backend_alloc_ctx_tensors(cc, be);
    ggml_backend_tensor_set(X, x, 0, ggml_nbytes(X));
    if (ggml_backend_graph_compute(be, gf) != GGML_STATUS_SUCCESS) {
        fprintf(stderr, "compute failed\n");
        exit(1);
    }
    ggml_backend_tensor_get(Y, y, 0, ggml_nbytes(Y));
    ggml_backend_buffer_free(bc);
    ggml_free(cc);
    ggml_backend_buffer_free(bw);
    ggml_free(cw);
}

int main(void)
{
    ggml_cpu_init();
    ggml_backend_t be = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(be, 1);

    static float x[LG_QROWS * LG_QCOLS], y[LG_DBLOCKS * 32];
    static uint8_t out[LG_QROWS * LG_QCOLS * 2];

    printf("/* quant */\n");
    for (int k = 0; k < LG_NTYPES; k++) {
        const int t = lg_types[k];
        lg_state = 11 + (uint64_t)t;
        for (unsigned r = 0; r < LG_QROWS; r++)
            lg_quant_row(x + r * LG_QCOLS, LG_QCOLS, r);
        size_t n = ggml_quantize_chunk((enum ggml_type)t, x, out, 0, LG_QROWS,
                                       LG_QCOLS, NULL);
        printf("0x%016llxull, /* %s */\n",
               (unsigned long long)lg_fnv(LG_FNV0, out, n), ggml_type_name(t));
    }

    printf("/* dequant */\n");
    for (int k = 0; k < LG_NTYPES; k++) {
        const int t = lg_types[k];
        const unsigned n = t == LG_BF16 ? LG_DBLOCKS * 32 : LG_DBLOCKS;
        lg_state = 101 + (uint64_t)t;
        lg_dequant_blocks(t, out, n);
        ggml_get_type_traits((enum ggml_type)t)->to_float(out, y, LG_DBLOCKS * 32);
        printf("0x%016llxull, /* %s */\n",
               (unsigned long long)lg_fnv(LG_FNV0, y, sizeof y), ggml_type_name(t));
    }

    printf("/* matvec */\n");
    for (unsigned i = 0; i < LG_NCASES; i++) {
        const lg_case *c = &lg_cases[i];
        const unsigned n = c->R * (c->C / lg_block_cols(c->type));
        uint8_t *w = malloc((size_t)n * lg_block_bytes(c->type));
        float xv[256], yv[128];
        lg_state = 1001 + i;
        lg_matvec_blocks(c->type, w, n);
        lg_vector(xv, c->C);
        mul_mat(be, c, 1, w, xv, yv);
        printf("0x%016llxull, /* %s %ux%u%s */\n",
               (unsigned long long)lg_fnv(LG_FNV0, yv, c->R * sizeof(float)),
               ggml_type_name(c->type), c->R, c->C, c->repack ? " repacked" : "");
        free(w);
    }

    printf("/* batch */\n");
    for (unsigned i = 0; i < LG_NBATCHES; i++) {
        const lg_batch *bt = &lg_batches[i];
        const lg_case c = { bt->type, bt->R, bt->C, 1 };
        const unsigned n = c.R * (c.C / 32);
        uint8_t *w = malloc((size_t)n * lg_block_bytes(c.type));
        float *xv = malloc(sizeof(float) * c.C * bt->m), *yv = malloc(sizeof(float) * c.R * bt->m);
        lg_state = 2001 + i;
        lg_matvec_blocks(c.type, w, n);
        lg_vector(xv, c.C * bt->m);
        mul_mat(be, &c, bt->m, w, xv, yv);
        printf("0x%016llxull, /* %s %ux%u, %u tokens, repacked */\n",
               (unsigned long long)lg_fnv(LG_FNV0, yv, sizeof(float) * c.R * bt->m),
               ggml_type_name(c.type), c.R, c.C, bt->m);
        free(w);
        free(xv);
        free(yv);
    }

    printf("/* act */\n");
    lg_state = 7;
    float xa[LG_ACOLS];
    for (unsigned i = 0; i < LG_ACOLS; i++)
        xa[i] = lg_unit() * lg_mags[(i / 32 + 2) % 12];
    ggml_get_type_traits_cpu(GGML_TYPE_Q8_1)->from_float(xa, out, LG_ACOLS);
    printf("0x%016llxull, /* q8_1 */\n",
           (unsigned long long)lg_fnv(LG_FNV0, out, LG_ACOLS / 32 * 36));
    ggml_get_type_traits_cpu(GGML_TYPE_BF16)->from_float(xa, out, LG_ACOLS);
    printf("0x%016llxull, /* bf16 */\n",
           (unsigned long long)lg_fnv(LG_FNV0, out, LG_ACOLS * 2));

    ggml_backend_free(be);
    return 0;
}
