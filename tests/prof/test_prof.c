/*
 * test_prof.c — src/prof on its own: counter availability agrees with what
 * the kernel says, counters count (page faults of this thread and of a
 * worker), the ring hands out whole records under a concurrent writer and
 * reports what it lost, totals are the sums they claim, the file hash is
 * the documented one, and the run log round-trips, migrates an older
 * schema and refuses what it must.
 *
 * "The report" (with its section numbers) is the Pipeline-Native
 * Transformers report.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <linux/perf_event.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <sqlite3.h>

#include "prof/prof.h"
#include "testutil.h"

/* ------------------------------------------------------------ helpers */

/* What the kernel says when this test opens a software event itself. */
static int direct_sw_open(uint64_t config, int *err)
{
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_SOFTWARE;
    a.config = config;
    long fd = syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
    if (fd < 0 && errno == EACCES) {
        a.exclude_kernel = 1;
        a.exclude_hv = 1;
        fd = syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
    }
    *err = fd < 0 ? errno : 0;
    if (fd >= 0)
        close((int)fd);
    return fd >= 0;
}

static int direct_hw_open(uint64_t config, int *err)
{
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_HARDWARE;
    a.config = config;
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    long fd = syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
    *err = fd < 0 ? errno : 0;
    if (fd >= 0)
        close((int)fd);
    return fd >= 0;
}

/* Touch n_pages fresh pages (no huge pages: one fault per page). */
static void touch_pages(size_t n_pages)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), len = n_pages * pg;
    unsigned char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                            -1, 0);
    assert_true(m != MAP_FAILED);
    madvise(m, len, MADV_NOHUGEPAGE);
    for (size_t i = 0; i < len; i += pg)
        m[i] = (unsigned char)i;
    munmap(m, len);
}

static void spin(double s)
{
    double t0 = prof_now();
    while (prof_now() - t0 < s)
        ;
}

/* ------------------------------------------------------------ events */

static void test_event_names(void **state)
{
    (void)state;
    for (int e = 0; e < PROF_NEV; e++) {
        assert_int_equal(prof_ev_from_name(prof_ev_name(e)), e);
        assert_int_equal(prof_ev_is_hw(e), e < PROF_EV_FIRST_SW);
    }
    assert_int_equal(prof_ev_from_name("bogus"), -1);
    assert_string_equal(prof_ev_name(PROF_EV_CTX_SWITCHES), "context-switches");
    assert_string_equal(prof_stream_name(PROF_ST_IO_WAIT), "io-wait");
}

static void test_counters_line(void **state)
{
    (void)state;
    int64_t ev[PROF_NEV];
    const char *why[PROF_NEV] = { 0 };
    char buf[1024];
    for (int e = 0; e < PROF_NEV; e++)
        ev[e] = -1;
    ev[PROF_EV_TASK_CLOCK] = 12345678;
    ev[PROF_EV_PAGE_FAULTS] = 120;
    ev[PROF_EV_CTX_SWITCHES] = 4;
    why[PROF_EV_CYCLES] = why[PROF_EV_INSTRUCTIONS] = "perf_event_open: No such file or directory; perf_event_paranoid=2";
    why[PROF_EV_L1D_READ_MISS] = "libpfm4: x: event not found";
    why[PROF_EV_LLC_READ_MISS] = why[PROF_EV_CYCLES];
    size_t n = prof_counters_line(ev, why, buf, sizeof buf);
    assert_int_equal(n, strlen(buf));
    assert_string_equal(buf,
        "task-clock 12.3 ms, page-faults 120, context-switches 4; unavailable: "
        "major-faults, minor-faults, cpu-migrations, dtlb-read-misses, cycles, "
        "instructions, llc-read-misses (perf_event_open: No such file or directory; "
        "perf_event_paranoid=2), l1d-read-misses (libpfm4: x: event not found)");
    /* IPC with both present; a short buffer still reports the full length */
    ev[PROF_EV_CYCLES] = 1000;
    ev[PROF_EV_INSTRUCTIONS] = 2500;
    n = prof_counters_line(ev, why, buf, sizeof buf);
    assert_non_null(strstr(buf, "cycles 1000, instructions 2500 (IPC 2.50)"));
    char small[16];
    assert_int_equal(prof_counters_line(ev, why, small, sizeof small), n);
    assert_int_equal(strlen(small), sizeof small - 1);
}

