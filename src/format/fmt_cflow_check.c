/*
 * fmt_cflow_check.c — a lazily opened model's experts checked when they
 * are read (each tile by fmt_tile_check.c).
 *
 * The open checks every tile it maps (fmt_cflow_read.c).  An
 * engine that reads the experts from the file itself (O_DIRECT into a RAM
 * cache) opens with FMT_OPEN_LAZY_EXPERTS instead: the expert banks'
 * tiles are laid out from the geometry without being read, so the open
 * reads only the dense weights (about 1.6 of a 32.5 GB Qwen3-30B-A3B at
 * Q8_0) and the first token is not held up by a read of the whole bank.
 * Each expert is then checked here, from the bytes the engine read
 * (fmt_model_expert_check), before its first use; or all of them at once
 * through the map (fmt_model_check_experts) for an engine that switches
 * to reading them in place.  A refused tile is the same one-line error
 * either way, naming the file and the tile's offset.
 */
#include "config.h"

#include <stdio.h>

#include "format/cflow_format.h"
#include "format/fmt_impl.h"
#include "format/fmt_layout.h"

int fmt_model_expert_check(const fmt_model *m, unsigned layer, unsigned e,
                           const uint8_t *data, char *err, size_t errlen)
{
    const fmt_stream *st[2];
    uint64_t off = 0, size = 0;
    if (fmt_model_expert(m, layer, e, &st[0], &st[1], &off, NULL))
        return fmt_bad(err, errlen, FMT_EARG, fmt_model_path(m), "no expert %u in layer %u",
                       e, layer);
    const uint8_t *map = fmt_model_map(m, &size);
    for (int g = 0; g < 2; g++)
        for (uint32_t i = 0; i < st[g]->n_tiles; i++) {
            const fmt_tile *t = &st[g]->tiles[i];
            /* the header sits just before the payload the layout gave */
            uint64_t foff = (uint64_t)((const uint8_t *)t->payload - map) - FMT_TILE_HEADER_SIZE;
            int rc = fmt_tile_check(fmt_model_path(m), layer, t, data + (foff - off), foff, err,
                                    errlen);
            if (rc)
                return rc;
        }
    return 0;
}

int fmt_model_check_experts(fmt_model *m, char *err, size_t errlen)
{
    const fmt_hparams *hp = fmt_model_hparams(m);
    uint64_t size = 0;
    const uint8_t *map = fmt_model_map(m, &size);
    if (!fmt_model_experts_unchecked(m))
        return 0;
    for (unsigned l = 0; l < hp->n_layers; l++)
        for (unsigned e = 0; e < hp->n_experts; e++) {
            uint64_t off = 0;
            if (fmt_model_expert(m, l, e, NULL, NULL, &off, NULL))
                continue;                /* a layer without experts */
            int rc = fmt_model_expert_check(m, l, e, map + off, err, errlen);
            if (rc)
                return rc;
        }
    fmt_model_experts_checked(m);
    return 0;
}
