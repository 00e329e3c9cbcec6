/*
 * cmd_ppl.c — `cflow ppl -m MODEL FILE`: perplexity and bits per byte.
 *
 * The definition mirrors the trainer's evaluation (scripts/train/eval.py):
 * the file is split into stories on "<|endoftext|>"; each story, stripped of
 * surrounding whitespace and skipped when empty, is encoded as BOS + its
 * tokens + EOS; every token after BOS is predicted once from the ones
 * before it, in windows of at most n_ctx tokens (window w covers
 * seq[w*(n_ctx-1) .. +n_ctx) and starts from an empty cache).
 *   perplexity    = exp(total NLL / predicted tokens)
 *   bits per byte = total NLL / ln 2 / UTF-8 bytes of the stories' text
 * Bits per byte compares models with different tokenizers.
 */
#include "config.h"

#include <ctype.h>
#include <getopt.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "ui/ui.h"

static void help(void)
{
    printf("usage: cflow ppl [-m MODEL] [-n STORIES] [--no-eos] [--json] FILE\n\n"
           "Perplexity and bits per byte of MODEL over FILE, whose stories are\n"
           "separated by <|endoftext|>.\n\n"
           "  -m, --model FILE   .cflow model (default: the shipped one)\n"
           "  -n, --stories N    only the first N stories\n"
           "  -c, --ctx N        context (default: the model's, at most 4096)\n"
           "  -t, --threads N    worker threads\n"
           "      --no-eos       do not predict an end-of-sequence token per story\n"
           "  -j, --json         machine-readable output\n"
           "  -h, --help         this text\n");
}

static double log_softmax_at(const float *lg, uint32_t n, int32_t id)
{
    float mx = lg[0];
    for (uint32_t i = 1; i < n; i++)
        if (lg[i] > mx)
            mx = lg[i];
    double sum = 0.0;
    for (uint32_t i = 0; i < n; i++)
        sum += exp((double)lg[i] - mx);
    return (double)lg[id] - mx - log(sum);
}

