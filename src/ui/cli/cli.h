/*
 * cli.h — private to src/ui/cli, the `cflow` command: its subcommands,
 * each a function of argc/argv that returns the exit status (cflow.c's
 * table dispatches to them), and what `cflow run` keeps of a run.  What
 * cflow shares with cflow-tui is src/ui/common (ui.h).
 */
#ifndef CFLOW_UI_CLI_H
#define CFLOW_UI_CLI_H

#include "ui/common/ui.h"

int ui_cmd_convert(int argc, char **argv);
int ui_cmd_run(int argc, char **argv);
int ui_cmd_tokenize(int argc, char **argv);
int ui_cmd_inspect(int argc, char **argv);
int ui_cmd_synth(int argc, char **argv);
int ui_cmd_ppl(int argc, char **argv);
int ui_cmd_runs(int argc, char **argv);
int ui_cmd_bench(int argc, char **argv);
int ui_cmd_models(int argc, char **argv);

/* ---- cmd_run_log.c: profiling and logging one `cflow run` ---- */
typedef struct ui_run_cfg {
    const char         *db;          /* --db PATH, or NULL for the default */
    int                 no_log;      /* --no-log */
    int                 no_profile;  /* --no-profile */
    const eng_sampling *sp;
    const char         *named;       /* the model as the user named it */
} ui_run_cfg;
typedef struct ui_runlog ui_runlog;
/* Attach a profiler to s (unless no_profile and no_log), open the run log
 * (unless no_log) and start a run.  Problems with the log are one warning
 * on stderr and logging stops; NULL only when out of memory. */
ui_runlog *ui_runlog_start(eng_session *s, const char *model, const ui_run_cfg *c);
/* Decoding begins (after the prefill): the expert figures count from here. */
void       ui_runlog_decode(ui_runlog *rl);
/* After each token: write a batch to the log when one is due. */
void       ui_runlog_token(ui_runlog *rl);
/* Final flush; with print, the layers, counters, bandwidth and "logged run"
 * lines on stderr.  Detaches the profiler and frees everything. */
void       ui_runlog_end(ui_runlog *rl, int print);

#endif
