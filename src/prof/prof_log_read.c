/*
 * prof_log_read.c — reading the run log: the runs (with their session,
 * model and machine), a run's counter totals, per-layer rows and token
 * rows, and the last measured read bandwidth of a machine.
 *
 * Every reader is one query whose ?1 is a run id (or the model filter),
 * read row by row into a growing array by read_rows; the row functions
 * below turn one result row into one C struct, column by column in the
 * order of their query.  NULL columns read as 0 (the queries coalesce
 * them), except where a struct says "unavailable" (-1 counters, has_model).
 * The schema is in prof_log.c.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prof/prof.h"
#include "prof/prof_log_impl.h"

/* One query's result rows.  ?1 is id, or text when text_arg (a NULL text
 * binds NULL).  Each row goes to row(st, item, ctx): item is the next slot
 * of an array of size-byte items grown from cap0 by doubling, or NULL when
 * size is 0 (row keeps what it reads in ctx). */
typedef struct log_query {
    const char *sql;
    int64_t     id;
    int         text_arg;
    const char *text;
    size_t      size, cap0;
    void      (*row)(sqlite3_stmt *st, void *item, void *ctx);
    void       *ctx;
} log_query;

/* Run q; *out gets the malloc'd array (NULL when empty or size is 0), *n
 * the row count.  0, or -1 with one line in err. */
static int read_rows(prof_log *l, const log_query *q, void **out, size_t *n, char *err,
                     size_t errlen)
{
    sqlite3_stmt *st;
    unsigned char *v = NULL;
    size_t cnt = 0, cap = 0;

    if (out)
        *out = NULL;
    *n = 0;
    int rc = sqlite3_prepare_v2(l->db, q->sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return prof_log_fail(l, err, errlen, NULL);
    if (q->text_arg)
        prof_log_bind_text(st, 1, q->text);
    else
        sqlite3_bind_int64(st, 1, q->id);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (q->size && cnt == cap) {
            size_t nc = cap ? cap * 2 : q->cap0;
            unsigned char *nv = realloc(v, nc * q->size);
            if (!nv) {
                rc = SQLITE_NOMEM;
                break;
            }
            v = nv;
            cap = nc;
        }
        q->row(st, q->size ? v + cnt * q->size : NULL, q->ctx);
        cnt++;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        free(v);
        if (rc == SQLITE_NOMEM) {
            snprintf(err, errlen, "%s: out of memory", l->path);
            return -1;
        }
        return prof_log_fail(l, err, errlen, NULL);
    }
    if (out)
        *out = v;
    else
        free(v);
    *n = cnt;
    return 0;
}

static int binding_from_name(const char *s)
{
    return !s ? PROF_ST_ATTN : !strcmp(s, "dense") ? PROF_ST_FFN
                             : !strcmp(s, "experts") ? PROF_ST_EXPERTS : PROF_ST_ATTN;
}

/* bytes of one stream per decode token: the per-layer rows' sums over their
 * n_tokens (prof_run_row.tok_bytes) */
#define TOK_BYTES(col)                                                                \
    " (SELECT coalesce(sum(CAST(ls." col " AS REAL) / ls.n_tokens), 0)"              \
    " FROM layer_stat ls WHERE ls.run_id = r.id AND ls.n_tokens > 0)"
