/*
 * srv_impl.h — private to src/serve: what its files share.
 *
 *   srv.c         start and stop: the config copied, slots opened, the two
 *                 threads started
 *   srv_http.c    libmicrohttpd: the route table, bodies and their limits,
 *                 the API key, replies and streams (suspend and resume)
 *   srv_req.c     a request body (JSON) into a srv_req, or a 400 naming
 *                 the field; the prompt's tokens
 *   srv_openai.c  OpenAI's replies and stream events
 *   srv_ollama.c  ollama's
 *   srv_sched.c   the scheduler thread: the queue, slots, prompt reuse,
 *                 prefill between decode steps, one batched step, sampling,
 *                 stop strings, cancellation
 *   srv_eng.c     the engine under the scheduler: N sequences of one model
 *                 and one batched decode step over several of them
 *   srv_log.c     each request a run in the run log
 *   srv_metrics.c /metrics and the counters behind it
 *   srv_job.c     the job's life (queued, running, done) and its
 *                 references; the wake list of suspended connections
 *   srv_buf.c     the byte buffer, the time stamp, the log line
 *
 * each calling only files listed after it (scripts/check-structure holds
 * them to no circle).
 *
 * Locking.  srv.mu guards the queue, each job's shared half (out, state,
 * cancel, waiting, conn, fd, refs) and the counters; the scheduler holds it
 * only between engine calls, never across one.  A job's scheduler half
 * (sampler, detokeniser, stop matcher, text, times) is the scheduler's
 * alone while the job runs, and read by the HTTP thread only once the job
 * is done (state SRV_DONE, set under mu).  Connections are resumed after
 * mu is released (srv_wake_run): a suspended connection cannot complete,
 * so it stays valid until it is resumed, and only the scheduler and
 * srv_stop resume.
 */
#ifndef CFLOW_SRV_IMPL_H
#define CFLOW_SRV_IMPL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "engine/engine.h"
#include "prof/prof.h"
#include "serve/serve.h"

struct MHD_Connection;
struct MHD_Daemon;
struct json_object;

#define SRV_STOP_MAX     16        /* stop strings of one request */
#define SRV_STOP_LEN     256       /* bytes of one */
#define SRV_OUT_MAX      (4u << 20) /* stream bytes a client may leave unread */
#define SRV_PREFILL_CHUNK 512      /* prompt tokens prefilled between two decode steps */
#define SRV_ERRLEN       512

/* ---- srv_buf.c: a growable byte buffer; oom sticks after a failed
 * allocation ---- */
