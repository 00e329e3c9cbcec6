/*
 * test_man.c — the man pages against today's limits.  `cflow run --help`,
 * `cflow bench --help`, `cflow ppl --help`, `cflow serve --help` and
 * `cflow-tui --help` are built from the one option table
 * (src/ui/common/ui_opt.c); every option they list must have an entry in
 * its section of man/cflow.1 or man/cflow-tui.1, that entry must give the
 * option's range (both ends, as numbers), say "random seed" where the
 * default seed is random, and name $CFLOW_MODEL where the default model is
 * the shipped one.  And every key and /command of
 * cflow-tui's tables (`cflow-tui --list-commands`) has its entry in
 * man/cflow-tui.1's KEYS and COMMANDS, and every command there is one the
 * TUI has.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* One option of a --help text: its long name and its whole description
 * (the wrapped lines joined). */
typedef struct hopt {
    char name[64];
    char desc[1024];
} hopt;

/* The options of a --help text into o[max]; returns their count. */
static int help_opts(const char *help, hopt *o, int max)
{
    int n = 0;
    for (const char *l = help; *l && n < max; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : "") {
        size_t len = strcspn(l, "\n");
        const char *dd = memmem(l, len, "--", 2);
        /* "  -x, --name ARG   text" or "      --name ARG   text" */
        if (dd && l[0] == ' ' && l[1] == ' ' && dd - l == 6 &&
            (l[2] == '-' || l[2] == ' ')) {
            hopt *h = &o[n++];
            sscanf(dd + 2, "%63[a-z0-9-]", h->name);
            const char *t = dd + 2 + strlen(h->name);
            while (t < l + len && *t == ' ')
                t++;
            while (t < l + len && *t != ' ')   /* the argument's name */
                t++;
            snprintf(h->desc, sizeof h->desc, "%.*s", (int)(l + len - t), t);
        } else if (n > 0 && len > 25 && strspn(l, " ") >= 20) {
            hopt *h = &o[n - 1];
            size_t dl = strlen(h->desc);
            snprintf(h->desc + dl, sizeof h->desc - dl, " %.*s", (int)(len - strspn(l, " ")),
                     l + strspn(l, " "));
        }
    }
    return n;
}

/* The range a description gives ("from A (words) to B", "of A (...) to
 * B"): 1 with both ends, else 0. */
static int help_range(const char *d, double *lo, double *hi)
{
    for (const char *t = strstr(d, " to "); t; t = strstr(t + 1, " to ")) {
        char *end;
        *hi = strtod(t + 4, &end);
        if (end == t + 4)
            continue;
        const char *b = t;
        if (b[-1] == ')') {   /* "0 (all cores) to" */
            while (b > d && *b != '(')
                b--;
            b--;
        }
        while (b > d && b[-1] != ' ')
            b--;
        *lo = strtod(b, &end);
        if (end != b)
            return 1;
    }
    return 0;
}

/* The text of a man page from the line starting with start up to the next
 * line starting with stop (malloc'd), NULL when start is absent. */
static char *section(const char *man, const char *start, const char *stop)
{
    const char *a = strstr(man, start);
    if (!a)
        return NULL;
    const char *b = strstr(a + strlen(start), stop);
    size_t n = b ? (size_t)(b - a) : strlen(a);
    char *s = malloc(n + 1);
    memcpy(s, a, n);
    s[n] = 0;
    return s;
}

/* The entry of --name in sec: from its .It line to the next .It or .El
 * (malloc'd), NULL when there is none. */
static char *entry(const char *sec, const char *name)
{
    char want[96];
    snprintf(want, sizeof want, "\\-");
    for (const char *p = name; *p; p++) {
        size_t l = strlen(want);
        if (*p == '-')
            snprintf(want + l, sizeof want - l, "\\-");
        else
            snprintf(want + l, sizeof want - l, "%c", *p);
    }
    for (const char *it = strstr(sec, ".It "); it; it = strstr(it + 1, "\n.It ")) {
        const char *eol = strchr(it + 1, '\n');
        const char *hit = strstr(it, want);
        if (!hit || !eol || hit > eol)
            continue;
        char c = hit[strlen(want)];
        if (isalnum((unsigned char)c) || c == '\\')   /* --top-k is not --top */
            continue;
        const char *next = strstr(eol, "\n.It "), *el = strstr(eol, "\n.El");
        const char *end = next && (!el || next < el) ? next : el ? el : eol + strlen(eol);
        char *e = malloc((size_t)(end - it) + 1);
        memcpy(e, it, (size_t)(end - it));
        e[end - it] = 0;
        return e;
    }
    return NULL;
}

