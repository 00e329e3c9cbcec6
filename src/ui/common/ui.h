/*
 * ui.h — src/ui/common, what the two front ends share: `cflow`
 * (src/ui/cli, cli.h) and cflow-tui (src/ui/tui, tui.h) both include it;
 * it includes neither.  The one table of options and limits (ui_opt.c),
 * the model cache (ui_models.c), the run log's opener and writer
 * (ui_runlog.c), what it records (ui_logsess.c), two runs compared
 * (ui_runcmp.c), the expert I/O figures (ui_xio.c), messages, the
 * progress bar and strict number parsing (ui_common.c).
 *
 * Conventions every program keeps (tests and scripts rely on them):
 * results on stdout, everything else on stderr; errors are one line
 * "cflow: ..." with exit status 1, usage errors exit 2.  Text from outside
 * (paths, arguments, the environment, a file's or a run log's strings)
 * never reaches the terminal raw: stderr's lines go through ui_eprintf
 * (control characters escaped), stdout's through ui_printable or
 * ui_fputs_escaped.  The engine opens with the options the command line
 * gave through one mapping, ui_settings_eng_opts.
 */
#ifndef CFLOW_UI_H
#define CFLOW_UI_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/engine.h"
#include "prof/prof.h"

#define UI_EXIT_OK    0
#define UI_EXIT_ERR   1
#define UI_EXIT_USAGE 2

/* ---- ui_opt.c: one table of options and limits, one parser ----------
 * Every flag of every `cflow` subcommand and of cflow-tui, and every
 * /command of cflow-tui that sets one of them, takes its limits from
 * ui_opts[]: a value outside them is refused in one line that gives the
 * valid range.  A program names the options it takes (a list of ids ending
 * in UI_O_END) and ui_opts_parse writes them once into a ui_settings. */
enum ui_opt_id {
    UI_O_MODEL, UI_O_PROMPT, UI_O_FILE, UI_O_N_PREDICT, UI_O_CTX, UI_O_THREADS,
    UI_O_TEMP, UI_O_TOP_K, UI_O_TOP_P, UI_O_MIN_P, UI_O_REPEAT_PENALTY,
    UI_O_REPEAT_LAST_N, UI_O_SEED, UI_O_IGNORE_EOS, UI_O_SYSTEM, UI_O_CHAT, UI_O_DB, UI_O_NO_LOG,
    UI_O_NO_PROFILE, UI_O_KV_TYPE, UI_O_PREFETCH, UI_O_EXPERT_IO, UI_O_EXPERT_CACHE,
    UI_O_EXPERT_AHEAD, UI_O_EXPERT_AHEAD_LAYERS, UI_O_NO_MMAP, UI_O_MMAP,
    /* cflow ppl, cflow inspect */
    UI_O_STORIES, UI_O_NO_EOS, UI_O_CHUNKS, UI_O_JSON, UI_O_CRITICAL_PATH,
    UI_O_BYTES_PER_PARAM, UI_O_KV_CTX, UI_O_REASONING,
    /* cflow convert, synth, tokenize, runs */
    UI_O_QUANT, UI_O_TOKENIZER, UI_O_VFLOW, UI_O_GGUF, UI_O_VOCAB, UI_O_ROUTING,
    UI_O_SYNTH_SEED, UI_O_TOK_MODEL, UI_O_BOS, UI_O_PARSE_SPECIAL, UI_O_PIECES,
    UI_O_RUNS_MODEL, UI_O_CSV, UI_O_TOKENS,
    /* cflow bench: lists of values, one test per combination */
    UI_O_B_MODELS, UI_O_B_THREADS, UI_O_B_PROMPT, UI_O_B_GEN, UI_O_B_DEPTH, UI_O_B_BATCH,
    UI_O_B_REPS, UI_O_B_OUTPUT, UI_O_B_PREFETCH, UI_O_B_EXPERT_IO, UI_O_B_AHEAD_LAYERS,
    UI_O_B_READ_BW, UI_O_B_NO_WARMUP, UI_O_B_WARMUP_REPS, UI_O_B_INTERLEAVE, UI_O_B_SEED,
    UI_O_B_ROWS_DIV, UI_O_B_QD, UI_O_B_DISK_FILE,
    /* cflow serve */
    UI_O_HOST, UI_O_PORT, UI_O_PARALLEL, UI_O_QUEUE, UI_O_TIMEOUT, UI_O_API_KEY, UI_O_ALIAS,
    UI_O_HELP, UI_O_VERSION,
    UI_O_N,
    UI_O_END = -1
};

