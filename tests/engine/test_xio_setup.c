/*
 * test_xio_setup.c — expert I/O's settings, run once under the default
 * reader (part of test_xio, xio_test.h):
 *
 *   - prefetch on a dense model gives the tokens without it, and reads
 *     nothing;
 *   - the per-layer I/O figures reach the run log, `cflow runs` and the
 *     comparison of two runs;
 *   - --no-mmap leaves the expert banks mapped for sync and staged I/O
 *     and copies the rest, with the same bytes and the same tokens;
 *   - $CFLOW_XIO_READER: a bad value is an error naming it, and the
 *     reader asked for is the one reading;
 *   - bad settings are errors, not crashes.
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

#include "engine/eng_impl.h"
#include "format/cflow_format.h"
#include "testutil.h"

/* Prefetch on a dense model: the same tokens as without. */
void test_prefetch_dense(void **state)
{
    (void)state;
    char path[4096];
    const char *conv = tu_convert_shared("models/stories260K-q8_0.gguf", "stories260K.cflow");
    assert_non_null(conv);
    snprintf(path, sizeof path, "%s", conv);
    int32_t a[N_TOK], b[N_TOK];
    eng_session *s = xt_open_model(path, ENG_XIO_MMAP, 0, NULL);
    xt_greedy(s, a, N_TOK, 0);
    eng_close(s);
    s = xt_open_model(path, ENG_XIO_STAGED, 1, NULL);  /* no experts: reads nothing */
    xt_greedy(s, b, N_TOK, 0);
    eng_stats st;
    eng_get_stats(s, &st);
    eng_close(s);
    assert_memory_equal(a, b, sizeof a);
    assert_int_equal(st.xio_bytes, 0);
}

/* The per-layer I/O figures reach the run log (schema 4), `cflow runs
 * show` and `cflow runs export`, and `cflow run` prints their summary;
 * `cflow runs compare` of a sync and a staged run adds staged over sync
 * with the report's model and its refined form. */
