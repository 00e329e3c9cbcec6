/*
 * fmt_src.c — one view over every source model cflow converts from: the
 * toolkit its readers (fmt_src_gguf.c, fmt_llama2c.c, fmt_hf.c, fmt_synth.c)
 * build a source with, and the converter's accessors.
 *
 * A source is a GGUF file, a legacy llama2.c checkpoint or a Hugging Face
 * directory (config.json + safetensors).  Whatever the container, the
 * converter sees the same thing (struct fmt_src in fmt_impl.h):
 *
 *   hparams   geometry and conventions (fmt_hparams), in cflow's terms
 *   roles     a table [(n_layers + 1)][FMT_NROLES] of tensor pointers: one
 *             row per layer, the last row for the globals (embedding,
 *             output norm, output head).  A tensor's ne[] is GGML order:
 *             ne[0] = columns = inputs.  Matrices are [rows = out][cols = in]
 *             in every container (safetensors shapes are reversed to match).
 *   kv        GGUF-named metadata, above all the tokenizer.* keys
 *
 * RoPE convention: GGUF "llama" files hold Q/K rows permuted so that RoPE
 * rotates adjacent pairs (llama.cpp's converter undoes HF's split-half
 * permutation); llama2.c checkpoints are in Meta's original adjacent-pair
 * layout too; HF checkpoints and GGUF "qwen2" rotate split halves
 * (FMT_FLAG_ROPE_NEOX).  We never permute weights: the flag tells the
 * engine which rotation the stored rows expect.
 *
 * Everything a converter will rely on is checked here once: every required
 * tensor present, readable and of the shape the geometry implies; the
 * vocabulary as long as the embedding.  Errors name the file and tensor.
 * Which reader opens a path is fmt_src_open.c's choice, above them all.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/cflow_format.h"
#include "format/fmt_impl.h"

static const char *const role_names[FMT_NROLES] = {
    [FMT_R_TOK_EMBD] = "token_embd",   [FMT_R_OUT_NORM] = "output_norm",
    [FMT_R_OUTPUT] = "output",         [FMT_R_ATTN_NORM] = "attn_norm",
    [FMT_R_Q] = "attn_q",              [FMT_R_K] = "attn_k",
    [FMT_R_V] = "attn_v",              [FMT_R_O] = "attn_output",
    [FMT_R_Q_BIAS] = "attn_q.bias",    [FMT_R_K_BIAS] = "attn_k.bias",
    [FMT_R_V_BIAS] = "attn_v.bias",    [FMT_R_FFN_NORM] = "ffn_norm",
    [FMT_R_GATE] = "ffn_gate",         [FMT_R_UP] = "ffn_up",
    [FMT_R_DOWN] = "ffn_down",         [FMT_R_ROUTER] = "ffn_gate_inp",
    [FMT_R_EXP_GATE] = "ffn_gate_exps", [FMT_R_EXP_UP] = "ffn_up_exps",
    [FMT_R_EXP_DOWN] = "ffn_down_exps", [FMT_R_MOE_NORM] = "moe_norm",
    [FMT_R_Q_NORM] = "attn_q_norm",    [FMT_R_K_NORM] = "attn_k_norm",
    [FMT_R_QKV] = "attn_qkv",          [FMT_R_GATE_UP] = "ffn_gate_up",
    [FMT_R_ATTN_POST_NORM] = "attn_post_norm",
    [FMT_R_FFN_POST_NORM] = "ffn_post_norm",
    [FMT_R_SINKS] = "attn_sinks",      [FMT_R_O_BIAS] = "attn_output.bias",
    [FMT_R_ROUTER_BIAS] = "ffn_gate_inp.bias",
    [FMT_R_EXP_GATE_BIAS] = "ffn_gate_exps.bias",
    [FMT_R_EXP_UP_BIAS] = "ffn_up_exps.bias",
    [FMT_R_EXP_DOWN_BIAS] = "ffn_down_exps.bias",
    [FMT_R_SH_GATE] = "ffn_gate_shexp", [FMT_R_SH_UP] = "ffn_up_shexp",
    [FMT_R_SH_DOWN] = "ffn_down_shexp",
    [FMT_R_ROPE_SHORT] = "rope_factors_short", [FMT_R_ROPE_LONG] = "rope_factors_long",
    [FMT_R_KV_A_NORM] = "attn_kv_a_norm", [FMT_R_K_B] = "attn_k_b", [FMT_R_V_B] = "attn_v_b",
    [FMT_R_Q_A] = "attn_q_a", [FMT_R_Q_A_NORM] = "attn_q_a_norm", [FMT_R_Q_B] = "attn_q_b",
};

const char *fmt_role_name(int role)
{
    if (role < 0 || role >= FMT_NROLES)
        return "unknown";
    return role_names[role];
}

const fmt_role_names fmt_gguf_role_names = {
    [FMT_R_TOK_EMBD] = "token_embd.weight",
    [FMT_R_OUT_NORM] = "output_norm.weight",
    [FMT_R_OUTPUT] = "output.weight",
    [FMT_R_ATTN_NORM] = "blk.%u.attn_norm.weight",
    [FMT_R_Q] = "blk.%u.attn_q.weight",
    [FMT_R_K] = "blk.%u.attn_k.weight",
    [FMT_R_V] = "blk.%u.attn_v.weight",
    [FMT_R_O] = "blk.%u.attn_output.weight",
    [FMT_R_Q_BIAS] = "blk.%u.attn_q.bias",
    [FMT_R_K_BIAS] = "blk.%u.attn_k.bias",
    [FMT_R_V_BIAS] = "blk.%u.attn_v.bias",
    [FMT_R_FFN_NORM] = "blk.%u.ffn_norm.weight",
    [FMT_R_GATE] = "blk.%u.ffn_gate.weight",
    [FMT_R_UP] = "blk.%u.ffn_up.weight",
    [FMT_R_DOWN] = "blk.%u.ffn_down.weight",
    [FMT_R_ROUTER] = "blk.%u.ffn_gate_inp.weight",
    [FMT_R_EXP_GATE] = "blk.%u.ffn_gate_exps.weight",
    [FMT_R_EXP_UP] = "blk.%u.ffn_up_exps.weight",
    [FMT_R_EXP_DOWN] = "blk.%u.ffn_down_exps.weight",
    [FMT_R_Q_NORM] = "blk.%u.attn_q_norm.weight",
    [FMT_R_K_NORM] = "blk.%u.attn_k_norm.weight",
};

static int role_is_global(int role)
{
    return role == FMT_R_TOK_EMBD || role == FMT_R_OUT_NORM ||
           role == FMT_R_OUTPUT || role == FMT_R_ROPE_SHORT || role == FMT_R_ROPE_LONG;
}

/* ---- tensor views ------------------------------------------------------ */
int fmt_src_add_tensor(fmt_src *s, const char *name, int dtype,
                       unsigned ndim, const uint64_t ne[4], const void *data,
                       uint64_t nbytes, char *err, size_t errlen)
{
    if (s->n_tensors == s->cap_tensors) {
        size_t cap = s->cap_tensors ? s->cap_tensors * 2 : 64;
        fmt_tensor *t = realloc(s->tensors, cap * sizeof *t);
        if (!t)
            goto nomem;
        /* the name index holds pointers to the names, not the structs, so
         * moving the array is harmless */
        s->tensors = t;
        s->cap_tensors = cap;
    }
    size_t len = strlen(name);
    char *copy = malloc(len + 1);
    if (!copy)
        goto nomem;
    memcpy(copy, name, len + 1);
    int r = fmt_names_put(&s->tidx, copy, len, s->n_tensors, NULL);
    if (r != 0) {
        char nm[64];
        free(copy);
        if (r < 0)
            goto nomem;
        fmt_err(err, errlen, "%s: tensor '%s' appears twice", s->path,
                fmt_safe_name(nm, name, len));
        return FMT_EFORMAT;
    }
    fmt_tensor *t = &s->tensors[s->n_tensors++];
    memset(t, 0, sizeof *t);
    t->name = copy;
    t->dtype = dtype;
    for (unsigned d = 0; d < 4; d++)
        t->ne[d] = ne[d];
    t->ndim = fmt_shape_rank(t->ne, ndim);
    t->data = data;
    t->nbytes = nbytes;
    return FMT_OK;
nomem:
    fmt_err(err, errlen, "%s: out of memory", s->path);
    return FMT_ENOMEM;
}

