/*
 * test_xio_figures.c — the expert streaming figures (issue 17 items 5 and
 * 7) and the read bandwidth "% of read bw" divides by (issue 18), through
 * the real `cflow run` and `cflow bench` on a synthetic MoE model:
 *
 *   1. `cflow run --expert-io sync --expert-cache SIZE` prints the hit
 *      rate, bytes per token, storage GB/s and the storage-bound limit;
 *      they hold together (hits + misses = decoded tokens x top-k x MoE
 *      layers; bytes = misses x the expert's length from `cflow inspect`;
 *      bytes per token = bytes / tokens; limit = GB/s / bytes per token;
 *      the fraction reached = tok/s / limit), and the run log's row holds
 *      the same numbers, the resolved mode and the cache's size;
 *      look-ahead's accuracy (a standard MoE) is right / predictions;
 *   2. a storage bandwidth recorded for the model's device (the diskbw
 *      table) becomes the limit's bandwidth;
 *   3. --expert-io auto says which mode it chose, on stderr and in the log;
 *   4. the run log records the model as the user named it (a GGUF) beside
 *      the conversion that ran;
 *   5. `cflow bench -o csv` carries the figures, consistent with its
 *      counts, and the bench table holds them;
 *   6. `cflow run`'s "% of read bw" divides by the membw median stored for
 *      the host and thread count, and says where a figure came from when
 *      none is stored.
 *
 * "The report" (with its section numbers) is the Pipeline-Native
 * Transformers report.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

static char model[4096];
static unsigned n_moe, top_k;
static uint64_t expert_len;

static int setup(void **state)
{
    (void)state;
    snprintf(model, sizeof model, "%s", tu_tmp("tiny-moe.cflow"));
    tu_moe g;   /* the geometry the figures must agree with */
    tu_synth_moe("tiny-moe", model, &g);
    n_moe = g.n_moe;
    top_k = g.top_k;
    expert_len = g.expert_len;
    return 0;
}

/* The first line of s containing needle, or fail. */
static const char *line_with(const char *s, const char *needle)
{
    const char *l = strstr(s, needle);
    if (!l)
        fprintf(stderr, "no \"%s\" in:\n%s\n", needle, s);
    assert_non_null(l);
    return l;
}

static double db_real(const char *db, const char *sql)
{
    char buf[64];
    tu_db_text(db, sql, buf, sizeof buf);
    assert_true(buf[0] != '\0');
    return strtod(buf, NULL);
}

/* got within rel of want, or within abs of it (what printing rounds) */
static void near_abs(double got, double want, double rel, double abs, const char *what)
{
    if (!(fabs(got - want) <= rel * fabs(want) + abs)) {
        fprintf(stderr, "%s: got %.9g, want %.9g\n", what, got, want);
        fail();
    }
}

static void near(double got, double want, double rel, const char *what)
{
    near_abs(got, want, rel, 1e-12, what);
}

/* What one `cflow run` printed of the figures. */
typedef struct run_fig {
    unsigned long long hits, total, misses, n_dec;
    double hit_pct, mib_tok, gbs, depth, limit, bound, reached, tok_s;
    double ov_limit, ov_reached;   /* -1: no overlapped bound printed */
} run_fig;

