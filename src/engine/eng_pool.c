/*
 * eng_pool.c — a persistent pool of worker threads for one session.
 *
 * Decode runs a few dozen short parallel regions per token (one per fused
 * mat-vec, one per attention), so starting threads or waking them through
 * the kernel each time would cost more than the work.  Workers stay alive
 * between regions: a region is published by bumping a generation counter
 * (gen), which idle workers poll for a bounded time (SPIN_NS of wall clock,
 * cheap when regions come back to back) before they sleep on a futex on
 * gen itself (cheap when the user is idle, and on a machine shared with
 * other processes a sleeping worker leaves its core to them instead of
 * burning it).  The caller waits for the stragglers the same way, on the
 * done counter.  The bound is wall time, not a count of PAUSEs: a PAUSE
 * lasts anything from 10 to 140 cycles depending on the core.
 *
 * Work inside a region is handed out dynamically: each thread claims the
 * next chunk through an atomic cursor (eng_pool_next), so a thread that is
 * descheduled or slower simply takes fewer chunks instead of stalling the
 * whole region behind a static slice.
 *
 * Mat-vecs claim differently (eng_pool_claim): thread i owns the i-th
 * contiguous slice of the units and takes them in order, so each thread
 * reads one long run of the weights, as a static split would; a thread
 * whose slice is done then takes units from the front of the others'
 * slices, so the dynamic balance stays.  One shared cursor dealt the
 * units round-robin instead, and each thread's read jumped every unit:
 * its prefetches ran into the other thread's unit and the first 16 KiB of
 * each of its own went unprefetched (the decode rates of both:
 * docs/perf-log/2026-12-01.md, 22:17 UTC).
 *
 * The caller is thread 0 and works too.  Every region's work is claimed
 * (eng_pool_next, eng_pool_claim), so once the caller's own call returns
 * nothing is left to hand out, and eng_pool_run returns as soon as the
 * threads that joined the region have finished theirs: a worker that has
 * not joined by then never will (the caller closes the door behind it,
 * below).  Waiting for every worker instead made each region as slow as
 * the slowest wake-up: on a machine whose cores are busy with other work
 * a worker waits for the kernel to give it a core for up to a scheduler
 * tick, every region (docs/perf-log/2026-12-05.md, 01:17 UTC).
 * eng_pool_run_all keeps the old rule for the one region that must run on
 * every thread.
 *
 * The door: one 64-bit word holding the region's generation (high half),
 * a closed bit and the count of workers that entered.  A worker enters
 * region g only by a compare-and-swap that finds g's tag with the door
 * open; the caller closes it with one fetch-or, which returns how many
 * entered, and waits for that many on `done`.  A worker that saw g too
 * late finds the door closed (or another generation's tag) and does not
 * touch the region, whose context lives on the caller's stack.
 *
 * The thread count may change between regions (eng_pool_resize) without
 * touching the model.  CFLOW_PIN=1 pins
 * thread i to the i-th CPU of the process's affinity mask (the caller
 * included); by default threads float, which is kinder to a shared machine.
 *
 * Futex protocol (no lost wake-ups): a sleeper first announces itself
 * (sleepers++), then re-reads the word and calls FUTEX_WAIT with the value
 * it saw, which the kernel re-checks atomically; a publisher changes the
 * word first and then, if anyone announced sleep, calls FUTEX_WAKE.  Both
 * sides use sequentially consistent atomics, so either the sleeper sees
 * the new value or the publisher sees the sleeper.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#include "engine/eng_impl.h"

/* How long an idle thread polls before it sleeps: 1 ms, longer than the
 * serial stretch between two parallel regions of a decode (a small
 * model's first ~100 positions run their attention and most mat-vecs on
 * the caller alone, with one parallel region a token, the LM head).  A
 * shorter spin slept in every such stretch and each token paid a futex
 * wake-up (docs/perf-log/2026-12-02.md, the 2-thread gap traced).  A
 * decode that stops leaves its workers spinning 1 ms more, then asleep. */
#define SPIN_NS 1000000L
#define YIELD_NS 20000L   /* spin_over: yield the CPU after 20 us of spinning */
#define DOOR_CLOSED 0x80000000u