/* A GGUF's own tensors, then the views a source made (the split halves of
 * a fused tensor). */
const fmt_tensor *fmt_src_find(const fmt_src *s, const char *name)
{
    size_t i;
    const fmt_tensor *t = s->gguf ? fmt_gguf_find(s->gguf, name) : NULL;
    if (t)
        return t;
    if (fmt_names_get(&s->tidx, name, strlen(name), &i) < 0)
        return NULL;
    return &s->tensors[i];
}

void *fmt_src_own(fmt_src *s, size_t n, char *err, size_t errlen)
{
    void **o = realloc(s->owned, (s->n_owned + 1) * sizeof *o);
    void *p = o ? calloc(1, n ? n : 1) : NULL;
    if (o)
        s->owned = o;
    if (!p) {
        fmt_err(err, errlen, "%s: out of memory", s->path);
        return NULL;
    }
    s->owned[s->n_owned++] = p;
    return p;
}

/* ---- checks ------------------------------------------------------------ */
int fmt_src_check_hparams(const fmt_src *s, char *err, size_t errlen)
{
    const fmt_hparams *h = &s->hp;
    const char *bad = NULL;
    if (h->n_layers == 0 || h->n_layers > 4096)
        bad = "layer count";
    else if (h->dim == 0 || h->dim > (1u << 20))
        bad = "embedding length";
    else if (h->n_heads == 0 || h->n_heads > 65535)
        bad = "attention head count";
    else if (h->n_kv_heads == 0 || h->n_kv_heads > h->n_heads ||
             h->n_heads % h->n_kv_heads != 0)
        bad = "KV head count";
    else if (h->head_dim == 0 || h->head_dim % 2 != 0 ||
             h->head_dim > 65535 ||
             (uint64_t)h->head_dim * h->n_heads > (1u << 22))
        bad = "head dimension";
    else if ((h->ffn_dim == 0 && h->n_experts == 0) || h->ffn_dim > (1u << 24))
        bad = "feed-forward length";
    else if (h->max_seq == 0)
        bad = "context length";
    else if (!(h->rope_theta > 0) || !isfinite(h->rope_theta))
        bad = "RoPE base frequency";
    else if (!(h->norm_eps > 0) || !(h->norm_eps < 1))
        bad = "RMS norm epsilon";
    else if (h->n_experts > 0 &&
             (h->top_k == 0 || h->top_k > h->n_experts ||
              h->n_experts > 1024 || h->expert_ffn_dim == 0))
        bad = "expert counts";
    else if (h->n_experts == 0 && h->top_k != 0)
        bad = "experts used count";
    else if ((h->flags & FMT_FLAG_ROPE_LLAMA3) &&
             (!(h->rope_factor >= 1) || !isfinite(h->rope_factor) ||
              !(h->rope_low_freq > 0) ||
              !(h->rope_high_freq > h->rope_low_freq) ||
              !isfinite(h->rope_high_freq) || h->rope_orig_ctx == 0))
        bad = "Llama-3 RoPE scaling";
    char why[320];
    if (!bad && (fmt_pipeline_check(h, why, sizeof why) ||
                 fmt_hparams_fit(h, why, sizeof why))) {
        fmt_err(err, errlen, "%s: %s", s->path, why);
        return FMT_EFORMAT;
    }
    /* the families' fields: each a value cflow implements */
    if (!bad && fmt_family_check(h, why, sizeof why)) {
        fmt_err(err, errlen, "%s: %s", s->path, why);
        return FMT_EUNSUP;
    }
    if (bad) {
        fmt_err(err, errlen, "%s: implausible %s (layers %u, dim %u, heads "
                "%u/%u, head dim %u, ffn %u, context %u)", s->path, bad,
                h->n_layers, h->dim, h->n_heads, h->n_kv_heads, h->head_dim,
                h->ffn_dim, h->max_seq);
        return FMT_EFORMAT;
    }
    return FMT_OK;
}

