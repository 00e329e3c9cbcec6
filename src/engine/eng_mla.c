/*
 * eng_mla.c — DeepSeek-V2's multi-head latent attention, as llama.cpp runs
 * it (src/models/deepseek2.cpp with the split attn_k_b/attn_v_b: the
 * "absorbed" form).
 *
 * A position's keys and values are not kept per head: the cache holds one
 * row of head_dim = rank + rope halves, the RMS-normed latent c_kv [rank]
 * and the rotated key k_pe [rope] (the K projection's output, normed and
 * turned), one KV head for all the query heads.  That row is both K and V:
 * the values are its first rank entries.  A query head scores against it
 * after k_b turned the head's q_nope into the latent's space:
 *
 *   q [n_heads][nope + rope]   the Q projection
 *   Q_h = [ k_b_h q_nope_h  |  RoPE(q_pe_h) ]       head_dim wide
 *   K   = [ norm(c_kv)      |  RoPE(k_pe)   ]       cached, f16
 *   a_h = softmax(Q_h K^T * scale) K[:, 0:rank]      attention over the rows
 *   o   = W_o [ v_b_h a_h ]_h                       n_heads * v wide
 *
 * The kernels attend with V = K (the same rows, hd = head_dim): the sums
 * past rank are the weighted rotated keys, computed and dropped, each
 * output element being its own sum.  The cache therefore holds rank + rope
 * halves a position and layer, against 2 * n_heads * (nope + rope) for
 * the keys and values decompressed (576 against 6144 in V2-Lite): what
 * test_kvwin measures.
 *
 * k_b and v_b are per-head matrices, [n_heads rank][nope] and [n_heads v]
 * [rank] in the file (slots k_b, v_b): head h's rows read head h's part of
 * the input.  eng_mla_bind gives each a copy of its tiles whose columns are
 * moved to that part (col0 + h * cols), so one pass of the ordinary
 * mat-vec (or the prefill's mat-mat) over the concatenated inputs runs all
 * heads; the tiles never straddle heads (rank and v are multiples of a
 * tile's 128 rows, fmt_family_check), and these 3-D matrices are never
 * repacked (llama.cpp repacks 2-D weights only).  Their inputs are the
 * heads' parts side by side, so an activation block (32, or 256 for
 * K-quant v_b) never spans two heads, as ggml quantises each head's row on
 * its own.
 *
 * Where the model has a low-rank query (DeepSeek-V2; V2-Lite projects q
 * directly) the QKV stream's first matrix is q_a [q_rank][dim]: its output
 * is RMS-normed (q_a_norm) and q_b makes the Q projection's rows from it.
 *
 * The q.k scale is the header's attn_scale (fmt_deepseek2_scale: YaRN's
 * mscale squared over sqrt(nope + rope)); RoPE is the layer's
 * (eng_family.c), over the rope dims alone.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/eng_impl.h"
#include "kernels/kern.h"

/* The tiles of stream st with each head's columns moved to its part of
 * the input: rows [h R, (h + 1) R) read columns [h C, (h + 1) C). */
static int block_diag(const fmt_stream *st, uint32_t R, uint32_t C, fmt_stream *out,
                      fmt_tile **tiles)
{
    fmt_tile *t = malloc((st->n_tiles ? st->n_tiles : 1) * sizeof *t);
    if (!t)
        return -1;
    for (uint32_t i = 0; i < st->n_tiles; i++) {
        t[i] = st->tiles[i];
        t[i].col0 = (uint16_t)(t[i].col0 + t[i].row0 / R * C);
    }
    *out = *st;
    out->tiles = t;
    *tiles = t;
    return 0;
}

int eng_mla_bind(eng_session *s, eng_layer *ly, unsigned l)
{
    const fmt_hparams *hp = s->hp;
    const fmt_stream *kb = fmt_model_stream(s->model, l, FMT_S_K_B);
    const fmt_stream *vb = fmt_model_stream(s->model, l, FMT_S_V_B);
    ly->kv_a_norm = fmt_model_vec(s->model, l, FMT_S_KV_A_NORM, NULL);
    if (!kb || !vb || !ly->kv_a_norm)
        return -1;
    if (hp->mla_q_rank) {
        const fmt_stream *qb = fmt_model_stream(s->model, l, FMT_S_Q_B);
        ly->q_a_norm = fmt_model_vec(s->model, l, FMT_S_Q_A_NORM, NULL);
        if (!qb || !ly->q_a_norm || eng_mv_init(&ly->q_b, qb, s->ggml))
            return -1;
        s->bytes_per_token += qb->length;
    }
    if (block_diag(kb, hp->mla_rank, hp->mla_nope, &ly->mla_st[0], &ly->mla_tiles[0]) ||
        block_diag(vb, hp->mla_v, hp->mla_rank, &ly->mla_st[1], &ly->mla_tiles[1]) ||
        eng_mv_init(&ly->k_b, &ly->mla_st[0], 0) || eng_mv_init(&ly->v_b, &ly->mla_st[1], 0))
        return -1;
    s->bytes_per_token += kb->length + vb->length;
    return 0;
}

void eng_mla_free(eng_layer *ly)
{
    free(ly->k_b.unit);
    free(ly->v_b.unit);
    free(ly->q_b.unit);
    free(ly->mla_tiles[0]);
    free(ly->mla_tiles[1]);
}

/* Position pos's projections into the attention's rows: k [rank + rope]
 * (the K projection's latent normed, its rotated part turned) in place; q
 * from the Q projection's [n_heads][nope + rope] to [n_heads][head_dim],
 * each head's q_pe turned at its place past the latent; the heads' q_nope
 * side by side into nope [n_heads nope] for k_b.  q holds n_heads *
 * head_dim floats. */
