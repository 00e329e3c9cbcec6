/*
 * test_bench.c — `cflow bench` as a user runs it: argument errors, the JSON
 * array with llama-bench's field names (parsed with json-c), md and csv
 * shapes, membw and l1d, and `cflow synth --gguf` refusals.  Correctness
 * only: no assertion looks at how fast anything ran.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <json-c/json.h>
#include <sqlite3.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prof/prof.h"
#include "testutil.h"

static char model[4096];

static int setup(void **state)
{
    (void)state;
    tu_proc p;
    snprintf(model, sizeof model, "%s", tu_tmp("bench-tiny.cflow"));
    if (tu_cflow_run(&p, "synth", "tiny-mixtral", model, (char *)NULL) || p.status) {
        fprintf(stderr, "synth: %s", p.err ? p.err : "");
        tu_proc_free(&p);
        return -1;
    }
    tu_proc_free(&p);
    return 0;
}

static void expect_usage(int want_status, const char *want_msg, ...)
{
    char *argv[16];
    va_list ap;
    int n = 0;
    argv[n++] = (char *)tu_cflow();
    argv[n++] = (char *)"bench";
    va_start(ap, want_msg);
    for (char *a; (a = va_arg(ap, char *)) != NULL && n < 15;)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    tu_proc p;
    assert_int_equal(tu_run(&p, argv, NULL, 60), 0);
    if (p.status != want_status || !strstr(p.err, want_msg))
        fprintf(stderr, "argv[2]=%s: status %d, stderr: %s", n > 2 ? argv[2] : "",
                p.status, p.err);
    assert_int_equal(p.status, want_status);
    assert_non_null(strstr(p.err, want_msg));
    assert_int_equal(p.out_len, 0);  /* no half table on stdout */
    tu_proc_free(&p);
}

static void test_args(void **state)
{
    (void)state;
    expect_usage(2, "unknown mode 'frob'", "frob", (char *)NULL);
    expect_usage(2, "bad -t '1025'", "-m", model, "-t", "1025", (char *)NULL);
    expect_usage(2, "bad -t '1,x'", "-m", model, "-t", "1,x", (char *)NULL);
    expect_usage(2, "bad -p '-3'", "-m", model, "-p", "-3", (char *)NULL);
    expect_usage(2, "bad -n '4-2'", "-m", model, "-n", "4-2", (char *)NULL);
    expect_usage(2, "bad -r '0'", "-m", model, "-r", "0", (char *)NULL);
    expect_usage(2, "bad -o 'xml'", "-m", model, "-o", "xml", (char *)NULL);
    expect_usage(2, "bad --prefetch 'maybe'", "-m", model, "--prefetch", "maybe",
                 (char *)NULL);
    expect_usage(2, "bad --expert-io 'disk'", "-m", model, "--expert-io", "disk",
                 (char *)NULL);
    expect_usage(2, "bad --depth 'deep'", "-m", model, "--depth", "deep", (char *)NULL);
    expect_usage(2, "bad --warmup-reps '-1'", "-m", model, "--warmup-reps", "-1",
                 (char *)NULL);
    expect_usage(2, "bad --expert-ahead-layers '9'", "-m", model, "--expert-ahead-layers",
                 "9", (char *)NULL);
    expect_usage(2, "bad --expert-ahead 'maybe'", "-m", model, "--expert-ahead", "maybe",
                 (char *)NULL);
    expect_usage(2, "unexpected argument", "-m", model, "extra", (char *)NULL);
    /* a missing model: one line naming it, exit 1 */
    expect_usage(1, "/nonexistent/model.cflow", "-m", "/nonexistent/model.cflow",
                 "--read-bw", "10", (char *)NULL);
    /* a context the model cannot hold (tiny-mixtral: 2048) */
    expect_usage(1, "context", "-m", model, "--read-bw", "10", "-d", "4096",
                 (char *)NULL);
}

static const char *str_of(json_object *o, const char *k)
{
    json_object *v = json_object_object_get(o, k);
    assert_non_null(v);
    return json_object_get_string(v);
}

static double num_of(json_object *o, const char *k)
{
    json_object *v = json_object_object_get(o, k);
    if (!v)
        fprintf(stderr, "missing field %s\n", k);
    assert_non_null(v);
    assert_true(json_object_is_type(v, json_type_int) ||
                json_object_is_type(v, json_type_double));
    return json_object_get_double(v);
}

