/*
 * eng_moe_ahead.c — look-ahead: the next layers' experts read before
 * their routers have run (issue 17, item 4).
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
 *     changes little from one layer to the next, so a later layer's
 *     router applied to this layer's output (after that layer's norm)
 *     picks mostly the experts it will pick when its turn comes.  At the
 *     end of layer l (eng_moe_ahead_guess, from the schedule's layer end)
 *     we do that for each of the next `depth` layers (l + 1 ... l +
 *     depth; --expert-ahead-layers) and issue reads of the guessed experts
 *     into the RAM expert cache's slots, keyed as the routed reads are.
 *     A token's first layers have no layer before them in the token:
 *     their guesses are made from its embedding (eng_forward), which is
 *     the residual layer 0's attention adds to.
 *     When layer m routes (eng_moe_issue), a correct guess is a slot that
 *     holds, or is receiving, the expert's bytes: a hit.  Then
 *     (eng_moe_ahead_settle) the guesses' holds are released; a wrong
 *     guess stays cached like any other read, replaced as the cache's
 *     policy says (eng_io_cache.c).
 *
 * Depth.  A read guessed one layer ahead has the next layer's attention
 * and the experts already cached to hide behind, on a storage-bound model
 * often less than one expert's read takes.  Guessing from further back
 * starts the read that many layers earlier, at the price of worse
 * guesses: the residual has drifted more by then.  Each layer's set of guesses gathers them:
 * the farthest guess opens it, each nearer one adds the experts not yet
 * in it (the nearest, the likeliest right, are never left out: see the
 * bounds in eng_moe_ahead_setup), and all of them are read, those for
 * layers past the next only once no sooner read is left (ENG_FETCH_LATER,
 * eng_io_queue.c).  The routers
 * of the layers guessed for run in one parallel region
 * (eng_moe_logits).  The measurements behind ENG_AHEAD_LAYERS, the
 * default depth, are in docs/perf-log/2026-12-05.md (16:49 UTC) and
 * 2026-12-06.md (06:56 and 13:09 UTC).
 *
 * A guess never changes a token: the routed experts are the router's, read
 * from the same file bytes whether a guess or the route started the read.
 * It costs bandwidth (the wasted reads), the guesses' router passes, and
 * slots, kept beside a token's own staging (eng_moe_ahead_slots) so a
 * guess can never take the slot a routed read needs.  Guesses need the
 * cache's keyed slots (without a budget there is nowhere for a guess to
 * wait) and sync/staged I/O (mmap reads through the page cache).
 *
 * Counted (eng_stats): guesses made (xio_pred: distinct experts per
 * layer, however many layers guessed each), guesses the layer then routed
 * (xio_pred_hits), guesses that read from the file
 * (xio_pred_reads), of which not routed (xio_pred_wasted), and the bytes
 * those reads took (xio_pred_bytes, also in xio_bytes).  The cache's own
 * hits and misses (xio_hits, xio_misses) stay per routed expert: a routed
 * expert a guess brought in is a hit.
 *
 * --expert-ahead on|off (eng_opts.expert_ahead; $CFLOW_EXPERT_AHEAD),
 * on by default; --expert-ahead-layers N (eng_opts.expert_ahead_layers;
 * $CFLOW_EXPERT_AHEAD_LAYERS), the depth.  Both change between tokens
 * (eng_set_expert_ahead, eng_set_expert_ahead_layers): off and on again
 * keep the slots set aside at the open, and the depth may go anywhere up
 * to the open's, whose guesses those slots were sized for.
 */
#include "config.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/eng_impl.h"
#include "prof/prof.h"

struct ahead_set {
    int32_t   layer;               /* the stored layer guessed for; -1 none */
    uint32_t  k;                   /* guesses held, distinct experts */
    int      *expert, *slot;       /* [cap] */
    uint8_t  *read;                /* [cap] the guess started a read */
};

