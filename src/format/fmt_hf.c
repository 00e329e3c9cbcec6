/*
 * fmt_hf.c — Hugging Face model directories: config.json + safetensors.
 *
 * config.json (read with json-c) gives the architecture and geometry:
 *   architectures[0]   LlamaForCausalLM, MistralForCausalLM (arch "llama"),
 *                      Qwen2ForCausalLM (arch "qwen2"), Qwen3ForCausalLM
 *                      (arch "qwen3": per-head q_norm/k_norm, read as
 *                      FMT_FLAG_QK_NORM when present) or
 *                      Qwen3MoeForCausalLM (arch "qwen3moe": num_experts,
 *                      num_experts_per_tok, moe_intermediate_size,
 *                      norm_topk_prob; every layer sparse)
 *   hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
 *   num_key_value_heads (default: heads), head_dim (default hidden/heads),
 *   max_position_embeddings, vocab_size, rope_theta (10000), rms_norm_eps
 *   (1e-6), tie_word_embeddings (false), hidden_act ("silu" only),
 *   rope_scaling {rope_type|type "llama3", factor, low_freq_factor,
 *   high_freq_factor, original_max_position_embeddings},
 *   sliding_window (Mistral; Qwen2 only with use_sliding_window).
 *
 * Weights are in model.safetensors, or in shards listed by
 * model.safetensors.index.json ({"weight_map": {tensor: shard file}}).
 * A safetensors file:
 *
 *   u64      N, the length of the JSON header (little endian)
 *   u8[N]    JSON: {"name": {"dtype": "BF16", "shape": [rows, cols],
 *            "data_offsets": [begin, end]}, ..., "__metadata__": {...}}
 *            (padded with spaces)
 *   data     the tensors, at [begin, end) relative to byte 8 + N
 *
 * Each shard is mapped; every header entry is validated (dtype, shape,
 * offsets inside the data, end - begin == elements * element size) before
 * a view is made.  Then, as the format's specification asks and its own
 * loader enforces, the tensors' byte ranges must tile the data exactly:
 * sorted by start, each begins where the one before ends, the first at 0
 * and the last at the end of the file.  Without that, two tensors could
 * share bytes, or a file could hide a second payload in a hole (a
 * polyglot), and a checkpoint that the reference loader refuses would load
 * here.  Shapes are row-major with the last dimension innermost,
 * so ne[] is the shape reversed.  F32, F16 and BF16 map to FMT_DT_*; other
 * dtypes are kept as unreadable views (an error only if a role needs one).
 *
 * HF checkpoints rotate split halves in RoPE (FMT_FLAG_ROPE_NEOX): the
 * weights are used as stored, never permuted.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <json-c/json.h>

#include "format/cflow_format.h"
#include "format/fmt_impl.h"

#define HF_MAX_JSON     (16u << 20)   /* config.json, index.json */
#define HF_MAX_HEADER   (100u << 20)  /* safetensors header (the spec's cap) */
#define HF_MAX_SHARDS   4096

/* The names both tables share: embeddings, norms, attention (with
 * Qwen2's biases and Qwen3's q/k norms). */
#define HF_COMMON_NAMES \
    [FMT_R_TOK_EMBD] = "model.embed_tokens.weight", \
    [FMT_R_OUT_NORM] = "model.norm.weight", \
    [FMT_R_OUTPUT] = "lm_head.weight", \
    [FMT_R_ATTN_NORM] = "model.layers.%u.input_layernorm.weight", \
    [FMT_R_Q] = "model.layers.%u.self_attn.q_proj.weight", \
    [FMT_R_K] = "model.layers.%u.self_attn.k_proj.weight", \
    [FMT_R_V] = "model.layers.%u.self_attn.v_proj.weight", \
    [FMT_R_O] = "model.layers.%u.self_attn.o_proj.weight", \
    [FMT_R_Q_BIAS] = "model.layers.%u.self_attn.q_proj.bias", \
    [FMT_R_K_BIAS] = "model.layers.%u.self_attn.k_proj.bias", \
    [FMT_R_V_BIAS] = "model.layers.%u.self_attn.v_proj.bias", \
    [FMT_R_FFN_NORM] = "model.layers.%u.post_attention_layernorm.weight", \
    [FMT_R_Q_NORM] = "model.layers.%u.self_attn.q_norm.weight", \
    [FMT_R_K_NORM] = "model.layers.%u.self_attn.k_norm.weight",

static const fmt_role_names hf_role_names = {
    HF_COMMON_NAMES
    [FMT_R_GATE] = "model.layers.%u.mlp.gate_proj.weight",
    [FMT_R_UP] = "model.layers.%u.mlp.up_proj.weight",
    [FMT_R_DOWN] = "model.layers.%u.mlp.down_proj.weight",
    /* MoE checkpoints with per-expert tensors are not read from HF; our
     * pipeline-native export stacks the experts (ARCHITECTURES.md) */
    [FMT_R_MOE_NORM] = "model.layers.%u.moe_norm.weight",
    [FMT_R_ROUTER] = "model.layers.%u.moe.router.weight",
    [FMT_R_EXP_GATE] = "model.layers.%u.moe.experts.gate_proj.weight",
    [FMT_R_EXP_UP] = "model.layers.%u.moe.experts.up_proj.weight",
    [FMT_R_EXP_DOWN] = "model.layers.%u.moe.experts.down_proj.weight",
};

