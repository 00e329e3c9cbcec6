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

#include "format/cflow_format.h"
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

/* Run `cflow ARGS` on a damaged file and check the error contract; the
 * one line must also hold each of the strings of names (NULL-terminated,
 * or NULL). */
static void expect_error_naming(const char *what, const char *path, const char *cmd,
                                const char *const *names)
{
    char script[8192];
    const char *lim = getenv("CFLOW_SANITIZERS") ? "" : "ulimit -v 1048576; ";
    if (!strcmp(cmd, "inspect"))
        snprintf(script, sizeof script, "%sexec '%s' inspect '%s'", lim, tu_cflow(), path);
    else if (!strcmp(cmd, "run"))   /* a GGUF converts into a private cache */
        snprintf(script, sizeof script, "%sXDG_CACHE_HOME='%s' exec '%s' run -m '%s' -n 2 "
                 "--temp 0", lim, tu_tmp("cache"), tu_cflow(), path);
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
    for (const char *const *n = names; ok && n && *n; n++)
        if (!strstr(p.err, *n)) {
            fprintf(stderr, "the error does not name '%s'\n", *n);
            ok = 0;
        }
    fprintf(stderr, "%-40s %-8s -> exit %d%s: %s", what, cmd, p.status,
            p.signaled ? " (signal)" : "", p.err_len ? p.err : "(no message)\n");
    assert_true(ok);
    tu_proc_free(&p);
}

