/*
 * test_eng_errors.c — the engine's errors name what is wrong.
 *
 * NaN.  Weights that make the forward pass compute NaN or infinity are an
 * error naming the layer, never silent output.
 * The reader refuses non-finite weights, so the model here has only
 * finite ones: stories260K (F32) with layer 1's attention-norm weights
 * set to 3e38.  The normalised input is then about 3e38 per element, the
 * query and key projections overflow to infinity, and attention turns it
 * into NaN: the residual stream after layer 1 is the first that is not
 * finite (after layer 0 it still is).  `cflow run` must exit 1 with one
 * line naming the file and layer 1, and print no text; `cflow ppl` must
 * exit 1 instead of printing "perplexity nan".
 *
 * Threads.  `-t 1024` under an address-space cap (each worker's stack is
 * reserved address space) cannot start its workers: the error says so
 * with the count, and does not blame the context size.
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

#include "format/cflow_format.h"
#include "testutil.h"

static char bad[4096];

/* Convert stories260K and scale layer 1's attention norm into overflow. */
static int setup(void **state)
{
    char good[4096];
    tu_proc p;
    const char *src = tu_shared("models/stories260K-f32.gguf");
    (void)state;
    tu_require(src);
    snprintf(good, sizeof good, "%s", tu_tmp("nan-good.cflow"));
    snprintf(bad, sizeof bad, "%s", tu_tmp("nan-bad.cflow"));
    if (tu_cflow_run(&p, "convert", src, good, NULL) || !tu_ok(&p, "convert"))
        return -1;
    tu_proc_free(&p);
    return tu_model_set_vec(good, bad, 1, FMT_S_ATTN_NORM, 3e38f);
}

static void test_run_names_layer(void **state)
{
    tu_proc p;
    (void)state;
    assert_int_equal(tu_cflow_run(&p, "run", "-m", bad, "-p", "Once upon a time", "-n",
                                  "8", "--temp", "0", "--no-log", NULL), 0);
    fprintf(stderr, "run: exit %d, stdout %zu bytes, stderr: %s", p.status, p.out_len,
            p.err);
    assert_false(p.signaled);
    assert_int_equal(p.status, 1);
    assert_int_equal(p.out_len, 0);
    assert_non_null(strstr(p.err, bad));
    assert_non_null(strstr(p.err, "NaN or infinity"));
    assert_non_null(strstr(p.err, "after layer 1 "));
    tu_proc_free(&p);
}

static void test_ppl_fails(void **state)
{
    tu_proc p;
    char corpus[4096];
    (void)state;
    snprintf(corpus, sizeof corpus, "%s", tu_tmp("nan-corpus.txt"));
    const char *text = "Once upon a time there was a girl.<|endoftext|>"
                       "The dog ran to the park.";
    assert_int_equal(tu_write_file(corpus, text, strlen(text)), 0);
    assert_int_equal(tu_cflow_run(&p, "ppl", "-m", bad, corpus, NULL), 0);
    fprintf(stderr, "ppl: exit %d, stdout: %s, stderr: %s", p.status, p.out, p.err);
    assert_false(p.signaled);
    assert_int_equal(p.status, 1);
    assert_null(strstr(p.out, "nan"));
    assert_non_null(strstr(p.err, "after layer 1 "));
    tu_proc_free(&p);
}

static void test_threads_named(void **state)
{
    char script[8192];
    tu_proc p;
    /* sanitizer shadow memory does not fit under the cap: there the run
     * may start its threads, but must never blame the context */
    const int capped = getenv("CFLOW_SANITIZERS") == NULL;
    (void)state;
    snprintf(script, sizeof script,
             "%sexec '%s' run -m '%s' -t 1024 -n 2 --temp 0 --no-log -p hi",
             capped ? "ulimit -v 600000; " : "", tu_cflow(),
             tu_tmp("nan-good.cflow"));
    char *argv[] = { "/bin/sh", "-c", script, NULL };
    assert_int_equal(tu_run(&p, argv, NULL, 120), 0);
    fprintf(stderr, "run -t 1024: exit %d, stderr: %s", p.status, p.err);
    assert_false(p.signaled);
    /* the old refusal: "out of memory for a 128-token context" (a run that
     * starts prints "context-switches" among its counters) */
    assert_null(strstr(p.err, "-token context"));
    if (capped || p.status) {
        assert_int_equal(p.status, 1);
        assert_int_equal(tu_count_lines(p.err), 1);
        assert_non_null(strstr(p.err, "cannot start 1024 worker threads"));
    }
    tu_proc_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_names_layer),
        cmocka_unit_test(test_ppl_fails),
        cmocka_unit_test(test_threads_named),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
