/*
 * test_xio_cache.c — the RAM expert cache's policy and the reads' order,
 * unit by unit through eng_xio_* on a file of 4 KiB blocks (the sessions
 * that use them: test_xio.c), under each expert reader:
 *
 *   - a hot key survives a scan of more cold keys than slots under crf
 *     (the default) and lfu, not under lru; a cycle through more keys
 *     than the slots hits under crf and lfu, never under lru; a bad
 *     policy name, from the configuration or $CFLOW_XIO_POLICY through a
 *     session, is an error naming it;
 *   - under crf, and only there, a key's past issues fade with the tokens
 *     that pass (eng_xio_tick), not with the issues of other keys; a
 *     session's prefill and decode advance that clock by their tokens;
 *   - reads issued later (eng_xio_issue_later) wait for the sooner ones,
 *     go at once alone, and at once when the same key is issued sooner.
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
#include <sys/types.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/eng_impl.h"      /* eng_xio_*: the cache's policy, unit by unit */
#include "engine/eng_io_impl.h"   /* eng_xio.tokens: the clock a session keeps */
#include "testutil.h"

#define POL_KEYS  16       /* keys of the test file: one 4 KiB block each */
#define POL_SLOTS 4

/* Issue key (its block: every byte the key), wait for it, check the bytes
 * and release it; 1 for a hit. */
static int pol_issue(eng_xio *x, int key)
{
    int hit = -1;
    char err[512] = "";
    const uint8_t *data = NULL;
    double busy = 0.0;
    int k = eng_xio_issue(x, key, (uint64_t)key * 4096, 4096, &hit);
    assert_true(k >= 0);
    eng_xio_submit(x);
    assert_int_equal(eng_xio_wait(x, k, &data, &busy, err, sizeof err), 0);
    assert_int_equal(data[0], key);
    assert_int_equal(data[4095], key);
    eng_xio_release(x, k);
    return hit;
}

/* POL_KEYS blocks of 4096 bytes, block k all k. */
static void write_blocks(const char *path)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (int k = 0; k < POL_KEYS; k++) {
        uint8_t block[4096];
        memset(block, k, sizeof block);
        assert_int_equal(fwrite(block, 1, sizeof block, f), sizeof block);
    }
    assert_int_equal(fclose(f), 0);
}

static eng_xio *pol_open(const char *path, const char *policy)
{
    eng_xio *x = NULL;
    char err[512] = "";
    const eng_xio_cfg cfg = { .policy = policy };
    int rc = eng_xio_new(&x, path, 4096, POL_SLOTS, POL_KEYS, &cfg, NULL, NULL, err,
                         sizeof err);
    if (rc)
        fprintf(stderr, "eng_xio_new: %s\n", err);
    assert_int_equal(rc, 0);
    return x;
}

/* A session on a fresh preset (cflow synth, a MoE) at model [4096], the
 * temporary file name: sync expert I/O with a 1 MiB cache, 64 positions.
 * eng_open's code, with err filled where it refused. */
static int open_moe(const char *preset, const char *name, char *model, eng_session **s,
                    char *err, size_t errlen)
{
    tu_moe g;
    snprintf(model, 4096, "%s", tu_tmp(name));
    tu_synth_moe(preset, model, &g);
    eng_opts o;
    eng_opts_default(&o);
    o.n_ctx = 64;
    o.expert_io = ENG_XIO_SYNC;
    o.expert_cache = 1 << 20;
    return eng_open(s, model, &o, err, errlen);
}

/* The keys whose reads completed, in order (eng_io_result: at completion
 * on io_uring, after the pread on the pool). */
static int order[16];
static int n_order;

static ssize_t record_read(int fd, void *buf, size_t n, off_t off, ssize_t res)
{
    (void)fd;
    (void)buf;
    (void)n;
    int i = __atomic_fetch_add(&n_order, 1, __ATOMIC_SEQ_CST);
    if (i < 16)
        order[i] = (int)(off / 4096);
    return res;
}

/* Wait for slot k, which holds key: its bytes are the key's. */
static void wait_key(eng_xio *x, int k, int key)
{
    char err[512] = "";
    const uint8_t *data = NULL;
    double busy = 0.0;
    assert_int_equal(eng_xio_wait(x, k, &data, &busy, err, sizeof err), 0);
    assert_int_equal(data[0], key);
    assert_int_equal(data[4095], key);
    eng_xio_release(x, k);
}

/* eng_xio_issue_later: on both readers, reads issued later than others
 * wait until those have completed, even when issued first; alone they go
 * at once; another issue of the same key (a hit) sends them at once. */
