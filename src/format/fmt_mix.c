/*
 * fmt_mix.c — the names `-q` takes and llama.cpp's tensor-type mixes.
 *
 * A quantisation name is one of two things (fmt_quant_parse):
 *   - cflow's own uniform tile types, as before the GGML types came: f32,
 *     f16, q8_0, q4_0 put every weight matrix in that type, quantised by
 *     kern_tile_pack (q4_0 with the report's quantiser, which the
 *     quantisation-aware models of scripts/train are snapped onto);
 *   - a llama-quantize file type (q4_k_m, q6_k, iq4_xs, mxfp4 ...): each
 *     matrix gets the GGML type llama.cpp's mix names for it and is
 *     quantised as llama-quantize quantises it without an importance
 *     matrix (kern_src_quant: ggml's quantize_row_*_ref), so the blocks are
 *     llama-quantize's, byte for byte.
 *
 * The mix is llama_tensor_get_type of llama.cpp's src/llama-quant.cpp
 * (commit d32676d), the branches of the file types above, for the
 * tensors cflow's sources have.  Per tensor it reads:
 *   category  token_embd, output, attn_q/k/v/output, ffn_gate/up/down
 *             (experts' ffn_*_exps fall in the same categories; the router,
 *             norms and biases are never quantised);
 *   model     n_layer, n_expert, n_head / n_head_kv (gqa), whether the
 *             head is tied to the embedding (no output.weight: the
 *             embedding then gets the output's type), whether llama.cpp
 *             calls it a 70B (llama, 80 layers, grouped-query);
 *   position  its layer, and for attn_v its index among the model's V
 *             tensors (i_attention_wv: llama.cpp counts them in its name
 *             order, which is layer order);
 *   shape     ne[0], for the fallbacks of rows that are not a multiple of
 *             the chosen type's block (tensor_type_fallback: Q4_K -> Q5_0,
 *             Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K/Q3_K -> Q4_0, IQ4_XS ->
 *             IQ4_NL, F16 when even that block does not divide the row),
 *             and ne[2] > 1 (a bank of experts: MXFP4_MOE's rule).
 * use_more_bits(i, n) = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2 picks
 * the "more bits" layers of Q4_K_M and Q5_K_M (attn_v and ffn_down at
 * Q6_K).  The mix is tested against the types llama-quantize wrote for
 * the same fixtures (tests/format/test_mix.c, tests/data/quant).
 */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "format/cflow_format.h"
#include "format/fmt_impl.h"

/* The names, each with llama.cpp's file type number (general.file_type)
 * and its default GGML type. */
static const struct ftype_info {
    const char *name;
    int         llama_ftype, dtype;
} ftypes[FMT_NFTYPE] = {
    [FMT_FT_Q4_K_M] = { "q4_k_m", 15, FMT_DT_Q4_K },
    [FMT_FT_Q4_K_S] = { "q4_k_s", 14, FMT_DT_Q4_K },
    [FMT_FT_Q5_K_M] = { "q5_k_m", 17, FMT_DT_Q5_K },
    [FMT_FT_Q5_K_S] = { "q5_k_s", 16, FMT_DT_Q5_K },
    [FMT_FT_Q6_K]   = { "q6_k",   18, FMT_DT_Q6_K },
    [FMT_FT_Q3_K_S] = { "q3_k_s", 11, FMT_DT_Q3_K },
    [FMT_FT_Q3_K_M] = { "q3_k_m", 12, FMT_DT_Q3_K },
    [FMT_FT_Q3_K_L] = { "q3_k_l", 13, FMT_DT_Q3_K },
    [FMT_FT_Q2_K]   = { "q2_k",   10, FMT_DT_Q2_K },
    [FMT_FT_IQ4_XS] = { "iq4_xs", 30, FMT_DT_IQ4_XS },
    [FMT_FT_IQ4_NL] = { "iq4_nl", 25, FMT_DT_IQ4_NL },
    [FMT_FT_MXFP4]  = { "mxfp4",  38, FMT_DT_MXFP4 },
    [FMT_FT_Q4_1]   = { "q4_1",   3,  FMT_DT_Q4_1 },
    [FMT_FT_Q5_0]   = { "q5_0",   8,  FMT_DT_Q5_0 },
    [FMT_FT_Q5_1]   = { "q5_1",   9,  FMT_DT_Q5_1 },
    [FMT_FT_BF16]   = { "bf16",   32, FMT_DT_BF16 },
};

/* llama-quantize's aliases */
static const struct { const char *alias; int ftype; } aliases[] = {
    { "q4_k", FMT_FT_Q4_K_M }, { "q5_k", FMT_FT_Q5_K_M }, { "q3_k", FMT_FT_Q3_K_M },
    { "mxfp4_moe", FMT_FT_MXFP4 },
};

/* cflow's uniform tile types */
static const int uniform[] = { KERN_F32, KERN_F16, KERN_Q8_0, KERN_Q4_0 };

