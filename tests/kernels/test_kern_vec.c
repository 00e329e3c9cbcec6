/*
 * test_kern_vec.c — part of test_kern (kern_test.h): the vector kernels (norms, softmax, RoPE, attention, GLU)
 * against naive double-precision maths and the scalar reference, and the
 * hashes of ggml's own CPU operators for fixed inputs.
 */
#include "config.h"

#include "kern_test.h"
#include "fam_golden.h"

/* ---- vector kernels --------------------------------------------------------- */

void test_rmsnorm(void **state)
{
    (void)state;
    float x[300], w[300], out[300], in[300];
    for (unsigned n = 1; n <= 300; n += 37) {
        for (unsigned i = 0; i < n; i++) {
            x[i] = kt_rng_mag() * kt_rng_unit();
            w[i] = kt_rng_unit();
        }
        double ss = 0;
        for (unsigned i = 0; i < n; i++)
            ss += (double)x[i] * x[i];
        double inv = 1.0 / sqrt(ss / n + 1e-5);
        kern_rmsnorm(out, x, w, n, 1e-5f);
        for (unsigned i = 0; i < n; i++)
            assert_true(fabs(out[i] - x[i] * inv * w[i]) <=
                        1e-6 * fabs(x[i] * inv * w[i]) + 1e-30);
        kern_rmsnorm(out, x, NULL, n, 1e-5f);
        for (unsigned i = 0; i < n; i++)
            assert_true(fabs(out[i] - x[i] * inv) <= 1e-6 * fabs(x[i] * inv) + 1e-30);
        memcpy(in, x, sizeof x);
        kern_rmsnorm(out, x, w, n, 1e-5f);
        kern_rmsnorm(in, in, w, n, 1e-5f);     /* in place */
        assert_memory_equal(in, out, n * 4);
    }
}

void test_softmax(void **state)
{
    (void)state;
    float x[500];
    for (unsigned n = 1; n <= 500; n += 61) {
        double mx = -INFINITY, sum = 0, e[500];
        for (unsigned i = 0; i < n; i++) {
            x[i] = 20.0f * kt_rng_unit();
            mx = fmax(mx, x[i]);
        }
        for (unsigned i = 0; i < n; i++)
            sum += e[i] = exp(x[i] - mx);
        kern_softmax(x, n);
        double total = 0;
        for (unsigned i = 0; i < n; i++) {
            assert_true(fabs(x[i] - e[i] / sum) <= 1e-6 * (e[i] / sum) + 1e-12);
            total += x[i];
        }
        assert_true(fabs(total - 1.0) < 1e-5);
    }
    kern_softmax(x, 0);
}

void test_rope(void **state)
{
    (void)state;
    enum { H = 3, HD = 24 };
    float x[H * HD], orig[H * HD], inv_freq[HD / 2];
    static const unsigned rots[] = { 24, 16, 2 };
    static const unsigned poss[] = { 0, 1, 17, 511 };
    for (int neox = 0; neox < 2; neox++)
        for (size_t ri = 0; ri < 3; ri++)
            for (size_t pi = 0; pi < 4; pi++) {
                unsigned rot = rots[ri], pos = poss[pi];
                for (unsigned i = 0; i < rot / 2; i++)
                    inv_freq[i] = 1.0f / powf(10000.0f, (float)(2 * i) / (float)rot);
                for (int i = 0; i < H * HD; i++)
                    orig[i] = x[i] = kt_rng_unit();
                kern_rope(x, H, HD, rot, pos, inv_freq, neox);
                for (int h = 0; h < H; h++) {
                    const float *o = orig + h * HD, *v = x + h * HD;
                    for (unsigned i = 0; i < rot / 2; i++) {
                        unsigned a = neox ? i : 2 * i, b = neox ? i + rot / 2 : 2 * i + 1;
                        double th = (double)pos * inv_freq[i];
                        double ra = o[a] * cos(th) - o[b] * sin(th);
                        double rb = o[a] * sin(th) + o[b] * cos(th);
                        double tol = 1e-6 * (1.0 + th) * (fabs(o[a]) + fabs(o[b]));
                        assert_true(fabs(v[a] - ra) <= tol);
                        assert_true(fabs(v[b] - rb) <= tol);
                    }
                    for (unsigned i = rot; i < HD; i++)
                        assert_true(kt_fbits(v[i]) == kt_fbits(o[i]));
                }
            }
}

