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
 * OLMoE and Qwen3-MoE are written in that llama/Mixtral form at their real
 * sizes: their per-head q/k norms (a few KB) are left out, every byte that
 * matters for bandwidth is there.
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

static void wr_f32(wr *w, uint64_t *rng, uint64_t n, float fill, float sd,
                   const zpatch *zp)
{
    for (uint64_t i = 0; i < n; i++) {
        float v = fill;
        if (sd > 0) { /* Irwin-Hall of 4 uniforms */
            float acc = 0;
            for (int k = 0; k < 4; k++)
                acc += (float)(fmt_splitmix64(rng) >> 40) * (1.0f / 16777216.0f);
            v = (acc - 2.0f) * sd * 1.7320508f;
        }
        if (zp->rule == FMT_SR_ROUTER && i % zp->ne0 == zp->z)
            v = fmt_synth_zipf_bias(zp->seed, zp->layer, (unsigned)(i / zp->ne0),
                                    zp->n_exp, zp->zipf);
        wr_bytes(w, &v, 4);
    }
}

/* ---- the tensor list ---------------------------------------------------- */
typedef struct tdesc {
    char     name[48];
    int      dtype;         /* FMT_DT_F32, FMT_DT_Q4_0 or FMT_DT_Q8_0 */
    unsigned ndim;
    uint64_t ne[3];
    float    fill, sd;      /* f32: constant fill, or N(0, sd) when sd > 0 */
} tdesc;

static size_t tensor_list(const fmt_synth_geom *g, uint32_t vocab, int mt, tdesc *t,
                          float zipf)
{
    size_t n = 0;
    uint64_t d = g->dim, q = (uint64_t)g->n_heads * g->head_dim,
             kv = (uint64_t)g->n_kv * g->head_dim;
    const float sd = 0.02f;
#define ADD(nm_, dt_, nd_, a_, b_, c_, fill_, sd_) do { \
        if (t) { \
            snprintf(t[n].name, sizeof t[n].name, "%s", nm_); \
            t[n].dtype = dt_; t[n].ndim = nd_; \
            t[n].ne[0] = a_; t[n].ne[1] = b_; t[n].ne[2] = c_; \
            t[n].fill = fill_; t[n].sd = sd_; \
        } \
        n++; \
    } while (0)
    char nm[48];
    ADD("token_embd.weight", mt, 2, d, vocab, 1, 0, zipf > 0 ? FMT_SYNTH_ZIPF_EMBD_SD : sd);
    ADD("output_norm.weight", FMT_DT_F32, 1, d, 1, 1, 1.0f, 0);
    if (!g->tied)
        ADD("output.weight", mt, 2, d, vocab, 1, 0, sd);
    for (unsigned l = 0; l < g->n_layers; l++) {
#define L(suffix, dt_, nd_, a_, b_, c_, fill_, sd_) do { \
        snprintf(nm, sizeof nm, "blk.%u." suffix ".weight", l); \
        ADD(nm, dt_, nd_, a_, b_, c_, fill_, sd_); \
    } while (0)
        L("attn_norm", FMT_DT_F32, 1, d, 1, 1, 1.0f, 0);
        L("attn_q", mt, 2, d, q, 1, 0, sd);
        L("attn_k", mt, 2, d, kv, 1, 0, sd);
        L("attn_v", mt, 2, d, kv, 1, 0, sd);
        L("attn_output", mt, 2, q, d, 1, 0, sd);
        L("ffn_norm", FMT_DT_F32, 1, d, 1, 1, 1.0f, 0);
        if (g->n_exp == 0) {
            L("ffn_gate", mt, 2, d, g->ffn, 1, 0, sd);
            L("ffn_up", mt, 2, d, g->ffn, 1, 0, sd);
            L("ffn_down", mt, 2, g->ffn, d, 1, 0, sd);
        } else {
            L("ffn_gate_inp", FMT_DT_F32, 2, d, g->n_exp, 1, 0, 0.2f);
            L("ffn_gate_exps", mt, 3, d, g->ffn, g->n_exp, 0, sd);
            L("ffn_up_exps", mt, 3, d, g->ffn, g->n_exp, 0, sd);
            L("ffn_down_exps", mt, 3, g->ffn, d, g->n_exp, 0, sd);
        }