void fmt_src_layer_geom(const fmt_src *s, unsigned l, fmt_layer_geom *g)
{
    if (s->lgeom && l < s->hp.n_layers)
        *g = s->lgeom[l];
    else
        fmt_layer_geom_default(&s->hp, g);
}

/* Expected ne[] of a role in a layer of geometry g (unused dimensions 1);
 * returns its rank. */
static unsigned role_shape(const fmt_hparams *h, const fmt_layer_geom *g,
                           int role, uint64_t ne[4])
{
    uint64_t qd = fmt_layer_q_rows(h, g), od = fmt_layer_o_cols(h, g);
    uint64_t kvd = (uint64_t)g->n_kv_heads * g->head_dim;
    ne[0] = ne[1] = ne[2] = ne[3] = 1;
    switch (role) {
    case FMT_R_TOK_EMBD: case FMT_R_OUTPUT:
        ne[0] = h->dim; ne[1] = h->vocab_size; return 2;
    case FMT_R_OUT_NORM: case FMT_R_ATTN_NORM: case FMT_R_FFN_NORM:
    case FMT_R_MOE_NORM:
        ne[0] = h->dim; return 1;
    case FMT_R_Q: ne[0] = h->dim; ne[1] = qd; return 2;
    case FMT_R_K: case FMT_R_V: ne[0] = h->dim; ne[1] = kvd; return 2;
    case FMT_R_O: ne[0] = od; ne[1] = h->dim; return 2;
    case FMT_R_Q_BIAS: ne[0] = qd; return 1;
    case FMT_R_K_BIAS: case FMT_R_V_BIAS: ne[0] = kvd; return 1;
    case FMT_R_GATE: case FMT_R_UP:
        ne[0] = h->dim; ne[1] = h->ffn_dim; return 2;
    case FMT_R_DOWN: ne[0] = h->ffn_dim; ne[1] = h->dim; return 2;
    case FMT_R_ROUTER: ne[0] = h->dim; ne[1] = h->n_experts; return 2;
    case FMT_R_Q_NORM: case FMT_R_K_NORM: ne[0] = g->head_dim; return 1;
    case FMT_R_EXP_GATE: case FMT_R_EXP_UP:
        ne[0] = h->dim; ne[1] = h->expert_ffn_dim; ne[2] = h->n_experts;
        return 3;
    case FMT_R_EXP_DOWN:
        ne[0] = h->expert_ffn_dim; ne[1] = h->dim; ne[2] = h->n_experts;
        return 3;
    case FMT_R_QKV: ne[0] = h->dim; ne[1] = qd + 2 * kvd; return 2;
    case FMT_R_GATE_UP: ne[0] = h->dim; ne[1] = 2 * (uint64_t)h->ffn_dim; return 2;
    case FMT_R_ATTN_POST_NORM: case FMT_R_FFN_POST_NORM: case FMT_R_O_BIAS:
        ne[0] = h->dim; return 1;
    case FMT_R_SINKS: ne[0] = g->n_heads; return 1;
    case FMT_R_ROUTER_BIAS: ne[0] = h->n_experts; return 1;
    case FMT_R_EXP_GATE_BIAS: case FMT_R_EXP_UP_BIAS:
        ne[0] = h->expert_ffn_dim; ne[1] = h->n_experts; return 2;
    case FMT_R_EXP_DOWN_BIAS: ne[0] = h->dim; ne[1] = h->n_experts; return 2;
    case FMT_R_SH_GATE: case FMT_R_SH_UP:
        ne[0] = h->dim; ne[1] = h->shared_ffn_dim; return 2;
    case FMT_R_SH_DOWN: ne[0] = h->shared_ffn_dim; ne[1] = h->dim; return 2;
    case FMT_R_ROPE_SHORT: case FMT_R_ROPE_LONG:
        ne[0] = (h->rope_dims ? h->rope_dims : h->head_dim) / 2; return 1;
    case FMT_R_KV_A_NORM: ne[0] = h->mla_rank; return 1;
    case FMT_R_K_B: ne[0] = h->mla_nope; ne[1] = h->mla_rank; ne[2] = g->n_heads; return 3;
    case FMT_R_V_B: ne[0] = h->mla_rank; ne[1] = h->mla_v; ne[2] = g->n_heads; return 3;
    case FMT_R_Q_A: ne[0] = h->dim; ne[1] = h->mla_q_rank; return 2;
    case FMT_R_Q_A_NORM: ne[0] = h->mla_q_rank; return 1;
    case FMT_R_Q_B: ne[0] = h->mla_q_rank; ne[1] = qd; return 2;
    default: return 0;
    }
}

