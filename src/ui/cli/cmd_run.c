/*
 * cmd_run.c — `cflow run`: prompt in, continuation out.
 *
 * Contract (tests and scripts rely on it): stdout carries only the
 * generated continuation — not the prompt, no trailing decoration; the
 * statistics go to stderr.  On a terminal the continuation's control
 * characters but newline and tab are escaped (put_text).  --temp 0 is
 * greedy.  Without a prompt the model starts from BOS.
 *
 * --chat with a model that answers in channels (gpt-oss's harmony,
 * eng_harmony_token): stdout carries the final channel alone; the analysis
 * channel (its reasoning) is folded, counted in the statistics, or with
 * --reasoning shown on stderr as it comes; the reply ends at <|return|>
 * (its <|end|> only ends a message).
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "ui/cli/cli.h"

static const int run_opts[] = {
    UI_O_MODEL, UI_O_PROMPT, UI_O_FILE, UI_O_N_PREDICT, UI_O_CTX, UI_O_THREADS,
    UI_O_TEMP, UI_O_TOP_K, UI_O_TOP_P, UI_O_MIN_P, UI_O_REPEAT_PENALTY,
    UI_O_REPEAT_LAST_N, UI_O_SEED, UI_O_IGNORE_EOS, UI_O_CHAT, UI_O_REASONING, UI_O_SYSTEM,
    UI_O_DB, UI_O_NO_LOG,
    UI_O_NO_PROFILE, UI_O_KV_TYPE, UI_O_PREFETCH, UI_O_EXPERT_IO, UI_O_EXPERT_CACHE,
    UI_O_EXPERT_AHEAD, UI_O_EXPERT_AHEAD_LAYERS, UI_O_NO_MMAP, UI_O_MMAP,
    UI_O_HELP, UI_O_END
};

static void help(const ui_settings *d)
{
    printf("usage: cflow run [-m MODEL] [-p PROMPT] [-n N] [OPTIONS]\n\n"
           "Generate a continuation of PROMPT (or of BOS when there is none).\n"
           "Only the continuation goes to stdout; statistics go to stderr.\n\n");
    ui_opts_help(stdout, run_opts, d);
}

/* Why the generation ended, as the statistics say it. */
enum run_stop { STOP_EOS = 0, STOP_LIMIT, STOP_CTX, STOP_INT, STOP_TERM, STOP_PIPE };
static const char *const stop_text[] = { "end of text", "the -n limit", "context full",
                                         "Ctrl-C", "SIGTERM", "the output's reader leaving" };

/* Ctrl-C or SIGTERM stops the generation between two tokens; the
 * statistics and the run log still come, and a second one kills as usual
 * (SA_RESETHAND).  A reader that leaves (`| head -c 10`: EPIPE, SIGPIPE
 * ignored meanwhile) stops it the same way.  The exit status is then the
 * one a shell reports for the signal: 130, 143, 141. */
static volatile sig_atomic_t got_sig;
static void on_int(int sig)
{
    got_sig = sig;
}

/* One generation: the session, the tokens so far and what the loop
 * counts. */
typedef struct run_ctx {
    const ui_settings *o;
    eng_session *s;
    eng_sampler *smp;
    ui_runlog   *rl;          /* the run log's writer */
    prof        *p;           /* the profiler on s, NULL none */
    int32_t     *ids;         /* prompt + generated tokens [cap] */
    size_t       n_ids, cap;
    long         n_out;       /* tokens generated (the last needs no decode) */
    long         n_shift;     /* context shifts */
    uint32_t     n_keep;      /* tokens a shift keeps */
    uint64_t     n_dropped;   /* tokens the shifts dropped */
    int          stop;        /* enum run_stop */
    int          tty;         /* stdout is a terminal: the text is escaped */
    int          harmony;     /* --chat in gpt-oss's channels */
    long         n_folded;    /* tokens of its analysis channel */
    char         err[512];
} run_ctx;

/* Generated text to stdout.  On a terminal its control characters but
 * newline and tab are escaped (ui_fputs_text): a byte token can emit ESC
 * and a model, prompted or not, can spell an escape sequence.  Piped, the
 * bytes go out as the model made them. */
