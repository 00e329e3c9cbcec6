/*
 * cmd_synth.c — `cflow synth PRESET OUT`: random-weight models for tests
 * and benchmarks, written by the ordinary .cflow writer.
 */
#include "config.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/cflow_format.h"
#include "ui/cli/cli.h"

static void help(void)
{
    printf("usage: cflow synth [-q TYPE] [--seed S] [--routing R] [--vflow] PRESET OUTPUT\n"
           "       cflow synth --gguf [-q q4_0|q8_0] [--vocab FILE] [--seed S] [--routing R]\n"
           "                   PRESET OUTPUT\n\n"
           "Write a random-weight model for PRESET to OUTPUT (.cflow).\n\n"
           "  -q, --quant TYPE  tile type of the weight matrices (default q4_0;\n"
           "                    with --gguf, q4_0 or q8_0)\n"
           "      --seed S      weights seed (default 1)\n"
           "      --routing R   expert popularity of a MoE preset: uniform (default:\n"
           "                    random routers, every expert about as popular as any\n"
           "                    other) or zipf[:S] (a router bias drawn from a\n"
           "                    Zipf-like law of exponent S, default 1: per layer a\n"
           "                    random order of the experts, the k-th biased by\n"
           "                    -S ln k; built into the weights through one residual\n"
           "                    dimension held constant, so llama.cpp runs the same\n"
           "                    skew from a --gguf file; its embedding drawn with\n"
           "                    sd 2, so that each token routes by its own residual\n"
           "                    as in a trained model, where uniform's tokens route\n"
           "                    much alike)\n"
           "      --vflow       write the stage-major .vflow layout\n"
           "      --gguf        write a Q4_0 (or -q q8_0: Q8_0) GGUF that llama.cpp\n"
           "                    loads (llama architecture presets: tiny-mixtral\n"
           "                    and the benchmark presets); `cflow convert`\n"
           "                    copies its blocks bit for bit, so both engines\n"
           "                    run identical weights\n"
           "      --vocab FILE  with --gguf: copy the tokenizer of this GGUF\n"
           "                    (padded to the preset's vocabulary; default: a\n"
           "                    synthetic SentencePiece vocabulary)\n"
           "  -h, --help        this text\n\npresets:\n");
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
    enum { O_SEED = 256, O_GGUF, O_VOCAB, O_ROUTING };
    static const struct option lo[] = {
        { "quant", required_argument, 0, 'q' },
        { "seed", required_argument, 0, O_SEED },
        { "vflow", no_argument, 0, 'V' },
        { "gguf", no_argument, 0, O_GGUF },
        { "vocab", required_argument, 0, O_VOCAB },
        { "routing", required_argument, 0, O_ROUTING },
        { "help", no_argument, 0, 'h' },
        { 0, 0, 0, 0 }
    };
    fmt_convert_opts o;
    uint64_t seed = 1;
    int gguf = 0, quant_set = 0;
    float zipf = 0.0f;
    const char *vocab = NULL;
    char err[512];
    int c;

    memset(&o, 0, sizeof o);
    o.force_type = KERN_Q4_0;
    o.log = ui_log;
    o.progress = ui_progress;
    optind = 1;
    opterr = 0;   /* one line of ours, not getopt's */
    while ((c = getopt_long(argc, argv, "q:h", lo, NULL)) != -1) {
        switch (c) {
        case 'q':
            o.force_type = kern_type_from_name(optarg);
            quant_set = 1;
            if (o.force_type < 0)
                return ui_usage_error("synth", "unknown type '%s' (q4_0, q8_0, f16, f32)",
                                      optarg);
            break;
        case O_SEED:
            if (ui_opt_value(&ui_opts[UI_O_SEED], optarg, &seed, err, sizeof err))
                return ui_usage_error("synth", "bad --seed '%s': %s", optarg, err);
            break;
        case 'V': o.vflow = 1; break;
        case O_GGUF: gguf = 1; break;
        case O_VOCAB: vocab = optarg; break;
        case O_ROUTING:
            if (parse_routing(optarg, &zipf))
                return ui_usage_error("synth", "bad --routing '%s': uniform, zipf or "
                                      "zipf:S with 0 < S <= 8", optarg);
            break;
        case 'h': help(); return UI_EXIT_OK;
        default: return ui_bad_option("synth", argv);
        }
    }
    if (argc - optind != 2)
        return ui_usage_error("synth", "expected PRESET and OUTPUT");
    if (vocab && !gguf)
        return ui_usage_error("synth", "--vocab needs --gguf");
    if (gguf && o.vflow)
        return ui_usage_error("synth", "--gguf writes a GGUF, not --vflow");
    if (gguf && quant_set && o.force_type != KERN_Q4_0 && o.force_type != KERN_Q8_0)
        return ui_usage_error("synth", "--gguf writes q4_0 or q8_0 matrices, not '%s'",
                              kern_type_name(o.force_type));
    if (gguf) {
        if (fmt_synth_write_gguf(argv[optind], argv[optind + 1], vocab, seed,
                                 o.force_type, zipf, ui_progress, NULL, err, sizeof err))
            return ui_error("%s", err);
        return UI_EXIT_OK;
    }
    fmt_src *src = NULL;
    if (fmt_synth_open(&src, argv[optind], seed, zipf, err, sizeof err))
        return ui_error("%s", err);
    int rc = fmt_cflow_write(src, argv[optind + 1], &o, err, sizeof err);
    fmt_src_close(src);
    if (rc)
        return ui_error("%s", err);
    return UI_EXIT_OK;
}
