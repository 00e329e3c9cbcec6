/*
 * test_bomb.c — allocation bombs, one set per input format.
 *
 * Every file here is small (a few KB at most) and claims a huge count or
 * size in one field: a tensor or key count of 2^40, a string or array
 * length past the end of the file, a geometry of 2^30, a token id of
 * 2^31 - 1 (or of 15 M in a vocabulary of three).  The real binary reads each one (`cflow inspect`, `convert`,
 * `run`, `tokenize`) and must refuse it with one line naming the file,
 * exit status 1, no signal, and without allocating out of proportion:
 *
 *   - the address space is capped (1 GiB, `ulimit -v`; in the sanitizer
 *     build, where the shadow memory needs terabytes of address space,
 *     AddressSanitizer's max_allocation_size_mb=256 with
 *     allocator_may_return_null=1 instead), so an allocation sized from
 *     the bad field fails;
 *   - and the message must not be "out of memory": the parser has to
 *     refuse the field by comparing it with the file, before any
 *     allocation is tried;
 *   - the peak resident set of the child (wait4's ru_maxrss) stays under
 *     RSS_LIMIT_MB.
 *
 * Well-formed inputs come from the fuzz seeds (tests/fuzz/corpus: a
 * converted .cflow and .vflow, GGUF, the archives of a Hugging Face folder
 * and of a llama2.c checkpoint); each bomb patches one field of one.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "hard.h"

#define RSS_LIMIT_MB 200

/* ---- building inputs -------------------------------------------------- */

typedef struct buf {
    unsigned char *p;
    size_t         n, cap;
} buf;

static void put(buf *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void put32(buf *b, uint32_t v) { put(b, &v, 4); }
static void put64(buf *b, uint64_t v) { put(b, &v, 8); }
static void putstr(buf *b, const char *s) { put64(b, strlen(s)); put(b, s, strlen(s)); }

static void wr32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void wr64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }

static unsigned char *load(const char *path, size_t *n)
{
    unsigned char *p = (unsigned char *)tu_read_file(path, n);
    assert_non_null(p);
    return p;
}

static void save(const char *path, const void *p, size_t n)
{
    assert_int_equal(tu_write_file(path, p, n), 0);
}

/* ---- running ---------------------------------------------------------- */

/* Run cflow with args under the caps; check the refusal. */
static void expect_refused(const char *file, const char *const *args)
{
    char cmd[8192], *cflow = (char *)tu_cflow();
    size_t o = 0;
    if (hard_sanitizers())
        o += (size_t)snprintf(cmd + o, sizeof cmd - o, "exec '%s'", cflow);
    else
        o += (size_t)snprintf(cmd + o, sizeof cmd - o, "ulimit -v 1048576; exec '%s'", cflow);
    for (int i = 0; args[i]; i++)
        o += (size_t)snprintf(cmd + o, sizeof cmd - o, " '%s'", args[i]);
    char *argv[] = { "/bin/sh", "-c", cmd, NULL };
    char *env[] = { "ASAN_OPTIONS=max_allocation_size_mb=256:allocator_may_return_null=1",
                    NULL };
    tu_proc p;
    assert_int_equal(tu_run_watch(&p, argv, env, 120, NULL, NULL, 100), 0);
    print_message("  %-34s -> %.*s", strrchr(file, '/') + 1,
                  (int)strcspn(p.err, "\n") + 1, p.err);
    assert_false(p.signaled);
    assert_int_equal(p.status, 1);
    assert_non_null(strstr(p.err, file));
    assert_null(strstr(p.err, "out of memory"));
    assert_null(strstr(p.err, "Sanitizer"));
    assert_null(strstr(p.err, "runtime error"));
    assert_true(tu_maxrss_kb > 0);
    assert_true(tu_maxrss_kb < RSS_LIMIT_MB * 1024L);
    tu_proc_free(&p);
}

/* ---- .cflow and .vflow ------------------------------------------------ */

