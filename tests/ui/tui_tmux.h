/*
 * tui_tmux.h — tmux for the tests that drive cflow-tui: one server per
 * test on a private socket (-L), no configuration file.
 */
#ifndef CFLOW_TUI_TMUX_H
#define CFLOW_TUI_TMUX_H

/* tmux -u -L sock -f /dev/null ARGS... (NULL-terminated, at most 32);
 * its stdout (malloc'd).  A tmux that cannot be run fails the test. */
char *tt_tmux(const char *sock, ...);

/* Start cflow-tui ($CFLOW_BUILDDIR's) on model with the options args in
 * window "t" (160 columns, rows) of a new server on sock: HOME and the
 * data folder in home, $CFLOW_MODEL unset, a UTF-8 locale, LeakSanitizer's
 * suppressions ($CFLOW_SRCDIR/tests/ui/lsan.supp). */
void tt_start_tui(const char *sock, const char *home, int rows, const char *model,
                  const char *args);

/* Type text into window "t" of sock's server, then Enter. */
void tt_send_line(const char *sock, const char *text);

/* A test's teardown: kill sock's server if one was started (sock[0] set)
 * and forget it, so a failed check never leaves cflow-tui running. */
void tt_kill(char *sock);

/* The chat pane's text in a screen capture scr: each row's text between
 * the box's first two verticals (the panes beside it left out), its runs
 * of blanks one blank, rows joined by a blank, so that text the pane
 * wrapped reads as one line (malloc'd). */
char *tt_chat_text(const char *scr);

#endif