/* Availability and reasons agree with what the kernel tells this test. */
static void test_counters_probe(void **state)
{
    (void)state;
    prof *p;
    char err[256];
    assert_int_equal(prof_new(&p, PROF_COUNTERS, 2, err, sizeof err), 0);
    static const struct { int ev; uint64_t cfg; } sw[] = {
        { PROF_EV_TASK_CLOCK, PERF_COUNT_SW_TASK_CLOCK },
        { PROF_EV_PAGE_FAULTS, PERF_COUNT_SW_PAGE_FAULTS },
        { PROF_EV_CTX_SWITCHES, PERF_COUNT_SW_CONTEXT_SWITCHES },
        { PROF_EV_CPU_MIGRATIONS, PERF_COUNT_SW_CPU_MIGRATIONS },
    };
    for (size_t i = 0; i < sizeof sw / sizeof *sw; i++) {
        int e, ok = direct_sw_open(sw[i].cfg, &e);
        fprintf(stderr, "%-18s %s %s\n", prof_ev_name(sw[i].ev),
                prof_ev_available(p, sw[i].ev) ? "available" : "unavailable:",
                prof_ev_reason(p, sw[i].ev));
        assert_int_equal(prof_ev_available(p, sw[i].ev), ok);
        if (!ok) {
            assert_non_null(strstr(prof_ev_reason(p, sw[i].ev), strerror(e)));
            assert_non_null(strstr(prof_ev_reason(p, sw[i].ev), "perf_event_paranoid="));
        } else {
            assert_string_equal(prof_ev_reason(p, sw[i].ev), "");
        }
    }
    int e, ok = direct_hw_open(PERF_COUNT_HW_CPU_CYCLES, &e);
    fprintf(stderr, "%-18s %s %s\n", "cycles",
            prof_ev_available(p, PROF_EV_CYCLES) ? "available" : "unavailable:",
            prof_ev_reason(p, PROF_EV_CYCLES));
#ifdef HAVE_LIBPFM
    assert_int_equal(prof_ev_available(p, PROF_EV_CYCLES), ok);
    if (!ok) {
        assert_non_null(strstr(prof_ev_reason(p, PROF_EV_CYCLES), strerror(e)));
        assert_non_null(strstr(prof_ev_reason(p, PROF_EV_CYCLES), "perf_event_paranoid="));
    }
#else
    (void)ok;
    assert_false(prof_ev_available(p, PROF_EV_CYCLES));
    assert_string_equal(prof_ev_reason(p, PROF_EV_CYCLES), "built without libpfm4");
#endif
    /* every event is either available or says why not */
    for (int k = 0; k < PROF_NEV; k++)
        assert_true(prof_ev_available(p, k) != (prof_ev_reason(p, k)[0] != 0));
    prof_free(p);

    /* without PROF_COUNTERS nothing is opened and the reason says so */
    assert_int_equal(prof_new(&p, 0, 1, err, sizeof err), 0);
    for (int k = 0; k < PROF_NEV; k++) {
        assert_false(prof_ev_available(p, k));
        assert_string_equal(prof_ev_reason(p, k), "counters off");
    }
    prof_free(p);
}

static prof *worker_p;
static pthread_barrier_t bar;

static void *fault_worker(void *arg)
{
    (void)arg;
    prof_thread_attach(worker_p, 1);
    pthread_barrier_wait(&bar);   /* attached */
    pthread_barrier_wait(&bar);   /* the token has begun */
    touch_pages(4096);
    pthread_barrier_wait(&bar);   /* done: the token may end */
    return NULL;
}

/* Page faults taken by this thread and by a worker both land in the token. */
static void test_counters_count(void **state)
{
    (void)state;
    prof *p;
    char err[256];
    prof_tok rec;
    uint64_t cur;
    assert_int_equal(prof_new(&p, PROF_COUNTERS, 1, err, sizeof err), 0);
    assert_int_equal(prof_threads_reset(p, 2), 0);
    prof_thread_attach(p, 0);
    worker_p = p;
    pthread_barrier_init(&bar, NULL, 2);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, fault_worker, NULL), 0);
    pthread_barrier_wait(&bar);
    assert_int_equal(prof_threads(p), 2);

    prof_run_begin(p, 0, 0);
    cur = prof_ring_head(p);
    prof_token_begin(p);
    pthread_barrier_wait(&bar);
    touch_pages(8192);
    pthread_barrier_wait(&bar);
    prof_token_end(p, PROF_DECODE);
    pthread_join(t, NULL);
    pthread_barrier_destroy(&bar);
    assert_int_equal(prof_ring_read(p, &cur, &rec, 1, NULL), 1);

    int e;
    if (direct_sw_open(PERF_COUNT_SW_PAGE_FAULTS, &e)) {
        fprintf(stderr, "page faults in the token: %lld (minor %lld), task-clock %lld ns\n",
                (long long)rec.ev[PROF_EV_PAGE_FAULTS], (long long)rec.ev[PROF_EV_MINOR_FAULTS],
                (long long)rec.ev[PROF_EV_TASK_CLOCK]);
        /* 8192 by this thread plus 4096 by the worker */
        assert_true(rec.ev[PROF_EV_PAGE_FAULTS] >= 8192 + 4096);
        assert_true(rec.ev[PROF_EV_PAGE_FAULTS] < 3 * (8192 + 4096));
        assert_true(rec.ev[PROF_EV_MINOR_FAULTS] >= 8192 + 4096);
        assert_true(rec.ev[PROF_EV_TASK_CLOCK] > 0);
        prof_totals tt;
        prof_totals_get(p, &tt);
        assert_int_equal(tt.ev[PROF_EV_PAGE_FAULTS], rec.ev[PROF_EV_PAGE_FAULTS]);
    } else {
        assert_int_equal(rec.ev[PROF_EV_PAGE_FAULTS], -1);
    }
    for (int k = 0; k < PROF_NEV; k++)
        if (!prof_ev_available(p, k))
            assert_int_equal(rec.ev[k], -1);
    prof_free(p);
}

/* ------------------------------------------------------------ ring */

