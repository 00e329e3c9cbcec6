/*
 * eng_moe_batch.c — the routed experts of a prefill chunk, grouped by
 * expert.
 *
 * Token by token, a chunk of m prompt positions streams every routed
 * expert's tiles once per position that chose it: with top-k routing over
 * E experts, m * k expert streams, most of them the same few experts again
 * (and, under sync/staged I/O, each one read from storage again).  Here the
 * chunk is routed first, all its positions in one pass over the router
 * (eng_moe_route_many: the same logits, top-k and weights as eng_moe_issue
 * gives each position), the choices are sorted by expert, and each
 * expert that any position chose runs once as a mat-mat over the
 * positions that chose it: its tiles come from memory (or storage) once
 * per chunk, at most E expert streams instead of m * k.
 *
 * Exactness: kern_ops.tile_mm gives each position exactly the sums of its
 * own mat-vec, and every other step is the decode path's code on the same
 * values, so each (position, choice) output is bit-identical to the one
 * eng_moe_inject computes; those outputs are kept (exp [m][k][dim]) and
 * added in the router's order, as eng_moe_inject adds them, so the
 * weighted sums are bit-identical too.
 *
 * The chunk's distinct experts are fetched (eng_fetch.c) in waves: under
 * sync/staged expert I/O of as many as there are staging slots (top_k x
 * (expert_delay + 1), more with the RAM expert cache: eng_io_session.c),
 * all of a wave's reads issued together.  Staged, the wave's experts
 * already in RAM run first, then the others in the route's order, each
 * once its own read has landed, so the reads overlap the compute (the
 * outputs are summed in the router's order afterwards, so the order they
 * ran in changes no bit); sync waits for the whole wave first; read in
 * place, every expert is there.  A failed or short read stops the chunk
 * with the reader's message (eng_xio_fail), and the chunk's positions are
 * not taken.
 *
 * Buffers (the batch room, eng_batch in eng_impl.h; eng_batch_init in
 * eng_prefill.c): xr [B][dim] router inputs and their prepared inputs
 * act_xr [B]; sel/w [B][k] each position's choices and weights; ord [B*k]
 * the choices grouped by expert, cnt [E+1] where each group starts (cur
 * [E] the cursors that fill them); exp [B][k][dim] the outputs; h/h2
 * [B][hmax], act_ffn [B] and o [B][dim] the scratch of one expert's group.
 */
#include "config.h"

#include <string.h>

#include "engine/engine.h"
#include "engine/eng_impl.h"
#include "kernels/kern.h"
#include "prof/prof.h"

/* One expert's FFN over its group of g positions (choice indices idx[g]
 * into sel), from the streams gu/dn (mapped or staged), into exp. */
static void expert_group(eng_session *s, const eng_mv *gu, const eng_mv *dn,
                         const int *idx, unsigned g)
{
    const fmt_hparams *hp = s->hp;
    const uint32_t dim = hp->dim, K = hp->top_k, hid = hp->expert_ffn_dim;
    const size_t hm = s->hmax;
    kern_act x[ENG_BATCH];           /* shallow views of the routed inputs */
    float *out[FMT_NMATRIX] = { 0 };
    size_t ld[FMT_NMATRIX] = { 0 };

    for (unsigned i = 0; i < g; i++)
        x[i] = s->bat.act_xr[idx[i] / (int)K];
    memset(s->bat.h, 0, g * hm * sizeof(float));
    memset(s->bat.h2, 0, g * hm * sizeof(float));
    out[FMT_M_EXP_GATE] = s->bat.h;
    out[FMT_M_EXP_UP] = s->bat.h2;
    ld[FMT_M_EXP_GATE] = ld[FMT_M_EXP_UP] = hm;
    eng_matmat_stream(s, gu, x, g, out, ld);
    for (unsigned i = 0; i < g; i++) {
        float *gr = s->bat.h + i * hm;
        eng_glu_act(s, gr, s->bat.h2 + i * hm, hid);
        kern_act_set(&s->bat.act_ffn[i], gr, hid, dn->need);
    }
    memset(out, 0, sizeof out);
    memset(s->bat.o, 0, (size_t)g * dim * sizeof(float));
    out[FMT_M_EXP_DOWN] = s->bat.o;
    ld[FMT_M_EXP_DOWN] = dim;
    eng_matmat_stream(s, dn, s->bat.act_ffn, g, out, ld);
    for (unsigned i = 0; i < g; i++)
        memcpy(s->bat.exp + (size_t)idx[i] * dim, s->bat.o + (size_t)i * dim,
               dim * sizeof(float));
    s->stats.expert_bytes += gu->st->length + dn->st->length;
}

/* Route the m positions and group their choices by expert (a counting
 * sort: cnt[e] .. cnt[e+1] index ord). */
