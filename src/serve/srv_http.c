/*
 * srv_http.c — the HTTP side: GNU libmicrohttpd, one internal thread
 * polling every connection (epoll), requests routed through one table.
 *
 * A request's life in on_request, which libmicrohttpd calls for its
 * headers, for each piece of its body, once the body is complete, and
 * again after a suspended connection is resumed:
 *
 *   headers    the route (404, 405 with Allow), the API key (401, compared
 *              in constant time), a Content-Length over the limit (413)
 *   body       kept up to body_max bytes; past it the rest is read and
 *              dropped and the answer is 413
 *   complete   GET routes answer at once; a generation is parsed (400
 *              naming the field), tokenized (400 when it does not fit a
 *              slot), and queued (503 with Retry-After when every slot is
 *              busy and the queue is full).  A stream is answered at once
 *              with a response whose content reader hands out what the
 *              scheduler wrote (stream_read), suspending the connection
 *              when there is nothing yet; a whole reply suspends the
 *              connection until the job is done
 *   resumed    the whole reply (status and body the scheduler built)
 *
 * Headers are bounded by the connection's memory (header_max: larger gets
 * libmicrohttpd's 431), idle connections by timeout_s.  While a connection
 * is suspended libmicrohttpd does not see its client leave; the scheduler
 * polls the socket of every job instead (srv_sched.c reap), and
 * request_done tells it when libmicrohttpd saw the request end first.
 * Error bodies are the endpoint's API's error object (OpenAI's, or
 * ollama's under /api/).
 */
#include "config.h"

#include <arpa/inet.h>
#include <json-c/json.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "serve/srv_impl.h"

/* ---------------------------------------------------------- GET routes */

static void get_health(srv *s, srv_buf *b)
{
    (void)s;
    srv_buf_puts(b, "{\"status\":\"ok\"}");
}

static void get_root(srv *s, srv_buf *b)
{
    (void)s;
    srv_buf_puts(b, "cflow is running\n");
}

static void get_version(srv *s, srv_buf *b)
{
    (void)s;
    srv_buf_puts(b, "{\"version\":\"" PACKAGE_VERSION "\"}");
}

static void get_models(srv *s, srv_buf *b)
{
    json_object *o = json_object_new_object(), *a = json_object_new_array(),
                *m = json_object_new_object();
    json_object_object_add(m, "id", json_object_new_string(s->model_id));
    json_object_object_add(m, "object", json_object_new_string("model"));
    json_object_object_add(m, "created", json_object_new_int64(s->started));
    json_object_object_add(m, "owned_by", json_object_new_string("cflow"));
    json_object_array_add(a, m);
    json_object_object_add(o, "object", json_object_new_string("list"));
    json_object_object_add(o, "data", a);
    srv_buf_json(b, o);
}

static void get_tags(srv *s, srv_buf *b)
{
    const prof_model_info *mi = s->cfg.model_info;
    const fmt_hparams *hp = eng_hparams(s->cfg.session);
    json_object *o = json_object_new_object(), *a = json_object_new_array(),
                *m = json_object_new_object(), *d = json_object_new_object(),
                *fam = json_object_new_array();
    struct stat st;
    char when[40] = "";
    if (!stat(s->model_path, &st)) {
        struct tm tm;
        gmtime_r(&st.st_mtime, &tm);
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    }
    json_object_object_add(m, "name", json_object_new_string(s->model_id));
    json_object_object_add(m, "model", json_object_new_string(s->model_id));
    json_object_object_add(m, "modified_at", json_object_new_string(when));
    json_object_object_add(m, "size", json_object_new_int64((int64_t)st.st_size));
    json_object_object_add(m, "digest", json_object_new_string(mi && mi->hash ? mi->hash : ""));
    json_object_object_add(d, "format", json_object_new_string("cflow"));
    json_object_object_add(d, "family", json_object_new_string(hp->arch));
    json_object_array_add(fam, json_object_new_string(hp->arch));
    json_object_object_add(d, "families", fam);
    json_object_object_add(d, "parameter_size", json_object_new_string(""));
    json_object_object_add(d, "quantization_level",
                           json_object_new_string(mi && mi->quant ? mi->quant : ""));
    json_object_object_add(m, "details", d);
    json_object_array_add(a, m);
    json_object_object_add(o, "models", a);
    srv_buf_json(b, o);
}

