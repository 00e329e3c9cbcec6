/*
 * tui_gen_impl.h — what the generation thread's three files share
 * (tui_gen.c: its jobs, settings, snapshot and runs, and /model in steps;
 * tui_gen_conv.c: the conversation rendered into the KV cache and the
 * reply decoded from it; tui_gen_thread.c: the loop, start and end).  Only the generation thread touches the fields
 * marked so; the others are guarded as their comments say.
 */
#ifndef CFLOW_TUI_GEN_IMPL_H
#define CFLOW_TUI_GEN_IMPL_H

#include "ui/common/ui.h"
#include "ui/tui/tui.h"

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
    ui_runlog      *rl;          /* the run log's writer (src/ui/common) */
    eng_sampler    *smp;
    enum eng_chat   tmpl;        /* the prompt's template (/mode) */
    enum eng_chat   model_tmpl;  /* the model's own, ENG_CHAT_NONE if none */
    int32_t        *kv;          /* tokens in the KV cache [n_kv] */
    size_t          n_kv, kv_cap;
    size_t          conv_first;  /* first transcript entry in the context */
    int             threads_req; /* the thread count last asked of the engine */
    int             ahead_refused_on;     /* the session refused look-ahead on */
    int             ahead_refused_layers; /* the depth it refused; 0 none (apply_ahead) */
    int             run_dirty;   /* the settings changed: the next token starts a run */
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
    size_t          rf_folded;   /* reasoning tokens folded (gpt-oss's analysis) */
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

/* tui_gen.c, for tui_gen_conv.c and tui_gen_thread.c */
void tui_gen_wake(tui_gen *g);        /* tell the UI through wake_fd */
int  tui_gen_log_new(tui_gen *g);     /* the run log's writer: 0, or -1 (memory) */
void tui_gen_job_load(tui_gen *g, const char *path);   /* open a model */
void tui_gen_job_mode(tui_gen *g, const char *name);   /* /mode NAME */
void tui_gen_note(tui_gen *g, int role, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));      /* a chat line; wakes the UI */
void tui_gen_snap_refresh(tui_gen *g, int state);   /* the UI's snapshot */
void tui_gen_show_wait(tui_gen *g);   /* the change on screen first (bounded) */
void tui_gen_apply(tui_gen *g);       /* posted settings, between tokens */
void tui_gen_run_begin(tui_gen *g);   /* a new run under the current settings */
void tui_gen_reply_take(tui_gen *g);  /* the run's tokens into the reply's */

/* tui_gen_conv.c, for the job loop */
void tui_gen_job_chat(tui_gen *g, const char *text);   /* answer a prompt */
void tui_gen_job_regen(tui_gen *g);   /* answer the last prompt again */

#endif
