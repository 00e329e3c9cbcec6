/*
 * cli.h — private to src/ui/cli, the `cflow` command: its subcommands,
 * each a function of argc/argv that returns the exit status (cflow.c's
 * table dispatches to them), and what `cflow run` says of a run.  What
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

/* ---- cmd_run_figures.c: what `cflow run` counts and says of a run ---- */
/* The profiler of a run on s: none with no_profile and no_log, token
 * timings only with no_profile (the log needs them), else everything; a
 * warning on stderr and NULL when it cannot be made.  Attached to s. */
prof *ui_run_prof(eng_session *s, int no_profile, int no_log);
/* The layers, bytes, counters, expert I/O and bandwidth of the run on s,
 * as p counted them (NULL: nothing to say) and rl logged them, on stderr. */
void  ui_run_figures(const ui_runlog *rl, eng_session *s, prof *p);

#endif
