/*
 * tui_gen.c — the generation thread of cflow-tui.
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
 * The conversation.  The transcript (tui_chat) holds every turn; entries
 * from conv_first on are what the model sees, rendered through the model's
 * chat template (completion mode, plain concatenation, for base models).
 * kv[0..n_kv) mirrors the tokens in the session's KV cache: a new prompt
 * is rendered in full, and the engine keeps the longest prefix of it the
 * cache already holds (the earlier turns; on /regen the whole prompt) and
 * prefills only the rest (eng_prefill_reuse).  When the context fills, the
 * oldest turns are dropped (conv_first moves on, the system prompt stays),
 * the pane is told, and the rest is prefilled again from where it first
 * differs (after the system prompt); a single reply longer than the
 * context keeps its second half.
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
#include "ui/tui.h"
#include "ui/ui.h"

struct tui_gen {
    tui_gen_cfg     cfg;
    pthread_t       th;
    pthread_mutex_t mu;          /* job, want, quit */
    pthread_cond_t  cv;
    int             quit;
    int             q_job[8];    /* queued jobs, oldest first */
    char           *q_arg[8];
    int             q_n;
    int             running;     /* the job being run, 0 none */
    tui_settings    want;
    uint64_t        want_gen;
    atomic_int      stop;        /* Ctrl-C: stop the reply */
    atomic_int      busy;        /* a job is posted or running */

    /* generation thread only */
    tui_settings    cur;
    uint64_t        cur_gen;
    eng_session    *s;
    prof           *p;
    prof_log       *log;
    eng_sampler    *smp;
    enum eng_chat   tmpl;        /* the prompt's template (/mode) */
    enum eng_chat   model_tmpl;  /* the model's own, ENG_CHAT_NONE if none */
    int32_t        *kv;          /* tokens in the KV cache [n_kv] */
    size_t          n_kv, kv_cap;
    size_t          conv_first;  /* first transcript entry in the context */
    int             threads_req; /* the thread count last asked of the engine */
    int             run_open, run_dirty, log_session;
    int64_t         run_id;
    double          bw;          /* the machine's read bandwidth, GB/s */
    size_t         *tok_end;     /* bytes of the reply after each token [tok_n] */
    size_t          tok_n, tok_cap;
    /* The reply's figures for its closing line: the profiler's run totals
     * since the reply began (rf_base) plus those of runs that ended during
     * it (a settings change starts a new run mid-reply), so the line,
     * the speed pane and the run log count the same tokens. */
    int             in_reply;
    prof_totals     rf_base;
    uint64_t        rf_prompt, rf_gen;
    size_t          rf_cached;   /* prompt tokens the cache already held */
    double          rf_prefill_s, rf_decode_s;

    pthread_mutex_t  draw_mu;    /* draw_req, drawn */
    pthread_cond_t   draw_cv;
    uint64_t         draw_req;   /* changes the thread asked to be shown */
    uint64_t         drawn;      /* the last of them a finished frame saw */

    pthread_rwlock_t plock;      /* around p (and s) for the UI's readers */
    pthread_mutex_t  snap_mu;
    tui_snap         snap;
    /* The per-layer sums of the profiler as they stood when snap.tot was
     * taken (under snap_mu): bytes streamed and seconds of each layer's
     * streams over the run's decode tokens, [lay_n][PROF_NST].  Read with
     * the totals between two tokens, so a layer's bytes and the token
     * count they are divided by always cover the same tokens. */
    uint64_t        *lay_bytes;
    double          *lay_sec;
    prof_io_fig     *lay_io;     /* [lay_n + 1]: per layer, then all */
    unsigned         lay_n;
};

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

static void wake(tui_gen *g)
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
static void show_wait(tui_gen *g)
{
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_nsec += SHOW_WAIT_MS * 1000000L;
    dl.tv_sec += dl.tv_nsec / 1000000000L;
    dl.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&g->draw_mu);
    uint64_t want = ++g->draw_req;
    wake(g);   /* a non-blocking pipe: never waits under the lock */
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

static void note(tui_gen *g, int role, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void note(tui_gen *g, int role, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tui_chat_addv(g->cfg.chat, role, fmt, ap);
    va_end(ap);
    wake(g);
}

static void eng_log_cb(void *ud, int level, const char *msg)
{
    tui_gen *g = ud;
    if (level >= 1)
        note(g, level >= 2 ? TUI_ERROR : TUI_NOTE, "%s", msg);
}

/* ---- the snapshot ------------------------------------------------------ */
static void snap_refresh(tui_gen *g, int state)
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
    } else {
        sn->prefetch = g->cur.prefetch > 0;
        snprintf(sn->expert_io, sizeof sn->expert_io, "%s",
                 g->cur.expert_io[0] ? g->cur.expert_io : "mmap");
    }
    sn->sp = g->cur.sp;
    sn->n_predict = g->cur.n_predict;
    sn->ignore_eos = g->cur.ignore_eos;
    sn->run_id = g->run_id;
    sn->version++;
    pthread_mutex_unlock(&g->snap_mu);
}

