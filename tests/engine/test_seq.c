/*
 * test_seq.c — sequences and the batched decode step (issue 43, the
 * engine's side of `cflow serve`): several streams of tokens over one
 * opened model, each with its own KV cache and position, and
 * eng_decode_batch, one pass over the weights for a token of each.
 *
 *   - bit for bit: 2, 3 and 5 sequences with prompts of different lengths
 *     (so at different positions; one longer than a prefill chunk), all
 *     but the last prefilled, three batched greedy steps, then the last
 *     prefilled between two steps of the others, then five more steps of
 *     all: after every step each sequence's logits are, by memcmp, those
 *     of a second session that decodes the same tokens into the same
 *     sequences one at a time with eng_seq_decode.  On stories260K as
 *     llama2.c F32 (run.c arithmetic, f32 cache) and as llama.cpp's Q8_0
 *     and Q4_0 GGUFs (ggml arithmetic, f16 cache, the repacked Q4_0
 *     kernel), on the synthetic tiny-mixtral and the Mixtral and
 *     Qwen3-MoE GGUF fixtures under every expert I/O mode (mmap, sync,
 *     staged; the RAM cache off and on), 1 and 2 threads; and where the
 *     step cannot batch — the pipeline-native tiny-moe (DelayedSum) and
 *     gemma4-mini (sliding windows), $CFLOW_NO_BATCH — the sequences go
 *     one after another, to the same bits;
 *   - one pass: under sync reads without a cache, a batched step of five
 *     sequences over tiny-mixtral's 4 experts (top 2) reads each layer's
 *     chosen experts once, at most 4 a layer, where one at a time reads 10;
 *   - errors fail only their sequence: a full context (ENG_ECTX), a token
 *     outside the vocabulary (ENG_EARG), a sequence given twice or one of
 *     another session (ENG_EARG) — the others take their tokens, bit for
 *     bit as before — while an expert read that fails in the shared pass
 *     fails every sequence of it with ENG_EIO and takes no position (the
 *     next step, reads working again, goes in); logits that are not finite
 *     fail each sequence with ENG_ENAN naming the layer and its own
 *     position;
 *   - a sequence is reset, prefilled again and freed between steps;
 *     eng_seq_new refuses more positions than the model has.
 * The models are made by the real `cflow convert` and `cflow synth`.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/eng_impl.h"      /* eng_io_result: reads turned into failures */
#include "format/cflow_format.h"
#include "testutil.h"

enum { MAXS = 5, PRE = 3, POST = 5 };

/* The session options of a case. */
typedef struct scase {
    int     threads, xio;
    int64_t cache;
} scase;

static eng_session *open_case(const char *path, const scase *c)
{
    eng_session *s = NULL;
    eng_opts o;
    char err[512];
    eng_opts_default(&o);
    o.n_threads = c->threads;
    o.expert_io = c->xio;
    o.expert_cache = c->cache;
    if (eng_open(&s, path, &o, err, sizeof err))
        fail_msg("%s: %s", path, err);
    return s;
}

/* Prompt i: lengths 9, 37 (more than a chunk of 32), 3, 14, 22. */
static size_t prompt(unsigned i, uint32_t nv, int32_t *ids)
{
    static const size_t len[MAXS] = { 9, 37, 3, 14, 22 };
    uint32_t x = 2166136261u ^ (i * 16777619u);
    for (size_t k = 0; k < len[i]; k++) {
        x = x * 1103515245u + 12345u;
        ids[k] = (int32_t)(3 + (x >> 8) % (nv - 3));
    }
    return len[i];
}

/* Sequence a's logits are b's, bit for bit. */
static void same_logits(const char *what, unsigned i, unsigned step, eng_seq *a, eng_seq *b,
                        uint32_t nv)
{
    const float *la = eng_seq_logits(a), *lb = eng_seq_logits(b);
    if (eng_seq_n_past(a) != eng_seq_n_past(b))
        fail_msg("%s: sequence %u, step %u: position %u batched, %u alone", what, i, step,
                 eng_seq_n_past(a), eng_seq_n_past(b));
    for (uint32_t k = 0; k < nv; k++)
        if (memcmp(&la[k], &lb[k], sizeof *la))
            fail_msg("%s: sequence %u, step %u (position %u): logit %u is %.9g batched, %.9g "
                     "alone", what, i, step, eng_seq_n_past(a), k, la[k], lb[k]);
}

