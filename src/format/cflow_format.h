/*
 * cflow_format.h — the public face of src/format: reading model files
 * (GGUF, llama2.c checkpoints, Hugging Face safetensors directories),
 * converting them to the tile-native .cflow format, and reading .cflow.
 *
 * Nothing here prints.  Every function that can fail returns 0 on success
 * or a negative FMT_E* code, and writes one line (no newline) naming the
 * file and the problem into err[errlen].
 *
 * ------------------------------------------------------------------------
 * The .cflow v5 file (every byte documented in cflow(5); little endian)
 * ------------------------------------------------------------------------
 *   [0, 88)        GlobalHeader (struct fmt_header_disk below)
 *   layer table    (n_layers + 1) entries of FMT_NSLOT 32-byte slot
 *                  descriptors; entry n_layers holds the globals
 *                  (token embedding, output norm, output head)
 *   sections       per layer, in compute order: attn norm (f32), the QKV
 *                  tile stream (Q, K, V interleaved by 128-row output
 *                  stripe), QKV bias (f32), O stream, FFN norm, the
 *                  gate/up stream (interleaved by stripe), down stream,
 *                  router (f32), expert offset table, expert tiles; then
 *                  the vocabulary tiles (embedding, output head)
 *   metadata       u64 count, then count key/values in GGUF v3 KV encoding
 *                  (tokenizer.*, general.*, cflow.*), see fmt_kv
 *
 * A tile stream is a run of tiles, each a 16-byte TileHeader (fmt_tile_disk)
 * followed by its payload (kern.h documents payload layout).  Streams start
 * on 64-byte boundaries.  The reader validates every header, slot, offset
 * and tile against the file size before anything is used, and decodes the
 * tile headers into fmt_tile arrays so the engine never re-parses them.
 *
 * "The report" (with its section numbers) is the Pipeline-Native
 * Transformers report.
 */
#ifndef CFLOW_FORMAT_H
#define CFLOW_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kern.h"

/* ---- errors ------------------------------------------------------------ */
enum {
    FMT_OK = 0,
    FMT_EIO = -1,      /* open/read/mmap/write failed */
    FMT_EFORMAT = -2,  /* the file is not what it claims, or is damaged */
    FMT_EUNSUP = -3,   /* well-formed, but something we do not support */
    FMT_ENOMEM = -4,
    FMT_EARG = -5      /* caller error */
};

/* Log/progress callbacks owned by the front end; library code never prints. */
typedef void (*fmt_log_fn)(void *ud, int level /*0 info, 1 warn*/,
                           const char *msg);
typedef void (*fmt_progress_fn)(void *ud, const char *what, uint64_t done,
                                uint64_t total);

/* ---- input files ------------------------------------------------------ */
/* Open path for reading only when it is a regular file.  A FIFO, a
 * directory or a device is refused before any open that could block (a
 * FIFO nobody writes to blocks open(2) for ever; /dev/zero never ends):
 * "PATH: not a regular file (it is a FIFO)".  Returns the descriptor
 * (blocking reads again) with the file's size in *size, or a FMT_E* code. */
int fmt_open_regular(const char *path, uint64_t *size, char *err, size_t errlen);
/* The first n bytes (fewer when the file is shorter; *got says how many)
 * of the regular file path, opened as fmt_open_regular does. */
int fmt_file_head(const char *path, void *buf, size_t n, size_t *got,
                  uint64_t *size, char *err, size_t errlen);
/* What a file of st_mode mode is, in words: "a FIFO", "a directory",
 * "a character device", ... ("a regular file" for one). */
const char *fmt_file_kind(unsigned mode);

/* ======================================================================= */
/* fmt_kv: typed key/value store in GGUF v3 encoding                        */
/* ======================================================================= */
/*
 * The GGUF header's metadata, the .cflow metadata section and tokenizer
 * data read from llama2.c or Hugging Face files all land in an fmt_kv, so
 * one tokenizer loader serves every source.  Keys use GGUF's names
 * ("tokenizer.ggml.tokens", "tokenizer.chat_template", ...).  Values parsed
 * from a mapped file point into it (the kv must not outlive the mapping);
 * values set by fmt_kv_set_* are owned by the kv.
 */
enum fmt_kv_type { /* GGUF value types; numbers are the file's */
    FMT_KV_U8 = 0, FMT_KV_I8 = 1, FMT_KV_U16 = 2, FMT_KV_I16 = 3,
    FMT_KV_U32 = 4, FMT_KV_I32 = 5, FMT_KV_F32 = 6, FMT_KV_BOOL = 7,
    FMT_KV_STR = 8, FMT_KV_ARR = 9, FMT_KV_U64 = 10, FMT_KV_I64 = 11,
    FMT_KV_F64 = 12
};

typedef struct fmt_kv fmt_kv;

fmt_kv *fmt_kv_new(void);
void    fmt_kv_free(fmt_kv *kv);
/* Parse count entries from p[0..n); *used gets the bytes consumed.  Every
 * length is checked against n; arrays larger than the remaining bytes are
 * refused.  what names the file in errors. */
int fmt_kv_parse(fmt_kv *kv, const uint8_t *p, size_t n, uint64_t count,
                 size_t *used, const char *what, char *err, size_t errlen);
size_t      fmt_kv_count(const fmt_kv *kv);
const char *fmt_kv_key(const fmt_kv *kv, size_t i, size_t *len);
int         fmt_kv_has(const fmt_kv *kv, const char *key);
/* Type of key (or of its elements when arr != NULL, *arr set to 1 for
 * arrays); -1 if absent. */
