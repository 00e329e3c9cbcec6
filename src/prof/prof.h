/*
 * prof.h — the public face of src/prof: measurements and the run log.
 *
 * Two halves:
 *
 *   prof      the profiler of one decoding session.  The engine calls its
 *             probes (prof_token_begin/end around each token, prof_layer_mark
 *             between the parts of each layer); worker threads attach their
 *             own counters (prof_thread_attach).  Every finished token becomes
 *             one prof_tok record in a ring buffer, which the front ends (the
 *             logger, a TUI) read at their own pace; per-run totals and
 *             per-layer sums are kept beside it.  Derived figures (tok/s,
 *             GB/s, share of the machine's read bandwidth) are computed once,
 *             here, in prof_totals_get, so every front end shows the same.
 *
 *   prof_log  the run log: an SQLite database of machines, models, sessions,
 *             runs, token timings, per-layer statistics and counter values
 *             (prof_log.c holds the schema and its essay).
 *
 * src/prof knows nothing of the engine's or the format's types: it stores
 * numbers keyed by layer, stream (what a layer spends time on) and event.
 * The engine includes this header; this header includes nothing of theirs.
 *
 * Nothing here prints or exits.  Failing calls return a negative value and
 * write one line (no newline) into the caller's err[errlen].
 *
 * Counters.  Hardware events are named through libpfm4
 * (pfm_get_os_event_encoding, generic "perf" PMU names, user level only)
 * and opened with perf_event_open, one group per thread; software events
 * (task clock, page faults, context switches, migrations) are opened
 * directly and work in virtual machines too.  An event that cannot be
 * opened is "unavailable" with a reason naming the failing call and its
 * errno text, followed by "perf_event_paranoid=N" (the kernel's setting),
 * or "built without libpfm4" when HAVE_LIBPFM was not defined at build
 * time.  Unavailable events read as -1; the rest keep working.
 *
 * "The report" (with its section numbers) is the Pipeline-Native
 * Transformers report.
 */
#ifndef CFLOW_PROF_H
#define CFLOW_PROF_H

#include <stddef.h>
#include <stdint.h>

/* ======================================================================= */
/* Clock                                                                    */
/* ======================================================================= */
/* Monotonic clock in seconds. */
double prof_now(void);

/* ======================================================================= */
/* Events and streams                                                       */
/* ======================================================================= */
enum prof_ev {
    /* hardware (libpfm4 names; user level) */
    PROF_EV_CYCLES = 0,
    PROF_EV_INSTRUCTIONS,
    PROF_EV_L1D_READ_MISS,
    PROF_EV_LLC_READ_MISS,
    PROF_EV_DTLB_READ_MISS,
    /* software */
    PROF_EV_TASK_CLOCK,      /* nanoseconds of CPU time */
    PROF_EV_PAGE_FAULTS,
    PROF_EV_MAJOR_FAULTS,    /* faults that waited for I/O (mmap page-ins) */
    PROF_EV_MINOR_FAULTS,
    PROF_EV_CTX_SWITCHES,
    PROF_EV_CPU_MIGRATIONS,
    PROF_NEV
};
#define PROF_EV_FIRST_SW PROF_EV_TASK_CLOCK

/* Stable names ("cycles", "instructions", "l1d-read-misses",
 * "llc-read-misses", "dtlb-read-misses", "task-clock", "page-faults",
 * "major-faults", "minor-faults", "context-switches", "cpu-migrations"):
 * the run log and its export use them. */
const char *prof_ev_name(int ev);
/* -1 if unknown. */
int         prof_ev_from_name(const char *name);
int         prof_ev_is_hw(int ev);

/* What a layer spends its time on. */
enum prof_stream {
    PROF_ST_ATTN = 0,   /* norm, QKV, attention, output projection */
    PROF_ST_FFN,        /* dense feed-forward */
    PROF_ST_EXPERTS,    /* routed experts: compute */
    PROF_ST_IO_WAIT,    /* waiting for expert tiles to arrive */
    PROF_NST
};
/* "attention", "ffn", "experts", "io-wait" */
const char *prof_stream_name(int st);