static void test_ring_overflow(void **state)
{
    (void)state;
    prof *p;
    char err[256];
    assert_int_equal(prof_new(&p, 0, 1, err, sizeof err), 0);
    uint64_t gen = prof_run_begin(p, 0, 0), cur = prof_ring_head(p), lost = 0;
    for (int i = 0; i < PROF_RING_CAP + 100; i++) {
        prof_token_begin(p);
        prof_token_end(p, i < 10 ? PROF_PREFILL : PROF_DECODE);
    }
    prof_tok *out = malloc(PROF_RING_CAP * 2 * sizeof *out);
    assert_non_null(out);
    size_t n = prof_ring_read(p, &cur, out, PROF_RING_CAP * 2, &lost);
    assert_int_equal(lost, 100);
    assert_int_equal(n, PROF_RING_CAP);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(out[i].idx, 100 + i);
        assert_int_equal(out[i].run, gen);
        assert_int_equal(out[i].phase, PROF_DECODE);
    }
    assert_int_equal(prof_ring_read(p, &cur, out, 10, &lost), 0);
    /* a new run restarts the index and changes the generation */
    uint64_t gen2 = prof_run_begin(p, 0, 0);
    assert_true(gen2 != gen);
    prof_token_begin(p);
    prof_token_end(p, PROF_PREFILL);
    assert_int_equal(prof_ring_read(p, &cur, out, 10, &lost), 1);
    assert_int_equal(out[0].idx, 0);
    assert_int_equal(out[0].run, gen2);
    free(out);
    prof_free(p);
}

typedef struct rd_arg {
    prof          *p;
    uint64_t       total;
    uint64_t       got, lost;
    int            bad;
    atomic_int    *done;
} rd_arg;

static void *ring_reader(void *arg)
{
    rd_arg *a = arg;
    uint64_t cur = 0, last = 0;
    int first = 1;
    prof_tok buf[7];
    for (;;) {
        int fin = atomic_load(a->done);
        size_t n = prof_ring_read(a->p, &cur, buf, 7, &a->lost);
        for (size_t i = 0; i < n; i++) {
            const prof_tok *r = &buf[i];
            /* phase and the layer sums were written from idx: a torn copy
             * would mix two records */
            uint64_t want_phase = r->idx % 3 ? PROF_DECODE : PROF_PREFILL;
            if (r->phase != want_phase || (!first && r->idx <= last) || r->dt < 0 ||
                r->t < 0)
                a->bad++;
            first = 0;
            last = r->idx;
            a->got++;
        }
        if (fin && n == 0 && cur == prof_ring_head(a->p))
            break;
    }
    return NULL;
}

static void test_ring_concurrent(void **state)
{
    (void)state;
    prof *p;
    char err[256];
    atomic_int done = 0;
    assert_int_equal(prof_new(&p, 0, 1, err, sizeof err), 0);
    prof_run_begin(p, 0, 0);
    rd_arg a = { p, 200000, 0, 0, 0, &done };
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, ring_reader, &a), 0);
    for (uint64_t i = 0; i < a.total; i++) {
        prof_token_begin(p);
        prof_token_end(p, i % 3 ? PROF_DECODE : PROF_PREFILL);
    }
    atomic_store(&done, 1);
    pthread_join(t, NULL);
    fprintf(stderr, "ring: %llu read, %llu lost, %d bad\n", (unsigned long long)a.got,
            (unsigned long long)a.lost, a.bad);
    assert_int_equal(a.bad, 0);
    assert_int_equal(a.got + a.lost, a.total);
    prof_free(p);
}

/* ------------------------------------------------------------ totals */

/* Staged over sync: the measured speedup, the report's model and its
 * refined form (interference tax, the sync arm's stall as its read). */
static void test_io_compare(void **state)
{
    (void)state;
    prof_io_fig y, g;
    prof_io_ab r;
    /* sync: C 2, IO 3 (busy), stall 2.5; staged: C 2.5, IO_eff 2 */
    prof_io_derive(2.0, 3.0, 2.5, 100, &y);
    prof_io_derive(2.5, 2.0, 0.5, 100, &g);
    prof_io_compare(5.0, &y, 3.0, &g, &r);
    assert_float_equal(r.net, 5.0 / 3.0, 1e-12);
    assert_float_equal(r.model, 5.0 / 2.0, 1e-12);     /* (2 + 3) / max(2, 2) */
    assert_float_equal(r.tau, 0.25, 1e-12);
    assert_float_equal(r.refined, 4.5 / 2.5, 1e-12);   /* (2 + 2.5) / max(2.5, 2) */
    /* I/O-bound staged run: IO_eff sets both denominators */
    prof_io_derive(2.2, 4.0, 1.8, 100, &g);
    prof_io_compare(5.0, &y, 4.5, &g, &r);
    assert_float_equal(r.model, 5.0 / 4.0, 1e-12);
    assert_float_equal(r.tau, 0.1, 1e-12);
    assert_float_equal(r.refined, 4.5 / 4.0, 1e-12);
    /* nothing measured: ratios are 0, never a division by zero */
    prof_io_derive(0.0, 0.0, 0.0, 0, &y);
    prof_io_derive(0.0, 0.0, 0.0, 0, &g);
    prof_io_compare(0.0, &y, 0.0, &g, &r);
    assert_true(r.net == 0.0 && r.model == 0.0 && r.tau == 0.0 && r.refined == 0.0);
}