int fmt_kv_type_of(const fmt_kv *kv, const char *key, int *arr);
/* Scalars: any integer type converts (range-checked); returns 0 or -1. */
int fmt_kv_get_u32(const fmt_kv *kv, const char *key, uint32_t *out);
int fmt_kv_get_i64(const fmt_kv *kv, const char *key, int64_t *out);
int fmt_kv_get_f32(const fmt_kv *kv, const char *key, float *out);
int fmt_kv_get_bool(const fmt_kv *kv, const char *key, int *out);
/* Strings are not NUL-terminated in files: use the length. NULL if absent. */
const char *fmt_kv_get_str(const fmt_kv *kv, const char *key, size_t *len);
/* Arrays: length (0 if absent or not an array) and elements. */
uint64_t    fmt_kv_arr_len(const fmt_kv *kv, const char *key);
const char *fmt_kv_arr_str(const fmt_kv *kv, const char *key, uint64_t i,
                           size_t *len);
int fmt_kv_arr_f32(const fmt_kv *kv, const char *key, uint64_t i, float *out);
int fmt_kv_arr_i32(const fmt_kv *kv, const char *key, uint64_t i,
                   int32_t *out);
/* Setting (replaces an existing key).  Copies everything it is given. */
int fmt_kv_set_u32(fmt_kv *kv, const char *key, uint32_t v);
int fmt_kv_set_i32(fmt_kv *kv, const char *key, int32_t v);
int fmt_kv_set_f32(fmt_kv *kv, const char *key, float v);
int fmt_kv_set_bool(fmt_kv *kv, const char *key, int v);
int fmt_kv_set_str(fmt_kv *kv, const char *key, const char *s, size_t len);
int fmt_kv_set_arr_str(fmt_kv *kv, const char *key, const char *const *s,
                       const size_t *lens, uint64_t n);
int fmt_kv_set_arr_f32(fmt_kv *kv, const char *key, const float *v,
                       uint64_t n);
int fmt_kv_set_arr_i32(fmt_kv *kv, const char *key, const int32_t *v,
                       uint64_t n);
/* Copy one key (any type) from src into dst; 0, or -1 if absent. */
int fmt_kv_copy(fmt_kv *dst, const fmt_kv *src, const char *key);
/* Serialise all entries (no count prefix); returns bytes, out may be NULL. */
size_t fmt_kv_write(const fmt_kv *kv, uint8_t *out);

/* ======================================================================= */
/* GGUF                                                                     */
/* ======================================================================= */
/* GGML tensor types (values are GGML's).  The GGUF reader accepts all of
 * them; cflow reads (and keeps, as a tile type of its own) F32, F16, BF16,
 * Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, Q2_K..Q6_K and IQ4_XS; a
 * tensor of another type is refused by name when a role needs it. */
enum fmt_dtype {
    FMT_DT_F32 = 0, FMT_DT_F16 = 1, FMT_DT_Q4_0 = 2, FMT_DT_Q4_1 = 3,
    FMT_DT_Q5_0 = 6, FMT_DT_Q5_1 = 7, FMT_DT_Q8_0 = 8, FMT_DT_Q8_1 = 9,
    FMT_DT_Q2_K = 10, FMT_DT_Q3_K = 11, FMT_DT_Q4_K = 12, FMT_DT_Q5_K = 13,
    FMT_DT_Q6_K = 14, FMT_DT_Q8_K = 15, FMT_DT_IQ2_XXS = 16, FMT_DT_IQ2_XS = 17,
    FMT_DT_IQ3_XXS = 18, FMT_DT_IQ1_S = 19, FMT_DT_IQ4_NL = 20, FMT_DT_IQ3_S = 21,
    FMT_DT_IQ2_S = 22, FMT_DT_IQ4_XS = 23, FMT_DT_I8 = 24, FMT_DT_I16 = 25,
    FMT_DT_I32 = 26, FMT_DT_I64 = 27, FMT_DT_F64 = 28, FMT_DT_IQ1_M = 29,
    FMT_DT_BF16 = 30, FMT_DT_TQ1_0 = 34, FMT_DT_TQ2_0 = 35, FMT_DT_MXFP4 = 39,
    FMT_DT_NVFP4 = 40, FMT_DT_Q1_0 = 41, FMT_DT_Q2_0 = 42
};
/* "Q4_K" ...; "unknown" for a number that is not a GGML type. */
const char *fmt_dtype_name(int dtype);
/* Bytes for n elements (n a multiple of the block size); 0 if unknown. */
uint64_t fmt_dtype_size(int dtype, uint64_t n);
/* Dequantise n elements (a multiple of the type's block) to f32, as
 * ggml's dequantize_row_* (the kernels' dequantisers, kern_src_dequant).
 * Returns 0, or -1 for a type we cannot read. */
int fmt_dequant(int dtype, const void *src, float *dst, uint64_t n);
/* The tile type (enum kern_type) that keeps dtype's blocks bit for bit,
 * or -1 when there is none in this build. */
int fmt_dtype_tile(int dtype);

typedef struct fmt_tensor {
    const char *name;     /* NUL-terminated copy owned by the container */
    int         dtype;    /* enum fmt_dtype */
    unsigned    ndim;     /* rank: trailing dimensions of 1 not counted */
    uint64_t    ne[4];    /* GGML order: ne[0] = columns (innermost) */
    const void *data;     /* into the mapping */
    uint64_t    nbytes;
    /* A 3-D expert tensor assembled from one 2-D tensor per expert (HF
     * Qwen3-MoE): parts[e] is expert e's data; NULL when the experts are
     * contiguous from data on, as in GGUF. */
    const void *const *parts;
    /* Added to every value when the tensor is read as a vector: Gemma's
     * norms, which Hugging Face stores as w - 1 (0 elsewhere). */
    float       shift;
} fmt_tensor;

typedef struct fmt_gguf fmt_gguf;
/* Map and validate a GGUF (v2/v3): header, every KV, every tensor's dims,
 * type, offset and size against the file. */
