/*
 * test_tui_turns.c — follow-up turns in cflow-tui prefill only what is
 * new (issue 20, must show 2): the real binary in tmux (private socket),
 * on the shipped model, four short turns typed at --temp 0 -n 40, then
 * /regen, in the model's own mode and then in the other (/mode).  The
 * tokens each reply prefilled are read from the line the chat prints
 * after it ("-- prompt N tok (+M cached), ..."), on a pane tall enough
 * (100 rows) that no reply scrolls out of sight.
 *
 * The bound counts the template's tokens from the real rendering: the
 * test opens the same model, renders four empty user turns with empty
 * replies between them through its chat template (eng_chat_render; in
 * completion mode nothing, the context starts from BOS) and tokenizes the
 * result as the TUI does.  An ideal cache prefills that plus the typed
 * tokens (each reply is decoded into the cache, not prefilled); the
 * typed tokens again are slack for a reply whose last tokens re-tokenize
 * differently.  Must hold:
 *   - the four turns together prefill fewer than twice the tokens typed
 *     plus the template's tokens (a cache kept only while the new list
 *     extends it whole re-reads the conversation whenever one reply
 *     re-tokenizes differently: issue 20 saw turn 4 prefill 210 tokens);
 *   - /regen prefills nothing: all of its prompt is in the cache, and
 *     the logits after it were kept (eng_prefill_reuse), stricter than
 *     the "nothing but what the template adds"; its line counts
 *     the prompt as cached, and the greedy reply is the same text.  The
 *     TUI before eng_prefill_reuse prefilled the whole prompt again here
 *     (193 tokens in chat mode, 142 in completion mode).
 * The TUI is typed to only once its "-- loaded" note is on the screen.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"
#include "testutil.h"
#include "ui/tui_tmux.h"

#define LIMIT_S 180          /* per wait: the sanitizer build on a busy CPU */
#define LINE "-- prompt "    /* the line after each reply */

static char sock[64];

/* Every line the pane printed (-S -), malloc'd. */
static char *history(void)
{
    return tt_tmux(sock, "capture-pane", "-p", "-S", "-", "-t", "t", NULL);
}

static void send_line(const char *text) { tt_send_line(sock, text); }

/* The n-th (from 1) reply line on scr, malloc'd, or NULL. */
static char *reply_line(const char *scr, int n)
{
    const char *p = scr;
    for (int i = 0; p && i < n; i++)
        if ((p = strstr(p, LINE)) && i + 1 < n)
            p++;
    return p ? strndup(p, strcspn(p, "\n")) : NULL;
}

/* What the chat shows between the (n-1)-th reply line (or the top) and
 * the n-th: the n-th prompt and its reply, malloc'd, or NULL. */
static char *turn_text(const char *scr, int n)
{
    const char *a = scr, *b;
    for (int i = 1; a && i < n; i++)
        if ((a = strstr(a, LINE)))
            a += strlen(LINE);
    b = a ? strstr(a, LINE) : NULL;
    return b ? strndup(a, (size_t)(b - a)) : NULL;
}

/* Wait until the screen shows what (n == 0) or an n-th reply line other
 * than old (NULL: any); that line's prompt count, or 0. */
static long wait_screen(const char *what, int n, const char *old)
{
    time_t end = time(NULL) + LIMIT_S;
    for (;;) {
        char *scr = history(), *line = scr && n ? reply_line(scr, n) : NULL;
        long v = -1;
        if (n && line && (!old || strcmp(line, old)))
            v = strtol(line + strlen(LINE), NULL, 10);
        else if (!n && scr && strstr(scr, what))
            v = 0;
        free(line);
        if (v < 0 && time(NULL) > end) {
            fprintf(stderr, "screen:\n%s\n", scr ? scr : "(none)");
            fail_msg("waited %d s for %s", LIMIT_S, what);
        }
        free(scr);
        if (v >= 0)
            return v;
        struct timespec ts = { 0, 200000000L };
        nanosleep(&ts, NULL);
    }
}

/* Wait until /clear has emptied the chat: no reply line left. */
static void wait_cleared(void)
{
    time_t end = time(NULL) + LIMIT_S;
    for (;;) {
        char *scr = history();
        if (scr && !strstr(scr, LINE)) {
            free(scr);
            return;
        }
        if (time(NULL) > end) {
            fprintf(stderr, "screen:\n%s\n", scr ? scr : "(none)");
            fail_msg("/clear left the replies");
        }
        free(scr);
        struct timespec ts = { 0, 200000000L };
        nanosleep(&ts, NULL);
    }
}

/* Tokens of text as the TUI encodes its context (BOS when the model adds
 * one; special tokens parsed in chat mode). */
static long n_tokens(eng_session *s, enum eng_chat tmpl, const char *text, int bos)
{
    int32_t *ids = NULL;
    size_t n = 0;
    char err[256];
    if (eng_tok_encode_alloc(eng_tokenizer(s), text, strlen(text), bos,
                             tmpl != ENG_CHAT_NONE, 0, 0, &ids, &n, err,
                             sizeof err))
        fail_msg("tokenize: %s", err);
    free(ids);
    return (long)n;
}

