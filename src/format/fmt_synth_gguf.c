/*
 * fmt_synth_gguf.c — benchmark presets at real geometry, written as GGUF
 * files that both llama.cpp and `cflow convert` read.
 *
 * Why GGUF: the speed comparison against llama.cpp (issue 4) is only fair
 * on identical weights.  We write one Q4_0 (or Q8_0) GGUF; llama.cpp runs
 * it as it stands, cflow converts it (`cflow convert` copies Q4_0 and Q8_0
 * blocks bit for bit into its tiles), so both engines multiply the very
 * same bits.
 *
 * Why not through fmt_synth.c's f32 path: a 30B-parameter preset would be
 * 120 GB of f32 to draw and quantise.  Here every block is drawn straight from a cheap
 * generator (fmt_splitmix64: three 64-bit draws per 32 weights) and streamed to
 * the file through a 4 MiB buffer, so memory stays flat and a 17 GB file
 * takes as long as the disk needs.  The file is unnamed until complete
 * (fmt_out), so a failed or interrupted run leaves whatever was at the
 * path untouched.
 *
 * The file (GGUF v3, little endian, alignment 32):
 *   "GGUF" u32 version=3, u64 n_tensors, u64 n_kv
 *   n_kv key/values (fmt_kv's encoding, which is GGUF's)
 *   n_tensors infos: name (u64 len + bytes), u32 ndim, u64 ne[ndim],
 *                    u32 ggml type (F32 0, Q4_0 2, Q8_0 8), u64 offset
 *                    from the data section
 *   zero padding to 32, then the data section; each tensor at a multiple
 *   of 32 from its start.
 * general.file_type is llama.cpp's MOSTLY_Q4_0 (2) or MOSTLY_Q8_0 (7).
 * Tensors, in this order (llama.cpp's "llama" architecture names; shapes in
 * GGML order, ne[0] innermost; "Q4_0" below is the chosen matrix type):
 *   token_embd  Q4_0 [dim, vocab]      output_norm f32 [dim]
 *   output      Q4_0 [dim, vocab]      (absent when the preset is tied)
 *   per layer:  attn_norm f32 [dim]; attn_q Q4_0 [dim, H*hd];
 *               attn_k, attn_v Q4_0 [dim, KV*hd]; attn_output Q4_0 [H*hd, dim];
 *               ffn_norm f32 [dim]; then either a dense SwiGLU FFN
 *               (ffn_gate, ffn_up Q4_0 [dim, ff]; ffn_down Q4_0 [ff, dim]) or,
 *               Mixtral-style, ffn_gate_inp f32 [dim, E] and
 *               ffn_{gate,up}_exps Q4_0 [dim, ff, E], ffn_down_exps [ff, dim, E]
 *               (llama.cpp's llama architecture sizes experts by
 *               feed_forward_length, so that key holds the expert FFN size).
 * olmoe-mixtral-1b-7b and Qwen3-MoE are written in that llama/Mixtral form
 * at their real sizes: their per-head q/k norms (a few KB) are left out,
 * every byte that matters for bandwidth is there.  The model families'
 * presets (olmoe-1b-7b, gpt-oss-*, gemma*, phi4-mini, deepseek-v2-lite and
 * their tiny-* versions) are written in their own architecture, with the
 * names and keys of fmt_family.c's table (tensor_list, arch_keys): OLMoE's
 * whole-width Q/K norms, Phi-3's fused attn_qkv and ffn_up, Gemma's post
 * norms, gpt-oss's biases and sinks, DeepSeek-V2's latent attention
 * (attn_kv_a_mqa, its norm, the 3-D attn_k_b and attn_v_b, attn_q_a/_b
 * where the query is low-rank), its leading dense layers and shared
 * experts; norms drawn about 1 (sd 0.1).
 *
 * Weights: Q4_0 blocks (f16 d, 16 bytes of nibbles, 18 bytes per 32) hold
 * nibbles uniform in 0..15 (value (q - 8) * d) with d near 0.02 / 4.6;
 * Q8_0 blocks (f16 d, 32 int8, 34 bytes per 32) hold q uniform in
 * -127..127 with d near 0.02 / 73.3: either way each weight has a standard
 * deviation near 0.02.  Norms 1; the router f32 with sd 0.2 so that routing
 * varies from token to token.  --routing zipf patches blocks as they are
 * drawn (patch_block; fmt_synth_route.c says why): the constant residual
 * dimension dim - 1, read only by the routers; and so that the routing
 * follows the token, draws token_embd with sd FMT_SYNTH_ZIPF_EMBD_SD and
 * Q4_0 nibbles symmetric about 8 (a drawn 0, -8, is taken as 8, 0: values
 * -7..7 with mean 0, where 0..15 has mean -0.5 and every matrix would
 * push the residual along the all-ones direction).  Uniform files keep
 * their bytes.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/cflow_format.h"
#include "format/fmt_impl.h"

/* ---- a buffered writer ------------------------------------------------- */
typedef struct wr {
    FILE    *f;
    uint8_t *buf;       /* [WR_CAP] */
    size_t   n;         /* bytes pending in buf */
    uint64_t off;       /* bytes written so far, pending included */
    int      bad;       /* errno of the first failure */
} wr;
#define WR_CAP ((size_t)4 << 20)

