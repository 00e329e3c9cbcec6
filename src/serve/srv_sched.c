/*
 * srv_sched.c — the scheduler: the one thread that drives the engine.
 *
 * Requests wait in a FIFO queue (at most queue_max: srv_sched_enqueue
 * refuses more, and the HTTP side answers 503 with Retry-After) for one
 * of n slots.  A slot is a sequence of the model (srv_eng.c) with its KV
 * cache; cache[] mirrors the tokens it holds.  Each turn of the loop:
 *
 *   reap     a job whose client left (its socket reads end of stream or
 *            an error: poll POLLRDHUP, checked every turn, so a client
 *            that hangs up frees its slot before the next decode step),
 *            or whose stream the client stopped reading (SRV_OUT_MAX
 *            bytes unsent), is dropped: the slot is free at once
 *   admit    queued jobs take free slots: the one whose cache holds the
 *            longest prefix of the job's prompt (a conversation's next
 *            turn finds its earlier turns; llama-server's cache_prompt),
 *            else the one used least recently, so other conversations'
 *            caches live longer
 *   sample   every slot whose logits are fresh samples a token with its
 *            request's own seeded sampler (over the history cflow run
 *            gives it: prompt and reply), streams its text and either
 *            ends (end of text, a stop string, max_tokens, a full
 *            context) or waits for the next step
 *   step     one decode step for every slot waiting: one srv_eng_step,
 *            whose sequences each get the logits of decoding alone, so
 *            concurrency never changes a token
 *   prefill  one slot's prompt advances: all of it when nothing else is
 *            decoding, else SRV_PREFILL_CHUNK tokens, so a long prompt
 *            holds the others' streams back by one chunk a turn at most.
 *            The slot keeps the longest prefix of the prompt its cache
 *            holds and prefills the rest (eng_prefill_reuse): a follow-up
 *            turn pays only for its new tokens.
 *
 * Text leaves through the request's stop strings (text that may begin one
 * is held back until it cannot) and its format (srv_openai.c,
 * srv_ollama.c): a stream's events go into the job's out buffer under mu
 * and its connection is resumed; a whole reply is built at the end.
 */
#include "config.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "engine/engine.h"
#include "serve/srv_impl.h"

static double now(void)
{
    return prof_now();
}

/* ----------------------------------------------------------- the queue */

int srv_sched_enqueue(srv *s, srv_job *j)
{
    if (s->stopping)
        return -2;
    if (s->n_busy == s->n_slots && s->n_queued >= s->cfg.queue_max)
        return -1;
    j->next = NULL;
    if (s->q_tail)
        s->q_tail->next = j;
    else
        s->q_head = j;
    s->q_tail = j;
    s->n_queued++;
    j->refs++;
    j->state = SRV_QUEUED;
    pthread_cond_signal(&s->cv);
    return 0;
}

