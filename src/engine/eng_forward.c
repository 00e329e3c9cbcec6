/*
 * eng_forward.c — the walk and the calls that run it: a token from the
 * embedding to the logits, decode, prefill, each under the guard.
 *
 * eng_forward is the whole walk, as in llama2.c's run.c: the token's
 * embedding row into the residual x, the layer stack (eng_run_layers: the
 * model's combine style picks the schedule, eng_sched.c), the output norm
 * and the LM head into the logits.  The blocks it is built of are
 * eng_blocks.c's, routed experts eng_moe.c's, a batched prompt chunk
 * eng_prefill.c's.
 *
 * The public calls that run tokens live here, on top of everything else
 * in the module: eng_seq_decode (one token of a sequence), eng_seq_prefill
 * (a prompt, in chunks where the schedule allows, else token by token),
 * eng_decode_batch (a token of each of several sequences, as one pass
 * where the schedule allows, else one after another) and the session's
 * own eng_decode and eng_prefill, which are those on its own sequence;
 * with the checks around them — a token's id and the room left in the
 * context (eng_check_token, eng_check.c), a model file that shrank under
 * the mapping (eng_guarded_run), logits that are not finite
 * (eng_check_finite, which runs the token again to name the first layer
 * that went wrong).  Only eng_kv.c's reuse prefill calls into this file.
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/eng_impl.h"
#include "prof/prof.h"

/* The walk: embedding, layers, head. */
int eng_forward(eng_session *s, eng_seq *seq, int32_t token, int want_logits)
{
    const fmt_hparams *hp = s->hp;

    if (!s->chk.probe)
        eng_fetch_tick(s, 1);        /* the expert cache's clock (a probe's rerun: not a token) */
    eng_embed(s, token, s->dec.x);
    eng_moe_ahead_guess(s, 0, s->dec.x);   /* the first layers' experts, read ahead */
    eng_run_layers(s, seq);
    if (s->io.failed)
        return ENG_EIO;   /* the position is not taken: eng_decode reports */
    if (hp->n_experts)
        s->stats.expert_tokens++;
    seq->tok[seq->n_past++] = token;
    if (!want_logits)
        return 0;

    eng_lm_head(s, seq->logits);
    return 0;
}

/* Non-finite logits are rare and a scan of them is cheap, so the layer to
 * blame is looked for only then: the token runs again at its position
 * (rewriting its cache rows with the same values) with every layer end
 * checked (eng_probe_layer, eng_check.c), the embedding checked first.  The
 * position is then dropped: its cache rows hold the bad values. */
int eng_check_finite(eng_session *s, eng_seq *seq, int32_t token, char *err,
                     size_t errlen)
{
    const fmt_hparams *hp = s->hp;
    const char *path = fmt_model_path(s->model);
    if (eng_finite(seq->logits, hp->vocab_size))
        return 0;
    struct prof *p = s->prof;
    eng_trace *t = s->trace;
    uint32_t pos = --seq->n_past;
    int rc;
    eng_embed(s, token, s->dec.x);
    if (!eng_finite(s->dec.x, hp->dim)) {
        seq->n_past = pos;
        return eng_fail(err, errlen, ENG_ENAN,
                        "%s: the embedding of token %d holds NaN or infinity", path,
                        token);
    }
    s->prof = NULL;                  /* the second run is not a token */
    s->trace = NULL;
    s->chk.probe = 1;
    s->chk.bad_layer = -1;
    rc = eng_guarded_run(s, seq, &token, 1, 0, 1, err, errlen);
    s->chk.probe = 0;
    s->prof = p;
    s->trace = t;
    seq->n_past = pos;
    s->io.failed = 0;
    if (rc)
        return rc;
    if (hp->n_experts)
        s->stats.expert_tokens--;    /* counted by the second run */
    if (s->chk.bad_layer < 0)
        return eng_fail(err, errlen, ENG_ENAN,
                        "%s: the logits at position %u hold NaN or infinity, every "
                        "layer's output is finite: the output norm or head", path, pos);
    unsigned reps = s->n_eff / hp->n_layers, l = (unsigned)s->chk.bad_layer;
    if (reps > 1)
        return eng_fail(err, errlen, ENG_ENAN,
                        "%s: NaN or infinity in the residual stream after layer %u "
                        "(application %u of %u; token %d at position %u)", path,
                        l / reps, l % reps + 1, reps, token, pos);
    return eng_fail(err, errlen, ENG_ENAN,
                    "%s: NaN or infinity in the residual stream after layer %u "
                    "(token %d at position %u)", path, l, token, pos);
}

int eng_seq_decode(eng_seq *seq, int32_t token, char *err, size_t errlen)
{
    eng_session *s = seq->s;
    int rc = eng_check_token(s, seq, token, err, errlen);
    if (rc)
        return rc;
    if (s->prof)
        prof_token_begin(s->prof);
    double t0 = prof_now();
    if ((rc = eng_guarded_run(s, seq, &token, 1, 0, 1, err, errlen)))
        return rc;
    if (s->io.failed)
        return eng_xio_error(s, err, errlen);
    if ((rc = eng_check_finite(s, seq, token, err, errlen)))
        return rc;
    s->stats.decode_s += prof_now() - t0;
    if (s->prof)
        prof_token_end(s->prof, PROF_DECODE);
    s->stats.n_gen++;
    return 0;
}

