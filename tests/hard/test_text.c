/*
 * test_text.c — hostile text: prompts, prompt files and corpora.
 *
 * The real binary reads each input (`cflow run`, `ppl`, `tokenize`) and
 * must either take it whole or refuse it in one line naming the file and
 * what is wrong, exit status 1 — never crash, block, cut the text short or
 * work through all of it before a refusal it could see coming:
 *
 *   - token buffers: a vocabulary in which no piece holds a space makes
 *     every space three byte tokens (U+2581 has no token), more tokens than
 *     bytes; run, ppl and tokenize size their buffers from the real count;
 *   - NUL bytes in a prompt file or a corpus are refused with their offset;
 *   - a FIFO, a directory or a character device (/dev/zero) as prompt file
 *     or corpus is refused before any open that could block, a file over
 *     the cap with the cap;
 *   - a tokenizer that cannot load is named once, by its key;
 *   - a prompt far longer than the context is refused from its length,
 *     before the pre-tokenizer's expression (one that backtracks over runs
 *     of spaces) goes through it; an expression that backtracks without
 *     bound is stopped with an error that says so.
 *
 * Models: the llama2.c seed of the fuzz corpus (context 16) with its
 * tokenizer.bin rewritten, and the Hugging Face seed (context 64) with its
 * tokenizer.json's pre-tokenizer or merges replaced, both converted by the
 * real `cflow convert`.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "hard.h"

static void save(const char *path, const void *p, size_t n)
{
    assert_int_equal(tu_write_file(path, p, n), 0);
}

/* Run and expect exit 0. */
static void expect_ok(tu_proc *p, const char *const *args)
{
    hard_run(p, 120, args);
    assert_true(tu_ok(p, args[0]));
}

/* ---- the models ------------------------------------------------------- */

/* tokenizer.bin (max_token_length, then score, length, bytes per token)
 * with every piece that holds a space renamed "Q<id>". */
static void spaceless_tokenizer(const char *from, const char *to)
{
    size_t n, o = 4;
    unsigned char *t = (unsigned char *)tu_read_file(from, &n);
    assert_non_null(t);
    unsigned char *out = malloc(n + 4096);
    assert_non_null(out);
    memcpy(out, t, 4);
    size_t w = 4;
    for (int id = 0; o + 8 <= n; id++) {
        int32_t len;
        memcpy(&len, t + o + 4, 4);
        assert_true(len >= 0 && o + 8 + (size_t)len <= n);
        memcpy(out + w, t + o, 4);                       /* score */
        if (memchr(t + o + 8, ' ', (size_t)len)) {
            char name[16];
            int32_t nl = snprintf(name, sizeof name, "Q%d", id);
            memcpy(out + w + 4, &nl, 4);
            memcpy(out + w + 8, name, (size_t)nl);
            w += 8 + (size_t)nl;
        } else {
            memcpy(out + w + 4, t + o + 4, 4 + (size_t)len);
            w += 8 + (size_t)len;
        }
        o += 8 + (size_t)len;
    }
    save(to, out, w);
    free(out);
    free(t);
}

static char spm_model[4096], spm_vocab[4096];

/* The llama2.c seed with a tokenizer in which no piece holds a space. */
static int make_spm(void **state)
{
    (void)state;
    const char *dir = tu_tmp("l2c");
    char model[4096], tok[4096];
    assert_int_equal(hard_unpack(hard_seed("llama2c/shared.a"), dir, NULL, NULL), 0);
    snprintf(model, sizeof model, "%s/model.bin", dir);
    snprintf(tok, sizeof tok, "%s/tokenizer.bin", dir);
    snprintf(spm_vocab, sizeof spm_vocab, "%s/spaceless.bin", dir);
    snprintf(spm_model, sizeof spm_model, "%s/spaceless.cflow", dir);
    spaceless_tokenizer(tok, spm_vocab);
    tu_proc p;
    expect_ok(&p, HARD_ARGS("convert", model, spm_model, "--tokenizer", spm_vocab));
    tu_proc_free(&p);
    return 0;
}

