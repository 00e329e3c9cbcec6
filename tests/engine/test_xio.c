/*
 * test_xio.c — expert I/O and prefetch (report 3.9, 5.14; issue 4's I/O
 * machinery, issue 7's staged-reader faults), under each expert reader;
 * the settings, run once, are in test_xio_setup.c and the helpers in
 * xio_test.c (one program: xio_test.h).
 *
 *   - every --expert-io mode, with the prefetch thread on and off, gives
 *     the greedy tokens of mmap without prefetch, on synthetic MoE models of
 *     every combine style (and a .vflow), switching modes between tokens
 *     included; sync and staged really read the experts (their bytes);
 *   - a read error or a short read in the staged reader is an error from
 *     eng_decode and from `cflow run`, never a hang (each run has a time
 *     limit) and never a crash; the session decodes on once reads work;
 *   - a file system that refuses O_DIRECT reads gets buffered reads and a
 *     notice through the log callback, and the same tokens;
 *   - the RAM expert cache (issue 17, must-shows 1 and 3): sync and staged
 *     with a budget from nothing to more than the banks, smaller than one
 *     layer's experts included, under every replacement policy
 *     ($CFLOW_XIO_POLICY crf, lru and lfu), give mmap's tokens; a budget
 *     that holds every expert reads each at most once; a read error or a
 *     short read through the cache is an error naming the file and offset,
 *     and the failed slot is never handed out as a hit;
 *   - (the policy itself, unit by unit through eng_xio_*: test_xio_cache.c)
 *   - the memory limit auto goes by, from a made-up cgroup; a slot is not
 *     handed out again while a read into it is in flight.
 *
 * "The report" (with its section numbers) is the Pipeline-Native
 * Transformers report.
 */
#include "config.h"

#include "xio_test.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "engine/eng_impl.h"      /* eng_io_result: reads turned into faults */
#include "format/cflow_format.h"
#include "testutil.h"

/* Must show (issue 4, 2): every mode gives mmap's tokens. */
static void test_modes_same_tokens(void **state)
{
    (void)state;
    static const struct { const char *preset; int vflow; const char *quant; } models[] = {
        { "tiny-moe", 0, NULL },            /* DelayedSum, expert_delay 2 */
        { "tiny-moe", 1, NULL },            /* the same, stage-major .vflow */
        { "tiny-mixtral", 0, NULL },        /* ParallelSqrt2 without dense FFN */
        { "report-arch4", 0, NULL },        /* AsyncExperts, expert_delay 2 */
        { "report-arch1", 0, NULL },        /* DecoupledStreams */
        { "report-arch3", 0, NULL },        /* PipelineRegisters */
        { "report-arch5", 0, NULL },        /* FixedPoint */
        /* experts of the GGML types (issue 41): llama.cpp's Q4_K_M mix
         * (q4_k gate/up, q4_k down then q6_k down in the last layer, q8_0
         * attn_v/attn_k for 8 experts), and MXFP4 experts beside q8_0 */
        { "tiny-mixtral256", 0, "q4_k_m" },
        { "tiny-mixtral256", 1, "q4_k_m" },
        { "tiny-mixtral", 0, "mxfp4" },
    };
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        char path[4096];
        int32_t ref[N_TOK], got[N_TOK];
        xt_synth_q(models[i].preset, models[i].quant, models[i].vflow ? ".vflow" : ".cflow",
                   models[i].vflow, path);
        eng_session *s = xt_open_model(path, ENG_XIO_MMAP, 0, NULL);
        xt_greedy(s, ref, N_TOK, 0);
        eng_close(s);
        for (int mode = ENG_XIO_MMAP; mode <= ENG_XIO_STAGED; mode++) {
            for (int pf = 0; pf <= 1; pf++) {
                if (mode == ENG_XIO_MMAP && !pf)
                    continue;
                s = xt_open_model(path, mode, pf, NULL);
                xt_greedy(s, got, N_TOK, 0);
                eng_stats st;
                eng_get_stats(s, &st);
                fprintf(stderr, "%-13s%s%s%s %-6s prefetch %-3s: tokens %s; expert bytes %llu, "
                        "read %llu\n", models[i].preset, models[i].quant ? " -q " : "",
                        models[i].quant ? models[i].quant : "",
                        models[i].vflow ? " (.vflow)" : "",
                        eng_expert_io_name(mode), pf ? "on" : "off",
                        memcmp(ref, got, sizeof ref) ? "DIFFER" : "agree",
                        (unsigned long long)st.expert_bytes, (unsigned long long)st.xio_bytes);
                assert_memory_equal(ref, got, sizeof ref);
                /* no prefetch thread, no hints (with one, how many land
                 * before compute overtakes them is a matter of timing) */
                if (!pf)
                    assert_int_equal(st.pf_lines + st.pf_dropped, 0);
                /* sync and staged read every routed expert from the file;
                 * an expert's range is its two streams plus alignment */
                if (mode == ENG_XIO_MMAP)
                    assert_int_equal(st.xio_bytes, 0);
                else
                    assert_true(st.xio_bytes >= st.expert_bytes && st.expert_bytes > 0 &&
                                st.xio_bytes < st.expert_bytes + st.expert_bytes / 4);
                eng_close(s);
            }
        }
        /* switching mode and prefetch between tokens of one session */
        s = xt_open_model(path, ENG_XIO_MMAP, 0, NULL);
        xt_greedy(s, got, N_TOK, 3);
        assert_memory_equal(ref, got, sizeof ref);
        eng_close(s);
        remove(path);
    }
}