static void parse_run(const char *err, const char *mode, run_fig *f)
{
    char needle[64];
    memset(f, 0, sizeof *f);
    assert_int_equal(sscanf(line_with(err, "; decode "), "; decode %llu tokens in %*f s (%lf",
                            &f->n_dec, &f->tok_s), 2);
    snprintf(needle, sizeof needle, "cflow: experts %s: cache ", mode);
    const char *l = strstr(line_with(err, needle), ": hit rate ");
    assert_int_equal(sscanf(l, ": hit rate %lf%% (%llu of %llu routed experts in RAM, %llu read)",
                            &f->hit_pct, &f->hits, &f->total, &f->misses), 4);
    snprintf(needle, sizeof needle, "cflow: experts %s: storage: ", mode);
    l = line_with(err, needle) + strlen(needle);
    assert_int_equal(sscanf(l, "%lf MiB/token read, %lf GB/s while busy (%*f s), queue depth %lf",
                            &f->mib_tok, &f->gbs, &f->depth), 3);
    snprintf(needle, sizeof needle, "cflow: experts %s: storage-bound ", mode);
    l = line_with(err, needle) + strlen(needle);
    assert_int_equal(sscanf(l, "%lf tok/s at %lf GB/s", &f->limit, &f->bound), 2);
    l = line_with(l, "): ");
    assert_int_equal(sscanf(l, "): %lf%% reached", &f->reached), 1);
    f->ov_limit = f->ov_reached = -1;
    const char *ov = strstr(l, "; overlapped with compute ");
    if (ov && ov < strchr(l, '\n'))
        assert_int_equal(sscanf(ov, "; overlapped with compute %lf tok/s: %lf%%", &f->ov_limit,
                                &f->ov_reached), 2);
}

/* The schema 8 figures of run id's row hold together: a token's compute
 * time is its time less its stall, the overlapped bound one over the
 * larger of that and its read time, and they are what the run printed. */
static void check_overlap(const char *db, int id, const run_fig *f)
{
    char q[256];
#define RUNQ(col) (snprintf(q, sizeof q, "SELECT " col " FROM run WHERE id = %d", id), q)
    double limit = db_real(db, RUNQ("xio_limit_tok_s"));
    double tok_s = db_real(db, RUNQ("xio_reached")) * limit;
    double stall = db_real(db, RUNQ("xio_stall_s"));
    double tokens = (double)tu_db_int(db, RUNQ("xio_tokens"));
    double c = db_real(db, RUNQ("xio_compute_s_tok"));
    assert_true(stall >= 0 && c >= 0);
    double want_c = 1.0 / tok_s - stall / tokens;
    near_abs(c, want_c > 0 ? want_c : 0, 1e-6, 1e-9, "logged compute s/token");
    double t = 1.0 / limit > c ? 1.0 / limit : c;
    double ov = db_real(db, RUNQ("xio_ov_limit_tok_s"));
    near(ov, 1.0 / t, 1e-6, "logged overlapped bound");
    assert_true(ov <= limit * (1 + 1e-9));   /* never above the storage bound */
    near(db_real(db, RUNQ("xio_ov_reached")), tok_s / ov, 1e-6, "logged overlapped reached");
    assert_true(f->ov_limit > 0);
    near(f->ov_limit, ov, 0.006, "overlapped bound as printed");
    near_abs(f->ov_reached, 100.0 * tok_s / ov, 0, 0.051, "overlapped reached as printed");
#undef RUNQ
}

/* 1: the figures of a sync run with a cache hold together, in the output
 * and in the run log. */
