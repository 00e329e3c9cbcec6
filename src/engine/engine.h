/*
 * engine.h — the public face of src/engine: tokenizer, sampler, chat
 * templates and the decoding session that both front ends drive.
 *
 * The engine never prints and never exits.  Failing calls return a
 * negative ENG_E* code and write one line into the caller's err buffer;
 * diagnostics go to the log callback the front end installs.
 *
 * NULL.  Pointer arguments must not be NULL unless the comment of the
 * function says otherwise; the ones that take NULL are the destructors
 * (eng_close, eng_seq_free, eng_tok_free, eng_sampler_free: no-ops),
 * eng_open's opts (defaults), eng_set_trace and eng_set_prof (detach),
 * eng_chat_detect's text (ENG_CHAT_NONE), eng_expert_io_from_name (-1),
 * and the n_reused of eng_prefill_reuse and eng_seq_prefill_reuse.
 *
 * Threads.  A session and its sequences serve one caller at a time: every
 * call on them, and on the session's sequences, comes from one thread at
 * a time (a server's scheduler thread), since they share the session's
 * buffers.  Different sessions are independent.
 * Codes: ENG_E* keep the numbers of the format module's FMT_E* codes,
 * which eng_open maps one to one (eng_session.c).
 */
#ifndef CFLOW_ENGINE_H
#define CFLOW_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "format/cflow_format.h"

enum {
    ENG_OK = 0,
    ENG_EIO = -1, ENG_EFORMAT = -2, ENG_EUNSUP = -3, ENG_ENOMEM = -4,
    ENG_EARG = -5,
    ENG_ECTX = -6,      /* the context window is full */
    ENG_ESTOP = -7,     /* generation was interrupted */
    ENG_ENAN = -8,      /* the model computed NaN or infinity (err names the
                           layer); the position is not taken */
    ENG_ELAST = ENG_ENAN /* the lowest code: every code is in [ENG_ELAST, 0] */
};

typedef void (*eng_log_fn)(void *ud, int level /*0 info,1 warn,2 error*/,
                           const char *msg);

/* ======================================================================= */
/* Tokenizer                                                                */
/* ======================================================================= */
/*
 * Loaded from GGUF-style keys in an fmt_kv (GGUF metadata, the .cflow
 * metadata section, or fmt_vocab_load of llama2.c / HF files):
 *   tokenizer.ggml.model   "llama" (SentencePiece, byte fallback) or
 *                          "gpt2" (byte-level BPE)
 *   tokenizer.ggml.pre     pre-tokenizer for gpt2: "default", "llama3"/
 *                          "llama-bpe", "qwen2", "gpt-2", "falcon",
 *                          "deepseek-llm", "deepseek-coder", "mpt",
 *                          "starcoder", "refact", ...
 *   tokenizer.ggml.tokens / scores / token_type / merges,
 *   tokenizer.ggml.bos_token_id / eos_token_id / unknown_token_id /
 *   padding_token_id, tokenizer.ggml.add_bos_token,
 *   tokenizer.ggml.add_space_prefix, tokenizer.chat_template
 *   tokenizer.cflow.pre_regex (cflow's own: the pre-tokenizer as a list of
 *   PCRE2 expressions, for HF tokenizers without a llama.cpp name; pre is
 *   then "cflow-regex"), tokenizer.cflow.ignore_merges
 */
typedef struct eng_tok eng_tok;

int  eng_tok_load(eng_tok **out, const fmt_kv *kv, char *err, size_t errlen);
void eng_tok_free(eng_tok *t);            /* NULL: nothing */

uint32_t eng_tok_n_vocab(const eng_tok *t);
int32_t  eng_tok_bos(const eng_tok *t);   /* -1 if none */
int32_t  eng_tok_eos(const eng_tok *t);   /* -1 if none */
int32_t  eng_tok_eot(const eng_tok *t);   /* end of turn (<|im_end|>, <|eot_id|>...) or -1 */
int      eng_tok_add_bos(const eng_tok *t); /* does the model want BOS? */
int      eng_tok_is_spm(const eng_tok *t);
/* Is id a control/special token (never printed in completions)? */
int      eng_tok_is_control(const eng_tok *t, int32_t id);

/* Encode text[0..len).  add_special: prepend BOS when the vocabulary asks
 * for it (llama.cpp's add_special); parse_special: recognise special-token
 * strings such as "<|im_end|>" in text.  Writes at most cap ids; *n_out gets
 * the full count (call again with a larger buffer when *n_out > cap).
 * Returns 0 or a negative ENG_E* code. */
