/*
 * eng_fetch.c — one interface to a routed expert's bytes: start fetching
 * expert e of layer l (now, or later than every other read), wait for it,
 * release it.  The routing of a decode step (eng_moe.c), the grouped
 * experts of a batch (eng_moe_batch.c) and look-ahead's guesses
 * (eng_moe_ahead.c) all fetch through here; which backend serves them is
 * the session's expert I/O mode and prefetch setting, picked once when
 * either changes (eng_fetch_pick), a table entry rather than an if in
 * each caller:
 *
 *   in place   (--expert-io mmap) the tiles are read where the mapping has
 *              them: nothing to start or wait for; a fetch's slot is -1;
 *   prefetch   (mmap with the PREFETCHT0 thread) the same, the expert's
 *              two streams posted to the prefetch thread as it starts
 *              (the ExpertTiles command of the Pipeline-Native
 *              Transformers report, 3.9);
 *   direct     (sync and staged) the staged reader (eng_io.c): a read of
 *              the expert's file range into a staging slot of the RAM
 *              expert cache, keyed by (layer, expert) where the cache has
 *              a budget, so a hit reads nothing.
 *
 * Sync and staged differ only in when the caller waits (at once, or at
 * the injection layer): the backend is the same.
 *
 * A wait is four steps, each its own function: the reader's wait for the
 * slot (eng_xio_wait), the bytes' check and the slot's rebase (bind: once
 * per expert a slot holds, so a cache hit needs neither), and the
 * accounting of a route's waits (eng_fetch_account: the bytes and the
 * reader's busy time into the statistics and the profiler, the stall into
 * the profiler's I/O wait).  A failed read or a refused expert fails the
 * token (eng_xio_fail): the first cause is kept, the token's other reads
 * are left to land on their own.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/eng_impl.h"
#include "prof/prof.h"

void eng_xio_fail(eng_session *s, int rc, const char *fmt, ...)
{
    va_list ap;
    if (s->io.failed)
        return;                      /* the first cause is the one to tell */
    s->io.failed = rc;
    va_start(ap, fmt);
    vsnprintf(s->io.err, sizeof s->io.err, fmt, ap);
    va_end(ap);
}

/* ---- the backends ------------------------------------------------------ */

struct eng_fetch_backend {
    /* Start expert e of layer l (flags ENG_FETCH_*): its slot, or -1 (read
     * in place; a direct fetch that found no slot) */
    int  (*start)(eng_session *s, unsigned l, unsigned e, unsigned flags, int *hit);
    /* the fetches started since the last submit go out together */
    void (*submit)(eng_session *s);
    int  slots;                      /* fetched experts wait in staging slots */
};

static int in_place(eng_session *s, unsigned l, unsigned e, unsigned flags, int *hit)
{
    (void)s, (void)l, (void)e, (void)flags;
    *hit = 0;
    return -1;
}

/* ExpertTiles: exactly the expert's two streams, to the prefetch thread. */
static int prefetched(eng_session *s, unsigned l, unsigned e, unsigned flags, int *hit)
{
    const eng_layer *ly = &s->layers[l];
    const fmt_stream *st[2] = { ly->exp_gu[e].st, ly->exp_down[e].st };
    for (int w = 0; w < 2; w++)
        eng_pf_range(s->io.pf, (const uint8_t *)st[w]->tiles[0].payload - FMT_TILE_HEADER_SIZE,
                     st[w]->length);
    return in_place(s, l, e, flags, hit);
}

static int direct(eng_session *s, unsigned l, unsigned e, unsigned flags, int *hit)
{
    uint64_t off = 0, len = 0;
    fmt_model_expert(s->model, l, e, NULL, NULL, &off, &len);
    const int key = s->io.keyed ? (int)(l * s->hp->n_experts + e) : -1;
    const int k = flags & ENG_FETCH_LATER ? eng_xio_issue_later(s->io.xio, key, off, len, hit)
                                          : eng_xio_issue(s->io.xio, key, off, len, hit);
    if (k < 0 && !(flags & ENG_FETCH_GUESS))
        eng_xio_fail(s, ENG_EIO, "%s: layer %u expert %u: no staging slot for %llu bytes",
                     fmt_model_path(s->model), l, e, (unsigned long long)len);
    return k;
}

static void no_submit(eng_session *s) { (void)s; }
static void direct_submit(eng_session *s) { eng_xio_submit(s->io.xio); }

static const eng_fetch_backend be_in_place = { in_place, no_submit, 0 };
static const eng_fetch_backend be_prefetch = { prefetched, no_submit, 0 };
static const eng_fetch_backend be_direct = { direct, direct_submit, 1 };

void eng_fetch_pick(eng_session *s)
{
    s->io.be = s->io.mode != ENG_XIO_MMAP && s->io.xio ? &be_direct
               : s->io.pf                              ? &be_prefetch
                                                       : &be_in_place;
}

/* ---- the interface ----------------------------------------------------- */

int eng_fetch(eng_session *s, unsigned l, unsigned e, unsigned flags, int *hit)
{
    return s->io.be->start(s, l, e, flags, hit);
}

void eng_fetch_submit(eng_session *s)
{
    s->io.be->submit(s);
}

int eng_fetch_keyed(const eng_session *s)
{
    return s->io.be->slots && s->io.keyed;
}

unsigned eng_fetch_room(const eng_session *s)
{
    return s->io.be->slots ? s->io.n_stage : ENG_MAX_TOPK;
}

void eng_fetch_tick(eng_session *s, unsigned n)
{
    if (s->io.xio)
        eng_xio_tick(s->io.xio, n);
}

