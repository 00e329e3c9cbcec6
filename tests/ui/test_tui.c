/*
 * test_tui.c — cflow-tui driven like a user: the real binary in a tmux
 * session on a private socket (-L), keys sent with send-keys, the screen
 * read back with capture-pane.
 *
 * Every wait polls the screen with a generous limit (a loaded two-core
 * machine, the sanitizer build): nothing here measures time.  Each test
 * gets its own HOME, XDG_DATA_HOME (readline history) and run log (--db).
 * cflow-tui runs inside an interactive sh, so after /quit the test can
 * check that the shell is back with a sane terminal and exit status 0.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "testutil.h"
#include "ui/tui_tmux.h"

#define WAIT_S 180        /* per wait: the sanitizer build on a busy machine */
#define PROMPT "tuitest$ "
#define PROMPT_SEEN "tuitest$"   /* capture-pane drops trailing blanks */

static char sock[64];
static char home[2048], db[2100];

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* tmux on this test's socket (tui_tmux.h). */
#define tmux(...) tt_tmux(sock, __VA_ARGS__)

static char *screen(void)
{
    return tmux("capture-pane", "-p", "-t", "t", NULL);
}

static void keys(const char *k)
{
    free(tmux("send-keys", "-t", "t", k, NULL));
}

/* Type text literally, then Enter. */
static void type_line(const char *text)
{
    free(tmux("send-keys", "-t", "t", "-l", text, NULL));
    keys("Enter");
}

/* The model is loaded: the last word of the chat pane's "-- loaded PATH:
 * ..., chatml mode" note (the shipped model chats in ChatML).  One word,
 * because the pane wraps that note where the checkout's path and the ISA's
 * name put it ("completion" and "mode" were on two lines in a checkout
 * under /tmp/ci on an AVX2 CPU). */
#define LOADED "chatml"


/* s is on the screen, on one row or wrapped in the chat pane. */
static int on_screen(const char *scr, const char *s)
{
    if (!scr)
        return 0;
    if (strstr(scr, s))
        return 1;
    char *t = tt_chat_text(scr);
    int r = strstr(t, s) != NULL;
    free(t);
    return r;
}

/* scr must contain s; on failure the screen goes to the log, since a
 * pane's layout is what a failure here is usually about. */
static void expect_on(const char *scr, const char *s)
{
    if (on_screen(scr, s))
        return;
    fprintf(stderr, "screen without '%s':\n%s\n", s, scr ? scr : "(none)");
    fail_msg("'%s' is not on the screen", s);
}

/* Wait until the screen contains s; returns the screen (malloc'd). */
static char *wait_for(const char *s)
{
    time_t end = time(NULL) + WAIT_S;
    char *scr = NULL;
    for (;;) {
        free(scr);
        scr = screen();
        if (on_screen(scr, s))
            return scr;
        if (time(NULL) > end)
            break;
        sleep_ms(200);
    }
    fprintf(stderr, "screen while waiting for '%s':\n%s\n", s, scr ? scr : "(none)");
    free(scr);
    fail_msg("'%s' never appeared", s);
    return NULL;
}

static void wait_for_free(const char *s)
{
    free(wait_for(s));
}

/* Wait until the screen no longer contains s. */
static void wait_gone(const char *s)
{
    time_t end = time(NULL) + WAIT_S;
    char *scr = NULL;
    for (;;) {
        free(scr);
        scr = screen();
        if (scr && !strstr(scr, s))
            break;
        if (time(NULL) > end) {
            fprintf(stderr, "screen while waiting for '%s' to go:\n%s\n", s, scr ? scr : "");
            free(scr);
            fail_msg("'%s' never went away", s);
        }
        sleep_ms(200);
    }
    free(scr);
}

/* Wait until the status line says idle and the screen holds still: the
 * frame reaches tmux in more than one write, top line first, so a capture
 * can hold the new "idle" above panes still drawn from the frame before
 * (on a loaded machine a speed pane with the reply's last tokens missing).
 * Two captures 200 ms apart that agree are one whole frame. */
static char *wait_idle(void)
{
    time_t end = time(NULL) + WAIT_S;
    char *scr = NULL, *prev = NULL;   /* prev: the capture before, when idle */
    for (;;) {
        free(prev);
        prev = scr;
        scr = screen();
        char *nl = scr ? strchr(scr, '\n') : NULL;
        int idle = nl && memmem(scr, (size_t)(nl - scr), "| idle |", 8);
        if (idle && prev && !strcmp(prev, scr)) {
            free(prev);
            return scr;
        }
        if (!idle) {   /* no pair to compare yet */
            free(prev);
            prev = NULL;
        }
        if (time(NULL) > end)
            break;
        sleep_ms(200);
    }
    free(prev);
    fprintf(stderr, "screen while waiting for idle:\n%s\n", scr ? scr : "(none)");
    free(scr);
    fail_msg("the status line never said idle on a still screen");
    return NULL;
}

