/*
 * hard_util.c — see hard.h.
 */
#include "config.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hard.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int slurp(int fd, char **buf, size_t *len, size_t *cap)
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

long hard_maxrss_kb;

int hard_run(tu_proc *p, char *const argv[], char *const env[], int timeout_s,
             hard_watch_fn watch, void *ctx, int period_ms)
{
    int o[2], e[2];
    memset(p, 0, sizeof *p);
    if (pipe(o) || pipe(e))
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
            if (open_o && (fds[0].revents & (POLLIN | POLLHUP)))
                if (slurp(o[0], &p->out, &p->out_len, &ocap) <= 0)
                    open_o = 0;
            if (open_e && (fds[1].revents & (POLLIN | POLLHUP)))
                if (slurp(e[0], &p->err, &p->err_len, &ecap) <= 0)
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
    hard_maxrss_kb = ru.ru_maxrss;
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

size_t hard_rss(pid_t pid)
{
    char path[64];
    unsigned long size = 0, res = 0;
    snprintf(path, sizeof path, "/proc/%d/statm", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    if (fscanf(f, "%lu %lu", &size, &res) != 2)
        res = 0;
    fclose(f);
    return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}

int hard_copy(const char *from, const char *to)
{
    size_t len;
    char *buf = tu_read_file(from, &len);
    if (!buf)
        return -1;
    int rc = tu_write_file(to, buf, len);
    free(buf);
    return rc;
}

const char *hard_default_model(void)
{
    static char path[4096];
    const char *src = getenv("CFLOW_SRCDIR");
    snprintf(path, sizeof path, "%s/data/default.cflow", src && *src ? src : ".");
    return path;
}

int hard_sanitizers(void)
{
    const char *s = getenv("CFLOW_SANITIZERS");
    return s && *s && strcmp(s, "0") != 0;
}
