/*
 * prof_log.c — the run log: every cflow session in an SQLite database, so
 * runs can be listed, compared and exported long after they ended.
 *
 * One database per user (prof_log_default_path).  It is opened in WAL mode
 * with synchronous=NORMAL: a writer never blocks readers, a commit costs no
 * fsync (only checkpoints do), and a process killed at any instant — even
 * inside a transaction — leaves a database that is consistent and holds
 * every committed transaction.  Several processes may log at once: each
 * write is one short BEGIN IMMEDIATE transaction, with a busy timeout and a
 * few retries, so they take turns instead of failing.
 *
 * Schema (PRAGMA user_version = PROF_LOG_SCHEMA).  Times are ISO 8601 UTC
 * text with milliseconds ("2026-01-02T03:04:05.678Z"); durations seconds.
 *
 *   machine(id, hostname, cpu_model, isa, cores, read_bw_gbs)
 *       One row per (hostname, cpu_model, isa, cores).  read_bw_gbs is the
 *       measured read bandwidth in GB/s, NULL while unknown.
 *   model(id, path, size, hash, arch, quant, n_layers, dim, ffn_dim,
 *         n_heads, n_kv_heads, vocab_size, n_experts, top_k, dense_delay,
 *         expert_delay)
 *       One row per (path, hash): hash is prof_file_hash's 16 hex digits,
 *       so a file rewritten in place becomes a new model.
 *   session(id, machine_id, model_id, program, started, pid)
 *       One process's use of one model ("cflow run", later "cflow bench",
 *       "cflow-tui").
 *   run(id, session_id, started, ended, status, threads, prefetch,
 *       expert_io, n_ctx, temp, top_k, top_p, min_p, rep_penalty,
 *       rep_last_n, seed, n_prompt, n_gen, prefill_s, decode_s,
 *       bytes_per_token, prefill_tok_s, decode_tok_s, gb_s, bw_share,
 *       attn_bytes, ffn_bytes, experts_bytes, cp_naive_bytes,
 *       cp_critical_bytes)
 *       A stretch of decoding under one configuration; a changed setting
 *       starts a new run.  status is "running" until the run's last flush
 *       writes "done" and ended; the totals are rewritten at every flush,
 *       so a run that was killed keeps those of its last committed batch
 *       (readers show a "running" run whose process is gone from this host
 *       as "interrupted"; runs migrated from version 1 without an end time
 *       are stored as "interrupted").  attn_bytes ... experts_bytes are
 *       the weight bytes streamed over all the run's tokens;
 *       cp_naive_bytes and cp_critical_bytes the critical-path model's
 *       totals per token (NULL: not known).
 *   token(run_id, idx, phase, t, dt, attn_s, ffn_s, experts_s, io_wait_s,
 *         c_<event>...)
 *       One row per token (phase 0 prefill, 1 decode; t its start since the
 *       run began), with the counter deltas of that token in the columns
 *       c_cycles ... c_cpu_migrations (names: prof_ev_name with '-' as
 *       '_'), NULL where unavailable, and the weight bytes it streamed
 *       (attn_bytes, ffn_bytes, experts_bytes).
 *   layer_stat(run_id, layer, attn_s, ffn_s, experts_s, io_wait_s, n_tokens,
 *              attn_bytes, ffn_bytes, experts_bytes, cp_attn_bytes,
 *              cp_dense_bytes, cp_expert_bytes, cp_naive_bytes,
 *              cp_critical_bytes, cp_binding, io_s, io_bytes)
 *       Seconds per layer and stream over the run's decode tokens; weight
 *       bytes streamed per stream, summed over the same n_tokens tokens
 *       (the tiles the engine read: for experts only the routed ones).
 *       Runs logged before 2026-12-02 counted prefill tokens too (n_tokens
 *       = n_prompt + n_gen): each row's sums and n_tokens still agree, but
 *       a batched prefill's tokens lowered its per-token figures; the analytic
 *       critical-path model of the layer in bytes per token (report eq.
 *       4.23: the three streams, naive and critical, and the binding
 *       stream "attention", "dense" or "experts"), NULL when not known.
 *       io_s and io_bytes: the expert reads of --expert-io sync/staged
 *       routed at the layer (seconds from issue to last byte, bytes read),
 *       NULL without such reads; with io_wait_s (the stall) and the
 *       compute seconds they give prof_io_derive's figures (fraction
 *       hidden, the report's (C + IO) / max(C, IO_eff)).
 *   counter(run_id, event, value, reason)
 *       Counter totals of the run; value NULL and reason set when the event
 *       was unavailable.
 *   bench(id, session_id, test_time, n_threads, n_prompt, n_gen, n_depth,
 *         prefetch, expert_io, repetitions, avg_ns, stddev_ns, avg_ts,
 *         stddev_ts, bytes_per_token, gb_s, read_bw_gbs, bw_pct)
 *       One `cflow bench` test (version 5): llama-bench's names and
 *       meanings (avg_ts the mean of the repetitions' tokens per second);
 *       gb_s and bw_pct for decode tests only (NULL otherwise).
 *   membw(id, hostname, cpu_model, cores, threads, measured, passes, bytes,
 *         median_gbs, min_gbs, max_gbs)
 *       One `cflow bench membw` measurement (version 6; prof_log_membw.c
 *       says more): the machine's read bandwidth at a thread count, which
 *       later `cflow bench` runs reuse.
 *   diskbw(id, hostname, dev, path, measured, gbs)
 *       One `cflow bench diskbw` measurement (version 7): the storage
 *       device (st_dev of the file read) and the GB/s it gave, which the
 *       storage-bound limit of expert streaming reuses.
 * Version 7 also added, to run and bench, the expert streaming figures
 * (prof_xio_fig, NULL without routed experts): the counts xio_hits,
 * xio_misses (routed experts found in the RAM cache, read), xio_tokens,
 * xio_bytes (read from storage), xio_s (the reader's busy seconds),
 * xio_depth_s (reads in flight integrated over time), xio_pred and
 * xio_pred_hits (look-ahead), disk_gbs (the storage bandwidth the limit
 * used, NULL when none was recorded), and the figures prof_xio_derive
 * makes of them (xio_hit_rate, xio_bytes_tok, xio_gb_s, xio_depth,
 * xio_limit_tok_s, xio_reached, xio_pred_acc; NULL where "n/a"); to run
 * expert_io_asked (what --expert-io said: "auto" beside expert_io, the
 * mode it resolved to) and expert_cache_bytes (the RAM cache's size); to
 * session model_named, the model as the user named it (a GGUF or Hugging
 * Face folder runs from its conversion, which model.path names).
 *
 * Migrations.  migrations[v] takes a database from user_version v to v+1;
 * a new database runs them all from 0, so a fresh log and a migrated one
 * are the same schema by construction.  Version 1 was the first layout
 * (no bandwidth, geometry, per-layer or counter data); version 2 added
 * them; version 3 added streamed bytes and the critical-path model; version 4
 * the expert I/O per layer (io_s, io_bytes); version 5 the bench table;
 * version 6 the membw table; version 7 the expert streaming figures;
 * version 8 to run and bench xio_stall_s (seconds decode waited for
 * reads), xio_pred_reads, xio_pred_wasted, xio_pred_bytes (look-ahead
 * guesses read, of them not routed, their bytes) and the figures
 * xio_wasted_tok, xio_compute_s_tok, xio_ov_limit_tok_s, xio_ov_reached
 * (prof_xio_fig: the bound with reads overlapped with compute); version 9
 * to run and bench expert_ahead, the look-ahead setting (layers guessed
 * ahead, 0 off; NULL for a dense model), so runs that differ in it can be
 * told apart; version 10 to bench interleave, how many tests took turns
 * a token each in the test's repetitions (`cflow bench --interleave`; 1
 * a test run alone, NULL before version 10); version 11 to run what a
 * request to `cflow serve` adds (NULL for the runs of other programs):
 * client (the address and port it came from), endpoint (method and
 * path), stop (why it ended: "stop", "length", "cancelled", "error"),
 * queue_s (seconds it waited for a slot), n_cached (prompt tokens the
 * slot's cache already held, not prefilled again: n_prompt counts those
 * prefilled) and n_prompt_all (the prompt's tokens).  A server logs each
 * request as a run of its one session, several in flight at once, each
 * through its own handle (prof_log_session_join).
 * Migrating runs inside the BEGIN IMMEDIATE transaction that reads
 * user_version again, so two processes opening an old log at once migrate
 * it once (migrate() says why nothing else is read under that lock).  A log newer than this program is refused, never downgraded.
 *
 * Opening checks before it writes: the version must be one this program
 * knows, a version-0 file must hold no tables (else it is another
 * program's database), and a file of version v must hold every table and
 * column that migrations 0 .. v-1 make (check_tables builds that schema in
 * memory to compare).  Only a file that passes is switched to WAL, which
 * rewrites its header, and migrated; a refused file keeps every byte, its
 * -wal file included.
 *
 * "The report" (with its section numbers) is the Pipeline-Native
 * Transformers report.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "prof/prof.h"
#include "prof/prof_impl.h"
#include "prof/prof_log_impl.h"

#define BUSY_TIMEOUT_MS 1000
#define BUSY_RETRIES    2
/* The wait for the write lock while a new (or older) log is migrated:
 * once per log, by whichever process comes first, the others finding the
 * work done.  Tens of processes started on a new log on a loaded machine
 * (under AddressSanitizer, beside other jobs) queued for it past
 * BUSY_TIMEOUT_MS's three tries, and the last went on without logging
 * (test_race); nothing holds that lock long, so waiting is safe. */
