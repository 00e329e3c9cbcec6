/*
 * eng_pool.c — a persistent pool of worker threads for one session.
 *
 * Decode runs a few dozen short parallel regions per token (one per fused
 * mat-vec), so starting threads or waking them through the kernel each time
 * would cost more than the work.  Workers stay alive between regions: a
 * region is published by bumping a generation counter, which workers spin
 * on for a short while (cheap when regions come back to back) before they
 * fall asleep on a condition variable (cheap when the user is idle).
 *
 * Work inside a region is handed out dynamically: each thread claims the
 * next chunk through an atomic cursor (eng_pool_next), so a thread that is
 * descheduled or slower simply takes fewer chunks instead of stalling the
 * whole region behind a static slice.
 *
 * The caller is thread 0 and works too; eng_pool_run returns when every
 * thread has finished the region.  The thread count may change between
 * regions (eng_pool_resize) without touching the model.
 */
#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "engine/eng_impl.h"

#define SPIN_ITERS 20000

struct eng_pool {
    int              n;             /* threads including the caller */
    pthread_t       *tid;
    pthread_mutex_t  mu;
    pthread_cond_t   wake, done_cv;
    atomic_uint      gen;           /* bumped to publish a region */
    atomic_int       pending;       /* workers still in the region */
    atomic_int       sleepers;
    atomic_size_t    cursor;        /* next chunk to hand out */
    atomic_int       quit;
    eng_task_fn      fn;
    void            *ctx;
    /* the caller's guard of the mapped model (eng_guard.c), NULL when the
     * region reads no mapping; a thread's fault lands in fault_addr */
    eng_guard       *outer;
    const void *_Atomic fault_addr;
};

typedef struct worker_arg {
    eng_pool *p;
    int       id;
    unsigned  gen;      /* generation when the thread was made */
} worker_arg;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Run the region's function on thread id inside a guard over the
 * caller's range: a SIGBUS there ends this thread's share of the region
 * (the others finish theirs) and is recorded for eng_pool_run. */
static void run_guarded(eng_pool *p, int id, int n)
{
    eng_guard *outer = p->outer;
    if (!outer) {
        p->fn(p->ctx, id, n);
        return;
    }
    eng_guard g;
    g.lo = outer->lo;
    g.hi = outer->hi;
    if (sigsetjmp(g.jb, 0)) {
        eng_guard_pop(&g);
        atomic_store(&p->fault_addr, g.addr);
        return;
    }
    eng_guard_push(&g);
    p->fn(p->ctx, id, n);
    eng_guard_pop(&g);
}

static void *worker(void *arg)
{
    worker_arg *wa = arg;
    eng_pool *p = wa->p;
    int id = wa->id;
    /* The generation is read by the creator, not here: a region published
     * before this thread first runs must not be mistaken for the idle state. */
    unsigned seen = wa->gen;
    free(wa);
    for (;;) {
        int spins = 0;
        while (atomic_load_explicit(&p->gen, memory_order_acquire) == seen) {
            if (++spins < SPIN_ITERS) {
                cpu_relax();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->quit))
                pthread_cond_wait(&p->wake, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
            break;
        }
        if (atomic_load(&p->quit))
            return NULL;
        seen = atomic_load(&p->gen);
        if (id < p->n)
            run_guarded(p, id, p->n);
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done_cv);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

static int spawn(eng_pool *p, int from, int to)
{
    for (int i = from; i < to; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa)
            return -1;
        wa->p = p;
        wa->id = i;
        wa->gen = atomic_load(&p->gen);
        if (pthread_create(&p->tid[i], NULL, worker, wa)) {
            free(wa);
            return -1;
        }
    }
    return 0;
}

static void stop_all(eng_pool *p, int n_started)
{
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->quit, 1);
    atomic_fetch_add(&p->gen, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < n_started; i++)
        pthread_join(p->tid[i], NULL);
    atomic_store(&p->quit, 0);
}

eng_pool *eng_pool_new(int n_threads)
{
    eng_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    if (n_threads < 1)
        n_threads = 1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    p->tid = calloc((size_t)n_threads, sizeof *p->tid);
    p->n = n_threads;
    if (!p->tid || spawn(p, 1, n_threads)) {
        eng_pool_free(p);
        return NULL;
    }
    return p;
}

void eng_pool_free(eng_pool *p)
{
    if (!p)
        return;
    if (p->tid)
        stop_all(p, p->n);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done_cv);
    free(p->tid);
    free(p);
}

int eng_pool_size(const eng_pool *p) { return p ? p->n : 1; }

int eng_pool_resize(eng_pool *p, int n_threads)
{
    if (n_threads < 1)
        n_threads = 1;
    if (n_threads == p->n)
        return 0;
    stop_all(p, p->n);
    pthread_t *t = realloc(p->tid, (size_t)n_threads * sizeof *t);
    if (!t) {
        p->n = 1;
        return -1;
    }
    p->tid = t;
    p->n = n_threads;
    if (spawn(p, 1, n_threads)) {
        p->n = 1;
        return -1;
    }
    return 0;
}

static void pool_region(eng_pool *p, eng_task_fn fn, void *ctx)
{
    /* one thread: a fault jumps straight to the caller's own guard */
    if (!p || p->n == 1) {
        if (p)
            atomic_store(&p->cursor, 0);
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store(&p->cursor, 0);
    atomic_store(&p->pending, p->n - 1);
    atomic_fetch_add(&p->gen, 1);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }
    run_guarded(p, 0, p->n);
    int spins = 0;
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) {
        if (++spins < SPIN_ITERS) {
            cpu_relax();
            continue;
        }
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->pending) > 0)
            pthread_cond_wait(&p->done_cv, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}

/* A fault on any thread of the region (eng_guard.c) comes back to the
 * caller's guard once the region is over: the jump never leaves a thread
 * inside the pool's synchronisation. */
void eng_pool_run(eng_pool *p, eng_task_fn fn, void *ctx)
{
    if (p) {
        p->outer = eng_guard_current();
        atomic_store(&p->fault_addr, NULL);
    }
    pool_region(p, fn, ctx);
    const void *fa = p ? atomic_load(&p->fault_addr) : NULL;
    if (fa && p->outer)
        eng_guard_raise(p->outer, fa);
}

size_t eng_pool_next(eng_pool *p, size_t step)
{
    return atomic_fetch_add_explicit(&p->cursor, step, memory_order_relaxed);
}
