/*
 * kern_impl.h — private to src/kernels: payload geometry, the byte offsets
 * of the tile layout described in kern.h, unaligned loads, and the
 * half-precision conversions every file of the module uses.
 *
 * Geometry of an R x C tile (R <= 128, C <= 256):
 *   rp = roundup(R, 16)   padded rows        np = rp / 16   panels
 *   cp = roundup(C, 32)   padded columns     nb = cp / 32   blocks
 * F32/F16 payloads are np panels of cp columns of 16 values.  Q8_0/Q4_0
 * payloads start with np*nb*16 f16 scales ("scale area", rp*nb*2 bytes),
 * followed by np*nb blocks of 16 rows x 32 columns of quants (512 bytes for
 * Q8_0 as 8 quads of 64 bytes, 256 bytes for Q4_0 as 4 chunks of 64 bytes).
 *
 * The payload sits after a 16-byte header inside a mapped file, so nothing
 * here assumes any alignment: loads go through memcpy (the compiler turns
 * them into plain moves) and the SIMD files use unaligned loads.
 *
 * Mat-vec contract shared by every ISA (kern_ref.c states it in full and
 * is the oracle): per output row, the tile's sum is formed and added to
 * y[r] once.  F32 sums column by column (run.c); F16 in 64 FMA lanes folded
 * as ggml_vec_dot_f16, the columns past the last 64 added in double;
 * Q8_0/Q4_0 in 8 lanes of FMAs per block (ggml_vec_dot_q*_0_q8_0), or, for
 * tile_mv_q4_0_rp, one FMA per block (llama.cpp's repacked Q4_0 gemv).  For
 * Q8_0/Q4_0 tiles col0 must be a multiple of 32, so that tile block b reads
 * activation block col0/32 + b.  The SIMD kernels keep each row in its own
 * lanes and reproduce these roundings exactly; the tests check bit
 * equality.
 */
#ifndef CFLOW_KERN_IMPL_H
#define CFLOW_KERN_IMPL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kern.h"

/* Bytes of one panel-block of quants (16 rows x 32 columns). */
#define KERN_Q8_BLOCK_BYTES (KERN_PANEL * KERN_QBLOCK)       /* 512 */
#define KERN_Q4_BLOCK_BYTES (KERN_PANEL * KERN_QBLOCK / 2)   /* 256 */

typedef struct kern_geom {
    unsigned rp, cp;     /* padded rows, padded columns */
    unsigned np, nb;     /* panels of 16 rows, blocks of 32 columns */
    size_t   scale_bytes;/* Q8_0/Q4_0: bytes of the f16 scale area */
} kern_geom;

static inline unsigned kern_roundup(unsigned v, unsigned m)
{
    return (v + m - 1) / m * m;
}

static inline kern_geom kern_geom_of(unsigned rows, unsigned cols)
{
    kern_geom g;
    g.rp = kern_roundup(rows, KERN_PANEL);
    g.cp = kern_roundup(cols, KERN_QBLOCK);
    g.np = g.rp / KERN_PANEL;
    g.nb = g.cp / KERN_QBLOCK;
    g.scale_bytes = (size_t)g.rp * g.nb * 2;
    return g;
}

/* ---- element positions (see the layout in kern.h) ----------------------- */

/* F32/F16: index of element (r, c) counted in elements. */
static inline size_t kern_idx_dense(const kern_geom *g, unsigned r, unsigned c)
{
    return ((size_t)(r / KERN_PANEL) * g->cp + c) * KERN_PANEL + r % KERN_PANEL;
}

/* Q8_0/Q4_0: index of the f16 scale of row r, block b, counted in halves. */
static inline size_t kern_idx_scale(const kern_geom *g, unsigned r, unsigned b)
{
    return ((size_t)(r / KERN_PANEL) * g->nb + b) * KERN_PANEL + r % KERN_PANEL;
}

/* Q8_0: byte offset (from the payload start) of quant (r, c). */
static inline size_t kern_off_q8(const kern_geom *g, unsigned r, unsigned c)
{
    unsigned b = c / KERN_QBLOCK, k = c % KERN_QBLOCK;
    return g->scale_bytes
         + ((size_t)(r / KERN_PANEL) * g->nb + b) * KERN_Q8_BLOCK_BYTES
         + (size_t)(k / 4) * 64 + 4 * (r % KERN_PANEL) + k % 4;
}

/* Q4_0: byte offset of the byte holding quant (r, c); *hi is set when the
 * quant is the high nibble (block columns 16..31). */