/* Qwen3-MoE: the router is mlp.gate; the experts are one tensor per expert
 * (mlp.experts.E.gate_proj ...), which qwen3moe_stack assembles into the
 * 3-D tensors named here (no such names exist in the file). */
#define HF_QMOE_STACK "model.layers.%u.mlp.experts.%s.weight"
static const fmt_role_names hf_qwen3moe_names = {
    HF_COMMON_NAMES
    [FMT_R_ROUTER] = "model.layers.%u.mlp.gate.weight",
    [FMT_R_EXP_GATE] = "model.layers.%u.mlp.experts.gate_proj.weight",
    [FMT_R_EXP_UP] = "model.layers.%u.mlp.experts.up_proj.weight",
    [FMT_R_EXP_DOWN] = "model.layers.%u.mlp.experts.down_proj.weight",
};

/* Assemble each layer's per-expert gate/up/down tensors into one 3-D
 * tensor whose parts[] point at the experts' data (nothing is copied).
 * Every expert must be present, readable, 2-D, and of one type and shape. */
static int qwen3moe_stack(fmt_src *s, char *err, size_t errlen)
{
    static const char *const mats[3] = { "gate_proj", "up_proj", "down_proj" };
    const fmt_hparams *h = &s->hp;
    unsigned E = h->n_experts, n_moe = 0;
    for (unsigned l = 0; l < h->n_layers; l++)
        n_moe += (unsigned)fmt_layer_moe(h, NULL, l);
    size_t n = (size_t)n_moe * 3 * E;
    char name[256], nm[64];
    /* each part is a tensor of the file: bound the table by them */
    if (n > s->n_tensors) {
        fmt_err(err, errlen, "%s: %u layers of %u experts but only %zu tensors",
                s->path, h->n_layers, E, s->n_tensors);
        return FMT_EFORMAT;
    }
    if (!(s->parts = calloc(n ? n : 1, sizeof *s->parts))) {
        fmt_err(err, errlen, "%s: out of memory", s->path);
        return FMT_ENOMEM;
    }
    /* (DeepSeek's leading dense layers have none) */
    for (unsigned l = 0, i = 0; l < h->n_layers; l++)
        for (unsigned m = 0; m < 3 && fmt_layer_moe(h, NULL, l); m++, i++) {
            const void **parts = s->parts + (size_t)i * E;
            const fmt_tensor *t0 = NULL;
            for (unsigned e = 0; e < E; e++) {
                snprintf(name, sizeof name, "model.layers.%u.mlp.experts.%u.%s.weight", l,
                         e, mats[m]);
                const fmt_tensor *t = fmt_src_find(s, name);
                if (!t) {
                    fmt_err(err, errlen, "%s: tensor '%s' is missing", s->path, name);
                    return FMT_EFORMAT;
                }
                if (t->ndim > 2 || (t0 && (t->dtype != t0->dtype || t->ne[0] != t0->ne[0] ||
                                            t->ne[1] != t0->ne[1]))) {
                    fmt_err(err, errlen, "%s: tensor '%s' differs from expert 0's type "
                            "or shape", s->path, fmt_safe_name(nm, name, strlen(name)));
                    return FMT_EFORMAT;
                }
                if (!t0)
                    t0 = t;
                parts[e] = t->data;
            }
            uint64_t ne[4] = { t0->ne[0], t0->ne[1], E, 1 };
            snprintf(name, sizeof name, HF_QMOE_STACK, l, mats[m]);
            int rc = fmt_src_add_tensor(s, name, t0->dtype, 3, ne, t0->data,
                                        t0->nbytes * E, err, errlen);
            if (rc < 0)
                return rc;
            s->tensors[s->n_tensors - 1].parts = parts;
        }
    return FMT_OK;
}

/* Our own pipeline-native checkpoints (scripts/train): names of the
 * architectures and the extra config keys they carry. */
static const char *const cflow_archs[] = {
    "arch1", "arch2_4_combined", "arch2_4_sync", "arch3", "arch4", "arch5"
};

static char *join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

/* Whether path names anything: a FIFO or a folder under a file's name is
 * then refused by fmt_map_open, in words, not taken for a missing file. */
