/*
 * tui_input.c — cflow-tui's input: the keys of each screen mode and the
 * input line, GNU readline through its callback interface so the screen
 * keeps updating while the user types.
 *
 * Keys arrive through ncurses (wide characters).  The function keys run
 * the key table (tui_cmd.c); the keys the UI itself uses (scrolling,
 * focus, Ctrl-L) are handled here; everything else is fed to readline
 * byte by byte (rl_getc_function / rl_input_available_hook), and
 * readline's redisplay hook draws its line buffer into the input window.
 * A finished line is a /command (tui_command) or a prompt posted to the
 * generation thread.
 *
 * readline's callbacks carry no user pointer: the app they serve is kept
 * in `rl_app`, set once by tui_input_setup, and the window the line goes
 * into in `in_win`, which the screen sets after each layout (the screen
 * calls down into this file, never the other way).
 */
#include "config.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <wchar.h>

#include <readline/history.h>
#include <readline/readline.h>

#include "ui/common/ui.h"
#include "ui/tui/tui.h"

static tui_app *rl_app;
static WINDOW *in_win;   /* the screen's input window (tui_input_window) */

/* Bracketed paste.  The terminal is asked (ESC[?2004h in tui_input_setup,
 * ESC[?2004l when the terminal is given back) to frame pasted text with
 * ESC[200~ ... ESC[201~, which ncurses reports as the two key codes
 * defined here.  Between them every character is text: a newline is a
 * newline in the input line (as Alt-Enter makes), never Enter (a paste of
 * many lines was as many prompts, each after the first refused with
 * "still generating"), a tab a tab, other control characters and key
 * codes are dropped; the text is collected and inserted once at the end,
 * so readline redraws once, not per byte.  At most UI_PROMPT_MAX bytes
 * (the rest is dropped, and said).  A paste whose end marker never comes
 * (a flood of escape sequences holding a lone ESC[200~) ends once no
 * input has come for PASTE_IDLE_S (tui_input_tick): else every later key,
 * Enter included, would be text for good. */
#define PASTE_IDLE_S 1.0
#define KEY_PASTE_BEGIN (KEY_MAX + 1)
#define KEY_PASTE_END   (KEY_MAX + 2)
static char  *paste;
static size_t paste_n, paste_cap, paste_lost;
static int    pasting;
static double paste_last;     /* prof_now() of the paste's last byte */
static char hist_path[PATH_MAX + 16];
static int first_start;

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

static void input_draw(tui_app *a, WINDOW *win);

/* readline's redisplay, between frames too (a key typed): the input line
 * alone, when the screen shows one. */
static void rl_redisplay_cb(void)
{
    if (!in_win || rl_app->mode != TUI_MODE_CHAT) {
        rl_app->need_draw = 1;
        return;
    }
    input_draw(rl_app, in_win);
}

void tui_input_window(WINDOW *w) { in_win = w; }

/* Walk the input line as it is laid out in w cells ('\n' starts a row,
 * continuation rows begin after a two-cell mark, a character that does
 * not fit starts the next row): returns the rows it takes and the cursor's
 * row and column.  With win, also draws rows top .. top + input_h. */
static int input_walk(tui_app *a, WINDOW *win, int top, const char *prompt, const char *buf,
                      int w, int *cur_r, int *cur_c)
{
    size_t n = strlen(buf);
    int row = 0, col = tui_width(prompt, strlen(prompt));
    int shown = win && top == 0;
    if (shown) {
        wattron(win, tui_attr(a, TUI_C_USER));
        mvwaddstr(win, 0, 0, prompt);
        wattroff(win, tui_attr(a, TUI_C_USER));
    }
    *cur_r = 0;
    *cur_c = col;
    for (size_t i = 0; i <= n;) {
        if ((int)i == rl_point) {
            *cur_r = row;
            *cur_c = col;
        }
        if (i == n)
            break;
        int c;
        if (buf[i] == '\n') {
            row++;
            col = 2;
            i++;
            if (win && row >= top && row - top < a->input_h) {
                wattron(win, tui_attr(a, TUI_C_DIM));
                mvwaddstr(win, row - top, 0, a->utf8 ? "… " : ": ");
                wattroff(win, tui_attr(a, TUI_C_DIM));
            }
            continue;
        }
        size_t k = tui_next_char(buf + i, n - i, &c);
        if (col + c > w) {
            row++;
            col = 0;
        }
        if (win && row >= top && row - top < a->input_h)
            mvwaddnstr(win, row - top, col, buf + i, (int)k);
        col += c;
        i += k;
    }
    return row + 1;
}

