/*
 * hard.h — helpers of the hardening tests (tests/hard): running the real
 * cflow binary while watching it (its memory, its output so far) and
 * acting on it mid-run (truncating the model it has mapped).
 */
#ifndef CFLOW_TESTS_HARD_H
#define CFLOW_TESTS_HARD_H

#include <stddef.h>
#include <stdint.h>
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

/* tests/fuzz/corpus/rel of the source tree, tu_require'd (one of 4
 * rotating static buffers). */
const char *hard_seed(const char *rel);

/* The llama2.c seed (llama2c/shared.a) unpacked into tu_tmp(name) with
 * int32 header field `field` (0 dim .. 6 seq_len) set to value; its
 * model.bin and tokenizer.bin paths into model and tok (4096 bytes). */
void hard_l2c_patched(const char *name, int field, int32_t value, char *model, char *tok);

/* Run cflow with args (NULL-terminated; address space capped at 1 GiB
 * outside the sanitizer build), at most timeout_s seconds: a run that
 * blocks fails the test instead of hanging it.  Fails the test on a
 * signal or a sanitizer report. */
void hard_run(tu_proc *p, int timeout_s, const char *const *args);
/* hard_run, then exit status 1 with one line on stderr naming file and
 * holding want. */
void hard_refused(const char *file, const char *want, int timeout_s,
                  const char *const *args);

#define HARD_ARGS(...) ((const char *const[]){ __VA_ARGS__, NULL })

/* Entries of folder dir whose name holds part (NULL: every entry but "."
 * and ".."); fails the test when dir cannot be read. */
int hard_dir_count(const char *dir, const char *part);

/* Non-zero in the ASan/UBSan build (CFLOW_SANITIZERS set by make check). */
int hard_sanitizers(void);

#endif
