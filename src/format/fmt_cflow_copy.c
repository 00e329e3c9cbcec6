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
 *
 * drop: a file that takes most of the free memory (the engine's auto
 * copies one up to four fifths of it, eng_session.c) would be held twice
 * while it is read, once in the page cache and once copied, and the
 * kernel would reclaim everything else, the half-read copy's neighbours
 * included, to make room: on gpt-oss-20b (12.1 GB, 23 GiB machine) the
 * open spent more system time reclaiming and compacting than reading.  So
 * the file's cached pages are dropped (DONTNEED; a hint, so a failure
 * changes nothing but memory) and the bytes read with O_DIRECT, straight
 * into the copy, through a second descriptor of the same open file
 * (/proc/self/fd: the inode the header was read from, whatever the path
 * names now); where O_DIRECT is refused (tmpfs) or the descriptor cannot
 * be had, buffered reads drop each chunk's pages behind them instead.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "format/cflow_format.h"
#include "format/fmt_impl.h"

#define bad fmt_bad   /* fmt_tile_check.c */

/* chunk of a read: large enough that a read costs nothing extra, small
 * enough that the cached pages dropped behind it never hold much */
#define READ_CHUNK ((size_t)256 << 20)

/* Reads bytes [off, end) of the file into map + off.  *dfd: the O_DIRECT
 * descriptor or -1; its reads start at page offsets (every span but a
 * kept range's end starts at one) and ask for whole pages, the last one
 * past the file's end included (the map has the whole page); a refusal
 * (EINVAL) closes it and the rest goes buffered. */
static int read_span(int fd, int *dfd, uint8_t *map, uint64_t off, uint64_t end,
                     uint64_t size, uint64_t pg, int drop, const char *path, char *err,
                     size_t errlen)
{
    while (off < end) {
        size_t want = end - off > READ_CHUNK ? READ_CHUNK : (size_t)(end - off);
        const int direct = *dfd >= 0 && off % pg == 0;
        ssize_t r = direct ? pread(*dfd, map + off, (want + pg - 1) / pg * pg, (off_t)off)
                           : pread(fd, map + off, want, (off_t)off);
        if (r < 0 && direct && errno == EINVAL) {
            close(*dfd);
            *dfd = -1;
            continue;
        }
        if (r > (ssize_t)(end - off))   /* (a direct read's whole last page) */
            r = (ssize_t)(end - off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return bad(err, errlen, FMT_EIO, path, "read failed at byte %llu of %llu: %s",
                       (unsigned long long)off, (unsigned long long)size,
                       r < 0 ? strerror(errno) : "the file shrank while being read");
        if (drop && !direct)
            posix_fadvise(fd, (off_t)off, (off_t)r, POSIX_FADV_DONTNEED);
        off += (uint64_t)r;
    }
    return 0;
}

void *fmt_read_whole(int fd, uint64_t size, const fmt_frange *keep, unsigned n_keep,
                     int drop, uint64_t *copied, const char *path, int *rc, char *err,
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
    int dfd = -1;
    if (drop) {
        char self[64];
        snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
        dfd = open(self, O_RDONLY | O_DIRECT | O_CLOEXEC);
    }
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
        if ((*rc = read_span(fd, &dfd, map, pos, a, size, pg, drop, path, err, errlen)))
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
    if (dfd >= 0)
        close(dfd);
    mprotect(map, (size_t)size, PROT_READ);
    return map;
fail:
    if (dfd >= 0)
        close(dfd);
    munmap(map, (size_t)size);
    return NULL;
}

