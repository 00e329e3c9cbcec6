/*
 * tui_main.c — cflow-tui: chat with a model while watching the engine.
 *
 * The screen, top to bottom: a status line (model, architecture and
 * delays, ISA, threads, prefetch, expert I/O, context use, state); the
 * body — the chat pane and the four live panes (beside it from 110 columns
 * on, in a 2x2 grid below it on narrower terminals), or the run browser,
 * or the help; and the input line, GNU readline through its callback
 * interface so the screen keeps updating while the user types.
 *
 * The loop.  poll() waits on the terminal, on a self-pipe the generation
 * thread and the signal handlers write to, and on a 100 ms timer while a
 * reply is being generated: the panes redraw at 10 Hz then, and only when
 * something changed otherwise.  Keys go through ncurses (wide characters);
 * those the UI does not use are fed to readline byte by byte
 * (rl_getc_function / rl_input_available_hook), and readline's redisplay
 * hook draws its line buffer into the input window.
 *
 * Terminal safety: endwin() runs on every way out — /quit, end of input, a
 * fatal error (atexit), SIGTERM/SIGHUP (a clean quit) and fatal signals
 * (SIGSEGV, SIGABRT, ... restore the terminal, then die of the signal).
 * SIGINT (Ctrl-C) stops the reply being generated, never the program.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <langinfo.h>
#include <locale.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <wchar.h>

#include <readline/history.h>
#include <readline/readline.h>

#include "kernels/kern.h"
#include "ui/tui.h"
#include "ui/ui.h"

enum { MODE_CHAT = 0, MODE_RUNS, MODE_HELP };

static tui_app app;
static int mode = MODE_CHAT;
/* The body window lies under the chat and the panes and shows only in
 * their gaps: it is blanked once after each layout, not every frame
 * (werase marks every line of it changed, and the frame then copied and
 * compared the whole screen once more). */
static int body_fresh;
static int focus;            /* 0 chat, 1..4 panes */
static int zoom;
static int chat_scroll;      /* lines up from the bottom */
static int help_scroll;
static int quit_now;
static int need_layout = 1, need_draw = 1;
static int input_h = 1;
static WINDOW *w_status, *w_chat, *w_input, *w_body, *w_pane[TUI_NPANE];
static int wake_pipe[2] = { -1, -1 };
static volatile sig_atomic_t got_int, got_term;
static int curses_on;
static char hist_path[PATH_MAX + 16];
static uint64_t seen_chat = (uint64_t)-1, seen_snap = (uint64_t)-1;

