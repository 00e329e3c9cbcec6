/*
 * ui_models.c — the model cache: a GGUF file, a Hugging Face folder or a
 * llama2.c checkpoint given where a model is taken (cflow run, inspect,
 * bench, ppl, cflow-tui -m and /model) is converted once into
 * $XDG_CACHE_HOME/cflow/ (default ~/.cache/cflow/) and the conversion is
 * opened instead.  `cflow models` (cmd_models.c) lists and frees it.
 *
 * The folder holds, per conversion:
 *   STEM-HASH.cflow   the converted model (STEM: the source's name without
 *                     its extension, HASH: the key below, 16 hex digits)
 *   STEM-HASH.json    what it was made from: {"cache": 1, "source": path,
 *                     "kind": "gguf"|"hf"|"llama2c", "hash", "converted"
 *                     (unix seconds), "cflow" (version), "size",
 *                     "mtime_ns" and "ctime_ns" of the .cflow (an entry
 *                     that no longer stats so, or has no sidecar, is
 *                     converted again), "files": [{"path", "size",
 *                     "dev", "ino", "mtime_ns", "ctime_ns"}...]}
 *   .lock             flock'd while a conversion or a removal runs
 * fmt_convert names its output only when it is complete (an O_TMPFILE
 * linked in, or a STEM-HASH.cflow.tmp.* renamed where the file system
 * lacks O_TMPFILE), so an interrupted conversion never leaves a file named
 * like a model; the next conversion removes named leftovers under the
 * lock.  Two processes that
 * convert at once meet at the lock: the second waits, then finds the
 * first one's result.
 *
 * The key.  HASH is XXH64 over the converter's identity (cflow's version,
 * the .cflow version and FMT_CONVERTER_REV), the source's kind and, per
 * input file (the GGUF; the checkpoint and its tokenizer; every regular
 * file of the HF folder, by name), its name, size and the XXH64 of all
 * its bytes.  Sound:
 * every byte the converter reads is in the key, so a changed file gets a
 * new key and never a stale conversion (a 64-bit key collides by chance
 * with odds of about n^2 / 2^64 for n cached models).  Cheap: hashing is
 * one sequential read at several GB/s, paid only when a source is first
 * seen; the sidecar keeps each input's (device, inode, size, mtime,
 * ctime), and a later start whose inputs all stat the same reuses the
 * conversion from stat alone.  That shortcut is sound because the kernel
 * sets ctime to the current time on every write and no call sets it back
 * (touch restores mtime, never ctime), and inputs that change while they
 * are hashed or converted are caught by statting them again afterwards.
 *
 * Library rules hold here although this is the front end: nothing prints,
 * the converted line and errors go back to the caller (the TUI shows them
 * in its chat, cflow on stderr).
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "format/cflow_format.h"
#include "prof/prof.h"
#include "ui/common/ui.h"

#define CACHE_SCHEMA 1
#define MAX_INPUTS   4096          /* files of an HF folder */

/* One input file of a source and its identity when it was statted. */
typedef struct in_file {
    char        path[PATH_MAX];
    size_t      name;              /* offset in path of the key's name (an
                                      offset: the array is realloc'd) */
    struct stat st;
} in_file;

typedef struct src_info {
    const char *kind;              /* "gguf", "hf", "llama2c" */
    char        real[PATH_MAX];    /* the source, resolved */
    char        tok[PATH_MAX];     /* llama2.c: the tokenizer beside it */
    in_file    *f;
    size_t      n;
    char        hash[17];
} src_info;

/* ---- XXH64 (the published algorithm, seed 0) -------------------------- */
#define P1 0x9E3779B185EBCA87ull
#define P2 0xC2B2AE3D27D4EB4Full
#define P3 0x165667B19E3779F9ull
#define P4 0x85EBCA77C2B2AE63ull
#define P5 0x27D4EB2F165667C5ull

typedef struct xxh {
    uint64_t v[4], len;
} xxh;

static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static uint64_t xround(uint64_t acc, uint64_t in) { return rotl(acc + in * P2, 31) * P1; }
static uint64_t ld64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static uint32_t ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

static void xxh_init(xxh *h)
{
    h->v[0] = P1 + P2;
    h->v[1] = P2;
    h->v[2] = 0;
    h->v[3] = -P1;
    h->len = 0;
}

