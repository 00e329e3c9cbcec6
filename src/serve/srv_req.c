/*
 * srv_req.c — a request body into a srv_req, or a 400 that names the
 * field; the request's prompt as tokens.
 *
 * One table holds every field the four endpoints read: its JSON name, the
 * endpoints that take it, what kind of value it is and where srv_req
 * keeps it, so a field is one row and every refusal is written once
 * (bad_type, bad_range).  ollama's "options" object is read through the
 * same table (its rows carry SRV_OPT).  The rules:
 *
 *   - The body is one JSON object (json-c, nesting at most 64 deep); any
 *     other body is "body: ..." (field "").
 *   - A field of the wrong type, or a value out of range, is refused
 *     naming it: "temperature: expected a number from 0 to 5, got a
 *     string".  Nested fields are named by their path: "messages[2].role",
 *     "stream_options.include_usage", "options.num_predict".
 *   - null is the same as absent, as OpenAI's clients send it.
 *   - Fields no row names are ignored (clients send "user", "metadata",
 *     "keep_alive" ...).  A field that asks for what the server does not
 *     do is refused rather than ignored, unless it asks for the default:
 *     n other than 1, logprobs, tools, a JSON response format, a
 *     frequency or presence penalty other than 0, images.
 *   - Strings must be valid UTF-8 (json-c's own check lets overlong forms
 *     through) without NUL bytes (the templates take C strings): a stop
 *     string's match then starts on a character, so the text before it is
 *     whole characters, and the text echoed back is valid JSON text.
 *
 * The sampling fields start from the server's defaults (cflow serve's
 * --temp, --top-k ...: those of `cflow run`), so a request that names
 * only a seed gets `cflow run --seed`'s tokens.
 */
#include "config.h"

#include <json-c/json.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "serve/srv_impl.h"

#define REQ_DEPTH 64
#define TOK_MAX   (1L << 30)

enum kind {
    K_LONG,      /* an integer in [lo, hi] -> long */
    K_FLOAT,     /* a number in [lo, hi] -> float */
    K_INT,       /* an integer in [lo, hi] -> int */
    K_BOOL,      /* true/false -> int */
    K_STR,       /* a string -> char * (copied) */
    K_SEED,      /* an integer: the seed (negative: random) */
    K_STOP,      /* a string or an array of them */
    K_MSGS,      /* chat messages */
    K_PROMPT,    /* a string, or an array of one string */
    K_PREDICT,   /* ollama's num_predict: n > 0 tokens, else no limit */
    K_IS,        /* must be the default: lo as a number or bool, an empty array */
    K_USAGE,     /* stream_options: {"include_usage": bool} */
    K_FORMAT,    /* response_format {"type": "text"}; ollama's format "" */
    K_OPTIONS,   /* ollama's options: the SRV_OPT rows */
};

#define A_CHAT (1u << SRV_API_CHAT)
#define A_COMP (1u << SRV_API_COMPLETE)
#define A_OCHAT (1u << SRV_API_OLLAMA_CHAT)
#define A_OGEN (1u << SRV_API_OLLAMA_GENERATE)
#define A_OAI (A_CHAT | A_COMP)
#define A_OLL (A_OCHAT | A_OGEN)
#define SRV_OPT (1u << 8)   /* a row of ollama's options object */

#define OFF(f) offsetof(srv_req, f)
#define NONE   ((size_t)-1)

typedef struct field {
    const char *name;
    unsigned    where;    /* A_* endpoints, or SRV_OPT */
    int         kind;     /* enum kind */
    double      lo, hi;
    size_t      off;      /* in srv_req, NONE: checked only */
    const char *why;      /* K_IS: what is not supported */
} field;

