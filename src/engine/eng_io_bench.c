/*
 * eng_io_bench.c — one timed pass of `cflow bench diskbw`: O_DIRECT reads
 * of a file through the expert reader (eng_io.c, eng_io_uring.c), at the
 * queue depth and request size the expert reads use, so the figure is the
 * storage bandwidth an expert miss sees.
 *
 * A pass reads the file's first ENG_DISK_SPAN bytes (less where it is
 * smaller) as consecutive ranges of ENG_DISK_RANGE bytes, as expert misses
 * are: n_slots staging slots, each range issued into a free one, waited
 * for in order, released and its slot issued again further on, so about
 * qd requests stay in flight whatever the depth.  Memory: n_slots x
 * ENG_DISK_RANGE bytes of slots (at most 64 x 4 MiB), whatever the file.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/eng_io_impl.h"
#include "prof/prof.h"

#define ENG_DISK_RANGE (4u << 20)          /* bytes: one "expert" */
#define ENG_DISK_SPAN  (1ull << 30)        /* bytes read per pass at most */
#define ENG_DISK_MIN   (64ull << 20)       /* smaller files are refused */

int eng_disk_read(const char *path, unsigned qd, eng_diskbw *out, char *err, size_t errlen)
{
    struct stat st;
    memset(out, 0, sizeof *out);
    if (stat(path, &st))
        return eng_fail(err, errlen, ENG_EIO, "%s: %s", path, strerror(errno));
    if ((uint64_t)st.st_size < ENG_DISK_MIN)
        return eng_fail(err, errlen, ENG_EARG,
                        "%s: %llu bytes: too small to time the storage (diskbw reads at "
                        "least %llu MiB; give a larger --file)", path,
                        (unsigned long long)st.st_size, ENG_DISK_MIN >> 20);
    uint64_t span = (uint64_t)st.st_size < ENG_DISK_SPAN ? (uint64_t)st.st_size : ENG_DISK_SPAN;
    span = span / ENG_DISK_RANGE * ENG_DISK_RANGE;
    /* enough slots that qd requests of the default size are in flight
     * while the oldest range is being waited for */
    unsigned n_slots = (unsigned)(((uint64_t)(qd ? qd : ENG_IO_QD) * ENG_IO_CHUNK) /
                                  ENG_DISK_RANGE) + 2;
    n_slots = n_slots > 64 ? 64 : n_slots;
    const eng_xio_cfg cfg = { .qd = qd };
    eng_xio *x = NULL;
    int rc = eng_xio_new(&x, path, ENG_DISK_RANGE, n_slots, 0, &cfg, NULL, NULL, err, errlen);
    if (rc)
        return rc;
    out->reader = eng_xio_reader(x, &out->qd, &out->chunk);
    if (!eng_xio_direct(x)) {
        eng_xio_free(x);
        return eng_fail(err, errlen, ENG_EIO,
                        "%s: the file system refuses O_DIRECT: its reads are buffered and "
                        "would time the page cache, not the storage (not measured)", path);
    }
    int *ring = calloc(n_slots, sizeof *ring);
    if (!ring) {
        eng_xio_free(x);
        return eng_fail(err, errlen, ENG_ENOMEM, "%s: out of memory", path);
    }
    uint64_t next = 0, done = 0;
    unsigned head = 0, n = 0;
    double t0 = prof_now();
    while (done < span && !rc) {
        while (n < n_slots && next < span) {
            int hit, k = eng_xio_issue(x, -1, next, ENG_DISK_RANGE, &hit);
            if (k < 0)
                break;
            ring[(head + n++) % n_slots] = k;
            next += ENG_DISK_RANGE;
        }
        eng_xio_submit(x);
        const uint8_t *data;
        double busy;
        rc = eng_xio_wait(x, ring[head], &data, &busy, err, errlen);
        eng_xio_release(x, ring[head]);
        head = (head + 1) % n_slots;
        n--;
        done += ENG_DISK_RANGE;
    }
    out->seconds = prof_now() - t0;
    out->bytes = done;
    if (!rc && !eng_xio_direct(x))
        rc = eng_fail(err, errlen, ENG_EIO, "%s: the file system refused O_DIRECT reads: "
                      "they fell back to buffered ones (not measured)", path);
    free(ring);
    eng_xio_free(x);            /* waits for the reads still in flight */
    return rc;
}
