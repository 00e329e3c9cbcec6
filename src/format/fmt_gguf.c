/*
 * fmt_gguf.c — reading GGUF files (versions 2 and 3).
 *
 * A GGUF file, little endian throughout:
 *
 *   u8[4]  magic "GGUF"
 *   u32    version (2 or 3; version 1 used 32-bit counts and is refused)
 *   u64    n_tensors
 *   u64    n_kv
 *   n_kv   key/values in the fmt_kv encoding (see fmt_kv.c)
 *   n_tensors tensor infos:
 *            u64 name length + name bytes
 *            u32 n_dims (1..4)
 *            u64 ne[n_dims]      ne[0] = columns (innermost, contiguous)
 *            u32 type            enum fmt_dtype (GGML's numbers)
 *            u64 offset          from the start of the data section;
 *                                a multiple of the alignment
 *   padding to the alignment (general.alignment, default 32)
 *   data section: tensor data at the offsets above
 *
 * The whole file is mapped read-only; tensors and string values point into
 * the mapping, so a fmt_gguf costs a few hundred bytes per tensor however
 * large the model.
 *
 * Everything is checked before use: counts against the bytes that remain
 * (no allocation larger than the file can justify), every string length,
 * every dimension (non-zero, product without overflow, ne[0] a multiple of
 * the type's block), every type (we must know its size), and every tensor's
 * offset + size against the end of the file.  A failure yields one line,
 * "PATH: what is wrong".
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/cflow_format.h"
#include "format/fmt_impl.h"

#define GGUF_DEFAULT_ALIGN 32
#define GGUF_MAX_NAME      4096   /* generous: ggml itself stops at 63 */

/* ---- opening and mapping files ----------------------------------------- */
const char *fmt_file_kind(unsigned mode)
{
    return S_ISREG(mode) ? "a regular file" : S_ISFIFO(mode) ? "a FIFO"
         : S_ISDIR(mode) ? "a directory" : S_ISCHR(mode) ? "a character device"
         : S_ISBLK(mode) ? "a block device" : S_ISSOCK(mode) ? "a socket"
         : "of an unknown type";
}

int fmt_open_regular(const char *path, uint64_t *size, char *err, size_t errlen)
{
    struct stat st;
    /* the type before any open: opening a device may act on it, and a
     * FIFO's open blocks until a writer comes */
    if (stat(path, &st) < 0) {
        fmt_err(err, errlen, "%s: %s", path, strerror(errno));
        return FMT_EIO;
    }
    if (!S_ISREG(st.st_mode)) {
        fmt_err(err, errlen, "%s: not a regular file (it is %s)", path,
                fmt_file_kind(st.st_mode));
        return FMT_EIO;
    }
    /* O_NONBLOCK: a FIFO put in the file's place since the stat must not
     * block either; fstat checks what was opened */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        fmt_err(err, errlen, "%s: %s", path, strerror(errno));
        return FMT_EIO;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        fmt_err(err, errlen, "%s: not a regular file (it is %s)", path,
                fmt_file_kind(st.st_mode));
        close(fd);
        return FMT_EIO;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    *size = (uint64_t)st.st_size;
    return fd;
}

int fmt_file_head(const char *path, void *buf, size_t n, size_t *got,
                  uint64_t *size, char *err, size_t errlen)
{
    int fd = fmt_open_regular(path, size, err, errlen);
    if (fd < 0)
        return fd;
    size_t have = 0;
    while (have < n) {
        ssize_t r = read(fd, (char *)buf + have, n - have);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            fmt_err(err, errlen, "%s: %s", path, strerror(errno));
            close(fd);
            return FMT_EIO;
        }
        if (r == 0)
            break;
        have += (size_t)r;
    }
    close(fd);
    *got = have;
    return FMT_OK;
}

int fmt_map_open(fmt_map *m, const char *path, char *err, size_t errlen)
{
    uint64_t size;
    memset(m, 0, sizeof *m);
    int fd = fmt_open_regular(path, &size, err, errlen);
    if (fd < 0)
        return fd;
    if (size == 0) {
        fmt_err(err, errlen, "%s: empty file", path);
        close(fd);
        return FMT_EFORMAT;
    }
    if (size > SIZE_MAX) {
        fmt_err(err, errlen, "%s: too large to map", path);
        close(fd);
        return FMT_EIO;
    }
    void *p = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) {
        fmt_err(err, errlen, "%s: mmap: %s", path, strerror(e));
        return FMT_EIO;
    }
    m->p = p;
    m->n = (size_t)size;
    return FMT_OK;
}