static void naive_attn(double *out, const float *q, const float *k, const float *v,
                       unsigned n_pos, unsigned nh, unsigned nkv, unsigned hd,
                       size_t stride, double scale, double softcap)
{
    double s[64];
    for (unsigned h = 0; h < nh; h++) {
        unsigned kh = h / (nh / nkv);
        double mx = -INFINITY, sum = 0;
        for (unsigned t = 0; t < n_pos; t++) {
            double d = 0;
            for (unsigned i = 0; i < hd; i++)
                d += (double)q[h * hd + i] * k[t * stride + kh * hd + i];
            d *= scale;
            if (softcap > 0)
                d = tanh(d / softcap) * softcap;
            s[t] = d;
            mx = fmax(mx, d);
        }
        for (unsigned t = 0; t < n_pos; t++)
            sum += s[t] = exp(s[t] - mx);
        for (unsigned i = 0; i < hd; i++) {
            double o = 0;
            for (unsigned t = 0; t < n_pos; t++)
                o += s[t] / sum * v[t * stride + kh * hd + i];
            out[h * hd + i] = o;
        }
    }
}

void test_attn(void **state)
{
    (void)state;
    static const unsigned kvs[] = { 4, 8, 1 };
    static const unsigned poss[] = { 1, 5, 37, 64 };
    enum { NH = 8, HD = 16 };
    float q[NH * HD], out[NH * HD], scratch[64];
    double want[NH * HD];
    float *k = malloc(64 * (NH * HD + 3) * 4), *v = malloc(64 * (NH * HD + 3) * 4);
    for (size_t ki = 0; ki < 3; ki++)
        for (size_t pi = 0; pi < 4; pi++)
            for (int variant = 0; variant < 3; variant++) {
                unsigned nkv = kvs[ki], n_pos = poss[pi];
                size_t stride = nkv * HD + 3;   /* a cache row with slack */
                float scale = variant == 1 ? 0.3f : 1.0f / sqrtf((float)HD);
                float softcap = variant == 2 ? 2.0f : 0.0f;
                for (int i = 0; i < NH * HD; i++)
                    q[i] = 2.0f * kt_rng_unit();
                for (size_t i = 0; i < n_pos * stride; i++) {
                    k[i] = kt_rng_unit();
                    v[i] = kt_rng_unit();
                }
                kern_attn_decode(out, q, k, v, n_pos, NH, nkv, HD, stride, scale,
                                 softcap, scratch);
                naive_attn(want, q, k, v, n_pos, NH, nkv, HD, stride, scale, softcap);
                for (int i = 0; i < NH * HD; i++)
                    if (!(fabs(out[i] - want[i]) <= 1e-5))
                        fail_msg("attn nkv %u n_pos %u variant %d [%d]: %.9g want %.9g",
                                 nkv, n_pos, variant, i, out[i], want[i]);
            }
    free(k);
    free(v);
}

/* With scale 1/sqrt(head_dim) the scores are run.c's: dot / sqrtf(hd). */
void test_attn_runc(void **state)
{
    (void)state;
    enum { NH = 8, NKV = 4, HS = 8, NPOS = 9, KVD = NKV * HS };
    float q[NH * HS], k[NPOS * KVD], v[NPOS * KVD], out[NH * HS], xb[NH * HS];
    float att[NPOS], scratch[NPOS];
    for (int i = 0; i < NH * HS; i++)
        q[i] = kt_rng_unit();
    for (int i = 0; i < NPOS * KVD; i++) {
        k[i] = kt_rng_unit();
        v[i] = kt_rng_unit();
    }
    kern_attn_decode(out, q, k, v, NPOS, NH, NKV, HS, KVD,
                     1.0f / sqrtf((float)HS), 0.0f, scratch);
    /* llama2.c run.c forward(), attention part */
    int kv_mul = NH / NKV;
    for (int h = 0; h < NH; h++) {
        const float *qh = q + h * HS;
        for (int t = 0; t < NPOS; t++) {
            const float *kt = k + t * KVD + (h / kv_mul) * HS;
            float score = 0.0f;
            for (int i = 0; i < HS; i++)
                score += qh[i] * kt[i];
            score /= sqrtf(HS);
            att[t] = score;
        }
        float max_val = att[0];
        for (int i = 1; i < NPOS; i++)
            if (att[i] > max_val)
                max_val = att[i];
        float sum = 0.0f;
        for (int i = 0; i < NPOS; i++) {
            att[i] = expf(att[i] - max_val);
            sum += att[i];
        }
        for (int i = 0; i < NPOS; i++)
            att[i] /= sum;
        float *o = xb + h * HS;
        memset(o, 0, HS * sizeof(float));
        for (int t = 0; t < NPOS; t++) {
            const float *vt = v + t * KVD + (h / kv_mul) * HS;
            for (int i = 0; i < HS; i++)
                o[i] += att[t] * vt[i];
        }
    }
    assert_memory_equal(out, xb, sizeof xb);
}

