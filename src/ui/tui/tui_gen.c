/*
 * tui_gen.c — the generation thread of cflow-tui: its jobs (/model in
 * steps: load_*), settings, snapshot and runs, logged through ui_runlog
 * (src/ui/common) as cflow run logs them (the conversation and the reply:
 * tui_gen_conv.c; the thread's loop, start and end: tui_gen_thread.c; the
 * state all three share: tui_gen_impl.h).
 *
 * It owns the engine session, its sampler, the profiler attached to it and
 * the run log's writer; nothing else touches them (the UI reads the
 * profiler's ring and per-layer atomics, which prof.c makes safe, under
 * the read side of plock; models are swapped under the write side).
 *
 * Jobs.  The UI posts jobs (a prompt, regenerate, load a model, clear) and
 * is told through wake_fd when each is done.  They queue behind a model
 * being loaded or a clear (a prompt typed while the model loads is
 * answered once it is there), but not behind a reply: a prompt posted while
 * one is being generated is refused, and the UI says so.  Settings (threads,
 * sampling, ...) are posted separately and applied between tokens; a
 * change marks the run "dirty" and the next token opens a new run in the
 * run log, so every run has one configuration.
 *
 * The screen before the cores.  When a prompt is sent, the UI has the
 * most to draw (the prompt, the new reply, the reset panes: ~2 frames) at
 * the moment the engine starts to take every core.  On a machine with no
 * idle core that drawing ran beside the first tokens and slowed them, so
 * the thread shows its change (show_wait: wake the UI, wait for a frame
 * begun after it) before the prefill and before the first token.  The
 * wait is bounded (SHOW_WAIT_MS): a stalled terminal delays a reply by at
 * most that, and the engine never waits on the UI for anything else.
 * While the reply streams the UI draws at its 10 Hz cadence as before.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/kern.h"
#include "ui/tui/tui.h"
#include "ui/tui/tui_gen_impl.h"
#include "ui/common/ui.h"

/* ---- settings ---------------------------------------------------------- */
void tui_settings_free(tui_settings *s)
{
    free(s->system);
    s->system = NULL;
}

void tui_settings_copy(tui_settings *dst, const tui_settings *src)
{
    char *sys = src->system ? strdup(src->system) : NULL;
    free(dst->system);
    *dst = *src;
    dst->system = sys;
}

void tui_gen_wake(tui_gen *g)
{
    char b = 1;
    if (g->cfg.wake_fd >= 0 && write(g->cfg.wake_fd, &b, 1) < 0) {
        /* a full pipe already wakes the UI */
    }
}

enum { SHOW_WAIT_MS = 50 };

/* Wake the UI and wait (at most SHOW_WAIT_MS) for a frame that began after
 * this call, so the screen has the change before the decode takes the
 * cores (see the top of the file). */
void tui_gen_show_wait(tui_gen *g)
{
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_nsec += SHOW_WAIT_MS * 1000000L;
    dl.tv_sec += dl.tv_nsec / 1000000000L;
    dl.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&g->draw_mu);
    uint64_t want = ++g->draw_req;
    tui_gen_wake(g);   /* a non-blocking pipe: never waits under the lock */
    while (g->drawn < want)
        if (pthread_cond_timedwait(&g->draw_cv, &g->draw_mu, &dl) == ETIMEDOUT)
            break;
    pthread_mutex_unlock(&g->draw_mu);
}

uint64_t tui_gen_frame_begin(tui_gen *g)
{
    pthread_mutex_lock(&g->draw_mu);
    uint64_t r = g->draw_req;
    pthread_mutex_unlock(&g->draw_mu);
    return r;
}

void tui_gen_frame_done(tui_gen *g, uint64_t seen)
{
    pthread_mutex_lock(&g->draw_mu);
    if (seen > g->drawn) {
        g->drawn = seen;
        pthread_cond_broadcast(&g->draw_cv);
    }
    pthread_mutex_unlock(&g->draw_mu);
}

void tui_gen_note(tui_gen *g, int role, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tui_chat_addv(g->cfg.chat, role, fmt, ap);
    va_end(ap);
    tui_gen_wake(g);
}

