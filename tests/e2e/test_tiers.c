/*
 * test_tiers.c — every kernel tier this CPU runs, chosen the way a user
 * chooses it (CFLOW_ISA), on 1 and 2 threads, gives the same tokens
 * (issue 18, must show 2, and the tier half of must show 1).
 *
 * Models: the shared stories260K GGUF in Q4_0 and Q8_0 (dense; the f16
 * cache, ggml's SwiGLU and the Q8 activations) and its llama2.c F32 file
 * (run.c's arithmetic, the f32 cache, 512 positions), converted by the
 * real `cflow convert`, and the synthetic MoE model `cflow synth tiny-moe` in
 * Q4_0 and Q8_0 (routed experts: the router's dot_f32, the expert
 * mat-vecs).  Tiers: scalar, avx2, avx512, avx512-vnni, each where the CPU
 * has it, so an AVX-512 CPU checks its avx2 tier as well.
 *
 *   - the engine, in a child process per tier (CFLOW_ISA set before the
 *     kernel table is chosen): a batched prefill of 77 tokens (two whole
 *     32-token chunks and a ragged one; over the f16 cache, 64 tokens or
 *     more take the tiled prefill attention) and greedy decode steps to the end
 *     of the context (at most 400) on a 1-thread and a 2-thread session; the logits must be bit-identical at
 *     every step (so the greedy tokens are), and on the dense models the
 *     same bits on every tier (kern_impl.h: the SIMD kernels reproduce the
 *     scalar reference bit for bit);
 *   - the binary: `cflow run --temp 0` (and, on the MoE model, whose
 *     random weights make greedy text repeat itself, a seeded sample too)
 *     with -t 1 and -t 2 under each CFLOW_ISA prints the same text, and
 *     stderr names the tier that ran.
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
#include <sys/wait.h>
#include <unistd.h>

#include "engine/engine.h"
#include "kernels/kern.h"
#include "testutil.h"

enum { NMODEL = 5, PROMPT = 77, STEPS = 400 };

typedef struct model {
    const char *name;
    int         moe;
    char        path[4096];
} model;

static model models[NMODEL] = {
    { "stories260K q4_0", 0, "" }, { "stories260K q8_0", 0, "" },
    { "stories260K f32", 0, "" },  { "tiny-moe q4_0", 1, "" },
    { "tiny-moe q8_0", 1, "" },
};

static void synth_moe(const char *quant, char *out)
{
    tu_proc p;
    snprintf(out, 4096, "%s", tu_tmp(quant));
    strcat(out, "-moe.cflow");
    assert_int_equal(tu_cflow_run(&p, "synth", "-q", quant, "tiny-moe", out, (char *)NULL), 0);
    assert_true(tu_ok(&p, "cflow synth tiny-moe"));
    tu_proc_free(&p);
}

static int setup(void **state)
{
    (void)state;
    const char *q4 = tu_convert_shared("models/stories260K-q4_0.gguf", "s260-q4_0.cflow");
    assert_non_null(q4);
    snprintf(models[0].path, sizeof models[0].path, "%s", q4);
    const char *q8 = tu_convert_shared("models/stories260K-q8_0.gguf", "s260-q8_0.cflow");
    assert_non_null(q8);
    snprintf(models[1].path, sizeof models[1].path, "%s", q8);
    /* llama2.c's file: an f32 cache and 512 positions, past the 256 at
     * which the attention runs split over heads */
    tu_proc p;
    snprintf(models[2].path, sizeof models[2].path, "%s", tu_tmp("s260-f32.cflow"));
    tu_require(tu_shared("models/stories260K.bin"));
    char tok[4096];
    snprintf(tok, sizeof tok, "%s", tu_shared("models/tok512.bin"));
    assert_int_equal(tu_cflow_run(&p, "convert", "--tokenizer", tok,
                                  tu_shared("models/stories260K.bin"), models[2].path,
                                  (char *)NULL), 0);
    assert_true(tu_ok(&p, "cflow convert stories260K.bin"));
    tu_proc_free(&p);
    synth_moe("q4_0", models[3].path);
    synth_moe("q8_0", models[4].path);
    return 0;
}

/* ---- the engine, per tier ------------------------------------------------ */

static eng_session *open_model(const char *path, int threads, char *err, size_t n)
{
    eng_session *s = NULL;
    eng_opts o;
    eng_opts_default(&o);
    o.n_threads = threads;
    return eng_open(&s, path, &o, err, n) ? NULL : s;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 0x100000001b3ull;
    return h;
}

/* In the child: the two sessions side by side.  Returns 0 and the hash of
 * every step's logits, or prints why not and returns 1. */
static int run_pair(const model *m, uint64_t *hash)
{
    char err[512];
    eng_session *s[2];
    for (int k = 0; k < 2; k++)
        if (!(s[k] = open_model(m->path, k + 1, err, sizeof err))) {
            fprintf(stderr, "%s: %s\n", m->name, err);
            return 1;
        }
    const uint32_t nv = eng_hparams(s[0])->vocab_size;
    int32_t ids[PROMPT];
    for (int i = 0; i < PROMPT; i++)   /* fixed, varied ids: BOS, then a walk */
        ids[i] = i ? (int32_t)((7919u * (unsigned)i + 13u) % nv) : 1;
    for (int k = 0; k < 2; k++)
        if (eng_prefill(s[k], ids, PROMPT, err, sizeof err)) {
            fprintf(stderr, "%s: prefill: %s\n", m->name, err);
            return 1;
        }
    /* up to STEPS, or as many as the model's context holds */
    const int steps = eng_n_ctx(s[0]) - PROMPT < STEPS ? (int)eng_n_ctx(s[0]) - PROMPT : STEPS;
    uint64_t h = 0xcbf29ce484222325ull;
    int rc = 0;
    for (int step = 0; step <= steps && !rc; step++) {
        const float *a = eng_logits(s[0]), *b = eng_logits(s[1]);
        if (memcmp(a, b, nv * sizeof *a)) {
            fprintf(stderr, "%s: step %d: 1 and 2 threads give different logits\n",
                    m->name, step);
            rc = 1;
            break;
        }
        h = fnv(h, a, nv * sizeof *a);
        if (step == steps)
            break;
        int32_t best = 0;
        for (uint32_t v = 1; v < nv; v++)
            if (a[v] > a[best])
                best = (int32_t)v;
        for (int k = 0; k < 2 && !rc; k++)
            if (eng_decode(s[k], best, err, sizeof err)) {
                fprintf(stderr, "%s: decode step %d: %s\n", m->name, step, err);
                rc = 1;
            }
    }
    eng_close(s[0]);
    eng_close(s[1]);
    *hash = h;
    return rc;
}