/* -o json: one object per test in llama-bench's order and field names. */
static void test_json(void **state)
{
    (void)state;
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "bench", "-m", model, "-t", "1,2", "-p", "8",
                                  "-n", "4", "-d", "0,6", "-r", "3", "--read-bw", "10",
                                  "-o", "json", (char *)NULL), 0);
    if (p.status)
        fprintf(stderr, "%s", p.err);
    assert_int_equal(p.status, 0);
    json_object *a = json_tokener_parse(p.out);
    assert_non_null(a);
    assert_true(json_object_is_type(a, json_type_array));
    /* threads x depths x {pp8, tg4} */
    assert_int_equal(json_object_array_length(a), 2 * 2 * 2);
    for (size_t i = 0; i < json_object_array_length(a); i++) {
        json_object *o = json_object_array_get_idx(a, i);
        int threads = (int)num_of(o, "n_threads");
        int depth = (int)num_of(o, "n_depth");
        int np = (int)num_of(o, "n_prompt"), ng = (int)num_of(o, "n_gen");
        /* loops: threads outer, then depth, then pp before tg */
        assert_int_equal(threads, 1 + (int)(i / 4));
        assert_int_equal(depth, (i / 2) % 2 ? 6 : 0);
        if (i % 2 == 0) {
            assert_int_equal(np, 8);
            assert_int_equal(ng, 0);
        } else {
            assert_int_equal(np, 0);
            assert_int_equal(ng, 4);
        }
        assert_string_equal(str_of(o, "model_filename"), model);
        assert_string_equal(str_of(o, "backends"), "cflow");
        assert_true(num_of(o, "model_size") > 1e5);
        assert_true(num_of(o, "model_n_params") > 1e5);
        double avg = num_of(o, "avg_ts"), sd = num_of(o, "stddev_ts");
        assert_true(avg > 0 && isfinite(avg));
        assert_true(sd >= 0 && isfinite(sd));
        /* avg_ts is the mean of the samples, and each sample is the
         * test's tokens over its nanoseconds */
        json_object *sts = json_object_object_get(o, "samples_ts");
        json_object *sns = json_object_object_get(o, "samples_ns");
        assert_non_null(sts);
        assert_non_null(sns);
        assert_int_equal(json_object_array_length(sts), 3);
        assert_int_equal(json_object_array_length(sns), 3);
        double m = 0;
        for (size_t k = 0; k < 3; k++) {
            double ts = json_object_get_double(json_object_array_get_idx(sts, k));
            double ns = json_object_get_double(json_object_array_get_idx(sns, k));
            assert_true(ns > 0);
            assert_true(fabs(ts - (np + ng) / (ns * 1e-9)) <= 1e-3 * ts + 1.0);
            m += ts / 3;
        }
        assert_true(fabs(m - avg) <= 1e-6 * avg + 1e-6);
        /* GB/s and % of the given 10 GB/s on decode tests only */
        double gb = num_of(o, "gb_s"), pct = num_of(o, "bw_pct");
        assert_true(num_of(o, "read_bw_gbs") == 10.0);
        if (ng) {
            assert_true(num_of(o, "bytes_per_token") > 0);
            assert_true(fabs(gb - num_of(o, "bytes_per_token") * avg / 1e9) <=
                        1e-3 * gb + 1e-4);
            assert_true(fabs(pct - 10.0 * gb) <= 1e-2 * pct + 1e-2);
        } else {
            assert_true(gb == 0 && pct == 0);
        }
        assert_string_equal(str_of(o, "prefetch"), "off");
        assert_string_equal(str_of(o, "expert_io"), "auto:mmap");   /* the default */
    }
    json_object_put(a);
    tu_proc_free(&p);
}

/* The JSON array a bench run printed, after its exit status 0; it holds n
 * tests. */
static json_object *json_of(const tu_proc *p, size_t n)
{
    if (p->status)
        fprintf(stderr, "%s", p->err);
    assert_int_equal(p->status, 0);
    json_object *a = json_tokener_parse(p->out);
    assert_non_null(a);
    assert_int_equal(json_object_array_length(a), n);
    return a;
}

/* The expert figures of a sync test with a cache that holds every expert,
 * after `warm` untimed repetitions: *routed, *misses. */
