/*
 * test_convert_hash.c — `cflow convert` and `cflow synth` keep writing the
 * bytes they wrote before the writers were made to stream (issue 17).
 *
 * tests/data/convert/hashes.txt holds, per line, the sha256 of one output
 * and the command that made it; each is run again through the real binary
 * into a scratch folder and the output hashed with sha256sum.
 *
 * And `cflow synth --gguf -q q8_0` (issue 17): every weight of the Q8_0
 * GGUF's matrices, dequantised from its blocks (f16 d, 32 int8), equals
 * the weight its `cflow convert` stores in Q8_0 tiles, so the blocks are
 * copied bit for bit (a requantisation would move scales and quants).
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

#include "format/cflow_format.h"
#include "testutil.h"

#define MAX_ARGS 24

/* One argument of the table with its @S/, @D/ and @T/ prefix expanded. */
static char *expand(const char *a)
{
    const char *src = getenv("CFLOW_SRCDIR");
    char buf[4096];
    if (!strncmp(a, "@S/", 3))
        snprintf(buf, sizeof buf, "%s", tu_shared(a + 3));
    else if (!strncmp(a, "@D/", 3))
        snprintf(buf, sizeof buf, "%s/tests/data/%s", src ? src : ".", a + 3);
    else if (!strncmp(a, "@T/", 3))
        snprintf(buf, sizeof buf, "%s", tu_tmp(a + 3));
    else
        snprintf(buf, sizeof buf, "%s", a);
    return strdup(buf);
}

/* The sha256 of path in hex (65 bytes with the NUL), through sha256sum. */
static int sha256_of(const char *path, char hex[65])
{
    char *argv[] = { "/usr/bin/env", "sha256sum", (char *)path, NULL };
    tu_proc p;
    if (tu_run(&p, argv, NULL, 120) != 0 || !tu_ok(&p, "sha256sum") ||
        p.out_len < 64) {
        tu_proc_free(&p);
        return -1;
    }
    memcpy(hex, p.out, 64);
    hex[64] = '\0';
    tu_proc_free(&p);
    return 0;
}

/* Run one table line; 1 when its output has the recorded hash. */
static int check_line(char *line, int lineno)
{
    char *tok[MAX_ARGS + 2], *save = NULL;
    int n = 0;
    for (char *t = strtok_r(line, " \t\n", &save); t && n < MAX_ARGS + 2;
         t = strtok_r(NULL, " \t\n", &save))
        tok[n++] = t;
    if (n < 4 || strlen(tok[0]) != 64) {
        fprintf(stderr, "hashes.txt:%d: malformed line\n", lineno);
        return 0;
    }
    char *argv[MAX_ARGS + 2];
    int a = 0;
    argv[a++] = (char *)tu_cflow();
    for (int i = 2; i < n && a < MAX_ARGS; i++)
        argv[a++] = expand(tok[i]);
    char *out = strdup(tu_tmp(tok[1]));
    argv[a++] = out;
    argv[a] = NULL;
    tu_proc p;
    int ok = tu_run(&p, argv, NULL, 300) == 0 && tu_ok(&p, tok[2]);
    tu_proc_free(&p);
    char hex[65];
    if (ok && sha256_of(out, hex) == 0) {
        ok = strcmp(hex, tok[0]) == 0;
        if (!ok)
            fprintf(stderr, "hashes.txt:%d: %s %s: sha256 %s, recorded %s\n",
                    lineno, tok[2], tok[1], hex, tok[0]);
    } else {
        ok = 0;
    }
    for (int i = 1; i < a; i++)
        free(argv[i]);
    return ok;
}

static void test_outputs_keep_their_bytes(void **state)
{
    (void)state;
    const char *src = getenv("CFLOW_SRCDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/convert/hashes.txt", src ? src : ".");
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[2048];
    int lineno = 0, checked = 0, bad = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (line[0] == '#' || line[0] == '\n')
            continue;
        checked++;
        bad += !check_line(line, lineno);
    }
    fclose(f);
    assert_true(checked >= 10);
    assert_int_equal(bad, 0);
}

static void run_ok(const char *what, char *const argv[])
{
    tu_proc p;
    assert_int_equal(tu_run(&p, argv, NULL, 120), 0);
    int ok = tu_ok(&p, what);
    tu_proc_free(&p);
    assert_true(ok);
}

/* Every tile of stream st against the GGUF tensors names[matrix] (a %u
 * for the layer); experts e >= 0 index the third dimension.  Returns the
 * weights compared. */
