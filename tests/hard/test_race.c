/*
 * test_race.c — the run log under concurrency and pressure (issue 44,
 * class 3), through the real binary:
 *
 *   - the first instant: 8 `cflow run`s released at one instant (a pipe
 *     each child blocks on until the test closes it, then execv) on one
 *     run log that does not exist yet and one GGUF not yet in the model
 *     cache, 20 times: every process exits 0 with the same tokens, the
 *     log holds the 8 runs ("done"), `PRAGMA integrity_check` says ok,
 *     exactly one process converted (one "converted" line, one entry in
 *     the cache, no temporary file left), and nothing on any stderr is a
 *     warning or an error (waiting for the sibling that converts is not
 *     one: man/cflow.1, MODEL CACHE);
 *   - 4 `cflow run` and 4 `cflow bench` released at one instant on a new
 *     log, 3 times: 4 runs and 8 bench rows, 8 sessions, integrity ok, no
 *     warning;
 *   - a storm of openers: 64 processes open one new log with
 *     prof_log_open at one instant, 3 times.  Each found version 0 and
 *     migrated; the migration used to check the whole schema while it
 *     held the write lock (31 ms an open on the Xeon 6/207 VM), so they
 *     queued in turn past the busy timeout and about a quarter gave up
 *     with "cannot migrate: database is locked" (1683 of 6400 opens
 *     before the fix in prof_log.c's migrate);
 *   - a long transaction: another connection holds the log's write lock
 *     (BEGIN IMMEDIATE, as `sqlite3` would) for the whole run; cflow
 *     waits the stated busy time (about 3 s for its first write), says one
 *     warning, prints the same tokens as without a log and exits 0 well
 *     within 15 s; the transaction of the other program is intact and
 *     commits afterwards, and the log passes integrity_check.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "hard.h"
#include "prof/prof.h"

enum { N_PROC = 8, N_ROUNDS = 20, N_STORM = 64, STORM_ROUNDS = 3 };

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Fork n children that block on a pipe; each then calls go(i, ud), which
 * execs or _exits.  Closing the pipe releases them at one instant.  Waits
 * for all (timeout_s in all: then kills them and fails); the number that
 * did not exit 0. */
static int at_once(int n, void (*go)(int i, void *ud), void *ud, int timeout_s)
{
    int pp[2];
    pid_t pids[N_STORM];
    assert_true(n <= N_STORM);
    assert_int_equal(pipe(pp), 0);
    for (int i = 0; i < n; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            char c;
            close(pp[1]);
            while (read(pp[0], &c, 1) < 0 && errno == EINTR)
                ;
            close(pp[0]);
            go(i, ud);
            _exit(127);
        }
    }
    close(pp[0]);
    usleep(200000);                 /* all of them blocked on the read */
    close(pp[1]);
    int bad = 0, left = n;
    double t0 = now_s();
    while (left) {
        int st;
        pid_t w = waitpid(-1, &st, WNOHANG);
        if (w > 0) {
            left--;
            if (!WIFEXITED(st) || WEXITSTATUS(st))
                bad++;
            continue;
        }
        if (now_s() - t0 > timeout_s) {
            for (int i = 0; i < n; i++)
                kill(pids[i], SIGKILL);
            while (wait(NULL) > 0)
                ;
            fail_msg("%d of %d processes still running after %d s", left, n, timeout_s);
        }
        usleep(5000);
    }
    return bad;
}

/* ---- 8 cflow run on a new log and an uncached GGUF -------------------- */

typedef struct round_ctx {
    const char *gguf, *dir;
} round_ctx;

static void run_one(int i, void *ud)
{
    const round_ctx *c = ud;
    char out[4200], err[4200], db[4200], cache[4200];
    snprintf(out, sizeof out, "%s/out.%d", c->dir, i);
    snprintf(err, sizeof err, "%s/err.%d", c->dir, i);
    snprintf(db, sizeof db, "%s/runs.db", c->dir);
    snprintf(cache, sizeof cache, "XDG_CACHE_HOME=%s/cache", c->dir);
    int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o < 0 || e < 0)
        _exit(126);
    dup2(o, 1);
    dup2(e, 2);
    putenv(cache);
    putenv("CFLOW_READ_BW_GBS=10");   /* no bandwidth measurement in each */
    char *argv[] = { (char *)tu_cflow(), "run", "-m", (char *)c->gguf, "-p", "Once upon",
                     "-n", "6", "--temp", "0", "-t", "1", "--db", db, NULL };
    execv(argv[0], argv);
    _exit(127);
}

