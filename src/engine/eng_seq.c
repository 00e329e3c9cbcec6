/*
 * eng_seq.c — a sequence: what each stream of tokens owns (eng_seq,
 * eng_impl.h), made for a session's geometry and freed: its KV cache, per
 * effective layer a first row and a row count (the context, or a sliding
 * window's ring where that is shorter: eng_kv_row), MLA's without V; its
 * tokens and logits; and what its cache measures (eng_kv_bytes).
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>

#include "engine/engine.h"
#include "engine/eng_impl.h"

/* ---- sequences: what each stream of tokens owns (eng_impl.h) ---------- */

int eng_seq_new(eng_session *s, uint32_t n_ctx, eng_seq **out, char *err, size_t errlen)
{
    const fmt_hparams *hp = s->hp;
    const char *path = fmt_model_path(s->model);
    *out = NULL;
    if (!n_ctx && s->seq)
        n_ctx = s->seq->n_ctx;
    if (n_ctx > hp->max_seq)
        return eng_fail(err, errlen, ENG_EARG,
                        "%s: a context of %u positions: the model has %u", path, n_ctx,
                        hp->max_seq);
    eng_seq *seq = calloc(1, sizeof *seq);
    int oom = !seq;
    size_t kv = 0;
    if (seq) {
        /* each layer's rows: the context, or a sliding window's (a ring) */
        const unsigned reps = s->n_eff / hp->n_layers;
        seq->kv_off = eng_xalloc(s->n_eff * sizeof *seq->kv_off, &oom);
        seq->kv_cap = eng_xalloc(s->n_eff * sizeof *seq->kv_cap, &oom);
        for (unsigned l = 0; !oom && l < s->n_eff; l++) {
            const uint32_t W = s->layers[l / reps].g->sliding_window;
            seq->kv_cap[l] = W && W < n_ctx ? W : n_ctx;
            seq->ring |= seq->kv_cap[l] < n_ctx;
            seq->kv_off[l] = kv;
            kv += seq->kv_cap[l];
        }
        kv *= s->kv_dim;
        seq->s = s;
        seq->n_ctx = n_ctx;
        seq->kv_exact = UINT32_MAX;
        seq->tok = eng_xalloc(n_ctx * sizeof(int32_t), &oom);
        seq->logits = eng_xalloc(hp->vocab_size * sizeof(float), &oom);
        /* MLA's values are its keys' rows (eng_mla.c): no V cache */
        if (s->kv_f16) {
            seq->kc16 = eng_xalloc(kv * sizeof(uint16_t), &oom);
            if (!hp->mla_rank)
                seq->vc16 = eng_xalloc(kv * sizeof(uint16_t), &oom);
        } else {
            seq->kc = eng_xalloc(kv * sizeof(float), &oom);
            if (!hp->mla_rank)
                seq->vc = eng_xalloc(kv * sizeof(float), &oom);
        }
        seq->next = s->seqs;        /* (eng_seq_free unlinks it) */
        s->seqs = seq;
    }
    if (oom || eng_scratch_ctx(s, n_ctx)) {
        eng_seq_free(seq);
        return eng_fail(err, errlen, ENG_ENOMEM,
                        "%s: out of memory for a %u-token context (%.1f MiB of KV cache)",
                        path, n_ctx, (double)kv * (s->kv_f16 ? 2 : 4) * (hp->mla_rank ? 1 : 2) /
                                         (1024.0 * 1024.0));
    }
    *out = seq;
    return 0;
}

void eng_seq_free(eng_seq *seq)
{
    if (!seq)
        return;
    for (eng_seq **p = &seq->s->seqs; *p; p = &(*p)->next)
        if (*p == seq) {
            *p = seq->next;
            break;
        }
    free(seq->kc); free(seq->vc); free(seq->kc16); free(seq->vc16);
    free(seq->kv_off); free(seq->kv_cap);
    free(seq->tok); free(seq->logits); free(seq->reuse_logits);
    free(seq);
}

float *eng_seq_logits(eng_seq *seq) { return seq->logits; }
uint32_t eng_seq_n_past(const eng_seq *seq) { return seq->n_past; }
uint32_t eng_seq_n_ctx(const eng_seq *seq) { return seq->n_ctx; }
const char *eng_seq_error(const eng_seq *seq) { return seq->err; }

uint64_t eng_kv_bytes(const eng_session *s, int layer)
{
    const eng_seq *seq = s->seq;
    uint64_t rows = 0;
    for (unsigned l = 0; l < s->n_eff; l++)
        if (layer < 0 || (unsigned)layer == l)
            rows += seq->kv_cap[l];
    return rows * s->kv_dim * (s->hp->mla_rank ? 1u : 2u) *
           (s->kv_f16 ? sizeof(uint16_t) : sizeof(float));
}
