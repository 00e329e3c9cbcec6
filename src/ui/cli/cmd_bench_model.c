/*
 * cmd_bench_model.c — `cflow bench -m MODEL ...` and `cflow bench
 * directio`: llama-bench's tests on each model (cmd_bench.c's essay says
 * what they measure and how).
 *
 * A model is opened once for its tests, its context sized from its
 * header first (fit_tests); threads, prefetch, expert I/O and the
 * look-ahead depth change between tests without a reload (set_test).  A
 * test is a warm-up and -r timed repetitions (run_test); with
 * --interleave the tg tests of the lists' settings are timed together, a
 * token each in turn (run_group).  Each result is a row of the table
 * (cmd_bench_out.c) and of the run log's bench table, under a session
 * "cflow bench" per model.
 *
 * "The report" (with its section numbers) is the Pipeline-Native
 * Transformers report.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <limits.h>
#include <time.h>

#include "engine/engine.h"
#include "kernels/kern.h"
#include "prof/prof.h"
#include "ui/cli/cli.h"
#include "ui/cli/bench_impl.h"


static int set_io(eng_session *s, int pf, int xio, char *err, size_t errlen)
{
    err[0] = '\0';
    if (eng_set_prefetch(s, pf)) {
        snprintf(err, errlen, "cannot switch the prefetch thread %s", ui_onoff[pf != 0]);
        return -1;
    }
    return eng_set_expert_io(s, xio, err, errlen) ? -1 : 0;
}

/* The read bandwidth for "% bw" at n threads (ui_read_bw: the membw
 * figure stored for this host, else measured now and recorded). */
static double read_bw_for(ui_runlog *rl, int n)
{
    char src[256];
    double bw = ui_read_bw(rl, n, 1, src, sizeof src);
    ui_eprintf("cflow bench: machine read bandwidth %s\n", src);
    return bw;
}

static void random_tokens(int32_t *ids, size_t n, uint32_t n_vocab, uint64_t *rng)
{
    for (size_t i = 0; i < n; i++)
        ids[i] = (int32_t)(fmt_splitmix64(rng) % n_vocab);
}

/* The tg test of nb sequences seqs[nb] (--batch-decode): each emptied
 * and filled with depth tokens, then n_gen steps of eng_decode_batch, a
 * random token into each sequence a step, timed (seconds); negative on
 * an engine error (message in err). */
static double run_batch_once(eng_session *s, eng_seq *const *seqs, unsigned nb, long n_gen,
                             long depth, int32_t *ids, uint64_t *rng, char *err,
                             size_t errlen)
{
    uint32_t nv = eng_hparams(s)->vocab_size;
    int32_t tkn[UI_BENCH_BATCH_MAX];
    int rcs[UI_BENCH_BATCH_MAX];
    for (unsigned i = 0; i < nb; i++) {
        eng_seq_reset(seqs[i]);
        random_tokens(ids, (size_t)depth, nv, rng);
        if (depth > 0 && eng_seq_prefill(seqs[i], ids, (size_t)depth, err, errlen))
            return -1;
    }
    double t0 = prof_now();
    for (long k = 0; k < n_gen; k++) {
        random_tokens(tkn, nb, nv, rng);
        if (eng_decode_batch(s, seqs, tkn, nb, rcs, err, errlen))
            return -1;
    }
    return prof_now() - t0;
}

/* Fill the cache with depth tokens, then time the test once (seconds);
 * negative on an engine error (message in err).  The expert counts of the
 * timed part add to xio (NULL: not counted). */