int fmt_gguf_open(fmt_gguf **out, const char *path, char *err, size_t errlen);
void              fmt_gguf_close(fmt_gguf *g);
const fmt_kv     *fmt_gguf_kv(const fmt_gguf *g);
uint64_t          fmt_gguf_n_tensors(const fmt_gguf *g);
const fmt_tensor *fmt_gguf_tensor(const fmt_gguf *g, uint64_t i);
const fmt_tensor *fmt_gguf_find(const fmt_gguf *g, const char *name);

/* ======================================================================= */
/* Source models: one view over GGUF, llama2.c and HF checkpoints           */
/* ======================================================================= */
/* Canonical tensor roles.  Matrices are [rows = out][cols = in]. */
enum fmt_role {
    FMT_R_TOK_EMBD = 0, /* [vocab][dim] */
    FMT_R_OUT_NORM,     /* [dim] */
    FMT_R_OUTPUT,       /* [vocab][dim]; absent when tied */
    FMT_R_ATTN_NORM,    /* per layer [dim] */
    FMT_R_Q, FMT_R_K, FMT_R_V, FMT_R_O,
    FMT_R_Q_BIAS, FMT_R_K_BIAS, FMT_R_V_BIAS,
    FMT_R_FFN_NORM,
    FMT_R_GATE, FMT_R_UP, FMT_R_DOWN,
    FMT_R_ROUTER,       /* [n_experts][dim] */
    FMT_R_EXP_GATE, FMT_R_EXP_UP, FMT_R_EXP_DOWN, /* 3-D: ne[2] = expert */
    FMT_R_MOE_NORM,     /* per layer [dim]: the router/expert input norm */
    FMT_R_Q_NORM,       /* per layer [head_dim]: per-head RMSNorm of Q (Qwen3) */
    FMT_R_K_NORM,       /* per layer [head_dim]: per-head RMSNorm of K */
    /* The model families (fmt_family.c).  Q/K norms above may instead be
     * the whole width, [q_dim] and [kv_dim] (OLMoE): the slot's length says
     * which. */
    FMT_R_QKV,          /* per layer [q_dim + 2 kv_dim][dim], fused (Phi-3):
                           split into Q, K, V views at binding */
    FMT_R_GATE_UP,      /* per layer [2 ffn][dim], fused (Phi-3): gate rows
                           first, split into GATE, UP views at binding */
    FMT_R_ATTN_POST_NORM, /* per layer [dim]: RMSNorm of the attention output
                           before the residual add (Gemma 2/3) */
    FMT_R_FFN_POST_NORM,  /* per layer [dim]: the same after the FFN */
    FMT_R_SINKS,        /* per layer [n_heads]: attention sinks (gpt-oss) */
    FMT_R_O_BIAS,       /* per layer [dim]: output projection bias */
    FMT_R_ROUTER_BIAS,  /* per layer [n_experts]: router logit bias */
    FMT_R_EXP_GATE_BIAS, FMT_R_EXP_UP_BIAS, /* [n_experts][expert_ffn] */
    FMT_R_EXP_DOWN_BIAS,                    /* [n_experts][dim] */
    FMT_R_SH_GATE, FMT_R_SH_UP,  /* [shared_ffn][dim]: shared experts */
    FMT_R_SH_DOWN,               /* [dim][shared_ffn] */
    FMT_R_ROPE_SHORT,   /* global [rope_dims / 2]: LongRoPE divisors (Phi-3),
                           within the original context */
    FMT_R_ROPE_LONG,    /* global, the same beyond it */
    FMT_R_KV_A_NORM,    /* per layer [mla_rank]: RMSNorm of the latent (MLA) */
    FMT_R_K_B,          /* per layer [n_heads][mla_rank][mla_nope]: each head's
                           q_nope into the latent (3-D in GGUF, read as
                           n_heads * mla_rank rows) */
    FMT_R_V_B,          /* per layer [n_heads][mla_v][mla_rank]: the attended
                           latent into each head's value */
    FMT_R_Q_A,          /* per layer [mla_q_rank][dim]: MLA's low-rank query
                           (then its norm and Q_B), in place of Q */
    FMT_R_Q_A_NORM,     /* per layer [mla_q_rank] */
    FMT_R_Q_B,          /* per layer [n_heads (mla_nope + rope)][mla_q_rank] */
    FMT_NROLES
};
const char *fmt_role_name(int role);

/* Model hyper-parameters: what a source declares and what .cflow stores. */
enum {
    FMT_FLAG_EMBED_SCALE = 1u << 0,  /* embeddings * sqrt(dim) (report) */
    FMT_FLAG_V_NORM      = 1u << 1,  /* (report) */
    FMT_FLAG_TIED        = 1u << 2,  /* output head = embedding (report) */
    FMT_FLAG_ROPE_NEOX   = 1u << 3,  /* split-half RoPE; else adjacent pairs */
    FMT_FLAG_GELU        = 1u << 4,  /* GeGLU FFN; else SwiGLU */
    FMT_FLAG_QKV_BIAS    = 1u << 5,  /* Q/K/V projections carry biases */
    FMT_FLAG_ROPE_LLAMA3 = 1u << 6,  /* Llama-3 rope scaling (meta cflow.rope.*) */
    FMT_FLAG_QK_NORM     = 1u << 7,  /* per-head RMSNorm of Q and K before RoPE
                                        (slots q_norm, k_norm) */
    /* bits 8.. live in the header's feature_flags2 byte (offset 49) */
    FMT_FLAG_MOE_NO_RENORM = 1u << 8,/* routing weights are the softmax over all
                                        experts, not renormalised over the top k
                                        (Qwen3-MoE with norm_topk_prob false) */
    FMT_FLAG_LAYER_GEOM  = 1u << 9,  /* per-layer geometry records (fmt_layer_geom) */
    FMT_FLAG_XSLOTS      = 1u << 10  /* slot 19 of every table entry points at
                                        FMT_NXSLOT more slots (the families') */
};

