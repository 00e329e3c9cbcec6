/*
 * fmt_impl.h — private to src/format: helpers shared by the readers and
 * writers of this module (never installed, never included outside it).
 *
 * Several files add declarations here; keep edits additive and group them
 * by the file that defines them.
 */
#ifndef CFLOW_FMT_IMPL_H
#define CFLOW_FMT_IMPL_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "format/cflow_format.h"

/* Unaligned little-endian loads: kern_ld_u16/u32/u64/f32 (kernels/kern.h,
 * through cflow_format.h). */

/* ---- fmt_kv.c ---------------------------------------------------------- */
/* printf into err[errlen] (one line: newlines in the result become spaces).
 * Safe with err == NULL or errlen == 0. */
void fmt_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The one-line rule fmt_err applies, for a message built another way:
 * every newline and carriage return in s (not NULL) becomes a space. */
void fmt_one_line(char *s);
/* Copy at most 48 bytes of an untrusted name into out[64], replacing
 * anything that is not printable ASCII with '?', for error messages. */
const char *fmt_safe_name(char out[64], const char *s, size_t len);

/* Open-addressing index from names to small integers (tensor names, keys).
 * The caller keeps the names; the index stores only positions. */
typedef struct fmt_names {
    const char **name;  /* [cap] borrowed pointers, NULL = empty slot */
    size_t      *len;   /* [cap] */
    size_t      *val;   /* [cap] */
    size_t       cap;   /* power of two, or 0 */
    size_t       count;
} fmt_names;
uint64_t fmt_name_hash(const char *s, size_t len);
/* Insert (name,len) -> val; returns 0, 1 if the name is already present
 * (*old gets its value when old != NULL; nothing is changed), -1 on ENOMEM. */
int  fmt_names_put(fmt_names *t, const char *s, size_t len, size_t val,
                   size_t *old);
/* 0 and *val set when found, -1 otherwise. */
int  fmt_names_get(const fmt_names *t, const char *s, size_t len,
                   size_t *val);
void fmt_names_free(fmt_names *t);

/* ---- fmt_gguf.c -------------------------------------------------------- */
/* A read-only mapping of a whole file. */
typedef struct fmt_map {
    const uint8_t *p;   /* NULL when empty */
    size_t         n;   /* bytes */
} fmt_map;
/* Map path read-only; an empty file is an FMT_EFORMAT error. */
int  fmt_map_open(fmt_map *m, const char *path, char *err, size_t errlen);
void fmt_map_close(fmt_map *m);

/* ---- fmt_hparams.c ---------------------------------------------------- */
/* The combine style and delays together: 0, or -1 with the reason in why. */
int fmt_pipeline_check(const fmt_hparams *hp, char *why, size_t whylen);
/* Whether every field fits the .cflow header (-1 and why: the field, its
 * value and the limit), and a layer's geometry its layer record. */
int fmt_hparams_fit(const fmt_hparams *hp, char *why, size_t whylen);
int fmt_layer_geom_fit(const fmt_layer_geom *g, unsigned layer, char *why, size_t whylen);
/* The .cflow header (FMT_HEADER_SIZE bytes at h, fmt_layout.h's map) from
 * hp and the file's table offsets, feature flags and dominant tile type;
 * and back: every field of h into hp (zeroed first), unchecked (the
 * reader's read_header checks them). */
/* The families' fields (fmt_hparams' last block) into a .cflow's metadata,
 * each that is not zero (0, or -1 out of memory), and back (0, or -1 with
 * why: a key of the wrong type, or fmt_family_check's refusal). */
int fmt_hp_meta_store(const fmt_hparams *hp, fmt_kv *kv);
int fmt_hp_meta_load(const fmt_kv *kv, fmt_hparams *hp, char *why, size_t whylen);
/* Every family field a value cflow implements: 0, or -1 with why naming
 * the field and its value. */
int fmt_family_check(const fmt_hparams *hp, char *why, size_t whylen);
/* The header's attention geometry as a layer's (g zeroed first). */
void fmt_layer_geom_default(const fmt_hparams *hp, fmt_layer_geom *g);
/* Layer geometry g of a model with sliding windows: the header's, then a
 * sliding layer (swa) slides over window positions and turns at base
 * theta_swa (at RoPE scale 1 where full_scale: the scale is the full
 * layers' alone, Gemma 3's linear factor); a full layer does not slide. */
