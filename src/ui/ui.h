/*
 * ui.h — private to src/ui: the subcommands of `cflow` and the helpers they
 * share (messages, progress bar, strict argument parsing).
 *
 * Conventions every subcommand keeps (tests and scripts rely on them):
 * results on stdout, everything else on stderr; errors are one line
 * "cflow: ..." with exit status 1, usage errors exit 2.
 */
#ifndef CFLOW_UI_H
#define CFLOW_UI_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "prof/prof.h"

#define UI_EXIT_OK    0
#define UI_EXIT_ERR   1
#define UI_EXIT_USAGE 2

int ui_cmd_convert(int argc, char **argv);
int ui_cmd_run(int argc, char **argv);
int ui_cmd_tokenize(int argc, char **argv);
int ui_cmd_inspect(int argc, char **argv);
int ui_cmd_synth(int argc, char **argv);
int ui_cmd_ppl(int argc, char **argv);
int ui_cmd_runs(int argc, char **argv);
int ui_cmd_bench(int argc, char **argv);

/* ---- cmd_runs.c: profiling and logging one `cflow run` ---- */
typedef struct ui_run_cfg {
    const char         *db;          /* --db PATH, or NULL for the default */
    int                 no_log;      /* --no-log */
    int                 no_profile;  /* --no-profile */
    const eng_sampling *sp;
} ui_run_cfg;
typedef struct ui_runlog ui_runlog;
/* Attach a profiler to s (unless no_profile and no_log), open the run log
 * (unless no_log) and start a run.  Problems with the log are one warning
 * on stderr and logging stops; NULL only when out of memory. */
ui_runlog *ui_runlog_start(eng_session *s, const char *model, const ui_run_cfg *c);
/* After each token: write a batch to the log when one is due. */
void       ui_runlog_token(ui_runlog *rl);
/* Final flush; with print, the layers, counters, bandwidth and "logged run"
 * lines on stderr.  Detaches the profiler and frees everything. */
void       ui_runlog_end(ui_runlog *rl, int print);

/* "cflow: <msg>" on stderr; returns UI_EXIT_ERR. */
int  ui_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "cflow <cmd>: <msg>\nTry 'cflow <cmd> --help'." ; returns UI_EXIT_USAGE. */
int  ui_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Log callback for the libraries: warnings and errors to stderr. */
void ui_log(void *ud, int level, const char *msg);
/* Progress callback: a bar on stderr when it is a terminal and the work
 * has taken more than a second; silent otherwise. */
void ui_progress(void *ud, const char *what, uint64_t done, uint64_t total);

/* Strict number parsing: the whole string must be a number in range.
 * Return 0 or -1. */
int ui_parse_int(const char *s, long lo, long hi, long *out);
int ui_parse_float(const char *s, double lo, double hi, double *out);
int ui_parse_u64(const char *s, uint64_t *out);

/* A whole file, NUL-terminated (malloc'd); *len gets its size.  NULL on
 * error. */
char *ui_read_file(const char *path, size_t *len);

/* The model used when no -m is given ($CFLOW_MODEL, else the shipped one),
 * or NULL when there is none. */
const char *ui_default_model(void);

/* What the run log records of a session, as `cflow run`, `cflow bench` and
 * cflow-tui all describe it: the machine and the model.  The structures'
 * strings point into the buffers beside them. */
typedef struct ui_logsess {
    char            host[256], cpu[256], hash[17], real[PATH_MAX];
    prof_machine    m;
    prof_model_info mi;
} ui_logsess;
/* This machine; its read bandwidth (GB/s) is $CFLOW_READ_BW_GBS, else the
 * figure the log keeps for it, else measured now.  Without a log (NULL)
 * nothing is looked up or measured unless the environment gives it. */
void ui_logsess_machine(ui_logsess *ls, const eng_session *s, prof_log *log);
/* The model: resolved path, content hash, size and geometry.  -1 with
 * err filled when the file cannot be hashed. */
int  ui_logsess_model(ui_logsess *ls, const char *model, const fmt_hparams *hp,
                      char *err, size_t errlen);

#endif