static int path_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Parse n bytes of JSON; NULL (and err) when malformed or not all JSON. */
static json_object *parse_json(const char *what, const char *p, size_t n,
                               char *err, size_t errlen)
{
    if (n > INT32_MAX) {
        fmt_err(err, errlen, "%s: JSON too large", what);
        return NULL;
    }
    json_tokener *tok = json_tokener_new_ex(64);
    if (!tok) {
        fmt_err(err, errlen, "%s: out of memory", what);
        return NULL;
    }
    json_object *o = json_tokener_parse_ex(tok, p, (int)n);
    enum json_tokener_error je = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    if (!o || je != json_tokener_success) {
        json_object_put(o);
        fmt_err(err, errlen, "%s: malformed JSON (%s)", what,
                je == json_tokener_continue ? "unexpected end"
                                            : json_tokener_error_desc(je));
        return NULL;
    }
    for (size_t i = end; i < n; i++) {
        char c = p[i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
            json_object_put(o);
            fmt_err(err, errlen, "%s: trailing bytes after the JSON", what);
            return NULL;
        }
    }
    return o;
}

static json_object *read_json_file(const char *path, char *err,
                                   size_t errlen, int *rc)
{
    fmt_map m;
    *rc = fmt_map_open(&m, path, err, errlen);
    if (*rc < 0)
        return NULL;
    if (m.n > HF_MAX_JSON) {
        fmt_map_close(&m);
        fmt_err(err, errlen, "%s: larger than %u bytes", path, HF_MAX_JSON);
        *rc = FMT_EFORMAT;
        return NULL;
    }
    json_object *o = parse_json(path, (const char *)m.p, m.n, err, errlen);
    fmt_map_close(&m);
    if (o && !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        fmt_err(err, errlen, "%s: not a JSON object", path);
        o = NULL;
    }
    *rc = o ? FMT_OK : FMT_EFORMAT;
    return o;
}