/* The Hugging Face seed with its tokenizer.json edited: the pre-tokenizer's
 * expression replaced by re (JSON-escaped), or, when re is NULL, no
 * merges.  Returns the converted model. */
static const char *make_hf(const char *name, const char *re)
{
    size_t n;
    const char *arch = hard_seed("hf/llama-f32.a");
    char *a = tu_read_file(arch, &n);
    assert_non_null(a);
    /* the archive holds binary files: search it as bytes */
    char *tj = memmem(a, n, "@@file tokenizer.json\n", 22);
    assert_non_null(tj);
    tj = strndup(tj + 22, n - (size_t)(tj + 22 - a));
    char *next = strstr(tj, "\n@@file ");
    if (next)
        *next = 0;
    free(a);
    char *edited = malloc(strlen(tj) + 4096);
    assert_non_null(edited);
    const char *key = re ? "\"Regex\": \"" : "\"merges\": [";
    char *at = strstr(tj, key);
    assert_non_null(at);
    at += strlen(key);
    char *close = re ? strchr(at, '"') : strchr(at, ']');
    while (re && close && close[-1] == '\\')
        close = strchr(close + 1, '"');
    assert_non_null(close);
    sprintf(edited, "%.*s%s%s", (int)(at - tj), tj, re ? re : "", close);
    free(tj);
    const char *dir = tu_tmp(name);
    assert_int_equal(hard_unpack(arch, dir, "tokenizer.json", edited), 0);
    free(edited);
    static char out[4][4096];
    static unsigned k;
    char *m = out[k++ % 4];
    snprintf(m, sizeof out[0], "%s.cflow", dir);
    tu_proc p;
    expect_ok(&p, HARD_ARGS("convert", dir, m));
    tu_proc_free(&p);
    return m;
}

/* ---- class 1: more tokens than bytes ----------------------------------- */

static void test_token_buffers(void **state)
{
    (void)state;
    tu_proc p;
    /* 3 spaces: the prefix space and three more, 3 byte tokens each */
    expect_ok(&p, HARD_ARGS("tokenize", "-m", spm_vocab, "   "));
    assert_int_equal(tu_count_lines(p.out), 1);
    int words = 0;
    for (char *s = strtok(p.out, " \n"); s; s = strtok(NULL, " \n"))
        words++;
    assert_int_equal(words, 12);
    tu_proc_free(&p);

    /* BOS + 3 + 4 x 3 = 16 tokens from 4 bytes: the whole context */
    expect_ok(&p, HARD_ARGS("run", "-m", spm_model, "-p", "    ", "-n", "1", "--no-log"));
    tu_proc_free(&p);
    /* one space more is 19 tokens: refused with the count */
    hard_refused(spm_model, "the prompt is at least 19 tokens but the context holds 16",
                   120, HARD_ARGS("run", "-m", spm_model, "-p", "     ", "-n", "1", "--no-log"));

    /* "a b" is 8 tokens from 3 bytes; "he" is BOS + 4 + EOS, one more than
     * a buffer of bytes + 3 holds */
    const char *corpus = tu_tmp("spaces.txt");
    save(corpus, "a b<|endoftext|>he<|endoftext|>", 31);
    expect_ok(&p, HARD_ARGS("ppl", "-m", spm_model, corpus));
    assert_non_null(strstr(p.out, "stories 2,"));
    tu_proc_free(&p);
}

/* ---- class 2: NUL bytes ------------------------------------------------ */

static void test_nul_bytes(void **state)
{
    (void)state;
    char text[5000];
    memset(text, 'a', sizeof text);
    for (size_t i = 6; i < sizeof text; i += 7)
        text[i] = ' ';
    text[5] = '\0';
    const char *prompt = tu_tmp("nul-prompt.txt");
    save(prompt, text, sizeof text);
    hard_refused(prompt, "byte 5 of the prompt file is a NUL byte", 120,
                   HARD_ARGS("run", "-m", spm_model, "-f", prompt, "-n", "1", "--no-log"));

    static const char story[] = "he<|endoftext|>a\0b a<|endoftext|>";
    const char *corpus = tu_tmp("nul-corpus.txt");
    save(corpus, story, sizeof story - 1);
    hard_refused(corpus, "byte 16 of the corpus is a NUL byte", 120,
                   HARD_ARGS("ppl", "-m", spm_model, corpus));
}

