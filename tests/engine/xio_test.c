/*
 * xio_test.c — the expert I/O tests' helpers (xio_test.h).
 */
#include "config.h"

#include "xio_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

void xt_synth(const char *preset, const char *suffix, int vflow, char *out)
{
    xt_synth_q(preset, NULL, suffix, vflow, out);
}

void xt_synth_q(const char *preset, const char *quant, const char *suffix, int vflow,
                char *out)
{
    tu_proc p;
    snprintf(out, 4096, "%s%s%s%s", tu_tmp(preset), quant ? "-" : "", quant ? quant : "",
             suffix);
    assert_int_equal(tu_cflow_run(&p, "synth", "-q", quant ? quant : "q4_0",
                                  vflow ? "--vflow" : preset, vflow ? preset : out,
                                  vflow ? out : (char *)NULL, (char *)NULL), 0);
    if (p.status)
        fprintf(stderr, "synth %s: %s", preset, p.err);
    assert_int_equal(p.status, 0);
    tu_proc_free(&p);
}

void xt_cap_log(void *ud, int level, const char *msg)
{
    xt_logcap *c = ud;
    (void)level;
    size_t at = strlen(c->text);
    snprintf(c->text + at, sizeof c->text - at, "%s\n", msg);
    c->n++;
}

int64_t xt_cache_opt;
const char *xt_reader = "pool";

eng_session *xt_open_model(const char *path, int mode, int prefetch, xt_logcap *lc)
{
    eng_session *s = NULL;
    char err[512];
    eng_opts o;
    eng_opts_default(&o);
    o.n_ctx = 64;
    o.n_threads = 2;
    o.expert_io = mode;
    o.expert_cache = xt_cache_opt;
    o.prefetch = prefetch;
    if (lc) {
        o.log = xt_cap_log;
        o.log_ud = lc;
    }
    int rc = eng_open(&s, path, &o, err, sizeof err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, 0);
    assert_int_equal(eng_expert_io(s), mode);
    assert_int_equal(eng_prefetch(s), prefetch);
    /* the reader asked for is the one reading */
    unsigned qd = 0;
    const char *r = eng_expert_reader(s, &qd, NULL);
    if (mode == ENG_XIO_MMAP || !eng_hparams(s)->n_experts)
        assert_null(r);
    else
        assert_true(r && !strcmp(r, strcmp(xt_reader, "uring") ? "pool" : "io_uring") && qd > 0);
    return s;
}

int32_t xt_argmax(eng_session *s)
{
    const float *lg = eng_logits(s);
    int32_t best = 0;
    for (uint32_t v = 0; v < eng_hparams(s)->vocab_size; v++)
        if (lg[v] > lg[best])
            best = (int32_t)v;
    return best;
}

void xt_greedy(eng_session *s, int32_t *out, int n, int switch_every)
{
    char err[512];
    int32_t tok = 1;
    for (int i = 0; i < n; i++) {
        if (switch_every && i % switch_every == 0) {
            assert_int_equal(eng_set_expert_io(s, (i / switch_every) % 3, err, sizeof err), 0);
            assert_int_equal(eng_set_prefetch(s, (i / switch_every) % 2), 0);
        }
        int rc = eng_decode(s, tok, err, sizeof err);
        if (rc)
            fprintf(stderr, "decode: %s\n", err);
        assert_int_equal(rc, 0);
        out[i] = tok = xt_argmax(s);
    }
}
