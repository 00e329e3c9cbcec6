/*
 * serve_test.c — the helpers of serve_test.h: `cflow serve` in the
 * background, curl as the client, replies taken apart.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "serve_test.h"

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* Fork and exec argv with stdout and stderr into files (NULL: /dev/null). */
static pid_t spawn(char *const argv[], const char *out, const char *err, char *const env[])
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int o = open(out ? out : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = open(err ? err : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int in = open("/dev/null", O_RDONLY);
        if (o < 0 || e < 0 || in < 0)
            _exit(126);
        dup2(in, 0);
        dup2(o, 1);
        dup2(e, 2);
        for (int i = 0; env && env[i]; i++)
            putenv(env[i]);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        execvp(argv[0], argv);
        _exit(127);
    }
    return pid;
}

/* Servers started and not stopped: killed when a test fails (st_reap) and
 * at exit. */
static pid_t running[16];

void st_reap(void)
{
    for (int i = 0; i < 16; i++)
        if (running[i] > 0) {
            kill(running[i], SIGKILL);
            waitpid(running[i], NULL, 0);
            running[i] = 0;
        }
}

static void track(pid_t pid, int on)
{
    static int hooked;
    if (!hooked && (hooked = 1))
        atexit(st_reap);
    for (int i = 0; i < 16; i++)
        if (on ? running[i] == 0 : running[i] == pid) {
            running[i] = on ? pid : 0;
            return;
        }
}

const char *st_curl(void)
{
    static char path[4096];
    const char *p = getenv("PATH");
    if (path[0])
        return path;
    snprintf(path, sizeof path, "curl");
    for (const char *d = p ? p : "/usr/bin:/bin"; *d;) {
        size_t n = strcspn(d, ":");
        char c[4096];
        snprintf(c, sizeof c, "%.*s/curl", (int)n, d);
        if (access(c, X_OK) == 0) {
            snprintf(path, sizeof path, "%s", c);
            break;
        }
        d += n + (d[n] == ':');
    }
    return path;
}

char *st_log(const st_server *sv)
{
    char *s = tu_read_file(sv->err_path, NULL);
    return s ? s : strdup("");
}

void st_start(st_server *sv, ...)
{
    static unsigned n;
    char *argv[48];
    int k = 0;
    va_list ap;
    argv[k++] = (char *)tu_cflow();
    argv[k++] = "serve";
    argv[k++] = "--port";
    argv[k++] = "0";
    va_start(ap, sv);
    for (char *a; (a = va_arg(ap, char *)) != NULL && k < 47;)
        argv[k++] = a;
    va_end(ap);
    argv[k] = NULL;
    char name[64];
    snprintf(name, sizeof name, "serve-%u.err", n++);
    snprintf(sv->err_path, sizeof sv->err_path, "%s", tu_tmp(name));
    static char bw[] = "CFLOW_READ_BW_GBS=10";
    char fault[256];
    snprintf(fault, sizeof fault, "CFLOW_FAULT=%s", sv->fault ? sv->fault : "");
    char *env[] = { bw, sv->fault ? fault : NULL, NULL };
    sv->port = 0;
    sv->pid = spawn(argv, NULL, sv->err_path, env);
    track(sv->pid, 1);
    for (int i = 0; i < 600; i++) {
        char *log = st_log(sv);
        char *at = strstr(log, "listening on http://");
        if (at) {
            char *colon = strchr(at + 20, ' ');
            while (colon > at && *colon != ':')
                colon--;
            sv->port = (unsigned)atoi(colon + 1);
        }
        free(log);
        if (sv->port)
            return;
        int st;
        if (waitpid(sv->pid, &st, WNOHANG) == sv->pid) {
            log = st_log(sv);
            fprintf(stderr, "cflow serve exited before listening:\n%s", log);
            free(log);
            fail();
        }
        sleep_ms(100);
    }
    fprintf(stderr, "cflow serve did not listen within 60 s\n");
    kill(sv->pid, SIGKILL);
    fail();
}