unsigned tui_gen_layers(tui_gen *g, uint64_t (*bytes)[PROF_NST], double (*sec)[PROF_NST],
                        prof_io_fig *io, prof_io_fig *io_all, unsigned max, uint64_t *n_gen)
{
    pthread_mutex_lock(&g->snap_mu);
    unsigned n = g->lay_n < max ? g->lay_n : max;
    if (bytes)
        memcpy(bytes, g->lay_bytes, (size_t)n * PROF_NST * sizeof **bytes);
    if (sec)
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

/* ---- the run log ------------------------------------------------------- */
/* The log cannot be written: said once, in cflow's words, and no later
 * model tries it again. */
static void log_fail(tui_gen *g, const char *err)
{
    char msg[1200];
    ui_log_warning(msg, sizeof msg, err);
    note(g, TUI_NOTE, "%s", msg);
    g->cfg.no_log = 1;
    prof_log_close(g->log);
    g->log = NULL;
    pthread_mutex_lock(&g->snap_mu);
    g->snap.log_path[0] = 0;
    pthread_mutex_unlock(&g->snap_mu);
}

/* Add the run's tokens since rf_base to the reply's figures. */
static void reply_take(tui_gen *g)
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

static void run_end(tui_gen *g)
{
    char err[1024];
    if (g->run_open && g->log && g->log_session &&
        prof_log_flush(g->log, g->p, 1, err, sizeof err))
        log_fail(g, err);
    g->run_open = 0;
}

/* A new run under the current settings (the previous one is finished). */
static void run_begin(tui_gen *g)
{
    char err[1024];
    eng_stats es;
    run_end(g);
    if (!g->s || !g->p)
        return;
    eng_get_stats(g->s, &es);
    reply_take(g);
    prof_run_begin(g->p, es.bytes_per_token, g->bw);
    if (g->in_reply)
        prof_totals_get(g->p, &g->rf_base);   /* the new run's zeros */
    g->run_open = 1;
    g->run_dirty = 0;
    g->run_id = 0;
    if (g->log && g->log_session) {
        prof_run_cfg rc;   /* as `cflow run` logs them */
        ui_logsess_run_cfg(g->s, &g->cur.sp, &rc);
        if (prof_log_run_begin(g->log, g->p, &rc, &g->run_id, err, sizeof err))
            log_fail(g, err);
    }
}

static void run_token(tui_gen *g)
{
    char err[1024];
    if (g->log && g->log_session && g->run_open && prof_log_due(g->log, g->p) &&
        prof_log_flush(g->log, g->p, 0, err, sizeof err))
        log_fail(g, err);
}

/* Open the log (once) and start a session for the model just loaded. */
static void log_session(tui_gen *g, const char *model)
{
    char err[1024];
    const fmt_hparams *hp = eng_hparams(g->s);

    g->log_session = 0;
    if (g->cfg.no_log)
        return;
    if (!g->log) {
        if (ui_log_open(&g->log, g->cfg.db, PROF_LOG_CREATE, err, sizeof err)) {
            log_fail(g, err);
            return;
        }
        pthread_mutex_lock(&g->snap_mu);
        snprintf(g->snap.log_path, sizeof g->snap.log_path, "%s", prof_log_path(g->log));
        pthread_mutex_unlock(&g->snap_mu);
    }
    ui_logsess ls;
    ui_logsess_machine(&ls, g->s, g->log);
    g->bw = ls.m.read_bw_gbs;
    if (ui_logsess_model(&ls, model, hp, err, sizeof err)) {
        log_fail(g, err);
        return;
    }
    if (prof_log_session(g->log, &ls.m, &ls.mi, TUI_NAME, err, sizeof err)) {
        log_fail(g, err);
        return;
    }
    g->log_session = 1;
}

/* ---- jobs -------------------------------------------------------------- */
static void apply_settings(tui_gen *g)
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
                note(g, TUI_ERROR, "cannot set %d threads", g->cur.threads);
            g->threads_req = g->cur.threads;
        }
        if (g->smp)
            eng_sampler_set(g->smp, &g->cur.sp);
        if (g->cur.prefetch >= 0 && g->cur.prefetch != eng_prefetch(g->s) &&
            eng_set_prefetch(g->s, g->cur.prefetch))
            note(g, TUI_ERROR, "cannot turn prefetch %s", g->cur.prefetch ? "on" : "off");
        int mode = g->cur.expert_io[0] ? eng_expert_io_from_name(g->cur.expert_io) : -1;
        if (mode >= 0 && mode != eng_expert_io(g->s) &&
            eng_set_expert_io(g->s, mode, err, sizeof err))
            note(g, TUI_ERROR, "expert I/O %s: %s (it stays %s)", g->cur.expert_io, err,
                 eng_expert_io_name(eng_expert_io(g->s)));
    }
    g->run_dirty = 1;
    snap_refresh(g, g->snap.state);
}

