/*
 * tui_runs.c — the run browser of cflow-tui.
 *
 * Three views over the run log (its own read connection, opened when the
 * browser opens and closed when it closes, so the generation thread's
 * writer is never held up):
 *
 *   list     one line per run, newest at the bottom: id, start (UTC),
 *            model, program, threads/prefetch/expert-io, temperature,
 *            prefill and decode tok/s, GB/s; filtered by a model substring
 *   detail   one run: its settings and figures, then its per-layer picture
 *            (prof_log_layer_rows): seconds and bytes streamed per token and
 *            the analytic critical path of every layer
 *   compare  two marked runs side by side with the ratio B/A of each figure
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ui/tui/tui.h"
#include "ui/common/ui.h"

enum { V_LIST = 0, V_DETAIL, V_COMPARE };

struct tui_runs {
    prof_log       *log;
    prof_run_row   *rows;
    size_t          n;
    int             sel, top, view, scroll;
    int64_t         mark[2];
    char            filter[256];
    int             editing;     /* typing a filter */
    char            msg[600];
    prof_layer_row *lr;
    unsigned        nlr;
    prof_run_row    a, b;
};

static int reload(tui_runs *r, char *err, size_t errlen)
{
    prof_run_row *rows = NULL;
    size_t n = 0;
    if (prof_log_list(r->log, r->filter[0] ? r->filter : NULL, &rows, &n, err, errlen))
        return -1;
    free(r->rows);
    r->rows = rows;
    r->n = n;
    if (r->sel >= (int)n)
        r->sel = n ? (int)n - 1 : 0;
    return 0;
}

int tui_runs_open(tui_app *a, const char *filter, char *err, size_t errlen)
{
    tui_runs *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (ui_log_open(&r->log, a->db, PROF_LOG_CREATE, err, errlen)) {
        free(r);
        return -1;
    }
    if (filter)
        snprintf(r->filter, sizeof r->filter, "%s", filter);
    if (reload(r, err, errlen)) {
        prof_log_close(r->log);
        free(r);
        return -1;
    }
    r->sel = r->n ? (int)r->n - 1 : 0;   /* the newest */
    tui_runs_close(a);
    a->runs = r;
    return 0;
}

