/*
 * test_tok.c — the tokenizer against llama.cpp's vocabulary test vectors,
 * llama2.c's encoder, and the streaming detokeniser's UTF-8 guarantees
 * (Hugging Face tokenizer files: test_tok_hf.c, the same program).
 *
 * Vectors: shared/tokenizer-tests/<vocab>.gguf.inp holds strings separated
 * by "\n__ggml_vocab_test__\n" (the file ends with the separator, so the
 * last string has no trailing newline: llama.cpp's test-tokenizer-0 splits
 * the same way); <vocab>.gguf.out holds one line of ids per string, made
 * with add_special = false, parse_special = false.  Every string of every
 * vocabulary must match exactly.
 */
#include "config.h"

#include "tok_test.h"

/* ---- llama.cpp's vectors, GGUF vocabularies ---------------------------- */
static void gguf_vectors(const char *vocab)
{
    char rel[256], inp[300], out[300];
    fmt_gguf *g = NULL;
    eng_tok *t;
    snprintf(rel, sizeof rel, "tokenizer-tests/ggml-vocab-%s.gguf", vocab);
    t = tt_load_gguf_tok(rel, &g);
    snprintf(inp, sizeof inp, "%s.inp", rel);
    snprintf(out, sizeof out, "%s.out", rel);
    tt_run_vectors(vocab, t, tu_shared(inp), tu_shared(out));
    eng_tok_free(t);
    fmt_gguf_close(g);
}

static void test_vocab_llama_spm(void **st) { (void)st; gguf_vectors("llama-spm"); }
static void test_vocab_phi_3(void **st) { (void)st; gguf_vectors("phi-3"); }
static void test_vocab_gpt_2(void **st) { (void)st; gguf_vectors("gpt-2"); }
static void test_vocab_falcon(void **st) { (void)st; gguf_vectors("falcon"); }
static void test_vocab_mpt(void **st) { (void)st; gguf_vectors("mpt"); }
static void test_vocab_starcoder(void **st) { (void)st; gguf_vectors("starcoder"); }
static void test_vocab_refact(void **st) { (void)st; gguf_vectors("refact"); }
static void test_vocab_deepseek_llm(void **st) { (void)st; gguf_vectors("deepseek-llm"); }
static void test_vocab_deepseek_coder(void **st) { (void)st; gguf_vectors("deepseek-coder"); }


/* ---- llama2.c tokenizer.bin -------------------------------------------- */
static void test_tok512_matches_gguf(void **st)
{
    fmt_kv *kv = fmt_kv_new();
    fmt_gguf *g;
    const fmt_kv *gk;
    char err[256];
    uint64_t n;
    (void)st;
    if (fmt_vocab_load(kv, tu_shared("models/tok512.bin"), err, sizeof err))
        fail_msg("%s", err);
    if (fmt_gguf_open(&g, tu_shared("models/stories260K-f32.gguf"), err,
                      sizeof err))
        fail_msg("%s", err);
    gk = fmt_gguf_kv(g);
    /* llama.cpp's converter made the GGUF from the same tokenizer.bin */
    tt_assert_kv_str(kv, "tokenizer.ggml.model", "llama");
    n = fmt_kv_arr_len(kv, "tokenizer.ggml.tokens");
    assert_int_equal(n, 512);
    assert_int_equal(fmt_kv_arr_len(gk, "tokenizer.ggml.tokens"), n);
    for (uint64_t i = 0; i < n; i++) {
        size_t la, lb;
        const char *a = fmt_kv_arr_str(kv, "tokenizer.ggml.tokens", i, &la);
        const char *b = fmt_kv_arr_str(gk, "tokenizer.ggml.tokens", i, &lb);
        float sa, sb;
        int32_t ta, tb;
        assert_true(a && b);
        if (la != lb || memcmp(a, b, la))
            fail_msg("token %llu: '%.*s' vs GGUF '%.*s'",
                     (unsigned long long)i, (int)la, a, (int)lb, b);
        assert_int_equal(fmt_kv_arr_f32(kv, "tokenizer.ggml.scores", i, &sa), 0);
        assert_int_equal(fmt_kv_arr_f32(gk, "tokenizer.ggml.scores", i, &sb), 0);
        assert_true(sa == sb);
        assert_int_equal(fmt_kv_arr_i32(kv, "tokenizer.ggml.token_type", i, &ta), 0);
        assert_int_equal(fmt_kv_arr_i32(gk, "tokenizer.ggml.token_type", i, &tb), 0);
        assert_int_equal(ta, tb);
    }
    fmt_gguf_close(g);
    fmt_kv_free(kv);
}

