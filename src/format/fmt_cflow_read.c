/*
 * fmt_cflow_read.c — map and validate a .cflow v5 file.
 *
 * Nothing in a mapped model is trusted until it has been checked here:
 * the header's geometry against sane bounds, every slot's offset and length
 * against the file size and the geometry, and every tile header against the
 * canonical walk of its stream (fmt_plan.c), which proves each matrix is
 * covered exactly once.  Scales (and F16/F32 weights) are checked finite.
 * Only then are tile headers decoded into fmt_tile arrays that the engine
 * walks without further checks.  Allocations are bounded by the file size:
 * a tile costs at least 16 bytes of file, so the tile array can never be
 * larger than a fixed multiple of the mapping.
 *
 * FMT_OPEN_READ copies the file into anonymous memory instead of mapping
 * it (fmt_cflow_copy.c), keeping the expert banks mapped where asked
 * (bank_ranges below).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/cflow_format.h"
#include "format/fmt_impl.h"
#include "format/fmt_layout.h"
#include "format/fmt_plan.h"

typedef struct fmt_entry {
    fmt_matinfo mat[FMT_NSLOT_ALL];
    uint8_t     kind[FMT_NSLOT_ALL];
    uint64_t    off[FMT_NSLOT_ALL], len[FMT_NSLOT_ALL];
    uint32_t    rows[FMT_NSLOT_ALL];
    fmt_stream  stream[FMT_NSLOT_ALL]; /* valid at a group's first slot */
    fmt_stream *experts;             /* [n_experts][2]: gate/up, down */
    uint64_t   *exp_off, *exp_len;   /* [n_experts] from the offset table */
    fmt_layer_geom geom;             /* the record, or the header's geometry */
} fmt_entry;

struct fmt_model {
    char          *path;
    const uint8_t *map;
    const uint8_t *hdr;              /* the GlobalHeader (map, or inside .vflow) */
    int            vflow;
    uint32_t       vgroups_layers;   /* .vflow: layers its groups cover */
    uint64_t       size;
    uint64_t       copied;           /* bytes read into anonymous memory */
    int            lazy_experts;     /* FMT_OPEN_LAZY_EXPERTS: tiles unread */
    fmt_hparams    hp;
    fmt_kv        *kv;
    unsigned       n_entries;        /* n_layers + 1 */
    fmt_entry     *e;
    fmt_tile      *tiles;
};

#define bad fmt_bad   /* fmt_tile_check.c */

static const char *slot_name(unsigned entry, unsigned n_layers, int s)
{
    static const char *layer_names[FMT_NSLOT_ALL] = {
        "attn_norm", "q", "k", "v", "o", "ffn_norm", "gate", "up", "down",
        "router", "expert_table", "exp_gate", "exp_up", "exp_down",
        "qkv_bias", "moe_norm", "q_norm", "k_norm", "layer_geom", "xslots",
        "attn_post_norm", "ffn_post_norm", "attn_sinks", "o_bias", "router_bias",
        "exp_gu_bias", "exp_down_bias", "sh_gate", "sh_up", "sh_down", "kv_a_norm",
        "k_b", "v_b", "q_a_norm", "slot34", "slot35"
    };
    static const char *global_names[FMT_NSLOT_ALL] = {
        "token_embd", "output_norm", "output", [FMT_S_XSLOTS] = "xslots",
        [FMT_S_ROPE_SHORT] = "rope_short", [FMT_S_ROPE_LONG] = "rope_long"
    };
    if (entry == n_layers && global_names[s])
        return global_names[s];
    return layer_names[s];
}

/* A .vflow starts with its own 64-byte header: check it and its group
 * table, and point m->hdr at the embedded GlobalHeader. */
static int read_vflow_header(fmt_model *m, char *err, size_t errlen)
{
    const uint8_t *v = m->map;
    const char *p = m->path;
    if (m->size < FMT_VHEADER_SIZE + FMT_HEADER_SIZE)
        return bad(err, errlen, FMT_EFORMAT, p, "truncated .vflow header");
    if (kern_ld_u16(v + FMT_V_VERSION) != FMT_VVERSION)
        return bad(err, errlen, FMT_EUNSUP, p, "unsupported .vflow version %u",
                   kern_ld_u16(v + FMT_V_VERSION));
    if (kern_ld_u16(v + FMT_V_HSIZE) != FMT_VHEADER_SIZE)
        return bad(err, errlen, FMT_EFORMAT, p, "bad .vflow header size");
    uint64_t gh = kern_ld_u64(v + FMT_V_GHEADER), gt = kern_ld_u64(v + FMT_V_GTABLE);
    uint32_t ng = kern_ld_u32(v + FMT_V_NGROUPS);
    uint64_t so = kern_ld_u64(v + FMT_V_STREAM), sl = kern_ld_u64(v + FMT_V_STREAMLEN);
    uint64_t bo = kern_ld_u64(v + FMT_V_BANK), bl = kern_ld_u64(v + FMT_V_BANKLEN);
    if (gh < FMT_VHEADER_SIZE || gh > m->size || m->size - gh < FMT_HEADER_SIZE)
        return bad(err, errlen, FMT_EFORMAT, p, "global header offset %llu lies "
                   "past the end", (unsigned long long)gh);
    if (ng < 1 || ng > 4096 || gt > m->size ||
        m->size - gt < (uint64_t)ng * FMT_VGROUP_SIZE)
        return bad(err, errlen, FMT_EFORMAT, p, "group table (%u groups at %llu) "
                   "lies past the end", ng, (unsigned long long)gt);
    if (so > m->size || sl > m->size - so || bo > m->size || bl > m->size - bo)
        return bad(err, errlen, FMT_EFORMAT, p, "streaming region or expert bank "
                   "lies past the end");
    uint32_t next = 0;
    for (uint32_t g = 0; g < ng; g++) {
        const uint8_t *d = m->map + gt + (uint64_t)g * FMT_VGROUP_SIZE;
        uint64_t ao = kern_ld_u64(d + 8), al = kern_ld_u64(d + 16);
        uint64_t dof = kern_ld_u64(d + 24), dl = kern_ld_u64(d + 32);
        if (kern_ld_u32(d) != next || kern_ld_u32(d + 4) == 0 ||
            ao < so || ao > so + sl || al > so + sl - ao ||
            dof < so || dof > so + sl || dl > so + sl - dof)
            return bad(err, errlen, FMT_EFORMAT, p, "group %u is malformed", g);
        next += kern_ld_u32(d + 4);
    }
    m->vgroups_layers = next;
    m->hdr = m->map + gh;
    m->vflow = 1;
    return 0;
}

