/*
 * test_tui_xio.c — cflow-tui's expert figures (issue 17 items 5 and 7):
 * the real binary in tmux (private socket) on a synthetic MoE model
 * (`cflow synth tiny-moe`) with --expert-io sync and a RAM cache.  After a
 * reply of -n 8 tokens the overlap pane shows the hit-rate line of
 * ui_xio.c with counts that hold together (hits + misses = the reply's
 * decoded tokens x top-k x MoE layers, the rate their quotient) and the
 * storage-bound line; the speed pane divides by the membw median stored
 * for the host at the thread count and says so (issue 18).  Then /expert-io auto: the status line says what
 * auto chose ("expert-io mmap (auto)"); after /quit the run log's row of
 * the reply has the pane's counts.  The same session with --expert-ahead
 * off guesses nothing, and a bad --expert-ahead-layers is refused;
 * /expert-ahead turns it off and on live, changes its depth, refuses a
 * depth deeper than the open's, and refuses on where the model
 * was opened with it off.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "ui/tui_tmux.h"

#define LIMIT_S 180          /* per wait: the sanitizer build on a busy CPU */

static char sock[64];

static void send_line(const char *text) { tt_send_line(sock, text); }

/* Wait until the screen shows what; the screen (malloc'd). */
static char *wait_screen(const char *what)
{
    time_t end = time(NULL) + LIMIT_S;
    for (;;) {
        char *scr = tt_tmux(sock, "capture-pane", "-p", "-t", "t", NULL);
        if (scr && strstr(scr, what))
            return scr;
        if (time(NULL) > end) {
            fprintf(stderr, "screen:\n%s\n", scr ? scr : "(none)");
            fail_msg("waited %d s for '%s'", LIMIT_S, what);
        }
        free(scr);
        struct timespec ts = { 0, 200000000L };
        nanosleep(&ts, NULL);
    }
}

/* The overlap pane's hit-rate line, read into *pct, *hits, *total and
 * *misses once it counts want routed experts (or LIMIT_S has passed); the
 * screen (malloc'd).  The pane's figures are live: a capture can come
 * mid-reply (the sanitizer build on a busy CPU showed the first token's
 * 8), so it waits for the reply's last token's count. */
static char *wait_hit_line(unsigned long long want, double *pct, unsigned long long *hits,
                           unsigned long long *total, unsigned long long *misses)
{
    for (time_t end = time(NULL) + LIMIT_S;;) {
        char *scr = wait_screen(" read)");
        const char *l = strstr(scr, ": hit rate ");
        assert_non_null(l);
        assert_int_equal(sscanf(l, ": hit rate %lf%% (%llu of %llu routed experts in RAM, "
                                   "%llu read)", pct, hits, total, misses), 4);
        if (*total >= want || time(NULL) > end)
            return scr;
        free(scr);
        struct timespec ts = { 0, 200000000L };
        nanosleep(&ts, NULL);
    }
}

static void test_tui_expert_figures(void **state)
{
    (void)state;
    char home[2048], model[2200], db[2200], args[4600];
    snprintf(sock, sizeof sock, "cflow-tui-xio-%d", (int)getpid());
    snprintf(home, sizeof home, "%s", tu_tmp(sock));
    mkdir(home, 0700);
    snprintf(model, sizeof model, "%s/tiny-moe.cflow", home);
    snprintf(db, sizeof db, "%s/runs.db", home);
    tu_moe g;
    tu_synth_moe("tiny-moe", model, &g);
    const unsigned n_moe = g.n_moe, top_k = g.top_k;
    /* issue 18: a membw figure stored for this host at 1 thread, which no
     * measurement gives, for the speed pane's "% of read bw" */
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "bench", "membw", "-t", "1", "-r", "1", "--db", db,
                                  (char *)NULL), 0);
    assert_true(tu_ok(&p, "bench membw"));
    tu_proc_free(&p);
    assert_true(tu_db_int(db, "UPDATE membw SET median_gbs = 4321.5 RETURNING id") > 0);

    snprintf(args, sizeof args, "--db '%s' --temp 0 -n 8 --ignore-eos -t 1 "
             "--expert-io sync --expert-cache 128K", db);
    tt_start_tui(sock, home, 50, model, args);
    free(wait_screen("-- loaded "));
    free(wait_screen("expert-io sync"));
    send_line("/zoom overlap");
    send_line("the cat sat");
    double pct = -1;
    unsigned long long hits = 0, total = 0, misses = 0;
    char *scr = wait_hit_line(8ull * top_k * n_moe, &pct, &hits, &total, &misses);
    /* eight decoded tokens, each routing top-k experts in every MoE layer */
    assert_int_equal(total, 8ull * top_k * n_moe);
    assert_int_equal(hits + misses, total);
    assert_true(misses > 0);
    assert_true(fabs(pct - 100.0 * (double)hits / (double)total) < 0.051);
    assert_non_null(strstr(scr, " read); uniform routing (cflow synth"));   /* item 8 */
    assert_non_null(strstr(scr, "storage-bound "));
    assert_non_null(strstr(scr, "look-ahead: "));
    assert_non_null(strstr(scr, ", look-ahead 1 layer, "));   /* on, one layer: the default */
    free(scr);
    /* live: /expert-ahead turns it off, the pane says so */
    send_line("/expert-ahead off");
    free(wait_screen(", look-ahead off, "));
    send_line("/expert-ahead");   /* the other state: on again */
    free(wait_screen(", look-ahead 1 layer, "));
    /* a depth: a pipeline-native model takes any and guesses nothing */
    send_line("/expert-ahead 3");
    free(wait_screen(", look-ahead 3 layers, "));
    send_line("/zoom speed");
    scr = wait_screen("read bw 4321.50 GB/s (1 threads, median of 1 passes");
    assert_non_null(strstr(scr, "from the run log)"));
    assert_non_null(strstr(scr, "of 4321.5 GB/s read bw"));
    free(scr);
    /* auto: the status line says which mode it chose */
    send_line("/expert-io auto");
    free(wait_screen("expert-io mmap (auto)"));
    /* /quit ends the reply's run: its final flush holds the same counts */
    send_line("/quit");
    time_t end = time(NULL) + LIMIT_S;
    while (tu_db_int(db, "SELECT count(*) FROM run WHERE expert_io = 'sync' AND"
                         " status = 'done'") != 1) {
        if (time(NULL) > end)
            fail_msg("the sync run was never finished in the log");
        struct timespec ts = { 0, 200000000L };
        nanosleep(&ts, NULL);
    }
    assert_int_equal(tu_db_int(db, "SELECT xio_hits FROM run WHERE expert_io = 'sync'"),
                     (int64_t)hits);
    assert_int_equal(tu_db_int(db, "SELECT xio_misses FROM run WHERE expert_io = 'sync'"),
                     (int64_t)misses);
    assert_int_equal(tu_db_int(db, "SELECT xio_tokens FROM run WHERE expert_io = 'sync'"), 8);
}

