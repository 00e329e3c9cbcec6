/*
 * prof_ctr.c — perf_event counters, one set per worker thread.
 *
 * Each thread opens its own counters (pid 0, cpu -1: "this thread, on any
 * CPU"), so a count is exactly the work that thread did, wherever the
 * scheduler put it.  Events are opened as two groups per thread — the
 * hardware events under the first one that opens, the software events
 * under task-clock — so that one read(2) of a group leader returns all of
 * its members at once (PERF_FORMAT_GROUP), measured over the same
 * interval.  A member that will not join its group gets a group of its
 * own.  The decoding thread reads every thread's groups at the start and
 * at the end of a token; reading another thread's counter is allowed and
 * returns its current value.
 *
 * Which events exist is decided once, by a probe on the thread that made
 * the profiler: each event is opened alone and closed again.  Hardware
 * events are named through libpfm4's generic "perf" PMU names and counted
 * at user level (PFM_PLM3), which perf_event_paranoid 2 still allows;
 * software events are tried with the kernel included and, when that is
 * refused (EACCES, paranoid >= 2 without privileges), at user level only.
 * A refusal is recorded with the call that failed, its errno text and the
 * paranoid level, and every output lists it.  The attributes that worked
 * are kept, so worker threads attach (concurrently) without calling
 * libpfm4 again.  Multiplexed hardware
 * counters (more events than the PMU has registers) are scaled by
 * time_enabled / time_running, as perf stat does.
 */
#include "config.h"

#include <errno.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#ifdef HAVE_LIBPFM
#include <perfmon/pfmlib_perf_event.h>
#endif

#include "prof/prof_impl.h"

static const struct {
    const char *name;
    const char *pfm;       /* libpfm4 event string for hardware events */
    uint64_t    config;    /* PERF_COUNT_SW_* for software events */
} evs[PROF_NEV] = {
    [PROF_EV_CYCLES] = { "cycles", "PERF_COUNT_HW_CPU_CYCLES", 0 },
    [PROF_EV_INSTRUCTIONS] = { "instructions", "PERF_COUNT_HW_INSTRUCTIONS", 0 },
    [PROF_EV_L1D_READ_MISS] = { "l1d-read-misses", "PERF_COUNT_HW_CACHE_L1D:READ:MISS", 0 },
    [PROF_EV_LLC_READ_MISS] = { "llc-read-misses", "PERF_COUNT_HW_CACHE_LL:READ:MISS", 0 },
    [PROF_EV_DTLB_READ_MISS] = { "dtlb-read-misses", "PERF_COUNT_HW_CACHE_DTLB:READ:MISS", 0 },
    [PROF_EV_TASK_CLOCK] = { "task-clock", NULL, PERF_COUNT_SW_TASK_CLOCK },
    [PROF_EV_PAGE_FAULTS] = { "page-faults", NULL, PERF_COUNT_SW_PAGE_FAULTS },
    [PROF_EV_MAJOR_FAULTS] = { "major-faults", NULL, PERF_COUNT_SW_PAGE_FAULTS_MAJ },
    [PROF_EV_MINOR_FAULTS] = { "minor-faults", NULL, PERF_COUNT_SW_PAGE_FAULTS_MIN },
    [PROF_EV_CTX_SWITCHES] = { "context-switches", NULL, PERF_COUNT_SW_CONTEXT_SWITCHES },
    [PROF_EV_CPU_MIGRATIONS] = { "cpu-migrations", NULL, PERF_COUNT_SW_CPU_MIGRATIONS },
};

const char *prof_ev_name(int ev)
{
    return ev >= 0 && ev < PROF_NEV ? evs[ev].name : "?";
}

int prof_ev_from_name(const char *name)
{
    for (int i = 0; i < PROF_NEV; i++)
        if (!strcmp(name, evs[i].name))
            return i;
    return -1;
}

int prof_ev_is_hw(int ev)
{
    return ev >= 0 && ev < PROF_EV_FIRST_SW;
}

