/*
 * test_bytes.c — weight bytes per layer and the critical-path model in the
 * run log, through the real `cflow`, on a synthetic MoE model
 * (`cflow synth tiny-moe`: 4 layers, DelayedSum, 4 experts, top-2):
 *
 *   1. the logged per-layer expert bytes per token are k/E of that layer's
 *      expert bank, counted from the model's own expert streams (libfmt,
 *      not the engine), the attention bytes its QKV and output streams,
 *      the dense bytes its gate/up and down streams (none before the
 *      dense delay, where DelayedSum has no input to give the FFN);
 *   2. the logged critical-path figures (per run and per layer) equal
 *      what `cflow inspect --critical-path --json` prints;
 *   3. `cflow run` prints the per-token summary line; `runs show`,
 *      `runs compare` and `runs export --csv|--json` carry the figures;
 *      (and 1-3 once more on tiny-moe at llama.cpp's q4_k_m mix: matrices
 *      of several GGML types, each counted by its real bytes);
 *   4. a log of schema version 2 (tests/prof/runs-v2.sql) migrates to the
 *      current version, keeps its rows, and takes new runs with bytes;
 *   5. after a batched prefill (stories260K), the per-token figures are the
 *      decode tokens' (each streams the whole model), not lowered by the
 *      prompt.
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

#include <json-c/json.h>
#include <sqlite3.h>

#include "format/cflow_format.h"
#include "prof/prof.h"
#include "testutil.h"

#define MIB (1024.0 * 1024.0)

static char moe[4096];

/* cflow with a fixed read bandwidth, so no run measures it */
#define cflow(p, ...) \
    assert_int_equal(tu_cflow_env(p, (char *const[]){ "CFLOW_READ_BW_GBS=10", NULL }, \
                                  __VA_ARGS__), 0)

#define expect_ok(p, what) assert_true(tu_ok(p, what))


