/*
 * ui_opt.c — the one table of options and their limits, and the parser
 * every front end uses.
 *
 * ui_opts[] holds one row per option: its long name (also the /command of
 * cflow-tui that sets it), its letter, the type of its value, the range or
 * the words it takes, what 0 means where 0 is special, where ui_settings
 * keeps it and its help line.  Every `cflow` subcommand and cflow-tui
 * name the rows they take; ui_opts_parse turns argv into a
 * ui_settings once, and ui_opts_help writes --help from the same rows, so
 * a limit is written in one place and every refusal quotes it:
 *
 *   cflow run: bad -n '-5': N from 0 (no limit) to 1073741824
 *
 * A refusal is one line on stderr and exit status 2 (UI_EXIT_USAGE).
 * Values are stored as the type says: UI_T_INT a long, UI_T_FLOAT a
 * double, UI_T_U64 a uint64_t, UI_T_FLAG and UI_T_CHOICE an int,
 * UI_T_STR a const char *, UI_T_LIST and UI_T_CHOICES a ui_ilist;
 * UI_T_STRS appends to ui_settings.models.
 *
 * "The report" (with its section numbers) is the Pipeline-Native
 * Transformers report.
 */
#include "config.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"
#include "ui/common/ui.h"

const char *const ui_onoff[3] = { "off", "on", NULL };
static const char *const kv_types[] = { "auto", "f32", "f16", NULL };
static const char *const out_fmts[] = { "md", "csv", "json", NULL };

#define OFF(f) offsetof(ui_settings, f)
#define CTX_MAX (1L << 24)
#define TOK_MAX (1L << 30)