static int read_header(fmt_model *m, char *err, size_t errlen)
{
    const uint8_t *h = m->hdr;
    fmt_hparams *hp = &m->hp;
    const char *p = m->path;

    if (m->size < FMT_HEADER_SIZE)
        return bad(err, errlen, FMT_EFORMAT, p,
                   "truncated: %llu bytes is smaller than the 88-byte header",
                   (unsigned long long)m->size);
    if (memcmp(h, FMT_MAGIC, 8))
        return bad(err, errlen, FMT_EFORMAT, p, "not a .cflow file (bad magic)");
    unsigned ver = kern_ld_u16(h + FMT_H_VERSION);
    if (ver != FMT_VERSION)
        return bad(err, errlen, FMT_EUNSUP, p,
                   "unsupported .cflow version %u (this build reads %u)", ver,
                   FMT_VERSION);
    if (kern_ld_u16(h + FMT_H_HSIZE) != FMT_HEADER_SIZE)
        return bad(err, errlen, FMT_EFORMAT, p, "header size %u, expected 88",
                   kern_ld_u16(h + FMT_H_HSIZE));

    fmt_header_load(h, hp);           /* every field, checked below */

#define REQ(cond, ...) \
    do { if (!(cond)) return bad(err, errlen, FMT_EFORMAT, p, __VA_ARGS__); } while (0)
    REQ(hp->n_layers >= 1 && hp->n_layers <= 4096,
        "absurd layer count %u", hp->n_layers);
    REQ(hp->dim >= 1 && hp->dim <= (1u << 18), "absurd hidden size %u", hp->dim);
    /* a tile's col_offset is 16 bits: no matrix may be wider than 65536 */
    REQ(hp->dim <= 65536, "hidden size %u exceeds the 65536-column limit", hp->dim);
    REQ(hp->ffn_dim <= 65536 && (hp->ffn_dim >= 1 || hp->n_experts > 0),
        "FFN size %u outside 1..65536", hp->ffn_dim);
    REQ(hp->n_experts <= 254, "%u experts: at most 254 are supported",
        hp->n_experts);
    REQ(hp->n_experts == 0 || (hp->expert_ffn_dim >= 1 && hp->expert_ffn_dim <= 65536),
        "expert FFN size %u outside 1..65536", hp->expert_ffn_dim);
    /* Without experts the expert fields mean nothing; clear them so no
     * consumer sizes a buffer by a value nobody validated (fuzz regression
     * eng-open-expert-ffn-dim-in-dense-model). */
    if (hp->n_experts == 0)
        hp->expert_ffn_dim = 0;
    REQ((uint64_t)hp->n_heads * hp->head_dim <= 65536,
        "attention width %u x %u exceeds the 65536-column limit", hp->n_heads,
        hp->head_dim);
    REQ(hp->vocab_size >= 1 && hp->vocab_size <= (1u << 24),
        "absurd vocabulary size %u", hp->vocab_size);
    REQ(hp->max_seq >= 1 && hp->max_seq <= (1u << 24),
        "absurd context length %u", hp->max_seq);
    REQ(hp->n_heads >= 1 && hp->n_kv_heads >= 1 &&
            hp->n_kv_heads <= hp->n_heads && hp->n_heads % hp->n_kv_heads == 0,
        "bad head counts %u/%u", hp->n_heads, hp->n_kv_heads);
    REQ(hp->head_dim >= 2 && hp->head_dim % 2 == 0 && hp->head_dim <= 4096,
        "bad head dimension %u", hp->head_dim);
    REQ(kern_ld_u16(h + FMT_H_TROWS) == KERN_TILE_ROWS &&
            kern_ld_u16(h + FMT_H_TCOLS) == KERN_TILE_COLS &&
            kern_ld_u16(h + FMT_H_QGROUP) == KERN_QBLOCK,
        "tile geometry %ux%u/%u, expected 128x256/32",
        kern_ld_u16(h + FMT_H_TROWS), kern_ld_u16(h + FMT_H_TCOLS),
        kern_ld_u16(h + FMT_H_QGROUP));
    REQ(hp->quant_type < KERN_NTYPES, "unknown quantisation type %u",
        hp->quant_type);
    REQ(isfinite(hp->rope_theta) && hp->rope_theta > 0.0f,
        "bad rope theta %g", (double)hp->rope_theta);
    REQ(isfinite(hp->norm_eps) && hp->norm_eps > 0.0f && hp->norm_eps < 1.0f,
        "bad norm epsilon %g", (double)hp->norm_eps);
    REQ(!(h[FMT_H_FLAGS] & ~FMT_FLAGS_KNOWN), "unknown feature flags 0x%02x",
        h[FMT_H_FLAGS]);
    REQ(!(h[FMT_H_FLAGS2] & ~FMT_FLAGS2_KNOWN), "unknown feature_flags2 0x%02x",
        h[FMT_H_FLAGS2]);
    REQ(!(hp->flags & FMT_FLAG_MOE_NO_RENORM) || hp->n_experts > 0,
        "routing flag moe_no_renorm on a model without experts");
    char why[160];
    REQ(fmt_pipeline_check(hp, why, sizeof why) == 0, "%s", why);
    REQ(isfinite(hp->softcap) && hp->softcap >= 0.0f, "bad softcap %g",
        (double)hp->softcap);
    REQ(hp->top_k <= hp->n_experts, "top-k %u exceeds the %u experts",
        hp->top_k, hp->n_experts);
    REQ(hp->n_experts == 0 || hp->top_k >= 1, "MoE model with top-k 0");
#undef REQ
    return 0;
}