/* llama2.c run.c's tt_encode(), written out independently over the raw
 * tokenizer.bin (spaces as ' ', byte tokens at id byte + 3). */
typedef struct l2c {
    char  **s;
    float  *score;
    int     n;
} l2c;

static void l2c_load(l2c *v)
{
    size_t len, off = 4;
    char *d = tu_slurp(tu_shared("models/tok512.bin"), &len);
    v->s = calloc(1024, sizeof *v->s);
    v->score = calloc(1024, sizeof *v->score);
    v->n = 0;
    while (off + 8 <= len) {
        int32_t l;
        memcpy(&v->score[v->n], d + off, 4);
        memcpy(&l, d + off + 4, 4);
        off += 8;
        v->s[v->n] = strndup(d + off, (size_t)l);
        off += (size_t)l;
        v->n++;
    }
    free(d);
}

static int l2c_lookup(const l2c *v, const char *s)
{
    for (int i = 0; i < v->n; i++)
        if (!strcmp(v->s[i], s))
            return i;
    return -1;
}

static int l2c_encode(const l2c *v, const char *text, int *tok)
{
    int n = 0;
    char buf[64];
    size_t bl = 0;
    tok[n++] = 1;
    if (*text)
        tok[n++] = l2c_lookup(v, " ");
    for (const char *c = text; *c; c++) {
        if ((*c & 0xC0) != 0x80)
            bl = 0;
        buf[bl++] = *c;
        buf[bl] = 0;
        if ((c[1] & 0xC0) == 0x80 && bl < 4)
            continue;
        int id = l2c_lookup(v, buf);
        if (id != -1) {
            tok[n++] = id;
        } else {
            for (size_t i = 0; i < bl; i++)
                tok[n++] = (unsigned char)buf[i] + 3;
        }
        bl = 0;
    }
    for (;;) {
        float best = -1e10f;
        int best_id = -1, best_i = -1;
        for (int i = 0; i + 1 < n; i++) {
            char m[256];
            snprintf(m, sizeof m, "%s%s", v->s[tok[i]], v->s[tok[i + 1]]);
            int id = l2c_lookup(v, m);
            if (id != -1 && v->score[id] > best) {
                best = v->score[id];
                best_id = id;
                best_i = i;
            }
        }
        if (best_i == -1)
            break;
        tok[best_i] = best_id;
        for (int i = best_i + 1; i + 1 < n; i++)
            tok[i] = tok[i + 1];
        n--;
    }
    return n;
}

/* Decode ids with the streaming detokeniser, one id at a time. */
static char *detok_all(const eng_tok *t, const int32_t *ids, size_t n,
                       int32_t prev)
{
    size_t cap = 64 + n * (3 * eng_tok_max_piece(t) + 16), o = 0;
    char *out = malloc(cap + 1);
    eng_detok d;
    eng_detok_init(&d);
    d.prev = prev;
    assert_non_null(out);
    for (size_t i = 0; i < n; i++)
        o += eng_detok_push(&d, t, ids[i], out + o, cap - o);
    o += eng_detok_flush(&d, out + o, cap - o);
    out[o] = 0;
    return out;
}