enum ui_opt_type {
    UI_T_FLAG,     /* no value: sets an int to 1 */
    UI_T_STR,      /* a string (points into argv) */
    UI_T_INT,      /* a long within [min, max] */
    UI_T_FLOAT,    /* a finite double within [min, max] */
    UI_T_U64,      /* an unsigned 64-bit integer (seeds) */
    UI_T_CHOICE,   /* one of choices[] -> its index + base */
    UI_T_LIST,     /* "a,b,c", "a-b" or "a-b+step" of longs within [min, max] */
    UI_T_CHOICES,  /* "x,y" of choices[] -> their indices */
    UI_T_STRS,     /* a string; repeat the option for several */
    UI_T_SIZE      /* auto, off or bytes with K/M/G/T (eng_expert_cache_from_text) -> int64_t */
};

#define UI_LIST_MAX 32    /* entries of a list option */
typedef struct ui_ilist {
    long     v[UI_LIST_MAX];
    unsigned n;
} ui_ilist;

typedef struct ui_opt {
    int         id;          /* enum ui_opt_id */
    const char *name;        /* the long flag and the /command */
    char        short_name;  /* 0: none */
    int         type;        /* enum ui_opt_type */
    const char *arg;         /* what the value is called: "N", "T", "FILE" */
    double      min, max;    /* UI_T_INT, UI_T_FLOAT, UI_T_LIST */
    const char *zero;        /* what 0 means ("all cores"), or NULL */
    const char *const *choices;  /* UI_T_CHOICE(S), NULL-terminated */
    int         base;        /* UI_T_CHOICE: the value of choices[0] */
    size_t      off;         /* where ui_settings keeps the value */
    const char *dflt;        /* the default in words; NULL: the settings' value */
    const char *help;
} ui_opt;

extern const ui_opt ui_opts[UI_O_N];
/* "off" and "on" (0 and 1; NULL-terminated): how a switch's value is
 * written, parsed and logged everywhere. */
extern const char *const ui_onoff[3];

/* Everything the flags set, parsed once.  given[id] says which options
 * the command line named (the rest keep the program's defaults). */
typedef struct ui_settings {
    const char *model, *prompt, *prompt_file, *system, *db;
    long        n_predict;       /* tokens per run or reply, 0: no limit */
    long        n_ctx;           /* 0: the model's */
    long        threads;         /* 0: all cores */
    double      temp, top_p, min_p, rep_penalty;
    long        top_k, rep_last_n;
    uint64_t    seed;
    int         ignore_eos, no_log, no_profile, no_mmap;
    int         mmap;            /* --mmap: map the model, never read it in */
    int         chat;            /* cflow run --chat */
    int         reasoning;       /* --chat: show a reply's reasoning (harmony's
                                    analysis channel) on stderr */
    int         kv_f16;          /* -1 auto, 0 f32, 1 f16 */
    int         prefetch;        /* -1 the environment's, 0 off, 1 on */
    int         expert_io;       /* -1 the environment's, else enum eng_expert_io */
    int64_t     expert_cache;    /* eng_opts.expert_cache: -1 the environment's */
    int         expert_ahead;    /* eng_opts.expert_ahead: -1 the environment's */
    long        expert_ahead_layers;  /* eng_opts.expert_ahead_layers: 0 the environment's */
    /* cflow ppl, cflow inspect */
    long        stories;         /* 0: all */
    int         no_eos, chunks, json, critical_path;
    double      bytes_per_param; /* 0: the file's tile bytes */
    long        kv_ctx;          /* --critical-path: the KV cache read at it, 0 none */
    /* cflow convert, synth, tokenize, runs (their -m is model) */
    const char *quant;           /* a tile type's name, checked by the command */
    const char *tokenizer, *vocab;
    const char *routing;         /* synth: uniform, zipf or zipf:S (checked by synth) */
    int         vflow, gguf, bos, parse_special, pieces, csv, tokens;
    uint64_t    synth_seed;
    /* cflow bench */
    const char *models[UI_LIST_MAX];
    unsigned    n_models;
    ui_ilist    b_threads, b_prompt, b_gen, b_depth, b_prefetch, b_expert_io;
    ui_ilist    b_batch;         /* --batch-decode LIST: sequences a tg step decodes */
    ui_ilist    b_ahead;         /* --expert-ahead-layers LIST; {0}: the session's */
    long        reps, rows_div;
    long        qd;              /* bench diskbw: requests in flight, 0 the reader's */
    const char *disk_file;       /* bench diskbw --file */
    int         output;          /* 0 md, 1 csv, 2 json */
    double      read_bw;         /* GB/s, 0: measure */
    int         no_warmup;
    long        warmup_reps;     /* untimed full repetitions before the timed ones */
    int         interleave;      /* tg tests take turns token by token */
    uint64_t    b_seed;
    /* cflow serve */
    const char *host, *api_key, *alias;
    long        port, parallel, queue, timeout;
    int         help, version;
    unsigned char given[UI_O_N];
} ui_settings;