#define MIGRATE_TIMEOUT_MS 30000

/* The expert streaming figures (prof_xio_fig), inputs then derived, as
 * columns of table t (schema 7). */
#define XIO_COLS(t)                                                              \
    "ALTER TABLE " t " ADD COLUMN xio_hits INTEGER;"                              \
    "ALTER TABLE " t " ADD COLUMN xio_misses INTEGER;"                            \
    "ALTER TABLE " t " ADD COLUMN xio_tokens INTEGER;"                            \
    "ALTER TABLE " t " ADD COLUMN xio_bytes INTEGER;"                             \
    "ALTER TABLE " t " ADD COLUMN xio_s REAL;"                                    \
    "ALTER TABLE " t " ADD COLUMN xio_depth_s REAL;"                              \
    "ALTER TABLE " t " ADD COLUMN xio_pred INTEGER;"                              \
    "ALTER TABLE " t " ADD COLUMN xio_pred_hits INTEGER;"                         \
    "ALTER TABLE " t " ADD COLUMN disk_gbs REAL;"                                 \
    "ALTER TABLE " t " ADD COLUMN xio_hit_rate REAL;"                             \
    "ALTER TABLE " t " ADD COLUMN xio_bytes_tok REAL;"                            \
    "ALTER TABLE " t " ADD COLUMN xio_gb_s REAL;"                                 \
    "ALTER TABLE " t " ADD COLUMN xio_depth REAL;"                                \
    "ALTER TABLE " t " ADD COLUMN xio_limit_tok_s REAL;"                          \
    "ALTER TABLE " t " ADD COLUMN xio_reached REAL;"                              \
    "ALTER TABLE " t " ADD COLUMN xio_pred_acc REAL;"