static void test_totals(void **state)
{
    (void)state;
    prof *p;
    char err[256];
    const unsigned L = 3;
    assert_int_equal(prof_new(&p, PROF_LAYERS, L, err, sizeof err), 0);
    prof_run_begin(p, 1000000, 4.0);
    double st_sum[PROF_NST] = { 0 };
    uint64_t cur = prof_ring_head(p);
    for (int i = 0; i < 6; i++) {
        prof_token_begin(p);
        double t = prof_now();
        for (unsigned l = 0; l < L; l++) {
            spin(0.0002);
            t = prof_layer_mark(p, l, PROF_ST_ATTN, t);
            spin(0.0001);
            t = prof_layer_mark(p, l, PROF_ST_FFN, t);
        }
        prof_token_end(p, i < 2 ? PROF_PREFILL : PROF_DECODE);
    }
    /* out-of-range layers and streams are ignored */
    prof_layer_mark(p, L, PROF_ST_ATTN, prof_now() - 1.0);
    prof_layer_mark(p, 0, (enum prof_stream)PROF_NST, prof_now() - 1.0);

    prof_tok recs[8];
    size_t n = prof_ring_read(p, &cur, recs, 8, NULL);
    assert_int_equal(n, 6);
    double pre = 0, dec = 0, dec_st[PROF_NST] = { 0 };
    for (size_t i = 0; i < n; i++) {
        if (recs[i].phase == PROF_PREFILL)
            pre += recs[i].dt;
        else
            dec += recs[i].dt;
        for (int k = 0; k < PROF_NST; k++) {
            st_sum[k] += recs[i].st[k];
            if (recs[i].phase == PROF_DECODE)
                dec_st[k] += recs[i].st[k];
        }
        /* a token's parts fit inside it */
        assert_true(recs[i].st[PROF_ST_ATTN] + recs[i].st[PROF_ST_FFN] <= recs[i].dt);
        assert_true(recs[i].st[PROF_ST_ATTN] >= L * 0.0002);
        if (i)
            assert_true(recs[i].t >= recs[i - 1].t + recs[i - 1].dt);
    }
    prof_totals t;
    prof_totals_get(p, &t);
    assert_int_equal(t.n_prompt, 2);
    assert_int_equal(t.n_gen, 4);
    assert_true(t.prefill_s == pre && t.decode_s == dec);
    assert_true(t.prefill_tok_s == 2 / pre);
    assert_true(t.decode_tok_s == 4 / dec);
    assert_true(fabs(t.gb_s - 4.0 * 1000000 / dec / 1e9) < 1e-12 * t.gb_s + 1e-15);
    assert_true(fabs(t.bw_share - t.gb_s / 4.0) < 1e-12);
    double attn = 0, ffn = 0;
    for (unsigned l = 0; l < L; l++) {
        attn += prof_layer_seconds(p, l, PROF_ST_ATTN);
        ffn += prof_layer_seconds(p, l, PROF_ST_FFN);
        assert_true(prof_layer_seconds(p, l, PROF_ST_EXPERTS) == 0);
    }
    /* the layer sums cover the decode tokens, in whole nanoseconds; the
     * run's stream totals all six */
    assert_true(fabs(attn - dec_st[PROF_ST_ATTN]) < 1e-8 * 4 * L);
    assert_true(fabs(ffn - dec_st[PROF_ST_FFN]) < 1e-8 * 4 * L);
    assert_true(t.st[PROF_ST_ATTN] > dec_st[PROF_ST_ATTN] + L * 0.0002);
    assert_true(t.dec_st[PROF_ST_ATTN] == dec_st[PROF_ST_ATTN] &&
                t.dec_st[PROF_ST_FFN] == dec_st[PROF_ST_FFN]);
    assert_true(fabs(st_sum[PROF_ST_ATTN] - t.st[PROF_ST_ATTN]) < 1e-12);
    /* counters off: every total is -1 */
    for (int k = 0; k < PROF_NEV; k++)
        assert_int_equal(t.ev[k], -1);
    /* a new run starts from zero */
    prof_run_begin(p, 0, 0);
    prof_totals_get(p, &t);
    assert_int_equal(t.n_prompt + t.n_gen, 0);
    assert_true(prof_layer_seconds(p, 0, PROF_ST_ATTN) == 0);
    prof_free(p);
}

/* ------------------------------------------------------------ machine, hash, path */