/* ======================================================================= */
/* Terminal safety                                                          */
/* ======================================================================= */
static void restore_terminal(void)
{
    if (curses_on && !isendwin())
        endwin();
    curses_on = 0;
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

/* ======================================================================= */
/* Drawing helpers shared with the panes                                    */
/* ======================================================================= */
attr_t tui_attr(const tui_app *a, int role)
{
    if (a->color)
        switch (role) {
        case TUI_C_STATUS: return COLOR_PAIR(TUI_C_STATUS) | A_BOLD;
        case TUI_C_USER: return COLOR_PAIR(TUI_C_USER) | A_BOLD;
        case TUI_C_NOTE: return COLOR_PAIR(TUI_C_NOTE);
        case TUI_C_ERROR: return COLOR_PAIR(TUI_C_ERROR) | A_BOLD;
        case TUI_C_BAR: return COLOR_PAIR(TUI_C_BAR);
        case TUI_C_BAR2: return COLOR_PAIR(TUI_C_BAR2);
        case TUI_C_MARK: return COLOR_PAIR(TUI_C_MARK) | A_BOLD;
        case TUI_C_TITLE: return COLOR_PAIR(TUI_C_TITLE) | A_BOLD;
        case TUI_C_DIM: return A_DIM;
        default: return A_NORMAL;
        }
    switch (role) {
    case TUI_C_STATUS: return A_REVERSE;
    case TUI_C_USER: case TUI_C_TITLE: case TUI_C_MARK: return A_BOLD;
    case TUI_C_ERROR: return A_BOLD | A_UNDERLINE;
    case TUI_C_NOTE: case TUI_C_DIM: return A_DIM;
    default: return A_NORMAL;
    }
}

/* Bytes and cells of the next character of s[0..n). */
static size_t next_char(const char *s, size_t n, int *cells)
{
    if ((unsigned char)*s < 0x80) {   /* what mbrtowc and wcwidth would say */
        *cells = 1;
        return 1;
    }
    mbstate_t ms;
    wchar_t wc;
    memset(&ms, 0, sizeof ms);
    size_t k = mbrtowc(&wc, s, n, &ms);
    if (k == (size_t)-1 || k == (size_t)-2 || k == 0) {
        *cells = 1;
        return 1;
    }
    int w = wcwidth(wc);
    *cells = w < 0 ? 1 : w;
    return k;
}

int tui_width(const char *s, size_t n)
{
    int w = 0, c;
    for (size_t i = 0; i < n;) {
        i += next_char(s + i, n - i, &c);
        w += c;
    }
    return w;
}

/* Printable ASCII goes into the window as cells (waddchnstr), the rest
 * through waddnstr.  waddnstr decodes every byte with mbrtowc and wcwidth
 * and renders each character on its own: mbrtowc, wcwidth, the UTF-8
 * converter and waddnstr were a quarter of the UI thread's samples while
 * a reply streamed (perf), time taken from the decode workers whenever the
 * machine has no idle core.  waddchnstr applies neither the window's
 * attributes nor its background, so the cells get them here as waddch
 * would give them (the background's colour only where the window has
 * none).  It neither wraps nor moves the cursor: the text is clipped at
 * the right edge, and the cursor is put after it. */
static int ascii_cell(char c)
{
    return (unsigned char)c >= 0x20 && (unsigned char)c < 0x7f;
}

void tui_addn(WINDOW *win, const char *s, size_t n)
{
    int maxx = getmaxx(win);
    chtype at = (chtype)getattrs(win), bk = getbkgd(win) & A_ATTRIBUTES;
    if (!(at & A_COLOR))
        at |= bk & A_COLOR;
    at |= bk & ~A_COLOR;
    for (size_t i = 0; i < n;) {
        int y, x;
        getyx(win, y, x);
        if (x >= maxx)
            return;
        size_t j = i;
        while (j < n && ascii_cell(s[j]))
            j++;
        if (j == i) {   /* UTF-8 (or a control) up to the next ASCII */
            while (j < n && !ascii_cell(s[j]))
                j++;
            waddnstr(win, s + i, (int)(j - i));
            i = j;
            continue;
        }
        chtype cell[256];
        size_t k = j - i;
        if (k > sizeof cell / sizeof cell[0])
            k = sizeof cell / sizeof cell[0];
        if (k > (size_t)(maxx - x))
            k = (size_t)(maxx - x);
        for (size_t m = 0; m < k; m++)
            cell[m] = (chtype)(unsigned char)s[i + m] | at;
        waddchnstr(win, cell, (int)k);
        if (x + (int)k >= maxx)
            return;
        wmove(win, y, x + (int)k);
        i += k;
    }
}

void tui_put(WINDOW *win, int y, int x, int w, const char *s)
{
    size_t n = strlen(s), i = 0;
    int used = 0, c;
    while (i < n) {
        size_t k = next_char(s + i, n - i, &c);
        if (used + c > w)
            break;
        used += c;
        i += k;
    }
    if (wmove(win, y, x) == OK)
        tui_addn(win, s, i);
}

void tui_bar(tui_app *a, WINDOW *win, int y, int x, int w, double frac, int role)
{
    if (w <= 0)
        return;
    if (!(frac > 0))
        frac = 0;
    if (frac > 1)
        frac = 1;
    int eighths = (int)(frac * w * 8 + 0.5), full = eighths / 8, part = eighths % 8;
    /* wide characters: no UTF-8 decoding per cell */
    static const wchar_t parts[8] = { 0, 0x258F, 0x258E, 0x258D, 0x258C, 0x258B, 0x258A, 0x2589 };
    wchar_t cell[512];
    int n = 0;
    for (; n < full && n < w && n < 511; n++)
        cell[n] = a->utf8 ? 0x2588 : L'#';
    if (full < w && part && a->utf8 && n < 511)
        cell[n++] = parts[part];
    wattron(win, tui_attr(a, role));
    if (n)
        mvwaddnwstr(win, y, x, cell, n);
    wattroff(win, tui_attr(a, role));
}

void tui_human(double v, char *buf, size_t n)
{
    if (v >= 1024.0 * 1024 * 1024)
        snprintf(buf, n, "%.2fG", v / (1024.0 * 1024 * 1024));
    else if (v >= 1024.0 * 1024)
        snprintf(buf, n, "%.2fM", v / (1024.0 * 1024));
    else if (v >= 1024.0)
        snprintf(buf, n, "%.1fK", v / 1024.0);
    else
        snprintf(buf, n, "%.0f", v);
}

/* ======================================================================= */
/* Layout                                                                   */
/* ======================================================================= */
static void del(WINDOW **w)
{
    if (*w)
        delwin(*w);
    *w = NULL;
}

static void layout(void)
{
    int rows, cols;
    getmaxyx(stdscr, rows, cols);
    del(&w_status);
    del(&w_chat);
    del(&w_input);
    del(&w_body);
    for (int i = 0; i < TUI_NPANE; i++)
        del(&w_pane[i]);
    if (rows < 6 || cols < 20) {
        need_layout = 0;
        return;
    }
    if (input_h > rows / 3)
        input_h = rows / 3 > 0 ? rows / 3 : 1;
    int body_y = 1, body_h = rows - 1 - input_h;
    w_status = newwin(1, cols, 0, 0);
    w_input = newwin(input_h, cols, rows - input_h, 0);
    w_body = newwin(body_h, cols, body_y, 0);
    body_fresh = 1;
    int vis[TUI_NPANE], nv = 0;
    for (int i = 0; i < TUI_NPANE; i++)
        if (!app.panes[i].hidden)
            vis[nv++] = i;
    if (mode != MODE_CHAT) {
        /* the body window serves the browser and the help */
    } else if (zoom && focus > 0 && !app.panes[focus - 1].hidden) {
        w_pane[focus - 1] = newwin(body_h, cols, body_y, 0);
    } else if (zoom || nv == 0 || body_h < 8) {
        w_chat = newwin(body_h, cols, body_y, 0);
    } else if (cols >= 110) {
        int pw = cols * 42 / 100 < 46 ? 46 : cols * 42 / 100;
        w_chat = newwin(body_h, cols - pw, body_y, 0);
        int y = body_y;
        for (int k = 0; k < nv; k++) {
            int h = body_h / nv + (k < body_h % nv ? 1 : 0);
            w_pane[vis[k]] = newwin(h, pw, y, cols - pw);
            y += h;
        }
    } else {
        int ph = body_h / 2 > 12 ? body_h / 2 : (body_h - 4 >= 12 ? 12 : body_h - 4);
        if (ph > 20)
            ph = 20;
        int per_row = nv > 1 ? 2 : 1, nrow = (nv + per_row - 1) / per_row;
        w_chat = newwin(body_h - ph, cols, body_y, 0);
        int y = body_y + body_h - ph;
        for (int r = 0, k = 0; r < nrow; r++) {
            int h = ph / nrow + (r < ph % nrow ? 1 : 0);
            int inrow = (k + per_row <= nv) ? per_row : nv - k;
            for (int c = 0; c < inrow; c++, k++) {
                int w = cols / inrow + (c < cols % inrow ? 1 : 0);
                w_pane[vis[k]] = newwin(h, w, y, c * (cols / inrow) + (c < cols % inrow ? c : cols % inrow));
            }
            y += h;
        }
    }
    need_layout = 0;
    need_draw = 1;
    clearok(curscr, TRUE);
}

/* ======================================================================= */
/* The status line                                                          */
/* ======================================================================= */
static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static void draw_status(void)
{
    if (!w_status)
        return;
    const tui_snap *s = &app.snap;
    static const char *const state[] = { "idle", "loading", "prefill", "decoding" };
    char line[2048];
    int cols = getmaxx(w_status);
    if (s->loaded)
        snprintf(line, sizeof line,
                 " %s | %s | %s d%u/e%u | %s | threads %d | prefetch %s | expert-io %s | "
                 "ctx %u/%u | temp %.2f",
                 base_name(s->model), state[s->state & 3], s->arch, s->hp.dense_delay,
                 s->hp.expert_delay, s->isa, s->threads, s->prefetch ? "on" : "off",
                 s->expert_io, s->n_past, s->n_ctx, (double)s->sp.temp);
    else
        snprintf(line, sizeof line, " %s | %s | no model (/model PATH) | threads %d |"
                 " prefetch %s | expert-io %s", TUI_NAME, state[s->state & 3], s->threads,
                 s->prefetch ? "on" : "off", s->expert_io);
    if (s->run_id) {
        size_t l = strlen(line);
        snprintf(line + l, sizeof line - l, " | run %lld", (long long)s->run_id);
    }
    werase(w_status);
    wbkgd(w_status, tui_attr(&app, TUI_C_STATUS));
    tui_put(w_status, 0, 0, cols, line);
    wnoutrefresh(w_status);
}

/* ======================================================================= */
/* The chat pane                                                            */
/* ======================================================================= */
typedef struct cline {
    size_t entry, off, len;
    int    role, first;
} cline;

/* Wrap entry text into lines of at most w cells (words kept whole when
 * they fit), calling out for each. */
static size_t wrap(const char *s, size_t n, int w, cline *out, size_t cap, size_t entry,
                   int role)
{
    size_t k = 0, i = 0;
    if (w < 1)
        w = 1;
    while (i <= n) {
        size_t start = i, brk = (size_t)-1;
        int used = 0, c;
        while (i < n && s[i] != '\n') {
            size_t b = next_char(s + i, n - i, &c);
            if (used + c > w)
                break;
            if (s[i] == ' ')
                brk = i;
            used += c;
            i += b;
        }
        size_t end = i;
        if (i < n && s[i] != '\n' && brk != (size_t)-1 && brk > start) {
            end = brk;
            i = brk + 1;
        } else if (i < n && s[i] == '\n') {
            i++;
        } else if (i >= n) {
            i = n + 1;
        }
        if (out && k < cap)
            out[k] = (cline){ entry, start, end - start, role, k == 0 };
        k++;
    }
    return k;
}

static void draw_chat(void)
{
    if (!w_chat)
        return;
    int h, w;
    getmaxyx(w_chat, h, w);
    werase(w_chat);
    int boxed = focus == 0 && !zoom;
    int iw = w - 2, ih = h - (boxed ? 2 : 0), y0 = boxed ? 1 : 0;
    if (boxed) {
        wattron(w_chat, tui_attr(&app, TUI_C_TITLE));
        box(w_chat, 0, 0);
        wattroff(w_chat, tui_attr(&app, TUI_C_TITLE));
    } else {
        iw = w - 1;
    }
    if (iw < 4 || ih < 1) {
        wnoutrefresh(w_chat);
        return;
    }
    tui_chat *c = &app.chat;
    pthread_mutex_lock(&c->mu);
    static const char *const tag[] = { "> ", "", "-- ", "error: " };
    /* Lay out only the tail the pane shows: entries, and inside an entry
     * its paragraphs ('\n'-separated, wrapped independently), from the end
     * back until the lines fill the pane and the scroll-back.  A long
     * conversation costs a frame no more than a short one. */
    size_t need = (size_t)ih + (size_t)(chat_scroll > 0 ? chat_scroll : 0) + 1;
    size_t cap = need + 64, nr = 0;
    cline *rev = malloc(cap * sizeof *rev);   /* the lines, last first */
    for (size_t i = c->n; rev && nr < need && i-- > 0;) {
        const tui_entry *e = &c->e[i];
        int tl = (int)strlen(tag[e->role & 3]);
        if (nr)
            rev[nr++] = (cline){ i, 0, 0, -1, 0 };   /* a blank line between entries */
        size_t end = e->len;
        for (;;) {
            size_t start = end;
            while (start > 0 && e->text[start - 1] != '\n')
                start--;
            size_t k = wrap(e->text + start, end - start, iw - tl, NULL, 0, i, e->role);
            if (nr + k + 1 > cap) {
                size_t nc = (nr + k + 1) * 2;
                cline *p = realloc(rev, nc * sizeof *p);
                if (!p)
                    break;
                rev = p;
                cap = nc;
            }
            wrap(e->text + start, end - start, iw - tl, rev + nr, k, i, e->role);
            for (size_t j = 0; j < k; j++) {
                rev[nr + j].off += start;
                rev[nr + j].first = start == 0 && j == 0;
            }
            for (size_t j = 0; j < k / 2; j++) {   /* last first */
                cline t = rev[nr + j];
                rev[nr + j] = rev[nr + k - 1 - j];
                rev[nr + k - 1 - j] = t;
            }
            nr += k;
            if (start == 0 || nr >= need)
                break;
            end = start - 1;   /* before the '\n' */
        }
    }
    size_t nl = nr;
    cline *lines = calloc(nl + 1, sizeof *lines);
    if (lines && rev)
        for (size_t j = 0; j < nl; j++)
            lines[j] = rev[nl - 1 - j];
    else
        nl = 0;
    free(rev);
    /* fewer lines than asked for: the whole transcript is laid out */
    int max_scroll = nr < need ? ((int)nl > ih ? (int)nl - ih : 0) : chat_scroll;
    if (chat_scroll > max_scroll)
        chat_scroll = max_scroll;
    if (chat_scroll < 0)
        chat_scroll = 0;
    long first = (long)nl - ih - chat_scroll;
    if (first < 0)
        first = 0;
    for (int r = 0; r < ih && (size_t)(first + r) < nl; r++) {
        const cline *l = &lines[first + r];
        if (l->role < 0)
            continue;
        const tui_entry *e = &c->e[l->entry];
        int x = boxed ? 1 : 0;
        int role = l->role == TUI_USER ? TUI_C_USER : l->role == TUI_NOTE ? TUI_C_NOTE
                 : l->role == TUI_ERROR ? TUI_C_ERROR : TUI_C_NORMAL;
        const char *t = tag[l->role & 3];
        int tl = (int)strlen(t);
        wattron(w_chat, tui_attr(&app, role));
        if (l->first)
            mvwaddstr(w_chat, y0 + r, x, t);
        wmove(w_chat, y0 + r, x + tl);
        size_t b = 0;   /* runs of text; tabs and other controls as spaces */
        while (b < l->len) {
            size_t run = b;
            while (run < l->len && (unsigned char)e->text[l->off + run] >= 32)
                run++;
            if (run > b)
                tui_addn(w_chat, e->text + l->off + b, run - b);
            if (run < l->len) {
                waddch(w_chat, ' ');
                run++;
            }
            b = run;
        }
        wattroff(w_chat, tui_attr(&app, role));
    }
    pthread_mutex_unlock(&c->mu);
    if (chat_scroll > 0) {
        char more[48];
        snprintf(more, sizeof more, "[%d more below: PgDn]", chat_scroll);
        wattron(w_chat, tui_attr(&app, TUI_C_MARK));
        mvwaddstr(w_chat, boxed ? h - 1 : h - 1, w - (int)strlen(more) - 2, more);
        wattroff(w_chat, tui_attr(&app, TUI_C_MARK));
    }
    free(lines);
    wnoutrefresh(w_chat);
}

/* ======================================================================= */
/* Panes                                                                    */
/* ======================================================================= */
static void update_panes(void)
{
    prof *p = tui_gen_prof_lock(app.gen);
    for (int i = 0; i < TUI_NPANE; i++)
        if (app.panes[i].update)
            app.panes[i].update(&app.panes[i], &app, p);
    tui_gen_prof_unlock(app.gen);
}

static void draw_panes(void)
{
    for (int i = 0; i < TUI_NPANE; i++) {
        WINDOW *w = w_pane[i];
        if (!w)
            continue;
        int h, wd;
        getmaxyx(w, h, wd);
        werase(w);
        int foc = focus == i + 1;
        attr_t at = tui_attr(&app, foc ? TUI_C_MARK : TUI_C_DIM);
        wattron(w, at);
        box(w, 0, 0);
        wattroff(w, at);
        char title[96];
        snprintf(title, sizeof title, " %d %s%s ", i + 1, app.panes[i].title,
                 foc ? (zoom ? " [zoomed]" : " [focus]") : "");
        wattron(w, tui_attr(&app, TUI_C_TITLE));
        tui_put(w, 0, 2, wd - 4, title);
        wattroff(w, tui_attr(&app, TUI_C_TITLE));
        if (h > 2 && wd > 4) {
            WINDOW *in = derwin(w, h - 2, wd - 2, 1, 1);
            if (in) {
                app.panes[i].draw(&app.panes[i], &app, in, h - 2, wd - 2);
                delwin(in);
            }
        }
        wnoutrefresh(w);
    }
}

/* ======================================================================= */
/* Help                                                                     */
/* ======================================================================= */
static const char *const help_text[] = {
    "cflow-tui — keys and commands (q or Esc closes; Up/Down/PgUp/PgDn scroll)",
    "",
    "Keys",
    "  Enter            send the prompt (or run the /command)",
    "  Alt-Enter, C-j   new line in the prompt (multi-line input)",
    "  Up, Down         history (saved in $XDG_DATA_HOME/cflow/history)",
    "  Ctrl-C           stop the reply being generated; clear the line when idle",
    "  Ctrl-D           quit (on an empty line)",
    "  PgUp, PgDn       scroll the chat (or the focused pane)",
    "  Tab, Shift-Tab   focus the next / previous pane (chat, 1-4)",
    "  F1               this help",
    "  F2               the run browser",
    "  F3               hide the focused pane (/show NAME brings it back)",
    "  F4               zoom the focused pane (again: unzoom)",
    "  F5, F6           threads - / +",
    "  F7               prefetch on/off",
    "  F8               expert I/O mode: mmap, sync, staged",
    "  F9, F10          temperature - / + 0.1",
    "  Ctrl-L           redraw the screen",
    "",
    "Commands",
    "  /help                 this help",
    "  /quit, /exit          leave",
    "  /clear                forget the conversation (the system prompt stays)",
    "  /regen                answer the last prompt again",
    "  /save FILE            the transcript as Markdown",
    "  /model PATH           load another model (on failure the old one stays)",
    "  /system [TEXT]        set (or clear) the system prompt",
    "  /runs [FILTER]        the run browser (FILTER: part of a model path)",
    "  /threads N            worker threads (0: all cores)",
    "  /prefetch on|off      expert prefetch",
    "  /expert-io MODE       mmap, sync or staged",
    "  /temp T  /top-k K  /top-p P  /min-p P  /repeat-penalty R  /seed S",
    "                        sampling (each change starts a new run in the log)",
    "  /n N                  most tokens per reply (0: until end of text)",
    "  /ignore-eos on|off    keep generating past the end-of-text token",
    "  /hide PANE, /show PANE, /zoom [PANE], /focus PANE",
    "                        PANE: chat, layers, overlap, counters, speed (or 1-4)",
    "  /settings             the current settings",
    "  //text                send text that starts with '/'",
    "",
    "Panes",
    "  1 layers    per layer: bar = weight bytes streamed per token (measured),",
    "              | = the analytic critical-path bytes; the binding stream",
    "              (A attention, D dense FFN, E experts) is marked",
    "  2 overlap   expert compute vs I/O wait, the share of I/O hidden, the mode",
    "  3 counters  hardware counters (or why they are unavailable) and the",
    "              software counters, per token",
    "  4 speed     tok/s sparkline, prefill and decode tok/s, GB/s of weights",
    "              and the share of the machine's read bandwidth",
    "",
    "Run browser: Up/Down select, Space mark (two), c compare the marked,",
    "  Enter open a run's per-layer picture, f filter by model, r reload,",
    "  q or Esc back",
};

static void draw_help(void)
{
    int h, w;
    getmaxyx(w_body, h, w);
    werase(w_body);
    int n = (int)(sizeof help_text / sizeof *help_text);
    if (help_scroll > n - h)
        help_scroll = n - h > 0 ? n - h : 0;
    for (int r = 0; r < h && help_scroll + r < n; r++) {
        const char *t = help_text[help_scroll + r];
        attr_t at = (t[0] && t[0] != ' ') ? tui_attr(&app, TUI_C_TITLE) : A_NORMAL;
        wattron(w_body, at);
        tui_put(w_body, r, 1, w - 2, t);
        wattroff(w_body, at);
    }
    wnoutrefresh(w_body);
}

/* ======================================================================= */
/* readline                                                                 */
/* ======================================================================= */
static int rl_byte, rl_have;

static int rl_getc_cb(FILE *f)
{
    (void)f;
    rl_have = 0;
    return rl_byte;
}

static int rl_avail_cb(void) { return rl_have; }

static void rl_feed(int b)
{
    rl_byte = b;
    rl_have = 1;
    rl_callback_read_char();
}

static void rl_feed_str(const char *s)
{
    while (*s)
        rl_feed((unsigned char)*s++);
}

static void rl_redisplay_cb(void)
{
    if (!w_input || mode != MODE_CHAT) {
        need_draw = 1;
        return;
    }
    int w = getmaxx(w_input);
    const char *prompt = rl_display_prompt ? rl_display_prompt : "";
    const char *buf = rl_line_buffer ? rl_line_buffer : "";
    size_t n = strlen(buf);
    /* lay the line out: rows of at most w cells; '\n' starts a row */
    int row = 0, col = tui_width(prompt, strlen(prompt)), cur_r = 0, cur_c = col;
    for (size_t i = 0; i <= n;) {
        if ((int)i == rl_point) {
            cur_r = row;
            cur_c = col;
        }
        if (i == n)
            break;
        int c;
        if (buf[i] == '\n') {
            row++;
            col = 2;
            i++;
            continue;
        }
        size_t k = next_char(buf + i, n - i, &c);
        if (col + c > w) {
            row++;
            col = 0;
        }
        col += c;
        i += k;
    }
    int want = row + 1 > 5 ? 5 : row + 1, maxh = LINES / 3 > 0 ? LINES / 3 : 1;
    if (want > maxh)   /* layout() allows no more: asking again would loop */
        want = maxh;
    if (want != input_h) {
        input_h = want;
        need_layout = 1;
        need_draw = 1;
        return;
    }
    int top = cur_r >= input_h ? cur_r - input_h + 1 : 0;
    werase(w_input);
    row = 0;
    col = 0;
    wattron(w_input, tui_attr(&app, TUI_C_USER));
    if (row >= top)
        mvwaddstr(w_input, row - top, 0, prompt);
    wattroff(w_input, tui_attr(&app, TUI_C_USER));
    col = tui_width(prompt, strlen(prompt));
    for (size_t i = 0; i < n;) {
        int c;
        if (buf[i] == '\n') {
            row++;
            col = 0;
            if (row >= top && row - top < input_h) {
                wattron(w_input, tui_attr(&app, TUI_C_DIM));
                mvwaddstr(w_input, row - top, 0, app.utf8 ? "… " : ": ");
                wattroff(w_input, tui_attr(&app, TUI_C_DIM));
            }
            col = 2;
            i++;
            continue;
        }
        size_t k = next_char(buf + i, n - i, &c);
        if (col + c > w) {
            row++;
            col = 0;
        }
        if (row >= top && row - top < input_h)
            mvwaddnstr(w_input, row - top, col, buf + i, (int)k);
        col += c;
        i += k;
    }
    if (cur_c >= w)
        cur_c = w - 1;
    wmove(w_input, cur_r - top, cur_c);
    wnoutrefresh(w_input);
    doupdate();
}

static int rl_newline_cmd(int count, int key)
{
    (void)count;
    (void)key;
    rl_insert_text("\n");
    return 0;
}

static void on_line(char *line);

static void history_setup(void)
{
    const char *x = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
    char dir[PATH_MAX];
    if (x && *x)
        snprintf(dir, sizeof dir, "%s/cflow", x);
    else if (home && *home)
        snprintf(dir, sizeof dir, "%s/.local/share/cflow", home);
    else
        return;
    /* mkdir -p */
    for (char *p = dir + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(dir, 0755);
            *p = '/';
        }
    mkdir(dir, 0755);
    snprintf(hist_path, sizeof hist_path, "%s/history", dir);
    using_history();
    stifle_history(1000);
    read_history(hist_path);
}

static void rl_setup(void)
{
    rl_catch_signals = 0;
    rl_catch_sigwinch = 0;
    rl_change_environment = 0;
    rl_prep_term_function = NULL;
    rl_deprep_term_function = NULL;
    rl_getc_function = rl_getc_cb;
    rl_input_available_hook = rl_avail_cb;
    rl_redisplay_function = rl_redisplay_cb;
    rl_outstream = fopen("/dev/null", "w");
    rl_readline_name = TUI_NAME;
    rl_inhibit_completion = 1;
    rl_bind_keyseq("\\e\\r", rl_newline_cmd);
    rl_bind_keyseq("\\e\\n", rl_newline_cmd);
    rl_bind_key('\n' /* C-j */, rl_newline_cmd);
    rl_bind_key('\r', rl_newline);
    history_setup();
    rl_callback_handler_install("> ", on_line);
}

static void rl_teardown(void)
{
    rl_callback_handler_remove();
    if (hist_path[0])
        write_history(hist_path);
    if (rl_outstream && rl_outstream != stdout) {
        fclose(rl_outstream);
        rl_outstream = NULL;
    }
    clear_history();
}

/* ======================================================================= */
/* Commands                                                                 */
/* ======================================================================= */
static void say(int role, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(int role, const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    tui_chat_add(&app.chat, role, buf);
    chat_scroll = 0;
    need_draw = 1;
}

static int pane_index(const char *name)
{
    if (!strcmp(name, "chat") || !strcmp(name, "0"))
        return 0;
    for (int i = 0; i < TUI_NPANE; i++) {
        char d[4];
        snprintf(d, sizeof d, "%d", i + 1);
        if (!strcmp(name, app.panes[i].name) || !strcmp(name, d))
            return i + 1;
    }
    return -1;
}

static void set_and_say(tui_settings *st, const char *what)
{
    tui_gen_settings(app.gen, st);
    say(TUI_NOTE, "%s%s", what,
        tui_gen_busy(app.gen) ? " (a new run starts with the next token)"
                              : " (the next reply starts a new run)");
}

static void show_settings(void)
{
    tui_settings st;
    tui_gen_get_settings(app.gen, &st);
    say(TUI_NOTE,
        "settings: threads %d (%d running), prefetch %s, expert-io %s, temp %.2f, "
        "top-k %d, top-p %.2f, min-p %.2f, repeat-penalty %.2f (last %d), seed %llu, "
        "n %ld, ignore-eos %s, system %s%s%s",
        st.threads, app.snap.threads, app.snap.prefetch ? "on" : "off", app.snap.expert_io,
        (double)st.sp.temp, st.sp.top_k, (double)st.sp.top_p, (double)st.sp.min_p,
        (double)st.sp.rep_penalty, st.sp.rep_last_n, (unsigned long long)st.sp.seed,
        st.n_predict, st.ignore_eos ? "on" : "off", st.system ? "\"" : "(none)",
        st.system ? st.system : "", st.system ? "\"" : "");
    tui_settings_free(&st);
}

static void change_threads(int delta, long abs_val)
{
    tui_settings st;
    tui_gen_get_settings(app.gen, &st);
    int old = st.threads ? st.threads : app.snap.threads;
    long v = abs_val >= 0 ? abs_val : old + delta;
    if (v < 0 || (abs_val < 0 && v < 1))
        v = 1;
    if (v > 1024)
        v = 1024;
    st.threads = (int)v;
    char what[96];
    snprintf(what, sizeof what, "threads %d -> %ld", old, v);
    set_and_say(&st, what);
    tui_settings_free(&st);
}

static void change_temp(double delta, double abs_val)
{
    tui_settings st;
    tui_gen_get_settings(app.gen, &st);
    double old = st.sp.temp, v = abs_val >= 0 ? abs_val : old + delta;
    if (v < 0)
        v = 0;
    if (v > 5)
        v = 5;
    st.sp.temp = (float)v;
    char what[96];
    snprintf(what, sizeof what, "temperature %.2f -> %.2f", old, v);
    set_and_say(&st, what);
    tui_settings_free(&st);
}

/* Expert I/O: to the named mode, or (NULL) the next of mmap, sync, staged.
 * The engine switches between tokens; a mode it cannot open (O_DIRECT
 * refused, ...) comes back as an error note and the status line keeps the
 * mode it runs. */
static void cycle_expert_io(const char *to)
{
    int mode;
    if (to && *to) {
        if ((mode = eng_expert_io_from_name(to)) < 0) {
            say(TUI_ERROR, "/expert-io MODE: mmap, sync or staged");
            return;
        }
    } else {
        int cur = eng_expert_io_from_name(app.snap.expert_io);
        mode = ((cur < 0 ? 0 : cur) + 1) % 3;
    }
    tui_settings st;
    tui_gen_get_settings(app.gen, &st);
    snprintf(st.expert_io, sizeof st.expert_io, "%s", eng_expert_io_name(mode));
    char what[96];
    snprintf(what, sizeof what, "expert-io %s -> %s%s", app.snap.expert_io,
             eng_expert_io_name(mode), app.snap.hp.n_experts ? "" : " (a dense model reads no experts)");
    set_and_say(&st, what);
    tui_settings_free(&st);
}

/* Prefetch on/off ("on", "off"), or (NULL) the other state. */
static void toggle_prefetch(const char *to)
{
    int on;
    if (to && *to) {
        if (!strcmp(to, "on") || !strcmp(to, "1"))
            on = 1;
        else if (!strcmp(to, "off") || !strcmp(to, "0"))
            on = 0;
        else {
            say(TUI_ERROR, "/prefetch on|off");
            return;
        }
    } else {
        on = !app.snap.prefetch;
    }
    tui_settings st;
    tui_gen_get_settings(app.gen, &st);
    st.prefetch = on;
    char what[64];
    snprintf(what, sizeof what, "prefetch %s -> %s", app.snap.prefetch ? "on" : "off",
             on ? "on" : "off");
    set_and_say(&st, what);
    tui_settings_free(&st);
}

static void open_runs(const char *filter)
{
    char err[512];
    if (tui_runs_open(&app, filter, err, sizeof err)) {
        say(TUI_ERROR, "run browser: %s", err);
        return;
    }
    mode = MODE_RUNS;
    need_layout = 1;
}

static void do_command(char *line)
{
    char *cmd = line + 1, *arg = cmd;
    while (*arg && *arg != ' ')
        arg++;
    if (*arg)
        *arg++ = 0;
    while (*arg == ' ')
        arg++;
    size_t al = strlen(arg);
    while (al && (arg[al - 1] == ' ' || arg[al - 1] == '\n'))
        arg[--al] = 0;
    long v;
    double d;
    tui_settings st;

    if (!strcmp(cmd, "quit") || !strcmp(cmd, "exit") || !strcmp(cmd, "q")) {
        quit_now = 1;
    } else if (!strcmp(cmd, "help") || !strcmp(cmd, "?")) {
        mode = MODE_HELP;
        help_scroll = 0;
        need_layout = 1;
    } else if (!strcmp(cmd, "clear")) {
        if (tui_gen_post(app.gen, TUI_JOB_CLEAR, NULL))
            say(TUI_ERROR, "still generating: Ctrl-C stops the reply");
    } else if (!strcmp(cmd, "regen")) {
        if (tui_gen_post(app.gen, TUI_JOB_REGEN, NULL))
            say(TUI_ERROR, "still generating: Ctrl-C stops the reply");
    } else if (!strcmp(cmd, "save")) {
        if (!*arg) {
            say(TUI_ERROR, "/save FILE: which file?");
            return;
        }
        tui_gen_get_settings(app.gen, &st);
        if (tui_chat_save(&app.chat, arg, app.snap.model, st.system))
            say(TUI_ERROR, "/save %s: %s", arg, strerror(errno));
        else
            say(TUI_NOTE, "saved the transcript to %s", arg);
        tui_settings_free(&st);
    } else if (!strcmp(cmd, "model")) {
        if (!*arg)
            say(TUI_ERROR, "/model PATH: which model?");
        else if (tui_gen_post(app.gen, TUI_JOB_LOAD, arg))
            say(TUI_ERROR, "still generating: Ctrl-C stops the reply");
        else
            say(TUI_NOTE, "loading %s ...", arg);
    } else if (!strcmp(cmd, "system")) {
        tui_gen_get_settings(app.gen, &st);
        free(st.system);
        st.system = *arg ? strdup(arg) : NULL;
        set_and_say(&st, *arg ? "system prompt set" : "system prompt cleared");
        tui_settings_free(&st);
    } else if (!strcmp(cmd, "runs")) {
        open_runs(*arg ? arg : NULL);
    } else if (!strcmp(cmd, "threads")) {
        if (ui_parse_int(arg, 0, 1024, &v))
            say(TUI_ERROR, "/threads N: N from 0 (all cores) to 1024");
        else
            change_threads(0, v);
    } else if (!strcmp(cmd, "prefetch")) {
        toggle_prefetch(arg);
    } else if (!strcmp(cmd, "expert-io")) {
        cycle_expert_io(arg);
    } else if (!strcmp(cmd, "temp")) {
        if (ui_parse_float(arg, 0, 5, &d))
            say(TUI_ERROR, "/temp T: T from 0 (greedy) to 5");
        else
            change_temp(0, d);
    } else if (!strcmp(cmd, "top-k") || !strcmp(cmd, "top-p") || !strcmp(cmd, "min-p") ||
               !strcmp(cmd, "repeat-penalty") || !strcmp(cmd, "seed") ||
               !strcmp(cmd, "n") || !strcmp(cmd, "ignore-eos") ||
               !strcmp(cmd, "repeat-last-n")) {
        tui_gen_get_settings(app.gen, &st);
        int bad = 0;
        char what[128];
        uint64_t u;
        if (!strcmp(cmd, "top-k") && !(bad = ui_parse_int(arg, 0, 1L << 24, &v)))
            st.sp.top_k = (int)v;
        else if (!strcmp(cmd, "top-p") && !(bad = ui_parse_float(arg, 0, 1, &d)))
            st.sp.top_p = (float)d;
        else if (!strcmp(cmd, "min-p") && !(bad = ui_parse_float(arg, 0, 1, &d)))
            st.sp.min_p = (float)d;
        else if (!strcmp(cmd, "repeat-penalty") && !(bad = ui_parse_float(arg, 0.01, 100, &d)))
            st.sp.rep_penalty = (float)d;
        else if (!strcmp(cmd, "repeat-last-n") && !(bad = ui_parse_int(arg, 0, 1L << 20, &v)))
            st.sp.rep_last_n = (int)v;
        else if (!strcmp(cmd, "seed") && !(bad = ui_parse_u64(arg, &u)))
            st.sp.seed = u;
        else if (!strcmp(cmd, "n") && !(bad = ui_parse_int(arg, 0, 1L << 30, &v)))
            st.n_predict = v;
        else if (!strcmp(cmd, "ignore-eos")) {
            if (!strcmp(arg, "on"))
                st.ignore_eos = 1;
            else if (!strcmp(arg, "off"))
                st.ignore_eos = 0;
            else
                bad = 1;
        }
        if (bad)
            say(TUI_ERROR, "/%s: bad value '%s' (see /help)", cmd, arg);
        else {
            snprintf(what, sizeof what, "%s %s", cmd, arg);
            set_and_say(&st, what);
        }
        tui_settings_free(&st);
    } else if (!strcmp(cmd, "hide") || !strcmp(cmd, "show") || !strcmp(cmd, "focus") ||
               !strcmp(cmd, "zoom")) {
        int k = *arg ? pane_index(arg) : (!strcmp(cmd, "zoom") ? focus : -1);
        if (k < 0) {
            say(TUI_ERROR, "/%s PANE: chat, layers, overlap, counters or speed", cmd);
            return;
        }
        if (!strcmp(cmd, "hide")) {
            if (k == 0)
                say(TUI_ERROR, "the chat cannot be hidden");
            else {
                app.panes[k - 1].hidden = 1;
                if (focus == k)
                    focus = 0;
            }
        } else if (!strcmp(cmd, "show")) {
            if (k > 0)
                app.panes[k - 1].hidden = 0;
        } else if (!strcmp(cmd, "focus")) {
            if (k > 0)
                app.panes[k - 1].hidden = 0;
            focus = k;
        } else {
            if (k > 0)
                app.panes[k - 1].hidden = 0;
            zoom = *arg ? 1 : !zoom;
            focus = k;
        }
        need_layout = 1;
    } else if (!strcmp(cmd, "settings")) {
        show_settings();
    } else {
        say(TUI_ERROR, "unknown command /%s (/help lists them)", cmd);
    }
}

static void on_line(char *line)
{
    if (!line) {   /* Ctrl-D on an empty line */
        quit_now = 1;
        return;
    }
    char *s = line;
    while (*s == ' ' || *s == '\n')
        s++;
    if (*s) {
        add_history(line);
        if (s[0] == '/' && s[1] != '/')
            do_command(s);
        else if (tui_gen_post(app.gen, TUI_JOB_CHAT, s[0] == '/' ? s + 1 : s))
            say(TUI_ERROR, "still generating: Ctrl-C stops the reply");
        else
            chat_scroll = 0;
    }
    free(line);
    need_draw = 1;
}

/* ======================================================================= */
/* Keys                                                                     */
/* ======================================================================= */
static void focus_next(int dir)
{
    for (int k = 0; k < TUI_NPANE + 1; k++) {
        focus = (focus + dir + TUI_NPANE + 1) % (TUI_NPANE + 1);
        if (focus == 0 || !app.panes[focus - 1].hidden)
            break;
    }
    need_layout = 1;
}

static void key_chat(int is_key, wint_t ch)
{
    if (is_key) {
        int k = (int)ch;
        if (focus > 0 && app.panes[focus - 1].key &&
            (k == KEY_UP || k == KEY_DOWN || k == KEY_PPAGE || k == KEY_NPAGE) &&
            app.panes[focus - 1].key(&app.panes[focus - 1], &app, k)) {
            need_draw = 1;
            return;
        }
        switch (k) {
        case KEY_F(1): mode = MODE_HELP; help_scroll = 0; need_layout = 1; return;
        case KEY_F(2): open_runs(NULL); return;
        case KEY_F(3):
            if (focus > 0) {
                app.panes[focus - 1].hidden = 1;
                focus = 0;
                zoom = 0;
                need_layout = 1;
            }
            return;
        case KEY_F(4): zoom = !zoom; need_layout = 1; return;
        case KEY_F(5): change_threads(-1, -1); return;
        case KEY_F(6): change_threads(+1, -1); return;
        case KEY_F(7): toggle_prefetch(NULL); return;
        case KEY_F(8): cycle_expert_io(NULL); return;
        case KEY_F(9): change_temp(-0.1, -1); return;
        case KEY_F(10): change_temp(+0.1, -1); return;
        case KEY_BTAB: focus_next(-1); return;
        case KEY_PPAGE: chat_scroll += 10; need_draw = 1; return;
        case KEY_NPAGE: chat_scroll -= 10; need_draw = 1; return;
        case KEY_UP: rl_feed_str("\033[A"); return;
        case KEY_DOWN: rl_feed_str("\033[B"); return;
        case KEY_RIGHT: rl_feed_str("\033[C"); return;
        case KEY_LEFT: rl_feed_str("\033[D"); return;
        case KEY_HOME: rl_feed(1); return;      /* C-a */
        case KEY_END: rl_feed(5); return;       /* C-e */
        case KEY_DC:   /* C-d deletes the character under the cursor; on an
                        * empty line it would quit, which Delete must not */
            if (rl_line_buffer && rl_line_buffer[0])
                rl_feed(4);
            return;
        case KEY_BACKSPACE: rl_feed(127); return;
        case KEY_ENTER: rl_feed('\r'); return;
        default: return;
        }
    }
    if (ch == '\t') {
        focus_next(+1);
        return;
    }
    if (ch == 12) {   /* C-l */
        clearok(curscr, TRUE);
        need_draw = 1;
        return;
    }
    if (ch == 4 && rl_line_buffer && rl_line_buffer[0]) {
        rl_feed(4);
        return;
    }
    char mb[MB_LEN_MAX];
    mbstate_t ms;
    memset(&ms, 0, sizeof ms);
    size_t n = wcrtomb(mb, (wchar_t)ch, &ms);
    if (n == (size_t)-1) {
        if (ch < 256)
            rl_feed((int)ch);
        return;
    }
    for (size_t i = 0; i < n; i++)
        rl_feed((unsigned char)mb[i]);
}

static void handle_key(int is_key, wint_t ch)
{
    if (is_key && ch == KEY_RESIZE) {
        need_layout = 1;
        return;
    }
    need_draw = 1;
    if (mode == MODE_HELP) {
        int k = (int)ch;
        if ((!is_key && (ch == 'q' || ch == 27)) || (is_key && k == KEY_F(1))) {
            mode = MODE_CHAT;
            need_layout = 1;
        } else if (is_key && (k == KEY_DOWN || k == KEY_NPAGE))
            help_scroll += k == KEY_DOWN ? 1 : 10;
        else if (is_key && (k == KEY_UP || k == KEY_PPAGE)) {
            help_scroll -= k == KEY_UP ? 1 : 10;
            if (help_scroll < 0)
                help_scroll = 0;
        }
        return;
    }
    if (mode == MODE_RUNS) {
        int k = is_key ? (int)ch : (ch < 0x80 ? (int)ch : 0);
        if (!tui_runs_key(&app, k)) {
            tui_runs_close(&app);
            mode = MODE_CHAT;
            need_layout = 1;
        }
        return;
    }
    key_chat(is_key, ch);
}

/* ======================================================================= */
/* The frame                                                                */
/* ======================================================================= */
static void frame(void)
{
    uint64_t asked = tui_gen_frame_begin(app.gen);   /* before reading any state */
    if (need_layout)
        layout();
    /* The transcript first, then the snapshot: the generation thread moves
     * the state to prefill before it adds the prompt, so the status line
     * is never older than the chat pane (an "idle" beside a prompt that is
     * being answered would stand until the next frame). */
    if (mode == MODE_CHAT && w_body && body_fresh) {   /* the panes' gaps */
        werase(w_body);
        wnoutrefresh(w_body);
        body_fresh = 0;
    }
    if (mode == MODE_CHAT)
        draw_chat();
    tui_gen_snap(app.gen, &app.snap);
    update_panes();
    draw_status();
    if (mode == MODE_CHAT) {
        draw_panes();
        curs_set(1);
    } else if (w_body) {
        if (mode == MODE_HELP)
            draw_help();
        else
            tui_runs_draw(&app, w_body, getmaxy(w_body), getmaxx(w_body));
        curs_set(0);
    }
    if (w_input) {
        if (mode == MODE_CHAT) {
            rl_forced_update_display();
        } else {
            werase(w_input);
            tui_put(w_input, 0, 0, getmaxx(w_input),
                    mode == MODE_HELP ? "q: back to the chat"
                                      : "Up/Down select  Space mark  c compare  Enter open  "
                                        "f filter  r reload  q back");
            wnoutrefresh(w_input);
        }
    }
    static int again;
    if (need_layout && !again) {   /* the input grew or shrank: once more */
        again = 1;
        layout();
        frame();
        again = 0;
        return;
    }
    doupdate();
    need_draw = 0;
    tui_gen_frame_done(app.gen, asked);
}

/* ======================================================================= */
/* main                                                                     */
/* ======================================================================= */
static const int tui_opts[] = {
    UI_O_MODEL, UI_O_THREADS, UI_O_CTX, UI_O_SYSTEM, UI_O_N_PREDICT, UI_O_PREFETCH,
    UI_O_EXPERT_IO, UI_O_NO_MMAP, UI_O_TEMP, UI_O_TOP_K, UI_O_TOP_P, UI_O_MIN_P,
    UI_O_REPEAT_PENALTY, UI_O_REPEAT_LAST_N, UI_O_SEED, UI_O_IGNORE_EOS, UI_O_DB,
    UI_O_NO_LOG, UI_O_HELP, UI_O_VERSION, UI_O_END
};

static void usage(const ui_settings *d)
{
    if (d->version) {
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

/* The flags (ui_opt.c's table, as cflow run takes them) into the live
 * settings. */
static int parse_flags(int argc, char **argv, ui_settings *o, tui_settings *st)
{
    static const ui_optset set = { TUI_NAME, tui_opts, usage, NULL };
    int rc, first;
    ui_settings_default(o);
    o->n_predict = 0;   /* a reply runs to its end of text */
    if ((rc = ui_opts_parse(&set, argc, argv, o, &first)) >= 0)
        return rc;
    memset(st, 0, sizeof *st);
    st->threads = (int)o->threads;
    st->prefetch = o->prefetch;
    if (o->expert_io >= 0)
        snprintf(st->expert_io, sizeof st->expert_io, "%s",
                 eng_expert_io_name(o->expert_io));
    st->no_mmap = o->no_mmap;
    ui_settings_sampling(o, &st->sp);
    st->n_predict = o->n_predict;
    st->ignore_eos = o->ignore_eos;
    st->system = o->system ? strdup(o->system) : NULL;
    app.db = o->db;
    return -1;
}

int main(int argc, char **argv)
{
    ui_settings o;
    tui_settings st;
    int rc;

    setlocale(LC_ALL, "");
    if ((rc = parse_flags(argc, argv, &o, &st)) >= 0)
        return rc;
    const char *model = o.model;
    long n_ctx = o.n_ctx;
    int no_log = o.no_log;
    if (!model)
        model = ui_default_model();
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
        fprintf(stderr, "cflow-tui: needs a terminal (use 'cflow run' in scripts)\n");
        tui_settings_free(&st);
        return UI_EXIT_ERR;
    }
    if (pipe(wake_pipe)) {
        fprintf(stderr, "cflow-tui: pipe: %s\n", strerror(errno));
        return UI_EXIT_ERR;
    }
    for (int i = 0; i < 2; i++) {
        fcntl(wake_pipe[i], F_SETFL, fcntl(wake_pipe[i], F_GETFL) | O_NONBLOCK);
        fcntl(wake_pipe[i], F_SETFD, FD_CLOEXEC);
    }

    tui_chat_init(&app.chat);
    app.panes[0] = tui_pane_layers;
    app.panes[1] = tui_pane_overlap;
    app.panes[2] = tui_pane_counters;
    app.panes[3] = tui_pane_speed;
    const char *cs = nl_langinfo(CODESET);
    app.utf8 = cs && (!strcmp(cs, "UTF-8") || !strcmp(cs, "utf8"));

    tui_gen_cfg gc = { app.db, no_log, (uint32_t)n_ctx, &app.chat, wake_pipe[1] };
    if (tui_gen_start(&app.gen, &gc, &st)) {
        fprintf(stderr, "cflow-tui: cannot start the generation thread\n");
        return UI_EXIT_ERR;
    }
    /* The UI thread yields to the decoder: nice +5 for this thread only
     * (Linux applies nice per thread; the generation thread and the
     * engine's workers it starts keep the process's priority).  Drawing at
     * 10 Hz then never takes a core from a decode worker on a busy
     * machine. */
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 5)) {
        /* not fatal: the UI just runs at the normal priority */
    }
    if (model)
        tui_gen_post(app.gen, TUI_JOB_LOAD, model);
    else
        tui_chat_add(&app.chat, TUI_ERROR, "no model: give -m MODEL or /model PATH "
                     "(no default model is installed)");

    atexit(restore_terminal);
    install_signals();
    ESCDELAY = 25;
    if (!initscr()) {
        fprintf(stderr, "cflow-tui: cannot initialise the terminal\n");
        tui_gen_quit(app.gen);
        return UI_EXIT_ERR;
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
    const char *nc = getenv("NO_COLOR");
    if (has_colors() && !(nc && *nc)) {
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
    for (int i = 0; i < TUI_NPANE; i++)
        if (app.panes[i].init && app.panes[i].init(&app.panes[i], &app))
            app.panes[i].hidden = 1;
    refresh();
    rl_setup();

    double last_frame = 0;
    while (!quit_now) {
        int busy = tui_gen_busy(app.gen);
        double now = prof_now();
        int wait_ms = busy ? (int)((last_frame + 0.1 - now) * 1000) : 1000;
        if (wait_ms < 0)
            wait_ms = 0;
        if (need_draw || need_layout)
            wait_ms = 0;
        struct pollfd pf[2] = { { STDIN_FILENO, POLLIN, 0 }, { wake_pipe[0], POLLIN, 0 } };
        int r = poll(pf, 2, wait_ms);
        if (r < 0 && errno != EINTR)
            break;
        if (r > 0 && (pf[1].revents & POLLIN)) {
            char drain[64];
            while (read(wake_pipe[0], drain, sizeof drain) > 0) {
            }
            need_draw = 1;
        }
        if (got_term)
            break;
        if (got_int) {
            got_int = 0;
            if (tui_gen_busy(app.gen))
                tui_gen_interrupt(app.gen);
            else if (mode == MODE_CHAT) {
                rl_replace_line("", 0);
                rl_point = 0;
            }
            need_draw = 1;
        }
        wint_t ch;
        int kr;
        while ((kr = get_wch(&ch)) != ERR) {
            handle_key(kr == KEY_CODE_YES, ch);
            if (quit_now)
                break;
        }
        if (quit_now)
            break;
        pthread_mutex_lock(&app.chat.mu);
        uint64_t cv = app.chat.version;
        pthread_mutex_unlock(&app.chat.mu);
        if (cv != seen_chat) {
            seen_chat = cv;
            need_draw = 1;
        }
        now = prof_now();
        tui_snap sn;
        tui_gen_snap(app.gen, &sn);
        if (sn.version != seen_snap && !busy) {
            seen_snap = sn.version;
            need_draw = 1;
        }
        if (need_layout || need_draw || (busy && now - last_frame >= 0.1)) {
            frame();
            last_frame = now;
        }
    }

    tui_gen_quit(app.gen);
    tui_runs_close(&app);
    rl_teardown();
    for (int i = 0; i < TUI_NPANE; i++)
        if (app.panes[i].fini)
            app.panes[i].fini(&app.panes[i]);
    del(&w_status);
    del(&w_chat);
    del(&w_input);
    del(&w_body);
    for (int i = 0; i < TUI_NPANE; i++)
        del(&w_pane[i]);
    restore_terminal();
    tui_chat_free(&app.chat);
    tui_settings_free(&st);
    close(wake_pipe[0]);
    close(wake_pipe[1]);
    return UI_EXIT_OK;
}
