/*
 * cmd_bench_hw.c — `cflow bench membw | diskbw | l1d`: the machine's own
 * figures, no model run.  membw: the read bandwidth "% bw" divides by,
 * per thread count (ui_membw_measure), recorded in the run log's membw
 * table.  diskbw: O_DIRECT read GB/s of the storage a model lives on
 * through the expert reader (eng_disk_read), recorded in the diskbw table
 * for the storage-bound limit.  l1d: cflow's tile mat-vec against a
 * row-major one on the report's d 8192 shapes.  The settings are
 * bench_cfg's (cmd_bench.c); each mode's results are a column table
 * (cli_table.c) on stdout in md, csv or json, notes on stderr.
 *
 * "The report" (with its section numbers) is the Pipeline-Native
 * Transformers report.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"
#include "kernels/kern.h"
#include "prof/prof.h"
#include "ui/cli/cli.h"
#include "ui/cli/bench_impl.h"

/* ---- the read bandwidth's columns (membw, diskbw) ------------------------
 * Both tables end with the median GB/s of the passes, their min and max,
 * how many passes, and the bytes a pass read (MiB in the md table). */
enum { BW_MEDIAN, BW_MIN, BW_MAX, BW_PASSES, BW_MIB, BW_BYTES, BW_N };
#define BW_COLS                                                 \
    { "median_gb_s", "read GB/s (median)", UI_TAB_ALL, 'n' },   \
    { "min_gb_s", "min", UI_TAB_ALL, 'n' },                     \
    { "max_gb_s", "max", UI_TAB_ALL, 'n' },                     \
    { "passes", NULL, UI_TAB_ALL, 'n' },                        \
    { "MiB per pass", NULL, UI_TAB_MD, 'n' },                   \
    { "bytes", NULL, UI_TAB_DATA, 'n' }

/* Those cells from column c0 on: GB/s with three decimals in the data,
 * two in the table. */
static void bw_cells(ui_tab *t, unsigned c0, double med, double lo, double hi, unsigned passes,
                     uint64_t bytes)
{
    const double gbs[3] = { med, lo, hi };
    for (unsigned k = 0; k < 3; k++) {
        ui_tab_set(t, c0 + BW_MEDIAN + k, "%.3f", gbs[k]);
        ui_tab_md(t, c0 + BW_MEDIAN + k, "%.2f", gbs[k]);
    }
    ui_tab_set(t, c0 + BW_PASSES, "%u", passes);
    ui_tab_set(t, c0 + BW_MIB, "%llu", (unsigned long long)(bytes >> 20));
    ui_tab_set(t, c0 + BW_BYTES, "%llu", (unsigned long long)bytes);
}

/* ---- membw -------------------------------------------------------------- */
enum { MB_THREADS, MB_BW, MB_N = MB_BW + BW_N };
static const ui_col membw_cols[MB_N] = { { "n_threads", "threads", UI_TAB_ALL, 'n' }, BW_COLS };

int ui_bench_membw(const bench_cfg *c)
{
    const unsigned passes = c->reps_set ? c->reps : UI_MEMBW_PASSES;
    ui_runlog *rl = ui_bench_log(c);
    ui_tab t;
    int rc = rl ? UI_EXIT_OK : ui_error("out of memory");
    ui_tab_init(&t, c->fmt, membw_cols, MB_N);
    for (unsigned ti = 0; ti < c->t.n && rc == UI_EXIT_OK; ti++) {
        prof_membw r;
        if ((rc = ui_membw_measure(rl, (int)c->t.v[ti], passes, &r)))
            break;
        ui_tab_set(&t, MB_THREADS, "%d", r.threads);
        bw_cells(&t, MB_BW, r.median_gbs, r.min_gbs, r.max_gbs, r.passes, r.bytes);
        ui_tab_row(&t);
    }
    ui_tab_end(&t, rc == UI_EXIT_OK);
    if (rc == UI_EXIT_OK && ui_runlog_path(rl))
        ui_eprintf("cflow bench: read bandwidth recorded in %s\n", ui_runlog_path(rl));
    ui_runlog_free(rl);
    return rc;
}