static uint64_t fnv(uint64_t h, const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static void test_file_hash(void **state)
{
    (void)state;
    char hex[17], want[17], err[256];
    uint64_t size;
    /* small file: size, the whole file (first MiB), the whole file (last 64 KiB) */
    const char *small = tu_tmp("small.bin");
    const unsigned char data[] = "cflow hash";
    assert_int_equal(tu_write_file(small, data, 10), 0);
    unsigned char sz[8] = { 10 };
    uint64_t h = fnv(0xcbf29ce484222325ULL, sz, 8);
    h = fnv(fnv(h, data, 10), data, 10);
    snprintf(want, sizeof want, "%016llx", (unsigned long long)h);
    assert_int_equal(prof_file_hash(small, hex, &size, err, sizeof err), 0);
    assert_int_equal(size, 10);
    assert_string_equal(hex, want);

    /* a 8 MiB file: a byte in a sampled block changes it, a byte outside
     * every sampled range does not (documented as a cheap hash) */
    size_t n = (size_t)8 << 20;
    unsigned char *b = malloc(n);
    assert_non_null(b);
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(i * 2654435761u >> 13);
    const char *big = tu_tmp("big.bin");
    char h0[17], h1[17], h2[17];
    assert_int_equal(tu_write_file(big, b, n), 0);
    assert_int_equal(prof_file_hash(big, h0, &size, err, sizeof err), 0);
    size_t step = (n - 4096) / 63;
    b[20 * step + 100] ^= 1;  /* inside sampled block 20 (past the first MiB) */
    assert_int_equal(tu_write_file(big, b, n), 0);
    assert_int_equal(prof_file_hash(big, h1, &size, err, sizeof err), 0);
    assert_string_not_equal(h0, h1);
    b[20 * step + 100] ^= 1;
    b[20 * step + 8192] ^= 1; /* between samples */
    assert_int_equal(tu_write_file(big, b, n), 0);
    assert_int_equal(prof_file_hash(big, h2, &size, err, sizeof err), 0);
    assert_string_equal(h0, h2);
    free(b);
    assert_int_equal(prof_file_hash(tu_tmp("missing"), hex, &size, err, sizeof err), -1);
    assert_non_null(strstr(err, "missing"));
}

static void test_machine(void **state)
{
    (void)state;
    char cpu[256];
    prof_cpu_model(cpu, sizeof cpu);
    assert_true(cpu[0] != 0);
    assert_null(strchr(cpu, '\n'));
    assert_true(prof_cpu_cores() >= 1);
}

/* $CFLOW_FAULT's grammar and each fault's N, read through the one parser
 * the run log, the expert readers and eng_env_check share. */
static void test_fault_grammar(void **state)
{
    (void)state;
    static const char *const good[] = {
        "runlog:enospc", "runlog:busy@0", "expert-read:eio@12", "uring-init:eperm",
        "expert-read:short@3,runlog:busy,uring-init:eperm", "serve:step-ms@20",
        "convert:enospc@4096", "runlog:enospc@3,convert:enospc",
    };
    static const char *const bad[] = {
        "", "runlog:enopsc", "runlog:busy@", "runlog:busy@x", "runlog:busy@1x",
        "uring-init:eperm@1", "expert-read:eio,", ",runlog:busy", "expert-read:eio@-1",
        "expert-read:eiox", "runlog:busy runlog:enospc", "convert:enospc@", "convert:eio",
    };
    unsigned long at = 99;
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        assert_int_equal(prof_fault_ok(good[i]), 1);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_int_equal(prof_fault_ok(bad[i]), 0);

    unsetenv("CFLOW_FAULT");
    assert_int_equal(prof_fault_get("runlog:busy", &at), 0);
    assert_int_equal(at, 0);
    setenv("CFLOW_FAULT", "expert-read:short@7,runlog:busy@3,uring-init:eperm", 1);
    assert_int_equal(prof_fault_get("expert-read:short", &at), 1);
    assert_int_equal(at, 7);
    assert_int_equal(prof_fault_get("runlog:busy", &at), 1);
    assert_int_equal(at, 3);
    assert_int_equal(prof_fault_get("uring-init:eperm", &at), 1);
    assert_int_equal(at, 0);
    assert_int_equal(prof_fault_get("uring-init:eperm", NULL), 1);
    assert_int_equal(prof_fault_get("expert-read:eio", &at), 0);
    assert_int_equal(prof_fault_get("runlog:enospc", &at), 0);
    /* a name inside another item is not that fault */
    setenv("CFLOW_FAULT", "expert-read:eio@5", 1);
    assert_int_equal(prof_fault_get("expert-read:eio", &at), 1);
    assert_int_equal(at, 5);
    assert_int_equal(prof_fault_get("runlog:busy", &at), 0);
    /* a value outside the grammar names nothing, not its readable part */
    setenv("CFLOW_FAULT", "runlog:busy@2,expert-read:typo", 1);
    assert_int_equal(prof_fault_get("runlog:busy", &at), 0);
    assert_int_equal(at, 0);
    unsetenv("CFLOW_FAULT");
}

static void test_default_path(void **state)
{
    (void)state;
    char buf[4096];
    char *save_db = getenv("CFLOW_DB") ? strdup(getenv("CFLOW_DB")) : NULL;
    setenv("CFLOW_DB", "/x/y.db", 1);
    assert_int_equal(prof_log_default_path(buf, sizeof buf), 0);
    assert_string_equal(buf, "/x/y.db");
    unsetenv("CFLOW_DB");
    setenv("XDG_DATA_HOME", "/data", 1);
    assert_int_equal(prof_log_default_path(buf, sizeof buf), 0);
    assert_string_equal(buf, "/data/cflow/runs.db");
    setenv("XDG_DATA_HOME", "relative", 1);   /* ignored, as XDG says */
    setenv("HOME", "/home/u", 1);
    assert_int_equal(prof_log_default_path(buf, sizeof buf), 0);
    assert_string_equal(buf, "/home/u/.local/share/cflow/runs.db");
    unsetenv("XDG_DATA_HOME");
    setenv("CFLOW_DB", "", 1);                /* empty: as if unset */
    assert_int_equal(prof_log_default_path(buf, sizeof buf), 0);
    assert_string_equal(buf, "/home/u/.local/share/cflow/runs.db");
    unsetenv("HOME");
    assert_int_equal(prof_log_default_path(buf, sizeof buf), -1);
    if (save_db)
        setenv("CFLOW_DB", save_db, 1);
    else
        unsetenv("CFLOW_DB");
    free(save_db);
}

/* ------------------------------------------------------------ run log */


static void test_log_roundtrip(void **state)
{
    (void)state;
    const char *db = tu_tmp("sub/dir/runs.db");   /* folders are made */
    char err[512];
    prof_log *l;
    prof *p;
    assert_int_equal(prof_log_open(&l, db, PROF_LOG_CREATE, err, sizeof err), 0);
    assert_int_equal(prof_log_opened_version(l), 0);
    assert_int_equal(prof_new(&p, PROF_LAYERS, 2, err, sizeof err), 0);
    prof_machine m = { "host", "CPU X", "avx2", 4, 12.5 };
    prof_model_info mi = { .path = "/m/a.cflow", .hash = "00aa", .arch = "llama",
                           .quant = "q8_0", .size = 999, .n_layers = 2, .dim = 64 };
    prof_run_cfg c = { .threads = 3, .prefetch = "off", .expert_io = "none", .n_ctx = 128,
                       .temp = 0.5, .top_k = 7, .top_p = 0.9, .min_p = 0.1,
                       .rep_penalty = 1.1, .rep_last_n = 32, .seed = UINT64_MAX,
                       .expert_ahead = 3 };
    assert_int_equal(prof_log_session(l, &m, &mi, "test", err, sizeof err), 0);
    assert_true(prof_log_machine_bw(l, &m) == 12.5);
    prof_run_begin(p, 4096, 12.5);
    int64_t id;
    assert_int_equal(prof_log_run_begin(l, p, &c, &id, err, sizeof err), 0);
    for (int i = 0; i < 150; i++) {
        prof_token_begin(p);
        double t = prof_now();
        t = prof_layer_mark(p, 0, PROF_ST_ATTN, t);
        prof_layer_mark(p, 1, PROF_ST_FFN, t);
        prof_token_end(p, i < 20 ? PROF_PREFILL : PROF_DECODE);
        if (prof_log_due(l, p))
            assert_int_equal(prof_log_flush(l, p, 0, err, sizeof err), 0);
    }
    /* a batch is due after 64 tokens: some are in the log already */
    int64_t mid = tu_db_int(db, "SELECT count(*) FROM token");
    assert_true(mid >= 64 && mid < 150);
    assert_int_equal(prof_log_flush(l, p, 1, err, sizeof err), 0);
    prof_totals t;
    prof_totals_get(p, &t);

    prof_run_row *rows;
    size_t n;
    assert_int_equal(prof_log_list(l, NULL, &rows, &n, err, sizeof err), 0);
    assert_int_equal(n, 1);
    assert_int_equal(rows[0].id, id);
    assert_string_equal(rows[0].status, "done");
    assert_true(rows[0].ended[0] != 0);
    assert_string_equal(rows[0].model, "/m/a.cflow");
    assert_string_equal(rows[0].quant, "q8_0");
    assert_int_equal(rows[0].threads, 3);
    assert_int_equal(rows[0].top_k, 7);
    assert_true(rows[0].seed == UINT64_MAX);
    assert_int_equal(rows[0].expert_ahead, 3);
    assert_int_equal(rows[0].n_prompt, 20);
    assert_int_equal(rows[0].n_gen, 130);
    assert_true(rows[0].decode_tok_s == t.decode_tok_s);
    assert_true(rows[0].prefill_tok_s == t.prefill_tok_s);
    assert_true(rows[0].gb_s == t.gb_s);
    assert_true(rows[0].read_bw_gbs == 12.5);
    assert_int_equal(rows[0].ev[PROF_EV_CYCLES], -1);
    assert_string_equal(rows[0].ev_reason[PROF_EV_CYCLES], "counters off");
    free(rows);
    /* the model filter: part of the path or the hash */
    assert_int_equal(prof_log_list(l, "a.cflow", &rows, &n, err, sizeof err), 0);
    free(rows);
    assert_int_equal(n, 1);
    assert_int_equal(prof_log_list(l, "00aa", &rows, &n, err, sizeof err), 0);
    free(rows);
    assert_int_equal(n, 1);
    assert_int_equal(prof_log_list(l, "other", &rows, &n, err, sizeof err), 0);
    free(rows);
    assert_int_equal(n, 0);

    prof_tok *toks;
    assert_int_equal(prof_log_tokens(l, id, &toks, &n, err, sizeof err), 0);
    assert_int_equal(n, 150);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(toks[i].idx, i);
        assert_int_equal(toks[i].phase, i < 20 ? PROF_PREFILL : PROF_DECODE);
    }
    free(toks);
    double *sec;
    unsigned nl;
    uint64_t ntok;
    assert_int_equal(prof_log_layers(l, id, &sec, &nl, &ntok, err, sizeof err), 0);
    assert_int_equal(nl, 2);
    assert_int_equal(ntok, 130);   /* the per-layer rows: decode tokens */
    assert_true(sec[0 * PROF_NST + PROF_ST_ATTN] > 0 && sec[1 * PROF_NST + PROF_ST_FFN] > 0);
    assert_true(sec[0 * PROF_NST + PROF_ST_FFN] == 0);
    free(sec);
    prof_run_row r;
    assert_int_equal(prof_log_get(l, id + 1, &r, err, sizeof err), 1);
    prof_log_close(l);
    prof_free(p);
    assert_int_equal(tu_db_int(db, "PRAGMA user_version"), PROF_LOG_SCHEMA);
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM counter WHERE run_id = 1"), PROF_NEV);

    /* opening again changes nothing */
    assert_int_equal(prof_log_open(&l, db, 0, err, sizeof err), 0);
    assert_int_equal(prof_log_opened_version(l), PROF_LOG_SCHEMA);
    prof_log_close(l);
    /* without PROF_LOG_CREATE a missing file is an error */
    assert_true(prof_log_open(&l, tu_tmp("nope.db"), 0, err, sizeof err) < 0);
    assert_non_null(strstr(err, "nope.db"));
}

