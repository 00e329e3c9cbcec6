/*
 * testutil_db.c — one value from an SQLite database, for the tests that
 * read the run log cflow wrote (see testutil.h).  A file of its own, so
 * that only the programs that use it link SQLite.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>

#include <sqlite3.h>

#include "testutil.h"

/* Open db (read-write, waiting up to 5 s for another process's lock) and
 * prepare sql; fails the test when either cannot be done. */
static sqlite3_stmt *db_query(const char *db, const char *sql, sqlite3 **d)
{
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open_v2(db, d, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    sqlite3_busy_timeout(*d, 5000);
    if (sqlite3_prepare_v2(*d, sql, -1, &st, NULL) != SQLITE_OK) {
        fprintf(stderr, "%s: %s: %s\n", db, sql, sqlite3_errmsg(*d));
        fail();
    }
    return st;
}

int64_t tu_db_int(const char *db, const char *sql)
{
    sqlite3 *d;
    sqlite3_stmt *st = db_query(db, sql, &d);
    int64_t v = TU_DB_NONE;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(d);
    return v;
}

void tu_db_text(const char *db, const char *sql, char *out, size_t n)
{
    sqlite3 *d;
    sqlite3_stmt *st = db_query(db, sql, &d);
    out[0] = 0;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
        snprintf(out, n, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(d);
}
