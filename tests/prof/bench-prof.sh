#!/bin/sh
# bench-prof.sh — what profiling and the run log cost decoding.
#
# The same greedy decode, alternately with every probe off (--no-profile
# --no-log: one branch per probe) and with everything on (per-layer
# timers, per-thread counters read around every token, the run log
# written every 64 tokens), ROUNDS times each; prints the median decode
# tok/s of both and their ratio.  The model is a random llama2.c
# checkpoint (tests/prof/mkl2c) converted to q8_0: 12 layers of dim 1024,
# about 160 MB of weights, so a token streams far more than the caches
# hold, like a real model.
#
# usage: tests/prof/bench-prof.sh [BUILDDIR [ROUNDS [TOKENS [THREADS]]]]
#   BUILDDIR holds cflow and tests/prof/mkl2c (make check, or
#   make tests/prof/mkl2c); ROUNDS default 7, TOKENS 128, THREADS all.
set -eu
B=${1:-.}
R=${2:-7}
N=${3:-128}
TH=${4:-0}
here=$(cd "$(dirname "$0")" && pwd)
SHARED=${CFLOW_SHARED:-$here/../../../shared}
tok=$SHARED/models/tok512.bin
[ -r "$tok" ] || { echo "bench-prof: $tok missing (set CFLOW_SHARED)" >&2; exit 1; }
[ -x "$B/tests/prof/mkl2c" ] || { echo "bench-prof: build $B/tests/prof/mkl2c first" >&2; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$B/tests/prof/mkl2c" "$T/m.bin" 1024 2816 12 16 16 512 1024 1
"$B/cflow" convert -q q8_0 -t "$tok" "$T/m.bin" "$T/m.cflow"
rm -f "$T/m.bin"
thr=
[ "$TH" -gt 0 ] && thr="-t $TH"

# decode tok/s from the statistics line of `cflow run`
rate() {
    sed -n 's/.*decode [0-9]* tokens in [0-9.]* s (\([0-9.]*\) tok\/s.*/\1/p'
}
run() {
    # shellcheck disable=SC2086
    "$B/cflow" run -m "$T/m.cflow" -n "$N" --temp 0 --ignore-eos $thr "$@" 2>&1 >/dev/null | rate
}
run --no-profile --no-log >/dev/null   # warm the page cache
run --db "$T/runs.db" >/dev/null       # measure the read bandwidth once
: >"$T/off"
: >"$T/on"
i=0
while [ "$i" -lt "$R" ]; do
    run --no-profile --no-log >>"$T/off"
    run --db "$T/runs.db" >>"$T/on"
    i=$((i + 1))
done
med() { sort -n "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
off=$(med "$T/off")
on=$(med "$T/on")
echo "off (--no-profile --no-log): $(tr '\n' ' ' <"$T/off")"
echo "on  (profile + counters + log): $(tr '\n' ' ' <"$T/on")"
awk -v a="$off" -v b="$on" 'BEGIN { printf "median decode tok/s: off %.2f, on %.2f, on/off %.4f (%+.2f%%)\n", a, b, b / a, 100 * (b / a - 1) }'
