/*
 * test_serve.c — `cflow serve` as its clients meet it: the real binary on
 * a free loopback port, curl as the client (issue 43's must-shows).
 *
 *   1. A chat, streamed and not, gives `cflow run --chat`'s text for the
 *      same seed (the shipped ChatML model), with a system message too;
 *      the stream is Server-Sent Events ending in [DONE], and usage holds
 *      the prompt's and the reply's tokens as cflow run counts them.
 *   2. Two streams at once give exactly the text each gives alone, and
 *      they shared decode steps (/metrics' steps of two sequences).
 *   3. A follow-up turn prefills only its new tokens: cached_tokens
 *      covers the first turn's prompt, /metrics' prefilled tokens and the
 *      run log's n_prompt grow by the rest alone.
 *   4. A client that hangs up mid-stream frees its slot within a decode
 *      step (the run log's run ends "cancelled" a token or two after the
 *      last event it read); a malformed body gets a 400 naming the field;
 *      a body over the limit 413 (with a length, and chunked), headers
 *      over it 431; with --api-key a wrong or missing key 401.
 *   5. More requests than slots queue, and past the queue get 503 with
 *      Retry-After; ollama's endpoints stream NDJSON with its timing
 *      fields and give the OpenAI endpoint's text; the GET endpoints.
 *
 * CFLOW_FAULT=serve:step-ms@N (prof_fault.c) slows the decode steps of
 * the shipped model, which would otherwise finish a reply before a second
 * client connects.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "serve_test.h"
#include "testutil.h"

#define STORY "Tell me a story about a dog named Max."

/* `cflow run --chat` of user (after system, may be NULL): its text, and
 * the prompt and generated counts its statistics give. */
static char *run_chat(const char *system, const char *user, const char *seed, const char *n,
                      const char *temp, long *n_prompt, long *n_gen)
{
    tu_proc p;
    if (system)
        assert_int_equal(tu_cflow_run(&p, "run", "-m", st_model(), "--chat", "--system", system,
                                      "-p", user, "--seed", seed, "-n", n, "--temp", temp,
                                      "--no-log", NULL), 0);
    else
        assert_int_equal(tu_cflow_run(&p, "run", "-m", st_model(), "--chat", "-p", user,
                                      "--seed", seed, "-n", n, "--temp", temp, "--no-log", NULL),
                         0);
    assert_true(tu_ok(&p, "cflow run --chat"));
    const char *a = strstr(p.err, "cflow: prompt "), *b = strstr(p.err, "cflow: generated ");
    assert_non_null(a);
    assert_non_null(b);
    *n_prompt = atol(a + 14);
    *n_gen = atol(b + 17);
    char *out = strdup(p.out);
    tu_proc_free(&p);
    return out;
}

static long jint(json_object *o, const char *path)
{
    json_object *x = st_get(o, path);
    if (!x)
        fprintf(stderr, "no %s in %s\n", path, json_object_to_json_string(o));
    assert_non_null(x);
    return (long)json_object_get_int64(x);
}

static const char *jstr(json_object *o, const char *path)
{
    json_object *x = st_get(o, path);
    if (!x || !json_object_is_type(x, json_type_string))
        fprintf(stderr, "no string %s in %s\n", path, json_object_to_json_string(o));
    assert_non_null(x);
    return json_object_get_string(x);
}

static void chat_body(char *buf, size_t n, const char *system, const char *user,
                      const char *extra)
{
    if (system)
        snprintf(buf, n, "{\"model\":\"default\",\"messages\":[{\"role\":\"system\",\"content\":"
                 "\"%s\"},{\"role\":\"user\",\"content\":\"%s\"}]%s}", system, user, extra);
    else
        snprintf(buf, n, "{\"model\":\"default\",\"messages\":[{\"role\":\"user\",\"content\":"
                 "\"%s\"}]%s}", user, extra);
}