static void test_run_figures(void **state)
{
    (void)state;
    const char *db = tu_tmp("fig.db");
    char *const env[] = { "CFLOW_READ_BW_GBS=10", NULL };
    tu_proc p;
    uint64_t len_seen = 0;
    char cache_line[256] = "";
    for (int cached = 0; cached < 2; cached++) {
        assert_int_equal(tu_cflow_env(&p, env, "run", "-m", model, "-p", "the cat sat", "-n",
                                      "12", "--temp", "0", "--ignore-eos", "-t", "1",
                                      "--expert-io", "sync", "--expert-cache",
                                      cached ? "128K" : "off", "--db", db, (char *)NULL), 0);
        assert_true(tu_ok(&p, "run --expert-io sync"));
        run_fig f;
        parse_run(p.err, "sync", &f);
        static const char pre[] = "cflow: experts sync: ";
        const char *cl = strstr(line_with(p.err, pre), "cache ");
        /* the routing follows (issue 17 item 8): tiny-moe's routers are random */
        const char *end = strstr(cl, " read); ");
        assert_non_null(end);
        static const char tail[] = " read); uniform routing (cflow synth: random routers)\n";
        assert_int_equal(strncmp(end, tail, sizeof tail - 1), 0);
        snprintf(cache_line, sizeof cache_line, "%.*s", (int)(end - cl) + 6, cl);
        tu_proc_free(&p);
        /* every decoded token routes top-k experts in every MoE layer */
        assert_int_equal(f.n_dec, 11);
        assert_int_equal(f.total, f.n_dec * top_k * n_moe);
        assert_int_equal(f.hits + f.misses, f.total);
        near(f.hit_pct, 100.0 * (double)f.hits / (double)f.total, 0.002, "hit rate");
        if (cached)
            assert_true(f.hits > 0 && f.misses > 0);   /* 128K holds some experts, not all */
        else
            assert_int_equal(f.hits, 0);
        /* a miss reads one expert: bytes per token from the expert's length */
        /* printed to 4 and 3 significant digits */
        near(f.mib_tok, (double)(f.misses * expert_len) / (double)f.n_dec / 1048576.0, 0.0006,
             "MiB per token");
        near(f.bound, f.gbs, 1e-9, "the limit's bandwidth (the reads' own)");
        near(f.limit, f.bound * 1e9 / ((double)(f.misses * expert_len) / (double)f.n_dec),
             0.006, "storage-bound tok/s");
        near(f.reached, 100.0 * f.tok_s / f.limit, 0.01, "reached");

        /* the run log's row: the same counts and figures */
        char q[256], txt[64];
        int id = cached + 1;
#define RUNQ(col) (snprintf(q, sizeof q, "SELECT " col " FROM run WHERE id = %d", id), q)
        assert_int_equal(tu_db_int(db, RUNQ("xio_hits")), (int64_t)f.hits);
        assert_int_equal(tu_db_int(db, RUNQ("xio_misses")), (int64_t)f.misses);
        assert_int_equal(tu_db_int(db, RUNQ("xio_tokens")), (int64_t)f.n_dec);
        int64_t bytes = tu_db_int(db, RUNQ("xio_bytes"));
        assert_int_equal(bytes, (int64_t)(f.misses * expert_len));
        near(db_real(db, RUNQ("xio_bytes_tok")), (double)bytes / (double)f.n_dec, 1e-9,
             "logged bytes per token");
        near(db_real(db, RUNQ("xio_hit_rate")), (double)f.hits / (double)f.total, 1e-9,
             "logged hit rate");
        double gbs = db_real(db, RUNQ("xio_gb_s")), bt = db_real(db, RUNQ("xio_bytes_tok"));
        near(db_real(db, RUNQ("xio_limit_tok_s")), gbs * 1e9 / bt, 1e-9, "logged limit");
        near(db_real(db, RUNQ("xio_limit_tok_s")), f.limit, 0.01, "logged limit as printed");
        tu_db_text(db, RUNQ("expert_io || '/' || expert_io_asked"), txt, sizeof txt);
        assert_string_equal(txt, "sync/sync");
        int64_t cache = tu_db_int(db, RUNQ("expert_cache_bytes"));
        assert_true(cached ? cache > 0 && cache <= 128 * 1024 : cache == 0);
        /* sync: a routing's misses (one chunk each here) go out together and
         * are waited for at once, so between 1 and top-k are outstanding */
        if (f.misses) {
            assert_true(f.depth >= 0.99 && f.depth <= top_k + 0.01);
            double d = db_real(db, RUNQ("xio_depth"));
            near(d, db_real(db, RUNQ("xio_depth_s")) / db_real(db, RUNQ("xio_s")), 1e-9,
                 "logged queue depth");
            near_abs(f.depth, d, 0, 0.006, "queue depth as printed");
        }
        assert_int_equal(tu_db_int(db, RUNQ("xio_pred_acc IS NULL")), 1);
        /* sync waits for every miss where it routes: a run that read stalled */
        if (f.misses) {
            assert_true(db_real(db, RUNQ("xio_stall_s")) > 0);
            check_overlap(db, id, &f);
        }
        assert_int_equal(tu_db_int(db, RUNQ("xio_pred_reads + xio_pred_bytes")), 0);
        assert_int_equal(tu_db_int(db, RUNQ("xio_wasted_tok IS NULL")), 1);
#undef RUNQ
        if (!len_seen)
            len_seen = (uint64_t)bytes;
    }
    assert_true(len_seen > 0);
    /* cflow runs show prints the logged figures as cflow run did */
    assert_int_equal(tu_cflow_run(&p, "runs", "show", "2", "--db", db, (char *)NULL), 0);
    assert_true(tu_ok(&p, "runs show"));
    if (!strstr(p.out, cache_line))
        fprintf(stderr, "no \"%s\" in:\n%s", cache_line, p.out);
    assert_non_null(strstr(p.out, cache_line));
    tu_proc_free(&p);
}