void test_runlog_io(void **state)
{
    (void)state;
    char path[4096], db[4096];
    xt_synth("report-arch4", ".cflow", 0, path);
    snprintf(db, sizeof db, "%s", tu_tmp("runs.db"));
    static const char *const modes[] = { "staged", "mmap", "sync" };
    for (int m = 0; m < 3; m++) {
        int io = m != 1;
        tu_proc p;
        assert_int_equal(tu_cflow_run(&p, "run", "-m", path, "-p", "the cat", "-n", "6",
                                      "--temp", "0", "--expert-io", modes[m], "--db", db,
                                      (char *)NULL), 0);
        assert_int_equal(p.status, 0);
        char *line = strstr(p.err, "cflow: expert I/O");
        fprintf(stderr, "%s: %.*s\n", modes[m], line ? (int)strcspn(line, "\n") : 4,
                line ? line : "none");
        if (io) {
            assert_non_null(line);
            assert_non_null(strstr(line, "model (C + IO) / max(C, IO_eff) = "));
        } else {
            assert_null(line);
        }
        tu_proc_free(&p);
        char id[8];
        snprintf(id, sizeof id, "%d", m + 1);
        assert_int_equal(tu_cflow_run(&p, "runs", "show", id, "--db", db, (char *)NULL), 0);
        assert_int_equal(p.status, 0);
        assert_non_null(strstr(p.out, modes[m]));
        if (io) {
            char *t = strstr(p.out, "expert I/O (ms per token");
            assert_non_null(t);
            /* a row per layer and the sum */
            for (int l = 0; l < 6; l++) {
                char row[16];
                snprintf(row, sizeof row, "\n  %5d ", l);
                assert_non_null(strstr(t, row));
            }
            assert_non_null(strstr(t, "\n    all "));
        } else {
            assert_null(strstr(p.out, "expert I/O (ms per token"));
        }
        tu_proc_free(&p);
    }
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "runs", "export", "--json", "--db", db, (char *)NULL), 0);
    assert_int_equal(p.status, 0);
    /* the staged and sync runs' six layers carry the figures, mmap's none */
    int n = 0;
    for (const char *q = p.out; (q = strstr(q, "\"io_model_speedup\"")); q++)
        n++;
    assert_int_equal(n, 12);
    tu_proc_free(&p);
    /* sync against staged, either way round: the pair's figures */
    static const char *const pairs[][2] = { { "3", "1" }, { "1", "3" } };
    for (int k = 0; k < 2; k++) {
        assert_int_equal(tu_cflow_run(&p, "runs", "compare", pairs[k][0], pairs[k][1],
                                      "--db", db, (char *)NULL), 0);
        assert_int_equal(p.status, 0);
        char *t = strstr(p.out, "expert I/O, staged (run 1) over sync (run 3)");
        assert_non_null(t);
        double net = 0, model = 0, tau = -9, refined = 0;
        char *q = strstr(t, "  net ");
        assert_non_null(q);
        assert_int_equal(sscanf(q, "  net %lfx; model (C + IO) / max(C, IO_eff) %lfx", &net,
                                &model), 2);
        q = strstr(t, "interference tax tau ");
        assert_non_null(q);
        assert_int_equal(sscanf(q, "interference tax tau %lf; refined (C + stall_sync) / "
                                   "max((1 + tau) C, IO_eff) %lfx", &tau, &refined), 2);
        fprintf(stderr, "compare %s %s: net %.2f model %.2f tau %+.2f refined %.2f\n",
                pairs[k][0], pairs[k][1], net, model, tau, refined);
        assert_true(net > 0 && model > 0 && refined > 0 && tau > -1);
        tu_proc_free(&p);
    }
    /* staged against mmap: no such section */
    assert_int_equal(tu_cflow_run(&p, "runs", "compare", "1", "2", "--db", db, (char *)NULL),
                     0);
    assert_int_equal(p.status, 0);
    assert_null(strstr(p.out, "over sync"));
    tu_proc_free(&p);
    remove(path);
}

/* --no-mmap with sync or staged expert I/O: the expert banks' whole pages
 * stay mapped from the file (that I/O reads them itself; a copy would only
 * hold memory), every other byte is copied, the block reads as the file
 * does, and each mode gives mmap's tokens, switching modes included. */
