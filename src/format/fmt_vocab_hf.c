/*
 * fmt_vocab_hf.c — Hugging Face tokenizer files described with the GGUF
 * keys the engine's tokenizer reads (tokenizer.ggml.*), through the
 * vocabulary builder of fmt_vocab.h.
 *
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

#include "format/fmt_vocab.h"

#define VOCAB_MAX_JSON   (512u << 20)

/* ---- JSON helpers ------------------------------------------------------ */
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
    return (errno || v < 0 || v >= FMT_VOCAB_MAX_TOKENS) ? -1 : v;
}

/* Add one added/special token at id. */
static int add_special(fmt_vb *v, int64_t id, const char *s, size_t n,
                       int special, const char *path, char *err,
                       size_t errlen)
{
    if (id < 0 || !s || n == 0) {
        fmt_err(err, errlen, "%s: an added token has no id or no text", path);
        return FMT_EFORMAT;
    }
    int r = fmt_vb_set(v, (uint32_t)id, s, n,
                       special ? FMT_TT_CONTROL : FMT_TT_USER);
    return r < 0 ? fmt_vb_set_err(v, r, id, path, err, errlen) : FMT_OK;
}

/* vocab object {text: id} into v (ids checked, duplicates refused). */
static int read_vocab_obj(fmt_vb *v, json_object *vo, const char *path,
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
        int r = fmt_vb_set(v, (uint32_t)id, key, strlen(key), FMT_TT_NORMAL);
        if (r < 0)
            return fmt_vb_set_err(v, r, id, path, err, errlen);
    }
    if (v->n == 0) {
        fmt_err(err, errlen, "%s: the vocabulary is empty", path);
        return FMT_EFORMAT;
    }
    return FMT_OK;
}

/* tokenizer_config.json (optional) and chat_template.jinja. */
typedef struct hf_cfg {
    char         path[4096];  /* tokenizer_config.json's, for its errors */
    json_object *root;
    const char  *cls;         /* tokenizer_class */
    char        *jinja;       /* chat_template.jinja contents */
    size_t       jinja_len;
} hf_cfg;

