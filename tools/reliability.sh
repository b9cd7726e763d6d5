#!/usr/bin/env bash
# The long forms of the reliability checks (docs/RELIABILITY.md), one after
# the other, with the figures each prints. About 45 minutes with the
# defaults on a 2-core machine.
#   bash tools/reliability.sh
# Env: FUZZ_SECONDS (per fuzz target, default 600), GRAPH_MINUTES (random
#      graphs, default 10), PROFILE_STEPS (training steps, default 20000),
#      TSAN_REPEAT (thread suites under TSan, default 10).
# Expects tools/test.sh and tools/test.sh --tsan to have built build/ and
# build-tsan/ (it runs them first when they are missing).
set -u -o pipefail
cd "$(dirname "$0")/.."
root=$PWD
[ -x build/test_faults ] || bash tools/test.sh >/dev/null || exit 2
[ -x build-tsan/test_threads ] || bash tools/test.sh --tsan >/dev/null || exit 2
failed=()
step() { echo; echo "== $*"; }

step "random graphs, ${GRAPH_MINUTES:-10} minutes (tests/fuzz_graphs.sh)"
# its own build directory: fuzz_graphs.sh's default (/tmp/loom-fuzz) is shared
# by every checkout on the machine
BUILD_DIR=$root/build-graphs bash tests/fuzz_graphs.sh "${GRAPH_MINUTES:-10}" | tail -4 ||
  failed+=(random-graphs)

step "libFuzzer, ${FUZZ_SECONDS:-600} s per target (tests/fuzz/run.sh)"
bash tests/fuzz/run.sh "${FUZZ_SECONDS:-600}" || failed+=(fuzz)

step "allocation failure at every allocation of a training step (test_faults)"
LOOM_CACHE_DIR=$root/build/test-cache build/test_faults | grep -v "^  failed at" ||
  failed+=(faults)

step "bad inputs (test_bad_inputs)"
LOOM_CACHE_DIR=$root/build/test-cache build/test_bad_inputs || failed+=(bad-inputs)

step "memory profile, ${PROFILE_STEPS:-20000} training steps (test_memory_profile)"
LOOM_PROFILE_STEPS=${PROFILE_STEPS:-20000} LOOM_CACHE_DIR=$root/build/test-cache \
  build/test_memory_profile || failed+=(memory-profile)

step "deep graphs: a million ops unfused on a 256 KiB stack (test_deep)"
LOOM_TEST_DEEP=1000000 LOOM_CACHE_DIR=$root/build/test-cache build/test_deep || failed+=(deep)

step "examples under valgrind (tests/valgrind_examples.sh --all)"
bash tests/valgrind_examples.sh --all || failed+=(valgrind)

step "thread suites under ThreadSanitizer, ${TSAN_REPEAT:-10} times each"
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$root/tools/tsan.supp"
ctest --test-dir build-tsan -L threads --repeat until-fail:"${TSAN_REPEAT:-10}" 2>&1 |
  grep -E "tests passed|Failed|\*\*\*" || failed+=(tsan)

echo
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "all long forms passed"
