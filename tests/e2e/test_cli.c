/*
 * test_cli.c — the front ends' options as a user meets them: one table of
 * limits behind `cflow run`, `cflow bench`, `cflow ppl` and cflow-tui, so
 * every refusal is one line on stderr naming the flag, the value and the
 * valid range, the same range in every program, with exit status 2.
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

#include "testutil.h"

static char tui_bin[4096];

/* argv after the program (NULL-terminated) into a[], program first. */
static int gather(char **a, int max, const char *prog, va_list ap)
{
    int n = 0;
    a[n++] = (char *)prog;
    for (char *s; (s = va_arg(ap, char *)) != NULL && n < max - 1;)
        a[n++] = s;
    a[n] = NULL;
    return n;
}

/* prog ARGS... must be refused with exit 2 and exactly one stderr line
 * holding want. */
static void refused(const char *prog, const char *want, ...)
{
    char *argv[24];
    va_list ap;
    va_start(ap, want);
    gather(argv, 24, prog, ap);
    va_end(ap);
    tu_proc p;
    assert_int_equal(tu_run(&p, argv, NULL, 60), 0);
    if (p.status != 2 || !strstr(p.err, want) || tu_count_lines(p.err) != 1)
        fprintf(stderr, "%s %s: status %d, stderr:\n%s", prog, argv[1] ? argv[1] : "",
                p.status, p.err);
    assert_int_equal(p.status, 2);
    assert_non_null(strstr(p.err, want));
    assert_int_equal(tu_count_lines(p.err), 1);
    assert_int_equal(p.out_len, 0);
    tu_proc_free(&p);
}

static void test_refusals_give_the_range(void **state)
{
    (void)state;
    const char *c = tu_cflow();
    refused(c, "cflow run: bad -n '-5': N from 0 (no limit) to 1073741824", "run", "-n",
            "-5", (char *)NULL);
    refused(c, "bad -t '2000': N from 0 (all cores) to 1024", "run", "-t", "2000",
            (char *)NULL);
    refused(c, "bad --temp '7': T from 0 (greedy) to 5", "run", "--temp", "7",
            (char *)NULL);
    refused(c, "bad --kv-type 'f8': one of auto, f32, f16", "run", "--kv-type", "f8",
            (char *)NULL);
    refused(c, "--temp needs a value: T from 0 (greedy) to 5", "run", "--temp",
            (char *)NULL);
    refused(c, "unknown option '--frob'", "run", "--frob", (char *)NULL);
    refused(c, "unknown option '-x'", "run", "-x", (char *)NULL);
    refused(c, "bad -c '1': N from 2 to 16777216, or 0 (the model's)", "ppl", "-c", "1",
            "x.txt", (char *)NULL);
    refused(c, "bad -t '1,2000': a list (a,b,c or a-b or a-b+step) of 0 (all cores) to 1024",
            "bench", "-t", "1,2000", (char *)NULL);
    refused(c, "bad -r '0': N from 1 to 1000", "bench", "-r", "0", (char *)NULL);
    /* the TUI takes the same flags with the same limits */
    refused(tui_bin, "cflow-tui: bad --temp '7': T from 0 (greedy) to 5", "--temp", "7",
            (char *)NULL);
    refused(tui_bin, "cflow-tui: bad -t '2000': N from 0 (all cores) to 1024", "-t", "2000",
            (char *)NULL);
    refused(tui_bin, "unknown option '--frob'", "--frob", (char *)NULL);
    /* the subcommands without a table of their own refuse in one line too */
    refused(c, "cflow runs: bad or unknown option '--frob'", "runs", "--frob", (char *)NULL);
}

/* -t 0 is all cores wherever threads are set. */
static void test_threads_zero_is_all_cores(void **state)
{
    (void)state;
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "run", "-t", "0", "-n", "2", "--temp", "0",
                                  "--no-log", "-p", "Once", (char *)NULL), 0);
    assert_true(tu_ok(&p, "cflow run -t 0"));
    tu_proc_free(&p);
}

