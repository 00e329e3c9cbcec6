/*
 * test_sample.c — the sampler: greedy is argmax, filters exclude what they
 * must, the draw follows the softmax, seeds reproduce, bad logits are safe.
 *
 * Logits come from a tiny local PRNG (not the sampler's) so the tests do not
 * share a random stream with the code under test.
 */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "engine/engine.h"

/* ------------------------------------------------------------ helpers */

static uint64_t t_rng = 88172645463325252ull;

static uint64_t t_next(void)            /* xorshift64 */
{
    t_rng ^= t_rng << 13;
    t_rng ^= t_rng >> 7;
    t_rng ^= t_rng << 17;
    return t_rng;
}

static float t_uniform(float lo, float hi)
{
    return lo + (hi - lo) * (float)((t_next() >> 40) * (1.0 / 16777216.0));
}

static void fill_random(float *x, uint32_t n, float lo, float hi)
{
    uint32_t i;
    for (i = 0; i < n; i++)
        x[i] = t_uniform(lo, hi);
}

/* Reference argmax: lowest index wins ties, NaN never wins. */
static int32_t ref_argmax(const float *x, uint32_t n)
{
    uint32_t i, b = 0;
    for (i = 1; i < n; i++)
        if (!isnan(x[i]) && (isnan(x[b]) || x[i] > x[b]))
            b = i;
    return (int32_t)b;
}

static eng_sampling plain(float temp)
{
    eng_sampling p;
    eng_sampling_default(&p);
    p.temp = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.rep_penalty = 1.0f;
    return p;
}

/* Draw n tokens from the same logits (copied each time: sampling may
 * modify them), counting hits per id. */
static void draw_counts(eng_sampler *s, const float *logits, uint32_t V,
                        const int32_t *hist, size_t nh, int n,
                        unsigned *counts)
{
    float *tmp = malloc(V * sizeof *tmp);
    int i;
    assert_non_null(tmp);
    memset(counts, 0, V * sizeof *counts);
    for (i = 0; i < n; i++) {
        int32_t id;
        memcpy(tmp, logits, V * sizeof *tmp);
        id = eng_sampler_sample(s, tmp, hist, nh);
        assert_true(id >= 0 && (uint32_t)id < V);
        counts[id]++;
    }
    free(tmp);
}

/* ------------------------------------------------------------- tests */

static void test_defaults(void **state)
{
    eng_sampling p;
    (void)state;
    memset(&p, 0xff, sizeof p);
    eng_sampling_default(&p);
    assert_true(p.temp == 0.8f);
    assert_int_equal(p.top_k, 40);
    assert_true(p.top_p == 0.95f);
    assert_true(p.min_p == 0.05f);
    assert_true(p.rep_penalty == 1.0f);
    assert_int_equal(p.rep_last_n, 64);
    assert_int_equal(p.seed, 0);
    assert_null(eng_sampler_new(&p, 0));
    assert_int_equal(eng_sampler_sample(NULL, NULL, NULL, 0), -1);
}

static void test_greedy_is_argmax(void **state)
{
    const uint32_t V = 1000;
    float *x = malloc(V * sizeof *x), *y = malloc(V * sizeof *y);
    eng_sampling p = plain(0.0f);
    eng_sampler *s;
    int round;
    (void)state;
    assert_non_null(x);
    assert_non_null(y);
    /* Filters must not matter when greedy. */
    p.top_k = 5;
    p.top_p = 0.1f;
    p.min_p = 0.5f;
    s = eng_sampler_new(&p, V);
    assert_non_null(s);
    for (round = 0; round < 200; round++) {
        fill_random(x, V, -10.0f, 10.0f);
        if (round % 2) {            /* force ties: quantise to a few levels */
            uint32_t i;
            for (i = 0; i < V; i++)
                x[i] = floorf(x[i]);
        }
        memcpy(y, x, V * sizeof *x);
        assert_int_equal(eng_sampler_sample(s, y, NULL, 0), ref_argmax(x, V));
    }
    /* All equal: index 0; a late unique max; ties broken toward low ids. */
    {
        uint32_t i;
        for (i = 0; i < V; i++)
            x[i] = 1.5f;
        assert_int_equal(eng_sampler_sample(s, x, NULL, 0), 0);
        x[777] = 2.0f;
        x[901] = 2.0f;
        assert_int_equal(eng_sampler_sample(s, x, NULL, 0), 777);
    }
    eng_sampler_free(s);
    free(x);
    free(y);
}

