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

#include <signal.h>
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
    /* every subcommand parses through the one table: its refusals */
    refused(c, "cflow runs: unknown option '--frob'", "runs", "--frob", (char *)NULL);
    refused(c, "cflow convert: unknown option '--frob'", "convert", "--frob", (char *)NULL);
    refused(c, "cflow convert: expected INPUT and OUTPUT", "convert", "a.gguf", (char *)NULL);
    refused(c, "cflow synth: bad --seed 'x': S from 0 to 18446744073709551615", "synth",
            "--seed", "x", "tiny", "out.cflow", (char *)NULL);
    refused(c, "cflow tokenize: -m needs a value: PATH", "tokenize", "-m", (char *)NULL);
    refused(c, "cflow tokenize: expected one TEXT", "tokenize", "a", "b", (char *)NULL);
    refused(c, "cflow models: unknown option '-x'", "models", "-x", (char *)NULL);
}

/* Every front end opens the engine through one mapping of the options
 * (ui_settings_eng_opts), so `cflow ppl` takes run's expert I/O options
 * too; none changes a score: a MoE model's perplexity is the same text
 * under mmap, sync with a cache of less than one layer's experts and no
 * look-ahead, and staged with look-ahead two layers deep.  A bad value is
 * refused as run refuses it. */
static void test_ppl_io_options(void **state)
{
    (void)state;
    char model[4096], text[4096];
    snprintf(model, sizeof model, "%s", tu_tmp("ppl-moe.cflow"));
    snprintf(text, sizeof text, "%s", tu_tmp("ppl-moe.txt"));
    tu_moe g;
    tu_synth_moe("tiny-moe", model, &g);
    static const char stories[] = "the cat sat on the mat.<|endoftext|>"
                                  "a dog ran to the park and back.<|endoftext|>";
    assert_int_equal(tu_write_file(text, stories, sizeof stories - 1), 0);
    static const char *const modes[][8] = {
        { "--expert-io", "mmap", NULL },
        { "--expert-io", "sync", "--expert-cache", "16K", "--expert-ahead", "off", NULL },
        { "--expert-io", "staged", "--expert-cache", "1M", "--expert-ahead-layers", "2",
          NULL },
    };
    char *first = NULL;
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        char *a[16] = { (char *)tu_cflow(), "ppl", "-m", model, "-t", "1" };
        int n = 6;
        for (int k = 0; modes[i][k]; k++)
            a[n++] = (char *)modes[i][k];
        a[n++] = text;
        a[n] = NULL;
        tu_proc p;
        assert_int_equal(tu_run(&p, a, NULL, 120), 0);
        assert_true(tu_ok(&p, modes[i][1]));
        assert_non_null(strstr(p.out, "perplexity "));
        if (!first)
            first = strdup(p.out);
        else if (strcmp(first, p.out))
            fail_msg("ppl --expert-io %s: '%s', mmap: '%s'", modes[i][1], p.out, first);
        tu_proc_free(&p);
    }
    free(first);
    refused(tu_cflow(), "bad --expert-ahead 'maybe'", "ppl", "--expert-ahead", "maybe",
            text, (char *)NULL);
}

/* The environment every program reads is checked at its start
 * (ui_env_check): a bad $CFLOW_READ_BW_GBS, $CFLOW_ISA, $CFLOW_PIN,
 * $CFLOW_MEM_FREE or $CFLOW_FAULT is one line naming the variable and the
 * value, exit 1, nothing on stdout (before this they were read as
 * "measure", "the best tier", "float", "unknown" and "no fault"), from
 * cflow and cflow-tui alike; good values run. */
