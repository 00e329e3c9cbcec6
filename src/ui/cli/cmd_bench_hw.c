/*
 * cmd_bench_hw.c — `cflow bench membw | diskbw | l1d`: the machine's own
 * figures, no model run.  membw: the read bandwidth "% bw" divides by,
 * per thread count (ui_membw_measure), recorded in the run log's membw
 * table.  diskbw: O_DIRECT read GB/s of the storage a model lives on
 * through the expert reader (eng_disk_read), recorded in the diskbw table
 * for the storage-bound limit.  l1d: cflow's tile mat-vec against a
 * row-major one on the report's d 8192 shapes.  The settings are
 * cmd_bench.c's (bench_cfg); results go to stdout in md, csv or json,
 * notes to stderr.
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
#include "ui/cli/cmd_bench_impl.h"

/* ---- membw -------------------------------------------------------------- */
int ui_bench_membw(const bench_cfg *c)
{
    const unsigned passes = c->reps_set ? c->reps : UI_MEMBW_PASSES;
    ui_runlog *rl = ui_bench_log(c);
    int rc = rl ? UI_EXIT_OK : ui_error("out of memory");
    if (c->fmt == 0)
        printf("| threads | read GB/s (median) |   min |   max | passes | MiB per pass |\n"
               "| ------: | -----------------: | ----: | ----: | -----: | -----------: |\n");
    else if (c->fmt == 1)
        printf("n_threads,median_gb_s,min_gb_s,max_gb_s,passes,bytes\n");
    else
        printf("[\n");
    for (unsigned ti = 0; ti < c->t.n && rc == UI_EXIT_OK; ti++) {
        prof_membw r;
        if ((rc = ui_membw_measure(rl, (int)c->t.v[ti], passes, &r)))
            break;
        if (c->fmt == 0)
            printf("| %d | %.2f | %.2f | %.2f | %u | %llu |\n", r.threads, r.median_gbs,
                   r.min_gbs, r.max_gbs, r.passes, (unsigned long long)(r.bytes >> 20));
        else if (c->fmt == 1)
            printf("%d,%.3f,%.3f,%.3f,%u,%llu\n", r.threads, r.median_gbs, r.min_gbs,
                   r.max_gbs, r.passes, (unsigned long long)r.bytes);
        else
            printf("%s  { \"n_threads\": %d, \"median_gb_s\": %.3f, \"min_gb_s\": %.3f,"
                   " \"max_gb_s\": %.3f, \"passes\": %u, \"bytes\": %llu }", ti ? ",\n" : "",
                   r.threads, r.median_gbs, r.min_gbs, r.max_gbs, r.passes,
                   (unsigned long long)r.bytes);
        fflush(stdout);
    }
    if (c->fmt == 2)
        printf("\n]\n");
    if (rc == UI_EXIT_OK && ui_runlog_path(rl))
        ui_eprintf("cflow bench: read bandwidth recorded in %s\n", ui_runlog_path(rl));
    ui_runlog_free(rl);
    return rc;
}