static void eng_log_cb(void *ud, int level, const char *msg)
{
    tui_gen *g = ud;
    if (level >= 1)
        tui_gen_note(g, level >= 2 ? TUI_ERROR : TUI_NOTE, "%s", msg);
}

/* ---- the snapshot ------------------------------------------------------ */
void tui_gen_snap_refresh(tui_gen *g, int state)
{
    pthread_mutex_lock(&g->snap_mu);
    tui_snap *sn = &g->snap;
    sn->state = state;
    sn->loaded = g->s != NULL;
    if (g->s) {
        sn->n_ctx = eng_n_ctx(g->s);
        sn->n_past = eng_n_past(g->s);
        sn->threads = eng_threads(g->s);
    }
    if (g->p) {
        prof_totals_get(g->p, &sn->tot);
        sn->have_tot = 1;
        for (unsigned l = 0; l < g->lay_n; l++)
            for (int k = 0; k < PROF_NST; k++) {
                g->lay_bytes[l * PROF_NST + k] = prof_layer_streamed(g->p, l, (enum prof_stream)k);
                g->lay_sec[l * PROF_NST + k] = prof_layer_seconds(g->p, l, (enum prof_stream)k);
            }
        for (unsigned l = 0; g->lay_io && l <= g->lay_n; l++)
            prof_io_get(g->p, l < g->lay_n ? l : PROF_IO_ALL, &g->lay_io[l]);
    }
    if (g->s) {   /* what the engine runs, not what was asked */
        sn->prefetch = eng_prefetch(g->s);
        snprintf(sn->expert_io, sizeof sn->expert_io, "%s",
                 eng_expert_io_name(eng_expert_io(g->s)));
        sn->expert_direct = eng_expert_io_direct(g->s);
        sn->expert_io_auto = eng_expert_io_auto(g->s);
        sn->expert_ahead = eng_hparams(g->s)->n_experts ? eng_expert_ahead(g->s) : -1;
        if (!ui_routing_text(g->s, sn->routing, sizeof sn->routing))
            sn->routing[0] = '\0';
        eng_stats es;
        eng_get_stats(g->s, &es);
        sn->cache_bytes = es.xio_cache_bytes;
        ui_runlog_xio(g->rl, &sn->xio);   /* the figures of the run's decode tokens */
    } else {
        sn->expert_ahead = -1;
        sn->prefetch = g->cur.prefetch > 0;
        snprintf(sn->expert_io, sizeof sn->expert_io, "%s",
                 g->cur.expert_io[0] ? g->cur.expert_io : eng_expert_io_name(ENG_XIO_MMAP));
    }
    sn->sp = g->cur.sp;
    sn->n_predict = g->cur.n_predict;
    sn->ignore_eos = g->cur.ignore_eos;
    sn->run_id = ui_runlog_run_id(g->rl);
    sn->version++;
    pthread_mutex_unlock(&g->snap_mu);
}

unsigned tui_gen_layers(tui_gen *g, uint64_t (*bytes)[PROF_NST], double (*sec)[PROF_NST],
                        prof_io_fig *io, prof_io_fig *io_all, unsigned max, uint64_t *n_gen)
{
    pthread_mutex_lock(&g->snap_mu);
    unsigned n = g->lay_n < max ? g->lay_n : max;
    /* (n is 0 and the arrays NULL until a model's first pass: memcpy
     * must not see a NULL source even for 0 bytes) */
    if (bytes && n)
        memcpy(bytes, g->lay_bytes, (size_t)n * PROF_NST * sizeof **bytes);
    if (sec && n)
        memcpy(sec, g->lay_sec, (size_t)n * PROF_NST * sizeof **sec);
    if (io && n)
        memcpy(io, g->lay_io, (size_t)n * sizeof *io);
    if (io_all && g->lay_io)
        *io_all = g->lay_io[g->lay_n];
    *n_gen = g->snap.tot.n_gen;
    pthread_mutex_unlock(&g->snap_mu);
    return n;
}

void tui_gen_snap(tui_gen *g, tui_snap *out)
{
    pthread_mutex_lock(&g->snap_mu);
    *out = g->snap;
    pthread_mutex_unlock(&g->snap_mu);
}

prof *tui_gen_prof_lock(tui_gen *g)
{
    pthread_rwlock_rdlock(&g->plock);
    return g->p;
}

