/*
 * test_default_model.c — issue 3, must show 5: the model cflow ships
 * (data/default.cflow, used when neither -m nor $CFLOW_MODEL is given).
 *
 * 1. Held-out quality.  `cflow ppl --json FILE` of the shipped model and
 *    `cflow ppl -m stories260K --json FILE` (the llama2.c checkpoint,
 *    converted here at f32) on ../shared/corpus/tinystories-valid-1000.txt;
 *    the shipped model's bits per byte must be at most 1.05x stories260K's
 *    (issue 46's bound; issue 3's was 1.15x: the chat fine-tunes must not
 *    cost the model its stories).
 *    Bits per byte, not perplexity: the two tokenizers differ (2048 vs 512
 *    ids).  Always the whole file, also under the sanitizers (minutes):
 *    prefixes are not representative -- on the first 300 stories the
 *    ratio is 1.219 against 1.109 on all 1000, because stories260K does
 *    much better on the early stories than on the rest (data/README.md).
 *
 * 2. Coherent English.  `cflow run -p "Once upon a time" -n 80 --temp 0`
 *    (greedy, no -m).  "Coherent" is made checkable as:
 *      a. at least 30 words came out (the model did not stop or babble
 *         punctuation);
 *      b. at least 90% of the words (lower-cased letter runs, with an
 *         apostrophe part: "didn't") occur in the training text
 *         ../shared/corpus/tinystories-train-a.txt — misspelt or invented
 *         words and sub-word debris fail;
 *      c. no word is repeated more than twice in a row ("the the the");
 *      d. no three-word sequence occurs more than 3 times, and at least 40%
 *         of the words are distinct — greedy loops ("she saw a big, she saw
 *         a big, ...") fail;
 *      e. at least two sentences end (". ", "! ", "? " or a closing quote
 *         after one), so it writes sentences rather than a word list.
 *    Each rule fails on real failure modes of small models; none checks a
 *    particular wording, so retraining the model does not need the test
 *    to change.
 *
 * 3. It chats (issue 22, must show 1).  `cflow run --chat -p "Tell me a
 *    story about a dog named Max." --temp 0` (no -m): the reply names Max
 *    and a dog (the words "Max" and "dog"/"dogs"), and has at least 30
 *    words.  A model without a chat template (stories260K) is refused:
 *    non-zero exit, one line on stderr naming the model, nothing on stdout.
 *
 * 4. It follows a request it has never seen (issue 46, must show 1).
 *    `cflow run --chat -p "Tell me a story about a kid named Zephyrine and
 *    a trumpet." --temp 0`: the reply names Zephyrine and a trumpet.  The
 *    test first checks that the request is new to the model: "Zephyrine"
 *    is in none of scripts/train/lists/names-*.txt (the names the model
 *    was fine-tuned with, and the held-out ones) and not a word of the
 *    training stories (tinystories-train-a.txt, -train-b-lowercase.txt);
 *    "trumpet" is in none of lists/things-*.txt (either number), so no
 *    training conversation asked for one.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <ctype.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "testutil.h"

/* the shipped model, found the way a user's cflow finds it */
static char *const no_model_env[] = { "CFLOW_MODEL=", NULL };

static json_object *ppl_json(const char *model, const char *file, const char *n)
{
    tu_proc p;
    char *argv[16];
    int a = 0;
    argv[a++] = (char *)tu_cflow();
    argv[a++] = "ppl";
    if (model) {
        argv[a++] = "-m";
        argv[a++] = (char *)model;
    }
    argv[a++] = "-n";
    argv[a++] = (char *)n;
    argv[a++] = "-t";
    argv[a++] = "2";
    argv[a++] = "--json";
    argv[a++] = (char *)file;
    argv[a] = NULL;
    assert_int_equal(tu_run(&p, argv, no_model_env, 1800), 0);
    if (p.status)
        fprintf(stderr, "cflow ppl %s: %s", model ? model : "(shipped)", p.err);
    assert_int_equal(p.status, 0);
    json_object *j = json_tokener_parse(p.out);
    assert_non_null(j);
    tu_proc_free(&p);
    return j;
}

/* stories260K (llama2.c checkpoint + tokenizer) converted at f32 into ref. */
static void convert_stories260k(char *ref, size_t n)
{
    char ckpt[4096], tok[4096];
    snprintf(ckpt, sizeof ckpt, "%s", tu_shared("models/stories260K.bin"));
    snprintf(tok, sizeof tok, "%s", tu_shared("models/tok512.bin"));
    tu_require(ckpt);
    tu_require(tok);
    snprintf(ref, n, "%s", tu_tmp("stories260K.cflow"));
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "convert", "-q", "f32", "-t", tok, ckpt, ref,
                                  (char *)NULL), 0);
    if (p.status)
        fprintf(stderr, "convert: %s", p.err);
    assert_int_equal(p.status, 0);
    tu_proc_free(&p);
}

