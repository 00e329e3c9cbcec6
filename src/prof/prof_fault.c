/*
 * prof_fault.c — fault injection for the run log (tests only).
 *
 * The run log must survive a full disk and a database another process
 * keeps locked: the run goes on with one warning and the database keeps
 * only whole transactions (prof_log.c).  Both faults are hard to bring
 * about for real at a chosen moment, so when the environment variable
 * CFLOW_FAULT names one, prof_log_open opens the database through a
 * wrapping SQLite VFS, "cflow-fault", that forwards every call to the
 * default VFS except the faulted one:
 *
 *   CFLOW_FAULT=runlog:enospc@N   after N successful writes (xWrite, to the
 *                                 database, its WAL or journal), every write
 *                                 fails as a full disk does: SQLITE_FULL,
 *                                 what the unix VFS makes of ENOSPC.  The
 *                                 disk stays full.
 *   CFLOW_FAULT=runlog:busy@N     after N successful takes of the write
 *                                 lock (the WAL's write lock, xShmLock
 *                                 slot 0; xLock at RESERVED or above in
 *                                 rollback-journal mode), every further one
 *                                 fails with SQLITE_BUSY, as when another
 *                                 process holds the write lock for good.
 *
 * N defaults to 0 (the first write or lock fails).  Without CFLOW_FAULT,
 * or with one naming no run log fault, nothing is registered and the log
 * uses SQLite's default VFS.  The counters are process-wide.
 *
 * CFLOW_FAULT=convert:enospc@N fills the disk for the converter: its
 * output (fmt_convert_io.c writes it through prof_fault_room) and the
 * model cache's sidecar (ui_models.c) take N bytes in all, then every
 * write fails with ENOSPC; a write that crosses N is short first, as
 * write(2) on a disk that fills up is.
 *
 * CFLOW_FAULT=serve:step-ms@N makes every decode step of `cflow serve`
 * last N milliseconds at least (srv_sched.c): the shipped model, whose
 * steps take a fraction of one, then streams slowly enough for the tests
 * to see requests share steps and clients leave in the middle.
 *
 * The variable's grammar is read here for every fault of the suite
 * (prof_fault_ok, prof_fault_get in prof.h): the engine's expert reads and
 * io_uring refusal ask for theirs by name, and eng_env_check refuses a
 * value outside it.
 */
#include "config.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "prof/prof.h"
#include "prof/prof_impl.h"

enum { FLT_NONE, FLT_ENOSPC, FLT_BUSY };

static int         flt_kind;
static long        flt_after;
static atomic_long flt_count;
static sqlite3_vfs flt_vfs;
static sqlite3_vfs *flt_real;

/* A file of the fault VFS: ours, followed by the real VFS's file. */
typedef struct flt_file {
    sqlite3_file  base;
    sqlite3_file *real;
} flt_file;

#define REAL(f) (((flt_file *)(f))->real)

/* Is this the access that fails?  Counts successful ones up to N. */
static int flt_hit(int kind)
{
    if (flt_kind != kind)
        return 0;
    return atomic_fetch_add(&flt_count, 1) >= flt_after;
}

