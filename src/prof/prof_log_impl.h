/*
 * prof_log_impl.h — private to src/prof: the run log's handle and the few
 * SQLite helpers its files share.  Never included outside src/prof.
 *
 *   prof_log.c        the schema, its migrations, opening (check first,
 *                     then WAL and migrate) and closing
 *   prof_log_write.c  sessions, runs, token and per-layer rows, bench rows
 *   prof_log_read.c   the readers behind `cflow runs` and the run browser
 *   prof_log_membw.c  the read-bandwidth figures of `cflow bench membw`
 *
 * struct prof_log:
 *   db, path        the connection and the file it was opened on
 *   opened_version  PRAGMA user_version found at open (before migrating)
 *   machine_id, model_id, session_id
 *                   rows of the session prof_log_session began (0: none)
 *   run_id          the run prof_log_run_begin began (0: none)
 *   gen, cursor     the profiler run being logged and the ring cursor of
 *                   the next token record to write
 *   last_flush      prof_now() of the last committed flush, seconds
 *   ins_token, upd_run, ins_layer, ins_counter
 *                   the writers' prepared statements (NULL until the first
 *                   run begins)
 *   has_xio, xio    the expert streaming figures the flushes write
 *                   (prof_log_set_xio)
 *   has_req, req_*  how a server request ended (prof_log_set_request)
 */
#ifndef CFLOW_PROF_LOG_IMPL_H
#define CFLOW_PROF_LOG_IMPL_H

#include <sqlite3.h>

#include "prof/prof.h"

/* Streams whose bytes are logged: attention, ffn, experts (I/O wait
 * streams no weights). */
#define PROF_LOG_NBST 3

struct prof_log {
    sqlite3      *db;
    char         *path;
    int           opened_version;
    int64_t       machine_id, model_id, session_id, run_id;
    uint64_t      gen;          /* the profiler run being logged */
    uint64_t      cursor;       /* ring cursor */
    double        last_flush;
    sqlite3_stmt *ins_token, *upd_run, *ins_layer, *ins_counter;
    int           has_xio;      /* prof_log_set_xio gave the run's figures */
    prof_xio_fig  xio;
    int           has_req;      /* prof_log_set_request gave the run's outcome */
    char          req_stop[16];
    uint64_t      req_cached, req_prompt;
};

/* "PATH: what: sqlite's message" into err; returns -1. */
int  prof_log_fail(prof_log *l, char *err, size_t errlen, const char *what);
/* BEGIN IMMEDIATE and COMMIT, retried while another process holds the
 * lock; a failed COMMIT rolls back.  SQLite result codes. */
int  prof_log_begin(prof_log *l);
int  prof_log_commit(prof_log *l);
/* Roll back the open transaction, if any. */
void prof_log_rollback(prof_log *l);
/* End the transaction a writer began: commit when rc is SQLITE_OK, else
 * roll back.  0, or -1 with one line in err. */
int  prof_log_end(prof_log *l, int rc, char *err, size_t errlen);
/* Now as the log writes times: ISO 8601 UTC with milliseconds. */
void prof_log_now_iso(char out[32]);
/* Bind text, or NULL for a NULL s. */
void prof_log_bind_text(sqlite3_stmt *st, int i, const char *s);

#endif