/* The number after label on the screen must be positive. */
static void expect_positive(const char *scr, const char *label)
{
    const char *p = strstr(scr, label);
    double v = -1;
    if (p) {
        p += strlen(label);
        while (*p == ' ')
            p++;
        if (isdigit((unsigned char)*p))
            v = strtod(p, NULL);
    }
    if (!(v > 0)) {
        fprintf(stderr, "screen:\n%s\n", scr);
        fail_msg("no positive number after '%s'", label);
    }
}

/* Start an interactive sh in a fresh tmux session of w x h cells, then
 * cflow-tui in it with extra arguments. */
static void start(int w, int h, const char *args)
{
    static int n;
    char cmd[16384], ws[16], hs[16];
    snprintf(sock, sizeof sock, "cflow-tui-test-%d-%d", (int)getpid(), n++);
    snprintf(home, sizeof home, "%s", tu_tmp(sock));
    mkdir(home, 0700);
    snprintf(db, sizeof db, "%s/runs.db", home);
    snprintf(ws, sizeof ws, "%d", w);
    snprintf(hs, sizeof hs, "%d", h);
    const char *bd = getenv("CFLOW_BUILDDIR"), *sd = getenv("CFLOW_SRCDIR");
    snprintf(cmd, sizeof cmd, "env -u CFLOW_MODEL HOME=%s XDG_DATA_HOME=%s/data LANG=C.UTF-8 "
             "LC_ALL=C.UTF-8 PS1='%s' CFLOW_TUI=%s/cflow-tui CFLOW_TUI_DB=%s "
             "CFLOW_LSAN_SUPP=%s/tests/ui/lsan.supp sh", home, home, PROMPT, bd ? bd : ".", db,
             sd ? sd : "..");
    free(tmux("new-session", "-d", "-x", ws, "-y", hs, "-s", "t", cmd, NULL));
    free(wait_for(PROMPT_SEEN));
    snprintf(cmd, sizeof cmd, "LSAN_OPTIONS=suppressions=$CFLOW_LSAN_SUPP:print_suppressions=0 "
             "$CFLOW_TUI --db $CFLOW_TUI_DB %s", args);
    type_line(cmd);
}

static void stop(void)
{
    free(tmux("kill-server", NULL));
}

/* /quit, then the shell must be back, exit status 0, terminal sane. */
static void quit_clean(void)
{
    type_line("/quit");
    free(wait_for("\n" PROMPT_SEEN));
    type_line("echo rc=$?");
    free(wait_for("rc=0"));
    type_line("stty -a | tr ' ;' '\\n\\n' | grep -x -e echo -e icanon | sort | tr '\\n' ' '; echo");
    free(wait_for("echo icanon"));
}

static json_object *runs_json_of(const char *what)
{
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "runs", what, "--json", "--db", db, NULL), 0);
    assert_int_equal(p.status, 0);
    json_object *o = json_tokener_parse(p.out);
    tu_proc_free(&p);
    assert_non_null(o);
    assert_true(json_object_is_type(o, json_type_array));
    return o;
}

static json_object *runs_json(void)
{
    return runs_json_of("list");
}

/* The bytes of a model's output matrix (the shipped model's is its tied
 * token_embd: the last figure of that line of `cflow inspect`). */
static double head_bytes(const char *model)
{
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "inspect", model, NULL), 0);
    assert_int_equal(p.status, 0);
    const char *l = strstr(p.out, " token_embd ");
    assert_non_null(l);
    const char *e = strchr(l, '\n'), *q = e;
    while (q > l && q[-1] != ' ')
        q--;
    double v = strtod(q, NULL);
    tu_proc_free(&p);
    assert_true(v > 0);
    return v;
}

/* The first three words of `cflow run [--chat] -p "Once upon a time" -n 24
 * [--temp T]` (temp NULL: the default); the TUI's reply to the same prompt
 * with the same settings starts with them. */
