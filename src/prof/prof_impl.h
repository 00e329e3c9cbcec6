/*
 * prof_impl.h — private to src/prof: the profiler's structure, shared
 * between prof.c (probes, ring, totals) and prof_ctr.c (perf_event
 * counters).  Never included outside src/prof.
 *
 * Layout of struct prof:
 *
 *   ctr        counter state: per event availability and reason, and per
 *              worker thread the open groups (prof_ctr.c owns it).
 *   cur        the token being measured: its start time, counter readings
 *              at its start, and its per-stream seconds so far.
 *   run        the current run's accumulators (decoding thread only).
 *   layer_ns   [n_layers][PROF_NST] nanoseconds per layer and stream of the
 *              current run; relaxed atomics so a TUI may read them live.
 *   layer_bytes [n_layers][PROF_NST] weight bytes streamed per layer and
 *              stream in the current run; relaxed atomics as layer_ns.
 *   model      [n_layers] the analytic critical-path figures of each layer
 *              (prof_set_layer_model), has_model[n_layers] which are set.
 *   ring       PROF_RING_CAP records of PROF_TOK_WORDS 64-bit words with a
 *              sequence word each (a seqlock per slot, see prof.c).
 */
#ifndef CFLOW_PROF_IMPL_H
#define CFLOW_PROF_IMPL_H

#include <linux/perf_event.h>
#include <pthread.h>
#include <stdatomic.h>

#include "prof/prof.h"

#define PROF_TOK_WORDS (sizeof(prof_tok) / sizeof(uint64_t))
#define PROF_REASON_LEN 128

/* One perf_event group of one thread: the leader's fd and the events in
 * the order a PERF_FORMAT_GROUP read returns them. */
typedef struct prof_grp {
    int fd;
    int n;
    int ev[PROF_NEV];
} prof_grp;

typedef struct prof_thr {
    int      n_grp;
    prof_grp grp[PROF_NEV];
    int      fds[PROF_NEV];     /* every fd opened, for closing */
    int      n_fds;
} prof_thr;

typedef struct prof_ctr {
    int             on;
    int             avail[PROF_NEV];
    char            reason[PROF_NEV][PROF_REASON_LEN];
    int             paranoid;          /* perf_event_paranoid, or -99 unknown */
    int             sw_user_only;      /* software events needed exclude_kernel */
    struct perf_event_attr attr[PROF_NEV]; /* of each available event, from the
                                              probe: threads attach without
                                              calling libpfm4 again */
    prof_thr       *thr;
    int             n_thr;
    atomic_int      n_attached;
} prof_ctr;

struct prof {
    unsigned what;
    unsigned n_layers;
    prof_ctr ctr;

    struct {
        double  t0;
        int64_t ev0[PROF_NEV];
        double  st[PROF_NST];
        uint64_t bytes[PROF_NST];
        /* [n_layers][PROF_NST] this token's nanoseconds and weight bytes
         * per layer and stream, added to layer_ns/layer_bytes at its end
         * if it is a decode token: a batched prefill streams the weights
         * once for many tokens, and per-token figures that mixed the two
         * would not be what the critical path predicts */
        uint64_t *lns, *lbytes;
        uint64_t *lio;   /* [n_layers][2]: expert read ns, bytes (prof_layer_io) */
        size_t    ln;    /* words in lns, lbytes and lio: one allocation, at lns */
    } cur;

    struct {
        uint64_t gen;
        double   t0;
        uint64_t n_tok[2];
        double   sec[2];
        double   st[PROF_NST];
        int64_t  ev[PROF_NEV];
        uint64_t bytes[PROF_NST];
        uint64_t dec_bytes[PROF_NST];
        double   dec_st[PROF_NST];
        uint64_t bytes_per_token;
        double   read_bw_gbs;
    } run;

    /* [n_layers][PROF_NST] over the run's decode tokens (see cur) */
    atomic_uint_least64_t *layer_ns;
    atomic_uint_least64_t *layer_bytes;
    prof_layer_model      *model;
    unsigned char         *has_model;
    /* expert I/O per layer of the current run's decode tokens
     * (prof_layer_io): read nanoseconds and bytes, relaxed atomics as
     * layer_ns */
    atomic_uint_least64_t *layer_io_ns;
    atomic_uint_least64_t *layer_io_bytes;

    atomic_uint_least64_t  ring_head;      /* records ever written */
    atomic_uint_least64_t *ring_seq;       /* [PROF_RING_CAP] */
    atomic_uint_least64_t *ring_words;     /* [PROF_RING_CAP][PROF_TOK_WORDS] */
};

/* ---- prof_ctr.c ---- */
/* Probe every event on the calling thread (availability, reasons). */
void prof_ctr_init(prof_ctr *c, int on);
void prof_ctr_free(prof_ctr *c);
/* Sum of every attached thread's counters into ev (unavailable: -1). */
void prof_ctr_read(prof_ctr *c, int64_t ev[PROF_NEV]);

/* ---- prof_fault.c ---- */
/* The fault-injecting SQLite VFS named by $CFLOW_FAULT (runlog:enospc@N,
 * runlog:busy@N), registered on first use; NULL when none is asked for. */
const char *prof_fault_vfs(void);

#endif
