/*
 * test_pipeline.c — the pipeline-native architectures end to end: synthetic
 * models from `cflow synth`, their critical paths from `cflow inspect`, MoE
 * decoding and malformed MoE / schedule headers.
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

#include "engine/engine.h"
#include "testutil.h"

static void synth(const char *preset, char *out)
{
    tu_proc p;
    snprintf(out, 4096, "%s", tu_tmp(preset));
    strcat(out, ".cflow");
    assert_int_equal(tu_cflow_run(&p, "synth", preset, out, (char *)NULL), 0);
    if (p.status)
        fprintf(stderr, "synth %s: %s", preset, p.err);
    assert_int_equal(p.status, 0);
    tu_proc_free(&p);
}

/* Must show 2: the report's B_naive / B_critical at 0.5 byte per weight. */
static void test_report_critical_paths(void **state)
{
    (void)state;
    static const struct { const char *preset; double naive, crit; } want[] = {
        { "report-arch1", 9.00, 9.00 },
        { "report-arch2_4_combined", 9.00, 4.50 },
        { "report-arch2_4_sync", 9.00, 4.50 },
        { "report-arch3", 9.00, 9.00 },
        { "report-arch4", 9.00, 9.00 },
        /* the report's 14.06 sums all streams of the two blocks serially
         * over three iterations (4.69 x 3); eq. 4.23 takes each pass's
         * longest stream: 6 x 1.50 (data/README.md) */
        { "report-arch5", 9.00, 9.00 },
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        char path[4096];
        synth(want[i].preset, path);
        tu_proc p;
        assert_int_equal(tu_cflow_run(&p, "inspect", "--critical-path", "--bytes-per-param", "0.5",
                               "--json", path, (char *)NULL), 0);
        assert_int_equal(p.status, 0);
        json_object *o = json_tokener_parse(p.out);
        assert_non_null(o);
        double n = json_object_get_double(json_object_object_get(o, "b_naive_mib"));
        double c = json_object_get_double(json_object_object_get(o, "b_critical_mib"));
        fprintf(stderr, "%-26s B_naive %.2f MiB, B_critical %.2f MiB\n", want[i].preset, n, c);
        assert_true(fabs(n - want[i].naive) < 0.005);
        assert_true(fabs(c - want[i].crit) < 0.005);
        json_object_put(o);
        tu_proc_free(&p);
        /* the text form prints the same totals */
        assert_int_equal(tu_cflow_run(&p, "inspect", "--critical-path", "--bytes-per-param", "0.5",
                               path, (char *)NULL), 0);
        char line[64];
        snprintf(line, sizeof line, "B_critical %.2f MiB/token", want[i].crit);
        assert_non_null(strstr(p.out, line));
        tu_proc_free(&p);
        remove(path);
    }
}

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static void expect_refused(const char *what, const uint8_t *buf, size_t len,
                           const char *needle)
{
    char path[4096];
    snprintf(path, sizeof path, "%s", tu_tmp("bad-moe.cflow"));
    assert_int_equal(tu_write_file(path, buf, len), 0);
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "inspect", path, (char *)NULL), 0);
    fprintf(stderr, "%-34s -> exit %d: %s", what, p.status, p.err);
    assert_false(p.signaled);
    assert_int_equal(p.status, 1);
    assert_int_equal(tu_count_lines(p.err), 1);
    assert_non_null(strstr(p.err, path));
    assert_non_null(strstr(p.err, needle));
    tu_proc_free(&p);
}

/* Must show 6: malformed MoE and pipeline-native headers are refused. */
static void test_malformed_moe(void **state)
{
    (void)state;
    char path[4096];
    synth("tiny-moe", path);
    size_t len;
    uint8_t *orig = (uint8_t *)tu_read_file(path, &len), *b = malloc(len);
    assert_non_null(orig);
    uint16_t v16;

    memcpy(b, orig, len);
    v16 = 9; /* top-k 9 of 4 experts */
    memcpy(b + 44, &v16, 2);
    expect_refused("top-k > experts", b, len, "top-k");

    memcpy(b, orig, len);
    b[80] = 4; /* dense_delay 4 with 4 layers */
    expect_refused("dense delay past the layers", b, len, "dense_delay");

    memcpy(b, orig, len);
    b[81] = 7;
    expect_refused("expert delay past the layers", b, len, "expert_delay");

    memcpy(b, orig, len);
    b[82] = 3; /* DecoupledStreams takes no delays */
    expect_refused("delays on a style without them", b, len, "no delays");

    /* an expert offset outside the bank: layer 0, expert 1 */
    uint64_t ltab = rd64(orig + 64);
    uint64_t table = rd64(orig + ltab + 10 * 32);
    memcpy(b, orig, len);
    uint64_t bad = rd64(orig + table + 16) + (1u << 20);
    memcpy(b + table + 16, &bad, 8);
    expect_refused("expert offset outside the bank", b, len, "outside");

    memcpy(b, orig, len);
    bad = rd64(orig + table + 8) + 64; /* expert 0 longer than its tiles */
    memcpy(b + table + 8, &bad, 8);
    expect_refused("expert length wrong", b, len, "expert 0");
    free(b);
    free(orig);
}