/* ---- safetensors -------------------------------------------------------- */
/* dtype string -> enum fmt_dtype (or -1) and element size (0: unknown). */
static int st_dtype(const char *s, unsigned *esize)
{
    static const struct { const char *n; int dt; unsigned sz; } tab[] = {
        { "F32", FMT_DT_F32, 4 }, { "F16", FMT_DT_F16, 2 },
        { "BF16", FMT_DT_BF16, 2 }, { "F64", -1, 8 }, { "I64", -1, 8 },
        { "U64", -1, 8 }, { "I32", -1, 4 }, { "U32", -1, 4 },
        { "I16", -1, 2 }, { "U16", -1, 2 }, { "I8", -1, 1 }, { "U8", -1, 1 },
        { "BOOL", -1, 1 }, { "F8_E4M3", -1, 1 }, { "F8_E5M2", -1, 1 },
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (strcmp(s, tab[i].n) == 0) {
            *esize = tab[i].sz;
            return tab[i].dt;
        }
    *esize = 0;
    return -1;
}

/* One tensor's bytes in a shard's data: [b, e), for the tiling check. */
typedef struct st_range {
    uint64_t    b, e;
    const char *name;   /* the header's key: lives as long as the JSON */
} st_range;

static int st_range_cmp(const void *x, const void *y)
{
    const st_range *a = x, *c = y;
    if (a->b != c->b)
        return a->b < c->b ? -1 : 1;
    return a->e < c->e ? -1 : a->e > c->e;
}

/* The ranges, sorted, must cover [0, dn) with neither a gap nor an
 * overlap.  Empty tensors (b == e) may sit anywhere on a boundary. */
static int st_check_tiling(const char *file, st_range *r, size_t n,
                           uint64_t dn, char *err, size_t errlen)
{
    char nm[64];
    uint64_t end = 0;
    qsort(r, n, sizeof *r, st_range_cmp);
    for (size_t i = 0; i < n; i++) {
        if (r[i].b != end) {
            fmt_safe_name(nm, r[i].name, strlen(r[i].name));
            fmt_err(err, errlen, "%s: tensor '%s': data_offsets start at %llu "
                    "but the tensors before it end at %llu (the data must be "
                    "one tensor after another, no gap, no overlap)", file, nm,
                    (unsigned long long)r[i].b, (unsigned long long)end);
            return FMT_EFORMAT;
        }
        end = r[i].e;
    }
    if (end != dn) {
        fmt_err(err, errlen, "%s: the tensors cover %llu of the %llu data "
                "bytes (the rest is indexed by no tensor)", file,
                (unsigned long long)end, (unsigned long long)dn);
        return FMT_EFORMAT;
    }
    return FMT_OK;
}

/* Map file as the source's next shard and check its header's length:
 * the JSON header is *hlen bytes at the map's start + 8, the data follow. */
static int map_shard(fmt_src *s, const char *file, uint64_t *hlen, char *err, size_t errlen)
{
    int rc;
    if (s->n_maps >= HF_MAX_SHARDS) {
        fmt_err(err, errlen, "%s: too many shards", file);
        return FMT_EFORMAT;
    }
    fmt_map *maps = realloc(s->maps, (s->n_maps + 1) * sizeof *maps);
    if (!maps) {
        fmt_err(err, errlen, "%s: out of memory", file);
        return FMT_ENOMEM;
    }
    s->maps = maps;
    fmt_map *m = &s->maps[s->n_maps];
    if ((rc = fmt_map_open(m, file, err, errlen)) < 0)
        return rc;
    s->n_maps++;
    if (m->n < 8) {
        fmt_err(err, errlen, "%s: too short for a safetensors file", file);
        return FMT_EFORMAT;
    }
    *hlen = kern_ld_u64(m->p);
    if (*hlen < 2 || *hlen > m->n - 8 || *hlen > HF_MAX_HEADER) {
        fmt_err(err, errlen, "%s: bad safetensors header length %llu (file "
                "%zu bytes)", file, (unsigned long long)*hlen, m->n);
        return FMT_EFORMAT;
    }
    return FMT_OK;
}

/* One safetensors shard: each entry of its header a tensor of the source,
 * its bytes checked against the data the header indexes. */
static int load_shard(fmt_src *s, const char *file, char *err, size_t errlen)
{
    char nm[64];
    uint64_t hlen;
    int rc = map_shard(s, file, &hlen, err, errlen);
    if (rc)
        return rc;
    const fmt_map *m = &s->maps[s->n_maps - 1];
    const uint8_t *data = m->p + 8 + hlen;
    uint64_t dn = m->n - 8 - hlen;
    json_object *root = parse_json(file, (const char *)m->p + 8,
                                   (size_t)hlen, err, errlen);
    if (!root)
        return FMT_EFORMAT;
    rc = FMT_OK;
    st_range *rg = NULL;
    size_t n_rg = 0;
    if (!json_object_is_type(root, json_type_object)) {
        fmt_err(err, errlen, "%s: safetensors header is not a JSON object",
                file);
        rc = FMT_EFORMAT;
        goto out;
    }
    /* at most one range per key: the header's size bounds the array */
    rg = malloc(((size_t)json_object_object_length(root) + 1) * sizeof *rg);
    if (!rg) {
        fmt_err(err, errlen, "%s: out of memory", file);
        rc = FMT_ENOMEM;
        goto out;
    }
    json_object_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0)
            continue;
        fmt_safe_name(nm, key, strlen(key));
        json_object *jd, *js, *jo;
        if (!val || !json_object_is_type(val, json_type_object) ||
            !json_object_object_get_ex(val, "dtype", &jd) ||
            !json_object_is_type(jd, json_type_string) ||
            !json_object_object_get_ex(val, "shape", &js) ||
            !json_object_is_type(js, json_type_array) ||
            !json_object_object_get_ex(val, "data_offsets", &jo) ||
            !json_object_is_type(jo, json_type_array) ||
            json_object_array_length(jo) != 2) {
            fmt_err(err, errlen, "%s: tensor '%s': malformed header entry",
                    file, nm);
            rc = FMT_EFORMAT;
            goto out;
        }
        unsigned es;
        int dt = st_dtype(json_object_get_string(jd), &es);
        size_t nd = json_object_array_length(js);
        uint64_t shape[8], nel = 1, b, e;
        if (nd > 8) {
            fmt_err(err, errlen, "%s: tensor '%s': %zu dimensions", file, nm,
                    nd);
            rc = FMT_EFORMAT;
            goto out;
        }
        for (size_t d = 0; d < nd; d++) {
            if (fmt_hf_json_u64(json_object_array_get_idx(js, d), &shape[d]) < 0 ||
                (shape[d] && nel > UINT64_MAX / shape[d])) {
                fmt_err(err, errlen, "%s: tensor '%s': bad shape", file, nm);
                rc = FMT_EFORMAT;
                goto out;
            }
            nel *= shape[d];
        }
        if (fmt_hf_json_u64(json_object_array_get_idx(jo, 0), &b) < 0 ||
            fmt_hf_json_u64(json_object_array_get_idx(jo, 1), &e) < 0 || b > e ||
            e > dn) {
            fmt_err(err, errlen, "%s: tensor '%s': data_offsets outside the "
                    "data (%llu bytes)", file, nm, (unsigned long long)dn);
            rc = FMT_EFORMAT;
            goto out;
        }
        if (es && (nel > UINT64_MAX / es || nel * es != e - b)) {
            fmt_err(err, errlen, "%s: tensor '%s': %llu bytes for %llu "
                    "elements of %s", file, nm, (unsigned long long)(e - b),
                    (unsigned long long)nel, json_object_get_string(jd));
            rc = FMT_EFORMAT;
            goto out;
        }
        rg[n_rg++] = (st_range){ b, e, key };
        uint64_t ne[4] = { 1, 1, 1, 1 };
        unsigned ndim = nd ? (unsigned)nd : 1;
        if (nd > 4 || es == 0) {
            dt = -1;  /* kept, unreadable */
            ndim = 1;
        } else {
            for (size_t d = 0; d < nd; d++)
                ne[d] = shape[nd - 1 - d];
        }
        if ((rc = fmt_src_add_tensor(s, key, dt, ndim, ne, data + b, e - b,
                                     err, errlen)) < 0)
            goto out;
    }
    rc = st_check_tiling(file, rg, n_rg, dn, err, errlen);