/* 1b: look-ahead on a standard MoE (expert_delay 0): its accuracy is
 * right / predictions, as printed and as logged. */
static void test_lookahead(void **state)
{
    (void)state;
    char mx[4096];
    snprintf(mx, sizeof mx, "%s", tu_tmp("tiny-mixtral.cflow"));
    tu_moe g;
    tu_synth_moe("tiny-mixtral", mx, &g);
    const char *db = tu_tmp("ahead.db");
    char *const env[] = { "CFLOW_READ_BW_GBS=10", NULL };
    tu_proc p;
    assert_int_equal(tu_cflow_env(&p, env, "run", "-m", mx, "-p", "the cat", "-n", "12",
                                  "--temp", "0", "--ignore-eos", "-t", "1", "--expert-io",
                                  "staged", "--expert-cache", "32K", "--db", db,
                                  (char *)NULL), 0);
    assert_true(tu_ok(&p, "run tiny-mixtral staged"));
    run_fig f;
    parse_run(p.err, "staged", &f);
    assert_int_equal(f.total, f.n_dec * g.top_k * g.n_moe);
    double acc = -1, wmib = -1;
    unsigned long long right = 0, pred = 0;
    assert_int_equal(sscanf(line_with(p.err, "cflow: experts staged: look-ahead: "),
                            "cflow: experts staged: look-ahead: %lf%% right (%llu of %llu "
                            "predictions), %lf MiB/token read for guesses not routed", &acc,
                            &right, &pred, &wmib), 4);
    assert_true(pred > 0 && right <= pred);
    assert_non_null(strstr(p.err, " read); uniform routing (cflow synth: random routers)"));
    tu_proc_free(&p);
    near_abs(acc, 100.0 * (double)right / (double)pred, 0, 0.051, "look-ahead accuracy");
    assert_int_equal(tu_db_int(db, "SELECT xio_pred FROM run"), (int64_t)pred);
    assert_int_equal(tu_db_int(db, "SELECT xio_pred_hits FROM run"), (int64_t)right);
    near(db_real(db, "SELECT xio_pred_acc FROM run"), (double)right / (double)pred, 1e-9,
         "logged look-ahead accuracy");
    near(db_real(db, "SELECT xio_bytes_tok FROM run"),
         (double)tu_db_int(db, "SELECT xio_bytes FROM run") / (double)f.n_dec, 1e-9,
         "logged bytes per token");
    /* the guesses' reads: part of the bytes read, the wasted ones part of
     * them, and the bytes a token read for nothing as printed */
    int64_t preads = tu_db_int(db, "SELECT xio_pred_reads FROM run");
    int64_t pwasted = tu_db_int(db, "SELECT xio_pred_wasted FROM run");
    int64_t pbytes = tu_db_int(db, "SELECT xio_pred_bytes FROM run");
    assert_true(preads > 0 && pwasted >= 0 && pwasted <= preads);
    assert_true(pbytes > 0 && pbytes <= tu_db_int(db, "SELECT xio_bytes FROM run"));
    double wt = (double)pbytes * ((double)pwasted / (double)preads) / (double)f.n_dec;
    if (pwasted)
        near(db_real(db, "SELECT xio_wasted_tok FROM run"), wt, 1e-9, "logged wasted bytes");
    near_abs(wmib, wt / 1048576.0, 1e-3, 1e-4, "wasted MiB/token as printed");
    check_overlap(db, 1, &f);
    /* skewed routing says so (the file names it: cflow synth --routing) */
    snprintf(mx, sizeof mx, "%s", tu_tmp("tiny-mixtral-zipf.cflow"));
    assert_int_equal(tu_cflow_run(&p, "synth", "--routing", "zipf", "tiny-mixtral", mx,
                                  (char *)NULL), 0);
    assert_true(tu_ok(&p, "synth --routing zipf"));
    tu_proc_free(&p);
    assert_int_equal(tu_cflow_env(&p, env, "run", "-m", mx, "-n", "4", "--ignore-eos",
                                  "--expert-io", "staged", "--expert-cache", "32K", "--no-log",
                                  (char *)NULL), 0);
    assert_true(tu_ok(&p, "run zipf"));
    assert_non_null(strstr(line_with(p.err, "cflow: experts staged: cache "),
                           " read); zipf:1 routing (cflow synth)\n"));
    tu_proc_free(&p);
}

