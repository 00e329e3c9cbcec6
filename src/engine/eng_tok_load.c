/*
 * eng_tok_load.c — building the vocabulary (eng_tok_impl.h) from the
 * GGUF-style keys of an fmt_kv, in phases: the token texts, scores and
 * types; the text -> id table; the special ids and flags; llama.cpp's
 * promotions of control tokens by text; BPE merges or SentencePiece byte
 * tokens; the partition list; the pieces.  Every refusal names the key.
 */
#include "config.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/eng_tok_impl.h"

static int streq(const char *s, size_t n, const char *lit)
{
    return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves,
 * the other 68 bytes take code points 256.. in byte order. */
static void byte_level_tables(eng_tok *t)
{
    unsigned next = 256;
    for (unsigned i = 0; i < 512; i++)
        t->cp_bl[i] = -1;
    for (unsigned b = 0; b < 256; b++) {
        int keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) ||
                   (b >= 0xAE && b <= 0xFF);
        t->bl_cp[b] = (uint16_t)(keep ? b : next++);
        t->cp_bl[t->bl_cp[b]] = (int16_t)b;
    }
}

/* Token texts llama.cpp recognises as control tokens whatever their type
 * (end of turn, end of generation, fill-in-the-middle). */
static const char *const eot_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "<end_of_utterance>", NULL
};
static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
    "<|flush|>", "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>",
    "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "[e~[", NULL
};
/* one list per FIM role; the first token found of each is promoted */
static const char *const fim_texts[][9] = {
    { "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
      "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<PRE>",
      "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", NULL },
    { "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
      "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>", "<SUF>",
      "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", NULL },
    { "<|fim_middle|>", "<fim-middle>", "<fim_middle>",
      "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", "<MID>",
      "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", NULL },
    { "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL },
    { "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>",
      NULL },
    { "<|file_sep|>", NULL },
};
static const char *const fim_keys[] = {
    "tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id",
    "tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.fim_pad_token_id",
    "tokenizer.ggml.fim_rep_token_id", "tokenizer.ggml.fim_sep_token_id",
};

/* The first token (by list order) whose text is in list, or -1. */
static int32_t find_listed(const eng_tok *t, const char *const *list)
{
    for (size_t i = 0; list[i]; i++) {
        int32_t id = eng_tok_find(t, list[i], strlen(list[i]));
        if (id >= 0)
            return id;
    }
    return -1;
}

/* A special-token id from key (absent or out of range: dflt). */
static int32_t key_id(const fmt_kv *kv, const char *key, int32_t dflt,
                      uint32_t n)
{
    uint32_t v;
    if (dflt >= 0 && (uint32_t)dflt >= n)
        dflt = -1;
    if (fmt_kv_get_u32(kv, key, &v) == 0 && v < n)
        return (int32_t)v;
    return dflt;
}

static int key_bool(const fmt_kv *kv, const char *key, int dflt)
{
    int v;
    return fmt_kv_get_bool(kv, key, &v) == 0 ? (v != 0) : dflt;
}

static int special_cmp_len(const void *a, const void *b, void *ctx)
{
    const eng_tok *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (t->tlen[x] != t->tlen[y])
        return t->tlen[x] > t->tlen[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* Parse "<0xNN>"; the byte or -1. */
static int parse_byte_token(const char *s, size_t n)
{
    unsigned v = 0;
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else
            return -1;
    }
    return (int)v;
}

/* Write token id's piece (see eng_tok_piece) into out (room for 3x the
 * text); its length. */
static size_t make_piece(const eng_tok *t, uint32_t id, char *out)
{
    const char *s = t->text + t->toff[id];
    size_t n = t->tlen[id], o = 0;
    uint8_t a = t->attr[id];
    if (a & (TA_UNKNOWN | TA_CONTROL | TA_USER)) {
        memcpy(out, s, n);
        return n;
    }
    if (a & TA_NORMAL) {
        if (t->spm) {
            for (size_t i = 0; i < n; i++) {
                if (i + 2 < n && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
                    out[o++] = ' ';
                    i += 2;
                } else {
                    out[o++] = s[i];
                }
            }
            return o;
        }
        /* byte-level: each code point stands for one byte; code points
         * outside the map are copied as they are */
        for (size_t i = 0; i < n;) {
            size_t l = eng_tok_lead_len((unsigned char)s[i]);
            uint32_t cp = 0;
            if (l > n - i)
                l = n - i;
            if (l == 1)
                cp = (unsigned char)s[i];
            else if (l == 2)
                cp = ((uint32_t)(s[i] & 0x1F) << 6) | (s[i + 1] & 0x3F);
            else
                cp = 0xFFFFFFFFu;
            if (cp < 512 && t->cp_bl[cp] >= 0 &&
                (l == 2 || cp < 0x80)) {
                out[o++] = (char)t->cp_bl[cp];
            } else {
                memcpy(out + o, s + i, l);
                o += l;
            }
            i += l;
        }
        return o;
    }
    if (a & TA_BYTE) {
        int b = parse_byte_token(s, n);
        if (b >= 0) {
            out[0] = (char)b;
            return 1;
        }
        memcpy(out, s, n);
        return n;
    }
    return 0;  /* unused / undefined: no text, as in llama.cpp */
}

/* Refuse with one line naming the key (ENG_EFORMAT unless rc says). */
static int refuse(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int refuse(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return rc;
}

static int nomem(char *err, size_t errlen)
{
    return refuse(err, errlen, ENG_ENOMEM, "tokenizer: out of memory");
}

/* The kind and size of the vocabulary: a new t with spm and n set. */
static int load_kind(eng_tok **out, const fmt_kv *kv, char *err, size_t errlen)
{
    size_t mlen;
    int arr = 0;
    const char *model = fmt_kv_get_str(kv, "tokenizer.ggml.model", &mlen);
    if (!model)
        return refuse(err, errlen, ENG_EFORMAT, "tokenizer.ggml.model is missing");
    if (!streq(model, mlen, "llama") && !streq(model, mlen, "gpt2"))
        return refuse(err, errlen, ENG_EUNSUP,
                      "tokenizer.ggml.model '%.*s' is not supported (llama or gpt2)",
                      (int)(mlen > 32 ? 32 : mlen), model);
    int ty = fmt_kv_type_of(kv, "tokenizer.ggml.tokens", &arr);
    uint64_t n64 = fmt_kv_arr_len(kv, "tokenizer.ggml.tokens");
    if (ty != FMT_KV_STR || !arr || n64 == 0)
        return refuse(err, errlen, ENG_EFORMAT,
                      "tokenizer.ggml.tokens is missing or not an array of strings");
    if (n64 > (1u << 26))
        return refuse(err, errlen, ENG_EFORMAT,
                      "tokenizer.ggml.tokens holds %llu tokens, more than %u",
                      (unsigned long long)n64, 1u << 26);
    eng_tok *t = calloc(1, sizeof *t);
    if (!t)
        return nomem(err, errlen);
    t->spm = streq(model, mlen, "llama");
    t->n = (uint32_t)n64;
    *out = t;
    return ENG_OK;
}

/* Every token's text, copied; *total gets the bytes with terminators. */
static int load_texts(eng_tok *t, const fmt_kv *kv, size_t *total, char *err,
                      size_t errlen)
{
    size_t sum = 0;
    for (uint32_t i = 0; i < t->n; i++) {
        size_t l;
        if (!fmt_kv_arr_str(kv, "tokenizer.ggml.tokens", i, &l) || l > (1u << 20))
            return refuse(err, errlen, ENG_EFORMAT,
                          "tokenizer.ggml.tokens[%u] is unreadable or over 1 MiB", i);
        sum += l + 1;
    }
    if (sum > UINT32_MAX / 3)
        return refuse(err, errlen, ENG_EFORMAT,
                      "tokenizer.ggml.tokens: %zu bytes of text, more than %u", sum,
                      UINT32_MAX / 3);
    t->text = malloc(sum);
    t->toff = malloc(t->n * sizeof *t->toff);
    t->tlen = malloc(t->n * sizeof *t->tlen);
    t->score = calloc(t->n, sizeof *t->score);
    t->attr = malloc(t->n);
    if (!t->text || !t->toff || !t->tlen || !t->score || !t->attr)
        return nomem(err, errlen);
    sum = 0;
    for (uint32_t i = 0; i < t->n; i++) {
        size_t l;
        const char *s = fmt_kv_arr_str(kv, "tokenizer.ggml.tokens", i, &l);
        memcpy(t->text + sum, s, l);
        t->text[sum + l] = 0;
        t->toff[i] = (uint32_t)sum;
        t->tlen[i] = (uint32_t)l;
        sum += l + 1;
        t->attr[i] = TA_NORMAL;
        if (l > t->max_text)
            t->max_text = l;
    }
    *total = sum;
    return ENG_OK;
}

/* SentencePiece scores and token types, when the keys are there. */
static int load_scores_types(eng_tok *t, const fmt_kv *kv, char *err, size_t errlen)
{
    if (fmt_kv_has(kv, "tokenizer.ggml.scores")) {
        uint64_t ns = fmt_kv_arr_len(kv, "tokenizer.ggml.scores");
        if (ns < t->n)
            return refuse(err, errlen, ENG_EFORMAT,
                          "tokenizer.ggml.scores holds %llu scores for %u tokens",
                          (unsigned long long)ns, t->n);
        for (uint32_t i = 0; i < t->n; i++)
            if (fmt_kv_arr_f32(kv, "tokenizer.ggml.scores", i, &t->score[i]))
                return refuse(err, errlen, ENG_EFORMAT,
                              "tokenizer.ggml.scores is not numeric");
    }
    if (fmt_kv_has(kv, "tokenizer.ggml.token_type")) {
        static const uint8_t map[7] = {0, TA_NORMAL, TA_UNKNOWN, TA_CONTROL,
                                       TA_USER, TA_UNUSED, TA_BYTE};
        uint64_t nt = fmt_kv_arr_len(kv, "tokenizer.ggml.token_type");
        if (nt < t->n)
            return refuse(err, errlen, ENG_EFORMAT,
                          "tokenizer.ggml.token_type holds %llu types for %u tokens",
                          (unsigned long long)nt, t->n);
        for (uint32_t i = 0; i < t->n; i++) {
            int32_t v;
            if (fmt_kv_arr_i32(kv, "tokenizer.ggml.token_type", i, &v))
                return refuse(err, errlen, ENG_EFORMAT,
                              "tokenizer.ggml.token_type is not integer");
            t->attr[i] = (v >= 0 && v <= 6) ? map[v] : 0;
        }
    }
    return ENG_OK;
}

/* The text -> id table; of tokens with the same text the lowest id wins. */
static int build_hash(eng_tok *t, char *err, size_t errlen)
{
    uint32_t sz = 16;
    while (sz < t->n * 2u)
        sz *= 2;
    t->hash = calloc(sz, sizeof *t->hash);
    if (!t->hash)
        return nomem(err, errlen);
    t->hmask = sz - 1;
    for (uint32_t i = 0; i < t->n; i++) {
        if (t->tlen[i] == 0)
            continue; /* an empty token can never match text */
        if (eng_tok_find(t, t->text + t->toff[i], t->tlen[i]) >= 0)
            continue; /* duplicate text */
        uint32_t h = (uint32_t)eng_tok_hash_bytes(t->text + t->toff[i], t->tlen[i]) &
                     t->hmask;
        while (t->hash[h])
            h = (h + 1) & t->hmask;
        t->hash[h] = i + 1;
    }
    return ENG_OK;
}

/* BPE: the pre-tokenizer, named (tokenizer.ggml.pre) or given as
 * expressions (tokenizer.cflow.pre_regex). */
static int load_pretok(eng_tok *t, const fmt_kv *kv, char *err, size_t errlen)
{
    size_t plen = 0;
    const char *pre = fmt_kv_get_str(kv, "tokenizer.ggml.pre", &plen);
    const char *res[8];
    size_t rel[8];
    uint64_t nre = fmt_kv_arr_len(kv, "tokenizer.cflow.pre_regex");
    if (nre > 8)
        return refuse(err, errlen, ENG_EUNSUP,
                      "tokenizer.cflow.pre_regex holds %llu expressions, more than 8",
                      (unsigned long long)nre);
    for (uint64_t i = 0; i < nre; i++)
        if (!(res[i] = fmt_kv_arr_str(kv, "tokenizer.cflow.pre_regex", i, &rel[i])))
            return refuse(err, errlen, ENG_EFORMAT,
                          "tokenizer.cflow.pre_regex[%llu] is not a string",
                          (unsigned long long)i);
    int rc = eng_pretok_new(&t->pre, pre, plen, res, rel, nre, err, errlen);
    if (rc < 0)
        return rc;
    t->ignore_merges =
        key_bool(kv, "tokenizer.cflow.ignore_merges",
                 (eng_pretok_flags(t->pre) & ENG_PRE_IGNORE_MERGES) != 0);
    return ENG_OK;
}

/* BOS, EOS, unknown and end-of-turn ids, the add_* flags, and the control
 * tokens llama.cpp recognises by their text. */
static void load_specials(eng_tok *t, const fmt_kv *kv)
{
    t->bos = key_id(kv, "tokenizer.ggml.bos_token_id", t->spm ? 1 : -1, t->n);
    t->eos = key_id(kv, "tokenizer.ggml.eos_token_id", t->spm ? 2 : -1, t->n);
    t->unk = key_id(kv, "tokenizer.ggml.unknown_token_id", t->spm ? 0 : -1, t->n);
    t->add_space_prefix = key_bool(kv, "tokenizer.ggml.add_space_prefix", t->spm);
    t->add_bos = key_bool(kv, "tokenizer.ggml.add_bos_token",
                          t->spm || (t->pre && (eng_pretok_flags(t->pre) &
                                                ENG_PRE_ADD_BOS)));
    t->add_eos = key_bool(kv, "tokenizer.ggml.add_eos_token", 0);
    if (t->bos < 0)
        t->add_bos = 0;
    if (t->eos < 0)
        t->add_eos = 0;
    t->eot = key_id(kv, "tokenizer.ggml.eot_token_id", -1, t->n);
    if (t->eot < 0) {
        t->eot = find_listed(t, eot_texts);
        if (t->eot >= 0)
            t->attr[t->eot] |= TA_CONTROL;
    }
    for (size_t f = 0; f < sizeof fim_keys / sizeof *fim_keys; f++)
        if (key_id(kv, fim_keys[f], -1, t->n) < 0) {
            int32_t id = find_listed(t, fim_texts[f]);
            if (id >= 0)
                t->attr[id] |= TA_CONTROL;
        }
    for (size_t i = 0; eog_texts[i]; i++) {
        int32_t id = eng_tok_find(t, eog_texts[i], strlen(eog_texts[i]));
        if (id >= 0)
            t->attr[id] |= TA_CONTROL;
    }
}

/* One merge rule "left right" (split at the first space after position
 * 0) of rank i; rules naming a side outside the vocabulary, or repeated,
 * are skipped.  cat: scratch of at least l bytes. */
static void add_merge(eng_tok *t, const char *m, size_t l, uint32_t i, char *cat)
{
    int32_t dummy;
    if (!m || l < 3)
        return;
    const char *sp = memchr(m + 1, ' ', l - 1);
    if (!sp)
        return;
    int32_t a = eng_tok_find(t, m, (size_t)(sp - m));
    int32_t b = eng_tok_find(t, sp + 1, l - (size_t)(sp - m) - 1);
    if (a < 0 || b < 0 || eng_tok_merge_find(t, a, b, &dummy) >= 0)
        return;
    memcpy(cat, m, (size_t)(sp - m));
    memcpy(cat + (sp - m), sp + 1, l - (size_t)(sp - m) - 1);
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    uint32_t h = (uint32_t)eng_tok_hash_u64(key) & t->mmask;
    while (t->mkey[h])
        h = (h + 1) & t->mmask;
    t->mkey[h] = key;
    t->mrank[h] = i;
    t->mres[h] = eng_tok_find(t, cat, l - 1);
}

/* BPE: the merge table and the byte-level map. */
static int load_merges(eng_tok *t, const fmt_kv *kv, char *err, size_t errlen)
{
    uint64_t nm = fmt_kv_arr_len(kv, "tokenizer.ggml.merges");
    uint32_t sz = 16;
    char *cat = NULL, tmp[8];
    size_t catcap = 0;
    if (nm == 0)
        return refuse(err, errlen, ENG_EFORMAT,
                      "tokenizer.ggml.merges is missing or empty (a gpt2 vocabulary "
                      "needs its merges)");
    if (nm > (1u << 26))
        return refuse(err, errlen, ENG_EFORMAT,
                      "tokenizer.ggml.merges holds %llu merges, more than %u",
                      (unsigned long long)nm, 1u << 26);
    while (sz < nm * 2)
        sz *= 2;
    t->mkey = calloc(sz, sizeof *t->mkey);
    t->mrank = malloc(sz * sizeof *t->mrank);
    t->mres = malloc(sz * sizeof *t->mres);
    if (!t->mkey || !t->mrank || !t->mres)
        return nomem(err, errlen);
    t->mmask = sz - 1;
    for (uint64_t i = 0; i < nm; i++) {
        size_t l;
        const char *m = fmt_kv_arr_str(kv, "tokenizer.ggml.merges", i, &l);
        if (m && l > catcap) {
            char *nc = realloc(cat, l);
            if (!nc) {
                free(cat);
                return nomem(err, errlen);
            }
            cat = nc;
            catcap = l;
        }
        add_merge(t, m, l, (uint32_t)i, cat);
    }
    free(cat);
    byte_level_tables(t);
    t->all_bytes = 1;
    for (unsigned b = 0; b < 256; b++) {
        t->bl_tok[b] = eng_tok_find(t, tmp, eng_utf8_put(t->bl_cp[b], tmp));
        t->all_bytes &= t->bl_tok[b] >= 0;
    }
    return ENG_OK;
}

/* SentencePiece: the token of each byte ("<0xNN>", else the byte itself). */
static void load_byte_tokens(eng_tok *t)
{
    char tmp[8];
    t->all_bytes = 1;
    for (unsigned b = 0; b < 256; b++) {
        snprintf(tmp, sizeof tmp, "<0x%02X>", b);
        t->byte_tok[b] = eng_tok_find(t, tmp, 6);
        if (t->byte_tok[b] < 0) {
            tmp[0] = (char)b;
            t->byte_tok[b] = eng_tok_find(t, tmp, 1);
        }
        t->all_bytes &= t->byte_tok[b] >= 0 || t->unk >= 0;
    }
}

/* The ids that partition text, longest text first. */
static int build_partition(eng_tok *t, char *err, size_t errlen)
{
    t->special = malloc(t->n * sizeof *t->special);
    if (!t->special)
        return nomem(err, errlen);
    for (uint32_t i = 0; i < t->n; i++)
        if ((t->attr[i] & (TA_CONTROL | TA_USER | TA_UNKNOWN)) && t->tlen[i])
            t->special[t->n_special++] = (int32_t)i;
    qsort_r(t->special, t->n_special, sizeof *t->special, special_cmp_len, t);
    return ENG_OK;
}

/* Every token's piece (before strip flags, which only shape
 * partitioning); total: the texts' bytes, a piece is at most 3x its text. */
static int build_pieces(eng_tok *t, size_t total, char *err, size_t errlen)
{
    size_t o = 0;
    t->piece = malloc(total * 3 + 1);
    t->poff = malloc(t->n * sizeof *t->poff);
    t->plen = malloc(t->n * sizeof *t->plen);
    if (!t->piece || !t->poff || !t->plen)
        return nomem(err, errlen);
    for (uint32_t i = 0; i < t->n; i++) {
        size_t l = make_piece(t, i, t->piece + o);
        t->poff[i] = (uint32_t)o;
        t->plen[i] = (uint32_t)l;
        o += l;
        if (l > t->max_piece)
            t->max_piece = l;
    }
    char *shrunk = realloc(t->piece, o ? o : 1);
    if (shrunk)
        t->piece = shrunk;
    return ENG_OK;
}

/* Phi-3's strip rules (llama.cpp keys them on the model's name): special
 * tokens eat the spaces after them, except <unk>, <s> and <|endoftext|>. */
static void phi3_strip(eng_tok *t, const fmt_kv *kv)
{
    size_t nl;
    const char *name = fmt_kv_get_str(kv, "general.name", &nl);
    int phi3 = 0;
    for (size_t i = 0; name && i < nl && !phi3; i++)
        phi3 = (i + 5 <= nl && strncasecmp(name + i, "phi-3", 5) == 0) ||
               (i + 4 <= nl && strncasecmp(name + i, "phi3", 4) == 0);
    if (!phi3)
        return;
    static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
    int32_t id;
    for (uint32_t i = 0; i < t->n_special; i++)
        t->attr[t->special[i]] |= TA_RSTRIP;
    if ((id = eng_tok_find(t, "</s>", 4)) >= 0)
        t->attr[id] |= TA_RSTRIP;
    for (size_t k = 0; k < 3; k++)
        if ((id = eng_tok_find(t, keep[k], strlen(keep[k]))) >= 0)
            t->attr[id] &= (uint8_t)~TA_RSTRIP;
    /* a special token may now stand for any number of spaces */
    t->max_text = SIZE_MAX;
}

int eng_tok_load(eng_tok **out, const fmt_kv *kv, char *err, size_t errlen)
{
    eng_tok *t = NULL;
    size_t total = 0;
    int rc;
    if (!out || !kv)
        return refuse(err, errlen, ENG_EARG, "eng_tok_load: no vocabulary");
    *out = NULL;
    if ((rc = load_kind(&t, kv, err, errlen)) ||
        (rc = load_texts(t, kv, &total, err, errlen)) ||
        (rc = load_scores_types(t, kv, err, errlen)) ||
        (rc = build_hash(t, err, errlen)) ||
        (!t->spm && (rc = load_pretok(t, kv, err, errlen))))
        goto fail;
    load_specials(t, kv);
    if (t->spm)
        load_byte_tokens(t);
    else if ((rc = load_merges(t, kv, err, errlen)))
        goto fail;
    if ((rc = build_partition(t, err, errlen)) ||
        (rc = build_pieces(t, total, err, errlen)))
        goto fail;
    phi3_strip(t, kv);
    *out = t;
    return ENG_OK;
fail:
    eng_tok_free(t);
    return rc;
}