static void cached_run(const char *warm, double *routed, double *misses)
{
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "bench", "-m", model, "-p", "0", "-n", "8", "-r", "1",
                                  "--read-bw", "10", "--expert-io", "sync", "--expert-cache",
                                  "64M", "--no-warmup", "--warmup-reps", warm, "-o", "json",
                                  "--no-log", (char *)NULL), 0);
    json_object *a = json_of(&p, 1);
    json_object *o = json_object_array_get_idx(a, 0);
    assert_int_equal((int)num_of(o, "repetitions"), 1);
    *misses = num_of(o, "expert_misses");
    *routed = num_of(o, "expert_hits") + *misses;
    json_object_put(a);
    tu_proc_free(&p);
}

/* --expert-ahead reaches the engine (ui_settings_eng_opts): a sync test
 * with a cache makes look-ahead guesses (pred_acc a number) unless it is
 * off (pred_acc null: no predictions); the run log keeps the setting
 * (bench.expert_ahead: 0 off, else the layers). */
static void test_expert_ahead(void **state)
{
    (void)state;
    char db[4096];
    snprintf(db, sizeof db, "%s", tu_tmp("bench-ahead.db"));
    remove(db);
    for (int on = 0; on <= 1; on++) {
        tu_proc p;
        assert_int_equal(tu_cflow_run(&p, "bench", "-m", model, "-p", "0", "-n", "8", "-r",
                                      "1", "--read-bw", "10", "--expert-io", "sync",
                                      "--expert-cache", "64M", "--expert-ahead",
                                      on ? "on" : "off", "--expert-ahead-layers", "2",
                                      "--no-warmup", "-o", "json", "--db", db,
                                      (char *)NULL), 0);
        json_object *a = json_of(&p, 1);
        json_object *o = json_object_array_get_idx(a, 0);
        json_object *v = json_object_object_get(o, "pred_acc");
        fprintf(stderr, "--expert-ahead %s: pred_acc %s\n", on ? "on" : "off",
                v ? json_object_get_string(v) : "null");
        if (on) {
            assert_non_null(v);
            assert_true(json_object_is_type(v, json_type_double) ||
                        json_object_is_type(v, json_type_int));
        } else
            assert_true(v == NULL || json_object_is_type(v, json_type_null));
        json_object_put(a);
        tu_proc_free(&p);
        assert_int_equal(tu_db_int(db, "SELECT expert_ahead FROM bench ORDER BY id DESC"
                                       " LIMIT 1"), on ? 2 : 0);
    }
}

/* --warmup-reps (without the short warm-up run): the untimed repetitions
 * fill the expert cache and are not counted, so the timed one routes as
 * many experts and reads fewer. */
static void test_warmup_reps(void **state)
{
    (void)state;
    double routed0, misses0, routed3, misses3;
    cached_run("0", &routed0, &misses0);
    cached_run("3", &routed3, &misses3);
    fprintf(stderr, "--warmup-reps 0: %.0f of %.0f routed experts read; 3: %.0f of %.0f\n",
            misses0, routed0, misses3, routed3);
    assert_true(routed0 > 0);
    assert_true(routed3 == routed0);   /* one repetition's routings, not four */
    assert_true(misses0 > 0);
    assert_true(misses3 < misses0);
}

/* The routed experts (hits + misses) and misses of row i of a JSON array. */
static void routed_of(json_object *a, size_t i, double *routed, double *misses)
{
    json_object *o = json_object_array_get_idx(a, i);
    *misses = num_of(o, "expert_misses");
    *routed = num_of(o, "expert_hits") + *misses;
}

/* A bench run of tiny-mixtral's tg6, 2 repetitions, no warm-up, JSON;
 * the options after them, NULL-terminated; n rows expected. */
static json_object *tg6(tu_proc *p, size_t n, ...)
{
    char *argv[32];
    const char *fixed[] = { tu_cflow(), "bench", "-m", model, "-t", "1", "-p", "0", "-n", "6",
                            "-r", "2", "--no-warmup", "--read-bw", "10", "-o", "json",
                            "--no-log" };
    int k = 0;
    for (size_t j = 0; j < sizeof fixed / sizeof fixed[0]; j++)
        argv[k++] = (char *)fixed[j];
    va_list ap;
    va_start(ap, n);
    for (char *x; (x = va_arg(ap, char *)) != NULL && k < 31;)
        argv[k++] = x;
    va_end(ap);
    argv[k] = NULL;
    assert_int_equal(tu_run(p, argv, NULL, 120), 0);
    return json_of(p, n);
}