static void test_top_k_1_is_greedy(void **state)
{
    const uint32_t V = 512;
    const float temps[] = { 0.1f, 0.7f, 1.0f, 2.5f, 100.0f };
    float x[512], y[512];
    size_t t;
    (void)state;
    for (t = 0; t < sizeof temps / sizeof temps[0]; t++) {
        eng_sampling p = plain(temps[t]);
        eng_sampler *s;
        int round;
        p.top_k = 1;
        p.seed = 1234 + t;
        s = eng_sampler_new(&p, V);
        assert_non_null(s);
        for (round = 0; round < 100; round++) {
            fill_random(x, V, -5.0f, 5.0f);
            if (round % 3 == 0) {
                uint32_t i;
                for (i = 0; i < V; i++)
                    x[i] = roundf(x[i]);   /* ties at the top */
            }
            memcpy(y, x, sizeof x);
            assert_int_equal(eng_sampler_sample(s, y, NULL, 0),
                             ref_argmax(x, V));
        }
        eng_sampler_free(s);
    }
}

/* The top-k set: with top_k = k only the k best logits can ever appear. */
static void test_top_k_excludes(void **state)
{
    enum { V = 64, K = 5, N = 20000 };
    float x[V], sorted[V];
    unsigned counts[V];
    eng_sampling p = plain(1.0f);
    eng_sampler *s;
    float kth;
    int i, j, seen = 0;
    (void)state;
    /* Flat-ish logits so the excluded tokens would be drawn often. */
    fill_random(x, V, 0.0f, 1.0f);
    memcpy(sorted, x, sizeof x);
    for (i = 0; i < V; i++)                  /* selection sort, descending */
        for (j = i + 1; j < V; j++)
            if (sorted[j] > sorted[i]) {
                float t = sorted[i];
                sorted[i] = sorted[j];
                sorted[j] = t;
            }
    kth = sorted[K - 1];
    p.top_k = K;
    p.seed = 7;
    s = eng_sampler_new(&p, V);
    assert_non_null(s);
    draw_counts(s, x, V, NULL, 0, N, counts);
    for (i = 0; i < V; i++) {
        if (x[i] < kth)
            assert_int_equal(counts[i], 0);
        else
            seen += counts[i] > 0;
    }
    assert_int_equal(seen, K);               /* and all K are reachable */
    eng_sampler_free(s);
}

static void softmax(const float *x, uint32_t n, float temp, double *p)
{
    double m = -INFINITY, sum = 0.0;
    uint32_t i;
    for (i = 0; i < n; i++)
        if (x[i] > m)
            m = x[i];
    for (i = 0; i < n; i++)
        sum += p[i] = exp((x[i] - m) / temp);
    for (i = 0; i < n; i++)
        p[i] /= sum;
}

/* temp 1, no filters: empirical frequencies match the softmax. */
static void test_distribution(void **state)
{
    enum { V = 10, N = 20000 };
    const float x[V] = { 1.0f, 2.0f, 0.5f, -1.0f, 3.0f,
                         2.5f, 0.0f, -3.0f, 1.5f, 2.0f };
    double p[V], chi2 = 0.0;
    unsigned counts[V];
    eng_sampling sp = plain(1.0f);
    eng_sampler *s;
    int i;
    (void)state;
    softmax(x, V, 1.0f, p);
    sp.seed = 42;
    s = eng_sampler_new(&sp, V);
    assert_non_null(s);
    draw_counts(s, x, V, NULL, 0, N, counts);
    for (i = 0; i < V; i++) {
        double e = N * p[i], sd = sqrt(N * p[i] * (1.0 - p[i]));
        double d = fabs((double)counts[i] - e);
        if (d > 4.5 * sd)
            fail_msg("token %d: %u draws, expected %.1f (sd %.1f)", i,
                     counts[i], e, sd);
        chi2 += (counts[i] - e) * (counts[i] - e) / e;
    }
    /* 9 degrees of freedom: P(chi2 > 33.7) ~ 1e-4. */
    if (chi2 > 33.7)
        fail_msg("chi-square %.2f too large", chi2);

    /* The temperature flattens/sharpens the same way: temp 2. */
    sp.temp = 2.0f;
    eng_sampler_set(s, &sp);
    softmax(x, V, 2.0f, p);
    draw_counts(s, x, V, NULL, 0, N, counts);
    for (i = 0; i < V; i++) {
        double e = N * p[i], sd = sqrt(N * p[i] * (1.0 - p[i]));
        if (fabs((double)counts[i] - e) > 4.5 * sd)
            fail_msg("temp 2, token %d: %u draws, expected %.1f", i,
                     counts[i], e);
    }
    eng_sampler_free(s);
}