/* n bytes of 32-byte stripes (n a multiple of 32). */
static void xxh_stripes(xxh *h, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++)
            h->v[k] = xround(h->v[k], ld64(p + i + 8 * k));
    h->len += n;
}

/* The last bytes (any n, after whole stripes) and the digest. */
static uint64_t xxh_final(xxh *h, const uint8_t *p, size_t n)
{
    size_t whole = n & ~(size_t)31;
    xxh_stripes(h, p, whole);
    p += whole;
    n -= whole;
    uint64_t r = h->len ? rotl(h->v[0], 1) + rotl(h->v[1], 7) + rotl(h->v[2], 12) +
                          rotl(h->v[3], 18)
                        : P5;
    if (h->len)
        for (int k = 0; k < 4; k++)
            r = (r ^ xround(0, h->v[k])) * P1 + P4;
    r += h->len + n;
    for (; n >= 8; p += 8, n -= 8)
        r = rotl(r ^ xround(0, ld64(p)), 27) * P1 + P4;
    if (n >= 4) {
        r = rotl(r ^ (uint64_t)ld32(p) * P1, 23) * P2 + P3;
        p += 4;
        n -= 4;
    }
    for (; n; p++, n--)
        r = rotl(r ^ *p * P5, 11) * P1;
    r ^= r >> 33;
    r *= P2;
    r ^= r >> 29;
    r *= P3;
    return r ^ (r >> 32);
}

static uint64_t xxh_once(const void *p, size_t n)
{
    xxh h;
    xxh_init(&h);
    return xxh_final(&h, p, n);
}

/* ---- the folder ------------------------------------------------------- */
int ui_models_dir(char *buf, size_t n, char *err, size_t errlen)
{
    const char *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int w;
    /* the XDG spec: a relative $XDG_CACHE_HOME is invalid and ignored */
    if (x && x[0] == '/')
        w = snprintf(buf, n, "%s/cflow", x);
    else if (home && *home)
        w = snprintf(buf, n, "%s/.cache/cflow", home);
    else {
        snprintf(err, errlen, "no folder for the model cache: set XDG_CACHE_HOME or HOME");
        return -1;
    }
    /* room for the entries' names (STEM-HASH.cflow.tmp.XXXXXX) under PATH_MAX */
    if (w < 0 || (size_t)w >= n || w > PATH_MAX - 128) {
        snprintf(err, errlen, "the model cache folder's name is too long");
        return -1;
    }
    return 0;
}

/* mkdir -p of the cache folder (0700 for the folders it makes). */
static int make_dir(const char *dir, char *err, size_t errlen)
{
    char p[PATH_MAX];
    struct stat st;
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1;; s++) {
        if (*s && *s != '/')
            continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0700) && errno != EEXIST) {
            snprintf(err, errlen, "cannot create the model cache %s: %s", dir, strerror(errno));
            return -1;
        }
        *s = c;
        if (!c)
            break;
    }
    int bad = stat(dir, &st) ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
    if (bad) {
        snprintf(err, errlen, "cannot create the model cache %s: %s", dir, strerror(bad));
        return -1;
    }
    return 0;
}

/* The cache's lock, held (exclusive) on return: the fd, or -1 with err.
 * Waiting for another process is said once through log, as information. */
int ui_models_lock(const char *dir, const ui_models_cb *cb, char *err, size_t errlen)
{
    char p[PATH_MAX + 8];
    snprintf(p, sizeof p, "%s/.lock", dir);
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "cannot write to the model cache %s: %s", dir, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) == 0)
        return fd;
    /* an info line (level 0: shown with CFLOW_VERBOSE): waiting for a
     * sibling is how two starts share one conversion, not a fault */
    if (cb && cb->log) {
        char msg[PATH_MAX + 64];
        snprintf(msg, sizeof msg, "waiting for another cflow converting into %s", dir);
        cb->log(cb->log_ud, 0, msg);
    }
    while (flock(fd, LOCK_EX))
        if (errno != EINTR) {
            snprintf(err, errlen, "cannot lock the model cache %s: %s", dir, strerror(errno));
            close(fd);
            return -1;
        }
    return fd;
}

void ui_models_unlock(int fd)
{
    if (fd >= 0)
        close(fd);   /* closing drops the flock */
}

