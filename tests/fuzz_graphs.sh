#!/usr/bin/env bash
# Long-form random-graph fuzzing: builds test_random_graphs, then runs it with
# successive seeds for the given number of minutes (default 10).
#   tests/fuzz_graphs.sh [minutes] [graphs-per-seed] [first-seed]
# Env: BUILD_DIR (default /tmp/loom-fuzz), BUILD_TYPE (default Debug), JOBS (default 1).
set -u
minutes=${1:-10}
per_seed=${2:-200}
seed=${3:-$(date +%s)}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-/tmp/loom-fuzz}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Debug}" >/dev/null || exit 2
cmake --build "$build" -j"${JOBS:-1}" --target test_random_graphs >/dev/null || exit 2
export LOOM_CACHE_DIR=${LOOM_CACHE_DIR:-$build/test-cache}
logdir=$build/fuzz-logs
mkdir -p "$logdir"
end=$(( $(date +%s) + minutes * 60 ))
total=0 seeds=0 failed_graphs=0
failing=()
while [ "$(date +%s)" -lt "$end" ]; do
  log=$logdir/seed-$seed.log
  LOOM_FUZZ_SEED=$seed LOOM_FUZZ_GRAPHS=$per_seed "$build/test_random_graphs" >"$log" 2>&1
  rc=$?
  n=$(sed -n 's/^graphs run: //p' "$log"); n=${n:-0}
  f=$(sed -n 's/^graphs failed: //p' "$log"); f=${f:-0}
  total=$((total + n)); seeds=$((seeds + 1)); failed_graphs=$((failed_graphs + f))
  if [ "$rc" -ne 0 ] || [ "$f" -ne 0 ]; then
    idx=$(sed -n 's/^FAIL: seed [0-9]* graph \([0-9]*\).*/\1/p' "$log" | tr '\n' ' ')
    echo "seed $seed: exit $rc, $f failed graph(s): ${idx:-crash?} (log: $log)"
    failing+=("$seed")
  else
    rm -f "$log"
  fi
  seed=$((seed + 1))
done
echo "seeds run: $seeds"
echo "graphs run: $total"
echo "graphs failed: $failed_graphs"
if [ ${#failing[@]} -gt 0 ]; then
  echo "failing seeds: ${failing[*]}"
  exit 1
fi
exit 0