static void test_first_instant(void **state)
{
    (void)state;
    const char *gguf = tu_shared("models/stories260K-q8_0.gguf");
    tu_require(gguf);
    char first_out[256] = "";
    double t0 = now_s();
    for (int r = 0; r < N_ROUNDS; r++) {
        char name[32], dir[4096], db[4200], cache[4200];
        snprintf(name, sizeof name, "round%d", r);
        snprintf(dir, sizeof dir, "%s", tu_tmp(name));
        assert_int_equal(mkdir(dir, 0700), 0);
        snprintf(db, sizeof db, "%s/runs.db", dir);
        snprintf(cache, sizeof cache, "%s/cache/cflow", dir);
        round_ctx c = { gguf, dir };
        int bad = at_once(N_PROC, run_one, &c, 120);
        int converted = 0;
        for (int i = 0; i < N_PROC; i++) {
            char path[4200];
            size_t len;
            snprintf(path, sizeof path, "%s/err.%d", dir, i);
            char *err = tu_read_file(path, &len);
            assert_non_null(err);
            for (char *line = err; *line;) {
                char *nl = strchr(line, '\n');
                if (nl)
                    *nl = 0;
                if (!strncmp(line, "cflow: converted ", 17))
                    converted++;
                if (strstr(line, "warning") || strstr(line, "error") || strstr(line, "waiting"))
                    fail_msg("round %d, process %d: %s", r, i, line);
                line = nl ? nl + 1 : line + strlen(line);
            }
            free(err);
            snprintf(path, sizeof path, "%s/out.%d", dir, i);
            char *out = tu_read_file(path, &len);
            assert_non_null(out);
            assert_true(len > 0 && len < sizeof first_out);
            if (!first_out[0])
                snprintf(first_out, sizeof first_out, "%s", out);
            assert_string_equal(out, first_out);
            free(out);
        }
        assert_int_equal(bad, 0);
        assert_int_equal(converted, 1);
        assert_int_equal(hard_dir_count(cache, ".tmp."), 0);
        assert_int_equal(hard_dir_count(cache, ".cflow"), 1);
        assert_int_equal(tu_db_int(db, "SELECT count(*) FROM run WHERE status = 'done'"),
                         N_PROC);
        assert_int_equal(tu_db_int(db, "SELECT count(DISTINCT pid) FROM session"), N_PROC);
        char ic[64];
        tu_db_text(db, "PRAGMA integrity_check", ic, sizeof ic);
        assert_string_equal(ic, "ok");
    }
    print_message("%d rounds of %d processes in %.1f s\n", N_ROUNDS, N_PROC, now_s() - t0);
}

/* ---- cflow run and cflow bench on one new log -------------------------- */

static void mixed_one(int i, void *ud)
{
    const round_ctx *c = ud;
    char err[4200], db[4200];
    snprintf(err, sizeof err, "%s/err.%d", c->dir, i);
    snprintf(db, sizeof db, "%s/runs.db", c->dir);
    int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644), n = open("/dev/null", O_WRONLY);
    if (e < 0 || n < 0)
        _exit(126);
    dup2(n, 1);
    dup2(e, 2);
    putenv("CFLOW_READ_BW_GBS=10");
    char *run[] = { (char *)tu_cflow(), "run", "-m", (char *)c->gguf, "-n", "16", "-t", "1",
                    "--db", db, NULL };
    char *bench[] = { (char *)tu_cflow(), "bench", "-m", (char *)c->gguf, "-p", "16", "-n", "16",
                      "-r", "2", "-t", "1", "--db", db, NULL };
    execv(tu_cflow(), i < 4 ? run : bench);
    _exit(127);
}

