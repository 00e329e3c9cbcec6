/*
 * srv_log.c — every request a run in the run log (src/prof's SQLite log).
 *
 * One session per server (program "cflow serve": the machine and model
 * rows the front end describes), opened on a handle of its own (log0);
 * each slot has its own handle that joins that session
 * (prof_log_session_join), so the runs of requests in flight at the same
 * time are written side by side, and its own profiler, which the engine
 * never sees: the scheduler brackets the calls that feed the slot's
 * sequence (srv_log_tok_begin, _end), so a token's record is the time its
 * stream waited for it, a batched step's time for every sequence in it.
 * A prefill call's time goes on the record of its first token and the
 * rest get empty records, as the engine's batched prefill does (run totals
 * stay right).
 *
 * A run holds the request's sampling, its client, endpoint, seconds
 * queued, and at its end why it stopped, the prompt's tokens and those
 * found in the slot's cache (schema 11, prof_log.c).  A log that cannot
 * be written is said once (srv_config.log, level 1) and that handle
 * stops logging; serving goes on.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "engine/engine.h"
#include "serve/srv_impl.h"

/* The slot's log fails: say why once and stop logging through it. */
static void slot_warn(srv *s, srv_slot *sl, const char *why)
{
    srv_say(s, 1, "warning: run log %s; requests on this slot are not logged", why);
    prof_log_close(sl->log);
    sl->log = NULL;
}

int srv_log_open(srv *s, char *err, size_t errlen)
{
    const srv_config *c = &s->cfg;
    s->bytes_per_token = 0;
    {
        eng_stats st;
        eng_get_stats(c->session, &st);
        s->bytes_per_token = st.bytes_per_token;
    }
    if (!c->log_path)
        return 0;
    if (prof_log_open(&s->log0, c->log_path, PROF_LOG_CREATE, err, errlen) ||
        prof_log_session(s->log0, c->machine, c->model_info, "cflow serve", err, errlen)) {
        prof_log_close(s->log0);
        s->log0 = NULL;
        return -1;
    }
    unsigned n_layers = eng_hparams(c->session)->n_layers;
    for (unsigned q = 0; q < s->n_slots; q++) {
        srv_slot *sl = &s->slots[q];
        if (prof_new(&sl->prof, 0, n_layers, err, errlen) ||
            prof_log_open(&sl->log, c->log_path, PROF_LOG_CREATE, err, errlen) ||
            prof_log_session_join(sl->log, s->log0, err, errlen)) {
            srv_log_close(s);
            return -1;
        }
    }
    s->log_on = 1;
    return 0;
}

void srv_log_close(srv *s)
{
    for (unsigned q = 0; q < SRV_SLOTS_MAX; q++) {
        prof_log_close(s->slots[q].log);
        prof_free(s->slots[q].prof);
        s->slots[q].log = NULL;
        s->slots[q].prof = NULL;
    }
    prof_log_close(s->log0);
    s->log0 = NULL;
    s->log_on = 0;
}

void srv_log_begin(srv *s, srv_slot *sl)
{
    const srv_job *j = sl->job;
    char err[1024];
    if (!sl->log)
        return;
    prof_run_begin(sl->prof, s->bytes_per_token, s->cfg.read_bw_gbs);
    prof_run_cfg rc = s->cfg.run;
    rc.n_ctx = s->n_ctx;
    rc.temp = j->req.sp.temp;
    rc.top_k = j->req.sp.top_k;
    rc.top_p = j->req.sp.top_p;
    rc.min_p = j->req.sp.min_p;
    rc.rep_penalty = j->req.sp.rep_penalty;
    rc.rep_last_n = j->req.sp.rep_last_n;
    rc.seed = j->req.sp.seed;
    rc.client = j->client;
    rc.endpoint = j->endpoint;
    rc.queue_s = j->t_start - j->t_arrive;
    if (prof_log_run_begin(sl->log, sl->prof, &rc, &sl->run_id, err, sizeof err))
        slot_warn(s, sl, err);
}

void srv_log_tok_begin(srv_slot *sl)
{
    if (sl->log)
        prof_token_begin(sl->prof);
}

void srv_log_tok_end(srv *s, srv_slot *sl, int decode, size_t n)
{
    char err[1024];
    if (!sl->log || n == 0)
        return;
    prof_token_end(sl->prof, decode ? PROF_DECODE : PROF_PREFILL);
    for (size_t k = 1; k < n; k++) {
        prof_token_begin(sl->prof);
        prof_token_end(sl->prof, PROF_PREFILL);
    }
    if (prof_log_due(sl->log, sl->prof) && prof_log_flush(sl->log, sl->prof, 0, err, sizeof err))
        slot_warn(s, sl, err);
}

void srv_log_end(srv *s, srv_slot *sl)
{
    const srv_job *j = sl->job;
    char err[1024];
    if (!sl->log)
        return;
    prof_log_set_request(sl->log, j->finish, j->n_cached, j->n_ids);
    if (prof_log_flush(sl->log, sl->prof, 1, err, sizeof err))
        slot_warn(s, sl, err);
}
