/*
 * eng_moe_ahead.c — look-ahead: the next layer's experts read before its
 * router has run (issue 17, item 4).
 *
 * With sync or staged expert I/O a layer's experts are known only when its
 * router runs, and a read issued then has at most the layer's own dense
 * work to hide behind (none at all in sync mode, none for Mixtral-style
 * layers without a dense FFN).  Two ways to know them earlier:
 *
 *   - pipeline-native schedules (expert_delay > 0) route at layer l and
 *     inject at l + expert_delay; their reads already overlap the layers
 *     between (staged mode, eng_moe.c).  Nothing to guess.
 *   - a standard MoE (expert_delay 0) does not say.  But the residual
 *     changes little from one layer to the next, so layer l + 1's router
 *     applied to layer l's output (after its norm) picks mostly the experts
 *     that router will pick a layer later.  At the end of layer l
 *     (eng_moe_ahead_guess, from the schedule's layer end) we do exactly
 *     that and issue reads of the guessed experts into the RAM expert
 *     cache's slots, keyed as the routed reads are.  When layer l + 1
 *     routes (eng_moe_issue), a correct guess is a slot that holds, or is
 *     receiving, the expert's bytes: a hit, read while layer l + 1's
 *     attention ran.  Then (eng_moe_ahead_settle) the guesses' holds are
 *     released; a wrong guess stays cached like any other read, replaced
 *     as the cache's policy says (eng_io.c, "Replacement").
 *
 * A guess never changes a token: the routed experts are the router's, read
 * from the same file bytes whether a guess or the route started the read.
 * It costs bandwidth (the wasted reads) and top_k slots, kept beside a
 * token's own staging (eng_moe_ahead_slots) so a guess can never take the
 * slot a routed read needs.  Guesses need the cache's keyed slots (without
 * a budget there is nowhere for a guess to wait) and sync/staged I/O (mmap
 * reads through the page cache).
 *
 * Counted (eng_stats): guesses made (xio_pred), guesses the next layer
 * then routed (xio_pred_hits), guesses that read from the file
 * (xio_pred_reads), of which not routed (xio_pred_wasted), and the bytes
 * those reads took (xio_pred_bytes, also in xio_bytes).  The cache's own
 * hits and misses (xio_hits, xio_misses) stay per routed expert: a routed
 * expert a guess brought in is a hit.
 *
 * --expert-ahead on|off (eng_opts.expert_ahead; $CFLOW_EXPERT_AHEAD),
 * on by default.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/eng_impl.h"
#include "prof/prof.h"

struct eng_ahead {
    int       ready;               /* slots were reserved (eng_moe_ahead_slots) */
    int32_t   layer;               /* the stored layer guessed for; -1 none */
    uint32_t  k;
    int       expert[ENG_MAX_TOPK], slot[ENG_MAX_TOPK];
    uint8_t   read[ENG_MAX_TOPK];  /* the guess started a read */
    float     w[ENG_MAX_TOPK];     /* the guessed weights (unused) */
    float    *xr;                  /* [dim] N_m of the next layer over h */
    /* counts; issue_hits: guesses that found their expert in a slot */
    uint64_t  pred, hits, reads, wasted, bytes, issue_hits;
};

int eng_moe_ahead_setup(eng_session *s, char *err, size_t errlen)
{
    const fmt_hparams *hp = s->hp;
    int on = s->opts.expert_ahead;
    if (on < 0) {
        const char *v = getenv("CFLOW_EXPERT_AHEAD");
        on = 1;
        if (v && *v) {
            if (!strcmp(v, "off") || !strcmp(v, "0"))
                on = 0;
            else if (strcmp(v, "on") && strcmp(v, "1"))
                return eng_fail(err, errlen, ENG_EARG,
                                "CFLOW_EXPERT_AHEAD='%s': use on or off", v);
        }
    }
    s->opts.expert_ahead = on;
    if (!on || !hp->n_experts || hp->expert_delay > 0 || hp->n_layers < 2 ||
        hp->top_k > ENG_MAX_TOPK)
        return 0;                    /* nothing to guess */
    struct eng_ahead *a = calloc(1, sizeof *a);
    if (!a || !(a->xr = calloc(hp->dim, sizeof(float)))) {
        free(a);
        return eng_fail(err, errlen, ENG_ENOMEM, "%s: out of memory",
                        fmt_model_path(s->model));
    }
    a->layer = -1;
    s->ahead = a;
    return 0;
}

