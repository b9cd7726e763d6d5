#!/usr/bin/env bash
# Fails when a file reaches a layer above its own (docs/layers.md, "Folders and what
# they may include and call"). Layers, lowest first:
#   base/        what every layer may use: Philox, binding a dlopen'ed library, the LRU
#                cache, files written whole: base/ only (and the C library)
#   ir/          the graph and the kernel description: base/, ir/
#   passes/      target-free passes over the graph: base/, ir/, passes/
#   backends/X/  a kernel description -> code -> binary: base/, ir/, its own folder
#   runtime/     runs plans on devices, the only caller of the backends: base/, ir/,
#                passes/, backends/, runtime/
#   frontend/    the ops users call, autograd, layers, parameters: base/, ir/,
#                runtime/, frontend/
#   io/          file formats: program text, export, safetensors: base/, ir/,
#                passes/, runtime/, frontend/, io/
# A library op's folder ops/<op>/ (docs/adding-ops.md) holds files of several
# layers, each named for its layer and held to that layer's rules:
#   <op>_plan.[ch]   passes (its step's payload and planning)
#   <op>_step.[ch]   runtime (its CPU runner, profile line, plan-template walk)
#   <op>_cuda.[ch]   runtime (its CUDA runner)
#   <op>_nvrtc.[ch]  backends/nvrtc (its CUDA kernel's source for NVRTC)
#   <op>_io.[ch]     io (its lines in a program's listing, its export writer)
#   <op>_cpu.c       its CPU kernel: includes no project header (exports compile its
#                    text), called by the runtime and above
#   <op>.cu          its CUDA kernel's text (NVRTC compiles it after the prelude)
# and includes nothing of another op's folder. The layers' own folders may include
# an op's headers of their layer or below (the step tables, lm_step's payloads).
# tests/, bench/, tools/ and examples/ may include anything.
#
#   bash tools/check_layers.sh              every #include "folder/..." points down
#   bash tools/check_layers.sh --symbols D  every call or reference between libloom's
#       object files in the build directory D points down: an include check cannot see
#       a call made through a declaration in include/loom.h (or in a lower folder's
#       header) to a function a higher folder defines; the linker's symbols can.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
fail() {
  echo "$1" >&2
  status=1
}
# The layer of a project file, or "" for one that holds no code of a layer
# (tests/, bench/, tools/, examples/, a CUDA kernel's text).
layer_of() {
  local path=$1 base
  case "$path" in
  ops/*/*)
    base=${path##*/}
    case "$base" in
    *_plan.c | *_plan.h) echo passes ;;
    *_step.c | *_step.h | *_cuda.c | *_cuda.h) echo runtime ;;
    *_nvrtc.c | *_nvrtc.h) echo backends/nvrtc ;;
    *_io.c | *_io.h) echo io ;;
    *_cpu.c) echo kernel ;;
    *.cu) echo "" ;;
    *) echo unnamed ;;
    esac
    ;;
  base/*) echo base ;;
  ir/*) echo ir ;;
  passes/*) echo passes ;;
  backends/*) echo "$path" | cut -d/ -f1-2 ;;
  runtime/*) echo runtime ;;
  frontend/*) echo frontend ;;
  io/*) echo io ;;
  *) echo "" ;;
  esac
}
allowed() { # layer of the including (calling) file, included (defining) path
  local from=$1 to
  to=$(layer_of "$2")
  case "$from" in
  base) [[ $to == base ]] ;;
  ir) [[ $to == base || $to == ir ]] ;;
  passes) [[ $to == base || $to == ir || $to == passes ]] ;;
  backends/*) [[ $to == base || $to == ir || $to == "$from" ]] ;;
  runtime) [[ $to == base || $to == ir || $to == passes || $to == backends/* || $to == runtime || $to == kernel ]] ;;
  frontend) [[ $to == base || $to == ir || $to == runtime || $to == kernel || $to == frontend ]] ;;
  io) [[ $to == base || $to == ir || $to == passes || $to == runtime || $to == kernel || $to == frontend || $to == io ]] ;;
  *) return 0 ;;
  esac
}

check_symbols() { # build directory
  local objdir=$1/CMakeFiles/loom_obj.dir
  if [ ! -d "$objdir" ]; then
    echo "layers: no object files under $objdir: build libloom first" >&2
    return 1
  fi
  local defs undefs
  defs=$(mktemp) undefs=$(mktemp)
  # "<symbol> <source path>" for every global symbol an object defines and every
  # symbol it leaves undefined; an object's path under loom_obj.dir/ is its
  # source's path plus ".o". Objects outside the folders (the kernel text that
  # tools/embed_text.cmake generates in the build directory) are left out.
  # Objects whose source is gone (a file moved since that build) are stale.
  local objs=() obj src
  while IFS= read -r obj; do
    src=${obj#"$objdir"/}
    [[ ! -e ${src%.o} ]] || objs+=("$obj")
  done < <(find "$objdir" -name '*.o' | sort)
  local strip="$objdir/"
  nm -A -g --defined-only "${objs[@]}" |
    awk -v p="$strip" 'NF == 3 {f = $1; sub(/\.o:.*$/, "", f); if (index(f, p) == 1) f = substr(f, length(p) + 1); if (f ~ /\//) print $3, f}' >"$defs"
  nm -A -u "${objs[@]}" |
    awk -v p="$strip" '{f = $1; sub(/\.o:.*$/, "", f); if (index(f, p) == 1) f = substr(f, length(p) + 1); if (f ~ /\//) print $NF, f}' >"$undefs"
  local sym caller definer layer found=0
  while read -r sym caller definer; do
    found=1
    layer=$(layer_of "$caller")
    if ! allowed "$layer" "$definer"; then
      fail "$caller calls $sym, defined in $definer: $layer may not call $(layer_of "$definer")"
    fi
  done < <(awk 'NR == FNR {def[$1] = $2; next} ($1 in def) && def[$1] != $2 {print $1, $2, def[$1]}' \
    "$defs" "$undefs" | sort -k2,2 -k1,1)
  rm -f "$defs" "$undefs"
  if [ "$found" = 0 ]; then
    echo "layers: no calls between libloom's objects under $objdir" >&2
    return 1
  fi
  if [ "$status" = 0 ]; then echo "layers: every call between libloom's objects points down"; fi
  return "$status"
}

if [ "${1:-}" = "--symbols" ]; then
  check_symbols "${2:?usage: check_layers.sh --symbols <build directory>}" || exit 1
  exit 0
fi

while IFS= read -r file; do
  layer=$(layer_of "$file")
  if [[ $layer == unnamed ]]; then
    fail "$file: a file of ops/<op>/ is named <op>_plan.[ch], <op>_step.[ch], <op>_cuda.[ch], <op>_nvrtc.[ch], <op>_io.[ch], <op>_cpu.c or <op>.cu (docs/adding-ops.md)"
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
    if [[ $file == ops/* && $inc == ops/* && ${inc%/*} != "${file%/*}" ]]; then
      fail "$file includes $inc: a library op's folder includes nothing of another op's"
    elif ! allowed "$layer" "$inc"; then
      fail "$file includes $inc: $layer may not include $(layer_of "$inc")"
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
done < <(git ls-files 'base/*' 'ir/*' 'passes/*' 'backends/*' 'runtime/*' 'frontend/*' 'io/*' 'ops/*' |
  grep -E '\.(c|h|cu)$')
if [ "$status" = 0 ]; then echo "layers: every include points down"; fi
exit "$status"
