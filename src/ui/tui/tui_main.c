/*
 * tui_main.c — cflow-tui: chat with a model while watching the engine.
 *
 * This file starts and ends the program: the command line, the terminal
 * (curses, colours), the generation thread, and the loop.  The screen is
 * tui_screen.c, the input tui_input.c, the commands and keys tui_cmd.c,
 * the drawing helpers tui_draw.c, the panes tui_panes.c, the run browser
 * tui_runs.c and the generation thread tui_gen.c.
 *
 * The loop.  poll() waits on the terminal, on a self-pipe the generation
 * thread and the signal handlers write to, and on a 100 ms timer while a
 * reply is being generated: the panes redraw at 10 Hz then, and only when
 * something changed otherwise.
 *
 * Terminal safety: endwin() runs on every way out — /quit, F10, end of
 * input, a fatal error (atexit), SIGTERM/SIGHUP (a clean quit) and fatal
 * signals (SIGSEGV, SIGABRT, ... restore the terminal, then die of the
 * signal).  SIGINT (Ctrl-C) stops the reply being generated, never the
 * program.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <langinfo.h>
#include <locale.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/kern.h"
#include "ui/tui/tui.h"
#include "ui/common/ui.h"

static tui_app app;
static int wake_pipe[2] = { -1, -1 };
static volatile sig_atomic_t got_int, got_term;
static int curses_on;

/* ======================================================================= */
/* Terminal safety                                                          */
/* ======================================================================= */
static void restore_terminal(void)
{
    if (curses_on)
        tui_input_paste_mode(0);
    if (curses_on && !isendwin())
        endwin();
    curses_on = 0;
}

/* Ctrl-Z: ncurses' own handler (installed by initscr) gives the terminal
 * back, stops, and takes it again on SIGCONT; bracketed paste is turned
 * off around it, so the shell gets a terminal as it was. */
static struct sigaction curses_tstp;
static void on_tstp(int sig)
{
    tui_input_paste_mode(0);
    if (curses_tstp.sa_handler != SIG_DFL && curses_tstp.sa_handler != SIG_IGN)
        curses_tstp.sa_handler(sig);
    tui_input_paste_mode(1);
}