static void wr_flush(wr *w)
{
    if (w->n && !w->bad && fwrite(w->buf, 1, w->n, w->f) != w->n)
        w->bad = errno ? errno : EIO;
    w->n = 0;
}

static void wr_bytes(wr *w, const void *p, size_t n)
{
    const uint8_t *s = p;
    while (n) {
        size_t k = WR_CAP - w->n < n ? WR_CAP - w->n : n;
        memcpy(w->buf + w->n, s, k);
        w->n += k;
        w->off += k;
        s += k;
        n -= k;
        if (w->n == WR_CAP)
            wr_flush(w);
    }
}

static void wr_u32(wr *w, uint32_t v) { wr_bytes(w, &v, 4); }
static void wr_u64(wr *w, uint64_t v) { wr_bytes(w, &v, 8); }
static void wr_str(wr *w, const char *s)
{
    wr_u64(w, strlen(s));
    wr_bytes(w, s, strlen(s));
}
static void wr_pad(wr *w, unsigned align)
{
    static const uint8_t z[64];
    wr_bytes(w, z, (size_t)((align - w->off % align) % align));
}

/* ---- random blocks ----------------------------------------------------- */
/* f32 -> f16, round to nearest even; our scales are normal numbers. */
static uint16_t f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    int32_t e = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t m = x & 0x7fffffu;
    if (e <= 0 || e >= 31)
        return (uint16_t)sign; /* not reached for our scales */
    uint32_t h = ((uint32_t)e << 10) | (m >> 13);
    uint32_t rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
        h++;
    return (uint16_t)(sign | h);
}

/* --routing zipf (fmt_synth_route.c): the patch of one tensor, seen as
 * rows of ne0 values (ne1 rows a matrix; stacked experts: more rows). */
typedef struct zpatch {
    int      rule;          /* FMT_SR_*; FMT_SR_NONE: the drawn bytes */
    uint64_t ne0, ne1, z;   /* z: the constant dimension, dim - 1 */
    unsigned layer, n_exp;
    uint64_t seed;
    float    zipf;
} zpatch;

/* Patch quantised block b (q8: Q8_0, else Q4_0) of zp's tensor: the
 * element of the constant dimension c (embedding: that block holds c and
 * zeros), or 0 (column z of a reading matrix), or the whole block zero
 * (row z of a writing matrix: scale 0). */
static void patch_block(uint8_t *blk, int q8, const zpatch *zp, uint64_t b)
{
    uint64_t per_row = zp->ne0 / 32, row = b / per_row, cb = b % per_row;
    unsigned j = (unsigned)(zp->z % 32);
    if (zp->rule == FMT_SR_ROW0 && row % zp->ne1 == zp->z) {
        blk[0] = blk[1] = 0;                     /* f16 scale 0: all zero */
        return;
    }
    if (cb != zp->z / 32 || (zp->rule != FMT_SR_CONST && zp->rule != FMT_SR_COL0))
        return;
    if (zp->rule == FMT_SR_CONST) {              /* c = 127 d or 7 d */
        uint16_t h = f32_to_f16(FMT_SYNTH_ZC(zp->z + 1) / (q8 ? 127.0f : 7.0f));
        memcpy(blk, &h, 2);
        memset(blk + 2, q8 ? 0 : 0x88, q8 ? 32 : 16);
    }
    uint8_t q = zp->rule == FMT_SR_CONST ? (q8 ? 127 : 15) : (q8 ? 0 : 8);
    if (q8)
        blk[2 + j] = q;
    else if (j < 16)
        blk[2 + j] = (uint8_t)((blk[2 + j] & 0xf0) | q);
    else
        blk[2 + j - 16] = (uint8_t)((blk[2 + j - 16] & 0x0f) | (q << 4));
}

/* nblocks Q4_0 blocks (2-byte f16 scale + 16 bytes of nibbles each). */
static void wr_q4_0(wr *w, uint64_t *rng, uint64_t nblocks, float sd, const zpatch *zp)
{
    const int sym = zp->zipf > 0;
    /* sd of (q - 8): q uniform 0..15 (4.61), or 1..15 with 8 twice (4.18) */
    const float base = sd / (sym ? 4.18f : 4.6f);
    for (uint64_t b = 0; b < nblocks; b++) {
        uint8_t blk[18];
        uint64_t r0 = fmt_splitmix64(rng), r1 = fmt_splitmix64(rng);
        uint64_t r2 = fmt_splitmix64(rng);
        /* scale jitter 0.75 .. 1.25 so blocks differ in scale too */
        float d = base * (0.75f + 0.5f * (float)(r2 >> 40) * (1.0f / 16777216.0f));
        uint16_t h = f32_to_f16(d);
        memcpy(blk, &h, 2);
        memcpy(blk + 2, &r0, 8);
        memcpy(blk + 10, &r1, 8);
        for (int k = 2; sym && k < 18; k++) {   /* nibble 0 (-8) becomes 8 (0) */
            if (!(blk[k] & 0x0f))
                blk[k] |= 0x08;
            if (!(blk[k] & 0xf0))
                blk[k] |= 0x80;
        }
        if (zp->rule != FMT_SR_NONE)
            patch_block(blk, 0, zp, b);
        wr_bytes(w, blk, sizeof blk);
    }
}