void fmt_layer_geom_swa(const fmt_hparams *h, fmt_layer_geom *g, int swa, uint32_t window,
                        float theta_swa, int full_scale);
/* Slot s of .cflow table entry `entry` (n_layers: the globals) of a layer
 * of geometry g: its kind (FMT_K_*; negative: optional, empty or of that
 * kind) and its rows and cols; FMT_K_EMPTY and 0 rows when the slot must
 * be empty.  The reader holds every slot to it. */
void fmt_slot_expect(const fmt_hparams *hp, const fmt_layer_geom *g, unsigned entry, int s,
                     int *kind, uint32_t *rows, uint32_t *cols);
/* DeepSeek-V2's q.k scale (attn_scale) from its RoPE fields and latent
 * sizes, as llama.cpp's graph computes it (the GGUF and the
 * config.json readers of the family both set it). */
void fmt_deepseek2_scale(fmt_hparams *h);
void fmt_header_store(uint8_t *h, const fmt_hparams *hp, uint64_t ltab, uint64_t meta,
                      uint8_t flags, uint8_t qtype);
void fmt_header_load(const uint8_t *h, fmt_hparams *hp);
/* A tensor's rank without trailing unit dimensions (at least 1): the one
 * rule of every reader and shape check.  fmt_shape_str writes the shape at
 * that rank, "[64, 512]", into buf and returns it. */
unsigned fmt_shape_rank(const uint64_t ne[4], unsigned ndim);
const char *fmt_shape_str(char *buf, size_t n, const uint64_t ne[4], unsigned ndim);

/* ---- fmt_dequant.c ----------------------------------------------------- */
/* GGML block geometry: weights per block and bytes per block; 0 when the
 * type is unknown. */
unsigned fmt_dtype_block(int dtype);
unsigned fmt_dtype_block_bytes(int dtype);
/* The kernels' encoding of dtype's rows (enum kern_src), or -1 when cflow
 * cannot read that type. */
int fmt_dtype_src(int dtype);
/* The GGML type whose blocks tile type `type` keeps (F32 for F32 ...), or
 * -1 for an unknown tile type. */
int fmt_dtype_from_tile(int type);
/* 1 when tile type `type` has payloads in this build (its kernels' entry
 * is complete), else 0. */
int fmt_tile_built(int type);
/* The names of the tile types built, "f32, f16, q8_0, ...", into buf[n]. */
const char *fmt_tile_types_built(char *buf, size_t n);

/* ---- fmt_src.c (the toolkit), fmt_src_gguf.c, fmt_llama2c.c, fmt_hf.c:
 * source models; fmt_src_open.c picks the reader ------------------------ */
/* One opened source model, whatever its container.  GGUF tensors live in
 * the fmt_gguf; llama2.c and HF tensors are views (fmt_tensor) into the
 * mappings in maps[], named and owned here. */
struct fmt_src {
    const char        *kind;      /* "gguf", "llama2c", "hf" */
    char              *path;      /* as given, for messages */
    fmt_hparams        hp;
    const fmt_kv      *kv;        /* gguf's kv, or kv_own */
    fmt_kv            *kv_own;
    fmt_gguf          *gguf;
    fmt_map           *maps;      /* [n_maps] llama2c: 1, hf: one per shard */
    size_t             n_maps;
    fmt_tensor        *tensors;   /* [n_tensors] views (llama2c, hf) */
    size_t             n_tensors, cap_tensors;
    fmt_names          tidx;      /* tensor name -> index in tensors */
    const fmt_tensor **roles;     /* [(n_layers + 1) * FMT_NROLES]; the
                                   * last row holds the globals */
    const void       **parts;     /* HF Qwen3-MoE: per-expert data pointers
                                   * of the assembled 3-D tensors, owned */
    fmt_layer_geom    *lgeom;     /* [n_layers] when FMT_FLAG_LAYER_GEOM
                                   * (synthetic Gemma-4 geometry, a family's
                                   * sliding pattern), else NULL */
    const struct fmt_family *fam; /* the family (fmt_family.c), or NULL */
    void             **owned;     /* [n_owned] memory views point into that
                                   * the source made (config.json's factors,
                                   * a transposed expert bank), freed with it */
    size_t             n_owned;
    /* A source whose tensor bytes are made on demand (synth: drawn from
     * the seeded stream) makes bytes [p, p + n) readable before the writer
     * reads them: 0, or -1 when the range is not one it made.  NULL: the
     * bytes are there (a file's mapping). */
    int              (*fill)(const fmt_src *s, const void *p, uint64_t n);
};