/* One chat, whole and streamed, against cflow run --chat. */
static void chat_against_run(const st_server *sv, const char *system, const char *user,
                             const char *seed, const char *temp)
{
    long np, ng;
    char *want = run_chat(system, user, seed, "40", temp, &np, &ng);
    char extra[128], body[1024], ct[128];
    snprintf(extra, sizeof extra, ",\"max_tokens\":40,\"seed\":%s,\"temperature\":%s", seed, temp);
    chat_body(body, sizeof body, system, user, extra);

    st_reply r;
    st_http(&r, sv, "/v1/chat/completions", body, NULL);
    assert_int_equal(r.status, 200);
    assert_int_equal(st_header(&r, "Content-Type", ct, sizeof ct), 0);
    assert_string_equal(ct, "application/json");
    json_object *o = json_tokener_parse(r.body);
    assert_non_null(o);
    assert_string_equal(jstr(o, "object"), "chat.completion");
    assert_string_equal(jstr(o, "choices.0.message.role"), "assistant");
    assert_string_equal(jstr(o, "choices.0.message.content"), want);
    assert_string_equal(jstr(o, "choices.0.finish_reason"), ng == 40 ? "length" : "stop");
    assert_int_equal(jint(o, "usage.prompt_tokens"), np);
    assert_int_equal(jint(o, "usage.completion_tokens"), ng);
    assert_int_equal(jint(o, "usage.total_tokens"), np + ng);
    json_object_put(o);
    st_reply_free(&r);

    snprintf(extra, sizeof extra, ",\"max_tokens\":40,\"seed\":%s,\"temperature\":%s,"
             "\"stream\":true,\"stream_options\":{\"include_usage\":true}", seed, temp);
    chat_body(body, sizeof body, system, user, extra);
    st_http(&r, sv, "/v1/chat/completions", body, NULL);
    assert_int_equal(r.status, 200);
    assert_int_equal(st_header(&r, "Content-Type", ct, sizeof ct), 0);
    assert_string_equal(ct, "text/event-stream");
    json_object *ev;
    assert_int_equal(st_sse(r.body, &ev), 0);
    size_t n = json_object_array_length(ev);
    assert_true(n >= 3);
    json_object *first = json_object_array_get_idx(ev, 0), *usage = json_object_array_get_idx(ev, n - 1),
                *last = json_object_array_get_idx(ev, n - 2);
    assert_string_equal(jstr(first, "choices.0.delta.role"), "assistant");
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(ev, i);
        assert_string_equal(jstr(e, "object"), "chat.completion.chunk");
        assert_string_equal(jstr(e, "id"), jstr(first, "id"));
    }
    assert_string_equal(jstr(last, "choices.0.finish_reason"), ng == 40 ? "length" : "stop");
    assert_int_equal(json_object_array_length(st_get(usage, "choices")), 0);
    assert_int_equal(jint(usage, "usage.prompt_tokens"), np);
    assert_int_equal(jint(usage, "usage.completion_tokens"), ng);
    char *got = st_stream_text(ev);
    assert_string_equal(got, want);
    free(got);
    json_object_put(ev);
    st_reply_free(&r);
    free(want);
}

static void test_chat_matches_run(void **state)
{
    (void)state;
    st_server sv = { 0 };
    st_start(&sv, "-m", st_model(), "--parallel", "2", "--no-log", NULL);
    chat_against_run(&sv, NULL, STORY, "7", "0.8");
    chat_against_run(&sv, NULL, "Tell me a story about a cat.", "3", "0");
    chat_against_run(&sv, "You tell stories.", "Tell me a story about a bird.", "42", "1.1");
    assert_int_equal(st_stop(&sv), 0);
}

/* The text of a stream curl left in file. */
static char *file_text(const char *file)
{
    char *body = tu_slurp(file, NULL);
    json_object *ev;
    int rc = st_sse(body, &ev);
    if (rc)
        fprintf(stderr, "%s: %s\n", file, body);
    assert_int_equal(rc, 0);
    char *t = st_stream_text(ev);
    json_object_put(ev);
    free(body);
    return t;
}

