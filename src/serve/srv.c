/*
 * srv.c — the server's start and stop.
 *
 * srv_start copies the config (its strings too: the caller's may go),
 * opens the slots' sequences (srv_eng.c), the run log (srv_log.c), starts
 * the scheduler thread (srv_sched.c) and then binds and starts
 * libmicrohttpd (srv_http.c), so a request never arrives before there is
 * something to run it.  srv_stop undoes it in the other order: new
 * requests are refused, the scheduler ends every job it holds, the
 * connections are resumed and closed, the slots closed.  A job's life is
 * srv_job.c's.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "serve/srv_impl.h"

/* ----------------------------------------------------------- start, stop */

void srv_config_default(srv_config *c)
{
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8080;
    c->n_slots = 4;
    c->queue_max = 16;
    c->timeout_s = 60;
    c->body_max = 1u << 20;
    c->header_max = 16u << 10;
    eng_sampling_default(&c->sampling);
}

static char *dup_or_null(const char *s, int *bad)
{
    if (!s)
        return NULL;
    char *d = strdup(s);
    if (!d)
        *bad = 1;
    return d;
}

static int check_config(const srv_config *c, char *err, size_t errlen)
{
    if (!c->session || !c->model_path) {
        snprintf(err, errlen, "no model session");
        return SRV_EARG;
    }
    if (c->n_slots < 1 || c->n_slots > SRV_SLOTS_MAX) {
        snprintf(err, errlen, "%u slots: from 1 to %d", c->n_slots, SRV_SLOTS_MAX);
        return SRV_EARG;
    }
    if (c->queue_max > 4096 || c->body_max < 64 || c->header_max < 1024 ||
        c->timeout_s < 1) {
        snprintf(err, errlen, "a limit is out of range (queue 0-4096, body 64 bytes or more,"
                 " headers 1 KiB or more, timeout 1 s or more)");
        return SRV_EARG;
    }
    return 0;
}

static void free_srv(srv *s)
{
    srv_eng_close(s->eng);
    for (unsigned i = 0; i < SRV_SLOTS_MAX; i++)
        free(s->slots[i].cache);
    free(s->wake);
    free(s->host);
    free(s->api_key);
    free(s->model_id);
    free(s->model_path);
    free(s->log_path);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

int srv_start(srv **out, const srv_config *c, char *err, size_t errlen)
{
    int rc, oom = 0;
    *out = NULL;
    if ((rc = check_config(c, err, errlen)))
        return rc;
    srv *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return SRV_ENOMEM;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->cfg = *c;
    s->host = dup_or_null(c->host ? c->host : "127.0.0.1", &oom);
    s->api_key = c->api_key && *c->api_key ? dup_or_null(c->api_key, &oom) : NULL;
    s->model_id = dup_or_null(c->model_id ? c->model_id : "cflow", &oom);
    s->model_path = dup_or_null(c->model_path, &oom);
    s->log_path = dup_or_null(c->log_path, &oom);
    s->cfg.host = s->host;
    s->cfg.api_key = s->api_key;
    s->cfg.model_id = s->model_id;
    s->cfg.model_path = s->model_path;
    s->cfg.log_path = s->log_path;
    s->n_slots = c->n_slots;
    s->wake_cap = c->n_slots + c->queue_max + 1;
    s->wake = calloc(s->wake_cap, sizeof *s->wake);
    s->started = (int64_t)time(NULL);
    if (oom || !s->wake) {
        free_srv(s);
        snprintf(err, errlen, "out of memory");
        return SRV_ENOMEM;
    }
    s->tok = eng_tokenizer(c->session);
    s->chat = eng_session_chat(c->session);
    if (srv_eng_open(&s->eng, c->session, c->n_slots, err, errlen)) {
        free_srv(s);
        return SRV_EENG;
    }
    s->n_ctx = srv_eng_n_ctx(s->eng);
    if ((rc = srv_log_open(s, err, errlen)) < 0) {   /* a log that fails: a warning, no log */
        srv_say(s, 1, "%s", err);
        rc = 0;
    }
    if (srv_sched_start(s, err, errlen)) {
        srv_log_close(s);
        free_srv(s);
        return SRV_ENOMEM;
    }
    if ((rc = srv_http_start(s, err, errlen))) {
        srv_sched_stop(s);
        srv_log_close(s);
        free_srv(s);
        return rc;
    }
    *out = s;
    return 0;
}

unsigned srv_port(const srv *s)
{
    return s->port;
}

void srv_stop(srv *s)
{
    if (!s)
        return;
    srv_sched_stop(s);
    srv_http_stop(s);
    srv_log_close(s);
    free_srv(s);
}