typedef struct patch {
    const char *name;
    size_t      off;      /* byte offset from base */
    int         width;    /* 1, 2 (the low byte), 4 or 8 */
    uint64_t    value;
    int         table;    /* off counts from the layer table, not base */
} patch;

static void cflow_bombs(const char *seed_name, size_t base, const patch *ps, int n)
{
    size_t len;
    unsigned char *orig = load(hard_seed(seed_name), &len);
    for (int i = 0; i < n; i++) {
        unsigned char *b = malloc(len);
        assert_non_null(b);
        memcpy(b, orig, len);
        size_t off = base + ps[i].off;
        if (ps[i].table) {
            uint64_t t;
            memcpy(&t, b + base + 64, 8);     /* layer_table_offset */
            assert_true(t + 32 * 20 <= len);
            off = t + ps[i].off;
        }
        if (ps[i].width == 2)
            b[off] = (unsigned char)ps[i].value;
        else if (ps[i].width == 4)
            wr32(b + off, (uint32_t)ps[i].value);
        else if (ps[i].width == 8)
            wr64(b + off, ps[i].value);
        else
            b[off] = (unsigned char)ps[i].value;
        char name[128];
        snprintf(name, sizeof name, "%s", ps[i].name);
        const char *path = tu_tmp(name);
        save(path, b, len);
        free(b);
        expect_refused(path, HARD_ARGS("inspect", path));
        expect_refused(path, HARD_ARGS("run", "-m", path, "-n", "4", "-t", "1", "--no-log"));
    }
    free(orig);
}

/* GlobalHeader fields (fmt_layout.h) and the first layer-table entry. */
static const patch cflow_patches[] = {
    { "n-layers-2e24.cflow", 12, 4, 1u << 24, 0 },
    { "dim-2e30.cflow", 16, 4, 1u << 30, 0 },
    { "ffn-2e31.cflow", 20, 4, 0x80000000u, 0 },
    { "vocab-max.cflow", 28, 4, 0xFFFFFFFFu, 0 },
    { "max-seq-max.cflow", 32, 4, 0xFFFFFFFFu, 0 },
    { "head-dim-max.cflow", 40, 2, 0xFF, 0 },
    { "table-offset-2e62.cflow", 64, 8, 1ull << 62, 0 },
    { "meta-offset-2e62.cflow", 72, 8, 1ull << 62, 0 },
    { "slot1-length-2e40.cflow", 32 + 8, 8, 1ull << 40, 1 },
    { "slot1-tiles-max.cflow", 32 + 28, 4, 0xFFFFFFFFu, 1 },
    { "slot1-rows-max.cflow", 32 + 16, 4, 0xFFFFFFFFu, 1 },
    { "slot0-rows-max.cflow", 16, 4, 0xFFFFFFFFu, 1 },
    { "slot0-length-2e40.cflow", 8, 8, 1ull << 40, 1 },
};

static void test_cflow(void **state)
{
    (void)state;
    cflow_bombs("cflow/llama-q8_0.cflow", 0, cflow_patches,
                (int)(sizeof cflow_patches / sizeof *cflow_patches));
}

/* The metadata section: its key count (u64 at meta_offset). */
static void test_cflow_meta(void **state)
{
    (void)state;
    size_t len;
    unsigned char *b = load(hard_seed("cflow/llama-q8_0.cflow"), &len);
    uint64_t meta;
    memcpy(&meta, b + 72, 8);
    assert_true(meta + 8 <= len);
    patch ps[] = { { "meta-count-2e40.cflow", meta, 8, 1ull << 40, 0 },
                   { "meta-keylen-2e40.cflow", meta + 8, 8, 1ull << 40, 0 } };
    free(b);
    cflow_bombs("cflow/llama-q8_0.cflow", 0, ps, 2);
}

