/*
 * eng_io_uring.c — the io_uring reader of the staged expert reads: the
 * chunks eng_xio_issue queues (eng_io.c) go to storage at a real queue
 * depth from one thread, where the reader pool needs a thread per read in
 * flight.
 *
 *   ring      one io_uring of qd submission entries (the completion ring
 *             has the kernel's default 2 x qd, so it never overflows).
 *   ent[qd]   the reads in flight: the request (slot, aligned file offset,
 *             length, destination), the bytes already landed (got: a read
 *             may return fewer bytes than asked and is resubmitted for the
 *             rest), the descriptor it was sent on and the fault injected
 *             into it; a completion's user_data is its index + 1 (0: the
 *             no-op that wakes the reaper to stop).  free_[n_free] lists
 *             the idle entries.
 *
 * Submission (eng_xio_uring_kick, under the reader's mutex) moves released
 * requests from eng_xio's queue into free entries, up to qd in flight, and
 * submits them with one io_uring_enter: eng_xio_submit after a routing's
 * issues sends all of its misses together.  Completions are reaped by one
 * thread (the reaper), which takes the mutex for each batch, settles each
 * read exactly as a pool reader does (eng_xio_chunk_done: the slot's
 * pending count, its error, the busy-union stamp), then tops the ring up
 * from the queue.  So eng_xio_wait, the slot reuse rule (a slot with a
 * read in flight is never handed out) and the time accounting are the
 * pool's.  Only the session thread and the reaper touch the submission
 * side, both under the mutex; only the reaper touches the completion side.
 *
 * Faults.  CFLOW_FAULT=expert-read:eio|short[@N] is injected at
 * completion (the N-th chunk on: its result becomes -EIO, or the file
 * "ends" halfway through it), and eng_io_result sees every completion, so
 * the tests' faults reach this reader as they reach the pool.  A read
 * refused with EINVAL (O_DIRECT refused at read time) reopens the file
 * buffered (eng_xio_refused) and is resubmitted on the new descriptor.
 *
 * Where liburing is not built in, or io_uring_queue_init is refused
 * (ENOSYS: no io_uring; EPERM: /proc/sys/kernel/io_uring_disabled or a
 * seccomp filter; CFLOW_FAULT=uring-init:eperm acts so for tests),
 * eng_xio_uring_start says why and the pool is used.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/eng_io_impl.h"
#include "prof/prof.h"

#ifndef HAVE_LIBURING

int eng_xio_uring_start(eng_xio *x, char *why, size_t whylen)
{
    (void)x;
    snprintf(why, whylen, "built without liburing");
    return EOPNOTSUPP;
}
void eng_xio_uring_kick(eng_xio *x) { (void)x; }
void eng_xio_uring_stop(eng_xio *x) { (void)x; }

#else

#include <liburing.h>

typedef struct xio_ent {
    xio_req  r;
    uint32_t got;              /* bytes landed so far */
    int      fd;               /* the descriptor it was last sent on */
    int      fault;            /* FAULT_* injected at its completion */
} xio_ent;

struct xio_uring {
    struct io_uring ring;
    pthread_t       tid;
    xio_ent        *ent;       /* [qd] */
    unsigned       *free_;     /* [qd] idle entries: n_free of them */
    unsigned        n_free, inflight;
    int             stopped;   /* the wake-up no-op has completed */
};

/* Submit what the ring holds.  Under mu.  EINTR and EAGAIN are retried;
 * the completion ring cannot be full (at most qd + 1 entries of 2 qd). */
static void submit_all(xio_uring *u)
{
    for (int tries = 0; io_uring_sq_ready(&u->ring) && tries < 1000; tries++) {
        int rc = io_uring_submit(&u->ring);
        if (rc >= 0 || (rc != -EINTR && rc != -EAGAIN && rc != -EBUSY))
            break;
        usleep(100);
    }
}

/* Put entry i's rest (from got) into the submission ring.  Under mu. */
static int prep(eng_xio *x, xio_uring *u, unsigned i)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (!sqe) {
        submit_all(u);                  /* (full: cannot happen with qd entries) */
        if (!(sqe = io_uring_get_sqe(&u->ring)))
            return -1;
    }
    xio_ent *e = &u->ent[i];
    e->fd = atomic_load(&x->fd);
    io_uring_prep_read(sqe, e->fd, e->r.dst + e->got, e->r.flen - e->got,
                       e->r.foff + e->got);
    io_uring_sqe_set_data(sqe, (void *)(uintptr_t)(i + 1));
    return 0;
}

void eng_xio_uring_kick(eng_xio *x)
{
    xio_uring *u = x->uring;
    while (u->n_free && x->issued) {
        unsigned i = u->free_[u->n_free - 1];
        xio_ent *e = &u->ent[i];
        eng_xio_take(x, &e->r);
        e->got = 0;
        e->fault = eng_xio_fault_next(x);
        if (prep(x, u, i)) {
            eng_xio_chunk_done(x, &e->r, "no io_uring submission entry");
            continue;
        }
        u->n_free--;
        u->inflight++;
    }
    submit_all(u);                      /* these, and reads complete() sent again */
}

