#!/usr/bin/env bash
# Sets up, builds with -Werror and runs every test with CTest.
#   bash tools/test.sh             the normal build (build/)
#   bash tools/test.sh --sanitize  AddressSanitizer + UBSan + leak checks (build-asan/)
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
dir=build
flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_WERROR=ON)
if [ "${1:-}" = "--sanitize" ]; then
  dir=build-asan
  flags=(-DCMAKE_BUILD_TYPE=Debug -DLOOM_WERROR=ON -DLOOM_SANITIZE=ON)
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
fi
cmake -S . -B "$dir" "${flags[@]}" >/dev/null
cmake --build "$dir" -j"$(nproc)"
ctest --test-dir "$dir" --output-on-failure -j"$(nproc)"