static int put_text(run_ctx *r, const char *buf, size_t n)
{
    if (r->tty)
        ui_fputs_text(stdout, buf, n);
    else
        fwrite(buf, 1, n, stdout);
    if (fflush(stdout) == 0 && !ferror(stdout))
        return 0;
    /* the reader left: a stop; any other failure (a closed stdout, a
     * full disk) loses text: an error */
    if (errno == EPIPE) {
        r->stop = STOP_PIPE;
        return 1;
    }
    snprintf(r->err, sizeof r->err, "standard output: %s", strerror(errno));
    return -1;
}

static int open_session(run_ctx *r, const char *model)
{
    const ui_settings *o = r->o;
    eng_opts eo;
    ui_settings_eng_opts(o, &eo);
    if (eng_open(&r->s, model, &eo, r->err, sizeof r->err))
        return ui_error("%s", r->err);
    /* --expert-io auto says what it chose: staged reads say so from the
     * engine (with the cache's size), the mapping here */
    if (eng_hparams(r->s)->n_experts && eng_expert_io_auto(r->s) &&
        eng_expert_io(r->s) == ENG_XIO_MMAP)
        ui_eprintf("cflow: %s fits in the free memory: experts are read in place "
                "(mmap; --expert-io auto)\n", model);
    return 0;
}

/* The prompt: BOS (when the vocabulary wants it) + text; BOS alone
 * without a text.  A prompt longer than the context is refused before
 * all of it is tokenized. */
static int encode_prompt(run_ctx *r, const char *model, const char *prompt)
{
    const eng_tok *tok = eng_tokenizer(r->s);
    size_t plen = prompt ? strlen(prompt) : 0;
    size_t extra = 1 + (r->o->n_predict ? (size_t)r->o->n_predict : 256);
    int erc = eng_tok_encode_alloc(tok, prompt ? prompt : "", plen, 1, 1, eng_n_ctx(r->s),
                                   extra, &r->ids, &r->n_ids, r->err, sizeof r->err);
    if (erc == ENG_ECTX)
        return ui_error("%s: the prompt is at least %zu tokens but the context holds %u",
                        model, r->n_ids, eng_n_ctx(r->s));
    if (erc)
        return ui_error("%s: cannot tokenize the prompt: %s", model, r->err);
    r->cap = r->n_ids + extra;
    if (r->n_ids == 0) {
        int32_t bos = eng_tok_bos(tok);
        if (bos < 0)
            return ui_error("%s: no prompt and the vocabulary has no BOS token", model);
        r->ids[r->n_ids++] = bos;
    }
    return 0;
}

/* Decode next; when the cache is full, keep the prompt (at most a
 * quarter of the context) and drop half of what follows it.  1 when
 * there is nothing to drop. */
static int decode_next(run_ctx *r, int32_t next)
{
    int drc = eng_decode(r->s, next, r->err, sizeof r->err);
    if (drc == ENG_ECTX) {
        uint32_t drop = (eng_n_past(r->s) - r->n_keep + 1) / 2;
        if (drop == 0)
            return 1;
        drc = eng_shift(r->s, r->n_keep, drop, r->err, sizeof r->err);
        if (!drc)
            drc = eng_decode(r->s, next, r->err, sizeof r->err);
        r->n_shift++;
        r->n_dropped += drop;
    }
    return drc;
}

/* Room for one more token: -n 0 (no limit) grows the buffer. */
static int reserve_one(run_ctx *r)
{
    if (r->n_ids < r->cap)
        return 0;
    int32_t *p = realloc(r->ids, 2 * r->cap * sizeof *p);
    if (!p)
        return -1;
    r->ids = p;
    r->cap *= 2;
    return 0;
}

/* Sample, print and decode until end of text or -n; 0 or the exit code
 * after an error. */