static void run_words(char words[256], int chat, const char *temp)
{
    tu_proc p;
    const char *a[12] = { "run", "-p", "Once upon a time", "-n", "24", "--seed", "42",
                          "--no-log" };
    int n = 8;
    if (chat)
        a[n++] = "--chat";
    if (temp) {
        a[n++] = "--temp";
        a[n++] = temp;
    }
    a[n] = NULL;
    assert_int_equal(tu_cflow_run(&p, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8],
                                  a[9], a[10], NULL), 0);
    assert_int_equal(p.status, 0);
    int nw = 0;
    words[0] = 0;
    for (char *t = strtok(p.out, " \n"); t && nw < 3; t = strtok(NULL, " \n"), nw++) {
        if (nw)
            strcat(words, " ");
        strncat(words, t, 60);
    }
    tu_proc_free(&p);
    assert_int_equal(nw, 3);
}

/* 1. No arguments: the shipped model; a prompt streams the same text as
 * `cflow run` with the same (default) settings; all four panes show
 * numbers; the layout survives a resize down to 80x24. */
static void test_chat_and_panes(void **state)
{
    (void)state;
    char words[256];
    run_words(words, 1, NULL);

    start(130, 40, "--seed 42");   /* seeds are random by default */
    free(wait_for("default.cflow |"));
    free(wait_for(LOADED));
    type_line("/n 24");
    free(wait_for("n 24 ("));
    type_line("Once upon a time");
    free(wait_for("│> Once upon a time"));
    char *scr = wait_idle();
    expect_on(scr, words);
    /* the panes and their numbers */
    expect_on(scr, "1 layers");
    expect_on(scr, "2 expert fetch");
    expect_on(scr, "3 counters");
    expect_on(scr, "4 speed");
    expect_positive(scr, "decode ");
    expect_positive(scr, "prefill ");
    expect_positive(scr, "task-clock");
    expect_positive(scr, "expert compute ");
    expect_on(scr, "GB/s of weights");
    expect_on(scr, "L0 ");
    free(scr);
    /* 160x45: the counters in two columns, each line whole (the first
     * column's "ms/tok" was cut to "ms/to" at this width) */
    free(tmux("resize-window", "-t", "t", "-x", "160", "-y", "45", NULL));
    free(wait_for("ms/tok page-faults"));
    /* 80x24: the chat above, the four panes in a grid below */
    free(tmux("resize-window", "-t", "t", "-x", "80", "-y", "24", NULL));
    scr = wait_for("4 speed");
    expect_on(scr, "1 layers");
    expect_on(scr, "2 expert");
    expect_on(scr, "3 counters");
    free(scr);
    quit_clean();
    stop();
}

/* 2. /threads 1: the status line says so and the next reply is a new run
 * in the log with one thread. */
static void test_threads_new_run(void **state)
{
    (void)state;
    start(130, 40, "-n 24");
    free(wait_for(LOADED));
    type_line("Once upon a time");
    free(wait_for("│> Once upon a time"));
    free(wait_idle());
    type_line("/threads 1");
    free(wait_for("threads 1 |"));
    type_line("The dog");
    free(wait_for("│> The dog"));
    char *scr = wait_idle();
    expect_on(scr, "threads 1 |");
    free(scr);
    quit_clean();
    stop();
    json_object *o = runs_json();
    size_t n = json_object_array_length(o);
    assert_int_equal(n, 2);
    json_object *last = json_object_array_get_idx(o, 1), *v;
    assert_true(json_object_object_get_ex(last, "threads", &v));
    assert_int_equal(json_object_get_int(v), 1);
    assert_true(json_object_object_get_ex(last, "program", &v));
    assert_string_equal(json_object_get_string(v), "cflow-tui");
    json_object_put(o);
}

/* 3. The run browser: two runs listed, marked, compared, left. */
static void test_run_browser(void **state)
{
    (void)state;
    start(130, 40, "-n 24");
    free(wait_for(LOADED));
    type_line("Once upon a time");
    free(wait_for("│> Once upon a time"));
    free(wait_idle());
    type_line("/temp 0.5");
    free(wait_for("temp 0.50"));
    type_line("The cat");
    free(wait_for("│> The cat"));
    free(wait_idle());
    keys("F2");
    free(wait_for("run log: 2 runs"));
    keys("Space");
    keys("Up");
    keys("Space");
    keys("c");
    char *scr = wait_for("compare  A = run");
    expect_on(scr, "decode tok/s");
    expect_on(scr, "B/A");
    expect_on(scr, "temperature");
    free(scr);
    keys("q");
    free(wait_for("run log: 2 runs"));
    keys("Enter");   /* one run's per-layer picture */
    scr = wait_for("streamed/tok");
    expect_on(scr, "L0 ");
    free(scr);
    keys("q");
    free(wait_for("run log: 2 runs"));
    /* filter by model: nothing matches, then the shipped model */
    keys("f");
    free(tmux("send-keys", "-t", "t", "-l", "no-such-model", NULL));
    keys("Enter");
    free(wait_for("run log: 0 runs"));
    keys("f");
    free(tmux("send-keys", "-t", "t", "-l", "default", NULL));
    keys("Enter");
    free(wait_for("run log: 2 runs, model filter: default"));
    keys("q");
    free(wait_for("│> The cat"));
    quit_clean();
    stop();
}

