/*
 * cmd_bench_out.c — the model tests' table, as cli_table.c prints it: a
 * table like llama-bench's (-o md), csv with llama-bench's field names and
 * then cflow's own (-o csv), or one JSON object per test (-o json, with
 * use_mmap and the samples too).  The expert streaming columns are
 * ui_xio.c's figures of the test's timed repetitions (UI_XIO_FIELDS), as
 * `cflow run` and the TUI show them.
 *
 * One column table: a column the md table shows and the data carries in
 * the same words is one entry (threads, prefetch, expert_io, GB/s, % bw);
 * the md table's own (the model's file name with its type, sizes in
 * units, "t/s" as mean ± sd, the test's name) are entries of their own.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "prof/prof.h"
#include "ui/cli/cli.h"
#include "ui/cli/bench_impl.h"

enum {
    C_FILE, C_MODEL_MD, C_TYPE, C_SIZE_MD, C_SIZE, C_PARAMS_MD, C_PARAMS, C_BACKEND_MD,
    C_BACKENDS, C_CPU, C_MMAP, C_THREADS, C_PROMPT, C_GEN, C_DEPTH, C_TIME, C_AVG_NS,
    C_SD_NS, C_AVG_TS, C_SD_TS, C_SAMPLES_NS, C_SAMPLES_TS, C_ISA, C_PREFETCH, C_XIO,
    C_AHEAD_MD, C_TEST_MD, C_TS_MD, C_REPS, C_BPT, C_GBS, C_READ_BW, C_BW_PCT,
    C_HIT_MD, C_MIB_MD, C_BOUND_MD, C_REACHED_MD,
    C_XIO0,                                   /* UI_XIO_FIELDS, in order */
    C_EXPERT_AHEAD = C_XIO0 + UI_XIO_NF, C_INTERLEAVE, C_BATCH, C_N
};
_Static_assert(C_N <= UI_TAB_MAXC, "the bench table's columns fit a ui_tab");

#define MD UI_TAB_MD
#define CSV UI_TAB_CSV
#define JSON UI_TAB_JSON
#define DATA UI_TAB_DATA
#define ALL UI_TAB_ALL
/* Every column in the order each format prints its own; the expert
 * figures' names are UI_XIO_FIELDS' (bench_cols fills them in). */
static const ui_col cols_all[C_XIO0] = {
    [C_FILE] = { "model_filename", NULL, DATA, 's' },
    [C_MODEL_MD] = { "model", NULL, MD, 's' },
    [C_TYPE] = { "model_type", NULL, DATA, 's' },
    [C_SIZE_MD] = { "size", NULL, MD, 'n' },
    [C_SIZE] = { "model_size", NULL, DATA, 'n' },
    [C_PARAMS_MD] = { "params", NULL, MD, 'n' },
    [C_PARAMS] = { "model_n_params", NULL, DATA, 'n' },
    [C_BACKEND_MD] = { "backend", NULL, MD, 's' },
    [C_BACKENDS] = { "backends", NULL, DATA, 's' },
    [C_CPU] = { "cpu_info", NULL, DATA, 's' },
    [C_MMAP] = { "use_mmap", NULL, JSON, 'n' },
    [C_THREADS] = { "n_threads", "threads", ALL, 'n' },
    [C_PROMPT] = { "n_prompt", NULL, DATA, 'n' },
    [C_GEN] = { "n_gen", NULL, DATA, 'n' },
    [C_DEPTH] = { "n_depth", NULL, DATA, 'n' },
    [C_TIME] = { "test_time", NULL, DATA, 's' },
    [C_AVG_NS] = { "avg_ns", NULL, DATA, 'n' },
    [C_SD_NS] = { "stddev_ns", NULL, DATA, 'n' },
    [C_AVG_TS] = { "avg_ts", NULL, DATA, 'n' },
    [C_SD_TS] = { "stddev_ts", NULL, DATA, 'n' },
    [C_SAMPLES_NS] = { "samples_ns", NULL, JSON, 'n' },
    [C_SAMPLES_TS] = { "samples_ts", NULL, JSON, 'n' },
    [C_ISA] = { "isa", NULL, DATA, 'w' },
    [C_PREFETCH] = { "prefetch", NULL, ALL, 'w' },
    [C_XIO] = { "expert_io", NULL, ALL, 'w' },
    [C_AHEAD_MD] = { "ahead", NULL, MD, 'n' },
    [C_TEST_MD] = { "test", NULL, MD, 'n' },
    [C_TS_MD] = { "t/s", NULL, MD, 'n' },
    [C_REPS] = { "repetitions", NULL, DATA, 'n' },
    [C_BPT] = { "bytes_per_token", NULL, DATA, 'n' },
    [C_GBS] = { "gb_s", "GB/s", ALL, 'n' },
    [C_READ_BW] = { "read_bw_gbs", NULL, DATA, 'n' },
    [C_BW_PCT] = { "bw_pct", "% bw", ALL, 'n' },
    [C_HIT_MD] = { "hit %", NULL, MD, 'n' },
    [C_MIB_MD] = { "MiB/tok", NULL, MD, 'n' },
    [C_BOUND_MD] = { "bound t/s", NULL, MD, 'n' },
    [C_REACHED_MD] = { "% bound", NULL, MD, 'n' },
};

