/*
 * fuzz_roundtrip.c — the tokenizer path on vocabularies the input makes:
 * text -> ids -> text, with the token count held to its stated bounds.
 *
 * fuzz_tok drives real vocabularies; this target builds a small one from
 * the input, so that the fuzzer reaches the vocabularies real ones never
 * are: no piece for a space, no byte tokens, pieces that are control-token
 * text, a pre-tokenizer expression of its own.
 *
 * Input: byte 0 = flags
 *   bit 0  0: SentencePiece ("llama"), 1: byte-level BPE ("gpt2")
 *   bit 1  add_special          bit 2  parse_special
 *   bit 3  every byte has a token (SPM: <0x00>..<0xFF>; BPE: the 256
 *          byte-level symbols)
 *   bit 4  SPM: add_space_prefix; BPE: the first line is the pre-tokenizer
 *          expression (tokenizer.cflow.pre_regex), not a token
 *   bits 5-6  the maximum passed to eng_tok_encode_alloc: none, the real
 *          count, one less, or len / 8
 * then the tokens, one per line (at most 256 of them, each at most 64
 * bytes; a leading '!' makes a control token, '?' a user-defined one), an
 * empty line, and the text (up to 4 KB).  Ids 0-2 are <unk>, <s>, </s>.
 * BPE merges are derived: a token of two or more characters merges its
 * first character with the rest when both are tokens.
 *
 * Checks:
 *   - eng_tok_encode and eng_tok_encode_alloc agree, ids in range, and the
 *     count lies in [eng_tok_count_min(len), eng_tok_count_max(len)]:
 *     4 len + 5 for SentencePiece, 6 len + 2 for byte-level BPE;
 *   - with a maximum below the count, ENG_ECTX and a count past the
 *     maximum; at or above it, the same ids;
 *   - the streaming detokeniser gives valid UTF-8 within its buffer bound
 *     (fuzz_tok_roundtrip) and, where the round trip is lossless, the text
 *     back: every byte has a token, no special-token parsing, valid UTF-8,
 *     no control or unknown token's text inside the text (a merge may then
 *     make that token, which is not text), and for SentencePiece no U+2581
 *     in it, either no prefix space or BOS to drop it after and no
 *     user-defined token's text (the fragment after one gets the prefix
 *     space too, as in llama.cpp), and a token
 *     for U+2581 unless there are no spaces (without one a space becomes
 *     the byte tokens of U+2581, which decode to it, as in llama.cpp).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

#define MAX_TOKENS 256
#define MAX_TOKEN_LEN 64
#define MAX_TEXT 4096

typedef struct vocab {
    char  *text[MAX_TOKENS + 3 + 256 + 1];
    size_t len[MAX_TOKENS + 3 + 256 + 1];
    int32_t type[MAX_TOKENS + 3 + 256 + 1];
    size_t n;
} vocab;

static void add(vocab *v, const char *s, size_t n, int32_t type)
{
    v->text[v->n] = malloc(n ? n : 1);
    FUZZ_ASSERT(v->text[v->n]);
    memcpy(v->text[v->n], s, n);
    v->len[v->n] = n;
    v->type[v->n] = type;
    v->n++;
}

/* GPT-2's bytes_to_unicode: byte b as its byte-level code point, UTF-8. */
static size_t byte_level(unsigned b, char *out)
{
    static unsigned cp[256];
    if (!cp[0x21]) {
        unsigned next = 256;
        for (unsigned i = 0; i < 256; i++) {
            int keep = (i >= 0x21 && i <= 0x7E) || (i >= 0xA1 && i <= 0xAC) ||
                       (i >= 0xAE && i <= 0xFF);
            cp[i] = keep ? i : next++;
        }
    }
    if (cp[b] < 0x80) {
        out[0] = (char)cp[b];
        return 1;
    }
    out[0] = (char)(0xC0 | (cp[b] >> 6));   /* every code point is below 0x800 */
    out[1] = (char)(0x80 | (cp[b] & 0x3F));
    return 2;
}

