/*
 * tui_gen_thread.c — the generation thread's life: started with the UI,
 * its loop taking one posted job at a time (a prompt, regenerate, load a
 * model, switch mode, clear) and applying posted settings between them,
 * and its end, which frees the session and everything it owned.
 *
 * It sits on top of the thread's other files: the jobs that answer are
 * tui_gen_conv.c's, the rest (settings, snapshot, notes, run log, model
 * loading) tui_gen.c's; neither calls back into this file.
 */
#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ui/tui/tui.h"
#include "ui/tui/tui_gen_impl.h"
#include "ui/common/ui.h"

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
        tui_gen_apply(g);
        if (job) {
            atomic_store(&g->stop, 0);
            /* busy on the status line before the job shows anything */
            tui_gen_snap_refresh(g, job == TUI_JOB_LOAD ? TUI_LOADING : job == TUI_JOB_CLEAR
                                                                   ? TUI_IDLE : TUI_PREFILL);
            switch (job) {
            case TUI_JOB_CHAT: tui_gen_job_chat(g, jarg); break;
            case TUI_JOB_REGEN: tui_gen_job_regen(g); break;
            case TUI_JOB_LOAD: tui_gen_job_load(g, jarg); break;
            case TUI_JOB_MODE: tui_gen_job_mode(g, jarg); break;
            case TUI_JOB_CLEAR:
                tui_chat_clear(g->cfg.chat);
                g->conv_first = 0;
                g->n_kv = 0;
                if (g->s)
                    eng_reset(g->s);
                break;
            }
            free(jarg);
            tui_gen_snap_refresh(g, TUI_IDLE);
            pthread_mutex_lock(&g->mu);
            g->running = 0;
            atomic_store(&g->busy, g->q_n > 0);
            pthread_mutex_unlock(&g->mu);
            tui_gen_wake(g);
        }
    }
    ui_runlog_run_end(g->rl);
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
    int rc = tui_gen_log_new(g);
    tui_gen_snap_refresh(g, TUI_IDLE);
    if (rc || pthread_create(&g->th, NULL, gen_main, g)) {
        ui_runlog_free(g->rl);
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
    ui_runlog_free(g->rl);
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
