/*
 * eng_io_cache.c — the RAM expert cache's bookkeeping: which staging slot
 * holds which expert (a key: layer x n_experts + e), who holds each slot,
 * and the replacement policy that picks the slot a miss takes.
 *
 * It moves no bytes and knows no files, threads or locks: the staged
 * reader (eng_io.c) asks it under its mutex, as SQLite's pager asks its
 * page cache, and hands the slot it gets to the reader's queue
 * (eng_io_queue.c).  Whether a slot is free of reads is the reader's to
 * say: the victim scan takes it as a callback.
 *
 *   key_slot [n_keys]  the slot holding each key's bytes (-1: none)
 *   slot [n_slots]     each slot's key (-1: never held one, or forgotten),
 *                      its holds (issues not yet released: a hit shares a
 *                      slot) and the clock of its last issue
 *   clock              one tick an issue (LRU's order, LFU's halving)
 *   tokens             the tokens the session has run (eng_xio_tick): the
 *                      clock crf's weights decay by
 *
 * Replacement.  A miss takes a slot that never held an expert, else the
 * coldest one that no routing holds and no read is filling.  Coldest is
 * the policy's ($CFLOW_XIO_POLICY):
 *
 *   crf   (ENG_IO_POLICY, the default) the least weight of past issues,
 *         each weighing 2^(-ENG_IO_DECAY x the tokens since it came): a
 *         use 25 tokens ago counts half (the "combined recency and
 *         frequency" of LRFU, Lee et al. 2001), so experts issued often
 *         lately stay and popularity that has moved on fades by tokens;
 *   lru   used longest ago;
 *   lfu   issued least often lately: a count per expert, halved for all
 *         every 8 issues per expert.
 *
 * Between equal weights (crf, lfu) the slot used most recently goes: when
 * a token cycles through more experts than there are slots, those not yet
 * issued this token weigh alike, and evicting the least recently used of
 * them throws out the expert needed soonest and misses every time, where
 * evicting the most recent keeps a fixed subset resident.  crf keeps per
 * key, cached or not, log2(weight) + DECAY x (the token of its last
 * issue): every weight decays at one rate, so comparing these compares
 * the weights at any one moment, and an issue is one update; its clock is
 * tokens, not issues, so a model's size does not change how fast it
 * forgets.  Weights kept for experts not cached let a hot expert that was
 * evicted come back with its history.  Look-ahead's guesses count as
 * issues.  Why crf and these constants: the hit rates and bytes read of
 * the three policies on olmoe-1b-7b's text and qwen3-30b-a3b's bench
 * tokens are in docs/perf-log/2026-12-04.md and
 * docs/perf-log/2026-12-06.md (09:50 UTC).
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/eng_io_impl.h"

int xio_cache_init(xio_cache *c, unsigned n_slots, unsigned n_keys, const char *policy,
                   char *err, size_t errlen)
{
    const char *name = policy ? policy : getenv("CFLOW_XIO_POLICY");
    memset(c, 0, sizeof *c);
    if (!name || !*name)
        c->policy = ENG_IO_POLICY;
    else if (!strcmp(name, "lru"))
        c->policy = XIO_LRU;
    else if (!strcmp(name, "lfu"))
        c->policy = XIO_LFU;
    else if (!strcmp(name, "crf"))
        c->policy = XIO_CRF;
    else {
        snprintf(err, errlen, "CFLOW_XIO_POLICY='%s': use crf, lru or lfu", name);
        return ENG_EARG;
    }
    const size_t n = n_keys ? n_keys : 1;
    c->n_slots = n_slots;
    c->n_keys = n_keys;
    /* halve after 8 issues per key (64 tokens of OLMoE-1B-7B, 128 of
     * Qwen3-30B-A3B): long enough that a hot expert outscores a cold one
     * many times over, short enough that a change of topic (and of
     * popular experts) shows within a few hundred tokens */
    c->age_every = 8ull * n;
    c->slot = calloc(n_slots ? n_slots : 1, sizeof *c->slot);
    c->key_slot = malloc(n * sizeof *c->key_slot);
    if (!c->slot || !c->key_slot)
        return ENG_ENOMEM;
    for (size_t i = 0; i < n; i++)
        c->key_slot[i] = -1;
    for (unsigned i = 0; i < n_slots; i++)
        c->slot[i].key = -1;
    if (c->policy == XIO_LFU && !(c->freq = calloc(n, sizeof *c->freq)))
        return ENG_ENOMEM;
    if (c->policy == XIO_CRF) {
        if (!(c->crf = malloc(n * sizeof *c->crf)))
            return ENG_ENOMEM;
        for (size_t i = 0; i < n; i++)
            c->crf[i] = -INFINITY;       /* never issued: weight 0 */
    }
    return 0;
}