void tui_gen_prof_unlock(tui_gen *g) { pthread_rwlock_unlock(&g->plock); }

void tui_gen_log_path(tui_gen *g, char *buf, size_t n)
{
    pthread_mutex_lock(&g->snap_mu);
    snprintf(buf, n, "%s", g->snap.log_path);
    pthread_mutex_unlock(&g->snap_mu);
}

/* ---- the run log (ui_runlog: the writer every program shares) ---------- */
/* The log cannot be written: said once in the chat, in cflow's words;
 * the writer stops logging and no later model tries it again. */
static void log_said(void *ud, const char *line)
{
    tui_gen *g = ud;
    tui_gen_note(g, TUI_NOTE, "%s", line);
    pthread_mutex_lock(&g->snap_mu);
    g->snap.log_path[0] = 0;
    pthread_mutex_unlock(&g->snap_mu);
}

int tui_gen_log_new(tui_gen *g)
{
    g->rl = ui_runlog_new(g->cfg.db, g->cfg.no_log, TUI_NAME, log_said, g);
    return g->rl ? 0 : -1;
}

/* Add the run's tokens since rf_base to the reply's figures. */
void tui_gen_reply_take(tui_gen *g)
{
    prof_totals t;
    if (!g->in_reply || !g->p)
        return;
    prof_totals_get(g->p, &t);
    g->rf_prompt += t.n_prompt - g->rf_base.n_prompt;
    g->rf_gen += t.n_gen - g->rf_base.n_gen;
    g->rf_prefill_s += t.prefill_s - g->rf_base.prefill_s;
    g->rf_decode_s += t.decode_s - g->rf_base.decode_s;
    g->rf_base = t;
}

/* A new run under the current settings (the previous one is finished). */
void tui_gen_run_begin(tui_gen *g)
{
    ui_runlog_run_end(g->rl);
    if (!g->s || !g->p)
        return;
    tui_gen_reply_take(g);   /* before the profiler's totals restart */
    ui_runlog_run(g->rl, &g->cur.sp);
    if (g->in_reply)
        prof_totals_get(g->p, &g->rf_base);   /* the new run's zeros */
    g->run_dirty = 0;
}

/* A session for the model just loaded (the log opens with the first). */
static void log_session(tui_gen *g, const char *model, const char *named)
{
    ui_runlog_session(g->rl, g->s, g->p, model, named, -1);
    const char *path = ui_runlog_path(g->rl);
    pthread_mutex_lock(&g->snap_mu);
    snprintf(g->snap.log_path, sizeof g->snap.log_path, "%s", path ? path : "");
    snprintf(g->snap.bw_src, sizeof g->snap.bw_src, "%s", ui_runlog_bw_src(g->rl));
    pthread_mutex_unlock(&g->snap_mu);
}

/* /expert-ahead's on/off and depth into the session.  A refusal is said
 * once per model and value asked (ahead_refused_on, _layers); the wish
 * stays, so that /model opens the next model with it.  On is set first,
 * and the depth only while on: where on is refused (look-ahead was off at
 * the open) the depth would be refused for the same reason. */
static void apply_ahead(tui_gen *g)
{
    char err[1024];
    const int on = g->cur.expert_ahead, layers = g->cur.expert_ahead_layers;
    if (on >= 0 && on != (eng_expert_ahead(g->s) > 0)) {
        if (on && g->ahead_refused_on)
            return;
        if (eng_set_expert_ahead(g->s, on, err, sizeof err)) {
            tui_gen_note(g, TUI_ERROR, "look-ahead on: %s (it stays off; /model opens a "
                         "model with it on)", err);
            g->ahead_refused_on = 1;
            return;
        }
    }
    const int now = eng_expert_ahead(g->s);   /* layers, 0 off: the depth waits for on */
    if (layers > 0 && now > 0 && layers != now && layers != g->ahead_refused_layers &&
        eng_set_expert_ahead_layers(g->s, layers, err, sizeof err)) {
        tui_gen_note(g, TUI_ERROR, "look-ahead of %d layers: %s (it stays as it was; /model "
                     "opens a model with it)", layers, err);
        g->ahead_refused_layers = layers;
    }
}


