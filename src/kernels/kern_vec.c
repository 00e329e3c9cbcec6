/*
 * kern_vec.c — the small vector kernels of a decoder step: RMSNorm, RoPE,
 * softmax, single-query attention, SwiGLU and GeGLU.
 *
 * These are cheap next to the mat-vecs, so they stay scalar and are written
 * to do llama2.c run.c's float arithmetic in run.c's order (the module is
 * built with -ffp-contract=off, as run.c is built without FMA): with the
 * same weights the engine then reproduces run.c's output byte for byte.
 *
 * A GGUF model's peer is llama.cpp instead, so kern_attn_decode_f16 and the
 * *_ggml kernels at the end do ggml's CPU arithmetic (its AVX-512 build)
 * bit for bit.  Why it matters: on Q8_0/Q4_0 models each mat-vec quantises
 * its input, round(x * 127/amax) turns a last-bit difference into a whole
 * quantisation step now and then, and a few dozen tokens later a greedy
 * choice flips.  Where ggml's C code is compiled with FMA contraction (GCC,
 * -ffp-contract=fast) the FMAs are written out here with fmaf(), since this
 * module is built with -ffp-contract=off.
 */
#include "config.h"

#include <math.h>
#include <string.h>

#include "kernels/kern.h"
#include "kernels/kern_impl.h"

void kern_rmsnorm(float *out, const float *x, const float *w, unsigned n,
                  float eps)
{
    float ss = 0.0f;
    for (unsigned j = 0; j < n; j++)
        ss += x[j] * x[j];
    ss /= (float)n;
    ss += eps;
    ss = 1.0f / sqrtf(ss);
    for (unsigned j = 0; j < n; j++)
        out[j] = w ? w[j] * (ss * x[j]) : ss * x[j];
}

void kern_rope(float *x, unsigned n_heads, unsigned head_dim, unsigned rot_dim,
               unsigned pos, const float *inv_freq, int neox)
{
    const unsigned half = rot_dim / 2;
    for (unsigned i = 0; i < half; i++) {
        float val = (float)pos * inv_freq[i];
        float fcr = cosf(val);
        float fci = sinf(val);
        /* pair (a, b): adjacent (2i, 2i+1) or split halves (i, i+half) */
        unsigned a = neox ? i : 2 * i;
        unsigned b = neox ? i + half : 2 * i + 1;
        for (unsigned h = 0; h < n_heads; h++) {
            float *v = x + (size_t)h * head_dim;
            float v0 = v[a], v1 = v[b];
            v[a] = v0 * fcr - v1 * fci;
            v[b] = v0 * fci + v1 * fcr;
        }
    }
}

void kern_softmax(float *x, unsigned n)
{
    if (n == 0)
        return;
    const float sum = kern_softmax_exps(x, n);
    for (unsigned i = 0; i < n; i++)
        x[i] /= sum;
}

/* One head of kern_attn_decode, its sink (NULL: none) in the softmax. */
static void attn_head_f32(float *xb, const float *qh, const float *k, const float *v,
                          unsigned n_pos, unsigned head_dim, size_t kv_stride,
                          float scale, float softcap, const float *sink, float *scratch)
{
    const float sqrt_hd = sqrtf((float)head_dim);
    const int divide = scale == 1.0f / sqrt_hd;
    for (unsigned t = 0; t < n_pos; t++) {
        float score = kern_attn_score_f32(qh, k + t * kv_stride, head_dim,
                                          divide, sqrt_hd, scale);
        if (softcap > 0.0f)
            score = tanhf(score / softcap) * softcap;
        scratch[t] = score;
    }
    if (sink) {
        const float sum = kern_softmax_exps_sink(scratch, n_pos, *sink);
        for (unsigned t = 0; t < n_pos; t++)
            scratch[t] /= sum;
    } else {
        kern_softmax(scratch, n_pos);
    }
    memset(xb, 0, head_dim * sizeof(float));
    for (unsigned t = 0; t < n_pos; t++) {
        const float *vt = v + t * kv_stride;
        const float a = scratch[t];
        for (unsigned i = 0; i < head_dim; i++)
            xb[i] += a * vt[i];
    }
}