/* ---- diskbw ------------------------------------------------------------- */
enum { DB_READER, DB_QD, DB_KIB, DB_CHUNK, DB_BW, DB_N = DB_BW + BW_N };
static const ui_col diskbw_cols[DB_N] = {
    { "reader", NULL, UI_TAB_ALL, 'w' },
    { "qd", "queue depth", UI_TAB_ALL, 'n' },
    { "KiB per read", NULL, UI_TAB_MD, 'n' },
    { "chunk_bytes", NULL, UI_TAB_DATA, 'n' },
    BW_COLS
};

/* The median recorded for path's device on this host (ui_disk_bw reads
 * it for the storage-bound limit). */
static void diskbw_record(const bench_cfg *c, const char *path, double med)
{
    char err[512], host[256] = "";
    struct stat st;
    ui_runlog *rl = ui_bench_log(c);
    prof_log *l = rl ? ui_runlog_log(rl) : NULL;
    gethostname(host, sizeof host - 1);
    if (l && !stat(path, &st) &&
        prof_log_diskbw(l, host, (uint64_t)st.st_dev, path, med, err, sizeof err))
        ui_runlog_fail(rl, err);
    else if (l)
        ui_eprintf("cflow bench diskbw: %s: recorded in %s\n", path, prof_log_path(l));
    ui_runlog_free(rl);
}

int ui_bench_diskbw(const bench_cfg *c, const char *path)
{
    const unsigned passes = c->reps_set ? (c->reps > MAXL ? MAXL : c->reps) : UI_MEMBW_PASSES;
    double gbs[MAXL];
    eng_diskbw d;
    char err[512];
    for (unsigned i = 0; i < passes; i++) {
        if (eng_disk_read(path, c->qd, &d, err, sizeof err))
            return ui_error("bench diskbw: %s", err);
        gbs[i] = (double)d.bytes / d.seconds / 1e9;
    }
    double med = ui_tab_median(gbs, passes);   /* gbs sorted: min first, max last */
    ui_tab t;
    ui_tab_init(&t, c->fmt, diskbw_cols, DB_N);
    ui_tab_set(&t, DB_READER, "%s", d.reader);
    ui_tab_set(&t, DB_QD, "%u", d.qd);
    ui_tab_set(&t, DB_KIB, "%u", d.chunk >> 10);
    ui_tab_set(&t, DB_CHUNK, "%u", d.chunk);
    bw_cells(&t, DB_BW, med, gbs[0], gbs[passes - 1], passes, d.bytes);
    ui_tab_row(&t);
    ui_tab_end(&t, 1);
    diskbw_record(c, path, med);
    return UI_EXIT_OK;
}

/* ---- l1d: tiled vs row-major mat-vec ------------------------------------ */
/*
 * The report's Table 5.1 shapes at d 8192 (out x in): attn-proj 8192 x 8192,
 * expert-proj 8192 x 8192, dense-gateup 32768 x 8192, dense-down
 * 8192 x 32768.  Both layouts hold the same f32 weights and run the same
 * ISA's SIMD code: "tiled" is cflow's 128 x 256 tile kernel over tiles in
 * file order (a tile's 256 activation lanes stay in L1 across its 128
 * rows); "row-major" is one dot_f32 per output row over the whole input (the
 * activation streams through L1 once per row).  f32 keeps the arithmetic
 * identical between the two; it also makes both more bandwidth-bound than
 * Q4_0 would.  --rows-div K divides the output rows (for quick runs).
 */
enum { L1_OP, L1_SHAPE, L1_ROWS, L1_COLS, L1_WS, L1_TILED, L1_TILED_SD, L1_ROWMAJ,
       L1_ROWMAJ_SD, L1_SPEEDUP, L1_MISSES, L1_ISA, L1_N };
