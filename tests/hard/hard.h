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

/* Resident set size of a process in bytes (/proc/PID/statm), 0 if gone. */
size_t hard_rss(pid_t pid);

/* Copy a file; 0 on success. */
int hard_copy(const char *from, const char *to);

/* Unpack a fuzz archive ("@@file NAME\n" + bytes, up to "\n@@file ") into
 * folder dir; the file called name, when not NULL, gets text instead.  0
 * on success. */
int hard_unpack(const char *archive, const char *dir, const char *name, const char *text);

/* The shipped model, data/default.cflow of the source tree. */
const char *hard_default_model(void);

/* Non-zero in the ASan/UBSan build (CFLOW_SANITIZERS set by make check). */
int hard_sanitizers(void);

#endif