/* eng_opts.no_mmap from --no-mmap (1: read the model in), --mmap (0: map
 * it) and neither (-1: the engine's choice, by free memory); --no-mmap
 * wins when both are given. */
static inline int ui_no_mmap(const ui_settings *o)
{
    return o->no_mmap ? 1 : o->mmap ? 0 : -1;
}

/* The defaults every program starts from (eng_sampling_default's
 * sampling, 128 tokens, the environment's I/O, bench's llama-bench
 * tests); a program changes what differs before parsing. */
void ui_settings_default(ui_settings *s);
/* The settings' sampling as the engine takes it.  A seed not given is
 * drawn at random, anew at each call: print it so the run can be
 * replayed. */
void ui_settings_sampling(const ui_settings *s, eng_sampling *sp);
/* The settings' engine options as eng_open takes them: threads, context,
 * KV type, prefetch, expert I/O, cache and look-ahead, mapping; the log is
 * ui_log.  What the command line did not give keeps ui_settings_default's
 * value, which is eng_opts_default's ("the environment's, else the
 * engine's default").  Every front end opens through this one mapping, so
 * an engine option reaches all of them alike. */
void ui_settings_eng_opts(const ui_settings *s, eng_opts *eo);
/* A program's options: its name ("cflow run", "cflow-tui"), the ids it
 * takes (ending in UI_O_END), what prints its --help and --version (from
 * s->help, s->version), and the arguments after the options: how many
 * (nargs; -1: any number, the program counts them) and their names for
 * the refusal ("FILE", "INPUT and OUTPUT"). */
typedef struct ui_optset {
    const char *prog;
    const int  *ids;
    void      (*help)(const ui_settings *s);
    const char *args;
    int         nargs;
} ui_optset;
/* argv[1..] into s.  Returns -1 when the program goes on (*first_arg: the
 * first argument that is not an option), else the exit status:
 * UI_EXIT_USAGE after a one-line refusal on stderr, UI_EXIT_OK after
 * --help or --version. */
int  ui_opts_parse(const ui_optset *set, int argc, char **argv, ui_settings *s,
                   int *first_arg);
/* The option of that long name (the first, for names bench reuses), or
 * NULL. */
const ui_opt *ui_opt_find(const char *name);
/* A value of o parsed and checked against its limits: into *out (a long,
 * double, uint64_t or int as o's type stores it; lists into a ui_ilist).
 * -1 with err = the valid range ("N from 0 (all cores) to 1024"). */
int  ui_opt_value(const ui_opt *o, const char *arg, void *out, char *err, size_t errlen);
/* The valid values of o in words, as a refusal gives them. */
void ui_opt_range(const ui_opt *o, char *buf, size_t n);
/* The options of ids[] as --help lists them, with s's values as defaults. */
void ui_opts_help(FILE *f, const int *ids, const ui_settings *s);

/* The environment every program reads, checked once at its start:
 * $CFLOW_READ_BW_GBS (a number of GB/s, 0.001 to 1000000) and the engine's
 * words (eng_env_check: $CFLOW_ISA, $CFLOW_PIN).  -1 when all are unset,
 * empty or valid; else UI_EXIT_ERR after one line "PROG: NAME='VALUE':
 * use ..." on stderr. */
