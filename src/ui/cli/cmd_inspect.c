/*
 * cmd_inspect.c — `cflow inspect MODEL [--json]`: header, geometry and, per
 * matrix, its tile type, shape, tile count and bytes; per MoE layer its
 * router and expert bank (every expert's offset and length); per layer its
 * own geometry where the file has per-layer records.
 *
 * --critical-path works on a file, or, with --bytes-per-param, on a synth
 * preset's geometry alone (MODEL names a preset, not a file): that is how
 * the critical path of a model too large to write (gemma4-26b-a4b) is
 * computed for its real geometry.
 *
 * The JSON keys are an interface: new information comes as new keys.
 */
#include "config.h"

#include <json-c/json.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/cflow_format.h"
#include "ui/cli/cli.h"

static const int inspect_opts[] = { UI_O_JSON, UI_O_CRITICAL_PATH, UI_O_BYTES_PER_PARAM,
                                    UI_O_KV_CTX, UI_O_HELP, UI_O_END };

static void help(const ui_settings *d)
{
    printf("usage: cflow inspect [--json] [--critical-path [--bytes-per-param B] "
           "[--kv-ctx N]] MODEL\n\n"
           "Show a .cflow or .vflow file's header, geometry, per-matrix tiles,\n"
           "routers and expert banks.  With --critical-path and --bytes-per-param,\n"
           "MODEL may also name a `cflow synth` preset (its geometry alone).\n\n");
    ui_opts_help(stdout, inspect_opts, d);
}


static const char *combine_name(unsigned c) { return fmt_combine_name((int)c); }

/* The combine style in words: "standard" where nothing is combined (no
 * delays, and not both a dense FFN and experts to add up), as in a plain
 * llama or mixtral. */
static const char *combine_text(const fmt_hparams *hp)
{
    int both = hp->n_experts && hp->ffn_dim;
    if (hp->combine_style == FMT_COMBINE_PARALLEL_SQRT2 && !both && !hp->dense_delay &&
        !hp->expert_delay)
        return "standard";
    return combine_name(hp->combine_style);
}

typedef struct mstat { uint32_t tiles; uint64_t bytes; } mstat;

static void stream_stats(const fmt_stream *st, mstat *ms)
{
    for (uint32_t i = 0; st && i < st->n_tiles; i++) {
        const fmt_tile *t = &st->tiles[i];
        ms[t->matrix].tiles++;
        ms[t->matrix].bytes += FMT_TILE_HEADER_SIZE +
                               kern_tile_payload_size((enum kern_type)t->type, t->rows, t->cols);
    }
}

static json_object *flags_json(uint32_t f)
{
    static const char *names[] = { "embed_scale", "v_norm", "tied_embeddings", "rope_neox",
                                   "gelu", "qkv_bias", "rope_llama3", "qk_norm",
                                   "moe_no_renorm", "layer_geom", "xslots" };
    json_object *a = json_object_new_array();
    for (unsigned b = 0; b < sizeof names / sizeof *names; b++)
        if (f & (1u << b))
            json_object_array_add(a, json_object_new_string(names[b]));
    return a;
}

#define MIB (1024.0 * 1024.0)