#define RUN_COLS                                                                      \
    "SELECT r.id, r.session_id, r.started, coalesce(r.ended, ''), r.status,"          \
    " coalesce(s.program, ''), coalesce(s.model_named, m.path), m.hash,"              \
    " coalesce(m.arch, ''),"                                                          \
    " coalesce(m.quant, ''), m.size, coalesce(m.n_layers, 0), ma.hostname,"           \
    " ma.cpu_model, ma.isa, ma.cores, coalesce(ma.read_bw_gbs, 0),"                   \
    " coalesce(r.threads, 0), r.prefetch, r.expert_io, coalesce(r.n_ctx, 0),"         \
    " coalesce(r.temp, 0), coalesce(r.top_p, 0), coalesce(r.min_p, 0),"               \
    " coalesce(r.rep_penalty, 0), coalesce(r.top_k, 0), coalesce(r.rep_last_n, 0),"   \
    " coalesce(r.seed, 0), coalesce(r.n_prompt, 0), coalesce(r.n_gen, 0),"            \
    " coalesce(r.bytes_per_token, 0), coalesce(r.prefill_s, 0),"                      \
    " coalesce(r.decode_s, 0), coalesce(r.prefill_tok_s, 0),"                         \
    " coalesce(r.decode_tok_s, 0), coalesce(r.gb_s, 0), coalesce(r.bw_share, 0),"     \
    " s.pid, coalesce(r.attn_bytes, 0), coalesce(r.ffn_bytes, 0),"                   \
    " coalesce(r.experts_bytes, 0), coalesce(r.cp_naive_bytes, 0),"                   \
    " coalesce(r.cp_critical_bytes, 0),"                                              \
    TOK_BYTES("attn_bytes") "," TOK_BYTES("ffn_bytes") "," TOK_BYTES("experts_bytes")  \
    ", m.path, coalesce(r.expert_io_asked, ''), coalesce(r.expert_cache_bytes, 0),"   \
    " r.xio_hits, r.xio_misses, r.xio_tokens, r.xio_bytes, r.xio_s, r.xio_depth_s,"   \
    " r.xio_pred, r.xio_pred_hits, r.disk_gbs, r.xio_hit_rate, r.xio_bytes_tok,"      \
    " r.xio_gb_s, r.xio_depth, r.xio_limit_tok_s, r.xio_reached, r.xio_pred_acc,"     \
    " coalesce(r.xio_stall_s, 0), coalesce(r.xio_pred_reads, 0),"                     \
    " coalesce(r.xio_pred_wasted, 0), coalesce(r.xio_pred_bytes, 0), r.xio_wasted_tok," \
    " r.xio_compute_s_tok, r.xio_ov_limit_tok_s, r.xio_ov_reached,"                   \
    " coalesce(r.expert_ahead, -1), r.client, r.endpoint, r.stop, r.queue_s,"         \
    " r.n_cached, r.n_prompt_all"                                                     \
    " FROM run r JOIN session s ON s.id = r.session_id"                               \
    " JOIN model m ON m.id = s.model_id JOIN machine ma ON ma.id = s.machine_id"

static void col_str(sqlite3_stmt *st, int i, char *dst, size_t n)
{
    const unsigned char *s = sqlite3_column_text(st, i);
    snprintf(dst, n, "%s", s ? (const char *)s : "");
}

/* The columns after RUN_COLS' first ones from i on: the file that ran,
 * the mode asked for, the cache, the expert figures (NULL: none) and the
 * look-ahead setting (-1: not recorded).  Returns the next column. */
static int read_xio(sqlite3_stmt *st, int i, prof_run_row *r)
{
    col_str(st, i++, r->model_file, sizeof r->model_file);
    col_str(st, i++, r->expert_io_asked, sizeof r->expert_io_asked);
    r->expert_cache_bytes = (uint64_t)sqlite3_column_int64(st, i++);
    prof_xio_fig *f = &r->xio;
    r->has_xio = sqlite3_column_type(st, i) != SQLITE_NULL;
    uint64_t *n[4] = { &f->hits, &f->misses, &f->tokens, &f->bytes };
    for (int k = 0; k < 4; k++)
        *n[k] = (uint64_t)sqlite3_column_int64(st, i++);
    f->io_s = sqlite3_column_double(st, i++);
    f->depth_s = sqlite3_column_double(st, i++);
    f->pred = (uint64_t)sqlite3_column_int64(st, i++);
    f->pred_hits = (uint64_t)sqlite3_column_int64(st, i++);
    f->disk_gbs = sqlite3_column_double(st, i++);
    double *d[7] = { &f->hit_rate, &f->bytes_tok, &f->gb_s, &f->depth, &f->limit_tok_s,
                     &f->reached, &f->pred_acc };
    for (int k = 0; k < 7; k++, i++)
        *d[k] = sqlite3_column_type(st, i) == SQLITE_NULL ? -1.0 : sqlite3_column_double(st, i);
    f->stall_s = sqlite3_column_double(st, i++);
    uint64_t *p[3] = { &f->pred_reads, &f->pred_wasted, &f->pred_bytes };
    for (int k = 0; k < 3; k++)
        *p[k] = (uint64_t)sqlite3_column_int64(st, i++);
    double *d8[4] = { &f->wasted_tok, &f->compute_s_tok, &f->ov_limit_tok_s, &f->ov_reached };
    for (int k = 0; k < 4; k++, i++)
        *d8[k] = sqlite3_column_type(st, i) == SQLITE_NULL ? -1.0 : sqlite3_column_double(st, i);
    f->bound_diskbw = f->disk_gbs > 0;
    f->bound_gbs = f->bound_diskbw ? f->disk_gbs : f->gb_s;
    r->expert_ahead = sqlite3_column_int(st, i++);
    return i;
}

