/*
 * cmd_synth.c — `cflow synth PRESET OUT`: random-weight models for tests
 * and benchmarks, written by the ordinary .cflow writer.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/cflow_format.h"
#include "ui/cli/cli.h"

static const int synth_opts[] = { UI_O_QUANT, UI_O_SYNTH_SEED, UI_O_ROUTING, UI_O_VFLOW,
                                  UI_O_GGUF, UI_O_VOCAB, UI_O_HELP, UI_O_END };

static void help(const ui_settings *d)
{
    printf("usage: cflow synth [-q NAME] [--seed S] [--routing R] [--vflow] PRESET OUTPUT\n"
           "       cflow synth --gguf [-q NAME] [--vocab FILE] [--seed S] [--routing R]\n"
           "                   PRESET OUTPUT\n\n"
           "Write a random-weight model for PRESET to OUTPUT (.cflow; with --gguf, a\n"
           "GGUF in the preset's own architecture that llama.cpp loads, whose blocks\n"
           "`cflow convert` copies bit for bit).  -q: f32, f16, q8_0, q4_0 (default)\n"
           "or a llama-quantize name (q4_k_m, q6_k, iq4_xs, mxfp4, ...: llama.cpp's\n"
           "type mix and blocks).\n\n");
    ui_opts_help(stdout, synth_opts, d);
    printf("\npresets:\n");
    for (unsigned i = 0; fmt_synth_preset_name(i); i++)
        printf("  %s\n", fmt_synth_preset_name(i));
}

/* --routing: "uniform" (0), "zipf" (1) or "zipf:S", 0 < S <= 8. */
static int parse_routing(const char *v, float *zipf)
{
    char *end = NULL;
    if (!strcmp(v, "uniform")) {
        *zipf = 0.0f;
        return 0;
    }
    if (strncmp(v, "zipf", 4) || (v[4] && v[4] != ':'))
        return -1;
    if (!v[4]) {
        *zipf = 1.0f;
        return 0;
    }
    double s = strtod(v + 5, &end);
    if (end == v + 5 || *end || !isfinite(s) || !(s > 0.0 && s <= 8.0))
        return -1;
    *zipf = (float)s;
    return 0;
}

int ui_cmd_synth(int argc, char **argv)
{
    static const ui_optset set = { "cflow synth", synth_opts, help, "PRESET and OUTPUT", 2 };
    ui_settings so;
    fmt_convert_opts o;
    float zipf = 0.0f;
    char err[512];
    int rc, first;

    ui_settings_default(&so);
    so.quant = "q4_0";
    so.routing = "uniform";
    if ((rc = ui_opts_parse(&set, argc, argv, &so, &first)) >= 0)
        return rc;
    memset(&o, 0, sizeof o);
    o.log = ui_log;
    o.progress = ui_progress;
    o.vflow = so.vflow;
    fmt_quant q;
    if (fmt_quant_parse(so.quant, &q))
        return ui_usage_error("synth", "unknown type '%s' (%s)", so.quant, fmt_quant_names());
    o.force_type = q.tile;
    o.ftype = q.ftype;
    if (parse_routing(so.routing, &zipf))
        return ui_usage_error("synth", "bad --routing '%s': uniform, zipf or zipf:S with "
                              "0 < S <= 8", so.routing);
    const int gguf = so.gguf;
    const char *vocab = so.vocab, *preset = argv[first], *out = argv[first + 1];
    const uint64_t seed = so.synth_seed;
    if (vocab && !gguf)
        return ui_usage_error("synth", "--vocab needs --gguf");
    if (gguf && o.vflow)
        return ui_usage_error("synth", "--gguf writes a GGUF, not --vflow");
    if (gguf) {
        if (fmt_synth_write_gguf(preset, out, vocab, seed, &q, zipf, ui_progress,
                                 NULL, err, sizeof err))
            return ui_error("%s", err);
        return UI_EXIT_OK;
    }
    fmt_src *src = NULL;
    if (fmt_synth_open(&src, preset, seed, zipf, err, sizeof err))
        return ui_error("%s", err);
    rc = fmt_cflow_write(src, out, &o, err, sizeof err);
    fmt_src_close(src);
    if (rc)
        return ui_error("%s", err);
    return UI_EXIT_OK;
}