static void test_ppl_ratio(void **state)
{
    (void)state;
    const char *valid = tu_shared("corpus/tinystories-valid-1000.txt");
    tu_require(valid);
    char ref[4096];
    convert_stories260k(ref, sizeof ref);

    const char *n = "1000";
    json_object *ours = ppl_json(NULL, valid, n);
    json_object *theirs = ppl_json(ref, valid, n);
    const char *name = json_object_get_string(json_object_object_get(ours, "model"));
    assert_non_null(name);
    double b_ours = json_object_get_double(json_object_object_get(ours, "bits_per_byte"));
    double b_ref = json_object_get_double(json_object_object_get(theirs, "bits_per_byte"));
    int s_ours = json_object_get_int(json_object_object_get(ours, "stories"));
    int s_ref = json_object_get_int(json_object_object_get(theirs, "stories"));
    fprintf(stderr, "%d stories: shipped model (%s) %.4f bits/byte, stories260K %.4f, "
            "ratio %.3f (must be <= 1.05)\n", s_ours, name, b_ours, b_ref, b_ours / b_ref);
    /* the shipped model, not a model named on the command line */
    assert_non_null(strstr(name, "default.cflow"));
    assert_int_equal(s_ours, atoi(n));
    assert_int_equal(s_ref, atoi(n));
    assert_true(b_ref > 0.5 && b_ours > 0.5);
    assert_true(b_ours <= 1.05 * b_ref);
    json_object_put(ours);
    json_object_put(theirs);
}

/* ---- the word list ------------------------------------------------------ */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Next word of s at *i (lower-cased into w): letters, optionally "'" and
 * more letters.  Returns 0 at the end. */
static int next_word(const char *s, size_t *i, char *w, size_t wn)
{
    while (s[*i] && !isalpha((unsigned char)s[*i]))
        (*i)++;
    if (!s[*i])
        return 0;
    size_t k = 0;
    while (s[*i] && (isalpha((unsigned char)s[*i]) ||
                     (s[*i] == '\'' && isalpha((unsigned char)s[*i + 1])))) {
        if (k + 1 < wn)
            w[k++] = (char)tolower((unsigned char)s[*i]);
        (*i)++;
    }
    w[k] = 0;
    return 1;
}

static char **split_words(const char *s, size_t *n)
{
    size_t cap = 1024, i = 0;
    char **v = malloc(cap * sizeof *v), w[64];
    assert_non_null(v);
    *n = 0;
    while (next_word(s, &i, w, sizeof w)) {
        if (*n == cap) {
            cap *= 2;
            v = realloc(v, cap * sizeof *v);
            assert_non_null(v);
        }
        v[(*n)++] = strdup(w);
    }
    return v;
}