/* A request to `cflow serve` (schema 11): "" and -1 where NULL. */
static void read_request(sqlite3_stmt *st, int i, prof_run_row *r)
{
    col_str(st, i++, r->client, sizeof r->client);
    col_str(st, i++, r->endpoint, sizeof r->endpoint);
    col_str(st, i++, r->stop, sizeof r->stop);
    r->queue_s = sqlite3_column_type(st, i) == SQLITE_NULL ? -1.0 : sqlite3_column_double(st, i);
    i++;
    int64_t *n[2] = { &r->n_cached, &r->n_prompt_all };
    for (int k = 0; k < 2; k++, i++)
        *n[k] = sqlite3_column_type(st, i) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, i);
}

static void read_row(sqlite3_stmt *st, void *item, void *ctx)
{
    prof_run_row *r = item;
    int i = 0;
    (void)ctx;
    memset(r, 0, sizeof *r);
    r->id = sqlite3_column_int64(st, i++);
    r->session_id = sqlite3_column_int64(st, i++);
    col_str(st, i++, r->started, sizeof r->started);
    col_str(st, i++, r->ended, sizeof r->ended);
    col_str(st, i++, r->status, sizeof r->status);
    col_str(st, i++, r->program, sizeof r->program);
    col_str(st, i++, r->model, sizeof r->model);
    col_str(st, i++, r->model_hash, sizeof r->model_hash);
    col_str(st, i++, r->arch, sizeof r->arch);
    col_str(st, i++, r->quant, sizeof r->quant);
    r->model_size = (uint64_t)sqlite3_column_int64(st, i++);
    r->n_layers = (uint32_t)sqlite3_column_int64(st, i++);
    col_str(st, i++, r->hostname, sizeof r->hostname);
    col_str(st, i++, r->cpu_model, sizeof r->cpu_model);
    col_str(st, i++, r->isa, sizeof r->isa);
    r->cores = sqlite3_column_int(st, i++);
    r->read_bw_gbs = sqlite3_column_double(st, i++);
    r->threads = sqlite3_column_int(st, i++);
    col_str(st, i++, r->prefetch, sizeof r->prefetch);
    col_str(st, i++, r->expert_io, sizeof r->expert_io);
    r->n_ctx = (uint32_t)sqlite3_column_int64(st, i++);
    r->temp = sqlite3_column_double(st, i++);
    r->top_p = sqlite3_column_double(st, i++);
    r->min_p = sqlite3_column_double(st, i++);
    r->rep_penalty = sqlite3_column_double(st, i++);
    r->top_k = sqlite3_column_int(st, i++);
    r->rep_last_n = sqlite3_column_int(st, i++);
    r->seed = (uint64_t)sqlite3_column_int64(st, i++);
    r->n_prompt = (uint64_t)sqlite3_column_int64(st, i++);
    r->n_gen = (uint64_t)sqlite3_column_int64(st, i++);
    r->bytes_per_token = (uint64_t)sqlite3_column_int64(st, i++);
    r->prefill_s = sqlite3_column_double(st, i++);
    r->decode_s = sqlite3_column_double(st, i++);
    r->prefill_tok_s = sqlite3_column_double(st, i++);
    r->decode_tok_s = sqlite3_column_double(st, i++);
    r->gb_s = sqlite3_column_double(st, i++);
    r->bw_share = sqlite3_column_double(st, i++);
    /* a run still "running" whose process is gone on this host was cut
     * short (killed, crashed): say so */
    for (int k = 0; k < PROF_LOG_NBST; k++)
        r->bytes[k] = (uint64_t)sqlite3_column_int64(st, i + 1 + k);
    r->cp_naive = sqlite3_column_double(st, i + 1 + PROF_LOG_NBST);
    r->cp_critical = sqlite3_column_double(st, i + 2 + PROF_LOG_NBST);
    for (int k = 0; k < 3; k++)
        r->tok_bytes[k] = sqlite3_column_double(st, i + 3 + PROF_LOG_NBST + k);
    read_request(st, read_xio(st, i + 6 + PROF_LOG_NBST, r), r);
    if (!strcmp(r->status, "running") && sqlite3_column_type(st, i) != SQLITE_NULL) {
        char host[256] = "";
        long long pid = sqlite3_column_int64(st, i);
        gethostname(host, sizeof host - 1);
        if (!strcmp(host, r->hostname) && pid > 0 && pid <= 0x7fffffff &&
            kill((pid_t)pid, 0) != 0 && errno == ESRCH)
            snprintf(r->status, sizeof r->status, "interrupted");
    }
    for (int e = 0; e < PROF_NEV; e++)
        r->ev[e] = -1;
}


