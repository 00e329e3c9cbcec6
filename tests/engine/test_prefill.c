/*
 * test_prefill.c — batched prefill and the thread count (issue 4, "must
 * show" 1 and 2).
 *
 *   - eng_prefill of a prompt (batched: chunks of positions through tiled
 *     mat-mats, the LM head for the last position only) gives the logits of
 *     feeding the same tokens one by one with eng_decode, within 1e-4
 *     relative, on every shared stories260K flavour: llama2.c F32 (run.c
 *     arithmetic, f32 cache) and the GGUF F32/F16/Q8_0/Q4_0 files (ggml
 *     arithmetic, the repacked Q4_0 kernel, f16 cache); prompts longer than
 *     one chunk and a second prefill after some decoding (positions that do
 *     not start at 0) included;
 *   - the same on the standard MoE models (issue 17, must-show 4: a chunk's
 *     experts run grouped by expert): the synthetic tiny-mixtral and the
 *     tiny Mixtral / Qwen3-MoE (with and without norm_topk_prob) GGUFs of
 *     tests/data/moe, under every expert I/O mode; under sync I/O the
 *     batched prefill reads each routed expert at most once per chunk (its
 *     bytes read are bounded by chunks x layers x experts x expert size and
 *     below what token-by-token reads);
 *   (these with the per-position attention kernel, eng_opts.prefill_attn
 *   0, whose bits are decode's);
 *   - a prompt of 64 tokens or more over an f16 cache takes llama.cpp's
 *     tiled flash attention by default: it runs, 1 and 2 threads give the
 *     same bits, and its logits lie no further from token by token than
 *     an f32 cache's (test_tiled_prefill);
 *   - 1 and 2 threads give the same greedy tokens on stories260K F32, long
 *     enough for the attention to run in parallel over heads, with the
 *     thread count changed between tokens of one session too; and
 *     `cflow run -t 1` and `-t 2` print the same text.
 * The models are converted by the real `cflow convert`.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "format/cflow_format.h"
#include "testutil.h"

static const char *convert(const char *src, const char *name, int llama2c)
{
    static char paths[6][4096];
    static int next;
    char *out = paths[next++ % 6];
    tu_proc p;
    snprintf(out, 4096, "%s", tu_tmp(name));
    tu_require(tu_shared(src));
    if (llama2c) {
        char tok[4096];
        snprintf(tok, sizeof tok, "%s", tu_shared("models/tok512.bin"));
        assert_int_equal(tu_cflow_run(&p, "convert", "--tokenizer", tok,
                                      tu_shared(src), out, (char *)NULL), 0);
    } else {
        assert_int_equal(tu_cflow_run(&p, "convert", tu_shared(src), out,
                                      (char *)NULL), 0);
    }
    if (p.status)
        fprintf(stderr, "convert %s: %s", src, p.err);
    assert_int_equal(p.status, 0);
    tu_proc_free(&p);
    return out;
}

static int expert_io = ENG_XIO_MMAP;   /* of the sessions open_model opens */
static int prefill_attn = 0;           /* the same: decode's kernel by default */

static eng_session *open_model(const char *path, int threads)
{
    eng_session *s = NULL;
    eng_opts o;
    char err[512];
    eng_opts_default(&o);
    o.n_threads = threads;
    o.expert_io = expert_io;
    o.prefill_attn = prefill_attn;
    if (eng_open(&s, path, &o, err, sizeof err))
        fail_msg("%s", err);
    return s;
}

/* ids of text (with BOS), at most cap */
static size_t encode(eng_session *s, const char *text, int32_t *ids, size_t cap)
{
    size_t n = 0;
    assert_int_equal(eng_tok_encode(eng_tokenizer(s), text, strlen(text), 1, 0,
                                    ids, cap, &n), 0);
    assert_true(n > 0 && n <= cap);
    return n;
}

static const char *const prompt =
    "Once upon a time, there was a little girl named Lily. She loved to play "
    "outside in the park with her friends. One day, she saw a big red ball "
    "under a tree and she wanted to play with it.";