/* One greedy step of sequences q[0..n): batched in a (qa), one at a time
 * in b (qb); every sequence's logits compared after it. */
static void step(const char *what, unsigned st, eng_session *a, eng_seq **qa, eng_seq **qb,
                 unsigned n)
{
    const uint32_t nv = eng_hparams(a)->vocab_size;
    int32_t tok[MAXS];
    int rcs[MAXS];
    char err[512] = "";
    for (unsigned i = 0; i < n; i++)
        tok[i] = tu_argmax(eng_seq_logits(qa[i]), nv);
    if (eng_decode_batch(a, qa, tok, n, rcs, err, sizeof err))
        fail_msg("%s: step %u: %s", what, st, err);
    for (unsigned i = 0; i < n; i++) {
        assert_int_equal(rcs[i], 0);
        assert_string_equal(eng_seq_error(qa[i]), "");
        if (eng_seq_decode(qb[i], tok[i], err, sizeof err))
            fail_msg("%s: step %u, sequence %u alone: %s", what, st, i, err);
        same_logits(what, i, st, qa[i], qb[i], nv);
    }
}

/* n sequences over the model at path: the steps of the essay. */
static void check_batch(const char *path, unsigned n, const scase *c)
{
    char what[4200], err[512];
    int32_t ids[64];
    eng_session *a = open_case(path, c), *b = open_case(path, c);
    const uint32_t nv = eng_hparams(a)->vocab_size;
    eng_seq *qa[MAXS], *qb[MAXS];
    snprintf(what, sizeof what, "%s (%u sequences, %d threads, %s, cache %lld)", path, n,
             c->threads, eng_expert_io_name(c->xio), (long long)c->cache);
    for (unsigned i = 0; i < n; i++) {
        assert_int_equal(eng_seq_new(a, 0, &qa[i], err, sizeof err), 0);
        assert_int_equal(eng_seq_new(b, 0, &qb[i], err, sizeof err), 0);
        assert_int_equal(eng_seq_n_past(qa[i]), 0);
        assert_int_equal(eng_seq_n_ctx(qa[i]), eng_n_ctx(a));
    }
    for (unsigned i = 0; i + 1 < n; i++) {
        size_t m = prompt(i, nv, ids);
        assert_int_equal(eng_seq_prefill(qa[i], ids, m, err, sizeof err), 0);
        assert_int_equal(eng_seq_prefill(qb[i], ids, m, err, sizeof err), 0);
        same_logits(what, i, 0, qa[i], qb[i], nv);
    }
    for (unsigned st = 1; st <= PRE; st++)
        step(what, st, a, qa, qb, n - 1);
    /* the last sequence's prompt between two steps of the others */
    size_t m = prompt(n - 1, nv, ids);
    assert_int_equal(eng_seq_prefill(qa[n - 1], ids, m, err, sizeof err), 0);
    assert_int_equal(eng_seq_prefill(qb[n - 1], ids, m, err, sizeof err), 0);
    for (unsigned st = PRE + 1; st <= PRE + POST; st++)
        step(what, st, a, qa, qb, n);
    /* the session's own sequence was never touched */
    assert_int_equal(eng_n_past(a), 0);
    for (unsigned i = 0; i < n; i++)
        eng_seq_free(qb[i]);         /* (eng_close frees a's) */
    eng_close(a);
    eng_close(b);
}

static const char *convert(const char *rel, const char *name)
{
    const char *p = tu_convert_shared(rel, name);
    assert_non_null(p);
    return p;
}

/* A MoE model: the synthetic preset, or a GGUF fixture of tests/data/moe
 * converted. */