/* The FFN's gated activation (fmt_hparams.ffn_act).  FMT_FLAG_GELU stands
 * for FMT_ACT_GEGLU in files written before the field. */
enum fmt_act {
    FMT_ACT_SWIGLU = 0,   /* silu(gate) * up */
    FMT_ACT_GEGLU = 1,    /* gelu_tanh(gate) * up */
    FMT_ACT_SWIGLU_OAI,   /* gpt-oss: gate, up clamped at swiglu_limit,
                             gate * sigmoid(alpha gate) * (up + 1) */
    FMT_NACT
};

/* How router logits become the experts' weights (fmt_hparams.gating). */
enum fmt_gating {
    FMT_GATE_SOFTMAX = 0,   /* softmax over all experts, top-k, weights
                               renormalised over the k unless MOE_NO_RENORM */
    FMT_GATE_TOPK_SOFTMAX,  /* top-k of the logits, softmax over those k
                               (gpt-oss) */
    FMT_NGATE
};

/* RoPE scaling beyond Llama 3's (fmt_hparams.rope_scaling). */
enum fmt_rope_scaling {
    FMT_ROPE_NONE = 0,
    FMT_ROPE_LINEAR,        /* positions / rope_factor */
    FMT_ROPE_YARN,          /* YaRN: rope_factor, rope_orig_ctx, beta_fast/slow */
    FMT_ROPE_LONGROPE,      /* Phi-3's LongRoPE: the rope_short/rope_long
                               divisors, rope_attn_factor */
    FMT_NROPE
};

/* Per-layer geometry (FMT_FLAG_LAYER_GEOM): layers that differ from the
 * header's attention geometry or carry no experts, as Gemma 4's sliding and
 * full-attention layers do.  Without the flag every layer has the header's
 * geometry (n_heads, n_kv_heads, head_dim, all dims rotated at rope_theta,
 * sliding_window, experts when n_experts > 0). */
enum {
    FMT_LG_KV_SHARED = 1u << 0,   /* no V projection: V is K's projection
                                     (before K's norm and RoPE) */
    FMT_LG_NO_EXPERTS = 1u << 1,  /* this layer has no router and no experts */
    FMT_LG_FLAGS_KNOWN = 0x03u
};
typedef struct fmt_layer_geom {
    uint32_t n_heads, n_kv_heads, head_dim;
    uint32_t rope_dims;        /* leading dims of each head that rotate (even) */
    float    rope_theta;
    uint32_t sliding_window;   /* 0: full attention */
    uint32_t flags;            /* FMT_LG_* */
    float    rope_scale;       /* RoPE frequency scale (1 / a linear factor):
                                  Gemma 3's global layers; 0 means 1 */
} fmt_layer_geom;

typedef struct fmt_hparams {
    char     arch[32];        /* "llama", "qwen2", ... (informational) */
    uint32_t n_layers, dim, ffn_dim, vocab_size, max_seq;
    uint32_t n_heads, n_kv_heads, head_dim;
    uint32_t n_experts, top_k, expert_ffn_dim;
    uint32_t sliding_window;  /* 0 = none */
    float    rope_theta, norm_eps;
    uint32_t flags;           /* FMT_FLAG_* */
    /* Llama-3 rope scaling, used when FMT_FLAG_ROPE_LLAMA3 */
    float    rope_factor, rope_low_freq, rope_high_freq;
    uint32_t rope_orig_ctx;
    /* report v5 fields (combine_style: enum fmt_combine) */
    uint8_t  dense_delay, expert_delay, combine_style;
    /* pipeline-native extras kept in the metadata (0 = unused) */
    uint32_t merge_interval;  /* DecoupledStreams: merge every N layers */
    uint32_t iterations;      /* FixedPoint: applications of each block */
    float    softcap;
    uint8_t  quant_type;      /* dominant tile type (enum kern_type) */
    /* What the model families add (fmt_family.c sets them from the
     * architecture and its keys; a .cflow keeps each that is not zero in its
     * metadata as cflow.* keys: fmt_hparams.c's fmt_hp_meta).  Zero is the
     * Llama behaviour everywhere. */
    uint8_t  ffn_act;         /* enum fmt_act (FMT_FLAG_GELU: GeGLU too) */
    uint8_t  gating;          /* enum fmt_gating */
    uint8_t  rope_scaling;    /* enum fmt_rope_scaling */
    float    attn_scale;      /* the attention's q.k scale; 0: 1/sqrt(head_dim) */
    float    q_scale;         /* 0, or q *= q_scale before attention (Gemma's
                                 query_pre_attn_scalar^-1/2, Phi-3's 1/sqrt(hd)) */
    float    attn_softcap;    /* attention logit soft-capping (Gemma 2), 0 none */
    float    expert_scale;    /* routed weights times this (0: 1) */
    float    swiglu_alpha, swiglu_limit;   /* FMT_ACT_SWIGLU_OAI */
    uint32_t shared_ffn_dim;  /* the shared experts' FFN (0: none) */
    uint32_t dense_lead;      /* leading layers with a dense FFN instead of
                                 experts (DeepSeek's first_k_dense_replace) */
    uint32_t rope_dims;       /* dims of each head that rotate (0: head_dim);
                                 a layer record's rope_dims wins */
    float    rope_attn_factor;/* YaRN / LongRoPE magnitude factor (0: 1) */
    float    yarn_beta_fast, yarn_beta_slow;   /* YaRN's ramp (0: 32 and 1) */
    float    yarn_log_mul;    /* YaRN's mscale_all_dim (DeepSeek), 0 none */
    /* DeepSeek-V2's multi-head latent attention (mla_rank > 0): the cache
     * holds per position the latent c_kv [mla_rank] and the rotated key
     * [rope_dims], head_dim = mla_rank + rope_dims wide with one KV head;
     * q projects to n_heads * (mla_nope + rope_dims), k_b turns each head's
     * first mla_nope into the latent's space, v_b the latent into mla_v;
     * with mla_q_rank > 0, q comes through a low-rank pair (q_a, its norm,
     * q_b) as in DeepSeek-V2 (V2-Lite projects q directly) */
    uint32_t mla_rank, mla_nope, mla_v, mla_q_rank;
    /* group-limited top-k (DeepSeek): experts in expert_groups groups, the
     * top k taken from the best expert_groups_used of them (0: none) */
    uint32_t expert_groups, expert_groups_used;
} fmt_hparams;
#define FMT_MAX_EXPERT_GROUPS 64

