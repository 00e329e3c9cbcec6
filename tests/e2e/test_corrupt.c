/*
 * test_corrupt.c — a table of damaged model files, each fed to the real
 * binaries: every one must give exactly one error line naming the file,
 * exit status 1, no signal, and no allocation out of proportion to the
 * file (the child runs under a 1 GiB address-space limit, except in
 * sanitizer builds whose shadow memory needs more).
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

#include "testutil.h"

static char cflow_q4[4096], cflow_f32[4096];

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static void wr32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void wr64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

/* Run `cflow ARGS` on a damaged file and check the error contract. */
static void expect_clean_error(const char *what, const char *path, const char *cmd)
{
    char script[8192];
    const char *lim = getenv("CFLOW_SANITIZERS") ? "" : "ulimit -v 1048576; ";
    if (!strcmp(cmd, "inspect"))
        snprintf(script, sizeof script, "%sexec '%s' inspect '%s'", lim, tu_cflow(), path);
    else if (!strcmp(cmd, "run"))
        snprintf(script, sizeof script, "%sexec '%s' run -m '%s' -n 2 --temp 0", lim,
                 tu_cflow(), path);
    else if (!strcmp(cmd, "convert"))
        snprintf(script, sizeof script, "%sexec '%s' convert '%s' '%s.out.cflow'", lim,
                 tu_cflow(), path, path);
    else
        snprintf(script, sizeof script, "%sexec '%s' tokenize -m '%s' hello", lim, tu_cflow(),
                 path);
    char *argv[] = { "/bin/sh", "-c", script, NULL };
    tu_proc p;
    assert_int_equal(tu_run(&p, argv, NULL, 60), 0);
    int ok = !p.signaled && p.status == 1 && tu_count_lines(p.err) == 1 &&
             strstr(p.err, path) != NULL && p.out_len == 0;
    fprintf(stderr, "%-40s %-8s -> exit %d%s: %s", what, cmd, p.status,
            p.signaled ? " (signal)" : "", p.err_len ? p.err : "(no message)\n");
    assert_true(ok);
    tu_proc_free(&p);
}

static void write_variant(const char *name, const uint8_t *buf, size_t len, char *out)
{
    snprintf(out, 4096, "%s", tu_tmp(name));
    assert_int_equal(tu_write_file(out, buf, len), 0);
}

static int setup(void **state)
{
    (void)state;
    const char *src[2] = { "models/stories260K-q4_0.gguf", "models/stories260K.bin" };
    char *outs[2] = { cflow_q4, cflow_f32 };
    for (int i = 0; i < 2; i++) {
        snprintf(outs[i], 4096, "%s", tu_tmp(i ? "f32.cflow" : "q4.cflow"));
        tu_require(tu_shared(src[i]));
        char tok[4096];
        snprintf(tok, sizeof tok, "%s", tu_shared("models/tok512.bin"));
        char in[4096];
        snprintf(in, sizeof in, "%s", tu_shared(src[i]));
        char *argv[8] = { (char *)tu_cflow(), "convert", in, outs[i], NULL, NULL, NULL, NULL };
        if (i) {
            argv[2] = "--tokenizer";
            argv[3] = tok;
            argv[4] = in;
            argv[5] = outs[i];
        }
        tu_proc p;
        if (tu_run(&p, argv, NULL, 120) || p.status) {
            fprintf(stderr, "setup: convert failed: %s\n", p.err);
            return -1;
        }
        tu_proc_free(&p);
    }
    return 0;
}

