/*
 * fuzz_replay.c — main() for a fuzz target outside libFuzzer: feeds every
 * seed and every regression input to LLVMFuzzerTestOneInput once, so that
 * `make check` (normal and sanitizer builds, gcc or clang) runs the corpora
 * through the real parsers.
 *
 *   replay_NAME                 tests/fuzz/corpus/NAME and
 *                               tests/fuzz/regressions/NAME under
 *                               $CFLOW_SRCDIR (default: the configured
 *                               source tree)
 *   replay_NAME FILE|DIR...     just those (reproducing one crash)
 *
 * The corpus folder must exist and hold inputs (a missing corpus is a
 * failure, not a skip); the regressions folder may be absent.  Any input
 * that trips a check aborts the program, which names the file first.
 */
#include "config.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "fuzz.h"

#ifndef FUZZ_NAME
#error "FUZZ_NAME (the target's name) must be defined"
#endif
#ifndef FUZZ_SRCDIR
#define FUZZ_SRCDIR "."
#endif

/* libFuzzer calls this when a target defines it; so do we. */
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);

static int n_run;

static void run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay_%s: cannot open %s\n", FUZZ_NAME, path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    /* exactly n bytes on the heap, as libFuzzer passes them */
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf || (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n)) {
        fprintf(stderr, "replay_%s: cannot read %s\n", FUZZ_NAME, path);
        exit(1);
    }
    fclose(f);
    struct timespec a, b;
    fprintf(stderr, "replay_%s: %s (%ld bytes) ...", FUZZ_NAME, path, n);
    clock_gettime(CLOCK_MONOTONIC, &a);
    LLVMFuzzerTestOneInput(buf, (size_t)n);
    clock_gettime(CLOCK_MONOTONIC, &b);
    fprintf(stderr, " ok, %.3f s\n",
            (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9);
    free(buf);
    n_run++;
}

static int cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Run path (a file, or every file in a folder, sorted).  Returns 0, or -1
 * when it does not exist. */
static int run_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return -1;
    if (!S_ISDIR(st.st_mode)) {
        run_file(path);
        return 0;
    }
    DIR *d = opendir(path);
    if (!d)
        return -1;
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')      /* ".", "..", .gitignore, .keep */
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            names = realloc(names, cap * sizeof *names);
            if (!names)
                abort();
        }
        size_t l = strlen(path) + strlen(e->d_name) + 2;
        names[n] = malloc(l);
        if (!names[n])
            abort();
        snprintf(names[n], l, "%s/%s", path, e->d_name);
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp);
    for (size_t i = 0; i < n; i++) {
        if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode))
            run_file(names[i]);
        free(names[i]);
    }
    free(names);
    return 0;
}

int main(int argc, char **argv)
{
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    if (argc > 1) {
        for (int i = 1; i < argc; i++)
            if (run_path(argv[i]) < 0) {
                fprintf(stderr, "replay_%s: %s: not found\n", FUZZ_NAME,
                        argv[i]);
                return 1;
            }
        return 0;
    }
    const char *src = getenv("CFLOW_SRCDIR");
    if (!src || !*src)
        src = FUZZ_SRCDIR;
    char corpus[4096], regr[4096];
    snprintf(corpus, sizeof corpus, "%s/tests/fuzz/corpus/%s", src,
             FUZZ_NAME);
    snprintf(regr, sizeof regr, "%s/tests/fuzz/regressions/%s", src,
             FUZZ_NAME);
    if (run_path(corpus) < 0 || n_run == 0) {
        fprintf(stderr, "replay_%s: no seed corpus in %s\n", FUZZ_NAME,
                corpus);
        return 1;
    }
    int seeds = n_run;
    (void)run_path(regr);
    printf("replay_%s: %d seeds and %d regression inputs passed\n",
           FUZZ_NAME, seeds, n_run - seeds);
    return 0;
}