static void job_load(tui_gen *g, const char *path)
{
    char err[1024];
    eng_opts eo;
    eng_session *ns = NULL;
    prof *np = NULL;

    snap_refresh(g, TUI_LOADING);
    /* a GGUF, HF folder or llama2.c file: its conversion in the cache,
     * made now (a note in the chat counts the percent) when missing */
    char mpath[sizeof g->snap.model];
    int converted;
    tui_chat_prog pr = { g->cfg.chat, path, g->cfg.wake_fd, -1, -1 };
    ui_models_cb mcb = { eng_log_cb, g, tui_chat_progress, &pr };
    if (ui_models_resolve(path, &mcb, mpath, sizeof mpath, &converted, err, sizeof err)) {
        note(g, TUI_ERROR, "cannot load model: %s%s", err,
             g->s ? " (the previous model stays loaded)" : " (no model loaded: /model PATH)");
        return;
    }
    if (converted) {
        char line[PATH_MAX * 2 + 128];
        ui_models_converted_line(line, sizeof line, path, mpath);
        if (pr.idx >= 0)
            tui_chat_set(g->cfg.chat, (size_t)pr.idx, line);
        else
            note(g, TUI_NOTE, "%s", line);
    }
    path = mpath;
    eng_opts_default(&eo);
    eo.n_threads = g->cur.threads;
    eo.n_ctx = g->cfg.n_ctx;
    eo.log = eng_log_cb;
    eo.log_ud = g;
    eo.prefetch = g->cur.prefetch;   /* -1: $CFLOW_PREFETCH, else off */
    eo.expert_io = g->cur.expert_io[0] ? eng_expert_io_from_name(g->cur.expert_io) : -1;
    eo.no_mmap = g->cur.no_mmap;
    eo.expert_cache = g->cur.expert_cache;
    if (eng_open(&ns, path, &eo, err, sizeof err)) {
        note(g, TUI_ERROR, "cannot load model: %s%s", err,
             g->s ? " (the previous model stays loaded)" : " (no model loaded: /model PATH)");
        return;
    }
    const fmt_hparams *hp = eng_hparams(ns);
    if (prof_new(&np, PROF_ALL, hp->n_layers, err, sizeof err)) {
        note(g, TUI_ERROR, "%s", err);
        eng_close(ns);
        return;
    }
    eng_sampler *nsmp = eng_sampler_new(&g->cur.sp, hp->vocab_size);
    uint64_t *lb = calloc((size_t)hp->n_layers * PROF_NST, sizeof *lb);
    double *ls = calloc((size_t)hp->n_layers * PROF_NST, sizeof *ls);
    prof_io_fig *lio = calloc((size_t)hp->n_layers + 1, sizeof *lio);
    if (!nsmp || !lb || !ls || !lio) {
        note(g, TUI_ERROR, "out of memory");
        eng_sampler_free(nsmp);
        free(lb);
        free(ls);
        free(lio);
        prof_free(np);
        eng_close(ns);
        return;
    }
    enum eng_chat tmpl = eng_session_chat(ns);   /* the model's chat template */

    run_end(g);
    pthread_rwlock_wrlock(&g->plock);
    if (g->s)
        eng_set_prof(g->s, NULL);
    eng_close(g->s);
    prof_free(g->p);
    eng_sampler_free(g->smp);
    g->s = ns;
    g->threads_req = g->cur.threads;
    g->p = np;
    g->smp = nsmp;
    eng_set_prof(g->s, g->p);
    pthread_rwlock_unlock(&g->plock);
    g->tmpl = g->model_tmpl = tmpl;
    pthread_mutex_lock(&g->snap_mu);
    free(g->lay_bytes);
    free(g->lay_sec);
    free(g->lay_io);
    g->lay_bytes = lb;
    g->lay_sec = ls;
    g->lay_io = lio;
    g->lay_n = hp->n_layers;
    pthread_mutex_unlock(&g->snap_mu);
    g->n_kv = 0;
    g->run_id = 0;
    g->run_dirty = 1;
    pthread_mutex_lock(&g->cfg.chat->mu);
    g->conv_first = g->cfg.chat->n;   /* a new model starts a new conversation */
    pthread_mutex_unlock(&g->cfg.chat->mu);

    pthread_mutex_lock(&g->snap_mu);
    tui_snap *sn = &g->snap;
    snprintf(sn->model, sizeof sn->model, "%s", path);
    sn->hp = *hp;
    snprintf(sn->arch, sizeof sn->arch, "%s", hp->arch);
    snprintf(sn->isa, sizeof sn->isa, "%s", eng_isa(g->s));
    snprintf(sn->quant, sizeof sn->quant, "%s",
             kern_type_name((enum kern_type)hp->quant_type));
    snprintf(sn->chat, sizeof sn->chat, "%s",
             tmpl == ENG_CHAT_NONE ? "completion" : eng_chat_name(tmpl));
    memset(&sn->tot, 0, sizeof sn->tot);
    sn->have_tot = 0;
    pthread_mutex_unlock(&g->snap_mu);

    log_session(g, path);
    note(g, TUI_NOTE, "loaded %s: %s, %u layers, dim %u, %u experts (top-%u), delays %u/%u, "
         "context %u, %s, %s mode", path, hp->arch, hp->n_layers, hp->dim, hp->n_experts,
         hp->top_k, hp->dense_delay, hp->expert_delay, eng_n_ctx(g->s),
         eng_isa(g->s), tmpl == ENG_CHAT_NONE ? "completion" : eng_chat_name(tmpl));
}