/* Bytes as the vocabulary spells them: SPM spaces become U+2581 (with a
 * leading one when prefix), BPE bytes their byte-level code points; out
 * has room for 3 n + 3 bytes. */
static size_t spell(int bpe, int prefix, const char *s, size_t n, char *out)
{
    size_t o = 0;
    if (prefix && !bpe) {
        memcpy(out, "\xe2\x96\x81", 3);
        o = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (bpe)
            o += byte_level((unsigned char)s[i], out + o);
        else if (s[i] == ' ') {
            memcpy(out + o, "\xe2\x96\x81", 3);
            o += 3;
        } else
            out[o++] = s[i];
    }
    return o;
}

/* The BPE merges: each token of two or more characters as "first rest". */
static void merges(const vocab *v, size_t first, char **m, size_t *ml, size_t *nm)
{
    for (size_t i = first; i < v->n; i++) {
        const char *s = v->text[i];
        size_t n = v->len[i], c = n ? (size_t)1 : 0;
        if (n && (unsigned char)s[0] >= 0xC0)
            c = (unsigned char)s[0] >= 0xE0 ? 3 : 2;
        if (c == 0 || c >= n)
            continue;
        m[*nm] = malloc(n + 1);
        FUZZ_ASSERT(m[*nm]);
        memcpy(m[*nm], s, c);
        m[*nm][c] = ' ';
        memcpy(m[*nm] + c + 1, s + c, n - c);
        ml[*nm] = n + 1;
        (*nm)++;
    }
}

/* The kv of the vocabulary the input describes; *text and *len the text.
 * NULL when the input describes none. */
static fmt_kv *build(const uint8_t *data, size_t size, vocab *v, const char **text,
                     size_t *len)
{
    int bpe = data[0] & 1, all_bytes = (data[0] >> 3) & 1, bit4 = (data[0] >> 4) & 1;
    const char *p = (const char *)data + 1, *end = (const char *)data + size;
    const char *sep = memmem(p, (size_t)(end - p), "\n\n", 2);
    if (!sep)
        return NULL;
    *text = sep + 2;
    *len = (size_t)(end - *text);
    if (*len > MAX_TEXT)
        return NULL;
    fmt_kv *kv = fmt_kv_new();
    FUZZ_ASSERT(kv);
    fmt_kv_set_str(kv, "tokenizer.ggml.model", bpe ? "gpt2" : "llama", bpe ? 4 : 5);
    add(v, "<unk>", 5, 2);
    add(v, "<s>", 3, 3);
    add(v, "</s>", 4, 3);
    if (all_bytes)
        for (unsigned b = 0; b < 256; b++) {
            char s[8];
            size_t n = bpe ? byte_level(b, s) : (size_t)snprintf(s, sizeof s, "<0x%02X>", b);
            add(v, s, n, bpe ? 1 : 6);
        }
    const size_t first = v->n;
    int regex = bpe && bit4;
    while (p < sep + 1 && v->n < first + MAX_TOKENS) {
        const char *nl = memchr(p, '\n', (size_t)(sep + 1 - p));
        size_t n = (size_t)(nl - p);
        char s[MAX_TOKEN_LEN * 4];
        int32_t type = 1;
        if (regex) {
            const char *re[1] = { p };
            fmt_kv_set_arr_str(kv, "tokenizer.cflow.pre_regex", re, &n, 1);
            regex = 0;
        } else if (n > 0 && n <= MAX_TOKEN_LEN) {
            const char *t = p;
            if (*t == '!' || *t == '?') {
                type = *t == '!' ? 3 : 4;
                t++;
                n--;
            }
            if (n && type == 1)
                add(v, s, spell(bpe, 0, t, n, s), type);
            else if (n)
                add(v, t, n, type);
        }
        p = nl + 1;
    }
    const char *tx[sizeof v->text / sizeof v->text[0]];
    float score[sizeof v->text / sizeof v->text[0]];
    for (size_t i = 0; i < v->n; i++) {
        tx[i] = v->text[i];
        score[i] = -(float)i;
    }
    fmt_kv_set_arr_str(kv, "tokenizer.ggml.tokens", tx, v->len, v->n);
    fmt_kv_set_arr_f32(kv, "tokenizer.ggml.scores", score, v->n);
    fmt_kv_set_arr_i32(kv, "tokenizer.ggml.token_type", v->type, v->n);
    fmt_kv_set_u32(kv, "tokenizer.ggml.bos_token_id", 1);
    fmt_kv_set_u32(kv, "tokenizer.ggml.eos_token_id", 2);
    fmt_kv_set_u32(kv, "tokenizer.ggml.unknown_token_id", 0);
    fmt_kv_set_bool(kv, "tokenizer.ggml.add_bos_token", 1);
    if (!bpe)
        fmt_kv_set_bool(kv, "tokenizer.ggml.add_space_prefix", bit4);
    else {
        char *m[MAX_TOKENS + 256];
        size_t ml[MAX_TOKENS + 256], nm = 0;
        merges(v, 3, m, ml, &nm);
        if (nm == 0) {   /* a gpt2 vocabulary needs merges: one naming no token
                          * (a rule whose result is no token would lose the
                          * bytes it merges, as in llama.cpp) */
            m[0] = strdup("\x01 \x01");
            ml[0] = 3;
            nm = 1;
        }
        fmt_kv_set_arr_str(kv, "tokenizer.ggml.merges", (const char *const *)m, ml, nm);
        for (size_t i = 0; i < nm; i++)
            free(m[i]);
    }
    return kv;
}

