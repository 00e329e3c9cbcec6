/*
 * cmd_run_log.c — what makes `cflow run` profile and log itself, and the
 * figures it prints about the run on stderr.
 *
 * A profiler on the session, the run log opened after the model (a
 * damaged model never touches the log: ui_log_open), one session and one
 * run per `cflow run`, a flush every 64 tokens or half second.  A log that
 * cannot be opened or written costs one warning (ui_log_warning's wording)
 * and logging stops; inference always goes on.  The expert streaming
 * figures (ui_xio.c) cover the decode tokens: the counters are taken when
 * decoding begins (ui_runlog_decode), and every flush writes them.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "prof/prof.h"
#include "ui/cli/cli.h"

#define MIB (1024.0 * 1024.0)

struct ui_runlog {
    eng_session *s;
    prof        *prof;
    prof_log    *log;
    int64_t      run_id;
    double       disk_gbs;      /* storage bandwidth of the model's device; 0 none */
    eng_stats    dec0;          /* the counters when decoding began (ui_runlog_decode) */
    char         bw_src[256];   /* where the read bandwidth came from (ui_read_bw) */
};

/* The run's expert figures (ui_xio_figures) over its decode tokens, the
 * ones the tok/s and the limit are about; 0 when the run routes no
 * experts through sync/staged reads. */
static int run_xio(const ui_runlog *rl, prof_xio_fig *f)
{
    eng_stats es;
    eng_get_stats(rl->s, &es);
    double dt = es.decode_s - rl->dec0.decode_s;
    ui_xio_figures(&es, &rl->dec0, dt > 0 ? (double)(es.n_gen - rl->dec0.n_gen) / dt : 0.0,
                   rl->disk_gbs, f);
    return ui_xio_shown(f);
}

void ui_runlog_decode(ui_runlog *rl)
{
    if (rl)
        eng_get_stats(rl->s, &rl->dec0);
}

/* Flush what is due (all, when final) with the expert figures of now. */
static int run_flush(ui_runlog *rl, int final, char *err, size_t errlen)
{
    prof_xio_fig f;
    prof_log_set_xio(rl->log, run_xio(rl, &f) ? &f : NULL);
    return prof_log_flush(rl->log, rl->prof, final, err, errlen);
}

/* The log cannot be written: say so once and stop logging. */
static void runlog_warn(ui_runlog *rl, const char *why)
{
    char msg[1200];
    ui_log_warning(msg, sizeof msg, why);
    ui_eprintf("cflow: %s\n", msg);
    prof_log_close(rl->log);
    rl->log = NULL;
}

ui_runlog *ui_runlog_start(eng_session *s, const char *model, const ui_run_cfg *c)
{
    ui_runlog *rl = calloc(1, sizeof *rl);
    const fmt_hparams *hp = eng_hparams(s);
    char err[1024];
    eng_stats es;

    if (!rl)
        return NULL;
    rl->s = s;
    if (!c->no_profile || !c->no_log) {
        /* logging without --profile still needs token timings */
        unsigned what = c->no_profile ? 0 : PROF_ALL;
        if (prof_new(&rl->prof, what, hp->n_layers, err, sizeof err)) {
            ui_eprintf("cflow: warning: %s; not profiling\n", err);
            return rl;
        }
        eng_set_prof(s, rl->prof);
    }
    if (!c->no_log && ui_log_open(&rl->log, c->db, PROF_LOG_CREATE, err, sizeof err))
        runlog_warn(rl, err);

    /* the machine, its read bandwidth at the session's threads (ui_read_bw:
     * the membw figure the log keeps, else measured now and recorded) */
    ui_logsess ls;
    ui_logsess_machine(&ls, s, rl->log);
    snprintf(rl->bw_src, sizeof rl->bw_src, "%s", ls.bw_src);
    rl->disk_gbs = ui_disk_bw(rl->log, model);
    eng_get_stats(s, &es);
    if (rl->prof)
        prof_run_begin(rl->prof, es.bytes_per_token, ls.m.read_bw_gbs);
    if (!rl->log)
        return rl;
    if (ui_logsess_model(&ls, model, c->named, hp, err, sizeof err)) {
        runlog_warn(rl, err);
        return rl;
    }
    prof_run_cfg rc;
    ui_logsess_run_cfg(s, c->sp, &rc);
    if (prof_log_session(rl->log, &ls.m, &ls.mi, "cflow run", err, sizeof err) ||
        prof_log_run_begin(rl->log, rl->prof, &rc, &rl->run_id, err, sizeof err))
        runlog_warn(rl, err);
    return rl;
}

void ui_runlog_token(ui_runlog *rl)
{
    char err[1024];
    if (!rl || !rl->log || !prof_log_due(rl->log, rl->prof))
        return;
    if (run_flush(rl, 0, err, sizeof err))
        runlog_warn(rl, err);
}

/* "binding: dense on 3 of 4 layers, attention on 1" into buf: the stream
 * that binds most layers first. */
