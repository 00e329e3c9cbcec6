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
/* The next of n units for thread tid of n_threads (the region's own
 * arguments): first its own contiguous slice in order, then the fronts of
 * the others'; n when all are taken. */
size_t    eng_pool_claim(eng_pool *p, int tid, int n_threads, size_t n);

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


/* ---- eng_io.c: the staged expert reader (O_DIRECT into staging slots) ---- */
#include <sys/types.h>
typedef struct eng_xio eng_xio;
/* Every expert read goes through this pointer (pread by default): tests
 * replace it to inject faults. */
extern ssize_t (*eng_io_pread)(int fd, void *buf, size_t n, off_t off);
/* Open path for direct reads (buffered, with a notice through log, where
 * O_DIRECT is refused); n_slots staging slots, each large enough for a
 * range of max_bytes; n_readers reader threads (0: 2). */
int  eng_xio_new(eng_xio **out, const char *path, uint64_t max_bytes,
                 unsigned n_slots, unsigned n_readers, eng_log_fn log, void *ud,
                 char *err, size_t errlen);
void eng_xio_free(eng_xio *x);
int  eng_xio_direct(const eng_xio *x);     /* 1 O_DIRECT, 0 buffered */
/* Queue the read of file bytes [off, off+len) into a free slot; the slot
 * number, or -1 when the range is too large or every slot is held. */
int  eng_xio_issue(eng_xio *x, uint64_t off, uint64_t len);
/* Wait for slot's read; *data gets the range's first byte, *busy_done
 * the pool's busy seconds (the union of the times any read was queued or
 * in flight, eng_io.c) when its last byte arrived.  ENG_EIO with err on a
 * failed or short read.  The slot stays held until eng_xio_release. */
int  eng_xio_wait(eng_xio *x, int slot, const uint8_t **data, double *busy_done,
                  char *err, size_t errlen);
/* The compute side is done with slot; it is reused once no read is in
 * flight into it. */
void eng_xio_release(eng_xio *x, int slot);

/* ---- eng_prefetch.c: the PREFETCHT0 thread ---- */
typedef struct eng_pf eng_pf;
eng_pf *eng_pf_new(void);
void    eng_pf_free(eng_pf *pf);
/* Compute entered the next layer (commands two layers old are skipped). */
void    eng_pf_layer(eng_pf *pf);
/* Post a LinearRange (one range of an ExpertTiles list); never blocks. */
void    eng_pf_range(eng_pf *pf, const void *p, size_t n);
void    eng_pf_counts(const eng_pf *pf, uint64_t *lines, uint64_t *dropped);

#endif