/* ---- what the model argument is --------------------------------------- */
static int name_cmp(const void *a, const void *b)
{
    const in_file *x = a, *y = b;
    return strcmp(x->path + x->name, y->path + y->name);
}

static int add_input(src_info *s, const char *dir, const char *name)
{
    if (s->n == MAX_INPUTS)
        return -1;
    in_file *nf = realloc(s->f, (s->n + 1) * sizeof *nf);
    if (!nf)
        return -1;
    s->f = nf;
    in_file *f = &s->f[s->n];
    int w = dir ? snprintf(f->path, sizeof f->path, "%s/%s", dir, name)
                : snprintf(f->path, sizeof f->path, "%s", name);
    if (w < 0 || (size_t)w >= sizeof f->path || stat(f->path, &f->st))
        return -1;
    const char *slash = strrchr(f->path, '/');
    f->name = slash ? (size_t)(slash + 1 - f->path) : 0;
    s->n++;
    return 0;
}

/* An HF folder's inputs: its regular files but hidden ones (a .git or
 * .cache beside the model is none of the converter's), by name. */
static int hf_inputs(src_info *s, char *err, size_t errlen)
{
    DIR *d = opendir(s->real);
    struct dirent *de;
    if (!d) {
        snprintf(err, errlen, "%s: %s", s->real, strerror(errno));
        return -1;
    }
    while ((de = readdir(d))) {
        struct stat st;
        char p[PATH_MAX];
        if (de->d_name[0] == '.')
            continue;
        if (snprintf(p, sizeof p, "%s/%s", s->real, de->d_name) >= (int)sizeof p ||
            stat(p, &st) || !S_ISREG(st.st_mode))
            continue;
        if (add_input(s, s->real, de->d_name)) {
            closedir(d);
            snprintf(err, errlen, "%s: cannot list the folder's files", s->real);
            return -1;
        }
    }
    closedir(d);
    if (s->n)
        qsort(s->f, s->n, sizeof *s->f, name_cmp);
    return 0;
}

/* The tokenizer of a llama2.c checkpoint: tokenizer.bin beside it (the
 * name llama2.c's run.c uses), else the one tok*.bin there. */
static int find_tokenizer(src_info *s, char *err, size_t errlen)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", s->real);
    char *slash = strrchr(dir, '/');
    *slash = 0;
    if (snprintf(s->tok, sizeof s->tok, "%s/tokenizer.bin", dir) < (int)sizeof s->tok &&
        access(s->tok, R_OK) == 0)
        return 0;
    DIR *d = opendir(dir);
    struct dirent *de;
    int found = 0;
    while (d && (de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (strncmp(de->d_name, "tok", 3) || l < 7 || strcmp(de->d_name + l - 4, ".bin") ||
            !strcmp(de->d_name, slash + 1) ||
            snprintf(s->tok, sizeof s->tok, "%s/%s", dir, de->d_name) >= (int)sizeof s->tok)
            continue;
        found++;
    }
    if (d)
        closedir(d);
    if (found == 1)
        return 0;
    snprintf(err, errlen, "%s: a llama2.c checkpoint needs its tokenizer: put tokenizer.bin "
             "beside it%s, or convert it with cflow convert --tokenizer FILE", s->real,
             found ? " (there are several tok*.bin)" : "");
    return -1;
}

/* 1: model is opened as it is (a .cflow or .vflow, or nothing cflow
 * converts: the opener says why); 0: a source, s filled; -1: err. */