static void test_run_and_bench(void **state)
{
    (void)state;
    for (int r = 0; r < 3; r++) {
        char name[32], dir[4096], db[4200];
        snprintf(name, sizeof name, "mixed%d", r);
        snprintf(dir, sizeof dir, "%s", tu_tmp(name));
        assert_int_equal(mkdir(dir, 0700), 0);
        snprintf(db, sizeof db, "%s/runs.db", dir);
        round_ctx c = { hard_default_model(), dir };
        assert_int_equal(at_once(N_PROC, mixed_one, &c, 120), 0);
        for (int i = 0; i < N_PROC; i++) {
            char path[4200];
            snprintf(path, sizeof path, "%s/err.%d", dir, i);
            char *err = tu_read_file(path, NULL);
            assert_non_null(err);
            if (strstr(err, "warning") || strstr(err, "error"))
                fail_msg("round %d, process %d:\n%s", r, i, err);
            free(err);
        }
        assert_int_equal(tu_db_int(db, "SELECT count(*) FROM run WHERE status = 'done'"), 4);
        assert_int_equal(tu_db_int(db, "SELECT count(*) FROM bench"), 8);   /* pp16, tg16 */
        assert_int_equal(tu_db_int(db, "SELECT count(*) FROM session"), N_PROC);
        char ic[64];
        tu_db_text(db, "PRAGMA integrity_check", ic, sizeof ic);
        assert_string_equal(ic, "ok");
    }
}

/* ---- 64 openers of one new log ---------------------------------------- */

static void open_one(int i, void *ud)
{
    prof_log *l;
    char err[1024];
    (void)i;
    if (prof_log_open(&l, ud, PROF_LOG_CREATE, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        _exit(1);
    }
    prof_log_close(l);
    _exit(0);
}

static void test_open_storm(void **state)
{
    (void)state;
    for (int r = 0; r < STORM_ROUNDS; r++) {
        char name[32], db[4096];
        snprintf(name, sizeof name, "storm%d.db", r);
        snprintf(db, sizeof db, "%s", tu_tmp(name));
        int bad = at_once(N_STORM, open_one, db, 120);
        if (bad)
            fail_msg("round %d: %d of %d openers of a new log failed", r, bad, N_STORM);
        assert_int_equal(tu_db_int(db, "PRAGMA user_version"), PROF_LOG_SCHEMA);
        char ic[64];
        tu_db_text(db, "PRAGMA integrity_check", ic, sizeof ic);
        assert_string_equal(ic, "ok");
    }
}

/* ---- a write lock held by another program ----------------------------- */

static void test_long_transaction(void **state)
{
    (void)state;
    const char *model = hard_default_model();
    char db[4096];
    snprintf(db, sizeof db, "%s", tu_tmp("held.db"));
    char *const env[] = { "CFLOW_READ_BW_GBS=10", NULL };
    tu_proc p, q;
    /* the log exists, with one run */
    assert_int_equal(tu_cflow_env(&p, env, "run", "-m", model, "-p", "One day", "-n", "8",
                                  "--temp", "0", "--db", db, (char *)NULL),
                     0);
    assert_true(tu_ok(&p, "the first run"));
    tu_proc_free(&p);
    /* the reference: the same run without a log */
    assert_int_equal(tu_cflow_env(&q, env, "run", "-m", model, "-p", "One day", "-n", "8",
                                  "--temp", "0", "--no-log", (char *)NULL),
                     0);
    assert_true(tu_ok(&q, "the run without a log"));

    sqlite3 *h;
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    assert_int_equal(sqlite3_exec(h, "BEGIN IMMEDIATE; INSERT INTO machine(hostname,"
                                     " cpu_model, isa, cores) VALUES('other', 'x', 'y', 1)",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    double t0 = now_s();
    assert_int_equal(tu_cflow_env(&p, env, "run", "-m", model, "-p", "One day", "-n", "8",
                                  "--temp", "0", "--db", db, (char *)NULL),
                     0);
    double took = now_s() - t0;
    print_message("a run on a log held by another transaction took %.2f s\n", took);
    assert_true(tu_ok(&p, "the run on a held log"));
    assert_true(took < 15.0);
    assert_string_equal(p.out, q.out);
    int warnings = 0;
    for (const char *s = p.err; (s = strstr(s, "warning")); s++)
        warnings++;
    assert_int_equal(warnings, 1);
    assert_non_null(strstr(p.err, "database is locked; continuing without logging"));
    tu_proc_free(&p);
    tu_proc_free(&q);
    /* the other program's transaction is whole and commits */
    assert_int_equal(sqlite3_exec(h, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(h);
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM machine WHERE hostname = 'other'"), 1);
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM run"), 1);
    char ic[64];
    tu_db_text(db, "PRAGMA integrity_check", ic, sizeof ic);
    assert_string_equal(ic, "ok");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_instant),
        cmocka_unit_test(test_run_and_bench),
        cmocka_unit_test(test_open_storm),
        cmocka_unit_test(test_long_transaction),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
