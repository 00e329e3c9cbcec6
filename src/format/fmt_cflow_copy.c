/*
 * fmt_cflow_copy.c — a model file's bytes in anonymous memory (the reader's
 * FMT_OPEN_READ, fmt_cflow_read.c), for the open that copies instead of
 * mapping.
 *
 * The file's bytes in anonymous memory instead of a file mapping.  Decode
 * streams every weight once per token, and on 2 vCPUs of a Sapphire
 * Rapids Xeon (docs/perf-log/2026-12-01.md) it streamed 5-10% faster from
 * anonymous memory with transparent huge pages advised than from the page
 * cache's 4 KiB pages (fewer TLB walks; llama.cpp's repacked weights live
 * in such memory too).  The price: the bytes are copied at open and held
 * twice while the page cache keeps them.  The mapping stays PROT_READ as a file
 * mapping would, so the engine cannot scribble on the weights.
 *
 * keep[0 .. n_keep): byte ranges of the file, sorted and disjoint, whose
 * whole pages are mapped from the file at their place in the block instead
 * of copied (FMT_OPEN_MAP_EXPERTS: the expert banks, which sync and staged
 * expert I/O read from the file themselves).  Either way every byte of the
 * block is the file's byte at the same offset, so the rest of the reader
 * and the engine cannot tell the two apart.  *copied gets the bytes read
 * into anonymous memory.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "format/cflow_format.h"
#include "format/fmt_impl.h"

#define bad fmt_bad   /* fmt_tile_check.c */

static int read_span(int fd, uint8_t *map, uint64_t off, uint64_t end,
                     uint64_t size, const char *path, char *err, size_t errlen)
{
    while (off < end) {
        size_t want = end - off > ((size_t)1 << 30) ? (size_t)1 << 30 : (size_t)(end - off);
        ssize_t r = pread(fd, map + off, want, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return bad(err, errlen, FMT_EIO, path, "read failed at byte %llu of %llu: %s",
                       (unsigned long long)off, (unsigned long long)size,
                       r < 0 ? strerror(errno) : "the file shrank while being read");
        off += (uint64_t)r;
    }
    return 0;
}

void *fmt_read_whole(int fd, uint64_t size, const fmt_frange *keep, unsigned n_keep,
                     uint64_t *copied, const char *path, int *rc, char *err,
                     size_t errlen)
{
    uint8_t *map = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
        *rc = bad(err, errlen, FMT_ENOMEM, path, "no memory for %llu bytes: %s",
                  (unsigned long long)size, strerror(errno));
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    madvise(map, (size_t)size, MADV_HUGEPAGE);
#endif
    const uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t pos = 0;
    *copied = 0;
    for (unsigned i = 0; i <= n_keep; i++) {
        /* the whole pages inside keep[i]; a part page is copied */
        uint64_t a = size, b = size;
        if (i < n_keep) {
            a = (keep[i].off + pg - 1) / pg * pg;
            b = keep[i].end < size ? keep[i].end / pg * pg : size;
            if (a < pos || b <= a)
                continue;
        }
        if ((*rc = read_span(fd, map, pos, a, size, path, err, errlen)))
            goto fail;
        *copied += a - pos;
        if (b > a && mmap(map + a, (size_t)(b - a), PROT_READ, MAP_PRIVATE | MAP_FIXED,
                          fd, (off_t)a) == MAP_FAILED) {
            *rc = bad(err, errlen, FMT_EIO, path, "cannot map bytes %llu-%llu: %s",
                      (unsigned long long)a, (unsigned long long)b, strerror(errno));
            goto fail;
        }
        pos = b;
    }
    mprotect(map, (size_t)size, PROT_READ);
    return map;
fail:
    munmap(map, (size_t)size);
    return NULL;
}