int  ui_env_check(const char *prog);
/* At the start of main: a standard descriptor (0, 1, 2) that is closed is
 * opened on /dev/null, so that no file opened later takes its number
 * (text meant for stdout or stderr would land in a model being written or
 * an eventfd).  stdin and stderr read and write nothing; stdout is opened
 * read-only, so that writing to it still fails (EBADF) and what would be
 * lost is an error, not silence. */
void ui_std_fds(void);
/* printf to stderr for the lines the programs print there, where strings
 * from outside (paths, arguments, environment values, and engine messages
 * that quote them) end up: every control character of the result (C0,
 * DEL, and C1 as UTF-8 C2 80..9F) is written as \n, \t, \r or \xNN, so
 * that such a string can neither break the line nor send the terminal an
 * escape sequence.  The newlines fmt itself begins and ends with are kept.
 * ui_error, ui_usage_error and ui_log print through it. */
void ui_eprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* s[0..n) to f with ui_eprintf's escapes (every control character). */
void ui_fputs_escaped(FILE *f, const char *s, size_t n);
/* The same, but newlines and tabs kept: a model's generated text shown on
 * a terminal, whose lines are its own, where any other control character
 * (a byte token can emit ESC) would act on the terminal. */
void ui_fputs_text(FILE *f, const char *s, size_t n);
/* s (NUL-terminated, in place) with every control character (C0, DEL, C1
 * as UTF-8 C2 80..9F, both bytes) made '?': for strings from a file (a
 * model's metadata, a run log's rows) printed to a terminal on stdout,
 * where an escape sequence would act on it.  Returns s. */
char *ui_printable(char *s);
/* "cflow: <msg>" on stderr; returns UI_EXIT_ERR. */
int  ui_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "cflow <cmd>: <msg>", one line; returns UI_EXIT_USAGE. */
int  ui_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Log callback for the libraries: warnings and errors to stderr. */
void ui_log(void *ud, int level, const char *msg);
/* Progress callback: a bar on stderr when it is a terminal and the work
 * has taken more than a second; silent otherwise. */
void ui_progress(void *ud, const char *what, uint64_t done, uint64_t total);

/* Strict number parsing: the whole string must be a number in range.
 * Return 0 or -1. */
int ui_parse_int(const char *s, long lo, long hi, long *out);
int ui_parse_float(const char *s, double lo, double hi, double *out);
int ui_parse_u64(const char *s, uint64_t *out);

/* A text file the front ends read (what: "prompt file", "corpus"...),
 * malloc'd and NUL-terminated, *len its size.  Only a regular file (its
 * type checked before an open that could block: a FIFO, a device), of at
 * most cap bytes, without NUL bytes; else NULL after a one-line refusal
 * naming the file, the limit or the offset. */
#define UI_PROMPT_MAX (16u << 20)    /* a prompt or system prompt file */
#define UI_CORPUS_MAX (1024u << 20)  /* a corpus `cflow ppl` scores */
char *ui_read_text(const char *path, const char *what, size_t cap, size_t *len);

/* The model used when no -m is given ($CFLOW_MODEL, else the shipped one),
 * or NULL when there is none. */
const char *ui_default_model(void);

/* ---- ui_models.c: the model cache ($XDG_CACHE_HOME/cflow) -----------
 * A GGUF file, a Hugging Face folder or a llama2.c checkpoint (its
 * tokenizer beside it) given where a model is taken is converted once into
 * the cache, keyed by its content, and the conversion opened instead. */
typedef struct ui_models_cb {
    fmt_log_fn      log;        /* the converter's warnings; "waiting for ..." (info) */
    void           *log_ud;
    fmt_progress_fn progress;   /* "hashing", then "convert" */
    void           *progress_ud;
} ui_models_cb;
/* The file to open for model into out[n]: model itself when it is a
 * .cflow or .vflow or nothing cflow converts (the opener then says why),
 * else its conversion in the cache, made now when missing (*converted
 * set to 1).  0, or -1 with one line in err naming the file or the cache
 * folder.  Prints nothing. */
int  ui_models_resolve(const char *model, const ui_models_cb *cb, char *out, size_t n,
                       int *converted, char *err, size_t errlen);