static const ui_col l1d_cols[L1_N] = {
    { "operation", NULL, UI_TAB_ALL, 'w' },
    { "out x in", NULL, UI_TAB_MD, 'w' },
    { "rows", NULL, UI_TAB_DATA, 'n' },
    { "cols", NULL, UI_TAB_DATA, 'n' },
    { "working set / L1d", NULL, UI_TAB_MD, 'n' },
    { "tiled_ms", "tiled ms", UI_TAB_ALL, 'n' },
    { "tiled_sd_ms", NULL, UI_TAB_DATA, 'n' },
    { "rowmajor_ms", "row-major ms", UI_TAB_ALL, 'n' },
    { "rowmajor_sd_ms", NULL, UI_TAB_DATA, 'n' },
    { "speedup", NULL, UI_TAB_ALL, 'n' },
    { "L1D misses", NULL, UI_TAB_MD, 'w' },
    { "isa", NULL, UI_TAB_DATA, 'w' },
};

/* One shape R x C: both layouts timed reps times after a warm-up, in ms
 * (mean and sd each); the largest difference of their outputs in *diff.
 * 0, or -1 when out of memory. */
static int l1d_shape(const kern_ops *ops, unsigned R, unsigned C, unsigned reps,
                     double ms[4], double *diff)
{
    unsigned nrt = R / KERN_TILE_ROWS, nct = C / KERN_TILE_COLS;
    size_t tb = kern_tile_payload_size(KERN_F32, KERN_TILE_ROWS, KERN_TILE_COLS);
    float *w = malloc((size_t)R * C * sizeof *w);
    uint8_t *tiles = malloc((size_t)nrt * nct * tb);
    float *x = malloc((size_t)C * sizeof *x), *y = malloc((size_t)R * sizeof *y);
    double tt[MAXL], tr[MAXL];
    kern_act act;
    int rc = -1;
    memset(&act, 0, sizeof act);
    if (!w || !tiles || !x || !y || kern_act_init(&act, C))
        goto out;
    uint64_t rng = 7;
    for (size_t i = 0; i < (size_t)R * C; i++)
        w[i] = (float)((int)(fmt_splitmix64(&rng) >> 56) - 128) * (1.0f / 4096);
    for (unsigned i = 0; i < C; i++)
        x[i] = (float)((int)(fmt_splitmix64(&rng) >> 56) - 128) * (1.0f / 128);
    for (unsigned rt = 0; rt < nrt; rt++)
        for (unsigned ct = 0; ct < nct; ct++)
            kern_tile_pack(KERN_F32, KERN_TILE_ROWS, KERN_TILE_COLS, KERN_SRC_F32,
                           w + (size_t)rt * KERN_TILE_ROWS * C + (size_t)ct * KERN_TILE_COLS,
                           (size_t)C * sizeof(float), tiles + ((size_t)rt * nct + ct) * tb);
    kern_act_set(&act, x, C, KERN_NEED(KERN_F32));
    *diff = 0;
    for (unsigned k = 0; k <= reps; k++) {   /* k = 0: warm-up */
        double t0 = prof_now();
        for (unsigned rt = 0; rt < nrt; rt++) {
            float *yr = y + (size_t)rt * KERN_TILE_ROWS;
            memset(yr, 0, KERN_TILE_ROWS * sizeof *yr);
            for (unsigned ct = 0; ct < nct; ct++)
                ops->tile_mv[KERN_F32](tiles + ((size_t)rt * nct + ct) * tb, KERN_TILE_ROWS,
                                       KERN_TILE_COLS, &act, ct * KERN_TILE_COLS, yr);
        }
        double t1 = prof_now();
        for (unsigned r = 0; r < R; r++) {
            double dd = fabs((double)ops->dot_f32(w + (size_t)r * C, x, C) - y[r]);
            *diff = dd > *diff ? dd : *diff;
        }
        double t2 = prof_now();
        if (k) {
            tt[k - 1] = (t1 - t0) * 1e3;
            tr[k - 1] = (t2 - t1) * 1e3;
        }
    }
    ui_tab_mean_sd(tt, reps, &ms[0], &ms[1]);
    ui_tab_mean_sd(tr, reps, &ms[2], &ms[3]);
    rc = 0;
out:
    free(w);
    free(tiles);
    free(x);
    free(y);
    kern_act_free(&act);
    return rc;
}