/* /mode NAME: "chat" (the model's template), "completion", or a family
 * (eng_chat_from_name).  The next prompt is rendered anew. */
static void job_mode(tui_gen *g, const char *name)
{
    int c = !strcmp(name, "chat") ? (int)g->model_tmpl : eng_chat_from_name(name);
    if (c < 0 || (c == ENG_CHAT_NONE && !strcmp(name, "chat"))) {
        note(g, TUI_ERROR, c < 0 ? "/mode %s: chat, completion or a template family"
                                 : "/mode %s: this model has no chat template (/mode FAMILY "
                                   "picks one)", name);
        return;
    }
    g->tmpl = (enum eng_chat)c;
    g->n_kv = 0;
    pthread_mutex_lock(&g->snap_mu);
    snprintf(g->snap.chat, sizeof g->snap.chat, "%s",
             c == ENG_CHAT_NONE ? "completion" : eng_chat_name(g->tmpl));
    pthread_mutex_unlock(&g->snap_mu);
    note(g, TUI_NOTE, "%s mode", c == ENG_CHAT_NONE ? "completion" : eng_chat_name(g->tmpl));
}

static int kv_reserve(tui_gen *g, size_t n)
{
    if (n <= g->kv_cap)
        return 0;
    size_t cap = g->kv_cap ? g->kv_cap : 256;
    while (cap < n)
        cap *= 2;
    int32_t *p = realloc(g->kv, cap * sizeof *p);
    if (!p)
        return -1;
    g->kv = p;
    g->kv_cap = cap;
    return 0;
}

/* Render the context: the system prompt, the turns from conv_first up to
 * and including the user turn u, the assistant turn opened, then the reply
 * so far (entry a, or none when a < 0).  Tokens into *ids (malloc'd). */
static int render_ids(tui_gen *g, size_t u, long a, int32_t **ids, size_t *n)
{
    tui_chat *c = g->cfg.chat;
    const eng_tok *tok = eng_tokenizer(g->s);
    eng_msg *msgs = NULL;
    char *text = NULL;
    size_t nm = 0;
    int rc = -1;

    pthread_mutex_lock(&c->mu);
    msgs = calloc(c->n + 2, sizeof *msgs);
    if (!msgs)
        goto unlock;
    if (g->cur.system && *g->cur.system)
        msgs[nm++] = (eng_msg){ "system", g->cur.system };
    for (size_t i = g->conv_first; i <= u && i < c->n; i++) {
        const tui_entry *e = &c->e[i];
        if (e->role == TUI_USER)
            msgs[nm++] = (eng_msg){ "user", e->text + e->model_skip };
        else if (e->role == TUI_ASSISTANT)
            msgs[nm++] = (eng_msg){ "assistant", e->text + e->model_skip };
    }
    /* Completion mode concatenates: a turn typed after text that ends in
     * a word ("...friend." + "The dog") gets the space a writer would
     * type, so SentencePiece sees "▁The" as in running text. */
    char **spaced = calloc(nm + 1, sizeof *spaced);
    if (!spaced)
        goto unlock;
    if (g->tmpl == ENG_CHAT_NONE)
        for (size_t k = 1; k < nm; k++) {
            const char *prev = msgs[k - 1].content, *cur = msgs[k].content;
            size_t pl = strlen(prev);
            if (pl && !strchr(" \n\t", prev[pl - 1]) && *cur && !strchr(" \n\t", *cur) &&
                (spaced[k] = malloc(strlen(cur) + 2))) {
                spaced[k][0] = ' ';
                strcpy(spaced[k] + 1, cur);
                msgs[k].content = spaced[k];
            }
        }
    int rrc = eng_chat_render(g->tmpl, msgs, nm, 1, &text);
    for (size_t k = 0; k < nm; k++)
        free(spaced[k]);
    free(spaced);
    if (rrc)
        goto unlock;
    if (a >= 0 && (size_t)a < c->n) {
        const tui_entry *e = &c->e[a];
        size_t tl = strlen(text), rl = e->len - e->model_skip;
        char *t2 = realloc(text, tl + rl + 1);
        if (!t2)
            goto unlock;
        text = t2;
        memcpy(text + tl, e->text + e->model_skip, rl);
        text[tl + rl] = 0;
    }
    rc = 0;
unlock:
    pthread_mutex_unlock(&c->mu);
    free(msgs);
    if (rc) {
        free(text);
        return -1;
    }
    size_t len = strlen(text), cap = len + 16;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v || eng_tok_encode(tok, text, len, 1, g->tmpl != ENG_CHAT_NONE, v, cap, n)) {
        free(v);
        free(text);
        return -1;
    }
    if (*n > cap) {
        int32_t *v2 = realloc(v, *n * sizeof *v);
        size_t cap2 = *n;
        if (!v2 || eng_tok_encode(tok, text, len, 1, g->tmpl != ENG_CHAT_NONE, v2, cap2, n)) {
            free(v2 ? v2 : v);
            free(text);
            return -1;
        }
        v = v2;
    }
    free(text);
    if (*n == 0) {   /* an empty context starts from BOS */
        int32_t bos = eng_tok_bos(tok);
        if (bos < 0) {
            free(v);
            return -1;
        }
        v[(*n)++] = bos;
    }
    *ids = v;
    return 0;
}

