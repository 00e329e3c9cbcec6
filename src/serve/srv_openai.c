/*
 * srv_openai.c — OpenAI's replies: POST /v1/chat/completions and POST
 * /v1/completions, streamed as Server-Sent Events or whole; its error
 * object.
 *
 * A stream is events "data: {JSON}\n\n" ending with "data: [DONE]\n\n":
 *
 *   chat        a first chunk whose delta is {"role": "assistant",
 *               "content": ""}, a chunk per piece of text {"content": ...},
 *               a last chunk with an empty delta and the finish_reason;
 *               every chunk an object "chat.completion.chunk" with one id
 *   completion  chunks "text_completion" whose choices[0].text is the
 *               piece, the last with "" and the finish_reason
 *
 * With stream_options.include_usage every chunk has "usage": null and one
 * more, with empty choices, carries the usage before [DONE].  A stream
 * that fails after it began ends with an event holding the error object
 * and no [DONE].
 *
 * usage: prompt_tokens (the prompt's tokens), completion_tokens (tokens
 * generated; an end-of-text token is not counted), total_tokens, and
 * prompt_tokens_details.cached_tokens (the prompt's tokens found in the
 * slot's KV cache and not prefilled again, as OpenAI reports its own
 * prompt cache).  The last chunk and a whole reply also carry "timings",
 * llama-server's object: prompt_n (tokens prefilled), prompt_ms,
 * prompt_per_second, predicted_n, predicted_ms, predicted_per_second and
 * cache_n, timed by the server from taking a slot to the last token.
 */
#include "config.h"

#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "serve/srv_impl.h"

static json_object *jstr(const char *s, size_t n)
{
    return json_object_new_string_len(s, (int)n);
}

static const char *finish_reason(const srv_job *j)
{
    return j->finish && !strcmp(j->finish, "length") ? "length" : "stop";
}

/* The fields every object of one reply shares. */
static json_object *base(const srv_job *j, const char *object)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "id", json_object_new_string(j->id));
    json_object_object_add(o, "object", json_object_new_string(object));
    json_object_object_add(o, "created", json_object_new_int64(j->created));
    json_object_object_add(o, "model", json_object_new_string(j->s->model_id));
    return o;
}

static json_object *usage(const srv_job *j)
{
    json_object *u = json_object_new_object(), *d = json_object_new_object();
    json_object_object_add(u, "prompt_tokens", json_object_new_int64((int64_t)j->n_ids));
    json_object_object_add(u, "completion_tokens", json_object_new_int64(j->n_gen));
    json_object_object_add(u, "total_tokens",
                           json_object_new_int64((int64_t)j->n_ids + j->n_gen));
    json_object_object_add(d, "cached_tokens", json_object_new_int64((int64_t)j->n_cached));
    json_object_object_add(u, "prompt_tokens_details", d);
    return u;
}

static void put_rate(json_object *t, const char *ms_key, const char *rate_key, double n,
                     double s)
{
    json_object_object_add(t, ms_key, json_object_new_double(s * 1e3));
    json_object_object_add(t, rate_key, json_object_new_double(s > 0 ? n / s : 0.0));
}

static json_object *timings(const srv_job *j)
{
    json_object *t = json_object_new_object();
    json_object_object_add(t, "cache_n", json_object_new_int64((int64_t)j->n_cached));
    json_object_object_add(t, "prompt_n", json_object_new_int64((int64_t)j->n_prefilled));
    put_rate(t, "prompt_ms", "prompt_per_second", (double)j->n_prefilled, j->t_first - j->t_start);
    json_object_object_add(t, "predicted_n", json_object_new_int64(j->n_gen));
    put_rate(t, "predicted_ms", "predicted_per_second", (double)j->n_gen, j->t_last - j->t_first);
    return t;
}

static void event(srv_buf *b, json_object *o)
{
    srv_buf_puts(b, "data: ");
    srv_buf_json(b, o);
    srv_buf_puts(b, "\n\n");
}

/* A chunk: one choice (choice NULL: none) and, with include_usage,
 * "usage": null. */
static json_object *chunk(const srv_job *j, const char *object, json_object *choice)
{
    json_object *o = base(j, object), *a = json_object_new_array();
    if (choice)
        json_object_array_add(a, choice);
    json_object_object_add(o, "choices", a);
    if (j->req.include_usage)
        json_object_object_add(o, "usage", NULL);
    return o;
}

/* The stream's end: the usage chunk when asked for, then [DONE]. */
static void done(const srv_job *j, srv_buf *b, const char *object)
{
    if (j->req.include_usage) {
        json_object *o = base(j, object);
        json_object_object_add(o, "choices", json_object_new_array());
        json_object_object_add(o, "usage", usage(j));
        event(b, o);
    }
    srv_buf_puts(b, "data: [DONE]\n\n");
}

/* ---- chat ---- */

