/*
 * srv_ollama.c — ollama's replies: POST /api/chat and POST /api/generate,
 * streamed as newline-delimited JSON (application/x-ndjson; ollama's
 * default) or whole with "stream": false; its error object.
 *
 * Each line is one object: {"model", "created_at", "message": {"role":
 * "assistant", "content": PIECE}, "done": false} for chat, {"model",
 * "created_at", "response": PIECE, "done": false} for generate; the last
 * has an empty piece, "done": true, "done_reason" ("stop" or "length")
 * and ollama's timing fields, durations in nanoseconds:
 *
 *   total_duration        from the request's arrival to its last token
 *   load_duration         0: the model was loaded when the server started
 *   prompt_eval_count     prompt tokens prefilled (those the slot's cache
 *                         held are not: ollama counts what it evaluated)
 *   prompt_eval_duration  the prefill, from taking a slot
 *   eval_count            tokens generated
 *   eval_duration         from the prefill's end to the last token
 *
 * A whole reply is the last line with the full text as its piece.  An
 * error is {"error": "..."}; a stream that fails after it began ends
 * with such a line.
 */
#include "config.h"

#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "serve/srv_impl.h"

static json_object *line_base(const srv_job *j)
{
    char ts[40];
    json_object *o = json_object_new_object();
    srv_rfc3339_now(ts);
    json_object_object_add(o, "model", json_object_new_string(j->s->model_id));
    json_object_object_add(o, "created_at", json_object_new_string(ts));
    return o;
}

/* The piece: chat's message or generate's response. */
static void put_piece(const srv_job *j, json_object *o, const char *s, size_t n)
{
    json_object *p = json_object_new_string_len(s, (int)n);
    if (j->req.api == SRV_API_OLLAMA_CHAT) {
        json_object *m = json_object_new_object();
        json_object_object_add(m, "role", json_object_new_string("assistant"));
        json_object_object_add(m, "content", p);
        json_object_object_add(o, "message", m);
    } else {
        json_object_object_add(o, "response", p);
    }
}

static void line(srv_buf *b, json_object *o)
{
    srv_buf_json(b, o);
    srv_buf_puts(b, "\n");
}

static int64_t ns(double s)
{
    return s > 0 ? (int64_t)(s * 1e9 + 0.5) : 0;
}

/* The last object: done, why, and the timings. */
static json_object *last(const srv_job *j, const char *s, size_t n)
{
    json_object *o = line_base(j);
    put_piece(j, o, s, n);
    json_object_object_add(o, "done_reason",
                           json_object_new_string(j->finish && !strcmp(j->finish, "length")
                                                      ? "length" : "stop"));
    json_object_object_add(o, "done", json_object_new_boolean(1));
    json_object_object_add(o, "total_duration", json_object_new_int64(ns(j->t_last - j->t_arrive)));
    json_object_object_add(o, "load_duration", json_object_new_int64(0));
    json_object_object_add(o, "prompt_eval_count", json_object_new_int64((int64_t)j->n_prefilled));
    json_object_object_add(o, "prompt_eval_duration",
                           json_object_new_int64(ns(j->t_first - j->t_start)));
    json_object_object_add(o, "eval_count", json_object_new_int64(j->n_gen));
    json_object_object_add(o, "eval_duration", json_object_new_int64(ns(j->t_last - j->t_first)));
    return o;
}

static void ollama_head(const srv_job *j, srv_buf *b)
{
    (void)j;
    (void)b;
}

static void ollama_delta(const srv_job *j, srv_buf *b, const char *s, size_t n)
{
    json_object *o = line_base(j);
    put_piece(j, o, s, n);
    json_object_object_add(o, "done", json_object_new_boolean(0));
    line(b, o);
}

static void ollama_tail(const srv_job *j, srv_buf *b)
{
    line(b, last(j, "", 0));
}

static void ollama_whole(const srv_job *j, srv_buf *b)
{
    srv_buf_json(b, last(j, j->text.p ? j->text.p : "", j->text.n));
}

void srv_ollama_error(srv_buf *b, const srv_bad *bad)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "error", json_object_new_string(bad->msg));
    srv_buf_json(b, o);
}

static void ollama_fail(srv_buf *b, const srv_bad *bad, int stream)
{
    srv_ollama_error(b, bad);
    if (stream)
        srv_buf_puts(b, "\n");
}

const srv_fmt srv_fmt_ollama_chat = {
    "application/x-ndjson", "ochat-", ollama_head, ollama_delta, ollama_tail, ollama_whole,
    ollama_fail,
};
const srv_fmt srv_fmt_ollama_generate = {
    "application/x-ndjson", "ogen-", ollama_head, ollama_delta, ollama_tail, ollama_whole,
    ollama_fail,
};
