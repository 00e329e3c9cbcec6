/*
 * eng_kv.c — the KV cache between tokens: forgetting it and the context
 * shift.
 *
 * The cache is position-major per effective layer (eng_impl.h: kc, vc or
 * kc16, vc16 [n_eff][n_ctx][kv_dim]); n_past positions are filled.  A
 * reset only sets n_past to 0.  A shift drops positions in the middle and
 * slides the rest down, turning the cached keys to their new positions.
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/eng_impl.h"
#include "kernels/kern.h"

void eng_reset(eng_session *s)
{
    s->n_past = 0;
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
                    s->k_tmp[i] = kern_fp16_to_fp32(kr[i]);
                rerope_row(s, g, s->k_tmp, c, sn);
                for (size_t i = 0; i < row; i++)
                    kr[i] = kern_fp32_to_fp16(s->k_tmp[i]);
            }
        } else {
            memmove(s->kc + dst, s->kc + src, n * sizeof(float));
            memmove(s->vc + dst, s->vc + src, n * sizeof(float));
            for (uint32_t p = 0; p < n_move; p++)
                rerope_row(s, g, s->kc + dst + (size_t)p * row, c, sn);
        }
    }
    s->n_past -= n_discard;
    free(c);
    free(sn);
    return 0;
}