static void on_fatal(int sig)
{
    restore_terminal();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void on_int(int sig)
{
    (void)sig;
    got_int = 1;
    char b = 1;
    if (write(wake_pipe[1], &b, 1) < 0) {
        /* the pipe is full: the loop is awake anyway */
    }
}

static void on_term(int sig)
{
    (void)sig;
    got_term = 1;
    char b = 1;
    if (write(wake_pipe[1], &b, 1) < 0) {
    }
}

static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_int;
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sa.sa_handler = on_fatal;
    sa.sa_flags = SA_RESETHAND;
    int fatal[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGQUIT };
    for (size_t i = 0; i < sizeof fatal / sizeof *fatal; i++)
        sigaction(fatal[i], &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

static const int tui_opts[] = {
    UI_O_MODEL, UI_O_THREADS, UI_O_CTX, UI_O_SYSTEM, UI_O_N_PREDICT, UI_O_PREFETCH,
    UI_O_EXPERT_IO, UI_O_EXPERT_CACHE, UI_O_EXPERT_AHEAD, UI_O_EXPERT_AHEAD_LAYERS, UI_O_KV_TYPE,
    UI_O_NO_MMAP, UI_O_MMAP, UI_O_TEMP, UI_O_TOP_K, UI_O_TOP_P, UI_O_MIN_P,
    UI_O_REPEAT_PENALTY, UI_O_REPEAT_LAST_N, UI_O_SEED, UI_O_IGNORE_EOS, UI_O_DB,
    UI_O_NO_LOG, UI_O_HELP, UI_O_VERSION, UI_O_END
};

static void usage(const ui_settings *d)
{
    if (d->version) {
        if (ui_env_check(TUI_NAME) >= 0)   /* it names the tier $CFLOW_ISA picks */
            exit(UI_EXIT_ERR);
        const kern_ops *ops = kern_init();
        printf("cflow-tui %s\nkernels: %s (cpu: %s)\n", PACKAGE_VERSION, ops->name,
               kern_cpu_features());
        return;
    }
    printf("usage: cflow-tui [-m MODEL] [--db PATH] [-t N] [OPTIONS]\n\n"
           "Chat with a model while watching the engine: per-layer critical-path bytes,\n"
           "expert-fetch overlap, counters and speed, live; tune threads and sampling and\n"
           "browse the runs in the run log.  F1 or /help inside lists every key.\n\n");
    ui_opts_help(stdout, tui_opts, d);
    printf("\nSee cflow-tui(1).\n");
}

/* What the command line asks for. */
typedef struct tui_args {
    const char  *model;
    long         n_ctx;
    int          no_log;
    tui_settings st;
} tui_args;

/* The flags (ui_opt.c's table, as cflow run takes them) into the live
 * settings.  -1: go on; else the exit status (help, version, a refusal).
 * --list-commands, alone, is the hidden flag the tests read the key and
 * command tables with. */
static int parse_flags(int argc, char **argv, tui_args *a)
{
    static const ui_optset set = { TUI_NAME, tui_opts, usage, NULL, 0 };
    ui_settings o;
    tui_settings *st = &a->st;
    int rc, first;
    memset(a, 0, sizeof *a);
    if (argc == 2 && !strcmp(argv[1], "--list-commands")) {
        tui_list_commands(stdout);
        return UI_EXIT_OK;
    }
    ui_settings_default(&o);
    o.n_predict = 0;   /* a reply runs to its end of text */
    if ((rc = ui_opts_parse(&set, argc, argv, &o, &first)) >= 0)
        return rc;
    st->threads = (int)o.threads;
    st->prefetch = o.prefetch;
    if (o.expert_io >= 0)
        snprintf(st->expert_io, sizeof st->expert_io, "%s", eng_expert_io_name(o.expert_io));
    ui_settings_eng_opts(&o, &st->eng);
    st->expert_ahead = -1;
    st->expert_ahead_layers = 0;
    ui_settings_sampling(&o, &st->sp);
    st->n_predict = o.n_predict;
    st->ignore_eos = o.ignore_eos;
    st->system = o.system ? strdup(o.system) : NULL;
    app.db = o.db;
    a->model = o.model ? o.model : ui_default_model();
    a->n_ctx = o.n_ctx;
    a->no_log = o.no_log;
    return -1;
}

static int open_wake_pipe(void)
{
    if (pipe(wake_pipe)) {
        fprintf(stderr, "cflow-tui: pipe: %s\n", strerror(errno));
        return -1;
    }
    for (int i = 0; i < 2; i++) {
        fcntl(wake_pipe[i], F_SETFL, fcntl(wake_pipe[i], F_GETFL) | O_NONBLOCK);
        fcntl(wake_pipe[i], F_SETFD, FD_CLOEXEC);
    }
    return 0;
}

/* The transcript, the panes, the generation thread (loading the model). */
static int start_app(tui_args *o)
{
    tui_chat_init(&app.chat);
    app.panes[0] = tui_pane_layers;
    app.panes[1] = tui_pane_overlap;
    app.panes[2] = tui_pane_counters;
    app.panes[3] = tui_pane_speed;
    app.need_layout = app.need_draw = 1;
    app.input_h = 1;
    const char *cs = nl_langinfo(CODESET);
    app.utf8 = tui_utf8 = cs && (!strcmp(cs, "UTF-8") || !strcmp(cs, "utf8"));

    tui_gen_cfg gc = { app.db, o->no_log, (uint32_t)o->n_ctx, &app.chat, wake_pipe[1] };
    if (tui_gen_start(&app.gen, &gc, &o->st)) {
        fprintf(stderr, "cflow-tui: cannot start the generation thread\n");
        return -1;
    }
    /* The UI thread yields to the decoder: nice +5 for this thread only
     * (Linux applies nice per thread; the generation thread and the
     * engine's workers it starts keep the process's priority).  Drawing at
     * 10 Hz then never takes a core from a decode worker on a busy
     * machine. */
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 5)) {
        /* not fatal: the UI just runs at the normal priority */
    }
    if (o->model)
        tui_gen_post(app.gen, TUI_JOB_LOAD, o->model);
    else
        tui_chat_add(&app.chat, TUI_ERROR, "no model: give -m MODEL or /model PATH "
                     "(no default model is installed)");
    return 0;
}

static void init_colors(void)
{
    const char *nc = getenv("NO_COLOR");
    if (!has_colors() || (nc && *nc))
        return;
    start_color();
    use_default_colors();
    app.color = 1;
    init_pair(TUI_C_STATUS, COLOR_BLACK, COLOR_CYAN);
    init_pair(TUI_C_USER, COLOR_GREEN, -1);
    init_pair(TUI_C_NOTE, COLOR_YELLOW, -1);
    init_pair(TUI_C_ERROR, COLOR_RED, -1);
    init_pair(TUI_C_BAR, COLOR_CYAN, -1);
    init_pair(TUI_C_BAR2, COLOR_MAGENTA, -1);
    init_pair(TUI_C_MARK, COLOR_YELLOW, -1);
    init_pair(TUI_C_TITLE, COLOR_CYAN, -1);
}

