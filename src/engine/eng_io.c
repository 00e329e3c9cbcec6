/*
 * eng_io.c — the staged expert reader: direct I/O of routed experts into
 * aligned staging slots that keep what they read (the RAM expert cache),
 * filled through io_uring (eng_io_uring.c) or by a pool of reader threads
 * (eng_io_reader.c); the staged expert reads of the Pipeline-Native
 * Transformers report (3.9.4, 5.14).
 *
 * With --expert-io mmap the expert tiles are read where the mapping has
 * them, and a token's expert bytes come through the page cache.  The other
 * two modes read each routed expert's bytes (its fused gate/up stream then
 * its down stream: one contiguous file range, fmt_model_expert) with
 * O_DIRECT, so every read really goes to storage, into a staging slot:
 *
 *   slot      an aligned buffer of slot_bytes (a multiple of ENG_IO_ALIGN)
 *             holding one expert's range rounded out to ENG_IO_ALIGN-byte
 *             file blocks (O_DIRECT wants offset, length and buffer
 *             aligned); data points at the expert's first byte inside it.
 *   chunk     a read of at most chunk bytes (ENG_IO_CHUNK) of one slot; an
 *             expert is cut into chunks so several reads fill one slot at
 *             once.
 *   pending   per slot, the chunks queued or in flight.  A slot is handed
 *             out again only when it is released (the compute side is done
 *             with it) AND pending is 0 (no reader still writes into it) —
 *             so a token abandoned after an error never lets a late read
 *             land in a buffer that already holds another expert.
 *
 * An issue (eng_xio_issue) is two steps, each another file's: the cache
 * (eng_io_cache.c) finds the expert's slot — a hit, whose bytes are there
 * or on their way — or gives the miss a slot by its replacement policy,
 * and the reader's queue (eng_io_queue.c) takes that slot's read.  The session
 * issues an expert's read at its routing layer and waits for it
 * (eng_xio_wait) at the layer that injects the expert's output: right
 * away in "sync" mode, expert_delay layers later in "staged" mode, so the
 * read overlaps the compute of the layers between.  Both modes read the
 * same bytes and the tiles are the same bytes, so the tokens are the same
 * as with mmap.
 *
 * Where the file system refuses O_DIRECT (tmpfs, some FUSE and network
 * file systems: open or the first read fails with EINVAL) the reader
 * reopens the file with ordinary buffered reads and says so once through
 * the log callback.
 *
 * Time.  The reads of one token overlap (top-k experts at once, and in
 * staged mode the reads of up to expert_delay + 1 routings), so their
 * latencies do not add up to the time the storage was busy.  The reader
 * keeps the union instead: busy, the seconds during which at least one
 * chunk was queued or being read, and stamps each slot with the value it
 * had when the slot's last chunk arrived.  The session charges each
 * routing the growth of that stamp since the previous routing finished,
 * so the per-layer times sum to the union: IO_eff of the report's model.
 * Beside it the reader integrates the chunks outstanding over time
 * (depth_s, request-seconds): over the busy time, the mean queue depth
 * the figures show (eng_stats.xio_depth_s).
 *
 * Queue depth.  ENG_IO_QD = 32 requests in flight of ENG_IO_CHUNK = 1 MiB,
 * because an NVMe drive reaches its sequential read rate with a few MiB
 * in flight and the block layer splits a 1 MiB read into the device's
 * max_sectors_kb pieces and queues those itself, so smaller requests only
 * cost more completions; a top-8 routing of 5 MiB experts is 40 requests,
 * one submission.  The `cflow bench diskbw` sweep behind them (depths 1-64,
 * requests of 128 KiB to 1 MiB, the pool) is in docs/perf-log/2026-12-03.md.
 * $CFLOW_XIO_QD and $CFLOW_XIO_CHUNK (bytes, K or M) set them for a run.
 *
 * Faults.  Every read's result passes eng_io_result (a settable hook,
 * for tests) and the environment variable CFLOW_FAULT=expert-read:eio or
 * expert-read:short (optionally "@N": only from the N-th chunk read on)
 * makes the reader fail with EIO or see the file end in the middle of a
 * read, on either reader (io_uring: at completion).  Either way the
 * waiting token gets ENG_EIO and one line naming the file, the offset and
 * the cause; it never waits for a read that will not come.
 */
#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "engine/eng_io_impl.h"
#include "prof/prof.h"

