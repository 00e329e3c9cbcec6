/*
 * prof.c — the profiler: probes, the ring of token records, run totals.
 *
 * The decoding thread is the only writer.  Around each token it takes the
 * time and (with PROF_COUNTERS) the counters of every worker thread; the
 * engine marks the end of each part of a layer (prof_layer_mark), which
 * adds to that layer's sums and to the token's per-stream seconds.  When
 * the token ends its record goes into the ring and into the run's totals.
 *
 * The ring.  PROF_RING_CAP slots, each PROF_TOK_WORDS 64-bit words and a
 * sequence word: record n lives in slot n % CAP, and its sequence word is
 * 2n+1 while it is being written and 2n+2 once complete (a seqlock per
 * slot).  A reader copies the words between two reads of the sequence
 * word and keeps the copy only when both read 2n+2, so a record the writer
 * overwrote meanwhile is counted as lost instead of being returned torn.
 * Every word is a relaxed atomic, the ordering comes from the fences, so
 * there is no data race in the C11 sense and readers never block the
 * writer.  Readers own their cursors; any number may read at once.
 *
 * Per-layer sums are relaxed atomics in nanoseconds for the same reason: a
 * TUI may show them live.  Run totals are plain fields, read by the
 * decoding thread (prof_totals_get) — the logger runs there.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prof/prof_impl.h"

_Static_assert(sizeof(prof_tok) % sizeof(uint64_t) == 0,
               "prof_tok must be whole 64-bit words");

const char *prof_stream_name(int st)
{
    static const char *const names[PROF_NST] = { "attention", "ffn", "experts",
                                                  "io-wait" };
    return st >= 0 && st < PROF_NST ? names[st] : "?";
}

int prof_new(prof **out, unsigned what, unsigned n_layers, char *err, size_t errlen)
{
    prof *p = calloc(1, sizeof *p);
    *out = NULL;
    if (!p)
        goto oom;
    p->what = what & PROF_ALL;
    p->n_layers = n_layers;
    p->layer_ns = calloc((size_t)(n_layers ? n_layers : 1) * PROF_NST,
                         sizeof *p->layer_ns);
    p->layer_bytes = calloc((size_t)(n_layers ? n_layers : 1) * PROF_NST,
                            sizeof *p->layer_bytes);
    p->model = calloc(n_layers ? n_layers : 1, sizeof *p->model);
    p->has_model = calloc(n_layers ? n_layers : 1, 1);
    p->layer_io_ns = calloc(n_layers ? n_layers : 1, sizeof *p->layer_io_ns);
    p->layer_io_bytes = calloc(n_layers ? n_layers : 1, sizeof *p->layer_io_bytes);
    /* this token's per-layer figures: lns, lbytes, lio in one block */
    const size_t nl = n_layers ? n_layers : 1;
    p->cur.ln = nl * (2 * PROF_NST + 2);
    p->cur.lns = calloc(p->cur.ln, sizeof *p->cur.lns);
    if (!p->layer_io_ns || !p->layer_io_bytes || !p->cur.lns)
        goto oom;
    p->cur.lbytes = p->cur.lns + nl * PROF_NST;
    p->cur.lio = p->cur.lbytes + nl * PROF_NST;
    p->ring_seq = calloc(PROF_RING_CAP, sizeof *p->ring_seq);
    p->ring_words = calloc((size_t)PROF_RING_CAP * PROF_TOK_WORDS, sizeof *p->ring_words);
    if (!p->layer_ns || !p->layer_bytes || !p->model || !p->has_model || !p->ring_seq ||
        !p->ring_words)
        goto oom;
    /* Commit the ring's pages now (800 KB): calloc leaves them unmapped
     * until the first lap writes them, and a long session's memory is to
     * be flat from its first tokens on, not grow for PROF_RING_CAP tokens
     * (the soak test, tests/hard/test_soak.c). */
    for (size_t i = 0; i < (size_t)PROF_RING_CAP * PROF_TOK_WORDS; i += 512)
        atomic_store_explicit(&p->ring_words[i], 0, memory_order_relaxed);
    for (size_t i = 0; i < PROF_RING_CAP; i += 512)
        atomic_store_explicit(&p->ring_seq[i], 0, memory_order_relaxed);
    prof_ctr_init(&p->ctr, (p->what & PROF_COUNTERS) != 0);
    prof_run_begin(p, 0, 0.0);
    *out = p;
    return 0;
