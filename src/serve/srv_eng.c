/*
 * srv_eng.c — the engine under the scheduler: n sequences of one model,
 * each with its own KV cache and position, and one decode step over
 * several of them.
 *
 * Each slot is an eng_seq of the one opened session (engine.h): the
 * model, its weights, the worker pool and expert I/O are the session's,
 * a sequence owns its KV cache (of the session's context and precision),
 * position, token history and logits.  A step is one eng_decode_batch:
 * a token for every busy slot as one pass over the weights (the batched
 * mat-mats, attention per sequence over its own cache, a MoE layer's
 * experts of all the sequences fetched once), each sequence's logits bit
 * for bit those of decoding it alone, so requests never change each
 * other's tokens.  A failure fails only its sequence (eng_seq_error
 * says why).  The session's own sequence is not a slot: the slots are
 * all alike.  One caller at a time: the scheduler's thread.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "serve/srv_impl.h"

struct srv_eng {
    eng_session *s;
    unsigned     n;
    eng_seq     *seq[SRV_SLOTS_MAX];
};

int srv_eng_open(srv_eng **out, eng_session *s, unsigned n, char *err, size_t errlen)
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
    e->s = s;
    for (; e->n < n; e->n++) {
        int rc = eng_seq_new(s, 0, &e->seq[e->n], err, errlen);
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
    for (unsigned i = 0; i < e->n; i++)
        eng_seq_free(e->seq[i]);
    free(e);
}

const char *srv_eng_kind(const srv_eng *e)
{
    (void)e;
    return "batched";
}

uint32_t srv_eng_n_ctx(const srv_eng *e)
{
    return eng_seq_n_ctx(e->seq[0]);
}

uint32_t srv_eng_n_past(const srv_eng *e, unsigned q)
{
    return eng_seq_n_past(e->seq[q]);
}

int srv_eng_prefill(srv_eng *e, unsigned q, const int32_t *tokens, size_t n,
                    size_t *n_reused, char *err, size_t errlen)
{
    return eng_seq_prefill_reuse(e->seq[q], tokens, n, n_reused, err, errlen);
}

unsigned srv_eng_step(srv_eng *e, const unsigned *qs, const int32_t *tokens, unsigned n,
                      int *rc, char (*errs)[SRV_ERRLEN])
{
    eng_seq *seqs[SRV_SLOTS_MAX] = { 0 };
    char err[SRV_ERRLEN];
    unsigned bad = 0;
    for (unsigned i = 0; i < n; i++)
        seqs[i] = e->seq[qs[i]];
    eng_decode_batch(e->s, seqs, tokens, n, rc, err, sizeof err);
    for (unsigned i = 0; i < n; i++) {
        snprintf(errs[i], SRV_ERRLEN, "%s", rc[i] ? eng_seq_error(seqs[i]) : "");
        bad += rc[i] != 0;
    }
    return bad;
}

void srv_eng_reset(srv_eng *e, unsigned q)
{
    eng_seq_reset(e->seq[q]);
}

float *srv_eng_logits(srv_eng *e, unsigned q)
{
    return eng_seq_logits(e->seq[q]);
}

void srv_eng_stats(const srv_eng *e, eng_stats *st)
{
    eng_get_stats(e->s, st);
}
