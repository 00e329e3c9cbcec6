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
 *
 * Migrations.  migrations[v] takes a database from user_version v to v+1;
 * a new database runs them all from 0, so a fresh log and a migrated one
 * are the same schema by construction.  Version 1 was the first layout
 * (no bandwidth, geometry, per-layer or counter data); version 2 added
 * them; version 3 added streamed bytes and the critical-path model; version 4
 * the expert I/O per layer (io_s, io_bytes).  Migrating runs inside the BEGIN IMMEDIATE transaction that reads
 * user_version, so two processes opening an old log at once migrate it
 * once.  A log newer than this program is refused, never downgraded.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "prof/prof.h"
#include "prof/prof_impl.h"

#define BUSY_TIMEOUT_MS 1000
#define BUSY_RETRIES    2
#define FLUSH_TOKENS    64
#define FLUSH_SECONDS   0.5

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
};

/* Streams whose bytes are logged: attention, ffn, experts (I/O wait
 * streams no weights). */
#define NBST 3

/* The binding stream as the log spells it (fmt_cp_stream_name's words). */
static const char *binding_name(int st)
{
    return st == PROF_ST_FFN ? "dense" : st == PROF_ST_EXPERTS ? "experts" : "attention";
}

static int binding_from_name(const char *s)
{
    return !s ? PROF_ST_ATTN : !strcmp(s, "dense") ? PROF_ST_FFN
                             : !strcmp(s, "experts") ? PROF_ST_EXPERTS : PROF_ST_ATTN;
}

struct prof_log {
    sqlite3      *db;
    char         *path;
    int           opened_version;
    int64_t       machine_id, model_id, session_id, run_id;
    uint64_t      gen;          /* the profiler run being logged */
    uint64_t      cursor;       /* ring cursor */
    double        last_flush;
    sqlite3_stmt *ins_token, *upd_run, *ins_layer, *ins_counter;
};

static int fail_db(prof_log *l, char *err, size_t errlen, const char *what)
{
    snprintf(err, errlen, "%s: %s%s%s", l->path, what ? what : "", what ? ": " : "",
             l->db ? sqlite3_errmsg(l->db) : "cannot open");
    return -1;
}

static void now_iso(char out[32])
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    char sec[24];
    strftime(sec, sizeof sec, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, 32, "%.20s.%03dZ", sec, (int)(ts.tv_nsec / 1000000) % 1000);
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

static int begin(prof_log *l) { return exec_retry(l->db, "BEGIN IMMEDIATE"); }

/* Roll back the open transaction, if SQLite has not already done so: a
 * failed COMMIT (a full disk, SQLITE_FULL) rolls back by itself, and a
 * second ROLLBACK would replace the error that explains the failure with
 * "no transaction is active". */
static void rollback(prof_log *l)
{
    if (!sqlite3_get_autocommit(l->db))
        sqlite3_exec(l->db, "ROLLBACK", NULL, NULL, NULL);
}

