/*
 * kern.h — the public face of src/kernels: tile payloads, tile mat-vec,
 * and the small vector kernels a decoder needs (norms, RoPE, attention, GLU).
 *
 * The kernels know nothing of files.  They see a tile *payload*: the bytes
 * that follow a 16-byte TileHeader in a .cflow stream.  The format module
 * calls kern_tile_pack() to build payloads and hands the kernels pointers
 * into the mapped file at run time.
 *
 * ------------------------------------------------------------------------
 * Tile payload layout (shared by every tile type; documented in cflow(5))
 * ------------------------------------------------------------------------
 * A tile covers R <= 128 output rows and C <= 256 input columns of a weight
 * matrix W[out][in] (y = W x).  Storage pads rows up to Rp = roundup(R, 16)
 * and columns up to Cp = roundup(C, 32); padding weights are exactly zero
 * (Q4_0 nibble 8, Q8_0 byte 128, scale 0, F16/F32 0.0).
 *
 * Rows are grouped in *panels* of 16.  Inside a panel data is column-major
 * with the 16 rows adjacent, so that one SIMD instruction serves 16 output
 * rows and no horizontal reduction runs per row ("[n/16][k][16 rows]").
 *
 *   F32:  for panel p, column c:  16 x f32  w[16p+i][c], i = 0..15
 *         size = Rp*Cp*4
 *   F16:  same order, IEEE binary16.            size = Rp*Cp*2
 *   Q8_0: scales: for panel p, block b (32 columns): 16 x f16 d[16p+i][b]
 *         then quants: for panel p, block b, quad g = 0..7: 64 bytes,
 *         byte[4i+j] = (uint8)(q[16p+i][32b+4g+j] + 128)   (offset binary)
 *         size = Rp*(Cp/32)*2 + Rp*Cp
 *   Q4_0: scales as Q8_0; then quants: for panel p, block b, chunk g=0..3:
 *         64 bytes, byte[4i+j] = GGML byte (4g+j) of row 16p+i's block b:
 *         low nibble  = q[16p+i][32b + 4g + j]
 *         high nibble = q[16p+i][32b + 16 + 4g + j]
 *         w = d * (q - 8).   size = Rp*(Cp/32)*2 + Rp*Cp/2
 *   (A full 128x256 Q4_0 tile is 2048 + 16384 bytes, the report's 18,432 +
 *   the 16-byte header = 18,448.)
 *
 * Every byte of a GGML Q4_0 / Q8_0 block appears unchanged (Q8_0 up to the
 * +128 offset) in the payload, so converting an already-quantised GGUF is a
 * bit-exact rearrangement, never a requantisation.
 *
 * ------------------------------------------------------------------------
 * Activations
 * ------------------------------------------------------------------------
 * A mat-vec input is prepared once (kern_act_set) and shared by every tile
 * of every matrix that reads it (fused Q/K/V, gate/up).  F32 tiles read the
 * f32 copy; F16 tiles read x rounded to f16 (as llama.cpp does); Q4_0/Q8_0
 * tiles read x quantised to Q8_0 blocks as llama.cpp's x86 quantize_row_q8_0
 * does: d = amax/127 stored through f16, q = x * (127/amax) rounded half to
 * even, and the per-block sum of q for the offset correction
 * (sum (q_w - 8) q_x = sum q_w q_x - 8 sum q_x).
 *
 * "The report" (with its section numbers) is the Pipeline-Native
 * Transformers report.
 */
#ifndef CFLOW_KERN_H
#define CFLOW_KERN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define KERN_TILE_ROWS 128
#define KERN_TILE_COLS 256
#define KERN_PANEL     16   /* rows per panel inside a tile */
#define KERN_QBLOCK    32   /* quantisation block (columns) */
#define KERN_QK_K      256  /* super-block of the K-quants, IQ4_XS and Q8_K */

/* Tile types, as stored in cflow(5).  Values are part of the file format.
 * The first four have the layouts above.  The others are the GGML block
 * types of real downloads, kept bit for bit: each payload is a permutation
 * of the GGML blocks of the tile's rows (kern_type_block gives a block's
 * columns and bytes; the order inside the payload is the type's own, set
 * out in the file that holds its kernels and in cflow(5)).  Legacy block
 * types (32 columns: kern_lq*.c) read Q8_0 or Q8_1 activations, the
 * K-quants and IQ4_XS (256 columns: kern_kq*.c) Q8_K, BF16 bfloat16. */