/* Whether layer l has a dense FFN (every layer when ffn_dim > 0, but for
 * the dense_lead layers of a DeepSeek model, which have only that), and
 * whether it has routed experts (g: its geometry, or NULL). */
int fmt_layer_dense(const fmt_hparams *hp, unsigned l);
int fmt_layer_moe(const fmt_hparams *hp, const fmt_layer_geom *g, unsigned l);
/* A layer's attention widths: the rows of its Q projection and the columns
 * of its O projection (n_heads * head_dim, but for MLA: n_heads *
 * (mla_nope + rope_dims) and n_heads * mla_v), and whether it has a V
 * projection (not when V shares K's, nor with MLA, whose values are the
 * cached latent). */
uint32_t fmt_layer_q_rows(const fmt_hparams *hp, const fmt_layer_geom *g);
/* The attention factor llama.cpp's context gives RoPE at frequency scale
 * freq_scale (its cparams.yarn_attn_factor): with YaRN, 0.1 ln(1 / scale) +
 * 1 over its mscale_all_dim's (DeepSeek-V2: the two equal), divided by the
 * 1 + 0.1 ln(1 / scale) ggml's rope multiplies in again; times the model's
 * rope_attn_factor. */
float fmt_rope_attn_factor(const fmt_hparams *hp, float freq_scale);
uint32_t fmt_layer_o_cols(const fmt_hparams *hp, const fmt_layer_geom *g);
int fmt_layer_has_v(const fmt_hparams *hp, const fmt_layer_geom *g);

/* How dense FFN and expert outputs combine (scripts/train/ARCHITECTURES.md
 * gives the exact forward pass of each).  0-2 are the report's values. */
enum fmt_combine {
    FMT_COMBINE_PARALLEL_SQRT2 = 0,
    FMT_COMBINE_DELAYED_SUM = 1,
    FMT_COMBINE_ASYNC_EXPERTS = 2,
    FMT_COMBINE_DECOUPLED = 3,      /* arch1: two streams, periodic merge */
    FMT_COMBINE_PIPELINE_REG = 4,   /* arch3: attn_reg / xfm_reg */
    FMT_COMBINE_FIXED_POINT = 5,    /* arch5: shared blocks iterated */
    FMT_NCOMBINE
};
const char *fmt_combine_name(int c);

typedef struct fmt_src fmt_src;
/* Open a GGUF file, a llama2.c checkpoint (tokenizer given separately:
 * tok512.bin / tokenizer.bin) or a HF directory.  Detects which. */
int fmt_src_open(fmt_src **out, const char *path, const char *tokenizer_path,
                 char *err, size_t errlen);
void               fmt_src_close(fmt_src *s);
const fmt_hparams *fmt_src_hparams(const fmt_src *s);
/* A tensor by role (layer ignored for globals); NULL when absent. */
const fmt_tensor  *fmt_src_tensor(const fmt_src *s, int role, unsigned layer);
/* Tokenizer (GGUF key names) and other metadata to carry over. */
const fmt_kv      *fmt_src_kv(const fmt_src *s);
const char        *fmt_src_kind(const fmt_src *s); /* "gguf", "llama2c", "hf" */

/* Tokenizer files on their own (for `cflow tokenize` and converters):
 * a llama2.c tokenizer.bin, a HF tokenizer.json, or a directory holding
 * tokenizer.json or vocab.json + merges.txt.  Fills kv with GGUF keys. */
int fmt_vocab_load(fmt_kv *kv, const char *path, char *err, size_t errlen);

/* ======================================================================= */
/* .cflow                                                                   */
/* ======================================================================= */
#define FMT_MAGIC      "CFLOW\0\0\0"
#define FMT_VMAGIC     "VFLOW\0\0\0"   /* .vflow: see fmt_layout.h */
#define FMT_VVERSION   1
#define FMT_VHEADER_SIZE 64
#define FMT_VERSION    5
#define FMT_HEADER_SIZE 88
#define FMT_TILE_HEADER_SIZE 16
#define FMT_NSLOT      20        /* slot descriptors per layer-table entry */
#define FMT_NXSLOT     16        /* more of them (FMT_FLAG_XSLOTS): slot 19 */
#define FMT_NSLOT_ALL  (FMT_NSLOT + FMT_NXSLOT)   /* slot numbers a reader takes */
#define FMT_SLOT_SIZE  32
#define FMT_ALIGN      64
#define FMT_NO_EXPERT  0xFF