/* b bytes in KiB, MiB or GiB ("1.2 MiB"). */
void ui_models_size(uint64_t b, char *buf, size_t n);
/* "converted MODEL into PATH (SIZE; ...)": the one line said after a
 * conversion. */
void ui_models_converted_line(char *buf, size_t n, const char *model, const char *cflow);
/* For cflow's commands: ui_models_resolve with ui_log and ui_progress,
 * the converted line on stderr; buf, or NULL after the error (ui_error). */
const char *ui_model_path(const char *model, char *buf, size_t n);
/* The cache folder's path (it may not exist yet): 0, or -1 with err. */
int  ui_models_dir(char *buf, size_t n, char *err, size_t errlen);
/* The folder's lock, taken (waiting for a conversion in progress, said
 * through cb->log): a descriptor for ui_models_unlock, or -1 with err. */
int  ui_models_lock(const char *dir, const ui_models_cb *cb, char *err, size_t errlen);
void ui_models_unlock(int fd);
/* Under the lock: remove what interrupted conversions left; the bytes. */
uint64_t ui_models_sweep(const char *dir);
enum { UI_SRC_SAME, UI_SRC_CHANGED, UI_SRC_GONE, UI_SRC_UNKNOWN };
typedef struct ui_model_entry {
    char     cflow[PATH_MAX];   /* the conversion */
    char     name[256];         /* its file name without .cflow: STEM-HASH */
    char     hash[17];
    char     source[PATH_MAX];  /* what it was made from ("": not recorded) */
    char     kind[16];          /* "gguf", "hf", "llama2c" */
    uint64_t size;              /* bytes */
    int64_t  converted;         /* unix seconds */
    int      state;             /* UI_SRC_*: the source now */
} ui_model_entry;
/* The cache's conversions, newest first (*out malloc'd, none when the
 * folder does not exist), and the bytes of interrupted ones.  0 or -1. */
int  ui_models_list(const char *dir, ui_model_entry **out, size_t *n, uint64_t *partial,
                    char *err, size_t errlen);
/* Under the lock: delete one conversion and its record, adding the bytes
 * to *freed.  0, or -1 with errno. */
int  ui_models_remove(const ui_model_entry *e, uint64_t *freed);

/* ---- ui_runlog.c: the run log as every program opens and writes it --- */
/* Open the run log: db (--db PATH), else the default ($CFLOW_DB, then
 * $XDG_DATA_HOME/cflow/runs.db, then ~/.local/share/cflow/runs.db), with
 * prof_log_open's flags (PROF_LOG_CREATE to write).  0; 1 when a reader
 * (no PROF_LOG_CREATE) finds no file there yet (err: the path); -1 with
 * one line in err that follows the words "run log" ("PATH: why").
 * Writers open through ui_runlog instead. */
int  ui_log_open(prof_log **out, const char *db, unsigned flags, char *err, size_t errlen);
/* "warning: run log <why>; continuing without logging" into buf: what
 * every program says, once, when the log cannot be written. */
void ui_log_warning(char *buf, size_t n, const char *why);
/* The names of the three byte streams: attention, dense (the FFN beside
 * the experts, as cflow inspect --critical-path calls it), experts. */
extern const char *const ui_byte_stream[3];

/* A program's writer of the run log (the lifecycle: ui_runlog.c's essay):
 * the log opened once, a session a model, a run a configuration, a flush
 * when due with the expert figures of the run's decode tokens.  Every
 * problem with the log is one line through say (ui_log_warning's words),
 * after which logging stops; the figures are counted all the same. */
typedef struct ui_runlog ui_runlog;
typedef void (*ui_say_fn)(void *ud, const char *line);
/* "UD: LINE" on stderr through ui_eprintf (ud: the program's name). */
void ui_say_stderr(void *ud, const char *line);
/* A writer for program (the session rows' "cflow run", "cflow bench",
 * "cflow-tui") into db (NULL: the default); with no_log it never opens the
 * log.  say NULL: ui_say_stderr as "cflow".  NULL only when out of memory. */
ui_runlog *ui_runlog_new(const char *db, int no_log, const char *program, ui_say_fn say,
                         void *ud);
/* The log, opened now if it is not yet; NULL when not logging (--no-log,
 * or after a problem). */
