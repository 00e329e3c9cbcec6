/*
 * cmd_convert.c — `cflow convert [-q TYPE] [--tokenizer FILE] INPUT OUTPUT`
 *
 * "The report" (with its section numbers) is the Pipeline-Native
 * Transformers report.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "format/cflow_format.h"
#include "ui/cli/cli.h"

static const int convert_opts[] = { UI_O_QUANT, UI_O_TOKENIZER, UI_O_VFLOW, UI_O_HELP,
                                    UI_O_END };

static void help(const ui_settings *d)
{
    printf("usage: cflow convert [-q NAME] [--tokenizer FILE] [--vflow] INPUT OUTPUT\n\n"
           "Convert a model to the tile-native .cflow format.  INPUT is a GGUF file,\n"
           "a llama2.c checkpoint (needs --tokenizer tokenizer.bin) or a Hugging Face\n"
           "directory (config.json, *.safetensors, tokenizer files).  -q takes f32,\n"
           "f16, q8_0, q4_0 (every weight matrix that type) or a llama-quantize name\n"
           "(q4_k_m, q4_k_s, q5_k_m, q5_k_s, q6_k, q3_k_s, q3_k_m, q3_k_l, q2_k,\n"
           "iq4_xs, iq4_nl, mxfp4, q4_1, q5_0, q5_1, bf16: its type mix and blocks);\n"
           "without it each matrix keeps its source type, block for block.\n\n");
    ui_opts_help(stdout, convert_opts, d);
}

int ui_cmd_convert(int argc, char **argv)
{
    static const ui_optset set = { "cflow convert", convert_opts, help, "INPUT and OUTPUT", 2 };
    ui_settings s;
    fmt_convert_opts o;
    char err[512];
    int rc, first;

    ui_settings_default(&s);
    if ((rc = ui_opts_parse(&set, argc, argv, &s, &first)) >= 0)
        return rc;
    memset(&o, 0, sizeof o);
    o.force_type = -1;
    o.tokenizer_path = s.tokenizer;
    o.vflow = s.vflow;
    o.log = ui_log;
    o.progress = ui_progress;
    if (s.quant) {
        fmt_quant q;
        if (fmt_quant_parse(s.quant, &q))
            return ui_usage_error("convert", "unknown type '%s' (%s)", s.quant,
                                  fmt_quant_names());
        o.force_type = q.tile;
        o.ftype = q.ftype;
    }
    if (fmt_convert(argv[first], argv[first + 1], &o, err, sizeof err))
        return ui_error("%s", err);
    return UI_EXIT_OK;
}
