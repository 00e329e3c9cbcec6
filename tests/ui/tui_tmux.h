/*
 * tui_tmux.h — tmux for the tests that drive cflow-tui: one server per
 * test on a private socket (-L), no configuration file.
 */
#ifndef CFLOW_TUI_TMUX_H
#define CFLOW_TUI_TMUX_H

/* tmux -u -L sock -f /dev/null ARGS... (NULL-terminated, at most 32);
 * its stdout (malloc'd).  A tmux that cannot be run fails the test. */
char *tt_tmux(const char *sock, ...);

#endif
