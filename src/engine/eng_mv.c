/*
 * eng_mv.c — the matrix products of the forward pass: one pass over a
 * (fused) tile stream per matrix group, the mat-vec of a decode step
 * (several streams in one parallel region: the routed experts') and the
 * mat-mat of a batched prompt chunk, in the pool's threads.
 *
 * A stream is prepared once at open (eng_mv_init; eng_mv, eng_impl.h): its
 * tiles cut into units, a unit the tiles of one row stripe of one matrix,
 * which one thread sums in the stream's order, so the bits depend neither
 * on the thread count nor on the streams sharing a region; and the
 * matrices llama.cpp repacks (a GGUF model's peer: a row count that is a
 * multiple of 8) marked, their tiles taking their type's repacked kernel
 * (kern_ops.tile_mv_rp, tile_mm_rp) for the mat-vec and the mat-mat alike.
 */
#include "config.h"

#include <stdlib.h>

#include "engine/engine.h"
#include "engine/eng_impl.h"
#include "kernels/kern.h"

/* ggml: mark the matrices llama.cpp would repack for its x86 CPU backend
 * (ggml_repack_get_optimal_repack_type: a row count that is a multiple of
 * 8, of a type it repacks; the kernels' tile_mv_rp says which types those
 * are, tile by tile). */
int eng_mv_init(eng_mv *mv, const fmt_stream *st, int ggml)
{
    uint32_t rows[FMT_NMATRIX] = { 0 };
    unsigned present = 0;

    mv->st = st;
    mv->need = 0;
    mv->n_units = 0;
    mv->rp = 0;
    mv->unit = malloc(((size_t)st->n_tiles + 1) * sizeof *mv->unit);
    if (!mv->unit)
        return -1;
    for (uint32_t i = 0; i < st->n_tiles; i++) {
        const fmt_tile *t = &st->tiles[i];
        mv->need |= KERN_NEED(t->type);
        if (i == 0 || t->matrix != t[-1].matrix || t->row0 != t[-1].row0)
            mv->unit[mv->n_units++] = i;
        if (t->matrix < FMT_NMATRIX) {
            if (t->row0 + t->rows > rows[t->matrix])
                rows[t->matrix] = t->row0 + t->rows;
            present |= 1u << t->matrix;
        }
    }
    mv->unit[mv->n_units] = st->n_tiles;
    for (unsigned m = 0; ggml && m < FMT_NMATRIX; m++)
        if ((present >> m & 1) && rows[m] % 8 == 0)
            mv->rp |= 1u << m;
    return 0;
}

/* A parallel region over n tile streams: stream j's units are units
 * [first[j], first[j + 1]) of one index space, so the pool deals them out
 * as one run (thread i takes the i-th contiguous slice of it) and a
 * thread that finishes early helps with whichever stream is left.  The
 * routed experts of a decode step go through one region so (their
 * gate/up streams, then their down streams): 2 regions a layer instead of
 * 2 per expert, so fewer wake-ups and waits at a region's end, and each
 * thread streams one long run of weights across the experts' boundaries. */
typedef struct mv_task {
    const kern_ops        *ops;
    unsigned               n;      /* streams */
    const eng_mv *const   *mv;     /* [n] */
    const kern_act *const *x;      /* [n] each stream's prepared input */
    float *const *const   *out;    /* [n] each an out[FMT_NMATRIX] */
    size_t                 first[ENG_MV_MAX + 1];
    eng_pool              *pool;
} mv_task;

/* Whether a tile takes its type's repacked kernel: a tile of a matrix
 * mv_init marked, of a type llama.cpp repacks (the one rule for the
 * mat-vec and the mat-mat). */
static int tile_rp(const kern_ops *ops, const eng_mv *mv, const fmt_tile *ti)
{
    return (mv->rp >> ti->matrix & 1) && ops->tile_mv_rp[ti->type];
}

/* The kernel for a tile: its type's, or the type's repacked flavour. */
static kern_tile_mv_fn tile_fn(const kern_ops *ops, const eng_mv *mv,
                               const fmt_tile *ti)
{
    if (tile_rp(ops, mv, ti))
        return ops->tile_mv_rp[ti->type];
    return ops->tile_mv[ti->type];
}

