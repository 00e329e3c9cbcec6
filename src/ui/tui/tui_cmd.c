/*
 * tui_cmd.c — the /commands and function keys of cflow-tui, as two tables.
 *
 * A /command is one tui_cmd row (tui.h): its name and alias, the argument
 * as the help shows it, what kind of argument it takes and, for numbers,
 * the flag whose limits it shares (ui_opt.c's table, so /threads and -t
 * take the same range); the handler it runs and one line of help.
 * tui_command looks the name up, parses the argument by its kind (a
 * refusal names the valid range, and nothing changes), then runs the
 * handler.  The function keys
 * are tui_key rows the same way (code, name, key-bar label, handler, help);
 * keys with code 0 are the input line's own (readline, scrolling, focus)
 * and are in the table for the help alone.  The help screen, the key bar
 * and `cflow-tui --list-commands` (which the tests compare with the man
 * page) are all built from these two tables, as tmux's cmd_entry and
 * htop's function-key tables are.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ui/tui/tui.h"
#include "ui/common/ui.h"

void tui_say(tui_app *a, int role, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tui_chat_addv(&a->chat, role, fmt, ap);
    va_end(ap);
    a->chat_scroll = 0;
    a->need_draw = 1;
}

static void busy_refusal(tui_app *a)
{
    tui_say(a, TUI_ERROR, "still generating: Ctrl-C stops the reply");
}

/* ======================================================================= */
/* Mode switches                                                            */
/* ======================================================================= */
void tui_open_help(tui_app *a)
{
    a->mode = TUI_MODE_HELP;
    a->help_scroll = 0;
    a->need_layout = 1;
}

void tui_open_runs(tui_app *a, const char *filter)
{
    char err[512];
    if (tui_runs_open(a, filter, err, sizeof err)) {
        tui_say(a, TUI_ERROR, "run browser: %s", err);
        return;
    }
    a->mode = TUI_MODE_RUNS;
    a->need_layout = 1;
}

void tui_focus_next(tui_app *a, int dir)
{
    for (int k = 0; k < TUI_NPANE + 1; k++) {
        a->focus = (a->focus + dir + TUI_NPANE + 1) % (TUI_NPANE + 1);
        if (a->focus == 0 || !a->panes[a->focus - 1].hidden)
            break;
    }
    a->need_layout = 1;
}

/* ======================================================================= */
/* Settings                                                                 */
/* ======================================================================= */
static void set_and_say(tui_app *a, tui_settings *st, const char *what)
{
    tui_gen_settings(a->gen, st);
    tui_say(a, TUI_NOTE, "%s%s", what,
            tui_gen_busy(a->gen) ? " (a new run starts with the next token)"
                                 : " (the next reply starts a new run)");
}

static void change_threads(tui_app *a, int delta, long abs_val)
{
    tui_settings st;
    tui_gen_get_settings(a->gen, &st);
    int old = st.threads ? st.threads : a->snap.threads;
    long v = abs_val >= 0 ? abs_val : old + delta;
    const ui_opt *o = ui_opt_find("threads");
    if (abs_val < 0 && v < 1)   /* F5 stops at one: 0 would mean all cores */
        v = 1;
    if (v > (long)o->max)
        v = (long)o->max;
    st.threads = (int)v;
    char what[96];
    snprintf(what, sizeof what, "threads %d -> %ld", old, v);
    set_and_say(a, &st, what);
    tui_settings_free(&st);
}

static void change_temp(tui_app *a, double delta, double abs_val)
{
    tui_settings st;
    tui_gen_get_settings(a->gen, &st);
    const ui_opt *o = ui_opt_find("temp");
    double old = st.sp.temp, v = abs_val >= 0 ? abs_val : old + delta;
    if (v < o->min)
        v = o->min;
    if (v > o->max)
        v = o->max;
    st.sp.temp = (float)v;
    char what[96];
    snprintf(what, sizeof what, "temperature %.2f -> %.2f", old, v);
    set_and_say(a, &st, what);
    tui_settings_free(&st);
}

