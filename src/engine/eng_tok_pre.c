/*
 * eng_tok_pre.c — the pre-tokenizer of byte-level BPE vocabularies: split
 * text into "words" with the regular expressions llama.cpp uses for each
 * tokenizer.ggml.pre value, before merges run inside each word.
 *
 * How the split works (llama.cpp's unicode_regex_split, reproduced):
 *   A vocabulary names an ordered list of expressions.  The text starts as
 *   one fragment.  Each expression in turn is run over every fragment on
 *   its own (the fragment is the whole subject: look-aheads and `$` do not
 *   see past its end); every match becomes a fragment and so does every
 *   stretch between matches, so no byte is ever dropped.  The fragments
 *   left after the last expression are the words.
 *
 * llama.cpp runs the expressions through std::regex after "collapsing"
 * each non-ASCII code point to a byte standing for its Unicode category, or
 * through hand-written splitters for the common ones.  Both emulate real
 * Unicode-aware matching, which PCRE2 does natively (UTF + UCP), so the
 * expressions below are llama.cpp's, spelled for PCRE2:
 *   - non-ASCII literals are written as \x{...} so that no tool on the way
 *     can normalise them (the DeepSeek class holds canonical singletons
 *     such as U+212A KELVIN SIGN that NFC would turn into 'K');
 *   - PCRE2_DOLLAR_ENDONLY makes `$` mean end of subject, as in ECMAScript;
 *   - where llama.cpp rewrote an expression only because std::regex lacks
 *     a feature (GPT-4o's \p{Lu}... classes), the tokenizer.json original
 *     is used, with (?i:'s|...) spelled (?:'[sS]|...) as llama.cpp does
 *     (caseless UCP matching would also fold U+017F LATIN SMALL LONG S).
 *
 * The subject must be valid UTF-8: eng_pretok_sanitize makes it so the way
 * llama.cpp's decoder does (bytes that do not decode become U+FFFD).
 * Expressions are compiled once (JIT where the library has it) and shared
 * read-only between threads; match data is per call.
 */
#include "config.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/eng_impl.h"

#define PRE_MAX_RE 8

/* llama.cpp's expressions, per pre-tokenizer family. */
#define RE_CONTRACT "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RE_LLAMA3 RE_CONTRACT "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2 RE_CONTRACT "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN35 RE_CONTRACT "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_SEED_CODER RE_CONTRACT "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_BAILING "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"
#define RE_UPPER "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define RE_LOWER "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
#define RE_TEKKEN "[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "*" RE_LOWER "+|[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "+" RE_LOWER "*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_GPT4O "[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "*" RE_LOWER "+" RE_CONTRACT "?|[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "+" RE_LOWER "*" RE_CONTRACT "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* DeepSeek LLM's letter class (cased letters of the Latin, Greek, Cyrillic,
 * Armenian, Georgian, Cherokee ... blocks), code point for code point. */
#define RE_DS_LETTERS "[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}" \
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}" \
    "\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}" \
    "\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}" \
    "\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}" \
    "\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}" \
    "\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}" \
    "\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}" \
    "\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}" \
    "\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}" \
    "\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}" \
    "\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}" \
    "\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}" \
    "\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}" \
    "\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}" \
    "\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]"
/* CJK ideographs U+4E00..U+9FA5, U+0800..U+4E00 and Hangul U+AC00..U+D7FF */
#define RE_DS_CJK "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"
#define RE_CJK_KANA "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+"

typedef struct pre_family {
    const char *names;        /* space-separated tokenizer.ggml.pre values */
    unsigned    flags;        /* ENG_PRE_* */
    const char *re[PRE_MAX_RE];
} pre_family;

