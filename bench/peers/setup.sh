#!/usr/bin/env bash
# The compilers as peers of `loom bench --peers` (bench/README.md): PyTorch 2
# (eager and torch.compile), JAX and OpenVINO from bench/peers/requirements.txt
# (pinned) in the project's .venv-peers, remade when the requirements change.
# About 6 GB; outside the test command (tools/setup.sh and tools/test.sh never
# run it), and `loom bench --peers` without it says in one line to run this.
#   bash bench/peers/setup.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
venv=$root/.venv-peers
requirements=$root/bench/peers/requirements.txt
stamp=$venv/requirements.txt
if cmp -s "$requirements" "$stamp" 2>/dev/null; then
  echo "peers: .venv-peers is up to date with bench/peers/requirements.txt"
  exit 0
fi
# The pins are for CPython 3.11 or newer (JAX's and torch's wheels).
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "peers: needs python3 3.11 or newer with venv, found: $(python3 --version 2>&1)" >&2
  exit 1
fi
echo "peers: installing bench/peers/requirements.txt into .venv-peers (about 6 GB)"
rm -rf "$venv"
python3 -m venv "$venv"
if ! "$venv/bin/pip" install -q --disable-pip-version-check -r "$requirements"; then
  # no stamp: the next run starts again from an empty venv
  echo "peers: pip could not install bench/peers/requirements.txt (see above)" >&2
  exit 1
fi
cp "$requirements" "$stamp"
echo "peers: .venv-peers ready ($(du -sh "$venv" | cut -f1))"
