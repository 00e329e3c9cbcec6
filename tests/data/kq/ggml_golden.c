/*
 * ggml_golden.c — prints the golden hashes of tests/kernels/test_kern_kq.c
 * from ggml itself (README.md in this folder says how it was built and
 * run).  Not part of the build: it links llama.cpp's libraries.
 *
 * For each K-quant type and IQ4_XS, on the inputs of
 * tests/kernels/kq_gold.h:
 *   deq  ggml's to_float (dequantize_row_*) of random blocks;
 *   qnt  ggml_quantize_chunk without an imatrix (what llama-quantize runs:
 *        quantize_row_*_ref) of rows of 8 shapes;
 *   mv   ggml_mul_mat of a 24 x 256 matrix of random blocks with 3 f32
 *        vectors on the CPU backend, one thread, the weights in the plain
 *        CPU buffer (ggml_vec_dot_*_q8_K);
 *   rp   the same with the weights in the CPU_REPACK buffer, for the types
 *        llama.cpp repacks on this CPU (Q4_K and Q2_K: its repacked gemv);
 * and once the Q8_K quantiser the CPU backend runs (from_float of
 * GGML_TYPE_Q8_K: quantize_row_q8_K, on x86 quantize_row_q8_K_ref).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#include "../../kernels/kq_gold.h"

static ggml_backend_buffer_type_t repack_buft(void)
{
    ggml_backend_reg_t reg = ggml_backend_cpu_reg();
    ggml_backend_dev_t dev = ggml_backend_reg_dev_get(reg, 0);
    typedef ggml_backend_buffer_type_t *(*get_fn)(ggml_backend_dev_t);
    get_fn f = (get_fn)ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
    for (ggml_backend_buffer_type_t *b = f ? f(dev) : NULL; b && *b; b++)
        if (strcmp(ggml_backend_buft_name(*b), "CPU_REPACK") == 0)
            return *b;
    fprintf(stderr, "no CPU_REPACK buffer type\n");
    exit(1);
}

/* y [nv][rows] = W [rows][256] . x [nv][256] through ggml's graph */
static void mul_mat(ggml_backend_t be, enum ggml_type t, int repack,
                    const void *w, unsigned rows, const float *x, unsigned nv,
                    float *y)
{
    struct ggml_init_params ip = { 8 * ggml_tensor_overhead() + ggml_graph_overhead(),
                                   NULL, true };
    struct ggml_context *cw = ggml_init(ip), *cg = ggml_init(ip);
    struct ggml_tensor *W = ggml_new_tensor_2d(cw, t, 256, rows);
    ggml_backend_buffer_t bw = ggml_backend_alloc_ctx_tensors_from_buft(
        cw, repack ? repack_buft() : ggml_backend_cpu_buffer_type());
    ggml_backend_tensor_set(W, w, 0, ggml_nbytes(W));
    for (unsigned v = 0; v < nv; v++) {   /* one vector a graph: the gemv */
        struct ggml_tensor *X = ggml_new_tensor_1d(cg, GGML_TYPE_F32, 256);
        struct ggml_tensor *Y = ggml_mul_mat(cg, W, X);
        struct ggml_cgraph *gf = ggml_new_graph(cg);
        ggml_build_forward_expand(gf, Y);
        ggml_gallocr_t ga = ggml_gallocr_new(ggml_backend_cpu_buffer_type());
        ggml_gallocr_alloc_graph(ga, gf);
        ggml_backend_tensor_set(X, x + 256 * v, 0, 256 * sizeof(float));
        ggml_backend_graph_compute(be, gf);
        ggml_backend_tensor_get(Y, y + rows * v, 0, rows * sizeof(float));
        ggml_gallocr_free(ga);
        ggml_free(cg);
        cg = ggml_init(ip);
    }
    ggml_backend_buffer_free(bw);
    ggml_free(cw);
    ggml_free(cg);
}

int main(void)
{
    ggml_backend_t be = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(be, 1);
    static uint8_t blocks[KQ_GOLD_DEQ_BLOCKS * 256];
    static float f[KQ_GOLD_DEQ_BLOCKS * 256], y[KQ_GOLD_MV_VECS * KQ_GOLD_MV_ROWS];

    for (unsigned ti = 0; ti < KQ_GOLD_NTYPES; ti++) {
        const kq_gold_type *T = &kq_gold_types[ti];
        const struct ggml_type_traits *tr = ggml_get_type_traits((enum ggml_type)T->ggml);

        kq_gold_seed(16 * ti + 1);
        kq_gold_blocks(T, blocks, KQ_GOLD_DEQ_BLOCKS);
        tr->to_float(blocks, f, KQ_GOLD_DEQ_BLOCKS * 256);
        uint64_t hd = kq_gold_fnv(KQ_GOLD_FNV0, f, sizeof f);

        kq_gold_seed(16 * ti + 2);
        for (unsigned r = 0; r < KQ_GOLD_QROWS; r++)
            kq_gold_row(r, f + 256 * r);
        ggml_quantize_chunk((enum ggml_type)T->ggml, f, blocks, 0, KQ_GOLD_QROWS, 256, NULL);
        uint64_t hq = kq_gold_fnv(KQ_GOLD_FNV0, blocks, KQ_GOLD_QROWS * T->bytes);

        kq_gold_seed(16 * ti + 3);
        kq_gold_blocks(T, blocks, KQ_GOLD_MV_ROWS);
        kq_gold_vec(f, 256 * KQ_GOLD_MV_VECS, -1);
        mul_mat(be, (enum ggml_type)T->ggml, 0, blocks, KQ_GOLD_MV_ROWS, f, KQ_GOLD_MV_VECS, y);
        uint64_t hm = kq_gold_fnv(KQ_GOLD_FNV0, y, sizeof y), hr = 0;
        if (T->ggml == GGML_TYPE_Q4_K || T->ggml == GGML_TYPE_Q2_K) {
            mul_mat(be, (enum ggml_type)T->ggml, 1, blocks, KQ_GOLD_MV_ROWS, f, KQ_GOLD_MV_VECS, y);
            hr = kq_gold_fnv(KQ_GOLD_FNV0, y, sizeof y);
        }

        printf("    { \"%s\", 0x%016llxull, 0x%016llxull, 0x%016llxull, 0x%016llxull },\n",
               T->name, (unsigned long long)hd, (unsigned long long)hq,
               (unsigned long long)hm, (unsigned long long)hr);
    }

    /* Q8_K: blocks of 8 shapes, one all zero */
    kq_gold_seed(1000);
    for (unsigned r = 0; r < KQ_GOLD_Q8K_BLOCKS; r++)
        kq_gold_row(r, f + 256 * r);
    static uint8_t q8k[KQ_GOLD_Q8K_BLOCKS * 292];
    ggml_get_type_traits_cpu(GGML_TYPE_Q8_K)->from_float(f, q8k, KQ_GOLD_Q8K_BLOCKS * 256);
    uint64_t h = KQ_GOLD_FNV0;
    for (unsigned b = 0; b < KQ_GOLD_Q8K_BLOCKS; b++) {
        float d;
        memcpy(&d, q8k + 292 * b, 4);
        h = kq_gold_q8k(h, d, (const int8_t *)(q8k + 292 * b + 4),
                        (const int16_t *)(q8k + 292 * b + 260));
    }
    printf("    q8_K 0x%016llxull\n", (unsigned long long)h);
    ggml_backend_free(be);
    return 0;
}
