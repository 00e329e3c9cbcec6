/*
 * test_kvwin.c — issue 42, must show 3: a sliding-window model's KV cache
 * holds no more than its window per sliding layer, measured; a latent-
 * attention model's holds the latent.
 *
 * tiny-gemma3 (`cflow synth --gguf`: five layers sliding over 8 positions,
 * one full layer, in each group of six) is opened at two contexts:
 *   - eng_kv_bytes per layer: a sliding layer's cache is its window's
 *     rows, 8 of them, whatever the context; the full layer's is the
 *     context's;
 *   - measured: the bytes malloc hands out (mallinfo2's in-use and mapped
 *     bytes) while a session opens, at a context of 256 and of 2048: the
 *     difference is what grows with the context, the full layer's rows and
 *     the sequence's per-position rows (its token history, the score row),
 *     and nothing of the sliding layers (were they full, it would be six
 *     times the full layer's);
 *   - a ring that has wrapped keeps the tokens right: a reuse prefill that
 *     cuts back by more than one position computes everything again, by
 *     one keeps the rest, and a context shift (computed again from the
 *     kept tokens) gives the logits a fresh prefill of those tokens
 *     gives.
 * tiny-deepseek2 (DeepSeek-V2's multi-head latent attention: 4 heads whose
 * keys and values come from a latent of 128 and a rotated key of 16) is
 * opened the same way: each layer caches one row of 144 halves a position
 * (the latent and the rotated key, no V), where decompressed keys and
 * values would take 2 * 4 * (48 + 128) = 1408; measured as above, what
 * grows with the context is that row a layer.  Its context shift (computed
 * again: the rotated part sits past the latent) gives a fresh prefill's
 * logits.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "format/cflow_format.h"
#include "testutil.h"

static char model[4096], mla_model[4096];

static int setup(void **state)
{
    tu_proc p;
    (void)state;
    char gguf[4096];
    snprintf(gguf, sizeof gguf, "%s", tu_tmp("ds.gguf"));
    snprintf(mla_model, sizeof mla_model, "%s", tu_tmp("ds.cflow"));
    if (tu_cflow_run(&p, "synth", "--gguf", "--seed", "3", "tiny-deepseek2", gguf,
                     (char *)NULL) || p.status)
        return -1;
    tu_proc_free(&p);
    if (tu_cflow_run(&p, "convert", gguf, mla_model, (char *)NULL) || p.status)
        return -1;
    tu_proc_free(&p);
    snprintf(gguf, sizeof gguf, "%s", tu_tmp("g3.gguf"));
    snprintf(model, sizeof model, "%s", tu_tmp("g3.cflow"));
    if (tu_cflow_run(&p, "synth", "--gguf", "--seed", "3", "tiny-gemma3", gguf, (char *)NULL) ||
        p.status)
        return -1;
    tu_proc_free(&p);
    if (tu_cflow_run(&p, "convert", gguf, model, (char *)NULL) || p.status)
        return -1;
    tu_proc_free(&p);
    return 0;
}

/* The bytes malloc has handed out and not taken back.  Under ASan its
 * allocator replaces glibc's, whose mallinfo2 then counts nothing. */
#if defined(__SANITIZE_ADDRESS__)
/* the ASan runtime's (sanitizer/allocator_interface.h, which Debian's gcc
 * does not install) */
size_t __sanitizer_get_current_allocated_bytes(void);
static size_t in_use(void)
{
    return __sanitizer_get_current_allocated_bytes();
}
#else
static size_t in_use(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}
#endif

/* A session of file at n_ctx; *grown the bytes malloc handed out for it. */
static eng_session *open_file(const char *file, uint32_t n_ctx, size_t *grown)
{
    eng_opts o;
    eng_session *s = NULL;
    char err[512];
    eng_opts_default(&o);
    o.n_threads = 1;
    o.n_ctx = n_ctx;
    o.no_mmap = 0;
    size_t before = in_use();
    if (eng_open(&s, file, &o, err, sizeof err))
        fprintf(stderr, "%s\n", err);
    assert_non_null(s);
    if (grown)
        *grown = in_use() - before;
    return s;
}