/*
 * Per query head h (kv head h / (n_heads / n_kv_heads)):
 *   score[t] = (q . k_t) * scale, optionally softcapped, t = 0 .. n_pos-1
 *   a = softmax(score);  out = sum_t a[t] * v_t, in order of t
 * The usual scale 1/sqrt(head_dim) is applied as run.c does it, as a
 * division by sqrtf(head_dim): multiplying by the rounded reciprocal would
 * differ in the last bit now and then.
 */
void kern_attn_decode(float *out, const float *q, const float *k,
                      const float *v, unsigned n_pos, unsigned n_heads,
                      unsigned n_kv_heads, unsigned head_dim, size_t kv_stride,
                      float scale, float softcap, float *scratch)
{
    const unsigned kv_mul = n_kv_heads ? n_heads / n_kv_heads : 1;
    for (unsigned h = 0; h < n_heads; h++) {
        const size_t ko = (size_t)(kv_mul ? h / kv_mul : h) * head_dim;
        attn_head_f32(out + (size_t)h * head_dim, q + (size_t)h * head_dim, k + ko, v + ko,
                      n_pos, head_dim, kv_stride, scale, softcap, NULL, scratch);
    }
}

void kern_attn_f32_ref(float *out, const float *q, const float *k,
                       const float *v, unsigned n_pos, unsigned h0,
                       unsigned h1, unsigned n_heads, unsigned n_kv_heads,
                       unsigned head_dim, size_t kv_stride, float scale,
                       float softcap, const float *sinks, float *scores)
{
    const unsigned kv_mul = n_kv_heads ? n_heads / n_kv_heads : 1;
    for (unsigned h = h0; h < h1; h++) {
        const size_t ko = (size_t)(kv_mul ? h / kv_mul : h) * head_dim;
        attn_head_f32(out + (size_t)h * head_dim, q + (size_t)h * head_dim, k + ko, v + ko,
                      n_pos, head_dim, kv_stride, scale, softcap, sinks ? sinks + h : NULL,
                      scores + (size_t)(h - h0) * n_pos);
    }
}

/*
 * Attention over a binary16 KV cache, as llama.cpp's CPU backend does it
 * for a GGUF model with its default f16 cache and flash attention
 * (ggml_compute_forward_flash_attn_ext_f16, one query row):
 *
 *   qh = f16(q)                                    (Q converted for the K dot)
 *   M = -inf, S = 0, acc[] = 0 (f16)
 *   for t in order:
 *     s = (float)(sum_i in double of f32(k_t[i]) * f32(qh[i])) * scale
 *     if s > M:  ms = expf(M_old - s), M = s, acc = f16(acc * ms), vs = 1
 *     else:      ms = 1,               vs = expf(s - M)
 *     acc = f16(fma(v_t, vs, acc))                  (ggml_vec_mad_f16)
 *     S   = fma(S, ms, vs)
 *   out = f32(acc) * (1/S)
 *
 * Why bother: on quantised models the next mat-vec quantises its input to
 * Q8_0 blocks, and round(x/d) turns a last-bit difference into a whole
 * quantisation step now and then; over a few dozen tokens that is enough
 * to flip a greedy choice whose top two logits are 0.05 apart.  The f16
 * accumulator is by far the largest such difference from an f32 softmax
 * (about 2^-11 relative per step), so a GGUF model needs this arithmetic,
 * not just f16 storage, to follow llama.cpp.
 *
 * The two FMAs are what GCC makes of ggml's scalar code (built with
 * -ffp-contract=fast); the module is built with -ffp-contract=off, so they
 * are spelt out with fmaf().  Checked bit for bit against ggml's operator
 * for head_dim 8 (stories260K).  The K dot is ggml_vec_dot_f16 as its
 * AVX-512 build runs it (dot_f16_ggml below): double below 64 columns,
 * 64 f32 lanes folded in a fixed order above (an AVX2 build of llama.cpp
 * folds 32 lanes for head_dim >= 32; we follow the AVX-512 build, as the
 * tile kernels do).  Every ISA's kern_ops.attn_f16 gives these bits.
 */
