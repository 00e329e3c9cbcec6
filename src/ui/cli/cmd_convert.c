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
    printf("usage: cflow convert [-q TYPE] [--tokenizer FILE] [--vflow] INPUT OUTPUT\n\n"
           "Convert a model to the tile-native .cflow format.  INPUT is a GGUF file,\n"
           "a llama2.c checkpoint (needs --tokenizer tokenizer.bin) or a Hugging Face\n"
           "directory (config.json, *.safetensors, tokenizer files).  Without -q each\n"
           "matrix keeps its source type where a tile type exists.\n\n");
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
    if (s.quant && (o.force_type = kern_type_from_name(s.quant)) < 0)
        return ui_usage_error("convert", "unknown type '%s' (q4_0, q8_0, f16, f32)", s.quant);
    if (fmt_convert(argv[first], argv[first + 1], &o, err, sizeof err))
        return ui_error("%s", err);
    return UI_EXIT_OK;
}