void fmt_map_close(fmt_map *m)
{
    if (m->p)
        munmap((void *)m->p, m->n);
    m->p = NULL;
    m->n = 0;
}

/* ---- the reader -------------------------------------------------------- */
struct fmt_gguf {
    fmt_map     map;
    fmt_kv     *kv;
    uint64_t    n_tensors;
    fmt_tensor *t;        /* [n_tensors] */
    char       *names;    /* NUL-terminated names, back to back */
    fmt_names   idx;      /* name -> index in t */
    uint32_t    version, alignment;
    uint64_t    data_off; /* start of the data section in the file */
};

void fmt_gguf_close(fmt_gguf *g)
{
    if (!g)
        return;
    fmt_kv_free(g->kv);
    free(g->t);
    free(g->names);
    fmt_names_free(&g->idx);
    fmt_map_close(&g->map);
    free(g);
}

/* A parse in progress: the mapping, the read position and the messages. */
typedef struct gguf_rd {
    fmt_gguf      *g;
    const char    *path;
    const uint8_t *p;
    size_t         n, o;     /* file bytes; read offset */
    size_t         no;       /* bytes used in g->names */
    char          *err;
    size_t         errlen;
} gguf_rd;

/* Magic, version, the two counts and the key/values; r->o ends past them. */
static int gguf_header(gguf_rd *r)
{
    fmt_gguf *g = r->g;
    const uint8_t *p = r->p;
    size_t n = r->n;
    const char *path = r->path;
    char *err = r->err;
    size_t errlen = r->errlen;
    if (n < 4 || memcmp(p, "GGUF", 4) != 0) {
        fmt_err(err, errlen, "%s: not a GGUF file (bad magic)", path);
        return FMT_EFORMAT;
    }
    if (n < 24) {
        fmt_err(err, errlen, "%s: truncated GGUF header (%zu bytes)", path,
                n);
        return FMT_EFORMAT;
    }
    g->version = kern_ld_u32(p + 4);
    if (g->version != 2 && g->version != 3) {
        fmt_err(err, errlen, "%s: unsupported GGUF version %u (2 and 3 are "
                "read)", path, g->version);
        return g->version == 1 ? FMT_EUNSUP : FMT_EFORMAT;
    }
    g->n_tensors = kern_ld_u64(p + 8);
    uint64_t n_kv = kern_ld_u64(p + 16);
    r->o = 24;
    /* A tensor info takes at least 8+1 (name) + 4 + 8 (one dim) + 4 + 8. */
    if (g->n_tensors > (n - r->o) / 33) {
        fmt_err(err, errlen, "%s: %llu tensors cannot fit in a file of %zu "
                "bytes", path, (unsigned long long)g->n_tensors, n);
        return FMT_EFORMAT;
    }
    g->kv = fmt_kv_new();
    if (!g->kv) {
        fmt_err(err, errlen, "%s: out of memory", path);
        return FMT_ENOMEM;
    }
    size_t used;
    int rc = fmt_kv_parse(g->kv, p + r->o, n - r->o, n_kv, &used, path, err,
                          errlen);
    if (rc < 0)
        return rc;
    r->o += used;

    /* general.alignment: a power of two (ggml insists on u32; accept any
     * integer type that fits). */
    g->alignment = GGUF_DEFAULT_ALIGN;
    if (fmt_kv_has(g->kv, "general.alignment")) {
        uint32_t a;
        if (fmt_kv_get_u32(g->kv, "general.alignment", &a) < 0 || a == 0 ||
            (a & (a - 1)) != 0) {
            fmt_err(err, errlen, "%s: general.alignment is not a power of "
                    "two", path);
            return FMT_EFORMAT;
        }
        g->alignment = a;
    }
    return FMT_OK;
}

/* Tensor info i's name, copied NUL-terminated into g->names; *len gets its
 * length and nm a printable copy for messages. */
