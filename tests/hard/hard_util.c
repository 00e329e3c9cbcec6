/*
 * hard_util.c — see hard.h.
 */
#include "config.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "hard.h"

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
    return tu_default_model();
}

int hard_sanitizers(void)
{
    const char *s = getenv("CFLOW_SANITIZERS");
    return s && *s && strcmp(s, "0") != 0;
}

int hard_unpack(const char *archive, const char *dir, const char *name, const char *text)
{
    size_t n;
    char *a = tu_read_file(archive, &n), *p = a, *end = a + n;
    int rc = a ? 0 : -1;
    mkdir(dir, 0700);
    while (rc == 0 && p < end && !strncmp(p, "@@file ", 7)) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) {
            rc = -1;
            break;
        }
        char fname[256], path[4096];
        snprintf(fname, sizeof fname, "%.*s", (int)(nl - p - 7), p + 7);
        char *data = nl + 1, *next = memmem(data, (size_t)(end - data), "\n@@file ", 8);
        size_t len = next ? (size_t)(next - data) : (size_t)(end - data);
        snprintf(path, sizeof path, "%s/%s", dir, fname);
        if (name && text && !strcmp(fname, name))
            rc = tu_write_file(path, text, strlen(text));
        else
            rc = tu_write_file(path, data, len);
        p = next ? next + 1 : end;
    }
    free(a);
    return rc;
}

const char *hard_seed(const char *rel)
{
    static char path[4][4096];
    static unsigned k;
    char *s = path[k++ % 4];
    const char *dir = getenv("CFLOW_SRCDIR");
    snprintf(s, sizeof path[0], "%s/tests/fuzz/corpus/%s", dir ? dir : ".", rel);
    tu_require(s);
    return s;
}

void hard_run(tu_proc *p, int timeout_s, const char *const *args)
{
    char cmd[8192];
    size_t o = (size_t)snprintf(cmd, sizeof cmd, "%sexec '%s'",
                                hard_sanitizers() ? "" : "ulimit -v 1048576; ", tu_cflow());
    for (int i = 0; args[i]; i++)
        o += (size_t)snprintf(cmd + o, sizeof cmd - o, " '%s'", args[i]);
    char *argv[] = { "/bin/sh", "-c", cmd, NULL };
    assert_int_equal(tu_run_watch(p, argv, NULL, timeout_s, NULL, NULL, 100), 0);
    print_message("  %s %s -> exit %d: %.*s\n", args[0], args[1], p->status,
                  (int)strcspn(p->err, "\n"), p->err);
    assert_false(p->signaled);
    assert_null(strstr(p->err, "Sanitizer"));
    assert_null(strstr(p->err, "runtime error"));
}

void hard_refused(const char *file, const char *want, int timeout_s,
                  const char *const *args)
{
    tu_proc p;
    hard_run(&p, timeout_s, args);
    assert_int_equal(p.status, 1);
    if (!strstr(p.err, file) || !strstr(p.err, want))
        fail_msg("expected \"%s\" and \"%s\" in: %s", file, want, p.err);
    assert_int_equal(tu_count_lines(p.err), 1);
    tu_proc_free(&p);
}

void hard_l2c_patched(const char *name, int field, int32_t value, char *model, char *tok)
{
    const char *dir = tu_tmp(name);
    assert_int_equal(hard_unpack(hard_seed("llama2c/shared.a"), dir, NULL, NULL), 0);
    snprintf(model, 4096, "%s/model.bin", dir);
    snprintf(tok, 4096, "%s/tokenizer.bin", dir);
    size_t len;
    char *m = tu_read_file(model, &len);
    assert_non_null(m);
    assert_true(len >= 28 && field >= 0 && field < 7);
    memcpy(m + 4 * field, &value, 4);
    assert_int_equal(tu_write_file(model, m, len), 0);
    free(m);
}

int hard_dir_count(const char *dir, const char *part)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;
    if (!d)
        fail_msg("%s: cannot read the folder", dir);
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
            (!part || strstr(de->d_name, part)))
            n++;
    closedir(d);
    return n;
}