/* ---- jobs -------------------------------------------------------------- */
void tui_gen_apply(tui_gen *g)
{
    pthread_mutex_lock(&g->mu);
    if (g->want_gen == g->cur_gen) {
        pthread_mutex_unlock(&g->mu);
        return;
    }
    tui_settings_copy(&g->cur, &g->want);
    g->cur_gen = g->want_gen;
    pthread_mutex_unlock(&g->mu);
    if (g->s) {
        char err[256];
        /* only a changed request: eng_set_threads restarts the workers */
        if (g->cur.threads != g->threads_req) {
            if (eng_set_threads(g->s, g->cur.threads))
                tui_gen_note(g, TUI_ERROR, "cannot set %d threads", g->cur.threads);
            g->threads_req = g->cur.threads;
        }
        if (g->smp)
            eng_sampler_set(g->smp, &g->cur.sp);
        if (g->cur.prefetch >= 0 && g->cur.prefetch != eng_prefetch(g->s) &&
            eng_set_prefetch(g->s, g->cur.prefetch))
            tui_gen_note(g, TUI_ERROR, "cannot turn prefetch %s", g->cur.prefetch ? "on" : "off");
        int mode = g->cur.expert_io[0] ? eng_expert_io_from_name(g->cur.expert_io) : -1;
        if (mode >= 0 && mode != eng_expert_io(g->s) &&
            eng_set_expert_io(g->s, mode, err, sizeof err))
            tui_gen_note(g, TUI_ERROR, "expert I/O %s: %s (it stays %s)", g->cur.expert_io, err,
                 eng_expert_io_name(eng_expert_io(g->s)));
        apply_ahead(g);
    }
    g->run_dirty = 1;
    tui_gen_snap_refresh(g, g->snap.state);
}

/* A prompt template as /mode and the status line name it. */
static const char *mode_name(enum eng_chat t)
{
    return t == ENG_CHAT_NONE ? "completion" : eng_chat_name(t);
}

/* ---- /model PATH: a model loaded in steps ------------------------------
 * resolve (a GGUF, HF folder or llama2.c file: its conversion in the
 * cache), open with the options in force, make what the model needs (a
 * profiler, a sampler, the per-layer sums), then swap it in under the
 * three locks the UI reads through, fill the snapshot, start a session in
 * the run log and say so.  Until the swap nothing of the loaded model is
 * touched: a step that fails leaves it in place, and says so once. */
typedef struct load {
    const char  *named;            /* the model as the user gave it */
    char         path[sizeof ((tui_snap *)0)->model];   /* the file opened */
    eng_session *s;
    prof        *p;
    eng_sampler *smp;
    uint64_t    *lay_bytes;        /* [n_layers][PROF_NST] */
    double      *lay_sec;          /* [n_layers][PROF_NST] */
    prof_io_fig *lay_io;           /* [n_layers + 1] */
} load;

static void load_refused(tui_gen *g, const char *err)
{
    tui_gen_note(g, TUI_ERROR, "cannot load model: %s%s", err,
                 g->s ? " (the previous model stays loaded)" : " (no model loaded: /model PATH)");
}

/* The file to open: named itself, or its conversion in the cache, made
 * now (a note in the chat counts the percent) when missing. */
static int load_resolve(tui_gen *g, load *ld)
{
    char err[1024];
    int converted;
    tui_chat_prog pr = { g->cfg.chat, ld->named, g->cfg.wake_fd, -1, -1 };
    ui_models_cb mcb = { eng_log_cb, g, tui_chat_progress, &pr };
    if (ui_models_resolve(ld->named, &mcb, ld->path, sizeof ld->path, &converted, err,
                          sizeof err)) {
        load_refused(g, err);
        return -1;
    }
    if (converted) {
        char line[PATH_MAX * 2 + 128];
        ui_models_converted_line(line, sizeof line, ld->named, ld->path);
        if (pr.idx >= 0)
            tui_chat_set(g->cfg.chat, (size_t)pr.idx, line);
        else
            tui_gen_note(g, TUI_NOTE, "%s", line);
    }
    return 0;
}

/* The engine options: the command line's, then the live settings (threads,
 * prefetch, expert I/O and look-ahead as /commands last set them). */