static const char *moe_model(const char *name, char *out, size_t cap)
{
    char src[4096];
    tu_proc p;
    snprintf(out, cap, "%s.cflow", tu_tmp(name));
    if (!strncmp(name, "tiny-", 5) || !strncmp(name, "gemma4", 6)) {
        assert_int_equal(tu_cflow_run(&p, "synth", name, out, (char *)NULL), 0);
    } else {
        const char *d = getenv("CFLOW_SRCDIR");
        snprintf(src, sizeof src, "%s/tests/data/moe/%s.gguf", d ? d : ".", name);
        assert_int_equal(tu_cflow_run(&p, "convert", src, out, (char *)NULL), 0);
    }
    assert_true(tu_ok(&p, name));
    tu_proc_free(&p);
    return out;
}

static void test_dense(void **state)
{
    (void)state;
    static const char *const src[] = { "models/stories260K-q8_0.gguf",
                                       "models/stories260K-q4_0.gguf" };
    const scase one = { 1, ENG_XIO_MMAP, 0 }, two = { 2, ENG_XIO_MMAP, 0 };
    char l2c[4096];
    tu_proc p;
    /* llama2.c's checkpoint: run.c's arithmetic and an f32 cache */
    snprintf(l2c, sizeof l2c, "%s", tu_tmp("s260.cflow"));
    tu_require(tu_shared("models/stories260K.bin"));
    assert_int_equal(tu_cflow_run(&p, "convert", "--tokenizer",
                                  tu_shared_file("models/tok512.bin"),
                                  tu_shared("models/stories260K.bin"), l2c, (char *)NULL), 0);
    assert_true(tu_ok(&p, "convert stories260K.bin"));
    tu_proc_free(&p);
    for (unsigned n = 2; n <= 5; n += n == 3 ? 2 : 1) {
        check_batch(l2c, n, &one);
        check_batch(l2c, n, &two);
    }
    for (size_t i = 0; i < sizeof src / sizeof *src; i++) {
        char name[32];
        snprintf(name, sizeof name, "g%zu.cflow", i);
        const char *path = convert(src[i], name);
        check_batch(path, 3, &one);
        check_batch(path, 5, &two);
    }
}

static void test_moe(void **state)
{
    (void)state;
    static const char *const names[] = { "tiny-mixtral", "mixtral-tiny", "qwen3moe-tiny" };
    static const int64_t caches[] = { 0, 8 << 20 };
    char path[4096];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        moe_model(names[i], path, sizeof path);
        for (int mode = ENG_XIO_MMAP; mode <= ENG_XIO_STAGED; mode++)
            for (size_t c = 0; c < (mode == ENG_XIO_MMAP ? 1u : 2u); c++) {
                const scase sc = { 1 + (int)c, mode, caches[c] };
                check_batch(path, 5, &sc);
                if (i == 0)
                    check_batch(path, 2, &sc);
            }
    }
    moe_model("tiny-mixtral", path, sizeof path);
    const scase three = { 2, ENG_XIO_STAGED, 8 << 20 };
    check_batch(path, 3, &three);
}

/* Schedules that cannot batch across sequences, and CFLOW_NO_BATCH: one
 * after another, the same bits. */
static void test_fallback(void **state)
{
    (void)state;
    char path[4096];
    const scase one = { 1, ENG_XIO_MMAP, 0 }, st = { 2, ENG_XIO_STAGED, 0 };
    check_batch(moe_model("tiny-moe", path, sizeof path), 3, &one);
    check_batch(path, 3, &st);
    check_batch(moe_model("gemma4-mini", path, sizeof path), 2, &one);
    setenv("CFLOW_NO_BATCH", "1", 1);
    check_batch(moe_model("tiny-mixtral", path, sizeof path), 3, &one);
    unsetenv("CFLOW_NO_BATCH");
}

/* xio_bytes of one step of the five sequences' prompts' greedy tokens,
 * batched or one at a time, sync reads without a cache. */