static const field fields[] = {
    { "model", A_OAI | A_OLL, K_STR, 0, 0, OFF(model), NULL },
    { "messages", A_CHAT | A_OCHAT, K_MSGS, 0, 0, NONE, NULL },
    { "prompt", A_COMP | A_OGEN, K_PROMPT, 0, 0, OFF(prompt), NULL },
    { "system", A_OGEN, K_STR, 0, 0, OFF(system), NULL },
    { "raw", A_OGEN, K_BOOL, 0, 0, OFF(raw), NULL },
    { "stream", A_OAI | A_OLL, K_BOOL, 0, 0, OFF(stream), NULL },
    { "stream_options", A_OAI, K_USAGE, 0, 0, NONE, NULL },
    { "max_tokens", A_OAI, K_LONG, 1, TOK_MAX, OFF(max_tokens), NULL },
    { "max_completion_tokens", A_CHAT, K_LONG, 1, TOK_MAX, OFF(max_tokens), NULL },
    { "temperature", A_OAI | SRV_OPT, K_FLOAT, 0, 5, OFF(sp.temp), NULL },
    { "top_p", A_OAI | SRV_OPT, K_FLOAT, 0, 1, OFF(sp.top_p), NULL },
    { "top_k", A_OAI | SRV_OPT, K_INT, 0, 1 << 24, OFF(sp.top_k), NULL },
    { "min_p", A_OAI | SRV_OPT, K_FLOAT, 0, 1, OFF(sp.min_p), NULL },
    { "repeat_penalty", A_OAI | SRV_OPT, K_FLOAT, 0.01, 100, OFF(sp.rep_penalty), NULL },
    { "repeat_last_n", A_OAI | SRV_OPT, K_INT, 0, 1 << 20, OFF(sp.rep_last_n), NULL },
    { "seed", A_OAI | SRV_OPT, K_SEED, 0, 0, NONE, NULL },
    { "stop", A_OAI | SRV_OPT, K_STOP, 0, 0, NONE, NULL },
    { "ignore_eos", A_OAI, K_BOOL, 0, 0, OFF(ignore_eos), NULL },
    { "num_predict", SRV_OPT, K_PREDICT, 0, 0, OFF(max_tokens), NULL },
    { "options", A_OLL, K_OPTIONS, 0, 0, NONE, NULL },
    { "n", A_OAI, K_IS, 1, 0, NONE, "only one choice (n 1) is generated" },
    { "best_of", A_COMP, K_IS, 1, 0, NONE, "only one choice (best_of 1) is generated" },
    { "logprobs", A_OAI, K_IS, 0, 0, NONE, "log probabilities are not returned" },
    { "echo", A_COMP, K_IS, 0, 0, NONE, "the prompt is not echoed" },
    { "suffix", A_COMP, K_IS, 0, 0, NONE, "insertion (suffix) is not supported" },
    { "frequency_penalty", A_OAI | SRV_OPT, K_IS, 0, 0, NONE,
      "only 0 is supported (repeat_penalty is)" },
    { "presence_penalty", A_OAI | SRV_OPT, K_IS, 0, 0, NONE,
      "only 0 is supported (repeat_penalty is)" },
    { "tools", A_CHAT | A_OCHAT, K_IS, 0, 0, NONE, "tools are not supported" },
    { "functions", A_CHAT, K_IS, 0, 0, NONE, "functions are not supported" },
    { "images", A_OGEN, K_IS, 0, 0, NONE, "images are not supported" },
    { "response_format", A_CHAT, K_FORMAT, 0, 0, NONE, NULL },
    { "format", A_OLL, K_FORMAT, 0, 0, NONE, NULL },
};

/* ---------------------------------------------------------------- refusals */

