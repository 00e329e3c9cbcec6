/*
 * cli_table.c — one emitter of result tables for every `cflow bench` mode:
 * a column table (ui_col[]: a field's name, its heading, the formats it is
 * in, what kind of value it holds) and rows of cells, printed on stdout as
 *
 *   md    | heading | heading |      a table as llama-bench prints one,
 *         | --- | ---: |              numbers right-aligned, "-" for an
 *         | cell    | cell    |      empty cell
 *   csv   name,name              the head line, then a line a row; text
 *         "text",word,1.5        quoted (inner quotes doubled), words and
 *                                numbers bare, an empty number empty
 *   json  [ { "name": "text",     one array, an object a row, each field
 *             "name": 1.5 } ]     on its own line; an empty number null
 *
 * The head comes with the first row, so an error before any result leaves
 * stdout empty; ui_tab_end closes the JSON array ("[]" when the run gave
 * no row but succeeded).  Cells are copies (malloc'd), printed and freed
 * with their row.  Text reaches md printable (ui_printable) and csv and
 * json escaped, so a model's file name cannot break a line or a table.
 * Below the emitter, the statistics of repeated timings that cells
 * summarise (mean and sample standard deviation, median).
 */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ui/cli/cli.h"

void ui_tab_init(ui_tab *t, int fmt, const ui_col *cols, unsigned n)
{
    memset(t, 0, sizeof *t);
    t->fmt = fmt;
    t->cols = cols;
    t->n = n < UI_TAB_MAXC ? n : UI_TAB_MAXC;
}

/* The format bit of t's output. */
static unsigned fmt_bit(const ui_tab *t)
{
    return t->fmt == 0 ? UI_TAB_MD : t->fmt == 1 ? UI_TAB_CSV : UI_TAB_JSON;
}

static void vset(char **slot, const char *fmt, va_list ap)
{
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0)
        s = NULL;              /* out of memory: the cell stays empty */
    free(*slot);
    *slot = s;
}

void ui_tab_set(ui_tab *t, unsigned col, const char *fmt, ...)
{
    va_list ap;
    if (col >= t->n)
        return;
    va_start(ap, fmt);
    vset(&t->val[col], fmt, ap);
    va_end(ap);
}

void ui_tab_md(ui_tab *t, unsigned col, const char *fmt, ...)
{
    va_list ap;
    if (col >= t->n)
        return;
    va_start(ap, fmt);
    vset(&t->md[col], fmt, ap);
    va_end(ap);
}

void ui_tab_csv_quoted(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"')
            putchar('"');
        putchar(*s);
    }
    putchar('"');
}

/* s as a CSV field of kind k. */
static void put_csv(const char *s, char k)
{
    if (k == 's')
        ui_tab_csv_quoted(s);
    else
        fputs(s, stdout);
}

/* s as a JSON value of kind k. */
static void put_json(const char *s, char k)
{
    if (k == 'n') {
        fputs(*s ? s : "null", stdout);
        return;
    }
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20 || ch == 0x7f)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

static void put_head(const ui_tab *t)
{
    const unsigned in = fmt_bit(t);
    int k = 0;
    if (t->fmt == 2) {
        printf("[\n");
        return;
    }
    for (unsigned c = 0; c < t->n; c++)
        if (t->cols[c].in & in) {
            const ui_col *col = &t->cols[c];
            if (t->fmt == 0)
                printf("| %s ", col->head ? col->head : col->name);
            else
                printf("%s%s", k++ ? "," : "", col->name);
        }
    if (t->fmt == 1) {
        putchar('\n');
        return;
    }
    printf("|\n");
    for (unsigned c = 0; c < t->n; c++)
        if (t->cols[c].in & in)
            printf("| %s ", t->cols[c].kind == 'n' ? "---:" : "---");
    printf("|\n");
}

void ui_tab_row(ui_tab *t)
{
    const unsigned in = fmt_bit(t);
    int k = 0;
    if (t->rows++ == 0)
        put_head(t);
    if (t->fmt == 2)
        printf("%s  {", t->rows > 1 ? ",\n" : "");
    for (unsigned c = 0; c < t->n; c++) {
        const ui_col *col = &t->cols[c];
        const char *v = t->val[c] ? t->val[c] : "";
        if (!(col->in & in))
            continue;
        if (t->fmt == 0) {
            char *m = t->md[c] ? t->md[c] : t->val[c];
            printf("| %s ", m && *m ? ui_printable(m) : "-");
        } else if (t->fmt == 1) {
            if (k)
                putchar(',');
            put_csv(v, col->kind);
        } else {
            printf("%s\n    \"%s\": ", k ? "," : "", col->name);
            put_json(v, col->kind);
        }
        k++;
    }
    printf(t->fmt == 0 ? "|\n" : t->fmt == 1 ? "\n" : "\n  }");
    fflush(stdout);
    for (unsigned c = 0; c < t->n; c++) {
        free(t->val[c]);
        free(t->md[c]);
        t->val[c] = t->md[c] = NULL;
    }
}

void ui_tab_end(ui_tab *t, int ok)
{
    if (t->fmt == 2 && t->rows)
        printf("\n]\n");
    else if (t->fmt == 2 && ok)
        printf("[]\n");
    fflush(stdout);
    for (unsigned c = 0; c < t->n; c++) {
        free(t->val[c]);
        free(t->md[c]);
        t->val[c] = t->md[c] = NULL;
    }
}

/* ---- the statistics of repeated timings the cells summarise ------------ */
void ui_tab_mean_sd(const double *x, unsigned n, double *mean, double *sd)
{
    double m = 0, v = 0;
    for (unsigned i = 0; i < n; i++)
        m += x[i];
    m = n ? m / n : 0;
    for (unsigned i = 0; i < n; i++)
        v += (x[i] - m) * (x[i] - m);
    *mean = m;
    *sd = n > 1 ? sqrt(v / (n - 1)) : 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double ui_tab_median(double *x, unsigned n)
{
    if (!n)
        return 0;
    qsort(x, n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
}