enum kern_type {
    KERN_F32    = 0,
    KERN_F16    = 1,
    KERN_Q8_0   = 2,
    KERN_Q4_0   = 3,
    KERN_BF16   = 4,
    KERN_Q4_1   = 5,
    KERN_Q5_0   = 6,
    KERN_Q5_1   = 7,
    KERN_IQ4_NL = 8,
    KERN_MXFP4  = 9,
    KERN_Q2_K   = 10,
    KERN_Q3_K   = 11,
    KERN_Q4_K   = 12,
    KERN_Q5_K   = 13,
    KERN_Q6_K   = 14,
    KERN_IQ4_XS = 15,
    KERN_NTYPES
};

/* Encodings a tile can be packed from (a row of the source matrix).  The
 * GGML block sources follow ggml-common.h's block structs; a row of one
 * is cols / kern_type_block's columns blocks. */
enum kern_src {
    KERN_SRC_F32,       /* float */
    KERN_SRC_F16,       /* IEEE half */
    KERN_SRC_BF16,      /* bfloat16 */
    KERN_SRC_GGML_Q8_0, /* GGML block_q8_0: f16 d, int8 q[32] (34 bytes) */
    KERN_SRC_GGML_Q4_0, /* GGML block_q4_0: f16 d, uint8 qs[16] (18 bytes) */
    KERN_SRC_GGML_Q4_1, /* block_q4_1   (20 bytes / 32)  */
    KERN_SRC_GGML_Q5_0, /* block_q5_0   (22 bytes / 32)  */
    KERN_SRC_GGML_Q5_1, /* block_q5_1   (24 bytes / 32)  */
    KERN_SRC_GGML_IQ4_NL, /* block_iq4_nl (18 bytes / 32) */
    KERN_SRC_GGML_MXFP4,  /* block_mxfp4  (17 bytes / 32) */
    KERN_SRC_GGML_Q2_K, /* block_q2_K   (84 bytes / 256) */
    KERN_SRC_GGML_Q3_K, /* block_q3_K   (110 bytes / 256) */
    KERN_SRC_GGML_Q4_K, /* block_q4_K   (144 bytes / 256) */
    KERN_SRC_GGML_Q5_K, /* block_q5_K   (176 bytes / 256) */
    KERN_SRC_GGML_Q6_K, /* block_q6_K   (210 bytes / 256) */
    KERN_SRC_GGML_IQ4_XS, /* block_iq4_xs (136 bytes / 256) */
    KERN_NSRC
};

/* The GGML block source whose blocks a type keeps bit for bit
 * (KERN_SRC_F32 for F32, F16 for F16, BF16 for BF16). */
enum kern_src kern_type_src(enum kern_type t);
/* Columns and bytes of one block of source encoding src (1 and the
 * element's bytes for F32/F16/BF16); 0 for an unknown src. */
unsigned kern_src_block(enum kern_src src, unsigned *bytes);
/* Columns of a tile type's block (1 for F32, F16, BF16; 32; 256): a tile's
 * columns are a multiple of it except the last tile of a row of the
 * legacy types, padded up to it; 0 for an unknown type. */
unsigned kern_type_block(enum kern_type t);

enum kern_isa {
    KERN_ISA_SCALAR = 0,
    KERN_ISA_AVX2,        /* AVX2 + FMA + F16C */
    KERN_ISA_AVX512,      /* AVX-512 F/BW/VL (+ F16C) */
    KERN_ISA_AVX512_VNNI, /* the above + AVX512_VNNI */
    KERN_NISA
};

const char *kern_type_name(enum kern_type t);          /* "f32", "q4_0", ... */
int         kern_type_from_name(const char *s);         /* -1 if unknown */
const char *kern_isa_name(enum kern_isa isa);          /* "scalar", "avx2", "avx512", "avx512-vnni" */
int         kern_isa_from_name(const char *s);          /* kern_isa_name's inverse; -1 if unknown or NULL */

/* Bytes of a payload for an R x C tile (R <= 128, C <= 256). */
size_t kern_tile_payload_size(enum kern_type t, unsigned rows, unsigned cols);

