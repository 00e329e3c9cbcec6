/*
 * eng_moe.c — routed experts: routing, fetch and the deferred compute.
 *
 * An expert's output is routed at layer l (the router reads N_m(h) there)
 * and lands at its injection layer l + expert_delay.  Routing and compute
 * are split so the expert's bytes can travel in between:
 *
 *   eng_moe_issue   at the routing layer: the router, top-k, the weights, and
 *                   the fetch — nothing in mmap mode (a PREFETCHT0 hint when
 *                   the prefetch thread runs), a read into a staging slot per
 *                   expert otherwise; sync mode waits for it right there.
 *   eng_moe_inject  at the injection layer: wait for the reads (staged), then
 *                   the expert FFNs on the saved router input xr, weighted,
 *                   added into the target.
 *
 * A ring of expert_delay + 1 routes holds what is in between.  The compute
 * is the same arithmetic on the same bytes in every mode and at whatever
 * layer it runs (the saved xr is re-quantised exactly as it was), so every
 * mode gives the same tokens.  Styles without a delay (and
 * ParallelSqrt2's MoE beside the dense FFN) inject in their own layer;
 * staged then overlaps the read with the dense FFN (and, for
 * PipelineRegisters, the attention) of that layer.
 *
 * The route ring and the staging slots are declared in eng_impl.h (the
 * expert I/O setup of eng_io.c sizes them); the reads themselves are the
 * reader pool's (eng_io.c).  A model opened for these reads has its
 * expert banks laid out unread (FMT_OPEN_LAZY_EXPERTS), so the bytes a
 * read brings into a slot are checked, once, before their first use; a
 * refused expert fails the token with ENG_EFORMAT, a failed read with
 * ENG_EIO (eng_xio_fail).  Look-ahead (eng_moe_ahead.c) may have read a
 * layer's experts before it routes: eng_moe_issue then finds them as
 * cache hits and settles the guesses.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/eng_impl.h"
#include "kernels/kern.h"
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

/* Wait for the reads of route r's experts j0 <= j < j1 with bit j of
 * *mask set (mask NULL: all of them) and rebase them into their slots; a slot
 * already landed costs no wait, only the rebase.  The wait goes to
 * PROF_ST_IO_WAIT of the routing layer, to the stall (xio_stall_s) and is
 * taken out of the part the caller marks next (*pt); the check and rebase
 * of bytes just read are work on the CPU, not a wait for storage, and stay
 * in that part.  The route's read time IO is the growth of
 * the reader pool's busy time (the union of the intervals with a read
 * queued or in flight) since the previous reads completed: overlapping
 * reads are not counted twice, and the routes' times sum to the time
 * storage was busy. */
static void wait_some(eng_session *s, eng_route *r, uint32_t j0, uint32_t j1,
                      const uint32_t *mask, double *pt)
{
    const eng_layer *ly = &s->layers[r->layer];
    double t0 = prof_now(), busy = 0.0, work = 0.0;   /* work: checks, rebases */
    uint64_t bytes = 0;
    /* After a failed read the token is lost: its other reads are left to
     * land on their own (their slots wait for them, eng_io.c). */
    for (uint32_t j = j0; j < j1 && j < r->k && !s->io.failed; j++) {
        int k = r->slot[j], e = r->expert[j];
        const uint8_t *data;
        uint64_t off = 0, len = 0;
        double bd = 0.0;
        char why[256];
        if (k < 0 || (mask && !(*mask >> j & 1u)))
            continue;
        fmt_model_expert(s->model, (unsigned)r->layer, (unsigned)e, NULL, NULL, &off, &len);
        if (eng_xio_wait(s->io.xio, k, &data, &bd, why, sizeof why)) {
            eng_xio_fail(s, ENG_EIO, "%s (layer %d, expert %d)", why, r->layer, e);
            continue;
        }
        /* once a slot holds an expert's bytes, they are checked and its
         * streams pointed at them once: a cache hit finds both done */
        if (s->io.stage[k].based != off + 1) {
            double tw = prof_now();
            /* the open laid the bank out unread (FMT_OPEN_LAZY_EXPERTS):
             * the bytes a read brought are checked before their first use;
             * a refused expert stays refused each time it is routed */
            if (fmt_model_experts_unchecked(s->model) &&
                fmt_model_expert_check(s->model, (unsigned)r->layer, (unsigned)e, data, why,
                                       sizeof why)) {
                eng_xio_fail(s, ENG_EFORMAT, "%s", why);   /* it names the layer and expert */
                continue;
            }
            if (stage_stream(s, (unsigned)k, 0, &ly->exp_gu[e], data, off, len) ||
                stage_stream(s, (unsigned)k, 1, &ly->exp_down[e], data, off, len)) {
                eng_xio_fail(s, ENG_EIO, "%s: layer %d expert %d: tiles outside the expert's "
                             "range", fmt_model_path(s->model), r->layer, e);
                continue;
            }
            s->io.stage[k].based = off + 1;
            work += prof_now() - tw;
        }
        /* a hit on a slot still being read (a look-ahead guess,
         * eng_moe_ahead.c) waited for storage too: its time counts */
        if (bd > busy)
            busy = bd;
        if (r->hit[j])
            continue;                /* from the cache: nothing was read */
        bytes += len;
    }
    if (bytes || busy > s->io.busy) {
        double io = busy > s->io.busy ? busy - s->io.busy : 0.0;
        if (busy > s->io.busy)
            s->io.busy = busy;
        s->stats.xio_bytes += bytes;
        s->stats.xio_s += io;
        if (s->prof)
            prof_layer_io(s->prof, (unsigned)r->layer, io, bytes);
    }
    /* a refused expert's check (continue above) is left in the wait */
    double t1 = prof_now(), waited = t1 - t0 - work;
    s->stats.xio_stall_s += waited;
    if (s->prof && r->k && r->slot[0] >= 0)
        prof_layer_mark(s->prof, (unsigned)r->layer, PROF_ST_IO_WAIT, t1 - waited);
    if (pt)
        *pt += waited;
}