typedef struct srv_buf {
    char  *p;
    size_t n, cap;
    int    oom;
} srv_buf;
void srv_buf_put(srv_buf *b, const void *s, size_t n);
void srv_buf_puts(srv_buf *b, const char *s);
void srv_buf_printf(srv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* o as compact JSON (no "\/" escapes); o is released. */
void srv_buf_json(srv_buf *b, struct json_object *o);
void srv_buf_free(srv_buf *b);
/* A line to the config's log (level as srv_config.log). */
void srv_say(struct srv *s, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- requests (srv_req.c) ---- */
enum srv_api {
    SRV_API_CHAT,            /* POST /v1/chat/completions */
    SRV_API_COMPLETE,        /* POST /v1/completions */
    SRV_API_OLLAMA_CHAT,     /* POST /api/chat */
    SRV_API_OLLAMA_GENERATE, /* POST /api/generate */
    SRV_NAPI
};

typedef struct srv_req {
    int          api;               /* enum srv_api */
    eng_msg     *msgs;              /* chat: the messages, strings owned */
    size_t       n_msgs;
    char        *prompt, *system;   /* completion / generate */
    int          raw;               /* generate: no template */
    long         max_tokens;        /* -1: not given */
    eng_sampling sp;                /* the server's defaults, then the fields given */
    int          has_seed;
    char        *stop[SRV_STOP_MAX];
    size_t       n_stop;
    int          stream, include_usage, ignore_eos;
    char        *model;             /* as the client named it (NULL: none) */
} srv_req;

/* What is wrong with a request: the HTTP status, the field ("messages[1]
 * .content"; "" for the body as a whole) and one line. */
typedef struct srv_bad {
    int  status;
    char field[96];
    char msg[320];
} srv_bad;

/* body[0..len) as api's request, over the defaults dflt (seed ignored).
 * 0, or -1 with *bad (status 400) and *r freed. */
int  srv_req_parse(srv_req *r, int api, const char *body, size_t len,
                   const eng_sampling *dflt, srv_bad *bad);
void srv_req_free(srv_req *r);
/* The request's prompt as tokens (*ids malloc'd, *n of them): chat
 * messages in the model's template family chat (as cflow-tui renders
 * them), a completion's text as `cflow run -p` takes it, BOS alone for
 * nothing.  At most max tokens: more is a 400 naming the field.  0 or -1
 * with *bad (500 when memory runs out). */
int  srv_req_tokens(const srv_req *r, const eng_tok *tok, enum eng_chat chat, size_t max,
                    int32_t **ids, size_t *n, srv_bad *bad);

/* ---- jobs: one request from arrival to its last byte ---- */
enum srv_state { SRV_QUEUED, SRV_RUNNING, SRV_DONE };

typedef struct srv_job srv_job;
struct srv_job {
    struct srv *s;
    srv_req     req;
    const struct srv_fmt *fmt;
    int32_t    *ids;              /* the prompt [n_ids] */
    size_t      n_ids;
    long        max_tokens;       /* 0: until the context is full */
    char        id[48];           /* "chatcmpl-..." */
    char        client[64];       /* "127.0.0.1:41234" */
    char        endpoint[64];     /* "POST /v1/chat/completions" */
    int64_t     created;          /* unix seconds */
    double      t_arrive;         /* prof_now() at arrival */

    /* shared, under srv.mu */
    int         state;            /* enum srv_state */
    int         cancel;           /* the client left, or the server stops */
    int         refs;             /* the connection's and the scheduler's */
    int         waiting;          /* its connection is suspended for it */
    struct MHD_Connection *conn;  /* NULL once the connection completed */
    int         fd;               /* its socket (-1 then) */
    srv_buf     out;              /* bytes to send: stream events, or the reply */
    size_t      out_off;          /* of them sent */
    int         status;           /* a reply's HTTP status (non-streaming) */
    srv_job    *next;             /* the queue */

    /* the scheduler's while it runs; read-only once done */
    int         slot;             /* -1: none yet */
    eng_sampler *smp;
    eng_detok   dt;
    srv_buf     hold;             /* text held back: it may begin a stop string */
    srv_buf     text;             /* the reply so far (non-streaming) */
    int         started;          /* the stream's head was written */
    int         sent;                /* an event left for the token being sampled */
    size_t      n_pre;            /* prompt tokens in the slot's cache so far */
    size_t      n_cached;         /* of them found there (not prefilled) */
    size_t      n_prefilled;
    long        n_gen;            /* tokens generated (an end-of-text token is not) */
    double      t_start, t_first, t_last;   /* slot taken, prefill done, last token */
    double      prefill_s, decode_s;        /* engine time for this job */
    const char *finish;           /* "stop", "length", "cancelled", "error"; NULL running */
    char        err[SRV_ERRLEN];  /* the engine's message, finish "error" */
};

/* ---- reply formats (srv_openai.c, srv_ollama.c) ----
 * A stream is head, a delta per piece of text, tail; a reply that is not
 * streamed is whole.  Errors: fail writes the API's error object (stream:
 * as an event). */
typedef struct srv_fmt {
    const char *stream_type;    /* Content-Type of a stream */
    const char *id_prefix;      /* "chatcmpl-" */
    void (*head)(const srv_job *j, srv_buf *b);
    void (*delta)(const srv_job *j, srv_buf *b, const char *s, size_t n);
    void (*tail)(const srv_job *j, srv_buf *b);
    void (*whole)(const srv_job *j, srv_buf *b);
    void (*fail)(srv_buf *b, const srv_bad *bad, int stream);
} srv_fmt;
extern const srv_fmt srv_fmt_chat, srv_fmt_complete, srv_fmt_ollama_chat,
    srv_fmt_ollama_generate;
/* OpenAI's error object (srv_openai.c): {"error":{"message","type","param",
 * "code"}}; ollama's is {"error": "..."} (srv_ollama.c). */
void srv_openai_error(srv_buf *b, const srv_bad *bad);
void srv_ollama_error(srv_buf *b, const srv_bad *bad);
/* "2026-12-07T04:30:00.123456789Z": now, as ollama writes created_at. */
void srv_rfc3339_now(char out[40]);

/* ---- the engine under the scheduler (srv_eng.c) ---- */
typedef struct srv_eng srv_eng;
/* n sequences of session s, each of its context.  0, or ENG_E* with one
 * line in err. */
int      srv_eng_open(srv_eng **out, eng_session *s, unsigned n, char *err, size_t errlen);
/* Frees the sequences (not the session). */
void     srv_eng_close(srv_eng *e);
const char *srv_eng_kind(const srv_eng *e);
uint32_t srv_eng_n_ctx(const srv_eng *e);
uint32_t srv_eng_n_past(const srv_eng *e, unsigned q);
/* Make sequence q hold tokens[0..n) with the logits after the last,
 * keeping the longest prefix it holds (*n_reused: its length; may be
 * NULL).  Errors as eng_prefill_reuse's. */
int      srv_eng_prefill(srv_eng *e, unsigned q, const int32_t *tokens, size_t n,
                         size_t *n_reused, char *err, size_t errlen);
/* One decode step: sequence qs[i] takes tokens[i] (i < n, the qs
 * distinct).  rc[i] gets its code (0, ENG_ECTX when its context is full,
 * ...) and errs[i] its message; the others go on.  Returns how many
 * failed. */
unsigned srv_eng_step(srv_eng *e, const unsigned *qs, const int32_t *tokens, unsigned n,
                      int *rc, char (*errs)[SRV_ERRLEN]);
/* Forget what sequence q holds (after a failed call: its cache is not
 * known to hold what it did). */
void     srv_eng_reset(srv_eng *e, unsigned q);
/* Logits [n_vocab] after sequence q's last token. */
float   *srv_eng_logits(srv_eng *e, unsigned q);
/* The engine's counters, all sequences (the scheduler's thread). */
void     srv_eng_stats(const srv_eng *e, eng_stats *st);

/* ---- slots and the scheduler (srv_sched.c) ---- */
typedef struct srv_slot {
    srv_job  *job;          /* NULL: free */
    int32_t  *cache;        /* the tokens the sequence holds [n_cache] */
    size_t    n_cache, cap;
    int       logits;       /* the logits after the last token wait to be sampled */
    int       pending;      /* next is to be decoded at the next step */
    int32_t   next;
    uint64_t  used;         /* when it last ran a job (a counter) */
    prof     *prof;         /* the run log's probes (srv_log.c) */
    prof_log *log;
    int64_t   run_id;
} srv_slot;

int  srv_sched_start(struct srv *s, char *err, size_t errlen);
/* Stop the scheduler thread and end every job it holds (cancelled). */
void srv_sched_stop(struct srv *s);
/* Queue j (under mu); 0, or -1 when the queue is full (503). */
int  srv_sched_enqueue(struct srv *s, srv_job *j);

/* ---- the run log (srv_log.c); every call on the scheduler's thread ---- */
int  srv_log_open(struct srv *s, char *err, size_t errlen);
void srv_log_close(struct srv *s);
/* The slot's job begins: its run. */
void srv_log_begin(struct srv *s, srv_slot *sl);
/* Around an engine call: tok_begin before, tok_end after with the tokens
 * it fed the slot (n prompt tokens, or one decode token); a flush when
 * one is due. */
void srv_log_tok_begin(srv_slot *sl);
void srv_log_tok_end(struct srv *s, srv_slot *sl, int decode, size_t n);
/* The job ends (its finish set): the run's last flush. */
void srv_log_end(struct srv *s, srv_slot *sl);

/* ---- counters (srv_metrics.c), under mu ---- */
#define SRV_CODES 12
typedef struct srv_metrics {
    uint64_t code_n[SRV_CODES];        /* replies by status (srv_metrics_code) */
    int      code[SRV_CODES];
    uint64_t requests, cancelled, rejected;
    uint64_t prompt_tokens, cached_tokens, prefilled_tokens, generated_tokens;
    double   prefill_s, decode_s;      /* engine seconds, all slots */
    uint64_t steps, step_seqs;         /* decode steps, sequences they advanced */
    uint64_t step_hist[SRV_SLOTS_MAX + 1];   /* steps by sequences in them */
    eng_stats eng;                     /* srv_eng_stats after the last step */
    uint64_t kv_used;                  /* positions the slots' caches hold */
} srv_metrics;
void srv_metrics_reply(srv_metrics *m, int status);
/* The Prometheus text of s (takes mu). */
void srv_metrics_text(struct srv *s, srv_buf *b);

/* ---- the server ---- */
struct srv {
    srv_config       cfg;            /* strings copied below */
    char            *host, *api_key, *model_id, *model_path, *log_path;
    struct MHD_Daemon *mhd;
    unsigned         port;
    srv_eng         *eng;
    const eng_tok   *tok;
    enum eng_chat    chat;
    uint32_t         n_ctx;          /* a slot's context */
    int64_t          started;        /* unix seconds */

    pthread_mutex_t  mu;
    pthread_cond_t   cv;             /* the scheduler waits for work */
    pthread_t        thread;
    int              thread_on, stopping;
    srv_job         *q_head, *q_tail;
    unsigned         n_queued, n_busy;
    srv_slot         slots[SRV_SLOTS_MAX];
    unsigned         n_slots;
    uint64_t         clock;          /* slot use counter */
    unsigned long    step_ms;        /* CFLOW_FAULT=serve:step-ms@N: a step's least ms */
    srv_metrics      m;
    struct MHD_Connection **wake;    /* srv_wake_add's [wake_cap] */
    unsigned         n_wake, wake_cap;
    prof_log        *log0;           /* the session's row; slots join it */
    uint64_t         bytes_per_token;  /* weight bytes of a decode step, for the runs */
    int              log_on;
};

/* ---- srv_job.c ---- */
/* A new job for api's request (srv_http.c fills the rest); NULL when out
 * of memory.  Its one reference is the connection's. */
srv_job *srv_job_new(struct srv *s, int api);
/* Drop one reference (under mu); the last frees the job. */
void     srv_job_unref(srv_job *j);
/* Under mu: j's connection, when suspended for it, is to be resumed
 * (into s->wake, room for every job a slot or the queue holds). */
void     srv_wake_add(struct srv *s, srv_job *j);
/* Without mu, on the thread that added them: resume them. */
void     srv_wake_run(struct srv *s);

/* srv_http.c */
int  srv_http_start(struct srv *s, char *err, size_t errlen);
void srv_http_stop(struct srv *s);

#endif /* CFLOW_SRV_IMPL_H */