int eng_tok_encode(const eng_tok *t, const char *text, size_t len,
                   int add_special, int parse_special, int32_t *ids,
                   size_t cap, size_t *n_out);
/* The same into a buffer of the real count: *ids (malloc'd, the caller
 * frees it) holds *n ids and has room for `extra` more.  max > 0 bounds
 * the work: a text of more than max ids is refused with ENG_ECTX as soon
 * as that is known (first from its length, see eng_tok_count_min, then
 * while encoding), *n a count past max, nothing allocated.  ENG_EFORMAT
 * when a pre-tokenizer expression backtracks past its step limit,
 * ENG_ENOMEM; err gets one line. */
int eng_tok_encode_alloc(const eng_tok *t, const char *text, size_t len,
                         int add_special, int parse_special, size_t max,
                         size_t extra, int32_t **ids, size_t *n, char *err,
                         size_t errlen);
/* Bounds on the ids any text of len bytes encodes to, BOS and EOS
 * included: never more than eng_tok_count_max (4 len + 5 for
 * SentencePiece, 6 len + 2 for byte-level BPE) and never fewer than
 * eng_tok_count_min (len over the longest token text; 0 when some byte
 * has no token). */
size_t eng_tok_count_min(const eng_tok *t, size_t len);
size_t eng_tok_count_max(const eng_tok *t, size_t len);

/* The bytes a token stands for (SentencePiece '▁' as space, <0xNN> byte
 * tokens as the byte, byte-level BPE mapped back to bytes).  Control tokens
 * give their text.  The pointer stays valid while t lives. */
const char *eng_tok_piece(const eng_tok *t, int32_t id, size_t *len);
/* The longest piece in bytes: eng_detok_push never needs more than
 * 3 * (max_piece + 4) bytes of out (invalid bytes become 3-byte U+FFFD). */
size_t      eng_tok_max_piece(const eng_tok *t);

/* A chat's next prompt against the tokens a cache holds.  A reply goes
 * into the cache as the tokens it was sampled as, which need not be those
 * its text encodes to: a name copied from the request piece by piece
 * (" S" "ue") re-encodes as one token (" Sue"), so the next turn's prompt,
 * rendered and encoded whole, would leave the cache there and prefill the
 * rest of the reply again.  Where the prompt ids[0..*n) leaves kv[0..n_kv)
 * at k0 (0 < k0 < both lengths) and the two spell the same bytes on from
 * k0 for a while, the prompt takes the cache's tokens up to the last point
 * where both are at a token boundary with the bytes so far equal, and its
 * own tokens after it, so the model sees its reply as it wrote it (as
 * llama.cpp's chat loop keeps its replies' tokens) and nothing is read
 * twice.  *ids (malloc'd) is freed and replaced by a new malloc'd array
 * and *n set when tokens were taken; not when that would make the prompt
 * max tokens or longer (max 0: no bound), nor when nothing can be taken:
 * then both are left alone.  Returns 0, or -1 out of memory (*ids
 * unchanged).  tok, kv (n_kv may be 0), ids and n must not be NULL. */
int eng_tok_splice_cached(const eng_tok *tok, const int32_t *kv, size_t n_kv, size_t max,
                          int32_t **ids, size_t *n);

/* Streaming detokeniser: feed ids, get bytes that never end inside a
 * UTF-8 sequence.  prev is the previous token (for SentencePiece's rule that
 * a leading space after BOS is dropped).  Returns bytes written to out
 * (cap >= 64 is enough for one token of valid UTF-8 up to 60 bytes plus
 * held bytes; 3 * (eng_tok_max_piece(t) + 4) is always enough; output that
 * does not fit is dropped, whole characters at a time).
 * eng_detok_init sets prev to -1: when streaming a continuation, set prev
 * to the last prompt token (BOS for an empty prompt).  Control and unknown
 * tokens give no bytes (they still become prev).  Malformed UTF-8 comes
 * out as U+FFFD. */
typedef struct eng_detok {
    unsigned char pend[8];
    unsigned      n_pend;
    int32_t       prev;
} eng_detok;
void   eng_detok_init(eng_detok *d);
size_t eng_detok_push(eng_detok *d, const eng_tok *t, int32_t id, char *out,
                      size_t cap);
