/*
 * testutil.c — see testutil.h.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <ftw.h>
#include <poll.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/resource.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <stddef.h>
#include <cmocka.h>

#include <json-c/json.h>

#include "format/cflow_format.h"
#include "testutil.h"

#ifdef HAVE_LIBURING
#include <liburing.h>
#endif

extern char **environ;

const char *tu_shared(const char *rel)
{
    /* a few buffers in rotation, so several results can be live at once */
    static char bufs[8][4096];
    static unsigned next;
    char *buf = bufs[next++ % 8];
    const size_t bufsz = sizeof bufs[0];
    const char *base = getenv("CFLOW_SHARED");
    if (base && *base) {
        snprintf(buf, bufsz, "%s/%s", base, rel);
    } else {
        const char *src = getenv("CFLOW_SRCDIR");
        snprintf(buf, bufsz, "%s/../shared/%s", src ? src : ".", rel);
    }
    return buf;
}

void tu_require(const char *path)
{
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "test setup: required file %s is missing (set CFLOW_SHARED)\n",
                path);
        exit(1);
    }
}

const char *tu_shared_file(const char *rel)
{
    const char *p = tu_shared(rel);
    tu_require(p);
    return p;
}

static char tmpdir[256];

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    (void)sb; (void)flag; (void)f;
    return remove(p);
}