static int f_close(sqlite3_file *f)
{
    int rc = REAL(f)->pMethods ? REAL(f)->pMethods->xClose(REAL(f)) : SQLITE_OK;
    f->pMethods = NULL;
    return rc;
}
static int f_read(sqlite3_file *f, void *b, int n, sqlite3_int64 o)
{ return REAL(f)->pMethods->xRead(REAL(f), b, n, o); }
static int f_write(sqlite3_file *f, const void *b, int n, sqlite3_int64 o)
{
    if (flt_hit(FLT_ENOSPC))
        return SQLITE_FULL;
    return REAL(f)->pMethods->xWrite(REAL(f), b, n, o);
}
static int f_truncate(sqlite3_file *f, sqlite3_int64 n)
{ return REAL(f)->pMethods->xTruncate(REAL(f), n); }
static int f_sync(sqlite3_file *f, int fl)
{ return REAL(f)->pMethods->xSync(REAL(f), fl); }
static int f_size(sqlite3_file *f, sqlite3_int64 *n)
{ return REAL(f)->pMethods->xFileSize(REAL(f), n); }
static int f_lock(sqlite3_file *f, int l)
{
    if (l >= SQLITE_LOCK_RESERVED && flt_hit(FLT_BUSY))
        return SQLITE_BUSY;
    return REAL(f)->pMethods->xLock(REAL(f), l);
}
static int f_unlock(sqlite3_file *f, int l)
{ return REAL(f)->pMethods->xUnlock(REAL(f), l); }
static int f_reserved(sqlite3_file *f, int *out)
{ return REAL(f)->pMethods->xCheckReservedLock(REAL(f), out); }
static int f_fcntl(sqlite3_file *f, int op, void *arg)
{ return REAL(f)->pMethods->xFileControl(REAL(f), op, arg); }
static int f_sector(sqlite3_file *f)
{ return REAL(f)->pMethods->xSectorSize(REAL(f)); }
static int f_devchar(sqlite3_file *f)
{ return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f)); }
static int f_shm_map(sqlite3_file *f, int pg, int sz, int ext, void volatile **pp)
{ return REAL(f)->pMethods->xShmMap(REAL(f), pg, sz, ext, pp); }
static int f_shm_lock(sqlite3_file *f, int off, int n, int flags)
{
    /* slot 0 of the WAL's locks is its write lock (WAL_WRITE_LOCK) */
    if (off == 0 && (flags & SQLITE_SHM_LOCK) && (flags & SQLITE_SHM_EXCLUSIVE) &&
        flt_hit(FLT_BUSY))
        return SQLITE_BUSY;
    return REAL(f)->pMethods->xShmLock(REAL(f), off, n, flags);
}
static void f_shm_barrier(sqlite3_file *f)
{ REAL(f)->pMethods->xShmBarrier(REAL(f)); }
static int f_shm_unmap(sqlite3_file *f, int del)
{ return REAL(f)->pMethods->xShmUnmap(REAL(f), del); }
static int f_fetch(sqlite3_file *f, sqlite3_int64 o, int n, void **pp)
{ return REAL(f)->pMethods->xFetch(REAL(f), o, n, pp); }
static int f_unfetch(sqlite3_file *f, sqlite3_int64 o, void *p)
{ return REAL(f)->pMethods->xUnfetch(REAL(f), o, p); }

/* Version 1 methods for real files without shared memory (journals). */
static const sqlite3_io_methods flt_io1 = {
    1, f_close, f_read, f_write, f_truncate, f_sync, f_size, f_lock, f_unlock,
    f_reserved, f_fcntl, f_sector, f_devchar,
    NULL, NULL, NULL, NULL, NULL, NULL
};
static const sqlite3_io_methods flt_io3 = {
    3, f_close, f_read, f_write, f_truncate, f_sync, f_size, f_lock, f_unlock,
    f_reserved, f_fcntl, f_sector, f_devchar,
    f_shm_map, f_shm_lock, f_shm_barrier, f_shm_unmap, f_fetch, f_unfetch
};

static int v_open(sqlite3_vfs *v, const char *name, sqlite3_file *f, int flags,
                  int *out_flags)
{
    flt_file *ff = (flt_file *)f;
    (void)v;
    ff->real = (sqlite3_file *)(ff + 1);
    memset(ff->real, 0, (size_t)flt_real->szOsFile);
    f->pMethods = NULL;
    int rc = flt_real->xOpen(flt_real, name, ff->real, flags, out_flags);
    if (ff->real->pMethods)
        f->pMethods = ff->real->pMethods->iVersion >= 3 ? &flt_io3 : &flt_io1;
    return rc;
}
static int v_delete(sqlite3_vfs *v, const char *name, int sync)
{ (void)v; return flt_real->xDelete(flt_real, name, sync); }
static int v_access(sqlite3_vfs *v, const char *name, int fl, int *out)
{ (void)v; return flt_real->xAccess(flt_real, name, fl, out); }
static int v_fullpath(sqlite3_vfs *v, const char *name, int n, char *out)
{ (void)v; return flt_real->xFullPathname(flt_real, name, n, out); }