/* A REAL (NAN when NULL or absent). */
static double q_real(const char *db, const char *sql)
{
    sqlite3 *d;
    sqlite3_stmt *st;
    double v = NAN;
    assert_int_equal(sqlite3_open_v2(db, &d, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    if (sqlite3_prepare_v2(d, sql, -1, &st, NULL) != SQLITE_OK) {
        fprintf(stderr, "%s: %s: %s\n", db, sql, sqlite3_errmsg(d));
        fail();
    }
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
        v = sqlite3_column_double(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(d);
    return v;
}


static json_object *member(json_object *o, const char *key)
{
    json_object *v = NULL;
    if (!json_object_object_get_ex(o, key, &v)) {
        fprintf(stderr, "no member '%s' in %s\n", key, json_object_to_json_string(o));
        fail();
    }
    return v;
}

static double jnum(json_object *o, const char *key)
{
    return json_object_get_double(member(o, key));
}

static int close_to(double a, double b)
{
    return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b)) + 1e-9;
}

/* The line of s that starts with prefix, copied into out. */
static int line_starting(const char *s, const char *prefix, char *out, size_t n)
{
    for (const char *l = s; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (!strncmp(l, prefix, strlen(prefix))) {
            size_t len = strcspn(l, "\n");
            snprintf(out, n, "%.*s", (int)len, l);
            return 1;
        }
    }
    return 0;
}

static int setup(void **state)
{
    (void)state;
    tu_proc p;
    snprintf(moe, sizeof moe, "%s", tu_tmp("tiny-moe.cflow"));
    cflow(&p, "synth", "tiny-moe", moe, NULL);
    expect_ok(&p, "synth tiny-moe");
    tu_proc_free(&p);
    return 0;
}

/* What the model's own streams say a token reads, per layer. */
typedef struct want {
    unsigned n_layers, n_experts, top_k, dense_delay;
    uint64_t attn[16], dense[16], bank[16];
} want;

static void model_streams(want *w)
{
    fmt_model *m;
    char err[512];
    memset(w, 0, sizeof *w);
    if (fmt_model_open(&m, moe, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        fail();
    }
    const fmt_hparams *hp = fmt_model_hparams(m);
    w->n_layers = hp->n_layers;
    w->n_experts = hp->n_experts;
    w->top_k = hp->top_k;
    w->dense_delay = hp->dense_delay;
    assert_int_equal(hp->combine_style, FMT_COMBINE_DELAYED_SUM);
    assert_true(w->n_layers >= 2 && w->n_layers <= 16);
    assert_true(w->n_experts >= 2 && w->top_k >= 1 && w->top_k < w->n_experts);
    for (unsigned l = 0; l < w->n_layers; l++) {
        const fmt_stream *q = fmt_model_stream(m, l, FMT_S_Q), *o = fmt_model_stream(m, l, FMT_S_O);
        const fmt_stream *g = fmt_model_stream(m, l, FMT_S_GATE), *d = fmt_model_stream(m, l, FMT_S_DOWN);
        assert_non_null(q);
        assert_non_null(o);
        assert_non_null(g);
        assert_non_null(d);
        w->attn[l] = q->length + o->length;
        w->dense[l] = g->length + d->length;
        uint64_t first = 0;
        for (unsigned e = 0; e < w->n_experts; e++) {
            const fmt_stream *gu, *dn;
            assert_int_equal(fmt_model_expert(m, l, e, &gu, &dn, NULL, NULL), 0);
            uint64_t len = gu->length + dn->length;
            /* experts of one size: k of them are k/E of the bank whichever
             * the router picks */
            if (e == 0)
                first = len;
            assert_true(len == first && len > 0);
            w->bank[l] += len;
        }
        assert_int_equal((w->bank[l] * w->top_k) % w->n_experts, 0);
    }
    fmt_model_close(m);
}

/* ------------------------------------------------------------ 1-3 */

/* `runs export --csv`: the byte and expert columns in the header, run 1's
 * b_critical_bytes cell (found by the header's name) is b_crit, and the
 * row has the header's columns. */
static void check_csv_export(const char *db, double b_crit)
{
    tu_proc p;
    cflow(&p, "runs", "export", "--csv", "--db", db, NULL);
    expect_ok(&p, "runs export --csv");
    assert_non_null(strstr(p.out, ",cpu-migrations,attention_bytes_per_token,ffn_bytes_per_token,"
                                  "experts_bytes_per_token,streamed_bytes_per_token,"
                                  "b_naive_bytes,b_critical_bytes,expert_io_asked,expert_ahead,"
                                  "expert_cache_bytes,expert_hits,"));
    assert_non_null(strstr(p.out, ",overlapped_bound_pct\n"));
    /* run 1's b_critical_bytes column is its critical path: the column
     * whose header name is b_critical_bytes, counted in the header */
    const char *hdr = p.out, *row = strchr(p.out, '\n') + 1;
    const char *end = strchr(row, '\n');
    assert_non_null(end);
    int col = 0;
    for (const char *c = hdr; c < strstr(hdr, "b_critical_bytes"); c++)
        col += *c == ',';
    const char *cell = row;
    for (int k = 0; k < col; k++)
        cell = strchr(cell, ',') + 1;
    assert_true(cell < end);
    assert_true(close_to(strtod(cell, NULL), b_crit));
    /* every row has the header's columns */
    int nh = 0, nr = 0;
    for (const char *c = hdr; c < row; c++)
        nh += *c == ',';
    for (const char *c = row; c < end; c++)
        nr += *c == ',';
    assert_int_equal(nr, nh);
    tu_proc_free(&p);
}

/* cflow run's "bytes/token" line: streamed bytes a token per stream (want:
 * attention, dense, experts) and the critical path's totals, in MiB. */
static void check_summary(const char *summary, const double want[3], double b_crit,
                          double b_naive, unsigned n_layers)
{
    double all, a, d, e, c, nv;
    const char *s = strstr(summary, "streamed ");
    assert_non_null(s);
    assert_int_equal(sscanf(s, "streamed %lf MiB (attention %lf, dense %lf, experts %lf);"
                               " critical path %lf MiB of naive %lf MiB",
                            &all, &a, &d, &e, &c, &nv), 6);
    assert_true(fabs(a - want[0] / MIB) < 0.0006);
    assert_true(fabs(d - want[1] / MIB) < 0.0006);
    assert_true(fabs(e - want[2] / MIB) < 0.0006);
    assert_true(fabs(all - (want[0] + want[1] + want[2]) / MIB) < 0.0006);
    assert_true(fabs(c - b_crit / MIB) < 0.0006);
    assert_true(fabs(nv - b_naive / MIB) < 0.0006);
    char bline[128];
    snprintf(bline, sizeof bline, "of %u layers", n_layers);
    assert_non_null(strstr(summary, "(binding: "));
    assert_non_null(strstr(summary, bline));
}

/* Run 1's per-layer critical-path figures in db are cflow inspect's (cl,
 * its "layers" array): critical, naive and expert bytes, the binding. */
static void check_layer_model(const char *db, json_object *cl, unsigned n_layers)
{
    char sql[512];
    for (unsigned l = 0; l < n_layers; l++) {
        json_object *x = json_object_array_get_idx(cl, l);
        char bind[32];
        snprintf(sql, sizeof sql, "SELECT cp_critical_bytes FROM layer_stat WHERE run_id=1 AND layer=%u", l);
        assert_true(close_to(q_real(db, sql), jnum(x, "critical_bytes")));
        snprintf(sql, sizeof sql, "SELECT cp_naive_bytes FROM layer_stat WHERE run_id=1 AND layer=%u", l);
        assert_true(close_to(q_real(db, sql), jnum(x, "naive_bytes")));
        snprintf(sql, sizeof sql, "SELECT cp_expert_bytes FROM layer_stat WHERE run_id=1 AND layer=%u", l);
        assert_true(close_to(q_real(db, sql), jnum(x, "expert_bytes")));
        snprintf(sql, sizeof sql, "SELECT cp_binding FROM layer_stat WHERE run_id=1 AND layer=%u", l);
        tu_db_text(db, sql, bind, sizeof bind);
        assert_string_equal(bind, json_object_get_string(member(x, "binding")));
    }
}

static void test_bytes_and_critical_path(void **state)
{
    (void)state;
    char db[4096], sql[512], line[2048];
    tu_proc p;
    want w;
    snprintf(db, sizeof db, "%s", tu_tmp("bytes.db"));
    remove(db);
    model_streams(&w);

    cflow(&p, "run", "-m", moe, "-n", "24", "--temp", "0.8", "--seed", "7", "--ignore-eos",
          "--db", db, NULL);
    expect_ok(&p, "run tiny-moe");
    char summary[2048];
    assert_true(line_starting(p.err, "cflow: bytes/token: ", summary, sizeof summary));
    fprintf(stderr, "%s\n", summary);
    tu_proc_free(&p);

    int64_t n_tok = tu_db_int(db, "SELECT n_prompt + n_gen FROM run WHERE id = 1");
    assert_int_equal(n_tok, 1 + 23);   /* BOS + 23 fed back */
    const int64_t n_dec = tu_db_int(db, "SELECT n_gen FROM run WHERE id = 1");
    assert_int_equal(n_dec, 23);
    double want_attn = 0, want_dense = 0, want_exp = 0;
    for (unsigned l = 0; l < w.n_layers; l++) {
        /* the per-layer rows cover the decode tokens */
        snprintf(sql, sizeof sql, "SELECT n_tokens FROM layer_stat WHERE run_id=1 AND layer=%u", l);
        assert_int_equal(tu_db_int(db, sql), n_dec);
        uint64_t per_exp = w.bank[l] * w.top_k / w.n_experts;
        snprintf(sql, sizeof sql, "SELECT experts_bytes FROM layer_stat WHERE run_id=1 AND layer=%u", l);
        assert_int_equal(tu_db_int(db, sql), (int64_t)per_exp * n_dec);
        snprintf(sql, sizeof sql, "SELECT attn_bytes FROM layer_stat WHERE run_id=1 AND layer=%u", l);
        assert_int_equal(tu_db_int(db, sql), (int64_t)w.attn[l] * n_dec);
        uint64_t dn = l >= w.dense_delay ? w.dense[l] : 0;
        snprintf(sql, sizeof sql, "SELECT ffn_bytes FROM layer_stat WHERE run_id=1 AND layer=%u", l);
        assert_int_equal(tu_db_int(db, sql), (int64_t)dn * n_dec);
        want_attn += (double)w.attn[l];
        want_dense += (double)dn;
        want_exp += (double)per_exp;
    }
    /* the run's and every token's sums agree with the layers' */
    assert_int_equal(tu_db_int(db, "SELECT experts_bytes FROM run WHERE id=1"),
                     (int64_t)want_exp * n_tok);
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM token WHERE run_id=1 AND"
                               " experts_bytes = (SELECT experts_bytes FROM run WHERE id=1)"
                               " / (SELECT n_prompt + n_gen FROM run WHERE id=1)"),
                     n_tok);

    /* the critical path: what cflow inspect says */
    cflow(&p, "inspect", "--critical-path", "--json", moe, NULL);
    expect_ok(&p, "inspect --critical-path --json");
    json_object *cp = json_tokener_parse(p.out);
    assert_non_null(cp);
    tu_proc_free(&p);
    double b_crit = jnum(cp, "b_critical_bytes"), b_naive = jnum(cp, "b_naive_bytes");
    assert_true(b_crit > 0 && b_naive >= b_crit);
    assert_true(close_to(q_real(db, "SELECT cp_critical_bytes FROM run WHERE id=1"), b_crit));
    assert_true(close_to(q_real(db, "SELECT cp_naive_bytes FROM run WHERE id=1"), b_naive));
    json_object *cl = member(cp, "layers");
    assert_int_equal(json_object_array_length(cl), w.n_layers);
    check_layer_model(db, cl, w.n_layers);

    /* the summary line: streamed per stream and the critical path in MiB */
    const double want[3] = { want_attn, want_dense, want_exp };
    check_summary(summary, want, b_crit, b_naive, w.n_layers);

    /* show, compare, export */
    cflow(&p, "run", "-m", moe, "-n", "8", "--temp", "0", "-t", "2", "--db", db, NULL);
    expect_ok(&p, "second run");
    tu_proc_free(&p);
    cflow(&p, "runs", "show", "1", "--db", db, NULL);
    expect_ok(&p, "runs show");
    assert_true(line_starting(p.out, "layer bytes", line, sizeof line));
    assert_true(line_starting(p.out, "  bytes", line, sizeof line));
    assert_non_null(strstr(line, "critical path"));
    tu_proc_free(&p);
    cflow(&p, "runs", "compare", "1", "2", "--db", db, NULL);
    expect_ok(&p, "runs compare");
    assert_non_null(strstr(p.out, "per layer, KiB streamed per token"));
    assert_true(line_starting(p.out, "critical MiB/tok", line, sizeof line));
    double x, y, r;
    assert_int_equal(sscanf(line + strlen("critical MiB/tok"), "%lf %lf %lf", &x, &y, &r), 3);
    assert_true(fabs(x - b_crit / MIB) < 0.00006 && r == 1.0);
    tu_proc_free(&p);

    cflow(&p, "runs", "export", "--json", "--db", db, NULL);
    expect_ok(&p, "runs export --json");
    json_object *ex = json_tokener_parse(p.out);
    assert_non_null(ex);
    tu_proc_free(&p);
    json_object *r1 = json_object_array_get_idx(ex, 0);
    assert_true(close_to(jnum(r1, "b_critical_bytes"), b_crit));
    assert_true(close_to(jnum(r1, "b_naive_bytes"), b_naive));
    assert_true(close_to(jnum(r1, "experts_bytes_per_token"), want_exp));
    json_object *la = member(r1, "layers");
    assert_int_equal(json_object_array_length(la), w.n_layers);
    for (unsigned l = 0; l < w.n_layers; l++) {
        json_object *o = json_object_array_get_idx(la, l);
        assert_true(jnum(o, "experts_bytes_per_token") ==
                    (double)(w.bank[l] * w.top_k / w.n_experts));
        assert_true(close_to(jnum(o, "critical_bytes"),
                             jnum(json_object_array_get_idx(cl, l), "critical_bytes")));
    }
    json_object_put(ex);
    json_object_put(cp);

    check_csv_export(db, b_crit);
}