static uint64_t step_bytes(const char *path, int batched, unsigned *layers)
{
    const scase sc = { 1, ENG_XIO_SYNC, 0 };
    eng_session *s = open_case(path, &sc);
    const uint32_t nv = eng_hparams(s)->vocab_size;
    eng_seq *q[MAXS];
    int32_t ids[64], tok[MAXS];
    int rcs[MAXS];
    char err[512];
    eng_stats st0, st1;
    for (unsigned i = 0; i < MAXS; i++) {
        assert_int_equal(eng_seq_new(s, 0, &q[i], err, sizeof err), 0);
        size_t m = prompt(i, nv, ids);
        assert_int_equal(eng_seq_prefill(q[i], ids, m, err, sizeof err), 0);
        tok[i] = tu_argmax(eng_seq_logits(q[i]), nv);
    }
    eng_get_stats(s, &st0);
    if (batched)
        assert_int_equal(eng_decode_batch(s, q, tok, MAXS, rcs, err, sizeof err), 0);
    else
        for (unsigned i = 0; i < MAXS; i++)
            assert_int_equal(eng_seq_decode(q[i], tok[i], err, sizeof err), 0);
    eng_get_stats(s, &st1);
    *layers = eng_hparams(s)->n_layers;
    eng_close(s);
    return st1.xio_bytes - st0.xio_bytes;
}

static void test_one_pass(void **state)
{
    (void)state;
    char path[4096];
    tu_moe g;
    snprintf(path, sizeof path, "%s", tu_tmp("pass.cflow"));
    tu_synth_moe("tiny-mixtral", path, &g);
    unsigned layers = 0;
    const uint64_t b = step_bytes(path, 1, &layers), t = step_bytes(path, 0, &layers);
    const uint64_t per = (g.expert_len + 8191) / 4096 * 4096;   /* a read, whole blocks */
    fprintf(stderr, "tiny-mixtral, 5 sequences, one step: %llu bytes batched, %llu one at a "
            "time (an expert %llu)\n", (unsigned long long)b, (unsigned long long)t,
            (unsigned long long)g.expert_len);
    /* one at a time: 5 x top_k reads a layer; batched: each chosen expert
     * once, at most the 4 there are */
    assert_true(t >= (uint64_t)MAXS * g.top_k * layers * g.expert_len);
    assert_true(b > 0 && b <= (uint64_t)4 * layers * per && b < t);
}