static int commit(prof_log *l)
{
    int rc = exec_retry(l->db, "COMMIT");
    if (rc != SQLITE_OK)
        rollback(l);
    return rc;
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

int prof_log_open(prof_log **out, const char *path, unsigned flags, char *err,
                  size_t errlen)
{
    prof_log *l = calloc(1, sizeof *l);
    int rc;
    int64_t ver = 0;

    *out = NULL;
    if (!l || !(l->path = strdup(path))) {
        free(l);
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    if (flags & PROF_LOG_CREATE)
        make_parent(path);
    rc = sqlite3_open_v2(path, &l->db,
                         SQLITE_OPEN_READWRITE |
                             ((flags & PROF_LOG_CREATE) ? SQLITE_OPEN_CREATE : 0),
                         prof_fault_vfs());   /* NULL: the default VFS */
    if (rc != SQLITE_OK) {
        fail_db(l, err, errlen, NULL);
        goto fail;
    }
    sqlite3_busy_timeout(l->db, BUSY_TIMEOUT_MS);
    /* sqlite opens a file it may not write read-only without a word */
    if (sqlite3_db_readonly(l->db, "main") == 1) {
        snprintf(err, errlen, "%s: the file is read-only", path);
        goto fail;
    }
    /* the first statement reads the file: a non-database fails here */
    if ((rc = exec_retry(l->db, "PRAGMA journal_mode=WAL")) != SQLITE_OK ||
        (rc = exec_retry(l->db, "PRAGMA synchronous=NORMAL")) != SQLITE_OK ||
        (rc = exec_retry(l->db, "PRAGMA foreign_keys=ON")) != SQLITE_OK) {
        fail_db(l, err, errlen, NULL);
        goto fail;
    }
    if ((rc = get_int(l->db, "PRAGMA user_version", &ver)) != SQLITE_OK) {
        fail_db(l, err, errlen, NULL);
        goto fail;
    }
    l->opened_version = (int)ver;
    if (ver > PROF_LOG_SCHEMA) {
        snprintf(err, errlen,
                 "%s: run log schema version %lld is newer than this cflow's (%d)",
                 path, (long long)ver, PROF_LOG_SCHEMA);
        goto fail;
    }
    if (ver < PROF_LOG_SCHEMA) {
        if ((rc = begin(l)) != SQLITE_OK) {
            fail_db(l, err, errlen, "cannot migrate");
            goto fail;
        }
        /* again, inside the transaction: another process may have won */
        if ((rc = get_int(l->db, "PRAGMA user_version", &ver)) != SQLITE_OK) {
            fail_db(l, err, errlen, NULL);
            rollback(l);
            goto fail;
        }
        if (ver > PROF_LOG_SCHEMA || ver < 0) {
            rollback(l);
            snprintf(err, errlen, "%s: run log schema version %lld is not one this cflow knows",
                     path, (long long)ver);
            goto fail;
        }
        for (int64_t v = ver; v < PROF_LOG_SCHEMA; v++) {
            char pragma[64];
            snprintf(pragma, sizeof pragma, "PRAGMA user_version=%d", (int)v + 1);
            if (sqlite3_exec(l->db, migrations[v], NULL, NULL, NULL) != SQLITE_OK ||
                sqlite3_exec(l->db, pragma, NULL, NULL, NULL) != SQLITE_OK) {
                char what[64];
                snprintf(what, sizeof what, "migrating schema %d to %d", (int)v, (int)v + 1);
                fail_db(l, err, errlen, what);
                rollback(l);
                goto fail;
            }
        }
        if ((rc = commit(l)) != SQLITE_OK) {
            fail_db(l, err, errlen, "cannot migrate");
            goto fail;
        }
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

/* ---- writing ---------------------------------------------------------- */
static int step_done(sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

static void bind_text(sqlite3_stmt *st, int i, const char *s)
{
    if (s)
        sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, i);
}

static void bind_pos_real(sqlite3_stmt *st, int i, double v)
{
    if (v > 0)
        sqlite3_bind_double(st, i, v);
    else
        sqlite3_bind_null(st, i);
}

double prof_log_machine_bw(prof_log *l, const prof_machine *m)
{
    sqlite3_stmt *st;
    double bw = 0.0;
    if (sqlite3_prepare_v2(l->db,
                           "SELECT read_bw_gbs FROM machine WHERE hostname=?1 AND"
                           " cpu_model=?2 AND cores=?3 AND read_bw_gbs > 0"
                           " ORDER BY id DESC LIMIT 1",
                           -1, &st, NULL) != SQLITE_OK)
        return 0.0;
    bind_text(st, 1, m->hostname);
    bind_text(st, 2, m->cpu_model);
    sqlite3_bind_int(st, 3, m->cores);
    if (sqlite3_step(st) == SQLITE_ROW)
        bw = sqlite3_column_double(st, 0);
    sqlite3_finalize(st);
    return bw;
}

/* Find or make a row; *id gets it. */
static int find_or_add(sqlite3 *db, const char *find, const char *add,
                       void (*bind)(sqlite3_stmt *, const void *), const void *arg,
                       int64_t *id)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(db, find, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    bind(st, arg);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *id = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
        return SQLITE_OK;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return rc;
    if ((rc = sqlite3_prepare_v2(db, add, -1, &st, NULL)) != SQLITE_OK)
        return rc;
    bind(st, arg);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return rc;
    *id = sqlite3_last_insert_rowid(db);
    return SQLITE_OK;
}

static void bind_machine(sqlite3_stmt *st, const void *arg)
{
    const prof_machine *m = arg;
    bind_text(st, 1, m->hostname ? m->hostname : "");
    bind_text(st, 2, m->cpu_model ? m->cpu_model : "");
    bind_text(st, 3, m->isa ? m->isa : "");
    sqlite3_bind_int(st, 4, m->cores);
    if (sqlite3_bind_parameter_count(st) >= 5)
        bind_pos_real(st, 5, m->read_bw_gbs);
}

static void bind_model(sqlite3_stmt *st, const void *arg)
{
    const prof_model_info *mi = arg;
    bind_text(st, 1, mi->path ? mi->path : "");
    bind_text(st, 2, mi->hash ? mi->hash : "");
    if (sqlite3_bind_parameter_count(st) < 3)
        return;
    sqlite3_bind_int64(st, 3, (sqlite3_int64)mi->size);
    bind_text(st, 4, mi->arch);
    bind_text(st, 5, mi->quant);
    const uint32_t v[10] = { mi->n_layers, mi->dim, mi->ffn_dim, mi->n_heads,
                             mi->n_kv_heads, mi->vocab_size, mi->n_experts, mi->top_k,
                             mi->dense_delay, mi->expert_delay };
    for (int i = 0; i < 10; i++)
        sqlite3_bind_int64(st, 6 + i, v[i]);
}

int prof_log_session(prof_log *l, const prof_machine *m, const prof_model_info *mi,
                     const char *program, char *err, size_t errlen)
{
    char now[32];
    sqlite3_stmt *st = NULL;
    int rc;

    if ((rc = begin(l)) != SQLITE_OK)
        return fail_db(l, err, errlen, NULL);
    rc = find_or_add(l->db,
                     "SELECT id FROM machine WHERE hostname=?1 AND cpu_model=?2 AND"
                     " isa=?3 AND cores=?4",
                     "INSERT INTO machine(hostname, cpu_model, isa, cores, read_bw_gbs)"
                     " VALUES(?1, ?2, ?3, ?4, ?5)",
                     bind_machine, m, &l->machine_id);
    if (rc == SQLITE_OK && m->read_bw_gbs > 0) {
        rc = sqlite3_prepare_v2(l->db,
                                "UPDATE machine SET read_bw_gbs=?1 WHERE id=?2 AND"
                                " read_bw_gbs IS NULL",
                                -1, &st, NULL);
        if (rc == SQLITE_OK) {
            sqlite3_bind_double(st, 1, m->read_bw_gbs);
            sqlite3_bind_int64(st, 2, l->machine_id);
            rc = step_done(st);
            sqlite3_finalize(st);
        }
    }
    if (rc == SQLITE_OK)
        rc = find_or_add(l->db, "SELECT id FROM model WHERE path=?1 AND hash=?2",
                         "INSERT INTO model(path, hash, size, arch, quant, n_layers, dim,"
                         " ffn_dim, n_heads, n_kv_heads, vocab_size, n_experts, top_k,"
                         " dense_delay, expert_delay) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7,"
                         " ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
                         bind_model, mi, &l->model_id);
    if (rc == SQLITE_OK) {
        /* a model first seen by an older schema gets its geometry now */
        rc = sqlite3_prepare_v2(l->db,
                                "UPDATE model SET size=?3, arch=?4, quant=?5, n_layers=?6,"
                                " dim=?7, ffn_dim=?8, n_heads=?9, n_kv_heads=?10,"
                                " vocab_size=?11, n_experts=?12, top_k=?13,"
                                " dense_delay=?14, expert_delay=?15"
                                " WHERE path=?1 AND hash=?2 AND n_layers IS NULL",
                                -1, &st, NULL);
        if (rc == SQLITE_OK) {
            bind_model(st, mi);
            rc = step_done(st);
            sqlite3_finalize(st);
        }
    }
    if (rc == SQLITE_OK) {
        now_iso(now);
        rc = sqlite3_prepare_v2(l->db,
                                "INSERT INTO session(machine_id, model_id, program, started,"
                                " pid) VALUES(?1, ?2, ?3, ?4, ?5)",
                                -1, &st, NULL);
        if (rc == SQLITE_OK) {
            sqlite3_bind_int64(st, 1, l->machine_id);
            sqlite3_bind_int64(st, 2, l->model_id);
            bind_text(st, 3, program);
            bind_text(st, 4, now);
            sqlite3_bind_int64(st, 5, (sqlite3_int64)getpid());
            rc = step_done(st);
            sqlite3_finalize(st);
            l->session_id = sqlite3_last_insert_rowid(l->db);
        }
    }
    if (rc != SQLITE_OK) {
        fail_db(l, err, errlen, NULL);
        rollback(l);
        return -1;
    }
    if (commit(l) != SQLITE_OK)
        return fail_db(l, err, errlen, NULL);
    return 0;
}

static int prepare_writers(prof_log *l)
{
    if (l->ins_token)
        return SQLITE_OK;
    int rc = sqlite3_prepare_v2(
        l->db,
        "INSERT OR REPLACE INTO token(run_id, idx, phase, t, dt, attn_s, ffn_s,"
        " experts_s, io_wait_s, c_cycles, c_instructions, c_l1d_read_misses,"
        " c_llc_read_misses, c_dtlb_read_misses, c_task_clock, c_page_faults,"
        " c_major_faults, c_minor_faults, c_context_switches, c_cpu_migrations,"
        " attn_bytes, ffn_bytes, experts_bytes)"
        " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15,"
        " ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23)",
        -1, &l->ins_token, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(
            l->db,
            "UPDATE run SET n_prompt=?2, n_gen=?3, prefill_s=?4, decode_s=?5,"
            " bytes_per_token=?6, prefill_tok_s=?7, decode_tok_s=?8, gb_s=?9,"
            " bw_share=?10, ended=?11, status=?12, attn_bytes=?13, ffn_bytes=?14,"
            " experts_bytes=?15, cp_naive_bytes=?16, cp_critical_bytes=?17 WHERE id=?1",
            -1, &l->upd_run, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(l->db,
                                "INSERT OR REPLACE INTO layer_stat(run_id, layer, attn_s,"
                                " ffn_s, experts_s, io_wait_s, n_tokens, attn_bytes,"
                                " ffn_bytes, experts_bytes, cp_attn_bytes, cp_dense_bytes,"
                                " cp_expert_bytes, cp_naive_bytes, cp_critical_bytes,"
                                " cp_binding, io_s, io_bytes) VALUES(?1, ?2, ?3, ?4, ?5,"
                                " ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,"
                                " ?18)",
                                -1, &l->ins_layer, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(l->db,
                                "INSERT OR REPLACE INTO counter(run_id, event, value, reason)"
                                " VALUES(?1, ?2, ?3, ?4)",
                                -1, &l->ins_counter, NULL);
    return rc;
}

int prof_log_run_begin(prof_log *l, prof *p, const prof_run_cfg *c, int64_t *run_id,
                       char *err, size_t errlen)
{
    char now[32];
    sqlite3_stmt *st;
    prof_totals t;
    int rc;

    if ((rc = prepare_writers(l)) != SQLITE_OK)
        return fail_db(l, err, errlen, NULL);
    /* A writer only appends: a few B-tree pages are hot.  SQLite's default
     * cache (2 MB) would otherwise fill with cold token pages as the log
     * grows, and a long session's memory would creep up with it (the soak
     * test, tests/hard/test_soak.c). */
    sqlite3_exec(l->db, "PRAGMA cache_size=-256", NULL, NULL, NULL);
    if ((rc = begin(l)) != SQLITE_OK)
        return fail_db(l, err, errlen, NULL);
    now_iso(now);
    rc = sqlite3_prepare_v2(
        l->db,
        "INSERT INTO run(session_id, started, status, threads, prefetch, expert_io,"
        " n_ctx, temp, top_k, top_p, min_p, rep_penalty, rep_last_n, seed, n_prompt,"
        " n_gen, prefill_s, decode_s) VALUES(?1, ?2, 'running', ?3, ?4, ?5, ?6, ?7,"
        " ?8, ?9, ?10, ?11, ?12, ?13, 0, 0, 0, 0)",
        -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, l->session_id);
        bind_text(st, 2, now);
        sqlite3_bind_int(st, 3, c->threads);
        bind_text(st, 4, c->prefetch ? c->prefetch : "off");
        bind_text(st, 5, c->expert_io ? c->expert_io : "none");
        sqlite3_bind_int64(st, 6, c->n_ctx);
        sqlite3_bind_double(st, 7, c->temp);
        sqlite3_bind_int(st, 8, c->top_k);
        sqlite3_bind_double(st, 9, c->top_p);
        sqlite3_bind_double(st, 10, c->min_p);
        sqlite3_bind_double(st, 11, c->rep_penalty);
        sqlite3_bind_int(st, 12, c->rep_last_n);
        /* seeds are unsigned 64-bit: stored as the same bits */
        sqlite3_bind_int64(st, 13, (sqlite3_int64)c->seed);
        rc = step_done(st);
        sqlite3_finalize(st);
    }
    if (rc != SQLITE_OK) {
        fail_db(l, err, errlen, NULL);
        rollback(l);
        return -1;
    }
    l->run_id = sqlite3_last_insert_rowid(l->db);
    if (commit(l) != SQLITE_OK)
        return fail_db(l, err, errlen, NULL);
    /* the run's records: those of the profiler's current generation */
    prof_totals_get(p, &t);
    l->gen = t.run;
    uint64_t head = prof_ring_head(p), done = t.n_prompt + t.n_gen;
    l->cursor = head > done ? head - done : 0;
    l->last_flush = prof_now();
    if (run_id)
        *run_id = l->run_id;
    return 0;
}

int prof_log_due(const prof_log *l, const prof *p)
{
    uint64_t head = prof_ring_head(p);
    if (head <= l->cursor)
        return 0;
    return head - l->cursor >= FLUSH_TOKENS || prof_now() - l->last_flush >= FLUSH_SECONDS;
}

static int write_tokens(prof_log *l, prof *p)
{
    prof_tok buf[128];
    size_t n;
    sqlite3_stmt *st = l->ins_token;
    while ((n = prof_ring_read(p, &l->cursor, buf, 128, NULL)) > 0) {
        for (size_t i = 0; i < n; i++) {
            const prof_tok *r = &buf[i];
            if (r->run != l->gen)
                continue;
            sqlite3_bind_int64(st, 1, l->run_id);
            sqlite3_bind_int64(st, 2, (sqlite3_int64)r->idx);
            sqlite3_bind_int(st, 3, (int)r->phase);
            sqlite3_bind_double(st, 4, r->t);
            sqlite3_bind_double(st, 5, r->dt);
            for (int k = 0; k < PROF_NST; k++)
                sqlite3_bind_double(st, 6 + k, r->st[k]);
            for (int k = 0; k < PROF_NEV; k++) {
                if (r->ev[k] >= 0)
                    sqlite3_bind_int64(st, 10 + k, r->ev[k]);
                else
                    sqlite3_bind_null(st, 10 + k);
            }
            for (int k = 0; k < NBST; k++)
                sqlite3_bind_int64(st, 10 + PROF_NEV + k, (sqlite3_int64)r->bytes[k]);
            int rc = step_done(st);
            if (rc != SQLITE_OK)
                return rc;
        }
    }
    return SQLITE_OK;
}

static int write_totals(prof_log *l, prof *p, int final)
{
    prof_totals t;
    char now[32];
    sqlite3_stmt *st = l->upd_run;
    int rc;

    prof_totals_get(p, &t);
    sqlite3_bind_int64(st, 1, l->run_id);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)t.n_prompt);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)t.n_gen);
    sqlite3_bind_double(st, 4, t.prefill_s);
    sqlite3_bind_double(st, 5, t.decode_s);
    sqlite3_bind_int64(st, 6, (sqlite3_int64)t.bytes_per_token);
    bind_pos_real(st, 7, t.prefill_tok_s);
    bind_pos_real(st, 8, t.decode_tok_s);
    bind_pos_real(st, 9, t.gb_s);
    bind_pos_real(st, 10, t.bw_share);
    if (final) {
        now_iso(now);
        bind_text(st, 11, now);
    } else {
        sqlite3_bind_null(st, 11);
    }
    bind_text(st, 12, final ? "done" : "running");
    for (int k = 0; k < NBST; k++)
        sqlite3_bind_int64(st, 13 + k, (sqlite3_int64)t.bytes[k]);
    bind_pos_real(st, 16, t.cp_layers ? t.cp_naive : 0);
    bind_pos_real(st, 17, t.cp_layers ? t.cp_critical : 0);
    if ((rc = step_done(st)) != SQLITE_OK)
        return rc;

    st = l->ins_layer;
    for (unsigned layer = 0; layer < prof_n_layers(p); layer++) {
        sqlite3_bind_int64(st, 1, l->run_id);
        sqlite3_bind_int(st, 2, (int)layer);
        for (int k = 0; k < PROF_NST; k++)
            sqlite3_bind_double(st, 3 + k, prof_layer_seconds(p, layer, k));
        sqlite3_bind_int64(st, 7, (sqlite3_int64)t.n_gen);   /* decode tokens */
        for (int k = 0; k < NBST; k++)
            sqlite3_bind_int64(st, 8 + k, (sqlite3_int64)prof_layer_streamed(p, layer, k));
        prof_layer_model lm;
        if (prof_get_layer_model(p, layer, &lm)) {
            sqlite3_bind_double(st, 11, lm.attn);
            sqlite3_bind_double(st, 12, lm.dense);
            sqlite3_bind_double(st, 13, lm.expert);
            sqlite3_bind_double(st, 14, lm.naive);
            sqlite3_bind_double(st, 15, lm.critical);
            bind_text(st, 16, binding_name(lm.binding));
        } else {
            for (int k = 11; k <= 16; k++)
                sqlite3_bind_null(st, k);
        }
        prof_io_fig io;
        prof_io_get(p, layer, &io);
        if (io.bytes) {
            sqlite3_bind_double(st, 17, io.io_s);
            sqlite3_bind_int64(st, 18, (sqlite3_int64)io.bytes);
        } else {
            sqlite3_bind_null(st, 17);
            sqlite3_bind_null(st, 18);
        }
        if ((rc = step_done(st)) != SQLITE_OK)
            return rc;
    }

    st = l->ins_counter;
    for (int e = 0; e < PROF_NEV; e++) {
        sqlite3_bind_int64(st, 1, l->run_id);
        bind_text(st, 2, prof_ev_name(e));
        if (t.ev[e] >= 0) {
            sqlite3_bind_int64(st, 3, t.ev[e]);
            sqlite3_bind_null(st, 4);
        } else {
            sqlite3_bind_null(st, 3);
            bind_text(st, 4, prof_ev_reason(p, e));
        }
        if ((rc = step_done(st)) != SQLITE_OK)
            return rc;
    }
    return SQLITE_OK;
}

int prof_log_flush(prof_log *l, prof *p, int final, char *err, size_t errlen)
{
    int rc;
    if (!l->run_id) {
        snprintf(err, errlen, "%s: no run started", l->path);
        return -1;
    }
    if ((rc = begin(l)) != SQLITE_OK)
        return fail_db(l, err, errlen, NULL);
    uint64_t cursor0 = l->cursor;
    if ((rc = write_tokens(l, p)) != SQLITE_OK || (rc = write_totals(l, p, final)) != SQLITE_OK) {
        fail_db(l, err, errlen, NULL);
        rollback(l);
        l->cursor = cursor0;
        return -1;
    }
    if (commit(l) != SQLITE_OK) {
        l->cursor = cursor0;
        return fail_db(l, err, errlen, NULL);
    }
    l->last_flush = prof_now();
    return 0;
}

/* ---- reading ---------------------------------------------------------- */
/* bytes of one stream per decode token: the per-layer rows' sums over their
 * n_tokens (prof_run_row.tok_bytes) */
#define TOK_BYTES(col)                                                                \
    " (SELECT coalesce(sum(CAST(ls." col " AS REAL) / ls.n_tokens), 0)"              \
    " FROM layer_stat ls WHERE ls.run_id = r.id AND ls.n_tokens > 0)"
#define RUN_COLS                                                                      \
    "SELECT r.id, r.session_id, r.started, coalesce(r.ended, ''), r.status,"          \
    " coalesce(s.program, ''), m.path, m.hash, coalesce(m.arch, ''),"                 \
    " coalesce(m.quant, ''), m.size, coalesce(m.n_layers, 0), ma.hostname,"           \
    " ma.cpu_model, ma.isa, ma.cores, coalesce(ma.read_bw_gbs, 0),"                   \
    " coalesce(r.threads, 0), r.prefetch, r.expert_io, coalesce(r.n_ctx, 0),"         \
    " coalesce(r.temp, 0), coalesce(r.top_p, 0), coalesce(r.min_p, 0),"               \
    " coalesce(r.rep_penalty, 0), coalesce(r.top_k, 0), coalesce(r.rep_last_n, 0),"   \
    " coalesce(r.seed, 0), coalesce(r.n_prompt, 0), coalesce(r.n_gen, 0),"            \
    " coalesce(r.bytes_per_token, 0), coalesce(r.prefill_s, 0),"                      \
    " coalesce(r.decode_s, 0), coalesce(r.prefill_tok_s, 0),"                         \
    " coalesce(r.decode_tok_s, 0), coalesce(r.gb_s, 0), coalesce(r.bw_share, 0),"     \
    " s.pid, coalesce(r.attn_bytes, 0), coalesce(r.ffn_bytes, 0),"                   \
    " coalesce(r.experts_bytes, 0), coalesce(r.cp_naive_bytes, 0),"                   \
    " coalesce(r.cp_critical_bytes, 0),"                                              \
    TOK_BYTES("attn_bytes") "," TOK_BYTES("ffn_bytes") "," TOK_BYTES("experts_bytes")  \
    " FROM run r JOIN session s ON s.id = r.session_id"                               \
    " JOIN model m ON m.id = s.model_id JOIN machine ma ON ma.id = s.machine_id"

static void col_str(sqlite3_stmt *st, int i, char *dst, size_t n)
{
    const unsigned char *s = sqlite3_column_text(st, i);
    snprintf(dst, n, "%s", s ? (const char *)s : "");
}

static void read_row(sqlite3_stmt *st, prof_run_row *r)
{
    int i = 0;
    memset(r, 0, sizeof *r);
    r->id = sqlite3_column_int64(st, i++);
    r->session_id = sqlite3_column_int64(st, i++);
    col_str(st, i++, r->started, sizeof r->started);
    col_str(st, i++, r->ended, sizeof r->ended);
    col_str(st, i++, r->status, sizeof r->status);
    col_str(st, i++, r->program, sizeof r->program);
    col_str(st, i++, r->model, sizeof r->model);
    col_str(st, i++, r->model_hash, sizeof r->model_hash);
    col_str(st, i++, r->arch, sizeof r->arch);
    col_str(st, i++, r->quant, sizeof r->quant);
    r->model_size = (uint64_t)sqlite3_column_int64(st, i++);
    r->n_layers = (uint32_t)sqlite3_column_int64(st, i++);
    col_str(st, i++, r->hostname, sizeof r->hostname);
    col_str(st, i++, r->cpu_model, sizeof r->cpu_model);
    col_str(st, i++, r->isa, sizeof r->isa);
    r->cores = sqlite3_column_int(st, i++);
    r->read_bw_gbs = sqlite3_column_double(st, i++);
    r->threads = sqlite3_column_int(st, i++);
    col_str(st, i++, r->prefetch, sizeof r->prefetch);
    col_str(st, i++, r->expert_io, sizeof r->expert_io);
    r->n_ctx = (uint32_t)sqlite3_column_int64(st, i++);
    r->temp = sqlite3_column_double(st, i++);
    r->top_p = sqlite3_column_double(st, i++);
    r->min_p = sqlite3_column_double(st, i++);
    r->rep_penalty = sqlite3_column_double(st, i++);
    r->top_k = sqlite3_column_int(st, i++);
    r->rep_last_n = sqlite3_column_int(st, i++);
    r->seed = (uint64_t)sqlite3_column_int64(st, i++);
    r->n_prompt = (uint64_t)sqlite3_column_int64(st, i++);
    r->n_gen = (uint64_t)sqlite3_column_int64(st, i++);
    r->bytes_per_token = (uint64_t)sqlite3_column_int64(st, i++);
    r->prefill_s = sqlite3_column_double(st, i++);
    r->decode_s = sqlite3_column_double(st, i++);
    r->prefill_tok_s = sqlite3_column_double(st, i++);
    r->decode_tok_s = sqlite3_column_double(st, i++);
    r->gb_s = sqlite3_column_double(st, i++);
    r->bw_share = sqlite3_column_double(st, i++);
    /* a run still "running" whose process is gone on this host was cut
     * short (killed, crashed): say so */
    for (int k = 0; k < NBST; k++)
        r->bytes[k] = (uint64_t)sqlite3_column_int64(st, i + 1 + k);
    r->cp_naive = sqlite3_column_double(st, i + 1 + NBST);
    r->cp_critical = sqlite3_column_double(st, i + 2 + NBST);
    for (int k = 0; k < 3; k++)
        r->tok_bytes[k] = sqlite3_column_double(st, i + 3 + NBST + k);
    if (!strcmp(r->status, "running") && sqlite3_column_type(st, i) != SQLITE_NULL) {
        char host[256] = "";
        long long pid = sqlite3_column_int64(st, i);
        gethostname(host, sizeof host - 1);
        if (!strcmp(host, r->hostname) && pid > 0 && pid <= 0x7fffffff &&
            kill((pid_t)pid, 0) != 0 && errno == ESRCH)
            snprintf(r->status, sizeof r->status, "interrupted");
    }
    for (int e = 0; e < PROF_NEV; e++)
        r->ev[e] = -1;
}

static int read_counters(prof_log *l, prof_run_row *r)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(l->db,
                                "SELECT event, value, coalesce(reason, '') FROM counter"
                                " WHERE run_id=?1",
                                -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    sqlite3_bind_int64(st, 1, r->id);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const unsigned char *name = sqlite3_column_text(st, 0);
        int e = name ? prof_ev_from_name((const char *)name) : -1;
        if (e < 0)
            continue;
        if (sqlite3_column_type(st, 1) != SQLITE_NULL)
            r->ev[e] = sqlite3_column_int64(st, 1);
        col_str(st, 2, r->ev_reason[e], sizeof r->ev_reason[e]);
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

int prof_log_list(prof_log *l, const char *model_filter, prof_run_row **rows, size_t *n,
                  char *err, size_t errlen)
{
    sqlite3_stmt *st;
    prof_run_row *v = NULL;
    size_t cnt = 0, cap = 0;
    int rc;

    *rows = NULL;
    *n = 0;
    rc = sqlite3_prepare_v2(l->db,
                            RUN_COLS " WHERE ?1 IS NULL OR instr(m.path, ?1) > 0 OR"
                                     " m.hash = ?1 ORDER BY r.id",
                            -1, &st, NULL);
    if (rc != SQLITE_OK)
        return fail_db(l, err, errlen, NULL);
    bind_text(st, 1, model_filter);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (cnt == cap) {
            size_t nc = cap ? cap * 2 : 16;
            prof_run_row *nv = realloc(v, nc * sizeof *nv);
            if (!nv) {
                sqlite3_finalize(st);
                free(v);
                snprintf(err, errlen, "%s: out of memory", l->path);
                return -1;
            }
            v = nv;
            cap = nc;
        }
        read_row(st, &v[cnt++]);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        free(v);
        return fail_db(l, err, errlen, NULL);
    }
    for (size_t i = 0; i < cnt; i++)
        if (read_counters(l, &v[i]) != SQLITE_OK) {
            free(v);
            return fail_db(l, err, errlen, NULL);
        }
    *rows = v;
    *n = cnt;
    return 0;
}

int prof_log_get(prof_log *l, int64_t id, prof_run_row *row, char *err, size_t errlen)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(l->db, RUN_COLS " WHERE r.id = ?1", -1, &st, NULL);
    if (rc != SQLITE_OK)
        return fail_db(l, err, errlen, NULL);
    sqlite3_bind_int64(st, 1, id);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        read_row(st, row);
    sqlite3_finalize(st);
    if (rc == SQLITE_DONE)
        return 1;
    if (rc != SQLITE_ROW || read_counters(l, row) != SQLITE_OK)
        return fail_db(l, err, errlen, NULL);
    return 0;
}

int prof_log_layers(prof_log *l, int64_t id, double **sec, unsigned *n_layers,
                    uint64_t *n_tok, char *err, size_t errlen)
{
    sqlite3_stmt *st;
    double *v = NULL;
    unsigned n = 0;
    int rc;

    *sec = NULL;
    *n_layers = 0;
    *n_tok = 0;
    rc = sqlite3_prepare_v2(l->db,
                            "SELECT layer, coalesce(attn_s, 0), coalesce(ffn_s, 0),"
                            " coalesce(experts_s, 0), coalesce(io_wait_s, 0),"
                            " coalesce(n_tokens, 0) FROM layer_stat WHERE run_id=?1"
                            " AND layer >= 0 AND layer < 1000000 ORDER BY layer",
                            -1, &st, NULL);
    if (rc != SQLITE_OK)
        return fail_db(l, err, errlen, NULL);
    sqlite3_bind_int64(st, 1, id);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        unsigned layer = (unsigned)sqlite3_column_int(st, 0);
        if (layer >= n) {
            double *nv = realloc(v, (size_t)(layer + 1) * PROF_NST * sizeof *nv);
            if (!nv) {
                rc = SQLITE_NOMEM;
                break;
            }
            memset(nv + (size_t)n * PROF_NST, 0,
                   (size_t)(layer + 1 - n) * PROF_NST * sizeof *nv);
            v = nv;
            n = layer + 1;
        }
        for (int k = 0; k < PROF_NST; k++)
            v[(size_t)layer * PROF_NST + k] = sqlite3_column_double(st, 1 + k);
        *n_tok = (uint64_t)sqlite3_column_int64(st, 5);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        free(v);
        return fail_db(l, err, errlen, NULL);
    }
    *sec = v;
    *n_layers = n;
    return 0;
}

