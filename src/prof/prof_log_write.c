/*
 * prof_log_write.c — writing the run log: a session (machine, model,
 * program), its runs, and per run the token rows, the per-layer rows and the
 * counter totals, flushed in batches; and `cflow bench`'s result rows.
 *
 * Every write is one short BEGIN IMMEDIATE transaction (prof_log_begin), so
 * several processes logging at once take turns.  A flush writes the token
 * records the ring holds since the last flush and rewrites the run's totals
 * and layer rows; it is due every FLUSH_TOKENS tokens or FLUSH_SECONDS,
 * whichever comes first.  A failed flush rolls back and rewinds the ring
 * cursor, so the next flush tries the same tokens again (those the ring
 * still holds).  The schema is in prof_log.c.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "prof/prof.h"
#include "prof/prof_log_impl.h"

#define FLUSH_TOKENS    64
#define FLUSH_SECONDS   0.5

/* The binding stream as the log spells it (fmt_cp_stream_name's words;
 * prof_log_read.c reads them back). */
static const char *binding_name(int st)
{
    return st == PROF_ST_FFN ? "dense" : st == PROF_ST_EXPERTS ? "experts" : "attention";
}

void prof_log_now_iso(char out[32])
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    char sec[24];
    strftime(sec, sizeof sec, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, 32, "%.20s.%03dZ", sec, (int)(ts.tv_nsec / 1000000) % 1000);
}

