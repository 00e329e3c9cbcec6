/*
 * cmd_runs.c — the run log from the command line.
 *
 *   cflow runs list [--model M] [--json]     one line (or object) per run
 *   cflow runs show ID                       everything about one run
 *   cflow runs compare A B                   side by side, B/A ratios
 *   cflow runs export --csv|--json [--tokens] [--model M]
 *
 * Every subcommand takes --db PATH (default: $CFLOW_DB, then
 * $XDG_DATA_HOME/cflow/runs.db, then ~/.local/share/cflow/runs.db).  The
 * export formats are a stable interface documented in cflow(1) (RUN LOG);
 * columns and members may be added at the end, never renamed or removed.
 * (What writes the log is ui_runlog, src/ui/common/ui_runlog.c.)
 *
 * "The report" (with its section numbers) is the Pipeline-Native
 * Transformers report.
 */
#include "config.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "engine/engine.h"
#include "prof/prof.h"
#include "ui/cli/cli.h"

#define MIB (1024.0 * 1024.0)
#define KIB 1024.0

/* ======================================================================= */
/* cflow runs                                                               */
/* ======================================================================= */
static const int runs_opts[] = { UI_O_DB, UI_O_RUNS_MODEL, UI_O_JSON, UI_O_CSV, UI_O_TOKENS,
                                 UI_O_HELP, UI_O_END };

static void help(const ui_settings *d)
{
    printf("usage: cflow runs list [--model M] [--json] [--db PATH]\n"
           "       cflow runs show ID [--db PATH]\n"
           "       cflow runs compare A B [--db PATH]\n"
           "       cflow runs export --csv|--json [--tokens] [--model M] [--db PATH]\n\n"
           "The run log: every `cflow run` is recorded with its settings, timings,\n"
           "per-layer times and counters.\n\n");
    ui_opts_help(stdout, runs_opts, d);
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static const char *phase_name(uint64_t ph) { return ph == PROF_PREFILL ? "prefill" : "decode"; }

/* ---- JSON -------------------------------------------------------------- */
static json_object *jnum(double v) { return json_object_new_double(v); }
static json_object *jpos(double v) { return v > 0 ? json_object_new_double(v) : NULL; }
static json_object *jstr(const char *s) { return json_object_new_string(s); }
static json_object *jint(int64_t v) { return json_object_new_int64(v); }

/* Weight bytes streamed per decode token, all streams (0: not recorded). */
static double tok_streamed(const prof_run_row *r)
{
    return r->tok_bytes[0] + r->tok_bytes[1] + r->tok_bytes[2];
}

/* The expert figures (prof_xio_fig, schemas 7 and 8): counts, then the
 * figures, null where n/a. */
static json_object *xio_json(const prof_xio_fig *f)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "hits", jint((int64_t)f->hits));
    json_object_object_add(o, "misses", jint((int64_t)f->misses));
    json_object_object_add(o, "tokens", jint((int64_t)f->tokens));
    json_object_object_add(o, "bytes", jint((int64_t)f->bytes));
    json_object_object_add(o, "io_s", jnum(f->io_s));
    json_object_object_add(o, "predictions", jint((int64_t)f->pred));
    json_object_object_add(o, "predictions_right", jint((int64_t)f->pred_hits));
    json_object_object_add(o, "disk_gbs", jpos(f->disk_gbs));
    json_object_object_add(o, "stall_s", jnum(f->stall_s));
    json_object_object_add(o, "prediction_reads", jint((int64_t)f->pred_reads));
    json_object_object_add(o, "prediction_reads_wasted", jint((int64_t)f->pred_wasted));
    json_object_object_add(o, "prediction_bytes", jint((int64_t)f->pred_bytes));
    const struct { const char *k; double v; } d[] = {
        { "hit_rate", f->hit_rate }, { "bytes_per_token", f->bytes_tok },
        { "storage_gbs", f->gb_s }, { "queue_depth", f->depth },
        { "storage_bound_tok_s", f->limit_tok_s }, { "bound_reached", f->reached },
        { "prediction_accuracy", f->pred_acc },
        { "wasted_bytes_per_token", f->wasted_tok },
        { "compute_s_per_token", f->compute_s_tok },
        { "overlapped_bound_tok_s", f->ov_limit_tok_s },
        { "overlapped_bound_reached", f->ov_reached },
    };
    for (size_t i = 0; i < sizeof d / sizeof *d; i++)
        json_object_object_add(o, d[i].k, d[i].v >= 0 ? jnum(d[i].v) : NULL);
    return o;
}