/* Expert I/O: to the named mode, or (NULL/"") the next of mmap, sync,
 * staged.  The engine switches between tokens; a mode it cannot open
 * (O_DIRECT refused, ...) comes back as an error note and the status line
 * keeps the mode it runs. */
static void cycle_expert_io(tui_app *a, const char *to)
{
    int m;
    if (to && *to) {
        char err[160];   /* the option table's words */
        if (ui_opt_value(ui_opt_find("expert-io"), to, &m, err, sizeof err)) {
            tui_say(a, TUI_ERROR, "/expert-io: bad value '%s' (%s)", to, err);
            return;
        }
    } else {
        int cur = eng_expert_io_from_name(a->snap.expert_io);
        m = ((cur < 0 ? 0 : cur) + 1) % 3;
    }
    tui_settings st;
    tui_gen_get_settings(a->gen, &st);
    snprintf(st.expert_io, sizeof st.expert_io, "%s", eng_expert_io_name(m));
    char what[96];
    snprintf(what, sizeof what, "expert-io %s -> %s%s", a->snap.expert_io,
             eng_expert_io_name(m), a->snap.hp.n_experts ? "" : " (a dense model reads no experts)");
    set_and_say(a, &st, what);
    tui_settings_free(&st);
}

/* Prefetch on (1), off (0) or (-1) the other state. */
static void set_prefetch(tui_app *a, int on)
{
    if (on < 0)
        on = !a->snap.prefetch;
    tui_settings st;
    tui_gen_get_settings(a->gen, &st);
    st.prefetch = on;
    char what[64];
    snprintf(what, sizeof what, "prefetch %s -> %s", a->snap.prefetch ? "on" : "off",
             on ? "on" : "off");
    set_and_say(a, &st, what);
    tui_settings_free(&st);
}

/* ======================================================================= */
/* Command handlers                                                         */
/* ======================================================================= */
#define CMD(fn) static void fn(tui_app *a, const tui_cmd *c, const tui_argv *v)

CMD(cmd_quit) { (void)c; (void)v; a->quit = 1; }
CMD(cmd_help) { (void)c; (void)v; tui_open_help(a); }

CMD(cmd_clear)
{
    (void)c;
    (void)v;
    if (tui_gen_post(a->gen, TUI_JOB_CLEAR, NULL))
        busy_refusal(a);
}

CMD(cmd_regen)
{
    (void)c;
    (void)v;
    if (tui_gen_post(a->gen, TUI_JOB_REGEN, NULL))
        busy_refusal(a);
}

CMD(cmd_save)
{
    (void)c;
    tui_settings st;
    tui_gen_get_settings(a->gen, &st);
    if (tui_chat_save(&a->chat, v->s, a->snap.model, st.system))
        tui_say(a, TUI_ERROR, "/save %s: %s", v->s, strerror(errno));
    else
        tui_say(a, TUI_NOTE, "saved the transcript to %s", v->s);
    tui_settings_free(&st);
}

CMD(cmd_model)
{
    (void)c;
    if (tui_gen_post(a->gen, TUI_JOB_LOAD, v->s))
        busy_refusal(a);
    else
        tui_say(a, TUI_NOTE, "loading %s ...", v->s);
}

CMD(cmd_mode)
{
    (void)c;
    if (tui_gen_post(a->gen, TUI_JOB_MODE, v->s))
        busy_refusal(a);
}

CMD(cmd_system)
{
    (void)c;
    tui_settings st;
    tui_gen_get_settings(a->gen, &st);
    free(st.system);
    st.system = *v->s ? strdup(v->s) : NULL;
    /* a base model has no system role: say what the text becomes */
    int completion = a->snap.loaded && !strcmp(a->snap.chat, "completion");
    char what[256];
    snprintf(what, sizeof what, "system prompt %s%s", *v->s ? "set" : "cleared",
             completion && *v->s ? " (completion mode: the model has no chat template, so "
                                   "the text goes before the conversation as plain text, "
                                   "then a blank line)" : "");
    set_and_say(a, &st, what);
    tui_settings_free(&st);
}