static void counter_row(sqlite3_stmt *st, void *item, void *ctx)
{
    prof_run_row *r = ctx;
    const unsigned char *name = sqlite3_column_text(st, 0);
    int e = name ? prof_ev_from_name((const char *)name) : -1;
    (void)item;
    if (e < 0)
        return;
    if (sqlite3_column_type(st, 1) != SQLITE_NULL)
        r->ev[e] = sqlite3_column_int64(st, 1);
    col_str(st, 2, r->ev_reason[e], sizeof r->ev_reason[e]);
}

static int read_counters(prof_log *l, prof_run_row *r, char *err, size_t errlen)
{
    const log_query q = {
        .sql = "SELECT event, value, coalesce(reason, '') FROM counter WHERE run_id=?1",
        .id = r->id, .row = counter_row, .ctx = r,
    };
    size_t n;
    return read_rows(l, &q, NULL, &n, err, errlen);
}

int prof_log_list(prof_log *l, const char *model_filter, prof_run_row **rows, size_t *n,
                  char *err, size_t errlen)
{
    const log_query q = {
        .sql = RUN_COLS " WHERE ?1 IS NULL OR instr(m.path, ?1) > 0 OR m.hash = ?1"
                        " OR instr(coalesce(s.model_named, ''), ?1) > 0"
                        " ORDER BY r.id",
        .text_arg = 1, .text = model_filter,
        .size = sizeof **rows, .cap0 = 16, .row = read_row,
    };
    void *v;
    if (read_rows(l, &q, &v, n, err, errlen))
        return -1;
    *rows = v;
    for (size_t i = 0; i < *n; i++)
        if (read_counters(l, &(*rows)[i], err, errlen)) {
            free(*rows);
            *rows = NULL;
            *n = 0;
            return -1;
        }
    return 0;
}

int prof_log_get(prof_log *l, int64_t id, prof_run_row *row, char *err, size_t errlen)
{
    const log_query q = {
        .sql = RUN_COLS " WHERE r.id = ?1", .id = id,
        .size = sizeof *row, .cap0 = 1, .row = read_row,
    };
    void *v;
    size_t n;
    if (read_rows(l, &q, &v, &n, err, errlen))
        return -1;
    if (n == 0)
        return 1;
    *row = *(prof_run_row *)v;
    free(v);
    return read_counters(l, row, err, errlen);
}

static void layer_row(sqlite3_stmt *st, void *item, void *ctx)
{
    prof_layer_row *r = item;
    (void)ctx;
    memset(r, 0, sizeof *r);
    r->layer = (unsigned)sqlite3_column_int(st, 0);
    for (int k = 0; k < PROF_NST; k++)
        r->sec[k] = sqlite3_column_double(st, 1 + k);
    r->n_tokens = (uint64_t)sqlite3_column_int64(st, 5);
    for (int k = 0; k < PROF_LOG_NBST; k++)
        r->bytes[k] = (uint64_t)sqlite3_column_int64(st, 6 + k);
    r->has_model = sqlite3_column_type(st, 13) != SQLITE_NULL;
    if (r->has_model) {
        r->model.attn = sqlite3_column_double(st, 9);
        r->model.dense = sqlite3_column_double(st, 10);
        r->model.expert = sqlite3_column_double(st, 11);
        r->model.naive = sqlite3_column_double(st, 12);
        r->model.critical = sqlite3_column_double(st, 13);
        r->model.binding = binding_from_name((const char *)sqlite3_column_text(st, 14));
    }
    r->io_s = sqlite3_column_double(st, 15);
    r->io_bytes = (uint64_t)sqlite3_column_int64(st, 16);
}

int prof_log_layer_rows(prof_log *l, int64_t id, prof_layer_row **rows, unsigned *n,
                        char *err, size_t errlen)
{
    const log_query q = {
        .sql = "SELECT layer, coalesce(attn_s, 0), coalesce(ffn_s, 0),"
               " coalesce(experts_s, 0), coalesce(io_wait_s, 0),"
               " coalesce(n_tokens, 0), coalesce(attn_bytes, 0),"
               " coalesce(ffn_bytes, 0), coalesce(experts_bytes, 0),"
               " cp_attn_bytes, cp_dense_bytes, cp_expert_bytes,"
               " cp_naive_bytes, cp_critical_bytes, cp_binding,"
               " coalesce(io_s, 0), coalesce(io_bytes, 0)"
               " FROM layer_stat WHERE run_id=?1 AND layer >= 0 AND"
               " layer < 1000000 ORDER BY layer",
        .id = id, .size = sizeof **rows, .cap0 = 64, .row = layer_row,
    };
    void *v;
    size_t cnt;
    *n = 0;
    if (read_rows(l, &q, &v, &cnt, err, errlen))
        return -1;
    *rows = v;
    *n = (unsigned)cnt;    /* layer < 1000000: one row per layer */
    return 0;
}