static int step_done(sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

static void bind_pos_real(sqlite3_stmt *st, int i, double v)
{
    if (v > 0)
        sqlite3_bind_double(st, i, v);
    else
        sqlite3_bind_null(st, i);
}

/* The expert figures (prof_xio_fig) into the XIO_N parameters from i on,
 * in the order of prof_log.c's XIO_COLS; all NULL without f, and each
 * "n/a" (-1) or unknown (0 for the bandwidth) figure NULL. */
#define XIO_N 24
#define XIO_SQL_COLS " xio_hits, xio_misses, xio_tokens, xio_bytes, xio_s, xio_depth_s,"    \
    " xio_pred, xio_pred_hits, disk_gbs, xio_hit_rate, xio_bytes_tok, xio_gb_s,"            \
    " xio_depth, xio_limit_tok_s, xio_reached, xio_pred_acc, xio_stall_s, xio_pred_reads,"  \
    " xio_pred_wasted, xio_pred_bytes, xio_wasted_tok, xio_compute_s_tok,"                   \
    " xio_ov_limit_tok_s, xio_ov_reached"
static void bind_xio(sqlite3_stmt *st, int i, const prof_xio_fig *f)
{
    if (!f) {
        for (int k = 0; k < XIO_N; k++)
            sqlite3_bind_null(st, i + k);
        return;
    }
    const uint64_t n[4] = { f->hits, f->misses, f->tokens, f->bytes };
    for (int k = 0; k < 4; k++)
        sqlite3_bind_int64(st, i + k, (sqlite3_int64)n[k]);
    sqlite3_bind_double(st, i + 4, f->io_s);
    bind_pos_real(st, i + 5, f->depth_s);
    sqlite3_bind_int64(st, i + 6, (sqlite3_int64)f->pred);
    sqlite3_bind_int64(st, i + 7, (sqlite3_int64)f->pred_hits);
    bind_pos_real(st, i + 8, f->disk_gbs);
    const double d[7] = { f->hit_rate, f->bytes_tok, f->gb_s, f->depth, f->limit_tok_s,
                          f->reached, f->pred_acc };
    for (int k = 0; k < 7; k++) {
        if (d[k] >= 0)
            sqlite3_bind_double(st, i + 9 + k, d[k]);
        else
            sqlite3_bind_null(st, i + 9 + k);
    }
    sqlite3_bind_double(st, i + 16, f->stall_s);
    const uint64_t p[3] = { f->pred_reads, f->pred_wasted, f->pred_bytes };
    for (int k = 0; k < 3; k++)
        sqlite3_bind_int64(st, i + 17 + k, (sqlite3_int64)p[k]);
    const double d8[4] = { f->wasted_tok, f->compute_s_tok, f->ov_limit_tok_s, f->ov_reached };
    for (int k = 0; k < 4; k++) {
        if (d8[k] >= 0)
            sqlite3_bind_double(st, i + 20 + k, d8[k]);
        else
            sqlite3_bind_null(st, i + 20 + k);
    }
}

void prof_log_set_xio(prof_log *l, const prof_xio_fig *f)
{
    l->has_xio = f != NULL;
    if (f)
        l->xio = *f;
}

void prof_log_set_request(prof_log *l, const char *stop, uint64_t n_cached,
                          uint64_t n_prompt_all)
{
    snprintf(l->req_stop, sizeof l->req_stop, "%s", stop ? stop : "");
    l->req_cached = n_cached;
    l->req_prompt = n_prompt_all;
    l->has_req = 1;
}

int prof_log_session_join(prof_log *l, const prof_log *from, char *err, size_t errlen)
{
    if (from->session_id <= 0) {
        snprintf(err, errlen, "%s: no session to join", from->path);
        return -1;
    }
    l->machine_id = from->machine_id;
    l->model_id = from->model_id;
    l->session_id = from->session_id;
    return 0;
}

/* Find or make a row; *id gets it. */
static int find_or_add(sqlite3 *db, const char *find, const char *add,
                       void (*bind)(sqlite3_stmt *, const void *), const void *arg,
                       int64_t *id)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(db, find, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    bind(st, arg);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *id = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
        return SQLITE_OK;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return rc;
    if ((rc = sqlite3_prepare_v2(db, add, -1, &st, NULL)) != SQLITE_OK)
        return rc;
    bind(st, arg);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return rc;
    *id = sqlite3_last_insert_rowid(db);
    return SQLITE_OK;
}

static void bind_machine(sqlite3_stmt *st, const void *arg)
{
    const prof_machine *m = arg;
    prof_log_bind_text(st, 1, m->hostname ? m->hostname : "");
    prof_log_bind_text(st, 2, m->cpu_model ? m->cpu_model : "");
    prof_log_bind_text(st, 3, m->isa ? m->isa : "");
    sqlite3_bind_int(st, 4, m->cores);
    if (sqlite3_bind_parameter_count(st) >= 5)
        bind_pos_real(st, 5, m->read_bw_gbs);
}

static void bind_model(sqlite3_stmt *st, const void *arg)
{
    const prof_model_info *mi = arg;
    prof_log_bind_text(st, 1, mi->path ? mi->path : "");
    prof_log_bind_text(st, 2, mi->hash ? mi->hash : "");
    if (sqlite3_bind_parameter_count(st) < 3)
        return;
    sqlite3_bind_int64(st, 3, (sqlite3_int64)mi->size);
    prof_log_bind_text(st, 4, mi->arch);
    prof_log_bind_text(st, 5, mi->quant);
    const uint32_t v[10] = { mi->n_layers, mi->dim, mi->ffn_dim, mi->n_heads,
                             mi->n_kv_heads, mi->vocab_size, mi->n_experts, mi->top_k,
                             mi->dense_delay, mi->expert_delay };
    for (int i = 0; i < 10; i++)
        sqlite3_bind_int64(st, 6 + i, v[i]);
}

int prof_log_session(prof_log *l, const prof_machine *m, const prof_model_info *mi,
                     const char *program, char *err, size_t errlen)
{
    char now[32];
    sqlite3_stmt *st = NULL;
    int rc;

    if ((rc = prof_log_begin(l)) != SQLITE_OK)
        return prof_log_fail(l, err, errlen, NULL);
    rc = find_or_add(l->db,
                     "SELECT id FROM machine WHERE hostname=?1 AND cpu_model=?2 AND"
                     " isa=?3 AND cores=?4",
                     "INSERT INTO machine(hostname, cpu_model, isa, cores, read_bw_gbs)"
                     " VALUES(?1, ?2, ?3, ?4, ?5)",
                     bind_machine, m, &l->machine_id);
    if (rc == SQLITE_OK && m->read_bw_gbs > 0) {
        rc = sqlite3_prepare_v2(l->db,
                                "UPDATE machine SET read_bw_gbs=?1 WHERE id=?2 AND"
                                " read_bw_gbs IS NULL",
                                -1, &st, NULL);
        if (rc == SQLITE_OK) {
            sqlite3_bind_double(st, 1, m->read_bw_gbs);
            sqlite3_bind_int64(st, 2, l->machine_id);
            rc = step_done(st);
            sqlite3_finalize(st);
        }
    }
    if (rc == SQLITE_OK)
        rc = find_or_add(l->db, "SELECT id FROM model WHERE path=?1 AND hash=?2",
                         "INSERT INTO model(path, hash, size, arch, quant, n_layers, dim,"
                         " ffn_dim, n_heads, n_kv_heads, vocab_size, n_experts, top_k,"
                         " dense_delay, expert_delay) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7,"
                         " ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
                         bind_model, mi, &l->model_id);
    if (rc == SQLITE_OK) {
        /* a model first seen by an older schema gets its geometry now */
        rc = sqlite3_prepare_v2(l->db,
                                "UPDATE model SET size=?3, arch=?4, quant=?5, n_layers=?6,"
                                " dim=?7, ffn_dim=?8, n_heads=?9, n_kv_heads=?10,"
                                " vocab_size=?11, n_experts=?12, top_k=?13,"
                                " dense_delay=?14, expert_delay=?15"
                                " WHERE path=?1 AND hash=?2 AND n_layers IS NULL",
                                -1, &st, NULL);
        if (rc == SQLITE_OK) {
            bind_model(st, mi);
            rc = step_done(st);
            sqlite3_finalize(st);
        }
    }
    if (rc == SQLITE_OK) {
        prof_log_now_iso(now);
        rc = sqlite3_prepare_v2(l->db,
                                "INSERT INTO session(machine_id, model_id, program, started,"
                                " pid, model_named) VALUES(?1, ?2, ?3, ?4, ?5, ?6)",
                                -1, &st, NULL);
        if (rc == SQLITE_OK) {
            sqlite3_bind_int64(st, 1, l->machine_id);
            sqlite3_bind_int64(st, 2, l->model_id);
            prof_log_bind_text(st, 3, program);
            prof_log_bind_text(st, 4, now);
            sqlite3_bind_int64(st, 5, (sqlite3_int64)getpid());
            prof_log_bind_text(st, 6, mi->named ? mi->named : mi->path);
            rc = step_done(st);
            sqlite3_finalize(st);
            l->session_id = sqlite3_last_insert_rowid(l->db);
        }
    }
    return prof_log_end(l, rc, err, errlen);
}

/* The statements every flush runs, prepared once per log. */
static int prepare_writers(prof_log *l)
{
    const struct {
        const char    *sql;
        sqlite3_stmt **st;
    } w[] = {
        { "INSERT OR REPLACE INTO token(run_id, idx, phase, t, dt, attn_s, ffn_s,"
          " experts_s, io_wait_s, c_cycles, c_instructions, c_l1d_read_misses,"
          " c_llc_read_misses, c_dtlb_read_misses, c_task_clock, c_page_faults,"
          " c_major_faults, c_minor_faults, c_context_switches, c_cpu_migrations,"
          " attn_bytes, ffn_bytes, experts_bytes)"
          " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15,"
          " ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23)",
          &l->ins_token },
        { "UPDATE run SET n_prompt=?2, n_gen=?3, prefill_s=?4, decode_s=?5,"
          " bytes_per_token=?6, prefill_tok_s=?7, decode_tok_s=?8, gb_s=?9,"
          " bw_share=?10, ended=?11, status=?12, attn_bytes=?13, ffn_bytes=?14,"
          " experts_bytes=?15, cp_naive_bytes=?16, cp_critical_bytes=?17, xio_hits=?18,"
          " xio_misses=?19, xio_tokens=?20, xio_bytes=?21, xio_s=?22, xio_depth_s=?23,"
          " xio_pred=?24, xio_pred_hits=?25, disk_gbs=?26, xio_hit_rate=?27,"
          " xio_bytes_tok=?28, xio_gb_s=?29, xio_depth=?30, xio_limit_tok_s=?31,"
          " xio_reached=?32, xio_pred_acc=?33, xio_stall_s=?34, xio_pred_reads=?35,"
          " xio_pred_wasted=?36, xio_pred_bytes=?37, xio_wasted_tok=?38,"
          " xio_compute_s_tok=?39, xio_ov_limit_tok_s=?40, xio_ov_reached=?41,"
          " stop=?42, n_cached=?43, n_prompt_all=?44 WHERE id=?1",
          &l->upd_run },
        { "INSERT OR REPLACE INTO layer_stat(run_id, layer, attn_s, ffn_s, experts_s,"
          " io_wait_s, n_tokens, attn_bytes, ffn_bytes, experts_bytes, cp_attn_bytes,"
          " cp_dense_bytes, cp_expert_bytes, cp_naive_bytes, cp_critical_bytes,"
          " cp_binding, io_s, io_bytes) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9,"
          " ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
          &l->ins_layer },
        { "INSERT OR REPLACE INTO counter(run_id, event, value, reason)"
          " VALUES(?1, ?2, ?3, ?4)",
          &l->ins_counter },
    };
    for (size_t i = 0; i < sizeof w / sizeof *w; i++) {
        int rc = *w[i].st ? SQLITE_OK : sqlite3_prepare_v2(l->db, w[i].sql, -1, w[i].st, NULL);
        if (rc != SQLITE_OK)
            return rc;
    }
    return SQLITE_OK;
}

int prof_log_run_begin(prof_log *l, prof *p, const prof_run_cfg *c, int64_t *run_id,
                       char *err, size_t errlen)
{
    char now[32];
    sqlite3_stmt *st;
    prof_totals t;
    int rc;

    if ((rc = prepare_writers(l)) != SQLITE_OK)
        return prof_log_fail(l, err, errlen, NULL);
    /* A writer only appends: a few B-tree pages are hot.  SQLite's default
     * cache (2 MB) would otherwise fill with cold token pages as the log
     * grows, and a long session's memory would creep up with it (the soak
     * test, tests/hard/test_soak.c). */
    sqlite3_exec(l->db, "PRAGMA cache_size=-256", NULL, NULL, NULL);
    if ((rc = prof_log_begin(l)) != SQLITE_OK)
        return prof_log_fail(l, err, errlen, NULL);
    prof_log_now_iso(now);
    rc = sqlite3_prepare_v2(
        l->db,
        "INSERT INTO run(session_id, started, status, threads, prefetch, expert_io,"
        " n_ctx, temp, top_k, top_p, min_p, rep_penalty, rep_last_n, seed, n_prompt,"
        " n_gen, prefill_s, decode_s, expert_io_asked, expert_cache_bytes, expert_ahead,"
        " client, endpoint, queue_s)"
        " VALUES(?1, ?2, 'running', ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13,"
        " 0, 0, 0, 0, ?14, ?15, ?16, ?17, ?18, ?19)",
        -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, l->session_id);
        prof_log_bind_text(st, 2, now);
        sqlite3_bind_int(st, 3, c->threads);
        prof_log_bind_text(st, 4, c->prefetch ? c->prefetch : "off");
        prof_log_bind_text(st, 5, c->expert_io ? c->expert_io : "none");
        sqlite3_bind_int64(st, 6, c->n_ctx);
        sqlite3_bind_double(st, 7, c->temp);
        sqlite3_bind_int(st, 8, c->top_k);
        sqlite3_bind_double(st, 9, c->top_p);
        sqlite3_bind_double(st, 10, c->min_p);
        sqlite3_bind_double(st, 11, c->rep_penalty);
        sqlite3_bind_int(st, 12, c->rep_last_n);
        /* seeds are unsigned 64-bit: stored as the same bits */
        sqlite3_bind_int64(st, 13, (sqlite3_int64)c->seed);
        prof_log_bind_text(st, 14, c->expert_io_asked ? c->expert_io_asked
                                   : c->expert_io ? c->expert_io : "none");
        sqlite3_bind_int64(st, 15, (sqlite3_int64)c->expert_cache_bytes);
        if (c->expert_ahead >= 0)
            sqlite3_bind_int(st, 16, c->expert_ahead);
        else
            sqlite3_bind_null(st, 16);
        prof_log_bind_text(st, 17, c->client);
        prof_log_bind_text(st, 18, c->client ? c->endpoint : NULL);
        if (c->client)
            sqlite3_bind_double(st, 19, c->queue_s);
        else
            sqlite3_bind_null(st, 19);
        rc = step_done(st);
        sqlite3_finalize(st);
    }
    if (rc == SQLITE_OK)
        l->run_id = sqlite3_last_insert_rowid(l->db);
    l->has_xio = 0;                  /* a new run: its own figures */
    l->has_req = 0;
    if (prof_log_end(l, rc, err, errlen))
        return -1;
    /* the run's records: those of the profiler's current generation */
    prof_totals_get(p, &t);
    l->gen = t.run;
    uint64_t head = prof_ring_head(p), done = t.n_prompt + t.n_gen;
    l->cursor = head > done ? head - done : 0;
    l->last_flush = prof_now();
    if (run_id)
        *run_id = l->run_id;
    return 0;
}

