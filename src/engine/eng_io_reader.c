/*
 * eng_io_reader.c — the reader that drains the staged reader's request
 * queue (eng_io_queue.c): started with the file, O_DIRECT where the file
 * system takes it, as io_uring (eng_io_uring.c) where it is built and the
 * kernel allows it, else as a pool of threads here that take one chunk
 * each; $CFLOW_XIO_READER=uring|pool chooses, and one line through the log
 * says why io_uring is not used where it was asked for or was the
 * default.  eng_xio_submit releases what is queued to the reader together
 * (one io_uring submission); a drain or a stop sends the parked reads
 * too, then waits.
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
