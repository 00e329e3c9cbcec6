/*
 * test_runlog_fault.c — a full disk and a locked database under the run
 * log of `cflow run`.
 *
 * Faults come from the real binary: CFLOW_FAULT=runlog:enospc@N or
 * runlog:busy@N (src/prof/prof_fault.c: the N-th write fails as ENOSPC
 * does, the N-th take of the write lock finds it held), and a real
 * competing connection that holds the write lock for the whole run.  In
 * every case generation carries on (same text as without the fault, exit
 * status 0), one warning names the database and the problem, and the
 * database afterwards passes PRAGMA integrity_check and holds only whole
 * transactions: every run's tokens are numbered 0..k-1 and its totals count
 * exactly those k tokens (tokens and totals are written in one
 * transaction per batch).
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "hard.h"

#define N_PREDICT "800"

static char *reference;   /* the text of the run without faults */

static int count_substr(const char *s, const char *sub)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, sub)); p += strlen(sub))
        n++;
    return n;
}

static void run_cflow(tu_proc *p, const char *db, const char *fault)
{
    char env_fault[128], *cflow = (char *)tu_cflow();
    char *argv[] = { cflow, "run", "-m", (char *)hard_default_model(), "-n", N_PREDICT,
                     "--ignore-eos", "--temp", "0", "-t", "1", "--db", (char *)db, NULL };
    char *env[] = { env_fault, NULL };
    snprintf(env_fault, sizeof env_fault, "CFLOW_FAULT=%s", fault ? fault : "");
    assert_int_equal(tu_run(p, argv, env, 300), 0);
}

/* integrity_check, and only whole batches; returns the number of runs and
 * (in *tokens) the number of token rows. */
static int64_t check_db(const char *path, int64_t *tokens)
{
    char ok[64];
    tu_db_text(path, "PRAGMA integrity_check", ok, sizeof ok);  /* "" without a row */
    assert_string_equal(ok, "ok");
    int64_t runs = 0;
    *tokens = 0;
    if (tu_db_int(path, "SELECT count(*) FROM sqlite_master WHERE name = 'run'") == 1) {
        runs = tu_db_int(path, "SELECT count(*) FROM run");
        *tokens = tu_db_int(path, "SELECT count(*) FROM token");
        /* runs whose tokens are not exactly 0..n_prompt+n_gen-1 */
        assert_int_equal(tu_db_int(path,
            "SELECT count(*) FROM run r WHERE"
            " (SELECT count(*) FROM token t WHERE t.run_id = r.id)"
            "   != coalesce(r.n_prompt, 0) + coalesce(r.n_gen, 0)"
            " OR coalesce((SELECT max(idx) + 1 FROM token t WHERE t.run_id = r.id), 0)"
            "   != coalesce(r.n_prompt, 0) + coalesce(r.n_gen, 0)"), 0);
        /* per-layer totals written with the same batch */
        assert_int_equal(tu_db_int(path,
            "SELECT count(*) FROM layer_stat l JOIN run r ON r.id = l.run_id"
            " WHERE l.n_tokens != r.n_gen"), 0);   /* decode tokens */
        assert_int_equal(tu_db_int(path, "PRAGMA foreign_key_check"), TU_DB_NONE);  /* no rows */
    }
    return runs;
}

/* cflow run under fault (NULL: none, for a real lock): it goes on as
 * without the fault and warns once, naming the database and what. */
static void run_carried_on(const char *db, const char *fault, const char *what)
{
    tu_proc p;
    run_cflow(&p, db, fault);
    assert_false(p.signaled);
    assert_int_equal(p.status, 0);
    assert_string_equal(p.out, reference);
    assert_int_equal(count_substr(p.err, "warning: run log"), 1);
    assert_non_null(strstr(p.err, db));
    assert_non_null(strstr(p.err, what));
    assert_non_null(strstr(p.err, "continuing without logging"));
    tu_proc_free(&p);
}

static int setup(void **state)
{
    (void)state;
    tu_proc p;
    run_cflow(&p, tu_tmp("ref.db"), NULL);
    if (p.status != 0 || p.out_len == 0)
        return -1;
    reference = p.out;
    p.out = NULL;
    tu_proc_free(&p);
    int64_t tokens;
    assert_int_equal(check_db(tu_tmp("ref.db"), &tokens), 1);
    assert_int_equal(tokens, atoi(N_PREDICT));   /* BOS + 799 decoded */
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    free(reference);
    return 0;
}

/* The disk fills up in the middle of a run: the batches committed before
 * stay, the one being written is rolled back whole. */
static void test_enospc_mid_run(void **state)
{
    (void)state;
    const char *db = tu_tmp("enospc.db");
    /* the 90th write: past the membw record and the schema, a few
     * batches into the run */
    run_carried_on(db, "runlog:enospc@90", "disk is full");
    int64_t tokens;
    assert_int_equal(check_db(db, &tokens), 1);
    assert_true(tokens > 0 && tokens < atoi(N_PREDICT));
}

/* Full from the start (creating the schema fails): no half-made schema. */
static void test_enospc_at_creation(void **state)
{
    (void)state;
    static const char *const faults[] = { "runlog:enospc@0", "runlog:enospc@20" };
    for (int i = 0; i < 2; i++) {
        char name[32];
        snprintf(name, sizeof name, "enospc0-%d.db", i);
        const char *db = tu_tmp(name);
        run_carried_on(db, faults[i], "disk is full");
        int64_t tokens;
        assert_int_equal(check_db(db, &tokens), 0);
    }
}

/* A log that already holds runs keeps them whole when the disk fills. */
static void test_enospc_existing_log(void **state)
{
    (void)state;
    const char *db = tu_tmp("existing.db");
    tu_proc p;
    run_cflow(&p, db, NULL);
    assert_int_equal(p.status, 0);
    assert_null(strstr(p.err, "warning"));
    tu_proc_free(&p);
    run_carried_on(db, "runlog:enospc@10", "disk is full");
    int64_t tokens;
    int64_t runs = check_db(db, &tokens);
    assert_true(runs == 1 || runs == 2);
    assert_true(tokens >= atoi(N_PREDICT));
}

/* Another process takes the write lock mid-run and keeps it. */
static void test_busy_mid_run(void **state)
{
    (void)state;
    const char *db = tu_tmp("busy.db");
    run_carried_on(db, "runlog:busy@10", "locked");
    int64_t tokens;
    assert_int_equal(check_db(db, &tokens), 1);
    assert_true(tokens > 0 && tokens < atoi(N_PREDICT));
}

/* A real competitor: this test holds BEGIN IMMEDIATE on the log for the
 * whole run. */
static void test_busy_real_lock(void **state)
{
    (void)state;
    const char *path = tu_tmp("locked.db");
    tu_proc p;
    run_cflow(&p, path, NULL);
    assert_int_equal(p.status, 0);
    tu_proc_free(&p);

    sqlite3 *db;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "BEGIN IMMEDIATE; INSERT INTO machine(hostname,"
                                      " cpu_model, isa, cores) VALUES ('x', 'x', 'x', 1)",
                                  NULL, NULL, NULL), SQLITE_OK);
    run_carried_on(path, NULL, "locked");
    assert_int_equal(sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    int64_t tokens;
    assert_int_equal(check_db(path, &tokens), 1);
    assert_int_equal(tokens, atoi(N_PREDICT));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_enospc_mid_run),
        cmocka_unit_test(test_enospc_at_creation),
        cmocka_unit_test(test_enospc_existing_log),
        cmocka_unit_test(test_busy_mid_run),
        cmocka_unit_test(test_busy_real_lock),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
