#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan; build-fuzz/) and runs
# each for the given number of seconds (default 60), one after the other.
#   tests/fuzz/run.sh [seconds]
# Env: BUILD_DIR (default build-fuzz), JOBS (build jobs, default nproc),
#      FUZZ_TARGETS (default: every tests/fuzz/fuzz_*.c), FUZZ_SEED (libFuzzer's
#      -seed; CI fixes it so a run explores the same inputs every time).
# Each target starts from its seed corpus (tests/fuzz/corpus/<name>) and the
# inputs it found before (BUILD_DIR/corpus/<name>). A crash leaves its input
# in BUILD_DIR/crashes/<name>/: reproduce with BUILD_DIR/fuzz_<name> <file>,
# fix, and add the file to tests/fuzz/regressions/<name>/ (replayed by ctest).
# Prints the executions of each target; exits 1 if any crashed.
set -u
seconds=${1:-60}
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build-fuzz}
CC=${CC:-clang} cmake -S "$root" -B "$build" -DLOOM_FUZZ=ON -DLOOM_WERROR=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null || exit 2
cmake --build "$build" -j"${JOBS:-$(nproc)}" >/dev/null || exit 2
targets=${FUZZ_TARGETS:-$(cd "$root/tests/fuzz" && ls fuzz_*.c | sed 's/^fuzz_//; s/\.c$//')}
# Kernels are compiled into memory only: the disk cache is not what is fuzzed,
# and a long run would fill it.
export LOOM_CACHE_DIR=/dev/null
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=0
total=0
for t in $targets; do
  rm -rf "$build/crashes/$t" # earlier runs' crashes were reported by them
  mkdir -p "$build/corpus/$t" "$build/crashes/$t"
  log=$build/fuzz-$t.log
  start=$(date +%s)
  "$build/fuzz_$t" -max_total_time="$seconds" -print_final_stats=1 -timeout=60 ${FUZZ_SEED:+-seed=$FUZZ_SEED} \
    -rss_limit_mb=6144 -max_len=4096 -artifact_prefix="$build/crashes/$t/" \
    "$build/corpus/$t" "$root/tests/fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  took=$(($(date +%s) - start))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  secs=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  found=$(ls "$build/crashes/$t" | wc -l)
  echo "$t: ${execs:-0} executions in ${took} s (${secs:-0}/s), corpus $(ls "$build/corpus/$t" | wc -l) inputs, crashes $found"
  total=$((total + ${execs:-0}))
  if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then
    echo "  $t failed (exit $rc): see $log and $build/crashes/$t/"
    grep -m1 -E "ERROR|SUMMARY|runtime error|deadly signal" "$log" | sed 's/^/  /'
    failed=1
  fi
done
echo "fuzz executions: $total"
exit $failed
