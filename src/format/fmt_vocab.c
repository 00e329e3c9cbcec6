/*
 * fmt_vocab.c — tokenizer files on their own: read a llama2.c tokenizer.bin
 * or Hugging Face tokenizer files and describe the vocabulary with the GGUF
 * keys the engine's tokenizer reads (tokenizer.ggml.*), so that one loader
 * serves GGUF, .cflow and these files alike.
 *
 * llama2.c tokenizer.bin (little endian, no header besides the first word)
 *   i32 max_token_length
 *   then, until the end of the file, per token:
 *     f32 score, i32 len, len bytes of text (no NUL)
 *   The token count is not stored (run.c takes it from the checkpoint):
 *   the file must end exactly after the last token.  Spaces are stored as
 *   ' '; ids 0, 1, 2 are unk, BOS ("\n<s>\n") and EOS ("\n</s>\n").
 *   Converted the way llama.cpp's convert-llama2c-to-ggml does: texts
 *   "<unk>", "<s>", "</s>" for ids 0..2 (types unknown, control, control),
 *   "<0xNN>" byte tokens typed BYTE, ' ' written U+2581, model "llama".
 *
 * Hugging Face
 *   tokenizer.json   model.type "BPE" with vocab {text: id} and merges
 *                    ("a b" strings or [a, b] pairs).  Byte-level BPE (a
 *                    ByteLevel pre-tokenizer or decoder) becomes model
 *                    "gpt2"; SentencePiece-style BPE (Metaspace, '▁'
 *                    replacement, byte_fallback) becomes model "llama" with
 *                    scores -rank of the merge that makes each token (0 for
 *                    tokens no merge makes, like SentencePiece's specials).
 *                    added_tokens become control tokens (type 3) when
 *                    "special", user-defined tokens (type 4) otherwise.
 *   vocab.json + merges.txt   byte-level BPE without a pre-tokenizer
 *                    description (see pre_from_hints).
 *   tokenizer_config.json     optional, beside either: chat_template,
 *                    bos/eos/unk/pad tokens, add_bos/add_eos_token,
 *                    added_tokens_decoder, tokenizer_class;
 *                    chat_template.jinja is read when the config has none.
 *
 * Which pre-tokenizer (tokenizer.ggml.pre) a byte-level vocabulary gets:
 *   tokenizer.json: the list of Split regexes (and ByteLevel's own regex
 *   when use_regex) is compared with the known ones: GPT-2's alone ->
 *   "gpt-2", Llama 3's -> "llama-bpe", Qwen2's -> "qwen2".  Any other list
 *   is kept verbatim in tokenizer.cflow.pre_regex (pre "cflow-regex"),
 *   which the engine compiles with PCRE2 as it stands; model.ignore_merges
 *   becomes tokenizer.cflow.ignore_merges.  (These two keys are cflow's
 *   own; under "tokenizer." they travel into .cflow files with the rest.)
 *   vocab.json + merges.txt (pre_from_hints): tokenizer_config.json's
 *   tokenizer_class ("Qwen2Tokenizer" -> qwen2; GPT2, CodeGen, GPTNeoX,
 *   Roberta, Bart -> gpt-2); else "qwen2" when the vocabulary has ChatML
 *   tokens (<|im_start|>) or is exactly Qwen2's 151643 byte-level tokens
 *   (its special tokens <|endoftext|>, <|im_start|>, <|im_end|> are then
 *   appended at 151643..151645, as Qwen2 defines them); else "gpt-2".
 */
#include "config.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format/fmt_impl.h"

#define VOCAB_MAX_TOKENS (1u << 24)
#define VOCAB_MAX_JSON   (512u << 20)

/* llama.cpp's token types */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4,
       TT_UNUSED = 5, TT_BYTE = 6 };

/* ---- the vocabulary being built ---------------------------------------- */
typedef struct vb {
    const char **tok;     /* [cap] text (borrowed from json or from pool) */
    size_t      *len;
    int32_t     *type;
    float       *score;
    uint32_t     n, cap;
    uint32_t     lim;     /* ids must lie below it (0: VOCAB_MAX_TOKENS) */
    char       **pool;    /* strings we own */
    size_t       n_pool, cap_pool;
    const char **mer;     /* merges "a b" */
    size_t      *mlen;
    size_t       n_mer, cap_mer;
    fmt_names    idx;     /* text -> id, built by vb_index */
} vb;

static void vb_free(vb *v)
{
    for (size_t i = 0; i < v->n_pool; i++)
        free(v->pool[i]);
    free(v->pool);
    free(v->tok);
    free(v->len);
    free(v->type);
    free(v->score);
    free(v->mer);
    free(v->mlen);
    fmt_names_free(&v->idx);
}

/* Keep a copy of s[0..n) for the life of v; NULL on ENOMEM. */
static const char *vb_own(vb *v, const char *s, size_t n)
{
    char *c;
    if (v->n_pool == v->cap_pool) {
        size_t nc = v->cap_pool ? v->cap_pool * 2 : 64;
        char **np = realloc(v->pool, nc * sizeof *np);
        if (!np)
            return NULL;
        v->pool = np;
        v->cap_pool = nc;
    }
    c = malloc(n + 1);
    if (!c)
        return NULL;
    memcpy(c, s, n);
    c[n] = 0;
    v->pool[v->n_pool++] = c;
    return c;
}

/* Make room for ids below n (new entries empty). */
static int vb_grow(vb *v, uint32_t n)
{
    if (n > v->cap) {
        uint32_t nc = v->cap ? v->cap : 1024;
        while (nc < n)
            nc *= 2;
        const char **nt = realloc(v->tok, nc * sizeof *nt);
        if (!nt)
            return -1;
        v->tok = nt;
        size_t *nl = realloc(v->len, nc * sizeof *nl);
        if (!nl)
            return -1;
        v->len = nl;
        int32_t *ny = realloc(v->type, nc * sizeof *ny);
        if (!ny)
            return -1;
        v->type = ny;
        float *ns = realloc(v->score, nc * sizeof *ns);
        if (!ns)
            return -1;
        v->score = ns;
        for (uint32_t i = v->cap; i < nc; i++) {
            v->tok[i] = NULL;
            v->len[i] = 0;
            v->type[i] = TT_NORMAL;
            v->score[i] = 0;
        }
        v->cap = nc;
    }
    if (n > v->n)
        v->n = n;
    return 0;
}

