/*
 * test_lazy.c — experts checked when they are read, not when the model
 * opens (FMT_OPEN_LAZY_EXPERTS; issue 17, the time to the first token of
 * a model bigger than the memory).
 *
 * A copy of tiny-moe has the first tile of every expert of one layer
 * overwritten with 0xff bytes (each scale a NaN):
 *   - opened for mmap, the open refuses it, naming the file and the
 *     offset of the first such tile: every tile is checked before use;
 *   - opened for sync or staged reads, the open succeeds without reading
 *     the bank, and the first token that routes to that layer fails with
 *     the same kind of error, naming the file and the offset of a
 *     corrupted tile, takes no position, and fails again the next time
 *     (a refused expert is never used);
 *   - switching that session to mmap checks the whole bank first and is
 *     refused the same way, leaving its mode as it was;
 *   - `cflow run --expert-io sync|staged` exits non-zero with one line
 *     naming the file and the offset, no token printed.
 * The good model's sessions, lazily opened, switch to mmap and back and
 * give mmap's tokens (test_xio checks every mode's tokens at length).
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "format/cflow_format.h"
#include "testutil.h"

#define N_TOK 8
enum { MAXE = 64 };

static char good[4096], bad[4096];
static unsigned bad_layer, n_bad;
static unsigned long long bad_off[MAXE];   /* the corrupted tiles' header offsets */

