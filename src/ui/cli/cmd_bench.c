/*
 * cmd_bench.c — `cflow bench`: throughput in the manner of llama-bench.
 *
 *   cflow bench -m MODEL [-t LIST] [-p LIST] [-n LIST] [-d LIST] [-r N] ...
 *   cflow bench membw [-t LIST] [-r N] [--db PATH] [--no-log]
 *   cflow bench diskbw [-m MODEL | --file PATH] [-r N] [--qd N]
 *   cflow bench l1d [-r N] [--rows-div K]
 *   cflow bench directio -m MODEL [-m MODEL.vflow] ...
 *
 * The tests are llama-bench's, so that its numbers and ours sit side by side:
 *   ppN   prefill N random tokens as one prompt (eng_prefill) and time it;
 *   tgN   decode N random tokens one at a time (eng_decode, logits each
 *         step) and time them;
 *   @ dD  before each repetition, D random tokens fill the cache (not timed);
 *   tgN xB  (--batch-decode B) N steps of eng_decode_batch over B sequences
 *         of the test's own, a token each a step, as cflow serve's slots
 *         decode; t/s counts all N x B tokens.
 * Each test runs once untimed (warm-up: page faults, worker start) and then
 * -r times; t/s is the mean of the per-repetition rates and ± its sample
 * standard deviation, as llama-bench reports avg_ts and stddev_ts.  The
 * cache is cleared before every repetition.  The model is loaded once per
 * -m; threads, prefetch and expert I/O change between tests without a
 * reload.  --expert-ahead-layers takes a list too: the model opens with
 * the deepest, each test sets its own.
 *
 * --interleave runs the tg tests of the lists' settings together: in each
 * repetition they take turns a token each, each timed over its own tokens
 * (run_group).  Settings a few per cent apart are then compared at one
 * moment of the machine, one expert cache, where tests run one after
 * another meet a storage and a load that drift between them (the token-
 * by-token tables of docs/perf-log/2026-12-06.md).
 *
 * For decode tests GB/s = weight bytes streamed per token (the engine's
 * count: attention, dense FFN, k/E of each expert bank, output head) times
 * t/s, and "% bw" divides it by the machine's read bandwidth: --read-bw,
 * else ui_read_bw's figure at the most threads asked for (the median
 * `cflow bench membw` recorded for the host, else measured here as membw
 * measures it and recorded, for the next run; `cflow run` and cflow-tui
 * divide by the same).
 *
 * The files: this one parses the options and runs a mode from the table of
 * modes (modes[]); the model's tests are cmd_bench_model.c's, the
 * machine's modes cmd_bench_hw.c's, and every mode prints its results
 * through the one table emitter (cli_table.c; the model tests' columns are
 * cmd_bench_out.c's).
 *
 * membw (cmd_bench_hw.c, as diskbw and l1d): per -t count,
 * prof_measure_membw's median of -r timed passes (9 when -r is not given)
 * with the min and max, each row recorded in the run log's membw table
 * (schema 6) for the host it runs on and its thread count.
 *
 * diskbw: O_DIRECT read GB/s of the storage the model (or --file) lives on
 * through the expert reader (eng_disk_read: the reader, queue depth and
 * request size expert misses use), the median of -r passes (9) with the
 * min and max, recorded in the run log's diskbw table for the file's
 * device (the storage-bound limit's figure).
 *
 * -o json prints one JSON array, one object per test, with llama-bench's
 * field names where they mean the same (model_filename, model_size,
 * model_n_params, n_threads, n_prompt, n_gen, n_depth, avg_ns, stddev_ns,
 * avg_ts, stddev_ts, samples_ns, samples_ts) so one script reads both; our
 * own fields follow (backend "cflow", isa, prefetch, expert_io,
 * bytes_per_token, gb_s, read_bw_gbs, bw_pct, then the expert streaming
 * figures of the timed repetitions, UI_XIO_FIELDS: ui_xio.c computes them
 * for `cflow run` and the TUI too; then expert_ahead and interleave).
 * -o csv has the same fields but use_mmap and the samples; -o md (the
 * default) a table like llama-bench's, with hit rate, MiB read per token,
 * the storage-bound tok/s and the share reached under --expert-io.
 *
 * Results go to stdout; progress and notes to stderr.  Each test's result
 * is also a row of the run log's bench table (schema 5+; --db, --no-log),
 * under a session "cflow bench" per model.
 *
 * "The report" (with its section numbers) is the Pipeline-Native
 * Transformers report.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "prof/prof.h"
#include "ui/cli/cli.h"
#include "ui/cli/bench_impl.h"

static const int bench_opts[] = {
    UI_O_B_MODELS, UI_O_B_THREADS, UI_O_B_PROMPT, UI_O_B_GEN, UI_O_B_DEPTH, UI_O_B_BATCH,
    UI_O_B_REPS,
    UI_O_B_PREFETCH, UI_O_B_EXPERT_IO, UI_O_B_OUTPUT, UI_O_B_READ_BW, UI_O_KV_TYPE,
    UI_O_EXPERT_CACHE, UI_O_EXPERT_AHEAD, UI_O_B_AHEAD_LAYERS, UI_O_NO_MMAP, UI_O_MMAP,
    UI_O_B_NO_WARMUP, UI_O_B_WARMUP_REPS, UI_O_B_INTERLEAVE, UI_O_B_SEED, UI_O_B_ROWS_DIV,
    UI_O_DB, UI_O_NO_LOG,
    UI_O_B_QD, UI_O_B_DISK_FILE, UI_O_HELP, UI_O_END
};

/* directio: the model's tg tests over every prefetch and expert I/O mode
 * (those not given). */
