/*
 * cmd_run.c — `cflow run`: prompt in, continuation out.
 *
 * Contract (tests and scripts rely on it): stdout carries only the
 * generated continuation — not the prompt, no trailing decoration; the
 * statistics go to stderr.  --temp 0 is greedy.  Without a prompt the
 * model starts from BOS.
 */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "ui/ui.h"

static void help(void)
{
    eng_sampling d;
    eng_sampling_default(&d);
    printf("usage: cflow run [-m MODEL] [-p PROMPT] [-n N] [OPTIONS]\n\n"
           "Generate a continuation of PROMPT (or of BOS when there is none).\n"
           "Only the continuation goes to stdout; statistics go to stderr.\n\n"
           "  -m, --model FILE       .cflow model (default: $CFLOW_MODEL, then the shipped one)\n"
           "  -p, --prompt TEXT      prompt text\n"
           "  -f, --file FILE        read the prompt from FILE\n"
           "  -n, --n-predict N      tokens to generate (default 128)\n"
           "  -c, --ctx N            context size (default: the model's)\n"
           "  -t, --threads N        worker threads\n"
           "      --temp T           temperature, 0 = greedy (default %.2f)\n"
           "      --top-k K          (default %d, 0 = off)\n"
           "      --top-p P          (default %.2f, 1 = off)\n"
           "      --min-p P          (default %.2f, 0 = off)\n"
           "      --repeat-penalty R (default %.2f, 1 = off)\n"
           "      --repeat-last-n N  (default %d)\n"
           "      --seed S           (default %llu)\n"
           "      --ignore-eos       keep going past end-of-sequence tokens\n"
           "      --db PATH          run log (default: $CFLOW_DB, then\n"
           "                         $XDG_DATA_HOME/cflow/runs.db or ~/.local/share/cflow/runs.db)\n"
           "      --no-log           do not record this run in the run log\n"
           "      --no-profile       no per-layer timers or counters\n"
           "      --kv-type T        KV cache: f16, f32, or auto (default: f16 with\n"
           "                         llama.cpp's attention for GGUF models, f32 else)\n"
           "      --prefetch on|off  PREFETCHT0 thread one layer ahead (default: $CFLOW_PREFETCH,\n"
           "                         else off)\n"
           "      --expert-io MODE   expert fetch: mmap, sync (O_DIRECT reads at the routing\n"
           "                         layer) or staged (read at the routing layer, waited for\n"
           "                         at the injection layer); default $CFLOW_EXPERT_IO, else mmap\n"
           "      --no-mmap          read the model into memory instead of mapping it (the\n"
           "                         expert banks stay mapped for sync and staged I/O)\n"
           "  -h, --help             this text\n",
           d.temp, d.top_k, d.top_p, d.min_p, d.rep_penalty, d.rep_last_n,
           (unsigned long long)d.seed);
}