void test_no_mmap_banks(void **state)
{
    (void)state;
    static const struct { const char *preset; int vflow; } models[] = {
        { "tiny-moe", 0 }, { "tiny-moe", 1 }, { "report-arch4", 0 },
    };
    const uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        char path[4096], err[512];
        xt_synth(models[i].preset, models[i].vflow ? ".vflow" : ".cflow", models[i].vflow, path);
        fmt_model *m0 = NULL, *m1 = NULL, *m2 = NULL;
        assert_int_equal(fmt_model_open_ex(&m0, path, 0, err, sizeof err), 0);
        assert_int_equal(fmt_model_open_ex(&m1, path, FMT_OPEN_READ, err, sizeof err), 0);
        assert_int_equal(fmt_model_open_ex(&m2, path, FMT_OPEN_READ | FMT_OPEN_MAP_EXPERTS,
                                           err, sizeof err), 0);
        uint64_t size = fmt_model_file_size(m0), n0, n2;
        const void *b0 = fmt_model_map(m0, &n0), *b2 = fmt_model_map(m2, &n2);
        assert_int_equal(n0, size);
        assert_int_equal(n2, size);
        assert_int_equal(fmt_model_copied_bytes(m0), 0);
        assert_int_equal(fmt_model_copied_bytes(m1), size);
        /* what stays mapped is the banks' whole pages: at least the
         * experts' bytes less a part page at each end of each bank, at
         * most the span from a layer's first expert to its last */
        const fmt_hparams *hp = fmt_model_hparams(m0);
        uint64_t ex = 0, span = 0;
        for (unsigned l = 0; l < hp->n_layers; l++) {
            uint64_t lo = UINT64_MAX, hi = 0, off, len;
            for (unsigned e = 0; e < hp->n_experts; e++) {
                if (fmt_model_expert(m0, l, e, NULL, NULL, &off, &len))
                    continue;
                ex += len;
                lo = off < lo ? off : lo;
                hi = off + len > hi ? off + len : hi;
            }
            if (hi > lo)
                span += hi - lo + 2 * pg;
        }
        const uint64_t kept = size - fmt_model_copied_bytes(m2);
        fprintf(stderr, "%s%s: %llu bytes, %llu of experts, %llu left mapped\n",
                models[i].preset, models[i].vflow ? " (.vflow)" : "",
                (unsigned long long)size, (unsigned long long)ex, (unsigned long long)kept);
        assert_true(ex > 0 && kept % pg == 0);
        assert_true(kept + 2 * pg * hp->n_layers >= ex);
        assert_true(kept <= span);
        assert_memory_equal(b0, b2, size);
        fmt_model_close(m0);
        fmt_model_close(m2);
        /* the copy that drops the file's cached pages behind it (what auto
         * does for a file beyond half the free memory) reads the same
         * bytes: the drop is after each chunk is in, never before */
        fmt_model *m3 = NULL;
        uint64_t n1, n3;
        assert_int_equal(fmt_model_open_ex(&m3, path, FMT_OPEN_READ | FMT_OPEN_DROP_CACHE, err,
                                           sizeof err), 0);
        const void *b1 = fmt_model_map(m1, &n1), *b3 = fmt_model_map(m3, &n3);
        assert_int_equal(n3, size);
        assert_int_equal(fmt_model_copied_bytes(m3), size);
        assert_memory_equal(b1, b3, size);
        fmt_model_close(m1);
        fmt_model_close(m3);

        int32_t ref[N_TOK], got[N_TOK];
        eng_session *s = xt_open_model(path, ENG_XIO_MMAP, 0, NULL);
        xt_greedy(s, ref, N_TOK, 0);
        eng_close(s);
        for (int mode = ENG_XIO_MMAP; mode <= ENG_XIO_STAGED + 1; mode++) {
            eng_opts o;
            eng_opts_default(&o);
            o.n_ctx = 64;
            o.n_threads = 2;
            o.no_mmap = 1;
            o.prefetch = 0;
            o.expert_io = mode > ENG_XIO_STAGED ? ENG_XIO_STAGED : mode;
            assert_int_equal(eng_open(&s, path, &o, err, sizeof err), 0);
            /* the last round starts staged and switches every 3 tokens */
            xt_greedy(s, got, N_TOK, mode > ENG_XIO_STAGED ? 3 : 0);
            assert_memory_equal(ref, got, sizeof ref);
            eng_close(s);
        }
        remove(path);
    }
    /* a model without experts: nothing to leave mapped, the whole file is
     * copied (its header says so before any walk) */
    char path[4096], err[512];
    tu_proc p;
    snprintf(path, sizeof path, "%s", tu_tmp("dense-q8.cflow"));
    assert_int_equal(tu_cflow_run(&p, "convert", tu_shared("models/stories260K-q8_0.gguf"), path,
                                  (char *)NULL), 0);
    assert_int_equal(p.status, 0);
    tu_proc_free(&p);
    fmt_model *m0 = NULL, *m2 = NULL;
    uint64_t n0, n2;
    assert_int_equal(fmt_model_open_ex(&m0, path, 0, err, sizeof err), 0);
    assert_int_equal(fmt_model_open_ex(&m2, path, FMT_OPEN_READ | FMT_OPEN_MAP_EXPERTS, err,
                                       sizeof err), 0);
    assert_int_equal(fmt_model_hparams(m0)->n_experts, 0);
    assert_int_equal(fmt_model_copied_bytes(m2), fmt_model_file_size(m0));
    const void *b0 = fmt_model_map(m0, &n0), *b2 = fmt_model_map(m2, &n2);
    assert_int_equal(n0, n2);
    assert_memory_equal(b0, b2, n0);
    fmt_model_close(m0);
    fmt_model_close(m2);
    remove(path);
}