/* /expert-ahead [on|off|N]: look-ahead on, off, N layers deep (on), or
 * (no argument) the other state. */
static void set_expert_ahead(tui_app *a, const char *arg)
{
    char was[24], now[24], *end = NULL;
    int on = -1, layers = 0;
    if (!*arg)
        on = a->snap.expert_ahead <= 0;
    else if (!strcmp(arg, "on"))
        on = 1;
    else if (!strcmp(arg, "off") || !strcmp(arg, "0"))
        on = 0;
    else {
        long n = strtol(arg, &end, 10);
        if (*end || end == arg || n < 1 || n > ENG_AHEAD_MAX) {
            tui_say(a, TUI_ERROR, "/expert-ahead: bad value '%s' (on, off, or 1 to %d layers)",
                    arg, ENG_AHEAD_MAX);
            return;
        }
        on = 1;
        layers = (int)n;
    }
    ui_ahead_text(a->snap.expert_ahead, was, sizeof was);
    tui_settings st;
    tui_gen_get_settings(a->gen, &st);
    st.expert_ahead = on;
    if (layers)
        st.expert_ahead_layers = layers;
    char what[128];
    snprintf(what, sizeof what, "look-ahead %s -> %s%s", was,
             !on ? "off" : layers ? ui_ahead_text(layers, now, sizeof now) : "on",
             a->snap.hp.n_experts ? "" : " (a dense model guesses no experts)");
    set_and_say(a, &st, what);
    tui_settings_free(&st);
}

CMD(cmd_runs) { (void)c; tui_open_runs(a, *v->s ? v->s : NULL); }
CMD(cmd_threads) { (void)c; change_threads(a, 0, v->i); }
CMD(cmd_prefetch) { (void)c; set_prefetch(a, *v->s ? v->on : -1); }
CMD(cmd_expert_io) { (void)c; cycle_expert_io(a, v->s); }
CMD(cmd_expert_ahead) { (void)c; set_expert_ahead(a, v->s); }
CMD(cmd_temp) { (void)c; change_temp(a, 0, v->d); }

/* The other settings: one assignment each, said as "NAME VALUE". */
#define SETTING(fn, assign)                                  \
    CMD(fn)                                                  \
    {                                                        \
        tui_settings st;                                     \
        char what[128];                                      \
        tui_gen_get_settings(a->gen, &st);                   \
        assign;                                              \
        snprintf(what, sizeof what, "%s %s", c->name, v->s); \
        set_and_say(a, &st, what);                           \
        tui_settings_free(&st);                              \
    }
SETTING(cmd_top_k, st.sp.top_k = (int)v->i)
SETTING(cmd_top_p, st.sp.top_p = (float)v->d)
SETTING(cmd_min_p, st.sp.min_p = (float)v->d)
SETTING(cmd_rep_penalty, st.sp.rep_penalty = (float)v->d)
SETTING(cmd_rep_last_n, st.sp.rep_last_n = (int)v->i)
SETTING(cmd_seed, st.sp.seed = v->u)
SETTING(cmd_n, st.n_predict = v->i)
SETTING(cmd_ignore_eos, st.ignore_eos = v->on)

CMD(cmd_hide)
{
    (void)c;
    if (v->pane == 0) {
        tui_say(a, TUI_ERROR, "the chat cannot be hidden");
        return;
    }
    a->panes[v->pane - 1].hidden = 1;
    if (a->focus == v->pane)
        a->focus = 0;
    a->need_layout = 1;
}

CMD(cmd_show)
{
    (void)c;
    if (v->pane > 0)
        a->panes[v->pane - 1].hidden = 0;
    a->need_layout = 1;
}