/* Must show 3: a token reads exactly the top-k experts, k/E of the bank of
 * every MoE layer; and every schedule decodes to finite logits, the same
 * tokens on 1 and 2 threads. */
static void test_expert_bytes(void **state)
{
    (void)state;
    char path[4096];
    synth("tiny-moe", path);
    for (int threads = 1; threads <= 2; threads++) {
        eng_session *s = NULL;
        char err[512];
        eng_opts o;
        eng_opts_default(&o);
        o.n_ctx = 64;
        o.n_threads = threads;
        assert_int_equal(eng_open(&s, path, &o, err, sizeof err), 0);
        const fmt_hparams *hp = eng_hparams(s);
        assert_int_equal(hp->n_experts, 4);
        assert_int_equal(hp->top_k, 2);
        int32_t tok = 1;
        for (int i = 0; i < 12; i++) {
            assert_int_equal(eng_decode(s, tok, err, sizeof err), 0);
            const float *lg = eng_logits(s);
            int32_t best = 0;
            for (uint32_t v = 0; v < hp->vocab_size; v++) {
                assert_true(isfinite(lg[v]));
                if (lg[v] > lg[best])
                    best = (int32_t)v;
            }
            tok = best;
        }
        eng_stats st;
        eng_get_stats(s, &st);
        assert_int_equal(st.expert_tokens, 12);
        /* experts of one layer are the same size: k/E of the bank exactly */
        uint64_t want = st.expert_tokens * st.expert_bank_bytes / hp->n_experts * hp->top_k;
        fprintf(stderr, "%d thread(s): expert bytes read %llu over %llu tokens = %llu per "
                "token; bank %llu bytes, k/E of it %llu\n", threads,
                (unsigned long long)st.expert_bytes, (unsigned long long)st.expert_tokens,
                (unsigned long long)(st.expert_bytes / st.expert_tokens),
                (unsigned long long)st.expert_bank_bytes,
                (unsigned long long)(st.expert_bank_bytes / hp->n_experts * hp->top_k));
        assert_true(st.expert_bytes == want);
        eng_close(s);
    }
}

/* Every combine style runs; neither the thread count nor the .vflow
 * layout changes its tokens. */
static void test_styles_decode(void **state)
{
    (void)state;
    static const char *presets[] = { "tiny-moe", "report-arch1", "report-arch2_4_combined",
                                     "report-arch2_4_sync", "report-arch3",
                                     "report-arch4", "report-arch5", "tiny-mixtral" };
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        char path[4096];
        synth(presets[i], path);
        char *outs[2];
        for (int t = 1; t <= 2; t++) {
            tu_proc p;
            char tb[8];
            snprintf(tb, sizeof tb, "%d", t);
            assert_int_equal(tu_cflow_run(&p, "run", "-m", path, "-p", "the cat", "-n", "12",
                                   "--temp", "0", "-t", tb, "--db", "/nonexistent/x.db",
                                   (char *)NULL), 0);
            if (p.status)
                fprintf(stderr, "%s: %s\n", presets[i], p.err);
            assert_int_equal(p.status, 0);
            outs[t - 1] = strdup(p.out);
            tu_proc_free(&p);
        }
        /* the same model laid out stage-major (.vflow) gives the same tokens */
        char vpath[4096];
        snprintf(vpath, sizeof vpath, "%s", tu_tmp("model.vflow"));
        tu_proc p;
        assert_int_equal(tu_cflow_run(&p, "synth", "--vflow", presets[i], vpath, (char *)NULL), 0);
        assert_int_equal(p.status, 0);
        tu_proc_free(&p);
        assert_int_equal(tu_cflow_run(&p, "run", "-m", vpath, "-p", "the cat", "-n", "12",
                               "--temp", "0", "--db", "/nonexistent/x.db", (char *)NULL), 0);
        assert_int_equal(p.status, 0);
        fprintf(stderr, "%-26s decodes; 1 and 2 threads agree: %s; .vflow agrees: %s\n",
                presets[i], strcmp(outs[0], outs[1]) ? "NO" : "yes",
                strcmp(outs[0], p.out) ? "NO" : "yes");
        assert_string_equal(outs[0], outs[1]);
        assert_string_equal(outs[0], p.out);
        tu_proc_free(&p);
        remove(vpath);
        free(outs[0]);
        free(outs[1]);
        remove(path);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_report_critical_paths),
        cmocka_unit_test(test_malformed_moe),
        cmocka_unit_test(test_expert_bytes),
        cmocka_unit_test(test_styles_decode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
