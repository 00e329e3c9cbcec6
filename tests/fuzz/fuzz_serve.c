/*
 * fuzz_serve.c — cflow serve's request parser (srv_req_parse) and the
 * prompt it makes (srv_req_tokens), the body being the fuzzed input.
 *
 * Input: byte 0 = the endpoint (bits 0-1: /v1/chat/completions,
 * /v1/completions, /api/chat, /api/generate); the rest is the request
 * body.  The vocabulary and chat template are the shipped model's
 * (data/default.cflow: ChatML), loaded once.
 *
 * Checks: a refusal has status 400, 413 or 500 and one non-empty line
 * that starts with the field it names; what is accepted holds what the
 * parser promises (sampling within its limits, at most SRV_STOP_MAX stop
 * strings of valid UTF-8, roles among system/user/assistant, NUL-free
 * strings); its prompt tokenizes into ids of the vocabulary, BOS alone
 * for nothing, fewer than the context, or is refused the same way; and a
 * piece of its text written as a stream event by every reply format reads
 * back, through json-c, as the same bytes.
 */
#include "config.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "serve/srv_impl.h"

#define N_CTX 512

static fmt_model *model;
static eng_tok *tok;
static enum eng_chat chat;

static void unload(void)
{
    eng_tok_free(tok);
    fmt_model_close(model);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char err[512] = "";
    const char *path = FUZZ_SRCDIR "/data/default.cflow";
    size_t len = 0;
    (void)argc;
    (void)argv;
    if (fmt_model_open(&model, path, err, sizeof err))
        fuzz_fail("fuzz_serve needs %s: %s", path, err);
    if (eng_tok_load(&tok, fmt_model_kv(model), err, sizeof err))
        fuzz_fail("%s: eng_tok_load: %s", path, err);
    const char *j = fmt_kv_get_str(fmt_model_kv(model), "tokenizer.chat_template", &len);
    chat = eng_chat_detect(j, len);
    FUZZ_ASSERT(chat == ENG_CHAT_CHATML);
    atexit(unload);
    return 0;
}

static void check_bad(const srv_bad *bad)
{
    FUZZ_ASSERT(bad->status == 400 || bad->status == 413 || bad->status == 500);
    FUZZ_ASSERT(bad->msg[0] && !strchr(bad->msg, '\n'));
    FUZZ_ASSERT(!strncmp(bad->msg, bad->field, strlen(bad->field)));
}

static void check_str(const char *s)
{
    FUZZ_ASSERT(s);
    FUZZ_ASSERT(fuzz_utf8_valid(s, strlen(s)));
}

static void check_req(const srv_req *r)
{
    const eng_sampling *sp = &r->sp;
    FUZZ_ASSERT(sp->temp >= 0 && sp->temp <= 5 && sp->top_p >= 0 && sp->top_p <= 1);
    FUZZ_ASSERT(sp->min_p >= 0 && sp->min_p <= 1 && sp->top_k >= 0);
    FUZZ_ASSERT(sp->rep_penalty >= 0.01f && sp->rep_penalty <= 100 && sp->rep_last_n >= 0);
    FUZZ_ASSERT(r->max_tokens >= -1);
    FUZZ_ASSERT(r->n_stop <= SRV_STOP_MAX);
    for (size_t i = 0; i < r->n_stop; i++) {
        size_t n = strlen(r->stop[i]);
        FUZZ_ASSERT(n > 0 && n <= SRV_STOP_LEN && fuzz_utf8_valid(r->stop[i], n));
    }
    if (r->api == SRV_API_CHAT)
        FUZZ_ASSERT(r->n_msgs > 0);
    if (r->api == SRV_API_COMPLETE)
        FUZZ_ASSERT(r->prompt);
    for (size_t i = 0; i < r->n_msgs; i++) {
        const char *role = r->msgs[i].role;
        FUZZ_ASSERT(!strcmp(role, "system") || !strcmp(role, "user") ||
                    !strcmp(role, "assistant"));
        check_str(r->msgs[i].content);
    }
    if (r->prompt)
        check_str(r->prompt);
    if (r->system)
        check_str(r->system);
}

/* text as a stream event of each format, read back by json-c. */
static void check_formats(const char *text, size_t n)
{
    static const srv_fmt *const fmts[] = { &srv_fmt_chat, &srv_fmt_complete,
                                           &srv_fmt_ollama_chat, &srv_fmt_ollama_generate };
    static const char *const where[] = { "choices.0.delta.content", "choices.0.text",
                                         "message.content", "response" };
    struct srv fake;
    srv_job j;
    memset(&fake, 0, sizeof fake);
    memset(&j, 0, sizeof j);
    fake.model_id = "fuzz";
    j.s = &fake;
    snprintf(j.id, sizeof j.id, "fuzz-1");
    for (int f = 0; f < 4; f++) {
        srv_buf b = { 0 };
        j.req.api = f;
        fmts[f]->delta(&j, &b, text, n);
        FUZZ_ASSERT(!b.oom && b.n > 0);
        const char *js = b.p;
        size_t jn = b.n;
        if (f < 2) {   /* "data: {...}\n\n" */
            FUZZ_ASSERT(jn > 8 && !strncmp(js, "data: ", 6) && !strcmp(js + jn - 2, "\n\n"));
            js += 6, jn -= 8;
        } else {       /* "{...}\n" */
            FUZZ_ASSERT(js[jn - 1] == '\n');
            jn -= 1;
        }
        FUZZ_ASSERT(!memchr(js, '\n', jn));
        json_tokener *tk = json_tokener_new();
        json_object *o = json_tokener_parse_ex(tk, js, (int)jn);
        FUZZ_ASSERT(o && json_tokener_get_error(tk) == json_tokener_success);
        json_tokener_free(tk);
        json_object *x = o;
        char path[64];
        snprintf(path, sizeof path, "%s", where[f]);
        for (char *save = NULL, *k = strtok_r(path, ".", &save); k && x;
             k = strtok_r(NULL, ".", &save))
            x = json_object_is_type(x, json_type_array) ? json_object_array_get_idx(x, 0)
                : json_object_object_get_ex(x, k, &x) ? x : NULL;
        FUZZ_ASSERT(x && json_object_is_type(x, json_type_string));
        FUZZ_ASSERT((size_t)json_object_get_string_len(x) == n &&
                    !memcmp(json_object_get_string(x), text, n));
        json_object_put(o);
        srv_buf_free(&b);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int api = data[0] & 3;
    srv_req r;
    srv_bad bad;
    eng_sampling dflt;
    eng_sampling_default(&dflt);
    if (srv_req_parse(&r, api, (const char *)data + 1, size - 1, &dflt, &bad)) {
        check_bad(&bad);
        return 0;
    }
    check_req(&r);
    int32_t *ids = NULL;
    size_t n = 0;
    if (srv_req_tokens(&r, tok, chat, N_CTX, &ids, &n, &bad)) {
        check_bad(&bad);
        FUZZ_ASSERT(!ids);
    } else {
        FUZZ_ASSERT(ids && n >= 1 && n < N_CTX);
        for (size_t i = 0; i < n; i++)
            FUZZ_ASSERT(ids[i] >= 0 && (uint32_t)ids[i] < eng_tok_n_vocab(tok));
    }
    free(ids);
    const char *text = r.n_msgs ? r.msgs[r.n_msgs - 1].content : r.prompt;
    if (text)
        check_formats(text, strlen(text));
    srv_req_free(&r);
    return 0;
}
