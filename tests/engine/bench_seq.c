/*
 * bench_seq.c — aggregate decode throughput of k sequences decoded
 * together (eng_decode_batch), in the manner of `cflow bench`'s tgN: each
 * test decodes N random tokens into each of k empty sequences, one batched
 * step a token, after one untimed warm-up; -r repetitions, the tests of
 * the list taking turns inside each repetition (order rotated), so every
 * k meets the same moments of the machine.  Prints per k the mean and sd
 * of the aggregate tokens a second (k x N over the wall time) and its
 * ratio to the first k of the list.  Not a test: built by `make check`,
 * run by hand (the issue-43 figures of docs/perf-log/):
 *
 *     build/tests/engine/bench_seq -m MODEL [-t THREADS] [-n N] [-r REPS]
 *         [-s LIST] [--seed S]       (defaults: 2, 64, 5, 1,2,4, 1)
 *
 * Engine options come from the environment as for `cflow` (CFLOW_EXPERT_IO
 * and the like).
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"

enum { MAXK = 16, MAXL = 8 };

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* One test: n steps of k sequences, reset first; aggregate tokens/s. */
static double run(eng_session *s, eng_seq **q, unsigned k, unsigned n, uint64_t *seed)
{
    const uint32_t nv = eng_hparams(s)->vocab_size;
    int32_t tok[MAXK];
    int rcs[MAXK];
    char err[512];
    for (unsigned i = 0; i < k; i++)
        eng_seq_reset(q[i]);
    double t0 = now();
    for (unsigned t = 0; t < n; t++) {
        for (unsigned i = 0; i < k; i++)
            tok[i] = (int32_t)(rng(seed) % nv);
        if (eng_decode_batch(s, q, tok, k, rcs, err, sizeof err)) {
            fprintf(stderr, "bench_seq: %s\n", err);
            exit(1);
        }
    }
    return (double)k * n / (now() - t0);
}

/* "a,b,c" into ks[]: the count. */
static unsigned parse_list(const char *v, unsigned *ks)
{
    unsigned n = 0;
    for (const char *p = v; *p && n < MAXL; p = strchr(p, ',') ? strchr(p, ',') + 1 : "") {
        unsigned k = (unsigned)strtoul(p, NULL, 10);
        if (k < 1 || k > MAXK) {
            fprintf(stderr, "bench_seq: -s %s: counts of 1 to %d\n", v, MAXK);
            exit(2);
        }
        ks[n++] = k;
    }
    return n;
}

int main(int argc, char **argv)
{
    const char *model = NULL;
    unsigned threads = 2, n = 64, reps = 5, ks[MAXL] = { 1, 2, 4 }, nk = 3, kmax = 0;
    uint64_t seed = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *o = argv[i], *v = argv[i + 1];
        if (!strcmp(o, "-m"))
            model = v;
        else if (!strcmp(o, "-t"))
            threads = (unsigned)atoi(v);
        else if (!strcmp(o, "-n"))
            n = (unsigned)atoi(v);
        else if (!strcmp(o, "-r"))
            reps = (unsigned)atoi(v);
        else if (!strcmp(o, "-s"))
            nk = parse_list(v, ks);
        else if (!strcmp(o, "--seed"))
            seed = strtoull(v, NULL, 10);
        else
            break;
    }
    if (!model || !n || !reps || !nk) {
        fprintf(stderr, "usage: bench_seq -m MODEL [-t THREADS] [-n N] [-r REPS] "
                        "[-s LIST] [--seed S]\n");
        return 2;
    }
    eng_session *s = NULL;
    eng_opts o;
    char err[512];
    eng_opts_default(&o);
    o.n_threads = (int)threads;
    if (eng_open(&s, model, &o, err, sizeof err)) {
        fprintf(stderr, "bench_seq: %s\n", err);
        return 1;
    }
    eng_seq *q[MAXK];
    for (unsigned j = 0; j < nk; j++)
        kmax = ks[j] > kmax ? ks[j] : kmax;
    for (unsigned i = 0; i < kmax; i++)
        if (eng_seq_new(s, n + 1, &q[i], err, sizeof err)) {
            fprintf(stderr, "bench_seq: %s\n", err);
            return 1;
        }
    double sum[MAXL] = { 0 }, sq[MAXL] = { 0 };
    for (unsigned j = 0; j < nk; j++)
        run(s, q, ks[j], n, &seed);           /* warm-up */
    for (unsigned r = 0; r < reps; r++)
        for (unsigned jj = 0; jj < nk; jj++) {
            unsigned j = (jj + r) % nk;       /* the order rotates */
            double v = run(s, q, ks[j], n, &seed);
            sum[j] += v;
            sq[j] += v * v;
        }
    printf("| model | threads | sequences | test | aggregate t/s | x first |\n"
           "| --- | ---: | ---: | --- | ---: | ---: |\n");
    const double base = sum[0] / reps;
    for (unsigned j = 0; j < nk; j++) {
        double mean = sum[j] / reps, var = sq[j] / reps - mean * mean;
        printf("| %s | %u | %u | tg%u | %.2f ± %.2f | %.2fx |\n", model, threads, ks[j], n,
               mean, sqrt(var > 0 ? var : 0), mean / base);
    }
    eng_close(s);
    return 0;
}