int eng_decode(eng_session *s, int32_t token, char *err, size_t errlen)
{
    return eng_seq_decode(s->seq, token, err, errlen);
}

/* ---- one decode step of several sequences ----------------------------- */

/* The rows ok[0..m) of a decode step (indices into seqs and tokens) as one
 * pass through the layers: every row's logits into its sequence, then
 * each checked for NaN and infinity on its own.  Codes into rcs. */
static void decode_rows(eng_session *s, eng_seq *const *seqs, const int32_t *tokens,
                        const unsigned *ok, unsigned m, int *rcs)
{
    int32_t tok[ENG_BATCH];
    char line[sizeof seqs[0]->err];
    for (unsigned j = 0; j < m; j++) {
        s->bat.seq[j] = seqs[ok[j]];
        s->bat.pos[j] = seqs[ok[j]]->n_past;
        tok[j] = tokens[ok[j]];
    }
    s->bat.tiled = 0;                /* decode's attention kernel, as alone */
    if (s->prof)
        prof_token_begin(s->prof);
    int rc = eng_guarded_run(s, NULL, tok, m, 1, ENG_LOGITS_ALL, line, sizeof line);
    if (!rc && s->io.failed)
        rc = eng_xio_error(s, line, sizeof line);
    /* the pass's time, bytes and counters on the record of its first
     * row, empty records for the others (as a prompt chunk's) */
    if (s->prof) {
        prof_token_end(s->prof, PROF_DECODE);
        for (unsigned j = 1; j < m; j++) {
            prof_token_begin(s->prof);
            prof_token_end(s->prof, PROF_DECODE);
        }
    }
    for (unsigned j = 0; j < m; j++) {
        eng_seq *seq = seqs[ok[j]];
        if (rc)                      /* a shared read or the file: every row */
            rcs[ok[j]] = eng_fail(seq->err, sizeof seq->err, rc, "%s", line);
        else if (!(rcs[ok[j]] = eng_check_finite(s, seq, tok[j], seq->err, sizeof seq->err)))
            s->stats.n_gen++;
    }
}

/* Whether a decode step of several sequences runs as one pass: the
 * schedule batches (eng_batch_eligible) and the batch room and its logits
 * are there. */
static int batch_decodes(eng_session *s)
{
    return eng_batch_eligible(s) && !getenv("CFLOW_NO_BATCH") && !eng_batch_init(s) &&
           !eng_batch_logits(s);
}

int eng_decode_batch(eng_session *s, eng_seq *const *seqs, const int32_t *tokens,
                     unsigned n, int *rcs, char *err, size_t errlen)
{
    unsigned ok[ENG_BATCH], m = 0;
    const int batched = n > 1 && batch_decodes(s);
    double t0 = prof_now();
    for (unsigned i = 0; i < n; i++) {
        eng_seq *seq = seqs[i];
        const size_t el = sizeof seq->err;
        rcs[i] = seq->s != s ? eng_fail(seq->err, el, ENG_EARG, "a sequence of another session")
                             : eng_check_token(s, seq, tokens[i], seq->err, el);
        for (unsigned k = 0; !rcs[i] && k < i; k++)
            if (seqs[k] == seq)
                rcs[i] = eng_fail(seq->err, el, ENG_EARG,
                                  "sequence %u is sequence %u again: one token each a step", i,
                                  k);
        if (rcs[i])
            continue;
        seq->err[0] = 0;
        if (!batched)                /* one after another: eng_seq_decode's */
            rcs[i] = eng_seq_decode(seq, tokens[i], seq->err, el);
        else if ((ok[m++] = i, m == ENG_BATCH)) {
            decode_rows(s, seqs, tokens, ok, m, rcs);
            m = 0;
        }
    }
    if (m)
        decode_rows(s, seqs, tokens, ok, m, rcs);
    if (batched)
        s->stats.decode_s += prof_now() - t0;
    for (unsigned i = 0; i < n; i++)
        if (rcs[i])
            return eng_fail(err, errlen, rcs[i], "%s", seqs[i]->err);
    return 0;
}

/* tokens[0..m) through eng_forward (batch 0: one token of seq) or
 * eng_forward_batch (the rows the caller set in the batch room), with a
 * guard over the model's mapping (eng_guard.c): a SIGBUS from a file
 * truncated under us, on this thread or a worker, comes back as ENG_EIO
 * and breaks the session. */