/* m: a file; or m NULL and hp/lg a preset's geometry named `what`. */
static int critical_path(const fmt_model *m, const fmt_hparams *hp,
                         const fmt_layer_geom *lg, const char *what, double bpp,
                         uint32_t n_ctx, int json)
{
    unsigned cap = hp->n_layers * (hp->iterations ? hp->iterations : 1);
    fmt_cp_layer *ly = calloc(cap, sizeof *ly);
    fmt_cp_total tot;
    if (!ly)
        return ui_error("out of memory");
    if (m)
        fmt_critical_path(m, bpp, n_ctx, ly, cap, &tot);
    else
        fmt_critical_path_geom(hp, lg, bpp, n_ctx, ly, cap, &tot);
    if (json) {
        json_object *root = json_object_new_object(), *arr = json_object_new_array();
        json_object_object_add(root, "file", json_object_new_string(what));
        json_object_object_add(root, "geometry_only", json_object_new_boolean(m == NULL));
        json_object_object_add(root, "architecture", json_object_new_string(hp->arch));
        json_object_object_add(root, "combine_style",
                               json_object_new_string(fmt_combine_name(hp->combine_style)));
        json_object_object_add(root, "dense_delay", json_object_new_int((int)hp->dense_delay));
        json_object_object_add(root, "expert_delay", json_object_new_int((int)hp->expert_delay));
        json_object_object_add(root, "bytes_per_param", json_object_new_double(bpp));
        json_object_object_add(root, "kv_ctx", json_object_new_int64(n_ctx));
        for (unsigned i = 0; i < tot.n_layers && i < cap; i++) {
            json_object *o = json_object_new_object();
            json_object_object_add(o, "layer", json_object_new_int((int)ly[i].layer));
            json_object_object_add(o, "block", json_object_new_int((int)ly[i].block));
            json_object_object_add(o, "attn_bytes", json_object_new_double(ly[i].attn));
            json_object_object_add(o, "kv_bytes", json_object_new_double(ly[i].kv));
            json_object_object_add(o, "dense_bytes", json_object_new_double(ly[i].dense));
            json_object_object_add(o, "expert_bytes", json_object_new_double(ly[i].expert));
            json_object_object_add(o, "naive_bytes", json_object_new_double(ly[i].naive));
            json_object_object_add(o, "critical_bytes", json_object_new_double(ly[i].critical));
            json_object_object_add(o, "binding", json_object_new_string(fmt_cp_stream_name(ly[i].binding)));
            json_object_object_add(o, "reduction",
                                   json_object_new_double(ly[i].critical > 0
                                                              ? ly[i].naive / ly[i].critical
                                                              : 0));
            json_object_array_add(arr, o);
        }
        json_object_object_add(root, "layers", arr);
        json_object_object_add(root, "b_naive_bytes", json_object_new_double(tot.naive));
        json_object_object_add(root, "b_critical_bytes", json_object_new_double(tot.critical));
        json_object_object_add(root, "b_serial_bytes", json_object_new_double(tot.serial));
        json_object_object_add(root, "b_naive_mib", json_object_new_double(tot.naive / MIB));
        json_object_object_add(root, "b_critical_mib", json_object_new_double(tot.critical / MIB));
        json_object_object_add(root, "reduction",
                               json_object_new_double(tot.critical > 0 ? tot.naive / tot.critical : 0));
        puts(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(root);
    } else {
        printf("critical path of %s%s (%s, %s, dense_delay %u, expert_delay %u)\n",
               what, m ? "" : " (preset geometry)", hp->arch[0] ? hp->arch : "?",
               combine_text(hp), hp->dense_delay, hp->expert_delay);
        printf("stream sizes: %s; MiB per token", bpp > 0 ? "parameters x bytes-per-param"
                                                           : "tile bytes in the file");
        if (n_ctx)
            printf("; attention with its f16 KV cache at context %u", n_ctx);
        printf("\n\n");
        printf("%5s %5s %9s %9s %9s %9s %9s %6s  %s\n", "layer", "block", "attn", "dense",
               "experts", "naive", "critical", "ratio", "binding");
        for (unsigned i = 0; i < tot.n_layers && i < cap; i++)
            printf("%5u %5u %9.3f %9.3f %9.3f %9.3f %9.3f %5.2fx  %s\n", ly[i].layer,
                   ly[i].block, ly[i].attn / MIB, ly[i].dense / MIB, ly[i].expert / MIB,
                   ly[i].naive / MIB, ly[i].critical / MIB,
                   ly[i].critical > 0 ? ly[i].naive / ly[i].critical : 0.0,
                   fmt_cp_stream_name(ly[i].binding));
        printf("\nB_naive    %.2f MiB/token\nB_critical %.2f MiB/token\n"
               "reduction  %.2fx  (fully serial: %.2f MiB)\n",
               tot.naive / MIB, tot.critical / MIB,
               tot.critical > 0 ? tot.naive / tot.critical : 0.0, tot.serial / MIB);
    }
    free(ly);
    return UI_EXIT_OK;
}

/* The header and the geometry: root's first keys. */
static json_object *header_json(const fmt_model *m)
{
    const fmt_hparams *hp = fmt_model_hparams(m);
    unsigned vver = 0;
    int vflow = fmt_model_is_vflow(m, &vver);
    size_t sl = 0;
    const char *src = fmt_kv_get_str(fmt_model_kv(m), "cflow.source", &sl);
    json_object *root = json_object_new_object();
    json_object *geo = json_object_new_object();
    json_object_object_add(root, "file", json_object_new_string(fmt_model_path(m)));
    json_object_object_add(root, "size", json_object_new_int64((int64_t)fmt_model_file_size(m)));
    json_object_object_add(root, "version", json_object_new_int(FMT_VERSION));
    json_object_object_add(root, "container", json_object_new_string(vflow ? "vflow" : "cflow"));
    if (vflow)
        json_object_object_add(root, "vflow_version", json_object_new_int((int)vver));
    json_object_object_add(root, "architecture", json_object_new_string(hp->arch));
    json_object_object_add(root, "source", json_object_new_string_len(src ? src : "", (int)sl));
    size_t rl = 0;   /* cflow synth --routing zipf; absent: uniform or a real model */
    const char *rt = fmt_kv_get_str(fmt_model_kv(m), FMT_SYNTH_ROUTING_KEY, &rl);
    if (rt)
        json_object_object_add(root, "synth_routing", json_object_new_string_len(rt, (int)rl));
    json_object_object_add(root, "quant_type",
                           json_object_new_string(kern_type_name((enum kern_type)hp->quant_type)));
#define G(k, v) json_object_object_add(geo, k, json_object_new_int64((int64_t)(v)))
    G("n_layers", hp->n_layers); G("dim", hp->dim); G("ffn_dim", hp->ffn_dim);
    G("n_heads", hp->n_heads); G("n_kv_heads", hp->n_kv_heads); G("head_dim", hp->head_dim);
    G("vocab_size", hp->vocab_size); G("max_seq", hp->max_seq);
    G("n_experts", hp->n_experts); G("top_k", hp->top_k);
    G("expert_ffn_dim", hp->expert_ffn_dim); G("sliding_window", hp->sliding_window);
    G("dense_delay", hp->dense_delay); G("expert_delay", hp->expert_delay);
    G("merge_interval", hp->merge_interval); G("iterations", hp->iterations);
#undef G
    json_object_object_add(geo, "rope_theta", json_object_new_double(hp->rope_theta));
    json_object_object_add(geo, "norm_eps", json_object_new_double(hp->norm_eps));
    json_object_object_add(geo, "softcap", json_object_new_double(hp->softcap));
    json_object_object_add(geo, "combine_style", json_object_new_string(combine_name(hp->combine_style)));
    json_object_object_add(geo, "flags", flags_json(hp->flags));
    json_object_object_add(root, "geometry", geo);
    return root;
}

/* Per matrix: its type, shape, tiles and bytes; the totals into *tiles,
 * *bytes. */
static json_object *matrices_json(const fmt_model *m, uint64_t *tiles, uint64_t *bytes)
{
    const fmt_hparams *hp = fmt_model_hparams(m);
    json_object *mats = json_object_new_array();
    for (unsigned l = 0; l <= hp->n_layers; l++) {
        mstat ms[FMT_NMATRIX];
        memset(ms, 0, sizeof ms);
        static const int lslots[] = { FMT_S_Q, FMT_S_O, FMT_S_GATE, FMT_S_DOWN };
        static const int gslots[] = { FMT_S_TOK_EMBD, FMT_S_OUTPUT };
        const int *slots = l < hp->n_layers ? lslots : gslots;
        int ns = l < hp->n_layers ? 4 : 2;
        for (int i = 0; i < ns; i++)
            stream_stats(fmt_model_stream(m, l, slots[i]), ms);
        static const int lmat[][2] = { { FMT_M_Q, FMT_S_Q }, { FMT_M_K, FMT_S_K }, { FMT_M_V, FMT_S_V },
                                       { FMT_M_O, FMT_S_O }, { FMT_M_GATE, FMT_S_GATE },
                                       { FMT_M_UP, FMT_S_UP }, { FMT_M_DOWN, FMT_S_DOWN } };
        static const int gmat[][2] = { { FMT_M_TOK_EMBD, FMT_S_TOK_EMBD }, { FMT_M_OUTPUT, FMT_S_OUTPUT } };
        const int (*mm)[2] = l < hp->n_layers ? lmat : gmat;
        int nm = l < hp->n_layers ? 7 : 2;
        for (int i = 0; i < nm; i++) {
            const fmt_matinfo *mi = fmt_model_matinfo(m, l, mm[i][1]);
            if (!mi)
                continue;
            json_object *o = json_object_new_object();
            if (l < hp->n_layers)
                json_object_object_add(o, "layer", json_object_new_int((int)l));
            else
                json_object_object_add(o, "layer", NULL);
            json_object_object_add(o, "matrix", json_object_new_string(fmt_matrix_name(mm[i][0])));
            json_object_object_add(o, "type", json_object_new_string(kern_type_name((enum kern_type)mi->type)));
            json_object_object_add(o, "rows", json_object_new_int64(mi->rows));
            json_object_object_add(o, "cols", json_object_new_int64(mi->cols));
            json_object_object_add(o, "tiles", json_object_new_int64(ms[mm[i][0]].tiles));
            json_object_object_add(o, "bytes", json_object_new_int64((int64_t)ms[mm[i][0]].bytes));
            json_object_array_add(mats, o);
            *bytes += ms[mm[i][0]].bytes;
            *tiles += ms[mm[i][0]].tiles;
        }
    }
    return mats;
}

/* Per-layer geometry (only where the file records it). */
static json_object *layer_geom_json(const fmt_model *m)
{
    const fmt_hparams *hp = fmt_model_hparams(m);
    json_object *lgeo = json_object_new_array();
    for (unsigned l = 0; (hp->flags & FMT_FLAG_LAYER_GEOM) && l < hp->n_layers; l++) {
        const fmt_layer_geom *g = fmt_model_layer_geom(m, l);
        json_object *o = json_object_new_object();
        json_object_object_add(o, "layer", json_object_new_int((int)l));
        json_object_object_add(o, "n_heads", json_object_new_int((int)g->n_heads));
        json_object_object_add(o, "n_kv_heads", json_object_new_int((int)g->n_kv_heads));
        json_object_object_add(o, "head_dim", json_object_new_int((int)g->head_dim));
        json_object_object_add(o, "rope_dims", json_object_new_int((int)g->rope_dims));
        json_object_object_add(o, "rope_theta", json_object_new_double(g->rope_theta));
        json_object_object_add(o, "sliding_window", json_object_new_int((int)g->sliding_window));
        json_object_object_add(o, "kv_shared",
                               json_object_new_boolean(g->flags & FMT_LG_KV_SHARED));
        json_object_object_add(o, "experts",
                               json_object_new_boolean(hp->n_experts &&
                                                       !(g->flags & FMT_LG_NO_EXPERTS)));
        json_object_array_add(lgeo, o);
    }
    return lgeo;
}

/* Routers and expert banks: every expert's offset and length. */
static json_object *moe_json(const fmt_model *m)
{
    const fmt_hparams *hp = fmt_model_hparams(m);
    json_object *moe = json_object_new_array();
    for (unsigned l = 0; l < hp->n_layers; l++) {
        uint64_t rn = 0, boff = 0, bend = 0;
        const float *router = fmt_model_vec(m, l, FMT_S_ROUTER, &rn);
        const fmt_matinfo *gi = fmt_model_matinfo(m, l, FMT_S_EXP_GATE);
        const fmt_matinfo *di = fmt_model_matinfo(m, l, FMT_S_EXP_DOWN);
        if (!router || !gi || !di)
            continue;
        json_object *o = json_object_new_object(), *ex = json_object_new_array();
        json_object_object_add(o, "layer", json_object_new_int((int)l));
        json_object_object_add(o, "router_rows", json_object_new_int64((int64_t)hp->n_experts));
        json_object_object_add(o, "router_cols", json_object_new_int64((int64_t)hp->dim));
        json_object_object_add(o, "router_type", json_object_new_string("f32"));
        json_object_object_add(o, "n_experts", json_object_new_int((int)hp->n_experts));
        json_object_object_add(o, "top_k", json_object_new_int((int)hp->top_k));
        json_object_object_add(o, "gate_up_rows", json_object_new_int64(gi->rows));
        json_object_object_add(o, "gate_up_cols", json_object_new_int64(gi->cols));
        json_object_object_add(o, "down_rows", json_object_new_int64(di->rows));
        json_object_object_add(o, "down_cols", json_object_new_int64(di->cols));
        json_object_object_add(o, "type", json_object_new_string(
                                              kern_type_name((enum kern_type)gi->type)));
        json_object_object_add(o, "down_type", json_object_new_string(
                                                   kern_type_name((enum kern_type)di->type)));
        for (unsigned e = 0; e < hp->n_experts; e++) {
            uint64_t off = 0, len = 0;
            if (fmt_model_expert(m, l, e, NULL, NULL, &off, &len))
                continue;
            if (e == 0 || off < boff)
                boff = off;
            if (off + len > bend)
                bend = off + len;
            json_object *x = json_object_new_object();
            json_object_object_add(x, "expert", json_object_new_int((int)e));
            json_object_object_add(x, "offset", json_object_new_int64((int64_t)off));
            json_object_object_add(x, "length", json_object_new_int64((int64_t)len));
            json_object_array_add(ex, x);
        }
        json_object_object_add(o, "bank_offset", json_object_new_int64((int64_t)boff));
        json_object_object_add(o, "bank_bytes", json_object_new_int64((int64_t)(bend - boff)));
        json_object_object_add(o, "experts", ex);
        json_object_array_add(moe, o);
    }
    return moe;
}

#define JGET(o, k) json_object_object_get(o, k)

/* The text form, read back from the JSON tree. */
static void print_text(const fmt_model *m, json_object *root)
{
    const fmt_hparams *hp = fmt_model_hparams(m);
    unsigned vver = 0;
    int vflow = fmt_model_is_vflow(m, &vver);
    size_t sl = 0;
    const char *s0 = fmt_kv_get_str(fmt_model_kv(m), "cflow.source", &sl);
    /* the path and the file's strings, made printable for the terminal */
    char path[PATH_MAX + 1], src[64], arch[sizeof hp->arch];
    snprintf(path, sizeof path, "%s", fmt_model_path(m));
    snprintf(src, sizeof src, "%.*s", s0 ? (int)(sl < 63 ? sl : 63) : 1, s0 ? s0 : "?");
    snprintf(arch, sizeof arch, "%s", hp->arch[0] ? hp->arch : "?");
    ui_printable(path);
    ui_printable(src);
    ui_printable(arch);
    json_object *geo = JGET(root, "geometry"), *mats = JGET(root, "matrices");
    json_object *lgeo = JGET(root, "layer_geometry"), *moe = JGET(root, "moe_layers");
    uint64_t tot_tiles = (uint64_t)json_object_get_int64(JGET(root, "total_tiles"));
    uint64_t tot_bytes = (uint64_t)json_object_get_int64(JGET(root, "total_tile_bytes"));
    printf("file:          %s (%llu bytes)\n", path,
           (unsigned long long)fmt_model_file_size(m));
    if (vflow)
        printf("format:        .vflow v%u (stage-major; .cflow v%d header), architecture "
               "%s, source %s\n", vver, FMT_VERSION, arch, src);
    else
        printf("format:        .cflow v%d, architecture %s, source %s\n", FMT_VERSION, arch,
               src);
    printf("geometry:      %u layers, dim %u, ffn %u, heads %u/%u x %u, vocab %u, context %u\n",
           hp->n_layers, hp->dim, hp->ffn_dim, hp->n_heads, hp->n_kv_heads, hp->head_dim,
           hp->vocab_size, hp->max_seq);
    printf("experts:       %u (top-%u, ffn %u)\n", hp->n_experts, hp->top_k, hp->expert_ffn_dim);
    json_object *rt = JGET(root, "synth_routing");
    if (rt) {
        char routing[96];
        snprintf(routing, sizeof routing, "%s", json_object_get_string(rt));
        printf("routing:       %s (cflow synth --routing: skewed expert popularity)\n",
               ui_printable(routing));
    }
    printf("schedule:      dense_delay %u, expert_delay %u, combine %s, merge_interval %u, "
           "iterations %u, softcap %g\n", hp->dense_delay, hp->expert_delay,
           combine_text(hp), hp->merge_interval, hp->iterations,
           (double)hp->softcap);
    printf("rope:          theta %g, %s%s; norm eps %g\n", (double)hp->rope_theta,
           hp->flags & FMT_FLAG_ROPE_NEOX ? "split-half" : "adjacent pairs",
           hp->flags & FMT_FLAG_ROPE_LLAMA3 ? ", llama3 scaling" : "", (double)hp->norm_eps);
    printf("flags:         %s\n", json_object_to_json_string(json_object_object_get(geo, "flags")));
    printf("dominant type: %s\n\n", kern_type_name((enum kern_type)hp->quant_type));
    printf("%-6s %-11s %-6s %8s %8s %7s %12s\n", "layer", "matrix", "type", "rows", "cols",
           "tiles", "bytes");
    size_t n = json_object_array_length(mats);
    for (size_t i = 0; i < n; i++) {
        json_object *o = json_object_array_get_idx(mats, i);
        json_object *ly = json_object_object_get(o, "layer");
        printf("%-6s %-11s %-6s %8lld %8lld %7lld %12lld\n",
               ly ? json_object_get_string(ly) : "-",
               json_object_get_string(json_object_object_get(o, "matrix")),
               json_object_get_string(json_object_object_get(o, "type")),
               (long long)json_object_get_int64(json_object_object_get(o, "rows")),
               (long long)json_object_get_int64(json_object_object_get(o, "cols")),
               (long long)json_object_get_int64(json_object_object_get(o, "tiles")),
               (long long)json_object_get_int64(json_object_object_get(o, "bytes")));
    }
    printf("\ntotal:         %llu tiles, %llu bytes of tiles (without expert banks)\n",
           (unsigned long long)tot_tiles, (unsigned long long)tot_bytes);
    n = json_object_array_length(lgeo);
    if (n)
        printf("\n%-6s %6s %6s %5s %5s %10s %7s  %s\n", "layer", "heads", "kv", "hd",
               "rope", "theta", "window", "");
    for (size_t i = 0; i < n; i++) {
        json_object *o = json_object_array_get_idx(lgeo, i);
#define GI(k) json_object_get_int(json_object_object_get(o, k))
        printf("%-6d %6d %6d %5d %5d %10g %7d  %s%s\n", GI("layer"), GI("n_heads"),
               GI("n_kv_heads"), GI("head_dim"), GI("rope_dims"),
               json_object_get_double(json_object_object_get(o, "rope_theta")),
               GI("sliding_window"),
               json_object_get_boolean(json_object_object_get(o, "kv_shared"))
                   ? "K=V " : "",
               json_object_get_boolean(json_object_object_get(o, "experts"))
                   ? "experts" : "no experts");
#undef GI
    }
    n = json_object_array_length(moe);
    for (size_t i = 0; i < n; i++) {
        json_object *o = json_object_array_get_idx(moe, i);
#define GL(k) (long long)json_object_get_int64(json_object_object_get(o, k))
        printf("%slayer %lld: router %lldx%lld f32; %lld experts (top-%lld), gate/up "
               "%lldx%lld %s + down %lldx%lld %s; bank %lld bytes at %lld\n",
               i == 0 ? "\nexperts:\n" : "", GL("layer"), GL("router_rows"),
               GL("router_cols"), GL("n_experts"), GL("top_k"), GL("gate_up_rows"),
               GL("gate_up_cols"), json_object_get_string(json_object_object_get(o, "type")),
               GL("down_rows"), GL("down_cols"),
               json_object_get_string(json_object_object_get(o, "down_type")),
               GL("bank_bytes"), GL("bank_offset"));
#undef GL
        json_object *ex = json_object_object_get(o, "experts");
        for (size_t j = 0; j < json_object_array_length(ex); j++) {
            json_object *x = json_object_array_get_idx(ex, j);
            printf("  expert %3d: offset %lld, %lld bytes\n",
                   json_object_get_int(json_object_object_get(x, "expert")),
                   (long long)json_object_get_int64(json_object_object_get(x, "offset")),
                   (long long)json_object_get_int64(json_object_object_get(x, "length")));
        }
    }
}

/* --critical-path of a name that is no file: a synth preset's geometry.
 * -1 when it names no preset either (then it is opened as a file). */
static int preset_critical_path(const char *name, double bpp, uint32_t n_ctx, int json)
{
    fmt_hparams php;
    fmt_layer_geom *lg = NULL;
    char err[512];
    if (fmt_synth_geometry(name, &php, &lg, err, sizeof err))
        return -1;
    int rc = bpp > 0 ? critical_path(NULL, &php, lg, name, bpp, n_ctx, json)
                     : ui_usage_error("inspect", "%s is a preset, not a file: its critical "
                                      "path needs --bytes-per-param", name);
    free(lg);
    return rc;
}

int ui_cmd_inspect(int argc, char **argv)
{
    static const ui_optset set = { "cflow inspect", inspect_opts, help, "MODEL", 1 };
    ui_settings o;
    int rc, first;
    char err[512];
    fmt_model *m = NULL;
    struct stat st;

    ui_settings_default(&o);
    if ((rc = ui_opts_parse(&set, argc, argv, &o, &first)) >= 0)
        return rc;
    const char *path = argv[first];
    if (o.critical_path && stat(path, &st) != 0 &&
        (rc = preset_critical_path(path, o.bytes_per_param, (uint32_t)o.kv_ctx, o.json)) >= 0)
        return rc;
    char mbuf[PATH_MAX];   /* a GGUF, HF folder or llama2.c file: its cached conversion */
    if (!(path = ui_model_path(path, mbuf, sizeof mbuf)))
        return UI_EXIT_ERR;
    if (fmt_model_open(&m, path, err, sizeof err))
        return ui_error("%s", err);
    if (o.critical_path) {
        rc = critical_path(m, fmt_model_hparams(m), NULL, fmt_model_path(m),
                           o.bytes_per_param, (uint32_t)o.kv_ctx, o.json);
        fmt_model_close(m);
        return rc;
    }
    uint64_t tiles = 0, bytes = 0;
    json_object *root = header_json(m);
    json_object_object_add(root, "matrices", matrices_json(m, &tiles, &bytes));
    json_object_object_add(root, "layer_geometry", layer_geom_json(m));
    json_object_object_add(root, "moe_layers", moe_json(m));
    json_object_object_add(root, "total_tiles", json_object_new_int64((int64_t)tiles));
    json_object_object_add(root, "total_tile_bytes", json_object_new_int64((int64_t)bytes));
    if (o.json)
        puts(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
                                                      JSON_C_TO_STRING_NOSLASHESCAPE));
    else
        print_text(m, root);
    json_object_put(root);
    fmt_model_close(m);
    return UI_EXIT_OK;
}