/* ggml_vec_dot_f16 of two half vectors (x86, AVX-512 build): columns
 * below n & ~63 feed 64 lane sums by FMA (a product of halves is exact),
 * the lanes fold as kern_ref.c's fold64, the rest is added in double.
 * Below 64 columns that is a plain sum in double. */
static float dot_f16_ggml(const uint16_t *a, const uint16_t *b, unsigned n)
{
    const unsigned np = n & ~63u;
    double sum = 0.0;
    if (np) {
        float acc[64] = { 0 }, a16[16];
        for (unsigned c = 0; c < np; c++)
            acc[c % 64] = fmaf(kern_h2f(a[c]), kern_h2f(b[c]), acc[c % 64]);
        for (unsigned l = 0; l < 16; l++)
            a16[l] = (acc[l] + acc[32 + l]) + (acc[16 + l] + acc[48 + l]);
        sum = kern_fold16_ref(a16);
    }
    for (unsigned c = np; c < n; c++)   /* f16*f16 is exact in f32 */
        sum += (double)(kern_h2f(a[c]) * kern_h2f(b[c]));
    return (float)sum;
}

/* The scalar reference of kern_ops.attn_f16 (heads h0..h1); scores may be
 * NULL (each score is then used as soon as it is made). */
void kern_attn_f16_ref(float *out, const float *q, const uint16_t *k,
                       const uint16_t *v, unsigned n_pos, unsigned h0,
                       unsigned h1, unsigned n_heads, unsigned n_kv_heads,
                       unsigned head_dim, size_t kv_stride, float scale,
                       float softcap, const float *sinks, float *scores,
                       uint16_t *scratch)
{
    const unsigned kv_mul = n_kv_heads ? n_heads / n_kv_heads : 1;
    uint16_t *qh = scratch, *acc = scratch + head_dim;

    if (softcap > 0.0f)
        scale /= softcap;               /* as ggml: s = c * tanh(s * scale/c) */
    for (unsigned h = h0; h < h1; h++) {
        const float *qp = q + (size_t)h * head_dim;
        const size_t koff = (size_t)(kv_mul ? h / kv_mul : h) * head_dim;
        float M = -INFINITY, S = 0.0f;

        for (unsigned i = 0; i < head_dim; i++) {
            qh[i] = kern_f2h(qp[i]);
            acc[i] = 0;
        }
        for (unsigned t = 0; scores && t < n_pos; t++) {
            float s = dot_f16_ggml(k + t * kv_stride + koff, qh, head_dim) * scale;
            scores[t] = softcap > 0.0f ? softcap * tanhf(s) : s;
        }
        for (unsigned t = 0; t < n_pos; t++) {
            const uint16_t *vt = v + t * kv_stride + koff;
            float s;
            if (scores) {
                s = scores[t];
            } else {
                s = dot_f16_ggml(k + t * kv_stride + koff, qh, head_dim) * scale;
                if (softcap > 0.0f)
                    s = softcap * tanhf(s);
            }
            float ms = 1.0f, vs = 1.0f;
            if (s > M) {
                ms = expf(M - s);       /* 0 on the first position */
                M = s;
                for (unsigned i = 0; i < head_dim; i++)
                    acc[i] = kern_f2h(kern_h2f(acc[i]) * ms);
            } else {
                vs = expf(s - M);
            }
            for (unsigned i = 0; i < head_dim; i++)
                acc[i] = kern_f2h(fmaf(kern_h2f(vt[i]), vs, kern_h2f(acc[i])));
            S = fmaf(S, ms, vs);
        }
        const float ms = sinks ? kern_attn_sink(sinks[h], M, &S) : 1.0f;
        const float s_inv = S == 0.0f ? 0.0f : 1.0f / S;
        float *o = out + (size_t)h * head_dim;
        for (unsigned i = 0; i < head_dim; i++)
            o[i] = (kern_h2f(acc[i]) * ms) * s_inv;
    }
}

