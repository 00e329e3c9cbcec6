/*
 * test_moe.c — MoE imports, per-layer geometry and malformed MoE headers.
 *
 *   - GGUF qwen3moe (per-head Q/K RMSNorm, softmax-all/top-k/renormalised
 *     routing, and the same weights without renormalisation), a
 *     Mixtral-style llama MoE (softmax over the top-k logits), a dense
 *     GGUF qwen3 and Hugging Face Qwen3ForCausalLM and Qwen3MoeForCausalLM
 *     (one tensor per expert) directories, converted by
 *     `cflow convert` and decoded by the engine, against a float64 numpy
 *     forward pass of the same weights (tests/data/moe/make_moe.py wrote
 *     the GGUF files and reference.json).
 *   - The gemma4-26b-a4b critical path from its geometry (report 6.2:
 *     1.50x on a sliding MoE layer, less for the model), and gemma4-mini,
 *     the same structure at d 256, synthesised and run.
 *   - Must show 6: malformed MoE, pipeline-native and per-layer headers are
 *     refused with one line naming the file.
 *   - `cflow inspect`: experts and routers, merge_interval and iterations,
 *     .vflow labelled as such.
 *
 * "The report" (with its section numbers) is the Pipeline-Native
 * Transformers report.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/engine.h"
#include "format/cflow_format.h"
#include "testutil.h"

static const char *srcdir(void)
{
    const char *s = getenv("CFLOW_SRCDIR");
    return s ? s : ".";
}

static void synth(const char *preset, const char *flag, char *out, size_t n)
{
    snprintf(out, n, "%s", tu_tmp(preset));
    strncat(out, flag ? ".vflow" : ".cflow", n - strlen(out) - 1);
    tu_proc p;
    int rc = flag ? tu_cflow_run(&p, "synth", flag, preset, out, (char *)NULL)
                  : tu_cflow_run(&p, "synth", preset, out, (char *)NULL);
    assert_int_equal(rc, 0);
    if (p.status != 0)
        fprintf(stderr, "synth %s: %s", preset, p.err);
    assert_int_equal(p.status, 0);
    tu_proc_free(&p);
}

static json_object *run_json(const char *a0, const char *a1, const char *a2,
                             const char *a3, const char *a4, const char *a5)
{
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, a0, a1, a2, a3, a4, a5, (char *)NULL), 0);
    if (p.status != 0)
        fprintf(stderr, "cflow %s: %s", a0, p.err);
    assert_int_equal(p.status, 0);
    json_object *o = json_tokener_parse(p.out);
    assert_non_null(o);
    tu_proc_free(&p);
    return o;
}

static int has_flag(json_object *root, const char *flag)
{
    json_object *f = json_object_object_get(json_object_object_get(root, "geometry"), "flags");
    for (size_t i = 0; f && i < json_object_array_length(f); i++)
        if (!strcmp(json_object_get_string(json_object_array_get_idx(f, i)), flag))
            return 1;
    return 0;
}

/* ---- GGUF MoE imports against numpy --------------------------------------- */
static void check_model(const char *name, json_object *ref)
{
    char gguf[4096], out[4096], err[512];
    size_t nl = strlen(name);   /* "-hf": a Hugging Face directory */
    int hf = nl > 3 && !strcmp(name + nl - 3, "-hf");
    snprintf(gguf, sizeof gguf, "%s/tests/data/moe/%s%s", srcdir(), name, hf ? "" : ".gguf");
    snprintf(out, sizeof out, "%s", tu_tmp(name));
    strncat(out, ".cflow", sizeof out - strlen(out) - 1);
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "convert", gguf, out, (char *)NULL), 0);
    if (p.status)
        fprintf(stderr, "convert %s: %s", name, p.err);
    assert_int_equal(p.status, 0);
    tu_proc_free(&p);

    /* the .cflow carries the Q/K norms and the routing convention */
    json_object *ins = run_json("inspect", "--json", out, NULL, NULL, NULL);
    int qwen = strncmp(name, "qwen3", 5) == 0;
    assert_int_equal(has_flag(ins, "qk_norm"), qwen);
    assert_int_equal(has_flag(ins, "rope_neox"), qwen);
    assert_int_equal(has_flag(ins, "moe_no_renorm"), strstr(name, "nonorm") != NULL);
    assert_string_equal(json_object_get_string(json_object_object_get(ins, "architecture")),
                        !qwen ? "llama" : strstr(name, "moe") ? "qwen3moe" : "qwen3");
    json_object_put(ins);

    eng_session *s = NULL;
    eng_opts o;
    eng_opts_default(&o);
    o.n_ctx = 64;
    o.kv_f16 = 0;       /* an f32 cache: the reference is float64 */
    assert_int_equal(eng_open(&s, out, &o, err, sizeof err), 0);
    const fmt_hparams *hp = eng_hparams(s);
    json_object *prompt = json_object_object_get(ref, "prompt");
    json_object *logits = json_object_object_get(ref, "logits");
    json_object *greedy = json_object_object_get(ref, "greedy");
    size_t np = json_object_array_length(prompt);
    double worst = 0.0;
    for (size_t i = 0; i < np; i++) {
        int32_t t = json_object_get_int(json_object_array_get_idx(prompt, i));
        assert_int_equal(eng_decode(s, t, err, sizeof err), 0);
        json_object *row = json_object_array_get_idx(logits, i);
        assert_int_equal(json_object_array_length(row), hp->vocab_size);
        const float *lg = eng_logits(s);
        double amax = 0.0, dmax = 0.0;
        for (uint32_t v = 0; v < hp->vocab_size; v++) {
            double r = json_object_get_double(json_object_array_get_idx(row, v));
            amax = fmax(amax, fabs(r));
            dmax = fmax(dmax, fabs(r - lg[v]));
        }
        worst = fmax(worst, dmax / amax);
    }
    /* greedy continuation: the engine's argmax fed back */
    size_t ng = json_object_array_length(greedy), same = 0;
    for (size_t i = 0; i < ng; i++) {
        const float *lg = eng_logits(s);
        int32_t best = 0;
        for (uint32_t v = 1; v < hp->vocab_size; v++)
            if (lg[v] > lg[best])
                best = (int32_t)v;
        if (best == json_object_get_int(json_object_array_get_idx(greedy, i)))
            same++;
        else
            break;
        assert_int_equal(eng_decode(s, best, err, sizeof err), 0);
    }
    fprintf(stderr, "%-16s max |logit - numpy| / max |numpy| = %.2e over %zu steps; "
            "greedy %zu/%zu tokens equal\n", name, worst, np, same, ng);
    assert_true(worst < 1e-4);
    assert_int_equal(same, ng);
    eng_close(s);

    /* the whole prompt through eng_prefill (batched where the engine
     * batches) ends on the same logits */
    assert_int_equal(eng_open(&s, out, &o, err, sizeof err), 0);
    hp = eng_hparams(s);
    int32_t ids[64];
    for (size_t i = 0; i < np; i++)
        ids[i] = json_object_get_int(json_object_array_get_idx(prompt, i));
    assert_int_equal(eng_prefill(s, ids, np, err, sizeof err), 0);
    json_object *row = json_object_array_get_idx(logits, np - 1);
    const float *lg = eng_logits(s);
    double amax = 0.0, dmax = 0.0;
    for (uint32_t v = 0; v < hp->vocab_size; v++) {
        double r = json_object_get_double(json_object_array_get_idx(row, v));
        amax = fmax(amax, fabs(r));
        dmax = fmax(dmax, fabs(r - lg[v]));
    }
    fprintf(stderr, "%-16s prefill: last logits within %.2e\n", name, dmax / amax);
    assert_true(dmax / amax < 1e-4);
    eng_close(s);
}

