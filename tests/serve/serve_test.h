/*
 * serve_test.h — what the tests of `cflow serve` share (st_ prefix): the
 * real binary started on a free loopback port, curl as the client, the
 * replies taken apart.
 */
#ifndef CFLOW_SERVE_TEST_H
#define CFLOW_SERVE_TEST_H

#include <stddef.h>
#include <sys/types.h>

#include <json-c/json.h>

#include "testutil.h"

typedef struct st_server {
    pid_t       pid;
    unsigned    port;
    char        err_path[4096];   /* its stderr */
    const char *fault;            /* $CFLOW_FAULT for it ("serve:step-ms@20"), or NULL */
} st_server;

/* Start `cflow serve --port 0 ARGS...` (NULL-terminated) with
 * CFLOW_READ_BW_GBS set (no bandwidth measured at start) and sv->fault,
 * and wait for its "listening on" line, whose port it takes; fails the
 * test when it does not come within a minute. */
void st_start(st_server *sv, ...);
/* Kill every server a failed test left running. */
void st_reap(void);
/* curl's path (searched in $PATH once). */
const char *st_curl(void);
/* SIGTERM, then its exit status (0 when it stopped as it should). */
int  st_stop(st_server *sv);
/* Its stderr so far (malloc'd). */
char *st_log(const st_server *sv);

/* One HTTP reply as curl gave it. */
typedef struct st_reply {
    int    status;
    char  *head;     /* the status line and headers */
    char  *body;
    size_t body_len;
} st_reply;
/* curl -i to path: POST body when not NULL (Content-Type JSON), GET
 * otherwise; header (may be NULL) one more header line.  Fails the test
 * when curl cannot run. */
void st_http(st_reply *r, const st_server *sv, const char *path, const char *body,
             const char *header);
/* The same, the body from a file (curl --data-binary @file). */
void st_http_file(st_reply *r, const st_server *sv, const char *path, const char *file);
void st_reply_free(st_reply *r);
/* The value of header name in r (case-insensitive) into out, 0; -1 when
 * absent. */
int  st_header(const st_reply *r, const char *name, char *out, size_t n);

/* curl in the background: its stdout (the body) into out_file; the pid. */
pid_t st_http_bg(const st_server *sv, const char *path, const char *body, const char *out_file);
/* Wait for a background curl: its exit status. */
int   st_wait(pid_t pid);

/* A sample of /metrics ("cflow_slots_busy", or with its labels
 * "cflow_requests_total{code=\"200\"}"); -1 when absent. */
double st_metric(const st_server *sv, const char *name);
/* The sample once it is want, read every 10 ms for 2 s at most: its last
 * value. */
double st_wait_metric(const st_server *sv, const char *name, double want);

/* An SSE stream's events checked for framing (each "data: " line ends an
 * event with a blank line, the last "data: [DONE]"): the JSON objects in
 * order into *ev (a json array, caller puts), 0; -1 with a message on
 * stderr when the framing is wrong. */
int   st_sse(const char *body, json_object **ev);
/* The text an OpenAI stream's chunks carry (chat deltas' content, or
 * completions' text), malloc'd. */
char *st_stream_text(json_object *ev);
/* The text a whole OpenAI reply carries (message.content or text),
 * malloc'd; NULL when the reply is not one. */
char *st_reply_text(const char *body);
/* A member of o by a dotted path ("usage.prompt_tokens",
 * "choices.0.delta.content"); NULL when absent. */
json_object *st_get(json_object *o, const char *path);

/* The shipped chat model (ChatML) and a slower one `cflow synth
 * report-arch1` writes once into the scratch folder. */
const char *st_model(void);
const char *st_slow_model(void);

#endif