static void test_seed_reproducible(void **state)
{
    enum { V = 300, STEPS = 200 };
    float base[V], x[V];
    int32_t a[STEPS], b[STEPS], c[STEPS];
    eng_sampling p;
    eng_sampler *s1, *s2, *s3;
    int i, differ = 0;
    (void)state;
    eng_sampling_default(&p);
    p.temp = 1.0f;
    p.seed = 0;                              /* 0 is an ordinary fixed seed */
    fill_random(base, V, -2.0f, 2.0f);
    s1 = eng_sampler_new(&p, V);
    s2 = eng_sampler_new(&p, V);
    p.seed = 99;
    s3 = eng_sampler_new(&p, V);
    assert_non_null(s1);
    assert_non_null(s2);
    assert_non_null(s3);
    for (i = 0; i < STEPS; i++) {
        memcpy(x, base, sizeof x);
        a[i] = eng_sampler_sample(s1, x, a, (size_t)i);
        memcpy(x, base, sizeof x);
        b[i] = eng_sampler_sample(s2, x, b, (size_t)i);
        memcpy(x, base, sizeof x);
        c[i] = eng_sampler_sample(s3, x, c, (size_t)i);
        differ += a[i] != c[i];
    }
    assert_memory_equal(a, b, sizeof a);
    assert_true(differ > STEPS / 4);        /* another seed, another stream */

    /* eng_sampler_set restarts the stream from the seed. */
    p.seed = 0;
    eng_sampler_set(s2, &p);
    for (i = 0; i < STEPS; i++) {
        memcpy(x, base, sizeof x);
        b[i] = eng_sampler_sample(s2, x, b, (size_t)i);
    }
    assert_memory_equal(a, b, sizeof a);
    eng_sampler_free(s1);
    eng_sampler_free(s2);
    eng_sampler_free(s3);
}

/* Fixed expectations for the PRNG stream itself: drawing from a uniform
 * 2-token distribution exposes the top bit of each splitmix64 output, which
 * must never change between machines or versions. */
static void test_seed_stream_fixed(void **state)
{
    /* First splitmix64 outputs for state 0 (published reference values). */
    static const uint64_t sm[8] = {
        0xe220a8397b1dcdafull, 0x6e789e6aa1b965f4ull, 0x06c45d188009454full,
        0xf88bb8a8724c81ecull, 0x1b39896a51a8749bull, 0x53cb9f0c747ea2eaull,
        0x2c829abe1f4532e1ull, 0xc584133ac916ab3cull,
    };
    eng_sampling p = plain(1.0f);
    eng_sampler *s;
    float x[2];
    int i;
    (void)state;
    p.seed = 0;
    s = eng_sampler_new(&p, 2);
    assert_non_null(s);
    for (i = 0; i < 8; i++) {
        int32_t want = (int32_t)(sm[i] >> 63);  /* u < 0.5 -> token 0 */
        x[0] = x[1] = 0.0f;
        assert_int_equal(eng_sampler_sample(s, x, NULL, 0), want);
    }
    eng_sampler_free(s);
}

