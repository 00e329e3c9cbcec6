/*
 * eng_impl.h — private to src/engine: declarations shared between the
 * engine's files (never included outside src/engine), grouped by the
 * file that defines them.
 *
 * The files, one job each, a file calling only those listed after it:
 *
 *   eng_kv.c         a sequence between tokens: reset, the reuse prefill,
 *                    the context shift
 *   eng_session.c    open a model in named phases, close; accessors,
 *                    threads, profiler attachment, statistics
 *   eng_forward.c    the calls that run tokens: decode and prefill of one
 *                    sequence, under the guard; the NaN rerun; the walk of
 *                    one token (eng_forward)
 *   eng_prefill.c    a batch of rows through the layers (a prompt chunk)
 *   eng_sched.c      the layer schedule of each combine style (a table)
 *   eng_moe_batch.c  a batch's routed experts, grouped by expert
 *   eng_moe.c        one position's routed experts: routing, the fetch,
 *                    the deferred compute
 *   eng_io_session.c expert I/O for a session: modes, the cache's budget,
 *                    set-up and tear-down, the prefetch setter
 *   eng_seq.c        a sequence's life (eng_seq_new, eng_seq_free): its KV
 *                    cache, tokens and logits; eng_kv_bytes
 *   eng_family.c     what differs per model family: the activation, the
 *                    gating, RoPE's scaling, a layer's parts
 *   eng_moe_ahead.c  look-ahead: the next layers' experts guessed, fetched
 *   eng_moe_route.c  the router: softmax, top-k, weights, counts
 *   eng_blocks.c     the blocks (embedding, attention, FFN, head), the
 *                    decode scratch
 *   eng_mla.c        DeepSeek-V2's multi-head latent attention
 *   eng_attn.c       attention over the KV cache: store, attend (one
 *                    position, a batch, the tiled prefill), the output's
 *                    bias and post-norm
 *   eng_mv.c         the mat-vec and mat-mat over tile streams (eng_mv)
 *   eng_vec.c        the element-wise steps: RMSNorm, the gated
 *                    activation, the residual add, the L2 norm
 *   eng_fetch.c      one interface to a routed expert's bytes, its backends
 *                    (in place, prefetch, direct reads)
 *   eng_io_bench.c   one pass of `cflow bench diskbw`
 *   eng_io.c         the staged reader: slots; an issue is the cache's,
 *                    then the reader's
 *   eng_io_reader.c  the reader: the pool's threads or io_uring; submit
 *   eng_io_uring.c   the io_uring reader
 *   eng_io_queue.c   the reader's request queue: chunks, priority,
 *                    completion, the O_DIRECT fallback, the faults
 *   eng_io_cache.c   the RAM expert cache: key to slot, holds, replacement
 *   eng_check.c      the checks around a token: id, room, file, NaN probe
 *   eng_pool.c       the worker pool
 *   eng_guard.c      SIGBUS from the mapping becomes an error
 *   eng_prefetch.c   the PREFETCHT0 thread, and its per-layer hints
 *   eng_util.c       the error line, aligned allocation, environment counts
 *
 * and beside the session, below the front ends: the tokenizer (eng_tok.c,
 * eng_tok_load.c, eng_tok_enc.c, eng_tok_detok.c, eng_tok_pre.c; their
 * own eng_tok_impl.h), the chat templates (eng_chat.c) and the sampler
 * (eng_sample.c).  The staged reader's files share eng_io_impl.h.
 */
#ifndef CFLOW_ENG_IMPL_H
#define CFLOW_ENG_IMPL_H

#include "engine/engine.h"

/* ---- eng_session.c ---- */
struct eng_seq;
/* The first element of position pos's row of effective layer kvl in seq's
 * cache (a sliding layer's ring wraps). */
#define eng_kv_row(seq, kvl, pos) \
    (((seq)->kv_off[kvl] + (pos) % (seq)->kv_cap[kvl]) * (size_t)(seq)->s->kv_dim)
/* The mapped model behind a session (for inspection and statistics). */
const fmt_model *eng_model(const eng_session *s);
/* requested > 0: itself; else the number of online CPUs. */
int eng_default_threads(int requested);

/* ---- eng_tok_pre.c: the regex pre-tokenizer of byte-level BPE ---- */
typedef struct eng_pretok eng_pretok;
enum {
    ENG_PRE_IGNORE_MERGES = 1u << 0, /* a word that is a token is not merged */
    ENG_PRE_ADD_BOS       = 1u << 1  /* the family wants BOS by default */
};
/* Compile the expressions of pre-tokenizer pre[0..pre_len) (a
 * tokenizer.ggml.pre value), or, when n_custom > 0, the given expressions
 * (PCRE2 syntax) in order.  ENG_EUNSUP for an unknown name. */
int  eng_pretok_new(eng_pretok **out, const char *pre, size_t pre_len,
                    const char *const *custom, const size_t *custom_len,
                    size_t n_custom, char *err, size_t errlen);
void eng_pretok_free(eng_pretok *p);
unsigned eng_pretok_flags(const eng_pretok *p);
/* text itself when it is well-formed UTF-8, else a copy (also stored in
 * *owned, which the caller frees; NULL when no copy was made) in which
 * undecodable bytes are U+FFFD.  NULL on ENOMEM. */
const char *eng_pretok_sanitize(const char *text, size_t len, size_t *out_len,
                                char **owned);
/* Split valid UTF-8 text into words: *ends (malloc'd) gets the end offset
 * of each of the *n_words words.  ENG_EFORMAT with err when an expression
 * backtracks past its step limit (PRE_STEPS_* in eng_tok_pre.c),
 * ENG_ENOMEM. */
int  eng_pretok_split(const eng_pretok *p, const char *text, size_t len,
                      size_t **ends, size_t *n_words, char *err, size_t errlen);
/* Encode code point cp (<= U+10FFFF) as UTF-8 into out[4]; the length. */
size_t eng_utf8_put(uint32_t cp, char *out);

/* ---- eng_pool.c ---- */
typedef struct eng_pool eng_pool;
/* A region's function, run by the caller (tid 0) and by the workers that
 * join in time (eng_pool_run) or by every thread (eng_pool_run_all). */
