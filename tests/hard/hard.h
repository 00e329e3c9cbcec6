/*
 * hard.h — helpers of the hardening tests (tests/hard): running the real
 * cflow binary while watching it (its memory, its output so far) and
 * acting on it mid-run (truncating the model it has mapped).
 */
#ifndef CFLOW_TESTS_HARD_H
#define CFLOW_TESTS_HARD_H

#include <stddef.h>
#include <sys/types.h>

#include "testutil.h"

/* Called about every period_ms while the child runs, and whenever output
 * arrives: pid, the bytes of stdout read so far.  Return non-zero to stop
 * calling. */
typedef int (*hard_watch_fn)(void *ctx, pid_t pid, size_t out_len);

/* tu_run with a watcher (argv[0] a path; env "NAME=value" strings added to
 * the environment, NULL-terminated, may be NULL). */
int hard_run(tu_proc *p, char *const argv[], char *const env[], int timeout_s,
             hard_watch_fn watch, void *ctx, int period_ms);

/* Peak resident set of the last hard_run child, KiB (wait4's ru_maxrss). */
extern long hard_maxrss_kb;

/* Resident set size of a process in bytes (/proc/PID/statm), 0 if gone. */
size_t hard_rss(pid_t pid);

/* Copy a file; 0 on success. */
int hard_copy(const char *from, const char *to);

/* The shipped model, data/default.cflow of the source tree. */
const char *hard_default_model(void);

/* Non-zero in the ASan/UBSan build (CFLOW_SANITIZERS set by make check). */
int hard_sanitizers(void);

#endif
