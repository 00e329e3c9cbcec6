/*
 * tui_screen.c — the screen of cflow-tui: its windows, their layout and
 * one frame of drawing.
 *
 * Top to bottom: the status line (model, state, architecture and delays,
 * ISA, threads, prefetch, expert I/O, context use, temperature, run
 * number); the body — the chat pane and the four live panes (beside it
 * from 110 columns on, in a 2x2 grid below it on narrower terminals), or
 * the run browser, or the help; the input line (tui_input.c draws it);
 * and the key bar, htop's one line of function keys, built from the key
 * table (tui_cmd.c).
 *
 * The status line has more to say than 80 columns hold.  Each field has a
 * priority: when the line does not fit, the least important fields go
 * first (expert I/O, prefetch, ISA, architecture, temperature, then
 * threads), so the model, the state, the context use and the run
 * number stay; only then is the text cut, with an ellipsis.
 *
 * The chat pane follows the newest line unless the user scrolled back
 * (chat_scroll lines up from the bottom, 0: following); a resize keeps
 * following, since the layout is computed from the bottom each frame.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <readline/readline.h>

#include "ui/tui/tui.h"

/* The body window lies under the chat and the panes and shows only in
 * their gaps: it is blanked once after each layout, not every frame
 * (werase marks every line of it changed, and the frame then copied and
 * compared the whole screen once more). */
static int body_fresh;
static WINDOW *w_status, *w_chat, *w_input, *w_body, *w_keys, *w_pane[TUI_NPANE];

/* ======================================================================= */
/* Layout                                                                   */
/* ======================================================================= */
static void del(WINDOW **w)
{
    if (*w)
        delwin(*w);
    *w = NULL;
}

void tui_screen_free(void)
{
    del(&w_status);
    del(&w_chat);
    del(&w_input);
    del(&w_body);
    del(&w_keys);
    for (int i = 0; i < TUI_NPANE; i++)
        del(&w_pane[i]);
    tui_input_window(NULL);
}

/* The live panes in a 2x2 grid (or fewer) in rows y .. y+ph of cols. */
static void layout_grid(int y, int ph, int cols, const int *vis, int nv)
{
    int per_row = nv > 1 ? 2 : 1, nrow = (nv + per_row - 1) / per_row;
    for (int r = 0, k = 0; r < nrow; r++) {
        int h = ph / nrow + (r < ph % nrow ? 1 : 0);
        int inrow = (k + per_row <= nv) ? per_row : nv - k;
        for (int c = 0; c < inrow; c++, k++) {
            int w = cols / inrow + (c < cols % inrow ? 1 : 0);
            int x = c * (cols / inrow) + (c < cols % inrow ? c : cols % inrow);
            w_pane[vis[k]] = newwin(h, w, y, x);
        }
        y += h;
    }
}