typedef struct walk_ctx {
    fmt_model      *m;
    uint8_t         expert;          /* expected expert id */
    const uint8_t  *pos, *end;
    fmt_plan_mat    mat[FMT_MAX_FUSED];
    fmt_tile       *out;
    unsigned        entry;
    char           *err;
    size_t          errlen;
    int             rc;
    int             lazy;            /* lay the tiles out without reading them */
} walk_ctx;

static int check_tile(void *ud, unsigned mi, uint32_t row0, uint32_t col0,
                      unsigned rows, unsigned cols)
{
    walk_ctx *c = ud;
    const char *p = c->m->path;
    unsigned L = c->m->hp.n_layers;
    size_t left = (size_t)(c->end - c->pos);
    enum kern_type ty = (enum kern_type)c->mat[mi].type;
    size_t psz = kern_tile_payload_size(ty, rows, cols);

    if (left < FMT_TILE_HEADER_SIZE + psz) {
        c->rc = bad(c->err, c->errlen, FMT_EFORMAT, p,
                    "tile stream of %s %u ends early (tile at row %u col %u)",
                    c->entry == L ? "globals" : "layer", c->entry, row0, col0);
        return 1;
    }
    const uint8_t *h = c->pos;
    const fmt_tile want = { .payload = h + FMT_TILE_HEADER_SIZE, .row0 = row0,
                            .col0 = (uint16_t)col0, .rows = (uint16_t)rows,
                            .cols = (uint16_t)cols, .matrix = c->mat[mi].matrix,
                            .type = (uint8_t)ty, .expert = c->expert };
    if (!c->lazy && (c->rc = fmt_tile_check(p, c->entry, &want, h, (uint64_t)(h - c->m->map),
                                            c->err, c->errlen)))
        return 1;
    const uint8_t *payload = want.payload;
    *c->out++ = want;
    c->pos = payload + psz;
    return 0;
}

/* The expert offset table of a layer and each expert's two streams: every
 * entry must lie inside the bank the expert slots describe, and its bytes
 * must be exactly the expert's fused gate/up stream then its down stream. */
static int read_experts(fmt_model *m, unsigned en, fmt_tile **next, char *err,
                        size_t errlen)
{
    fmt_entry *e = &m->e[en];
    const char *p = m->path;
    unsigned E = m->hp.n_experts;
    uint64_t bank = e->off[FMT_S_EXP_GATE], bank_len = e->len[FMT_S_EXP_GATE];
    if (e->off[FMT_S_EXP_UP] != bank || e->off[FMT_S_EXP_DOWN] != bank ||
        e->len[FMT_S_EXP_UP] != bank_len || e->len[FMT_S_EXP_DOWN] != bank_len)
        return bad(err, errlen, FMT_EFORMAT, p,
                   "layer %u: expert slots disagree on the bank", en);
    e->experts = calloc((size_t)E * 2, sizeof *e->experts);
    e->exp_off = calloc(E, sizeof *e->exp_off);
    e->exp_len = calloc(E, sizeof *e->exp_len);
    if (!e->experts || !e->exp_off || !e->exp_len)
        return bad(err, errlen, FMT_ENOMEM, p, "out of memory");
    for (unsigned x = 0; x < E; x++) {
        const uint8_t *te = m->map + e->off[FMT_S_EXPERT_TABLE] + 16 * (uint64_t)x;
        uint64_t off = kern_ld_u64(te), len = kern_ld_u64(te + 8);
        if (off < bank || off > bank + bank_len || len > bank + bank_len - off)
            return bad(err, errlen, FMT_EFORMAT, p,
                       "layer %u expert %u (offset %llu, %llu bytes) lies outside "
                       "the expert bank [%llu, +%llu)", en, x,
                       (unsigned long long)off, (unsigned long long)len,
                       (unsigned long long)bank, (unsigned long long)bank_len);
        e->exp_off[x] = off;
        e->exp_len[x] = len;
        walk_ctx c;
        const uint8_t *end = m->map + off + len;
        const uint8_t *pos = m->map + off;
        static const int gs[2][2] = { { FMT_S_EXP_GATE, FMT_S_EXP_UP },
                                      { FMT_S_EXP_DOWN, -1 } };
        static const uint8_t gm[2][2] = { { FMT_M_EXP_GATE, FMT_M_EXP_UP },
                                          { FMT_M_EXP_DOWN, 0 } };
        for (int g = 0; g < 2; g++) {
            unsigned n = g == 0 ? 2 : 1;
            memset(&c, 0, sizeof c);
            c.expert = (uint8_t)x;
            for (unsigned i = 0; i < n; i++) {
                c.mat[i].rows = e->mat[gs[g][i]].rows;
                c.mat[i].cols = e->mat[gs[g][i]].cols;
                c.mat[i].type = e->mat[gs[g][i]].type;
                c.mat[i].matrix = gm[g][i];
            }
            /* every stream starts on a 64-byte boundary of the file */
            uint64_t at = (uint64_t)(pos - m->map);
            at = (at + FMT_ALIGN - 1) / FMT_ALIGN * FMT_ALIGN;
            if (at > (uint64_t)(end - m->map))
                return bad(err, errlen, FMT_EFORMAT, p,
                           "layer %u expert %u ends before its down projection",
                           en, x);
            pos = m->map + at;
            c.m = m;
            c.pos = pos;
            c.end = end;
            c.out = *next;
            c.entry = en;
            c.err = err;
            c.errlen = errlen;
            c.lazy = m->lazy_experts;
            const uint8_t *start = pos;
            long cnt = fmt_plan_walk(c.mat, n, check_tile, &c);
            if (cnt < 0)
                return c.rc;
            fmt_stream *st = &e->experts[2 * x + (unsigned)g];
            st->tiles = *next;
            st->n_tiles = (uint32_t)cnt;
            st->offset = (uint64_t)(start - m->map);
            st->length = (uint64_t)(c.pos - start);
            *next += cnt;
            pos = c.pos;
        }
        if (pos != end)
            return bad(err, errlen, FMT_EFORMAT, p,
                       "layer %u expert %u: %llu stray bytes after its tiles", en,
                       x, (unsigned long long)(end - pos));
    }
    return 0;
}

