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
 * pace (see the notes at prof_measure_membw for the rest).  So that the
 * figure holds still from one run to the next, each thread is pinned to
 * its own CPU, the buffer is four times the last-level cache, one untimed
 * pass settles page faults and frequency, and the median of several timed
 * passes is the figure (with their min and max beside it).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
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

/* ---- read bandwidth ----------------------------------------------------- */
/* Each thread reads BW_STREAMS parts of its slice side by side, 256 bytes
 * of each in turn, with the widest loads the CPU has.  Both matter: on
 * 2 vCPUs of a Sapphire Rapids Xeon one thread reading one stream
 * with 32-byte generic loads measured 13 GB/s, with 64-byte loads 15.7,
 * and with 64-byte loads over 4 streams 16.5; two threads 25 / 30 / 32.
 * Decode (and llama.cpp's decode) reached 30, so the old figure made
 * decode look faster than the memory system.  What moved the figure
 * between runs (31-48 GB/s on one machine, issue 18) was the scheduler
 * (threads migrating, two readers on one core), a buffer only twice the
 * last-level cache, and taking the best of three passes: hence pinned
 * threads, four times the cache, and the median. */
#define BW_STREAMS 4
#define BW_CHUNK   256
#define BW_MAXT    256

typedef uint64_t prof_v4 __attribute__((vector_size(32)));
typedef uint64_t prof_v8 __attribute__((vector_size(64)));

/* What the threads of one measurement share: the workers wait on cv
 * until every one of them has started (go 1; -1: one could not, give up),
 * then meet at the two barriers around each pass. */
typedef struct bw_sync {
    pthread_mutex_t   mu;
    pthread_cond_t    cv;
    int               go;
    unsigned          rounds;   /* passes, the untimed one included */
    pthread_barrier_t start, done;
} bw_sync;

typedef struct bw_job {
    const unsigned char *p;
    size_t   n;         /* bytes, a multiple of BW_STREAMS * BW_CHUNK */
    uint64_t sum;       /* keeps the loads from being optimised away */
    int      wide;      /* 2: 64-byte loads, 1: 32-byte, 0: generic */
    int      cpu;       /* the CPU to pin to, -1: none */
    bw_sync *sync;
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

static void bw_sum(bw_job *j)
{
#if HAVE_ISA_X86 && defined(__x86_64__)
    if (j->wide == 2)
        j->sum += bw_read_avx512(j->p, j->n);
    else if (j->wide == 1)
        j->sum += bw_read_avx2(j->p, j->n);
    else
#endif
        j->sum += bw_read_generic(j->p, j->n);
}

static void bw_pin(int cpu)
{
#ifdef CPU_SET
    if (cpu >= 0) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    }
#else
    (void)cpu;
#endif
}

/* A worker: once all have started, pinned, one slice per pass between the
 * two barriers. */
static void *bw_worker(void *arg)
{
    bw_job *j = arg;
    bw_sync *y = j->sync;
    pthread_mutex_lock(&y->mu);
    while (!y->go)
        pthread_cond_wait(&y->cv, &y->mu);
    const int go = y->go > 0;
    pthread_mutex_unlock(&y->mu);
    if (!go)
        return NULL;
    bw_pin(j->cpu);
    for (unsigned r = 0; r < y->rounds; r++) {
        pthread_barrier_wait(&y->start);
        bw_sum(j);
        pthread_barrier_wait(&y->done);
    }
    return NULL;
}

/* The largest cache of CPU 0 in bytes (0: unknown). */
static size_t bw_llc(void)
{
    size_t best = 0;
    for (int i = 0; i < 8; i++) {
        char path[96];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "r");
        unsigned long v = 0;
        char unit = 0;
        if (!f)
            continue;
        if (fscanf(f, "%lu%c", &v, &unit) == 2 && v < (1ul << 30)) {
            size_t b = unit == 'K' || unit == 'k' ? (size_t)v << 10
                     : unit == 'M' || unit == 'm' ? (size_t)v << 20 : (size_t)v;
            if (b > best)
                best = b;
        }
        fclose(f);
    }
    return best;
}

/* Four times the last-level cache (so that no pass is served from it,
 * whatever the replacement policy), at least 512 MiB, at most 2 GiB and a
 * quarter of the memory available now. */
static size_t bw_bytes(void)
{
    size_t bytes = (size_t)512 << 20, llc = bw_llc();
    if (llc * 4 > bytes)
        bytes = llc * 4;
    if (bytes > (size_t)2 << 30)
        bytes = (size_t)2 << 30;
    long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages > 0 && psz > 0 && (size_t)pages / 4 * (size_t)psz < bytes)
        bytes = (size_t)pages / 4 * (size_t)psz;
    if (bytes < (size_t)64 << 20)
        bytes = (size_t)64 << 20;
    return bytes;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The CPUs this process may run on, in order, into cpus (at most max);
 * returns how many (0: unknown, threads stay unpinned). */