/*
 * Build a payload from rows of a source matrix.  src points at element
 * (row0, col0) of the source in its own encoding; row_stride is the byte
 * distance between source rows.  For the GGML block sources col0 must be a
 * multiple of 32 and src must point at the block that starts there; when
 * dst is the same quantisation the blocks are copied bit-exactly, otherwise
 * they are dequantised then requantised.  Quantising from floats uses the
 * report's quantisers: Q4_0 s = max|w|/7, q = round(w/s)+8 clipped to
 * [0,15]; Q8_0 d = max|w|/127, q = round(w/d).
 * Returns 0, or -1 for an impossible request (bad sizes, non-finite input
 * when quantising).  payload must hold kern_tile_payload_size() bytes.
 */
int kern_tile_pack(enum kern_type dst, unsigned rows, unsigned cols,
                   enum kern_src src_type, const void *src, size_t row_stride,
                   void *payload);

/* Dequantise a whole payload into dst[r*ld + c], r < rows, c < cols. */
void kern_tile_unpack(enum kern_type t, unsigned rows, unsigned cols,
                      const void *payload, float *dst, size_t ld);

/* Dequantise one row r (< rows) of a payload into dst[0..cols). */
void kern_tile_row(enum kern_type t, unsigned rows, unsigned cols,
                   const void *payload, unsigned r, float *dst);

/* Check a payload: every stored scale (Q8_0, Q4_0) or weight (F16, F32),
 * padding included, finite; for the block types, the type's own check of
 * every block (finite scales, no reserved value, indexes in range).
 * 0 when it passes, else -1 with *row the first bad row and *what the
 * field ("d", "weight", "e8m0 scale" ...); row and what may be NULL. */
int kern_tile_check(enum kern_type t, unsigned rows, unsigned cols,
                    const void *payload, unsigned *row, const char **what);
/* 1 when kern_tile_check passes, else 0. */
int kern_tile_finite(enum kern_type t, unsigned rows, unsigned cols,
                     const void *payload);
/* Row r (< rows) of a quantised payload as the GGML blocks it was packed
 * from, cols / kern_type_block(t) of them, bit for bit (the inverse of
 * packing a type's own blocks; Q8_0 and Q4_0 included).  0, or -1 for F32
 * and F16, a bad shape, or a tile that ends inside a block. */
int kern_tile_blocks(enum kern_type t, unsigned rows, unsigned cols,
                     const void *payload, unsigned r, void *blocks);

/* ---- rows of a source encoding (kern_src.c, kern_pack.c) ---------------
 * n values of one row, n a multiple of the encoding's block, as llama.cpp
 * reads, writes and validates them. */
/* Widen to floats as ggml's dequantize_row_* (what kern_tile_pack does to
 * a source it does not copy); 0, or -1 for a bad n or a block type with
 * no entry in this build. */
int kern_src_dequant(enum kern_src src, const void *row, size_t n, float *out);
/* Encode finite floats as llama-quantize does without an importance
 * matrix (ggml's quantize_row_*_ref; F16 and BF16 rounded to nearest
 * even): for the GGML Q8_0 and Q4_0 blocks ggml's quantisers, not the
 * report's of kern_tile_pack.  0, or -1 for a bad n, a non-finite input,
 * a scale or value that does not fit its storage, or no entry. */
int kern_src_quant(enum kern_src src, const float *x, size_t n, void *out);
/* 0 when every block decodes to finite weights only (the type's check:
 * finite scales, no reserved value, indexes in range); else -1 with *blk
 * the first bad block (value, for F32/F16/BF16) and *what its field ("d",
 * "weight", "e8m0 scale", ...; "shape" for a bad n, "type" for a block
 * type with no entry).  blk and what may be NULL. */
int kern_src_check(enum kern_src src, const void *row, size_t n, size_t *blk,
                   const char **what);

/* ---- unaligned loads ------------------------------------------------------
 * Native-order loads from any address, for the kernels' packed tiles and
 * for the readers of the file formats above (GGUF, safetensors and .cflow
 * are little endian, as is x86-64).  memcpy keeps them free of alignment
 * and strict-aliasing trouble and compiles to one mov. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "the file formats are little endian and loaded in native order");
#define KERN_LD(name, T) \
    static inline T name(const void *p) { T v; memcpy(&v, p, sizeof v); return v; }
KERN_LD(kern_ld_u16, uint16_t)
KERN_LD(kern_ld_u32, uint32_t)
KERN_LD(kern_ld_i32, int32_t)
KERN_LD(kern_ld_u64, uint64_t)
KERN_LD(kern_ld_f32, float)
#undef KERN_LD

/* ---- activations ---------------------------------------------------- */

