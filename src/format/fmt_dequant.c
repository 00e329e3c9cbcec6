/*
 * fmt_dequant.c — GGML tensor types: every type a GGUF may hold, by GGML's
 * number, with its name, block and bytes; the tile type that keeps its
 * blocks; and dequantisation through the kernels.
 *
 * GGML stores a quantised row as a run of blocks; a block holds a fixed
 * number of weights (32 for the legacy types and MXFP4, 256 for the
 * K-quants and most IQ types) in fixed bytes.  The GGUF reader knows them
 * all, so that a file is never refused for a type before anyone asks for
 * the tensor; a tensor of a type cflow has no tile type for (the IQ1/2/3
 * types, TQ, NVFP4, Q1_0, Q2_0, the integer and f64 types) is refused when
 * a role binds it, by name and type (fmt_src.c).
 *
 * The blocks themselves (ggml-common.h's structs, their layouts in
 * cflow(5)) are the kernels' business: kern_type_ops holds each type's
 * dequantiser, reference quantiser and check, and kern_src_dequant /
 * kern_src_quant / kern_src_check apply them to rows.  There is one
 * dequantiser per type in cflow, the kernels', so the weights a converter
 * widens and the weights a tile decodes to are the same floats, and both
 * are what ggml's dequantize_row_* computes.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "format/cflow_format.h"
#include "format/fmt_impl.h"

#define NO_SRC (-1)

/* GGML's type table (ggml.c's type_traits: name, blck_size, type_size);
 * src: the kernels' encoding of the type's rows, NO_SRC when cflow cannot
 * read them. */
static const struct dtype_info {
    const char *name;
    unsigned    blk, bytes;
    int         src;
} dtypes[] = {
    [FMT_DT_F32]     = { "F32",     1,   4,   KERN_SRC_F32 },
    [FMT_DT_F16]     = { "F16",     1,   2,   KERN_SRC_F16 },
    [FMT_DT_Q4_0]    = { "Q4_0",    32,  18,  KERN_SRC_GGML_Q4_0 },
    [FMT_DT_Q4_1]    = { "Q4_1",    32,  20,  KERN_SRC_GGML_Q4_1 },
    [FMT_DT_Q5_0]    = { "Q5_0",    32,  22,  KERN_SRC_GGML_Q5_0 },
    [FMT_DT_Q5_1]    = { "Q5_1",    32,  24,  KERN_SRC_GGML_Q5_1 },
    [FMT_DT_Q8_0]    = { "Q8_0",    32,  34,  KERN_SRC_GGML_Q8_0 },
    [FMT_DT_Q8_1]    = { "Q8_1",    32,  36,  NO_SRC },
    [FMT_DT_Q2_K]    = { "Q2_K",    256, 84,  KERN_SRC_GGML_Q2_K },
    [FMT_DT_Q3_K]    = { "Q3_K",    256, 110, KERN_SRC_GGML_Q3_K },
    [FMT_DT_Q4_K]    = { "Q4_K",    256, 144, KERN_SRC_GGML_Q4_K },
    [FMT_DT_Q5_K]    = { "Q5_K",    256, 176, KERN_SRC_GGML_Q5_K },
    [FMT_DT_Q6_K]    = { "Q6_K",    256, 210, KERN_SRC_GGML_Q6_K },
    [FMT_DT_Q8_K]    = { "Q8_K",    256, 292, NO_SRC },
    [FMT_DT_IQ2_XXS] = { "IQ2_XXS", 256, 66,  NO_SRC },
    [FMT_DT_IQ2_XS]  = { "IQ2_XS",  256, 74,  NO_SRC },
    [FMT_DT_IQ3_XXS] = { "IQ3_XXS", 256, 98,  NO_SRC },
    [FMT_DT_IQ1_S]   = { "IQ1_S",   256, 50,  NO_SRC },
    [FMT_DT_IQ4_NL]  = { "IQ4_NL",  32,  18,  KERN_SRC_GGML_IQ4_NL },
    [FMT_DT_IQ3_S]   = { "IQ3_S",   256, 110, NO_SRC },
    [FMT_DT_IQ2_S]   = { "IQ2_S",   256, 82,  NO_SRC },
    [FMT_DT_IQ4_XS]  = { "IQ4_XS",  256, 136, KERN_SRC_GGML_IQ4_XS },
    [FMT_DT_I8]      = { "I8",      1,   1,   NO_SRC },
    [FMT_DT_I16]     = { "I16",     1,   2,   NO_SRC },
    [FMT_DT_I32]     = { "I32",     1,   4,   NO_SRC },
    [FMT_DT_I64]     = { "I64",     1,   8,   NO_SRC },
    [FMT_DT_F64]     = { "F64",     1,   8,   NO_SRC },
    [FMT_DT_IQ1_M]   = { "IQ1_M",   256, 56,  NO_SRC },
    [FMT_DT_BF16]    = { "BF16",    1,   2,   KERN_SRC_BF16 },
    [FMT_DT_TQ1_0]   = { "TQ1_0",   256, 54,  NO_SRC },
    [FMT_DT_TQ2_0]   = { "TQ2_0",   256, 66,  NO_SRC },
    [FMT_DT_MXFP4]   = { "MXFP4",   32,  17,  KERN_SRC_GGML_MXFP4 },
    [FMT_DT_NVFP4]   = { "NVFP4",   64,  36,  NO_SRC },
    [FMT_DT_Q1_0]    = { "Q1_0",    128, 18,  NO_SRC },
    [FMT_DT_Q2_0]    = { "Q2_0",    64,  18,  NO_SRC },
};
#define N_DTYPES ((int)(sizeof dtypes / sizeof *dtypes))