typedef void (*eng_task_fn)(void *ctx, int tid, int n_threads);
eng_pool *eng_pool_new(int n_threads);
void      eng_pool_free(eng_pool *p);
int       eng_pool_size(const eng_pool *p);
int       eng_pool_resize(eng_pool *p, int n_threads);
/* fn must take all its work through eng_pool_next / eng_pool_claim: a
 * worker may never run it, the caller then does everything; returns when
 * every thread that ran fn has returned. */
void      eng_pool_run(eng_pool *p, eng_task_fn fn, void *ctx);
/* fn runs once on each of the n_threads threads (per-thread set-up). */
void      eng_pool_run_all(eng_pool *p, eng_task_fn fn, void *ctx);
/* Claim `step` work items: returns the first index (may be past the end). */
size_t    eng_pool_next(eng_pool *p, size_t step);
/* The next of n units for thread tid of n_threads (the region's own
 * arguments): first its own contiguous slice in order, then the fronts of
 * the others'; n when all are taken. */
size_t    eng_pool_claim(eng_pool *p, int tid, int n_threads, size_t n);

/* ---- eng_guard.c: SIGBUS from the mapped model becomes an error ---- */
/* A guard covers the reads of one mapping [lo, hi) by the current thread:
 *     eng_guard g = { .lo = base, .hi = base + size };
 *     if (sigsetjmp(g.jb, 0)) { eng_guard_pop(&g); ...g.addr faulted... }
 *     eng_guard_push(&g);  ...reads...  eng_guard_pop(&g);
 * Guards nest (a stack per thread).  eng_pool_run hands the caller's range
 * to its workers and re-raises their faults in the caller (eng_guard.c). */
#include <setjmp.h>
typedef struct eng_guard {
    sigjmp_buf          jb;
    const uint8_t      *lo, *hi;
    const void *volatile addr;      /* the faulting address */
    struct eng_guard   *prev;
} eng_guard;
int        eng_guard_install(void);   /* once per process; 0 or -1 */
void       eng_guard_push(eng_guard *g);
void       eng_guard_pop(eng_guard *g);
eng_guard *eng_guard_current(void);   /* this thread's innermost, or NULL */
/* Jump to g (which must be armed on this thread) as if addr had faulted. */
void       eng_guard_raise(eng_guard *g, const void *addr)
    __attribute__((noreturn));


/* ---- eng_io.c: the staged expert reader (O_DIRECT into staging slots) ---- */
#include <sys/types.h>
typedef struct eng_xio eng_xio;
/* Every expert read's result (bytes, or -errno) passes through this hook
 * where it is set (NULL by default), on either reader: tests turn reads
 * into errors, short counts or slow ones. */
extern ssize_t (*eng_io_result)(int fd, void *buf, size_t n, off_t off, ssize_t res);
/* The reader: reader "uring", "pool" or NULL ($CFLOW_XIO_READER, else
 * io_uring where built and allowed); qd requests in flight (0: the
 * default, $CFLOW_XIO_QD; the pool's threads when set); n_readers the
 * pool's threads (0: 2); chunk bytes per request (0: $CFLOW_XIO_CHUNK or
 * the default); policy the cache's replacement, "crf", "lru", "lfu" or NULL
 * ($CFLOW_XIO_POLICY, else the default: eng_io_cache.c). */
typedef struct eng_xio_cfg {
    const char *reader, *policy;
    unsigned    qd, n_readers;
    uint32_t    chunk;
} eng_xio_cfg;
/* Open path for direct reads (buffered, with a notice through log, where
 * O_DIRECT is refused); n_slots staging slots, each large enough for a
 * range of max_bytes, that keep what they read for keys 0..n_keys-1 (the
 * RAM expert cache); the reader cfg says. */
int  eng_xio_new(eng_xio **out, const char *path, uint64_t max_bytes,
                 unsigned n_slots, unsigned n_keys, const eng_xio_cfg *cfg,
                 eng_log_fn log, void *ud, char *err, size_t errlen);
void eng_xio_free(eng_xio *x);
int  eng_xio_direct(const eng_xio *x);     /* 1 O_DIRECT, 0 buffered */
/* The slot holding file bytes [off, off+len) for key (an expert: layer x
 * n_experts + e; -1: not cached): the slot that already holds them or is
 * reading them (*hit = 1, no read), else the read queued into a free slot
 * or the coldest by the policy (*hit = 0).  -1 when the range is too large
 * or every slot is held. */
int  eng_xio_issue(eng_xio *x, int key, uint64_t off, uint64_t len, int *hit);
/* The same for a read wanted later than the others (look-ahead's guesses
 * for layers past the next): its requests wait, off the queue, while any
 * other read is queued or in flight, so they never slow a read needed
 * sooner; they go out when no other read is left, or at once when another
 * issue hits their slot (eng_io_queue.c). */
int  eng_xio_issue_later(eng_xio *x, int key, uint64_t off, uint64_t len, int *hit);
/* Start the reads issued so far, together (one submission on io_uring):
 * after a routing's issues; parked ones (eng_xio_issue_later) only when
 * no other read is left.  (eng_xio_wait starts any not yet started, but
 * for those.) */
void eng_xio_submit(eng_xio *x);
/* Wait until no read is queued or in flight (reads always finish). */
void eng_xio_drain(eng_xio *x);
/* "io_uring" or "pool", with *qd the requests in flight at most and
 * *chunk the bytes of one. */
const char *eng_xio_reader(const eng_xio *x, unsigned *qd, uint32_t *chunk);
/* Issues that found their bytes in a slot, those that read them, and the
 * chunks queued or in flight integrated over time (request-seconds; over
 * the busy seconds, the mean queue depth). */
void eng_xio_hits(eng_xio *x, uint64_t *hits, uint64_t *misses, double *depth_s);
/* Wait for slot's read; *data gets the range's first byte, *busy_done
 * the pool's busy seconds (the union of the times any read was queued or
 * in flight, eng_io.c) when its last byte arrived.  ENG_EIO with err on a
 * failed or short read.  The slot stays held until eng_xio_release. */
int  eng_xio_wait(eng_xio *x, int slot, const uint8_t **data, double *busy_done,
                  char *err, size_t errlen);
/* 1 when no read into slot is queued or in flight (its bytes are there,
 * or its read failed: eng_xio_wait says which), else 0; never waits. */