enum prof_phase { PROF_PREFILL = 0, PROF_DECODE = 1 };

/* ======================================================================= */
/* The profiler                                                             */
/* ======================================================================= */
typedef struct prof prof;

/* What to measure beyond token timings (always on while a profiler is
 * attached: they cost two clock reads per token). */
enum {
    PROF_LAYERS   = 1u << 0,  /* per-layer timers */
    PROF_COUNTERS = 1u << 1,  /* perf_event counters per worker thread */
    PROF_ALL      = 3u
};

/* A new profiler for a model of n_layers layers.  With PROF_COUNTERS the
 * events are probed on the calling thread (availability and reasons are
 * known from then on).  Returns 0 or -1 (out of memory). */
int      prof_new(prof **out, unsigned what, unsigned n_layers, char *err,
                  size_t errlen);
void     prof_free(prof *p);
unsigned prof_what(const prof *p);
unsigned prof_n_layers(const prof *p);

/* Counter availability (after prof_new).  The reason is "" for an
 * available event, else e.g. "perf_event_open: No such file or directory;
 * perf_event_paranoid=2".  Without PROF_COUNTERS every event is
 * unavailable with reason "counters off". */
int         prof_ev_available(const prof *p, int ev);
const char *prof_ev_reason(const prof *p, int ev);

/* Worker threads.  prof_threads_reset closes every thread's counters and
 * makes room for n_threads slots; then each thread calls
 * prof_thread_attach(p, slot) on itself (slots differ; the calls may run
 * concurrently).  Counters count the attached threads only.  Both are
 * no-ops without PROF_COUNTERS. */
int  prof_threads_reset(prof *p, int n_threads);
void prof_thread_attach(prof *p, int slot);
int  prof_threads(const prof *p);   /* slots attached so far */

/* Probes.  Called by the decoding thread only.
 * prof_token_begin/end bracket one token (prefill or decode); the end
 * writes the token's prof_tok record into the ring and adds it to the run.
 * prof_layer_mark adds now - since to (layer, stream) and to the current
 * token, and returns now (the start of the next part). */
void   prof_token_begin(prof *p);
void   prof_token_end(prof *p, enum prof_phase phase);
double prof_layer_mark(prof *p, unsigned layer, enum prof_stream st,
                       double since);
/* Weight bytes the current token streamed in (layer, stream): the lengths
 * of the tile streams the engine actually read (for experts, only the
 * experts routed to).  Adds to the token's per-stream bytes and to the
 * run's per-layer sums.  Recorded whenever a profiler is attached (an
 * addition; no clock read). */
void   prof_layer_bytes(prof *p, unsigned layer, enum prof_stream st,
                        uint64_t bytes);

/* The analytic critical-path model of one layer (report eq. 4.23), handed
 * over once when the profiler is attached (the engine computes it; src/prof
 * only keeps the numbers).  Bytes per token: attn, dense, expert are the
 * three streams (expert: the top-k experts a token reads); naive is
 * max(attn, dense, expert), critical max(attn, dense/(dd+1),
 * expert/(de+1)); binding the stream that sets critical (PROF_ST_ATTN,
 * PROF_ST_FFN for the dense FFN, PROF_ST_EXPERTS).  A layer applied
 * several times (FixedPoint) carries the sum over its applications.  The
 * model survives prof_run_begin. */
typedef struct prof_layer_model {
    double attn, dense, expert;
    double naive, critical;
    int    binding;             /* enum prof_stream */
} prof_layer_model;
void prof_set_layer_model(prof *p, unsigned layer, const prof_layer_model *m);
/* 1 and *m when layer has a model, else 0. */
int  prof_get_layer_model(const prof *p, unsigned layer, prof_layer_model *m);

