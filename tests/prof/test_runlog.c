/*
 * test_runlog.c — the run log and the counters through the real `cflow`:
 *
 *   1. two `cflow run`s with different -t are two runs with their settings
 *      in `cflow runs list --json`; `runs compare` prints both and the
 *      ratio of their tok/s; show and export describe them;
 *   2. the counters line names every unavailable hardware event with the
 *      reason the kernel gave (checked against this test's own
 *      perf_event_open) and shows page faults and context switches;
 *   3. a run killed with SIGKILL mid-decode leaves a log that passes
 *      PRAGMA integrity_check with the earlier run intact; two processes
 *      logging into one (new) log at once both succeed;
 *   4. a log that is garbage, locked, read-only or cannot be created:
 *      the continuation is exactly what it is without logging, and there
 *      is one clear warning;
 *   5. a log of an older schema is migrated when opened;
 *   6. a log cflow refuses (a foreign schema, a newer or negative version,
 *      missing or thin tables) keeps every byte.
 *
 * Models: stories260K converted from the shared llama2.c checkpoint, and a
 * random 6-layer dim-256 checkpoint written by tests/prof/mkl2c (slow
 * enough to be killed mid-decode and to overlap two processes).
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/perf_event.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>
#include <sqlite3.h>

#include "prof/prof.h"
#include "testutil.h"

static char st_model[4096], big_model[4096], st_real[PATH_MAX];
static const char *prompt = "Once upon a time";

/* ------------------------------------------------------------ helpers */

/* Run cflow with args (NULL-terminated) and env overrides (may be NULL). */
#define cflow(p, env, ...) assert_int_equal(tu_cflow_env(p, env, __VA_ARGS__), 0)

#define expect_ok(p, what) assert_true(tu_ok(p, what))

/* Lines of s that contain needle. */
static int count_lines_with(const char *s, const char *needle)
{
    int n = 0;
    while (*s) {
        const char *e = strchr(s, '\n');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        char line[4096];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), s);
        if (strstr(line, needle))
            n++;
        s += len + (e != NULL);
    }
    return n;
}

/* The line of s that starts with prefix, copied into out. */
static int line_starting(const char *s, const char *prefix, char *out, size_t n)
{
    for (const char *l = s; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (!strncmp(l, prefix, strlen(prefix))) {
            size_t len = strcspn(l, "\n");
            snprintf(out, n, "%.*s", (int)len, l);
            return 1;
        }
    }
    return 0;
}



static json_object *runs_json(const char *db)
{
    tu_proc p;
    cflow(&p, NULL, "runs", "list", "--json", "--db", db, NULL);
    expect_ok(&p, "runs list --json");
    json_object *o = json_tokener_parse(p.out);
    if (!o || !json_object_is_type(o, json_type_array))
        fprintf(stderr, "not a JSON array: %s\n", p.out);
    assert_non_null(o);
    assert_true(json_object_is_type(o, json_type_array));
    tu_proc_free(&p);
    return o;
}

static json_object *member(json_object *o, const char *key)
{
    json_object *v = NULL;
    if (!json_object_object_get_ex(o, key, &v)) {
        fprintf(stderr, "no member '%s' in %s\n", key, json_object_to_json_string(o));
        fail();
    }
    return v;
}

static const char *jstr(json_object *o, const char *key)
{
    return json_object_get_string(member(o, key));
}

static int64_t jint(json_object *o, const char *key)
{
    return json_object_get_int64(member(o, key));
}

static double jnum(json_object *o, const char *key)
{
    return json_object_get_double(member(o, key));
}

/* The continuation of the reference run (no logging at all). */
static char *reference_out(const char *model, const char *n)
{
    tu_proc p;
    char *const env[] = { "CFLOW_DB=/nonexistent-dir/never.db", NULL };
    cflow(&p, env, "run", "-m", model, "-p", prompt, "-n", n, "--temp", "0", "--no-log",
          NULL);
    expect_ok(&p, "reference run");
    /* --no-log never touches a log, not even to warn */
    assert_null(strstr(p.err, "warning"));
    assert_null(strstr(p.err, "logged run"));
    char *out = strdup(p.out);
    tu_proc_free(&p);
    return out;
}

/* ------------------------------------------------------------ setup */