/* ------------------------------------------------------------ 4 */

/* 1-3 again on tiny-moe at llama.cpp's q4_k_m mix: its matrices of
 * several GGML types (q5_0 where q4_k's block does not divide a row,
 * q8_0, a layer's down projections one type and another's another), so
 * the figures count each type's real bytes. */
static void test_bytes_mixed_types(void **state)
{
    tu_proc p;
    char q4[sizeof moe];
    memcpy(q4, moe, sizeof q4);
    snprintf(moe, sizeof moe, "%s", tu_tmp("tiny-moe-q4_k_m.cflow"));
    cflow(&p, "synth", "-q", "q4_k_m", "tiny-moe", moe, NULL);
    expect_ok(&p, "synth -q q4_k_m tiny-moe");
    tu_proc_free(&p);
    test_bytes_and_critical_path(state);
    memcpy(moe, q4, sizeof moe);
}

static void test_migrate_v2(void **state)
{
    (void)state;
    char db[4096], fx[4096];
    const char *src = getenv("CFLOW_SRCDIR");
    snprintf(db, sizeof db, "%s", tu_tmp("v2.db"));
    remove(db);
    snprintf(fx, sizeof fx, "%s/tests/prof/runs-v2.sql", src && *src ? src : ".");
    tu_require(fx);
    char *sql = tu_read_file(fx, NULL);
    assert_non_null(sql);
    sqlite3 *d;
    assert_int_equal(sqlite3_open(db, &d), SQLITE_OK);
    assert_int_equal(sqlite3_exec(d, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(d);
    free(sql);
    assert_int_equal(tu_db_int(db, "PRAGMA user_version"), 2);
    int64_t n_tokens = tu_db_int(db, "SELECT count(*) FROM token");
    assert_true(n_tokens > 0);

    tu_proc p;
    cflow(&p, "runs", "list", "--json", "--db", db, NULL);
    expect_ok(&p, "list a v2 log");
    assert_int_equal(tu_db_int(db, "PRAGMA user_version"), PROF_LOG_SCHEMA);
    assert_int_equal(PROF_LOG_SCHEMA, 11);
    json_object *a = json_tokener_parse(p.out);
    assert_non_null(a);
    assert_int_equal(json_object_array_length(a), 1);
    json_object *r1 = json_object_array_get_idx(a, 0);
    assert_string_equal(json_object_get_string(member(r1, "model")), "/models/old-moe.cflow");
    assert_null(member(r1, "b_critical_bytes"));   /* not known then: null */
    json_object_put(a);
    tu_proc_free(&p);
    /* every row kept */
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM token"), n_tokens);
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM layer_stat WHERE run_id=1"), 4);
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM counter WHERE run_id=1"), PROF_NEV);
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM layer_stat WHERE cp_critical_bytes"
                               " IS NOT NULL"), 0);
    /* schema 4: no expert I/O then (NULL) */
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM layer_stat WHERE io_s IS NOT NULL"
                               " OR io_bytes IS NOT NULL"), 0);
    /* schema 8: no stall or overlapped bound then (NULL) */
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM run WHERE xio_stall_s IS NOT NULL"
                               " OR xio_ov_limit_tok_s IS NOT NULL OR xio_pred_reads"
                               " IS NOT NULL"), 0);
    /* schema 9: no look-ahead setting then (NULL: "n/a") */
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM run WHERE expert_ahead IS NOT NULL"),
                     0);

    cflow(&p, "runs", "show", "1", "--db", db, NULL);
    expect_ok(&p, "show a migrated run");
    assert_non_null(strstr(p.out, "layer bytes"));
    tu_proc_free(&p);

    /* a new run joins it, with bytes and the model */
    cflow(&p, "run", "-m", moe, "-n", "4", "--temp", "0", "--db", db, NULL);
    expect_ok(&p, "run into the migrated log");
    assert_null(strstr(p.err, "warning"));
    assert_non_null(strstr(p.err, "cflow: logged run 2 in "));
    tu_proc_free(&p);
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM layer_stat WHERE run_id=2 AND"
                               " cp_critical_bytes > 0 AND experts_bytes > 0"), 4);
    cflow(&p, "runs", "compare", "1", "2", "--db", db, NULL);
    expect_ok(&p, "compare a v2 and a v3 run");
    assert_non_null(strstr(p.out, "per layer, KiB streamed per token"));
    /* the new run of a MoE model keeps its look-ahead setting (on, one
     * layer, by default); the migrated one has none */
    assert_int_equal(tu_db_int(db, "SELECT expert_ahead FROM run WHERE id=2"), 1);
    const char *la = strstr(p.out, "look-ahead");
    assert_non_null(la);
    assert_non_null(strstr(la, "n/a"));
    assert_non_null(strstr(la, "1 layer"));
    tu_proc_free(&p);
}