static inline size_t kern_off_q4(const kern_geom *g, unsigned r, unsigned c,
                                 int *hi)
{
    unsigned b = c / KERN_QBLOCK, k = c % KERN_QBLOCK;
    *hi = k >= 16;
    k %= 16;
    return g->scale_bytes
         + ((size_t)(r / KERN_PANEL) * g->nb + b) * KERN_Q4_BLOCK_BYTES
         + (size_t)(k / 4) * 64 + 4 * (r % KERN_PANEL) + k % 4;
}

/* ---- half precision ---------------------------------------------------------
 * Plain C, bit-exact with the F16C instructions (vcvtph2ps, and vcvtps2ph
 * with round-to-nearest-even): the tests compare them on every half and on
 * millions of floats.  NaNs keep their sign and top payload bits and come
 * out quiet, as the hardware does. */

static inline uint32_t kern_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float kern_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float kern_h2f(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;

    if (e == 0x1F)                      /* inf, NaN (made quiet) */
        return kern_bits_f32(sign | 0x7F800000u | (m << 13) |
                             (m ? 0x00400000u : 0));
    if (e == 0) {
        if (m == 0)
            return kern_bits_f32(sign);
        /* subnormal m * 2^-24: normalise into an f32 normal */
        e = 113;                        /* 127 - 14 */
        while (!(m & 0x400u)) {
            m <<= 1;
            e--;
        }
        m &= 0x3FFu;
        return kern_bits_f32(sign | (e << 23) | (m << 13));
    }
    return kern_bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

static inline uint16_t kern_f2h(float f)
{
    uint32_t x = kern_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7FFFFFFFu;

    if (ax >= 0x7F800000u) {            /* inf, or NaN made quiet */
        if (ax == 0x7F800000u)
            return (uint16_t)(sign | 0x7C00u);
        return (uint16_t)(sign | 0x7E00u | ((ax >> 13) & 0x3FFu));
    }
    if (ax >= 0x38800000u) {            /* >= 2^-14: a normal half, or inf */
        /* Rebias the exponent (127 -> 15) and round the 13 dropped bits to
         * nearest even: add 0xFFF plus the lowest kept bit, then truncate.
         * A carry walks into the exponent, up to 0x7C00 (inf) at 65520. */
        uint32_t odd = (ax >> 13) & 1u;
        ax = ax - (112u << 23) + 0xFFFu + odd;
        if (ax >= (31u << 23))
            return (uint16_t)(sign | 0x7C00u);
        return (uint16_t)(sign | (ax >> 13));
    }
    /* Subnormal half or zero: the result counts units of 2^-24. */
    uint32_t e = ax >> 23;
    if (e < 102)                        /* below 2^-25: rounds to zero */
        return (uint16_t)sign;
    uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;   /* value m * 2^(e-150) */
    uint32_t shift = 126 - e;                    /* 14 .. 24 */
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u)))
        r++;                            /* may become 0x400: smallest normal */
    return (uint16_t)(sign | r);
}

/* ---- GGML block types (kern.h: every type past Q4_0) -----------------------
 * What differs per block type is one table entry (kern_pack.c's table of
 * these, filled from the files that own each type: kern_lq.c for the
 * 32-column types and BF16, kern_kq.c for the K-quants and IQ4_XS).  The
 * generic code of kern_pack.c builds every payload, row and check from
 * them; a type whose entry is missing (NULL put) has no payload size, so
 * the format refuses it.
 *
 * A payload of such a type has rp = roundup(R, 16) rows of nblk =
 * ceil(C / blk_cols) blocks each (rows past R and blocks past C are
 * all-zero blocks, which every type decodes to exact zeros), so its size is
 * rp * nblk * blk_bytes; put/get place row r's blocks in the type's own
 * order.  A 32-column type's tile that ends inside a block keeps the
 * block whole, the weights past C zeroed as the type zeroes them. */
typedef struct kern_type_ops {
    const char *name;             /* "q4_k", as kern_type_name */
    enum kern_src src;            /* the GGML blocks kept bit for bit */
    unsigned blk_cols, blk_bytes; /* one GGML block */
    /* row r (< rp) of a payload of nblk blocks a row <- nblk blocks */
    void (*put)(uint8_t *pl, unsigned rp, unsigned nblk, unsigned r,
                const uint8_t *blocks);
    /* nblk blocks <- row r of a payload (put's inverse) */
    void (*get)(const uint8_t *pl, unsigned rp, unsigned nblk, unsigned r,
                uint8_t *blocks);
    /* nblk blocks -> nblk * blk_cols floats, as ggml's dequantize_row_* */
    void (*dequant)(const uint8_t *blocks, unsigned nblk, float *out);
    /* nblk * blk_cols finite floats -> nblk blocks, as ggml's
     * quantize_row_*_ref (what llama-quantize writes without an imatrix);
     * -1 when a scale would not be finite in its storage type */
    int  (*quant)(const float *x, unsigned nblk, uint8_t *blocks);
    /* 0 when nblk blocks decode to finite weights only (scales finite, no
     * reserved E8M0 0xFF, indexes in range ...), else -1 with *what (may
     * be NULL) naming the field ("d", "dmin", "e8m0 scale") */
    int  (*check)(const uint8_t *blocks, unsigned nblk, const char **what);
    /* optional, the open's fast path: 1 when every block of panel p (rows
     * 16p .. 16p+15) of a payload of rp rows passes check, read straight
     * from the payload; 0 sends kern_tile_check through get and check row
     * by row (which names the row and the field), so it may say 0 where
     * check would pass.  NULL: row by row always. */
    int  (*panel_ok)(const uint8_t *pl, unsigned rp, unsigned nblk, unsigned p);
} kern_type_ops;

