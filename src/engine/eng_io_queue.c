/*
 * eng_io_queue.c — the staged reader's request queue, which the readers
 * that drain it (the thread pool of eng_io_reader.c, the io_uring reader
 * of eng_io_uring.c) share: a miss's range cut into chunk requests
 * (eng_xio_enqueue), their priority (parked reads), taking a released
 * request off the queue, settling a chunk that landed or failed (the
 * slot's pending count, its error, the busy-union stamp) and the
 * queue-depth clock; with them the result hook and the CFLOW_FAULT faults
 * every read passes, and the fallback to buffered reads where O_DIRECT is
 * refused.
 *
 * Priority.  A chunk of a read wanted later than the others (look-ahead's
 * guesses past the next layer, eng_xio_issue_later) is parked while
 * `soon` (the other requests queued or in flight) is above 0.  The chunk
 * that brings soon to 0 moves the parked ones to the queue's end, as does
 * a submit when soon is 0 already, another issue that hits their slot
 * (eng_xio_sooner: it is wanted now), and a drain or a stop, which send
 * everything; soon always falls to 0 (reads always finish), so a parked
 * read is never stuck.  Both readers settle a chunk the same way
 * (eng_xio_chunk_done), so eng_io.c's rules do not depend on the reader;
 * eng_io.c's essay explains slots, chunks, pending counts and the busy
 * time.
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
