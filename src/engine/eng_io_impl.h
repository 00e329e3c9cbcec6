/*
 * eng_io_impl.h — what the staged expert reader's files share: the
 * staging slots, the cache that says which expert each holds, the queue
 * of chunk reads and the state of the two readers that drain it.
 *
 *   eng_io.c          the staged reader itself (eng_xio): slots, and an
 *                     issue as the cache's lookup or admission followed by
 *                     the reader's queueing; waits and releases
 *   eng_io_cache.c    the cache (xio_cache): key to slot, holds, the
 *                     replacement policy; no bytes, no locks
 *   eng_io_reader.c   the reader that drains the queue: started and
 *                     stopped with the file, the pool of reader threads
 *                     or io_uring; submit and drain
 *   eng_io_uring.c    the io_uring reader
 *   eng_io_queue.c    the request queue both readers share: chunks,
 *                     priority (parked reads), completion, the O_DIRECT
 *                     fallback and the fault hooks
 *   eng_io_session.c  the session's side: modes, the cache's budget, setup
 *   eng_io_bench.c    the disk bandwidth pass of `cflow bench diskbw`
 *
 * eng_io.c's top essay explains slots, chunks, pending counts and the busy
 * time; eng_io_cache.c's the replacement.
 */
#ifndef ENG_IO_IMPL_H
#define ENG_IO_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "engine/eng_impl.h"

#define ENG_IO_ALIGN 4096u              /* bytes: O_DIRECT block and buffer alignment */
#define ENG_IO_HUGE  (2u << 20)         /* bytes: the slots' arena alignment (a huge page) */

/* Defaults, and why (eng_io.c's essay, "Queue depth", and eng_io_cache.c's
 * on replacement): requests of ENG_IO_CHUNK bytes, ENG_IO_QD of them in
 * flight on the io_uring reader, the cache's policy ENG_IO_POLICY.
 * $CFLOW_XIO_CHUNK, $CFLOW_XIO_QD and $CFLOW_XIO_POLICY override them. */
#define ENG_IO_CHUNK (1u << 20)         /* bytes per read request */
#define ENG_IO_QD    32u                /* io_uring requests in flight */
#define ENG_IO_CHUNK_MAX (1u << 26)     /* the most $CFLOW_XIO_CHUNK may ask */
#define ENG_IO_QD_MAX 4096u             /* the most $CFLOW_XIO_QD may ask: io_uring's largest ring */
#define ENG_IO_POLICY XIO_CRF           /* the cache's replacement ($CFLOW_XIO_POLICY) */
#define ENG_IO_DECAY  0.04              /* XIO_CRF: log2 of a use's weight lost per token */

enum { XIO_POOL = 0, XIO_URING = 1 };   /* eng_xio.reader */
enum { XIO_LRU = 0, XIO_LFU = 1, XIO_CRF = 2 };  /* xio_cache.policy (eng_io_cache.c) */

/* A slot as the reader sees it: its buffer and what is being read into
 * it; the reason of a failed read lives apart (slot_err).  Which expert it
 * holds for the cache, and who holds it, is the cache's (xio_cslot). */
typedef struct xio_slot {
    uint8_t       *buf;        /* [slot_bytes] of eng_xio.arena, ENG_IO_ALIGN-aligned */
    const uint8_t *data;       /* the expert's first byte inside buf */
    uint64_t       off, len;   /* the expert's range in the file */
    double         busy_done;  /* the reader's busy seconds when it completed */
    atomic_int     pending;    /* chunks queued or being read */
    int            failed;     /* a chunk failed: eng_xio.slot_err[slot] holds why */
} xio_slot;

/* A slot as the cache sees it: 16 bytes, so that a miss's scan for the
 * coldest slot (xio_cache_victim) reads four slots a cache line, in
 * order, through thousands of them. */
typedef struct xio_cslot {
    int      key;              /* the cached expert, -1 none */
    int      held;             /* issues not yet released (a hit shares a slot) */
    uint64_t used;             /* the clock at its last issue: LRU order, ties */
} xio_cslot;

