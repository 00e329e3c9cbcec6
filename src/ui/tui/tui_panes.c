/*
 * tui_panes.c — the four live panes of cflow-tui.
 *
 * Each pane is a table of functions (tui.h): update copies what it shows
 * from src/prof — the ring of per-token records (prof_ring_read), the
 * per-layer atomics (prof_layer_seconds, prof_layer_streamed), the
 * analytic model (prof_get_layer_model), counter availability — and the
 * run totals the generation thread snapshots (prof_totals_get); draw
 * paints from that copy.  Panes only divide what prof measured by the
 * token counts prof reports; they never measure anything themselves.
 *
 *   layers    per layer: weight bytes streamed per token (measured, bar)
 *             against the analytic critical-path bytes (tick), and the
 *             stream that binds the critical path
 *   overlap   the report's overlap model as prof_io_get derives it: compute
 *             C, expert read time IO, the stall, the share of the read time
 *             hidden behind compute and the predicted staged speedup; the
 *             expert I/O mode and prefetch
 *   counters  hardware counters or why they are unavailable; software
 *             counters, per token
 *   speed     a sparkline of decode tok/s per token, prefill and decode
 *             tok/s, GB/s of weights and the share of the machine's read
 *             bandwidth
 *
 * "The report" (with its section numbers) is the Pipeline-Native
 * Transformers report.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ui/tui/tui.h"
#include "ui/common/ui.h"

#define MAX_LAYERS 256

/* ======================================================================= */
/* layers                                                                   */
/* ======================================================================= */
typedef struct layers_st {
    unsigned         n;
    int              has[MAX_LAYERS];
    prof_layer_model m[MAX_LAYERS];
    uint64_t         bytes[MAX_LAYERS][PROF_NST];
    double           sec[MAX_LAYERS][PROF_NST];
    uint64_t         ntok;   /* the decode tokens bytes and sec cover */
} layers_st;

static int layers_init(tui_pane *pn, tui_app *a)
{
    (void)a;
    pn->st = calloc(1, sizeof(layers_st));
    return pn->st ? 0 : -1;
}

static void layers_update(tui_pane *pn, tui_app *a, prof *p)
{
    layers_st *s = pn->st;
    if (!p) {
        s->n = 0;
        return;
    }
    /* the sums and their token count as the generation thread read them
     * together (not the live atomics: they run ahead of any count) */
    s->n = tui_gen_layers(a->gen, s->bytes, s->sec, NULL, NULL, MAX_LAYERS, &s->ntok);
    for (unsigned l = 0; l < s->n; l++)
        s->has[l] = prof_get_layer_model(p, l, &s->m[l]);
}

static const char bind_letter[PROF_NST] = { 'A', 'D', 'E', 'W' };