/* ---- diskbw ------------------------------------------------------------- */
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int ui_bench_diskbw(const bench_cfg *c, const char *path, unsigned qd)
{
    const unsigned passes = c->reps_set ? (c->reps > MAXL ? MAXL : c->reps) : UI_MEMBW_PASSES;
    double gbs[MAXL];
    eng_diskbw d;
    char err[512];
    for (unsigned i = 0; i < passes; i++) {
        if (eng_disk_read(path, qd, &d, err, sizeof err))
            return ui_error("bench diskbw: %s", err);
        gbs[i] = (double)d.bytes / d.seconds / 1e9;
    }
    qsort(gbs, passes, sizeof *gbs, cmp_double);
    double med = passes % 2 ? gbs[passes / 2] : (gbs[passes / 2 - 1] + gbs[passes / 2]) / 2;
    if (c->fmt == 0)
        printf("| reader | queue depth | KiB per read | read GB/s (median) |   min |   max | "
               "passes | MiB per pass |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
               "| %s | %u | %u | %.2f | %.2f | %.2f | %u | %llu |\n", d.reader, d.qd,
               d.chunk >> 10, med, gbs[0], gbs[passes - 1], passes,
               (unsigned long long)(d.bytes >> 20));
    else if (c->fmt == 1)
        printf("reader,qd,chunk_bytes,median_gb_s,min_gb_s,max_gb_s,passes,bytes\n"
               "%s,%u,%u,%.3f,%.3f,%.3f,%u,%llu\n", d.reader, d.qd, d.chunk, med, gbs[0],
               gbs[passes - 1], passes, (unsigned long long)d.bytes);
    else
        printf("[\n  { \"reader\": \"%s\", \"qd\": %u, \"chunk_bytes\": %u, "
               "\"median_gb_s\": %.3f, \"min_gb_s\": %.3f, \"max_gb_s\": %.3f, "
               "\"passes\": %u, \"bytes\": %llu }\n]\n", d.reader, d.qd, d.chunk, med,
               gbs[0], gbs[passes - 1], passes, (unsigned long long)d.bytes);
    /* the figure the storage-bound limit divides by (ui_disk_bw) */
    ui_runlog *rl = ui_bench_log(c);
    prof_log *l = rl ? ui_runlog_log(rl) : NULL;
    struct stat st;
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    if (l && !stat(path, &st) &&
        prof_log_diskbw(l, host, (uint64_t)st.st_dev, path, med, err, sizeof err))
        ui_runlog_fail(rl, err);
    else if (l)
        ui_eprintf("cflow bench diskbw: %s: recorded in %s\n", path, prof_log_path(l));
    ui_runlog_free(rl);
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
int ui_bench_l1d(const bench_cfg *c, unsigned rows_div)
{
    static const struct { const char *name; unsigned out, in; } shp[] = {
        { "attn-proj", 8192, 8192 },   { "expert-proj", 8192, 8192 },
        { "dense-gateup", 32768, 8192 }, { "dense-down", 8192, 32768 },
    };
    const kern_ops *ops = kern_init();
    char err[256];
    prof *p = NULL;
    const char *miss_reason = "profiler unavailable";
    int have_ctr = 0;
    if (prof_new(&p, PROF_COUNTERS, 1, err, sizeof err) == 0) {
        have_ctr = prof_ev_available(p, PROF_EV_L1D_READ_MISS);
        miss_reason = prof_ev_reason(p, PROF_EV_L1D_READ_MISS);
    }
    if (!have_ctr)
        ui_eprintf("cflow bench l1d: no hardware L1D miss counts: %s\n",
                miss_reason);
    else
        fprintf(stderr, "cflow bench l1d: L1D miss counters are available, but "
                "this build times only; see `cflow run` for per-run counts\n");
    if (c->fmt == 0)
        printf("| operation | out x in | working set / L1d | tiled ms | row-major ms | "
               "speedup | L1D misses |\n| --- | --- | ---: | ---: | ---: | ---: | --- |\n");
    else if (c->fmt == 1)
        printf("operation,rows,cols,tiled_ms,tiled_sd_ms,rowmajor_ms,rowmajor_sd_ms,"
               "speedup,isa\n");
    else
        printf("[\n");
    int rc = UI_EXIT_OK;
    for (size_t si = 0; si < sizeof shp / sizeof *shp && rc == UI_EXIT_OK; si++) {
        unsigned R = shp[si].out / rows_div, C = shp[si].in;
        if (R < KERN_TILE_ROWS)
            R = KERN_TILE_ROWS;
        unsigned nrt = R / KERN_TILE_ROWS, nct = C / KERN_TILE_COLS;
        size_t tb = kern_tile_payload_size(KERN_F32, KERN_TILE_ROWS, KERN_TILE_COLS);
        float *w = malloc((size_t)R * C * sizeof *w);
        uint8_t *tiles = malloc((size_t)nrt * nct * tb);
        float *x = malloc((size_t)C * sizeof *x), *y = malloc((size_t)R * sizeof *y);
        kern_act act;
        memset(&act, 0, sizeof act);
        if (!w || !tiles || !x || !y || kern_act_init(&act, C)) {
            free(w); free(tiles); free(x); free(y); kern_act_free(&act);
            rc = ui_error("bench l1d: out of memory for %s", shp[si].name);
            break;
        }
        uint64_t rng = 7;
        for (size_t i = 0; i < (size_t)R * C; i++)
            w[i] = (float)((int)(fmt_splitmix64(&rng) >> 56) - 128) * (1.0f / 4096);
        for (unsigned i = 0; i < C; i++)
            x[i] = (float)((int)(fmt_splitmix64(&rng) >> 56) - 128) * (1.0f / 128);
        for (unsigned rt = 0; rt < nrt; rt++)
            for (unsigned ct = 0; ct < nct; ct++)
                kern_tile_pack(KERN_F32, KERN_TILE_ROWS, KERN_TILE_COLS, KERN_SRC_F32,
                               w + (size_t)rt * KERN_TILE_ROWS * C + (size_t)ct * KERN_TILE_COLS,
                               (size_t)C * sizeof(float),
                               tiles + ((size_t)rt * nct + ct) * tb);
        kern_act_set(&act, x, C, KERN_NEED(KERN_F32));
        unsigned reps = c->reps > MAXL ? MAXL : c->reps;
        double tt[MAXL], tr[MAXL], mt, sdt, mr, sdr, maxdiff = 0;
        for (unsigned k = 0; k <= reps; k++) { /* k = 0: warm-up */
            double t0 = prof_now();
            for (unsigned rt = 0; rt < nrt; rt++) {
                float *yr = y + (size_t)rt * KERN_TILE_ROWS;
                memset(yr, 0, KERN_TILE_ROWS * sizeof *yr);
                for (unsigned ct = 0; ct < nct; ct++)
                    ops->tile_mv[KERN_F32](tiles + ((size_t)rt * nct + ct) * tb,
                                           KERN_TILE_ROWS, KERN_TILE_COLS, &act,
                                           ct * KERN_TILE_COLS, yr);
            }
            double t1 = prof_now();
            for (unsigned r = 0; r < R; r++) {
                float v = ops->dot_f32(w + (size_t)r * C, x, C);
                double dd = fabs((double)v - y[r]);
                if (dd > maxdiff)
                    maxdiff = dd;
            }
            double t2 = prof_now();
            if (k) {
                tt[k - 1] = (t1 - t0) * 1e3;
                tr[k - 1] = (t2 - t1) * 1e3;
            }
        }
        ui_bench_mean_sd(tt, reps, &mt, &sdt);
        ui_bench_mean_sd(tr, reps, &mr, &sdr);
        if (maxdiff > 1e-2)
            ui_eprintf("cflow bench l1d: %s: layouts disagree by %g\n",
                    shp[si].name, maxdiff);
        double ws = (double)C * 4 / 32768.0;
        if (c->fmt == 0)
            printf("| %s | %u x %u | %.0fx | %.2f ± %.2f | %.2f ± %.2f | %.2fx | %s |\n",
                   shp[si].name, R, C, ws, mt, sdt, mr, sdr, mr / mt,
                   have_ctr ? "not measured" : "unavailable");
        else if (c->fmt == 1)
            printf("%s,%u,%u,%.4f,%.4f,%.4f,%.4f,%.4f,%s\n", shp[si].name, R, C, mt,
                   sdt, mr, sdr, mr / mt, ops->name);
        else
            printf("%s  { \"operation\": \"%s\", \"rows\": %u, \"cols\": %u, "
                   "\"tiled_ms\": %.4f, \"rowmajor_ms\": %.4f, \"speedup\": %.4f, "
                   "\"isa\": \"%s\" }", si ? ",\n" : "", shp[si].name, R, C, mt, mr,
                   mr / mt, ops->name);
        fflush(stdout);
        free(w); free(tiles); free(x); free(y);
        kern_act_free(&act);
    }
    if (c->fmt == 2)
        printf("\n]\n");
    prof_free(p);
    return rc;
}