int  eng_xio_landed(eng_xio *x, int slot);
/* The compute side is done with slot; it is reused once no read is in
 * flight into it. */
void eng_xio_release(eng_xio *x, int slot);
/* n more tokens (a decode step: 1; a prefill chunk: its positions) go
 * through the layers: the clock by which the crf policy's weights of past
 * issues decay (eng_io_cache.c). */
void eng_xio_tick(eng_xio *x, unsigned n);

/* ---- eng_prefetch.c: the PREFETCHT0 thread ---- */
typedef struct eng_pf eng_pf;
eng_pf *eng_pf_new(void);
void    eng_pf_free(eng_pf *pf);
/* Compute entered the next layer (commands two layers old are skipped). */
void    eng_pf_layer(eng_pf *pf);
/* Post a LinearRange (one range of an ExpertTiles list); never blocks. */
void    eng_pf_range(eng_pf *pf, const void *p, size_t n);
void    eng_pf_counts(const eng_pf *pf, uint64_t *lines, uint64_t *dropped);

/* ======================================================================= */
/* The session and its rooms.                                               */
/*                                                                          */
/* A session is the opened model and what every token shares: the layers' */
/* tile streams, the pool, the tokenizer, expert I/O.  What one stream of   */
/* tokens owns — its KV cache, position, token history, logits — is a      */
/* sequence (eng_seq), of which the session holds its own and any number   */
/* more, so a server slot costs its KV cache and nothing of the model.     */
/* The rest of the session is in rooms, each allocated and freed by the    */
/* file that owns it:                                                       */
/*   dec   eng_scratch   one position's buffers (eng_blocks.c)              */
/*   bat   eng_batch     the rows of a batch (eng_prefill.c)                */
/*   io    eng_io_state  expert fetch and prefetch (eng_io_session.c)       */
/*   chk   eng_checks    the checks around a token (eng_check.c)            */
/* Scratch and batch hold nothing between calls, so every sequence shares  */
/* them: one caller at a time per session (engine.h).                       */
/* ======================================================================= */
#include <stdarg.h>
#include "kernels/kern.h"



/* Positions a batched prefill runs through the layers together. */
#define ENG_BATCH 32

/* A tile stream prepared for parallel mat-vec: its tiles cut into units,
 * each the run of column tiles of one output stripe of one matrix.  A
 * unit owns its output rows, so units run on any thread in any order and
 * the sums inside a unit keep the single-thread order: results do not
 * depend on the thread count. */
typedef struct eng_mv {
    const fmt_stream *st;
    uint32_t         *unit;      /* [n_units + 1] first tile of each unit */
    uint32_t          n_units;
    unsigned          need;      /* KERN_NEED mask of its tile types */
    uint32_t          rp;        /* bit m: matrix m's tiles use their type's
                                    tile_mv_rp where it has one (llama.cpp
                                    repacks the matrix) */
} eng_mv;

typedef struct eng_layer {
    eng_mv        qkv, o, gate_up, down;
    const float  *attn_norm, *ffn_norm, *qkv_bias;
    /* attention geometry (fmt_model_layer_geom: the header's unless the file
     * has per-layer records, as Gemma-4-style sliding/full layers do);
     * q_dim, kv_dim in floats; q_norm, k_norm [head_dim] per-head RMSNorm
     * weights (FMT_FLAG_QK_NORM) or NULL; inv_freq [rope_dims/2] this
     * layer's RoPE frequencies (s->inv_freq unless own_freq) */
    const fmt_layer_geom *g;
    uint32_t      q_dim, kv_dim;
    const float  *q_norm, *k_norm;
    float        *inv_freq;
    int           own_freq;
    /* MoE (n_experts > 0): input norm, router [E][dim], per expert its
     * fused gate/up and down streams */
    const float  *moe_norm, *router;
    eng_mv       *exp_gu, *exp_down;     /* [E] */
    uint64_t      bank_bytes;
    /* the model families' parts (eng_family.c; NULL or 0 where the model
     * has none): whether the layer has a dense FFN; the Q/K norms' lengths
     * (head_dim: per head, or all of q_dim / kv_dim: OLMoE); [dim] norms of
     * the attention's and the FFN's output (Gemma); [n_heads] sinks and a
     * [dim] output bias (gpt-oss); the router's [n_experts] bias and the
     * experts' [2 n_experts][expert_ffn] gate then up biases and
     * [n_experts][dim] down biases (gpt-oss); the shared experts' streams
     * (DeepSeek); the RoPE beyond the base (ggml's arithmetic) */
    int           dense;
    uint32_t      q_norm_n, k_norm_n;
    const float  *attn_post_norm, *ffn_post_norm;
    const float  *sinks, *o_bias;
    const float  *router_bias, *exp_gu_bias, *exp_down_bias;
    eng_mv        sh_gu, sh_down;
    kern_rope_ext rope;
    /* MLA (eng_mla.c): the latent's norm [mla_rank]; k_b, v_b over copies
     * of their tiles with each head's columns moved (mla_st, mla_tiles);
     * the low-rank query's norm [mla_q_rank] and q_b (NULL, 0 without) */
    const float  *kv_a_norm, *q_a_norm;
    eng_mv        k_b, v_b, q_b;
    fmt_stream    mla_st[2];
    fmt_tile     *mla_tiles[2];
} eng_layer;

/* The variants of eng_family.c: the FFN's activation, g[0..n) = act(g, u),
 * and the gating of router logits p [n_experts] (overwritten) into
 * expert[top_k] and w[top_k]. */
typedef void (*eng_act_fn)(const eng_session *s, float *g, const float *u, uint32_t n);
typedef void (*eng_gate_fn)(const eng_session *s, float *p, int *expert, float *w);

/* A sequence (eng_seq.c makes and frees it: eng_seq_new, eng_seq_free;
 * eng_kv.c keeps it between tokens): what one stream of tokens owns, its
 * KV cache, position and token history; the rest of a pass is the
 * session's, shared.
 *   kc, vc [rows][kv_dim]  the KV cache, position-major per effective
 *                      layer (kv_off, kv_cap: a sliding layer keeps only
 *                      its window, as a ring): floats, or halves (kc16,
 *                      vc16) with the session's kv_f16
 *   tok [n_ctx]        the token at each cached position; positions [0,
 *                      kv_exact) hold the rows a prefill of their tokens
 *                      computes (UINT32_MAX: all; a shift leaves n_keep)
 *   logits [vocab]     after the last token fed
 *   reuse_logits [vocab]  the logits after the last reuse prefill, which
 *                      ended at position reuse_pos (0: none kept) */