/* 2: the storage bandwidth recorded for the model's device is the one the
 * limit divides by, and the output says so. */
static void test_diskbw_limit(void **state)
{
    (void)state;
    const char *db = tu_tmp("disk.db");
    char *const env[] = { "CFLOW_READ_BW_GBS=10", NULL };
    tu_proc p;
    /* a first run makes the log; then the device's figure */
    assert_int_equal(tu_cflow_env(&p, env, "run", "-m", model, "-n", "2", "--db", db,
                                  (char *)NULL), 0);
    assert_true(tu_ok(&p, "run"));
    tu_proc_free(&p);
    struct stat st;
    char host[256] = "", sql[8192];
    assert_int_equal(stat(model, &st), 0);
    gethostname(host, sizeof host - 1);
    snprintf(sql, sizeof sql, "INSERT INTO diskbw(hostname, dev, path, measured, gbs) VALUES("
             "'%s', %llu, '%s', '2026-12-03T00:00:00Z', 0.5) RETURNING id", host,
             (unsigned long long)st.st_dev, model);
    assert_true(tu_db_int(db, sql) > 0);
    assert_int_equal(tu_cflow_env(&p, env, "run", "-m", model, "-p", "the cat", "-n", "8",
                                  "--temp", "0", "--ignore-eos", "-t", "1", "--expert-io",
                                  "staged", "--db", db, (char *)NULL), 0);
    assert_true(tu_ok(&p, "run staged"));
    run_fig f;
    parse_run(p.err, "staged", &f);
    assert_non_null(strstr(p.err, "GB/s (cflow bench diskbw): "));
    near(f.bound, 0.5, 1e-6, "the limit's bandwidth");
    near(f.limit, 0.5e9 / ((double)(f.misses * expert_len) / (double)f.n_dec), 0.002,
         "storage-bound tok/s at the recorded bandwidth");
    tu_proc_free(&p);
    near(db_real(db, "SELECT disk_gbs FROM run ORDER BY id DESC LIMIT 1"), 0.5, 1e-9,
         "logged disk_gbs");
}

/* 3: auto says which mode it chose. */
static void test_auto_says(void **state)
{
    (void)state;
    const char *db = tu_tmp("auto.db");
    char txt[64];
    tu_proc p;
    char *const roomy[] = { "CFLOW_READ_BW_GBS=10", NULL };
    assert_int_equal(tu_cflow_env(&p, roomy, "run", "-m", model, "-n", "3", "--db", db,
                                  (char *)NULL), 0);
    assert_true(tu_ok(&p, "run auto (fits)"));
    assert_non_null(strstr(p.err, "experts are read in place (mmap; --expert-io auto)"));
    tu_proc_free(&p);
    tu_db_text(db, "SELECT expert_io || '/' || expert_io_asked FROM run WHERE id = 1", txt,
               sizeof txt);
    assert_string_equal(txt, "mmap/auto");
    /* less free memory than the model: staged reads, and the figures say auto */
    char *const tight[] = { "CFLOW_READ_BW_GBS=10", "CFLOW_MEM_FREE=100000", NULL };
    assert_int_equal(tu_cflow_env(&p, tight, "run", "-m", model, "-n", "3", "--db", db,
                                  (char *)NULL), 0);
    assert_true(tu_ok(&p, "run auto (does not fit)"));
    assert_non_null(strstr(p.err, "experts are read with staged I/O"));
    assert_non_null(strstr(p.err, "cflow: experts staged (auto): cache "));
    assert_null(strstr(p.err, "(mmap; --expert-io auto)"));
    tu_proc_free(&p);
    tu_db_text(db, "SELECT expert_io || '/' || expert_io_asked FROM run WHERE id = 2", txt,
               sizeof txt);
    assert_string_equal(txt, "staged/auto");
}

