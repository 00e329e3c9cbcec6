/*
 * fmt_critical.c — the report's critical-path bandwidth model (eq. 4.23).
 *
 * Within a layer the attention, dense-FFN and expert weight streams are
 * issued to memory together, so a layer costs its longest stream, not
 * their sum.  A delay of δ spreads a stream over the δ+1 layers in which it
 * can be fetched, dividing its per-layer share by δ+1:
 *
 *   B_naive    = Σ_ℓ max(B_attn, B_dense, B_expert)
 *   B_critical = Σ_ℓ max(B_attn, B_dense/(δd+1), B_expert/(δe+1))
 *
 * B_expert counts the top-k experts a token reads, not the whole bank.
 * Stream sizes come from the tiles in the file, or, with bytes_per_param
 * > 0, from the parameter counts (the report quotes 0.5 byte per weight).
 * A FixedPoint model applies each stored block `iterations` times, and
 * every application reads the block's weights again, so it counts once per
 * application.  An analytic figure, not a timing.
 *
 * Layers may differ (FMT_FLAG_LAYER_GEOM, Gemma 4's sliding and full-
 * attention layers): each layer's attention is sized from its own heads
 * (without a V projection where V shares K's or MLA has none; with MLA's
 * k_b and v_b), and a layer without experts has no expert stream; the
 * shared experts (DeepSeek) are dense.  At a context n_ctx the attention
 * also reads its KV cache, f16 as the engine keeps it by default: per
 * position K and V rows, or MLA's one row (the latent and the rotated key),
 * over the window alone in a sliding layer.  From parameter counts the figure needs only the
 * geometry, so fmt_critical_path_geom serves presets too large to write.
 *
 * "The report" (with its section numbers) is the Pipeline-Native
 * Transformers report.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "format/cflow_format.h"
#include "format/fmt_impl.h"

static double stream_bytes(const fmt_model *m, unsigned l, int slot)
{
    const fmt_stream *s = fmt_model_stream(m, l, slot);
    return s ? (double)s->length : 0.0;
}

static double max3(double a, double b, double c)
{
    double x = a > b ? a : b;
    return x > c ? x : c;
}

/* m may be NULL when bytes_per_param > 0; lg (or m's records) gives the
 * per-layer geometry, NULL: the header's for every layer. */
