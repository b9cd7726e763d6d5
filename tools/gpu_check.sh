#!/bin/sh
# The CUDA checks that need a real GPU, in one run: build, the driver-path
# suites, the scan kernel built alone by nvcc against the CPU's
# (tests/kernels/cuda_scan_check.cu), the GPU suite on LOOM_CUDA(0) against the CPU (tests/test_cuda_gpu.c),
# the op, view, gradient, layer, optimizer, random-graph and thread suites with
# LOOM_TEST_DEVICE=cuda, shape-generic kernels and plan templates on the device,
# the collectives suite on the device through NCCL and through the host (all of
# which pass on the emulated device in every CI run), the digits MLP with
# --device cuda, and the benchmarks on cuda:0 (GB/s against the device's peak;
# the matmuls against cuBLAS where the toolkit has it). Every step runs even
# when an earlier one fails (a first run on a new GPU should say all it can);
# the summary lists the failed steps.
# Usage: tools/gpu_check.sh [build-dir]   (prints figures; exit status 0 = passed)
#   LOOM_GPU_PREBUILT=1   use the build as it is (a machine without LLVM or
#                         OpenBLAS, given tools/gpu_bundle.sh's build)
#   LOOM_MPI_PLUGIN=path  the MPI plugin for the collectives step (default: the
#                         build's libloom_mpi.so; libfake_mpi.so is a world of one)
set -u
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
jobs=$(nproc 2>/dev/null || echo 4)
start=$(date +%s)
failed=""
step() { printf '\n== %s (%ss)\n' "$1" "$(($(date +%s) - start))"; }
# check NAME COMMAND...: runs the command, and records NAME when it fails
check() {
  name=$1
  shift
  if ! "$@"; then
    echo "** FAILED: $name"
    failed="$failed $name"
  fi
}
suite() { # suite NAME ENV... BINARY: the suite's last line, and its status
  name=$1
  shift
  env "$@" >"/tmp/gpu_check_$name.log" 2>&1
  rc=$?
  tail -2 "/tmp/gpu_check_$name.log"
  [ $rc -eq 0 ] || { tail -30 "/tmp/gpu_check_$name.log"; return 1; }
}

if [ "${LOOM_GPU_PREBUILT:-0}" = 1 ]; then
  step "prebuilt ($build)"
  [ -x "$build/loom" ] || { echo "$build/loom: no build there"; exit 1; }
else
  step "build ($build)"
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DLOOM_WERROR=ON >/dev/null || exit 1
  cmake --build "$build" -j "$jobs" >/dev/null || exit 1
fi
export LOOM_CACHE_DIR="$build/gpu-cache"
mpi_plugin=${LOOM_MPI_PLUGIN:-$build/libloom_mpi.so}

step "device"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
"$build/loom" info

step "driver paths (no GPU needed)"
check driver_paths ctest --test-dir "$build" -R '^cuda(_missing|_stub)?$' --output-on-failure

step "the scan kernel alone (nvcc) against the CPU's (tests/kernels/cuda_scan_check.cu)"
check kernel_sources bash tools/check_kernel_sources.sh "$build"
check scan_kernel timeout 120 "$build/cuda_scan_check"

step "ops, gradients, Adam, Philox on cuda:0 against the CPU"
check cuda_gpu suite cuda_gpu timeout 300 "$build/test_cuda_gpu"

step "the op, view, gradient, layer, optimizer, random-graph and thread suites on cuda:0"
for t in ops views autograd nn optim random_graphs threads sums attention half gpt2 sort scan; do
  check "$t" suite "$t" LOOM_TEST_DEVICE=cuda timeout 300 "$build/test_$t"
done

step "updates in place (a KV cache's row) on cuda:0"
check memory suite memory LOOM_POISON=1 LOOM_TEST_DEVICE=cuda timeout 300 "$build/test_memory"

step "shape-generic kernels and plan templates on cuda:0 (sizes read at run time)"
check dynamic suite dynamic LOOM_TEST_DEVICE=cuda timeout 300 "$build/test_dynamic"
check symbolic suite symbolic LOOM_VERIFY_PLANS=1 LOOM_TEST_DEVICE=cuda timeout 300 "$build/test_symbolic"
for t in nn sums; do
  check "dynamic_$t" suite "dynamic_$t" LOOM_DYNAMIC=always LOOM_TEST_DEVICE=cuda timeout 300 "$build/test_$t"
done

step "collectives on cuda:0: through NCCL (a world of one) and through the host"
LOOM_MPI_PLUGIN="$mpi_plugin" "$build/loom" info | grep -E '^(mpi|nccl):'
check dist_nccl suite dist_nccl LOOM_TEST_DEVICE=cuda LOOM_MPI_PLUGIN="$mpi_plugin" timeout 300 "$build/test_dist"
check dist_host suite dist_host LOOM_NCCL=0 LOOM_TEST_DEVICE=cuda LOOM_MPI_PLUGIN="$mpi_plugin" timeout 300 "$build/test_dist"

step "digits MLP on cuda:0 (and on the CPU, for the same accuracy)"
check digits_cuda sh -c "timeout 120 '$build/train_digits' --model mlp --epochs 10 --device cuda | tr '\r' '\n' | tail -1"
check digits_cpu sh -c "timeout 120 '$build/train_digits' --model mlp --epochs 10 --device cpu | tr '\r' '\n' | tail -1"

step "CUDA benchmarks (loom bench --device cuda)"
check bench timeout 300 "$build/loom" bench --device cuda --repeats 20
step "attention's training on cuda:0: the fused backward against the composition (which the default takes until this says otherwise)"
for how in fused composite; do
  check "attention_train_$how" env LOOM_ATTENTION=$how timeout 120 "$build/loom" bench \
    attention_causal_train_1x12x1024x64 --device cuda --repeats 20
done
step "done"
if [ -n "$failed" ]; then
  echo "FAILED:$failed"
  exit 1
fi
echo "all passed"