/* top-p: the nucleus is the smallest sorted prefix with mass >= p. */
static void test_top_p_excludes(void **state)
{
    enum { V = 8, N = 20000 };
    /* probabilities 0.4 0.3 0.15 0.1 0.05 and three tiny ones */
    const double pr[V] = { 0.3, 0.05, 0.4, 0.1, 0.15, 0.0001, 0.0002,
                           0.0003 };
    float x[V];
    unsigned counts[V];
    eng_sampling p = plain(1.0f);
    eng_sampler *s;
    int i;
    (void)state;
    for (i = 0; i < V; i++)
        x[i] = (float)log(pr[i]);
    /* mass of {2,0} = 0.7 < 0.75 <= mass of {2,0,4} = 0.85 */
    p.top_p = 0.75f;
    p.seed = 3;
    s = eng_sampler_new(&p, V);
    assert_non_null(s);
    draw_counts(s, x, V, NULL, 0, N, counts);
    for (i = 0; i < V; i++) {
        if (i == 2 || i == 0 || i == 4)
            assert_true(counts[i] > 0);
        else
            assert_int_equal(counts[i], 0);
    }
    /* kept tokens are renormalised: 0.15/0.85 of the draws go to token 4 */
    {
        double e = N * 0.15 / 0.85, sd = sqrt(e * (1 - 0.15 / 0.85));
        assert_true(fabs(counts[4] - e) < 4.5 * sd);
    }
    /* Near a prefix boundary (mass {2,0} = 0.6996): rounding decides
     * whether token 4 joins, but nothing beyond it ever does. */
    p.top_p = 0.7f;
    eng_sampler_set(s, &p);
    draw_counts(s, x, V, NULL, 0, N, counts);
    for (i = 0; i < V; i++)
        if (i != 2 && i != 0 && i != 4)
            assert_int_equal(counts[i], 0);
    /* tiny top_p keeps only the best */
    p.top_p = 0.01f;
    eng_sampler_set(s, &p);
    draw_counts(s, x, V, NULL, 0, 2000, counts);
    assert_int_equal(counts[2], 2000);
    p.top_p = 0.0f;
    eng_sampler_set(s, &p);
    draw_counts(s, x, V, NULL, 0, 2000, counts);
    assert_int_equal(counts[2], 2000);
    eng_sampler_free(s);
}

/* top-p over larger vocabularies (exercising the pruning and the
 * mass-guided quickselect) against a brute-force nucleus: sort by
 * (p desc, id asc), take the shortest prefix with mass >= top_p. */
static int cmp_pid(const void *a, const void *b, void *ctx)
{
    const double *pr = ctx;
    int x = *(const int *)a, y = *(const int *)b;
    if (pr[x] != pr[y])
        return pr[x] > pr[y] ? -1 : 1;
    return (x > y) - (x < y);
}

