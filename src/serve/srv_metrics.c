/*
 * srv_metrics.c — GET /metrics: the server's counters in Prometheus's
 * text format (version 0.0.4), every name prefixed cflow_.
 *
 * Counters since the server started: replies by status, requests
 * cancelled (the client left) and rejected (503, the queue full), prompt
 * tokens (of prompts whose prefill finished: those found in a slot's
 * cache, those prefilled), tokens generated, engine seconds of prefill and
 * decode, decode steps by the sequences they advanced.  Gauges: the
 * throughputs (prefilled tokens per prefill second; sequences advanced
 * per decode second, the aggregate of all streams), slots busy and in
 * all, requests queued, KV cache positions in use and in all, and with
 * sync or staged expert reads the expert cache's hits, misses and rate.
 * The scheduler updates them after each engine call, under mu; a scrape
 * reads them under mu, never the engine.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "serve/srv_impl.h"

void srv_metrics_reply(srv_metrics *m, int status)
{
    m->requests++;
    m->rejected += status == 503;
    for (int i = 0; i < SRV_CODES; i++) {
        if (m->code[i] == status || m->code[i] == 0) {
            m->code[i] = status;
            m->code_n[i]++;
            return;
        }
    }
}

static void metric(srv_buf *b, const char *name, const char *type, const char *help,
                   double v)
{
    srv_buf_printf(b, "# HELP cflow_%s %s\n# TYPE cflow_%s %s\ncflow_%s %.17g\n", name, help,
                   name, type, name, v);
}

void srv_metrics_text(srv *s, srv_buf *b)
{
    pthread_mutex_lock(&s->mu);
    srv_metrics m = s->m;
    unsigned busy = s->n_busy, queued = s->n_queued;
    pthread_mutex_unlock(&s->mu);

    srv_buf_puts(b, "# HELP cflow_requests_total HTTP replies by status code.\n"
                    "# TYPE cflow_requests_total counter\n");
    for (int i = 0; i < SRV_CODES && m.code[i]; i++)
        srv_buf_printf(b, "cflow_requests_total{code=\"%d\"} %llu\n", m.code[i],
                       (unsigned long long)m.code_n[i]);
    metric(b, "requests_cancelled_total", "counter",
           "Requests whose client left before the reply ended.", (double)m.cancelled);
    metric(b, "requests_rejected_total", "counter",
           "Requests answered 503: every slot busy and the queue full.", (double)m.rejected);
    metric(b, "prompt_tokens_total", "counter", "Prompt tokens of requests prefilled.",
           (double)m.prompt_tokens);
    metric(b, "prompt_tokens_cached_total", "counter",
           "Prompt tokens found in a slot's KV cache, not prefilled again.",
           (double)m.cached_tokens);
    metric(b, "prompt_tokens_prefilled_total", "counter", "Prompt tokens prefilled.",
           (double)m.prefilled_tokens);
    metric(b, "generated_tokens_total", "counter", "Tokens generated.",
           (double)m.generated_tokens);
    metric(b, "prefill_seconds_total", "counter", "Engine seconds spent prefilling.",
           m.prefill_s);
    metric(b, "decode_seconds_total", "counter", "Engine seconds spent in decode steps.",
           m.decode_s);
    metric(b, "prefill_tokens_per_second", "gauge",
           "Prompt tokens prefilled per prefill second, since the start.",
           m.prefill_s > 0 ? (double)m.prefilled_tokens / m.prefill_s : 0.0);
    metric(b, "decode_tokens_per_second", "gauge",
           "Tokens decoded per decode second over all slots (aggregate), since the start.",
           m.decode_s > 0 ? (double)m.step_seqs / m.decode_s : 0.0);
    metric(b, "decode_steps_total", "counter", "Decode steps.", (double)m.steps);
    metric(b, "decode_step_sequences_total", "counter",
           "Sequences the decode steps advanced (one token each).", (double)m.step_seqs);
    srv_buf_puts(b, "# HELP cflow_decode_steps_by_size_total Decode steps by the sequences "
                    "in them.\n# TYPE cflow_decode_steps_by_size_total counter\n");
    for (unsigned k = 1; k <= SRV_SLOTS_MAX; k++)
        if (m.step_hist[k])
            srv_buf_printf(b, "cflow_decode_steps_by_size_total{sequences=\"%u\"} %llu\n", k,
                           (unsigned long long)m.step_hist[k]);
    metric(b, "slots_busy", "gauge", "Slots running a request.", busy);
    metric(b, "slots_total", "gauge", "Slots.", s->n_slots);
    metric(b, "requests_queued", "gauge", "Requests waiting for a slot.", queued);
    metric(b, "kv_tokens_used", "gauge", "KV cache positions in use, all slots.",
           (double)m.kv_used);
    metric(b, "kv_tokens_total", "gauge", "KV cache positions, all slots.",
           (double)s->n_slots * s->n_ctx);
    if (m.eng.xio_hits + m.eng.xio_misses) {
        metric(b, "expert_cache_hits_total", "counter",
               "Routed experts found in the RAM expert cache.", (double)m.eng.xio_hits);
        metric(b, "expert_cache_misses_total", "counter", "Routed experts read from storage.",
               (double)m.eng.xio_misses);
        metric(b, "expert_cache_hit_ratio", "gauge", "Expert cache hits over routed experts.",
               (double)m.eng.xio_hits / (double)(m.eng.xio_hits + m.eng.xio_misses));
    }
}