/* nblocks Q8_0 blocks (2-byte f16 scale + 32 int8 each). */
static void wr_q8_0(wr *w, uint64_t *rng, uint64_t nblocks, float sd, const zpatch *zp)
{
    const float base = sd / 73.3f; /* sd of q, uniform -127..127 */
    for (uint64_t b = 0; b < nblocks; b++) {
        uint8_t blk[34];
        uint64_t r[5];
        for (int k = 0; k < 5; k++)
            r[k] = fmt_splitmix64(rng);
        float d = base * (0.75f + 0.5f * (float)(r[4] >> 40) * (1.0f / 16777216.0f));
        uint16_t h = f32_to_f16(d);
        memcpy(blk, &h, 2);
        memcpy(blk + 2, r, 32);
        for (int k = 2; k < 34; k++) /* -128 is not a value ggml's quantiser makes */
            if (blk[k] == 0x80)
                blk[k] = 0x81;
        if (zp->rule != FMT_SR_NONE)
            patch_block(blk, 1, zp, b);
        wr_bytes(w, blk, sizeof blk);
    }
}

/* A weight of sd sd, near normal: Irwin-Hall of 4 uniforms. */
static float draw(uint64_t *rng, float sd)
{
    float acc = 0;
    for (int k = 0; k < 4; k++)
        acc += (float)(fmt_splitmix64(rng) >> 40) * (1.0f / 16777216.0f);
    return (acc - 2.0f) * sd * 1.7320508f;
}

static void wr_f32(wr *w, uint64_t *rng, uint64_t n, float fill, float sd,
                   const zpatch *zp)
{
    for (uint64_t i = 0; i < n; i++) {
        float v = fill;
        if (sd > 0)
            v = fill + draw(rng, sd);   /* about fill (0 but for the families' norms) */
        if (zp->rule == FMT_SR_ROUTER && i % zp->ne0 == zp->z)
            v = fmt_synth_zipf_bias(zp->seed, zp->layer, (unsigned)(i / zp->ne0),
                                    zp->n_exp, zp->zipf);
        wr_bytes(w, &v, 4);
    }
}

/* rows rows of ne0 weights of sd sd, drawn as floats, --routing zipf's
 * patch applied to the floats (so only approximately after quantising,
 * where the drawn blocks of wr_q4_0 / wr_q8_0 hold it exactly), then
 * encoded as dtype the way llama-quantize encodes (kern_src_quant).  f and
 * out hold a row of floats and of dtype's bytes.  0, or -1 when a row does
 * not quantise. */
static int wr_rows(wr *w, uint64_t *rng, uint64_t rows, uint64_t ne0, float sd,
                   const zpatch *zp, int dtype, float *f, uint8_t *out)
{
    const size_t rb = (size_t)fmt_dtype_size(dtype, ne0);
    for (uint64_t r = 0; r < rows; r++) {
        for (uint64_t i = 0; i < ne0; i++)
            f[i] = draw(rng, sd);
        if (zp->rule == FMT_SR_ROW0 && r % zp->ne1 == zp->z) {
            memset(f, 0, (size_t)ne0 * sizeof *f);
        } else if (zp->rule == FMT_SR_CONST) {  /* c alone in its block of 32 */
            memset(f + zp->z / 32 * 32, 0, 32 * sizeof *f);
            f[zp->z] = FMT_SYNTH_ZC(zp->z + 1);
        } else if (zp->rule == FMT_SR_COL0) {
            f[zp->z] = 0.0f;
        }
        if (kern_src_quant((enum kern_src)fmt_dtype_src(dtype), f, (size_t)ne0, out))
            return -1;
        wr_bytes(w, out, rb);
    }
    return 0;
}

/* ---- the tensor list ---------------------------------------------------- */
typedef struct tdesc {
    char     name[48];
    int      dtype;         /* enum fmt_dtype: F32 for norms and routers */
    int      role;          /* enum fmt_role */
    unsigned layer;
    unsigned ndim;
    uint64_t ne[3];
    float    fill, sd;      /* f32: constant fill, or N(0, sd) when sd > 0 */
} tdesc;

/* Every tensor of preset g in file order, named as its family names them
 * (fmt_family.c): matrices of type mt, vectors f32.  t NULL: count only. */