static void get_metrics(srv *s, srv_buf *b)
{
    srv_metrics_text(s, b);
}

/* ------------------------------------------------------------- routes */

typedef struct route {
    const char *method, *path;
    int         api;                         /* enum srv_api, -1: a GET route */
    int         open;                        /* answered without the API key */
    void      (*get)(srv *s, srv_buf *b);
    const char *type;                        /* a GET route's Content-Type */
} route;

#define JSON "application/json"
static const route routes[] = {
    { "POST", "/v1/chat/completions", SRV_API_CHAT, 0, NULL, NULL },
    { "POST", "/v1/completions", SRV_API_COMPLETE, 0, NULL, NULL },
    { "POST", "/api/chat", SRV_API_OLLAMA_CHAT, 0, NULL, NULL },
    { "POST", "/api/generate", SRV_API_OLLAMA_GENERATE, 0, NULL, NULL },
    { "GET", "/v1/models", -1, 0, get_models, JSON },
    { "GET", "/api/tags", -1, 0, get_tags, JSON },
    { "GET", "/api/version", -1, 0, get_version, JSON },
    { "GET", "/health", -1, 1, get_health, JSON },
    { "GET", "/metrics", -1, 0, get_metrics, "text/plain; version=0.0.4" },
    { "GET", "/", -1, 0, get_root, "text/plain" },
};
#define N_ROUTES (sizeof routes / sizeof *routes)

/* What libmicrohttpd keeps per request (its con_cls). */
typedef struct conn {
    const route *rt;
    srv_buf      body;
    int          too_big;   /* the body passed body_max: 413 */
    int          replied;   /* a response is queued */
    srv_job     *job;
    char         client[64];
} conn;

static int ollama_path(const char *url)
{
    return !strncmp(url, "/api/", 5);
}

static void client_text(struct MHD_Connection *c, char *out, size_t n)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    if (sa && sa->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const void *)sa;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
        port = ntohs(a->sin_port);
        snprintf(out, n, "%s:%u", host, port);
    } else if (sa && sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const void *)sa;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        port = ntohs(a->sin6_port);
        snprintf(out, n, "[%s]:%u", host, port);
    } else {
        snprintf(out, n, "?");
    }
}

/* Queue a reply of body b (taken) under status, with a header pair (NULL:
 * none). */
static enum MHD_Result reply(srv *s, conn *k, struct MHD_Connection *c, int status,
                             const char *type, srv_buf *b, const char *hname, const char *hval)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        b->n, b->p ? b->p : (void *)"", b->p ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        srv_buf_free(b);
        return MHD_NO;
    }
    b->p = NULL;
    b->n = b->cap = 0;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (hname)
        MHD_add_response_header(r, hname, hval);
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    k->replied = 1;
    pthread_mutex_lock(&s->mu);
    srv_metrics_reply(&s->m, status);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* An error reply in the route's API's error object. */
static enum MHD_Result reply_bad(srv *s, conn *k, struct MHD_Connection *c, const char *method,
                                 const char *url, const srv_bad *bad)
{
    srv_buf b = { 0 };
    const char *hname = NULL, *hval = NULL;
    if (ollama_path(url))
        srv_ollama_error(&b, bad);
    else
        srv_openai_error(&b, bad);
    if (bad->status == 503)
        hname = MHD_HTTP_HEADER_RETRY_AFTER, hval = "1";
    else if (bad->status == 401)
        hname = MHD_HTTP_HEADER_WWW_AUTHENTICATE, hval = "Bearer";
    else if (bad->status == 405)
        hname = MHD_HTTP_HEADER_ALLOW, hval = k->rt ? k->rt->method : "GET";
    srv_say(s, 0, "%s %s %d %s: %s", method, url, bad->status, k->client, bad->msg);
    return reply(s, k, c, bad->status, JSON, &b, hname, hval);
}

