/*
 * test_quant_mix.c — `cflow convert -q NAME` of a float model writes the
 * tensor types llama.cpp's mix names for it, with llama-quantize's very
 * blocks (issue 41, must show 4).
 *
 * tests/data/quant/mix.txt holds what llama-quantize (llama.cpp d32676d,
 * no importance matrix) wrote for two F32 GGUFs, under every name cflow's
 * -q takes from it: each tensor's GGML type and the FNV-1a 64 of its bytes
 * (tests/data/quant/README.md has the commands).  The F32 files are
 * regenerated here (`cflow synth --gguf -q f32`, deterministic, checked by
 * their recorded hash): tiny-llama-mix (8 layers, so that the "more bits"
 * layers of Q4_K_M and Q5_K_M vary; 8 query heads on 2 KV heads, llama.cpp's
 * n_gqa >= 4 rules; a 288-wide FFN, so ffn_down's rows take the fallbacks
 * of types whose block does not divide them) and tiny-mixtral256 (8
 * experts: the n_expert == 8 rules, and MXFP4_MOE's expert banks).  Each
 * name is converted through the real binary, and every matrix of the
 * .cflow is read back from its tiles as GGML blocks: its type and its
 * bytes' hash must be llama-quantize's.
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
#include <strings.h>

#include "format/cflow_format.h"
#include "testutil.h"

#define FNV0 0xcbf29ce484222325ull

/* Where a GGUF tensor lives in a .cflow: its layer-table entry, the slot
 * of its stream and of its shape, its matrix id, and whether it is a bank
 * of experts. */
typedef struct place {
    unsigned layer;
    int      stream_slot, slot, matrix, experts;
} place;

static int place_of(const char *name, unsigned n_layers, place *pl)
{
    static const struct { const char *sfx; int stream, slot, matrix, experts; } m[] = {
        { "attn_q", FMT_S_Q, FMT_S_Q, FMT_M_Q, 0 },
        { "attn_k", FMT_S_Q, FMT_S_K, FMT_M_K, 0 },
        { "attn_v", FMT_S_Q, FMT_S_V, FMT_M_V, 0 },
        { "attn_output", FMT_S_O, FMT_S_O, FMT_M_O, 0 },
        { "ffn_gate", FMT_S_GATE, FMT_S_GATE, FMT_M_GATE, 0 },
        { "ffn_up", FMT_S_GATE, FMT_S_UP, FMT_M_UP, 0 },
        { "ffn_down", FMT_S_DOWN, FMT_S_DOWN, FMT_M_DOWN, 0 },
        { "ffn_gate_exps", FMT_S_EXP_GATE, FMT_S_EXP_GATE, FMT_M_EXP_GATE, 1 },
        { "ffn_up_exps", FMT_S_EXP_GATE, FMT_S_EXP_UP, FMT_M_EXP_UP, 1 },
        { "ffn_down_exps", FMT_S_EXP_DOWN, FMT_S_EXP_DOWN, FMT_M_EXP_DOWN, 1 },
    };
    unsigned l;
    char sfx[64];
    memset(pl, 0, sizeof *pl);
    if (!strcmp(name, "token_embd.weight") || !strcmp(name, "output.weight")) {
        int emb = name[0] == 't';
        pl->layer = n_layers;
        pl->stream_slot = pl->slot = emb ? FMT_S_TOK_EMBD : FMT_S_OUTPUT;
        pl->matrix = emb ? FMT_M_TOK_EMBD : FMT_M_OUTPUT;
        return 0;
    }
    if (sscanf(name, "blk.%u.%63[a-z_].weight", &l, sfx) != 2)
        return -1;
    for (size_t i = 0; i < sizeof m / sizeof *m; i++)
        if (!strcmp(sfx, m[i].sfx)) {
            pl->layer = l;
            pl->stream_slot = m[i].stream;
            pl->slot = m[i].slot;
            pl->matrix = m[i].matrix;
            pl->experts = m[i].experts;
            return 0;
        }
    return -1;   /* a norm or a router: f32 vectors, not tiles */
}

static void hash_row(void *ctx, uint32_t r, const uint8_t *row, size_t n)
{
    (void)r;
    *(uint64_t *)ctx = tu_fnv64(*(uint64_t *)ctx, row, n);
}

/* The FNV-1a 64 of the matrix at pl read back as GGML blocks (a bank's
 * experts one after the other, as GGUF stores them); 0 when it cannot be. */