/* The geometry of entry en: the header's, or (FMT_FLAG_LAYER_GEOM) its
 * LayerGeometry record in slot 18, checked like the header. */
static int read_layer_geom(fmt_model *m, unsigned en, uint64_t data_start,
                           char *err, size_t errlen)
{
    const fmt_hparams *hp = &m->hp;
    fmt_layer_geom *g = &m->e[en].geom;
    const char *p = m->path;
    fmt_layer_geom_default(hp, g);
    if (!(hp->flags & FMT_FLAG_LAYER_GEOM) || en == hp->n_layers)
        return 0;
    const uint8_t *sl = m->map + kern_ld_u64(m->hdr + FMT_H_LTABLE) +
                        ((uint64_t)en * FMT_NSLOT + FMT_S_LAYER_GEOM) * FMT_SLOT_SIZE;
    uint64_t off = kern_ld_u64(sl + FMT_SL_OFFSET), len = kern_ld_u64(sl + FMT_SL_LENGTH);
    if (sl[FMT_SL_KIND] != FMT_K_LGEOM || len != FMT_LGEOM_SIZE ||
        kern_ld_u32(sl + FMT_SL_ROWS) != 1 || kern_ld_u32(sl + FMT_SL_COLS) != FMT_LGEOM_SIZE)
        return bad(err, errlen, FMT_EFORMAT, p, "layer %u: layer_geom flagged but "
                   "slot 18 holds no 32-byte geometry record", en);
    if (off < data_start || off > m->size || m->size - off < FMT_LGEOM_SIZE)
        return bad(err, errlen, FMT_EFORMAT, p, "layer %u geometry record (offset "
                   "%llu) lies outside the %llu-byte file", en,
                   (unsigned long long)off, (unsigned long long)m->size);
    const uint8_t *r = m->map + off;
    g->n_heads = kern_ld_u16(r + FMT_LG_NHEADS);
    g->n_kv_heads = kern_ld_u16(r + FMT_LG_NKV);
    g->head_dim = kern_ld_u16(r + FMT_LG_HEADDIM);
    g->rope_dims = kern_ld_u16(r + FMT_LG_ROPEDIMS);
    g->rope_theta = kern_ld_f32(r + FMT_LG_THETA);
    g->sliding_window = kern_ld_u32(r + FMT_LG_SWA);
    g->flags = kern_ld_u32(r + FMT_LG_FLAGS);
    g->rope_scale = kern_ld_f32(r + FMT_LG_RSCALE);
    if (g->rope_scale == 0.0f)
        g->rope_scale = 1.0f;
    int zero = 1;
    for (unsigned i = FMT_LG_RESERVED; i < FMT_LGEOM_SIZE; i++)
        zero &= r[i] == 0;
    const char *why = NULL;
    if (g->n_heads < 1 || g->n_kv_heads < 1 || g->n_kv_heads > g->n_heads ||
        g->n_heads % g->n_kv_heads)
        why = "bad head counts";
    else if (g->head_dim < 2 || g->head_dim % 2 || g->head_dim > 4096 ||
             (uint64_t)g->n_heads * g->head_dim > 65536)
        why = "bad head dimension";
    else if (g->rope_dims % 2 || g->rope_dims > g->head_dim)
        why = "rope_dims odd or wider than the head";
    else if (!isfinite(g->rope_theta) || !(g->rope_theta > 0))
        why = "bad rope theta";
    else if (!isfinite(g->rope_scale) || !(g->rope_scale > 0) || g->rope_scale > 1e6f)
        why = "bad rope scale";
    else if (g->sliding_window > hp->max_seq)
        why = "sliding window longer than the context";
    else if (g->flags & ~FMT_LG_FLAGS_KNOWN)
        why = "unknown layer flags";
    else if ((g->flags & FMT_LG_NO_EXPERTS) && hp->n_experts == 0)
        why = "no_experts on a model without experts";
    else if (!zero)
        why = "reserved bytes not zero";
    if (why)
        return bad(err, errlen, FMT_EFORMAT, p, "layer %u geometry: %s (heads %u/%u, "
                   "head dim %u, rope dims %u, window %u, flags 0x%x)", en, why,
                   g->n_heads, g->n_kv_heads, g->head_dim, g->rope_dims,
                   g->sliding_window, g->flags);
    return 0;
}

/* A tiled slot's type (built, whole blocks a row) and tile count; *tiles
 * counts them (a bank's for every expert). */
static int tiled_slot(const fmt_model *m, unsigned en, int s, const uint8_t *sl,
                      uint64_t *tiles, char *err, size_t errlen)
{
    const char *p = m->path, *nm = slot_name(en, m->hp.n_layers, s);
    const uint8_t type = sl[FMT_SL_TYPE];
    const uint32_t rows = kern_ld_u32(sl + FMT_SL_ROWS), cols = kern_ld_u32(sl + FMT_SL_COLS);

    if (!fmt_tile_built(type))
        return bad(err, errlen, FMT_EUNSUP, p,
                   "layer %u %s: tile type %s is not built into this cflow", en, nm,
                   kern_type_name((enum kern_type)type));
    /* the GGML block types keep whole blocks: a row is a number of them
     * (q8_0 and q4_0 tiles pad a cut block, as they always have) */
    if (type > KERN_Q4_0 && cols % kern_type_block((enum kern_type)type))
        return bad(err, errlen, FMT_EFORMAT, p,
                   "layer %u %s: %u columns are not a multiple of %s's %u-column "
                   "block", en, nm, cols, kern_type_name((enum kern_type)type),
                   kern_type_block((enum kern_type)type));
    if (kern_ld_u32(sl + FMT_SL_NTILES) != fmt_plan_tiles(rows, cols))
        return bad(err, errlen, FMT_EFORMAT, p,
                   "layer %u %s: %u tiles, expected %u", en, nm,
                   kern_ld_u32(sl + FMT_SL_NTILES),
                   fmt_plan_tiles(rows, cols));
    *tiles += (uint64_t)fmt_plan_tiles(rows, cols) *
              (s >= FMT_S_EXP_GATE && s <= FMT_S_EXP_DOWN ? m->hp.n_experts : 1);
    return 0;
}