/* VFlowHeader fields, then the GlobalHeader inside the .vflow. */
static void test_vflow(void **state)
{
    (void)state;
    static const patch vp[] = {
        { "groups-max.vflow", 12, 4, 0xFFFFFFFFu, 0 },
        { "group-table-2e62.vflow", 16, 8, 1ull << 62, 0 },
        { "stream-length-2e40.vflow", 40, 8, 1ull << 40, 0 },
        { "bank-length-2e40.vflow", 56, 8, 1ull << 40, 0 },
    };
    cflow_bombs("cflow/moe-q4_0.vflow", 0, vp, 4);
    size_t len;
    unsigned char *b = load(hard_seed("cflow/moe-q4_0.vflow"), &len);
    uint64_t gh;
    memcpy(&gh, b + 24, 8);
    free(b);
    static const patch gp[] = {
        { "v-n-layers-2e24.vflow", 12, 4, 1u << 24, 0 },
        { "v-vocab-max.vflow", 28, 4, 0xFFFFFFFFu, 0 },
        { "v-experts-max.vflow", 42, 2, 0xFFFF, 0 },
    };
    cflow_bombs("cflow/moe-q4_0.vflow", gh, gp, 3);
}

/* ---- GGUF ------------------------------------------------------------- */

static void gguf_head(buf *b, uint64_t n_tensors, uint64_t n_kv)
{
    put(b, "GGUF", 4);
    put32(b, 3);
    put64(b, n_tensors);
    put64(b, n_kv);
}

static void gguf_case(const char *name, const buf *b)
{
    const char *path = tu_tmp(name);
    save(path, b->p, b->n);
    expect_refused(path, HARD_ARGS("convert", path, tu_tmp("out.cflow")));
    expect_refused(path, HARD_ARGS("tokenize", "-m", path, "hello"));
}

static void test_gguf(void **state)
{
    (void)state;
    buf b = { 0 };
    gguf_head(&b, 1ull << 40, 0);
    gguf_case("tensors-2e40.gguf", &b);

    b.n = 0;
    gguf_head(&b, 0, 1ull << 40);
    gguf_case("kv-2e40.gguf", &b);

    b.n = 0;
    gguf_head(&b, 0, 1);
    put64(&b, 1ull << 40);                       /* key length */
    put(&b, "general.name", 12);
    gguf_case("keylen-2e40.gguf", &b);

    b.n = 0;
    gguf_head(&b, 0, 1);
    putstr(&b, "general.name");
    put32(&b, 8);                                /* string */
    put64(&b, 1ull << 40);
    put(&b, "x", 1);
    gguf_case("strlen-2e40.gguf", &b);

    b.n = 0;
    gguf_head(&b, 0, 1);
    putstr(&b, "tokenizer.ggml.tokens");
    put32(&b, 9);                                /* array */
    put32(&b, 8);                                /* of strings */
    put64(&b, 1ull << 40);
    putstr(&b, "a");
    gguf_case("tokens-2e40.gguf", &b);

    b.n = 0;
    gguf_head(&b, 0, 1);
    putstr(&b, "tokenizer.ggml.scores");
    put32(&b, 9);
    put32(&b, 6);                                /* of f32 */
    put64(&b, 1ull << 62);                       /* x 4 bytes overflows */
    put32(&b, 0);
    gguf_case("scores-2e62.gguf", &b);

    b.n = 0;
    gguf_head(&b, 1, 0);
    putstr(&b, "token_embd.weight");
    put32(&b, 2);
    put64(&b, 1ull << 32);
    put64(&b, 1ull << 32);
    put32(&b, 0);                                /* f32 */
    put64(&b, 0);
    gguf_case("tensor-2e64-elements.gguf", &b);

    b.n = 0;
    gguf_head(&b, 1, 0);
    putstr(&b, "token_embd.weight");
    put32(&b, 0xFFFFFFFFu);                      /* n_dims */
    gguf_case("tensor-dims-max.gguf", &b);
    free(b.p);

    /* a real model whose vocabulary claims 2^31 tokens */
    size_t len;
    unsigned char *g = load(hard_seed("gguf/llama-q4_0.gguf"), &len);
    unsigned char *k = memmem(g, len, "llama.vocab_size", 16);
    if (k) {
        wr32(k + 16 + 4, 0x80000000u);
        const char *path = tu_tmp("vocab-size-2e31.gguf");
        save(path, g, len);
        expect_refused(path, HARD_ARGS("convert", path, tu_tmp("out.cflow")));
    }
    free(g);
}