static void layers_draw(tui_pane *pn, tui_app *a, WINDOW *w, int h, int wd)
{
    layers_st *s = pn->st;
    uint64_t ntok = s->ntok;   /* the decode tokens of the sums */
    char b1[32], b2[32], line[256];
    if (!s->n) {
        tui_put(w, 0, 0, wd, "no model");
        return;
    }
    snprintf(line, sizeof line, "streamed/token (bar) vs critical path (|); %llu decode tok",
             (unsigned long long)ntok);
    int rows = h - 1;
    if (pn->scroll > (int)s->n - rows)
        pn->scroll = (int)s->n - rows > 0 ? (int)s->n - rows : 0;
    if ((int)s->n > rows) {   /* not all layers fit: say which show */
        char all[sizeof line + 64];
        int last = pn->scroll + rows < (int)s->n ? pn->scroll + rows - 1 : (int)s->n - 1;
        snprintf(all, sizeof all, "L%d-%d of %u (focus, Up/Down); %s", pn->scroll, last, s->n,
                 line);
        memcpy(line, all, sizeof line - 1);
        line[sizeof line - 1] = 0;
    }
    wattron(w, tui_attr(a, TUI_C_DIM));
    tui_put(w, 0, 0, wd, line);
    wattroff(w, tui_attr(a, TUI_C_DIM));
    /* the scale: the largest of measured and analytic bytes */
    double max = 1;
    for (unsigned l = 0; l < s->n; l++) {
        double m = 0;
        for (int k = 0; k < PROF_NST; k++)
            m += ntok ? (double)s->bytes[l][k] / (double)ntok : 0;
        if (m > max)
            max = m;
        if (s->has[l] && s->m[l].naive > max)
            max = s->m[l].naive;
    }
    for (int r = 0; r < rows && pn->scroll + r < (int)s->n; r++) {
        unsigned l = (unsigned)(pn->scroll + r);
        double meas = 0, ms = 0;
        for (int k = 0; k < PROF_NST; k++) {
            meas += ntok ? (double)s->bytes[l][k] / (double)ntok : 0;
            ms += ntok ? s->sec[l][k] / (double)ntok * 1e3 : 0;
        }
        tui_human(meas, b1, sizeof b1);
        if (s->has[l])
            tui_human(s->m[l].critical, b2, sizeof b2);
        else
            snprintf(b2, sizeof b2, "-");
        char bind = s->has[l] ? bind_letter[s->m[l].binding & 3] : '?';
        snprintf(line, sizeof line, "L%-2u %6s %6s %5.3fms %c", l, b1, b2, ms, bind);
        int tw = (int)strlen(line);
        int bw = wd - tw - 2;
        if (bw < 4) {   /* too narrow for a bar: numbers only */
            tui_put(w, 1 + r, 0, wd, line);
            continue;
        }
        int y = 1 + r;
        char label[8];
        snprintf(label, sizeof label, "L%-2u ", l);
        tui_put(w, y, 0, 4, label);
        tui_bar(a, w, y, 4, bw, meas / max, TUI_C_BAR);
        if (s->has[l]) {
            int x = 4 + (int)(s->m[l].critical / max * bw + 0.5);
            if (x >= 4 + bw)
                x = 4 + bw - 1;
            wattron(w, tui_attr(a, TUI_C_MARK));
            mvwaddstr(w, y, x, "|");
            wattroff(w, tui_attr(a, TUI_C_MARK));
        }
        tui_put(w, y, 4 + bw + 1, wd - (4 + bw + 1), line + 4);
        if (s->has[l]) {
            wattron(w, tui_attr(a, TUI_C_MARK));
            mvwaddch(w, y, 4 + bw + 1 + tw - 5, (chtype)bind);
            wattroff(w, tui_attr(a, TUI_C_MARK));
        }
    }
}

static int scroll_key(tui_pane *pn, tui_app *a, int key)
{
    (void)a;
    if (key == KEY_UP || key == KEY_PPAGE) {
        pn->scroll -= key == KEY_UP ? 1 : 8;
        if (pn->scroll < 0)
            pn->scroll = 0;
        return 1;
    }
    if (key == KEY_DOWN || key == KEY_NPAGE) {
        pn->scroll += key == KEY_DOWN ? 1 : 8;
        return 1;
    }
    return 0;
}

static void free_st(tui_pane *pn)
{
    free(pn->st);
    pn->st = NULL;
}

const tui_pane tui_pane_layers = {
    "layers", "layers: critical-path bytes", layers_init, layers_update, layers_draw,
    scroll_key, free_st, NULL, 0, 0
};

/* ======================================================================= */
/* overlap                                                                  */
/* ======================================================================= */
typedef struct overlap_st {
    unsigned    n;
    prof_io_fig all, l[MAX_LAYERS];
    uint64_t    ntok;   /* the decode tokens the figures cover */
} overlap_st;

static int overlap_init(tui_pane *pn, tui_app *a)
{
    (void)a;
    pn->st = calloc(1, sizeof(overlap_st));
    return pn->st ? 0 : -1;
}

static void overlap_update(tui_pane *pn, tui_app *a, prof *p)
{
    overlap_st *s = pn->st;
    s->n = 0;
    if (!p)
        return;
    s->n = tui_gen_layers(a->gen, NULL, NULL, s->l, &s->all, MAX_LAYERS, &s->ntok);
}