static void expect_clean_error(const char *what, const char *path, const char *cmd)
{
    expect_error_naming(what, path, cmd, NULL);
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

/* ---- a damaged block of each GGML type (issue 41, must show 3) ----------
 * In a llama-quantize fixture (tests/data/quant) and in its .cflow: a scale
 * that is NaN or infinite, an E8M0 scale of 0xFF or one whose largest
 * weight overflows, a non-finite bf16 weight.  Each is refused by convert
 * and run (GGUF) or by inspect and run (.cflow) with one line naming the
 * file, the tensor and the field. */
typedef struct bad_block {
    const char *file;       /* under tests/data/quant */
    const char *tensor;     /* blk.0.attn_q.weight or output.weight */
    unsigned    off, width; /* the field in the tensor's first block */
    uint32_t    value;
    const char *field;      /* as the kernels' check names it */
} bad_block;

static const bad_block bad_blocks[] = {
    { "t64-q4_1.gguf", "blk.0.attn_q.weight", 0, 2, 0x7E00, "d" },
    { "t64-q4_1.gguf", "blk.0.attn_q.weight", 2, 2, 0x7C00, "m" },
    { "t64-q5_0.gguf", "blk.0.attn_q.weight", 0, 2, 0xFC00, "d" },
    { "t64-q5_1.gguf", "blk.0.attn_q.weight", 2, 2, 0x7E01, "m" },
    { "t64-iq4_nl.gguf", "blk.0.attn_q.weight", 0, 2, 0x7E00, "d" },
    { "t64-mxfp4_moe.gguf", "blk.0.attn_q.weight", 0, 1, 0xFF, "e8m0 scale" },
    /* 2^126 times a weight of 6: out of float's range */
    { "t64-mxfp4_moe.gguf", "blk.0.attn_q.weight", 0, 1, 0xFE, "e8m0 scale" },
    { "t64-bf16.gguf", "blk.0.attn_q.weight", 0, 2, 0x7FC0, "weight" },
    { "t64-bf16.gguf", "output.weight", 6, 2, 0xFF80, "weight" },
    { "t256-q2_k.gguf", "blk.0.attn_q.weight", 80, 2, 0x7E00, "d" },
    { "t256-q2_k.gguf", "blk.0.attn_q.weight", 82, 2, 0x7C00, "dmin" },
    { "t256-q3_k.gguf", "blk.0.attn_q.weight", 108, 2, 0x7E00, "d" },
    { "t256-q4_k.gguf", "blk.0.attn_q.weight", 0, 2, 0x7C00, "d" },
    { "t256-q4_k.gguf", "blk.0.attn_q.weight", 2, 2, 0x7E00, "dmin" },
    { "t256-q5_k.gguf", "blk.0.attn_q.weight", 0, 2, 0xFE00, "d" },
    { "t256-q5_k.gguf", "blk.0.attn_q.weight", 2, 2, 0x7C00, "dmin" },
    { "t256-q6_k.gguf", "blk.0.attn_q.weight", 208, 2, 0x7E00, "d" },
    { "t256-iq4_xs.gguf", "blk.0.attn_q.weight", 0, 2, 0x7C00, "d" },
    { "t256-q4_k_m.gguf", "output.weight", 208, 2, 0x7C00, "d" },
};

/* The tensor in a GGUF image buf[len]: its bytes' offset (found by its
 * first bytes, which must occur once), type and shape. */
static size_t tensor_offset(const char *path, const uint8_t *buf, size_t len,
                            const char *name, fmt_tensor *out)
{
    char err[512];
    fmt_gguf *g = NULL;
    assert_int_equal(fmt_gguf_open(&g, path, err, sizeof err), 0);
    const fmt_tensor *t = fmt_gguf_find(g, name);
    assert_non_null(t);
    *out = *t;
    size_t n = t->nbytes < 64 ? (size_t)t->nbytes : 64, at = SIZE_MAX;
    for (size_t i = 0; i + n <= len; i++)
        if (!memcmp(buf + i, t->data, n)) {
            assert_true(at == SIZE_MAX);   /* once only */
            at = i;
        }
    assert_true(at != SIZE_MAX);
    out->data = buf + at;
    out->name = NULL;
    fmt_gguf_close(g);
    return at;
}

/* tests/data/quant/name into out[4096]. */
static const char *quant_file(const char *name, char *out)
{
    const char *dir = getenv("CFLOW_SRCDIR");
    snprintf(out, 4096, "%s/tests/data/quant/%s", dir ? dir : ".", name);
    return out;
}

static void put_field(uint8_t *p, unsigned width, uint32_t v)
{
    for (unsigned k = 0; k < width; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

/* The .cflow's first tile of t (layer 0's attn_q or the output head):
 * where in the file each byte of the field of row 0's first block lies,
 * found by packing the tile from the GGUF's rows with that byte flipped. */
static void cflow_field(const char *cflow, const fmt_tensor *t, const bad_block *bb,
                        uint64_t at[4])
{
    char err[512];
    fmt_model *m = NULL;
    assert_int_equal(fmt_model_open(&m, cflow, err, sizeof err), 0);
    int out = !strcmp(bb->tensor, "output.weight");
    const fmt_stream *st = fmt_model_stream(m, out ? fmt_model_hparams(m)->n_layers : 0,
                                            out ? FMT_S_OUTPUT : FMT_S_Q);
    const fmt_tile *ti = &st->tiles[0];
    assert_int_equal(ti->matrix, out ? FMT_M_OUTPUT : FMT_M_Q);
    uint64_t size;
    const uint8_t *base = fmt_model_map(m, &size);
    size_t psz = kern_tile_payload_size((enum kern_type)ti->type, ti->rows, ti->cols);
    size_t rb = (size_t)fmt_dtype_size(t->dtype, t->ne[0]);
    uint8_t *rows = malloc(rb * ti->rows), *p0 = malloc(psz), *p1 = malloc(psz);
    enum kern_src src = kern_type_src((enum kern_type)ti->type);
    memcpy(rows, t->data, rb * ti->rows);
    assert_int_equal(kern_tile_pack((enum kern_type)ti->type, ti->rows, ti->cols, src, rows,
                                    rb, p0), 0);
    assert_memory_equal(p0, ti->payload, psz);      /* the file's tile, rebuilt */
    for (unsigned k = 0; k < bb->width; k++) {
        rows[bb->off + k] ^= 0x01;
        assert_int_equal(kern_tile_pack((enum kern_type)ti->type, ti->rows, ti->cols, src,
                                        rows, rb, p1), 0);
        rows[bb->off + k] ^= 0x01;
        size_t d = SIZE_MAX;
        for (size_t i = 0; i < psz; i++)
            if (p0[i] != p1[i]) {
                assert_true(d == SIZE_MAX);  /* a byte of the block is a byte of the tile */
                d = i;
            }
        assert_true(d != SIZE_MAX);
        at[k] = (uint64_t)((const uint8_t *)ti->payload - base) + d;
    }
    free(rows);
    free(p0);
    free(p1);
    fmt_model_close(m);
}

static void test_bad_blocks(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof bad_blocks / sizeof *bad_blocks; i++) {
        const bad_block *bb = &bad_blocks[i];
        char src[4096], path[4096], cflow[4096], what[96], field[48];
        quant_file(bb->file, src);
        snprintf(what, sizeof what, "%s %s %s=0x%x", bb->file, bb->tensor, bb->field,
                 bb->value);
        snprintf(field, sizeof field, "bad %s", bb->field);
        size_t len;
        uint8_t *orig = tu_slurp(src, &len), *b = malloc(len);
        fmt_tensor t;
        size_t off = tensor_offset(src, orig, len, bb->tensor, &t);

        /* in the GGUF: convert, and run it as it is (the model cache) */
        memcpy(b, orig, len);
        put_field(b + off + bb->off, bb->width, bb->value);
        write_variant("bad-block.gguf", b, len, path);
        const char *gguf_names[] = { bb->tensor, field, NULL };
        expect_error_naming(what, path, "convert", gguf_names);
        expect_error_naming(what, path, "run", gguf_names);

        /* in the .cflow of the intact file: inspect and run */
        snprintf(cflow, sizeof cflow, "%s", tu_tmp("bad-block.cflow"));
        tu_proc p;
        assert_int_equal(tu_cflow_run(&p, "convert", src, cflow, (char *)NULL), 0);
        assert_true(tu_ok(&p, "convert"));
        tu_proc_free(&p);
        uint64_t at[4];
        cflow_field(cflow, &t, bb, at);
        size_t clen;
        uint8_t *c = tu_slurp(cflow, &clen);
        for (unsigned k = 0; k < bb->width; k++)
            c[at[k]] = (uint8_t)(bb->value >> (8 * k));
        write_variant("bad-block-damaged.cflow", c, clen, path);
        const char *tile_names[] = { field, strcmp(bb->tensor, "output.weight") ?
                                     "layer 0 q," : "; output,", NULL };
        expect_error_naming(what, path, "inspect", tile_names);
        expect_error_naming(what, path, "run", tile_names);
        free(c);
        free(b);
        free(orig);
    }
}

/* A row that is not a whole number of its type's blocks: a GGUF tensor of
 * 128 columns of Q4_K (the reader's shape check), and a .cflow whose
 * 64-column matrix claims the 256-column q4_k. */
static void test_cut_blocks(void **state)
{
    (void)state;
    char src[4096], path[4096], cflow[4096];
    size_t len;
    quant_file("t256-q4_k.gguf", src);
    uint8_t *b = tu_slurp(src, &len);
    const char *nm = "blk.0.attn_q.weight";
    uint8_t *at = memmem(b, len, nm, strlen(nm));
    assert_non_null(at);
    uint8_t *ne0 = at + strlen(nm) + 4;        /* after the name: u32 ndim, u64 ne[0] */
    assert_int_equal(rd64(ne0), 256);
    wr64(ne0, 128);
    write_variant("cut.gguf", b, len, path);
    const char *gn[] = { nm, "128 columns are not a multiple of the Q4_K block", NULL };
    expect_error_naming("gguf Q4_K row of 128", path, "convert", gn);
    free(b);

    quant_file("t64-q5_0.gguf", src);
    snprintf(cflow, sizeof cflow, "%s", tu_tmp("cut.cflow"));
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "convert", src, cflow, (char *)NULL), 0);
    assert_true(tu_ok(&p, "convert"));
    tu_proc_free(&p);
    b = tu_slurp(cflow, &len);
    uint64_t ltab = rd64(b + 64);
    assert_int_equal(b[ltab + 1 * 32 + 25], KERN_Q5_0);       /* layer 0 slot Q's type */
    b[ltab + 1 * 32 + 25] = KERN_Q4_K;
    write_variant("cut-damaged.cflow", b, len, path);
    const char *cn[] = { "64 columns are not a multiple of q4_k's 256-column block", NULL };
    expect_error_naming("cflow q4_k slot of 64 columns", path, "inspect", cn);
    expect_error_naming("cflow q4_k slot of 64 columns", path, "run", cn);
    free(b);
}