/* Slots of a layer-table entry (their numbers are the file's). */
enum fmt_slot {
    FMT_S_ATTN_NORM = 0, FMT_S_Q = 1, FMT_S_K = 2, FMT_S_V = 3, FMT_S_O = 4,
    FMT_S_FFN_NORM = 5, FMT_S_GATE = 6, FMT_S_UP = 7, FMT_S_DOWN = 8,
    FMT_S_ROUTER = 9, FMT_S_EXPERT_TABLE = 10, FMT_S_EXP_GATE = 11,
    FMT_S_EXP_UP = 12, FMT_S_EXP_DOWN = 13, FMT_S_QKV_BIAS = 14,
    FMT_S_MOE_NORM = 15,
    FMT_S_Q_NORM = 16, FMT_S_K_NORM = 17,   /* FMT_FLAG_QK_NORM: [head_dim] f32 */
    FMT_S_LAYER_GEOM = 18,                  /* FMT_FLAG_LAYER_GEOM: 32-byte record */
    FMT_S_XSLOTS = 19,    /* FMT_FLAG_XSLOTS: the table of slots 20-35, else zero */
    /* the families' slots (FMT_FLAG_XSLOTS; their numbers are the file's,
     * slot 20 + i being entry i of slot 19's table) */
    FMT_S_ATTN_POST_NORM = 20, FMT_S_FFN_POST_NORM = 21,   /* [dim] f32 */
    FMT_S_SINKS = 22,          /* [n_heads] f32 */
    FMT_S_O_BIAS = 23,         /* [dim] f32 */
    FMT_S_ROUTER_BIAS = 24,    /* [n_experts] f32 */
    FMT_S_EXP_GU_BIAS = 25,    /* f32 [n_experts][2 expert_ffn]: gate, then up */
    FMT_S_EXP_DOWN_BIAS = 26,  /* f32 [n_experts][dim] */
    FMT_S_SH_GATE = 27, FMT_S_SH_UP = 28,   /* the shared experts' fused stream */
    FMT_S_SH_DOWN = 29,
    FMT_S_KV_A_NORM = 30,      /* [mla_rank] f32 */
    FMT_S_K_B = 31,            /* MLA's per-head matrices, each its own stream: */
    FMT_S_V_B = 32,            /* [n_heads mla_rank][mla_nope], [n_heads mla_v][mla_rank] */
    FMT_S_Q_A_NORM = 33,       /* [mla_q_rank] f32 (slot q holds q_a then) */
    FMT_S_Q_B = 34,            /* [n_heads (mla_nope + rope_dims)][mla_q_rank] */
    /* 35 reserved (zero) */
    /* globals entry: */
    FMT_S_TOK_EMBD = 0, FMT_S_OUT_NORM = 1, FMT_S_OUTPUT = 2,
    FMT_S_ROPE_SHORT = 20, FMT_S_ROPE_LONG = 21   /* [rope_dims / 2] f32 */
};

/* matrix_id in tile headers */
enum fmt_matrix {
    FMT_M_Q = 0, FMT_M_K = 1, FMT_M_V = 2, FMT_M_O = 3, FMT_M_GATE = 4,
    FMT_M_UP = 5, FMT_M_DOWN = 6, FMT_M_ROUTER = 7, FMT_M_EXP_GATE = 8,
    FMT_M_EXP_UP = 9, FMT_M_EXP_DOWN = 10, FMT_M_TOK_EMBD = 11,
    FMT_M_OUTPUT = 12, FMT_M_SH_GATE = 13, FMT_M_SH_UP = 14, FMT_M_SH_DOWN = 15,
    FMT_M_K_B = 16, FMT_M_V_B = 17,   /* block-diagonal: head h's rows read its
                                         own columns (MLA) */
    FMT_M_Q_B = 18,
    FMT_NMATRIX
};

/* "q", "k", ..., "exp_down", "token_embd", "output"; "?" out of range. */
const char *fmt_matrix_name(int m);

/* A decoded tile: header fields plus a pointer to its payload. */
typedef struct fmt_tile {
    const void *payload;
    uint32_t    row0;      /* first output row in the full matrix */
    uint16_t    col0;      /* first input column */
    uint16_t    rows, cols;
    uint8_t     matrix;    /* enum fmt_matrix */
    uint8_t     type;      /* enum kern_type */
    uint8_t     expert;    /* FMT_NO_EXPERT for dense tiles */
} fmt_tile;

/* A run of tiles that one fused mat-vec consumes. */
typedef struct fmt_stream {
    const fmt_tile *tiles;
    uint32_t        n_tiles;
    uint64_t        offset, length;   /* byte range in the file */
} fmt_stream;

/* One matrix as the slot table records it. */
typedef struct fmt_matinfo {
    uint32_t rows, cols;
    uint8_t  type;          /* enum kern_type */
    uint8_t  present;
} fmt_matinfo;

typedef struct fmt_model fmt_model;

int  fmt_model_open(fmt_model **out, const char *path, char *err,
                    size_t errlen);
/* FMT_OPEN_READ: read the whole file into anonymous memory (transparent
 * huge pages advised) instead of mapping it; errors on a short read.
 * FMT_OPEN_MAP_EXPERTS, with it: the expert banks' whole pages stay mapped
 * from the file in their place (for an engine whose expert I/O reads them
 * from the file: a copy would only hold memory).
 * FMT_OPEN_LAZY_EXPERTS: the expert banks' tiles are laid out from the
 * geometry and the offset table without being read (fmt_cflow_check.c),
 * so none of the banks' pages is read or made resident by the open: for
 * a caller that reads the experts from the file itself and checks each
 * before its first use (fmt_model_expert_check), or all of them before it
 * uses the map's bytes (fmt_model_check_experts).
 * FMT_OPEN_DROP_CACHE, with FMT_OPEN_READ: drop the file's page-cache pages
 * behind the copy (posix_fadvise DONTNEED, a chunk at a time), so that a
 * file near the size of the free memory is not held twice, once copied and
 * once cached, pushing everything else out while it is read.
 * FMT_OPEN_HEADER: stop once the header is read and checked: for a caller
 * that wants the header's hyperparameters only (fmt_model_hparams'
 * dimensions, max_seq, experts, delays, flags; not arch nor what the
 * metadata adds), _path, _file_size; the tables are not read, so the
 * tile, stream, expert and metadata queries must not be used, and nothing
 * past the header is read. */