static void test_gguf_moe_numpy(void **state)
{
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/moe/reference.json", srcdir());
    json_object *ref = json_object_from_file(path);
    assert_non_null(ref);
    static const char *const names[] = { "qwen3moe-tiny", "qwen3moe-nonorm", "mixtral-tiny",
                                         "qwen3-tiny", "qwen3-tiny-hf", "qwen3moe-tiny-hf" };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        json_object *r = json_object_object_get(ref, names[i]);
        if (!r && strstr(names[i], "-hf")) {
            /* the same weights as the GGUF of that name (make_moe.py) */
            char base[64];
            snprintf(base, sizeof base, "%.*s", (int)(strlen(names[i]) - 3), names[i]);
            r = json_object_object_get(ref, base);
        }
        assert_non_null(r);
        check_model(names[i], r);
    }
    /* with and without renormalisation the weights differ: so do the logits */
    json_object *a = json_object_object_get(json_object_object_get(ref, "qwen3moe-tiny"), "logits");
    json_object *b = json_object_object_get(json_object_object_get(ref, "qwen3moe-nonorm"), "logits");
    double d = fabs(json_object_get_double(json_object_array_get_idx(json_object_array_get_idx(a, 3), 0)) -
                    json_object_get_double(json_object_array_get_idx(json_object_array_get_idx(b, 3), 0)));
    assert_true(d > 1e-6);
    json_object_put(ref);
}