/* $CFLOW_XIO_READER: a bad value is an error naming it; the reader is
 * reported; `cflow bench diskbw` times a file through it, and refuses a
 * file too small to time in one line naming it. */
void test_reader_choice(void **state)
{
    (void)state;
    char path[4096], err[512];
    xt_synth("tiny-moe", ".cflow", 0, path);
    eng_opts o;
    eng_opts_default(&o);
    o.n_ctx = 64;
    o.expert_io = ENG_XIO_SYNC;
    eng_session *s = NULL;
    setenv("CFLOW_XIO_READER", "bogus", 1);
    int rc = eng_open(&s, path, &o, err, sizeof err);
    unsetenv("CFLOW_XIO_READER");
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(err, "CFLOW_XIO_READER='bogus'"));

    /* io_uring refused at run time (CFLOW_FAULT=uring-init:eperm stands
     * for a seccomp filter): the pool reads, one line through the log
     * says why, and the tokens are mmap's */
    if (tu_have_uring("test_xio")) {
        int32_t ref[N_TOK], got[N_TOK];
        s = xt_open_model(path, ENG_XIO_MMAP, 0, NULL);
        xt_greedy(s, ref, N_TOK, 0);
        eng_close(s);
        xt_logcap lc = { "", 0 };
        o.log = xt_cap_log;
        o.log_ud = &lc;
        setenv("CFLOW_FAULT", "uring-init:eperm", 1);
        rc = eng_open(&s, path, &o, err, sizeof err);
        unsetenv("CFLOW_FAULT");
        assert_int_equal(rc, 0);
        const char *r = eng_expert_reader(s, NULL, NULL);
        xt_greedy(s, got, N_TOK, 0);
        eng_close(s);
        fprintf(stderr, "io_uring refused: reader %s; log: %s", r ? r : "none", lc.text);
        assert_true(r && !strcmp(r, "pool"));
        assert_int_equal(lc.n, 1);
        assert_non_null(strstr(lc.text, "reader pool"));
        assert_non_null(strstr(lc.text, strerror(EPERM)));
        assert_memory_equal(ref, got, sizeof ref);
    }

    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "bench", "diskbw", "--file", path, (char *)NULL), 0);
    fprintf(stderr, "diskbw of a small file: exit %d: %s", p.status, p.err);
    assert_int_not_equal(p.status, 0);
    assert_non_null(strstr(p.err, path));
    assert_non_null(strstr(p.err, "too small"));
    tu_proc_free(&p);
    remove(path);

    /* 64 MiB: the smallest file diskbw times */
    snprintf(path, sizeof path, "%s", tu_tmp("diskbw.bin"));
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    static char block[1 << 16];
    memset(block, 7, sizeof block);
    for (int i = 0; i < 1024; i++)
        assert_int_equal(fwrite(block, 1, sizeof block, f), sizeof block);
    assert_int_equal(fclose(f), 0);
    for (int r = tu_have_uring("test_xio") ? 0 : 1; r < 2; r++) {
        char *const argv[] = { (char *)tu_cflow(), "bench", "diskbw", "--file", path, "-r", "2",
                               "--qd", "8", "-o", "csv", "--no-log", NULL };
        char *const env[] = { r ? "CFLOW_XIO_READER=pool" : "CFLOW_XIO_READER=uring", NULL };
        assert_int_equal(tu_run(&p, argv, env, 120), 0);
        fprintf(stderr, "diskbw: exit %d: %s%s", p.status, p.out, p.err);
        if (p.status && strstr(p.err, "O_DIRECT")) {   /* (a file system without it) */
            assert_non_null(strstr(p.err, path));
            tu_proc_free(&p);
            continue;
        }
        assert_int_equal(p.status, 0);
        const char *row = strchr(p.out, '\n');
        assert_non_null(row);
        char rd[16];
        double med, lo, hi;
        unsigned qd;
        assert_int_equal(sscanf(row + 1, "%15[^,],%u,%*u,%lf,%lf,%lf", rd, &qd, &med, &lo, &hi),
                         5);
        assert_string_equal(rd, r ? "pool" : "io_uring");
        assert_int_equal(qd, 8);
        assert_true(med > 0 && lo <= med && med <= hi);
        tu_proc_free(&p);
    }
    remove(path);
}