static size_t tensor_list(const fmt_synth_geom *g, uint32_t vocab, int mt, tdesc *t,
                          float zipf)
{
    size_t n = 0;
    const uint64_t d = g->dim, H = g->n_heads, q = H * g->head_dim,
                   kv = (uint64_t)g->n_kv * g->head_dim, E = g->n_exp, ff = g->ffn;
    const uint64_t R = g->mla_rank, rd = g->rope_dims;
    const float sd = 0.02f, F = FMT_DT_F32, qk_sd = g->qk_sd > 0.0f ? g->qk_sd : sd;
    const unsigned fe = g->feat;
    const char *arch = g->arch ? g->arch : "llama";
    const fmt_family *fam = fmt_family_by_arch(arch, strlen(arch));
    const char *names[FMT_NROLES];
    fmt_family_names(&fmt_gguf_role_names, fam ? fam->gguf_names : NULL, names);
    unsigned layer = 0;
    /* a tensor of role r: its dims (a, b, c; rank nd), type, fill or sd */
#define ADD(r_, dt_, nd_, a_, b_, c_, fill_, sd_) do { \
        if (t) { \
            snprintf(t[n].name, sizeof t[n].name, names[r_], layer); \
            t[n].dtype = (int)(dt_); t[n].ndim = nd_; \
            t[n].role = r_; t[n].layer = layer; \
            t[n].ne[0] = a_; t[n].ne[1] = b_; t[n].ne[2] = c_; \
            t[n].fill = fill_; t[n].sd = sd_; \
        } \
        n++; \
    } while (0)
    ADD(FMT_R_TOK_EMBD, mt, 2, d, vocab, 1, 0, zipf > 0 ? FMT_SYNTH_ZIPF_EMBD_SD : sd);
    ADD(FMT_R_OUT_NORM, F, 1, d, 1, 1, 1.0f, 0);
    if (!g->tied)
        ADD(FMT_R_OUTPUT, mt, 2, d, vocab, 1, 0, sd);
    if (fe & FMT_SG_LONGROPE) {     /* LongRoPE divisors, near 1 */
        unsigned nr = (g->rope_dims ? g->rope_dims : g->head_dim) / 2;
        ADD(FMT_R_ROPE_SHORT, F, 1, nr, 1, 1, 1.0f, 0.1f);
        ADD(FMT_R_ROPE_LONG, F, 1, nr, 1, 1, 4.0f, 0.5f);
    }
    for (layer = 0; layer < g->n_layers; layer++) {
        ADD(FMT_R_ATTN_NORM, F, 1, d, 1, 1, 1.0f, 0);
        if (R && g->mla_q_rank) {       /* DeepSeek-V2's latent attention */
            ADD(FMT_R_Q_A, mt, 2, d, g->mla_q_rank, 1, 0, qk_sd);
            ADD(FMT_R_Q_A_NORM, F, 1, g->mla_q_rank, 1, 1, 1.0f, 0.1f);
            ADD(FMT_R_Q_B, mt, 2, g->mla_q_rank, H * (g->mla_nope + rd), 1, 0, qk_sd);
        } else if (R) {
            ADD(FMT_R_Q, mt, 2, d, H * (g->mla_nope + rd), 1, 0, qk_sd);
        }
        if (R) {
            ADD(FMT_R_K, mt, 2, d, R + rd, 1, 0, qk_sd);
            ADD(FMT_R_KV_A_NORM, F, 1, R, 1, 1, 1.0f, 0.1f);
            ADD(FMT_R_K_B, mt, 3, g->mla_nope, R, H, 0, qk_sd);
            ADD(FMT_R_V_B, mt, 3, R, g->mla_v, H, 0, sd);
            ADD(FMT_R_O, mt, 2, H * g->mla_v, d, 1, 0, sd);
            ADD(FMT_R_FFN_NORM, F, 1, d, 1, 1, 1.0f, 0);
            if (layer < g->dense_lead) {
                ADD(FMT_R_GATE, mt, 2, d, g->dense_ffn, 1, 0, sd);
                ADD(FMT_R_UP, mt, 2, d, g->dense_ffn, 1, 0, sd);
                ADD(FMT_R_DOWN, mt, 2, g->dense_ffn, d, 1, 0, sd);
                continue;
            }
            ADD(FMT_R_ROUTER, F, 2, d, E, 1, 0, 0.2f);
            ADD(FMT_R_EXP_GATE, mt, 3, d, ff, E, 0, sd);
            ADD(FMT_R_EXP_UP, mt, 3, d, ff, E, 0, sd);
            ADD(FMT_R_EXP_DOWN, mt, 3, ff, d, E, 0, sd);
            ADD(FMT_R_SH_GATE, mt, 2, d, ff * g->n_shared, 1, 0, sd);
            ADD(FMT_R_SH_UP, mt, 2, d, ff * g->n_shared, 1, 0, sd);
            ADD(FMT_R_SH_DOWN, mt, 2, ff * g->n_shared, d, 1, 0, sd);
            continue;
        }
        if (fe & FMT_SG_FUSED) {
            ADD(FMT_R_QKV, mt, 2, d, q + 2 * kv, 1, 0, qk_sd);
        } else {
            ADD(FMT_R_Q, mt, 2, d, q, 1, 0, qk_sd);
            ADD(FMT_R_K, mt, 2, d, kv, 1, 0, qk_sd);
            ADD(FMT_R_V, mt, 2, d, kv, 1, 0, sd);
        }
        if (fe & FMT_SG_BIAS) {
            ADD(FMT_R_Q_BIAS, F, 1, q, 1, 1, 0, sd);
            ADD(FMT_R_K_BIAS, F, 1, kv, 1, 1, 0, sd);
            ADD(FMT_R_V_BIAS, F, 1, kv, 1, 1, 0, sd);
        }
        if (fe & (FMT_SG_QK_HEAD | FMT_SG_QK_FULL)) {   /* weights near 1 */
            int full = (fe & FMT_SG_QK_FULL) != 0;
            ADD(FMT_R_Q_NORM, F, 1, full ? q : g->head_dim, 1, 1, 1.0f, 0.1f);
            ADD(FMT_R_K_NORM, F, 1, full ? kv : g->head_dim, 1, 1, 1.0f, 0.1f);
        }
        if (fe & FMT_SG_SINKS)
            ADD(FMT_R_SINKS, F, 1, g->n_heads, 1, 1, 0, 1.0f);
        ADD(FMT_R_O, mt, 2, q, d, 1, 0, sd);
        if (fe & FMT_SG_BIAS)
            ADD(FMT_R_O_BIAS, F, 1, d, 1, 1, 0, sd);
        if (fe & FMT_SG_POST)
            ADD(FMT_R_ATTN_POST_NORM, F, 1, d, 1, 1, 1.0f, 0.1f);
        ADD(FMT_R_FFN_NORM, F, 1, d, 1, 1, 1.0f, 0);
        if (E == 0 && (fe & FMT_SG_FUSED)) {
            ADD(FMT_R_GATE_UP, mt, 2, d, 2 * ff, 1, 0, sd);
            ADD(FMT_R_DOWN, mt, 2, ff, d, 1, 0, sd);
        } else if (E == 0) {
            ADD(FMT_R_GATE, mt, 2, d, ff, 1, 0, sd);
            ADD(FMT_R_UP, mt, 2, d, ff, 1, 0, sd);
            ADD(FMT_R_DOWN, mt, 2, ff, d, 1, 0, sd);
        } else {
            ADD(FMT_R_ROUTER, F, 2, d, E, 1, 0, 0.2f);
            if (fe & FMT_SG_BIAS)
                ADD(FMT_R_ROUTER_BIAS, F, 1, E, 1, 1, 0, 0.2f);
            ADD(FMT_R_EXP_GATE, mt, 3, d, ff, E, 0, sd);
            ADD(FMT_R_EXP_UP, mt, 3, d, ff, E, 0, sd);
            ADD(FMT_R_EXP_DOWN, mt, 3, ff, d, E, 0, sd);
            if (fe & FMT_SG_BIAS) {
                ADD(FMT_R_EXP_GATE_BIAS, F, 2, ff, E, 1, 0, sd);
                ADD(FMT_R_EXP_UP_BIAS, F, 2, ff, E, 1, 0, sd);
                ADD(FMT_R_EXP_DOWN_BIAS, F, 2, d, E, 1, 0, sd);
            }
        }
        if (fe & FMT_SG_POST)
            ADD(FMT_R_FFN_POST_NORM, F, 1, d, 1, 1, 1.0f, 0.1f);
    }
