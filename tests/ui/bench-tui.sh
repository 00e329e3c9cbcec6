#!/bin/sh
# bench-tui.sh — does watching cost decoding?  cflow-tui with every pane
# live against `cflow run` on the same settings.
#
# The same greedy decode (prompt "Once upon a time", TOKENS tokens past
# end-of-text, THREADS worker threads, profiling and the run log on in
# both), alternately with `cflow run` and in cflow-tui inside a tmux
# session on a private socket (all four panes shown and redrawn at 10 Hz),
# ROUNDS times each.  Both write to one temporary run log; the decode tok/s
# of every run comes from there (`cflow runs list --json`, the figures both
# programs log the same way).  Prints each pair, the medians and the ratio
# tui/run, and `cflow runs compare` of the last pair.
#
# usage: tests/ui/bench-tui.sh [BUILDDIR [ROUNDS [TOKENS [THREADS [MODEL]]]]]
#   BUILDDIR holds cflow and cflow-tui; ROUNDS default 7, TOKENS 256,
#   THREADS 1, MODEL the shipped data/default.cflow.  TUI_ENV="VAR=value ..."
#   puts variables in cflow-tui's environment only (to test a hunch about
#   what differs between the two programs, e.g. MALLOC_ARENA_MAX=1).
#   KEEPDB=FILE keeps the run log there (runs are appended), for per-token
#   analysis of its token table.
#   WARM=1 keeps every CPU busy for 150 ms right before each timed decode
#   of either program (before `cflow run` starts, before the TUI's Enter):
#   on a VM whose vCPUs have idled for a second the first ~50 tokens run
#   slower, and the TUI's decode always starts after such a pause (the
#   script's 2 s waits, a user's typing) while `cflow run`'s starts after
#   its own start-up work.
set -eu
B=${1:-.}
R=${2:-7}
N=${3:-256}
TH=${4:-1}
here=$(cd "$(dirname "$0")" && pwd)
M=${5:-$here/../../data/default.cflow}
command -v tmux >/dev/null || { echo "bench-tui: tmux missing" >&2; exit 1; }
[ -x "$B/cflow-tui" ] || { echo "bench-tui: no $B/cflow-tui" >&2; exit 1; }
T=$(mktemp -d)
SOCK=cflow-bench-$$
trap 'tmux -L $SOCK kill-server 2>/dev/null || true; rm -rf "$T"' EXIT
DB=${KEEPDB:-$T/runs.db}

screen() { tmux -L "$SOCK" capture-pane -p -t b; }
# wait_for TEXT [SECONDS]: poll the screen every SECONDS (0.2), 300 s at most.
# While the TUI decodes, each poll (a tmux client, the server's render of
# the pane, grep) takes CPU that `cflow run` never has to share: polled
# five times a second it cost the TUI ~2-3% on 2 threads of 2 cores, so
# the decode is waited for at 2 s (the tok/s come from the run log, not
# from when the script notices the end).
wait_for() {
    i=0 dt=${2:-0.2}
    n=$(awk "BEGIN { print int(300 / $dt) }")
    until screen | grep -qF -- "$1"; do
        i=$((i + 1))
        [ $i -lt "$n" ] ||
            { echo "bench-tui: '$1' never appeared" >&2; screen >&2; exit 1; }
        sleep "$dt"
    done
}

# WARM=1: every CPU busy for 150 ms (a shell loop each), then return.
warm() {
    [ -n "${WARM:-}" ] || return 0
    n=$(nproc 2>/dev/null || echo 2)
    while [ "$n" -gt 0 ]; do
        timeout 0.15 sh -c 'while :; do :; done' &
        n=$((n - 1))
    done
    wait
}

run_cli() {
    warm
    "$B/cflow" run -m "$M" -p "Once upon a time" -n "$N" --temp 0 --ignore-eos \
        -t "$TH" --db "$DB" >/dev/null 2>&1
}
run_tui() {
    tmux -L "$SOCK" -f /dev/null new-session -d -x 160 -y 45 -s b \
        "env HOME=$T XDG_DATA_HOME=$T LANG=C.UTF-8 ${TUI_ENV:-} $B/cflow-tui -m $M -t $TH -n $N --temp 0 --db $DB"
    wait_for "completion"   # the model is loaded
    tmux -L "$SOCK" send-keys -t b -l "/ignore-eos on"
    tmux -L "$SOCK" send-keys -t b Enter
    wait_for "ignore-eos on ("
    # The prompt, a pause for the TUI to echo it, then Enter.  (The Enter's
    # tmux client does its fork, exec and connect before the key reaches
    # the TUI; little of it overlaps the decode.)
    tmux -L "$SOCK" send-keys -t b -l "Once upon a time"
    sleep 0.3
    warm
    tmux -L "$SOCK" send-keys -t b Enter
    # the first look comes after the decode has had its 2 s alone (at a
    # shipped model's ~2500 tok/s the decode of 400 tokens is over in
    # 0.2 s, and one poll's fork, exec and capture in that window cost it
    # a few percent)
    sleep 2
    wait_for "stopped: -n limit" 2
    tmux -L "$SOCK" send-keys -t b -l "/quit"
    tmux -L "$SOCK" send-keys -t b Enter
    i=0
    while tmux -L "$SOCK" has-session -t b 2>/dev/null; do
        i=$((i + 1))
        [ $i -lt 300 ] || { echo "bench-tui: cflow-tui did not quit" >&2; exit 1; }
        sleep 0.2
    done
}

r=0
while [ $r -lt "$R" ]; do
    if [ $((r % 2)) = 0 ]; then run_cli; run_tui; else run_tui; run_cli; fi
    r=$((r + 1))
done

"$B/cflow" runs list --json --db "$DB" > "$T/runs.json"
/usr/bin/python3 - "$T/runs.json" "$TH" "$N" "$M" <<'EOF'
import json, statistics, sys
runs = json.load(open(sys.argv[1]))
cli = [r["decode_tok_s"] for r in runs if r["program"] == "cflow run"]
tui = [r["decode_tok_s"] for r in runs if r["program"] == "cflow-tui"]
gen = {r["program"]: r["n_gen"] for r in runs}
print("model %s, %s threads, %s tokens; decode tokens per run: %s" % (sys.argv[4], sys.argv[2], sys.argv[3], gen))
for i, (a, b) in enumerate(zip(cli, tui)):
    print("pair %d: cflow run %.1f tok/s, cflow-tui %.1f tok/s, ratio %.3f" % (i + 1, a, b, b / a))
mc, mt = statistics.median(cli), statistics.median(tui)
print("median decode tok/s: cflow run %.1f, cflow-tui %.1f; tui/run %.3f" % (mc, mt, mt / mc))
ratios = [b / a for a, b in zip(cli, tui)]
print("median of the paired ratios tui/run: %.3f" % statistics.median(ratios))
EOF
ids=$("$B/cflow" runs list --json --db "$DB" | /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin); print(r[-2]["id"], r[-1]["id"])')
# shellcheck disable=SC2086
"$B/cflow" runs compare $ids --db "$DB"