static void tmp_cleanup(void)
{
    if (tmpdir[0] && !getenv("CFLOW_KEEP_TMP"))
        nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

const char *tu_tmp(const char *name)
{
    static char bufs[8][4096];
    static unsigned next;
    char *buf = bufs[next++ % 8];
    if (!tmpdir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(tmpdir, sizeof tmpdir, "%s/cflow-test-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(tmpdir)) {
            perror("mkdtemp");
            exit(1);
        }
        atexit(tmp_cleanup);
    }
    snprintf(buf, sizeof bufs[0], "%s/%s", tmpdir, name);
    return buf;
}

const char *tu_cflow(void)
{
    const char *b = getenv("CFLOW_BIN");
    return b && *b ? b : "./cflow";
}

const char *tu_default_model(void)
{
    static char path[4096];
    const char *src = getenv("CFLOW_SRCDIR");
    snprintf(path, sizeof path, "%s/data/default.cflow", src && *src ? src : ".");
    return path;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int grow_read(int fd, char **buf, size_t *len, size_t *cap)
{
    if (*len + 65537 > *cap) {
        size_t nc = (*cap + 65537) * 2;
        char *p = realloc(*buf, nc);
        if (!p)
            return -1;
        *buf = p;
        *cap = nc;
    }
    ssize_t r = read(fd, *buf + *len, 65536);
    if (r > 0)
        *len += (size_t)r;
    return (int)r;
}

long tu_maxrss_kb;

/* A pseudo-terminal for a child's stdout: o[0] the master (read here),
 * o[1] the slave, in raw mode so the bytes read are the ones written. */
static int pty_pair(int o[2])
{
    int m = posix_openpt(O_RDWR | O_NOCTTY), s = -1;
    struct termios t;
    if (m < 0)
        return -1;
    if (grantpt(m) || unlockpt(m) || !ptsname(m) ||
        (s = open(ptsname(m), O_RDWR | O_NOCTTY)) < 0 || tcgetattr(s, &t)) {
        close(m);
        if (s >= 0)
            close(s);
        return -1;
    }
    cfmakeraw(&t);
    if (tcsetattr(s, TCSANOW, &t)) {
        close(m);
        close(s);
        return -1;
    }
    o[0] = m;
    o[1] = s;
    return 0;
}

static int run_child(tu_proc *p, char *const argv[], char *const env[], int timeout_s,
                     tu_watch_fn watch, void *ctx, int period_ms, int pty)
{
    int o[2], e[2];
    memset(p, 0, sizeof *p);
    if ((pty ? pty_pair(o) : pipe(o)) || pipe(e))
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(o[1], 1);
        dup2(e[1], 2);
        close(o[0]); close(o[1]); close(e[0]); close(e[1]);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, 0);
        for (int i = 0; env && env[i]; i++)
            putenv(env[i]);
        /* A suite started in the background (`make check &`, nohup)
         * inherits SIGINT and SIGQUIT (and SIGHUP) ignored, and an ignored
         * signal stays ignored across exec: give the binary under test the
         * dispositions a user's terminal session gives it. */
        signal(SIGINT, SIG_DFL);
        signal(SIGQUIT, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        execv(argv[0], argv);
        _exit(127);
    }
    close(o[1]);
    close(e[1]);
    size_t ocap = 0, ecap = 0;
    int open_o = 1, open_e = 1, watching = watch != NULL;
    double deadline = now_ms() + timeout_s * 1e3, next = now_ms();
    while (open_o || open_e) {
        struct pollfd fds[2] = { { o[0], POLLIN, 0 }, { e[0], POLLIN, 0 } };
        int n = poll(fds, 2, period_ms);
        if (now_ms() > deadline) {
            kill(pid, SIGKILL);
            break;
        }
        if (n > 0) {
            if (open_o && (fds[0].revents & (POLLIN | POLLHUP | POLLERR)))
                if (grow_read(o[0], &p->out, &p->out_len, &ocap) <= 0)
                    open_o = 0;
            if (open_e && (fds[1].revents & (POLLIN | POLLHUP)))
                if (grow_read(e[0], &p->err, &p->err_len, &ecap) <= 0)
                    open_e = 0;
        }
        if (watching && now_ms() >= next) {
            next = now_ms() + period_ms;
            if (watch(ctx, pid, p->out_len))
                watching = 0;
        }
    }
    close(o[0]);
    close(e[0]);
    int st;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    wait4(pid, &st, 0, &ru);
    tu_maxrss_kb = ru.ru_maxrss;
    if (WIFSIGNALED(st)) {
        p->signaled = 1;
        p->status = 128 + WTERMSIG(st);
    } else {
        p->status = WEXITSTATUS(st);
    }
    if (!p->out) p->out = calloc(1, 1);
    if (!p->err) p->err = calloc(1, 1);
    if (p->out) p->out[p->out_len] = 0;
    if (p->err) p->err[p->err_len] = 0;
    return 0;
}

int tu_run_watch(tu_proc *p, char *const argv[], char *const env[], int timeout_s,
                 tu_watch_fn watch, void *ctx, int period_ms)
{
    return run_child(p, argv, env, timeout_s, watch, ctx, period_ms, 0);
}

int tu_run(tu_proc *p, char *const argv[], char *const env[], int timeout_s)
{
    return run_child(p, argv, env, timeout_s, NULL, NULL, 200, 0);
}

int tu_run_pty(tu_proc *p, char *const argv[], char *const env[], int timeout_s)
{
    return run_child(p, argv, env, timeout_s, NULL, NULL, 200, 1);
}

void tu_proc_free(tu_proc *p)
{
    free(p->out);
    free(p->err);
    memset(p, 0, sizeof *p);
}

char *tu_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = 0;
        if (len)
            *len = (size_t)n;
    }
    return buf;
}

int tu_write_file(const char *path, const void *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int rc = fwrite(buf, 1, len, f) == len ? 0 : -1;
    if (fclose(f))
        rc = -1;
    return rc;
}

void *tu_slurp(const char *path, size_t *len)
{
    char *b = tu_read_file(path, len);
    if (!b)
        fail_msg("cannot read %s", path);
    return b;
}

void tu_spit(const char *path, const void *buf, size_t len)
{
    if (tu_write_file(path, buf, len) != 0)
        fail_msg("cannot write %s", path);
}

int tu_count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static int cflow_runv(tu_proc *p, char *const env[], va_list ap)
{
    const char *argv[64] = { tu_cflow() };
    int n = 1;
    while (n < 63 && (argv[n] = va_arg(ap, const char *)) != NULL)
        n++;
    argv[n] = NULL;
    return tu_run(p, (char *const *)argv, env, 600);
}

int tu_cflow_run(tu_proc *p, ...)
{
    va_list ap;
    va_start(ap, p);
    int rc = cflow_runv(p, NULL, ap);
    va_end(ap);
    return rc;
}

int tu_cflow_env(tu_proc *p, char *const env[], ...)
{
    va_list ap;
    va_start(ap, env);
    int rc = cflow_runv(p, env, ap);
    va_end(ap);
    return rc;
}