/* 4. Ctrl-C stops a long generation; the UI keeps working; /quit leaves a
 * clean shell. */
static void test_ctrl_c(void **state)
{
    (void)state;
    start(130, 40, "-n 24");
    free(wait_for(LOADED));
    type_line("/n 0");
    type_line("/ignore-eos on");
    free(wait_for("ignore-eos on ("));
    type_line("Once upon a time");
    free(wait_for("| decoding"));
    keys("C-c");
    char *scr = wait_for("stopped: Ctrl-C");
    free(scr);
    free(wait_idle());
    type_line("/ignore-eos off");
    type_line("/n 8");
    free(wait_for("n 8 ("));
    type_line("Tom had a ball");
    free(wait_for("│> Tom had a ball"));
    free(wait_for("stopped: -n limit"));
    free(wait_idle());
    quit_clean();
    stop();
}

/* 5. A model that does not exist: an error in the UI, which stays usable
 * (the loaded model stays). */
static void test_bad_model(void **state)
{
    (void)state;
    start(130, 40, "-n 24");
    free(wait_for(LOADED));
    /* the help, built from the key and command tables */
    keys("F1");
    char *scr = wait_for("F10                quit");
    expect_on(scr, "F12                temperature + 0.1");
    free(scr);
    keys("NPage");
    free(wait_for("/repeat-last-n N"));
    keys("q");
    wait_gone("/repeat-last-n N");
    type_line("/model /nonexistent/model.cflow");
    scr = wait_for("cannot load model");
    expect_on(scr, "/nonexistent/model.cflow");
    free(scr);
    free(wait_idle());
    /* wide characters in and out; editing keys on the way */
    free(tmux("send-keys", "-t", "t", "-l", "Lily sagte: grüß dich ✓ x", NULL));
    keys("BSpace");
    keys("Left");
    keys("Left");
    free(tmux("send-keys", "-t", "t", "-l", "≈", NULL));
    keys("Enter");
    free(wait_for("│> Lily sagte: grüß dich ≈✓"));
    scr = wait_idle();   /* the reply may end early (end of text) or at -n */
    expect_on(scr, "default.cflow |");
    expect_positive(scr, "prefill ");
    free(scr);
    quit_clean();
    stop();
}

/* Issue 20 item 1: a GGUF at -m and at /model is converted into the
 * cache ($HOME/.cache/cflow here), a note in the chat says where, and the
 * model then loads and answers. */
static void test_gguf_model(void **state)
{
    (void)state;
    const char *src = tu_shared("models/stories260K-q8_0.gguf"), *src2 =
        tu_shared("models/stories260K-q4_0.gguf");
    tu_require(src);
    tu_require(src2);
    char args[8192];
    snprintf(args, sizeof args, "-n 8 --ignore-eos -m %s", src);
    start(160, 40, args);
    char *scr = wait_for("completion");   /* stories260K has no chat template */
    expect_on(scr, "converted");
    expect_on(scr, "stories260K-q8_0-");
    free(scr);
    type_line("Once upon a time");
    free(wait_for("stopped: -n limit"));
    free(wait_idle());
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "/model %s", src2);
    type_line(cmd);
    free(wait_for("stories260K-q4_0-"));
    free(wait_idle());
    scr = screen();
    assert_null(strstr(scr, "cannot load model"));
    free(scr);
    quit_clean();
    stop();
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/.cache/cflow", home);
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d));)
        n += strstr(de->d_name, ".cflow") && !strstr(de->d_name, ".tmp.");
    if (d)
        closedir(d);
    assert_int_equal(n, 2);
}

/* The rest of what a user does: multi-line input, a context that fills
 * (the oldest turn dropped and said so), /system, /save as Markdown,
 * hiding and zooming panes, NO_COLOR, and the history kept for the next
 * session. */