/* The client hung up (or the socket failed). */
static int peer_gone(const srv_job *j)
{
    if (j->cancel)
        return 1;
    if (j->fd < 0)
        return 0;
    struct pollfd p = { .fd = j->fd, .events = POLLRDHUP };
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static int drop_job(const srv_job *j)
{
    return peer_gone(j) || j->out.n - j->out_off > SRV_OUT_MAX;
}

/* Under mu: a job that never ran is done, answered as bad says (NULL:
 * its client left). */
static void end_queued(srv *s, srv_job *j, const srv_bad *bad)
{
    if (bad) {
        j->fmt->fail(&j->out, bad, j->req.stream);
        j->status = bad->status;
    }
    j->finish = "cancelled";
    j->state = SRV_DONE;
    s->m.cancelled += !bad;
    srv_wake_add(s, j);
    srv_job_unref(j);
}

/* Under mu: queued jobs whose clients left; busy ones are marked
 * (finish "cancelled") for retire. */
static void reap(srv *s)
{
    for (srv_job **pp = &s->q_head, *j; (j = *pp);) {
        if (!drop_job(j)) {
            pp = &j->next;
            continue;
        }
        *pp = j->next;
        if (s->q_tail == j) {
            s->q_tail = NULL;
            for (srv_job *k = s->q_head; k; k = k->next)
                s->q_tail = k;
        }
        s->n_queued--;
        end_queued(s, j, NULL);
    }
    for (unsigned q = 0; q < s->n_slots; q++) {
        srv_job *j = s->slots[q].job;
        if (j && !j->finish && drop_job(j))
            j->finish = "cancelled";
    }
}

static size_t common_prefix(const srv_slot *sl, const srv_job *j)
{
    size_t k = 0;
    while (k < sl->n_cache && k < j->n_ids && sl->cache[k] == j->ids[k])
        k++;
    return k;
}

/* Under mu: queued jobs into free slots. */
static void admit(srv *s)
{
    while (s->q_head && s->n_busy < s->n_slots) {
        srv_job *j = s->q_head;
        int best = -1;
        size_t best_k = 0;
        for (unsigned q = 0; q < s->n_slots; q++) {
            const srv_slot *sl = &s->slots[q];
            if (sl->job)
                continue;
            size_t k = common_prefix(sl, j);
            if (best < 0 || k > best_k || (k == best_k && sl->used < s->slots[best].used)) {
                best = (int)q;
                best_k = k;
            }
        }
        s->q_head = j->next;
        if (!s->q_head)
            s->q_tail = NULL;
        s->n_queued--;
        srv_slot *sl = &s->slots[best];
        sl->job = j;
        sl->used = ++s->clock;
        sl->logits = sl->pending = 0;
        j->slot = best;
        j->state = SRV_RUNNING;
        j->t_start = now();
        s->n_busy++;
    }
}

/* ------------------------------------------------------------ the text */

/* Text that leaves: into the stream (under mu) or the whole reply.  A
 * stream's token whose text is held back (a stop string may begin, a
 * character is not whole yet) or is none still sends an event, empty, as
 * llama-server and ollama do: a client sees every token arrive. */
static void release(srv *s, srv_job *j, const char *t, size_t n, int empty_ok)
{
    if (!n && !(empty_ok && j->req.stream && !j->sent))
        return;
    j->sent = 1;
    if (!j->req.stream) {
        srv_buf_put(&j->text, t, n);
        return;
    }
    srv_buf ev = { 0 };
    j->fmt->delta(j, &ev, t, n);
    pthread_mutex_lock(&s->mu);
    srv_buf_put(&j->out, ev.p, ev.n);
    j->out.oom |= ev.oom;
    srv_wake_add(s, j);
    pthread_mutex_unlock(&s->mu);
    srv_buf_free(&ev);
}

/* Text through the stop strings: 1 when one matched (the text before it
 * left, the rest is dropped), else 0 (what may begin one is held). */
static int text_out(srv *s, srv_job *j, const char *t, size_t n)
{
    srv_buf *h = &j->hold;
    if (j->req.n_stop == 0) {
        release(s, j, t, n, 0);
        return 0;
    }
    srv_buf_put(h, t, n);
    if (!h->p)
        return 0;
    size_t cut = h->n;
    for (size_t i = 0; i < j->req.n_stop; i++) {
        const char *m = memmem(h->p, h->n, j->req.stop[i], strlen(j->req.stop[i]));
        if (m && (size_t)(m - h->p) < cut)
            cut = (size_t)(m - h->p);
    }
    if (cut < h->n) {
        release(s, j, h->p, cut, 0);
        h->n = 0;
        return 1;
    }
    size_t keep = 0;   /* the longest tail that begins a stop string */
    for (size_t i = 0; i < j->req.n_stop; i++) {
        size_t sl = strlen(j->req.stop[i]);
        for (size_t k = sl - 1 < h->n ? sl - 1 : h->n; k > keep; k--)
            if (!memcmp(h->p + h->n - k, j->req.stop[i], k)) {
                keep = k;
                break;
            }
    }
    release(s, j, h->p, h->n - keep, 0);
    memmove(h->p, h->p + h->n - keep, keep);
    h->n = keep;
    return 0;
}

/* --------------------------------------------------------- job's start */

static uint64_t random_seed(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v)
        v = (uint64_t)(now() * 1e9);
    return v;
}

/* The slot's job begins: sampler, detokeniser, run log.  -1 out of
 * memory. */
