/*
 * testutil_tiles.c — a converted matrix read back as GGML rows: the blocks
 * its tiles keep (kern_tile_blocks), row after row in the order GGML
 * stores them, so a test can set them against a GGUF's tensor bytes or a
 * recorded hash of them.  FNV-1a 64 for those hashes.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "format/cflow_format.h"
#include "testutil.h"

uint64_t tu_fnv64(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

int tu_matrix_rows(const fmt_stream *st, int matrix, uint32_t rows, uint32_t cols,
                   tu_row_fn fn, void *ctx)
{
    const fmt_tile *strip[256];      /* a stripe's tiles, by column: 65536 / 256 */
    unsigned bb = 0, blk = 0;
    int rc = -1;
    if (!st || st->n_tiles == 0)
        return -1;
    for (uint32_t i = 0; i < st->n_tiles; i++)
        if (st->tiles[i].matrix == matrix) {
            blk = kern_type_block((enum kern_type)st->tiles[i].type);
            kern_src_block(kern_type_src((enum kern_type)st->tiles[i].type), &bb);
            break;
        }
    if (!blk || cols % blk)
        return -1;
    size_t row_bytes = (size_t)cols / blk * bb;
    uint8_t *row = malloc(row_bytes + 1);
    if (!row)
        return -1;
    for (uint32_t r0 = 0; r0 < rows; r0 += KERN_TILE_ROWS) {
        unsigned n = 0;
        for (uint32_t i = 0; i < st->n_tiles; i++)
            if (st->tiles[i].matrix == matrix && st->tiles[i].row0 == r0 &&
                n < sizeof strip / sizeof *strip)
                strip[n++] = &st->tiles[i];
        for (uint32_t r = r0; r < rows && r < r0 + KERN_TILE_ROWS; r++) {
            size_t at = 0;
            for (unsigned j = 0; j < n; j++) {
                const fmt_tile *ti = strip[j];
                size_t nb = (size_t)ti->cols / blk * bb;
                if (ti->col0 != at / bb * blk || at + nb > row_bytes ||
                    kern_tile_blocks((enum kern_type)ti->type, ti->rows, ti->cols,
                                     ti->payload, r - r0, row + at))
                    goto out;
                at += nb;
            }
            if (at != row_bytes)
                goto out;
            fn(ctx, r, row, row_bytes);
        }
    }
    rc = 0;
out:
    free(row);
    return rc;
}
