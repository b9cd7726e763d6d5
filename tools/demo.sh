#!/usr/bin/env bash
# Sets up, builds (Release) and runs the demos: the quickstart tour, training
# the digits MLP and CNN, exporting the trained CNN as a standalone shared
# library (build/digits/libdigits.so + digits.h), and a plain C program that
# links only that library and classifies the test split.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target quickstart train_digits export_digits loom_tool
./build/quickstart
echo
out=build/digits
mkdir -p "$out"
./build/train_digits --epochs "${EPOCHS:-30}" --save "$out"
echo
./build/export_digits --weights "$out/cnn.safetensors" --out "$out" --name digits
# The same export from the saved program, with the command-line tool:
./build/loom export "$out/digits.loom" --name digits --out "$out"
"${CC:-cc}" -O2 -std=c11 -Wall -Werror examples/standalone/use_digits.c -I "$out" -L "$out" \
  -ldigits -Wl,-rpath,"$PWD/$out" -o "$out/use_digits"
echo "use_digits links: $(readelf -d "$out/use_digits" | grep NEEDED | sed 's/.*\[\(.*\)\]/\1/' | tr '\n' ' ')"
"$out/use_digits" "$out/digits_test.bin"
