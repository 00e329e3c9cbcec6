/*
 * ui_common.c — messages, the progress bar and argument parsing shared by
 * the cflow subcommands.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/cflow_format.h"
#include "kernels/kern.h"
#include "prof/prof.h"
#include "ui/ui.h"

int ui_error(const char *fmt, ...)
{
    va_list ap;
    fputs("cflow: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return UI_EXIT_ERR;
}

int ui_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "cflow %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return UI_EXIT_USAGE;
}

int ui_bad_option(const char *cmd, char **argv)
{
    if (optopt > 0 && optopt < 256)
        return ui_usage_error(cmd, "bad or unknown option '-%c' ('cflow %s --help' lists "
                                   "them)", optopt, cmd);
    return ui_usage_error(cmd, "bad or unknown option '%s' ('cflow %s --help' lists them)",
                          argv[optind - 1], cmd);
}

void ui_log(void *ud, int level, const char *msg)
{
    (void)ud;
    if (level <= 0 && !getenv("CFLOW_VERBOSE"))
        return;
    fprintf(stderr, "cflow: %s%s\n",
            level >= 2 ? "error: " : level == 1 ? "warning: " : "", msg);
}

void ui_progress(void *ud, const char *what, uint64_t done, uint64_t total)
{
    static double start;
    static int shown;
    (void)ud;
    if (!isatty(STDERR_FILENO) || total == 0)
        return;
    double now = prof_now();
    if (done == 0 || start == 0.0) {
        start = now;
        shown = 0;
    }
    if (!shown && now - start < 1.0 && done < total)
        return;
    shown = 1;
    int width = 40, fill = (int)((double)width * (double)done / (double)total);
    if (fill > width)
        fill = width;
    fprintf(stderr, "\r%-10s [", what);
    for (int i = 0; i < width; i++)
        fputc(i < fill ? '=' : (i == fill ? '>' : ' '), stderr);
    fprintf(stderr, "] %3d%%", (int)(100.0 * (double)done / (double)total));
    if (done >= total) {
        fputc('\n', stderr);
        start = 0.0;
        shown = 0;
    }
    fflush(stderr);
}

int ui_parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int ui_parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (!*s || *s == '-')
        return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || errno)
        return -1;
    *out = v;
    return 0;
}

int ui_parse_float(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v) || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

const char *ui_default_model(void)
{
    const char *env = getenv("CFLOW_MODEL");
    if (env && *env)
        return env;
    static const char *candidates[] = { CFLOW_DATADIR "/default.cflow",
                                        CFLOW_SRCDATADIR "/default.cflow" };
    for (size_t i = 0; i < sizeof candidates / sizeof *candidates; i++)
        if (access(candidates[i], R_OK) == 0)
            return candidates[i];
    return NULL;
}

char *ui_read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t cap = 0;
    *n = 0;
    for (;;) {
        if (*n + 65537 > cap) {
            cap = (cap + 65537) * 2;
            char *p = realloc(buf, cap);
            if (!p) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = p;
        }
        size_t r = fread(buf + *n, 1, 65536, f);
        *n += r;
        if (r < 65536)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    buf[*n] = 0;
    return buf;
}