/* An input vector prepared for every tile type.  All arrays are n_pad =
 * roundup(n, 32) long (blocks: n_pad/32) and zero past n. */
typedef struct kern_act {
    unsigned  n, n_pad, cap;
    float    *f32;      /* [n_pad] x */
    uint16_t *f16;      /* [n_pad] x rounded to binary16 */
    int8_t   *q8;       /* [n_pad] Q8_0 quants */
    float    *q8_d;     /* [n_pad/32] block scales (the f16-rounded value) */
    int32_t  *q8_sum;   /* [n_pad/32] sum of quants in the block */
    /* Q8_1 (Q4_1, Q5_1 tiles): q8's quants and q8_d, and per block
     * s = d * sum as quantize_row_q8_1 stores it (through f16) */
    float    *q8_s;     /* [n_pad/32] */
    uint16_t *bf16;     /* [n_pad] x rounded to bfloat16 (BF16 tiles) */
    /* Q8_K (K-quant and IQ4_XS tiles), blocks of 256 over x zero-padded
     * to n_pad256 = roundup(n, 256) (cap is a multiple of 256) */
    int8_t   *q8k;      /* [n_pad256] quants */
    float    *q8k_d;    /* [n_pad256/256] block scales */
    int16_t  *q8k_bsums;/* [n_pad256/16] sums of each 16 quants */
} kern_act;

/* Which encodings kern_act_set must fill (bit per tile type). */
#define KERN_NEED(t) (1u << (t))
#define KERN_NEED_ALL ((1u << KERN_NTYPES) - 1)
/* The bits of the types that read each encoding. */
#define KERN_NEED_Q8_0 (KERN_NEED(KERN_Q8_0) | KERN_NEED(KERN_Q4_0) |         \
                        KERN_NEED(KERN_Q5_0) | KERN_NEED(KERN_IQ4_NL) |       \
                        KERN_NEED(KERN_MXFP4))
#define KERN_NEED_Q8_1 (KERN_NEED(KERN_Q4_1) | KERN_NEED(KERN_Q5_1))
#define KERN_NEED_Q8_K (KERN_NEED(KERN_Q2_K) | KERN_NEED(KERN_Q3_K) |         \
                        KERN_NEED(KERN_Q4_K) | KERN_NEED(KERN_Q5_K) |         \
                        KERN_NEED(KERN_Q6_K) | KERN_NEED(KERN_IQ4_XS))

int  kern_act_init(kern_act *a, unsigned n_max);   /* 0 or -1 (ENOMEM) */
void kern_act_free(kern_act *a);
void kern_act_set(kern_act *a, const float *x, unsigned n, unsigned need);

/* ---- dispatch ---------------------------------------------------------- */

/* y[0..rows) += W_tile . x[col0 .. col0+cols).  x prepared by kern_act_set
 * for this tile's type. */
typedef void (*kern_tile_mv_fn)(const void *payload, unsigned rows,
                                unsigned cols, const kern_act *x,
                                unsigned col0, float *y);

/* The same for m inputs at once (batched prefill): for j < m,
 * y[j*ldy + 0 .. rows) += W_tile . x[j][col0 .. col0+cols).  Each row's
 * sum is formed exactly as tile_mv forms it, so results are bit-identical
 * to m separate mat-vecs; the point is that a tile's weights come from
 * memory once for all m inputs (and, where the ISA file has a native
 * kernel, leave the registers once per panel-block). */
typedef void (*kern_tile_mm_fn)(const void *payload, unsigned rows,
                                unsigned cols, const kern_act *x, unsigned m,
                                unsigned col0, float *y, size_t ldy);

/* Attention sinks (gpt-oss): sinks NULL, or [n_heads] logits, one a
 * query head, each joining its head's softmax as one more position whose
 * value is zero: it takes weight from the positions and adds nothing.  As
 * llama.cpp applies it, after the positions: over an f16 cache the last
 * step of the online softmax (kern_vec.c), over an f32 cache one more term
 * of the softmax's maximum and sum.
 *
 * Single-query attention over a binary16 cache for heads [h0, h1) (see
 * kern_attn_decode_f16 for the arithmetic and the arguments); scores holds
 * at least (h1 - h0) * n_pos floats (a variant may work on several heads at
 * once, each with its own n_pos), scratch at least 2*head_dim halves. */
