/*
 * eng_impl.h — private to src/engine: declarations shared between the
 * engine's files (never included outside src/engine).  Several files add
 * to it; keep edits additive and grouped by defining file.
 */
#ifndef CFLOW_ENG_IMPL_H
#define CFLOW_ENG_IMPL_H

#include "engine/engine.h"

/* ---- eng_session.c ---- */
/* The mapped model behind a session (for inspection and statistics). */
const fmt_model *eng_model(const eng_session *s);
/* requested > 0: itself; else the number of online CPUs. */
int eng_default_threads(int requested);

/* ---- eng_tok_pre.c: the regex pre-tokenizer of byte-level BPE ---- */
typedef struct eng_pretok eng_pretok;
enum {
    ENG_PRE_IGNORE_MERGES = 1u << 0, /* a word that is a token is not merged */
    ENG_PRE_ADD_BOS       = 1u << 1  /* the family wants BOS by default */
};
/* Compile the expressions of pre-tokenizer pre[0..pre_len) (a
 * tokenizer.ggml.pre value), or, when n_custom > 0, the given expressions
 * (PCRE2 syntax) in order.  ENG_EUNSUP for an unknown name. */
int  eng_pretok_new(eng_pretok **out, const char *pre, size_t pre_len,
                    const char *const *custom, const size_t *custom_len,
                    size_t n_custom, char *err, size_t errlen);
void eng_pretok_free(eng_pretok *p);
unsigned eng_pretok_flags(const eng_pretok *p);
/* text itself when it is well-formed UTF-8, else a copy (also stored in
 * *owned, which the caller frees; NULL when no copy was made) in which
 * undecodable bytes are U+FFFD.  NULL on ENOMEM. */
const char *eng_pretok_sanitize(const char *text, size_t len, size_t *out_len,
                                char **owned);
/* Split valid UTF-8 text into words: *ends (malloc'd) gets the end offset
 * of each of the *n_words words. */
int  eng_pretok_split(const eng_pretok *p, const char *text, size_t len,
                      size_t **ends, size_t *n_words);
/* Encode code point cp (<= U+10FFFF) as UTF-8 into out[4]; the length. */
size_t eng_utf8_put(uint32_t cp, char *out);

/* ---- eng_pool.c ---- */
typedef struct eng_pool eng_pool;
/* fn runs once on every thread of the region (tid 0 is the caller). */
typedef void (*eng_task_fn)(void *ctx, int tid, int n_threads);
eng_pool *eng_pool_new(int n_threads);
void      eng_pool_free(eng_pool *p);
int       eng_pool_size(const eng_pool *p);
int       eng_pool_resize(eng_pool *p, int n_threads);
void      eng_pool_run(eng_pool *p, eng_task_fn fn, void *ctx);
/* Claim `step` work items: returns the first index (may be past the end). */
size_t    eng_pool_next(eng_pool *p, size_t step);

/* ---- eng_guard.c: SIGBUS from the mapped model becomes an error ---- */
/* A guard covers the reads of one mapping [lo, hi) by the current thread:
 *     eng_guard g = { .lo = base, .hi = base + size };
 *     if (sigsetjmp(g.jb, 0)) { eng_guard_pop(&g); ...g.addr faulted... }
 *     eng_guard_push(&g);  ...reads...  eng_guard_pop(&g);
 * Guards nest (a stack per thread).  eng_pool_run hands the caller's range
 * to its workers and re-raises their faults in the caller (eng_guard.c). */
#include <setjmp.h>
typedef struct eng_guard {
    sigjmp_buf          jb;
    const uint8_t      *lo, *hi;
    const void *volatile addr;      /* the faulting address */
    struct eng_guard   *prev;
} eng_guard;
int        eng_guard_install(void);   /* once per process; 0 or -1 */
void       eng_guard_push(eng_guard *g);
void       eng_guard_pop(eng_guard *g);
eng_guard *eng_guard_current(void);   /* this thread's innermost, or NULL */
/* Jump to g (which must be armed on this thread) as if addr had faulted. */
void       eng_guard_raise(eng_guard *g, const void *addr)
    __attribute__((noreturn));

#endif
