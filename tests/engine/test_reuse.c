/*
 * test_reuse.c — eng_prefill_reuse (issue 20 item 2): a token list that
 * starts with what the cache holds prefills only the rest, and gives the
 * logits and greedy tokens of prefilling the whole list in a fresh session.
 *
 * The conversation of the TUI, in tokens: turn 1 is prefilled, a reply is
 * decoded into the cache, and turn 2's list holds turn 1, the reply as it
 * re-tokenizes (its last tokens differ from the decoded ones) and new
 * text.  Checked on each model:
 *   - the positions kept are exactly those before the first difference;
 *   - the logits after the list equal a fresh session's prefill of it:
 *     bit for bit where both prefill token by token (the shipped model's
 *     DelayedSum schedule; a GGUF with CFLOW_NO_BATCH), within 1e-5 of the
 *     largest logit where a prefill is batched (eng_prefill.c gives each
 *     position its mat-vec's sums, which a CPU's kernels may round apart
 *     from the decode's), and 40 greedy tokens after it are the same;
 *   - a regenerate (the same list again, after more decoding) prefills
 *     nothing and gives the kept logits bit for bit, and the same greedy
 *     tokens; a list the cache holds that does not end where the last
 *     prefill did runs its last token again;
 *   - after a shift the reuse stops at the shift's n_keep (the slid rows
 *     saw the dropped tokens), and after a reset it keeps nothing.
 * Models: the stories260K GGUFs (F32 with an f32 cache, Q8_0 with ggml's
 * f16 cache; both batched) converted by the real `cflow convert`, and the
 * shipped data/default.cflow.
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
#include "testutil.h"

enum { N_REPLY = 24, N_GREEDY = 40, CAP = 512 };

static eng_session *open_model(const char *path, int kv_f16)
{
    eng_session *s = NULL;
    eng_opts o;
    char err[512];
    eng_opts_default(&o);
    o.n_threads = 1;
    o.kv_f16 = kv_f16;
    /* the per-position attention kernel: llama.cpp's tiled one is taken
     * per prefill call (a ubatch of 64 tokens or more, as llama.cpp takes
     * it), so a reused prefix and a fresh prefill of the whole list could
     * run different attention arithmetic; what is checked here is the
     * reuse itself */
    o.prefill_attn = 0;
    if (eng_open(&s, path, &o, err, sizeof err))
        fail_msg("%s", err);
    return s;
}

static size_t encode(eng_session *s, const char *text, int bos, int32_t *ids, size_t cap)
{
    size_t n = 0;
    assert_int_equal(eng_tok_encode(eng_tokenizer(s), text, strlen(text), bos, 0, ids, cap,
                                    &n), 0);
    assert_true(n > 0 && n <= cap);
    return n;
}

/* Greedy tokens after the current logits, decoded into the cache. */
static void greedy(eng_session *s, int32_t *out, int n)
{
    char err[512];
    const uint32_t nv = eng_hparams(s)->vocab_size;
    for (int k = 0; k < n; k++) {
        out[k] = tu_argmax(eng_logits(s), nv);
        if (eng_decode(s, out[k], err, sizeof err))
            fail_msg("decode %d: %s", k, err);
    }
}

static uint64_t prompt_tokens(eng_session *s)
{
    eng_stats es;
    eng_get_stats(s, &es);
    return es.n_prompt;
}

static void reuse(eng_session *s, const int32_t *ids, size_t n, size_t want_kept,
                  uint64_t want_prefilled)
{
    char err[512];
    size_t kept = 12345;
    uint64_t before = prompt_tokens(s);
    if (eng_prefill_reuse(s, ids, n, &kept, err, sizeof err))
        fail_msg("reuse: %s", err);
    assert_int_equal(kept, want_kept);
    assert_int_equal(prompt_tokens(s) - before, want_prefilled);
    assert_int_equal(eng_n_past(s), n);
}