/* Memory of n bytes (zeroed) that lives as long as the source: NULL (err
 * set) when out of memory. */
void *fmt_src_own(fmt_src *s, size_t n, char *err, size_t errlen);

/* Geometry of source layer l: its own when s->lgeom, else the header's. */
void fmt_src_layer_geom(const fmt_src *s, unsigned l, fmt_layer_geom *g);

/* Tensor names of the roles, printf patterns with one %u for the layer
 * (globals have none); NULL where the container has no such tensor. */
typedef const char *const fmt_role_names[FMT_NROLES];
extern const fmt_role_names fmt_gguf_role_names;

/* Append a view; name is copied.  dtype -1 marks a tensor we cannot read
 * (kept so that binding it to a role gives a clear error).  0 or FMT_E*. */
int fmt_src_add_tensor(fmt_src *s, const char *name, int dtype,
                       unsigned ndim, const uint64_t ne[4], const void *data,
                       uint64_t nbytes, char *err, size_t errlen);
const fmt_tensor *fmt_src_find(const fmt_src *s, const char *name);
/* Bind tensors to roles by name (s->hp must hold the geometry), settle
 * FMT_FLAG_TIED / FMT_FLAG_QKV_BIAS from what is present (tie_forced: the
 * source says the head is tied, ignore any output tensor), and check every
 * required tensor's presence, type and shape. */
int fmt_src_bind(fmt_src *s, const char *const *names, int tie_forced,
                 char *err, size_t errlen);
/* Sanity of s->hp before binding (zero or absurd values are refused). */
int fmt_src_check_hparams(const fmt_src *s, char *err, size_t errlen);
/* Make the kv's token arrays exactly vocab long: pad with "[PADn]" unused
 * tokens (as llama.cpp's converter does) or refuse when there are more
 * tokens than embedding rows. */
int fmt_src_fit_vocab(fmt_src *s, uint32_t vocab, int allow_pad,
                      int allow_trim, char *err, size_t errlen);
/* Llama-3 rope frequency factors for head_dim/2 frequencies (out[i]
 * divides frequency i), exactly as llama.cpp's converter computes them. */
void fmt_rope_llama3_factors(const fmt_hparams *hp, float *out);
/* The GGUF key "<arch>.<suffix>" into *out: required (req) or optional
 * (absent leaves *out); of the wrong type or out of range, an error
 * naming the file and the key.  0 or a FMT_E* code. */
int fmt_gguf_key_u32(const fmt_src *s, const char *suffix, uint32_t *out, int req,
                     char *err, size_t errlen);
int fmt_gguf_key_f32(const fmt_src *s, const char *suffix, float *out, char *err,
                     size_t errlen);

/* fmt_src_gguf.c: read s->path (a GGUF file) into s. */
int fmt_src_gguf_open(fmt_src *s, char *err, size_t errlen);

