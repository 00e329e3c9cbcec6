/*
 * ui_xio.c — the figures of expert streaming (issue 17 item 7) as every
 * front end shows them: `cflow run`'s statistics, `cflow bench`'s columns,
 * cflow-tui's overlap pane and the run log all take them from here, so a
 * hit rate or a storage-bound limit is computed once (prof_xio_derive) and
 * worded once (ui_xio_lines).
 *
 * The inputs are the engine's counters (eng_stats) over a stretch of
 * tokens: the difference of two snapshots, or everything since the
 * session opened.  Tokens are the forward passes that routed experts
 * (prefill tokens too: a batched prefill reads an expert once for the
 * chunk, so its tokens lower the bytes per token as they should); tok/s
 * is the decode rate reached over the same stretch.  The storage-bound
 * limit divides a storage bandwidth by the expert bytes read per token:
 * `cflow bench diskbw`'s figure for the device the model lives on when the
 * run log keeps one, else the GB/s the reads themselves reached (then the
 * limit only says how far compute and stalls kept decode from the reads'
 * own pace).
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "engine/engine.h"
#include "format/cflow_format.h"
#include "prof/prof.h"
#include "ui/common/ui.h"

#define MIB (1024.0 * 1024.0)

void ui_xio_accum(prof_xio_fig *f, const eng_stats *now, const eng_stats *base)
{
    eng_stats zero;
    if (!base) {
        memset(&zero, 0, sizeof zero);
        base = &zero;
    }
    f->hits += now->xio_hits - base->xio_hits;
    f->misses += now->xio_misses - base->xio_misses;
    f->tokens += now->expert_tokens - base->expert_tokens;
    f->bytes += now->xio_bytes - base->xio_bytes;
    f->io_s += now->xio_s - base->xio_s;
    f->depth_s += now->xio_depth_s - base->xio_depth_s;
    f->pred += now->xio_pred - base->xio_pred;
    f->pred_hits += now->xio_pred_hits - base->xio_pred_hits;
    f->stall_s += now->xio_stall_s - base->xio_stall_s;
    f->pred_reads += now->xio_pred_reads - base->xio_pred_reads;
    f->pred_wasted += now->xio_pred_wasted - base->xio_pred_wasted;
    f->pred_bytes += now->xio_pred_bytes - base->xio_pred_bytes;
}

void ui_xio_figures(const eng_stats *now, const eng_stats *base, double tok_s, double disk_gbs,
                    prof_xio_fig *f)
{
    memset(f, 0, sizeof *f);
    ui_xio_accum(f, now, base);
    f->tok_s = tok_s;
    f->disk_gbs = disk_gbs;
    prof_xio_derive(f);
}

int ui_xio_shown(const prof_xio_fig *f) { return f->hits + f->misses > 0; }

void ui_xio_values(const prof_xio_fig *f, int has, uint64_t cache_bytes, const char *routing,
                   const char *na, char v[UI_XIO_NF][64])
{
    /* the figures (-1: n/a) and their columns in UI_XIO_FIELDS */
    const double d[] = { f->hit_rate, f->bytes_tok, f->gb_s, f->depth, f->bound_gbs,
                         f->limit_tok_s, f->reached >= 0 ? 100.0 * f->reached : -1.0,
                         f->pred_acc, f->wasted_tok, f->compute_s_tok, f->ov_limit_tok_s,
                         f->ov_reached >= 0 ? 100.0 * f->ov_reached : -1.0 };
    static const int slot[] = { 3, 4, 5, 6, 7, 9, 10, 11, 13, 14, 15, 16 };
    _Static_assert(sizeof d / sizeof *d == sizeof slot / sizeof *slot, "a column a figure");
    snprintf(v[0], 48, "%llu", (unsigned long long)cache_bytes);
    snprintf(v[1], 48, "%llu", (unsigned long long)f->hits);
    snprintf(v[2], 48, "%llu", (unsigned long long)f->misses);
    for (size_t k = 0; k < sizeof slot / sizeof *slot; k++)
        if (has && d[k] >= 0)
            snprintf(v[slot[k]], 48, "%.6g", d[k]);
        else
            snprintf(v[slot[k]], 48, "%s", na);
    snprintf(v[8], 48, "%s", !has || f->bound_gbs < 0 ? na
                             : f->bound_diskbw ? "\"diskbw\"" : "\"reads\"");
    if (routing && routing[0])   /* a synthetic model's routing (ui_routing_text) */
        snprintf(v[12], 64, "\"%.60s\"", routing);
    else
        snprintf(v[12], 64, "%s", na);
}