/* Flush held bytes at the end of a stream (invalid ones as U+FFFD). */
size_t eng_detok_flush(eng_detok *d, char *out, size_t cap);

/* ======================================================================= */
/* Sampling                                                                 */
/* ======================================================================= */
typedef struct eng_sampling {
    float    temp;        /* 0 = greedy */
    int      top_k;       /* 0 = off */
    float    top_p;       /* 1 = off */
    float    min_p;       /* 0 = off */
    float    rep_penalty; /* 1 = off */
    int      rep_last_n;  /* window of history for the penalty */
    uint64_t seed;
} eng_sampling;

void eng_sampling_default(eng_sampling *s);

typedef struct eng_sampler eng_sampler;
/* NULL when n_vocab is 0 or memory runs out. */
eng_sampler *eng_sampler_new(const eng_sampling *p, uint32_t n_vocab);
void         eng_sampler_free(eng_sampler *s);  /* NULL: nothing */
void         eng_sampler_set(eng_sampler *s, const eng_sampling *p);
/* Pick a token from logits[n_vocab] (modified in place).  history holds
 * the ids seen so far (for the repetition penalty). */
int32_t eng_sampler_sample(eng_sampler *s, float *logits,
                           const int32_t *history, size_t n_history);

/* ======================================================================= */
/* Chat templates                                                           */
/* ======================================================================= */
enum eng_chat {
    ENG_CHAT_NONE = 0,  /* plain completion (base models) */
    ENG_CHAT_CHATML, ENG_CHAT_LLAMA2, ENG_CHAT_LLAMA3, ENG_CHAT_ZEPHYR,
    ENG_CHAT_MISTRAL, ENG_CHAT_GEMMA, ENG_CHAT_PHI3, ENG_CHAT_TINYLLAMA,
    ENG_CHAT_DEEPSEEK2, ENG_CHAT_HARMONY,   /* DeepSeek-V2; gpt-oss (channels) */
    ENG_NCHAT
};
typedef struct eng_msg {
    const char *role;     /* "system", "user", "assistant" */
    const char *content;
} eng_msg;

const char *eng_chat_name(enum eng_chat c);
int         eng_chat_from_name(const char *name);  /* -1 if unknown */
/* Recognise a template from the model's Jinja text (NULL/empty: NONE). */
enum eng_chat eng_chat_detect(const char *jinja, size_t len);
/* The family of a model file's tokenizer.chat_template (NONE when it has
 * none, or the file cannot be opened as a model). */
enum eng_chat eng_chat_of_file(const char *model_path);
/* One user turn (after an optional system message, NULL for none) in the
 * template of the model file, the assistant turn opened: what `cflow run
 * --chat` feeds the model.  *out is malloc'd.  ENG_EARG (with a one-line
 * message naming the file) when the model has no chat template. */
int eng_chat_prompt(const char *model_path, const char *system,
                    const char *user, char **out, char *err, size_t errlen);
/* gpt-oss's reply in its harmony channels (ENG_CHAT_HARMONY), token by
 * token after the opener: eng_harmony_token says where a token's text
 * goes: ENG_HCH_NONE for the reply's structure (<|channel|>, the channel's
 * name, <|message|>, <|end|> between messages, <|start|> and the role),
 * the channel of a message's text (analysis: the reasoning, to fold or
 * show on request; final: the answer; other: commentary and tool calls),
 * ENG_HCH_END for the token that ends the reply (<|return|>, <|call|>).
 * <|end|> ends a message, not the reply. */
enum { ENG_HCH_NONE = 0, ENG_HCH_ANALYSIS, ENG_HCH_FINAL, ENG_HCH_OTHER, ENG_HCH_END };
typedef struct eng_harmony {
    int      header, naming, channel;
    char     name[16];
    unsigned name_n;
} eng_harmony;
void eng_harmony_init(eng_harmony *h);
int  eng_harmony_token(eng_harmony *h, const eng_tok *t, int32_t id);
/* Render msgs; with add_assistant, open the assistant turn.  *out is
 * malloc'd (caller frees).  For ENG_CHAT_NONE messages are concatenated
 * (completion mode).  Returns 0 or ENG_ENOMEM. */
int eng_chat_render(enum eng_chat c, const eng_msg *msgs, size_t n,
                    int add_assistant, char **out);