static void test_two_streams_as_alone(void **state)
{
    (void)state;
    st_server sv = { .fault = "serve:step-ms@4" };
    st_start(&sv, "-m", st_model(), "--parallel", "2", "--no-log", NULL);
    char a[512], b[512];
    chat_body(a, sizeof a, NULL, STORY, ",\"max_tokens\":120,\"seed\":11,\"ignore_eos\":true,"
              "\"stream\":true");
    snprintf(b, sizeof b, "{\"prompt\":\"Once upon a time\",\"max_tokens\":150,"
             "\"temperature\":0,\"ignore_eos\":true,\"stream\":true}");
    const char *fa = tu_tmp("alone-a.txt"), *fb = tu_tmp("alone-b.txt");
    assert_int_equal(st_wait(st_http_bg(&sv, "/v1/chat/completions", a, fa)), 0);
    assert_int_equal(st_wait(st_http_bg(&sv, "/v1/completions", b, fb)), 0);
    char *ta = file_text(fa), *tb = file_text(fb);
    assert_true(strlen(ta) > 100 && strlen(tb) > 100);
    assert_true(st_metric(&sv, "cflow_decode_steps_by_size_total{sequences=\"2\"}") == -1);

    const char *ga = tu_tmp("both-a.txt"), *gb = tu_tmp("both-b.txt");
    pid_t pa = st_http_bg(&sv, "/v1/chat/completions", a, ga);
    pid_t pb = st_http_bg(&sv, "/v1/completions", b, gb);
    assert_int_equal(st_wait(pa), 0);
    assert_int_equal(st_wait(pb), 0);
    char *ua = file_text(ga), *ub = file_text(gb);
    assert_string_equal(ua, ta);
    assert_string_equal(ub, tb);
    /* they shared steps: each step decoded both */
    double both = st_metric(&sv, "cflow_decode_steps_by_size_total{sequences=\"2\"}");
    fprintf(stderr, "steps of two sequences: %.0f\n", both);
    assert_true(both >= 50);
    free(ta), free(tb), free(ua), free(ub);
    assert_int_equal(st_stop(&sv), 0);
}

/* A reply whose text re-encodes to other tokens than it was sampled as
 * (the shipped model copies "Sue" as " S" "ue", the text encodes " Sue"):
 * the follow-up keeps the sampled tokens (engine.h eng_tok_splice_cached),
 * so all of the reply that was decoded into the cache is reused, not only
 * what precedes the name (20 of 236 tokens without it). */
static void test_follow_up_keeps_sampled_tokens(void **state)
{
    (void)state;
    st_server sv = { 0 };
    st_start(&sv, "-m", st_model(), "--parallel", "1", "--no-log", NULL);
    char body[8192], reply[4096];
    st_reply r;
    json_object *o, *js;
    long cached;
    chat_body(body, sizeof body, NULL, "Sue was happy.", ",\"max_tokens\":200,\"temperature\":0");
    st_http(&r, &sv, "/v1/chat/completions", body, NULL);
    assert_int_equal(r.status, 200);
    o = json_tokener_parse(r.body);
    long q1 = jint(o, "usage.prompt_tokens"), g1 = jint(o, "usage.completion_tokens");
    js = json_object_new_string(jstr(o, "choices.0.message.content"));
    snprintf(reply, sizeof reply, "%s", json_object_to_json_string(js));
    json_object_put(js);
    json_object_put(o);
    st_reply_free(&r);
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"Sue was happy.\"},"
             "{\"role\":\"assistant\",\"content\":%s},{\"role\":\"user\",\"content\":"
             "\"Tell me another one.\"}],\"max_tokens\":5,\"temperature\":0}", reply);
    st_http(&r, &sv, "/v1/chat/completions", body, NULL);
    assert_int_equal(r.status, 200);
    o = json_tokener_parse(r.body);
    long q2 = jint(o, "usage.prompt_tokens");
    cached = jint(o, "usage.prompt_tokens_details.cached_tokens");
    fprintf(stderr, "Sue: turn 1: %ld prompt + %ld generated; turn 2: %ld, %ld of them cached\n",
            q1, g1, q2, cached);
    assert_true(cached >= q1 + g1 - 1);
    assert_true(cached < q2);
    json_object_put(o);
    st_reply_free(&r);
    assert_int_equal(st_stop(&sv), 0);
}