static int setup(void **state)
{
    (void)state;
    char tok[4096], src[4096];
    tu_proc p;
    snprintf(tok, sizeof tok, "%s", tu_shared("models/tok512.bin"));
    snprintf(src, sizeof src, "%s", tu_shared("models/stories260K.bin"));
    tu_require(tok);
    tu_require(src);
    snprintf(st_model, sizeof st_model, "%s", tu_tmp("stories.cflow"));
    cflow(&p, NULL, "convert", "-t", tok, src, st_model, NULL);
    expect_ok(&p, "convert stories260K");
    tu_proc_free(&p);
    if (!realpath(st_model, st_real))
        return -1;

    /* the slow model: 6 layers of dim 256, f32, a 2048-token context */
    char l2c[4096], mk[4096];
    const char *bd = getenv("CFLOW_BUILDDIR");
    snprintf(mk, sizeof mk, "%s/tests/prof/mkl2c", bd && *bd ? bd : ".");
    tu_require(mk);
    snprintf(l2c, sizeof l2c, "%s", tu_tmp("big.bin"));
    char *mkargv[] = { mk, l2c, "256", "768", "6", "8", "8", "512", "2048", "1", NULL };
    assert_int_equal(tu_run(&p, mkargv, NULL, 120), 0);
    expect_ok(&p, "mkl2c");
    tu_proc_free(&p);
    snprintf(big_model, sizeof big_model, "%s", tu_tmp("big.cflow"));
    cflow(&p, NULL, "convert", "-t", tok, l2c, big_model, NULL);
    expect_ok(&p, "convert the random checkpoint");
    tu_proc_free(&p);
    return 0;
}

/* ------------------------------------------------------------ 1 */

/* `cflow runs` on the log db: usage errors exit 2, a missing run 1 naming
 * it; a log that does not exist yet lists as empty and is not created. */
static void check_runs_refusals(const char *db)
{
    tu_proc p;
    /* usage errors and a missing run */
    cflow(&p, NULL, "runs", "bogus", "--db", db, NULL);
    assert_int_equal(p.status, 2);
    tu_proc_free(&p);
    cflow(&p, NULL, "runs", "show", "--db", db, NULL);
    assert_int_equal(p.status, 2);
    tu_proc_free(&p);
    cflow(&p, NULL, "runs", "export", "--db", db, NULL);
    assert_int_equal(p.status, 2);
    tu_proc_free(&p);
    cflow(&p, NULL, "runs", "show", "99", "--db", db, NULL);
    assert_int_equal(p.status, 1);
    assert_non_null(strstr(p.err, "no run 99"));
    tu_proc_free(&p);
    /* a log that does not exist yet is empty, and is not created */
    char nodb[4096];
    snprintf(nodb, sizeof nodb, "%s", tu_tmp("absent.db"));
    cflow(&p, NULL, "runs", "list", "--json", "--db", nodb, NULL);
    expect_ok(&p, "runs list on a missing log");
    json_object *empty = json_tokener_parse(p.out);
    assert_non_null(empty);
    assert_int_equal(json_object_array_length(empty), 0);
    json_object_put(empty);
    assert_int_equal(access(nodb, F_OK), -1);
    tu_proc_free(&p);
}

/* runs compare 1 2 and runs show 2 of test_two_runs_compare's log db,
 * whose runs decoded d1 and d2 tok/s on 1 and 2 threads. */
static void check_compare_show(const char *db, double d1, double d2)
{
    tu_proc p;
    /* compare: both runs and the ratio of their tok/s */
    cflow(&p, NULL, "runs", "compare", "1", "2", "--db", db, NULL);
    expect_ok(&p, "runs compare");
    fputs(p.out, stderr);
    assert_non_null(strstr(p.out, "run 1"));
    assert_non_null(strstr(p.out, "run 2"));
    char line[512];
    assert_true(line_starting(p.out, "decode tok/s", line, sizeof line));
    double x, y, ratio;
    assert_int_equal(sscanf(line + strlen("decode tok/s"), "%lf %lf %lf", &x, &y, &ratio), 3);
    assert_true(fabs(x - d1) <= 0.005 + 1e-9 * d1);
    assert_true(fabs(y - d2) <= 0.005 + 1e-9 * d2);
    assert_true(fabs(ratio - d2 / d1) <= 0.0005 + 1e-9);
    assert_true(line_starting(p.out, "threads", line, sizeof line));
    assert_int_equal(sscanf(line + strlen("threads"), "%lf %lf %lf", &x, &y, &ratio), 3);
    assert_true(x == 1 && y == 2 && ratio == 2);
    assert_non_null(strstr(p.out, "per layer"));
    tu_proc_free(&p);

    /* show: the settings, the counters and a row per layer */
    cflow(&p, NULL, "runs", "show", "2", "--db", db, NULL);
    expect_ok(&p, "runs show");
    assert_non_null(strstr(p.out, "run 2 (done)"));
    assert_non_null(strstr(p.out, "threads 2"));
    assert_non_null(strstr(p.out, "page-faults"));
    assert_true(count_lines_with(p.out, "    4 ") >= 1);   /* layer 4 */
    tu_proc_free(&p);
}

