/*
 * test_ahead.c — skewed routing of synthetic models and the look-ahead
 * expert reads (issue 17, items 4 and 8).
 *
 *   - `cflow synth --routing zipf` (the .cflow writer, and --gguf through
 *     cflow convert) routes with a skewed expert popularity, measured with
 *     the engine's own per-expert counts (eng_expert_routed) over TOKENS
 *     varied tokens: the top_k experts of a layer routed to most take at
 *     least SKEW_MIN of its routings (1.0: every token the same experts;
 *     top_k / n_experts, 0.25 to 0.5 here, if all were equally popular),
 *     averaged over the MoE layers, and at least SKEW_MARGIN more than
 *     with --routing uniform of the same preset and seed.
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

#define TOKENS 64
#define SKEW_MIN 0.60      /* zipf: the top-k experts' share of the routings */
#define SKEW_MARGIN 0.15   /* zipf's share less uniform's: at least this */

static void synth(const char *name, char *out, ...)
{
    char *argv[16];
    int n = 0;
    va_list ap;
    argv[n++] = (char *)tu_cflow();
    argv[n++] = "synth";
    va_start(ap, out);
    for (char *a; n < 14 && (a = va_arg(ap, char *));)
        argv[n++] = a;
    va_end(ap);
    snprintf(out, 4096, "%s", tu_tmp(name));
    argv[n++] = out;
    argv[n] = NULL;
    tu_proc p;
    assert_int_equal(tu_run(&p, argv, NULL, 120), 0);
    if (p.status)
        fprintf(stderr, "synth %s: %s", name, p.err);
    assert_int_equal(p.status, 0);
    tu_proc_free(&p);
}

static eng_session *open_model(const char *path, int mode, int64_t cache)
{
    eng_session *s = NULL;
    char err[512];
    eng_opts o;
    eng_opts_default(&o);
    o.n_ctx = 128;
    o.n_threads = 2;
    o.expert_io = mode;
    o.expert_cache = cache;
    int rc = eng_open(&s, path, &o, err, sizeof err);
    if (rc)
        fprintf(stderr, "%s: %s\n", path, err);
    assert_int_equal(rc, 0);
    return s;
}

/* TOKENS varied tokens (a fixed pseudo-random walk over the vocabulary),
 * so that a repeated greedy token cannot fake a skew. */
static void feed_varied(eng_session *s)
{
    char err[512];
    uint32_t v = eng_hparams(s)->vocab_size, t = 7;
    for (int i = 0; i < TOKENS; i++) {
        t = (t * 1103515245u + 12345u) % v;
        int rc = eng_decode(s, (int32_t)t, err, sizeof err);
        if (rc)
            fprintf(stderr, "decode: %s\n", err);
        assert_int_equal(rc, 0);
    }
}

static int desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The share of the routings the top_k experts of each layer routed to most
 * take, averaged over the MoE layers. */
static double top_share(eng_session *s)
{
    const fmt_hparams *hp = eng_hparams(s);
    uint64_t c[1024];
    double sum = 0.0;
    unsigned n = 0, top = hp->top_k;
    assert_true(hp->n_experts <= 1024);
    for (unsigned l = 0; l < hp->n_layers; l++) {
        uint64_t tot = 0, hi = 0;
        assert_int_equal(eng_expert_routed(s, l, c), 0);
        qsort(c, hp->n_experts, sizeof *c, desc);
        for (unsigned e = 0; e < hp->n_experts; e++)
            tot += c[e];
        for (unsigned e = 0; e < top; e++)
            hi += c[e];
        if (!tot)
            continue;                /* a layer without experts */
        assert_int_equal(tot, (uint64_t)TOKENS * hp->top_k);
        sum += (double)hi / (double)tot;
        n++;
    }
    assert_true(n > 0);
    return sum / n;
}

static double share_of(const char *path)
{
    eng_session *s = open_model(path, ENG_XIO_MMAP, 0);
    feed_varied(s);
    double sh = top_share(s);
    eng_close(s);
    return sh;
}

/* Item 8: zipf routes skewed, uniform does not; in both writers. */
static void test_zipf_skew(void **state)
{
    (void)state;
    static const char *const presets[] = { "tiny-mixtral", "tiny-moe", "report-arch1",
                                           "report-arch4" };
    char u[4096], z[4096], g[4096], gc[4096];
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        synth("uniform.cflow", u, presets[i], (char *)NULL);
        synth("zipf.cflow", z, "--routing", "zipf", presets[i], (char *)NULL);
        double su = share_of(u), sz = share_of(z);
        fprintf(stderr, "%-13s top-k share of %d tokens' routings: uniform %.3f, "
                "zipf %.3f\n", presets[i], TOKENS, su, sz);
        assert_true(sz >= SKEW_MIN);
        assert_true(sz - su >= SKEW_MARGIN);
        remove(u);
        remove(z);
    }
    /* the GGUF llama.cpp runs, through cflow convert */
    double sg[2];
    for (int zipf = 0; zipf <= 1; zipf++) {
        synth("routing.gguf", g, "--gguf", "--routing", zipf ? "zipf:1" : "uniform",
              "tiny-mixtral", (char *)NULL);
        snprintf(gc, sizeof gc, "%s", tu_tmp("routing-gguf.cflow"));
        tu_proc p;
        assert_int_equal(tu_cflow_run(&p, "convert", g, gc, (char *)NULL), 0);
        assert_int_equal(p.status, 0);
        tu_proc_free(&p);
        sg[zipf] = share_of(gc);
        remove(g);
        remove(gc);
    }
    fprintf(stderr, "tiny-mixtral --gguf, converted: uniform %.3f, zipf %.3f\n", sg[0],
            sg[1]);
    assert_true(sg[1] >= SKEW_MIN);
    assert_true(sg[1] - sg[0] >= SKEW_MARGIN);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zipf_skew),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