oom:
    if (p) {
        free(p->layer_ns);
        free(p->layer_bytes);
        free(p->layer_io_ns);
        free(p->layer_io_bytes);
        free(p->cur.lns);
        free(p->model);
        free(p->has_model);
        free(p->ring_seq);
        free(p->ring_words);
        free(p);
    }
    snprintf(err, errlen, "profiler: out of memory");
    return -1;
}

void prof_free(prof *p)
{
    if (!p)
        return;
    prof_ctr_free(&p->ctr);
    free(p->layer_ns);
    free(p->layer_bytes);
    free(p->model);
    free(p->has_model);
    free(p->layer_io_ns);
    free(p->layer_io_bytes);
    free(p->cur.lns);
    free(p->ring_seq);
    free(p->ring_words);
    free(p);
}

unsigned prof_what(const prof *p) { return p->what; }
unsigned prof_n_layers(const prof *p) { return p->n_layers; }

int prof_ev_available(const prof *p, int ev)
{
    return ev >= 0 && ev < PROF_NEV && p->ctr.avail[ev];
}

const char *prof_ev_reason(const prof *p, int ev)
{
    if (ev < 0 || ev >= PROF_NEV)
        return "unknown event";
    return p->ctr.avail[ev] ? "" : p->ctr.reason[ev];
}

uint64_t prof_run_begin(prof *p, uint64_t bytes_per_token, double read_bw_gbs)
{
    uint64_t gen = p->run.gen + 1;
    memset(&p->run, 0, sizeof p->run);
    p->run.gen = gen;
    p->run.t0 = prof_now();
    p->run.bytes_per_token = bytes_per_token;
    p->run.read_bw_gbs = read_bw_gbs > 0 ? read_bw_gbs : 0.0;
    for (int i = 0; i < PROF_NEV; i++)
        p->run.ev[i] = p->ctr.avail[i] ? 0 : -1;
    for (size_t i = 0; i < (size_t)(p->n_layers ? p->n_layers : 1) * PROF_NST; i++) {
        atomic_store_explicit(&p->layer_ns[i], 0, memory_order_relaxed);
        atomic_store_explicit(&p->layer_bytes[i], 0, memory_order_relaxed);
    }
    for (unsigned l = 0; l < p->n_layers; l++) {
        atomic_store_explicit(&p->layer_io_ns[l], 0, memory_order_relaxed);
        atomic_store_explicit(&p->layer_io_bytes[l], 0, memory_order_relaxed);
    }
    return gen;
}

void prof_token_begin(prof *p)
{
    memset(p->cur.st, 0, sizeof p->cur.st);
    memset(p->cur.bytes, 0, sizeof p->cur.bytes);
    memset(p->cur.lns, 0, p->cur.ln * sizeof *p->cur.lns);
    if (p->ctr.on)
        prof_ctr_read(&p->ctr, p->cur.ev0);
    /* the clock after the counters: their reading is not the token's time */
    p->cur.t0 = prof_now();
}

double prof_layer_mark(prof *p, unsigned layer, enum prof_stream st, double since)
{
    double now = prof_now();
    if ((p->what & PROF_LAYERS) && layer < p->n_layers && (unsigned)st < PROF_NST) {
        double d = now - since;
        p->cur.st[st] += d;
        p->cur.lns[(size_t)layer * PROF_NST + st] += d > 0 ? (uint64_t)(d * 1e9) : 0;
    }
    return now;
}

void prof_layer_bytes(prof *p, unsigned layer, enum prof_stream st, uint64_t bytes)
{
    if (layer >= p->n_layers || (unsigned)st >= PROF_NST)
        return;
    p->cur.bytes[st] += bytes;
    p->cur.lbytes[(size_t)layer * PROF_NST + st] += bytes;
}

/* a += v for a counter with one writer: load + store is enough, and
 * cheaper than fetch_add */