#undef ADD
    return n;
}

static uint64_t tensor_bytes(const tdesc *t)
{
    return fmt_dtype_size(t->dtype, t->ne[0] * t->ne[1] * t->ne[2]);
}

/* Each matrix's type under llama.cpp's mix (the list was made with the
 * mix's default type); 0, or -1 with the tensor's index in *bad when no
 * type fits a matrix. */
static int mix_types(const fmt_synth_geom *g, int ftype, tdesc *t, size_t nt, size_t *bad)
{
    fmt_mix_in m;
    fmt_hparams hp;
    memset(&m, 0, sizeof m);
    memset(&hp, 0, sizeof hp);
    snprintf(hp.arch, sizeof hp.arch, "llama");
    hp.n_layers = g->n_layers;
    hp.n_experts = g->n_exp;
    hp.n_heads = g->n_heads;
    hp.n_kv_heads = g->n_kv;
    hp.mla_rank = g->mla_rank;
    fmt_mix_model(&m, &hp, g->tied, g->n_layers);
    m.ftype = ftype;
    for (size_t i = 0; i < nt; i++) {
        if (t[i].dtype == FMT_DT_F32)
            continue;
        m.role = t[i].role;
        m.layer = m.i_attn_v = t[i].layer;
        m.ne0 = t[i].ne[0];
        m.ne2 = t[i].ne[2];
        if ((t[i].dtype = fmt_mix_type(&m)) < 0) {
            *bad = i;
            return -1;
        }
    }
    return 0;
}

/* The tokenizer keys: copied from a vocabulary GGUF, or the synthetic
 * SentencePiece vocabulary; then padded to vocab tokens ("[PADn]", unused)
 * as llama.cpp's converter pads. */
static int build_vocab(fmt_kv *kv, const char *vocab_gguf, uint32_t *vocab,
                       char *err, size_t errlen)
{
    int rc;
    if (vocab_gguf) {
        fmt_gguf *vg = NULL;
        if ((rc = fmt_gguf_open(&vg, vocab_gguf, err, errlen)))
            return rc;
        const fmt_kv *src = fmt_gguf_kv(vg);
        for (size_t i = 0; i < fmt_kv_count(src); i++) {
            size_t kl;
            const char *k = fmt_kv_key(src, i, &kl);
            char key[256];
            if (kl < 10 || kl >= sizeof key || memcmp(k, "tokenizer.", 10))
                continue;
            memcpy(key, k, kl);
            key[kl] = '\0';
            if (fmt_kv_copy(kv, src, key)) {
                fmt_gguf_close(vg);
                fmt_err(err, errlen, "%s: out of memory", vocab_gguf);
                return FMT_ENOMEM;
            }
        }
        fmt_gguf_close(vg);
        uint64_t n = fmt_kv_arr_len(kv, "tokenizer.ggml.tokens");
        if (n == 0) {
            fmt_err(err, errlen, "%s: no tokenizer.ggml.tokens in the vocabulary",
                    vocab_gguf);
            return FMT_EFORMAT;
        }
        if (n > *vocab)
            *vocab = (uint32_t)n; /* a small preset takes the file's vocabulary */
    } else if (fmt_synth_vocab(kv, *vocab)) {
        fmt_err(err, errlen, "out of memory");
        return FMT_ENOMEM;
    }
    fmt_src tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.path = (char *)(vocab_gguf ? vocab_gguf : "synthetic vocabulary");
    tmp.kv = tmp.kv_own = kv;
    return fmt_src_fit_vocab(&tmp, *vocab, 1, 0, err, errlen);
}