CMD(cmd_focus)
{
    cmd_show(a, c, v);
    a->focus = v->pane;
}

CMD(cmd_zoom)
{
    tui_argv w = *v;
    if (w.pane < 0)   /* no pane given: toggle the zoom of the focused one */
        w.pane = a->focus;
    cmd_show(a, c, &w);
    a->zoom = v->pane >= 0 ? 1 : !a->zoom;
    a->focus = w.pane;
}

CMD(cmd_settings)
{
    (void)c;
    (void)v;
    tui_settings st;
    char ahead[24];
    tui_gen_get_settings(a->gen, &st);
    tui_say(a, TUI_NOTE,
            "settings: threads %d (%d running), prefetch %s, expert-io %s, look-ahead %s, "
            "temp %.2f, top-k %d, top-p %.2f, min-p %.2f, repeat-penalty %.2f (last %d), "
            "seed %llu, n %ld, ignore-eos %s, system %s%s%s",
            st.threads, a->snap.threads, a->snap.prefetch ? "on" : "off", a->snap.expert_io,
            ui_ahead_text(a->snap.expert_ahead, ahead, sizeof ahead),
            (double)st.sp.temp, st.sp.top_k, (double)st.sp.top_p, (double)st.sp.min_p,
            (double)st.sp.rep_penalty, st.sp.rep_last_n, (unsigned long long)st.sp.seed,
            st.n_predict, st.ignore_eos ? "on" : "off", st.system ? "\"" : "(none)",
            st.system ? st.system : "", st.system ? "\"" : "");
    tui_settings_free(&st);
}

/* ======================================================================= */
/* The command table                                                        */
/* ======================================================================= */
#define PANE_ARG "PANE"
const tui_cmd tui_cmds[] = {
    { "help", "?", "", TUI_A_NONE, 0, NULL, cmd_help, "this help" },
    { "quit", "exit", "", TUI_A_NONE, 0, NULL, cmd_quit, "leave" },
    { "q", NULL, "", TUI_A_NONE, 0, NULL, cmd_quit, "leave (as /quit)" },
    { "clear", NULL, "", TUI_A_NONE, 0, NULL, cmd_clear,
      "forget the conversation (the system prompt stays)" },
    { "regen", NULL, "", TUI_A_NONE, 0, NULL, cmd_regen, "answer the last prompt again" },
    { "save", NULL, "FILE", TUI_A_TEXT, 0, NULL, cmd_save, "the transcript as Markdown" },
    { "model", NULL, "PATH", TUI_A_TEXT, 0, NULL, cmd_model,
      "load another model (on failure the old one stays)" },
    { "mode", NULL, "MODE", TUI_A_TEXT, 0, NULL, cmd_mode,
      "chat (the model's template), completion, or a template family (chatml ...)" },
    { "system", NULL, "[TEXT]", TUI_A_TEXT, 1, NULL, cmd_system,
      "set (or clear) the system prompt; in completion mode plain text first" },
    { "runs", NULL, "[FILTER]", TUI_A_TEXT, 1, NULL, cmd_runs,
      "the run browser (FILTER: part of a model path)" },
    { "threads", NULL, "N", TUI_A_INT, 0, "threads", cmd_threads, "worker threads (0: all cores)" },
    { "prefetch", NULL, "[on|off]", TUI_A_ONOFF, 1, NULL, cmd_prefetch,
      "expert prefetch (none: the other state)" },
    { "expert-io", NULL, "[MODE]", TUI_A_TEXT, 1, NULL, cmd_expert_io,
      "mmap, sync, staged or auto (none: the next)" },
    { "expert-ahead", NULL, "[on|off|N]", TUI_A_TEXT, 1, NULL, cmd_expert_ahead,
      "look-ahead reads of guessed experts, N layers deep (none: the other state)" },
    { "temp", NULL, "T", TUI_A_REAL, 0, "temp", cmd_temp, "temperature (0: greedy)" },
    { "top-k", NULL, "K", TUI_A_INT, 0, "top-k", cmd_top_k, "sample from the K likeliest (0: all)" },
    { "top-p", NULL, "P", TUI_A_REAL, 0, "top-p", cmd_top_p, "nucleus sampling" },
    { "min-p", NULL, "P", TUI_A_REAL, 0, "min-p", cmd_min_p, "drop tokens below P times the likeliest" },
    { "repeat-penalty", NULL, "R", TUI_A_REAL, 0, "repeat-penalty", cmd_rep_penalty,
      "penalty of repeated tokens (1: none)" },
    { "repeat-last-n", NULL, "N", TUI_A_INT, 0, "repeat-last-n", cmd_rep_last_n,
      "how many recent tokens the penalty looks at" },
    { "seed", NULL, "S", TUI_A_U64, 0, "seed", cmd_seed, "sampling seed" },
    { "n", NULL, "N", TUI_A_INT, 0, "n-predict", cmd_n,
      "most tokens per reply (0: until end of text)" },
    { "ignore-eos", NULL, "on|off", TUI_A_ONOFF, 0, NULL, cmd_ignore_eos,
      "keep generating past the end-of-text token" },
    { "hide", NULL, PANE_ARG, TUI_A_PANE, 0, NULL, cmd_hide, "hide a pane" },
    { "show", NULL, PANE_ARG, TUI_A_PANE, 0, NULL, cmd_show, "show a hidden pane" },
    { "focus", NULL, PANE_ARG, TUI_A_PANE, 0, NULL, cmd_focus, "focus a pane (or the chat)" },
    { "zoom", NULL, "[PANE]", TUI_A_PANE, 1, NULL, cmd_zoom,
      "zoom a pane (none: the focused one, again: unzoom)" },
    { "settings", NULL, "", TUI_A_NONE, 0, NULL, cmd_settings, "the current settings" },
};
const size_t tui_n_cmds = sizeof tui_cmds / sizeof *tui_cmds;

