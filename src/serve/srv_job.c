/*
 * srv_job.c — the life of a job, and the connections it wakes.
 *
 * A job (srv_impl.h) is one request from its arrival to its last byte.
 * It has two references: its connection's, dropped when libmicrohttpd
 * says the request completed (however: answered, the client gone, a
 * timeout), and the scheduler's, taken when it is queued and dropped when
 * it is done or dropped.  Whichever goes last frees it, under mu.
 *
 * A connection suspended for its job (a stream with nothing to read, a
 * whole reply not done yet) is resumed by whoever changed the job: under
 * mu it goes on the wake list (srv_wake_add), and after mu is released
 * the same thread resumes the list (srv_wake_run).
 */
#include "config.h"

#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "engine/engine.h"
#include "serve/srv_impl.h"

static const srv_fmt *const fmts[SRV_NAPI] = {
    [SRV_API_CHAT] = &srv_fmt_chat,
    [SRV_API_COMPLETE] = &srv_fmt_complete,
    [SRV_API_OLLAMA_CHAT] = &srv_fmt_ollama_chat,
    [SRV_API_OLLAMA_GENERATE] = &srv_fmt_ollama_generate,
};

srv_job *srv_job_new(srv *s, int api)
{
    srv_job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    unsigned char rnd[12] = { 0 };
    if (getrandom(rnd, sizeof rnd, GRND_NONBLOCK) != (ssize_t)sizeof rnd) {
        uint64_t t = (uint64_t)prof_now() * 1000003u ^ (uint64_t)(uintptr_t)j;
        memcpy(rnd, &t, sizeof t);
    }
    j->s = s;
    j->fmt = fmts[api];
    j->req.api = api;
    size_t k = (size_t)snprintf(j->id, sizeof j->id, "%s", j->fmt->id_prefix);
    for (size_t i = 0; i < sizeof rnd && k + 2 < sizeof j->id; i++, k += 2)
        snprintf(j->id + k, sizeof j->id - k, "%02x", rnd[i]);
    j->created = (int64_t)time(NULL);
    j->t_arrive = prof_now();
    j->refs = 1;
    j->fd = -1;
    j->slot = -1;
    j->status = 200;
    return j;
}

void srv_job_unref(srv_job *j)
{
    if (!j || --j->refs > 0)
        return;
    srv_req_free(&j->req);
    free(j->ids);
    eng_sampler_free(j->smp);
    srv_buf_free(&j->out);
    srv_buf_free(&j->hold);
    srv_buf_free(&j->text);
    free(j);
}

void srv_wake_add(srv *s, srv_job *j)
{
    if (!j->waiting || !j->conn)
        return;
    j->waiting = 0;
    if (s->n_wake < s->wake_cap)
        s->wake[s->n_wake++] = j->conn;
}

void srv_wake_run(srv *s)
{
    for (unsigned i = 0; i < s->n_wake; i++)
        MHD_resume_connection(s->wake[i]);
    s->n_wake = 0;
}