/* The GGML type of the matrices before any mix (-1 when q names none a
 * GGUF of ours holds), and llama.cpp's general.file_type. */
static int base_type(const fmt_quant *q, int *file_type)
{
    static const struct { int tile, dt, ft; } uni[] = {
        { KERN_Q4_0, FMT_DT_Q4_0, 2 }, { KERN_Q8_0, FMT_DT_Q8_0, 7 },
        { KERN_F32, FMT_DT_F32, 0 }, { KERN_F16, FMT_DT_F16, 1 },
    };
    if (q->ftype != FMT_FT_NONE) {
        *file_type = fmt_ftype_llama(q->ftype);
        return fmt_ftype_dtype(q->ftype);
    }
    for (size_t i = 0; i < sizeof uni / sizeof *uni; i++)
        if (q->tile == uni[i].tile) {
            *file_type = uni[i].ft;
            return uni[i].dt;
        }
    return -1;
}

/* Roles whose tensors stay f32 whatever -q says: norms, biases, sinks,
 * routers, RoPE divisors. */
static int is_vector(int role)
{
    switch (role) {
    case FMT_R_ATTN_NORM: case FMT_R_FFN_NORM: case FMT_R_OUT_NORM: case FMT_R_ROUTER:
    case FMT_R_Q_BIAS: case FMT_R_K_BIAS: case FMT_R_V_BIAS: case FMT_R_Q_NORM:
    case FMT_R_K_NORM: case FMT_R_ATTN_POST_NORM: case FMT_R_FFN_POST_NORM: case FMT_R_SINKS:
    case FMT_R_O_BIAS: case FMT_R_ROUTER_BIAS: case FMT_R_EXP_GATE_BIAS:
    case FMT_R_EXP_UP_BIAS: case FMT_R_EXP_DOWN_BIAS: case FMT_R_ROPE_SHORT:
    case FMT_R_ROPE_LONG: case FMT_R_KV_A_NORM: case FMT_R_Q_A_NORM:
        return 1;
    default:
        return 0;
    }
}

/* The keys of g's architecture ("<arch>.block_count" ...) and its
 * family's (fmt_family.c's GGUF readers take them back).  0, or
 * FMT_ENOMEM. */
static int arch_keys(const fmt_synth_geom *g, fmt_kv *kv, uint32_t vocab, uint32_t file_type,
                     float zipf)
{
    const char *a = g->arch ? g->arch : "llama";
    char k[96];
    int bad = 0;
#define KU(suf, v) (snprintf(k, sizeof k, "%s." suf, a), bad |= fmt_kv_set_u32(kv, k, v))
#define KF(suf, v) (snprintf(k, sizeof k, "%s." suf, a), bad |= fmt_kv_set_f32(kv, k, v))
    bad |= fmt_kv_set_str(kv, "general.architecture", a, strlen(a));
    bad |= fmt_kv_set_str(kv, "general.name", g->name, strlen(g->name));
    /* llama.cpp's LLAMA_FTYPE_* of the file */
    bad |= fmt_kv_set_u32(kv, "general.file_type", file_type);
    bad |= fmt_kv_set_u32(kv, "general.alignment", 32);
    KU("vocab_size", vocab);
    KU("context_length", g->ctx);
    KU("embedding_length", g->dim);
    KU("block_count", g->n_layers);
    KU("feed_forward_length", g->mla_rank ? g->dense_ffn : g->ffn);
    KU("attention.head_count", g->n_heads);
    KU("attention.head_count_kv", g->n_kv);
    KU("attention.key_length", g->head_dim);
    KU("attention.value_length", g->mla_rank ? g->mla_rank : g->head_dim);
    if (g->mla_rank) {              /* DeepSeek-V2, as its converter writes it */
        KU("attention.kv_lora_rank", g->mla_rank);
        if (g->mla_q_rank)
            KU("attention.q_lora_rank", g->mla_q_rank);
        KU("attention.key_length_mla", g->mla_nope + g->rope_dims);
        KU("attention.value_length_mla", g->mla_v);
        KU("leading_dense_block_count", g->dense_lead);
        KU("expert_shared_count", g->n_shared);
        KF("expert_weights_scale", 1.0f);
        KU("expert_gating_func", 1);
        if (g->groups) {
            KU("expert_group_count", g->groups);
            KU("expert_group_used_count", g->groups_used);
        }
        if (g->mscale_all > 0.0f)
            KF("rope.scaling.yarn_log_multiplier", (float)(0.1 * (double)g->mscale_all));
    }
    KU("rope.dimension_count", g->rope_dims ? g->rope_dims : g->head_dim);
    KF("rope.freq_base", g->theta);
    KF("attention.layer_norm_rms_epsilon", g->eps);
    if (g->n_exp) {
        bad |= fmt_synth_routing_kv(kv, zipf);
        KU("expert_count", g->n_exp);
        KU("expert_used_count", g->top_k);
        /* (llama's experts take feed_forward_length; the Llama presets'
         * files keep the bytes they always had) */
        if (g->arch)
            KU("expert_feed_forward_length", g->ffn);
    }
    if (g->swa)
        KU("attention.sliding_window", g->swa);
    if (g->softcap > 0.0f)
        KF("final_logit_softcapping", g->softcap);
    if (g->attn_softcap > 0.0f)
        KF("attn_logit_softcapping", g->attn_softcap);
    if (g->rope_factor > 0.0f) {
        /* linear, or YaRN where an original context is given */
        const char *ty = g->rope_orig ? "yarn" : "linear";
        snprintf(k, sizeof k, "%s.rope.scaling.type", a);
        bad |= fmt_kv_set_str(kv, k, ty, strlen(ty));
        KF("rope.scaling.factor", g->rope_factor);
    }
    if (g->rope_orig)
        KU("rope.scaling.original_context_length", g->rope_orig);
    if (g->feat & FMT_SG_LONGROPE) {    /* the converter's attention factor */
        float sc = (float)g->ctx / (float)g->rope_orig;
        KF("rope.scaling.attn_factor",
           sc > 1.0f ? sqrtf(1.0f + logf(sc) / logf((float)g->rope_orig)) : 1.0f);
    }
#undef KU
#undef KF
    return bad ? FMT_ENOMEM : 0;
}