/* ======================================================================= */
/* Session: a model plus its KV cache and decoding state                    */
/* ======================================================================= */
typedef struct eng_session eng_session;

typedef struct eng_opts {
    int        n_threads;    /* 0: all cores */
    uint32_t   n_ctx;        /* 0: the model's max_seq */
    eng_log_fn log;
    void      *log_ud;
    /* KV cache precision: 1 binary16 (half the memory; attention as
     * llama.cpp's CPU flash attention computes it), 0 f32 (attention as
     * llama2.c run.c), -1 auto: f16 for models converted from GGUF, whose
     * reference is llama.cpp with its default f16 cache, else f32.
     * eng_opts_default sets -1. */
    int        kv_f16;
    /* A prompt chunk's attention over an f16 cache: 1 llama.cpp's tiled
     * flash attention (f32 accumulators) where llama.cpp's prefill takes
     * it, a ubatch of 64 tokens or more (eng_forward.c ubatch_tiled); 0
     * the single-query kernel of decode for every position, so that a
     * prompt's logits differ from feeding it to eng_decode token by token
     * only by the batching of the matrix products.  -1: 1.
     * eng_opts_default sets -1. */
    int        prefill_attn;
    /* Expert fetch (enum eng_expert_io) and the PREFETCHT0 thread (1 on,
     * 0 off); -1: from $CFLOW_EXPERT_IO ("mmap", "sync", "staged", "auto")
     * and $CFLOW_PREFETCH ("on"/"1", "off"/"0"), else auto and off.
     * eng_opts_default sets -1.  io_readers: reader threads of sync and
     * staged (0: 2). */
    int        expert_io;
    int        prefetch;
    unsigned   io_readers;
    /* The RAM expert cache of sync/staged I/O, in bytes: the staging slots
     * keep what they read, the expert issued least often lately out first
     * ($CFLOW_XIO_POLICY=crf|lfu|lru, eng_io_cache.c), so an expert
     * routed again is not read again.  0: none (a token's slots only);
     * ENG_CACHE_AUTO: what the kernel says is free (MemAvailable, and the
     * cgroup's memory.max less memory.current where lower) less the
     * model's dense bytes, the KV cache and a margin of a tenth (at least
     * 512 MiB; eng_io.c cache_budget); -1:
     * $CFLOW_EXPERT_CACHE (eng_expert_cache_from_text), else none.
     * eng_opts_default sets -1. */
    int64_t    expert_cache;
    /* Look-ahead (eng_moe_ahead.c): with sync/staged I/O and a RAM expert
     * cache, a standard MoE (expert_delay 0) guesses the next layers'
     * experts with their routers over this layer's output and reads them
     * ahead; the tokens never change.  1 on, 0 off, -1: $CFLOW_EXPERT_AHEAD
     * ("on"/"1", "off"/"0"), else on.  eng_opts_default sets -1. */
    int        expert_ahead;
    /* How many layers ahead look-ahead guesses (1..ENG_AHEAD_MAX); 0:
     * $CFLOW_EXPERT_AHEAD_LAYERS, else ENG_AHEAD_LAYERS. */
    int        expert_ahead_layers;
    /* 1: read the model into anonymous memory with huge pages advised
     * (llama.cpp's --no-mmap: decode streams it faster,
     * docs/perf-log/2026-12-04.md, at the cost of the copy), 0: map the
     * file, -1 (default): read it in when the file is at most half the
     * free memory (MemAvailable, or the cgroup's room; $CFLOW_MEM_FREE
     * stands in), else map it. */
    int        no_mmap;
} eng_opts;

void eng_opts_default(eng_opts *o);

/* Bytes of the model that s read into anonymous memory at open (0: it
 * maps the whole file); eng_opts.no_mmap's outcome.  s must not be NULL. */
uint64_t eng_weights_copied(const eng_session *s);

/* Bytes the session's own KV cache holds (its K and V) for effective layer
 * `layer`, or for every layer when layer < 0: a layer sliding over a window
 * shorter than the context keeps that window only (a ring); a latent-
 * attention layer (DeepSeek-V2) one row of its latent and rotated key a
 * position, no V. */
uint64_t eng_kv_bytes(const eng_session *s, int layer);

