/*
 * eng_sample.c — turning a logit vector into one token id.
 *
 * Pipeline (one call of eng_sampler_sample, logits[n_vocab] in place):
 *
 *   1. Repetition penalty, llama.cpp style: every DISTINCT id among the
 *      last rep_last_n ids of the history is penalised once:
 *          logit > 0 ? logit / penalty : logit * penalty
 *      rep_last_n < 0 means the whole history, 0 turns the penalty off;
 *      ids outside [0, n_vocab) are ignored.  The penalty is skipped when it
 *      is 1, not finite or <= 0.
 *   2. temp <= 0 (or NaN): greedy.  The result is the argmax of the
 *      (penalised) logits, the lowest index winning ties.  NaN logits count
 *      as -inf; when every logit is -inf/NaN the answer is 0.
 *   3. Otherwise, in this order:
 *        top-k        keep the k best logits (0, negative or >= n_vocab: off).
 *                     Ties are broken by the lower index, so top_k = 1 is
 *                     exactly greedy.  A bounded heap makes this O(V log k)
 *                     with no sort of the whole vocabulary.
 *        softmax      p_i = exp((l_i - l_max) / temp) over the survivors
 *                     (unnormalised: the best token has p = 1 exactly, so
 *                     no overflow; a +inf logit takes all the mass, shared
 *                     evenly with other +inf logits).
 *        top-p        keep the smallest prefix of the survivors sorted by
 *                     probability (ties: lower index first) whose mass is
 *                     >= top_p (fractions of the top-k mass); always at
 *                     least one token.  top_p >= 1 or NaN: off.
 *        min-p        keep tokens with p >= min_p * p_max (p_max = 1 here).
 *                     min_p <= 0 or NaN: off.
 *        renormalise and draw with the sampler's own PRNG.
 *
 * Why temperature comes before top-p/min-p: that is the order the engine's
 * contract asks for (the Hugging Face "warper" order, also llama2.c's).
 * Note that llama.cpp's own default chain applies temperature LAST, after
 * top-k/top-p/min-p, so at temp != 1 the kept sets can differ from
 * llama.cpp's; greedy decoding (temp 0) and temp 1 are identical.
 *
 * Implementation notes.  top-p and min-p both keep a prefix of the same
 * sorted order (min-p's threshold is relative to p_max, which top-p always
 * keeps, and top-p's mass is measured against the whole top-k mass), so the
 * result is the shorter prefix whichever filter runs first.  We therefore
 * apply min-p first (a linear scan), then drop tokens that provably cannot
 * be inside the nucleus (p < (1 - top_p) * mass / (n - 1), llama2.c's
 * trick, used with a safety margin), and find the nucleus among the rest
 * with a mass-guided quickselect (expected linear time) rather than a sort.
 * Nothing but ranges of at most 32 entries is ever sorted.
 *
 * Randomness: fmt_splitmix64 (the tree's one seeded stream), one 64-bit state,
 * integer arithmetic only, so the same seed gives the same uniform stream
 * on every machine.  Seed 0 is an ordinary, fixed seed — NOT "pick one from
 * the clock"; a front end that wants a time-based seed must choose it
 * itself.  eng_sampler_new and eng_sampler_set both restart the stream from
 * the seed.  The draw uses u in [0,1) with 53 random bits.  The float
 * probabilities come from expf, so bit-for-bit identical token streams
 * across machines additionally assume the same libm.
 */
#include "config.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

/* A candidate token: its unnormalised probability and its id. */
struct cand {
    float    p;
    uint32_t id;
};

struct eng_sampler {
    eng_sampling p;
    uint32_t     n_vocab;
    uint64_t     rng;      /* splitmix64 state */
    /* Scratch, all [n_vocab]: */
    uint32_t    *heap;     /* top-k selection heap (token ids) */
    struct cand *cand;     /* candidates: unnormalised p and token id */
    uint32_t    *mark;     /* last stamp that penalised each id (dedupe) */
    uint32_t     stamp;
};

void eng_sampling_default(eng_sampling *s)
{
    if (!s)
        return;
    s->temp = 0.8f;
    s->top_k = 40;
    s->top_p = 0.95f;
    s->min_p = 0.05f;
    s->rep_penalty = 1.0f;
    s->rep_last_n = 64;
    s->seed = 0;
}

/* ---------------------------------------------------------------- PRNG */

/* Uniform double in [0, 1) from the top 53 bits. */
static double sm64_unit(uint64_t *state)
{
    return (double)(fmt_splitmix64(state) >> 11) * (1.0 / 9007199254740992.0);
}

/* ------------------------------------------------------------ lifetime */

eng_sampler *eng_sampler_new(const eng_sampling *p, uint32_t n_vocab)
{
    eng_sampler *s;

    if (n_vocab == 0)
        return NULL;
    s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->n_vocab = n_vocab;
    s->heap = malloc((size_t)n_vocab * sizeof *s->heap);
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    s->mark = calloc(n_vocab, sizeof *s->mark);
    if (!s->heap || !s->cand || !s->mark) {
        eng_sampler_free(s);
        return NULL;
    }
    if (p) {
        eng_sampler_set(s, p);
    } else {
        eng_sampling d;
        eng_sampling_default(&d);
        eng_sampler_set(s, &d);
    }
    return s;
}

