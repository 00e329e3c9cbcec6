/*
 * test_xio_rss.c — the expert banks do not enter the resident set when
 * the experts are read from the file (issue 17: "peak RSS within the
 * budget"; FMT_OPEN_LAZY_EXPERTS).
 *
 * A plain open walks every tile of the file (headers, finite scales),
 * which maps in every page of the expert banks: a 31 GB model on a 23 GiB
 * machine held a 24.2 GB resident set, its banks included.  With sync or
 * staged expert I/O the engine opens lazily: the banks are laid out
 * unread, and each expert is checked when its bytes are read.
 *
 *  - in process: a MoE model opened plainly has its bank pages in its
 *    mapping's resident set (/proc/self/smaps), opened with
 *    FMT_OPEN_LAZY_EXPERTS it has not, every byte read through the map
 *    is still the file's, and its tile table is the plain open's;
 *  - opened with FMT_OPEN_HEADER (cflow bench's first look) it has the
 *    hyperparameters of a full open and next to none of its pages
 *    resident;
 *  - the real binary: `cflow run --expert-io sync` keeps its peak resident
 *    set (ru_maxrss) a bank below `--expert-io mmap`'s on the same model.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "format/cflow_format.h"
#include "testutil.h"

/* Resident KiB of the mappings that lie inside [lo, hi) (hi rounded up
 * to the page: a mapping's end is). */
static long rss_in(const void *lo, const void *hi_)
{
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t hi = ((uintptr_t)hi_ + pg - 1) / pg * pg;
    FILE *f = fopen("/proc/self/smaps", "r");
    assert_non_null(f);
    char line[512];
    long kb = 0;
    int inside = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, ' ') &&
            line[strspn(line, "0123456789abcdef")] == '-') {
            inside = a >= (uintptr_t)lo && b <= hi;
            continue;
        }
        long v;
        if (inside && sscanf(line, "Rss: %ld kB", &v) == 1)
            kb += v;
    }
    fclose(f);
    return kb;
}

/* The expert bank's bytes: every expert's gate, up and down tiles. */
static long bank_kb(const fmt_hparams *hp)
{
    /* Q4_0: 18 bytes per 32 weights, plus tile headers (ignored) */
    uint64_t w = (uint64_t)hp->n_layers * hp->n_experts * 3u * hp->expert_ffn_dim * hp->dim;
    return (long)(w / 32 * 18 / 1024);
}

static const char *model;

static int setup(void **state)
{
    (void)state;
    static char path[4096];
    snprintf(path, sizeof path, "%s", tu_tmp("arch4.cflow"));
    tu_proc p;
    if (tu_cflow_run(&p, "synth", "report-arch4", path, NULL) || !tu_ok(&p, "synth")) {
        tu_proc_free(&p);
        return -1;
    }
    tu_proc_free(&p);
    model = path;
    return 0;
}

static void test_open_lazy(void **state)
{
    (void)state;
    char err[512];
    fmt_model *a, *b;
    assert_int_equal(fmt_model_open_ex(&a, model, 0, err, sizeof err), 0);
    assert_int_equal(fmt_model_open_ex(&b, model, FMT_OPEN_LAZY_EXPERTS, err,
                                       sizeof err), 0);
    uint64_t size = 0, size_b = 0;
    const uint8_t *ma = fmt_model_map(a, &size), *mb = fmt_model_map(b, &size_b);
    assert_int_equal(size, size_b);
    long bank = bank_kb(fmt_model_hparams(a));
    long ra = rss_in(ma, ma + size), rb = rss_in(mb, mb + size);
    fprintf(stderr, "file %llu KiB, expert bank ~%ld KiB; resident after the open: "
            "%ld KiB plain, %ld KiB releasing the experts\n",
            (unsigned long long)(size / 1024), bank, ra, rb);
    assert_true(bank > 0);
    assert_true(ra >= bank);                 /* the check maps the bank in */
    assert_true(ra - rb >= bank * 9 / 10);   /* ... the lazy open does not */
    assert_int_equal(fmt_model_experts_unchecked(b), 1);
    /* the same tiles where the plain open found them */
    const fmt_hparams *hp = fmt_model_hparams(a);
    for (unsigned l = 0; l < hp->n_layers; l++)
        for (unsigned e = 0; e < hp->n_experts; e++) {
            const fmt_stream *s[2][2];
            uint64_t o[2], n[2];
            if (fmt_model_expert(a, l, e, &s[0][0], &s[0][1], &o[0], &n[0]))
                continue;
            assert_int_equal(fmt_model_expert(b, l, e, &s[1][0], &s[1][1], &o[1], &n[1]), 0);
            assert_true(o[0] == o[1] && n[0] == n[1]);
            for (int g = 0; g < 2; g++) {
                assert_int_equal(s[0][g]->n_tiles, s[1][g]->n_tiles);
                for (uint32_t t = 0; t < s[0][g]->n_tiles; t++) {
                    const fmt_tile *x = &s[0][g]->tiles[t], *y = &s[1][g]->tiles[t];
                    assert_int_equal((const uint8_t *)x->payload - ma,
                                     (const uint8_t *)y->payload - mb);
                    assert_true(x->row0 == y->row0 && x->col0 == y->col0 &&
                                x->rows == y->rows && x->cols == y->cols &&
                                x->matrix == y->matrix && x->type == y->type &&
                                x->expert == y->expert);
                }
            }
        }
    /* the bytes behind the released pages are still the file's */
    size_t n = 0;
    char *file = tu_read_file(model, &n);
    assert_non_null(file);
    assert_int_equal(n, size);
    assert_memory_equal(mb, file, n);
    free(file);
    /* checking them all through the map passes the good file, and then
     * the model counts as checked */
    assert_int_equal(fmt_model_check_experts(b, err, sizeof err), 0);
    assert_int_equal(fmt_model_experts_unchecked(b), 0);
    assert_int_equal(fmt_model_experts_unchecked(a), 0);
    fmt_model_close(a);
    fmt_model_close(b);
}

