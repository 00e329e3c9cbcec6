/*
 * ui_runlog.c — the run log as every program opens and writes it: the
 * opener (readers and writers) and the writer's lifecycle, written once
 * for `cflow run`, `cflow bench` and cflow-tui.
 *
 * Where.  --db PATH, else the default (prof_log_default_path: $CFLOW_DB,
 * then $XDG_DATA_HOME/cflow/runs.db, then ~/.local/share/cflow/runs.db).
 *
 * The lifecycle of a writer (ui_runlog):
 *
 *   ui_runlog_new        nothing opened yet
 *   ui_runlog_session    a model has opened: the log opens now, the first
 *                        time (a damaged model never touches the log); the
 *                        machine, its read bandwidth and the model make a
 *                        session row
 *   ui_runlog_run        a run under the session's settings: the open run
 *                        ends, the profiler's totals start again, a run row
 *   ui_runlog_mark       after a prefill: the figures count from here; a
 *                        flush when one is due
 *   ui_runlog_token      after each decode token: its expert counts join
 *                        the run's figures; a flush (tokens, totals and the
 *                        figures) every 64 tokens or half second
 *   ui_runlog_run_end    the run's last flush
 *   ui_runlog_free       the same, and the log closed
 *
 * Failure.  A log that cannot be opened or written costs one warning, in
 * ui_log_warning's words, said through the program's callback; the log is
 * closed and logging stops for the rest of the program (no later model
 * tries it again).  Inference never stops for the log, and the figures are
 * counted with or without it (--no-log): `cflow run` prints them and the
 * TUI's panes show them.
 *
 * The expert figures (ui_xio.c) of a run are its decode tokens' only: the
 * counts of each token since the mark before it, so a prefill between
 * two replies (cflow-tui) or a context refill is left out, and tok/s is
 * the engine's decode rate over the same tokens.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "prof/prof.h"
#include "ui/common/ui.h"

int ui_log_open(prof_log **out, const char *db, unsigned flags, char *err, size_t errlen)
{
    char path[PATH_MAX];
    *out = NULL;
    if (db)
        snprintf(path, sizeof path, "%s", db);
    else if (prof_log_default_path(path, sizeof path)) {
        snprintf(err, errlen, "(nowhere: no $HOME, $XDG_DATA_HOME or $CFLOW_DB; "
                              "give --db PATH)");
        return -1;
    }
    if (!(flags & PROF_LOG_CREATE) && access(path, F_OK) != 0) {
        if (errno != ENOENT) {
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
            return -1;
        }
        snprintf(err, errlen, "%s", path);
        return 1;
    }
    if (prof_log_open(out, path, flags, err, errlen)) {
        *out = NULL;
        return -1;
    }
    return 0;
}

void ui_log_warning(char *buf, size_t n, const char *why)
{
    snprintf(buf, n, "warning: run log %s; continuing without logging", why);
}

void ui_say_stderr(void *ud, const char *line)
{
    ui_eprintf("%s: %s\n", (const char *)ud, line);
}

struct ui_runlog {
    const char  *db, *program;
    int          no_log, failed;
    ui_say_fn    say;
    void        *say_ud;
    prof_log    *log;
    /* the session */
    eng_session *s;
    prof        *p;            /* the profiler on s, NULL none */
    int          logged;       /* the session has its row */
    double       bw, disk_gbs; /* read and storage bandwidth, GB/s; 0 unknown */
    char         bw_src[256];  /* where bw came from (ui_read_bw) */
    /* the run */
    int          run_open;
    int64_t      run_id;       /* its row, 0 none */
    eng_stats    was;          /* the counts at the last mark or token */
    prof_xio_fig xio;          /* its decode tokens' expert counts */
    uint64_t     n_gen;        /* ... and their number and time */
    double       decode_s;
};

ui_runlog *ui_runlog_new(const char *db, int no_log, const char *program, ui_say_fn say,
                         void *ud)
{
    ui_runlog *rl = calloc(1, sizeof *rl);
    if (!rl)
        return NULL;
    rl->db = db;
    rl->no_log = no_log;
    rl->program = program;
    rl->say = say ? say : ui_say_stderr;
    rl->say_ud = say ? ud : (void *)"cflow";
    return rl;
}

void ui_runlog_fail(ui_runlog *rl, const char *why)
{
    char msg[1200];
    if (rl->failed)
        return;
    ui_log_warning(msg, sizeof msg, why);
    rl->failed = 1;
    prof_log_close(rl->log);
    rl->log = NULL;
    rl->logged = 0;
    rl->run_id = 0;
    rl->say(rl->say_ud, msg);
}

