/*
 * tui.h — private to cflow-tui: the pieces of the interactive front end
 * and the few structures they share.
 *
 * Threads.  Two: the UI thread (ncurses, readline, panes, the run
 * browser) and the generation thread (tui_gen.c), which alone touches the
 * engine session, its profiler and the run log's writer.  They meet in
 * three places, each with its own lock held for microseconds:
 *
 *   tui_chat     the transcript.  The generation thread appends the tokens
 *                it decodes to the last entry; the UI lays the entries out.
 *   tui_snap     a copy of what the status line and panes show that only the
 *                generation thread can read safely (prof_totals_get, the
 *                session's n_past, the applied settings), refreshed after
 *                every token.
 *   prof lock    a read-write lock around the profiler pointer: the UI reads
 *                the prof ring and per-layer atomics under the read lock
 *                (prof.c makes those reads safe while the decoder writes);
 *                the generation thread takes the write lock only to swap
 *                models.  Decoding itself never waits for the UI.
 *
 * The UI never blocks on the engine: requests (a prompt, a model path, new
 * settings, Ctrl-C) are posted and the generation thread picks them up
 * between tokens.
 */
#ifndef CFLOW_TUI_H
#define CFLOW_TUI_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <wchar.h>

#include "engine/engine.h"
#include "prof/prof.h"

#define TUI_NAME "cflow-tui"

/* ---- settings the user tunes live ------------------------------------ */
typedef struct tui_settings {
    int          threads;        /* requested worker threads, 0: all cores */
    int          prefetch;       /* 1 on, 0 off, -1 the engine's default */
    char         expert_io[16];  /* eng_expert_io_names' word; "" the default */
    int          expert_ahead;   /* look-ahead 1 on, 0 off, -1 as the command line said */
    int          expert_ahead_layers; /* its depth (/expert-ahead N), 0 the command line's */
    /* the engine options of the command line (ui_settings_eng_opts): a
     * load opens with them, then with the live threads, prefetch and
     * expert I/O above and the context and log of the session */
    eng_opts     eng;
    eng_sampling sp;
    long         n_predict;      /* most tokens per reply, 0: no limit */
    int          ignore_eos;     /* keep going past end-of-sequence */
    char        *system;         /* system prompt (malloc'd) or NULL */
} tui_settings;

/* ---- the transcript (tui_chat.c) -------------------------------------- */
enum tui_role { TUI_USER = 0, TUI_ASSISTANT, TUI_NOTE, TUI_ERROR };

typedef struct tui_entry {
    int    role;        /* enum tui_role */
    char  *text;        /* UTF-8 bytes, NUL-terminated (malloc'd) */
    size_t len, cap;
    size_t model_skip;  /* leading bytes the model no longer sees (an
                           overlong reply cut at a context shift) */
    int    dropped;     /* 1 when the turn was dropped from the context */
} tui_entry;

typedef struct tui_chat {
    pthread_mutex_t mu;
    tui_entry      *e;
    size_t          n, cap;
    uint64_t        version;   /* bumped on every change (redraw hint) */
} tui_chat;

