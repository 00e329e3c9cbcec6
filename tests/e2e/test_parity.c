/*
 * test_parity.c — end to end: convert the shared models with the real
 * `cflow convert`, generate with the real `cflow run`, and compare with what
 * the peers (llama2.c run.c, llama.cpp) produced on the same weights.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <ctype.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "testutil.h"

static void convert(const char *in, const char *tok, const char *out)
{
    tu_proc p;
    tu_require(in);
    if (tok)
        assert_int_equal(tu_cflow_run(&p, "convert", "--tokenizer", tok, in, out, NULL), 0);
    else
        assert_int_equal(tu_cflow_run(&p, "convert", in, out, NULL), 0);
    if (p.status != 0)
        fprintf(stderr, "convert %s failed: %s\n", in, p.err);
    assert_int_equal(p.status, 0);
    tu_proc_free(&p);
}

/* Must show 1: llama2.c's own test, byte for byte. */
static void test_llama2c_200(void **state)
{
    (void)state;
    const char *out = tu_tmp("stories260K-f32.cflow");
    convert(tu_shared("models/stories260K.bin"), tu_shared("models/tok512.bin"), out);
    char *want = tu_read_file(tu_shared("models/expected/stories260K-llama2c-test-200.txt"), NULL);
    assert_non_null(want);
    tu_proc p;
    /* 200 positions from BOS: run.c forwards 200 times and prints the token
     * sampled after each, so 200 tokens are generated */
    assert_int_equal(tu_cflow_run(&p, "run", "-m", out, "--temp", "0", "-n", "200", NULL), 0);
    assert_int_equal(p.status, 0);
    if (strcmp(p.out, want)) {
        size_t i = 0;
        while (p.out[i] && p.out[i] == want[i])
            i++;
        fprintf(stderr, "llama2.c test-200: first difference at byte %zu\n got: %s\nwant: %s\n",
                i, p.out, want);
    } else {
        fprintf(stderr, "llama2.c test-200: all %zu bytes match\n", strlen(want));
    }
    assert_string_equal(p.out, want);
    free(want);
    tu_proc_free(&p);
}

static size_t strip_nl(char *s)
{
    size_t n = strlen(s);
    while (n && s[n - 1] == '\n')
        s[--n] = 0;
    return n;
}

/* Words of `want` fully reproduced at the start of `got` (a word counts
 * once the byte after it, or the end of `want`, is reached). */
static int words_matched(const char *got, const char *want, size_t *bytes)
{
    size_t i = 0;
    int words = 0;
    while (want[i] && got[i] == want[i]) {
        i++;
        if ((isspace((unsigned char)want[i]) || !want[i]) &&
            !isspace((unsigned char)want[i - 1]))
            words++;
    }
    *bytes = i;
    return words;
}

static int total_words(const char *s)
{
    int n = 0, in = 0;
    for (; *s; s++) {
        if (isspace((unsigned char)*s))
            in = 0;
        else if (!in)
            in = 1, n++;
    }
    return n;
}

/* extra: NULL, or one more option for cflow run (the --no-mmap load must
 * change nothing). */