static void test_context_and_commands(void **state)
{
    (void)state;
    start(130, 40, "-c 64 -n 16");
    free(wait_for(LOADED));
    /* colour by default: SGR colour codes on the screen */
    char *scr = tmux("capture-pane", "-p", "-e", "-t", "t", NULL);
    assert_non_null(strstr(scr, "\033[30m") ? scr : strstr(scr, "\033[46m"));
    free(scr);
    /* a value out of range: refused with the range of the -t/--temp flags */
    type_line("/temp 9");
    free(wait_for("/temp: bad value '9' (T from 0 (greedy) to 5)"));
    type_line("/threads -1");
    free(wait_for("/threads: bad value '-1' (N from 0 (all cores) to 1024)"));
    /* in completion mode there is no system role: the note says what the
     * text becomes; back in chat mode the turns below use the template */
    type_line("/mode completion");
    free(wait_for("-- completion mode"));
    type_line("/system Tom and Ann");
    scr = wait_for("system prompt set");
    wait_for_free("(completion mode:");
    free(scr);
    type_line("/mode chat");
    free(wait_for("-- chatml mode"));
    free(tmux("send-keys", "-t", "t", "-l", "Once upon", NULL));
    keys("M-Enter");
    type_line("a time");
    scr = wait_for("│  a time");   /* the chat's entry, not the input line */
    expect_on(scr, "│> Once upon");
    free(scr);
    free(wait_idle());   /* the reply ends at its end of turn or at -n */
    /* two more turns cannot all fit in 64 positions */
    type_line("The dog ran");
    free(wait_for("│> The dog ran"));
    free(wait_idle());
    type_line("The cat sat");
    free(wait_for("│> The cat sat"));
    scr = wait_for("oldest turn");
    expect_on(scr, "context full (64 tokens)");
    free(scr);
    free(wait_idle());
    /* the transcript */
    char md[2200], cmd[2300];
    snprintf(md, sizeof md, "%s/chat.md", home);
    snprintf(cmd, sizeof cmd, "/save %s", md);
    type_line(cmd);
    free(wait_for("saved the transcript"));
    char *t = tu_read_file(md, NULL);
    assert_non_null(t);
    assert_non_null(strstr(t, "## System\n\nTom and Ann"));
    assert_non_null(strstr(t, "## User\n\nOnce upon\na time"));
    assert_non_null(strstr(t, "## Assistant\n\n"));
    assert_non_null(strstr(t, "## User\n\nThe cat sat"));
    assert_non_null(strstr(t, "oldest turn; the system prompt is kept"));
    free(t);
    /* panes: hide one, zoom one, back */
    type_line("/hide counters");
    wait_gone("3 counters");
    free(wait_for("4 speed"));
    type_line("/zoom speed");
    scr = wait_for("[zoomed]");
    assert_null(strstr(scr, "1 layers"));
    free(scr);
    type_line("/zoom");
    free(wait_for("1 layers"));
    type_line("/show counters");
    free(wait_for("3 counters"));
    quit_clean();
    /* the history is kept for the next session */
    char hist[2200];
    snprintf(hist, sizeof hist, "%s/data/cflow/history", home);
    t = tu_read_file(hist, NULL);
    assert_non_null(t);
    assert_non_null(strstr(t, "The cat sat"));
    assert_non_null(strstr(t, "/save "));
    free(t);
    /* monochrome: NO_COLOR leaves only attributes */
    type_line("NO_COLOR=1 LSAN_OPTIONS=suppressions=$CFLOW_LSAN_SUPP "
              "$CFLOW_TUI --db $CFLOW_TUI_DB -n 4");
    free(wait_for(LOADED));
    keys("Up");   /* the previous session's history is there: Up recalls it */
    scr = wait_for("> /quit");
    free(scr);
    scr = tmux("capture-pane", "-p", "-e", "-t", "t", NULL);
    for (const char *c = "01234567"; *c; c++) {
        char fg[8], bg[8];
        snprintf(fg, sizeof fg, "\033[3%cm", *c);
        snprintf(bg, sizeof bg, "\033[4%cm", *c);
        assert_null(strstr(scr, fg));
        assert_null(strstr(scr, bg));
    }
    assert_null(strstr(scr, "38;5;"));
    free(scr);
    keys("C-c");   /* idle: Ctrl-C clears the input line (the UI may take a
                    * frame to show it: poll, don't sample once) */
    wait_gone("> /quit");
    free(wait_idle());
    quit_clean();
    stop();
}

/* A line of at most w cells (each UTF-8 character here is one cell). */
static int tui_width_ok(const char *line, int w)
{
    int n = 0;
    for (const unsigned char *p = (const unsigned char *)line; *p; p++)
        n += (*p & 0xc0) != 0x80;
    return n <= w;
}