int prof_log_due(const prof_log *l, const prof *p)
{
    uint64_t head = prof_ring_head(p);
    if (head <= l->cursor)
        return 0;
    return head - l->cursor >= FLUSH_TOKENS || prof_now() - l->last_flush >= FLUSH_SECONDS;
}

static int write_tokens(prof_log *l, prof *p)
{
    prof_tok buf[128];
    size_t n;
    sqlite3_stmt *st = l->ins_token;
    while ((n = prof_ring_read(p, &l->cursor, buf, 128, NULL)) > 0) {
        for (size_t i = 0; i < n; i++) {
            const prof_tok *r = &buf[i];
            if (r->run != l->gen)
                continue;
            sqlite3_bind_int64(st, 1, l->run_id);
            sqlite3_bind_int64(st, 2, (sqlite3_int64)r->idx);
            sqlite3_bind_int(st, 3, (int)r->phase);
            sqlite3_bind_double(st, 4, r->t);
            sqlite3_bind_double(st, 5, r->dt);
            for (int k = 0; k < PROF_NST; k++)
                sqlite3_bind_double(st, 6 + k, r->st[k]);
            for (int k = 0; k < PROF_NEV; k++) {
                if (r->ev[k] >= 0)
                    sqlite3_bind_int64(st, 10 + k, r->ev[k]);
                else
                    sqlite3_bind_null(st, 10 + k);
            }
            for (int k = 0; k < PROF_LOG_NBST; k++)
                sqlite3_bind_int64(st, 10 + PROF_NEV + k, (sqlite3_int64)r->bytes[k]);
            int rc = step_done(st);
            if (rc != SQLITE_OK)
                return rc;
        }
    }
    return SQLITE_OK;
}