static json_object *run_json(const prof_run_row *r)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "id", jint(r->id));
    json_object_object_add(o, "started", jstr(r->started));
    json_object_object_add(o, "ended", r->ended[0] ? jstr(r->ended) : NULL);
    json_object_object_add(o, "status", jstr(r->status));
    json_object_object_add(o, "program", jstr(r->program));
    json_object_object_add(o, "model", jstr(r->model));
    json_object_object_add(o, "model_hash", jstr(r->model_hash));
    json_object_object_add(o, "model_size", jint((int64_t)r->model_size));
    json_object_object_add(o, "arch", jstr(r->arch));
    json_object_object_add(o, "quant", jstr(r->quant));
    json_object_object_add(o, "n_layers", jint(r->n_layers));
    json_object_object_add(o, "hostname", jstr(r->hostname));
    json_object_object_add(o, "cpu_model", jstr(r->cpu_model));
    json_object_object_add(o, "isa", jstr(r->isa));
    json_object_object_add(o, "cores", jint(r->cores));
    json_object_object_add(o, "read_bw_gbs", jpos(r->read_bw_gbs));
    json_object_object_add(o, "threads", jint(r->threads));
    json_object_object_add(o, "prefetch", jstr(r->prefetch));
    json_object_object_add(o, "expert_io", jstr(r->expert_io));
    json_object_object_add(o, "expert_io_asked",
                           r->expert_io_asked[0] ? jstr(r->expert_io_asked) : NULL);
    json_object_object_add(o, "expert_cache_bytes", jint((int64_t)r->expert_cache_bytes));
    json_object_object_add(o, "expert_ahead", r->expert_ahead >= 0 ? jint(r->expert_ahead) : NULL);
    json_object_object_add(o, "model_file", jstr(r->model_file));
    json_object_object_add(o, "experts", r->has_xio ? xio_json(&r->xio) : NULL);
    json_object_object_add(o, "n_ctx", jint(r->n_ctx));
    json_object_object_add(o, "temp", jnum(r->temp));
    json_object_object_add(o, "top_k", jint(r->top_k));
    json_object_object_add(o, "top_p", jnum(r->top_p));
    json_object_object_add(o, "min_p", jnum(r->min_p));
    json_object_object_add(o, "repeat_penalty", jnum(r->rep_penalty));
    json_object_object_add(o, "repeat_last_n", jint(r->rep_last_n));
    /* seeds are unsigned 64-bit: a string keeps every bit in any reader */
    char seed[24];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)r->seed);
    json_object_object_add(o, "seed", jstr(seed));
    json_object_object_add(o, "n_prompt", jint((int64_t)r->n_prompt));
    json_object_object_add(o, "n_gen", jint((int64_t)r->n_gen));
    json_object_object_add(o, "prefill_s", jnum(r->prefill_s));
    json_object_object_add(o, "decode_s", jnum(r->decode_s));
    json_object_object_add(o, "prefill_tok_s", jpos(r->prefill_tok_s));
    json_object_object_add(o, "decode_tok_s", jpos(r->decode_tok_s));
    json_object_object_add(o, "bytes_per_token", jint((int64_t)r->bytes_per_token));
    json_object_object_add(o, "gb_s", jpos(r->gb_s));
    json_object_object_add(o, "bw_share", jpos(r->bw_share));
    json_object *ctr = json_object_new_object(), *un = json_object_new_object();
    for (int e = 0; e < PROF_NEV; e++) {
        json_object_object_add(ctr, prof_ev_name(e), r->ev[e] >= 0 ? jint(r->ev[e]) : NULL);
        if (r->ev[e] < 0 && r->ev_reason[e][0])
            json_object_object_add(un, prof_ev_name(e), jstr(r->ev_reason[e]));
    }
    json_object_object_add(o, "counters", ctr);
    json_object_object_add(o, "unavailable", un);
    /* weight bytes per decode token (streamed, per stream) and the
     * critical-path model; null when the run recorded none */
    const double *tb = r->tok_bytes;
    const int have = tok_streamed(r) > 0;
    static const char *const bkey[3] = { "attention_bytes_per_token", "ffn_bytes_per_token",
                                         "experts_bytes_per_token" };
    for (int k = 0; k < 3; k++)
        json_object_object_add(o, bkey[k], have ? jnum(tb[k]) : NULL);
    json_object_object_add(o, "streamed_bytes_per_token",
                           have ? jnum(tok_streamed(r)) : NULL);
    json_object_object_add(o, "b_naive_bytes", jpos(r->cp_naive));
    json_object_object_add(o, "b_critical_bytes", jpos(r->cp_critical));
    /* a request to cflow serve (schema 11); null for other runs */
    const int req = r->client[0] != '\0';
    json_object_object_add(o, "client", req ? jstr(r->client) : NULL);
    json_object_object_add(o, "endpoint", req ? jstr(r->endpoint) : NULL);
    json_object_object_add(o, "stop", r->stop[0] ? jstr(r->stop) : NULL);
    json_object_object_add(o, "queue_s", r->queue_s >= 0 ? jnum(r->queue_s) : NULL);
    json_object_object_add(o, "n_cached", r->n_cached >= 0 ? jint(r->n_cached) : NULL);
    json_object_object_add(o, "n_prompt_all", r->n_prompt_all >= 0 ? jint(r->n_prompt_all) : NULL);
    return o;
}

static int print_json(json_object *o)
{
    const char *s = json_object_to_json_string_ext(
        o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);
    int rc = printf("%s\n", s) < 0 ? UI_EXIT_ERR : UI_EXIT_OK;
    json_object_put(o);
    return rc;
}

/* ---- list -------------------------------------------------------------- */
/* A row's strings for the terminal (ui_printable): a log is a file from
 * outside like any other, and list, show and compare print its text.  The
 * exports keep the bytes (JSON and CSV quote them). */
static void row_printable(prof_run_row *r)
{
    char *s[] = { r->started, r->ended, r->status, r->program, r->model, r->model_hash,
                  r->arch, r->quant, r->hostname, r->cpu_model, r->isa, r->prefetch,
                  r->expert_io, r->expert_io_asked, r->model_file };
    for (size_t i = 0; i < sizeof s / sizeof *s; i++)
        ui_printable(s[i]);
    for (int e = 0; e < PROF_NEV; e++)
        ui_printable(r->ev_reason[e]);
}