static void test_follow_up_prefills_new_tokens(void **state)
{
    (void)state;
    const char *db = tu_tmp("reuse.db");
    st_server sv = { 0 };
    st_start(&sv, "-m", st_model(), "--parallel", "2", "--db", db, NULL);
    char body[4096];
    chat_body(body, sizeof body, NULL, STORY, ",\"max_tokens\":30,\"seed\":5");
    st_reply r;
    st_http(&r, &sv, "/v1/chat/completions", body, NULL);
    assert_int_equal(r.status, 200);
    json_object *o = json_tokener_parse(r.body);
    long p1 = jint(o, "usage.prompt_tokens");
    char reply[2048];
    json_object *js = json_object_new_string(jstr(o, "choices.0.message.content"));
    snprintf(reply, sizeof reply, "%s", json_object_to_json_string(js));   /* quoted, escaped */
    json_object_put(js);
    json_object_put(o);
    st_reply_free(&r);
    double pre0 = st_metric(&sv, "cflow_prompt_tokens_prefilled_total");
    assert_true(pre0 == p1);

    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"" STORY "\"},"
             "{\"role\":\"assistant\",\"content\":%s},{\"role\":\"user\",\"content\":"
             "\"Tell me another one.\"}],\"max_tokens\":10,\"seed\":5}", reply);
    st_http(&r, &sv, "/v1/chat/completions", body, NULL);
    assert_int_equal(r.status, 200);
    o = json_tokener_parse(r.body);
    long p2 = jint(o, "usage.prompt_tokens"), cached = jint(o, "usage.prompt_tokens_details.cached_tokens");
    fprintf(stderr, "turn 1: %ld prompt tokens; turn 2: %ld, %ld of them cached\n", p1, p2, cached);
    assert_true(cached >= p1);      /* all of the first turn's prompt, and some of the reply */
    assert_true(cached < p2);
    json_object_put(o);
    st_reply_free(&r);
    double pre1 = st_metric(&sv, "cflow_prompt_tokens_prefilled_total");
    assert_true(pre1 - pre0 == (double)(p2 - cached));

    assert_int_equal(st_stop(&sv), 0);

    /* the run log: the second request's run prefilled only the new tokens */
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM run r JOIN session s ON s.id ="
                                   " r.session_id WHERE s.program = 'cflow serve'"), 2);
    assert_int_equal(tu_db_int(db, "SELECT n_prompt_all FROM run ORDER BY id DESC LIMIT 1"), p2);
    assert_int_equal(tu_db_int(db, "SELECT n_cached FROM run ORDER BY id DESC LIMIT 1"), cached);
    assert_int_equal(tu_db_int(db, "SELECT n_prompt FROM run ORDER BY id DESC LIMIT 1"), p2 - cached);
    char s[64];
    tu_db_text(db, "SELECT stop FROM run ORDER BY id DESC LIMIT 1", s, sizeof s);
    assert_string_equal(s, "length");
    tu_db_text(db, "SELECT endpoint FROM run ORDER BY id DESC LIMIT 1", s, sizeof s);
    assert_string_equal(s, "POST /v1/chat/completions");
    tu_db_text(db, "SELECT client FROM run ORDER BY id DESC LIMIT 1", s, sizeof s);
    assert_true(!strncmp(s, "127.0.0.1:", 10));
}

