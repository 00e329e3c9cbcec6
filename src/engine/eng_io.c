/*
 * eng_io.c — the staged expert reader: direct I/O of routed experts into
 * aligned staging slots, filled through io_uring (eng_io_uring.c) or by a
 * pool of reader threads (report 3.9.4, 5.14).
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
 * The session issues an expert's read at its routing layer
 * (eng_xio_issue) and waits for it (eng_xio_wait) at the layer that
 * injects the expert's output: right away in "sync" mode, expert_delay
 * layers later in "staged" mode, so the read overlaps the compute of the
 * layers between.  Both modes read the same bytes and the tiles are the
 * same bytes, so the tokens are the same as with mmap.
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
 * Readers.  eng_xio_issue only queues a miss's chunks; eng_xio_submit,
 * after a routing's issues, releases them together to the reader: one
 * io_uring submission of all of them, at most qd in flight, completions
 * reaped by one thread (eng_io_uring.c), or the pool's threads, which
 * take one chunk each.  Both settle a chunk the same way
 * (eng_xio_chunk_done), so pending counts, the reuse rule and the busy
 * time below do not depend on the reader.  $CFLOW_XIO_READER=uring|pool
 * chooses; io_uring is the default where it is built and the kernel
 * allows it, else the pool, with one line through the log saying why.
 *
 * Queue depth.  ENG_IO_QD = 32 requests in flight of ENG_IO_CHUNK = 1 MiB:
 * an NVMe drive reaches its sequential read rate with a few MiB in flight
 * (32 x 1 MiB is well past that), and the block layer splits a 1 MiB read
 * into the device's max_sectors_kb pieces and queues those in parallel
 * itself, so smaller requests only cost more completions.  A top-8
 * routing of 5 MiB experts (Qwen3-30B-A3B at Q8_0) is 40 requests: one
 * submission keeps the device full.  One sweep of `cflow bench diskbw`
 * (1 GiB file on a virtio block device, 3 passes each, median GB/s) agreed:
 * io_uring at depth 1, 4, 32, 64: 0.31, 0.93, 1.35, 1.31; at 32 with
 * 128 or 256 KiB requests 0.99, 0.95; the pool's 2 threads 0.94.
 * $CFLOW_XIO_QD and $CFLOW_XIO_CHUNK (bytes, K or M) set them for a run.
 *
 * Priority.  Look-ahead's guesses for layers past the next
 * (eng_xio_issue_later) are wanted later than every other read: a routed
 * miss is needed now, a guess for the next layer within one layer's
 * compute.  Their requests wait in a parked list, off the queue, while
 * soon (the other requests queued or in flight) is above 0; the chunk
 * that brings soon to 0 moves them to the queue's end (eng_io_queue.c),
 * as does eng_xio_submit when soon is 0 already, any other issue that
 * hits their slot (it is wanted now), and a drain or a stop, which send
 * everything (eng_xio_submit_locked's all).  So a far guess never shares
 * the device with a read needed sooner; soon always falls to 0 (reads
 * always finish), so a parked read is never stuck.
 *
 * Replacement.  With a cache budget (--expert-cache) the slots keep what
 * they read, keyed by (layer, expert), and a miss takes a free slot or
 * else the coldest one that no routing holds and no read is filling.
 * $CFLOW_XIO_POLICY chooses what coldest means:
 *
 *   crf   (ENG_IO_POLICY, the default) the least weight of past issues,
 *         each weighing 2^(-ENG_IO_DECAY x the tokens since it came): a
 *         use 25 tokens ago counts half (the "combined recency and
 *         frequency" of LRFU, Lee et al. 2001), so experts issued often
 *         lately stay and popularity that has moved on fades by tokens;
 *         between equal weights, used most recently;
 *   lru   used longest ago;
 *   lfu   issued least often lately: a count per expert, halved for all
 *         every 8 issues per expert; between equal counts, used most
 *         recently.
 *
 * crf keeps per expert, cached or not, crf[key] = log2(weight) + DECAY x
 * (the token of its last issue): every weight decays at one rate, so
 * comparing these compares the weights at any one moment, and an issue
 * is one update, weight' = weight x 2^(-DECAY x tokens since) + 1.  Its
 * clock is the tokens the session has sent through the layers
 * (eng_xio_tick), not the issues, so a model's size does not change how
 * fast it forgets.  The tie-break is for tokens that cycle through more
 * experts than there are slots: the experts not yet issued this token
 * have equal weights (equal histories), and evicting the least recently
 * used of them throws out the expert needed soonest and misses every
 * time, evicting the most recent keeps a fixed subset resident.  Look-
 * ahead's guesses count as issues: a right guess counts twice, guessed
 * and routed.  The weights kept for experts not cached make crf (as lfu
 * before it) the issue's "frequency with pinned hot experts" without a
 * fixed pin list: a hot expert evicted comes back with its history.  The
 * cost is one exp2 and one log2 an issue and 8 bytes an expert; the
 * victim scan over the slots was there already.
 *
 * Measured (AMD EPYC Zen 5, 2 cores; olmoe-1b-7b, 1024 experts of 3.38
 * MiB, bank 3459 MiB), the hit rate cflow run prints over 127 decode
 * tokens of text, per policy:
 *
 *   cflow synth --routing R olmoe-1b-7b m.cflow     (uniform: the default)
 *   CFLOW_XIO_POLICY=P cflow run -m m.cflow -p "Once upon a time there was"
 *       -n 128 --temp 0.8 --seed 3 --expert-io sync --expert-ahead off
 *       --expert-cache B --no-log      (B 865M, 1730M, 2594M: 25, 50, 75%)
 *
 *   routing    cache        LRU    LFU    CRF
 *   zipf:1     25%         51.1   67.5   67.1
 *              50%         81.1   85.8   85.4
 *              75%         94.0   94.8   94.5
 *              400M (12%)   0.0   46.0   45.4
 *   zipf:0.5   25%         35.4   48.2   47.2
 *              50%         64.5   72.1   71.3
 *              75%         86.6   89.1   88.9
 *   zipf:0.1   25%         28.4   36.4   35.1
 *              50%         54.4   62.8   62.1
 *              75%         80.9   85.1   84.3
 *   uniform    25-75%     100.0  100.0  100.0
 *   uniform    400M (12%)   0.0   89.8   88.0
 *
 * and under cflow bench on qwen3-30b-a3b at Q8_0 (zipf:1, 6144 experts of
 * 4.78 MiB, bank 29.4 GiB; `cflow bench -t 2 -p 0 -n 64 -r 5
 * --warmup-reps 3`, look-ahead on, so the hit rates count guesses too),
 * the hit rate and the MB read from storage a token:
 *
 *   cache               LRU           LFU           CRF
 *   7.4 GiB (25%)    96.6%  320    94.1%  567    95.4%  429
 *   19.1 GiB (auto)  99.1%   80    98.8%  103    99.1%   82
 *
 * (The zipf files route token by token, fmt_synth_route.c; a uniform
 * file's tokens route to the same 8 experts per layer, so any cache above
 * those 128 holds them all, and one below is the cycle above.)  The two
 * workloads pull apart: olmoe's text wants frequency (LRU 8 to 16 points
 * under LFU at a quarter of the bank), the bench's random tokens want
 * recency (LFU reads 1.3-1.8x LRU's bytes): consecutive tokens share
 * experts there, and a count that remembers 128 tokens keeps experts the
 * stream has left.  CRF stays within 0.2-1.8 points of LFU on the text;
 * on the bench it reads 1.03x LRU's bytes at the auto budget and 1.34x
 * at a quarter of the bank, where LFU reads 1.26x and 1.32x CRF's.  A
 * decay of 0.08 a token came closer to LRU at a quarter of the bench's
 * bank and further from LFU on the text (a simulation over both recorded
 * traces: docs/PERFORMANCE.md, 2026-12-06 09:50 UTC).
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

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/eng_io_impl.h"
#include "prof/prof.h"

/* One chunk on the pool: read until need bytes have arrived.  Returns 0,
 * or -1 with why set.  Called without the lock. */