static uint64_t matrix_hash(const fmt_model *m, const place *pl, const fmt_matinfo *mi,
                            uint64_t h)
{
    unsigned ne = pl->experts ? fmt_model_hparams(m)->n_experts : 1;
    for (unsigned e = 0; e < ne; e++) {
        const fmt_stream *st = NULL, *gu = NULL, *dn = NULL;
        if (pl->experts) {
            if (fmt_model_expert(m, pl->layer, e, &gu, &dn, NULL, NULL))
                return 0;
            st = pl->stream_slot == FMT_S_EXP_DOWN ? dn : gu;
        } else {
            st = fmt_model_stream(m, pl->layer, pl->stream_slot);
        }
        if (tu_matrix_rows(st, pl->matrix, mi->rows, mi->cols, hash_row, &h))
            return 0;
    }
    return h;
}

/* Whether the cflow run p succeeded (tu_ok's report); p freed either way. */
static int ran_ok(tu_proc *p, const char *what)
{
    int ok = tu_ok(p, what);
    tu_proc_free(p);
    return ok;
}

/* Convert src with -q name and set every recorded tensor of (cas, name)
 * in lines against the result; returns the mismatches (printed). */
static unsigned check_name(const char *cas, const char *name, const char *src, char *lines)
{
    char out[4096], err[512];
    tu_proc p;
    snprintf(out, sizeof out, "%s", tu_tmp("mix.cflow"));
    assert_int_equal(tu_cflow_run(&p, "convert", "-q", name, src, out, (char *)NULL), 0);
    if (!ran_ok(&p, name))
        return 1;
    fmt_model *m = NULL;
    assert_int_equal(fmt_model_open(&m, out, err, sizeof err), 0);
    unsigned bad = 0, seen = 0;
    for (char *ln = lines; ln && *ln; ln = strchr(ln, '\n') ? strchr(ln, '\n') + 1 : NULL) {
        char c[16], q[16], tn[96], ty[16];
        unsigned long long fnv;
        place pl;
        if (sscanf(ln, "%15s %15s %95s %15s %llx", c, q, tn, ty, &fnv) != 5 ||
            strcmp(c, cas) || strcmp(q, name) ||
            place_of(tn, fmt_model_hparams(m)->n_layers, &pl))
            continue;
        seen++;
        const fmt_matinfo *mi = fmt_model_matinfo(m, pl.layer, pl.slot);
        const char *got = mi ? kern_type_name((enum kern_type)mi->type) : "absent";
        uint64_t h = mi ? matrix_hash(m, &pl, mi, FNV0) : 0;
        /* Phi-3's ffn_up is the fused gate-up: its gate rows, then its up
         * rows, which the .cflow holds as the gate and up matrices */
        const fmt_matinfo *mg = fmt_model_matinfo(m, pl.layer, FMT_S_GATE);
        if (mi && pl.matrix == FMT_M_UP &&
            !strcmp(fmt_model_hparams(m)->arch, "phi3") && mg) {
            place pg = pl;
            pg.slot = FMT_S_GATE;
            pg.matrix = FMT_M_GATE;
            h = matrix_hash(m, &pl, mi, matrix_hash(m, &pg, mg, FNV0));
        }
        if (strcmp(got, ty) || h != fnv) {
            fprintf(stderr, "%s -q %s: %s is %s (blocks %016llx), llama-quantize wrote %s "
                    "(%016llx)\n", cas, name, tn, got, (unsigned long long)h, ty, fnv);
            bad++;
        }
    }
    fmt_model_close(m);
    fprintf(stderr, "%s -q %s: %u matrices, %u as llama-quantize wrote them\n", cas, name,
            seen, seen - bad);
    assert_true(seen >= 8);   /* tiny-phi: 2 layers of 3 matrices, the embedding, the head */
    return bad;
}

/* `cflow synth --gguf -q name` of source cas's preset and seed against
 * every tensor recorded for (cas, name), by its GGUF name: the type and the
 * bytes llama-quantize wrote from the F32 the same seed draws (synth's
 * mix is convert's, fmt_mix.c; this reaches the matrices that the .cflow
 * check above cannot name: fused, latent-attention, shared-expert ones).
 * Returns the mismatches (printed). */