int eng_fetch_landed(const eng_session *s, int slot)
{
    return slot < 0 || eng_xio_landed(s->io.xio, slot);
}

void eng_fetch_release(eng_session *s, int slot)
{
    if (slot >= 0)
        eng_xio_release(s->io.xio, slot);
}

const eng_mv *eng_fetch_mv(const eng_session *s, const eng_layer *ly, unsigned e, int slot,
                           int which)
{
    if (slot >= 0)
        return &s->io.stage[slot].mv[which];
    return which ? &ly->exp_down[e] : &ly->exp_gu[e];
}

/* Point stage k's copy of stream orig (part which: 0 gate/up, 1 down) at
 * data, which holds the file bytes [off, off + len). */
static int stage_stream(eng_session *s, unsigned k, int which, const eng_mv *orig,
                        const uint8_t *data, uint64_t off, uint64_t len)
{
    const fmt_stream *st = orig->st;
    eng_stage *sg = &s->io.stage[k];
    /* the mapping's base: a stream's first tile header sits at its offset */
    const uint8_t *base = (const uint8_t *)st->tiles[0].payload - FMT_TILE_HEADER_SIZE -
                          st->offset;
    for (uint32_t i = 0; i < st->n_tiles; i++) {
        uint64_t at = (uint64_t)((const uint8_t *)st->tiles[i].payload - base);
        if (at < off || at >= off + len)
            return -1;
        sg->t[which][i] = st->tiles[i];
        sg->t[which][i].payload = data + (at - off);
    }
    sg->st[which] = *st;
    sg->st[which].tiles = sg->t[which];
    sg->mv[which] = *orig;
    sg->mv[which].st = &sg->st[which];
    return 0;
}

/* Slot k holds expert (l, e)'s bytes data (file bytes [off, off + len)):
 * check them and point the slot's streams at them, once — the open laid
 * the bank out unread (FMT_OPEN_LAZY_EXPERTS), so the bytes a read brought
 * are checked before their first use, and an expert's bytes always sit at
 * the same place in a slot, so a cache hit needs neither again (144 tiles
 * an expert of Qwen3-30B-A3B, for each of the 384 it routes a token).  A
 * refused expert stays refused each time it is routed.  0, or -1 with the
 * token failed; the check and rebase's CPU time into acc->work (not a
 * wait for storage), a refused expert's left in the wait. */
static int bind(eng_session *s, int k, unsigned l, unsigned e, const uint8_t *data,
                uint64_t off, uint64_t len, eng_fetch_acc *acc)
{
    const eng_layer *ly = &s->layers[l];
    char why[256];
    if (s->io.stage[k].based == off + 1)
        return 0;
    double tw = prof_now();
    if (fmt_model_experts_unchecked(s->model) &&
        fmt_model_expert_check(s->model, l, e, data, why, sizeof why)) {
        eng_xio_fail(s, ENG_EFORMAT, "%s", why);   /* it names the layer and expert */
        return -1;
    }
    if (stage_stream(s, (unsigned)k, 0, &ly->exp_gu[e], data, off, len) ||
        stage_stream(s, (unsigned)k, 1, &ly->exp_down[e], data, off, len)) {
        eng_xio_fail(s, ENG_EIO, "%s: layer %u expert %u: tiles outside the expert's range",
                     fmt_model_path(s->model), l, e);
        return -1;
    }
    s->io.stage[k].based = off + 1;
    acc->work += prof_now() - tw;
    return 0;
}

int eng_fetch_wait(eng_session *s, unsigned l, unsigned e, int slot, int hit,
                   eng_fetch_acc *acc)
{
    const uint8_t *data;
    uint64_t off = 0, len = 0;
    double bd = 0.0;
    char why[256];
    if (slot < 0)
        return 0;                    /* read in place: nothing to wait for */
    fmt_model_expert(s->model, l, e, NULL, NULL, &off, &len);
    if (eng_xio_wait(s->io.xio, slot, &data, &bd, why, sizeof why)) {
        eng_xio_fail(s, ENG_EIO, "%s (layer %u, expert %u)", why, l, e);
        return -1;
    }
    if (bind(s, slot, l, e, data, off, len, acc))
        return -1;
    /* a hit on a slot still being read (a look-ahead guess) waited for
     * storage too: its time counts */
    if (bd > acc->busy)
        acc->busy = bd;
    if (!hit)
        acc->bytes += len;           /* from the cache: nothing was read */
    return 0;
}

/* The route's read time is the growth of the reader's busy time (the
 * union of the intervals with a read queued or in flight) since the
 * previous reads completed: overlapping reads are not counted twice, and
 * the routes' times sum to the time storage was busy.  The wait since t0,
 * less the binds' work, is the stall: the profiler's I/O wait of layer l,
 * taken out of the part the caller marks next (*pt). */
void eng_fetch_account(eng_session *s, unsigned l, const eng_fetch_acc *acc, double t0,
                       double *pt)
{
    if (acc->bytes || acc->busy > s->io.busy) {
        double io = acc->busy > s->io.busy ? acc->busy - s->io.busy : 0.0;
        if (acc->busy > s->io.busy)
            s->io.busy = acc->busy;
        s->stats.xio_bytes += acc->bytes;
        s->stats.xio_s += io;
        if (s->prof)
            prof_layer_io(s->prof, l, io, acc->bytes);
    }
    double t1 = prof_now(), waited = t1 - t0 - acc->work;
    s->stats.xio_stall_s += waited;
    if (s->prof && s->io.be->slots)
        prof_layer_mark(s->prof, l, PROF_ST_IO_WAIT, t1 - waited);
    if (pt)
        *pt += waited;
}