static const pre_family pre_families[] = {
    { "llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2",
      ENG_PRE_IGNORE_MERGES | ENG_PRE_ADD_BOS, { RE_LLAMA3 } },
    { "dbrx smaug-bpe glm4 chatglm-bpe", 0, { RE_LLAMA3 } },
    { "qwen2 deepseek-r1-qwen kormo f2llmv2 megrez stablelm2 hunyuan "
      "solar-open grok-2", 0, { RE_QWEN2 } },
    { "qwen35", 0, { RE_QWEN35 } },
    { "deepseek-llm", 0,
      { "[\\r\\n]", "\\s?" RE_DS_LETTERS "+",
        "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
        "\\s+$", RE_DS_CJK, "\\p{N}+" } },
    { "deepseek-coder", 0,
      { "[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_DS_CJK, "\\p{N}" } },
    { "deepseek-v3 hunyuan-dense", 0,
      { "\\p{N}{1,3}", RE_CJK_KANA,
        "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" } },
    { "falcon", 0,
      { "[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]" } },
    { "starcoder refact command-r smollm codeshell exaone minerva-7b", 0,
      { "\\p{N}", RE_GPT2 } },
    { "gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 "
      "mellum modern-bert jina-v1-en jina-v2-code roberta-bpe mpt olmo jais "
      "trillion granite-docling exaone4", 0, { RE_GPT2 } },
    { "poro-chat bloom gpt3-finnish", 0,
      { " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{0964}\\x{06D4}\\x{060C})]+" } },
    { "tekken", ENG_PRE_IGNORE_MERGES | ENG_PRE_ADD_BOS, { RE_TEKKEN } },
    { "gpt-4o llama4", 0, { RE_GPT4O } },
    { "seed-coder", 0, { RE_SEED_CODER } },
    { "bailingmoe bailingmoe2 llada-moe", 0, { RE_BAILING } },
    { "default", 0,
      { "[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]" } },
};

/* The steps (PCRE2's match limit) one search may take: a base, and some
 * per byte of the fragment still ahead of it.  The expressions above take
 * a few steps per byte even on runs of 100 KB of one character class; a
 * backtracking one (nested quantifiers such as "(\s+)+$") needs millions
 * on a few dozen bytes and is stopped with an error instead. */
#define PRE_STEPS_BASE     100000u
#define PRE_STEPS_PER_BYTE 64u

struct eng_pretok {
    unsigned    n_re;
    unsigned    flags;
    const char *what;         /* what names the expressions in messages */
    pcre2_code *re[PRE_MAX_RE];
};

/* Is name one of the space-separated words of list? */
static int name_in(const char *list, const char *name, size_t nlen)
{
    const char *p = list;
    while (*p) {
        const char *e = strchr(p, ' ');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == nlen && memcmp(p, name, nlen) == 0)
            return 1;
        if (!e)
            break;
        p = e + 1;
    }
    return 0;
}

/* Compile expression re[0..relen) as the next one of p; what names it in
 * a refusal (the key, or the family's name). */
static int pre_compile(eng_pretok *p, const char *re, size_t relen,
                       const char *what, char *err, size_t errlen)
{
    int ec;
    PCRE2_SIZE eoff;
    pcre2_code *c;
    if (p->n_re >= PRE_MAX_RE) {
        snprintf(err, errlen, "%s: more than %d expressions", what, PRE_MAX_RE);
        return ENG_EUNSUP;
    }
    p->what = what;
    c = pcre2_compile((PCRE2_SPTR)re, relen,
                      PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &ec, &eoff,
                      NULL);
    if (!c) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        snprintf(err, errlen, "%s[%u] does not compile at offset %zu: %s", what,
                 p->n_re, (size_t)eoff, (const char *)msg);
        return ENG_EFORMAT;
    }
    /* JIT is an optimisation: without it (or where it fails) the
     * interpreter gives the same matches. */
    (void)pcre2_jit_compile(c, PCRE2_JIT_COMPLETE);
    p->re[p->n_re++] = c;
    return ENG_OK;
}

int eng_pretok_new(eng_pretok **out, const char *pre, size_t pre_len,
                   const char *const *custom, const size_t *custom_len,
                   size_t n_custom, char *err, size_t errlen)
{
    eng_pretok *p;
    const pre_family *fam = NULL;
    int rc;
    *out = NULL;
    if (n_custom == 0) {
        if (pre == NULL || pre_len == 0) {
            pre = "default";
            pre_len = 7;
        }
        for (size_t i = 0; i < sizeof pre_families / sizeof *pre_families; i++)
            if (name_in(pre_families[i].names, pre, pre_len)) {
                fam = &pre_families[i];
                break;
            }
        if (!fam) {
            snprintf(err, errlen,
                     "tokenizer.ggml.pre '%.*s' is not a pre-tokenizer cflow knows",
                     (int)(pre_len > 64 ? 64 : pre_len), pre);
            return ENG_EUNSUP;
        }
    }
    p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "tokenizer: out of memory");
        return ENG_ENOMEM;
    }
    if (fam) {
        p->flags = fam->flags;
        for (unsigned i = 0; i < PRE_MAX_RE && fam->re[i]; i++) {
            rc = pre_compile(p, fam->re[i], strlen(fam->re[i]),
                             "tokenizer.ggml.pre's expression", err, errlen);
            if (rc < 0)
                goto fail;
        }
    } else {
        for (size_t i = 0; i < n_custom; i++) {
            rc = pre_compile(p, custom[i], custom_len[i], "tokenizer.cflow.pre_regex",
                             err, errlen);
            if (rc < 0)
                goto fail;
        }
    }
    *out = p;
    return ENG_OK;
