/*
 * fmt_plan.c — the canonical order of tiles in a .cflow stream.
 *
 * Writer and reader share this one walk, so the file's order is defined in
 * exactly one place: for output stripe s = 0, 1, ... (128 rows each), for
 * each matrix of the fused group that still has rows at s (Q then K then V,
 * or gate then up), its column tiles j = 0, 1, ... (256 columns each).
 * The reader checks every tile header against this walk, which proves that
 * the tiles cover each matrix exactly once.
 */
#include "config.h"

#include "format/fmt_plan.h"

static uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

long fmt_plan_walk(const fmt_plan_mat *m, unsigned n, fmt_plan_fn fn,
                   void *ud)
{
    uint32_t stripes = 0;
    long count = 0;
    for (unsigned i = 0; i < n; i++) {
        uint32_t s = ceil_div(m[i].rows, KERN_TILE_ROWS);
        if (s > stripes)
            stripes = s;
    }
    for (uint32_t s = 0; s < stripes; s++) {
        for (unsigned i = 0; i < n; i++) {
            uint32_t row0 = s * KERN_TILE_ROWS;
            if (row0 >= m[i].rows)
                continue;
            unsigned rows = m[i].rows - row0 < KERN_TILE_ROWS
                                ? (unsigned)(m[i].rows - row0)
                                : KERN_TILE_ROWS;
            for (uint32_t col0 = 0; col0 < m[i].cols;
                 col0 += KERN_TILE_COLS) {
                unsigned cols = m[i].cols - col0 < KERN_TILE_COLS
                                    ? (unsigned)(m[i].cols - col0)
                                    : KERN_TILE_COLS;
                if (fn && fn(ud, i, row0, col0, rows, cols))
                    return -1;
                count++;
            }
        }
    }
    return count;
}

static int add_size(void *ud, unsigned mi, uint32_t row0, uint32_t col0,
                    unsigned rows, unsigned cols)
{
    struct { const fmt_plan_mat *m; uint64_t bytes; } *acc = ud;
    (void)row0;
    (void)col0;
    acc->bytes += FMT_TILE_HEADER_SIZE +
                  kern_tile_payload_size((enum kern_type)acc->m[mi].type,
                                         rows, cols);
    return 0;
}

uint64_t fmt_plan_bytes(const fmt_plan_mat *m, unsigned n)
{
    struct { const fmt_plan_mat *m; uint64_t bytes; } acc = { m, 0 };
    fmt_plan_walk(m, n, add_size, &acc);
    return acc.bytes;
}

uint32_t fmt_plan_tiles(uint32_t rows, uint32_t cols)
{
    return ceil_div(rows, KERN_TILE_ROWS) * ceil_div(cols, KERN_TILE_COLS);
}

const fmt_group fmt_layer_groups[FMT_LAYER_GROUPS] = {
    { FMT_S_Q, 3, { FMT_S_Q, FMT_S_K, FMT_S_V }, { FMT_M_Q, FMT_M_K, FMT_M_V } },
    { FMT_S_O, 1, { FMT_S_O }, { FMT_M_O } },
    { FMT_S_GATE, 2, { FMT_S_GATE, FMT_S_UP }, { FMT_M_GATE, FMT_M_UP } },
    { FMT_S_DOWN, 1, { FMT_S_DOWN }, { FMT_M_DOWN } },
    { FMT_S_SH_GATE, 2, { FMT_S_SH_GATE, FMT_S_SH_UP }, { FMT_M_SH_GATE, FMT_M_SH_UP } },
    { FMT_S_SH_DOWN, 1, { FMT_S_SH_DOWN }, { FMT_M_SH_DOWN } },
    { FMT_S_K_B, 1, { FMT_S_K_B }, { FMT_M_K_B } },
    { FMT_S_V_B, 1, { FMT_S_V_B }, { FMT_M_V_B } },
    { FMT_S_Q_B, 1, { FMT_S_Q_B }, { FMT_M_Q_B } },
};

const fmt_group fmt_global_groups[FMT_GLOBAL_GROUPS] = {
    { FMT_S_TOK_EMBD, 1, { FMT_S_TOK_EMBD }, { FMT_M_TOK_EMBD } },
    { FMT_S_OUTPUT, 1, { FMT_S_OUTPUT }, { FMT_M_OUTPUT } },
};