/* --batch-decode: a tg test of B sequences decodes them together, a token
 * of each a step; its row says B (n_batch, "tg6 x3" in the md table) and
 * its t/s counts every sequence's tokens (samples_ts = 6 B / samples_ns);
 * B 0 and --interleave with B > 1 are refused. */
static void test_batch_decode(void **state)
{
    (void)state;
    tu_proc p;
    json_object *a = tg6(&p, 2, "-B", "1,3", (char *)NULL);
    for (size_t i = 0; i < 2; i++) {
        json_object *o = json_object_array_get_idx(a, i);
        const int nb = i ? 3 : 1;
        assert_int_equal((int)num_of(o, "n_batch"), nb);
        assert_int_equal((int)num_of(o, "n_gen"), 6);
        json_object *sts = json_object_object_get(o, "samples_ts");
        json_object *sns = json_object_object_get(o, "samples_ns");
        for (size_t k = 0; k < 2; k++) {
            double ts = json_object_get_double(json_object_array_get_idx(sts, k));
            double ns = json_object_get_double(json_object_array_get_idx(sns, k));
            assert_true(ns > 0 && fabs(ts - 6 * nb / (ns * 1e-9)) <= 1e-3 * ts + 1.0);
        }
    }
    json_object_put(a);
    tu_proc_free(&p);
    assert_int_equal(tu_cflow_run(&p, "bench", "-m", model, "-t", "1", "-p", "0", "-n", "2",
                                  "-r", "1", "--batch-decode", "2", "--read-bw", "10",
                                  "--no-log", (char *)NULL), 0);
    assert_int_equal(p.status, 0);
    assert_non_null(strstr(p.out, "| tg2 x2 |"));
    tu_proc_free(&p);
    expect_usage(2, "bad -B '0'", "-m", model, "-B", "0", (char *)NULL);
    expect_usage(2, "--interleave and --batch-decode", "-m", model, "-B", "1,2",
                 "--interleave", (char *)NULL);
}

/* --interleave: the tg tests of the lists' settings take turns a token
 * each.  Each row counts its own tokens (every routed expert of 6 tokens
 * x 2 repetitions, as the same test run alone), runs them under its own
 * settings (mmap's row reads nothing, sync's reads what it routes, with
 * no cache), is timed over them (samples_ts = 6 / samples_ns) and says
 * how many took turns; --expert-ahead-layers takes a list, a test each,
 * kept in the rows and the run log; more than 16 settings are refused. */
