/*
 * bench_impl.h — private to `cflow bench`: the settings of a run of
 * tests (bench_cfg) and one test's result, for the files that share them.
 * They call downwards only:
 *
 *   cmd_bench.c        the options and the table of modes; calls one of
 *   cmd_bench_model.c  a model's tests (llama-bench's pp and tg, directio)
 *   cmd_bench_hw.c     the machine's own figures (membw, diskbw, l1d)
 *   cmd_bench_out.c    the model tests' columns and rows
 *   cli_table.c        the one table emitter (md, csv, json) all print with
 */
#ifndef CFLOW_UI_BENCH_IMPL_H
#define CFLOW_UI_BENCH_IMPL_H

#include <stdint.h>

#include "prof/prof.h"
#include "ui/cli/cli.h"

#define MAXL UI_LIST_MAX   /* entries per list option */
#define UI_BENCH_BATCH_MAX 256   /* --batch-decode's most sequences */
typedef ui_ilist ilist;

/* ---- one result --------------------------------------------------------- */
typedef struct ui_bench_result {
    const char *model;
    uint64_t    model_size, n_params;
    const char *arch, *isa, *quant;
    int         threads, prefetch, expert_io, use_mmap;
    char        xio_name[16];     /* the mode's word, "auto:MODE" where auto chose */
    long        n_prompt, n_gen, n_depth;
    unsigned    n_batch;          /* sequences a tg step decodes together (1: one) */
    unsigned    reps;
    double     *ns, *ts;          /* [reps] */
    double      avg_ns, sd_ns, avg_ts, sd_ts;
    uint64_t    bytes_per_token;
    double      gb_s, read_bw, bw_pct;
    int         has_xio;          /* xio holds the test's expert figures */
    prof_xio_fig xio;             /* over the timed repetitions (ui_xio.c) */
    uint64_t    cache_bytes;      /* the RAM expert cache */
    int         ahead;            /* the depth the test set; 0 the session's */
    int         expert_ahead;     /* eng_expert_ahead; -1 a dense model */
    unsigned    interleave;       /* tests that shared its repetitions (1: none) */
    char        routing[96];      /* ui_routing_text; "" for a real model */
    char        time[32];
} result;   /* ui_bench_result */

typedef struct ui_bench_cfg {
    const char *models[MAXL];
    unsigned n_models;
    ilist    t, p, n, d, pf, xio;
    ilist    batch;                /* --batch-decode: sequences per tg step */
    ilist    ahead;                /* look-ahead depths; {0}: the session's */
    int      pf_set, xio_set, ahead_set, p_set, n_set;   /* given, not the defaults */
    unsigned reps;
    int      reps_set;             /* -r given */
    int      fmt;                  /* 0 md, 1 csv, 2 json */
    int      warmup;
    unsigned warmup_reps;          /* --warmup-reps: untimed full repetitions */
    int      interleave;           /* --interleave: tg tests take turns a token each */
    double   read_bw;              /* GB/s; 0: measure */
    uint64_t seed;
    unsigned rows_div;             /* l1d: --rows-div */
    unsigned qd;                   /* diskbw: --qd, 0 the reader's */
    const char *disk_file;         /* diskbw: --file, NULL the model */
    const char *db;                /* --db PATH, NULL: the default log */
    int      no_log;
    /* the engine options of the command line (ui_settings_eng_opts); a
     * model opens with them at the most threads and the tests' context,
     * then each test sets its prefetch and expert I/O */
    eng_opts eo;
} bench_cfg;   /* ui_bench_cfg */

/* The run log's writer of a bench mode (its warnings "cflow bench: ..."). */
static inline ui_runlog *ui_bench_log(const bench_cfg *c)
{
    return ui_runlog_new(c->db, c->no_log, "cflow bench", ui_say_stderr, (void *)"cflow bench");
}

/* ---- cmd_bench_model.c: the tests of every model of c; an exit code ---- */
int ui_bench_models(const bench_cfg *c);

/* ---- cmd_bench_out.c: their table -------------------------------------- */
/* The model tests' table in c's format into t, its columns in cols (the md
 * table shows prefetch, expert I/O and look-ahead where c sets them). */
void ui_bench_table(ui_tab *t, ui_col cols[UI_TAB_MAXC], const bench_cfg *c);
/* r's row in t; cpu is this machine's CPU model. */
void ui_bench_emit(ui_tab *t, const result *r, const char *cpu);
/* r's test as the tables name it, "ppN" or "tgN", with " @ dD" for a
 * depth, into buf [n]. */
void ui_bench_test_name(char *buf, size_t n, const result *r);

/* ---- cmd_bench_hw.c: the modes that measure the machine ------------------
 * Each prints its table in c's format and returns UI_EXIT_OK, or an exit
 * code after one line on stderr.  diskbw reads path (a model or --file)
 * with c->qd reads in flight; l1d divides its shapes' rows by
 * c->rows_div. */
int ui_bench_membw(const bench_cfg *c);
int ui_bench_diskbw(const bench_cfg *c, const char *path);
int ui_bench_l1d(const bench_cfg *c);

#endif
