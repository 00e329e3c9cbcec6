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
#include "ui/ui.h"

static void help(void)
{
    printf("usage: cflow convert [-q NAME] [--tokenizer FILE] [--vflow] INPUT OUTPUT\n\n"
           "Convert a model to the tile-native .cflow format.  INPUT is a GGUF file,\n"
           "a llama2.c checkpoint (needs --tokenizer tokenizer.bin) or a Hugging Face\n"
           "directory (config.json, *.safetensors, tokenizer files).\n\n"
           "  -q, --quant NAME     f32, f16, q8_0, q4_0: every weight matrix that type;\n"
           "                       q4_k_m, q4_k_s, q5_k_m, q5_k_s, q6_k, q3_k_s, q3_k_m,\n"
           "                       q3_k_l, q2_k, iq4_xs, iq4_nl, mxfp4, q4_1, q5_0,\n"
           "                       q5_1, bf16: llama-quantize's type mix and blocks;\n"
           "                       without it each matrix keeps its source type, block\n"
           "                       for block\n"
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
        case 'q': {
            fmt_quant q;
            if (fmt_quant_parse(optarg, &q))
                return ui_usage_error("convert", "unknown type '%s' (%s)", optarg,
                                      fmt_quant_names());
            o.force_type = q.tile;
            o.ftype = q.ftype;
            break;
        }
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