static double run_once(eng_session *s, long n_prompt, long n_gen, long depth,
                       int32_t *ids, uint64_t *rng, prof_xio_fig *xio, char *err,
                       size_t errlen)
{
    eng_stats e0, e1;
    uint32_t nv = eng_hparams(s)->vocab_size;
    eng_reset(s);
    if (depth > 0) {
        random_tokens(ids, (size_t)depth, nv, rng);
        if (eng_prefill(s, ids, (size_t)depth, err, errlen))
            return -1;
    }
    eng_get_stats(s, &e0);
    double t0 = prof_now();
    if (n_prompt > 0) {
        random_tokens(ids, (size_t)n_prompt, nv, rng);
        if (eng_prefill(s, ids, (size_t)n_prompt, err, errlen))
            return -1;
    } else {
        for (long i = 0; i < n_gen; i++) {
            int32_t tkn = (int32_t)(fmt_splitmix64(rng) % nv);
            if (eng_decode(s, tkn, err, errlen))
                return -1;
        }
    }
    double dt = prof_now() - t0;
    eng_get_stats(s, &e1);
    if (xio)
        ui_xio_accum(xio, &e1, &e0);
    return dt;
}

static uint64_t param_count(const fmt_hparams *h)
{
    uint64_t d = h->dim, q = (uint64_t)h->n_heads * h->head_dim,
             kv = (uint64_t)h->n_kv_heads * h->head_dim;
    uint64_t per = d * (q + 2 * kv) + q * d + 3 * d * h->ffn_dim +
                   (uint64_t)h->n_experts * (3 * d * h->expert_ffn_dim + d) + 2 * d;
    uint64_t head = (uint64_t)h->vocab_size * d;
    return head * ((h->flags & FMT_FLAG_TIED) ? 1 : 2) + per * h->n_layers + d;
}

/* ---- the main benchmark ------------------------------------------------- */
static long list_max(const ilist *l)
{
    long m = 0;
    for (unsigned i = 0; i < l->n; i++)
        if (l->v[i] > m)
            m = l->v[i];
    return m;
}

/* The tests a tg group of --interleave runs together, taking turns a
 * token each: one per combination of the lists' settings; 1 without
 * --interleave.  (Not bench_arm: that pairs sync and staged tests.) */
#define BENCH_TURNS_MAX 16
static unsigned bench_turns(const bench_cfg *c)
{
    return c->interleave ? c->xio.n * c->pf.n * c->t.n * c->ahead.n : 1u;
}

/* What the tests of every model share. */
/* A sync or staged decode test, kept to set staged over sync beside the
 * report's model (staged_vs_model): seconds a token, and its compute,
 * read and stall seconds a token (prof_io_fig). */
typedef struct bench_arm {
    int         expert_io, threads, prefetch, ahead;
    long        n_gen, n_depth;
    double      t;
    prof_io_fig io;
} bench_arm;

typedef struct bench_run {
    const bench_cfg *c;
    ilist     p, n;           /* the tests of the model at hand (defaults fitted) */
    double    read_bw;        /* GB/s: --read-bw, else measured at the first model */
    double    disk_gbs;       /* the model's storage bandwidth (ui_disk_bw); 0 none */
    int32_t  *ids;            /* random tokens [idcap] */
    size_t    idcap;
    double   *ns, *ts;        /* per repetition [reps] */
    uint64_t  rng;
    ui_runlog *rl;            /* the run log's writer */
    char      cpu[128], err[512];
    bench_arm arm[64];        /* the model's sync and staged tg tests so far */
    unsigned  n_arm;
    ui_tab    tab;            /* the results' table */
    ui_col    cols[UI_TAB_MAXC];
} bench_run;

/* Shrink a default list (the user gave none) to room tokens. */
static void fit_list(ilist *l, long room)
{
    for (unsigned i = 0; i < l->n; i++)
        if (l->v[i] > room)
            l->v[i] = room;
}

/* The tests of one model against its context, read from its header
 * before anything is loaded or measured: lists the user left at their
 * defaults (pp512, tg128) shrink to fit; lists given that do not fit
 * are an error.  *ctx gets the context the tests need. */