static void test_priority(void **state)
{
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s", tu_tmp("priority.bin"));
    write_blocks(path);
    static const char *const readers[] = { "uring", "pool" };
    for (int rd = 0; rd < 2; rd++) {
        eng_xio *x = NULL;
        char err[512] = "";
        const eng_xio_cfg cfg = { .reader = readers[rd] };
        assert_int_equal(eng_xio_new(&x, path, 4096, POL_SLOTS, POL_KEYS, &cfg, NULL, NULL,
                                     err, sizeof err), 0);
        int hit = -1;
        n_order = 0;
        eng_io_result = record_read;
        int l1 = eng_xio_issue_later(x, 1, 4096, 4096, &hit);
        int l2 = eng_xio_issue_later(x, 2, 2 * 4096, 4096, &hit);
        int n3 = eng_xio_issue(x, 3, 3 * 4096, 4096, &hit);
        assert_true(l1 >= 0 && l2 >= 0 && n3 >= 0);
        eng_xio_submit(x);
        wait_key(x, l1, 1);          /* (it waits for key 3 first) */
        wait_key(x, l2, 2);
        wait_key(x, n3, 3);
        fprintf(stderr, "%s: later 1, later 2, then 3: read %d, %d, %d\n", readers[rd],
                order[0], order[1], order[2]);
        assert_int_equal(n_order, 3);
        assert_int_equal(order[0], 3);
        /* alone, a later read goes at once; a hit on it sends it too */
        int l4 = eng_xio_issue_later(x, 4, 4 * 4096, 4096, &hit);
        eng_xio_submit(x);
        wait_key(x, l4, 4);
        int n6 = eng_xio_issue(x, 6, 6 * 4096, 4096, &hit);
        int l5 = eng_xio_issue_later(x, 5, 5 * 4096, 4096, &hit);
        int h5 = eng_xio_issue(x, 5, 5 * 4096, 4096, &hit);
        assert_int_equal(h5, l5);
        assert_int_equal(hit, 1);
        eng_xio_submit(x);
        wait_key(x, h5, 5);
        wait_key(x, n6, 6);
        eng_xio_release(x, l5);
        eng_io_result = NULL;
        assert_int_equal(n_order, 6);
        eng_xio_free(x);
    }
    remove(path);
}

/* Issue 17 ("a replacement policy chosen by measurement"): a hot expert
 * survives a scan of more cold ones than there are slots under crf and
 * lfu, not under lru; a cycle through more keys than the slots hits under
 * crf and lfu (ties to the most recent keep a subset resident), never
 * under lru; the default is crf; a bad $CFLOW_XIO_POLICY is an error
 * naming it.  (No token passes here, so crf's weights do not fade:
 * test_decay.) */
static void test_policy(void **state)
{
    (void)state;
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s", tu_tmp("policy.bin"));
    write_blocks(path);
    static const char *const policies[] = { "lru", "lfu", "crf", NULL };
    for (int p = 0; p < 4; p++) {
        const int lfu = p != 0;          /* crf and NULL (the default) too */
        eng_xio *x = pol_open(path, policies[p]);
        /* the hot key: read once, then found */
        for (int i = 0; i < 8; i++)
            assert_int_equal(pol_issue(x, 0), i > 0);
        /* a scan of 2 x POL_SLOTS cold keys, each once: all read */
        for (int k = 1; k <= 2 * POL_SLOTS; k++)
            assert_int_equal(pol_issue(x, k), 0);
        int hot = pol_issue(x, 0);
        /* a cycle through POL_SLOTS + 1 fresh keys, five times */
        int cyc = 0;
        for (int r = 0; r < 5; r++)
            for (int k = 0; k <= POL_SLOTS; k++)
                cyc += pol_issue(x, 10 + k);
        uint64_t hits = 0, misses = 0;
        double depth = 0.0;
        eng_xio_hits(x, &hits, &misses, &depth);
        fprintf(stderr, "policy %s: hot key after the scan: %s; cycle of %d keys in %d "
                "slots: %d of %d hits; %llu hits, %llu misses\n",
                policies[p] ? policies[p] : "(default)", hot ? "hit" : "read", POL_SLOTS + 1,
                POL_SLOTS, cyc, 5 * (POL_SLOTS + 1), (unsigned long long)hits,
                (unsigned long long)misses);
        assert_int_equal(hot, lfu);
        if (lfu)    /* the hot key keeps its slot; once two rounds have
                     * evened the counts, 2 of the 5 keys stay in the 3 left */
            assert_true(cyc >= 2 * 3);
        else
            assert_int_equal(cyc, 0);
        assert_int_equal(hits + misses, 8 + 2 * POL_SLOTS + 1 + 5 * (POL_SLOTS + 1));
        eng_xio_free(x);
    }
    /* a bad name: from the configuration, then from the environment
     * through a session */
    eng_xio *x = NULL;
    const eng_xio_cfg bad = { .policy = "mru" };
    assert_int_equal(eng_xio_new(&x, path, 4096, POL_SLOTS, POL_KEYS, &bad, NULL, NULL, err,
                                 sizeof err), ENG_EARG);
    assert_null(x);
    assert_non_null(strstr(err, "'mru'"));
    remove(path);
    char model[4096];
    eng_session *s = NULL;
    setenv("CFLOW_XIO_POLICY", "sideways", 1);
    int rc = open_moe("tiny-moe", "policy-moe.cflow", model, &s, err, sizeof err);
    unsetenv("CFLOW_XIO_POLICY");
    fprintf(stderr, "CFLOW_XIO_POLICY=sideways: %s\n", err);
    assert_int_equal(rc, ENG_EARG);
    assert_null(s);
    assert_non_null(strstr(err, "CFLOW_XIO_POLICY='sideways'"));
    remove(model);
}