/* Drop the oldest turn before entry u from the context; 0 when there was
 * none to drop. */
static int drop_turn(tui_gen *g, size_t u)
{
    tui_chat *c = g->cfg.chat;
    int dropped = 0;
    pthread_mutex_lock(&c->mu);
    size_t i = g->conv_first;
    while (i < u && c->e[i].role != TUI_USER)
        i++;
    if (i < u) {
        size_t j = i + 1;
        while (j < u && c->e[j].role != TUI_USER)
            j++;
        for (size_t k = g->conv_first; k < j; k++)
            c->e[k].dropped = 1;
        g->conv_first = j;
        dropped = 1;
        c->version++;
    }
    pthread_mutex_unlock(&c->mu);
    return dropped;
}

/* Feed ids into the cache: the engine keeps the longest prefix it already
 * holds (the earlier turns; on /regen all of the prompt) and prefills only
 * the rest (eng_prefill_reuse); *cached (may be NULL) gets the prefix. */
static int feed(tui_gen *g, const int32_t *ids, size_t n, size_t *cached, char *err,
                size_t errlen)
{
    if (kv_reserve(g, n)) {
        snprintf(err, errlen, "out of memory");
        return ENG_ENOMEM;
    }
    snap_refresh(g, TUI_PREFILL);
    int rc = eng_prefill_reuse(g->s, ids, n, cached, err, errlen);
    if (rc) {
        eng_reset(g->s);
        g->n_kv = 0;
        return rc;
    }
    memcpy(g->kv, ids, n * sizeof *ids);
    g->n_kv = n;
    run_token(g);
    return 0;
}

/* Make the context (turns up to u, reply a so far) fit in limit tokens by
 * dropping the oldest turns, then, for a reply, its first half.  Returns
 * the ids or NULL (error noted). */
static int32_t *fit(tui_gen *g, size_t u, long a, size_t limit, size_t *n, int *n_dropped,
                    int *cut)
{
    int32_t *ids = NULL;
    for (;;) {
        if (render_ids(g, u, a, &ids, n)) {
            note(g, TUI_ERROR, "cannot render or tokenize the conversation");
            return NULL;
        }
        if (*n <= limit)
            return ids;
        free(ids);
        ids = NULL;
        if (drop_turn(g, u)) {
            (*n_dropped)++;
            continue;
        }
        if (a >= 0 && !*cut) {   /* a reply longer than the context */
            tui_chat *c = g->cfg.chat;
            pthread_mutex_lock(&c->mu);
            tui_entry *e = &c->e[a];
            size_t half = e->len - e->model_skip;
            for (size_t t = 0; t < g->tok_n; t++)
                if (g->tok_end[t] >= e->model_skip + half / 2) {
                    half = g->tok_end[t] - e->model_skip;
                    break;
                }
            e->model_skip += half;
            pthread_mutex_unlock(&c->mu);
            *cut = 1;
            continue;
        }
        note(g, TUI_ERROR, "the conversation is %zu tokens but the context holds %zu: "
             "shorten the prompt or /clear", *n, limit);
        return NULL;
    }
}