/* prefill (batched) vs decode one by one, twice in a row */
static void check_model(const char *path, int threads)
{
    char err[512];
    int32_t ids[256];
    eng_session *a = open_model(path, threads), *b = open_model(path, threads);
    const uint32_t nv = eng_hparams(a)->vocab_size;
    size_t n = encode(a, prompt, ids, 256);
    if (n > eng_n_ctx(a) / 2)
        n = eng_n_ctx(a) / 2;            /* a small test model's context */
    assert_true(n > 40);                 /* more than one chunk of 32 */
    float *la = malloc(nv * sizeof(float));

    if (eng_prefill(a, ids, n, err, sizeof err))
        fail_msg("%s: %s", path, err);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(eng_decode(b, ids[i], err, sizeof err), 0);
    assert_int_equal(eng_n_past(a), n);
    assert_int_equal(eng_n_past(b), n);
    memcpy(la, eng_logits(a), nv * sizeof(float));
    tu_same_logits(path, la, eng_logits(b), nv, 1e-4);

    /* a few greedy steps, then a second prompt piece at a later position */
    for (int k = 0; k < 5; k++) {
        int32_t t = tu_argmax(eng_logits(a), nv);
        assert_int_equal(t, tu_argmax(eng_logits(b), nv));
        assert_int_equal(eng_decode(a, t, err, sizeof err), 0);
        assert_int_equal(eng_decode(b, t, err, sizeof err), 0);
    }
    size_t m = encode(a, " The sun was shining and the birds sang in the trees.",
                      ids, 256) - 1;
    assert_int_equal(eng_prefill(a, ids + 1, m, err, sizeof err), 0);
    for (size_t i = 1; i <= m; i++)
        assert_int_equal(eng_decode(b, ids[i], err, sizeof err), 0);
    memcpy(la, eng_logits(a), nv * sizeof(float));
    tu_same_logits(path, la, eng_logits(b), nv, 1e-4);
    /* a MoE model's batched chunks route each position with one pass over
     * the router (eng_moe_route_many): every layer's choices, counted for
     * the expert pane, are exactly those of one position at a time */
    const fmt_hparams *hp = eng_hparams(a);
    if (hp->n_experts) {
        uint64_t *ca = calloc(hp->n_experts, sizeof *ca), *cb = calloc(hp->n_experts, sizeof *cb);
        uint64_t total = 0;
        assert_non_null(ca);
        assert_non_null(cb);
        for (unsigned l = 0; l < hp->n_layers; l++) {
            if (eng_expert_routed(a, l, ca))
                continue;
            assert_int_equal(eng_expert_routed(b, l, cb), 0);
            assert_memory_equal(ca, cb, hp->n_experts * sizeof *ca);
            for (unsigned e = 0; e < hp->n_experts; e++)
                total += ca[e];
        }
        assert_true(total > 0);
        free(ca);
        free(cb);
    }
    free(la);
    eng_close(a);
    eng_close(b);
}

static void test_prefill_logits(void **state)
{
    (void)state;
    static const char *const gguf[] = {
        "models/stories260K-f32.gguf", "models/stories260K-f16.gguf",
        "models/stories260K-q8_0.gguf", "models/stories260K-q4_0.gguf",
    };
    check_model(convert("models/stories260K.bin", "s260.cflow", 1), 1);
    check_model(convert("models/stories260K.bin", "s260b.cflow", 1), 2);
    for (size_t i = 0; i < sizeof gguf / sizeof gguf[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "g%zu.cflow", i);
        const char *path = convert(gguf[i], name, 0);
        check_model(path, 1);
        check_model(path, 2);
    }
}

static const char *moe_model(const char *name)
{
    static char paths[4][4096];
    static int next;
    char *out = paths[next++ % 4];
    char src[4096];
    tu_proc p;
    snprintf(out, 4096, "%s", tu_tmp(name));
    strncat(out, ".cflow", 4096 - strlen(out) - 1);
    if (!strcmp(name, "tiny-mixtral")) {
        assert_int_equal(tu_cflow_run(&p, "synth", name, out, (char *)NULL), 0);
    } else {
        const char *d = getenv("CFLOW_SRCDIR");
        snprintf(src, sizeof src, "%s/tests/data/moe/%s.gguf", d ? d : ".", name);
        assert_int_equal(tu_cflow_run(&p, "convert", src, out, (char *)NULL), 0);
    }
    if (p.status)
        fprintf(stderr, "%s: %s", name, p.err);
    assert_int_equal(p.status, 0);
    tu_proc_free(&p);
    return out;
}