void eng_sampler_free(eng_sampler *s)
{
    if (!s)
        return;
    free(s->heap);
    free(s->cand);
    free(s->mark);
    free(s);
}

void eng_sampler_set(eng_sampler *s, const eng_sampling *p)
{
    if (!s || !p)
        return;
    s->p = *p;
    s->rng = p->seed;
}

/* ------------------------------------------------------------- helpers */

/* NaN reads as -inf everywhere below. */
static float clean(float x)
{
    return isnan(x) ? -INFINITY : x;
}

static void apply_penalty(eng_sampler *s, float *logits,
                          const int32_t *history, size_t n_history)
{
    float pen = s->p.rep_penalty;
    size_t n, i;

    if (!history || n_history == 0 || s->p.rep_last_n == 0)
        return;
    if (!(pen > 0.0f) || !isfinite(pen) || pen == 1.0f)
        return;
    n = n_history;
    if (s->p.rep_last_n > 0 && (size_t)s->p.rep_last_n < n)
        n = (size_t)s->p.rep_last_n;

    /* A fresh stamp per call marks ids already penalised in this call. */
    if (++s->stamp == 0) {
        memset(s->mark, 0, (size_t)s->n_vocab * sizeof *s->mark);
        s->stamp = 1;
    }
    for (i = n_history - n; i < n_history; i++) {
        int32_t id = history[i];
        if (id < 0 || (uint32_t)id >= s->n_vocab || s->mark[id] == s->stamp)
            continue;
        s->mark[id] = s->stamp;
        if (logits[id] > 0.0f)
            logits[id] /= pen;
        else
            logits[id] *= pen;
    }
}

static int32_t argmax(const float *logits, uint32_t n)
{
    uint32_t i, best = 0;
    float bv = -INFINITY;

    for (i = 0; i < n; i++) {
        float v = clean(logits[i]);
        if (v > bv) {
            bv = v;
            best = i;
        }
    }
    return (int32_t)best;
}

/* Is token a strictly better than token b?  (higher logit, then lower id) */
static int better(const float *logits, uint32_t a, uint32_t b)
{
    float la = clean(logits[a]), lb = clean(logits[b]);
    return la > lb || (la == lb && a < b);
}

/* Min-heap on "better": heap[0] is the worst of the kept k. */
static void heap_sift_down(uint32_t *heap, uint32_t n, uint32_t i,
                           const float *logits)
{
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && better(logits, heap[w], heap[l]))
            w = l;
        if (r < n && better(logits, heap[w], heap[r]))
            w = r;
        if (w == i)
            return;
        uint32_t t = heap[i];
        heap[i] = heap[w];
        heap[w] = t;
        i = w;
    }
}

/* Put the k best ids (any order) into out[0..k). */
static void select_top_k(const float *logits, uint32_t n, uint32_t k,
                         uint32_t *out)
{
    uint32_t i;

    for (i = 0; i < k; i++)
        out[i] = i;
    for (i = k / 2; i-- > 0;)
        heap_sift_down(out, k, i, logits);
    for (i = k; i < n; i++) {
        if (better(logits, i, out[0])) {
            out[0] = i;
            heap_sift_down(out, k, 0, logits);
        }
    }
}

/* Candidate order: probability descending, then id ascending.  Ids are
 * unique, so this is a strict total order and every result below that
 * depends on it is deterministic. */
static int cand_before(const struct cand *x, const struct cand *y)
{
    return x->p > y->p || (x->p == y->p && x->id < y->id);
}

static int cand_cmp(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    return cand_before(x, y) ? -1 : cand_before(y, x) ? 1 : 0;
}

static void cand_swap(struct cand *c, uint32_t i, uint32_t j)
{
    struct cand t = c[i];
    c[i] = c[j];
    c[j] = t;
}

/*
 * The nucleus without sorting everything: reorder c[0..n) so that c[0..k)
 * holds the shortest prefix, in cand order, whose mass reaches target, and
 * return k.  A quickselect that follows the mass instead of a rank:
 * partition the undecided range around a pivot; if the better side plus
 * what is already kept reaches the target, the boundary lies inside it,
 * otherwise keep the better side and the pivot and continue below.
 * Expected O(n); ranges of at most 32 entries are finished by sorting.
 * The pivot is the median of three fixed positions, so the reordering (and
 * with it the later draw) is a function of the input alone.
 */