static int cp_compute(const fmt_model *m, const fmt_hparams *hp,
                      const fmt_layer_geom *lg, double bytes_per_param, uint32_t n_ctx,
                      fmt_cp_layer *layers, unsigned cap, fmt_cp_total *tot)
{
    unsigned reps = hp->combine_style == FMT_COMBINE_FIXED_POINT && hp->iterations
                        ? hp->iterations
                        : 1;
    unsigned n_eff = hp->n_layers * reps;
    double d = hp->dim;

    memset(tot, 0, sizeof *tot);
    tot->n_layers = n_eff;
    tot->dense_delay = hp->dense_delay;
    tot->expert_delay = hp->expert_delay;
    for (unsigned b = 0, i = 0; b < hp->n_layers; b++) {
        double a, dn, ex;
        fmt_layer_geom g0;
        fmt_layer_geom_default(hp, &g0);
        const fmt_layer_geom *g = lg ? &lg[b] : m ? fmt_model_layer_geom(m, b) : &g0;
        double qd = fmt_layer_q_rows(hp, g), od = fmt_layer_o_cols(hp, g);
        double kvd = (double)g->n_kv_heads * g->head_dim;
        int n_kvp = fmt_layer_has_v(hp, g) ? 2 : 1;   /* K (and V) */
        int has_e = fmt_layer_moe(hp, g, b), has_d = fmt_layer_dense(hp, b);
        /* the cache read at n_ctx: the window's rows, K and V (MLA: one) */
        uint32_t rows = g->sliding_window && g->sliding_window < n_ctx ? g->sliding_window
                                                                       : n_ctx;
        double kv = 2.0 * rows * kvd * (hp->mla_rank ? 1 : 2);
        if (bytes_per_param > 0) {
            double mla = (double)g->n_heads * hp->mla_rank * (hp->mla_nope + hp->mla_v);
            double qa = hp->mla_q_rank ? (double)hp->mla_q_rank * (d + qd) : qd * d;
            a = (qa + n_kvp * kvd * d + d * od + mla) * bytes_per_param;
            dn = 3.0 * d * ((has_d ? hp->ffn_dim : 0) + (has_e ? hp->shared_ffn_dim : 0)) *
                 bytes_per_param;
            ex = has_e ? (double)hp->top_k * 3.0 * d * hp->expert_ffn_dim * bytes_per_param
                       : 0.0;
        } else {
            a = stream_bytes(m, b, FMT_S_Q) + stream_bytes(m, b, FMT_S_O) +
                stream_bytes(m, b, FMT_S_K_B) + stream_bytes(m, b, FMT_S_V_B) +
                stream_bytes(m, b, FMT_S_Q_B);
            dn = stream_bytes(m, b, FMT_S_GATE) + stream_bytes(m, b, FMT_S_DOWN) +
                 stream_bytes(m, b, FMT_S_SH_GATE) + stream_bytes(m, b, FMT_S_SH_DOWN);
            ex = 0.0;
            if (has_e) {
                double all = 0.0;
                /* the tile streams an expert read touches, not its space in
                 * the bank (which includes alignment padding) */
                for (unsigned e = 0; e < hp->n_experts; e++) {
                    const fmt_stream *gu = NULL, *dn = NULL;
                    if (fmt_model_expert(m, b, e, &gu, &dn, NULL, NULL) == 0 && gu && dn)
                        all += (double)(gu->length + dn->length);
                }
                ex = all / hp->n_experts * hp->top_k;
            }
        }
        a += kv;
        for (unsigned r = 0; r < reps; r++, i++) {
            double dd = dn / (hp->dense_delay + 1.0);
            double ed = ex / (hp->expert_delay + 1.0);
            double naive = max3(a, dn, ex), crit = max3(a, dd, ed);
            if (i < cap) {
                fmt_cp_layer *o = &layers[i];
                o->layer = i;
                o->block = b;
                o->attn = a;
                o->kv = kv;
                o->dense = dn;
                o->expert = ex;
                o->naive = naive;
                o->critical = crit;
                o->binding = crit == a ? FMT_CP_ATTN : crit == dd ? FMT_CP_DENSE
                                                                  : FMT_CP_EXPERT;
                o->naive_binding = naive == a ? FMT_CP_ATTN
                                   : naive == dn ? FMT_CP_DENSE : FMT_CP_EXPERT;
            }
            tot->naive += naive;
            tot->critical += crit;
            tot->serial += a + dn + ex;
        }
    }
    return 0;
}

int fmt_critical_path(const fmt_model *m, double bytes_per_param, uint32_t n_ctx,
                      fmt_cp_layer *layers, unsigned cap, fmt_cp_total *tot)
{
    return cp_compute(m, fmt_model_hparams(m), NULL, bytes_per_param, n_ctx, layers, cap,
                      tot);
}

int fmt_critical_path_geom(const fmt_hparams *hp, const fmt_layer_geom *lg,
                           double bytes_per_param, uint32_t n_ctx, fmt_cp_layer *layers,
                           unsigned cap, fmt_cp_total *tot)
{
    if (!(bytes_per_param > 0))
        return FMT_EARG;
    return cp_compute(NULL, hp, lg, bytes_per_param, n_ctx, layers, cap, tot);
}

const char *fmt_cp_stream_name(int s)
{
    switch (s) {
    case FMT_CP_ATTN: return "attention";
    case FMT_CP_DENSE: return "dense";
    case FMT_CP_EXPERT: return "experts";
    default: return "?";
    }
}