int eng_xio_new(eng_xio **out, const char *path, uint64_t max_bytes,
                unsigned n_slots, unsigned n_keys, const eng_xio_cfg *cfg, eng_log_fn log,
                void *ud, char *err, size_t errlen)
{
    eng_xio *x = calloc(1, sizeof *x);
    int rc = ENG_ENOMEM;
    *out = NULL;
    if (!x)
        goto fail;
    pthread_mutex_init(&x->mu, NULL);
    pthread_cond_init(&x->work, NULL);
    pthread_cond_init(&x->done, NULL);
    x->fd = -1;
    x->old_fd = -1;
    x->log = log;
    x->log_ud = ud;
    eng_xio_parse_fault(x);
    x->path = strdup(path);
    /* requests: whole blocks, at least one */
    unsigned long chunk = cfg->chunk, qd = cfg->qd;
    rc = ENG_EARG;
    if (!chunk && eng_env_count("CFLOW_XIO_CHUNK", ENG_IO_CHUNK, ENG_IO_ALIGN, ENG_IO_CHUNK_MAX,
                                1, &chunk, err, errlen))
        goto fail;
    if (!qd && eng_env_count("CFLOW_XIO_QD", ENG_IO_QD, 1, ENG_IO_QD_MAX, 0, &qd, err, errlen))
        goto fail;
    rc = ENG_ENOMEM;
    x->chunk = chunk < ENG_IO_ALIGN ? ENG_IO_ALIGN : (uint32_t)(chunk / ENG_IO_ALIGN * ENG_IO_ALIGN);
    x->qd = (unsigned)qd;
    /* an expert's range rounded out to whole blocks on both sides */
    x->slot_bytes = (size_t)((max_bytes + 2 * ENG_IO_ALIGN - 1) / ENG_IO_ALIGN * ENG_IO_ALIGN);
    x->n_slots = n_slots ? n_slots : 1;
    x->slots = calloc(x->n_slots, sizeof *x->slots);
    x->slot_err = calloc(x->n_slots, sizeof *x->slot_err);
    unsigned per_slot = (unsigned)((x->slot_bytes + x->chunk - 1) / x->chunk);
    x->cap = x->n_slots * per_slot;
    x->q = calloc(x->cap, sizeof *x->q);
    x->park = calloc(x->cap, sizeof *x->park);
    if (!x->path || !x->slots || !x->slot_err || !x->q || !x->park)
        goto fail;
    if ((rc = xio_cache_init(&x->cache, x->n_slots, n_keys, cfg->policy, err, errlen)))
        goto fail;
    rc = ENG_ENOMEM;
    /* One arena for all the slots, on 2 MiB boundaries and advised onto
     * huge pages: an expert's mat-vecs walk its slot once a token, and on
     * 4 KiB pages that walk misses the TLB every 4 KiB (the reason the
     * weights are read into huge pages, eng_session.c); a fresh cache's
     * first reads also fault it in 2 MiB at a time.  Slot i is bytes [i,
     * i + 1) * slot_bytes of it. */
    void *arena = NULL;
    if (posix_memalign(&arena, ENG_IO_HUGE, x->slot_bytes * x->n_slots))
        goto fail;
    x->arena = arena;
#ifdef MADV_HUGEPAGE
    (void)madvise(arena, x->slot_bytes * x->n_slots, MADV_HUGEPAGE);   /* advice only */
#endif
    for (unsigned i = 0; i < x->n_slots; i++) {
        x->slots[i].buf = (uint8_t *)arena + (size_t)i * x->slot_bytes;
        atomic_init(&x->slots[i].pending, 0);
    }
    if ((rc = eng_xio_reader_start(x, cfg, err, errlen)))
        goto fail;
    *out = x;
    return 0;
fail:
    if (rc == ENG_ENOMEM)
        snprintf(err, errlen, "%s: out of memory for expert staging", path);
    eng_xio_free(x);
    return rc;
}

void eng_xio_free(eng_xio *x)
{
    if (!x)
        return;
    eng_xio_reader_stop(x);    /* no read in flight after it */
    pthread_mutex_destroy(&x->mu);
    pthread_cond_destroy(&x->work);
    pthread_cond_destroy(&x->done);
    xio_cache_free(&x->cache);
    free(x->arena);
    free(x->slots);
    free(x->slot_err);
    free(x->q);
    free(x->park);
    free(x->path);
    free(x);
}

int eng_xio_direct(const eng_xio *x) { return atomic_load(&((eng_xio *)x)->direct); }