void tui_runs_close(tui_app *a)
{
    tui_runs *r = a->runs;
    if (!r)
        return;
    prof_log_close(r->log);
    free(r->rows);
    free(r->lr);
    free(r);
    a->runs = NULL;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static int is_marked(const tui_runs *r, int64_t id)
{
    return id && (r->mark[0] == id || r->mark[1] == id);
}

static void draw_list(tui_app *a, tui_runs *r, WINDOW *w, int h, int wd)
{
    char line[1024];
    snprintf(line, sizeof line, "run log: %zu run%s%s%s%s   %s", r->n, r->n == 1 ? "" : "s",
             r->filter[0] || r->editing ? ", model filter: " : "", r->filter,
             r->editing ? "_ (Enter: apply)" : "", r->msg);
    wattron(w, tui_attr(a, TUI_C_TITLE));
    tui_put(w, 0, 0, wd, line);
    snprintf(line, sizeof line, "  %5s %-19s %-18s %-10s %3s %-4s %-6s %5s %10s %10s %7s",
             "id", "started (UTC)", "model", "program", "thr", "pref", "io", "temp",
             "prefill/s", "decode/s", "GB/s");
    tui_put(w, 1, 0, wd, line);
    wattroff(w, tui_attr(a, TUI_C_TITLE));
    int rows = h - 2;
    if (rows < 1)
        return;
    if (r->sel < r->top)
        r->top = r->sel;
    if (r->sel >= r->top + rows)
        r->top = r->sel - rows + 1;
    if (!r->n)
        tui_put(w, 2, 2, wd - 2, "no runs yet (chat a little, or change the filter with f)");
    for (int i = 0; i < rows && r->top + i < (int)r->n; i++) {
        const prof_run_row *x = &r->rows[r->top + i];
        char started[20];
        snprintf(started, sizeof started, "%.19s", x->started);
        for (char *p = started; *p; p++)
            if (*p == 'T')
                *p = ' ';
        snprintf(line, sizeof line, "%c %5lld %-19s %-18.18s %-10.10s %3d %-4.4s %-6.6s %5.2f "
                 "%10.1f %10.1f %7.3f",
                 is_marked(r, x->id) ? '*' : ' ', (long long)x->id, started,
                 base_name(x->model), x->program, x->threads, x->prefetch, x->expert_io,
                 x->temp, x->prefill_tok_s, x->decode_tok_s, x->gb_s);
        attr_t at = r->top + i == r->sel ? A_REVERSE : A_NORMAL;
        if (is_marked(r, x->id))
            at |= tui_attr(a, TUI_C_MARK);
        wattron(w, at);
        tui_put(w, 2 + i, 0, wd, line);
        wattroff(w, at);
    }
}

static void kv(WINDOW *w, int *y, int h, int wd, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void kv(WINDOW *w, int *y, int h, int wd, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (*y >= 0 && *y < h)
        tui_put(w, *y, 0, wd, line);
    (*y)++;
}

static void draw_detail(tui_app *a, tui_runs *r, WINDOW *w, int h, int wd)
{
    const prof_run_row *x = &r->a;
    int y = -r->scroll;
    char b1[32], b2[32], b3[32], b4[32];
    wattron(w, tui_attr(a, TUI_C_TITLE));
    kv(w, &y, h, wd, "run %lld  (%s, %s)   q: back to the list", (long long)x->id, x->program,
       x->status);
    wattroff(w, tui_attr(a, TUI_C_TITLE));
    kv(w, &y, h, wd, "model    %s (%s, %s, %u layers)", x->model, x->arch, x->quant, x->n_layers);
    kv(w, &y, h, wd, "started  %s   ended %s", x->started, x->ended[0] ? x->ended : "-");
    kv(w, &y, h, wd, "machine  %s, %s, %d cores, %s, read bw %.1f GB/s", x->hostname,
       x->cpu_model, x->cores, x->isa, x->read_bw_gbs);
    kv(w, &y, h, wd, "settings threads %d, prefetch %s, expert-io %s, ctx %u, temp %.2f, "
       "top-k %d, top-p %.2f, seed %llu", x->threads, x->prefetch, x->expert_io, x->n_ctx,
       x->temp, x->top_k, x->top_p, (unsigned long long)x->seed);
    kv(w, &y, h, wd, "speed    prefill %llu tok %.1f tok/s, decode %llu tok %.1f tok/s, "
       "%.3f GB/s (%.2f%% of the machine)", (unsigned long long)x->n_prompt,
       x->prefill_tok_s, (unsigned long long)x->n_gen, x->decode_tok_s, x->gb_s,
       100.0 * x->bw_share);
    y++;
    wattron(w, tui_attr(a, TUI_C_TITLE));
    kv(w, &y, h, wd, "layer   attn ms  ffn ms  exp ms  wait ms   streamed/tok  critical  naive  binds");
    wattroff(w, tui_attr(a, TUI_C_TITLE));
    static const char *const bn[PROF_NST] = { "attention", "dense", "experts", "io" };
    for (unsigned i = 0; i < r->nlr; i++) {
        const prof_layer_row *l = &r->lr[i];
        double nt = l->n_tokens ? (double)l->n_tokens : 1;
        double bytes = 0;
        for (int k = 0; k < PROF_NST; k++)
            bytes += (double)l->bytes[k];
        tui_human(bytes / nt, b1, sizeof b1);
        tui_human(l->has_model ? l->model.critical : 0, b2, sizeof b2);
        tui_human(l->has_model ? l->model.naive : 0, b3, sizeof b3);
        snprintf(b4, sizeof b4, "%s", l->has_model ? bn[l->model.binding & 3] : "-");
        kv(w, &y, h, wd, "L%-4u %8.3f %7.3f %7.3f %8.3f   %12s %9s %6s  %s", l->layer,
           l->sec[0] / nt * 1e3, l->sec[1] / nt * 1e3, l->sec[2] / nt * 1e3,
           l->sec[3] / nt * 1e3, b1, b2, b3, b4);
    }
    if (!r->nlr)
        kv(w, &y, h, wd, "(no per-layer statistics recorded for this run)");
}

static void draw_compare(tui_app *a, tui_runs *r, WINDOW *w, int h, int wd)
{
    const prof_run_row *x = &r->a, *z = &r->b;
    int y = -r->scroll;
    wattron(w, tui_attr(a, TUI_C_TITLE));
    kv(w, &y, h, wd, "compare  A = run %lld   B = run %lld   q: back to the list",
       (long long)x->id, (long long)z->id);
    wattroff(w, tui_attr(a, TUI_C_TITLE));
    kv(w, &y, h, wd, "%-22s %14s %14s   %s", "", "A", "B", "B/A");
    /* the rows, units and precision of `cflow runs compare` */
    ui_cmp_row rows[UI_CMP_MAX];
    size_t n = ui_cmp_rows(x, z, rows, UI_CMP_MAX);
    for (size_t i = 0; i < n; i++)
        kv(w, &y, h, wd, "%-22s %14.14s %14.14s   %s", rows[i].what, rows[i].a, rows[i].b,
           rows[i].ratio);
}

void tui_runs_draw(tui_app *a, WINDOW *w, int h, int wd)
{
    tui_runs *r = a->runs;
    werase(w);
    if (r) {
        if (r->view == V_LIST)
            draw_list(a, r, w, h, wd);
        else if (r->view == V_DETAIL)
            draw_detail(a, r, w, h, wd);
        else
            draw_compare(a, r, w, h, wd);
    }
    wnoutrefresh(w);
}

static void open_detail(tui_runs *r)
{
    char err[512];
    if (!r->n)
        return;
    r->a = r->rows[r->sel];
    free(r->lr);
    r->lr = NULL;
    r->nlr = 0;
    if (prof_log_layer_rows(r->log, r->a.id, &r->lr, &r->nlr, err, sizeof err)) {
        snprintf(r->msg, sizeof r->msg, "%s", err);
        r->nlr = 0;
    }
    r->view = V_DETAIL;
    r->scroll = 0;
}

static void open_compare(tui_runs *r)
{
    char err[512];
    if (!r->mark[0] || !r->mark[1]) {
        snprintf(r->msg, sizeof r->msg, "mark two runs with Space first");
        return;
    }
    if (prof_log_get(r->log, r->mark[0], &r->a, err, sizeof err) ||
        prof_log_get(r->log, r->mark[1], &r->b, err, sizeof err)) {
        snprintf(r->msg, sizeof r->msg, "cannot read the marked runs");
        return;
    }
    r->view = V_COMPARE;
    r->scroll = 0;
}

int tui_runs_key(tui_app *a, int key)
{
    tui_runs *r = a->runs;
    char err[512];
    if (!r)
        return 0;
    if (r->editing) {
        size_t l = strlen(r->filter);
        if (key == '\r' || key == '\n' || key == KEY_ENTER) {
            r->editing = 0;
            if (reload(r, err, sizeof err))
                snprintf(r->msg, sizeof r->msg, "%s", err);
        } else if (key == 27) {
            r->editing = 0;
        } else if ((key == KEY_BACKSPACE || key == 127 || key == 8) && l) {
            r->filter[l - 1] = 0;
        } else if (key >= 32 && key < 127 && l + 1 < sizeof r->filter) {
            r->filter[l] = (char)key;
            r->filter[l + 1] = 0;
        }
        return 1;
    }
    if (r->view != V_LIST) {
        if (key == 'q' || key == 27 || key == KEY_BACKSPACE || key == 127) {
            r->view = V_LIST;
        } else if (key == KEY_DOWN || key == 'j' || key == KEY_NPAGE) {
            r->scroll += key == KEY_NPAGE ? 10 : 1;
        } else if (key == KEY_UP || key == 'k' || key == KEY_PPAGE) {
            r->scroll -= key == KEY_PPAGE ? 10 : 1;
            if (r->scroll < 0)
                r->scroll = 0;
        }
        return 1;
    }
    r->msg[0] = 0;
    switch (key) {
    case 'q': case 27: case KEY_F(2): return 0;
    case KEY_UP: case 'k': if (r->sel > 0) r->sel--; break;
    case KEY_DOWN: case 'j': if (r->sel + 1 < (int)r->n) r->sel++; break;
    case KEY_PPAGE: r->sel = r->sel > 10 ? r->sel - 10 : 0; break;
    case KEY_NPAGE: r->sel = r->sel + 10 < (int)r->n ? r->sel + 10 : (int)r->n - 1; break;
    case KEY_HOME: case 'g': r->sel = 0; break;
    case KEY_END: case 'G': r->sel = r->n ? (int)r->n - 1 : 0; break;
    case ' ': case 'm':
        if (r->n) {
            int64_t id = r->rows[r->sel].id;
            if (r->mark[0] == id)
                r->mark[0] = r->mark[1], r->mark[1] = 0;
            else if (r->mark[1] == id)
                r->mark[1] = 0;
            else if (!r->mark[0])
                r->mark[0] = id;
            else if (!r->mark[1])
                r->mark[1] = id;
            else   /* a third: it replaces the older mark */
                r->mark[0] = r->mark[1], r->mark[1] = id;
        }
        break;
    case 'c': open_compare(r); break;
    case '\r': case '\n': case KEY_ENTER: open_detail(r); break;
    case 'f': case '/': r->editing = 1; r->filter[0] = 0; break;
    case 'r':
        if (reload(r, err, sizeof err))
            snprintf(r->msg, sizeof r->msg, "%s", err);
        break;
    default: break;
    }
    if (r->sel < 0)
        r->sel = 0;
    return 1;
}