static void test_interleave(void **state)
{
    (void)state;
    tu_proc p;
    double alone, alone_miss, r0, m0, r1, m1;
    json_object *a = tg6(&p, 1, "--expert-io", "sync", "--expert-cache", "64M", (char *)NULL);
    routed_of(a, 0, &alone, &alone_miss);
    assert_true(alone > 0);
    json_object_put(a);
    tu_proc_free(&p);

    a = tg6(&p, 2, "--interleave", "--expert-io", "sync,staged", "--expert-cache", "64M",
            (char *)NULL);
    assert_non_null(strstr(p.err, "tg6: 2 settings took turns a token each"));
    routed_of(a, 0, &r0, &m0);
    routed_of(a, 1, &r1, &m1);
    fprintf(stderr, "alone %.0f routed; interleaved sync %.0f, staged %.0f\n", alone, r0, r1);
    assert_true(r0 == alone && r1 == alone);
    for (size_t i = 0; i < 2; i++) {
        json_object *o = json_object_array_get_idx(a, i);
        assert_string_equal(str_of(o, "expert_io"), i ? "staged" : "sync");
        assert_int_equal((int)num_of(o, "n_gen"), 6);
        assert_int_equal((int)num_of(o, "interleave"), 2);
        json_object *sts = json_object_object_get(o, "samples_ts");
        json_object *sns = json_object_object_get(o, "samples_ns");
        for (size_t k = 0; k < 2; k++) {
            double ts = json_object_get_double(json_object_array_get_idx(sts, k));
            double ns = json_object_get_double(json_object_array_get_idx(sns, k));
            assert_true(ns > 0 && fabs(ts - 6 / (ns * 1e-9)) <= 1e-3 * ts + 1.0);
        }
    }
    json_object_put(a);
    tu_proc_free(&p);

    /* mmap then sync without a cache: only sync's tokens read */
    a = tg6(&p, 2, "--interleave", "--expert-io", "mmap,sync", "--expert-cache", "off",
            (char *)NULL);
    json_object *mm = json_object_object_get(json_object_array_get_idx(a, 0), "expert_misses");
    assert_true(mm == NULL || json_object_is_type(mm, json_type_null) ||
                json_object_get_double(mm) == 0);
    routed_of(a, 1, &r1, &m1);
    assert_true(r1 == alone && m1 == alone);
    json_object_put(a);
    tu_proc_free(&p);

    /* look-ahead depths, interleaved and not, in the rows and the log */
    char db[4096];
    snprintf(db, sizeof db, "%s", tu_tmp("bench-interleave.db"));
    remove(db);
    for (int il = 0; il <= 1; il++) {
        assert_int_equal(tu_cflow_run(&p, "bench", "-m", model, "-t", "1", "-p", "0", "-n", "6",
                                      "-r", "1", "--read-bw", "10", "--expert-io", "sync",
                                      "--expert-cache", "64M", "--expert-ahead-layers", "2,1",
                                      "-o", "json", "--db", db,
                                      il ? "--interleave" : "--no-warmup", (char *)NULL), 0);
        a = json_of(&p, 2);
        for (size_t i = 0; i < 2; i++) {
            json_object *o = json_object_array_get_idx(a, i);
            assert_int_equal((int)num_of(o, "expert_ahead"), 2 - (int)i);
            assert_int_equal((int)num_of(o, "interleave"), il ? 2 : 1);
            num_of(o, "pred_acc");   /* guesses were made at each depth */
        }
        json_object_put(a);
        tu_proc_free(&p);
        assert_int_equal(tu_db_int(db, "SELECT expert_ahead FROM bench ORDER BY id DESC"
                                       " LIMIT 1"), 1);
        assert_int_equal(tu_db_int(db, "SELECT expert_ahead FROM bench ORDER BY id DESC"
                                       " LIMIT 1 OFFSET 1"), 2);
        assert_int_equal(tu_db_int(db, "SELECT interleave FROM bench ORDER BY id DESC"
                                       " LIMIT 1"), il ? 2 : 1);
    }
    expect_usage(2, "--interleave: 20 settings", "-m", model, "--interleave", "-t", "1-5",
                 "--expert-io", "mmap,sync,staged,auto", (char *)NULL);
}

static void test_md_csv(void **state)
{
    (void)state;
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "bench", "-m", model, "-t", "1", "-p", "4,8",
                                  "-n", "2", "-r", "2", "--read-bw", "10", (char *)NULL),
                     0);
    assert_int_equal(p.status, 0);
    /* header, separator, pp4, pp8, tg2 */
    assert_int_equal(tu_count_lines(p.out), 5);
    assert_non_null(strstr(p.out, "| pp4 |"));
    assert_non_null(strstr(p.out, "| pp8 |"));
    assert_non_null(strstr(p.out, "| tg2 |"));
    assert_non_null(strstr(p.out, " ± "));
    /* a MoE model: the expert columns and the mode auto chose, without
     * --expert-io */
    assert_non_null(strstr(p.out, "| expert_io |"));
    assert_non_null(strstr(p.out, "| hit % | MiB/tok | bound t/s | % bound |"));
    assert_non_null(strstr(p.out, "| auto:mmap | tg2 |"));
    tu_proc_free(&p);
    assert_int_equal(tu_cflow_run(&p, "bench", "-m", model, "-t", "1", "-p", "0",
                                  "-n", "2", "-r", "1", "--read-bw", "10", "-o", "csv",
                                  (char *)NULL), 0);
    assert_int_equal(p.status, 0);
    assert_int_equal(tu_count_lines(p.out), 2);
    assert_true(strncmp(p.out, "model_filename,", 15) == 0);
    assert_non_null(strstr(p.out, ",n_threads,n_prompt,n_gen,n_depth,"));
    assert_non_null(strstr(p.out, ",avg_ts,stddev_ts,"));
    tu_proc_free(&p);
}

