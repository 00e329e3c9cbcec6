/*
 * kern_test.c — the helpers the kernel tests share (kern_test.h).
 */
#include "config.h"

#include "format/cflow_format.h"
#include "kern_test.h"

/* a xorshift64* stream (not splitmix64), started at splitmix64's gamma */
static uint64_t kt_rng_state = FMT_SPLITMIX64_GAMMA;

uint64_t kt_rng_u64(void)
{
    kt_rng_state ^= kt_rng_state >> 12;
    kt_rng_state ^= kt_rng_state << 25;
    kt_rng_state ^= kt_rng_state >> 27;
    return kt_rng_state * 0x2545F4914F6CDD1Dull;
}

unsigned kt_rng_below(unsigned n) { return (unsigned)(kt_rng_u64() % n); }

/* uniform in [-1, 1) */
float kt_rng_unit(void)
{
    return (float)((double)(kt_rng_u64() >> 40) / (double)(1ull << 23) - 1.0);
}

/* a magnitude 10^[-3, 2) */
float kt_rng_mag(void)
{
    return (float)pow(10.0, -3.0 + 5.0 * (double)(kt_rng_u64() >> 11) / 9007199254740992.0);
}

uint32_t kt_fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

float kt_bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

int kt_have_f16c(void)
{
#if HAVE_X86
    return __builtin_cpu_supports("f16c");
#else
    return 0;
#endif
}

#if HAVE_X86
__attribute__((target("f16c"))) uint16_t kt_hw_f2h(float f)
{
    return (uint16_t)_cvtss_sh(f, 0);   /* round to nearest even */
}
__attribute__((target("f16c"))) float kt_hw_h2f(uint16_t h)
{
    return _cvtsh_ss(h);
}
#endif

/* Conversions for the oracles: the hardware when present; the module's
 * own otherwise (those are tested against the hardware and doubles). */
uint16_t kt_ref_f2h(float f)
{
#if HAVE_X86
    if (kt_have_f16c())
        return kt_hw_f2h(f);
#endif
    return kern_fp32_to_fp16(f);
}

float kt_ref_h2f(uint16_t h)
{
#if HAVE_X86
    if (kt_have_f16c())
        return kt_hw_h2f(h);
#endif
    return kern_fp16_to_fp32(h);
}


kt_geo kt_geo_of(unsigned r, unsigned c)
{
    kt_geo g;
    g.rp = (r + 15) / 16 * 16;
    g.cp = (c + 31) / 32 * 32;
    g.nb = g.cp / 32;
    g.sbytes = (size_t)g.rp * g.nb * 2;
    return g;
}
void kt_fill_matrix(float *w, unsigned R, unsigned C)
{
    for (unsigned r = 0; r < R; r++) {
        float m = kt_rng_mag();
        for (unsigned c = 0; c < C; c++) {
            if (c % 32 == 0 && kt_rng_below(8) == 0)
                m = kt_rng_below(3) == 0 ? 0.0f : kt_rng_mag();   /* new block scale */
            w[r * C + c] = m * kt_rng_unit();
        }
    }
}

/* llama.cpp's quantize_row_q8_0 as its x86 build runs it (arch/x86/
 * quants.c), in scalar form: id = 127/amax, round half to even
 * (nearbyintf in the default rounding mode), GGML_FP32_TO_FP16 being the
 * F16C conversion where present. */
void kt_llama_q8_0(const float *x, int k, int8_t *qs, uint16_t *dh)
{
    const int nb = k / 32;
    for (int i = 0; i < nb; i++) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) {
            const float v = x[i * 32 + j];
            amax = amax > fabsf(v) ? amax : fabsf(v);
        }
        const float d = amax / 127.f;
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        dh[i] = kt_ref_f2h(d);
        for (int j = 0; j < 32; ++j)
            qs[i * 32 + j] = (int8_t)nearbyintf(x[i * 32 + j] * id);
    }
}

/* The tile kernel of a table: by type, or (rp) the repacked Q4_0 one. */
kern_tile_mv_fn kt_tile_fn(const kern_ops *ops, enum kern_type t, int rp)
{
    return rp ? ops->tile_mv_q4_0_rp : ops->tile_mv[t];
}