int prof_log_layers(prof_log *l, int64_t id, double **sec, unsigned *n_layers,
                    uint64_t *n_tok, char *err, size_t errlen)
{
    prof_layer_row *rows;
    unsigned nr;

    *sec = NULL;
    *n_layers = 0;
    *n_tok = 0;
    if (prof_log_layer_rows(l, id, &rows, &nr, err, errlen))
        return -1;
    /* [layer][PROF_NST] seconds, layers the log lacks left at 0; the rows
     * come in layer order, so the last one is the highest */
    unsigned n = nr ? rows[nr - 1].layer + 1 : 0;
    double *v = n ? calloc((size_t)n * PROF_NST, sizeof *v) : NULL;
    if (n && !v) {
        free(rows);
        snprintf(err, errlen, "%s: out of memory", l->path);
        return -1;
    }
    for (unsigned i = 0; i < nr; i++) {
        memcpy(v + (size_t)rows[i].layer * PROF_NST, rows[i].sec, sizeof rows[i].sec);
        *n_tok = rows[i].n_tokens;
    }
    free(rows);
    *sec = v;
    *n_layers = n;
    return 0;
}

static void token_row(sqlite3_stmt *st, void *item, void *ctx)
{
    prof_tok *r = item;
    (void)ctx;
    memset(r, 0, sizeof *r);
    r->idx = (uint64_t)sqlite3_column_int64(st, 0);
    r->phase = (uint64_t)sqlite3_column_int(st, 1);
    r->t = sqlite3_column_double(st, 2);
    r->dt = sqlite3_column_double(st, 3);
    for (int k = 0; k < PROF_NST; k++)
        r->st[k] = sqlite3_column_double(st, 4 + k);
    for (int k = 0; k < PROF_NEV; k++)
        r->ev[k] = sqlite3_column_type(st, 8 + k) == SQLITE_NULL
                       ? -1
                       : sqlite3_column_int64(st, 8 + k);
    for (int k = 0; k < PROF_LOG_NBST; k++)
        r->bytes[k] = (uint64_t)sqlite3_column_int64(st, 8 + PROF_NEV + k);
}

int prof_log_tokens(prof_log *l, int64_t id, prof_tok **toks, size_t *n, char *err,
                    size_t errlen)
{
    const log_query q = {
        .sql = "SELECT idx, phase, t, dt, attn_s, ffn_s, experts_s, io_wait_s, c_cycles,"
               " c_instructions, c_l1d_read_misses, c_llc_read_misses, c_dtlb_read_misses,"
               " c_task_clock, c_page_faults, c_major_faults, c_minor_faults,"
               " c_context_switches, c_cpu_migrations, coalesce(attn_bytes, 0),"
               " coalesce(ffn_bytes, 0), coalesce(experts_bytes, 0) FROM token"
               " WHERE run_id=?1 ORDER BY idx",
        .id = id, .size = sizeof **toks, .cap0 = 256, .row = token_row,
    };
    void *v;
    *toks = NULL;
    if (read_rows(l, &q, &v, n, err, errlen))
        return -1;
    *toks = v;
    return 0;
}

double prof_log_machine_bw(prof_log *l, const prof_machine *m)
{
    sqlite3_stmt *st;
    double bw = 0.0;
    if (sqlite3_prepare_v2(l->db,
                           "SELECT read_bw_gbs FROM machine WHERE hostname=?1 AND"
                           " cpu_model=?2 AND cores=?3 AND read_bw_gbs > 0"
                           " ORDER BY id DESC LIMIT 1",
                           -1, &st, NULL) != SQLITE_OK)
        return 0.0;
    prof_log_bind_text(st, 1, m->hostname);
    prof_log_bind_text(st, 2, m->cpu_model);
    sqlite3_bind_int(st, 3, m->cores);
    if (sqlite3_step(st) == SQLITE_ROW)
        bw = sqlite3_column_double(st, 0);
    sqlite3_finalize(st);
    return bw;
}