static int check_tensor(const fmt_src *s, const fmt_tensor *t, int role,
                        unsigned layer, char *err, size_t errlen)
{
    uint64_t ne[4];
    char nm[64];
    fmt_layer_geom g;
    fmt_src_layer_geom(s, layer, &g);
    (void)role_shape(&s->hp, &g, role, ne);
    /* OLMoE normalises all of Q and of K: [q_dim] and [kv_dim] */
    if ((role == FMT_R_Q_NORM || role == FMT_R_K_NORM) && t->ndim == 1 &&
        t->ne[0] == (uint64_t)(role == FMT_R_Q_NORM ? g.n_heads : g.n_kv_heads) * g.head_dim)
        ne[0] = t->ne[0];
    fmt_safe_name(nm, t->name, strlen(t->name));
    if (t->dtype < 0 || fmt_dtype_block(t->dtype) == 0) {
        fmt_err(err, errlen, "%s: tensor '%s' has a type cflow cannot read",
                s->path, nm);
        return FMT_EUNSUP;
    }

    /* unused dimensions are 1 on both sides: trailing unit dimensions
     * match (fmt_shape_rank), any other difference does not */
    int ok = 1;
    for (unsigned d = 0; d < 4; d++)
        if (t->ne[d] != ne[d])
            ok = 0;
    if (!ok) {
        char has[96], want[96];
        fmt_err(err, errlen, "%s: tensor '%s' has shape %s, expected %s (ne order: "
                "columns first)", s->path, nm, fmt_shape_str(has, sizeof has, t->ne, t->ndim),
                fmt_shape_str(want, sizeof want, ne, 4));
        return FMT_EFORMAT;
    }
    return FMT_OK;
}

/* Row views [r0, r0 + n) of the 2-D tensor t (rows contiguous in every
 * container), named "<t>:<what>", in memory the source owns (the role
 * table points at it, so it must not move). */
static const fmt_tensor *row_view(fmt_src *s, const fmt_tensor *t, uint64_t r0, uint64_t n,
                                  const char *what, char *err, size_t errlen)
{
    size_t nl = strlen(t->name) + strlen(what) + 2;
    fmt_tensor *v = fmt_src_own(s, sizeof *v + nl, err, errlen);
    if (!v)
        return NULL;
    uint64_t rb = fmt_dtype_size(t->dtype, t->ne[0]);
    *v = *t;
    v->name = (char *)(v + 1);
    snprintf((char *)(v + 1), nl, "%s:%s", t->name, what);
    v->ne[1] = n;
    v->ndim = fmt_shape_rank(v->ne, 2);
    v->data = (const uint8_t *)t->data + r0 * rb;
    v->nbytes = n * rb;
    return v;
}