static void layout(tui_app *a)
{
    int rows, cols;
    getmaxyx(stdscr, rows, cols);
    tui_screen_free();
    a->need_layout = 0;
    if (rows < 6 || cols < 20)
        return;
    int keys_h = rows >= 10 ? 1 : 0;
    if (a->input_h > rows / 3)
        a->input_h = rows / 3 > 0 ? rows / 3 : 1;
    int body_y = 1, body_h = rows - 1 - a->input_h - keys_h;
    w_status = newwin(1, cols, 0, 0);
    w_input = newwin(a->input_h, cols, rows - a->input_h - keys_h, 0);
    tui_input_window(w_input);
    if (keys_h)
        w_keys = newwin(1, cols, rows - 1, 0);
    w_body = newwin(body_h, cols, body_y, 0);
    body_fresh = 1;
    int vis[TUI_NPANE], nv = 0;
    for (int i = 0; i < TUI_NPANE; i++)
        if (!a->panes[i].hidden)
            vis[nv++] = i;
    if (a->mode != TUI_MODE_CHAT) {
        /* the body window serves the browser and the help */
    } else if (a->zoom && a->focus > 0 && !a->panes[a->focus - 1].hidden) {
        w_pane[a->focus - 1] = newwin(body_h, cols, body_y, 0);
    } else if (a->zoom || nv == 0 || body_h < 8) {
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
        w_chat = newwin(body_h - ph, cols, body_y, 0);
        layout_grid(body_y + body_h - ph, ph, cols, vis, nv);
    }
    a->need_draw = 1;
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

enum { NSEG = 12 };
typedef struct seg {
    char text[1100];
    int  prio;   /* 0 always kept; higher goes first when the line is short */
} seg;

static int status_segs(const tui_snap *s, seg *g)
{
    static const char *const state[] = { "idle", "loading", "prefill", "decoding" };
    int n = 0;
#define SEG(p, ...) (g[n].prio = (p), snprintf(g[n].text, sizeof g[n].text, __VA_ARGS__), n++)
    if (s->loaded)
        SEG(0, "%s", base_name(s->model));
    else
        SEG(0, "%s", TUI_NAME);
    SEG(0, "%s", state[s->state & 3]);
    if (s->loaded)
        SEG(4, "%s d%u/e%u", s->arch, s->hp.dense_delay, s->hp.expert_delay);
    else
        SEG(0, "no model (/model PATH)");
    if (s->loaded)
        SEG(5, "%s", s->isa);
    SEG(2, "threads %d", s->threads);
    SEG(6, "prefetch %s", s->prefetch ? "on" : "off");
    /* what --expert-io auto chose is worth more room than a mode named */
    if (s->expert_io_auto && s->hp.n_experts)
        SEG(3, "expert-io %s (auto)", s->expert_io);
    else
        SEG(6, "expert-io %s", s->expert_io);
    if (s->loaded) {
        SEG(0, "ctx %u/%u", s->n_past, s->n_ctx);
        SEG(3, "temp %.2f", (double)s->sp.temp);
    }
    if (s->run_id)
        SEG(1, "run %lld", (long long)s->run_id);
#undef SEG
    return n;
}

static void draw_status(tui_app *a)
{
    if (!w_status)
        return;
    seg g[NSEG];
    int n = status_segs(&a->snap, g), cols = getmaxx(w_status);
    int keep[NSEG];
    for (int i = 0; i < n; i++)
        keep[i] = 1;
    /* " a | b | c": drop the least important field (the rightmost of
     * equals) until the line fits */
    for (;;) {
        int width = -2, drop = -1;
        for (int i = 0; i < n; i++)
            if (keep[i]) {
                width += 3 + tui_width(g[i].text, strlen(g[i].text));
                if (g[i].prio > 0 && (drop < 0 || g[i].prio >= g[drop].prio))
                    drop = i;
            }
        if (width <= cols || drop < 0)
            break;
        keep[drop] = 0;
    }
    char line[2048];
    size_t o = 0;
    for (int i = 0; i < n && o < sizeof line; i++)
        if (keep[i])
            o += (size_t)snprintf(line + o, sizeof line - o, "%s%s", o ? " | " : " ",
                                  g[i].text);
    werase(w_status);
    wbkgd(w_status, tui_attr(a, TUI_C_STATUS));
    tui_put(w_status, 0, 0, cols, line);
    wnoutrefresh(w_status);
}

/* htop's key bar: "F1Help F2Runs ... F10Quit", the key plain and its label
 * in the status colour, from the key table; labels that do not fit go. */
static void draw_keys(tui_app *a)
{
    if (!w_keys)
        return;
    int cols = getmaxx(w_keys), x = 0;
    werase(w_keys);
    for (size_t i = 0; i < tui_n_keys; i++) {
        const tui_key *k = &tui_keys[i];
        if (!k->bar)
            continue;
        int kw = (int)strlen(k->name), lw = (int)strlen(k->bar);
        if (x + kw + lw > cols)
            break;
        mvwaddstr(w_keys, 0, x, k->name);
        wattron(w_keys, tui_attr(a, TUI_C_STATUS));
        waddstr(w_keys, k->bar);
        wattroff(w_keys, tui_attr(a, TUI_C_STATUS));
        x += kw + lw + 1;
    }
    wnoutrefresh(w_keys);
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
            size_t b = tui_next_char(s + i, n - i, &c);
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

static const char *const chat_tag[] = { "> ", "", "-- ", "error: " };

/* Lay out only the tail the pane shows: entries, and inside an entry its
 * paragraphs ('\n'-separated, wrapped independently), from the end back
 * until need lines are there.  A long conversation costs a frame no more
 * than a short one.  The lines come back first to last (malloc'd, *nl of
 * them; *all when that is the whole transcript).  Chat lock held. */
static cline *chat_tail(const tui_chat *c, int iw, size_t need, size_t *nl, int *all)
{
    size_t cap = need + 64, nr = 0;
    cline *rev = malloc(cap * sizeof *rev);   /* the lines, last first */
    for (size_t i = c->n; rev && nr < need && i-- > 0;) {
        const tui_entry *e = &c->e[i];
        int tl = (int)strlen(chat_tag[e->role & 3]);
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
    *all = nr < need;
    *nl = 0;
    cline *lines = calloc(nr + 1, sizeof *lines);
    if (lines && rev) {
        for (size_t j = 0; j < nr; j++)
            lines[j] = rev[nr - 1 - j];
        *nl = nr;
    }
    free(rev);
    return lines;
}

/* One laid-out line at row y, column x. */
static void chat_line(tui_app *a, const cline *l, int y, int x)
{
    const tui_entry *e = &a->chat.e[l->entry];
    int role = l->role == TUI_USER ? TUI_C_USER : l->role == TUI_NOTE ? TUI_C_NOTE
             : l->role == TUI_ERROR ? TUI_C_ERROR : TUI_C_NORMAL;
    const char *t = chat_tag[l->role & 3];
    int tl = (int)strlen(t);
    wattron(w_chat, tui_attr(a, role));
    if (l->first)
        mvwaddstr(w_chat, y, x, t);
    wmove(w_chat, y, x + tl);
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
    wattroff(w_chat, tui_attr(a, role));
}

static void draw_chat(tui_app *a)
{
    if (!w_chat)
        return;
    int h, w;
    getmaxyx(w_chat, h, w);
    werase(w_chat);
    int boxed = a->focus == 0 && !a->zoom;
    int iw = w - 2, ih = h - (boxed ? 2 : 0), y0 = boxed ? 1 : 0;
    if (boxed) {
        wattron(w_chat, tui_attr(a, TUI_C_TITLE));
        box(w_chat, 0, 0);
        wattroff(w_chat, tui_attr(a, TUI_C_TITLE));
    } else {
        iw = w - 1;
    }
    if (iw < 4 || ih < 1) {
        wnoutrefresh(w_chat);
        return;
    }
    tui_chat *c = &a->chat;
    pthread_mutex_lock(&c->mu);
    size_t need = (size_t)ih + (size_t)(a->chat_scroll > 0 ? a->chat_scroll : 0) + 1, nl;
    int all;
    cline *lines = chat_tail(c, iw, need, &nl, &all);
    /* the whole transcript laid out: scrolling stops at its top */
    int max_scroll = all ? ((int)nl > ih ? (int)nl - ih : 0) : a->chat_scroll;
    if (a->chat_scroll > max_scroll)
        a->chat_scroll = max_scroll;
    if (a->chat_scroll < 0)
        a->chat_scroll = 0;
    long first = (long)nl - ih - a->chat_scroll;
    if (first < 0)
        first = 0;
    for (int r = 0; r < ih && lines && (size_t)(first + r) < nl; r++)
        if (lines[first + r].role >= 0)
            chat_line(a, &lines[first + r], y0 + r, boxed ? 1 : 0);
    pthread_mutex_unlock(&c->mu);
    if (a->chat_scroll > 0) {
        char more[48];
        snprintf(more, sizeof more, "[%d more below: PgDn]", a->chat_scroll);
        wattron(w_chat, tui_attr(a, TUI_C_MARK));
        mvwaddstr(w_chat, h - 1, w - (int)strlen(more) - 2, more);
        wattroff(w_chat, tui_attr(a, TUI_C_MARK));
    }
    free(lines);
    wnoutrefresh(w_chat);
}

/* ======================================================================= */
/* Panes and help                                                           */
/* ======================================================================= */
static void update_panes(tui_app *a)
{
    prof *p = tui_gen_prof_lock(a->gen);
    for (int i = 0; i < TUI_NPANE; i++)
        if (a->panes[i].update)
            a->panes[i].update(&a->panes[i], a, p);
    tui_gen_prof_unlock(a->gen);
}

static void draw_panes(tui_app *a)
{
    for (int i = 0; i < TUI_NPANE; i++) {
        WINDOW *w = w_pane[i];
        if (!w)
            continue;
        int h, wd;
        getmaxyx(w, h, wd);
        werase(w);
        int foc = a->focus == i + 1;
        attr_t at = tui_attr(a, foc ? TUI_C_MARK : TUI_C_DIM);
        wattron(w, at);
        box(w, 0, 0);
        wattroff(w, at);
        char title[96];
        snprintf(title, sizeof title, " %d %s%s ", i + 1, a->panes[i].title,
                 foc ? (a->zoom ? " [zoomed]" : " [focus]") : "");
        wattron(w, tui_attr(a, TUI_C_TITLE));
        tui_put(w, 0, 2, wd - 4, title);
        wattroff(w, tui_attr(a, TUI_C_TITLE));
        if (h > 2 && wd > 4) {
            WINDOW *in = derwin(w, h - 2, wd - 2, 1, 1);
            if (in) {
                a->panes[i].draw(&a->panes[i], a, in, h - 2, wd - 2);
                delwin(in);
            }
        }
        wnoutrefresh(w);
    }
}

static void draw_help(tui_app *a)
{
    int h, w;
    getmaxyx(w_body, h, w);
    werase(w_body);
    char buf[256];
    int n = 0;
    while (tui_help_line((size_t)n, buf, sizeof buf))
        n++;
    if (a->help_scroll > n - h)
        a->help_scroll = n - h > 0 ? n - h : 0;
    for (int r = 0; r < h && a->help_scroll + r < n; r++) {
        const char *t = tui_help_line((size_t)(a->help_scroll + r), buf, sizeof buf);
        attr_t at = (t[0] && t[0] != ' ') ? tui_attr(a, TUI_C_TITLE) : A_NORMAL;
        wattron(w_body, at);
        tui_put(w_body, r, 1, w - 2, t);
        wattroff(w_body, at);
    }
    wnoutrefresh(w_body);
}

/* ======================================================================= */
/* The frame                                                                */
/* ======================================================================= */
static void draw_input(tui_app *a)
{
    if (!w_input)
        return;
    if (a->mode == TUI_MODE_CHAT) {
        rl_forced_update_display();   /* readline draws into tui_input_window's */
        return;
    }
    werase(w_input);
    tui_put(w_input, 0, 0, getmaxx(w_input),
            a->mode == TUI_MODE_HELP ? "q: back to the chat"
                                     : "Up/Down select  Space mark  c compare  Enter open  "
                                       "f filter  r reload  q back");
    wnoutrefresh(w_input);
}

void tui_screen_frame(tui_app *a)
{
    uint64_t asked = tui_gen_frame_begin(a->gen);   /* before reading any state */
    if (a->need_layout)
        layout(a);
    /* The transcript first, then the snapshot: the generation thread moves
     * the state to prefill before it adds the prompt, so the status line
     * is never older than the chat pane (an "idle" beside a prompt that is
     * being answered would stand until the next frame). */
    if (a->mode == TUI_MODE_CHAT && w_body && body_fresh) {   /* the panes' gaps */
        werase(w_body);
        wnoutrefresh(w_body);
        body_fresh = 0;
    }
    if (a->mode == TUI_MODE_CHAT)
        draw_chat(a);
    tui_gen_snap(a->gen, &a->snap);
    update_panes(a);
    draw_status(a);
    draw_keys(a);
    if (a->mode == TUI_MODE_CHAT) {
        draw_panes(a);
        curs_set(1);
    } else if (w_body) {
        if (a->mode == TUI_MODE_HELP)
            draw_help(a);
        else
            tui_runs_draw(a, w_body, getmaxy(w_body), getmaxx(w_body));
        curs_set(0);
    }
    draw_input(a);
    static int again;
    if (a->need_layout && !again) {   /* the input grew or shrank: once more */
        again = 1;
        layout(a);
        tui_screen_frame(a);
        again = 0;
        return;
    }
    doupdate();
    a->need_draw = 0;
    tui_gen_frame_done(a->gen, asked);
}