/* ======================================================================= */
/* The key table                                                            */
/* ======================================================================= */
static void key_help(tui_app *a) { tui_open_help(a); }
static void key_runs(tui_app *a) { tui_open_runs(a, NULL); }
static void key_zoom(tui_app *a) { a->zoom = !a->zoom; a->need_layout = 1; }
static void key_thr_down(tui_app *a) { change_threads(a, -1, -1); }
static void key_thr_up(tui_app *a) { change_threads(a, +1, -1); }
static void key_prefetch(tui_app *a) { set_prefetch(a, -1); }
static void key_xio(tui_app *a) { cycle_expert_io(a, NULL); }
static void key_temp_down(tui_app *a) { change_temp(a, -0.1, -1); }
static void key_temp_up(tui_app *a) { change_temp(a, +0.1, -1); }
static void key_quit(tui_app *a) { a->quit = 1; }

static void key_hide(tui_app *a)
{
    if (a->focus > 0) {
        a->panes[a->focus - 1].hidden = 1;
        a->focus = 0;
        a->zoom = 0;
        a->need_layout = 1;
    }
}

static void key_stop(tui_app *a)
{
    if (tui_gen_busy(a->gen))
        tui_gen_interrupt(a->gen);
}

const tui_key tui_keys[] = {
    { 0, "Enter", NULL, NULL, "send the prompt (or run the /command)" },
    { 0, "Alt-Enter, Ctrl-J", NULL, NULL, "new line in the prompt (multi-line input)" },
    { 0, "Up, Down", NULL, NULL, "history (saved in $XDG_DATA_HOME/cflow/history)" },
    { 0, "Ctrl-C", NULL, NULL, "stop the reply being generated; clear the line when idle" },
    { 0, "Ctrl-D", NULL, NULL, "quit (on an empty line)" },
    { 0, "PgUp, PgDn", NULL, NULL, "scroll the chat (or the focused pane)" },
    { 0, "Tab, Shift-Tab", NULL, NULL, "focus the next / previous pane (chat, 1-4)" },
    { KEY_F(1), "F1", "Help", key_help, "this help" },
    { KEY_F(2), "F2", "Runs", key_runs, "the run browser" },
    { KEY_F(3), "F3", "Hide", key_hide, "hide the focused pane (/show PANE brings it back)" },
    { KEY_F(4), "F4", "Zoom", key_zoom, "zoom the focused pane (again: unzoom)" },
    { KEY_F(5), "F5", "Thr-", key_thr_down, "one worker thread less" },
    { KEY_F(6), "F6", "Thr+", key_thr_up, "one worker thread more" },
    { KEY_F(7), "F7", "Prefetch", key_prefetch, "prefetch on/off" },
    { KEY_F(8), "F8", "ExpIO", key_xio, "expert I/O mode: mmap, sync, staged" },
    { KEY_F(9), "F9", "Stop", key_stop, "stop the reply being generated (as Ctrl-C)" },
    { KEY_F(10), "F10", "Quit", key_quit, "quit" },
    { KEY_F(11), "F11", NULL, key_temp_down, "temperature - 0.1" },
    { KEY_F(12), "F12", NULL, key_temp_up, "temperature + 0.1" },
    { 0, "Ctrl-L", NULL, NULL, "redraw the screen" },
};
const size_t tui_n_keys = sizeof tui_keys / sizeof *tui_keys;