static void say_dropped(tui_gen *g, int n_dropped, int cut)
{
    if (n_dropped)
        note(g, TUI_NOTE, "context full (%u tokens): dropped the %d oldest turn%s%s",
             eng_n_ctx(g->s), n_dropped, n_dropped > 1 ? "s" : "",
             g->cur.system && *g->cur.system ? "; the system prompt is kept" : "");
    if (cut)
        note(g, TUI_NOTE, "context full (%u tokens): the model now sees the second half"
             " of this reply", eng_n_ctx(g->s));
}

/* Reply text decoded but not yet in the chat.  The UI holds the chat's
 * lock while it lays out the chat pane; the decoder never waits for it
 * (a wait there stops every worker of the token), it keeps the text here
 * and hands it over at a later token, or at the reply's end (wait 1). */
typedef struct pending {
    char  *s;
    size_t n, cap;
} pending;

static void reply_text(tui_gen *g, size_t a, pending *p, const char *s, size_t n, int wait)
{
    tui_chat *c = g->cfg.chat;
    if (n && p->n + n > p->cap) {
        size_t cap = (p->n + n) * 2 + 256;
        char *q = realloc(p->s, cap);
        if (!q) {   /* no room to keep it: hand it over now */
            tui_chat_append(c, a, p->s, p->n);
            tui_chat_append(c, a, s, n);
            p->n = 0;
            return;
        }
        p->s = q;
        p->cap = cap;
    }
    if (n)
        memcpy(p->s + p->n, s, n);
    p->n += n;
    if (wait)
        tui_chat_append(c, a, p->s, p->n);
    else if (tui_chat_append_try(c, a, p->s, p->n))
        return;
    p->n = 0;
}

static void reply_begin(tui_gen *g)
{
    g->in_reply = 1;
    g->rf_prompt = g->rf_gen = 0;
    g->rf_cached = 0;
    g->rf_prefill_s = g->rf_decode_s = 0;
    prof_totals_get(g->p, &g->rf_base);
}

/* The line after a reply, as `ollama run --verbose` gives it; the prompt
 * tokens are those prefilled, with those the cache already held. */
static void reply_end(tui_gen *g, size_t n_tok, const char *why)
{
    char cached[48] = "", speed[48] = "";
    reply_take(g);
    g->in_reply = 0;
    if (g->rf_cached)
        snprintf(cached, sizeof cached, " (+%zu cached)", g->rf_cached);
    if (g->rf_prompt)   /* a regenerate prefills nothing: no speed to give */
        snprintf(speed, sizeof speed, ", %.1f tok/s prefill",
                 g->rf_prefill_s > 0 ? (double)g->rf_prompt / g->rf_prefill_s : 0.0);
    note(g, TUI_NOTE, "prompt %llu tok%s%s; reply %zu tok, %.1f tok/s decode; stopped: %s",
         (unsigned long long)g->rf_prompt, cached, speed, n_tok,
         g->rf_decode_s > 0 ? (double)g->rf_gen / g->rf_decode_s : 0.0, why);
}

/* Decode one token at the end of the cache; 0 or -1 (error noted). */
static int decode_one(tui_gen *g, int32_t tok_id)
{
    char err[1024] = "";
    int rc = kv_reserve(g, g->n_kv + 1) ? ENG_ENOMEM : eng_decode(g->s, tok_id, err, sizeof err);
    if (rc) {
        note(g, TUI_ERROR, "%s", rc == ENG_ENOMEM && !err[0] ? "out of memory" : err);
        return -1;
    }
    g->kv[g->n_kv++] = tok_id;
    run_token(g);
    return 0;
}

/* The cache is full: drop the oldest turns (or the reply's first half) and
 * prefill the context again, all but its last token, which is decoded, so
 * every token of the reply is one decode step.  0, or -1 (noted). */
static int refit(tui_gen *g, size_t u, size_t a, size_t limit, int *cut)
{
    char err[1024];
    int nd = 0, ct = 0;
    size_t m = 0;
    int32_t *ids = fit(g, u, (long)a, limit, &m, &nd, &ct);
    if (!ids)
        return -1;
    say_dropped(g, nd, ct && !*cut);   /* a reply is cut: said once */
    *cut |= ct;
    g->n_kv = 0;   /* a new context: prefilled from where it differs */
    int rc = m > 1 ? feed(g, ids, m - 1, NULL, err, sizeof err) : 0;
    if (rc)
        note(g, TUI_ERROR, "%s", err);
    else if (m <= 1)
        eng_reset(g->s);
    if (!rc)
        rc = decode_one(g, ids[m - 1]);
    free(ids);
    return rc ? -1 : 0;
}

/* The offset of the reply's text after each token (fit cuts a reply
 * longer than the context at a token's end). */