/* tu_run_watch's watcher: kill curl once it has read `want` events. */
typedef struct hangup {
    tu_proc *p;
    int      want, got;
} hangup;

static int count_events(const char *s, size_t n)
{
    int k = 0;
    for (const char *at = s; at && (at = memmem(at, n - (size_t)(at - s), "data: ", 6)); at += 6)
        k++;
    return k;
}

static int hang_up(void *ctx, pid_t pid, size_t out_len)
{
    hangup *h = ctx;
    if (!h->p->out || count_events(h->p->out, out_len) < h->want)
        return 0;
    h->got = count_events(h->p->out, out_len);
    kill(pid, SIGKILL);
    return 1;
}

static void test_hang_up_frees_the_slot(void **state)
{
    (void)state;
    const char *db = tu_tmp("hangup.db");
    st_server sv = { .fault = "serve:step-ms@30" };
    st_start(&sv, "-m", st_model(), "--parallel", "1", "--db", db, NULL);
    char u[128], body[512];
    snprintf(u, sizeof u, "http://127.0.0.1:%u/v1/completions", sv.port);
    snprintf(body, sizeof body, "{\"prompt\":\"Once upon a time\",\"max_tokens\":400,"
             "\"ignore_eos\":true,\"stream\":true,\"seed\":1}");
    char *argv[] = { (char *)st_curl(), "-sS", "-N", "--data-raw", body, u, NULL };
    tu_proc p;
    hangup h = { &p, 6, 0 };
    assert_int_equal(tu_run_watch(&p, argv, NULL, 60, hang_up, &h, 1), 0);
    assert_int_equal(h.got >= 6, 1);
    int events = count_events(p.out, p.out_len);
    tu_proc_free(&p);
    /* the slot is free within a step (30 ms) of the hang-up: wait at most
     * a second for the scheduler to see it */
    assert_true(st_wait_metric(&sv, "cflow_slots_busy", 0) == 0);
    assert_true(st_metric(&sv, "cflow_requests_cancelled_total") == 1);
    char s[64];
    tu_db_text(db, "SELECT stop FROM run ORDER BY id DESC LIMIT 1", s, sizeof s);
    assert_string_equal(s, "cancelled");
    /* tokens sampled: those read, the one whose event was in flight, and
     * at most the one of the step running when the client left */
    int64_t dec = tu_db_int(db, "SELECT n_gen FROM run ORDER BY id DESC LIMIT 1");
    fprintf(stderr, "read %d events; the run decoded %lld tokens\n", events, (long long)dec);
    assert_true(dec >= events - 1 && dec <= events + 2);

    /* a reply not streamed: its connection waits, suspended, for the whole
     * reply (12 s of steps); the client gives up after 0.6 s */
    body[strlen(body) - strlen(",\"stream\":true,\"seed\":1}")] = '\0';
    strcat(body, ",\"seed\":1}");
    char *argv2[] = { (char *)st_curl(), "-sS", "--max-time", "0.6", "--data-raw", body, u, NULL };
    assert_int_equal(tu_run(&p, argv2, NULL, 60), 0);
    assert_int_equal(p.status, 28);   /* curl: operation timed out */
    tu_proc_free(&p);
    assert_true(st_wait_metric(&sv, "cflow_slots_busy", 0) == 0);
    assert_true(st_metric(&sv, "cflow_requests_cancelled_total") == 2);
    assert_int_equal(st_stop(&sv), 0);
    tu_db_text(db, "SELECT stop FROM run ORDER BY id DESC LIMIT 1", s, sizeof s);
    assert_string_equal(s, "cancelled");
    dec = tu_db_int(db, "SELECT n_gen FROM run ORDER BY id DESC LIMIT 1");
    fprintf(stderr, "gave up after 0.6 s: the run decoded %lld tokens\n", (long long)dec);
    assert_true(dec < 60);
}