/* 4: a GGUF runs from its conversion; the log names both. */
static void test_model_named(void **state)
{
    (void)state;
    const char *src = getenv("CFLOW_SRCDIR");
    char gguf[4096], cache[4096], env_cache[4200], txt[4096];
    snprintf(gguf, sizeof gguf, "%s/tests/data/moe/mixtral-tiny.gguf", src && *src ? src : ".");
    tu_require(gguf);
    snprintf(cache, sizeof cache, "%s", tu_tmp("xdg-cache"));
    snprintf(env_cache, sizeof env_cache, "XDG_CACHE_HOME=%s", cache);
    const char *db = tu_tmp("named.db");
    char *const env[] = { "CFLOW_READ_BW_GBS=10", env_cache, NULL };
    tu_proc p;
    assert_int_equal(tu_cflow_env(&p, env, "run", "-m", gguf, "-n", "2", "--db", db,
                                  (char *)NULL), 0);
    assert_true(tu_ok(&p, "run a GGUF"));
    tu_proc_free(&p);
    tu_db_text(db, "SELECT model_named FROM session", txt, sizeof txt);
    assert_non_null(strstr(txt, "mixtral-tiny.gguf"));
    tu_db_text(db, "SELECT path FROM model", txt, sizeof txt);
    assert_non_null(strstr(txt, cache));            /* the conversion that ran */
    assert_null(strstr(txt, ".gguf"));
    assert_int_equal(tu_cflow_env(&p, env, "runs", "list", "--json", "--db", db, (char *)NULL),
                     0);
    assert_true(tu_ok(&p, "runs list"));
    assert_non_null(strstr(p.out, "mixtral-tiny.gguf"));
    tu_proc_free(&p);
}

/* The value of field name in a csv row under header (no quoted commas). */
static void csv_field(const char *header, const char *row, const char *name, char *out,
                      size_t n)
{
    int col = -1, k = 0;
    for (const char *h = header; *h && *h != '\n'; k++) {
        size_t len = strcspn(h, ",\n");
        if (len == strlen(name) && !strncmp(h, name, len))
            col = k;
        h += len + (h[len] == ',');
    }
    if (col < 0)
        fprintf(stderr, "no column %s in %s\n", name, header);
    assert_true(col >= 0);
    const char *r = row;
    for (k = 0; k < col; k++) {
        r += strcspn(r, ",\n");
        assert_int_equal(*r, ',');
        r++;
    }
    size_t len = strcspn(r, ",\n");
    snprintf(out, n, "%.*s", (int)len, r);
}

/* 5b: bench with sync and staged sets staged over sync beside the
 * report's model, from the sync test's compute and stall; the overlapped
 * bound columns hold together. */