/* The chat pane's last text row: the row above the first line of the
 * pane grid (at 80x24, "┌─ 1 layers"), its frame stripped. */
static char *chat_last_row(const char *scr)
{
    const char *grid = strstr(scr, "\u250c\u2500 1 layers");
    assert_non_null(grid);
    const char *line[3] = { NULL, NULL, NULL };   /* the last three line starts */
    for (const char *p = scr; p < grid; p = strchr(p, '\n') + 1) {
        line[0] = line[1];
        line[1] = line[2];
        line[2] = p;
    }
    assert_non_null(line[1]);   /* line[2]: the chat's bottom frame */
    return strndup(line[1], (size_t)(line[2] - line[1]));
}

/* 80x24 (the man page calls it enough): the status line keeps the
 * context use and the run number, the key bar is there, the first start
 * hints at F1, a reply ends in its figures, which agree with the panes;
 * the layers pane says which layers it shows; a resize during a reply
 * keeps the chat on the newest line; F10 quits. */
static void test_small_screen(void **state)
{
    (void)state;
    start(80, 24, "-n 24 --ignore-eos");   /* the chat model may end a reply sooner */
    char *scr = wait_for(LOADED);
    expect_on(scr, "F1 or /help: keys and commands; F10 quits");
    expect_on(scr, "F1Help");
    expect_on(scr, "F10Quit");
    free(scr);
    type_line("Once upon a time");
    /* (not waited for: at 80x24 a reply of a few lines scrolls the prompt
     * out of the chat pane within one poll; the reply's line is the sign) */
    free(wait_for("stopped: -n limit"));
    scr = wait_idle();
    char *nl = strchr(scr, '\n');
    assert_non_null(nl);
    *nl = 0;   /* the status line */
    if (!strstr(scr, "| ctx ") || !strstr(scr, "/512") || !strstr(scr, "| run 1")) {
        print_error("status line: %s\n", scr);
        fail_msg("the status line lost the context use or the run number");
    }
    assert_true(tui_width_ok(scr, 80));
    *nl = '\n';
    /* the reply's line and the panes count the same 24 tokens */
    expect_on(scr, "reply 24 tok,");
    expect_on(scr, "(24 tok)");        /* speed: the run's decode */
    expect_on(scr, "sparkline, last 24");
    expect_on(scr, "L0-");             /* not every layer fits */
    expect_on(scr, "\u2026");          /* cut text is marked */
    free(scr);
    /* a long reply; the terminal grows and shrinks while it streams */
    free(tmux("resize-window", "-t", "t", "-x", "130", "-y", "40", NULL));
    type_line("/n 0");
    type_line("/ignore-eos on");
    free(wait_for("ignore-eos on ("));
    type_line("The dog");
    free(wait_for("| decoding"));
    sleep_ms(500);
    free(tmux("resize-window", "-t", "t", "-x", "80", "-y", "24", NULL));
    free(wait_for("\u250c\u2500 1 layers"));
    sleep_ms(1500);
    /* following: no "more below" mark, and the chat's text keeps moving
     * (a context-full note may stand under the reply as its last row) */
    char *s1 = screen(), *r1 = chat_last_row(s1), *r2 = NULL;
    int moved = 0;
    for (int i = 0; i < 50 && !moved; i++) {
        sleep_ms(200);
        char *s2 = screen();
        free(r2);
        r2 = chat_last_row(s2);
        const char *g1 = strstr(s1, "\u250c\u2500 1 layers"), *g2 = strstr(s2, "\u250c\u2500 1 layers");
        moved = strcmp(r1, r2) != 0 ||
                (g1 && g2 && (g1 - s1 != g2 - s2 || memcmp(s1, s2, (size_t)(g1 - s1))));
        assert_null(strstr(s2, "more below"));
        free(s2);
    }
    if (!moved) {
        fprintf(stderr, "screen:\n%s\n", s1);
        fail_msg("the chat stopped following the reply after the resize");
    }
    free(r1);
    free(r2);
    free(s1);
    keys("F9");   /* stops the reply, as Ctrl-C */
    free(wait_for("stopped: Ctrl-C"));
    free(wait_idle());
    keys("F10");
    free(wait_for("\n" PROMPT_SEEN));
    type_line("echo rc=$?");
    free(wait_for("rc=0"));
    stop();
}

/* A reply longer than the context (the oldest text dropped and the rest
 * prefilled again, twice or more): the reply's line, the speed pane and
 * the run log count the same decode tokens, what /n asked for. */