static void test_tok512_runc(void **st)
{
    static const char *const prompts[] = {
        "Once upon a time", "Lily and Ben", "The cat sat on the mat.",
        "Tim had a big, red ball!  He said: \"Let's play.\"",
        "caf\xc3\xa9 \xe2\x80\x94 na\xc3\xafve \xf0\x9f\x98\x80 end", "a", " leading",
        "trailing ", "tab\there\nnew line",
    };
    eng_tok *t = tt_load_vocab_tok(tu_shared("models/tok512.bin"), NULL);
    l2c v;
    (void)st;
    l2c_load(&v);
    assert_int_equal(v.n, 512);
    assert_int_equal(eng_tok_bos(t), 1);
    assert_true(eng_tok_add_bos(t));
    for (size_t k = 0; k < sizeof prompts / sizeof *prompts; k++) {
        int want[512];
        int nw = l2c_encode(&v, prompts[k], want);
        size_t n;
        int32_t *got = tt_encode(t, prompts[k], strlen(prompts[k]), 1, 0, &n);
        char *back;
        if ((size_t)nw != n)
            fail_msg("\"%s\": %zu tokens, run.c gives %d", prompts[k], n, nw);
        for (int i = 0; i < nw; i++)
            if (got[i] != want[i])
                fail_msg("\"%s\": token %d is %d, run.c gives %d", prompts[k],
                         i, got[i], want[i]);
        /* and back: run.c's decode drops the space after BOS */
        back = detok_all(t, got, n, -1);
        assert_string_equal(back, prompts[k]);
        free(back);
        free(got);
    }
    {
        /* "Once upon a time" in tok512 is BOS, " Once", " upon", " a",
         * " time", looked up by text in the file itself */
        size_t n;
        int32_t *got = tt_encode(t, "Once upon a time", 16, 1, 0, &n);
        static const char *const words[] = {" Once", " upon", " a", " time"};
        assert_int_equal(n, 5);
        assert_int_equal(got[0], 1);
        for (int i = 0; i < 4; i++)
            assert_int_equal(got[i + 1], l2c_lookup(&v, words[i]));
        free(got);
    }
    for (int i = 0; i < v.n; i++)
        free(v.s[i]);
    free(v.s);
    free(v.score);
    eng_tok_free(t);
}

/* Corpus text round-trips through encode and the streaming decoder. */
static void test_roundtrip_corpus(void **st)
{
    static const char *const vocabs[] = {"models/tok512.bin", NULL};
    size_t len;
    char *corpus = tu_slurp(tu_shared("corpus/tinystories-valid-1000.txt"), &len);
    (void)st;
    if (len > 20000)
        corpus[20000] = 0;
    /* cut at a line end so no character is split */
    *strrchr(corpus, '\n') = 0;
    for (size_t k = 0; vocabs[k]; k++) {
        eng_tok *t = tt_load_vocab_tok(tu_shared(vocabs[k]), NULL);
        size_t n;
        int32_t *ids = tt_encode(t, corpus, strlen(corpus), 1, 0, &n);
        char *back = detok_all(t, ids, n, -1);
        assert_string_equal(back, corpus);
        free(back);
        free(ids);
        eng_tok_free(t);
    }
    {
        fmt_gguf *g;
        const char *rels[] = {"tokenizer-tests/ggml-vocab-gpt-2.gguf",
                              "tokenizer-tests/ggml-vocab-llama-spm.gguf",
                              "tokenizer-tests/ggml-vocab-deepseek-llm.gguf"};
        for (size_t k = 0; k < 3; k++) {
            eng_tok *t = tt_load_gguf_tok(rels[k], &g);
            size_t n;
            int32_t *ids = tt_encode(t, corpus, strlen(corpus), 1, 0, &n);
            char *back = detok_all(t, ids, n, -1);
            assert_string_equal(back, corpus);
            free(back);
            free(ids);
            eng_tok_free(t);
            fmt_gguf_close(g);
        }
    }
    free(corpus);
}