static void test_membw_l1d(void **state)
{
    (void)state;
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "bench", "membw", "-t", "1", "-r", "1", "-o",
                                  "json", "--no-log", (char *)NULL), 0);
    assert_int_equal(p.status, 0);
    json_object *a = json_tokener_parse(p.out);
    assert_non_null(a);
    assert_int_equal(json_object_array_length(a), 1);
    assert_true(num_of(json_object_array_get_idx(a, 0), "median_gb_s") > 0);
    json_object_put(a);
    tu_proc_free(&p);

    assert_int_equal(tu_cflow_run(&p, "bench", "l1d", "--rows-div", "64", "-r", "1",
                                  "-o", "json", (char *)NULL), 0);
    assert_int_equal(p.status, 0);
    a = json_tokener_parse(p.out);
    assert_non_null(a);
    assert_int_equal(json_object_array_length(a), 4);
    for (size_t i = 0; i < 4; i++) {
        json_object *o = json_object_array_get_idx(a, i);
        assert_true(num_of(o, "tiled_ms") > 0 && num_of(o, "rowmajor_ms") > 0);
    }
    assert_int_equal((int)num_of(json_object_array_get_idx(a, 3), "cols"), 32768);
    /* the layouts computed the same product (checked inside), and the
     * counters are accounted for one way or the other */
    assert_null(strstr(p.err, "disagree"));
    assert_non_null(strstr(p.err, "L1D"));
    json_object_put(a);
    tu_proc_free(&p);
}

/* bench's read_bw_gbs in the one bench row of db whose n_threads is t */
static double bench_bw(const char *db, int t)
{
    char sql[160], out[64];
    snprintf(sql, sizeof sql, "SELECT printf('%%.3f', read_bw_gbs) FROM bench WHERE"
             " n_threads = %d ORDER BY id DESC LIMIT 1", t);
    tu_db_text(db, sql, out, sizeof out);
    return atof(out);
}

/* membw: the median of -r passes with min and max, recorded in the run log
 * per machine and thread count; a later `cflow bench` takes "% bw" from
 * the recorded figure (unless --read-bw), and measures and records one
 * for a thread count the log has none for. */
static void test_membw_recorded(void **state)
{
    (void)state;
    const char *db = tu_tmp("membw.db");
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "bench", "membw", "-t", "1", "-r", "3", "-o", "json",
                                  "--db", db, (char *)NULL), 0);
    assert_true(tu_ok(&p, "bench membw"));
    json_object *a = json_tokener_parse(p.out);
    assert_non_null(a);
    assert_int_equal(json_object_array_length(a), 1);
    json_object *o = json_object_array_get_idx(a, 0);
    const double med = num_of(o, "median_gb_s");
    assert_true(num_of(o, "min_gb_s") > 0 && num_of(o, "min_gb_s") <= med &&
                med <= num_of(o, "max_gb_s"));
    assert_int_equal((int)num_of(o, "passes"), 3);
    assert_true(num_of(o, "bytes") >= 64.0 * (1 << 20));
    json_object_put(a);
    tu_proc_free(&p);
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM membw WHERE threads = 1 AND"
                                   " passes = 3 AND min_gbs <= median_gbs AND"
                                   " median_gbs <= max_gbs AND cores > 0"), 1);
    assert_int_equal(tu_db_int(db, "PRAGMA user_version"), PROF_LOG_SCHEMA);

    /* a later figure no measurement gives, so that its reuse shows */
    tu_db_int(db, "INSERT INTO membw(hostname, cpu_model, cores, threads, measured, passes,"
                  " bytes, median_gbs, min_gbs, max_gbs) SELECT hostname, cpu_model, cores,"
                  " 1, measured, 3, bytes, 4321.5, 4000, 4500 FROM membw");
    assert_int_equal(tu_cflow_run(&p, "bench", "-m", model, "-t", "1", "-p", "0", "-n", "2",
                                  "-r", "1", "--db", db, (char *)NULL), 0);
    assert_true(tu_ok(&p, "bench with the recorded figure"));
    assert_non_null(strstr(p.err, "machine read bandwidth 4321.50 GB/s (1 threads"));
    assert_non_null(strstr(p.err, "from the run log"));
    tu_proc_free(&p);
    assert_true(fabs(bench_bw(db, 1) - 4321.5) < 1e-6);

    /* --read-bw wins over the log */
    assert_int_equal(tu_cflow_run(&p, "bench", "-m", model, "-t", "1", "-p", "0", "-n", "2",
                                  "-r", "1", "--read-bw", "77", "--db", db, (char *)NULL), 0);
    assert_true(tu_ok(&p, "bench --read-bw"));
    assert_null(strstr(p.err, "from the run log"));
    tu_proc_free(&p);
    assert_true(fabs(bench_bw(db, 1) - 77.0) < 1e-6);

    /* no figure at 2 threads: measured now, recorded, then reused */
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM membw WHERE threads = 2"), 0);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(tu_cflow_run(&p, "bench", "-m", model, "-t", "2", "-p", "0", "-n",
                                      "2", "-r", "1", "--db", db, (char *)NULL), 0);
        assert_true(tu_ok(&p, "bench -t 2"));
        assert_non_null(strstr(p.err, k ? "from the run log" : "measured now, recorded"));
        tu_proc_free(&p);
        assert_int_equal(tu_db_int(db, "SELECT count(*) FROM membw WHERE threads = 2"), 1);
    }
    assert_true(bench_bw(db, 2) > 0);
    char want[64];
    tu_db_text(db, "SELECT printf('%.3f', median_gbs) FROM membw WHERE threads = 2", want,
               sizeof want);
    assert_true(fabs(bench_bw(db, 2) - atof(want)) < 1e-6);
}