static int fit_tests(bench_run *b, const char *model, long *ctx)
{
    const bench_cfg *c = b->c;
    fmt_model *m = NULL;
    /* the header only: a full open would read and check every tile (the
     * whole file) once more before the engine's own open does */
    if (fmt_model_open_ex(&m, model, FMT_OPEN_HEADER, b->err, sizeof b->err))
        return ui_error("%s", b->err);
    long max_seq = (long)fmt_model_hparams(m)->max_seq, depth = list_max(&c->d);
    fmt_model_close(m);
    b->p = c->p;
    b->n = c->n;
    if (max_seq > depth) {
        if (!c->p_set)
            fit_list(&b->p, max_seq - depth);
        if (!c->n_set)
            fit_list(&b->n, (max_seq - depth) / (long)bench_turns(c));
    }
    if (list_max(&b->p) < list_max(&c->p) || list_max(&b->n) < list_max(&c->n))
        ui_eprintf("cflow bench: %s holds %ld tokens: pp%ld and tg%ld at most\n",
                model, max_seq, list_max(&b->p), list_max(&b->n));
    /* interleaved, a repetition decodes tg tokens for each setting */
    long tg = list_max(&b->n) * (long)bench_turns(c);
    long most = list_max(&b->p) > tg ? list_max(&b->p) : tg;
    *ctx = depth + most;
    if (max_seq > 0 && *ctx > max_seq)
        return ui_error("%s: the tests need a context of %ld tokens (depth %ld + %ld), the "
                        "model allows %ld", model, *ctx, depth, most, max_seq);
    return 0;
}

static int open_model(bench_run *b, const char *model, long ctx, eng_session **s)
{
    const bench_cfg *c = b->c;
    eng_opts eo = c->eo;
    eo.n_threads = (int)c->t.v[0];
    eo.n_ctx = (uint32_t)ctx;
    if (eng_open(s, model, &eo, b->err, sizeof b->err))
        return ui_error("%s", b->err);
    if (eng_n_ctx(*s) < (uint32_t)ctx)
        return ui_error("%s: the tests need a context of %ld tokens, the model allows %u",
                        model, ctx, eng_n_ctx(*s));
    if (b->read_bw <= 0)
        b->read_bw = read_bw_for(b->rl, (int)list_max(&c->t));
    b->disk_gbs = ui_disk_bw(ui_runlog_log(b->rl), model);
    return 0;
}

/* The result's row on stdout (the head before the first) and in the log. */
static void emit_row(bench_run *b, const result *r, int *logging)
{
    ui_bench_emit(&b->tab, r, b->cpu);
    if (!*logging || r->n_batch > 1)   /* the log's bench table has no batch field */
        return;
    prof_bench_row br = {
        .test_time = r->time, .n_threads = r->threads,
        .n_prompt = r->n_prompt, .n_gen = r->n_gen, .n_depth = r->n_depth,
        .prefetch = ui_onoff[r->prefetch != 0], .expert_io = r->xio_name,
        .repetitions = r->reps, .avg_ns = r->avg_ns, .stddev_ns = r->sd_ns,
        .avg_ts = r->avg_ts, .stddev_ts = r->sd_ts,
        .bytes_per_token = r->bytes_per_token, .gb_s = r->gb_s,
        .read_bw_gbs = r->read_bw, .bw_pct = r->bw_pct,
        .xio = r->has_xio ? &r->xio : NULL, .expert_ahead = r->expert_ahead,
        .interleave = r->interleave,
    };
    if (prof_log_bench(ui_runlog_log(b->rl), &br, b->err, sizeof b->err)) {
        ui_runlog_fail(b->rl, b->err);
        *logging = 0;
    }
}

/* Staged over sync against the report's model (5.14.3; prof_io_compare,
 * as `cflow runs compare` sets it): when decode test r (sync or staged)
 * has its other arm among the model's tests so far (the same threads,
 * prefetch, look-ahead, tokens and depth), one line on stderr.  C is a token's
 * compute (its time less its stall, prof_xio_fig), IO the reader's busy
 * time a token. */