static int cmd_list(prof_log *l, const char *model, int json)
{
    prof_run_row *rows;
    size_t n;
    char err[1024];
    if (prof_log_list(l, model, &rows, &n, err, sizeof err))
        return ui_error("%s", err);
    if (json) {
        json_object *a = json_object_new_array();
        for (size_t i = 0; i < n; i++)
            json_object_array_add(a, run_json(&rows[i]));
        free(rows);
        return print_json(a);
    }
    if (n)
        printf("%5s  %-19s  %-24s %4s %-8s %-9s %6s %6s %10s %10s  %s\n", "ID", "STARTED",
               "MODEL", "THR", "PREFETCH", "EXPERT_IO", "PROMPT", "GEN", "PREFILL/S",
               "DECODE/S", "STATUS");
    for (size_t i = 0; i < n; i++) {
        prof_run_row *r = &rows[i];
        char when[20];
        row_printable(r);
        snprintf(when, sizeof when, "%.19s", r->started);
        if (when[10] == 'T')
            when[10] = ' ';
        printf("%5lld  %-19s  %-24.24s %4d %-8s %-9s %6llu %6llu %10.2f %10.2f  %s\n",
               (long long)r->id, when, base_name(r->model), r->threads, r->prefetch,
               r->expert_io, (unsigned long long)r->n_prompt, (unsigned long long)r->n_gen,
               r->prefill_tok_s, r->decode_tok_s, r->status);
    }
    free(rows);
    return UI_EXIT_OK;
}

/* ---- show -------------------------------------------------------------- */
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void token_summary(const prof_tok *t, size_t n, uint64_t phase)
{
    double *v = malloc((n ? n : 1) * sizeof *v);
    size_t k = 0;
    if (!v)
        return;
    for (size_t i = 0; i < n; i++)
        if (t[i].phase == phase)
            v[k++] = t[i].dt;
    if (k) {
        qsort(v, k, sizeof *v, cmp_double);
        printf("  %-11s %zu tokens: min %.3f ms, median %.3f ms, p90 %.3f ms, max %.3f ms\n",
               phase == PROF_PREFILL ? "prefill" : "decode", k, v[0] * 1e3,
               v[k / 2] * 1e3, v[(k * 9) / 10 < k ? (k * 9) / 10 : k - 1] * 1e3,
               v[k - 1] * 1e3);
    }
    free(v);
}

static void counters_of(const prof_run_row *r, char *buf, size_t n)
{
    const char *why[PROF_NEV];
    for (int e = 0; e < PROF_NEV; e++)
        why[e] = r->ev_reason[e];
    prof_counters_line(r->ev, why, buf, n);
}

static int parse_id(const char *s, int64_t *id)
{
    long v;
    if (ui_parse_int(s, 1, LONG_MAX, &v))
        return -1;
    *id = v;
    return 0;
}

static int get_run(prof_log *l, const char *arg, prof_run_row *r)
{
    char err[1024];
    int64_t id;
    if (parse_id(arg, &id))
        return ui_usage_error("runs", "bad run id '%s': a run number from 1 ('cflow runs list' "
                                      "lists them)", arg);
    int rc = prof_log_get(l, id, r, err, sizeof err);
    if (rc < 0)
        return ui_error("%s", err);
    if (rc > 0)
        return ui_error("%s: no run %lld", prof_log_path(l), (long long)id);
    row_printable(r);   /* (show and compare print it) */
    return 0;
}

/* The expert-I/O figures of layers lr[0..n), summed over the layers and
 * per token (runs and layers of different lengths stay comparable). */
static void io_per_token(const prof_layer_row *lr, unsigned n, prof_io_fig *f)
{
    double c = 0, io = 0, st = 0;
    uint64_t by = 0, nt = 0;
    for (unsigned i = 0; i < n; i++) {
        const prof_layer_row *x = &lr[i];
        c += x->sec[PROF_ST_ATTN] + x->sec[PROF_ST_FFN] + x->sec[PROF_ST_EXPERTS];
        io += x->io_s;
        st += x->sec[PROF_ST_IO_WAIT];
        by += x->io_bytes;
        if (x->n_tokens > nt)
            nt = x->n_tokens;
    }
    const double d = nt ? (double)nt : 1.0;
    prof_io_derive(c / d, io / d, st / d, (uint64_t)((double)by / d + 0.5), f);
}

