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
 *
 * --chunks scores as llama.cpp's llama-perplexity does instead, so that
 * the two engines' figures on one file and text can be set side by side
 * (issue 41): the whole file is one text, tokenised with BOS (plain text:
 * "<|endoftext|>" is just characters), cut into n_ctx-token chunks (the
 * last partial one dropped), each chunk's first token replaced by BOS and
 * decoded from an empty cache, and the tokens of its second half (after
 * position n_ctx/2) predicted: n_ctx/2 - 1 a chunk.
 */
#include "config.h"

#include <ctype.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "ui/cli/cli.h"

static const int ppl_opts[] = {
    UI_O_MODEL, UI_O_STORIES, UI_O_CTX, UI_O_THREADS, UI_O_NO_EOS, UI_O_CHUNKS, UI_O_JSON,
    UI_O_KV_TYPE,
    UI_O_PREFETCH, UI_O_EXPERT_IO, UI_O_EXPERT_CACHE, UI_O_EXPERT_AHEAD,
    UI_O_EXPERT_AHEAD_LAYERS, UI_O_NO_MMAP, UI_O_MMAP, UI_O_HELP, UI_O_END
};

static void help(const ui_settings *d)
{
    printf("usage: cflow ppl [OPTIONS] FILE\n\n"
           "Perplexity and bits per byte of MODEL over FILE, whose stories are\n"
           "separated by <|endoftext|>.\n\n");
    ui_opts_help(stdout, ppl_opts, d);
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

/* What the stories add up to. */
typedef struct ppl_sum {
    double   nll;
    uint64_t n_tok, n_bytes, n_stories, n_cut;
} ppl_sum;

typedef struct ppl_ctx {
    eng_session *s;
    int32_t     *ids;        /* BOS + a story's tokens + EOS */
    int          eos;        /* predict an EOS per story */
    char         err[512];
} ppl_ctx;

/* Score one story p[0..len): BOS + its tokens (+ EOS), every token after
 * BOS predicted once, in windows of the context overlapping by one. */
static int score_story(ppl_ctx *c, const char *path, const char *p, size_t len,
                       ppl_sum *sum)
{
    const eng_tok *tok = eng_tokenizer(c->s);
    uint32_t nv = eng_hparams(c->s)->vocab_size, ctx = eng_n_ctx(c->s);
    int32_t eos_id = eng_tok_eos(tok);
    size_t n = 0;
    int32_t *v = NULL;
    /* the story alone, room for BOS in front and EOS behind */
    if (eng_tok_encode_alloc(tok, p, len, 0, 0, 0, 2, &v, &n, c->err, sizeof c->err))
        return ui_error("%s: cannot tokenize story %llu: %s", path,
                        (unsigned long long)sum->n_stories + 1, c->err);
    memmove(v + 1, v, n * sizeof *v);
    v[0] = eng_tok_bos(tok);
    n += 1;
    if (c->eos && eos_id >= 0)
        v[n++] = eos_id;
    free(c->ids);
    c->ids = v;
    if (n > ctx)
        sum->n_cut++;
    for (size_t w0 = 0; w0 + 1 < n; w0 += ctx - 1) {
        size_t wn = n - w0 < ctx ? n - w0 : ctx;
        eng_reset(c->s);
        for (size_t i = 0; i + 1 < wn; i++) {
            if (eng_decode(c->s, c->ids[w0 + i], c->err, sizeof c->err))
                return ui_error("%s", c->err);
            sum->nll -= log_softmax_at(eng_logits(c->s), nv, c->ids[w0 + i + 1]);
            sum->n_tok++;
        }
    }
    sum->n_bytes += len;
    sum->n_stories++;
    return 0;
}

/* --chunks: the text as llama-perplexity scores it (the essay); max > 0:
 * the first max chunks only. */
static int score_chunks(ppl_ctx *c, const char *path, const char *text, long max,
                        ppl_sum *sum)
{
    const eng_tok *tok = eng_tokenizer(c->s);
    uint32_t nv = eng_hparams(c->s)->vocab_size, ctx = eng_n_ctx(c->s);
    size_t n = 0, len = strlen(text);
    int32_t *v = NULL;
    if (eng_tok_encode_alloc(tok, text, len, 1, 0, 0, 0, &v, &n, c->err, sizeof c->err))
        return ui_error("%s: cannot tokenize: %s", path, c->err);
    free(c->ids);
    c->ids = v;
    size_t n_chunk = n / ctx, first = ctx / 2;
    if (max > 0 && (size_t)max < n_chunk)
        n_chunk = (size_t)max;
    if (n_chunk == 0)
        return ui_error("%s: %zu tokens, fewer than one chunk of %u", path, n, ctx);
    for (size_t k = 0; k < n_chunk; k++) {
        const int32_t *t = v + k * ctx;
        eng_reset(c->s);
        for (size_t i = 0; i + 1 < ctx; i++) {
            if (eng_decode(c->s, i ? t[i] : eng_tok_bos(tok), c->err, sizeof c->err))
                return ui_error("%s", c->err);
            if (i >= first) {
                sum->nll -= log_softmax_at(eng_logits(c->s), nv, t[i + 1]);
                sum->n_tok++;
            }
        }
        sum->n_stories++;
        ui_progress(NULL, "ppl", k + 1, n_chunk);
    }
    sum->n_bytes = len;
    return 0;
}

/* Every story of text (at most max of them, 0: all). */
static int score_text(ppl_ctx *c, const char *path, char *text, long max, ppl_sum *sum)
{
    const char *sep = "<|endoftext|>";
    size_t total = strlen(text);
    char *p = text;
    while (p && *p && (max == 0 || (long)sum->n_stories < max)) {
        char *end = strstr(p, sep), *next = end ? end + strlen(sep) : NULL;
        if (!end)
            end = p + strlen(p);
        while (p < end && isspace((unsigned char)*p))
            p++;
        while (end > p && isspace((unsigned char)end[-1]))
            end--;
        size_t len = (size_t)(end - p);
        int rc;
        if (len && (rc = score_story(c, path, p, len, sum)))
            return rc;
        p = next;
        /* a bar on a terminal: stories of -n, else bytes of the file */
        if (max)
            ui_progress(NULL, "ppl", p ? sum->n_stories : (uint64_t)max, (uint64_t)max);
        else
            ui_progress(NULL, "ppl", p ? (uint64_t)(p - text) : total, total);
    }
    return 0;
}

static void print_result(const char *model, const char *path, const ppl_sum *m, int json)
{
    double ppl = exp(m->nll / (double)m->n_tok);
    double bpb = m->nll / log(2.0) / (double)m->n_bytes;
    if (!json) {
        printf("stories %llu, predicted tokens %llu, bytes %llu\n"
               "perplexity %.4f, bits per byte %.4f%s\n",
               (unsigned long long)m->n_stories, (unsigned long long)m->n_tok,
               (unsigned long long)m->n_bytes, ppl, bpb,
               m->n_cut ? " (long stories scored in windows)" : "");
        return;
    }
    json_object *o = json_object_new_object();
    json_object_object_add(o, "model", json_object_new_string(model));
    json_object_object_add(o, "file", json_object_new_string(path));
    json_object_object_add(o, "stories", json_object_new_int64((int64_t)m->n_stories));
    json_object_object_add(o, "tokens", json_object_new_int64((int64_t)m->n_tok));
    json_object_object_add(o, "bytes", json_object_new_int64((int64_t)m->n_bytes));
    json_object_object_add(o, "nll", json_object_new_double(m->nll));
    json_object_object_add(o, "ppl", json_object_new_double(ppl));
    json_object_object_add(o, "bits_per_byte", json_object_new_double(bpb));
    json_object_object_add(o, "truncated", json_object_new_int64((int64_t)m->n_cut));
    puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
                                               JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(o);
}

int ui_cmd_ppl(int argc, char **argv)
{
    ui_settings o;
    ppl_ctx c;
    ppl_sum sum;
    int rc, first;
    char *text = NULL;

    static const ui_optset set = { "cflow ppl", ppl_opts, help, "FILE", 1 };
    ui_settings_default(&o);
    if ((rc = ui_opts_parse(&set, argc, argv, &o, &first)) >= 0)
        return rc;
    const char *model = o.model;
    if (!model && !(model = ui_default_model()))
        return ui_usage_error("ppl", "no model: give -m MODEL");
    size_t tlen;
    const char *path = argv[first];
    if (!(text = ui_read_text(path, "corpus", UI_CORPUS_MAX, &tlen)))
        return UI_EXIT_ERR;
    char mbuf[PATH_MAX];   /* a GGUF, HF folder or llama2.c file: its cached conversion */
    if (!(model = ui_model_path(model, mbuf, sizeof mbuf)))
        return free(text), UI_EXIT_ERR;

    memset(&c, 0, sizeof c);
    memset(&sum, 0, sizeof sum);
    c.eos = !o.no_eos;
    eng_opts eo;
    ui_settings_eng_opts(&o, &eo);
    if (eng_open(&c.s, model, &eo, c.err, sizeof c.err)) {
        rc = ui_error("%s", c.err);
        goto out;
    }
    if (eng_tok_bos(eng_tokenizer(c.s)) < 0) {
        rc = ui_error("%s: the vocabulary has no BOS token", model);
        goto out;
    }
    if ((rc = o.chunks ? score_chunks(&c, path, text, o.stories, &sum)
                       : score_text(&c, path, text, o.stories, &sum)))
        goto out;
    if (sum.n_tok == 0) {
        rc = ui_error("%s: no stories to evaluate", path);
        goto out;
    }
    print_result(model, path, &sum, o.json);
    rc = UI_EXIT_OK;
out:
    free(c.ids);
    free(text);
    eng_close(c.s);
    return rc;
}
