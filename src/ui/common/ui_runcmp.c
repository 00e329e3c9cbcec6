/*
 * ui_runcmp.c — two logged runs side by side, as `cflow runs compare` and
 * cflow-tui's compare view both show them.
 *
 * One table of rows (cmp_rows[]): a label that ends in the unit, how to read
 * the figure from a prof_run_row, and how many decimals it has; counts
 * (threads, tokens) print as integers.  Counters are per token (prompt and
 * decode tokens together, so runs of different lengths compare); the
 * task-clock counter, kept in nanoseconds, is shown in ms per token as the
 * live pane shows it.
 */
#include "config.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "prof/prof.h"
#include "ui/common/ui.h"

#define MIB (1024.0 * 1024.0)

/* Weight bytes streamed per decode token, all streams (0: not recorded). */
static double streamed(const prof_run_row *r)
{
    return r->tok_bytes[0] + r->tok_bytes[1] + r->tok_bytes[2];
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

enum { F_TEXT, F_NUM };

typedef struct cmp_def {
    const char *what;
    int         kind, decimals;
    const char *(*text)(const prof_run_row *r);
    double      (*num)(const prof_run_row *r);
} cmp_def;

#define TEXT(name, expr) \
    static const char *t_##name(const prof_run_row *r) { return (expr); }
#define NUM(name, expr) \
    static double n_##name(const prof_run_row *r) { return (double)(expr); }
TEXT(model, base_name(r->model))
TEXT(hash, r->model_hash)
TEXT(program, r->program)
TEXT(isa, r->isa)
TEXT(prefetch, r->prefetch)
TEXT(xio, r->expert_io)
const char *ui_ahead_text(int layers, char *buf, size_t n)
{
    if (layers < 0)
        return "n/a";
    if (layers == 0)
        return "off";
    snprintf(buf, n, "%d layer%s", layers, layers == 1 ? "" : "s");
    return buf;
}

static const char *t_ahead(const prof_run_row *r)
{
    static _Thread_local char buf[24];
    return ui_ahead_text(r->expert_ahead, buf, sizeof buf);
}
/* all 64 bits of a seed, which a double would round */
static const char *t_seed(const prof_run_row *r)
{
    static _Thread_local char buf[24];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)r->seed);
    return buf;
}
NUM(threads, r->threads)
NUM(ctx, r->n_ctx)
NUM(temp, r->temp)
NUM(n_prompt, r->n_prompt)
NUM(n_gen, r->n_gen)
NUM(pp, r->prefill_tok_s)
NUM(tg, r->decode_tok_s)
NUM(gbs, r->gb_s)
NUM(share, 100.0 * r->bw_share)
NUM(streamed, streamed(r) / MIB)
NUM(critical, r->cp_critical / MIB)
NUM(naive, r->cp_naive / MIB)
#undef TEXT
#undef NUM

static const cmp_def cmp_rows[] = {
    { "model", F_TEXT, 0, t_model, NULL },
    { "model hash", F_TEXT, 0, t_hash, NULL },
    { "program", F_TEXT, 0, t_program, NULL },
    { "kernels", F_TEXT, 0, t_isa, NULL },
    { "prefetch", F_TEXT, 0, t_prefetch, NULL },
    { "expert io", F_TEXT, 0, t_xio, NULL },
    { "look-ahead", F_TEXT, 0, t_ahead, NULL },
    { "threads", F_NUM, 0, NULL, n_threads },
    { "context tokens", F_NUM, 0, NULL, n_ctx },
    { "temperature", F_NUM, 2, NULL, n_temp },
    { "seed", F_TEXT, 0, t_seed, NULL },
    { "prompt tokens", F_NUM, 0, NULL, n_n_prompt },
    { "decode tokens", F_NUM, 0, NULL, n_n_gen },
    { "prefill tok/s", F_NUM, 2, NULL, n_pp },
    { "decode tok/s", F_NUM, 2, NULL, n_tg },
    { "decode GB/s", F_NUM, 3, NULL, n_gbs },
    { "bandwidth share %", F_NUM, 1, NULL, n_share },
    { "streamed MiB/tok", F_NUM, 4, NULL, n_streamed },
    { "critical MiB/tok", F_NUM, 4, NULL, n_critical },
    { "naive MiB/tok", F_NUM, 4, NULL, n_naive },
};

