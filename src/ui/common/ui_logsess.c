/*
 * ui_logsess.c — what the run log records of a session, as `cflow run`,
 * `cflow bench` and cflow-tui all describe it: the machine (host, CPU,
 * cores, its read bandwidth), the model (path, content hash, geometry, and
 * the model as the user named it when that is a GGUF or folder whose
 * conversion ran) and the settings a run ran under (ui_logsess_run_cfg),
 * --expert-io auto's choice among them.  The writer that logs them, and
 * the machine's read bandwidth it records with them, is ui_runlog.c.  The
 * storage bandwidth of the expert figures' limit is ui_disk_bw's: what
 * `cflow bench diskbw` recorded for the model's device.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"
#include "format/cflow_format.h"
#include "kernels/kern.h"
#include "prof/prof.h"
#include "ui/common/ui.h"

const char *const ui_byte_stream[3] = { "attention", "dense", "experts" };

/* A float setting as the decimal the user wrote (0.95, not 0.949999988). */
static double f2d(float f)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%.7g", (double)f);
    return strtod(buf, NULL);
}

void ui_logsess_run_cfg(const eng_session *s, const eng_sampling *sp, prof_run_cfg *rc)
{
    const fmt_hparams *hp = eng_hparams(s);
    eng_stats es;
    eng_get_stats(s, &es);
    prof_run_cfg c = {
        .threads = eng_threads(s), .prefetch = ui_onoff[eng_prefetch(s) != 0],
        .expert_io = hp->n_experts ? eng_expert_io_name(eng_expert_io(s)) : "none",
        .expert_io_asked = !hp->n_experts ? "none"
                           : eng_expert_io_name(eng_expert_io_auto(s) ? ENG_XIO_AUTO
                                                                       : eng_expert_io(s)),
        .expert_cache_bytes = hp->n_experts ? es.xio_cache_bytes : 0,
        .expert_ahead = hp->n_experts ? eng_expert_ahead(s) : -1,
        .n_ctx = eng_n_ctx(s), .temp = f2d(sp->temp), .top_p = f2d(sp->top_p),
        .min_p = f2d(sp->min_p), .rep_penalty = f2d(sp->rep_penalty),
        .top_k = sp->top_k, .rep_last_n = sp->rep_last_n, .seed = sp->seed,
    };
    *rc = c;
}

prof_machine ui_host(ui_logsess *ls, const char *isa)
{
    ls->host[0] = '\0';
    gethostname(ls->host, sizeof ls->host - 1);
    ls->host[sizeof ls->host - 1] = '\0';
    prof_cpu_model(ls->cpu, sizeof ls->cpu);
    prof_machine m = { ls->host, ls->cpu, isa, prof_cpu_cores(), 0.0 };
    return m;
}

double ui_disk_bw(prof_log *l, const char *path)
{
    struct stat st;
    double gbs = 0.0;
    char host[256] = "";
    if (!l || !path || stat(path, &st))
        return 0.0;
    gethostname(host, sizeof host - 1);
    if (prof_log_diskbw_find(l, host, (uint64_t)st.st_dev, &gbs, NULL) != 0)
        return 0.0;
    return gbs;
}

int ui_logsess_model(ui_logsess *ls, const char *model, const char *named,
                     const fmt_hparams *hp, char *err, size_t errlen)
{
    uint64_t size = 0;
    ls->hash[0] = '\0';
    if (!realpath(model, ls->real))
        snprintf(ls->real, sizeof ls->real, "%s", model);
    if (named && !realpath(named, ls->named))
        snprintf(ls->named, sizeof ls->named, "%s", named);
    if (prof_file_hash(ls->real, ls->hash, &size, err, errlen))
        return -1;
    prof_model_info mi = {
        .path = ls->real, .hash = ls->hash, .arch = hp->arch,
        .quant = kern_type_name((enum kern_type)hp->quant_type), .size = size,
        .n_layers = hp->n_layers, .dim = hp->dim, .ffn_dim = hp->ffn_dim,
        .n_heads = hp->n_heads, .n_kv_heads = hp->n_kv_heads,
        .vocab_size = hp->vocab_size, .n_experts = hp->n_experts, .top_k = hp->top_k,
        .dense_delay = hp->dense_delay, .expert_delay = hp->expert_delay,
        .named = named && strcmp(ls->named, ls->real) ? ls->named : NULL,
    };
    ls->mi = mi;
    return 0;
}