/* Whether the number v is written in text (as a number of its own). */
static int has_number(const char *text, double v)
{
    for (const char *p = text; *p; p++) {
        if (!isdigit((unsigned char)*p) || (p > text && (isalnum((unsigned char)p[-1]) ||
                                                         p[-1] == '.')))
            continue;
        char *end;
        double x = strtod(p, &end);
        if (x == v)
            return 1;
        p = end - 1;
    }
    return 0;
}

/* prog's --help against its section of a man page; returns the number of
 * disagreements, each printed. */
static int check(const char *prog, const char *sub, const char *manfile, const char *start,
                 const char *stop)
{
    char *argv[] = { (char *)prog, (char *)sub, "--help", NULL };
    if (!sub) {
        argv[1] = "--help";
        argv[2] = NULL;
    }
    tu_proc p;
    assert_int_equal(tu_run(&p, argv, NULL, 60), 0);
    assert_true(tu_ok(&p, "--help"));
    const char *sd = getenv("CFLOW_SRCDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/man/%s", sd ? sd : "..", manfile);
    char *man = tu_read_file(path, NULL);
    assert_non_null(man);
    char *sec = section(man, start, stop);
    assert_non_null(sec);
    hopt o[64];
    int n = help_opts(p.out, o, 64), bad = 0;
    if (n < 5)
        print_error("%s %s --help: %d options read:\n%s\n", prog, sub ? sub : "", n, p.out);
    assert_true(n >= 5);
    for (int i = 0; i < n; i++) {
        if (!strcmp(o[i].name, "help") || !strcmp(o[i].name, "version"))
            continue;
        char *e = entry(sec, o[i].name);
        double lo, hi;
        if (!e) {
            print_error("%s: no entry for --%s in %s\n", manfile, o[i].name, start);
            bad++;
            continue;
        }
        if (help_range(o[i].desc, &lo, &hi) && (!has_number(e, lo) || !has_number(e, hi))) {
            print_error("%s: --%s's entry lacks the range %g to %g (--help: %s):\n%s\n",
                        manfile, o[i].name, lo, hi, o[i].desc, e);
            bad++;
        }
        if (strstr(o[i].desc, "default random") && !strstr(e, "random seed")) {
            print_error("%s: --%s's entry does not say the default is random:\n%s\n",
                        manfile, o[i].name, e);
            bad++;
        }
        if (strstr(o[i].desc, "$CFLOW_MODEL") && !strstr(e, "CFLOW_MODEL")) {
            print_error("%s: --%s's entry does not name the default model:\n%s\n", manfile,
                        o[i].name, e);
            bad++;
        }
        free(e);
    }
    free(sec);
    free(man);
    tu_proc_free(&p);
    return bad;
}

static void test_man_matches_help(void **state)
{
    (void)state;
    const char *bd = getenv("CFLOW_BUILDDIR");
    char tui[4096];
    snprintf(tui, sizeof tui, "%s/cflow-tui", bd && *bd ? bd : ".");
    int bad = check(tu_cflow(), "run", "cflow.1", ".Ss cflow run", "\n.Ss ");
    bad += check(tu_cflow(), "bench", "cflow.1", ".Ss cflow bench", "\n.Ss cflow ppl");
    bad += check(tu_cflow(), "ppl", "cflow.1", ".Ss cflow ppl", "\n.Ss ");
    bad += check(tu_cflow(), "serve", "cflow.1", ".Ss cflow serve", "\n.Sh ");
    bad += check(tui, NULL, "cflow-tui.1", ".Sh OPTIONS", "\n.Sh ");
    assert_int_equal(bad, 0);
}

/* The tokens of the .It lines of section sec of man/cflow-tui.1, each
 * surrounded by spaces ("\-" read as "-", continued lines joined,
 * commas apart): " Ic /quit , /exit ". */