static void test_bench_model(void **state)
{
    (void)state;
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "bench", "-m", model, "-t", "1", "-p", "0", "-n", "6",
                                  "-r", "2", "--expert-io", "sync,staged", "--expert-cache",
                                  "off", "--read-bw", "10", "-o", "csv", "--no-log",
                                  (char *)NULL), 0);
    assert_true(tu_ok(&p, "bench sync,staged"));
    assert_int_equal(tu_count_lines(p.out), 3);
    const char *row[2] = { strchr(p.out, '\n') + 1, NULL };
    row[1] = strchr(row[0], '\n') + 1;
    char v[64];
    double ts[2], c[2];
    for (int k = 0; k < 2; k++) {
        csv_field(p.out, row[k], "expert_io", v, sizeof v);
        assert_string_equal(v, k ? "staged" : "sync");
        csv_field(p.out, row[k], "avg_ts", v, sizeof v);
        ts[k] = strtod(v, NULL);
        csv_field(p.out, row[k], "compute_s_per_token", v, sizeof v);
        c[k] = strtod(v, NULL);
        assert_true(ts[k] > 0 && c[k] >= 0 && c[k] <= 1.0 / ts[k] * (1 + 1e-5));
        csv_field(p.out, row[k], "storage_bound_ts", v, sizeof v);
        double lim = strtod(v, NULL), t = 1.0 / lim > c[k] ? 1.0 / lim : c[k];
        csv_field(p.out, row[k], "overlapped_bound_ts", v, sizeof v);
        near(strtod(v, NULL), 1.0 / t, 1e-4, "bench overlapped bound");
        csv_field(p.out, row[k], "overlapped_bound_pct", v, sizeof v);
        near(strtod(v, NULL), 100.0 * ts[k] * t, 1e-4, "bench overlapped bound_pct");
    }
    double got, want, ratio, cm, io, eff;
    const char *l = strstr(line_with(p.err, "cflow bench: tg6, 1 threads: staged over sync "),
                           "staged over sync ");
    assert_int_equal(sscanf(l, "staged over sync %lfx; the report's model (C + IO) / "
                               "max(C, IO_eff) %lfx (net/model %lf) with C %lf ms, IO %lf ms, "
                               "IO_eff %lf ms a token", &got, &want, &ratio, &cm, &io, &eff), 6);
    tu_proc_free(&p);
    near_abs(got, ts[1] / ts[0], 0, 0.0051, "measured staged over sync");
    near_abs(cm, c[0] * 1e3, 1e-3, 1e-6, "C: the sync test's compute");
    assert_true(io > 0 && eff > 0);   /* both arms read: no cache */
    near_abs(want, (cm + io) / (cm > eff ? cm : eff), 0.01, 0.0051, "the report's model");
    near_abs(ratio, got / want, 0.01, 0.0051, "net/model");
}

/* 5: bench's csv columns and its table. */
static void test_bench_columns(void **state)
{
    (void)state;
    const char *db = tu_tmp("bench.db");
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "bench", "-m", model, "-t", "1", "-p", "0", "-n", "6",
                                  "-r", "2", "--expert-io", "sync,mmap", "--expert-cache",
                                  "128K", "--read-bw", "10", "-o", "csv", "--db", db,
                                  (char *)NULL), 0);
    assert_true(tu_ok(&p, "bench -o csv"));
    assert_int_equal(tu_count_lines(p.out), 3);
    const char *row = strchr(p.out, '\n') + 1, *row2 = strchr(row, '\n') + 1;
    char v[64];
    csv_field(p.out, row, "expert_io", v, sizeof v);
    assert_string_equal(v, "sync");
    csv_field(p.out, row, "routing", v, sizeof v);
    assert_string_equal(v, "\"uniform routing (cflow synth: random routers)\"");
    csv_field(p.out, row, "expert_hits", v, sizeof v);
    unsigned long long hits = strtoull(v, NULL, 10);
    csv_field(p.out, row, "expert_misses", v, sizeof v);
    unsigned long long misses = strtoull(v, NULL, 10);
    /* two repetitions of six decoded tokens */
    assert_int_equal(hits + misses, 2ull * 6 * top_k * n_moe);
    csv_field(p.out, row, "hit_rate", v, sizeof v);
    near(strtod(v, NULL), (double)hits / (double)(hits + misses), 1e-5, "bench hit rate");
    csv_field(p.out, row, "read_bytes_per_token", v, sizeof v);
    double bt = strtod(v, NULL);
    near(bt, (double)(misses * expert_len) / 12.0, 1e-5, "bench bytes per token");
    csv_field(p.out, row, "storage_gbs", v, sizeof v);
    double gbs = strtod(v, NULL);
    csv_field(p.out, row, "storage_bound_ts", v, sizeof v);
    near(strtod(v, NULL), gbs * 1e9 / bt, 1e-4, "bench storage-bound tok/s");
    csv_field(p.out, row, "avg_ts", v, sizeof v);
    double ts = strtod(v, NULL);
    csv_field(p.out, row, "bound_pct", v, sizeof v);
    near(strtod(v, NULL), 100.0 * ts / (gbs * 1e9 / bt), 1e-4, "bench bound_pct");
    /* mmap reads nothing: the figures are empty */
    csv_field(p.out, row2, "expert_io", v, sizeof v);
    assert_string_equal(v, "mmap");
    csv_field(p.out, row2, "hit_rate", v, sizeof v);
    assert_string_equal(v, "");
    tu_proc_free(&p);
    near(db_real(db, "SELECT xio_hit_rate FROM bench WHERE expert_io = 'sync'"),
         (double)hits / (double)(hits + misses), 1e-9, "bench table hit rate");
    assert_int_equal(tu_db_int(db, "SELECT xio_hits + xio_misses FROM bench WHERE"
                                   " expert_io = 'sync'"), (int64_t)(hits + misses));
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM bench WHERE expert_io = 'mmap' AND"
                                   " xio_hit_rate IS NULL"), 1);
}