static void test_two_runs_compare(void **state)
{
    (void)state;
    char db[4096];
    snprintf(db, sizeof db, "%s", tu_tmp("two/runs.db"));   /* a folder that does not exist yet */
    tu_proc p;
    /* the first run measures the read bandwidth (nothing is cached yet) */
    cflow(&p, NULL, "run", "-m", st_model, "-p", prompt, "-n", "48", "--temp", "0",
          "--ignore-eos", "-t", "1", "--db", db, NULL);
    expect_ok(&p, "run -t 1");
    assert_non_null(strstr(p.err, "cflow: logged run 1 in "));
    assert_non_null(strstr(p.err, "read bandwidth"));
    char *out1 = strdup(p.out);
    tu_proc_free(&p);
    char *const env[] = { "CFLOW_DB=", NULL };   /* --db wins over CFLOW_DB */
    cflow(&p, env, "run", "-m", st_model, "-p", prompt, "-n", "48", "--temp", "0",
          "--ignore-eos", "-t", "2", "--db", db, NULL);
    expect_ok(&p, "run -t 2");
    assert_non_null(strstr(p.err, "cflow: logged run 2 in "));
    /* results do not depend on the thread count */
    assert_string_equal(p.out, out1);
    free(out1);
    tu_proc_free(&p);

    json_object *a = runs_json(db);
    assert_int_equal(json_object_array_length(a), 2);
    json_object *r1 = json_object_array_get_idx(a, 0), *r2 = json_object_array_get_idx(a, 1);
    assert_int_equal(jint(r1, "id"), 1);
    assert_int_equal(jint(r2, "id"), 2);
    assert_int_equal(jint(r1, "threads"), 1);
    assert_int_equal(jint(r2, "threads"), 2);
    for (int i = 0; i < 2; i++) {
        json_object *r = i ? r2 : r1;
        assert_string_equal(jstr(r, "model"), st_real);
        assert_string_equal(jstr(r, "prefetch"), "off");
        assert_string_equal(jstr(r, "expert_io"), "none");
        assert_string_equal(jstr(r, "status"), "done");
        assert_true(strlen(jstr(r, "started")) == 24 && jstr(r, "started")[23] == 'Z');
        assert_int_equal(jint(r, "n_prompt"), jint(r1, "n_prompt"));
        assert_true(jint(r, "n_prompt") >= 2);
        assert_int_equal(jint(r, "n_gen"), 47);   /* -n 48: the last is not fed back */
        assert_true(jnum(r, "prefill_tok_s") > 0);
        assert_true(jnum(r, "decode_tok_s") > 0);
        assert_true(fabs(jnum(r, "decode_tok_s") - 47 / jnum(r, "decode_s")) <
                    1e-9 * jnum(r, "decode_tok_s"));
        assert_int_equal(jint(r, "n_layers"), 5);
        assert_true(jnum(r, "read_bw_gbs") > 0);
        assert_true(jint(r, "n_ctx") == 512);
        assert_true(jnum(r, "temp") == 0);
    }
    /* the same model and machine rows serve both runs */
    assert_string_equal(jstr(r1, "model_hash"), jstr(r2, "model_hash"));
    assert_true(jnum(r1, "read_bw_gbs") == jnum(r2, "read_bw_gbs"));
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM model"), 1);
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM machine"), 1);
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM token WHERE run_id = 2"),
                     jint(r2, "n_prompt") + 47);
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM layer_stat WHERE run_id = 2"), 5);
    check_compare_show(db, jnum(r1, "decode_tok_s"), jnum(r2, "decode_tok_s"));

    /* list --model: by part of the path, and nothing for another model */
    cflow(&p, NULL, "runs", "list", "--model", "stories.cflow", "--db", db, NULL);
    expect_ok(&p, "runs list --model");
    assert_int_equal(tu_count_lines(p.out), 3);   /* header + 2 */
    tu_proc_free(&p);
    cflow(&p, NULL, "runs", "list", "--model", "no-such-model", "--json", "--db", db, NULL);
    expect_ok(&p, "runs list --model none");
    json_object *none = json_tokener_parse(p.out);
    assert_int_equal(json_object_array_length(none), 0);
    json_object_put(none);
    tu_proc_free(&p);

    /* export: CSV with the documented header, JSON with layers and tokens */
    cflow(&p, NULL, "runs", "export", "--csv", "--db", db, NULL);
    expect_ok(&p, "runs export --csv");
    assert_int_equal(tu_count_lines(p.out), 3);
    assert_int_equal(strncmp(p.out, "id,started,ended,status,program,model,model_hash,", 49), 0);
    assert_non_null(strstr(p.out, ",cycles,instructions,l1d-read-misses,llc-read-misses,"
                                  "dtlb-read-misses,task-clock,page-faults,major-faults,"
                                  "minor-faults,context-switches,cpu-migrations,"));
    tu_proc_free(&p);
    cflow(&p, NULL, "runs", "export", "--csv", "--tokens", "--db", db, NULL);
    expect_ok(&p, "runs export --csv --tokens");
    assert_int_equal(tu_count_lines(p.out), 1 + 2 * (jint(r1, "n_prompt") + 47));
    tu_proc_free(&p);
    cflow(&p, NULL, "runs", "export", "--json", "--tokens", "--db", db, NULL);
    expect_ok(&p, "runs export --json");
    json_object *ex = json_tokener_parse(p.out);
    assert_non_null(ex);
    assert_int_equal(json_object_array_length(ex), 2);
    json_object *e2 = json_object_array_get_idx(ex, 1);
    assert_int_equal(json_object_array_length(member(e2, "layers")), 5);
    assert_int_equal(json_object_array_length(member(e2, "tokens")), jint(r2, "n_prompt") + 47);
    assert_true(jnum(json_object_array_get_idx(member(e2, "layers"), 0), "attention_s") > 0);
    json_object_put(ex);
    tu_proc_free(&p);
    json_object_put(a);

    check_runs_refusals(db);
}

