/*
 * eng_guard.c — a model file that shrinks while it is mapped.
 *
 * The weights are read straight from a read-only mapping of the model file
 * (fmt_model_open).  If the file is truncated while a session has it
 * mapped — rewritten in place by a converter, cut by a full disk, a
 * network file system losing a page — the next read of a page past the
 * new end raises SIGBUS on whichever thread touches it: the caller of
 * eng_decode or any worker of the pool.  Checking the file size before
 * each token would not close the window (the file can shrink mid-token),
 * and a SIGBUS is not something a thread can ignore: returning from the
 * handler re-executes the load.  So the engine turns the fault into an
 * error with sigsetjmp/siglongjmp, scoped to the code that reads weights:
 *
 *   - eng_decode / eng_prefill push a guard holding the mapping's address
 *     range before the forward pass and pop it after (eng_guarded_run,
 *     eng_forward.c).
 *   - eng_pool_run gives every thread of a region (the caller too) its own
 *     guard with the same range, so a worker that faults leaves the region
 *     through its own frame and records the fault; the region completes as
 *     usual (no thread is left inside the pool's barrier), and only then
 *     does eng_pool_run jump to the caller's guard.  A jump never crosses
 *     the pool's synchronisation.
 *   - The handler jumps only when the faulting address lies inside the
 *     current thread's guarded range.  Any other SIGBUS goes to the
 *     handler installed before ours, or gets the default action (the
 *     handler restores SIG_DFL and raises it again: the process dies as
 *     it would have without us).
 *
 * What is jumped over is the forward pass only: tile kernels, norms and
 * attention hold no locks and allocate nothing, so abandoning them leaves
 * only half-written scratch buffers and one KV cache row.  The session
 * marks itself broken and refuses further tokens with the same error
 * (eng_session.c): the mapping it reads is gone for good.
 *
 * The handler is installed by eng_open (again if something replaced it),
 * with SA_NODEFER so that SIGBUS is not left blocked after a jump; the
 * jump buffers are taken with sigsetjmp(jb, 0) (no signal mask saved), so
 * arming a guard costs no system call.  Under AddressSanitizer the user
 * handler replaces ASan's (allow_user_segv_handler, the default).
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/eng_impl.h"

static __thread eng_guard *tls_guard;
static struct sigaction old_bus;
static pthread_mutex_t bus_mu = PTHREAD_MUTEX_INITIALIZER;

static void bus_handler(int sig, siginfo_t *si, void *uc)
{
    eng_guard *g = tls_guard;
    const uint8_t *a = si ? (const uint8_t *)si->si_addr : NULL;
    /* si_code > 0: raised by the kernel for this access, not kill(2) */
    if (g && si && si->si_code > 0 && a >= g->lo && a < g->hi) {
        g->addr = a;
        siglongjmp(g->jb, 1);
    }
    /* not ours */
    if ((old_bus.sa_flags & SA_SIGINFO) && old_bus.sa_sigaction) {
        old_bus.sa_sigaction(sig, si, uc);
        return;
    }
    if (!(old_bus.sa_flags & SA_SIGINFO) && old_bus.sa_handler != SIG_DFL &&
        old_bus.sa_handler != SIG_IGN) {
        old_bus.sa_handler(sig);
        return;
    }
    /* the default action: terminate (with a core), as without us; raise
     * also covers a SIGBUS sent by kill(2), which no access repeats */
    signal(SIGBUS, SIG_DFL);
    raise(SIGBUS);
}

int eng_guard_install(void)
{
    struct sigaction cur, sa;
    int rc = 0;
    pthread_mutex_lock(&bus_mu);
    /* again whenever someone replaced ours (a test harness, a front end) */
    if (sigaction(SIGBUS, NULL, &cur) == 0 &&
        !((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == bus_handler)) {
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = bus_handler;
        sa.sa_flags = SA_SIGINFO | SA_NODEFER;
        sigemptyset(&sa.sa_mask);
        rc = sigaction(SIGBUS, &sa, &old_bus);
    }
    pthread_mutex_unlock(&bus_mu);
    return rc ? -1 : 0;
}

void eng_guard_push(eng_guard *g)
{
    g->prev = tls_guard;
    g->addr = NULL;
    tls_guard = g;
}

void eng_guard_pop(eng_guard *g)
{
    tls_guard = g->prev;
}

eng_guard *eng_guard_current(void)
{
    return tls_guard;
}

void eng_guard_raise(eng_guard *g, const void *addr)
{
    g->addr = addr;
    siglongjmp(g->jb, 1);
}
