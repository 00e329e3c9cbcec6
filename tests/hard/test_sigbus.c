/*
 * test_sigbus.c — a model file truncated while it is mapped.
 *
 * The engine reads weights straight from the file's mapping; once the file
 * shrinks, reading a page past its new end raises SIGBUS (eng_guard.c
 * turns that into ENG_EIO).  Shown twice: through the library (eng_decode
 * with one thread and with a pool of workers, whose faults must travel to
 * the caller) and through `cflow run`, truncated by this test while it
 * generates: one clear error line, exit status 1, no signal.  These map
 * the file on purpose (eng_opts.no_mmap 0, `--mmap`): by default a model
 * that fits in half the free memory is read in at open, and then a later
 * truncation changes nothing (test_copied: the same tokens, no error);
 * with less free memory ($CFLOW_MEM_FREE) the default maps it.
 *
 * Expert streaming (issue 44, class 1): a MoE model whose experts are read
 * from the file as they are routed (--expert-io staged, the RAM cache off),
 * on io_uring (where the kernel allows it) and on the reader pool, while
 * `cflow run` generates: truncated to half (exit 1, one line naming the
 * file, the offset and the short read, stdout a prefix of the tokens of
 * the run left alone), replaced by another model renamed over it, and
 * deleted (the open descriptor keeps the file it opened: the same tokens,
 * exit 0).
 */
#include "config.h"

#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include <fcntl.h>
#include <stdatomic.h>
#include <sys/mman.h>

#include "engine/engine.h"
#include "engine/eng_impl.h"
#include "hard.h"

static void engine_truncated(const char *path, int threads)
{
    char err[512];

    eng_opts o;
    eng_opts_default(&o);
    o.n_threads = threads;
    o.no_mmap = 0;   /* mapped (a small model is read in by default) */
    eng_session *s = NULL;
    assert_int_equal(eng_open(&s, path, &o, err, sizeof err), 0);
    int32_t tok = eng_tok_bos(eng_tokenizer(s));
    assert_true(tok >= 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(eng_decode(s, tok, err, sizeof err), 0);
    uint32_t past = eng_n_past(s);

    /* keep the first 4 KB: the header stays, every tile is gone */
    assert_int_equal(truncate(path, 4096), 0);
    err[0] = 0;
    int rc = eng_decode(s, tok, err, sizeof err);
    assert_int_equal(rc, ENG_EIO);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "changed while in use"));
    assert_null(strchr(err, '\n'));
    assert_int_equal(eng_n_past(s), past);     /* the token did not count */
    /* the session stays broken, without touching the mapping again */
    err[0] = 0;
    assert_int_equal(eng_decode(s, tok, err, sizeof err), ENG_EIO);
    assert_non_null(strstr(err, "changed while in use"));
    assert_int_equal(eng_prefill(s, &tok, 1, err, sizeof err), ENG_EIO);
    eng_close(s);

    /* a fresh open of the truncated file is refused by the reader */
    assert_int_not_equal(eng_open(&s, path, &o, err, sizeof err), 0);
    assert_null(s);
    assert_non_null(strstr(err, path));
}

static void test_engine_one_thread(void **state)
{
    (void)state;
    const char *path = tu_tmp("one.cflow");
    assert_int_equal(hard_copy(hard_default_model(), path), 0);
    engine_truncated(path, 1);
}

/* The default reads a small model in at open; truncating the file then
 * takes nothing from the session, whose tokens stay those of an untouched
 * run.  With too little free memory for a copy the default maps the file,
 * as --mmap (no_mmap 0) does whatever the memory. */