static int bad_at(srv_bad *bad, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad_at(srv_bad *bad, const char *field, const char *fmt, ...)
{
    va_list ap;
    char msg[sizeof bad->msg];
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    bad->status = 400;
    snprintf(bad->field, sizeof bad->field, "%s", field);
    snprintf(bad->msg, sizeof bad->msg, "%.90s%s%.220s", field, *field ? ": " : "", msg);
    /* one line whatever the client sent: a value quoted in the message
     * (a role, a name) may hold a newline or an escape */
    for (char *c = bad->msg; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = '?';
    for (char *c = bad->field; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = '?';
    return -1;
}

static int oom(srv_bad *bad, const char *field)
{
    bad_at(bad, field, "out of memory");
    bad->status = 500;
    return -1;
}

static const char *type_word(json_object *v)
{
    switch (json_object_get_type(v)) {
    case json_type_null: return "null";
    case json_type_boolean: return "a boolean";
    case json_type_double:
    case json_type_int: return "a number";
    case json_type_string: return "a string";
    case json_type_array: return "an array";
    case json_type_object: return "an object";
    }
    return "something else";
}

static int bad_type(srv_bad *bad, const char *path, const char *want, json_object *v)
{
    return bad_at(bad, path, "expected %s, got %s", want, type_word(v));
}

static int bad_range(srv_bad *bad, const char *path, const field *f, int integer)
{
    if (integer)
        return bad_at(bad, path, "expected an integer from %.0f to %.0f", f->lo, f->hi);
    return bad_at(bad, path, "expected a number from %g to %g", f->lo, f->hi);
}

/* ------------------------------------------------------------------ values */

static int is_number(json_object *v)
{
    return json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double);
}

/* An integer, or a number with no fraction (1.0), into *out. */
static int get_integer(json_object *v, int64_t *out)
{
    if (json_object_is_type(v, json_type_int)) {
        *out = json_object_get_int64(v);
        return 0;
    }
    double d = json_object_get_double(v);
    if (!json_object_is_type(v, json_type_double) || !isfinite(d) || d != floor(d) ||
        fabs(d) > 9.0e15)
        return -1;
    *out = (int64_t)d;
    return 0;
}

static int utf8_valid(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n || (k == 2 && c < 0xc2) || (k == 4 && c > 0xf4))
            return 0;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xc0) != 0x80)
                return 0;
        if ((k == 3 && c == 0xe0 && s[i + 1] < 0xa0) || (k == 3 && c == 0xed && s[i + 1] >= 0xa0) ||
            (k == 4 && c == 0xf0 && s[i + 1] < 0x90) || (k == 4 && c == 0xf4 && s[i + 1] >= 0x90))
            return 0;
        i += k;
    }
    return 1;
}

/* A string of valid UTF-8 without NUL bytes, copied. */
static int get_str(json_object *v, const char *path, char **out, srv_bad *bad)
{
    if (!json_object_is_type(v, json_type_string))
        return bad_type(bad, path, "a string", v);
    size_t n = (size_t)json_object_get_string_len(v);
    const char *s = json_object_get_string(v);
    if (memchr(s, '\0', n))
        return bad_at(bad, path, "the string holds a NUL byte");
    if (!utf8_valid((const unsigned char *)s, n))   /* json-c lets overlongs through */
        return bad_at(bad, path, "the string is not valid UTF-8");
    char *c = malloc(n + 1);
    if (!c)
        return oom(bad, path);
    memcpy(c, s, n + 1);
    free(*out);
    *out = c;
    return 0;
}

static int add_stop(srv_req *r, json_object *v, const char *path, srv_bad *bad)
{
    char *s = NULL;
    if (get_str(v, path, &s, bad))
        return -1;
    size_t n = strlen(s);
    int ok = n > 0 && n <= SRV_STOP_LEN;
    if (!ok || r->n_stop == SRV_STOP_MAX) {
        free(s);
        if (r->n_stop == SRV_STOP_MAX)
            return bad_at(bad, path, "at most %d stop strings", SRV_STOP_MAX);
        return bad_at(bad, path, "a stop string is 1 to %d bytes", SRV_STOP_LEN);
    }
    r->stop[r->n_stop++] = s;
    return 0;
}

