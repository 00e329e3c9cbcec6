/*
 * test_ahead.c — skewed routing of synthetic models and the look-ahead
 * expert reads (issue 17, items 4 and 8).
 *
 *   - `cflow synth --routing zipf` (the .cflow writer, and --gguf through
 *     cflow convert) routes with a skewed expert popularity, token by
 *     token, measured with the engine's own per-expert counts
 *     (eng_expert_routed) over TOKENS varied tokens: the top_k experts of
 *     a layer routed to most take at least SKEW_MARGIN more of its
 *     routings under zipf (exponent 1) than under zipf:0.1 (the same
 *     token-dependent routing, next to no skew), averaged over the MoE
 *     layers; the figures follow the Zipf law of top-k choices (about
 *     0.66 against 0.55 for 4 experts top-2, 0.51 against 0.32 for 8
 *     experts top-2); under both every MoE layer routes to at least
 *     SPREAD_MIN of its experts; the file names its routing (cflow
 *     inspect), a uniform one none.  A uniform file's share is printed
 *     only: its residual hardly depends on the token (fmt_synth_route.c),
 *     so its tokens route alike and its share says so, not that some
 *     experts are more popular;
 *   - look-ahead (eng_moe_ahead.c) never changes a token: greedy tokens
 *     with it on and off are mmap's, in every mode (mmap, sync, staged,
 *     auto), with the cache off, under one layer's experts and holding
 *     everything, on synthetic models of every schedule without an expert
 *     delay (and one with, where it guesses nothing), a zipf one, and the
 *     tiny Mixtral and Qwen3-MoE GGUF fixtures, converted;
 *   - its counts add up: with a cache and sync/staged I/O it guesses
 *     (xio_pred > 0), some guesses are routed (0 < xio_pred_hits <=
 *     xio_pred), wasted <= reads <= guesses, its bytes are inside
 *     xio_bytes, and the cache's hits and misses still sum to the routed
 *     experts; off, without a cache or with mmap it guesses nothing;
 *   - one layer ahead, every layer with experts is guessed each token
 *     (top_k guesses each: xio_pred >= tokens x such layers x top_k), in
 *     every schedule;
 *   - looking 3 layers ahead guesses and is right at least as often as
 *     looking 1 ahead (it makes the same nearest guesses and more);
 *   - eng_set_expert_ahead turns it off and on between tokens (no guesses
 *     while off, the same tokens), refuses on where it was off at the
 *     open;
 *   - $CFLOW_EXPERT_AHEAD=off turns it off, a bad value is refused;
 *     $CFLOW_EXPERT_AHEAD_LAYERS outside 1..ENG_AHEAD_MAX is refused, as is
 *     eng_opts.expert_ahead_layers outside it; `cflow run --expert-ahead
 *     on|off` and `--expert-ahead-layers 1|8` print mmap's text, 9 is
 *     refused.
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
#define SKEW_MARGIN 0.08   /* zipf:1's top-k share less zipf:0.1's: at least this */
#define SPREAD_MIN 0.85    /* zipf: the least share of a layer's experts routed */

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

/* ahead: the layers look-ahead guesses ahead, 0 off */
static eng_session *open_ahead(const char *path, int mode, int64_t cache, int ahead)
{
    eng_session *s = NULL;
    char err[512];
    eng_opts o;
    eng_opts_default(&o);
    o.n_ctx = 128;
    o.n_threads = 2;
    o.expert_io = mode;
    o.expert_cache = cache;
    o.expert_ahead = ahead > 0;
    o.expert_ahead_layers = ahead > 0 ? ahead : 0;
    int rc = eng_open(&s, path, &o, err, sizeof err);
    if (rc)
        fprintf(stderr, "%s: %s\n", path, err);
    assert_int_equal(rc, 0);
    return s;
}

