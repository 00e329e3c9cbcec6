/*
 * eng_impl.h — private to src/engine: declarations shared between the
 * engine's files (never included outside src/engine).  Several files add
 * to it; keep edits additive and grouped by defining file.
 */
#ifndef CFLOW_ENG_IMPL_H
#define CFLOW_ENG_IMPL_H

#include "engine/engine.h"

/* ---- eng_session.c ---- */
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
 * ($CFLOW_XIO_POLICY, else the default: eng_io.c, "Replacement"). */
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
 * issue hits their slot (eng_io.c, "Priority"). */
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
 * issues decay (eng_io.c, "Replacement"). */
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
/* The session: what its files share.  One job a file, top to bottom (a   */
/* file calls only files below it):                                         */
/*   eng_session.c   open (in named phases), close, accessors, threads,     */
/*                   profiler attachment, statistics                        */
/*   eng_kv.c        the KV cache: reset, rewind, reuse, context shift      */
/*   eng_forward.c   the walk; decode and prefill under the guard, checks   */
/*   eng_prefill.c   a batched prompt chunk through the layers              */
/*   eng_sched.c     the layer schedule of each combine style (a table)     */
/*   eng_moe_batch.c a chunk's routed experts, grouped by expert            */
/*   eng_moe.c       routed experts: routing, fetch, deferred compute       */
/*   eng_moe_ahead.c look-ahead: the next layer's experts guessed, read    */
/*   eng_blocks.c    the blocks: norms, attention, FFN, head, mat-vec/mat   */
/*   eng_io.c        expert I/O modes, their reader pool and RAM cache      */
/*   eng_prefetch.c  the PREFETCHT0 thread and its setter                   */
/*   eng_pool.c      the worker pool;  eng_guard.c  the SIGBUS guard        */
/*   eng_util.c      the error line, aligned allocation, environment counts */
/* ======================================================================= */
#include <stdarg.h>
#include "kernels/kern.h"


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
} eng_layer;

struct eng_session {
    fmt_model         *model;
    const fmt_hparams *hp;
    eng_tok           *tok;
    const kern_ops    *ops;
    eng_opts           opts;
    eng_layer         *layers;
    const fmt_stream  *embd;
    eng_mv             output;
    const float       *out_norm;
    eng_pool          *pool;
    uint32_t           n_ctx, n_past;
    uint32_t           q_dim, kv_dim, embd_col_tiles;
    uint32_t           hd_max;     /* widest head over the layers */