/* ------------------------------------------------------------ 2 */

static void test_counters_reported(void **state)
{
    (void)state;
    tu_proc p;
    char db[4096];
    snprintf(db, sizeof db, "%s", tu_tmp("ctr.db"));
    char *const env[] = { "CFLOW_READ_BW_GBS=10", NULL };
    cflow(&p, env, "run", "-m", st_model, "-p", prompt, "-n", "32", "--temp", "0",
          "--db", db, NULL);
    expect_ok(&p, "run");
    char line[4096];
    assert_true(line_starting(p.err, "cflow: counters: ", line, sizeof line));
    fprintf(stderr, "%s\n", line);
    long long v;
    const char *pf = strstr(line, "page-faults ");
    const char *cs = strstr(line, "context-switches ");
    assert_non_null(pf);
    assert_non_null(cs);
    assert_int_equal(sscanf(pf, "page-faults %lld", &v), 1);
    assert_true(v >= 0);
    assert_int_equal(sscanf(cs, "context-switches %lld", &v), 1);
    assert_true(line_starting(p.err, "cflow: layers: attention ", line + 2048, 2048));
    tu_proc_free(&p);

    /* what the kernel says about the hardware events, asked directly */
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_HARDWARE;
    a.config = PERF_COUNT_HW_CPU_CYCLES;
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    long fd = syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
    int e = errno;
    const char *un = strstr(line, "; unavailable: ");
    if (fd >= 0) {
        close((int)fd);
#ifdef HAVE_LIBPFM
        assert_non_null(strstr(line, "cycles "));
        assert_true(!un || !strstr(un, "cycles"));
#else
        assert_non_null(un);
        assert_non_null(strstr(un, "cycles"));
        assert_non_null(strstr(un, "(built without libpfm4)"));
#endif
    } else {
        /* this machine refuses them: each is named, with the reason */
        int par = -99;
        FILE *f = fopen("/proc/sys/kernel/perf_event_paranoid", "r");
        if (f) {
            if (fscanf(f, "%d", &par) != 1)
                par = -99;
            fclose(f);
        }
        assert_non_null(un);
        static const char *const hw[] = { "cycles", "instructions", "l1d-read-misses",
                                          "llc-read-misses", "dtlb-read-misses" };
        for (size_t i = 0; i < 5; i++)
            assert_non_null(strstr(un, hw[i]));
        char why[256];
#ifdef HAVE_LIBPFM
        snprintf(why, sizeof why, "(perf_event_open: %s; perf_event_paranoid=%d)",
                 strerror(e), par);
#else
        (void)par;
        (void)e;
        snprintf(why, sizeof why, "(built without libpfm4)");
#endif
        assert_non_null(strstr(un, why));
        /* the reasons are kept in the log too */
        cflow(&p, NULL, "runs", "show", "1", "--db", db, NULL);
        expect_ok(&p, "runs show");
        assert_non_null(strstr(p.out, why));
        tu_proc_free(&p);
        char reason[256];
        tu_db_text(db, "SELECT reason FROM counter WHERE run_id = 1 AND event = 'cycles'", reason,
               sizeof reason);
        assert_non_null(strstr(why, reason));
    }
    assert_true(tu_db_int(db, "SELECT count(*) FROM counter WHERE run_id = 1 AND"
                          " event = 'page-faults' AND value IS NOT NULL") == 1);

    /* --no-profile: no layer timers, no counters */
    cflow(&p, env, "run", "-m", st_model, "-p", prompt, "-n", "8", "--temp", "0",
          "--no-profile", "--no-log", NULL);
    expect_ok(&p, "run --no-profile");
    assert_null(strstr(p.err, "cflow: counters:"));
    assert_null(strstr(p.err, "cflow: layers:"));
    tu_proc_free(&p);
}

/* ------------------------------------------------------------ 3 */

static pid_t spawn(char *const argv[], char *const env[], const char *out, const char *err)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int n = open("/dev/null", O_RDONLY);
        if (o < 0 || e < 0 || n < 0)
            _exit(126);
        dup2(o, 1);
        dup2(e, 2);
        dup2(n, 0);
        for (int i = 0; env && env[i]; i++)
            putenv(env[i]);
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