struct eng_ahead {
    int       ready;               /* slots were reserved (eng_moe_ahead_slots) */
    unsigned  depth;               /* layers looked ahead, 1..depth_max */
    unsigned  depth_max;           /* the depth opened with: what the slots set
                                    * aside and the arrays below are sized for */
    uint32_t  cap;                 /* guesses a set may hold: top_k x depth_max */
    uint32_t  held, reserve;       /* slots the sets hold; at most reserve */
    struct ahead_set set[ENG_AHEAD_MAX];   /* set[layer % depth] */
    int       expert[ENG_MAX_TOPK];
    float     w[ENG_MAX_TOPK];     /* the guessed weights (unused) */
    float    *xr;                  /* [depth][dim] N_m of each later layer m over h */
    float    *p;                   /* [depth][n_experts] their routers' logits */
    /* counts; issue_hits: guesses that found their expert in a slot */
    uint64_t  pred, hits, reads, wasted, bytes, issue_hits;
};

/* A depth outside 1 .. ENG_AHEAD_MAX: ENG_EARG. */
static int bad_depth(int n, char *err, size_t errlen)
{
    return eng_fail(err, errlen, ENG_EARG, "expert look-ahead of %d layers: use 1 to %d", n,
                    ENG_AHEAD_MAX);
}

/* $CFLOW_EXPERT_AHEAD_LAYERS where eng_opts.expert_ahead_layers is 0: the
 * look-ahead's depth, else ENG_AHEAD_LAYERS.  0, or ENG_EARG. */
static int depth_from(eng_session *s, unsigned *depth, char *err, size_t errlen)
{
    int n = s->opts.expert_ahead_layers;
    *depth = ENG_AHEAD_LAYERS;
    if (n == 0) {
        unsigned long v = 0;
        int rc = eng_env_count("CFLOW_EXPERT_AHEAD_LAYERS", ENG_AHEAD_LAYERS, 1, ENG_AHEAD_MAX, 0,
                               &v, err, errlen);
        if (rc)
            return rc;
        n = (int)v;
    }
    if (n < 1 || n > ENG_AHEAD_MAX)
        return bad_depth(n, err, errlen);
    *depth = (unsigned)n;
    return 0;
}

/* Whether the model's experts can be guessed at all: a standard MoE
 * (pipeline-native schedules know theirs early), two layers or more. */
static int guessable(const fmt_hparams *hp)
{
    return hp->n_experts && hp->expert_delay == 0 && hp->n_layers >= 2 &&
           hp->top_k <= ENG_MAX_TOPK;
}

int eng_moe_ahead_setup(eng_session *s, char *err, size_t errlen)
{
    const fmt_hparams *hp = s->hp;
    int on = s->opts.expert_ahead;
    unsigned depth = 0;
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
    int rc = depth_from(s, &depth, err, errlen);
    if (rc)
        return rc;
    s->opts.expert_ahead_layers = (int)depth;
    if (!on || !guessable(hp))
        return 0;                    /* nothing to guess */
    if (depth > hp->n_layers - 1)
        depth = hp->n_layers - 1;    /* (a guess never reaches past the last layer) */
    struct eng_ahead *a = calloc(1, sizeof *a);
    if (!a)
        goto oom;
    a->depth = a->depth_max = depth;
    /* a set gathers at most top_k new guesses at each of `depth` layers;
     * after a layer has routed, the sets of the next depth - 1 layers
     * have had depth - 1, ..., 1 rounds and this layer's guesses add one
     * more to each and a first to the farthest: top_k (1 + 2 + ... +
     * depth) slots, the most they ever hold (eng_moe_ahead_slots) */
    a->cap = hp->top_k * depth;
    a->reserve = hp->top_k * depth * (depth + 1) / 2;
    s->io.ahead = a;                    /* (eng_moe_ahead_free frees a part) */
    if (!(a->xr = calloc((size_t)depth * hp->dim, sizeof(float))) ||
        !(a->p = calloc((size_t)depth * hp->n_experts, sizeof(float))))
        goto oom;
    for (unsigned d = 0; d < depth; d++) {
        struct ahead_set *st = &a->set[d];
        st->layer = -1;
        st->expert = calloc(a->cap, sizeof *st->expert);
        st->slot = calloc(a->cap, sizeof *st->slot);
        st->read = calloc(a->cap, sizeof *st->read);
        if (!st->expert || !st->slot || !st->read)
            goto oom;
    }
    return 0;
oom:
    eng_moe_ahead_free(s);
    return eng_fail(err, errlen, ENG_ENOMEM, "%s: out of memory", fmt_model_path(s->model));
}