static enum MHD_Result reply_error(srv *s, conn *k, struct MHD_Connection *c,
                                   const char *method, const char *url, int status,
                                   const char *field, const char *msg)
{
    srv_bad bad = { .status = status };
    snprintf(bad.field, sizeof bad.field, "%s", field);
    snprintf(bad.msg, sizeof bad.msg, "%s", msg);
    return reply_bad(s, k, c, method, url, &bad);
}

/* ---------------------------------------------------------- the key */

/* "Authorization: Bearer KEY" against the server's key; the time taken
 * depends only on the server key's length, never on how much of it a
 * guess got right. */
static int key_ok(const srv *s, struct MHD_Connection *c)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                MHD_HTTP_HEADER_AUTHORIZATION);
    const char *key = s->api_key;
    size_t nk = strlen(key), ng;
    if (!h || strncasecmp(h, "Bearer ", 7))
        h = "";
    else
        h += 7;
    ng = strlen(h);
    volatile unsigned char d = ng != nk;
    for (size_t i = 0; i < nk; i++)
        d |= (unsigned char)(key[i] ^ (i < ng ? h[i] : 0));
    return d == 0;
}

/* ----------------------------------------------------------- streams */

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    srv_job *j = cls;
    srv *s = j->s;
    ssize_t n;
    (void)pos;
    pthread_mutex_lock(&s->mu);
    size_t avail = j->out.n - j->out_off;
    if (avail) {
        n = (ssize_t)(avail < max ? avail : max);
        memcpy(buf, j->out.p + j->out_off, (size_t)n);
        j->out_off += (size_t)n;
        if (j->out_off == j->out.n)
            j->out.n = j->out_off = 0;
    } else if (j->state == SRV_DONE) {
        n = MHD_CONTENT_READER_END_OF_STREAM;
    } else {
        j->waiting = 1;
        MHD_suspend_connection(j->conn);
        n = 0;
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* ------------------------------------------------------- generations */

/* ollama's answer to a request with nothing to generate: the model is
 * loaded (ollama loads it; here it always is). */
static enum MHD_Result reply_loaded(srv *s, conn *k, struct MHD_Connection *c, int api)
{
    json_object *o = json_object_new_object();
    char ts[40];
    srv_rfc3339_now(ts);
    json_object_object_add(o, "model", json_object_new_string(s->model_id));
    json_object_object_add(o, "created_at", json_object_new_string(ts));
    if (api == SRV_API_OLLAMA_CHAT) {
        json_object *m = json_object_new_object();
        json_object_object_add(m, "role", json_object_new_string("assistant"));
        json_object_object_add(m, "content", json_object_new_string(""));
        json_object_object_add(o, "message", m);
    } else {
        json_object_object_add(o, "response", json_object_new_string(""));
    }
    json_object_object_add(o, "done_reason", json_object_new_string("load"));
    json_object_object_add(o, "done", json_object_new_boolean(1));
    srv_buf b = { 0 };
    srv_buf_json(&b, o);
    return reply(s, k, c, 200, JSON, &b, NULL, NULL);
}

static int nothing_to_do(const srv_req *r)
{
    return (r->api == SRV_API_OLLAMA_CHAT && r->n_msgs == 0) ||
           (r->api == SRV_API_OLLAMA_GENERATE && (!r->prompt || !*r->prompt));
}

static enum MHD_Result generate(srv *s, conn *k, struct MHD_Connection *c, const char *method,
                                const char *url)
{
    int api = k->rt->api;
    srv_bad bad;
    srv_job *j = srv_job_new(s, api);
    if (!j)
        return reply_error(s, k, c, method, url, 500, "", "out of memory");
    if (srv_req_parse(&j->req, api, k->body.p ? k->body.p : "", k->body.n, &s->cfg.sampling,
                      &bad)) {
        srv_job_unref(j);
        return reply_bad(s, k, c, method, url, &bad);
    }
    if (nothing_to_do(&j->req)) {
        srv_job_unref(j);
        return reply_loaded(s, k, c, api);
    }
    if (srv_req_tokens(&j->req, s->tok, s->chat, s->n_ctx, &j->ids, &j->n_ids, &bad)) {
        srv_job_unref(j);
        return reply_bad(s, k, c, method, url, &bad);
    }
    j->max_tokens = j->req.max_tokens >= 0 ? j->req.max_tokens : s->cfg.n_predict;
    snprintf(j->client, sizeof j->client, "%s", k->client);
    snprintf(j->endpoint, sizeof j->endpoint, "%s %s", method, k->rt->path);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);

    pthread_mutex_lock(&s->mu);
    int q = srv_sched_enqueue(s, j);
    if (q == 0) {
        j->conn = c;
        j->fd = ci ? ci->connect_fd : -1;
        k->job = j;
        if (!j->req.stream) {   /* until the scheduler has the reply */
            j->waiting = 1;
            MHD_suspend_connection(c);
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (q) {
        srv_job_unref(j);
        return reply_error(s, k, c, method, url, 503, "",
                           q == -2 ? "the server is shutting down"
                                   : "every slot is busy and the queue is full: retry later");
    }
    if (!j->req.stream)
        return MHD_YES;
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384,
                                                               stream_read, j, NULL);
    if (!r)
        return MHD_NO;   /* the connection closes: request_done cancels the job */
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, j->fmt->stream_type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result rc = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    k->replied = 1;
    pthread_mutex_lock(&s->mu);
    srv_metrics_reply(&s->m, 200);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* The connection was resumed: the job is done, its reply built. */
static enum MHD_Result whole_reply(srv *s, conn *k, struct MHD_Connection *c)
{
    srv_job *j = k->job;
    srv_buf b = { 0 };
    pthread_mutex_lock(&s->mu);
    int status = j->status, empty = j->out.n == 0;
    b = j->out;
    memset(&j->out, 0, sizeof j->out);
    pthread_mutex_unlock(&s->mu);
    if (empty || b.oom) {   /* the client left (or no memory): close */
        srv_buf_free(&b);
        return MHD_NO;
    }
    return reply(s, k, c, status, JSON, &b, NULL, NULL);
}

/* ------------------------------------------------------ the handler */

static const route *find_route(const char *method, const char *url, int *other_method)
{
    *other_method = 0;
    if (!strcmp(method, "HEAD"))
        method = "GET";
    for (size_t i = 0; i < N_ROUTES; i++)
        if (!strcmp(routes[i].path, url)) {
            if (!strcmp(routes[i].method, method))
                return &routes[i];
            *other_method = (int)i + 1;
        }
    return NULL;
}

/* The first call: headers only. */
static enum MHD_Result on_headers(srv *s, conn *k, struct MHD_Connection *c,
                                  const char *method, const char *url)
{
    int other;
    client_text(c, k->client, sizeof k->client);
    k->rt = find_route(method, url, &other);
    if (!k->rt && other) {
        k->rt = &routes[other - 1];
        return reply_error(s, k, c, method, url, 405, "", "method not allowed");
    }
    if (!k->rt)
        return reply_error(s, k, c, method, url, 404, "", "no such endpoint");
    if (s->api_key && !k->rt->open && !key_ok(s, c))
        return reply_error(s, k, c, method, url, 401, "", "invalid or missing API key "
                           "(Authorization: Bearer KEY)");
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > s->cfg.body_max) {
        char msg[128];
        snprintf(msg, sizeof msg, "body: more than %zu bytes", s->cfg.body_max);
        return reply_error(s, k, c, method, url, 413, "", msg);
    }
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **ctx)
{
    srv *s = cls;
    conn *k = *ctx;
    (void)version;
    if (!k) {
        if (!(k = calloc(1, sizeof *k)))
            return MHD_NO;
        *ctx = k;
        return on_headers(s, k, c, method, url);
    }
    if (k->job)
        return whole_reply(s, k, c);
    if (*upload_size) {
        if (!k->replied && !k->too_big) {
            if (k->body.n + *upload_size > s->cfg.body_max)
                k->too_big = 1;
            else
                srv_buf_put(&k->body, upload, *upload_size);
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (k->replied)
        return MHD_YES;
    if (k->too_big || k->body.oom) {
        char msg[128];
        snprintf(msg, sizeof msg, "body: more than %zu bytes", s->cfg.body_max);
        return reply_error(s, k, c, method, url, k->too_big ? 413 : 500, "", msg);
    }
    if (k->rt->get) {
        srv_buf b = { 0 };
        k->rt->get(s, &b);
        return reply(s, k, c, 200, k->rt->type, &b, NULL, NULL);
    }
    return generate(s, k, c, method, url);
}

/* libmicrohttpd is done with a request, however it ended. */
static void request_done(void *cls, struct MHD_Connection *c, void **ctx,
                         enum MHD_RequestTerminationCode why)
{
    srv *s = cls;
    conn *k = *ctx;
    (void)c;
    (void)why;
    if (!k)
        return;
    if (k->job) {
        pthread_mutex_lock(&s->mu);
        srv_job *j = k->job;
        j->conn = NULL;
        j->fd = -1;
        if (j->state != SRV_DONE) {
            j->cancel = 1;
            pthread_cond_signal(&s->cv);
        }
        srv_job_unref(j);
        pthread_mutex_unlock(&s->mu);
    }
    srv_buf_free(&k->body);
    free(k);
    *ctx = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    srv_say(cls, 1, "http: %s", msg);
}

/* ------------------------------------------------------ start, stop */

static int resolve(const char *host, unsigned port, struct sockaddr_storage *ss, char *err,
                   size_t errlen)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc || !res) {
        snprintf(err, errlen, "--host '%s': %s", host, rc ? gai_strerror(rc) : "no address");
        return SRV_EARG;
    }
    memset(ss, 0, sizeof *ss);
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    if (ss->ss_family == AF_INET)
        ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
    freeaddrinfo(res);
    return 0;
}

int srv_http_start(srv *s, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    int rc;
    if (s->cfg.port > 65535) {
        snprintf(err, errlen, "--port %u: from 0 (any free port) to 65535", s->cfg.port);
        return SRV_EARG;
    }
    if ((rc = resolve(s->host, s->cfg.port, &ss, err, errlen)))
        return rc;
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG | (ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    s->mhd = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, s,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->cfg.timeout_s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)s->cfg.header_max,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)(256 + s->n_slots + s->cfg.queue_max),
        MHD_OPTION_NOTIFY_COMPLETED, request_done, s,
        MHD_OPTION_END);
    if (!s->mhd) {
        snprintf(err, errlen, "cannot listen on %s port %u (in use, or not an address of "
                 "this machine)", s->host, s->cfg.port);
        return SRV_ENET;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : s->cfg.port;
    return 0;
}

void srv_http_stop(srv *s)
{
    if (!s->mhd)
        return;
    /* no new connections; the ones left finish what the scheduler ended
     * (every job is done), for two seconds at most */
    MHD_socket l = MHD_quiesce_daemon(s->mhd);
    for (int i = 0; i < 200; i++) {
        const union MHD_DaemonInfo *di =
            MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
        if (!di || di->num_connections == 0)
            break;
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    MHD_stop_daemon(s->mhd);
    if (l != MHD_INVALID_SOCKET)
        close(l);
    s->mhd = NULL;
}