/* The faults $CFLOW_FAULT may name, and whether each takes "@N". */
static const struct { const char *name; int counted; } known[] = {
    { "runlog:enospc", 1 },     { "runlog:busy", 1 }, { "expert-read:eio", 1 },
    { "expert-read:short", 1 }, { "uring-init:eperm", 0 }, { "serve:step-ms", 1 },
    { "convert:enospc", 1 },
};
enum { N_KNOWN = sizeof known / sizeof *known };

/* The item of n bytes at v: the index of its fault in known[] and its N in
 * *at, or -1 when it is no fault's name with a well-formed "@N". */
static int item(const char *v, size_t n, unsigned long *at)
{
    *at = 0;
    for (int i = 0; i < N_KNOWN; i++) {
        size_t k = strlen(known[i].name);
        if (k > n || strncmp(v, known[i].name, k))
            continue;
        if (k == n)
            return i;
        /* the rest must be @ and digits (a misspelt fault would inject
         * nothing, and a test meant to see it fail would pass for the
         * wrong reason) */
        if (!known[i].counted || v[k] != '@' || k + 1 == n ||
            strspn(v + k + 1, "0123456789") != n - k - 1)
            return -1;
        *at = strtoul(v + k + 1, NULL, 10);
        return i;
    }
    return -1;
}

int prof_fault_ok(const char *v)
{
    unsigned long at;
    for (;;) {
        size_t n = strcspn(v, ",");
        if (item(v, n, &at) < 0)
            return 0;
        if (!v[n])
            return 1;
        v += n + 1;
    }
}

int prof_fault_get(const char *name, unsigned long *at)
{
    const char *v = getenv("CFLOW_FAULT");
    unsigned long n_at = 0;
    if (at)
        *at = 0;
    if (!v || !prof_fault_ok(v))
        return 0;
    for (;;) {
        size_t n = strcspn(v, ",");
        int i = item(v, n, &n_at);
        if (i >= 0 && !strcmp(known[i].name, name)) {
            if (at)
                *at = n_at;
            return 1;
        }
        if (!v[n])
            return 0;
        v += n + 1;
    }
}

const char *prof_fault_vfs(void)
{
    unsigned long at;
    if (prof_fault_get("runlog:enospc", &at))
        flt_kind = FLT_ENOSPC;
    else if (prof_fault_get("runlog:busy", &at))
        flt_kind = FLT_BUSY;
    else
        return NULL;
    flt_after = at > LONG_MAX ? LONG_MAX : (long)at;
    if (flt_vfs.zName)
        return flt_vfs.zName;
    if (!(flt_real = sqlite3_vfs_find(NULL)))
        return NULL;
    /* the calls not wrapped ignore their VFS argument in the unix VFS */
    flt_vfs = *flt_real;
    flt_vfs.szOsFile = (int)sizeof(flt_file) + flt_real->szOsFile;
    flt_vfs.zName = "cflow-fault";
    flt_vfs.pNext = NULL;
    flt_vfs.pAppData = NULL;
    flt_vfs.xOpen = v_open;
    flt_vfs.xDelete = v_delete;
    flt_vfs.xAccess = v_access;
    flt_vfs.xFullPathname = v_fullpath;
    if (sqlite3_vfs_register(&flt_vfs, 0) != SQLITE_OK) {
        flt_vfs.zName = NULL;
        return NULL;
    }
    return flt_vfs.zName;
}

size_t prof_fault_room(size_t n)
{
    static atomic_ulong used;
    unsigned long at;
    if (!prof_fault_get("convert:enospc", &at))
        return n;
    unsigned long before = atomic_fetch_add(&used, (unsigned long)n);
    return before >= at ? 0 : at - before < n ? (size_t)(at - before) : n;
}