static int bw_cpus(int *cpus, int max)
{
    int n = 0;
#ifdef CPU_SET
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int c = 0; c < CPU_SETSIZE && n < max; c++)
            if (CPU_ISSET(c, &set))
                cpus[n++] = c;
#else
    (void)cpus;
    (void)max;
#endif
    return n;
}

int prof_measure_membw(int n_threads, unsigned passes, prof_membw *out)
{
    const size_t unit = BW_STREAMS * BW_CHUNK;
    int wide = 0, cpus[BW_MAXT];
    memset(out, 0, sizeof *out);
    if (n_threads < 1)
        n_threads = 1;
    if (n_threads > BW_MAXT)
        n_threads = BW_MAXT;
    if (passes < 1)
        passes = 1;
    if (passes > PROF_MEMBW_MAXPASS)
        passes = PROF_MEMBW_MAXPASS;
#if HAVE_ISA_X86 && defined(__x86_64__)
    __builtin_cpu_init();
    wide = __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx2") ? 1 : 0;
#endif
    const size_t per = bw_bytes() / (size_t)n_threads / unit * unit;
    const size_t bytes = per * (size_t)n_threads;
    /* aligned_alloc takes a size that is a multiple of the alignment (C11;
     * ASan refuses any other): the buffer is rounded up, the read is not */
    const size_t huge = (size_t)2 << 20;
    uint64_t *buf = aligned_alloc(huge, (bytes + huge - 1) / huge * huge);
    if (!buf)
        return -1;
#ifdef MADV_HUGEPAGE
    madvise(buf, bytes, MADV_HUGEPAGE);   /* as the engine's --no-mmap weights */
#endif
    for (size_t i = 0; i < bytes / 8; i++)   /* touch every page, with data */
        buf[i] = i;

    const int ncpu = bw_cpus(cpus, BW_MAXT);
#ifdef CPU_SET
    cpu_set_t saved;
    const int restore = ncpu > 0 && pthread_getaffinity_np(pthread_self(), sizeof saved,
                                                           &saved) == 0;
#endif
    bw_sync y = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER,
                  .rounds = passes + 1 };
    pthread_t tid[BW_MAXT];
    bw_job job[BW_MAXT];
    int started = 1, rc = -1;
    pthread_barrier_init(&y.start, NULL, (unsigned)n_threads);
    pthread_barrier_init(&y.done, NULL, (unsigned)n_threads);
    for (int t = 0; t < n_threads; t++) {
        bw_job j = { (const unsigned char *)buf + (size_t)t * per, per, 0, wide,
                     ncpu ? cpus[t % ncpu] : -1, &y };
        job[t] = j;
    }
    for (int t = 1; t < n_threads; t++) {
        if (pthread_create(&tid[t], NULL, bw_worker, &job[t]) != 0)
            break;
        started = t + 1;
    }
    pthread_mutex_lock(&y.mu);
    y.go = started == n_threads ? 1 : -1;
    pthread_cond_broadcast(&y.cv);
    pthread_mutex_unlock(&y.mu);
    if (started == n_threads) {
        double gbs[PROF_MEMBW_MAXPASS];
        bw_pin(job[0].cpu);
        for (unsigned r = 0; r <= passes; r++) {   /* pass 0: untimed */
            double t0 = prof_now();
            pthread_barrier_wait(&y.start);
            bw_sum(&job[0]);
            pthread_barrier_wait(&y.done);
            double dt = prof_now() - t0;
            if (r)
                gbs[r - 1] = dt > 0 ? (double)bytes / dt / 1e9 : 0.0;
        }
        qsort(gbs, passes, sizeof gbs[0], cmp_double);
        out->threads = n_threads;
        out->passes = passes;
        out->bytes = bytes;
        out->min_gbs = gbs[0];
        out->max_gbs = gbs[passes - 1];
        out->median_gbs = passes % 2 ? gbs[passes / 2]
                                     : 0.5 * (gbs[passes / 2 - 1] + gbs[passes / 2]);
        rc = out->min_gbs > 0 ? 0 : -1;
    }
    for (int t = 1; t < started; t++)
        pthread_join(tid[t], NULL);
    pthread_barrier_destroy(&y.start);
    pthread_barrier_destroy(&y.done);
#ifdef CPU_SET
    if (restore)
        pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
#endif
    free(buf);
    return rc;
}

double prof_measure_read_bw(int n_threads)
{
    prof_membw m;
    return prof_measure_membw(n_threads, 5, &m) ? 0.0 : m.median_gbs;
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