/* A Qwen3-MoE directory with dense layers, or an expert missing, is refused
 * with one line. */
static void test_hf_qwen3moe_refused(void **state)
{
    (void)state;
    static const char *const files[] = { "config.json", "model.safetensors", "tokenizer.json" };
    static const struct { const char *from, *to, *needle; } cases[] = {
        { "\"decoder_sparse_step\": 1", "\"decoder_sparse_step\": 2", "decoder_sparse_step" },
        { "\"num_experts\": 8", "\"num_experts\": 9", "experts.8.gate_proj.weight' is missing" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        char dir[2048], src[4096], dst[4096];
        snprintf(dir, sizeof dir, "%s", tu_tmp("bad-qwen3moe-hf"));
        mkdir(dir, 0755);
        for (size_t i = 0; i < 3; i++) {
            size_t len;
            snprintf(src, sizeof src, "%s/tests/data/moe/qwen3moe-tiny-hf/%s", srcdir(), files[i]);
            snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
            char *b = tu_read_file(src, &len);
            assert_non_null(b);
            if (i == 0) {
                char *at = strstr(b, cases[k].from);
                assert_non_null(at);
                memcpy(at, cases[k].to, strlen(cases[k].to));
            }
            assert_int_equal(tu_write_file(dst, b, len), 0);
            free(b);
        }
        tu_proc p;
        assert_int_equal(tu_cflow_run(&p, "convert", dir, tu_tmp("bad.cflow"), (char *)NULL), 0);
        fprintf(stderr, "%-40s -> exit %d: %s", cases[k].to, p.status, p.err);
        assert_int_equal(p.status, 1);
        assert_int_equal(tu_count_lines(p.err), 1);
        assert_non_null(strstr(p.err, cases[k].needle));
        tu_proc_free(&p);
    }
}

/* ---- llama.cpp's greedy tokens on the same GGUF files --------------------- */
static size_t parse_ids(const char *line, int32_t *ids, size_t cap)
{
    size_t n = 0;
    const char *p = strchr(line, ':');
    char *end;
    for (p = p ? p + 1 : line; n < cap; p = end) {
        long v = strtol(p, &end, 10);
        if (end == p)
            break;
        ids[n++] = (int32_t)v;
    }
    return n;
}

static void test_gguf_moe_llamacpp(void **state)
{
    (void)state;
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/tests/data/moe/llamacpp.txt", srcdir());
    size_t len;
    char *txt = tu_read_file(path, &len);
    assert_non_null(txt);
    char model[64] = "", prompt[256] = "";
    int32_t pids[64], gids[64];
    size_t np = 0, ng = 0, compared = 0;
    for (char *line = strtok(txt, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strncmp(line, "model ", 6))
            snprintf(model, sizeof model, "%s", line + 6);
        else if (!strncmp(line, "prompt ", 7))
            snprintf(prompt, sizeof prompt, "%s", line + 7);
        else if (!strncmp(line, "prompt_ids:", 11))
            np = parse_ids(line, pids, 64);
        else if (!strncmp(line, "generated_ids:", 14))
            ng = parse_ids(line, gids, 64);
        if (strncmp(line, "generated_ids:", 14) || !strcmp(model, "qwen3moe-nonorm"))
            continue;
        char gguf[4096], out[4096];
        snprintf(gguf, sizeof gguf, "%s/tests/data/moe/%s.gguf", srcdir(), model);
        snprintf(out, sizeof out, "%s", tu_tmp(model));
        strncat(out, "-lc.cflow", sizeof out - strlen(out) - 1);
        tu_proc p;
        assert_int_equal(tu_cflow_run(&p, "convert", gguf, out, (char *)NULL), 0);
        assert_int_equal(p.status, 0);
        tu_proc_free(&p);
        /* llama.cpp's defaults: an f16 cache, which GGUF models get here */
        eng_session *s = NULL;
        eng_opts o;
        eng_opts_default(&o);
        o.n_threads = 2;
        assert_int_equal(eng_open(&s, out, &o, err, sizeof err), 0);
        int32_t ids[64];
        size_t n = 0;
        assert_int_equal(eng_tok_encode(eng_tokenizer(s), prompt, strlen(prompt), 1, 1, ids,
                                        64, &n), 0);
        assert_int_equal(n, np);
        assert_memory_equal(ids, pids, n * sizeof *ids);
        assert_int_equal(eng_prefill(s, ids, n, err, sizeof err), 0);
        uint32_t nv = eng_hparams(s)->vocab_size;
        size_t agree = 0;
        for (size_t k = 0; k < ng; k++) {
            const float *lg = eng_logits(s);
            int32_t best = 0;
            for (uint32_t v = 1; v < nv; v++)
                if (lg[v] > lg[best])
                    best = (int32_t)v;
            if (best != gids[k])
                break;
            agree++;
            assert_int_equal(eng_decode(s, best, err, sizeof err), 0);
        }
        eng_close(s);
        fprintf(stderr, "%-16s llama.cpp greedy: %zu/%zu tokens equal\n", model, agree, ng);
        assert_int_equal(agree, ng);
        compared++;
    }
    assert_int_equal(compared, 3);
    free(txt);
}

/* ---- Gemma-4 geometry ----------------------------------------------------- */
static void test_gemma4_critical_path(void **state)
{
    (void)state;
    json_object *o = run_json("inspect", "--critical-path", "--bytes-per-param", "0.5", "--json",
                              "gemma4-26b-a4b");
    json_object *ly = json_object_object_get(o, "layers");
    assert_int_equal(json_object_array_length(ly), 30);
    const double MB = 1e6;
    int sliding = 0, full = 0;
    for (size_t i = 0; i < 30; i++) {
        json_object *l = json_object_array_get_idx(ly, i);
        double a = json_object_get_double(json_object_object_get(l, "attn_bytes"));
        double dn = json_object_get_double(json_object_object_get(l, "dense_bytes"));
        double ex = json_object_get_double(json_object_object_get(l, "expert_bytes"));
        double r = json_object_get_double(json_object_object_get(l, "reduction"));
        if ((i + 1) % 6) {      /* sliding MoE layer: report eq. 6.1-6.3 */
            sliding++;
            assert_true(fabs(a / MB - 15.86) < 0.01);
            assert_true(fabs(dn / MB - 8.92) < 0.01);
            assert_true(fabs(ex / MB - 23.79) < 0.01);
            assert_true(fabs(r - 1.50) < 0.005);
            assert_string_equal(json_object_get_string(json_object_object_get(l, "binding")),
                                "attention");
        } else {                /* full attention, no experts: no gain */
            full++;
            assert_true(ex == 0.0);
            assert_true(a > 15.86 * MB);
            assert_true(fabs(r - 1.0) < 1e-9);
        }
    }
    assert_int_equal(sliding, 25);
    assert_int_equal(full, 5);
    double red = json_object_get_double(json_object_object_get(o, "reduction"));
    fprintf(stderr, "gemma4-26b-a4b: B_naive %.1f MiB, B_critical %.1f MiB, %.3fx "
            "(sliding MoE layers 1.50x)\n",
            json_object_get_double(json_object_object_get(o, "b_naive_mib")),
            json_object_get_double(json_object_object_get(o, "b_critical_mib")), red);
    assert_true(red > 1.0 && red < 1.5);
    json_object_put(o);

    /* too large to write: refused with one line that says what to do */
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "synth", "gemma4-26b-a4b", tu_tmp("g4.cflow"),
                                  (char *)NULL), 0);
    assert_int_equal(p.status, 1);
    assert_int_equal(tu_count_lines(p.err), 1);
    assert_non_null(strstr(p.err, "too large"));
    tu_proc_free(&p);
}