/* ---- fmt_family.c: what differs per architecture (its essay) ----------- */
struct fmt_hf_cfg;
typedef struct fmt_family {
    const char *arch;             /* GGUF general.architecture (the .cflow's) */
    const char *hf_arch, *hf_type;/* config.json architectures[0], model_type */
    uint32_t    flags;            /* FMT_FLAG_* every model of the family has */
    uint8_t     act, gating;      /* enum fmt_act, enum fmt_gating */
    uint8_t     hf_tied;          /* transformers' tie_word_embeddings default */
    uint8_t     full_rope;        /* every dimension rotates (llama.cpp refuses
                                     a partial rope.dimension_count) */
    uint8_t     peer_ggml;        /* llama.cpp is the peer of every source of it
                                     (its arithmetic: the .cflow's cflow.peer) */
    /* the family's own GGUF keys into s->hp, after the common ones */
    int       (*gguf)(fmt_src *s, char *err, size_t errlen);
    const fmt_role_names *gguf_names;   /* names that differ, or NULL */
    /* the same from config.json (fmt_hf_family.c), and the HF names that
     * differ from fmt_hf.c's */
    int       (*hf)(fmt_src *s, const struct fmt_hf_cfg *c);
    const fmt_role_names *hf_names;
    /* after the tensors are loaded, before binding: the views the names
     * point at that the checkpoint does not hold as they are */
    int       (*hf_tensors)(fmt_src *s, const struct fmt_hf_cfg *c);
} fmt_family;
const fmt_family *fmt_family_by_arch(const char *arch, size_t len);
/* By config.json's architectures[0] (hf_arch), else its model_type. */
const fmt_family *fmt_family_by_hf(const char *hf_arch, const char *model_type);
/* "llama, qwen2, ..." (hf: the HF names) into buf[n]; returns buf. */
const char *fmt_family_list(char *buf, size_t n, int hf);
/* out[FMT_NROLES]: own's name of a role where it has one (an empty string
 * removes the role), else base's. */
void fmt_family_names(const fmt_role_names *base, const fmt_role_names *own,
                      const char **out);
/* The GGUF's RoPE scaling other than Llama 3's into s->hp. */
int fmt_family_gguf_rope(fmt_src *s, char *err, size_t errlen);
/* s is of family f: s->fam, its flags, activation and gating. */
int fmt_family_apply(fmt_src *s, const fmt_family *f);

/* fmt_hf_cfg.c: config.json's values (c->o, a json_object; errors name
 * c->path into c->err).  Numbers: 1 present, 0 absent, -1 of the wrong
 * type or range; a string, or NULL; a boolean, or dflt; an object member
 * as *sub (1, 0, -1); an array of exactly n numbers into out (1, 0, -1). */
typedef struct fmt_hf_cfg {
    void       *o;
    const char *path;
    char       *err;
    size_t      errlen;
} fmt_hf_cfg;
int fmt_hf_u32(const fmt_hf_cfg *c, const char *key, uint32_t *out);
int fmt_hf_f32(const fmt_hf_cfg *c, const char *key, float *out);
const char *fmt_hf_str(const fmt_hf_cfg *c, const char *key);
int fmt_hf_bool(const fmt_hf_cfg *c, const char *key, int dflt);
int fmt_hf_obj(const fmt_hf_cfg *c, const char *key, fmt_hf_cfg *sub);
int fmt_hf_f32s(const fmt_hf_cfg *c, const char *key, float *out, size_t n);
/* An array's length (0 absent, -1 not an array), and its element i when
 * out: the string, or NULL (not a string, or past the end). */
int fmt_hf_str_at(const fmt_hf_cfg *c, const char *key, size_t i, const char **out);
/* A JSON integer >= 0 (jo, a json_object) into *out: 0, or -1 when it is
 * none (values above INT64_MAX saturate). */
int fmt_hf_json_u64(void *jo, uint64_t *out);

/* fmt_hf_family.c: the families' config.json keys (fmt_family.hf), after
 * fmt_hf.c's geometry; 0 or a FMT_E* code with err set. */
int fmt_hf_olmoe(fmt_src *s, const fmt_hf_cfg *c);
int fmt_hf_phi3(fmt_src *s, const fmt_hf_cfg *c);
int fmt_hf_gemma(fmt_src *s, const fmt_hf_cfg *c);
int fmt_hf_gptoss(fmt_src *s, const fmt_hf_cfg *c);
int fmt_hf_deepseek2(fmt_src *s, const fmt_hf_cfg *c);
int fmt_hf_phi3_tensors(fmt_src *s, const fmt_hf_cfg *c);
int fmt_hf_gemma_tensors(fmt_src *s, const fmt_hf_cfg *c);
int fmt_hf_gptoss_tensors(fmt_src *s, const fmt_hf_cfg *c);
int fmt_hf_deepseek2_tensors(fmt_src *s, const fmt_hf_cfg *c);
extern const fmt_role_names fmt_hf_olmoe_names, fmt_hf_phi3_names, fmt_hf_gemma_names,
                            fmt_hf_gptoss_names, fmt_hf_deepseek2_names;
/* fmt_llama2c.c: 1 when the file's first bytes and size look like a legacy
 * llama2.c checkpoint (nothing else is read), else 0. */