/* show: the run's row, its settings and totals. */
static void show_run(prof_run_row *r)
{
    char line[2048];
    printf("run %lld (%s)\n", (long long)r->id, r->status);
    printf("  %-11s %s%s%s\n", "started", r->started, r->ended[0] ? ", ended " : "", r->ended);
    printf("  %-11s %s (session %lld)\n", "program", r->program, (long long)r->session_id);
    printf("  %-11s %s, %s, %d cores, kernels %s", "machine", r->hostname, r->cpu_model, r->cores,
           r->isa);
    if (r->read_bw_gbs > 0)
        printf(", read bandwidth %.1f GB/s", r->read_bw_gbs);
    printf("\n  %-11s %s (%llu bytes, hash %s", "model", r->model,
           (unsigned long long)r->model_size, r->model_hash);
    if (r->arch[0])
        printf(", %s, %u layers, %s", r->arch, r->n_layers, r->quant);
    printf(")\n");
    if (r->model_file[0] && strcmp(r->model_file, r->model))
        printf("  %-11s %s\n", "ran from", r->model_file);
    char ahead[24];
    printf("  %-11s threads %d, prefetch %s, expert-io %s%s, ", "settings", r->threads,
           r->prefetch, r->expert_io,
           eng_expert_io_from_name(r->expert_io_asked) == ENG_XIO_AUTO ? " (auto)" : "");
    if (r->expert_ahead >= 0)
        printf("look-ahead %s, ", ui_ahead_text(r->expert_ahead, ahead, sizeof ahead));
    printf("ctx %u\n", r->n_ctx);
    printf("  %-11s temp %.2f, top-k %d, top-p %.2f, min-p %.2f, repeat-penalty %.2f"
           " (last %d), seed %llu\n",
           "sampling", r->temp, r->top_k, r->top_p, r->min_p, r->rep_penalty, r->rep_last_n,
           (unsigned long long)r->seed);
    if (r->client[0]) {   /* a request to cflow serve */
        printf("  %-11s %s from %s, queued %.3f s", "request", ui_printable(r->endpoint),
               ui_printable(r->client), r->queue_s > 0 ? r->queue_s : 0.0);
        if (r->n_prompt_all >= 0)
            printf(", %lld prompt tokens (%lld cached)", (long long)r->n_prompt_all,
                   (long long)r->n_cached);
        printf(", stopped: %s\n", r->stop[0] ? ui_printable(r->stop) : "-");
    }
    printf("  %-11s %llu tokens in %.3f s (%.2f tok/s)\n", "prompt",
           (unsigned long long)r->n_prompt, r->prefill_s, r->prefill_tok_s);
    printf("  %-11s %llu tokens in %.3f s (%.2f tok/s, %.2f GB/s of weights", "decode",
           (unsigned long long)r->n_gen, r->decode_s, r->decode_tok_s, r->gb_s);
    if (r->bw_share > 0)
        printf(", %.1f%% of read bandwidth", 100.0 * r->bw_share);
    printf(")\n");
    char xl[UI_XIO_LINES][160];   /* the expert figures as cflow run printed them */
    int nx = r->has_xio ? ui_xio_lines(&r->xio, r->expert_cache_bytes, NULL, xl) : 0;
    for (int i = 0; i < nx; i++)
        printf("  %-11s %s\n", i ? "" : "experts", xl[i]);
    counters_of(r, line, sizeof line);
    printf("  %-11s %s\n", "counters", line);
    const double *tb = r->tok_bytes;
    if (tok_streamed(r) > 0) {
        printf("  %-11s streamed %.3f MiB per decode token (attention %.3f, dense %.3f,"
               " experts %.3f)", "bytes", tok_streamed(r) / MIB, tb[0] / MIB,
               tb[1] / MIB, tb[2] / MIB);
        if (r->cp_critical > 0)
            printf("; critical path %.3f MiB of naive %.3f MiB", r->cp_critical / MIB,
                   r->cp_naive / MIB);
        printf("\n");
    }
}

/* show: the run's token times, by phase. */
static int show_tokens(prof_log *l, const prof_run_row *r)
{
    char err[1024];
    prof_tok *toks;
    size_t nt;
    if (prof_log_tokens(l, r->id, &toks, &nt, err, sizeof err))
        return ui_error("%s", err);
    printf("token times\n");
    token_summary(toks, nt, PROF_PREFILL);
    token_summary(toks, nt, PROF_DECODE);
    free(toks);
    return UI_EXIT_OK;
}

/* show: each layer's time per stream. */
static int show_layer_times(prof_log *l, const prof_run_row *r)
{
    char err[1024];
    double *sec;
    unsigned nl;
    uint64_t ntok;
    if (prof_log_layers(l, r->id, &sec, &nl, &ntok, err, sizeof err))
        return ui_error("%s", err);
    if (nl) {
        printf("layers (ms over %llu tokens)\n  %5s", (unsigned long long)ntok, "layer");
        for (int k = 0; k < PROF_NST; k++)
            printf(" %12s", prof_stream_name(k));
        printf("\n");
        for (unsigned i = 0; i < nl; i++) {
            printf("  %5u", i);
            for (int k = 0; k < PROF_NST; k++)
                printf(" %12.3f", sec[(size_t)i * PROF_NST + k] * 1e3);
            printf("\n");
        }
    }
    free(sec);
    return UI_EXIT_OK;
}

/* show: each layer's bytes against the critical-path model, and its
 * expert I/O where it read any. */