static void test_env_refused(void **state)
{
    (void)state;
    static const char *const bad[] = { "CFLOW_READ_BW_GBS=fast", "CFLOW_READ_BW_GBS=0",
                                       "CFLOW_READ_BW_GBS=-3", "CFLOW_ISA=avx-512",
                                       "CFLOW_ISA=AVX2", "CFLOW_PIN=yes", "CFLOW_PIN=10",
                                       "CFLOW_MEM_FREE=lots", "CFLOW_MEM_FREE=0",
                                       "CFLOW_MEM_FREE=12T", "CFLOW_FAULT=runlog:enopsc",
                                       "CFLOW_FAULT=expert-read:eio@x",
                                       "CFLOW_FAULT=uring-init:eperm@3",
                                       "CFLOW_FAULT=runlog:busy,,expert-read:short" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        for (int prog = 0; prog < 3; prog++) {
            char *const env[] = { (char *)bad[i], NULL };
            char *argv[8] = { (char *)tu_cflow(), "run", "-n", "2", "--no-log", NULL };
            if (prog == 1) {
                argv[1] = "bench";
                argv[2] = "-p";
                argv[3] = "0";
            } else if (prog == 2) {
                argv[0] = tui_bin;
                argv[1] = "--no-log";
                argv[2] = NULL;
            }
            char want[64];
            snprintf(want, sizeof want, "%.*s='%s'", (int)strcspn(bad[i], "="), bad[i],
                     strchr(bad[i], '=') + 1);
            tu_proc p;
            assert_int_equal(tu_run(&p, argv, env, 60), 0);
            if (p.status != 1 || !strstr(p.err, want) || tu_count_lines(p.err) != 1 ||
                p.out_len)
                fail_msg("%s %s: exit %d, stdout %zu bytes, stderr: %s", bad[i], argv[1],
                         p.status, p.out_len, p.err);
            tu_proc_free(&p);
        }
    /* --version names the tier $CFLOW_ISA picks: a bad one is refused there too */
    for (int prog = 0; prog < 2; prog++) {
        char *const env[] = { "CFLOW_ISA=avx-512", NULL };
        char *const v[] = { prog ? tui_bin : (char *)tu_cflow(), "--version", NULL };
        tu_proc q;
        assert_int_equal(tu_run(&q, v, env, 60), 0);
        if (q.status != 1 || !strstr(q.err, "CFLOW_ISA='avx-512'") || q.out_len)
            fail_msg("%s --version: exit %d, stderr: %s", v[0], q.status, q.err);
        tu_proc_free(&q);
    }
    char *const good[] = { "CFLOW_READ_BW_GBS=12.5", "CFLOW_ISA=scalar", "CFLOW_PIN=1",
                           "CFLOW_MEM_FREE=2G",
                           "CFLOW_FAULT=runlog:busy@1000,expert-read:short@9,uring-init:eperm",
                           NULL };
    char *const argv[] = { (char *)tu_cflow(), "run", "-n", "2", "--no-log", "--temp", "0",
                           NULL };
    tu_proc p;
    assert_int_equal(tu_run(&p, argv, good, 60), 0);
    assert_true(tu_ok(&p, "good environment"));
    assert_true(p.out_len > 0);
    tu_proc_free(&p);
}

/* No string from outside reaches the terminal raw: a path, an argument
 * or an environment value with a newline or an escape sequence in an
 * error is one line with them escaped (\n, \x1b); a model file's name and
 * a run log's text that `cflow inspect` and `cflow runs` print have their
 * control characters made '?'.  ESC (0x1b) never appears in the output. */
static int has_esc(const char *s, size_t n) { return memchr(s, 0x1b, n) != NULL; }

/* s[0..n) as `cflow run` shows generated text on a terminal: newline and
 * tab kept, every other control character (C0, DEL, C1) as \r or \xNN. */
static size_t shown(const char *s, size_t n, char *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == 0xC2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 &&
            (unsigned char)s[i + 1] <= 0x9F)
            k += (size_t)sprintf(out + k, "\\x%02x", (unsigned char)s[++i]);
        else if (c == '\r')
            k += (size_t)sprintf(out + k, "\\r");
        else if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7F)
            k += (size_t)sprintf(out + k, "\\x%02x", c);
        else
            out[k++] = (char)c;
    }
    return k;
}

/* A model's text can hold any byte: stories260K sampled near-uniformly
 * (temperature 5, no truncation; seed 30) emits byte tokens ESC and other
 * controls.  Piped, `cflow run` writes them as they are; on a terminal
 * the same tokens come out escaped, so no escape sequence reaches it. */
static void test_run_terminal_text(void **state)
{
    (void)state;
    tu_proc piped, tty;
    char *argv[] = { (char *)tu_cflow(), "run", "-m",
                     (char *)tu_shared_file("models/stories260K-f32.gguf"), "-p", "Once", "-n",
                     "300", "--temp", "5", "--top-k", "0", "--top-p", "1", "--min-p", "0",
                     "--seed", "30", "--no-log", NULL };
    assert_int_equal(tu_run(&piped, argv, NULL, 120), 0);
    assert_int_equal(tu_run_pty(&tty, argv, NULL, 120), 0);
    assert_int_equal(piped.status, 0);
    assert_int_equal(tty.status, 0);
    if (!has_esc(piped.out, piped.out_len))
        fail_msg("the fixture no longer samples an ESC byte token: pick another seed");
    char *want = malloc(piped.out_len * 4 + 1);
    assert_non_null(want);
    size_t n = shown(piped.out, piped.out_len, want);
    assert_false(has_esc(tty.out, tty.out_len));
    if (n != tty.out_len || memcmp(want, tty.out, n))
        fail_msg("on a terminal: %zu bytes, want %zu:\n%s\nwant:\n%.*s", tty.out_len, n,
                 tty.out, (int)n, want);
    assert_non_null(strstr(tty.out, "\\x1b"));
    free(want);
    tu_proc_free(&piped);
    tu_proc_free(&tty);
}