int ui_cmd_ppl(int argc, char **argv)
{
    enum { O_EOS = 256 };
    static const struct option lo[] = {
        { "model", required_argument, 0, 'm' },
        { "stories", required_argument, 0, 'n' },
        { "ctx", required_argument, 0, 'c' },
        { "threads", required_argument, 0, 't' },
        { "no-eos", no_argument, 0, O_EOS },
        { "json", no_argument, 0, 'j' },
        { "help", no_argument, 0, 'h' },
        { 0, 0, 0, 0 }
    };
    const char *model = NULL;
    long max_stories = -1, n_ctx = 0, threads = 0;
    int eos = 1, json = 0, c, rc = UI_EXIT_ERR;
    char err[512];
    eng_session *s = NULL;
    char *text = NULL;
    int32_t *ids = NULL;

    optind = 1;
    while ((c = getopt_long(argc, argv, "m:n:c:t:jh", lo, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'n':
            if (ui_parse_int(optarg, 1, 1L << 30, &max_stories))
                return ui_usage_error("ppl", "bad -n '%s'", optarg);
            break;
        case 'c':
            if (ui_parse_int(optarg, 2, 1L << 24, &n_ctx))
                return ui_usage_error("ppl", "bad -c '%s'", optarg);
            break;
        case 't':
            if (ui_parse_int(optarg, 1, 1024, &threads))
                return ui_usage_error("ppl", "bad -t '%s'", optarg);
            break;
        case O_EOS: eos = 0; break;
        case 'j': json = 1; break;
        case 'h': help(); return UI_EXIT_OK;
        default: return ui_usage_error("ppl", "bad option");
        }
    }
    if (argc - optind != 1)
        return ui_usage_error("ppl", "expected one FILE");
    if (!model && !(model = ui_default_model()))
        return ui_usage_error("ppl", "no model: give -m MODEL");
    size_t tlen;
    const char *path = argv[optind];
    if (!(text = ui_read_file(path, &tlen)))
        return ui_error("%s: cannot read", path);

    eng_opts eo;
    eng_opts_default(&eo);
    eo.n_threads = (int)threads;
    eo.n_ctx = (uint32_t)n_ctx;
    eo.log = ui_log;
    if (eng_open(&s, model, &eo, err, sizeof err)) {
        rc = ui_error("%s", err);
        goto out;
    }
    const eng_tok *tok = eng_tokenizer(s);
    uint32_t nv = eng_hparams(s)->vocab_size, ctx = eng_n_ctx(s);
    int32_t bos = eng_tok_bos(tok), eos_id = eng_tok_eos(tok);
    if (bos < 0) {
        rc = ui_error("%s: the vocabulary has no BOS token", model);
        goto out;
    }
    size_t cap = ctx + 1;
    ids = malloc(cap * sizeof *ids);
    if (!ids) {
        rc = ui_error("out of memory");
        goto out;
    }
    double nll = 0.0;
    uint64_t n_tok = 0, n_bytes = 0, n_stories = 0, n_cut = 0;
    const char *sep = "<|endoftext|>";
    char *p = text;
    while (p && *p && (max_stories < 0 || (long)n_stories < max_stories)) {
        char *end = strstr(p, sep), *next = end ? end + strlen(sep) : NULL;
        if (!end)
            end = p + strlen(p);
        while (p < end && isspace((unsigned char)*p))
            p++;
        while (end > p && isspace((unsigned char)end[-1]))
            end--;
        size_t len = (size_t)(end - p);
        if (len) {
            size_t n = 0;
            /* encode the story alone, then prepend BOS ourselves */
            size_t need = len + 3;
            if (need > cap) {
                int32_t *q = realloc(ids, need * sizeof *ids);
                if (!q) {
                    rc = ui_error("out of memory");
                    goto out;
                }
                ids = q;
                cap = need;
            }
            ids[0] = bos;
            if (eng_tok_encode(tok, p, len, 0, 0, ids + 1, cap - 1, &n) || n + 1 > cap) {
                rc = ui_error("%s: cannot tokenize story %llu", path,
                              (unsigned long long)n_stories + 1);
                goto out;
            }
            n += 1;
            if (eos && eos_id >= 0)
                ids[n++] = eos_id;
            if (n > ctx)
                n_cut++;
            /* windows of ctx tokens overlapping by one: each token after
             * BOS is predicted exactly once */
            for (size_t w0 = 0; w0 + 1 < n; w0 += ctx - 1) {
                size_t wn = n - w0 < ctx ? n - w0 : ctx;
                eng_reset(s);
                for (size_t i = 0; i + 1 < wn; i++) {
                    if (eng_decode(s, ids[w0 + i], err, sizeof err)) {
                        rc = ui_error("%s", err);
                        goto out;
                    }
                    nll -= log_softmax_at(eng_logits(s), nv, ids[w0 + i + 1]);
                    n_tok++;
                }
            }
            n_bytes += len;
            n_stories++;
        }
        p = next;
    }
    if (n_tok == 0) {
        rc = ui_error("%s: no stories to evaluate", path);
        goto out;
    }
    double ppl = exp(nll / (double)n_tok), bpb = nll / log(2.0) / (double)n_bytes;
    if (json) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "model", json_object_new_string(model));
        json_object_object_add(o, "file", json_object_new_string(path));
        json_object_object_add(o, "stories", json_object_new_int64((int64_t)n_stories));
        json_object_object_add(o, "tokens", json_object_new_int64((int64_t)n_tok));
        json_object_object_add(o, "bytes", json_object_new_int64((int64_t)n_bytes));
        json_object_object_add(o, "nll", json_object_new_double(nll));
        json_object_object_add(o, "ppl", json_object_new_double(ppl));
        json_object_object_add(o, "bits_per_byte", json_object_new_double(bpb));
        json_object_object_add(o, "truncated", json_object_new_int64((int64_t)n_cut));
        puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(o);
    }
    else
        printf("stories %llu, predicted tokens %llu, bytes %llu\n"
               "perplexity %.4f, bits per byte %.4f%s\n",
               (unsigned long long)n_stories, (unsigned long long)n_tok,
               (unsigned long long)n_bytes, ppl, bpb,
               n_cut ? " (long stories scored in windows)" : "");
    rc = UI_EXIT_OK;
out:
    free(ids);
    free(text);
    eng_close(s);
    return rc;
}