static json_object *chat_choice(json_object *delta, const char *finish)
{
    json_object *c = json_object_new_object();
    json_object_object_add(c, "index", json_object_new_int(0));
    json_object_object_add(c, "delta", delta);
    json_object_object_add(c, "logprobs", NULL);
    json_object_object_add(c, "finish_reason", finish ? json_object_new_string(finish) : NULL);
    return c;
}

static void chat_head(const srv_job *j, srv_buf *b)
{
    json_object *d = json_object_new_object();
    json_object_object_add(d, "role", json_object_new_string("assistant"));
    json_object_object_add(d, "content", json_object_new_string(""));
    event(b, chunk(j, "chat.completion.chunk", chat_choice(d, NULL)));
}

static void chat_delta(const srv_job *j, srv_buf *b, const char *s, size_t n)
{
    json_object *d = json_object_new_object();
    json_object_object_add(d, "content", jstr(s, n));
    event(b, chunk(j, "chat.completion.chunk", chat_choice(d, NULL)));
}

static void chat_tail(const srv_job *j, srv_buf *b)
{
    json_object *o = chunk(j, "chat.completion.chunk",
                           chat_choice(json_object_new_object(), finish_reason(j)));
    json_object_object_add(o, "timings", timings(j));
    event(b, o);
    done(j, b, "chat.completion.chunk");
}

static void chat_whole(const srv_job *j, srv_buf *b)
{
    json_object *o = base(j, "chat.completion"), *a = json_object_new_array(),
                *c = json_object_new_object(), *m = json_object_new_object();
    json_object_object_add(m, "role", json_object_new_string("assistant"));
    json_object_object_add(m, "content", jstr(j->text.p ? j->text.p : "", j->text.n));
    json_object_object_add(c, "index", json_object_new_int(0));
    json_object_object_add(c, "message", m);
    json_object_object_add(c, "logprobs", NULL);
    json_object_object_add(c, "finish_reason", json_object_new_string(finish_reason(j)));
    json_object_array_add(a, c);
    json_object_object_add(o, "choices", a);
    json_object_object_add(o, "usage", usage(j));
    json_object_object_add(o, "timings", timings(j));
    srv_buf_json(b, o);
}

/* ---- completions ---- */

static json_object *text_choice(const char *s, size_t n, const char *finish)
{
    json_object *c = json_object_new_object();
    json_object_object_add(c, "text", jstr(s, n));
    json_object_object_add(c, "index", json_object_new_int(0));
    json_object_object_add(c, "logprobs", NULL);
    json_object_object_add(c, "finish_reason", finish ? json_object_new_string(finish) : NULL);
    return c;
}

static void complete_head(const srv_job *j, srv_buf *b)
{
    (void)j;
    (void)b;
}

static void complete_delta(const srv_job *j, srv_buf *b, const char *s, size_t n)
{
    event(b, chunk(j, "text_completion", text_choice(s, n, NULL)));
}

static void complete_tail(const srv_job *j, srv_buf *b)
{
    json_object *o = chunk(j, "text_completion", text_choice("", 0, finish_reason(j)));
    json_object_object_add(o, "timings", timings(j));
    event(b, o);
    done(j, b, "text_completion");
}

static void complete_whole(const srv_job *j, srv_buf *b)
{
    json_object *o = base(j, "text_completion"), *a = json_object_new_array();
    json_object_array_add(a, text_choice(j->text.p ? j->text.p : "", j->text.n, finish_reason(j)));
    json_object_object_add(o, "choices", a);
    json_object_object_add(o, "usage", usage(j));
    json_object_object_add(o, "timings", timings(j));
    srv_buf_json(b, o);
}

/* ---- errors ---- */

static const char *error_type(int status)
{
    switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 503: return "unavailable_error";
    case 500: return "server_error";
    default: return "invalid_request_error";
    }
}

static json_object *error_object(const srv_bad *bad)
{
    json_object *o = json_object_new_object(), *e = json_object_new_object();
    json_object_object_add(e, "message", json_object_new_string(bad->msg));
    json_object_object_add(e, "type", json_object_new_string(error_type(bad->status)));
    json_object_object_add(e, "param", bad->field[0] ? json_object_new_string(bad->field) : NULL);
    json_object_object_add(e, "code", bad->status == 401 ? json_object_new_string("invalid_api_key")
                                                         : NULL);
    json_object_object_add(o, "error", e);
    return o;
}

void srv_openai_error(srv_buf *b, const srv_bad *bad)
{
    srv_buf_json(b, error_object(bad));
}

static void openai_fail(srv_buf *b, const srv_bad *bad, int stream)
{
    if (stream)
        event(b, error_object(bad));
    else
        srv_openai_error(b, bad);
}

const srv_fmt srv_fmt_chat = {
    "text/event-stream", "chatcmpl-", chat_head, chat_delta, chat_tail, chat_whole, openai_fail,
};
const srv_fmt srv_fmt_complete = {
    "text/event-stream", "cmpl-", complete_head, complete_delta, complete_tail, complete_whole,
    openai_fail,
};