static eng_session *open_model(const char *path, int mode, int64_t cache)
{
    return open_ahead(path, mode, cache, 0);
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
 * take, averaged over the MoE layers; *spread the least share of a MoE
 * layer's experts routed to at all. */
static double top_share(eng_session *s, double *spread)
{
    const fmt_hparams *hp = eng_hparams(s);
    uint64_t c[1024];
    double sum = 0.0;
    unsigned n = 0, top = hp->top_k;
    assert_true(hp->n_experts <= 1024);
    *spread = 1.0;
    for (unsigned l = 0; l < hp->n_layers; l++) {
        uint64_t tot = 0, hi = 0;
        unsigned used = 0;
        assert_int_equal(eng_expert_routed(s, l, c), 0);
        qsort(c, hp->n_experts, sizeof *c, desc);
        for (unsigned e = 0; e < hp->n_experts; e++)
            tot += c[e], used += c[e] > 0;
        for (unsigned e = 0; e < top; e++)
            hi += c[e];
        if (!tot)
            continue;                /* a layer without experts */
        assert_int_equal(tot, (uint64_t)TOKENS * hp->top_k);
        sum += (double)hi / (double)tot;
        if ((double)used / hp->n_experts < *spread)
            *spread = (double)used / hp->n_experts;
        n++;
    }
    assert_true(n > 0);
    return sum / n;
}

/* The routing `cflow inspect --json` reads from the file's metadata
 * ("" when it names none: uniform). */
static void inspect_routing(const char *path, char *out, size_t n)
{
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "inspect", "--json", path, (char *)NULL), 0);
    assert_int_equal(p.status, 0);
    const char *r = strstr(p.out, "\"synth_routing\"");
    out[0] = 0;
    if (r && (r = strchr(r + 15, '"')))
        snprintf(out, n, "%.*s", (int)strcspn(r + 1, "\""), r + 1);
    tu_proc_free(&p);
}

static double share_of(const char *path, const char *routing, double *spread)
{
    char rt[64];
    inspect_routing(path, rt, sizeof rt);
    assert_string_equal(rt, routing);
    eng_session *s = open_model(path, ENG_XIO_MMAP, 0);
    feed_varied(s);
    double sh = top_share(s, spread);
    eng_close(s);
    return sh;
}

/* zipf:S against zipf:0.1 (the same token-dependent routing, next to no
 * skew): the stronger exponent routes more to each layer's favourites,
 * and both spread over most experts. */
static void check_skew(const char *what, double sz, double spz, double sl, double spl)
{
    fprintf(stderr, "%-26s top-k share of %d tokens' routings: zipf:0.1 %.3f, zipf %.3f; "
            "least share of a layer's experts routed: %.2f, %.2f\n", what, TOKENS, sl, sz,
            spl, spz);
    assert_true(sz - sl >= SKEW_MARGIN);
    assert_true(spz >= SPREAD_MIN && spl >= SPREAD_MIN);
}