static void tok_mark(tui_gen *g, size_t n_tok, size_t reply_len)
{
    if (n_tok >= g->tok_cap) {
        size_t cap = g->tok_cap ? g->tok_cap * 2 : 256;
        size_t *p = realloc(g->tok_end, cap * sizeof *p);
        if (p) {
            g->tok_end = p;
            g->tok_cap = cap;
        }
    }
    if (n_tok < g->tok_cap) {
        g->tok_end[n_tok] = reply_len;
        g->tok_n = n_tok + 1;
    }
}

/* Sample and decode the reply into chat entry a; returns why it stopped. */
static const char *decode_reply(tui_gen *g, size_t u, size_t a, size_t reserve, int *cut,
                                size_t *n_out)
{
    char buf[512];
    const eng_tok *tok = eng_tokenizer(g->s);
    uint32_t n_ctx = eng_n_ctx(g->s);
    eng_detok dt;
    eng_detok_init(&dt);
    dt.prev = g->n_kv ? g->kv[g->n_kv - 1] : -1;
    int32_t eos = eng_tok_eos(tok), eot = eng_tok_eot(tok);
    size_t reply_len = 0, n_tok = 0;
    const char *why = NULL;
    double last_snap = 0;
    pending pend = { NULL, 0, 0 };

    g->tok_n = 0;
    while (!why) {
        if (atomic_load(&g->stop)) {
            why = "Ctrl-C";
            break;
        }
        apply_settings(g);
        if (g->run_dirty)
            run_begin(g);
        int32_t next = eng_sampler_sample(g->smp, eng_logits(g->s), g->kv, g->n_kv);
        if (!g->cur.ignore_eos && (next == eos || next == eot)) {
            why = "end of text";
            break;
        }
        if (!eng_tok_is_control(tok, next)) {
            size_t k = eng_detok_push(&dt, tok, next, buf, sizeof buf);
            reply_text(g, a, &pend, buf, k, 0);
            reply_len += k;
        }
        tok_mark(g, n_tok, reply_len);
        n_tok++;
        if (g->cur.n_predict > 0 && (long)n_tok >= g->cur.n_predict)
            why = "-n limit";   /* the token is decoded still: the cache holds it */
        if (g->n_kv < n_ctx) {
            if (decode_one(g, next))
                why = "error";
        } else if (!why) {
            /* the cache is full: drop the oldest turns and prefill again */
            reply_text(g, a, &pend, NULL, 0, 1);   /* fit reads the reply */
            if (refit(g, u, a, n_ctx - reserve, cut))
                why = "context full";
            else
                dt.prev = g->kv[g->n_kv - 1];
        }
        /* the panes read the snapshot at 10 Hz: refreshing it more often
         * than every 20 ms would only cost the decoder */
        double now = prof_now();
        if (now - last_snap > 0.02) {
            snap_refresh(g, TUI_DECODE);
            last_snap = now;
        }
    }
    size_t k = eng_detok_flush(&dt, buf, sizeof buf);
    reply_text(g, a, &pend, buf, k, 1);
    free(pend.s);
    *n_out = n_tok;
    return why;
}

/* Generate the reply to user turn u. */
static void generate(tui_gen *g, size_t u)
{
    char err[1024] = "";
    uint32_t n_ctx = eng_n_ctx(g->s);
    size_t n = 0, reserve = n_ctx / 4 < 64 ? n_ctx / 4 : 64;
    int n_dropped = 0, cut = 0;

    if (g->run_dirty || !g->run_open)
        run_begin(g);
    reply_begin(g);
    int32_t *ids = fit(g, u, -1, n_ctx - reserve > 0 ? n_ctx - reserve : 1, &n, &n_dropped,
                       &cut);
    if (!ids) {   /* too long even alone (noted) */
        g->in_reply = 0;
        return;
    }
    say_dropped(g, n_dropped, 0);
    int rc = feed(g, ids, n, &g->rf_cached, err, sizeof err);
    free(ids);
    long a = rc ? -1 : tui_chat_add(g->cfg.chat, TUI_ASSISTANT, "");
    if (rc || a < 0) {
        note(g, TUI_ERROR, "%s", rc ? err : "out of memory");
        g->in_reply = 0;
        return;
    }
    snap_refresh(g, TUI_DECODE);
    show_wait(g);
    size_t n_tok = 0;
    const char *why = decode_reply(g, u, (size_t)a, reserve, &cut, &n_tok);
    reply_end(g, n_tok, why);
    if (g->log && g->log_session && g->run_open &&
        prof_log_flush(g->log, g->p, 0, err, sizeof err))
        log_fail(g, err);
}

static void job_chat(tui_gen *g, const char *text)
{
    if (!g->s) {
        note(g, TUI_ERROR, "no model loaded: /model PATH");
        return;
    }
    long u = tui_chat_add(g->cfg.chat, TUI_USER, text);
    if (u < 0) {
        note(g, TUI_ERROR, "out of memory");
        return;
    }
    show_wait(g);
    generate(g, (size_t)u);
}