/* Rows in enum ui_opt_id order (checked by ui_opts_parse). */
const ui_opt ui_opts[UI_O_N] = {
    { UI_O_MODEL, "model", 'm', UI_T_STR, "FILE", 0, 0, NULL, NULL, 0, OFF(model),
      "$CFLOW_MODEL, then the shipped one",
      ".cflow model, or a GGUF, HF folder or llama2.c file (converted once into the cache)" },
    { UI_O_PROMPT, "prompt", 'p', UI_T_STR, "TEXT", 0, 0, NULL, NULL, 0, OFF(prompt),
      NULL, "prompt text" },
    { UI_O_FILE, "file", 'f', UI_T_STR, "FILE", 0, 0, NULL, NULL, 0, OFF(prompt_file),
      NULL, "read the prompt from FILE" },
    { UI_O_N_PREDICT, "n-predict", 'n', UI_T_INT, "N", 0, TOK_MAX, "no limit", NULL, 0,
      OFF(n_predict), NULL, "most tokens to generate" },
    { UI_O_CTX, "ctx", 'c', UI_T_INT, "N", 2, CTX_MAX, "the model's", NULL, 0,
      OFF(n_ctx), NULL, "context size in tokens" },
    { UI_O_THREADS, "threads", 't', UI_T_INT, "N", 0, 1024, "all cores", NULL, 0,
      OFF(threads), NULL, "worker threads" },
    { UI_O_TEMP, "temp", 0, UI_T_FLOAT, "T", 0, 5, "greedy", NULL, 0, OFF(temp), NULL,
      "temperature" },
    { UI_O_TOP_K, "top-k", 0, UI_T_INT, "K", 0, CTX_MAX, "off", NULL, 0, OFF(top_k), NULL,
      "keep the K likeliest tokens" },
    { UI_O_TOP_P, "top-p", 0, UI_T_FLOAT, "P", 0, 1, NULL, NULL, 0, OFF(top_p), NULL,
      "nucleus: the likeliest tokens up to P in all (1 = off)" },
    { UI_O_MIN_P, "min-p", 0, UI_T_FLOAT, "P", 0, 1, "off", NULL, 0, OFF(min_p), NULL,
      "drop tokens below P times the likeliest" },
    { UI_O_REPEAT_PENALTY, "repeat-penalty", 0, UI_T_FLOAT, "R", 0.01, 100, NULL, NULL, 0,
      OFF(rep_penalty), NULL, "penalty of recent tokens (1 = off)" },
    { UI_O_REPEAT_LAST_N, "repeat-last-n", 0, UI_T_INT, "N", 0, 1L << 20, "off", NULL, 0,
      OFF(rep_last_n), NULL, "tokens the penalty looks back" },
    { UI_O_SEED, "seed", 0, UI_T_U64, "S", 0, 0, NULL, NULL, 0, OFF(seed),
      "random, printed with the statistics", "sampling seed" },
    { UI_O_IGNORE_EOS, "ignore-eos", 0, UI_T_FLAG, NULL, 0, 0, NULL, NULL, 0,
      OFF(ignore_eos), NULL, "keep going past end-of-sequence tokens" },
    { UI_O_SYSTEM, "system", 's', UI_T_STR, "TEXT", 0, 0, NULL, NULL, 0, OFF(system),
      NULL, "system prompt" },
    { UI_O_CHAT, "chat", 0, UI_T_FLAG, NULL, 0, 0, NULL, NULL, 0, OFF(chat), NULL,
      "the prompt is one user turn in the model's chat template, after the --system "
      "message if any; the reply goes to stdout" },
    { UI_O_DB, "db", 0, UI_T_STR, "PATH", 0, 0, NULL, NULL, 0, OFF(db),
      "$CFLOW_DB, then $XDG_DATA_HOME/cflow/runs.db or ~/.local/share/cflow/runs.db",
      "run log" },
    { UI_O_NO_LOG, "no-log", 0, UI_T_FLAG, NULL, 0, 0, NULL, NULL, 0, OFF(no_log), NULL,
      "do not record in the run log" },
    { UI_O_NO_PROFILE, "no-profile", 0, UI_T_FLAG, NULL, 0, 0, NULL, NULL, 0,
      OFF(no_profile), NULL, "no per-layer timers or counters" },
    { UI_O_KV_TYPE, "kv-type", 0, UI_T_CHOICE, "T", 0, 0, NULL, kv_types, -1, OFF(kv_f16),
      "auto: f16 for models converted from GGUF, f32 else", "KV cache precision" },
    { UI_O_PREFETCH, "prefetch", 0, UI_T_CHOICE, "on|off", 0, 0, NULL, ui_onoff, 0,
      OFF(prefetch), "$CFLOW_PREFETCH, else off",
      "PREFETCHT0 thread one layer ahead" },
    { UI_O_EXPERT_IO, "expert-io", 0, UI_T_CHOICE, "MODE", 0, 0, NULL, eng_expert_io_names, 0,
      OFF(expert_io), "$CFLOW_EXPERT_IO, else auto",
      "expert fetch: mmap, sync (O_DIRECT reads at the routing layer) or staged (read "
      "at the routing layer, waited for at the injection layer) or auto (mmap where the "
      "model fits in free memory, else staged with a RAM expert cache)" },
    { UI_O_EXPERT_CACHE, "expert-cache", 0, UI_T_SIZE, "SIZE", 0, 0, NULL, NULL, 0,
      OFF(expert_cache), "$CFLOW_EXPERT_CACHE, else auto with --expert-io auto, else off",
      "RAM cache of experts read by sync and staged I/O: auto (the free memory less the "
      "model's dense bytes, the KV cache and a tenth), off, or a size such as 512M or 4G" },
    { UI_O_EXPERT_AHEAD, "expert-ahead", 0, UI_T_CHOICE, "on|off", 0, 0, NULL, ui_onoff, 0,
      OFF(expert_ahead), "$CFLOW_EXPERT_AHEAD, else on",
      "with sync/staged I/O and an expert cache, read the next layer's guessed experts "
      "while this layer runs (standard MoE; never changes the tokens)" },
    { UI_O_EXPERT_AHEAD_LAYERS, "expert-ahead-layers", 0, UI_T_INT, "N", 1, ENG_AHEAD_MAX, NULL,
      NULL, 0, OFF(expert_ahead_layers),
      "$CFLOW_EXPERT_AHEAD_LAYERS, else " ENG_STR(ENG_AHEAD_LAYERS),
      "how many layers ahead look-ahead guesses experts: further starts their reads "
      "earlier and reads more wrong guesses" },
    { UI_O_NO_MMAP, "no-mmap", 0, UI_T_FLAG, NULL, 0, 0, NULL, NULL, 0, OFF(no_mmap), NULL,
      "read the model into memory instead of mapping it (expert banks stay mapped "
      "for sync and staged I/O); by default a model is read in when it takes at most "
      "four fifths of the free memory (beyond half, dropping its cached pages "
      "behind the copy), else mapped" },
    { UI_O_MMAP, "mmap", 0, UI_T_FLAG, NULL, 0, 0, NULL, NULL, 0, OFF(mmap), NULL,
      "map the model file whatever its size, never read it in (--no-mmap wins)" },
    { UI_O_STORIES, "stories", 'n', UI_T_INT, "N", 0, TOK_MAX, "all", NULL, 0,
      OFF(stories), NULL, "only the first N stories" },
    { UI_O_NO_EOS, "no-eos", 0, UI_T_FLAG, NULL, 0, 0, NULL, NULL, 0, OFF(no_eos), NULL,
      "do not predict an end-of-sequence token per story" },
    { UI_O_CHUNKS, "chunks", 0, UI_T_FLAG, NULL, 0, 0, NULL, NULL, 0, OFF(chunks), NULL,
      "score as llama-perplexity does: the whole file one text (BOS first), cut into "
      "chunks of the context whose first token is BOS, the second half of each chunk "
      "predicted" },
    { UI_O_JSON, "json", 'j', UI_T_FLAG, NULL, 0, 0, NULL, NULL, 0, OFF(json), NULL,
      "machine-readable output" },
    { UI_O_CRITICAL_PATH, "critical-path", 'c', UI_T_FLAG, NULL, 0, 0, NULL, NULL, 0,
      OFF(critical_path), NULL, "per layer: attention, dense and expert stream bytes, "
      "the delays, the binding stream; totals B_naive and B_critical (report eq. 4.23)" },
    { UI_O_BYTES_PER_PARAM, "bytes-per-param", 'b', UI_T_FLOAT, "B", 0.001, 64, NULL,
      NULL, 0, OFF(bytes_per_param), "the file's tile bytes",
      "size streams from parameter counts (the report uses 0.5)" },
    { UI_O_KV_CTX, "kv-ctx", 0, UI_T_INT, "N", 0, CTX_MAX, "none", NULL, 0, OFF(kv_ctx), NULL,
      "count in each layer's attention the f16 KV cache a token reads at context N "
      "(a sliding layer: its window; MLA: the latent)" },
    { UI_O_REASONING, "reasoning", 0, UI_T_FLAG, NULL, 0, 0, NULL, NULL, 0, OFF(reasoning),
      NULL, "with --chat, a model that reasons in its own channel (gpt-oss's analysis) "
      "shows that reasoning on stderr; by default it is folded (counted, not shown)" },
    { UI_O_QUANT, "quant", 'q', UI_T_STR, "TYPE", 0, 0, NULL, NULL, 0, OFF(quant), NULL,
      "the weight matrices: f32, f16, q8_0 or q4_0 (every matrix that type), or a "
      "llama-quantize name (q4_k_m, q4_k_s, q5_k_m, q5_k_s, q6_k, q3_k_s, q3_k_m, q3_k_l, "
      "q2_k, iq4_xs, iq4_nl, mxfp4, q4_1, q5_0, q5_1, bf16: its type mix and blocks)" },
    { UI_O_TOKENIZER, "tokenizer", 't', UI_T_STR, "FILE", 0, 0, NULL, NULL, 0,
      OFF(tokenizer), NULL, "tokenizer for sources that lack one (llama2.c: tokenizer.bin)" },
    { UI_O_VFLOW, "vflow", 0, UI_T_FLAG, NULL, 0, 0, NULL, NULL, 0, OFF(vflow), NULL,
      "write the stage-major .vflow layout (report 3.4)" },
    { UI_O_GGUF, "gguf", 0, UI_T_FLAG, NULL, 0, 0, NULL, NULL, 0, OFF(gguf), NULL,
      "write a GGUF in the preset's own architecture that llama.cpp loads (the tiny "
      "presets and the benchmark presets); `cflow convert` copies its blocks bit for bit, "
      "so both engines run identical weights" },
    { UI_O_VOCAB, "vocab", 0, UI_T_STR, "FILE", 0, 0, NULL, NULL, 0, OFF(vocab),
      "a synthetic SentencePiece vocabulary",
      "with --gguf: copy the tokenizer of this GGUF (padded to the preset's vocabulary)" },
    { UI_O_ROUTING, "routing", 0, UI_T_STR, "R", 0, 0, NULL, NULL, 0, OFF(routing), NULL,
      "expert popularity of a MoE preset: uniform (random routers, every expert about as "
      "popular as any other) or zipf[:S] (a router bias drawn from a Zipf-like law of "
      "exponent S, default 1: per layer a random order of the experts, the k-th biased by "
      "-S ln k; built into the weights through one residual dimension held constant, so "
      "llama.cpp runs the same skew from a --gguf file; its embedding drawn with sd 2, so "
      "that each token routes by its own residual as in a trained model, where uniform's "
      "tokens route much alike)" },
    { UI_O_SYNTH_SEED, "seed", 0, UI_T_U64, "S", 0, 0, NULL, NULL, 0, OFF(synth_seed), NULL,
      "seed of the weights" },
    { UI_O_TOK_MODEL, "model", 'm', UI_T_STR, "PATH", 0, 0, NULL, NULL, 0, OFF(model),
      "$CFLOW_MODEL, then the shipped one",
      ".cflow, GGUF, llama2.c tokenizer.bin, tokenizer.json or a Hugging Face directory" },
    { UI_O_BOS, "bos", 0, UI_T_FLAG, NULL, 0, 0, NULL, NULL, 0, OFF(bos), NULL,
      "add the vocabulary's special tokens (BOS)" },
    { UI_O_PARSE_SPECIAL, "parse-special", 0, UI_T_FLAG, NULL, 0, 0, NULL, NULL, 0,
      OFF(parse_special), NULL, "recognise special-token text such as <|im_end|>" },
    { UI_O_PIECES, "pieces", 0, UI_T_FLAG, NULL, 0, 0, NULL, NULL, 0, OFF(pieces), NULL,
      "print id:piece pairs instead" },
    { UI_O_RUNS_MODEL, "model", 'm', UI_T_STR, "M", 0, 0, NULL, NULL, 0, OFF(model), NULL,
      "only runs whose model path contains M or whose hash is M" },
    { UI_O_CSV, "csv", 0, UI_T_FLAG, NULL, 0, 0, NULL, NULL, 0, OFF(csv), NULL,
      "export as CSV" },
    { UI_O_TOKENS, "tokens", 0, UI_T_FLAG, NULL, 0, 0, NULL, NULL, 0, OFF(tokens), NULL,
      "export one record per token instead of per run (CSV), or add each run's tokens "
      "(JSON)" },
    { UI_O_B_MODELS, "model", 'm', UI_T_STRS, "FILE", 0, 0, NULL, NULL, 0, 0,
      "$CFLOW_MODEL, then the shipped one",
      "model (.cflow/.vflow, or GGUF, HF, llama2.c: converted once); repeat for several" },
    { UI_O_B_THREADS, "threads", 't', UI_T_LIST, "LIST", 0, 1024, "all cores", NULL, 0,
      OFF(b_threads), "all cores", "worker threads" },
    { UI_O_B_PROMPT, "n-prompt", 'p', UI_T_LIST, "LIST", 0, 1L << 20, "no pp test", NULL,
      0, OFF(b_prompt), NULL, "prompt lengths" },
    { UI_O_B_GEN, "n-gen", 'n', UI_T_LIST, "LIST", 0, 1L << 20, "no tg test", NULL, 0,
      OFF(b_gen), NULL, "generated tokens" },
    { UI_O_B_DEPTH, "depth", 'd', UI_T_LIST, "LIST", 0, 1L << 20, NULL, NULL, 0,
      OFF(b_depth), NULL, "tokens in the cache before each test" },
    { UI_O_B_BATCH, "batch-decode", 'B', UI_T_LIST, "LIST", 1, 256, NULL, NULL, 0,
      OFF(b_batch), NULL,
      "sequences each tg test decodes together, a token of each a step (one "
      "batched pass, as cflow serve's slots); t/s counts every sequence's "
      "tokens" },
    { UI_O_B_REPS, "repetitions", 'r', UI_T_INT, "N", 1, 1000, NULL, NULL, 0, OFF(reps),
      NULL, "timed runs of each test" },
    { UI_O_B_OUTPUT, "output", 'o', UI_T_CHOICE, "FMT", 0, 0, NULL, out_fmts, 0,
      OFF(output), NULL, "md, csv or json" },
    { UI_O_B_PREFETCH, "prefetch", 0, UI_T_CHOICES, "LIST", 0, 0, NULL, ui_onoff, 0,
      OFF(b_prefetch), NULL, "off,on" },
    { UI_O_B_EXPERT_IO, "expert-io", 0, UI_T_CHOICES, "LIST", 0, 0, NULL, eng_expert_io_names, 0,
      OFF(b_expert_io), "auto", "mmap,sync,staged,auto (auto: as cflow run chooses; the "
      "rows say auto:MODE)" },
    { UI_O_B_AHEAD_LAYERS, "expert-ahead-layers", 0, UI_T_LIST, "LIST", 1, ENG_AHEAD_MAX,
      NULL, NULL, 0, OFF(b_ahead), "$CFLOW_EXPERT_AHEAD_LAYERS, else " ENG_STR(ENG_AHEAD_LAYERS),
      "look-ahead depths, a test each (the model opens with the deepest; the rows "
      "say each in expert_ahead)" },
    { UI_O_B_READ_BW, "read-bw", 0, UI_T_FLOAT, "GBS", 0, 1e6, "measure", NULL, 0,
      OFF(read_bw), NULL, "machine read bandwidth for % bw" },
    { UI_O_B_NO_WARMUP, "no-warmup", 0, UI_T_FLAG, NULL, 0, 0, NULL, NULL, 0,
      OFF(no_warmup), NULL, "skip the untimed warm-up run of each test" },
    { UI_O_B_WARMUP_REPS, "warmup-reps", 0, UI_T_INT, "N", 0, 1000, "none", NULL, 0,
      OFF(warmup_reps), NULL,
      "untimed full repetitions of each test before the timed ones (an expert cache "
      "fills over several: the timed ones then show the steady state)" },
    { UI_O_B_INTERLEAVE, "interleave", 0, UI_T_FLAG, NULL, 0, 0, NULL, NULL, 0,
      OFF(interleave), NULL,
      "the tg tests of the lists' settings (-t, --prefetch, --expert-io, "
      "--expert-ahead-layers) take turns a token each in every repetition, each "
      "timed over its own tokens: one moment of the machine for all, to compare "
      "settings a few % apart" },
    { UI_O_B_SEED, "seed", 0, UI_T_U64, "S", 0, 0, NULL, NULL, 0, OFF(b_seed), NULL,
      "seed of the random tokens" },
    { UI_O_B_ROWS_DIV, "rows-div", 0, UI_T_INT, "K", 1, 64, NULL, NULL, 0, OFF(rows_div),
      NULL, "l1d: divide the output rows by K" },
    { UI_O_B_QD, "qd", 0, UI_T_INT, "N", 1, 4096, NULL, NULL, 0, OFF(qd),
      "the expert reader's", "diskbw: reads in flight" },
    { UI_O_B_DISK_FILE, "file", 0, UI_T_STR, "PATH", 0, 0, NULL, NULL, 0, OFF(disk_file),
      NULL, "diskbw: time this file's storage instead of the model's" },
    { UI_O_HOST, "host", 0, UI_T_STR, "ADDR", 0, 0, NULL, NULL, 0, OFF(host), "127.0.0.1",
      "address to listen on (an IPv4 or IPv6 address or a name; 0.0.0.0 or :: for every "
      "interface)" },
    { UI_O_PORT, "port", 0, UI_T_INT, "N", 0, 65535, "any free port", NULL, 0, OFF(port), NULL,
      "TCP port" },
    { UI_O_PARALLEL, "parallel", 0, UI_T_INT, "N", 1, 64, NULL, NULL, 0, OFF(parallel), NULL,
      "slots: requests generated at once, each with its own KV cache of --ctx tokens" },
    { UI_O_QUEUE, "queue", 0, UI_T_INT, "N", 0, 4096, NULL, NULL, 0, OFF(queue), NULL,
      "requests that may wait for a slot; more get 503 with Retry-After" },
    { UI_O_TIMEOUT, "timeout", 0, UI_T_INT, "S", 1, 86400, NULL, NULL, 0, OFF(timeout), NULL,
      "seconds a connection may stay idle (a slow client is dropped)" },
    { UI_O_API_KEY, "api-key", 0, UI_T_STR, "KEY", 0, 0, NULL, NULL, 0, OFF(api_key),
      "none", "require \"Authorization: Bearer KEY\" on every endpoint but /health" },
    { UI_O_ALIAS, "alias", 0, UI_T_STR, "NAME", 0, 0, NULL, NULL, 0, OFF(alias),
      "the model file's name", "the model's name in /v1/models, /api/tags and replies" },
    { UI_O_HELP, "help", 'h', UI_T_FLAG, NULL, 0, 0, NULL, NULL, 0, OFF(help), NULL,
      "this text" },
    { UI_O_VERSION, "version", 'V', UI_T_FLAG, NULL, 0, 0, NULL, NULL, 0, OFF(version),
      NULL, "version and kernel tier" },
};