static void check_model(const char *path, int kv_f16, double tol)
{
    char err[512];
    int32_t *l1 = malloc(CAP * sizeof *l1), *l2 = malloc(CAP * sizeof *l2);
    int32_t reply[N_REPLY], ga[N_GREEDY], gb[N_GREEDY], gc[N_GREEDY];
    eng_session *a = open_model(path, kv_f16), *b = open_model(path, kv_f16);
    const uint32_t nv = eng_hparams(a)->vocab_size;
    float *kept = malloc(nv * sizeof *kept);

    /* turn 1, then the reply decoded into the cache */
    size_t n1 = encode(a, "Tom had a red ball. He liked to play with it in the park "
                       "every day after school.", 1, l1, CAP);
    reuse(a, l1, n1, 0, n1);
    greedy(a, reply, N_REPLY);
    /* turn 2: turn 1, the reply but its last 3 tokens, new text */
    size_t n2 = 0;
    memcpy(l2, l1, n1 * sizeof *l2);
    memcpy(l2 + n1, reply, (N_REPLY - 3) * sizeof *l2);
    n2 = n1 + N_REPLY - 3;
    n2 += encode(a, " One day Sue came to the park and saw the ball.", 0, l2 + n2, CAP - n2);
    const size_t held = n1 + N_REPLY - 3;
    reuse(a, l2, n2, held, n2 - held);
    memcpy(kept, eng_logits(a), nv * sizeof *kept);

    assert_int_equal(eng_prefill(b, l2, n2, err, sizeof err), 0);
    tu_same_logits(path, eng_logits(a), eng_logits(b), nv, tol);
    greedy(a, ga, N_GREEDY);
    greedy(b, gb, N_GREEDY);
    for (int k = 0; k < N_GREEDY; k++)
        if (ga[k] != gb[k])
            fail_msg("%s: greedy token %d: reused %d, fresh %d", path, k, ga[k], gb[k]);

    /* regenerate: the same list, nothing prefilled, the kept logits */
    reuse(a, l2, n2, n2, 0);
    tu_same_logits("regenerate", eng_logits(a), kept, nv, 0);
    greedy(a, gc, N_GREEDY);
    assert_memory_equal(gc, ga, sizeof ga);
    /* all held but not ending where the last prefill did: the last token
     * runs again, and its logits give the next greedy token */
    int32_t *l4 = malloc(CAP * sizeof *l4);
    memcpy(l4, l2, n2 * sizeof *l4);
    memcpy(l4 + n2, gc, 5 * sizeof *l4);
    reuse(a, l4, n2 + 5, n2 + 4, 1);
    assert_int_equal(tu_argmax(eng_logits(a), nv), gc[5]);
    /* the list less its last token, then all of it: one token each */
    reuse(a, l2, n2 - 1, n2 - 2, 1);
    reuse(a, l2, n2, n2 - 1, 1);
    tu_same_logits("rerun", eng_logits(a), kept, nv, tol);

    /* a shift: rows after n_keep saw the dropped tokens */
    int32_t *l3 = malloc(CAP * sizeof *l3);
    const uint32_t keep = 4, drop = 10;
    assert_int_equal(eng_shift(a, keep, drop, err, sizeof err), 0);
    memcpy(l3, l2, keep * sizeof *l3);
    memcpy(l3 + keep, l2 + keep + drop, (n2 - keep - drop) * sizeof *l3);
    size_t n3 = n2 - drop;
    reuse(a, l3, n3, keep, n3 - keep);
    eng_reset(b);
    reuse(b, l3, n3, 0, n3);
    tu_same_logits("after a shift", eng_logits(a), eng_logits(b), nv, tol);
    /* the cache now holds l3 as a prefill computes it: all of it reused */
    reuse(a, l3, n3, n3, 0);
    eng_reset(a);
    reuse(a, l3, n3, 0, n3);

    free(l1);
    free(l2);
    free(l3);
    free(l4);
    free(kept);
    eng_close(a);
    eng_close(b);
}

