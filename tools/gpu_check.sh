#!/bin/sh
# The CUDA checks that need a real GPU, in one run (not yet run on one; budget
# about 10 minutes on a 16-core machine, most of it the build): build, the
# driver-path suites, the GPU suite on LOOM_CUDA(0) against the CPU
# (tests/test_cuda_gpu.c), the op, view, gradient, layer, optimizer,
# random-graph and thread suites with LOOM_TEST_DEVICE=cuda, shape-generic
# kernels on the device, the collectives suite on the device through NCCL and
# through the host (all of which pass
# on the emulated device in every CI run), the digits MLP with --device cuda,
# and the benchmarks on cuda:0 (GB/s against the device's peak; the matmuls
# against cuBLAS where the toolkit has it).
# Usage: tools/gpu_check.sh [build-dir]   (prints figures; exit status 0 = passed)
set -eu
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
jobs=$(nproc 2>/dev/null || echo 4)
start=$(date +%s)
step() { printf '\n== %s (%ss)\n' "$1" "$(($(date +%s) - start))"; }

step "build ($build)"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DLOOM_WERROR=ON >/dev/null
cmake --build "$build" -j "$jobs" >/dev/null
export LOOM_CACHE_DIR="$build/gpu-cache"

step "device"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true

step "driver paths (no GPU needed)"
ctest --test-dir "$build" -R '^cuda(_missing|_stub)?$' --output-on-failure

step "ops, gradients, Adam, Philox on cuda:0 against the CPU"
timeout 300 "$build/test_cuda_gpu"

step "the op, view, gradient, layer, optimizer, random-graph and thread suites on cuda:0"
for t in ops views autograd nn optim random_graphs threads; do
  LOOM_TEST_DEVICE=cuda timeout 300 "$build/test_$t" | tail -1
done

step "shape-generic kernels on cuda:0 (sizes read at run time)"
LOOM_TEST_DEVICE=cuda timeout 300 "$build/test_dynamic" | tail -3
# symbolic programs: plan templates' instances, each checked against its own plan
LOOM_VERIFY_PLANS=1 LOOM_TEST_DEVICE=cuda timeout 300 "$build/test_symbolic" | tail -1
for t in nn sums; do
  LOOM_DYNAMIC=always LOOM_TEST_DEVICE=cuda timeout 300 "$build/test_$t" | tail -1
done

step "collectives on cuda:0: through NCCL (a world of one) and through the host"
"$build/loom" info | grep -E '^(mpi|nccl):'
LOOM_TEST_DEVICE=cuda LOOM_MPI_PLUGIN="$build/libloom_mpi.so" timeout 300 "$build/test_dist" | tail -1
LOOM_NCCL=0 LOOM_TEST_DEVICE=cuda LOOM_MPI_PLUGIN="$build/libloom_mpi.so" timeout 300 "$build/test_dist" | tail -1

step "digits MLP on cuda:0 (and on the CPU, for the same accuracy)"
timeout 120 "$build/train_digits" --model mlp --epochs 10 --device cuda | tr '\r' '\n' | tail -1
timeout 120 "$build/train_digits" --model mlp --epochs 10 --device cpu | tr '\r' '\n' | tail -1

step "CUDA benchmarks (loom bench --device cuda)"
timeout 300 "$build/loom" bench --device cuda --repeats 20
step "done"