static void test_gemma4_mini_runs(void **state)
{
    (void)state;
    char path[4096], vpath[4096], err[512];
    synth("gemma4-mini", NULL, path, sizeof path);
    synth("gemma4-mini", "--vflow", vpath, sizeof vpath);

    /* the file's critical path (tiles at Q4_0) shows the same shape */
    json_object *o = run_json("inspect", "--critical-path", "--bytes-per-param", "0.5", "--json",
                              path);
    json_object *l0 = json_object_array_get_idx(json_object_object_get(o, "layers"), 0);
    assert_true(fabs(json_object_get_double(json_object_object_get(l0, "reduction")) - 1.5) <
                0.005);
    json_object_put(o);

    /* per-layer geometry as the file records it */
    o = run_json("inspect", "--json", path, NULL, NULL, NULL);
    json_object *lg = json_object_object_get(o, "layer_geometry");
    assert_int_equal(json_object_array_length(lg), 6);
    json_object *g5 = json_object_array_get_idx(lg, 5), *g0 = json_object_array_get_idx(lg, 0);
    assert_int_equal(json_object_get_int(json_object_object_get(g5, "head_dim")), 128);
    assert_int_equal(json_object_get_int(json_object_object_get(g5, "rope_dims")), 32);
    assert_true(json_object_get_boolean(json_object_object_get(g5, "kv_shared")));
    assert_false(json_object_get_boolean(json_object_object_get(g5, "experts")));
    assert_int_equal(json_object_get_int(json_object_object_get(g0, "sliding_window")), 16);
    assert_int_equal(json_object_array_length(json_object_object_get(o, "moe_layers")), 5);
    json_object_put(o);

    /* .vflow vertical groups (report 3.4.1): the 5 sliding layers, then
     * the full-attention layer alone */
    size_t vlen;
    uint8_t *vb = (uint8_t *)tu_read_file(vpath, &vlen);
    assert_non_null(vb);
    uint32_t ng, g[4];
    uint64_t gt;
    memcpy(&ng, vb + 12, 4);
    memcpy(&gt, vb + 16, 8);
    assert_int_equal(ng, 2);
    memcpy(&g[0], vb + gt, 8);
    memcpy(&g[2], vb + gt + 40, 8);
    assert_int_equal(g[0], 0);
    assert_int_equal(g[1], 5);
    assert_int_equal(g[2], 5);
    assert_int_equal(g[3], 1);
    free(vb);

    /* it runs past the window; .vflow and every expert fetch mode give the
     * same tokens; expert bytes are k/E of the banks of the layers that
     * have experts (the full-attention layer has none) */
    int32_t toks[4][40];
    for (int f = 0; f < 4; f++) {
        eng_session *s = NULL;
        eng_opts op;
        eng_opts_default(&op);
        op.n_ctx = 64;
        op.expert_io = f == 2 ? ENG_XIO_SYNC : f == 3 ? ENG_XIO_STAGED : ENG_XIO_MMAP;
        assert_int_equal(eng_open(&s, f == 1 ? vpath : path, &op, err, sizeof err), 0);
        const fmt_hparams *hp = eng_hparams(s);
        int32_t t = 1;
        for (int i = 0; i < 40; i++) {
            assert_int_equal(eng_decode(s, t, err, sizeof err), 0);
            const float *lg2 = eng_logits(s);
            int32_t best = 0;
            for (uint32_t v = 0; v < hp->vocab_size; v++) {
                assert_true(isfinite(lg2[v]));
                if (lg2[v] > lg2[best])
                    best = (int32_t)v;
            }
            toks[f][i] = t = best;
        }
        eng_stats st;
        eng_get_stats(s, &st);
        assert_true(st.expert_bytes ==
                    st.expert_tokens * (st.expert_bank_bytes / hp->n_experts * hp->top_k));
        eng_close(s);
    }
    for (int f = 1; f < 4; f++)
        assert_memory_equal(toks[0], toks[f], sizeof toks[0]);
}