static int show_layer_rows(prof_log *l, const prof_run_row *r)
{
    char err[1024];
    prof_layer_row *lr;
    unsigned nr;
    if (prof_log_layer_rows(l, r->id, &lr, &nr, err, sizeof err))
        return ui_error("%s", err);
    if (nr) {
        printf("layer bytes (KiB per token: streamed; critical-path model)\n"
               "  %5s %12s %12s %12s %12s %12s  %s\n",
               "layer", "attention", "dense", "experts", "naive", "critical", "binding");
        for (unsigned i = 0; i < nr; i++) {
            const prof_layer_row *x = &lr[i];
            double nt = x->n_tokens ? (double)x->n_tokens : 1.0;
            printf("  %5u %12.3f %12.3f %12.3f", x->layer, (double)x->bytes[0] / nt / KIB,
                   (double)x->bytes[1] / nt / KIB, (double)x->bytes[2] / nt / KIB);
            if (x->has_model)
                printf(" %12.3f %12.3f  %s\n", x->model.naive / KIB, x->model.critical / KIB,
                       ui_byte_stream[x->model.binding < 3 ? x->model.binding : 0]);
            else
                printf(" %12s %12s  %s\n", "-", "-", "-");
        }
        int any_io = 0;
        for (unsigned i = 0; i < nr; i++)
            any_io |= lr[i].io_bytes != 0;
        if (any_io) {
            printf("expert I/O (ms per token; C compute, IO read time, stall; hidden = 1 -"
                   " stall/IO;\n  model = (C + IO) / max(C, IO_eff), the speedup of staged"
                   " over sync it predicts)\n"
                   "  %5s %10s %10s %10s %8s %8s %12s\n",
                   "layer", "C", "IO", "stall", "hidden", "model", "MiB read");
            for (unsigned i = 0; i <= nr; i++) {   /* the layers, then "all" */
                prof_io_fig f;
                char name[16];
                io_per_token(i < nr ? &lr[i] : lr, i < nr ? 1 : nr, &f);
                if (i < nr)
                    snprintf(name, sizeof name, "%u", lr[i].layer);
                else
                    snprintf(name, sizeof name, "all");
                printf("  %5s %10.3f %10.3f %10.3f %7.0f%% %7.2fx %12.3f\n", name,
                       f.c_s * 1e3, f.io_s * 1e3, f.stall_s * 1e3, 100.0 * f.hidden, f.pred,
                       (double)f.bytes / MIB);
            }
        }
    }
    free(lr);
    return UI_EXIT_OK;
}

static int cmd_show(prof_log *l, const char *arg)
{
    prof_run_row r;
    int rc = get_run(l, arg, &r);
    if (rc)
        return rc;
    show_run(&r);
    if ((rc = show_tokens(l, &r)) || (rc = show_layer_times(l, &r)))
        return rc;
    return show_layer_rows(l, &r);
}

/* ---- compare ----------------------------------------------------------- */
/* Staged over sync (report 5.14): the speedup measured and what the
 * model and its refined form predict, per token of each run. */
static void cmp_staged(const prof_run_row *y, const prof_layer_row *ly, unsigned ny,
                       const prof_run_row *g, const prof_layer_row *lg, unsigned ng)
{
    prof_io_fig fy, fg;
    io_per_token(ly, ny, &fy);
    io_per_token(lg, ng, &fg);
    /* per decode token, as the per-layer rows are */
    if (!fy.bytes || !fg.bytes || !y->n_gen || !g->n_gen)
        return;
    double t_y = y->decode_s / (double)y->n_gen;
    double t_g = g->decode_s / (double)g->n_gen;
    prof_io_ab r;
    prof_io_compare(t_y, &fy, t_g, &fg, &r);
    printf("\nexpert I/O, staged (run %lld) over sync (run %lld), ms per token\n"
           "  %-8s %10s %10s %10s %10s\n", (long long)g->id, (long long)y->id,
           "", "time", "C", "IO", "stall");
    printf("  %-8s %10.3f %10.3f %10.3f %10.3f\n", eng_expert_io_name(ENG_XIO_SYNC),
           t_y * 1e3, fy.c_s * 1e3, fy.io_s * 1e3, fy.stall_s * 1e3);
    printf("  %-8s %10.3f %10.3f %10.3f %10.3f\n", eng_expert_io_name(ENG_XIO_STAGED),
           t_g * 1e3, fg.c_s * 1e3, fg.io_s * 1e3, fg.stall_s * 1e3);
    printf("  net %.2fx; model (C + IO) / max(C, IO_eff) %.2fx (net/model %.2f);\n"
           "  interference tax tau %+.2f; refined (C + stall_sync) / max((1 + tau) C,"
           " IO_eff) %.2fx (net/refined %.2f)\n",
           r.net, r.model, r.model > 0 ? r.net / r.model : 0.0, r.tau, r.refined,
           r.refined > 0 ? r.net / r.refined : 0.0);
}