/* ---- faults ---- */
static int fail_mode;           /* 1 EIO, 2 EOF halfway, 3 EINVAL on O_DIRECT */
static off_t eof_at = -1;       /* mode 2: where the file "ends" (-1: not yet) */
static int fail_after;          /* reads that succeed first */
static int refused;             /* reads refused so far in mode 3 */

static ssize_t faulty_read(int fd, void *buf, size_t n, off_t off, ssize_t res)
{
    (void)buf;
    (void)off;
    if (fail_mode == 3) {
        if (fcntl(fd, F_GETFL) & O_DIRECT) {
            /* The first two refused reads meet before either returns, so
             * two pool readers are refused on the old descriptor at once:
             * the one that comes second to the fallback must retry on the
             * new descriptor, not report EINVAL (CI saw that race).  (The
             * io_uring reader settles them one after the other.) */
            if (__atomic_add_fetch(&refused, 1, __ATOMIC_SEQ_CST) <= 2 && *xt_reader == 'p')
                for (int i = 0; i < 500 && __atomic_load_n(&refused, __ATOMIC_SEQ_CST) < 2; i++)
                    usleep(1000);
            return -EINVAL;
        }
        return res;
    }
    if (fail_after > 0) {
        __atomic_fetch_sub(&fail_after, 1, __ATOMIC_SEQ_CST);
        return res;
    }
    if (fail_mode == 1)
        return -EIO;
    /* the file ends in the middle of this read (and so for every later
     * one: reads from there on find nothing) */
    if (eof_at < 0)
        eof_at = off + (off_t)(n / 2);
    if (off >= eof_at)
        return 0;
    return res > eof_at - off ? eof_at - off : res;
}

/* Must show (issue 4, 4; issue 7): a failed or short read is an error, and
 * the session goes on once reads work again. */
static void test_read_faults_api(void **state)
{
    (void)state;
    char path[4096];
    xt_synth("tiny-moe", ".cflow", 0, path);
    int32_t ref[N_TOK];
    eng_session *s = xt_open_model(path, ENG_XIO_MMAP, 0, NULL);
    xt_greedy(s, ref, N_TOK, 0);
    eng_close(s);
    for (int mode = ENG_XIO_SYNC; mode <= ENG_XIO_STAGED; mode++) {
        for (int f = 1; f <= 2; f++) {
            char err[512] = "";
            s = xt_open_model(path, mode, 0, NULL);
            assert_int_equal(eng_decode(s, 1, err, sizeof err), 0);
            uint32_t past = eng_n_past(s);
            fail_mode = f;
            fail_after = 3;      /* the fault lands inside a token */
            eof_at = -1;
            eng_io_result = faulty_read;
            int rc = eng_decode(s, xt_argmax(s), err, sizeof err);
            eng_io_result = NULL;
            fprintf(stderr, "%s, %s: rc %d: %s\n", eng_expert_io_name(mode),
                    f == 1 ? "EIO" : "short read", rc, err);
            assert_int_equal(rc, ENG_EIO);
            assert_non_null(strstr(err, path));
            assert_non_null(strstr(err, f == 1 ? strerror(EIO) : "short read"));
            /* the failed token took no position; decoding goes on and
             * gives mmap's tokens */
            assert_int_equal(eng_n_past(s), past);
            eng_reset(s);
            int32_t got[N_TOK];
            xt_greedy(s, got, N_TOK, 0);
            assert_memory_equal(ref, got, sizeof ref);
            eng_close(s);
        }
    }
    fail_mode = 0;
    remove(path);
}