static void input_draw(tui_app *a, WINDOW *win)
{
    int w = getmaxx(win), cur_r, cur_c;
    const char *prompt = rl_display_prompt ? rl_display_prompt : "";
    const char *buf = rl_line_buffer ? rl_line_buffer : "";
    int rows = input_walk(a, NULL, 0, prompt, buf, w, &cur_r, &cur_c);
    int want = rows > 5 ? 5 : rows, maxh = LINES / 3 > 0 ? LINES / 3 : 1;
    if (want > maxh)   /* the layout allows no more: asking again would loop */
        want = maxh;
    if (want != a->input_h) {
        a->input_h = want;
        a->need_layout = 1;
        a->need_draw = 1;
        return;
    }
    int top = cur_r >= a->input_h ? cur_r - a->input_h + 1 : 0;
    werase(win);
    input_walk(a, win, top, prompt, buf, w, &cur_r, &cur_c);
    if (cur_c >= w)
        cur_c = w - 1;
    wmove(win, cur_r - top, cur_c);
    wnoutrefresh(win);
    doupdate();
}

static int rl_newline_cmd(int count, int key)
{
    (void)count;
    (void)key;
    rl_insert_text("\n");
    return 0;
}

static void on_line(char *line)
{
    tui_app *a = rl_app;
    if (!line) {   /* Ctrl-D on an empty line */
        a->quit = 1;
        return;
    }
    char *s = line;
    while (*s == ' ' || *s == '\n')
        s++;
    if (*s) {
        add_history(line);
        if (s[0] == '/' && s[1] != '/')
            tui_command(a, s);
        else if (tui_gen_post(a->gen, TUI_JOB_CHAT, s[0] == '/' ? s + 1 : s))
            tui_say(a, TUI_ERROR, "still generating: Ctrl-C stops the reply");
        else
            a->chat_scroll = 0;
    }
    free(line);
    a->need_draw = 1;
}

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
    first_start = access(hist_path, F_OK) != 0;
    using_history();
    stifle_history(1000);
    read_history(hist_path);
}

int tui_input_first_start(void) { return first_start; }

void tui_input_setup(tui_app *a)
{
    rl_app = a;
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
    define_key("\033[200~", KEY_PASTE_BEGIN);
    define_key("\033[201~", KEY_PASTE_END);
    tui_input_paste_mode(1);
}

void tui_input_paste_mode(int on)
{
    /* write(2): also called from restore_terminal on a fatal signal */
    const char *seq = on ? "\033[?2004h" : "\033[?2004l";
    if (write(STDOUT_FILENO, seq, strlen(seq)) < 0) {
        /* a terminal that is gone needs no mode */
    }
}

void tui_input_teardown(void)
{
    tui_input_paste_mode(0);
    free(paste);
    paste = NULL;
    paste_n = paste_cap = 0;
    rl_callback_handler_remove();
    if (hist_path[0])
        write_history(hist_path);
    if (rl_outstream && rl_outstream != stdout) {
        fclose(rl_outstream);
        rl_outstream = NULL;
    }
    clear_history();
}

void tui_input_clear(void)
{
    rl_replace_line("", 0);
    rl_point = 0;
}