/* ---- streaming detokeniser --------------------------------------------- */
/* Is s[0..n) complete, valid UTF-8? */
static int utf8_complete(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i], need;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF)
            need = 1, cp = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF)
            need = 2, cp = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4)
            need = 3, cp = c & 0x07;
        else
            return 0;
        for (unsigned k = 1; k <= need; k++) {
            if (i + k >= n || (s[i + k] & 0xC0) != 0x80)
                return 0;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if ((need == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += need + 1;
    }
    return 1;
}

/* The id of the token whose text is text, from the vocabulary's kv. */
static int32_t kv_token(const fmt_kv *kv, const char *text)
{
    uint64_t n = fmt_kv_arr_len(kv, "tokenizer.ggml.tokens");
    for (uint64_t i = 0; i < n; i++) {
        size_t l;
        const char *s = fmt_kv_arr_str(kv, "tokenizer.ggml.tokens", i, &l);
        if (l == strlen(text) && !memcmp(s, text, l))
            return (int32_t)i;
    }
    fail_msg("no token '%s'", text);
    return -1;
}

static int32_t g_byte_id[256];

/* The <0xNN> token of byte b. */
static int32_t spm_byte(const eng_tok *t, unsigned b)
{
    (void)t;
    return g_byte_id[b];
}

static void test_detok_streaming(void **st)
{
    fmt_gguf *g;
    eng_tok *t = tt_load_gguf_tok("tokenizer-tests/ggml-vocab-llama-spm.gguf", &g);
    /* letters no Llama token covers: each byte is a <0xNN> token */
    const char *text = "\xf0\x9d\x94\x98\xf0\x9d\x94\xab \xe2\x82\xac\xe2\x82\xac "
                       "\xe1\x9a\xa0\xe1\x9a\xa2 \xf0\x9f\xa6\x99 ok";
    size_t n, total = 0, nbyte = 0;
    int32_t *ids;
    char acc[512];
    eng_detok d;
    (void)st;
    for (unsigned b = 0; b < 256; b++) {
        char nm[8];
        snprintf(nm, sizeof nm, "<0x%02X>", b);
        g_byte_id[b] = kv_token(fmt_gguf_kv(g), nm);
    }
    /* byte tokens of this vocabulary decode to their byte */
    for (unsigned b = 0; b < 256; b++) {
        size_t l;
        const char *p = eng_tok_piece(t, spm_byte(t, b), &l);
        assert_int_equal(l, 1);
        assert_int_equal((unsigned char)p[0], b);
    }
    ids = tt_encode(t, text, strlen(text), 1, 0, &n);
    for (size_t i = 0; i < n; i++) {
        size_t l;
        const char *p = eng_tok_piece(t, ids[i], &l);
        nbyte += l == 1 && ((unsigned char)p[0] & 0x80);
    }
    assert_true(nbyte >= 8); /* the test really splits characters */
    eng_detok_init(&d);
    for (size_t i = 0; i < n; i++) {
        char out[64];
        size_t k = eng_detok_push(&d, t, ids[i], out, sizeof out);
        /* what comes out is always whole characters */
        assert_true(utf8_complete((const unsigned char *)out, k));
        memcpy(acc + total, out, k);
        total += k;
        assert_true(utf8_complete((const unsigned char *)acc, total));
    }
    total += eng_detok_flush(&d, acc + total, sizeof acc - total);
    acc[total] = 0;
    assert_string_equal(acc, text);  /* BOS: leading space dropped */

    /* broken sequences become U+FFFD, never a partial character */
    {
        char out[64];
        size_t k;
        eng_detok_init(&d);
        assert_int_equal(eng_detok_push(&d, t, spm_byte(t, 0xE2), out, 64), 0);
        assert_int_equal(eng_detok_push(&d, t, spm_byte(t, 0x82), out, 64), 0);
        k = eng_detok_push(&d, t, spm_byte(t, 'x'), out, 64);
        assert_int_equal(k, 4);
        assert_memory_equal(out, "\xef\xbf\xbdx", 4);
        /* a lone continuation byte */
        k = eng_detok_push(&d, t, spm_byte(t, 0x80), out, 64);
        assert_int_equal(k, 3);
        assert_memory_equal(out, "\xef\xbf\xbd", 3);
        /* overlong C0 80: two invalid bytes */
        k = eng_detok_push(&d, t, spm_byte(t, 0xC0), out, 64);
        k += eng_detok_push(&d, t, spm_byte(t, 0x80), out + k, 64 - k);
        assert_int_equal(k, 6);
        /* an unfinished character at the end comes out on flush */
        assert_int_equal(eng_detok_push(&d, t, spm_byte(t, 0xF0), out, 64), 0);
        assert_int_equal(eng_detok_push(&d, t, spm_byte(t, 0x9F), out, 64), 0);
        k = eng_detok_flush(&d, out, 64);
        assert_int_equal(k, 3);
        assert_memory_equal(out, "\xef\xbf\xbd", 3);
        assert_int_equal(eng_detok_flush(&d, out, 64), 0);
    }
    free(ids);

    /* the space after BOS goes; elsewhere it stays */
    {
        char *s;
        ids = tt_encode(t, "Hello world", 11, 1, 0, &n);
        assert_int_equal(ids[0], eng_tok_bos(t));
        s = detok_all(t, ids, n, -1);
        assert_string_equal(s, "Hello world");
        free(s);
        s = detok_all(t, ids + 1, n - 1, -1);   /* no BOS before */
        assert_string_equal(s, " Hello world");
        free(s);
        s = detok_all(t, ids + 1, n - 1, eng_tok_bos(t));
        assert_string_equal(s, "Hello world");
        free(s);
        free(ids);
    }
    eng_tok_free(t);
    fmt_gguf_close(g);
}

/* ---- special tokens, flags, pieces ------------------------------------- */
static void test_special_and_pieces(void **st)
{
    fmt_gguf *g;
    eng_tok *t;
    size_t n, l;
    int32_t *ids, *ids2;
    const char *p;
    (void)st;
    /* SentencePiece: BOS by default, <s> recognised only when asked */
    t = tt_load_gguf_tok("tokenizer-tests/ggml-vocab-llama-spm.gguf", &g);
    assert_true(eng_tok_is_spm(t));
    assert_true(eng_tok_add_bos(t));
    assert_int_equal(eng_tok_eot(t), -1);
    ids = tt_encode(t, "<s>hi", 5, 0, 1, &n);
    assert_int_equal(ids[0], 1);
    free(ids);
    ids = tt_encode(t, "<s>hi", 5, 0, 0, &n);
    assert_int_not_equal(ids[0], 1);
    free(ids);
    ids = tt_encode(t, "", 0, 1, 0, &n);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 1);
    free(ids);
    ids = tt_encode(t, "", 0, 0, 0, &n);
    assert_int_equal(n, 0);
    free(ids);
    p = eng_tok_piece(t, 1, &l);
    assert_int_equal(l, 3);
    assert_memory_equal(p, "<s>", 3);
    assert_true(eng_tok_is_control(t, 1));
    assert_true(eng_tok_is_control(t, 0));  /* <unk> is never printed */
    assert_false(eng_tok_is_control(t, 100));
    assert_false(eng_tok_is_control(t, -1));
    assert_false(eng_tok_is_control(t, (int32_t)eng_tok_n_vocab(t)));
    p = eng_tok_piece(t, (int32_t)eng_tok_n_vocab(t), &l);
    assert_int_equal(l, 0);
    eng_tok_free(t);
    fmt_gguf_close(g);

    /* byte-level: no BOS unless the vocabulary asks, pieces are bytes */
    t = tt_load_gguf_tok("tokenizer-tests/ggml-vocab-gpt-2.gguf", &g);
    assert_false(eng_tok_is_spm(t));
    assert_false(eng_tok_add_bos(t));
    assert_int_equal(eng_tok_eot(t), 50256);
    ids = tt_encode(t, " world", 6, 1, 0, &n);
    assert_int_equal(n, 1);
    p = eng_tok_piece(t, ids[0], &l);
    assert_int_equal(l, 6);
    assert_memory_equal(p, " world", 6);
    free(ids);
    p = eng_tok_piece(t, 50256, &l);
    assert_int_equal(l, 13);
    assert_memory_equal(p, "<|endoftext|>", 13);
    ids = tt_encode(t, "a<|endoftext|>b", 15, 0, 1, &n);
    assert_int_equal(n, 3);
    assert_int_equal(ids[1], 50256);
    free(ids);
    /* invalid UTF-8 is encoded as U+FFFD, as llama.cpp does */
    ids = tt_encode(t, "x\xff" "y", 3, 0, 0, &n);
    ids2 = tt_encode(t, "x\xef\xbf\xbdy", 5, 0, 0, &n);
    {
        size_t n1;
        int32_t *a = tt_encode(t, "x\xff" "y", 3, 0, 0, &n1);
        assert_int_equal(n1, n);
        assert_memory_equal(a, ids2, n * sizeof *a);
        free(a);
    }
    free(ids);
    free(ids2);
    eng_tok_free(t);
    fmt_gguf_close(g);

    /* Phi-3: special tokens eat the white space after them */
    t = tt_load_gguf_tok("tokenizer-tests/ggml-vocab-phi-3.gguf", &g);
    assert_int_equal(eng_tok_eot(t), 32007);
    ids = tt_encode(t, "<|user|>  \nHello<|end|>", 23, 0, 1, &n);
    ids2 = tt_encode(t, "<|user|>Hello<|end|>", 20, 0, 1, &n);
    {
        size_t n1;
        int32_t *a = tt_encode(t, "<|user|>  \nHello<|end|>", 23, 0, 1, &n1);
        assert_int_equal(n1, n);
        assert_memory_equal(a, ids2, n * sizeof *a);
        assert_int_equal(a[0], 32010);
        assert_int_equal(a[n - 1], 32007);
        free(a);
    }
    free(ids);
    free(ids2);
    eng_tok_free(t);
    fmt_gguf_close(g);

    /* MPT: user-defined tokens (runs of spaces) split even without
     * parse_special */
    t = tt_load_gguf_tok("tokenizer-tests/ggml-vocab-mpt.gguf", &g);
    ids = tt_encode(t, "a    b", 6, 0, 0, &n);
    {
        int found = 0;
        for (size_t i = 0; i < n; i++) {
            p = eng_tok_piece(t, ids[i], &l);
            found |= l == 4 && !memcmp(p, "    ", 4);
        }
        assert_true(found);
    }
    free(ids);
    eng_tok_free(t);
    fmt_gguf_close(g);
}