/* Failures of one sequence leave the others' steps whole. */
static void test_errors(void **state)
{
    (void)state;
    char path[4096], err[512];
    int32_t ids[64];
    const scase sc = { 2, ENG_XIO_MMAP, 0 };
    moe_model("tiny-mixtral", path, sizeof path);
    eng_session *a = open_case(path, &sc), *b = open_case(path, &sc);
    const uint32_t nv = eng_hparams(a)->vocab_size;
    eng_seq *qa[4], *qb[4], *other = NULL;
    size_t len[3];
    for (unsigned i = 0; i < 3; i++) {
        len[i] = prompt(i, nv, ids);
        /* sequence 0's context: its prompt and two more tokens */
        uint32_t n_ctx = i == 0 ? (uint32_t)len[0] + 2 : 0;
        assert_int_equal(eng_seq_new(a, n_ctx, &qa[i], err, sizeof err), 0);
        assert_int_equal(eng_seq_new(b, n_ctx, &qb[i], err, sizeof err), 0);
        assert_int_equal(eng_seq_prefill(qa[i], ids, len[i], err, sizeof err), 0);
        assert_int_equal(eng_seq_prefill(qb[i], ids, len[i], err, sizeof err), 0);
    }
    assert_int_equal(eng_seq_n_ctx(qa[0]), len[0] + 2);
    for (unsigned st = 1; st <= 2; st++)
        step("errors", st, a, qa, qb, 3);
    /* sequence 0 is full: it alone fails, the others go on */
    int32_t tok[4];
    int rcs[4];
    for (unsigned i = 0; i < 3; i++)
        tok[i] = tu_argmax(eng_seq_logits(qa[i]), nv);
    assert_int_equal(eng_decode_batch(a, qa, tok, 3, rcs, err, sizeof err), ENG_ECTX);
    assert_non_null(strstr(err, "context full"));
    assert_int_equal(rcs[0], ENG_ECTX);
    assert_int_equal(rcs[1], 0);
    assert_int_equal(rcs[2], 0);
    assert_non_null(strstr(eng_seq_error(qa[0]), "context full"));
    assert_int_equal(eng_seq_n_past(qa[0]), len[0] + 2);
    for (unsigned i = 1; i < 3; i++) {
        assert_int_equal(eng_seq_decode(qb[i], tok[i], err, sizeof err), 0);
        same_logits("errors, full", i, 3, qa[i], qb[i], nv);
    }
    /* a token outside the vocabulary, a sequence twice, one of another
     * session: those fail, the rest take their tokens */
    assert_int_equal(eng_seq_new(b, 0, &other, err, sizeof err), 0);
    eng_seq *mix[4] = { qa[1], qa[2], qa[1], other };
    for (unsigned i = 0; i < 2; i++)
        tok[i] = tu_argmax(eng_seq_logits(qa[i + 1]), nv);
    tok[2] = tok[0];
    tok[3] = 5;
    int32_t bad = tok[1];
    tok[1] = (int32_t)nv;            /* qa[2]: out of the vocabulary */
    assert_int_equal(eng_decode_batch(a, mix, tok, 4, rcs, err, sizeof err), ENG_EARG);
    assert_int_equal(rcs[0], 0);
    assert_int_equal(rcs[1], ENG_EARG);
    assert_non_null(strstr(eng_seq_error(qa[2]), "vocabulary"));
    assert_int_equal(rcs[2], ENG_EARG);
    assert_int_equal(rcs[3], ENG_EARG);
    assert_int_equal(eng_seq_n_past(other), 0);
    assert_int_equal(eng_seq_decode(qb[1], tok[0], err, sizeof err), 0);
    same_logits("errors, mixed", 1, 4, qa[1], qb[1], nv);
    /* qa[2] took nothing: its next token goes in as before */
    assert_int_equal(eng_decode_batch(a, &qa[2], &bad, 1, rcs, err, sizeof err), 0);
    assert_int_equal(eng_seq_decode(qb[2], bad, err, sizeof err), 0);
    same_logits("errors, after", 2, 5, qa[2], qb[2], nv);
    /* reset and free between steps */
    eng_seq_reset(qa[0]);
    eng_seq_reset(qb[0]);
    assert_int_equal(eng_seq_n_past(qa[0]), 0);
    size_t m = prompt(3, nv, ids);
    assert_int_equal(eng_seq_prefill(qa[0], ids, m > len[0] ? len[0] : m, err, sizeof err), 0);
    assert_int_equal(eng_seq_prefill(qb[0], ids, m > len[0] ? len[0] : m, err, sizeof err), 0);
    eng_seq_free(qa[2]);
    eng_seq_free(qb[2]);
    step("errors, after a reset and a free", 6, a, qa, qb, 2);
    /* more positions than the model has */
    eng_seq *big = (eng_seq *)&err;
    assert_int_equal(eng_seq_new(a, eng_hparams(a)->max_seq + 1, &big, err, sizeof err),
                     ENG_EARG);
    assert_null(big);
    assert_non_null(strstr(err, path));
    eng_seq_free(NULL);
    eng_close(a);
    eng_close(b);
}

/* Reads fail while `failing` (the reader's result hook, eng_io_result). */
static int failing;
static ssize_t fail_reads(int fd, void *buf, size_t n, off_t off, ssize_t res)
{
    (void)fd, (void)buf, (void)n, (void)off;
    return failing ? -EIO : res;
}

/* An expert read failing in the shared pass fails each sequence of it,
 * none takes its position; once reads work again the step goes in. */