static int get_stop(srv_req *r, json_object *v, const char *path, srv_bad *bad)
{
    if (json_object_is_type(v, json_type_string))
        return add_stop(r, v, path, bad);
    if (!json_object_is_type(v, json_type_array))
        return bad_type(bad, path, "a string or an array of strings", v);
    for (size_t i = 0; i < json_object_array_length(v); i++) {
        char p[sizeof bad->field];
        snprintf(p, sizeof p, "%.60s[%zu]", path, i);
        if (add_stop(r, json_object_array_get_idx(v, i), p, bad))
            return -1;
    }
    return 0;
}

/* A message's content: a string, or OpenAI's array of parts of which only
 * {"type": "text", "text": ...} is taken (joined). */
static int get_content(json_object *v, const char *path, char **out, srv_bad *bad)
{
    if (!json_object_is_type(v, json_type_array))
        return get_str(v, path, out, bad);
    srv_buf b = { 0 };
    for (size_t i = 0; i < json_object_array_length(v); i++) {
        json_object *part = json_object_array_get_idx(v, i), *t, *x;
        char p[sizeof bad->field];
        snprintf(p, sizeof p, "%s[%zu]", path, i);
        if (!json_object_is_type(part, json_type_object)) {
            srv_buf_free(&b);
            return bad_type(bad, p, "an object", part);
        }
        size_t k = strlen(p);
        snprintf(p + k, sizeof p - k, ".type");
        if (!json_object_object_get_ex(part, "type", &t) ||
            !json_object_is_type(t, json_type_string) || strcmp(json_object_get_string(t), "text")) {
            srv_buf_free(&b);
            return bad_at(bad, p, "only parts of type \"text\" are supported");
        }
        snprintf(p + k, sizeof p - k, ".text");
        char *s = NULL;
        if (!json_object_object_get_ex(part, "text", &x)) {
            srv_buf_free(&b);
            return bad_at(bad, p, "missing");
        }
        if (get_str(x, p, &s, bad)) {
            srv_buf_free(&b);
            return -1;
        }
        srv_buf_puts(&b, s);
        free(s);
    }
    srv_buf_put(&b, "", 1);
    if (b.oom) {
        srv_buf_free(&b);
        return oom(bad, path);
    }
    free(*out);
    *out = b.p;
    return 0;
}

static const char *const roles[] = { "system", "user", "assistant", "developer" };

static int get_messages(srv_req *r, json_object *v, srv_bad *bad)
{
    if (!json_object_is_type(v, json_type_array))
        return bad_type(bad, "messages", "an array", v);
    size_t n = json_object_array_length(v);
    if (n == 0 && r->api == SRV_API_CHAT)
        return bad_at(bad, "messages", "at least one message is needed");
    if (!(r->msgs = calloc(n ? n : 1, sizeof *r->msgs)))
        return oom(bad, "messages");
    for (size_t i = 0; i < n; i++) {
        json_object *m = json_object_array_get_idx(v, i), *x;
        char p[sizeof bad->field];
        snprintf(p, sizeof p, "messages[%zu]", i);
        if (!json_object_is_type(m, json_type_object))
            return bad_type(bad, p, "an object", m);
        size_t k = strlen(p);
        snprintf(p + k, sizeof p - k, ".role");
        if (!json_object_object_get_ex(m, "role", &x))
            return bad_at(bad, p, "missing");
        if (!json_object_is_type(x, json_type_string))
            return bad_type(bad, p, "a string", x);
        const char *role = json_object_get_string(x);
        size_t ri = 0;
        while (ri < sizeof roles / sizeof *roles && strcmp(role, roles[ri]))
            ri++;
        if (ri == sizeof roles / sizeof *roles)
            return bad_at(bad, p, "'%.40s' is not one of system, user, assistant", role);
        r->msgs[i].role = roles[ri == 3 ? 0 : ri];   /* developer: OpenAI's new system */
        snprintf(p + k, sizeof p - k, ".content");
        char *c = NULL;
        if (!json_object_object_get_ex(m, "content", &x) || json_object_is_type(x, json_type_null))
            return bad_at(bad, p, "missing");
        if (get_content(x, p, &c, bad))
            return -1;
        r->msgs[i].content = c;
        r->n_msgs = i + 1;
        snprintf(p + k, sizeof p - k, ".images");
        if (json_object_object_get_ex(m, "images", &x) && !json_object_is_type(x, json_type_null) &&
            !(json_object_is_type(x, json_type_array) && json_object_array_length(x) == 0))
            return bad_at(bad, p, "images are not supported");
        snprintf(p + k, sizeof p - k, ".tool_calls");
        if (json_object_object_get_ex(m, "tool_calls", &x) && !json_object_is_type(x, json_type_null) &&
            !(json_object_is_type(x, json_type_array) && json_object_array_length(x) == 0))
            return bad_at(bad, p, "tools are not supported");
    }
    return 0;
}