void test_glu(void **state)
{
    (void)state;
    float g[257], u[257], out[257];
    for (int i = 0; i < 257; i++) {
        g[i] = 8.0f * kt_rng_unit();
        u[i] = kt_rng_unit();
    }
    kern_swiglu(out, g, u, 257);
    for (int i = 0; i < 257; i++) {
        double want = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
        assert_true(fabs(out[i] - want) <= 1e-6 * fabs(want) + 1e-7);
    }
    kern_geglu(out, g, u, 257);
    for (int i = 0; i < 257; i++) {
        double x = g[i];
        double want = 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * x *
                                          (1.0 + 0.044715 * x * x))) * u[i];
        assert_true(fabs(out[i] - want) <= 1e-6 * fabs(want) + 1e-7);
    }
    /* out may alias gate */
    float g2[257];
    memcpy(g2, g, sizeof g);
    kern_swiglu(out, g, u, 257);
    kern_swiglu(g2, g2, u, 257);
    assert_memory_equal(g2, out, sizeof out);
}

/* ---- llama.cpp arithmetic: golden hashes from ggml ---------------------- */

/*
 * FNV-1a 64 of the output floats of ggml's own CPU operators, for inputs
 * drawn from g_unit() with the seeds below (ggml-org/ggml at d99724f, a
 * GGML_NATIVE build on an AVX-512 CPU by GCC 12 with its default
 * -ffp-contract=fast: the configuration of the llama.cpp whose greedy texts
 * are in shared/models/expected, which it reproduces).  Operators:
 * ggml_mul(ggml_rms_norm(x, 1e-5), w); ggml_rope_ext (NORMAL/NEOX, no
 * scaling); ggml_swiglu_split; ggml_flash_attn_ext over f16 K/V with no
 * mask; ggml_mul_mat of Q8_0, Q4_0 (plain and CPU_REPACK-ed) and F16 rows
 * with an f32 vector.
 */
static uint64_t g_state;

static uint64_t g_u64(void)
{
    g_state ^= g_state >> 12;
    g_state ^= g_state << 25;
    g_state ^= g_state >> 27;
    return g_state * 0x2545F4914F6CDD1Dull;
}

