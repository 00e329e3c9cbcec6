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
           role == FMT_R_OUTPUT;
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

const fmt_tensor *fmt_src_find(const fmt_src *s, const char *name)
{
    size_t i;
    if (s->gguf)
        return fmt_gguf_find(s->gguf, name);
    if (fmt_names_get(&s->tidx, name, strlen(name), &i) < 0)
        return NULL;
    return &s->tensors[i];
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
    char why[160];
    if (!bad && (fmt_pipeline_check(h, why, sizeof why) ||
                 fmt_hparams_fit(h, why, sizeof why))) {
        fmt_err(err, errlen, "%s: %s", s->path, why);
        return FMT_EFORMAT;
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
    const fmt_hparams *h = &s->hp;
    if (s->lgeom && l < h->n_layers) {
        *g = s->lgeom[l];
        return;
    }
    g->n_heads = h->n_heads;
    g->n_kv_heads = h->n_kv_heads;
    g->head_dim = h->head_dim;
    g->rope_dims = h->head_dim;
    g->rope_theta = h->rope_theta;
    g->sliding_window = h->sliding_window;
    g->flags = 0;
}

/* Expected ne[] of a role in a layer of geometry g (unused dimensions 1);
 * returns its rank. */
static unsigned role_shape(const fmt_hparams *h, const fmt_layer_geom *g,
                           int role, uint64_t ne[4])
{
    uint64_t qd = (uint64_t)g->n_heads * g->head_dim;
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
    case FMT_R_O: ne[0] = qd; ne[1] = h->dim; return 2;
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

int fmt_src_bind(fmt_src *s, fmt_role_names names, int tie_forced,
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

    /* required tensors */
    int need[FMT_NROLES] = { 0 };
    need[FMT_R_TOK_EMBD] = need[FMT_R_OUT_NORM] = 1;
    need[FMT_R_ATTN_NORM] = need[FMT_R_Q] = need[FMT_R_K] = need[FMT_R_V] = 1;
    need[FMT_R_O] = need[FMT_R_FFN_NORM] = 1;
    /* a dense FFN when it has a size; experts when there are any (our
     * pipeline-native models have both, Mixtral-style models only experts) */
    if (h->ffn_dim > 0)
        need[FMT_R_GATE] = need[FMT_R_UP] = need[FMT_R_DOWN] = 1;
    if (h->n_experts > 0) {
        need[FMT_R_ROUTER] = need[FMT_R_EXP_GATE] = need[FMT_R_EXP_UP] = 1;
        need[FMT_R_EXP_DOWN] = 1;
    }
    if (h->flags & FMT_FLAG_QKV_BIAS)
        need[FMT_R_Q_BIAS] = need[FMT_R_K_BIAS] = need[FMT_R_V_BIAS] = 1;
    if (h->flags & FMT_FLAG_QK_NORM)
        need[FMT_R_Q_NORM] = need[FMT_R_K_NORM] = 1;
    for (int r = 0; r < FMT_NROLES; r++) {
        unsigned nl = role_is_global(r) ? 1 : h->n_layers;
        for (unsigned l = 0; l < nl; l++) {
            const fmt_tensor *t = fmt_src_tensor(s, r, l);
            fmt_layer_geom lg;
            fmt_src_layer_geom(s, l, &lg);
            /* per-layer geometry: a layer without experts or without a V
             * projection has none to check */
            int skip = ((lg.flags & FMT_LG_NO_EXPERTS) &&
                        ((r >= FMT_R_ROUTER && r <= FMT_R_EXP_DOWN) ||
                         r == FMT_R_MOE_NORM)) ||
                       ((lg.flags & FMT_LG_KV_SHARED) &&
                        (r == FMT_R_V || r == FMT_R_V_BIAS));
            if (!t) {
                if (!need[r] || (skip && !role_is_global(r)))
                    continue;
                if (!names[r]) {
                    fmt_err(err, errlen, "%s: %s tensors are not supported "
                            "in this container", s->path, fmt_role_name(r));
                    return FMT_EUNSUP;
                }
                snprintf(name, sizeof name, names[r], l);
                if (role_is_global(r))
                    fmt_err(err, errlen, "%s: tensor '%s' (%s) is missing",
                            s->path, name, fmt_role_name(r));
                else
                    fmt_err(err, errlen, "%s: tensor '%s' (%s, layer %u) is "
                            "missing", s->path, name, fmt_role_name(r), l);
                return FMT_EFORMAT;
            }
            /* shapes of tensors whose geometry is unknown (experts in a
             * dense model) are not checked; they are not used */
            if (((r >= FMT_R_ROUTER && r <= FMT_R_EXP_DOWN) ||
                 r == FMT_R_MOE_NORM) && h->n_experts == 0)
                continue;
            if (r >= FMT_R_GATE && r <= FMT_R_DOWN && h->ffn_dim == 0)
                continue;
            if (skip && !role_is_global(r))
                continue;
            if ((rc = check_tensor(s, t, r, l, err, errlen)) < 0)
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