/* Slot s of table entry en (the table at ltab, tbytes long): its kind and
 * shape as the geometry expects, its bytes inside the file, its type, a
 * vector's values finite; recorded in m->e[en]; *tiles counts the tiles
 * its stream must hold. */
static int read_slot(fmt_model *m, unsigned en, int s, uint64_t ltab,
                     uint64_t tbytes, uint64_t *tiles, char *err, size_t errlen)
{
    const fmt_hparams *hp = &m->hp;
    const char *p = m->path;
    fmt_entry *e = &m->e[en];
    /* slots 20-35 are entries of slot 19's table (read before them) */
    const uint8_t *sl = s < FMT_NSLOT
                            ? m->map + ltab + ((uint64_t)en * FMT_NSLOT + (unsigned)s) *
                                                  FMT_SLOT_SIZE
                        : e->kind[FMT_S_XSLOTS] == FMT_K_XSLOTS
                            ? m->map + e->off[FMT_S_XSLOTS] +
                                  (uint64_t)(s - FMT_NSLOT) * FMT_SLOT_SIZE
                            : NULL;
    static const uint8_t empty[FMT_SLOT_SIZE];
    int want_kind;
    uint32_t want_rows, want_cols;
    if (!sl)
        sl = empty;                    /* no xslots: slots 20-35 are empty */
    uint8_t kind = sl[FMT_SL_KIND], type = sl[FMT_SL_TYPE];
    uint32_t nel = 0;
    uint64_t off = kern_ld_u64(sl + FMT_SL_OFFSET);
    uint64_t len = kern_ld_u64(sl + FMT_SL_LENGTH);
    uint32_t rows = kern_ld_u32(sl + FMT_SL_ROWS);
    uint32_t cols = kern_ld_u32(sl + FMT_SL_COLS);
    const char *nm = slot_name(en, hp->n_layers, s);
    int rc;

    fmt_slot_expect(hp, &e->geom, en, s, &want_kind, &want_rows, &want_cols);
    if (want_kind < 0)                 /* optional: empty, or of -want_kind */
        want_kind = kind == FMT_K_EMPTY ? FMT_K_EMPTY : -want_kind;
    if (kind != want_kind)
        return bad(err, errlen, FMT_EFORMAT, p,
                   "%s %u slot %s has kind %u, expected %d",
                   en == hp->n_layers ? "globals" : "layer", en, nm,
                   kind, want_kind);
    if (kind == FMT_K_EMPTY)
        return 0;
    /* Q/K norms of the whole width (OLMoE) beside the per-head ones */
    if ((s == FMT_S_Q_NORM || s == FMT_S_K_NORM) && en < hp->n_layers && cols == 1 &&
        rows == (s == FMT_S_Q_NORM ? e->geom.n_heads : e->geom.n_kv_heads) * e->geom.head_dim)
        want_rows = rows;
    if (rows != want_rows || cols != want_cols)
        return bad(err, errlen, FMT_EFORMAT, p,
                   "%s %u %s is %ux%u, expected %ux%u",
                   en == hp->n_layers ? "globals" : "layer", en, nm,
                   rows, cols, want_rows, want_cols);
    /* data lies past the layer table and the xslot tables */
    const uint64_t data0 = ltab + tbytes + (hp->flags & FMT_FLAG_XSLOTS
                                                ? (uint64_t)m->n_entries * FMT_NXSLOT *
                                                      FMT_SLOT_SIZE : 0);
    if (off < (kind == FMT_K_XSLOTS ? ltab + tbytes : data0) || off > m->size ||
        len > m->size - off)
        return bad(err, errlen, FMT_EFORMAT, p,
                   "layer %u %s (offset %llu, %llu bytes) lies outside "
                   "the %llu-byte file", en, nm,
                   (unsigned long long)off, (unsigned long long)len,
                   (unsigned long long)m->size);
    /* every slot's type names a tile type, tables included: what
     * the reader returns as present is sound (fuzz regression
     * cflow-table-slot-type) */
    if (type >= KERN_NTYPES)
        return bad(err, errlen, FMT_EFORMAT, p,
                   "layer %u %s: unknown type %u", en, nm, type);
    if (kind == FMT_K_XSLOTS) {
        /* the xslot tables follow the layer table, entry after entry */
        if (off != ltab + tbytes + (uint64_t)en * FMT_NXSLOT * FMT_SLOT_SIZE ||
            len != FMT_NXSLOT * FMT_SLOT_SIZE)
            return bad(err, errlen, FMT_EFORMAT, p, "%s %u slot xslots points at %llu, "
                       "not at its table after the layer table",
                       en == hp->n_layers ? "globals" : "layer", en, (unsigned long long)off);
    } else if (kind == FMT_K_LGEOM) {
        /* read_layer_geom checked it */
    } else if (kind == FMT_K_EXPTABLE) {
        if (len != (uint64_t)rows * 16)
            return bad(err, errlen, FMT_EFORMAT, p,
                       "layer %u expert table of %llu bytes for %u experts",
                       en, (unsigned long long)len, rows);
    } else if (kind == FMT_K_VEC || kind == FMT_K_F32MAT) {
        nel = kind == FMT_K_F32MAT ? rows * cols : rows;
        if (type != KERN_F32 || len != (uint64_t)nel * 4 || off % 4)
            return bad(err, errlen, FMT_EFORMAT, p,
                       "layer %u %s: vector of %llu bytes for %u floats "
                       "(or misaligned)",
                       en, nm, (unsigned long long)len, nel);
        for (uint32_t i = 0; i < nel; i++)
            if (!isfinite(kern_ld_f32(m->map + off + 4 * (uint64_t)i)))
                return bad(err, errlen, FMT_EFORMAT, p,
                           "layer %u %s holds a non-finite value", en, nm);
    } else if ((rc = tiled_slot(m, en, s, sl, tiles, err, errlen))) {
        return rc;
    }
    e->kind[s] = kind;
    e->off[s] = off;
    e->len[s] = len;
    e->rows[s] = nel;
    e->mat[s].rows = rows;
    e->mat[s].cols = cols;
    e->mat[s].type = type;
    e->mat[s].present = 1;
    return 0;
}