out:
    free(rg);
    json_object_put(root);
    return rc;
}

/* A shard name from the index must be a plain file name in the directory. */
static int shard_name_ok(const char *f)
{
    return *f && strchr(f, '/') == NULL && strcmp(f, ".") != 0 &&
           strcmp(f, "..") != 0;
}

static int load_index(fmt_src *s, const char *dir, const char *ipath,
                      char *err, size_t errlen)
{
    int rc;
    json_object *root = read_json_file(ipath, err, errlen, &rc);
    if (!root)
        return rc;
    json_object *wm;
    char **files = NULL;
    size_t nf = 0;
    fmt_names seen = { 0 };
    if (!json_object_object_get_ex(root, "weight_map", &wm) || !wm ||
        !json_object_is_type(wm, json_type_object)) {
        fmt_err(err, errlen, "%s: no weight_map object", ipath);
        rc = FMT_EFORMAT;
        goto out;
    }
    /* unique shard names, in first-seen order */
    size_t cap = (size_t)json_object_object_length(wm);
    files = calloc(cap ? cap : 1, sizeof *files);
    if (!files) {
        rc = FMT_ENOMEM;
        fmt_err(err, errlen, "%s: out of memory", ipath);
        goto out;
    }
    json_object_object_foreach(wm, tname, fobj) {
        (void)tname;
        const char *f = fobj && json_object_is_type(fobj, json_type_string)
                        ? json_object_get_string(fobj) : NULL;
        char nm[64];
        if (!f || !shard_name_ok(f)) {
            fmt_err(err, errlen, "%s: bad shard name for '%s'", ipath,
                    fmt_safe_name(nm, tname, strlen(tname)));
            rc = FMT_EFORMAT;
            goto out;
        }
        int r = fmt_names_put(&seen, f, strlen(f), nf, NULL);
        if (r < 0) {
            rc = FMT_ENOMEM;
            fmt_err(err, errlen, "%s: out of memory", ipath);
            goto out;
        }
        if (r == 0) {
            if (!(files[nf] = join(dir, f))) {
                rc = FMT_ENOMEM;
                fmt_err(err, errlen, "%s: out of memory", ipath);
                goto out;
            }
            nf++;
        }
    }
    if (nf == 0) {
        fmt_err(err, errlen, "%s: weight_map is empty", ipath);
        rc = FMT_EFORMAT;
        goto out;
    }
    for (size_t i = 0; i < nf; i++)
        if ((rc = load_shard(s, files[i], err, errlen)) < 0)
            goto out;
    /* every tensor the index promises is where it says */
    json_object_object_foreach(wm, tn, fo) {
        (void)fo;
        if (!fmt_src_find(s, tn)) {
            char nm[64];
            fmt_err(err, errlen, "%s: tensor '%s' is listed but not in its "
                    "shard %s", ipath, fmt_safe_name(nm, tn, strlen(tn)),
                    json_object_get_string(fo));
            rc = FMT_EFORMAT;
            goto out;
        }
    }
    rc = FMT_OK;
out:
    for (size_t i = 0; i < nf; i++)
        free(files[i]);
    free(files);
    fmt_names_free(&seen);
    json_object_put(root);
    return rc;
}

/* ---- config.json -------------------------------------------------------- */
typedef fmt_hf_cfg cfgctx;   /* (fmt_impl.h: o is the json_object; its
                                 values: fmt_hf_cfg.c) */

/* The architecture config.json names (architectures[0], else model_type):
 * *kind is HF_LLAMA, HF_QWEN2, HF_QWEN3, HF_QWEN3MOE, HF_FAMILY (a family
 * of fmt_family.c read by its own hook: s->fam) or HF_PIPELINE, and
 * h->arch is set; *mistral marks Mistral (a sliding window by default). */