static void test_copied(void **state)
{
    (void)state;
    const char *path = tu_tmp("copied.cflow");
    char err[512];
    int32_t ref[8], got[8];
    for (int k = 0; k < 2; k++) {
        assert_int_equal(hard_copy(hard_default_model(), path), 0);
        eng_opts o;
        eng_opts_default(&o);
        o.n_threads = 2;
        eng_session *s = NULL;
        assert_int_equal(eng_open(&s, path, &o, err, sizeof err), 0);
        assert_true(eng_weights_copied(s) > 0);
        int32_t tok = eng_tok_bos(eng_tokenizer(s));
        if (k)
            assert_int_equal(truncate(path, 4096), 0);
        for (int i = 0; i < 8; i++) {
            assert_int_equal(eng_decode(s, tok, err, sizeof err), 0);
            tok = (k ? got : ref)[i] = tu_argmax(eng_logits(s), eng_hparams(s)->vocab_size);
        }
        eng_close(s);
    }
    assert_memory_equal(ref, got, sizeof ref);
    assert_int_equal(hard_copy(hard_default_model(), path), 0);
    for (int k = 0; k < 2; k++) {
        eng_opts o;
        eng_opts_default(&o);
        if (k)
            o.no_mmap = 0;
        else
            setenv("CFLOW_MEM_FREE", "65536", 1);
        eng_session *s = NULL;
        int rc = eng_open(&s, path, &o, err, sizeof err);
        unsetenv("CFLOW_MEM_FREE");
        assert_int_equal(rc, 0);
        assert_int_equal(eng_weights_copied(s), 0);
        eng_close(s);
    }
}

/* Streams of a few MB run on the pool's workers (the shipped model's are
 * small enough to run inline): report-arch1 at Q8_0, 67 MB. */
static void test_engine_pool(void **state)
{
    (void)state;
    const char *path = tu_tmp("pool.cflow");
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "synth", "-q", "q8_0", "report-arch1", path, NULL), 0);
    assert_int_equal(p.status, 0);
    tu_proc_free(&p);
    engine_truncated(path, 3);
}

/* A SIGBUS that is not the model's still kills the process (the handler
 * passes it on), so the guard hides nothing else: here cflow, in the
 * middle of decoding with the guard armed, receives one from kill(2). */
typedef struct kill_ctx {
    int sent;
} kill_ctx;

static int kill_when_running(void *ctx, pid_t pid, size_t out_len)
{
    kill_ctx *k = ctx;
    if (out_len < 200)
        return 0;
    k->sent = kill(pid, SIGBUS) == 0;
    return 1;
}

static void test_foreign_sigbus(void **state)
{
    (void)state;
    char *cflow = (char *)tu_cflow();
    char *argv[] = { cflow, "run", "-m", (char *)hard_default_model(), "-n", "1000000",
                     "--ignore-eos", "--temp", "0.8", "-t", "2", "--no-log", NULL };
    kill_ctx k = { 0 };
    tu_proc p;
    assert_int_equal(tu_run_watch(&p, argv, NULL, 300, kill_when_running, &k, 5), 0);
    assert_true(k.sent);
    if (hard_sanitizers()) {
        /* the handler before ours is AddressSanitizer's: it reports the
         * signal and exits with status 1 */
        assert_non_null(strstr(p.err, "AddressSanitizer: BUS"));
        assert_int_not_equal(p.status, 0);
    } else {
        assert_true(p.signaled);
        assert_int_equal(p.status, 128 + SIGBUS);
    }
    tu_proc_free(&p);
}

typedef struct trunc_ctx {
    const char *path;
    off_t       to;
    int         done;
    size_t      at_bytes;
} trunc_ctx;

static int truncate_when_running(void *ctx, pid_t pid, size_t out_len)
{
    trunc_ctx *t = ctx;
    (void)pid;
    if (out_len < 200)         /* let it generate for a while first */
        return 0;
    t->done = truncate(t->path, t->to) == 0;
    t->at_bytes = out_len;
    return 1;
}