void ui_settings_default(ui_settings *s)
{
    eng_sampling d;
    eng_sampling_default(&d);
    memset(s, 0, sizeof *s);
    s->n_predict = 128;
    s->temp = d.temp;
    s->top_k = d.top_k;
    s->top_p = d.top_p;
    s->min_p = d.min_p;
    s->rep_penalty = d.rep_penalty;
    s->rep_last_n = d.rep_last_n;
    s->seed = d.seed;
    s->kv_f16 = -1;
    s->prefetch = -1;
    s->expert_io = -1;
    s->expert_cache = -1;
    s->expert_ahead = -1;
    /* llama-bench's tests: pp512 and tg128, five repetitions */
    s->b_prompt = (ui_ilist){ { 512 }, 1 };
    s->b_gen = (ui_ilist){ { 128 }, 1 };
    s->b_depth = (ui_ilist){ { 0 }, 1 };
    s->b_batch = (ui_ilist){ { 1 }, 1 };
    s->b_threads = (ui_ilist){ { 0 }, 1 };
    s->b_prefetch = (ui_ilist){ { 0 }, 1 };
    s->b_expert_io = (ui_ilist){ { 3 }, 1 };   /* auto, as run and the TUI */
    s->b_ahead = (ui_ilist){ { 0 }, 1 };       /* the session's depth */
    s->reps = 5;
    s->rows_div = 1;
    s->b_seed = 1;
    s->synth_seed = 1;
}