/* One finished token.  Every field is 8 bytes (the ring copies words). */
typedef struct prof_tok {
    uint64_t run;                /* prof_run_begin generation */
    uint64_t idx;                /* index within the run, from 0 */
    uint64_t phase;              /* enum prof_phase */
    double   t;                  /* start, seconds since the run began */
    double   dt;                 /* seconds */
    double   st[PROF_NST];       /* seconds per stream, summed over layers */
    int64_t  ev[PROF_NEV];       /* counter deltas summed over threads; -1 n/a */
    uint64_t bytes[PROF_NST];    /* weight bytes streamed (prof_layer_bytes) */
} prof_tok;

/* Ring readers.  A reader keeps its own cursor (start it at
 * prof_ring_head).  Copies at most max records written since *cursor into
 * out and advances *cursor; records overwritten before they could be read
 * are skipped and counted in *lost (may be NULL).  Safe from any thread
 * while the decoding thread writes. */
#define PROF_RING_CAP 4096
uint64_t prof_ring_head(const prof *p);
size_t   prof_ring_read(const prof *p, uint64_t *cursor, prof_tok *out,
                        size_t max, uint64_t *lost);

/* Runs.  A run is a stretch of decoding under one configuration; the
 * front end starts a new one when a setting changes.  bytes_per_token is
 * the weight bytes one decode step streams; read_bw_gbs the machine's
 * measured read bandwidth in GB/s (0: unknown).  Returns the generation
 * number stored in the run's prof_tok records. */
uint64_t prof_run_begin(prof *p, uint64_t bytes_per_token, double read_bw_gbs);

typedef struct prof_totals {
    uint64_t run;
    uint64_t n_prompt, n_gen;          /* tokens bracketed per phase */
    double   prefill_s, decode_s;      /* summed token times */
    double   prefill_tok_s, decode_tok_s;  /* 0 when no time */
    double   gb_s;                     /* decode weight bytes per second / 1e9 */
    double   bw_share;                 /* gb_s / read_bw_gbs, 0 when unknown */
    double   read_bw_gbs;
    uint64_t bytes_per_token;
    double   st[PROF_NST];             /* seconds per stream, all layers */
    int64_t  ev[PROF_NEV];             /* counter totals; -1 unavailable */
    /* weight bytes streamed per stream, summed over the run's tokens, and
     * over its decode tokens only (what the critical path predicts per
     * token: a batched prefill streams the weights once for many tokens) */
    uint64_t bytes[PROF_NST];
    uint64_t dec_bytes[PROF_NST];
    double   dec_st[PROF_NST];             /* st over the decode tokens */
    /* the critical-path model summed over layers (bytes per token; 0 when
     * none was set), and per stream the number of layers it binds */
    double   cp_naive, cp_critical;
    unsigned cp_layers, cp_binding[PROF_NST];
} prof_totals;
/* The current run's totals (decoding thread). */
void   prof_totals_get(const prof *p, prof_totals *t);
/* Seconds layer spent in stream st during the current run's decode tokens
 * (any thread; a token's figures arrive at its end). */
double prof_layer_seconds(const prof *p, unsigned layer, enum prof_stream st);
/* Weight bytes layer streamed in st during the current run's decode tokens
 * (any thread, as prof_layer_seconds). */
uint64_t prof_layer_streamed(const prof *p, unsigned layer, enum prof_stream st);

/* One line, no newline, the events in enum order:
 *   "task-clock 12.3 ms, page-faults 120, major-faults 0, minor-faults 120,
 *    context-switches 4, cpu-migrations 0; unavailable: cycles,
 *    instructions, ... (perf_event_open: No such file or directory;
 *    perf_event_paranoid=2)"
 * ev holds values (-1: unavailable); reason[ev] (may be NULL, as may its
 * entries) says why; events sharing a reason are listed together before
 * it.  With cycles and instructions both present, "(IPC x.xx)" follows
 * instructions.  Returns the length it wanted (like snprintf). */
size_t prof_counters_line(const int64_t ev[PROF_NEV],
                          const char *const reason[PROF_NEV], char *buf, size_t n);

