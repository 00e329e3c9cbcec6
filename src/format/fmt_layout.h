/*
 * fmt_layout.h — byte offsets of the .cflow v5 structures (private to
 * src/format; cflow(5) is the user-facing copy of this table).
 *
 * Structures are read and written field by field through the little-endian
 * helpers below instead of packed structs: the mapping may be unaligned and
 * the host's struct layout is not the file's.
 *
 * GlobalHeader, 88 bytes at offset 0:
 *    0  u8[8] magic "CFLOW\0\0\0"     48 u8  quant_type (dominant tile type)
 *    8  u16 version (5)                49 u8  feature_flags2
 *   10  u16 header_size (88)           50 u16 tile_rows (128)
 *   12  u32 n_layers                   52 u16 tile_cols (256)
 *   16  u32 dim                        54 u16 quant_group (32)
 *   20  u32 ffn_dim (dense FFN)        56 f32 rope_theta
 *   24  u32 expert_ffn_dim             60 f32 norm_eps
 *   28  u32 vocab_size                 64 u64 layer_table_offset
 *   32  u32 max_seq                    72 u64 meta_offset
 *   36  u16 n_heads                    80 u8  dense_delay
 *   38  u16 n_kv_heads                 81 u8  expert_delay
 *   40  u16 head_dim                   82 u8  combine_style
 *   42  u16 n_experts                  83 u8  feature_flags
 *   44  u16 top_k                      84 f32 final_logit_softcap
 *   46  u16 sliding_window (0 = none)
 *
 * feature_flags (83): bit 0 embed_scale, 1 v_norm, 2 tied, 3 rope_neox,
 * 4 gelu, 5 qkv_bias, 6 rope_llama3, 7 qk_norm (slots 16/17 hold per-head
 * RMSNorm weights of Q and K, applied before RoPE).  feature_flags2 (49,
 * zero in files without these features): bit 0 moe_no_renorm (routing
 * weights are the all-expert softmax, not renormalised over the top k),
 * bit 1 layer_geom (slot 18 of every layer holds a LayerGeometry record),
 * bit 2 xslots (slot 19 of every entry, layers and globals, holds the table
 * of its slots 20-35: FMT_NXSLOT slots of the same encoding, the families'
 * tensors, fmt_family.c).  Unknown bits in either byte are refused.
 *
 * Layer table: (n_layers + 1) entries of FMT_NSLOT slots, 32 bytes each:
 *    0 u64 offset    8 u64 length    16 u32 rows    20 u32 cols
 *   24 u8 kind      25 u8 type      26 u8 group    27 u8 reserved
 *   28 u32 n_tiles
 * kind: 0 empty, 1 f32 vector (rows elements), 2 tiled matrix, 3 f32
 * matrix (router, rows x cols), 4 expert offset table (rows experts),
 * 5 layer geometry record (rows 1, cols 32, 32 bytes), 6 the table of
 * slots 20-35 (rows 16, cols 32: 512 bytes).
 * Layer slots: 0 attn_norm, 1-3 q/k/v, 4 o, 5 ffn_norm, 6-8 gate/up/down,
 * 9 router, 10 expert table, 11-13 expert gate/up/down (the bank), 14 QKV
 * bias, 15 moe_norm, 16 q_norm, 17 k_norm, 18 layer geometry, 19 the
 * table of 20-35 (xslots; else empty): 20 attn_post_norm, 21 ffn_post_norm,
 * 22 attn_sinks [n_heads], 23 o_bias, 24 router_bias [n_experts], 25 the
 * experts' gate and up biases (f32 [n_experts][2 expert_ffn]), 26 their
 * down biases ([n_experts][dim]), 27-29 the shared experts' gate/up (one
 * stream) and down streams, 30 kv_a_norm [mla_rank] and 31-32 k_b, v_b
 * (MLA: [n_heads mla_rank][mla_nope] and [n_heads mla_v][mla_rank], one
 * stream each; with MLA the QKV stream holds Q and K, the latent and the
 * rotated key, and slot 3 is empty), 33-35 reserved.  Globals: 0 token_embd,
 * 1 output_norm, 2 output, 19 the table, 20 rope_short, 21 rope_long
 * ([rope_dims / 2] each).  The xslot tables follow the layer table in the
 * file, entry after entry.
 *
 * LayerGeometry, 32 bytes (with layer_geom; the layer's attention geometry
 * replaces the header's for that layer):
 *    0 u16 n_heads     2 u16 n_kv_heads   4 u16 head_dim   6 u16 rope_dims
 *    8 f32 rope_theta 12 u32 sliding_window (0 = full attention)
 *   16 u32 flags: bit 0 kv_shared (no V slot; V is K's projection before
 *      its norm and RoPE), bit 1 no_experts (router/table/bank slots empty)
 *   20 f32 rope_scale: the RoPE frequency scale, 1 / a linear factor
 *      (Gemma 3's full layers); 0 means 1
 *   24 u8[8] reserved (0)
 * rope_dims: the leading dimensions of each head that rotate (even, at most
 * head_dim); the rest pass through (partial RoPE).
 * Tiled matrices that share a stream (Q/K/V, gate/up) carry the stream's
 * offset and length in each slot and the same group number.
 *
 * .vflow (stage-major, report 3.4): a 64-byte VFlowHeader, then the
 * 88-byte GlobalHeader above (its offsets are offsets in the .vflow file),
 * then the same layer table, the group table, the sequential streaming
 * region (per group: the attention sections of all its layers, then their
 * dense FFN sections; then the vocabulary tiles), the expert bank (every
 * layer's MoE sections) and the metadata.  Because the layer table points
 * at every section, a reader builds the same model from either file.
 *    0 u8[8] magic "VFLOW\0\0\0"   32 u64 stream_offset
 *    8 u16 version (1)              40 u64 stream_length
 *   10 u16 header_size (64)         48 u64 bank_offset
 *   12 u32 n_groups                 56 u64 bank_length
 *   16 u64 group_table_offset
 *   24 u64 global_header_offset
 * GroupDescriptor, 40 bytes: u32 first_layer, u32 n_layers, u64
 * attn_offset, u64 attn_length, u64 dense_offset, u64 dense_length.
 *
 * TileHeader, 16 bytes:
 *    0 u16 layer_id   2 u8 matrix_id   3 u8 expert_id (0xFF dense)
 *    4 u32 row_offset 8 u16 col_offset 10 u16 tile_rows 12 u16 tile_cols
 *   14 u16 quant_group (32)
 *
 * "The report" (with its section numbers) is the Pipeline-Native
 * Transformers report.
 */
