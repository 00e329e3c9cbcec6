/*
 * eng_prefetch.c — the prefetch thread of the Pipeline-Native Transformers
 * report (3.9): PREFETCHT0 hints over
 * the weights the compute threads will read next.
 *
 * The decoding thread posts commands into a bounded ring; one thread takes
 * them in order and touches every 64-byte line of each range with
 * _mm_prefetch(p, _MM_HINT_T0), which asks the core it runs on to pull the
 * line towards its L1-d (and so into the shared L2/L3 on the way).
 *
 *   LinearRange{p, n}    a contiguous run of mapped bytes: the attention
 *                        and dense FFN streams of the next layer, posted as
 *                        a layer starts.
 *   ExpertTiles{...}     the routed experts' streams, one range each,
 *                        posted right after the router chose them (their
 *                        compute happens later in the layer, or expert_delay
 *                        layers later).
 *
 * The ring holds ENG_PF_CAP ranges.  Posting never blocks: when the ring is
 * full the command is dropped and counted — a hint that arrives late is
 * worthless, and the compute thread must never wait for its helper.  A
 * generation counter lets the thread skip commands older than the layer
 * compute has reached (they would only evict useful lines).
 *
 * The report measured no gain from these hints when storage or RAM
 * bandwidth binds (3.9.3, 5.8): the hardware prefetcher already follows a
 * linear stream.  The thread is here to measure that claim on a given CPU
 * and storage (`--prefetch on|off`, `cflow bench directio`), not because
 * it is known to help; it is off by default.
 */
#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "engine/eng_impl.h"

#define ENG_PF_CAP 256          /* ranges in the ring */
#define ENG_PF_LINE 64          /* bytes per prefetch instruction */

typedef struct pf_cmd {
    const uint8_t *p;
    size_t         n;           /* bytes */
    uint64_t       gen;         /* the layer generation it was posted in */
} pf_cmd;

struct eng_pf {
    pf_cmd          ring[ENG_PF_CAP];
    unsigned        head, count;
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    pthread_t       tid;
    int             quit;
    atomic_ullong   gen;        /* bumped by eng_pf_layer */
    atomic_ullong   dropped, lines;
};

static void touch(const uint8_t *p, size_t n)
{
    const uint8_t *end = p + n;
    for (p = (const uint8_t *)((uintptr_t)p & ~(uintptr_t)(ENG_PF_LINE - 1)); p < end;
         p += ENG_PF_LINE) {
#if defined(__x86_64__) || defined(__i386__)
        _mm_prefetch((const char *)p, _MM_HINT_T0);
#else
        __builtin_prefetch(p, 0, 3);
#endif
    }
}

static void *pf_thread(void *arg)
{
    eng_pf *pf = arg;
    pthread_mutex_lock(&pf->mu);
    for (;;) {
        while (!pf->quit && pf->count == 0)
            pthread_cond_wait(&pf->cv, &pf->mu);
        if (pf->quit)
            break;
        pf_cmd c = pf->ring[pf->head];
        pf->head = (pf->head + 1) % ENG_PF_CAP;
        pf->count--;
        pthread_mutex_unlock(&pf->mu);
        /* a command two layers stale would pull in lines compute has
         * already left behind */
        if (c.gen + 1 >= atomic_load(&pf->gen)) {
            touch(c.p, c.n);
            atomic_fetch_add(&pf->lines, (c.n + ENG_PF_LINE - 1) / ENG_PF_LINE);
        }
        pthread_mutex_lock(&pf->mu);
    }
    pthread_mutex_unlock(&pf->mu);
    return NULL;
}

eng_pf *eng_pf_new(void)
{
    eng_pf *pf = calloc(1, sizeof *pf);
    if (!pf)
        return NULL;
    pthread_mutex_init(&pf->mu, NULL);
    pthread_cond_init(&pf->cv, NULL);
    if (pthread_create(&pf->tid, NULL, pf_thread, pf)) {
        pthread_mutex_destroy(&pf->mu);
        pthread_cond_destroy(&pf->cv);
        free(pf);
        return NULL;
    }
    return pf;
}

void eng_pf_free(eng_pf *pf)
{
    if (!pf)
        return;
    pthread_mutex_lock(&pf->mu);
    pf->quit = 1;
    pthread_cond_signal(&pf->cv);
    pthread_mutex_unlock(&pf->mu);
    pthread_join(pf->tid, NULL);
    pthread_mutex_destroy(&pf->mu);
    pthread_cond_destroy(&pf->cv);
    free(pf);
}

void eng_pf_layer(eng_pf *pf)
{
    atomic_fetch_add(&pf->gen, 1);
}

void eng_pf_range(eng_pf *pf, const void *p, size_t n)
{
    if (!p || !n)
        return;
    pthread_mutex_lock(&pf->mu);
    if (pf->count == ENG_PF_CAP) {
        pthread_mutex_unlock(&pf->mu);
        atomic_fetch_add(&pf->dropped, 1);
        return;
    }
    pf_cmd *c = &pf->ring[(pf->head + pf->count) % ENG_PF_CAP];
    c->p = p;
    c->n = n;
    c->gen = atomic_load(&pf->gen);
    pf->count++;
    pthread_cond_signal(&pf->cv);
    pthread_mutex_unlock(&pf->mu);
}

void eng_pf_counts(const eng_pf *pf, uint64_t *lines, uint64_t *dropped)
{
    eng_pf *m = (eng_pf *)pf;
    *lines = atomic_load(&m->lines);
    *dropped = atomic_load(&m->dropped);
}

/* ---- the session's per-layer hints (its setter: eng_io_session.c) ------- */

/* PREFETCHT0 over the next layer's attention and dense FFN streams (the
 * output head after the last), posted as layer l starts. */
void eng_prefetch_next(eng_session *s, unsigned l)
{
    const eng_mv *mv[4];
    unsigned n = 0, L = s->hp->n_layers;
    if (!s->io.pf)
        return;
    eng_pf_layer(s->io.pf);
    if (l + 1 < L) {
        const eng_layer *nx = &s->layers[l + 1];
        mv[n++] = &nx->qkv;
        mv[n++] = &nx->o;
        if (s->hp->ffn_dim) {
            mv[n++] = &nx->gate_up;
            mv[n++] = &nx->down;
        }
    } else {
        mv[n++] = &s->output;
    }
    for (unsigned i = 0; i < n; i++)
        if (mv[i]->st && mv[i]->st->n_tiles)
            eng_pf_range(s->io.pf,
                         (const uint8_t *)mv[i]->st->tiles[0].payload - FMT_TILE_HEADER_SIZE,
                         mv[i]->st->length);
}