/* The template's tokens for n_turns user turns: the conversation of
 * empty turns (empty replies between them, the assistant turn opened)
 * rendered through the model's template and tokenized. */
static long template_tokens(eng_session *s, enum eng_chat tmpl, int n_turns)
{
    eng_msg m[16];
    int nm = 0;
    char *text = NULL;
    for (int i = 0; i < n_turns; i++) {
        if (i)
            m[nm++] = (eng_msg){ "assistant", "" };
        m[nm++] = (eng_msg){ "user", "" };
    }
    assert_int_equal(eng_chat_render(tmpl, m, (size_t)nm, 1, &text), 0);
    long n = n_tokens(s, tmpl, text, 1);
    free(text);
    return n ? n : 1;   /* an empty context starts from BOS */
}

/* Four turns and /regen in template tmpl, from an empty context; the
 * bounds of the top of the file. */
static void conversation(eng_session *s, enum eng_chat tmpl)
{
    static const char *const turns[] = { "Tom had a red ball.", "He gave it to Sue.",
                                         "Sue was happy.", "They played all day." };
    long typed = 0, prefilled = 0;
    for (int i = 0; i < 4; i++) {
        send_line(turns[i]);
        long got = wait_screen("a reply line", i + 1, NULL);
        long n = n_tokens(s, tmpl, turns[i], 0);
        fprintf(stderr, "turn %d: typed %ld tokens, prefilled %ld\n", i + 1, n, got);
        typed += n;
        prefilled += got;
    }
    char *scr = history(), *old = scr ? reply_line(scr, 4) : NULL;
    char *text = scr ? turn_text(scr, 4) : NULL;
    free(scr);
    assert_non_null(old);
    assert_non_null(text);
    assert_non_null(strstr(text, turns[3]));   /* the prompt, then its reply */
    send_line("/regen");
    long regen = wait_screen("the regenerated reply's line", 4, old);
    free(old);
    /* greedy: the same reply from the reused cache, its prompt counted as
     * cached on the line */
    scr = history();
    char *again = scr ? turn_text(scr, 4) : NULL, *line = scr ? reply_line(scr, 4) : NULL;
    if (!again || strcmp(again, text) || !line || !strstr(line, " cached); reply ")) {
        print_error("before /regen:\n%s\nafter:\n%s\n", text, scr ? scr : "(none)");
        fail_msg("/regen at --temp 0 changed the reply or did not count the cached prompt");
    }
    free(again);
    free(line);
    free(text);
    free(scr);
    long tt = template_tokens(s, tmpl, 4);
    fprintf(stderr, "%s mode: four turns typed %ld tokens, the template adds %ld, "
            "prefilled %ld; /regen prefilled %ld\n",
            tmpl == ENG_CHAT_NONE ? "completion" : eng_chat_name(tmpl), typed, tt,
            prefilled, regen);
    assert_true(prefilled < 2 * typed + tt);
    assert_int_equal(regen, 0);
}

/* The model's own mode, then the other one (/mode: completion after chat,
 * ChatML's rendering on a base model), so both are driven whichever model
 * data/ holds. */
static void test_turns_prefill_new_tokens(void **state)
{
    char home[2048], model[2048], args[2200], err[512];
    eng_session *s = NULL;
    (void)state;
    const char *sd = getenv("CFLOW_SRCDIR");
    snprintf(model, sizeof model, "%s/data/default.cflow", sd && *sd ? sd : ".");
    tu_require(model);
    if (eng_open(&s, model, NULL, err, sizeof err))
        fail_msg("%s", err);
    enum eng_chat own = eng_session_chat(s);
    snprintf(sock, sizeof sock, "cflow-tui-turns-%d", (int)getpid());
    snprintf(home, sizeof home, "%s", tu_tmp(sock));
    mkdir(home, 0700);
    snprintf(args, sizeof args, "--db '%s/runs.db' --temp 0 -n 40", home);
    tt_start_tui(sock, home, 100, model, args);
    wait_screen("-- loaded ", 0, NULL);
    send_line("/zoom chat");   /* the chat alone: its lines hold no live figures */
    conversation(s, own);
    send_line("/clear");
    wait_cleared();
    send_line(own == ENG_CHAT_NONE ? "/mode chatml" : "/mode completion");
    wait_screen(own == ENG_CHAT_NONE ? "-- chatml mode" : "-- completion mode", 0, NULL);
    conversation(s, own == ENG_CHAT_NONE ? ENG_CHAT_CHATML : ENG_CHAT_NONE);
    eng_close(s);
    send_line("/quit");
}

/* A failed check returns before /quit: the server (and cflow-tui in it)
 * must not outlive the test. */
static int teardown(void **state)
{
    (void)state;
    tt_kill(sock);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_turns_prefill_new_tokens, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