static void overlap_draw(tui_pane *pn, tui_app *a, WINDOW *w, int h, int wd)
{
    overlap_st *s = pn->st;
    const tui_snap *sn = &a->snap;
    const prof_totals *t = &sn->tot;
    const prof_io_fig *f = &s->all;
    /* the figures (prof_io_get, read with the count) cover decode tokens */
    uint64_t ntok = s->ntok;
    double per = ntok ? 1e3 / (double)ntok : 0;   /* seconds -> ms per token */
    char line[256], b[32];
    int y = 0;
    snprintf(line, sizeof line, "mode %s%s, prefetch %s, look-ahead %s, %u experts top-%u",
             sn->expert_io,
             sn->expert_direct > 0 ? " (O_DIRECT)" : sn->expert_direct == 0 ? " (buffered)" : "",
             sn->prefetch ? "on" : "off", ui_ahead_text(sn->expert_ahead, b, sizeof b),
             sn->hp.n_experts, sn->hp.top_k);
    tui_put(w, y++, 0, wd, line);
    if (y >= h)
        return;
    snprintf(line, sizeof line, "compute %.3f ms/tok, expert compute %.3f ms/tok", f->c_s * per,
             t->n_gen ? t->dec_st[PROF_ST_EXPERTS] * 1e3 / (double)t->n_gen : 0.0);
    tui_put(w, y++, 0, wd, line);
    if (y >= h)
        return;
    tui_human(ntok ? (double)f->bytes / (double)ntok : 0, b, sizeof b);
    snprintf(line, sizeof line, "I/O %.3f ms/tok, stall %.3f ms/tok, read %s/tok", f->io_s * per,
             f->stall_s * per, b);
    tui_put(w, y++, 0, wd, line);
    if (y >= h)
        return;
    if (f->bytes)
        snprintf(line, sizeof line, "hidden %.1f%% of the I/O; staged model %.2fx",
                 100.0 * f->hidden, f->pred);
    else
        snprintf(line, sizeof line, "hidden: no expert reads (%s reads in place)",
                 sn->hp.n_experts ? eng_expert_io_name(ENG_XIO_MMAP) : "a dense model");
    wattron(w, tui_attr(a, TUI_C_MARK));
    tui_put(w, y++, 0, wd, line);
    wattroff(w, tui_attr(a, TUI_C_MARK));
    /* the streaming figures (ui_xio.c: hit rate, bytes per token, GB/s,
     * queue depth, the storage-bound limit, look-ahead), as cflow run
     * prints them */
    char xl[UI_XIO_LINES][160];
    int nx = ui_xio_lines(&sn->xio, sn->cache_bytes, sn->routing[0] ? sn->routing : NULL,
                          xl);
    for (int i = 0; i < nx && y < h; i++)
        tui_put(w, y++, 0, wd, xl[i]);
    /* per layer: compute (bar), then I/O time in the second colour; the
     * numbers are I/O and stall in ms per token */
    double max = 1e-12;
    for (unsigned l = 0; l < s->n; l++)
        if (s->l[l].c_s + s->l[l].io_s > max)
            max = s->l[l].c_s + s->l[l].io_s;
    for (unsigned l = 0; l < s->n && y < h; l++, y++) {
        int bw = wd - 24;
        snprintf(line, sizeof line, "L%-2u", l);
        tui_put(w, y, 0, 4, line);
        if (bw > 2) {
            tui_bar(a, w, y, 4, bw, s->l[l].c_s / max, TUI_C_BAR);
            int cx = (int)(s->l[l].c_s / max * bw + 0.5), ww = bw - cx;
            if (ww > 0)   /* the I/O continues the compute bar */
                tui_bar(a, w, y, 4 + cx, ww, s->l[l].io_s / max * bw / ww, TUI_C_BAR2);
        }
        snprintf(line, sizeof line, "io %.3f st %.3f", s->l[l].io_s * per, s->l[l].stall_s * per);
        tui_put(w, y, wd - 19 > 4 ? wd - 19 : 4, 19, line);
    }
}

const tui_pane tui_pane_overlap = {
    "overlap", "expert fetch: compute vs I/O", overlap_init, overlap_update, overlap_draw,
    NULL, free_st, NULL, 0, 0
};

/* ======================================================================= */
/* counters                                                                 */
/* ======================================================================= */
typedef struct counters_st {
    int  avail[PROF_NEV];
    char reason[PROF_NEV][160];
    int  have;
} counters_st;

static int counters_init(tui_pane *pn, tui_app *a)
{
    (void)a;
    pn->st = calloc(1, sizeof(counters_st));
    return pn->st ? 0 : -1;
}

static void counters_update(tui_pane *pn, tui_app *a, prof *p)
{
    counters_st *s = pn->st;
    (void)a;
    s->have = p != NULL;
    if (!p)
        return;
    for (int e = 0; e < PROF_NEV; e++) {
        s->avail[e] = prof_ev_available(p, e);
        snprintf(s->reason[e], sizeof s->reason[e], "%s", prof_ev_reason(p, e));
    }
}