/* ======================================================================= */
/* Machine and model facts                                                  */
/* ======================================================================= */
/* "model name" of /proc/cpuinfo (else the uname machine), into buf. */
void   prof_cpu_model(char *buf, size_t n);
int    prof_cpu_cores(void);
/* Read bandwidth of the machine in GB/s (1e9 bytes/s), as `cflow bench
 * membw` reports it: n_threads threads, each pinned to its own CPU of the
 * process's affinity set (round robin past them), sum their slices of a
 * buffer of four times the last-level cache (512 MiB to 2 GiB, at most a
 * quarter of the available memory); one untimed pass, then passes timed
 * passes (1 .. PROF_MEMBW_MAXPASS).  The median with the min and max. */
#define PROF_MEMBW_MAXPASS 64
typedef struct prof_membw {
    int      threads;
    unsigned passes;
    uint64_t bytes;                          /* read per pass */
    double   median_gbs, min_gbs, max_gbs;
} prof_membw;
/* 0, or -1 (out of memory, no threads): *out zeroed. */
int    prof_measure_membw(int n_threads, unsigned passes, prof_membw *out);
/* prof_measure_membw's median of 5 passes; 0 on failure. */
double prof_measure_read_bw(int n_threads);
/* A cheap content hash of a file, as 16 hex digits into hex[17]:
 * 64-bit FNV-1a over the file size (8 bytes, little endian), the first
 * MiB (a .cflow header and layer table; a GGUF header), 64 blocks of 4 KiB
 * evenly spaced through the file, and the last 64 KiB (the metadata and
 * vocabulary).  About 1.6 MiB read whatever the file's size.  Also
 * returns the size.  0 or -1 (with err). */
int    prof_file_hash(const char *path, char hex[17], uint64_t *size, char *err,
                      size_t errlen);

/* ======================================================================= */
/* Expert streaming figures                                                 */
/* ======================================================================= */
/* The figures of expert streaming (issue 17 item 7), from what the engine
 * counted over the same tokens (the inputs) to what every front end shows
 * and the run log keeps (the derived half, prof_xio_derive).  A figure the
 * inputs do not give is -1 ("n/a"). */
typedef struct prof_xio_fig {
    /* inputs */
    uint64_t hits, misses;      /* routed experts found in the RAM cache / read */
    uint64_t tokens;            /* forward passes that routed experts */
    uint64_t bytes;             /* bytes read from storage */
    double   io_s;              /* seconds the reader was busy (xio_s) */
    double   depth_s;           /* reads in flight integrated over time; 0 unknown */
    uint64_t pred, pred_hits;   /* look-ahead predictions, and the right ones */
    double   tok_s;             /* decode tokens per second reached; 0 unknown */
    double   disk_gbs;          /* storage bandwidth (cflow bench diskbw); 0 unknown */
    double   stall_s;           /* seconds decode waited for reads (schema 8) */
    uint64_t pred_reads;        /* look-ahead guesses read from storage (schema 8) */
    uint64_t pred_wasted;       /* of those, guesses the layer did not route */
    uint64_t pred_bytes;        /* bytes the guesses read (part of bytes) */
    /* derived */
    double   hit_rate;          /* hits / (hits + misses) */
    double   bytes_tok;         /* bytes / tokens: missed expert bytes per token */
    double   gb_s;              /* bytes / io_s / 1e9: storage GB/s while busy */
    double   depth;             /* depth_s / io_s: mean reads in flight */
    double   bound_gbs;         /* the bandwidth the limit assumes: disk_gbs, else gb_s */
    int      bound_diskbw;      /* 1 when bound_gbs is disk_gbs */
    double   limit_tok_s;       /* bound_gbs * 1e9 / bytes_tok: the storage-bound tok/s */
    double   reached;           /* tok_s / limit_tok_s */
    double   pred_acc;          /* pred_hits / pred */
    /* schema 8: where a token's time goes.  wasted_tok: bytes a token
     * read for guesses it did not route (pred_bytes * pred_wasted /
     * pred_reads / tokens).  compute_s_tok: seconds a token spent not
     * waiting for a read (1 / tok_s - stall_s / tokens).  ov_limit_tok_s:
     * the bound with reads fully overlapped with compute, 1 / max(the
     * token's read time at bound_gbs, compute_s_tok); ov_reached: tok_s
     * over it.  A decode that hides every read behind compute reaches
     * 100% however slow its compute is, so reached and ov_reached
     * together say whether storage or compute or their overlap binds. */
    double   wasted_tok;
    double   compute_s_tok;
    double   ov_limit_tok_s;
    double   ov_reached;
} prof_xio_fig;
/* Fill f's derived half from its inputs. */
void prof_xio_derive(prof_xio_fig *f);