int eng_expert_ahead(const eng_session *s)
{
    return s->opts.expert_ahead ? s->opts.expert_ahead_layers : 0;
}

/* On asked of a session opened with look-ahead off: ENG_EUNSUP. */
static int off_at_open(const eng_session *s, char *err, size_t errlen)
{
    return eng_fail(err, errlen, ENG_EUNSUP,
                    "%s: look-ahead was off when the model was opened, so no slots were "
                    "set aside for its guesses: open it with look-ahead on",
                    fmt_model_path(s->model));
}

/* Between tokens no guess set is open (each layer settles its own, and a
 * guess never reaches past the last layer), so turning off has nothing in
 * flight to account for: the drop is a guard.  The slots set aside at the
 * open stay set aside, so that on again needs no new layout. */
int eng_set_expert_ahead(eng_session *s, int on, char *err, size_t errlen)
{
    on = on != 0;
    if (on == (s->opts.expert_ahead != 0))
        return 0;
    if (on && !s->io.ahead && guessable(s->hp))
        return off_at_open(s, err, errlen);
    if (!on)
        eng_moe_ahead_drop(s);
    s->opts.expert_ahead = on;       /* eng_moe_ahead_guess reads it */
    return 0;
}

/* The depth is only which sets the guesses gather in (set[layer % depth])
 * and how far eng_moe_ahead_guess looks: between tokens every set is
 * empty, so a new depth starts clean.  The slots set aside at the open
 * hold depth_max's guesses and any smaller depth's. */
int eng_set_expert_ahead_layers(eng_session *s, int n, char *err, size_t errlen)
{
    struct eng_ahead *a = s->io.ahead;
    if (n < 1 || n > ENG_AHEAD_MAX)
        return bad_depth(n, err, errlen);
    if (guessable(s->hp)) {
        unsigned d = (unsigned)n < s->hp->n_layers - 1 ? (unsigned)n : s->hp->n_layers - 1;
        if (!a)
            return off_at_open(s, err, errlen);
        if (d > a->depth_max)
            return eng_fail(err, errlen, ENG_EUNSUP,
                            "%s: look-ahead of %d layers: slots were set aside for %u when "
                            "the model was opened: open it with --expert-ahead-layers %d",
                            fmt_model_path(s->model), n, a->depth_max, n);
        eng_moe_ahead_drop(s);       /* a guard: no set is open between tokens */
        a->depth = d;
    }
    s->opts.expert_ahead_layers = n;  /* eng_expert_ahead reports it */
    return 0;
}

void eng_moe_ahead_free(eng_session *s)
{
    struct eng_ahead *a = s->io.ahead;
    if (!a)
        return;
    for (unsigned d = 0; d < ENG_AHEAD_MAX; d++) {
        free(a->set[d].expert);
        free(a->set[d].slot);
        free(a->set[d].read);
    }
    free(a->xr);
    free(a->p);
    free(a);
    s->io.ahead = NULL;
}

unsigned eng_moe_ahead_slots(eng_session *s, int keyed)
{
    if (!s->io.ahead)
        return 0;
    s->io.ahead->ready = keyed != 0;
    return s->io.ahead->ready ? s->io.ahead->reserve : 0;
}

/* Give back set st's slots; routed: the route of its layer (NULL: none
 * came, every guess counts as missed). */
static void settle(eng_session *s, struct ahead_set *st, const eng_route *routed)
{
    struct eng_ahead *a = s->io.ahead;
    for (uint32_t j = 0; j < st->k; j++) {
        int hit = 0;
        for (uint32_t t = 0; routed && t < routed->k; t++)
            hit |= routed->expert[t] == st->expert[j];
        a->hits += (uint64_t)hit;
        a->wasted += (uint64_t)(st->read[j] && !hit);
        eng_fetch_release(s, st->slot[j]);
    }
    a->held -= st->k;
    st->k = 0;
    st->layer = -1;
}

void eng_moe_ahead_settle(eng_session *s, unsigned l, const eng_route *r)
{
    struct eng_ahead *a = s->io.ahead;
    if (!a)
        return;
    struct ahead_set *st = &a->set[l % a->depth];
    if (st->layer >= 0)
        settle(s, st, st->layer == (int32_t)l ? r : NULL);
}