static void pct_or_na(double v, char *buf, size_t n)
{
    if (v >= 0)
        snprintf(buf, n, "%.1f%%", 100.0 * v);
    else
        snprintf(buf, n, "n/a");
}

int ui_xio_lines(const prof_xio_fig *f, uint64_t cache_bytes, const char *routing,
                 char lines[UI_XIO_LINES][160])
{
    char hr[16], reach[16], depth[32], cache[32];
    if (!ui_xio_shown(f))
        return 0;
    pct_or_na(f->hit_rate, hr, sizeof hr);
    pct_or_na(f->reached, reach, sizeof reach);
    if (f->depth >= 0)
        snprintf(depth, sizeof depth, "%.2f", f->depth);
    else
        snprintf(depth, sizeof depth, "n/a");
    if (cache_bytes)
        ui_models_size(cache_bytes, cache, sizeof cache);
    else
        snprintf(cache, sizeof cache, "off (staging slots only)");
    int k = 0;
    snprintf(lines[k++], 160, "cache %s: hit rate %s (%llu of %llu routed experts in RAM, "
             "%llu read)%s%s", cache, hr, (unsigned long long)f->hits,
             (unsigned long long)(f->hits + f->misses), (unsigned long long)f->misses,
             routing ? "; " : "", routing ? routing : "");
    snprintf(lines[k++], 160, "storage: %.4g MiB/token read, %.3g GB/s while busy "
             "(%.3f s), queue depth %s", f->bytes_tok > 0 ? f->bytes_tok / MIB : 0.0,
             f->gb_s > 0 ? f->gb_s : 0.0, f->io_s, depth);
    if (f->limit_tok_s > 0) {
        char ov[64] = "";
        if (f->ov_limit_tok_s > 0)
            snprintf(ov, sizeof ov, "; overlapped with compute %.*f tok/s: %.1f%%",
                     f->ov_limit_tok_s >= 100 ? 0 : 2, f->ov_limit_tok_s, 100.0 * f->ov_reached);
        snprintf(lines[k++], 160, "storage-bound %.*f tok/s at %.3g GB/s (%s): %s reached%s",
                 f->limit_tok_s >= 100 ? 0 : 2, f->limit_tok_s, f->bound_gbs,
                 f->bound_diskbw ? "cflow bench diskbw" : "the reads' own GB/s", reach, ov);
    } else
        snprintf(lines[k++], 160, "storage-bound: n/a (%s)",
                 f->bytes ? "no read time" : "nothing read from storage");
    if (f->pred) {
        char w[64] = "";              /* unknown in a run logged before schema 8 */
        if (f->wasted_tok >= 0)
            snprintf(w, sizeof w, ", %.4g MiB/token read for guesses not routed",
                     f->wasted_tok / MIB);
        snprintf(lines[k++], 160, "look-ahead: %.1f%% right (%llu of %llu predictions)%s",
                 100.0 * f->pred_acc, (unsigned long long)f->pred_hits,
                 (unsigned long long)f->pred, w);
    } else
        snprintf(lines[k++], 160, "look-ahead: no predictions");
    return k;
}

const char *ui_routing_text(const eng_session *s, char *buf, size_t n)
{
    size_t sl = 0, rl = 0;
    const char *src = eng_model_meta(s, "cflow.source", &sl);
    const char *rt = eng_model_meta(s, FMT_SYNTH_ROUTING_KEY, &rl);
    buf[0] = '\0';
    if (rt)
        snprintf(buf, n, "%.*s routing (cflow synth)", (int)rl, rt);
    else if (src && sl == 5 && !memcmp(src, "synth", 5))
        snprintf(buf, n, "uniform routing (cflow synth: random routers)");
    /* the key is the file's text: quotes, backslashes and control bytes
     * would break the CSV and JSON fields it goes into (ui_xio_values) */
    for (char *c = buf; *c; c++)
        if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20 || *c == 0x7f)
            *c = '?';
    return buf[0] ? buf : NULL;
}

const char *ui_expert_io_text(const eng_session *s, char *buf, size_t n)
{
    const char *mode = eng_expert_io_name(eng_expert_io(s));
    if (!eng_hparams(s)->n_experts)
        snprintf(buf, n, "none");
    else if (eng_expert_io_auto(s))
        snprintf(buf, n, "%s (auto)", mode);
    else
        snprintf(buf, n, "%s", mode);
    return buf;
}
