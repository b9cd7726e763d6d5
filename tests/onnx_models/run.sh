#!/usr/bin/env bash
# Real models against ONNX Runtime (ctest onnx_models): exports torchvision's
# models with Debian's python3 (torch 1.13) and Hugging Face's with .venv-models
# (the same torch, transformers pinned), computes ONNX Runtime's outputs with
# .venv, then checks loom's (tests/test_onnx_models.c). tools/setup.sh makes both
# environments.
#   tests/onnx_models/run.sh TEST_BINARY OUT [NAME...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
binary=$1 out=$2
shift 2
mkdir -p "$out"
/usr/bin/python3 "$here/export_torchvision.py" "$out" "$@"
"$root/.venv-models/bin/python" "$here/export_hf.py" "$out" "$@"
"$root/.venv/bin/python" "$here/reference_ort.py" "$out"
exec "$binary" "$out" "$@"