#undef L
    }
#undef ADD
    return n;
}

static uint64_t tensor_bytes(const tdesc *t)
{
    uint64_t n = t->ne[0] * t->ne[1] * t->ne[2];
    return t->dtype == FMT_DT_F32 ? n * 4 : n / 32 * (t->dtype == FMT_DT_Q8_0 ? 34 : 18);
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

/* The llama architecture's hyper-parameters of geometry g into kv, as
 * llama.cpp reads them (mt: the matrices' GGUF type; the routing key of
 * a zipf preset); nonzero when out of memory. */
static int llama_kv(fmt_kv *kv, const fmt_synth_geom *g, uint32_t vocab, int mt, float zipf)
{
    if (fmt_kv_set_str(kv, "general.architecture", "llama", 5) ||
        fmt_kv_set_str(kv, "general.name", g->name, strlen(g->name)) ||
        /* llama.cpp's MOSTLY_Q8_0 and MOSTLY_Q4_0 */
        fmt_kv_set_u32(kv, "general.file_type", mt == FMT_DT_Q8_0 ? 7 : 2) ||
        fmt_kv_set_u32(kv, "general.alignment", 32) ||
        fmt_kv_set_u32(kv, "llama.vocab_size", vocab) ||
        fmt_kv_set_u32(kv, "llama.context_length", g->ctx) ||
        fmt_kv_set_u32(kv, "llama.embedding_length", g->dim) ||
        fmt_kv_set_u32(kv, "llama.block_count", g->n_layers) ||
        fmt_kv_set_u32(kv, "llama.feed_forward_length", g->ffn) ||
        fmt_kv_set_u32(kv, "llama.attention.head_count", g->n_heads) ||
        fmt_kv_set_u32(kv, "llama.attention.head_count_kv", g->n_kv) ||
        fmt_kv_set_u32(kv, "llama.attention.key_length", g->head_dim) ||
        fmt_kv_set_u32(kv, "llama.attention.value_length", g->head_dim) ||
        fmt_kv_set_u32(kv, "llama.rope.dimension_count", g->head_dim) ||
        fmt_kv_set_f32(kv, "llama.rope.freq_base", g->theta) ||
        fmt_kv_set_f32(kv, "llama.attention.layer_norm_rms_epsilon", g->eps))
        return -1;
    if (g->n_exp &&
        (fmt_synth_routing_kv(kv, zipf) ||
         fmt_kv_set_u32(kv, "llama.expert_count", g->n_exp) ||
         fmt_kv_set_u32(kv, "llama.expert_used_count", g->top_k)))
        return -1;
    return 0;
}

int fmt_synth_write_gguf(const char *preset, const char *path,
                         const char *vocab_gguf, uint64_t seed, int quant,
                         float zipf, fmt_progress_fn progress, void *ud,
                         char *err, size_t errlen)
{
    fmt_synth_geom g;
    const fmt_synth_geom *bg = fmt_synth_bench_find(preset);
    if (bg)
        g = *bg;
    else if (fmt_synth_llama_geom(preset, &g)) {
        fmt_err(err, errlen, "preset '%s' cannot be written as GGUF (llama.cpp "
                "has no such architecture); GGUF presets: tiny-mixtral, "
                "tinyllama-1.1b, llama2-7b, olmoe-1b-7b, qwen3-30b-a3b", preset);
        return FMT_EARG;
    }
    if (quant != KERN_Q4_0 && quant != KERN_Q8_0) {
        fmt_err(err, errlen, "%s: a GGUF holds q4_0 or q8_0 matrices, not %s", path,
                kern_type_name(quant));
        return FMT_EARG;
    }
    if (zipf > 0 && (g.n_exp == 0 || g.n_exp > FMT_SYNTH_MAX_EXP)) {
        fmt_err(err, errlen, "%s: --routing zipf needs a preset with 1 to %u experts, "
                "not %u", preset, FMT_SYNTH_MAX_EXP, g.n_exp);
        return FMT_EARG;
    }
    int mt = quant == KERN_Q8_0 ? FMT_DT_Q8_0 : FMT_DT_Q4_0;
    uint32_t vocab = g.vocab;
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
    const char *nm = g.name;
    if (llama_kv(kv, &g, vocab, mt, zipf))
        goto out;
    if (g.dim % 32 || g.ffn % 32 || ((uint64_t)g.n_heads * g.head_dim) % 32) {
        fmt_err(err, errlen, "%s: %s needs rows that are multiples of 32", nm,
                kern_type_name(quant));
        rc = FMT_EARG;
        goto out;
    }

    size_t nt = tensor_list(&g, vocab, mt, NULL, zipf);
    if (!(t = calloc(nt, sizeof *t)) || !(w.buf = malloc(WR_CAP)))
        goto out;
    tensor_list(&g, vocab, mt, t, zipf);
    uint64_t total = 0;
    for (size_t i = 0; i < nt; i++)
        total += (tensor_bytes(&t[i]) + 31) / 32 * 32;

    if ((rc = fmt_out_open(&out, path, err, errlen)))
        goto out;
    rc = FMT_ENOMEM;
    w.f = out.f;
    size_t kvn = fmt_kv_write(kv, NULL);
    uint8_t *kvb = malloc(kvn ? kvn : 1);
    if (!kvb)
        goto out;
    fmt_kv_write(kv, kvb);
    wr_bytes(&w, "GGUF", 4);
    wr_u32(&w, 3);
    wr_u64(&w, nt);
    wr_u64(&w, fmt_kv_count(kv));
    wr_bytes(&w, kvb, kvn);
    free(kvb);
    uint64_t off = 0;
    for (size_t i = 0; i < nt; i++) {
        wr_str(&w, t[i].name);
        wr_u32(&w, t[i].ndim);
        for (unsigned k = 0; k < t[i].ndim; k++)
            wr_u64(&w, t[i].ne[k]);
        wr_u32(&w, (uint32_t)t[i].dtype);
        wr_u64(&w, off);
        off += (tensor_bytes(&t[i]) + 31) / 32 * 32;
    }
    wr_pad(&w, 32);
    uint64_t rng = seed ? seed : 0x5eedull, done = 0;
    for (size_t i = 0; i < nt && !w.bad; i++) {
        uint64_t n = t[i].ne[0] * t[i].ne[1] * t[i].ne[2];
        zpatch zp = { FMT_SR_NONE, t[i].ne[0], t[i].ne[1], g.dim - 1u, 0, g.n_exp,
                      seed ? seed : 0x5eedull, zipf };
        if (zipf > 0)
            zp.rule = fmt_synth_rule(t[i].name, &zp.layer);
        if (t[i].dtype == FMT_DT_F32)
            wr_f32(&w, &rng, n, t[i].fill, t[i].sd, &zp);
        else if (t[i].dtype == FMT_DT_Q8_0)
            wr_q8_0(&w, &rng, n / 32, t[i].sd, &zp);
        else
            wr_q4_0(&w, &rng, n / 32, t[i].sd, &zp);
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
    int rc = fmt_synth_write_gguf(preset, path, NULL, seed, KERN_Q4_0, zipf, NULL, NULL,
                                  err, errlen);
    if (rc == 0)
        rc = fmt_src_open(out, path, NULL, err, errlen);
    unlink(path);
    return rc;
}