void   tui_chat_init(tui_chat *c);
void   tui_chat_free(tui_chat *c);
/* Append a new entry (text may be NULL); returns its index or -1. */
long   tui_chat_add(tui_chat *c, int role, const char *text);
/* The same with printf's format (one line, at most 2047 bytes). */
long   tui_chat_addv(tui_chat *c, int role, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
/* Append bytes to entry i. */
void   tui_chat_append(tui_chat *c, size_t i, const char *s, size_t n);
/* The same unless another thread holds the chat (the UI laying out the
 * chat pane): then nothing is appended and 1 comes back at once. */
int    tui_chat_append_try(tui_chat *c, size_t i, const char *s, size_t n);
void   tui_chat_clear(tui_chat *c);
/* Replace entry i's text. */
void   tui_chat_set(tui_chat *c, size_t i, const char *text);
/* A progress note for work the generation thread does before a model
 * loads (converting a GGUF into the cache): the first call adds a note
 * "<what> <subject>: N%", later ones rewrite it when N changes and write
 * a byte to wake_fd.  An fmt_progress_fn; ud is a tui_chat_prog. */
typedef struct tui_chat_prog {
    tui_chat   *chat;
    const char *subject;
    int         wake_fd;
    long        idx;     /* the note, -1 before the first call */
    int         pct;
} tui_chat_prog;
void   tui_chat_progress(void *ud, const char *what, uint64_t done, uint64_t total);
/* The transcript as Markdown into path; 0 or -1 (errno set). */
int    tui_chat_save(tui_chat *c, const char *path, const char *model,
                     const char *system);

/* ---- the generation thread (tui_gen.c) -------------------------------- */
typedef struct tui_gen tui_gen;

enum tui_state { TUI_IDLE = 0, TUI_LOADING, TUI_PREFILL, TUI_DECODE };

/* What the UI shows that only the generation thread may read. */
typedef struct tui_snap {
    int          state;           /* enum tui_state */
    int          loaded;          /* a model is open */
    char         model[1024];     /* its path */
    char         arch[32], isa[32], quant[16], chat[16];
    fmt_hparams  hp;
    uint32_t     n_ctx, n_past;
    int          threads;         /* resolved worker threads */
    int          prefetch;        /* as the engine runs it */
    char         expert_io[16];
    int          expert_direct;   /* eng_expert_io_direct */
    int          expert_io_auto;  /* eng_expert_io_auto: --expert-io auto chose it */
    int          expert_ahead;    /* eng_expert_ahead: layers, 0 off; -1 no model or dense */
    uint64_t     cache_bytes;     /* the RAM expert cache */
    prof_xio_fig xio;             /* expert figures of the run's decode tokens */
    char         routing[96];     /* ui_routing_text, "" for a model not synthesised */
    eng_sampling sp;
    long         n_predict;
    int          ignore_eos;
    prof_totals  tot;             /* the current run */
    int          have_tot;
    int64_t      run_id;          /* in the run log, 0 none */
    char         log_path[1024];  /* "" when not logging */
    char         bw_src[256];     /* where the read bandwidth came from (ui_read_bw) */
    uint64_t     version;         /* bumped on every refresh */
} tui_snap;

enum tui_job { TUI_JOB_NONE = 0, TUI_JOB_CHAT, TUI_JOB_REGEN, TUI_JOB_LOAD,
               TUI_JOB_CLEAR, TUI_JOB_MODE };

typedef struct tui_gen_cfg {
    const char   *db;          /* run log path, NULL: default */
    int           no_log;
    uint32_t      n_ctx;       /* 0: the model's */
    tui_chat     *chat;
    int           wake_fd;     /* written (one byte) on state changes */
} tui_gen_cfg;

int  tui_gen_start(tui_gen **out, const tui_gen_cfg *cfg, const tui_settings *st);
/* Stop generating, finish the run log and join the thread. */
void tui_gen_quit(tui_gen *g);
/* Post a job; it waits behind a model load or a clear.  -1 while a reply
 * is being generated or waits to be (the caller says so). */
int  tui_gen_post(tui_gen *g, int job, const char *arg);
/* Stop the reply being generated (between tokens). */
void tui_gen_interrupt(tui_gen *g);
/* New settings, applied between tokens; the next tokens start a new run.
 * The strings are copied. */
void tui_gen_settings(tui_gen *g, const tui_settings *st);
void tui_gen_get_settings(tui_gen *g, tui_settings *st);  /* st->system: copy */
void tui_gen_snap(tui_gen *g, tui_snap *out);
/* The per-layer sums (bytes, seconds per stream over the run's decode
 * tokens; the overlap figures of prof_io_get per layer and for all) as
 * they stood with the snapshot's totals, and those totals' decode token
 * count: figures of the same tokens.  Any pointer but n_gen may be NULL.
 * At most max layers; returns how many. */
unsigned tui_gen_layers(tui_gen *g, uint64_t (*bytes)[PROF_NST], double (*sec)[PROF_NST],
                        prof_io_fig *io, prof_io_fig *io_all, unsigned max, uint64_t *n_gen);
int  tui_gen_busy(tui_gen *g);
/* The profiler under the read lock (NULL when no model); always unlock. */
prof *tui_gen_prof_lock(tui_gen *g);
void  tui_gen_prof_unlock(tui_gen *g);
/* Around each frame: what the generation thread asked to be shown by the
 * time the frame began, then that the frame is on the screen (the thread
 * waits, briefly, for its prompt and its new reply to be drawn before it
 * takes the cores: tui_gen.c). */
uint64_t tui_gen_frame_begin(tui_gen *g);
void     tui_gen_frame_done(tui_gen *g, uint64_t seen);
/* The run log's path ("" when none). */
void tui_gen_log_path(tui_gen *g, char *buf, size_t n);

void tui_settings_free(tui_settings *s);
void tui_settings_copy(tui_settings *dst, const tui_settings *src);

/* ---- the UI: panes (tui_panes.c), screen, input, commands, run browser -- */
#ifndef NCURSES_WIDECHAR
#define NCURSES_WIDECHAR 1
#endif
#include <curses.h>

typedef struct tui_app tui_app;

/* A live pane: a small table of functions.  update reads the profiler (p
 * may be NULL: no model) under the generation thread's read lock, at most
 * 10 times a second, and keeps what draw needs in st; draw paints the
 * inside of its box (h x w cells) from st and the snapshot; key gets the
 * keys typed while the pane has the focus (1: used). */
typedef struct tui_pane {
    const char *name;        /* "layers", "overlap", "counters", "speed" */
    const char *title;
    int  (*init)(struct tui_pane *pn, tui_app *a);
    void (*update)(struct tui_pane *pn, tui_app *a, prof *p);
    void (*draw)(struct tui_pane *pn, tui_app *a, WINDOW *w, int h, int wd);
    int  (*key)(struct tui_pane *pn, tui_app *a, int key);
    void (*fini)(struct tui_pane *pn);
    void *st;
    int   hidden, scroll;
} tui_pane;

#define TUI_NPANE 4
extern const tui_pane tui_pane_layers, tui_pane_overlap, tui_pane_counters,
    tui_pane_speed;

/* Colour pairs (attributes only when colour is off). */
enum tui_color { TUI_C_NORMAL = 0, TUI_C_STATUS, TUI_C_USER, TUI_C_NOTE, TUI_C_ERROR,
                 TUI_C_BAR, TUI_C_BAR2, TUI_C_MARK, TUI_C_TITLE, TUI_C_DIM, TUI_NC };

typedef struct tui_runs tui_runs;

enum tui_mode { TUI_MODE_CHAT = 0, TUI_MODE_RUNS, TUI_MODE_HELP };

struct tui_app {
    tui_gen  *gen;
    tui_chat  chat;
    tui_snap  snap;
    int       color, utf8;
    tui_pane  panes[TUI_NPANE];
    tui_runs *runs;          /* the run browser (tui_runs.c) */
    const char *db;          /* --db, or NULL */
    /* The UI's state (UI thread only). */
    int       mode;          /* enum tui_mode: what the body shows */
    int       focus;         /* 0 chat, 1..TUI_NPANE a pane */
    int       zoom;          /* the focused pane (or the chat) fills the body */
    int       chat_scroll;   /* chat lines up from the newest, 0: following */
    int       help_scroll;   /* help lines scrolled off the top */
    int       input_h;       /* rows of the input line (multi-line prompts) */
    int       quit;          /* leave the loop */
    int       need_layout, need_draw;
};

/* ---- drawing (tui_draw.c) ---------------------------------------------- */
/* 1 in a UTF-8 locale (block characters, "…"); set once at start. */
extern int tui_utf8;
/* The attribute of a colour role (A_BOLD/A_REVERSE/... without colour). */
attr_t tui_attr(const tui_app *a, int role);
/* Bytes and display cells of the next character of s[0..n). */
size_t tui_next_char(const char *s, size_t n, int *cells);
/* Add n bytes of UTF-8 s at the cursor, clipped at the window's edge
 * (printable ASCII as cells straight away: the fast path of every pane). */
void   tui_addn(WINDOW *win, const char *s, size_t n);
/* The bytes of s[0..n) that fit in w cells into *bytes; 1 when s is cut. */
int    tui_fit(const char *s, size_t n, int w, size_t *bytes);
/* Draw at most w display cells of UTF-8 s at (y, x); text that does not
 * fit is cut with "…" in its last cell. */
void   tui_put(WINDOW *win, int y, int x, int w, const char *s);
/* Display cells of the UTF-8 string s. */
int    tui_width(const char *s, size_t n);
/* A horizontal bar of frac * w cells (block characters in UTF-8 locales). */
void   tui_bar(tui_app *a, WINDOW *win, int y, int x, int w, double frac, int role);
/* "12.3K", "1.20M" (bytes, 1024-based). */
void   tui_human(double v, char *buf, size_t n);

/* ---- commands and keys (tui_cmd.c) ------------------------------------- */
/* What a /command's argument is; the table parses it before the handler
 * runs, and a refusal names the valid range. */
enum tui_arg { TUI_A_NONE = 0, TUI_A_TEXT, TUI_A_INT, TUI_A_REAL, TUI_A_U64,
               TUI_A_ONOFF, TUI_A_PANE };

typedef struct tui_argv {
    const char *s;          /* the text after the name, trimmed ("" none) */
    long        i;          /* TUI_A_INT */
    double      d;          /* TUI_A_REAL */
    uint64_t    u;          /* TUI_A_U64 */
    int         on;         /* TUI_A_ONOFF */
    int         pane;       /* TUI_A_PANE: 0 chat, 1..TUI_NPANE, -1 none given */
} tui_argv;

typedef struct tui_cmd {
    const char *name;        /* "temp": typed as /temp */
    const char *alias;       /* another name ("exit"), or NULL */
    const char *args;        /* the argument as help shows it ("T"), or "" */
    int         arg;         /* enum tui_arg */
    int         optional;    /* the argument may be left out */
    const char *opt;         /* numbers: the flag (ui_opt.c) whose limits apply */
    void      (*run)(tui_app *a, const struct tui_cmd *c, const tui_argv *v);
    const char *help;        /* one line */
} tui_cmd;

typedef struct tui_key {
    int         code;        /* ncurses key (KEY_F(1)); 0: readline's own */
    const char *name;        /* "F1", "Ctrl-C" */
    const char *bar;         /* its label in the key bar, or NULL */
    void      (*run)(tui_app *a);
    const char *help;
} tui_key;

extern const tui_cmd tui_cmds[];
extern const size_t  tui_n_cmds;
extern const tui_key tui_keys[];
extern const size_t  tui_n_keys;

/* Run a line that starts with '/' (line is modified). */
void tui_command(tui_app *a, char *line);
/* Run the table's handler of an ncurses key; 1 when the table has it. */
int  tui_key_run(tui_app *a, int code);
/* A note (or an error) in the chat, which then follows the newest line. */
void tui_say(tui_app *a, int role, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The help screen, built from the tables: line i (NULL past the end). */
const char *tui_help_line(size_t i, char *buf, size_t n);
/* Every key and /command name, one a line (cflow-tui --list-commands). */
void tui_list_commands(FILE *f);
/* Mode switches shared by keys, commands and the loop. */
void tui_open_help(tui_app *a);
void tui_open_runs(tui_app *a, const char *filter);
void tui_focus_next(tui_app *a, int dir);

/* ---- the screen (tui_screen.c) and the input line (tui_input.c) -------- */
void tui_screen_frame(tui_app *a);      /* lay out if needed, draw, update */
void tui_screen_free(void);
void tui_input_setup(tui_app *a);       /* readline in callback mode */
void tui_input_teardown(void);
/* Bracketed paste on (1) or off (0): the terminal's mode 2004, written
 * with write(2) (async-signal-safe: restore_terminal calls it). */
void tui_input_paste_mode(int on);
/* After the keys pending were read: a paste without its end marker ends
 * once input has been idle a while (tui_input.c). */
void tui_input_tick(tui_app *a);
void tui_input_key(tui_app *a, int is_key, wint_t ch);
void tui_input_clear(void);             /* Ctrl-C when idle */
/* The window readline draws the input line into (NULL: none), set by the
 * screen after each layout; each frame redraws it through readline. */
void tui_input_window(WINDOW *w);
/* 1 when the input history did not exist yet: a first start. */
int  tui_input_first_start(void);

/* The run browser: open (reading the log), draw, keys (0: it closed). */
int  tui_runs_open(tui_app *a, const char *filter, char *err, size_t errlen);
void tui_runs_close(tui_app *a);
void tui_runs_draw(tui_app *a, WINDOW *w, int h, int wd);
int  tui_runs_key(tui_app *a, int key);

#endif