/* Ids from JSON files name their own slots, and every slot below the
 * highest becomes a token (holes are padded, vb_fill_holes).  So one entry
 * with id 15000000 in a 30 KB file would make 15 M tokens: an allocation,
 * a run time and an output out of all proportion to the input.  A file
 * holding n entries may use ids below 2n + 65536 (real vocabularies are
 * dense; a few thousand unused ids is already much). */
static void vb_bound(vb *v, size_t n_entries)
{
    uint64_t lim = 2 * (uint64_t)n_entries + 65536;
    v->lim = lim < VOCAB_MAX_TOKENS ? (uint32_t)lim : VOCAB_MAX_TOKENS;
}

/* 0, -1 out of memory, -2 an id at or past v->lim */
static int vb_set(vb *v, uint32_t id, const char *s, size_t n, int32_t type)
{
    if (id >= (v->lim ? v->lim : VOCAB_MAX_TOKENS))
        return -2;
    if (vb_grow(v, id + 1) < 0)
        return -1;
    v->tok[id] = s;
    v->len[id] = n;
    v->type[id] = type;
    return 0;
}

static int vb_merge(vb *v, const char *s, size_t n)
{
    if (v->n_mer == v->cap_mer) {
        size_t nc = v->cap_mer ? v->cap_mer * 2 : 4096;
        const char **nm = realloc(v->mer, nc * sizeof *nm);
        if (!nm)
            return -1;
        v->mer = nm;
        size_t *nl = realloc(v->mlen, nc * sizeof *nl);
        if (!nl)
            return -1;
        v->mlen = nl;
        v->cap_mer = nc;
    }
    v->mer[v->n_mer] = s;
    v->mlen[v->n_mer] = n;
    v->n_mer++;
    return 0;
}

/* Holes in the id range become "[PADn]" unused tokens, as llama.cpp's
 * converter writes them. */
static int vb_fill_holes(vb *v)
{
    for (uint32_t i = 0; i < v->n; i++)
        if (!v->tok[i]) {
            char b[32];
            int l = snprintf(b, sizeof b, "[PAD%u]", i);
            if (!(v->tok[i] = vb_own(v, b, (size_t)l)))
                return -1;
            v->len[i] = (size_t)l;
            v->type[i] = TT_UNUSED;
        }
    return 0;
}

/* text -> id index over the current tokens (first id wins). */
static int vb_index(vb *v)
{
    fmt_names_free(&v->idx);
    memset(&v->idx, 0, sizeof v->idx);
    for (uint32_t i = 0; i < v->n; i++)
        if (v->tok[i] &&
            fmt_names_put(&v->idx, v->tok[i], v->len[i], i, NULL) < 0)
            return -1;
    return 0;
}

static int32_t vb_find(const vb *v, const char *s, size_t n)
{
    size_t id;
    if (fmt_names_get(&v->idx, s, n, &id) == 0)
        return (int32_t)id;
    return -1;
}

/* Is s[0..n) a byte token "<0xNN>"? */
static int is_byte_token(const char *s, size_t n)
{
    static const char hex[] = "0123456789ABCDEFabcdef";
    return n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' && s[3] && s[4] &&
           strchr(hex, s[3]) && strchr(hex, s[4]);
}

/* ---- small file helpers ------------------------------------------------ */
static int path_join(char *out, size_t cap, const char *dir, const char *name)
{
    int l = snprintf(out, cap, "%s/%s", dir, name);
    return (l < 0 || (size_t)l >= cap) ? -1 : 0;
}

/* The directory part of path (without the slash) into out. */
static void dir_of(const char *path, char *out, size_t cap)
{
    const char *s = strrchr(path, '/');
    size_t l = 0;
    if (!s) {
        snprintf(out, cap, ".");
        return;
    }
    l = (size_t)(s - path);
    if (l == 0)
        l = 1;  /* "/file" -> "/" */
    if (l >= cap)
        l = cap - 1;
    memcpy(out, path, l);
    out[l] = 0;
}