static void load_opts(const tui_gen *g, eng_opts *eo)
{
    *eo = g->cur.eng;
    eo->n_threads = g->cur.threads;
    eo->n_ctx = g->cfg.n_ctx;
    eo->log = eng_log_cb;
    eo->log_ud = (void *)g;
    eo->prefetch = g->cur.prefetch;   /* -1: $CFLOW_PREFETCH, else off */
    eo->expert_io = g->cur.expert_io[0] ? eng_expert_io_from_name(g->cur.expert_io) : -1;
    if (g->cur.expert_ahead >= 0)     /* /expert-ahead, else the command line's */
        eo->expert_ahead = g->cur.expert_ahead;
    if (g->cur.expert_ahead_layers > 0)
        eo->expert_ahead_layers = g->cur.expert_ahead_layers;
}

static void load_free(load *ld)
{
    eng_sampler_free(ld->smp);
    free(ld->lay_bytes);
    free(ld->lay_sec);
    free(ld->lay_io);
    prof_free(ld->p);
    eng_close(ld->s);
}

/* The session and what it needs beside it: 0, or -1 (said, all freed). */
static int load_open(tui_gen *g, load *ld)
{
    char err[1024];
    eng_opts eo;
    load_opts(g, &eo);
    if (eng_open(&ld->s, ld->path, &eo, err, sizeof err)) {
        load_refused(g, err);
        return -1;
    }
    const fmt_hparams *hp = eng_hparams(ld->s);
    if (prof_new(&ld->p, PROF_ALL, hp->n_layers, err, sizeof err)) {
        tui_gen_note(g, TUI_ERROR, "%s", err);
        load_free(ld);
        return -1;
    }
    ld->smp = eng_sampler_new(&g->cur.sp, hp->vocab_size);
    ld->lay_bytes = calloc((size_t)hp->n_layers * PROF_NST, sizeof *ld->lay_bytes);
    ld->lay_sec = calloc((size_t)hp->n_layers * PROF_NST, sizeof *ld->lay_sec);
    ld->lay_io = calloc((size_t)hp->n_layers + 1, sizeof *ld->lay_io);
    if (!ld->smp || !ld->lay_bytes || !ld->lay_sec || !ld->lay_io) {
        tui_gen_note(g, TUI_ERROR, "out of memory");
        load_free(ld);
        return -1;
    }
    return 0;
}

/* The new model for the old, under each lock the UI reads through: plock
 * (the session, its profiler, the sampler), snap_mu (the per-layer sums),
 * the chat's (a new model starts a new conversation).  ld then owns the
 * old model's pieces and frees them. */
static void load_swap(tui_gen *g, load *ld)
{
    ui_runlog_run_end(g->rl);   /* the old run's last flush, with its profiler */
#define SWAP(a, b) do { __typeof__(a) t_ = (a); (a) = (b); (b) = t_; } while (0)
    pthread_rwlock_wrlock(&g->plock);
    if (g->s)
        eng_set_prof(g->s, NULL);
    SWAP(g->s, ld->s);
    SWAP(g->p, ld->p);
    SWAP(g->smp, ld->smp);
    eng_set_prof(g->s, g->p);
    pthread_rwlock_unlock(&g->plock);

    pthread_mutex_lock(&g->snap_mu);
    SWAP(g->lay_bytes, ld->lay_bytes);
    SWAP(g->lay_sec, ld->lay_sec);
    SWAP(g->lay_io, ld->lay_io);
    g->lay_n = eng_hparams(g->s)->n_layers;
    pthread_mutex_unlock(&g->snap_mu);
#undef SWAP

    pthread_mutex_lock(&g->cfg.chat->mu);
    g->conv_first = g->cfg.chat->n;
    pthread_mutex_unlock(&g->cfg.chat->mu);
    g->threads_req = g->cur.threads;
    g->ahead_refused_on = 0;
    g->ahead_refused_layers = 0;
    g->tmpl = g->model_tmpl = eng_session_chat(g->s);   /* the model's chat template */
    g->n_kv = 0;
    g->run_dirty = 1;
}