/* K_IS: the value must be the default (f->lo as a number or a boolean,
 * an empty array, an empty string). */
static int check_is(const field *f, json_object *v, const char *path, srv_bad *bad)
{
    int64_t i;
    int ok = 0;
    switch (json_object_get_type(v)) {
    case json_type_boolean: ok = json_object_get_boolean(v) == (f->lo != 0); break;
    case json_type_int:
    case json_type_double: ok = json_object_get_double(v) == f->lo && !get_integer(v, &i); break;
    case json_type_array: ok = json_object_array_length(v) == 0; break;
    case json_type_string: ok = json_object_get_string_len(v) == 0; break;
    default: ok = 0;
    }
    if (!ok && json_object_is_type(v, json_type_object))
        return bad_type(bad, path, "a number, boolean or array", v);
    return ok ? 0 : bad_at(bad, path, "%s", f->why);
}

/* K_FORMAT: OpenAI's {"type": "text"}, ollama's "" (or absent). */
static int check_format(json_object *v, const char *path, srv_bad *bad)
{
    json_object *t;
    if (json_object_is_type(v, json_type_string) && json_object_get_string_len(v) == 0)
        return 0;
    if (json_object_is_type(v, json_type_object) && json_object_object_get_ex(v, "type", &t) &&
        json_object_is_type(t, json_type_string) && !strcmp(json_object_get_string(t), "text"))
        return 0;
    return bad_at(bad, path, "only plain text replies are supported");
}

static int read_fields(srv_req *r, json_object *obj, unsigned where, const char *prefix,
                       srv_bad *bad);