/* A seed nobody chose: from the kernel's random pool, else the clock. */
static uint64_t random_seed(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        v = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec ^
            ((uint64_t)getpid() << 32);
    }
    return v;
}

void ui_settings_sampling(const ui_settings *s, eng_sampling *sp)
{
    sp->temp = (float)s->temp;
    sp->top_k = (int)s->top_k;
    sp->top_p = (float)s->top_p;
    sp->min_p = (float)s->min_p;
    sp->rep_penalty = (float)s->rep_penalty;
    sp->rep_last_n = (int)s->rep_last_n;
    sp->seed = s->given[UI_O_SEED] ? s->seed : random_seed();
}

void ui_settings_eng_opts(const ui_settings *s, eng_opts *eo)
{
    eng_opts_default(eo);
    eo->n_threads = (int)s->threads;
    eo->n_ctx = (uint32_t)s->n_ctx;
    eo->kv_f16 = s->kv_f16;
    eo->prefetch = s->prefetch;
    eo->expert_io = s->expert_io;
    eo->expert_cache = s->expert_cache;
    eo->expert_ahead = s->expert_ahead;
    eo->expert_ahead_layers = (int)s->expert_ahead_layers;
    eo->no_mmap = ui_no_mmap(s);
    eo->log = ui_log;
}