/* The preset's geometry: a bench preset's, or a llama one's; else 1 with
 * the error naming the presets a GGUF can hold. */
static int gguf_geom(const char *preset, fmt_synth_geom *g, char *err, size_t errlen)
{
    const fmt_synth_geom *bg = fmt_synth_bench_find(preset);
    if (bg) {
        *g = *bg;
        return 0;
    }
    if (!fmt_synth_llama_geom(preset, g))
        return 0;
    char list[1024];
    size_t o = 0;
    list[0] = '\0';
    for (unsigned i = 0; fmt_synth_bench_name(i) && o < sizeof list; i++)
        o += (size_t)snprintf(list + o, sizeof list - o, ", %s", fmt_synth_bench_name(i));
    fmt_err(err, errlen, "preset '%s' cannot be written as GGUF (llama.cpp "
            "has no such architecture); GGUF presets: tiny-mixtral%s", preset, list);
    return 1;
}

/* The GGUF header: magic, version 3, the counts, the metadata kv, each of
 * the nt tensors' infos (data offsets 32-aligned), padded to 32 bytes: 0,
 * or -1 out of memory. */
static int wr_header(wr *w, const fmt_kv *kv, const tdesc *t, size_t nt)
{
    size_t kvn = fmt_kv_write(kv, NULL);
    uint8_t *kvb = malloc(kvn ? kvn : 1);
    if (!kvb)
        return -1;
    fmt_kv_write(kv, kvb);
    wr_bytes(w, "GGUF", 4);
    wr_u32(w, 3);
    wr_u64(w, nt);
    wr_u64(w, fmt_kv_count(kv));
    wr_bytes(w, kvb, kvn);
    free(kvb);
    uint64_t off = 0;
    for (size_t i = 0; i < nt; i++) {
        wr_str(w, t[i].name);
        wr_u32(w, t[i].ndim);
        for (unsigned k = 0; k < t[i].ndim; k++)
            wr_u64(w, t[i].ne[k]);
        wr_u32(w, (uint32_t)t[i].dtype);
        wr_u64(w, off);
        off += (tensor_bytes(&t[i]) + 31) / 32 * 32;
    }
    wr_pad(w, 32);
    return 0;
}