static void load_sql(const char *db, const char *sql_path)
{
    char *sql = tu_read_file(sql_path, NULL);
    if (!sql) {
        fprintf(stderr, "test setup: cannot read %s\n", sql_path);
        fail();
    }
    sqlite3 *d;
    assert_int_equal(sqlite3_open(db, &d), SQLITE_OK);
    char *msg = NULL;
    int rc = sqlite3_exec(d, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK)
        fprintf(stderr, "%s: %s\n", sql_path, msg);
    assert_int_equal(rc, SQLITE_OK);
    sqlite3_close(d);
    free(sql);
}

static const char *fixture(const char *name)
{
    static char buf[4096];
    const char *src = getenv("CFLOW_SRCDIR");
    snprintf(buf, sizeof buf, "%s/tests/prof/%s", src && *src ? src : ".", name);
    tu_require(buf);
    return buf;
}

static void test_log_migrate_v1(void **state)
{
    (void)state;
    const char *db = tu_tmp("old.db");
    char err[512];
    load_sql(db, fixture("runs-v1.sql"));
    assert_int_equal(tu_db_int(db, "PRAGMA user_version"), 1);

    prof_log *l;
    assert_int_equal(prof_log_open(&l, db, 0, err, sizeof err), 0);
    assert_int_equal(prof_log_opened_version(l), 1);
    prof_run_row *rows;
    size_t n;
    assert_int_equal(prof_log_list(l, NULL, &rows, &n, err, sizeof err), 0);
    assert_int_equal(n, 3);
    assert_int_equal(rows[0].threads, 4);
    assert_int_equal(rows[0].n_gen, 100);
    assert_true(rows[0].decode_tok_s == 50.0);      /* 100 tokens / 2 s */
    assert_true(rows[0].prefill_tok_s == 10.0);     /* 5 tokens / 0.5 s */
    assert_string_equal(rows[0].status, "done");
    assert_string_equal(rows[0].prefetch, "off");
    assert_string_equal(rows[0].expert_io, "none");
    assert_string_equal(rows[0].model, "/models/old-stories.cflow");
    assert_string_equal(rows[0].cpu_model, "Old CPU 3000");
    assert_int_equal(rows[1].threads, 8);
    assert_true(rows[1].decode_tok_s == 100.0);
    assert_string_equal(rows[2].status, "interrupted");
    assert_int_equal(rows[2].seed, 9);
    for (int e = 0; e < PROF_NEV; e++)
        assert_int_equal(rows[0].ev[e], -1);
    free(rows);
    prof_tok *toks;
    assert_int_equal(prof_log_tokens(l, 1, &toks, &n, err, sizeof err), 0);
    assert_int_equal(n, 3);
    assert_int_equal(toks[2].phase, PROF_DECODE);
    assert_true(toks[2].dt == 0.02);
    free(toks);

    /* and the migrated log takes new runs */
    prof *p;
    assert_int_equal(prof_new(&p, 0, 1, err, sizeof err), 0);
    prof_machine m = { "oldhost", "Old CPU 3000", "avx2", 8, 0 };
    prof_model_info mi = { .path = "/models/old-stories.cflow", .hash = "0123456789abcdef",
                           .arch = "llama", .quant = "f32", .size = 1048576, .n_layers = 1 };
    prof_run_cfg c = { .threads = 2, .expert_ahead = -1 };   /* a dense model's */
    assert_int_equal(prof_log_session(l, &m, &mi, "test", err, sizeof err), 0);
    prof_run_begin(p, 0, 0);
    assert_int_equal(prof_log_run_begin(l, p, &c, NULL, err, sizeof err), 0);
    prof_token_begin(p);
    prof_token_end(p, PROF_PREFILL);
    assert_int_equal(prof_log_flush(l, p, 1, err, sizeof err), 0);
    prof_free(p);
    prof_log_close(l);
    assert_int_equal(tu_db_int(db, "PRAGMA user_version"), PROF_LOG_SCHEMA);
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM run"), 4);
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM run WHERE expert_ahead IS NULL"), 4);
    /* the old model row was reused and got its geometry */
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM model"), 1);
    assert_int_equal(tu_db_int(db, "SELECT n_layers FROM model"), 1);
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM machine"), 1);
    sqlite3 *d;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open(db, &d), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(d, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "ok");
    sqlite3_finalize(st);
    sqlite3_close(d);
}