#ifndef CFLOW_FMT_LAYOUT_H
#define CFLOW_FMT_LAYOUT_H

#include <stdint.h>
#include <string.h>

enum {
    FMT_H_MAGIC = 0, FMT_H_VERSION = 8, FMT_H_HSIZE = 10, FMT_H_NLAYERS = 12,
    FMT_H_DIM = 16, FMT_H_FFN = 20, FMT_H_EFFN = 24, FMT_H_VOCAB = 28,
    FMT_H_MAXSEQ = 32, FMT_H_NHEADS = 36, FMT_H_NKV = 38, FMT_H_HEADDIM = 40,
    FMT_H_NEXP = 42, FMT_H_TOPK = 44, FMT_H_SWA = 46, FMT_H_QTYPE = 48,
    FMT_H_FLAGS2 = 49, FMT_H_TROWS = 50, FMT_H_TCOLS = 52, FMT_H_QGROUP = 54,
    FMT_H_THETA = 56, FMT_H_EPS = 60, FMT_H_LTABLE = 64, FMT_H_META = 72,
    FMT_H_DDELAY = 80, FMT_H_EDELAY = 81, FMT_H_COMBINE = 82,
    FMT_H_FLAGS = 83, FMT_H_SOFTCAP = 84
};

enum {
    FMT_SL_OFFSET = 0, FMT_SL_LENGTH = 8, FMT_SL_ROWS = 16, FMT_SL_COLS = 20,
    FMT_SL_KIND = 24, FMT_SL_TYPE = 25, FMT_SL_GROUP = 26, FMT_SL_NTILES = 28
};

enum {
    FMT_K_EMPTY = 0, FMT_K_VEC = 1, FMT_K_TILED = 2, FMT_K_F32MAT = 3,
    FMT_K_EXPTABLE = 4, FMT_K_LGEOM = 5, FMT_K_XSLOTS = 6
};

enum {
    FMT_LG_NHEADS = 0, FMT_LG_NKV = 2, FMT_LG_HEADDIM = 4, FMT_LG_ROPEDIMS = 6,
    FMT_LG_THETA = 8, FMT_LG_SWA = 12, FMT_LG_FLAGS = 16, FMT_LG_RSCALE = 20,
    FMT_LG_RESERVED = 24
};
#define FMT_LGEOM_SIZE 32

enum {
    FMT_T_LAYER = 0, FMT_T_MATRIX = 2, FMT_T_EXPERT = 3, FMT_T_ROW = 4,
    FMT_T_COL = 8, FMT_T_ROWS = 10, FMT_T_COLS = 12, FMT_T_QGROUP = 14
};

enum {
    FMT_V_MAGIC = 0, FMT_V_VERSION = 8, FMT_V_HSIZE = 10, FMT_V_NGROUPS = 12,
    FMT_V_GTABLE = 16, FMT_V_GHEADER = 24, FMT_V_STREAM = 32, FMT_V_STREAMLEN = 40,
    FMT_V_BANK = 48, FMT_V_BANKLEN = 56
};
#define FMT_VGROUP_SIZE 40

/* Feature-flag bits this version defines (others must be zero): the
 * feature_flags byte and the feature_flags2 byte (hparams bits 8..15). */
#define FMT_FLAGS_KNOWN 0xFFu
#define FMT_FLAGS2_KNOWN 0x07u

/* Little-endian stores of the fields above; the readers load them with
 * kern_ld_u16/u32/u64/f32 (kernels/kern.h). */
static inline void fmt_wr16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void fmt_wr32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}
static inline void fmt_wr64(uint8_t *p, uint64_t v)
{
    fmt_wr32(p, (uint32_t)v);
    fmt_wr32(p + 4, (uint32_t)(v >> 32));
}
static inline void fmt_wrf32(uint8_t *p, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    fmt_wr32(p, u);
}


#endif /* CFLOW_FMT_LAYOUT_H */
