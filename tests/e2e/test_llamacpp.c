/*
 * test_llamacpp.c — issue 3, must show 4: a Mixtral-style GGUF, converted,
 * gives llama.cpp's greedy tokens.
 *
 * llama.cpp is never built here.  It ran once on the very GGUF this test
 * regenerates (`cflow synth --gguf tiny-mixtral`, deterministic), and its
 * prompt and generated token ids are recorded in
 * tests/data/llamacpp/<case>.txt; tests/data/llamacpp/README.md gives the
 * exact commands.  The test
 *   1. regenerates the GGUF and checks it is byte for byte the file
 *      llama.cpp ran (FNV-1a 64 of the whole file, recorded beside the ids);
 *   2. converts it with `cflow convert` (Q4_0 blocks copied bit-exactly);
 *   3. tokenises the prompt and decodes greedily through the engine (first
 *      maximum wins ties, as llama.cpp's greedy sampler), comparing every
 *      prompt and generated id with llama.cpp's;
 *   4. runs `cflow run --temp 0` as a user would and checks its stdout is
 *      the text of llama.cpp's ids.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "testutil.h"

typedef struct rec {
    char     preset[64], vocab[256], prompt[256], seed[32];
    uint64_t fnv;
    int32_t  prompt_ids[64], gen_ids[256];
    size_t   n_prompt, n_gen;
} rec;

static size_t parse_ids(const char *s, int32_t *out, size_t cap)
{
    size_t n = 0;
    char *end;
    for (;;) {
        long v = strtol(s, &end, 10);
        if (end == s || n == cap)
            break;
        out[n++] = (int32_t)v;
        s = end;
    }
    return n;
}

static void load_rec(const char *name, rec *r)
{
    char path[4096];
    const char *src = getenv("CFLOW_SRCDIR");
    snprintf(path, sizeof path, "%s/tests/data/llamacpp/%s.txt", src ? src : ".", name);
    char *txt = tu_read_file(path, NULL);
    if (!txt)
        fprintf(stderr, "cannot read %s\n", path);
    assert_non_null(txt);
    memset(r, 0, sizeof *r);
    for (char *save = NULL, *ln = strtok_r(txt, "\n", &save); ln;
         ln = strtok_r(NULL, "\n", &save)) {
        char *colon = strchr(ln, ':');
        if (ln[0] == '#' || !colon)
            continue;
        *colon = '\0';
        const char *v = colon + 1 + (colon[1] == ' ');
        if (!strcmp(ln, "preset"))
            snprintf(r->preset, sizeof r->preset, "%s", v);
        else if (!strcmp(ln, "vocab"))
            snprintf(r->vocab, sizeof r->vocab, "%s", v);
        else if (!strcmp(ln, "seed"))
            snprintf(r->seed, sizeof r->seed, "%s", v);
        else if (!strcmp(ln, "prompt"))
            snprintf(r->prompt, sizeof r->prompt, "%s", v);
        else if (!strcmp(ln, "gguf_fnv64"))
            r->fnv = strtoull(v, NULL, 16);
        else if (!strcmp(ln, "prompt_ids"))
            r->n_prompt = parse_ids(v, r->prompt_ids, 64);
        else if (!strcmp(ln, "generated_ids"))
            r->n_gen = parse_ids(v, r->gen_ids, 256);
    }
    free(txt);
    assert_true(r->preset[0] && r->vocab[0] && r->prompt[0] && r->fnv);
    assert_true(r->n_prompt > 0);
    assert_true(r->n_gen >= 16);   /* the issue asks for at least 16 */
}

static uint64_t fnv64_file(const char *path)
{
    size_t n;
    char *b = tu_read_file(path, &n);
    assert_non_null(b);
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)b[i];
        h *= 0x100000001b3ull;
    }
    free(b);
    return h;
}