const ui_opt *ui_opt_find(const char *name)
{
    for (int i = 0; i < UI_O_N; i++)
        if (!strcmp(ui_opts[i].name, name))
            return &ui_opts[i];
    return NULL;
}

static void choice_words(const char *const *c, const char *sep, char *buf, size_t n)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; c[i] && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%s", i ? sep : "", c[i]);
}

static void num_text(double v, int is_int, char *buf, size_t n)
{
    if (is_int)
        snprintf(buf, n, "%.0f", v);
    else
        snprintf(buf, n, "%g", v);
}

void ui_opt_range(const ui_opt *o, char *buf, size_t n)
{
    char lo[48], hi[48], words[128];
    int is_int = o->type == UI_T_INT || o->type == UI_T_LIST;
    num_text(o->min, is_int, lo, sizeof lo);
    num_text(o->max, is_int, hi, sizeof hi);
    if (o->zero && o->min == 0) {
        size_t k = strlen(lo);
        snprintf(lo + k, sizeof lo - k, " (%s)", o->zero);
    }
    switch (o->type) {
    case UI_T_INT:
    case UI_T_FLOAT:
        if (o->zero && o->min > 0)  /* 0 is a word, then a gap: "0 (the model's) or 2-" */
            snprintf(buf, n, "%s from %s to %s, or 0 (%s)", o->arg, lo, hi, o->zero);
        else
            snprintf(buf, n, "%s from %s to %s", o->arg, lo, hi);
        break;
    case UI_T_U64:
        snprintf(buf, n, "%s from 0 to %" PRIu64, o->arg, UINT64_MAX);
        break;
    case UI_T_LIST:
        snprintf(buf, n, "a list (a,b,c or a-b or a-b+step) of %s to %s", lo, hi);
        break;
    case UI_T_CHOICE:
        choice_words(o->choices, ", ", words, sizeof words);
        snprintf(buf, n, "one of %s", words);
        break;
    case UI_T_CHOICES:
        choice_words(o->choices, ", ", words, sizeof words);
        snprintf(buf, n, "a comma-separated list of %s", words);
        break;
    case UI_T_SIZE:
        snprintf(buf, n, "auto, off or a size such as 512M or 4G");
        break;
    default:
        snprintf(buf, n, "%s", o->arg ? o->arg : "no value");
    }
}