static void counters_draw(tui_pane *pn, tui_app *a, WINDOW *w, int h, int wd)
{
    counters_st *s = pn->st;
    const prof_totals *t = &a->snap.tot;
    uint64_t ntok = t->n_prompt + t->n_gen;
    char line[512];
    int y = 0;
    if (!s->have) {
        tui_put(w, 0, 0, wd, "no model");
        return;
    }
    /* software first (they work everywhere), then hardware */
    static const int order[PROF_NEV] = {
        PROF_EV_TASK_CLOCK, PROF_EV_PAGE_FAULTS, PROF_EV_MAJOR_FAULTS, PROF_EV_MINOR_FAULTS,
        PROF_EV_CTX_SWITCHES, PROF_EV_CPU_MIGRATIONS, PROF_EV_CYCLES, PROF_EV_INSTRUCTIONS,
        PROF_EV_L1D_READ_MISS, PROF_EV_LLC_READ_MISS, PROF_EV_DTLB_READ_MISS
    };
    /* two columns where a line (31 cells) and a gap fit twice */
    int half = wd >= 64;
    int col = 0;
    for (int k = 0; k < PROF_NEV && y < h; k++) {
        int e = order[k];
        if (!s->avail[e] || t->ev[e] < 0)
            continue;
        double per = ntok ? (double)t->ev[e] / (double)ntok : 0;
        if (e == PROF_EV_TASK_CLOCK)
            snprintf(line, sizeof line, "%-16s %7.3f ms/tok", prof_ev_name(e), per / 1e6);
        else
            snprintf(line, sizeof line, "%-16s %9.2f /tok", prof_ev_name(e), per);
        tui_put(w, y, col, half ? wd / 2 : wd, line);
        if (half && col == 0)
            col = wd / 2;
        else {
            col = 0;
            y++;
        }
    }
    if (col)
        y++;
    if (t->ev[PROF_EV_CYCLES] > 0 && t->ev[PROF_EV_INSTRUCTIONS] >= 0 && y < h) {
        snprintf(line, sizeof line, "IPC %.2f",
                 (double)t->ev[PROF_EV_INSTRUCTIONS] / (double)t->ev[PROF_EV_CYCLES]);
        tui_put(w, y++, 0, wd, line);
    }
    /* unavailable events grouped by reason */
    int done[PROF_NEV] = { 0 };
    for (int k = 0; k < PROF_NEV && y < h; k++) {
        int e = order[k];
        if (s->avail[e] || done[e])
            continue;
        size_t o = (size_t)snprintf(line, sizeof line, "unavailable: ");
        for (int j = k; j < PROF_NEV; j++) {
            int f = order[j];
            if (s->avail[f] || done[f] || strcmp(s->reason[e], s->reason[f]))
                continue;
            done[f] = 1;
            o += (size_t)snprintf(line + o, o < sizeof line ? sizeof line - o : 0, "%s%s",
                                  o > 13 ? ", " : "", prof_ev_name(f));
        }
        if (o < sizeof line)
            snprintf(line + o, sizeof line - o, " (%s)", s->reason[e]);
        /* wrap the reason over the remaining rows */
        wattron(w, tui_attr(a, TUI_C_DIM));
        size_t n = strlen(line), i = 0;
        while (i < n && y < h) {
            size_t take = n - i > (size_t)wd ? (size_t)wd : n - i;
            wmove(w, y++, 0);
            tui_addn(w, line + i, take);
            i += take;
        }
        wattroff(w, tui_attr(a, TUI_C_DIM));
    }
}

const tui_pane tui_pane_counters = {
    "counters", "counters", counters_init, counters_update, counters_draw, NULL, free_st,
    NULL, 0, 0
};

/* ======================================================================= */
/* speed                                                                    */
/* ======================================================================= */
#define SPARK 512
typedef struct speed_st {
    const void *prof;     /* the profiler the cursor belongs to */
    uint64_t    cursor, lost;
    float       tps[SPARK];   /* decode tok/s of the latest tokens */
    unsigned    n, head;
    prof_tok    buf[256];
} speed_st;

static int speed_init(tui_pane *pn, tui_app *a)
{
    (void)a;
    pn->st = calloc(1, sizeof(speed_st));
    return pn->st ? 0 : -1;
}

