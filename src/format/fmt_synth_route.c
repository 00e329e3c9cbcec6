/*
 * fmt_synth_route.c — skewed expert popularity for synthetic models
 * (`cflow synth --routing zipf[:S]`).
 *
 * Random routers route almost uniformly: every expert is as popular as
 * every other, the worst case for an expert cache and nothing like a
 * trained MoE, where a few experts of each layer take a large share of the
 * tokens.  A trained router gets that skew from its weights; ours gets it
 * from a per-expert bias b_e added to each router logit.  The standard
 * routers (Mixtral, OLMoE, Qwen3-MoE in GGUF; our .cflow) have no bias
 * tensor, and llama.cpp must run the very same file, so the bias is built
 * into the weights:
 *
 *   the constant dimension z = dim - 1 of the residual holds c in every
 *   embedding row (FMT_SYNTH_ZC), and no block ever writes it: the rows z
 *   of every attention-output, FFN-down and expert-down matrix are zero,
 *   so the residual keeps h[z] = c through every layer (and through the
 *   averaging of two-stream schedules: both streams hold c);
 *   no block reads it either: column z of every matrix that reads a
 *   normalised residual (q, k, v, FFN gate/up, expert gate/up, an untied
 *   output head) is zero, so the models compute what they computed
 *   before, on a residual whose RMS norm also counts c (a tied head adds
 *   the same c * N(h)[z] to every logit, which changes no token);
 *   the router reads it: column z of layer l's router row e holds
 *   B_le = -S * ln(rank_l(e)) * FMT_SYNTH_ZK, rank_l a random permutation
 *   of the experts (1 the most popular) drawn per layer from the seed.
 *
 * The router then adds B_le * N(h)[z] = B_le * c / rms(h) to logit e.
 * Against Gumbel-like noise a logit bias of -S ln(rank) is a Zipf law of
 * exponent S over the ranks (P(e) ~ rank^-S); here the noise is the
 * random part of the logit, whose spread also scales with 1 / rms(h), so
 * the law holds in shape rather than in exponent: how strong the skew is
 * depends on the model's residual, and tests measure it
 * (tests/engine/test_ahead.c).  The weights outside the patched rows and
 * columns are those of --routing uniform, drawn from the same stream.
 *
 * The file says so: metadata key "cflow.synth.routing" ("zipf:S"; absent
 * for uniform, whose files stay byte for byte what they were), copied by
 * the .cflow writer from a synthetic or GGUF source, so figures can name
 * the routing they ran with.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "format/fmt_impl.h"

/* The tensor's patch: by the name's part after "blk.N." (or the whole
 * name), with or without GGUF's ".weight". */
int fmt_synth_rule(const char *name, unsigned *layer)
{
    static const struct { const char *nm; int rule; } rules[] = {
        { "token_embd", FMT_SR_CONST },
        { "output", FMT_SR_COL0 },
        { "attn_q", FMT_SR_COL0 }, { "attn_k", FMT_SR_COL0 }, { "attn_v", FMT_SR_COL0 },
        { "ffn_gate", FMT_SR_COL0 }, { "ffn_up", FMT_SR_COL0 },
        { "ffn_gate_exps", FMT_SR_COL0 }, { "ffn_up_exps", FMT_SR_COL0 },
        { "attn_output", FMT_SR_ROW0 }, { "ffn_down", FMT_SR_ROW0 },
        { "ffn_down_exps", FMT_SR_ROW0 },
        { "ffn_gate_inp", FMT_SR_ROUTER },
    };
    unsigned l = 0;
    const char *p = name;
    if (!strncmp(p, "blk.", 4)) {
        p += 4;
        while (*p >= '0' && *p <= '9')
            l = l * 10 + (unsigned)(*p++ - '0');
        if (*p == '.')
            p++;
    }
    size_t n = strcspn(p, ".");
    if (layer)
        *layer = l;
    for (size_t i = 0; i < sizeof rules / sizeof *rules; i++)
        if (strlen(rules[i].nm) == n && !memcmp(p, rules[i].nm, n))
            return rules[i].rule;
    return FMT_SR_NONE;
}

int fmt_synth_routing_kv(fmt_kv *kv, float zipf)
{
    char v[32];
    if (!(zipf > 0))
        return 0;                    /* uniform: no key, the bytes of old */
    int n = snprintf(v, sizeof v, "zipf:%g", (double)zipf);
    return fmt_kv_set_str(kv, FMT_SYNTH_ROUTING_KEY, v, (size_t)n) ? -1 : 0;
}

static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Router column z of expert e in layer l: -s ln(rank) FMT_SYNTH_ZK, the
 * ranks a Fisher-Yates permutation of 1..n_exp seeded by (seed, layer),
 * a stream of its own so the weights' stream is not disturbed. */
float fmt_synth_zipf_bias(uint64_t seed, unsigned layer, unsigned e, unsigned n_exp,
                          float s)
{
    unsigned rank[FMT_SYNTH_MAX_EXP];
    uint64_t st = (seed ^ 0x7a69706673796e74ull) + (uint64_t)layer * 0x2545f4914f6cdd1dull;
    if (n_exp == 0 || n_exp > FMT_SYNTH_MAX_EXP || e >= n_exp)
        return 0.0f;
    for (unsigned i = 0; i < n_exp; i++)
        rank[i] = i + 1;
    for (unsigned i = n_exp - 1; i > 0; i--) {
        unsigned j = (unsigned)(mix(&st) % (i + 1));
        unsigned t = rank[i];
        rank[i] = rank[j];
        rank[j] = t;
    }
    return -s * logf((float)rank[e]) * FMT_SYNTH_ZK;
}
