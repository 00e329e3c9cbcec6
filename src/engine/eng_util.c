/*
 * eng_util.c — what every file of the engine uses: the error line, the
 * aligned allocation and the environment's counts.  It calls nothing of
 * the module, so it sits under all of it.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/eng_impl.h"
#include "prof/prof.h"

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

int eng_env_check(char *err, size_t errlen)
{
    const char *v = getenv("CFLOW_ISA");
    if (v && *v && kern_isa_from_name(v) < 0) {
        char names[128] = "";   /* the tiers, as the kernels name them */
        for (int i = 0; i < KERN_NISA; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                     i == 0 ? "" : i == KERN_NISA - 1 ? " or " : ", ",
                     kern_isa_name((enum kern_isa)i));
        return eng_fail(err, errlen, ENG_EARG, "CFLOW_ISA='%s': use %s", v, names);
    }
    v = getenv("CFLOW_PIN");
    if (v && *v && strcmp(v, "0") && strcmp(v, "1"))
        return eng_fail(err, errlen, ENG_EARG, "CFLOW_PIN='%s': use 0 or 1", v);
    unsigned long bytes;
    int rc = eng_env_count("CFLOW_MEM_FREE", 0, 1, ULONG_MAX, 1, &bytes, err, errlen);
    if (rc)
        return rc;
    v = getenv("CFLOW_FAULT");
    if (v && *v && !prof_fault_ok(v))       /* the grammar: prof.h */
        return eng_fail(err, errlen, ENG_EARG,
                        "CFLOW_FAULT='%s': use runlog:enospc|busy[@N], "
                        "expert-read:eio|short[@N] or uring-init:eperm, joined by commas", v);
    return 0;
}

int eng_env_count(const char *name, unsigned long def, unsigned long lo, unsigned long hi,
                  int units, unsigned long *out, char *err, size_t errlen)
{
    const char *v = getenv(name);
    char *end = NULL;
    *out = def;
    if (!v || !*v)
        return 0;
    errno = 0;
    unsigned long n = v[0] >= '0' && v[0] <= '9' ? strtoul(v, &end, 10) : 0;
    unsigned sh = 0;
    if (end && units && (*end == 'K' || *end == 'k'))
        sh = 10, end++;
    else if (end && units && *end == 'M')
        sh = 20, end++;
    else if (end && units && *end == 'G')
        sh = 30, end++;
    if (!end || *end || errno || n > (ULONG_MAX >> sh) || (n << sh) < lo || (n << sh) > hi)
        return eng_fail(err, errlen, ENG_EARG, "%s='%s': use %lu to %lu%s", name, v, lo, hi,
                        units ? " (K, M and G suffixes)" : "");
    *out = n << sh;
    return 0;
}