/* The tile streams of table entry en, checked tile by tile (check_tile)
 * into the index at *next, then its expert bank. */
static int walk_entry(fmt_model *m, unsigned en, fmt_tile **next, char *err,
                      size_t errlen)
{
    const fmt_hparams *hp = &m->hp;
    const char *p = m->path;
    fmt_entry *e = &m->e[en];
    int global = en == hp->n_layers;
    const fmt_group *groups = global ? fmt_global_groups : fmt_layer_groups;
    unsigned ng = global ? FMT_GLOBAL_GROUPS : FMT_LAYER_GROUPS;
    for (unsigned gi = 0; gi < ng; gi++) {
        const fmt_group *g = &groups[gi];
        int s0 = g->first_slot;
        walk_ctx c;
        if (e->kind[s0] != FMT_K_TILED)
            continue;
        memset(&c, 0, sizeof c);
        c.expert = FMT_NO_EXPERT;
        /* no V projection (V shares K's, or MLA's latent): the QKV
         * stream holds Q and K only */
        unsigned gn = s0 == FMT_S_Q && !global && !fmt_layer_has_v(hp, &e->geom) ? 2 : g->n;
        for (unsigned i = 0; i < gn; i++) {
            int s = g->slots[i];
            if (e->kind[s] != FMT_K_TILED || e->off[s] != e->off[s0] ||
                e->len[s] != e->len[s0])
                return bad(err, errlen, FMT_EFORMAT, p,
                           "layer %u: fused stream %s/%s disagrees on its "
                           "byte range", en, slot_name(en, hp->n_layers, s0),
                           slot_name(en, hp->n_layers, s));
            c.mat[i].rows = e->mat[s].rows;
            c.mat[i].cols = e->mat[s].cols;
            c.mat[i].type = e->mat[s].type;
            c.mat[i].matrix = g->matrix[i];
        }
        c.m = m;
        c.pos = m->map + e->off[s0];
        c.end = c.pos + e->len[s0];
        c.out = *next;
        c.entry = en;
        c.err = err;
        c.errlen = errlen;
        long n = fmt_plan_walk(c.mat, gn, check_tile, &c);
        if (n < 0)
            return c.rc;
        if (c.pos != c.end)
            return bad(err, errlen, FMT_EFORMAT, p,
                       "layer %u %s: %llu stray bytes after the last tile",
                       en, slot_name(en, hp->n_layers, s0),
                       (unsigned long long)(c.end - c.pos));
        e->stream[s0].tiles = *next;
        e->stream[s0].n_tiles = (uint32_t)n;
        e->stream[s0].offset = e->off[s0];
        e->stream[s0].length = e->len[s0];
        *next += n;
    }
    if (e->kind[FMT_S_EXPERT_TABLE] == FMT_K_EXPTABLE) {
        int rc = read_experts(m, en, next, err, errlen);
        if (rc)
            return rc;
    }
    return 0;
}

static int read_table(fmt_model *m, char *err, size_t errlen)
{
    const char *p = m->path;
    uint64_t ltab = kern_ld_u64(m->hdr + FMT_H_LTABLE);
    uint64_t tbytes = (uint64_t)m->n_entries * FMT_NSLOT * FMT_SLOT_SIZE;
    uint64_t xbytes = m->hp.flags & FMT_FLAG_XSLOTS
                          ? (uint64_t)m->n_entries * FMT_NXSLOT * FMT_SLOT_SIZE : 0;
    uint64_t total_tiles = 0;
    int rc;

    if (ltab < FMT_HEADER_SIZE || ltab > m->size || m->size - ltab < tbytes + xbytes)
        return bad(err, errlen, FMT_EFORMAT, p,
                   "layer table (offset %llu, %llu bytes) lies past the end of "
                   "the %llu-byte file", (unsigned long long)ltab,
                   (unsigned long long)(tbytes + xbytes), (unsigned long long)m->size);
    m->e = calloc(m->n_entries, sizeof *m->e);
    if (!m->e)
        return bad(err, errlen, FMT_ENOMEM, p, "out of memory");
    for (unsigned en = 0; en < m->n_entries; en++) {
        if ((rc = read_layer_geom(m, en, ltab + tbytes, err, errlen)))
            return rc;
        for (int s = 0; s < FMT_NSLOT_ALL; s++)
            if ((rc = read_slot(m, en, s, ltab, tbytes, &total_tiles, err,
                                errlen)))
                return rc;
    }
    /* every tile needs at least its header in the file */
    if (total_tiles > m->size / FMT_TILE_HEADER_SIZE)
        return bad(err, errlen, FMT_EFORMAT, p,
                   "%llu tiles cannot fit in %llu bytes",
                   (unsigned long long)total_tiles, (unsigned long long)m->size);
    m->tiles = calloc(total_tiles ? total_tiles : 1, sizeof *m->tiles);
    if (!m->tiles)
        return bad(err, errlen, FMT_ENOMEM, p, "out of memory");
    fmt_tile *next = m->tiles;
    for (unsigned en = 0; en < m->n_entries; en++)
        if ((rc = walk_entry(m, en, &next, err, errlen)))
            return rc;
    return 0;
}