/* FMT_OPEN_HEADER (cflow bench's look at a model before the engine opens
 * it) reads the header and nothing else: the header's hyperparameters
 * (dimensions, context, experts) as a full open has them, and next to
 * none of the file's pages resident. */
static void test_open_header(void **state)
{
    (void)state;
    char err[512];
    fmt_model *a, *h;
    assert_int_equal(fmt_model_open_ex(&a, model, 0, err, sizeof err), 0);
    assert_int_equal(fmt_model_open_ex(&h, model, FMT_OPEN_HEADER, err, sizeof err), 0);
    const fmt_hparams *pa = fmt_model_hparams(a), *ph = fmt_model_hparams(h);
    assert_int_equal(pa->n_layers, ph->n_layers);
    assert_int_equal(pa->dim, ph->dim);
    assert_int_equal(pa->max_seq, ph->max_seq);
    assert_int_equal(pa->vocab_size, ph->vocab_size);
    assert_int_equal(pa->n_heads, ph->n_heads);
    assert_int_equal(pa->n_experts, ph->n_experts);
    assert_int_equal(pa->top_k, ph->top_k);
    assert_int_equal(pa->expert_ffn_dim, ph->expert_ffn_dim);
    uint64_t size = 0;
    const uint8_t *mh = fmt_model_map(h, &size);
    long bank = bank_kb(fmt_model_hparams(a)), rh = rss_in(mh, mh + size);
    fprintf(stderr, "resident after a header-only open: %ld KiB (bank ~%ld KiB)\n", rh,
            bank);
    assert_true(rh < bank / 10);
    fmt_model_close(a);
    fmt_model_close(h);
}

/* Peak resident set of `cflow run -m model --expert-io MODE`, KiB. */
static long run_peak(const char *mode)
{
    char *const env[] = { "CFLOW_READ_BW_GBS=10", NULL };
    char *argv[] = { (char *)tu_cflow(), "run", "-m", (char *)model, "--expert-io",
                     (char *)mode, "--no-mmap", "-p", "Once upon a time", "-n", "4",
                     "--temp", "0", "--no-log", NULL };
    tu_proc p;
    assert_int_equal(tu_run_watch(&p, argv, env, 120, NULL, NULL, 100), 0);
    int ok = tu_ok(&p, mode);
    tu_proc_free(&p);
    assert_true(ok);
    return tu_maxrss_kb;
}

static void test_run_peak(void **state)
{
    (void)state;
    char err[512];
    fmt_model *m;
    assert_int_equal(fmt_model_open(&m, model, err, sizeof err), 0);
    long bank = bank_kb(fmt_model_hparams(m));
    fmt_model_close(m);
    long mm = run_peak("mmap"), sy = run_peak("sync");
    fprintf(stderr, "peak RSS: --expert-io mmap %ld KiB, sync %ld KiB; bank ~%ld KiB\n",
            mm, sy, bank);
    assert_true(mm - sy >= bank * 3 / 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_lazy),
        cmocka_unit_test(test_open_header),
        cmocka_unit_test(test_run_peak),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