static int run_directio(bench_cfg *c)
{
    if (!c->p_set)
        c->p.v[0] = 0;
    if (!c->pf_set)
        c->pf = (ilist){ { 0, 1 }, 2 };
    if (!c->xio_set)
        c->xio = (ilist){ { ENG_XIO_MMAP, ENG_XIO_SYNC, ENG_XIO_STAGED }, 3 };
    c->pf_set = c->xio_set = 1;
    return ui_bench_models(c);
}

static int run_diskbw(bench_cfg *c)
{
    return ui_bench_diskbw(c, c->disk_file ? c->disk_file : c->models[0]);
}

static int run_models(bench_cfg *c) { return ui_bench_models(c); }
static int run_membw(bench_cfg *c) { return ui_bench_membw(c); }
static int run_l1d(bench_cfg *c) { return ui_bench_l1d(c); }

/* The modes: the word after `cflow bench` (none: the model's tests), its
 * usage, what it measures (--help), whether it reads a model (-m, else
 * the default one) and what runs it. */
typedef struct bench_mode {
    const char *name;
    const char *usage;
    const char *help;
    int         model;     /* 1 a model, 2 a model unless --file */
    int       (*run)(bench_cfg *c);
} bench_mode;

static const bench_mode modes[] = {
    { NULL, "[OPTIONS] [-m MODEL ...]", NULL, 1, run_models },
    { "membw", "[-t LIST] [-r N] [-o FMT] [--db PATH] [--no-log]",
      "the machine's read bandwidth (GB/s) per thread count, the median\n"
      "of -r passes (9) with min and max, recorded in the run log; later bench\n"
      "runs take their % bw from it unless --read-bw is given.", 0, run_membw },
    { "diskbw", "[-m MODEL | --file PATH] [-r N] [--qd N] [-o FMT]",
      "O_DIRECT read GB/s of the model's storage through the expert reader\n"
      "($CFLOW_XIO_READER), the median of -r passes (9) with min and max.", 2, run_diskbw },
    { "l1d", "[-r N] [--rows-div K] [-o FMT]",
      "tiled vs row-major f32 mat-vec at the report's d 8192 shapes.", 0, run_l1d },
    { "directio", "[-m MODEL] [-m MODEL.vflow] [OPTIONS]",
      "tg tests over --prefetch off,on and --expert-io\n"
      "mmap,sync,staged (unless given) for each model.", 1, run_directio },
};
#define N_MODES (sizeof modes / sizeof *modes)