prof_log  *ui_runlog_log(ui_runlog *rl);
/* The log's path, NULL when it is not open; 1 when a session is logged. */
const char *ui_runlog_path(const ui_runlog *rl);
int        ui_runlog_logging(const ui_runlog *rl);
/* The log cannot be written (why: what failed, "PATH: ..."): said once,
 * the log closed, logging stops. */
void       ui_runlog_fail(ui_runlog *rl, const char *why);
/* Model s has opened, p the profiler on it (NULL: none; then no run is
 * logged): the open run ends, the log opens (the first time), the machine,
 * its read bandwidth and the model make a session row.  read_bw >= 0 is
 * the program's own figure (cflow bench's), else ui_read_bw's. */
void       ui_runlog_session(ui_runlog *rl, eng_session *s, prof *p, const char *model,
                             const char *named, double read_bw);
/* A run under the session's settings and sp: the open run ends, the
 * profiler's totals restart, the figures count anew, a run row. */
void       ui_runlog_run(ui_runlog *rl, const eng_sampling *sp);
/* The counts from now belong to the next decode token (after a prefill);
 * a flush when one is due. */
void       ui_runlog_mark(ui_runlog *rl);
/* A decode token is done: its expert counts join the run's figures; a
 * flush when one is due. */
void       ui_runlog_token(ui_runlog *rl);
/* A flush of what is waiting (a reply's end); the run's last. */
void       ui_runlog_flush(ui_runlog *rl);
void       ui_runlog_run_end(ui_runlog *rl);
/* The run's expert figures over its decode tokens (ui_xio.c), derived at
 * their decode rate and the model's storage bandwidth; ui_xio_shown's. */
int        ui_runlog_xio(const ui_runlog *rl, prof_xio_fig *f);
/* Where the session's read bandwidth came from (ui_read_bw); the open
 * run's row (0: none). */
const char *ui_runlog_bw_src(const ui_runlog *rl);
int64_t    ui_runlog_run_id(const ui_runlog *rl);
/* The last flush and the log closed; NULL is a no-op. */
void       ui_runlog_free(ui_runlog *rl);
/* The machine's read bandwidth for "% of read bw" at n_threads, in GB/s:
 * $CFLOW_READ_BW_GBS, else the median `cflow bench membw` recorded for this
 * host at n_threads, else (when measure) measured now as membw measures it
 * and recorded through rl (may be NULL); 0 when there is none.  src gets
 * where the figure came from, e.g. "31.20 GB/s (2 threads, median of 9 passes,
 * 30.10-32.00, measured 2026-12-03T10:00:00Z; from the run log)". */
#define UI_MEMBW_PASSES 9   /* membw's timed passes unless -r gives them */
double ui_read_bw(ui_runlog *rl, int n_threads, int measure, char *src, size_t srclen);
/* ui_read_bw over an open log l (cflow serve's), measuring and recording in
 * it when it holds no figure; NULL l: only $CFLOW_READ_BW_GBS. */
double ui_read_bw_log(prof_log *l, int n_threads, char *src, size_t srclen);
/* Measure the read bandwidth at n threads and record it through rl (may
 * be NULL): 0, or an exit code after a message. */
int  ui_membw_measure(ui_runlog *rl, int n, unsigned passes, prof_membw *r);

/* ---- ui_runcmp.c: two runs side by side, the figures with their units - */
typedef struct ui_cmp_row {
    char what[40];      /* the figure and its unit: "decode tok/s" */
    char a[32], b[32];  /* the two values ("n/a": not recorded) */
    char ratio[16];     /* B/A, "-" without one; "differs" or "" for words */
} ui_cmp_row;
#define UI_CMP_MAX 40   /* rows ui_cmp_rows gives at most */
/* A run's look-ahead setting in words (prof_run_row.expert_ahead): "off",
 * "N layers" (in buf), or "n/a" (not recorded, or a dense model). */
const char *ui_ahead_text(int layers, char *buf, size_t n);
/* The rows comparing runs a and b into rows[max]; returns their count. */
size_t ui_cmp_rows(const prof_run_row *a, const prof_run_row *b, ui_cmp_row *rows,
                   size_t max);