typedef void (*kern_attn_f16_fn)(float *out, const float *q,
                                 const uint16_t *k, const uint16_t *v,
                                 unsigned n_pos, unsigned h0, unsigned h1,
                                 unsigned n_heads, unsigned n_kv_heads,
                                 unsigned head_dim, size_t kv_stride,
                                 float scale, float softcap, const float *sinks,
                                 float *scores, uint16_t *scratch);

/* Single-query attention over an f32 cache for heads [h0, h1), with
 * kern_attn_decode's arithmetic (run.c's: each score summed in order of
 * the head's dims, the softmax of kern_softmax, the values summed in order
 * of position); scores holds at least (h1 - h0) * n_pos floats, head h's
 * row at scores + (h - h0) * n_pos. */
typedef void (*kern_attn_f32_fn)(float *out, const float *q, const float *k,
                                 const float *v, unsigned n_pos, unsigned h0,
                                 unsigned h1, unsigned n_heads,
                                 unsigned n_kv_heads, unsigned head_dim,
                                 size_t kv_stride, float scale, float softcap,
                                 const float *sinks, float *scores);

/* Causal attention of a prompt chunk over a binary16 cache, with the
 * arithmetic of llama.cpp's tiled CPU flash attention (ops.cpp's
 * ggml_compute_forward_flash_attn_ext_tiled, the path its prefill takes for
 * a ubatch of at least 64 tokens), bit for bit with its AVX-512 build.
 * One KV head and the query rows that read it:
 *   q, out  row (j, g) for j < np positions, g < G heads at q + j*ld + g*hd
 *           (floats; out likewise); rows are position-major
 *   pos     row (j, g) is at position p0 + j and sees cache positions
 *           0 .. p0 + j (no sliding window)
 *   k, v    the KV head's column of the cache: position t at k + t*kv_stride
 *           (hd halves)
 *   work    KERN_ATTN_PF_WORK(np * G, hd) floats
 * Per row, over KV tiles of KERN_ATTN_PF_TILE positions from position 0:
 * the score of position t is a chain of FMAs over the head's dims in order
 * (f32 q, k widened exactly), times scale; positions past the row's own are
 * masked; M' = max(M, the tile's max) and, where M' > M, the accumulator
 * and S are scaled by expf(M - M'); the weights are ggml's AVX-512 vector
 * exp (kern_ggml_v_expf1) of score - M', their sum taken 16 at a time in
 * _mm512_reduce_add_ps order and added in double to S; the accumulator of
 * each dim is a chain of FMAs over the tile's positions in order.  At the
 * end out = acc * (1/S) + 0 (the + 0 makes a zero's sign not depend on
 * which masked positions a kernel ran through with weight 0).  So a row's
 * bits depend on nothing but its own q, position and the cache, never on
 * the rows run beside it or the thread that ran it. */
#define KERN_ATTN_PF_TILE 64
#define KERN_ATTN_PF_WORK(nr, hd)                                              \
    ((size_t)(nr) * (2 * (size_t)(hd) + KERN_ATTN_PF_TILE + 2) +               \
     2 * (size_t)KERN_ATTN_PF_TILE * (hd) + 64)
typedef void (*kern_attn_pf_fn)(float *out, const float *q, size_t ld,
                                unsigned np, unsigned G, unsigned p0,
                                const uint16_t *k, const uint16_t *v,
                                size_t kv_stride, unsigned hd, float scale,
                                float *work);