static void gguf_parity(const char *variant, int need_words, const char *extra)
{
    char name[128], cpath[64];
    snprintf(name, sizeof name, "models/stories260K-%s.gguf", variant);
    snprintf(cpath, sizeof cpath, "stories260K-%s.cflow", variant);
    const char *out = tu_tmp(cpath);
    char outp[4096];
    snprintf(outp, sizeof outp, "%s", out);
    convert(tu_shared(name), NULL, outp);

    char *jl = tu_read_file(tu_shared("models/expected/stories260K-greedy.jsonl"), NULL);
    assert_non_null(jl);
    int checked = 0;
    char *save = NULL;
    for (char *line = strtok_r(jl, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        json_object *o = json_tokener_parse(line), *v;
        assert_non_null(o);
        const char *peer = json_object_object_get_ex(o, "peer", &v) ? json_object_get_string(v) : "";
        const char *model = json_object_object_get_ex(o, "model", &v) ? json_object_get_string(v) : "";
        if (strcmp(peer, "llama.cpp") || strcmp(model, name + strlen("models/"))) {
            json_object_put(o);
            continue;
        }
        const char *prompt = json_object_get_string(json_object_object_get(o, "prompt"));
        int n_predict = json_object_get_int(json_object_object_get(o, "n_predict"));
        char *want = strdup(json_object_get_string(json_object_object_get(o, "continuation")));
        char nbuf[16];
        snprintf(nbuf, sizeof nbuf, "%d", n_predict);
        tu_proc p;
        assert_int_equal(tu_cflow_run(&p, "run", "-m", outp, "-p", prompt, "--temp", "0", "-n", nbuf,
                                      extra, NULL), 0);
        assert_int_equal(p.status, 0);
        strip_nl(want);
        strip_nl(p.out);
        size_t bytes;
        int w = words_matched(p.out, want, &bytes);
        int tw = total_words(want);
        fprintf(stderr, "%-5s %-20s matches llama.cpp for %zu/%zu bytes, %d/%d words%s\n",
                variant, prompt, bytes, strlen(want), w, tw,
                strcmp(p.out, want) ? "" : " (identical)");
        if (need_words < 0) {
            if (strcmp(p.out, want))
                fprintf(stderr, " got: %s\nwant: %s\n", p.out, want);
            assert_string_equal(p.out, want);
        } else {
            assert_true(w >= (need_words < tw ? need_words : tw));
        }
        checked++;
        free(want);
        tu_proc_free(&p);
        json_object_put(o);
    }
    assert_true(checked >= 2);
    free(jl);
}

/* Must show 2: llama.cpp's greedy continuations, to the end, for every
 * variant.  The quantised ones need llama.cpp's own roundings throughout
 * (f16 KV cache with its flash attention, its x86 Q8_0 activation
 * quantiser and dot products, ggml's RMSNorm/RoPE/SwiGLU): with run.c's
 * arithmetic Q4_0 "Lily and Ben" parted after 18 words. */
static void test_gguf_f32(void **s) { (void)s; gguf_parity("f32", -1, NULL); }
static void test_gguf_f16(void **s) { (void)s; gguf_parity("f16", -1, NULL); }
static void test_gguf_q8_0(void **s) { (void)s; gguf_parity("q8_0", -1, NULL); }
static void test_gguf_q4_0(void **s)
{
    (void)s;
    gguf_parity("q4_0", -1, NULL);
    gguf_parity("q4_0", -1, "--no-mmap");
}

/* The KV precision follows the model's peer: f16 (llama.cpp's default) for
 * a model converted from GGUF, f32 (run.c) for a llama2.c checkpoint, and
 * eng_opts.kv_f16 overrides it. */
static void test_kv_precision(void **state)
{
    (void)state;
    char gg[4096], l2[4096], err[512];
    snprintf(gg, sizeof gg, "%s", tu_tmp("stories260K-q8_0-kv.cflow"));
    snprintf(l2, sizeof l2, "%s", tu_tmp("stories260K-l2c-kv.cflow"));
    convert(tu_shared("models/stories260K-q8_0.gguf"), NULL, gg);
    convert(tu_shared("models/stories260K.bin"), tu_shared("models/tok512.bin"), l2);
    static const struct { const char *which; int opt, want_gg, want_l2; } cases[] = {
        { "auto", -1, 1, 0 }, { "f32", 0, 0, 0 }, { "f16", 1, 1, 1 },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int m = 0; m < 2; m++) {
            eng_session *s = NULL;
            eng_opts o;
            eng_opts_default(&o);
            assert_int_equal(o.kv_f16, -1);
            o.kv_f16 = cases[c].opt;
            o.n_ctx = 32;
            int rc = eng_open(&s, m ? l2 : gg, &o, err, sizeof err);
            if (rc)
                fprintf(stderr, "%s\n", err);
            assert_int_equal(rc, 0);
            assert_int_equal(eng_kv_f16(s), m ? cases[c].want_l2 : cases[c].want_gg);
            /* either cache decodes: a few greedy steps with finite logits */
            int32_t tok = eng_tok_bos(eng_tokenizer(s));
            for (int step = 0; step < 4; step++) {
                assert_int_equal(eng_decode(s, tok, err, sizeof err), 0);
                const float *lg = eng_logits(s);
                int32_t best = 0;
                for (uint32_t i = 0; i < eng_hparams(s)->vocab_size; i++) {
                    assert_true(isfinite(lg[i]));
                    if (lg[i] > lg[best])
                        best = (int32_t)i;
                }
                tok = best;
            }
            eng_close(s);
        }
    /* eng_open without options: the defaults, so auto */
    eng_session *s = NULL;
    assert_int_equal(eng_open(&s, gg, NULL, err, sizeof err), 0);
    assert_int_equal(eng_kv_f16(s), 1);
    eng_close(s);
}

/* llama2.c's continuations of a prompt (prompt + continuation, `steps`
 * positions in all). */
static void test_llama2c_prompts(void **state)
{
    (void)state;
    const char *model = tu_tmp("stories260K-f32.cflow");
    char mp[4096];
    snprintf(mp, sizeof mp, "%s", model);
    convert(tu_shared("models/stories260K.bin"), tu_shared("models/tok512.bin"), mp);
    char *jl = tu_read_file(tu_shared("models/expected/stories260K-greedy.jsonl"), NULL);
    assert_non_null(jl);
    int checked = 0;
    char *save = NULL;
    for (char *line = strtok_r(jl, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        json_object *o = json_tokener_parse(line), *v;
        assert_non_null(o);
        if (!json_object_object_get_ex(o, "peer", &v) || strcmp(json_object_get_string(v), "llama2.c")) {
            json_object_put(o);
            continue;
        }
        const char *prompt = json_object_get_string(json_object_object_get(o, "prompt"));
        const char *text = json_object_get_string(json_object_object_get(o, "text"));
        int steps = json_object_get_int(json_object_object_get(o, "steps"));
        /* prompt tokens with BOS */
        tu_proc p;
        assert_int_equal(tu_cflow_run(&p, "tokenize", "-m", mp, "--bos", prompt, NULL), 0);
        assert_int_equal(p.status, 0);
        int n_prompt = 0;
        for (char *q = strtok(p.out, " \n"); q; q = strtok(NULL, " \n"))
            n_prompt++;
        tu_proc_free(&p);
        char nbuf[16];
        snprintf(nbuf, sizeof nbuf, "%d", steps - n_prompt + 1); /* run.c prints a token per forward after the prompt */
        assert_int_equal(tu_cflow_run(&p, "run", "-m", mp, "-p", prompt, "--temp", "0", "-n", nbuf, NULL),
                         0);
        assert_int_equal(p.status, 0);
        size_t pl = strlen(prompt);
        assert_memory_equal(text, prompt, pl);
        if (strcmp(p.out, text + pl))
            fprintf(stderr, "llama2.c '%s':\n got: %s\nwant: %s\n", prompt, p.out, text + pl);
        else
            fprintf(stderr, "llama2.c %-20s identical (%zu bytes)\n", prompt, strlen(text + pl));
        assert_string_equal(p.out, text + pl);
        checked++;
        tu_proc_free(&p);
        json_object_put(o);
    }
    assert_true(checked >= 2);
    free(jl);
}

/* Must show 4: the random-weight Llama-2 fixture converts and runs with
 * finite logits. */
static void test_tiny_random(void **state)
{
    (void)state;
    const char *out = tu_tmp("tiny-random.cflow");
    char op[4096];
    snprintf(op, sizeof op, "%s", out);
    convert(tu_shared("models/llama-2-tiny-random.gguf"), NULL, op);
    eng_session *s = NULL;
    char err[512];
    eng_opts o;
    eng_opts_default(&o);
    o.n_ctx = 64;
    int rc = eng_open(&s, op, &o, err, sizeof err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, 0);
    const eng_tok *tok = eng_tokenizer(s);
    assert_int_equal(eng_tok_n_vocab(tok), 32000);
    int32_t ids[64];
    size_t n = 0;
    assert_int_equal(eng_tok_encode(tok, "Hello world", 11, 1, 0, ids, 64, &n), 0);
    assert_true(n >= 2 && ids[0] == eng_tok_bos(tok));
    assert_int_equal(eng_prefill(s, ids, n, err, sizeof err), 0);
    for (int step = 0; step < 8; step++) {
        float *lg = eng_logits(s);
        int32_t best = 0;
        for (uint32_t i = 0; i < eng_hparams(s)->vocab_size; i++) {
            assert_true(isfinite(lg[i]));
            if (lg[i] > lg[best])
                best = (int32_t)i;
        }
        assert_int_equal(eng_decode(s, best, err, sizeof err), 0);
    }
    eng_close(s);

    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "run", "-m", op, "-p", "Hello", "-n", "8", "--temp", "0", NULL), 0);
    assert_int_equal(p.status, 0);
    tu_proc_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama2c_200),
        cmocka_unit_test(test_llama2c_prompts),
        cmocka_unit_test(test_gguf_f32),
        cmocka_unit_test(test_gguf_f16),
        cmocka_unit_test(test_gguf_q8_0),
        cmocka_unit_test(test_gguf_q4_0),
        cmocka_unit_test(test_kv_precision),
        cmocka_unit_test(test_tiny_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
