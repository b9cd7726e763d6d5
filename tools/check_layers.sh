#!/usr/bin/env bash
# Fails when a file includes a header of a layer above its own (docs/layers.md,
# "Folders and what they may include"). Layers, lowest first:
#   ir           the graph and the kernel description: includes only ir/
#   passes       target-free passes over the graph: ir/, passes/
#   backends/X   a kernel description -> code -> binary: ir/, its own folder, and the
#                header-only runtime/philox.h (the CPU's Philox, which both
#                code generators reproduce bit for bit)
#   runtime      runs plans on devices, the only caller of the backends: ir/, passes/,
#                backends/, runtime/
#   frontend     the ops users call, autograd, layers: ir/, runtime/, frontend/
# A library op's folder ops/<op>/ (docs/adding-ops.md) holds files of several
# layers, each named for its layer:
#   <op>_plan.[ch]   passes (its step's payload and planning)
#   <op>_step.[ch]   runtime (its CPU runner, text, plan-template walk, export writer)
#   <op>_cuda.[ch]   runtime (its CUDA runner)
#   <op>_nvrtc.[ch]  backends/nvrtc (its CUDA kernel's source for NVRTC)
#   <op>_cpu.c       its CPU kernel: includes no project header (exports compile its text)
#   <op>.cu          its CUDA kernel's text (NVRTC compiles it after the prelude)
# and includes nothing of another op's folder. The layers' own folders may include
# an op's headers of their layer or below (the step tables, lm_step's payloads).
# tests/, bench/, tools/ and examples/ may include anything.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
fail() {
  echo "$1" >&2
  status=1
}
# The layer of a project file, or "" for one that holds no code of a layer.
layer_of() {
  local path=$1 base
  case "$path" in
  ops/*/*)
    base=$(basename "$path")
    case "$base" in
    *_plan.c | *_plan.h) echo passes ;;
    *_step.c | *_step.h | *_cuda.c | *_cuda.h) echo runtime ;;
    *_nvrtc.c | *_nvrtc.h) echo backends/nvrtc ;;
    *_cpu.c) echo kernel ;;
    *.cu) echo "" ;;
    *) echo unnamed ;;
    esac
    ;;
  ir/*) echo ir ;;
  passes/*) echo passes ;;
  backends/*) echo "$path" | cut -d/ -f1-2 ;;
  runtime/*) echo runtime ;;
  frontend/*) echo frontend ;;
  *) echo "" ;;
  esac
}
allowed() { # layer of the including file, included path
  local from=$1 inc=$2 to
  to=$(layer_of "$inc")
  case "$from" in
  ir) [[ $to == ir ]] ;;
  passes) [[ $to == ir || $to == passes ]] ;;
  backends/*) [[ $to == ir || $to == "$from" || $inc == runtime/philox.h ]] ;;
  runtime) [[ $to == ir || $to == passes || $to == backends/* || $to == runtime ]] ;;
  frontend) [[ $to == ir || $to == runtime || $to == frontend ]] ;;
  *) return 0 ;;
  esac
}
while IFS= read -r file; do
  layer=$(layer_of "$file")
  if [[ $layer == unnamed ]]; then
    fail "$file: a file of ops/<op>/ is named <op>_plan.[ch], <op>_step.[ch], <op>_cuda.[ch], <op>_nvrtc.[ch], <op>_cpu.c or <op>.cu (docs/adding-ops.md)"
    continue
  fi
  [[ $file == *.cu ]] && continue
  while IFS= read -r inc; do
    if [[ $layer == kernel ]]; then
      fail "$file includes \"$inc\": a library op's CPU kernel includes no project header (exports compile its text alone)"
      continue
    fi
    # only the project's own folders: "loom.h" and system headers are open to all
    [[ $inc == */* ]] || continue
    [[ -e $inc ]] || continue
    if [[ $file == ops/* && $inc == ops/* && $(dirname "$inc") != $(dirname "$file") ]]; then
      fail "$file includes $inc: a library op's folder includes nothing of another op's"
    elif ! allowed "$layer" "$inc"; then
      fail "$file includes $inc: $layer may not include $(layer_of "$inc") ($inc)"
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
done < <(git ls-files 'ir/*' 'passes/*' 'backends/*' 'runtime/*' 'frontend/*' 'ops/*' |
  grep -E '\.(c|h|cu)$')
if [ "$status" = 0 ]; then echo "layers: every include points down"; fi
exit "$status"