void eng_moe_ahead_free(eng_session *s)
{
    if (!s->ahead)
        return;
    free(s->ahead->xr);
    free(s->ahead);
    s->ahead = NULL;
}

unsigned eng_moe_ahead_slots(eng_session *s, int keyed)
{
    if (!s->ahead)
        return 0;
    s->ahead->ready = keyed != 0;
    return s->ahead->ready ? s->hp->top_k : 0;
}

/* Give back the pending guess's slots; routed: the route of its layer
 * (NULL: none came, every guess counts as missed). */
static void settle(eng_session *s, const eng_route *routed)
{
    struct eng_ahead *a = s->ahead;
    for (uint32_t j = 0; j < a->k; j++) {
        int hit = 0;
        for (uint32_t t = 0; routed && t < routed->k; t++)
            hit |= routed->expert[t] == a->expert[j];
        a->hits += (uint64_t)hit;
        a->wasted += (uint64_t)(a->read[j] && !hit);
        eng_xio_release(s->xio, a->slot[j]);
    }
    a->k = 0;
    a->layer = -1;
}

void eng_moe_ahead_settle(eng_session *s, unsigned l, const eng_route *r)
{
    if (s->ahead && s->ahead->layer >= 0)
        settle(s, s->ahead->layer == (int32_t)l ? r : NULL);
}

void eng_moe_ahead_drop(eng_session *s)
{
    if (s->ahead && s->ahead->layer >= 0)
        settle(s, NULL);
}

void eng_moe_ahead_guess(eng_session *s, unsigned i, const float *h)
{
    struct eng_ahead *a = s->ahead;
    const fmt_hparams *hp = s->hp;
    if (!a || !a->ready || !s->xio || !s->xio_keyed || s->xio_mode == ENG_XIO_MMAP ||
        s->xio_failed)
        return;
    /* the stored block the next effective layer runs (FixedPoint repeats
     * each block `iterations` times) */
    unsigned T = hp->combine_style == FMT_COMBINE_FIXED_POINT && hp->iterations
                     ? hp->iterations : 1;
    unsigned next = (i + 1) / T;
    if (next >= hp->n_layers || !s->layers[next].exp_gu)
        return;
    eng_moe_ahead_drop(s);           /* (a guess is always settled before) */
    const eng_layer *ly = &s->layers[next];
    eng_rmsnorm(s, a->xr, h, ly->moe_norm, hp->dim);
    eng_moe_topk(s, ly, a->xr, a->expert, a->w);
    a->layer = (int32_t)next;
    for (uint32_t j = 0; j < hp->top_k; j++) {
        uint64_t off = 0, len = 0;
        int hit = 0, e = a->expert[j];
        fmt_model_expert(s->model, next, (unsigned)e, NULL, NULL, &off, &len);
        int k = eng_xio_issue(s->xio, (int)(next * hp->n_experts + (unsigned)e), off, len,
                              &hit);
        if (k < 0)
            break;                   /* no slot: guess no further */
        a->slot[a->k] = k;
        a->read[a->k] = (uint8_t)!hit;
        a->k++;
        a->pred++;
        a->issue_hits += (uint64_t)hit;
        if (!hit) {
            a->reads++;
            a->bytes += len;
            s->stats.xio_bytes += len;
            if (s->prof)             /* read for layer next, as its routed reads */
                prof_layer_io(s->prof, next, 0.0, len);
        }
    }
    eng_xio_submit(s->xio);          /* the guesses' reads go out together, now */
}

void eng_moe_ahead_stats(const eng_session *s, eng_stats *st)
{
    const struct eng_ahead *a = s->ahead;
    if (!a)
        return;
    st->xio_pred = a->pred;
    st->xio_pred_hits = a->hits;
    st->xio_pred_reads = a->reads;
    st->xio_pred_wasted = a->wasted;
    st->xio_pred_bytes = a->bytes;
    /* the cache's figures count routed experts, not guesses */
    st->xio_hits -= st->xio_hits >= a->issue_hits ? a->issue_hits : st->xio_hits;
    st->xio_misses -= st->xio_misses >= a->reads ? a->reads : st->xio_misses;
}
