/*
 * kern_test.h — what the kernel tests share.  test_kern.c (names, halves,
 * the tile layout, packing, activations, dispatch), test_kern_mv.c (the
 * tile mat-vec against the reference and llama.cpp's sums),
 * test_kern_vec.c (the vector kernels, ggml's golden hashes) and
 * kern_test.c (the helpers below) build one program, test_kern, whose
 * table is in test_kern.c.  One random stream runs through all of them in
 * that table's order, so every test draws the numbers it drew when they
 * were one file.
 */
#ifndef CFLOW_KERN_TEST_H
#define CFLOW_KERN_TEST_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/kern.h"
#include "kernels/kern_impl.h"   /* kern_isa_choose() */

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HAVE_X86 1
#else
#define HAVE_X86 0
#endif

/* The tile types of kern.h's first layouts (F32, F16, Q8_0, Q4_0), which
 * the tests of these files loop over; the GGML block types past them have
 * tests of their own. */
#define KT_NLEGACY (KERN_Q4_0 + 1)
#define KT_NEED_LEGACY ((1u << KT_NLEGACY) - 1)

/* xorshift64*: the tests' one random stream */
uint64_t kt_rng_u64(void);
unsigned kt_rng_below(unsigned n);   /* uniform in [0, n) */
float    kt_rng_unit(void);          /* uniform in [-1, 1) */
float    kt_rng_mag(void);           /* a magnitude 10^[-3, 2) */
uint32_t kt_fbits(float f);          /* f's bits */
float    kt_bitsf(uint32_t u);       /* the float of bits u */
int      kt_have_f16c(void);
#if HAVE_X86
/* The F16C instructions themselves (kt_have_f16c() first). */
uint16_t kt_hw_f2h(float f);
float    kt_hw_h2f(uint16_t h);
#endif
/* Half conversions for the oracles: the F16C instructions when present,
 * the module's own otherwise (test_kern.c tests those against both). */
uint16_t kt_ref_f2h(float f);
float    kt_ref_h2f(uint16_t h);

/* A tile's geometry as kern.h states it, for r x c: rows padded to 16,
 * columns to 32, nb blocks of 32 a row, sbytes of f16 scales. */
typedef struct {
    unsigned rp, cp, nb;
    size_t sbytes;
} kt_geo;
kt_geo kt_geo_of(unsigned r, unsigned c);

/* w [R][C] with a random magnitude per row, changing (or zero) at some
 * 32-column blocks. */
void kt_fill_matrix(float *w, unsigned R, unsigned C);
/* llama.cpp's quantize_row_q8_0 (x86 build), scalar: x [k] to qs [k] and
 * the f16 scales dh [k / 32]. */
void kt_llama_q8_0(const float *x, int k, int8_t *qs, uint16_t *dh);
/* The tile kernel of a table: by type, or (rp) the repacked Q4_0 one. */
kern_tile_mv_fn kt_tile_fn(const kern_ops *ops, enum kern_type t, int rp);

/* test_kern_mv.c */
void test_tile_mv(void **state);
void test_tile_mv_sequential(void **state);
void test_tile_mv_llama(void **state);
void test_dot_axpy(void **state);

/* test_kern_vec.c */
void test_rmsnorm(void **state);
void test_softmax(void **state);
void test_rope(void **state);
void test_attn(void **state);
void test_attn_runc(void **state);
void test_glu(void **state);
void test_ggml_vec_golden(void **state);
void test_ggml_family_golden(void **state);
void test_ggml_attn_golden(void **state);
void test_ggml_attn_tiled_golden(void **state);
void test_ggml_matvec_golden(void **state);

#endif