struct eng_seq {
    eng_session *s;
    eng_seq     *next;          /* the session's list, s->seqs */
    uint32_t     n_ctx, n_past;
    float       *kc, *vc;
    uint16_t    *kc16, *vc16;
    /* per effective layer: its cache's first row (kv_off, in rows of
     * kv_dim) and its rows (kv_cap): n_ctx, or a sliding layer's window
     * when that is shorter, kept as a ring (position p in row p % kv_cap:
     * eng_kv_row); ring: some layer is one */
    uint64_t    *kv_off;
    uint32_t    *kv_cap;
    int          ring;
    int32_t     *tok;
    uint32_t     kv_exact;
    float       *logits;
    float       *reuse_logits;
    uint32_t     reuse_pos;
    char         err[256];      /* its last failure in eng_decode_batch */
};

/* The decode scratch (eng_blocks.c: eng_scratch_init, eng_scratch_free):
 * the buffers one position's pass works in.  Nothing in them outlives a
 * token: a sequence's state is its KV cache and position, so every
 * sequence of a session shares these (one caller at a time).
 *   x [dim]            the residual stream
 *   xb [dim]           the normalised residual (a block's input)
 *   q, att [q_dim]     queries, the attention's output
 *   k_tmp, v_tmp [kv_dim]  this position's k and v before rounding to f16
 *   hb, hb2 [hmax]     gate and up activations of the dense FFN
 *   m, d, e [dim]      the branch outputs of the schedules (eng_sched.c):
 *                      attention, dense FFN, experts
 *   a [dim]            a two-stream schedule's second stream
 *   hist [dense_delay + 1][dim]  DelayedSum's ring of residuals
 *   pend [dim]         a delayed injection's expert sum (eng_moe_take)
 *   probs [n_experts]  the router's probabilities (eng_moe_route.c)
 *   act_dim, act_q, act_ffn  the prepared mat-vec inputs of each width
 *   xg_h, xg_h2 [n_xg][expert_ffn], xg_o [n_xg][dim], xg_act [n_xg]: the
 *                      routed experts of a decode step, n_xg <= ENG_MV_MAX
 *                      at a time (eng_moe_inject): gate and up
 *                      activations, outputs, prepared down inputs
 *   scores [ctx], att16 [2*hd_max] halves: the one-thread attention
 *                      kernels' scratch (when par_* cannot grow)
 *   par_sc, par_h16    parallel attention (eng_attn.c attn_scratch):
 *                      per head, scores [ctx] floats and 2*hd_max halves,
 *                      for par_heads heads (a batch's threads each have
 *                      n_heads of them)
 *   ring_k, ring_v [ring_cap][kv_dim]  a sliding layer's wrapped ring copied
 *                      into the order of its positions (eng_attn.c ring_in_order)
 * ctx is the longest context a score row must hold. */
typedef struct eng_scratch {
    float    *x, *xb, *q, *att, *k_tmp, *v_tmp, *hb, *hb2;
    float    *m, *d, *e, *a, *hist, *pend, *probs;
    kern_act  act_dim, act_q, act_ffn;
    unsigned  n_xg;
    float    *xg_h, *xg_h2, *xg_o;
    kern_act *xg_act;
    uint32_t  ctx;
    float    *scores;
    uint16_t *att16;
    float    *par_sc;
    uint16_t *par_h16;
    uint32_t  par_heads;
    void     *ring_k, *ring_v;   /* a wrapped ring's rows in order (ring_cap rows) */
    uint32_t  ring_cap;
} eng_scratch;

/* The expert I/O room (eng_io_session.c sets it up and tears it down):
 * how routed experts reach the compute, and the prefetch thread. */
typedef struct eng_io_state {
    int          mode;         /* enum eng_expert_io */
    int          by_auto;      /* the mode was chosen by ENG_XIO_AUTO */
    eng_xio     *xio;          /* reader pool and staging slots (sync/staged) */
    struct eng_stage *stage;   /* [n_stage] tiles rebased into each slot */
    unsigned     n_stage;
    uint64_t     cache_bytes;  /* the slots' bytes beyond a token's staging */
    int          keyed;        /* a cache budget: slots keep what they read */
    struct eng_route *route;   /* [expert_delay + 1] routed, not yet injected */
    /* this token's expert bytes failed: 0 no, else the code, ENG_EIO (a
     * read) or ENG_EFORMAT (the bytes read were refused); err says why */
    int          failed;
    double       busy;         /* the reader pool's busy seconds charged so far */
    char         err[320];
    struct eng_ahead *ahead;   /* look-ahead guesses (eng_moe_ahead.c), NULL off */
    eng_pf      *pf;           /* the PREFETCHT0 thread, NULL when off */
    const struct eng_fetch_backend *be;   /* how an expert is fetched (eng_fetch.c) */
} eng_io_state;

/* The batch room (eng_prefill.c, eng_batch_init on first use; MoE layers:
 * eng_moe_batch.c): the buffers of up to ENG_BATCH positions that go
 * through the layers together, each row one position: residuals x
 * [B][dim], normalised xb [B][dim], branch outputs o [B][dim], q/att
 * [B][q_dim], k/v [B][kv_dim], h/h2 [B][hmax]; one prepared input per
 * position for each width (act_dim, act_q, act_ffn [B]).  MoE layers add
 * the dense FFN's output dn [B][dim], the experts' sums e [B][dim], router
 * inputs xr [B][dim] with their prepared inputs act_xr [B], and per
 * position and choice t < top_k the expert sel [B][K], its weight w [B][K]
 * and its output exp [B][K][dim]; the choices grouped by expert: ord [B*K]
 * indices into sel, cnt [n_experts + 1] group starts, cur [n_experts]
 * cursors; the router's logits log [B][n_experts].  A prompt chunk's
 * tiled attention (eng_attn.c attn_tiled): tiled says whether this chunk
 * takes it (llama.cpp's rule, set per chunk by eng_prefill); work is
 * work_n floats per pool thread (kern_attn_pf_fn's work for one claim)
 * for work_threads threads.  Row j is position pos[j] of sequence seq[j],
 * set by the caller of eng_forward_batch (a prompt chunk: consecutive
 * positions of one sequence). */
