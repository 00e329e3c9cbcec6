/*
 * serve.h — the public face of src/serve: `cflow serve`, one model behind
 * the HTTP APIs that editors, scripts and chat front ends speak.
 *
 *   OpenAI    POST /v1/chat/completions, POST /v1/completions (streamed as
 *             Server-Sent Events ending "data: [DONE]", or one JSON reply),
 *             GET /v1/models
 *   ollama    POST /api/chat, POST /api/generate (newline-delimited JSON
 *             streams with ollama's timing fields), GET /api/tags,
 *             GET /api/version
 *   server    GET /health, GET /metrics (Prometheus text)
 *
 * man/cflow.1 (SERVE) lists every field.  Requests run in slots, each a
 * sequence of the one opened model with its own KV cache; the decode steps
 * of all busy slots run as one batched step of the engine (srv_eng.c,
 * eng_decode_batch), a new
 * request joins at the next step and a finished one leaves.  Each request
 * is a run in the run log (program "cflow serve").
 *
 * Threads.  srv_start starts two: libmicrohttpd's, which reads requests,
 * parses and tokenizes them and writes replies, and the scheduler, which
 * alone drives the engine.  The caller's thread only starts and stops.
 *
 * Library code: nothing here prints or exits.  Failing calls return a
 * negative SRV_E* code with one line in err; what happens while serving
 * (a request answered, a log that cannot be written) goes to c->log.
 */
#ifndef CFLOW_SERVE_H
#define CFLOW_SERVE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "prof/prof.h"

enum {
    SRV_OK = 0,
    SRV_EARG = -1,     /* a bad setting (host, slots, limits) */
    SRV_ENET = -2,     /* the address cannot be bound */
    SRV_EENG = -3,     /* the engine refused a slot (err: its message) */
    SRV_ENOMEM = -4
};

typedef struct srv_config {
    /* The model: session is open (eng_open of model_path), and every slot
     * is a sequence of it; it is borrowed until srv_stop and must not be
     * used meanwhile.  model_id is the name clients see in /v1/models and
     * /api/tags (what a request's "model" field is not checked against:
     * one model is served whatever it names). */
    eng_session    *session;
    const char     *model_path;
    const char     *model_id;
    /* The network: host is a numeric IPv4 or IPv6 address or a name
     * (the first address it resolves to); port 0 takes any free port
     * (srv_port says which).  api_key NULL or "": no key; else every
     * endpoint but /health wants "Authorization: Bearer KEY" and answers
     * 401 without it. */
    const char *host;
    unsigned    port;
    const char *api_key;
    /* Slots (1..SRV_SLOTS_MAX), requests that may wait for one (more get
     * 503 with Retry-After), seconds a connection may sit idle, bytes of
     * a request body (more: 413) and of its headers (more: 431). */
    unsigned n_slots, queue_max, timeout_s;
    size_t   body_max, header_max;
    /* Generation defaults a request's fields override: tokens at most
     * (0: until the context is full) and sampling (the seed of a request
     * that names none is drawn at random). */
    long         n_predict;
    eng_sampling sampling;
    /* The run log: log_path NULL for none; machine and model_info as the
     * session row records them; run the settings every request's run
     * shares (threads, prefetch, expert I/O, context: the sampling and
     * request fields are each request's own); read_bw_gbs the machine's
     * read bandwidth (0: unknown). */
    const char            *log_path;
    const prof_machine    *machine;
    const prof_model_info *model_info;
    prof_run_cfg           run;
    double                 read_bw_gbs;
    /* Diagnostics while serving: level 0 a request answered ("POST
     * /v1/chat/completions 200 ..."), 1 a warning (the run log stopped),
     * 2 an error. */
    eng_log_fn log;
    void      *log_ud;
} srv_config;

#define SRV_SLOTS_MAX 64

/* The defaults of the limits above: 4 slots, 16 waiting, 60 s idle, 1 MiB
 * bodies, 16 KiB of headers, 127.0.0.1:8080, no key, no log; the rest
 * zero. */
void srv_config_default(srv_config *c);

typedef struct srv srv;
/* Open the slots, bind and start serving.  0 and *out, or an SRV_E* code
 * with *out NULL and one line in err (the session is then the caller's
 * again). */
int      srv_start(srv **out, const srv_config *c, char *err, size_t errlen);
/* The port srv listens on (the one chosen when c->port was 0). */
unsigned srv_port(const srv *s);
/* Stop: refuse new requests, end the ones in flight (streams get an
 * error event, waiting clients 503), close every connection and slot
 * but the session given in srv_config, and free s.  NULL: nothing. */
void     srv_stop(srv *s);

#endif /* CFLOW_SERVE_H */
