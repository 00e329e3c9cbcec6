/*
 * srv_buf.c — what the server's files write text with: the growable byte
 * buffer (srv_buf: a reply, a stream's events, a job's held-back text),
 * the RFC 3339 time stamp of ollama's replies, and srv_say, a line to the
 * front end's log.  Below every other file of src/serve.
 */
#include "config.h"

#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/srv_impl.h"

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