void xio_cache_free(xio_cache *c)
{
    free(c->slot);
    free(c->key_slot);
    free(c->freq);
    free(c->crf);
    memset(c, 0, sizeof *c);
}

/* Count an issue of key: for XIO_CRF its weight, decayed to now, plus
 * one; for XIO_LFU its count, and every age_every issues all counts
 * halve, so popularity that has moved on fades. */
static void count_issue(xio_cache *c, int key)
{
    if (c->policy == XIO_CRF && key >= 0) {
        /* crf = log2(weight) + DECAY x the token of its last issue, so
         * that comparing crf compares the weights at any one moment */
        double now = ENG_IO_DECAY * (double)c->tokens;
        c->crf[key] = log2(exp2(c->crf[key] - now) + 1.0) + now;
        return;
    }
    if (c->policy != XIO_LFU)
        return;
    if (c->clock % c->age_every == 0)
        for (unsigned i = 0; i < c->n_keys; i++)
            c->freq[i] >>= 1;
    if (key >= 0 && c->freq[key] < UINT32_MAX)
        c->freq[key]++;
}

int xio_cache_find(xio_cache *c, int key)
{
    c->clock++;
    count_issue(c, key);
    return key >= 0 ? c->key_slot[key] : -1;
}

void xio_cache_hit(xio_cache *c, int slot)
{
    c->slot[slot].held++;
    c->slot[slot].used = c->clock;
    c->hits++;
}

static double weight(const xio_cache *c, int key)
{
    return c->policy == XIO_CRF ? c->crf[key] : (double)c->freq[key];
}

/* Does slot a make a better victim than slot b?  XIO_LRU: used longer
 * ago.  XIO_LFU and XIO_CRF: its key issued less often lately (count or
 * decayed weight), and between keys issued as often, the one used more
 * recently (the essay above). */
static int colder(const xio_cache *c, const xio_cslot *a, const xio_cslot *b)
{
    if (c->policy != XIO_LRU && a->key >= 0 && b->key >= 0) {
        double wa = weight(c, a->key), wb = weight(c, b->key);
        if (wa != wb)
            return wa < wb;
        return a->used > b->used;
    }
    return a->used < b->used;
}

int xio_cache_victim(const xio_cache *c, int (*busy)(const void *ctx, int slot),
                     const void *ctx)
{
    int k = -1;
    for (unsigned i = 0; i < c->n_slots; i++) {
        const xio_cslot *sl = &c->slot[i];
        if (sl->held || busy(ctx, (int)i))
            continue;
        if (sl->key < 0)
            return (int)i;
        if (k < 0 || colder(c, sl, &c->slot[k]))
            k = (int)i;
    }
    return k;
}

int xio_cache_all_held(const xio_cache *c)
{
    for (unsigned i = 0; i < c->n_slots; i++)
        if (!c->slot[i].held)
            return 0;
    return 1;
}

void xio_cache_admit(xio_cache *c, int slot, int key)
{
    xio_cslot *sl = &c->slot[slot];
    c->misses++;
    if (sl->key >= 0)
        c->key_slot[sl->key] = -1;                 /* evicted */
    if (key >= 0) {
        if (c->key_slot[key] >= 0)
            c->slot[c->key_slot[key]].key = -1;    /* a failed copy: forgotten */
        c->key_slot[key] = slot;
    }
    sl->key = key;
    sl->used = c->clock;
    sl->held = 1;
}

int xio_cache_release(xio_cache *c, int slot)
{
    xio_cslot *sl = &c->slot[slot];
    if (sl->held > 0)
        sl->held--;
    return sl->held;
}

void xio_cache_forget(xio_cache *c, int slot)
{
    xio_cslot *sl = &c->slot[slot];
    if (sl->key >= 0)
        c->key_slot[sl->key] = -1;
    sl->key = -1;
}
