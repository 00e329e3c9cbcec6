/*
 * prof_sys.c — facts about the machine and the model that the run log
 * records: the CPU's name and cores, its measured read bandwidth, a cheap
 * content hash of the model file, and where the log lives.
 *
 * The read bandwidth is what decode speed is measured against (a dense
 * decode step streams every weight once, so bytes per token times tokens
 * per second over this figure is how close decoding comes to the memory
 * system's limit).  It is measured the way decoding reads: n threads each
 * sum their own contiguous slice of a buffer far larger than any cache,
 * with several independent vector accumulators so the loads, not the adds,
 * set the pace.  The best of three passes counts.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "prof/prof.h"

void prof_cpu_model(char *buf, size_t n)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    if (n == 0)
        return;
    buf[0] = 0;
    if (f) {
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "model name", 10))
                continue;
            const char *c = strchr(line, ':');
            if (!c)
                continue;
            c++;
            while (*c == ' ' || *c == '\t')
                c++;
            snprintf(buf, n, "%s", c);
            buf[strcspn(buf, "\n")] = 0;
            break;
        }
        fclose(f);
    }
    if (!buf[0]) {
        struct utsname u;
        snprintf(buf, n, "%s", uname(&u) == 0 ? u.machine : "unknown");
    }
}

int prof_cpu_cores(void)
{
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    return c > 0 ? (int)c : 1;
}

/* ---- read bandwidth ---------------------------------------------------- */
typedef uint64_t prof_v4 __attribute__((vector_size(32)));

typedef struct bw_job {
    const prof_v4 *p;
    size_t         n;       /* vectors */
    uint64_t       sum;     /* keeps the loads from being optimised away */
} bw_job;

static void *bw_sum(void *arg)
{
    bw_job *j = arg;
    prof_v4 a = { 0 }, b = { 0 }, c = { 0 }, d = { 0 };
    size_t i = 0;
    for (; i + 4 <= j->n; i += 4) {
        a += j->p[i];
        b += j->p[i + 1];
        c += j->p[i + 2];
        d += j->p[i + 3];
    }
    for (; i < j->n; i++)
        a += j->p[i];
    a += b + c + d;
    j->sum = a[0] + a[1] + a[2] + a[3];
    return NULL;
}

double prof_measure_read_bw(int n_threads)
{
    const size_t bytes = (size_t)256 << 20;
    size_t nv = bytes / sizeof(prof_v4);
    if (n_threads < 1)
        n_threads = 1;
    if (n_threads > 256)
        n_threads = 256;
    prof_v4 *buf = aligned_alloc(64, bytes);
    pthread_t tid[256];
    bw_job job[256];
    double best = 0.0;
    if (!buf)
        return 0.0;
    for (size_t i = 0; i < nv; i++)   /* touch every page, with data */
        buf[i] = (prof_v4){ i, i + 1, i + 2, i + 3 };
    size_t per = nv / (size_t)n_threads;
    for (int pass = 0; pass < 3; pass++) {
        double t0 = prof_now();
        int started = 0;
        for (int t = 0; t < n_threads; t++) {
            job[t].p = buf + (size_t)t * per;
            job[t].n = t + 1 == n_threads ? nv - (size_t)t * per : per;
            if (t > 0 && pthread_create(&tid[t], NULL, bw_sum, &job[t]) != 0)
                break;
            started = t + 1;
        }
        bw_sum(&job[0]);
        for (int t = 1; t < started; t++)
            pthread_join(tid[t], NULL);
        double dt = prof_now() - t0;
        size_t done = 0;
        for (int t = 0; t < started; t++)
            done += job[t].n * sizeof(prof_v4);
        if (dt > 0 && (double)done / dt / 1e9 > best)
            best = (double)done / dt / 1e9;
    }
    free(buf);
    return best;
}

/* ---- model hash -------------------------------------------------------- */
#define FNV_OFF 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL

static uint64_t fnv(uint64_t h, const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= FNV_PRIME;
    }
    return h;
}

/* Hash len bytes at off (clipped to the file); -1 on a read error. */
static int hash_range(int fd, uint64_t size, uint64_t off, uint64_t len,
                      unsigned char *buf, size_t bufsz, uint64_t *h)
{
    if (off >= size)
        return 0;
    if (len > size - off)
        len = size - off;
    while (len) {
        size_t want = len < bufsz ? (size_t)len : bufsz;
        ssize_t r = pread(fd, buf, want, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        *h = fnv(*h, buf, (size_t)r);
        off += (uint64_t)r;
        len -= (uint64_t)r;
    }
    return 0;
}

int prof_file_hash(const char *path, char hex[17], uint64_t *size, char *err,
                   size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    unsigned char sz[8], *buf;
    uint64_t h = FNV_OFF, n;
    int rc = 0;

    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        close(fd);
        return -1;
    }
    n = (uint64_t)st.st_size;
    for (int i = 0; i < 8; i++)
        sz[i] = (unsigned char)(n >> (8 * i));
    h = fnv(h, sz, 8);
    buf = malloc(65536);
    if (!buf) {
        close(fd);
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    rc |= hash_range(fd, n, 0, (uint64_t)1 << 20, buf, 65536, &h);
    for (uint64_t i = 0; i < 64 && n > 4096; i++)
        rc |= hash_range(fd, n, i * ((n - 4096) / 63), 4096, buf, 65536, &h);
    rc |= hash_range(fd, n, n > 65536 ? n - 65536 : 0, 65536, buf, 65536, &h);
    free(buf);
    close(fd);
    if (rc) {
        snprintf(err, errlen, "%s: read error while hashing", path);
        return -1;
    }
    snprintf(hex, 17, "%016llx", (unsigned long long)h);
    if (size)
        *size = n;
    return 0;
}

/* ---- where the log lives ----------------------------------------------- */
int prof_log_default_path(char *buf, size_t n)
{
    const char *env = getenv("CFLOW_DB");
    const char *xdg = getenv("XDG_DATA_HOME");
    const char *home = getenv("HOME");
    int r;
    if (env && *env)
        r = snprintf(buf, n, "%s", env);
    else if (xdg && xdg[0] == '/')   /* the XDG spec ignores relative paths */
        r = snprintf(buf, n, "%s/cflow/runs.db", xdg);
    else if (home && *home)
        r = snprintf(buf, n, "%s/.local/share/cflow/runs.db", home);
    else
        return -1;
    return r > 0 && (size_t)r < n ? 0 : -1;
}