static void acc(atomic_uint_least64_t *a, uint64_t v)
{
    if (v)
        atomic_store_explicit(a, atomic_load_explicit(a, memory_order_relaxed) + v,
                              memory_order_relaxed);
}

/* A decode token's per-layer figures into the run's. */
static void layers_publish(prof *p)
{
    for (size_t i = 0; i < (size_t)p->n_layers * PROF_NST; i++) {
        acc(&p->layer_ns[i], p->cur.lns[i]);
        acc(&p->layer_bytes[i], p->cur.lbytes[i]);
    }
    for (unsigned l = 0; l < p->n_layers; l++) {
        acc(&p->layer_io_ns[l], p->cur.lio[2 * l]);
        acc(&p->layer_io_bytes[l], p->cur.lio[2 * l + 1]);
    }
}

void prof_set_layer_model(prof *p, unsigned layer, const prof_layer_model *m)
{
    if (layer >= p->n_layers)
        return;
    if (!m) {
        p->has_model[layer] = 0;
        return;
    }
    p->model[layer] = *m;
    if ((unsigned)p->model[layer].binding >= PROF_NST)
        p->model[layer].binding = PROF_ST_ATTN;
    p->has_model[layer] = 1;
}

int prof_get_layer_model(const prof *p, unsigned layer, prof_layer_model *m)
{
    if (layer >= p->n_layers || !p->has_model[layer])
        return 0;
    if (m)
        *m = p->model[layer];
    return 1;
}

uint64_t prof_layer_streamed(const prof *p, unsigned layer, enum prof_stream st)
{
    if (layer >= p->n_layers || (unsigned)st >= PROF_NST)
        return 0;
    atomic_uint_least64_t *a = &((prof *)p)->layer_bytes[(size_t)layer * PROF_NST + st];
    return atomic_load_explicit(a, memory_order_relaxed);
}