typedef struct kern_ops {
    enum kern_isa   isa;
    const char     *name;                 /* as kern_isa_name() */
    kern_tile_mv_fn tile_mv[KERN_NTYPES];
    /* Q4_0 summed as llama.cpp's repacked x86 kernel sums it (one FMA per
     * block instead of eight lanes); llama.cpp repacks the Q4_0 matrices
     * whose row count is a multiple of 8.  See kern_ref.c. */
    kern_tile_mv_fn tile_mv_q4_0_rp;
    float (*dot_f32)(const float *a, const float *b, unsigned n);
    void  (*axpy_f32)(float *y, float a, const float *x, unsigned n);
    kern_tile_mm_fn tile_mm[KERN_NTYPES]; /* batched tile_mv */
    kern_tile_mm_fn tile_mm_q4_0_rp;      /* batched tile_mv_q4_0_rp */
    kern_attn_f16_fn attn_f16;            /* kern_attn_decode_f16, by heads */
    kern_attn_f32_fn attn_f32;            /* kern_attn_decode, by heads */
    kern_attn_pf_fn  attn_prefill_f16;    /* kern_attn_prefill_f16's bits */
    /* kern_swiglu_ggml, the same bits (AVX-512: ggml's own vector code) */
    void (*swiglu_ggml)(float *out, const float *gate, const float *up,
                        unsigned n);
    /* kern_act_set's conversions, the same bits on every ISA: nb blocks of
     * 32 floats x to Q8_0 (q[32*nb], d[nb], sum[nb]); n floats to f16 */
    void (*act_q8)(const float *x, unsigned nb, int8_t *q, float *d,
                   int32_t *sum);
    void (*act_f16)(const float *x, unsigned n, uint16_t *h);
    /* nb blocks of 256 floats x to Q8_K as ggml's quantize_row_q8_K
     * (q[256*nb], d[nb], bsums[16*nb]); n floats to bfloat16 as
     * GGML_FP32_TO_BF16 */
    void (*act_q8k)(const float *x, unsigned nb, int8_t *q, float *d,
                    int16_t *bsums);
    void (*act_bf16)(const float *x, unsigned n, uint16_t *h);
    /* The types llama.cpp repacks on x86 (ggml-cpu repack.cpp,
     * ggml_repack_get_optimal_repack_type: Q4_0, IQ4_NL and MXFP4 matrices
     * whose row count is a multiple of 8, on any AVX2 CPU), summed as its
     * repacked gemv sums them; NULL for a type it does not repack.
     * tile_mv_rp[KERN_Q4_0] is tile_mv_q4_0_rp. */
    kern_tile_mv_fn tile_mv_rp[KERN_NTYPES];
    kern_tile_mm_fn tile_mm_rp[KERN_NTYPES];
} kern_ops;

/* Pick the best ISA this CPU runs, once.  CFLOW_ISA=scalar|avx2|avx512|
 * avx512-vnni lowers the choice (never above what the CPU has). */
const kern_ops *kern_init(void);
/* The table for one ISA, or NULL when this CPU (or build) lacks it. */
const kern_ops *kern_ops_for(enum kern_isa isa);
/* The scalar reference: always present, the oracle for the others. */
const kern_ops *kern_ops_ref(void);
/* Human-readable CPU feature string ("avx2 fma f16c avx512f ...") */
const char *kern_cpu_features(void);

/* ---- vector kernels (scalar; cheap next to the mat-vecs) ---------------- */

uint16_t kern_fp32_to_fp16(float f);   /* round to nearest even */
float    kern_fp16_to_fp32(uint16_t h);
float    kern_bf16_to_fp32(uint16_t h);

/* out = x / sqrt(mean(x^2) + eps) * w   (w NULL: no scale).  out may be x. */
void kern_rmsnorm(float *out, const float *x, const float *w, unsigned n,
                  float eps);

/* Rotate n_heads heads of head_dim floats at position pos.  The first
 * rot_dim dimensions rotate (rot_dim <= head_dim, even); inv_freq has
 * rot_dim/2 entries (theta^(-2i/rot_dim), already scaled for rope scaling).
 * neox = 0: adjacent pairs (x[2i], x[2i+1]) — llama2.c / GGUF llama.
 * neox = 1: split half (x[i], x[i + rot_dim/2]) — HF, GGUF qwen2. */
void kern_rope(float *x, unsigned n_heads, unsigned head_dim, unsigned rot_dim,
               unsigned pos, const float *inv_freq, int neox);

void kern_softmax(float *x, unsigned n);

/* Single-query attention over n_pos cached positions.
 *   q    [n_heads][head_dim]
 *   k, v position-major caches: position t, kv head h at k[t*kv_stride +
 *        h*head_dim] (floats)
 *   out  [n_heads][head_dim]
 *   scratch at least n_pos floats.
 * Query head h uses kv head h / (n_heads / n_kv_heads).  scale multiplies
 * the raw scores; softcap > 0 applies tanh(s/c)*c before softmax. */
void kern_attn_decode(float *out, const float *q, const float *k,
                      const float *v, unsigned n_pos, unsigned n_heads,
                      unsigned n_kv_heads, unsigned head_dim, size_t kv_stride,
                      float scale, float softcap, float *scratch);

/* The same over a binary16 cache (k, v: halves, kv_stride counted in
 * halves), with the arithmetic of llama.cpp's CPU flash attention, which a
 * GGUF model meets there by default (f16 KV cache): q rounded to f16, an
 * online softmax, and the weighted sum of v kept in an f16 accumulator.
 * scale multiplies the raw scores; softcap > 0 applies c*tanh(s*scale/c).
 * scratch at least 2*head_dim halves.  See kern_vec.c. */
