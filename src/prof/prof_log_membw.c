/*
 * prof_log_membw.c — the run log's bandwidth figures: what `cflow bench
 * membw` measured on a machine at a thread count, kept so that later runs
 * compare their GB/s with the same figure instead of a fresh, noisier one;
 * and what `cflow bench diskbw` measured of a storage device, which the
 * storage-bound limit of expert streaming divides by.
 *
 *   membw(id, hostname, cpu_model, cores, threads, measured, passes, bytes,
 *         median_gbs, min_gbs, max_gbs)
 *       One row per measurement (schema version 6): the machine as
 *       hostname, CPU model string and online CPUs; threads the readers;
 *       measured its ISO 8601 UTC time; passes the timed passes, bytes
 *       read per pass, and the median, min and max of the passes in GB/s
 *       (1e9 bytes/s).  The latest row of a (hostname, cpu_model, cores,
 *       threads) is the machine's figure at that thread count.
 * The kernel ISA is not part of the key: the figure is the memory
 * system's, whichever kernels later run against it.
 *
 *   diskbw(id, hostname, dev, path, measured, gbs)
 *       One row per storage measurement (schema version 7): dev the
 *       st_dev of the file that was read (path), gbs what it gave in GB/s.
 *       The latest row of a (hostname, dev) is the device's figure: a
 *       model on that device is read at most that fast.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "prof/prof.h"
#include "prof/prof_log_impl.h"

int prof_log_membw(prof_log *l, const prof_machine *m, const prof_membw *r, char *err,
                   size_t errlen)
{
    char now[32];
    sqlite3_stmt *st = NULL;
    if (!l || !m || !r || r->median_gbs <= 0) {
        snprintf(err, errlen, "run log: no read bandwidth to record");
        return -1;
    }
    if (prof_log_begin(l) != SQLITE_OK)
        return prof_log_fail(l, err, errlen, NULL);
    prof_log_now_iso(now);
    int rc = sqlite3_prepare_v2(
        l->db,
        "INSERT INTO membw(hostname, cpu_model, cores, threads, measured, passes, bytes,"
        " median_gbs, min_gbs, max_gbs) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        -1, &st, NULL);
    if (rc == SQLITE_OK) {
        prof_log_bind_text(st, 1, m->hostname ? m->hostname : "");
        prof_log_bind_text(st, 2, m->cpu_model ? m->cpu_model : "");
        sqlite3_bind_int(st, 3, m->cores);
        sqlite3_bind_int(st, 4, r->threads);
        prof_log_bind_text(st, 5, now);
        sqlite3_bind_int(st, 6, (int)r->passes);
        sqlite3_bind_int64(st, 7, (sqlite3_int64)r->bytes);
        sqlite3_bind_double(st, 8, r->median_gbs);
        sqlite3_bind_double(st, 9, r->min_gbs);
        sqlite3_bind_double(st, 10, r->max_gbs);
        rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
        sqlite3_finalize(st);
    }
    return prof_log_end(l, rc, err, errlen);
}

int prof_log_membw_find(prof_log *l, const prof_machine *m, int threads, prof_membw *r,
                        char measured[32])
{
    sqlite3_stmt *st;
    int found = 1;
    memset(r, 0, sizeof *r);
    if (measured)
        measured[0] = '\0';
    if (sqlite3_prepare_v2(l->db,
                           "SELECT passes, bytes, median_gbs, min_gbs, max_gbs, measured"
                           " FROM membw WHERE hostname=?1 AND cpu_model=?2 AND cores=?3"
                           " AND threads=?4 AND median_gbs > 0 ORDER BY id DESC LIMIT 1",
                           -1, &st, NULL) != SQLITE_OK)
        return -1;
    prof_log_bind_text(st, 1, m->hostname ? m->hostname : "");
    prof_log_bind_text(st, 2, m->cpu_model ? m->cpu_model : "");
    sqlite3_bind_int(st, 3, m->cores);
    sqlite3_bind_int(st, 4, threads);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        r->threads = threads;
        r->passes = (unsigned)sqlite3_column_int(st, 0);
        r->bytes = (uint64_t)sqlite3_column_int64(st, 1);
        r->median_gbs = sqlite3_column_double(st, 2);
        r->min_gbs = sqlite3_column_double(st, 3);
        r->max_gbs = sqlite3_column_double(st, 4);
        const unsigned char *t = sqlite3_column_text(st, 5);
        if (measured)
            snprintf(measured, 32, "%s", t ? (const char *)t : "");
        found = 0;
    } else if (rc != SQLITE_DONE) {
        found = -1;
    }
    sqlite3_finalize(st);
    return found;
}

int prof_log_diskbw(prof_log *l, const char *hostname, uint64_t dev, const char *path,
                    double gbs, char *err, size_t errlen)
{
    char now[32];
    sqlite3_stmt *st = NULL;
    if (!l || !(gbs > 0)) {
        snprintf(err, errlen, "run log: no storage bandwidth to record");
        return -1;
    }
    if (prof_log_begin(l) != SQLITE_OK)
        return prof_log_fail(l, err, errlen, NULL);
    prof_log_now_iso(now);
    int rc = sqlite3_prepare_v2(l->db,
                                "INSERT INTO diskbw(hostname, dev, path, measured, gbs)"
                                " VALUES(?1, ?2, ?3, ?4, ?5)",
                                -1, &st, NULL);
    if (rc == SQLITE_OK) {
        prof_log_bind_text(st, 1, hostname ? hostname : "");
        sqlite3_bind_int64(st, 2, (sqlite3_int64)dev);
        prof_log_bind_text(st, 3, path ? path : "");
        prof_log_bind_text(st, 4, now);
        sqlite3_bind_double(st, 5, gbs);
        rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
        sqlite3_finalize(st);
    }
    return prof_log_end(l, rc, err, errlen);
}

int prof_log_diskbw_find(prof_log *l, const char *hostname, uint64_t dev, double *gbs,
                         char measured[32])
{
    sqlite3_stmt *st;
    int found = 1;
    *gbs = 0;
    if (measured)
        measured[0] = '\0';
    if (sqlite3_prepare_v2(l->db,
                           "SELECT gbs, measured FROM diskbw WHERE hostname=?1 AND dev=?2"
                           " AND gbs > 0 ORDER BY id DESC LIMIT 1",
                           -1, &st, NULL) != SQLITE_OK)
        return -1;
    prof_log_bind_text(st, 1, hostname ? hostname : "");
    sqlite3_bind_int64(st, 2, (sqlite3_int64)dev);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *gbs = sqlite3_column_double(st, 0);
        const unsigned char *t = sqlite3_column_text(st, 1);
        if (measured)
            snprintf(measured, 32, "%s", t ? (const char *)t : "");
        found = 0;
    } else if (rc != SQLITE_DONE) {
        found = -1;
    }
    sqlite3_finalize(st);
    return found;
}