int tui_key_run(tui_app *a, int code)
{
    for (size_t i = 0; i < tui_n_keys; i++)
        if (tui_keys[i].code == code && tui_keys[i].run) {
            tui_keys[i].run(a);
            return 1;
        }
    return 0;
}

/* ======================================================================= */
/* Parsing                                                                  */
/* ======================================================================= */
static int pane_index(const tui_app *a, const char *name)
{
    if (!strcmp(name, "chat") || !strcmp(name, "0"))
        return 0;
    for (int i = 0; i < TUI_NPANE; i++) {
        char d[4];
        snprintf(d, sizeof d, "%d", i + 1);
        if (!strcmp(name, a->panes[i].name) || !strcmp(name, d))
            return i + 1;
    }
    return -1;
}

/* Parse arg by c's kind into v; 0, or -1 with the refusal said. */
static int parse_arg(tui_app *a, const tui_cmd *c, const char *arg, tui_argv *v)
{
    memset(v, 0, sizeof *v);
    v->s = arg;
    v->pane = -1;
    if (!*arg) {
        if (c->arg == TUI_A_NONE || c->optional)
            return 0;
        tui_say(a, TUI_ERROR, "/%s %s: the %s is missing", c->name, c->args, c->args);
        return -1;
    }
    char range[256] = "";
    int bad = 0;
    switch (c->arg) {
    case TUI_A_INT: case TUI_A_REAL: case TUI_A_U64: {
        /* the limits of the flag of the same name (ui_opt.c's table) */
        const ui_opt *o = ui_opt_find(c->opt);
        void *out = c->arg == TUI_A_INT ? (void *)&v->i
                  : c->arg == TUI_A_REAL ? (void *)&v->d : (void *)&v->u;
        bad = !o || ui_opt_value(o, arg, out, range, sizeof range);
        break;
    }
    case TUI_A_ONOFF:
        v->on = !strcmp(arg, "on") || !strcmp(arg, "1");
        bad = !v->on && strcmp(arg, "off") && strcmp(arg, "0");
        snprintf(range, sizeof range, "on or off");
        break;
    case TUI_A_PANE:
        bad = (v->pane = pane_index(a, arg)) < 0;
        snprintf(range, sizeof range, "chat, layers, overlap, counters or speed (or 0-%d)",
                 TUI_NPANE);
        break;
    default:
        break;
    }
    if (!bad)
        return 0;
    tui_say(a, TUI_ERROR, "/%s: bad value '%s' (%s)", c->name, arg, range);
    return -1;
}