static int start_job(srv *s, srv_slot *sl)
{
    srv_job *j = sl->job;
    if (!j->req.has_seed)
        j->req.sp.seed = random_seed();
    if (!(j->smp = eng_sampler_new(&j->req.sp, eng_tok_n_vocab(s->tok))))
        return -1;
    eng_detok_init(&j->dt);
    j->dt.prev = j->ids[j->n_ids - 1];
    srv_log_begin(s, sl);
    return 0;
}

/* -------------------------------------------------------------- the end */

/* Build the job's last bytes for why (its finish), log it, and hand it to
 * the HTTP side: done, slot free.  bad: the error of "error" and of a
 * shutdown. */
static void retire(srv *s, unsigned q, const srv_bad *bad)
{
    srv_slot *sl = &s->slots[q];
    srv_job *j = sl->job;
    const char *why = j->finish;
    int ok = !strcmp(why, "stop") || !strcmp(why, "length");
    srv_buf last = { 0 };
    char piece[64];

    if (!j->t_first)
        j->t_first = now();
    j->t_last = now();
    if (ok && j->smp) {   /* what the detokeniser and the stop strings held */
        size_t n = eng_detok_flush(&j->dt, piece, sizeof piece);
        if (!text_out(s, j, piece, n)) {
            release(s, j, j->hold.p, j->hold.n, 0);
            j->hold.n = 0;
        }
    }
    if (ok && j->req.stream) {
        j->fmt->tail(j, &last);
    } else if (ok) {
        j->fmt->whole(j, &last);
    } else if (bad) {
        j->fmt->fail(&last, bad, j->req.stream);
    }
    if (j->smp)
        srv_log_end(s, sl);
    srv_say(s, 0, "%s %d %s: %zu prompt tokens (%zu cached), %ld generated, %s, %.3f s",
            j->endpoint, bad && !j->req.stream ? bad->status : 200, j->client, j->n_ids,
            j->n_cached, j->n_gen, why, j->t_last - j->t_arrive);

    pthread_mutex_lock(&s->mu);
    srv_buf_put(&j->out, last.p, last.n);
    j->out.oom |= last.oom;
    if (bad && !j->req.stream)
        j->status = bad->status;
    j->state = SRV_DONE;
    s->m.cancelled += !strcmp(why, "cancelled") && !bad;
    s->m.generated_tokens += (uint64_t)j->n_gen;
    srv_wake_add(s, j);
    sl->job = NULL;
    sl->logits = sl->pending = 0;
    s->n_busy--;
    srv_job_unref(j);
    pthread_mutex_unlock(&s->mu);
    srv_buf_free(&last);
}

static void fail(srv *s, unsigned q, const char *msg)
{
    srv_bad bad = { .status = 500 };
    srv_job *j = s->slots[q].job;
    snprintf(bad.msg, sizeof bad.msg, "%s", msg);
    snprintf(j->err, sizeof j->err, "%s", msg);
    j->finish = "error";
    retire(s, q, &bad);
}

/* Slots marked by reap. */
static void retire_cancelled(srv *s)
{
    for (unsigned q = 0; q < s->n_slots; q++)
        if (s->slots[q].job && s->slots[q].job->finish)
            retire(s, q, NULL);
}

/* ------------------------------------------------------------ the loop */

/* Positions the slots' caches hold (the scheduler's to read). */
static uint64_t kv_used(const srv *s)
{
    uint64_t n = 0;
    for (unsigned q = 0; q < s->n_slots; q++)
        n += s->slots[q].n_cache;
    return n;
}

static int cache_put(srv_slot *sl, const int32_t *t, size_t at, size_t n)
{
    if (at + n > sl->cap) {
        size_t cap = sl->cap ? sl->cap : 256;
        while (cap < at + n)
            cap *= 2;
        int32_t *p = realloc(sl->cache, cap * sizeof *p);
        if (!p)
            return -1;
        sl->cache = p;
        sl->cap = cap;
    }
    memcpy(sl->cache + at, t, n * sizeof *t);
    sl->n_cache = at + n;
    return 0;
}