static void test_counts_agree(void **state)
{
    (void)state;
    start(130, 40, "-c 64 -n 100");
    free(wait_for(LOADED));
    type_line("/ignore-eos on");
    free(wait_for("ignore-eos on ("));
    type_line("Once upon a time");
    free(wait_for("\u2502> Once upon a time"));
    free(wait_for("stopped: -n limit"));
    char *scr = wait_idle();
    expect_on(scr, "context full (64 tokens)");
    expect_on(scr, "reply 100 tok,");
    expect_on(scr, "(100 tok)");   /* the speed pane: the run's decode */
    free(scr);
    quit_clean();
    stop();
    json_object *o = runs_json(), *v;
    assert_int_equal(json_object_array_length(o), 1);
    assert_true(json_object_object_get_ex(json_object_array_get_idx(o, 0), "n_gen", &v));
    assert_int_equal(json_object_get_int(v), 100);
    json_object_put(o);
    /* the GB/s figure's bytes per token are what the layers streamed (the
     * pane's bars: DelayedSum runs no FFN in layer 0, and counts none)
     * plus the output matrix */
    o = runs_json_of("export");
    json_object *r = json_object_array_get_idx(o, 0), *b, *st, *m;
    assert_true(json_object_object_get_ex(r, "bytes_per_token", &b));
    assert_true(json_object_object_get_ex(r, "streamed_bytes_per_token", &st));
    assert_true(json_object_object_get_ex(r, "model", &m));
    double diff = json_object_get_double(b) - json_object_get_double(st);
    double head = head_bytes(json_object_get_string(m));
    if (diff != head) {
        print_error("bytes_per_token - streamed = %.0f, the output matrix %.0f\n", diff, head);
        fail_msg("the analytic bytes per token count what no layer streams");
    }
    json_object_put(o);
}