static unsigned check_synth(const char *cas, const char *name, const char *preset,
                            const char *seed, char *lines)
{
    char out[4096], err[512];
    tu_proc p;
    snprintf(out, sizeof out, "%s", tu_tmp("mix-synth.gguf"));
    assert_int_equal(tu_cflow_run(&p, "synth", "--gguf", "-q", name, "--vocab",
                                  tu_shared_file("models/stories260K-f32.gguf"), "--seed",
                                  seed, preset, out, (char *)NULL), 0);
    if (!ran_ok(&p, name))
        return 1;
    fmt_gguf *g = NULL;
    assert_int_equal(fmt_gguf_open(&g, out, err, sizeof err), 0);
    unsigned bad = 0, seen = 0;
    for (char *ln = lines; ln && *ln; ln = strchr(ln, '\n') ? strchr(ln, '\n') + 1 : NULL) {
        char c[16], q[16], tn[96], ty[16];
        unsigned long long fnv;
        if (sscanf(ln, "%15s %15s %95s %15s %llx", c, q, tn, ty, &fnv) != 5 ||
            strcmp(c, cas) || strcmp(q, name))
            continue;
        seen++;
        const fmt_tensor *t = fmt_gguf_find(g, tn);
        const char *got = t ? fmt_dtype_name(t->dtype) : "absent";
        uint64_t h = t ? tu_fnv64(FNV0, t->data, t->nbytes) : 0;
        if (strcasecmp(got, ty) || h != fnv) {
            fprintf(stderr, "%s synth -q %s: %s is %s (%016llx), llama-quantize wrote %s "
                    "(%016llx)\n", cas, name, tn, got, (unsigned long long)h, ty, fnv);
            bad++;
        }
    }
    assert_int_equal(seen, fmt_gguf_n_tensors(g));   /* every tensor, no more */
    fmt_gguf_close(g);
    return bad;
}

/* Every name recorded for source cas: the F32 regenerated and checked,
 * then each name converted and compared (and, with synth, synthesised). */
static void check_source_as(const char *cas, int synth)
{
    const char *dir = getenv("CFLOW_SRCDIR");
    char path[4096], src[4096];
    snprintf(path, sizeof path, "%s/tests/data/quant/mix.txt", dir ? dir : ".");
    char *txt = tu_slurp(path, NULL);
    char preset[64] = "", seed[32] = "";
    unsigned long long fnv = 0;
    for (char *ln = txt; ln && *ln; ln = strchr(ln, '\n') ? strchr(ln, '\n') + 1 : NULL) {
        char c[16];
        if (sscanf(ln, "source %15s %63s %31s %llx", c, preset, seed, &fnv) == 4 &&
            !strcmp(c, cas))
            break;
        fnv = 0;
    }
    assert_true(fnv != 0);
    snprintf(src, sizeof src, "%s", tu_tmp("mix-f32.gguf"));
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "synth", "--gguf", "-q", "f32", "--vocab",
                                  tu_shared_file("models/stories260K-f32.gguf"), "--seed",
                                  seed, preset, src, (char *)NULL), 0);
    assert_true(tu_ok(&p, "synth --gguf -q f32"));
    tu_proc_free(&p);
    size_t n;
    char *b = tu_slurp(src, &n);
    uint64_t h = tu_fnv64(FNV0, b, n);
    free(b);
    if (h != fnv)
        fprintf(stderr, "%s: the regenerated F32 GGUF is not the one llama-quantize read "
                "(fnv64 %016llx, recorded %016llx)\n", preset, (unsigned long long)h, fnv);
    assert_true(h == fnv);

    unsigned bad = 0, names = 0;
    char done[32][16];
    for (char *ln = txt; ln && *ln; ln = strchr(ln, '\n') ? strchr(ln, '\n') + 1 : NULL) {
        char c[16], q[16];
        if (sscanf(ln, "%15s %15s", c, q) != 2 || strcmp(c, cas))
            continue;
        int again = 0;
        for (unsigned i = 0; i < names; i++)
            again |= !strcmp(done[i], q);
        if (again || names == 32)
            continue;
        snprintf(done[names++], sizeof done[0], "%s", q);
        bad += check_name(cas, q, src, txt);
        if (synth)
            bad += check_synth(cas, q, preset, seed, txt);
    }
    free(txt);
    assert_true(names >= 16);
    assert_int_equal(bad, 0);
}

static void check_source(const char *cas)
{
    check_source_as(cas, 0);
}

static void test_dense_mixes(void **state)
{
    (void)state;
    check_source("mixd");
}

static void test_moe_mixes(void **state)
{
    (void)state;
    check_source("mixe");
}

/* Phi-3's fused attn_qkv (attn_v's rules) and gate-up (ffn_up's) */
static void test_fused_mixes(void **state)
{
    (void)state;
    check_source_as("mixp", 1);
}

/* DeepSeek-V2's latent attention (attn_q_a, attn_q_b, attn_kv_a_mqa,
 * attn_k_b, attn_v_b: no rule, the type's own) and shared experts
 * (_shexp: the FFN rules), with 8 routed experts */
static void test_mla_mixes(void **state)
{
    (void)state;
    check_source_as("mixk", 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense_mixes),
        cmocka_unit_test(test_moe_mixes),
        cmocka_unit_test(test_fused_mixes),
        cmocka_unit_test(test_mla_mixes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