static int is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static const char *base_of(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* Parse a JSON file; NULL with err set on failure. */
static json_object *json_load(const char *path, char *err, size_t errlen)
{
    fmt_map m;
    json_tokener *tk;
    json_object *o;
    if (fmt_map_open(&m, path, err, errlen) < 0)
        return NULL;
    if (m.n > VOCAB_MAX_JSON) {
        fmt_err(err, errlen, "%s: too large for a tokenizer file", path);
        fmt_map_close(&m);
        return NULL;
    }
    tk = json_tokener_new_ex(JSON_TOKENER_DEFAULT_DEPTH);
    if (!tk) {
        fmt_err(err, errlen, "%s: out of memory", path);
        fmt_map_close(&m);
        return NULL;
    }
    o = json_tokener_parse_ex(tk, (const char *)m.p, (int)m.n);
    if (!o) {
        enum json_tokener_error je = json_tokener_get_error(tk);
        fmt_err(err, errlen, "%s: not valid JSON (%s at byte %zu)", path,
                json_tokener_error_desc(je == json_tokener_continue
                                            ? json_tokener_error_parse_eof
                                            : je),
                json_tokener_get_parse_end(tk));
    } else if (json_tokener_get_parse_end(tk) < m.n) {
        /* trailing bytes other than white space are an error */
        for (size_t i = json_tokener_get_parse_end(tk); i < m.n; i++)
            if (m.p[i] != ' ' && m.p[i] != '\n' && m.p[i] != '\r' &&
                m.p[i] != '\t') {
                fmt_err(err, errlen, "%s: trailing data after the JSON "
                        "value at byte %zu", path, i);
                json_object_put(o);
                o = NULL;
                break;
            }
    }
    json_tokener_free(tk);
    fmt_map_close(&m);
    return o;
}

/* The entries of a JSON object or array (0 for anything else or NULL). */
static size_t jcount(json_object *o)
{
    if (o && json_object_is_type(o, json_type_object))
        return (size_t)json_object_object_length(o);
    if (o && json_object_is_type(o, json_type_array))
        return json_object_array_length(o);
    return 0;
}

static json_object *jget(json_object *o, const char *key)
{
    json_object *v = NULL;
    if (o && json_object_is_type(o, json_type_object) &&
        json_object_object_get_ex(o, key, &v))
        return v;
    return NULL;
}

static const char *jstr(json_object *o, size_t *len)
{
    if (!o || !json_object_is_type(o, json_type_string))
        return NULL;
    if (len)
        *len = (size_t)json_object_get_string_len(o);
    return json_object_get_string(o);
}

static int jbool(json_object *o, int dflt)
{
    if (!o || !json_object_is_type(o, json_type_boolean))
        return dflt;
    return json_object_get_boolean(o) ? 1 : 0;
}

/* A token given as "text" or {"content": "text"}. */
static const char *jtoken(json_object *o, size_t *len)
{
    const char *s = jstr(o, len);
    return s ? s : jstr(jget(o, "content"), len);
}

/* ---- llama2.c ---------------------------------------------------------- */
static int load_llama2c(fmt_kv *kv, const char *path, char *err,
                        size_t errlen)
{
    fmt_map m;
    vb v = {0};
    int rc = FMT_ENOMEM;
    size_t off = 4;
    int32_t maxlen;
    if ((rc = fmt_map_open(&m, path, err, errlen)) < 0)
        return rc;
    if (m.n < 4 + 8) {
        fmt_err(err, errlen, "%s: too short for a llama2.c tokenizer", path);
        fmt_map_close(&m);
        return FMT_EFORMAT;
    }
    memcpy(&maxlen, m.p, 4);
    if (maxlen <= 0 || maxlen > 65536) {
        fmt_err(err, errlen, "%s: not a llama2.c tokenizer (max_token_length "
                "%d)", path, maxlen);
        fmt_map_close(&m);
        return FMT_EFORMAT;
    }
    while (off < m.n) {
        float score;
        int32_t len;
        uint32_t id = v.n;
        const char *text;
        size_t tl;
        char *esc;
        if (m.n - off < 8) {
            fmt_err(err, errlen, "%s: truncated after token %u", path, id);
            rc = FMT_EFORMAT;
            goto out;
        }
        memcpy(&score, m.p + off, 4);
        memcpy(&len, m.p + off + 4, 4);
        off += 8;
        if (len < 0 || len > maxlen || (size_t)len > m.n - off) {
            fmt_err(err, errlen, "%s: token %u has a bad length %d", path, id,
                    len);
            rc = FMT_EFORMAT;
            goto out;
        }
        if (id >= VOCAB_MAX_TOKENS) {
            fmt_err(err, errlen, "%s: too many tokens", path);
            rc = FMT_EFORMAT;
            goto out;
        }
        text = (const char *)m.p + off;
        tl = (size_t)len;
        off += tl;
        /* write ' ' as U+2581 (3 bytes) */
        esc = malloc(tl * 3 + 1);
        if (!esc)
            goto nomem;
        size_t el = 0;
        for (size_t i = 0; i < tl; i++) {
            if (text[i] == ' ') {
                memcpy(esc + el, "\xe2\x96\x81", 3);
                el += 3;
            } else {
                esc[el++] = text[i];
            }
        }
        const char *own;
        int32_t type = TT_NORMAL;
        /* ids 0..2 get SentencePiece's names (llama2.c stores "\n<s>\n") */
        if (id <= 2) {
            static const char *const nm[3] = {"<unk>", "<s>", "</s>"};
            el = strlen(nm[id]);
            own = vb_own(&v, nm[id], el);
            type = id == 0 ? TT_UNKNOWN : TT_CONTROL;
        } else {
            own = vb_own(&v, esc, el);
            if (el == 0)
                type = TT_CONTROL;
            else if (is_byte_token(esc, el))
                type = TT_BYTE;
        }
        free(esc);
        if (!own || vb_set(&v, id, own, el, type) < 0)
            goto nomem;
        v.score[id] = score;
    }
    if (v.n < 3) {
        fmt_err(err, errlen, "%s: only %u tokens", path, v.n);
        rc = FMT_EFORMAT;
        goto out;
    }
    if (fmt_kv_set_str(kv, "tokenizer.ggml.model", "llama", 5) < 0 ||
        fmt_kv_set_arr_str(kv, "tokenizer.ggml.tokens", v.tok, v.len, v.n) <
            0 ||
        fmt_kv_set_arr_f32(kv, "tokenizer.ggml.scores", v.score, v.n) < 0 ||
        fmt_kv_set_arr_i32(kv, "tokenizer.ggml.token_type", v.type, v.n) <
            0 ||
        fmt_kv_set_u32(kv, "tokenizer.ggml.bos_token_id", 1) < 0 ||
        fmt_kv_set_u32(kv, "tokenizer.ggml.eos_token_id", 2) < 0 ||
        fmt_kv_set_u32(kv, "tokenizer.ggml.unknown_token_id", 0) < 0 ||
        fmt_kv_set_bool(kv, "tokenizer.ggml.add_bos_token", 1) < 0 ||
        fmt_kv_set_bool(kv, "tokenizer.ggml.add_space_prefix", 1) < 0)
        goto nomem;
    rc = FMT_OK;
    goto out;
nomem:
    fmt_err(err, errlen, "%s: out of memory", path);
    rc = FMT_ENOMEM;
out:
    vb_free(&v);
    fmt_map_close(&m);
    return rc;
}

/* ---- Hugging Face ------------------------------------------------------ */
/* HF's original expressions for the pre-tokenizers that have a name. */
#define HF_RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define HF_RE_LLAMA3 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define HF_RE_QWEN2 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#define MAX_PRE_RE 8

typedef struct hf_info {
    int         byte_level;     /* a ByteLevel pre-tokenizer or decoder */
    int         spm_style;      /* Metaspace / '▁' replacement seen */
    int         prefix_space;   /* -1 unknown, 0/1 */
    const char *re[MAX_PRE_RE]; /* pre-tokenizer expressions, in order */
    size_t      rel[MAX_PRE_RE];
    size_t      n_re;
    char        unsup[96];      /* first unsupported piece, or "" */
} hf_info;

static void hf_add_re(hf_info *h, const char *re, size_t len)
{
    if (h->n_re < MAX_PRE_RE) {
        h->re[h->n_re] = re;
        h->rel[h->n_re] = len;
    } else if (!h->unsup[0]) {
        snprintf(h->unsup, sizeof h->unsup, "more than %d pre-tokenizer "
                 "expressions", MAX_PRE_RE);
    }
    h->n_re++;
}

/* Walk a pre_tokenizer description. */
static void hf_walk_pre(hf_info *h, json_object *o)
{
    const char *type = jstr(jget(o, "type"), NULL);
    if (!o || json_object_is_type(o, json_type_null) || !type)
        return;
    if (!strcmp(type, "Sequence")) {
        json_object *a = jget(o, "pretokenizers");
        size_t n = a && json_object_is_type(a, json_type_array)
                       ? json_object_array_length(a) : 0;
        for (size_t i = 0; i < n; i++)
            hf_walk_pre(h, json_object_array_get_idx(a, i));
    } else if (!strcmp(type, "ByteLevel")) {
        h->byte_level = 1;
        if (jbool(jget(o, "add_prefix_space"), 0) && !h->unsup[0])
            snprintf(h->unsup, sizeof h->unsup,
                     "ByteLevel with add_prefix_space");
        if (jbool(jget(o, "use_regex"), 1))
            hf_add_re(h, HF_RE_GPT2, strlen(HF_RE_GPT2));
    } else if (!strcmp(type, "Split")) {
        json_object *pat = jget(o, "pattern");
        const char *beh = jstr(jget(o, "behavior"), NULL);
        size_t rl = 0;
        const char *re = jstr(jget(pat, "Regex"), &rl);
        if (jbool(jget(o, "invert"), 0) || (beh && strcmp(beh, "Isolated"))) {
            if (!h->unsup[0])
                snprintf(h->unsup, sizeof h->unsup, "Split behaviour '%.32s'",
                         beh ? beh : "invert");
            return;
        }
        if (!re && !h->unsup[0])
            snprintf(h->unsup, sizeof h->unsup, "Split on a plain string");
        if (re)
            hf_add_re(h, re, rl);
    } else if (!strcmp(type, "Digits")) {
        if (jbool(jget(o, "individual_digits"), 0))
            hf_add_re(h, "\\p{N}", 5);
        else
            hf_add_re(h, "\\p{N}+", 6);
    } else if (!strcmp(type, "Metaspace")) {
        const char *ps = jstr(jget(o, "prepend_scheme"), NULL);
        h->spm_style = 1;
        if (ps)
            h->prefix_space = strcmp(ps, "never") != 0;
        else if (jget(o, "add_prefix_space"))
            h->prefix_space = jbool(jget(o, "add_prefix_space"), 1);
    } else if (!h->unsup[0]) {
        snprintf(h->unsup, sizeof h->unsup, "pre-tokenizer '%.40s'", type);
    }
}

/* Walk a normalizer or decoder looking for SentencePiece traits. */
static void hf_walk_norm(hf_info *h, json_object *o, int decoder)
{
    const char *type = jstr(jget(o, "type"), NULL);
    if (!type)
        return;
    if (!strcmp(type, "Sequence")) {
        json_object *a = jget(o, decoder ? "decoders" : "normalizers");
        size_t n = a && json_object_is_type(a, json_type_array)
                       ? json_object_array_length(a) : 0;
        for (size_t i = 0; i < n; i++)
            hf_walk_norm(h, json_object_array_get_idx(a, i), decoder);
    } else if (!strcmp(type, "ByteLevel")) {
        h->byte_level = 1;
    } else if (!strcmp(type, "Prepend")) {
        const char *p = jstr(jget(o, "prepend"), NULL);
        if (p && !strcmp(p, "\xe2\x96\x81")) {
            h->spm_style = 1;
            h->prefix_space = 1;
        }
    } else if (!strcmp(type, "Replace")) {
        const char *c = jstr(jget(o, "content"), NULL);
        const char *p = jstr(jget(jget(o, "pattern"), "String"), NULL);
        if ((c && !strcmp(c, "\xe2\x96\x81")) || (p && !strcmp(p, "\xe2\x96\x81")))
            h->spm_style = 1;
    } else if (!strcmp(type, "Metaspace") || !strcmp(type, "ByteFallback")) {
        h->spm_style = 1;
    }
}

/* The id a JSON number or numeric string stands for; -1 if invalid. */
static int64_t jid(json_object *o)
{
    int64_t v;
    if (!o || !json_object_is_type(o, json_type_int))
        return -1;
    errno = 0;
    v = json_object_get_int64(o);
    return (errno || v < 0 || v >= VOCAB_MAX_TOKENS) ? -1 : v;
}

/* vb_set's failure as an error code and message. */
static int vb_set_err(const vb *v, int r, int64_t id, const char *path,
                      char *err, size_t errlen)
{
    if (r == -2) {
        fmt_err(err, errlen, "%s: token id %lld is far past the ids this "
                "tokenizer's entries can fill (limit %u): a vocabulary of "
                "mostly holes", path, (long long)id, v->lim);
        return FMT_EFORMAT;
    }
    fmt_err(err, errlen, "%s: out of memory", path);
    return FMT_ENOMEM;
}

/* Add one added/special token at id. */
static int add_special(vb *v, int64_t id, const char *s, size_t n,
                       int special, const char *path, char *err,
                       size_t errlen)
{
    if (id < 0 || !s || n == 0) {
        fmt_err(err, errlen, "%s: an added token has no id or no text", path);
        return FMT_EFORMAT;
    }
    int r = vb_set(v, (uint32_t)id, s, n, special ? TT_CONTROL : TT_USER);
    return r < 0 ? vb_set_err(v, r, id, path, err, errlen) : FMT_OK;
}

/* vocab object {text: id} into v (ids checked, duplicates refused). */
static int read_vocab_obj(vb *v, json_object *vo, const char *path,
                          char *err, size_t errlen)
{
    if (!vo || !json_object_is_type(vo, json_type_object)) {
        fmt_err(err, errlen, "%s: no vocab object", path);
        return FMT_EFORMAT;
    }
    json_object_object_foreach(vo, key, val) {
        int64_t id = jid(val);
        if (id < 0) {
            char nm[64];
            fmt_err(err, errlen, "%s: token '%s' has a bad id", path,
                    fmt_safe_name(nm, key, strlen(key)));
            return FMT_EFORMAT;
        }
        if ((uint32_t)id < v->n && v->tok[id]) {
            fmt_err(err, errlen, "%s: two tokens have id %lld", path,
                    (long long)id);
            return FMT_EFORMAT;
        }
        int r = vb_set(v, (uint32_t)id, key, strlen(key), TT_NORMAL);
        if (r < 0)
            return vb_set_err(v, r, id, path, err, errlen);
    }
    if (v->n == 0) {
        fmt_err(err, errlen, "%s: the vocabulary is empty", path);
        return FMT_EFORMAT;
    }
    return FMT_OK;
}

/* tokenizer_config.json (optional) and chat_template.jinja. */
typedef struct hf_cfg {
    json_object *root;
    const char  *cls;         /* tokenizer_class */
    char        *jinja;       /* chat_template.jinja contents */
    size_t       jinja_len;
} hf_cfg;

static int cfg_load(hf_cfg *c, const char *dir, char *err, size_t errlen)
{
    char p[4096];
    memset(c, 0, sizeof *c);
    if (path_join(p, sizeof p, dir, "tokenizer_config.json") == 0 &&
        is_file(p)) {
        c->root = json_load(p, err, errlen);
        if (!c->root)
            return FMT_EFORMAT;
        if (!json_object_is_type(c->root, json_type_object)) {
            fmt_err(err, errlen, "%s: not a JSON object", p);
            return FMT_EFORMAT;
        }
        c->cls = jstr(jget(c->root, "tokenizer_class"), NULL);
    }
    if (path_join(p, sizeof p, dir, "chat_template.jinja") == 0 &&
        is_file(p)) {
        fmt_map m;
        if (fmt_map_open(&m, p, err, errlen) == 0) {
            c->jinja = malloc(m.n + 1);
            if (c->jinja) {
                memcpy(c->jinja, m.p, m.n);
                c->jinja_len = m.n;
            }
            fmt_map_close(&m);
        }
    }
    return FMT_OK;
}

static void cfg_free(hf_cfg *c)
{
    if (c->root)
        json_object_put(c->root);
    free(c->jinja);
}

/* added_tokens_decoder {"id": {"content": ..., "special": bool}} */
static int cfg_added(vb *v, const hf_cfg *c, const char *path, char *err,
                     size_t errlen)
{
    json_object *d = jget(c->root, "added_tokens_decoder");
    if (!d || !json_object_is_type(d, json_type_object))
        return FMT_OK;
    json_object_object_foreach(d, key, val) {
        char *e;
        long long id = strtoll(key, &e, 10);
        size_t n = 0;
        const char *s = jstr(jget(val, "content"), &n);
        int rc;
        if (*e || e == key || id < 0 || id >= VOCAB_MAX_TOKENS) {
            fmt_err(err, errlen, "%s: added_tokens_decoder has a bad id",
                    path);
            return FMT_EFORMAT;
        }
        if ((uint32_t)id < v->n && v->tok[id] && s && v->len[id] == n &&
            !memcmp(v->tok[id], s, n) && v->type[id] != TT_NORMAL)
            continue;  /* already known from tokenizer.json */
        rc = add_special(v, id, s, n, jbool(jget(val, "special"), 0), path,
                         err, errlen);
        if (rc < 0)
            return rc;
    }
    return FMT_OK;
}

/* bos/eos/unk/pad, add_*_token and the chat template into kv. */
static int cfg_apply(fmt_kv *kv, const vb *v, const hf_cfg *c)
{
    static const char *const names[][2] = {
        {"bos_token", "tokenizer.ggml.bos_token_id"},
        {"eos_token", "tokenizer.ggml.eos_token_id"},
        {"unk_token", "tokenizer.ggml.unknown_token_id"},
        {"pad_token", "tokenizer.ggml.padding_token_id"},
    };
    json_object *ct;
    if (!c->root)
        goto tmpl;
    for (size_t i = 0; i < 4; i++) {
        size_t n = 0;
        const char *s = jtoken(jget(c->root, names[i][0]), &n);
        int32_t id = s ? vb_find(v, s, n) : -1;
        if (id >= 0 && fmt_kv_set_u32(kv, names[i][1], (uint32_t)id) < 0)
            return -1;
    }
    if (jget(c->root, "add_bos_token") &&
        fmt_kv_set_bool(kv, "tokenizer.ggml.add_bos_token",
                        jbool(jget(c->root, "add_bos_token"), 0)) < 0)
        return -1;
    if (jget(c->root, "add_eos_token") &&
        fmt_kv_set_bool(kv, "tokenizer.ggml.add_eos_token",
                        jbool(jget(c->root, "add_eos_token"), 0)) < 0)
        return -1;
    ct = jget(c->root, "chat_template");
    if (ct && json_object_is_type(ct, json_type_array)) {
        /* [{"name": ..., "template": ...}]: the "default" one, else first */
        json_object *pick = NULL;
        for (size_t i = 0; i < json_object_array_length(ct); i++) {
            json_object *e = json_object_array_get_idx(ct, i);
            const char *nm = jstr(jget(e, "name"), NULL);
            if (!pick || (nm && !strcmp(nm, "default")))
                pick = e;
        }
        ct = jget(pick, "template");
    }
    if (jstr(ct, NULL)) {
        size_t n = 0;
        const char *s = jstr(ct, &n);
        return fmt_kv_set_str(kv, "tokenizer.chat_template", s, n) < 0 ? -1
                                                                       : 0;
    }
tmpl:
    if (c->jinja &&
        fmt_kv_set_str(kv, "tokenizer.chat_template", c->jinja,
                       c->jinja_len) < 0)
        return -1;
    return 0;
}

/* Default special ids by token text, for files that do not name them. */
static int default_ids(fmt_kv *kv, const vb *v, int spm)
{
    static const char *const spm_t[][2] = {
        {"<s>", "tokenizer.ggml.bos_token_id"},
        {"</s>", "tokenizer.ggml.eos_token_id"},
        {"<unk>", "tokenizer.ggml.unknown_token_id"},
    };
    if (spm) {
        for (size_t i = 0; i < 3; i++) {
            int32_t id = vb_find(v, spm_t[i][0], strlen(spm_t[i][0]));
            if (id >= 0 && !fmt_kv_has(kv, spm_t[i][1]) &&
                fmt_kv_set_u32(kv, spm_t[i][1], (uint32_t)id) < 0)
                return -1;
        }
        return 0;
    }
    {
        int32_t id = vb_find(v, "<|endoftext|>", 13);
        if (id >= 0) {
            if (!fmt_kv_has(kv, "tokenizer.ggml.eos_token_id") &&
                fmt_kv_set_u32(kv, "tokenizer.ggml.eos_token_id",
                               (uint32_t)id) < 0)
                return -1;
            if (!fmt_kv_has(kv, "tokenizer.ggml.bos_token_id") &&
                fmt_kv_set_u32(kv, "tokenizer.ggml.bos_token_id",
                               (uint32_t)id) < 0)
                return -1;
        }
    }
    return 0;
}

/* Name the pre-tokenizer of an expression list (NULL: keep the list). */
static const char *pre_name(const hf_info *h)
{
    if (h->n_re == 1 && h->rel[0] == strlen(HF_RE_GPT2) &&
        !memcmp(h->re[0], HF_RE_GPT2, h->rel[0]))
        return "gpt-2";
    if (h->n_re == 1 && h->rel[0] == strlen(HF_RE_LLAMA3) &&
        !memcmp(h->re[0], HF_RE_LLAMA3, h->rel[0]))
        return "llama-bpe";
    if (h->n_re == 1 && h->rel[0] == strlen(HF_RE_QWEN2) &&
        !memcmp(h->re[0], HF_RE_QWEN2, h->rel[0]))
        return "qwen2";
    return NULL;
}

/* The common tail: types of byte tokens, holes, and every key into kv. */
static int write_vocab(fmt_kv *kv, vb *v, int spm, const char *pre,
                       const hf_info *h, int ignore_merges, const hf_cfg *c,
                       const char *path, char *err, size_t errlen)
{
    if (vb_fill_holes(v) < 0 || vb_index(v) < 0)
        goto nomem;
    if (v->n > VOCAB_MAX_TOKENS) {
        fmt_err(err, errlen, "%s: too many tokens", path);
        return FMT_EFORMAT;
    }
    if (spm) {
        /* byte tokens, and scores from merge ranks: a merge that makes a
         * token gives it -rank (lowest rank wins); others keep 0 */
        char *cat = NULL;
        size_t cc = 0;
        for (uint32_t i = 0; i < v->n; i++)
            if (v->type[i] == TT_NORMAL && is_byte_token(v->tok[i], v->len[i]))
                v->type[i] = TT_BYTE;
        for (size_t r = v->n_mer; r-- > 0;) {
            const char *m = v->mer[r];
            size_t l = v->mlen[r];
            const char *sp = l > 1 ? memchr(m + 1, ' ', l - 1) : NULL;
            int32_t id;
            if (!sp)
                continue;
            if (l > cc) {
                char *nc = realloc(cat, l);
                if (!nc) {
                    free(cat);
                    goto nomem;
                }
                cat = nc;
                cc = l;
            }
            memcpy(cat, m, (size_t)(sp - m));
            memcpy(cat + (sp - m), sp + 1, l - (size_t)(sp - m) - 1);
            id = vb_find(v, cat, l - 1);
            if (id >= 0)
                v->score[id] = -(float)r;
        }
        free(cat);
    }
    if (fmt_kv_set_str(kv, "tokenizer.ggml.model", spm ? "llama" : "gpt2",
                       spm ? 5 : 4) < 0 ||
        fmt_kv_set_arr_str(kv, "tokenizer.ggml.tokens", v->tok, v->len,
                           v->n) < 0 ||
        fmt_kv_set_arr_i32(kv, "tokenizer.ggml.token_type", v->type, v->n) <
            0)
        goto nomem;
    if (spm) {
        if (fmt_kv_set_arr_f32(kv, "tokenizer.ggml.scores", v->score, v->n) <
                0 ||
            fmt_kv_set_bool(kv, "tokenizer.ggml.add_space_prefix",
                            h && h->prefix_space >= 0 ? h->prefix_space
                                                      : 1) < 0)
            goto nomem;
    } else {
        if (fmt_kv_set_arr_str(kv, "tokenizer.ggml.merges", v->mer, v->mlen,
                               v->n_mer) < 0 ||
            fmt_kv_set_str(kv, "tokenizer.ggml.pre", pre, strlen(pre)) < 0)
            goto nomem;
        if (!strcmp(pre, "cflow-regex") &&
            fmt_kv_set_arr_str(kv, "tokenizer.cflow.pre_regex", h->re, h->rel,
                               h->n_re) < 0)
            goto nomem;
        if (ignore_merges && strcmp(pre, "llama-bpe") &&
            fmt_kv_set_bool(kv, "tokenizer.cflow.ignore_merges", 1) < 0)
            goto nomem;
    }
    if (cfg_apply(kv, v, c) < 0 || default_ids(kv, v, spm) < 0)
        goto nomem;
    return FMT_OK;
nomem:
    fmt_err(err, errlen, "%s: out of memory", path);
    return FMT_ENOMEM;
}

static int load_tokenizer_json(fmt_kv *kv, const char *path, char *err,
                               size_t errlen)
{
    json_object *root = json_load(path, err, errlen), *model, *merges, *added;
    vb v = {0};
    hf_info h;
    hf_cfg c;
    char dir[4096];
    const char *mtype, *pre = NULL;
    int rc, spm;
    if (!root)
        return FMT_EFORMAT;
    memset(&h, 0, sizeof h);
    h.prefix_space = -1;
    dir_of(path, dir, sizeof dir);
    if ((rc = cfg_load(&c, dir, err, errlen)) < 0)
        goto out;
    model = jget(root, "model");
    mtype = jstr(jget(model, "type"), NULL);
    if (!model) {
        fmt_err(err, errlen, "%s: no \"model\" (not a tokenizer.json?)", path);
        rc = FMT_EFORMAT;
        goto out;
    }
    if (mtype && strcmp(mtype, "BPE")) {
        char nm[64];
        fmt_err(err, errlen, "%s: tokenizer model '%s' is not supported "
                "(BPE only)", path, fmt_safe_name(nm, mtype, strlen(mtype)));
        rc = FMT_EUNSUP;
        goto out;
    }
    vb_bound(&v, jcount(jget(model, "vocab")) + jcount(jget(root, "added_tokens")) +
                     jcount(jget(c.root, "added_tokens_decoder")));
    if ((rc = read_vocab_obj(&v, jget(model, "vocab"), path, err, errlen)) <
        0)
        goto out;
    merges = jget(model, "merges");
    if (!merges || !json_object_is_type(merges, json_type_array)) {
        fmt_err(err, errlen, "%s: no merges list", path);
        rc = FMT_EFORMAT;
        goto out;
    }
    for (size_t i = 0; i < json_object_array_length(merges); i++) {
        json_object *m = json_object_array_get_idx(merges, i);
        size_t l = 0;
        const char *s = jstr(m, &l);
        if (!s && m && json_object_is_type(m, json_type_array) &&
            json_object_array_length(m) == 2) {
            /* newer files: ["a", "b"] */
            size_t la = 0, lb = 0;
            const char *a = jstr(json_object_array_get_idx(m, 0), &la);
            const char *b = jstr(json_object_array_get_idx(m, 1), &lb);
            char *j;
            if (a && b && (j = malloc(la + lb + 2))) {
                memcpy(j, a, la);
                j[la] = ' ';
                memcpy(j + la + 1, b, lb);
                s = vb_own(&v, j, la + lb + 1);
                l = la + lb + 1;
                free(j);
                if (!s)
                    goto nomem;
            }
        }
        if (!s) {
            fmt_err(err, errlen, "%s: merge %zu is not \"a b\" or [a, b]",
                    path, i);
            rc = FMT_EFORMAT;
            goto out;
        }
        if (vb_merge(&v, s, l) < 0)
            goto nomem;
    }
    added = jget(root, "added_tokens");
    if (added && json_object_is_type(added, json_type_array))
        for (size_t i = 0; i < json_object_array_length(added); i++) {
            json_object *a = json_object_array_get_idx(added, i);
            size_t n = 0;
            const char *s = jstr(jget(a, "content"), &n);
            if ((rc = add_special(&v, jid(jget(a, "id")), s, n,
                                  jbool(jget(a, "special"), 0), path, err,
                                  errlen)) < 0)
                goto out;
        }
    if ((rc = cfg_added(&v, &c, path, err, errlen)) < 0)
        goto out;
    {
        /* the model's unknown token is typed UNKNOWN, as llama.cpp's
         * converter does */
        size_t un = 0;
        const char *u = jstr(jget(model, "unk_token"), &un);
        for (uint32_t i = 0; u && i < v.n; i++)
            if (v.tok[i] && v.len[i] == un && !memcmp(v.tok[i], u, un)) {
                v.type[i] = TT_UNKNOWN;
                break;
            }
    }
    hf_walk_pre(&h, jget(root, "pre_tokenizer"));
    hf_walk_norm(&h, jget(root, "normalizer"), 0);
    hf_walk_norm(&h, jget(root, "decoder"), 1);
    if (jbool(jget(model, "byte_fallback"), 0) && !h.byte_level)
        h.spm_style = 1;
    if (h.byte_level) {
        spm = 0;
        if (h.unsup[0]) {
            fmt_err(err, errlen, "%s: %s is not supported", path, h.unsup);
            rc = FMT_EUNSUP;
            goto out;
        }
        pre = pre_name(&h);
        if (!pre)
            pre = h.n_re ? "cflow-regex" : "default";
    } else if (h.spm_style) {
        spm = 1;
    } else {
        fmt_err(err, errlen, "%s: BPE that is neither byte-level nor "
                "SentencePiece-style is not supported", path);
        rc = FMT_EUNSUP;
        goto out;
    }
    rc = write_vocab(kv, &v, spm, pre, &h,
                     jbool(jget(model, "ignore_merges"), 0), &c, path, err,
                     errlen);
    goto out;
nomem:
    fmt_err(err, errlen, "%s: out of memory", path);
    rc = FMT_ENOMEM;
out:
    cfg_free(&c);
    vb_free(&v);
    json_object_put(root);
    return rc;
}

/* The pre-tokenizer of a bare vocab.json + merges.txt (see the essay). */
static const char *pre_from_hints(vb *v, const hf_cfg *c, int *add_qwen)
{
    *add_qwen = 0;
    if (c->cls) {
        if (strstr(c->cls, "Qwen2"))
            return "qwen2";
        if (strstr(c->cls, "GPT2") || strstr(c->cls, "CodeGen") ||
            strstr(c->cls, "GPTNeoX") || strstr(c->cls, "Roberta") ||
            strstr(c->cls, "Bart"))
            return "gpt-2";
    }
    if (vb_find(v, "<|im_start|>", 12) >= 0)
        return "qwen2";
    if (v->n == 151643 && vb_find(v, "<|endoftext|>", 13) < 0) {
        *add_qwen = 1;
        return "qwen2";
    }
    return "gpt-2";
}

static int load_vocab_merges(fmt_kv *kv, const char *vpath,
                             const char *mpath, char *err, size_t errlen)
{
    json_object *root = json_load(vpath, err, errlen);
    vb v = {0};
    hf_cfg c;
    fmt_map m = {0};
    char dir[4096];
    const char *pre;
    int rc, add_qwen;
    if (!root)
        return FMT_EFORMAT;
    dir_of(vpath, dir, sizeof dir);
    if ((rc = cfg_load(&c, dir, err, errlen)) < 0)
        goto out;
    vb_bound(&v, jcount(root) + jcount(jget(c.root, "added_tokens_decoder")) + 3);
    if ((rc = read_vocab_obj(&v, root, vpath, err, errlen)) < 0)
        goto out;
    if ((rc = fmt_map_open(&m, mpath, err, errlen)) < 0)
        goto out;
    /* merges.txt: "#version ..." first line optional, then "a b" lines */
    for (size_t off = 0, line = 1; off < m.n; line++) {
        const char *s = (const char *)m.p + off;
        const char *e = memchr(s, '\n', m.n - off);
        size_t l = e ? (size_t)(e - s) : m.n - off;
        off += l + (e ? 1 : 0);
        if (l && s[l - 1] == '\r')
            l--;
        if (l == 0 || (line == 1 && l >= 8 && !memcmp(s, "#version", 8)))
            continue;
        if (!memchr(s + 1, ' ', l > 1 ? l - 1 : 0) || l < 3) {
            fmt_err(err, errlen, "%s: line %zu is not \"a b\"", mpath, line);
            rc = FMT_EFORMAT;
            goto out;
        }
        if (vb_merge(&v, s, l) < 0)
            goto nomem;
    }
    if (v.n_mer == 0) {
        fmt_err(err, errlen, "%s: no merges", mpath);
        rc = FMT_EFORMAT;
        goto out;
    }
    if ((rc = cfg_added(&v, &c, vpath, err, errlen)) < 0)
        goto out;
    if (vb_index(&v) < 0)
        goto nomem;
    pre = pre_from_hints(&v, &c, &add_qwen);
    if (add_qwen) {
        static const char *const q[] = {"<|endoftext|>", "<|im_start|>",
                                        "<|im_end|>"};
        uint32_t base = v.n;
        for (uint32_t i = 0; i < 3; i++) {
            int r = vb_set(&v, base + i, q[i], strlen(q[i]), TT_CONTROL);
            if (r < 0) {
                rc = vb_set_err(&v, r, base + i, vpath, err, errlen);
                goto out;
            }
        }
    }
    rc = write_vocab(kv, &v, 0, pre, NULL, 0, &c, vpath, err, errlen);
    if (rc == 0 && add_qwen && !fmt_kv_has(kv, "tokenizer.ggml.add_bos_token")
        && fmt_kv_set_bool(kv, "tokenizer.ggml.add_bos_token", 0) < 0)
        goto nomem;
    goto out;
nomem:
    fmt_err(err, errlen, "%s: out of memory", vpath);
    rc = FMT_ENOMEM;
out:
    if (m.p)
        fmt_map_close(&m);
    cfg_free(&c);
    vb_free(&v);
    json_object_put(root);
    return rc;
}

int fmt_vocab_load(fmt_kv *kv, const char *path, char *err, size_t errlen)
{
    struct stat st;
    char a[4096], b[4096];
    if (!kv || !path || !*path) {
        fmt_err(err, errlen, "fmt_vocab_load: no path");
        return FMT_EARG;
    }
    if (stat(path, &st) != 0) {
        fmt_err(err, errlen, "%s: %s", path, strerror(errno));
        return FMT_EIO;
    }
    if (S_ISDIR(st.st_mode)) {
        if (path_join(a, sizeof a, path, "tokenizer.json") == 0 && is_file(a))
            return load_tokenizer_json(kv, a, err, errlen);
        if (path_join(a, sizeof a, path, "vocab.json") == 0 && is_file(a) &&
            path_join(b, sizeof b, path, "merges.txt") == 0 && is_file(b))
            return load_vocab_merges(kv, a, b, err, errlen);
        if (path_join(a, sizeof a, path, "tokenizer.model") == 0 && is_file(a))
            fmt_err(err, errlen, "%s: only tokenizer.model (SentencePiece "
                    "protobuf) is there, which is not supported: need "
                    "tokenizer.json or vocab.json + merges.txt", path);
        else
            fmt_err(err, errlen, "%s: no tokenizer.json or vocab.json + "
                    "merges.txt in this directory", path);
        return FMT_EFORMAT;
    }
    if (!S_ISREG(st.st_mode)) {
        fmt_err(err, errlen, "%s: not a regular file", path);
        return FMT_EFORMAT;
    }
    if (!strcmp(base_of(path), "vocab.json")) {
        char dir[4096];
        dir_of(path, dir, sizeof dir);
        if (path_join(b, sizeof b, dir, "merges.txt") < 0 || !is_file(b)) {
            fmt_err(err, errlen, "%s: no merges.txt beside it", path);
            return FMT_EFORMAT;
        }
        return load_vocab_merges(kv, path, b, err, errlen);
    }
    {
        /* JSON starts with '{' (after white space); tokenizer.bin starts
         * with a small int32, whose first byte is never '{' followed by
         * JSON.  Peek at the first bytes. */
        FILE *f = fopen(path, "rb");
        int c = EOF;
        if (!f) {
            fmt_err(err, errlen, "%s: %s", path, strerror(errno));
            return FMT_EIO;
        }
        do
            c = fgetc(f);
        while (c == ' ' || c == '\n' || c == '\r' || c == '\t');
        fclose(f);
        if (c == '{')
            return load_tokenizer_json(kv, path, err, errlen);
    }
    return load_llama2c(kv, path, err, errlen);
}