#define FMT_OPEN_READ        1u
#define FMT_OPEN_MAP_EXPERTS 2u
#define FMT_OPEN_HEADER      8u
#define FMT_OPEN_LAZY_EXPERTS 4u
#define FMT_OPEN_DROP_CACHE  16u
int  fmt_model_open_ex(fmt_model **out, const char *path, unsigned flags,
                       char *err, size_t errlen);
void fmt_model_close(fmt_model *m);
const fmt_hparams *fmt_model_hparams(const fmt_model *m);
const fmt_kv      *fmt_model_kv(const fmt_model *m);
const char        *fmt_model_path(const fmt_model *m);
uint64_t           fmt_model_file_size(const fmt_model *m);
/* Bytes of the file read into anonymous memory (0 when mapped). */
uint64_t           fmt_model_copied_bytes(const fmt_model *m);
/* 1 for a stage-major .vflow file (its VFlowHeader's version in *vversion
 * when not NULL), 0 for a .cflow. */
int                fmt_model_is_vflow(const fmt_model *m, unsigned *vversion);
/* The read-only mapping of the file: [base, base + size).  Reads of it fault
 * (SIGBUS) once the file shrinks under the mapping; the engine catches
 * those that fall inside this range (eng_guard.c). */
const void        *fmt_model_map(const fmt_model *m, uint64_t *size);
/* Streams of a layer: FMT_S_Q (the fused QKV stream), FMT_S_O,
 * FMT_S_GATE (fused gate/up), FMT_S_DOWN; globals (layer = n_layers):
 * FMT_S_TOK_EMBD, FMT_S_OUTPUT.  NULL when absent. */
const fmt_stream  *fmt_model_stream(const fmt_model *m, unsigned layer,
                                    int slot);
const fmt_matinfo *fmt_model_matinfo(const fmt_model *m, unsigned layer,
                                     int slot);
/* f32 vectors (norms, biases, router): n gets the element count. */
const float *fmt_model_vec(const fmt_model *m, unsigned layer, int slot,
                           uint64_t *n);
/* The geometry of a layer: its record when FMT_FLAG_LAYER_GEOM, else the
 * header's (filled in either way). */
const fmt_layer_geom *fmt_model_layer_geom(const fmt_model *m, unsigned layer);
/* Check expert e of layer (fmt_model_expert): data holds its bytes, the
 * file's [offset, offset + length); every tile's header must match its
 * place and its payload be finite.  0, or FMT_EFORMAT (FMT_EARG: no such
 * expert) with one line in err naming the file and the tile's offset. */
int fmt_model_expert_check(const fmt_model *m, unsigned layer, unsigned e,
                           const uint8_t *data, char *err, size_t errlen);
/* 1 when the model was opened with FMT_OPEN_LAZY_EXPERTS and its experts
 * have not all been checked since; fmt_model_check_experts checks every
 * expert through the map (reading the whole bank) and clears it, 0 or the
 * first refusal; fmt_model_experts_checked clears it. */
int fmt_model_experts_unchecked(const fmt_model *m);
int fmt_model_check_experts(fmt_model *m, char *err, size_t errlen);
void fmt_model_experts_checked(fmt_model *m);
/* Expert e of a layer: its fused gate/up stream and its down stream. */
int fmt_model_expert(const fmt_model *m, unsigned layer, unsigned e,
                     const fmt_stream **gate_up, const fmt_stream **down,
                     uint64_t *offset, uint64_t *length);

/* ---- critical-path bandwidth model (report eq. 4.23) ----------------- */
enum { FMT_CP_ATTN = 0, FMT_CP_DENSE = 1, FMT_CP_EXPERT = 2 };
typedef struct fmt_cp_layer {
    unsigned layer, block;          /* effective layer, stored block */
    double   attn, dense, expert;   /* stream bytes (expert: top-k); attn
                                       includes kv */
    double   kv;                    /* the KV cache a token reads at n_ctx */
    double   naive, critical;       /* this layer's share */
    int      binding, naive_binding;/* FMT_CP_* */
} fmt_cp_layer;
typedef struct fmt_cp_total {
    unsigned n_layers;              /* effective layers */
    unsigned dense_delay, expert_delay;
    double   naive, critical, serial;
} fmt_cp_total;
/* Fill layers[0..min(cap, n_eff)) and tot.  bytes_per_param > 0 sizes the
 * streams from parameter counts instead of the file's tiles.  n_ctx > 0
 * adds to each layer's attention the f16 KV cache a token reads at that
 * context: a sliding layer its window, an MLA layer the latent and the
 * rotated key (one row of head_dim), any other K and V. */
int fmt_critical_path(const fmt_model *m, double bytes_per_param, uint32_t n_ctx,
                      fmt_cp_layer *layers, unsigned cap, fmt_cp_total *tot);
/* The same from a geometry alone (bytes_per_param > 0 required): hp and
 * lg [n_layers] per-layer records, or NULL for the header's everywhere. */
int fmt_critical_path_geom(const fmt_hparams *hp, const fmt_layer_geom *lg,
                           double bytes_per_param, uint32_t n_ctx, fmt_cp_layer *layers,
                           unsigned cap, fmt_cp_total *tot);
const char *fmt_cp_stream_name(int s);

/* ---- quantisation names (fmt_mix.c) ----------------------------------- */
/* What `-q NAME` asks `convert` and `synth` for.  f32, f16, q8_0 and q4_0
 * are cflow's uniform tile types: every weight matrix in that type,
 * quantised by kern_tile_pack (the report's quantisers).  The others are
 * llama-quantize's file types: each matrix gets the GGML type of
 * llama.cpp's mix for that name (src/llama-quant.cpp) and llama-quantize's
 * blocks.  FMT_FT_NONE is 0, so a zeroed option struct asks for no mix. */
