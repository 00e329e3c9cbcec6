/*
 * eng_io_session.c — the session's side of expert I/O: the modes' names,
 * the RAM expert cache's budget (free memory, cgroup room, the dense
 * bytes and the KV cache), opening the staged reader with its slots
 * (eng_io.c) when a session switches to sync or staged, --expert-io auto's
 * choice, and the environment's settings.  eng_io.c reads; this decides
 * how much and when.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/eng_io_impl.h"

const char *const eng_expert_io_names[ENG_XIO_AUTO + 2] = {
    "mmap", "sync", "staged", "auto", NULL
};

const char *eng_expert_io_name(int mode)
{
    return mode >= 0 && mode <= ENG_XIO_AUTO ? eng_expert_io_names[mode] : "?";
}

int eng_expert_io_from_name(const char *name)
{
    for (int i = 0; name && i <= ENG_XIO_AUTO; i++)
        if (!strcmp(name, eng_expert_io_names[i]))
            return i;
    return -1;
}

/* A number from a one-line file of a cgroup folder; 0 when absent or not
 * a number ("max": no limit). */
static uint64_t cg_read(const char *dir, const char *name)
{
    char path[1280];
    unsigned long long v = 0;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    if (fscanf(f, "%llu", &v) != 1)
        v = 0;
    fclose(f);
    return v;
}

/* The value of key in a cgroup folder's memory.stat; 0 when absent. */
static uint64_t cg_stat(const char *dir, const char *key)
{
    char path[1280], line[256];
    unsigned long long v = 0;
    size_t n = strlen(key);
    snprintf(path, sizeof path, "%s/memory.stat", dir);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ' ') {
            v = strtoull(line + n + 1, NULL, 10);
            break;
        }
    if (f)
        fclose(f);
    return v;
}

/* The room a cgroup's memory limit leaves this process, 0 when there is
 * no limit: limit less usage, the usage counted without the page cache
 * (file pages: the kernel drops them for the group before it refuses
 * memory, and a model file's pages are in it after the open's validation
 * read the whole file).  cgroup v2: memory.max, memory.current, stat
 * "file", in /sys/fs/cgroup (the process's own group inside a container).
 * v1, which Docker and systemd still use on some hosts:
 * memory.limit_in_bytes, memory.usage_in_bytes, stat "total_cache", in
 * the folder /proc/self/cgroup's "memory:" line names under
 * /sys/fs/cgroup/memory (or in that mount itself, inside a container).
 * $CFLOW_CGROUP_ROOT stands for /sys/fs/cgroup (tests). */
static uint64_t cg_left(const char *dir, const char *lim_name, const char *use_name,
                        const char *file_key)
{
    uint64_t lim = cg_read(dir, lim_name);
    if (!lim || lim >= ((uint64_t)1 << 60))   /* v1's "none": a page-rounded 2^63 */
        return 0;
    uint64_t use = cg_read(dir, use_name), file = cg_stat(dir, file_key);
    use = use > file ? use - file : 0;
    return lim > use ? lim - use : 1;
}

static uint64_t cg_room(void)
{
    char line[1024], dir[1200];
    const char *root = getenv("CFLOW_CGROUP_ROOT");   /* tests: a made-up tree */
    if (!root || !*root)
        root = "/sys/fs/cgroup";
    uint64_t room = cg_left(root, "memory.max", "memory.current", "file");
    FILE *f = room ? NULL : fopen("/proc/self/cgroup", "r");
    while (f && fgets(line, sizeof line, f)) {
        char *p = strstr(line, ":memory:");
        if (!p)
            continue;
        p += strlen(":memory:");
        p[strcspn(p, "\n")] = 0;
        for (int k = 0; k < 2 && !room; k++) {
            snprintf(dir, sizeof dir, "%.512s/memory%s", root, k ? "" : p);
            room = cg_left(dir, "memory.limit_in_bytes", "memory.usage_in_bytes",
                           "total_cache");
        }
        break;
    }
    if (f)
        fclose(f);
    return room;
}

/* Bytes the kernel says can be taken without pushing anything out:
 * MemAvailable, or the room a cgroup's memory limit leaves (cg_room)
 * where that is less (a container's limit); 0 when neither can be read.
 * $CFLOW_MEM_FREE (bytes, K, M and G suffixes) stands in for both: to
 * try what auto I/O and the auto cache do with less memory than the
 * machine has. */