static void expect_error(const st_server *sv, const char *path, const char *body, int status,
                         const char *param, const char *words)
{
    st_reply r;
    st_http(&r, sv, path, body, NULL);
    if (r.status != status)
        fprintf(stderr, "%s %s: %d %s\n", path, body, r.status, r.body);
    assert_int_equal(r.status, status);
    json_object *o = json_tokener_parse(r.body);
    assert_non_null(o);
    const char *msg = !strncmp(path, "/api/", 5) ? jstr(o, "error") : jstr(o, "error.message");
    if (!strstr(msg, words))
        fprintf(stderr, "%s: \"%s\" lacks \"%s\"\n", path, msg, words);
    assert_non_null(strstr(msg, words));
    if (param)
        assert_string_equal(jstr(o, "error.param"), param);
    json_object_put(o);
    st_reply_free(&r);
}

static void test_bad_requests(void **state)
{
    (void)state;
    st_server sv = { 0 };
    st_start(&sv, "-m", st_model(), "--no-log", NULL);
    const char *chat = "/v1/chat/completions";
    expect_error(&sv, chat, "{\"messages\": [", 400, NULL, "body: not JSON");
    expect_error(&sv, chat, "{\"messages\":\"hi\"}", 400, "messages",
                 "messages: expected an array, got a string");
    expect_error(&sv, chat, "{\"messages\":[{\"role\":\"user\",\"content\":7}]}", 400,
                 "messages[0].content", "messages[0].content: expected a string");
    expect_error(&sv, chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                 "\"max_tokens\":\"ten\"}", 400, "max_tokens", "max_tokens: expected an integer");
    expect_error(&sv, chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                 "\"temperature\":7}", 400, "temperature", "from 0 to 5");
    expect_error(&sv, chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                 "\"stream_options\":{\"include_usage\":1}}", 400,
                 "stream_options.include_usage", "true or false");
    expect_error(&sv, chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"n\":3}",
                 400, "n", "only one choice");
    expect_error(&sv, "/v1/completions", "{\"prompt\":[\"a\",\"b\"]}", 400, "prompt",
                 "only one prompt");
    expect_error(&sv, "/api/chat", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                 "\"options\":{\"temperature\":\"hot\"}}", 400, NULL,
                 "options.temperature: expected a number, got a string");
    expect_error(&sv, "/v1/nope", "{}", 404, NULL, "no such endpoint");

    /* a body over 1 MiB, with a length and chunked; headers over 16 KiB */
    const char *big = tu_tmp("big.json");
    size_t n = (1u << 20) + 100;
    char *b = malloc(n);
    assert_non_null(b);
    memset(b, ' ', n);
    b[0] = '{';
    b[n - 1] = '}';
    tu_spit(big, b, n);
    free(b);
    st_reply r;
    st_http_file(&r, &sv, chat, big);
    assert_int_equal(r.status, 413);
    assert_non_null(strstr(r.body, "more than 1048576 bytes"));
    st_reply_free(&r);
    char u[128], data[4200];
    snprintf(u, sizeof u, "http://127.0.0.1:%u/v1/chat/completions", sv.port);
    snprintf(data, sizeof data, "@%s", big);
    char *argv[] = { (char *)st_curl(), "-sS", "-i", "-H", "Transfer-Encoding: chunked", "--data-binary",
                     data, u, NULL };
    tu_proc p;
    assert_int_equal(tu_run(&p, argv, NULL, 60), 0);
    assert_non_null(strstr(p.out, "HTTP/1.1 413"));
    tu_proc_free(&p);
    char *hdr = malloc(20001);
    assert_non_null(hdr);
    memcpy(hdr, "X-Big: ", 7);
    memset(hdr + 7, 'b', 19993);
    hdr[20000] = '\0';
    st_http(&r, &sv, "/health", NULL, hdr);
    assert_int_equal(r.status, 431);
    st_reply_free(&r);
    free(hdr);
    /* still serving */
    st_http(&r, &sv, "/health", NULL, NULL);
    assert_int_equal(r.status, 200);
    st_reply_free(&r);
    assert_true(st_metric(&sv, "cflow_requests_total{code=\"400\"}") == 9);
    assert_int_equal(st_stop(&sv), 0);
}