static int read_chunk(eng_xio *x, const xio_req *r, char *why, size_t whylen)
{
    uint32_t got = 0;
    int inject = eng_xio_fault_next(x);
    while (got < r->flen) {
        ssize_t n;
        int fd = atomic_load(&x->fd);
        if (inject == FAULT_EIO) {
            errno = EIO;
            n = -1;
        } else if (inject == FAULT_SHORT) {
            /* the file "ends" halfway through the chunk */
            n = got == 0 ? (ssize_t)(r->need / 2) : 0;
        } else {
            n = pread(fd, r->dst + got, r->flen - got, (off_t)(r->foff + got));
            if (eng_io_result) {
                n = eng_io_result(fd, r->dst + got, r->flen - got, (off_t)(r->foff + got),
                                  n < 0 ? -errno : n);
                if (n < 0)
                    errno = (int)-n, n = -1;
            }
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EINVAL) {
            /* O_DIRECT refused at read time: fall back to buffered reads */
            if (eng_xio_refused(x, fd, 0))
                continue;
            errno = EINVAL;             /* open() may have changed it */
        }
        if (n < 0) {
            snprintf(why, whylen, "%s", strerror(errno));
            return -1;
        }
        if (n == 0)
            break;                      /* end of file */
        got += (uint32_t)n;
    }
    if (got < r->need) {
        snprintf(why, whylen, "short read: %u of %u bytes (the file ends early)",
                 got, r->need);
        return -1;
    }
    return 0;
}