uint64_t eng_mem_free(void)
{
    uint64_t avail = 0;
    char line[256];
    unsigned long fake = 0;
    char err[160];
    /* (a bad value was refused by eng_env_check before any session opened) */
    if (!eng_env_count("CFLOW_MEM_FREE", 0, 1, ULONG_MAX, 1, &fake, err, sizeof err) && fake)
        return fake;
    FILE *f = fopen("/proc/meminfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            avail = (uint64_t)kb * 1024;
    }
    if (f)
        fclose(f);
    uint64_t room = cg_room();
    if (room && (!avail || room < avail))
        avail = room;
    return avail;
}

/* eng_opts.expert_cache in bytes for session s.  auto is what the kernel
 * says is free (eng_mem_free: MemAvailable, or a cgroup limit's room)
 * less what the run needs beside the cache:
 *
 *   dense   the model's bytes outside the expert banks (attention, norms,
 *           routers, embeddings, shared experts, headers): read through
 *           the mapping, so their page cache must stay resident, or every
 *           token faults them in again from storage;
 *   kv      the KV cache, all n_ctx positions (allocated now, resident as
 *           the context fills);
 *   margin  a tenth of the free memory, at least 512 MiB: the rest of the
 *           system, the session's buffers, the run log.
 *
 * Nothing left: no cache (a token's staging slots only). */
static uint64_t cache_budget(const eng_session *s, int64_t opt)
{
    if (opt != ENG_CACHE_AUTO)
        return opt > 0 ? (uint64_t)opt : 0;
    uint64_t free = eng_mem_free(), file = fmt_model_file_size(s->model);
    uint64_t bank = s->stats.expert_bank_bytes;
    uint64_t dense = file > bank ? file - bank : 0;
    uint64_t kv = eng_kv_bytes(s, -1);
    uint64_t margin = free / 10 > ((uint64_t)512 << 20) ? free / 10 : (uint64_t)512 << 20;
    uint64_t need = dense + kv + margin;
    return free > need ? free - need : 0;
}

int eng_expert_cache_from_text(const char *text, int64_t *bytes)
{
    char *end = NULL;
    if (!text || !*text)
        return -1;
    if (!strcmp(text, "auto")) {
        *bytes = ENG_CACHE_AUTO;
        return 0;
    }
    if (!strcmp(text, "off")) {
        *bytes = 0;
        return 0;
    }
    if (*text < '0' || *text > '9')
        return -1;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text)
        return -1;
    const char *units = "KMGT";
    const char *u = *end ? strchr(units, *end) : NULL;
    if (*end && (!u || end[1]))
        return -1;
    for (const char *p = units; u && p <= u; p++)
        v *= 1024.0;
    if (!(v >= 0.0 && v < 9.0e18))
        return -1;
    *bytes = (int64_t)v;
    return 0;
}

/* Staging for sync/staged: one slot per route and chosen expert (the ring
 * holds expert_delay + 1 routes of top_k experts), each as large as the
 * largest expert, and the rebased tile arrays of every slot; with a cache
 * budget, as many more slots as it holds (at most one per expert). */
static int xio_open(eng_session *s, char *err, size_t errlen)
{
    const fmt_hparams *hp = s->hp;
    uint64_t max_len = 0;
    uint32_t max_t[2] = { 0, 0 };
    if (s->io.xio || !hp->n_experts)
        return 0;
    for (unsigned l = 0; l < hp->n_layers; l++)
        for (unsigned e = 0; s->layers[l].exp_gu && e < hp->n_experts; e++) {
            uint64_t off = 0, len = 0;   /* (per-layer geometry: no experts) */
            fmt_model_expert(s->model, l, e, NULL, NULL, &off, &len);
            if (len > max_len)
                max_len = len;
            if (s->layers[l].exp_gu[e].st->n_tiles > max_t[0])
                max_t[0] = s->layers[l].exp_gu[e].st->n_tiles;
            if (s->layers[l].exp_down[e].st->n_tiles > max_t[1])
                max_t[1] = s->layers[l].exp_down[e].st->n_tiles;
        }
    unsigned n = (hp->expert_delay + 1u) * hp->top_k, n_min = n;
    const uint64_t slot = (max_len + 2 * ENG_IO_ALIGN - 1) / ENG_IO_ALIGN * ENG_IO_ALIGN;
    uint64_t budget = cache_budget(s, s->opts.expert_cache);
    uint64_t n_keys = (uint64_t)hp->n_layers * hp->n_experts;
    /* auto keys its slots even when the memory left no room for more:
     * look-ahead's guesses still have somewhere to land */
    const int keyed = budget > 0 || s->opts.expert_cache == ENG_CACHE_AUTO;
    n_min = n += eng_moe_ahead_slots(s, keyed);   /* look-ahead's guesses */
    if (slot && budget / slot > n)   /* more slots than experts are never used */
        n = (unsigned)(budget / slot < n_keys ? budget / slot : n_keys);
    if (n < n_min)
        n = n_min;
    s->io.cache_bytes = (uint64_t)(n - n_min) * slot;
    s->io.keyed = keyed;
    const eng_xio_cfg cfg = { .n_readers = s->opts.io_readers };
    int rc = eng_xio_new(&s->io.xio, fmt_model_path(s->model), max_len, n, (unsigned)n_keys, &cfg,
                         s->opts.log, s->opts.log_ud, err, errlen);
    if (rc)
        return rc;
    s->io.stage = calloc(n, sizeof *s->io.stage);
    s->io.n_stage = n;
    for (unsigned k = 0; s->io.stage && k < n; k++)
        for (int w = 0; w < 2; w++)
            if (!(s->io.stage[k].t[w] = calloc(max_t[w] ? max_t[w] : 1, sizeof(fmt_tile))))
                goto oom;
    if (s->io.stage)
        return 0;
oom:
    snprintf(err, errlen, "%s: out of memory for expert staging", fmt_model_path(s->model));
    return ENG_ENOMEM;
}