enum { HF_LLAMA, HF_QWEN2, HF_QWEN3 = 3, HF_QWEN3MOE, HF_PIPELINE, HF_FAMILY };
static int cfg_arch(fmt_src *s, cfgctx *c, int *kind, int *mistral)
{
    fmt_hparams *h = &s->hp;
    json_object *o = c->o, *v;
    const char *arch = NULL;
    if (json_object_object_get_ex(o, "architectures", &v) && v &&
        json_object_is_type(v, json_type_array) &&
        json_object_array_length(v) > 0) {
        json_object *a0 = json_object_array_get_idx(v, 0);
        if (a0 && json_object_is_type(a0, json_type_string))
            arch = json_object_get_string(a0);
    }
    const char *mt = fmt_hf_str(c, "model_type");
    if (arch && strcmp(arch, "CflowPipelineForCausalLM") == 0) {
        const char *ca = fmt_hf_str(c, "cflow_arch");
        size_t i;
        for (i = 0; ca && i < sizeof cflow_archs / sizeof *cflow_archs; i++)
            if (!strcmp(ca, cflow_archs[i]))
                break;
        if (!ca || i == sizeof cflow_archs / sizeof *cflow_archs) {
            char nm[64];
            const char *w = ca ? ca : "(none)";
            fmt_err(c->err, c->errlen, "%s: unknown cflow_arch %s", c->path,
                    fmt_safe_name(nm, w, strlen(w)));
            return FMT_EUNSUP;
        }
        snprintf(h->arch, sizeof h->arch, "%s", ca);
        *mistral = 0;
        *kind = HF_PIPELINE;
        return FMT_OK;
    }
    /* Mistral is Llama with a sliding window */
    *mistral = arch ? strcmp(arch, "MistralForCausalLM") == 0
                    : mt && strcmp(mt, "mistral") == 0;
    const fmt_family *fam = *mistral ? fmt_family_by_arch("llama", 5)
                                     : fmt_family_by_hf(arch, arch ? NULL : mt);
    if (!fam) {
        char nm[64], list[512];
        const char *what = arch ? arch : mt ? mt : "(none)";
        fmt_err(c->err, c->errlen, "%s: architecture %s is not supported (%s, "
                "MistralForCausalLM)", c->path, fmt_safe_name(nm, what, strlen(what)),
                fmt_family_list(list, sizeof list, 1));
        return FMT_EUNSUP;
    }
    snprintf(h->arch, sizeof h->arch, "%s", fam->arch);
    *kind = !strcmp(fam->arch, "llama") ? HF_LLAMA
            : !strcmp(fam->arch, "qwen2") ? HF_QWEN2
            : !strcmp(fam->arch, "qwen3") ? HF_QWEN3
            : !strcmp(fam->arch, "qwen3moe") ? HF_QWEN3MOE : HF_FAMILY;
    return fmt_family_apply(s, fam);
}

/* The dense geometry: required sizes, then the optional ones with HF's
 * defaults; head_dim from hidden_size when absent. */
static int cfg_geometry(fmt_hparams *h, cfgctx *c)
{
    static const struct { const char *k; size_t off; } req[] = {
        { "hidden_size", offsetof(fmt_hparams, dim) },
        { "intermediate_size", offsetof(fmt_hparams, ffn_dim) },
        { "num_hidden_layers", offsetof(fmt_hparams, n_layers) },
        { "num_attention_heads", offsetof(fmt_hparams, n_heads) },
        { "vocab_size", offsetof(fmt_hparams, vocab_size) },
    };
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) {
        uint32_t x = 0;
        int r = fmt_hf_u32(c, req[i].k, &x);
        if (r < 0)
            return FMT_EFORMAT;
        if (r == 0) {
            fmt_err(c->err, c->errlen, "%s: %s is missing", c->path,
                    req[i].k);
            return FMT_EFORMAT;
        }
        memcpy((char *)h + req[i].off, &x, sizeof x);
    }
    h->n_kv_heads = h->n_heads;
    h->max_seq = 2048;
    h->rope_theta = 10000.0f;
    h->norm_eps = 1e-6f;
    h->head_dim = 0;
    if (fmt_hf_u32(c, "num_key_value_heads", &h->n_kv_heads) < 0 ||
        fmt_hf_u32(c, "max_position_embeddings", &h->max_seq) < 0 ||
        fmt_hf_u32(c, "head_dim", &h->head_dim) < 0 ||
        fmt_hf_f32(c, "rope_theta", &h->rope_theta) < 0 ||
        fmt_hf_f32(c, "rms_norm_eps", &h->norm_eps) < 0)
        return FMT_EFORMAT;
    if (h->head_dim == 0) {
        if (h->n_heads == 0 || h->dim % h->n_heads != 0) {
            fmt_err(c->err, c->errlen, "%s: hidden_size %u is not a multiple "
                    "of %u heads", c->path, h->dim, h->n_heads);
            return FMT_EFORMAT;
        }
        h->head_dim = h->dim / h->n_heads;
    }
    return FMT_OK;
}

/* Qwen3-MoE's experts: every layer sparse, the experts replace the dense
 * FFN. */
static int cfg_qwen3moe(fmt_hparams *h, cfgctx *c)
{
    json_object *o = c->o;
    uint32_t step = 1;
    json_object *mo;
    if (fmt_hf_u32(c, "num_experts", &h->n_experts) < 0 ||
        fmt_hf_u32(c, "num_experts_per_tok", &h->top_k) < 0 ||
        fmt_hf_u32(c, "moe_intermediate_size", &h->expert_ffn_dim) < 0 ||
        fmt_hf_u32(c, "decoder_sparse_step", &step) < 0)
        return FMT_EFORMAT;
    if (step != 1 || (json_object_object_get_ex(o, "mlp_only_layers", &mo) &&
                      json_object_is_type(mo, json_type_array) &&
                      json_object_array_length(mo) > 0)) {
        fmt_err(c->err, c->errlen, "%s: Qwen3-MoE with dense layers "
                "(decoder_sparse_step %u, mlp_only_layers) is not supported",
                c->path, step);
        return FMT_EUNSUP;
    }
    h->ffn_dim = 0;
    /* HF's default is false; Qwen3-30B-A3B sets it */
    if (!fmt_hf_bool(c, "norm_topk_prob", 0))
        h->flags |= FMT_FLAG_MOE_NO_RENORM;
    return FMT_OK;
}