static void staged_vs_model(bench_run *b, const result *r)
{
    const prof_xio_fig *f = &r->xio;
    if (r->n_gen <= 0 || (r->expert_io != 1 && r->expert_io != 2) || !r->has_xio ||
        f->compute_s_tok < 0 || r->avg_ts <= 0 || !f->tokens)
        return;
    bench_arm me = { .expert_io = r->expert_io, .threads = r->threads,
                     .prefetch = r->prefetch, .ahead = r->ahead, .n_gen = r->n_gen,
                     .n_depth = r->n_depth,
                     .t = 1.0 / r->avg_ts };
    const double n = (double)f->tokens;
    prof_io_derive(f->compute_s_tok, f->io_s / n, f->stall_s / n, f->bytes / f->tokens, &me.io);
    for (unsigned i = 0; i < b->n_arm; i++) {
        const bench_arm *a = &b->arm[i];
        if (a->expert_io == me.expert_io || a->threads != me.threads ||
            a->prefetch != me.prefetch || a->ahead != me.ahead || a->n_gen != me.n_gen ||
            a->n_depth != me.n_depth)
            continue;
        const bench_arm *sy = me.expert_io == 1 ? &me : a, *st = me.expert_io == 2 ? &me : a;
        prof_io_ab ab;
        prof_io_compare(sy->t, &sy->io, st->t, &st->io, &ab);
        fprintf(stderr, "cflow bench: tg%ld, %d threads: staged over sync %.2fx; the report's "
                        "model (C + IO) / max(C, IO_eff) %.2fx (net/model %.2f) with C %.4g ms, "
                        "IO %.4g ms, IO_eff %.4g ms a token; interference tax tau %+.2f, "
                        "refined %.2fx (net/refined %.2f)\n",
                r->n_gen, r->threads, ab.net, ab.model, ab.model > 0 ? ab.net / ab.model : 0.0,
                sy->io.c_s * 1e3, sy->io.io_s * 1e3, st->io.io_s * 1e3, ab.tau, ab.refined,
                ab.refined > 0 ? ab.net / ab.refined : 0.0);
        return;
    }
    if (b->n_arm < sizeof b->arm / sizeof b->arm[0])
        b->arm[b->n_arm++] = me;
}

/* Put r's threads, prefetch and expert I/O on the session and name the
 * mode auto chose; 0, or a one-line error. */
static int set_test(bench_run *b, eng_session *s, const char *model, result *r)
{
    char *err = b->err;
    const size_t errlen = sizeof b->err;
    err[0] = '\0';
    /* a depth is the look-ahead's: with it off (--expert-ahead off) the
     * depths are not set and the rows say 0, off */
    int ahead = r->ahead > 0 && eng_expert_ahead(s) > 0 ? r->ahead : 0;
    if (eng_set_threads(s, r->threads) || set_io(s, r->prefetch, r->expert_io, err, errlen) ||
        (ahead && eng_set_expert_ahead_layers(s, ahead, err, errlen))) {
        char la[48] = "";
        if (ahead)
            snprintf(la, sizeof la, ", look-ahead %d", ahead);
        return ui_error("%s: cannot set threads %d, prefetch %s, expert-io %s%s%s%s", model,
                        r->threads, ui_onoff[r->prefetch != 0],
                        eng_expert_io_name(r->expert_io), la, err[0] ? ": " : "", err);
    }
    /* the mode's word, and the mode auto chose */
    snprintf(r->xio_name, sizeof r->xio_name, "%s%s", eng_expert_io_auto(s) ? "auto:" : "",
             eng_expert_io_name(eng_expert_io_auto(s) ? eng_expert_io(s) : r->expert_io));
    return UI_EXIT_OK;
}

static void stamp(result *r)
{
    time_t now = time(NULL);
    struct tm tmv;
    gmtime_r(&now, &tmv);
    strftime(r->time, sizeof r->time, "%Y-%m-%dT%H:%M:%SZ", &tmv);
}

/* r's figures from its repetitions ns[reps], ts[reps] (r->ns, r->ts) and
 * expert counts (r->xio), with s set to r's settings. */