static int generate(run_ctx *r)
{
    const eng_tok *tok = eng_tokenizer(r->s);
    const long n_predict = r->o->n_predict ? r->o->n_predict : LONG_MAX;
    eng_detok dt;
    char buf[256];
    int32_t eos = eng_tok_eos(tok), eot = eng_tok_eot(tok);
    eng_harmony hm;
    eng_harmony_init(&hm);
    eng_detok_init(&dt);
    dt.prev = r->ids[r->n_ids - 1];
    r->n_keep = r->n_ids < eng_n_ctx(r->s) / 4 ? (uint32_t)r->n_ids : eng_n_ctx(r->s) / 4;
    r->stop = STOP_LIMIT;
    int wrc = 0;
    for (long i = 0; i < n_predict; i++) {
        if (got_sig) {
            r->stop = got_sig == SIGTERM ? STOP_TERM : STOP_INT;
            break;
        }
        int32_t next = eng_sampler_sample(r->smp, eng_logits(r->s), r->ids, r->n_ids);
        int ch = r->harmony ? eng_harmony_token(&hm, tok, next) : ENG_HCH_FINAL;
        if (!r->o->ignore_eos && (r->harmony ? ch == ENG_HCH_END : next == eos || next == eot)) {
            r->stop = STOP_EOS;
            break;
        }
        if (reserve_one(r))
            return ui_error("out of memory");
        r->ids[r->n_ids++] = next;
        r->n_out++;
        if (ch == ENG_HCH_ANALYSIS) {         /* the reasoning: folded, or on stderr */
            size_t k = eng_detok_push(&dt, tok, next, buf, sizeof buf);
            r->n_folded++;
            if (r->o->reasoning)
                ui_fputs_text(stderr, buf, k);
        } else if (ch == ENG_HCH_FINAL && !eng_tok_is_control(tok, next)) {
            if ((wrc = put_text(r, buf, eng_detok_push(&dt, tok, next, buf, sizeof buf))))
                break;
        } else if (r->harmony) {
            eng_detok_push(&dt, tok, next, buf, sizeof buf);   /* (the structure) */
        }
        if (i + 1 == n_predict)
            break;
        int drc = decode_next(r, next);
        if (drc == 1) {
            r->stop = STOP_CTX;
            break;
        }
        if (drc)
            return ui_error("%s", r->err);
        ui_runlog_token(r->rl);
    }
    if (!wrc)
        wrc = put_text(r, buf, eng_detok_flush(&dt, buf, sizeof buf));
    return wrc < 0 ? ui_error("%s", r->err) : 0;
}

static void print_stats(const run_ctx *r, const char *model, const eng_sampling *sp)
{
    eng_stats st;
    eng_get_stats(r->s, &st);
    if (r->stop == STOP_LIMIT)
        fprintf(stderr, "\ncflow: stopped at the -n limit (%ld tokens)", r->n_out);
    else if (r->stop == STOP_CTX)
        fprintf(stderr, "\ncflow: stopped: context full (%u tokens), nothing left to drop",
                eng_n_ctx(r->s));
    else
        fprintf(stderr, "\ncflow: stopped by %s after %ld tokens%s", stop_text[r->stop],
                r->n_out, r->o->n_predict ? "" : " (no -n limit)");
    if (r->stop == STOP_EOS && r->o->n_predict)
        fprintf(stderr, " of at most %ld", r->o->n_predict);
    fputc('\n', stderr);
    if (sp->temp > 0)
        fprintf(stderr, "cflow: sampling: temperature %.2f, seed %llu (--seed %llu replays "
                        "it)\n", (double)sp->temp, (unsigned long long)sp->seed,
                (unsigned long long)sp->seed);
    if (r->n_folded)
        fprintf(stderr, "cflow: the reply's reasoning (its analysis channel): %ld tokens, %s\n",
                r->n_folded, r->o->reasoning ? "shown above" : "folded (--reasoning shows it)");
    if (r->n_shift)
        fprintf(stderr, "cflow: context full (%u tokens): shifted %ld times, keeping the "
                        "first %u and dropping %llu in all\n",
                eng_n_ctx(r->s), r->n_shift, r->n_keep, (unsigned long long)r->n_dropped);
    const uint64_t copied = eng_weights_copied(r->s);
    char where[96];
    if (copied)
        snprintf(where, sizeof where, "weights read into memory (%.1f MiB; --mmap maps them)",
                 (double)copied / (1024.0 * 1024.0));
    else
        snprintf(where, sizeof where, "weights mapped from the file");
    fprintf(stderr,
            "cflow: model %s, kernels %s, %s\n"
            "cflow: prompt %llu tokens in %.3f s (%.2f tok/s)\n"
            "cflow: generated %ld tokens; decode %llu tokens in %.3f s (%.2f tok/s, %.2f GB/s of weights)\n",
            model, eng_isa(r->s), where, (unsigned long long)st.n_prompt, st.prefill_s,
            st.prefill_s > 0 ? (double)st.n_prompt / st.prefill_s : 0.0,
            r->n_out, (unsigned long long)st.n_gen, st.decode_s,
            st.decode_s > 0 ? (double)st.n_gen / st.decode_s : 0.0,
            st.decode_s > 0 ? (double)st.n_gen * (double)st.bytes_per_token / st.decode_s / 1e9
                            : 0.0);
}