/* Schema 8's: the decode's stall, the look-ahead's reads, and the bound
 * with reads overlapped with compute. */
#define XIO8_COLS(t)                                                             \
    "ALTER TABLE " t " ADD COLUMN xio_stall_s REAL;"                              \
    "ALTER TABLE " t " ADD COLUMN xio_pred_reads INTEGER;"                        \
    "ALTER TABLE " t " ADD COLUMN xio_pred_wasted INTEGER;"                       \
    "ALTER TABLE " t " ADD COLUMN xio_pred_bytes INTEGER;"                        \
    "ALTER TABLE " t " ADD COLUMN xio_wasted_tok REAL;"                           \
    "ALTER TABLE " t " ADD COLUMN xio_compute_s_tok REAL;"                        \
    "ALTER TABLE " t " ADD COLUMN xio_ov_limit_tok_s REAL;"                       \
    "ALTER TABLE " t " ADD COLUMN xio_ov_reached REAL;"

static const char *const migrations[PROF_LOG_SCHEMA] = {
    /* 0 -> 1: the first layout */
    "CREATE TABLE machine(id INTEGER PRIMARY KEY, hostname TEXT NOT NULL,"
    " cpu_model TEXT NOT NULL, isa TEXT NOT NULL, cores INTEGER NOT NULL);"
    "CREATE TABLE model(id INTEGER PRIMARY KEY, path TEXT NOT NULL,"
    " size INTEGER NOT NULL, hash TEXT NOT NULL);"
    "CREATE TABLE session(id INTEGER PRIMARY KEY,"
    " machine_id INTEGER NOT NULL REFERENCES machine(id),"
    " model_id INTEGER NOT NULL REFERENCES model(id),"
    " program TEXT, started TEXT NOT NULL);"
    "CREATE TABLE run(id INTEGER PRIMARY KEY,"
    " session_id INTEGER NOT NULL REFERENCES session(id),"
    " started TEXT NOT NULL, ended TEXT, threads INTEGER, temp REAL,"
    " top_k INTEGER, top_p REAL, seed INTEGER, n_prompt INTEGER,"
    " n_gen INTEGER, prefill_s REAL, decode_s REAL);"
    "CREATE TABLE token(run_id INTEGER NOT NULL, idx INTEGER NOT NULL,"
    " phase INTEGER NOT NULL, t REAL, dt REAL,"
    " PRIMARY KEY(run_id, idx)) WITHOUT ROWID;",

    /* 1 -> 2: bandwidth, geometry, settings, derived figures, per-token
     * streams and counters, per-layer statistics, counter totals */
    "ALTER TABLE machine ADD COLUMN read_bw_gbs REAL;"
    "ALTER TABLE model ADD COLUMN arch TEXT;"
    "ALTER TABLE model ADD COLUMN quant TEXT;"
    "ALTER TABLE model ADD COLUMN n_layers INTEGER;"
    "ALTER TABLE model ADD COLUMN dim INTEGER;"
    "ALTER TABLE model ADD COLUMN ffn_dim INTEGER;"
    "ALTER TABLE model ADD COLUMN n_heads INTEGER;"
    "ALTER TABLE model ADD COLUMN n_kv_heads INTEGER;"
    "ALTER TABLE model ADD COLUMN vocab_size INTEGER;"
    "ALTER TABLE model ADD COLUMN n_experts INTEGER;"
    "ALTER TABLE model ADD COLUMN top_k INTEGER;"
    "ALTER TABLE model ADD COLUMN dense_delay INTEGER;"
    "ALTER TABLE model ADD COLUMN expert_delay INTEGER;"
    "ALTER TABLE session ADD COLUMN pid INTEGER;"
    "ALTER TABLE run ADD COLUMN status TEXT NOT NULL DEFAULT 'done';"
    "ALTER TABLE run ADD COLUMN prefetch TEXT NOT NULL DEFAULT 'off';"
    "ALTER TABLE run ADD COLUMN expert_io TEXT NOT NULL DEFAULT 'none';"
    "ALTER TABLE run ADD COLUMN n_ctx INTEGER;"
    "ALTER TABLE run ADD COLUMN min_p REAL;"
    "ALTER TABLE run ADD COLUMN rep_penalty REAL;"
    "ALTER TABLE run ADD COLUMN rep_last_n INTEGER;"
    "ALTER TABLE run ADD COLUMN bytes_per_token INTEGER;"
    "ALTER TABLE run ADD COLUMN prefill_tok_s REAL;"
    "ALTER TABLE run ADD COLUMN decode_tok_s REAL;"
    "ALTER TABLE run ADD COLUMN gb_s REAL;"
    "ALTER TABLE run ADD COLUMN bw_share REAL;"
    "UPDATE run SET status = CASE WHEN ended IS NULL THEN 'interrupted' ELSE 'done' END,"
    " prefill_tok_s = CASE WHEN prefill_s > 0 THEN n_prompt / prefill_s END,"
    " decode_tok_s = CASE WHEN decode_s > 0 THEN n_gen / decode_s END;"
    "ALTER TABLE token ADD COLUMN attn_s REAL;"
    "ALTER TABLE token ADD COLUMN ffn_s REAL;"
    "ALTER TABLE token ADD COLUMN experts_s REAL;"
    "ALTER TABLE token ADD COLUMN io_wait_s REAL;"
    "ALTER TABLE token ADD COLUMN c_cycles INTEGER;"
    "ALTER TABLE token ADD COLUMN c_instructions INTEGER;"
    "ALTER TABLE token ADD COLUMN c_l1d_read_misses INTEGER;"
    "ALTER TABLE token ADD COLUMN c_llc_read_misses INTEGER;"
    "ALTER TABLE token ADD COLUMN c_dtlb_read_misses INTEGER;"
    "ALTER TABLE token ADD COLUMN c_task_clock INTEGER;"
    "ALTER TABLE token ADD COLUMN c_page_faults INTEGER;"
    "ALTER TABLE token ADD COLUMN c_major_faults INTEGER;"
    "ALTER TABLE token ADD COLUMN c_minor_faults INTEGER;"
    "ALTER TABLE token ADD COLUMN c_context_switches INTEGER;"
    "ALTER TABLE token ADD COLUMN c_cpu_migrations INTEGER;"
    "CREATE TABLE layer_stat(run_id INTEGER NOT NULL REFERENCES run(id),"
    " layer INTEGER NOT NULL, attn_s REAL, ffn_s REAL, experts_s REAL,"
    " io_wait_s REAL, n_tokens INTEGER, PRIMARY KEY(run_id, layer)) WITHOUT ROWID;"
    "CREATE TABLE counter(run_id INTEGER NOT NULL REFERENCES run(id),"
    " event TEXT NOT NULL, value INTEGER, reason TEXT,"
    " PRIMARY KEY(run_id, event)) WITHOUT ROWID;"
    "CREATE INDEX run_session ON run(session_id);"
    "CREATE INDEX session_model ON session(model_id);",

    /* 2 -> 3: weight bytes streamed (per run, token and layer) and the
     * critical-path model (per run and layer) */
    "ALTER TABLE run ADD COLUMN attn_bytes INTEGER;"
    "ALTER TABLE run ADD COLUMN ffn_bytes INTEGER;"
    "ALTER TABLE run ADD COLUMN experts_bytes INTEGER;"
    "ALTER TABLE run ADD COLUMN cp_naive_bytes REAL;"
    "ALTER TABLE run ADD COLUMN cp_critical_bytes REAL;"
    "ALTER TABLE token ADD COLUMN attn_bytes INTEGER;"
    "ALTER TABLE token ADD COLUMN ffn_bytes INTEGER;"
    "ALTER TABLE token ADD COLUMN experts_bytes INTEGER;"
    "ALTER TABLE layer_stat ADD COLUMN attn_bytes INTEGER;"
    "ALTER TABLE layer_stat ADD COLUMN ffn_bytes INTEGER;"
    "ALTER TABLE layer_stat ADD COLUMN experts_bytes INTEGER;"
    "ALTER TABLE layer_stat ADD COLUMN cp_attn_bytes REAL;"
    "ALTER TABLE layer_stat ADD COLUMN cp_dense_bytes REAL;"
    "ALTER TABLE layer_stat ADD COLUMN cp_expert_bytes REAL;"
    "ALTER TABLE layer_stat ADD COLUMN cp_naive_bytes REAL;"
    "ALTER TABLE layer_stat ADD COLUMN cp_critical_bytes REAL;"
    "ALTER TABLE layer_stat ADD COLUMN cp_binding TEXT;",

    /* 3 -> 4: expert I/O per layer (--expert-io sync|staged) */
    "ALTER TABLE layer_stat ADD COLUMN io_s REAL;"
    "ALTER TABLE layer_stat ADD COLUMN io_bytes INTEGER;",

    /* 4 -> 5: `cflow bench` results, one row per test */
    "CREATE TABLE bench(id INTEGER PRIMARY KEY,"
    " session_id INTEGER NOT NULL REFERENCES session(id),"
    " test_time TEXT NOT NULL, n_threads INTEGER, n_prompt INTEGER,"
    " n_gen INTEGER, n_depth INTEGER, prefetch TEXT, expert_io TEXT,"
    " repetitions INTEGER, avg_ns REAL, stddev_ns REAL, avg_ts REAL,"
    " stddev_ts REAL, bytes_per_token INTEGER, gb_s REAL, read_bw_gbs REAL,"
    " bw_pct REAL);"
    "CREATE INDEX bench_session ON bench(session_id);",

    /* 5 -> 6: read-bandwidth figures (prof_log_membw.c) */
    "CREATE TABLE membw(id INTEGER PRIMARY KEY, hostname TEXT NOT NULL,"
    " cpu_model TEXT NOT NULL, cores INTEGER NOT NULL, threads INTEGER NOT NULL,"
    " measured TEXT NOT NULL, passes INTEGER NOT NULL, bytes INTEGER NOT NULL,"
    " median_gbs REAL NOT NULL, min_gbs REAL NOT NULL, max_gbs REAL NOT NULL);"
    "CREATE INDEX membw_machine ON membw(cpu_model, threads);",

    /* 6 -> 7: expert streaming figures per run and bench test, the mode
     * --expert-io asked for beside the one it ran, the model as named,
     * storage bandwidth (prof_log_membw.c) */
    "ALTER TABLE session ADD COLUMN model_named TEXT;"
    "ALTER TABLE run ADD COLUMN expert_io_asked TEXT;"
    "ALTER TABLE run ADD COLUMN expert_cache_bytes INTEGER;"
    XIO_COLS("run")
    XIO_COLS("bench")
    "CREATE TABLE diskbw(id INTEGER PRIMARY KEY, hostname TEXT NOT NULL,"
    " dev INTEGER NOT NULL, path TEXT NOT NULL, measured TEXT NOT NULL,"
    " gbs REAL NOT NULL);"
    "CREATE INDEX diskbw_dev ON diskbw(hostname, dev);",

    /* 7 -> 8: where a token's time goes (prof_xio_fig's schema 8 half) */
    XIO8_COLS("run")
    XIO8_COLS("bench"),

    /* 8 -> 9: the look-ahead setting a run or test ran with */
    "ALTER TABLE run ADD COLUMN expert_ahead INTEGER;"
    "ALTER TABLE bench ADD COLUMN expert_ahead INTEGER;",

    /* 9 -> 10: the tests a bench test's repetitions were shared with */
    "ALTER TABLE bench ADD COLUMN interleave INTEGER;",

    /* 10 -> 11: a run that is a request to `cflow serve` */
    "ALTER TABLE run ADD COLUMN client TEXT;"
    "ALTER TABLE run ADD COLUMN endpoint TEXT;"
    "ALTER TABLE run ADD COLUMN stop TEXT;"
    "ALTER TABLE run ADD COLUMN queue_s REAL;"
    "ALTER TABLE run ADD COLUMN n_cached INTEGER;"
    "ALTER TABLE run ADD COLUMN n_prompt_all INTEGER;",
};