/* Bytes an expert I/O session read for n prompt tokens, batched or one by
 * one (a fresh session each). */
static uint64_t bytes_read(const char *path, const int32_t *ids, size_t n, int batched)
{
    char err[512];
    eng_stats st;
    eng_session *s = open_model(path, 1);
    if (batched)
        assert_int_equal(eng_prefill(s, ids, n, err, sizeof err), 0);
    else
        for (size_t i = 0; i < n; i++)
            assert_int_equal(eng_decode(s, ids[i], err, sizeof err), 0);
    eng_get_stats(s, &st);
    eng_close(s);
    return st.xio_bytes;
}

static void test_moe_prefill(void **state)
{
    (void)state;
    static const char *const names[] = { "tiny-mixtral", "mixtral-tiny", "qwen3moe-tiny",
                                         "qwen3moe-nonorm" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *path = moe_model(names[i]);
        for (int mode = ENG_XIO_MMAP; mode <= ENG_XIO_STAGED; mode++) {
            expert_io = mode;
            check_model(path, 1);
            check_model(path, 2);
        }
        /* each routed expert read at most once per chunk of 32 */
        expert_io = ENG_XIO_SYNC;
        eng_session *s = open_model(path, 1);
        const fmt_hparams *hp = eng_hparams(s);
        int32_t ids[256];
        size_t n = encode(s, prompt, ids, 256);
        if (n > eng_n_ctx(s) / 2)
            n = eng_n_ctx(s) / 2;
        uint64_t max_len = 0;
        fmt_model *fm = NULL;
        char err[512];
        if (fmt_model_open(&fm, path, err, sizeof err))
            fail_msg("%s", err);
        for (unsigned l = 0; l < hp->n_layers; l++)
            for (unsigned e = 0; e < hp->n_experts; e++) {
                uint64_t off = 0, len = 0;
                if (fmt_model_expert(fm, l, e, NULL, NULL, &off, &len) == 0 && len > max_len)
                    max_len = len;
            }
        fmt_model_close(fm);
        const uint64_t bound = (n + 31) / 32 * (uint64_t)hp->n_layers * hp->n_experts *
                               ((max_len + 8191) / 4096 * 4096);
        eng_close(s);
        uint64_t b = bytes_read(path, ids, n, 1), t = bytes_read(path, ids, n, 0);
        if (!(b > 0 && b <= bound && b < t))
            fail_msg("%s: batched prefill read %llu bytes (bound %llu), one by one %llu",
                     names[i], (unsigned long long)b, (unsigned long long)bound,
                     (unsigned long long)t);
        expert_io = ENG_XIO_MMAP;
    }
}

/* A read that fails or comes back short in the middle of a batched
 * prefill, sync and staged (where the chunk's experts run as their reads
 * land), with the cache off and on: eng_prefill returns ENG_EIO with one
 * line naming the file and the read's offset, takes none of the chunk's
 * positions, and the same prompt prefills in a session without the fault
 * to the logits of one position at a time. */
static void test_moe_prefill_faults(void **state)
{
    (void)state;
    const char *path = moe_model("qwen3moe-tiny");
    static const char *const faults[] = { "expert-read:eio@3", "expert-read:short@3",
                                          "expert-read:eio", "expert-read:short@10" };
    static const int64_t caches[] = { 0, 8 << 20 };   /* off, 8 MiB */
    for (int mode = ENG_XIO_SYNC; mode <= ENG_XIO_STAGED; mode++)
        for (size_t c = 0; c < 2; c++)
            for (size_t f = 0; f < sizeof faults / sizeof *faults; f++) {
                eng_session *s = NULL;
                eng_opts o;
                char err[512] = "";
                int32_t ids[256];
                eng_opts_default(&o);
                o.expert_io = mode;
                o.expert_cache = caches[c];
                setenv("CFLOW_FAULT", faults[f], 1);
                if (eng_open(&s, path, &o, err, sizeof err))
                    fail_msg("%s", err);
                size_t n = encode(s, prompt, ids, 256);
                if (n > eng_n_ctx(s) / 2)
                    n = eng_n_ctx(s) / 2;
                int rc = eng_prefill(s, ids, n, err, sizeof err);
                fprintf(stderr, "%s cache %lld %s: rc %d, %s\n", eng_expert_io_name(mode),
                        (long long)caches[c], faults[f], rc, err);
                assert_int_equal(rc, ENG_EIO);
                assert_non_null(strstr(err, "expert read at offset"));
                assert_non_null(strstr(err, path));
                assert_null(strchr(err, '\n'));
                assert_int_equal(eng_n_past(s), 0);
                eng_close(s);
                unsetenv("CFLOW_FAULT");
            }
    /* without the fault the same sessions' prefill is whole */
    for (int mode = ENG_XIO_SYNC; mode <= ENG_XIO_STAGED; mode++) {
        expert_io = mode;
        check_model(path, 2);
    }
    expert_io = ENG_XIO_MMAP;
}