/* Item 8: zipf routes skewed and token by token; in both writers. */
static void test_zipf_skew(void **state)
{
    (void)state;
    static const char *const presets[] = { "tiny-mixtral", "tiny-moe", "report-arch1",
                                           "report-arch4" };
    char u[4096], z[4096], l[4096], g[4096], gc[4096];
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        double spu, spz, spl;
        synth("uniform.cflow", u, presets[i], (char *)NULL);
        synth("zipf.cflow", z, "--routing", "zipf", presets[i], (char *)NULL);
        synth("zipf-low.cflow", l, "--routing", "zipf:0.1", presets[i], (char *)NULL);
        if (i == 0) {   /* the exponent given is the one the file names */
            char z2[4096], rt[64];
            synth("zipf2.cflow", z2, "--routing", "zipf:1.5", presets[i], (char *)NULL);
            inspect_routing(z2, rt, sizeof rt);
            assert_string_equal(rt, "zipf:1.5");
            remove(z2);
        }
        /* uniform names no routing; its figure is printed, not held to
         * anything: its residual hardly depends on the token, so its
         * top-k share measures how alike the tokens route, not how
         * popular some experts are */
        double su = share_of(u, "", &spu);
        double sz = share_of(z, "zipf:1", &spz), sl = share_of(l, "zipf:0.1", &spl);
        fprintf(stderr, "%-26s uniform: top-k share %.3f, least share of experts %.2f\n",
                presets[i], su, spu);
        check_skew(presets[i], sz, spz, sl, spl);
        remove(u);
        remove(z);
        remove(l);
    }
    /* the GGUF llama.cpp runs (Q4_0 and Q8_0 blocks), through cflow convert */
    for (int q8 = 0; q8 <= 1; q8++) {
        double sg[2], sp[2];
        for (int k = 0; k <= 1; k++) {
            synth("routing.gguf", g, "--gguf", "-q", q8 ? "q8_0" : "q4_0", "--routing",
                  k ? "zipf:1" : "zipf:0.1", "tiny-mixtral", (char *)NULL);
            snprintf(gc, sizeof gc, "%s", tu_tmp("routing-gguf.cflow"));
            tu_proc p;
            assert_int_equal(tu_cflow_run(&p, "convert", g, gc, (char *)NULL), 0);
            assert_int_equal(p.status, 0);
            tu_proc_free(&p);
            sg[k] = share_of(gc, k ? "zipf:1" : "zipf:0.1", &sp[k]);
            remove(g);
            remove(gc);
        }
        check_skew(q8 ? "tiny-mixtral --gguf q8_0" : "tiny-mixtral --gguf q4_0", sg[1], sp[1],
                   sg[0], sp[0]);
    }
}

/* ---- look-ahead ---------------------------------------------------------- */
#define N_TOK 12

static void greedy(eng_session *s, int32_t *out)
{
    char err[512];
    int32_t tok = 1;
    for (int i = 0; i < N_TOK; i++) {
        int rc = eng_decode(s, tok, err, sizeof err);
        if (rc)
            fprintf(stderr, "decode: %s\n", err);
        assert_int_equal(rc, 0);
        out[i] = tok = tu_argmax(eng_logits(s), eng_hparams(s)->vocab_size);
    }
}

/* The routed experts counted so far, over every layer, and into *layers
 * (NULL: not asked) the layers that routed: those with experts. */
static uint64_t routed_total(eng_session *s, unsigned *layers)
{
    const fmt_hparams *hp = eng_hparams(s);
    uint64_t c[1024], tot = 0;
    unsigned n = 0;
    assert_true(hp->n_experts <= 1024);
    for (unsigned l = 0; l < hp->n_layers; l++) {
        uint64_t t = 0;
        if (eng_expert_routed(s, l, c) == 0)
            for (unsigned e = 0; e < hp->n_experts; e++)
                t += c[e];
        tot += t;
        n += t > 0;
    }
    if (layers)
        *layers = n;
    return tot;
}

/* One model: every mode, budget and look-ahead setting against mmap.  A
 * deeper look-ahead also makes the one-layer guesses (the same ones: the
 * tokens, hence the residuals, are the same), so it guesses and is right
 * at least as often. */
