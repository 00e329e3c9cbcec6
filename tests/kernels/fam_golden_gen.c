/*
 * fam_golden_gen.c — ggml's outputs for the inputs of fam_golden.h, as the
 * golden hashes test_kern_vec.c's test_ggml_family_golden holds cflow's
 * family kernels to.  Not built by make (it links llama.cpp's ggml); run
 * once against a llama.cpp build, its output pasted into test_kern_vec.c:
 *
 *   L=/path/to/llama.cpp
 *   gcc -O2 -I$L/ggml/include -Itests/kernels tests/kernels/fam_golden_gen.c \
 *       -L$L/build/bin -lggml -lggml-base -lggml-cpu -lm \
 *       -Wl,-rpath,$L/build/bin -o /tmp/fam_golden_gen && /tmp/fam_golden_gen
 *
 * Each op runs as a one-node graph on the CPU backend with one thread:
 * ggml_geglu_split(gate, up), ggml_swiglu_oai(gate, up, 1.702, 7) and
 * ggml_rope_ext(x, pos, divisors, ...) as llama.cpp's graphs call them.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#include "fam_golden.h"

static ggml_backend_t be;

/* y = op(a, b) of n floats; op 0 geglu, 1 swiglu_oai */
static void glu(int op, const float *a, const float *b, unsigned n, float *y)
{
    struct ggml_init_params ic = { ggml_tensor_overhead() * 8 + ggml_graph_overhead(), NULL,
                                   true };
    struct ggml_context *cc = ggml_init(ic);
    struct ggml_tensor *A = ggml_new_tensor_1d(cc, GGML_TYPE_F32, n);
    struct ggml_tensor *B = ggml_new_tensor_1d(cc, GGML_TYPE_F32, n);
    struct ggml_tensor *Y = op == 0 ? ggml_geglu_split(cc, A, B)
                                    : ggml_swiglu_oai(cc, A, B, 1.702f, 7.0f);
    struct ggml_cgraph *gf = ggml_new_graph(cc);
    ggml_build_forward_expand(gf, Y);
    ggml_backend_buffer_t bc = ggml_backend_alloc_ctx_tensors(cc, be);
    ggml_backend_tensor_set(A, a, 0, n * 4);
    ggml_backend_tensor_set(B, b, 0, n * 4);
    if (ggml_backend_graph_compute(be, gf) != GGML_STATUS_SUCCESS)
        exit(1);
    ggml_backend_tensor_get(Y, y, 0, n * 4);
    ggml_backend_buffer_free(bc);
    ggml_free(cc);
}

static void rope(const fg_rope *c, const float *x, const float *ff, float *y)
{
    struct ggml_init_params ic = { ggml_tensor_overhead() * 8 + ggml_graph_overhead(), NULL,
                                   true };
    struct ggml_context *cc = ggml_init(ic);
    struct ggml_tensor *X = ggml_new_tensor_3d(cc, GGML_TYPE_F32, c->hd, 4, 1);
    struct ggml_tensor *P = ggml_new_tensor_1d(cc, GGML_TYPE_I32, 1);
    struct ggml_tensor *F = c->ff ? ggml_new_tensor_1d(cc, GGML_TYPE_F32, c->hd / 2) : NULL;
    struct ggml_tensor *Y = ggml_rope_ext(cc, X, P, F, (int)c->rot,
                                          c->neox ? GGML_ROPE_TYPE_NEOX : 0, (int)c->orig,
                                          c->base, c->freq_scale, c->ext_factor,
                                          c->attn_factor, c->beta_fast, c->beta_slow);
    struct ggml_cgraph *gf = ggml_new_graph(cc);
    ggml_build_forward_expand(gf, Y);
    ggml_backend_buffer_t bc = ggml_backend_alloc_ctx_tensors(cc, be);
    int32_t pos = (int32_t)c->pos;
    float ffp[128];
    memset(ffp, 0, sizeof ffp);
    if (F) {   /* (ggml reads hd / 2 of them; the rotated ones are ff) */
        memcpy(ffp, ff, c->rot / 2 * 4);
        for (unsigned i = c->rot / 2; i < c->hd / 2; i++)
            ffp[i] = 1.0f;
        ggml_backend_tensor_set(F, ffp, 0, c->hd / 2 * 4);
    }
    ggml_backend_tensor_set(X, x, 0, 4 * c->hd * 4);
    ggml_backend_tensor_set(P, &pos, 0, 4);
    if (ggml_backend_graph_compute(be, gf) != GGML_STATUS_SUCCESS)
        exit(1);
    ggml_backend_tensor_get(Y, y, 0, 4 * c->hd * 4);
    ggml_backend_buffer_free(bc);
    ggml_free(cc);
}

int main(void)
{
    float a[1000], b[1000], y[1000];
    ggml_cpu_init();
    be = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(be, 1);
    for (int op = 0; op < 2; op++) {
        uint64_t h = FG_FNV0;
        fg_state = 11 + (uint64_t)op;
        for (int k = 0; k < 2; k++) {
            unsigned n = fg_glu_n[k];
            for (unsigned i = 0; i < n; i++)
                a[i] = 12 * fg_unit();
            for (unsigned i = 0; i < n; i++)
                b[i] = 9 * fg_unit();
            glu(op, a, b, n, y);
            h = fg_fnv(h, y, n * 4);
        }
        printf("%s 0x%016llxull\n", op ? "swiglu_oai" : "geglu", (unsigned long long)h);
    }
    uint64_t h = FG_FNV0;
    fg_state = 13;
    for (size_t k = 0; k < FG_NROPE; k++) {
        float x[512], ff[64];
        fg_rope_inputs(&fg_ropes[k], x, ff);
        rope(&fg_ropes[k], x, ff, y);
        h = fg_fnv(h, y, 4 * fg_ropes[k].hd * 4);
    }
    printf("rope_ext 0x%016llxull\n", (unsigned long long)h);
    ggml_backend_free(be);
    return 0;
}