/* ---- the tiled attention of a long prompt (kern_ops.attn_prefill_f16) ----
 * A prompt of 64 tokens or more over an f16 cache takes llama.cpp's tiled
 * flash attention by default.  Its f32 accumulators are not decode's f16
 * one, so its logits are compared with token-by-token ones within what the
 * f16 accumulator costs (no further than an f32 cache's logits are); the
 * path must really run (the logits are not the bits of the per-position
 * kernel's prefill), and 1 and 2 threads give the same bits, also for a
 * second prompt piece at a later position.  The stories260K GGUFs and the
 * GGUF MoE fixtures (the synthetic MoE model has an f32 cache). */
static double max_rel(const float *a, const float *b, uint32_t n)
{
    double amax = 0, d = 0;
    for (uint32_t i = 0; i < n; i++)
        amax = fmax(amax, fabs(b[i]));
    for (uint32_t i = 0; i < n; i++)
        d = fmax(d, fabs((double)a[i] - b[i]));
    return d / amax;
}

static void check_tiled(const char *path)
{
    char err[512];
    int32_t ids[512];
    size_t n = 0;
    char text[1024];
    snprintf(text, sizeof text, "%s %s", prompt, prompt);
    eng_session *ref = open_model(path, 1);       /* per-position kernel */
    const uint32_t nv = eng_hparams(ref)->vocab_size;
    n = encode(ref, text, ids, 512);
    if (n > eng_n_ctx(ref) - 8)
        n = eng_n_ctx(ref) - 8;
    if (n < 64 + 32)                             /* tiled, over two tiles */
        fail_msg("%s: %zu prompt tokens (context %u)", path, n, eng_n_ctx(ref));
    const size_t n1 = n - 24;                    /* and a later piece */
    /* l[0] token by token; tiled prefill on l[1] 1 thread, l[2] 2, l[4] 1
     * and then 2 for the second piece (the pool grows between chunks);
     * l[3] the per-position kernel's prefill (ref) */
    float *l[5];
    for (int v = 0; v < 5; v++) {
        prefill_attn = 1;
        eng_session *s = v == 3 ? ref : open_model(path, v == 2 ? 2 : 1);
        if (v == 0) {
            for (size_t i = 0; i < n; i++)
                assert_int_equal(eng_decode(s, ids[i], err, sizeof err), 0);
        } else {
            if (eng_prefill(s, ids, n1, err, sizeof err))
                fail_msg("%s: %s", path, err);
            if (v == 4)
                assert_int_equal(eng_set_threads(s, 2), 0);
            if (eng_prefill(s, ids + n1, n - n1, err, sizeof err))
                fail_msg("%s: %s", path, err);
        }
        l[v] = malloc(nv * sizeof(float));
        memcpy(l[v], eng_logits(s), nv * sizeof(float));
        eng_close(s);
    }
    prefill_attn = 0;
    /* 1 and 2 threads: the same bits */
    tu_same_logits(path, l[2], l[1], nv, 0);
    tu_same_logits(path, l[4], l[1], nv, 0);
    /* the tiled path ran: not the per-position kernel's bits */
    assert_true(memcmp(l[1], l[3], nv * sizeof(float)) != 0);
    /* and lies as close to token by token (f16 cache, f16 accumulator) as
     * the engine's other exact-softmax arithmetic does: token by token over
     * an f32 cache (run.c's attention), which differs from it by the same
     * roundings (a Q8_0 model's activation quantisation magnifies both) */
    eng_session *x = NULL;
    eng_opts o;
    eng_opts_default(&o);
    o.kv_f16 = 0;
    o.n_threads = 1;
    if (eng_open(&x, path, &o, err, sizeof err))
        fail_msg("%s", err);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(eng_decode(x, ids[i], err, sizeof err), 0);
    const double dt = max_rel(l[1], l[0], nv), df = max_rel(eng_logits(x), l[0], nv);
    eng_close(x);
    print_message("%s: %zu tokens; from token by token: tiled %.2e, f32 cache %.2e\n",
                  path, n, dt, df);
    if (!(dt <= 2 * df + 1e-4))
        fail_msg("%s: tiled prefill logits %.3g from token by token (f32 cache: %.3g)",
                 path, dt, df);
    for (int v = 0; v < 5; v++)
        free(l[v]);
}