static int classify(const char *model, src_info *s, char *err, size_t errlen)
{
    struct stat st;
    if (stat(model, &st) || !realpath(model, s->real))
        return 1;
    if (S_ISDIR(st.st_mode)) {
        char cfg[PATH_MAX + 16];
        snprintf(cfg, sizeof cfg, "%s/config.json", s->real);
        if (access(cfg, F_OK))
            return 1;
        s->kind = "hf";
        return hf_inputs(s, err, errlen);
    }
    if (!S_ISREG(st.st_mode))
        return 1;   /* a FIFO or a device: never opened here, it could block */
    uint8_t head[8] = { 0 };
    int fd = open(model, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    ssize_t got = fd >= 0 ? read(fd, head, sizeof head) : -1;
    if (fd >= 0)
        close(fd);
    if (got < 8 || !memcmp(head, FMT_MAGIC, 8) || !memcmp(head, FMT_VMAGIC, 8))
        return 1;
    if (!memcmp(head, "GGUF", 4)) {
        s->kind = "gguf";
    } else {
        /* fmt_src_open knows a llama2.c checkpoint; one that is whole but
         * lacks its tokenizer is refused as a caller error */
        fmt_src *src = NULL;
        char e2[512];
        if (fmt_src_open(&src, s->real, NULL, e2, sizeof e2) != FMT_EARG) {
            fmt_src_close(src);
            return 1;
        }
        s->kind = "llama2c";
        if (find_tokenizer(s, err, errlen))
            return -1;
    }
    if (add_input(s, NULL, s->real) || (s->tok[0] && add_input(s, NULL, s->tok))) {
        snprintf(err, errlen, "%s: %s", s->real, strerror(errno ? errno : ENOMEM));
        return -1;
    }
    return 0;
}

/* ---- the key ---------------------------------------------------------- */
static int hash_file(in_file *f, uint64_t *out, uint64_t *done, uint64_t total,
                     const ui_models_cb *cb, char *err, size_t errlen)
{
    enum { BUF = 1 << 20 };
    int fd = open(f->path, O_RDONLY | O_CLOEXEC);
    uint8_t *buf = malloc(BUF);
    xxh h;
    if (fd < 0 || !buf) {
        snprintf(err, errlen, "%s: %s", f->path, fd < 0 ? strerror(errno) : "out of memory");
        free(buf);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    xxh_init(&h);
    for (;;) {
        size_t got = 0;
        while (got < BUF) {
            ssize_t r = read(fd, buf + got, BUF - got);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0) {
                snprintf(err, errlen, "%s: %s", f->path, strerror(errno));
                free(buf);
                close(fd);
                return -1;
            }
            if (r == 0)
                break;
            got += (size_t)r;
        }
        *done += got;
        if (cb && cb->progress)
            cb->progress(cb->progress_ud, "hashing", *done, total);
        if (got < BUF) {
            *out = xxh_final(&h, buf, got);
            break;
        }
        xxh_stripes(&h, buf, got);
    }
    free(buf);
    close(fd);
    return 0;
}

/* s->hash from every input's name, size and bytes. */
static int make_key(src_info *s, const ui_models_cb *cb, char *err, size_t errlen)
{
    size_t cap = 64 + s->n * (PATH_MAX + 24), len;
    char *m = malloc(cap);
    uint64_t total = 0, done = 0;
    if (!m) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < s->n; i++)
        total += (uint64_t)s->f[i].st.st_size;
    len = (size_t)snprintf(m, cap, "cflow-cache %d %s %d %d %s", CACHE_SCHEMA,
                           PACKAGE_VERSION, FMT_VERSION, FMT_CONVERTER_REV, s->kind);
    for (size_t i = 0; i < s->n; i++) {
        uint64_t fh;
        if (hash_file(&s->f[i], &fh, &done, total, cb, err, errlen)) {
            free(m);
            return -1;
        }
        /* a single file's name is not its content: only HF members are named */
        len += (size_t)snprintf(m + len, cap - len, "\n%s %llu %016llx",
                                strcmp(s->kind, "hf") ? (i ? "tokenizer" : "model")
                                                      : s->f[i].path + s->f[i].name,
                                (unsigned long long)s->f[i].st.st_size,
                                (unsigned long long)fh);
    }
    snprintf(s->hash, sizeof s->hash, "%016llx", (unsigned long long)xxh_once(m, len));
    free(m);
    return 0;
}