/* ---- Hugging Face folder: safetensors header, config.json -------------- */

static const char *hf_folder(const char *name)
{
    const char *dir = tu_tmp(name);
    assert_int_equal(hard_unpack(hard_seed("hf/llama-f32.a"), dir, NULL, NULL), 0);
    return dir;
}

static void hf_replace(const char *dir, const char *file, const void *p, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    save(path, p, n);
}

/* expect: the file of the folder the message must name (NULL: the folder) */
static void hf_config(const char *name, const char *key, const char *value,
                      const char *expect)
{
    const char *dir = hf_folder(name);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t len;
    char *c = (char *)load(path, &len), *k = strstr(c, key);
    assert_non_null(k);
    char *v = strchr(k, ':') + 1, *end = v + strcspn(v, ",\n}");
    buf b = { 0 };
    put(&b, c, (size_t)(v - c));
    put(&b, " ", 1);
    put(&b, value, strlen(value));
    put(&b, end, strlen(end));
    hf_replace(dir, "config.json", b.p, b.n);
    free(b.p);
    free(c);
    snprintf(path, sizeof path, "%s/%s", dir, expect ? expect : "");
    expect_refused(expect ? path : dir, HARD_ARGS("convert", dir, tu_tmp("out.cflow")));
}

static void test_hf(void **state)
{
    (void)state;
    /* safetensors: the header length, and shapes beyond the data */
    const char *dir = hf_folder("st-header-2e40");
    buf b = { 0 };
    put64(&b, 1ull << 40);
    put(&b, "{}", 2);
    hf_replace(dir, "model.safetensors", b.p, b.n);
    expect_refused(dir, HARD_ARGS("convert", dir, tu_tmp("out.cflow")));

    dir = hf_folder("st-shape-2e60");
    const char *hdr = "{\"model.embed_tokens.weight\":{\"dtype\":\"F32\","
                      "\"shape\":[1073741824,1073741824],\"data_offsets\":[0,16]}}";
    b.n = 0;
    put64(&b, strlen(hdr));
    put(&b, hdr, strlen(hdr));
    put(&b, "0123456789abcdef", 16);
    hf_replace(dir, "model.safetensors", b.p, b.n);
    expect_refused(dir, HARD_ARGS("convert", dir, tu_tmp("out.cflow")));

    dir = hf_folder("st-offsets-2e62");
    hdr = "{\"model.norm.weight\":{\"dtype\":\"F32\",\"shape\":[16],"
          "\"data_offsets\":[0,4611686018427387904]}}";
    b.n = 0;
    put64(&b, strlen(hdr));
    put(&b, hdr, strlen(hdr));
    put(&b, "0123456789abcdef", 16);
    hf_replace(dir, "model.safetensors", b.p, b.n);
    expect_refused(dir, HARD_ARGS("convert", dir, tu_tmp("out.cflow")));
    free(b.p);

    /* config.json: geometry far beyond the tensors */
    hf_config("cfg-vocab", "\"vocab_size\"", "2147483647", NULL);
    hf_config("cfg-hidden", "\"hidden_size\"", "1073741824", NULL);
    hf_config("cfg-layers", "\"num_hidden_layers\"", "1000000000", NULL);
    hf_config("cfg-ffn", "\"intermediate_size\"", "4294967295", NULL);
    /* the context is over what .cflow holds: named by config.json, where it is */
    hf_config("cfg-ctx", "\"max_position_embeddings\"", "4294967295", "config.json");
}

/* ---- llama2.c checkpoint ---------------------------------------------- */