/* 6 (issue 18): "% of read bw" divides by the stored membw median of this
 * host at the run's thread count, not the machine row's older figure. */
static void test_read_bw_stored(void **state)
{
    (void)state;
    const char *db = tu_tmp("bw.db");
    tu_proc p;
    /* a measurement at 1 thread (recorded), then a figure none gives */
    assert_int_equal(tu_cflow_run(&p, "bench", "membw", "-t", "1", "-r", "1", "--db", db,
                                  (char *)NULL), 0);
    assert_true(tu_ok(&p, "bench membw"));
    tu_proc_free(&p);
    assert_true(tu_db_int(db, "UPDATE membw SET median_gbs = 4321.5, min_gbs = 4000,"
                              " max_gbs = 4500 RETURNING id") > 0);
    assert_int_equal(tu_cflow_run(&p, "run", "-m", model, "-p", "the cat", "-n", "8", "-t",
                                  "1", "--db", db, (char *)NULL), 0);
    assert_true(tu_ok(&p, "run -t 1"));
    const char *l = line_with(p.err, "cflow: bandwidth: decode ");
    double gb = 0, pct = 0;
    assert_int_equal(sscanf(l, "cflow: bandwidth: decode %lf GB/s of weights, %lf%%", &gb,
                            &pct), 2);
    assert_non_null(strstr(l, "read bandwidth 4321.50 GB/s (1 threads, median of 1 passes"));
    assert_non_null(strstr(l, "from the run log)"));
    near_abs(pct, 100.0 * gb / 4321.5, 0.01, 0.051, "% of read bw (printed to 0.1)");
    tu_proc_free(&p);
    near(db_real(db, "SELECT read_bw_gbs FROM machine"), 4321.5, 1e-9,
         "the machine row records the figure used");
    /* 2 threads: none stored; measured now, said so, and recorded */
    assert_int_equal(tu_cflow_run(&p, "run", "-m", model, "-n", "4", "-t", "2", "--db", db,
                                  (char *)NULL), 0);
    assert_true(tu_ok(&p, "run -t 2"));
    l = line_with(p.err, "cflow: bandwidth: decode ");
    assert_non_null(strstr(l, "(2 threads, median of 9 passes"));
    assert_non_null(strstr(l, "none recorded for this host: measured now, recorded in the run"
                              " log)"));
    tu_proc_free(&p);
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM membw WHERE threads = 2"), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_figures),
        cmocka_unit_test(test_lookahead),
        cmocka_unit_test(test_diskbw_limit),
        cmocka_unit_test(test_bench_model),
        cmocka_unit_test(test_auto_says),
        cmocka_unit_test(test_model_named),
        cmocka_unit_test(test_bench_columns),
        cmocka_unit_test(test_read_bw_stored),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