static void test_read_fault(void **state)
{
    (void)state;
    char path[4096], err[512];
    int32_t ids[64], tok[3];
    int rcs[3];
    eng_seq *q[3];
    uint32_t at[3];
    const scase sc = { 1, ENG_XIO_SYNC, 0 };
    moe_model("tiny-mixtral", path, sizeof path);
    eng_session *s = open_case(path, &sc);
    const uint32_t nv = eng_hparams(s)->vocab_size;
    eng_io_result = fail_reads;
    for (unsigned i = 0; i < 3; i++) {
        size_t m = prompt(i, nv, ids);
        assert_int_equal(eng_seq_new(s, 0, &q[i], err, sizeof err), 0);
        assert_int_equal(eng_seq_prefill(q[i], ids, m, err, sizeof err), 0);
        tok[i] = tu_argmax(eng_seq_logits(q[i]), nv);
        at[i] = eng_seq_n_past(q[i]);
    }
    failing = 1;
    assert_int_equal(eng_decode_batch(s, q, tok, 3, rcs, err, sizeof err), ENG_EIO);
    fprintf(stderr, "a failed read in the pass: %s\n", err);
    assert_non_null(strstr(err, "expert read at offset"));
    assert_non_null(strstr(err, path));
    for (unsigned i = 0; i < 3; i++) {
        assert_int_equal(rcs[i], ENG_EIO);
        assert_non_null(strstr(eng_seq_error(q[i]), "expert read at offset"));
        assert_int_equal(eng_seq_n_past(q[i]), at[i]);
    }
    failing = 0;
    assert_int_equal(eng_decode_batch(s, q, tok, 3, rcs, err, sizeof err), 0);
    for (unsigned i = 0; i < 3; i++)
        assert_int_equal(eng_seq_n_past(q[i]), at[i] + 1);
    eng_io_result = NULL;
    eng_close(s);
}

/* Logits that are not finite fail their sequence with ENG_ENAN naming
 * the layer and the sequence's own position, and take no position (every
 * token of this model overflows at layer 1: stories260K with layer 1's
 * attention norm at 3e38, as tests/e2e/test_eng_errors.c makes it). */
static void test_nan(void **state)
{
    (void)state;
    char bad[4096], err[512], want[64];
    int32_t ids[64], tok[3] = { 5, 6, 7 };
    int rcs[3];
    eng_seq *q[3];
    const scase sc = { 2, ENG_XIO_MMAP, 0 };
    snprintf(bad, sizeof bad, "%s", tu_tmp("nan-bad.cflow"));
    assert_int_equal(tu_model_set_vec(convert("models/stories260K-f32.gguf", "nan-good.cflow"),
                                      bad, 1, FMT_S_ATTN_NORM, 3e38f), 0);
    eng_session *s = open_case(bad, &sc);
    for (unsigned i = 0; i < 3; i++) {
        size_t m = prompt(i, eng_hparams(s)->vocab_size, ids);
        assert_int_equal(eng_seq_new(s, 0, &q[i], err, sizeof err), 0);
        /* the prompt's last token too is not finite: its position dropped */
        assert_int_equal(eng_seq_prefill(q[i], ids, m, err, sizeof err), ENG_ENAN);
        assert_int_equal(eng_seq_n_past(q[i]), m - 1);
    }
    assert_int_equal(eng_decode_batch(s, q, tok, 3, rcs, err, sizeof err), ENG_ENAN);
    for (unsigned i = 0; i < 3; i++) {
        const char *e = eng_seq_error(q[i]);
        fprintf(stderr, "sequence %u: %s\n", i, e);
        assert_int_equal(rcs[i], ENG_ENAN);
        assert_non_null(strstr(e, "after layer 1 "));
        snprintf(want, sizeof want, "token %d at position %zu", tok[i],
                 prompt(i, eng_hparams(s)->vocab_size, ids) - 1);
        assert_non_null(strstr(e, want));
        assert_int_equal(eng_seq_n_past(q[i]), prompt(i, eng_hparams(s)->vocab_size, ids) - 1);
    }
    eng_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense),     cmocka_unit_test(test_moe),
        cmocka_unit_test(test_fallback),  cmocka_unit_test(test_one_pass),
        cmocka_unit_test(test_errors),    cmocka_unit_test(test_read_fault),
        cmocka_unit_test(test_nan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
