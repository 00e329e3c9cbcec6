/*
 * eng_kv.c — the KV cache between tokens: forgetting it, reusing the part
 * of it a new token list starts with, and the context shift.
 *
 * The cache is position-major per effective layer (eng_impl.h: kc, vc or
 * kc16, vc16 [n_eff][n_ctx][kv_dim]); n_past positions are filled, and
 * ctx_tok [n_ctx] remembers which token each holds.  A reset only sets
 * n_past to 0.  A shift drops positions in the middle and slides the rest
 * down, turning the cached keys to their new positions.
 *
 * Reuse.  A conversation is rendered in full every turn, and the new
 * token list mostly starts with what the cache already holds: the earlier
 * turns, and all of the prompt on a regenerate.  eng_prefill_reuse keeps
 * the positions before the first token where the two lists differ and
 * prefills from there.  Position p's keys and values depend only on the
 * tokens at 0..p, so the kept rows are what prefilling the new list would
 * compute: bit for bit when both went token by token, within the batched
 * prefill's rounding (eng_prefill.c) when one was batched and the other
 * decoded; tests/engine/test_reuse.c holds both to that.  Two exceptions
 * are tracked:
 *   - rows a shift slid down were computed with the dropped tokens in
 *     view, unlike a prefill's: kv_exact stops the reuse at the shift's
 *     n_keep until the cache is cut back to there;
 *   - when every token is held, the logits after the last must still come
 *     from somewhere: the last reuse prefill keeps a copy of its logits
 *     (pf_logits [vocab], valid for a list ending at pf_pos), so a
 *     regenerated reply re-reads nothing; for any other length the last
 *     token runs again.
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/eng_impl.h"
#include "kernels/kern.h"

/* Forget the positions from n on (n <= n_past); what described the rows
 * from there on goes with them. */
static void kv_cut(eng_session *s, uint32_t n)
{
    s->n_past = n;
    if (n <= s->kv_exact)
        s->kv_exact = UINT32_MAX;
    if (n < s->pf_pos)
        s->pf_pos = 0;
}

void eng_reset(eng_session *s)
{
    kv_cut(s, 0);
}

/* How many leading tokens[0..n) the cache holds, exactly, at the same
 * positions. */
static uint32_t common_prefix(const eng_session *s, const int32_t *tokens, size_t n)
{
    uint32_t lim = s->n_past < s->kv_exact ? s->n_past : s->kv_exact, k = 0;
    while (k < lim && k < n && s->ctx_tok[k] == tokens[k])
        k++;
    return k;
}

int eng_prefill_reuse(eng_session *s, const int32_t *tokens, size_t n,
                      size_t *n_reused, char *err, size_t errlen)
{
    const size_t nv = s->hp->vocab_size;
    uint32_t k = common_prefix(s, tokens, n);
    if (n && k == n && s->pf_pos == n) {   /* all held, their logits kept */
        kv_cut(s, k);
        memcpy(s->logits, s->pf_logits, nv * sizeof(float));
        if (n_reused)
            *n_reused = k;
        return 0;
    }
    if (n && k == n)
        k--;                  /* the last token runs again: its logits */
    kv_cut(s, k);
    if (n_reused)
        *n_reused = k;
    int rc = eng_prefill(s, tokens + k, n - k, err, errlen);
    if (rc || !n)
        return rc;
    if (!s->pf_logits)
        s->pf_logits = malloc(nv * sizeof(float));   /* none: nothing kept */
    if (s->pf_logits) {
        memcpy(s->pf_logits, s->logits, nv * sizeof(float));
        s->pf_pos = (uint32_t)n;
    }
    return 0;
}

/* Context shift (engine.h): the cached keys carry RoPE rotations by their
 * positions; moving a row from position p to p - n_discard turns each pair
 * by -n_discard * freq_i, the rotation RoPE composes with (a rotation by
 * a then b is one by a + b).  The frequencies are those rope() used: run.c's
 * inv_freq, or ggml's base^(-2i/d) by repeated multiplication over its
 * Llama-3 divisors.  Values carry no position and only move. */
/* Each layer turns its own rotated dimensions (per-layer geometry: head
 * size, rope_dims, base). */