int prof_log_fail(prof_log *l, char *err, size_t errlen, const char *what)
{
    snprintf(err, errlen, "%s: %s%s%s", l->path, what ? what : "", what ? ": " : "",
             l->db ? sqlite3_errmsg(l->db) : "cannot open");
    return -1;
}

static int is_busy(int rc)
{
    rc &= 0xff;
    return rc == SQLITE_BUSY || rc == SQLITE_LOCKED;
}

/* Run sql (no results), retrying while the database is busy. */
static int exec_retry(sqlite3 *db, const char *sql)
{
    int rc = SQLITE_OK;
    for (int i = 0; i <= BUSY_RETRIES; i++) {
        rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
        if (!is_busy(rc))
            break;
        usleep(20000u * (unsigned)(i + 1));
    }
    return rc;
}

int prof_log_begin(prof_log *l) { return exec_retry(l->db, "BEGIN IMMEDIATE"); }

/* Roll back the open transaction, if SQLite has not already done so: a
 * failed COMMIT (a full disk, SQLITE_FULL) rolls back by itself, and a
 * second ROLLBACK would replace the error that explains the failure with
 * "no transaction is active". */
void prof_log_rollback(prof_log *l)
{
    if (!sqlite3_get_autocommit(l->db))
        sqlite3_exec(l->db, "ROLLBACK", NULL, NULL, NULL);
}