prof_log *ui_runlog_log(ui_runlog *rl)
{
    char err[1024];
    if (!rl->log && !rl->no_log && !rl->failed &&
        ui_log_open(&rl->log, rl->db, PROF_LOG_CREATE, err, sizeof err))
        ui_runlog_fail(rl, err);
    return rl->log;
}

const char *ui_runlog_path(const ui_runlog *rl)
{
    return rl && rl->log ? prof_log_path(rl->log) : NULL;
}

int ui_runlog_logging(const ui_runlog *rl) { return rl && rl->log && rl->logged; }

/* ---- the machine's read bandwidth ---------------------------------------
 * Every "% of read bw" (cflow run, cflow bench, cflow-tui) divides by one
 * figure, ui_read_bw's: the median `cflow bench membw` recorded for this
 * host at the thread count that runs, measured and recorded the same way
 * when there is none, and described with where it came from. */
/* Measure at n threads and record in l (NULL: not recorded); a failure to
 * record goes to fail(rl) when rl is given.  0, or an exit code after a
 * message. */
static int membw_measure(prof_log *l, ui_runlog *rl, int n, unsigned passes, prof_membw *r)
{
    if (prof_measure_membw(n, passes, r))
        return ui_error("bench membw: the measurement failed (out of memory?)");
    if (l) {
        ui_logsess ls;
        char err[1024];
        prof_machine m = ui_host(&ls, "");
        if (prof_log_membw(l, &m, r, err, sizeof err) && rl)
            ui_runlog_fail(rl, err);
    }
    return 0;
}

int ui_membw_measure(ui_runlog *rl, int n, unsigned passes, prof_membw *r)
{
    return membw_measure(rl ? ui_runlog_log(rl) : NULL, rl, n, passes, r);
}

/* ui_read_bw over the log l (NULL: none), rl (may be NULL) told of a
 * failed record. */
static double read_bw(prof_log *l, ui_runlog *rl, int n, int measure, char *src,
                      size_t srclen)
{
    prof_membw r;
    char when[32];
    double bw = 0.0;
    const char *env = getenv("CFLOW_READ_BW_GBS");
    if (env && *env && !ui_parse_float(env, 0.001, 1e6, &bw) && bw > 0) {
        snprintf(src, srclen, "%.2f GB/s (from CFLOW_READ_BW_GBS)", bw);
        return bw;
    }
    ui_logsess ls;
    prof_machine m = ui_host(&ls, "");
    if (l && prof_log_membw_find(l, &m, n, &r, when) == 0) {
        snprintf(src, srclen, "%.2f GB/s (%d threads, median of %u passes, %.2f-%.2f, "
                 "measured %s; from the run log)", r.median_gbs, n, r.passes, r.min_gbs,
                 r.max_gbs, when);
        return r.median_gbs;
    }
    if (!measure) {
        snprintf(src, srclen, "unknown (none recorded for %d threads: run `cflow bench "
                 "membw -t %d`)", n, n);
        return 0.0;
    }
    if (membw_measure(l, rl, n, UI_MEMBW_PASSES, &r)) {
        snprintf(src, srclen, "unknown (the measurement failed)");
        return 0.0;
    }
    snprintf(src, srclen, "%.2f GB/s (%d threads, median of %u passes, %.2f-%.2f; none "
             "recorded for this host: measured now%s)", r.median_gbs, n, r.passes, r.min_gbs,
             r.max_gbs, l ? ", recorded in the run log" : "");
    return r.median_gbs;
}

/* One lookup for every "% of read bw": `cflow run`, `cflow bench`,
 * cflow-tui and `cflow serve` divide by the same stored median (issue 18). */
double ui_read_bw(ui_runlog *rl, int n, int measure, char *src, size_t srclen)
{
    return read_bw(rl ? ui_runlog_log(rl) : NULL, rl, n, measure, src, srclen);
}

double ui_read_bw_log(prof_log *l, int n, char *src, size_t srclen)
{
    return read_bw(l, NULL, n, l != NULL, src, srclen);
}