fail:
    eng_pretok_free(p);
    return rc;
}

void eng_pretok_free(eng_pretok *p)
{
    if (!p)
        return;
    for (unsigned i = 0; i < p->n_re; i++)
        pcre2_code_free(p->re[i]);
    free(p);
}

unsigned eng_pretok_flags(const eng_pretok *p) { return p->flags; }


/* ---- UTF-8 sanitising -------------------------------------------------- */
/* Decode one code point the way llama.cpp's unicode_cpt_from_utf8 does:
 * the lead byte fixes the length, continuation bytes must be 10xxxxxx,
 * nothing else is checked (overlong forms decode).  Returns the length
 * consumed, or 0 when the bytes do not decode. */
static size_t cpt_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned char c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (!(c & 0x40))
        return 0;
    if (!(c & 0x20)) {
        if (n < 2 || (s[1] & 0xC0) != 0x80)
            return 0;
        *cp = ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3F);
        return 2;
    }
    if (!(c & 0x10)) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80)
            return 0;
        *cp = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) |
              (s[2] & 0x3F);
        return 3;
    }
    if (!(c & 0x08)) {
        if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 ||
            (s[3] & 0xC0) != 0x80)
            return 0;
        *cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
              ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
        return 4;
    }
    return 0;
}

size_t eng_utf8_put(uint32_t cp, char *out)
{
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Returns text itself when it is already well-formed (the common case), or
 * a malloc'd copy (also in *owned) in which every undecodable byte,
 * surrogate and code point past U+10FFFF is U+FFFD and overlong forms are
 * re-encoded shortest (llama.cpp decodes to code points and re-encodes,
 * with the same effect).  NULL on ENOMEM. */
const char *eng_pretok_sanitize(const char *text, size_t len, size_t *out_len,
                                char **owned)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0, o = 0;
    char *buf;
    /* fast path: strictly valid UTF-8 needs no copy */
    while (i < len) {
        uint32_t cp;
        size_t l = cpt_decode(s + i, len - i, &cp);
        if (l == 0 || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF ||
            (l == 2 && cp < 0x80) || (l == 3 && cp < 0x800) ||
            (l == 4 && cp < 0x10000))
            break;
        i += l;
    }
    *owned = NULL;
    if (i == len) {
        *out_len = len;
        return text;
    }
    /* each input byte yields at most 3 output bytes (U+FFFD) */
    buf = malloc(len * 3 + 1);
    if (!buf)
        return NULL;
    memcpy(buf, text, i);
    o = i;
    while (i < len) {
        uint32_t cp;
        size_t l = cpt_decode(s + i, len - i, &cp);
        if (l == 0) {
            cp = 0xFFFD;
            l = 1;
        } else if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
            cp = 0xFFFD;
        }
        o += eng_utf8_put(cp, buf + o);
        i += l;
    }
    buf[o] = 0;
    *out_len = o;
    *owned = buf;
    return buf;
}

/* ---- splitting --------------------------------------------------------- */
typedef struct bvec {
    size_t *v;
    size_t  n, cap;
} bvec;

static int bvec_push(bvec *b, size_t x)
{
    if (b->n == b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 64;
        size_t *nv = realloc(b->v, nc * sizeof *nv);
        if (!nv)
            return -1;
        b->v = nv;
        b->cap = nc;
    }
    b->v[b->n++] = x;
    return 0;
}