static int start_curses(void)
{
    atexit(restore_terminal);
    install_signals();
    ESCDELAY = 25;
    if (!initscr()) {
        fprintf(stderr, "cflow-tui: cannot initialise the terminal\n");
        return -1;
    }
    curses_on = 1;
    /* One write(2) per frame, not one per cursor movement.  ncurses flushes
     * its output buffer after every internal cursor move while the screen
     * is in its "initial" state (lib_mvcur.c: _endwin == ewInitial, meant
     * for low-level terminfo callers), and initscr leaves it there until
     * the first endwin/refresh pair.  A frame of the live panes went out
     * as ~50 writes of 10-150 bytes (strace), each a pty wake-up of the
     * terminal and a kernel worker: on two busy cores that pile of
     * switches ran beside the decode for milliseconds a frame.  The pair
     * here moves the screen to "running" before anything is drawn.
     * typeahead(-1): no poll of the keyboard in the middle of an update;
     * the loop reads every pending key before it draws anyway. */
    endwin();
    refresh();
    typeahead(-1);
    cbreak();
    noecho();
    nonl();
    keypad(stdscr, TRUE);
    nodelay(stdscr, TRUE);
    init_colors();
    for (int i = 0; i < TUI_NPANE; i++)
        if (app.panes[i].init && app.panes[i].init(&app.panes[i], &app))
            app.panes[i].hidden = 1;
    refresh();
    tui_input_setup(&app);
    if (sigaction(SIGTSTP, NULL, &curses_tstp) == 0 && !(curses_tstp.sa_flags & SA_SIGINFO) &&
        curses_tstp.sa_handler != SIG_DFL && curses_tstp.sa_handler != SIG_IGN) {
        struct sigaction sa = curses_tstp;
        sa.sa_handler = on_tstp;
        sigaction(SIGTSTP, &sa, NULL);
    }
    if (tui_input_first_start())
        tui_chat_add(&app.chat, TUI_NOTE, "F1 or /help: keys and commands; F10 quits");
    return 0;
}

/* One turn of the loop's wake-ups: the pipe, the signals, the keys. */
static int poll_once(int busy, double last_frame)
{
    double now = prof_now();
    int wait_ms = busy ? (int)((last_frame + 0.1 - now) * 1000) : 1000;
    if (wait_ms < 0 || app.need_draw || app.need_layout)
        wait_ms = 0;
    struct pollfd pf[2] = { { STDIN_FILENO, POLLIN, 0 }, { wake_pipe[0], POLLIN, 0 } };
    int r = poll(pf, 2, wait_ms);
    if (r < 0 && errno != EINTR)
        return -1;
    if (r > 0 && (pf[1].revents & POLLIN)) {
        char drain[64];
        while (read(wake_pipe[0], drain, sizeof drain) > 0) {
        }
        app.need_draw = 1;
    }
    if (got_term)
        return -1;
    if (got_int) {
        got_int = 0;
        if (tui_gen_busy(app.gen))
            tui_gen_interrupt(app.gen);
        else if (app.mode == TUI_MODE_CHAT)
            tui_input_clear();
        app.need_draw = 1;
    }
    wint_t ch;
    int kr;
    while (!app.quit && (kr = get_wch(&ch)) != ERR)
        tui_input_key(&app, kr == KEY_CODE_YES, ch);
    tui_input_tick(&app);
    return 0;
}

static void run_loop(void)
{
    uint64_t seen_chat = (uint64_t)-1, seen_snap = (uint64_t)-1;
    double last_frame = 0;
    while (!app.quit) {
        int busy = tui_gen_busy(app.gen);
        if (poll_once(busy, last_frame) || app.quit)
            break;
        pthread_mutex_lock(&app.chat.mu);
        uint64_t cv = app.chat.version;
        pthread_mutex_unlock(&app.chat.mu);
        if (cv != seen_chat) {
            seen_chat = cv;
            app.need_draw = 1;
        }
        double now = prof_now();
        tui_snap sn;
        tui_gen_snap(app.gen, &sn);
        if (sn.version != seen_snap && !busy) {
            seen_snap = sn.version;
            app.need_draw = 1;
        }
        if (app.need_layout || app.need_draw || (busy && now - last_frame >= 0.1)) {
            tui_screen_frame(&app);
            last_frame = now;
        }
    }
}

int main(int argc, char **argv)
{
    tui_args o;
    ui_std_fds();
    setlocale(LC_ALL, "");
    int rc = parse_flags(argc, argv, &o);
    if (rc < 0)
        rc = ui_env_check(TUI_NAME);
    if (rc >= 0) {
        tui_settings_free(&o.st);
        return rc;
    }
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
        fprintf(stderr, "cflow-tui: needs a terminal (use 'cflow run' in scripts)\n");
        tui_settings_free(&o.st);
        return UI_EXIT_ERR;
    }
    if (open_wake_pipe() || start_app(&o))
        return UI_EXIT_ERR;
    if (start_curses()) {
        tui_gen_quit(app.gen);
        return UI_EXIT_ERR;
    }
    run_loop();
    tui_gen_quit(app.gen);
    tui_runs_close(&app);
    tui_input_teardown();
    for (int i = 0; i < TUI_NPANE; i++)
        if (app.panes[i].fini)
            app.panes[i].fini(&app.panes[i]);
    tui_screen_free();
    restore_terminal();
    tui_chat_free(&app.chat);
    tui_settings_free(&o.st);
    close(wake_pipe[0]);
    close(wake_pipe[1]);
    return UI_EXIT_OK;
}
