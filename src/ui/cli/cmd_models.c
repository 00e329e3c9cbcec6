/*
 * cmd_models.c — `cflow models`: what the model cache holds, and freeing it.
 *
 *   cflow models [list]        the conversions, newest first: name, size,
 *                              when, and the source (marked when it changed
 *                              since or is gone)
 *   cflow models rm WHAT...    remove conversions: WHAT is a name from the
 *                              list, its hash (or 4+ leading digits of it),
 *                              or the source path it was made from
 *   cflow models prune         remove those whose source changed or is gone
 *   cflow models clear         remove everything
 *   cflow models dir           print the cache folder
 * ui_models.c keeps the cache; this file only talks to the user.  Every
 * WHAT is checked before anything is removed, so a typo removes nothing.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ui/cli/cli.h"

static const int models_opts[] = { UI_O_HELP, UI_O_END };

static void help(const ui_settings *d)
{
    printf("usage: cflow models [list | rm WHAT... | prune | clear | dir]\n\n"
           "The model cache: a GGUF file, a Hugging Face folder or a llama2.c\n"
           "checkpoint given to -m is converted once into $XDG_CACHE_HOME/cflow\n"
           "(default ~/.cache/cflow) and reused while its content stays the same.\n\n"
           "  list        the conversions, newest first (the default)\n"
           "  rm WHAT...  remove conversions: a NAME from the list, its hash (4 or\n"
           "              more leading digits) or the source path it came from\n"
           "  prune       remove the conversions whose source changed or is gone\n"
           "  clear       remove every conversion and interrupted leftovers\n"
           "  dir         print the cache folder\n\n");
    ui_opts_help(stdout, models_opts, d);
}

static const char *state_note(int s)
{
    return s == UI_SRC_CHANGED ? " (changed since)" : s == UI_SRC_GONE ? " (gone)" : "";
}

/* The cache's conversions; names and sources (paths from outside) printed
 * with control characters made '?' (ui_printable). */
static int list(const char *dir, ui_model_entry *e, size_t n, uint64_t partial)
{
    for (size_t i = 0; i < n; i++) {
        ui_printable(e[i].name);
        ui_printable(e[i].source);
    }
    char sz[32], when[32];
    uint64_t total = 0;
    if (n == 0 && partial == 0) {
        printf("the model cache %s is empty\n", dir);
        return UI_EXIT_OK;
    }
    int w = 4;
    for (size_t i = 0; i < n; i++)
        if ((int)strlen(e[i].name) > w)
            w = (int)strlen(e[i].name);
    if (n)
        printf("%-*s  %10s  %-16s  %s\n", w, "NAME", "SIZE", "CONVERTED", "SOURCE");
    for (size_t i = 0; i < n; i++) {
        time_t t = (time_t)e[i].converted;
        struct tm tm;
        strftime(when, sizeof when, "%Y-%m-%d %H:%M", localtime_r(&t, &tm));
        ui_models_size(e[i].size, sz, sizeof sz);
        printf("%-*s  %10s  %-16s  %s%s\n", w, e[i].name, sz, when,
               e[i].source[0] ? e[i].source : "(not recorded)", state_note(e[i].state));
        total += e[i].size;
    }
    ui_models_size(total, sz, sizeof sz);
    printf("%zu conversion%s, %s in %s", n, n == 1 ? "" : "s", sz, dir);
    if (partial) {
        ui_models_size(partial, sz, sizeof sz);
        printf("; %s left by interrupted conversions (cflow models clear frees it)", sz);
    }
    printf("\n");
    return UI_EXIT_OK;
}

/* Which entries what names: 0 with the entries marked, else a refusal. */
static int match(const char *what, const ui_model_entry *e, size_t n, unsigned char *mark)
{
    char real[PATH_MAX];
    const char *base = strrchr(what, '/') ? strrchr(what, '/') + 1 : what;
    size_t bl = strlen(base), wl = strlen(what), hits = 0;
    int have_real = realpath(what, real) != NULL;
    int hexp = wl >= 4 && wl <= 16 && strspn(what, "0123456789abcdef") == wl;
    for (size_t i = 0; i < n; i++) {
        int m = !strcmp(what, e[i].name) || !strcmp(what, e[i].cflow) ||
                (bl == strlen(e[i].name) + 6 && !strncmp(base, e[i].name, bl - 6) &&
                 !strcmp(base + bl - 6, ".cflow")) ||
                (hexp && !strncmp(what, e[i].hash, wl)) ||
                (have_real && !strcmp(real, e[i].source));
        if (m) {
            mark[i] = 1;
            hits++;
        }
    }
    /* exit 1 as rm's own refusals: the command was right, the cache differs */
    if (hits == 0)
        return ui_usage_error("models", "nothing in the cache matches '%s' ('cflow models' "
                                        "lists it)", what), UI_EXIT_ERR;
    if (hexp && hits > 1 && !have_real)
        return ui_usage_error("models", "'%s' is the start of %zu hashes: give more digits",
                              what, hits), UI_EXIT_ERR;
    return 0;
}