/* Open model_path with options o (NULL: eng_opts_default).  0 and *out,
 * or an ENG_E* code with *out NULL and one line in err: ENG_EIO,
 * ENG_EFORMAT, ENG_EUNSUP from the file (the format module's code of the
 * same name), ENG_EARG for a bad option or environment value (eng_env_check,
 * $CFLOW_EXPERT_IO, $CFLOW_PREFETCH ...), ENG_ENOMEM naming what did not
 * fit (the context, the worker threads). */
int  eng_open(eng_session **out, const char *model_path, const eng_opts *o,
              char *err, size_t errlen);
/* The engine's environment outside eng_opts: $CFLOW_ISA (a kernel tier's
 * name, kern_isa_name), $CFLOW_PIN (0 or 1), $CFLOW_MEM_FREE (bytes, K, M and
 * G suffixes) and $CFLOW_FAULT (the test suite's faults, man/cflow.1).
 * 0 when each is unset, empty or valid, else ENG_EARG with one line naming
 * the variable and the value.  eng_open checks it first; a front end may
 * call it before it touches the terminal. */
int  eng_env_check(char *err, size_t errlen);
void eng_close(eng_session *s);             /* NULL: nothing */

const fmt_hparams *eng_hparams(const eng_session *s);
const eng_tok     *eng_tokenizer(const eng_session *s);
const char        *eng_isa(const eng_session *s);
/* The model file's metadata string under key (not NUL-terminated: *len
 * bytes), NULL when absent ("cflow.source", FMT_SYNTH_ROUTING_KEY ...). */
const char        *eng_model_meta(const eng_session *s, const char *key, size_t *len);
/* The chat template family of the session's model (eng_chat_detect of
 * its tokenizer.chat_template; ENG_CHAT_NONE without one). */
enum eng_chat      eng_session_chat(const eng_session *s);
/* 1 when the KV cache holds binary16 (eng_opts.kv_f16 resolved), else 0. */
int                eng_kv_f16(const eng_session *s);
uint32_t           eng_n_ctx(const eng_session *s);
uint32_t           eng_n_past(const eng_session *s);

/* Worker threads for the next token on (0: all cores).  The model stays
 * loaded; results do not depend on the thread count. */
int  eng_set_threads(eng_session *s, int n_threads);   /* 0 or ENG_ENOMEM */
int  eng_threads(const eng_session *s);

/* Forget the cache (n_past = 0). */
void eng_reset(eng_session *s);
/* Make the cache hold tokens[0..n) with the logits after the last: keep
 * the longest prefix of tokens the cache already holds at the same
 * positions, forget the rest, prefill the remainder.  When all n are held
 * the logits come from the copy the last reuse prefill kept, if it ended
 * at n, else the last token runs again.  Reused rows are those a prefill
 * of the same tokens would compute (within rounding: eng_kv.c); rows a
 * shift slid down are never reused.  *n_reused (may be NULL) gets the
 * positions kept.  A conversation re-rendered each turn pays only for its
 * new tokens, a regenerated reply for none of its prompt.  Errors as
 * eng_prefill's. */
int  eng_prefill_reuse(eng_session *s, const int32_t *tokens, size_t n,
                       size_t *n_reused, char *err, size_t errlen);
/* Context shift: when the context is full, drop n_discard positions after
 * the first n_keep (a prompt or BOS worth keeping) and slide the rest
 * down; n_past shrinks by n_discard and decoding goes on.  The cached keys
 * are re-roped in place to their new positions (as llama.cpp's context
 * shift does), not recomputed by prefilling the kept tokens again: a
 * shift costs one pass over the cache instead of a forward pass per kept
 * token, at the price that the kept rows still hold what attention over
 * the dropped tokens made of them.  ENG_EARG when n_keep + n_discard
 * exceeds n_past. */
int  eng_shift(eng_session *s, uint32_t n_keep, uint32_t n_discard, char *err,
               size_t errlen);
/* Feed one token at position n_past; logits of the next token become
 * available through eng_logits.  ENG_ECTX when the context is full.
 * ENG_EIO when the model file shrank while mapped (the session then
 * refuses every later token), or when an expert read of sync/staged I/O
 * failed (err names the file and offset; the token takes no position).
 * ENG_EFORMAT when an expert's bytes, checked at their first use with
 * sync/staged I/O, are refused (err names the file, layer, expert and
 * tile; each later token routed to it is refused too).  ENG_ENAN when
 * the logits are not all finite: err names the first layer whose residual
 * stream held NaN or infinity (found by running the token again with a
 * check at every layer end, so a healthy token pays only the scan of its
 * logits). */