/* A fused tensor of layer l (role fused) as its parts' roles, split by
 * rows: Phi-3's QKV into Q, K, V and its gate/up into gate and up, where
 * the parts are not there on their own. */
static int split_fused(fmt_src *s, unsigned l, char *err, size_t errlen)
{
    static const struct { int fused, n, part[3]; const char *what[3]; } sp[] = {
        { FMT_R_QKV, 3, { FMT_R_Q, FMT_R_K, FMT_R_V }, { "q", "k", "v" } },
        { FMT_R_GATE_UP, 2, { FMT_R_GATE, FMT_R_UP }, { "gate", "up" } },
    };
    const fmt_hparams *h = &s->hp;
    const fmt_tensor **row = s->roles + (size_t)l * FMT_NROLES;
    fmt_layer_geom g;
    fmt_src_layer_geom(s, l, &g);
    for (size_t i = 0; i < sizeof sp / sizeof *sp; i++) {
        const fmt_tensor *t = row[sp[i].fused];
        if (!t || row[sp[i].part[0]])
            continue;
        uint64_t ne[4], q = (uint64_t)g.n_heads * g.head_dim, kv = (uint64_t)g.n_kv_heads * g.head_dim;
        uint64_t rows[3] = { q, kv, kv };
        if (sp[i].fused == FMT_R_GATE_UP)
            rows[0] = rows[1] = h->ffn_dim;
        int rc = check_tensor(s, t, sp[i].fused, l, err, errlen);
        (void)role_shape(h, &g, sp[i].fused, ne);
        if (rc < 0)
            return rc;
        if (fmt_dtype_block(t->dtype) > 1 && t->ne[0] % fmt_dtype_block(t->dtype)) {
            fmt_err(err, errlen, "%s: tensor '%s' rows end inside a block", s->path, t->name);
            return FMT_EFORMAT;
        }
        for (int k = 0, r0 = 0; k < sp[i].n; r0 += (int)rows[k], k++)
            if (!(row[sp[i].part[k]] = row_view(s, t, (uint64_t)r0, rows[k], sp[i].what[k],
                                                 err, errlen)))
                return FMT_ENOMEM;
    }
    return FMT_OK;
}

/* MLA's per-head matrices [n_heads][rows][cols] (checked 3-D) as one 2-D
 * matrix of n_heads * rows rows, head h's rows first to last: the .cflow
 * stream's layout (the engine gives head h's tiles its own input). */
static int fold_heads(fmt_src *s, unsigned l, int role, char *err, size_t errlen)
{
    const fmt_tensor **slot = &s->roles[(size_t)l * FMT_NROLES + (size_t)role];
    const fmt_tensor *t = *slot;
    if (t->parts) {
        fmt_err(err, errlen, "%s: tensor '%s' is stored in parts", s->path, t->name);
        return FMT_EUNSUP;
    }
    fmt_tensor *v = fmt_src_own(s, sizeof *v, err, errlen);
    if (!v)
        return FMT_ENOMEM;
    *v = *t;
    v->ne[1] = t->ne[1] * t->ne[2];
    v->ne[2] = 1;
    v->ndim = 2;
    *slot = v;
    return FMT_OK;
}

/* Roles a layer's tensors fill, as the geometry and what is there say:
 * need[r] of layer l is 1 for a required role, 2 for an optional one (its
 * shape checked when it is there), 0 for one the model does not use. */