static const struct dtype_info *info(int dtype)
{
    return dtype >= 0 && dtype < N_DTYPES && dtypes[dtype].name ? &dtypes[dtype] : NULL;
}

unsigned fmt_dtype_block(int dtype)
{
    const struct dtype_info *d = info(dtype);
    return d ? d->blk : 0;
}

unsigned fmt_dtype_block_bytes(int dtype)
{
    const struct dtype_info *d = info(dtype);
    return d ? d->bytes : 0;
}

const char *fmt_dtype_name(int dtype)
{
    const struct dtype_info *d = info(dtype);
    return d ? d->name : "unknown";
}

int fmt_dtype_from_tile(int type)
{
    if (type < 0 || type >= KERN_NTYPES)
        return -1;
    int src = (int)kern_type_src((enum kern_type)type);
    for (int i = 0; i < N_DTYPES; i++)
        if (dtypes[i].name && dtypes[i].src == src)
            return i;
    return -1;
}

int fmt_dtype_src(int dtype)
{
    const struct dtype_info *d = info(dtype);
    return d ? d->src : NO_SRC;
}

int fmt_dtype_tile(int dtype)
{
    const struct dtype_info *d = info(dtype);
    for (int t = 0; d && d->src != NO_SRC && t < KERN_NTYPES; t++)
        if ((int)kern_type_src((enum kern_type)t) == d->src)
            return fmt_tile_built(t) ? t : -1;
    return -1;
}

int fmt_tile_built(int type)
{
    return type >= 0 && type < KERN_NTYPES &&
           kern_tile_payload_size((enum kern_type)type, KERN_PANEL,
                                  kern_type_block((enum kern_type)type)) > 0;
}

const char *fmt_tile_types_built(char *buf, size_t n)
{
    size_t len = 0;
    if (n)
        buf[0] = '\0';
    for (int t = 0; t < KERN_NTYPES && len < n; t++)
        if (fmt_tile_built(t)) {
            int k = snprintf(buf + len, n - len, "%s%s", len ? ", " : "",
                             kern_type_name((enum kern_type)t));
            len += k > 0 ? (size_t)k : 0;
        }
    return buf;
}

uint64_t fmt_dtype_size(int dtype, uint64_t n)
{
    unsigned blk = fmt_dtype_block(dtype), bb = fmt_dtype_block_bytes(dtype);
    if (blk == 0 || n % blk != 0 || n / blk > UINT64_MAX / bb)
        return 0;
    return n / blk * bb;
}

int fmt_dequant(int dtype, const void *src, float *dst, uint64_t n)
{
    const uint8_t *x = src;
    unsigned blk = fmt_dtype_block(dtype);
    int s = fmt_dtype_src(dtype);
    if (blk == 0 || n % blk != 0 || s == NO_SRC)
        return -1;
    /* rows of at most 2^20 values at a time (kern_src_dequant's n is a
     * row's; norms and routers are a few thousand) */
    const uint64_t step = (uint64_t)1 << 20;
    for (uint64_t i = 0; i < n; i += step) {
        uint64_t k = n - i < step ? n - i : step;
        if (kern_src_dequant((enum kern_src)s, x + fmt_dtype_size(dtype, i), (size_t)k,
                             dst + i))
            return -1;
    }
    return 0;
}