/* The cache (eng_io_cache.c, whose essay says how it replaces): the slot
 * of each key (key_slot [n_keys], -1 none), each slot's key, holds and
 * last use (slot [n_slots]), the clock stamped on every issue, hits and
 * misses so far; the replacement policy (XIO_*): for XIO_LFU freq
 * [n_keys] each key's issues, halved every age_every issues; for XIO_CRF
 * crf [n_keys] each key's log2 weight of past issues and the tokens so
 * far (eng_xio_tick); both kept for keys not cached. */
typedef struct xio_cache {
    unsigned   n_slots, n_keys;
    xio_cslot *slot;
    int       *key_slot;
    uint64_t   clock, hits, misses, tokens;
    int        policy;
    uint32_t  *freq;
    uint64_t   age_every;
    double    *crf;
} xio_cache;
#define ENG_IO_ERR 256u        /* bytes of a failed read's reason */

typedef struct xio_req {
    int      slot;
    uint64_t foff;             /* aligned file offset of the chunk */
    uint32_t flen;             /* aligned bytes to request */
    uint32_t need;             /* bytes that must arrive (the file may end) */
    uint8_t *dst;
    int      later;            /* eng_xio_issue_later's: parked while others go */
} xio_req;

typedef struct xio_uring xio_uring;     /* eng_io_uring.c */

struct eng_xio {
    char            *path;
    /* the descriptor and whether it is O_DIRECT: readers load them
     * without the lock, the fallback switches them under it */
    atomic_int       fd, direct;
    int              old_fd;   /* the O_DIRECT descriptor after a fallback */
    eng_log_fn       log;
    void            *log_ud;
    size_t           slot_bytes;
    void            *arena;    /* [n_slots][slot_bytes]: every slot's buf */
    uint32_t         chunk;    /* bytes per read request (a multiple of ENG_IO_ALIGN) */
    unsigned         n_slots;
    xio_slot        *slots;
    char           (*slot_err)[ENG_IO_ERR];   /* [n_slots] why a slot's read failed */
    xio_cache        cache;    /* which expert each slot holds; under mu */
    /* request queue: a ring of cap entries, issued but not yet taken by a
     * reader; issued counts those eng_xio_submit has released to them */
    xio_req         *q;
    unsigned         cap, head, count, issued;
    /* requests of eng_xio_issue_later, parked [cap]: they join the queue
     * when soon (the other requests queued or in flight) is 0 */
    xio_req         *park;
    unsigned         n_park, soon;
    pthread_mutex_t  mu;
    pthread_cond_t   work, done;
    /* the reader: XIO_POOL threads tid[n_readers], or XIO_URING (uring,
     * its reaping thread, qd requests in flight at most) */
    int              reader;
    unsigned         qd;
    pthread_t       *tid;
    unsigned         n_readers;
    xio_uring       *uring;
    int              quit;
    /* busy time: chunks queued or in flight (outstanding), the union of
     * the intervals with outstanding > 0 so far (busy_s), and the start of
     * the current one (busy_t0); under mu */
    unsigned         outstanding;
    double           busy_s, busy_t0;
    /* the queue depth: outstanding integrated over time (request-seconds
     * so far, depth_s) and when outstanding last changed (depth_t); under
     * mu (eng_xio_depth_mark before every change) */
    double           depth_s, depth_t;
    /* fault injection (CFLOW_FAULT) */
    int              fault;     /* 0 none, 1 eio, 2 short */
    unsigned long    fault_from;
    atomic_ulong     n_reads;
};

enum { FAULT_NONE = 0, FAULT_EIO = 1, FAULT_SHORT = 2 };

/* eng_io_cache.c.  The cache for n_slots slots and n_keys keys under the
 * policy named (NULL: $CFLOW_XIO_POLICY, else ENG_IO_POLICY): 0, ENG_EARG
 * naming an unknown policy, ENG_ENOMEM (xio_cache_free frees a part).
 * find counts an issue of key (-1: not cached) and gives the slot that
 * holds it, or -1; hit holds that slot once more.  victim: a slot for a
 * miss, neither held nor busy (busy(ctx, slot): a read is filling it), one
 * that never held a key first, else the coldest by the policy; -1 none.
 * all_held: every slot is held.  admit: slot now holds key (-1: none),
 * held once, whatever it held evicted.  release: one hold fewer; the holds
 * left.  forget: the slot's key is no longer cached (a failed read). */
