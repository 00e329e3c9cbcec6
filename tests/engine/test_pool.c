/*
 * test_pool.c — the worker pool's contract (src/engine/eng_pool.c).
 *
 *  - eng_pool_run hands every unit of a region out exactly once, whether
 *    the units are taken through eng_pool_next or eng_pool_claim, over
 *    thousands of back-to-back regions of ragged sizes;
 *  - a worker that has not joined a region by the time the caller's share
 *    is done never runs it: the region's context (on the caller's stack)
 *    is dead once eng_pool_run returns, and no call of the function may
 *    come after that;
 *  - the caller finishes a region without a worker that cannot run at
 *    all: here the worker is parked inside a signal handler (as a worker
 *    descheduled on a busy machine is parked by the kernel), and the
 *    regions complete on the caller alone.  Waiting for every worker, as
 *    the pool once did, hangs this test until its alarm;
 *  - eng_pool_run_all runs the function once on every thread;
 *  - a pool freed right after regions its worker was too late for stops
 *    (a worker that skipped to the stop's generation once waited on it for
 *    ever: test_free_after_regions with 400 pools hung about one run in five).
 */
#include "config.h"

#include <signal.h>
#include <semaphore.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/engine.h"
#include "engine/eng_impl.h"

#define MAXU 97

typedef struct region {
    eng_pool    *pool;
    size_t       n;               /* units in this region */
    int          claim;           /* eng_pool_claim, else eng_pool_next */
    atomic_int   live;            /* 1 while eng_pool_run has not returned */
    atomic_int   count[MAXU];     /* times each unit was run */
    atomic_int   by_caller;       /* units run by tid 0 */
} region;

static atomic_int g_late;         /* calls that came after their region ended */

static void units(void *ctx, int tid, int n_threads)
{
    region *r = ctx;
    if (!atomic_load(&r->live))
        atomic_fetch_add(&g_late, 1);
    for (;;) {
        size_t u = r->claim ? eng_pool_claim(r->pool, tid, n_threads, r->n)
                            : eng_pool_next(r->pool, 1);
        if (u >= r->n)
            break;
        atomic_fetch_add(&r->count[u], 1);
        if (tid == 0)
            atomic_fetch_add(&r->by_caller, 1);
    }
}

/* Run one region of n units; every unit exactly once.  The caller's units. */
static int run_region(eng_pool *p, size_t n, int claim)
{
    region r;
    memset(&r, 0, sizeof r);
    r.pool = p;
    r.n = n;
    r.claim = claim;
    atomic_store(&r.live, 1);
    eng_pool_run(p, units, &r);
    atomic_store(&r.live, 0);
    for (size_t u = 0; u < n; u++)
        assert_int_equal(atomic_load(&r.count[u]), 1);
    int c = atomic_load(&r.by_caller);
    /* poison the frame a late worker would read */
    memset(&r, 0xA5, sizeof r);
    atomic_store(&r.live, 0);
    return c;
}

static void test_every_unit_once(void **state)
{
    (void)state;
    for (int threads = 1; threads <= 4; threads++) {
        eng_pool *p = eng_pool_new(threads);
        assert_non_null(p);
        atomic_store(&g_late, 0);
        for (int i = 0; i < 3000; i++)
            run_region(p, (size_t)(i * 7919) % MAXU, i & 1);
        eng_pool_free(p);
        assert_int_equal(atomic_load(&g_late), 0);
    }
}

static void test_free_after_regions(void **state)
{
    (void)state;
    for (int i = 0; i < 2000; i++) {
        eng_pool *p = eng_pool_new(2 + i % 3);
        assert_non_null(p);
        for (int k = 0; k < i % 4; k++)
            run_region(p, 1 + (size_t)k, k & 1);
        if (i % 5 == 0)
            assert_int_equal(eng_pool_resize(p, 1 + i % 4), 0);
        run_region(p, 3, 0);
        eng_pool_free(p);
    }
}

/* ---- a worker that cannot run ------------------------------------------- */

static sem_t g_parked, g_gate;
static pid_t g_main;

static void park(int sig)
{
    (void)sig;
    if ((pid_t)syscall(SYS_gettid) == g_main)
        return;
    sem_post(&g_parked);
    while (sem_wait(&g_gate) != 0)
        ;
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "test_pool: a region waited for a parked worker\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(1);
}

/* Send SIGUSR1 to every thread of the process but this one; their count. */
static int signal_workers(void)
{
    DIR *d = opendir("/proc/self/task");
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        pid_t t = (pid_t)atoi(e->d_name);
        if (t <= 0 || t == g_main)
            continue;
        assert_int_equal(syscall(SYS_tgkill, getpid(), t, SIGUSR1), 0);
        n++;
    }
    closedir(d);
    return n;
}

static void test_parked_worker(void **state)
{
    (void)state;
    g_main = (pid_t)syscall(SYS_gettid);
    assert_int_equal(sem_init(&g_parked, 0, 0), 0);
    assert_int_equal(sem_init(&g_gate, 0, 0), 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = park;
    sa.sa_flags = SA_RESTART;
    assert_int_equal(sigaction(SIGUSR1, &sa, NULL), 0);
    signal(SIGALRM, on_alarm);

    eng_pool *p = eng_pool_new(2);
    assert_non_null(p);
    run_region(p, 50, 0);                 /* the worker exists and has run */
    atomic_store(&g_late, 0);
    assert_int_equal(signal_workers(), 1);
    while (sem_wait(&g_parked) != 0)
        ;
    /* the worker is inside park(): every region is the caller's alone */
    alarm(60);
    for (int i = 0; i < 200; i++) {
        size_t n = 1 + (size_t)i % (MAXU - 1);
        assert_int_equal(run_region(p, n, i & 1), (int)n);
    }
    alarm(0);
    sem_post(&g_gate);                    /* the worker comes back */
    for (int i = 0; i < 500; i++)
        run_region(p, (size_t)i % MAXU, i & 1);
    eng_pool_free(p);
    assert_int_equal(atomic_load(&g_late), 0);
    signal(SIGUSR1, SIG_DFL);
    signal(SIGALRM, SIG_DFL);
    sem_destroy(&g_parked);
    sem_destroy(&g_gate);
}

/* ---- every thread ---------------------------------------------------------- */

static void mark(void *ctx, int tid, int n_threads)
{
    atomic_uint *m = ctx;
    (void)n_threads;
    atomic_fetch_add(m, 1u << (4 * tid));  /* a nibble per thread counts its calls */
}

static void test_run_all(void **state)
{
    (void)state;
    for (int threads = 1; threads <= 4; threads++) {
        eng_pool *p = eng_pool_new(threads);
        assert_non_null(p);
        unsigned want = 0;
        for (int t = 0; t < threads; t++)
            want |= 1u << (4 * t);
        for (int i = 0; i < 500; i++) {
            atomic_uint m = 0;
            eng_pool_run_all(p, mark, &m);
            assert_int_equal(atomic_load(&m), want);
            run_region(p, (size_t)i % MAXU, i & 1);   /* mixed with the others */
        }
        eng_pool_free(p);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_unit_once),
        cmocka_unit_test(test_free_after_regions),
        cmocka_unit_test(test_parked_worker),
        cmocka_unit_test(test_run_all),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