void eng_moe_ahead_drop(eng_session *s)
{
    struct eng_ahead *a = s->io.ahead;
    for (unsigned d = 0; a && d < a->depth; d++)
        if (a->set[d].layer >= 0)
            settle(s, &a->set[d], NULL);
}

/* Stored layer m's guessed experts a->expert[top_k]: issue the reads of
 * those set st does not hold yet, after every other read where later (a
 * layer past the next); 0, or -1 when out of slots (guess no further). */
static int guess(eng_session *s, unsigned m, int later)
{
    struct eng_ahead *a = s->io.ahead;
    const fmt_hparams *hp = s->hp;
    struct ahead_set *st = &a->set[m % a->depth];
    if (st->layer != (int32_t)m) {
        if (st->layer >= 0)
            settle(s, st, NULL);     /* a layer that never routed (cannot happen) */
        st->layer = (int32_t)m;
    }
    for (uint32_t j = 0; j < hp->top_k; j++) {
        uint64_t off = 0, len = 0;
        int hit = 0, e = a->expert[j], have = 0;
        for (uint32_t t = 0; t < st->k && !have; t++)
            have = st->expert[t] == e;
        if (have)
            continue;                /* guessed from an earlier layer */
        if (st->k >= a->cap || a->held >= a->reserve)
            return -1;               /* (cannot happen: the bounds above) */
        int k = eng_fetch(s, m, (unsigned)e, ENG_FETCH_GUESS | (later ? ENG_FETCH_LATER : 0),
                          &hit);
        if (k < 0)
            return -1;
        fmt_model_expert(s->model, m, (unsigned)e, NULL, NULL, &off, &len);
        st->expert[st->k] = e;
        st->slot[st->k] = k;
        st->read[st->k] = (uint8_t)!hit;
        st->k++;
        a->held++;
        a->pred++;
        a->issue_hits += (uint64_t)hit;
        if (!hit) {
            a->reads++;
            a->bytes += len;
            s->stats.xio_bytes += len;
            if (s->prof)             /* read for layer m, as its routed reads */
                prof_layer_io(s->prof, m, 0.0, len);
        }
    }
    return 0;
}

void eng_moe_ahead_guess(eng_session *s, unsigned next, const float *h)
{
    struct eng_ahead *a = s->io.ahead;
    const fmt_hparams *hp = s->hp;
    if (!a || !a->ready || !s->opts.expert_ahead || !eng_fetch_keyed(s) || s->io.failed)
        return;
    /* the stored blocks the next effective layers run (FixedPoint repeats
     * each block `iterations` times), nearest first: its guess is the
     * likeliest right and its read the most urgent */
    unsigned T = hp->combine_style == FMT_COMBINE_FIXED_POINT && hp->iterations
                     ? hp->iterations : 1;
    unsigned m[ENG_AHEAD_MAX], n = 0, last = UINT_MAX;
    const eng_layer *ly[ENG_AHEAD_MAX];
    const float *x[ENG_AHEAD_MAX];
    float *out[ENG_AHEAD_MAX];
    for (unsigned d = 0; d < a->depth; d++) {
        unsigned b = (next + d) / T;
        if (b >= hp->n_layers)
            break;
        if (b == last || !s->layers[b].exp_gu)
            continue;                /* a block guessed already, or no experts */
        last = m[n] = b;
        ly[n] = &s->layers[b];
        float *xr = a->xr + (size_t)n * hp->dim;
        eng_rmsnorm(s, xr, h, ly[n]->moe_norm, hp->dim);
        x[n] = xr;
        out[n] = a->p + (size_t)n * hp->n_experts;
        n++;
    }
    if (!n)
        return;
    eng_moe_logits(s, n, ly, x, out);   /* every router in one region */
    for (unsigned j = 0; j < n; j++) {
        eng_moe_pick(s, out[j], a->expert, a->w);
        if (guess(s, m[j], j > 0))
            break;
    }
    eng_fetch_submit(s);             /* the guesses' reads go out together, now */
}

void eng_moe_ahead_stats(const eng_session *s, eng_stats *st)
{
    const struct eng_ahead *a = s->io.ahead;
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