/* ---- class 3: files that are not text files ---------------------------- */

static void test_special_files(void **state)
{
    (void)state;
    const char *fifo = tu_tmp("prompt.fifo");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    /* a FIFO nobody writes to: open() alone would block for ever */
    hard_refused(fifo, "the prompt file is a FIFO", 20,
                   HARD_ARGS("run", "-m", spm_model, "-f", fifo, "-n", "1", "--no-log"));
    hard_refused(fifo, "the corpus is a FIFO", 20, HARD_ARGS("ppl", "-m", spm_model, fifo));
    /* /dev/zero never ends: refused before a byte is read */
    hard_refused("/dev/zero", "the prompt file is a character device", 60,
                   HARD_ARGS("run", "-m", spm_model, "-f", "/dev/zero", "-n", "1", "--no-log"));
    const char *dir = tu_tmp("a-folder");
    mkdir(dir, 0700);
    hard_refused(dir, "the corpus is a directory", 20, HARD_ARGS("ppl", "-m", spm_model, dir));

    /* a regular file past the cap (sparse: no disk), with the cap */
    const char *big = tu_tmp("big-prompt.txt");
    FILE *f = fopen(big, "w");
    assert_non_null(f);
    assert_int_equal(ftruncate(fileno(f), (off_t)17 << 20), 0);
    fclose(f);
    hard_refused(big, "the prompt file is 17.0 MiB, over the 16.0 MiB cflow reads", 60,
                   HARD_ARGS("run", "-m", spm_model, "-f", big, "-n", "1", "--no-log"));
    hard_refused("no-such-prompt", "cannot read the prompt file", 20,
                   HARD_ARGS("run", "-m", spm_model, "-f", "no-such-prompt", "--no-log"));
}

/* ---- class 7: a tokenizer that cannot load, named once ------------------ */

static void test_tokenizer_messages(void **state)
{
    (void)state;
    const char *m = make_hf("hf-no-merges", NULL);
    tu_proc p;
    hard_run(&p, 120, HARD_ARGS("run", "-m", m, "-p", "hi", "-n", "1", "--no-log"));
    assert_int_equal(p.status, 1);
    assert_non_null(strstr(p.err, m));
    assert_non_null(strstr(p.err, "tokenizer.ggml.merges is missing or empty"));
    assert_null(strstr(p.err, "tokenizer: tokenizer"));
    tu_proc_free(&p);
}

/* ---- class 8: bounded work before a refusal ----------------------------- */

static void test_long_prompt(void **state)
{
    (void)state;
    /* an expression that backtracks over a run of spaces: the old way
     * split all 23 KB with it before counting the tokens */
    const char *slow = make_hf("hf-slow-regex", "\\\\s+(?=\\\\s*x)|\\\\S+|\\\\s+");
    char *text = malloc(23001);
    assert_non_null(text);
    memset(text, ' ', 23000);
    text[22999] = '1';
    const char *prompt = tu_tmp("long-prompt.txt");
    save(prompt, text, 23000);
    free(text);
    hard_refused(slow, "the prompt is at least", 30,
                   HARD_ARGS("run", "-m", slow, "-f", prompt, "-n", "1", "--no-log"));

    /* an expression that backtracks without bound is stopped, and says so */
    const char *expo = make_hf("hf-expo-regex", "(\\\\s+)+$|\\\\S+|\\\\s+");
    const char *p40 = tu_tmp("spaces-40.txt");
    save(p40, "                                        1", 41);
    hard_refused(expo, "backtracks without bound", 30,
                   HARD_ARGS("run", "-m", expo, "-f", p40, "-n", "1", "--no-log"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_buffers),
        cmocka_unit_test(test_nul_bytes),
        cmocka_unit_test(test_special_files),
        cmocka_unit_test(test_tokenizer_messages),
        cmocka_unit_test(test_long_prompt),
    };
    return cmocka_run_group_tests(tests, make_spm, NULL);
}