int eng_file_fits(const char *path, unsigned num, unsigned den, uint64_t held)
{
    struct stat st;
    uint64_t avail = eng_mem_free();
    if (!path || !den || stat(path, &st) || !avail)
        return -1;
    avail += held;
    return (uint64_t)st.st_size <= avail / den * num;
}

/* ENG_XIO_AUTO for the model at path: mmap where the file fits in 90% of
 * the free memory (or where that cannot be read), else staged, with the
 * RAM cache at auto unless one was given. */
int eng_io_auto(eng_opts *o, const char *path, uint64_t held)
{
    if (eng_file_fits(path, 9, 10, held) != 0)
        return ENG_XIO_MMAP;
    if (o->expert_cache == -1)
        o->expert_cache = ENG_CACHE_AUTO;
    return ENG_XIO_STAGED;
}

int eng_set_expert_io(eng_session *s, int mode, char *err, size_t errlen)
{
    const int asked_auto = mode == ENG_XIO_AUTO;
    if (asked_auto)
        mode = s->hp->n_experts ? eng_io_auto(&s->opts, fmt_model_path(s->model),
                                                       fmt_model_copied_bytes(s->model))
                                : ENG_XIO_MMAP;
    if (mode < ENG_XIO_MMAP || mode > ENG_XIO_STAGED)
        return eng_fail(err, errlen, ENG_EARG,
                        "expert I/O mode %d: use mmap, sync, staged or auto", mode);
    if (mode != ENG_XIO_MMAP) {
        int rc = xio_open(s, err, errlen);
        if (rc)
            return rc;
    } else if (fmt_model_experts_unchecked(s->model)) {
        /* opened for direct reads, which check each expert as it lands:
         * the map's bytes are checked all at once before they are used
         * (FMT_E* and ENG_E* codes are the same numbers) */
        int rc = fmt_model_check_experts(s->model, err, errlen);
        if (rc)
            return rc;
    }
    s->io.mode = mode;
    s->io.by_auto = asked_auto;        /* a mode asked for by name clears it */
    eng_fetch_pick(s);
    return 0;
}

int eng_expert_io(const eng_session *s) { return s->io.mode; }

int eng_set_prefetch(eng_session *s, int on)
{
    if (on && !s->io.pf) {
        if (!(s->io.pf = eng_pf_new()))
            return ENG_ENOMEM;
    } else if (!on && s->io.pf) {
        uint64_t lines, dropped;
        eng_pf_counts(s->io.pf, &lines, &dropped);
        s->stats.pf_lines += lines;
        s->stats.pf_dropped += dropped;
        eng_pf_free(s->io.pf);
        s->io.pf = NULL;
    }
    eng_fetch_pick(s);               /* in place, or with the thread's hints */
    return 0;
}

int eng_prefetch(const eng_session *s) { return s->io.pf != NULL; }
int eng_expert_io_auto(const eng_session *s) { return s->io.by_auto; }

const char *eng_expert_reader(const eng_session *s, unsigned *qd, uint32_t *chunk)
{
    if (s->io.mode == ENG_XIO_MMAP || !s->io.xio)
        return NULL;
    return eng_xio_reader(s->io.xio, qd, chunk);
}

int eng_expert_io_direct(const eng_session *s)
{
    if (s->io.mode == ENG_XIO_MMAP || !s->io.xio)
        return -1;
    return eng_xio_direct(s->io.xio);
}

/* eng_opts' expert I/O and prefetch, from the environment where they say
 * -1 (before the model is opened: --no-mmap leaves the expert banks
 * mapped when sync or staged I/O will read them). */