static void check_ahead(const char *name, const char *path)
{
    int32_t ref[N_TOK], got[N_TOK];
    eng_session *s = open_model(path, ENG_XIO_MMAP, 0);
    greedy(s, ref);
    const fmt_hparams *hp = eng_hparams(s);
    const int guessing = hp->expert_delay == 0;
    const uint32_t E = hp->n_experts;
    eng_stats st;
    eng_get_stats(s, &st);
    const uint64_t one = st.expert_bank_bytes / ((uint64_t)hp->n_layers * E);
    const int64_t budgets[] = { 0, (int64_t)(one * (E - 1)),
                                (int64_t)(2 * st.expert_bank_bytes + (1 << 20)) };
    eng_close(s);
    static const int depths[] = { 0, 1, 3 };   /* layers ahead; 0 off */
    uint64_t one_pred = 0, one_hits = 0;
    for (int mode = ENG_XIO_MMAP; mode <= ENG_XIO_AUTO; mode++)
        for (size_t b = 0; b < 3; b++)
            for (size_t a = 0; a < sizeof depths / sizeof *depths; a++) {
                const int ahead = depths[a];
                if ((mode == ENG_XIO_MMAP || mode == ENG_XIO_AUTO) && b != 1)
                    continue;
                if (mode == ENG_XIO_AUTO)   /* less free memory than the file: staged */
                    setenv("CFLOW_MEM_FREE", "65536", 1);
                s = open_ahead(path, mode, mode == ENG_XIO_AUTO ? -1 : budgets[b], ahead);
                unsetenv("CFLOW_MEM_FREE");
                greedy(s, got);
                eng_get_stats(s, &st);
                const int io = eng_expert_io(s) != ENG_XIO_MMAP;
                fprintf(stderr, "%-22s %-6s cache %9lld ahead %d: tokens %s; guessed %llu, "
                        "routed %llu, read %llu (wasted %llu); hits %llu misses %llu\n", name,
                        eng_expert_io_name(mode), (long long)budgets[b],
                        ahead,
                        memcmp(ref, got, sizeof ref) ? "DIFFER" : "agree",
                        (unsigned long long)st.xio_pred, (unsigned long long)st.xio_pred_hits,
                        (unsigned long long)st.xio_pred_reads,
                        (unsigned long long)st.xio_pred_wasted,
                        (unsigned long long)st.xio_hits, (unsigned long long)st.xio_misses);
                assert_memory_equal(ref, got, sizeof ref);
                if (ahead && guessing && io && (budgets[b] > 0 || mode == ENG_XIO_AUTO)) {
                    assert_true(st.xio_pred > 0);
                    assert_true(st.xio_pred_hits > 0 && st.xio_pred_hits <= st.xio_pred);
                    assert_true(st.xio_pred_wasted <= st.xio_pred_reads);
                    assert_true(st.xio_pred_reads <= st.xio_pred);
                    assert_true(st.xio_pred_bytes <= st.xio_bytes);
                    assert_true(st.xio_pred_reads == 0 || st.xio_pred_bytes > 0);
                    if (ahead == 1) {
                        /* every layer with experts guessed each token,
                         * from the layer end before it (eng_sched.c) */
                        unsigned moe_layers = 0;
                        routed_total(s, &moe_layers);
                        assert_true(st.xio_pred >=
                                    (uint64_t)N_TOK * moe_layers * eng_hparams(s)->top_k);
                        one_pred = st.xio_pred;
                        one_hits = st.xio_pred_hits;
                    } else {
                        assert_true(st.xio_pred >= one_pred);
                        assert_true(st.xio_pred_hits >= one_hits);
                    }
                } else {
                    assert_int_equal(st.xio_pred + st.xio_pred_hits + st.xio_pred_reads +
                                     st.xio_pred_bytes, 0);
                }
                if (io)   /* one issue per routed expert: a hit or a miss */
                    assert_int_equal(st.xio_hits + st.xio_misses, routed_total(s, NULL));
                eng_close(s);
            }
}