/* Remove the marked entries under the lock; sweep too for clear. */
static int remove_marked(const char *dir, const ui_model_entry *e, size_t n,
                         const unsigned char *mark, int sweep)
{
    char err[PATH_MAX + 128], sz[32];
    uint64_t freed = 0;
    size_t removed = 0;
    ui_models_cb cb = { ui_log, NULL, NULL, NULL };
    int lk = ui_models_lock(dir, &cb, err, sizeof err);
    if (lk < 0)
        return ui_error("%s", err);
    int rc = UI_EXIT_OK;
    for (size_t i = 0; i < n; i++) {
        if (!mark[i])
            continue;
        uint64_t before = freed;
        if (ui_models_remove(&e[i], &freed)) {
            rc = ui_error("cannot remove %s: %s", e[i].cflow, strerror(errno));
            continue;
        }
        ui_models_size(freed - before, sz, sizeof sz);
        char name[sizeof e[i].name];   /* (removed: printable is all it needs now) */
        snprintf(name, sizeof name, "%s", e[i].name);
        printf("removed %s (%s)\n", ui_printable(name), sz);
        removed++;
    }
    if (sweep)
        freed += ui_models_sweep(dir);
    ui_models_unlock(lk);
    ui_models_size(freed, sz, sizeof sz);
    printf("freed %s from %s (%zu conversion%s removed)\n", sz, dir, removed,
           removed == 1 ? "" : "s");
    return rc;
}

int ui_cmd_models(int argc, char **argv)
{
    static const ui_optset set = { "cflow models", models_opts, help, NULL, -1 };
    char dir[PATH_MAX], err[PATH_MAX + 128];
    ui_settings o;
    int rc, first;
    ui_settings_default(&o);
    if ((rc = ui_opts_parse(&set, argc, argv, &o, &first)) >= 0)
        return rc;
    argc -= first - 1;   /* the verb at argv[1], as before the options */
    argv += first - 1;
    const char *verb = argc > 1 ? argv[1] : "list";
    if (!strcmp(verb, "help")) {
        help(&o);
        return UI_EXIT_OK;
    }
    if (ui_models_dir(dir, sizeof dir, err, sizeof err))
        return ui_error("%s", err);
    if (!strcmp(verb, "dir")) {
        printf("%s\n", dir);
        return UI_EXIT_OK;
    }
    int is_rm = !strcmp(verb, "rm"), is_list = !strcmp(verb, "list");
    if (!is_rm && !is_list && strcmp(verb, "clear") && strcmp(verb, "prune"))
        return ui_usage_error("models", "unknown command '%s' (list, rm, prune, clear, dir)",
                              verb);
    if (is_rm && argc < 3)
        return ui_usage_error("models", "rm needs what to remove (a name, hash or source)");
    if (!is_rm && argc > 2)
        return ui_usage_error("models", "%s takes no arguments ('%s')", verb, argv[2]);

    ui_model_entry *e;
    size_t n;
    uint64_t partial;
    if (ui_models_list(dir, &e, &n, &partial, err, sizeof err))
        return ui_error("%s", err);
    rc = UI_EXIT_OK;
    unsigned char *mark = calloc(n + 1, 1);
    if (!mark)
        rc = ui_error("out of memory");
    else if (is_list || (n == 0 && partial == 0 && !is_rm))
        rc = list(dir, e, n, partial);
    else {
        for (int i = 2; is_rm && i < argc && rc == UI_EXIT_OK; i++)
            rc = match(argv[i], e, n, mark);
        for (size_t i = 0; i < n && !is_rm; i++)
            mark[i] = !strcmp(verb, "clear") || e[i].state == UI_SRC_CHANGED ||
                      e[i].state == UI_SRC_GONE;
        if (rc == UI_EXIT_OK)
            rc = remove_marked(dir, e, n, mark, !strcmp(verb, "clear"));
    }
    free(mark);
    free(e);
    return rc;
}
