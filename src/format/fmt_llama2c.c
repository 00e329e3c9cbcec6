/*
 * fmt_llama2c.c — legacy llama2.c checkpoints (karpathy/llama2.c run.c).
 *
 * The file, little endian, no padding anywhere:
 *
 *   i32 dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
 *       (vocab_size < 0: the classifier is stored separately, unshared)
 *   f32 token_embedding [vocab][dim]
 *   f32 rms_att   [L][dim]
 *   f32 wq        [L][dim][dim]          rows = out, columns = in
 *   f32 wk        [L][kv_dim][dim]       kv_dim = dim * n_kv_heads / n_heads
 *   f32 wv        [L][kv_dim][dim]
 *   f32 wo        [L][dim][dim]
 *   f32 rms_ffn   [L][dim]
 *   f32 w1        [L][hidden][dim]       gate
 *   f32 w2        [L][dim][hidden]       down
 *   f32 w3        [L][hidden][dim]       up
 *   f32 rms_final [dim]
 *   f32 freq_cis_real [seq_len * head_size / 2]   (unused; skipped)
 *   f32 freq_cis_imag [seq_len * head_size / 2]
 *   f32 wcls      [vocab][dim]           only when vocab_size < 0
 *
 * There is no magic number: a file is taken for a checkpoint when its
 * header is a plausible geometry, and then opened only if its size is
 * exactly what that geometry implies.  (The later "ak42" export versions are refused.)
 * Weights are exposed as F32 views into the mapping, named as in GGUF so
 * the role table is shared.  RoPE rotates adjacent pairs (Meta's layout),
 * theta 10000, RMS eps 1e-5.  The tokenizer is a separate file.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/cflow_format.h"
#include "format/fmt_impl.h"

typedef struct l2c_hdr {
    int32_t dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len;
} l2c_hdr;

static void hdr_read(l2c_hdr *h, const uint8_t *p)
{
    int32_t v[7];
    memcpy(v, p, sizeof v);
    h->dim = v[0];
    h->hidden = v[1];
    h->n_layers = v[2];
    h->n_heads = v[3];
    h->n_kv_heads = v[4];
    h->vocab = v[5];
    h->seq_len = v[6];
}

/* The header's fields with their valid ranges (bounds keep every product
 * below in 64 bits); a field that divides another names it in div. */
typedef struct l2c_field {
    const char *name;
    int32_t     v, lo, hi;
    const char *div_name;       /* the field v must divide, or NULL */
    int32_t     div;
} l2c_field;

static unsigned hdr_fields(const l2c_hdr *h, l2c_field f[7])
{
    const l2c_field t[7] = {
        { "dim", h->dim, 1, 1 << 16, NULL, 0 },
        { "hidden_dim", h->hidden, 1, 1 << 20, NULL, 0 },
        { "n_layers", h->n_layers, 1, 1024, NULL, 0 },
        { "n_heads", h->n_heads, 1, 1 << 16, "dim", h->dim },
        { "n_kv_heads", h->n_kv_heads, 1, 1 << 16, "n_heads", h->n_heads },
        /* negative: the classifier is stored unshared */
        { "vocab_size", h->vocab, -(1 << 22), 1 << 22, NULL, 0 },
        { "seq_len", h->seq_len, 1, 1 << 24, NULL, 0 },
    };
    memcpy(f, t, sizeof t);
    return 7;
}

static int field_in_range(const l2c_field *f)
{
    return f->v >= f->lo && f->v <= f->hi && f->v != 0;
}

/* The first field out of its range, or NULL when all are valid. */
static const l2c_field *hdr_bad_field(const l2c_hdr *h, l2c_field f[7])
{
    unsigned n = hdr_fields(h, f);
    for (unsigned i = 0; i < n; i++) {
        if (!field_in_range(&f[i]))
            return &f[i];
        if (f[i].div_name && (f[i].div <= 0 || f[i].v > f[i].div || f[i].div % f[i].v))
            return &f[i];
    }
    return NULL;
}

/* A file is taken for a checkpoint when at least 5 of the 7 header fields
 * are each in their range: then one or two bad fields are reported by
 * name, not as an unknown file.  Text, a tokenizer.bin or another format's
 * header puts most fields far outside. */
static int hdr_recognised(const l2c_hdr *h)
{
    l2c_field f[7];
    unsigned n = hdr_fields(h, f), ok = 0;
    for (unsigned i = 0; i < n; i++)
        ok += (unsigned)field_in_range(&f[i]);
    return ok >= 5;
}