int prof_log_commit(prof_log *l)
{
    int rc = exec_retry(l->db, "COMMIT");
    if (rc != SQLITE_OK)
        prof_log_rollback(l);
    return rc;
}

int prof_log_end(prof_log *l, int rc, char *err, size_t errlen)
{
    if (rc != SQLITE_OK) {
        prof_log_fail(l, err, errlen, NULL);
        prof_log_rollback(l);
        return -1;
    }
    if (prof_log_commit(l) != SQLITE_OK)
        return prof_log_fail(l, err, errlen, NULL);
    return 0;
}

void prof_log_bind_text(sqlite3_stmt *st, int i, const char *s)
{
    if (s)
        sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, i);
}

static int get_int(sqlite3 *db, const char *sql, int64_t *out)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    for (int i = 0; i <= BUSY_RETRIES; i++) {
        rc = sqlite3_step(st);
        if (!is_busy(rc))
            break;
        sqlite3_reset(st);
        usleep(20000u * (unsigned)(i + 1));
    }
    if (rc == SQLITE_ROW) {
        *out = sqlite3_column_int64(st, 0);
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    return rc;
}

/* mkdir -p of path's folder (mode 0700, as XDG asks for data folders). */
static void make_parent(const char *path)
{
    char *d = strdup(path);
    if (!d)
        return;
    char *slash = strrchr(d, '/');
    if (slash && slash != d) {
        *slash = 0;
        for (char *p = d + 1; *p; p++) {
            if (*p != '/')
                continue;
            *p = 0;
            mkdir(d, 0700);
            *p = '/';
        }
        mkdir(d, 0700);
    }
    free(d);
}