void kern_attn_decode_f16(float *out, const float *q, const uint16_t *k,
                          const uint16_t *v, unsigned n_pos, unsigned n_heads,
                          unsigned n_kv_heads, unsigned head_dim,
                          size_t kv_stride, float scale, float softcap,
                          uint16_t *scratch);

/* The scalar reference of kern_ops.attn_prefill_f16 (see kern_attn_pf_fn
 * for the arguments and the arithmetic); every ISA's kernel gives its bits. */
void kern_attn_prefill_f16(float *out, const float *q, size_t ld, unsigned np,
                           unsigned G, unsigned p0, const uint16_t *k,
                           const uint16_t *v, size_t kv_stride, unsigned hd,
                           float scale, float *work);

/* out[i] = silu(gate[i]) * up[i];  out may alias gate. */
void kern_swiglu(float *out, const float *gate, const float *up, unsigned n);
/* out[i] = gelu_tanh(gate[i]) * up[i]. */
void kern_geglu(float *out, const float *gate, const float *up, unsigned n);

/* The same operations with llama.cpp's arithmetic (the peer of a GGUF
 * model), bit for bit with its AVX-512 CPU build; see kern_vec.c.
 *   kern_rmsnorm_ggml: the squares summed in double, out = x * s * w.
 *   kern_rope_ggml: pair i turns by theta_i = pos * ts^i, the power taken
 *     by repeated multiplication, ts = base^(-2/rot_dim); freq_factors
 *     (rot_dim/2 entries, or NULL) divide theta_i (Llama-3 scaling).
 *   kern_swiglu_ggml: silu(gate) * up, silu through ggml's 16-lane vector
 *     exp for the first n & ~15 elements and libm expf for the rest. */
void kern_rmsnorm_ggml(float *out, const float *x, const float *w, unsigned n,
                       float eps);
void kern_rope_ggml(float *x, unsigned n_heads, unsigned head_dim,
                    unsigned rot_dim, unsigned pos, float base,
                    const float *freq_factors, int neox);
void kern_swiglu_ggml(float *out, const float *gate, const float *up,
                      unsigned n);

/* The model families' activations and RoPE, in ggml's arithmetic (kern_vec.c):
 *   kern_geglu_ggml: ggml_vec_geglu_f32 of its default build (GELU through
 *     its f16 table): gate <= -10 gives 0, >= 10 gate * up, else the tanh
 *     GELU of gate rounded to f16, itself rounded to f16, times up;
 *   kern_swiglu_oai: gpt-oss's ggml_swiglu_oai, x = min(gate, limit),
 *     y = clamp(up, -limit, limit), out = x / (1 + expf(alpha * -x)) * (y + 1);
 *   kern_rope_ggml_ext: ggml's rope with rope_yarn: pair i turns by theta_i
 *     = pos * ts^i / freq_factors[i] (as kern_rope_ggml), interpolated by
 *     freq_scale and, where ext_factor != 0, mixed back by YaRN's ramp over
 *     corr[0..1] with the magnitude mscale * (1 + 0.1 ln(1/freq_scale));
 *     cos and sin times attn_factor.  kern_rope_yarn_corr gives corr as
 *     ggml_rope_yarn_corr_dims. */
void kern_geglu_ggml(float *out, const float *gate, const float *up, unsigned n);
void kern_swiglu_oai(float *out, const float *gate, const float *up, unsigned n,
                     float alpha, float limit);
typedef struct kern_rope_ext {
    float        freq_scale;    /* 1: none */
    float        ext_factor;    /* YaRN's mix, 0: none */
    float        attn_factor;   /* the magnitude of cos and sin, 1: none */
    float        corr[2];       /* YaRN's correction dimensions */
    const float *freq_factors;  /* [rot_dim / 2] divisors of theta, or NULL */
} kern_rope_ext;
void kern_rope_ggml_ext(float *x, unsigned n_heads, unsigned head_dim, unsigned rot_dim,
                        unsigned pos, float base, const kern_rope_ext *e, int neox);
void kern_rope_yarn_corr(unsigned rot_dim, unsigned n_ctx_orig, float base, float beta_fast,
                         float beta_slow, float corr[2]);

#endif /* CFLOW_KERN_H */