static void test_top_p_large(void **state)
{
    enum { VMAX = 5000, N = 2000 };
    const uint32_t sizes[] = { 100, 500, 2000, 5000 };
    const float tops[] = { 0.3f, 0.6f, 0.9f, 0.97f };
    float *x = malloc(VMAX * sizeof *x);
    double *pr = malloc(VMAX * sizeof *pr);
    int *order = malloc(VMAX * sizeof *order);
    char *in = malloc(VMAX);
    unsigned *counts = malloc(VMAX * sizeof *counts);
    int trial, checked = 0;
    (void)state;
    assert_non_null(x);
    assert_non_null(pr);
    assert_non_null(order);
    assert_non_null(in);
    assert_non_null(counts);
    for (trial = 0; trial < 32; trial++) {
        uint32_t V = sizes[trial % 4], i;
        float top = tops[(trial / 4) % 4];
        float temp = (trial & 16) ? 0.7f : 1.3f;
        float scale = (trial & 1) ? 3.0f : 8.0f;
        eng_sampling p = plain(temp);
        eng_sampler *s;
        double cum = 0.0, e, sd;
        uint32_t kept = 0;

        fill_random(x, V, -scale, scale);
        if (trial & 2)                       /* many exact ties */
            for (i = 0; i < V; i++)
                x[i] = roundf(x[i]);
        softmax(x, V, temp, pr);
        for (i = 0; i < V; i++)
            order[i] = (int)i;
        qsort_r(order, V, sizeof *order, cmp_pid, pr);
        memset(in, 0, V);
        for (i = 0; i < V; i++) {
            in[order[i]] = 1;
            kept++;
            cum += pr[order[i]];
            if (cum >= top)
                break;
        }
        /* skip a borderline cut, where float and double may disagree */
        if (cum - pr[order[kept - 1]] > top - 1e-6 || cum < top + 1e-6)
            continue;
        checked++;
        p.top_p = top;
        p.seed = (uint64_t)trial;
        s = eng_sampler_new(&p, V);
        assert_non_null(s);
        draw_counts(s, x, V, NULL, 0, N, counts);
        for (i = 0; i < V; i++)
            if (!in[i] && counts[i])
                fail_msg("trial %d: token %u outside the nucleus (%u kept) "
                         "drawn %u times", trial, i, kept, counts[i]);
        /* renormalised over exactly the nucleus: the best token's share */
        e = N * pr[order[0]] / cum;
        sd = sqrt(e * (1.0 - pr[order[0]] / cum)) + 0.5;
        if (fabs(counts[order[0]] - e) > 5.0 * sd)
            fail_msg("trial %d: best token drawn %u times, expected %.1f",
                     trial, counts[order[0]], e);
        eng_sampler_free(s);
    }
    assert_true(checked >= 20);

    /* Flat tops: a block of near-equal tokens above a floor of impossible
     * ones puts the nucleus boundary among tokens that are each drawn
     * often, so a token wrongly dropped or wrongly kept shows up. */
    for (trial = 0; trial < 400; trial++) {
        /* a few large cases, then many small ones where the selection's
         * pivots often land on or next to the boundary itself */
        const uint32_t vs[4] = { 300, 5000, 300, 5000 };
        uint32_t V = trial < 4 ? vs[trial] : 40 + (uint32_t)(t_next() % 60);
        uint32_t n_flat = trial < 4 ? 200 : V - 5, i;
        float top = t_uniform(0.2f, 0.95f);
        eng_sampling p = plain(1.0f);
        eng_sampler *s;
        double cum = 0.0;
        uint32_t kept = 0;

        for (i = 0; i < V; i++)
            x[i] = i < n_flat ? t_uniform(0.0f, 0.3f) : -30.0f;
        softmax(x, V, 1.0f, pr);
        for (i = 0; i < V; i++)
            order[i] = (int)i;
        qsort_r(order, V, sizeof *order, cmp_pid, pr);
        memset(in, 0, V);
        for (i = 0; i < V; i++) {
            in[order[i]] = 1;
            kept++;
            cum += pr[order[i]];
            if (cum >= top)
                break;
        }
        assert_true(cum - pr[order[kept - 1]] < top - 1e-6);
        p.top_p = top;
        p.seed = 100 + (uint64_t)trial;
        s = eng_sampler_new(&p, V);
        assert_non_null(s);
        draw_counts(s, x, V, NULL, 0, 1500, counts);
        for (i = 0; i < V; i++) {
            if (!in[i] && counts[i])
                fail_msg("flat %d: token %u outside the nucleus (%u kept) "
                         "drawn %u times", trial, i, kept, counts[i]);
            if (in[i] && !counts[i] && 1500.0 * pr[i] / cum >= 20.0)
                fail_msg("flat %d: nucleus token %u (%u kept) never drawn",
                         trial, i, kept);
        }
        eng_sampler_free(s);
    }
    free(x);
    free(pr);
    free(order);
    free(in);
    free(counts);
}