int  eng_decode(eng_session *s, int32_t token, char *err, size_t errlen);
/* Feed n tokens (prompt).  Logits are those after the last one; errors
 * as eng_decode's (ENG_ENAN: the last token's logits). */
int  eng_prefill(eng_session *s, const int32_t *tokens, size_t n, char *err,
                 size_t errlen);
/* Logits [n_vocab] of the position after the last fed token. */
float *eng_logits(eng_session *s);

/* ---- Sequences: several streams of tokens over one opened model ---- */
/*
 * A sequence is what one stream of tokens owns: its KV cache (of the
 * session's precision, eng_kv_f16), its position, the tokens it holds
 * (for eng_seq_prefill_reuse) and its logits.  The model, the weights,
 * the worker pool, the tokenizer, expert I/O, the profiler and the
 * statistics are the session's and shared, so a sequence costs its KV
 * cache.  The session's own calls above (eng_decode, eng_prefill,
 * eng_prefill_reuse, eng_shift, eng_reset, eng_logits, eng_n_past,
 * eng_n_ctx) run on a sequence the session opens with; the eng_seq_*
 * calls are the same on another, with the same codes.  A prefill, reset
 * or free of one sequence may come between the decode steps of others.
 */
typedef struct eng_seq eng_seq;
/* A new sequence of session s with a context of n_ctx positions (0: the
 * session's own's, eng_n_ctx), empty.  0 and *out, or ENG_EARG (more
 * positions than the model's max_seq) or ENG_ENOMEM (err gives the KV
 * cache's size) with *out NULL. */
int  eng_seq_new(eng_session *s, uint32_t n_ctx, eng_seq **out, char *err, size_t errlen);
/* Free a sequence (NULL: nothing); eng_close frees those still open, so a
 * sequence must not be used or freed after its session is closed. */
void eng_seq_free(eng_seq *seq);
int  eng_seq_decode(eng_seq *seq, int32_t token, char *err, size_t errlen);
int  eng_seq_prefill(eng_seq *seq, const int32_t *tokens, size_t n, char *err,
                     size_t errlen);
int  eng_seq_prefill_reuse(eng_seq *seq, const int32_t *tokens, size_t n,
                           size_t *n_reused, char *err, size_t errlen);
int  eng_seq_shift(eng_seq *seq, uint32_t n_keep, uint32_t n_discard, char *err,
                   size_t errlen);
void eng_seq_reset(eng_seq *seq);
/* Logits [n_vocab] after the sequence's last token; the caller may
 * change them (a sampler does), the next token overwrites them. */
float   *eng_seq_logits(eng_seq *seq);
uint32_t eng_seq_n_past(const eng_seq *seq);
uint32_t eng_seq_n_ctx(const eng_seq *seq);
/* The line of the sequence's last failure in eng_decode_batch ("" when
 * its last batched token went in). */
const char *eng_seq_error(const eng_seq *seq);
/* One token for each of n sequences: tokens[i] into seqs[i], each at its
 * own position, as one pass over the weights (the batched mat-mats;
 * attention per sequence over its own cache; a MoE layer's experts of
 * all the sequences grouped by expert and fetched once).  Each
 * sequence's logits are bit for bit those eng_seq_decode gives it alone,
 * so batching changes no token.  A model whose schedule cannot batch
 * (the pipeline-native combine styles other than ParallelSqrt2), a
 * session with a trace attached, and $CFLOW_NO_BATCH run the sequences
 * one after another, with the same results.
 * rcs[i] gets sequence i's code, as eng_seq_decode's; a failure fails
 * only its sequence (it takes no position, eng_seq_error says why): a
 * full context or a token out of the vocabulary before the pass, ENG_ENAN
 * after it; a sequence that is not the session's, or one given twice,
 * ENG_EARG.  An expert read that fails in the shared pass fails every
 * sequence of that pass (ENG_EIO, ENG_EFORMAT; none takes its position),
 * a model file that shrank every one.  Returns 0 when every sequence took
 * its token, else the first failure's code with its line in err.  n 0:
 * 0. */
int  eng_decode_batch(eng_session *s, eng_seq *const *seqs, const int32_t *tokens,
                      unsigned n, int *rcs, char *err, size_t errlen);

