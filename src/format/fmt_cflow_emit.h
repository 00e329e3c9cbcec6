/*
 * fmt_cflow_emit.h — private to the .cflow writer: the writer's state and
 * the primitives fmt_cflow_emit.c gives fmt_cflow_write.c, which lays the
 * file out with them (never included elsewhere).
 */
#ifndef CFLOW_FMT_CFLOW_EMIT_H
#define CFLOW_FMT_CFLOW_EMIT_H

#include <stdio.h>

#include "format/cflow_format.h"
#include "format/fmt_impl.h"
#include "format/fmt_plan.h"

typedef struct fmt_cw {
    FILE                   *f;          /* the output (fmt_out's) */
    const fmt_src          *src;        /* the model being read */
    fmt_conv_src            in;         /* its pages, loaded and released */
    const char             *path;       /* final name, for messages */
    const char             *in_path;    /* the source's, for what is wrong in it */
    uint64_t                pos;        /* bytes written so far */
    const fmt_convert_opts *opts;
    char                   *err;
    size_t                  errlen;
    uint8_t                *payload;    /* one tile's payload scratch */
    fmt_tsrc                ts[FMT_MAX_FUSED]; /* each fused matrix's rows */
    fmt_mix_in              mix;        /* the model as llama.cpp's mix sees it */
    int                     expert;     /* expert id of the tiles, -1 dense */
    uint64_t                done, total; /* source bytes tiled so far, of all */
    uint64_t                next_tick;  /* done that moves the bar next */
} fmt_cw;
/* A slot's record as the layer table holds it (fmt_layout.h). */
typedef struct fmt_cw_slot {
    uint64_t offset, length;
    uint32_t rows, cols, n_tiles;
    uint8_t  kind, type, group;
} fmt_cw_slot;
/* An error of the output file (creating, writing it), and one in what the
 * source holds, named by the source's path: code, with the line in w->err. */
int  fmt_cw_fail(fmt_cw *w, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int  fmt_cw_fail_src(fmt_cw *w, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A line to the options' log (level 0: a matrix's type). */
void fmt_cw_log(fmt_cw *w, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Source bytes [p, p + n) of tensor t made readable (0 or FMT_EFORMAT);
 * consumed: their pages go back, the progress bar moves. */
int  fmt_cw_load(fmt_cw *w, const fmt_tensor *t, const void *p, uint64_t n);
void fmt_cw_consumed(fmt_cw *w, const void *p, uint64_t n);
/* n bytes out (0 or FMT_EIO); zeros up to a multiple of align. */
int  fmt_cw_put(fmt_cw *w, const void *p, size_t n);
int  fmt_cw_pad(fmt_cw *w, uint64_t align);
/* Whether layer l has a V projection of its own (not K = V sharing). */
int  fmt_cw_has_v(const fmt_src *src, unsigned l);
/* An f32 vector of the n source tensors' values one after the other into
 * slot sl (checked finite). */
int  fmt_cw_vec(fmt_cw *w, const fmt_tensor *const *parts, unsigned n, fmt_cw_slot *sl);
/* Group g's (possibly fused) tile stream of layer `layer` from src[], its
 * slots filled (group number group_no). */
int  fmt_cw_stream(fmt_cw *w, const fmt_group *g, const fmt_tensor **src,
                   unsigned layer, uint8_t group_no, fmt_cw_slot *slots);
/* s as the layer table's FMT_SLOT_SIZE bytes at p. */
void fmt_cw_slot_store(uint8_t *p, const fmt_cw_slot *s);
/* The tensor of role in layer, or NULL with *rc set (once) to the error
 * that names it missing. */
const fmt_tensor *fmt_cw_need(fmt_cw *w, const fmt_src *src, int role, unsigned layer,
                              int *rc);

#endif /* CFLOW_FMT_CFLOW_EMIT_H */