void eng_moe_wait(eng_session *s, eng_route *r, double *pt)
{
    if (r->ready)
        return;
    r->ready = 1;
    wait_some(s, r, 0, r->k, NULL, pt);
}

void eng_moe_wait_one(eng_session *s, eng_route *r, uint32_t j, double *pt)
{
    if (!r->ready)
        wait_some(s, r, j, j + 1, NULL, pt);
}

void eng_moe_release(eng_session *s, eng_route *r)
{
    for (uint32_t j = 0; j < r->k; j++)
        if (r->slot[j] >= 0) {
            eng_xio_release(s->io.xio, r->slot[j]);
            r->slot[j] = -1;
        }
    r->layer = -1;
}

/* Route N_m(h) of layer l and start the fetch of the chosen experts; the
 * output is due at layer target. */
void eng_moe_issue(eng_session *s, unsigned l, const float *h, int32_t target,
                      double *pt)
{
    const fmt_hparams *hp = s->hp;
    const eng_layer *ly = &s->layers[l];
    uint32_t K = hp->top_k;
    eng_route *r = &s->io.route[(unsigned)target % (hp->expert_delay + 1u)];
    if (r->layer >= 0)
        eng_moe_release(s, r);       /* never injected (cannot happen) */
    r->layer = (int32_t)l;
    r->target = target;
    r->k = K;
    r->ready = 0;
    if (!ly->exp_gu) {               /* a layer without experts adds nothing */
        r->k = 0;
        eng_moe_ahead_settle(s, l, r);
        return;
    }
    eng_rmsnorm(s, r->xr, h, ly->moe_norm, hp->dim);
    eng_moe_route(s, ly, r->xr, r->expert, r->w);
    for (uint32_t j = 0; j < K; j++)
        r->slot[j] = -1;
    if (s->io.mode != ENG_XIO_MMAP && s->io.xio) {
        for (uint32_t j = 0; j < K; j++) {
            uint64_t off = 0, len = 0;
            fmt_model_expert(s->model, l, (unsigned)r->expert[j], NULL, NULL, &off, &len);
            int hit = 0;
            int key = s->io.keyed ? (int)(l * hp->n_experts + (unsigned)r->expert[j]) : -1;
            r->slot[j] = eng_xio_issue(s->io.xio, key, off, len, &hit);
            r->hit[j] = (uint8_t)hit;
            if (r->slot[j] < 0)
                eng_xio_fail(s, ENG_EIO, "%s: layer %u expert %d: no staging slot for %llu bytes",
                         fmt_model_path(s->model), l, r->expert[j],
                         (unsigned long long)len);
        }
        eng_moe_ahead_settle(s, l, r);   /* the guesses' holds: the route has its own */
        eng_xio_submit(s->io.xio);          /* the routing's misses go out together */
        if (s->io.mode == ENG_XIO_SYNC)
            eng_moe_wait(s, r, pt);      /* the read is a dead stop here */
    } else if (s->io.pf) {
        /* ExpertTiles: exactly the routed experts' streams */
        for (uint32_t j = 0; j < K; j++) {
            const fmt_stream *gu = ly->exp_gu[r->expert[j]].st;
            const fmt_stream *dn = ly->exp_down[r->expert[j]].st;
            eng_pf_range(s->io.pf, (const uint8_t *)gu->tiles[0].payload - FMT_TILE_HEADER_SIZE,
                         gu->length);
            eng_pf_range(s->io.pf, (const uint8_t *)dn->tiles[0].payload - FMT_TILE_HEADER_SIZE,
                         dn->length);
        }
    }
}