/* What the run log records of a session, as `cflow run`, `cflow bench` and
 * cflow-tui all describe it: the machine and the model.  The structures'
 * strings point into the buffers beside them. */
typedef struct ui_logsess {
    char            host[256], cpu[256], hash[17], real[PATH_MAX], named[PATH_MAX];
    prof_machine    m;
    prof_model_info mi;
} ui_logsess;
/* ---- ui_logsess.c ---- */
/* The model: resolved path, content hash, size and geometry; named is the
 * model as the user gave it (a GGUF or folder whose conversion model is;
 * NULL: model itself).  -1 with err filled when the file cannot be hashed. */
int  ui_logsess_model(ui_logsess *ls, const char *model, const char *named,
                      const fmt_hparams *hp, char *err, size_t errlen);
/* The host as the run log keys its bandwidth figures (hostname, CPU model,
 * cores; isa as given), its strings in ls. */
prof_machine ui_host(ui_logsess *ls, const char *isa);
/* The storage bandwidth `cflow bench diskbw` recorded for the device that
 * holds path on this host, in GB/s; 0 when none is (or l is NULL). */
double ui_disk_bw(prof_log *l, const char *path);

/* ---- ui_xio.c: the expert streaming figures every front end shows ---- */
/* The figures over the tokens since base (NULL: since the session opened)
 * at tok_s decode tokens per second (0: unknown), the limit at disk_gbs
 * (ui_disk_bw; 0: the reads' own GB/s). */
void ui_xio_figures(const eng_stats *now, const eng_stats *base, double tok_s,
                    double disk_gbs, prof_xio_fig *f);
/* Add the counts between base (NULL: zero) and now to f's inputs, for
 * figures over several stretches (then set tok_s, disk_gbs and call
 * prof_xio_derive). */
void ui_xio_accum(prof_xio_fig *f, const eng_stats *now, const eng_stats *base);
/* 1 when f has routed experts read or found in the cache (sync, staged). */
int  ui_xio_shown(const prof_xio_fig *f);
/* The figures as lines without a newline ("cache 4.0 MiB: hit rate 37.5%
 * (...)[; ROUTING]", "storage: ...", "storage-bound ...", "look-ahead:
 * ..."); routing (may be NULL) ui_routing_text's; the count, 0 when
 * !ui_xio_shown. */
#define UI_XIO_LINES 4
int  ui_xio_lines(const prof_xio_fig *f, uint64_t cache_bytes, const char *routing,
                  char lines[UI_XIO_LINES][160]);
/* The figures as CSV and JSON values (the names of UI_XIO_FIELDS, in
 * order): counts, then figures; na ("" for CSV, "null" for JSON) where a
 * figure is n/a or has is 0 (nothing read or cached); strings quoted;
 * routing (may be NULL or "") ui_routing_text's.  `cflow bench -o csv|json`
 * and `cflow runs export --csv` carry them. */
#define UI_XIO_FIELDS "expert_cache_bytes,expert_hits,expert_misses,hit_rate," \
    "read_bytes_per_token,storage_gbs,queue_depth,bound_gbs,bound_source,"     \
    "storage_bound_ts,bound_pct,pred_acc,routing,wasted_bytes_per_token,"      \
    "compute_s_per_token,overlapped_bound_ts,overlapped_bound_pct"
#define UI_XIO_NF 17
void ui_xio_values(const prof_xio_fig *f, int has, uint64_t cache_bytes, const char *routing,
                   const char *na, char v[UI_XIO_NF][64]);
/* Which routing a synthetic model's figures ran under (issue 17 item 8):
 * "zipf:1 routing (cflow synth)", "uniform routing (cflow synth: random
 * routers)"; NULL for a model not made by cflow synth.  Quotes,
 * backslashes and control bytes of the file's key are '?'. */
const char *ui_routing_text(const eng_session *s, char *buf, size_t n);
/* The expert I/O mode s runs, as every front end names it: "staged",
 * "mmap (auto)" when --expert-io auto chose it, "none" for a dense model. */
const char *ui_expert_io_text(const eng_session *s, char *buf, size_t n);
/* The settings a run ran under, as the log records them (floats as the
 * decimals the user gave). */
void ui_logsess_run_cfg(const eng_session *s, const eng_sampling *sp, prof_run_cfg *rc);

#endif