/* What the snapshot says of the model loaded from path. */
static void load_snap(tui_gen *g, const char *path)
{
    const fmt_hparams *hp = eng_hparams(g->s);
    pthread_mutex_lock(&g->snap_mu);
    tui_snap *sn = &g->snap;
    snprintf(sn->model, sizeof sn->model, "%s", path);
    sn->hp = *hp;
    snprintf(sn->arch, sizeof sn->arch, "%s", hp->arch);
    snprintf(sn->isa, sizeof sn->isa, "%s", eng_isa(g->s));
    snprintf(sn->quant, sizeof sn->quant, "%s",
             kern_type_name((enum kern_type)hp->quant_type));
    snprintf(sn->chat, sizeof sn->chat, "%s", mode_name(g->tmpl));
    memset(&sn->tot, 0, sizeof sn->tot);
    sn->have_tot = 0;
    pthread_mutex_unlock(&g->snap_mu);
}

void tui_gen_job_load(tui_gen *g, const char *path)
{
    load ld = { .named = path };
    tui_gen_snap_refresh(g, TUI_LOADING);
    if (load_resolve(g, &ld) || load_open(g, &ld))
        return;                  /* said; the loaded model stays */
    load_swap(g, &ld);
    load_free(&ld);              /* the old model */
    load_snap(g, ld.path);
    log_session(g, ld.path, ld.named);
    const fmt_hparams *hp = eng_hparams(g->s);
    tui_gen_note(g, TUI_NOTE, "loaded %s: %s, %u layers, dim %u, %u experts (top-%u), "
                 "delays %u/%u, context %u, %s, %s mode", ld.path, hp->arch, hp->n_layers,
                 hp->dim, hp->n_experts, hp->top_k, hp->dense_delay, hp->expert_delay,
                 eng_n_ctx(g->s), eng_isa(g->s), mode_name(g->tmpl));
}

/* /mode NAME: "chat" (the model's template), "completion", or a family
 * (eng_chat_from_name).  The next prompt is rendered anew. */
void tui_gen_job_mode(tui_gen *g, const char *name)
{
    int c = !strcmp(name, "chat") ? (int)g->model_tmpl : eng_chat_from_name(name);
    if (c < 0 || (c == ENG_CHAT_NONE && !strcmp(name, "chat"))) {
        tui_gen_note(g, TUI_ERROR, c < 0 ? "/mode %s: chat, completion or a template family"
                                 : "/mode %s: this model has no chat template (/mode FAMILY "
                                   "picks one)", name);
        return;
    }
    g->tmpl = (enum eng_chat)c;
    g->n_kv = 0;
    pthread_mutex_lock(&g->snap_mu);
    snprintf(g->snap.chat, sizeof g->snap.chat, "%s", mode_name(g->tmpl));
    pthread_mutex_unlock(&g->snap_mu);
    tui_gen_note(g, TUI_NOTE, "%s mode", mode_name(g->tmpl));
}

int tui_gen_post(tui_gen *g, int job, const char *arg)
{
    int rc = -1;
    pthread_mutex_lock(&g->mu);
    int generating = g->running == TUI_JOB_CHAT || g->running == TUI_JOB_REGEN;
    for (int i = 0; i < g->q_n; i++)
        generating |= g->q_job[i] == TUI_JOB_CHAT || g->q_job[i] == TUI_JOB_REGEN;
    if (!generating && g->q_n < 8) {
        g->q_job[g->q_n] = job;
        g->q_arg[g->q_n++] = arg ? strdup(arg) : NULL;
        atomic_store(&g->busy, 1);
        pthread_cond_signal(&g->cv);
        rc = 0;
    }
    pthread_mutex_unlock(&g->mu);
    return rc;
}

void tui_gen_interrupt(tui_gen *g) { atomic_store(&g->stop, 1); }

int tui_gen_busy(tui_gen *g) { return atomic_load(&g->busy); }

void tui_gen_settings(tui_gen *g, const tui_settings *st)
{
    pthread_mutex_lock(&g->mu);
    tui_settings_copy(&g->want, st);
    g->want_gen++;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void tui_gen_get_settings(tui_gen *g, tui_settings *st)
{
    pthread_mutex_lock(&g->mu);
    st->system = NULL;
    tui_settings_copy(st, &g->want);
    pthread_mutex_unlock(&g->mu);
}