/* --expert-ahead off and --expert-ahead-layers reach the engine through
 * the command line's engine options (ui_settings_eng_opts).  On
 * tiny-mixtral (a standard MoE: tiny-moe's schedule knows its experts
 * early and guesses nothing) with sync reads and a 128K cache, `cflow run`
 * makes look-ahead guesses (checked here, so that the TUI's "no
 * predictions" below can only come from the option); cflow-tui with
 * --expert-ahead off makes none; a bad depth is refused before the screen
 * is touched. */
static void test_tui_expert_ahead_off(void **state)
{
    (void)state;
    char home[2048], model[2200];
    const char *bd = getenv("CFLOW_BUILDDIR");
    snprintf(sock, sizeof sock, "cflow-tui-ahead-%d", (int)getpid());
    snprintf(home, sizeof home, "%s", tu_tmp(sock));
    mkdir(home, 0700);
    snprintf(model, sizeof model, "%s/tiny-mixtral.cflow", home);
    tu_moe g;
    tu_synth_moe("tiny-mixtral", model, &g);
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "run", "-m", model, "--no-log", "--temp", "0", "-n", "8",
                                  "--ignore-eos", "-t", "1", "-p", "the cat sat",
                                  "--expert-io", "sync", "--expert-cache", "128K",
                                  (char *)NULL), 0);
    assert_true(tu_ok(&p, "run with look-ahead"));
    assert_non_null(strstr(p.err, "% right ("));
    tu_proc_free(&p);
    const char *tui = bd && *bd ? bd : ".";
    char bin[2200];
    snprintf(bin, sizeof bin, "%s/cflow-tui", tui);
    char *bad[] = { bin, "-m", model, "--expert-ahead-layers", "9", NULL };
    assert_int_equal(tu_run(&p, bad, NULL, 60), 0);
    assert_int_equal(p.status, 2);
    assert_non_null(strstr(p.err, "--expert-ahead-layers"));
    assert_int_equal(tu_count_lines(p.err), 1);
    tu_proc_free(&p);

    tt_start_tui(sock, home, 50, model, "--no-log --temp 0 -n 8 --ignore-eos -t 1 "
                 "--expert-io sync --expert-cache 128K --expert-ahead off");
    free(wait_screen("expert-io sync"));
    send_line("/zoom overlap");
    send_line("the cat sat");
    unsigned long long hits = 0, total = 0, misses = 0;
    double pct;
    char *scr = wait_hit_line(8ull * g.top_k * g.n_moe, &pct, &hits, &total, &misses);
    assert_int_equal(total, 8ull * g.top_k * g.n_moe);
    assert_true(misses > 0);
    assert_non_null(strstr(scr, "look-ahead: no predictions"));
    /* the setting itself, as the engine resolved it */
    assert_non_null(strstr(scr, "prefetch off, look-ahead off, "));
    free(scr);
    /* live: on cannot come to a session opened with it off (no slots were
     * set aside), and says why in the chat */
    send_line("/zoom");
    send_line("/expert-ahead on");
    free(wait_screen("look-ahead was off when the model was opened"));
    send_line("/expert-ahead deep");
    free(wait_screen("/expert-ahead: bad value 'deep' (on, off, or 1 to 8 layers)"));
    /* the wish stays: /model opens the same file with look-ahead on, one
     * layer deep (the default), and so with slots for no deeper guesses */
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "/model %s", model);
    send_line(cmd);
    send_line("/zoom overlap");
    free(wait_screen("prefetch off, look-ahead 1 layer, "));
    send_line("/zoom");
    send_line("/expert-ahead 2");
    free(wait_screen("slots were set aside for 1 when the model was opened"));
    /* a refused depth does not hold back the next request */
    send_line("/zoom overlap");
    send_line("/expert-ahead off");
    free(wait_screen("prefetch off, look-ahead off, "));
    send_line("/expert-ahead 1");
    free(wait_screen("prefetch off, look-ahead 1 layer, "));
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
        cmocka_unit_test_teardown(test_tui_expert_figures, teardown),
        cmocka_unit_test_teardown(test_tui_expert_ahead_off, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
