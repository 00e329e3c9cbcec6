/*
 * cmd_bench_out.c — `cflow bench`'s results as it prints them: a table
 * like llama-bench's (-o md), csv with llama-bench's field names and then
 * cflow's own (-o csv), or one JSON object per test (-o json).  The
 * expert streaming columns are ui_xio.c's figures of the test's timed
 * repetitions (UI_XIO_FIELDS), as `cflow run` and the TUI show them.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "prof/prof.h"
#include "ui/cli/cli.h"
#include "ui/cli/cmd_bench_impl.h"

const char *const ui_bench_onoff[2] = { "off", "on" };
const char *const ui_bench_xio[4] = { "mmap", "sync", "staged", "auto" };
const char *const ui_bench_xio_auto[3] = { "auto:mmap", "auto:sync", "auto:staged" };

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
    if (r->n_depth > 0 && k > 0 && (size_t)k < n)
        snprintf(buf + k, n - (size_t)k, " @ d%ld", r->n_depth);
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* With --expert-io the table adds the expert figures: hit rate, MiB read
 * per token, the storage-bound tok/s and the share of it reached. */
static void print_md_head(const bench_cfg *c)
{
    printf("| model | size | params | backend | threads |%s%s%s test | t/s | GB/s | %% bw |%s\n",
           c->pf_set ? " prefetch |" : "", c->xio_set ? " expert_io |" : "",
           c->ahead_set ? " ahead |" : "",
           c->xio_set ? " hit % | MiB/tok | bound t/s | % bound |" : "");
    printf("| ----- | ---: | -----: | ------- | ------: |%s%s%s ---: | ---: | ---: | ---: |%s\n",
           c->pf_set ? " -------- |" : "", c->xio_set ? " --------- |" : "",
           c->ahead_set ? " ----: |" : "",
           c->xio_set ? " ----: | ------: | --------: | ------: |" : "");
}

static void md_xio(const result *r)
{
    const prof_xio_fig *f = &r->xio;
    char v[4][32];
    const double d[4] = { f->hit_rate >= 0 ? 100.0 * f->hit_rate : -1.0,
                          f->bytes_tok >= 0 ? f->bytes_tok / (1024.0 * 1024.0) : -1.0,
                          f->limit_tok_s, f->reached >= 0 ? 100.0 * f->reached : -1.0 };
    static const char *const fmt[4] = { "%.1f", "%.3f", "%.2f", "%.1f" };
    for (int k = 0; k < 4; k++)
        if (r->has_xio && d[k] >= 0)
            snprintf(v[k], sizeof v[k], fmt[k], d[k]);
        else
            snprintf(v[k], sizeof v[k], "-");
    printf(" %s | %s | %s | %s |", v[0], v[1], v[2], v[3]);
}

static void print_md(const bench_cfg *c, const result *r)
{
    char sz[32], pr[32], tn[48], gb[32] = "-", pct[32] = "-";
    fmt_size(sz, sizeof sz, (double)r->model_size);
    fmt_params(pr, sizeof pr, (double)r->n_params);
    ui_bench_test_name(tn, sizeof tn, r);
    if (r->gb_s > 0)
        snprintf(gb, sizeof gb, "%.2f", r->gb_s);
    if (r->bw_pct > 0)
        snprintf(pct, sizeof pct, "%.1f", r->bw_pct);
    char name[256];   /* the model's file name, as the user gave it: made printable */
    snprintf(name, sizeof name, "%s", base_name(r->model));
    printf("| %s %s | %s | %s | cflow %s | %d |", ui_printable(name), r->quant, sz,
           pr, r->isa, r->threads);
    if (c->pf_set)
        printf(" %s |", ui_bench_onoff[r->prefetch]);
    if (c->xio_set)
        printf(" %s |", r->xio_name);
    if (c->ahead_set && r->expert_ahead >= 0)
        printf(" %d |", r->expert_ahead);
    else if (c->ahead_set)
        printf(" - |");
    printf(" %s | %.2f ± %.2f | %s | %s |", tn, r->avg_ts, r->sd_ts, gb, pct);
    if (c->xio_set)
        md_xio(r);
    putchar('\n');
    fflush(stdout);
}

static const char *const csv_fields =
    "model_filename,model_type,model_size,model_n_params,backends,cpu_info,"
    "n_threads,n_prompt,n_gen,n_depth,test_time,avg_ns,stddev_ns,avg_ts,"
    "stddev_ts,isa,prefetch,expert_io,repetitions,bytes_per_token,gb_s,"
    "read_bw_gbs,bw_pct," UI_XIO_FIELDS ",expert_ahead,interleave";