/* ======================================================================= */
/* Keys                                                                     */
/* ======================================================================= */
/* An ncurses key code in the chat: the table's, the UI's, or readline's. */
static void key_code(tui_app *a, int k)
{
    tui_pane *fp = a->focus > 0 ? &a->panes[a->focus - 1] : NULL;
    if (fp && fp->key && (k == KEY_UP || k == KEY_DOWN || k == KEY_PPAGE || k == KEY_NPAGE) &&
        fp->key(fp, a, k)) {
        a->need_draw = 1;
        return;
    }
    if (tui_key_run(a, k))
        return;
    switch (k) {
    case KEY_BTAB: tui_focus_next(a, -1); return;
    case KEY_PPAGE: a->chat_scroll += 10; a->need_draw = 1; return;
    case KEY_NPAGE: a->chat_scroll -= 10; a->need_draw = 1; return;
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

/* A character of a paste into the paste buffer (see above). */
static void paste_add(wint_t ch)
{
    char mb[MB_LEN_MAX];
    mbstate_t ms;
    size_t n;
    if (ch == '\r')
        ch = '\n';
    if (ch < 0x20 && ch != '\n' && ch != '\t')
        return;
    memset(&ms, 0, sizeof ms);
    if ((n = wcrtomb(mb, (wchar_t)ch, &ms)) == (size_t)-1) {
        if (ch >= 256)
            return;
        mb[0] = (char)ch;   /* a byte that is no character: as typed */
        n = 1;
    }
    if (paste_n + n + 1 > UI_PROMPT_MAX) {
        paste_lost += n;
        return;
    }
    if (paste_n + n + 1 > paste_cap) {
        size_t cap = paste_cap ? 2 * paste_cap : 4096;
        char *p = realloc(paste, cap);
        if (!p) {
            paste_lost += n;
            return;
        }
        paste = p;
        paste_cap = cap;
    }
    memcpy(paste + paste_n, mb, n);
    paste_n += n;
}

static void paste_end(tui_app *a)
{
    pasting = 0;
    if (paste_n) {
        paste[paste_n] = 0;
        rl_insert_text(paste);
        rl_redisplay_cb();
    }
    if (paste_lost)
        tui_say(a, TUI_ERROR, "the paste was cut at %u MiB (%zu bytes dropped)",
                UI_PROMPT_MAX >> 20, paste_lost);
    paste_n = paste_lost = 0;
}

static void key_chat(tui_app *a, int is_key, wint_t ch)
{
    if (is_key && ch == KEY_PASTE_BEGIN) {
        pasting = 1;
        paste_n = paste_lost = 0;
        paste_last = prof_now();
        return;
    }
    if (pasting) {
        paste_last = prof_now();
        if (is_key && ch == KEY_PASTE_END)
            paste_end(a);
        else if (!is_key)
            paste_add(ch);
        return;
    }
    if (is_key) {
        key_code(a, (int)ch);
        return;
    }
    if (ch == '\t') {
        tui_focus_next(a, +1);
        return;
    }
    if (ch == 12) {   /* C-l */
        clearok(curscr, TRUE);
        a->need_draw = 1;
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

static void key_help(tui_app *a, int is_key, wint_t ch)
{
    int k = (int)ch;
    if ((!is_key && (ch == 'q' || ch == 27)) || (is_key && k == KEY_F(1))) {
        a->mode = TUI_MODE_CHAT;
        a->need_layout = 1;
    } else if (is_key && (k == KEY_DOWN || k == KEY_NPAGE)) {
        a->help_scroll += k == KEY_DOWN ? 1 : 10;
    } else if (is_key && (k == KEY_UP || k == KEY_PPAGE)) {
        a->help_scroll -= k == KEY_UP ? 1 : 10;
        if (a->help_scroll < 0)
            a->help_scroll = 0;
    }
}

void tui_input_tick(tui_app *a)
{
    if (pasting && prof_now() - paste_last > PASTE_IDLE_S)
        paste_end(a);
}

void tui_input_key(tui_app *a, int is_key, wint_t ch)
{
    if (is_key && ch == KEY_RESIZE) {
        a->need_layout = 1;
        return;
    }
    a->need_draw = 1;
    if (is_key && ch == KEY_F(10)) {   /* F10 quits from every screen, as in htop */
        a->quit = 1;
        return;
    }
    if (a->mode == TUI_MODE_HELP) {
        key_help(a, is_key, ch);
        return;
    }
    if (a->mode == TUI_MODE_RUNS) {
        int k = is_key ? (int)ch : (ch < 0x80 ? (int)ch : 0);
        if (!tui_runs_key(a, k)) {
            tui_runs_close(a);
            a->mode = TUI_MODE_CHAT;
            a->need_layout = 1;
        }
        return;
    }
    key_chat(a, is_key, ch);
}