    float *x, *xb, *q, *att, *hb, *hb2, *logits, *scores, *kc, *vc, *inv_freq;
    float *k_tmp, *v_tmp;
    /* eng_prefill_reuse (eng_kv.c): ctx_tok [n_ctx] the token at each
     * cached position; positions [0, kv_exact) hold the rows a prefill of
     * their tokens computes (UINT32_MAX: all; a shift leaves n_keep);
     * pf_logits [vocab] the logits after the last reuse prefill, which
     * ended at position pf_pos (0: none kept) */
    int32_t *ctx_tok;
    uint32_t kv_exact, pf_pos;
    float   *pf_logits;
    /* the schedule (scripts/train/ARCHITECTURES.md): per-branch outputs
     * m, d, e [dim]; second stream a [dim]; residual history ring
     * hist [dense_delay+1][dim]; pending expert outputs pend [expert_delay+1]
     * [dim] with their target layers; router probabilities [E]; xr [dim]
     * the normalised router input */
    float *bm, *bd, *be, *bt, *ba, *hist, *pend, *probs, *xr;
    int32_t *pend_target;
    /* routed [n_layers][n_experts]: how often each expert was chosen
     * (eng_moe_route: decode and prefill), eng_expert_routed's counts */
    uint64_t *routed;
    unsigned n_eff;                     /* effective layers (FixedPoint) */
    eng_trace *trace;                   /* per-layer norms of the last pass */
    uint32_t hmax;                      /* max(ffn, expert ffn) */
    int kv_f16;                         /* resolved eng_opts.kv_f16: 0 or 1 */
    int ggml;                           /* llama.cpp arithmetic (GGUF model) */
    uint16_t *kc16, *vc16, *att16;
    float *rope_ff;                     /* [head_dim/2] ggml RoPE divisors, or NULL */
    kern_act act_dim, act_q, act_ffn;
    /* the routed experts of one decode step, a group of n_xg <=
     * ENG_MV_MAX at a time (eng_moe_inject): xg_h, xg_h2 [n_xg]
     * [expert_ffn] gate and up activations, xg_o [n_xg][dim] outputs,
     * xg_act [n_xg] the prepared down inputs */
    unsigned  n_xg;
    float    *xg_h, *xg_h2, *xg_o;
    kern_act *xg_act;
    eng_stats stats;
    uint64_t bytes_per_token;
    struct prof *prof;   /* profiling (eng_set_prof): NULL when off */
    uint64_t mv_bytes;   /* weight bytes matvec_stream read since the last
                            per-layer mark (prof_layer_bytes) */
    /* expert fetch (eng_io.c) and prefetch (eng_prefetch.c), see moe_issue */
    int          xio_mode;     /* enum eng_expert_io */
    eng_xio     *xio;          /* reader pool and staging slots (sync/staged) */
    struct eng_stage *stage;   /* [n_stage] tiles rebased into each slot */
    unsigned     n_stage;
    uint64_t     xio_cache_bytes; /* the slots' bytes beyond a token's staging */
    int          xio_keyed;    /* a cache budget: slots keep what they read */
    int          xio_auto;     /* the mode was chosen by ENG_XIO_AUTO */
    struct eng_route *route;   /* [expert_delay + 1] routed, not yet injected */
    /* this token's expert bytes failed: 0 no, else the code, ENG_EIO (a
     * read) or ENG_EFORMAT (the bytes read were refused); xio_err says why */
    int          xio_failed;
    double       xio_busy;     /* the reader pool's busy seconds charged so far */
    char         xio_err[320];
    struct eng_ahead *ahead;   /* look-ahead guesses (eng_moe_ahead.c), NULL off */
    eng_pf      *pf;           /* the PREFETCHT0 thread, NULL when off */
    /* the model file shrank under its mapping (eng_guard.c): the offset
     * of the byte whose read faulted; every later token fails */
    int      broken;
    uint64_t fault_off;
    /* non-finite values (eng_check_finite): probe on while a bad token is
     * run again, bad_layer the first effective layer whose residual held
     * NaN or infinity (-1: none yet) */
    int      probe, bad_layer;
    /* parallel attention (eng_blocks.c attn_scratch): per head, scores
     * [n_ctx] floats and 2*hd_max halves of scratch, for par_heads heads
     * (a batched prefill's threads each have n_heads of them) */
    float    *par_sc;
    uint16_t *par_h16;
    uint32_t  par_heads;
    /* a prompt chunk's tiled attention (eng_blocks.c attn_tiled):
     * pf_tiled says whether this chunk takes it (llama.cpp's rule, set per
     * chunk by eng_prefill); pf_work is pf_work_n floats per pool thread
     * (kern_attn_pf_fn's work for one claim) for pf_work_threads threads */
    int       pf_tiled;
    float    *pf_work;
    size_t    pf_work_n;
    uint32_t  pf_work_threads;
    /* batched prefill (forward_batch), allocated on first use for
     * ENG_BATCH positions: residuals bx [B][dim], normalised bxb [B][dim],
     * branch outputs bo [B][dim], bq/batt [B][q_dim], bk/bv [B][kv_dim],
     * bh/bh2 [B][hmax]; one prepared input per position for each width.
     * MoE layers (eng_moe_batch.c) add: the dense FFN's output bdn [B][dim],
     * the experts' sums be_b [B][dim], router inputs bxr [B][dim] with their
     * prepared inputs bact_xr [B], and per position and choice t < top_k the
     * expert bsel [B][K], its weight bw [B][K] and its output bexp
     * [B][K][dim]; the choices grouped by expert: bord [B*K] indices into
     * bsel, bcnt [n_experts + 1] group starts, bcur [n_experts] cursors;
     * the router's logits blog [B][n_experts] */
    float    *bx, *bxb, *bo, *bq, *batt, *bk, *bv, *bh, *bh2;
    kern_act *bact_dim, *bact_q, *bact_ffn;
    float    *bdn, *be_b, *bxr, *bw, *bexp, *blog;
    kern_act *bact_xr;
    int      *bsel, *bord, *bcnt, *bcur;
    int       batch_ready;
};

/* Positions a batched prefill runs through the layers together. */
#define ENG_BATCH 32

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
double eng_l2(const float *x, uint32_t n);
void eng_embed(eng_session *s, int32_t token, float *x);
void eng_rmsnorm(const eng_session *s, float *out, const float *x,
                 const float *w, unsigned n);
void eng_attn_qkv_post(eng_session *s, const eng_layer *ly, uint32_t pos,
                       float *q, float *k, float *v);
void eng_attn_store_attend(eng_session *s, const eng_layer *ly, unsigned kvl,
                           uint32_t pos, const float *q, const float *k,
                           const float *v, float *att);
void eng_attn_store_attend_batch(eng_session *s, const eng_layer *ly,
                                 unsigned kvl, uint32_t pos0, unsigned m,
                                 const float *q, const float *k,
                                 const float *v, float *att);
void eng_attn_block(eng_session *s, const eng_layer *ly, unsigned kvl,
                    const float *h, float *mout);
void eng_glu_act(eng_session *s, float *g, const float *u, uint32_t n);
/* n tile streams in one parallel region (eng_blocks.c): out[j][matrix]
 * += stream j's tiles over x[j]; n <= ENG_MV_MAX. */
void eng_matvec_streams(eng_session *s, unsigned n, const eng_mv *const *mv,
                        const kern_act *const *x, float *const *const *out);
void eng_glu_ffn(eng_session *s, const eng_mv *gu, const eng_mv *down,
                 uint32_t hidden, uint8_t mg, uint8_t mu, uint8_t md,
                 const kern_act *act, float *dout);
void eng_ffn_block(eng_session *s, const eng_layer *ly, const float *h,
                   float *dout);
