/*
 * xio_test.h — what the expert I/O tests share.  test_xio.c (every mode's
 * tokens, read faults through the API and `cflow run`, the RAM cache
 * under every budget and policy, the cgroup's room, slots kept while a
 * read is in flight, the O_DIRECT fallback: under each reader, and main),
 * test_xio_setup.c (the settings, run once: the reader's choice, prefetch
 * on a dense model, the run log's I/O figures, --no-mmap's banks, bad
 * settings) and xio_test.c (the helpers below) build one program,
 * test_xio.
 */
#ifndef CFLOW_XIO_TEST_H
#define CFLOW_XIO_TEST_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "engine/engine.h"

#define N_TOK 16

/* What a session's log callback said: the lines, newline-terminated, and
 * their count (xt_cap_log). */
typedef struct xt_logcap {
    char text[4096];
    int  n;
} xt_logcap;

/* eng_opts.expert_cache of the sessions xt_open_model opens. */
extern int64_t xt_cache_opt;
/* The expert reader the tests run under, set in $CFLOW_XIO_READER (which
 * the cflow processes they start inherit): "uring" where the build has
 * liburing and the kernel allows it, "pool". */
extern const char *xt_reader;

/* `cflow synth [--vflow] preset` into out [4096], a temporary path ending
 * in suffix; asserts it succeeded. */
void xt_synth(const char *preset, const char *suffix, int vflow, char *out);
/* The same with `-q quant` (NULL: synth's default, q4_0). */
void xt_synth_q(const char *preset, const char *quant, const char *suffix, int vflow,
                char *out);
/* An eng_log_fn appending msg to the xt_logcap ud. */
void xt_cap_log(void *ud, int level, const char *msg);
/* A session on path with expert I/O mode and prefetch as given, 64
 * positions, 2 threads, the cache xt_cache_opt, its log into lc (NULL:
 * none); asserts it opened with that mode, prefetch and reader. */
eng_session *xt_open_model(const char *path, int mode, int prefetch, xt_logcap *lc);
/* The most likely token of s's logits (the lowest id among equals). */
int32_t xt_argmax(eng_session *s);
/* n greedy tokens into out from token 1; with switch_every > 0 the expert
 * I/O mode (and the prefetch thread) change every switch_every tokens. */
void xt_greedy(eng_session *s, int32_t *out, int n, int switch_every);

/* test_xio_setup.c, run once under the default reader */
void test_prefetch_dense(void **state);
void test_runlog_io(void **state);
void test_no_mmap_banks(void **state);
void test_reader_choice(void **state);
void test_bad_settings(void **state);

#endif