/* Experts js[0 .. n-1] of route r (n <= s->dec.n_xg) on the prepared router
 * input s->dec.act_dim: their gate/up streams in one parallel region, the
 * GLU, their down streams in a second; expert js[i]'s output lands in row
 * (by_j ? js[i] : i) of xg_o [n_xg][dim].  Each expert's sums are those
 * of eng_glu_ffn (the same tiles, inputs and order) whichever experts
 * share its region, so the bits are too. */
static void experts_run(eng_session *s, const eng_route *r, const eng_layer *ly,
                        const uint32_t *js, uint32_t n, int by_j)
{
    const uint32_t dim = s->hp->dim, hid = s->hp->expert_ffn_dim;
    const eng_mv *gu[ENG_MV_MAX], *dn[ENG_MV_MAX];
    const kern_act *in[ENG_MV_MAX];
    float *o[ENG_MV_MAX][FMT_NMATRIX];
    float *const *op[ENG_MV_MAX];
    memset(o, 0, sizeof o);
    for (uint32_t j = 0; j < n; j++) {
        int e = r->expert[js[j]], k = r->slot[js[j]];
        gu[j] = k >= 0 ? &s->io.stage[k].mv[0] : &ly->exp_gu[e];
        dn[j] = k >= 0 ? &s->io.stage[k].mv[1] : &ly->exp_down[e];
        in[j] = &s->dec.act_dim;
        o[j][FMT_M_EXP_GATE] = s->dec.xg_h + (size_t)j * hid;
        o[j][FMT_M_EXP_UP] = s->dec.xg_h2 + (size_t)j * hid;
        op[j] = o[j];
    }
    memset(s->dec.xg_h, 0, (size_t)n * hid * sizeof(float));
    memset(s->dec.xg_h2, 0, (size_t)n * hid * sizeof(float));
    eng_matvec_streams(s, n, gu, in, op);
    for (uint32_t j = 0; j < n; j++) {
        float *h = s->dec.xg_h + (size_t)j * hid;
        eng_glu_act(s, h, s->dec.xg_h2 + (size_t)j * hid, hid);
        kern_act_set(&s->dec.xg_act[j], h, hid, dn[j]->need);
        in[j] = &s->dec.xg_act[j];
        o[j][FMT_M_EXP_GATE] = o[j][FMT_M_EXP_UP] = NULL;
        o[j][FMT_M_EXP_DOWN] = s->dec.xg_o + (size_t)(by_j ? js[j] : j) * dim;
        memset(o[j][FMT_M_EXP_DOWN], 0, dim * sizeof(float));
        s->stats.expert_bytes += gu[j]->st->length + dn[j]->st->length;
    }
    eng_matvec_streams(s, n, dn, in, op);
}

/* eout += w_j * (expert j's output, row by_j ? j : j - j0 of xg_o) for
 * j = j0 .. j0+n-1, in j's order: the order of the sum never depends on
 * which experts ran first. */
static void experts_add(eng_session *s, const eng_route *r, uint32_t j0, uint32_t n,
                        int by_j, float *eout)
{
    const uint32_t dim = s->hp->dim;
    for (uint32_t j = j0; j < j0 + n; j++) {
        const float *y = s->dec.xg_o + (size_t)(by_j ? j : j - j0) * dim, w = r->w[j];
        for (uint32_t i = 0; i < dim; i++)
            eout[i] += w * y[i];
    }
}

/* Route r's experts whose bytes are here (a cache hit, a read landed, or
 * the mapping, or all of them once the route was waited for): bit j set. */