static void num_row(ui_cmp_row *o, double a, double b, int decimals, int have_a, int have_b)
{
    snprintf(o->a, sizeof o->a, have_a ? "%.*f" : "n/a", decimals, a);
    snprintf(o->b, sizeof o->b, have_b ? "%.*f" : "n/a", decimals, b);
    if (have_a && have_b && a > 0 && b >= 0)
        snprintf(o->ratio, sizeof o->ratio, "%.3f", b / a);
    else
        snprintf(o->ratio, sizeof o->ratio, "-");
}

/* A counter per token; task-clock (ns) in ms. */
static void counter_row(ui_cmp_row *o, int e, const prof_run_row *a, const prof_run_row *b)
{
    const int clock = e == PROF_EV_TASK_CLOCK;
    const double scale = clock ? 1e-6 : 1.0;
    double ta = (double)(a->n_prompt + a->n_gen), tb = (double)(b->n_prompt + b->n_gen);
    int ha = a->ev[e] >= 0 && ta > 0, hb = b->ev[e] >= 0 && tb > 0;
    snprintf(o->what, sizeof o->what, "%s%s", prof_ev_name(e), clock ? " ms/tok" : "/tok");
    num_row(o, ha ? (double)a->ev[e] * scale / ta : 0, hb ? (double)b->ev[e] * scale / tb : 0,
            clock ? 3 : 1, ha, hb);
}

/* The expert figures (schema 7) where either run has them; n/a where one
 * has none or the figure is n/a. */
static size_t xio_rows(const prof_run_row *a, const prof_run_row *b, ui_cmp_row *rows,
                       size_t max)
{
    static const struct { const char *what; int decimals; double scale; size_t off; } x[] = {
        { "expert hit rate %", 1, 100.0, offsetof(prof_xio_fig, hit_rate) },
        { "read MiB/tok", 4, 1.0 / MIB, offsetof(prof_xio_fig, bytes_tok) },
        { "storage GB/s", 3, 1.0, offsetof(prof_xio_fig, gb_s) },
        { "storage-bound tok/s", 2, 1.0, offsetof(prof_xio_fig, limit_tok_s) },
        { "bound reached %", 1, 100.0, offsetof(prof_xio_fig, reached) },
    };
    size_t n = 0;
    if (!a->has_xio && !b->has_xio)
        return 0;
    for (size_t i = 0; i < sizeof x / sizeof *x && n < max; i++) {
        double va = *(const double *)((const char *)&a->xio + x[i].off);
        double vb = *(const double *)((const char *)&b->xio + x[i].off);
        int ha = a->has_xio && va >= 0, hb = b->has_xio && vb >= 0;
        ui_cmp_row *o = &rows[n++];
        snprintf(o->what, sizeof o->what, "%s", x[i].what);
        num_row(o, va * x[i].scale, vb * x[i].scale, x[i].decimals, ha, hb);
    }
    return n;
}

size_t ui_cmp_rows(const prof_run_row *a, const prof_run_row *b, ui_cmp_row *rows,
                   size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < sizeof cmp_rows / sizeof *cmp_rows && n < max; i++) {
        const cmp_def *d = &cmp_rows[i];
        ui_cmp_row *o = &rows[n++];
        snprintf(o->what, sizeof o->what, "%s", d->what);
        if (d->kind == F_TEXT) {
            snprintf(o->a, sizeof o->a, "%s", d->text(a));
            snprintf(o->b, sizeof o->b, "%s", d->text(b));
            snprintf(o->ratio, sizeof o->ratio, "%s", strcmp(o->a, o->b) ? "differs" : "");
        } else
            num_row(o, d->num(a), d->num(b), d->decimals, 1, 1);
    }
    n += xio_rows(a, b, rows + n, max - n);
    for (int e = 0; e < PROF_NEV && n < max; e++)
        if (a->ev[e] >= 0 || b->ev[e] >= 0)
            counter_row(&rows[n++], e, a, b);
    return n;
}