static void finish(bench_run *b, eng_session *s, result *r)
{
    ui_tab_mean_sd(r->ns, r->reps, &r->avg_ns, &r->sd_ns);
    ui_tab_mean_sd(r->ts, r->reps, &r->avg_ts, &r->sd_ts);
    eng_stats es;
    eng_get_stats(s, &es);
    r->bytes_per_token = es.bytes_per_token;
    /* a step of n_batch sequences reads the weights once */
    r->gb_s = r->n_gen > 0 ? (double)es.bytes_per_token * r->avg_ts /
                                 (r->n_batch > 1 ? r->n_batch : 1) / 1e9 : 0;
    r->bw_pct = r->gb_s > 0 && b->read_bw > 0 ? 100.0 * r->gb_s / b->read_bw : 0;
    r->xio.tok_s = r->avg_ts;
    r->xio.disk_gbs = b->disk_gbs;
    prof_xio_derive(&r->xio);
    r->has_xio = ui_xio_shown(&r->xio);
    r->cache_bytes = es.xio_cache_bytes;
    r->expert_ahead = eng_hparams(s)->n_experts ? eng_expert_ahead(s) : -1;
}

/* One test (r's threads, I/O, depth and pp or tg): a warm-up, then the
 * timed repetitions into r.  A tg test of r->n_batch > 1 sequences
 * decodes them together (run_batch_once), in sequences of its own made
 * for the test; its t/s counts every sequence's tokens. */
static int run_test(bench_run *b, eng_session *s, const char *model, result *r)
{
    const bench_cfg *c = b->c;
    char *err = b->err;
    const size_t errlen = sizeof b->err;
    const unsigned nb = r->n_gen > 0 && r->n_batch > 1 ? r->n_batch : 0;
    eng_seq *seqs[UI_BENCH_BATCH_MAX] = { 0 };
    int rc = set_test(b, s, model, r);
    for (unsigned i = 0; i < nb && !rc; i++)
        if (eng_seq_new(s, 0, &seqs[i], err, errlen))
            rc = ui_error("%s: %s", model, err);
    if (!rc) {
        stamp(r);
        err[0] = '\0';
    }
    /* a repetition: the test as asked, or (warm) one token of it */
#define ONCE(n_gen_, depth_, xio_)                                                    \
    (nb ? run_batch_once(s, seqs, nb, (n_gen_), (depth_), b->ids, &b->rng, err, errlen) \
        : run_once(s, r->n_prompt, (n_gen_), (depth_), b->ids, &b->rng, (xio_), err,   \
                   errlen))
    if (!rc && c->warmup && ONCE(r->n_prompt ? 0 : 1, 0, NULL) < 0)
        rc = ui_error("%s: %s", model, err);
    for (unsigned k = 0; k < c->warmup_reps && !rc; k++)
        if (ONCE(r->n_gen, r->n_depth, NULL) < 0)
            rc = ui_error("%s: %s", model, err);
    memset(&r->xio, 0, sizeof r->xio);
    r->ns = b->ns;
    r->ts = b->ts;
    for (unsigned k = 0; k < c->reps && !rc; k++) {
        double sec = ONCE(r->n_gen, r->n_depth, &r->xio);
        if (sec < 0) {
            rc = ui_error("%s: %s", model, err);
            break;
        }
        if (sec < 1e-9)
            sec = 1e-9;
        b->ns[k] = sec * 1e9;
        b->ts[k] = (double)(r->n_prompt + r->n_gen * (nb ? nb : 1)) / sec;
    }
#undef ONCE
    for (unsigned i = 0; i < nb; i++)
        eng_seq_free(seqs[i]);
    if (!rc)
        finish(b, s, r);
    return rc;
}

/* --interleave: the tg tests turn[0 .. n) (one per combination of the
 * lists' settings, the same tokens and depth) as one: each repetition
 * decodes n_gen tokens for every test, the tests taking turns a token each
 * (turn i % n for the i-th token), so that all of them meet the same
 * moment of the machine: its storage, its other load, one expert cache.
 * Each test is timed over its own tokens only (eng_decode alone; the
 * switch of settings before a token is outside the time) and its expert
 * figures count its own tokens.  The depth's tokens are prefilled under
 * turn[0]'s settings.  A warm-up decodes one token per test, then
 * --warmup-reps whole interleaved repetitions, untimed.  sec[n][reps]. */