static void test_sigkill(void **state)
{
    (void)state;
    char db[4096];
    snprintf(db, sizeof db, "%s", tu_tmp("kill.db"));
    char *const env[] = { "CFLOW_READ_BW_GBS=10", NULL };
    tu_proc p;
    /* an earlier, complete run */
    cflow(&p, env, "run", "-m", st_model, "-p", prompt, "-n", "40", "--temp", "0",
          "--ignore-eos", "--db", db, NULL);
    expect_ok(&p, "the earlier run");
    tu_proc_free(&p);
    int64_t tok_before = tu_db_int(db, "SELECT count(*) FROM token WHERE run_id = 1");
    char row_before[512], row_after[512];
    tu_db_text(db, "SELECT printf('%d|%d|%d|%s|%s|%.17g|%.17g', threads, n_prompt, n_gen, status,"
               " ended, decode_tok_s, prefill_s) FROM run WHERE id = 1",
           row_before, sizeof row_before);
    assert_int_equal(tok_before, tu_db_int(db, "SELECT n_prompt + n_gen FROM run WHERE id = 1"));

    /* a long decode, killed once it has committed a few batches */
    char *argv[] = { (char *)tu_cflow(), "run", "-m", big_model, "-n", "2000", "--temp", "0",
                     "--ignore-eos", "--db", (char *)db, NULL };
    char o[4096], e[4096];
    snprintf(o, sizeof o, "%s", tu_tmp("kill.out"));
    snprintf(e, sizeof e, "%s", tu_tmp("kill.err"));
    pid_t pid = spawn(argv, env, o, e);
    int64_t seen = 0;
    double t0 = (double)time(NULL);
    int st, exited = 0;
    while ((double)time(NULL) - t0 < 120) {
        if (waitpid(pid, &st, WNOHANG) == pid) {
            exited = 1;
            break;
        }
        if (access(db, F_OK) == 0 &&
            tu_db_int(db, "SELECT count(*) FROM run") == 2 &&
            (seen = tu_db_int(db, "SELECT count(*) FROM token WHERE run_id = 2")) >= 130)
            break;
        usleep(20000);
    }
    assert_false(exited);   /* it must still be decoding when killed */
    assert_int_equal(kill(pid, SIGKILL), 0);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    fprintf(stderr, "killed after %lld logged tokens\n", (long long)seen);
    assert_true(seen >= 130);

    char ic[64];
    tu_db_text(db, "PRAGMA integrity_check", ic, sizeof ic);
    assert_string_equal(ic, "ok");
    /* the earlier run is intact */
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM token WHERE run_id = 1"), tok_before);
    tu_db_text(db, "SELECT printf('%d|%d|%d|%s|%s|%.17g|%.17g', threads, n_prompt, n_gen, status,"
               " ended, decode_tok_s, prefill_s) FROM run WHERE id = 1",
           row_after, sizeof row_after);
    assert_string_equal(row_before, row_after);
    /* the killed run keeps what it committed, and reads as interrupted */
    assert_true(tu_db_int(db, "SELECT count(*) FROM token WHERE run_id = 2") >= seen);
    assert_true(tu_db_int(db, "SELECT n_gen FROM run WHERE id = 2") > 0);
    json_object *a = runs_json(db);
    assert_int_equal(json_object_array_length(a), 2);
    assert_string_equal(jstr(json_object_array_get_idx(a, 0), "status"), "done");
    assert_string_equal(jstr(json_object_array_get_idx(a, 1), "status"), "interrupted");
    json_object_put(a);

    /* and the log takes the next run */
    cflow(&p, env, "run", "-m", st_model, "-p", prompt, "-n", "8", "--temp", "0", "--db", db,
          NULL);
    expect_ok(&p, "a run after the kill");
    assert_null(strstr(p.err, "warning"));
    tu_proc_free(&p);
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM run WHERE status = 'done'"), 2);
}