/* A counter on its own cache line, so that two threads taking units from
 * their own slices never share a line; beside it the CPU its thread was
 * last seen on (-1: not yet), for spin_over. */
struct slot {
    atomic_size_t taken;
    atomic_int    cpu;
    char          pad[64 - sizeof(atomic_size_t) - sizeof(atomic_int)];
};

struct eng_pool {
    int              n;             /* threads including the caller */
    int              pin;           /* CFLOW_PIN: pin threads to CPUs */
    pthread_t       *tid;
    atomic_uint      gen;           /* bumped to publish a region (futex word) */
    _Atomic uint64_t door;          /* gen << 32 | DOOR_CLOSED | workers entered */
    atomic_uint      done;          /* entered workers finished (futex word) */
    atomic_int       sleepers;      /* workers asleep (or about to be) on gen */
    atomic_int       waiter;        /* the caller asleep on done */
    atomic_size_t    cursor;        /* next chunk to hand out */
    struct slot     *slice;         /* [n] units taken from slice i (claim) */
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

static long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

#if defined(__linux__)
static void futex_wait(atomic_uint *w, unsigned val)
{
    syscall(SYS_futex, (unsigned *)w, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(atomic_uint *w, int n)
{
    syscall(SYS_futex, (unsigned *)w, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}
#else
/* No futex: sleep in short naps instead (correct, just slower to wake). */
static void futex_wait(atomic_uint *w, unsigned val)
{
    if (atomic_load(w) == val) {
        struct timespec ts = { 0, 50000 };
        nanosleep(&ts, NULL);
    }
}

static void futex_wake(atomic_uint *w, int n)
{
    (void)w;
    (void)n;
}
#endif

#if defined(__linux__)
/* Move worker id off the CPU it shares with the caller, to an allowed CPU
 * on which no thread of the pool was last seen; the affinity mask is put
 * back at once, so this is one migration, not a pin.  Nothing happens
 * when every allowed CPU has a thread of the pool (more threads than
 * CPUs: sharing is then unavoidable). */
static void move_off(eng_pool *p, int id)
{
    cpu_set_t allowed, free_cpus, one;
    if (sched_getaffinity(0, sizeof allowed, &allowed))
        return;
    free_cpus = allowed;
    for (int i = 0; i < p->n; i++) {
        int c = atomic_load_explicit(&p->slice[i].cpu, memory_order_relaxed);
        if (i != id && c >= 0 && c < CPU_SETSIZE)
            CPU_CLR(c, &free_cpus);
    }
    int me = sched_getcpu();
    if (me >= 0 && me < CPU_SETSIZE)
        CPU_CLR(me, &free_cpus);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &free_cpus)) {
            CPU_ZERO(&one);
            CPU_SET(c, &one);
            if (!sched_setaffinity(0, sizeof one, &one))
                sched_setaffinity(0, sizeof allowed, &allowed);
            atomic_store_explicit(&p->slice[id].cpu, sched_getcpu(), memory_order_relaxed);
            return;
        }
}

static int cpu_now(void) { return sched_getcpu(); }
#else
static void move_off(eng_pool *p, int id) { (void)p; (void)id; }
static int cpu_now(void) { return -1; }
#endif

/* Called every 64 spins with the spin's start time (0 before the first
 * call): 1 once the spin has lasted SPIN_NS and the caller should sleep.
 *
 * A waker's thread and the thread it wakes can land on one CPU while the
 * other CPU idles: the scheduler's wake-affine placement, when the other
 * CPU is busy at the moment of the wake-up (in cflow-tui, the UI thread
 * and tmux drawing the screen the Enter key brought, just as the reply's
 * decode wakes its worker).  Once both threads run, neither is moved for
 * tens of ms (each is "cache hot"), and they take turns on one core
 * (traced with perf sched_switch, and seen in the run log as a process
 * CPU time equal to, not twice, the wall time of a reply's first tokens:
 * docs/perf-log/2026-12-02.md, the 2-thread gap traced).  Two remedies,
 * both only on spins longer than YIELD_NS (the regions of one token are
 * ~10-100 us apart, so most spins never pay for a system call):
 *  - the spinner yields at each call, so the thread it waits for gets the
 *    core within YIELD_NS instead of after the whole spin;
 *  - a worker that finds itself on the caller's CPU moves once to a CPU
 *    none of the pool's threads is on (move_off). */
static int spin_over(long *t0, eng_pool *p, int id, int *moved)
{
    long t = now_ns();
    if (!*t0) {
        *t0 = t;
        return 0;
    }
    if (t - *t0 > SPIN_NS)
        return 1;
    if (t - *t0 > YIELD_NS) {
        if (p && !*moved && !p->pin) {
            *moved = 1;
            int me = cpu_now();
            if (me >= 0 && me == atomic_load_explicit(&p->slice[0].cpu, memory_order_relaxed))
                move_off(p, id);
        }
        sched_yield();
    }
    return 0;
}

/* Worker id waits until *w != val: spin for SPIN_NS, then sleep.
 * *sleepers counts the threads that may be inside futex_wait on w. */
static void wait_change(eng_pool *p, int id, atomic_uint *w, unsigned val,
                        atomic_int *sleepers)
{
    long t0 = 0;
    int moved = 0;
    for (unsigned spins = 0;; spins++) {
        if (atomic_load_explicit(w, memory_order_acquire) != val)
            return;
        if ((spins & 63) == 63 && spin_over(&t0, p, id, &moved))
            break;
        cpu_relax();
    }
    atomic_fetch_add(sleepers, 1);
    while (atomic_load(w) == val)
        futex_wait(w, val);
    atomic_fetch_sub(sleepers, 1);
}

#if defined(__linux__)
static void pin_self(int id)
{
    cpu_set_t allowed, one;
    if (sched_getaffinity(0, sizeof allowed, &allowed))
        return;
    int n = CPU_COUNT(&allowed), k = id % (n > 0 ? n : 1);
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &allowed))
            continue;
        if (k-- == 0) {
            CPU_ZERO(&one);
            CPU_SET(c, &one);
            pthread_setaffinity_np(pthread_self(), sizeof one, &one);
            return;
        }
    }
}
#else
static void pin_self(int id) { (void)id; }
#endif

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

