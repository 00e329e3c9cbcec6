/*
 * fmt_hparams.c — rules on a model's hyper-parameters (fmt_hparams) that
 * every reader and writer of this module shares: the names of the combine
 * styles and the pipeline fields' consistency.  It sits below them all
 * (the .cflow reader, the source toolkit fmt_src.c and the converters), so
 * each imports the rules downwards and none holds them for the others.
 */
#include "config.h"

#include <stdio.h>

#include "format/cflow_format.h"
#include "format/fmt_impl.h"

const char *fmt_combine_name(int c)
{
    static const char *const n[FMT_NCOMBINE] = {
        "ParallelSqrt2", "DelayedSum", "AsyncExperts", "DecoupledStreams",
        "PipelineRegisters", "FixedPoint"
    };
    return c >= 0 && c < FMT_NCOMBINE ? n[c] : "unknown";
}

/* The pipeline fields' rules, shared by the .cflow reader and every
 * converter's source check (fmt_src_check_hparams), so a converter never
 * writes a header the reader refuses (fuzz regression
 * hf/convert-delays-on-parallel-sqrt2.a). */
int fmt_pipeline_check(const fmt_hparams *hp, char *why, size_t whylen)
{
    if (hp->combine_style >= FMT_NCOMBINE)
        snprintf(why, whylen, "unknown combine style %u", hp->combine_style);
    else if (hp->combine_style != FMT_COMBINE_DELAYED_SUM &&
             hp->combine_style != FMT_COMBINE_ASYNC_EXPERTS &&
             (hp->dense_delay != 0 || hp->expert_delay != 0))
        snprintf(why, whylen, "combine style %s takes no delays (dense %u, expert %u)",
                 fmt_combine_name(hp->combine_style), hp->dense_delay, hp->expert_delay);
    else if (hp->combine_style == FMT_COMBINE_ASYNC_EXPERTS && hp->dense_delay != 0)
        snprintf(why, whylen, "AsyncExperts takes no dense delay (%u)", hp->dense_delay);
    else if (hp->dense_delay >= hp->n_layers)
        snprintf(why, whylen, "dense_delay %u exceeds the %u layers", hp->dense_delay,
                 hp->n_layers);
    else if (hp->expert_delay >= hp->n_layers)
        snprintf(why, whylen, "expert_delay %u exceeds the %u layers", hp->expert_delay,
                 hp->n_layers);
    else
        return 0;
    return -1;
}
