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