int ui_cmd_run(int argc, char **argv)
{
    ui_settings o;
    eng_sampling sp;
    run_ctx r;
    char *ptext = NULL, *ctext = NULL;
    int rc, first;

    static const ui_optset set = { "cflow run", run_opts, help, NULL, 0 };
    ui_settings_default(&o);
    if ((rc = ui_opts_parse(&set, argc, argv, &o, &first)) >= 0)
        return rc;
    if (o.prompt && o.prompt_file)
        return ui_usage_error("run", "-p and -f are exclusive");
    const char *model = o.model, *prompt = o.prompt, *named;
    if (!model && !(model = ui_default_model()))
        return ui_usage_error("run", "no model: give -m MODEL (no default model is installed)");
    size_t flen;
    if (o.prompt_file &&
        !(ptext = ui_read_text(o.prompt_file, "prompt file", UI_PROMPT_MAX, &flen)))
        return UI_EXIT_ERR;
    if (ptext)
        prompt = ptext;
    if (o.system && !o.chat)
        return free(ptext), ui_usage_error("run", "--system needs --chat");
    if (o.reasoning && !o.chat)
        return free(ptext), ui_usage_error("run", "--reasoning needs --chat");
    char mbuf[PATH_MAX];   /* a GGUF, HF folder or llama2.c file: its cached conversion */
    named = model;
    if (!(model = ui_model_path(model, mbuf, sizeof mbuf)))
        return free(ptext), UI_EXIT_ERR;
    if (o.chat) {               /* one user turn in the model's template */
        char err[512];
        if (eng_chat_prompt(model, o.system, prompt, &ctext, err, sizeof err))
            return free(ptext), ui_error("%s", err);
        prompt = ctext;
    }

    memset(&r, 0, sizeof r);
    r.o = &o;
    r.tty = isatty(STDOUT_FILENO);
    r.harmony = o.chat && eng_chat_of_file(model) == ENG_CHAT_HARMONY;
    ui_settings_sampling(&o, &sp);
    if ((rc = open_session(&r, model)) || (rc = encode_prompt(&r, model, prompt)))
        goto out;
    /* one session and one run in the log (--db, --no-log), a profiler
     * unless --no-profile and --no-log */
    if (!(r.rl = ui_runlog_new(o.db, o.no_log, "cflow run", NULL, NULL))) {
        rc = ui_error("out of memory");
        goto out;
    }
    r.p = ui_run_prof(r.s, o.no_profile, o.no_log);
    ui_runlog_session(r.rl, r.s, r.p, model, named, -1);
    ui_runlog_run(r.rl, &sp);
    if (eng_prefill(r.s, r.ids, r.n_ids, r.err, sizeof r.err)) {
        rc = ui_error("%s", r.err);
        goto out;
    }
    ui_runlog_mark(r.rl);   /* the figures count decode tokens */
    if (!(r.smp = eng_sampler_new(&sp, eng_hparams(r.s)->vocab_size))) {
        rc = ui_error("out of memory");
        goto out;
    }
    struct sigaction sa, ign, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_int;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    ign = sa;
    ign.sa_handler = SIG_IGN;
    ign.sa_flags = 0;
    got_sig = 0;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGPIPE, &ign, NULL);
    rc = generate(&r);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (rc)
        goto out;
    print_stats(&r, model, &sp);
    ui_runlog_run_end(r.rl);
    ui_run_figures(r.rl, r.s, r.p);
    if (ui_runlog_path(r.rl))
        ui_eprintf("cflow: logged run %lld in %s\n", (long long)ui_runlog_run_id(r.rl),
                   ui_runlog_path(r.rl));
    /* (SIGPIPE stays ignored to the end: the statistics go to stderr,
     * which may be a pipe that closed too, and exit flushes stdout) */
    if (r.stop >= STOP_INT)   /* as a shell reports a process the signal ended */
        rc = 128 + (r.stop == STOP_INT ? SIGINT : r.stop == STOP_TERM ? SIGTERM : SIGPIPE);
out:
    ui_runlog_free(r.rl);
    if (r.p)
        eng_set_prof(r.s, NULL);
    prof_free(r.p);
    eng_sampler_free(r.smp);
    eng_close(r.s);
    free(r.ids);
    free(ptext);
    free(ctext);
    return rc;
}