static void test_ahead_tokens(void **state)
{
    (void)state;
    static const struct { const char *preset, *routing, *quant; } models[] = {
        { "tiny-mixtral", "uniform", "q4_0" }, /* ParallelSqrt2 without dense FFN */
        { "tiny-mixtral", "zipf", "q4_0" },
        { "report-arch1", "uniform", "q4_0" }, /* DecoupledStreams */
        { "report-arch3", "uniform", "q4_0" }, /* PipelineRegisters */
        { "report-arch5", "uniform", "q4_0" }, /* FixedPoint */
        { "report-arch2_4_sync", "zipf", "q4_0" }, /* DelayedSum, expert_delay 0 */
        { "tiny-moe", "uniform", "q4_0" },     /* expert_delay 2: nothing to guess */
        /* experts of the GGML types: q4_k and q6_k (llama.cpp's Q4_K_M),
         * MXFP4 */
        { "tiny-mixtral256", "zipf", "q4_k_m" },
        { "tiny-mixtral", "uniform", "mxfp4" },
    };
    char path[4096], name[64];
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        synth("ahead.cflow", path, "--routing", models[i].routing, "-q", models[i].quant,
              models[i].preset, (char *)NULL);
        snprintf(name, sizeof name, "%s %s -q %s", models[i].preset, models[i].routing,
                 models[i].quant);
        check_ahead(name, path);
        remove(path);
    }
    static const char *const fixtures[] = { "mixtral-tiny", "qwen3moe-tiny" };
    const char *src = getenv("CFLOW_SRCDIR");
    for (size_t i = 0; i < sizeof fixtures / sizeof *fixtures; i++) {
        char gguf[4096];
        snprintf(gguf, sizeof gguf, "%s/tests/data/moe/%s.gguf", src ? src : ".", fixtures[i]);
        snprintf(path, sizeof path, "%s", tu_tmp("ahead-fixture.cflow"));
        tu_proc p;
        assert_int_equal(tu_cflow_run(&p, "convert", gguf, path, (char *)NULL), 0);
        if (p.status)
            fprintf(stderr, "convert %s: %s", gguf, p.err);
        assert_int_equal(p.status, 0);
        tu_proc_free(&p);
        check_ahead(fixtures[i], path);
        remove(path);
    }
}

/* eng_set_expert_ahead between tokens (cflow-tui's /expert-ahead): off
 * makes no guesses while the tokens stay mmap's, on again guesses again,
 * eng_expert_ahead says the setting each time; a session opened with it
 * off refuses on (ENG_EUNSUP, one line naming the file) and stays off; a
 * pipeline-native model takes either. */