static void layer_needs(const fmt_src *s, unsigned l, const fmt_layer_geom *lg, int *need)
{
    const fmt_hparams *h = &s->hp;
    memset(need, 0, FMT_NROLES * sizeof *need);
    need[FMT_R_TOK_EMBD] = need[FMT_R_OUT_NORM] = 1;
    need[FMT_R_ATTN_NORM] = need[FMT_R_Q] = need[FMT_R_K] = need[FMT_R_O] = 1;
    need[FMT_R_V] = fmt_layer_has_v(h, lg);
    need[FMT_R_KV_A_NORM] = need[FMT_R_K_B] = need[FMT_R_V_B] = h->mla_rank != 0;
    need[FMT_R_Q_A] = need[FMT_R_Q_A_NORM] = need[FMT_R_Q_B] = h->mla_q_rank != 0;
    need[FMT_R_Q] = !h->mla_q_rank;
    /* a dense FFN when it has a size; experts when there are any (our
     * pipeline-native models have both, Mixtral-style models only experts,
     * DeepSeek's first layers only the dense one) */
    int dense = fmt_layer_dense(h, l), moe = fmt_layer_moe(h, lg, l);
    need[FMT_R_FFN_NORM] = dense || moe;
    need[FMT_R_GATE] = need[FMT_R_UP] = need[FMT_R_DOWN] = dense;
    need[FMT_R_ROUTER] = need[FMT_R_EXP_GATE] = need[FMT_R_EXP_UP] = need[FMT_R_EXP_DOWN] = moe;
    need[FMT_R_SH_GATE] = need[FMT_R_SH_UP] = need[FMT_R_SH_DOWN] = moe && h->shared_ffn_dim;
    if (h->flags & FMT_FLAG_QKV_BIAS)
        need[FMT_R_Q_BIAS] = need[FMT_R_K_BIAS] = 1, need[FMT_R_V_BIAS] = need[FMT_R_V];
    if (h->flags & FMT_FLAG_QK_NORM)
        need[FMT_R_Q_NORM] = need[FMT_R_K_NORM] = 1;
    need[FMT_R_MOE_NORM] = moe ? 2 : 0;
    need[FMT_R_ROPE_SHORT] = h->rope_scaling == FMT_ROPE_LONGROPE;
    need[FMT_R_ROPE_LONG] = h->rope_scaling == FMT_ROPE_LONGROPE ? 2 : 0;
    /* what layer 0 has, every layer has: the families' extras */
    static const int every[] = { FMT_R_ATTN_POST_NORM, FMT_R_FFN_POST_NORM, FMT_R_SINKS,
                                 FMT_R_O_BIAS };
    static const int every_moe[] = { FMT_R_ROUTER_BIAS, FMT_R_EXP_GATE_BIAS, FMT_R_EXP_UP_BIAS,
                                     FMT_R_EXP_DOWN_BIAS };
    for (size_t i = 0; i < sizeof every / sizeof *every; i++)
        need[every[i]] = fmt_src_tensor(s, every[i], 0) != NULL;
    for (size_t i = 0; i < sizeof every_moe / sizeof *every_moe; i++) {
        const fmt_tensor *t = NULL;
        for (unsigned j = 0; j < h->n_layers && !t; j++)
            t = fmt_src_tensor(s, every_moe[i], j);
        need[every_moe[i]] = moe && t;
    }
}

int fmt_src_bind(fmt_src *s, const char *const *names, int tie_forced,
                 char *err, size_t errlen)
{
    fmt_hparams *h = &s->hp;
    char name[256];
    int rc;
    size_t ntens = s->gguf ? (size_t)fmt_gguf_n_tensors(s->gguf)
                           : s->n_tensors;
    /* every layer has at least 6 tensors: bound the table by the file */
    if (h->n_layers > ntens / 6 + 1) {
        fmt_err(err, errlen, "%s: %u layers but only %zu tensors", s->path,
                h->n_layers, ntens);
        return FMT_EFORMAT;
    }
    size_t rows = (size_t)h->n_layers + 1;
    s->roles = calloc(rows * FMT_NROLES, sizeof *s->roles);
    if (!s->roles) {
        fmt_err(err, errlen, "%s: out of memory", s->path);
        return FMT_ENOMEM;
    }
    for (int r = 0; r < FMT_NROLES; r++) {
        if (!names[r])
            continue;
        if (role_is_global(r)) {
            if (r == FMT_R_OUTPUT && tie_forced)
                continue;
            s->roles[(size_t)h->n_layers * FMT_NROLES + (size_t)r] =
                fmt_src_find(s, names[r]);
            continue;
        }
        for (unsigned l = 0; l < h->n_layers; l++) {
            snprintf(name, sizeof name, names[r], l);
            s->roles[(size_t)l * FMT_NROLES + (size_t)r] =
                fmt_src_find(s, name);
        }
    }
    for (unsigned l = 0; l < h->n_layers; l++)
        if ((rc = split_fused(s, l, err, errlen)) < 0)
            return rc;
    /* conventions settled by what is present */
    if (!fmt_src_tensor(s, FMT_R_OUTPUT, 0))
        h->flags |= FMT_FLAG_TIED;
    else
        h->flags &= ~(uint32_t)FMT_FLAG_TIED;
    if (fmt_src_tensor(s, FMT_R_Q_BIAS, 0) || fmt_src_tensor(s, FMT_R_K_BIAS, 0)
        || fmt_src_tensor(s, FMT_R_V_BIAS, 0))
        h->flags |= FMT_FLAG_QKV_BIAS;
    if (fmt_src_tensor(s, FMT_R_Q_NORM, 0) || fmt_src_tensor(s, FMT_R_K_NORM, 0))
        h->flags |= FMT_FLAG_QK_NORM;

    /* required tensors, each of the shape its layer's geometry implies */
    int need[FMT_NROLES];
    for (unsigned l = 0; l < h->n_layers; l++) {
        fmt_layer_geom lg;
        fmt_src_layer_geom(s, l, &lg);
        layer_needs(s, l, &lg, need);
        for (int r = 0; r < FMT_NROLES; r++) {
            if (role_is_global(r) ? l != 0 : 0)
                continue;
            const fmt_tensor *t = fmt_src_tensor(s, r, l);
            if (r == FMT_R_QKV || r == FMT_R_GATE_UP)
                continue;              /* (split_fused checked them) */
            if (!t) {
                if (need[r] != 1)
                    continue;
                if (!names[r] && !(r >= FMT_R_Q && r <= FMT_R_V) &&
                    !(r >= FMT_R_GATE && r <= FMT_R_UP)) {
                    fmt_err(err, errlen, "%s: %s tensors are not supported "
                            "in this container", s->path, fmt_role_name(r));
                    return FMT_EUNSUP;
                }
                if (names[r])
                    snprintf(name, sizeof name, names[r], l);
                else
                    snprintf(name, sizeof name, "%s", fmt_role_name(r));
                if (role_is_global(r))
                    fmt_err(err, errlen, "%s: tensor '%s' (%s) is missing",
                            s->path, name, fmt_role_name(r));
                else
                    fmt_err(err, errlen, "%s: tensor '%s' (%s, layer %u) is "
                            "missing", s->path, name, fmt_role_name(r), l);
                return FMT_EFORMAT;
            }
            /* shapes of tensors the model does not use (experts in a
             * dense model, a layer's parts its geometry leaves out) are
             * not checked */
            if (!need[r])
                continue;              /* (2: optional, checked when there) */
            if ((rc = check_tensor(s, t, r, l, err, errlen)) < 0)
                return rc;
            if ((r == FMT_R_K_B || r == FMT_R_V_B) && (rc = fold_heads(s, l, r, err, errlen)) < 0)
                return rc;
        }
    }
    return FMT_OK;
}