static uint64_t same_weights(const fmt_gguf *g, const fmt_stream *st, unsigned layer,
                             int e, const char *const names[FMT_NMATRIX])
{
    uint64_t n = 0;
    float tile[128 * 256], row[4096];
    for (uint32_t i = 0; i < st->n_tiles; i++) {
        const fmt_tile *t = &st->tiles[i];
        char name[96];
        assert_int_equal(t->type, KERN_Q8_0);
        assert_non_null(names[t->matrix]);
        snprintf(name, sizeof name, names[t->matrix], layer);
        const fmt_tensor *src = fmt_gguf_find(g, name);
        assert_non_null(src);
        assert_int_equal(src->dtype, FMT_DT_Q8_0);
        uint64_t cols = src->ne[0], rb = cols / 32 * 34;
        assert_true(cols <= 4096);
        const uint8_t *base = (const uint8_t *)src->data +
                              (e >= 0 ? (uint64_t)e * src->ne[1] * rb : 0);
        kern_tile_unpack(KERN_Q8_0, t->rows, t->cols, t->payload, tile, t->cols);
        for (unsigned r = 0; r < t->rows; r++) {
            assert_int_equal(fmt_dequant(FMT_DT_Q8_0, base + (t->row0 + r) * rb, row,
                                         cols), 0);
            for (unsigned c = 0; c < t->cols; c++)
                if (tile[r * t->cols + c] != row[t->col0 + c]) {
                    fprintf(stderr, "%s row %u col %u: tile %g, GGUF %g\n", name,
                            t->row0 + r, t->col0 + c, tile[r * t->cols + c],
                            row[t->col0 + c]);
                    fail();
                }
            n += t->cols;
        }
    }
    return n;
}

static void test_q8_0_gguf_copied_bit_for_bit(void **state)
{
    (void)state;
    char gguf[4096], model[4096], err[512];
    snprintf(gguf, sizeof gguf, "%s", tu_tmp("q8.gguf"));
    snprintf(model, sizeof model, "%s", tu_tmp("q8.cflow"));
    char *synth[] = { (char *)tu_cflow(), "synth", "--gguf", "-q", "q8_0", "--seed", "3",
                      "tiny-mixtral", gguf, NULL };
    run_ok("synth --gguf -q q8_0", synth);
    char *conv[] = { (char *)tu_cflow(), "convert", gguf, model, NULL };
    run_ok("convert", conv);

    fmt_gguf *g = NULL;
    fmt_model *m = NULL;
    assert_int_equal(fmt_gguf_open(&g, gguf, err, sizeof err), 0);
    assert_int_equal(fmt_model_open(&m, model, err, sizeof err), 0);
    const fmt_kv *kv = fmt_gguf_kv(g);
    uint32_t ft = 0;
    assert_int_equal(fmt_kv_get_u32(kv, "general.file_type", &ft), 0);
    assert_int_equal(ft, 7); /* llama.cpp's MOSTLY_Q8_0 */
    static const char *const layer_names[FMT_NMATRIX] = {
        [FMT_M_Q] = "blk.%u.attn_q.weight", [FMT_M_K] = "blk.%u.attn_k.weight",
        [FMT_M_V] = "blk.%u.attn_v.weight", [FMT_M_O] = "blk.%u.attn_output.weight",
        [FMT_M_EXP_GATE] = "blk.%u.ffn_gate_exps.weight",
        [FMT_M_EXP_UP] = "blk.%u.ffn_up_exps.weight",
        [FMT_M_EXP_DOWN] = "blk.%u.ffn_down_exps.weight",
        [FMT_M_TOK_EMBD] = "token_embd.weight", [FMT_M_OUTPUT] = "output.weight",
    };
    const fmt_hparams *hp = fmt_model_hparams(m);
    uint64_t n = 0;
    n += same_weights(g, fmt_model_stream(m, hp->n_layers, FMT_S_TOK_EMBD), 0, -1,
                      layer_names);
    n += same_weights(g, fmt_model_stream(m, hp->n_layers, FMT_S_OUTPUT), 0, -1,
                      layer_names);
    for (unsigned l = 0; l < hp->n_layers; l++) {
        n += same_weights(g, fmt_model_stream(m, l, FMT_S_Q), l, -1, layer_names);
        n += same_weights(g, fmt_model_stream(m, l, FMT_S_O), l, -1, layer_names);
        for (unsigned e = 0; e < hp->n_experts; e++) {
            const fmt_stream *gu, *dn;
            uint64_t off, len;
            assert_int_equal(fmt_model_expert(m, l, e, &gu, &dn, &off, &len), 0);
            n += same_weights(g, gu, l, (int)e, layer_names);
            n += same_weights(g, dn, l, (int)e, layer_names);
        }
    }
    fprintf(stderr, "q8_0 GGUF: %llu weights identical after convert\n",
            (unsigned long long)n);
    assert_true(n > 100000);
    fmt_model_close(m);
    fmt_gguf_close(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outputs_keep_their_bytes),
        cmocka_unit_test(test_q8_0_gguf_copied_bit_for_bit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