static void job_regen(tui_gen *g)
{
    tui_chat *c = g->cfg.chat;
    if (!g->s) {
        note(g, TUI_ERROR, "no model loaded: /model PATH");
        return;
    }
    long u = -1;
    pthread_mutex_lock(&c->mu);
    for (size_t i = c->n; i-- > g->conv_first;)
        if (c->e[i].role == TUI_USER) {
            u = (long)i;
            break;
        }
    if (u >= 0) {   /* forget the old reply (and notes after the prompt) */
        for (size_t i = (size_t)u + 1; i < c->n; i++)
            free(c->e[i].text);
        c->n = (size_t)u + 1;
        c->version++;
    }
    pthread_mutex_unlock(&c->mu);
    if (u < 0) {
        note(g, TUI_ERROR, "/regen: no prompt to answer again");
        return;
    }
    generate(g, (size_t)u);
}

static void *gen_main(void *arg)
{
    tui_gen *g = arg;
    for (;;) {
        pthread_mutex_lock(&g->mu);
        while (!g->q_n && !g->quit && g->want_gen == g->cur_gen)
            pthread_cond_wait(&g->cv, &g->mu);
        int job = 0, quit = g->quit;
        char *jarg = NULL;
        if (g->q_n && !quit) {
            job = g->q_job[0];
            jarg = g->q_arg[0];
            g->q_n--;
            memmove(g->q_job, g->q_job + 1, (size_t)g->q_n * sizeof *g->q_job);
            memmove(g->q_arg, g->q_arg + 1, (size_t)g->q_n * sizeof *g->q_arg);
            g->running = job;
        }
        pthread_mutex_unlock(&g->mu);
        if (quit) {
            free(jarg);
            break;
        }
        apply_settings(g);
        if (job) {
            atomic_store(&g->stop, 0);
            /* busy on the status line before the job shows anything */
            snap_refresh(g, job == TUI_JOB_LOAD ? TUI_LOADING : job == TUI_JOB_CLEAR
                                                                   ? TUI_IDLE : TUI_PREFILL);
            switch (job) {
            case TUI_JOB_CHAT: job_chat(g, jarg); break;
            case TUI_JOB_REGEN: job_regen(g); break;
            case TUI_JOB_LOAD: job_load(g, jarg); break;
            case TUI_JOB_MODE: job_mode(g, jarg); break;
            case TUI_JOB_CLEAR:
                tui_chat_clear(g->cfg.chat);
                g->conv_first = 0;
                g->n_kv = 0;
                if (g->s)
                    eng_reset(g->s);
                break;
            }
            free(jarg);
            snap_refresh(g, TUI_IDLE);
            pthread_mutex_lock(&g->mu);
            g->running = 0;
            atomic_store(&g->busy, g->q_n > 0);
            pthread_mutex_unlock(&g->mu);
            wake(g);
        }
    }
    run_end(g);
    return NULL;
}

/* ---- the UI's side ----------------------------------------------------- */
int tui_gen_start(tui_gen **out, const tui_gen_cfg *cfg, const tui_settings *st)
{
    tui_gen *g = calloc(1, sizeof *g);
    if (!g)
        return -1;
    g->cfg = *cfg;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    pthread_mutex_init(&g->draw_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->draw_cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_rwlock_init(&g->plock, NULL);
    pthread_mutex_init(&g->snap_mu, NULL);
    tui_settings_copy(&g->want, st);
    tui_settings_copy(&g->cur, st);
    snap_refresh(g, TUI_IDLE);
    if (pthread_create(&g->th, NULL, gen_main, g)) {
        tui_settings_free(&g->want);
        tui_settings_free(&g->cur);
        free(g);
        return -1;
    }
    *out = g;
    return 0;
}

void tui_gen_quit(tui_gen *g)
{
    if (!g)
        return;
    atomic_store(&g->stop, 1);
    pthread_mutex_lock(&g->mu);
    g->quit = 1;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->th, NULL);
    for (int i = 0; i < g->q_n; i++)
        free(g->q_arg[i]);
    prof_log_close(g->log);
    if (g->s)
        eng_set_prof(g->s, NULL);
    eng_close(g->s);
    prof_free(g->p);
    eng_sampler_free(g->smp);
    free(g->kv);
    free(g->tok_end);
    free(g->lay_bytes);
    free(g->lay_sec);
    free(g->lay_io);
    tui_settings_free(&g->want);
    tui_settings_free(&g->cur);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->draw_mu);
    pthread_cond_destroy(&g->draw_cv);
    pthread_rwlock_destroy(&g->plock);
    pthread_mutex_destroy(&g->snap_mu);
    free(g);
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
