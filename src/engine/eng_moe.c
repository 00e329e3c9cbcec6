/*
 * eng_moe.c — routed experts: routing, fetch and the deferred compute.
 *
 * An expert's output is routed at layer l (the router reads N_m(h) there)
 * and lands at its injection layer l + expert_delay.  Routing and compute
 * are split so the expert's bytes can travel in between:
 *
 *   eng_moe_issue   at the routing layer: the router, top-k, the weights, and
 *                   the fetch of each chosen expert (eng_fetch.c: nothing in
 *                   mmap mode, a PREFETCHT0 hint when the prefetch thread
 *                   runs, a read into a staging slot with sync/staged I/O);
 *                   sync mode waits for the reads right there.
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
 * The route ring lives in the session's expert I/O room (eng_impl.h;
 * eng_io_session.c sets it up); fetching, waiting for and binding an
 * expert's bytes is eng_fetch.c's, the reads themselves the staged
 * reader's (eng_io.c).  A refused expert fails the token with ENG_EFORMAT,
 * a failed read with ENG_EIO (eng_xio_fail).  Look-ahead (eng_moe_ahead.c)
 * may have read a layer's experts before it routes: eng_moe_issue then
 * finds them as cache hits and settles the guesses.
 */
#include "config.h"

#include <string.h>

#include "engine/engine.h"
#include "engine/eng_impl.h"
#include "kernels/kern.h"
#include "prof/prof.h"

/* Wait for the reads of route r's experts j0 <= j < j1 with bit j of
 * *mask set (mask NULL: all of them), each bound to its slot
 * (eng_fetch_wait; a slot already landed costs no wait, only the bind),
 * and account the wait to the routing layer (eng_fetch_account).  After a
 * failed read the token is lost: its other reads are left to land on
 * their own (their slots wait for them, eng_io.c). */
static void wait_some(eng_session *s, eng_route *r, uint32_t j0, uint32_t j1,
                      const uint32_t *mask, double *pt)
{
    eng_fetch_acc acc = { 0 };
    double t0 = prof_now();
    for (uint32_t j = j0; j < j1 && j < r->k && !s->io.failed; j++)
        if (!mask || (*mask >> j & 1u))
            eng_fetch_wait(s, (unsigned)r->layer, (unsigned)r->expert[j], r->slot[j], r->hit[j],
                           &acc);
    eng_fetch_account(s, (unsigned)r->layer, &acc, t0, pt);
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
    if (!r->ready && r->slot[j] >= 0)
        wait_some(s, r, j, j + 1, NULL, pt);
}

void eng_moe_release(eng_session *s, eng_route *r)
{
    for (uint32_t j = 0; j < r->k; j++) {
        eng_fetch_release(s, r->slot[j]);
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
    for (uint32_t j = 0; j < K; j++) {
        int hit = 0;
        r->slot[j] = eng_fetch(s, l, (unsigned)r->expert[j], ENG_FETCH_NOW, &hit);
        r->hit[j] = (uint8_t)hit;
    }
    eng_moe_ahead_settle(s, l, r);   /* the guesses' holds: the route has its own */
    eng_fetch_submit(s);             /* the routing's misses go out together */
    if (s->io.mode == ENG_XIO_SYNC)
        eng_moe_wait(s, r, pt);      /* the read is a dead stop here */
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
        const unsigned e = (unsigned)r->expert[js[j]];
        gu[j] = eng_fetch_mv(s, ly, e, r->slot[js[j]], 0);
        dn[j] = eng_fetch_mv(s, ly, e, r->slot[js[j]], 1);
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
        if (r->ready || eng_fetch_landed(s, r->slot[j]))
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
