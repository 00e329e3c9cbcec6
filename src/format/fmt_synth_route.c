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
 *   normalised residual (q, k, v, FFN gate/up, expert gate/up, the output
 *   head) is zero, so the models compute what they computed before, on a
 *   residual whose RMS norm also counts c;
 *   the router reads it: column z of layer l's router row e holds
 *   B_le = -S * ln(rank_l(e)) * FMT_SYNTH_ZK, rank_l a random permutation
 *   of the experts (1 the most popular) drawn per layer from the seed.
 *
 * Token by token.  Real routing changes from token to token and favours
 * some experts; a random model drawn at sd 0.02 throughout does neither.
 * Its embedding rows (norm 0.02 sqrt(dim): 0.9 at dim 2048) are tiny
 * beside what each layer adds to the residual (attention averages v over
 * the positions, nearly the same vector for every token), so the
 * normalised residual the routers read hardly depends on the token, and
 * every token picks the same experts.  A Q4_0 GGUF made it worse: nibbles
 * uniform in 0..15 stand for -8..7, mean -0.5, so every matrix has a
 * common offset that feeds the residual's all-ones direction layer after
 * layer (olmoe-1b-7b's residual grew from L2 1900 after the first layer to
 * 45000 after the sixteenth, against 15 to 134 with symmetric weights).
 * So a zipf file (uniform files keep their bytes):
 *
 *   draws its embedding with sd FMT_SYNTH_ZIPF_EMBD_SD = 2 (norm 90 at
 *   dim 2048, beside the 15 to 130 the layers add), so the residual is
 *   the token's;
 *   holds c = 0.2 * 2 * sqrt(dim), 0.2 times the norm of the rest of an
 *   embedding row: the token's part of a logit, e.g. the router row
 *   (sd 0.2) times the normalised token row, is near-normal with sd
 *   0.2 * |N(h)| * f (f the token's share of |h|), and a Gumbel variable
 *   of that sd has scale 0.78 of it; against such noise a bias of
 *   -S ln(rank) times the scale is exactly a Zipf law of exponent S over
 *   top-1 choices, and c/|h| * ZK = 0.78 * 0.2 * f at c = 0.195 |row|.
 *   The exponent then holds at every depth: bias and noise both shrink
 *   as 1/|h|;
 *   has Q4_0 nibbles symmetric about 8 (fmt_synth_gguf.c: a drawn 0 is
 *   taken as 8, values -7..7, mean 0);
 *   has an untied output head (sd 0.02, last in the stream): a head tied
 *   to an embedding this large echoes its input token (the tiny presets,
 *   tied for uniform, printed "sssss..."), and one token repeated routes
 *   alike again.  The GGUF presets are untied already.
 *
 * How the sd was chosen: olmoe-1b-7b --routing zipf:1 (the Q4_0 through
 * a GGUF path), "Once upon a time there was", 63 decode tokens at
 * temperature 0.8, seed 3, the routing read per token with
 * eng_expert_routed; per layer the share of its 64 experts used at all,
 * the top-8 experts' share of its routings and the share of a token's 8
 * experts the token before also used, averaged over the 16 layers (a Zipf
 * law of exponent 1 over independent top-8 choices: 0.97, 0.47; of
 * exponent 0: 1.00, 0.20):
 *
 *   embedding sd, c        used   top-8  shared   LRU hit rate, 25/50% of the bank
 *   0.02, 0.02 sqrt(dim)   0.13   0.99   0.99     100, 100 (Q4_0 offset left in)
 *   0.02, 0.02 sqrt(dim)   0.37   0.76   0.72     97, 99
 *   0.5,  0.02 sqrt(dim)   0.60   0.59   0.50     73, 97
 *   1,    0.02 sqrt(dim)   0.79   0.46   0.32     48, 83
 *   2,    0.02 sqrt(dim)   0.98   0.27   0.17     29, 57 (the skew gone)
 *   1,    0.2 |row|        0.72   0.55   0.41     61, 91
 *   2,    0.2 |row|        0.87   0.52   0.36     52, 83
 *   2,    0.4 |row|        0.54   0.72   0.62     86, 97
 *   3,    0.2 |row|        0.90   0.51   0.35     50, 80
 *
 * (hit rates from a replay of the routing through an LRU cache of whole
 * experts).  At sd 2 and 0.2 |row| the routing spreads over 87% of the
 * experts and the skew is the law's (zipf:0.5: 0.96, 0.35; zipf:0.01:
 * 0.98, 0.27, the rest a popularity the random router gives some experts
 * whatever the exponent); sd 3 changes little, a smaller sd leaves the
 * layers' common part in charge.  On the small presets, whose layers add
 * even less, the top-k shares are the law's: 0.66 (zipf:0.1: 0.56) for 4
 * experts top-2, 0.54 (0.31) for 8 experts top-2
 * (tests/engine/test_ahead.c).  The weights outside the embedding, the
 * patched rows and columns and the head are those of --routing uniform,
 * drawn from the same stream.
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
        unsigned j = (unsigned)(fmt_splitmix64(&st) % (i + 1));
        unsigned t = rank[i];
        rank[i] = rank[j];
        rank[j] = t;
    }
    return -s * logf((float)rank[e]) * FMT_SYNTH_ZK;
}
