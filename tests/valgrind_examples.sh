#!/usr/bin/env bash
# Runs the examples under valgrind's memcheck: no invalid read or write, no
# use of uninitialised memory, and nothing definitely or indirectly lost at
# exit (LLVM's and OpenBLAS's process-lifetime globals are "still reachable",
# which is not a leak). Kernels compile under valgrind too (it hides AVX-512
# from the program, so objects cached by a native run do not apply): about
# 20 s for the quickstart, 45 s for an MLP epoch, 2 minutes for a CNN epoch.
#   tests/valgrind_examples.sh          quickstart and train_digits' MLP, 1 epoch (CI)
#   tests/valgrind_examples.sh --all    and train_digits' CNN, 1 epoch
# Env: BUILD_DIR (default build/, built by tools/test.sh).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
command -v valgrind >/dev/null || { echo "valgrind is not installed"; exit 2; }
runs=("quickstart" "train_digits --model mlp --epochs 1 --data $root/data/digits.csv.gz")
if [ "${1:-}" = "--all" ]; then
  runs+=("train_digits --model cnn --epochs 1 --data $root/data/digits.csv.gz")
fi
cache=$(mktemp -d /tmp/loom-valgrind-XXXXXX)
trap 'rm -rf "$cache"' EXIT
export LOOM_CACHE_DIR=$cache
failed=0
for run in "${runs[@]}"; do
  set -- $run
  exe=$build/$1
  shift
  [ -x "$exe" ] || { echo "$exe is missing: run bash tools/test.sh first"; exit 2; }
  log=$cache/$(basename "$exe").log
  start=$(date +%s)
  valgrind --leak-check=full --show-leak-kinds=definite,indirect \
    --errors-for-leak-kinds=definite,indirect --error-exitcode=99 --smc-check=all-non-file \
    --log-file="$log" "$exe" "$@" >/dev/null
  rc=$?
  errors=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) errors.*/\1/p' "$log" | tail -1)
  lost=$(sed -n 's/.*definitely lost: \([0-9,]*\) bytes.*/\1/p' "$log" | tail -1)
  echo "$(basename "$exe") $*: exit $rc, ${errors:-?} memcheck errors, ${lost:-?} bytes definitely lost ($(($(date +%s) - start)) s)"
  if [ "$rc" -ne 0 ]; then
    failed=1
    sed -n '/ERROR SUMMARY/q;p' "$log" | grep -v "^==[0-9]*== *$" | head -60
  fi
done
exit $failed
