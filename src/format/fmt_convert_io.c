/*
 * fmt_convert_io.c — what keeps `cflow convert` and `cflow synth` in
 * bounded memory and never leaves a half-written model: the source's
 * pages brought in and handed back as the writer consumes them, and the
 * output file created unnamed and given its name only when complete.
 *
 * Input: the sources map their files (GGUF, llama2.c, safetensors) or
 * reserve address space for drawn weights (synth).  The writer reads one
 * 128-row stripe of a matrix at a time; fmt_conv_load makes a byte range
 * readable first (a synthetic source draws it) and fmt_conv_release hands
 * its pages back with MADV_DONTNEED.  On a read-only private file mapping
 * that only drops page-table entries (a later read faults the page back in
 * from the page cache), so releasing more than the range, as long as it
 * stays inside the mapping, is always safe; on the synthetic reservation
 * it frees the memory, so there exactly the range's pages go (tensors
 * there never share a page).  Resident input is then about one stripe per
 * fused matrix, whatever the model's size.
 *
 * Output: fmt_out_open creates the file with O_TMPFILE in the output's
 * folder (no name at all until fmt_out_commit links it in), so a run
 * killed by any signal leaves nothing behind; where the filesystem refuses
 * O_TMPFILE it falls back to a named temporary "OUT.tmp.XXXXXX" beside the
 * output.  fmt_out_commit flushes, fsyncs and renames over the output, so
 * an existing file at that path is replaced only by a complete one; any
 * failure before leaves it untouched.
 *
 * Under CFLOW_FAULT=convert:enospc@N the output is written through a
 * cookie stream whose writes take prof_fault_room's bytes and fail the
 * rest with ENOSPC: a full disk at any byte of the output, for the tests.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/fmt_impl.h"
#include "prof/prof.h"

/* ---- input ------------------------------------------------------------ */

/* Pages before a released range that are released with it: page faults
 * map more than the faulting page (fault-around, and a whole large folio
 * of the page cache, up to a 2 MiB PMD), so a read of stripe s maps pages
 * of stripe s - 1 again after they were released; reaching back this far
 * hands those back too, so nothing is left behind as the writer moves on. */
#define CONV_BACK ((uintptr_t)4 << 20)

int fmt_conv_begin(fmt_conv_src *c, const fmt_src *s)
{
    memset(c, 0, sizeof c[0]);
    c->s = s;
    c->page = (uintptr_t)sysconf(_SC_PAGESIZE);
    c->synth = s->kind && !strcmp(s->kind, "synth");
    size_t n = s->n_maps + (s->gguf ? 1 : 0);
    if (!(c->r = calloc(n ? n : 1, sizeof c->r[0])))
        return -1;
    for (size_t i = 0; i < s->n_maps; i++) {
        c->r[c->n].lo = (uintptr_t)s->maps[i].p;
        c->r[c->n].hi = (uintptr_t)s->maps[i].p + s->maps[i].n;
        c->n++;
    }
    if (s->gguf) { /* the span of its tensors lies inside its mapping */
        uintptr_t lo = UINTPTR_MAX, hi = 0;
        for (uint64_t i = 0; i < fmt_gguf_n_tensors(s->gguf); i++) {
            const fmt_tensor *t = fmt_gguf_tensor(s->gguf, i);
            if (!t || !t->data || !t->nbytes)
                continue;
            if ((uintptr_t)t->data < lo)
                lo = (uintptr_t)t->data;
            if ((uintptr_t)t->data + t->nbytes > hi)
                hi = (uintptr_t)t->data + t->nbytes;
        }
        if (lo < hi) {
            c->r[c->n].lo = lo;
            c->r[c->n].hi = hi;
            c->n++;
        }
    }
    return 0;
}

void fmt_conv_end(fmt_conv_src *c)
{
    free(c->r);
    c->r = NULL;
    c->n = 0;
}

int fmt_conv_load(fmt_conv_src *c, const void *p, uint64_t n)
{
    return n && c->s->fill ? c->s->fill(c->s, p, n) : 0;
}

void fmt_conv_release(fmt_conv_src *c, const void *p, uint64_t n)
{
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)p + n;
    size_t i = 0;
    if (!n)
        return;
    while (i < c->n && !(a >= c->r[i].lo && b <= c->r[i].hi))
        i++;
    if (i == c->n)
        return; /* not in a mapping we know: leave it */
    if (!c->synth) /* reach back, never below the mapping */
        a = a - c->r[i].lo > CONV_BACK ? a - CONV_BACK : c->r[i].lo;
    a &= ~(c->page - 1);
    b = (b + c->page - 1) & ~(c->page - 1);
    /* advice only: a failure leaves pages resident, never wrong bytes */
    (void)madvise((void *)a, b - a, MADV_DONTNEED);
}

/* The .cflow writer reads each bound tensor once (fmt_impl.h). */
uint64_t fmt_conv_total(const fmt_src *src)
{
    const fmt_hparams *hp = fmt_src_hparams(src);
    const fmt_tensor *emb = fmt_src_tensor(src, FMT_R_TOK_EMBD, 0);
    uint64_t total = 0;
    for (int r = 0; r < FMT_NROLES; r++) {
        /* only the globals answer for the row past the last layer */
        const fmt_tensor *g = fmt_src_tensor(src, r, hp->n_layers);
        if (g) {
            if (r == FMT_R_TOK_EMBD || (g != emb && !(r == FMT_R_OUTPUT &&
                                                      (hp->flags & FMT_FLAG_TIED))))
                total += g->nbytes;
            continue;
        }
        for (unsigned l = 0; l < hp->n_layers; l++) {
            const fmt_tensor *t = fmt_src_tensor(src, r, l);
            total += t ? t->nbytes : 0;
        }
    }
    return total;
}