static int read_meta(fmt_model *m, char *err, size_t errlen)
{
    uint64_t off = kern_ld_u64(m->hdr + FMT_H_META);
    size_t used = 0;
    int rc;
    if (off < FMT_HEADER_SIZE || off > m->size || m->size - off < 8)
        return bad(err, errlen, FMT_EFORMAT, m->path,
                   "metadata offset %llu lies past the end of the file",
                   (unsigned long long)off);
    uint64_t count = kern_ld_u64(m->map + off);
    m->kv = fmt_kv_new();
    if (!m->kv)
        return bad(err, errlen, FMT_ENOMEM, m->path, "out of memory");
    rc = fmt_kv_parse(m->kv, m->map + off + 8, (size_t)(m->size - off - 8),
                      count, &used, m->path, err, errlen);
    if (rc)
        return rc;
    size_t alen;
    const char *arch = fmt_kv_get_str(m->kv, "general.architecture", &alen);
    if (arch) {
        if (alen >= sizeof m->hp.arch)
            alen = sizeof m->hp.arch - 1;
        memcpy(m->hp.arch, arch, alen);
        m->hp.arch[alen] = 0;
    }
    if (fmt_kv_get_u32(m->kv, "cflow.merge_interval", &m->hp.merge_interval))
        m->hp.merge_interval = 0;
    if (fmt_kv_get_u32(m->kv, "cflow.iterations", &m->hp.iterations))
        m->hp.iterations = 0;
    if (m->hp.combine_style == FMT_COMBINE_DECOUPLED &&
        (m->hp.merge_interval < 1 || m->hp.merge_interval > m->hp.n_layers))
        return bad(err, errlen, FMT_EFORMAT, m->path,
                   "DecoupledStreams needs cflow.merge_interval in 1..%u",
                   m->hp.n_layers);
    if (m->hp.combine_style == FMT_COMBINE_FIXED_POINT &&
        (m->hp.iterations < 1 || m->hp.iterations > 64))
        return bad(err, errlen, FMT_EFORMAT, m->path,
                   "FixedPoint needs cflow.iterations in 1..64");
    char why[200];
    if (fmt_hp_meta_load(m->kv, &m->hp, why, sizeof why))
        return bad(err, errlen, FMT_EFORMAT, m->path, "%s", why);
    if (m->hp.flags & FMT_FLAG_ROPE_LLAMA3) {
        if (fmt_kv_get_f32(m->kv, "cflow.rope.scaling.factor", &m->hp.rope_factor) ||
            fmt_kv_get_f32(m->kv, "cflow.rope.scaling.low_freq_factor",
                           &m->hp.rope_low_freq) ||
            fmt_kv_get_f32(m->kv, "cflow.rope.scaling.high_freq_factor",
                           &m->hp.rope_high_freq) ||
            fmt_kv_get_u32(m->kv, "cflow.rope.scaling.original_context_length",
                           &m->hp.rope_orig_ctx) ||
            !(m->hp.rope_factor > 0) || !(m->hp.rope_low_freq > 0) ||
            !(m->hp.rope_high_freq > m->hp.rope_low_freq) || !m->hp.rope_orig_ctx)
            return bad(err, errlen, FMT_EFORMAT, m->path,
                       "llama3 rope scaling flagged but its parameters are "
                       "missing or invalid");
    }
    return 0;
}

static int frange_cmp(const void *x, const void *y)
{
    const fmt_frange *a = x, *b = y;
    return a->off < b->off ? -1 : a->off > b->off;
}

/* The expert banks of the model at path, sorted and merged, from a first
 * open that maps the file (its tables are validated before they are used,
 * and the copy that follows is validated again: what the engine runs is
 * what was checked).  A model without experts has none: its header says
 * so, and the file is not walked twice. */
static int bank_ranges(const char *path, unsigned lazy, fmt_frange **out, unsigned *n,
                       char *err, size_t errlen)
{
    fmt_model *p;
    *out = NULL;
    *n = 0;
    int rc = fmt_model_open_ex(&p, path, FMT_OPEN_HEADER, err, errlen);
    if (rc)
        return rc;
    const unsigned n_experts = p->hp.n_experts;
    fmt_model_close(p);
    if (!n_experts)
        return 0;
    /* checked as the open that asks (lazy: FMT_OPEN_LAZY_EXPERTS or 0),
     * so that a refusal is the one that open would give */
    if ((rc = fmt_model_open_ex(&p, path, lazy, err, errlen)))
        return rc;
    fmt_frange *r = calloc(p->n_entries, sizeof *r);
    if (!r) {
        fmt_model_close(p);
        return bad(err, errlen, FMT_ENOMEM, path, "out of memory");
    }
    unsigned k = 0;
    for (unsigned i = 0; i < p->n_entries; i++)
        if (p->e[i].experts && p->e[i].len[FMT_S_EXP_GATE]) {
            r[k].off = p->e[i].off[FMT_S_EXP_GATE];
            r[k].end = r[k].off + p->e[i].len[FMT_S_EXP_GATE];
            k++;
        }
    fmt_model_close(p);
    qsort(r, k, sizeof *r, frange_cmp);
    unsigned w = 0;
    for (unsigned i = 0; i < k; i++) {
        if (w && r[i].off <= r[w - 1].end) {
            if (r[i].end > r[w - 1].end)
                r[w - 1].end = r[i].end;
        } else {
            r[w++] = r[i];
        }
    }
    *out = r;
    *n = w;
    return 0;
}

int fmt_model_open(fmt_model **out, const char *path, char *err, size_t errlen)
{
    return fmt_model_open_ex(out, path, 0, err, errlen);
}