int fmt_quant_parse(const char *name, fmt_quant *q)
{
    q->tile = -1;
    q->ftype = FMT_FT_NONE;
    if (!name)
        return -1;
    for (size_t i = 0; i < sizeof uniform / sizeof *uniform; i++)
        if (!strcasecmp(name, kern_type_name((enum kern_type)uniform[i]))) {
            q->tile = uniform[i];
            return 0;
        }
    for (int f = 1; f < FMT_NFTYPE; f++)
        if (!strcasecmp(name, ftypes[f].name)) {
            q->ftype = f;
            return 0;
        }
    for (size_t i = 0; i < sizeof aliases / sizeof *aliases; i++)
        if (!strcasecmp(name, aliases[i].alias)) {
            q->ftype = aliases[i].ftype;
            return 0;
        }
    return -1;
}

const char *fmt_quant_names(void)
{
    return "f32, f16, q8_0, q4_0 (cflow's uniform types); q4_k_m, q4_k_s, q5_k_m, "
           "q5_k_s, q6_k, q3_k_s, q3_k_m, q3_k_l, q2_k, iq4_xs, iq4_nl, mxfp4, q4_1, "
           "q5_0, q5_1, bf16 (llama.cpp's mixes)";
}

const char *fmt_ftype_name(int ftype)
{
    return ftype > 0 && ftype < FMT_NFTYPE ? ftypes[ftype].name : "none";
}

int fmt_ftype_llama(int ftype)
{
    return ftype > 0 && ftype < FMT_NFTYPE ? ftypes[ftype].llama_ftype : -1;
}

int fmt_ftype_dtype(int ftype)
{
    return ftype > 0 && ftype < FMT_NFTYPE ? ftypes[ftype].dtype : -1;
}

/* ---- the mix ------------------------------------------------------------- */

/* llama.cpp's tensor_get_category, by the role's GGUF name: C_OTHER is a
 * matrix no rule names (it takes the file type's own type, as llama.cpp's
 * OTHER does), C_NONE a tensor llama-quantize leaves alone (norms,
 * biases, the router) */
enum cat { C_NONE, C_OTHER, C_TOKEN_EMBD, C_OUTPUT, C_ATTN_Q, C_ATTN_K, C_ATTN_V,
           C_ATTN_O, C_FFN_GATE, C_FFN_UP, C_FFN_DOWN };

static enum cat category(int role, int mla)
{
    switch (role) {
    case FMT_R_K: return mla ? C_OTHER : C_ATTN_K;
    case FMT_R_TOK_EMBD: return C_TOKEN_EMBD;
    case FMT_R_OUTPUT: return C_OUTPUT;
    case FMT_R_Q: return C_ATTN_Q;
    case FMT_R_V: return C_ATTN_V;
    case FMT_R_O: return C_ATTN_O;
    /* attn_qkv (Phi-3) is attn_v's kind (category_is_attn_v), whose
     * branch comes first: llama.cpp's own ATTENTION_QKV rule is never
     * reached */
    case FMT_R_QKV: return C_ATTN_V;
    /* "ffn_gate", "ffn_up", "ffn_down" anywhere in the name: the shared
     * experts' _shexp and Phi-3's fused gate-up (named ffn_up) too; with
     * experts the layer comes from the name, as for the routed ones */
    case FMT_R_GATE: case FMT_R_EXP_GATE: case FMT_R_SH_GATE: return C_FFN_GATE;
    case FMT_R_UP: case FMT_R_EXP_UP: case FMT_R_SH_UP: case FMT_R_GATE_UP: return C_FFN_UP;
    case FMT_R_DOWN: case FMT_R_EXP_DOWN: case FMT_R_SH_DOWN: return C_FFN_DOWN;
    /* MLA's (DeepSeek-V2): attn_q_a, attn_q_b, attn_k_b, attn_v_b match no
     * rule, nor does attn_kv_a_mqa, FMT_R_K's name there (above) */
    case FMT_R_Q_A: case FMT_R_Q_B: case FMT_R_K_B: case FMT_R_V_B: return C_OTHER;
    default: return C_NONE;
    }
}