/* The entry of type t, NULL for F32, F16, Q8_0, Q4_0 (kern_pack.c's own
 * code) and for a type not built yet. */
const kern_type_ops *kern_type_ops_of(enum kern_type t);

/* Each family's entries (NULL: not this family's type or not built yet). */
const kern_type_ops *kern_lq_type(enum kern_type t);
const kern_type_ops *kern_kq_type(enum kern_type t);
/* Each family's kernels into the table of tier isa (tile_mv, tile_mm of
 * its types, and act_q8k / act_bf16): called once per table by
 * kern_dispatch.c after the tier's own table was copied; a family with no
 * kernel of that tier leaves the one of the tier below (every tier starts
 * from the scalar reference's entries). */
void kern_lq_fill(kern_ops *ops, enum kern_isa isa);
void kern_kq_fill(kern_ops *ops, enum kern_isa isa);

/* ---- the per-ISA tables (kern_ref.c, kern_avx2.c, kern_avx512.c) -------- */

extern const kern_ops kern_ops_scalar;
#if HAVE_ISA_X86
extern const kern_ops kern_ops_avx2;
extern const kern_ops kern_ops_avx512;
extern const kern_ops kern_ops_avx512_vnni;
#endif

/* One score of kern_attn_decode: q . k summed in order of the dims, then
 * divided by sqrt(head_dim) (divide: run.c's way with the usual scale) or
 * multiplied by scale.  Shared by the vector kernels for the positions
 * they do not take 8 at a time. */
static inline float kern_attn_score_f32(const float *q, const float *k,
                                        unsigned head_dim, int divide,
                                        float sqrt_hd, float scale)
{
    float score = 0.0f;
    for (unsigned i = 0; i < head_dim; i++)
        score += q[i] * k[i];
    return divide ? score / sqrt_hd : score * scale;
}

/* kern_softmax's first two passes: x[i] = expf(x[i] - max) in place,
 * returning their sum taken in order; the caller divides by it (a vector
 * kernel in vectors: the quotients are the same). */
static inline float kern_softmax_exps(float *x, unsigned n)
{
    float max_val = x[0], sum = 0.0f;
    for (unsigned i = 1; i < n; i++)
        if (x[i] > max_val)
            max_val = x[i];
    for (unsigned i = 0; i < n; i++) {
        x[i] = expf(x[i] - max_val);
        sum += x[i];
    }
    return sum;
}

/* kern_vec.c: kern_attn_decode head by head (kern_ops.attn_f32 of the
 * scalar table, the oracle of the others). */
void kern_attn_f32_ref(float *out, const float *q, const float *k,
                       const float *v, unsigned n_pos, unsigned h0,
                       unsigned h1, unsigned n_heads, unsigned n_kv_heads,
                       unsigned head_dim, size_t kv_stride, float scale,
                       float softcap, const float *sinks, float *scores);
/* kern_softmax_exps with a sink: the sink's logit joins the maximum and its
 * exponential the sum (it has no value to weigh). */
static inline float kern_softmax_exps_sink(float *x, unsigned n, float sink)
{
    float max_val = sink, sum = 0.0f;
    for (unsigned i = 0; i < n; i++)
        if (x[i] > max_val)
            max_val = x[i];
    for (unsigned i = 0; i < n; i++) {
        x[i] = expf(x[i] - max_val);
        sum += x[i];
    }
    return sum + expf(sink - max_val);
}
/* The sink s of a head after its positions, as ggml's flash attention takes
 * it (M, *S: the head's running maximum and sum): the factor its f32
 * accumulator takes (1 unless s is a new maximum); *S updated. */
static inline float kern_attn_sink(float s, float M, float *S)
{
    if (s > M) {
        const float ms = expf(M - s);
        *S = fmaf(*S, ms, 1.0f);
        return ms;
    }
    *S = fmaf(*S, 1.0f, expf(s - M));
    return 1.0f;
}
#if HAVE_ISA_X86
/* kern_avx2.c: its attn_f32, which the AVX-512 tables share (8 positions
 * per vector are as many as a head's short rows keep busy). */