/* A context shift turns each layer's cached keys by its own geometry: in a
 * one-layer model (gemma4-mini-full1: head dim 128 against the header's
 * 64, RoPE on 32 dims at base 1e6, K = V) the shifted cache must give a
 * fresh session's logits (tests/hard/test_soak.c has the argument). */
static void test_gemma4_shift(void **state)
{
    (void)state;
    char path[4096], err[512];
    synth("gemma4-mini-full1", NULL, path, sizeof path);
    eng_session *a = NULL, *b = NULL;
    eng_opts o;
    eng_opts_default(&o);
    o.n_ctx = 64;
    assert_int_equal(eng_open(&a, path, &o, err, sizeof err), 0);
    assert_int_equal(eng_open(&b, path, &o, err, sizeof err), 0);
    const uint32_t N = 40, keep = 6, drop = 20;
    int32_t toks[40], fresh[40];
    for (uint32_t i = 0; i < N; i++)
        toks[i] = (int32_t)(3 + (i * 37) % 500);
    for (uint32_t i = 0; i < N; i++)
        assert_int_equal(eng_decode(a, toks[i], err, sizeof err), 0);
    assert_int_equal(eng_shift(a, keep, drop, err, sizeof err), 0);
    size_t n = 0;
    for (uint32_t i = 0; i < N; i++)
        if (i < keep || i >= keep + drop)
            fresh[n++] = toks[i];
    for (size_t i = 0; i < n; i++)
        assert_int_equal(eng_decode(b, fresh[i], err, sizeof err), 0);
    assert_int_equal(eng_decode(a, 7, err, sizeof err), 0);
    assert_int_equal(eng_decode(b, 7, err, sizeof err), 0);
    const float *la = eng_logits(a), *lb = eng_logits(b);
    double amax = 0.0, dmax = 0.0;
    for (uint32_t v = 0; v < eng_hparams(a)->vocab_size; v++) {
        amax = fmax(amax, fabs(lb[v]));
        dmax = fmax(dmax, fabs(la[v] - lb[v]));
    }
    fprintf(stderr, "gemma4-mini-full1 shift: logits within %.2e of a fresh session\n",
            dmax / amax);
    assert_true(dmax / amax < 1e-4);
    eng_close(a);
    eng_close(b);
}