/* Floats after the header that the geometry implies. */
static uint64_t hdr_floats(const l2c_hdr *h)
{
    uint64_t dim = (uint64_t)h->dim, hid = (uint64_t)h->hidden;
    uint64_t L = (uint64_t)h->n_layers;
    uint64_t vocab = (uint64_t)(h->vocab < 0 ? -(int64_t)h->vocab : h->vocab);
    uint64_t kv_dim = dim * (uint64_t)h->n_kv_heads / (uint64_t)h->n_heads;
    uint64_t head = dim / (uint64_t)h->n_heads;
    uint64_t n = vocab * dim;             /* token_embedding */
    n += L * dim;                         /* rms_att */
    n += L * dim * dim;                   /* wq */
    n += 2 * L * kv_dim * dim;            /* wk, wv */
    n += L * dim * dim;                   /* wo */
    n += L * dim;                         /* rms_ffn */
    n += 3 * L * hid * dim;               /* w1, w2, w3 */
    n += dim;                             /* rms_final */
    n += 2 * ((uint64_t)h->seq_len * head / 2); /* freq_cis real, imag */
    if (h->vocab < 0)
        n += vocab * dim;                 /* wcls */
    return n;
}

int fmt_llama2c_detect(const char *path, const uint8_t *head, size_t nhead,
                       uint64_t file_size)
{
    l2c_hdr h;
    (void)path;
    if (nhead < 28)
        return 0;
    if (memcmp(head, "ak42", 4) == 0)
        return 1; /* a newer export: fmt_llama2c_open explains */
    hdr_read(&h, head);
    /* a recognisable header is enough to claim the file: a bad field or a
     * wrong size is then reported as such by fmt_llama2c_open rather than
     * as "unknown" */
    (void)file_size;
    return hdr_recognised(&h);
}

/* The checkpoint's tensors as views of the map, in file order (the
 * embedding, each layer's weights by kind, the final norm, the RoPE
 * tables skipped, the untied head when vocab < 0). */
static int add_views(fmt_src *s, const l2c_hdr *h, const char *path, char *err, size_t errlen)
{
    const fmt_hparams *hp = &s->hp;
    const uint8_t *p = s->maps[0].p;
    const size_t n = s->maps[0].n;
    int rc;
    uint64_t dim = hp->dim, hid = hp->ffn_dim, V = hp->vocab_size;
    uint64_t kv_dim = dim * hp->n_kv_heads / hp->n_heads;
    uint64_t L = hp->n_layers;
    const uint8_t *q = p + 28;
    char name[64];
    struct { const char *pat; uint64_t rows, cols; } lay[] = {
        { "blk.%u.attn_norm.weight", 1, dim },
        { "blk.%u.attn_q.weight", dim, dim },
        { "blk.%u.attn_k.weight", kv_dim, dim },
        { "blk.%u.attn_v.weight", kv_dim, dim },
        { "blk.%u.attn_output.weight", dim, dim },
        { "blk.%u.ffn_norm.weight", 1, dim },
        { "blk.%u.ffn_gate.weight", hid, dim },
        { "blk.%u.ffn_down.weight", dim, hid },
        { "blk.%u.ffn_up.weight", hid, dim },
    };
    uint64_t ne[4] = { dim, V, 1, 1 };
    if ((rc = fmt_src_add_tensor(s, "token_embd.weight", FMT_DT_F32, 2, ne,
                                 q, V * dim * 4, err, errlen)) < 0)
        return rc;
    q += V * dim * 4;
    for (size_t k = 0; k < sizeof lay / sizeof lay[0]; k++) {
        uint64_t each = lay[k].rows * lay[k].cols * 4;
        ne[0] = lay[k].cols;
        ne[1] = lay[k].rows;
        for (unsigned l = 0; l < L; l++) {
            snprintf(name, sizeof name, lay[k].pat, l);
            if ((rc = fmt_src_add_tensor(s, name, FMT_DT_F32,
                                         lay[k].rows > 1 ? 2 : 1, ne, q,
                                         each, err, errlen)) < 0)
                return rc;
            q += each;
        }
    }
    ne[0] = dim;
    ne[1] = 1;
    if ((rc = fmt_src_add_tensor(s, "output_norm.weight", FMT_DT_F32, 1, ne,
                                 q, dim * 4, err, errlen)) < 0)
        return rc;
    q += dim * 4;
    q += 2 * ((uint64_t)h->seq_len * (dim / hp->n_heads) / 2) * 4;
    if (h->vocab < 0) {
        ne[1] = V;
        if ((rc = fmt_src_add_tensor(s, "output.weight", FMT_DT_F32, 2, ne,
                                     q, V * dim * 4, err, errlen)) < 0)
            return rc;
        q += V * dim * 4;
    }
    if (q != p + n) {  /* hdr_floats and this walk must agree */
        fmt_err(err, errlen, "%s: internal error walking the checkpoint",
                path);
        return FMT_EFORMAT;
    }
    return FMT_OK;
}