static void test_two_writers(void **state)
{
    (void)state;
    char db[4096];
    snprintf(db, sizeof db, "%s", tu_tmp("conc/runs.db"));   /* both processes create it */
    char *const env[] = { "CFLOW_READ_BW_GBS=10", NULL };
    char *argv[] = { (char *)tu_cflow(), "run", "-m", big_model, "-n", "200", "--temp", "0",
                     "--ignore-eos", "-t", "1", "--db", (char *)db, NULL };
    pid_t a = spawn(argv, env, tu_tmp("w1.out"), tu_tmp("w1.err"));
    pid_t b = spawn(argv, env, tu_tmp("w2.out"), tu_tmp("w2.err"));
    int sa, sb;
    assert_int_equal(waitpid(a, &sa, 0), a);
    assert_int_equal(waitpid(b, &sb, 0), b);
    char *ea = tu_read_file(tu_tmp("w1.err"), NULL), *eb = tu_read_file(tu_tmp("w2.err"), NULL);
    assert_non_null(ea);
    assert_non_null(eb);
    if (!WIFEXITED(sa) || WEXITSTATUS(sa) || !WIFEXITED(sb) || WEXITSTATUS(sb) ||
        strstr(ea, "warning") || strstr(eb, "warning"))
        fprintf(stderr, "writer 1: %s\nwriter 2: %s\n", ea, eb);
    assert_true(WIFEXITED(sa) && WEXITSTATUS(sa) == 0);
    assert_true(WIFEXITED(sb) && WEXITSTATUS(sb) == 0);
    assert_null(strstr(ea, "warning"));
    assert_null(strstr(eb, "warning"));
    assert_non_null(strstr(ea, "cflow: logged run "));
    assert_non_null(strstr(eb, "cflow: logged run "));
    free(ea);
    free(eb);
    /* the same continuation, two complete runs, every token of each */
    char *oa = tu_read_file(tu_tmp("w1.out"), NULL), *ob = tu_read_file(tu_tmp("w2.out"), NULL);
    assert_non_null(oa);
    assert_non_null(ob);
    assert_string_equal(oa, ob);
    free(oa);
    free(ob);
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM run WHERE status = 'done'"), 2);
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM session"), 2);
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM model"), 1);
    for (int id = 1; id <= 2; id++) {
        char sql[256];
        snprintf(sql, sizeof sql,
                 "SELECT (SELECT count(*) FROM token WHERE run_id = %d) ="
                 " (SELECT n_prompt + n_gen FROM run WHERE id = %d)", id, id);
        assert_int_equal(tu_db_int(db, sql), 1);
    }
    assert_int_equal(tu_db_int(db, "SELECT n_gen FROM run WHERE id = 1"), 199);
    /* they did log at the same time: each run started before the other ended */
    assert_int_equal(tu_db_int(db, "SELECT a.started < b.ended AND b.started < a.ended FROM run a,"
                               " run b WHERE a.id = 1 AND b.id = 2"), 1);
    char ic[64];
    tu_db_text(db, "PRAGMA integrity_check", ic, sizeof ic);
    assert_string_equal(ic, "ok");
}

/* ------------------------------------------------------------ 4 */

/* Inference with a bad log: same continuation as without one, exit 0,
 * exactly one warning that names the log and says what is wrong. */
static void expect_one_warning(const tu_proc *p, const char *ref, const char *db,
                               const char *what, const char *why)
{
    fprintf(stderr, "%-10s exit %d: %s", what, p->status,
            strstr(p->err, "cflow: warning") ? strstr(p->err, "cflow: warning") : "(none)\n");
    expect_ok(p, what);
    assert_string_equal(p->out, ref);
    assert_int_equal(count_lines_with(p->err, "warning"), 1);
    char line[4096];
    assert_true(line_starting(p->err, "cflow: warning: run log ", line, sizeof line));
    assert_non_null(strstr(line, db));
    assert_non_null(strstr(line, why));
    assert_non_null(strstr(line, "continuing without logging"));
    assert_null(strstr(p->err, "logged run"));
    /* the statistics still come */
    assert_non_null(strstr(p->err, "cflow: counters: "));
}