int fmt_model_open_ex(fmt_model **out, const char *path, unsigned flags,
                      char *err, size_t errlen)
{
    fmt_model *m;
    int fd, rc = FMT_EIO;

    *out = NULL;
    m = calloc(1, sizeof *m);
    if (!m || !(m->path = strdup(path))) {
        free(m);
        return bad(err, errlen, FMT_ENOMEM, path, "out of memory");
    }
    m->lazy_experts = (flags & FMT_OPEN_LAZY_EXPERTS) != 0;
    if ((fd = fmt_open_regular(path, &m->size, err, errlen)) < 0) {
        rc = fd;
        goto fail;
    }
    if (m->size < FMT_HEADER_SIZE) {
        close(fd);
        rc = bad(err, errlen, FMT_EFORMAT, path,
                 "truncated: %llu bytes is smaller than the 88-byte header",
                 (unsigned long long)m->size);
        goto fail;
    }
    void *map;
    if (flags & FMT_OPEN_READ) {
        fmt_frange *keep = NULL;
        unsigned n_keep = 0;
        if ((flags & FMT_OPEN_MAP_EXPERTS) &&
            (rc = bank_ranges(path, flags & FMT_OPEN_LAZY_EXPERTS, &keep, &n_keep, err,
                                errlen))) {
            close(fd);
            goto fail;
        }
        map = fmt_read_whole(fd, m->size, keep, n_keep, !!(flags & FMT_OPEN_DROP_CACHE),
                             &m->copied, path, &rc, err, errlen);
        free(keep);
        close(fd);
        if (!map)
            goto fail;
    } else {
        map = mmap(NULL, (size_t)m->size, PROT_READ, MAP_PRIVATE, fd, 0);
        close(fd);
        if (map == MAP_FAILED) {
            rc = bad(err, errlen, FMT_EIO, path, "cannot map: %s", strerror(errno));
            goto fail;
        }
#ifdef MADV_HUGEPAGE
        madvise(map, (size_t)m->size, MADV_HUGEPAGE);
#endif
    }
    m->map = map;
    m->hdr = m->map;
    if (m->size >= 8 && !memcmp(m->map, FMT_VMAGIC, 8) &&
        (rc = read_vflow_header(m, err, errlen)))
        goto fail;
    if ((rc = read_header(m, err, errlen)))
        goto fail;
    if (flags & FMT_OPEN_HEADER) {
        *out = m;
        return 0;
    }
    if (m->vflow && m->vgroups_layers != m->hp.n_layers) {
        rc = bad(err, errlen, FMT_EFORMAT, path, "groups cover %u layers, the "
                 "model has %u", m->vgroups_layers, m->hp.n_layers);
        goto fail;
    }
    m->n_entries = m->hp.n_layers + 1;
    /* the metadata first: the families' fields shape the slots */
    if ((rc = read_meta(m, err, errlen)) || (rc = read_table(m, err, errlen)))
        goto fail;
    *out = m;
    return 0;
fail:
    fmt_model_close(m);
    return rc;
}

void fmt_model_close(fmt_model *m)
{
    if (!m)
        return;
    if (m->map)
        munmap((void *)m->map, (size_t)m->size);
    fmt_kv_free(m->kv);
    for (unsigned i = 0; m->e && i < m->n_entries; i++) {
        free(m->e[i].experts);
        free(m->e[i].exp_off);
        free(m->e[i].exp_len);
    }
    free(m->e);
    free(m->tiles);
    free(m->path);
    free(m);
}

const fmt_hparams *fmt_model_hparams(const fmt_model *m) { return &m->hp; }
const fmt_kv *fmt_model_kv(const fmt_model *m) { return m->kv; }
const char *fmt_model_path(const fmt_model *m) { return m->path; }
uint64_t fmt_model_file_size(const fmt_model *m) { return m->size; }
uint64_t fmt_model_copied_bytes(const fmt_model *m) { return m->copied; }
int fmt_model_is_vflow(const fmt_model *m, unsigned *vversion)
{
    if (vversion)
        *vversion = m->vflow ? kern_ld_u16(m->map + FMT_V_VERSION) : 0;
    return m->vflow;
}
const void *fmt_model_map(const fmt_model *m, uint64_t *size)
{
    if (size)
        *size = m->size;
    return m->map;
}

const fmt_stream *fmt_model_stream(const fmt_model *m, unsigned layer, int slot)
{
    if (layer >= m->n_entries || slot < 0 || slot >= FMT_NSLOT_ALL)
        return NULL;
    const fmt_stream *s = &m->e[layer].stream[slot];
    return s->tiles ? s : NULL;
}

const fmt_matinfo *fmt_model_matinfo(const fmt_model *m, unsigned layer,
                                     int slot)
{
    if (layer >= m->n_entries || slot < 0 || slot >= FMT_NSLOT_ALL ||
        !m->e[layer].mat[slot].present)
        return NULL;
    return &m->e[layer].mat[slot];
}

const float *fmt_model_vec(const fmt_model *m, unsigned layer, int slot,
                           uint64_t *n)
{
    if (layer >= m->n_entries || slot < 0 || slot >= FMT_NSLOT_ALL ||
        (m->e[layer].kind[slot] != FMT_K_VEC && m->e[layer].kind[slot] != FMT_K_F32MAT))
        return NULL;
    if (n)
        *n = m->e[layer].rows[slot];
    /* read_table checked the range and the 4-byte alignment */
    return (const float *)(const void *)(m->map + m->e[layer].off[slot]);
}

const fmt_layer_geom *fmt_model_layer_geom(const fmt_model *m, unsigned layer)
{
    if (layer >= m->n_entries)
        return NULL;
    return &m->e[layer].geom;
}

int fmt_model_experts_unchecked(const fmt_model *m) { return m->lazy_experts; }

void fmt_model_experts_checked(fmt_model *m) { m->lazy_experts = 0; }

int fmt_model_expert(const fmt_model *m, unsigned layer, unsigned e,
                     const fmt_stream **gate_up, const fmt_stream **down,
                     uint64_t *offset, uint64_t *length)
{
    if (layer >= m->hp.n_layers || e >= m->hp.n_experts || !m->e[layer].experts)
        return FMT_EARG;
    const fmt_entry *en = &m->e[layer];
    if (gate_up)
        *gate_up = &en->experts[2 * e];
    if (down)
        *down = &en->experts[2 * e + 1];
    if (offset)
        *offset = en->exp_off[e];
    if (length)
        *length = en->exp_len[e];
    return 0;
}