/* ---- must show 6 ---------------------------------------------------------- */
static uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static void expect_refused(const char *what, const uint8_t *buf, size_t len,
                           const char *needle, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s", tu_tmp(name));
    assert_int_equal(tu_write_file(path, buf, len), 0);
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "inspect", path, (char *)NULL), 0);
    fprintf(stderr, "%-40s -> exit %d: %s", what, p.status, p.err);
    assert_false(p.signaled);
    assert_int_equal(p.status, 1);
    assert_int_equal(tu_count_lines(p.err), 1);
    assert_non_null(strstr(p.err, path));
    assert_non_null(strstr(p.err, needle));
    tu_proc_free(&p);
}

/* base: offset of the GlobalHeader (0, or inside a .vflow) */
static void header_cases(const uint8_t *orig, size_t len, size_t base, const char *name)
{
    uint8_t *b = malloc(len);
    uint16_t v16;
    assert_non_null(b);

    memcpy(b, orig, len);
    v16 = 0;
    memcpy(b + base + 44, &v16, 2);
    expect_refused("top-k 0 with experts", b, len, "top-k 0", name);

    memcpy(b, orig, len);
    v16 = 255;
    memcpy(b + base + 42, &v16, 2);
    expect_refused("255 experts", b, len, "experts", name);

    memcpy(b, orig, len);
    v16 = 17;
    memcpy(b + base + 44, &v16, 2);
    expect_refused("top-k > experts", b, len, "top-k", name);

    memcpy(b, orig, len);
    b[base + 80] = 200;
    expect_refused("dense delay past the layers", b, len, "dense_delay", name);

    memcpy(b, orig, len);
    b[base + 81] = 6;
    expect_refused("expert delay = the layer count", b, len, "expert_delay", name);

    memcpy(b, orig, len);
    b[base + 82] = 2; /* AsyncExperts takes no dense delay */
    expect_refused("dense delay under AsyncExperts", b, len, "dense delay", name);

    memcpy(b, orig, len);
    b[base + 49] |= 0x80;
    expect_refused("unknown feature_flags2 bit", b, len, "feature_flags2", name);

    memcpy(b, orig, len);
    b[base + 83] |= 0x80; /* qk_norm without q_norm/k_norm slots */
    expect_refused("qk_norm without its vectors", b, len, "q_norm", name);

    memcpy(b, orig, len);
    b[base + 49] &= (uint8_t)~0x02; /* records present, flag cleared */
    expect_refused("layer_geom cleared, records left", b, len, "layer_geom", name);

    /* the layer geometry record of layer 5 (full attention) */
    uint64_t ltab = rd64(orig + base + 64);
    uint64_t rec = rd64(orig + ltab + (5 * 20 + 18) * 32);
    struct { const char *what; size_t at; uint16_t v; const char *needle; } lg[] = {
        { "layer heads 0", 0, 0, "head counts" },
        { "layer kv heads > heads", 2, 9, "head counts" },
        { "layer head dim odd", 4, 127, "head dimension" },
        { "layer rope dims > head dim", 6, 130, "rope_dims" },
        { "layer flags unknown", 16, 0x40, "unknown layer flags" },
        { "layer window past the context", 12, 0xFFFF, "sliding window" },
        { "layer reserved byte", 24, 1, "reserved" },
    };
    for (size_t i = 0; i < sizeof lg / sizeof *lg; i++) {
        memcpy(b, orig, len);
        memcpy(b + rec + lg[i].at, &lg[i].v, 2);
        expect_refused(lg[i].what, b, len, lg[i].needle, name);
    }
    memcpy(b, orig, len);
    b[rec + 16] = 0x01; /* K = V kept, experts claimed: the slots disagree */
    expect_refused("layer claims experts it lacks", b, len, "layer 5", name);

    /* an expert offset outside the bank, and one inside but misaligned */
    uint64_t table = rd64(orig + ltab + 10 * 32);
    memcpy(b, orig, len);
    uint64_t bad = rd64(orig + table + 16) + ((uint64_t)1 << 24);
    memcpy(b + table + 16, &bad, 8);
    expect_refused("expert offset outside the bank", b, len, "outside", name);
    memcpy(b, orig, len);
    bad = rd64(orig + table + 16 * 3) - 64;
    memcpy(b + table + 16 * 3, &bad, 8);
    expect_refused("expert offset into its neighbour", b, len, "expert 3", name);
    free(b);
}

