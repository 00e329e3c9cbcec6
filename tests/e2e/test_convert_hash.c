/*
 * test_convert_hash.c — `cflow convert` and `cflow synth` keep writing the
 * bytes they wrote before the writers were made to stream (issue 17).
 *
 * tests/data/convert/hashes.txt holds, per line, the sha256 of one output
 * and the command that made it; each is run again through the real binary
 * into a scratch folder and the output hashed with sha256sum.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define MAX_ARGS 24

/* One argument of the table with its @S/, @D/ and @T/ prefix expanded. */
static char *expand(const char *a)
{
    const char *src = getenv("CFLOW_SRCDIR");
    char buf[4096];
    if (!strncmp(a, "@S/", 3))
        snprintf(buf, sizeof buf, "%s", tu_shared(a + 3));
    else if (!strncmp(a, "@D/", 3))
        snprintf(buf, sizeof buf, "%s/tests/data/%s", src ? src : ".", a + 3);
    else if (!strncmp(a, "@T/", 3))
        snprintf(buf, sizeof buf, "%s", tu_tmp(a + 3));
    else
        snprintf(buf, sizeof buf, "%s", a);
    return strdup(buf);
}

/* The sha256 of path in hex (65 bytes with the NUL), through sha256sum. */
static int sha256_of(const char *path, char hex[65])
{
    char *argv[] = { "/usr/bin/env", "sha256sum", (char *)path, NULL };
    tu_proc p;
    if (tu_run(&p, argv, NULL, 120) != 0 || !tu_ok(&p, "sha256sum") ||
        p.out_len < 64) {
        tu_proc_free(&p);
        return -1;
    }
    memcpy(hex, p.out, 64);
    hex[64] = '\0';
    tu_proc_free(&p);
    return 0;
}

/* Run one table line; 1 when its output has the recorded hash. */
static int check_line(char *line, int lineno)
{
    char *tok[MAX_ARGS + 2], *save = NULL;
    int n = 0;
    for (char *t = strtok_r(line, " \t\n", &save); t && n < MAX_ARGS + 2;
         t = strtok_r(NULL, " \t\n", &save))
        tok[n++] = t;
    if (n < 4 || strlen(tok[0]) != 64) {
        fprintf(stderr, "hashes.txt:%d: malformed line\n", lineno);
        return 0;
    }
    char *argv[MAX_ARGS + 2];
    int a = 0;
    argv[a++] = (char *)tu_cflow();
    for (int i = 2; i < n && a < MAX_ARGS; i++)
        argv[a++] = expand(tok[i]);
    char *out = strdup(tu_tmp(tok[1]));
    argv[a++] = out;
    argv[a] = NULL;
    tu_proc p;
    int ok = tu_run(&p, argv, NULL, 300) == 0 && tu_ok(&p, tok[2]);
    tu_proc_free(&p);
    char hex[65];
    if (ok && sha256_of(out, hex) == 0) {
        ok = strcmp(hex, tok[0]) == 0;
        if (!ok)
            fprintf(stderr, "hashes.txt:%d: %s %s: sha256 %s, recorded %s\n",
                    lineno, tok[2], tok[1], hex, tok[0]);
    } else {
        ok = 0;
    }
    for (int i = 1; i < a; i++)
        free(argv[i]);
    return ok;
}

static void test_outputs_keep_their_bytes(void **state)
{
    (void)state;
    const char *src = getenv("CFLOW_SRCDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/convert/hashes.txt", src ? src : ".");
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[2048];
    int lineno = 0, checked = 0, bad = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (line[0] == '#' || line[0] == '\n')
            continue;
        checked++;
        bad += !check_line(line, lineno);
    }
    fclose(f);
    assert_true(checked >= 10);
    assert_int_equal(bad, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outputs_keep_their_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