static int cmd_compare(prof_log *l, const char *aa, const char *bb)
{
    prof_run_row a, b;
    char err[1024], x[64], y[64];
    int rc;
    if ((rc = get_run(l, aa, &a)) || (rc = get_run(l, bb, &b)))
        return rc;
    snprintf(x, sizeof x, "run %lld", (long long)a.id);
    snprintf(y, sizeof y, "run %lld", (long long)b.id);
    printf("%-22s %20s %20s %10s\n", "", x, y, "ratio B/A");
    ui_cmp_row rows[UI_CMP_MAX];
    size_t nr = ui_cmp_rows(&a, &b, rows, UI_CMP_MAX);
    for (size_t i = 0; i < nr; i++)
        printf("%-22s %20s %20s %10s\n", rows[i].what, rows[i].a, rows[i].b, rows[i].ratio);

    double *sa, *sb;
    unsigned na, nb;
    uint64_t ta, tb;
    if (prof_log_layers(l, a.id, &sa, &na, &ta, err, sizeof err))
        return ui_error("%s", err);
    if (prof_log_layers(l, b.id, &sb, &nb, &tb, err, sizeof err)) {
        free(sa);
        return ui_error("%s", err);
    }
    unsigned nl = na > nb ? na : nb;
    if (nl) {
        printf("\nper layer, ms per token (B - A)\n%5s", "layer");
        for (int k = 0; k < PROF_NST; k++)
            printf(" %9s A %9s B %8s", prof_stream_name(k), "", "diff");
        printf("\n");
        for (unsigned i = 0; i < nl; i++) {
            printf("%5u", i);
            for (int k = 0; k < PROF_NST; k++) {
                double va = i < na && ta ? sa[(size_t)i * PROF_NST + k] / (double)ta * 1e3 : 0;
                double vb = i < nb && tb ? sb[(size_t)i * PROF_NST + k] / (double)tb * 1e3 : 0;
                printf(" %11.4f %11.4f %+8.4f", va, vb, vb - va);
            }
            printf("\n");
        }
    }
    free(sa);
    free(sb);

    prof_layer_row *la, *lb;
    unsigned nla, nlb;
    if (prof_log_layer_rows(l, a.id, &la, &nla, err, sizeof err))
        return ui_error("%s", err);
    if (prof_log_layer_rows(l, b.id, &lb, &nlb, err, sizeof err)) {
        free(la);
        return ui_error("%s", err);
    }
    unsigned nlr = nla > nlb ? nla : nlb;
    if (nlr) {
        printf("\nper layer, KiB streamed per token and critical path (B - A)\n%5s", "layer");
        for (int k = 0; k < 3; k++)
            printf(" %9s A %9s B %8s", ui_byte_stream[k], "", "diff");
        printf(" %9s A %9s B %8s\n", "critical", "", "diff");
        for (unsigned i = 0; i < nlr; i++) {
            const prof_layer_row *x = i < nla ? &la[i] : NULL, *y = i < nlb ? &lb[i] : NULL;
            printf("%5u", i);
            for (int k = 0; k < 3; k++) {
                double va = x && x->n_tokens ? (double)x->bytes[k] / (double)x->n_tokens / KIB : 0;
                double vb = y && y->n_tokens ? (double)y->bytes[k] / (double)y->n_tokens / KIB : 0;
                printf(" %11.3f %11.3f %+8.3f", va, vb, vb - va);
            }
            double ca = x && x->has_model ? x->model.critical / KIB : 0;
            double cb = y && y->has_model ? y->model.critical / KIB : 0;
            printf(" %11.3f %11.3f %+8.3f\n", ca, cb, cb - ca);
        }
    }
    const int xa = eng_expert_io_from_name(a.expert_io), xb = eng_expert_io_from_name(b.expert_io);
    int ab = xa == ENG_XIO_SYNC && xb == ENG_XIO_STAGED;
    int ba = xa == ENG_XIO_STAGED && xb == ENG_XIO_SYNC;
    if ((ab || ba) && !strcmp(a.model_hash, b.model_hash))
        cmp_staged(ab ? &a : &b, ab ? la : lb, ab ? nla : nlb,
                   ab ? &b : &a, ab ? lb : la, ab ? nlb : nla);
    free(la);
    free(lb);
    return UI_EXIT_OK;
}

/* ---- export ------------------------------------------------------------ */
/* s bare where CSV lets it be, else quoted */
static void csv_str(const char *s)
{
    if (!strpbrk(s, ",\"\n\r") && s[0] != ' ' && (!*s || s[strlen(s) - 1] != ' '))
        fputs(s, stdout);
    else
        ui_tab_csv_quoted(s);
}

static void csv_real(double v, int null_if_zero)
{
    if (null_if_zero && v <= 0)
        return;
    printf("%.9g", v);
}

static const char *const csv_run_cols =
    "id,started,ended,status,program,model,model_hash,model_size,arch,quant,n_layers,"
    "hostname,cpu_model,isa,cores,read_bw_gbs,threads,prefetch,expert_io,n_ctx,temp,top_k,"
    "top_p,min_p,repeat_penalty,repeat_last_n,seed,n_prompt,n_gen,prefill_s,decode_s,"
    "prefill_tok_s,decode_tok_s,bytes_per_token,gb_s,bw_share";
/* after the counters (columns are only ever appended): bytes (schema 3),
 * then the expert settings and figures (schemas 7-9; empty where a run has
 * none, as `cflow bench -o csv` leaves them) */
static const char *const csv_run_cols2 =
    "attention_bytes_per_token,ffn_bytes_per_token,experts_bytes_per_token,"
    "streamed_bytes_per_token,b_naive_bytes,b_critical_bytes,"
    "expert_io_asked,expert_ahead," UI_XIO_FIELDS;