int st_stop(st_server *sv)
{
    int st = 0;
    track(sv->pid, 0);
    kill(sv->pid, SIGTERM);
    for (int i = 0; i < 300; i++) {
        if (waitpid(sv->pid, &st, WNOHANG) == sv->pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        sleep_ms(100);
    }
    kill(sv->pid, SIGKILL);
    waitpid(sv->pid, &st, 0);
    return 999;
}

static void url(char *buf, size_t n, const st_server *sv, const char *path)
{
    snprintf(buf, n, "http://127.0.0.1:%u%s", sv->port, path);
}

static void split(st_reply *r, tu_proc *p)
{
    memset(r, 0, sizeof *r);
    /* curl -i: "HTTP/1.1 200 OK\r\n...\r\n\r\nbody" */
    char *sep = strstr(p->out, "\r\n\r\n");
    size_t hl = sep ? (size_t)(sep - p->out) : p->out_len;
    r->head = strndup(p->out, hl);
    const char *b = sep ? sep + 4 : p->out + p->out_len;
    r->body_len = p->out_len - (size_t)(b - p->out);
    r->body = malloc(r->body_len + 1);
    assert_non_null(r->head);
    assert_non_null(r->body);
    memcpy(r->body, b, r->body_len);
    r->body[r->body_len] = '\0';
    sscanf(r->head, "HTTP/%*s %d", &r->status);
}

static void curl(st_reply *r, const st_server *sv, const char *path, const char *body,
                 const char *header, int from_file)
{
    char u[256], data[4096];
    char *argv[20];
    int k = 0;
    url(u, sizeof u, sv, path);
    argv[k++] = (char *)st_curl();
    argv[k++] = "-sS";
    argv[k++] = "-i";
    argv[k++] = "-N";
    argv[k++] = "--max-time";
    argv[k++] = "120";
    if (body) {
        argv[k++] = "-H";
        argv[k++] = "Content-Type: application/json";
        argv[k++] = from_file ? "--data-binary" : "--data-raw";
        if (from_file) {
            snprintf(data, sizeof data, "@%s", body);
            argv[k++] = data;
        } else {
            argv[k++] = (char *)body;
        }
    }
    if (header) {
        argv[k++] = "-H";
        argv[k++] = (char *)header;
    }
    argv[k++] = u;
    argv[k] = NULL;
    tu_proc p;
    assert_int_equal(tu_run(&p, argv, NULL, 150), 0);
    if (p.status != 0)
        fprintf(stderr, "curl %s: exit %d: %s\n", path, p.status, p.err);
    split(r, &p);
    tu_proc_free(&p);
}

void st_http(st_reply *r, const st_server *sv, const char *path, const char *body,
             const char *header)
{
    curl(r, sv, path, body, header, 0);
}

void st_http_file(st_reply *r, const st_server *sv, const char *path, const char *file)
{
    curl(r, sv, path, file, NULL, 1);
}

void st_reply_free(st_reply *r)
{
    free(r->head);
    free(r->body);
    memset(r, 0, sizeof *r);
}

int st_header(const st_reply *r, const char *name, char *out, size_t n)
{
    size_t nl = strlen(name);
    for (const char *l = r->head; l && *l;) {
        const char *e = strstr(l, "\r\n");
        size_t len = e ? (size_t)(e - l) : strlen(l);
        if (len > nl + 1 && !strncasecmp(l, name, nl) && l[nl] == ':') {
            const char *v = l + nl + 1;
            while (*v == ' ')
                v++;
            snprintf(out, n, "%.*s", (int)(len - (size_t)(v - l)), v);
            return 0;
        }
        l = e ? e + 2 : NULL;
    }
    return -1;
}

pid_t st_http_bg(const st_server *sv, const char *path, const char *body, const char *out_file)
{
    char u[256];
    url(u, sizeof u, sv, path);
    char *argv[] = { (char *)st_curl(), "-sS", "-N", "--max-time", "120", "-H",
                     "Content-Type: application/json", "--data-raw", (char *)body, u, NULL };
    return spawn(argv, out_file, NULL, NULL);
}

int st_wait(pid_t pid)
{
    int st;
    if (waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

double st_metric(const st_server *sv, const char *name)
{
    st_reply r;
    st_http(&r, sv, "/metrics", NULL, NULL);
    double v = -1;
    size_t nl = strlen(name);
    for (const char *l = r.body; *l;) {
        if (!strncmp(l, name, nl) && l[nl] == ' ')
            v = strtod(l + nl + 1, NULL);
        const char *e = strchr(l, '\n');
        l = e ? e + 1 : l + strlen(l);
    }
    st_reply_free(&r);
    return v;
}

static int sse_events(const char *body, json_object **ev)
{
    *ev = json_object_new_array();
    int done = 0;
    for (const char *l = body; *l;) {
        const char *e = strstr(l, "\n\n");
        if (strncmp(l, "data: ", 6) || !e) {
            fprintf(stderr, "SSE: not an event at \"%.60s\"\n", l);
            return -1;
        }
        if (done) {
            fprintf(stderr, "SSE: an event after [DONE]\n");
            return -1;
        }
        char *data = strndup(l + 6, (size_t)(e - l - 6));
        if (strchr(data, '\n')) {
            fprintf(stderr, "SSE: an event of two lines: %s\n", data);
            free(data);
            return -1;
        }
        if (!strcmp(data, "[DONE]")) {
            done = 1;
        } else {
            json_object *o = json_tokener_parse(data);
            if (!o) {
                fprintf(stderr, "SSE: not JSON: %s\n", data);
                free(data);
                return -1;
            }
            json_object_array_add(*ev, o);
        }
        free(data);
        l = e + 2;
    }
    if (!done)
        fprintf(stderr, "SSE: no [DONE]\n");
    return done ? 0 : -1;
}

int st_sse(const char *body, json_object **ev)
{
    int rc = sse_events(body, ev);
    if (rc) {
        json_object_put(*ev);
        *ev = NULL;
    }
    return rc;
}

json_object *st_get(json_object *o, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *save = NULL, *k = strtok_r(buf, ".", &save); k && o; k = strtok_r(NULL, ".", &save)) {
        if (json_object_is_type(o, json_type_array)) {
            size_t i = (size_t)atoi(k);
            o = i < json_object_array_length(o) ? json_object_array_get_idx(o, i) : NULL;
        } else if (!json_object_object_get_ex(o, k, &o)) {
            o = NULL;
        }
    }
    return o;
}

char *st_stream_text(json_object *ev)
{
    size_t cap = 1, n = 0;
    char *t = calloc(1, 1);
    for (size_t i = 0; i < json_object_array_length(ev); i++) {
        json_object *o = json_object_array_get_idx(ev, i);
        json_object *x = st_get(o, "choices.0.delta.content");
        if (!x)
            x = st_get(o, "choices.0.text");
        if (!x)
            continue;
        size_t k = (size_t)json_object_get_string_len(x);
        t = realloc(t, cap += k);
        assert_non_null(t);
        memcpy(t + n, json_object_get_string(x), k);
        t[n += k] = '\0';
    }
    return t;
}

char *st_reply_text(const char *body)
{
    json_object *o = json_tokener_parse(body), *x;
    char *t = NULL;
    if (o && ((x = st_get(o, "choices.0.message.content")) || (x = st_get(o, "choices.0.text"))))
        t = strdup(json_object_get_string(x));
    json_object_put(o);
    return t;
}

const char *st_model(void)
{
    return tu_default_model();
}

double st_wait_metric(const st_server *sv, const char *name, double want)
{
    double v = st_metric(sv, name);
    for (int i = 0; i < 200 && v != want; i++) {
        struct timespec ts = { 0, 10 * 1000000L };
        nanosleep(&ts, NULL);
        v = st_metric(sv, name);
    }
    return v;
}

const char *st_slow_model(void)
{
    static char path[4096];
    if (!path[0]) {
        snprintf(path, sizeof path, "%s", tu_tmp("slow.cflow"));
        tu_proc p;
        assert_int_equal(tu_cflow_run(&p, "synth", "report-arch1", path, NULL), 0);
        assert_true(tu_ok(&p, "cflow synth report-arch1"));
        tu_proc_free(&p);
    }
    return path;
}