int fmt_llama2c_detect(const char *path, const uint8_t *head, size_t nhead,
                       uint64_t file_size);
int fmt_llama2c_open(fmt_src *s, const char *path, const char *tokenizer,
                     char *err, size_t errlen);
/* fmt_hf.c: a Hugging Face model directory. */
int fmt_hf_open(fmt_src *s, const char *dir, const char *tokenizer,
                char *err, size_t errlen);

/* ---- fmt_mix.c: llama.cpp's tensor-type mixes --------------------------- */
/* One weight matrix as llama_tensor_get_type sees it (fmt_mix.c's essay). */
typedef struct fmt_mix_in {
    int      ftype;                  /* enum fmt_ftype (not NONE) */
    /* the model (fmt_mix_model) */
    unsigned n_layers, n_experts, gqa, n_attn_v;
    int      tied, type_70b;
    int      mla;                    /* DeepSeek-V2's latent attention: FMT_R_K
                                        is attn_kv_a_mqa, which no rule names */
    /* the tensor */
    int      role;                   /* enum fmt_role */
    unsigned layer, i_attn_v;        /* its layer; attn_v: its index among
                                        the model's V tensors */
    uint64_t ne0, ne2;               /* columns; experts (1: not a bank) */
} fmt_mix_in;
/* The model's fields of m: hp's geometry, the head tied to the embedding
 * (no output tensor), the model's count of V tensors. */
void fmt_mix_model(fmt_mix_in *m, const fmt_hparams *hp, int tied, unsigned n_attn_v);
/* The GGML type (enum fmt_dtype) llama.cpp's mix gives the matrix, or -1
 * for a role it does not quantise or a row no type fits (no fallback). */
int fmt_mix_type(const fmt_mix_in *m);
/* llama.cpp's number of the file type (general.file_type), and its
 * default GGML type; -1 for FMT_FT_NONE. */
int fmt_ftype_llama(int ftype);
int fmt_ftype_dtype(int ftype);

/* ---- fmt_tile_src.c: what the writer packs a matrix's tiles from ------- */
typedef struct fmt_tsrc {
    const fmt_tensor *t;        /* the source matrix (a 2-D view) */
    int               tile;     /* enum kern_type of its tiles */
    int               dt;       /* GGML type of the rows tiles are cut from */
    int               enc;      /* their enum kern_src */
    int               requant;  /* 1: rows are t's requantised to dt */
    size_t            rb;       /* bytes of one such row */
    const uint8_t    *rows;     /* the current stripe's rows */
    uint8_t          *buf;      /* [cap] requantised stripe */
    size_t            cap;
    float            *f;        /* [fcap] one row widened */
    size_t            fcap;
} fmt_tsrc;
/* Choose t's tile type and source rows from the options (mi: the matrix
 * as llama.cpp's mix sees it, used with o->ftype).  0, or FMT_EUNSUP with
 * one line naming path, the tensor and its type. */
int  fmt_tsrc_choose(fmt_tsrc *ts, const fmt_tensor *t, const fmt_convert_opts *o,
                     const fmt_mix_in *mi, const char *path, char *err, size_t errlen);
/* The stripe of rows source rows at src (t's encoding; first row row0):
 * every block checked (FMT_EFORMAT naming tensor, row, block and field),
 * requantised when ts->requant. */
int  fmt_tsrc_stripe(fmt_tsrc *ts, const uint8_t *src, unsigned rows, uint32_t row0,
                     const char *path, char *err, size_t errlen);
/* Row r of the stripe at column col0 (a multiple of dt's block). */
const uint8_t *fmt_tsrc_at(const fmt_tsrc *ts, unsigned r, uint32_t col0);
void fmt_tsrc_free(fmt_tsrc *ts);