static int gguf_tensor_name(gguf_rd *r, uint64_t i, size_t *len, char nm[64])
{
    fmt_gguf *g = r->g;
    fmt_tensor *t = &g->t[i];
    if (r->n - r->o < 8) {
        fmt_err(r->err, r->errlen, "%s: tensor %llu: truncated name length",
                r->path, (unsigned long long)i);
        return FMT_EFORMAT;
    }
    uint64_t l = kern_ld_u64(r->p + r->o);
    r->o += 8;
    if (l == 0 || l > GGUF_MAX_NAME || l > r->n - r->o) {
        fmt_err(r->err, r->errlen, "%s: tensor %llu: bad name length %llu",
                r->path, (unsigned long long)i, (unsigned long long)l);
        return FMT_EFORMAT;
    }
    const char *name = (const char *)(r->p + r->o);
    if (memchr(name, '\0', (size_t)l)) {
        fmt_err(r->err, r->errlen, "%s: tensor %llu: name contains a NUL byte",
                r->path, (unsigned long long)i);
        return FMT_EFORMAT;
    }
    memcpy(g->names + r->no, name, (size_t)l);
    g->names[r->no + l] = '\0';
    t->name = g->names + r->no;
    r->no += (size_t)l + 1;
    r->o += (size_t)l;
    *len = (size_t)l;
    fmt_safe_name(nm, name, (size_t)l);
    return FMT_OK;
}

/* Tensor info i: name, dimensions, type and offset (kept in t->data until
 * the data section is known), each checked. */
static int gguf_tensor_info(gguf_rd *r, uint64_t i)
{
    fmt_gguf *g = r->g;
    fmt_tensor *t = &g->t[i];
    const uint8_t *p = r->p;
    size_t n = r->n;
    const char *path = r->path;
    char *err = r->err;
    size_t errlen = r->errlen;
    char nm[64];
    size_t len;
    int rc = gguf_tensor_name(r, i, &len, nm);
    if (rc < 0)
        return rc;
    if (n - r->o < 4) {
        fmt_err(err, errlen, "%s: tensor '%s': truncated", path, nm);
        return FMT_EFORMAT;
    }
    uint32_t nd = kern_ld_u32(p + r->o);
    r->o += 4;
    if (nd < 1 || nd > 4) {
        fmt_err(err, errlen, "%s: tensor '%s': %u dimensions (1..4 "
                "allowed)", path, nm, nd);
        return FMT_EFORMAT;
    }
    if (n - r->o < (size_t)nd * 8 + 12) {
        fmt_err(err, errlen, "%s: tensor '%s': truncated", path, nm);
        return FMT_EFORMAT;
    }
    t->ndim = nd;
    uint64_t nel = 1;
    for (unsigned d = 0; d < 4; d++)
        t->ne[d] = 1;
    for (unsigned d = 0; d < nd; d++) {
        uint64_t v = kern_ld_u64(p + r->o + 8 * d);
        if (v == 0 || v > (uint64_t)INT64_MAX || nel > UINT64_MAX / v) {
            fmt_err(err, errlen, "%s: tensor '%s': bad dimension %u "
                    "(%llu)", path, nm, d, (unsigned long long)v);
            return FMT_EFORMAT;
        }
        t->ne[d] = v;
        nel *= v;
    }
    r->o += (size_t)nd * 8;
    t->ndim = fmt_shape_rank(t->ne, nd);
    uint32_t type = kern_ld_u32(p + r->o);
    uint64_t off = kern_ld_u64(p + r->o + 4);
    r->o += 12;
    unsigned blk = fmt_dtype_block((int)type);
    if (blk == 0) {
        fmt_err(err, errlen, "%s: tensor '%s': GGML type %u is not "
                "supported", path, nm, type);
        return FMT_EUNSUP;
    }
    if (t->ne[0] % blk != 0) {
        fmt_err(err, errlen, "%s: tensor '%s': %llu columns are not a "
                "multiple of the %s block (%u)", path, nm,
                (unsigned long long)t->ne[0], fmt_dtype_name((int)type),
                blk);
        return FMT_EFORMAT;
    }
    t->dtype = (int)type;
    t->nbytes = fmt_dtype_size(t->dtype, nel);
    if (t->nbytes == 0 || t->nbytes > n) {
        fmt_err(err, errlen, "%s: tensor '%s': %llu elements of %s do "
                "not fit in the file", path, nm,
                (unsigned long long)nel, fmt_dtype_name(t->dtype));
        return FMT_EFORMAT;
    }
    if (off % g->alignment != 0) {
        fmt_err(err, errlen, "%s: tensor '%s': offset %llu is not "
                "aligned to %u", path, nm, (unsigned long long)off,
                g->alignment);
        return FMT_EFORMAT;
    }
    /* data pointer is resolved once the data section is known */
    t->data = (const void *)(uintptr_t)off;
    int e = fmt_names_put(&g->idx, t->name, len, (size_t)i, NULL);
    if (e < 0) {
        fmt_err(err, errlen, "%s: out of memory", path);
        return FMT_ENOMEM;
    }
    if (e > 0) {
        fmt_err(err, errlen, "%s: tensor '%s' appears twice", path, nm);
        return FMT_EFORMAT;
    }
    return FMT_OK;
}