int ui_cmd_run(int argc, char **argv)
{
    enum { O_TEMP = 256, O_TOPK, O_TOPP, O_MINP, O_REP, O_REPN, O_SEED, O_NOEOS,
           O_DB, O_NOLOG, O_NOPROF, O_KV, O_PREFETCH, O_XIO, O_NOMMAP };
    static const struct option lo[] = {
        { "model", required_argument, 0, 'm' },
        { "prompt", required_argument, 0, 'p' },
        { "file", required_argument, 0, 'f' },
        { "n-predict", required_argument, 0, 'n' },
        { "ctx", required_argument, 0, 'c' },
        { "threads", required_argument, 0, 't' },
        { "temp", required_argument, 0, O_TEMP },
        { "top-k", required_argument, 0, O_TOPK },
        { "top-p", required_argument, 0, O_TOPP },
        { "min-p", required_argument, 0, O_MINP },
        { "repeat-penalty", required_argument, 0, O_REP },
        { "repeat-last-n", required_argument, 0, O_REPN },
        { "seed", required_argument, 0, O_SEED },
        { "ignore-eos", no_argument, 0, O_NOEOS },
        { "db", required_argument, 0, O_DB },
        { "no-log", no_argument, 0, O_NOLOG },
        { "no-profile", no_argument, 0, O_NOPROF },
        { "kv-type", required_argument, 0, O_KV },
        { "prefetch", required_argument, 0, O_PREFETCH },
        { "expert-io", required_argument, 0, O_XIO },
        { "no-mmap", no_argument, 0, O_NOMMAP },
        { "help", no_argument, 0, 'h' },
        { 0, 0, 0, 0 }
    };
    const char *model = NULL, *prompt = NULL, *pfile = NULL;
    long n_predict = 128, n_ctx = 0, threads = 0, v;
    double d;
    int ignore_eos = 0, kv_f16 = -1, c, rc = UI_EXIT_ERR;
    int prefetch = -1, expert_io = -1;   /* -1: the environment's */
    int no_mmap = 0;
    eng_sampling sp;
    eng_opts eo;
    eng_session *s = NULL;
    eng_sampler *smp = NULL;
    int32_t *ids = NULL;
    char *ptext = NULL, err[512];
    ui_run_cfg rcfg = { NULL, 0, 0, &sp };   /* run log and profiling */
    ui_runlog *rl = NULL;

    eng_sampling_default(&sp);
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:p:f:n:c:t:h", lo, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'p': prompt = optarg; break;
        case 'f': pfile = optarg; break;
        case 'n':
            if (ui_parse_int(optarg, 0, 1L << 30, &n_predict))
                return ui_usage_error("run", "bad -n '%s'", optarg);
            break;
        case 'c':
            if (ui_parse_int(optarg, 1, 1L << 24, &n_ctx))
                return ui_usage_error("run", "bad -c '%s'", optarg);
            break;
        case 't':
            if (ui_parse_int(optarg, 1, 1024, &threads))
                return ui_usage_error("run", "bad -t '%s'", optarg);
            break;
        case O_TEMP:
            if (ui_parse_float(optarg, 0, 100, &d))
                return ui_usage_error("run", "bad --temp '%s'", optarg);
            sp.temp = (float)d;
            break;
        case O_TOPK:
            if (ui_parse_int(optarg, 0, 1L << 24, &v))
                return ui_usage_error("run", "bad --top-k '%s'", optarg);
            sp.top_k = (int)v;
            break;
        case O_TOPP:
            if (ui_parse_float(optarg, 0, 1, &d))
                return ui_usage_error("run", "bad --top-p '%s'", optarg);
            sp.top_p = (float)d;
            break;
        case O_MINP:
            if (ui_parse_float(optarg, 0, 1, &d))
                return ui_usage_error("run", "bad --min-p '%s'", optarg);
            sp.min_p = (float)d;
            break;
        case O_REP:
            if (ui_parse_float(optarg, 0.01, 100, &d))
                return ui_usage_error("run", "bad --repeat-penalty '%s'", optarg);
            sp.rep_penalty = (float)d;
            break;
        case O_REPN:
            if (ui_parse_int(optarg, 0, 1L << 20, &v))
                return ui_usage_error("run", "bad --repeat-last-n '%s'", optarg);
            sp.rep_last_n = (int)v;
            break;
        case O_SEED:
            if (ui_parse_u64(optarg, &sp.seed))
                return ui_usage_error("run", "bad --seed '%s'", optarg);
            break;
        case O_NOEOS: ignore_eos = 1; break;
        case O_DB: rcfg.db = optarg; break;
        case O_NOLOG: rcfg.no_log = 1; break;
        case O_NOPROF: rcfg.no_profile = 1; break;
        case O_KV:
            if (!strcmp(optarg, "auto"))
                kv_f16 = -1;
            else if (!strcmp(optarg, "f16"))
                kv_f16 = 1;
            else if (!strcmp(optarg, "f32"))
                kv_f16 = 0;
            else
                return ui_usage_error("run", "bad --kv-type '%s' (auto, f16 or f32)", optarg);
            break;
        case O_PREFETCH:
            if (!strcmp(optarg, "on"))
                prefetch = 1;
            else if (!strcmp(optarg, "off"))
                prefetch = 0;
            else
                return ui_usage_error("run", "bad --prefetch '%s' (on or off)", optarg);
            break;
        case O_XIO:
            if ((expert_io = eng_expert_io_from_name(optarg)) < 0)
                return ui_usage_error("run", "bad --expert-io '%s' (mmap, sync or staged)",
                                      optarg);
            break;
        case O_NOMMAP: no_mmap = 1; break;
        case 'h': help(); return UI_EXIT_OK;
        default: return ui_usage_error("run", "bad option");
        }
    }
    if (optind != argc)
        return ui_usage_error("run", "unexpected argument '%s'", argv[optind]);
    if (prompt && pfile)
        return ui_usage_error("run", "-p and -f are exclusive");
    if (!model && !(model = ui_default_model()))
        return ui_usage_error("run", "no model: give -m MODEL (no default model is installed)");
    size_t flen;
    if (pfile && !(ptext = ui_read_file(pfile, &flen)))
        return ui_error("%s: cannot read the prompt file", pfile);
    if (ptext)
        prompt = ptext;

    eng_opts_default(&eo);
    eo.n_threads = (int)threads;
    eo.n_ctx = (uint32_t)n_ctx;
    eo.kv_f16 = kv_f16;
    eo.prefetch = prefetch;
    eo.expert_io = expert_io;
    eo.no_mmap = no_mmap;
    eo.log = ui_log;
    if (eng_open(&s, model, &eo, err, sizeof err)) {
        rc = ui_error("%s", err);
        goto out;
    }
    const eng_tok *tok = eng_tokenizer(s);
    uint32_t n_vocab = eng_hparams(s)->vocab_size;

    /* the prompt: BOS (when the vocabulary wants it) + text */
    size_t plen = prompt ? strlen(prompt) : 0, n_ids = 0;
    size_t cap = plen + 8 + (size_t)n_predict;
    ids = malloc(cap * sizeof *ids);
    if (!ids) {
        rc = ui_error("out of memory");
        goto out;
    }
    if (plen) {
        if (eng_tok_encode(tok, prompt, plen, 1, 1, ids, cap, &n_ids) || n_ids > cap) {
            rc = ui_error("%s: cannot tokenize the prompt", model);
            goto out;
        }
    }
    if (n_ids == 0) {
        int32_t bos = eng_tok_bos(tok);
        if (bos < 0) {
            rc = ui_error("%s: no prompt and the vocabulary has no BOS token", model);
            goto out;
        }
        ids[n_ids++] = bos;
    }
    if (n_ids > eng_n_ctx(s)) {
        rc = ui_error("%s: the prompt is %zu tokens but the context holds %u",
                      model, n_ids, eng_n_ctx(s));
        goto out;
    }
    if (!(rl = ui_runlog_start(s, model, &rcfg))) {
        rc = ui_error("out of memory");
        goto out;
    }
    if (eng_prefill(s, ids, n_ids, err, sizeof err)) {
        rc = ui_error("%s", err);
        goto out;
    }
    ui_runlog_token(rl);

    smp = eng_sampler_new(&sp, n_vocab);
    if (!smp) {
        rc = ui_error("out of memory");
        goto out;
    }
    eng_detok dt;
    eng_detok_init(&dt);
    dt.prev = ids[n_ids - 1];
    char buf[256];
    int32_t eos = eng_tok_eos(tok), eot = eng_tok_eot(tok);
    /* context shift: when the cache is full, keep the prompt (at most a
     * quarter of the context) and drop half of what follows it */
    uint32_t n_keep = n_ids < eng_n_ctx(s) / 4 ? (uint32_t)n_ids : eng_n_ctx(s) / 4;
    long n_shift = 0;
    uint64_t n_dropped = 0;
    long n_out = 0;      /* tokens generated (the last needs no decode) */
    for (long i = 0; i < n_predict; i++) {
        int32_t next = eng_sampler_sample(smp, eng_logits(s), ids, n_ids);
        if (!ignore_eos && (next == eos || next == eot))
            break;
        ids[n_ids++] = next;
        n_out++;
        if (!eng_tok_is_control(tok, next)) { /* control tokens are not text */
            size_t n = eng_detok_push(&dt, tok, next, buf, sizeof buf);
            fwrite(buf, 1, n, stdout);
            fflush(stdout);
        }
        if (i + 1 == n_predict)
            break;
        int drc = eng_decode(s, next, err, sizeof err);
        if (drc == ENG_ECTX) {
            uint32_t drop = (eng_n_past(s) - n_keep + 1) / 2;
            drc = eng_shift(s, n_keep, drop, err, sizeof err);
            if (!drc)
                drc = eng_decode(s, next, err, sizeof err);
            n_shift++;
            n_dropped += drop;
        }
        if (drc) {
            rc = ui_error("%s", err);
            goto out;
        }
        ui_runlog_token(rl);
    }
    {
        size_t n = eng_detok_flush(&dt, buf, sizeof buf);
        fwrite(buf, 1, n, stdout);
        fflush(stdout);
    }
    eng_stats st;
    eng_get_stats(s, &st);
    if (n_shift)
        fprintf(stderr, "\ncflow: context full (%u tokens): shifted %ld times, keeping the "
                        "first %u and dropping %llu in all\n",
                eng_n_ctx(s), n_shift, n_keep, (unsigned long long)n_dropped);
    fprintf(stderr,
            "\ncflow: model %s, kernels %s\n"
            "cflow: prompt %llu tokens in %.3f s (%.2f tok/s)\n"
            "cflow: generated %ld tokens; decode %llu tokens in %.3f s (%.2f tok/s, %.2f GB/s of weights)\n",
            model, eng_isa(s), (unsigned long long)st.n_prompt, st.prefill_s,
            st.prefill_s > 0 ? (double)st.n_prompt / st.prefill_s : 0.0,
            n_out, (unsigned long long)st.n_gen, st.decode_s,
            st.decode_s > 0 ? (double)st.n_gen / st.decode_s : 0.0,
            st.decode_s > 0 ? (double)st.n_gen * (double)st.bytes_per_token / st.decode_s / 1e9
                            : 0.0);
    ui_runlog_end(rl, 1);
    rl = NULL;
    rc = UI_EXIT_OK;
out:
    ui_runlog_end(rl, 0);
    eng_sampler_free(smp);
    eng_close(s);
    free(ids);
    free(ptext);
    return rc;
}