static void test_ahead_live(void **state)
{
    (void)state;
    char path[4096], err[512];
    int32_t ref[3 * N_TOK], got[N_TOK];
    synth("live.cflow", path, "tiny-mixtral", (char *)NULL);
    eng_session *s = open_model(path, ENG_XIO_MMAP, 0);
    for (int k = 0; k < 3; k++)
        greedy(s, ref + k * N_TOK);
    eng_close(s);
    s = open_ahead(path, ENG_XIO_SYNC, 1 << 20, 1);
    eng_stats st;
    uint64_t pred[3];
    for (int k = 0; k < 3; k++) {   /* on, off, on again */
        const int on = k != 1;
        assert_int_equal(eng_set_expert_ahead(s, on, err, sizeof err), 0);
        assert_int_equal(eng_expert_ahead(s), on ? 1 : 0);
        eng_get_stats(s, &st);
        uint64_t before = st.xio_pred;
        greedy(s, got);
        eng_get_stats(s, &st);
        pred[k] = st.xio_pred - before;
        fprintf(stderr, "live look-ahead %s: %llu guesses over %d tokens\n", on ? "on" : "off",
                (unsigned long long)pred[k], N_TOK);
        assert_memory_equal(got, ref + k * N_TOK, sizeof got);
    }
    assert_true(pred[0] > 0);
    assert_int_equal(pred[1], 0);
    assert_true(pred[2] > 0);
    eng_close(s);
    /* the depth, live: opened at 2 (tiny-mixtral's 3 layers allow no
     * more), then 1, then 2 again: the same tokens, and the deeper rounds
     * guess more (each layer's guesses from two layers back as well) */
    s = open_ahead(path, ENG_XIO_SYNC, 1 << 20, 2);
    for (int k = 0; k < 3; k++) {
        const int depth = k == 1 ? 1 : 2;
        assert_int_equal(eng_set_expert_ahead_layers(s, depth, err, sizeof err), 0);
        assert_int_equal(eng_expert_ahead(s), depth);
        eng_get_stats(s, &st);
        uint64_t before = st.xio_pred;
        greedy(s, got);
        eng_get_stats(s, &st);
        pred[k] = st.xio_pred - before;
        fprintf(stderr, "live look-ahead of %d layers: %llu guesses over %d tokens\n", depth,
                (unsigned long long)pred[k], N_TOK);
        assert_memory_equal(got, ref + k * N_TOK, sizeof got);
    }
    assert_true(pred[1] > 0);
    assert_true(pred[0] > pred[1] && pred[2] > pred[1]);
    /* off keeps the depth for on; out of range, or deeper than the open's */
    assert_int_equal(eng_set_expert_ahead(s, 0, err, sizeof err), 0);
    assert_int_equal(eng_set_expert_ahead_layers(s, 1, err, sizeof err), 0);
    assert_int_equal(eng_expert_ahead(s), 0);
    assert_int_equal(eng_set_expert_ahead(s, 1, err, sizeof err), 0);
    assert_int_equal(eng_expert_ahead(s), 1);
    static const int out_of_range[] = { 0, -1, ENG_AHEAD_MAX + 1 };
    for (size_t i = 0; i < sizeof out_of_range / sizeof *out_of_range; i++) {
        assert_int_equal(eng_set_expert_ahead_layers(s, out_of_range[i], err, sizeof err),
                         ENG_EARG);
        assert_non_null(strstr(err, "use 1 to " ENG_STR(ENG_AHEAD_MAX)));
    }
    eng_close(s);
    s = open_ahead(path, ENG_XIO_SYNC, 1 << 20, 1);
    err[0] = 0;
    assert_int_equal(eng_set_expert_ahead_layers(s, 2, err, sizeof err), ENG_EUNSUP);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "slots were set aside for 1 when the model was opened"));
    assert_null(strchr(err, '\n'));
    assert_int_equal(eng_expert_ahead(s), 1);
    /* a depth past the last layer is the deepest there is: 2 here */
    eng_close(s);
    s = open_ahead(path, ENG_XIO_SYNC, 1 << 20, 2);
    assert_int_equal(eng_set_expert_ahead_layers(s, 5, err, sizeof err), 0);
    assert_int_equal(eng_expert_ahead(s), 5);
    greedy(s, got);
    assert_memory_equal(got, ref, sizeof got);
    eng_close(s);
    /* opened off: on is refused, nothing changes */
    s = open_ahead(path, ENG_XIO_SYNC, 1 << 20, 0);
    assert_int_equal(eng_set_expert_ahead(s, 1, err, sizeof err), ENG_EUNSUP);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "look-ahead was off when the model was opened"));
    assert_null(strchr(err, '\n'));
    assert_int_equal(eng_expert_ahead(s), 0);
    assert_int_equal(eng_set_expert_ahead(s, 0, err, sizeof err), 0);
    assert_int_equal(eng_set_expert_ahead_layers(s, 1, err, sizeof err), ENG_EUNSUP);
    assert_non_null(strstr(err, "look-ahead was off when the model was opened"));
    eng_close(s);
    remove(path);
    /* pipeline-native (expert_delay 2): nothing to guess, either setting */
    synth("live.cflow", path, "tiny-moe", (char *)NULL);
    s = open_ahead(path, ENG_XIO_SYNC, 1 << 20, 0);
    assert_int_equal(eng_set_expert_ahead(s, 1, err, sizeof err), 0);
    assert_int_equal(eng_expert_ahead(s) > 0, 1);
    assert_int_equal(eng_set_expert_ahead(s, 0, err, sizeof err), 0);
    assert_int_equal(eng_set_expert_ahead_layers(s, 7, err, sizeof err), 0);
    eng_close(s);
    remove(path);
}