static eng_session *open_at(uint32_t n_ctx, size_t *grown)
{
    return open_file(model, n_ctx, grown);
}

static void test_window_bytes(void **state)
{
    (void)state;
    size_t g256, g2048;
    eng_session *a = open_at(256, &g256);
    eng_session *b = open_at(2048, &g2048);
    const fmt_hparams *hp = eng_hparams(a);
    const size_t row = (size_t)hp->n_kv_heads * hp->head_dim * 2 /* K, V */ * 2 /* f16 */;
    unsigned n_full = 0, n_slide = 0;
    fmt_model *m = NULL;
    char err[512];
    assert_int_equal(fmt_model_open(&m, model, err, sizeof err), 0);
    assert_true(eng_kv_f16(a));
    for (unsigned l = 0; l < hp->n_layers; l++) {
        uint32_t W = fmt_model_layer_geom(m, l)->sliding_window;
        if (W) {
            n_slide++;
            assert_int_equal(W, 8);
            assert_int_equal(eng_kv_bytes(a, (int)l), 8 * row);
            assert_int_equal(eng_kv_bytes(b, (int)l), 8 * row);
        } else {
            n_full++;
            assert_int_equal(eng_kv_bytes(a, (int)l), 256 * row);
            assert_int_equal(eng_kv_bytes(b, (int)l), 2048 * row);
        }
    }
    fmt_model_close(m);
    assert_int_equal(n_slide, 5);
    assert_int_equal(n_full, 1);
    assert_int_equal(eng_kv_bytes(b, -1), (5 * 8 + 2048) * row);
    /* measured: what grew from 256 to 2048 positions is the full layer's
     * rows and 8 bytes a position (the token history, the score row) */
    const size_t want = (2048 - 256) * (n_full * row + 8);
    const size_t all_full = (2048 - 256) * ((n_full + n_slide) * row + 8);
    const long long diff = (long long)g2048 - (long long)g256;
    print_message("opened at 256: %zu bytes, at 2048: %zu; grew %lld, the full layer's "
                  "rows %zu, had every layer been full %zu\n", g256, g2048, diff, want,
                  all_full);
    assert_true(diff >= (long long)want - 16384 && diff <= (long long)want + 16384);
    assert_true((size_t)diff < all_full / 2);
    eng_close(a);
    eng_close(b);
}

/* The argmax of s's logits. */
static int32_t best(eng_session *s)
{
    const float *lg = eng_logits(s);
    int32_t b = 0;
    for (uint32_t v = 1; v < eng_hparams(s)->vocab_size; v++)
        if (lg[v] > lg[b])
            b = (int32_t)v;
    return b;
}

