#!/bin/bash
# Checks every #include "..." of the folders named in RULES (tests/runtime_layers.txt) against the
# folders each may include. Usage: check_layers.sh ROOT RULES. Exit 1 naming each forbidden include.
set -euo pipefail
root=$(cd "$1" && pwd)
rules=$2
# Where a bare name is looked for, after the including file's own folder: the build's include paths.
search=(runtime include harness bench tuning cli)
failures=0

# The folder (relative to root) of the file an include names, or "" when it names no file.
resolve() {
  local from_dir=$1 name=$2 candidate
  for candidate in "$from_dir/$name" "${search[@]/#/$root/}"; do
    [ "$candidate" = "$from_dir/$name" ] || candidate="$candidate/$name"
    if [ -f "$candidate" ]; then
      candidate=$(realpath "$candidate")
      dirname "${candidate#"$root"/}"
      return
    fi
  done
  echo ""
}

while read -r folder allowed; do
  folder=${folder%:}
  [ -z "$folder" ] || [ "${folder:0:1}" = "#" ] && continue
  [ -d "$root/$folder" ] || { echo "$rules names $folder, which is not a folder of $root"; failures=$((failures + 1)); continue; }
  while IFS=: read -r file line text; do
    name=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"$text")
    target=$(resolve "$(dirname "$file")" "$name")
    if [ -z "$target" ]; then
      echo "${file#"$root"/}:$line: #include \"$name\" names no file of the tree"
      failures=$((failures + 1))
    elif [ "$target" != "$folder" ] && [ "$target" != include ] && ! grep -qw -- "$target" <<<" $allowed "; then
      echo "${file#"$root"/}:$line: $folder may not include $target/$(basename "$name") (allowed: ${allowed:-none})"
      failures=$((failures + 1))
    fi
  done < <(grep -Hn '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$root/$folder"/*.[ch] "$root/$folder"/*.cu 2>/dev/null || true)
done < "$rules"

if [ "$failures" -gt 0 ]; then
  echo "check_layers: $failures include(s) break the layer order of $rules"
  exit 1
fi
echo "check_layers: every include follows $rules"
