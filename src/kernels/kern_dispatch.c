/*
 * kern_dispatch.c — which kernel table this process uses.
 *
 * The ISAs form a ladder, each needing everything below it:
 *   scalar < avx2 (avx2 fma f16c) < avx512 (+ avx512f bw vl)
 *          < avx512-vnni (+ avx512vnni)
 * kern_init() takes the highest rung the CPU (and the build) supports,
 * lowered by CFLOW_ISA if set, and remembers the choice for the life of
 * the process.  The CPU is probed once, under pthread_once, so concurrent
 * first calls are safe.
 */
#include "config.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kern.h"
#include "kernels/kern_impl.h"

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static enum kern_isa cpu_best = KERN_ISA_SCALAR;   /* highest usable rung */
static char cpu_features[128];

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static const kern_ops *chosen;

#if HAVE_ISA_X86 && (defined(__x86_64__) || defined(__i386__))
/* CPUID.1:ECX bit 29.  Not __builtin_cpu_supports("f16c"): clang before 16
 * does not know that name (and the fuzz build, `make fuzz`, is clang 14). */
static int cpu_has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
}
#endif

static void probe(void)
{
#if HAVE_ISA_X86 && (defined(__x86_64__) || defined(__i386__))
    __builtin_cpu_init();
    const struct { const char *name; int present; } flags[] = {
        { "avx2",       __builtin_cpu_supports("avx2") },
        { "fma",        __builtin_cpu_supports("fma") },
        { "f16c",       cpu_has_f16c() },
        { "avx512f",    __builtin_cpu_supports("avx512f") },
        { "avx512bw",   __builtin_cpu_supports("avx512bw") },
        { "avx512vl",   __builtin_cpu_supports("avx512vl") },
        { "avx512vnni", __builtin_cpu_supports("avx512vnni") },
    };
    size_t len = 0;
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        if (!flags[i].present)
            continue;
        size_t n = strlen(flags[i].name);
        if (len + n + 2 > sizeof cpu_features)
            break;
        if (len)
            cpu_features[len++] = ' ';
        memcpy(cpu_features + len, flags[i].name, n);
        len += n;
    }
    cpu_features[len] = '\0';

    int avx2 = flags[0].present && flags[1].present && flags[2].present;
    int avx512 = avx2 && flags[3].present && flags[4].present &&
                 flags[5].present;
    int vnni = avx512 && flags[6].present;
    cpu_best = vnni ? KERN_ISA_AVX512_VNNI : avx512 ? KERN_ISA_AVX512
             : avx2 ? KERN_ISA_AVX2 : KERN_ISA_SCALAR;
#else
    cpu_features[0] = '\0';
    cpu_best = KERN_ISA_SCALAR;
#endif
}

int kern_isa_from_name(const char *s)
{
    for (int i = 0; s && i < KERN_NISA; i++)
        if (strcmp(s, kern_isa_name((enum kern_isa)i)) == 0)
            return i;
    return -1;
}

/* An unknown name is ignored here (the kernels cannot say so); the engine
 * refuses it when a session opens (eng_env_check). */
enum kern_isa kern_isa_choose(enum kern_isa best, const char *env)
{
    int i = kern_isa_from_name(env);
    if (i < 0)
        return best;
    return (enum kern_isa)i < best ? (enum kern_isa)i : best;
}

/* Each tier's whole table: its file's entries (F32, F16, Q8_0, Q4_0, the
 * vector kernels) with the block types' families filled in, built once. */
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;
static kern_ops tables[KERN_NISA];

static void build_tables(void)
{
    for (int i = 0; i < KERN_NISA; i++) {
        const kern_ops *base = &kern_ops_scalar;
#if HAVE_ISA_X86
        if (i == KERN_ISA_AVX2)
            base = &kern_ops_avx2;
        else if (i == KERN_ISA_AVX512)
            base = &kern_ops_avx512;
        else if (i == KERN_ISA_AVX512_VNNI)
            base = &kern_ops_avx512_vnni;
#endif
        tables[i] = *base;
        tables[i].tile_mv_rp[KERN_Q4_0] = base->tile_mv_q4_0_rp;
        tables[i].tile_mm_rp[KERN_Q4_0] = base->tile_mm_q4_0_rp;
        /* the scalar entries first, then the tier's own over them */
        kern_lq_fill(&tables[i], KERN_ISA_SCALAR);
        kern_kq_fill(&tables[i], KERN_ISA_SCALAR);
        if (i != KERN_ISA_SCALAR) {
            kern_lq_fill(&tables[i], (enum kern_isa)i);
            kern_kq_fill(&tables[i], (enum kern_isa)i);
        }
    }
}

const kern_ops *kern_ops_for(enum kern_isa isa)
{
    pthread_once(&probe_once, probe);
    if ((unsigned)isa >= KERN_NISA || isa > cpu_best)
        return NULL;
#if !HAVE_ISA_X86
    isa = KERN_ISA_SCALAR;
#endif
    pthread_once(&tables_once, build_tables);
    return &tables[isa];
}

const kern_ops *kern_ops_ref(void)
{
    pthread_once(&tables_once, build_tables);
    return &tables[KERN_ISA_SCALAR];
}

static void choose(void)
{
    pthread_once(&probe_once, probe);
    chosen = kern_ops_for(kern_isa_choose(cpu_best, getenv("CFLOW_ISA")));
}

const kern_ops *kern_init(void)
{
    pthread_once(&init_once, choose);
    return chosen;
}

const char *kern_cpu_features(void)
{
    pthread_once(&probe_once, probe);
    return cpu_features;
}