static int run_group(bench_run *b, eng_session *s, const char *model, result *turn, unsigned n,
                     double *sec)
{
    const bench_cfg *c = b->c;
    char *err = b->err;
    const size_t errlen = sizeof b->err;
    const long n_gen = turn[0].n_gen, depth = turn[0].n_depth;
    uint32_t nv = eng_hparams(s)->vocab_size;
    unsigned cur = n;                /* the turn whose settings s has */
    int rc;
    for (unsigned a = 0; a < n; a++) {   /* each turn's settings refused before any token */
        if ((rc = set_test(b, s, model, &turn[a])))
            return rc;
        stamp(&turn[a]);
        memset(&turn[a].xio, 0, sizeof turn[a].xio);
        cur = a;
    }
    unsigned rounds = (c->warmup ? 1u : 0u) + c->warmup_reps + c->reps;
    for (unsigned k = 0; k < rounds; k++) {
        int timed = k >= rounds - c->reps, warm = c->warmup && k == 0;
        unsigned rep = timed ? k - (rounds - c->reps) : 0;
        long toks = warm ? (long)n : n_gen * (long)n;
        for (unsigned a = 0; a < n && timed; a++)
            sec[a * c->reps + rep] = 0.0;
        if (cur != 0 && (rc = set_test(b, s, model, &turn[cur = 0])))
            return rc;
        eng_reset(s);
        if (depth > 0 && !warm) {
            random_tokens(b->ids, (size_t)depth, nv, &b->rng);
            if (eng_prefill(s, b->ids, (size_t)depth, err, errlen))
                return ui_error("%s: %s", model, err);
        }
        /* one reading of the counts a token: each token's are the growth
         * since the one before (a switch of settings counts no expert) */
        eng_stats was, now;
        eng_get_stats(s, &was);
        for (long i = 0; i < toks; i++) {
            unsigned a = (unsigned)(i % (long)n);
            if (a != cur && (rc = set_test(b, s, model, &turn[cur = a])))
                return rc;
            int32_t tkn = (int32_t)(fmt_splitmix64(&b->rng) % nv);
            double t0 = prof_now();
            if (eng_decode(s, tkn, err, errlen))
                return ui_error("%s: %s", model, err);
            double dt = prof_now() - t0;
            if (!timed)
                continue;
            eng_get_stats(s, &now);
            sec[a * c->reps + rep] += dt;
            ui_xio_accum(&turn[a].xio, &now, &was);
            was = now;
        }
    }
    for (unsigned a = 0; a < n; a++) {
        result *r = &turn[a];
        r->ns = b->ns + (size_t)a * c->reps;
        r->ts = b->ts + (size_t)a * c->reps;
        for (unsigned k = 0; k < c->reps; k++) {
            double t = sec[a * c->reps + k] > 1e-9 ? sec[a * c->reps + k] : 1e-9;
            r->ns[k] = t * 1e9;
            r->ts[k] = (double)n_gen / t;
        }
        if ((rc = set_test(b, s, model, r)))
            return rc;
        finish(b, s, r);
    }
    return UI_EXIT_OK;
}

/* --interleave's tg tests, after every pp test: per depth and tg length
 * one group of the lists' settings (run_group), a row per setting, in
 * the lists' order.  tmpl: the model's fields. */