/* One field's value v into r. */
static int read_field(srv_req *r, const field *f, json_object *v, const char *path,
                      srv_bad *bad)
{
    void *at = f->off == NONE ? NULL : (char *)r + f->off;
    int64_t i;
    switch (f->kind) {
    case K_LONG:
    case K_INT:
        if (!is_number(v))
            return bad_type(bad, path, "an integer", v);
        if (get_integer(v, &i) || i < f->lo || i > f->hi)
            return bad_range(bad, path, f, 1);
        if (f->kind == K_LONG)
            *(long *)at = (long)i;
        else
            *(int *)at = (int)i;
        return 0;
    case K_FLOAT: {
        if (!is_number(v))
            return bad_type(bad, path, "a number", v);
        double d = json_object_get_double(v);
        if (!isfinite(d) || d < f->lo || d > f->hi)
            return bad_range(bad, path, f, 0);
        *(float *)at = (float)d;
        return 0;
    }
    case K_BOOL:
        if (!json_object_is_type(v, json_type_boolean))
            return bad_type(bad, path, "true or false", v);
        *(int *)at = json_object_get_boolean(v);
        return 0;
    case K_STR: return get_str(v, path, (char **)at, bad);
    case K_SEED:
        if (!is_number(v))
            return bad_type(bad, path, "an integer", v);
        if (json_object_is_type(v, json_type_int) && json_object_get_int64(v) == INT64_MAX) {
            r->sp.seed = json_object_get_uint64(v);   /* past INT64_MAX: json-c's uint64 */
            r->has_seed = 1;
            return 0;
        }
        if (get_integer(v, &i))
            return bad_at(bad, path, "expected an integer");
        r->has_seed = i >= 0;   /* negative: a random seed, as -1 is for llama.cpp */
        r->sp.seed = (uint64_t)i;
        return 0;
    case K_STOP: return get_stop(r, v, path, bad);
    case K_MSGS: return get_messages(r, v, bad);
    case K_PROMPT:
        if (json_object_is_type(v, json_type_array)) {
            if (json_object_array_length(v) != 1)
                return bad_at(bad, path, "only one prompt (a string, or an array of one) "
                                         "is supported");
            char p[sizeof bad->field];
            snprintf(p, sizeof p, "%.60s[0]", path);
            return get_str(json_object_array_get_idx(v, 0), p, (char **)at, bad);
        }
        return get_str(v, path, (char **)at, bad);
    case K_PREDICT:
        if (!is_number(v) || get_integer(v, &i))
            return bad_type(bad, path, "an integer", v);
        *(long *)at = i > 0 ? (i > TOK_MAX ? TOK_MAX : (long)i) : 0;
        return 0;
    case K_IS: return check_is(f, v, path, bad);
    case K_USAGE: {
        json_object *u;
        if (!json_object_is_type(v, json_type_object))
            return bad_type(bad, path, "an object", v);
        if (json_object_object_get_ex(v, "include_usage", &u) &&
            !json_object_is_type(u, json_type_null)) {
            if (!json_object_is_type(u, json_type_boolean))
                return bad_type(bad, "stream_options.include_usage", "true or false", u);
            r->include_usage = json_object_get_boolean(u);
        }
        return 0;
    }
    case K_FORMAT: return check_format(v, path, bad);
    case K_OPTIONS:
        if (!json_object_is_type(v, json_type_object))
            return bad_type(bad, path, "an object", v);
        return read_fields(r, v, SRV_OPT, "options.", bad);
    }
    return 0;
}

static int read_fields(srv_req *r, json_object *obj, unsigned where, const char *prefix,
                       srv_bad *bad)
{
    for (size_t k = 0; k < sizeof fields / sizeof *fields; k++) {
        const field *f = &fields[k];
        json_object *v;
        if (!(f->where & where) || !json_object_object_get_ex(obj, f->name, &v) ||
            json_object_is_type(v, json_type_null))
            continue;
        char path[sizeof bad->field];
        snprintf(path, sizeof path, "%s%s", prefix, f->name);
        if (read_field(r, f, v, path, bad))
            return -1;
    }
    return 0;
}

int srv_req_parse(srv_req *r, int api, const char *body, size_t len, const eng_sampling *dflt,
                  srv_bad *bad)
{
    memset(r, 0, sizeof *r);
    memset(bad, 0, sizeof *bad);
    r->api = api;
    r->sp = *dflt;
    r->max_tokens = -1;
    r->stream = api == SRV_API_OLLAMA_CHAT || api == SRV_API_OLLAMA_GENERATE;
    if (len > INT32_MAX) {
        bad_at(bad, "", "body: too large");
        bad->status = 413;
        return -1;
    }
    json_tokener *tk = json_tokener_new_ex(REQ_DEPTH);
    if (!tk)
        return oom(bad, "");
    json_tokener_set_flags(tk, JSON_TOKENER_STRICT | JSON_TOKENER_ALLOW_TRAILING_CHARS |
                                   JSON_TOKENER_VALIDATE_UTF8);
    json_object *obj = json_tokener_parse_ex(tk, body, (int)len);
    enum json_tokener_error je = json_tokener_get_error(tk);
    size_t at = json_tokener_get_parse_end(tk);
    json_tokener_free(tk);
    int rc = 0;
    if (!obj || je != json_tokener_success) {
        rc = bad_at(bad, "", "body: not JSON (%s at byte %zu)",
                    je == json_tokener_continue ? "it ends too soon" : json_tokener_error_desc(je),
                    at);
    } else if (at < len && strspn(body + at, " \t\r\n") < len - at) {
        rc = bad_at(bad, "", "body: more after the JSON object at byte %zu", at);
    } else if (!json_object_is_type(obj, json_type_object)) {
        rc = bad_at(bad, "", "body: expected a JSON object, got %s", type_word(obj));
    } else {
        rc = read_fields(r, obj, 1u << api, "", bad);
        json_object *v;
        if (!rc && api == SRV_API_CHAT && !r->msgs)
            rc = bad_at(bad, "messages", "missing");
        if (!rc && api == SRV_API_COMPLETE && !r->prompt)
            rc = bad_at(bad, "prompt", "missing");
        if (!rc && api == SRV_API_OLLAMA_CHAT && !r->msgs &&
            json_object_object_get_ex(obj, "messages", &v))
            rc = bad_at(bad, "messages", "expected an array");
    }
    json_object_put(obj);
    if (rc)
        srv_req_free(r);
    return rc;
}

