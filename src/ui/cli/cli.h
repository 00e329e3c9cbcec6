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
int ui_cmd_serve(int argc, char **argv);

/* ---- cmd_run_figures.c: what `cflow run` counts and says of a run ---- */
/* The profiler of a run on s: none with no_profile and no_log, token
 * timings only with no_profile (the log needs them), else everything; a
 * warning on stderr and NULL when it cannot be made.  Attached to s. */
prof *ui_run_prof(eng_session *s, int no_profile, int no_log);
/* The layers, bytes, counters, expert I/O and bandwidth of the run on s,
 * as p counted them (NULL: nothing to say) and rl logged them, on stderr. */
void  ui_run_figures(const ui_runlog *rl, eng_session *s, prof *p);

/* ---- cli_table.c: a result table on stdout in md, csv or json ---------
 * Every `cflow bench` mode prints through it: a static column table, then
 * cells set by column and a row printed at a time (the head with the
 * first).  A cell is text made with printf's format, the same in every
 * format unless ui_tab_md gives the table's own text. */
enum { UI_TAB_MD = 1, UI_TAB_CSV = 2, UI_TAB_JSON = 4 };
#define UI_TAB_ALL  (UI_TAB_MD | UI_TAB_CSV | UI_TAB_JSON)
#define UI_TAB_DATA (UI_TAB_CSV | UI_TAB_JSON)   /* the fields scripts read */
#define UI_TAB_MAXC 64                           /* columns a table has at most */
typedef struct ui_col {
    const char *name;   /* the csv and json field name; the heading without head */
    const char *head;   /* the md heading, or NULL */
    unsigned    in;     /* the formats that carry it (UI_TAB_*) */
    char        kind;   /* 'n' a number or JSON as it is (empty: csv empty, json
                           null), 'w' a word (csv bare, json a string), 's' text
                           (quoted and escaped in both) */
} ui_col;
typedef struct ui_tab {
    int           fmt;             /* 0 md, 1 csv, 2 json (ui_settings.output) */
    const ui_col *cols;
    unsigned      n;
    unsigned      rows;            /* printed so far */
    char         *val[UI_TAB_MAXC], *md[UI_TAB_MAXC];   /* the row's cells */
} ui_tab;
void ui_tab_init(ui_tab *t, int fmt, const ui_col *cols, unsigned n);
/* Column col's cell of the row being made; ui_tab_md its md text where
 * that differs (units, precision, a "±"). */
void ui_tab_set(ui_tab *t, unsigned col, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void ui_tab_md(ui_tab *t, unsigned col, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The row on stdout (the head before the first); its cells are cleared. */
void ui_tab_row(ui_tab *t);
/* json's closing ']' ("[]" with no row when ok); frees what is left. */
void ui_tab_end(ui_tab *t, int ok);
/* s as one quoted CSV field on stdout, its quotes doubled. */
void ui_tab_csv_quoted(const char *s);
/* The mean and sample standard deviation of x[n] (0 and 0 for n 0); the
 * median of x[n] (sorted in place; 0 for n 0). */
void   ui_tab_mean_sd(const double *x, unsigned n, double *mean, double *sd);
double ui_tab_median(double *x, unsigned n);

#endif
