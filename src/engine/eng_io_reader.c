/*
 * eng_io_reader.c — the expert reader: the request queue the staged reader
 * (eng_io.c) fills, its priority (reads wanted later wait, parked), the
 * completion of each chunk, and the reader that drains the queue — a pool
 * of threads here, or io_uring (eng_io_uring.c).  Also what both readers
 * share: the result hook and the CFLOW_FAULT faults every read passes and
 * the fallback to buffered reads where O_DIRECT is refused.
 *
 * A miss's range is cut into chunks (eng_xio_enqueue), each a request of
 * at most chunk bytes of one slot: onto the queue, or, for a read wanted
 * later than the others (look-ahead's guesses past the next layer), into
 * the parked list while `soon` (the other requests queued or in flight) is
 * above 0.  The chunk that brings soon to 0 moves them to the queue's end,
 * as does a submit when soon is 0 already, another issue that hits their
 * slot (eng_xio_sooner: it is wanted now), and a drain or a stop, which
 * send everything; soon always falls to 0 (reads always finish), so a
 * parked read is never stuck.  eng_xio_submit releases what is queued to
 * the reader together: one io_uring submission, or the pool's threads,
 * which take one chunk each.  Both settle a chunk the same way
 * (eng_xio_chunk_done: the slot's pending count, its error, the busy-union
 * stamp), so eng_io.c's rules do not depend on the reader.
 * $CFLOW_XIO_READER=uring|pool chooses; io_uring is the default where it
 * is built and the kernel allows it, else the pool, with one line through
 * the log saying why.  eng_io.c's essay explains slots, chunks, pending
 * counts and the busy time.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/eng_io_impl.h"
#include "prof/prof.h"

ssize_t (*eng_io_result)(int fd, void *buf, size_t n, off_t off, ssize_t res);

void eng_xio_parse_fault(eng_xio *x)
{
    x->fault = prof_fault_get("expert-read:eio", &x->fault_from)     ? FAULT_EIO
               : prof_fault_get("expert-read:short", &x->fault_from) ? FAULT_SHORT
                                                                     : FAULT_NONE;
}

int eng_xio_fault_next(eng_xio *x)
{
    unsigned long nth = atomic_fetch_add(&x->n_reads, 1);
    return x->fault && nth >= x->fault_from ? x->fault : FAULT_NONE;
}

int eng_xio_refused(eng_xio *x, int fd, int locked)
{
    /* Several reads can be refused at once; the lock lets the first
     * reopen, and every one of them retries on the new descriptor
     * (comparing descriptors, not the flag: a reader that lost the race
     * sees direct already cleared). */
    if (!locked)
        pthread_mutex_lock(&x->mu);
    if (x->direct && atomic_load(&x->fd) == fd) {
        int nfd = open(x->path, O_RDONLY | O_CLOEXEC);
        if (nfd >= 0) {
            /* the old descriptor stays open until eng_xio_free: another
             * read may be in flight on it */
            x->old_fd = fd;
            atomic_store(&x->fd, nfd);
            atomic_store(&x->direct, 0);
            if (x->log) {
                char msg[512];
                snprintf(msg, sizeof msg,
                         "%s: the file system refuses O_DIRECT reads; "
                         "expert reads fall back to buffered I/O", x->path);
                x->log(x->log_ud, 1, msg);
            }
        }
    }
    int retry = atomic_load(&x->fd) != fd;
    if (!locked)
        pthread_mutex_unlock(&x->mu);
    return retry;
}

int eng_xio_take(eng_xio *x, xio_req *r)
{
    if (!x->issued)
        return 0;
    *r = x->q[x->head];
    x->head = (x->head + 1) % x->cap;
    x->count--;
    x->issued--;
    return 1;
}

void eng_xio_unpark(eng_xio *x)
{
    for (unsigned i = 0; i < x->n_park; i++)
        x->q[(x->head + x->count++) % x->cap] = x->park[i];
    x->n_park = 0;
}

void eng_xio_depth_mark(eng_xio *x)
{
    double now = prof_now();
    x->depth_s += (double)x->outstanding * (now - x->depth_t);
    x->depth_t = now;
}

void eng_xio_chunk_done(eng_xio *x, const xio_req *r, const char *why)
{
    xio_slot *sl = &x->slots[r->slot];
    eng_xio_depth_mark(x);
    if (!r->later && --x->soon == 0 && x->n_park) {
        eng_xio_unpark(x);              /* nothing sooner left: the later reads go */
        x->issued = x->count;
        pthread_cond_broadcast(&x->work);   /* (the pool; io_uring's reaper kicks) */
    }
    if (--x->outstanding == 0)
        x->busy_s += prof_now() - x->busy_t0;
    if (why && !sl->failed) {
        sl->failed = 1;
        snprintf(x->slot_err[r->slot], ENG_IO_ERR, "%s: expert read at offset %llu failed: %s",
                 x->path, (unsigned long long)r->foff, why);
    }
    if (atomic_fetch_sub(&sl->pending, 1) == 1) {
        sl->busy_done = x->busy_s + (x->outstanding ? prof_now() - x->busy_t0 : 0.0);
        pthread_cond_broadcast(&x->done);
    }
}

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

int eng_xio_reader_start(eng_xio *x, const eng_xio_cfg *cfg, char *err, size_t errlen)
{
    int rc = open_file(x, err, errlen);
    return rc ? rc : start_reader(x, cfg, err, errlen);
}

void eng_xio_reader_stop(eng_xio *x)
{
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
        x->tid = NULL;
    }
    if (x->fd >= 0)
        close(x->fd);
    if (x->old_fd >= 0)
        close(x->old_fd);
    x->fd = x->old_fd = -1;
}

void eng_xio_enqueue(eng_xio *x, int k, uint64_t off, uint64_t len, int later)
{
    const uint64_t a = off / ENG_IO_ALIGN * ENG_IO_ALIGN;
    const uint64_t end = (off + len + ENG_IO_ALIGN - 1) / ENG_IO_ALIGN * ENG_IO_ALIGN;
    xio_slot *sl = &x->slots[k];
    unsigned n = 0;
    sl->failed = 0;
    x->slot_err[k][0] = 0;
    sl->off = off;
    sl->len = len;
    sl->data = sl->buf + (off - a);
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
}

void eng_xio_sooner(eng_xio *x, int k)
{
    if (atomic_load(&x->slots[k].pending) && x->n_park)
        eng_xio_unpark(x);
}