static int write_totals(prof_log *l, prof *p, int final)
{
    prof_totals t;
    char now[32];
    sqlite3_stmt *st = l->upd_run;
    int rc;

    prof_totals_get(p, &t);
    sqlite3_bind_int64(st, 1, l->run_id);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)t.n_prompt);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)t.n_gen);
    sqlite3_bind_double(st, 4, t.prefill_s);
    sqlite3_bind_double(st, 5, t.decode_s);
    sqlite3_bind_int64(st, 6, (sqlite3_int64)t.bytes_per_token);
    bind_pos_real(st, 7, t.prefill_tok_s);
    bind_pos_real(st, 8, t.decode_tok_s);
    bind_pos_real(st, 9, t.gb_s);
    bind_pos_real(st, 10, t.bw_share);
    if (final) {
        prof_log_now_iso(now);
        prof_log_bind_text(st, 11, now);
    } else {
        sqlite3_bind_null(st, 11);
    }
    prof_log_bind_text(st, 12, final ? "done" : "running");
    for (int k = 0; k < PROF_LOG_NBST; k++)
        sqlite3_bind_int64(st, 13 + k, (sqlite3_int64)t.bytes[k]);
    bind_pos_real(st, 16, t.cp_layers ? t.cp_naive : 0);
    bind_pos_real(st, 17, t.cp_layers ? t.cp_critical : 0);
    bind_xio(st, 18, l->has_xio ? &l->xio : NULL);
    if (l->has_req) {
        prof_log_bind_text(st, 42, l->req_stop[0] ? l->req_stop : NULL);
        sqlite3_bind_int64(st, 43, (sqlite3_int64)l->req_cached);
        sqlite3_bind_int64(st, 44, (sqlite3_int64)l->req_prompt);
    } else {
        for (int k = 42; k <= 44; k++)
            sqlite3_bind_null(st, k);
    }
    if ((rc = step_done(st)) != SQLITE_OK)
        return rc;

    st = l->ins_layer;
    for (unsigned layer = 0; layer < prof_n_layers(p); layer++) {
        sqlite3_bind_int64(st, 1, l->run_id);
        sqlite3_bind_int(st, 2, (int)layer);
        for (int k = 0; k < PROF_NST; k++)
            sqlite3_bind_double(st, 3 + k, prof_layer_seconds(p, layer, k));
        sqlite3_bind_int64(st, 7, (sqlite3_int64)t.n_gen);   /* decode tokens */
        for (int k = 0; k < PROF_LOG_NBST; k++)
            sqlite3_bind_int64(st, 8 + k, (sqlite3_int64)prof_layer_streamed(p, layer, k));
        prof_layer_model lm;
        if (prof_get_layer_model(p, layer, &lm)) {
            sqlite3_bind_double(st, 11, lm.attn);
            sqlite3_bind_double(st, 12, lm.dense);
            sqlite3_bind_double(st, 13, lm.expert);
            sqlite3_bind_double(st, 14, lm.naive);
            sqlite3_bind_double(st, 15, lm.critical);
            prof_log_bind_text(st, 16, binding_name(lm.binding));
        } else {
            for (int k = 11; k <= 16; k++)
                sqlite3_bind_null(st, k);
        }
        prof_io_fig io;
        prof_io_get(p, layer, &io);
        if (io.bytes) {
            sqlite3_bind_double(st, 17, io.io_s);
            sqlite3_bind_int64(st, 18, (sqlite3_int64)io.bytes);
        } else {
            sqlite3_bind_null(st, 17);
            sqlite3_bind_null(st, 18);
        }
        if ((rc = step_done(st)) != SQLITE_OK)
            return rc;
    }

    st = l->ins_counter;
    for (int e = 0; e < PROF_NEV; e++) {
        sqlite3_bind_int64(st, 1, l->run_id);
        prof_log_bind_text(st, 2, prof_ev_name(e));
        if (t.ev[e] >= 0) {
            sqlite3_bind_int64(st, 3, t.ev[e]);
            sqlite3_bind_null(st, 4);
        } else {
            sqlite3_bind_null(st, 3);
            prof_log_bind_text(st, 4, prof_ev_reason(p, e));
        }
        if ((rc = step_done(st)) != SQLITE_OK)
            return rc;
    }
    return SQLITE_OK;
}

