/*
 * cmd_convert.c — `cflow convert [-q TYPE] [--tokenizer FILE] INPUT OUTPUT`
 *
 * "The report" (with its section numbers) is the Pipeline-Native
 * Transformers report.
 */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "format/cflow_format.h"
#include "ui/cli/cli.h"

static void help(void)
{
    printf("usage: cflow convert [-q q4_0|q8_0|f16|f32] [--tokenizer FILE] [--vflow] INPUT OUTPUT\n\n"
           "Convert a model to the tile-native .cflow format.  INPUT is a GGUF file,\n"
           "a llama2.c checkpoint (needs --tokenizer tokenizer.bin) or a Hugging Face\n"
           "directory (config.json, *.safetensors, tokenizer files).\n\n"
           "  -q, --quant TYPE     store every weight matrix as TYPE; without it each\n"
           "                       matrix keeps its source type where a tile type exists\n"
           "  -t, --tokenizer FILE tokenizer for sources that lack one\n"
           "      --vflow          write the stage-major .vflow layout (report 3.4)\n"
           "  -h, --help           this text\n");
}

int ui_cmd_convert(int argc, char **argv)
{
    static const struct option lo[] = {
        { "quant", required_argument, 0, 'q' },
        { "tokenizer", required_argument, 0, 't' },
        { "vflow", no_argument, 0, 'V' },
        { "help", no_argument, 0, 'h' },
        { 0, 0, 0, 0 }
    };
    fmt_convert_opts o;
    char err[512];
    int c;

    memset(&o, 0, sizeof o);
    o.force_type = -1;
    o.log = ui_log;
    o.progress = ui_progress;
    optind = 1;
    opterr = 0;   /* one line of ours, not getopt's */
    while ((c = getopt_long(argc, argv, "q:t:h", lo, NULL)) != -1) {
        switch (c) {
        case 'q':
            o.force_type = kern_type_from_name(optarg);
            if (o.force_type < 0)
                return ui_usage_error("convert", "unknown type '%s' (q4_0, q8_0, f16, f32)",
                                      optarg);
            break;
        case 't': o.tokenizer_path = optarg; break;
        case 'V': o.vflow = 1; break;
        case 'h': help(); return UI_EXIT_OK;
        default: return ui_bad_option("convert", argv);
        }
    }
    if (argc - optind != 2)
        return ui_usage_error("convert", "expected INPUT and OUTPUT");
    if (fmt_convert(argv[optind], argv[optind + 1], &o, err, sizeof err))
        return ui_error("%s", err);
    return UI_EXIT_OK;
}