static int use_more_bits(int i, int n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* llama_tensor_get_type_impl's branches for our file types (falcon's and
 * the 1-3 bit IQ types' left out: no source of ours has them). */
static int mix_impl(const fmt_mix_in *m, enum cat c, int t)
{
    const int ft = m->ftype, n_exp = (int)m->n_experts, gqa = (int)m->gqa;
    const int il = (int)m->layer, nl = (int)m->n_layers;
    if (c == C_OUTPUT || (m->tied && c == C_TOKEN_EMBD)) {
        if (ft == FMT_FT_MXFP4 || m->ne0 % fmt_dtype_block(t))
            return FMT_DT_Q8_0;
        return t != FMT_DT_Q8_0 ? FMT_DT_Q6_K : t;
    }
    if (ft == FMT_FT_MXFP4)
        return m->ne2 > 1 ? FMT_DT_MXFP4 : FMT_DT_Q8_0;
    switch (c) {
    case C_ATTN_V: {
        const int i = (int)m->i_attn_v, n = (int)m->n_attn_v;
        if (ft == FMT_FT_Q2_K)
            t = gqa >= 4 ? FMT_DT_Q4_K : FMT_DT_Q3_K;
        else if (ft == FMT_FT_Q3_K_M)
            t = i < 2 ? FMT_DT_Q5_K : FMT_DT_Q4_K;
        else if (ft == FMT_FT_Q3_K_L)
            t = FMT_DT_Q5_K;
        else if ((ft == FMT_FT_IQ4_NL || ft == FMT_FT_IQ4_XS) && gqa >= 4)
            t = FMT_DT_Q5_K;
        else if ((ft == FMT_FT_Q4_K_M || ft == FMT_FT_Q5_K_M) && use_more_bits(i, n))
            t = FMT_DT_Q6_K;
        else if (ft == FMT_FT_Q4_K_S && i < 4)
            t = FMT_DT_Q5_K;
        if (m->type_70b && (t == FMT_DT_Q3_K || t == FMT_DT_Q4_K))
            t = FMT_DT_Q5_K;
        if (n_exp == 8)
            t = FMT_DT_Q8_0;
        return t;
    }
    case C_ATTN_K:
        return n_exp == 8 ? FMT_DT_Q8_0 : t;
    case C_FFN_DOWN:
        if (ft == FMT_FT_Q2_K)
            t = FMT_DT_Q3_K;
        else if (ft == FMT_FT_Q3_K_M)
            t = il < nl / 16 ? FMT_DT_Q5_K : FMT_DT_Q4_K;
        else if (ft == FMT_FT_Q3_K_L)
            t = FMT_DT_Q5_K;
        else if (ft == FMT_FT_Q4_K_M) {
            if (use_more_bits(il, nl))
                t = FMT_DT_Q6_K;
        } else if (il < nl / 8 && (ft == FMT_FT_IQ4_NL || ft == FMT_FT_IQ4_XS))
            t = FMT_DT_Q5_K;
        else if (ft == FMT_FT_Q5_K_M && use_more_bits(il, nl))
            t = FMT_DT_Q6_K;
        else if (ft == FMT_FT_Q4_K_S && il < nl / 8)
            t = FMT_DT_Q5_K;
        return t;
    case C_ATTN_O:
        if (n_exp == 8) {
            if (ft == FMT_FT_Q2_K || ft == FMT_FT_Q3_K_S || ft == FMT_FT_Q3_K_M ||
                ft == FMT_FT_IQ4_NL || ft == FMT_FT_Q4_K_S || ft == FMT_FT_Q4_K_M ||
                ft == FMT_FT_IQ4_XS)
                t = FMT_DT_Q5_K;
        } else if (ft == FMT_FT_Q2_K) {
            t = FMT_DT_Q3_K;
        } else if (ft == FMT_FT_Q3_K_M) {
            t = FMT_DT_Q4_K;
        } else if (ft == FMT_FT_Q3_K_L) {
            t = FMT_DT_Q5_K;
        }
        return t;
    default:
        return t;
    }
}

/* tensor_type_fallback: a type whose block does not divide the row. */
static int fallback(int t, uint64_t ne0)
{
    if (ne0 % fmt_dtype_block(t) == 0)
        return t;
    int r;
    switch (t) {
    case FMT_DT_IQ4_XS: r = FMT_DT_IQ4_NL; break;
    case FMT_DT_Q2_K: case FMT_DT_Q3_K: r = FMT_DT_Q4_0; break;
    case FMT_DT_Q4_K: r = FMT_DT_Q5_0; break;
    case FMT_DT_Q5_K: r = FMT_DT_Q5_1; break;
    case FMT_DT_Q6_K: r = FMT_DT_Q8_0; break;
    default: return -1;          /* llama.cpp throws: no fallback defined */
    }
    return ne0 % fmt_dtype_block(r) ? FMT_DT_F16 : r;
}

int fmt_mix_type(const fmt_mix_in *m)
{
    enum cat c = category(m->role, m->mla);
    int t = fmt_ftype_dtype(m->ftype);
    if (c == C_NONE || t < 0)
        return -1;
    if (t == FMT_DT_BF16)       /* not a quantised type: no mix, no fallback */
        return t;
    return fallback(mix_impl(m, c, t), m->ne0);
}

void fmt_mix_model(fmt_mix_in *m, const fmt_hparams *hp, int tied, unsigned n_attn_v)
{
    m->n_layers = hp->n_layers;
    m->n_experts = hp->n_experts;
    m->gqa = hp->n_kv_heads ? hp->n_heads / hp->n_kv_heads : 1;
    m->tied = tied;
    m->n_attn_v = n_attn_v;
    /* llama.cpp's LLM_TYPE_70B: a llama of 80 layers with grouped KV */
    m->type_70b = !strcmp(hp->arch, "llama") && hp->n_layers == 80 &&
                  hp->n_heads != hp->n_kv_heads;
    m->mla = hp->mla_rank > 0;
}