int prof_log_flush(prof_log *l, prof *p, int final, char *err, size_t errlen)
{
    int rc;
    if (!l->run_id) {
        snprintf(err, errlen, "%s: no run started", l->path);
        return -1;
    }
    if ((rc = prof_log_begin(l)) != SQLITE_OK)
        return prof_log_fail(l, err, errlen, NULL);
    uint64_t cursor0 = l->cursor;
    if ((rc = write_tokens(l, p)) != SQLITE_OK || (rc = write_totals(l, p, final)) != SQLITE_OK) {
        prof_log_fail(l, err, errlen, NULL);
        prof_log_rollback(l);
        l->cursor = cursor0;
        return -1;
    }
    if (prof_log_commit(l) != SQLITE_OK) {
        l->cursor = cursor0;
        return prof_log_fail(l, err, errlen, NULL);
    }
    l->last_flush = prof_now();
    return 0;
}

/* ---- cflow bench ------------------------------------------------------- */
int prof_log_bench(prof_log *l, const prof_bench_row *r, char *err, size_t errlen)
{
    sqlite3_stmt *st = NULL;
    if (!l || !r || l->session_id <= 0) {
        if (err && errlen)
            snprintf(err, errlen, "run log: no session for the bench result");
        return -1;
    }
    if (prof_log_begin(l) != SQLITE_OK)
        return prof_log_fail(l, err, errlen, NULL);
    int rc = sqlite3_prepare_v2(
        l->db,
        "INSERT INTO bench(session_id, test_time, n_threads, n_prompt, n_gen, n_depth,"
        " prefetch, expert_io, repetitions, avg_ns, stddev_ns, avg_ts, stddev_ts,"
        " bytes_per_token, gb_s, read_bw_gbs, bw_pct," XIO_SQL_COLS ", expert_ahead,"
        " interleave) VALUES(?1, ?2,"
        " ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19,"
        " ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33, ?34,"
        " ?35, ?36, ?37, ?38, ?39, ?40, ?41, ?42, ?43)",
        -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, l->session_id);
        prof_log_bind_text(st, 2, r->test_time);
        sqlite3_bind_int(st, 3, r->n_threads);
        sqlite3_bind_int64(st, 4, r->n_prompt);
        sqlite3_bind_int64(st, 5, r->n_gen);
        sqlite3_bind_int64(st, 6, r->n_depth);
        prof_log_bind_text(st, 7, r->prefetch);
        prof_log_bind_text(st, 8, r->expert_io);
        sqlite3_bind_int(st, 9, (int)r->repetitions);
        sqlite3_bind_double(st, 10, r->avg_ns);
        sqlite3_bind_double(st, 11, r->stddev_ns);
        sqlite3_bind_double(st, 12, r->avg_ts);
        sqlite3_bind_double(st, 13, r->stddev_ts);
        sqlite3_bind_int64(st, 14, (sqlite3_int64)r->bytes_per_token);
        bind_pos_real(st, 15, r->gb_s);
        bind_pos_real(st, 16, r->read_bw_gbs);
        bind_pos_real(st, 17, r->bw_pct);
        bind_xio(st, 18, r->xio);
        _Static_assert(18 + XIO_N == 42, "expert_ahead follows the expert figures");
        if (r->expert_ahead >= 0)
            sqlite3_bind_int(st, 42, r->expert_ahead);
        else
            sqlite3_bind_null(st, 42);
        if (r->interleave)
            sqlite3_bind_int(st, 43, (int)r->interleave);
        else
            sqlite3_bind_null(st, 43);
        rc = step_done(st);
        sqlite3_finalize(st);
    }
    return prof_log_end(l, rc, err, errlen);
}