static void test_hostile_text(void **state)
{
    (void)state;
    tu_proc p;
    char evil[4096], model[4096], db[4096];
    /* a missing model whose name breaks lines and clears the screen */
    snprintf(evil, sizeof evil, "%s", tu_tmp("x\n\x1b[2J\x1b]0;owned\x07.cflow"));
    assert_int_equal(tu_cflow_run(&p, "run", "-m", evil, "-n", "1", "--no-log", (char *)NULL),
                     0);
    if (p.status != 1 || tu_count_lines(p.err) != 1 || has_esc(p.err, p.err_len) ||
        !strstr(p.err, "\\x1b[2J") || p.out_len)
        fail_msg("run -m EVIL: exit %d, stderr: %s", p.status, p.err);
    tu_proc_free(&p);
    /* an unknown command and a bad environment value, likewise */
    assert_int_equal(tu_cflow_run(&p, "bo\x1b[31mgus", (char *)NULL), 0);
    assert_int_equal(p.status, 2);
    assert_false(has_esc(p.err, p.err_len));
    assert_non_null(strstr(p.err, "'bo\\x1b[31mgus'"));
    tu_proc_free(&p);
    char *const env[] = { "CFLOW_PIN=1\n\x1b[2J", NULL };
    char *const argv[] = { (char *)tu_cflow(), "run", "-n", "1", "--no-log", NULL };
    assert_int_equal(tu_run(&p, argv, env, 60), 0);
    assert_int_equal(p.status, 1);
    assert_int_equal(tu_count_lines(p.err), 1);
    assert_false(has_esc(p.err, p.err_len));
    assert_non_null(strstr(p.err, "CFLOW_PIN='1\\n\\x1b[2J'"));
    tu_proc_free(&p);
    /* tokenize --pieces: a newline and an ESC byte token, escaped, one line */
    char vocab[4096];
    snprintf(vocab, sizeof vocab, "%s", tu_shared_file("tokenizer-tests/ggml-vocab-llama-spm.gguf"));
    assert_int_equal(tu_cflow_run(&p, "tokenize", "-m", vocab, "--pieces", "a\nb\x1b",
                                  (char *)NULL), 0);
    assert_true(tu_ok(&p, "tokenize --pieces"));
    assert_int_equal(tu_count_lines(p.out), 1);
    assert_false(has_esc(p.out, p.out_len));
    assert_non_null(strstr(p.out, ":'\\n' "));
    assert_non_null(strstr(p.out, ":'\\x1b'"));
    tu_proc_free(&p);
    /* a real model under such a name: inspect prints the name made safe */
    tu_moe g;
    snprintf(model, sizeof model, "%s", tu_tmp("m\x1b[2J.cflow"));
    tu_synth_moe("tiny-mixtral", model, &g);
    assert_int_equal(tu_cflow_run(&p, "inspect", model, (char *)NULL), 0);
    assert_true(tu_ok(&p, "inspect"));
    assert_false(has_esc(p.out, p.out_len));
    assert_non_null(strstr(p.out, "m?[2J.cflow"));
    tu_proc_free(&p);
    /* and bench's table names it so */
    assert_int_equal(tu_cflow_run(&p, "bench", "-m", model, "-p", "0", "-n", "1", "-r", "1",
                                  "--read-bw", "10", "--no-log", (char *)NULL), 0);
    assert_true(tu_ok(&p, "bench"));
    assert_false(has_esc(p.out, p.out_len));
    assert_non_null(strstr(p.out, "| m?[2J.cflow "));
    tu_proc_free(&p);
    /* a run log whose text holds escapes: list and show print them safe */
    snprintf(db, sizeof db, "%s", tu_tmp("hostile.db"));
    remove(db);
    assert_int_equal(tu_cflow_run(&p, "run", "-m", model, "-n", "2", "--temp", "0", "--db", db,
                                  (char *)NULL), 0);
    assert_true(tu_ok(&p, "run into a log"));
    tu_proc_free(&p);
    assert_true(tu_db_int(db, "UPDATE session SET program = 'x' || char(27) || '[2J' ||"
                              " char(10) || 'y' RETURNING id") > 0);
    assert_true(tu_db_int(db, "UPDATE machine SET cpu_model = char(27) || ']0;t' || char(7)"
                              " RETURNING id") > 0);
    static const char *const views[][3] = { { "list", NULL }, { "show", "1" },
                                            { "compare", "1", "1" } };
    for (size_t i = 0; i < sizeof views / sizeof *views; i++) {
        char *a[10] = { (char *)tu_cflow(), "runs", (char *)views[i][0] };
        int n = 3;
        for (int k = 1; k < 3 && views[i][k]; k++)
            a[n++] = (char *)views[i][k];
        a[n++] = "--db";
        a[n++] = db;
        a[n] = NULL;
        assert_int_equal(tu_run(&p, a, NULL, 60), 0);
        assert_true(tu_ok(&p, views[i][0]));
        if (has_esc(p.out, p.out_len) || memchr(p.out, 0x07, p.out_len))
            fail_msg("runs %s printed a control character:\n%s", views[i][0], p.out);
        tu_proc_free(&p);
    }
    remove(db);
    remove(model);
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
    char out[4096];
    const char *conv = tu_convert_shared("models/stories260K-q8_0.gguf", "s260k.cflow");
    assert_non_null(conv);
    snprintf(out, sizeof out, "%s", conv);
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "inspect", out, (char *)NULL), 0);
    assert_true(tu_ok(&p, "cflow inspect"));
    assert_non_null(strstr(p.out, "combine standard"));
    assert_null(strstr(p.out, "ParallelSqrt2"));
    tu_proc_free(&p);
}