/* ---- a long text ------------------------------------------------------ */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* 64 KiB of stories through an SPM and a BPE vocabulary: a plausible count
 * and the text back.  The time is printed, not asserted (tests check
 * correctness; an encoder gone quadratic shows in this suite's wall time
 * and in the tok fuzz target's executions a second). */
static void test_encode_long(void **st)
{
    size_t len, n;
    char *corpus = tu_slurp(tu_shared("corpus/tinystories-valid-1000.txt"), &len);
    fmt_gguf *g;
    const char *rels[] = {"tokenizer-tests/ggml-vocab-llama-spm.gguf",
                          "tokenizer-tests/ggml-vocab-deepseek-llm.gguf"};
    (void)st;
    if (len > 65536)
        corpus[65536] = 0;
    *strrchr(corpus, '\n') = 0;     /* cut at a line end: no character split */
    len = strlen(corpus);
    for (size_t k = 0; k < 2; k++) {
        eng_tok *t = tt_load_gguf_tok(rels[k], &g);
        double t0 = now_s();
        int32_t *ids = tt_encode(t, corpus, len, 1, 0, &n);
        printf("  %s: %zu bytes -> %zu tokens in %.1f ms (encoded twice)\n", rels[k], len, n,
               (now_s() - t0) * 1e3);
        assert_true(n > len / 8 && n < len);
        char *back = detok_all(t, ids, n, -1);
        assert_string_equal(back, corpus);
        free(back);
        free(ids);
        eng_tok_free(t);
        fmt_gguf_close(g);
    }
    free(corpus);
}

/* ---- buffers of the real count, bounded work --------------------------- */
/* eng_tok_encode_alloc gives what eng_tok_encode counts, inside the stated
 * bounds, and with a maximum stops early: refused from the length alone,
 * or a few ids past the maximum, never the whole text. */
static void test_encode_alloc_bounds(void **st)
{
    static const char *const texts[] = {
        "", " ", "     ", "Hello world", "a\xff\xfe b", "\xf0\x80\x80\xc1 x",
        "<s> </s> <|endoftext|>", "\xe2\x96\x81\xe2\x96\x81 \t\n\n  12345 67",
    };
    const char *rels[] = {"tokenizer-tests/ggml-vocab-llama-spm.gguf",
                          "tokenizer-tests/ggml-vocab-gpt-2.gguf"};
    char err[256];
    (void)st;
    for (size_t k = 0; k < 2; k++) {
        fmt_gguf *g;
        eng_tok *t = tt_load_gguf_tok(rels[k], &g);
        for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
            for (int sp = 0; sp < 2; sp++) {
                size_t len = strlen(texts[i]), n = 0, n2 = 0;
                int32_t *ids = NULL, one[1];
                assert_int_equal(eng_tok_encode(t, texts[i], len, sp, sp, one, 1, &n), 0);
                assert_int_equal(eng_tok_encode_alloc(t, texts[i], len, sp, sp, 0, 2, &ids,
                                                      &n2, err, sizeof err), 0);
                assert_int_equal(n2, n);
                assert_true(eng_tok_count_min(t, len) <= n);
                assert_true(n <= eng_tok_count_max(t, len));
                ids[n] = ids[n + 1] = 0;   /* the room asked for */
                free(ids);
            }
        /* 1 MB of words: refused from its length, nothing allocated */
        size_t big = 1 << 20, n = 0;
        char *text = malloc(big);
        assert_non_null(text);
        for (size_t i = 0; i < big; i++)
            text[i] = i % 3 == 2 ? ' ' : 'a' + (char)(i % 7);
        int32_t *ids = (int32_t *)1;
        assert_int_equal(eng_tok_encode_alloc(t, text, big, 1, 0, 128, 0, &ids, &n, err,
                                              sizeof err), ENG_ECTX);
        assert_null(ids);
        assert_true(n > 128);
        assert_non_null(strstr(err, "more than 128"));
        /* a text the length lets through stops a few ids past the maximum */
        size_t len = 4 * 128 * 2;
        assert_true(eng_tok_count_min(t, len) <= 128);
        assert_int_equal(eng_tok_encode_alloc(t, text, len, 1, 0, 128, 0, &ids, &n, err,
                                              sizeof err), ENG_ECTX);
        printf("  %s: %zu bytes, more than 128 ids: stopped at %zu\n", rels[k], len, n);
        assert_true(n > 128);
        if (!eng_tok_is_spm(t))     /* BPE stops word by word */
            assert_true(n <= 128 + 8);
        free(text);
        eng_tok_free(t);
        fmt_gguf_close(g);
    }
}

/* ---- bad files --------------------------------------------------------- */
static void test_vocab_errors(void **st)
{
    static const char *const files[] = {"tokenizer.bin", "bad.json",
                                        "tokenizer.json", NULL};
    const char *dir = tt_tmpdir();
    char err[512], p[512];
    fmt_kv *kv = fmt_kv_new();
    FILE *f;
    int32_t hdr[3] = {7, 0, 100};
    (void)st;
    assert_int_equal(fmt_vocab_load(kv, "/nonexistent/tok.bin", err, sizeof err),
                     FMT_EIO);
    assert_non_null(strstr(err, "/nonexistent/tok.bin"));
    assert_null(strchr(err, '\n'));
    /* a folder without tokenizer files */
    assert_int_equal(fmt_vocab_load(kv, dir, err, sizeof err), FMT_EFORMAT);
    assert_non_null(strstr(err, dir));
    /* a token whose length runs past the end */
    snprintf(p, sizeof p, "%s/tokenizer.bin", dir);
    f = fopen(p, "wb");
    assert_non_null(f);
    fwrite(hdr, 4, 3, f);
    fwrite("abc", 1, 3, f);
    fclose(f);
    assert_int_equal(fmt_vocab_load(kv, p, err, sizeof err), FMT_EFORMAT);
    assert_non_null(strstr(err, "tokenizer.bin"));
    /* malformed JSON */
    tt_write_text(dir, "bad.json", "{\"model\": {\"type\": \"BPE\", ");
    snprintf(p, sizeof p, "%s/bad.json", dir);
    assert_int_equal(fmt_vocab_load(kv, p, err, sizeof err), FMT_EFORMAT);
    assert_non_null(strstr(err, "bad.json"));
    /* a model type we do not read */
    tt_write_text(dir, "tokenizer.json",
               "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}");
    assert_int_equal(fmt_vocab_load(kv, dir, err, sizeof err), FMT_EUNSUP);
    assert_non_null(strstr(err, "tokenizer.json"));
    /* a merge naming tokens that are not in the vocabulary is harmless,
     * an id twice is not */
    tt_write_text(dir, "tokenizer.json",
               "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0},"
               " \"merges\": []}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}");
    assert_int_equal(fmt_vocab_load(kv, dir, err, sizeof err), FMT_EFORMAT);
    assert_non_null(strstr(err, "id 0"));
    /* the engine refuses a kv without a vocabulary */
    {
        eng_tok *t = NULL;
        fmt_kv *e = fmt_kv_new();
        assert_int_equal(eng_tok_load(&t, e, err, sizeof err), ENG_EFORMAT);
        assert_null(t);
        fmt_kv_set_str(e, "tokenizer.ggml.model", "bert", 4);
        assert_int_equal(eng_tok_load(&t, e, err, sizeof err), ENG_EUNSUP);
        fmt_kv_free(e);
    }
    fmt_kv_free(kv);
    tt_rm_dir(dir, files);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vocab_llama_spm),
        cmocka_unit_test(test_vocab_phi_3),
        cmocka_unit_test(test_vocab_gpt_2),
        cmocka_unit_test(test_vocab_falcon),
        cmocka_unit_test(test_vocab_mpt),
        cmocka_unit_test(test_vocab_starcoder),
        cmocka_unit_test(test_vocab_refact),
        cmocka_unit_test(test_vocab_deepseek_llm),
        cmocka_unit_test(test_vocab_deepseek_coder),
        cmocka_unit_test(test_vocab_qwen2_hf),
        cmocka_unit_test(test_vocab_qwen2_tokenizer_json),
        cmocka_unit_test(test_vocab_spm_tokenizer_json),
        cmocka_unit_test(test_tok512_matches_gguf),
        cmocka_unit_test(test_tok512_runc),
        cmocka_unit_test(test_roundtrip_corpus),
        cmocka_unit_test(test_detok_streaming),
        cmocka_unit_test(test_special_and_pieces),
        cmocka_unit_test(test_encode_long),
        cmocka_unit_test(test_vocab_errors),
        cmocka_unit_test(test_encode_alloc_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