/* Is any control or unknown token's text inside text, as it is or as the
 * vocabulary spells it (a merge may then make that token)? */
static int holds_control(const eng_tok *t, const char *text, size_t len, int prefix)
{
    char *sp = malloc(3 * len + 4);
    FUZZ_ASSERT(sp);
    size_t sl = spell(!eng_tok_is_spm(t), prefix, text, len, sp);
    int found = 0;
    for (uint32_t id = 0; id < eng_tok_n_vocab(t) && !found; id++) {
        size_t pl;
        const char *pc = eng_tok_piece(t, (int32_t)id, &pl);
        found = eng_tok_is_control(t, (int32_t)id) && pl &&
                (memmem(text, len, pc, pl) || memmem(sp, sl, pc, pl));
    }
    free(sp);
    return found;
}

/* Is any user-defined token's text inside text?  Such a token splits the
 * text, and with add_space_prefix the fragment after it gets the prefix
 * space as after a special token (llama.cpp's is_prev_special), so the
 * round trip gains a space there. */
static int holds_user(const vocab *v, const char *text, size_t len)
{
    for (size_t i = 0; i < v->n; i++)
        if (v->type[i] == 4 && v->len[i] && memmem(text, len, v->text[i], v->len[i]))
            return 1;
    return 0;
}

/* Does the vocabulary have a normal token "\xe2\x96\x81" (the first of that
 * text wins)?  Without one a space falls back to the three byte tokens of
 * U+2581, which decode to U+2581 itself, as in llama.cpp. */
static int has_space_piece(const vocab *v)
{
    for (size_t i = 0; i < v->n; i++)
        if (v->len[i] == 3 && !memcmp(v->text[i], "\xe2\x96\x81", 3))
            return v->type[i] == 1;
    return 0;
}