/* A model between half and four fifths of the free memory is copied in
 * (dropping its cached pages behind the copy) and its experts run from
 * the copy; asked again once the copy has taken its share of the memory,
 * auto counts the copy as the model's own and keeps mmap, where it had
 * gone staged, reading from the file the experts it held in memory
 * already (gpt-oss-20b's bench, 2026-12-07). */
static void auto_after_copy(const char *path, const int32_t *ref)
{
    eng_session *s = NULL;
    int32_t got[N_TOK];
    eng_opts o;
    char err[512], text[64];
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    eng_opts_default(&o);
    o.n_ctx = 64;
    o.n_threads = 2;
    o.expert_io = ENG_XIO_AUTO;
    snprintf(text, sizeof text, "%llu", (unsigned long long)st.st_size * 3 / 2);
    setenv("CFLOW_MEM_FREE", text, 1);
    assert_int_equal(eng_open(&s, path, &o, err, sizeof err), 0);
    assert_int_equal(eng_weights_copied(s), (uint64_t)st.st_size);
    assert_int_equal(eng_expert_io(s), ENG_XIO_MMAP);
    snprintf(text, sizeof text, "%llu", (unsigned long long)st.st_size / 2);
    setenv("CFLOW_MEM_FREE", text, 1);   /* what the copy left */
    assert_int_equal(eng_set_expert_io(s, ENG_XIO_AUTO, err, sizeof err), 0);
    unsetenv("CFLOW_MEM_FREE");
    assert_int_equal(eng_expert_io(s), ENG_XIO_MMAP);
    xt_greedy(s, got, N_TOK, 0);
    assert_memory_equal(ref, got, sizeof got);
    eng_close(s);
}

/* Must show (issue 17, 1 and 3): the expert cache at every budget and
 * under every policy gives mmap's tokens; a full one reads each expert
 * once; faults through it. */
