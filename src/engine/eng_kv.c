/*
 * eng_kv.c — a sequence: its KV cache, its position and the tokens it
 * holds, made and freed here, and what happens to them between tokens:
 * forgetting, reusing the part a new token list starts with, the context
 * shift.
 *
 * A sequence (struct eng_seq, eng_impl.h) is what one stream of tokens
 * owns; everything else a pass needs — the model, the weights, the pool,
 * the tokenizer, expert I/O, the decode and batch scratch — is the
 * session's and shared, so a sequence costs its KV cache and a few rows.
 * The session opens with one (s->seq: eng_decode, eng_prefill ... run on
 * it); more are made with eng_seq_new, each with its own context length.
 *
 * The cache is position-major per effective layer (kc, vc or kc16, vc16
 * [n_eff][n_ctx][kv_dim]); n_past positions are filled, and tok [n_ctx]
 * remembers which token each holds.  A reset only sets n_past to 0.  A
 * shift drops positions in the middle and slides the rest down, turning
 * the cached keys to their new positions.
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
 *     (reuse_logits [vocab], valid for a list ending at reuse_pos), so a
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
static void kv_cut(eng_seq *seq, uint32_t n)
{
    seq->n_past = n;
    if (n <= seq->kv_exact)
        seq->kv_exact = UINT32_MAX;
    if (n < seq->reuse_pos)
        seq->reuse_pos = 0;
}

void eng_seq_reset(eng_seq *seq)
{
    kv_cut(seq, 0);
}

void eng_reset(eng_session *s)
{
    eng_seq_reset(s->seq);
}

/* How many leading tokens[0..n) the cache holds, exactly, at the same
 * positions. */
static uint32_t common_prefix(const eng_seq *seq, const int32_t *tokens, size_t n)
{
    uint32_t lim = seq->n_past < seq->kv_exact ? seq->n_past : seq->kv_exact, k = 0;
    while (k < lim && k < n && seq->tok[k] == tokens[k])
        k++;
    return k;
}

int eng_seq_prefill_reuse(eng_seq *seq, const int32_t *tokens, size_t n,
                          size_t *n_reused, char *err, size_t errlen)
{
    const size_t nv = seq->s->hp->vocab_size;
    uint32_t k = common_prefix(seq, tokens, n);
    if (n && k == n && seq->reuse_pos == n) {   /* all held, their logits kept */
        kv_cut(seq, k);
        memcpy(seq->logits, seq->reuse_logits, nv * sizeof(float));
        if (n_reused)
            *n_reused = k;
        return 0;
    }
    if (n && k == n)
        k--;                  /* the last token runs again: its logits */
    kv_cut(seq, k);
    if (n_reused)
        *n_reused = k;
    int rc = eng_seq_prefill(seq, tokens + k, n - k, err, errlen);
    if (rc || !n)
        return rc;
    if (!seq->reuse_logits)
        seq->reuse_logits = malloc(nv * sizeof(float));   /* none: nothing kept */
    if (seq->reuse_logits) {
        memcpy(seq->reuse_logits, seq->logits, nv * sizeof(float));
        seq->reuse_pos = (uint32_t)n;
    }
    return 0;
}

int eng_prefill_reuse(eng_session *s, const int32_t *tokens, size_t n,
                      size_t *n_reused, char *err, size_t errlen)
{
    return eng_seq_prefill_reuse(s->seq, tokens, n, n_reused, err, errlen);
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

int eng_seq_shift(eng_seq *seq, uint32_t n_keep, uint32_t n_discard, char *err,
                  size_t errlen)
{
    eng_session *s = seq->s;
    const fmt_hparams *hp = s->hp;
    if (n_keep > seq->n_past || n_discard > seq->n_past - n_keep)
        return eng_fail(err, errlen, ENG_EARG,
                    "cannot drop %u positions after the first %u: the cache holds %u",
                    n_discard, n_keep, seq->n_past);
    if (n_discard == 0)
        return 0;
    unsigned half = s->hd_max / 2;
    float *c = calloc(half ? half : 1, sizeof *c), *sn = calloc(half ? half : 1, sizeof *sn);
    if (!c || !sn) {
        free(c);
        free(sn);
        return eng_fail(err, errlen, ENG_ENOMEM, "context shift: out of memory");
    }
    uint32_t n_move = seq->n_past - n_keep - n_discard;
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
        size_t dst = (size_t)l * seq->n_ctx * row + (size_t)n_keep * row;
        size_t src = dst + (size_t)n_discard * row;
        if (s->kv_f16) {
            memmove(seq->kc16 + dst, seq->kc16 + src, n * sizeof(uint16_t));
            memmove(seq->vc16 + dst, seq->vc16 + src, n * sizeof(uint16_t));
            for (uint32_t p = 0; p < n_move; p++) {
                uint16_t *kr = seq->kc16 + dst + (size_t)p * row;
                for (size_t i = 0; i < row; i++)
                    s->dec.k_tmp[i] = kern_fp16_to_fp32(kr[i]);
                rerope_row(s, g, s->dec.k_tmp, c, sn);
                for (size_t i = 0; i < row; i++)
                    kr[i] = kern_fp32_to_fp16(s->dec.k_tmp[i]);
            }
        } else {
            memmove(seq->kc + dst, seq->kc + src, n * sizeof(float));
            memmove(seq->vc + dst, seq->vc + src, n * sizeof(float));
            for (uint32_t p = 0; p < n_move; p++)
                rerope_row(s, g, seq->kc + dst + (size_t)p * row, c, sn);
        }
    }
    memmove(seq->tok + n_keep, seq->tok + n_keep + n_discard, n_move * sizeof *seq->tok);
    seq->n_past -= n_discard;
    if (n_keep < seq->kv_exact)
        seq->kv_exact = n_keep;   /* the slid rows saw the dropped tokens */
    if (n_keep < seq->reuse_pos)
        seq->reuse_pos = 0;
    free(c);
    free(sn);
    return 0;
}

int eng_shift(eng_session *s, uint32_t n_keep, uint32_t n_discard, char *err,
              size_t errlen)
{
    return eng_seq_shift(s->seq, n_keep, n_discard, err, errlen);
}