/* CflowPipelineForCausalLM: experts, delays and the combine style. */
static int cfg_pipeline(fmt_hparams *h, cfgctx *c)
{
    uint32_t dd = 0, ed = 0, cs = 0;
    if (fmt_hf_u32(c, "num_experts", &h->n_experts) < 0 ||
        fmt_hf_u32(c, "num_experts_per_tok", &h->top_k) < 0 ||
        fmt_hf_u32(c, "moe_intermediate_size", &h->expert_ffn_dim) < 0 ||
        fmt_hf_u32(c, "dense_delay", &dd) < 0 ||
        fmt_hf_u32(c, "expert_delay", &ed) < 0 ||
        fmt_hf_u32(c, "combine_style", &cs) < 0 ||
        fmt_hf_u32(c, "merge_interval", &h->merge_interval) < 0 ||
        fmt_hf_u32(c, "iterations", &h->iterations) < 0)
        return FMT_EFORMAT;
    if (dd > 255 || ed > 255 || cs >= FMT_NCOMBINE) {
        fmt_err(c->err, c->errlen, "%s: bad delays or combine_style "
                "(%u, %u, %u)", c->path, dd, ed, cs);
        return FMT_EFORMAT;
    }
    if (h->n_experts == 0)
        h->top_k = 0;
    h->dense_delay = (uint8_t)dd;
    h->expert_delay = (uint8_t)ed;
    h->combine_style = (uint8_t)cs;
    return FMT_OK;
}

/* rope_scaling: absent, "default", or Llama-3's (with its defaults). */
static int cfg_rope_scaling(fmt_hparams *h, cfgctx *c)
{
    cfgctx rs;
    int r = fmt_hf_obj(c, "rope_scaling", &rs);
    if (r <= 0)
        return r < 0 ? FMT_EFORMAT : FMT_OK;
    const char *rt = fmt_hf_str(&rs, "rope_type");
    if (!rt)
        rt = fmt_hf_str(&rs, "type");
    if (rt && strcmp(rt, "llama3") == 0) {
        h->flags |= FMT_FLAG_ROPE_LLAMA3;
        h->rope_factor = 8.0f;
        h->rope_low_freq = 1.0f;
        h->rope_high_freq = 4.0f;
        h->rope_orig_ctx = 8192;
        if (fmt_hf_f32(&rs, "factor", &h->rope_factor) < 0 ||
            fmt_hf_f32(&rs, "low_freq_factor", &h->rope_low_freq) < 0 ||
            fmt_hf_f32(&rs, "high_freq_factor", &h->rope_high_freq) < 0 ||
            fmt_hf_u32(&rs, "original_max_position_embeddings",
                       &h->rope_orig_ctx) < 0)
            return FMT_EFORMAT;
    } else if (!rt || strcmp(rt, "default") != 0) {
        char nm[64];
        const char *w = rt ? rt : "(no type)";
        fmt_err(c->err, c->errlen, "%s: rope_scaling %s is not supported",
                c->path, fmt_safe_name(nm, w, strlen(w)));
        return FMT_EUNSUP;
    }
    return FMT_OK;
}

static int read_config(fmt_src *s, cfgctx *c, int *tied)
{
    fmt_hparams *h = &s->hp;
    int kind, mistral, rc;
    if ((rc = cfg_arch(s, c, &kind, &mistral)) < 0 ||
        (rc = cfg_geometry(h, c)) < 0 ||
        (kind == HF_QWEN3MOE && (rc = cfg_qwen3moe(h, c)) < 0) ||
        (kind == HF_PIPELINE && (rc = cfg_pipeline(h, c)) < 0))
        return rc;
    *tied = fmt_hf_bool(c, "tie_word_embeddings", s->fam ? s->fam->hf_tied : 0);
    /* HF layouts rotate split halves */
    h->flags |= FMT_FLAG_ROPE_NEOX;
    if (kind == HF_FAMILY)           /* the family's keys (fmt_hf_family.c) */
        return s->fam->hf(s, c);
    const char *act = fmt_hf_str(c, "hidden_act");
    if (act && strcmp(act, "silu") != 0) {
        char nm[64];
        fmt_err(c->err, c->errlen, "%s: hidden_act %s is not supported (silu)",
                c->path, fmt_safe_name(nm, act, strlen(act)));
        return FMT_EUNSUP;
    }
    uint32_t sw = 0;
    int qwen = kind != HF_LLAMA && kind != HF_PIPELINE;
    if ((mistral || (qwen && fmt_hf_bool(c, "use_sliding_window", 0))) &&
        fmt_hf_u32(c, "sliding_window", &sw) < 0)
        return FMT_EFORMAT;
    h->sliding_window = sw < h->max_seq ? sw : 0;
    return cfg_rope_scaling(h, c);
}