static void test_malformed_headers(void **state)
{
    (void)state;
    char path[4096], vpath[4096];
    synth("gemma4-mini", NULL, path, sizeof path);
    synth("gemma4-mini", "--vflow", vpath, sizeof vpath);
    size_t len, vlen;
    uint8_t *c = (uint8_t *)tu_read_file(path, &len);
    uint8_t *v = (uint8_t *)tu_read_file(vpath, &vlen);
    assert_non_null(c);
    assert_non_null(v);
    header_cases(c, len, 0, "bad.cflow");
    header_cases(v, vlen, rd64(v + 24), "bad.vflow");

    /* .vflow: its groups must cover the model's layers */
    uint8_t *b = malloc(vlen);
    memcpy(b, v, vlen);
    uint64_t gt = rd64(v + 16);
    uint32_t n = 2;     /* the full-attention group claims two layers */
    memcpy(b + gt + 40 + 4, &n, 4);
    expect_refused(".vflow groups cover 7 of 6 layers", b, vlen, "groups cover", "bad.vflow");
    memcpy(b, v, vlen);
    n = 4;              /* the second group starts inside the first */
    memcpy(b + gt + 40, &n, 4);
    expect_refused(".vflow groups overlap", b, vlen, "group 1 is malformed", "bad.vflow");
    free(b);
    free(c);
    free(v);

    /* pipeline-native metadata: merge interval, iterations */
    static const struct { const char *preset, *key; } meta[] = {
        { "report-arch1", "cflow.merge_interval" },
        { "report-arch5", "cflow.iterations" },
    };
    for (size_t i = 0; i < 2; i++) {
        synth(meta[i].preset, NULL, path, sizeof path);
        uint8_t *m = (uint8_t *)tu_read_file(path, &len);
        assert_non_null(m);
        /* the key's u32 value follows key, type (4 bytes) */
        size_t kl = strlen(meta[i].key);
        uint8_t *at = memmem(m, len, meta[i].key, kl);
        assert_non_null(at);
        uint32_t big = 1000;
        memcpy(at + kl + 4, &big, 4);
        expect_refused(meta[i].key, m, len, meta[i].key, "bad-meta.cflow");
        free(m);
    }
}