/* ---- vocabulary length ------------------------------------------------- */
int fmt_src_fit_vocab(fmt_src *s, uint32_t vocab, int allow_pad,
                      int allow_trim, char *err, size_t errlen)
{
    const char *K_TOK = "tokenizer.ggml.tokens";
    const char *K_SC = "tokenizer.ggml.scores";
    const char *K_TT = "tokenizer.ggml.token_type";
    const fmt_kv *kv = s->kv;
    uint64_t n = fmt_kv_arr_len(kv, K_TOK);
    int arr = 0;
    if (n == 0 || fmt_kv_type_of(kv, K_TOK, &arr) != FMT_KV_STR || !arr) {
        fmt_err(err, errlen, "%s: no tokenizer.ggml.tokens in the vocabulary",
                s->path);
        return FMT_EFORMAT;
    }
    if (n == vocab)
        return FMT_OK;
    if ((n < vocab && !allow_pad) || (n > vocab && !allow_trim) || !s->kv_own) {
        fmt_err(err, errlen, "%s: the embedding has %u rows but the "
                "vocabulary has %llu tokens", s->path, vocab,
                (unsigned long long)n);
        return FMT_EFORMAT;
    }
    /* rebuild the three arrays at length vocab */
    fmt_kv *kv2 = s->kv_own;
    const char **toks = malloc((size_t)vocab * sizeof *toks);
    size_t *lens = malloc((size_t)vocab * sizeof *lens);
    float *sc = malloc((size_t)vocab * sizeof *sc);
    int32_t *tt = malloc((size_t)vocab * sizeof *tt);
    char *pads = NULL;
    int rc = FMT_ENOMEM;
    if (!toks || !lens || !sc || !tt)
        goto out;
    uint64_t keep = n < vocab ? n : vocab;
    if (vocab > keep) {
        pads = malloc((size_t)(vocab - keep) * 24);
        if (!pads)
            goto out;
    }
    int has_sc = fmt_kv_arr_len(kv, K_SC) == n;
    int has_tt = fmt_kv_arr_len(kv, K_TT) == n;
    for (uint64_t i = 0; i < vocab; i++) {
        if (i < keep) {
            toks[i] = fmt_kv_arr_str(kv, K_TOK, i, &lens[i]);
            if (!has_sc || fmt_kv_arr_f32(kv, K_SC, i, &sc[i]) < 0)
                sc[i] = 0;
            if (!has_tt || fmt_kv_arr_i32(kv, K_TT, i, &tt[i]) < 0)
                tt[i] = 1;
        } else {
            char *p = pads + (size_t)(i - keep) * 24;
            lens[i] = (size_t)snprintf(p, 24, "[PAD%llu]",
                                       (unsigned long long)i);
            toks[i] = p;
            sc[i] = 0;
            tt[i] = 5; /* llama.cpp's UNUSED */
        }
    }
    /* arrays from the kv are read before being replaced: copy into the new
     * entry happens before the old one is released (fmt_kv_set_* copies) */
    if (fmt_kv_set_arr_str(kv2, K_TOK, toks, lens, vocab) < 0 ||
        (has_sc && fmt_kv_set_arr_f32(kv2, K_SC, sc, vocab) < 0) ||
        (has_tt && fmt_kv_set_arr_i32(kv2, K_TT, tt, vocab) < 0))
        goto out;
    rc = FMT_OK;
out:
    if (rc == FMT_ENOMEM)
        fmt_err(err, errlen, "%s: out of memory", s->path);
    free(toks);
    free(lens);
    free(sc);
    free(tt);
    free(pads);
    return rc;
}

