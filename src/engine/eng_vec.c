/*
 * eng_vec.c — the element-wise steps over one position's vectors: RMSNorm
 * and the gated activation in the arithmetic of the session's peer
 * (eng_blocks.c's essay: ggml's or run.c's), the residual add, and the L2
 * norm a trace records.  Below every block and schedule that uses them.
 */
#include "config.h"

#include <math.h>

#include "engine/engine.h"
#include "engine/eng_impl.h"
#include "kernels/kern.h"

/* The session's peer decides the arithmetic (eng_blocks.c's essay). */
void eng_rmsnorm(const eng_session *s, float *out, const float *x,
                    const float *w, unsigned n)
{
    if (s->ggml)
        kern_rmsnorm_ggml(out, x, w, n, s->hp->norm_eps);
    else
        kern_rmsnorm(out, x, w, n, s->hp->norm_eps);
}

/* g[0..n) = act(g, u): the model's gated activation (eng_family.c: SwiGLU
 * or GeGLU in llama.cpp's arithmetic or run.c's, gpt-oss's clamped SwiGLU). */
void eng_glu_act(eng_session *s, float *g, const float *u, uint32_t n)
{
    s->act(s, g, u, n);           /* the model's (eng_family.c) */
}

/* x[0..n) += y: the residual add, a bias. */
void eng_add_to(float *x, const float *y, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        x[i] += y[i];
}

/* The L2 norm of x[0..n), in double. */
double eng_l2(const float *x, uint32_t n)
{
    double acc = 0.0;
    for (uint32_t i = 0; i < n; i++)
        acc += (double)x[i] * x[i];
    return sqrt(acc);
}