static uint32_t experts_here(eng_session *s, const eng_route *r)
{
    uint32_t m = 0;
    for (uint32_t j = 0; j < r->k; j++)
        if (r->ready || r->slot[j] < 0 || eng_xio_landed(s->io.xio, r->slot[j]))
            m |= 1u << j;
    return m;
}

/* The experts of mask into js[] in j's order; their count. */
static uint32_t experts_of(const eng_route *r, uint32_t mask, uint32_t *js)
{
    uint32_t n = 0;
    for (uint32_t j = 0; j < r->k; j++)
        if (mask >> j & 1u)
            js[n++] = j;
    return n;
}

/* The experts due at layer target, weighted, into eout[dim] (overwritten;
 * zero when nothing is due).  Returns the routing layer, or -1.
 *
 * When a route's outputs all fit in xg_o (k <= n_xg <= ENG_MV_MAX, so a
 * mask's bits are enough) the experts already here run first and the
 * wait for the rest comes after them: a miss's read overlaps the hits'
 * compute.  The sum is then taken in j's order, so which experts ran
 * first never changes a bit.  A wider route runs in groups of n_xg after
 * one wait for all. */
int eng_moe_inject(eng_session *s, int32_t target, float *eout, double *pt)
{
    const fmt_hparams *hp = s->hp;
    uint32_t dim = hp->dim;
    eng_route *r = &s->io.route[(unsigned)target % (hp->expert_delay + 1u)];
    memset(eout, 0, dim * sizeof(float));
    if (r->layer < 0 || r->target != target)
        return -1;
    int l = r->layer;
    const eng_layer *ly = &s->layers[l];
    uint32_t js[ENG_MAX_TOPK], n;
    unsigned need = 0;
    for (uint32_t j = 0; j < r->k; j++)
        need |= ly->exp_gu[r->expert[j]].need;
    kern_act_set(&s->dec.act_dim, r->xr, dim, need);
    if (r->k <= s->dec.n_xg) {
        uint32_t here = experts_here(s, r), rest = ((1u << r->k) - 1u) & ~here;
        if (!r->ready && here)
            wait_some(s, r, 0, r->k, &here, pt);  /* landed: only rebases their slots */
        if ((n = experts_of(r, here, js)) && !s->io.failed)
            experts_run(s, r, ly, js, n, 1);
        if (rest)
            wait_some(s, r, 0, r->k, &rest, pt);
        r->ready = 1;
        if ((n = experts_of(r, rest, js)) && !s->io.failed)
            experts_run(s, r, ly, js, n, 1);
        if (!s->io.failed)
            experts_add(s, r, 0, r->k, 1, eout);
    } else {
        eng_moe_wait(s, r, pt);
        for (uint32_t j0 = 0; j0 < r->k && !s->io.failed; j0 += s->dec.n_xg) {
            uint32_t m = r->k - j0 < s->dec.n_xg ? r->k - j0 : s->dec.n_xg;
            for (uint32_t j = 0; j < m; j++)
                js[j] = j0 + j;
            experts_run(s, r, ly, js, m, 0);
            experts_add(s, r, j0, m, 0, eout);
        }
    }
    eng_moe_release(s, r);
    return l;
}

/* e = MoE(N_m(h)) into eout, routed and injected in the same layer. */
void eng_moe_block(eng_session *s, const eng_layer *ly, const float *h,
                      float *eout, double *pt)
{
    unsigned l = (unsigned)(ly - s->layers);
    eng_moe_issue(s, l, h, (int32_t)l, pt);
    eng_moe_inject(s, (int32_t)l, eout, pt);
}

/* x += the experts due at layer target (a delayed injection); the
 * routing layer, or -1 when none was due. */
int eng_moe_take(eng_session *s, int32_t target, float *x, double *pt)
{
    /* pend [dim] is free scratch: outputs wait as routes, not as sums */
    int lr = eng_moe_inject(s, target, s->dec.pend, pt);
    if (lr < 0)
        return -1;
    for (uint32_t k = 0; k < s->hp->dim; k++)
        x[k] += s->dec.pend[k];
    return lr;
}


void eng_moe_flush(eng_session *s)
{
    eng_moe_ahead_drop(s);
    for (unsigned i = 0; i <= s->hp->expert_delay; i++)
        if (s->io.route[i].layer >= 0)
            eng_moe_release(s, &s->io.route[i]);
}