/* ---- output ----------------------------------------------------------- */

static int out_fail(char *err, size_t errlen, const char *path, const char *what)
{
    fmt_err(err, errlen, "%s: %s: %s", path, what, strerror(errno));
    return FMT_EIO;
}

/* The folder of path ("." when it has none) into dir[n]. */
static void out_dir(const char *path, char *dir, size_t n)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, n, ".");
    else if (slash == path)
        snprintf(dir, n, "/");
    else
        snprintf(dir, n, "%.*s", (int)(slash - path), path);
}

/* The cookie stream of CFLOW_FAULT=convert:enospc: the descriptor as a
 * disk that fills up (short writes, then ENOSPC). */
static ssize_t full_write(void *c, const char *buf, size_t n)
{
    size_t room = prof_fault_room(n);
    ssize_t w = room ? write(*(int *)c, buf, room) : 0;
    if (w >= 0 && (size_t)w < n)
        errno = ENOSPC;   /* (a short count is the cookie's error) */
    return w < 0 ? 0 : w;
}
static int full_seek(void *c, off64_t *off, int whence)
{
    off_t r = lseek(*(int *)c, (off_t)*off, whence);
    if (r < 0)
        return -1;
    *off = r;
    return 0;
}
static int full_close(void *c) { return close(*(int *)c); }

static FILE *out_stream(fmt_out *o)
{
    unsigned long at;
    if (!prof_fault_get("convert:enospc", &at))
        return fdopen(o->fd, "wb");
    cookie_io_functions_t io = { NULL, full_write, full_seek, full_close };
    return fopencookie(&o->fd, "wb", io);
}

int fmt_out_open(fmt_out *o, const char *path, char *err, size_t errlen)
{
    char dir[4096];
    int fd;
    memset(o, 0, sizeof o[0]);
    o->path = path;
    out_dir(path, dir, sizeof dir);
#ifdef O_TMPFILE
    fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
    if (fd >= 0)
        goto opened;
#endif
    if (!(o->tmp = malloc(strlen(path) + 16))) {
        fmt_err(err, errlen, "%s: out of memory", path);
        return FMT_ENOMEM;
    }
    sprintf(o->tmp, "%s.tmp.XXXXXX", path);
    if ((fd = mkstemp(o->tmp)) < 0) {
        int rc = out_fail(err, errlen, path, "cannot create");
        free(o->tmp);
        o->tmp = NULL;
        return rc;
    }
    mode_t um = umask(022); /* what a plain create would give */
    umask(um);
    (void)fchmod(fd, 0666 & ~um);
#ifdef O_TMPFILE
opened:
#endif
    o->fd = fd;
    if (!(o->f = out_stream(o))) {
        int rc = out_fail(err, errlen, path, "cannot create");
        close(fd);
        fmt_out_abort(o);
        return rc;
    }
    setvbuf(o->f, NULL, _IOFBF, 1 << 20);
    return 0;
}

/* An unnamed file gets a name: the output's own when nothing is there,
 * else a fresh temporary one that commit renames over it. */
static int out_link(fmt_out *o, char *err, size_t errlen)
{
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", o->fd);
    if (linkat(AT_FDCWD, proc, AT_FDCWD, o->path, AT_SYMLINK_FOLLOW) == 0)
        return 1;
    if (errno != EEXIST)
        return out_fail(err, errlen, o->path, "cannot name the new file");
    if (!(o->tmp = malloc(strlen(o->path) + 32))) {
        fmt_err(err, errlen, "%s: out of memory", o->path);
        return FMT_ENOMEM;
    }
    for (unsigned i = 0; i < 100; i++) {
        sprintf(o->tmp, "%s.tmp.%ld.%u", o->path, (long)getpid(), i);
        if (linkat(AT_FDCWD, proc, AT_FDCWD, o->tmp, AT_SYMLINK_FOLLOW) == 0)
            return 0;
        if (errno != EEXIST)
            break;
    }
    int rc = out_fail(err, errlen, o->path, "cannot name the new file");
    free(o->tmp);
    o->tmp = NULL;
    return rc;
}

int fmt_out_commit(fmt_out *o, char *err, size_t errlen)
{
    int named = 0;
    if (fflush(o->f) || fsync(o->fd))
        return out_fail(err, errlen, o->path, "write failed");
    if (!o->tmp && (named = out_link(o, err, errlen)) < 0)
        return named;
    FILE *f = o->f;
    o->f = NULL;
    if (fclose(f)) {
        int rc = out_fail(err, errlen, o->path, "write failed");
        if (named)
            unlink(o->path);
        return rc;
    }
    if (!named && rename(o->tmp, o->path))
        return out_fail(err, errlen, o->path, "cannot rename into place");
    free(o->tmp);
    o->tmp = NULL;
    return 0;
}

void fmt_out_abort(fmt_out *o)
{
    if (o->f)
        fclose(o->f);
    o->f = NULL;
    if (o->tmp) {
        unlink(o->tmp);
        free(o->tmp);
    }
    o->tmp = NULL;
}
