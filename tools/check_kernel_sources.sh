#!/usr/bin/env bash
# Compiles each kernel file that loom embeds as text (CMakeLists.txt,
# embed_text) on its own, so that one that no longer compiles fails here
# rather than in NVRTC or in an export on a user's machine:
#   - runtime/*_cpu.c, ops/*/*_cpu.c and io/export/*.c with cc -std=c11 -Wall -Wextra
#     -Werror (exports compile them with -D_GNU_SOURCE; io/export's files
#     get the numbers io/export_source.c defines before them, any values
#     will do, and their functions are the generated code's to call, so
#     unused ones are no error);
#   - backends/nvrtc/*.cu, *.cuh and ops/*/*.cu with nvcc -c (the headers' helpers unused
#     alone: warning 177 off for them), and tests/kernels/cuda_scan_check.cu,
#     the scan kernel's check against the CPU, built to be run on a GPU by
#     tools/gpu_check.sh. Without nvcc (CUDA_HOME/bin or PATH) this part is
#     skipped with a notice.
# Usage: tools/check_kernel_sources.sh [out-dir]   (the scan check is built
# there as cuda_scan_check; default: a temporary folder)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -n "$out" ] || out=$tmp
mkdir -p "$out"
cc=${CC:-cc}

export_numbers=(-DEXPORT_THREADS_ENV='"LOOM_EXPORT_THREADS"' -DEXPORT_PARALLEL_WORK=1
  -DLK_GEMM_AMX_K=1 -DLK_GEMM_IN_PLACE_MAX_TILES=1 -DLK_GEMM_IN_PLACE_SHORT_KC=1
  -DLK_GEMM_DOT_MAX_ROWS=1 -DLK_GEMM_DOT_TERMS_PER_OUTPUT=1 -DEXPORT_GEMM_MIN_ROWS=1
  -DEXPORT_GEMM_MIN_COLS=1 -DEXPORT_GEMM_PARALLEL_WORK=1
  -DEXPORT_WEIGHTS_FILE='"model.weights"' -DEXPORT_WEIGHTS_HEADER=32
  -DEXPORT_WEIGHTS_MAGIC='"LOOMWGT1"' -DEXPORT_WEIGHTS_BYTES=1ull)
for f in runtime/*_cpu.c ops/*/*_cpu.c; do
  "$cc" -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -c "$f" -o "$tmp/kernel.o"
done
for f in io/export/*.c; do
  "$cc" -std=c11 -Wall -Wextra -Werror -Wno-unused-function -Wno-unused-variable -D_GNU_SOURCE \
    "${export_numbers[@]}" -c "$f" -o "$tmp/kernel.o"
done
echo "kernel sources: runtime/*_cpu.c, ops/*/*_cpu.c and io/export/*.c compile alone"

nvcc=${CUDA_HOME:-/usr/local/cuda}/bin/nvcc
[ -x "$nvcc" ] || nvcc=$(command -v nvcc || true)
if [ -z "$nvcc" ]; then
  echo "kernel sources: no nvcc, the CUDA kernels are not compiled alone (NVRTC still compiles them in the tests)"
  exit 0
fi
arch=(-arch=sm_80)
for f in backends/nvrtc/*.cu ops/*/*.cu; do
  "$nvcc" "${arch[@]}" -Werror all-warnings -DLM_GEMM_EVERY_KERNEL -c "$f" -o "$tmp/kernel.o"
done
for f in backends/nvrtc/*.cuh; do
  "$nvcc" "${arch[@]}" -Werror all-warnings -diag-suppress 177 -x cu -c "$f" -o "$tmp/kernel.o"
done
"$cc" -std=c11 -O2 -Wall -Wextra -Werror -Dlm_scan_parts=cpu_scan_parts \
  -Dlm_scan_items=cpu_scan_items -Dlm_scan_sums=cpu_scan_sums -Dlm_scan_rows=cpu_scan_rows \
  -c ops/scan/scan_cpu.c -o "$tmp/scan_cpu.o"
"$nvcc" "${arch[@]}" -O2 -Werror all-warnings -o "$out/cuda_scan_check" \
  tests/kernels/cuda_scan_check.cu "$tmp/scan_cpu.o"
echo "kernel sources: backends/nvrtc/*.cu, *.cuh and ops/*/*.cu compile alone ($nvcc, ${arch[*]});" \
  "$out/cuda_scan_check built"