/* Per-step statistics (extended by the profiling work). */
typedef struct eng_stats {
    uint64_t n_prompt, n_gen;
    double   prefill_s, decode_s;
    uint64_t bytes_per_token;   /* weight bytes streamed per decoded token */
    uint64_t expert_bytes;      /* expert tile bytes read, all tokens */
    uint64_t expert_bank_bytes; /* bytes of all experts of all MoE layers */
    uint64_t expert_tokens;     /* forward passes that read experts */
    /* expert I/O of sync/staged (eng_set_expert_io): bytes read from the
     * file, seconds the reader pool was busy (some read queued or in
     * flight: overlapping reads count once) and seconds decode waited for
     * them (the stall) */
    uint64_t xio_bytes;
    double   xio_s, xio_stall_s;
    /* the RAM expert cache (eng_opts.expert_cache): routed experts found
     * in a slot, routed experts read, and the cache's size in bytes */
    uint64_t xio_hits, xio_misses, xio_cache_bytes;
    /* chunk reads queued or in flight integrated over time (request-
     * seconds: the mean queue depth is xio_depth_s / xio_s) */
    double   xio_depth_s;
    /* look-ahead (eng_opts.expert_ahead): experts guessed for later
     * layers (distinct per layer), guesses their layer then routed, guesses read from the file
     * (not already in a slot), of those the ones not routed (wasted), and
     * the bytes the guesses read (also counted in xio_bytes) */
    uint64_t xio_pred, xio_pred_hits, xio_pred_reads, xio_pred_wasted, xio_pred_bytes;
    uint64_t pf_lines, pf_dropped;  /* prefetch: lines hinted, commands dropped */
} eng_stats;
void eng_get_stats(const eng_session *s, eng_stats *st);

/* Reference traces (tests against the PyTorch trainer): after each pass the
 * L2 norm of the residual after every effective layer, of the input of the
 * output norm and of its output (definitions: scripts/train/trace.py). */
#define ENG_TRACE_MAX 256
typedef struct eng_trace {
    unsigned n_layers;
    double   layer_l2[ENG_TRACE_MAX];
    double   final_in_l2, final_norm_l2;
} eng_trace;
void eng_set_trace(eng_session *s, eng_trace *t);  /* NULL: off */

/* Profiling (src/prof/prof.h).  With a profiler attached the session
 * brackets every token with prof_token_begin/end, marks each layer's
 * attention and FFN time (prof_layer_mark), and, before the next token
 * after attaching or after eng_set_threads, has every worker thread open
 * its own counters (prof_threads_reset + prof_thread_attach).  NULL
 * detaches; detached, each probe costs one branch.  The profiler must stay
 * alive while attached. */
struct prof;
void eng_set_prof(eng_session *s, struct prof *p);


/* ---- Expert I/O and prefetch (the Pipeline-Native Transformers report,
 *      3.9, 5.8, 5.14; eng_fetch.c, eng_io.c, eng_prefetch.c) ---- */
/* mmap: expert tiles read in place from the mapping; sync: each routed
 * expert read with O_DIRECT into a staging slot at its routing layer,
 * waited for at once; staged: read issued at the routing layer, waited
 * for at the injection layer (expert_delay later), overlapping the layers
 * between.  All three give the same tokens. */
/* ENG_XIO_AUTO is a request, never a session's mode: mmap where the file
 * fits in free memory (MemAvailable, and the cgroup's room), else staged
 * reads into a RAM expert cache (--expert-cache auto unless given); a model
 * without experts always maps.  The default. */
enum eng_expert_io { ENG_XIO_MMAP = 0, ENG_XIO_SYNC = 1, ENG_XIO_STAGED = 2,
                     ENG_XIO_AUTO = 3 };
#define ENG_CACHE_AUTO (-2)
/* Look-ahead's depth (eng_opts.expert_ahead_layers): at most
 * ENG_AHEAD_MAX layers, ENG_AHEAD_LAYERS by default (eng_moe_ahead.c's
 * essay says how it was chosen). */
#define ENG_AHEAD_MAX    8
#define ENG_AHEAD_LAYERS 1
#define ENG_STR_(x) #x
#define ENG_STR(x)  ENG_STR_(x)         /* a number macro as a string literal */
/* "auto", "off"/"0", or a size with an optional K, M, G or T (binary)
 * suffix into *bytes (ENG_CACHE_AUTO, 0, the size); 0, or -1 when text is
 * none of these or NULL. */