/* s->x (the final residual) through the output norm and the LM head into
 * s->logits. */
void eng_lm_head(eng_session *s);
/* 1 when x[0..n) holds no NaN and no infinity. */
int  eng_finite(const float *x, uint32_t n);
/* The m-position mat-mat of a (fused) tile stream: out[matrix] + j *
 * ld[matrix] receives position j's sums of x[j] (outputs zeroed by the
 * caller), each exactly the sums the mat-vec gives that position alone. */
void eng_matmat_stream(eng_session *s, const eng_mv *mv, const kern_act *x,
                       unsigned m, float *const *out, const size_t *ld);

/* ---- eng_forward.c: the walk and the calls that run it ---- */
/* One token at position n_past through the model; ENG_EIO when an expert
 * read failed (the position is not taken). */
int  eng_forward(eng_session *s, int32_t token, int want_logits);
/* After the logits of token (the last fed, at n_past - 1): 0 when they are
 * all finite, else ENG_ENAN naming the first bad layer; the position is
 * dropped. */
int  eng_check_finite(eng_session *s, int32_t token, char *err, size_t errlen);

/* ---- eng_sched.c: the layer schedules ---- */
/* s->x holds the embedding on entry and the final residual on return. */
void eng_run_layers(eng_session *s);
/* Close the profiler's part `part` of layer l (time since *pt, and the
 * bytes streamed since the last mark). */
void eng_mark(eng_session *s, unsigned l, int part, double *pt);
void eng_add_to(float *x, const float *y, uint32_t n);

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
/* Logits p [n_experts] into probabilities (in place), then the top-k as
 * eng_moe_route: expert[top_k] in order, ties to the lower index, w[top_k]. */
void eng_moe_pick(eng_session *s, float *p, int *expert, float *w);
/* Wait for route r's reads and rebase its experts into their slots (the
 * profiler's I/O figures; the wait is taken out of *pt); release them. */
void eng_moe_wait(eng_session *s, eng_route *r, double *pt);
/* The same for route r's expert j alone (nothing once the route was
 * waited for): its read, its check, its slot's rebase. */
void eng_moe_wait_one(eng_session *s, eng_route *r, uint32_t j, double *pt);
/* Mark this token's expert I/O failed with code rc (ENG_EIO, ENG_EFORMAT)
 * and a message (the first one stays: it is the cause). */
void eng_xio_fail(eng_session *s, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void eng_moe_release(eng_session *s, eng_route *r);

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
 * 0, or -1 after a failed read (s->xio_failed holds why). */
int  eng_moe_batch(eng_session *s, unsigned l, const float *h, unsigned m,
                   float *eout, double *pt);

/* ---- eng_prefill.c: a batched prompt chunk ---- */
void eng_forward_batch(eng_session *s, const int32_t *tokens, unsigned m,
                       int want_logits);
/* 1 when the model's schedule runs chunks batched (ParallelSqrt2, no
 * trace); eng_batch_init allocates the chunk buffers once (0, or -1 out of
 * memory), eng_batch_free frees them. */
int  eng_batch_eligible(const eng_session *s);
int  eng_batch_init(eng_session *s);
void eng_batch_free(eng_session *s);

/* ---- eng_forward.c: tokens under the guard ---- */
/* tokens[0..m) through eng_forward (batch 0: one token) or
 * eng_forward_batch under a guard over the model's mapping. */
int  eng_guarded_run(eng_session *s, const int32_t *tokens, unsigned m,
                     int batch, int want_logits, char *err, size_t errlen);
/* The error of a session whose model file shrank under the mapping. */
int  eng_model_fault(eng_session *s, char *err, size_t errlen);
/* A token that may be fed: the session is whole, the id in the
 * vocabulary, a position free. */
int  eng_check_token(eng_session *s, int32_t token, char *err, size_t errlen);

/* ---- eng_io.c: the session's expert I/O ---- */
int  eng_io_opts_from_env(eng_opts *o, char *err, size_t errlen);
int  eng_io_setup(eng_session *s, char *err, size_t errlen);
void eng_io_teardown(eng_session *s);
/* A failed expert read of the last token, as eng_decode's error. */
int  eng_xio_error(eng_session *s, char *err, size_t errlen);
/* The mode ENG_XIO_AUTO stands for with the model at path (mmap or
 * staged; staged sets o->expert_cache to auto unless one was given). */
int  eng_io_auto(eng_opts *o, const char *path);
/* Bytes the kernel can give without pushing anything out (eng_io.c:
 * MemAvailable or the cgroup's room, $CFLOW_MEM_FREE); 0: unknown. */
uint64_t eng_mem_free(void);
/* Whether the file at path takes at most num/den of eng_mem_free: 1 yes,
 * 0 no, -1 unknown (no such file, free memory unreadable, den 0).  The one
 * test behind auto expert I/O (9/10) and the weights' placement (1/2). */
int eng_file_fits(const char *path, unsigned num, unsigned den);

/* ---- eng_prefetch.c: the session's prefetch ---- */
void eng_prefetch_next(eng_session *s, unsigned l);

#endif