/* ---- Llama-3 rope scaling ---------------------------------------------- */
void fmt_rope_llama3_factors(const fmt_hparams *hp, float *out)
{
    const double pi = 3.14159265358979323846;
    double old_ctx = hp->rope_orig_ctx;
    double low_wl = old_ctx / hp->rope_low_freq;
    double high_wl = old_ctx / hp->rope_high_freq;
    for (unsigned i = 0; i < hp->head_dim / 2; i++) {
        /* float32 in the converter: 1 / base^(2i/dim) */
        float freq = (float)(1.0 / pow(hp->rope_theta,
                                       (double)(2 * i) / hp->head_dim));
        double wl = 2 * pi / freq;
        if (wl < high_wl) {
            out[i] = 1.0f;
        } else if (wl > low_wl) {
            out[i] = hp->rope_factor;
        } else {
            double smooth = (old_ctx / wl - hp->rope_low_freq) /
                            (hp->rope_high_freq - hp->rope_low_freq);
            out[i] = (float)(1.0 / ((1 - smooth) / hp->rope_factor + smooth));
        }
    }
}

void fmt_src_close(fmt_src *s)
{
    if (!s)
        return;
    fmt_gguf_close(s->gguf);
    fmt_kv_free(s->kv_own);
    for (size_t i = 0; i < s->n_tensors; i++)
        free((char *)s->tensors[i].name);
    free(s->tensors);
    fmt_names_free(&s->tidx);
    for (size_t i = 0; i < s->n_maps; i++)
        fmt_map_close(&s->maps[i]);
    free(s->maps);
    free(s->roles);
    free(s->lgeom);
    free(s->parts);
    for (size_t i = 0; i < s->n_owned; i++)
        free(s->owned[i]);
    free(s->owned);
    free(s->path);
    free(s);
}

const fmt_hparams *fmt_src_hparams(const fmt_src *s)
{
    return s ? &s->hp : NULL;
}

const fmt_tensor *fmt_src_tensor(const fmt_src *s, int role, unsigned layer)
{
    if (!s || !s->roles || role < 0 || role >= FMT_NROLES)
        return NULL;
    if (role_is_global(role))
        layer = s->hp.n_layers;
    else if (layer >= s->hp.n_layers)
        return NULL;
    return s->roles[(size_t)layer * FMT_NROLES + (size_t)role];
}

const fmt_kv *fmt_src_kv(const fmt_src *s)
{
    return s ? s->kv : NULL;
}

const char *fmt_src_kind(const fmt_src *s)
{
    return s ? s->kind : NULL;
}

/* ---- a GGUF source's "<arch>.<suffix>" keys (fmt_src_gguf.c, the
 * families' readers in fmt_family.c) ---- */

int fmt_gguf_key_u32(const fmt_src *s, const char *suffix, uint32_t *out, int req,
                     char *err, size_t errlen)
{
    char key[128];
    int64_t v;
    snprintf(key, sizeof key, "%s.%s", s->hp.arch, suffix);
    if (!req && !fmt_kv_has(s->kv, key))
        return FMT_OK;
    if (fmt_kv_get_u32(s->kv, key, out) < 0) {
        if (fmt_kv_get_i64(s->kv, key, &v) == 0 && v > (int64_t)UINT32_MAX)
            fmt_err(err, errlen, "%s: metadata %s %lld is over the %u cflow reads",
                    s->path, key, (long long)v, UINT32_MAX);
        else
            fmt_err(err, errlen, "%s: metadata %s is %s", s->path, key,
                    fmt_kv_has(s->kv, key) ? "not an unsigned integer" : "missing");
        return FMT_EFORMAT;
    }
    return FMT_OK;
}

int fmt_gguf_key_f32(const fmt_src *s, const char *suffix, float *out, char *err,
                     size_t errlen)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", s->hp.arch, suffix);
    if (!fmt_kv_has(s->kv, key))
        return FMT_OK;
    if (fmt_kv_get_f32(s->kv, key, out) < 0) {
        fmt_err(err, errlen, "%s: metadata %s is not a float", s->path, key);
        return FMT_EFORMAT;
    }
    return FMT_OK;
}