int         eng_expert_cache_from_text(const char *text, int64_t *bytes);
/* The modes' words in enum order, NULL-terminated: the one table that
 * --expert-io, cflow-tui's /expert-io, $CFLOW_EXPERT_IO and the run log
 * name the modes with. */
extern const char *const eng_expert_io_names[ENG_XIO_AUTO + 2];
const char *eng_expert_io_name(int mode);  /* eng_expert_io_names[mode]; "?" */
int         eng_expert_io_from_name(const char *name);  /* -1 unknown or NULL */
/* Switch between tokens.  Opening the file for direct reads may fail
 * (ENG_EIO with err); a dense model accepts any mode and reads nothing. */
int  eng_set_expert_io(eng_session *s, int mode, char *err, size_t errlen);
int  eng_expert_io(const eng_session *s);
/* 1 when ENG_XIO_AUTO chose the mode eng_expert_io reports, else 0. */
int  eng_expert_io_auto(const eng_session *s);
/* The look-ahead setting the session resolved (eng_opts.expert_ahead and
 * _layers, or the environment): the layers it guesses ahead, 0 when it is
 * off.  Guesses are made only where eng_moe_ahead.c says (a standard MoE,
 * sync or staged reads, a cache); the setting is what the run log keeps. */
int  eng_expert_ahead(const eng_session *s);
/* Look-ahead on (1) or off (0), between tokens; the tokens never change.
 * Off makes no more guesses (reads already issued finish and stay cached);
 * on resumes at the depth the session opened with.  0, or ENG_EUNSUP with
 * one line in err when on is asked of a session whose look-ahead was off
 * when it opened (no slots were set aside for guesses: reopen it with
 * look-ahead on).  A dense or pipeline-native model takes either and
 * guesses nothing. */
int  eng_set_expert_ahead(eng_session *s, int on, char *err, size_t errlen);
/* Look-ahead's depth, n layers (1 .. ENG_AHEAD_MAX), between tokens; the
 * tokens never change, and on/off stays as it is (eng_expert_ahead reports
 * n while on).  Any depth up to the one the session opened with: its
 * guesses' slots were set aside then.  0; ENG_EARG for n out of range;
 * ENG_EUNSUP with one line in err for a deeper look-ahead than the open's,
 * or where look-ahead was off at the open.  A dense or pipeline-native
 * model takes any n and guesses nothing. */
int  eng_set_expert_ahead_layers(eng_session *s, int n, char *err, size_t errlen);
/* 1 when sync/staged reads bypass the page cache, 0 when the file system
 * refused O_DIRECT (buffered fallback), -1 in mmap mode. */
int  eng_expert_io_direct(const eng_session *s);
/* How often each of layer's n_experts experts was routed to since the
 * session opened (each token, decode and prefill, adds top_k choices per
 * MoE layer) into counts [n_experts]: 0, or ENG_EARG for a layer out of
 * range or a dense model. */
int  eng_expert_routed(const eng_session *s, unsigned layer, uint64_t *counts);
/* The reader of sync/staged expert I/O: "io_uring" or "pool"
 * ($CFLOW_XIO_READER=uring|pool chooses; io_uring where built and allowed),
 * with *qd its requests in flight at most and *chunk the bytes of one
 * (either may be NULL); NULL with mmap or a model without experts. */
const char *eng_expert_reader(const eng_session *s, unsigned *qd, uint32_t *chunk);
/* One pass of `cflow bench diskbw`: O_DIRECT reads of path's first GiB
 * (less where it is smaller) through the expert reader at qd requests in
 * flight (0: the reader's default), in bounded memory (eng_io_bench.c).
 * ENG_EARG where the file is under 64 MiB, ENG_EIO where O_DIRECT is
 * refused (the reads would be buffered) or a read fails; err says which,
 * naming the file. */
typedef struct eng_diskbw {
    const char *reader;     /* "io_uring" or "pool" */
    unsigned    qd;         /* requests in flight at most */
    uint32_t    chunk;      /* bytes per request */
    uint64_t    bytes;      /* read in the pass */
    double      seconds;
} eng_diskbw;
int eng_disk_read(const char *path, unsigned qd, eng_diskbw *out, char *err, size_t errlen);
/* The PREFETCHT0 thread on (1) or off (0), between tokens. */
int  eng_set_prefetch(eng_session *s, int on);   /* 0 or ENG_ENOMEM */
int  eng_prefetch(const eng_session *s);

#endif /* CFLOW_ENGINE_H */