static int choice_index(const char *const *c, const char *s)
{
    for (int i = 0; c[i]; i++)
        if (!strcmp(c[i], s))
            return i;
    return -1;
}

/* One item of a list: "a", "a-b" (step 1) or "a-b+s" of longs in
 * [min, max], or one of the choices. */
static int list_item(const ui_opt *o, char *tok, ui_ilist *out)
{
    long lo = (long)o->min, hi = (long)o->max, a, b, step = 1;
    if (o->type == UI_T_CHOICES) {
        int i = choice_index(o->choices, tok);
        if (i < 0 || out->n == UI_LIST_MAX)
            return -1;
        out->v[out->n++] = i;
        return 0;
    }
    char *dash = strchr(tok + 1, '-'), *plus = dash ? strchr(dash, '+') : NULL;
    if (plus) {
        *plus = '\0';
        if (ui_parse_int(plus + 1, 1, hi > 0 ? hi : 1, &step))
            return -1;
    }
    if (dash)
        *dash = '\0';
    if (ui_parse_int(tok, lo, hi, &a))
        return -1;
    b = a;
    if (dash && (ui_parse_int(dash + 1, lo, hi, &b) || b < a))
        return -1;
    for (long v = a; v <= b; v += step) {
        if (out->n == UI_LIST_MAX)
            return -1;
        out->v[out->n++] = v;
    }
    return 0;
}

/* "x,y,z": every item as list_item takes it, at least one. */
static int parse_list(const ui_opt *o, const char *s, ui_ilist *out)
{
    char buf[512];
    out->n = 0;
    if (!*s || strlen(s) >= sizeof buf)
        return -1;
    strcpy(buf, s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save))
        if (list_item(o, tok, out))
            return -1;
    return out->n ? 0 : -1;
}

