#!/bin/sh
# Packs a Release build and the shared libraries it needs beyond the C/C++
# runtimes (LLVM, OpenBLAS, xxHash, jansson and theirs) into one archive, for
# a GPU machine that has the driver and the CUDA toolkit but none of loom's
# build dependencies. There:
#   tar xJf gpu-bundle.tar.xz            # in the repository's root
#   export LD_LIBRARY_PATH=$PWD/libs:/usr/local/cuda/lib64
#   LOOM_GPU_PREBUILT=1 LOOM_MPI_PLUGIN=$PWD/build-gpu/libfake_mpi.so tools/gpu_check.sh
# (the tests name files by this checkout's absolute path: the same path must
# reach the repository there, a symbolic link will do; LOOM_NCCL may name a
# libnccl.so.2 that is not on the library path, such as PyTorch's).
# Usage: tools/gpu_bundle.sh [archive]   (default .gpu/gpu-bundle.tar.xz)
set -eu
cd "$(dirname "$0")/.."
out=${1:-.gpu/gpu-bundle.tar.xz}
build=build-gpu
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DLOOM_WERROR=ON >/dev/null
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" >/dev/null
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/$build" "$stage/libs"
bins="loom train_digits test_cuda test_cuda_gpu test_dist"
for t in ops views autograd nn optim random_graphs threads sums attention half gpt2 sort scan dynamic symbolic memory; do
  bins="$bins test_$t"
done
for f in $bins; do cp "$build/$f" "$stage/$build/"; done
cp -a "$build"/libloom.so* "$build/libfake_mpi.so" "$build/libfake_cuda.so" "$build/CTestTestfile.cmake" \
  "$stage/$build/"
[ -f "$build/libloom_mpi.so" ] && cp "$build/libloom_mpi.so" "$stage/$build/"
# what they link beyond the C and C++ runtimes, which the GPU machine has (newer)
ldd "$build/loom" "$build/test_ops" | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|libz|libpthread|libdl|ld-linux[^/]*)\.so' |
  grep -v libloom | while read -r lib; do cp -L "$lib" "$stage/libs/"; done
strip "$stage/$build"/* "$stage/libs"/* 2>/dev/null || true
mkdir -p "$(dirname "$out")"
tar cJf "$out" -C "$stage" "$build" libs
ls -l "$out"