int prof_log_tokens(prof_log *l, int64_t id, prof_tok **toks, size_t *n, char *err,
                    size_t errlen)
{
    sqlite3_stmt *st;
    prof_tok *v = NULL;
    size_t cnt = 0, cap = 0;
    int rc;

    *toks = NULL;
    *n = 0;
    rc = sqlite3_prepare_v2(
        l->db,
        "SELECT idx, phase, t, dt, attn_s, ffn_s, experts_s, io_wait_s, c_cycles,"
        " c_instructions, c_l1d_read_misses, c_llc_read_misses, c_dtlb_read_misses,"
        " c_task_clock, c_page_faults, c_major_faults, c_minor_faults,"
        " c_context_switches, c_cpu_migrations, coalesce(attn_bytes, 0),"
        " coalesce(ffn_bytes, 0), coalesce(experts_bytes, 0) FROM token"
        " WHERE run_id=?1 ORDER BY idx",
        -1, &st, NULL);
    if (rc != SQLITE_OK)
        return fail_db(l, err, errlen, NULL);
    sqlite3_bind_int64(st, 1, id);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (cnt == cap) {
            size_t nc = cap ? cap * 2 : 256;
            prof_tok *nv = realloc(v, nc * sizeof *nv);
            if (!nv) {
                rc = SQLITE_NOMEM;
                break;
            }
            v = nv;
            cap = nc;
        }
        prof_tok *r = &v[cnt++];
        memset(r, 0, sizeof *r);
        r->idx = (uint64_t)sqlite3_column_int64(st, 0);
        r->phase = (uint64_t)sqlite3_column_int(st, 1);
        r->t = sqlite3_column_double(st, 2);
        r->dt = sqlite3_column_double(st, 3);
        for (int k = 0; k < PROF_NST; k++)
            r->st[k] = sqlite3_column_double(st, 4 + k);
        for (int k = 0; k < PROF_NEV; k++)
            r->ev[k] = sqlite3_column_type(st, 8 + k) == SQLITE_NULL
                           ? -1
                           : sqlite3_column_int64(st, 8 + k);
        for (int k = 0; k < NBST; k++)
            r->bytes[k] = (uint64_t)sqlite3_column_int64(st, 8 + PROF_NEV + k);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        free(v);
        return fail_db(l, err, errlen, NULL);
    }
    *toks = v;
    *n = cnt;
    return 0;
}