static void *reader(void *arg)
{
    eng_xio *x = arg;
    pthread_mutex_lock(&x->mu);
    for (;;) {
        xio_req r;
        while (!x->quit && x->issued == 0)
            pthread_cond_wait(&x->work, &x->mu);
        if (!eng_xio_take(x, &r))
            break;                      /* quit, and nothing left to read */
        pthread_mutex_unlock(&x->mu);

        char why[200] = "";
        int bad = read_chunk(x, &r, why, sizeof why);

        pthread_mutex_lock(&x->mu);
        eng_xio_chunk_done(x, &r, bad ? why : NULL);
    }
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

void eng_xio_submit_locked(eng_xio *x, int all)
{
    if ((all || x->soon == 0) && x->n_park)
        eng_xio_unpark(x);
    if (x->issued == x->count)
        return;
    x->issued = x->count;
    if (x->reader == XIO_URING)
        eng_xio_uring_kick(x);
    else
        pthread_cond_broadcast(&x->work);
}

void eng_xio_drain(eng_xio *x)
{
    pthread_mutex_lock(&x->mu);
    eng_xio_submit_locked(x, 1);
    while (x->outstanding > 0)
        pthread_cond_wait(&x->done, &x->mu);
    pthread_mutex_unlock(&x->mu);
}

void eng_xio_submit(eng_xio *x)
{
    pthread_mutex_lock(&x->mu);
    eng_xio_submit_locked(x, 0);
    pthread_mutex_unlock(&x->mu);
}

/* "uring", "pool" or NULL (the default: io_uring where built and
 * allowed): XIO_*, or -1. */
static int reader_from_name(const char *v)
{
    if (!v || !*v || !strcmp(v, "uring") || !strcmp(v, "io_uring"))
        return XIO_URING;
    return strcmp(v, "pool") ? -1 : XIO_POOL;
}

/* Start the reader cfg asks for: io_uring where asked (the default) and
 * available, else the pool, with one line through the log saying why
 * io_uring is not used where it was asked for or was the default. */
static int start_reader(eng_xio *x, const eng_xio_cfg *cfg, char *err, size_t errlen)
{
    const char *name = cfg->reader ? cfg->reader : getenv("CFLOW_XIO_READER");
    int want = reader_from_name(name);
    int asked = name && *name;
    if (want < 0) {
        snprintf(err, errlen, "CFLOW_XIO_READER='%s': use uring or pool", name);
        return ENG_EARG;
    }
    x->reader = XIO_POOL;
    if (want == XIO_URING) {
        char why[256] = "";
        int urc = eng_xio_uring_start(x, why, sizeof why);
        if (!urc) {
            x->reader = XIO_URING;
            return 0;
        }
        if (x->log) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s: expert reads use the reader pool: %s", x->path, why);
            /* a build without liburing is a choice: a note unless asked */
            x->log(x->log_ud, asked || urc != EOPNOTSUPP ? 1 : 0, msg);
        }
    }
    x->n_readers = cfg->qd ? cfg->qd : cfg->n_readers ? cfg->n_readers : 2;
    x->qd = x->n_readers;
    x->tid = calloc(x->n_readers, sizeof *x->tid);
    if (!x->tid) {
        x->n_readers = 0;
        return ENG_ENOMEM;
    }
    for (unsigned i = 0; i < x->n_readers; i++)
        if (pthread_create(&x->tid[i], NULL, reader, x)) {
            x->n_readers = i;
            return ENG_ENOMEM;
        }
    return 0;
}