static void ring_put(prof *p, const prof_tok *rec)
{
    uint64_t w[PROF_TOK_WORDS];
    memcpy(w, rec, sizeof w);
    uint64_t n = atomic_load_explicit(&p->ring_head, memory_order_relaxed);
    size_t slot = (size_t)(n % PROF_RING_CAP);
    atomic_uint_least64_t *dst = &p->ring_words[slot * PROF_TOK_WORDS];
    atomic_store_explicit(&p->ring_seq[slot], 2 * n + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    for (size_t i = 0; i < PROF_TOK_WORDS; i++)
        atomic_store_explicit(&dst[i], w[i], memory_order_relaxed);
    atomic_store_explicit(&p->ring_seq[slot], 2 * n + 2, memory_order_release);
    atomic_store_explicit(&p->ring_head, n + 1, memory_order_release);
}

void prof_token_end(prof *p, enum prof_phase phase)
{
    double t1 = prof_now();
    prof_tok rec;
    int ph = phase == PROF_PREFILL ? PROF_PREFILL : PROF_DECODE;

    memset(&rec, 0, sizeof rec);
    rec.run = p->run.gen;
    rec.idx = p->run.n_tok[0] + p->run.n_tok[1];
    rec.phase = (uint64_t)ph;
    rec.t = p->cur.t0 - p->run.t0;
    rec.dt = t1 - p->cur.t0;
    memcpy(rec.st, p->cur.st, sizeof rec.st);
    memcpy(rec.bytes, p->cur.bytes, sizeof rec.bytes);
    if (p->ctr.on) {
        int64_t ev1[PROF_NEV];
        prof_ctr_read(&p->ctr, ev1);
        for (int i = 0; i < PROF_NEV; i++) {
            if (ev1[i] < 0 || p->cur.ev0[i] < 0)
                rec.ev[i] = -1;
            else   /* scaled counts may step back a little: never below 0 */
                rec.ev[i] = ev1[i] > p->cur.ev0[i] ? ev1[i] - p->cur.ev0[i] : 0;
        }
    } else {
        for (int i = 0; i < PROF_NEV; i++)
            rec.ev[i] = -1;
    }

    p->run.n_tok[ph]++;
    p->run.sec[ph] += rec.dt;
    for (int i = 0; i < PROF_NST; i++) {
        p->run.st[i] += rec.st[i];
        p->run.bytes[i] += rec.bytes[i];
        if (ph == PROF_DECODE) {
            p->run.dec_bytes[i] += rec.bytes[i];
            p->run.dec_st[i] += rec.st[i];
        }
    }
    if (ph == PROF_DECODE)
        layers_publish(p);
    for (int i = 0; i < PROF_NEV; i++)
        if (rec.ev[i] >= 0 && p->run.ev[i] >= 0)
            p->run.ev[i] = rec.ev[i] > INT64_MAX - p->run.ev[i] ? INT64_MAX
                                                                : p->run.ev[i] + rec.ev[i];
    ring_put(p, &rec);
}

uint64_t prof_ring_head(const prof *p)
{
    return atomic_load_explicit(&((prof *)p)->ring_head, memory_order_acquire);
}

size_t prof_ring_read(const prof *p, uint64_t *cursor, prof_tok *out, size_t max,
                      uint64_t *lost)
{
    prof *q = (prof *)p;   /* atomics are read through non-const pointers */
    uint64_t head = atomic_load_explicit(&q->ring_head, memory_order_acquire);
    uint64_t cur = *cursor, n_lost = 0;
    size_t k = 0;

    if (cur > head)   /* a cursor from the future: start again at the head */
        cur = head;
    if (head - cur > PROF_RING_CAP) {
        n_lost += head - PROF_RING_CAP - cur;
        cur = head - PROF_RING_CAP;
    }
    while (cur < head && k < max) {
        size_t slot = (size_t)(cur % PROF_RING_CAP);
        uint64_t w[PROF_TOK_WORDS];
        const atomic_uint_least64_t *src = &q->ring_words[slot * PROF_TOK_WORDS];
        uint64_t s1 = atomic_load_explicit(&q->ring_seq[slot], memory_order_acquire);
        if (s1 != 2 * cur + 2) {
            n_lost++;
            cur++;
            continue;
        }
        for (size_t i = 0; i < PROF_TOK_WORDS; i++)
            w[i] = atomic_load_explicit((atomic_uint_least64_t *)&src[i],
                                        memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        uint64_t s2 = atomic_load_explicit(&q->ring_seq[slot], memory_order_relaxed);
        cur++;
        if (s2 != s1) {
            n_lost++;
            continue;
        }
        memcpy(&out[k++], w, sizeof w);
    }
    *cursor = cur;
    if (lost)
        *lost += n_lost;
    return k;
}

void prof_totals_get(const prof *p, prof_totals *t)
{
    memset(t, 0, sizeof *t);
    t->run = p->run.gen;
    t->n_prompt = p->run.n_tok[PROF_PREFILL];
    t->n_gen = p->run.n_tok[PROF_DECODE];
    t->prefill_s = p->run.sec[PROF_PREFILL];
    t->decode_s = p->run.sec[PROF_DECODE];
    if (t->prefill_s > 0)
        t->prefill_tok_s = (double)t->n_prompt / t->prefill_s;
    if (t->decode_s > 0) {
        t->decode_tok_s = (double)t->n_gen / t->decode_s;
        t->gb_s = (double)t->n_gen * (double)p->run.bytes_per_token / t->decode_s / 1e9;
    }
    t->read_bw_gbs = p->run.read_bw_gbs;
    if (t->read_bw_gbs > 0)
        t->bw_share = t->gb_s / t->read_bw_gbs;
    t->bytes_per_token = p->run.bytes_per_token;
    memcpy(t->st, p->run.st, sizeof t->st);
    memcpy(t->ev, p->run.ev, sizeof t->ev);
    memcpy(t->bytes, p->run.bytes, sizeof t->bytes);
    memcpy(t->dec_bytes, p->run.dec_bytes, sizeof t->dec_bytes);
    memcpy(t->dec_st, p->run.dec_st, sizeof t->dec_st);
    for (unsigned l = 0; l < p->n_layers; l++) {
        if (!p->has_model[l])
            continue;
        t->cp_naive += p->model[l].naive;
        t->cp_critical += p->model[l].critical;
        t->cp_layers++;
        t->cp_binding[p->model[l].binding]++;
    }
}

double prof_layer_seconds(const prof *p, unsigned layer, enum prof_stream st)
{
    if (layer >= p->n_layers || (unsigned)st >= PROF_NST)
        return 0.0;
    atomic_uint_least64_t *a = &((prof *)p)->layer_ns[(size_t)layer * PROF_NST + st];
    return (double)atomic_load_explicit(a, memory_order_relaxed) * 1e-9;
}

/* ---- the counters line ------------------------------------------------- */
typedef struct sbuf {
    char  *buf;
    size_t n, len;
} sbuf;

static void sb_add(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = vsnprintf(b->len < b->n ? b->buf + b->len : NULL,
                      b->len < b->n ? b->n - b->len : 0, fmt, ap);
    va_end(ap);
    if (r > 0)
        b->len += (size_t)r;
}

size_t prof_counters_line(const int64_t ev[PROF_NEV], const char *const reason[PROF_NEV],
                          char *buf, size_t n)
{
    sbuf b = { buf, n, 0 };
    int any = 0;
    if (n)
        buf[0] = 0;
    /* software events first: they are the ones a VM still has */
    static const int order[PROF_NEV] = {
        PROF_EV_TASK_CLOCK, PROF_EV_PAGE_FAULTS, PROF_EV_MAJOR_FAULTS,
        PROF_EV_MINOR_FAULTS, PROF_EV_CTX_SWITCHES, PROF_EV_CPU_MIGRATIONS,
        PROF_EV_CYCLES, PROF_EV_INSTRUCTIONS, PROF_EV_L1D_READ_MISS,
        PROF_EV_LLC_READ_MISS, PROF_EV_DTLB_READ_MISS
    };
    for (int k = 0; k < PROF_NEV; k++) {
        int e = order[k];
        if (ev[e] < 0)
            continue;
        if (e == PROF_EV_TASK_CLOCK)
            sb_add(&b, "%s%s %.1f ms", any ? ", " : "", prof_ev_name(e), (double)ev[e] / 1e6);
        else
            sb_add(&b, "%s%s %lld", any ? ", " : "", prof_ev_name(e), (long long)ev[e]);
        if (e == PROF_EV_INSTRUCTIONS && ev[PROF_EV_CYCLES] > 0)
            sb_add(&b, " (IPC %.2f)", (double)ev[e] / (double)ev[PROF_EV_CYCLES]);
        any = 1;
    }
    if (!any)
        sb_add(&b, "none");
    /* unavailable events, grouped by reason in order of first appearance */
    int done[PROF_NEV] = { 0 }, first = 1;
    for (int k = 0; k < PROF_NEV; k++) {
        int e = order[k];
        if (ev[e] >= 0 || done[e])
            continue;
        const char *why = reason && reason[e] ? reason[e] : "";
        sb_add(&b, "%s", first ? "; unavailable: " : ", ");
        first = 0;
        int listed = 0;
        for (int j = k; j < PROF_NEV; j++) {
            int f = order[j];
            const char *w2 = reason && reason[f] ? reason[f] : "";
            if (ev[f] >= 0 || done[f] || strcmp(why, w2))
                continue;
            sb_add(&b, "%s%s", listed ? ", " : "", prof_ev_name(f));
            done[f] = 1;
            listed = 1;
        }
        if (*why)
            sb_add(&b, " (%s)", why);
    }
    return b.len;
}

/* ---- expert I/O (--expert-io sync|staged) ------------------------------- */
void prof_layer_io(prof *p, unsigned layer, double io_s, uint64_t bytes)
{
    if (layer >= p->n_layers || !(io_s >= 0.0))
        return;
    /* published with the token's other figures, if it is a decode token */
    p->cur.lio[2 * layer] += (uint64_t)(io_s * 1e9 + 0.5);
    p->cur.lio[2 * layer + 1] += bytes;
}

void prof_io_derive(double c_s, double io_s, double stall_s, uint64_t bytes,
                    prof_io_fig *f)
{
    double m = c_s > io_s ? c_s : io_s;
    f->c_s = c_s;
    f->io_s = io_s;
    f->stall_s = stall_s;
    f->bytes = bytes;
    f->hidden = 0.0;
    if (io_s > 0.0) {
        f->hidden = 1.0 - stall_s / io_s;
        if (f->hidden < 0.0)
            f->hidden = 0.0;
        if (f->hidden > 1.0)
            f->hidden = 1.0;
    }
    f->pred = m > 0.0 ? (c_s + io_s) / m : 1.0;
}

void prof_io_compare(double t_sync, const prof_io_fig *sync, double t_staged,
                     const prof_io_fig *staged, prof_io_ab *out)
{
    double c = sync->c_s, ct = staged->c_s, eff = staged->io_s;
    double m = c > eff ? c : eff, mt = ct > eff ? ct : eff;
    out->net = t_sync > 0.0 && t_staged > 0.0 ? t_sync / t_staged : 0.0;
    out->model = m > 0.0 ? (c + sync->io_s) / m : 0.0;
    out->tau = c > 0.0 ? ct / c - 1.0 : 0.0;
    out->refined = c > 0.0 && mt > 0.0 ? (c + sync->stall_s) / mt : 0.0;
}

void prof_io_get(const prof *p, unsigned layer, prof_io_fig *f)
{
    double c = 0.0, io = 0.0, stall = 0.0;
    uint64_t bytes = 0;
    for (unsigned l = 0; l < p->n_layers; l++) {
        if (layer != PROF_IO_ALL && l != layer)
            continue;
        c += prof_layer_seconds(p, l, PROF_ST_ATTN) + prof_layer_seconds(p, l, PROF_ST_FFN) +
             prof_layer_seconds(p, l, PROF_ST_EXPERTS);
        stall += prof_layer_seconds(p, l, PROF_ST_IO_WAIT);
        atomic_uint_least64_t *a = &((prof *)p)->layer_io_ns[l];
        atomic_uint_least64_t *b = &((prof *)p)->layer_io_bytes[l];
        io += (double)atomic_load_explicit(a, memory_order_relaxed) * 1e-9;
        bytes += atomic_load_explicit(b, memory_order_relaxed);
    }
    prof_io_derive(c, io, stall, bytes, f);
}

/* Every ratio is -1 where its divisor is 0: a run without reads has no
 * storage GB/s, one without a cache lookup no hit rate. */
static double ratio(double num, double den) { return den > 0 ? num / den : -1.0; }

void prof_xio_derive(prof_xio_fig *f)
{
    f->hit_rate = ratio((double)f->hits, (double)(f->hits + f->misses));
    f->bytes_tok = ratio((double)f->bytes, (double)f->tokens);
    f->gb_s = f->bytes ? ratio((double)f->bytes / 1e9, f->io_s) : -1.0;
    f->depth = f->depth_s > 0 ? ratio(f->depth_s, f->io_s) : -1.0;
    f->bound_diskbw = f->disk_gbs > 0;
    f->bound_gbs = f->bound_diskbw ? f->disk_gbs : f->gb_s;
    f->limit_tok_s = f->bound_gbs > 0 && f->bytes_tok > 0
                         ? f->bound_gbs * 1e9 / f->bytes_tok : -1.0;
    f->reached = f->tok_s > 0 ? ratio(f->tok_s, f->limit_tok_s) : -1.0;
    f->pred_acc = ratio((double)f->pred_hits, (double)f->pred);
    f->wasted_tok = f->pred_reads && f->tokens
                        ? (double)f->pred_bytes * ((double)f->pred_wasted / (double)f->pred_reads) /
                              (double)f->tokens
                        : -1.0;
    f->compute_s_tok = -1.0;
    if (f->tok_s > 0 && f->tokens) {
        double c = 1.0 / f->tok_s - f->stall_s / (double)f->tokens;
        f->compute_s_tok = c > 0 ? c : 0.0;   /* stalls timed over more than the tokens */
    }
    double io_tok = f->limit_tok_s > 0 ? 1.0 / f->limit_tok_s : -1.0;
    double t = io_tok > f->compute_s_tok ? io_tok : f->compute_s_tok;
    f->ov_limit_tok_s = io_tok > 0 && f->compute_s_tok >= 0 && t > 0 ? 1.0 / t : -1.0;
    f->ov_reached = f->ov_limit_tok_s > 0 ? ratio(f->tok_s, f->ov_limit_tok_s) : -1.0;
}