/* ======================================================================= */
/* The run log (SQLite)                                                     */
/* ======================================================================= */
typedef struct prof_log prof_log;

#define PROF_LOG_SCHEMA 11  /* PRAGMA user_version of a current database */

enum { PROF_LOG_CREATE = 1 };  /* create the file (and its folder) if absent */

/* Where the log lives: $CFLOW_DB when set and not empty, else
 * $XDG_DATA_HOME/cflow/runs.db, else $HOME/.local/share/cflow/runs.db.
 * Returns 0, or -1 when no path can be formed (no HOME). */
int  prof_log_default_path(char *buf, size_t n);

/* Open (and with PROF_LOG_CREATE create) the log, check it, switch it to
 * WAL, and migrate an older schema to PROF_LOG_SCHEMA.  A file that is not
 * a database, a database newer than this program or of an unknown
 * (negative) version, one with tables of its own and no version, one that
 * lacks a table or column of its version, a read-only or locked file: a
 * negative return, one line in err, and the file left byte for byte as it
 * was (the check only reads). */
int  prof_log_open(prof_log **out, const char *path, unsigned flags, char *err,
                   size_t errlen);
void prof_log_close(prof_log *l);
const char *prof_log_path(const prof_log *l);
/* The schema version found when the file was opened (before migrating). */
int  prof_log_opened_version(const prof_log *l);

typedef struct prof_machine {
    const char *hostname, *cpu_model, *isa;
    int         cores;
    double      read_bw_gbs;   /* 0: unknown */
} prof_machine;

typedef struct prof_model_info {
    const char *path, *hash, *arch, *quant;
    const char *named;          /* the model as the user named it (NULL: path) */
    uint64_t    size;
    uint32_t    n_layers, dim, ffn_dim, n_heads, n_kv_heads, vocab_size;
    uint32_t    n_experts, top_k, dense_delay, expert_delay;
} prof_model_info;

typedef struct prof_run_cfg {
    int         threads;
    const char *prefetch, *expert_io;  /* "off", "none", ... */
    const char *expert_io_asked;       /* "auto" or the mode named; NULL: expert_io */
    uint64_t    expert_cache_bytes;    /* the RAM expert cache's size */
    int         expert_ahead;          /* look-ahead layers, 0 off; -1: n/a (NULL) */
    uint32_t    n_ctx;
    double      temp, top_p, min_p, rep_penalty;
    int         top_k, rep_last_n;
    uint64_t    seed;
    /* A request to `cflow serve` (schema 11); client NULL for a run of a
     * local program, which leaves the three columns NULL: the client's
     * address ("127.0.0.1:41234", "[::1]:41234"), the method and path
     * ("POST /v1/chat/completions"), and the seconds the request waited
     * for a slot. */
    const char *client, *endpoint;
    double      queue_s;
} prof_run_cfg;

/* The read bandwidth already recorded for the host cflow runs on (same
 * hostname, CPU model and core count), or 0. */
double prof_log_machine_bw(prof_log *l, const prof_machine *m);
/* Record a read-bandwidth measurement of machine m (its hostname, CPU
 * model and cores; isa and read_bw_gbs unused): 0, or -1 with err. */
int  prof_log_membw(prof_log *l, const prof_machine *m, const prof_membw *r, char *err,
                    size_t errlen);
/* The latest figure recorded for machine m at n_threads: 0 with *r (and
 * measured, may be NULL, its time), 1 when there is none, -1 on error. */
int  prof_log_membw_find(prof_log *l, const prof_machine *m, int n_threads, prof_membw *r,
                         char measured[32]);