/* $CFLOW_EXPERT_AHEAD: off is off; a bad value is an error. */
static void test_ahead_env(void **state)
{
    (void)state;
    char path[4096], err[512];
    int32_t got[N_TOK];
    synth("ahead-env.cflow", path, "tiny-mixtral", (char *)NULL);
    eng_opts o;
    eng_opts_default(&o);
    o.n_ctx = 64;
    o.expert_io = ENG_XIO_SYNC;
    o.expert_cache = 1 << 30;
    eng_session *s = NULL;
    setenv("CFLOW_EXPERT_AHEAD", "sideways", 1);
    assert_int_equal(eng_open(&s, path, &o, err, sizeof err), ENG_EARG);
    assert_null(s);
    assert_non_null(strstr(err, "CFLOW_EXPERT_AHEAD='sideways'"));
    for (int on = 0; on <= 1; on++) {
        setenv("CFLOW_EXPERT_AHEAD", on ? "on" : "off", 1);
        assert_int_equal(eng_open(&s, path, &o, err, sizeof err), 0);
        greedy(s, got);
        eng_stats st;
        eng_get_stats(s, &st);
        assert_true(on ? st.xio_pred > 0 : st.xio_pred == 0);
        eng_close(s);
    }
    unsetenv("CFLOW_EXPERT_AHEAD");
    /* $CFLOW_EXPERT_AHEAD_LAYERS: 1 to ENG_AHEAD_MAX layers, else refused;
     * an eng_opts value out of range is refused too */
    static const char *const bad_layers[] = { "0", "9", "2x", "-1", "" };
    for (size_t i = 0; i < sizeof bad_layers / sizeof *bad_layers; i++) {
        setenv("CFLOW_EXPERT_AHEAD_LAYERS", bad_layers[i], 1);
        int rc = eng_open(&s, path, &o, err, sizeof err);
        if (!*bad_layers[i]) {       /* empty: unset, the default */
            assert_int_equal(rc, 0);
            eng_close(s);
            s = NULL;
            continue;
        }
        assert_int_equal(rc, ENG_EARG);
        assert_null(s);
        assert_non_null(strstr(err, "CFLOW_EXPERT_AHEAD_LAYERS="));
    }
    setenv("CFLOW_EXPERT_AHEAD_LAYERS", "3", 1);
    assert_int_equal(eng_open(&s, path, &o, err, sizeof err), 0);
    eng_close(s);
    s = NULL;
    unsetenv("CFLOW_EXPERT_AHEAD_LAYERS");
    o.expert_ahead_layers = ENG_AHEAD_MAX + 1;
    assert_int_equal(eng_open(&s, path, &o, err, sizeof err), ENG_EARG);
    assert_null(s);
    assert_non_null(strstr(err, "look-ahead of 9 layers"));
    o.expert_ahead_layers = 0;
    /* the real binary: the same text with look-ahead on, off and mmap */
    char out[4][2048];
    for (int k = 0; k < 4; k++) {
        tu_proc p;
        static const char *const io[] = { "mmap", "sync", "staged", "sync" };
        assert_int_equal(tu_cflow_run(&p, "run", "-m", path, "-p", "ab", "-n", "12",
                                      "--temp", "0", "--no-log", "--expert-io", io[k],
                                      "--expert-cache", "1M", "--expert-ahead",
                                      k == 1 ? "off" : "on", "--expert-ahead-layers",
                                      k == 3 ? "8" : "1", (char *)NULL), 0);
        if (p.status)
            fprintf(stderr, "cflow run: %s", p.err);
        assert_int_equal(p.status, 0);
        snprintf(out[k], sizeof out[k], "%s", p.out);
        tu_proc_free(&p);
    }
    assert_string_equal(out[0], out[1]);
    assert_string_equal(out[0], out[2]);
    assert_string_equal(out[0], out[3]);
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "run", "-m", path, "-n", "1", "--no-log",
                                  "--expert-ahead", "maybe", (char *)NULL), 0);
    assert_int_equal(p.status, 2);
    assert_non_null(strstr(p.err, "expert-ahead"));
    tu_proc_free(&p);
    assert_int_equal(tu_cflow_run(&p, "run", "-m", path, "-n", "1", "--no-log",
                                  "--expert-ahead-layers", "9", (char *)NULL), 0);
    assert_int_equal(p.status, 2);
    assert_non_null(strstr(p.err, "expert-ahead-layers"));
    tu_proc_free(&p);
    remove(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zipf_skew),
        cmocka_unit_test(test_ahead_tokens),
        cmocka_unit_test(test_ahead_env),
        cmocka_unit_test(test_ahead_live),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
