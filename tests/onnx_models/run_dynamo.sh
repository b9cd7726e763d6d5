#!/usr/bin/env bash
# The real models exported by PyTorch 2's dynamo exporter, against ONNX Runtime:
# as tests/onnx_models/run.sh, with .venv-torch2 (made here from
# requirements-torch2.txt and requirements-nodeps.txt; about 6 GB, so outside
# the test command). Needs build/test_onnx_models and .venv (tools/setup.sh).
#   tests/onnx_models/run_dynamo.sh [OUT] [NAME...]     (OUT: build/onnx_models_dynamo)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$root/build/onnx_models_dynamo}
shift || true
venv=$root/.venv-torch2
stamp=$venv/requirements.txt
if ! cat "$here"/requirements-torch2.txt "$here"/requirements-nodeps.txt | cmp -s - "$stamp" 2>/dev/null; then
  echo "run_dynamo: installing tests/onnx_models/requirements-torch2.txt into .venv-torch2"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements-torch2.txt"
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps -r "$here/requirements-nodeps.txt"
  cat "$here"/requirements-torch2.txt "$here"/requirements-nodeps.txt >"$stamp"
fi
mkdir -p "$out"
"$venv/bin/python" "$here/export_torchvision.py" "$out" "$@" --dynamo
"$venv/bin/python" "$here/export_hf.py" "$out" "$@" --dynamo
"$root/.venv/bin/python" "$here/reference_ort.py" "$out"
exec "$root/build/test_onnx_models" --allow-fixed "$out" "$@"