/* Storage bandwidth (`cflow bench diskbw`): record gbs measured on the
 * device dev (st_dev of the file read, at path) of host hostname: 0, or
 * -1 with err.  _find: the latest figure for (hostname, dev) into *gbs
 * (and measured, may be NULL, its time): 0, 1 when there is none, -1 on
 * error. */
int  prof_log_diskbw(prof_log *l, const char *hostname, uint64_t dev, const char *path,
                     double gbs, char *err, size_t errlen);
int  prof_log_diskbw_find(prof_log *l, const char *hostname, uint64_t dev, double *gbs,
                          char measured[32]);
/* Start a session (machine and model rows are found or made). */
int  prof_log_session(prof_log *l, const prof_machine *m, const prof_model_info *mi,
                      const char *program, char *err, size_t errlen);
/* Take part in the session another handle on the same file began
 * (prof_log_session on from): the runs this handle begins belong to it.
 * A program that logs several runs at once (`cflow serve`, a run per
 * request) opens a handle per run in flight, all in one session.  0, or
 * -1 with err when from has begun no session. */
int  prof_log_session_join(prof_log *l, const prof_log *from, char *err, size_t errlen);
/* Start a run in the session under cfg; the profiler's run must have been
 * started (prof_run_begin) just before: its records are the run's tokens. */
int  prof_log_run_begin(prof_log *l, prof *p, const prof_run_cfg *cfg,
                        int64_t *run_id, char *err, size_t errlen);
/* The expert streaming figures the run's next flushes write (a copy;
 * NULL: none, the columns stay NULL). */
void prof_log_set_xio(prof_log *l, const prof_xio_fig *f);
/* How a request to `cflow serve` ended, which the run's next flushes write
 * (schema 11): stop is why ("stop": an end-of-text token or a stop
 * string, "length": max_tokens or the context, "cancelled": the client
 * left, "error"; NULL: not yet known), n_cached the prompt tokens found
 * in the slot's cache and not prefilled again, n_prompt_all the prompt's
 * tokens (n_prompt counts those prefilled). */
void prof_log_set_request(prof_log *l, const char *stop, uint64_t n_cached,
                          uint64_t n_prompt_all);
/* Is a flush due (64 tokens waiting or half a second since the last)? */
int  prof_log_due(const prof_log *l, const prof *p);
/* Write the tokens waiting in the ring and the run's running totals in one
 * transaction.  final: also per-layer statistics, counter totals, the end
 * time and status "done". */
int  prof_log_flush(prof_log *l, prof *p, int final, char *err, size_t errlen);

/* ---- reading the log (cflow runs) ---- */
typedef struct prof_run_row {
    int64_t  id, session_id;
    char     started[32], ended[32];   /* ISO 8601 UTC; ended "" while running */
    char     status[16];               /* "running", "done" */
    char     program[32];
    char     model[1024], model_hash[24], arch[32], quant[16];
    uint64_t model_size;
    uint32_t n_layers;
    char     hostname[128], cpu_model[128], isa[32];
    int      cores;
    double   read_bw_gbs;
    int      threads;
    char     prefetch[16], expert_io[16];
    char     expert_io_asked[16];     /* "" when not recorded (before schema 7) */
    uint64_t expert_cache_bytes;
    int      expert_ahead;            /* look-ahead layers, 0 off; -1 not recorded */
    char     model_file[1024];        /* the file that ran (model: as named) */
    int      has_xio;                 /* xio holds the run's expert figures */
    prof_xio_fig xio;
    uint32_t n_ctx;
    double   temp, top_p, min_p, rep_penalty;
    int      top_k, rep_last_n;
    uint64_t seed;
    uint64_t n_prompt, n_gen, bytes_per_token;
    double   prefill_s, decode_s, prefill_tok_s, decode_tok_s, gb_s, bw_share;
    int64_t  ev[PROF_NEV];            /* -1: unavailable or not recorded */
    char     ev_reason[PROF_NEV][128];
    /* weight bytes streamed per stream over the run (0 when not recorded),
     * and the critical-path model in bytes per token (0: none) */
    uint64_t bytes[PROF_NST];
    double   cp_naive, cp_critical;
    /* weight bytes streamed per decode token, per stream (attention,
     * dense, experts): the per-layer rows' sums over their n_tokens (0 when
     * the run has none).  Decode tokens each stream the whole model; the
     * figures are comparable with the critical path, as bytes over all
     * tokens are not after a batched prefill. */
    double   tok_bytes[3];
    /* a request to `cflow serve` (schema 11; "" and -1 for other runs):
     * prof_run_cfg's client, endpoint and queue_s, prof_log_set_request's
     * stop, n_cached and n_prompt_all */
    char     client[64], endpoint[64], stop[16];
    double   queue_s;
    int64_t  n_cached, n_prompt_all;
} prof_run_row;