static void speed_update(tui_pane *pn, tui_app *a, prof *p)
{
    speed_st *s = pn->st;
    (void)a;
    if (!p)
        return;
    if (s->prof != p) {   /* a new model: a new ring */
        s->prof = p;
        s->cursor = prof_ring_head(p);
        s->n = s->head = 0;
    }
    size_t k;
    while ((k = prof_ring_read(p, &s->cursor, s->buf, 256, &s->lost)) > 0)
        for (size_t i = 0; i < k; i++) {
            if (s->buf[i].phase != PROF_DECODE || !(s->buf[i].dt > 0))
                continue;
            s->tps[s->head] = (float)(1.0 / s->buf[i].dt);
            s->head = (s->head + 1) % SPARK;
            if (s->n < SPARK)
                s->n++;
        }
}

static void speed_draw(tui_pane *pn, tui_app *a, WINDOW *w, int h, int wd)
{
    speed_st *s = pn->st;
    const prof_totals *t = &a->snap.tot;
    char line[320];
    int y = 0;
    snprintf(line, sizeof line, "run: decode %.1f tok/s (%llu tok), prefill %.1f tok/s (%llu tok)",
             t->decode_tok_s, (unsigned long long)t->n_gen, t->prefill_tok_s,
             (unsigned long long)t->n_prompt);
    tui_put(w, y++, 0, wd, line);
    if (y >= h)
        return;
    if (t->read_bw_gbs > 0)
        snprintf(line, sizeof line, "%.3f GB/s of weights, %.2f%% of %.1f GB/s read bw",
                 t->gb_s, 100.0 * t->bw_share, t->read_bw_gbs);
    else
        snprintf(line, sizeof line, "%.3f GB/s of weights (machine bandwidth unknown)",
                 t->gb_s);
    tui_put(w, y++, 0, wd, line);
    if (y >= h)
        return;
    /* the membw figure's source (ui_read_bw), where it leaves the
     * sparkline two rows and its legend */
    if (a->snap.bw_src[0] && h - y >= 5) {
        snprintf(line, sizeof line, "read bw %s", a->snap.bw_src);
        tui_put(w, y++, 0, wd, line);
        if (y >= h)
            return;
    }
    /* the sparkline: the latest wd tokens, scaled to their maximum */
    int nshow = (int)s->n < wd ? (int)s->n : wd;
    float mx = 0, mn = 0;
    for (int i = 0; i < nshow; i++) {
        float v = s->tps[(s->head + SPARK - nshow + i) % SPARK];
        if (v > mx)
            mx = v;
        if (i == 0 || v < mn)
            mn = v;
    }
    int rows = h - y - 1 > 0 ? h - y - 1 : 1;
    if (rows > 4)
        rows = 4;
    /* one wide string per row (U+2581..U+2588), not a UTF-8 decode per cell */
    static const wchar_t blocks[9] = { L' ', 0x2581, 0x2582, 0x2583, 0x2584,
                                       0x2585, 0x2586, 0x2587, 0x2588 };
    static const wchar_t ascii[9] = { L' ', L'.', L'.', L':', L':', L'|', L'|', L'#', L'#' };
    wchar_t row[SPARK];
    int lv[SPARK];   /* each column's height in eighths of a cell */
    for (int i = 0; i < nshow; i++) {
        float v = s->tps[(s->head + SPARK - nshow + i) % SPARK];
        lv[i] = mx > 0 ? (int)(v / mx * (float)(rows * 8) + 0.5f) : 0;
    }
    wattron(w, tui_attr(a, TUI_C_BAR));
    for (int r = 0; r < rows; r++) {
        for (int i = 0; i < nshow; i++) {
            int cell = lv[i] - (rows - 1 - r) * 8;
            if (cell < 0)
                cell = 0;
            if (cell > 8)
                cell = 8;
            row[i] = a->utf8 ? blocks[cell] : ascii[cell];
        }
        if (nshow)
            mvwaddnwstr(w, y + r, 0, row, nshow);
    }
    wattroff(w, tui_attr(a, TUI_C_BAR));
    y += rows;
    if (y < h) {
        /* min and max of the sparkline's tokens, not of the run */
        snprintf(line, sizeof line, "sparkline, last %d tok: max %.0f min %.0f tok/s%s", nshow,
                 (double)mx, (double)mn, s->lost ? " (some tokens not shown)" : "");
        wattron(w, tui_attr(a, TUI_C_DIM));
        tui_put(w, y, 0, wd, line);
        wattroff(w, tui_attr(a, TUI_C_DIM));
    }
}

const tui_pane tui_pane_speed = {
    "speed", "speed", speed_init, speed_update, speed_draw, NULL, free_st, NULL, 0, 0
};