static void test_llama2c(void **state)
{
    (void)state;
    static const struct { const char *name; int field; int32_t value; } ps[] = {
        { "dim-2e30", 0, 1 << 30 },         { "hidden-max", 1, 0x7FFFFFFF },
        { "layers-2e30", 2, 1 << 30 },      { "heads-2e30", 3, 1 << 30 },
        { "kv-heads-2e30", 4, 1 << 30 },    { "vocab-max", 5, 0x7FFFFFFF },
        { "vocab-min-unshared", 5, -0x7FFFFFFF }, { "seq-max", 6, 0x7FFFFFFF },
        /* plausible sizes the file is too short for */
        { "vocab-2e20", 5, 1 << 20 },       { "dim-4096", 0, 4096 },
        { "seq-2e20", 6, 1 << 20 },
    };
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) {
        char model[4096], tok[4096];
        hard_l2c_patched(ps[i].name, ps[i].field, ps[i].value, model, tok);
        expect_refused(model, HARD_ARGS("convert", model, tu_tmp("out.cflow"), "--tokenizer", tok));
    }
}

/* ---- tokenizer files -------------------------------------------------- */

static void test_tokenizers(void **state)
{
    (void)state;
    /* tokenizer.bin: max_token_length, then (score, len, bytes) per token */
    size_t len;
    unsigned char *t = load(hard_seed("vocab/tokenizer.bin"), &len);
    unsigned char *c = malloc(len);
    assert_non_null(c);
    memcpy(c, t, len);
    wr32(c, 0x7FFFFFFF);
    const char *path = tu_tmp("maxlen-max.bin");
    save(path, c, len);
    expect_refused(path, HARD_ARGS("tokenize", "-m", path, "hello"));
    memcpy(c, t, len);
    wr32(c + 8, 0x7FFFFFFF);                     /* first token's length */
    path = tu_tmp("toklen-max.bin");
    save(path, c, len);
    expect_refused(path, HARD_ARGS("tokenize", "-m", path, "hello"));
    free(c);
    free(t);

    /* tokenizer.json: a token id of 2^31 - 1, in the vocabulary and in the
     * added tokens; then ids under the format's 2^24 cap, far past what
     * the file's entries can fill: each hole below would become a padding
     * token (the fuzzer's 34 KB tokenizer.json with one id of 15000001 made
     * 15 M of them and ran out of time and memory) */
#define TJ_VOCAB(ID) "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":" ID \
                     "},\"merges\":[\"a b\"]},\"added_tokens\":[]}"
#define TJ_ADDED(ID) "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[]}," \
                     "\"added_tokens\":[{\"id\":" ID ",\"content\":\"<s>\",\"special\":true}]}"
    static const struct { const char *name, *text; } tjs[] = {
        { "id-max-tokenizer.json", TJ_VOCAB("2147483647") },
        { "added-id-max-tokenizer.json", TJ_ADDED("2147483647") },
        { "id-sparse-tokenizer.json", TJ_VOCAB("15000001") },
        { "added-id-sparse-tokenizer.json", TJ_ADDED("16777215") },
    };
    for (size_t i = 0; i < sizeof tjs / sizeof tjs[0]; i++) {
        path = tu_tmp(tjs[i].name);
        save(path, tjs[i].text, strlen(tjs[i].text));
        expect_refused(path, HARD_ARGS("tokenize", "-m", path, "hello"));
    }

    const char *dir = tu_tmp("vocab-json");
    mkdir(dir, 0700);
    char p[4096];
    snprintf(p, sizeof p, "%s/vocab.json", dir);
    save(p, "{\"a\":0,\"b\":2147483647}", 22);
    snprintf(p, sizeof p, "%s/merges.txt", dir);
    save(p, "#version: 0.2\na b\n", 18);
    expect_refused(dir, HARD_ARGS("tokenize", "-m", dir, "hello"));
    snprintf(p, sizeof p, "%s/vocab.json", dir);
    save(p, "{\"a\":0,\"b\":15000001}", 20);
    expect_refused(dir, HARD_ARGS("tokenize", "-m", dir, "hello"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cflow),
        cmocka_unit_test(test_cflow_meta),
        cmocka_unit_test(test_vflow),
        cmocka_unit_test(test_gguf),
        cmocka_unit_test(test_hf),
        cmocka_unit_test(test_llama2c),
        cmocka_unit_test(test_tokenizers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