/* Runs, oldest first; model_filter (NULL: all) keeps runs whose model path
 * contains it or whose model hash equals it.  *rows is malloc'd. */
int prof_log_list(prof_log *l, const char *model_filter, prof_run_row **rows,
                  size_t *n, char *err, size_t errlen);
/* One run; 1 when there is no such run. */
int prof_log_get(prof_log *l, int64_t id, prof_run_row *row, char *err,
                 size_t errlen);
/* Per-layer seconds of run id: *sec (malloc'd) gets [n_layers][PROF_NST],
 * *n_tok the tokens they cover. */
int prof_log_layers(prof_log *l, int64_t id, double **sec, unsigned *n_layers,
                    uint64_t *n_tok, char *err, size_t errlen);
/* Per-layer statistics of run id, in layer order: seconds and streamed
 * bytes per stream summed over n_tokens tokens, and the critical-path
 * model (has_model 0 when the run recorded none, e.g. a log migrated from
 * schema 2).  *rows is malloc'd. */
typedef struct prof_layer_row {
    unsigned         layer;
    uint64_t         n_tokens;
    double           sec[PROF_NST];
    uint64_t         bytes[PROF_NST];
    int              has_model;
    prof_layer_model model;
    /* expert I/O (schema 4; 0 without sync/staged reads): read seconds,
     * issue to last byte, and bytes, over the n_tokens tokens; the stall
     * is sec[PROF_ST_IO_WAIT] (figures: prof_io_derive) */
    double           io_s;
    uint64_t         io_bytes;
} prof_layer_row;
int prof_log_layer_rows(prof_log *l, int64_t id, prof_layer_row **rows,
                        unsigned *n, char *err, size_t errlen);
/* Token records of run id, in order (run is 0). */
int prof_log_tokens(prof_log *l, int64_t id, prof_tok **toks, size_t *n,
                    char *err, size_t errlen);

/* ======================================================================= */
/* Expert I/O (report 3.9.4, 5.14)                                          */
/* ======================================================================= */
/* The experts routed at layer were read (--expert-io sync or staged),
 * bringing bytes bytes; io_s is the reader pool's busy time charged to
 * them (overlapping reads count once: the layers' io_s sum to the time
 * storage was busy, eng_io.c).  The decoding thread calls it when it waits for the read;
 * the wait itself is the layer's PROF_ST_IO_WAIT time. */
void prof_layer_io(prof *p, unsigned layer, double io_s, uint64_t bytes);

/* The figures of the report's overlap model, from raw sums (seconds over
 * the same tokens):
 *   c_s     compute C: attention + FFN + expert seconds
 *   io_s    expert read time IO (the reader pool's busy time)
 *   stall_s the time decode waited for reads (PROF_ST_IO_WAIT)
 *   hidden  1 - stall/IO: the share of the read time compute covered
 *           (0 without reads)
 *   pred    (C + IO) / max(C, IO_eff): the speedup of staged over sync the
 *           model predicts, with IO_eff the IO of these same sums (in a
 *           staged run: the reads as they ran beside compute)
 * Every front end and the run log's readers derive them here. */
typedef struct prof_io_fig {
    double   c_s, io_s, stall_s, hidden, pred;
    uint64_t bytes;
} prof_io_fig;
void prof_io_derive(double c_s, double io_s, double stall_s, uint64_t bytes,
                    prof_io_fig *f);