static void test_cache(void **state)
{
    (void)state;
    static const char *const policies[] = { "lru", "lfu", "crf" };
    /* the last: experts of two types (q4_k, and q6_k in its last layer) */
    static const char *const presets[] = { "tiny-moe", "tiny-mixtral", "report-arch4",
                                           "tiny-mixtral256" };
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        char path[4096];
        int32_t ref[N_TOK], got[N_TOK];
        xt_synth_q(presets[i], i == 3 ? "q4_k_m" : NULL, ".cflow", 0, path);
        xt_cache_opt = 0;
        eng_session *s = xt_open_model(path, ENG_XIO_MMAP, 0, NULL);
        xt_greedy(s, ref, N_TOK, 0);
        const uint32_t per_layer = eng_hparams(s)->n_experts;   /* (s is closed below) */
        const uint64_t n_experts = (uint64_t)eng_hparams(s)->n_layers * per_layer;
        eng_stats st;
        eng_get_stats(s, &st);
        const uint64_t bank = st.expert_bank_bytes, one = bank / n_experts;
        eng_close(s);
        /* none, a byte, under one layer's experts, half the banks, all */
        const int64_t budgets[] = { 0, 1, (int64_t)(one * (per_layer - 1)),
                                    (int64_t)(bank / 2), (int64_t)(4 * bank + (1 << 20)) };
        for (int pol = 0; pol < 3; pol++)   /* every policy ($CFLOW_XIO_POLICY) */
        for (int mode = ENG_XIO_SYNC; mode <= ENG_XIO_STAGED; mode++)
            for (size_t b = 0; b < sizeof budgets / sizeof *budgets; b++) {
                xt_cache_opt = budgets[b];
                setenv("CFLOW_XIO_POLICY", policies[pol], 1);
                s = xt_open_model(path, mode, 0, NULL);
                unsetenv("CFLOW_XIO_POLICY");
                xt_greedy(s, got, N_TOK, 0);
                eng_get_stats(s, &st);
                fprintf(stderr, "%-13s %-6s %s cache %9lld: tokens %s; hits %llu misses %llu "
                        "read %llu cache %llu\n", presets[i], eng_expert_io_name(mode),
                        policies[pol], (long long)budgets[b],
                        memcmp(ref, got, sizeof ref) ? "DIFFER" : "agree",
                        (unsigned long long)st.xio_hits, (unsigned long long)st.xio_misses,
                        (unsigned long long)st.xio_bytes,
                        (unsigned long long)st.xio_cache_bytes);
                assert_memory_equal(ref, got, sizeof ref);
                if (budgets[b] == 0)
                    assert_int_equal(st.xio_hits, 0);   /* no cache: every expert read */
                if (b == 4) {
                    /* everything fits: each expert read at most once */
                    assert_true(st.xio_misses <= n_experts);
                    assert_true(st.xio_hits > 0);
                    assert_true(st.xio_bytes <= bank + n_experts * 8192);
                }
                eng_close(s);
            }
        remove(path);
    }
    /* a fault inside a token, through the cache: an error naming the file,
     * then the same tokens (the failed slot is not a hit next time) */
    char path[4096];
    int32_t ref[N_TOK], got[N_TOK];
    xt_synth("tiny-moe", ".cflow", 0, path);
    xt_cache_opt = 0;
    eng_session *s = xt_open_model(path, ENG_XIO_MMAP, 0, NULL);
    xt_greedy(s, ref, N_TOK, 0);
    eng_close(s);
    xt_cache_opt = 1 << 30;
    for (int mode = ENG_XIO_SYNC; mode <= ENG_XIO_STAGED; mode++)
        for (int f = 1; f <= 2; f++) {
            char err[512] = "";
            s = xt_open_model(path, mode, 0, NULL);
            fail_mode = f;
            fail_after = 1;      /* the token's second read fails */
            eof_at = -1;
            eng_io_result = faulty_read;
            int rc = eng_decode(s, 1, err, sizeof err);
            eng_io_result = NULL;
            fail_mode = 0;
            assert_int_equal(rc, ENG_EIO);
            assert_non_null(strstr(err, path));
            assert_non_null(strstr(err, "offset"));
            assert_non_null(strstr(err, f == 1 ? strerror(EIO) : "short read"));
            eng_reset(s);
            xt_greedy(s, got, N_TOK, 0);
            assert_memory_equal(ref, got, sizeof ref);
            eng_close(s);
        }
    /* auto: mmap where the model fits in free memory; with less free
     * memory than the file ($CFLOW_MEM_FREE), staged reads into a cache of
     * half of it; the same tokens either way */
    xt_cache_opt = -1;
    for (int small = 0; small <= 1; small++) {
        eng_opts o;
        char err[512];
        eng_opts_default(&o);
        o.n_ctx = 64;
        o.n_threads = 2;
        o.expert_io = ENG_XIO_AUTO;
        if (small)
            setenv("CFLOW_MEM_FREE", "65536", 1);
        assert_int_equal(eng_open(&s, path, &o, err, sizeof err), 0);
        unsetenv("CFLOW_MEM_FREE");
        assert_int_equal(eng_expert_io(s), small ? ENG_XIO_STAGED : ENG_XIO_MMAP);
        xt_greedy(s, got, N_TOK, 0);
        assert_memory_equal(ref, got, sizeof ref);
        eng_stats st;
        eng_get_stats(s, &st);
        if (small)
            assert_true(st.xio_misses > 0 && st.xio_cache_bytes <= 32768);
        eng_close(s);
    }
    auto_after_copy(path, ref);
    xt_cache_opt = 0;
    remove(path);
}