int ui_opt_value(const ui_opt *o, const char *arg, void *out, char *err, size_t errlen)
{
    int bad = 0;
    double d;
    long v;
    int i;
    switch (o->type) {
    case UI_T_FLAG: *(int *)out = 1; break;
    case UI_T_STR:
    case UI_T_STRS: *(const char **)out = arg; break;
    case UI_T_INT:
        if (!(bad = ui_parse_int(arg, (long)o->min, (long)o->max, &v)) ||
            (o->zero && !ui_parse_int(arg, 0, 0, &v)))
            bad = 0, *(long *)out = v;
        break;
    case UI_T_FLOAT:
        if (!(bad = ui_parse_float(arg, o->min, o->max, &d)))
            *(double *)out = d;
        break;
    case UI_T_U64: bad = ui_parse_u64(arg, (uint64_t *)out); break;
    case UI_T_SIZE: bad = eng_expert_cache_from_text(arg, (int64_t *)out); break;
    case UI_T_CHOICE:
        if (!(bad = (i = choice_index(o->choices, arg)) < 0))
            *(int *)out = i + o->base;
        break;
    case UI_T_LIST:
    case UI_T_CHOICES: bad = parse_list(o, arg, out); break;
    }
    if (bad)
        ui_opt_range(o, err, errlen);
    return bad ? -1 : 0;
}

/* The flag as the user wrote it: -n or --n-predict. */
static void flag_name(const ui_opt *o, int as_short, char *buf, size_t n)
{
    if (as_short && o->short_name)
        snprintf(buf, n, "-%c", o->short_name);
    else
        snprintf(buf, n, "--%s", o->name);
}

static int refuse(const char *prog, const char *fmt, const char *a, const char *b)
{
    char line[1024];
    snprintf(line, sizeof line, fmt, a, b);
    ui_eprintf("%s: %s\n", prog, line);
    return UI_EXIT_USAGE;
}

static int store(const char *prog, const ui_opt *o, const char *arg, int as_short,
                 ui_settings *s)
{
    char err[256], flag[64], line[512];
    void *at = (char *)s + o->off;
    if (o->type == UI_T_STRS) {
        if (s->n_models == UI_LIST_MAX)
            return refuse(prog, "too many %s (at most %s)", "models", "32");
        at = &s->models[s->n_models++];
    }
    if (ui_opt_value(o, arg, at, err, sizeof err)) {
        flag_name(o, as_short, flag, sizeof flag);
        snprintf(line, sizeof line, "bad %s '%s': %s", flag, arg, err);
        return refuse(prog, "%s%s", line, "");
    }
    s->given[o->id] = 1;
    return -1;
}

int ui_opts_parse(const ui_optset *set, int argc, char **argv, ui_settings *s,
                  int *first_arg)
{
    const char *prog = set->prog;
    const int *ids = set->ids;
    struct option lo[UI_O_N + 2];
    char shorts[3 * UI_O_N + 2] = ":", flag[64];
    size_t nl = 0, ns = 1;
    for (const int *id = ids; *id != UI_O_END; id++) {
        const ui_opt *o = &ui_opts[*id];
        if (o->id != *id)   /* a row added out of enum ui_opt_id's order */
            return refuse(prog, "internal error: the option table is out of order at "
                                "--%s%s", o->name, "");
        lo[nl++] = (struct option){ o->name, o->type == UI_T_FLAG ? no_argument
                                                                  : required_argument,
                                    NULL, 256 + *id };
        if (o->short_name) {
            shorts[ns++] = o->short_name;
            if (o->type != UI_T_FLAG)
                shorts[ns++] = ':';
        }
    }
    for (const int *id = ids; *id != UI_O_END; id++)
        if (*id == UI_O_B_DEPTH)  /* bench's --depth is also llama-bench's --n-depth */
            lo[nl++] = (struct option){ "n-depth", required_argument, NULL, 256 + *id };
    lo[nl] = (struct option){ 0, 0, 0, 0 };
    shorts[ns] = '\0';
    int c, li;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, shorts, lo, &li)) != -1) {
        const ui_opt *o = NULL;
        int as_short = c < 256;
        if (c >= 256)
            o = &ui_opts[c - 256];
        else if (c != '?' && c != ':')
            for (const int *id = ids; *id != UI_O_END && !o; id++)
                if (ui_opts[*id].short_name == c)
                    o = &ui_opts[*id];
        if (c == ':') {
            for (const int *id = ids; *id != UI_O_END && !o; id++)
                if (ui_opts[*id].short_name == optopt || 256 + *id == optopt)
                    o = &ui_opts[*id];
            if (!o)
                return refuse(prog, "%s needs a value%s", argv[optind - 1], "");
            char range[256];
            ui_opt_range(o, range, sizeof range);
            flag_name(o, optopt < 256, flag, sizeof flag);
            return refuse(prog, "%s needs a value: %s", flag, range);
        }
        if (!o && optopt >= 256)
            return refuse(prog, "--%s takes no value (%s)", ui_opts[optopt - 256].name,
                          argv[optind - 1]);
        if (!o) {
            if (optopt && optopt < 256)
                snprintf(flag, sizeof flag, "-%c", optopt);
            else
                snprintf(flag, sizeof flag, "%s", argv[optind - 1]);
            return refuse(prog, "unknown option '%s' ('%s --help' lists them)", flag, prog);
        }
        int r = store(prog, o, optarg, as_short, s);
        if (r >= 0)
            return r;
    }
    *first_arg = optind;
    if (s->help || s->version) {
        set->help(s);
        return UI_EXIT_OK;
    }
    if (set->nargs == 0 && optind < argc)
        return refuse(prog, "unexpected argument '%s'%s", argv[optind], "");
    if (set->nargs > 0 && argc - optind != set->nargs)
        return refuse(prog, "expected %s%s", set->nargs == 1 ? "one " : "", set->args);
    return -1;
}