static void sample_one(srv *s, unsigned q)
{
    srv_slot *sl = &s->slots[q];
    srv_job *j = sl->job;
    const eng_tok *tok = s->tok;
    sl->logits = 0;
    if (!j->started && j->req.stream) {
        srv_buf head = { 0 };
        j->fmt->head(j, &head);
        pthread_mutex_lock(&s->mu);
        srv_buf_put(&j->out, head.p, head.n);
        srv_wake_add(s, j);
        pthread_mutex_unlock(&s->mu);
        srv_buf_free(&head);
    }
    j->started = 1;
    int32_t t = eng_sampler_sample(j->smp, srv_eng_logits(s->eng, q), sl->cache, sl->n_cache);
    j->t_last = now();
    if (!j->req.ignore_eos && (t == eng_tok_eos(tok) || t == eng_tok_eot(tok))) {
        j->finish = "stop";
        retire(s, q, NULL);
        return;
    }
    j->n_gen++;
    size_t n = 0;
    char buf[1024];
    if (!eng_tok_is_control(tok, t))
        n = eng_detok_push(&j->dt, tok, t, buf, sizeof buf);
    j->sent = 0;
    int stop = text_out(s, j, buf, n);
    release(s, j, "", 0, 1);   /* the token's event when its text is held or none */
    if (stop)
        j->finish = "stop";
    else if ((j->max_tokens && j->n_gen >= j->max_tokens) || sl->n_cache >= s->n_ctx)
        j->finish = "length";
    if (j->finish) {
        retire(s, q, NULL);
        return;
    }
    sl->pending = 1;
    sl->next = t;
}

static void sample_all(srv *s)
{
    for (unsigned q = 0; q < s->n_slots; q++)
        if (s->slots[q].job && s->slots[q].logits)
            sample_one(s, q);
}

/* One decode step for every slot waiting for one. */
static void step(srv *s)
{
    unsigned qs[SRV_SLOTS_MAX], n = 0;
    int32_t toks[SRV_SLOTS_MAX];
    int rc[SRV_SLOTS_MAX];
    static char errs[SRV_SLOTS_MAX][SRV_ERRLEN];   /* the scheduler's thread only */
    for (unsigned q = 0; q < s->n_slots; q++)
        if (s->slots[q].job && s->slots[q].pending) {
            qs[n] = q;
            toks[n++] = s->slots[q].next;
            s->slots[q].pending = 0;
        }
    if (!n)
        return;
    for (unsigned i = 0; i < n; i++)
        srv_log_tok_begin(&s->slots[qs[i]]);
    double t0 = now();
    srv_eng_step(s->eng, qs, toks, n, rc, errs);
    if (s->step_ms)   /* CFLOW_FAULT=serve:step-ms@N (prof_fault.c) */
        while (now() - t0 < s->step_ms * 1e-3) {
            struct timespec ts = { 0, 200000 };
            nanosleep(&ts, NULL);
        }
    double t1 = now();
    for (unsigned i = 0; i < n; i++) {
        srv_slot *sl = &s->slots[qs[i]];
        srv_job *j = sl->job;
        if (rc[i] == ENG_ECTX) {
            j->finish = "length";
            retire(s, qs[i], NULL);
            continue;
        }
        if (rc[i] || cache_put(sl, &toks[i], sl->n_cache, 1)) {
            srv_eng_reset(s->eng, qs[i]);
            sl->n_cache = 0;
            fail(s, qs[i], rc[i] ? errs[i] : "out of memory");
            continue;
        }
        j->decode_s += t1 - t0;
        srv_log_tok_end(s, sl, 1, 1);
        sl->logits = 1;
    }
    eng_stats st;
    srv_eng_stats(s->eng, &st);
    pthread_mutex_lock(&s->mu);
    s->m.steps++;
    s->m.step_seqs += n;
    s->m.step_hist[n]++;
    s->m.decode_s += t1 - t0;
    s->m.eng = st;
    s->m.kv_used = kv_used(s);
    pthread_mutex_unlock(&s->mu);
}