int tu_ok(const tu_proc *p, const char *what)
{
    if (p->status == 0 && !p->signaled)
        return 1;
    fprintf(stderr, "%s: exit %d%s\nstdout: %s\nstderr: %s\n", what, p->status,
            p->signaled ? " (signal)" : "", p->out, p->err);
    return 0;
}

const char *tu_convert_shared(const char *rel, const char *name)
{
    const char *src = tu_shared_file(rel);
    const char *out = tu_tmp(name);
    tu_proc p;
    if (tu_cflow_run(&p, "convert", src, out, (char *)NULL) != 0)
        return NULL;
    int ok = tu_ok(&p, "cflow convert");
    tu_proc_free(&p);
    return ok ? out : NULL;
}

int32_t tu_argmax(const float *x, uint32_t n)
{
    int32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = (int32_t)i;
    return best;
}

void tu_same_logits(const char *what, const float *a, const float *b, uint32_t n,
                    double tol)
{
    double amax = 0;
    for (uint32_t i = 0; i < n; i++)
        amax = fmax(amax, fabs(b[i]));
    for (uint32_t i = 0; i < n; i++) {
        int ok = tol > 0 ? fabs((double)a[i] - b[i]) <= tol * amax
                         : memcmp(&a[i], &b[i], sizeof a[i]) == 0;
        if (!ok)
            fail_msg("%s: logit %u: got %.9g, want %.9g", what, i, a[i], b[i]);
    }
}

void tu_synth_moe(const char *preset, const char *out, tu_moe *g)
{
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "synth", preset, out, (char *)NULL), 0);
    assert_true(tu_ok(&p, "synth"));
    tu_proc_free(&p);
    assert_int_equal(tu_cflow_run(&p, "inspect", "--json", out, (char *)NULL), 0);
    assert_true(tu_ok(&p, "inspect --json"));
    json_object *o = json_tokener_parse(p.out), *ml = json_object_object_get(o, "moe_layers");
    assert_non_null(ml);
    json_object *l0 = json_object_array_get_idx(ml, 0);
    json_object *e0 = json_object_array_get_idx(json_object_object_get(l0, "experts"), 0);
    g->n_moe = (unsigned)json_object_array_length(ml);
    g->top_k = (unsigned)json_object_get_int(json_object_object_get(l0, "top_k"));
    g->expert_len = (uint64_t)json_object_get_int64(json_object_object_get(e0, "length"));
    assert_true(g->n_moe > 0 && g->top_k > 0 && g->expert_len > 0);
    json_object_put(o);
    tu_proc_free(&p);
}

int tu_model_set_vec(const char *good, const char *bad, unsigned layer, int which, float v)
{
    char err[512];
    fmt_model *m = NULL;
    if (fmt_model_open(&m, good, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    uint64_t size = 0;
    const uint8_t *base = fmt_model_map(m, &size);
    uint64_t n = 0;
    const float *w = fmt_model_vec(m, layer, which, &n);
    size_t off = w ? (size_t)((const uint8_t *)w - base) : 0;
    fmt_model_close(m);
    size_t len = 0;
    uint8_t *buf = (uint8_t *)tu_read_file(good, &len);
    if (!w || !buf || off + n * sizeof(float) > len) {
        fprintf(stderr, "%s: no vector %d of layer %u\n", good, which, layer);
        free(buf);
        return -1;
    }
    for (uint64_t i = 0; i < n; i++)
        memcpy(buf + off + i * sizeof(float), &v, sizeof v);
    int rc = tu_write_file(bad, buf, len);
    free(buf);
    return rc;
}

int tu_have_uring(const char *who)
{
#ifdef HAVE_LIBURING
    struct io_uring ring;
    int rc = io_uring_queue_init(4, &ring, 0);
    if (rc == 0) {
        io_uring_queue_exit(&ring);
        return 1;
    }
    fprintf(stderr, "%s: io_uring refused (%s): the pool reader only\n", who, strerror(-rc));
#else
    fprintf(stderr, "%s: built without liburing: the pool reader only\n", who);
#endif
    return 0;
}
