/*
 * tui_draw.c — the drawing helpers every part of cflow-tui's screen uses:
 * colour roles, UTF-8 width, clipped text with an ellipsis, bars and
 * human-readable byte counts.  They sit below the screen, the panes and
 * the run browser, which all include them through tui.h, and know nothing
 * of those callers.
 *
 * Text.  Strings are UTF-8; a cell is one column of the terminal (wcwidth).
 * tui_put draws at most w cells and marks text it had to cut with "…" in
 * its last cell ("~" outside UTF-8 locales), so a cut figure never reads as
 * a whole one.  Printable ASCII goes into the window as cells (tui_addn):
 * the fast path of every pane, see below.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include "ui/tui/tui.h"

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

size_t tui_next_char(const char *s, size_t n, int *cells)
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
        i += tui_next_char(s + i, n - i, &c);
        w += c;
    }
    return w;
}

/* Printable ASCII goes into the window as cells (waddchnstr), the rest
 * through waddnstr.  waddnstr decodes every byte with mbrtowc and wcwidth
 * and renders each character on its own: mbrtowc, wcwidth, the UTF-8
 * converter and waddnstr were a quarter of the UI thread's samples while
 * a reply streamed (perf), time taken from the decode workers whenever the
 * CPU has no idle core.  waddchnstr applies neither the window's
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

int tui_utf8;

int tui_fit(const char *s, size_t n, int w, size_t *bytes)
{
    size_t i = 0;
    int used = 0, c;
    while (i < n) {
        size_t k = tui_next_char(s + i, n - i, &c);
        if (used + c > w)
            break;
        used += c;
        i += k;
    }
    *bytes = i;
    return i < n;
}

void tui_put(WINDOW *win, int y, int x, int w, const char *s)
{
    size_t n = strlen(s), i;
    if (w <= 0 || wmove(win, y, x) != OK)
        return;
    if (!tui_fit(s, n, w, &i)) {
        tui_addn(win, s, i);
        return;
    }
    /* cut: as much as fits in w - 1 cells, then the mark in the last */
    tui_fit(s, n, w - 1, &i);
    tui_addn(win, s, i);
    waddstr(win, tui_utf8 ? "\xe2\x80\xa6" : "~");
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
