#!/usr/bin/env bash
# Real models against ONNX Runtime (ctest onnx_models): exports torchvision's
# models with Debian's python3 (torch 1.13), computes ONNX Runtime's outputs
# with the project's .venv, then checks loom's (tests/test_onnx_models.c).
#   tests/onnx_models/run.sh TEST_BINARY OUT [NAME...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
binary=$1 out=$2
shift 2
mkdir -p "$out"
/usr/bin/python3 "$here/export_torchvision.py" "$out" "$@"
"$root/.venv/bin/python" "$here/reference_ort.py" "$out"
exec "$binary" "$out" "$@"