/* Whether the L1D miss counter can be read here, said on stderr. */
static int l1d_counters(void)
{
    char err[256];
    prof *p = NULL;
    const char *why = "profiler unavailable";
    int have = 0;
    if (prof_new(&p, PROF_COUNTERS, 1, err, sizeof err) == 0) {
        have = prof_ev_available(p, PROF_EV_L1D_READ_MISS);
        why = prof_ev_reason(p, PROF_EV_L1D_READ_MISS);
    }
    if (!have)
        ui_eprintf("cflow bench l1d: no hardware L1D miss counts: %s\n", why);
    else
        fprintf(stderr, "cflow bench l1d: L1D miss counters are available, but "
                "this build times only; see `cflow run` for per-run counts\n");
    prof_free(p);
    return have;
}

int ui_bench_l1d(const bench_cfg *c)
{
    static const struct { const char *name; unsigned out, in; } shp[] = {
        { "attn-proj", 8192, 8192 },   { "expert-proj", 8192, 8192 },
        { "dense-gateup", 32768, 8192 }, { "dense-down", 8192, 32768 },
    };
    const kern_ops *ops = kern_init();
    const int have_ctr = l1d_counters();
    const unsigned reps = c->reps > MAXL ? MAXL : c->reps;
    int rc = UI_EXIT_OK;
    ui_tab t;
    ui_tab_init(&t, c->fmt, l1d_cols, L1_N);
    for (size_t si = 0; si < sizeof shp / sizeof *shp && rc == UI_EXIT_OK; si++) {
        unsigned R = shp[si].out / c->rows_div, C = shp[si].in;
        double ms[4], diff;
        if (R < KERN_TILE_ROWS)
            R = KERN_TILE_ROWS;
        if (l1d_shape(ops, R, C, reps, ms, &diff)) {
            rc = ui_error("bench l1d: out of memory for %s", shp[si].name);
            break;
        }
        if (diff > 1e-2)
            ui_eprintf("cflow bench l1d: %s: layouts disagree by %g\n", shp[si].name, diff);
        ui_tab_set(&t, L1_OP, "%s", shp[si].name);
        ui_tab_set(&t, L1_SHAPE, "%u x %u", R, C);
        ui_tab_set(&t, L1_ROWS, "%u", R);
        ui_tab_set(&t, L1_COLS, "%u", C);
        ui_tab_set(&t, L1_WS, "%.0fx", (double)C * 4 / 32768.0);
        ui_tab_set(&t, L1_TILED, "%.4f", ms[0]);
        ui_tab_md(&t, L1_TILED, "%.2f ± %.2f", ms[0], ms[1]);
        ui_tab_set(&t, L1_TILED_SD, "%.4f", ms[1]);
        ui_tab_set(&t, L1_ROWMAJ, "%.4f", ms[2]);
        ui_tab_md(&t, L1_ROWMAJ, "%.2f ± %.2f", ms[2], ms[3]);
        ui_tab_set(&t, L1_ROWMAJ_SD, "%.4f", ms[3]);
        ui_tab_set(&t, L1_SPEEDUP, "%.4f", ms[2] / ms[0]);
        ui_tab_md(&t, L1_SPEEDUP, "%.2fx", ms[2] / ms[0]);
        ui_tab_set(&t, L1_MISSES, "%s", have_ctr ? "not measured" : "unavailable");
        ui_tab_set(&t, L1_ISA, "%s", ops->name);
        ui_tab_row(&t);
    }
    ui_tab_end(&t, rc == UI_EXIT_OK);
    return rc;
}