/* Join region g: 1 when the door still had g's tag and was open. */
static int enter(eng_pool *p, unsigned g)
{
    uint64_t d = atomic_load(&p->door);
    while ((uint32_t)(d >> 32) == g && !(d & DOOR_CLOSED))
        if (atomic_compare_exchange_weak(&p->door, &d, d + 1))
            return 1;
    return 0;
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
    if (p->pin)
        pin_self(id);
    for (;;) {
        wait_change(p, id, &p->gen, seen, &p->sleepers);
        /* gen before quit: stop_all sets quit before it bumps gen, so a
         * worker that skipped regions it was too late for and reads the
         * stop's generation here also sees quit (read the other way
         * round, it waited on the stop's generation for ever) */
        seen = atomic_load(&p->gen);
        if (atomic_load(&p->quit))
            return NULL;
        if (id >= p->n || !enter(p, seen))
            continue;               /* too late for it: the caller has closed */
        atomic_store_explicit(&p->slice[id].cpu, cpu_now(), memory_order_relaxed);
        run_guarded(p, id, p->n);
        atomic_fetch_add(&p->done, 1);
        if (atomic_load(&p->waiter))
            futex_wake(&p->done, 1);
    }
}

static struct slot *slots_new(int n)
{
    struct slot *sl = aligned_alloc(64, (size_t)n * sizeof *sl);
    for (int i = 0; sl && i < n; i++) {
        atomic_init(&sl[i].taken, 0);
        atomic_init(&sl[i].cpu, -1);
    }
    return sl;
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
    atomic_store(&p->quit, 1);
    atomic_fetch_add(&p->gen, 1);
    futex_wake(&p->gen, INT_MAX);
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
    const char *pin = getenv("CFLOW_PIN");
    p->pin = pin && !strcmp(pin, "1");   /* other values: eng_env_check */
    if (p->pin)
        pin_self(0);
    p->tid = calloc((size_t)n_threads, sizeof *p->tid);
    p->slice = slots_new(n_threads);
    p->n = n_threads;
    if (!p->tid || !p->slice || spawn(p, 1, n_threads)) {
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
    free(p->tid);
    free(p->slice);
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
    struct slot *sl = slots_new(n_threads);
    pthread_t *t = sl ? realloc(p->tid, (size_t)n_threads * sizeof *t) : NULL;
    if (!t) {
        free(sl);   /* the old slices still serve the caller alone */
        p->n = 1;
        return -1;
    }
    free(p->slice);
    p->slice = sl;
    p->tid = t;
    p->n = n_threads;
    if (spawn(p, 1, n_threads)) {
        p->n = 1;
        return -1;
    }
    return 0;
}

static void pool_region(eng_pool *p, eng_task_fn fn, void *ctx, int all)
{
    /* one thread: a fault jumps straight to the caller's own guard */
    if (!p || p->n == 1) {
        if (p) {
            atomic_store(&p->cursor, 0);
            atomic_store(&p->slice[0].taken, 0);
        }
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store(&p->cursor, 0);
    for (int i = 0; i < p->n; i++)
        atomic_store(&p->slice[i].taken, 0);
    atomic_store_explicit(&p->slice[0].cpu, cpu_now(), memory_order_relaxed);
    atomic_store(&p->done, 0);
    /* the door carries the generation the workers are about to see */
    unsigned g = atomic_load(&p->gen) + 1;
    atomic_store(&p->door, (uint64_t)g << 32);
    atomic_store(&p->gen, g);
    if (atomic_load(&p->sleepers) > 0)
        futex_wake(&p->gen, INT_MAX);
    run_guarded(p, 0, p->n);
    /* all: every worker must enter, so the door stays open until all
     * have finished; otherwise close it and wait for those inside */
    unsigned want = (unsigned)(p->n - 1);
    if (!all)
        want = (unsigned)(atomic_fetch_or(&p->door, DOOR_CLOSED) & (DOOR_CLOSED - 1));
    long t0 = 0;
    for (unsigned spins = 0;; spins++) {
        unsigned got = atomic_load_explicit(&p->done, memory_order_acquire);
        if (got == want)
            break;
        if ((spins & 63) == 63 && spin_over(&t0, NULL, 0, NULL)) {
            atomic_store(&p->waiter, 1);
            while ((got = atomic_load(&p->done)) != want)
                futex_wait(&p->done, got);
            atomic_store(&p->waiter, 0);
            break;
        }
        cpu_relax();
    }
    if (all)
        atomic_fetch_or(&p->door, DOOR_CLOSED);
}

/* A fault on any thread of the region (eng_guard.c) comes back to the
 * caller's guard once the region is over: the jump never leaves a thread
 * inside the pool's synchronisation. */
static void run_region(eng_pool *p, eng_task_fn fn, void *ctx, int all)
{
    if (p) {
        p->outer = eng_guard_current();
        atomic_store(&p->fault_addr, NULL);
    }
    pool_region(p, fn, ctx, all);
    const void *fa = p ? atomic_load(&p->fault_addr) : NULL;
    if (fa && p->outer)
        eng_guard_raise(p->outer, fa);
}

void eng_pool_run(eng_pool *p, eng_task_fn fn, void *ctx)
{
    run_region(p, fn, ctx, 0);
}

void eng_pool_run_all(eng_pool *p, eng_task_fn fn, void *ctx)
{
    run_region(p, fn, ctx, 1);
}

size_t eng_pool_next(eng_pool *p, size_t step)
{
    return atomic_fetch_add_explicit(&p->cursor, step, memory_order_relaxed);
}

size_t eng_pool_claim(eng_pool *p, int tid, int n_threads, size_t n)
{
    /* slice v is [v n / T, (v + 1) n / T); its counter only grows, so a
     * unit is handed out once whoever takes it */
    for (int k = 0; k < n_threads; k++) {
        int v = (tid + k) % n_threads;
        size_t lo = (size_t)v * n / (size_t)n_threads;
        size_t hi = (size_t)(v + 1) * n / (size_t)n_threads;
        if (atomic_load_explicit(&p->slice[v].taken, memory_order_relaxed) >= hi - lo)
            continue;
        size_t c = atomic_fetch_add_explicit(&p->slice[v].taken, 1, memory_order_relaxed);
        if (c < hi - lo)
            return lo + c;
    }
    return n;
}