/* The pid of cflow-tui: the child of the session's shell. */
static pid_t tui_pid(void)
{
    char *o = tmux("list-panes", "-t", "t", "-F", "#{pane_pid}", NULL);
    long sh = o ? strtol(o, NULL, 10) : 0;
    free(o);
    assert_true(sh > 0);
    /* the process whose parent is the shell (/proc/PID/stat field 4) */
    long pid = 0;
    DIR *d = opendir("/proc");
    struct dirent *de;
    while (d && !pid && (de = readdir(d))) {
        char path[300], buf[512];
        if (!isdigit((unsigned char)de->d_name[0]))
            continue;
        snprintf(path, sizeof path, "/proc/%s/stat", de->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        const char *rp = strrchr(buf, ')');
        long ppid = 0;
        if (rp && sscanf(rp + 1, " %*c %ld", &ppid) == 1 && ppid == sh)
            pid = strtol(de->d_name, NULL, 10);
    }
    if (d)
        closedir(d);
    assert_true(pid > 0);
    return (pid_t)pid;
}

/* Signals: SIGTERM is a clean quit (status 0); a fatal signal restores the
 * terminal before the program dies of it. */
static void test_signals(void **state)
{
    (void)state;
    start(100, 30, "-n 8");
    free(wait_for(LOADED));
    assert_int_equal(kill(tui_pid(), SIGTERM), 0);
    free(wait_for("\n" PROMPT_SEEN));
    type_line("echo rc=$?");
    free(wait_for("rc=0"));
    type_line("clear");
    type_line("$CFLOW_TUI --db $CFLOW_TUI_DB -n 8");
    free(wait_for(LOADED));
    assert_int_equal(kill(tui_pid(), SIGABRT), 0);
    free(wait_for("\n" PROMPT_SEEN));
    type_line("echo rc=$?");
    free(wait_for("rc=134"));
    type_line("stty -a | tr ' ;' '\\n\\n' | grep -x -e echo -e icanon | sort | tr '\\n' ' '; echo");
    free(wait_for("echo icanon"));
    stop();
}

/* The reply to the prompt line "│> PROMPT" on scr (from that line on). */
static const char *reply_after(const char *scr, const char *prompt)
{
    const char *p = strstr(scr, prompt);
    if (!p) {
        fprintf(stderr, "screen:\n%s\n", scr);
        fail_msg("'%s' is not on the screen", prompt);
    }
    return p + strlen(prompt);
}

/* 8. Issue 22: with no arguments the shipped model chats (its ChatML
 * template); a request and a follow-up turn are answered; /mode completion
 * switches to plain continuation (the same text `cflow run` writes), and
 * /mode chat back. */
static void test_chat_mode(void **state)
{
    (void)state;
    char words[256];
    run_words(words, 0, "0");

    start(130, 40, "-n 160 --temp 0");
    free(wait_for(LOADED));
    type_line("Tell me a story about a dog named Max.");
    free(wait_for("│> Tell me a story about a dog named Max."));
    char *scr = wait_idle();
    const char *r = reply_after(scr, "│> Tell me a story about a dog named Max.");
    assert_non_null(strstr(r, "Max"));
    free(scr);
    type_line("Now tell me one about Lily and a ball.");
    free(wait_for("│> Now tell me one about Lily and a ball."));
    scr = wait_idle();
    r = reply_after(scr, "│> Now tell me one about Lily and a ball.");
    assert_non_null(strstr(r, "Lily"));
    free(scr);
    type_line("/mode completion");
    free(wait_for("-- completion mode"));
    type_line("/n 24");
    free(wait_for("n 24 ("));
    type_line("/clear");
    wait_gone("│> Tell me a story");
    type_line("Once upon a time");
    free(wait_for("│> Once upon a time"));
    scr = wait_idle();
    assert_non_null(strstr(reply_after(scr, "│> Once upon a time"), words));
    free(scr);
    type_line("/mode chat");
    free(wait_for("-- chatml mode"));
    type_line("/mode klingon");
    free(wait_for("/mode klingon: chat, completion or a template family"));
    quit_clean();
    stop();
}

/* 9. The family comes from a GGUF's tokenizer.chat_template: a synthetic
 * model with Phi-3's tokenizer (whose GGUF carries Phi-3's template),
 * converted, opens in phi3 mode; a model without one (stories260K, converted
 * from its GGUF) in completion mode, and /mode chat says there is none. */
static void test_gguf_template(void **state)
{
    (void)state;
    const char *vocab = tu_shared("tokenizer-tests/ggml-vocab-phi-3.gguf");
    const char *base = tu_shared("models/stories260K-f32.gguf");
    tu_require(vocab);
    tu_require(base);
    char gguf[4096], phi[4096], plain[4096], args[9000];
    /* file names without the family's name: the screen is searched for it */
    snprintf(gguf, sizeof gguf, "%s", tu_tmp("tmpl-vocab.gguf"));
    snprintf(phi, sizeof phi, "%s", tu_tmp("tmpl-vocab.cflow"));
    snprintf(plain, sizeof plain, "%s", tu_tmp("stories260K-tui.cflow"));
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "synth", "--gguf", "--vocab", vocab, "tiny-mixtral", gguf,
                                  NULL), 0);
    assert_int_equal(p.status, 0);
    tu_proc_free(&p);
    assert_int_equal(tu_cflow_run(&p, "convert", gguf, phi, NULL), 0);
    assert_int_equal(p.status, 0);
    tu_proc_free(&p);
    assert_int_equal(tu_cflow_run(&p, "convert", base, plain, NULL), 0);
    assert_int_equal(p.status, 0);
    tu_proc_free(&p);

    snprintf(args, sizeof args, "-m %s -n 4", phi);
    start(130, 40, args);
    free(wait_for("phi3"));   /* "..., phi3 mode": the note may wrap before "mode" */
    snprintf(args, sizeof args, "/model %s", plain);
    type_line(args);
    free(wait_for("completion"));
    type_line("/mode chat");
    free(wait_for("this model has no chat template"));
    quit_clean();
    stop();
}

static int teardown(void **state)
{
    (void)state;
    stop();   /* also after a failed wait: no tmux server left behind */
    return 0;
}

int main(void)
{
    if (system("tmux -V >/dev/null 2>&1") != 0) {
        fprintf(stderr, "test_tui: tmux is required (scripts/bootstrap installs it)\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_chat_and_panes, teardown),
        cmocka_unit_test_teardown(test_threads_new_run, teardown),
        cmocka_unit_test_teardown(test_run_browser, teardown),
        cmocka_unit_test_teardown(test_ctrl_c, teardown),
        cmocka_unit_test_teardown(test_bad_model, teardown),
        cmocka_unit_test_teardown(test_gguf_model, teardown),
        cmocka_unit_test_teardown(test_context_and_commands, teardown),
        cmocka_unit_test_teardown(test_signals, teardown),
        cmocka_unit_test_teardown(test_small_screen, teardown),
        cmocka_unit_test_teardown(test_counts_agree, teardown),
        cmocka_unit_test_teardown(test_chat_mode, teardown),
        cmocka_unit_test_teardown(test_gguf_template, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