/* Staged over sync, from two runs of one model (report 5.14): t_* the
 * seconds per token of each run, the figures per token too.
 *   net      t_sync / t_staged, the speedup measured
 *   model    (C + IO) / max(C, IO_eff): C and IO of the sync run, IO_eff
 *            the staged run's read time (the reads as they ran beside
 *            compute)
 *   tau      the interference tax: staged compute / sync compute - 1 (the
 *            same arithmetic, slowed by the reads running beneath it)
 *   refined  (C + IO_sync) / max((1 + tau) C, IO_eff), the report's model
 *            with its two empirical terms; IO_sync is the sync run's stall,
 *            what its dead stop cost (the reader's busy time also covers
 *            the issue of the read, which the decoding thread spends in
 *            compute: C + busy counts it twice)
 * Ratios are 0 when a run has no time or no compute. */
typedef struct prof_io_ab {
    double net, model, tau, refined;
} prof_io_ab;
void prof_io_compare(double t_sync, const prof_io_fig *sync, double t_staged,
                     const prof_io_fig *staged, prof_io_ab *out);
/* The figures of layer (PROF_IO_ALL: summed over layers) in the current
 * run, summed over its tokens.  Any thread. */
#define PROF_IO_ALL 0xffffffffu
void prof_io_get(const prof *p, unsigned layer, prof_io_fig *f);

/* ======================================================================= */
/* `cflow bench` results in the run log (schema 5, table bench)             */
/* ======================================================================= */
typedef struct prof_bench_row {
    const char *test_time;          /* ISO 8601 UTC */
    int         n_threads;
    int64_t     n_prompt, n_gen, n_depth;
    const char *prefetch, *expert_io;  /* "off"/"on", "mmap"/"sync"/"staged" */
    unsigned    repetitions;
    double      avg_ns, stddev_ns, avg_ts, stddev_ts;
    uint64_t    bytes_per_token;
    double      gb_s, read_bw_gbs, bw_pct;  /* 0: not applicable / unknown */
    const prof_xio_fig *xio;        /* the test's expert figures; NULL: none */
    int         expert_ahead;       /* look-ahead layers, 0 off; -1: n/a (NULL) */
    unsigned    interleave;         /* tests that took turns a token each in its
                                     * repetitions (`bench --interleave`), 1 it
                                     * alone; 0: not known (NULL) */
} prof_bench_row;
/* One test's result in the current session (prof_log_session first). */
int prof_log_bench(prof_log *l, const prof_bench_row *r, char *err, size_t errlen);

/* ======================================================================= */
/* The test suite's faults ($CFLOW_FAULT, prof_fault.c)                    */
/* ======================================================================= */
/* $CFLOW_FAULT is faults joined by commas, each a name with an optional
 * "@N" (N decimal: where the fault starts counting) where the fault
 * counts: runlog:enospc, runlog:busy (the run log, prof_fault.c),
 * expert-read:eio, expert-read:short (the expert reads, eng_io_queue.c),
 * uring-init:eperm (eng_io_uring.c; takes no @N), serve:step-ms (N:
 * the least milliseconds of a decode step of cflow serve, srv_sched.c),
 * convert:enospc (N: the bytes a conversion's output and the model
 * cache's files take before the disk is full; prof_fault_room).
 * This grammar is
 * written here once, for the check and for every reader of a fault. */

/* 1 when v (not NULL) is that grammar, else 0. */
int prof_fault_ok(const char *v);
/* Whether $CFLOW_FAULT, read now, names fault name (one of the names
 * above; not NULL): 1 and its N in *at (0 without "@N"; at may be NULL),
 * else 0 and *at 0.  A value prof_fault_ok refuses names nothing. */
int prof_fault_get(const char *name, unsigned long *at);
/* Of n bytes about to be written to a conversion's output or a model
 * cache file, how many fit under CFLOW_FAULT=convert:enospc@N (N bytes
 * in all over the process; the caller fails the rest with ENOSPC, as a
 * full disk does): n when the fault is not set. */
size_t prof_fault_room(size_t n);

#endif /* CFLOW_PROF_H */