/* Settle one completion of entry i with result res.  Under mu. */
static void complete(eng_xio *x, xio_uring *u, unsigned i, int res)
{
    xio_ent *e = &u->ent[i];
    char why[200];
    if (eng_io_result)
        res = (int)eng_io_result(e->fd, e->r.dst + e->got, e->r.flen - e->got,
                                 (off_t)(e->r.foff + e->got), res);
    if (e->fault == FAULT_EIO)
        res = -EIO;
    else if (e->fault == FAULT_SHORT)
        res = e->got ? 0 : (int)(e->r.need / 2);   /* the file "ends" halfway */
    if (res == -EINTR || res == -EAGAIN ||
        (res == -EINVAL && eng_xio_refused(x, e->fd, 1))) {
        if (!prep(x, u, i))
            return;                     /* sent again (on the buffered descriptor) */
    }
    if (res > 0) {
        e->got += (uint32_t)res;
        if (e->got < e->r.flen && e->fault != FAULT_SHORT && !prep(x, u, i))
            return;                     /* a part: the rest is sent again */
    }
    if (res < 0)
        snprintf(why, sizeof why, "%s", strerror(-res));
    else if (e->got < e->r.need)
        snprintf(why, sizeof why, "short read: %u of %u bytes (the file ends early)",
                 e->got, e->r.need);
    eng_xio_chunk_done(x, &e->r, res < 0 || e->got < e->r.need ? why : NULL);
    u->free_[u->n_free++] = i;
    u->inflight--;
}

static void *reaper(void *arg)
{
    eng_xio *x = arg;
    xio_uring *u = x->uring;
    for (;;) {
        struct io_uring_cqe *cqe;
        int rc = io_uring_wait_cqe(&u->ring, &cqe);
        if (rc < 0) {
            if (rc != -EINTR && rc != -EAGAIN)
                usleep(1000);           /* (not expected; never spin hot) */
            continue;
        }
        unsigned head, n = 0;
        pthread_mutex_lock(&x->mu);
        io_uring_for_each_cqe(&u->ring, head, cqe) {
            uintptr_t tag = (uintptr_t)io_uring_cqe_get_data(cqe);
            if (tag == 0)
                u->stopped = 1;
            else
                complete(x, u, (unsigned)(tag - 1), cqe->res);
            n++;
        }
        io_uring_cq_advance(&u->ring, n);
        eng_xio_uring_kick(x);
        int done = u->stopped && !u->inflight && !x->count;
        pthread_mutex_unlock(&x->mu);
        if (done)
            break;
    }
    return NULL;
}

/* Why io_uring_queue_init's error rc stopped us, into why. */
static void refusal(int rc, char *why, size_t whylen)
{
    int disabled = 0;
    FILE *f = fopen("/proc/sys/kernel/io_uring_disabled", "r");
    if (f) {
        if (fscanf(f, "%d", &disabled) != 1)
            disabled = 0;
        fclose(f);
    }
    if (disabled)
        snprintf(why, whylen, "io_uring is refused: %s (kernel.io_uring_disabled = %d)",
                 strerror(-rc), disabled);
    else if (rc == -ENOSYS || rc == -EPERM)
        snprintf(why, whylen, "io_uring is refused: %s (no io_uring in this kernel, or a "
                 "seccomp filter)", strerror(-rc));
    else
        snprintf(why, whylen, "io_uring_queue_init: %s", strerror(-rc));
}

int eng_xio_uring_start(eng_xio *x, char *why, size_t whylen)
{
    xio_uring *u = calloc(1, sizeof *u);
    int err = ENOMEM;
    unsigned qd = x->qd ? x->qd : ENG_IO_QD;
    if (qd > 4096)
        qd = 4096;                      /* io_uring's largest ring */
    if (u) {
        u->ent = calloc(qd, sizeof *u->ent);
        u->free_ = calloc(qd, sizeof *u->free_);
    }
    if (!u || !u->ent || !u->free_) {
        snprintf(why, whylen, "out of memory");
        goto fail_mem;
    }
    /* CFLOW_FAULT=uring-init:eperm: the kernel refuses, as a seccomp
     * filter or kernel.io_uring_disabled does (for tests) */
    int rc = prof_fault_get("uring-init:eperm", NULL) ? -EPERM
                                                      : io_uring_queue_init(qd, &u->ring, 0);
    if (rc < 0) {
        refusal(rc, why, whylen);
        err = -rc;
        goto fail_mem;
    }
    for (unsigned i = 0; i < qd; i++)
        u->free_[i] = qd - 1 - i;
    u->n_free = qd;
    x->qd = qd;
    x->uring = u;
    if (pthread_create(&u->tid, NULL, reaper, x)) {
        x->uring = NULL;
        io_uring_queue_exit(&u->ring);
        snprintf(why, whylen, "cannot start the reaping thread");
        goto fail_mem;
    }
    return 0;
fail_mem:
    if (u) {
        free(u->ent);
        free(u->free_);
    }
    free(u);
    return err;
}

void eng_xio_uring_stop(eng_xio *x)
{
    xio_uring *u = x->uring;
    pthread_mutex_lock(&x->mu);
    eng_xio_uring_kick(x);              /* what was released (eng_xio_free released all) */
    /* a no-op wakes the reaper; it leaves once nothing is in flight */
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (!sqe) {
        submit_all(u);
        sqe = io_uring_get_sqe(&u->ring);
    }
    if (sqe) {
        io_uring_prep_nop(sqe);
        io_uring_sqe_set_data(sqe, NULL);
        submit_all(u);
    } else {
        u->stopped = 1;                 /* (cannot happen) the last completion ends it */
    }
    pthread_mutex_unlock(&x->mu);
    pthread_join(u->tid, NULL);
    io_uring_queue_exit(&u->ring);
    free(u->ent);
    free(u->free_);
    free(u);
    x->uring = NULL;
}

#endif