/* Truncations at every section boundary of a .cflow (and one byte short). */
static void test_cflow_truncated(void **state)
{
    (void)state;
    size_t len;
    uint8_t *buf = (uint8_t *)tu_read_file(cflow_q4, &len);
    assert_non_null(buf);
    uint32_t n_layers;
    memcpy(&n_layers, buf + 12, 4);
    uint64_t ltab = rd64(buf + 64), meta = rd64(buf + 72);
    uint64_t cuts[512];
    int nc = 0;
    cuts[nc++] = 0;
    cuts[nc++] = 8;
    cuts[nc++] = 87;
    cuts[nc++] = 88;
    cuts[nc++] = ltab + 100;
    for (uint32_t e = 0; e <= n_layers && nc < 500; e++)
        for (int s = 0; s < 20 && nc < 500; s++) {
            const uint8_t *sl = buf + ltab + ((uint64_t)e * 20 + (unsigned)s) * 32;
            uint64_t off = rd64(sl), l = rd64(sl + 8);
            if (!sl[24])
                continue;
            cuts[nc++] = off;          /* section start */
            cuts[nc++] = off + l / 2;  /* inside it */
        }
    cuts[nc++] = meta;
    cuts[nc++] = meta + 8;
    cuts[nc++] = len - 1;
    int tested = 0;
    for (int i = 0; i < nc; i++) {
        if (cuts[i] >= len)
            continue;
        char path[4096], what[64];
        snprintf(what, sizeof what, "cflow truncated at %llu", (unsigned long long)cuts[i]);
        write_variant("trunc.cflow", buf, (size_t)cuts[i], path);
        expect_clean_error(what, path, i % 2 ? "run" : "inspect");
        tested++;
    }
    fprintf(stderr, "%d truncations of a %zu-byte .cflow refused cleanly\n", tested, len);
    assert_true(tested > 20);
    free(buf);
}

typedef struct patch {
    const char *what;
    size_t      off;     /* SIZE_MAX: computed */
    int         width;   /* 4 or 8 or 2 */
    uint64_t    value;
} patch;

static void test_cflow_patched(void **state)
{
    (void)state;
    size_t len;
    uint8_t *orig = (uint8_t *)tu_read_file(cflow_q4, &len);
    assert_non_null(orig);
    uint64_t ltab = rd64(orig + 64);
    /* first slot of layer 0 with a tiled matrix: Q (slot 1) */
    uint64_t q_off = rd64(orig + ltab + 1 * 32);
    const patch table[] = {
        { "bad magic", 0, 4, 0x4c4f4647u /* "GFOL" */ },
        { "version 6", 8, 2, 6 },
        { "version 4", 8, 2, 4 },
        { "header size 96", 10, 2, 96 },
        { "absurd layer count", 12, 4, 1000000 },
        { "zero hidden size", 16, 4, 0 },
        { "absurd vocabulary", 28, 4, 0x40000000u },
        { "absurd context", 32, 4, 0xFFFFFFFFu },
        { "kv heads > heads", 38, 2, 1000 },
        { "tile rows 64", 50, 2, 64 },
        { "layer table past the end", 64, 8, (uint64_t)1 << 40 },
        { "metadata past the end", 72, 8, (uint64_t)1 << 40 },
        { "delay past the layers", 80, 2, 0x0909 },
        { "unknown combine style", 82, 2, 0x0009 },
        { "slot offset past the end", (size_t)(ltab + 1 * 32), 8, (uint64_t)1 << 40 },
        { "slot length past the end", (size_t)(ltab + 1 * 32 + 8), 8, (uint64_t)1 << 40 },
        { "slot rows wrong", (size_t)(ltab + 1 * 32 + 16), 4, 12345 },
        { "tile count wrong", (size_t)(ltab + 1 * 32 + 28), 4, 999 },
        { "tile header row offset", (size_t)(q_off + 4), 4, 4096 },
        { "tile header size", (size_t)(q_off + 10), 2, 100 },
        { "metadata count absurd", SIZE_MAX, 8, (uint64_t)1 << 50 },
    };
    for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
        uint8_t *b = malloc(len);
        memcpy(b, orig, len);
        size_t off = table[i].off == SIZE_MAX ? (size_t)rd64(orig + 72) : table[i].off;
        if (table[i].width == 8)
            wr64(b + off, table[i].value);
        else if (table[i].width == 4)
            wr32(b + off, (uint32_t)table[i].value);
        else
            memcpy(b + off, &table[i].value, 2);
        char path[4096];
        write_variant("patched.cflow", b, len, path);
        expect_clean_error(table[i].what, path, "inspect");
        expect_clean_error(table[i].what, path, "run");
        free(b);
    }
    free(orig);
}