typedef struct eng_batch {
    int       ready;
    eng_seq  *seq[ENG_BATCH];
    uint32_t  pos[ENG_BATCH];
    float    *x, *xb, *o, *q, *att, *k, *v, *h, *h2;
    kern_act *act_dim, *act_q, *act_ffn;
    float    *dn, *e, *xr, *w, *exp, *log;
    kern_act *act_xr;
    int      *sel, *ord, *cnt, *cur;
    int       tiled;
    float    *work;
    size_t    work_n;
    uint32_t  work_threads;
    float    *logits;        /* [B][vocab] every row's (ENG_LOGITS_ALL) */
} eng_batch;

/* The checks room (eng_check.c): what the checks around a token know. */
typedef struct eng_checks {
    /* the model file shrank under its mapping (the guard of
     * eng_guarded_run): the offset of the byte whose read faulted; every
     * later token fails */
    int      broken;
    uint64_t fault_off;
    /* non-finite values (eng_check_finite): probe on while a bad token is
     * run again, bad_layer the first effective layer whose residual held
     * NaN or infinity (-1: none yet) */
    int      probe, bad_layer;
} eng_checks;

struct eng_session {
    /* the model (eng_session.c, read-only once open) */
    fmt_model         *model;
    const fmt_hparams *hp;
    eng_tok           *tok;
    const kern_ops    *ops;
    eng_opts           opts;
    eng_layer         *layers;       /* [n_layers] */
    const fmt_stream  *embd;
    eng_mv             output;
    const float       *out_norm;
    eng_pool          *pool;
    uint32_t           q_dim, kv_dim, embd_col_tiles;
    uint32_t           hd_max;       /* widest head over the layers */
    uint32_t           hmax;         /* max(ffn, expert ffn) */
    unsigned           n_eff;        /* effective layers (FixedPoint) */
    int                kv_f16;       /* resolved eng_opts.kv_f16: 0 or 1 */
    int                ggml;         /* llama.cpp arithmetic (GGUF model) */
    float             *inv_freq;     /* [head_dim/2] the shared RoPE frequencies */
    float             *rope_ff;      /* [head_dim/2] ggml RoPE divisors, or NULL */
    uint64_t           bytes_per_token;
    /* the sequences (eng_seq.c makes them) */
    eng_seq           *seq;          /* the session's own: eng_decode ... */
    eng_seq           *seqs;         /* every sequence, seq too (a list) */
    /* the rooms */
    eng_scratch        dec;          /* one position's buffers (eng_blocks.c) */
    eng_batch          bat;          /* the rows of a batch (eng_prefill.c) */
    eng_io_state       io;           /* expert fetch and prefetch (eng_io_session.c) */
    eng_checks         chk;          /* the checks around a token (eng_check.c) */
    /* what is counted and watched */
    eng_stats          stats;
    /* routed [n_layers][n_experts]: how often each expert was chosen
     * (eng_moe_route: decode and prefill), eng_expert_routed's counts */
    uint64_t          *routed;
    struct prof       *prof;         /* profiling (eng_set_prof): NULL when off */
    uint64_t           mv_bytes;     /* weight bytes the mat-vecs read since the
                                        last per-layer mark (prof_layer_bytes) */
    eng_trace         *trace;        /* per-layer norms of the last pass */
    eng_act_fn         act;          /* the FFN's activation (eng_family.c) */
    eng_gate_fn        gate;         /* router logits to weights (eng_family.c) */
};


#define ENG_MAX_TOPK 256
/* Bytes of weights below which a pass is not split among the pool's
 * threads: waking the workers costs microseconds. */
#define ENG_PAR_MIN_BYTES (256u * 1024u)
/* Routed experts a decode step multiplies in one parallel region
 * (eng_matvec_streams); a larger top-k goes in groups of this many. */
#define ENG_MV_MAX 16

typedef struct eng_route {
    int32_t  layer;                  /* routing layer (stored block); -1: empty */
    int32_t  target;                 /* injection layer */
    uint32_t k;
    int      expert[ENG_MAX_TOPK];
    float    w[ENG_MAX_TOPK];        /* renormalised router weights */
    int      slot[ENG_MAX_TOPK];     /* staging slot, -1: read in place */
    uint8_t  hit[ENG_MAX_TOPK];      /* the slot held the expert already */
    int      ready;                  /* reads waited for */
    float   *xr;                     /* [dim] N_m(h) at the routing layer */
} eng_route;

/* A staging slot's view of an expert: its two streams with every tile's
 * payload pointing into the slot instead of the mapping.  The units of the
 * original eng_mv stay valid (same tiles in the same order). */
typedef struct eng_stage {
    fmt_tile  *t[2];                 /* [max tiles of a gate/up or down stream] */
    fmt_stream st[2];
    eng_mv     mv[2];
    uint64_t   based;                /* file offset + 1 of the expert whose bytes
                                      * the slot holds checked (fmt_model_expert_check,
                                      * a lazily opened model) and t, st and mv point
                                      * at; 0 none.  An expert's bytes always sit at
                                      * the same place in a slot, so a cache hit
                                      * needs neither again (144 tiles an expert of
                                      * Qwen3-30B-A3B, for each of the 384 it routes
                                      * a token) */
} eng_stage;

/* ---- eng_family.c: what differs per model family ---- */
/* The session's variants from its header (act, gate). */
void   eng_family_session(eng_session *s);
/* Layer l's parts of the families and its RoPE (after its geometry, its
 * widths and the session's sequence): 0, or -1 out of memory. */
int    eng_family_layer(eng_session *s, unsigned l);
/* The angle pair i of layer ly turns per position (no magnitude). */
double eng_rope_step(const eng_session *s, const eng_layer *ly, unsigned i);