static void route_chunk(eng_session *s, const eng_layer *ly, const float *h,
                        unsigned m)
{
    const fmt_hparams *hp = s->hp;
    const uint32_t dim = hp->dim, K = hp->top_k, E = hp->n_experts;
    unsigned need = 0;
    for (uint32_t e = 0; e < E; e++)
        need |= ly->exp_gu[e].need;  /* each encoding is filled on its own */
    memset(s->bat.cnt, 0, (E + 1) * sizeof(int));
    for (unsigned j = 0; j < m; j++) {
        float *xr = s->bat.xr + (size_t)j * dim;
        eng_rmsnorm(s, xr, h + (size_t)j * dim, ly->moe_norm, dim);
        kern_act_set(&s->bat.act_xr[j], xr, dim, need);
    }
    eng_moe_route_many(s, ly, m, s->bat.xr, s->bat.log, s->bat.sel, s->bat.w);   /* one router pass */
    for (unsigned i = 0; i < m * K; i++)
        s->bat.cnt[s->bat.sel[i] + 1]++;
    for (uint32_t e = 0; e < E; e++)
        s->bat.cnt[e + 1] += s->bat.cnt[e];
    /* placement in position order within each expert's group */
    memcpy(s->bat.cur, s->bat.cnt, E * sizeof(int));
    for (unsigned i = 0; i < m * K; i++)
        s->bat.ord[s->bat.cur[s->bat.sel[i]]++] = (int)i;
}

/* The chunk's experts in waves of as many fetches as the backend holds at
 * once (eng_fetch_room: the staging slots with sync/staged I/O; read in
 * place, a wave is ENG_MAX_TOPK experts). */
static int run_experts(eng_session *s, unsigned l, double *pt)
{
    const eng_layer *ly = &s->layers[l];
    const uint32_t E = s->hp->n_experts;
    const unsigned room = eng_fetch_room(s);
    eng_route r;
    uint32_t e = 0;
    eng_moe_ahead_drop(s);           /* a wave may take every slot */
    while (e < E && !s->io.failed) {
        memset(&r, 0, sizeof r);
        r.layer = (int32_t)l;
        r.target = (int32_t)l;
        for (; e < E && r.k < room && r.k < ENG_MAX_TOPK; e++) {
            if (s->bat.cnt[e + 1] == s->bat.cnt[e])
                continue;            /* no position chose it */
            int hit = 0;
            r.expert[r.k] = (int)e;
            r.slot[r.k] = eng_fetch(s, l, e, ENG_FETCH_NOW, &hit);
            r.hit[r.k] = (uint8_t)hit;
            r.k++;
        }
        eng_fetch_submit(s);         /* all of the wave's reads together */
        if (s->io.mode == ENG_XIO_SYNC)
            eng_moe_wait(s, &r, pt);  /* sync: the reads are a dead stop */
        /* the experts already here first, then each as its read lands:
         * the reads still out overlap the compute of those before them */
        uint8_t done[ENG_MAX_TOPK] = { 0 };
        for (int pass = 0; pass < 2; pass++)
            for (uint32_t j = 0; j < r.k && !s->io.failed; j++) {
                const unsigned x = (unsigned)r.expert[j];
                if (done[j] || (pass == 0 && !eng_fetch_landed(s, r.slot[j])))
                    continue;
                eng_moe_wait_one(s, &r, j, pt);
                if (s->io.failed)
                    break;
                expert_group(s, eng_fetch_mv(s, ly, x, r.slot[j], 0),
                             eng_fetch_mv(s, ly, x, r.slot[j], 1), s->bat.ord + s->bat.cnt[x],
                             (unsigned)(s->bat.cnt[x + 1] - s->bat.cnt[x]));
                done[j] = 1;
            }
        r.ready = 1;
        eng_moe_release(s, &r);
    }
    return s->io.failed ? -1 : 0;
}

int eng_moe_batch(eng_session *s, unsigned l, const float *h, unsigned m,
                  float *eout, double *pt)
{
    const fmt_hparams *hp = s->hp;
    const eng_layer *ly = &s->layers[l];
    const uint32_t dim = hp->dim, K = hp->top_k;

    route_chunk(s, ly, h, m);
    if (run_experts(s, l, pt))
        return -1;
    /* each position's sum in the router's order, as eng_moe_inject adds */
    for (unsigned j = 0; j < m; j++) {
        float *eo = eout + (size_t)j * dim;
        memset(eo, 0, dim * sizeof(float));
        for (uint32_t t = 0; t < K; t++) {
            const float w = s->bat.w[j * K + t], *o = s->bat.exp + ((size_t)j * K + t) * dim;
            for (uint32_t i = 0; i < dim; i++)
                eo[i] += w * o[i];
        }
    }
    return 0;
}