int fmt_hf_open(fmt_src *s, const char *dir, const char *tokenizer,
                char *err, size_t errlen)
{
    int rc, tied = 0;
    char *cpath = join(dir, "config.json");
    char *st = join(dir, "model.safetensors");
    char *ix = join(dir, "model.safetensors.index.json");
    json_object *cfg = NULL;
    if (!cpath || !st || !ix) {
        fmt_err(err, errlen, "%s: out of memory", dir);
        rc = FMT_ENOMEM;
        goto out;
    }
    cfg = read_json_file(cpath, err, errlen, &rc);
    if (!cfg)
        goto out;
    cfgctx c = { cfg, cpath, err, errlen };
    char why[160];
    if ((rc = read_config(s, &c, &tied)) < 0)
        goto out;
    /* named by config.json, where the field is */
    if (fmt_hparams_fit(&s->hp, why, sizeof why)) {
        fmt_err(err, errlen, "%s: %s", cpath, why);
        rc = FMT_EUNSUP;
        goto out;
    }
    if ((rc = fmt_src_check_hparams(s, err, errlen)) < 0)
        goto out;

    if (path_exists(st)) {
        rc = load_shard(s, st, err, errlen);
    } else if (path_exists(ix)) {
        rc = load_index(s, dir, ix, err, errlen);
    } else {
        fmt_err(err, errlen, "%s: no model.safetensors or "
                "model.safetensors.index.json", dir);
        rc = FMT_EFORMAT;
    }
    if (rc < 0)
        goto out;

    s->kv_own = fmt_kv_new();
    if (!s->kv_own) {
        fmt_err(err, errlen, "%s: out of memory", dir);
        rc = FMT_ENOMEM;
        goto out;
    }
    s->kv = s->kv_own;
    if ((rc = fmt_vocab_load(s->kv_own, tokenizer && *tokenizer ? tokenizer
                                                                : dir,
                             err, errlen)) < 0)
        goto out;
    /* HF vocab_size often exceeds the tokenizer (padded embeddings).  It
     * sizes the padded vocabulary built below, so it must first be the
     * embedding's row count: a config.json claiming 2^31 tokens beside a
     * 30 KB checkpoint is refused here, not by a failed allocation. */
    const fmt_tensor *emb = fmt_src_find(s, "model.embed_tokens.weight");
    if (!emb || emb->ndim > 2 || emb->ne[1] != s->hp.vocab_size) {
        fmt_err(err, errlen, "%s: vocab_size %u but model.embed_tokens.weight %s%llu rows",
                cpath, s->hp.vocab_size, emb ? "has " : "is missing: ",
                emb && emb->ndim <= 2 ? (unsigned long long)emb->ne[1] : 0ull);
        rc = FMT_EFORMAT;
        goto out;
    }
    if ((rc = fmt_src_fit_vocab(s, s->hp.vocab_size, 1, 0, err, errlen)) < 0)
        goto out;
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/')
        dl--;
    const char *base = dir + dl;
    while (base > dir && base[-1] != '/')
        base--;
    if (fmt_kv_set_str(s->kv_own, "general.architecture", s->hp.arch,
                       strlen(s->hp.arch)) < 0 ||
        fmt_kv_set_str(s->kv_own, "general.name", base,
                       (size_t)(dir + dl - base)) < 0) {
        fmt_err(err, errlen, "%s: out of memory", dir);
        rc = FMT_ENOMEM;
        goto out;
    }
    /* experts one tensor each (Qwen3-MoE, OLMoE) as one bank a layer; the
     * family's own tensors; then its names over the common ones */
    char e0[96];
    snprintf(e0, sizeof e0, "model.layers.%u.mlp.experts.0.gate_proj.weight", s->hp.dense_lead);
    if (s->hp.n_experts && fmt_src_find(s, e0) && (rc = qwen3moe_stack(s, err, errlen)) < 0)
        goto out;
    if (s->fam && s->fam->hf_tensors && (rc = s->fam->hf_tensors(s, &c)) < 0)
        goto out;
    const char *names[FMT_NROLES];
    fmt_family_names(!strcmp(s->hp.arch, "qwen3moe") ? &hf_qwen3moe_names : &hf_role_names,
                     s->fam ? s->fam->hf_names : NULL, names);
    rc = fmt_src_bind(s, names, tied, err, errlen);
out:
    json_object_put(cfg);
    free(cpath);
    free(st);
    free(ix);
    return rc;
}