/* ---- inspect -------------------------------------------------------------- */
static void test_inspect(void **state)
{
    (void)state;
    char path[4096], vpath[4096];
    synth("tiny-moe", NULL, path, sizeof path);
    synth("tiny-moe", "--vflow", vpath, sizeof vpath);
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "inspect", path, (char *)NULL), 0);
    assert_int_equal(p.status, 0);
    assert_non_null(strstr(p.out, "format:        .cflow v5"));
    assert_non_null(strstr(p.out, "layer 0: router 4x64 f32; 4 experts (top-2)"));
    assert_non_null(strstr(p.out, "  expert   3: offset "));
    tu_proc_free(&p);
    assert_int_equal(tu_cflow_run(&p, "inspect", vpath, (char *)NULL), 0);
    assert_int_equal(p.status, 0);
    assert_non_null(strstr(p.out, "format:        .vflow v1"));
    tu_proc_free(&p);

    json_object *o = run_json("inspect", "--json", vpath, NULL, NULL, NULL);
    assert_string_equal(json_object_get_string(json_object_object_get(o, "container")), "vflow");
    assert_int_equal(json_object_get_int(json_object_object_get(o, "version")), 5);
    json_object *moe = json_object_object_get(o, "moe_layers");
    assert_int_equal(json_object_array_length(moe), 4);
    json_object *l0 = json_object_array_get_idx(moe, 0);
    json_object *ex = json_object_object_get(l0, "experts");
    assert_int_equal(json_object_array_length(ex), 4);
    /* experts lie in the bank, in order, without overlap */
    int64_t bo = json_object_get_int64(json_object_object_get(l0, "bank_offset"));
    int64_t bl = json_object_get_int64(json_object_object_get(l0, "bank_bytes")), end = bo;
    for (size_t e = 0; e < 4; e++) {
        json_object *x = json_object_array_get_idx(ex, e);
        int64_t off = json_object_get_int64(json_object_object_get(x, "offset"));
        int64_t n = json_object_get_int64(json_object_object_get(x, "length"));
        assert_true(off >= end && off + n <= bo + bl);
        end = off + n;
    }
    json_object_put(o);

    static const struct { const char *preset, *key; int want; } sched[] = {
        { "report-arch1", "merge_interval", 3 }, { "report-arch5", "iterations", 3 },
    };
    for (size_t i = 0; i < 2; i++) {
        synth(sched[i].preset, NULL, path, sizeof path);
        o = run_json("inspect", "--json", path, NULL, NULL, NULL);
        json_object *geo = json_object_object_get(o, "geometry");
        assert_int_equal(json_object_get_int(json_object_object_get(geo, sched[i].key)),
                         sched[i].want);
        assert_string_equal(json_object_get_string(json_object_object_get(o, "container")),
                            "cflow");
        json_object_put(o);
        assert_int_equal(tu_cflow_run(&p, "inspect", path, (char *)NULL), 0);
        char want[64];
        snprintf(want, sizeof want, "%s %d", sched[i].key, sched[i].want);
        assert_non_null(strstr(p.out, want));
        tu_proc_free(&p);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gguf_moe_numpy),
        cmocka_unit_test(test_gguf_moe_llamacpp),
        cmocka_unit_test(test_hf_qwen3moe_refused),
        cmocka_unit_test(test_gemma4_critical_path),
        cmocka_unit_test(test_gemma4_mini_runs),
        cmocka_unit_test(test_gemma4_shift),
        cmocka_unit_test(test_malformed_headers),
        cmocka_unit_test(test_inspect),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