void srv_req_free(srv_req *r)
{
    for (size_t i = 0; i < r->n_msgs; i++)
        free((char *)r->msgs[i].content);
    free(r->msgs);
    for (size_t i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    free(r->prompt);
    free(r->system);
    free(r->model);
    memset(r, 0, sizeof *r);
}

/* --------------------------------------------------------------- tokens */

/* The text the model sees and whether its special-token strings are
 * parsed: the template's render of the messages with the assistant turn
 * opened (cflow-tui's chat; a model without a template concatenates
 * them, as its completion mode does), or a completion's text as `cflow
 * run -p` feeds it (ollama's generate: one user turn after the system
 * message, as `cflow run --chat --system` renders it, unless raw). */
static int prompt_text(const srv_req *r, enum eng_chat chat, char **text, int *special)
{
    *special = 1;
    if (r->api == SRV_API_CHAT || r->api == SRV_API_OLLAMA_CHAT) {
        *special = chat != ENG_CHAT_NONE;
        return eng_chat_render(chat, r->msgs, r->n_msgs, 1, text);
    }
    if (r->api == SRV_API_OLLAMA_GENERATE && !r->raw && chat != ENG_CHAT_NONE) {
        eng_msg m[2];
        size_t n = 0;
        if (r->system && *r->system)
            m[n++] = (eng_msg){ "system", r->system };
        m[n++] = (eng_msg){ "user", r->prompt ? r->prompt : "" };
        return eng_chat_render(chat, m, n, 1, text);
    }
    *text = strdup(r->prompt ? r->prompt : "");
    return *text ? 0 : ENG_ENOMEM;
}

int srv_req_tokens(const srv_req *r, const eng_tok *tok, enum eng_chat chat, size_t max,
                   int32_t **ids, size_t *n, srv_bad *bad)
{
    const char *what = r->api == SRV_API_CHAT || r->api == SRV_API_OLLAMA_CHAT ? "messages"
                                                                               : "prompt";
    char *text = NULL, err[256];
    int special;
    *ids = NULL;
    *n = 0;
    if (prompt_text(r, chat, &text, &special))
        return oom(bad, what);
    int rc = eng_tok_encode_alloc(tok, text, strlen(text), 1, special, max, 1, ids, n, err,
                                  sizeof err);
    free(text);
    if (rc == ENG_ECTX)
        return bad_at(bad, what, "the prompt is at least %zu tokens but a slot's context "
                      "holds %zu", *n, max);
    if (rc == ENG_ENOMEM)
        return oom(bad, what);
    if (rc)
        return bad_at(bad, what, "cannot tokenize: %s", err);
    if (*n == 0) {   /* nothing: the model starts from BOS */
        int32_t bos = eng_tok_bos(tok);
        if (bos < 0)
            return bad_at(bad, what, "empty, and the vocabulary has no BOS token");
        (*ids)[(*n)++] = bos;
    }
    if (*n >= max) {
        free(*ids);
        *ids = NULL;
        return bad_at(bad, what, "the prompt is %zu tokens but a slot's context holds %zu",
                      *n, max);
    }
    return 0;
}