/* Tiles [i0, i1) of stream mv into out. */
static void mv_tiles(const kern_ops *ops, const eng_mv *mv, uint32_t i0, uint32_t i1,
                     const kern_act *x, float *const *out)
{
    const fmt_tile *ti = mv->st->tiles + i0;
    for (uint32_t i = i0; i < i1; i++, ti++)
        tile_fn(ops, mv, ti)(ti->payload, ti->rows, ti->cols, x, ti->col0,
                             out[ti->matrix] + ti->row0);
}

static void mv_run(void *ctx, int tid, int n_threads)
{
    const mv_task *t = ctx;
    unsigned j = 0;
    for (;;) {
        size_t u = eng_pool_claim(t->pool, tid, n_threads, t->first[t->n]);
        if (u >= t->first[t->n])
            break;
        while (u < t->first[j] || u >= t->first[j + 1])   /* mostly the same j */
            j = u < t->first[j] ? j - 1 : j + 1;
        const eng_mv *mv = t->mv[j];
        size_t k = u - t->first[j];
        mv_tiles(t->ops, mv, mv->unit[k], mv->unit[k + 1], t->x[j], t->out[j]);
    }
}

/* One pass over each of n (fused) tile streams (n <= ENG_MV_MAX), in one
 * parallel region: out[j][matrix] receives stream j's tiles' partial sums.
 * Outputs must be zeroed by the caller.  Each output row is summed by one
 * thread in the stream's tile order, so the bits do not depend on n or on
 * the thread count. */
void eng_matvec_streams(eng_session *s, unsigned n, const eng_mv *const *mv,
                        const kern_act *const *x, float *const *const *out)
{
    mv_task t = { .ops = s->ops, .n = n, .mv = mv, .x = x, .out = out, .pool = s->pool };
    uint64_t bytes = 0;
    for (unsigned j = 0; j < n; j++) {
        t.first[j + 1] = t.first[j] + mv[j]->n_units;
        bytes += mv[j]->st->length;
    }
    s->mv_bytes += bytes;   /* every tile of the streams is read */
    /* Waking workers costs microseconds: below a few hundred KB of tiles
     * (or with one unit) the caller does the whole pass itself. */
    if (t.first[n] < 2 || bytes < ENG_PAR_MIN_BYTES) {
        for (unsigned j = 0; j < n; j++)
            mv_tiles(s->ops, mv[j], 0, mv[j]->st->n_tiles, x[j], out[j]);
        return;
    }
    eng_pool_run(s->pool, mv_run, &t);
}

typedef struct mm_task {
    const kern_ops *ops;
    const eng_mv   *mv;
    const kern_act *x;       /* [m] */
    unsigned        m;
    float *const   *out;     /* per matrix: position 0's output */
    const size_t   *ld;      /* per matrix: floats between positions */
    eng_pool       *pool;
} mm_task;

static kern_tile_mm_fn tile_mm_fn(const kern_ops *ops, const eng_mv *mv,
                                  const fmt_tile *ti)
{
    if (tile_rp(ops, mv, ti))
        return ops->tile_mm_rp[ti->type];
    return ops->tile_mm[ti->type];
}

static void mm_unit(const mm_task *t, size_t u)
{
    const eng_mv *mv = t->mv;
    for (uint32_t i = mv->unit[u]; i < mv->unit[u + 1]; i++) {
        const fmt_tile *ti = &mv->st->tiles[i];
        tile_mm_fn(t->ops, mv, ti)(ti->payload, ti->rows, ti->cols, t->x, t->m,
                                   ti->col0, t->out[ti->matrix] + ti->row0,
                                   t->ld[ti->matrix]);
    }
}

static void mm_run(void *ctx, int tid, int n_threads)
{
    const mm_task *t = ctx;
    (void)tid;
    (void)n_threads;
    for (;;) {
        size_t u = eng_pool_next(t->pool, 1);
        if (u >= t->mv->n_units)
            break;
        mm_unit(t, u);
    }
}

void eng_matmat_stream(eng_session *s, const eng_mv *mv, const kern_act *x,
                       unsigned m, float *const *out, const size_t *ld)
{
    mm_task t = { s->ops, mv, x, m, out, ld, s->pool };
    s->mv_bytes += mv->st->length;
    if (mv->n_units < 2) {
        for (size_t u = 0; u < mv->n_units; u++)
            mm_unit(&t, u);
        return;
    }
    eng_pool_run(s->pool, mm_run, &t);
}