/* A NaN scale in a Q4_0 tile and a NaN weight in an F32 tile. */
static void test_cflow_nan(void **state)
{
    (void)state;
    const char *files[2] = { cflow_q4, cflow_f32 };
    for (int i = 0; i < 2; i++) {
        size_t len;
        uint8_t *b = (uint8_t *)tu_read_file(files[i], &len);
        assert_non_null(b);
        uint64_t ltab = rd64(b + 64);
        uint64_t q_off = rd64(b + ltab + 1 * 32);
        uint8_t type = b[ltab + 1 * 32 + 25];
        uint8_t *payload = b + q_off + 16;
        if (type == 0) { /* F32 weight */
            uint32_t nan = 0x7fc00000u;
            memcpy(payload + 4 * 5, &nan, 4);
        } else {         /* f16 scale, first of the tile */
            payload[0] = 0x00;
            payload[1] = 0x7e;
        }
        char path[4096];
        write_variant("nan.cflow", b, len, path);
        expect_clean_error(type == 0 ? "NaN weight in an F32 tile" : "NaN scale in a quantised tile",
                           path, "run");
        free(b);
    }
}

/* GGUF: truncations and patched headers, through convert and tokenize. */
static void test_gguf_damaged(void **state)
{
    (void)state;
    size_t len;
    const char *src = tu_shared("models/stories260K-q8_0.gguf");
    uint8_t *orig = (uint8_t *)tu_read_file(src, &len);
    assert_non_null(orig);
    size_t cuts[] = { 0, 3, 4, 8, 16, 24, 100, 1000, 5000, len / 2, len - 64 };
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        char path[4096], what[64];
        snprintf(what, sizeof what, "gguf truncated at %zu", cuts[i]);
        write_variant("trunc.gguf", orig, cuts[i], path);
        expect_clean_error(what, path, i % 2 ? "convert" : "tokenize");
    }
    const patch table[] = {
        { "gguf bad magic", 0, 4, 0x46554747u + 1 },
        { "gguf version 99", 4, 4, 99 },
        { "gguf absurd tensor count", 8, 8, (uint64_t)1 << 60 },
        { "gguf absurd kv count", 16, 8, (uint64_t)1 << 60 },
        { "gguf first key length absurd", 24, 8, (uint64_t)1 << 62 },
    };
    for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
        uint8_t *b = malloc(len);
        memcpy(b, orig, len);
        if (table[i].width == 8)
            wr64(b + table[i].off, table[i].value);
        else
            wr32(b + table[i].off, (uint32_t)table[i].value);
        char path[4096];
        write_variant("patched.gguf", b, len, path);
        expect_clean_error(table[i].what, path, "convert");
        expect_clean_error(table[i].what, path, "tokenize");
        free(b);
    }
    free(orig);
}

/* A missing file and a directory. */
static void test_not_a_model(void **state)
{
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s", tu_tmp("does-not-exist.cflow"));
    expect_clean_error("missing file", path, "run");
    uint8_t junk[4096];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (uint8_t)(i * 131 + 7);
    write_variant("junk.bin", junk, sizeof junk, path);
    expect_clean_error("junk bytes", path, "run");
    expect_clean_error("junk bytes", path, "convert");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cflow_truncated),
        cmocka_unit_test(test_cflow_patched),
        cmocka_unit_test(test_cflow_nan),
        cmocka_unit_test(test_gguf_damaged),
        cmocka_unit_test(test_not_a_model),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
