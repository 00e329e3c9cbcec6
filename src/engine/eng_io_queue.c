/*
 * eng_io_queue.c — what the two expert readers (the thread pool of
 * eng_io.c, the io_uring reader of eng_io_uring.c) share: the result hook
 * and the CFLOW_FAULT faults every read passes, the fallback to buffered
 * reads where O_DIRECT is refused, taking a released request off the
 * queue, settling a chunk that landed or failed (the slot's pending count,
 * its error, the busy-union stamp) and the queue-depth clock.  eng_io.c's
 * essay explains slots, chunks, pending counts and the busy time.
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
