#!/usr/bin/env bash
# Fails when a folder reaches a folder above it (docs/layers.md, "Folders and what
# they may include and call"). Folders, lowest first:
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
allowed() { # folder of the including (calling) file, included (defining) path
  local from=$1 inc=$2
  case "$from" in
  base | base/*) [[ $inc == base/* ]] ;;
  ir | ir/*) [[ $inc == base/* || $inc == ir/* ]] ;;
  passes | passes/*) [[ $inc == base/* || $inc == ir/* || $inc == passes/* ]] ;;
  backends/*) [[ $inc == base/* || $inc == ir/* || $inc == "$from"/* ]] ;;
  runtime | runtime/*) [[ $inc == base/* || $inc == ir/* || $inc == passes/* || $inc == backends/* || $inc == runtime/* ]] ;;
  frontend | frontend/*) [[ $inc == base/* || $inc == ir/* || $inc == runtime/* || $inc == frontend/* ]] ;;
  io | io/*) [[ $inc == base/* || $inc == ir/* || $inc == passes/* || $inc == runtime/* || $inc == frontend/* || $inc == io/* ]] ;;
  *) return 0 ;;
  esac
}
folder_of() { # a source path -> (in $folder) the folder whose rules apply to it
  folder=${1%/*}
  if [[ $folder == backends/*/* ]]; then
    folder=${folder#backends/}
    folder=backends/${folder%%/*}
  fi
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
  local sym caller definer folder found=0
  while read -r sym caller definer; do
    found=1
    folder_of "$caller"
    if ! allowed "$folder" "$definer"; then
      echo "$caller calls $sym, defined in $definer: $folder/ may not call ${definer%%/*}/" >&2
      status=1
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
  folder_of "$file"
  dir=$folder
  while IFS= read -r inc; do
    # only the project's own folders: "loom.h" and system headers are open to all
    [[ $inc == */* ]] || continue
    [[ -e $inc ]] || continue
    if ! allowed "$dir" "$inc"; then
      echo "$file includes $inc: $dir/ may not include ${inc%%/*}/" >&2
      status=1
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
done < <(git ls-files 'base/*' 'ir/*' 'passes/*' 'backends/*' 'runtime/*' 'frontend/*' 'io/*' | grep -E '\.(c|h)$')
if [ "$status" = 0 ]; then echo "layers: every include points down"; fi
exit "$status"