/* Open path, O_DIRECT where the file system takes it.  0 or ENG_EIO. */
static int open_file(eng_xio *x, char *err, size_t errlen)
{
    x->fd = open(x->path, O_RDONLY | O_DIRECT | O_CLOEXEC);
    x->direct = x->fd >= 0;
    if (x->fd < 0 && errno == EINVAL) {
        x->fd = open(x->path, O_RDONLY | O_CLOEXEC);
        if (x->fd >= 0 && x->log) {
            char msg[512];
            snprintf(msg, sizeof msg,
                     "%s: the file system refuses O_DIRECT; expert reads fall back "
                     "to buffered I/O", x->path);
            x->log(x->log_ud, 1, msg);
        }
    }
    if (x->fd < 0) {
        snprintf(err, errlen, "%s: cannot open for expert reads: %s", x->path, strerror(errno));
        return ENG_EIO;
    }
    return 0;
}

/* The replacement policy: cfg->policy, else $CFLOW_XIO_POLICY, else
 * ENG_IO_POLICY; for XIO_LFU the counts, for XIO_CRF the weights [n_keys].
 * ENG_EARG naming the value for an unknown one, ENG_ENOMEM. */
static int pick_policy(eng_xio *x, const eng_xio_cfg *cfg, char *err, size_t errlen)
{
    const char *name = cfg->policy ? cfg->policy : getenv("CFLOW_XIO_POLICY");
    if (!name || !*name)
        x->policy = ENG_IO_POLICY;
    else if (!strcmp(name, "lru"))
        x->policy = XIO_LRU;
    else if (!strcmp(name, "lfu"))
        x->policy = XIO_LFU;
    else if (!strcmp(name, "crf"))
        x->policy = XIO_CRF;
    else {
        snprintf(err, errlen, "CFLOW_XIO_POLICY='%s': use crf, lru or lfu", name);
        return ENG_EARG;
    }
    size_t n = x->n_keys ? x->n_keys : 1;
    /* halve after 8 issues per key (64 tokens of OLMoE-1B-7B, 128 of
     * Qwen3-30B-A3B): long enough that a hot expert outscores a cold one
     * many times over, short enough that a change of topic (and of
     * popular experts) shows within a few hundred tokens */
    x->age_every = 8ull * n;
    if (x->policy == XIO_LFU && !(x->freq = calloc(n, sizeof *x->freq)))
        return ENG_ENOMEM;
    if (x->policy == XIO_CRF) {
        if (!(x->crf = malloc(n * sizeof *x->crf)))
            return ENG_ENOMEM;
        for (size_t i = 0; i < n; i++)
            x->crf[i] = -INFINITY;       /* never issued: weight 0 */
    }
    return 0;
}

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
    x->n_keys = n_keys;
    x->key_slot = malloc((n_keys ? n_keys : 1) * sizeof *x->key_slot);
    if (!x->path || !x->slots || !x->slot_err || !x->q || !x->park || !x->key_slot)
        goto fail;
    if ((rc = pick_policy(x, cfg, err, errlen)))
        goto fail;
    rc = ENG_ENOMEM;
    for (unsigned i = 0; i < n_keys; i++)
        x->key_slot[i] = -1;
    /* One arena for all the slots, on 2 MiB boundaries and advised onto
     * huge pages: an expert's mat-vecs walk its slot once a token (5 MiB
     * for Qwen3-30B-A3B at Q8_0), and on 4 KiB pages that walk misses the
     * TLB every 4 KiB (the dense weights gained 4-15% from huge pages,
     * eng_session.c); a fresh cache's first reads also fault it in 2 MiB
     * at a time.  Slot i is bytes [i, i + 1) * slot_bytes of it. */
    void *arena = NULL;
    if (posix_memalign(&arena, ENG_IO_HUGE, x->slot_bytes * x->n_slots))
        goto fail;
    x->arena = arena;