int prof_log_layer_rows(prof_log *l, int64_t id, prof_layer_row **rows, unsigned *n,
                        char *err, size_t errlen)
{
    sqlite3_stmt *st;
    prof_layer_row *v = NULL;
    unsigned cnt = 0, cap = 0;
    int rc;

    *rows = NULL;
    *n = 0;
    rc = sqlite3_prepare_v2(l->db,
                            "SELECT layer, coalesce(attn_s, 0), coalesce(ffn_s, 0),"
                            " coalesce(experts_s, 0), coalesce(io_wait_s, 0),"
                            " coalesce(n_tokens, 0), coalesce(attn_bytes, 0),"
                            " coalesce(ffn_bytes, 0), coalesce(experts_bytes, 0),"
                            " cp_attn_bytes, cp_dense_bytes, cp_expert_bytes,"
                            " cp_naive_bytes, cp_critical_bytes, cp_binding,"
                            " coalesce(io_s, 0), coalesce(io_bytes, 0)"
                            " FROM layer_stat WHERE run_id=?1 AND layer >= 0 AND"
                            " layer < 1000000 ORDER BY layer",
                            -1, &st, NULL);
    if (rc != SQLITE_OK)
        return fail_db(l, err, errlen, NULL);
    sqlite3_bind_int64(st, 1, id);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (cnt == cap) {
            unsigned nc = cap ? cap * 2 : 64;
            prof_layer_row *nv = realloc(v, (size_t)nc * sizeof *nv);
            if (!nv) {
                rc = SQLITE_NOMEM;
                break;
            }
            v = nv;
            cap = nc;
        }
        prof_layer_row *r = &v[cnt++];
        memset(r, 0, sizeof *r);
        r->layer = (unsigned)sqlite3_column_int(st, 0);
        for (int k = 0; k < PROF_NST; k++)
            r->sec[k] = sqlite3_column_double(st, 1 + k);
        r->n_tokens = (uint64_t)sqlite3_column_int64(st, 5);
        for (int k = 0; k < NBST; k++)
            r->bytes[k] = (uint64_t)sqlite3_column_int64(st, 6 + k);
        r->has_model = sqlite3_column_type(st, 13) != SQLITE_NULL;
        if (r->has_model) {
            r->model.attn = sqlite3_column_double(st, 9);
            r->model.dense = sqlite3_column_double(st, 10);
            r->model.expert = sqlite3_column_double(st, 11);
            r->model.naive = sqlite3_column_double(st, 12);
            r->model.critical = sqlite3_column_double(st, 13);
            r->model.binding = binding_from_name((const char *)sqlite3_column_text(st, 14));
        }
        r->io_s = sqlite3_column_double(st, 15);
        r->io_bytes = (uint64_t)sqlite3_column_int64(st, 16);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        free(v);
        return fail_db(l, err, errlen, NULL);
    }
    *rows = v;
    *n = cnt;
    return 0;
}