/* ---- sidecars --------------------------------------------------------- */
static int64_t ns_of(const struct timespec *t)
{
    return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

static int64_t jint(json_object *o, const char *k)
{
    json_object *v;
    return json_object_object_get_ex(o, k, &v) ? json_object_get_int64(v) : -1;
}

static const char *jstr(json_object *o, const char *k)
{
    json_object *v;
    return json_object_object_get_ex(o, k, &v) && json_object_is_type(v, json_type_string)
               ? json_object_get_string(v)
               : "";
}

/* 1 when the sidecar's inputs stat as s's do now. */
static int same_inputs(json_object *side, const src_info *s)
{
    json_object *files;
    if (!json_object_object_get_ex(side, "files", &files) ||
        !json_object_is_type(files, json_type_array) ||
        json_object_array_length(files) != s->n || strcmp(jstr(side, "kind"), s->kind))
        return 0;
    for (size_t i = 0; i < s->n; i++) {
        json_object *f = json_object_array_get_idx(files, i);
        const struct stat *st = &s->f[i].st;
        if (jint(f, "size") != (int64_t)st->st_size || jint(f, "dev") != (int64_t)st->st_dev ||
            jint(f, "ino") != (int64_t)st->st_ino || jint(f, "mtime_ns") != ns_of(&st->st_mtim) ||
            jint(f, "ctime_ns") != ns_of(&st->st_ctim))
            return 0;
    }
    return 1;
}

/* 1 when the .cflow beside a sidecar is the file it recorded. */
static int cflow_intact(json_object *side, const char *cflow)
{
    struct stat st;
    return lstat(cflow, &st) == 0 && S_ISREG(st.st_mode) &&
           jint(side, "size") == (int64_t)st.st_size &&
           jint(side, "mtime_ns") == ns_of(&st.st_mtim) &&
           jint(side, "ctime_ns") == ns_of(&st.st_ctim);   /* touch restores mtime only */
}

static json_object *read_sidecar(const char *json_path)
{
    json_object *o = json_object_from_file(json_path);
    if (o && (!json_object_is_type(o, json_type_object) || jint(o, "cache") != CACHE_SCHEMA)) {
        json_object_put(o);
        o = NULL;
    }
    return o;
}

/* Write the sidecar of cflow (its .json beside it) for s: a temporary
 * file renamed into place. */
/* write(2) of all n bytes (CFLOW_FAULT=convert:enospc's full disk
 * included, prof_fault_room): 0, or -1 with errno. */
static int put(int fd, const char *buf, size_t n)
{
    size_t room = prof_fault_room(n);
    while (room) {
        ssize_t w = write(fd, buf, room);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        buf += w;
        room -= (size_t)w;
        n -= (size_t)w;
    }
    if (n)
        errno = ENOSPC;
    return n ? -1 : 0;
}

static int write_sidecar(const char *cflow, const src_info *s, char *err, size_t errlen)
{
    char side[PATH_MAX], tmp[PATH_MAX + 16];
    struct stat cst;
    size_t l = strlen(cflow) - strlen(".cflow");
    snprintf(side, sizeof side, "%.*s.json", (int)l, cflow);
    snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", side);
    if (stat(cflow, &cst)) {
        snprintf(err, errlen, "%s: %s", cflow, strerror(errno));
        return -1;
    }
    json_object *o = json_object_new_object(), *files = json_object_new_array();
    json_object_object_add(o, "cache", json_object_new_int(CACHE_SCHEMA));
    json_object_object_add(o, "source", json_object_new_string(s->real));
    json_object_object_add(o, "kind", json_object_new_string(s->kind));
    json_object_object_add(o, "hash", json_object_new_string(s->hash));
    json_object_object_add(o, "converted", json_object_new_int64((int64_t)time(NULL)));
    json_object_object_add(o, "cflow", json_object_new_string(PACKAGE_VERSION));
    json_object_object_add(o, "size", json_object_new_int64((int64_t)cst.st_size));
    json_object_object_add(o, "mtime_ns", json_object_new_int64(ns_of(&cst.st_mtim)));
    json_object_object_add(o, "ctime_ns", json_object_new_int64(ns_of(&cst.st_ctim)));
    for (size_t i = 0; i < s->n; i++) {
        const struct stat *st = &s->f[i].st;
        json_object *f = json_object_new_object();
        json_object_object_add(f, "path", json_object_new_string(s->f[i].path));
        json_object_object_add(f, "size", json_object_new_int64((int64_t)st->st_size));
        json_object_object_add(f, "dev", json_object_new_int64((int64_t)st->st_dev));
        json_object_object_add(f, "ino", json_object_new_int64((int64_t)st->st_ino));
        json_object_object_add(f, "mtime_ns", json_object_new_int64(ns_of(&st->st_mtim)));
        json_object_object_add(f, "ctime_ns", json_object_new_int64(ns_of(&st->st_ctim)));
        json_object_array_add(files, f);
    }
    json_object_object_add(o, "files", files);
    const char *txt = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
                                                            JSON_C_TO_STRING_NOSLASHESCAPE);
    int fd = mkstemp(tmp), rc = -1;
    if (fd >= 0 && !put(fd, txt, strlen(txt)) && !put(fd, "\n", 1) && fsync(fd) == 0 &&
        close(fd) == 0) {
        fd = -1;
        rc = rename(tmp, side);
    }
    if (rc) {
        snprintf(err, errlen, "cannot write %s: %s", side, strerror(errno));
        if (fd >= 0)
            close(fd);
        unlink(tmp);
    }
    json_object_put(o);
    return rc;
}