static void check_case(const char *name)
{
    rec r;
    tu_proc p;
    char err[512];
    load_rec(name, &r);
    const char *vocab = tu_shared(r.vocab);
    tu_require(vocab);
    char gguf[4096], model[4096];
    snprintf(gguf, sizeof gguf, "%s", tu_tmp("llamacpp.gguf"));
    snprintf(model, sizeof model, "%s", tu_tmp("llamacpp.cflow"));

    /* 1: the same file llama.cpp ran */
    assert_int_equal(tu_cflow_run(&p, "synth", "--gguf", "--vocab", vocab, "--seed",
                                  r.seed, r.preset, gguf, (char *)NULL), 0);
    if (p.status)
        fprintf(stderr, "%s", p.err);
    assert_int_equal(p.status, 0);
    tu_proc_free(&p);
    uint64_t h = fnv64_file(gguf);
    if (h != r.fnv)
        fprintf(stderr, "%s: regenerated GGUF differs from the one llama.cpp ran "
                "(fnv64 %016llx, recorded %016llx)\n", name, (unsigned long long)h,
                (unsigned long long)r.fnv);
    assert_true(h == r.fnv);

    /* 2: convert */
    assert_int_equal(tu_cflow_run(&p, "convert", gguf, model, (char *)NULL), 0);
    if (p.status)
        fprintf(stderr, "%s", p.err);
    assert_int_equal(p.status, 0);
    tu_proc_free(&p);

    /* 3: token for token through the engine */
    eng_opts o;
    eng_session *s = NULL;
    eng_opts_default(&o);
    o.n_threads = 2;
    if (eng_open(&s, model, &o, err, sizeof err))
        fprintf(stderr, "%s\n", err);
    assert_non_null(s);
    const eng_tok *tok = eng_tokenizer(s);
    int32_t ids[64];
    size_t n = 0;
    assert_int_equal(eng_tok_encode(tok, r.prompt, strlen(r.prompt), 1, 1, ids, 64, &n), 0);
    assert_int_equal(n, r.n_prompt);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(ids[i], r.prompt_ids[i]);
    assert_int_equal(eng_prefill(s, ids, n, err, sizeof err), 0);
    uint32_t nv = eng_hparams(s)->vocab_size;
    size_t agree = 0;
    for (size_t k = 0; k < r.n_gen; k++) {
        const float *lg = eng_logits(s);
        int32_t best = 0;
        for (uint32_t v = 1; v < nv; v++)
            if (lg[v] > lg[best])
                best = (int32_t)v;
        if (best != r.gen_ids[k]) {
            fprintf(stderr, "%s: token %zu: cflow %d, llama.cpp %d (after %zu equal)\n",
                    name, k, best, r.gen_ids[k], agree);
            break;
        }
        agree++;
        assert_int_equal(eng_decode(s, best, err, sizeof err), 0);
    }
    eng_close(s);
    assert_int_equal(agree, r.n_gen);

    /* 4: `cflow run` prints the text of those ids */
    char nbuf[16];
    snprintf(nbuf, sizeof nbuf, "%zu", r.n_gen);
    assert_int_equal(tu_cflow_run(&p, "run", "-m", model, "-p", r.prompt, "-n", nbuf,
                                  "--temp", "0", "--no-log", "--ignore-eos",
                                  (char *)NULL), 0);
    assert_int_equal(p.status, 0);
    /* expected text: the pieces of llama.cpp's ids, detokenised */
    eng_tok *t2 = NULL;
    fmt_model *fm = NULL;
    assert_int_equal(fmt_model_open(&fm, model, err, sizeof err), 0);
    assert_int_equal(eng_tok_load(&t2, fmt_model_kv(fm), err, sizeof err), 0);
    size_t cap = r.n_gen * 3 * (eng_tok_max_piece(t2) + 4) + 64, len = 0;
    char *want = malloc(cap);
    assert_non_null(want);
    eng_detok d;
    eng_detok_init(&d);
    d.prev = r.prompt_ids[r.n_prompt - 1];
    for (size_t k = 0; k < r.n_gen; k++)
        if (!eng_tok_is_control(t2, r.gen_ids[k]))
            len += eng_detok_push(&d, t2, r.gen_ids[k], want + len, cap - len);
    len += eng_detok_flush(&d, want + len, cap - len);
    want[len] = '\0';
    if (strcmp(p.out, want))
        fprintf(stderr, "cflow run printed\n[%s]\nwanted\n[%s]\n", p.out, want);
    assert_string_equal(p.out, want);
    free(want);
    eng_tok_free(t2);
    fmt_model_close(fm);
    tu_proc_free(&p);
}

static void test_tiny_mixtral(void **state)
{
    (void)state;
    check_case("tiny-mixtral");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_mixtral),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
