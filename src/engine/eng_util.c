/*
 * eng_util.c — what every file of the engine uses: the error line and the
 * aligned allocation.  It calls nothing of the module, so it sits under
 * all of it.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/eng_impl.h"

int eng_fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return code;
}

/* Every activation and cache buffer starts on a cache line.  malloc's
 * 16-byte alignment depends on the heap's history (which arena, which
 * frees came before), so the same model decoded measurably slower in one
 * program than in another: a 64-byte vector load that straddles two lines
 * costs two.  Freed with free(). */
void *eng_xalloc(size_t n, int *oom)
{
    void *p = NULL;
    if (n == 0)
        n = 1;
    if (posix_memalign(&p, 64, (n + 63) & ~(size_t)63)) {
        *oom = 1;
        return NULL;
    }
    memset(p, 0, n);
    return p;
}