/* Bad settings are errors, not crashes. */
void test_bad_settings(void **state)
{
    (void)state;
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "run", "--expert-io", "bogus", "-n", "1", (char *)NULL), 0);
    assert_int_not_equal(p.status, 0);
    assert_non_null(strstr(p.err, "--expert-io"));
    tu_proc_free(&p);
    assert_int_equal(tu_cflow_run(&p, "run", "--prefetch", "maybe", "-n", "1", (char *)NULL), 0);
    assert_int_not_equal(p.status, 0);
    assert_non_null(strstr(p.err, "--prefetch"));
    tu_proc_free(&p);
    assert_int_equal(eng_expert_io_from_name("staged"), ENG_XIO_STAGED);
    assert_int_equal(eng_expert_io_from_name("nope"), -1);
    /* the reader's environment: a value that is not a count in range is
     * refused with its name and value, not read as the default */
    char path[4096];
    xt_synth("report-arch4", ".cflow", 0, path);
    static const char *const bad[] = { "CFLOW_XIO_QD=abc", "CFLOW_XIO_QD=0",
                                       "CFLOW_XIO_QD=5000", "CFLOW_XIO_CHUNK=1M5",
                                       "CFLOW_XIO_CHUNK=100", "CFLOW_XIO_CHUNK=-4K" };
    char *const argv[] = { (char *)tu_cflow(), "run", "-m", path, "-p", "the cat", "-n", "2",
                           "--temp", "0", "--expert-io", "sync", "--no-log", NULL };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *const env[] = { (char *)bad[i], NULL };
        char want[64];
        snprintf(want, sizeof want, "%.*s='%s'", (int)strcspn(bad[i], "="), bad[i],
                 strchr(bad[i], '=') + 1);
        assert_int_equal(tu_run(&p, argv, env, 60), 0);
        fprintf(stderr, "%s: exit %d, stderr: %s", bad[i], p.status, p.err);
        assert_false(p.signaled);
        assert_int_not_equal(p.status, 0);
        assert_non_null(strstr(p.err, want));
        assert_int_equal(p.out_len, 0);
        tu_proc_free(&p);
    }
    /* the engine's words (eng_env_check), from eng_open itself: refused
     * with the name and the value before the file is opened */
    static const char *const words[][2] = { { "CFLOW_PIN", "yes" }, { "CFLOW_PIN", "2" },
                                            { "CFLOW_ISA", "avx-512" } };
    for (size_t i = 0; i < sizeof words / sizeof *words; i++) {
        char err[256] = "", want[64];
        eng_session *s = (eng_session *)&err;   /* must come back NULL */
        setenv(words[i][0], words[i][1], 1);
        snprintf(want, sizeof want, "%s='%s'", words[i][0], words[i][1]);
        assert_int_equal(eng_open(&s, path, NULL, err, sizeof err), ENG_EARG);
        unsetenv(words[i][0]);
        assert_null(s);
        assert_non_null(strstr(err, want));
    }
    setenv("CFLOW_PIN", "0", 1);
    assert_int_equal(eng_env_check(NULL, 0), 0);
    unsetenv("CFLOW_PIN");
    /* and good ones run: 8 requests of 256 KiB */
    char *const good[] = { "CFLOW_XIO_QD=8", "CFLOW_XIO_CHUNK=256K", NULL };
    assert_int_equal(tu_run(&p, argv, good, 60), 0);
    assert_int_equal(p.status, 0);
    assert_true(p.out_len > 0);
    tu_proc_free(&p);
    remove(path);
}
