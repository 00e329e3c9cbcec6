/*
 * srv_eng.c — the engine under the scheduler: n sequences of one model,
 * each with its own KV cache and position, and one decode step over
 * several of them.
 *
 * This is the interface the scheduler is written against; it asks of the
 * engine what its batched multi-sequence decode gives (sequences sharing
 * one opened model, a step for several of them, each sequence's logits
 * those of decoding it alone).  Until that lands in src/engine, it is
 * implemented over what engine.h offers: one eng_session a sequence,
 * opened from the same file with the same options and mapping it
 * (no_mmap 0: every session reads the same page cache, so n sequences hold
 * the weights once), and a step that decodes the sequences one after
 * another.  Tokens are then exactly those of decoding each alone, but a
 * step costs n passes over the weights, not one; the scheduler above does
 * not change when the step becomes one pass.
 *
 * The expert I/O of the extra sessions follows the first's: the mode it
 * resolved (auto chooses once) and, for sync or staged reads, its RAM
 * cache split evenly, so n sessions never ask for n times the memory.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "serve/srv_impl.h"

struct srv_eng {
    unsigned     n;
    eng_session *seq[SRV_SLOTS_MAX];   /* seq[0] is the caller's */
};

int srv_eng_open(srv_eng **out, eng_session *first, const char *path, const eng_opts *o,
                 unsigned n, char *err, size_t errlen)
{
    *out = NULL;
    if (n == 0 || n > SRV_SLOTS_MAX) {
        snprintf(err, errlen, "%u sequences: from 1 to %d", n, SRV_SLOTS_MAX);
        return ENG_EARG;
    }
    srv_eng *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(err, errlen, "out of memory");
        return ENG_ENOMEM;
    }
    e->seq[0] = first;
    e->n = 1;
    eng_opts so = *o;
    so.no_mmap = 0;
    so.n_ctx = eng_n_ctx(first);
    if (eng_hparams(first)->n_experts) {
        eng_stats st;
        eng_get_stats(first, &st);
        so.expert_io = eng_expert_io(first);
        so.expert_cache = so.expert_io == ENG_XIO_MMAP ? 0
                                                       : (int64_t)(st.xio_cache_bytes / n);
    }
    for (; e->n < n; e->n++) {
        int rc = eng_open(&e->seq[e->n], path, &so, err, errlen);
        if (rc) {
            srv_eng_close(e);
            return rc;
        }
    }
    *out = e;
    return 0;
}

void srv_eng_close(srv_eng *e)
{
    if (!e)
        return;
    for (unsigned i = 1; i < e->n; i++)
        eng_close(e->seq[i]);
    free(e);
}

const char *srv_eng_kind(const srv_eng *e)
{
    (void)e;
    return "sessions";
}

uint32_t srv_eng_n_ctx(const srv_eng *e)
{
    return eng_n_ctx(e->seq[0]);
}

uint32_t srv_eng_n_past(const srv_eng *e, unsigned q)
{
    return eng_n_past(e->seq[q]);
}

int srv_eng_prefill(srv_eng *e, unsigned q, const int32_t *tokens, size_t n,
                    size_t *n_reused, char *err, size_t errlen)
{
    return eng_prefill_reuse(e->seq[q], tokens, n, n_reused, err, errlen);
}

unsigned srv_eng_step(srv_eng *e, const unsigned *qs, const int32_t *tokens, unsigned n,
                      int *rc, char (*errs)[SRV_ERRLEN])
{
    unsigned bad = 0;
    for (unsigned i = 0; i < n; i++) {
        errs[i][0] = '\0';
        rc[i] = eng_decode(e->seq[qs[i]], tokens[i], errs[i], SRV_ERRLEN);
        bad += rc[i] != 0;
    }
    return bad;
}

void srv_eng_reset(srv_eng *e, unsigned q)
{
    eng_reset(e->seq[q]);
}

float *srv_eng_logits(srv_eng *e, unsigned q)
{
    return eng_logits(e->seq[q]);
}

void srv_eng_stats(const srv_eng *e, eng_stats *st)
{
    memset(st, 0, sizeof *st);
    for (unsigned i = 0; i < e->n; i++) {
        eng_stats one;
        eng_get_stats(e->seq[i], &one);
        st->n_prompt += one.n_prompt;
        st->n_gen += one.n_gen;
        st->prefill_s += one.prefill_s;
        st->decode_s += one.decode_s;
        st->bytes_per_token = one.bytes_per_token;
        st->expert_bytes += one.expert_bytes;
        st->expert_tokens += one.expert_tokens;
        st->xio_bytes += one.xio_bytes;
        st->xio_hits += one.xio_hits;
        st->xio_misses += one.xio_misses;
        st->xio_cache_bytes += one.xio_cache_bytes;
    }
}