/* ---- fmt_synth_preset.c: the presets of fmt_synth.c and fmt_synth_gguf.c */
typedef struct fmt_synth_geom {
    const char *name;
    unsigned    n_layers, dim, n_heads, n_kv, head_dim;
    unsigned    ffn;            /* dense FFN, or each expert's when n_exp */
    unsigned    n_exp, top_k, vocab, ctx;
    float       theta, eps;
    int         tied;           /* output head = token embedding */
    /* a model family's (fmt_family.c): its architecture (NULL: llama) and
     * what its tensors and keys hold beyond a Llama's */
    const char *arch;
    unsigned    feat;           /* FMT_SG_* */
    unsigned    rope_dims;      /* partial RoPE (0: head_dim) */
    unsigned    swa;            /* sliding window (0: none) */
    float       rope_factor;    /* linear (Gemma 3) or YaRN (gpt-oss) scaling */
    unsigned    rope_orig;      /* YaRN's and LongRoPE's original context */
    float       softcap, attn_softcap;   /* Gemma 2's */
    float       qk_sd;          /* sd of the Q and K weights (0: 0.02): the
                                   tests' small models take larger ones, so
                                   that attention is sharp and the positions
                                   (RoPE, windows, sinks) matter to the tokens */
    /* DeepSeek-V2 (mla_rank > 0): latent attention of rank mla_rank, q/k
     * heads of mla_nope + rope_dims, values of mla_v (head_dim: rank +
     * rope_dims, n_kv 1), a low-rank query of mla_q_rank (0: direct, as
     * V2-Lite's; llama.cpp takes it unless the model has 26 or 27
     * layers); n_shared shared experts of ffn each; the first
     * dense_lead layers a dense FFN of dense_ffn; experts in groups (0:
     * none); YaRN's mscale_all_dim */
    unsigned    mla_rank, mla_nope, mla_v, mla_q_rank, n_shared, dense_lead, dense_ffn;
    unsigned    groups, groups_used;
    float       mscale_all;
} fmt_synth_geom;
enum {
    FMT_SG_QK_HEAD  = 1u << 0,  /* per-head Q/K norms (Qwen3, Gemma 3) */
    FMT_SG_QK_FULL  = 1u << 1,  /* whole-width Q/K norms (OLMoE) */
    FMT_SG_FUSED    = 1u << 2,  /* fused QKV and gate/up (Phi-3) */
    FMT_SG_POST     = 1u << 3,  /* post-attention and post-FFN norms (Gemma) */
    FMT_SG_BIAS     = 1u << 4,  /* Q/K/V/O, router and expert biases (gpt-oss) */
    FMT_SG_SINKS    = 1u << 5,  /* attention sinks (gpt-oss) */
    FMT_SG_LONGROPE = 1u << 6,  /* LongRoPE divisors (Phi-3) */
};
/* The benchmark presets (real geometry, Q4_0 through a GGUF). */
const fmt_synth_geom *fmt_synth_bench_find(const char *name);
const char *fmt_synth_bench_name(unsigned i);
/* The synthetic SentencePiece vocabulary (vocab tokens) into kv; 0 or -1
 * when out of memory. */
int fmt_synth_vocab(fmt_kv *kv, unsigned vocab);
/* The geometry of an f32 preset in the "llama" architecture (0), or -1 when
 * the preset is not one llama.cpp could run. */
int fmt_synth_llama_geom(const char *name, fmt_synth_geom *g);

/* ---- fmt_synth_route.c: --routing zipf, the bias built into the weights */
/* The sd of every embedding weight of a --routing zipf file (uniform
 * files keep 0.02): large beside what the layers add to the residual, so
 * the residual the routers read changes from token to token
 * (fmt_synth_route.c says how it was chosen). */
#define FMT_SYNTH_ZIPF_EMBD_SD 2.0f
/* h[dim - 1] of every embedding row: 0.2 times the norm of a row of the
 * other dimensions, where the bias -S ln(rank) stands to the token's part
 * of the router logits as a Zipf law of exponent S (fmt_synth_route.c) */
#define FMT_SYNTH_ZC(dim) (0.2f * FMT_SYNTH_ZIPF_EMBD_SD * sqrtf((float)(dim)))
#define FMT_SYNTH_ZK      0.8f   /* router column dim - 1 per unit of -S ln(rank) */
#define FMT_SYNTH_MAX_EXP 1024u
/* What --routing zipf does to a tensor (by its name; *layer its blk.N). */
enum { FMT_SR_NONE = 0, FMT_SR_CONST, FMT_SR_COL0, FMT_SR_ROW0, FMT_SR_ROUTER };
int   fmt_synth_rule(const char *name, unsigned *layer);
/* The metadata key naming a zipf routing ("zipf:S"), set into kv when
 * zipf > 0; 0 or -1 (out of memory). */