static void test_api_key(void **state)
{
    (void)state;
    st_server sv = { 0 };
    st_start(&sv, "-m", st_model(), "--no-log", "--api-key", "s3cret-key", NULL);
    const char *body = "{\"prompt\":\"Once\",\"max_tokens\":2}";
    static const struct {
        const char *header;
        int         status;
    } cases[] = {
        { NULL, 401 },
        { "Authorization: Bearer wrong-key!", 401 },
        { "Authorization: Bearer s3cret-ke", 401 },
        { "Authorization: Bearer s3cret-keyy", 401 },
        { "Authorization: Basic s3cret-key", 401 },
        { "Authorization: Bearer s3cret-key", 200 },
        { "Authorization: bearer s3cret-key", 200 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        st_reply r;
        st_http(&r, &sv, "/v1/completions", body, cases[i].header);
        if (r.status != cases[i].status)
            fprintf(stderr, "%s: %d\n", cases[i].header ? cases[i].header : "no key", r.status);
        assert_int_equal(r.status, cases[i].status);
        char v[64];
        if (r.status == 401) {
            assert_int_equal(st_header(&r, "WWW-Authenticate", v, sizeof v), 0);
            assert_non_null(strstr(r.body, "invalid_api_key"));
        }
        st_reply_free(&r);
    }
    st_reply r;
    st_http(&r, &sv, "/health", NULL, NULL);   /* open without the key */
    assert_int_equal(r.status, 200);
    st_reply_free(&r);
    st_http(&r, &sv, "/metrics", NULL, NULL);
    assert_int_equal(r.status, 401);
    st_reply_free(&r);
    assert_int_equal(st_stop(&sv), 0);
}

static void test_queue_then_503(void **state)
{
    (void)state;
    st_server sv = { .fault = "serve:step-ms@20" };
    st_start(&sv, "-m", st_model(), "--parallel", "1", "--queue", "1", "--no-log", NULL);
    const char *body = "{\"prompt\":\"Once upon a time\",\"max_tokens\":60,\"temperature\":0,"
                       "\"ignore_eos\":true,\"stream\":true}";
    pid_t a = st_http_bg(&sv, "/v1/completions", body, tu_tmp("q-a.txt"));
    assert_true(st_wait_metric(&sv, "cflow_slots_busy", 1) == 1);
    pid_t b = st_http_bg(&sv, "/v1/completions", body, tu_tmp("q-b.txt"));
    assert_true(st_wait_metric(&sv, "cflow_requests_queued", 1) == 1);
    st_reply r;
    st_http(&r, &sv, "/v1/completions", body, NULL);
    assert_int_equal(r.status, 503);
    char v[32];
    assert_int_equal(st_header(&r, "Retry-After", v, sizeof v), 0);
    assert_true(atoi(v) >= 1);
    st_reply_free(&r);
    assert_int_equal(st_wait(a), 0);
    assert_int_equal(st_wait(b), 0);
    char *ta = file_text(tu_tmp("q-a.txt")), *tb = file_text(tu_tmp("q-b.txt"));
    assert_string_equal(ta, tb);   /* the queued one ran in full, greedy: the same text */
    free(ta), free(tb);
    assert_true(st_metric(&sv, "cflow_requests_rejected_total") == 1);
    assert_true(st_metric(&sv, "cflow_slots_busy") == 0);
    assert_int_equal(st_stop(&sv), 0);
}

static void test_ollama(void **state)
{
    (void)state;
    st_server sv = { 0 };
    st_start(&sv, "-m", st_model(), "--no-log", NULL);
    st_reply r;
    char body[1024];
    chat_body(body, sizeof body, NULL, STORY, ",\"max_tokens\":24,\"seed\":9");
    st_http(&r, &sv, "/v1/chat/completions", body, NULL);
    char *want = st_reply_text(r.body);
    assert_non_null(want);
    st_reply_free(&r);

    snprintf(body, sizeof body, "{\"model\":\"default\",\"messages\":[{\"role\":\"user\","
             "\"content\":\"" STORY "\"}],\"options\":{\"num_predict\":24,\"seed\":9}}");
    st_http(&r, &sv, "/api/chat", body, NULL);
    assert_int_equal(r.status, 200);
    char ct[64];
    assert_int_equal(st_header(&r, "Content-Type", ct, sizeof ct), 0);
    assert_string_equal(ct, "application/x-ndjson");
    char text[4096] = "";
    int lines = 0, done = 0;
    for (char *save = NULL, *l = strtok_r(r.body, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        json_object *o = json_tokener_parse(l);
        assert_non_null(o);
        assert_false(done);
        lines++;
        strncat(text, jstr(o, "message.content"), sizeof text - strlen(text) - 1);
        if ((done = json_object_get_boolean(st_get(o, "done")))) {
            assert_string_equal(jstr(o, "done_reason"), "length");
            assert_int_equal(jint(o, "eval_count"), 24);
            /* the OpenAI request before left this prompt in the slot's
             * cache: nothing of it was evaluated again */
            assert_int_equal(jint(o, "prompt_eval_count"), 0);
            assert_true(jint(o, "total_duration") >= jint(o, "eval_duration"));
            assert_true(jint(o, "eval_duration") > 0);
            assert_true(jint(o, "prompt_eval_duration") >= 0);
            assert_int_equal(jint(o, "load_duration"), 0);
        }
        json_object_put(o);
    }
    assert_true(done);
    assert_true(lines > 2);
    assert_string_equal(text, want);
    st_reply_free(&r);

    st_http(&r, &sv, "/api/generate", "{\"model\":\"default\",\"prompt\":\"" STORY "\","
            "\"stream\":false,\"options\":{\"num_predict\":24,\"seed\":9}}", NULL);
    assert_int_equal(r.status, 200);
    json_object *o = json_tokener_parse(r.body);
    assert_string_equal(jstr(o, "response"), want);   /* one user turn: the same prompt */
    assert_true(json_object_get_boolean(st_get(o, "done")));
    json_object_put(o);
    st_reply_free(&r);
    free(want);

    st_http(&r, &sv, "/api/tags", NULL, NULL);
    o = json_tokener_parse(r.body);
    assert_string_equal(jstr(o, "models.0.name"), "default");
    assert_string_equal(jstr(o, "models.0.details.quantization_level"), "q8_0");
    json_object_put(o);
    st_reply_free(&r);
    st_http(&r, &sv, "/v1/models", NULL, NULL);
    o = json_tokener_parse(r.body);
    assert_string_equal(jstr(o, "data.0.id"), "default");
    json_object_put(o);
    st_reply_free(&r);
    st_http(&r, &sv, "/health", NULL, NULL);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "{\"status\":\"ok\"}");
    st_reply_free(&r);
    assert_int_equal(st_stop(&sv), 0);
}

static int reap(void **state)
{
    (void)state;
    st_reap();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_chat_matches_run, reap),
        cmocka_unit_test_teardown(test_two_streams_as_alone, reap),
        cmocka_unit_test_teardown(test_follow_up_prefills_new_tokens, reap),
        cmocka_unit_test_teardown(test_follow_up_keeps_sampled_tokens, reap),
        cmocka_unit_test_teardown(test_hang_up_frees_the_slot, reap),
        cmocka_unit_test_teardown(test_bad_requests, reap),
        cmocka_unit_test_teardown(test_api_key, reap),
        cmocka_unit_test_teardown(test_queue_then_503, reap),
        cmocka_unit_test_teardown(test_ollama, reap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
