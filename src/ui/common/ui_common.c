/*
 * ui_common.c — messages, the progress bar and argument parsing shared by
 * the cflow subcommands.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/cflow_format.h"
#include "kernels/kern.h"
#include "prof/prof.h"
#include "ui/common/ui.h"

/* Does p[0..left) begin with a C1 control (U+0080..U+009F: UTF-8 C2 80..9F)? */
static int c1_at(const unsigned char *p, size_t left)
{
    return left >= 2 && p[0] == 0xC2 && p[1] >= 0x80 && p[1] <= 0x9F;
}

/* s[0..n) to f, every control character escaped but those in keep (a
 * bit per C0 code). */
static void fputs_escaping(FILE *f, const char *s, size_t n, uint32_t keep)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c1_at((const unsigned char *)s + i, n - i)) {
            fprintf(f, "\\x%02x", (unsigned char)s[++i]);   /* a C1 control */
        } else if (c < 0x20 && keep >> c & 1u)
            fputc(c, f);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c == '\t')
            fputs("\\t", f);
        else if (c == '\r')
            fputs("\\r", f);
        else if (c < 0x20 || c == 0x7F)
            fprintf(f, "\\x%02x", c);
        else
            fputc(c, f);
    }
}

void ui_fputs_escaped(FILE *f, const char *s, size_t n) { fputs_escaping(f, s, n, 0); }

void ui_fputs_text(FILE *f, const char *s, size_t n)
{
    fputs_escaping(f, s, n, 1u << '\n' | 1u << '\t');
}

char *ui_printable(char *s)
{
    for (unsigned char *p = (unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == 0x7F)
            *p = '?';
        else if (c1_at(p, p[1] ? 2 : 1))
            p[0] = p[1] = '?', p++;
    return s;
}

static void veprintf(const char *fmt, va_list ap)
{
    char small[1024], *buf = small;
    va_list cp;
    va_copy(cp, ap);
    int n = vsnprintf(small, sizeof small, fmt, cp);
    va_end(cp);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof small) {
        if ((buf = malloc((size_t)n + 1)))
            vsnprintf(buf, (size_t)n + 1, fmt, ap);
        else
            buf = small, n = (int)sizeof small - 1;   /* cut, but still one line */
    }
    /* the newlines the format itself begins and ends with stay newlines;
     * any other, an argument's, is escaped with the rest */
    size_t lead = strspn(fmt, "\n"), fl = strlen(fmt), trail = 0;
    while (trail < fl - lead && fmt[fl - 1 - trail] == '\n')
        trail++;
    size_t a = 0, b = (size_t)n;
    while (a < b && a < lead && buf[a] == '\n')
        a++;
    while (b > a && (size_t)n - b < trail && buf[b - 1] == '\n')
        b--;
    fwrite(buf, 1, a, stderr);
    ui_fputs_escaped(stderr, buf + a, b - a);
    fwrite(buf + b, 1, (size_t)n - b, stderr);
    if (buf != small)
        free(buf);
}

void ui_eprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    veprintf(fmt, ap);
    va_end(ap);
}

int ui_env_check(const char *prog)
{
    char err[512];
    double bw;
    const char *v = getenv("CFLOW_READ_BW_GBS");
    if (v && *v && (ui_parse_float(v, 0.001, 1e6, &bw) || !(bw > 0)))
        snprintf(err, sizeof err, "CFLOW_READ_BW_GBS='%s': use a number of GB/s from 0.001 "
                 "to 1000000", v);
    else if (!eng_env_check(err, sizeof err))
        return -1;
    ui_eprintf("%s: %s\n", prog, err);
    return UI_EXIT_ERR;
}

void ui_std_fds(void)
{
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
            continue;
        int n = open("/dev/null", fd == 2 ? O_WRONLY : O_RDONLY);
        if (n >= 0 && n != fd) {   /* (open takes the lowest free number: fd) */
            dup2(n, fd);
            close(n);
        }
    }
}

int ui_error(const char *fmt, ...)
{
    va_list ap;
    fputs("cflow: ", stderr);
    va_start(ap, fmt);
    veprintf(fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return UI_EXIT_ERR;
}

int ui_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    ui_eprintf("cflow %s: ", cmd);
    va_start(ap, fmt);
    veprintf(fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return UI_EXIT_USAGE;
}

void ui_log(void *ud, int level, const char *msg)
{
    (void)ud;
    if (level <= 0 && !getenv("CFLOW_VERBOSE"))
        return;
    ui_eprintf("cflow: %s%s\n", level >= 2 ? "error: " : level == 1 ? "warning: " : "", msg);
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

static void human_size(uint64_t n, char *buf, size_t len)
{
    if (n >= (1u << 20))
        snprintf(buf, len, "%.1f MiB", (double)n / (1u << 20));
    else
        snprintf(buf, len, "%llu bytes", (unsigned long long)n);
}

char *ui_read_text(const char *path, const char *what, size_t cap, size_t *n)
{
    struct stat st;
    char lim[32], sz[32];
    human_size(cap, lim, sizeof lim);
    /* the type first: opening a FIFO blocks until someone writes to it,
     * and a device such as /dev/zero never ends */
    if (stat(path, &st) != 0) {
        ui_error("%s: cannot read the %s: %s", path, what, strerror(errno));
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        ui_error("%s: the %s is %s, not a regular file", path, what,
                 fmt_file_kind(st.st_mode));
        return NULL;
    }
    if ((uint64_t)st.st_size > cap) {
        human_size((uint64_t)st.st_size, sz, sizeof sz);
        ui_error("%s: the %s is %s, over the %s cflow reads", path, what, sz, lim);
        return NULL;
    }
    /* O_NONBLOCK: a FIFO put in the file's place since the stat must not
     * block either; fstat checks what was opened */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ui_error("%s: cannot read the %s: %s", path, what,
                 fd < 0 ? strerror(errno) : "it is no longer a regular file");
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    /* read up to one byte past the cap: a file that grew is refused too */
    size_t want = (size_t)st.st_size + 1 <= cap ? (size_t)st.st_size + 1 : cap + 1;
    char *buf = malloc(want + 1);
    size_t got = 0;
    while (buf && got < want) {
        ssize_t r = read(fd, buf + got, want - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            ui_error("%s: cannot read the %s: %s", path, what, strerror(errno));
            free(buf);
            close(fd);
            return NULL;
        }
        if (r == 0)
            break;
        got += (size_t)r;
        if (got == want && want <= cap) {   /* it grew: make room up to the cap */
            size_t nw = want * 2 < cap + 1 ? want * 2 : cap + 1;
            char *nb = realloc(buf, nw + 1);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            want = nw;
        }
    }
    close(fd);
    if (!buf) {
        ui_error("%s: the %s: out of memory", path, what);
        return NULL;
    }
    if (got > cap) {
        ui_error("%s: the %s is over the %s cflow reads", path, what, lim);
        free(buf);
        return NULL;
    }
    /* text has no NUL bytes: one would end the text early everywhere a
     * prompt travels as a C string */
    const char *nul = memchr(buf, 0, got);
    if (nul) {
        ui_error("%s: byte %zu of the %s is a NUL byte (a text file has none)", path,
                 (size_t)(nul - buf), what);
        free(buf);
        return NULL;
    }
    buf[got] = 0;
    *n = got;
    return buf;
}