/* The memory limit --expert-io auto goes by, read from a made-up cgroup
 * tree ($CFLOW_CGROUP_ROOT): cgroup v2's memory.max less memory.current,
 * v1's memory.limit_in_bytes less memory.usage_in_bytes, the page cache
 * (memory.stat "file", "total_cache") not counted as used.  A limit that
 * leaves less than the model gives staged I/O, one whose usage is all page
 * cache leaves the model mapped, as no limit does. */
static void put(const char *dir, const char *name, const char *text)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    assert_int_equal(tu_write_file(path, text, strlen(text)), 0);
}

static void test_cgroup_room(void **state)
{
    (void)state;
    char path[4096], root[4096], v1[4200];
    xt_synth("tiny-moe", ".cflow", 0, path);
    static const struct {
        int v1;
        const char *lim, *use, *stat;
        int want;
    } cases[] = {
        { 0, "65536", "0", "file 0\n", ENG_XIO_STAGED },
        { 0, "1073741824", "1073741824", "anon 4096\nfile 1073737728\n", ENG_XIO_MMAP },
        { 0, "max", "1073741824", "file 0\n", ENG_XIO_MMAP },
        { 1, "65536", "0", "cache 0\ntotal_cache 0\n", ENG_XIO_STAGED },
        { 1, "1073741824", "1073741824", "total_cache 1073737728\n", ENG_XIO_MMAP },
        { 1, "9223372036854771712", "1073741824", "total_cache 0\n", ENG_XIO_MMAP },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(root, sizeof root, "%s%zu", tu_tmp("cgroup"), i);
        snprintf(v1, sizeof v1, "%s/memory", root);
        assert_true(mkdir(root, 0700) == 0 || errno == EEXIST);   /* (run per reader) */
        assert_true(mkdir(v1, 0700) == 0 || errno == EEXIST);
        if (cases[i].v1) {
            put(v1, "memory.limit_in_bytes", cases[i].lim);
            put(v1, "memory.usage_in_bytes", cases[i].use);
            put(v1, "memory.stat", cases[i].stat);
        } else {
            put(root, "memory.max", cases[i].lim);
            put(root, "memory.current", cases[i].use);
            put(root, "memory.stat", cases[i].stat);
        }
        setenv("CFLOW_CGROUP_ROOT", root, 1);
        eng_opts o;
        char err[512];
        eng_session *s = NULL;
        eng_opts_default(&o);
        o.n_ctx = 64;
        o.expert_io = ENG_XIO_AUTO;
        int rc = eng_open(&s, path, &o, err, sizeof err);
        unsetenv("CFLOW_CGROUP_ROOT");
        assert_int_equal(rc, 0);
        fprintf(stderr, "cgroup v%d limit %s, usage %s: %s\n", cases[i].v1 ? 1 : 2,
                cases[i].lim, cases[i].use, eng_expert_io_name(eng_expert_io(s)));
        assert_int_equal(eng_expert_io(s), cases[i].want);
        eng_close(s);
    }
    remove(path);
}

/* ---- slots are not recycled while a read is in flight ---- */
static int slow_fail_once;

/* The first read fails at once; every read sleeps 20 ms before it lands,
 * so when the failed token is abandoned its other reads are still in
 * flight.  Were their slots handed out again, those late reads would
 * overwrite the next token's experts and change its tokens. */
static ssize_t slow_read(int fd, void *buf, size_t n, off_t off, ssize_t res)
{
    (void)fd, (void)buf, (void)n, (void)off;
    if (__atomic_exchange_n(&slow_fail_once, 0, __ATOMIC_SEQ_CST))
        return -EIO;
    usleep(20000);
    return res;
}

static void test_no_recycle_in_flight(void **state)
{
    (void)state;
    char path[4096], err[512];
    xt_synth("tiny-moe", ".cflow", 0, path);   /* expert_delay 2: 6 slots */
    int32_t ref[N_TOK], got[N_TOK];
    eng_session *s = xt_open_model(path, ENG_XIO_MMAP, 0, NULL);
    xt_greedy(s, ref, N_TOK, 0);
    eng_close(s);
    s = xt_open_model(path, ENG_XIO_STAGED, 0, NULL);
    eng_io_result = slow_read;
    slow_fail_once = 1;
    int rc = eng_decode(s, 1, err, sizeof err);
    assert_int_equal(rc, ENG_EIO);
    /* decode again at once (the failed decode returned once its reads
     * settled; look-ahead guesses dropped with reads in flight still land
     * late, and their slots must not be handed out before) */
    xt_greedy(s, got, N_TOK, 0);
    eng_io_result = NULL;
    eng_close(s);
    assert_memory_equal(ref, got, sizeof ref);
    remove(path);
}

