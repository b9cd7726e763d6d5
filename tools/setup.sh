#!/usr/bin/env bash
# Installs the Debian packages loom needs to build and test, when missing.
set -euo pipefail
# libopenmpi-dev and openmpi-bin: the MPI plugin (libloom_mpi.so) and its tests
packages=(build-essential cmake llvm-dev libopenblas-dev libxxhash-dev libjansson-dev zlib1g-dev
  libopenmpi-dev openmpi-bin)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
