/*
 * eng_io_impl.h — what the expert reader's files share: the staging slots,
 * the queue of chunk reads and the state of the two readers that drain it
 * (eng_io.c: slots, cache, the reader thread pool; eng_io_queue.c: what
 * both readers call; eng_io_uring.c: the io_uring reader; eng_io_session.c:
 * the session's modes, budget and setup; eng_io_bench.c: the disk
 * bandwidth pass).  eng_io.c's
 * top essay explains slots, chunks, pending counts and the busy time.
 */
#ifndef ENG_IO_IMPL_H
#define ENG_IO_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "engine/eng_impl.h"

#define ENG_IO_ALIGN 4096u              /* bytes: O_DIRECT block and buffer alignment */
#define ENG_IO_HUGE  (2u << 20)         /* bytes: the slots' arena alignment (a huge page) */

/* Defaults, and how they were chosen (eng_io.c's essay, "Queue depth" and
 * "Replacement"): requests of ENG_IO_CHUNK bytes, ENG_IO_QD of them in
 * flight on the io_uring reader, the cache's policy ENG_IO_POLICY.
 * $CFLOW_XIO_CHUNK, $CFLOW_XIO_QD and $CFLOW_XIO_POLICY override them. */
#define ENG_IO_CHUNK (1u << 20)         /* bytes per read request */
#define ENG_IO_QD    32u                /* io_uring requests in flight */
#define ENG_IO_CHUNK_MAX (1u << 26)     /* the most $CFLOW_XIO_CHUNK may ask */
#define ENG_IO_QD_MAX 4096u             /* the most $CFLOW_XIO_QD may ask: io_uring's largest ring */
#define ENG_IO_POLICY XIO_CRF           /* the cache's replacement ($CFLOW_XIO_POLICY) */
#define ENG_IO_DECAY  0.04              /* XIO_CRF: log2 of a use's weight lost per token */

enum { XIO_POOL = 0, XIO_URING = 1 };   /* eng_xio.reader */
enum { XIO_LRU = 0, XIO_LFU = 1, XIO_CRF = 2 };  /* eng_xio.policy (eng_io.c, "Replacement") */

/* One slot: 64 bytes on LP64, so that a miss's scan for the coldest slot
 * (victim, eng_io.c) reads one cache line a slot, in order, through
 * thousands of them; the reason of a failed read lives apart (slot_err). */
typedef struct xio_slot {
    uint8_t       *buf;        /* [slot_bytes] of eng_xio.arena, ENG_IO_ALIGN-aligned */
    const uint8_t *data;       /* the expert's first byte inside buf */
    uint64_t       off, len;   /* the expert's range in the file */
    uint64_t       used;       /* the clock at its last issue: LRU order, LFU's ties */
    double         busy_done;  /* the reader's busy seconds when it completed */
    int            held;       /* issues not yet released (a hit shares a slot) */
    int            key;        /* the cached expert (eng_xio_issue), -1 none */
    atomic_int     pending;    /* chunks queued or being read */
    int            failed;     /* a chunk failed: eng_xio.slot_err[slot] holds why */
} xio_slot;
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
    /* the cache: key_slot [n_keys] the slot holding each key's bytes (-1
     * none), a clock stamped on every issue, hits and misses so far; the
     * replacement policy (XIO_*); for XIO_LFU freq [n_keys] each key's
     * issues, halved every age_every issues; for XIO_CRF crf [n_keys] each
     * key's log2 weight of past issues (eng_io.c, "Replacement") and the
     * tokens so far (eng_xio_tick); both kept for keys not cached */
    int             *key_slot;
    unsigned         n_keys;
    uint64_t         clock, hits, misses;
    int              policy;
    uint32_t        *freq;
    uint64_t         age_every;
    double          *crf;
    uint64_t         tokens;
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

/* eng_io_queue.c, for both readers.  CFLOW_FAULT's expert-read fault
 * into x (parse: at eng_xio_new), and the fault it sets for the next chunk
 * read (FAULT_*), counted from the first. */
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
/* eng_io.c.  Release every queued request to the readers and wake them
 * (io_uring: submit): eng_xio_submit's work.  all: the parked requests go
 * too (a drain, a stop); else they go only once no sooner read is left.
 * Under mu. */
void eng_xio_submit_locked(eng_xio *x, int all);

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