void tui_command(tui_app *a, char *line)
{
    char *name = line + 1, *arg = name;
    while (*arg && *arg != ' ')
        arg++;
    if (*arg)
        *arg++ = 0;
    while (*arg == ' ')
        arg++;
    size_t al = strlen(arg);
    while (al && (arg[al - 1] == ' ' || arg[al - 1] == '\n'))
        arg[--al] = 0;
    for (size_t i = 0; i < tui_n_cmds; i++) {
        const tui_cmd *c = &tui_cmds[i];
        if (strcmp(name, c->name) && !(c->alias && !strcmp(name, c->alias)))
            continue;
        tui_argv v;
        if (!parse_arg(a, c, arg, &v))
            c->run(a, c, &v);
        return;
    }
    tui_say(a, TUI_ERROR, "unknown command /%s (/help lists them)", name);
}

/* ======================================================================= */
/* Help and the list the man page is checked against                        */
/* ======================================================================= */
static const char *const help_head[] = {
    "cflow-tui — keys and commands (q, Esc or F1 closes; Up/Down/PgUp/PgDn scroll)",
    "",
    "Keys",
};

static const char *const help_tail[] = {
    "  //text                send text that starts with '/'",
    "                        PANE: chat, layers, overlap, counters, speed (or 1-4)",
    "",
    "Panes",
    "  1 layers    per layer: bar = weight bytes streamed per decode token",
    "              (measured), | = the analytic critical-path bytes; the binding",
    "              stream (A attention, D dense FFN, E experts) is marked; with",
    "              the focus, Up/Down/PgUp/PgDn scroll the layers",
    "  2 overlap   expert compute vs I/O wait, the share of I/O hidden, the mode",
    "  3 counters  hardware counters (or why they are unavailable) and the",
    "              software counters, per token",
    "  4 speed     prefill and decode tok/s of the run, GB/s of weights and the",
    "              share of the machine's read bandwidth; a sparkline of the",
    "              latest tokens' tok/s with its max and min",
    "",
    "After each reply a line says its prompt and reply tokens, prefill and",
    "decode tok/s, and why it stopped.",
    "",
    "Run browser: Up/Down select, Space mark (two), c compare the marked,",
    "  Enter open a run's per-layer picture, f filter by model, r reload,",
    "  q or Esc back",
};

#define N_HEAD (sizeof help_head / sizeof *help_head)
#define N_TAIL (sizeof help_tail / sizeof *help_tail)

const char *tui_help_line(size_t i, char *buf, size_t n)
{
    if (i < N_HEAD)
        return help_head[i];
    i -= N_HEAD;
    if (i < tui_n_keys) {
        snprintf(buf, n, "  %-18s %s", tui_keys[i].name, tui_keys[i].help);
        return buf;
    }
    i -= tui_n_keys;
    if (i == 0)
        return "";
    if (i == 1)
        return "Commands";
    i -= 2;
    if (i < tui_n_cmds) {
        const tui_cmd *c = &tui_cmds[i];
        char name[64];
        snprintf(name, sizeof name, "/%s%s%s%s%s", c->name, c->alias ? ", /" : "",
                 c->alias ? c->alias : "", *c->args ? " " : "", c->args);
        snprintf(buf, n, "  %-21s %s", name, c->help);
        return buf;
    }
    i -= tui_n_cmds;
    return i < N_TAIL ? help_tail[i] : NULL;
}

void tui_list_commands(FILE *f)
{
    for (size_t i = 0; i < tui_n_keys; i++)
        fprintf(f, "key %s\n", tui_keys[i].name);
    for (size_t i = 0; i < tui_n_cmds; i++) {
        fprintf(f, "command /%s\n", tui_cmds[i].name);
        if (tui_cmds[i].alias)
            fprintf(f, "command /%s\n", tui_cmds[i].alias);
    }
}