/* Visit every STEM-HASH.cflow of the folder with its sidecar (NULL when
 * it has none or it is unreadable): fn returns non-zero to stop, and
 * that is returned. */
typedef int (*visit_fn)(void *ctx, const char *cflow, json_object *side);
static int visit(const char *dir, visit_fn fn, void *ctx)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int rc = 0;
    while (d && !rc && (de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 23 || strcmp(de->d_name + l - 6, ".cflow"))
            continue;
        char cflow[PATH_MAX], side[PATH_MAX];
        struct stat st;
        snprintf(cflow, sizeof cflow, "%s/%s", dir, de->d_name);
        /* an entry is a regular file: a symlink or a folder named like
         * one is none (never listed, opened, counted or removed through) */
        if (lstat(cflow, &st) || !S_ISREG(st.st_mode))
            continue;
        snprintf(side, sizeof side, "%s/%.*s.json", dir, (int)(l - 6), de->d_name);
        json_object *o = read_sidecar(side);
        rc = fn(ctx, cflow, o);
        json_object_put(o);
    }
    if (d)
        closedir(d);
    return rc;
}

typedef struct find_ctx {
    const src_info *s;
    int             by_hash;   /* 0: the inputs' stat, 1: s->hash */
    char           *out;
    size_t          n;
} find_ctx;

static int find_one(void *ctx, const char *cflow, json_object *side)
{
    find_ctx *c = ctx;
    if (c->by_hash) {
        size_t l = strlen(cflow);
        if (strncmp(cflow + l - 6 - 16, c->s->hash, 16) || cflow[l - 6 - 17] != '-')
            return 0;
        /* only an entry whose sidecar agrees with it: a conversion writes
         * its sidecar under the lock, so one without was cut short between
         * the rename and the sidecar, or lost it, or was edited, truncated
         * or replaced by hand (its size or mtime disagree): it is
         * converted again, over it */
        if (!side || !cflow_intact(side, cflow))
            return 0;
    } else if (!side || !same_inputs(side, c->s) || !cflow_intact(side, cflow)) {
        return 0;
    }
    snprintf(c->out, c->n, "%s", cflow);
    return 1;
}

/* Remove what interrupted conversions left (their .tmp.XXXXXX files);
 * called under the lock, when no conversion can be writing one.
 * Returns the bytes freed. */
uint64_t ui_models_sweep(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    uint64_t freed = 0;
    while (d && (de = readdir(d))) {
        char p[PATH_MAX];
        struct stat st;
        if (!strstr(de->d_name, ".tmp."))
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (lstat(p, &st) == 0 && S_ISREG(st.st_mode) && unlink(p) == 0)
            freed += (uint64_t)st.st_size;
    }
    if (d)
        closedir(d);
    return freed;
}