/* ---- a prompt chunk's attention: llama.cpp's tiled flash attention -------
 * See kern_attn_pf_fn (kern.h) for the arithmetic.  This is its plain
 * spelling, a row at a time: the vector kernels (kern_simd.h) run many rows
 * through each tile at once and give these bits. */

void kern_attn_prefill_f16(float *out, const float *q, size_t ld, unsigned np,
                           unsigned G, unsigned p0, const uint16_t *k,
                           const uint16_t *v, size_t kv_stride, unsigned hd,
                           float scale, float *work)
{
    const unsigned T = KERN_ATTN_PF_TILE;
    float *e = work, *acc = work + T;      /* e [T]: a tile's weights; acc [hd] */
    for (unsigned j = 0; j < np; j++)
        for (unsigned g = 0; g < G; g++) {
            const float *qr = q + j * ld + (size_t)g * hd;
            const unsigned p = p0 + j;
            float M = -INFINITY, S = 0.0f;
            for (unsigned d = 0; d < hd; d++)
                acc[d] = 0.0f;
            for (unsigned ic = 0; ic <= p; ic += T) {
                const unsigned n = p + 1 - ic < T ? p + 1 - ic : T;  /* unmasked */
                float tmax = -INFINITY;
                for (unsigned t = 0; t < n; t++) {
                    const uint16_t *kt = k + (size_t)(ic + t) * kv_stride;
                    float s = 0.0f;
                    for (unsigned d = 0; d < hd; d++)
                        s = fmaf(kern_h2f(kt[d]), qr[d], s);
                    e[t] = s * scale;
                    tmax = e[t] > tmax ? e[t] : tmax;
                }
                const float Mn = fmaxf(M, tmax);
                if (Mn > M) {               /* ms is 0 on the first tile */
                    const float ms = expf(M - Mn);
                    for (unsigned d = 0; d < hd; d++)
                        acc[d] *= ms;
                    S *= ms;
                }
                M = Mn;
                double sum = 0.0;          /* blocks past n add exactly 0 */
                for (unsigned b = 0; b < n; b += 16) {
                    float ex[16];
                    for (unsigned l = 0; l < 16; l++)
                        ex[l] = b + l < n ? kern_ggml_v_expf1(e[b + l] - Mn) : 0.0f;
                    sum += (double)kern_fold16_ref(ex);
                    for (unsigned l = 0; l < 16 && b + l < n; l++)
                        e[b + l] = ex[l];
                }
                S = (float)((double)S + sum);
                for (unsigned t = 0; t < n; t++) {
                    const uint16_t *vt = v + (size_t)(ic + t) * kv_stride;
                    for (unsigned d = 0; d < hd; d++)
                        acc[d] = fmaf(kern_h2f(vt[d]), e[t], acc[d]);
                }
            }
            const float inv = S == 0.0f ? 0.0f : 1.0f / S;
            float *o = out + j * ld + (size_t)g * hd;
            for (unsigned d = 0; d < hd; d++)
                o[d] = acc[d] * inv + 0.0f;
        }
}

void kern_attn_decode_f16(float *out, const float *q, const uint16_t *k,
                          const uint16_t *v, unsigned n_pos, unsigned n_heads,
                          unsigned n_kv_heads, unsigned head_dim,
                          size_t kv_stride, float scale, float softcap,
                          uint16_t *scratch)
{
    kern_attn_f16_ref(out, q, k, v, n_pos, 0, n_heads, n_heads, n_kv_heads,
                      head_dim, kv_stride, scale, softcap, NULL, NULL, scratch);
}

void kern_swiglu(float *out, const float *gate, const float *up, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        float val = gate[i];
        val *= 1.0f / (1.0f + expf(-val));
        val *= up[i];
        out[i] = val;
    }
}

