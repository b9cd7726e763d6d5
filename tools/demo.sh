#!/usr/bin/env bash
# Sets up, builds (Release) and runs the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target quickstart
./build/quickstart