static int setup(void **state)
{
    (void)state;
    tu_proc p;
    snprintf(good, sizeof good, "%s", tu_tmp("lazy-good.cflow"));
    snprintf(bad, sizeof bad, "%s", tu_tmp("lazy-bad.cflow"));
    if (tu_cflow_run(&p, "synth", "tiny-moe", good, (char *)NULL) || !tu_ok(&p, "synth"))
        return -1;
    tu_proc_free(&p);
    size_t n = 0;
    char *bytes = tu_read_file(good, &n);
    assert_non_null(bytes);
    assert_int_equal(tu_write_file(bad, bytes, n), 0);
    free(bytes);
    fmt_model *m = NULL;
    char err[512];
    if (fmt_model_open(&m, good, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    const fmt_hparams *hp = fmt_model_hparams(m);
    uint64_t size = 0;
    const uint8_t *map = fmt_model_map(m, &size);
    FILE *f = fopen(bad, "r+b");
    assert_non_null(f);
    /* the last layer with experts: every token routes there */
    for (unsigned l = 0; l < hp->n_layers; l++)
        if (!fmt_model_expert(m, l, 0, NULL, NULL, NULL, NULL))
            bad_layer = l;
    for (unsigned e = 0; e < hp->n_experts && e < MAXE; e++) {
        const fmt_stream *gu = NULL;
        assert_int_equal(fmt_model_expert(m, bad_layer, e, &gu, NULL, NULL, NULL), 0);
        const fmt_tile *t = &gu->tiles[0];
        uint64_t pay = (uint64_t)((const uint8_t *)t->payload - map);
        size_t psz = 18 * ((size_t)t->rows * t->cols / 32);   /* Q4_0 blocks: at most this */
        uint8_t ff[4096];
        memset(ff, 0xff, sizeof ff);
        assert_true(psz <= sizeof ff);
        assert_int_equal(fseek(f, (long)pay, SEEK_SET), 0);
        assert_int_equal(fwrite(ff, 1, psz, f), psz);
        bad_off[n_bad++] = (unsigned long long)(pay - FMT_TILE_HEADER_SIZE);
    }
    assert_int_equal(fclose(f), 0);
    fmt_model_close(m);
    return 0;
}

static int names_a_bad_tile(const char *err)
{
    const char *o = strstr(err, "in tile at offset ");
    if (!strstr(err, bad) || !strstr(err, "bad d ") || !o)
        return 0;
    unsigned long long at = strtoull(o + strlen("in tile at offset "), NULL, 10);
    for (unsigned i = 0; i < n_bad; i++)
        if (bad_off[i] == at)
            return 1;
    return 0;
}

static int open_s(eng_session **s, const char *path, int mode, char *err, size_t n)
{
    eng_opts o;
    eng_opts_default(&o);
    o.n_ctx = 64;
    o.n_threads = 1;
    o.expert_io = mode;
    return eng_open(s, path, &o, err, n);
}

static int32_t argmax(eng_session *s)
{
    return tu_argmax(eng_logits(s), eng_hparams(s)->vocab_size);
}

static void test_mmap_refused_at_open(void **state)
{
    (void)state;
    eng_session *s = NULL;
    char err[512] = "";
    int rc = open_s(&s, bad, ENG_XIO_MMAP, err, sizeof err);
    fprintf(stderr, "mmap open: rc %d: %s\n", rc, err);
    assert_int_equal(rc, ENG_EFORMAT);
    assert_null(s);
    assert_true(names_a_bad_tile(err));
    /* the first corrupted tile in file order is the one named */
    char want[64];
    snprintf(want, sizeof want, "offset %llu ", bad_off[0]);
    assert_non_null(strstr(err, want));
}

static void test_direct_refused_at_use(void **state)
{
    (void)state;
    for (int mode = ENG_XIO_SYNC; mode <= ENG_XIO_STAGED; mode++) {
        eng_session *s = NULL;
        char err[512] = "";
        int rc = open_s(&s, bad, mode, err, sizeof err);
        if (rc)
            fprintf(stderr, "%s\n", err);
        assert_int_equal(rc, 0);      /* the bank was not read */
        for (int again = 0; again < 2; again++) {
            err[0] = '\0';
            rc = eng_decode(s, 1, err, sizeof err);
            fprintf(stderr, "%s decode: rc %d: %s\n", eng_expert_io_name(mode), rc, err);
            assert_int_equal(rc, ENG_EFORMAT);   /* the bytes, not the read */
            assert_true(names_a_bad_tile(err));
            assert_null(strchr(err, '\n'));
            assert_int_equal(eng_n_past(s), 0);   /* the failed token took no position */
        }
        /* to mmap: the whole bank is checked first, and refused */
        err[0] = '\0';
        rc = eng_set_expert_io(s, ENG_XIO_MMAP, err, sizeof err);
        assert_int_equal(rc, ENG_EFORMAT);
        assert_true(names_a_bad_tile(err));
        assert_int_equal(eng_expert_io(s), mode);
        eng_close(s);
    }
}

static void test_good_switches(void **state)
{
    (void)state;
    eng_session *s = NULL;
    char err[512];
    int32_t ref[N_TOK], got[N_TOK], tok = 1;
    assert_int_equal(open_s(&s, good, ENG_XIO_MMAP, err, sizeof err), 0);
    for (int i = 0; i < N_TOK; i++) {
        assert_int_equal(eng_decode(s, tok, err, sizeof err), 0);
        ref[i] = tok = argmax(s);
    }
    eng_close(s);
    assert_int_equal(open_s(&s, good, ENG_XIO_STAGED, err, sizeof err), 0);
    tok = 1;
    for (int i = 0; i < N_TOK; i++) {
        int mode = i < 3 ? ENG_XIO_STAGED : i < 6 ? ENG_XIO_MMAP : ENG_XIO_SYNC;
        assert_int_equal(eng_set_expert_io(s, mode, err, sizeof err), 0);
        assert_int_equal(eng_decode(s, tok, err, sizeof err), 0);
        got[i] = tok = argmax(s);
    }
    eng_close(s);
    assert_memory_equal(ref, got, sizeof ref);
}

static void test_cli(void **state)
{
    (void)state;
    static const char *const modes[] = { "sync", "staged" };
    for (int i = 0; i < 2; i++) {
        tu_proc p;
        assert_int_equal(tu_cflow_run(&p, "run", "-m", bad, "-p", "the cat", "-n", "4",
                                      "--temp", "0", "--expert-io", modes[i], "--no-log",
                                      (char *)NULL), 0);
        fprintf(stderr, "cflow run --expert-io %s: exit %d: %s", modes[i], p.status, p.err);
        assert_int_not_equal(p.status, 0);
        assert_true(names_a_bad_tile(p.err));
        assert_int_equal(p.out_len, 0);
        tu_proc_free(&p);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mmap_refused_at_open),
        cmocka_unit_test(test_direct_refused_at_use),
        cmocka_unit_test(test_good_switches),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
