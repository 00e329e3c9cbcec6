/*
 * eng_moe_route.c — the router: its softmax over the experts, the top-k
 * by probability (in order, ties to the lower index) and their weights,
 * renormalised over the k unless the model says not (Qwen3-MoE).  Routing
 * (eng_moe.c, eng_moe_batch.c) counts its choices per layer for the
 * expert pane; look-ahead's guesses (eng_moe_ahead.c) use the same top-k
 * on another layer's input and count nothing.  Scratch: s->probs
 * [n_experts].
 */
#include "config.h"

#include <math.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/eng_impl.h"
#include "kernels/kern.h"

void eng_moe_topk(eng_session *s, const eng_layer *ly, const float *xr,
                  int *expert, float *w)
{
    const fmt_hparams *hp = s->hp;
    uint32_t dim = hp->dim, E = hp->n_experts, K = hp->top_k;
    float mx = -INFINITY, sum = 0.0f, wsum = 0.0f;
    for (uint32_t e = 0; e < E; e++) {
        s->probs[e] = s->ops->dot_f32(ly->router + (size_t)e * dim, xr, dim);
        if (s->probs[e] > mx)
            mx = s->probs[e];
    }
    for (uint32_t e = 0; e < E; e++)
        sum += (s->probs[e] = expf(s->probs[e] - mx));
    for (uint32_t e = 0; e < E; e++)
        s->probs[e] /= sum;
    for (uint32_t j = 0; j < K; j++) {
        int best = -1;
        for (uint32_t e = 0; e < E; e++) {
            int taken = 0;
            for (uint32_t t = 0; t < j; t++)
                taken |= expert[t] == (int)e;
            if (!taken && (best < 0 || s->probs[e] > s->probs[best]))
                best = (int)e;
        }
        expert[j] = best;
        wsum += s->probs[best];
    }
    for (uint32_t j = 0; j < K; j++)
        w[j] = (hp->flags & FMT_FLAG_MOE_NO_RENORM)
                   ? s->probs[expert[j]]      /* Qwen3-MoE, norm_topk_prob off */
                   : s->probs[expert[j]] / wsum;
}

void eng_moe_route(eng_session *s, const eng_layer *ly, const float *xr,
                   int *expert, float *w)
{
    const uint32_t E = s->hp->n_experts;
    uint64_t *cnt = s->routed + (size_t)(ly - s->layers) * E;
    eng_moe_topk(s, ly, xr, expert, w);
    for (uint32_t j = 0; j < s->hp->top_k; j++)
        cnt[expert[j]]++;
}

int eng_expert_routed(const eng_session *s, unsigned layer, uint64_t *counts)
{
    const uint32_t E = s->hp->n_experts;
    if (layer >= s->hp->n_layers || !E)
        return ENG_EARG;
    memcpy(counts, s->routed + (size_t)layer * E, E * sizeof *counts);
    return 0;
}