/* The test's expert figures (ui_xio_values) */
static void xio_values(const result *r, char v[UI_XIO_NF][64], const char *na)
{
    ui_xio_values(&r->xio, r->has_xio, r->cache_bytes, r->routing, na, v);
}

static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

static void print_csv(const result *r, const char *cpu)
{
    printf("\"%s\",\"%s %s\",%llu,%llu,\"cflow\",\"%s\",%d,%ld,%ld,%ld,\"%s\","
           "%.0f,%.0f,%.6f,%.6f,%s,%s,%s,%u,%llu,%.4f,%.3f,%.2f",
           r->model, r->arch, r->quant, (unsigned long long)r->model_size,
           (unsigned long long)r->n_params, cpu, r->threads, r->n_prompt, r->n_gen,
           r->n_depth, r->time, r->avg_ns, r->sd_ns, r->avg_ts, r->sd_ts, r->isa,
           ui_bench_onoff[r->prefetch], r->xio_name, r->reps,
           (unsigned long long)r->bytes_per_token, r->gb_s, r->read_bw, r->bw_pct);
    char v[UI_XIO_NF][64];
    xio_values(r, v, "");
    for (int k = 0; k < UI_XIO_NF; k++)
        printf(",%s", v[k]);
    if (r->expert_ahead >= 0)
        printf(",%d", r->expert_ahead);
    else
        printf(",");
    printf(",%u\n", r->interleave);
    fflush(stdout);
}

static void print_json(const result *r, const char *cpu, int first)
{
    printf("%s  {\n    \"model_filename\": ", first ? "" : ",\n");
    json_str(r->model);
    printf(",\n    \"model_type\": \"%s %s\",\n", r->arch, r->quant);
    printf("    \"model_size\": %llu,\n    \"model_n_params\": %llu,\n",
           (unsigned long long)r->model_size, (unsigned long long)r->n_params);
    printf("    \"backends\": \"cflow\",\n    \"cpu_info\": ");
    json_str(cpu);
    printf(",\n    \"use_mmap\": %s", r->use_mmap ? "true" : "false");
    printf(",\n    \"n_threads\": %d,\n    \"n_prompt\": %ld,\n    \"n_gen\": %ld,\n"
           "    \"n_depth\": %ld,\n    \"test_time\": \"%s\",\n"
           "    \"avg_ns\": %.0f,\n    \"stddev_ns\": %.0f,\n"
           "    \"avg_ts\": %.6f,\n    \"stddev_ts\": %.6f,\n",
           r->threads, r->n_prompt, r->n_gen, r->n_depth, r->time, r->avg_ns,
           r->sd_ns, r->avg_ts, r->sd_ts);
    printf("    \"samples_ns\": [");
    for (unsigned i = 0; i < r->reps; i++)
        printf("%s%.0f", i ? ", " : " ", r->ns[i]);
    printf(" ],\n    \"samples_ts\": [");
    for (unsigned i = 0; i < r->reps; i++)
        printf("%s%.6f", i ? ", " : " ", r->ts[i]);
    printf(" ],\n    \"isa\": \"%s\",\n    \"prefetch\": \"%s\",\n"
           "    \"expert_io\": \"%s\",\n    \"repetitions\": %u,\n"
           "    \"bytes_per_token\": %llu,\n    \"gb_s\": %.4f,\n"
           "    \"read_bw_gbs\": %.3f,\n    \"bw_pct\": %.2f",
           r->isa, ui_bench_onoff[r->prefetch], r->xio_name, r->reps,
           (unsigned long long)r->bytes_per_token, r->gb_s, r->read_bw, r->bw_pct);
    char v[UI_XIO_NF][64], names[] = UI_XIO_FIELDS;
    xio_values(r, v, "null");
    char *save = NULL, *name = strtok_r(names, ",", &save);
    for (int k = 0; k < UI_XIO_NF && name; k++, name = strtok_r(NULL, ",", &save))
        printf(",\n    \"%s\": %s", name, v[k]);
    if (r->expert_ahead >= 0)
        printf(",\n    \"expert_ahead\": %d", r->expert_ahead);
    else
        printf(",\n    \"expert_ahead\": null");
    printf(",\n    \"interleave\": %u\n  }", r->interleave);
    fflush(stdout);
}

void ui_bench_emit(const bench_cfg *c, const result *r, const char *cpu, int first)
{
    /* the head only once there is a row: an error before the first result
     * leaves stdout empty */
    if (first && c->fmt == 0)
        print_md_head(c);
    else if (first && c->fmt == 1)
        printf("%s\n", csv_fields);
    else if (first)
        printf("[\n");
    if (c->fmt == 0)
        print_md(c, r);
    else if (c->fmt == 1)
        print_csv(r, cpu);
    else
        print_json(r, cpu, first);
}