/* directio: every prefetch x expert-io combination, switched between tests
 * on one loaded model, in that order. */
static void test_directio(void **state)
{
    (void)state;
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "bench", "directio", "-m", model, "-t", "1", "-n",
                                  "2", "-r", "1", "--read-bw", "10", "-o", "json",
                                  "--no-log", (char *)NULL), 0);
    json_object *a = json_of(&p, 6);
    static const char *const xio[] = { "mmap", "sync", "staged" };
    for (size_t i = 0; i < 6; i++) {
        json_object *o = json_object_array_get_idx(a, i);
        assert_string_equal(str_of(o, "expert_io"), xio[i / 2]);
        assert_string_equal(str_of(o, "prefetch"), i % 2 ? "on" : "off");
        assert_int_equal((int)num_of(o, "n_prompt"), 0);
        assert_int_equal((int)num_of(o, "n_gen"), 2);
        assert_true(num_of(o, "avg_ts") > 0);
    }
    json_object_put(a);
    tu_proc_free(&p);
}

/* Each test is a row of the run log's bench table, with the JSON's values. */
static void test_log(void **state)
{
    (void)state;
    tu_proc p;
    const char *db = tu_tmp("bench-runs.db");
    assert_int_equal(tu_cflow_run(&p, "bench", "-m", model, "-t", "1", "-p", "4",
                                  "-n", "3", "-r", "2", "--read-bw", "10", "-o", "json",
                                  "--db", db, (char *)NULL), 0);
    assert_int_equal(p.status, 0);
    json_object *a = json_tokener_parse(p.out);
    assert_non_null(a);
    assert_int_equal(json_object_array_length(a), 2);
    sqlite3 *d = NULL;
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_open_v2(db, &d, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(d,
        "SELECT b.n_threads, b.n_prompt, b.n_gen, b.n_depth, b.avg_ts, b.stddev_ts,"
        " b.repetitions, s.program, m.path FROM bench b JOIN session s ON"
        " s.id = b.session_id JOIN model m ON m.id = s.model_id ORDER BY b.id",
        -1, &st, NULL), SQLITE_OK);
    size_t i = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        assert_true(i < 2);
        json_object *o = json_object_array_get_idx(a, i++);
        assert_int_equal(sqlite3_column_int(st, 0), (int)num_of(o, "n_threads"));
        assert_int_equal(sqlite3_column_int(st, 1), (int)num_of(o, "n_prompt"));
        assert_int_equal(sqlite3_column_int(st, 2), (int)num_of(o, "n_gen"));
        assert_int_equal(sqlite3_column_int(st, 3), (int)num_of(o, "n_depth"));
        double avg = num_of(o, "avg_ts");
        assert_true(fabs(sqlite3_column_double(st, 4) - avg) <= 1e-5 * avg);
        assert_int_equal(sqlite3_column_int(st, 6), 2);
        assert_string_equal((const char *)sqlite3_column_text(st, 7), "cflow bench");
        assert_non_null(strstr((const char *)sqlite3_column_text(st, 8), "bench-tiny.cflow"));
    }
    assert_int_equal(i, 2);
    sqlite3_finalize(st);
    sqlite3_close(d);
    json_object_put(a);
    tu_proc_free(&p);
    /* --no-log leaves a log alone */
    const char *db2 = tu_tmp("bench-nolog.db");
    assert_int_equal(tu_cflow_run(&p, "bench", "-m", model, "-t", "1", "-p", "0",
                                  "-n", "1", "-r", "1", "--read-bw", "10", "--no-log",
                                  "--db", db2, (char *)NULL), 0);
    assert_int_equal(p.status, 0);
    assert_null(tu_read_file(db2, NULL));
    tu_proc_free(&p);
}