static void run_truncated(const char *threads)
{
    char path[4096], *cflow = (char *)tu_cflow();
    snprintf(path, sizeof path, "%s", tu_tmp(threads[0] == '1' ? "run1.cflow" : "run2.cflow"));
    assert_int_equal(hard_copy(hard_default_model(), path), 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    trunc_ctx t = { path, st.st_size / 2, 0, 0 };
    char *argv[] = { cflow, "run", "-m", path, "-n", "1000000", "--ignore-eos",
                     "--temp", "0.8", "-t", (char *)threads, "--no-log", "--mmap", NULL };
    tu_proc p;
    assert_int_equal(tu_run_watch(&p, argv, NULL, 300, truncate_when_running, &t, 5), 0);
    assert_true(t.done);
    assert_false(p.signaled);
    assert_int_equal(p.status, 1);
    /* one line naming the file and the problem */
    const char *line = strstr(p.err, "changed while in use");
    assert_non_null(line);
    assert_non_null(strstr(p.err, path));
    assert_null(strstr(p.err, "AddressSanitizer"));
    assert_null(strstr(p.err, "runtime error"));
    assert_true(p.out_len >= t.at_bytes);
    tu_proc_free(&p);
}

static void test_run_one_thread(void **state)
{
    (void)state;
    run_truncated("1");
}

static void test_run_two_threads(void **state)
{
    (void)state;
    run_truncated("2");
}

/* The pool's part, directly: every thread of a region reads its own page
 * of a mapping whose file was cut to nothing.  The fault of each thread
 * ends up in the caller's guard after the region, and the pool still runs
 * regions afterwards (no thread was left inside its synchronisation). */
typedef struct page_task {
    const volatile uint8_t *base;
    size_t                  page;
    atomic_int              ran;
    atomic_long             sum;
} page_task;

static void touch_pages(void *ctx, int tid, int n_threads)
{
    page_task *t = ctx;
    (void)n_threads;
    atomic_fetch_add(&t->ran, 1);
    atomic_fetch_add(&t->sum, t->base[(size_t)tid * t->page]);
}

static void count_only(void *ctx, int tid, int n_threads)
{
    page_task *t = ctx;
    (void)tid;
    (void)n_threads;
    atomic_fetch_add(&t->ran, 1);
}

static void test_pool_fault(void **state)
{
    (void)state;
    const int n = 4;
    size_t page = (size_t)sysconf(_SC_PAGESIZE), len = page * (size_t)n;
    const char *path = tu_tmp("pages.bin");
    char *buf = calloc(1, len);
    assert_non_null(buf);
    assert_int_equal(tu_write_file(path, buf, len), 0);
    free(buf);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    const uint8_t *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    assert_true(map != MAP_FAILED);
    assert_int_equal(eng_guard_install(), 0);
    eng_pool *pool = eng_pool_new(n);
    assert_non_null(pool);

    static page_task t;          /* static: read after the jump */
    t.base = map;
    t.page = page;
    atomic_store(&t.ran, 0);
    eng_pool_run_all(pool, touch_pages, &t);    /* the file is whole */
    assert_int_equal(atomic_load(&t.ran), n);

    assert_int_equal(truncate(path, 0), 0);
    static eng_guard g;
    static volatile int jumped;
    jumped = 0;
    atomic_store(&t.ran, 0);
    g.lo = map;
    g.hi = map + len;
    if (sigsetjmp(g.jb, 0)) {
        eng_guard_pop(&g);
        jumped = 1;
    } else {
        eng_guard_push(&g);
        eng_pool_run_all(pool, touch_pages, &t);
        eng_guard_pop(&g);
    }
    assert_true(jumped);
    assert_true((const uint8_t *)g.addr >= map && (const uint8_t *)g.addr < map + len);
    assert_int_equal(atomic_load(&t.ran), n);   /* every thread took part */
    assert_null(eng_guard_current());

    atomic_store(&t.ran, 0);
    eng_pool_run_all(pool, count_only, &t);      /* the pool lives on */
    assert_int_equal(atomic_load(&t.ran), n);
    eng_pool_free(pool);
    munmap((void *)map, len);
}

typedef struct change_ctx {
    const char *path, *other;
    int         what;          /* 0 truncate, 1 rename over, 2 delete */
    int         done;
} change_ctx;

static int change_when_running(void *ctx, pid_t pid, size_t out_len)
{
    change_ctx *c = ctx;
    struct stat st;
    (void)pid;
    if (out_len < 40)
        return 0;
    c->done = c->what == 0   ? stat(c->path, &st) == 0 && truncate(c->path, st.st_size / 2) == 0
              : c->what == 1 ? rename(c->other, c->path) == 0
                             : unlink(c->path) == 0;
    return 1;
}

static void streaming_changes(const char *reader)
{
    char model[4096], path[4096], other[4096], rd[64];
    snprintf(model, sizeof model, "%s", tu_tmp("stream.cflow"));
    snprintf(path, sizeof path, "%s", tu_tmp("stream-run.cflow"));
    snprintf(other, sizeof other, "%s", tu_tmp("stream-other.cflow"));
    snprintf(rd, sizeof rd, "CFLOW_XIO_READER=%s", reader);
    tu_proc p, ref;
    if (access(model, F_OK)) {
        assert_int_equal(tu_cflow_run(&p, "synth", "report-arch4", model, (char *)NULL), 0);
        assert_true(tu_ok(&p, "synth report-arch4"));
        tu_proc_free(&p);
    }
    char *argv[] = { (char *)tu_cflow(), "run", "-m", path, "-p", "the cat", "-n", "400",
                     "--temp", "0", "--ignore-eos", "--expert-io", "staged", "--expert-cache",
                     "off", "--no-log", NULL };
    char *env[] = { rd, NULL };
    assert_int_equal(hard_copy(model, path), 0);
    assert_int_equal(tu_run(&ref, argv, env, 120), 0);
    assert_true(tu_ok(&ref, "the run left alone"));
    for (int what = 0; what < 3; what++) {
        assert_int_equal(hard_copy(model, path), 0);
        if (what == 1) {
            assert_int_equal(tu_cflow_run(&p, "synth", "--seed", "5", "report-arch4", other,
                                          (char *)NULL), 0);
            assert_true(tu_ok(&p, "synth another"));
            tu_proc_free(&p);
        }
        change_ctx c = { path, other, what, 0 };
        assert_int_equal(tu_run_watch(&p, argv, env, 120, change_when_running, &c, 2), 0);
        assert_true(c.done);
        assert_false(p.signaled);
        assert_null(strstr(p.err, "Sanitizer"));
        assert_null(strstr(p.err, "runtime error"));
        print_message("%s, %s while it streams: exit %d, %zu of %zu bytes\n", reader,
                      what == 0 ? "truncated" : what == 1 ? "replaced" : "deleted", p.status,
                      p.out_len, ref.out_len);
        if (what == 0) {
            assert_int_equal(p.status, 1);
            const char *line = strstr(p.err, "expert read at offset");
            assert_non_null(line);
            assert_null(strstr(line + 1, "expert read at offset"));
            while (line > p.err && line[-1] != '\n')
                line--;
            assert_memory_equal(line, "cflow: ", 7);
            assert_non_null(strstr(line, path));
            assert_non_null(strstr(line, "short read"));
            assert_true(p.out_len < ref.out_len);
            assert_memory_equal(p.out, ref.out, p.out_len);
        } else {
            assert_true(tu_ok(&p, "a run whose file was replaced or deleted"));
            assert_string_equal(p.out, ref.out);
        }
        tu_proc_free(&p);
    }
    tu_proc_free(&ref);
}

static void test_streaming_changes(void **state)
{
    (void)state;
    if (tu_have_uring("test_sigbus"))
        streaming_changes("uring");
    streaming_changes("pool");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_fault),
        cmocka_unit_test(test_engine_one_thread),
        cmocka_unit_test(test_engine_pool),
        cmocka_unit_test(test_copied),
        cmocka_unit_test(test_foreign_sigbus),
        cmocka_unit_test(test_run_one_thread),
        cmocka_unit_test(test_run_two_threads),
        cmocka_unit_test(test_streaming_changes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
