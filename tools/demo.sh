#!/usr/bin/env bash
# Sets up, builds (Release) and runs the demos: the quickstart tour, then
# training the digits MLP and CNN.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target quickstart train_digits
./build/quickstart
echo
./build/train_digits --epochs "${EPOCHS:-30}"
