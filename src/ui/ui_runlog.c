/*
 * ui_runlog.c — the run log as cflow and cflow-tui open it and describe
 * what they log in it.
 *
 * Every program that reads or writes the log picks it the same way: --db
 * PATH, else the default (prof_log_default_path: $CFLOW_DB, then
 * $XDG_DATA_HOME/cflow/runs.db, then ~/.local/share/cflow/runs.db).  A
 * writer that cannot open or write it says so once, in the one wording of
 * ui_log_warning, and goes on without logging: inference never stops for
 * the log.  A session row describes the machine (its read bandwidth
 * measured once and kept in the log) and the model (path, content hash,
 * geometry); a run row the settings it ran under (ui_logsess_run_cfg).
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "format/cflow_format.h"
#include "kernels/kern.h"
#include "prof/prof.h"
#include "ui/ui.h"

const char *const ui_byte_stream[3] = { "attention", "dense", "experts" };

int ui_log_open(prof_log **out, const char *db, unsigned flags, char *err, size_t errlen)
{
    char path[PATH_MAX];
    *out = NULL;
    if (db)
        snprintf(path, sizeof path, "%s", db);
    else if (prof_log_default_path(path, sizeof path)) {
        snprintf(err, errlen, "(nowhere: no $HOME, $XDG_DATA_HOME or $CFLOW_DB; "
                              "give --db PATH)");
        return -1;
    }
    if (!(flags & PROF_LOG_CREATE) && access(path, F_OK) != 0) {
        if (errno != ENOENT) {
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
            return -1;
        }
        snprintf(err, errlen, "%s", path);
        return 1;
    }
    if (prof_log_open(out, path, flags, err, errlen)) {
        *out = NULL;
        return -1;
    }
    return 0;
}

void ui_log_warning(char *buf, size_t n, const char *why)
{
    snprintf(buf, n, "warning: run log %s; continuing without logging", why);
}

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
    prof_run_cfg c = {
        .threads = eng_threads(s), .prefetch = eng_prefetch(s) ? "on" : "off",
        .expert_io = hp->n_experts ? eng_expert_io_name(eng_expert_io(s)) : "none",
        .n_ctx = eng_n_ctx(s), .temp = f2d(sp->temp), .top_p = f2d(sp->top_p),
        .min_p = f2d(sp->min_p), .rep_penalty = f2d(sp->rep_penalty),
        .top_k = sp->top_k, .rep_last_n = sp->rep_last_n, .seed = sp->seed,
    };
    *rc = c;
}

void ui_logsess_machine(ui_logsess *ls, const eng_session *s, prof_log *log)
{
    ls->host[0] = '\0';
    gethostname(ls->host, sizeof ls->host - 1);
    ls->host[sizeof ls->host - 1] = '\0';
    prof_cpu_model(ls->cpu, sizeof ls->cpu);
    prof_machine m = { ls->host, ls->cpu, eng_isa(s), prof_cpu_cores(), 0.0 };
    const char *bw_env = getenv("CFLOW_READ_BW_GBS");
    double bw = 0.0;
    if (bw_env && *bw_env && ui_parse_float(bw_env, 0.001, 1e6, &bw))
        bw = 0.0;
    if (bw <= 0.0 && log) {
        bw = prof_log_machine_bw(log, &m);
        if (bw <= 0.0)
            bw = prof_measure_read_bw(m.cores);
    }
    m.read_bw_gbs = bw;
    ls->m = m;
}

int ui_logsess_model(ui_logsess *ls, const char *model, const fmt_hparams *hp,
                     char *err, size_t errlen)
{
    uint64_t size = 0;
    ls->hash[0] = '\0';
    if (!realpath(model, ls->real))
        snprintf(ls->real, sizeof ls->real, "%s", model);
    if (prof_file_hash(ls->real, ls->hash, &size, err, errlen))
        return -1;
    prof_model_info mi = {
        .path = ls->real, .hash = ls->hash, .arch = hp->arch,
        .quant = kern_type_name((enum kern_type)hp->quant_type), .size = size,
        .n_layers = hp->n_layers, .dim = hp->dim, .ffn_dim = hp->ffn_dim,
        .n_heads = hp->n_heads, .n_kv_heads = hp->n_kv_heads,
        .vocab_size = hp->vocab_size, .n_experts = hp->n_experts, .top_k = hp->top_k,
        .dense_delay = hp->dense_delay, .expert_delay = hp->expert_delay,
    };
    ls->mi = mi;
    return 0;
}