/* ---- eng_util.c ---- */
/* printf into err[errlen]; returns code. */
int   eng_fail(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* n bytes (at least 1), zeroed, on a 64-byte boundary; sets *oom on
 * failure (NULL).  Freed with free(). */
void *eng_xalloc(size_t n, int *oom);
/* $name as a whole number in [lo, hi] into *out (units: K, M and G
 * suffixes allowed, times 1024, 1048576 and 1073741824), def where it is
 * unset or empty.
 * Returns 0, or ENG_EARG with a line naming the variable and its value
 * (*out is def then). */
int   eng_env_count(const char *name, unsigned long def, unsigned long lo, unsigned long hi,
                    int units, unsigned long *out, char *err, size_t errlen);

/* ---- eng_blocks.c: the blocks of one position ---- */
/* The decode scratch for session s's geometry: 0, or -1 out of memory
 * (eng_scratch_free frees what was allocated).  eng_scratch_ctx grows the
 * score rows to n_ctx positions (a longer sequence): 0 or -1. */
int  eng_scratch_init(eng_session *s);
int  eng_scratch_ctx(eng_session *s, uint32_t n_ctx);
void eng_scratch_free(eng_session *s);
void eng_embed(eng_session *s, int32_t token, float *x);
void eng_attn_qkv_post(eng_session *s, const eng_layer *ly, uint32_t pos,
                       float *q, float *k, float *v);
void eng_attn_block(eng_session *s, eng_seq *seq, const eng_layer *ly, unsigned kvl,
                    const float *h, float *mout);
void eng_glu_ffn(eng_session *s, const eng_mv *gu, const eng_mv *down,
                 uint32_t hidden, uint8_t mg, uint8_t mu, uint8_t md,
                 const kern_act *act, float *dout);
void eng_ffn_block(eng_session *s, const eng_layer *ly, const float *h,
                   float *dout);
/* dec.x (the final residual) through the output norm and the LM head into
 * logits [vocab]. */
void eng_lm_head(eng_session *s, float *logits);

/* ---- eng_mv.c: the matrix products over tile streams ---- */
/* A tile stream prepared for mat-vec (ggml: llama.cpp repacks the matrices
 * of a GGUF model): 0, or -1 out of memory. */
int eng_mv_init(eng_mv *mv, const fmt_stream *st, int ggml);
/* n tile streams in one parallel region: out[j][matrix] += stream j's
 * tiles over x[j]; n <= ENG_MV_MAX. */
void eng_matvec_streams(eng_session *s, unsigned n, const eng_mv *const *mv,
                        const kern_act *const *x, float *const *const *out);
/* The m-position mat-mat of a (fused) tile stream: out[matrix] + j *
 * ld[matrix] receives position j's sums of x[j] (outputs zeroed by the
 * caller), each exactly the sums the mat-vec gives that position alone. */
void eng_matmat_stream(eng_session *s, const eng_mv *mv, const kern_act *x,
                       unsigned m, float *const *out, const size_t *ld);

/* ---- eng_attn.c: attention over a sequence's KV cache ---- */
/* The batch room's m rows (row j: position pos[j] of sequence seq[j]):
 * each's k, v [m][kv_dim] stored, then each attends its sequence's cache,
 * att [m][q_dim] from q [m][q_dim].  v NULL: MLA's (the keys' rows). */
void eng_attn_store_attend_batch(eng_session *s, const eng_layer *ly,
                                 unsigned kvl, unsigned m, const float *q,
                                 const float *k, const float *v, float *att);
/* The same for one position pos of seq. */
void eng_attn_store_attend(eng_session *s, eng_seq *seq, const eng_layer *ly, unsigned kvl,
                           uint32_t pos, const float *q, const float *k, const float *v,
                           float *att);
/* The output projection's result mout [dim] into the branch's: its bias,
 * the post-norm (the families' parts, where the layer has them). */
void eng_attn_out_post(const eng_session *s, const eng_layer *ly, float *mout);

/* ---- eng_vec.c: the element-wise steps ---- */
void eng_rmsnorm(const eng_session *s, float *out, const float *x,
                 const float *w, unsigned n);
/* g[0..n) = act(g, u), the model's gated activation. */
void eng_glu_act(eng_session *s, float *g, const float *u, uint32_t n);
/* x[0..n) += y */
void eng_add_to(float *x, const float *y, uint32_t n);
/* The L2 norm of x[0..n), in double. */
double eng_l2(const float *x, uint32_t n);

/* ---- eng_forward.c: the walk and the calls that run it ---- */
/* One token at sequence seq's position n_past through the model; ENG_EIO
 * when an expert read failed (the position is not taken). */
int  eng_forward(eng_session *s, eng_seq *seq, int32_t token, int want_logits);
/* After the logits of token (the last fed to seq, at n_past - 1): 0 when
 * they are all finite, else ENG_ENAN naming the first bad layer; the
 * position is dropped. */
int  eng_check_finite(eng_session *s, eng_seq *seq, int32_t token, char *err,
                      size_t errlen);

/* ---- eng_check.c: the checks around a token ---- */
/* 1 when x[0..n) holds no NaN and no infinity. */
int  eng_finite(const float *x, uint32_t n);
/* Effective layer i ended with residual x [dim] (a: a second stream, or
 * NULL): while eng_check_finite's probe runs, the first layer whose
 * residual is not finite goes into bad_layer. */
void eng_probe_layer(eng_session *s, unsigned i, const float *x, const float *a);
/* The error of a session whose model file shrank under the mapping. */
int  eng_model_fault(eng_session *s, char *err, size_t errlen);
/* A token that may be fed to seq: the session is whole, the id in the
 * vocabulary, a position free. */
int  eng_check_token(eng_session *s, const eng_seq *seq, int32_t token, char *err,
                     size_t errlen);

/* ---- eng_sched.c: the layer schedules ---- */
/* dec.x holds the embedding on entry and the final residual on return;
 * attention reads and writes sequence seq's cache at its position n_past. */
void eng_run_layers(eng_session *s, eng_seq *seq);
/* Close the profiler's part `part` of layer l (time since *pt, and the
 * bytes streamed since the last mark). */
void eng_mark(eng_session *s, unsigned l, int part, double *pt);
/* ParallelSqrt2's combine of a layer ly with experts: x [dim] += (d + e) /
 * sqrt(2), or += e where the layer has no dense FFN (d unread then), or
 * += e + d with the shared experts' d (DeepSeek). */
void eng_combine_sqrt2(const eng_session *s, const eng_layer *ly, float *x, const float *d,
                       const float *e);

/* ---- eng_mla.c: DeepSeek-V2's latent attention ---- */
int  eng_mla_bind(eng_session *s, eng_layer *ly, unsigned l);
void eng_mla_free(eng_layer *ly);
/* Position pos's projections q [n_heads (nope + rope)], k [rank + rope]
 * into the attention's q [n_heads head_dim] (but the absorbed part) and
 * the cached k; the heads' q_nope into nope [n_heads nope]. */
void eng_mla_qk(const eng_session *s, const eng_layer *ly, uint32_t pos, float *q, float *k,
                float *nope);
/* The low-rank query q_a [mla_q_rank] (the QKV stream's first matrix)
 * normed in place and prepared in act for q_b. */
void eng_mla_qa(const eng_session *s, const eng_layer *ly, float *qa, kern_act *act);
/* k_b's absorbed queries a [n_heads rank] into q's heads. */
void eng_mla_absorbed(const eng_session *s, const eng_layer *ly, float *q, const float *a);
/* The heads' attended latents from att [n_heads head_dim] into lat
 * [n_heads rank] (lat may be att). */
void eng_mla_latent(const eng_session *s, const eng_layer *ly, const float *att, float *lat);
/* eng_attn_block of an MLA layer. */
void eng_mla_attn_block(eng_session *s, eng_seq *seq, const eng_layer *ly, unsigned kvl,
                        const float *h, float *mout);

/* ---- eng_moe.c: routed experts ---- */
void eng_moe_issue(eng_session *s, unsigned l, const float *h, int32_t target,
                   double *pt);
int  eng_moe_inject(eng_session *s, int32_t target, float *eout, double *pt);
void eng_moe_block(eng_session *s, const eng_layer *ly, const float *h,
                   float *eout, double *pt);
int  eng_moe_take(eng_session *s, int32_t target, float *x, double *pt);
/* Release routes a failed token left in the ring. */
void eng_moe_flush(eng_session *s);
/* The router over xr = N_m(h) [dim] of layer ly: softmax, top-k with ties
 * to the lower index, weights renormalised over the k unless the header
 * says not; expert[top_k], w[top_k].  Uses s->probs.  eng_moe_route also
 * counts the choices (s->routed); eng_moe_topk, for guesses, does not. */
void eng_moe_route(eng_session *s, const eng_layer *ly, const float *xr,
                   int *expert, float *w);
void eng_moe_topk(eng_session *s, const eng_layer *ly, const float *xr,
                  int *expert, float *w);
/* eng_moe_route for m positions (m <= ENG_BATCH) of one layer in one pass
 * over its router: xr [m][dim] the router inputs, logits [m][n_experts]
 * scratch (left holding the probabilities), expert/w [m][top_k] each
 * position's choices and weights, the same as eng_moe_route gives it. */
void eng_moe_route_many(eng_session *s, const eng_layer *ly, unsigned m, const float *xr,
                        float *logits, int *expert, float *w);
/* n router passes (n <= ENG_AHEAD_MAX + 1) in one parallel region:
 * out[j] [n_experts] = the logits of layer ly[j]'s router over x[j]
 * [dim]; each logit one thread's whole dot product (the bits do not
 * depend on the thread count). */
void eng_moe_logits(eng_session *s, unsigned n, const eng_layer *const *ly,
                    const float *const *x, float *const *out);
/* Layer ly's router logits p [n_experts] (overwritten) through its bias
 * and the model's gating (eng_family.c): expert[top_k] in order, ties to
 * the lower index, w[top_k]. */
void eng_moe_pick(eng_session *s, const eng_layer *ly, float *p, int *expert, float *w);
/* Wait for route r's reads and rebase its experts into their slots (the
 * profiler's I/O figures; the wait is taken out of *pt); release them. */
void eng_moe_wait(eng_session *s, eng_route *r, double *pt);
/* The same for route r's expert j alone (nothing once the route was
 * waited for): its read, its check, its slot's rebase. */
void eng_moe_wait_one(eng_session *s, eng_route *r, uint32_t j, double *pt);
void eng_moe_release(eng_session *s, eng_route *r);

/* ---- eng_fetch.c: a routed expert's bytes, one interface ---- */
typedef struct eng_fetch_backend eng_fetch_backend;
/* The backend for the session's expert I/O mode and prefetch setting (in
 * place, prefetch, direct): after either changes. */
void eng_fetch_pick(eng_session *s);
/* eng_fetch's flags: a read wanted after every other (look-ahead past the
 * next layer), and a guess (no slot is no error). */
enum { ENG_FETCH_NOW = 0, ENG_FETCH_LATER = 1u << 0, ENG_FETCH_GUESS = 1u << 1 };
/* Start fetching expert e of stored layer l: the staging slot its bytes
 * come into, or -1 where they are read in place (mmap; the prefetch
 * thread gets its hints) or, with direct reads, no slot was free (a
 * routed fetch then fails the token, a guess does not); *hit: the bytes
 * were in the RAM cache already (or on their way). */
int  eng_fetch(eng_session *s, unsigned l, unsigned e, unsigned flags, int *hit);
/* The fetches started since the last submit go out together. */
void eng_fetch_submit(eng_session *s);
/* 1 when slot's bytes are there (or its read failed; -1: always). */
int  eng_fetch_landed(const eng_session *s, int slot);
/* A route's waits, summed for eng_fetch_account: the bytes read, the
 * reader's busy time when the last of them landed, the binds' CPU time. */
typedef struct eng_fetch_acc {
    uint64_t bytes;
    double   busy, work;
} eng_fetch_acc;
/* Wait for expert (l, e)'s fetch into slot (hit: it was a cache hit) and
 * bind the slot to it (its bytes checked, its streams rebased, once);
 * nothing for -1.  0, or -1 with the token failed (s->io.failed). */
int  eng_fetch_wait(eng_session *s, unsigned l, unsigned e, int slot, int hit,
                    eng_fetch_acc *acc);
/* The waits since t0 at routing layer l: their reads into the statistics
 * and the profiler, their stall into the profiler's I/O wait and out of
 * *pt (may be NULL). */
void eng_fetch_account(eng_session *s, unsigned l, const eng_fetch_acc *acc, double t0,
                       double *pt);
void eng_fetch_release(eng_session *s, int slot);   /* -1: nothing */
/* Expert e's gate/up (which 0) or down (1) stream as fetched into slot
 * (-1: the mapping's, layer ly's). */
const eng_mv *eng_fetch_mv(const eng_session *s, const eng_layer *ly, unsigned e, int slot,
                           int which);
/* 1 where fetches land in keyed slots a guess can fill (look-ahead). */
int  eng_fetch_keyed(const eng_session *s);
/* Fetches one wave may hold at once: the staging slots, or ENG_MAX_TOPK
 * read in place. */
unsigned eng_fetch_room(const eng_session *s);
/* n more tokens go through the layers: the expert cache's clock. */
void eng_fetch_tick(eng_session *s, unsigned n);
/* Mark this token's expert I/O failed with code rc (ENG_EIO, ENG_EFORMAT)
 * and a message (the first one stays: it is the cause). */
void eng_xio_fail(eng_session *s, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Expert e of layer ly's biases (gpt-oss; nothing without): gate g and up u
 * [expert_ffn] before the activation, the down projection's o [dim]. */
void eng_expert_bias_gu(const eng_session *s, const eng_layer *ly, int e, float *g, float *u);
void eng_expert_bias_down(const eng_session *s, const eng_layer *ly, int e, float *o);

/* ---- eng_moe_ahead.c: look-ahead reads of the next layer's experts ---- */
/* Resolve eng_opts.expert_ahead (-1: $CFLOW_EXPERT_AHEAD, else on) and
 * allocate the guesses where the model can use them (experts, expert_delay
 * 0); before eng_io_setup.  0, ENG_EARG or ENG_ENOMEM. */
int      eng_moe_ahead_setup(eng_session *s, char *err, size_t errlen);
void     eng_moe_ahead_free(eng_session *s);
/* Staging slots the guesses need beside a token's own; keyed: the slots
 * are a cache keyed by expert (0: none, no guesses then). */
unsigned eng_moe_ahead_slots(eng_session *s, int keyed);
/* The residual h [dim] before effective layer next (the end of layer
 * next - 1, or a token's embedding for next 0): guess the experts of the
 * blocks of effective layers next ... next + depth - 1 and issue their
 * reads into the cache. */
void     eng_moe_ahead_guess(eng_session *s, unsigned next, const float *h);
/* Layer l routed (r; its reads issued): count the pending guess against
 * it and release the guesses' slots. */
void     eng_moe_ahead_settle(eng_session *s, unsigned l, const eng_route *r);
/* Release a pending guess (a failed token). */
void     eng_moe_ahead_drop(eng_session *s);
/* The xio_pred* counts into st; xio_hits and xio_misses less the guesses'. */
void     eng_moe_ahead_stats(const eng_session *s, eng_stats *st);

/* ---- eng_moe_batch.c: a chunk's experts, grouped by expert ---- */
/* h [m][dim] (m <= ENG_BATCH): the residuals of m prompt positions after
 * layer l's attention; eout [m][dim] receives each one's weighted expert
 * sum (overwritten), the sums eng_moe_block gives position by position.
 * 0, or -1 after a failed read (s->io.failed holds why). */
int  eng_moe_batch(eng_session *s, unsigned l, const float *h, unsigned m,
                   float *eout, double *pt);

/* ---- eng_prefill.c: a batched prompt chunk ---- */
/* The batch room's m rows (m <= ENG_BATCH; the caller sets each row's seq
 * and pos) through the layers, row j with token tokens[j]; each row's
 * sequence takes its position.  logits: ENG_LOGITS_NONE, _LAST (the last
 * row's, into its sequence: a prompt chunk), _ALL (each row's into its
 * sequence: a decode step of several; eng_batch_logits first). */
enum { ENG_LOGITS_NONE = 0, ENG_LOGITS_LAST = 1, ENG_LOGITS_ALL = 2 };
void eng_forward_batch(eng_session *s, const int32_t *tokens, unsigned m, int logits);
/* 1 when the model's schedule runs chunks batched (ParallelSqrt2, no
 * trace); eng_batch_init allocates the chunk buffers once (0, or -1 out of
 * memory), eng_batch_free frees them. */
int  eng_batch_eligible(const eng_session *s);
int  eng_batch_init(eng_session *s);
void eng_batch_free(eng_session *s);
/* The rows' logits buffer of ENG_LOGITS_ALL ([ENG_BATCH][vocab], made on
 * first use): 0, or -1 out of memory. */
int  eng_batch_logits(eng_session *s);

/* ---- eng_forward.c: tokens under the guard ---- */
/* tokens[0..m) through eng_forward (batch 0: one token of seq) or
 * eng_forward_batch (the batch room's rows; want_logits ENG_LOGITS_*)
 * under a guard over the model's mapping. */
int  eng_guarded_run(eng_session *s, eng_seq *seq, const int32_t *tokens, unsigned m,
                     int batch, int want_logits, char *err, size_t errlen);

/* ---- eng_io_session.c: the session's expert I/O ---- */
int  eng_io_opts_from_env(eng_opts *o, char *err, size_t errlen);
int  eng_io_setup(eng_session *s, char *err, size_t errlen);
void eng_io_teardown(eng_session *s);
/* A failed expert read of the last token, as eng_decode's error. */
int  eng_xio_error(eng_session *s, char *err, size_t errlen);
/* The mode ENG_XIO_AUTO stands for with the model at path (mmap or
 * staged; staged sets o->expert_cache to auto unless one was given).
 * held: bytes of the model this process holds already (its copy in
 * anonymous memory, eng_weights_copied), counted as free: asked again
 * after an open that copied the model, auto must not find that the model
 * no longer fits beside itself. */
int  eng_io_auto(eng_opts *o, const char *path, uint64_t held);
/* Bytes the kernel can give without pushing anything out (eng_io_session.c:
 * MemAvailable or the cgroup's room, $CFLOW_MEM_FREE); 0: unknown. */
uint64_t eng_mem_free(void);
/* Whether the file at path takes at most num/den of eng_mem_free plus
 * held bytes: 1 yes, 0 no, -1 unknown (no such file, free memory
 * unreadable, den 0).  The one test behind auto expert I/O (9/10) and the
 * weights' placement (1/2, 4/5). */
int eng_file_fits(const char *path, unsigned num, unsigned den, uint64_t held);

/* ---- eng_prefetch.c: the session's per-layer hints ---- */
void eng_prefetch_next(eng_session *s, unsigned l);

#endif
