/*
 * fmt_plan.h — private to src/format: the canonical tile walk of a stream
 * (see fmt_plan.c) and the stream groups of a layer.
 */
#ifndef CFLOW_FMT_PLAN_H
#define CFLOW_FMT_PLAN_H

#include <stdint.h>

#include "format/cflow_format.h"

typedef struct fmt_plan_mat {
    uint32_t rows, cols;   /* the whole matrix */
    uint8_t  matrix;       /* enum fmt_matrix */
    uint8_t  type;         /* enum kern_type */
} fmt_plan_mat;

/* fn is called once per tile in file order (mi indexes m); a non-zero
 * return stops the walk (the walk then returns -1).  Returns the count. */
typedef int (*fmt_plan_fn)(void *ud, unsigned mi, uint32_t row0,
                           uint32_t col0, unsigned rows, unsigned cols);
long     fmt_plan_walk(const fmt_plan_mat *m, unsigned n, fmt_plan_fn fn,
                       void *ud);
uint64_t fmt_plan_bytes(const fmt_plan_mat *m, unsigned n);
uint32_t fmt_plan_tiles(uint32_t rows, uint32_t cols);

#define FMT_MAX_FUSED 3
/* The streams of a layer entry, by their first slot. */
typedef struct fmt_group {
    int      first_slot;           /* slot that names the stream */
    unsigned n;                    /* matrices in the stream */
    int      slots[FMT_MAX_FUSED];
    uint8_t  matrix[FMT_MAX_FUSED];
} fmt_group;

/* The streams of a decoder layer (QKV, O, gate/up, down, the shared
 * experts' gate/up and down, MLA's k_b, v_b and q_b) and the two of the globals entry (embedding,
 * output head). */
#define FMT_LAYER_GROUPS 9
#define FMT_GLOBAL_GROUPS 2
extern const fmt_group fmt_layer_groups[FMT_LAYER_GROUPS];
extern const fmt_group fmt_global_groups[FMT_GLOBAL_GROUPS];

#endif
