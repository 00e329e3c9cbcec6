/*
 * prof_sys.c — facts about the machine and the model that the run log
 * records: the CPU's name and cores, its measured read bandwidth, a cheap
 * content hash of the model file, and where the log lives.
 *
 * The read bandwidth is what decode speed is measured against (a dense
 * decode step streams every weight once, so bytes per token times tokens
 * per second over this figure is how close decoding comes to the memory
 * system's limit).  It is measured the way decoding reads: n threads each
 * sum their own slice of a buffer far larger than any cache, with several
 * independent vector accumulators so the loads, not the adds, set the
 * pace (see the notes at prof_measure_read_bw for the rest).  The best of
 * three passes counts.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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
/* Each thread reads BW_STREAMS parts of its slice side by side, 256 bytes
 * of each in turn, with the widest loads the CPU has.  Both matter: on
 * 2 vCPUs of a Sapphire Rapids Xeon one thread reading one stream
 * with 32-byte generic loads measured 13 GB/s, with 64-byte loads 15.7,
 * and with 64-byte loads over 4 streams 16.5; two threads 25 / 30 / 32.
 * Decode (and llama.cpp's decode) reached 30, so the old figure made
 * decode look faster than the memory system.  The measurement is meant as
 * the ceiling a kernel can approach, so it takes the best reading. */
#define BW_STREAMS 4
#define BW_CHUNK   256

typedef uint64_t prof_v4 __attribute__((vector_size(32)));
typedef uint64_t prof_v8 __attribute__((vector_size(64)));

typedef struct bw_job {
    const unsigned char *p;
    size_t   n;         /* bytes, a multiple of BW_STREAMS * BW_CHUNK */
    uint64_t sum;       /* keeps the loads from being optimised away */
    int      wide;      /* 2: 64-byte loads, 1: 32-byte, 0: generic */
} bw_job;

/* One body for every load width: T is the vector type, the loop reads
 * BW_CHUNK bytes of each stream per step into four accumulators. */
#define BW_BODY(T)                                                             \
    {                                                                          \
        const size_t part = n / BW_STREAMS;                                    \
        const unsigned per = BW_CHUNK / sizeof(T);                             \
        T a = { 0 }, b = { 0 }, c = { 0 }, d = { 0 };                          \
        for (size_t o = 0; o < part; o += BW_CHUNK)                            \
            for (int s = 0; s < BW_STREAMS; s++) {                             \
                const T *q = (const T *)(p + (size_t)s * part + o);            \
                for (unsigned i = 0; i < per; i += 4) {                        \
                    a += q[i];                                                 \
                    b += q[i + 1];                                             \
                    c += q[i + 2];                                             \
                    d += q[i + 3];                                             \
                }                                                              \
            }                                                                  \
        a += b + c + d;                                                        \
        return a[0] + a[1];                                                    \
    }

static uint64_t bw_read_generic(const unsigned char *p, size_t n) BW_BODY(prof_v4)
#if HAVE_ISA_X86 && defined(__x86_64__)
__attribute__((target("avx2")))
static uint64_t bw_read_avx2(const unsigned char *p, size_t n) BW_BODY(prof_v4)
__attribute__((target("avx512f")))
static uint64_t bw_read_avx512(const unsigned char *p, size_t n) BW_BODY(prof_v8)
#endif

static void *bw_sum(void *arg)
{
    bw_job *j = arg;
#if HAVE_ISA_X86 && defined(__x86_64__)
    if (j->wide == 2)
        j->sum = bw_read_avx512(j->p, j->n);
    else if (j->wide == 1)
        j->sum = bw_read_avx2(j->p, j->n);
    else
#endif
        j->sum = bw_read_generic(j->p, j->n);
    return NULL;
}

/* Twice the last-level cache (so no pass is served from it), at least
 * 256 MiB, at most 1 GiB. */
static size_t bw_bytes(void)
{
    size_t bytes = (size_t)256 << 20;
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
    unsigned long kib = 0;
    char unit = 0;
    if (f) {
        if (fscanf(f, "%lu%c", &kib, &unit) == 2 && (unit == 'K' || unit == 'k') &&
            kib < (1ul << 30) && (size_t)kib * 2048 > bytes)
            bytes = (size_t)kib * 2048;
        fclose(f);
    }
    if (bytes > (size_t)1 << 30)
        bytes = (size_t)1 << 30;
    return bytes;
}

double prof_measure_read_bw(int n_threads)
{
    const size_t bytes = bw_bytes();
    const size_t unit = BW_STREAMS * BW_CHUNK;
    int wide = 0;
    if (n_threads < 1)
        n_threads = 1;
    if (n_threads > 256)
        n_threads = 256;
#if HAVE_ISA_X86 && defined(__x86_64__)
    __builtin_cpu_init();
    wide = __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx2") ? 1 : 0;
#endif
    uint64_t *buf = aligned_alloc((size_t)2 << 20, bytes);
    pthread_t tid[256];
    bw_job job[256];
    double best = 0.0;
    if (!buf)
        return 0.0;
#ifdef MADV_HUGEPAGE
    madvise(buf, bytes, MADV_HUGEPAGE);   /* as the engine's --no-mmap weights */
#endif
    for (size_t i = 0; i < bytes / 8; i++)   /* touch every page, with data */
        buf[i] = i;
    size_t per = bytes / (size_t)n_threads / unit * unit;
    for (int pass = 0; pass < 3; pass++) {
        double t0 = prof_now();
        int started = 0;
        for (int t = 0; t < n_threads; t++) {
            job[t].p = (const unsigned char *)buf + (size_t)t * per;
            job[t].n = per;
            job[t].wide = wide;
            if (t > 0 && pthread_create(&tid[t], NULL, bw_sum, &job[t]) != 0)
                break;
            started = t + 1;
        }
        bw_sum(&job[0]);
        for (int t = 1; t < started; t++)
            pthread_join(tid[t], NULL);
        double dt = prof_now() - t0;
        size_t done = (size_t)started * per;
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
    /* O_NONBLOCK: a FIFO in the model's place must not block the open;
     * the fstat below refuses it (reads of a regular file never block) */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
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
