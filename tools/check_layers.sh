#!/usr/bin/env bash
# Fails when a folder includes a header of a folder above it (docs/layers.md,
# "Folders and what they may include"). Folders, lowest first:
#   ir/          the graph and the kernel description: includes only ir/
#   passes/      target-free passes over the graph: ir/, passes/
#   backends/X/  a kernel description -> code -> binary: ir/, its own folder, and the
#                header-only runtime/philox.h (the CPU's Philox, which both
#                code generators reproduce bit for bit)
#   runtime/     runs plans on devices, the only caller of the backends: ir/, passes/,
#                backends/, runtime/
#   frontend/    the ops users call, autograd, layers: ir/, runtime/, frontend/
# tests/, bench/, tools/ and examples/ may include anything.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
allowed() { # folder of the including file, included path
  local from=$1 inc=$2
  case "$from" in
  ir) [[ $inc == ir/* ]] ;;
  passes) [[ $inc == ir/* || $inc == passes/* ]] ;;
  backends/*) [[ $inc == ir/* || $inc == "$from"/* || $inc == runtime/philox.h ]] ;;
  runtime | runtime/*) [[ $inc == ir/* || $inc == passes/* || $inc == backends/* || $inc == runtime/* ]] ;;
  frontend) [[ $inc == ir/* || $inc == runtime/* || $inc == frontend/* ]] ;;
  *) return 0 ;;
  esac
}
while IFS= read -r file; do
  dir=$(dirname "$file")
  case "$dir" in backends/*) dir=$(echo "$dir" | cut -d/ -f1-2) ;; esac
  while IFS= read -r inc; do
    # only the project's own folders: "loom.h" and system headers are open to all
    [[ $inc == */* ]] || continue
    [[ -e $inc ]] || continue
    if ! allowed "$dir" "$inc"; then
      echo "$file includes $inc: $dir/ may not include ${inc%%/*}/" >&2
      status=1
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
done < <(git ls-files 'ir/*' 'passes/*' 'backends/*' 'runtime/*' 'frontend/*' | grep -E '\.(c|h)$')
if [ "$status" = 0 ]; then echo "layers: every include points down"; fi
exit "$status"