/* --help is built from the same table: the limits appear in it. */
static void test_help_lists_limits(void **state)
{
    (void)state;
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "run", "--help", (char *)NULL), 0);
    assert_true(tu_ok(&p, "cflow run --help"));
    assert_non_null(strstr(p.out, "--temp T"));
    assert_non_null(strstr(p.out, "T from 0 (greedy) to 5"));
    tu_proc_free(&p);
    char *argv[] = { tui_bin, "--help", NULL };
    assert_int_equal(tu_run(&p, argv, NULL, 60), 0);
    assert_true(tu_ok(&p, "cflow-tui --help"));
    assert_non_null(strstr(p.out, "T from 0 (greedy) to 5"));
    tu_proc_free(&p);
}

/* `cflow runs list` before anything was logged: exit 0, but it says so. */
static void test_runs_list_without_log(void **state)
{
    (void)state;
    tu_proc p;
    const char *db = tu_tmp("never-written.db");
    assert_int_equal(tu_cflow_run(&p, "runs", "list", "--db", db, (char *)NULL), 0);
    assert_true(tu_ok(&p, "cflow runs list (no log)"));
    assert_int_equal(p.out_len, 0);
    assert_non_null(strstr(p.err, db));
    assert_non_null(strstr(p.err, "no run log yet"));
    tu_proc_free(&p);
}

/* `cflow bench` as it comes: no arguments is the shipped model and
 * llama-bench's defaults (pp512, tg128), which fit its 512-token context;
 * the table has a tg row. */
static void test_bench_defaults(void **state)
{
    (void)state;
    char *const env[] = { "CFLOW_MODEL=", NULL };
    char *argv[] = { (char *)tu_cflow(), "bench", NULL };
    tu_proc p;
    assert_int_equal(tu_run(&p, argv, env, 600), 0);
    assert_true(tu_ok(&p, "cflow bench"));
    assert_non_null(strstr(p.out, "| default.cflow "));
    assert_non_null(strstr(p.out, "| pp512 |"));
    assert_non_null(strstr(p.out, "| tg128 |"));
    tu_proc_free(&p);
    /* a test the model cannot hold is refused before anything is measured */
    assert_int_equal(tu_cflow_env(&p, env, "bench", "-p", "600", (char *)NULL), 0);
    assert_int_equal(p.status, 1);
    assert_non_null(strstr(p.err, "need a context of 600 tokens"));
    assert_null(strstr(p.err, "read bandwidth"));
    assert_int_equal(tu_count_lines(p.err), 1);
    tu_proc_free(&p);
}

/* inspect calls a plain llama's layer schedule "standard", not by the
 * name of a combine style it does not use. */
static void test_inspect_standard(void **state)
{
    (void)state;
    const char *gguf = tu_shared("models/stories260K-q8_0.gguf");
    tu_require(gguf);
    char out[4096];
    snprintf(out, sizeof out, "%s", tu_tmp("s260k.cflow"));
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "convert", gguf, out, (char *)NULL), 0);
    assert_true(tu_ok(&p, "cflow convert"));
    tu_proc_free(&p);
    assert_int_equal(tu_cflow_run(&p, "inspect", out, (char *)NULL), 0);
    assert_true(tu_ok(&p, "cflow inspect"));
    assert_non_null(strstr(p.out, "combine standard"));
    assert_null(strstr(p.out, "ParallelSqrt2"));
    tu_proc_free(&p);
}

int main(void)
{
    const char *bd = getenv("CFLOW_BUILDDIR");
    snprintf(tui_bin, sizeof tui_bin, "%s/cflow-tui", bd && *bd ? bd : ".");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusals_give_the_range),
        cmocka_unit_test(test_threads_zero_is_all_cores),
        cmocka_unit_test(test_help_lists_limits),
        cmocka_unit_test(test_runs_list_without_log),
        cmocka_unit_test(test_bench_defaults),
        cmocka_unit_test(test_inspect_standard),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