static void test_window_wrapped(void **state)
{
    (void)state;
    char err[512];
    int32_t toks[60];
    for (unsigned i = 0; i < 60; i++)
        toks[i] = (int32_t)(3 + (i * 37) % 250);
    eng_session *s = open_at(256, NULL), *f = open_at(256, NULL);
    const uint32_t nv = eng_hparams(s)->vocab_size;
    float *want = malloc(nv * sizeof *want);
    assert_non_null(want);

    /* a reuse prefill that differs from the cache 20 positions back (the
     * rings have wrapped twice since): everything is computed again, and
     * the logits are a fresh prefill's */
    assert_int_equal(eng_prefill(s, toks, 50, err, sizeof err), 0);
    toks[30] = 7;
    size_t reused = 99;
    assert_int_equal(eng_prefill_reuse(s, toks, 50, &reused, err, sizeof err), 0);
    assert_int_equal(reused, 0);
    assert_int_equal(eng_prefill(f, toks, 50, err, sizeof err), 0);
    memcpy(want, eng_logits(f), nv * sizeof *want);
    assert_memory_equal(eng_logits(s), want, nv * sizeof *want);
    /* one position back (another last token) keeps the rest: the row the
     * ring overwrote is the one the window just left */
    toks[49] = 11;
    assert_int_equal(eng_prefill_reuse(s, toks, 50, &reused, err, sizeof err), 0);
    assert_int_equal(reused, 49);
    eng_reset(f);
    assert_int_equal(eng_prefill(f, toks, 50, err, sizeof err), 0);
    memcpy(want, eng_logits(f), nv * sizeof *want);
    assert_memory_equal(eng_logits(s), want, nv * sizeof *want);

    /* a context shift over wrapped rings: drop 20 positions after the
     * first 4; the logits are those of a fresh prefill of the 30 kept */
    assert_int_equal(eng_shift(s, 4, 20, err, sizeof err), 0);
    assert_int_equal(eng_n_past(s), 30);
    int32_t kept[30];
    memcpy(kept, toks, 4 * sizeof *kept);
    memcpy(kept + 4, toks + 24, 26 * sizeof *kept);
    eng_reset(f);
    assert_int_equal(eng_prefill(f, kept, 30, err, sizeof err), 0);
    assert_memory_equal(eng_logits(s), eng_logits(f), nv * sizeof(float));
    /* and they decode on alike */
    for (int k = 0; k < 8; k++) {
        int32_t t = best(f);
        assert_int_equal(best(s), t);
        assert_int_equal(eng_decode(s, t, err, sizeof err), 0);
        assert_int_equal(eng_decode(f, t, err, sizeof err), 0);
    }
    free(want);
    eng_close(s);
    eng_close(f);
}

/* MLA: one row of the latent and the rotated key a position and layer */
static void test_mla_latent(void **state)
{
    (void)state;
    size_t g256, g2048;
    char err[512];
    eng_session *a = open_file(mla_model, 256, &g256);
    eng_session *b = open_file(mla_model, 2048, &g2048);
    const fmt_hparams *hp = eng_hparams(a);
    assert_int_equal(hp->mla_rank, 128);
    assert_int_equal(hp->head_dim, 128 + 16);
    assert_int_equal(hp->n_kv_heads, 1);
    const size_t row = (size_t)hp->head_dim * 2 /* f16, no V */;
    const size_t full = 2 * (size_t)hp->n_heads * (hp->mla_nope + hp->rope_dims + hp->mla_v) * 2;
    for (unsigned l = 0; l < hp->n_layers; l++) {
        assert_int_equal(eng_kv_bytes(a, (int)l), 256 * row);
        assert_int_equal(eng_kv_bytes(b, (int)l), 2048 * row);
    }
    const size_t want = (2048 - 256) * (hp->n_layers * row + 8);
    const size_t decomp = (2048 - 256) * (hp->n_layers * full + 8);
    const long long diff = (long long)g2048 - (long long)g256;
    print_message("MLA opened at 256: %zu bytes, at 2048: %zu; grew %lld, the latent rows "
                  "%zu, keys and values decompressed %zu\n", g256, g2048, diff, want, decomp);
    assert_true(diff >= (long long)want - 16384 && diff <= (long long)want + 16384);
    assert_true((size_t)diff < decomp / 4);
    eng_close(b);

    /* a shift gives a fresh prefill's logits */
    int32_t toks[40];
    for (unsigned i = 0; i < 40; i++)
        toks[i] = (int32_t)(3 + (i * 41) % 250);
    eng_session *f = open_file(mla_model, 256, NULL);
    assert_int_equal(eng_prefill(a, toks, 40, err, sizeof err), 0);
    assert_int_equal(eng_shift(a, 4, 10, err, sizeof err), 0);
    int32_t kept[30];
    memcpy(kept, toks, 4 * sizeof *kept);
    memcpy(kept + 4, toks + 14, 26 * sizeof *kept);
    assert_int_equal(eng_prefill(f, kept, 30, err, sizeof err), 0);
    assert_memory_equal(eng_logits(a), eng_logits(f), hp->vocab_size * sizeof(float));
    eng_close(f);
    eng_close(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window_bytes),
        cmocka_unit_test(test_window_wrapped),
        cmocka_unit_test(test_mla_latent),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