/* The same through `cflow run` and CFLOW_FAULT (issue 17, must-show 3),
 * in sync and staged mode, with the RAM cache off and on: a non-zero exit
 * within the time limit, without a signal, and one line naming the file
 * and the offset; what reached stdout is a prefix of the fault-free run's
 * tokens (no wrong token, and the run stopped at the fault). */
static void test_read_faults_cli(void **state)
{
    (void)state;
    char path[4096];
    xt_synth("report-arch4", ".cflow", 0, path);
    /* a fault from the first read (in the prompt), and from the N-th one:
     * a few tokens into the reply, with the cache off and with a cache of
     * 8 MiB, which holds some of the 48 experts (so reads go on) */
    static const char *const modes[] = { "sync", "staged" };
    static const struct { const char *size; const char *faults[4]; } caches[] = {
        { "off", { "CFLOW_FAULT=expert-read:eio", "CFLOW_FAULT=expert-read:short",
                   "CFLOW_FAULT=expert-read:eio@150", "CFLOW_FAULT=expert-read:short@150" } },
        { "8M", { "CFLOW_FAULT=expert-read:eio", "CFLOW_FAULT=expert-read:short",
                  "CFLOW_FAULT=expert-read:eio@60", "CFLOW_FAULT=expert-read:short@60" } },
    };
    for (size_t m = 0; m < 2; m++)
        for (size_t c = 0; c < 2; c++) {
            char *const argv[] = { (char *)tu_cflow(), "run", "-m", path, "-p", "the cat",
                                   "-n", "12", "--temp", "0", "--ignore-eos", "--expert-io",
                                   (char *)modes[m], "--expert-cache", (char *)caches[c].size,
                                   "--no-log", NULL };
            tu_proc ref;
            assert_int_equal(tu_run(&ref, argv, NULL, 60), 0);
            assert_int_equal(ref.status, 0);
            for (size_t i = 0; i < 4; i++) {
                const char *fault = caches[c].faults[i];
                char *const env[] = { (char *)fault, NULL };
                tu_proc p;
                assert_int_equal(tu_run(&p, argv, env, 60), 0);
                fprintf(stderr, "%s %s cache %s %s: exit %d%s, stdout %zu of %zu bytes, "
                        "stderr: %s", xt_reader, modes[m], caches[c].size, fault + 12, p.status,
                        p.signaled ? " (signal)" : "", p.out_len, ref.out_len, p.err);
                assert_false(p.signaled);
                assert_int_not_equal(p.status, 0);
                const char *line = strstr(p.err, "expert read at offset");
                assert_non_null(line);
                while (line > p.err && line[-1] != '\n')
                    line--;
                size_t n = strcspn(line, "\n");
                char one[1024];
                snprintf(one, sizeof one, "%.*s", (int)n, line);
                assert_non_null(strstr(one, path));
                assert_non_null(strstr(one, strstr(fault, "eio") ? strerror(EIO)
                                                                : "short read"));
                assert_null(strstr(line + n, "expert read"));   /* said once */
                /* the tokens before the fault, the fault-free run's */
                assert_true(p.out_len < ref.out_len);
                assert_memory_equal(p.out, ref.out, p.out_len);
                if (strchr(fault, '@'))
                    assert_true(p.out_len > 0);
                tu_proc_free(&p);
            }
            tu_proc_free(&ref);
        }
    remove(path);
}

/* O_DIRECT refused at read time (as some file systems do): buffered reads,
 * one notice through the log callback, the same tokens.  And a model on
 * /dev/shm (tmpfs: refuses O_DIRECT before Linux 6.6) reads either way,
 * with a notice exactly when it fell back. */
