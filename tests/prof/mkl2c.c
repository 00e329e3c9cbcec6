/*
 * mkl2c.c — write a random-weight llama2.c checkpoint of any geometry, for
 * tests and benchmarks that need a model slower than stories260K:
 *
 *   mkl2c OUT DIM HIDDEN LAYERS HEADS KV_HEADS VOCAB SEQ [SEED]
 *
 * The layout is fmt_llama2c.c's (shared classifier).  Norm weights are 1;
 * every other weight is uniform in [-1/sqrt(fan_in), 1/sqrt(fan_in)] from
 * a xorshift64 stream, which keeps activations finite at any depth.  Pair
 * it with a tokenizer of VOCAB tokens (tok512.bin for VOCAB 512) and
 * `cflow convert -t`.
 */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "format/cflow_format.h"

static uint64_t rng = 88172645463325252ull;

static float uniform(float a)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return a * (2.0f * (float)((rng >> 40) * (1.0 / 16777216.0)) - 1.0f);
}

/* n floats: ones, or uniform in [-a, a] */
static int put(FILE *f, uint64_t n, int ones, float a)
{
    float buf[4096];
    while (n) {
        size_t k = n < 4096 ? (size_t)n : 4096;
        for (size_t i = 0; i < k; i++)
            buf[i] = ones ? 1.0f : uniform(a);
        if (fwrite(buf, sizeof(float), k, f) != k)
            return -1;
        n -= k;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 9 || argc > 10) {
        fprintf(stderr, "usage: mkl2c OUT DIM HIDDEN LAYERS HEADS KV_HEADS VOCAB SEQ [SEED]\n");
        return 2;
    }
    int32_t h[7];
    for (int i = 0; i < 7; i++) {
        long v = strtol(argv[2 + i], NULL, 10);
        if (v <= 0 || v > (1L << 24)) {
            fprintf(stderr, "mkl2c: bad number '%s'\n", argv[2 + i]);
            return 2;
        }
        h[i] = (int32_t)v;
    }
    if (argc == 10)
        rng ^= strtoull(argv[9], NULL, 10) * FMT_SPLITMIX64_GAMMA;   /* the seed spread */
    uint64_t dim = (uint64_t)h[0], hid = (uint64_t)h[1], L = (uint64_t)h[2];
    uint64_t heads = (uint64_t)h[3], kvh = (uint64_t)h[4], V = (uint64_t)h[5];
    uint64_t seq = (uint64_t)h[6];
    if (dim % heads || heads % kvh || (dim / heads) % 2) {
        fprintf(stderr, "mkl2c: DIM must split into HEADS of even size, HEADS into KV_HEADS\n");
        return 2;
    }
    uint64_t kv = dim * kvh / heads, hs = dim / heads;
    float ad = 1.0f / sqrtf((float)dim), ah = 1.0f / sqrtf((float)hid);
    FILE *f = fopen(argv[1], "wb");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    int bad = fwrite(h, sizeof h, 1, f) != 1;
    bad |= put(f, V * dim, 0, 1.0f);          /* token embedding */
    bad |= put(f, L * dim, 1, 0);             /* rms_att */
    bad |= put(f, L * dim * dim, 0, ad);      /* wq */
    bad |= put(f, 2 * L * kv * dim, 0, ad);   /* wk, wv */
    bad |= put(f, L * dim * dim, 0, ad);      /* wo */
    bad |= put(f, L * dim, 1, 0);             /* rms_ffn */
    bad |= put(f, L * hid * dim, 0, ad);      /* w1 */
    bad |= put(f, L * dim * hid, 0, ah);      /* w2 */
    bad |= put(f, L * hid * dim, 0, ad);      /* w3 */
    bad |= put(f, dim, 1, 0);                 /* rms_final */
    bad |= put(f, 2 * (seq * hs / 2), 0, 1.0f);  /* freq_cis (unused) */
    if (fclose(f) || bad) {
        fprintf(stderr, "mkl2c: %s: write error\n", argv[1]);
        return 1;
    }
    return 0;
}