static void test_log_refuses(void **state)
{
    (void)state;
    char err[512];
    prof_log *l;
    /* newer than this program */
    const char *db = tu_tmp("new.db");
    sqlite3 *d;
    assert_int_equal(sqlite3_open(db, &d), SQLITE_OK);
    assert_int_equal(sqlite3_exec(d, "PRAGMA user_version=99", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(d);
    assert_true(prof_log_open(&l, db, PROF_LOG_CREATE, err, sizeof err) < 0);
    assert_non_null(strstr(err, "newer"));
    assert_non_null(strstr(err, db));
    assert_int_equal(tu_db_int(db, "PRAGMA user_version"), 99);   /* untouched */
    /* not a database */
    const char *junk = tu_tmp("junk.db");
    char garbage[8192];
    for (size_t i = 0; i < sizeof garbage; i++)
        garbage[i] = (char)(i * 7 + 3);
    assert_int_equal(tu_write_file(junk, garbage, sizeof garbage), 0);
    assert_true(prof_log_open(&l, junk, PROF_LOG_CREATE, err, sizeof err) < 0);
    assert_non_null(strstr(err, junk));
    assert_non_null(strstr(err, "not a database"));
    size_t len;
    char *after = tu_read_file(junk, &len);
    assert_non_null(after);
    assert_int_equal(len, sizeof garbage);
    assert_memory_equal(after, garbage, len);   /* never written */
    free(after);
}

/* prof_layer_bytes and the critical-path model: per token, per layer,
 * per run; a new run clears the bytes and keeps the model. */
static void test_layer_bytes(void **state)
{
    (void)state;
    prof *p;
    char err[256];
    assert_int_equal(prof_new(&p, 0, 3, err, sizeof err), 0);
    prof_layer_model m0 = { 100, 300, 200, 300, 150, PROF_ST_FFN };
    prof_layer_model m2 = { 500, 300, 200, 500, 500, PROF_ST_ATTN };
    prof_set_layer_model(p, 0, &m0);
    prof_set_layer_model(p, 2, &m2);
    prof_set_layer_model(p, 7, &m2);   /* out of range: ignored */
    prof_layer_model got;
    assert_int_equal(prof_get_layer_model(p, 1, &got), 0);
    assert_int_equal(prof_get_layer_model(p, 2, &got), 1);
    assert_true(got.critical == 500 && got.binding == PROF_ST_ATTN);
    prof_run_begin(p, 0, 0);
    uint64_t cur = prof_ring_head(p);
    for (int t = 0; t < 3; t++) {
        prof_token_begin(p);
        for (unsigned l = 0; l < 3; l++) {
            prof_layer_bytes(p, l, PROF_ST_ATTN, 10 + l);
            prof_layer_bytes(p, l, PROF_ST_EXPERTS, 1000u * (unsigned)(t + 1));
        }
        prof_layer_bytes(p, 9, PROF_ST_ATTN, 12345);   /* out of range */
        prof_token_end(p, t ? PROF_DECODE : PROF_PREFILL);
    }
    prof_tok rec[3];
    assert_int_equal(prof_ring_read(p, &cur, rec, 3, NULL), 3);
    for (int t = 0; t < 3; t++) {
        assert_int_equal(rec[t].bytes[PROF_ST_ATTN], 33);
        assert_int_equal(rec[t].bytes[PROF_ST_FFN], 0);
        assert_int_equal(rec[t].bytes[PROF_ST_EXPERTS], 3000u * (unsigned)(t + 1));
    }
    /* per layer: the two decode tokens only (the first is a prefill) */
    assert_int_equal(prof_layer_streamed(p, 1, PROF_ST_ATTN), 22);
    assert_int_equal(prof_layer_streamed(p, 2, PROF_ST_EXPERTS), 5000);
    prof_totals t;
    prof_totals_get(p, &t);
    assert_int_equal(t.bytes[PROF_ST_ATTN], 99);
    assert_int_equal(t.bytes[PROF_ST_EXPERTS], 18000);
    assert_int_equal(t.dec_bytes[PROF_ST_ATTN], 66);
    assert_int_equal(t.dec_bytes[PROF_ST_EXPERTS], 15000);
    assert_true(t.cp_critical == 650 && t.cp_naive == 800);
    assert_int_equal(t.cp_layers, 2);
    assert_int_equal(t.cp_binding[PROF_ST_FFN], 1);
    assert_int_equal(t.cp_binding[PROF_ST_ATTN], 1);
    prof_run_begin(p, 0, 0);
    prof_totals_get(p, &t);
    assert_int_equal(t.bytes[PROF_ST_EXPERTS], 0);
    assert_int_equal(prof_layer_streamed(p, 2, PROF_ST_EXPERTS), 0);
    assert_true(t.cp_critical == 650);
    prof_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_event_names),
        cmocka_unit_test(test_counters_line),
        cmocka_unit_test(test_counters_probe),
        cmocka_unit_test(test_counters_count),
        cmocka_unit_test(test_ring_overflow),
        cmocka_unit_test(test_ring_concurrent),
        cmocka_unit_test(test_totals),
        cmocka_unit_test(test_io_compare),
        cmocka_unit_test(test_layer_bytes),
        cmocka_unit_test(test_file_hash),
        cmocka_unit_test(test_machine),
        cmocka_unit_test(test_default_path),
        cmocka_unit_test(test_fault_grammar),
        cmocka_unit_test(test_log_roundtrip),
        cmocka_unit_test(test_log_migrate_v1),
        cmocka_unit_test(test_log_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