static void free_words(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static void test_coherent(void **state)
{
    (void)state;
    size_t len;
    char *corpus = tu_read_file(tu_shared("corpus/tinystories-train-a.txt"), &len);
    assert_non_null(corpus);
    size_t nlex;
    char **lex = split_words(corpus, &nlex);
    free(corpus);
    qsort(lex, nlex, sizeof *lex, cmp_str);

    tu_proc p;
    char *argv[] = { (char *)tu_cflow(), "run", "-p", "Once upon a time", "-n", "80",
                     "--temp", "0", NULL };
    assert_int_equal(tu_run(&p, argv, no_model_env, 600), 0);
    if (p.status)
        fprintf(stderr, "cflow run: %s", p.err);
    assert_int_equal(p.status, 0);
    fprintf(stderr, "shipped model, greedy: \"Once upon a time%s\"\n", p.out);

    size_t n;
    char **w = split_words(p.out, &n);
    size_t known = 0, distinct = 0, max_run = 1, run = 1, max_tri = 0;
    for (size_t i = 0; i < n; i++) {
        known += bsearch(&w[i], lex, nlex, sizeof *lex, cmp_str) != NULL;
        int seen = 0;
        for (size_t j = 0; j < i && !seen; j++)
            seen = !strcmp(w[i], w[j]);
        distinct += !seen;
        run = i && !strcmp(w[i], w[i - 1]) ? run + 1 : 1;
        if (run > max_run)
            max_run = run;
        if (i + 2 < n) {
            size_t c = 0;
            for (size_t j = 0; j + 2 < n; j++)
                c += !strcmp(w[i], w[j]) && !strcmp(w[i + 1], w[j + 1]) &&
                     !strcmp(w[i + 2], w[j + 2]);
            if (c > max_tri)
                max_tri = c;
        }
    }
    int ends = 0;
    for (const char *s = p.out; *s; s++)
        if ((*s == '.' || *s == '!' || *s == '?') &&
            (s[1] == ' ' || s[1] == '\n' || s[1] == '"' || s[1] == 0))
            ends++;
    fprintf(stderr, "%zu words, %zu in the training text's word list (%.1f%%), %zu distinct, "
            "longest run of one word %zu, most frequent trigram %zu times, %d sentence ends\n",
            n, known, n ? 100.0 * (double)known / (double)n : 0.0, distinct, max_run,
            max_tri, ends);
    assert_true(n >= 30);                       /* a */
    assert_true(known * 10 >= n * 9);           /* b */
    assert_true(max_run <= 2);                  /* c */
    assert_true(max_tri <= 3);                  /* d */
    assert_true(distinct * 10 >= n * 4);
    assert_true(ends >= 2);                     /* e */
    free_words(w, n);
    free_words(lex, nlex);
    tu_proc_free(&p);
}

/* "Max" as a word, and "dog" or "dogs" in any case. */
static int names_word(const char *s, const char *w, int anycase)
{
    size_t n = strlen(w);
    for (const char *p = s; *p; p++) {
        if ((anycase ? strncasecmp(p, w, n) : strncmp(p, w, n)) != 0)
            continue;
        const char *e = p + n;
        if (*e == 's')
            e++;
        if ((p == s || !isalpha((unsigned char)p[-1])) && !isalpha((unsigned char)*e))
            return 1;
    }
    return 0;
}

static void test_chat(void **state)
{
    (void)state;
    tu_proc p;
    char *argv[] = { (char *)tu_cflow(), "run", "--chat", "-p",
                     "Tell me a story about a dog named Max.", "--temp", "0", "--no-log",
                     NULL };
    assert_int_equal(tu_run(&p, argv, no_model_env, 600), 0);
    if (p.status)
        fprintf(stderr, "cflow run --chat: %s", p.err);
    assert_int_equal(p.status, 0);
    fprintf(stderr, "shipped model, --chat, greedy: \"%s\"\n", p.out);
    size_t n;
    char **w = split_words(p.out, &n);
    assert_true(n >= 30);
    assert_true(names_word(p.out, "Max", 0));
    assert_true(names_word(p.out, "dog", 1));
    free_words(w, n);
    tu_proc_free(&p);

    /* no template: refused in one line */
    char ref[4096];
    convert_stories260k(ref, sizeof ref);
    assert_int_equal(tu_cflow_run(&p, "run", "-m", ref, "--chat", "-p", "Hello", "--no-log",
                                  (char *)NULL), 0);
    fprintf(stderr, "stories260K --chat: %s", p.err);
    assert_int_not_equal(p.status, 0);
    assert_string_equal(p.out, "");
    assert_int_equal(tu_count_lines(p.err), 1);
    assert_non_null(strstr(p.err, "stories260K.cflow"));
    assert_non_null(strstr(p.err, "no chat template"));
    tu_proc_free(&p);
}

/* 1 when a line of the list file rel (under scripts/train/lists) has word
 * as one of its space-separated fields; the file must be readable. */
static int listed(const char *rel, const char *word)
{
    const char *src = getenv("CFLOW_SRCDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/scripts/train/lists/%s", src ? src : ".", rel);
    size_t len;
    char *text = tu_read_file(path, &len);
    assert_non_null(text);
    int found = 0;
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line && !found;
         line = strtok_r(NULL, "\n", &save))
        for (char *s2 = NULL, *f = strtok_r(line, " ", &s2); f && !found;
             f = strtok_r(NULL, " ", &s2))
            found = !strcmp(f, word);
    free(text);
    return found;
}

/* 1 when word (lower case) is a word of the shared file rel. */
static int corpus_has(const char *rel, const char *word)
{
    size_t len, n;
    char *text = tu_read_file(tu_shared_file(rel), &len);
    assert_non_null(text);
    char **w = split_words(text, &n);
    free(text);
    int found = 0;
    for (size_t i = 0; i < n && !found; i++)
        found = !strcmp(w[i], word);
    free_words(w, n);
    return found;
}

static void test_unseen_request(void **state)
{
    (void)state;
    static const char *const sets[] = { "train", "valid", "test" };
    char rel[64];
    for (size_t i = 0; i < sizeof sets / sizeof *sets; i++) {
        snprintf(rel, sizeof rel, "names-%s.txt", sets[i]);
        assert_false(listed(rel, "Zephyrine"));
        snprintf(rel, sizeof rel, "things-%s.txt", sets[i]);
        assert_false(listed(rel, "trumpet"));
        assert_false(listed(rel, "trumpets"));
    }
    assert_false(corpus_has("corpus/tinystories-train-a.txt", "zephyrine"));
    assert_false(corpus_has("corpus/tinystories-train-b-lowercase.txt", "zephyrine"));

    tu_proc p;
    char *argv[] = { (char *)tu_cflow(), "run", "--chat", "-p",
                     "Tell me a story about a kid named Zephyrine and a trumpet.",
                     "--temp", "0", "--no-log", NULL };
    assert_int_equal(tu_run(&p, argv, no_model_env, 600), 0);
    if (p.status)
        fprintf(stderr, "cflow run --chat: %s", p.err);
    assert_int_equal(p.status, 0);
    fprintf(stderr, "shipped model, --chat, greedy: \"%s\"\n", p.out);
    assert_true(names_word(p.out, "Zephyrine", 0));
    assert_true(names_word(p.out, "trumpet", 1));
    tu_proc_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat),
        cmocka_unit_test(test_unseen_request),
        cmocka_unit_test(test_coherent),
        cmocka_unit_test(test_ppl_ratio),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