enum fmt_ftype {
    FMT_FT_NONE = 0,
    FMT_FT_Q4_K_M, FMT_FT_Q4_K_S, FMT_FT_Q5_K_M, FMT_FT_Q5_K_S, FMT_FT_Q6_K,
    FMT_FT_Q3_K_S, FMT_FT_Q3_K_M, FMT_FT_Q3_K_L, FMT_FT_Q2_K,
    FMT_FT_IQ4_XS, FMT_FT_IQ4_NL, FMT_FT_MXFP4,
    FMT_FT_Q4_1, FMT_FT_Q5_0, FMT_FT_Q5_1, FMT_FT_BF16,
    FMT_NFTYPE
};
typedef struct fmt_quant {
    int tile;    /* a uniform tile type (enum kern_type), or -1 */
    int ftype;   /* enum fmt_ftype, or FMT_FT_NONE */
} fmt_quant;
/* name (case-insensitive; llama-quantize's aliases q4_k, q5_k, q3_k and
 * mxfp4_moe too) into q; 0, or -1 for a name of neither kind. */
int fmt_quant_parse(const char *name, fmt_quant *q);
/* Every name, for help texts and errors. */
const char *fmt_quant_names(void);
/* "q4_k_m" ...; "none" for FMT_FT_NONE or an unknown value. */
const char *fmt_ftype_name(int ftype);

/* ---- one seeded stream ------------------------------------------------ */
/* The next value of the splitmix64 stream (Steele, Lea & Flood 2014) in
 * *state: the tree's one generator, so that a seed gives the same numbers
 * on every machine (synthetic weights and routers, the sampler's draws,
 * cflow bench's random tokens).  The state after k draws is the seed plus
 * k * FMT_SPLITMIX64_GAMMA, so a stream can start at any draw. */
#define FMT_SPLITMIX64_GAMMA UINT64_C(0x9E3779B97F4A7C15)
static inline uint64_t fmt_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += FMT_SPLITMIX64_GAMMA);
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* ---- synthetic models ------------------------------------------------- */
/* Open a random-weight source for a named preset (report-arch1 ...);
 * seed picks the weights.  Names: fmt_synth_preset_name(i) until NULL.
 * zipf 0: random routers (every expert about as popular as any other);
 * zipf S > 0: a Zipf-like expert popularity of exponent S per layer, the
 * router bias built into the weights (fmt_synth_route.c); the weights are
 * otherwise those of zipf 0. */
int fmt_synth_open(fmt_src **out, const char *preset, uint64_t seed, float zipf,
                   char *err, size_t errlen);
/* The metadata key of a model's synthetic routing: "zipf:S" (cflow synth
 * --routing zipf:S); absent for uniform routing and for real models. */
#define FMT_SYNTH_ROUTING_KEY "cflow.synth.routing"
const char *fmt_synth_preset_name(unsigned i);
/* A preset's geometry without its weights (for analytic figures such as
 * the critical path of presets too large to synthesise): hp, and *lg
 * [n_layers] (malloc'd, NULL when every layer has the header's). */
int fmt_synth_geometry(const char *preset, fmt_hparams *hp,
                       fmt_layer_geom **lg, char *err, size_t errlen);
/* Write a preset llama.cpp can run (tiny-mixtral and the benchmark
 * presets: tinyllama-1.1b, llama2-7b, olmoe-mixtral-1b-7b, qwen3-30b-a3b
 * as llama; the model families' in their own architectures: olmoe-1b-7b,
 * gpt-oss-20b/120b, gemma3-4b, gemma2-2b, phi4-mini, deepseek-v2-lite and
 * the tiny-* ones) as a GGUF that llama.cpp loads: the matrices of q (q->tile KERN_Q4_0 or KERN_Q8_0:
 * drawn blocks; KERN_F32, KERN_F16: drawn floats; q->ftype: drawn floats
 * in the types of llama.cpp's mix, quantised as llama-quantize does),
 * f32 norms and router, the tokenizer keys of vocab_gguf (NULL: a
 * synthetic SentencePiece vocabulary) padded to the preset's vocabulary;
 * zipf as fmt_synth_open's.  Streams to path, which appears only when
 * complete; memory stays small. */
int fmt_synth_write_gguf(const char *preset, const char *path,
                         const char *vocab_gguf, uint64_t seed, const fmt_quant *q,
                         float zipf, fmt_progress_fn progress, void *ud,
                         char *err, size_t errlen);

/* ---- conversion ----------------------------------------------------- */
typedef struct fmt_convert_opts {
    int             force_type;     /* enum kern_type, or -1: keep source types */
    int             ftype;          /* enum fmt_ftype: llama.cpp's mix (with
                                       force_type -1), or FMT_FT_NONE */
    const char     *tokenizer_path; /* llama2.c tokenizer, HF tokenizer, ... */
    int             vflow;          /* write the stage-major .vflow layout */
    fmt_log_fn      log;
    fmt_progress_fn progress;
    void           *ud;
} fmt_convert_opts;

/* The converter's revision: bumped whenever fmt_convert writes other
 * bytes for the same input and options, so that caches keyed by it (the
 * model cache) never serve an older conversion.  2: every GGML type with
 * a tile type is kept, no longer requantised to q4_0/q8_0 (issue 41). */
#define FMT_CONVERTER_REV 2

/* Convert any source fmt_src_open accepts into a .cflow at out_path
 * (written to a temporary name, then renamed). */
int fmt_convert(const char *in_path, const char *out_path,
                const fmt_convert_opts *opts, char *err, size_t errlen);

/* Write a .cflow from an open source (fmt_convert's second half). */
int fmt_cflow_write(const fmt_src *src, const char *out_path,
                    const fmt_convert_opts *opts, char *err, size_t errlen);

#endif /* CFLOW_FORMAT_H */