/* Every model under CFLOW_ISA=tier in a child process (the table is chosen
 * once per process); the hashes come back through a pipe. */
static void engine_tier(const char *tier, uint64_t hash[NMODEL])
{
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fd[0]);
        setenv("CFLOW_ISA", tier, 1);
        const kern_ops *ops = kern_init();
        int bad = strcmp(ops->name, tier) != 0;
        if (bad)
            fprintf(stderr, "CFLOW_ISA=%s chose %s\n", tier, ops->name);
        for (int i = 0; i < NMODEL && !bad; i++)
            bad = run_pair(&models[i], &hash[i]);
        if (!bad && write(fd[1], hash, NMODEL * sizeof hash[0]) !=
                        (ssize_t)(NMODEL * sizeof hash[0]))
            bad = 1;
        _exit(bad);
    }
    close(fd[1]);
    ssize_t got = read(fd[0], hash, NMODEL * sizeof hash[0]);
    close(fd[0]);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) || got != (ssize_t)(NMODEL * sizeof hash[0]))
        fail_msg("CFLOW_ISA=%s: the engine check failed (see above)", tier);
}

static void test_engine_tiers_threads(void **state)
{
    (void)state;
    uint64_t ref[NMODEL], h[NMODEL];
    int tiers = 0;
    for (int isa = 0; isa < KERN_NISA; isa++) {
        if (!kern_ops_for((enum kern_isa)isa))
            continue;
        const char *tier = kern_isa_name((enum kern_isa)isa);
        engine_tier(tier, isa ? h : ref);
        for (int i = 0; i < NMODEL && isa; i++) {
            fprintf(stderr, "%-12s %-17s 1 = 2 threads; logits %s the scalar tier's\n",
                    tier, models[i].name, h[i] == ref[i] ? "equal to" : "differ from");
            if (!models[i].moe && h[i] != ref[i])
                fail_msg("%s on %s: the logits are not the scalar tier's", models[i].name,
                         tier);
        }
        tiers++;
    }
    assert_true(tiers >= 1);
}

/* ---- the binary, per tier ------------------------------------------------ */

static const char *const text_prompt =
    "Once upon a time, there was a little girl named Lily. She loved to play "
    "outside in the park with her friends. One day, she saw a big red ball.";

/* stdout of `cflow run` on model m under CFLOW_ISA=tier (malloc'd) */
static char *run_text(const model *m, const char *tier, const char *threads, int sample)
{
    char env_isa[64];
    snprintf(env_isa, sizeof env_isa, "CFLOW_ISA=%s", tier);
    char *const env[] = { env_isa, NULL };
    tu_proc p;
    assert_int_equal(tu_cflow_env(&p, env, "run", "-m", m->path, "-p", text_prompt,
                                  "-n", "80", "-t", threads,
                                  "--temp", sample ? "1" : "0", "--seed", "3",
                                  "--no-log", (char *)NULL), 0);
    assert_true(tu_ok(&p, "cflow run"));
    char want[96];
    snprintf(want, sizeof want, "kernels %s, weights ", tier);
    if (!strstr(p.err, want))
        fail_msg("CFLOW_ISA=%s: stderr does not name the tier:\n%s", tier, p.err);
    assert_true(p.out_len > 50);
    char *out = strdup(p.out);
    tu_proc_free(&p);
    return out;
}

static void test_binary_tiers_threads(void **state)
{
    (void)state;
    for (int i = 0; i < NMODEL; i++)
        for (int sample = 0; sample <= models[i].moe; sample++) {
            char *first = NULL;
            for (int isa = 0; isa < KERN_NISA; isa++) {
                if (!kern_ops_for((enum kern_isa)isa))
                    continue;
                const char *tier = kern_isa_name((enum kern_isa)isa);
                char *t1 = run_text(&models[i], tier, "1", sample);
                char *t2 = run_text(&models[i], tier, "2", sample);
                if (strcmp(t1, t2))
                    fail_msg("%s, %s, %s: -t 1 and -t 2 differ:\n%s\n---\n%s",
                             models[i].name, tier, sample ? "sampled" : "greedy", t1, t2);
                if (!first)
                    first = strdup(t1);
                else if (!models[i].moe && strcmp(first, t1))
                    fail_msg("%s, %s: the text is not the scalar tier's:\n%s\n---\n%s",
                             models[i].name, tier, t1, first);
                fprintf(stderr, "%-12s %-17s %s: -t 1 = -t 2 (%zu bytes)%s\n", tier,
                        models[i].name, sample ? "sampled" : "greedy", strlen(t1),
                        strcmp(first, t1) ? ", not the scalar tier's text" : "");
                free(t1);
                free(t2);
            }
            free(first);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_engine_tiers_threads),
        cmocka_unit_test(test_binary_tiers_threads),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