static void value_text(const ui_opt *o, const ui_settings *s, char *buf, size_t n)
{
    const void *at = (const char *)s + o->off;
    buf[0] = '\0';
    switch (o->type) {
    case UI_T_INT: {
        long v = *(const long *)at;
        if (v == 0 && o->zero)
            snprintf(buf, n, "%s", o->zero);
        else
            snprintf(buf, n, "%ld", v);
        break;
    }
    case UI_T_FLOAT: snprintf(buf, n, "%.2f", *(const double *)at); break;
    case UI_T_U64: snprintf(buf, n, "%" PRIu64, *(const uint64_t *)at); break;
    case UI_T_STR: {
        const char *v = *(const char *const *)at;
        snprintf(buf, n, "%s", v ? v : "");
        break;
    }
    case UI_T_SIZE: {
        int64_t v = *(const int64_t *)at;
        if (v >= 0)
            snprintf(buf, n, v ? "%" PRId64 : "off", v);
        else if (v == ENG_CACHE_AUTO)
            snprintf(buf, n, "auto");
        break;
    }
    case UI_T_CHOICE: {
        int i = *(const int *)at - o->base;
        if (i >= 0 && o->choices[i])
            snprintf(buf, n, "%s", o->choices[i]);
        break;
    }
    case UI_T_LIST:
    case UI_T_CHOICES: {
        const ui_ilist *l = at;
        size_t k = 0;
        for (unsigned i = 0; i < l->n && k < n; i++) {
            if (o->type == UI_T_CHOICES)
                k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? "," : "",
                                      o->choices[l->v[i]]);
            else
                k += (size_t)snprintf(buf + k, n - k, "%s%ld", i ? "," : "", l->v[i]);
        }
        break;
    }
    default: break;
    }
}

/* text after a column of `indent` cells, wrapped at 79 */
static void wrap(FILE *f, const char *text, int indent)
{
    int col = indent;
    while (*text) {
        const char *sp = strchr(text, ' ');
        int len = sp ? (int)(sp - text) : (int)strlen(text);
        if (col > indent && col + 1 + len > 79) {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
        } else if (col > indent) {
            fputc(' ', f);
            col++;
        }
        fwrite(text, 1, (size_t)len, f);
        col += len;
        text += len;
        while (*text == ' ')
            text++;
    }
    fputc('\n', f);
}

void ui_opts_help(FILE *f, const int *ids, const ui_settings *s)
{
    for (const int *id = ids; *id != UI_O_END; id++) {
        const ui_opt *o = &ui_opts[*id];
        char head[64], dv[160], range[256] = "", line[768];
        snprintf(head, sizeof head, "%c%c%c --%s%s%s", o->short_name ? '-' : ' ',
                 o->short_name ? o->short_name : ' ', o->short_name ? ',' : ' ', o->name,
                 o->arg ? " " : "", o->arg ? o->arg : "");
        if (o->dflt)
            snprintf(dv, sizeof dv, "%s", o->dflt);
        else
            value_text(o, s, dv, sizeof dv);
        if (o->type == UI_T_INT || o->type == UI_T_FLOAT || o->type == UI_T_LIST ||
            (o->type == UI_T_CHOICE && o->choices != out_fmts))
            ui_opt_range(o, range, sizeof range);
        snprintf(line, sizeof line, "%s%s%s%s%s%s", o->help, range[0] ? "; " : "", range,
                 dv[0] ? " (default " : "", dv, dv[0] ? ")" : "");
        fprintf(f, "  %-24s ", head);
        if (strlen(head) > 24)
            fprintf(f, "\n%27s", "");
        wrap(f, line, 27);
    }
}