/* The data section starts at the next multiple of the alignment after the
 * infos (a file without tensors may end right there); every tensor's data
 * must lie inside the file. */
static int gguf_data(gguf_rd *r)
{
    fmt_gguf *g = r->g;
    size_t n = r->n;
    char nm[64];
    uint64_t ds = ((uint64_t)r->o + g->alignment - 1) / g->alignment *
                  g->alignment;
    if (g->n_tensors > 0 && ds > n) {
        fmt_err(r->err, r->errlen, "%s: truncated before the tensor data",
                r->path);
        return FMT_EFORMAT;
    }
    g->data_off = ds;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        fmt_tensor *t = &g->t[i];
        uint64_t off = (uint64_t)(uintptr_t)t->data;
        if (off > n - ds || t->nbytes > n - ds - off) {
            /* the two values, never their sum: an offset near 2^64 would
             * print wrapped */
            fmt_err(r->err, r->errlen, "%s: tensor '%s': offset %llu (+%llu bytes) "
                    "from the data section at byte %llu runs past the end of the "
                    "%zu-byte file", r->path, fmt_safe_name(nm, t->name, strlen(t->name)),
                    (unsigned long long)off, (unsigned long long)t->nbytes,
                    (unsigned long long)ds, n);
            return FMT_EFORMAT;
        }
        t->data = r->p + ds + off;
    }
    return FMT_OK;
}

int fmt_gguf_open(fmt_gguf **out, const char *path, char *err, size_t errlen)
{
    int rc;
    fmt_gguf *g;
    if (!out || !path) {
        fmt_err(err, errlen, "fmt_gguf_open: bad arguments");
        return FMT_EARG;
    }
    *out = NULL;
    g = calloc(1, sizeof *g);
    if (!g) {
        fmt_err(err, errlen, "%s: out of memory", path);
        return FMT_ENOMEM;
    }
    rc = fmt_map_open(&g->map, path, err, errlen);
    if (rc < 0) {
        free(g);
        return rc;
    }
    gguf_rd r = { g, path, g->map.p, g->map.n, 0, 0, err, errlen };
    if ((rc = gguf_header(&r)) < 0)
        goto fail;
    /* Tensor infos.  The names are copied (NUL-terminated) into one block,
     * of at most GGUF_MAX_NAME bytes a name and never more than the bytes
     * left in the file.  The file alone was the bound once: a 32 GB GGUF
     * asked malloc for 32 GB, which a machine with less memory refuses
     * (overcommit's heuristic), so the open failed "out of memory". */
    uint64_t name_bytes = r.n - r.o;
    if (g->n_tensors < name_bytes / GGUF_MAX_NAME)
        name_bytes = g->n_tensors * GGUF_MAX_NAME;
    g->t = calloc(g->n_tensors ? (size_t)g->n_tensors : 1, sizeof *g->t);
    g->names = malloc((size_t)name_bytes + (size_t)g->n_tensors + 1);
    if (!g->t || !g->names) {
        fmt_err(err, errlen, "%s: out of memory", path);
        rc = FMT_ENOMEM;
        goto fail;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if ((rc = gguf_tensor_info(&r, i)) < 0)
            goto fail;
    if ((rc = gguf_data(&r)) < 0)
        goto fail;
    *out = g;
    return FMT_OK;
fail:
    fmt_gguf_close(g);
    return rc;
}

const fmt_kv *fmt_gguf_kv(const fmt_gguf *g)
{
    return g ? g->kv : NULL;
}

uint64_t fmt_gguf_n_tensors(const fmt_gguf *g)
{
    return g ? g->n_tensors : 0;
}

const fmt_tensor *fmt_gguf_tensor(const fmt_gguf *g, uint64_t i)
{
    return (g && i < g->n_tensors) ? &g->t[i] : NULL;
}

const fmt_tensor *fmt_gguf_find(const fmt_gguf *g, const char *name)
{
    size_t i;
    if (!g || !name ||
        fmt_names_get(&g->idx, name, strlen(name), &i) < 0)
        return NULL;
    return &g->t[i];
}