int eng_io_opts_from_env(eng_opts *o, char *err, size_t errlen)
{
    const char *v;
    if (o->expert_io < 0) {
        o->expert_io = ENG_XIO_AUTO;
        if ((v = getenv("CFLOW_EXPERT_IO")) && *v &&
            (o->expert_io = eng_expert_io_from_name(v)) < 0)
            return eng_fail(err, errlen, ENG_EARG, "CFLOW_EXPERT_IO='%s': use %s, %s, %s or %s",
                            v, eng_expert_io_names[0], eng_expert_io_names[1],
                            eng_expert_io_names[2], eng_expert_io_names[3]);
    }
    /* -1 stays -1 (none) without the variable, so auto I/O can tell a
     * cache nobody asked for from "off" */
    if (o->expert_cache == -1) {
        if ((v = getenv("CFLOW_EXPERT_CACHE")) && *v &&
            eng_expert_cache_from_text(v, &o->expert_cache))
            return eng_fail(err, errlen, ENG_EARG,
                        "CFLOW_EXPERT_CACHE='%s': use auto, off or a size such as 512M or 4G",
                        v);
    }
    if (o->prefetch < 0) {
        o->prefetch = 0;
        if ((v = getenv("CFLOW_PREFETCH")) && *v) {
            if (!strcmp(v, "on") || !strcmp(v, "1"))
                o->prefetch = 1;
            else if (strcmp(v, "off") && strcmp(v, "0"))
                return eng_fail(err, errlen, ENG_EARG, "CFLOW_PREFETCH='%s': use on or off", v);
        }
    }
    return 0;
}

int eng_io_setup(eng_session *s, char *err, size_t errlen)
{
    const fmt_hparams *hp = s->hp;
    s->io.route = calloc(hp->expert_delay + 1u, sizeof *s->io.route);
    if (!s->io.route)
        return eng_fail(err, errlen, ENG_ENOMEM, "%s: out of memory", fmt_model_path(s->model));
    for (unsigned i = 0; i <= hp->expert_delay; i++) {
        s->io.route[i].layer = -1;
        if (!(s->io.route[i].xr = calloc(hp->dim ? hp->dim : 1, sizeof(float))))
            return eng_fail(err, errlen, ENG_ENOMEM, "%s: out of memory", fmt_model_path(s->model));
    }
    int mode = s->opts.expert_io;
    if (s->io.by_auto && !hp->n_experts)
        mode = ENG_XIO_MMAP;         /* nothing to read but the mapping */
    int was_auto = s->io.by_auto;      /* mode is what auto resolved to */
    int rc = eng_set_expert_io(s, mode, err, errlen);
    s->io.by_auto = was_auto;
    if (rc)
        return rc;
    if (eng_set_prefetch(s, s->opts.prefetch))
        return eng_fail(err, errlen, ENG_ENOMEM, "cannot start the prefetch thread");
    if (s->io.by_auto && mode == ENG_XIO_STAGED && s->opts.log) {
        char msg[512];
        snprintf(msg, sizeof msg,
                 "%s: more than 90%% of the free memory: experts are read with staged "
                 "I/O into a %.1f GiB RAM cache (--expert-io auto)",
                 fmt_model_path(s->model), (double)s->io.cache_bytes / (1 << 30));
        s->opts.log(s->opts.log_ud, 1, msg);   /* a run from storage: worth a line */
    }
    return 0;
}

void eng_io_teardown(eng_session *s)
{
    eng_set_prefetch(s, 0);
    eng_xio_free(s->io.xio);        /* joins the readers: no read in flight */
    s->io.xio = NULL;
    for (unsigned k = 0; s->io.stage && k < s->io.n_stage; k++) {
        free(s->io.stage[k].t[0]);
        free(s->io.stage[k].t[1]);
    }
    free(s->io.stage);
    s->io.stage = NULL;
    for (unsigned i = 0; s->io.route && i <= s->hp->expert_delay; i++)
        free(s->io.route[i].xr);
    free(s->io.route);
    s->io.route = NULL;
}

/* A failed expert read of the last token, as eng_decode's error, once
 * every read still in flight has settled: a read of the failed token (or
 * of a look-ahead guess) that fails late is then marked failed before the
 * next token issues, so that token reads the expert again instead of
 * sharing a read that will fail. */
int eng_xio_error(eng_session *s, char *err, size_t errlen)
{
    if (s->io.xio)
        eng_xio_drain(s->io.xio);
    int rc = s->io.failed < 0 ? s->io.failed : ENG_EIO;
    s->io.failed = 0;
    return eng_fail(err, errlen, rc, "%s", s->io.err);
}
