#!/usr/bin/env bash
# Sets up, builds with -Werror and runs every test with CTest.
#   bash tools/test.sh             the normal build (build/)
#   bash tools/test.sh --sanitize  AddressSanitizer + UBSan + leak checks (build-asan/)
#   bash tools/test.sh --tsan      ThreadSanitizer, the suites labelled threads (build-tsan/)
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bash tools/check_layers.sh # folders include only the folders below them
# the embedded kernel files compile alone (once, in the normal run)
[ -n "${1:-}" ] || bash tools/check_kernel_sources.sh
dir=build
flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_WERROR=ON)
targets=()
select=()
if [ "${1:-}" = "--sanitize" ]; then
  dir=build-asan
  flags=(-DCMAKE_BUILD_TYPE=Debug -DLOOM_WERROR=ON -DLOOM_SANITIZE=ON)
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
elif [ "${1:-}" = "--tsan" ]; then
  dir=build-tsan
  flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_WERROR=ON -DLOOM_TSAN=ON)
  # LLVM and OpenBLAS are not instrumented: tools/tsan.supp names what TSan
  # cannot see through in them.
  export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tools/tsan.supp"
  targets=(--target test_threads test_program test_cache test_disk_cache test_dynamic test_symbolic)
  select=(-L threads)
fi
cmake -S . -B "$dir" "${flags[@]}" >/dev/null
cmake --build "$dir" -j"$(nproc)" "${targets[@]}"
bash tools/check_layers.sh --symbols "$dir" # and calls between folders too
ctest --test-dir "$dir" --output-on-failure -j"$(nproc)" "${select[@]}"