static void test_synth_gguf_refusals(void **state)
{
    (void)state;
    tu_proc p;
    const char *out = tu_tmp("refused.gguf");
    assert_int_equal(tu_cflow_run(&p, "synth", "--gguf", "report-arch1", out,
                                  (char *)NULL), 0);
    assert_int_equal(p.status, 1);
    assert_non_null(strstr(p.err, "cannot be written as GGUF"));
    tu_proc_free(&p);
    assert_int_equal(tu_cflow_run(&p, "synth", "--vocab", "x.gguf", "tiny-mixtral", out,
                                  (char *)NULL), 0);
    assert_int_equal(p.status, 2);
    tu_proc_free(&p);
    assert_int_equal(tu_cflow_run(&p, "synth", "--gguf", "--vocab", "/nonexistent.gguf",
                                  "tiny-mixtral", out, (char *)NULL), 0);
    assert_int_equal(p.status, 1);
    assert_non_null(strstr(p.err, "/nonexistent.gguf"));
    tu_proc_free(&p);
}

/* A model's routing key is the file's text: a quote, a backslash and a
 * newline in it (planted in a zipf model's "zipf:1.5") reach the routing
 * field as '?', so the JSON still parses and the CSV is still one line a
 * row (they broke both before). */
static void test_hostile_routing(void **state)
{
    (void)state;
    const char *z = tu_tmp("zipf.cflow");
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "synth", "--routing", "zipf:1.5", "tiny-mixtral", z,
                                  (char *)NULL), 0);
    assert_int_equal(p.status, 0);
    tu_proc_free(&p);
    size_t n;
    uint8_t *b = tu_slurp(z, &n);
    uint8_t *at = memmem(b, n, "zipf:1.5", 8);
    assert_non_null(at);
    memcpy(at, "zi\"f\\:\n5", 8);
    tu_spit(z, b, n);
    free(b);
    assert_int_equal(tu_cflow_run(&p, "bench", "-m", z, "-t", "1", "-p", "0", "-n", "2", "-r",
                                  "1", "--expert-io", "sync", "--expert-cache", "64K",
                                  "--read-bw", "10", "-o", "json", "--no-log", (char *)NULL), 0);
    assert_int_equal(p.status, 0);
    json_object *a = json_of(&p, 1);
    assert_string_equal(str_of(json_object_array_get_idx(a, 0), "routing"),
                        "zi?f?:?5 routing (cflow synth)");
    json_object_put(a);
    tu_proc_free(&p);
    assert_int_equal(tu_cflow_run(&p, "bench", "-m", z, "-t", "1", "-p", "0", "-n", "2", "-r",
                                  "1", "--expert-io", "sync", "--expert-cache", "64K",
                                  "--read-bw", "10", "-o", "csv", "--no-log", (char *)NULL), 0);
    assert_int_equal(p.status, 0);
    assert_int_equal(tu_count_lines(p.out), 2);
    assert_non_null(strstr(p.out, ",\"zi?f?:?5 routing (cflow synth)\","));
    tu_proc_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_args),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_warmup_reps),
        cmocka_unit_test(test_expert_ahead),
        cmocka_unit_test(test_interleave),
        cmocka_unit_test(test_batch_decode),
        cmocka_unit_test(test_md_csv),
        cmocka_unit_test(test_membw_l1d),
        cmocka_unit_test(test_membw_recorded),
        cmocka_unit_test(test_directio),
        cmocka_unit_test(test_log),
        cmocka_unit_test(test_synth_gguf_refusals),
        cmocka_unit_test(test_hostile_routing),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