static int cfg_load(hf_cfg *c, const char *dir, char *err, size_t errlen)
{
    char p[4096];
    memset(c, 0, sizeof *c);
    if (fmt_vocab_file_in(c->path, sizeof c->path, dir, "tokenizer_config.json")) {
        c->root = json_load(c->path, err, errlen);
        if (!c->root)
            return FMT_EFORMAT;
        if (!json_object_is_type(c->root, json_type_object)) {
            fmt_err(err, errlen, "%s: not a JSON object", c->path);
            return FMT_EFORMAT;
        }
        c->cls = jstr(jget(c->root, "tokenizer_class"), NULL);
    }
    if (fmt_vocab_file_in(p, sizeof p, dir, "chat_template.jinja")) {
        fmt_map m;
        int rc = fmt_map_open(&m, p, err, errlen);
        if (rc == FMT_EIO)      /* a FIFO or a folder in its place: said */
            return rc;
        if (rc == 0) {
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

/* added_tokens_decoder {"id": {"content": ..., "special": bool}}, whose
 * errors name tokenizer_config.json, not the tokenizer file beside it */
static int cfg_added(fmt_vb *v, const hf_cfg *c, char *err, size_t errlen)
{
    const char *path = c->path;
    json_object *d = jget(c->root, "added_tokens_decoder");
    if (!d || !json_object_is_type(d, json_type_object))
        return FMT_OK;
    json_object_object_foreach(d, key, val) {
        char *e;
        long long id = strtoll(key, &e, 10);
        size_t n = 0;
        const char *s = jstr(jget(val, "content"), &n);
        int rc;
        if (*e || e == key || id < 0 || id >= FMT_VOCAB_MAX_TOKENS) {
            fmt_err(err, errlen, "%s: added_tokens_decoder has a bad id",
                    path);
            return FMT_EFORMAT;
        }
        if ((uint32_t)id < v->n && v->tok[id] && s && v->len[id] == n &&
            !memcmp(v->tok[id], s, n) && v->type[id] != FMT_TT_NORMAL)
            continue;  /* already known from tokenizer.json */
        rc = add_special(v, id, s, n, jbool(jget(val, "special"), 0), path,
                         err, errlen);
        if (rc < 0)
            return rc;
    }
    return FMT_OK;
}

/* bos/eos/unk/pad, add_*_token and the chat template into kv. */
static int cfg_apply(fmt_kv *kv, const fmt_vb *v, const hf_cfg *c)
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
        int32_t id = s ? fmt_vb_find(v, s, n) : -1;
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
static int default_ids(fmt_kv *kv, const fmt_vb *v, int spm)
{
    static const char *const spm_t[][2] = {
        {"<s>", "tokenizer.ggml.bos_token_id"},
        {"</s>", "tokenizer.ggml.eos_token_id"},
        {"<unk>", "tokenizer.ggml.unknown_token_id"},
    };
    if (spm) {
        for (size_t i = 0; i < 3; i++) {
            int32_t id = fmt_vb_find(v, spm_t[i][0], strlen(spm_t[i][0]));
            if (id >= 0 && !fmt_kv_has(kv, spm_t[i][1]) &&
                fmt_kv_set_u32(kv, spm_t[i][1], (uint32_t)id) < 0)
                return -1;
        }
        return 0;
    }
    {
        int32_t id = fmt_vb_find(v, "<|endoftext|>", 13);
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
static int write_vocab(fmt_kv *kv, fmt_vb *v, int spm, const char *pre,
                       const hf_info *h, int ignore_merges, const hf_cfg *c,
                       const char *path, char *err, size_t errlen)
{
    if (fmt_vb_fill_holes(v) < 0 || fmt_vb_index(v) < 0)
        goto nomem;
    if (v->n > FMT_VOCAB_MAX_TOKENS) {
        fmt_err(err, errlen, "%s: too many tokens", path);
        return FMT_EFORMAT;
    }
    if (spm) {
        /* byte tokens, and scores from merge ranks: a merge that makes a
         * token gives it -rank (lowest rank wins); others keep 0 */
        char *cat = NULL;
        size_t cc = 0;
        for (uint32_t i = 0; i < v->n; i++)
            if (v->type[i] == FMT_TT_NORMAL &&
                fmt_vb_is_byte_token(v->tok[i], v->len[i]))
                v->type[i] = FMT_TT_BYTE;
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
            id = fmt_vb_find(v, cat, l - 1);
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

/* The model's merges into v: "a b" strings, or [a, b] pairs (newer
 * files).  0, or a code with err naming the merge. */
static int read_merges(fmt_vb *v, json_object *merges, const char *path, char *err,
                       size_t errlen)
{
    if (!merges || !json_object_is_type(merges, json_type_array)) {
        fmt_err(err, errlen, "%s: no merges list", path);
        return FMT_EFORMAT;
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
                s = fmt_vb_own(v, j, la + lb + 1);
                l = la + lb + 1;
                free(j);
                if (!s)
                    goto nomem;
            }
        }
        if (!s) {
            fmt_err(err, errlen, "%s: merge %zu is not \"a b\" or [a, b]", path, i);
            return FMT_EFORMAT;
        }
        if (fmt_vb_merge(v, s, l) < 0)
            goto nomem;
    }
    return 0;
nomem:
    fmt_err(err, errlen, "%s: out of memory", path);
    return FMT_ENOMEM;
}

int fmt_vocab_hf_json(fmt_kv *kv, const char *path, char *err,
                      size_t errlen)
{
    json_object *root = json_load(path, err, errlen), *model, *added;
    fmt_vb v = {0};
    hf_info h;
    hf_cfg c;
    char dir[4096];
    const char *mtype, *pre = NULL;
    int rc, spm;
    if (!root)
        return FMT_EFORMAT;
    memset(&h, 0, sizeof h);
    h.prefix_space = -1;
    fmt_vocab_dir_of(path, dir, sizeof dir);
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
    fmt_vb_bound(&v, jcount(jget(model, "vocab")) +
                         jcount(jget(root, "added_tokens")) +
                     jcount(jget(c.root, "added_tokens_decoder")));
    if ((rc = read_vocab_obj(&v, jget(model, "vocab"), path, err, errlen)) <
        0)
        goto out;
    if ((rc = read_merges(&v, jget(model, "merges"), path, err, errlen)) < 0)
        goto out;
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
    if ((rc = cfg_added(&v, &c, err, errlen)) < 0)
        goto out;
    {
        /* the model's unknown token is typed UNKNOWN, as llama.cpp's
         * converter does */
        size_t un = 0;
        const char *u = jstr(jget(model, "unk_token"), &un);
        for (uint32_t i = 0; u && i < v.n; i++)
            if (v.tok[i] && v.len[i] == un && !memcmp(v.tok[i], u, un)) {
                v.type[i] = FMT_TT_UNKNOWN;
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
out:
    cfg_free(&c);
    fmt_vb_free(&v);
    json_object_put(root);
    return rc;
}

/* The pre-tokenizer of a bare vocab.json + merges.txt (see the essay). */
static const char *pre_from_hints(fmt_vb *v, const hf_cfg *c, int *add_qwen)
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
    if (fmt_vb_find(v, "<|im_start|>", 12) >= 0)
        return "qwen2";
    if (v->n == 151643 && fmt_vb_find(v, "<|endoftext|>", 13) < 0) {
        *add_qwen = 1;
        return "qwen2";
    }
    return "gpt-2";
}

int fmt_vocab_hf_merges(fmt_kv *kv, const char *vpath, const char *mpath,
                        char *err, size_t errlen)
{
    json_object *root = json_load(vpath, err, errlen);
    fmt_vb v = {0};
    hf_cfg c;
    fmt_map m = {0};
    char dir[4096];
    const char *pre;
    int rc, add_qwen;
    if (!root)
        return FMT_EFORMAT;
    fmt_vocab_dir_of(vpath, dir, sizeof dir);
    if ((rc = cfg_load(&c, dir, err, errlen)) < 0)
        goto out;
    fmt_vb_bound(&v, jcount(root) +
                         jcount(jget(c.root, "added_tokens_decoder")) + 3);
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
        if (fmt_vb_merge(&v, s, l) < 0)
            goto nomem;
    }
    if (v.n_mer == 0) {
        fmt_err(err, errlen, "%s: no merges", mpath);
        rc = FMT_EFORMAT;
        goto out;
    }
    if ((rc = cfg_added(&v, &c, err, errlen)) < 0)
        goto out;
    if (fmt_vb_index(&v) < 0)
        goto nomem;
    pre = pre_from_hints(&v, &c, &add_qwen);
    if (add_qwen) {
        static const char *const q[] = {"<|endoftext|>", "<|im_start|>",
                                        "<|im_end|>"};
        uint32_t base = v.n;
        for (uint32_t i = 0; i < 3; i++) {
            int r = fmt_vb_set(&v, base + i, q[i], strlen(q[i]),
                               FMT_TT_CONTROL);
            if (r < 0) {
                rc = fmt_vb_set_err(&v, r, base + i, vpath, err, errlen);
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
    fmt_vb_free(&v);
    json_object_put(root);
    return rc;
}