static void test_tiled_prefill(void **state)
{
    (void)state;
    check_tiled(convert("models/stories260K-q8_0.gguf", "t8.cflow", 0));
    check_tiled(convert("models/stories260K-f32.gguf", "t32.cflow", 0));
    check_tiled(moe_model("mixtral-tiny"));
    check_tiled(moe_model("qwen3moe-tiny"));
}

/* greedy tokens from BOS; threads[k] is the thread count from token k on
 * (-1: unchanged) */
static void greedy(const char *path, int n_threads0, const int *switch_at,
                   int32_t *out, int n)
{
    char err[512];
    eng_session *s = open_model(path, n_threads0);
    const uint32_t nv = eng_hparams(s)->vocab_size;
    int32_t ids[8];
    size_t nb = encode(s, "", ids, 8);
    assert_int_equal(eng_prefill(s, ids, nb, err, sizeof err), 0);
    for (int k = 0; k < n; k++) {
        if (switch_at && switch_at[k] > 0) {
            assert_int_equal(eng_set_threads(s, switch_at[k]), 0);
            assert_int_equal(eng_threads(s), switch_at[k]);
        }
        out[k] = tu_argmax(eng_logits(s), nv);
        int rc = eng_decode(s, out[k], err, sizeof err);
        if (rc)
            fail_msg("token %d: %s", k, err);
    }
    eng_close(s);
}

static void test_threads_same_tokens(void **state)
{
    (void)state;
    enum { N = 400 };    /* past 256 positions: attention runs over heads */
    const char *path = convert("models/stories260K.bin", "s260t.cflow", 1);
    int32_t *t1 = malloc(N * sizeof *t1), *t2 = malloc(N * sizeof *t2);
    int32_t *tx = malloc(N * sizeof *tx);
    int *sw = calloc(N, sizeof *sw);
    greedy(path, 1, NULL, t1, N);
    greedy(path, 2, NULL, t2, N);
    for (int k = 0; k < N; k++)
        if (t1[k] != t2[k])
            fail_msg("token %d: 1 thread %d, 2 threads %d", k, t1[k], t2[k]);
    /* switched live, back and forth */
    for (int k = 0; k < N; k += 37)
        sw[k] = 1 + (k / 37) % 2;
    greedy(path, 2, sw, tx, N);
    for (int k = 0; k < N; k++)
        if (t1[k] != tx[k])
            fail_msg("token %d: 1 thread %d, switching %d", k, t1[k], tx[k]);
    int distinct = 0;
    for (int k = 1; k < N; k++)
        distinct += t1[k] != t1[k - 1];
    assert_true(distinct > N / 4);       /* real text, not one token */

    /* the binary, as a user runs it */
    tu_proc p1, p2;
    assert_int_equal(tu_cflow_run(&p1, "run", "-m", path, "-p", "Once upon a time",
                                  "-n", "200", "--temp", "0", "-t", "1", "--no-log",
                                  (char *)NULL), 0);
    assert_int_equal(tu_cflow_run(&p2, "run", "-m", path, "-p", "Once upon a time",
                                  "-n", "200", "--temp", "0", "-t", "2", "--no-log",
                                  (char *)NULL), 0);
    assert_int_equal(p1.status, 0);
    assert_int_equal(p2.status, 0);
    assert_true(p1.out_len > 100);
    assert_string_equal(p1.out, p2.out);
    tu_proc_free(&p1);
    tu_proc_free(&p2);
    free(t1);
    free(t2);
    free(tx);
    free(sw);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefill_logits),
        cmocka_unit_test(test_moe_prefill),
        cmocka_unit_test(test_moe_prefill_faults),
        cmocka_unit_test(test_tiled_prefill),
        cmocka_unit_test(test_threads_same_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