void kern_attn_f32_avx2(float *out, const float *q, const float *k,
                        const float *v, unsigned n_pos, unsigned h0,
                        unsigned h1, unsigned n_heads, unsigned n_kv_heads,
                        unsigned head_dim, size_t kv_stride, float scale,
                        float softcap, const float *sinks, float *scores);
#endif

/* kern_vec.c: the scalar attention over an f16 cache (kern_ops.attn_f16
 * of the scalar and AVX2 tables, and the oracle of the others). */
void kern_attn_f16_ref(float *out, const float *q, const uint16_t *k,
                       const uint16_t *v, unsigned n_pos, unsigned h0,
                       unsigned h1, unsigned n_heads, unsigned n_kv_heads,
                       unsigned head_dim, size_t kv_stride, float scale,
                       float softcap, const float *sinks, float *scores,
                       uint16_t *scratch);

/* kern_act_ref.c: the scalar activation conversions (see kern_ops.act_q8). */
void kern_act_q8_ref(const float *x, unsigned nb, int8_t *q, float *d,
                     int32_t *sum);
void kern_act_f16_ref(const float *x, unsigned n, uint16_t *h);
/* Q8_1's s of nb blocks of x: d * sum, d = amax / 127 unrounded, stored
 * through f16, as quantize_row_q8_1 (kern_lq.c). */
void kern_act_q8_1_s(const float *x, unsigned nb, const int32_t *sum,
                     float *s);
/* The softmax's scalars of one head of the vector attention kernels
 * (kern_avx512.c's ATTN_GROUP, kern_avx2.c's ATTN2_GROUP), before their
 * pass over the values, so that no call to expf (which takes every vector
 * register with it) sits in that loop: kern_attn_f16_ref's M, ms, vs and S
 * in its order.  Per position either a new maximum (the accumulator is
 * to be scaled by ms, and vs is 1) or not (ms 1, vs): the score's slot
 * e[t] is replaced by -ms or vs (expf's value lies in [0, 1], or is NaN,
 * which is kept as it is).  Returns S, and M in *m_out (for a sink,
 * kern_attn_sink).  Inline, so that fmaf becomes the caller's FMA
 * instruction. */
static inline float kern_attn_softmax_scalars(float *e, unsigned n_pos, float *m_out)
{
    float M = -INFINITY, S = 0.0f;
    for (unsigned t = 0; t < n_pos; t++) {
        const float sc = e[t];
        float ms = 1.0f, vs = 1.0f;
        if (sc > M) {
            ms = expf(M - sc);
            M = sc;
            e[t] = -ms;
        } else {
            vs = expf(sc - M);
            e[t] = vs;
        }
        S = fmaf(S, ms, vs);
    }
    *m_out = M;
    return S;
}

/* 16 floats summed as GCC's _mm512_reduce_add_ps sums them: halves of 8,
 * of 4, then (t0 + t2) + (t1 + t3).  The last levels of kern_ref.c's
 * fold64, ggml_vec_dot_f16's fold and the tiled attention's tile sums;
 * kern_simd.h's kern_fold16 is the vector spelling. */
static inline float kern_fold16_ref(const float *a)
{
    float t8[8], t4[4];
    for (unsigned l = 0; l < 8; l++)
        t8[l] = a[l + 8] + a[l];
    for (unsigned l = 0; l < 4; l++)
        t4[l] = t8[l + 4] + t8[l];
    return (t4[0] + t4[2]) + (t4[1] + t4[3]);
}

/* kern_vec.c: one lane of ggml's AVX-512 ggml_v_expf (kern_swiglu_ggml's
 * vector part; the AVX2 kernel's way out for lanes whose 2^n is not a
 * normal float). */
float kern_ggml_v_expf1(float x);

/* A batched tile kernel made of m calls of a mat-vec kernel: the tile's
 * bytes stay in L1/L2 across the m calls, so memory sees them once.
 * Used where an ISA file has no native batched kernel. */
#define KERN_MM_FROM_MV(NAME, MV)                                            \
    static void NAME(const void *payload, unsigned rows, unsigned cols,     \
                     const kern_act *x, unsigned m, unsigned col0, float *y, \
                     size_t ldy)                                            \
    {                                                                       \
        for (unsigned j = 0; j < m; j++)                                    \
            MV(payload, rows, cols, x + j, col0, y + j * ldy);              \
    }

/* Choose an ISA: the best the CPU runs (best), lowered by a CFLOW_ISA value
 * (env may be NULL; an unknown name is ignored).  Exposed for the tests. */
enum kern_isa kern_isa_choose(enum kern_isa best, const char *env);

#endif /* CFLOW_KERN_IMPL_H */