#ifdef MADV_HUGEPAGE
    (void)madvise(arena, x->slot_bytes * x->n_slots, MADV_HUGEPAGE);   /* advice only */
#endif
    for (unsigned i = 0; i < x->n_slots; i++) {
        x->slots[i].buf = (uint8_t *)arena + (size_t)i * x->slot_bytes;
        x->slots[i].key = -1;
        atomic_init(&x->slots[i].pending, 0);
    }
    if ((rc = open_file(x, err, errlen)) || (rc = start_reader(x, cfg, err, errlen)))
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
    if (x->uring || x->tid) {
        pthread_mutex_lock(&x->mu);
        eng_xio_submit_locked(x, 1);   /* what was issued is read, then they quit */
        x->quit = 1;
        pthread_cond_broadcast(&x->work);
        pthread_mutex_unlock(&x->mu);
    }
    if (x->uring)
        eng_xio_uring_stop(x);  /* drains and joins: no read in flight */
    if (x->tid) {
        for (unsigned i = 0; i < x->n_readers; i++)
            pthread_join(x->tid[i], NULL);
        free(x->tid);
    }
    pthread_mutex_destroy(&x->mu);
    pthread_cond_destroy(&x->work);
    pthread_cond_destroy(&x->done);
    if (x->fd >= 0)
        close(x->fd);
    if (x->old_fd >= 0)
        close(x->old_fd);
    free(x->arena);
    free(x->slots);
    free(x->slot_err);
    free(x->q);
    free(x->park);
    free(x->key_slot);
    free(x->freq);
    free(x->crf);
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

/* Does slot a make a better victim than slot b?  XIO_LRU: used longer
 * ago.  XIO_LFU and XIO_CRF: its key issued less often lately (count or
 * decayed weight), and between keys issued as often, the one used more
 * recently: under a cycle of more experts than slots that keeps a fixed
 * subset resident, where evicting the older misses every time (the
 * essay, "Replacement"). */
static double weight(const eng_xio *x, int key)
{
    return x->policy == XIO_CRF ? x->crf[key] : (double)x->freq[key];
}

static int colder(const eng_xio *x, const xio_slot *a, const xio_slot *b)
{
    if (x->policy != XIO_LRU && a->key >= 0 && b->key >= 0) {
        double wa = weight(x, a->key), wb = weight(x, b->key);
        if (wa != wb)
            return wa < wb;
        return a->used > b->used;
    }
    return a->used < b->used;
}

/* A slot for a miss: a free one that never held an expert, else the
 * coldest (colder) among those neither held nor being filled; -1 none.
 * Under mu. */
static int victim(const eng_xio *x)
{
    int k = -1;
    for (unsigned i = 0; i < x->n_slots; i++) {
        const xio_slot *sl = &x->slots[i];
        if (sl->held || atomic_load(&sl->pending) != 0)
            continue;
        if (sl->key < 0)
            return (int)i;
        if (k < 0 || colder(x, sl, &x->slots[k]))
            k = (int)i;
    }
    return k;
}

/* Count an issue of key: for XIO_CRF its weight, decayed to now, plus
 * one (eng_io.c, "Replacement"); for XIO_LFU its count, and every
 * age_every issues all counts halve, so popularity that has moved on
 * fades.  Under mu. */
static void count_issue(eng_xio *x, int key)
{
    if (x->policy == XIO_CRF && key >= 0) {
        /* crf = log2(weight) + DECAY x the token of its last issue, so
         * that comparing crf compares the weights at any one moment */
        double now = ENG_IO_DECAY * (double)x->tokens;
        x->crf[key] = log2(exp2(x->crf[key] - now) + 1.0) + now;
        return;
    }
    if (x->policy != XIO_LFU)
        return;
    if (x->clock % x->age_every == 0)
        for (unsigned i = 0; i < x->n_keys; i++)
            x->freq[i] >>= 1;
    if (key >= 0 && x->freq[key] < UINT32_MAX)
        x->freq[key]++;
}