int  xio_cache_init(xio_cache *c, unsigned n_slots, unsigned n_keys, const char *policy,
                    char *err, size_t errlen);
void xio_cache_free(xio_cache *c);
int  xio_cache_find(xio_cache *c, int key);
void xio_cache_hit(xio_cache *c, int slot);
int  xio_cache_victim(const xio_cache *c, int (*busy)(const void *ctx, int slot),
                      const void *ctx);
int  xio_cache_all_held(const xio_cache *c);
void xio_cache_admit(xio_cache *c, int slot, int key);
int  xio_cache_release(xio_cache *c, int slot);
void xio_cache_forget(xio_cache *c, int slot);

/* eng_io_reader.c.  Start the reader cfg asks for on x (the file open,
 * O_DIRECT where the file system takes it; io_uring or the pool): 0,
 * ENG_EARG for an unknown $CFLOW_XIO_READER, ENG_EIO, ENG_ENOMEM; err says
 * which.  stop: what was issued is read (parked reads too), then the
 * reader's threads are joined. */
int  eng_xio_reader_start(eng_xio *x, const eng_xio_cfg *cfg, char *err, size_t errlen);
void eng_xio_reader_stop(eng_xio *x);
/* Release every queued request to the readers and wake them (io_uring:
 * submit): eng_xio_submit's work.  all: the parked requests go too (a
 * drain, a stop); else they go only once no sooner read is left.  Under
 * mu. */
void eng_xio_submit_locked(eng_xio *x, int all);
/* eng_io_queue.c, what both readers share.  Queue the read of file bytes
 * [off, off+len) into slot k (which the cache just gave a miss), cut into
 * chunks: onto the queue, or parked while sooner reads are left (later).
 * The reader starts on it at the next submit.  Under mu. */
void eng_xio_enqueue(eng_xio *x, int k, uint64_t off, uint64_t len, int later);
/* Slot k, read for a later holder, is wanted now: its parked chunks (if
 * any) join the queue.  Under mu. */
void eng_xio_sooner(eng_xio *x, int k);
/* CFLOW_FAULT's expert-read fault into x (parse: at eng_xio_new), and
 * the fault it sets for the next chunk read (FAULT_*), counted from the
 * first. */
void eng_xio_parse_fault(eng_xio *x);
int  eng_xio_fault_next(eng_xio *x);
/* Before outstanding changes: its time at the old value into depth_s.
 * Under mu. */
void eng_xio_depth_mark(eng_xio *x);
/* O_DIRECT refused on fd (a read failed with EINVAL): reopen buffered once
 * and say so; 1 where the read should be retried on the (new) descriptor.
 * Takes mu unless locked says the caller holds it. */
int  eng_xio_refused(eng_xio *x, int fd, int locked);
/* A chunk has landed (why NULL) or failed (why says how): the slot's
 * pending count, error and busy stamp.  Under mu. */
void eng_xio_chunk_done(eng_xio *x, const xio_req *r, const char *why);
/* Take the next request the submitter has released to the readers; 0
 * when none.  Under mu. */
int  eng_xio_take(eng_xio *x, xio_req *r);
/* Move the parked requests to the queue's end (not yet released to the
 * readers: the caller releases them).  Under mu. */
void eng_xio_unpark(eng_xio *x);

/* eng_io_uring.c.  Start the reader on x (x->fd, x->qd set): 0, or an
 * errno with why filled where io_uring is unavailable or refused.  kick
 * (under mu) moves released requests into the submission ring up to qd in
 * flight and submits them with one call; stop (without mu) reads what was
 * released (eng_xio_free releases everything first, parked reads too) and
 * what is in flight, then joins the reaping thread. */
int  eng_xio_uring_start(eng_xio *x, char *why, size_t whylen);
void eng_xio_uring_kick(eng_xio *x);
void eng_xio_uring_stop(eng_xio *x);

#endif