void ui_bench_table(ui_tab *t, ui_col cols[UI_TAB_MAXC], const bench_cfg *c)
{
    static char names[] = UI_XIO_FIELDS;   /* split once into the columns' names */
    static const char *xio[UI_XIO_NF];
    if (!xio[0]) {
        char *save = NULL, *name = strtok_r(names, ",", &save);
        for (int k = 0; k < UI_XIO_NF && name; k++, name = strtok_r(NULL, ",", &save))
            xio[k] = name;
    }
    memcpy(cols, cols_all, sizeof cols_all);
    for (int k = 0; k < UI_XIO_NF; k++)
        cols[C_XIO0 + k] = (ui_col){ xio[k], NULL, DATA, 'n' };
    cols[C_EXPERT_AHEAD] = (ui_col){ "expert_ahead", NULL, DATA, 'n' };
    cols[C_INTERLEAVE] = (ui_col){ "interleave", NULL, DATA, 'n' };
    cols[C_BATCH] = (ui_col){ "n_batch", NULL, DATA, 'n' };
    /* the md table's optional columns: the settings the lists vary, and the
     * expert figures where experts stream (--expert-io, or a MoE model) */
    if (!c->pf_set)
        cols[C_PREFETCH].in &= ~MD;
    if (!c->xio_set)
        for (int k = C_HIT_MD; k <= C_REACHED_MD; k++)
            cols[k].in = 0;
    if (!c->xio_set)
        cols[C_XIO].in &= ~MD;
    if (!c->ahead_set)
        cols[C_AHEAD_MD].in = 0;
    ui_tab_init(t, c->fmt, cols, C_N);
}