static int issue(eng_xio *x, int key, uint64_t off, uint64_t len, int *hit, int later)
{
    uint64_t a = off / ENG_IO_ALIGN * ENG_IO_ALIGN;
    uint64_t end = (off + len + ENG_IO_ALIGN - 1) / ENG_IO_ALIGN * ENG_IO_ALIGN;
    int k = -1;
    *hit = 0;
    if (end - a > x->slot_bytes || key >= (int)x->n_keys)
        return -1;
    pthread_mutex_lock(&x->mu);
    x->clock++;
    count_issue(x, key);
    if (key >= 0 && (k = x->key_slot[key]) >= 0 && !x->slots[k].failed &&
        x->slots[k].off == off && x->slots[k].len == len) {
        /* a hit: the bytes are there, or on their way for another holder */
        x->slots[k].held++;
        x->slots[k].used = x->clock;
        x->hits++;
        *hit = 1;
        if (!later && atomic_load(&x->slots[k].pending) && x->n_park)
            eng_xio_unpark(x);          /* wanted sooner now (it may be parked) */
        pthread_mutex_unlock(&x->mu);
        return k;
    }
    for (;;) {
        k = victim(x);
        if (k >= 0)
            break;
        /* every free slot still has a read in flight from an abandoned
         * token: wait for one to drain (reads always finish) */
        int any = 0;
        for (unsigned i = 0; i < x->n_slots; i++)
            any |= !x->slots[i].held;
        if (!any) {
            pthread_mutex_unlock(&x->mu);
            return -1;                  /* the caller holds them all */
        }
        eng_xio_submit_locked(x, 0);    /* (so every read it waits for can start) */
        pthread_cond_wait(&x->done, &x->mu);
    }
    x->misses++;
    if (x->slots[k].key >= 0)
        x->key_slot[x->slots[k].key] = -1;   /* evicted */
    if (key >= 0) {
        if (x->key_slot[key] >= 0)
            x->slots[x->key_slot[key]].key = -1;  /* a failed copy: forgotten */
        x->key_slot[key] = k;
    }
    x->slots[k].key = key;
    x->slots[k].used = x->clock;
    xio_slot *sl = &x->slots[k];
    sl->held = 1;
    sl->failed = 0;
    x->slot_err[k][0] = 0;
    sl->off = off;
    sl->len = len;
    sl->data = sl->buf + (off - a);
    unsigned n = 0;
    for (uint64_t p = a; p < end; p += x->chunk)
        n++;
    atomic_store(&sl->pending, (int)n);
    if (x->outstanding == 0)
        x->busy_t0 = prof_now();
    eng_xio_depth_mark(x);
    x->outstanding += n;
    if (!later)
        x->soon += n;
    for (uint64_t p = a; p < end; p += x->chunk) {
        xio_req *r = later ? &x->park[x->n_park++] : &x->q[(x->head + x->count++) % x->cap];
        uint64_t flen = end - p < x->chunk ? end - p : x->chunk;
        uint64_t need = off + len - p;
        r->slot = k;
        r->foff = p;
        r->flen = (uint32_t)flen;
        r->need = (uint32_t)(need < flen ? need : flen);
        r->dst = sl->buf + (p - a);
        r->later = later;
    }
    /* the reader starts on it at eng_xio_submit: a routing's misses go
     * out together */
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
    *hits = x->hits;
    *misses = x->misses;
    eng_xio_depth_mark(x);                   /* the reads still out count up to now */
    *depth_s = x->depth_s;
    pthread_mutex_unlock(&x->mu);
}

void eng_xio_tick(eng_xio *x, unsigned n)
{
    pthread_mutex_lock(&x->mu);
    x->tokens += n;
    pthread_mutex_unlock(&x->mu);
}

void eng_xio_release(eng_xio *x, int slot)
{
    pthread_mutex_lock(&x->mu);
    xio_slot *sl = &x->slots[slot];
    if (sl->held > 0)
        sl->held--;
    if (sl->failed && sl->key >= 0 && !sl->held) {
        x->key_slot[sl->key] = -1;      /* never hand out a failed read again */
        sl->key = -1;
    }
    pthread_cond_broadcast(&x->done);
    pthread_mutex_unlock(&x->mu);
}