const char *eng_xio_reader(const eng_xio *x, unsigned *qd, uint32_t *chunk)
{
    if (qd)
        *qd = x->qd;
    if (chunk)
        *chunk = x->chunk;
    return x->reader == XIO_URING ? "io_uring" : "pool";
}

/* A read is filling slot k (the cache's victim scan skips it). */
static int slot_busy(const void *ctx, int k)
{
    const eng_xio *x = ctx;
    return atomic_load(&((eng_xio *)x)->slots[k].pending) != 0;
}

/* An issue: the cache finds the expert's slot (a hit: the bytes are there,
 * or on their way for another holder), else gives a miss a slot, whose
 * read the reader queues. */
static int issue(eng_xio *x, int key, uint64_t off, uint64_t len, int *hit, int later)
{
    uint64_t a = off / ENG_IO_ALIGN * ENG_IO_ALIGN;
    uint64_t end = (off + len + ENG_IO_ALIGN - 1) / ENG_IO_ALIGN * ENG_IO_ALIGN;
    int k;
    *hit = 0;
    if (end - a > x->slot_bytes || key >= (int)x->cache.n_keys)
        return -1;
    pthread_mutex_lock(&x->mu);
    k = xio_cache_find(&x->cache, key);
    if (k >= 0 && !x->slots[k].failed && x->slots[k].off == off && x->slots[k].len == len) {
        xio_cache_hit(&x->cache, k);
        *hit = 1;
        if (!later)
            eng_xio_sooner(x, k);       /* wanted sooner now (it may be parked) */
        pthread_mutex_unlock(&x->mu);
        return k;
    }
    while ((k = xio_cache_victim(&x->cache, slot_busy, x)) < 0) {
        /* every free slot still has a read in flight from an abandoned
         * token: wait for one to drain (reads always finish) */
        if (xio_cache_all_held(&x->cache)) {
            pthread_mutex_unlock(&x->mu);
            return -1;                  /* the caller holds them all */
        }
        eng_xio_submit_locked(x, 0);    /* (so every read it waits for can start) */
        pthread_cond_wait(&x->done, &x->mu);
    }
    xio_cache_admit(&x->cache, k, key);
    /* the reader starts on it at eng_xio_submit: a routing's misses go
     * out together */
    eng_xio_enqueue(x, k, off, len, later);
    pthread_mutex_unlock(&x->mu);
    return k;
}

int eng_xio_issue(eng_xio *x, int key, uint64_t off, uint64_t len, int *hit)
{
    return issue(x, key, off, len, hit, 0);
}

int eng_xio_issue_later(eng_xio *x, int key, uint64_t off, uint64_t len, int *hit)
{
    return issue(x, key, off, len, hit, 1);
}

int eng_xio_wait(eng_xio *x, int slot, const uint8_t **data, double *busy_done,
                 char *err, size_t errlen)
{
    xio_slot *sl = &x->slots[slot];
    int rc = 0;
    pthread_mutex_lock(&x->mu);
    eng_xio_submit_locked(x, 0);    /* (a caller that did not submit) */
    while (atomic_load(&sl->pending) > 0)
        pthread_cond_wait(&x->done, &x->mu);
    if (sl->failed) {
        snprintf(err, errlen, "%s", x->slot_err[slot]);
        rc = ENG_EIO;
    }
    *data = sl->data;
    *busy_done = sl->busy_done;
    pthread_mutex_unlock(&x->mu);
    return rc;
}

int eng_xio_landed(eng_xio *x, int slot)
{
    return atomic_load(&x->slots[slot].pending) == 0;
}

void eng_xio_hits(eng_xio *x, uint64_t *hits, uint64_t *misses, double *depth_s)
{
    pthread_mutex_lock(&x->mu);
    *hits = x->cache.hits;
    *misses = x->cache.misses;
    eng_xio_depth_mark(x);                   /* the reads still out count up to now */
    *depth_s = x->depth_s;
    pthread_mutex_unlock(&x->mu);
}

void eng_xio_tick(eng_xio *x, unsigned n)
{
    pthread_mutex_lock(&x->mu);
    x->cache.tokens += n;
    pthread_mutex_unlock(&x->mu);
}

void eng_xio_release(eng_xio *x, int slot)
{
    pthread_mutex_lock(&x->mu);
    if (!xio_cache_release(&x->cache, slot) && x->slots[slot].failed)
        xio_cache_forget(&x->cache, slot);   /* never hand out a failed read again */
    pthread_cond_broadcast(&x->done);
    pthread_mutex_unlock(&x->mu);
}