static void binding_text(const unsigned cnt[PROF_NST], unsigned n, char *buf, size_t len)
{
    int order[3] = { 0, 1, 2 };
    for (int i = 0; i < 3; i++)
        for (int j = i + 1; j < 3; j++)
            if (cnt[order[j]] > cnt[order[i]]) {
                int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
    size_t o = (size_t)snprintf(buf, len, "binding: %s on %u of %u layers",
                                ui_byte_stream[order[0]], cnt[order[0]], n);
    for (int i = 1; i < 3 && o < len; i++)
        if (cnt[order[i]])
            o += (size_t)snprintf(buf + o, len - o, ", %s on %u", ui_byte_stream[order[i]],
                                  cnt[order[i]]);
}

/* The run's layers, bytes, counters, expert I/O and bandwidth on stderr. */
static void print_figures(const ui_runlog *rl)
{
    prof_totals t;
    prof_totals_get(rl->prof, &t);
    if (prof_what(rl->prof) & PROF_LAYERS) {
        double all = 0;
        for (int k = 0; k < PROF_NST; k++)
            all += t.st[k];
        fprintf(stderr, "cflow: layers:");
        for (int k = 0; k < PROF_NST; k++)
            fprintf(stderr, "%s %s %.3f ms (%.0f%%)", k ? "," : "", prof_stream_name(k),
                    t.st[k] * 1e3, all > 0 ? 100.0 * t.st[k] / all : 0.0);
        fputc('\n', stderr);
    }
    /* per decode token: what the critical path predicts (a batched
     * prefill streams the weights once for many tokens) */
    uint64_t nt = t.n_gen;
    if (nt) {
        double b[3], all = 0;
        for (int k = 0; k < 3; k++)
            all += (b[k] = (double)t.dec_bytes[k] / (double)nt);
        fprintf(stderr,
                "cflow: bytes/token: streamed %.3f MiB (attention %.3f, dense %.3f,"
                " experts %.3f)",
                all / MIB, b[0] / MIB, b[1] / MIB, b[2] / MIB);
        if (t.cp_layers) {
            char bind[128];
            binding_text(t.cp_binding, t.cp_layers, bind, sizeof bind);
            fprintf(stderr, "; critical path %.3f MiB of naive %.3f MiB (%s)",
                    t.cp_critical / MIB, t.cp_naive / MIB, bind);
        }
        fputc('\n', stderr);
    }
    if (prof_what(rl->prof) & PROF_COUNTERS) {
        const char *why[PROF_NEV];
        char line[2048];
        for (int e = 0; e < PROF_NEV; e++)
            why[e] = prof_ev_reason(rl->prof, e);
        prof_counters_line(t.ev, why, line, sizeof line);
        ui_eprintf("cflow: counters: %s\n", line);
    }
    prof_io_fig io;
    prof_io_get(rl->prof, PROF_IO_ALL, &io);
    char mode[32];
    ui_expert_io_text(rl->s, mode, sizeof mode);
    if (io.bytes) {
        int direct = eng_expert_io_direct(rl->s);
        fprintf(stderr,
                "cflow: expert I/O %s, %s: read %.1f MiB in %.3f s, stall %.3f s, "
                "compute %.3f s; %.0f%% of the read time hidden; model (C + IO) / "
                "max(C, IO_eff) = %.2fx\n",
                mode, direct > 0 ? "O_DIRECT" : "buffered", (double)io.bytes / MIB, io.io_s,
                io.stall_s, io.c_s, 100.0 * io.hidden, io.pred);
    }
    prof_xio_fig f;
    char xl[UI_XIO_LINES][160];
    eng_stats es;
    eng_get_stats(rl->s, &es);
    char rt[96];
    int nl = run_xio(rl, &f) ? ui_xio_lines(&f, es.xio_cache_bytes,
                                            ui_routing_text(rl->s, rt, sizeof rt), xl) : 0;
    for (int i = 0; i < nl; i++)
        ui_eprintf("cflow: experts %s: %s\n", mode, xl[i]);
    if (t.n_gen && t.read_bw_gbs > 0)
        fprintf(stderr,
                "cflow: bandwidth: decode %.2f GB/s of weights, %.1f%% of the"
                " machine's read bandwidth %s\n", t.gb_s, 100.0 * t.bw_share, rl->bw_src);
    else if (t.n_gen && rl->log)
        fprintf(stderr, "cflow: bandwidth: decode %.2f GB/s of weights; the machine's read "
                "bandwidth is %s\n", t.gb_s, rl->bw_src);
}

void ui_runlog_end(ui_runlog *rl, int print)
{
    char err[1024];
    if (!rl)
        return;
    if (rl->log && run_flush(rl, 1, err, sizeof err))
        runlog_warn(rl, err);
    if (print && rl->prof)
        print_figures(rl);
    if (print && rl->log)
        ui_eprintf("cflow: logged run %lld in %s\n", (long long)rl->run_id,
                prof_log_path(rl->log));
    prof_log_close(rl->log);
    eng_set_prof(rl->s, NULL);
    prof_free(rl->prof);
    free(rl);
}