/* The slot that has waited longest for its prompt, or -1. */
static int prefill_slot(const srv *s, int *others)
{
    int q = -1;
    *others = 0;
    for (unsigned i = 0; i < s->n_slots; i++) {
        const srv_slot *sl = &s->slots[i];
        if (!sl->job)
            continue;
        if (sl->job->n_pre == sl->job->n_ids)
            *others = 1;
        else if (q < 0 || sl->job->t_start < s->slots[q].job->t_start)
            q = (int)i;
    }
    return q;
}

static void prefill(srv *s)
{
    int others, q = prefill_slot(s, &others);
    if (q < 0)
        return;
    srv_slot *sl = &s->slots[q];
    srv_job *j = sl->job;
    char err[SRV_ERRLEN];
    /* a conversation's earlier replies as the tokens they were sampled
     * as, where the slot still holds them (engine.h) */
    if (!j->smp && (eng_tok_splice_cached(s->tok, sl->cache, sl->n_cache, s->n_ctx, &j->ids,
                                          &j->n_ids) || start_job(s, sl))) {
        fail(s, (unsigned)q, "out of memory");
        return;
    }
    size_t upto = j->n_ids, reused = 0;
    if (others && upto - j->n_pre > SRV_PREFILL_CHUNK)
        upto = j->n_pre + SRV_PREFILL_CHUNK;
    srv_log_tok_begin(sl);
    double t0 = now();
    int rc = srv_eng_prefill(s->eng, (unsigned)q, j->ids, upto, &reused, err, sizeof err);
    double t1 = now();
    if (rc || cache_put(sl, j->ids, 0, upto)) {
        srv_eng_reset(s->eng, (unsigned)q);   /* what it holds is not known now */
        sl->n_cache = 0;
        fail(s, (unsigned)q, rc ? err : "out of memory");
        return;
    }
    size_t from = reused > j->n_pre ? reused : j->n_pre, done = upto - from;
    if (j->n_pre == 0)
        j->n_cached = reused;
    j->n_prefilled += done;
    j->n_pre = upto;
    j->prefill_s += t1 - t0;
    srv_log_tok_end(s, sl, 0, done);
    if (upto == j->n_ids) {
        sl->logits = 1;
        j->t_first = t1;
    }
    pthread_mutex_lock(&s->mu);
    s->m.prefilled_tokens += done;
    s->m.prefill_s += t1 - t0;
    s->m.kv_used = kv_used(s);
    if (upto == j->n_ids) {
        s->m.prompt_tokens += j->n_ids;
        s->m.cached_tokens += j->n_cached;
    }
    pthread_mutex_unlock(&s->mu);
}

static void *sched_main(void *arg)
{
    srv *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->stopping && !s->n_busy && !s->q_head)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->stopping)
            break;
        reap(s);
        admit(s);
        pthread_mutex_unlock(&s->mu);
        srv_wake_run(s);
        retire_cancelled(s);
        sample_all(s);
        step(s);
        prefill(s);
        srv_wake_run(s);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int srv_sched_start(srv *s, char *err, size_t errlen)
{
    unsigned long ms = 0;
    if (prof_fault_get("serve:step-ms", &ms))
        s->step_ms = ms;
    if (pthread_create(&s->thread, NULL, sched_main, s)) {
        snprintf(err, errlen, "cannot start the scheduler thread");
        return -1;
    }
    s->thread_on = 1;
    return 0;
}

void srv_sched_stop(srv *s)
{
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->thread_on)
        pthread_join(s->thread, NULL);
    s->thread_on = 0;
    /* the scheduler is gone: this thread ends what it held */
    srv_bad bad = { .status = 503 };
    snprintf(bad.msg, sizeof bad.msg, "the server is shutting down");
    for (unsigned q = 0; q < s->n_slots; q++)
        if (s->slots[q].job) {
            s->slots[q].job->finish = "cancelled";
            retire(s, q, &bad);
        }
    pthread_mutex_lock(&s->mu);
    while (s->q_head) {
        srv_job *j = s->q_head;
        s->q_head = j->next;
        s->n_queued--;
        end_queued(s, j, &bad);
    }
    s->q_tail = NULL;
    pthread_mutex_unlock(&s->mu);
    srv_wake_run(s);
}
