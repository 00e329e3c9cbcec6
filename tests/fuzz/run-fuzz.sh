#!/bin/sh
# run-fuzz.sh BUILD SRCDIR SECONDS FLAGS TARGET... — `make fuzz`'s runner.
#
# Runs BUILD/tests/fuzz/fuzz_TARGET (a libFuzzer binary) for SECONDS over
# its seeds (SRCDIR/tests/fuzz/corpus/TARGET, read only) and regression
# inputs (SRCDIR/tests/fuzz/regressions/TARGET), one target after another.
# New interesting inputs go to BUILD/corpus/TARGET, crashes, leaks and
# timeouts to BUILD/artifacts/TARGET/, the log to BUILD/fuzz-TARGET.log.
# FLAGS are extra libFuzzer flags (e.g. -jobs=2, -seed=1).  Exits 1 when any
# target found something, printing how to reproduce it.
set -u
build=$1 src=$2 secs=$3 flags=$4
shift 4
status=0
summary=""
tail=""
# UBSan aborts on the first report (-fno-sanitize-recover), with a stack;
# leaks found by LeakSanitizer count as failures (libFuzzer's default).
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS ASAN_OPTIONS
for t in "$@"; do
    bin=$build/tests/fuzz/fuzz_$t
    work=$build/corpus/$t
    art=$build/artifacts/$t
    log=$build/fuzz-$t.log
    rm -rf "$art"
    mkdir -p "$work" "$art"
    set -- "$src/tests/fuzz/corpus/$t"
    [ -d "$src/tests/fuzz/regressions/$t" ] &&
        set -- "$@" "$src/tests/fuzz/regressions/$t"
    dict=
    [ -f "$src/tests/fuzz/dict/$t.dict" ] && dict=-dict=$src/tests/fuzz/dict/$t.dict
    echo "fuzz: $t for ${secs}s (log: $log)"
    # -timeout: one input may take 10 s (a hang is reported, not waited
    # for); -rss_limit_mb/-malloc_limit_mb: an input of at most a few
    # hundred KB must never make the parsers allocate anywhere near this.
    # shellcheck disable=SC2086
    "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -malloc_limit_mb=512 -print_final_stats=1 \
        -artifact_prefix="$art/" $dict $flags "$work" "$@" >"$log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    if [ $rc -ne 0 ]; then
        status=1
        echo "fuzz: $t FAILED (exit $rc after ${runs:-?} runs); last lines:"
        tail -40 "$log"
        for a in "$art"/*; do
            [ -f "$a" ] || continue
            echo "fuzz: $t: reproduce with: $bin $a"
            echo "      (or in any build: tests/fuzz/replay_$t $a;"
            echo "       then keep it as tests/fuzz/regressions/$t/NAME)"
            # A CI machine's build folder is gone with the run: its log is
            # all there is, so what failed and the input itself go there,
            # at the end, where a log's tail still shows them.
            why=$(grep -m3 -E '^fuzz: |ERROR: |runtime error: |^SUMMARY: ' "$log")
            size=$(wc -c <"$a")
            tail="$tail
fuzz: $t: $(basename "$a") ($size bytes): ${why:-see $log}"
            [ "$size" -le 8192 ] && tail="$tail
fuzz: $t: the input, base64 (base64 -d >FILE to replay it):
$(base64 -w 990 "$a")"
        done
        summary="$summary
  $t: FAILED, ${runs:-?} runs, $cov"
    else
        summary="$summary
  $t: ok, ${runs:-?} runs, $cov"
    fi
done
echo "fuzz summary (${secs}s per target):$summary"
# the same, in a file of its own for .ci/run to print last
printf '%s' "$tail" >"$build/fuzz-failures.txt"
[ -n "$tail" ] && printf '%s\n' "$tail"
exit $status