static char *man_items(const char *man, const char *sec)
{
    char head[64];
    snprintf(head, sizeof head, "\n.Sh %s\n", sec);
    char *body = section(man, head, "\n.Sh ");
    assert_non_null(body);
    const char *p = body + strlen(head);
    size_t n = strlen(p);
    char *out = calloc(2 * n + 2, 1);
    assert_non_null(out);
    size_t o = 0;
    int in_it = 0, bol = 1;
    out[o++] = ' ';
    for (size_t i = 0; i < n; i++) {
        if (bol)
            in_it = !strncmp(p + i, ".It ", 4);
        bol = 0;
        if (p[i] == '\\' && p[i + 1] == '\n') {   /* a continued line */
            i++;
            continue;
        }
        if (p[i] == '\n') {
            bol = 1;
            if (in_it)
                out[o++] = ' ';
            continue;
        }
        if (!in_it)
            continue;
        if (p[i] == '\\' && p[i + 1] == '-') {
            out[o++] = '-';
            i++;
        } else if (p[i] == ',') {
            out[o++] = ' ';
            out[o++] = ',';
            out[o++] = ' ';
        } else {
            out[o++] = p[i];
        }
    }
    out[o] = 0;
    free(body);
    return out;
}

static int has_token(const char *items, const char *tok)
{
    char t[256];
    snprintf(t, sizeof t, " %.200s ", tok);
    return strstr(items, t) != NULL;
}

/* Every key and /command of the TUI's tables (the help screen is built
 * from them) is in the man page's KEYS and COMMANDS, and every command
 * there is one the TUI has. */
static void test_man_tui_tables(void **state)
{
    (void)state;
    const char *bd = getenv("CFLOW_BUILDDIR"), *sd = getenv("CFLOW_SRCDIR");
    char bin[4096], manp[4096];
    snprintf(bin, sizeof bin, "%s/cflow-tui", bd ? bd : ".");
    snprintf(manp, sizeof manp, "%s/man/cflow-tui.1", sd ? sd : "..");
    char *argv[] = { bin, "--list-commands", NULL };
    tu_proc p;
    assert_int_equal(tu_run(&p, argv, NULL, 60), 0);
    assert_int_equal(p.status, 0);
    char *man = tu_read_file(manp, NULL);
    assert_non_null(man);
    char *keys_sec = man_items(man, "KEYS"), *cmds_sec = man_items(man, "COMMANDS");
    int nkeys = 0, ncmds = 0, missing = 0;
    for (char *line = strtok(p.out, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strncmp(line, "command ", 8)) {
            ncmds++;
            if (!has_token(cmds_sec, line + 8)) {
                print_error("man/cflow-tui.1 COMMANDS lacks %s\n", line + 8);
                missing++;
            }
            continue;
        }
        assert_true(!strncmp(line, "key ", 4));
        nkeys++;
        char names[128];
        snprintf(names, sizeof names, "%s", line + 4);
        for (char *k = names, *next; k; k = next) {   /* "Alt-Enter, Ctrl-J" */
            next = strstr(k, ", ");
            if (next) {
                *next = 0;
                next += 2;
            }
            if (!has_token(keys_sec, k)) {
                print_error("man/cflow-tui.1 KEYS lacks %s\n", k);
                missing++;
            }
        }
    }
    assert_true(nkeys >= 15);
    assert_true(ncmds >= 25);
    /* the other way: no command in the page that the TUI does not have */
    char *list = NULL;
    tu_proc q;
    assert_int_equal(tu_run(&q, argv, NULL, 60), 0);
    list = q.out;
    for (const char *t = strstr(cmds_sec, " /"); t; t = strstr(t + 1, " /")) {
        char name[64], want[80];
        sscanf(t + 1, "%63s", name);
        snprintf(want, sizeof want, "command %s\n", name);
        if (!strstr(list, want)) {
            print_error("man/cflow-tui.1 COMMANDS has %s, which cflow-tui lacks\n", name);
            missing++;
        }
    }
    assert_int_equal(missing, 0);
    tu_proc_free(&q);
    tu_proc_free(&p);
    free(keys_sec);
    free(cmds_sec);
    free(man);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_man_matches_help),
        cmocka_unit_test(test_man_tui_tables),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