static void rerope_row(const eng_session *s, const fmt_layer_geom *g, float *k,
                       const float *c, const float *sn)
{
    const fmt_hparams *hp = s->hp;
    unsigned half = g->rope_dims / 2;
    int neox = (hp->flags & FMT_FLAG_ROPE_NEOX) != 0;
    for (unsigned h = 0; h < g->n_kv_heads; h++) {
        float *v = k + (size_t)h * g->head_dim;
        for (unsigned i = 0; i < half; i++) {
            unsigned a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
            float x0 = v[a], x1 = v[b];
            v[a] = x0 * c[i] - x1 * sn[i];
            v[b] = x0 * sn[i] + x1 * c[i];
        }
    }
}

int eng_shift(eng_session *s, uint32_t n_keep, uint32_t n_discard, char *err,
              size_t errlen)
{
    const fmt_hparams *hp = s->hp;
    if (n_keep > s->n_past || n_discard > s->n_past - n_keep)
        return eng_fail(err, errlen, ENG_EARG,
                    "cannot drop %u positions after the first %u: the cache holds %u",
                    n_discard, n_keep, s->n_past);
    if (n_discard == 0)
        return 0;
    unsigned half = s->hd_max / 2;
    float *c = calloc(half ? half : 1, sizeof *c), *sn = calloc(half ? half : 1, sizeof *sn);
    if (!c || !sn) {
        free(c);
        free(sn);
        return eng_fail(err, errlen, ENG_ENOMEM, "context shift: out of memory");
    }
    uint32_t n_move = s->n_past - n_keep - n_discard;
    size_t row = s->kv_dim, n = (size_t)n_move * row;
    unsigned reps = s->n_eff / hp->n_layers;     /* FixedPoint applications */
    for (unsigned l = 0; l < s->n_eff; l++) {
        /* cos/sin of the turn of each pair of this layer, angles in double
         * (layers differ only with per-layer geometry) */
        const eng_layer *ly = &s->layers[l / reps];
        const fmt_layer_geom *g = ly->g;
        float ts = powf(g->rope_theta, -2.0f / (float)g->rope_dims), theta = 1.0f;
        for (unsigned i = 0; i < g->rope_dims / 2; i++) {
            double f = s->ggml ? (double)(s->rope_ff ? theta / s->rope_ff[i] : theta)
                               : (double)ly->inv_freq[i];
            double ang = -(double)n_discard * f;
            c[i] = (float)cos(ang);
            sn[i] = (float)sin(ang);
            theta *= ts;
        }
        size_t dst = (size_t)l * s->n_ctx * row + (size_t)n_keep * row;
        size_t src = dst + (size_t)n_discard * row;
        if (s->kv_f16) {
            memmove(s->kc16 + dst, s->kc16 + src, n * sizeof(uint16_t));
            memmove(s->vc16 + dst, s->vc16 + src, n * sizeof(uint16_t));
            for (uint32_t p = 0; p < n_move; p++) {
                uint16_t *kr = s->kc16 + dst + (size_t)p * row;
                for (size_t i = 0; i < row; i++)
                    s->dec.k_tmp[i] = kern_fp16_to_fp32(kr[i]);
                rerope_row(s, g, s->dec.k_tmp, c, sn);
                for (size_t i = 0; i < row; i++)
                    kr[i] = kern_fp32_to_fp16(s->dec.k_tmp[i]);
            }
        } else {
            memmove(s->kc + dst, s->kc + src, n * sizeof(float));
            memmove(s->vc + dst, s->vc + src, n * sizeof(float));
            for (uint32_t p = 0; p < n_move; p++)
                rerope_row(s, g, s->kc + dst + (size_t)p * row, c, sn);
        }
    }
    memmove(s->ctx_tok + n_keep, s->ctx_tok + n_keep + n_discard,
            n_move * sizeof *s->ctx_tok);
    s->n_past -= n_discard;
    if (n_keep < s->kv_exact)
        s->kv_exact = n_keep;   /* the slid rows saw the dropped tokens */
    if (n_keep < s->pf_pos)
        s->pf_pos = 0;
    free(c);
    free(sn);
    return 0;
}