/* 5. A batched prefill streams the weights once for many prompt tokens:
 * the per-token figures (the summary line, the per-layer rows, `runs
 * compare`) are those of the decode tokens, which each stream the whole
 * model, not an average that the prompt's length would lower.
 * stories260K (Q8_0 GGUF, converted: a plain Llama, prefilled in batches). */
static void test_batched_prefill_per_token(void **state)
{
    (void)state;
    char db[4096], model[4096], summary[2048], line[2048];
    tu_proc p;
    snprintf(db, sizeof db, "%s", tu_tmp("prefill-bytes.db"));
    snprintf(model, sizeof model, "%s", tu_tmp("s260-q8.cflow"));
    remove(db);
    cflow(&p, "convert", tu_shared("models/stories260K-q8_0.gguf"), model, NULL);
    expect_ok(&p, "convert stories260K-q8_0.gguf");
    tu_proc_free(&p);
    const char *prompt = "Once upon a time, there was a little girl named Lily. She loved to "
                         "play outside in the park with her friends and her dog.";
    for (int i = 0; i < 2; i++) {
        cflow(&p, "run", "-m", model, "-p", prompt, "-n", "12", "--temp", "0",
              "--ignore-eos", "--db", db, NULL);
        expect_ok(&p, "run stories260K");
        if (!i)
            assert_true(line_starting(p.err, "cflow: bytes/token: ", summary, sizeof summary));
        tu_proc_free(&p);
    }
    fprintf(stderr, "%s\n", summary);
    int64_t n_prompt = tu_db_int(db, "SELECT n_prompt FROM run WHERE id=1");
    int64_t n_gen = tu_db_int(db, "SELECT n_gen FROM run WHERE id=1");
    assert_true(n_prompt >= 20 && n_gen == 11);
    /* every decode token streams the same bytes; the prompt's tokens
     * together far less than as many decode tokens */
    const char *tb = "attn_bytes + ffn_bytes + experts_bytes";
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT min(%s) FROM token WHERE run_id=1 AND phase=1", tb);
    int64_t per_tok = tu_db_int(db, sql);
    snprintf(sql, sizeof sql, "SELECT max(%s) FROM token WHERE run_id=1 AND phase=1", tb);
    assert_int_equal(tu_db_int(db, sql), per_tok);
    snprintf(sql, sizeof sql, "SELECT sum(%s) FROM token WHERE run_id=1 AND phase=0", tb);
    int64_t pre = tu_db_int(db, sql);
    fprintf(stderr, "prompt %lld tokens: %lld bytes; decode %lld bytes a token\n",
            (long long)n_prompt, (long long)pre, (long long)per_tok);
    assert_true(per_tok > 0 && pre < per_tok * n_prompt / 4);
    /* the per-layer rows: decode tokens, their bytes */
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM layer_stat WHERE run_id=1 AND"
                               " n_tokens != 11"), 0);
    assert_int_equal(tu_db_int(db, "SELECT sum(attn_bytes + ffn_bytes + experts_bytes)"
                               " FROM layer_stat WHERE run_id=1"), per_tok * n_gen);
    /* the summary line and `runs compare` per decode token */
    double all;
    const char *s = strstr(summary, "streamed ");
    assert_non_null(s);
    assert_int_equal(sscanf(s, "streamed %lf MiB", &all), 1);
    assert_true(fabs(all - (double)per_tok / MIB) < 0.0006);
    cflow(&p, "runs", "compare", "1", "2", "--db", db, NULL);
    expect_ok(&p, "runs compare");
    assert_true(line_starting(p.out, "streamed MiB/tok", line, sizeof line));
    double x, y;
    assert_int_equal(sscanf(line + strlen("streamed MiB/tok"), "%lf %lf", &x, &y), 2);
    assert_true(fabs(x - (double)per_tok / MIB) < 0.00006);
    assert_true(fabs(y - x) < 0.00006);
    tu_proc_free(&p);
    cflow(&p, "runs", "show", "1", "--db", db, NULL);
    expect_ok(&p, "runs show");
    assert_true(line_starting(p.out, "  bytes", line, sizeof line));
    assert_int_equal(sscanf(line, "  bytes streamed %lf MiB per decode token", &x), 1);
    assert_true(fabs(x - (double)per_tok / MIB) < 0.0006);
    tu_proc_free(&p);
    cflow(&p, "runs", "export", "--json", "--db", db, NULL);
    expect_ok(&p, "runs export --json");
    json_object *ex = json_tokener_parse(p.out);
    assert_non_null(ex);
    assert_true(close_to(jnum(json_object_array_get_idx(ex, 0), "streamed_bytes_per_token"),
                         (double)per_tok));
    json_object_put(ex);
    tu_proc_free(&p);
    remove(db);
    remove(model);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytes_and_critical_path),
        cmocka_unit_test(test_bytes_mixed_types),
        cmocka_unit_test(test_migrate_v2),
        cmocka_unit_test(test_batched_prefill_per_token),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