/* ---- cflow bench ------------------------------------------------------- */
int prof_log_bench(prof_log *l, const prof_bench_row *r, char *err, size_t errlen)
{
    sqlite3_stmt *st = NULL;
    if (!l || !r || l->session_id <= 0) {
        if (err && errlen)
            snprintf(err, errlen, "run log: no session for the bench result");
        return -1;
    }
    if (begin(l) != SQLITE_OK)
        return fail_db(l, err, errlen, NULL);
    int rc = sqlite3_prepare_v2(
        l->db,
        "INSERT INTO bench(session_id, test_time, n_threads, n_prompt, n_gen, n_depth,"
        " prefetch, expert_io, repetitions, avg_ns, stddev_ns, avg_ts, stddev_ts,"
        " bytes_per_token, gb_s, read_bw_gbs, bw_pct) VALUES(?1, ?2, ?3, ?4, ?5, ?6,"
        " ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
        -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, l->session_id);
        bind_text(st, 2, r->test_time);
        sqlite3_bind_int(st, 3, r->n_threads);
        sqlite3_bind_int64(st, 4, r->n_prompt);
        sqlite3_bind_int64(st, 5, r->n_gen);
        sqlite3_bind_int64(st, 6, r->n_depth);
        bind_text(st, 7, r->prefetch);
        bind_text(st, 8, r->expert_io);
        sqlite3_bind_int(st, 9, (int)r->repetitions);
        sqlite3_bind_double(st, 10, r->avg_ns);
        sqlite3_bind_double(st, 11, r->stddev_ns);
        sqlite3_bind_double(st, 12, r->avg_ts);
        sqlite3_bind_double(st, 13, r->stddev_ts);
        sqlite3_bind_int64(st, 14, (sqlite3_int64)r->bytes_per_token);
        bind_pos_real(st, 15, r->gb_s);
        bind_pos_real(st, 16, r->read_bw_gbs);
        bind_pos_real(st, 17, r->bw_pct);
        rc = step_done(st);
        sqlite3_finalize(st);
    }
    if (rc != SQLITE_OK) {
        fail_db(l, err, errlen, NULL);
        rollback(l);
        return -1;
    }
    if (commit(l) != SQLITE_OK)
        return fail_db(l, err, errlen, NULL);
    return 0;
}