void eng_mla_qk(const eng_session *s, const eng_layer *ly, uint32_t pos, float *q, float *k,
                float *nope)
{
    const fmt_hparams *hp = s->hp;
    const fmt_layer_geom *g = ly->g;
    const uint32_t R = hp->mla_rank, N = hp->mla_nope, P = g->rope_dims, H = g->n_heads;
    const uint32_t hd = g->head_dim, w = N + P;
    const int neox = (hp->flags & FMT_FLAG_ROPE_NEOX) != 0;
    for (uint32_t h = 0; h < H; h++)
        memcpy(nope + (size_t)h * N, q + (size_t)h * w, N * sizeof(float));
    /* last head first: a head's new place lies past every earlier head's
     * old one, so nothing unread is overwritten */
    for (uint32_t h = H; h-- > 0;)
        memmove(q + (size_t)h * hd + R, q + (size_t)h * w + N, P * sizeof(float));
    kern_rope_ggml_ext(q + R, H, hd, P, pos, g->rope_theta, &ly->rope, neox);
    kern_rope_ggml_ext(k + R, 1, P, P, pos, g->rope_theta, &ly->rope, neox);
    eng_rmsnorm(s, k, k, ly->kv_a_norm, R);
}

void eng_mla_qa(const eng_session *s, const eng_layer *ly, float *qa, kern_act *act)
{
    const uint32_t n = s->hp->mla_q_rank;
    eng_rmsnorm(s, qa, qa, ly->q_a_norm, n);
    kern_act_set(act, qa, n, ly->q_b.need);
}

/* The absorbed queries a [n_heads rank] (k_b's output) into q's heads. */
void eng_mla_absorbed(const eng_session *s, const eng_layer *ly, float *q, const float *a)
{
    const uint32_t R = s->hp->mla_rank, hd = ly->g->head_dim;
    for (uint32_t h = 0; h < ly->g->n_heads; h++)
        memcpy(q + (size_t)h * hd, a + (size_t)h * R, R * sizeof(float));
}

/* Each head's attended latent (the first rank of its head_dim outputs)
 * side by side into lat [n_heads rank], v_b's input. */
void eng_mla_latent(const eng_session *s, const eng_layer *ly, const float *att, float *lat)
{
    const uint32_t R = s->hp->mla_rank, hd = ly->g->head_dim;
    for (uint32_t h = 0; h < ly->g->n_heads; h++)
        memmove(lat + (size_t)h * R, att + (size_t)h * hd, R * sizeof(float));
}

/* One pass of stream mv over input x into out[matrix]. */
static void mv1(eng_session *s, const eng_mv *mv, const kern_act *x, float *const *out)
{
    float *const *o[1] = { out };
    eng_matvec_streams(s, 1, &mv, &x, o);
}

/* out [rows] = mv x [n] (block-diagonal k_b or v_b); x may be out. */
static void mv_into(eng_session *s, const eng_mv *mv, uint8_t matrix, const float *x,
                    uint32_t n, uint32_t rows, float *out)
{
    float *o[FMT_NMATRIX] = { 0 };
    kern_act_set(&s->dec.act_q, x, n, mv->need);
    memset(out, 0, rows * sizeof(float));
    o[matrix] = out;
    mv1(s, mv, &s->dec.act_q, o);
}

void eng_mla_attn_block(eng_session *s, eng_seq *seq, const eng_layer *ly, unsigned kvl,
                        const float *h, float *mout)
{
    const fmt_hparams *hp = s->hp;
    const fmt_layer_geom *g = ly->g;
    const uint32_t dim = hp->dim, pos = seq->n_past, H = g->n_heads;
    const uint32_t qrows = fmt_layer_q_rows(hp, g), kvd = ly->kv_dim;
    float *out[FMT_NMATRIX] = { 0 };
    float *q = s->dec.q, *att = s->dec.att;
    float *k = s->kv_f16 ? s->dec.k_tmp : seq->kc + eng_kv_row(seq, kvl, pos);
    eng_rmsnorm(s, s->dec.xb, h, ly->attn_norm, dim);
    kern_act_set(&s->dec.act_dim, s->dec.xb, dim, ly->qkv.need);
    memset(q, 0, (qrows > hp->mla_q_rank ? qrows : hp->mla_q_rank) * sizeof(float));
    memset(k, 0, kvd * sizeof(float));
    out[FMT_M_Q] = q;
    out[FMT_M_K] = k;
    mv1(s, &ly->qkv, &s->dec.act_dim, out);
    if (hp->mla_q_rank) {               /* q_a, normed, through q_b */
        float *o[FMT_NMATRIX] = { 0 };
        eng_mla_qa(s, ly, q, &s->dec.act_q);
        memset(q, 0, qrows * sizeof(float));
        o[FMT_M_Q_B] = q;
        mv1(s, &ly->q_b, &s->dec.act_q, o);
    }
    eng_mla_qk(s, ly, pos, q, k, att);
    /* att: the heads' q_nope, then k_b's absorbed queries */
    mv_into(s, &ly->k_b, FMT_M_K_B, att, H * hp->mla_nope, H * hp->mla_rank, att);
    eng_mla_absorbed(s, ly, q, att);
    eng_attn_store_attend(s, seq, ly, kvl, pos, q, k, NULL, att);
    eng_mla_latent(s, ly, att, att);
    mv_into(s, &ly->v_b, FMT_M_V_B, att, H * hp->mla_rank, H * hp->mla_v, q);
    kern_act_set(&s->dec.act_q, q, H * hp->mla_v, ly->o.need);
    memset(out, 0, sizeof out);
    memset(mout, 0, dim * sizeof(float));
    out[FMT_M_O] = mout;
    mv1(s, &ly->o, &s->dec.act_q, out);
    eng_attn_out_post(s, ly, mout);
}