/* The cache file's name for s: STEM-HASH.cflow. */
static void cache_name(const src_info *s, const char *dir, char *out, size_t n)
{
    const char *base = strrchr(s->real, '/');
    base = base && base[1] ? base + 1 : s->real;
    char stem[65];
    size_t k = 0;
    for (const char *p = base; *p && k < sizeof stem - 1; p++)
        stem[k++] = (char)((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                                   (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' ||
                                   *p == '.' || *p == '+'
                               ? *p
                               : '_');
    stem[k] = 0;
    char *dot = strrchr(stem, '.');
    if (dot && dot != stem && strcmp(s->kind, "hf"))
        *dot = 0;   /* the extension (.gguf, .bin) */
    snprintf(out, n, "%s/%s-%s.cflow", dir, stem, s->hash);
}

/* 1 when every input still stats as when it was hashed. */
static int unchanged(const src_info *s)
{
    for (size_t i = 0; i < s->n; i++) {
        struct stat st;
        const struct stat *a = &s->f[i].st;
        if (stat(s->f[i].path, &st) || st.st_size != a->st_size || st.st_ino != a->st_ino ||
            st.st_dev != a->st_dev || ns_of(&st.st_mtim) != ns_of(&a->st_mtim) ||
            ns_of(&st.st_ctim) != ns_of(&a->st_ctim))
            return 0;
    }
    return 1;
}

static void relay_log(void *ud, int level, const char *msg)
{
    const ui_models_cb *cb = ud;
    cb->log(cb->log_ud, level, msg);
}
static void relay_progress(void *ud, const char *what, uint64_t done, uint64_t total)
{
    const ui_models_cb *cb = ud;
    cb->progress(cb->progress_ud, what, done, total);
}

/* Under the lock: the conversion by hash, else convert now. */
static int convert_locked(const char *model, src_info *s, const char *dir, const ui_models_cb *cb,
                          char *out, size_t n, int *converted, char *err, size_t errlen)
{
    find_ctx fc = { s, 1, out, n };
    if (visit(dir, find_one, &fc)) {   /* another process made it meanwhile */
        if (unchanged(s))
            write_sidecar(out, s, err, errlen);   /* best effort: a stat shortcut */
        return 0;
    }
    ui_models_sweep(dir);
    fmt_convert_opts o;
    memset(&o, 0, sizeof o);
    o.force_type = -1;
    o.tokenizer_path = s->tok[0] ? s->tok : NULL;
    /* fmt_convert takes one ud for both callbacks: relay_* pass each
     * its own */
    o.log = cb && cb->log ? relay_log : NULL;
    o.progress = cb && cb->progress ? relay_progress : NULL;
    o.ud = (void *)cb;
    cache_name(s, dir, out, n);
    if (fmt_convert(model, out, &o, err, errlen))
        return -1;
    if (!unchanged(s)) {
        unlink(out);
        snprintf(err, errlen, "%s changed while it was converted: try again once it is "
                 "complete", s->real);
        return -1;
    }
    if (write_sidecar(out, s, err, errlen)) {
        unlink(out);
        return -1;
    }
    *converted = 1;
    return 0;
}

int ui_models_resolve(const char *model, const ui_models_cb *cb, char *out, size_t n,
                      int *converted, char *err, size_t errlen)
{
    src_info s;
    char dir[PATH_MAX];
    int rc;
    memset(&s, 0, sizeof s);
    *converted = 0;
    if ((rc = classify(model, &s, err, errlen)) > 0) {
        snprintf(out, n, "%s", model);
        free(s.f);
        return 0;
    }
    if (rc < 0 || ui_models_dir(dir, sizeof dir, err, errlen) ||
        make_dir(dir, err, errlen)) {
        free(s.f);
        return -1;
    }
    find_ctx fc = { &s, 0, out, n };
    if (visit(dir, find_one, &fc)) {   /* seen before: stat alone says so */
        free(s.f);
        return 0;
    }
    rc = -1;
    int lk = -1;
    if (!make_key(&s, cb, err, errlen) && (lk = ui_models_lock(dir, cb, err, errlen)) >= 0)
        rc = convert_locked(model, &s, dir, cb, out, n, converted, err, errlen);
    ui_models_unlock(lk);
    free(s.f);
    return rc;
}

/* ---- what the cache holds (cflow models) ------------------------------ */
typedef struct list_ctx {
    ui_model_entry *e;
    size_t          n, cap;
} list_ctx;

/* Whether the inputs a sidecar records still stat as they did. */
static int source_state(json_object *side)
{
    json_object *files;
    if (!side || !json_object_object_get_ex(side, "files", &files) ||
        !json_object_is_type(files, json_type_array))
        return UI_SRC_UNKNOWN;
    int state = UI_SRC_SAME;
    for (size_t i = 0; i < json_object_array_length(files); i++) {
        json_object *f = json_object_array_get_idx(files, i);
        struct stat st;
        if (stat(jstr(f, "path"), &st))
            return UI_SRC_GONE;
        if (jint(f, "size") != (int64_t)st.st_size || jint(f, "ino") != (int64_t)st.st_ino ||
            jint(f, "mtime_ns") != ns_of(&st.st_mtim) || jint(f, "ctime_ns") != ns_of(&st.st_ctim))
            state = UI_SRC_CHANGED;
    }
    return state;
}

static int list_one(void *ctx, const char *cflow, json_object *side)
{
    list_ctx *c = ctx;
    struct stat st;
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 16;
        ui_model_entry *ne = realloc(c->e, cap * sizeof *ne);
        if (!ne)
            return -1;
        c->e = ne;
        c->cap = cap;
    }
    ui_model_entry *e = &c->e[c->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->cflow, sizeof e->cflow, "%s", cflow);
    const char *base = strrchr(cflow, '/') + 1;
    snprintf(e->name, sizeof e->name, "%.*s", (int)(strlen(base) - 6), base);
    snprintf(e->hash, sizeof e->hash, "%s", e->name + strlen(e->name) - 16);
    e->size = stat(cflow, &st) ? 0 : (uint64_t)st.st_size;
    e->converted = side ? jint(side, "converted") : -1;
    if (e->converted < 0)
        e->converted = (int64_t)st.st_mtime;
    snprintf(e->source, sizeof e->source, "%s", side ? jstr(side, "source") : "");
    snprintf(e->kind, sizeof e->kind, "%s", side ? jstr(side, "kind") : "");
    e->state = source_state(side);
    return 0;
}

static int newest_first(const void *a, const void *b)
{
    const ui_model_entry *x = a, *y = b;
    return x->converted != y->converted ? (x->converted < y->converted ? 1 : -1)
                                        : strcmp(x->name, y->name);
}

int ui_models_list(const char *dir, ui_model_entry **out, size_t *n, uint64_t *partial,
                   char *err, size_t errlen)
{
    list_ctx c = { 0 };
    struct stat st;
    *out = NULL;
    *n = 0;
    *partial = 0;
    if (stat(dir, &st))
        return errno == ENOENT ? 0 : (snprintf(err, errlen, "%s: %s", dir, strerror(errno)), -1);
    if (visit(dir, list_one, &c)) {
        free(c.e);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (strstr(de->d_name, ".tmp.") && lstat(p, &st) == 0 && S_ISREG(st.st_mode))
            *partial += (uint64_t)st.st_size;
    }
    if (d)
        closedir(d);
    if (c.n)   /* qsort of NULL is undefined even for no elements */
        qsort(c.e, c.n, sizeof *c.e, newest_first);
    *out = c.e;
    *n = c.n;
    return 0;
}

int ui_models_remove(const ui_model_entry *e, uint64_t *freed)
{
    char side[PATH_MAX];
    struct stat st;
    snprintf(side, sizeof side, "%.*s.json", (int)(strlen(e->cflow) - 6), e->cflow);
    if (stat(e->cflow, &st) == 0 && unlink(e->cflow) == 0)
        *freed += (uint64_t)st.st_size;
    else if (errno != ENOENT)
        return -1;
    if (unlink(side) && errno != ENOENT)
        return -1;
    return 0;
}

/* ---- cflow's front end ------------------------------------------------ */
void ui_models_size(uint64_t b, char *buf, size_t n)
{
    if (b >= (1ull << 30))
        snprintf(buf, n, "%.1f GiB", (double)b / (1ull << 30));
    else if (b >= (1ull << 20))
        snprintf(buf, n, "%.1f MiB", (double)b / (1ull << 20));
    else
        snprintf(buf, n, "%.1f KiB", (double)b / 1024);
}

void ui_models_converted_line(char *buf, size_t n, const char *model, const char *cflow)
{
    struct stat st;
    char sz[32] = "";
    if (stat(cflow, &st) == 0)
        ui_models_size((uint64_t)st.st_size, sz, sizeof sz);
    snprintf(buf, n, "converted %s into %s (%s; cflow models lists the cache)", model, cflow,
             sz);
}

const char *ui_model_path(const char *model, char *buf, size_t n)
{
    char err[1024];
    int converted;
    ui_models_cb cb = { ui_log, NULL, ui_progress, NULL };
    if (ui_models_resolve(model, &cb, buf, n, &converted, err, sizeof err)) {
        ui_error("%s", err);
        return NULL;
    }
    if (converted) {
        char line[PATH_MAX * 2 + 128];
        ui_models_converted_line(line, sizeof line, model, buf);
        ui_eprintf("cflow: %s\n", line);
    }
    return buf;
}