/* The first table of db outside SQLite's own (sqlite_*), into name ("" when
 * there is none). */
static int first_table(sqlite3 *db, char *name, size_t n)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(db,
                                "SELECT name FROM sqlite_master WHERE type = 'table' AND"
                                " name NOT LIKE 'sqlite^_%' ESCAPE '^' ORDER BY rowid LIMIT 1",
                                -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    name[0] = 0;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        snprintf(name, n, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* Whether l->db has table.column (column NULL: the table at all). */
static int has_column(sqlite3 *db, const char *table, const char *column, int *yes)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(db,
                                "SELECT count(*) FROM pragma_table_info(?1)"
                                " WHERE ?2 IS NULL OR name = ?2",
                                -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    prof_log_bind_text(st, 1, table);
    prof_log_bind_text(st, 2, column);
    rc = sqlite3_step(st);
    *yes = rc == SQLITE_ROW && sqlite3_column_int64(st, 0) > 0;
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? SQLITE_OK : rc;
}

/* Every table and column that migrations 0 .. ver-1 make must be in the
 * file (more is allowed): the migrations run in a private in-memory
 * database, whose schema is then looked up in the file's. */
static int check_tables(prof_log *l, int64_t ver, char *err, size_t errlen)
{
    sqlite3 *ref = NULL;
    sqlite3_stmt *st = NULL;
    int ret = -1;

    if (sqlite3_open_v2(":memory:", &ref, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
        SQLITE_OK) {
        snprintf(err, errlen, "%s: out of memory", l->path);
        goto out;
    }
    for (int64_t v = 0; v < ver; v++)
        if (sqlite3_exec(ref, migrations[v], NULL, NULL, NULL) != SQLITE_OK) {
            snprintf(err, errlen, "%s: schema %d: %s", l->path, (int)v + 1,
                     sqlite3_errmsg(ref));
            goto out;
        }
    if (sqlite3_prepare_v2(ref,
                           "SELECT m.name, p.name FROM sqlite_master m,"
                           " pragma_table_info(m.name) p WHERE m.type = 'table'"
                           " ORDER BY m.rowid, p.cid",
                           -1, &st, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "%s: %s", l->path, sqlite3_errmsg(ref));
        goto out;
    }
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *table = (const char *)sqlite3_column_text(st, 0);
        const char *column = (const char *)sqlite3_column_text(st, 1);
        int yes = 0;
        if (has_column(l->db, table, column, &yes) != SQLITE_OK) {
            prof_log_fail(l, err, errlen, NULL);
            goto out;
        }
        if (yes)
            continue;
        if (has_column(l->db, table, NULL, &yes) != SQLITE_OK) {
            prof_log_fail(l, err, errlen, NULL);
            goto out;
        }
        if (yes)
            snprintf(err, errlen,
                     "%s: not a cflow run log of schema version %lld: table %s has no"
                     " column %s", l->path, (long long)ver, table, column);
        else
            snprintf(err, errlen, "%s: not a cflow run log of schema version %lld: no table %s",
                     l->path, (long long)ver, table);
        goto out;
    }
    if (rc != SQLITE_DONE) {
        snprintf(err, errlen, "%s: %s", l->path, sqlite3_errmsg(ref));
        goto out;
    }
    ret = 0;
out:
    sqlite3_finalize(st);
    sqlite3_close(ref);
    return ret;
}

/* Whether the file is a run log this cflow takes, decided by reading
 * alone, so that a refused file keeps every byte: user_version from 0 to
 * PROF_LOG_SCHEMA; at 0 no tables at all (a new or empty file; a database
 * with tables of its own and no version is someone else's); above 0 every
 * table and column of that version.  *ver gets the version.  0, or -1 with
 * one line in err. */
static int check_log(prof_log *l, int64_t *ver, char *err, size_t errlen)
{
    /* the first statement reads the file: a non-database fails here */
    if (get_int(l->db, "PRAGMA user_version", ver) != SQLITE_OK)
        return prof_log_fail(l, err, errlen, NULL);
    if (*ver > PROF_LOG_SCHEMA) {
        snprintf(err, errlen, "%s: run log schema version %lld is newer than this cflow's (%d)",
                 l->path, (long long)*ver, PROF_LOG_SCHEMA);
        return -1;
    }
    if (*ver < 0) {
        snprintf(err, errlen, "%s: run log schema version %lld is not one this cflow knows",
                 l->path, (long long)*ver);
        return -1;
    }
    if (*ver > 0)
        return check_tables(l, *ver, err, errlen);
    char table[128];
    if (first_table(l->db, table, sizeof table) != SQLITE_OK)
        return prof_log_fail(l, err, errlen, NULL);
    if (table[0]) {
        snprintf(err, errlen,
                 "%s: not a cflow run log: it holds table %s but no schema version"
                 " (user_version 0)", l->path, table);
        return -1;
    }
    return 0;
}

/* check_log as a reader: one read transaction (as separate statements, a
 * log another process created between them read as version 0 holding
 * tables, someone else's database, and the second of two runs started
 * together on a new log went on without logging).  0, or -1 with err. */
static int check_read(prof_log *l, int64_t *ver, char *err, size_t errlen)
{
    int chk = exec_retry(l->db, "BEGIN") == SQLITE_OK ? check_log(l, ver, err, errlen)
                                                       : prof_log_fail(l, err, errlen, NULL);
    if (sqlite3_get_autocommit(l->db) == 0)
        sqlite3_exec(l->db, "COMMIT", NULL, NULL, NULL);   /* (it only read) */
    return chk;
}

/* Take the log, checked at version ver, to PROF_LOG_SCHEMA in one
 * transaction.  The write lock is held for the migrations alone: under it
 * only user_version is read again, and when another process has moved it
 * since the check the lock goes and the file is checked again as a
 * reader, which in WAL mode blocks nobody.  (Checking under the lock made
 * every process that found a new log at version 0 queue for it in turn,
 * each holding it for check_tables' in-memory schema, 10-20 ms, 10 times
 * that under AddressSanitizer: tens of processes starting on a new log, or
 * a few on a loaded machine, waited past the busy timeout, and the last
 * ones went on without logging after a warning.)  The version only grows,
 * so the loop ends.  0, or -1 with err. */
static int migrate(prof_log *l, int64_t ver, char *err, size_t errlen)
{
    for (;;) {
        int64_t now = -1;
        if (prof_log_begin(l) != SQLITE_OK)
            return prof_log_fail(l, err, errlen, "cannot migrate");
        if (get_int(l->db, "PRAGMA user_version", &now) != SQLITE_OK) {
            prof_log_fail(l, err, errlen, "cannot migrate");
            prof_log_rollback(l);
            return -1;
        }
        if (now == ver)
            break;
        prof_log_rollback(l);
        if (check_read(l, &ver, err, errlen))
            return -1;
        if (ver == PROF_LOG_SCHEMA)
            return 0;
    }
    for (int64_t v = ver; v < PROF_LOG_SCHEMA; v++) {
        char pragma[64];
        snprintf(pragma, sizeof pragma, "PRAGMA user_version=%d", (int)v + 1);
        if (sqlite3_exec(l->db, migrations[v], NULL, NULL, NULL) != SQLITE_OK ||
            sqlite3_exec(l->db, pragma, NULL, NULL, NULL) != SQLITE_OK) {
            char what[64];
            snprintf(what, sizeof what, "migrating schema %d to %d", (int)v, (int)v + 1);
            prof_log_fail(l, err, errlen, what);
            prof_log_rollback(l);
            return -1;
        }
    }
    if (prof_log_commit(l) != SQLITE_OK)
        return prof_log_fail(l, err, errlen, "cannot migrate");
    return 0;
}

/* Why path could not be opened: for a file that is not there, why its
 * folder takes no new file (EROFS, EACCES, ENOENT); else the last errno
 * SQLite saw (its unix VFS retries a failed read-write open read-only,
 * so for a new file that is ENOENT whatever the cause).  0: unknown. */
static int open_errno(sqlite3 *db, const char *path)
{
    struct stat st;
    if (stat(path, &st) && errno == ENOENT) {
        char dir[4096];
        const char *slash = strrchr(path, '/');
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + (slash == path) : 1,
                 slash ? path : ".");
        if (access(dir, W_OK | X_OK))
            return errno;
    }
    return db ? sqlite3_system_errno(db) : 0;
}

int prof_log_open(prof_log **out, const char *path, unsigned flags, char *err,
                  size_t errlen)
{
    prof_log *l = calloc(1, sizeof *l);
    int64_t ver = 0;

    *out = NULL;
    if (!l || !(l->path = strdup(path))) {
        free(l);
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    if (flags & PROF_LOG_CREATE)
        make_parent(path);
    if (sqlite3_open_v2(path, &l->db,
                        SQLITE_OPEN_READWRITE |
                            ((flags & PROF_LOG_CREATE) ? SQLITE_OPEN_CREATE : 0),
                        prof_fault_vfs()) != SQLITE_OK) {   /* NULL: the default VFS */
        /* "unable to open database file" says nothing of why: the
         * system's reason (a read-only file system, no such folder) */
        int e = open_errno(l->db, path);
        prof_log_fail(l, err, errlen, NULL);
        size_t k = strlen(err);
        if (e && k + 2 < errlen)
            snprintf(err + k, errlen - k, ": %s", strerror(e));
        goto fail;
    }
    sqlite3_busy_timeout(l->db, BUSY_TIMEOUT_MS);
    /* sqlite opens a file it may not write read-only without a word */
    if (sqlite3_db_readonly(l->db, "main") == 1) {
        snprintf(err, errlen, "%s: the file is read-only", path);
        goto fail;
    }
    /* check first; the journal mode (which rewrites the header) and any
     * migration only for a file that passed */
    if (check_read(l, &ver, err, errlen)) {
        /* a refused log in WAL mode keeps its -wal file as it is: no
         * checkpoint into the main file when this connection closes */
        sqlite3_db_config(l->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int *)NULL);
        goto fail;
    }
    l->opened_version = (int)ver;
    if (exec_retry(l->db, "PRAGMA journal_mode=WAL") != SQLITE_OK ||
        exec_retry(l->db, "PRAGMA synchronous=NORMAL") != SQLITE_OK ||
        exec_retry(l->db, "PRAGMA foreign_keys=ON") != SQLITE_OK) {
        prof_log_fail(l, err, errlen, NULL);
        goto fail;
    }
    if (ver < PROF_LOG_SCHEMA) {
        sqlite3_busy_timeout(l->db, MIGRATE_TIMEOUT_MS);
        int m = migrate(l, ver, err, errlen);
        sqlite3_busy_timeout(l->db, BUSY_TIMEOUT_MS);
        if (m)
            goto fail;
    }
    *out = l;
    return 0;
fail:
    prof_log_close(l);
    return -1;
}

void prof_log_close(prof_log *l)
{
    if (!l)
        return;
    sqlite3_finalize(l->ins_token);
    sqlite3_finalize(l->upd_run);
    sqlite3_finalize(l->ins_layer);
    sqlite3_finalize(l->ins_counter);
    if (l->db)
        sqlite3_close(l->db);
    free(l->path);
    free(l);
}

const char *prof_log_path(const prof_log *l) { return l->path; }
int prof_log_opened_version(const prof_log *l) { return l->opened_version; }