static void test_direct_fallback(void **state)
{
    (void)state;
    char path[4096];
    xt_synth("tiny-moe", ".cflow", 0, path);
    int32_t ref[N_TOK], got[N_TOK];
    eng_session *s = xt_open_model(path, ENG_XIO_MMAP, 0, NULL);
    xt_greedy(s, ref, N_TOK, 0);
    eng_close(s);

    xt_logcap lc = { "", 0 };
    s = xt_open_model(path, ENG_XIO_STAGED, 0, &lc);
    int direct0 = eng_expert_io_direct(s);
    refused = 0;
    fail_mode = 3;
    eng_io_result = faulty_read;
    xt_greedy(s, got, N_TOK, 0);
    eng_io_result = NULL;
    fail_mode = 0;
    fprintf(stderr, "O_DIRECT refused: direct %d -> %d, %d reads refused; log: %s",
            direct0, eng_expert_io_direct(s), refused, lc.text);
    assert_memory_equal(ref, got, sizeof ref);
    if (direct0 == 1) {   /* the file system took O_DIRECT at open */
        assert_int_equal(eng_expert_io_direct(s), 0);
        /* two pool readers were refused together (the top-k reads of the
         * first token are queued at once) and both went on; io_uring sent
         * the first routings' reads at once, and each went on */
        if (*xt_reader == 'p')
            assert_int_equal(refused, 2);
        else
            assert_true(refused >= 2);
        assert_int_equal(lc.n, 1);
        assert_non_null(strstr(lc.text, "O_DIRECT"));
        assert_non_null(strstr(lc.text, path));
    }
    eng_close(s);

    /* tmpfs */
    char shm[256];
    snprintf(shm, sizeof shm, "/dev/shm/cflow-test-xio-%d.cflow", (int)getpid());
    size_t len;
    char *buf = tu_read_file(path, &len);
    assert_non_null(buf);
    assert_int_equal(tu_write_file(shm, buf, len), 0);
    free(buf);
    xt_logcap lc2 = { "", 0 };
    s = xt_open_model(shm, ENG_XIO_SYNC, 0, &lc2);
    xt_greedy(s, got, N_TOK, 0);
    int direct = eng_expert_io_direct(s);
    eng_close(s);
    unlink(shm);
    fprintf(stderr, "/dev/shm: direct %d; log: %s\n", direct, lc2.text);
    assert_memory_equal(ref, got, sizeof ref);
    assert_true(direct == 0 || direct == 1);
    /* (a build without liburing adds a note that the pool reads) */
    assert_int_equal(lc2.n - (strstr(lc2.text, "reader pool") != NULL), direct ? 0 : 1);
    if (!direct)
        assert_non_null(strstr(lc2.text, "O_DIRECT"));
    remove(path);
}

/* io_uring where this build and kernel have it (the default reader); a
 * build without liburing runs the pool alone, and says so. */

int main(void)
{
    /* what depends on the reader, under each reader */
    const struct CMUnitTest per_reader[] = {
        cmocka_unit_test(test_modes_same_tokens),
        cmocka_unit_test(test_read_faults_api),
        cmocka_unit_test(test_cache),
        cmocka_unit_test(test_cgroup_room),
        cmocka_unit_test(test_no_recycle_in_flight),
        cmocka_unit_test(test_read_faults_cli),
        cmocka_unit_test(test_direct_fallback),
    };
    const struct CMUnitTest once[] = {
        cmocka_unit_test(test_reader_choice),
        cmocka_unit_test(test_prefetch_dense),
        cmocka_unit_test(test_runlog_io),
        cmocka_unit_test(test_no_mmap_banks),
        cmocka_unit_test(test_bad_settings),
    };
    int failed = 0;
    static const char *const readers[] = { "uring", "pool" };
    for (int r = tu_have_uring("test_xio") ? 0 : 1; r < 2; r++) {
        xt_reader = readers[r];
        setenv("CFLOW_XIO_READER", xt_reader, 1);
        fprintf(stderr, "---- CFLOW_XIO_READER=%s\n", xt_reader);
        failed += cmocka_run_group_tests_name(readers[r], per_reader, NULL, NULL);
    }
    unsetenv("CFLOW_XIO_READER");
    xt_reader = tu_have_uring("test_xio") ? "uring" : "pool";
    failed += cmocka_run_group_tests_name("any reader", once, NULL, NULL);
    return failed;
}