void kern_geglu(float *out, const float *gate, const float *up, unsigned n)
{
    const float sqrt_2_over_pi = 0.79788456080286535587989211986876f;
    const float coef_a = 0.044715f;
    for (unsigned i = 0; i < n; i++) {
        float x = gate[i];
        float g = 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x *
                                           (1.0f + coef_a * x * x)));
        out[i] = g * up[i];
    }
}

/* ---- llama.cpp (ggml CPU) arithmetic ------------------------------------- */

/* ggml_compute_forward_rms_norm_f32 fused with the weight multiply
 * (ggml_compute_forward_rms_norm_mul_fused): float squares summed in
 * double, mean rounded to float, y = x * scale * w from left to right. */
void kern_rmsnorm_ggml(float *out, const float *x, const float *w, unsigned n,
                       float eps)
{
    double sum = 0.0;
    for (unsigned j = 0; j < n; j++)
        sum += (double)(x[j] * x[j]);
    const float mean = (float)(sum / n);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (unsigned j = 0; j < n; j++)
        out[j] = w ? x[j] * scale * w[j] : x[j] * scale;
}

/* Pair (a, b) of each of the n_heads heads (head_dim apart) turned by the
 * angle whose cosine and sine are c, sn: ggml's two roundings,
 * fma(x0, c, -(x1*s)) and fma(x0, s, x1*c). */
static void rope_turn(float *x, unsigned n_heads, unsigned head_dim, unsigned a, unsigned b,
                      float c, float sn)
{
    for (unsigned h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * head_dim;
        const float x0 = v[a], x1 = v[b];
        v[a] = fmaf(x0, c, -(x1 * sn));
        v[b] = fmaf(x0, sn, x1 * c);
    }
}

/* ggml_rope_cache_init + rotate_pairs (mode NORMAL or NEOX, no YaRN):
 * theta starts at pos and is multiplied by theta_scale after each pair, so
 * theta_i carries i roundings, which 1/powf(base, 2i/d) would not
 * reproduce.  GCC contracts x0*c - x1*s and x0*s + x1*c into
 * fma(x0, c, -(x1*s)) and fma(x0, s, x1*c). */
void kern_rope_ggml(float *x, unsigned n_heads, unsigned head_dim,
                    unsigned rot_dim, unsigned pos, float base,
                    const float *freq_factors, int neox)
{
    const unsigned half = rot_dim / 2;
    const float theta_scale = powf(base, -2.0f / (float)rot_dim);
    float theta = (float)pos;
    for (unsigned i = 0; i < half; i++) {
        const float t = freq_factors ? theta / freq_factors[i] : theta;
        const float c = cosf(t), sn = sinf(t);
        rope_turn(x, n_heads, head_dim, neox ? i : 2 * i, neox ? i + half : 2 * i + 1, c, sn);
        theta *= theta_scale;
    }
}

/* ggml_v_expf of vec.h, AVX-512 flavour, one lane: exp(x) = 2^n * (1 + p(b))
 * with n = round(x / ln 2) (the 0x1.8p23 trick), b = x - n ln2 in two
 * parts, and the polynomial's FMAs in ggml's order; _mm512_scalef_ps is
 * ldexpf for the integral n here.  |n| > 192 gives 0 or inf, as ggml. */
float kern_ggml_v_expf1(float x)
{
    const float r = 0x1.8p23f;
    const float z = fmaf(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    const float u = b * b;
    const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                              fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                         u, fmaf(0x1.ffffecp-1f, b, 1.0f));
    if (!(fabsf(n) <= 192.0f))          /* NaN stays NaN */
        return n != n ? n : n > 0.0f ? INFINITY : 0.0f;
    return ldexpf(j, (int)n);
}

/* ggml_vec_swiglu_f32: 16 lanes at a time y = (x / (1 + v_expf(0 - x))) * g,
 * the tail through ggml_silu_f32 (libm expf). */