/* Key 0 issued three times, then `tokens` tokens pass, then keys 1-3
 * once each (the 4 slots are full) and key 4: 1 when key 0 is still
 * cached after that (a hit on it), 0 when key 4's slot was its. */
static int kept_after(const char *path, const char *policy, unsigned tokens)
{
    eng_xio *x = pol_open(path, policy);
    for (int i = 0; i < 3; i++)
        pol_issue(x, 0);
    eng_xio_tick(x, tokens);
    for (int k = 1; k <= 4; k++)
        assert_int_equal(pol_issue(x, k), 0);
    int kept = pol_issue(x, 0);
    eng_xio_free(x);
    return kept;
}

/* The crf policy's clock is tokens (eng_io_cache.c): with no
 * token between them key 0's three issues outweigh keys 1-3's one each,
 * and key 4 takes one of theirs; 100 tokens later (2^-4 of the weight
 * left at 0.04 a token) they weigh less than one fresh issue and key 4
 * takes key 0's slot.  lfu keeps key 0 and lru drops it either way:
 * neither looks at the clock. */
static void test_decay(void **state)
{
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s", tu_tmp("decay.bin"));
    write_blocks(path);
    static const char *const policies[] = { "crf", NULL, "lfu", "lru" };
    for (int p = 0; p < 4; p++) {
        int now = kept_after(path, policies[p], 0), later = kept_after(path, policies[p], 100);
        fprintf(stderr, "policy %s: key 0 after 0 tokens: %s; after 100: %s\n",
                policies[p] ? policies[p] : "(default)", now ? "kept" : "evicted",
                later ? "kept" : "evicted");
        assert_int_equal(now, p < 3);
        assert_int_equal(later, p == 2);
    }
    remove(path);
}

/* The clock test_decay's fading goes by is the session's tokens: a
 * prefill of 5 and 3 decodes advance it by 8, whether the prefill goes
 * token by token (tiny-moe's DelayedSum) or as one chunk (tiny-mixtral,
 * batched MoE prefill). */
static void test_session_clock(void **state)
{
    (void)state;
    static const char *const presets[] = { "tiny-moe", "tiny-mixtral" };
    for (int p = 0; p < 2; p++) {
        char model[4096], err[512] = "";
        eng_session *s = NULL;
        int rc = open_moe(presets[p], "clock-moe.cflow", model, &s, err, sizeof err);
        if (rc)
            fprintf(stderr, "eng_open: %s\n", err);
        assert_int_equal(rc, 0);
        assert_non_null(s->io.xio);
        const int32_t prompt[5] = { 1, 2, 3, 4, 5 };
        assert_int_equal(eng_prefill(s, prompt, 5, err, sizeof err), 0);
        assert_int_equal(s->io.xio->cache.tokens, 5);
        for (int i = 0; i < 3; i++)
            assert_int_equal(eng_decode(s, 6 + i, err, sizeof err), 0);
        fprintf(stderr, "%s: session clock after 5 prefilled and 3 decoded: %llu tokens\n",
                presets[p], (unsigned long long)s->io.xio->cache.tokens);
        assert_int_equal(s->io.xio->cache.tokens, 8);
        eng_close(s);
        remove(model);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_policy),
        cmocka_unit_test(test_decay),
        cmocka_unit_test(test_session_clock),
        cmocka_unit_test(test_priority),
    };
    int failed = 0;
    static const char *const readers[] = { "uring", "pool" };
    for (int r = tu_have_uring("test_xio_cache") ? 0 : 1; r < 2; r++) {
        setenv("CFLOW_XIO_READER", readers[r], 1);
        fprintf(stderr, "---- CFLOW_XIO_READER=%s\n", readers[r]);
        failed += cmocka_run_group_tests_name(readers[r], tests, NULL, NULL);
    }
    unsetenv("CFLOW_XIO_READER");
    return failed;
}