int   fmt_synth_routing_kv(fmt_kv *kv, float zipf);
/* Layer layer's router entry for expert e in the constant dimension. */
float fmt_synth_zipf_bias(uint64_t seed, unsigned layer, unsigned e, unsigned n_exp,
                          float s);

/* ---- fmt_synth_gguf.c -------------------------------------------------- */
/* A benchmark preset as a source, through a temporary GGUF. */
int fmt_synth_bench_open(fmt_src **out, const char *preset, uint64_t seed,
                         float zipf, char *err, size_t errlen);

/* ---- fmt_convert_io.c: bounded input, all-or-nothing output ------------ */
/* The writer's view of a source's memory: the address ranges of its
 * mappings (a GGUF's as the span of its tensors). */
typedef struct fmt_conv_src {
    const fmt_src *s;
    int            synth;       /* drawn on demand, freed on release */
    uintptr_t      page;
    struct { uintptr_t lo, hi; } *r;    /* [n] */
    size_t         n;
} fmt_conv_src;
/* 0, or -1 when out of memory. */
int  fmt_conv_begin(fmt_conv_src *c, const fmt_src *s);
void fmt_conv_end(fmt_conv_src *c);
/* Make bytes [p, p + n) of one of the source's tensors readable (0, or -1
 * when a synthetic source cannot draw that range). */
int  fmt_conv_load(fmt_conv_src *c, const void *p, uint64_t n);
/* The writer is done with [p, p + n): hand its pages back. */
void fmt_conv_release(fmt_conv_src *c, const void *p, uint64_t n);
/* Bytes of the source tensors the .cflow writer reads: the progress bar's
 * total (each tensor once; the output head not when it is tied). */
uint64_t fmt_conv_total(const fmt_src *src);

/* An output file that appears under its name only when complete. */
typedef struct fmt_out {
    FILE       *f;      /* write here */
    int         fd;     /* its descriptor (f may be a cookie stream) */
    const char *path;   /* the final name (borrowed) */
    char       *tmp;    /* the temporary name, NULL while unnamed */
} fmt_out;
int  fmt_out_open(fmt_out *o, const char *path, char *err, size_t errlen);
/* Flush, fsync, name it path (replacing what was there); 0 or FMT_EIO
 * with the message.  fmt_out_abort must follow a failure. */
int  fmt_out_commit(fmt_out *o, char *err, size_t errlen);
/* Close and remove a file that was not committed (safe after commit). */
void fmt_out_abort(fmt_out *o);

/* fmt_synth_preset.c: 1 when preset name is written whatever its size
 * (a benchmark model: report-arch2_4-30b), 0 when a size limit holds. */
int  fmt_synth_at_scale(const char *name);

/* fmt_tile_check.c.  "PATH: " and the message into err; returns code. */
int  fmt_bad(char *err, size_t errlen, int code, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* The tile whose 32-byte header is at h (the file's offset foff) is t, of
 * layer (entry) entry: its header says so and its payload (after h) is
 * finite.  0, or FMT_EFORMAT with the one-line error naming path and
 * foff. */
int  fmt_tile_check(const char *path, unsigned entry, const fmt_tile *t, const uint8_t *h,
                    uint64_t foff, char *err, size_t errlen);

/* fmt_cflow_copy.c.  The size bytes of the file open at fd (named path)
 * in PROT_READ anonymous memory advised onto huge pages, except the whole
 * pages inside keep[0 .. n_keep) (byte ranges [off, end), sorted and
 * disjoint), which are mapped from the file at their place; *copied gets
 * the bytes read; drop: the file's cached pages are dropped behind the
 * copy (FMT_OPEN_DROP_CACHE).  The block (munmap it, size bytes), or NULL
 * with *rc FMT_ENOMEM or FMT_EIO and the one-line error in err. */
typedef struct fmt_frange { uint64_t off, end; } fmt_frange;
void *fmt_read_whole(int fd, uint64_t size, const fmt_frange *keep, unsigned n_keep,
                     int drop, uint64_t *copied, const char *path, int *rc, char *err,
                     size_t errlen);

#endif /* CFLOW_FMT_IMPL_H */