static float g_unit(void)
{
    return (float)((double)(g_u64() >> 40) / (double)(1ull << 23) - 1.0);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

#define FNV0 0xcbf29ce484222325ull

static void want_hash(const char *what, uint64_t got, uint64_t want)
{
    if (got != want)
        fail_msg("%s: output hash 0x%016llx, ggml's 0x%016llx", what,
                 (unsigned long long)got, (unsigned long long)want);
}

void test_ggml_vec_golden(void **state)
{
    (void)state;
    float x[1000], w[1000], out[1000];

    g_state = 1;
    uint64_t h = FNV0;
    static const unsigned rn[] = { 64, 172 };
    for (int k = 0; k < 2; k++) {
        unsigned n = rn[k];
        for (unsigned i = 0; i < n; i++)
            x[i] = 3 * g_unit();
        for (unsigned i = 0; i < n; i++)
            w[i] = g_unit();
        kern_rmsnorm_ggml(out, x, w, n, 1e-5f);
        h = fnv(h, out, n * 4);
    }
    want_hash("kern_rmsnorm_ggml", h, 0x3d025a7d91bd4ba1ull);

    g_state = 2;
    h = FNV0;
    static const struct { unsigned hd; int neox; float base; unsigned pos; } rc[] = {
        { 8, 0, 10000, 0 }, { 8, 0, 10000, 1 }, { 8, 0, 10000, 7 }, { 8, 0, 10000, 100 },
        { 64, 0, 10000, 1000 }, { 64, 1, 500000, 37 }, { 8, 1, 10000, 5 },
    };
    for (size_t k = 0; k < sizeof rc / sizeof rc[0]; k++) {
        unsigned n = rc[k].hd * 8;
        for (unsigned i = 0; i < n; i++)
            x[i] = 2 * g_unit();
        kern_rope_ggml(x, 8, rc[k].hd, rc[k].hd, rc[k].pos, rc[k].base, NULL, rc[k].neox);
        h = fnv(h, x, n * 4);
    }
    want_hash("kern_rope_ggml", h, 0xaab948500bc4d6d7ull);

    g_state = 3;
    h = FNV0;
    static const unsigned gn[] = { 172, 1000 };
    for (int k = 0; k < 2; k++) {
        unsigned n = gn[k];
        for (unsigned i = 0; i < n; i++)
            x[i] = 8 * g_unit();
        for (unsigned i = 0; i < n; i++)
            w[i] = g_unit();
        kern_swiglu_ggml(out, x, w, n);
        h = fnv(h, out, n * 4);
    }
    want_hash("kern_swiglu_ggml", h, 0xd51ccd3d5c64a7b4ull);
}

void test_ggml_attn_golden(void **state)
{
    (void)state;
    static const struct { unsigned hd, nh, nkv, npos; } ac[] = {
        { 8, 8, 4, 1 }, { 8, 8, 4, 5 }, { 8, 8, 4, 37 }, { 32, 4, 2, 20 },
    };
    float q[128], out[128];
    /* the largest case needs 37 * 4 * 8 = 1184 and 20 * 2 * 32 = 1280 halves */
    uint16_t *k = malloc(1280 * 2), *v = malloc(1280 * 2), scratch[64];
    g_state = 4;
    uint64_t h = FNV0;
    for (size_t c = 0; c < sizeof ac / sizeof ac[0]; c++) {
        const unsigned hd = ac[c].hd, nh = ac[c].nh, nkv = ac[c].nkv, np = ac[c].npos;
        for (unsigned i = 0; i < hd * nh; i++)
            q[i] = 2 * g_unit();
        for (unsigned t = 0; t < np; t++)
            for (unsigned kh = 0; kh < nkv; kh++)
                for (unsigned i = 0; i < hd; i++) {
                    k[(t * nkv + kh) * hd + i] = kt_ref_f2h(2 * g_unit());
                    v[(t * nkv + kh) * hd + i] = kt_ref_f2h(g_unit());
                }
        kern_attn_decode_f16(out, q, k, v, np, nh, nkv, hd, nkv * hd,
                             1.0f / sqrtf((float)hd), 0.0f, scratch);
        h = fnv(h, out, hd * nh * 4);
    }
    want_hash("kern_attn_decode_f16", h, 0xd994995937d65a2bull);
    free(k);
    free(v);
}

/* A prompt chunk's attention (kern_attn_prefill_f16, kern.h) against
 * ggml_flash_attn_ext with a causal f16 mask and 64 or more query rows,
 * which ggml's CPU backend runs through its tiled kernel
 * (ggml_compute_forward_flash_attn_ext_tiled, unslothai/llama.cpp at
 * d32676d, a GGML_NATIVE build on AVX-512 Zen 5 by GCC 12, 2 threads):
 * q [rows][heads][hd], the cache [position][kv head][hd], the output as
 * ggml's [rows][heads][hd]. */
void test_ggml_attn_tiled_golden(void **state)
{
    (void)state;
    static const struct { unsigned hd, nh, nkv, nq, p0; } ac[] = {
        { 64, 8, 2, 64, 0 }, { 32, 4, 4, 70, 30 }, { 128, 2, 1, 65, 64 },
    };
    g_state = 5;
    uint64_t h = FNV0;
    for (size_t c = 0; c < sizeof ac / sizeof ac[0]; c++) {
        const unsigned hd = ac[c].hd, nh = ac[c].nh, nkv = ac[c].nkv, nq = ac[c].nq;
        const unsigned n = ac[c].p0 + nq, G = nh / nkv;
        float *q = malloc((size_t)nq * nh * hd * 4), *out = malloc((size_t)nq * nh * hd * 4);
        uint16_t *k = malloc((size_t)n * nkv * hd * 2), *v = malloc((size_t)n * nkv * hd * 2);
        float *work = malloc(KERN_ATTN_PF_WORK(nq * G, hd) * sizeof(float));
        for (size_t i = 0; i < (size_t)nq * nh * hd; i++)
            q[i] = 2 * g_unit();
        for (size_t i = 0; i < (size_t)n * nkv * hd; i++) {
            k[i] = kt_ref_f2h(2 * g_unit());
            v[i] = kt_ref_f2h(g_unit());
        }
        for (unsigned kh = 0; kh < nkv; kh++)
            kern_attn_prefill_f16(out + kh * G * hd, q + kh * G * hd, (size_t)nh * hd, nq,
                                  G, ac[c].p0, k + kh * hd, v + kh * hd, (size_t)nkv * hd,
                                  hd, 1.0f / sqrtf((float)hd), work);
        h = fnv(h, out, (size_t)nq * nh * hd * 4);
        free(q);
        free(out);
        free(k);
        free(v);
        free(work);
    }
    want_hash("kern_attn_prefill_f16", h, 0x3747a85ff1039298ull);
}

void test_ggml_matvec_golden(void **state)
{
    (void)state;
    static const struct { enum kern_type t; unsigned R, C; int rp; uint64_t want; } mc[] = {
        { KERN_Q8_0, 20, 64, 0, 0x252729ed056c7edcull },
        { KERN_Q4_0, 20, 64, 0, 0x29373d0aa657f151ull },
        { KERN_Q4_0, 16, 96, 1, 0xde8ab82ae2a78b74ull },
        { KERN_F16, 20, 172, 0, 0x950b7b510565d948ull },
        { KERN_F16, 3, 256, 0, 0xbe39b13f6d543d26ull },
    };
    uint8_t *rows = malloc(20 * 256 * 2), *pl = malloc(kern_tile_payload_size(KERN_F32, 128, 256));
    float x[256], y[20];
    kern_act a;
    assert_int_equal(kern_act_init(&a, 256), 0);
    g_state = 5;
    for (size_t c = 0; c < sizeof mc / sizeof mc[0]; c++) {
        const enum kern_type t = mc[c].t;
        const unsigned R = mc[c].R, C = mc[c].C;
        const size_t bs = t == KERN_Q8_0 ? 34 : 18;
        const size_t rb = t == KERN_F16 ? 2 * C : C / 32 * bs;
        for (unsigned r = 0; r < R; r++) {
            uint8_t *row = rows + r * rb;
            if (t == KERN_F16) {
                for (unsigned i = 0; i < C; i++) {
                    uint16_t hv = kt_ref_f2h(g_unit());
                    memcpy(row + 2 * i, &hv, 2);
                }
                continue;
            }
            for (unsigned b = 0; b < C / 32; b++) {
                uint8_t *blk = row + b * bs;
                uint16_t d = kt_ref_f2h(0.01f + 0.02f * fabsf(g_unit()));
                memcpy(blk, &d, 2);
                for (size_t j = 0; j < bs - 2; j++)
                    blk[2 + j] = t == KERN_Q8_0
                        ? (uint8_t)(int8_t)((int)(g_u64() % 255) - 127)
                        : (uint8_t)(g_u64() & 0xFF);
            }
        }
        for (unsigned i = 0; i < C; i++)
            x[i] = 2 * g_unit();
        enum kern_src src = t == KERN_F16 ? KERN_SRC_F16 : t == KERN_Q8_0
                          ? KERN_SRC_GGML_Q8_0 : KERN_SRC_GGML_Q4_0;
        assert_int_equal(kern_tile_pack(t, R, C, src, rows, rb, pl), 0);
        kern_act_set(&a, x, C, KERN_NEED(t));
        for (int isa = 0; isa < KERN_NISA; isa++) {
            const kern_ops *ops = kern_ops_for((enum kern_isa)isa);
            if (!ops)
                continue;
            memset(y, 0, sizeof y);
            kt_tile_fn(ops, t, mc[c].rp)(pl, R, C, &a, 0, y);
            char what[64];
            snprintf(what, sizeof what, "%s %s%s %ux%u", ops->name, kern_type_name(t),
                     mc[c].rp ? " (repacked)" : "", R, C);
            want_hash(what, fnv(FNV0, y, R * 4), mc[c].want);
        }
    }
    kern_act_free(&a);
    free(rows);
    free(pl);
}

/* The model families' vector kernels against ggml's own outputs of the
 * same inputs (fam_golden.h; fam_golden_gen.c made the hashes, linking
 * llama.cpp's ggml: unslothai/llama.cpp d32676d77, its CPU build): GeGLU
 * (Gemma), gpt-oss's clamped SwiGLU, and RoPE with LongRoPE's divisors,
 * linear scaling and YaRN, bit for bit.  Each kernel is checked to do
 * something too: the default scaling gives kern_rope_ggml's bits, and
 * without YaRN's mix the YaRN cases differ. */
void test_ggml_family_golden(void **state)
{
    (void)state;
    float a[1000], b[1000], y[1000];
    for (int op = 0; op < 2; op++) {
        uint64_t h = FG_FNV0;
        fg_state = 11 + (uint64_t)op;
        for (int k = 0; k < 2; k++) {
            unsigned n = fg_glu_n[k];
            for (unsigned i = 0; i < n; i++)
                a[i] = 12 * fg_unit();
            for (unsigned i = 0; i < n; i++)
                b[i] = 9 * fg_unit();
            if (op == 0)
                kern_geglu_ggml(y, a, b, n);
            else
                kern_swiglu_oai(y, a, b, n, 1.702f, 7.0f);
            h = fg_fnv(h, y, n * 4);
        }
        want_hash(op ? "kern_swiglu_oai" : "kern_geglu_ggml", h,
                  op ? 0x8a515f20b1f9c362ull : 0x2024140c69b4b9e7ull);
    }
    uint64_t h = FG_FNV0;
    fg_state = 13;
    int yarn_moved = 0;
    for (size_t k = 0; k < FG_NROPE; k++) {
        const fg_rope *c = &fg_ropes[k];
        float x[512], x0[512], ff[64];
        fg_rope_inputs(c, x, ff);
        memcpy(x0, x, sizeof x);
        kern_rope_ext e = { c->freq_scale, c->ext_factor, c->attn_factor, { 0, 0 },
                            c->ff ? ff : NULL };
        kern_rope_yarn_corr(c->rot, c->orig, c->base, c->beta_fast, c->beta_slow, e.corr);
        kern_rope_ggml_ext(x, 4, c->hd, c->rot, c->pos, c->base, &e, c->neox);
        h = fg_fnv(h, x, 4 * c->hd * 4);
        if (c->ext_factor != 0.0f) {
            float x1[512];
            memcpy(x1, x0, sizeof x1);
            e.ext_factor = 0.0f;
            kern_rope_ggml_ext(x1, 4, c->hd, c->rot, c->pos, c->base, &e, c->neox);
            yarn_moved |= memcmp(x1, x, 4 * c->hd * 4) != 0;
        }
        /* no scaling at all: kern_rope_ggml's bits */
        const kern_rope_ext none = { 1.0f, 0.0f, 1.0f, { 0, 0 }, c->ff ? ff : NULL };
        float xa[512], xb[512];
        memcpy(xa, x0, sizeof xa);
        memcpy(xb, x0, sizeof xb);
        kern_rope_ggml_ext(xa, 4, c->hd, c->rot, c->pos, c->base, &none, c->neox);
        kern_rope_ggml(xb, 4, c->hd, c->rot, c->pos, c->base, c->ff ? ff : NULL, c->neox);
        assert_memory_equal(xa, xb, 4 * c->hd * 4);
    }
    assert_true(yarn_moved);
    want_hash("kern_rope_ggml_ext", h, 0xd56db96cac0164a1ull);
}

