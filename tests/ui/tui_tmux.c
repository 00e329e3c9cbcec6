/*
 * tui_tmux.c — tmux for the tests that drive cflow-tui (tui_tmux.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "ui/tui_tmux.h"

void tt_start_tui(const char *sock, const char *home, int rows, const char *model,
                  const char *args)
{
    char cmd[16384], y[16];
    const char *bd = getenv("CFLOW_BUILDDIR"), *sd = getenv("CFLOW_SRCDIR");
    snprintf(cmd, sizeof cmd,
             "env -u CFLOW_MODEL HOME='%s' XDG_DATA_HOME='%s/data' LANG=C.UTF-8 "
             "LC_ALL=C.UTF-8 "
             "LSAN_OPTIONS=suppressions='%s/tests/ui/lsan.supp':print_suppressions=0 "
             "'%s/cflow-tui' -m '%s' %s",
             home, home, sd && *sd ? sd : ".", bd && *bd ? bd : ".", model, args);
    snprintf(y, sizeof y, "%d", rows);
    free(tt_tmux(sock, "new-session", "-d", "-x", "160", "-y", y, "-s", "t", cmd, NULL));
}

char *tt_tmux(const char *sock, ...)
{
    const char *argv[40] = { "/usr/bin/env", "tmux", "-u", "-L", sock, "-f", "/dev/null" };
    int n = 7;
    va_list ap;
    va_start(ap, sock);
    for (const char *a = va_arg(ap, const char *); a && n < 39; a = va_arg(ap, const char *))
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    tu_proc p;
    if (tu_run(&p, (char *const *)argv, NULL, 60))
        fail_msg("cannot run tmux");
    char *out = p.out;
    p.out = NULL;
    tu_proc_free(&p);
    return out;
}

void tt_send_line(const char *sock, const char *text)
{
    free(tt_tmux(sock, "send-keys", "-t", "t", "-l", text, NULL));
    free(tt_tmux(sock, "send-keys", "-t", "t", "Enter", NULL));
}

void tt_kill(char *sock)
{
    if (sock[0])
        free(tt_tmux(sock, "kill-server", NULL));
    sock[0] = 0;
}

char *tt_chat_text(const char *scr)
{
    static const char bar[] = "\u2502";   /* the box's vertical */
    size_t n = strlen(scr);
    char *o = malloc(n + 1), *q = o;
    if (!o)
        fail_msg("out of memory");
    for (const char *p = scr; *p;) {
        const char *eol = strchr(p, '\n');
        if (!eol)
            eol = p + strlen(p);
        if (!strncmp(p, bar, 3)) {
            const char *t = p + 3, *e = strstr(t, bar);
            if (!e || e > eol)
                e = eol;
            for (; t < e; t++)
                if (*t != ' ' || (q > o && q[-1] != ' '))
                    *q++ = *t;
            if (q > o && q[-1] != ' ')
                *q++ = ' ';
        }
        p = *eol ? eol + 1 : eol;
    }
    *q = 0;
    return o;
}