/* The run's flush, with its figures as they stand. */
static void flush(ui_runlog *rl, int final)
{
    char err[1024];
    prof_xio_fig f;
    if (!rl->run_open || !rl->log || !rl->logged || !rl->p)
        return;
    prof_log_set_xio(rl->log, ui_runlog_xio(rl, &f) ? &f : NULL);
    if (prof_log_flush(rl->log, rl->p, final, err, sizeof err))
        ui_runlog_fail(rl, err);
}

void ui_runlog_run_end(ui_runlog *rl)
{
    if (!rl)
        return;
    flush(rl, 1);
    rl->run_open = 0;
}

void ui_runlog_session(ui_runlog *rl, eng_session *s, prof *p, const char *model,
                       const char *named, double read_bw)
{
    char err[1024];
    ui_logsess ls;
    ui_runlog_run_end(rl);
    rl->s = s;
    rl->p = p;
    rl->logged = 0;
    rl->run_id = 0;
    prof_log *l = ui_runlog_log(rl);
    /* the machine, its read bandwidth at the session's threads (ui_read_bw:
     * the membw figure the log keeps, else measured now and recorded) */
    ls.m = ui_host(&ls, eng_isa(s));
    if (read_bw >= 0) {
        rl->bw = read_bw;
        snprintf(rl->bw_src, sizeof rl->bw_src, "%.2f GB/s", read_bw);
    } else
        rl->bw = ui_read_bw(l ? rl : NULL, eng_threads(s), l != NULL, rl->bw_src,
                            sizeof rl->bw_src);
    ls.m.read_bw_gbs = rl->bw;
    rl->disk_gbs = ui_disk_bw(rl->log, model);
    if (!(l = rl->log))   /* the bandwidth's record may have failed it */
        return;
    if (ui_logsess_model(&ls, model, named, eng_hparams(s), err, sizeof err) ||
        prof_log_session(l, &ls.m, &ls.mi, rl->program, err, sizeof err)) {
        ui_runlog_fail(rl, err);
        return;
    }
    rl->logged = 1;
}

/* A flush when one is due. */
static void flush_due(ui_runlog *rl)
{
    if (rl->log && rl->logged && rl->p && prof_log_due(rl->log, rl->p))
        flush(rl, 0);
}

void ui_runlog_mark(ui_runlog *rl)
{
    if (!rl || !rl->run_open)
        return;
    eng_get_stats(rl->s, &rl->was);
    flush_due(rl);
}

void ui_runlog_run(ui_runlog *rl, const eng_sampling *sp)
{
    char err[1024];
    eng_stats es;
    ui_runlog_run_end(rl);
    if (!rl->s)
        return;
    eng_get_stats(rl->s, &es);
    if (rl->p)
        prof_run_begin(rl->p, es.bytes_per_token, rl->bw);
    memset(&rl->xio, 0, sizeof rl->xio);
    rl->n_gen = 0;
    rl->decode_s = 0;
    rl->was = es;
    rl->run_open = 1;
    rl->run_id = 0;
    if (!ui_runlog_logging(rl) || !rl->p)
        return;
    prof_run_cfg rc;
    ui_logsess_run_cfg(rl->s, sp, &rc);
    if (prof_log_run_begin(rl->log, rl->p, &rc, &rl->run_id, err, sizeof err))
        ui_runlog_fail(rl, err);
}

void ui_runlog_token(ui_runlog *rl)
{
    eng_stats now;
    if (!rl || !rl->run_open)
        return;
    eng_get_stats(rl->s, &now);
    ui_xio_accum(&rl->xio, &now, &rl->was);
    rl->n_gen += now.n_gen - rl->was.n_gen;
    rl->decode_s += now.decode_s - rl->was.decode_s;
    rl->was = now;
    flush_due(rl);
}

void ui_runlog_flush(ui_runlog *rl)
{
    if (rl)
        flush(rl, 0);
}

int ui_runlog_xio(const ui_runlog *rl, prof_xio_fig *f)
{
    *f = rl->xio;
    f->tok_s = rl->decode_s > 0 ? (double)rl->n_gen / rl->decode_s : 0.0;
    f->disk_gbs = rl->disk_gbs;
    prof_xio_derive(f);
    return ui_xio_shown(f);
}

const char *ui_runlog_bw_src(const ui_runlog *rl) { return rl->bw_src; }

int64_t ui_runlog_run_id(const ui_runlog *rl) { return rl ? rl->run_id : 0; }

void ui_runlog_free(ui_runlog *rl)
{
    if (!rl)
        return;
    ui_runlog_run_end(rl);
    prof_log_close(rl->log);
    free(rl);
}
