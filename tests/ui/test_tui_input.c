/*
 * test_tui_input.c — hostile input to cflow-tui (issue 44, class 5): the
 * real binary in tmux (private socket) on the shipped model, --temp 0.
 *
 *   - a bracketed paste (tmux paste-buffer -p, framed ESC[200~ ...
 *     ESC[201~ because cflow-tui asks for mode 2004) of 1 MiB: lines,
 *     tabs, control characters, invalid UTF-8.  Each pasted newline was
 *     Enter: the first line went out as a prompt and every later one was
 *     refused with "still generating" (about 70 000 errors in the chat).
 *     Now the paste is text in the input line: no prompt, no error, the
 *     screen idle, the pasted tail shown at the input;
 *   - a flood of escape sequences and control bytes ending in a paste
 *     whose end never comes (ESC[200~ alone): every later key, Enter
 *     included, was pasted text for good; now the paste ends after a
 *     second without input;
 *   - the input line cleared (C-u), a prompt typed: its reply;
 *   - a storm of resizes (20x5, 400x120, 30 times) while the next reply
 *     is generated, then one more turn;
 *   - a fresh session typed the same visible conversation gives the same
 *     two replies (the KV reuse after the paste, the resizes and the
 *     oversize input stays correct).
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

#include "testutil.h"
#include "ui/tui_tmux.h"

#define LIMIT_S 180          /* per wait: the sanitizer build on a busy CPU */
#define LINE "-- prompt "    /* the line after each reply */
#define MARK "PASTE-TAIL-MARK"

static char sock[64];

static char *history(void)
{
    return tt_tmux(sock, "capture-pane", "-p", "-S", "-", "-t", "t", NULL);
}

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* Count of what in the pane's history. */
static int count(const char *what)
{
    char *h = history();
    int n = 0;
    for (const char *p = h; p && (p = strstr(p, what)); p++)
        n++;
    free(h);
    return n;
}

static void wait_count(const char *what, int n)
{
    time_t end = time(NULL) + LIMIT_S;
    while (count(what) < n) {
        if (time(NULL) > end) {
            char *h = history();
            fprintf(stderr, "screen:\n%s\n", h ? h : "(none)");
            free(h);
            fail_msg("waited %d s for %d of '%s'", LIMIT_S, n, what);
        }
        sleep_ms(200);
    }
}

/* The chat pane's text, blanks dropped (malloc'd). */
static char *chat_text(void)
{
    char *scr = history(), *t = tt_chat_text(scr), *q = t;
    for (const char *p = t; *p; p++)
        if (*p != ' ')
            *q++ = *p;
    *q = 0;
    free(scr);
    return t;
}

/* The reply to prompt (its text, blanks dropped): what the chat shows
 * between the prompt and the reply line after it, malloc'd. */
static char *reply_after(const char *prompt)
{
    char key[256], *t = chat_text();
    size_t k = 0;
    for (const char *s = prompt; *s; s++)
        if (*s != ' ')
            key[k++] = *s;
    key[k] = 0;
    const char *p = strstr(t, key), *e;
    assert_non_null(p);
    p += k;
    assert_non_null(e = strstr(p, "--prompt"));
    char *o = strndup(p, (size_t)(e - p));
    free(t);
    return o;
}

static void start(const char *name)
{
    char home[2048];
    snprintf(sock, sizeof sock, "cflow-tui-input-%d-%s", (int)getpid(), name);
    snprintf(home, sizeof home, "%s", tu_tmp(name));
    mkdir(home, 0700);
    tt_start_tui(sock, home, 60, tu_default_model(), "--temp 0 -n 24 --no-log");
    wait_count("-- loaded", 1);
}