static void fmt_size(char *buf, size_t n, double bytes)
{
    snprintf(buf, n, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
    if (bytes < 1024.0 * 1024 * 1024)
        snprintf(buf, n, "%.2f MiB", bytes / (1024.0 * 1024));
}

static void fmt_params(char *buf, size_t n, double p)
{
    if (p >= 1e9)
        snprintf(buf, n, "%.2f B", p / 1e9);
    else if (p >= 1e6)
        snprintf(buf, n, "%.2f M", p / 1e6);
    else
        snprintf(buf, n, "%.2f K", p / 1e3);
}

void ui_bench_test_name(char *buf, size_t n, const result *r)
{
    int k = r->n_prompt > 0 ? snprintf(buf, n, "pp%ld", r->n_prompt)
                            : snprintf(buf, n, "tg%ld", r->n_gen);
    if (r->n_prompt <= 0 && r->n_batch > 1 && k > 0 && (size_t)k < n)
        k += snprintf(buf + k, n - (size_t)k, " x%u", r->n_batch);
    if (r->n_depth > 0 && k > 0 && (size_t)k < n)
        snprintf(buf + k, n - (size_t)k, " @ d%ld", r->n_depth);
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* A repetition's figures as a JSON array: "[ 1, 2, 3 ]". */
static void samples(ui_tab *t, unsigned col, const double *x, unsigned n, const char *fmt)
{
    char buf[64 * UI_LIST_MAX];
    size_t k = (size_t)snprintf(buf, sizeof buf, "[");
    for (unsigned i = 0; i < n && k < sizeof buf; i++) {
        k += (size_t)snprintf(buf + k, sizeof buf - k, "%s", i ? ", " : " ");
        if (k < sizeof buf)
            k += (size_t)snprintf(buf + k, sizeof buf - k, fmt, x[i]);
    }
    ui_tab_set(t, col, "%s ]", buf);
}

/* The md table's four expert figures: hit rate, MiB read a token, the
 * storage-bound tok/s and the share of it reached ("-": n/a). */
static void md_xio(ui_tab *t, const result *r)
{
    const prof_xio_fig *f = &r->xio;
    const double d[4] = { f->hit_rate >= 0 ? 100.0 * f->hit_rate : -1.0,
                          f->bytes_tok >= 0 ? f->bytes_tok / (1024.0 * 1024.0) : -1.0,
                          f->limit_tok_s, f->reached >= 0 ? 100.0 * f->reached : -1.0 };
    static const char *const fmt[4] = { "%.1f", "%.3f", "%.2f", "%.1f" };
    for (int k = 0; k < 4; k++)
        if (r->has_xio && d[k] >= 0)
            ui_tab_set(t, (unsigned)(C_HIT_MD + k), fmt[k], d[k]);
}

void ui_bench_emit(ui_tab *t, const result *r, const char *cpu)
{
    char sz[32], pr[32], tn[48];
    fmt_size(sz, sizeof sz, (double)r->model_size);
    fmt_params(pr, sizeof pr, (double)r->n_params);
    ui_bench_test_name(tn, sizeof tn, r);
    ui_tab_set(t, C_FILE, "%s", r->model);
    ui_tab_set(t, C_MODEL_MD, "%s %s", base_name(r->model), r->quant);
    ui_tab_set(t, C_TYPE, "%s %s", r->arch, r->quant);
    ui_tab_set(t, C_SIZE_MD, "%s", sz);
    ui_tab_set(t, C_SIZE, "%llu", (unsigned long long)r->model_size);
    ui_tab_set(t, C_PARAMS_MD, "%s", pr);
    ui_tab_set(t, C_PARAMS, "%llu", (unsigned long long)r->n_params);
    ui_tab_set(t, C_BACKEND_MD, "cflow %s", r->isa);
    ui_tab_set(t, C_BACKENDS, "cflow");
    ui_tab_set(t, C_CPU, "%s", cpu);
    ui_tab_set(t, C_MMAP, "%s", r->use_mmap ? "true" : "false");
    ui_tab_set(t, C_THREADS, "%d", r->threads);
    ui_tab_set(t, C_PROMPT, "%ld", r->n_prompt);
    ui_tab_set(t, C_GEN, "%ld", r->n_gen);
    ui_tab_set(t, C_DEPTH, "%ld", r->n_depth);
    ui_tab_set(t, C_TIME, "%s", r->time);
    ui_tab_set(t, C_AVG_NS, "%.0f", r->avg_ns);
    ui_tab_set(t, C_SD_NS, "%.0f", r->sd_ns);
    ui_tab_set(t, C_AVG_TS, "%.6f", r->avg_ts);
    ui_tab_set(t, C_SD_TS, "%.6f", r->sd_ts);
    samples(t, C_SAMPLES_NS, r->ns, r->reps, "%.0f");
    samples(t, C_SAMPLES_TS, r->ts, r->reps, "%.6f");
    ui_tab_set(t, C_ISA, "%s", r->isa);
    ui_tab_set(t, C_PREFETCH, "%s", ui_onoff[r->prefetch != 0]);
    ui_tab_set(t, C_XIO, "%s", r->xio_name);
    if (r->expert_ahead >= 0) {
        ui_tab_set(t, C_AHEAD_MD, "%d", r->expert_ahead);
        ui_tab_set(t, C_EXPERT_AHEAD, "%d", r->expert_ahead);
    }
    ui_tab_set(t, C_TEST_MD, "%s", tn);
    ui_tab_set(t, C_TS_MD, "%.2f ± %.2f", r->avg_ts, r->sd_ts);
    ui_tab_set(t, C_REPS, "%u", r->reps);
    ui_tab_set(t, C_BPT, "%llu", (unsigned long long)r->bytes_per_token);
    ui_tab_set(t, C_GBS, "%.4f", r->gb_s);
    if (r->gb_s > 0)
        ui_tab_md(t, C_GBS, "%.2f", r->gb_s);
    else
        ui_tab_md(t, C_GBS, "-");
    ui_tab_set(t, C_READ_BW, "%.3f", r->read_bw);
    ui_tab_set(t, C_BW_PCT, "%.2f", r->bw_pct);
    if (r->bw_pct > 0)
        ui_tab_md(t, C_BW_PCT, "%.1f", r->bw_pct);
    else
        ui_tab_md(t, C_BW_PCT, "-");
    md_xio(t, r);
    char v[UI_XIO_NF][64];
    ui_xio_values(&r->xio, r->has_xio, r->cache_bytes, r->routing, "", v);
    for (int k = 0; k < UI_XIO_NF; k++)
        ui_tab_set(t, (unsigned)(C_XIO0 + k), "%s", v[k]);
    ui_tab_set(t, C_INTERLEAVE, "%u", r->interleave);
    ui_tab_set(t, C_BATCH, "%u", r->n_batch > 1 ? r->n_batch : 1u);
    ui_tab_row(t);
}
