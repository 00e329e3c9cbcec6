/*
 * srv.c — the server's start and stop, and the life of a job.
 *
 * srv_start copies the config (its strings too: the caller's may go),
 * opens the slots' sequences (srv_eng.c), the run log (srv_log.c), starts
 * the scheduler thread (srv_sched.c) and then binds and starts
 * libmicrohttpd (srv_http.c), so a request never arrives before there is
 * something to run it.  srv_stop undoes it in the other order: new
 * requests are refused, the scheduler ends every job it holds, the
 * connections are resumed and closed, the slots closed.
 *
 * A job (srv_impl.h) is one request from its arrival to its last byte.
 * It has two references: its connection's, dropped when libmicrohttpd
 * says the request completed (however: answered, the client gone, a
 * timeout), and the scheduler's, taken when it is queued and dropped when
 * it is done or dropped.  Whichever goes last frees it, under mu.
 */
#include "config.h"

#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "engine/engine.h"
#include "serve/srv_impl.h"

/* ---------------------------------------------------------------- buffers */

void srv_buf_put(srv_buf *b, const void *s, size_t n)
{
    if (b->oom || n == 0)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

void srv_buf_puts(srv_buf *b, const char *s)
{
    srv_buf_put(b, s, strlen(s));
}

void srv_buf_printf(srv_buf *b, const char *fmt, ...)
{
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof tmp) {
        srv_buf_put(b, tmp, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    srv_buf_put(b, big, (size_t)n);
    free(big);
}

void srv_buf_json(srv_buf *b, json_object *o)
{
    size_t n = 0;
    const char *s = json_object_to_json_string_length(
        o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &n);
    if (s)
        srv_buf_put(b, s, n);
    else
        b->oom = 1;
    json_object_put(o);
}

void srv_buf_free(srv_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

void srv_rfc3339_now(char out[40])
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t k = strftime(out, 40, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + k, 40 - k, ".%09ldZ", ts.tv_nsec);
}

void srv_say(srv *s, int level, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    if (!s->cfg.log)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    s->cfg.log(s->cfg.log_ud, level, msg);
}

/* ------------------------------------------------------------------- jobs */

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