static int read_paranoid(void)
{
    FILE *f = fopen("/proc/sys/kernel/perf_event_paranoid", "r");
    int v = -99;
    if (f) {
        if (fscanf(f, "%d", &v) != 1)
            v = -99;
        fclose(f);
    }
    return v;
}

static long sys_perf_event_open(struct perf_event_attr *a, int group_fd)
{
    return syscall(SYS_perf_event_open, a, 0 /* this thread */, -1 /* any cpu */,
                   group_fd, PERF_FLAG_FD_CLOEXEC);
}

#ifdef HAVE_LIBPFM
static pthread_once_t pfm_once = PTHREAD_ONCE_INIT;
static int pfm_rc;
static void pfm_init_once(void) { pfm_rc = pfm_initialize(); }
#endif

/* The attribute of event ev, or -1 with why[] filled. */
static int ev_attr(const prof_ctr *c, int ev, struct perf_event_attr *a, char *why,
                   size_t whylen)
{
    memset(a, 0, sizeof *a);
    if (prof_ev_is_hw(ev)) {
#ifdef HAVE_LIBPFM
        pthread_once(&pfm_once, pfm_init_once);
        if (pfm_rc != PFM_SUCCESS) {
            snprintf(why, whylen, "libpfm4: pfm_initialize: %s", pfm_strerror(pfm_rc));
            return -1;
        }
        pfm_perf_encode_arg_t arg;
        memset(&arg, 0, sizeof arg);
        arg.attr = a;
        arg.size = sizeof arg;
        int rc = pfm_get_os_event_encoding(evs[ev].pfm, PFM_PLM3, PFM_OS_PERF_EVENT, &arg);
        if (rc != PFM_SUCCESS) {
            snprintf(why, whylen, "libpfm4: %s: %s", evs[ev].pfm, pfm_strerror(rc));
            return -1;
        }
#else
        (void)c;
        snprintf(why, whylen, "built without libpfm4");
        return -1;
#endif
    } else {
        a->type = PERF_TYPE_SOFTWARE;
        a->config = evs[ev].config;
        if (c->sw_user_only) {
            a->exclude_kernel = 1;
            a->exclude_hv = 1;
        }
    }
    a->size = sizeof *a;
    a->disabled = 0;
    a->inherit = 0;
    a->read_format = PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED |
                     PERF_FORMAT_TOTAL_TIME_RUNNING;
    return 0;
}

void prof_ctr_init(prof_ctr *c, int on)
{
    memset(c, 0, sizeof *c);
    c->on = on;
    c->paranoid = read_paranoid();
    for (int ev = 0; ev < PROF_NEV; ev++) {
        struct perf_event_attr a;
        char why[PROF_REASON_LEN];
        if (!on) {
            snprintf(c->reason[ev], PROF_REASON_LEN, "counters off");
            continue;
        }
        if (ev_attr(c, ev, &a, why, sizeof why)) {
            snprintf(c->reason[ev], PROF_REASON_LEN, "%s", why);
            continue;
        }
        long fd = sys_perf_event_open(&a, -1);
        if (fd < 0 && errno == EACCES && !prof_ev_is_hw(ev) && !c->sw_user_only) {
            /* paranoid >= 2 without privileges: user-level counts only */
            c->sw_user_only = 1;
            ev_attr(c, ev, &a, why, sizeof why);
            fd = sys_perf_event_open(&a, -1);
        }
        if (fd < 0) {
            int e = errno;
            if (c->paranoid != -99)
                snprintf(c->reason[ev], PROF_REASON_LEN,
                         "perf_event_open: %s; perf_event_paranoid=%d", strerror(e),
                         c->paranoid);
            else
                snprintf(c->reason[ev], PROF_REASON_LEN, "perf_event_open: %s",
                         strerror(e));
            continue;
        }
        close((int)fd);
        c->avail[ev] = 1;
        c->attr[ev] = a;
    }
}

