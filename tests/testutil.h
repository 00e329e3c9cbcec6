/*
 * testutil.h — helpers shared by the test programs: where the shared
 * models are, scratch folders, and running the real binaries the way a
 * user does (argv in, stdout/stderr/exit status out).
 */
#ifndef CFLOW_TESTUTIL_H
#define CFLOW_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* $CFLOW_SHARED/rel (default ../shared beside the source tree).  The
 * result lives in one of 8 rotating static buffers (as does tu_tmp's). */
const char *tu_shared(const char *rel);
/* Abort the test run (not skip) when a shared file is missing. */
void tu_require(const char *path);
/* tu_shared(rel), after tu_require: the shared file must be there. */
const char *tu_shared_file(const char *rel);
/* A fresh scratch folder (removed at exit); returns dir/name. */
const char *tu_tmp(const char *name);
/* The cflow binary under test ($CFLOW_BIN, else ./cflow). */
const char *tu_cflow(void);
/* The shipped model, data/default.cflow of the source tree
 * ($CFLOW_SRCDIR, else .). */
const char *tu_default_model(void);

typedef struct tu_proc {
    char  *out, *err;      /* NUL-terminated captured output (malloc'd) */
    size_t out_len, err_len;
    int    status;         /* exit status, or 128+signal */
    int    signaled;
} tu_proc;
/* Run argv (argv[0] a path) with an optional environment override
 * ("NAME=value" strings, NULL-terminated, may be NULL) and a time limit in
 * seconds.  Returns 0 when it ran (whatever its exit status). */
int  tu_run(tu_proc *p, char *const argv[], char *const env[], int timeout_s);
/* Called about every period_ms while the child runs, and whenever output
 * arrives: pid, the bytes of stdout read so far.  Return non-zero to stop
 * calling. */
typedef int (*tu_watch_fn)(void *ctx, pid_t pid, size_t out_len);
/* tu_run with a watcher (NULL: none), polling every period_ms. */
int  tu_run_watch(tu_proc *p, char *const argv[], char *const env[], int timeout_s,
                  tu_watch_fn watch, void *ctx, int period_ms);
/* tu_run with stdout a terminal (a pseudo-terminal in raw mode: no
 * newline translation), stderr still a pipe: what a program prints when a
 * user watches it. */
int  tu_run_pty(tu_proc *p, char *const argv[], char *const env[], int timeout_s);
/* Peak resident set of the last child run, KiB (wait4's ru_maxrss). */
extern long tu_maxrss_kb;
void tu_proc_free(tu_proc *p);
/* Run the cflow binary: tu_cflow_run(&p, "run", "-m", model, ..., NULL),
 * ten minutes at most. */
int  tu_cflow_run(tu_proc *p, ...);
/* The same with environment overrides ("NAME=value", NULL-terminated, may
 * be NULL). */
int  tu_cflow_env(tu_proc *p, char *const env[], ...);
/* 1 when the process exited 0 (not by a signal); else its status and
 * output on stderr, named by what, and 0.  Use as assert_true(tu_ok(...)). */
int  tu_ok(const tu_proc *p, const char *what);
/* `cflow convert` of the shared model rel (tu_require'd) into tu_tmp(name);
 * returns that path (tu_tmp's rotating buffer), or NULL when the convert
 * failed (its output already printed by tu_ok). */
const char *tu_convert_shared(const char *rel, const char *name);

/* `cflow synth PRESET OUT` of a MoE preset and its geometry as `cflow
 * inspect --json` reports it: MoE layers, top-k, and the first expert's
 * length in bytes (a synthetic bank's experts are all alike).  Fails the
 * test when either command does. */
typedef struct tu_moe {
    unsigned n_moe, top_k;
    uint64_t expert_len;
} tu_moe;
void tu_synth_moe(const char *preset, const char *out, tu_moe *g);

/* A copy of the .cflow model good at bad with every weight of layer's
 * vector `which` (FMT_S_*: a norm) set to v, a finite value the reader
 * takes (3e38 in an attention norm overflows the pass into NaN).  0, or
 * -1 with the reason on stderr. */
int tu_model_set_vec(const char *good, const char *bad, unsigned layer, int which, float v);

/* Whether io_uring, the default expert reader, runs here (the build has
 * liburing and the kernel allows it); when not, one line on stderr, who
 * first, says so: the caller then tests the pool reader alone. */
int tu_have_uring(const char *who);

/* Read a whole file (malloc'd, NUL-terminated); NULL on error. */
char *tu_read_file(const char *path, size_t *len);
int   tu_write_file(const char *path, const void *buf, size_t len);
/* The same, failing the test (cmocka) where they return NULL or -1. */
void *tu_slurp(const char *path, size_t *len);
void  tu_spit(const char *path, const void *buf, size_t len);
/* Count newline-terminated lines in s. */
int   tu_count_lines(const char *s);
/* The index of the largest of x[0..n) (the first of equals). */
int32_t tu_argmax(const float *x, uint32_t n);
/* Fail the test (cmocka) unless a[i] and b[i] agree for every i < n: bit
 * for bit with tol 0, else within tol of the largest |b[i]|; the message
 * names what, the index and both values (a as "got", b as "want"). */
void  tu_same_logits(const char *what, const float *a, const float *b, uint32_t n,
                     double tol);

/* In testutil_tiles.c: FNV-1a 64 of n bytes, continuing from h (start
 * from 0xcbf29ce484222325). */
uint64_t tu_fnv64(uint64_t h, const void *p, size_t n);
/* Matrix `matrix` (rows x cols, one tile type) of stream st, read back as
 * the GGML blocks its tiles keep (kern_tile_blocks), row by row in GGML's
 * order: fn(ctx, r, row, bytes) for r = 0 .. rows-1.  0, or -1 when a tile
 * gives no blocks (F32, F16) or the tiles do not cover the rows. */
struct fmt_stream;
typedef void (*tu_row_fn)(void *ctx, uint32_t r, const uint8_t *row, size_t n);
int tu_matrix_rows(const struct fmt_stream *st, int matrix, uint32_t rows, uint32_t cols,
                   tu_row_fn fn, void *ctx);

/* The first column of the first row sql gives in database db (opened
 * read-write, waiting for locks up to 5 s): an integer, TU_DB_NONE when
 * there is no row or it is NULL; text into out (empty likewise).  A query
 * that cannot run fails the test.  In testutil_db.c (links SQLite). */
#define TU_DB_NONE (-12345)
int64_t tu_db_int(const char *db, const char *sql);
void    tu_db_text(const char *db, const char *sql, char *out, size_t n);

#endif