int eng_guarded_run(eng_session *s, eng_seq *seq, const int32_t *tokens, unsigned m,
                    int batch, int want_logits, char *err, size_t errlen)
{
    uint64_t size = 0;
    const uint8_t *base = fmt_model_map(s->model, &size);
    eng_guard g;
    g.lo = base;
    g.hi = base + size;
    if (sigsetjmp(g.jb, 0)) {
        eng_guard_pop(&g);
        s->chk.broken = 1;
        s->chk.fault_off = (uint64_t)((const uint8_t *)g.addr - base);
        return eng_model_fault(s, err, errlen);
    }
    eng_guard_push(&g);
    if (batch)
        eng_forward_batch(s, tokens, m, want_logits);
    else
        eng_forward(s, seq, tokens[0], want_logits);
    eng_guard_pop(&g);
    return 0;
}

/* Whether the chunk that starts at token i of an n-token prompt takes the
 * tiled attention (eng_attn.c attn_tiled): llama.cpp splits a prompt
 * into ubatches of ENG_UBATCH tokens (its default n_ubatch) and runs a
 * ubatch of ENG_TILED_MIN tokens or more (its GGML_FA_TILE_Q) through its
 * tiled flash attention, a shorter one through the single-query kernel
 * that decode uses too; doing the same keeps a GGUF model's prompt on
 * llama.cpp's bits.  ENG_UBATCH is a multiple of ENG_BATCH, so a chunk
 * lies in one ubatch. */
#define ENG_UBATCH    512u
#define ENG_TILED_MIN 64u
_Static_assert(ENG_UBATCH % ENG_BATCH == 0, "a chunk lies in one ubatch");
static int ubatch_tiled(size_t n, size_t i)
{
    const size_t u0 = i / ENG_UBATCH * ENG_UBATCH;
    return n - u0 >= ENG_TILED_MIN;
}

/* Batched prefill of tokens[0..n), or 1 when the model's schedule (or
 * memory) does not allow it and the caller should go token by token.
 * Every token is checked before any is run. */
static int prefill_batched(eng_session *s, eng_seq *seq, const int32_t *tokens, size_t n,
                           char *err, size_t errlen)
{
    if (n < 2 || !eng_batch_eligible(s) || getenv("CFLOW_NO_BATCH") || eng_batch_init(s))
        return 1;
    if (s->chk.broken)
        return eng_model_fault(s, err, errlen);
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= s->hp->vocab_size)
            return eng_fail(err, errlen, ENG_EARG,
                        "token id %d is outside the %u-token vocabulary", tokens[i],
                        s->hp->vocab_size);
    for (size_t i = 0; i < n;) {
        if (seq->n_past >= seq->n_ctx)
            return eng_fail(err, errlen, ENG_ECTX,
                        "context full: all %u positions are used", seq->n_ctx);
        size_t m = n - i < ENG_BATCH ? n - i : ENG_BATCH;
        if (m > seq->n_ctx - seq->n_past)
            m = seq->n_ctx - seq->n_past;
        if (s->prof)
            prof_token_begin(s->prof);
        for (unsigned j = 0; j < m; j++) {     /* the rows: the chunk's positions */
            s->bat.seq[j] = seq;
            s->bat.pos[j] = seq->n_past + j;
        }
        s->bat.tiled = s->opts.prefill_attn != 0 && ubatch_tiled(n, i);
        int rc = eng_guarded_run(s, seq, tokens + i, (unsigned)m, 1,
                                 i + m == n ? ENG_LOGITS_LAST : ENG_LOGITS_NONE, err, errlen);
        s->bat.tiled = 0;
        if (rc)
            return rc;
        if (s->io.failed)
            return eng_xio_error(s, err, errlen);
        /* The profiler counts tokens: the chunk's time, bytes and counters
         * go on the record of its first position, the others get empty
         * records, so run totals and per-layer sums stay right. */
        if (s->prof) {
            prof_token_end(s->prof, PROF_PREFILL);
            for (size_t k = 1; k < m; k++) {
                prof_token_begin(s->prof);
                prof_token_end(s->prof, PROF_PREFILL);
            }
        }
        i += m;
    }
    return 0;
}

int eng_seq_prefill(eng_seq *seq, const int32_t *tokens, size_t n, char *err,
                    size_t errlen)
{
    eng_session *s = seq->s;
    double t0 = prof_now();
    int rc = prefill_batched(s, seq, tokens, n, err, errlen);
    if (rc < 0)
        return rc;
    for (size_t i = 0; rc > 0 && i < n; i++) {   /* token by token */
        if ((rc = eng_check_token(s, seq, tokens[i], err, errlen)))
            return rc;
        if (s->prof)
            prof_token_begin(s->prof);
        if ((rc = eng_guarded_run(s, seq, tokens + i, 1, 0, i + 1 == n, err, errlen)))
            return rc;
        if (s->io.failed)
            return eng_xio_error(s, err, errlen);
        if (s->prof)
            prof_token_end(s->prof, PROF_PREFILL);
        rc = 1;
    }
    if (n && (rc = eng_check_finite(s, seq, tokens[n - 1], err, errlen)))
        return rc;
    s->stats.prefill_s += prof_now() - t0;
    s->stats.n_prompt += n;
    return 0;
}

int eng_prefill(eng_session *s, const int32_t *tokens, size_t n, char *err,
                size_t errlen)
{
    return eng_seq_prefill(s->seq, tokens, n, err, errlen);
}