/* A GGUF matrix of a GGML type cflow has no tile type for (IQ2_XXS, a
 * block of 66 bytes / 256: the tensor's bytes are sized to fit): convert
 * refuses it by tensor and type, requantising nothing. */
static void test_type_refused(void **state)
{
    (void)state;
    char src[4096], path[4096];
    size_t len;
    quant_file("t256-q2_k.gguf", src);
    uint8_t *b = tu_slurp(src, &len);
    const char *nm = "blk.0.ffn_up.weight";
    uint8_t *at = memmem(b, len, nm, strlen(nm));
    assert_non_null(at);
    uint8_t *ty = at + strlen(nm) + 4 + 2 * 8;  /* ndim, ne[0], ne[1], then the type */
    assert_int_equal(ty[0], FMT_DT_Q2_K);
    wr32(ty, FMT_DT_IQ2_XXS);                   /* 66 bytes a block: fits in 84 */
    write_variant("iq2.gguf", b, len, path);
    const char *n[] = { nm, "type IQ2_XXS, which cflow has no tile type for", NULL };
    expect_error_naming("gguf IQ2_XXS matrix", path, "convert", n);
    expect_error_naming("gguf IQ2_XXS matrix", path, "run", n);
    free(b);
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
        cmocka_unit_test(test_bad_blocks),
        cmocka_unit_test(test_cut_blocks),
        cmocka_unit_test(test_type_refused),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