/* Ctrl-C stops `cflow run` between tokens; it says so with its
 * statistics and exits 130.  The watcher sends SIGINT once text came. */
static int interrupt_after_text(void *ctx, pid_t pid, size_t out_len)
{
    int *sent = ctx;
    if (out_len > 0 && !*sent) {
        kill(pid, SIGINT);
        *sent = 1;
    }
    return *sent;
}

static void test_run_says_why_it_stopped(void **state)
{
    (void)state;
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "run", "-n", "5", "--temp", "0", "--ignore-eos",
                                  "--no-log", "-p", "Once", (char *)NULL), 0);
    assert_true(tu_ok(&p, "cflow run -n 5"));
    assert_non_null(strstr(p.err, "cflow: stopped at the -n limit (5 tokens)"));
    tu_proc_free(&p);
    /* the shipped model ends its greedy story well before -n 500 */
    assert_int_equal(tu_cflow_run(&p, "run", "-n", "500", "--temp", "0", "--no-log", "-p",
                                  "Once upon a time", (char *)NULL), 0);
    assert_true(tu_ok(&p, "cflow run -n 500"));
    assert_non_null(strstr(p.err, "cflow: stopped by end of text after "));
    assert_non_null(strstr(p.err, " of at most 500"));
    tu_proc_free(&p);
    /* no limit, no end of text: only Ctrl-C ends it */
    char *argv[] = { (char *)tu_cflow(), "run", "-n", "0", "--ignore-eos", "--no-log", "-p",
                     "Once", NULL };
    int sent = 0;
    assert_int_equal(tu_run_watch(&p, argv, NULL, 300, interrupt_after_text, &sent, 50), 0);
    assert_true(sent);
    if (p.status != 130)
        fprintf(stderr, "status %d signaled %d: %s", p.status, p.signaled, p.err);
    assert_false(p.signaled);
    assert_int_equal(p.status, 130);
    assert_non_null(strstr(p.err, "cflow: stopped by Ctrl-C after "));
    assert_non_null(strstr(p.err, "(no -n limit)"));
    assert_non_null(strstr(p.err, "cflow: prompt "));
    tu_proc_free(&p);
}

/* The seed printed after a run at temperature > 0 (drawn at random when
 * not given) replays it, and the run log keeps it. */
static unsigned long long printed_seed(const char *err)
{
    const char *s = strstr(err, "--seed ");
    assert_non_null(s);
    return strtoull(s + 7, NULL, 10);
}