void kern_swiglu_ggml(float *out, const float *gate, const float *up,
                      unsigned n)
{
    const unsigned nv = n & ~15u;
    for (unsigned i = 0; i < n; i++) {
        const float x = gate[i];
        const float e = i < nv ? kern_ggml_v_expf1(0.0f - x) : expf(-x);
        out[i] = (x / (1.0f + e)) * up[i];
    }
}

/* ---- the model families' (kern.h says what each computes) ---------------- */

/* ggml_gelu_f32: the tanh GELU in float */
static float gelu_ggml(float x)
{
    const float coef_a = 0.044715f, sqrt_2_over_pi = 0.79788456080286535587989211986876f;
    return 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x * (1.0f + coef_a * x * x)));
}

void kern_geglu_ggml(float *out, const float *gate, const float *up, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        const float x = gate[i];
        if (x <= -10.0f)
            out[i] = 0.0f;
        else if (x >= 10.0f)
            out[i] = x * up[i];
        else    /* ggml_table_gelu_f16[f16(x)]: f16(gelu(f32(f16(x)))) */
            out[i] = kern_h2f(kern_f2h(gelu_ggml(kern_h2f(kern_f2h(x))))) * up[i];
    }
}

void kern_swiglu_oai(float *out, const float *gate, const float *up, unsigned n,
                     float alpha, float limit)
{
    for (unsigned i = 0; i < n; i++) {
        const float x = fminf(gate[i], limit);
        const float y = fminf(fmaxf(up[i], -limit), limit);
        out[i] = x / (1.0f + expf(alpha * (-x))) * (y + 1.0f);
    }
}

void kern_rope_yarn_corr(unsigned rot_dim, unsigned n_ctx_orig, float base, float beta_fast,
                         float beta_slow, float corr[2])
{
    /* ggml_rope_yarn_corr_dim: n_dims * logf(n_ctx_orig / (n_rot * 2 pi)) / (2 logf(base)) */
    const float start = floorf((float)rot_dim *
                               logf((float)n_ctx_orig / (beta_fast * 2 * (float)M_PI)) /
                               (2 * logf(base)));
    const float end = ceilf((float)rot_dim *
                            logf((float)n_ctx_orig / (beta_slow * 2 * (float)M_PI)) /
                            (2 * logf(base)));
    corr[0] = fmaxf(0.0f, start);
    corr[1] = fminf((float)rot_dim - 1, end);
}

/* rope_yarn of ggml's ops.cpp: cos and sin of pair i (i0 = 2 i), the ramp
 * rope_yarn_ramp's. */
static void rope_yarn(float theta_extrap, const kern_rope_ext *e, unsigned i0, float *c,
                      float *sn)
{
    float theta = e->freq_scale * theta_extrap, mscale = e->attn_factor;
    if (e->ext_factor != 0.0f) {
        const float y = ((float)(i0 / 2) - e->corr[0]) / fmaxf(0.001f, e->corr[1] - e->corr[0]);
        const float ramp = (1 - fminf(1, fmaxf(0, y))) * e->ext_factor;
        /* (GCC's contractions in ggml's build: the left product fused) */
        theta = fmaf(theta, 1 - ramp, theta_extrap * ramp);
        mscale *= fmaf(0.1f, logf(1.0f / e->freq_scale), 1.0f);
    }
    *c = cosf(theta) * mscale;
    *sn = sinf(theta) * mscale;
}

void kern_rope_ggml_ext(float *x, unsigned n_heads, unsigned head_dim, unsigned rot_dim,
                        unsigned pos, float base, const kern_rope_ext *e, int neox)
{
    const unsigned half = rot_dim / 2;
    const float theta_scale = powf(base, -2.0f / (float)rot_dim);
    float theta = (float)pos;
    for (unsigned i = 0; i < half; i++) {
        const float ff = e->freq_factors ? e->freq_factors[i] : 1.0f;
        float c, sn;
        rope_yarn(theta / ff, e, 2 * i, &c, &sn);
        rope_turn(x, n_heads, head_dim, neox ? i : 2 * i, neox ? i + half : 2 * i + 1, c, sn);
        theta *= theta_scale;
    }
}