static int bench_interleaved(bench_run *b, eng_session *s, const char *model,
                             const result *tmpl, int *logging)
{
    const bench_cfg *c = b->c;
    unsigned n = bench_turns(c);
    result turn[BENCH_TURNS_MAX];
    double *sec = malloc((size_t)n * c->reps * sizeof *sec);
    int rc = sec ? UI_EXIT_OK : ui_error("out of memory");
    for (unsigned di = 0; di < c->d.n && !rc; di++)
        for (unsigned li = 0; li < b->n.n && !rc; li++) {
            if (b->n.v[li] <= 0)
                continue;
            unsigned a = 0;
            for (unsigned xi = 0; xi < c->xio.n; xi++)
            for (unsigned pi = 0; pi < c->pf.n; pi++)
            for (unsigned ti = 0; ti < c->t.n; ti++)
            for (unsigned ai = 0; ai < c->ahead.n; ai++, a++) {
                turn[a] = *tmpl;
                turn[a].interleave = n;
                turn[a].ahead = (int)c->ahead.v[ai];
                turn[a].threads = (int)c->t.v[ti];
                turn[a].prefetch = (int)c->pf.v[pi];
                turn[a].expert_io = (int)c->xio.v[xi];
                turn[a].n_depth = c->d.v[di];
                turn[a].n_prompt = 0;
                turn[a].n_gen = b->n.v[li];
            }
            if (!(rc = run_group(b, s, model, turn, n, sec))) {
                char tn[48];
                ui_bench_test_name(tn, sizeof tn, &turn[0]);
                ui_eprintf("cflow bench: %s: %u settings took turns a token each "
                           "(--interleave)\n", tn, n);
                for (a = 0; a < n; a++) {
                    emit_row(b, &turn[a], logging);
                    staged_vs_model(b, &turn[a]);
                }
            }
        }
    free(sec);
    return rc;
}

/* Every test of one model: expert I/O, prefetch, threads, depth, then
 * pp before tg (llama-bench's order); --interleave's tg tests after them
 * all. */
static int bench_model(bench_run *b, const char *model, const char *named)
{
    const bench_cfg *c = b->c;
    eng_session *s = NULL;
    long ctx = 0;
    int rc;
    if ((rc = fit_tests(b, model, &ctx)) || (rc = open_model(b, model, ctx, &s))) {
        eng_close(s);
        return rc;
    }
    const fmt_hparams *hp = eng_hparams(s);
    struct stat st;
    result r;
    memset(&r, 0, sizeof r);
    r.model = model;
    r.model_size = stat(model, &st) == 0 ? (uint64_t)st.st_size : 0;
    r.n_params = param_count(hp);
    r.arch = hp->arch;
    r.quant = kern_type_name((enum kern_type)hp->quant_type);
    r.isa = eng_isa(s);
    r.read_bw = b->read_bw;
    r.reps = c->reps;
    r.interleave = 1;
    r.ns = b->ns;
    r.ts = b->ts;
    r.use_mmap = eng_weights_copied(s) == 0;   /* what the open chose */
    if (!ui_routing_text(s, r.routing, sizeof r.routing))
        r.routing[0] = '\0';
    ui_runlog_session(b->rl, s, NULL, model, named, b->read_bw);
    int logging = ui_runlog_logging(b->rl);
    b->n_arm = 0;
    for (unsigned xi = 0; xi < c->xio.n && !rc; xi++)
    for (unsigned pi = 0; pi < c->pf.n && !rc; pi++)
    for (unsigned ti = 0; ti < c->t.n && !rc; ti++)
    for (unsigned ai = 0; ai < c->ahead.n && !rc; ai++)
    for (unsigned di = 0; di < c->d.n && !rc; di++)
    for (unsigned kind = 0; kind < (c->interleave ? 1u : 2u) && !rc; kind++) {
        const ilist *L = kind == 0 ? &b->p : &b->n;
        for (unsigned li = 0; li < L->n && !rc; li++) {
            if (L->v[li] <= 0)
                continue;
            r.threads = (int)c->t.v[ti];
            r.ahead = (int)c->ahead.v[ai];
            r.prefetch = (int)c->pf.v[pi];
            r.expert_io = (int)c->xio.v[xi];
            r.n_depth = c->d.v[di];
            r.n_prompt = kind == 0 ? L->v[li] : 0;
            r.n_gen = kind == 1 ? L->v[li] : 0;
            for (unsigned bi = 0; bi < (kind == 1 ? c->batch.n : 1u) && !rc; bi++) {
                r.n_batch = kind == 1 ? (unsigned)c->batch.v[bi] : 1u;
                if (!(rc = run_test(b, s, model, &r))) {
                    emit_row(b, &r, &logging);
                    staged_vs_model(b, &r);
                }
            }
        }
    }
    if (c->interleave && !rc)
        rc = bench_interleaved(b, s, model, &r, &logging);
    eng_close(s);
    return rc;
}