static void thr_close(prof_thr *t)
{
    for (int i = 0; i < t->n_fds; i++)
        close(t->fds[i]);
    memset(t, 0, sizeof *t);
}

void prof_ctr_free(prof_ctr *c)
{
    for (int i = 0; i < c->n_thr; i++)
        thr_close(&c->thr[i]);
    free(c->thr);
    c->thr = NULL;
    c->n_thr = 0;
}

int prof_threads_reset(prof *p, int n_threads)
{
    prof_ctr *c = &p->ctr;
    if (!c->on)
        return 0;
    for (int i = 0; i < c->n_thr; i++)
        thr_close(&c->thr[i]);
    atomic_store(&c->n_attached, 0);
    if (n_threads < 1)
        n_threads = 1;
    if (n_threads != c->n_thr) {
        prof_thr *t = calloc((size_t)n_threads, sizeof *t);
        if (!t)
            return -1;
        free(c->thr);
        c->thr = t;
        c->n_thr = n_threads;
    }
    return 0;
}

/* Open events [lo, hi) that the probe found, grouped under the first. */
static void open_groups(prof_ctr *c, prof_thr *t, int lo, int hi)
{
    prof_grp *g = NULL;
    for (int ev = lo; ev < hi; ev++) {
        if (!c->avail[ev])
            continue;
        struct perf_event_attr a = c->attr[ev];
        long fd = -1;
        if (g) {
            fd = sys_perf_event_open(&a, g->fd);
            if (fd >= 0) {
                g->ev[g->n++] = ev;
                t->fds[t->n_fds++] = (int)fd;
                continue;
            }
        }
        /* first of the range, or it would not join: a group of its own */
        fd = sys_perf_event_open(&a, -1);
        if (fd < 0)
            continue;   /* this thread cannot count it; the others still do */
        g = &t->grp[t->n_grp++];
        g->fd = (int)fd;
        g->n = 0;
        g->ev[g->n++] = ev;
        t->fds[t->n_fds++] = (int)fd;
    }
}

void prof_thread_attach(prof *p, int slot)
{
    prof_ctr *c = &p->ctr;
    if (!c->on || slot < 0 || slot >= c->n_thr)
        return;
    prof_thr *t = &c->thr[slot];
    if (t->n_fds)
        thr_close(t);
    open_groups(c, t, 0, PROF_EV_FIRST_SW);
    open_groups(c, t, PROF_EV_FIRST_SW, PROF_NEV);
    atomic_fetch_add(&c->n_attached, 1);
}

int prof_threads(const prof *p)
{
    return atomic_load(&((prof *)p)->ctr.n_attached);
}

void prof_ctr_read(prof_ctr *c, int64_t ev[PROF_NEV])
{
    for (int i = 0; i < PROF_NEV; i++)
        ev[i] = c->avail[i] ? 0 : -1;
    for (int i = 0; i < c->n_thr; i++) {
        const prof_thr *t = &c->thr[i];
        for (int g = 0; g < t->n_grp; g++) {
            /* nr, time_enabled, time_running, value[nr] */
            uint64_t buf[3 + PROF_NEV];
            ssize_t r = read(t->grp[g].fd, buf, sizeof buf);
            if (r < (ssize_t)(3 * sizeof(uint64_t)))
                continue;
            uint64_t nr = buf[0], en = buf[1], run = buf[2];
            if (nr > (uint64_t)t->grp[g].n ||
                (size_t)r < (3 + nr) * sizeof(uint64_t))
                continue;
            for (uint64_t k = 0; k < nr; k++) {
                uint64_t v = buf[3 + k];
                if (run == 0)
                    v = 0;
                else if (run < en)   /* multiplexed: scale like perf stat */
                    v = (uint64_t)((double)v * (double)en / (double)run);
                /* saturate rather than overflow a signed sum */
                int64_t *dst = &ev[t->grp[g].ev[k]];
                if (v > (uint64_t)(INT64_MAX - *dst))
                    *dst = INT64_MAX;
                else
                    *dst += (int64_t)v;
            }
        }
    }
}