/* min-p: tokens with p < min_p * p_max never appear. */
static void test_min_p_excludes(void **state)
{
    enum { V = 6, N = 20000 };
    /* relative to the max (token 1): 1, 0.5, 0.2, 0.09, 0.11, 0.05 */
    const double rel[V] = { 0.2, 1.0, 0.09, 0.5, 0.11, 0.05 };
    float x[V];
    unsigned counts[V];
    eng_sampling p = plain(1.0f);
    eng_sampler *s;
    int i;
    (void)state;
    for (i = 0; i < V; i++)
        x[i] = (float)log(rel[i]);
    p.min_p = 0.1f;
    p.seed = 5;
    s = eng_sampler_new(&p, V);
    assert_non_null(s);
    draw_counts(s, x, V, NULL, 0, N, counts);
    for (i = 0; i < V; i++) {
        if (rel[i] >= 0.1)
            assert_true(counts[i] > 0);
        else
            assert_int_equal(counts[i], 0);
    }
    /* min_p >= 1 keeps only the best */
    p.min_p = 1.0f;
    eng_sampler_set(s, &p);
    draw_counts(s, x, V, NULL, 0, 1000, counts);
    assert_int_equal(counts[1], 1000);
    /* min-p and top-p together: the shorter prefix wins */
    p.min_p = 0.15f;                         /* keeps {1,3,0} */
    p.top_p = 0.99f;                         /* would keep 5 tokens */
    eng_sampler_set(s, &p);
    draw_counts(s, x, V, NULL, 0, N, counts);
    for (i = 0; i < V; i++)
        assert_true((counts[i] > 0) == (rel[i] >= 0.15));
    p.min_p = 0.01f;                         /* keeps all */
    p.top_p = 0.6f;                          /* 1/1.95 = .51 < .6 <= .77: {1,3} */
    eng_sampler_set(s, &p);
    draw_counts(s, x, V, NULL, 0, N, counts);
    for (i = 0; i < V; i++)
        assert_true((counts[i] > 0) == (i == 1 || i == 3));
    eng_sampler_free(s);
}

static void test_rep_penalty(void **state)
{
    enum { V = 4, N = 20000 };
    const float x[V] = { 1.0f, 1.0f, -0.5f, 0.2f };
    unsigned base[V], pen[V];
    /* token 0 repeated many times: counted once; token 2 (negative logit)
     * also present; an out-of-range id is ignored. */
    const int32_t hist[] = { 0, 0, 0, 2, 0, 77, -1, 0 };
    eng_sampling p = plain(1.0f);
    eng_sampler *s;
    float y[V];
    (void)state;
    p.seed = 9;
    s = eng_sampler_new(&p, V);
    assert_non_null(s);
    draw_counts(s, x, V, hist, sizeof hist / sizeof hist[0], N, base);
    p.rep_penalty = 1.5f;
    eng_sampler_set(s, &p);
    draw_counts(s, x, V, hist, sizeof hist / sizeof hist[0], N, pen);
    assert_true(pen[0] < base[0] * 0.85);
    assert_true(pen[2] < base[2]);
    assert_true(pen[1] > base[1]);

    /* Exact values, llama.cpp style, each distinct id once. */
    memcpy(y, x, sizeof y);
    p.temp = 0.0f;
    eng_sampler_set(s, &p);
    (void)eng_sampler_sample(s, y, hist, sizeof hist / sizeof hist[0]);
    assert_true(y[0] == 1.0f / 1.5f);
    assert_true(y[1] == 1.0f);
    assert_true(y[2] == -0.5f * 1.5f);
    assert_true(y[3] == 0.2f);

    /* Greedy honours the penalty: 0 and 1 tie, 0 is penalised -> 1. */
    memcpy(y, x, sizeof y);
    assert_int_equal(eng_sampler_sample(s, y, hist, 1), 1);
    /* rep_last_n limits the window: only the last id (0) counts. */
    p.rep_last_n = 1;
    eng_sampler_set(s, &p);
    memcpy(y, x, sizeof y);
    (void)eng_sampler_sample(s, y, hist, sizeof hist / sizeof hist[0]);
    assert_true(y[0] == 1.0f / 1.5f && y[2] == -0.5f);
    /* rep_last_n 0: off; -1: the whole history. */
    p.rep_last_n = 0;
    eng_sampler_set(s, &p);
    memcpy(y, x, sizeof y);
    (void)eng_sampler_sample(s, y, hist, sizeof hist / sizeof hist[0]);
    assert_memory_equal(y, x, sizeof y);
    p.rep_last_n = -1;
    eng_sampler_set(s, &p);
    memcpy(y, x, sizeof y);
    (void)eng_sampler_sample(s, y, hist, sizeof hist / sizeof hist[0]);
    assert_true(y[2] == -0.75f);
    eng_sampler_free(s);
}