/* Whether a model of the run has experts (its header says so): the
 * markdown table then carries the expert figures and the mode that auto
 * chose, as it does with --expert-io (issue 17: bench shows hit rate,
 * bytes read and the storage bound whenever experts are streamed). */
static int any_moe(const bench_cfg *c)
{
    for (unsigned mi = 0; mi < c->n_models; mi++) {
        char mbuf[PATH_MAX], err[256];
        const char *model = ui_model_path(c->models[mi], mbuf, sizeof mbuf);
        fmt_model *m = NULL;
        if (!model || fmt_model_open_ex(&m, model, FMT_OPEN_HEADER, err, sizeof err))
            continue;                   /* ui_bench_models says what is wrong */
        const int moe = fmt_model_hparams(m)->n_experts > 0;
        fmt_model_close(m);
        if (moe)
            return 1;
    }
    return 0;
}

int ui_bench_models(const bench_cfg *cfg)
{
    bench_run b;
    bench_cfg cc = *cfg;
    const bench_cfg *c = &cc;
    int rc = UI_EXIT_OK;
    if (!cc.xio_set && cc.fmt == 0 && any_moe(&cc))
        cc.xio_set = 1;
    if (cc.interleave && (cc.batch.n > 1 || cc.batch.v[0] > 1))
        return ui_usage_error("bench", "--interleave and --batch-decode: the interleaved tests "
                              "decode one sequence");
    if (bench_turns(&cc) > BENCH_TURNS_MAX)
        return ui_usage_error("bench", "--interleave: %u settings (--expert-io x --prefetch x "
                              "-t x --expert-ahead-layers), at most %d take turns",
                              bench_turns(&cc), BENCH_TURNS_MAX);
    if (cc.ahead_set)   /* slots for the deepest; each test sets its own */
        cc.eo.expert_ahead_layers = (int)list_max(&cc.ahead);
    memset(&b, 0, sizeof b);
    b.c = c;
    ui_bench_table(&b.tab, b.cols, c);
    b.read_bw = c->read_bw;
    b.rng = c->seed;
    prof_cpu_model(b.cpu, sizeof b.cpu);
    b.idcap = (size_t)(list_max(&c->d) > list_max(&c->p) ? list_max(&c->d)
                                                         : list_max(&c->p)) + 1;
    b.ids = malloc(b.idcap * sizeof *b.ids);
    b.ns = malloc((size_t)c->reps * bench_turns(c) * sizeof *b.ns);
    b.ts = malloc((size_t)c->reps * bench_turns(c) * sizeof *b.ts);
    if (!b.ids || !b.ns || !b.ts || !(b.rl = ui_bench_log(c)))
        rc = ui_error("out of memory");
    for (unsigned mi = 0; mi < c->n_models && rc == UI_EXIT_OK; mi++) {
        char mbuf[PATH_MAX];   /* a GGUF, HF folder or llama2.c file: its cached conversion */
        const char *model = ui_model_path(c->models[mi], mbuf, sizeof mbuf);
        rc = model ? bench_model(&b, model, c->models[mi]) : UI_EXIT_ERR;
    }
    if (ui_runlog_path(b.rl) && b.tab.rows)
        ui_eprintf("cflow bench: results logged in %s\n", ui_runlog_path(b.rl));
    ui_runlog_free(b.rl);
    ui_tab_end(&b.tab, rc == UI_EXIT_OK);
    free(b.ids);
    free(b.ns);
    free(b.ts);
    return rc;
}