static void test_reuse_gguf(void **state)
{
    (void)state;
    const char *f32 = tu_convert_shared("models/stories260K-f32.gguf", "f32.cflow");
    assert_non_null(f32);
    check_model(f32, 0, 1e-5);
    const char *q8 = tu_convert_shared("models/stories260K-q8_0.gguf", "q8.cflow");
    assert_non_null(q8);
    check_model(q8, -1, 1e-5);
    /* token by token (eng_prefill.c's switch): bit for bit */
    setenv("CFLOW_NO_BATCH", "1", 1);
    check_model(q8, -1, 0);
    unsetenv("CFLOW_NO_BATCH");
}

/* The shipped model's path into path (the test needs it). */
static void shipped(char *path, size_t cap)
{
    const char *sd = getenv("CFLOW_SRCDIR");
    snprintf(path, cap, "%s/data/default.cflow", sd && *sd ? sd : ".");
    tu_require(path);
}

static void test_reuse_shipped(void **state)
{
    char path[4096];
    (void)state;
    shipped(path, sizeof path);
    check_model(path, -1, 0);
}

/* The bytes ids[0..n) spell, into out (NUL-terminated). */
static void spell(const eng_tok *tok, const int32_t *ids, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = 0;
        const char *p = eng_tok_piece(tok, ids[i], &len);
        assert_true(p && o + len < cap);
        memcpy(out + o, p, len);
        o += len;
    }
    out[o] = 0;
}

/* eng_tok_splice_cached (the TUI's and cflow serve's follow-up turns), on
 * the shipped model's tokenizer: a cache that holds a reply as it was
 * sampled, a name in two pieces (" S" "ue"), against the next turn's
 * prompt, which encodes the same text whole (" Sue"). */
static void test_splice_cached(void **state)
{
    char path[4096], a[1024], b[1024];
    (void)state;
    shipped(path, sizeof path);
    eng_session *s = open_model(path, -1);
    const eng_tok *tok = eng_tokenizer(s);
    int32_t kv[CAP];
    size_t n_kv = encode(s, "Tom gave the ball to", 1, kv, CAP);
    const size_t head = n_kv;
    n_kv += encode(s, " S", 0, kv + n_kv, CAP - n_kv);
    n_kv += encode(s, "ue", 0, kv + n_kv, CAP - n_kv);
    n_kv += encode(s, ". She was happy.", 0, kv + n_kv, CAP - n_kv);
    const char *text = "Tom gave the ball to Sue. She was happy. They played all day.";
    int32_t *ids = malloc(CAP * sizeof *ids);
    size_t n = encode(s, text, 1, ids, CAP);
    size_t k0 = 0;
    while (k0 < n && k0 < n_kv && ids[k0] == kv[k0])
        k0++;
    assert_int_equal(k0, head);   /* the whole encoding leaves the cache at " Sue" */
    const size_t n0 = n;

    /* bounded: a prompt the splice would make n0 + 1 tokens or longer */
    int32_t *before = ids;
    assert_int_equal(eng_tok_splice_cached(tok, kv, n_kv, n0 + 1, &ids, &n), 0);
    assert_ptr_equal(ids, before);
    assert_int_equal(n, n0);
    /* no cache, or nothing in common: unchanged */
    assert_int_equal(eng_tok_splice_cached(tok, kv, 0, 0, &ids, &n), 0);
    assert_ptr_equal(ids, before);
    int32_t other[CAP];
    size_t n_other = encode(s, "Once upon a time", 0, other, CAP);
    assert_int_equal(eng_tok_splice_cached(tok, other, n_other, 0, &ids, &n), 0);
    assert_ptr_equal(ids, before);

    assert_int_equal(eng_tok_splice_cached(tok, kv, n_kv, 0, &ids, &n), 0);
    /* the cache's tokens, all of them, then the prompt's own */
    assert_true(n == n0 + 1);
    assert_memory_equal(ids, kv, n_kv * sizeof *ids);
    spell(tok, ids, n, a, sizeof a);   /* the same text */
    int32_t whole[CAP];
    size_t n_whole = encode(s, text, 1, whole, CAP);
    spell(tok, whole, n_whole, b, sizeof b);
    assert_string_equal(a, b);
    free(ids);
    eng_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reuse_gguf),
        cmocka_unit_test(test_reuse_shipped),
        cmocka_unit_test(test_splice_cached),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