static uint32_t nucleus(struct cand *c, uint32_t n, double target)
{
    uint32_t lo = 0, hi = n, i;
    double kept = 0.0;                  /* mass of c[0..lo), all kept */

    while (hi - lo > 32) {
        uint32_t a = lo, b = lo + (hi - lo) / 2, z = hi - 1, m;
        double upper = 0.0;

        /* median of c[a], c[b], c[z] to position hi - 1 */
        if (cand_before(&c[b], &c[a]))
            cand_swap(c, a, b);
        if (cand_before(&c[z], &c[b]))
            cand_swap(c, b, z);
        if (cand_before(&c[b], &c[a]))
            cand_swap(c, a, b);
        cand_swap(c, b, hi - 1);

        /* c[lo..m) before the pivot, c[m] the pivot, c(m..hi) after it */
        m = lo;
        for (i = lo; i < hi - 1; i++) {
            if (cand_before(&c[i], &c[hi - 1])) {
                upper += c[i].p;
                cand_swap(c, i, m++);
            }
        }
        cand_swap(c, m, hi - 1);

        if (kept + upper >= target) {
            hi = m;                     /* the boundary is before the pivot */
        } else if (kept + upper + c[m].p >= target) {
            return m + 1;               /* the pivot completes the nucleus */
        } else {
            kept += upper + c[m].p;
            lo = m + 1;
        }
    }
    qsort(c + lo, hi - lo, sizeof *c, cand_cmp);
    for (i = lo; i < hi; i++) {
        kept += c[i].p;
        if (kept >= target)
            return i + 1;
    }
    return hi;                          /* rounding: keep the whole range */
}

/* --------------------------------------------------------------- sample */

/* Keep the candidates c[0..n) with p >= thr, in order; returns the new
 * count.  The best token (p == 1 exactly, see the softmax) is always
 * kept so that no filter can empty the set. */
static uint32_t compact_ge(struct cand *c, uint32_t n, double thr)
{
    uint32_t i, m = 0;

    for (i = 0; i < n; i++)
        if ((double)c[i].p >= thr || c[i].p == 1.0f)
            c[m++] = c[i];
    return m;
}

int32_t eng_sampler_sample(eng_sampler *s, float *logits,
                           const int32_t *history, size_t n_history)
{
    struct cand *c;
    uint32_t V, n, i, m, n_topk;
    float temp, lmax;
    double mass, total, r, cum;

    if (!s || !logits)
        return -1;
    V = s->n_vocab;
    c = s->cand;

    apply_penalty(s, logits, history, n_history);

    temp = s->p.temp;
    if (!(temp > 0.0f))                 /* 0, negative or NaN: greedy */
        return argmax(logits, V);
    if (temp > FLT_MAX)
        temp = FLT_MAX;                 /* +inf: keeps -inf / temp == -inf */

    /* --- top-k: candidate ids into c[].id --------------------------------- */
    if (s->p.top_k > 0 && (uint32_t)s->p.top_k < V) {
        n = (uint32_t)s->p.top_k;
        select_top_k(logits, V, n, s->heap);
        for (i = 0; i < n; i++)
            c[i].id = s->heap[i];
    } else {
        n = V;
        for (i = 0; i < V; i++)
            c[i].id = i;
    }

    /* --- softmax, unnormalised so that the best token has p == 1 ------------ */
    lmax = -INFINITY;
    for (i = 0; i < n; i++) {
        float v = clean(logits[c[i].id]);
        if (v > lmax)
            lmax = v;
    }
    if (lmax == -INFINITY) {            /* nothing possible: lowest candidate */
        uint32_t lo = c[0].id;
        for (i = 1; i < n; i++)
            if (c[i].id < lo)
                lo = c[i].id;
        return (int32_t)lo;
    }
    m = 0;
    mass = 0.0;
    for (i = 0; i < n; i++) {
        float v = clean(logits[c[i].id]), p;
        if (lmax == INFINITY)           /* +inf logits share all the mass */
            p = v == INFINITY ? 1.0f : 0.0f;
        else                            /* v - lmax <= 0 (or -inf): no overflow */
            p = expf((v - lmax) / temp);
        if (p > 0.0f) {                 /* drop impossible tokens at once */
            c[m].id = c[i].id;
            c[m].p = p;
            m++;
            mass += p;
        }
    }
    n = n_topk = m;                     /* >= 1: the max has p == 1 */

    /* --- min-p (p >= min_p * p_max, p_max == 1); commutes with top-p ------- */
    if (s->p.min_p > 0.0f)
        n = compact_ge(c, n, (double)s->p.min_p);

    /* --- top-p, mass measured against the whole top-k mass ---------------- */
    if (s->p.top_p < 1.0f && n > 1) {
        double target = s->p.top_p > 0.0f ? (double)s->p.top_p * mass : 0.0;

        /* Tokens with p < (mass - target) / (n_topk - 1) cannot be inside the
         * nucleus (see the essay); the 0.99 margin leaves borderline tokens
         * to the exact selection that follows. */
        n = compact_ge(c, n, (mass - target) / (double)(n_topk - 1) * 0.99);
        n = nucleus(c, n, target);
    }

    /* --- renormalise and draw ------------------------------------------- */
    total = 0.0;
    for (i = 0; i < n; i++)
        total += c[i].p;
    r = sm64_unit(&s->rng) * total;
    cum = 0.0;
    for (i = 0; i < n; i++) {
        cum += c[i].p;
        if (r < cum)
            return (int32_t)c[i].id;
    }
    return (int32_t)c[n - 1].id;        /* rounding put r at the very end */
}