static void test_random_seed_replays(void **state)
{
    (void)state;
    const char *db = tu_tmp("seed.db");
    tu_proc a, b, c;
    assert_int_equal(tu_cflow_run(&a, "run", "-n", "24", "--temp", "1", "--db", db, "-p",
                                  "Once upon a time", (char *)NULL), 0);
    assert_true(tu_ok(&a, "cflow run --temp 1"));
    assert_int_equal(tu_cflow_run(&b, "run", "-n", "24", "--temp", "1", "--no-log", "-p",
                                  "Once upon a time", (char *)NULL), 0);
    assert_true(tu_ok(&b, "cflow run --temp 1 again"));
    unsigned long long sa = printed_seed(a.err), sb = printed_seed(b.err);
    assert_true(sa != sb);
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", sa);
    assert_int_equal(tu_cflow_run(&c, "run", "-n", "24", "--temp", "1", "--no-log", "--seed",
                                  seed, "-p", "Once upon a time", (char *)NULL), 0);
    assert_true(tu_ok(&c, "cflow run --seed"));
    assert_string_equal(c.out, a.out);
    assert_int_equal(printed_seed(c.err), sa);
    tu_proc_free(&b);
    tu_proc_free(&c);
    /* the log has the seed the statistics gave */
    assert_int_equal(tu_cflow_run(&b, "runs", "show", "1", "--db", db, (char *)NULL), 0);
    assert_true(tu_ok(&b, "cflow runs show 1"));
    char want[64];
    snprintf(want, sizeof want, "seed %llu", sa);
    assert_non_null(strstr(b.out, want));
    tu_proc_free(&a);
    tu_proc_free(&b);
}

/* The line of out that starts with label, or fail. */
static const char *line_of(const char *out, const char *label)
{
    for (const char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!strncmp(l, label, strlen(label)))
            return l;
    fail_msg("no line '%s' in:\n%s", label, out);
    return NULL;
}

/* `cflow runs compare`: counts are integers, every figure has its unit,
 * task-clock in ms per token. */
static void test_compare_units(void **state)
{
    (void)state;
    const char *db = tu_tmp("compare.db");
    tu_proc p;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(tu_cflow_run(&p, "run", "-n", i ? "8" : "4", "-t", i ? "2" : "1",
                                      "--temp", "0", "--db", db, "-p", "Once",
                                      (char *)NULL), 0);
        assert_true(tu_ok(&p, "cflow run"));
        tu_proc_free(&p);
    }
    assert_int_equal(tu_cflow_run(&p, "runs", "compare", "1", "2", "--db", db,
                                  (char *)NULL), 0);
    assert_true(tu_ok(&p, "cflow runs compare"));
    long a, b;
    char rest[64];
    assert_int_equal(sscanf(line_of(p.out, "threads "), "threads %ld %ld %63s", &a, &b, rest),
                     3);
    assert_true(a == 1 && b == 2);
    const char *l = line_of(p.out, "threads ");
    assert_null(memchr(l, '.', (size_t)(strstr(l, rest) - l)));  /* "1", not "1.000" */
    assert_int_equal(sscanf(line_of(p.out, "decode tokens "), "decode tokens %ld %ld", &a, &b),
                     2);
    assert_true(a == 3 && b == 7);
    line_of(p.out, "task-clock ms/tok ");
    line_of(p.out, "decode tok/s ");
    line_of(p.out, "streamed MiB/tok ");
    assert_null(strstr(p.out, "task-clock/tok"));
    tu_proc_free(&p);
}

int main(void)
{
    unsetenv("CFLOW_MODEL");   /* no -m: the shipped model, as a new user has it */
    const char *bd = getenv("CFLOW_BUILDDIR");
    snprintf(tui_bin, sizeof tui_bin, "%s/cflow-tui", bd && *bd ? bd : ".");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusals_give_the_range),
        cmocka_unit_test(test_threads_zero_is_all_cores),
        cmocka_unit_test(test_help_lists_limits),
        cmocka_unit_test(test_runs_list_without_log),
        cmocka_unit_test(test_bench_defaults),
        cmocka_unit_test(test_inspect_standard),
        cmocka_unit_test(test_run_says_why_it_stopped),
        cmocka_unit_test(test_random_seed_replays),
        cmocka_unit_test(test_compare_units),
        cmocka_unit_test(test_ppl_io_options),
        cmocka_unit_test(test_env_refused),
        cmocka_unit_test(test_hostile_text),
        cmocka_unit_test(test_run_terminal_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