static void csv_run(const prof_run_row *r)
{
    printf("%lld,", (long long)r->id);
    csv_str(r->started); putchar(',');
    csv_str(r->ended); putchar(',');
    csv_str(r->status); putchar(',');
    csv_str(r->program); putchar(',');
    csv_str(r->model); putchar(',');
    csv_str(r->model_hash); putchar(',');
    printf("%llu,", (unsigned long long)r->model_size);
    csv_str(r->arch); putchar(',');
    csv_str(r->quant); putchar(',');
    printf("%u,", r->n_layers);
    csv_str(r->hostname); putchar(',');
    csv_str(r->cpu_model); putchar(',');
    csv_str(r->isa); putchar(',');
    printf("%d,", r->cores);
    csv_real(r->read_bw_gbs, 1); putchar(',');
    printf("%d,", r->threads);
    csv_str(r->prefetch); putchar(',');
    csv_str(r->expert_io); putchar(',');
    printf("%u,", r->n_ctx);
    csv_real(r->temp, 0); printf(",%d,", r->top_k);
    csv_real(r->top_p, 0); putchar(',');
    csv_real(r->min_p, 0); putchar(',');
    csv_real(r->rep_penalty, 0);
    printf(",%d,%llu,%llu,%llu,", r->rep_last_n, (unsigned long long)r->seed,
           (unsigned long long)r->n_prompt, (unsigned long long)r->n_gen);
    csv_real(r->prefill_s, 0); putchar(',');
    csv_real(r->decode_s, 0); putchar(',');
    csv_real(r->prefill_tok_s, 1); putchar(',');
    csv_real(r->decode_tok_s, 1);
    printf(",%llu,", (unsigned long long)r->bytes_per_token);
    csv_real(r->gb_s, 1); putchar(',');
    csv_real(r->bw_share, 1);
    for (int e = 0; e < PROF_NEV; e++) {
        putchar(',');
        if (r->ev[e] >= 0)
            printf("%lld", (long long)r->ev[e]);
    }
    const int have = tok_streamed(r) > 0;
    for (int k = 0; k < 3; k++) {
        putchar(',');
        if (have)
            printf("%.9g", r->tok_bytes[k]);
    }
    putchar(',');
    if (have)
        printf("%.9g", tok_streamed(r));
    putchar(',');
    csv_real(r->cp_naive, 1);
    putchar(',');
    csv_real(r->cp_critical, 1);
    putchar(',');
    csv_str(r->expert_io_asked);
    putchar(',');
    if (r->expert_ahead >= 0)
        printf("%d", r->expert_ahead);
    char v[UI_XIO_NF][64];
    ui_xio_values(&r->xio, r->has_xio, r->expert_cache_bytes, NULL, "", v);
    for (int k = 0; k < UI_XIO_NF; k++)
        printf(",%s", v[k]);
    putchar('\n');
}

static void csv_header(int tokens)
{
    fputs(tokens ? "run_id,idx,phase,t,dt,attention_s,ffn_s,experts_s,io_wait_s"
                 : csv_run_cols, stdout);
    for (int e = 0; e < PROF_NEV; e++)
        printf(",%s", prof_ev_name(e));
    printf(",%s\n", tokens ? "attention_bytes,ffn_bytes,experts_bytes" : csv_run_cols2);
}

static json_object *tokens_json(const prof_tok *t, size_t n)
{
    json_object *a = json_object_new_array();
    for (size_t i = 0; i < n; i++) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "idx", jint((int64_t)t[i].idx));
        json_object_object_add(o, "phase", jstr(phase_name(t[i].phase)));
        json_object_object_add(o, "t", jnum(t[i].t));
        json_object_object_add(o, "dt", jnum(t[i].dt));
        for (int k = 0; k < PROF_NST; k++) {
            char name[32];
            snprintf(name, sizeof name, "%s_s", prof_stream_name(k));
            for (char *c = name; *c; c++)
                if (*c == '-')
                    *c = '_';
            json_object_object_add(o, name, jnum(t[i].st[k]));
        }
        json_object *c = json_object_new_object();
        for (int e = 0; e < PROF_NEV; e++)
            json_object_object_add(c, prof_ev_name(e), t[i].ev[e] >= 0 ? jint(t[i].ev[e]) : NULL);
        json_object_object_add(o, "counters", c);
        json_object_object_add(o, "attention_bytes", jint((int64_t)t[i].bytes[0]));
        json_object_object_add(o, "ffn_bytes", jint((int64_t)t[i].bytes[1]));
        json_object_object_add(o, "experts_bytes", jint((int64_t)t[i].bytes[2]));
        json_object_array_add(a, o);
    }
    return a;
}