static void help(const ui_settings *d)
{
    for (size_t i = 0; i < N_MODES; i++)
        printf("%s cflow bench%s%s %s\n", i ? "      " : "usage:", modes[i].name ? " " : "",
               modes[i].name ? modes[i].name : "", modes[i].usage);
    printf("\nThroughput in the manner of llama-bench: ppN prefills N random tokens,\n"
           "tgN decodes N tokens one by one; each test is warmed up once and\n"
           "repeated -r times (mean ± sd).  LIST is a,b,c or a-b or a-b+step.\n\n");
    ui_opts_help(stdout, bench_opts, d);
    putchar('\n');
    for (size_t i = 0; i < N_MODES; i++)
        if (modes[i].help) {
            printf("%s: ", modes[i].name);
            puts(modes[i].help);
        }
}

/* The settings as the benchmark runs them: threads 0 is all cores. */
static void bench_cfg_of(const ui_settings *o, bench_cfg *c)
{
    memset(c, 0, sizeof *c);
    memcpy(c->models, o->models, sizeof c->models);
    c->n_models = o->n_models;
    c->t = o->b_threads;
    for (unsigned i = 0; i < c->t.n; i++)
        if (c->t.v[i] == 0)
            c->t.v[i] = prof_cpu_cores() > 0 ? prof_cpu_cores() : 1;
    c->p = o->b_prompt;
    c->n = o->b_gen;
    c->d = o->b_depth;
    c->batch = o->b_batch;
    c->pf = o->b_prefetch;
    c->xio = o->b_expert_io;
    c->pf_set = o->given[UI_O_B_PREFETCH];
    c->xio_set = o->given[UI_O_B_EXPERT_IO];
    c->ahead = o->b_ahead;
    c->ahead_set = o->given[UI_O_B_AHEAD_LAYERS];
    c->p_set = o->given[UI_O_B_PROMPT];
    c->n_set = o->given[UI_O_B_GEN];
    c->reps = (unsigned)o->reps;
    c->reps_set = o->given[UI_O_B_REPS];
    c->fmt = o->output;
    c->warmup = !o->no_warmup;
    c->warmup_reps = (unsigned)o->warmup_reps;
    c->interleave = o->interleave;
    c->read_bw = o->read_bw;
    c->seed = o->b_seed;
    c->rows_div = (unsigned)o->rows_div;
    c->qd = (unsigned)o->qd;
    c->disk_file = o->disk_file;
    c->db = o->db;
    c->no_log = o->no_log;
    ui_settings_eng_opts(o, &c->eo);
}

int ui_cmd_bench(int argc, char **argv)
{
    ui_settings o;
    bench_cfg c;
    const bench_mode *m = &modes[0];
    int rc, first;

    if (argc > 1 && argv[1][0] != '-') {
        for (m = &modes[1]; m < modes + N_MODES && strcmp(m->name, argv[1]); m++)
            ;
        if (m == modes + N_MODES) {
            char words[128];
            size_t k = 0;
            for (size_t i = 1; i < N_MODES && k < sizeof words; i++)
                k += (size_t)snprintf(words + k, sizeof words - k, "%s%s", i > 1 ? ", " : "",
                                      modes[i].name);
            return ui_usage_error("bench", "unknown mode '%s' (%s)", argv[1], words);
        }
        argc--;
        argv++;
    }
    static const ui_optset set = { "cflow bench", bench_opts, help, NULL, 0 };
    ui_settings_default(&o);
    if ((rc = ui_opts_parse(&set, argc, argv, &o, &first)) >= 0)
        return rc;
    bench_cfg_of(&o, &c);
    if (m->model && !(m->model == 2 && c.disk_file) && c.n_models == 0 &&
        !(c.models[c.n_models++] = ui_default_model()))
        return ui_usage_error("bench", "no model: give -m MODEL (no default model is "
                                       "installed)");
    return m->run(&c);
}