/* The counts and the maximum; the encoder's return code. */
static int check_counts(const eng_tok *t, const char *text, size_t len, int add_special,
                         int parse_special, int max_mode)
{
    char err[512];
    size_t n = 0, n2 = 0;
    int32_t one[1], *ids = NULL;
    int rc = eng_tok_encode(t, text, len, add_special, parse_special, one, 1, &n);
    if (rc < 0) {
        /* an expression of the input's own may backtrack past its limit */
        FUZZ_ASSERT(rc == ENG_EFORMAT || rc == ENG_ENOMEM);
        rc = eng_tok_encode_alloc(t, text, len, add_special, parse_special, 0, 0, &ids,
                                  &n2, err, sizeof err);
        fuzz_check_err("eng_tok_encode_alloc", rc, ENG_ELAST, err, sizeof err);
        FUZZ_ASSERT(rc < 0 && !ids);
        return rc;
    }
    size_t lo = eng_tok_count_min(t, len), hi = eng_tok_count_max(t, len);
    if (n < lo || n > hi)
        fuzz_fail("%zu bytes encode to %zu ids, outside [%zu, %zu]", len, n, lo, hi);
    FUZZ_ASSERT(hi == (eng_tok_is_spm(t) ? 4 * len + 5 : 6 * len + 2));
    size_t max = max_mode == 1 ? n : max_mode == 2 ? n - 1 : max_mode == 3 ? len / 8 : 0;
    if (max_mode == 2 && n == 0)
        max = 0;
    rc = eng_tok_encode_alloc(t, text, len, add_special, parse_special, max, 3, &ids, &n2,
                              err, sizeof err);
    if (max && n > max) {
        if (rc != ENG_ECTX || n2 <= max || ids)
            fuzz_fail("%zu ids against a maximum of %zu: rc %d, count %zu", n, max, rc, n2);
        return 0;
    }
    FUZZ_ASSERT(rc == 0 && ids && n2 == n);
    int32_t *all = malloc((n ? n : 1) * sizeof *all);
    FUZZ_ASSERT(all);
    FUZZ_ASSERT(eng_tok_encode(t, text, len, add_special, parse_special, all, n, &n2) == 0);
    for (size_t i = 0; i < n; i++)
        if (ids[i] != all[i] || ids[i] < 0 || (uint32_t)ids[i] >= eng_tok_n_vocab(t))
            fuzz_fail("id %zu: %d against %d", i, ids[i], all[i]);
    ids[n] = ids[n + 2] = 0;   /* the room asked for */
    free(all);
    free(ids);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    vocab v = { .n = 0 };
    const char *text0;
    size_t len = 0;
    fmt_kv *kv = build(data, size, &v, &text0, &len);
    if (!kv)
        return 0;
    int add_special = (data[0] >> 1) & 1, parse_special = (data[0] >> 2) & 1;
    int all_bytes = (data[0] >> 3) & 1, bit4 = (data[0] >> 4) & 1, max_mode = data[0] >> 5 & 3;
    char err[512];
    eng_tok *t = NULL;
    int rc = eng_tok_load(&t, kv, err, sizeof err);
    fuzz_check_err("eng_tok_load", rc, ENG_ELAST, err, sizeof err);
    if (rc == 0) {
        /* the text in its own buffer: no slack to hide an over-read */
        char *text = malloc(len ? len : 1);
        FUZZ_ASSERT(text);
        memcpy(text, text0, len);
        fuzz_tok_walk(t);
        int erc = check_counts(t, text, len, add_special, parse_special, max_mode);
        size_t olen = 0;
        char *out = fuzz_tok_roundtrip(t, text, len, add_special, parse_special, &olen);
        int spm = eng_tok_is_spm(t);
        int lossless = erc == 0 && all_bytes && !parse_special && fuzz_utf8_valid(text, len) &&
                       !holds_control(t, text, len, spm && bit4) &&
                       (!spm || (!memmem(text, len, "\xe2\x96\x81", 3) &&
                                 (!bit4 || (add_special && !holds_user(&v, text, len))) &&
                                 (has_space_piece(&v) || (!bit4 && !memchr(text, ' ', len)))));
        if (lossless && (olen != len || memcmp(out, text, len) != 0))
            fuzz_fail("%s round trip: %zu bytes in, %zu out (%.*s)",
                      spm ? "SentencePiece" : "byte-level BPE", len, olen,
                      (int)(olen < 200 ? olen : 200), out);
        free(out);
        free(text);
        eng_tok_free(t);
    }
    fmt_kv_free(kv);
    for (size_t i = 0; i < v.n; i++)
        free(v.text[i]);
    return 0;
}