static void test_bad_logits(void **state)
{
    enum { V = 16 };
    float x[V];
    eng_sampling p;
    eng_sampler *s;
    int i, k, mode;
    (void)state;
    eng_sampling_default(&p);
    p.temp = 1.0f;
    s = eng_sampler_new(&p, V);
    assert_non_null(s);
    for (mode = 0; mode < 4; mode++) {
        /* 0 default filters, 1 no filters, 2 greedy, 3 top_k 1 */
        eng_sampling q = p;
        if (mode == 1) {
            q.top_k = 0;
            q.top_p = 1.0f;
            q.min_p = 0.0f;
        } else if (mode == 2) {
            q.temp = 0.0f;
        } else if (mode == 3) {
            q.top_k = 1;
        }
        q.rep_penalty = 1.3f;
        eng_sampler_set(s, &q);

        /* NaN everywhere but one token: that token, always. */
        for (k = 0; k < 200; k++) {
            int32_t h[2] = { 3, 5 };
            for (i = 0; i < V; i++)
                x[i] = NAN;
            x[5] = -2.0f;
            assert_int_equal(eng_sampler_sample(s, x, h, 2), 5);
        }
        /* all NaN / all -inf: no crash, a valid id (0) */
        for (i = 0; i < V; i++)
            x[i] = NAN;
        assert_int_equal(eng_sampler_sample(s, x, NULL, 0), 0);
        for (i = 0; i < V; i++)
            x[i] = -INFINITY;
        assert_int_equal(eng_sampler_sample(s, x, NULL, 0), 0);
        /* +inf wins over everything finite; NaN is never chosen */
        for (k = 0; k < 200; k++) {
            int32_t id;
            for (i = 0; i < V; i++)
                x[i] = (float)i;
            x[2] = NAN;
            x[9] = INFINITY;
            x[12] = INFINITY;
            id = eng_sampler_sample(s, x, NULL, 0);
            if (mode >= 2)
                assert_int_equal(id, 9);
            else
                assert_true(id == 9 || id == 12);
        }
        /* mixed huge finite values */
        for (k = 0; k < 200; k++) {
            int32_t id;
            for (i = 0; i < V; i++)
                x[i] = (i & 1) ? 3.4e38f : -3.4e38f;
            x[4] = NAN;
            id = eng_sampler_sample(s, x, NULL, 0);
            assert_true(id >= 0 && id < V && (id & 1));
        }
    }
    /* Odd parameters: infinite/NaN temperature, negative top_k, NaN p's. */
    p.temp = INFINITY;
    p.top_k = -3;
    p.top_p = NAN;
    p.min_p = NAN;
    p.rep_penalty = 0.0f;
    eng_sampler_set(s, &p);
    for (k = 0; k < 100; k++) {
        int32_t id;
        fill_random(x, V, -1.0f, 1.0f);
        x[0] = -INFINITY;
        id = eng_sampler_sample(s, x, NULL, 0);
        assert_true(id > 0 && id < V);
    }
    p.temp = NAN;                            /* NaN temperature: greedy */
    eng_sampler_set(s, &p);
    fill_random(x, V, -1.0f, 1.0f);
    {
        float y[V];
        memcpy(y, x, sizeof y);
        assert_int_equal(eng_sampler_sample(s, y, NULL, 0), ref_argmax(x, V));
    }
    eng_sampler_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_greedy_is_argmax),
        cmocka_unit_test(test_top_k_1_is_greedy),
        cmocka_unit_test(test_top_k_excludes),
        cmocka_unit_test(test_distribution),
        cmocka_unit_test(test_seed_reproducible),
        cmocka_unit_test(test_seed_stream_fixed),
        cmocka_unit_test(test_top_p_excludes),
        cmocka_unit_test(test_top_p_large),
        cmocka_unit_test(test_min_p_excludes),
        cmocka_unit_test(test_rep_penalty),
        cmocka_unit_test(test_bad_logits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
