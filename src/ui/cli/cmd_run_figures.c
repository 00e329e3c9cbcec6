/*
 * cmd_run_figures.c — the profiler of a `cflow run` and what the run says
 * about itself on stderr after its text: the layers' times, the bytes a
 * decode token streamed against the critical path, the counters, the
 * expert I/O and the share of the machine's read bandwidth.  The run log
 * is written by ui_runlog (src/ui/common), as cflow-tui and `cflow bench`
 * write it.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "prof/prof.h"
#include "ui/cli/cli.h"

#define MIB (1024.0 * 1024.0)

prof *ui_run_prof(eng_session *s, int no_profile, int no_log)
{
    char err[1024];
    prof *p = NULL;
    if (no_profile && no_log)
        return NULL;
    /* logging without profiling still needs the token timings */
    if (prof_new(&p, no_profile ? 0 : PROF_ALL, eng_hparams(s)->n_layers, err, sizeof err)) {
        ui_eprintf("cflow: warning: %s; not profiling\n", err);
        return NULL;
    }
    eng_set_prof(s, p);
    return p;
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

void ui_run_figures(const ui_runlog *rl, eng_session *s, prof *p)
{
    prof_totals t;
    if (!p)
        return;
    prof_totals_get(p, &t);
    if (prof_what(p) & PROF_LAYERS) {
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
    if (prof_what(p) & PROF_COUNTERS) {
        const char *why[PROF_NEV];
        char line[2048];
        for (int e = 0; e < PROF_NEV; e++)
            why[e] = prof_ev_reason(p, e);
        prof_counters_line(t.ev, why, line, sizeof line);
        ui_eprintf("cflow: counters: %s\n", line);
    }
    prof_io_fig io;
    prof_io_get(p, PROF_IO_ALL, &io);
    char mode[32];
    ui_expert_io_text(s, mode, sizeof mode);
    if (io.bytes) {
        int direct = eng_expert_io_direct(s);
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
    eng_get_stats(s, &es);
    char rt[96];
    int nl = ui_runlog_xio(rl, &f) ? ui_xio_lines(&f, es.xio_cache_bytes,
                                                  ui_routing_text(s, rt, sizeof rt), xl) : 0;
    for (int i = 0; i < nl; i++)
        ui_eprintf("cflow: experts %s: %s\n", mode, xl[i]);
    if (t.n_gen && t.read_bw_gbs > 0)
        fprintf(stderr,
                "cflow: bandwidth: decode %.2f GB/s of weights, %.1f%% of the"
                " machine's read bandwidth %s\n", t.gb_s, 100.0 * t.bw_share,
                ui_runlog_bw_src(rl));
    else if (t.n_gen && ui_runlog_path(rl))
        fprintf(stderr, "cflow: bandwidth: decode %.2f GB/s of weights; the machine's read "
                "bandwidth is %s\n", t.gb_s, ui_runlog_bw_src(rl));
}