int fmt_synth_write_gguf(const char *preset, const char *path,
                         const char *vocab_gguf, uint64_t seed, const fmt_quant *q,
                         float zipf, fmt_progress_fn progress, void *ud,
                         char *err, size_t errlen)
{
    fmt_synth_geom g;
    if (gguf_geom(preset, &g, err, errlen))
        return FMT_EARG;
    int file_type = 0, mt = base_type(q, &file_type);
    /* q4_0 and q8_0 are drawn as blocks (fast, and their files keep the
     * bytes they always had); everything else is drawn as floats and
     * quantised as llama-quantize quantises */
    const int drawn = q->ftype == FMT_FT_NONE && (mt == FMT_DT_Q4_0 || mt == FMT_DT_Q8_0);
    if (mt < 0) {
        fmt_err(err, errlen, "%s: a synthetic GGUF holds f32, f16, q8_0, q4_0 or a "
                "llama.cpp mix, not %s", path, q->tile >= 0
                ? kern_type_name((enum kern_type)q->tile) : "nothing");
        return FMT_EARG;
    }
    if (zipf > 0 && (g.n_exp == 0 || g.n_exp > FMT_SYNTH_MAX_EXP)) {
        fmt_err(err, errlen, "%s: --routing zipf needs a preset with 1 to %u experts, "
                "not %u", preset, FMT_SYNTH_MAX_EXP, g.n_exp);
        return FMT_EARG;
    }
    uint32_t vocab = g.vocab;
    float *fr = NULL;
    uint8_t *qr = NULL;
    fmt_kv *kv = fmt_kv_new();
    tdesc *t = NULL;
    wr w = { 0 };
    fmt_out out = { 0 };
    int rc = FMT_ENOMEM;
    if (!kv)
        goto out;
    if ((rc = build_vocab(kv, vocab_gguf, &vocab, err, errlen)))
        goto out;
    rc = FMT_ENOMEM;
    /* the architecture's hyper-parameters, as llama.cpp reads them */
    const char *nm = g.name;
    if ((rc = arch_keys(&g, kv, vocab, (uint32_t)file_type, zipf)) < 0)
        goto out;
    rc = FMT_ENOMEM;
    if (mt != FMT_DT_F32 && mt != FMT_DT_F16 &&
        (g.dim % 32 || g.ffn % 32 || ((uint64_t)g.n_heads * g.head_dim) % 32)) {
        fmt_err(err, errlen, "%s: quantised matrices need rows that are multiples of 32",
                nm);
        rc = FMT_EARG;
        goto out;
    }

    size_t nt = tensor_list(&g, vocab, mt, NULL, zipf), bad = 0;
    if (!(t = calloc(nt, sizeof *t)) || !(w.buf = malloc(WR_CAP)))
        goto out;
    tensor_list(&g, vocab, mt, t, zipf);
    if (q->ftype != FMT_FT_NONE && mix_types(&g, q->ftype, t, nt, &bad)) {
        fmt_err(err, errlen, "%s: tensor %s: no type of llama.cpp's %s mix fits its "
                "%llu columns", nm, t[bad].name, fmt_ftype_name(q->ftype),
                (unsigned long long)t[bad].ne[0]);
        rc = FMT_EARG;
        goto out;
    }
    uint64_t ne0_max = 0;
    for (size_t i = 0; i < nt; i++)
        ne0_max = t[i].ne[0] > ne0_max ? t[i].ne[0] : ne0_max;
    if (!drawn && (!(fr = malloc(ne0_max * sizeof *fr)) || !(qr = malloc(ne0_max * 4))))
        goto out;
    uint64_t total = 0;
    for (size_t i = 0; i < nt; i++)
        total += (tensor_bytes(&t[i]) + 31) / 32 * 32;

    if ((rc = fmt_out_open(&out, path, err, errlen)))
        goto out;
    rc = FMT_ENOMEM;
    w.f = out.f;
    if (wr_header(&w, kv, t, nt))
        goto out;
    uint64_t rng = seed ? seed : 0x5eedull, done = 0;
    for (size_t i = 0; i < nt && !w.bad; i++) {
        uint64_t n = t[i].ne[0] * t[i].ne[1] * t[i].ne[2];
        zpatch zp = { FMT_SR_NONE, t[i].ne[0], t[i].ne[1], g.dim - 1u, 0, g.n_exp,
                      seed ? seed : 0x5eedull, zipf };
        if (zipf > 0)
            zp.rule = fmt_synth_rule(t[i].name, &zp.layer);
        if (is_vector(t[i].role))
            wr_f32(&w, &rng, n, t[i].fill, t[i].sd, &zp);
        else if (drawn && t[i].dtype == FMT_DT_Q8_0)
            wr_q8_0(&w, &rng, n / 32, t[i].sd, &zp);
        else if (drawn)
            wr_q4_0(&w, &rng, n / 32, t[i].sd, &zp);
        else if (wr_rows(&w, &rng, n / t[i].ne[0], t[i].ne[0], t[i].sd, &zp, t[i].dtype,
                         fr, qr)) {
            fmt_err(err, errlen, "%s: tensor %s does not quantise to %s", path, t[i].name,
                    fmt_dtype_name(t[i].dtype));
            rc = FMT_EFORMAT;
            goto out;
        }
        wr_pad(&w, 32);
        done += (tensor_bytes(&t[i]) + 31) / 32 * 32;
        if (progress)
            progress(ud, "synth", done, total);
    }
    wr_flush(&w);
    if (w.bad) {
        fmt_err(err, errlen, "%s: write failed: %s", path, strerror(w.bad));
        rc = FMT_EIO;
        goto out;
    }
    rc = fmt_out_commit(&out, err, errlen);
out:
    if (rc == FMT_ENOMEM && err && !*err)
        fmt_err(err, errlen, "%s: out of memory", path);
    fmt_out_abort(&out);
    free(w.buf);
    free(fr);
    free(qr);
    free(t);
    fmt_kv_free(kv);
    return rc;
}

/* A bench preset as a source: the GGUF goes to an unlinked temporary file
 * (its mapping keeps the bytes alive until the source is closed), so a
 * 7B-parameter .cflow never needs its f32 weights in memory. */
int fmt_synth_bench_open(fmt_src **out, const char *preset, uint64_t seed,
                         float zipf, char *err, size_t errlen)
{
    const char *dir = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/cflow-synth-XXXXXX.gguf",
             dir && *dir ? dir : "/tmp");
    int fd = mkstemps(path, 5);
    if (fd < 0) {
        fmt_err(err, errlen, "%s: cannot create a temporary file: %s", path,
                strerror(errno));
        return FMT_EIO;
    }
    close(fd);
    const fmt_quant q4 = { KERN_Q4_0, FMT_FT_NONE };
    int rc = fmt_synth_write_gguf(preset, path, NULL, seed, &q4, zipf, NULL, NULL,
                                  err, errlen);
    if (rc == 0)
        rc = fmt_src_open(out, path, NULL, err, errlen);
    unlink(path);
    return rc;
}