static void test_bad_logs(void **state)
{
    (void)state;
    char *ref = reference_out(st_model, "40");
    char *const env[] = { "CFLOW_READ_BW_GBS=10", NULL };
    tu_proc p;

    /* garbage */
    char junk[4096];
    snprintf(junk, sizeof junk, "%s", tu_tmp("junk.db"));
    char garbage[16384];
    for (size_t i = 0; i < sizeof garbage; i++)
        garbage[i] = (char)((i * 2654435761u) >> 7);
    assert_int_equal(tu_write_file(junk, garbage, sizeof garbage), 0);
    cflow(&p, env, "run", "-m", st_model, "-p", prompt, "-n", "40", "--temp", "0", "--db",
          junk, NULL);
    expect_one_warning(&p, ref, junk, "garbage", "not a database");
    tu_proc_free(&p);
    size_t len;
    char *after = tu_read_file(junk, &len);
    assert_non_null(after);
    assert_int_equal(len, sizeof garbage);
    assert_memory_equal(after, garbage, len);
    free(after);

    /* the same through CFLOW_DB */
    char envdb[4200];
    snprintf(envdb, sizeof envdb, "CFLOW_DB=%s", junk);
    char *const env2[] = { "CFLOW_READ_BW_GBS=10", envdb, NULL };
    cflow(&p, env2, "run", "-m", st_model, "-p", prompt, "-n", "40", "--temp", "0", NULL);
    expect_one_warning(&p, ref, junk, "CFLOW_DB", "not a database");
    tu_proc_free(&p);

    /* locked by another process's write transaction */
    char ldb[4096];
    snprintf(ldb, sizeof ldb, "%s", tu_tmp("locked.db"));
    cflow(&p, env, "run", "-m", st_model, "-p", prompt, "-n", "4", "--temp", "0", "--db", ldb,
          NULL);
    expect_ok(&p, "making a log");
    tu_proc_free(&p);
    sqlite3 *d;
    assert_int_equal(sqlite3_open(ldb, &d), SQLITE_OK);
    assert_int_equal(sqlite3_exec(d, "BEGIN EXCLUSIVE", NULL, NULL, NULL), SQLITE_OK);
    cflow(&p, env, "run", "-m", st_model, "-p", prompt, "-n", "40", "--temp", "0", "--db", ldb,
          NULL);
    expect_one_warning(&p, ref, ldb, "locked", "locked");
    tu_proc_free(&p);
    sqlite3_exec(d, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(d);
    assert_int_equal(tu_db_int(ldb, "SELECT count(*) FROM run"), 1);

    /* read-only: a file this process may not write (as root, whom file
     * modes do not stop, cflow runs as nobody through setpriv) */
    char rdb[4096];
    snprintf(rdb, sizeof rdb, "%s", tu_tmp("ro.db"));
    cflow(&p, env, "run", "-m", st_model, "-p", prompt, "-n", "4", "--temp", "0", "--db", rdb,
          NULL);
    expect_ok(&p, "making a log");
    tu_proc_free(&p);
    assert_int_equal(chmod(rdb, 0444), 0);
    if (geteuid() == 0) {
        /* nobody must reach the model and the log: open up the scratch folder */
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", st_model);
        *strrchr(dir, '/') = 0;
        assert_int_equal(chmod(dir, 0755), 0);
        assert_int_equal(access("/usr/bin/setpriv", X_OK), 0);
        char script[16384];
        snprintf(script, sizeof script,
                 "exec /usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups '%s' run -m"
                 " '%s' -p '%s' -n 40 --temp 0 --db '%s'",
                 tu_cflow(), st_model, prompt, rdb);
        char *sh[] = { "/bin/sh", "-c", script, NULL };
        assert_int_equal(tu_run(&p, sh, env, 300), 0);
        chmod(dir, 0700);
    } else {
        cflow(&p, env, "run", "-m", st_model, "-p", prompt, "-n", "40", "--temp", "0", "--db",
              rdb, NULL);
    }
    expect_one_warning(&p, ref, rdb, "read-only", "read-only");
    tu_proc_free(&p);
    chmod(rdb, 0644);
    assert_int_equal(tu_db_int(rdb, "SELECT count(*) FROM run"), 1);

    /* a place where no log can be made */
    const char *nowhere = "/proc/self/cflow-cannot-exist/runs.db";
    cflow(&p, env, "run", "-m", st_model, "-p", prompt, "-n", "40", "--temp", "0", "--db",
          nowhere, NULL);
    expect_one_warning(&p, ref, nowhere, "nowhere", "unable to open");
    tu_proc_free(&p);
    free(ref);
}

/* ------------------------------------------------------------ 5 */

static void test_migrate_old_log(void **state)
{
    (void)state;
    char db[4096];
    snprintf(db, sizeof db, "%s", tu_tmp("v1.db"));
    char fx[4096];
    const char *src = getenv("CFLOW_SRCDIR");
    snprintf(fx, sizeof fx, "%s/tests/prof/runs-v1.sql", src && *src ? src : ".");
    tu_require(fx);
    char *sql = tu_read_file(fx, NULL);
    assert_non_null(sql);
    sqlite3 *d;
    assert_int_equal(sqlite3_open(db, &d), SQLITE_OK);
    assert_int_equal(sqlite3_exec(d, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(d);
    free(sql);
    assert_int_equal(tu_db_int(db, "PRAGMA user_version"), 1);

    json_object *a = runs_json(db);
    assert_int_equal(tu_db_int(db, "PRAGMA user_version"), PROF_LOG_SCHEMA);
    assert_int_equal(json_object_array_length(a), 3);
    json_object *r1 = json_object_array_get_idx(a, 0);
    assert_int_equal(jint(r1, "threads"), 4);
    assert_true(jnum(r1, "decode_tok_s") == 50.0);
    assert_string_equal(jstr(r1, "model"), "/models/old-stories.cflow");
    assert_string_equal(jstr(r1, "prefetch"), "off");
    assert_string_equal(jstr(json_object_array_get_idx(a, 2), "status"), "interrupted");
    json_object_put(a);

    /* a new run joins the migrated log */
    tu_proc p;
    char *const env[] = { "CFLOW_READ_BW_GBS=10", NULL };
    cflow(&p, env, "run", "-m", st_model, "-p", prompt, "-n", "8", "--temp", "0", "--db", db,
          NULL);
    expect_ok(&p, "run into the migrated log");
    assert_null(strstr(p.err, "warning"));
    assert_non_null(strstr(p.err, "cflow: logged run 4 in "));
    tu_proc_free(&p);
    a = runs_json(db);
    assert_int_equal(json_object_array_length(a), 4);
    json_object_put(a);
    cflow(&p, NULL, "runs", "compare", "1", "4", "--db", db, NULL);
    expect_ok(&p, "compare an old and a new run");
    assert_non_null(strstr(p.out, "decode tok/s"));
    tu_proc_free(&p);
}

/* ------------------------------------------------------------ 6 */

/* A database made by sql (a fixture file's text first, when fixture is
 * set). */
static void make_db(const char *path, const char *fixture, const char *sql)
{
    sqlite3 *d;
    char *msg = NULL;
    assert_int_equal(sqlite3_open(path, &d), SQLITE_OK);
    if (fixture) {
        char fx[4096];
        const char *src = getenv("CFLOW_SRCDIR");
        snprintf(fx, sizeof fx, "%s/tests/prof/%s", src && *src ? src : ".", fixture);
        tu_require(fx);
        char *text = tu_read_file(fx, NULL);
        assert_non_null(text);
        assert_int_equal(sqlite3_exec(d, text, NULL, NULL, &msg), SQLITE_OK);
        free(text);
    }
    if (sqlite3_exec(d, sql, NULL, NULL, &msg) != SQLITE_OK) {
        fprintf(stderr, "%s: %s\n", path, msg);
        fail();
    }
    /* a WAL-mode database keeps what its WAL holds (as after a crash) */
    sqlite3_db_config(d, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int *)NULL);
    sqlite3_close(d);
}

/* path's bytes, and its -wal file's (or "" when it has none), as one
 * malloc'd block. */
static char *db_bytes(const char *path, size_t *len)
{
    char wal[4200];
    size_t n0, n1 = 0;
    snprintf(wal, sizeof wal, "%s-wal", path);
    char *a = tu_read_file(path, &n0);
    char *b = access(wal, F_OK) == 0 ? tu_read_file(wal, &n1) : strdup("");
    assert_non_null(a);
    assert_non_null(b);
    char *v = malloc(n0 + n1 + 1);
    assert_non_null(v);
    memcpy(v, a, n0);
    memcpy(v + n0, b, n1);
    free(a);
    free(b);
    *len = n0 + n1;
    return v;
}

/* A log cflow refuses is left byte for byte as it was (no journal-mode
 * switch, no migration, no tables added, no checkpoint of its WAL),
 * whatever the reason, whether a reader (`runs list`: one error line,
 * exit 1) or a writer (`run`: one warning, the same continuation) opened
 * it. */
static void test_refused_logs_unchanged(void **state)
{
    (void)state;
    static const struct {
        const char *name, *fixture, *sql, *why;
    } kinds[] = {
        { "foreign", NULL,
          "CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT);"
          "INSERT INTO notes(body) VALUES('not a run log');",
          "not a cflow run log: it holds table notes" },
        { "newer", NULL, "CREATE TABLE future(x); PRAGMA user_version=99;",
          "schema version 99 is newer" },
        /* closing must not checkpoint the WAL into the file */
        { "newer-wal", NULL,
          "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0; CREATE TABLE future(x);"
          " INSERT INTO future VALUES(1); PRAGMA user_version=12;",
          "schema version 12 is newer" },
        { "negative", NULL, "CREATE TABLE t(x); PRAGMA user_version=-1;",
          "schema version -1 is not one this cflow knows" },
        { "missing", NULL,
          "CREATE TABLE machine(id INTEGER PRIMARY KEY, hostname TEXT NOT NULL,"
          " cpu_model TEXT NOT NULL, isa TEXT NOT NULL, cores INTEGER NOT NULL,"
          " read_bw_gbs REAL); PRAGMA user_version=5;",
          "of schema version 5: no table model" },
        /* the tables of version 2 labelled 3: run lacks 3's columns */
        { "thin", "runs-v2.sql", "PRAGMA user_version=3;",
          "of schema version 3: table run has no column attn_bytes" },
    };
    char *ref = reference_out(st_model, "8");
    char *const env[] = { "CFLOW_READ_BW_GBS=10", NULL };

    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        char name[64], db[4096];
        snprintf(name, sizeof name, "refused-%s.db", kinds[k].name);
        snprintf(db, sizeof db, "%s", tu_tmp(name));
        make_db(db, kinds[k].fixture, kinds[k].sql);
        size_t len0;
        char *before = db_bytes(db, &len0);

        tu_proc p;
        cflow(&p, NULL, "runs", "list", "--db", db, NULL);
        fprintf(stderr, "%-8s runs list: exit %d: %s", kinds[k].name, p.status, p.err);
        assert_int_equal(p.status, 1);
        assert_int_equal(tu_count_lines(p.err), 1);
        assert_non_null(strstr(p.err, db));
        assert_non_null(strstr(p.err, kinds[k].why));
        tu_proc_free(&p);

        cflow(&p, env, "run", "-m", st_model, "-p", prompt, "-n", "8", "--temp", "0", "--db",
              db, NULL);
        expect_one_warning(&p, ref, db, kinds[k].name, kinds[k].why);
        tu_proc_free(&p);

        size_t len1;
        char *after = db_bytes(db, &len1);
        assert_int_equal(len1, len0);
        assert_memory_equal(after, before, len0);
        free(before);
        free(after);
    }
    free(ref);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_runs_compare),
        cmocka_unit_test(test_counters_reported),
        cmocka_unit_test(test_sigkill),
        cmocka_unit_test(test_two_writers),
        cmocka_unit_test(test_bad_logs),
        cmocka_unit_test(test_migrate_old_log),
        cmocka_unit_test(test_refused_logs_unchanged),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