int fmt_llama2c_open(fmt_src *s, const char *path, const char *tokenizer,
                     char *err, size_t errlen)
{
    l2c_hdr h;
    int rc;
    s->maps = calloc(1, sizeof *s->maps);
    if (!s->maps) {
        fmt_err(err, errlen, "%s: out of memory", path);
        return FMT_ENOMEM;
    }
    if ((rc = fmt_map_open(&s->maps[0], path, err, errlen)) < 0)
        return rc;
    s->n_maps = 1;
    const uint8_t *p = s->maps[0].p;
    size_t n = s->maps[0].n;
    if (n >= 4 && memcmp(p, "ak42", 4) == 0) {
        fmt_err(err, errlen, "%s: llama2.c export version 1+ (\"ak42\") is "
                "not supported; export with --version 0 (legacy)", path);
        return FMT_EUNSUP;
    }
    if (n < 28) {
        fmt_err(err, errlen, "%s: too short for a llama2.c header", path);
        return FMT_EFORMAT;
    }
    hdr_read(&h, p);
    l2c_field f[7];
    const l2c_field *bad = hdr_bad_field(&h, f);
    if (bad && bad->div_name && field_in_range(bad)) {
        fmt_err(err, errlen, "%s: llama2.c header: %s %d does not divide %s %d",
                path, bad->name, bad->v, bad->div_name, bad->div);
        return FMT_EFORMAT;
    }
    if (bad) {
        fmt_err(err, errlen, "%s: llama2.c header: %s %d is out of range "
                "(%d..%d%s)", path, bad->name, bad->v, bad->lo, bad->hi,
                bad->lo < 0 ? ", not 0" : "");
        return FMT_EFORMAT;
    }
    uint64_t want = 28 + 4 * hdr_floats(&h);
    if (want != n) {
        fmt_err(err, errlen, "%s: %zu bytes, but the llama2.c header implies "
                "%llu", path, n, (unsigned long long)want);
        return FMT_EFORMAT;
    }
    if (!tokenizer || !*tokenizer) {
        fmt_err(err, errlen, "%s: --tokenizer is required for llama2.c "
                "checkpoints (e.g. tokenizer.bin)", path);
        return FMT_EARG;
    }

    fmt_hparams *hp = &s->hp;
    snprintf(hp->arch, sizeof hp->arch, "llama");
    hp->dim = (uint32_t)h.dim;
    hp->ffn_dim = (uint32_t)h.hidden;
    hp->n_layers = (uint32_t)h.n_layers;
    hp->n_heads = (uint32_t)h.n_heads;
    hp->n_kv_heads = (uint32_t)h.n_kv_heads;
    hp->head_dim = hp->dim / hp->n_heads;
    hp->vocab_size = (uint32_t)(h.vocab < 0 ? -(int64_t)h.vocab : h.vocab);
    hp->max_seq = (uint32_t)h.seq_len;
    hp->rope_theta = 10000.0f;
    hp->norm_eps = 1e-5f;
    hp->flags = h.vocab > 0 ? FMT_FLAG_TIED : 0;
    if ((rc = fmt_src_check_hparams(s, err, errlen)) < 0)
        return rc;

    if ((rc = add_views(s, &h, path, err, errlen)) < 0)
        return rc;

    /* the tokenizer: a separate llama2.c tokenizer.bin (or any file
     * fmt_vocab_load understands) */
    s->kv_own = fmt_kv_new();
    if (!s->kv_own) {
        fmt_err(err, errlen, "%s: out of memory", path);
        return FMT_ENOMEM;
    }
    s->kv = s->kv_own;
    if ((rc = fmt_vocab_load(s->kv_own, tokenizer, err, errlen)) < 0)
        return rc;
    /* run.c reads exactly vocab_size tokens from tokenizer.bin */
    if ((rc = fmt_src_fit_vocab(s, hp->vocab_size, 0, 1, err, errlen)) < 0)
        return rc;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t bl = strlen(base);
    if (bl > 4 && strcmp(base + bl - 4, ".bin") == 0)
        bl -= 4;
    if (fmt_kv_set_str(s->kv_own, "general.architecture", "llama", 5) < 0 ||
        fmt_kv_set_str(s->kv_own, "general.name", base, bl) < 0) {
        fmt_err(err, errlen, "%s: out of memory", path);
        return FMT_ENOMEM;
    }
    return fmt_src_bind(s, fmt_gguf_role_names, h.vocab > 0, err, errlen);
}