static int cmd_export(prof_log *l, const char *model, int json, int tokens)
{
    prof_run_row *rows;
    size_t n;
    char err[1024];
    int rc = UI_EXIT_OK;
    if (prof_log_list(l, model, &rows, &n, err, sizeof err))
        return ui_error("%s", err);
    json_object *arr = json ? json_object_new_array() : NULL;
    if (!json)
        csv_header(tokens);
    for (size_t i = 0; i < n && rc == UI_EXIT_OK; i++) {
        const prof_run_row *r = &rows[i];
        prof_tok *toks = NULL;
        size_t nt = 0;
        if (tokens && prof_log_tokens(l, r->id, &toks, &nt, err, sizeof err)) {
            rc = ui_error("%s", err);
            break;
        }
        if (!json) {
            if (!tokens)
                csv_run(r);
            for (size_t k = 0; k < nt; k++) {
                const prof_tok *t = &toks[k];
                printf("%lld,%llu,%s,%.9g,%.9g", (long long)r->id, (unsigned long long)t->idx,
                       phase_name(t->phase), t->t, t->dt);
                for (int s = 0; s < PROF_NST; s++)
                    printf(",%.9g", t->st[s]);
                for (int e = 0; e < PROF_NEV; e++) {
                    putchar(',');
                    if (t->ev[e] >= 0)
                        printf("%lld", (long long)t->ev[e]);
                }
                printf(",%llu,%llu,%llu\n", (unsigned long long)t->bytes[0],
                       (unsigned long long)t->bytes[1], (unsigned long long)t->bytes[2]);
            }
        } else {
            json_object *o = run_json(r);
            prof_layer_row *lr;
            unsigned nl;
            uint64_t ntok = 0;
            if (prof_log_layer_rows(l, r->id, &lr, &nl, err, sizeof err)) {
                json_object_put(o);
                rc = ui_error("%s", err);
                free(toks);
                break;
            }
            json_object *la = json_object_new_array();
            for (unsigned k = 0; k < nl; k++) {
                const prof_layer_row *x = &lr[k];
                json_object *lo = json_object_new_object();
                double n = x->n_tokens ? (double)x->n_tokens : 1.0;
                ntok = x->n_tokens;
                json_object_object_add(lo, "layer", jint(x->layer));
                json_object_object_add(lo, "attention_s", jnum(x->sec[PROF_ST_ATTN]));
                json_object_object_add(lo, "ffn_s", jnum(x->sec[PROF_ST_FFN]));
                json_object_object_add(lo, "experts_s", jnum(x->sec[PROF_ST_EXPERTS]));
                json_object_object_add(lo, "io_wait_s", jnum(x->sec[PROF_ST_IO_WAIT]));
                json_object_object_add(lo, "attention_bytes_per_token",
                                       jnum((double)x->bytes[0] / n));
                json_object_object_add(lo, "ffn_bytes_per_token", jnum((double)x->bytes[1] / n));
                json_object_object_add(lo, "experts_bytes_per_token",
                                       jnum((double)x->bytes[2] / n));
                json_object_object_add(lo, "cp_attention_bytes",
                                       x->has_model ? jnum(x->model.attn) : NULL);
                json_object_object_add(lo, "cp_dense_bytes",
                                       x->has_model ? jnum(x->model.dense) : NULL);
                json_object_object_add(lo, "cp_experts_bytes",
                                       x->has_model ? jnum(x->model.expert) : NULL);
                json_object_object_add(lo, "naive_bytes",
                                       x->has_model ? jnum(x->model.naive) : NULL);
                json_object_object_add(lo, "critical_bytes",
                                       x->has_model ? jnum(x->model.critical) : NULL);
                json_object_object_add(lo, "binding",
                                       x->has_model && x->model.binding < 3
                                           ? jstr(ui_byte_stream[x->model.binding]) : NULL);
                if (x->io_bytes) {   /* expert I/O (schema 4) */
                    prof_io_fig f;
                    prof_io_derive(x->sec[PROF_ST_ATTN] + x->sec[PROF_ST_FFN] +
                                       x->sec[PROF_ST_EXPERTS],
                                   x->io_s, x->sec[PROF_ST_IO_WAIT], x->io_bytes, &f);
                    json_object_object_add(lo, "io_s", jnum(f.io_s));
                    json_object_object_add(lo, "io_bytes", jint((int64_t)f.bytes));
                    json_object_object_add(lo, "io_hidden", jnum(f.hidden));
                    json_object_object_add(lo, "io_model_speedup", jnum(f.pred));
                }
                json_object_array_add(la, lo);
            }
            free(lr);
            json_object_object_add(o, "layer_tokens", jint((int64_t)ntok));
            json_object_object_add(o, "layers", la);
            if (tokens)
                json_object_object_add(o, "tokens", tokens_json(toks, nt));
            json_object_array_add(arr, o);
        }
        free(toks);
    }
    free(rows);
    if (json) {
        if (rc == UI_EXIT_OK)
            return print_json(arr);
        json_object_put(arr);
    }
    if (fflush(stdout))
        rc = ui_error("write error");
    return rc;
}

int ui_cmd_runs(int argc, char **argv)
{
    static const ui_optset set = { "cflow runs", runs_opts, help, NULL, -1 };
    ui_settings o;
    char err[1024];
    int rc, first;

    ui_settings_default(&o);
    if ((rc = ui_opts_parse(&set, argc, argv, &o, &first)) >= 0)
        return rc;
    const char *db = o.db, *model = o.model;
    const int json = o.json, csv = o.csv, tokens = o.tokens;
    if (first >= argc)
        return ui_usage_error("runs", "missing subcommand (list, show, compare, export)");
    const char *sub = argv[first];
    int nargs = argc - first - 1;
    char **args = argv + first + 1;
    int want = !strcmp(sub, "list") || !strcmp(sub, "export") ? 0
             : !strcmp(sub, "show")                            ? 1
             : !strcmp(sub, "compare")                         ? 2
                                                               : -1;
    if (want < 0)
        return ui_usage_error("runs", "unknown subcommand '%s' (list, show, compare, export)",
                              sub);
    if (nargs != want)
        return ui_usage_error("runs", "%s takes %d argument%s", sub, want, want == 1 ? "" : "s");
    if (!strcmp(sub, "export") && json == csv)
        return ui_usage_error("runs", "export needs exactly one of --csv and --json");
    if (strcmp(sub, "export") && (csv || tokens))
        return ui_usage_error("runs", "--csv and --tokens are for export");

    prof_log *l;
    int got = ui_log_open(&l, db, 0, err, sizeof err);
    if (got < 0)
        return ui_error("run log %s", err);
    if (got > 0) {
        /* nothing logged yet: an empty log, not an error, but said */
        if (!strcmp(sub, "list") || !strcmp(sub, "export")) {
            ui_eprintf("cflow: %s: no run log yet (cflow run, cflow bench and "
                            "cflow-tui create it)\n", err);
            if (json)
                return print_json(json_object_new_array());
            if (!strcmp(sub, "export"))
                csv_header(tokens);
            return UI_EXIT_OK;
        }
        return ui_error("%s: no run log yet (nothing has been logged)", err);
    }
    if (!strcmp(sub, "list"))
        rc = cmd_list(l, model, json);
    else if (!strcmp(sub, "show"))
        rc = cmd_show(l, args[0]);
    else if (!strcmp(sub, "compare"))
        rc = cmd_compare(l, args[0], args[1]);
    else
        rc = cmd_export(l, model, json, tokens);
    prof_log_close(l);
    return rc;
}