static void test_paste_resize_reuse(void **state)
{
    (void)state;
    /* the paste: 1 MiB of lines, tabs, control bytes, invalid UTF-8 */
    size_t n = 1u << 20;
    char *buf = malloc(n + 64);
    uint64_t x = 44;
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        unsigned r = (unsigned)(x >> 33) % 64;
        buf[i] = r < 40 ? (char)('a' + r % 26) : r < 48 ? ' ' : r < 52 ? '\n' : r < 54 ? '\t'
               : r < 56 ? '\x01' : r < 58 ? '\x7f' : r < 60 ? (char)0xff : r < 62 ? (char)0xc3
                                                                       : '.';
    }
    snprintf(buf + n, 64, "\n%s", MARK);
    const char *file = tu_tmp("paste.txt");
    assert_int_equal(tu_write_file(file, buf, strlen(buf + n) + n), 0);
    free(buf);

    start("a");
    free(tt_tmux(sock, "load-buffer", file, NULL));
    free(tt_tmux(sock, "paste-buffer", "-p", "-t", "t", NULL));
    wait_count(MARK, 1);            /* the tail, at the input line */
    sleep_ms(500);
    assert_int_equal(count("still generating"), 0);
    assert_int_equal(count(LINE), 0);   /* no prompt went out */
    free(tt_tmux(sock, "send-keys", "-t", "t", "C-u", NULL));
    /* a flood of escape sequences and control bytes, ending in a paste
     * that never ends: after a second without input, keys are keys again */
    static const char *const seqs[] = {
        "\033[", "\033[1;5A", "\033O", "\033[200~", "\033[201~", "\033]0;x\007",
        "\033[?1049l", "\033c", "\033[6n", "\033[M ab", "\033", "\033[999;999H", "\014",
        "\177", "\377", "\303", "x",
    };
    char *flood = malloc(64 * 1000 + 16), *q = flood;
    for (int i = 0; i < 1000; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const char *sq = seqs[(x >> 33) % (sizeof seqs / sizeof *seqs)];
        q += sprintf(q, "%s", sq);
    }
    sprintf(q, "\033[200~");
    free(tt_tmux(sock, "send-keys", "-t", "t", "-l", flood, NULL));
    free(flood);
    sleep_ms(2500);
    /* readline may wait for the rest of a key sequence the flood began:
     * C-g drops it, then the line is emptied from its end */
    free(tt_tmux(sock, "send-keys", "-t", "t", "C-g", "C-e", "C-u", NULL));
    tt_send_line(sock, "Once upon a time");
    wait_count(LINE, 1);
    /* the next reply under a storm of resizes */
    tt_send_line(sock, "The cat sat");
    for (int i = 0; i < 30; i++)
        free(tt_tmux(sock, "resize-window", "-t", "t", "-x", i % 2 ? "400" : "20", "-y",
                     i % 2 ? "120" : "5", NULL));
    free(tt_tmux(sock, "resize-window", "-t", "t", "-x", "160", "-y", "60", NULL));
    wait_count(LINE, 2);
    tt_send_line(sock, "A dog ran");
    wait_count(LINE, 3);
    char *a1 = reply_after("Once upon a time"), *a2 = reply_after("The cat sat"),
         *a3 = reply_after("A dog ran");
    assert_int_equal(count("still generating"), 0);
    tt_kill(sock);

    /* a fresh session, the same visible conversation */
    start("b");
    tt_send_line(sock, "Once upon a time");
    wait_count(LINE, 1);
    tt_send_line(sock, "The cat sat");
    wait_count(LINE, 2);
    tt_send_line(sock, "A dog ran");
    wait_count(LINE, 3);
    char *b1 = reply_after("Once upon a time"), *b2 = reply_after("The cat sat"),
         *b3 = reply_after("A dog ran");
    tt_kill(sock);
    print_message("replies: [%s] [%s] [%s]\n", a1, a2, a3);
    assert_true(strlen(a1) > 0);
    assert_string_equal(a1, b1);
    assert_string_equal(a2, b2);
    assert_string_equal(a3, b3);
    free(a1), free(a2), free(a3), free(b1), free(b2), free(b3);
}

static int teardown(void **state)
{
    (void)state;
    tt_kill(sock);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_paste_resize_reuse, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