/* Length of the UTF-8 character starting at s (valid input). */
static size_t u8len(unsigned char c)
{
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

/* The steps a search over rest bytes may take. */
static uint32_t step_limit(size_t rest)
{
    uint64_t l = PRE_STEPS_BASE + (uint64_t)PRE_STEPS_PER_BYTE * rest;
    return l > UINT32_MAX ? UINT32_MAX : (uint32_t)l;
}

/* The next match of expression r in subj[pos..flen): 1 with [*ms, *me),
 * 0 when there is none, or a negative ENG_E* code with err. */
static int next_match(const eng_pretok *p, unsigned r, const char *subj, size_t flen,
                      size_t pos, size_t base, pcre2_match_data *md,
                      pcre2_match_context *mc, size_t *ms, size_t *me, char *err,
                      size_t errlen)
{
    uint32_t limit = step_limit(flen - pos);
    pcre2_set_match_limit(mc, limit);
    int m = pcre2_match(p->re[r], (PCRE2_SPTR)subj, flen, pos, PCRE2_NO_UTF_CHECK, md, mc);
    if (m == PCRE2_ERROR_JIT_STACKLIMIT)
        /* the interpreter keeps its backtracking on the heap */
        m = pcre2_match(p->re[r], (PCRE2_SPTR)subj, flen, pos,
                        PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, mc);
    if (m == PCRE2_ERROR_NOMATCH)
        return 0;
    if (m == PCRE2_ERROR_MATCHLIMIT || m == PCRE2_ERROR_DEPTHLIMIT ||
        m == PCRE2_ERROR_HEAPLIMIT) {
        snprintf(err, errlen,
                 "%s[%u] needs more than %u steps to split the text at byte %zu "
                 "(an expression that backtracks without bound)",
                 p->what, r, limit, base + pos);
        return ENG_EFORMAT;
    }
    if (m < 0) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(m, msg, sizeof msg);
        snprintf(err, errlen, "%s[%u] fails at byte %zu of the text: %s", p->what, r,
                 base + pos, (const char *)msg);
        return m == PCRE2_ERROR_NOMEMORY ? ENG_ENOMEM : ENG_EFORMAT;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    *ms = ov[0];
    *me = ov[1];
    return 1;
}

int eng_pretok_split(const eng_pretok *p, const char *text, size_t len,
                     size_t **ends, size_t *n_words, char *err, size_t errlen)
{
    bvec cur = {0}, nxt = {0};
    pcre2_match_data *md = NULL;
    pcre2_match_context *mc = pcre2_match_context_create(NULL);
    int rc = ENG_ENOMEM;
    *ends = NULL;
    *n_words = 0;
    snprintf(err, errlen, "tokenizer: out of memory");
    if (!mc)
        return rc;
    if (len == 0) {
        pcre2_match_context_free(mc);
        return ENG_OK;
    }
    /* fragments are kept as their end offsets: fragment k is
     * [k ? ends[k-1] : 0, ends[k]) */
    if (bvec_push(&cur, len) < 0)
        goto out;
    for (unsigned r = 0; r < p->n_re; r++) {
        size_t start = 0;
        if (md)
            pcre2_match_data_free(md);
        md = pcre2_match_data_create_from_pattern(p->re[r], NULL);
        if (!md)
            goto out;
        nxt.n = 0;
        for (size_t f = 0; f < cur.n; f++) {
            const char *subj = text + start;
            size_t flen = cur.v[f] - start, pos = 0, last = 0, ms, me;
            while (pos <= flen) {
                int m = next_match(p, r, subj, flen, pos, start, md, mc, &ms, &me, err,
                                   errlen);
                if (m < 0) {
                    rc = m;
                    goto out;
                }
                if (m == 0)
                    break;
                if (me == ms) {
                    /* an empty match adds nothing: step over a character */
                    if (ms >= flen)
                        break;
                    pos = ms + u8len((unsigned char)subj[ms]);
                    continue;
                }
                if (ms > last && bvec_push(&nxt, start + ms) < 0)
                    goto out;
                if (bvec_push(&nxt, start + me) < 0)
                    goto out;
                last = pos = me;
            }
            if (last < flen && bvec_push(&nxt, start + flen) < 0)
                goto out;
            start = cur.v[f];
        }
        {
            bvec t = cur;
            cur = nxt;
            nxt = t;
        }
    }
    *ends = cur.v;
    *n_words = cur.n;
    cur.v = NULL;
    rc = ENG_OK;
out:
    if (md)
        pcre2_match_data_free(md);
    pcre2_match_context_free(mc);
    free(cur.v);
    free(nxt.v);
    return rc;
}
